//! `commit.after` (docs/EVENTS.md §1.1; precommit rule 8, git_action rule 9): fired once after every
//! commit in the workspace, through the generated post-commit git hook (chained like the
//! pre-commit one) or, without it, by the `git-commit` action; AutoAgent's `PostGitCommit`
//! hooks with it. A notice: nothing it does fails the commit.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;

use common::{Workspace, check, code, stderr};

/// A repository with an identity and one commit.
fn repo() -> Workspace {
    let ws = Workspace::git();
    ws.git_ok(&["config", "user.name", "Test"]);
    ws.git_ok(&["config", "user.email", "test@example.com"]);
    ws.stage("README.md", "hello\n");
    check(ws.commit("initial"), "initial commit");
    ws
}

fn head(ws: &Workspace) -> String {
    ws.git_ok(&["rev-parse", "HEAD"]).trim().to_owned()
}

fn read(path: &std::path::Path) -> String {
    fs::read_to_string(path).unwrap_or_default()
}

/// AutoAgent's `PostGitCommit` runs once after the `git-commit` action's commit: fired by the
/// action when hookvisor's post-commit hook is not installed, by that hook when it is.
#[test]
fn autoagent_post_git_commit_runs_once_after_the_git_commit_action() {
    let ws = repo();
    let log = ws.base().join("after.log");
    ws.write(
        ".autoagent/config.json",
        &format!(
            r#"{{"hooks": {{"PostGitCommit": [{{"type": "command", "command": "echo {{{{commit}}}} >> '{}'"}}]}}}}"#,
            log.display()
        ),
    );
    ws.write(
        ".discobot/hooks/commit.yml",
        "---\nevent: task.complete\naction: git-commit\nmessage: \"task ${task_id}\"\n---\n",
    );
    let fire = || {
        let out = ws.hookvisor(&["fire", "task.complete", "--data", r#"{"task_id": "T-1"}"#]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
    };

    ws.write("src/a.txt", "a\n");
    fire();
    assert_eq!(
        read(&log),
        format!("{}\n", head(&ws)),
        "without the git hook"
    );

    let out = ws.hookvisor(&["post-commit", "install"]);
    assert!(
        common::stdout(&out).contains("installed the post-commit hook"),
        "{}",
        stderr(&out)
    );
    let first = head(&ws);
    ws.write("src/b.txt", "b\n");
    fire();
    assert_ne!(head(&ws), first);
    assert_eq!(
        read(&log),
        format!("{first}\n{}\n", head(&ws)),
        "with the git hook"
    );
}

/// The agent's own `git commit` fires `commit.after` through the post-commit hook `eval`
/// installs, after the user's own post-commit hook, which is kept and put back; a failing
/// hook leaves the commit made.
#[test]
fn an_own_git_commit_fires_commit_after_through_the_chained_git_hook() {
    let ws = repo();
    let seen = ws.base().join("seen");
    let foreign_log = ws.base().join("foreign");
    let foreign = format!(
        "#!/bin/sh\necho foreign >> '{}'\nexit 1\n",
        foreign_log.display()
    );
    let git_hook = ws.path().join(".git/hooks/post-commit");
    fs::write(&git_hook, &foreign).unwrap();
    fs::set_permissions(&git_hook, fs::Permissions::from_mode(0o755)).unwrap();
    ws.write(
        ".discobot/hooks/a-notify.yml",
        &format!(
            "---\nevent: commit.after\nrun: echo \"${{commit}} ${{files}}\" >> '{}'\n---\n",
            seen.display()
        ),
    );
    ws.write(
        ".discobot/hooks/b-broken.yml",
        "---\nevent: commit.after\nrun: 'exit 7'\n---\n",
    );
    check(ws.hookvisor(&["eval"]), "eval");
    let kept = ws.path().join(".git/hooks/post-commit.original");
    assert_eq!(fs::read_to_string(&kept).unwrap(), foreign);

    ws.stage("src/a.rs", "fn a() {}\n");
    let out = ws.commit("own commit");
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("commit.after hook \"b-broken\" failed"),
        "{}",
        stderr(&out)
    );
    assert_eq!(read(&foreign_log), "foreign\n");
    assert_eq!(read(&seen), format!("{} src/a.rs\n", head(&ws)));

    // HOOKVISOR_SKIP skips them as it skips the pre-commit hooks.
    ws.stage("src/b.rs", "fn b() {}\n");
    let mut cmd = ws.git_command(ws.path());
    let out = cmd
        .args(["commit", "-q", "-m", "skipped"])
        .env("HOOKVISOR_SKIP", "1")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(read(&seen).lines().count(), 1);

    let out = ws.hookvisor(&["post-commit", "uninstall"]);
    assert!(
        common::stdout(&out).contains("put back the original"),
        "{}",
        common::stdout(&out)
    );
    assert_eq!(fs::read_to_string(&git_hook).unwrap(), foreign);
}

/// An agent's turn end installs the git hooks as `eval` does, so a `commit.after` hook added
/// while the agent works fires for its next commit.
#[test]
fn an_agents_turn_end_installs_the_post_commit_hook() {
    let ws = repo();
    ws.write(
        ".discobot/hooks/notify.yml",
        "---\nevent: commit.after\nrun: 'true'\n---\n",
    );
    let stop = format!(
        r#"{{"session_id":"s1","cwd":"{}","hook_event_name":"Stop","stop_hook_active":false}}"#,
        ws.path().display()
    );
    let mut child = ws
        .hookvisor_command()
        .args(["adapter", "claude"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stop.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let git_hook = fs::read_to_string(ws.path().join(".git/hooks/post-commit")).unwrap_or_default();
    assert!(git_hook.contains("# discobot:managed"), "{git_hook}");
}

/// An `await: false` hook never holds the reply, on any path (docs/EVENTS.md §1.3): a `commit.after`
/// one, or a `commit.before` one (a notice there too), runs detached, so the commit returns
/// while it still runs.
#[test]
fn unawaited_commit_hooks_do_not_hold_the_commit() {
    for event in ["commit.after", "commit.before"] {
        let ws = repo();
        let probe = common::unawaited::Unawaited::new(ws.base());
        ws.write(
            ".discobot/hooks/notify.yml",
            &format!("---\nevent: {event}\n{}\n---\n", probe.front()),
        );
        check(ws.hookvisor(&["eval"]), "eval installs the git hooks");
        ws.stage("a.txt", "a\n");
        let out = ws.commit("with a slow notice");
        assert!(out.status.success(), "{event}: {}", stderr(&out));
        assert_eq!(probe.still_running(event), format!("{event}\n"));
    }
}

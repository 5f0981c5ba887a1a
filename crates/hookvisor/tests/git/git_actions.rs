//! `action: git-commit` and `action: git-push` (docs/EVENTS.md §1.2, §4.1 rule 4, §5 rule 24) fired
//! through the real `hookvisor fire`, on real repositories and a local bare remote.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::{Workspace, check, code, json_of, stderr, stdout};

/// A repository with an identity, one commit, and `.discobot/hooks/NAME.yml` holding `front`.
fn repo(name: &str, front: &str) -> Workspace {
    let ws = Workspace::git();
    ws.git_ok(&["config", "user.name", "Test"]);
    ws.git_ok(&["config", "user.email", "test@example.com"]);
    ws.stage("README.md", "hello\n");
    check(ws.commit("initial"), "initial commit");
    ws.write(
        &format!(".discobot/hooks/{name}.yml"),
        &format!("---\nevent: task.complete\n{front}---\n"),
    );
    ws
}

/// `hookvisor fire task.complete --json` with `data`; the reply.
fn fire(ws: &Workspace, data: &str) -> (i32, serde_json::Value) {
    let out = ws.hookvisor(&["fire", "task.complete", "--json", "--data", data]);
    (code(&out), json_of(&out))
}

fn head(ws: &Workspace) -> String {
    ws.git_ok(&["rev-parse", "HEAD"])
}

/// The message of `HEAD` exactly as stored in the commit object.
fn stored_message(ws: &Workspace) -> Vec<u8> {
    let raw = ws
        .git_command(ws.path())
        .args(["cat-file", "commit", "HEAD"])
        .output()
        .unwrap()
        .stdout;
    let at = raw.windows(2).position(|w| w == b"\n\n").unwrap();
    raw[at + 2..].to_vec()
}

fn log(ws: &Workspace, hook: &str) -> String {
    fs::read_to_string(ws.state_dir().join(format!("output/{hook}.log"))).unwrap()
}

/// Paths under `dir` whose name contains `needle`.
fn find(dir: &Path, needle: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_name().to_string_lossy().contains(needle) {
            found.push(path.clone());
        }
        if entry.file_type().unwrap().is_dir() {
            found.extend(find(&path, needle));
        }
    }
    found
}

#[test]
fn a_message_full_of_shell_metacharacters_is_committed_verbatim() {
    // YAML double quotes: \n is a newline, \" a quote; the rest reaches git as written.
    let ws = repo(
        "commit",
        "action: git-commit\nmessage: \"done $(touch SENTINEL) `touch SENTINEL` \\\"dq\\\" 's' ; | & > < * ~ \\\\ $HOME\\n\\n  ${task_id}\\n# not a comment\\n\\n\"\n",
    );
    ws.write("src/new.rs", "fn main() {}\n");
    let before = head(&ws);
    let (exit, reply) = fire(
        &ws,
        r#"{"task_id": "T-1 $(touch SENTINEL) `touch SENTINEL`"}"#,
    );
    assert_eq!(exit, 0, "{reply}");
    assert_eq!(reply["results"][0]["success"], true, "{reply}");
    assert_ne!(head(&ws), before, "a commit was made");
    let want = "done $(touch SENTINEL) `touch SENTINEL` \"dq\" 's' ; | & > < * ~ \\ $HOME\n\n  \
                T-1 $(touch SENTINEL) `touch SENTINEL`\n# not a comment\n\n";
    assert_eq!(String::from_utf8(stored_message(&ws)).unwrap(), want);
    // `%B` shows it the same, byte for byte (plus log's own newline).
    assert_eq!(
        ws.git_ok(&["log", "-1", "--format=%B"]),
        format!("{want}\n")
    );
    assert!(find(ws.base(), "SENTINEL").is_empty(), "nothing was run");
    // add: all (the default) took the untracked file.
    let files = ws.git_ok(&["show", "--name-only", "--format=", "HEAD"]);
    assert!(files.contains("src/new.rs"), "{files}");
    assert!(
        log(&ws, "commit").contains("committed "),
        "{}",
        log(&ws, "commit")
    );
    let entry = &ws.status()["hooks"]["commit"];
    assert_eq!(entry["action"], "git-commit", "{entry}");
    assert_eq!(entry["lastResult"], "success", "{entry}");
}

#[test]
fn nothing_to_commit_is_success_and_makes_no_commit() {
    let ws = repo("commit", "action: git-commit\nmessage: \"task done\"\n");
    let list = json_of(&ws.hookvisor(&["list", "--json"]));
    let hook = &list["hooks"][0];
    assert_eq!(hook["action"], "git-commit", "{hook}");
    assert_eq!(hook["message"], "task done", "{hook}");
    assert_eq!(hook["add"], "all", "{hook}");
    assert_eq!(hook["noVerify"], false, "{hook}");
    // The hook file itself is new: the first commit takes it.
    let (_, first) = fire(&ws, "{}");
    assert_eq!(first["results"][0]["success"], true, "{first}");
    let before = head(&ws);
    let (exit, reply) = fire(&ws, "{}");
    assert_eq!(exit, 0);
    assert_eq!(reply["results"][0]["success"], true, "{reply}");
    assert_eq!(head(&ws), before, "no empty commit");
    assert!(log(&ws, "commit").contains("nothing to commit; no commit made"));
}

#[test]
fn add_modes_choose_what_the_commit_takes() {
    let table = [
        ("all", &["tracked.txt", "staged.txt", "untracked.txt"][..]),
        ("tracked", &["tracked.txt", "staged.txt"][..]),
        ("staged", &["staged.txt"][..]),
    ];
    for (mode, want) in table {
        let ws = repo(
            "commit",
            &format!("action: git-commit\nmessage: m\nadd: {mode}\n"),
        );
        // The hook file is committed first, so each case's commit holds only its files.
        ws.git_ok(&["add", ".discobot"]);
        check(ws.commit("hook"), "commit the hook");
        ws.stage("tracked.txt", "one\n");
        ws.stage("staged.txt", "one\n");
        check(ws.commit("base"), "base commit");
        ws.write("tracked.txt", "two\n");
        ws.stage("staged.txt", "two\n");
        ws.write("untracked.txt", "new\n");
        let (_, reply) = fire(&ws, "{}");
        assert_eq!(reply["results"][0]["success"], true, "{mode}: {reply}");
        let files = ws.git_ok(&["show", "--name-only", "--format=", "HEAD"]);
        let mut files: Vec<&str> = files.lines().collect();
        files.sort_unstable();
        let mut want = want.to_vec();
        want.sort_unstable();
        assert_eq!(files, want, "add: {mode}");
    }
}

/// A repository whose `commit.before` gate refuses every commit and counts its runs in
/// `../gate-runs`, installed as the git hook.
fn repo_with_gate(front: &str) -> Workspace {
    let ws = repo("commit", front);
    ws.write(
        ".discobot/hooks/gate.yml",
        "---\nevent: commit.before\nrun: |\n  echo run >> \"${workspace}/../gate-runs\"\n  echo 'the gate says no' >&2\n  exit 1\n---\n",
    );
    check(
        ws.hookvisor(&["pre-commit", "install"]),
        "pre-commit install",
    );
    ws
}

fn gate_runs(ws: &Workspace) -> usize {
    fs::read_to_string(ws.base().join("gate-runs"))
        .unwrap_or_default()
        .lines()
        .count()
}

#[test]
fn commit_before_gates_run_once_through_the_git_hook_and_no_verify_skips_them() {
    // Judged as any failure: with block_on: failure, the refused commit blocks the event.
    let ws = repo_with_gate("action: git-commit\nmessage: m\nblock_on: failure\n");
    let before = head(&ws);
    let out = ws.hookvisor(&["fire", "task.complete"]);
    assert_eq!(code(&out), 1, "blocked: {}", stderr(&out));
    let reason = stderr(&out);
    assert!(reason.contains("the gate says no"), "{reason}");
    assert!(
        reason.contains("git commit --cleanup=verbatim -F - exited 1"),
        "{reason}"
    );
    assert_eq!(head(&ws), before, "the gate refused the commit");
    assert_eq!(gate_runs(&ws), 1, "the gate ran once, inside git commit");
    let status = ws.status();
    assert_eq!(status["hooks"]["gate"]["lastResult"], "failure", "{status}");
    assert_eq!(
        status["hooks"]["commit"]["lastResult"], "failure",
        "{status}"
    );

    // Without block_on the failure is recorded and the event allowed (exit2 is the default).
    let ws = repo_with_gate("action: git-commit\nmessage: m\n");
    let (exit, reply) = fire(&ws, "{}");
    assert_eq!(exit, 0, "{reply}");
    assert_eq!(reply["decision"], "allow");
    assert_eq!(reply["results"][0]["success"], false, "{reply}");
    assert_eq!(gate_runs(&ws), 1);

    // no_verify: the gate does not run and the commit is made.
    let ws = repo_with_gate("action: git-commit\nmessage: m\nno_verify: true\n");
    let before = head(&ws);
    let (exit, reply) = fire(&ws, "{}");
    assert_eq!(exit, 0, "{reply}");
    assert_eq!(reply["results"][0]["success"], true, "{reply}");
    assert_ne!(head(&ws), before);
    assert_eq!(gate_runs(&ws), 0);
}

#[test]
fn git_variables_of_a_hook_context_neither_redirect_git_nor_turn_the_gates_off() {
    let ws = repo_with_gate("action: git-commit\nmessage: m\n");
    let other = ws.base().join("other");
    check(
        ws.git_command(ws.base())
            .args(["init", "-q", "other"])
            .output()
            .unwrap(),
        "init other",
    );
    let out = ws
        .hookvisor_command()
        .args(["fire", "task.complete"])
        .env("GIT_DIR", other.join(".git"))
        .env("GIT_WORK_TREE", &other)
        .env("GIT_INDEX_FILE", other.join(".git/index"))
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "core.hooksPath")
        .env("GIT_CONFIG_VALUE_0", "/dev/null")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        gate_runs(&ws),
        1,
        "the gate still ran in the workspace's git hook"
    );
    assert!(log(&ws, "commit").contains(&format!("{}\n", ws.path().display())));
    let refs = ws
        .git_command(&other)
        .args(["rev-parse", "--verify", "--quiet", "HEAD"])
        .output()
        .unwrap();
    assert!(
        !refs.status.success(),
        "nothing was committed in the other repository"
    );
}

/// A repository with a bare remote `origin` (at `../remote.git`) and a push hook.
fn repo_with_remote(front: &str) -> (Workspace, PathBuf) {
    let ws = repo("push", front);
    ws.git_ok(&["add", ".discobot"]);
    check(ws.commit("hook"), "commit the hook");
    let bare = ws.base().join("remote.git");
    check(
        ws.git_command(ws.base())
            .args(["init", "-q", "--bare", "remote.git"])
            .output()
            .unwrap(),
        "init bare",
    );
    ws.git_ok(&["remote", "add", "origin", bare.to_str().unwrap()]);
    (ws, bare)
}

fn remote_ref(ws: &Workspace, bare: &Path, name: &str) -> Option<String> {
    let out = ws
        .git_command(bare)
        .args(["rev-parse", "--verify", "--quiet", name])
        .output()
        .unwrap();
    out.status.success().then(|| stdout(&out))
}

#[test]
fn a_push_to_a_local_bare_remote_sets_the_missing_upstream() {
    let (ws, bare) = repo_with_remote("action: git-push\n");
    let (exit, reply) = fire(&ws, "{}");
    assert_eq!(exit, 0, "{reply}");
    assert_eq!(
        reply["results"][0]["success"],
        true,
        "{reply}: {}",
        log(&ws, "push")
    );
    assert_eq!(remote_ref(&ws, &bare, "refs/heads/main"), Some(head(&ws)));
    assert_eq!(
        ws.git_ok(&["rev-parse", "--abbrev-ref", "main@{upstream}"]),
        "origin/main\n"
    );
    assert!(log(&ws, "push").contains("pushed main to origin, upstream set"));

    // The next push has an upstream already: plain, and fast-forward.
    ws.stage("next.txt", "n\n");
    check(ws.commit("next"), "next commit");
    let (_, reply) = fire(&ws, "{}");
    assert_eq!(reply["results"][0]["success"], true, "{reply}");
    assert_eq!(remote_ref(&ws, &bare, "refs/heads/main"), Some(head(&ws)));
    let pushed = log(&ws, "push");
    assert!(pushed.contains("$ git push -- origin"), "{pushed}");
    assert!(pushed.contains("pushed main to origin\n"), "{pushed}");
}

#[test]
fn a_push_that_would_need_force_is_refused_by_git_and_reported() {
    let (ws, bare) = repo_with_remote("action: git-push\nbranch: main\nblock_on: failure\n");
    let (_, reply) = fire(&ws, "{}");
    assert_eq!(reply["results"][0]["success"], true, "{reply}");
    // The remote moves on from elsewhere; the workspace rewrites its own last commit.
    let clone = ws.base().join("clone");
    check(
        ws.git_command(ws.base())
            .args(["clone", "-q", "-b", "main", bare.to_str().unwrap(), "clone"])
            .output()
            .unwrap(),
        "clone",
    );
    fs::write(clone.join("theirs.txt"), "t\n").unwrap();
    ws.git_command(&clone).args(["add", "."]).output().unwrap();
    check(
        ws.git_command(&clone)
            .args(["commit", "-q", "-m", "theirs"])
            .output()
            .unwrap(),
        "their commit",
    );
    check(
        ws.git_command(&clone)
            .args(["push", "-q", "origin", "main"])
            .output()
            .unwrap(),
        "their push",
    );
    let theirs = remote_ref(&ws, &bare, "refs/heads/main");
    ws.stage("mine.txt", "m\n");
    check(ws.commit("mine"), "my commit");
    let out = ws.hookvisor(&["fire", "task.complete"]);
    assert_eq!(code(&out), 1, "blocked: {}", stderr(&out));
    let reason = stderr(&out);
    assert!(reason.contains("rejected"), "{reason}");
    assert!(reason.contains("hookvisor never forces"), "{reason}");
    assert_eq!(
        remote_ref(&ws, &bare, "refs/heads/main"),
        theirs,
        "nothing forced"
    );
}

#[test]
fn a_dash_leading_ref_is_refused_at_load_and_when_templated_at_run_time() {
    let ws = repo("push", "action: git-push\nbranch: -f\n");
    let out = ws.hookvisor(&["check"]);
    assert_ne!(code(&out), 0);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(
        text.contains("push.yml:4: branch: \"-f\" starts with '-'"),
        "{text}"
    );

    let (ws, bare) = repo_with_remote(
        "action: git-push\nbranch: \"${target}\"\non_failure: retry\nretries: 2\nretry_delay: 0\n",
    );
    let list = check(ws.hookvisor(&["list"]), "list");
    assert!(
        list.contains("action: git-push  remote: origin  branch: ${target}"),
        "{list}"
    );
    let (_, reply) = fire(&ws, r#"{"target": "--force"}"#);
    assert_eq!(reply["results"][0]["success"], false, "{reply}");
    let entry = &ws.status()["hooks"]["push"];
    assert_eq!(entry["runCount"], 1, "a refusal is never re-run: {entry}");
    assert!(log(&ws, "push").contains("branch: \"--force\" starts with '-'"));
    assert_eq!(remote_ref(&ws, &bare, "refs/heads/main"), None);
}

#[test]
fn a_git_step_past_the_hooks_timeout_is_stopped_with_its_group() {
    // Three seconds: `git commit` must reach its hook before the clock runs out.
    let ws = repo("commit", "action: git-commit\nmessage: m\ntimeout: 3\n");
    // A git hook that hangs: it says who it is, then waits for ever.
    let hook = ws.path().join(".git/hooks/pre-commit");
    let pid_file = ws.base().join("hung.pid");
    fs::write(
        &hook,
        format!(
            "#!/bin/sh\necho $$ > '{}'\nexec sleep 600\n",
            pid_file.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();
    let before = head(&ws);
    let started = std::time::Instant::now();
    let (_, reply) = fire(&ws, "{}");
    assert!(
        started.elapsed() < std::time::Duration::from_secs(30),
        "{reply}"
    );
    assert_eq!(reply["results"][0]["timedOut"], true, "{reply}");
    assert_eq!(reply["results"][0]["exitCode"], 124, "{reply}");
    assert_eq!(head(&ws), before);
    let pid = fs::read_to_string(&pid_file).unwrap();
    let stat = fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
    // Gone, or dead and waiting for its reaper.
    assert!(
        stat.is_empty() || stat.contains(") Z "),
        "the hung hook still runs: {stat}"
    );
    assert!(
        log(&ws, "commit").contains("timed out after 3s"),
        "{}",
        log(&ws, "commit")
    );
}

#[test]
fn an_unknown_name_in_the_message_fails_the_run_once_and_check_warns() {
    let ws = repo(
        "commit",
        "action: git-commit\nmessage: \"done ${no_such_name}\"\non_failure: retry\nretries: 2\nretry_delay: 0\n",
    );
    let out = ws.hookvisor(&["check"]);
    let text = format!("{}{}", stdout(&out), stderr(&out));
    assert!(text.contains("no_such_name"), "{text}");
    let before = head(&ws);
    let (_, reply) = fire(&ws, "{}");
    assert_eq!(reply["results"][0]["success"], false, "{reply}");
    assert_eq!(head(&ws), before);
    assert_eq!(
        ws.status()["hooks"]["commit"]["runCount"],
        1,
        "never re-run"
    );
    assert!(log(&ws, "commit").contains("${no_such_name} is no template variable"));
}

#[test]
fn git_fields_on_a_script_are_refused_or_leave_a_phase1_hook_as_it_was() {
    let ws = Workspace::git();
    // A phase-1 file hook that happens to carry `branch:` stays a phase-1 file hook.
    ws.hook("lint.sh", "file", "pattern: '*.rs'\nbranch: main", "exit 0");
    // An executable script cannot be a git action.
    ws.hook("push.sh", "pre-commit", "action: git-push", "exit 0");
    let out = ws.hookvisor(&["list", "--json"]);
    let text = stdout(&out);
    let list: serde_json::Value = serde_json::from_str(&text).unwrap();
    let hooks = list["hooks"].as_array().unwrap();
    let lint = hooks.iter().find(|h| h["id"] == "lint").unwrap();
    assert_eq!(lint["type"], "file", "{lint}");
    // Its action is its script, with no git field (`list --json` gives every hook its event
    // fields, docs/EVENTS.md §5 rule 10).
    assert_eq!(lint["action"], "command", "{lint}");
    assert!(lint.get("branch").is_none(), "{lint}");
    let problems = list["problems"].to_string();
    assert!(problems.contains("is for a declarative hook"), "{problems}");

    // no_verify turns the gates off: what its line shows is what counts, not a YAML escape.
    ws.write(
        ".discobot/hooks/sly.yml",
        "---\nevent: task.complete\naction: git-commit\nmessage: m\nno_verify: \"\\x74rue\"\n---\n",
    );
    let text = stdout(&ws.hookvisor(&["check"]));
    assert!(
        text.contains("sly.yml:5: no_verify: '\\x74rue' is not true or false"),
        "{text}"
    );
}

#[test]
fn a_commit_is_refused_while_the_gates_git_hook_is_not_installed() {
    let ws = repo("commit", "action: git-commit\nmessage: m\n");
    ws.write(
        ".discobot/hooks/gate.yml",
        "---\nevent: commit.before\nrun: exit 0\n---\n",
    );
    let before = head(&ws);
    let (_, reply) = fire(&ws, "{}");
    assert_eq!(reply["results"][0]["success"], false, "{reply}");
    assert_eq!(head(&ws), before, "no commit past gates that cannot run");
    assert!(log(&ws, "commit").contains("hookvisor pre-commit install"));
    check(ws.hookvisor(&["pre-commit", "install"]), "install");
    let (_, reply) = fire(&ws, "{}");
    assert_eq!(reply["results"][0]["success"], true, "{reply}");
    assert_ne!(head(&ws), before);
}

#[test]
fn a_push_to_a_remote_the_repository_does_not_have_is_refused() {
    let (ws, _bare) = repo_with_remote("action: git-push\nremote: \"${target}\"\n");
    // A directory of that name would be taken for a path by git push.
    check(
        ws.git_command(ws.path())
            .args(["init", "-q", "--bare", "elsewhere"])
            .output()
            .unwrap(),
        "init elsewhere",
    );
    let (_, reply) = fire(&ws, r#"{"target": "elsewhere"}"#);
    assert_eq!(reply["results"][0]["success"], false, "{reply}");
    assert!(log(&ws, "push").contains("there is no remote \"elsewhere\""));
    let pushed = ws
        .git_command(&ws.path().join("elsewhere"))
        .args(["rev-parse", "--verify", "--quiet", "refs/heads/main"])
        .output()
        .unwrap();
    assert!(!pushed.status.success(), "nothing reached the path");
}

/// Attack: the repository is root's alone but for `.git/hooks`, which is the agent's (made in
/// an earlier run); the agent puts its `pre-commit` there. Root's `fire` of a `git-commit`
/// action ran it as root. Root now refuses (exit 2, one line naming `.git/hooks`): nothing is
/// committed and the agent's hook never runs. A hook file the agent owns in a hooks directory
/// only root can write is refused alike, and so is the agent's directory that root's config
/// names as `core.hooksPath` (husky's `.husky`, a directory of the work tree).
#[test]
fn root_runs_no_git_hook_the_agent_can_change() {
    use std::os::unix::process::CommandExt;
    let Some(_turn) = common::ensure_test_user() else {
        return;
    };
    let user = common::test_user();
    for (hooks, owned) in [
        (".git/hooks", ".git/hooks"),
        (".git/hooks", ".git/hooks/pre-commit"),
        (".husky", ".husky"),
    ] {
        let ws = repo("commit", "action: git-commit\nmessage: done\n");
        if hooks == ".husky" {
            fs::create_dir(ws.path().join(hooks)).unwrap();
            ws.git_ok(&["config", "core.hooksPath", hooks]);
        }
        ws.stage(
            ".discobot/hooks/commit.yml",
            &fs::read_to_string(ws.path().join(".discobot/hooks/commit.yml")).unwrap(),
        );
        check(ws.commit("hooks"), "commit the hook");
        fs::set_permissions(ws.base(), fs::Permissions::from_mode(0o755)).unwrap();
        let pre_commit = ws.path().join(hooks).join("pre-commit");
        fs::write(&pre_commit, "").unwrap();
        let chown = std::process::Command::new("chown")
            .args(["-R", &format!("{}:{}", user.uid, user.gid)])
            .arg(ws.path().join(owned))
            .status()
            .unwrap();
        assert!(chown.success());
        let marker = ws.base().join("git-hook-ran");
        let plant = format!(
            "printf '#!/bin/sh\\nid -u > {}\\n' > {hook} && chmod 755 {hook}",
            marker.display(),
            hook = pre_commit.display()
        );
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", &plant])
            .uid(user.uid.as_raw())
            .gid(user.gid.as_raw())
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        ws.write("new.txt", "new\n");
        let before = head(&ws);
        let out = ws.hookvisor(&["fire", "task.complete", "--data", "{}"]);
        let err = stderr(&out);
        assert!(
            !marker.exists(),
            "({owned}): root ran the agent's git hook; {err}"
        );
        assert_eq!(head(&ws), before, "({owned}): {err}");
        assert_eq!(code(&out), 2, "({owned}): {err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(&ws.path().join(hooks).display().to_string()),
            "{err}"
        );
    }
}

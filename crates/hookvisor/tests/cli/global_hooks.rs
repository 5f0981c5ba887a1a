//! End-to-end tests of global hooks (docs/EVENTS.md §2.1, §5 rule 7): `~/.config/hookvisor/hooks`
//! of the private home, run by the built `hookvisor` after the workspace's hooks in `eval` and
//! `fire` on a real git repository, turned off by `.discobot/hookvisor.yml`, listed with their
//! path, and never run as root.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::{Workspace, code, json_of, stdout};
use serde_json::{Value, json};

/// An executable hook script in `dir` that appends `tag` to the trace, then runs `body`.
fn script(ws: &Workspace, dir: &Path, file: &str, front: &str, tag: &str, body: &str) -> PathBuf {
    let mut text = String::from("#!/bin/sh\n#---\n");
    for line in front.lines() {
        text.push_str(&format!("# {line}\n"));
    }
    text.push_str(&format!(
        "#---\necho {tag} >> '{}'\n{body}\n",
        trace_path(ws).display()
    ));
    fs::create_dir_all(dir).unwrap();
    let path = dir.join(file);
    fs::write(&path, text).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    path
}

/// The trace, outside the workspace so that writing it changes no file a hook watches.
fn trace_path(ws: &Workspace) -> PathBuf {
    ws.base().join("trace")
}

/// What the hooks appended to the trace, then emptied.
fn take_trace(ws: &Workspace) -> Vec<String> {
    let text = fs::read_to_string(trace_path(ws)).unwrap_or_default();
    let _ = fs::remove_file(trace_path(ws));
    text.lines().map(str::to_owned).collect()
}

/// A git workspace with a workspace and a global file hook on `*.txt` and a workspace and a
/// global `tool.before` hook; returns the global hooks directory.
fn both(ws: &Workspace) -> PathBuf {
    let global = ws.global_hooks();
    let hooks = ws.path().join(".discobot/hooks");
    // "a-" sorts first: the order must come from the source, not the file name.
    script(
        ws,
        &global,
        "a-lint.sh",
        "type: file\npattern: '*.txt'",
        "global-file",
        "exit 0",
    );
    script(
        ws,
        &hooks,
        "lint.sh",
        "type: file\npattern: '*.txt'",
        "ws-file",
        "exit 0",
    );
    script(
        ws,
        &global,
        "a-guard.sh",
        "event: tool.before\ntool: Bash",
        "global-tool",
        "exit 0",
    );
    script(
        ws,
        &hooks,
        "guard.sh",
        "event: tool.before\ntool: Bash",
        "ws-tool",
        "exit 0",
    );
    global
}

fn hook_ids(report: &Value) -> Vec<&str> {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["hookId"].as_str().unwrap())
        .collect()
}

#[test]
fn global_hooks_run_after_the_workspace_hooks_in_eval_and_fire() {
    let ws = Workspace::git();
    let global = both(&ws);
    ws.write("notes.txt", "hello\n");

    let eval = ws.hookvisor(&["eval", "--json"]);
    assert_eq!(code(&eval), 0, "{}", common::stderr(&eval));
    let report = json_of(&eval);
    assert_eq!(hook_ids(&report), ["lint", "global:a-lint"]);
    assert_eq!(take_trace(&ws), ["ws-file", "global-file"]);
    let status = ws.status();
    assert_eq!(status["hooks"]["global:a-lint"]["lastResult"], "success");
    assert_eq!(
        status["hooks"]["global:a-lint"]["source"],
        format!("{}:1", global.join("a-lint.sh").display())
    );
    assert!(
        ws.state_dir().join("output/global:a-lint.log").is_file(),
        "the global hook has its own log"
    );

    let fire = ws.hookvisor(&[
        "fire",
        "tool.before",
        "--json",
        "--data",
        r#"{"tool_name":"Bash"}"#,
    ]);
    assert_eq!(code(&fire), 0, "{}", common::stderr(&fire));
    assert_eq!(hook_ids(&json_of(&fire)), ["guard", "global:a-guard"]);
    assert_eq!(take_trace(&ws), ["ws-tool", "global-tool"]);
    let status = ws.status();
    assert_eq!(
        status["hooks"]["global:a-guard"]["source"],
        format!("{}:1", global.join("a-guard.sh").display())
    );
    assert_eq!(
        status["hooks"]["guard"]["source"],
        ".discobot/hooks/guard.sh:1"
    );

    // A failing workspace hook ends the turn's hooks before the global one runs.
    common::tick();
    script(
        &ws,
        &ws.path().join(".discobot/hooks"),
        "lint.sh",
        "type: file\npattern: '*.txt'",
        "ws-file",
        "echo broken; exit 1",
    );
    ws.write("notes.txt", "changed\n");
    let eval = ws.hookvisor(&["eval", "--json"]);
    assert_eq!(code(&eval), 1, "{}", common::stderr(&eval));
    assert_eq!(json_of(&eval)["action"], "reprompt");
    assert_eq!(take_trace(&ws), ["ws-file"]);
}

#[test]
fn disable_global_hooks_and_sources_turn_them_off() {
    let ws = Workspace::git();
    both(&ws);
    for config in ["disable_global_hooks: true\n", "sources: [discobot]\n"] {
        ws.write(".discobot/hookvisor.yml", config);
        common::tick();
        ws.write("notes.txt", config);
        let eval = ws.hookvisor(&["eval", "--json"]);
        assert_eq!(code(&eval), 0, "{config}: {}", common::stderr(&eval));
        assert_eq!(hook_ids(&json_of(&eval)), ["lint"], "{config}");
        let fire = ws.hookvisor(&[
            "fire",
            "tool.before",
            "--json",
            "--data",
            r#"{"tool_name":"Bash"}"#,
        ]);
        assert_eq!(hook_ids(&json_of(&fire)), ["guard"], "{config}");
        assert_eq!(take_trace(&ws), ["ws-file", "ws-tool"], "{config}");

        let check = ws.hookvisor(&["check"]);
        assert_eq!(code(&check), 0, "{config}: {}", stdout(&check));
        let why = if config.starts_with("disable") {
            "source: global skipped (disable_global_hooks: true)"
        } else {
            "source: global skipped (not in sources)"
        };
        assert!(
            stdout(&check).lines().any(|l| l == why),
            "{config}: {}",
            stdout(&check)
        );
        let list = json_of(&ws.hookvisor(&["list", "--json"]));
        let ids: Vec<&str> = list["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h["id"].as_str().unwrap())
            .collect();
        assert_eq!(ids, ["guard", "lint"], "{config}");
    }
}

#[test]
fn list_and_check_show_global_hooks_with_their_path() {
    let ws = Workspace::git();
    let global = both(&ws);
    let list = json_of(&ws.hookvisor(&["list", "--json"]));
    let hooks: Vec<(&str, &str)> = list["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            (
                h["id"].as_str().unwrap(),
                h["source"].as_str().unwrap_or("-"),
            )
        })
        .collect();
    let global_source = |file: &str| format!("{}:1", global.join(file).display());
    let (guard, lint) = (global_source("a-guard.sh"), global_source("a-lint.sh"));
    assert_eq!(
        hooks,
        [
            ("guard", ".discobot/hooks/guard.sh:1"),
            ("lint", ".discobot/hooks/lint.sh:1"),
            ("global:a-guard", guard.as_str()),
            ("global:a-lint", lint.as_str()),
        ]
    );
    let table = stdout(&ws.hookvisor(&["list"]));
    // Rows start at the margin; an event hook's fields follow on an indented line.
    let rows: Vec<&str> = table
        .lines()
        .filter(|l| !l.starts_with(' '))
        .filter_map(|l| l.split_whitespace().next())
        .collect();
    assert_eq!(
        rows[..5],
        ["ID", "guard", "lint", "global:a-guard", "global:a-lint"],
        "{table}"
    );
    assert!(
        table.contains(&format!("source: global used ({})", global.display())),
        "{table}"
    );
    let check = ws.hookvisor(&["check"]);
    assert_eq!(code(&check), 0);
    let text = stdout(&check);
    assert!(text.contains("source: discobot used ("), "{text}");
    assert!(
        text.contains("source: iteratr skipped (no .iteratr.hooks.yml)"),
        "{text}"
    );
}

/// The global hooks directory is the user's, which the agent can write: a `run_as: root` hook
/// there is a problem and never runs, even when `hookvisor session` runs as root (tests run as
/// root) and runs the workspace's root hooks.
#[test]
fn a_global_root_hook_is_refused_and_never_runs() {
    let ws = Workspace::new();
    let global = ws.global_hooks();
    let root = script(
        &ws,
        &global,
        "setup.sh",
        "type: session\nblocking: true\nrun_as: root",
        "global-root",
        "exit 0",
    );
    script(
        &ws,
        &global,
        "user.sh",
        "type: session\nblocking: true",
        "global-user",
        "exit 0",
    );
    script(
        &ws,
        &ws.path().join(".discobot/hooks"),
        "ws.sh",
        "type: session\nblocking: true",
        "ws",
        "exit 0",
    );

    let check = ws.hookvisor(&["check"]);
    assert_eq!(code(&check), 1);
    let text = stdout(&check);
    let want = format!(
        "{}:5: run_as: root is refused for a global hook",
        root.display()
    );
    assert!(text.lines().any(|l| l.starts_with(&want)), "{text}");

    let session = ws.hookvisor(&["session"]);
    assert!(
        common::stderr(&session).contains("run_as: root is refused"),
        "{}",
        common::stderr(&session)
    );
    assert_eq!(take_trace(&ws), ["ws", "global-user"]);
    let status = ws.status();
    assert!(status["hooks"].get("global:setup").is_none(), "{status}");
    assert_eq!(
        status["hooks"]["global:user"]["lastResult"],
        json!("success")
    );
}

#[test]
fn a_global_pre_commit_hook_runs_after_the_workspace_one_in_git_commit() {
    let ws = Workspace::git();
    let global = ws.global_hooks();
    script(
        &ws,
        &global,
        "a-commit.sh",
        "type: pre-commit",
        "global-commit",
        "exit 0",
    );
    script(
        &ws,
        &ws.path().join(".discobot/hooks"),
        "commit.sh",
        "type: pre-commit",
        "ws-commit",
        "exit 0",
    );
    common::check(
        ws.hookvisor(&["pre-commit", "install"]),
        "pre-commit install",
    );
    ws.stage("a.txt", "a\n");
    common::check(ws.commit("first"), "git commit");
    assert_eq!(take_trace(&ws), ["ws-commit", "global-commit"]);

    // A failing global hook blocks the commit like a workspace one.
    script(
        &ws,
        &global,
        "a-commit.sh",
        "type: pre-commit",
        "global-commit",
        "echo no >&2; exit 1",
    );
    ws.stage("b.txt", "b\n");
    let blocked = ws.commit("second");
    assert!(
        !blocked.status.success(),
        "the global hook's failure blocks the commit"
    );
    assert_eq!(take_trace(&ws), ["ws-commit", "global-commit"]);
}

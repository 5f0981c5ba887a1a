//! `hookvisor status` after agent sessions: the adapters keep each agent session's state under
//! `~/.discobot/<agent session>/hooks`, and plain `status` in the workspace finds them.

use crate::common;

use std::fs;
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, SystemTime};

use common::{Workspace, check};
use serde_json::json;

/// A git workspace whose file hook `lint` on `*.txt` fails, and a changed `notes.txt`.
fn workspace() -> Workspace {
    let ws = Workspace::git();
    ws.stage("README.md", "hello\n");
    check(ws.commit("initial"), "initial commit");
    ws.hook(
        "lint.sh",
        "file",
        "name: lint\npattern: '*.txt'",
        "echo bad; exit 1",
    );
    ws.write("notes.txt", "x\n");
    ws
}

/// `hookvisor` in `ws` with no state dir or session given: the defaults apply.
fn plain(ws: &Workspace) -> Command {
    let mut cmd = ws.hookvisor_command();
    cmd.env_remove("HOOKVISOR_STATE_DIR");
    cmd
}

/// One Claude Code turn of `session` in `ws`: the prompt event, then the stop.
fn claude_turn(ws: &Workspace, session: &str) {
    for event in ["UserPromptSubmit", "Stop"] {
        let input = json!({
            "session_id": session, "cwd": ws.path(), "hook_event_name": event,
            "prompt": "add notes", "stop_hook_active": false,
        });
        let mut child = plain(ws)
            .arg("claude-stop")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.to_string().as_bytes())
            .unwrap();
        check(child.wait_with_output().unwrap(), event);
    }
}

fn status(ws: &Workspace, args: &[&str]) -> String {
    check(
        plain(ws).arg("status").args(args).output().unwrap(),
        "status",
    )
}

#[test]
fn plain_status_shows_the_latest_agent_session_of_the_workspace() {
    let ws = workspace();
    claude_turn(&ws, "first-session");
    let first = ws
        .base()
        .join("home/.discobot/first-session/hooks/status.json");
    // An hour older, without waiting an hour.
    fs::File::options()
        .write(true)
        .open(&first)
        .unwrap()
        .set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();

    let said = status(&ws, &[]);
    assert!(
        said.starts_with("session first-session (the one agent session of this workspace"),
        "{said}"
    );
    assert!(said.contains("lint"), "{said}");
    assert!(said.contains("failure"), "{said}");

    ws.write("notes.txt", "y\n");
    claude_turn(&ws, "second-session");
    let said = status(&ws, &[]);
    assert!(
        said.starts_with("session second-session (the latest of 2 agent sessions"),
        "{said}"
    );
    assert!(
        said.contains("others, newest first: first-session; pick one with --session ID"),
        "{said}"
    );
    let json: serde_json::Value = serde_json::from_str(&status(&ws, &["--json"])).unwrap();
    assert_eq!(json["hooks"]["lint"]["runCount"], 1, "{json}");

    // --session picks one; then nothing else is looked for.
    let said = status(&ws, &["--session", "first-session"]);
    assert!(!said.contains("session first-session ("), "{said}");
    assert!(said.contains("lint"), "{said}");
}

#[test]
fn sessions_of_other_workspaces_and_named_sessions_are_not_picked() {
    let ws = workspace();
    let other = workspace();
    claude_turn(&ws, "mine");
    let said = status(&ws, &[]);
    assert!(said.starts_with("session mine ("), "{said}");

    // Another workspace run with the same home sees nothing of it.
    let output = plain(&other)
        .env("HOME", ws.base().join("home"))
        .arg("status")
        .output()
        .unwrap();
    let said = check(output, "status elsewhere");
    assert!(said.starts_with("no hook has run yet"), "{said}");

    // A session named by the environment is that session, as before.
    let output = plain(&ws)
        .env("DISCOBOT_SESSION_ID", "pod")
        .arg("status")
        .output()
        .unwrap();
    assert!(check(output, "status").starts_with("no hook has run yet"));
}

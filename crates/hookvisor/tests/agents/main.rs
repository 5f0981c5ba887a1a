//! The real-client suite: Claude Code, Codex and Gemini CLI at pinned versions (clients.json),
//! driven non-interactively against a scripted model server of ours on 127.0.0.1, with
//! `hookvisor install <agent>` in a workspace whose file hook fails while `notes.txt` says
//! "bad". It is the one place that tells when an agent release changes its hook protocol.
//!
//! Each client runs with a private HOME and config dir, talks only to the model server
//! (update checks and telemetry off), and is bounded by `timeout`. Assertions read the model
//! server's request log: which re-prompts reached the model, their attempt numbers, and that
//! nothing was asked after the loop guard gave up. A client that is not installed is skipped,
//! or fails under `CI=true`. With `HOOKVISOR_MODEL_DUMP=<dir>` the model server also writes
//! every request it gets there, numbered, to see what a new client release sends.

// A test crate: `pub` in its modules is their interface to each other.
#![allow(unreachable_pub)]

#[path = "../common/mod.rs"]
mod common;

mod claude;
mod clients;
mod codex;
mod gemini;
mod model;

use std::fs;
use std::path::Path;
use std::process::{Command, Output};

use common::{Workspace, check};
use model::{ModelServer, Reply};
use serde_json::Value;

/// The prompt every client gets; the scripted model acts on its marker.
pub const PROMPT: &str = "HOOKVISOR-TASK: write notes.txt";

/// Longest a client may run, in seconds, before `timeout` kills it.
const CLIENT_TIMEOUT: &str = "150";

/// A git workspace with one commit and a file hook `lint` on `*.txt` that fails while
/// `notes.txt` says "bad".
pub fn lint_workspace() -> Workspace {
    let ws = Workspace::git();
    ws.stage("README.md", "hello\n");
    check(ws.commit("initial"), "initial commit");
    ws.hook(
        "lint.sh",
        "file",
        "name: lint\npattern: '*.txt'",
        r#"if grep -q bad notes.txt; then echo "lint: notes.txt: says bad"; exit 1; fi"#,
    );
    ws
}

/// [`lint_workspace`] with `hookvisor install <agent>` done.
pub fn agent_workspace(agent: &str) -> Workspace {
    let ws = lint_workspace();
    let install = plain(&ws).args(["install", agent]).output().unwrap();
    check(install, "install");
    ws
}

/// `hookvisor` in `ws` with no state dir given: as a user types it.
pub fn plain(ws: &Workspace) -> Command {
    let mut cmd = ws.hookvisor_command();
    cmd.env_remove("HOOKVISOR_STATE_DIR");
    cmd
}

/// A client command under `timeout`, in `ws`, with nothing of the caller's environment but
/// PATH, and HOME in the workspace's private home.
pub fn client_command(ws: &Workspace, bin: &Path) -> Command {
    let mut cmd = Command::new("timeout");
    cmd.args(["-k", "5", CLIENT_TIMEOUT])
        .arg(bin)
        .current_dir(ws.path())
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap_or_default())
        .env("HOME", ws.base().join("home"))
        .env("LANG", "C.UTF-8")
        .env("TERM", "dumb");
    cmd
}

/// `hookvisor status --json` as a user runs it after the session: no flags.
pub fn status_json(ws: &Workspace) -> Value {
    let out = check(
        plain(ws).args(["status", "--json"]).output().unwrap(),
        "status",
    );
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Plain `hookvisor status`.
pub fn status_text(ws: &Workspace) -> String {
    check(plain(ws).arg("status").output().unwrap(), "status")
}

/// The workspace's notes.
pub fn notes(ws: &Workspace) -> String {
    fs::read_to_string(ws.path().join("notes.txt")).unwrap_or_default()
}

/// The client's output, for failure messages.
pub fn shown(output: &Output) -> String {
    format!(
        "exit {}\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// The agent sessions' turn logs under the private home: session id → its record.
pub fn turn_sessions(ws: &Workspace) -> serde_json::Map<String, Value> {
    let mut sessions = serde_json::Map::new();
    let root = ws.base().join("home/.discobot");
    for entry in fs::read_dir(&root).into_iter().flatten().flatten() {
        let path = entry.path().join("hooks/agent-turns.json");
        if let Ok(text) = fs::read_to_string(&path) {
            let log: Value = serde_json::from_str(&text).unwrap();
            sessions.extend(log["sessions"].as_object().cloned().unwrap_or_default());
        }
    }
    sessions
}

/// What every client's run of `Script::FixesAtOnce` shows: one re-prompt, the fix, a last
/// "done", and a lint that passed. The status, for the client's own checks.
pub fn fixed_after_one_re_prompt(ws: &Workspace, server: &ModelServer, output: &Output) -> Value {
    let log = server.summary();
    assert!(output.status.success(), "{}\n{log}", shown(output));
    assert_eq!(server.attempts(), ["1/3"], "{log}");
    assert_eq!(notes(ws), "good notes\n");
    let last = server.task().pop().expect("task requests");
    assert_eq!(last.reply, Some(Reply::Say("done")), "{log}");
    let status = status_json(ws);
    assert_eq!(status["hooks"]["lint"]["lastResult"], "success", "{status}");
    status
}

/// What every client's run of `Script::NeverFixes` shows: exactly three re-prompts, then four
/// turns (the user's and three re-prompted), each a tool call and a "done": nothing was asked
/// after the guard gave up, and lint is still pending. The status, for the client's own checks.
pub fn three_re_prompts_then_stopped(
    ws: &Workspace,
    server: &ModelServer,
    output: &Output,
) -> Value {
    let log = server.summary();
    assert!(output.status.success(), "{}\n{log}", shown(output));
    assert_eq!(server.attempts(), ["1/3", "2/3", "3/3"], "{log}");
    let task = server.task();
    assert_eq!(task.len(), 8, "{log}");
    assert_eq!(task[7].reply, Some(Reply::Say("done")), "{log}");
    assert_eq!(notes(ws), "bad notes 3\n");
    let status = status_json(ws);
    assert_eq!(
        status["pendingHooks"],
        serde_json::json!(["lint"]),
        "{status}"
    );
    status
}

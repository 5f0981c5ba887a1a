//! `hookvisor adapter claude|codex|gemini` through the built binary, one row per agent event of
//! docs/EVENTS.md §3.1: a fixture shaped as the agent's hooks reference documents its input
//! (tests/fixtures/<agent>/), a real hook of the canonical event that allows, blocks, aborts or
//! adds context, and the exact stdout and exit status the agent's protocol expects.

use crate::common;

use std::fs;
use std::io::{Read, Write};
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::{Duration, Instant};

use common::{Workspace, stderr, stdout};
use serde_json::json;

/// Runs `hookvisor adapter AGENT` on a fixture, its `@WORKSPACE@` made the workspace.
fn adapter(ws: &Workspace, agent: &str, fixture: &str, extra: &[&str]) -> Output {
    let mut args = vec!["adapter", agent];
    args.extend_from_slice(extra);
    on_fixture(ws, &args, agent, fixture, &[])
}

/// Runs `hookvisor ARGS` with the variables `env` on a fixture of `agent`.
fn on_fixture(
    ws: &Workspace,
    args: &[&str],
    agent: &str,
    fixture: &str,
    env: &[(&str, &str)],
) -> Output {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(agent)
        .join(fixture);
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    on_input(ws, args, &text, env)
}

/// Runs `hookvisor ARGS` with the variables `env` on the agent's JSON `text`, its
/// `@WORKSPACE@` made the workspace.
fn on_input(ws: &Workspace, args: &[&str], text: &str, env: &[(&str, &str)]) -> Output {
    let input = text.replace("@WORKSPACE@", ws.path().to_str().unwrap());
    let mut child = ws
        .hookvisor_command()
        .args(args)
        .envs(env.iter().copied())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run hookvisor adapter");
    // A command refused before it reads its input closes the pipe: that is its answer.
    match child.stdin.take().unwrap().write_all(input.as_bytes()) {
        Err(e) if e.kind() != std::io::ErrorKind::BrokenPipe => panic!("write the input: {e}"),
        _ => {}
    }
    child.wait_with_output().unwrap()
}

/// One event hook, `.discobot/hooks/h.yml`.
fn hook(ws: &Workspace, event: &str, body: &str) {
    ws.write(
        ".discobot/hooks/h.yml",
        &format!("---\nevent: {event}\n{body}---\n"),
    );
}

/// What a hook does, as YAML after its `event:`.
const ALLOW: &str = "run: 'true'\n";
const BLOCK: &str = "run: 'echo no >&2; exit 2'\n";
const ABORT: &str = "run: |\n  echo '{\"continue\": false, \"stopReason\": \"halt\"}'\n";
const CONTEXT: &str = "run: |\n  echo '{\"additionalContext\": \"ctx\"}'\n";
/// A notice's hook cannot answer JSON: its context is its piped output. Awaited, as a
/// `session.start` hook is not by default: an unawaited one's output reaches the next prompt.
const PIPED: &str = "await: true\npipe_output: true\nrun: echo ctx\n";

/// Whether `event` is a notice (docs/EVENTS.md §1.1): its hooks neither block nor abort.
fn notice(event: &str) -> bool {
    matches!(
        event,
        "session.start" | "tool.failed" | "error" | "session.end"
    )
}

/// A row: the agent, its fixture, the canonical event, then the exact stdout and exit status
/// for a hook that blocks, one that aborts, and one that adds context (allow is always
/// nothing and 0).
type Row = (
    &'static str,
    &'static str,
    &'static str,
    (&'static str, i32),
    (&'static str, i32),
    (&'static str, i32),
);

const STOP: &str = r#"{"continue":false,"stopReason":"halt"}"#;
const NOTHING: (&str, i32) = ("", 0);

fn rows() -> Vec<Row> {
    vec![
        (
            "claude",
            "session-start.json",
            "session.start",
            NOTHING,
            NOTHING,
            (
                r#"{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":"ctx\n"}}"#,
                0,
            ),
        ),
        (
            "claude",
            "user-prompt-submit.json",
            "turn.start",
            (r#"{"decision":"block","reason":"no"}"#, 0),
            (STOP, 0),
            (
                r#"{"hookSpecificOutput":{"hookEventName":"UserPromptSubmit","additionalContext":"ctx\n"}}"#,
                0,
            ),
        ),
        (
            "claude",
            "pre-tool-use.json",
            "tool.before",
            (
                r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no"}}"#,
                0,
            ),
            (STOP, 0),
            NOTHING,
        ),
        (
            "claude",
            "post-tool-use.json",
            "tool.after",
            (r#"{"decision":"block","reason":"no"}"#, 0),
            (STOP, 0),
            (
                r#"{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"ctx"}}"#,
                0,
            ),
        ),
        (
            "claude",
            "post-tool-use-failure.json",
            "tool.failed",
            NOTHING,
            NOTHING,
            (
                r#"{"hookSpecificOutput":{"hookEventName":"PostToolUseFailure","additionalContext":"ctx\n"}}"#,
                0,
            ),
        ),
        (
            "claude",
            "stop-failure.json",
            "error",
            NOTHING,
            NOTHING,
            NOTHING,
        ),
        (
            "claude",
            "task-created.json",
            "task.start",
            ("", 2),
            (STOP, 0),
            NOTHING,
        ),
        (
            "claude",
            "task-completed.json",
            "task.complete",
            ("", 2),
            (STOP, 0),
            NOTHING,
        ),
        (
            "claude",
            "teammate-idle.json",
            "team.idle",
            ("", 2),
            (STOP, 0),
            NOTHING,
        ),
        (
            "claude",
            "pre-compact.json",
            "claude.PreCompact",
            ("", 2),
            (STOP, 0),
            NOTHING,
        ),
        (
            "claude",
            "stop.json",
            "session.stop",
            (r#"{"decision":"block","reason":"no"}"#, 0),
            (STOP, 0),
            NOTHING,
        ),
        (
            "codex",
            "session-start.json",
            "session.start",
            NOTHING,
            NOTHING,
            (
                r#"{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":"ctx\n"}}"#,
                0,
            ),
        ),
        (
            "codex",
            "user-prompt-submit.json",
            "turn.start",
            (r#"{"decision":"block","reason":"no"}"#, 0),
            (STOP, 0),
            (
                r#"{"hookSpecificOutput":{"hookEventName":"UserPromptSubmit","additionalContext":"ctx\n"}}"#,
                0,
            ),
        ),
        (
            "codex",
            "pre-tool-use.json",
            "tool.before",
            (
                r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no"}}"#,
                0,
            ),
            // Codex's PreToolUse parser rejects continue:false and runs the tool: a deny.
            (
                r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"halt"}}"#,
                0,
            ),
            NOTHING,
        ),
        (
            "codex",
            "post-tool-use.json",
            "tool.after",
            (r#"{"decision":"block","reason":"no"}"#, 0),
            (STOP, 0),
            (
                r#"{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"ctx"}}"#,
                0,
            ),
        ),
        (
            "codex",
            "stop.json",
            "session.stop",
            (r#"{"decision":"block","reason":"no"}"#, 0),
            (STOP, 0),
            NOTHING,
        ),
        (
            "gemini",
            "session-start.json",
            "session.start",
            NOTHING,
            NOTHING,
            (
                r#"{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":"ctx\n"}}"#,
                0,
            ),
        ),
        (
            "gemini",
            "before-agent.json",
            "turn.start",
            (r#"{"decision":"deny","reason":"no"}"#, 0),
            (STOP, 0),
            (
                r#"{"hookSpecificOutput":{"hookEventName":"BeforeAgent","additionalContext":"ctx\n"}}"#,
                0,
            ),
        ),
        (
            "gemini",
            "before-tool.json",
            "tool.before",
            (r#"{"decision":"deny","reason":"no"}"#, 0),
            (STOP, 0),
            NOTHING,
        ),
        (
            "gemini",
            "after-tool.json",
            "tool.after",
            // A deny would replace the tool's result: the block goes as context.
            (
                r#"{"hookSpecificOutput":{"hookEventName":"AfterTool","additionalContext":"no"}}"#,
                0,
            ),
            (STOP, 0),
            (
                r#"{"hookSpecificOutput":{"hookEventName":"AfterTool","additionalContext":"ctx"}}"#,
                0,
            ),
        ),
        (
            "gemini",
            "after-agent.json",
            "session.stop",
            (r#"{"decision":"deny","reason":"no"}"#, 0),
            (STOP, 0),
            NOTHING,
        ),
    ]
}

#[test]
fn every_event_answers_in_its_agents_protocol() {
    for (agent, fixture, event, block, abort, context) in rows() {
        for (what, body, (want, exit)) in [
            ("allow", ALLOW, NOTHING),
            ("block", BLOCK, block),
            ("abort", ABORT, abort),
            (
                "context",
                if notice(event) { PIPED } else { CONTEXT },
                context,
            ),
        ] {
            let ws = Workspace::git();
            hook(&ws, event, body);
            let out = adapter(&ws, agent, fixture, &[]);
            let said = stdout(&out);
            assert_eq!(
                said.trim_end(),
                want,
                "{agent} {fixture} {what}: stderr {}",
                stderr(&out)
            );
            assert_eq!(
                out.status.code(),
                Some(exit),
                "{agent} {fixture} {what}: {}",
                stderr(&out)
            );
            if exit == 2 {
                assert_eq!(stderr(&out).trim_end(), "no", "{agent} {fixture}");
            }
        }
    }
}

/// Rule 16: the agent's fields reach the hook as canonical names, the rest under `agent`;
/// rule 6: `tool: bash` selects Claude's `Bash` and Gemini's `run_shell_command`.
#[test]
fn tool_hooks_see_canonical_fields_and_match_canonical_names() {
    for (agent, fixture, name) in [
        ("claude", "pre-tool-use.json", "Bash"),
        ("codex", "pre-tool-use.json", "Bash"),
        ("gemini", "before-tool.json", "run_shell_command"),
    ] {
        let ws = Workspace::git();
        hook(
            &ws,
            "tool.before",
            "tool: bash\nrun: |\n  printf '%s|%s|%s|%s' \"${tool}\" \"${tool_name}\" \"${tool_input.command}\" \"${agent.session_id}\" >&2; exit 2\n",
        );
        let out = adapter(&ws, agent, fixture, &[]);
        let said = stdout(&out);
        let reply: serde_json::Value = serde_json::from_str(&said).unwrap();
        let reason = reply["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .or(reply["reason"].as_str())
            .unwrap_or_default()
            .to_owned();
        let mut parts = reason.split('|');
        assert_eq!(parts.next(), Some("bash"), "{agent}: {said}");
        assert_eq!(parts.next(), Some(name), "{agent}");
        assert_eq!(parts.next(), Some("rm -rf build"), "{agent}");
        assert!(!parts.next().unwrap_or_default().is_empty(), "{agent}");
        // A hook for another tool does not run.
        hook(&ws, "tool.before", "tool: write\nrun: 'exit 2'\n");
        let out = adapter(&ws, agent, fixture, &[]);
        assert_eq!(stdout(&out), "", "{agent}: {}", stderr(&out));
    }
}

/// PostToolUse of a file tool fires `file.edited` once per written path, relative to the
/// workspace (Codex's apply_patch names two).
#[test]
fn file_tools_fire_file_edited_per_path() {
    for (agent, fixture, want) in [
        ("claude", "post-tool-use.json", "src/notes.txt\n"),
        ("codex", "post-tool-use.json", "src/notes.txt\nREADME.md\n"),
        ("gemini", "after-tool.json", "src/notes.txt\n"),
    ] {
        let ws = Workspace::git();
        let log = ws.base().join("edited.log");
        hook(
            &ws,
            "file.edited",
            &format!("run: echo \"${{file}}\" >> '{}'\n", log.to_str().unwrap()),
        );
        let out = adapter(&ws, agent, fixture, &[]);
        assert_eq!(stdout(&out), "", "{agent}: {}", stderr(&out));
        assert!(out.status.success());
        assert_eq!(fs::read_to_string(&log).unwrap(), want, "{agent}");
        // A pattern selects by the workspace-relative path.
        fs::remove_file(&log).unwrap();
        hook(
            &ws,
            "file.edited",
            &format!(
                "pattern: '*.md'\nrun: echo \"${{file}}\" >> '{}'\n",
                log.to_str().unwrap()
            ),
        );
        adapter(&ws, agent, fixture, &[]);
        let got = fs::read_to_string(&log).unwrap_or_default();
        let want_md: String = want
            .lines()
            .filter(|l| l.ends_with(".md"))
            .map(|l| format!("{l}\n"))
            .collect();
        assert_eq!(got, want_md, "{agent}");
    }
}

/// A file tool's call gives its hooks the written path as `${file}` and says nothing on stderr:
/// the agent shows stderr, and `data.file` is no variable worth a warning (it is `file`).
#[test]
fn a_file_tool_call_prints_no_warning() {
    for (agent, fixture) in [
        ("claude", "post-tool-use.json"),
        ("codex", "post-tool-use.json"),
        ("gemini", "after-tool.json"),
    ] {
        let ws = Workspace::git();
        let log = ws.base().join("edited.log");
        let log = log.to_str().unwrap();
        for event in ["tool.after", "file.edited"] {
            ws.write(
                &format!(".discobot/hooks/{event}.yml"),
                &format!("---\nevent: {event}\nrun: echo \"${{file}}\" >> '{log}'\n---\n"),
            );
        }
        let out = adapter(&ws, agent, fixture, &[]);
        assert!(out.status.success(), "{agent}: {}", stderr(&out));
        assert_eq!(stdout(&out), "", "{agent}");
        assert_eq!(stderr(&out), "", "{agent}");
        assert!(
            fs::read_to_string(log).unwrap().contains("src/notes.txt"),
            "{agent}"
        );
    }
}

/// The old turn-end commands are aliases of `adapter AGENT` (docs/EVENTS.md §3.1): through each,
/// the stop fires `session.stop` and the prompt `turn.start`, as through the new name.
#[test]
fn the_old_adapter_names_fire_every_event() {
    for (command, agent, stop, prompt) in [
        (
            "claude-stop",
            "claude",
            "stop.json",
            "user-prompt-submit.json",
        ),
        (
            "codex-stop",
            "codex",
            "stop.json",
            "user-prompt-submit.json",
        ),
        (
            "gemini-after-agent",
            "gemini",
            "after-agent.json",
            "before-agent.json",
        ),
    ] {
        let ws = Workspace::git();
        let log = ws.base().join("fired.log");
        let log = log.to_str().unwrap();
        for event in ["session.stop", "turn.start"] {
            ws.write(
                &format!(".discobot/hooks/{event}.yml"),
                &format!("---\nevent: {event}\nrun: echo {event} >> '{log}'\n---\n"),
            );
        }
        let out = on_fixture(&ws, &[command], agent, prompt, &[]);
        assert!(out.status.success(), "{command}: {}", stderr(&out));
        let out = on_fixture(&ws, &[command], agent, stop, &[]);
        assert!(out.status.success(), "{command}: {}", stderr(&out));
        assert_eq!(
            fs::read_to_string(log).unwrap_or_default(),
            "turn.start\nsession.stop\n",
            "{command}: {}",
            stderr(&out)
        );
    }
}

/// UserPromptSubmit drains what a hook piped earlier (rule 5), after `turn.start`'s own hooks.
#[test]
fn the_prompt_event_drains_piped_output_into_additional_context() {
    let ws = Workspace::git();
    ws.write(
        ".discobot/hooks/a.yml",
        "---\nevent: error\npipe_output: true\nrun: echo 'tests failed: fix them'\n---\n",
    );
    ws.write(
        ".discobot/hooks/b.yml",
        "---\nevent: turn.start\npipe_output: true\nrun: echo 'branch: main'\n---\n",
    );
    let out = adapter(&ws, "claude", "stop-failure.json", &[]);
    assert_eq!(stdout(&out), "", "{}", stderr(&out));
    let out = adapter(&ws, "claude", "user-prompt-submit.json", &[]);
    let reply: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    let context = reply["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap();
    assert!(context.contains("tests failed: fix them"), "{context}");
    assert!(context.contains("branch: main"), "{context}");
    // Drained: the next prompt gets only what turn.start's hook pipes again.
    let out = adapter(&ws, "claude", "user-prompt-submit.json", &[]);
    assert!(!stdout(&out).contains("tests failed"), "{}", stdout(&out));
    assert!(stdout(&out).contains("branch: main"), "{}", stdout(&out));
}

/// SessionEnd returns at once; a detached process runs the `session.end` hook, which here
/// waits for the adapter to have exited before it reports through a FIFO.
#[test]
fn session_end_is_detached_from_the_agent() {
    for (agent, fixture) in [
        ("claude", "session-end.json"),
        ("gemini", "session-end.json"),
    ] {
        let ws = Workspace::git();
        let fifo = ws.base().join("ended");
        let gate = ws.base().join("gate");
        for path in [&fifo, &gate] {
            let status = std::process::Command::new("mkfifo")
                .arg(path)
                .status()
                .unwrap();
            assert!(status.success());
        }
        // The hook blocks on `gate` until the test opens it, after the adapter returned.
        hook(
            &ws,
            "session.end",
            &format!(
                "run: cat '{}' >/dev/null; echo \"${{agent.reason}}\" > '{}'\n",
                gate.to_str().unwrap(),
                fifo.to_str().unwrap()
            ),
        );
        let started = Instant::now();
        let out = adapter(&ws, agent, fixture, &[]);
        // The hook waits on the gate until after this; a generous bound for a loaded machine.
        assert!(started.elapsed() < Duration::from_secs(30), "{agent}");
        assert_eq!(stdout(&out), "", "{agent}: {}", stderr(&out));
        assert!(out.status.success());
        // Open the gate (the hook is reading), then read what the hook writes.
        let (tx, rx) = mpsc::channel();
        let fifo_reader = fifo.clone();
        thread::spawn(move || {
            let mut text = String::new();
            fs::File::open(&fifo_reader)
                .and_then(|mut f| f.read_to_string(&mut text))
                .ok();
            tx.send(text).ok();
        });
        // In a thread too: if the hook never ran, the receive below times out instead.
        let gate = gate.clone();
        thread::spawn(move || drop(fs::OpenOptions::new().write(true).open(&gate)));
        let text = rx
            .recv_timeout(Duration::from_secs(30))
            .expect("the detached session.end hook ran");
        let want = if agent == "claude" {
            "prompt_input_exit\n"
        } else {
            "exit\n"
        };
        assert_eq!(text, want, "{agent}");
    }
}

/// Internal errors fail open, or block with --fail-closed in the event's own words.
#[test]
fn internal_errors_fail_open_unless_fail_closed() {
    let ws = Workspace::git();
    let mut child = ws
        .hookvisor_command()
        .args(["adapter", "claude"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"not json").unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(stdout(&out), "");
    assert!(out.status.success());
    assert!(stderr(&out).contains("failing open"), "{}", stderr(&out));
    // A state dir that is a file: firing fails; --fail-closed denies the tool.
    hook(&ws, "tool.before", "run: 'true'\n");
    let out = ws
        .hookvisor_command()
        .env(
            "HOOKVISOR_STATE_DIR",
            ws.path().join(".discobot/hooks/h.yml"),
        )
        .args(["adapter", "claude", "--fail-closed"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .and_then(|mut c| {
            let input = fs::read_to_string(
                Path::new(env!("CARGO_MANIFEST_DIR"))
                    .join("tests/fixtures/claude/pre-tool-use.json"),
            )
            .unwrap()
            .replace("@WORKSPACE@", ws.path().to_str().unwrap());
            c.stdin.take().unwrap().write_all(input.as_bytes())?;
            c.wait_with_output()
        })
        .unwrap();
    let reply: serde_json::Value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("{e}: {} / {}", stdout(&out), stderr(&out)));
    assert_eq!(reply["hookSpecificOutput"]["permissionDecision"], "deny");
    assert!(
        reply["hookSpecificOutput"]["permissionDecisionReason"]
            .as_str()
            .unwrap()
            .contains("a tool gate fails closed")
    );
}

/// Issue 28: a tool gate never lets a call through because hookvisor failed. A server that is
/// gone (nothing listening) or lost (it takes the request and closes without an answer) denies
/// the call in each agent's words, with the error as the reason, and without `--fail-closed`;
/// a notice or `tool.after` of the same failure still fails open.
#[test]
fn a_tool_gate_denies_when_the_server_is_gone_or_lost() {
    let ws = Workspace::git();
    hook(&ws, "tool.before", ALLOW);
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let dead_url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let lost = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let lost_url = format!("http://{}", lost.local_addr().unwrap());
    let hang_up = thread::spawn(move || {
        for _ in 0..3 {
            let (mut conn, _) = lost.accept().unwrap();
            // Read the request's head, then go away without a word.
            let _ = conn.read(&mut [0; 4096]);
        }
    });
    let cases = [
        ("claude", "pre-tool-use.json", &dead_url, "cannot reach"),
        ("codex", "pre-tool-use.json", &dead_url, "cannot reach"),
        ("gemini", "before-tool.json", &dead_url, "cannot reach"),
        ("claude", "pre-tool-use.json", &lost_url, "did not answer"),
        ("codex", "pre-tool-use.json", &lost_url, "did not answer"),
        ("gemini", "before-tool.json", &lost_url, "did not answer"),
    ];
    for (agent, fixture, url, why) in cases {
        let out = on_fixture(
            &ws,
            &["adapter", agent],
            agent,
            fixture,
            &[("HOOKVISOR_URL", url.as_str())],
        );
        assert!(out.status.success(), "{agent}: {}", stderr(&out));
        let reply: serde_json::Value = serde_json::from_str(&stdout(&out))
            .unwrap_or_else(|e| panic!("{agent} {url}: {e}: {} / {}", stdout(&out), stderr(&out)));
        let (decision, reason) = match agent {
            "gemini" => (&reply["decision"], &reply["reason"]),
            _ => (
                &reply["hookSpecificOutput"]["permissionDecision"],
                &reply["hookSpecificOutput"]["permissionDecisionReason"],
            ),
        };
        assert_eq!(decision, "deny", "{agent} {url}: {reply}");
        let reason = reason.as_str().unwrap();
        assert!(
            reason.contains(why) && reason.contains("a tool gate fails closed"),
            "{agent} {url}: {reason}"
        );
    }
    hang_up.join().unwrap();
    // The same failure on a notice and on tool.after: fail open, as documented.
    for fixture in ["post-tool-use.json", "session-start.json"] {
        let out = on_fixture(
            &ws,
            &["adapter", "claude"],
            "claude",
            fixture,
            &[("HOOKVISOR_URL", dead_url.as_str())],
        );
        assert_eq!(stdout(&out), "", "{fixture}");
        assert!(stderr(&out).contains("failing open"), "{}", stderr(&out));
    }
}

/// `check` warns on a `tool:` name no supported agent has (rule 6), not on canonical names,
/// agents' names or MCP tools.
#[test]
fn check_warns_on_a_tool_name_no_agent_has() {
    let ws = Workspace::new();
    hook(
        &ws,
        "tool.before",
        "tool: Bahs|bash|run_shell_command|mcp__fs__read\nrun: 'true'\n",
    );
    let out = ws.hookvisor(&["check"]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    assert!(said.contains("tool: 'Bahs' is no tool"), "{said}");
    for fine in ["'bash'", "'run_shell_command'", "'mcp__fs__read'"] {
        assert!(!said.contains(fine), "{fine}: {said}");
    }
}

/// Issue 28: `tool: git_commit` reads only the common spelling of a shell `git commit`, so a
/// gate on it is walked around by `command git commit`, `sh -c 'git commit'` or an alias:
/// `check` says so of every hook that could block on it, and names `commit.before`.
#[test]
fn check_warns_that_a_git_commit_gate_is_a_hint() {
    let ws = Workspace::new();
    let yml = |name: &str, front: &str| {
        ws.write(
            &format!(".discobot/hooks/{name}.yml"),
            &format!("---\n{front}\nrun: 'true'\n---\n"),
        );
    };
    yml("gate", "event: tool.before\ntool: git_commit");
    yml(
        "listed",
        "event: tool.before\ntool: Write|git_commit\nblock_on: failure",
    );
    // `block_on: never` and nyzhi's `block = false`: a hook that reports, not a gate.
    yml(
        "never",
        "event: tool.before\ntool: git_commit\nblock_on: never",
    );
    yml("after", "event: tool.after\ntool: git_commit");
    yml("post", "event: tool.before\nphase: post\ntool: git_commit");
    yml(
        "unawaited",
        "event: tool.before\nawait: false\ntool: git_commit",
    );
    yml("bash", "event: tool.before\ntool: bash");
    ws.write(
        ".nyzhi/config.toml",
        "[[agent.hooks]]\nevent = \"pre_tool\"\ntool_name = \"git_commit\"\ncommand = \"./test.sh\"\nblock = true\n\n\
         [[agent.hooks]]\nevent = \"pre_tool\"\ntool_name = \"git_commit\"\ncommand = \"./log.sh\"\n",
    );
    let out = ws.hookvisor(&["check"]);
    let said = format!("{}{}", stdout(&out), stderr(&out));
    let warned: Vec<&str> = said
        .lines()
        .filter(|l| l.contains("commit.before"))
        .collect();
    assert_eq!(warned.len(), 3, "{said}");
    assert!(
        warned[0].contains("gate.yml") || warned.iter().any(|l| l.contains("gate.yml")),
        "{said}"
    );
    for name in ["gate.yml", "listed.yml", ".nyzhi/config.toml:3"] {
        let line = warned
            .iter()
            .find(|l| l.contains(name))
            .unwrap_or_else(|| panic!("{name}: {said}"));
        assert!(
            line.contains("git_commit") && line.contains("command git commit"),
            "{line}"
        );
    }
}

#[test]
fn under_hookvisor_loop_the_session_and_turn_events_are_left_to_the_loop() {
    let ws = Workspace::new();
    // Each hook leaves a mark when it runs, and would block or add context.
    for (name, event, extra, then) in [
        (
            "start",
            "session.start",
            "pipe_output: true\n",
            "echo started",
        ),
        ("prompt", "turn.start", "", "echo no >&2; exit 2"),
        ("end", "turn.end", "", "echo no >&2; exit 1"),
        ("deny", "tool.before", "", "echo no >&2; exit 2"),
    ] {
        let mark = ws.path().join(format!("{name}.ran"));
        ws.write(
            &format!(".discobot/hooks/{name}.yml"),
            &format!(
                "---\nevent: {event}\n{extra}run: 'touch {}; {then}'\n---\n",
                mark.display()
            ),
        );
    }
    common::tick();
    let in_loop = [("HOOKVISOR_LOOP", "1")];
    for fixture in [
        "session-start.json",
        "user-prompt-submit.json",
        "stop.json",
        "session-end.json",
    ] {
        let out = on_fixture(&ws, &["adapter", "claude"], "claude", fixture, &in_loop);
        assert_eq!(
            (stdout(&out).as_str(), out.status.code()),
            ("", Some(0)),
            "{fixture} under the loop: {}",
            stderr(&out)
        );
    }
    for (args, fixture) in [
        (["claude-stop", ""], "stop.json"),
        (["claude-stop", ""], "user-prompt-submit.json"),
    ] {
        let out = on_fixture(&ws, &args[..1], "claude", fixture, &in_loop);
        assert_eq!(
            (stdout(&out).as_str(), out.status.code()),
            ("", Some(0)),
            "{fixture}"
        );
    }
    for name in ["start", "prompt", "end"] {
        assert!(
            !ws.path().join(format!("{name}.ran")).exists(),
            "the {name} hook ran under the loop"
        );
    }
    // Tool events are the agent's own: the loop never sees them.
    let out = on_fixture(
        &ws,
        &["adapter", "claude"],
        "claude",
        "pre-tool-use.json",
        &in_loop,
    );
    assert!(
        stdout(&out).contains(r#""permissionDecision":"deny""#),
        "{}",
        stdout(&out)
    );
    assert!(ws.path().join("deny.ran").exists());
    // Without the loop, the same turn end runs its hook.
    let out = on_fixture(&ws, &["adapter", "claude"], "claude", "stop.json", &[]);
    assert!(
        stdout(&out).contains(r#""decision":"block""#),
        "{}",
        stdout(&out)
    );
    assert!(ws.path().join("end.ran").exists());
}

#[test]
fn a_refused_adapter_line_fails_open_with_exit_1_never_2() {
    // Exit 2 is "block" to Claude Code, Codex and Gemini CLI alike: a typo in the hook's
    // command line, or a bad variable, would deny every tool call and re-prompt every stop.
    let ws = Workspace::new();
    hook(&ws, "tool.before", BLOCK);
    for (args, env) in [
        (&["adapter", "claude", "--bogus"][..], &[][..]),
        (
            &["adapter", "codex"][..],
            &[("HOOKVISOR_MAX_RETRIES", "abc")][..],
        ),
        (&["claude-stop", "--nope"][..], &[][..]),
        (
            &["gemini-after-agent"][..],
            &[("HOOKVISOR_MAX_RETRIES", "-1")][..],
        ),
    ] {
        let out = on_fixture(&ws, args, "claude", "pre-tool-use.json", env);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{args:?} {env:?}: {}",
            stderr(&out)
        );
        assert_eq!(stdout(&out), "", "{args:?}");
        assert!(stderr(&out).contains("failing open"), "{}", stderr(&out));
    }
    // Any other command keeps clap's usage status.
    let out = ws
        .hookvisor_command()
        .args(["fire", "--bogus"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// Issue 28: a gate whose `when:` reads a value the model chose, sent through Claude's own
/// PreToolUse; whatever the model makes of `limit`, the guard is no way through.
#[test]
fn a_when_the_model_cannot_let_be_evaluated_denies_claudes_tool_call() {
    let ws = Workspace::git();
    hook(
        &ws,
        "tool.before",
        "when: ${tool_input.limit} > 1000\nrun: 'echo too many >&2; exit 2'\n",
    );
    for limit in [
        r#","limit":"05000""#,
        r#","limit":5000.0"#,
        r#","limit":[5000]"#,
        "",
    ] {
        let input = serde_json::json!({
            "session_id": "8f3a2c1e-1b2c-4d5e-9f00-123456789abc",
            "cwd": ws.path(),
            "hook_event_name": "PreToolUse",
            "tool_name": "Read",
            "tool_input": serde_json::from_str::<serde_json::Value>(
                &format!(r#"{{"file_path":"big.log"{limit}}}"#)
            ).unwrap(),
        });
        let mut child = ws
            .hookvisor_command()
            .args(["adapter", "claude"])
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
        let out = child.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{limit}: {}", stderr(&out));
        let said: serde_json::Value = serde_json::from_str(&stdout(&out))
            .unwrap_or_else(|e| panic!("{limit}: {e}: {:?} {}", stdout(&out), stderr(&out)));
        let decision = &said["hookSpecificOutput"];
        assert_eq!(decision["permissionDecision"], "deny", "{limit}: {said}");
        let reason = decision["permissionDecisionReason"].as_str().unwrap();
        assert!(
            reason.contains("h.yml") && reason.contains("${tool_input.limit} > 1000"),
            "{limit}: {reason}"
        );
    }
}

/// A gate's hook file that does not load denies Claude's tool call (issue 28), where it used
/// to be skipped with a warning: the reason names the file and the error.
#[test]
fn a_gate_hook_that_cannot_be_loaded_denies_claudes_tool_call() {
    let ws = Workspace::git();
    hook(
        &ws,
        "tool.before",
        "run: sh -c \"echo checking ${tool_input.command}\"\n",
    );
    let input = json!({
        "session_id": "8f3a2c1e-1b2c-4d5e-9f00-123456789abc",
        "cwd": ws.path(),
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "ls"},
    });
    let out = on_input(&ws, &["adapter", "claude"], &input.to_string(), &[]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said: serde_json::Value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("{e}: {:?} {}", stdout(&out), stderr(&out)));
    let decision = &said["hookSpecificOutput"];
    assert_eq!(decision["permissionDecision"], "deny", "{said}");
    let reason = decision["permissionDecisionReason"].as_str().unwrap();
    assert!(
        reason.contains("h.yml") && reason.contains("sh -c") && reason.contains("hookvisor check"),
        "{reason}"
    );
}

/// A fixture of `agent` with its `cwd` moved to `dir` (relative to the workspace), as the
/// clients send it after the model ran `cd dir` (Claude Code, on every later event) or a call
/// with that working directory (Codex).
fn moved(agent: &str, fixture: &str, dir: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(agent)
        .join(fixture);
    let mut input: serde_json::Value =
        serde_json::from_str(&fs::read_to_string(path).unwrap()).expect("a JSON fixture");
    input["cwd"] = format!("@WORKSPACE@/{dir}").into();
    input.to_string()
}

/// Issue 28: after one `cd src/deep`, Claude Code sends that directory as `cwd` on every later
/// event (Codex sends a call's `workdir`): the adapters still find the workspace's hooks,
/// through every adapter command, for the gate and for the turn end.
#[test]
fn a_cwd_below_the_workspace_still_finds_the_hooks() {
    let ws = Workspace::git();
    fs::create_dir_all(ws.path().join("src/deep")).unwrap();
    ws.write(
        ".discobot/hooks/gate.yml",
        &format!("---\nevent: tool.before\n{BLOCK}---\n"),
    );
    ws.write(
        ".discobot/hooks/stop.yml",
        &format!("---\nevent: session.stop\n{BLOCK}---\n"),
    );
    ws.write(
        ".discobot/hooks/end.yml",
        "---\nevent: turn.end\nrun: 'echo lint failed; exit 1'\n---\n",
    );
    common::tick();
    for (agent, fixture, want) in [
        (
            "claude",
            "pre-tool-use.json",
            r#""permissionDecision":"deny""#,
        ),
        (
            "codex",
            "pre-tool-use.json",
            r#""permissionDecision":"deny""#,
        ),
        ("gemini", "before-tool.json", r#""decision":"deny""#),
        ("claude", "stop.json", r#""decision":"block""#),
        ("codex", "stop.json", r#""decision":"block""#),
        ("gemini", "after-agent.json", r#""decision":"deny""#),
    ] {
        let out = on_input(
            &ws,
            &["adapter", agent],
            &moved(agent, fixture, "src/deep"),
            &[],
        );
        assert!(
            stdout(&out).contains(want),
            "{agent} {fixture}: {} / {}",
            stdout(&out),
            stderr(&out)
        );
    }
    // Started below the workspace, the agent's project variable names the start directory:
    // the workspace is found above it.
    let started = ws.path().join("src");
    for (agent, fixture, var) in [
        ("claude", "pre-tool-use.json", "CLAUDE_PROJECT_DIR"),
        ("gemini", "before-tool.json", "GEMINI_PROJECT_DIR"),
    ] {
        let out = on_input(
            &ws,
            &["adapter", agent],
            &moved(agent, fixture, "src/deep"),
            &[(var, started.to_str().unwrap())],
        );
        assert!(
            stdout(&out).contains("deny"),
            "{agent} {var}: {}",
            stderr(&out)
        );
    }
    // The old turn-end aliases find it the same way (their turn.end hook fails).
    for (alias, agent, fixture) in [
        ("claude-stop", "claude", "stop.json"),
        ("codex-stop", "codex", "stop.json"),
        ("gemini-after-agent", "gemini", "after-agent.json"),
    ] {
        let out = on_input(&ws, &[alias], &moved(agent, fixture, "src/deep"), &[]);
        assert!(
            stdout(&out).contains("lint failed"),
            "{alias}: {} / {}",
            stdout(&out),
            stderr(&out)
        );
    }
}

/// The model picks `cwd`, and can leave an empty `.discobot/hooks` there: what the model
/// cannot change wins over the walk up from it, `--workspace` (which `install` writes) first,
/// then the agent's project variable.
#[test]
fn the_recorded_workspace_and_the_project_variable_win_over_cwd() {
    let ws = Workspace::git();
    ws.write(
        ".discobot/hooks/gate.yml",
        &format!("---\nevent: tool.before\n{BLOCK}---\n"),
    );
    fs::create_dir_all(ws.path().join("src/deep/.discobot/hooks")).unwrap();
    common::tick();
    let root = ws.path().to_str().unwrap();
    let denied = |out: &Output| {
        let said = stdout(out);
        said.contains(r#""permissionDecision":"deny""#) || said.contains(r#""decision":"deny""#)
    };
    for (agent, fixture, var) in [
        ("claude", "pre-tool-use.json", Some("CLAUDE_PROJECT_DIR")),
        ("codex", "pre-tool-use.json", None),
        ("gemini", "before-tool.json", Some("GEMINI_PROJECT_DIR")),
    ] {
        let input = moved(agent, fixture, "src/deep");
        // The walk alone meets the planted directory below the real one: two workspaces of
        // hooks enclose the call, which no walk can choose between, so the gate fails closed
        // and says to pass --workspace (the attacker's review of issue 28).
        let out = on_input(&ws, &["adapter", agent], &input, &[]);
        assert!(denied(&out), "{agent}: {}", stdout(&out));
        assert!(
            stdout(&out).contains("--workspace"),
            "{agent}: {}",
            stdout(&out)
        );
        // So does the turn end, without --fail-closed: the agent could make the second
        // workspace to let its turn end unchecked (the second attacker review).
        let stop = if agent == "gemini" {
            "after-agent.json"
        } else {
            "stop.json"
        };
        for command in [&["adapter", agent][..], &[agent_alias(agent)][..]] {
            let out = on_input(&ws, command, &moved(agent, stop, "src/deep"), &[]);
            assert!(
                stdout(&out).contains(r#""decision":"#) && stdout(&out).contains("--workspace"),
                "{command:?} stop: {} / {}",
                stdout(&out),
                stderr(&out)
            );
        }
        let out = on_input(&ws, &["adapter", agent, "--workspace", root], &input, &[]);
        assert!(denied(&out), "{agent} --workspace: {}", stderr(&out));
        if let Some(var) = var {
            let out = on_input(&ws, &["adapter", agent], &input, &[(var, root)]);
            assert!(denied(&out), "{agent} {var}: {}", stderr(&out));
            // --workspace wins over the variable.
            let elsewhere = ws.path().join("src/deep");
            let out = on_input(
                &ws,
                &["adapter", agent, "--workspace", root],
                &input,
                &[(var, elsewhere.to_str().unwrap())],
            );
            assert!(denied(&out), "{agent} --workspace over {var}");
            // Started in `src`, where the agent made a `.git`: the walk goes on to the
            // workspace of hooks above, which a repository top below it cannot hide.
            fs::create_dir_all(ws.path().join("src/.git")).unwrap();
            let started = ws.path().join("src");
            let out = on_input(
                &ws,
                &["adapter", agent],
                &moved(agent, fixture, "src"),
                &[(var, started.to_str().unwrap())],
            );
            assert!(
                denied(&out),
                "{agent} {var}=src with src/.git: {}",
                stderr(&out)
            );
            fs::remove_dir(ws.path().join("src/.git")).unwrap();
        }
    }
}

/// The old turn-end command of `agent`.
fn agent_alias(agent: &str) -> &'static str {
    match agent {
        "claude" => "claude-stop",
        "codex" => "codex-stop",
        _ => "gemini-after-agent",
    }
}

/// Issue 28: `tool: write|edit` with `pattern:` sees the file the tool will write: a Write to
/// Cargo.lock, an Edit of migrations/001.sql, Gemini's write_file and Codex's apply_patch are
/// denied, a Write to src/main.rs is allowed, and a file tool whose path cannot be read, or a
/// path out of the workspace, is denied rather than let through.
#[test]
fn a_pattern_gate_sees_the_file_the_tool_writes() {
    let ws = Workspace::git();
    hook(
        &ws,
        "tool.before",
        &format!("tool: write|edit|apply_patch\npattern: '*.lock, migrations/**'\n{BLOCK}"),
    );
    let call = |agent: &str, fixture: &str, tool: &str, input: serde_json::Value| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures")
            .join(agent)
            .join(fixture);
        let mut event: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
        event["tool_name"] = tool.into();
        event["tool_input"] = input;
        let out = on_input(&ws, &["adapter", agent], &event.to_string(), &[]);
        let said = stdout(&out);
        assert!(out.status.success(), "{}", stderr(&out));
        said.contains(r#""permissionDecision":"deny""#) || said.contains(r#""decision":"deny""#)
    };
    let at = |rel: &str| ws.path().join(rel).to_str().unwrap().to_owned();
    let patch = |path: &str| {
        format!("*** Begin Patch\n*** Update File: {path}\n@@\n-a\n+b\n*** End Patch\n")
    };
    let claude = |tool, input| call("claude", "pre-tool-use.json", tool, input);
    assert!(claude(
        "Write",
        json!({"file_path": at("Cargo.lock"), "content": "x"})
    ));
    assert!(claude(
        "Edit",
        json!({"file_path": at("migrations/001.sql"), "old_string": "a", "new_string": "b"})
    ));
    assert!(claude(
        "MultiEdit",
        json!({"file_path": at("sub/Cargo.lock"), "edits": []})
    ));
    assert!(!claude(
        "Write",
        json!({"file_path": at("src/main.rs"), "content": "x"})
    ));
    // A link the agent planted does not hide the directory it leads to.
    fs::create_dir_all(ws.path().join("migrations")).unwrap();
    std::os::unix::fs::symlink("migrations", ws.path().join("m")).unwrap();
    assert!(claude(
        "Write",
        json!({"file_path": at("m/001.sql"), "content": "x"})
    ));
    // Nor does a link to a file not made yet, which the write creates.
    std::os::unix::fs::symlink("migrations/002.sql", ws.path().join("notes.txt")).unwrap();
    assert!(claude(
        "Write",
        json!({"file_path": at("notes.txt"), "content": "x"})
    ));
    // Unknown or outside: the gate runs.
    assert!(claude("Write", json!({"content": "x"})));
    assert!(claude(
        "Write",
        json!({"file_path": at("../elsewhere/notes.txt")})
    ));
    let gemini = |tool, input| call("gemini", "before-tool.json", tool, input);
    assert!(gemini(
        "write_file",
        json!({"file_path": at("Cargo.lock"), "content": "x"})
    ));
    assert!(gemini(
        "replace",
        json!({"file_path": "migrations/001.sql"})
    ));
    assert!(!gemini(
        "write_file",
        json!({"file_path": at("src/main.rs"), "content": "x"})
    ));
    let codex = |input| call("codex", "pre-tool-use.json", "apply_patch", input);
    assert!(codex(json!({"command": patch("migrations/001.sql")})));
    assert!(codex(
        json!({"command": format!("{}{}", patch("src/main.rs"), patch("Cargo.lock"))})
    ));
    assert!(!codex(json!({"command": patch("src/main.rs")})));
    assert!(codex(json!({"command": "not a patch"})));
}

/// A read gate with a pattern sees the file a read reaches through a link the agent planted.
#[test]
fn a_pattern_gate_on_reads_sees_through_links() {
    let ws = Workspace::git();
    hook(
        &ws,
        "tool.before",
        &format!("tool: Read\npattern: 'secrets/**'\n{BLOCK}"),
    );
    fs::create_dir_all(ws.path().join("secrets")).unwrap();
    fs::write(ws.path().join("secrets/key"), "k").unwrap();
    std::os::unix::fs::symlink("secrets", ws.path().join("s")).unwrap();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude/pre-tool-use.json");
    let denied = |file: &str| {
        let mut event: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(&fixture).unwrap()).unwrap();
        event["tool_name"] = "Read".into();
        event["tool_input"] = json!({"file_path": ws.path().join(file)});
        let out = on_input(&ws, &["adapter", "claude"], &event.to_string(), &[]);
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).contains(r#""permissionDecision":"deny""#)
    };
    assert!(denied("secrets/key"));
    assert!(denied("s/key"));
    assert!(!denied("README.md"));
}

/// Through `hookvisor serve` (`HOOKVISOR_URL`), the server matches the gate's pattern against
/// the files the adapter sends in the event's data.
#[test]
fn a_pattern_gate_under_serve_sees_the_file_too() {
    let ws = Workspace::git();
    hook(
        &ws,
        "tool.before",
        &format!("tool: write\npattern: '*.lock'\n{BLOCK}"),
    );
    let server = common::serve::Server::tcp(&ws);
    let common::serve::Addr::Tcp(addr) = &server.addr else {
        unreachable!("a TCP server")
    };
    let url = format!("http://{addr}");
    let write = |file: &str| {
        let path =
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude/pre-tool-use.json");
        let mut event: serde_json::Value =
            serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap();
        event["tool_name"] = "Write".into();
        event["tool_input"] = json!({"file_path": format!("@WORKSPACE@/{file}"), "content": "x"});
        on_input(
            &ws,
            &["adapter", "claude"],
            &event.to_string(),
            &[("HOOKVISOR_URL", url.as_str())],
        )
    };
    let out = write("Cargo.lock");
    assert!(
        stdout(&out).contains(r#""permissionDecision":"deny""#),
        "{} / {}",
        stdout(&out),
        stderr(&out)
    );
    let out = write("src/main.rs");
    assert_eq!(stdout(&out), "", "{}", stderr(&out));
    server.stop();
}

/// Attack review 2: under `serve` the adapter waits on the server with the default signal
/// actions, so a SIGTERM, SIGINT or SIGHUP from the agent's uid killed it mid-wait, printing
/// nothing: Claude takes a killed hook as "go on", the gate became an allow.
#[test]
fn a_signal_while_a_gate_waits_on_the_server_denies() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let ws = Workspace::git();
    hook(&ws, "tool.before", ALLOW);
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude/pre-tool-use.json");
    let input = fs::read_to_string(fixture)
        .unwrap()
        .replace("@WORKSPACE@", ws.path().to_str().unwrap());
    for signal in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        let mut child = ws
            .hookvisor_command()
            .args(["adapter", "claude"])
            .env("HOOKVISOR_URL", &url)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(input.as_bytes())
            .unwrap();
        // The server holds the request unanswered: the adapter is in its wait.
        let (mut conn, _) = silent.accept().unwrap();
        let _ = conn.read(&mut [0; 4096]);
        let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
        kill(pid, signal).unwrap();
        let out = child.wait_with_output().unwrap();
        let reply: serde_json::Value = serde_json::from_str(&stdout(&out))
            .unwrap_or_else(|e| panic!("{signal}: {e}: {:?} / {}", out.status, stderr(&out)));
        let said = &reply["hookSpecificOutput"];
        assert_eq!(said["permissionDecision"], "deny", "{signal}: {reply}");
        drop(conn);
    }
}

/// As in-process, a signal while a turn end waits on `hookvisor serve` cancels the wait and is
/// answered at once (here a block, for `--fail-closed`), not after the server gives up.
#[test]
fn a_signal_while_a_turn_end_waits_on_the_server_is_answered() {
    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    let ws = Workspace::git();
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claude/stop.json");
    let input = fs::read_to_string(fixture)
        .unwrap()
        .replace("@WORKSPACE@", ws.path().to_str().unwrap());
    let mut child = ws
        .hookvisor_command()
        .args(["adapter", "claude", "--fail-closed"])
        .env("HOOKVISOR_URL", &url)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    // The server holds the request unanswered, and hangs up after a while (without that, an
    // adapter deaf to the signal would wait for its deadline, 10 minutes).
    let (mut conn, _) = silent.accept().unwrap();
    let _ = conn.read(&mut [0; 4096]);
    thread::spawn(move || {
        thread::sleep(Duration::from_secs(5));
        drop(conn);
    });
    let pid = Pid::from_raw(i32::try_from(child.id()).unwrap());
    kill(pid, Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    let reply: serde_json::Value = serde_json::from_str(&stdout(&out))
        .unwrap_or_else(|e| panic!("{e}: {:?} / {}", out.status, stderr(&out)));
    assert_eq!(reply["decision"], "block", "{reply}");
    let reason = reply["reason"].as_str().unwrap();
    assert!(reason.contains("evaluation cancelled"), "{reason}");
}

/// docs/EVENTS.md §1.3 `await: false` through an agent: Claude's PostToolUse is answered while
/// the hook still runs, and the hook's run is recorded once it ends.
#[test]
fn an_unawaited_hook_never_holds_claudes_tool_call() {
    let ws = Workspace::git();
    let gate = ws.base().join("gate");
    common::gate(&gate);
    ws.write(
        ".discobot/hooks/slow.yml",
        &format!(
            "---\nevent: tool.after\nawait: false\ntimeout: 30\nrun: cat '{}' > /dev/null\n---\n",
            gate.display()
        ),
    );
    ws.write(
        ".discobot/hooks/fast.yml",
        "---\nevent: tool.after\nrun: 'true'\n---\n",
    );
    let out = adapter(&ws, "claude", "post-tool-use.json", &[]);
    assert_eq!(stdout(&out), "", "{}", stderr(&out));
    let status = ws.status();
    assert!(
        status["hooks"].get("slow").is_none(),
        "the answer waited for the unawaited hook: {status}"
    );
    common::open_gate(&gate);
    common::wait_until("the unawaited run is recorded", || {
        ws.status()["hooks"]["slow"]["runCount"] == 1
    });
}

/// §5 rule 17: a tool.after hook's piped text is in PostToolUse's (and AfterTool's) own
/// answer, and not delivered again at the next prompt.
#[test]
fn piped_tool_after_output_is_in_the_tool_answer_once() {
    for (agent, fixture, event, prompt) in [
        (
            "claude",
            "post-tool-use.json",
            "PostToolUse",
            "user-prompt-submit.json",
        ),
        (
            "gemini",
            "after-tool.json",
            "AfterTool",
            "before-agent.json",
        ),
    ] {
        let ws = Workspace::git();
        ws.write(
            ".discobot/hooks/lint.yml",
            "---\nevent: tool.after\npipe_output: true\nrun: echo lint says hi\n---\n",
        );
        let out = adapter(&ws, agent, fixture, &[]);
        assert_eq!(
            stdout(&out).trim_end(),
            format!(
                r#"{{"hookSpecificOutput":{{"hookEventName":"{event}","additionalContext":"lint says hi\n"}}}}"#
            ),
            "{agent}: {}",
            stderr(&out)
        );
        let out = adapter(&ws, agent, prompt, &[]);
        assert!(
            !stdout(&out).contains("lint says hi"),
            "{agent}: {}",
            stdout(&out)
        );
    }
}

/// The loop guard remembers a given-up `session.stop`: after the third re-prompt the agent
/// may stop, and later stops stay allowed until the user prompts again.
#[test]
fn a_given_up_session_stop_stays_given_up_until_the_user_prompts() {
    let ws = Workspace::git();
    ws.write(
        ".discobot/hooks/todo.yml",
        "---\nevent: session.stop\nrun: 'echo open TODOs >&2; exit 2'\n---\n",
    );
    let said = |fixture: &str| {
        let out = adapter(&ws, "claude", fixture, &[]);
        if stdout(&out).contains("\"block\"") {
            "block"
        } else {
            assert_eq!(stdout(&out), "", "{}", stderr(&out));
            "allow"
        }
    };
    let prompt = || {
        assert_eq!(
            stdout(&adapter(&ws, "claude", "user-prompt-submit.json", &[])),
            ""
        )
    };
    prompt();
    let answers: Vec<&str> = (0..6).map(|_| said("stop.json")).collect();
    assert_eq!(
        answers,
        ["block", "block", "block", "allow", "allow", "allow"]
    );
    prompt();
    assert_eq!(said("stop.json"), "block", "a user prompt resets the guard");
}

/// The same at a turn end: an unawaited `turn.end` hook (without a pattern) never holds
/// Claude's Stop.
#[test]
fn an_unawaited_turn_end_hook_never_holds_claudes_stop() {
    let ws = Workspace::git();
    let gate = ws.base().join("gate");
    common::gate(&gate);
    ws.write(
        ".discobot/hooks/slow.yml",
        &format!(
            "---\nevent: turn.end\nawait: false\ntimeout: 30\nrun: cat '{}' > /dev/null\n---\n",
            gate.display()
        ),
    );
    ws.write(
        ".discobot/hooks/fast.yml",
        "---\nevent: turn.end\nrun: 'true'\n---\n",
    );
    let out = adapter(&ws, "claude", "stop.json", &[]);
    assert_eq!(stdout(&out), "", "{}", stderr(&out));
    let status = ws.status();
    assert!(
        status["hooks"].get("slow").is_none(),
        "the answer waited for the unawaited hook: {status}"
    );
    common::open_gate(&gate);
    common::wait_until("the unawaited run is recorded", || {
        ws.status()["hooks"]["slow"]["runCount"] == 1
    });
}

//! The loop guard through the built adapters, fed what each agent really sends: a user turn
//! gets exactly `max_retries` re-prompts (1/3, 2/3, 3/3), then the adapter gives up, however
//! the agent sets `stop_hook_active`. Each agent is played with its prompt event installed
//! (what `hookvisor install` registers) and without it (settings from before).

use crate::common;

use std::fs;
use std::io::Write;
use std::path::Path;
use std::process::{Output, Stdio};

use common::{Workspace, check, stderr};
use serde_json::Value;

/// One agent: its adapter, its fixtures, and how it announces our re-prompt.
struct Agent {
    dir: &'static str,
    command: &'static str,
    decision: &'static str,
    /// The prompt event a user's message fires.
    prompt_event: &'static str,
    /// The stop of a turn the user started.
    user_stop: &'static str,
    /// The stop of a re-prompted turn, as the agent sends it without prompt events installed
    /// (the fallback must still count it).
    hook_stop: &'static str,
    /// Whether the agent fires its prompt event for our re-prompt too, with the reason as the
    /// prompt (Gemini CLI's `BeforeAgent` does).
    announces_reprompts: bool,
}

const AGENTS: [Agent; 3] = [
    Agent {
        dir: "claude",
        command: "claude-stop",
        decision: "block",
        prompt_event: "user-prompt-submit.json",
        user_stop: "stop.json",
        hook_stop: "stop-hook-active.json",
        announces_reprompts: false,
    },
    Agent {
        dir: "codex",
        command: "codex-stop",
        decision: "block",
        prompt_event: "user-prompt-submit.json",
        user_stop: "stop.json",
        hook_stop: "stop-hook-active.json",
        announces_reprompts: false,
    },
    Agent {
        dir: "gemini",
        command: "gemini-after-agent",
        decision: "deny",
        prompt_event: "before-agent.json",
        user_stop: "after-agent.json",
        // Gemini CLI 0.61 after the model used a tool in the re-prompted turn: the flag is
        // false, the prompt field still the user's.
        hook_stop: "after-agent.json",
        announces_reprompts: true,
    },
];

const FAILING_LINT: &str =
    r#"echo "lint: $DISCOBOT_CHANGED_FILES: line 1: trailing whitespace"; exit 1"#;

/// A git workspace with a commit and a file hook `lint` on `*.txt` that always fails.
fn workspace() -> Workspace {
    let ws = Workspace::git();
    ws.stage("README.md", "hello\n");
    check(ws.commit("initial"), "initial commit");
    ws.hook(
        "lint.sh",
        "file",
        "name: lint\npattern: '*.txt'",
        FAILING_LINT,
    );
    ws
}

/// A fixture as JSON, its `cwd` pointed at the workspace.
fn fixture(agent: &Agent, name: &str, ws: &Workspace) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(agent.dir)
        .join(name);
    let text = fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text.replace("@WORKSPACE@", ws.path().to_str().unwrap())).unwrap()
}

/// Runs the adapter with `input` on stdin; asserts the exit status is 0.
fn feed(ws: &Workspace, agent: &Agent, input: &Value) -> Output {
    let mut child = ws
        .hookvisor_command()
        .arg(agent.command)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn hookvisor");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "{}: exit {}; {}",
        agent.command,
        output.status,
        stderr(&output)
    );
    output
}

/// The re-prompt the adapter answered, or `None` when it let the agent stop.
fn reprompt(agent: &Agent, output: &Output) -> Option<String> {
    if output.stdout.is_empty() {
        return None;
    }
    let answer: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(answer["decision"], agent.decision, "{answer}");
    Some(answer["reason"].as_str().unwrap().to_owned())
}

/// The attempt a re-prompt counts, as "n/m".
fn attempt(reason: &str) -> &str {
    let start = reason.rfind("(Attempt ").expect("an attempt count") + "(Attempt ".len();
    reason[start..].trim_end_matches(')')
}

/// Plays one user turn the model never fixes, `turns` stops long; returns what each stop got:
/// the attempt count of a re-prompt, or "stop" with the adapter's stderr when it gave up.
fn play(agent: &Agent, prompt_events: bool, turns: usize) -> Vec<String> {
    let ws = workspace();
    if prompt_events {
        let output = feed(&ws, agent, &fixture(agent, agent.prompt_event, &ws));
        assert!(output.stdout.is_empty(), "a prompt event is never answered");
        assert_eq!(stderr(&output), "", "{}", agent.command);
    }
    let mut seen = Vec::new();
    let mut reason: Option<String> = None;
    for turn in 0..turns {
        // The model edits the file each turn without fixing it.
        ws.write("notes.txt", &format!("edit {turn} \n"));
        let stop = match &reason {
            None => agent.user_stop,
            // With prompt events, the agent's flag says nothing: feed a user turn's stop.
            Some(_) if prompt_events => agent.user_stop,
            Some(_) => agent.hook_stop,
        };
        if let Some(reason) = reason
            .as_ref()
            .filter(|_| prompt_events && agent.announces_reprompts)
        {
            let mut event = fixture(agent, agent.prompt_event, &ws);
            event["prompt"] = Value::from(reason.as_str());
            assert!(feed(&ws, agent, &event).stdout.is_empty());
        }
        let output = feed(&ws, agent, &fixture(agent, stop, &ws));
        match reprompt(agent, &output) {
            Some(text) => {
                seen.push(attempt(&text).to_owned());
                reason = Some(text);
            }
            None => seen.push(format!("stop: {}", stderr(&output).trim())),
        }
    }
    seen
}

#[test]
fn each_agent_gets_three_re_prompts_then_the_guard_gives_up() {
    for agent in &AGENTS {
        for prompt_events in [true, false] {
            let seen = play(agent, prompt_events, 5);
            let case = format!(
                "{} {} prompt events: {seen:?}",
                agent.command,
                if prompt_events { "with" } else { "without" }
            );
            assert_eq!(seen[..3], ["1/3", "2/3", "3/3"], "{case}");
            for gave_up in &seen[3..] {
                assert!(
                    gave_up.starts_with("stop: ")
                        && gave_up.contains("hook 'lint' still fails after 3 re-prompts"),
                    "{case}"
                );
            }
        }
    }
}

/// The issue's reproduction: five `AfterAgent` calls of Gemini CLI with
/// `stop_hook_active: false` in one user turn, `BeforeAgent` installed. Each used to say
/// `Attempt 1/3`.
#[test]
fn gemini_after_agent_with_a_false_flag_is_counted() {
    let agent = &AGENTS[2];
    let ws = workspace();
    let before = serde_json::json!({
        "session_id": "g1", "cwd": ws.path(), "hook_event_name": "BeforeAgent",
        "prompt": "Add a line to bad.txt",
    });
    feed(&ws, agent, &before);
    let after = serde_json::json!({
        "session_id": "g1", "cwd": ws.path(), "hook_event_name": "AfterAgent",
        "stop_hook_active": false,
    });
    let mut seen = Vec::new();
    for turn in 0..5 {
        ws.write("bad.txt", &format!("bad {turn} \n"));
        let answer = reprompt(agent, &feed(&ws, agent, &after));
        seen.push(answer.map_or("stop".to_owned(), |r| attempt(&r).to_owned()));
    }
    assert_eq!(seen, ["1/3", "2/3", "3/3", "stop", "stop"]);
}

#[test]
fn a_new_user_prompt_starts_the_count_again() {
    for agent in &AGENTS {
        let ws = workspace();
        let prompt = fixture(agent, agent.prompt_event, &ws);
        let stop = fixture(agent, agent.user_stop, &ws);
        feed(&ws, agent, &prompt);
        for turn in 0..4 {
            ws.write("notes.txt", &format!("edit {turn} \n"));
            feed(&ws, agent, &stop);
        }
        ws.write("notes.txt", "edit again \n");
        feed(&ws, agent, &prompt);
        let reason = reprompt(agent, &feed(&ws, agent, &stop)).expect("a re-prompt");
        assert_eq!(attempt(&reason), "1/3", "{}", agent.command);
    }
}

#[test]
fn two_agent_sessions_sharing_a_state_dir_keep_their_own_turns() {
    let agent = &AGENTS[0];
    let ws = workspace();
    let mut prompt = fixture(agent, agent.prompt_event, &ws);
    let mut stop = fixture(agent, agent.user_stop, &ws);
    feed(&ws, agent, &prompt);
    ws.write("notes.txt", "edit 1 \n");
    assert_eq!(
        attempt(&reprompt(agent, &feed(&ws, agent, &stop)).unwrap()),
        "1/3"
    );
    // Another session's user prompt does not make this session's next stop a user turn.
    prompt["session_id"] = Value::from("other-session");
    feed(&ws, agent, &prompt);
    ws.write("notes.txt", "edit 2 \n");
    assert_eq!(
        attempt(&reprompt(agent, &feed(&ws, agent, &stop)).unwrap()),
        "2/3"
    );
    // And that session's stop is its own user turn.
    stop["session_id"] = Value::from("other-session");
    ws.write("notes.txt", "edit 3 \n");
    assert_eq!(
        attempt(&reprompt(agent, &feed(&ws, agent, &stop)).unwrap()),
        "1/3"
    );
}

/// Issue 28: the agent can write the state dir, and a count of re-prompted turns raised there
/// would end the guard early: the failing hook let through at the next stop. Raised in
/// `status.json` or in the turn log alone, it is bounded by the other record.
#[test]
fn a_count_forged_in_one_record_does_not_end_the_guard_early() {
    let agent = &AGENTS[0];
    for forge in ["status.json", "agent-turns.json"] {
        let ws = workspace();
        let prompt = fixture(agent, agent.prompt_event, &ws);
        let stop = fixture(agent, agent.user_stop, &ws);
        feed(&ws, agent, &prompt);
        ws.write("notes.txt", "edit 1 \n");
        let first = reprompt(agent, &feed(&ws, agent, &stop)).expect("a re-prompt");
        assert_eq!(attempt(&first), "1/3");
        // What the agent writes: the count at the limit and far past it.
        let path = ws.state_dir().join(forge);
        let mut json: Value = serde_json::from_slice(&fs::read(&path).unwrap()).unwrap();
        if forge == "status.json" {
            json["consecutiveHookTurns"] = Value::from(99);
        } else {
            for session in json["sessions"].as_object_mut().unwrap().values_mut() {
                session["block"]["reprompts"] = Value::from(99);
            }
        }
        fs::write(&path, json.to_string()).unwrap();
        ws.write("notes.txt", "edit 2 \n");
        let output = feed(&ws, agent, &stop);
        let second = reprompt(agent, &output)
            .unwrap_or_else(|| panic!("{forge}: the guard gave up: {}", stderr(&output)));
        assert_eq!(attempt(&second), "2/3", "{forge}");
    }
}

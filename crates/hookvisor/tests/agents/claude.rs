//! Claude Code (`claude -p`) through `ANTHROPIC_BASE_URL`.

use std::path::Path;
use std::process::Output;

use crate::common::Workspace;
use crate::model::{Last, ModelServer, Reply, SUBTASK, Script};
use crate::{
    PROMPT, agent_workspace, client_command, clients, fixed_after_one_re_prompt, notes, shown,
    status_json, status_text, three_re_prompts_then_stopped, turn_sessions,
};

/// Runs `claude -p` on the task against a model server with `script`.
fn run(script: Script) -> Option<(Workspace, ModelServer, Output)> {
    run_as(script, false)
}

/// [`run`], under `hookvisor serve --socket PATH -- claude ...` when `serve` is set: the
/// adapter then asks the server to evaluate, in the state dir the server was given.
fn run_as(script: Script, serve: bool) -> Option<(Workspace, ModelServer, Output)> {
    run_with(script, serve, |_| {})
}

/// [`run_as`], with `setup` run on the workspace (extra hooks) before the client starts.
fn run_with(
    script: Script,
    serve: bool,
    setup: impl FnOnce(&Workspace),
) -> Option<(Workspace, ModelServer, Output)> {
    let bin = clients::client("claude")?;
    let ws = agent_workspace("claude");
    setup(&ws);
    let server = ModelServer::start(script);
    let mut cmd = if serve {
        let socket = ws.base().join("hv.sock");
        let mut cmd = client_command(&ws, Path::new(env!("CARGO_BIN_EXE_hookvisor")));
        cmd.arg("serve")
            .arg("--socket")
            .arg(&socket)
            .arg("--")
            .arg(&bin)
            .env("HOOKVISOR_STATE_DIR", ws.state_dir());
        cmd
    } else {
        client_command(&ws, &bin)
    };
    let output = cmd
        .args(["-p", PROMPT, "--permission-mode", "bypassPermissions"])
        .args(["--model", "claude-sonnet-4-5"])
        .env("ANTHROPIC_BASE_URL", &server.url)
        .env("ANTHROPIC_API_KEY", "sk-ant-test")
        .env("CLAUDE_CONFIG_DIR", ws.base().join("home/.claude"))
        // Root may bypass permissions only in a sandbox, which this is.
        .env("IS_SANDBOX", "1")
        .env("DISABLE_AUTOUPDATER", "1")
        .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
        .env("DISABLE_TELEMETRY", "1")
        .env("DISABLE_ERROR_REPORTING", "1")
        .output()
        .expect("run claude");
    Some((ws, server, output))
}

#[test]
fn claude_fixes_after_one_re_prompt() {
    let Some((ws, server, output)) = run(Script::FixesAtOnce) else {
        return;
    };
    let status = fixed_after_one_re_prompt(&ws, &server, &output);
    // The session's runs, found by a plain `hookvisor status`.
    assert_eq!(status["hooks"]["lint"]["runCount"], 2, "{status}");
    assert!(
        status_text(&ws).starts_with("session "),
        "{}",
        status_text(&ws)
    );
    // UserPromptSubmit ran once, for the task; the re-prompt was not taken for a prompt.
    let sessions = turn_sessions(&ws);
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    let session = sessions.values().next().unwrap();
    assert_eq!(session["promptEvents"], true, "{session}");
    assert_eq!(session["prompts"], 1, "{session}");
}

#[test]
fn claude_never_fixing_gets_three_re_prompts_then_stops() {
    let Some((ws, server, output)) = run(Script::NeverFixes) else {
        return;
    };
    let status = three_re_prompts_then_stopped(&ws, &server, &output);
    assert_eq!(status["hooks"]["lint"]["lastResult"], "failure", "{status}");
    // The prompt event ran once, for the task: no re-prompt was taken for a user's message.
    let sessions = turn_sessions(&ws);
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(
        sessions.values().next().unwrap()["prompts"],
        1,
        "{sessions:?}"
    );
}

/// A subagent (the Agent tool) that ends with a failing hook is re-prompted through
/// SubagentStop and fixes it; the main agent then stops cleanly.
#[test]
fn claude_subagent_stop_re_prompts_the_subagent() {
    let Some((ws, server, output)) = run(Script::Subagent) else {
        return;
    };
    let log = server.summary();
    assert!(output.status.success(), "{}\n{log}", shown(&output));
    let sub: Vec<_> = server
        .log()
        .into_iter()
        .filter(|l| l.in_conversation(SUBTASK) && !l.in_task())
        .collect();
    let attempts: Vec<String> = sub.iter().filter_map(|l| l.attempt()).collect();
    assert_eq!(attempts, ["1/3"], "{log}");
    assert!(
        server.attempts().is_empty(),
        "the main agent was not re-prompted: {log}"
    );
    assert!(
        server
            .task()
            .iter()
            .any(|l| matches!(l.reply, Some(Reply::Subagent(_)))),
        "{log}"
    );
    assert_eq!(notes(&ws), "good notes\n");
    let status = status_json(&ws);
    assert_eq!(status["hooks"]["lint"]["lastResult"], "success", "{status}");
}

/// Under `hookvisor serve --socket -- claude`, the adapter asks the server, which counts the
/// re-prompts the same way; serve exits with the agent's status.
#[test]
fn claude_under_serve_gets_three_re_prompts_then_stops() {
    let Some((ws, server, output)) = run_as(Script::NeverFixes, true) else {
        return;
    };
    let log = server.summary();
    assert!(output.status.success(), "{}\n{log}", shown(&output));
    assert_eq!(server.attempts(), ["1/3", "2/3", "3/3"], "{log}");
    assert_eq!(server.task().len(), 8, "{log}");
    // The server evaluated, in the state dir it was given.
    let status: serde_json::Value =
        serde_json::from_slice(&std::fs::read(ws.state_dir().join("status.json")).unwrap())
            .unwrap();
    assert_eq!(status["hooks"]["lint"]["runCount"], 4, "{status}");
    assert_eq!(
        status["pendingHooks"],
        serde_json::json!(["lint"]),
        "{status}"
    );
}

/// A `tool.before` hook with `tool: bash` denies Claude Code's `Bash` call through
/// PreToolUse (rule 6's canonical name); the model's next request carries the deny reason as
/// the tool's result, and the command never ran.
#[test]
fn claude_pre_tool_use_deny_reaches_the_model() {
    const DENIED: &str = "HOOKVISOR-DENIED: no shell here";
    let Some((ws, server, output)) = run_with(Script::FixesAtOnce, false, |ws| {
        ws.write(
            ".discobot/hooks/no-shell.yml",
            &format!(
                "---\nevent: tool.before\ntool: bash\nrun: echo '{DENIED}' >&2; exit 2\n---\n"
            ),
        );
    }) else {
        return;
    };
    let log = server.summary();
    assert!(output.status.success(), "{}\n{log}", shown(&output));
    assert_eq!(notes(&ws), "", "the denied command did not run\n{log}");
    let task = server.task();
    let after = task
        .iter()
        .find(|r| r.last == Last::ToolResult)
        .unwrap_or_else(|| panic!("no request after the tool call\n{log}"));
    assert!(after.body.to_string().contains(DENIED), "{}", after.body);
}

/// A `turn.start` hook with `pipe_output: true`: its output reaches the model through
/// UserPromptSubmit's `additionalContext`, in the first request of the task.
#[test]
fn claude_user_prompt_submit_context_reaches_the_model() {
    const CONTEXT: &str = "HOOKVISOR-CONTEXT: the branch is main";
    let Some((_ws, server, output)) = run_with(Script::FixesAtOnce, false, |ws| {
        ws.write(
            ".discobot/hooks/branch.yml",
            &format!("---\nevent: turn.start\npipe_output: true\nrun: echo '{CONTEXT}'\n---\n"),
        );
    }) else {
        return;
    };
    let log = server.summary();
    assert!(output.status.success(), "{}\n{log}", shown(&output));
    let first = server
        .task()
        .into_iter()
        .next()
        .unwrap_or_else(|| panic!("no task request\n{log}"));
    assert!(first.body.to_string().contains(CONTEXT), "{}", first.body);
}

/// docs/EVENTS.md §5 rule 17: a `tool.after` hook's piped output reaches the model in
/// PostToolUse's own `additionalContext`: in the request right after the tool's result, once.
#[test]
fn claude_post_tool_use_piped_context_reaches_the_next_request() {
    const PIPED: &str = "HOOKVISOR-PIPED: lint says hi";
    let Some((_ws, server, output)) = run_with(Script::FixesAtOnce, false, |ws| {
        ws.write(
            ".discobot/hooks/after.yml",
            &format!("---\nevent: tool.after\npipe_output: true\nrun: echo '{PIPED}'\n---\n"),
        );
    }) else {
        return;
    };
    let log = server.summary();
    assert!(output.status.success(), "{}\n{log}", shown(&output));
    let task = server.task();
    let after = task
        .iter()
        .find(|r| r.last == Last::ToolResult)
        .unwrap_or_else(|| panic!("no request after the tool call\n{log}"));
    let body = after.body.to_string();
    assert_eq!(body.matches(PIPED).count(), 1, "{body}");
}

/// docs/EVENTS.md §1.3: an `await: false` hook never holds the tool call. The hook waits on a gate
/// the test opens only after Claude Code has exited: had its PostToolUse waited for the hook,
/// the run would end at the hook's own timeout and be recorded before the gate opened.
#[test]
fn claude_never_waits_for_an_unawaited_tool_after_hook() {
    let gate = std::cell::OnceCell::new();
    let Some((ws, server, output)) = run_with(Script::FixesAtOnce, false, |ws| {
        let path = ws.base().join("gate");
        crate::common::gate(&path);
        ws.write(
            ".discobot/hooks/slow.yml",
            &format!(
                "---\nevent: tool.after\nawait: false\ntimeout: 30\nrun: cat '{}' > /dev/null\n---\n",
                path.display()
            ),
        );
        gate.set(path).unwrap();
    }) else {
        return;
    };
    let log = server.summary();
    assert!(output.status.success(), "{}\n{log}", shown(&output));
    // The adapter's default state dir is the session's, `~/.discobot/SESSION/hooks`; no
    // status.json yet is no run recorded yet.
    let runs = || {
        let sessions = std::fs::read_dir(ws.base().join("home/.discobot")).ok()?;
        let state = sessions.flatten().next()?.path().join("hooks");
        let text = std::fs::read_to_string(state.join("status.json")).ok()?;
        let status: serde_json::Value = serde_json::from_str(&text).ok()?;
        status["hooks"]["slow"]["runCount"].as_u64()
    };
    assert_eq!(
        runs(),
        None,
        "the tool call waited for the unawaited hook\n{log}"
    );
    crate::common::open_gate(gate.get().unwrap());
    // One run per tool call, each recorded once the gate lets it end.
    let calls = server
        .task()
        .iter()
        .filter(|r| r.last == Last::ToolResult)
        .count() as u64;
    assert!(calls > 0, "no tool call\n{log}");
    crate::common::wait_until("the unawaited runs are recorded", || runs() == Some(calls));
}

/// Issue 28: after `cd src` in a Bash call, Claude Code sends `src` as the `cwd` of every later
/// event. A gate on Writes of `*.lock` still denies the Write of `src/Cargo.lock` (the file
/// is not written), and the turn end still finds the workspace's hooks.
#[test]
fn claude_after_cd_src_a_pattern_gate_still_denies_the_write() {
    const DENIED: &str = "HOOKVISOR-DENIED: no lock files";
    let Some((ws, server, output)) = run_with(Script::CdThenWrite, false, |ws| {
        std::fs::create_dir_all(ws.path().join("src")).unwrap();
        ws.write(
            ".discobot/hooks/no-locks.yml",
            &format!(
                "---\nevent: tool.before\ntool: write|edit\npattern: '*.lock, migrations/**'\n\
                 run: echo '{DENIED}' >&2; exit 2\n---\n"
            ),
        );
        let stopped = ws.base().join("stopped");
        ws.write(
            ".discobot/hooks/stopped.yml",
            &format!(
                "---\nevent: session.stop\nrun: touch '{}'\n---\n",
                stopped.display()
            ),
        );
    }) else {
        return;
    };
    let log = server.summary();
    assert!(output.status.success(), "{}\n{log}", shown(&output));
    let task = server.task();
    assert!(
        task.iter()
            .any(|r| matches!(&r.reply, Some(Reply::Write(p)) if p.ends_with("/src/Cargo.lock"))),
        "the model wrote after the cd\n{log}"
    );
    assert!(
        !ws.path().join("src/Cargo.lock").exists(),
        "the denied Write wrote the file\n{log}"
    );
    let after = task
        .last()
        .unwrap_or_else(|| panic!("no task request\n{log}"));
    assert!(after.body.to_string().contains(DENIED), "{}", after.body);
    assert!(
        ws.base().join("stopped").exists(),
        "the Stop after the cd found no hooks\n{log}"
    );
}

/// Issue 28: Claude Code runs the two `Read` calls of one reply at once, so under serve their
/// two PreToolUse gates reach the server together. Both are judged: a `tool.before` hook on
/// `Read` denies each, the model gets both denials as the calls' results, and neither file's
/// secret reaches it. (Serve used to refuse the second gate of a session with 409, which the
/// adapter took for allow: one file went to the model.)
#[test]
fn claude_under_serve_gates_both_parallel_reads() {
    const DENIED: &str = "HOOKVISOR-DENIED: no reads";
    const SECRETS: [&str; 2] = ["HOOKVISOR-SECRET-A", "HOOKVISOR-SECRET-B"];
    let Some((ws, server, output)) = run_with(Script::TwoReads, true, |ws| {
        ws.write("secret-a.txt", &format!("{}\n", SECRETS[0]));
        ws.write("secret-b.txt", &format!("{}\n", SECRETS[1]));
        // The gate holds until it has seen the other Read's adapter running too, so the two
        // gates are in flight together whatever the timing.
        let gate = ws.base().join("gate.sh");
        let script = format!(
            "SEEN='{}'\nROOT='{}'\nDENIED='{DENIED}'\n{WAIT_FOR_BOTH}",
            ws.base().join("seen").display(),
            ws.path().canonicalize().unwrap().display(),
        );
        std::fs::write(&gate, script).unwrap();
        ws.write(
            ".discobot/hooks/no-reads.yml",
            &format!(
                "---\nevent: tool.before\ntool: Read\nrun: sh '{}'\n---\n",
                gate.display()
            ),
        );
    }) else {
        return;
    };
    let log = server.summary();
    assert!(output.status.success(), "{}\n{log}", shown(&output));
    let task = server.task();
    assert!(
        task.iter()
            .any(|r| matches!(&r.reply, Some(Reply::Reads(paths)) if paths.len() == 2)),
        "the model asked for both files in one reply\n{log}"
    );
    // The request after the reads: the client's one assistant message holds both calls, and
    // its answer both results, each the gate's denial.
    let after = task
        .iter()
        .find(|r| r.last == Last::ToolResult)
        .unwrap_or_else(|| panic!("no request after the reads\n{log}"));
    let messages = after.body["messages"].as_array().unwrap();
    let [.., asked, answered] = messages.as_slice() else {
        panic!("{}", after.body)
    };
    let uses: Vec<&str> = asked["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "tool_use")
        .map(|b| b["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        uses.len(),
        2,
        "both calls in one assistant message: {asked}"
    );
    let results: Vec<&serde_json::Value> = answered["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|b| b["type"] == "tool_result")
        .collect();
    let mut answered_ids: Vec<&str> = results
        .iter()
        .map(|b| b["tool_use_id"].as_str().unwrap())
        .collect();
    answered_ids.sort_unstable();
    let mut asked_ids = uses.clone();
    asked_ids.sort_unstable();
    assert_eq!(answered_ids, asked_ids, "{answered}");
    for result in &results {
        assert_eq!(result["is_error"], true, "{result}");
        assert!(result.to_string().contains(DENIED), "{result}");
    }
    // No request the model got, this conversation or any side one, holds either secret.
    for request in server.log() {
        let body = request.body.to_string();
        for secret in SECRETS {
            assert!(!body.contains(secret), "{secret} reached the model: {body}");
        }
    }
    assert!(
        ws.base().join("seen").exists(),
        "the gate saw both Reads' adapters running at once\n{log}"
    );
}

/// A gate hook's script (after `SEEN`, `ROOT` and `DENIED` are set): waits, at most 10 s,
/// until two of Claude Code's PreToolUse adapters run in the workspace `ROOT` at once, or an
/// earlier run saw them (`SEEN`), then denies with `DENIED`.
const WAIT_FOR_BOTH: &str = r#"i=0
while [ ! -e "$SEEN" ] && [ $i -lt 100 ]; do
  n=0
  for p in $(pgrep -f '^[^ ]*/hookvisor adapter claude( |$)'); do
    [ "$(readlink /proc/$p/cwd)" = "$ROOT" ] && n=$((n+1))
  done
  [ $n -ge 2 ] && touch "$SEEN"
  sleep 0.1
  i=$((i+1))
done
echo "$DENIED" >&2
exit 2
"#;

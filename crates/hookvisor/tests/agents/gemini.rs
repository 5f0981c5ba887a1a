//! Gemini CLI (`gemini -p`) through `GOOGLE_GEMINI_BASE_URL`.

use std::fs;
use std::process::Output;

use crate::common::Workspace;
use crate::model::{Last, ModelServer, Script};
use crate::{
    PROMPT, agent_workspace, client_command, clients, fixed_after_one_re_prompt, shown,
    three_re_prompts_then_stopped, turn_sessions,
};

/// Runs `gemini -p` on the task against a model server with `script`.
fn run(script: Script) -> Option<(Workspace, ModelServer, Output)> {
    run_with(script, |_| {})
}

/// [`run`], with `setup` run on the workspace (extra hooks) before the client starts.
fn run_with(
    script: Script,
    setup: impl FnOnce(&Workspace),
) -> Option<(Workspace, ModelServer, Output)> {
    let bin = clients::client("gemini")?;
    let ws = agent_workspace("gemini");
    setup(&ws);
    // The user's settings: API-key auth, no usage statistics, telemetry or update checks.
    let user = ws.base().join("home/.gemini");
    fs::create_dir_all(&user).unwrap();
    let settings = serde_json::json!({
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "privacy": {"usageStatisticsEnabled": false},
        "telemetry": {"enabled": false},
        "general": {"enableAutoUpdate": false, "enableAutoUpdateNotification": false},
    });
    fs::write(user.join("settings.json"), settings.to_string()).unwrap();
    let server = ModelServer::start(script);
    let output = client_command(&ws, &bin)
        .args([
            "-p",
            PROMPT,
            "--approval-mode",
            "yolo",
            "-m",
            "gemini-2.5-flash",
        ])
        .env("GOOGLE_GEMINI_BASE_URL", &server.url)
        .env("GEMINI_API_KEY", "test-key")
        // Project hooks run only in a trusted folder.
        .env("GEMINI_CLI_TRUST_WORKSPACE", "true")
        .env("GEMINI_TELEMETRY_ENABLED", "false")
        .output()
        .expect("run gemini");
    Some((ws, server, output))
}

#[test]
fn gemini_fixes_after_one_re_prompt() {
    let Some((ws, server, output)) = run(Script::FixesAtOnce) else {
        return;
    };
    fixed_after_one_re_prompt(&ws, &server, &output);
}

/// The bug: Gemini CLI sends `stop_hook_active: false` after a re-prompted turn in
/// which the model used a tool, and hookvisor used to re-prompt without end.
#[test]
fn gemini_never_fixing_gets_exactly_three_re_prompts_then_stops() {
    let Some((ws, server, output)) = run(Script::NeverFixes) else {
        return;
    };
    three_re_prompts_then_stopped(&ws, &server, &output);
    // BeforeAgent fired for the task and for each re-prompt; only the task was a user's.
    let sessions = turn_sessions(&ws);
    let session = sessions.values().next().expect("a session");
    assert_eq!(session["prompts"], 1, "{session}");
}

/// docs/EVENTS.md §5 rule 17: a `tool.after` hook's piped output reaches the model through
/// AfterTool's `additionalContext`, in the request right after the tool's result, once.
#[test]
fn gemini_after_tool_piped_context_reaches_the_next_request() {
    const PIPED: &str = "HOOKVISOR-PIPED: lint says hi";
    let Some((_ws, server, output)) = run_with(Script::FixesAtOnce, |ws| {
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

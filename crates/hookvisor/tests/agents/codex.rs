//! Codex (`codex exec`) through a custom model provider whose `base_url` is our server.

use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::Output;
use std::sync::mpsc;
use std::time::Duration;

use crate::common::{Workspace, check};
use crate::model::{ModelServer, Script};
use crate::{
    PROMPT, client_command, clients, fixed_after_one_re_prompt, lint_workspace, plain, shown,
    three_re_prompts_then_stopped, turn_sessions,
};

/// Runs `codex exec` on the task against a model server with `script`; also returns what
/// `hookvisor install codex` said.
fn run(script: Script) -> Option<(Workspace, ModelServer, Output, String)> {
    run_in(lint_workspace(), script)
}

/// [`run`] in `ws`, whose hooks are written before `install`.
fn run_in(ws: Workspace, script: Script) -> Option<(Workspace, ModelServer, Output, String)> {
    let bin = clients::client("codex")?;
    let server = ModelServer::start(script);
    let codex_home = ws.base().join("home/.codex");
    fs::create_dir_all(&codex_home).unwrap();
    // The project is trusted (the user's decision; install only prints it as a step), the
    // model is ours, update checks and analytics are off.
    let config = format!(
        r#"model = "gpt-5.1-codex"
model_provider = "scripted"
check_for_update_on_startup = false

[analytics]
enabled = false

[model_providers.scripted]
name = "scripted"
base_url = "{url}/v1"
wire_api = "responses"
env_key = "SCRIPTED_API_KEY"
request_max_retries = 0
stream_max_retries = 0

[projects.{ws}]
trust_level = "trusted"
"#,
        url = server.url,
        ws = serde_json::to_string(&ws.path()).unwrap(),
    );
    fs::write(codex_home.join("config.toml"), config).unwrap();
    // Install with `codex` on PATH: install records the hooks' trust through codex app-server.
    let bin_dir = bin.parent().unwrap();
    let path = format!(
        "{}:{}",
        bin_dir.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let said = check(
        plain(&ws)
            .args(["install", "codex"])
            .env("PATH", &path)
            .env("CODEX_HOME", &codex_home)
            .output()
            .unwrap(),
        "install codex",
    );
    let output = client_command(&ws, &bin)
        .args(["exec", "--dangerously-bypass-approvals-and-sandbox", PROMPT])
        .env("PATH", &path)
        .env("CODEX_HOME", &codex_home)
        .env("SCRIPTED_API_KEY", "test-key")
        .output()
        .expect("run codex");
    Some((ws, server, output, said))
}

fn trusted(said: &str, codex_home: &Path) {
    assert!(
        said.contains("Codex now trusts these hooks")
            && said.contains(&codex_home.join("config.toml").display().to_string()),
        "{said}"
    );
}

#[test]
fn codex_fixes_after_one_re_prompt() {
    let Some((ws, server, output, said)) = run(Script::FixesAtOnce) else {
        return;
    };
    trusted(&said, &ws.base().join("home/.codex"));
    fixed_after_one_re_prompt(&ws, &server, &output);
}

#[test]
fn codex_never_fixing_gets_three_re_prompts_then_stops() {
    let Some((ws, server, output, _)) = run(Script::NeverFixes) else {
        return;
    };
    three_re_prompts_then_stopped(&ws, &server, &output);
    // The prompt event ran once, for the task: no re-prompt was taken for a user's message.
    let sessions = turn_sessions(&ws);
    assert_eq!(sessions.len(), 1, "{sessions:?}");
    assert_eq!(
        sessions.values().next().unwrap()["prompts"],
        1,
        "{sessions:?}"
    );
}

/// Codex 0.169 sends `SessionEnd`, which `install` binds: a `session.end` hook runs when
/// `codex exec` ends (detached from it, so the test reads what it writes through a FIFO).
#[test]
fn codex_runs_the_session_end_hooks() {
    let ws = lint_workspace();
    let fifo = ws.base().join("ended");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    ws.write(
        ".discobot/hooks/end.yml",
        &format!(
            "---\nevent: session.end\nrun: echo \"${{event}}\" > '{}'\n---\n",
            fifo.display()
        ),
    );
    let Some((_ws, server, output, _)) = run_in(ws, Script::FixesAtOnce) else {
        return;
    };
    assert!(
        output.status.success(),
        "{}\n{}",
        shown(&output),
        server.summary()
    );
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut text = String::new();
        fs::File::open(&fifo)
            .and_then(|mut f| f.read_to_string(&mut text))
            .ok();
        tx.send(text).ok();
    });
    let text = rx
        .recv_timeout(Duration::from_secs(60))
        .expect("the session.end hook ran");
    assert_eq!(text, "session.end\n");
}

//! `claude-stop`, `codex-stop` and `gemini-after-agent` through the built binary: recorded
//! stdin fixtures (tests/fixtures/<agent>/), a real git workspace and real hook processes, and
//! for `HOOKVISOR_URL` a minimal HTTP server on loopback or a Unix socket standing in for
//! `hookvisor serve`.

use crate::common;

use std::fs;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::thread::{self, JoinHandle};

use common::{Workspace, check, stderr};

/// One agent's adapter and the fixtures of its two kinds of turn end.
struct Agent {
    /// The directory under tests/fixtures.
    dir: &'static str,
    /// The subcommand.
    command: &'static str,
    /// The `decision` that re-prompts.
    decision: &'static str,
    /// A turn started by the user.
    user_turn: &'static str,
    /// A turn started by a previous block.
    hook_turn: &'static str,
}

const CLAUDE: Agent = Agent {
    dir: "claude",
    command: "claude-stop",
    decision: "block",
    user_turn: "stop.json",
    hook_turn: "stop-hook-active.json",
};
const CODEX: Agent = Agent {
    dir: "codex",
    command: "codex-stop",
    decision: "block",
    user_turn: "stop.json",
    hook_turn: "stop-hook-active.json",
};
const GEMINI: Agent = Agent {
    dir: "gemini",
    command: "gemini-after-agent",
    decision: "deny",
    user_turn: "after-agent.json",
    hook_turn: "after-agent-retry.json",
};
const AGENTS: [&Agent; 3] = [&CLAUDE, &CODEX, &GEMINI];

/// Claude Code's cap on hook output that reaches the model.
const CLAUDE_LIMIT: usize = 10_000;

const FAILING_LINT: &str =
    r#"echo "lint: $DISCOBOT_CHANGED_FILES: line 1: trailing whitespace"; exit 1"#;

/// A git workspace with one commit, a file hook `lint` on `*.txt` running `body`, and a changed
/// `notes.txt` for it to run on.
fn workspace_with_lint(body: &str) -> Workspace {
    let ws = Workspace::git();
    ws.stage("README.md", "hello\n");
    check(ws.commit("initial"), "initial commit");
    ws.hook("lint.sh", "file", "name: lint\npattern: '*.txt'", body);
    ws.write("notes.txt", "a line \n");
    // Tests here count re-prompts: the files above must be older than the first turn's cutoff.
    common::tick();
    ws
}

/// The fixture of the agent's prompt event: a new user message.
fn prompt_event(agent: &Agent) -> &'static str {
    match agent.dir {
        "gemini" => "before-agent.json",
        _ => "user-prompt-submit.json",
    }
}

/// A fixture's text with the recorded `cwd` pointed at `workspace`.
fn fixture(agent: &Agent, name: &str, workspace: &Path) -> Vec<u8> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(agent.dir)
        .join(name);
    let bytes = fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    match String::from_utf8(bytes) {
        Ok(text) => text
            .replace("@WORKSPACE@", workspace.to_str().unwrap())
            .into_bytes(),
        Err(e) => e.into_bytes(),
    }
}

/// Runs `cmd` with `stdin` piped in, as the agents do.
fn run_with_stdin(mut cmd: Command, stdin: &[u8]) -> Output {
    cmd.env_remove("HOOKVISOR_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn hookvisor");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

/// The adapter fed one fixture, with extra arguments after the subcommand.
fn feed(ws: &Workspace, agent: &Agent, fixture_name: &str, args: &[&str]) -> Output {
    let mut cmd = ws.hookvisor_command();
    cmd.arg(agent.command).args(args);
    run_with_stdin(cmd, &fixture(agent, fixture_name, ws.path()))
}

/// What the agent reads: `None` for silence, else the decision and the reason. Also checks the
/// exit status is 0, since anything else is a hook error to the agents, never a re-prompt.
fn answer(output: &Output) -> Option<(String, String)> {
    assert!(
        output.status.success(),
        "adapters always exit 0 ({}); stderr: {}",
        output.status,
        stderr(output)
    );
    let stdout = String::from_utf8(output.stdout.clone()).unwrap();
    if stdout.is_empty() {
        return None;
    }
    let value: serde_json::Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {stdout}"));
    let object = value.as_object().expect("a JSON object");
    assert!(
        !object.contains_key("continue"),
        "never continue:false: {stdout}"
    );
    assert_eq!(object.len(), 2, "only decision and reason: {stdout}");
    Some((
        object["decision"].as_str().unwrap().to_owned(),
        object["reason"].as_str().unwrap().to_owned(),
    ))
}

fn blocked(agent: &Agent, output: &Output) -> String {
    match answer(output) {
        Some((decision, reason)) => {
            assert_eq!(decision, agent.decision, "{}", agent.command);
            assert!(!reason.trim().is_empty(), "{}: empty reason", agent.command);
            reason
        }
        None => panic!(
            "{} let the agent stop; stderr: {}",
            agent.command,
            stderr(output)
        ),
    }
}

fn silent(agent: &Agent, output: &Output) {
    if let Some(answer) = answer(output) {
        panic!("{} should print nothing, printed {answer:?}", agent.command);
    }
}

#[test]
fn a_failing_hook_blocks_with_its_message() {
    for agent in AGENTS {
        let ws = workspace_with_lint(FAILING_LINT);
        let reason = blocked(agent, &feed(&ws, agent, agent.user_turn, &[]));
        assert!(
            reason.starts_with("[Discobot Hook Failed] \"lint\" (pattern: *.txt)"),
            "{reason}"
        );
        assert!(reason.contains("Files: notes.txt"), "{reason}");
        assert!(
            reason.contains("lint: notes.txt: line 1: trailing whitespace"),
            "{reason}"
        );
        assert!(reason.ends_with("(Attempt 1/3)"), "{reason}");
    }
}

#[test]
fn a_passing_hook_lets_the_agent_stop_silently() {
    for agent in AGENTS {
        let ws = workspace_with_lint("echo all good");
        let output = feed(&ws, agent, agent.user_turn, &[]);
        silent(agent, &output);
        assert_eq!(stderr(&output), "", "{}", agent.command);
        // Silence because the hook ran and passed, not because nothing ran.
        assert_eq!(
            ws.status()["hooks"]["lint"]["runCount"],
            1,
            "{}",
            agent.command
        );
        assert_eq!(ws.status()["hooks"]["lint"]["lastResult"], "success");
    }
}

#[test]
fn the_loop_guard_releases_the_agent_after_max_retries_and_resets_on_a_user_turn() {
    // The count comes from --max-retries for one agent and HOOKVISOR_MAX_RETRIES for the others.
    for (agent, from_env) in [(&CLAUDE, false), (&CODEX, true), (&GEMINI, true)] {
        let ws = workspace_with_lint(FAILING_LINT);
        let turn = |fixture_name: &str, edit: usize| {
            // The model edits the file each turn without fixing it.
            ws.write("notes.txt", &format!("edit {edit} \n"));
            let mut cmd = ws.hookvisor_command();
            cmd.arg(agent.command);
            if from_env {
                cmd.env("HOOKVISOR_MAX_RETRIES", "2");
            } else {
                cmd.args(["--max-retries", "2"]);
            }
            run_with_stdin(cmd, &fixture(agent, fixture_name, ws.path()))
        };
        let first = blocked(agent, &turn(agent.user_turn, 1));
        assert!(first.ends_with("(Attempt 1/2)"), "{first}");
        let second = blocked(agent, &turn(agent.hook_turn, 2));
        assert!(second.ends_with("(Attempt 2/2)"), "{second}");
        let released = turn(agent.hook_turn, 3);
        silent(agent, &released);
        assert!(
            stderr(&released).contains("still fails after 2 re-prompts"),
            "{}: {}",
            agent.command,
            stderr(&released)
        );
        assert_eq!(ws.status()["pendingHooks"], serde_json::json!(["lint"]));
        // A new user message: Gemini CLI repeats the old prompt until its prompt event says so.
        feed(&ws, agent, prompt_event(agent), &[]);
        let again = blocked(agent, &turn(agent.user_turn, 4));
        assert!(again.ends_with("(Attempt 1/2)"), "{again}");
    }
}

#[test]
fn an_unchanged_workspace_does_not_re_prompt_the_same_failure() {
    let ws = workspace_with_lint(FAILING_LINT);
    blocked(&CLAUDE, &feed(&ws, &CLAUDE, CLAUDE.user_turn, &[]));
    // The model answered without touching the file: the same inputs would fail the same way.
    silent(&CLAUDE, &feed(&ws, &CLAUDE, CLAUDE.hook_turn, &[]));
}

#[test]
fn a_hook_file_the_model_broke_blocks_naming_it_and_a_known_one_only_warns() {
    for agent in AGENTS {
        let ws = workspace_with_lint("echo all good");
        silent(agent, &feed(&ws, agent, agent.user_turn, &[]));

        // The model breaks the hook file with a value discobot would have run.
        ws.hook(
            "lint.sh",
            "file",
            "name: lint\npattern: '*.txt'\nnotify_llm: maybe",
            "echo all good",
        );
        // Strictly before this turn's cutoff, so the next turn does not see it changed again.
        common::tick();
        let output = feed(&ws, agent, agent.user_turn, &[]);
        let reason = blocked(agent, &output);
        assert!(
            reason.starts_with(
                "[Discobot Hook Failed] hook file .discobot/hooks/lint.sh does not load\n\n\
                 Reason: invalid notify_llm 'maybe'"
            ),
            "{}: {reason}",
            agent.command
        );
        assert!(
            reason.ends_with("Please fix the hook file. (Attempt 1/3)"),
            "{reason}"
        );
        assert!(
            stderr(&output).contains("lint.sh: invalid notify_llm 'maybe'"),
            "{}",
            stderr(&output)
        );

        // The model answers without touching it: a known problem, said on stderr only.
        let output = feed(&ws, agent, agent.hook_turn, &[]);
        silent(agent, &output);
        assert!(
            stderr(&output).contains("lint.sh: invalid notify_llm 'maybe'"),
            "{}",
            stderr(&output)
        );
    }
}

#[test]
fn subagent_stop_is_evaluated_like_stop() {
    for agent in [&CLAUDE, &CODEX] {
        let ws = workspace_with_lint(FAILING_LINT);
        let reason = blocked(agent, &feed(&ws, agent, "subagent-stop.json", &[]));
        assert!(reason.ends_with("(Attempt 1/3)"), "{reason}");
    }
}

#[test]
fn missing_optional_fields_are_tolerated() {
    for agent in AGENTS {
        // No cwd: the workspace is the current directory; no stop_hook_active: a user turn.
        let ws = workspace_with_lint(FAILING_LINT);
        let reason = blocked(agent, &feed(&ws, agent, "minimal.json", &[]));
        assert!(reason.ends_with("(Attempt 1/3)"), "{reason}");
    }
}

#[test]
fn workspace_option_beats_the_agents_cwd() {
    let ws = workspace_with_lint(FAILING_LINT);
    let elsewhere = ws.base().join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    let mut cmd = ws.hookvisor_command();
    cmd.args(["claude-stop", "--workspace"]).arg(ws.path());
    let output = run_with_stdin(cmd, &fixture(&CLAUDE, "stop.json", &elsewhere));
    blocked(&CLAUDE, &output);
}

#[test]
fn garbage_input_fails_open_by_default_and_blocks_with_fail_closed() {
    for agent in AGENTS {
        let ws = workspace_with_lint(FAILING_LINT);
        let open = feed(&ws, agent, "garbage.txt", &[]);
        silent(agent, &open);
        let said = stderr(&open);
        assert!(said.contains("hook JSON on stdin"), "{said}");
        assert!(said.contains("failing open"), "{said}");

        let closed = feed(&ws, agent, "garbage.txt", &["--fail-closed"]);
        let reason = blocked(agent, &closed);
        assert!(reason.contains("hookvisor could not check"), "{reason}");
        assert!(reason.contains("hook JSON on stdin"), "{reason}");
        assert!(reason.contains("--fail-closed"), "{reason}");

        let mut cmd = ws.hookvisor_command();
        cmd.arg(agent.command);
        let empty = run_with_stdin(cmd, b"");
        silent(agent, &empty);
        assert!(stderr(&empty).contains("no hook JSON on stdin"));
    }
}

#[test]
fn an_unusable_state_dir_fails_open_or_closed() {
    let ws = workspace_with_lint(FAILING_LINT);
    // A state dir below a regular file cannot be created, even by root.
    let blocker = ws.base().join("not-a-dir");
    fs::write(&blocker, "").unwrap();
    let state = blocker.join("state");
    let state = state.to_str().unwrap();
    for agent in AGENTS {
        let open = feed(&ws, agent, agent.user_turn, &["--state-dir", state]);
        silent(agent, &open);
        assert!(stderr(&open).contains("not-a-dir"), "{}", stderr(&open));
        assert!(stderr(&open).contains("failing open"), "{}", stderr(&open));

        let closed = feed(
            &ws,
            agent,
            agent.user_turn,
            &["--state-dir", state, "--fail-closed"],
        );
        let reason = blocked(agent, &closed);
        assert!(reason.contains("not-a-dir"), "{reason}");
    }
}

/// The old name is an alias of `adapter claude` (docs/EVENTS.md §3.1): a tool event is answered
/// as the adapter answers it, here with no `tool.before` hook, by nothing.
#[test]
fn an_old_name_answers_a_tool_event_as_the_adapter() {
    let ws = workspace_with_lint(FAILING_LINT);
    let mut cmd = ws.hookvisor_command();
    cmd.arg("claude-stop");
    let output = run_with_stdin(
        cmd,
        br#"{"hook_event_name":"PreToolUse","tool_name":"Bash"}"#,
    );
    silent(&CLAUDE, &output);
    assert_eq!(stderr(&output), "");
    assert!(
        !ws.state_dir().join("status.json").exists(),
        "a tool event runs no file hook"
    );
}

#[test]
fn long_output_is_shortened_under_claudes_limit_keeping_the_log_path() {
    // 40 lines of 2,000 characters: far over the inline limit and over 10,000 characters.
    let ws = workspace_with_lint(
        r#"i=0; while [ $i -lt 40 ]; do printf "line $i %02000d\n" 0; i=$((i+1)); done; exit 1"#,
    );
    for agent in AGENTS {
        ws.write("notes.txt", &format!("for {}\n", agent.command));
        let reason = blocked(agent, &feed(&ws, agent, agent.user_turn, &[]));
        assert!(reason.chars().count() < CLAUDE_LIMIT, "{}", reason.len());
        let log = ws.state_dir().join("output/lint.log");
        assert!(reason.contains(log.to_str().unwrap()), "{reason}");
        assert!(reason.contains("line 39 "), "keeps the end of the output");
        assert!(reason.ends_with("(Attempt 1/3)"), "{reason}");
    }
}

#[test]
fn without_a_session_the_agents_session_id_keys_the_state() {
    let ws = workspace_with_lint(FAILING_LINT);
    let mut cmd = ws.hookvisor_command();
    cmd.env_remove("HOOKVISOR_STATE_DIR").arg("claude-stop");
    blocked(
        &CLAUDE,
        &run_with_stdin(cmd, &fixture(&CLAUDE, "stop.json", ws.path())),
    );
    let state = ws
        .base()
        .join("home/.discobot/8f3a2c1e-1b2c-4d5e-9f00-123456789abc/hooks");
    assert!(state.join("status.json").is_file(), "{}", state.display());

    // DISCOBOT_SESSION_ID (the container's session) wins over the agent's.
    let mut cmd = ws.hookvisor_command();
    cmd.env_remove("HOOKVISOR_STATE_DIR")
        .env("DISCOBOT_SESSION_ID", "pod-1")
        .arg("claude-stop");
    blocked(
        &CLAUDE,
        &run_with_stdin(cmd, &fixture(&CLAUDE, "stop.json", ws.path())),
    );
    assert!(
        ws.base()
            .join("home/.discobot/pod-1/hooks/status.json")
            .is_file()
    );
}

/// The eval JSON of `hookvisor serve` for a failed lint.
const SERVER_REPROMPT: &str = r#"{"action":"reprompt","message":"[Discobot Hook Failed] \"lint\" (pattern: *.txt)\n\nFiles: notes.txt\nExit code: 1\n\nOutput:\nfrom the server\n\nPlease fix the issues and ensure the hook passes. (Attempt 2/3)","attempt":2,"maxAttempts":3,"pending":["lint"],"results":[{"hookId":"lint","exitCode":1,"success":false,"timedOut":false,"files":["notes.txt"]}]}"#;
const SERVER_PASS: &str =
    r#"{"action":"pass","message":null,"attempt":1,"maxAttempts":3,"pending":[],"results":[]}"#;

/// A stand-in for `hookvisor serve` that answers one request with `status` and `body`, and
/// hands back the request it got (head and body).
fn serve_once<S: Read + Write>(
    accept: impl FnOnce() -> S + Send + 'static,
    status: &'static str,
    body: String,
) -> JoinHandle<(String, String)> {
    thread::spawn(move || {
        let stream = accept();
        let mut reader = BufReader::new(stream);
        let mut head = String::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            if line == "\r\n" || line.is_empty() {
                break;
            }
            head.push_str(&line);
        }
        let length: usize = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("content-length:")
                    .map(|v| v.trim().parse().unwrap())
            })
            .unwrap_or(0);
        let mut request_body = vec![0; length];
        reader.read_exact(&mut request_body).unwrap();
        let mut stream = reader.into_inner();
        write!(
            stream,
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        stream.flush().unwrap();
        (head, String::from_utf8(request_body).unwrap())
    })
}

fn tcp_server(status: &'static str, body: &str) -> (String, JoinHandle<(String, String)>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let handle = serve_once(
        move || listener.accept().unwrap().0,
        status,
        body.to_owned(),
    );
    (url, handle)
}

fn feed_server(
    ws: &Workspace,
    agent: &Agent,
    fixture_name: &str,
    url: &str,
    args: &[&str],
) -> Output {
    let mut cmd = ws.hookvisor_command();
    cmd.arg(agent.command).args(args);
    let stdin = fixture(agent, fixture_name, ws.path());
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .env("HOOKVISOR_URL", url)
        .env("HOOKVISOR_TOKEN", "s3cret");
    let mut child = cmd.spawn().unwrap();
    child.stdin.take().unwrap().write_all(&stdin).unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn with_hookvisor_url_the_server_evaluates_over_tcp() {
    for agent in AGENTS {
        // The hook would pass in-process: a block proves the server's answer was used.
        let ws = workspace_with_lint("exit 0");
        let (url, server) = tcp_server("200 OK", SERVER_REPROMPT);
        let reason = blocked(agent, &feed_server(&ws, agent, agent.hook_turn, &url, &[]));
        assert!(reason.contains("from the server"), "{reason}");
        assert!(reason.ends_with("(Attempt 2/3)"), "{reason}");
        let (head, body) = server.join().unwrap();
        assert!(
            head.starts_with("POST /v1/turns/end HTTP/1.1\r\n"),
            "{head}"
        );
        assert!(head.contains("Authorization: Bearer s3cret\r\n"), "{head}");
        assert_eq!(body, r#"{"trigger":"hook"}"#);
        assert!(
            !ws.state_dir().join("status.json").exists(),
            "nothing may be evaluated in-process"
        );

        let (url, server) = tcp_server("200 OK", SERVER_PASS);
        feed(&ws, agent, prompt_event(agent), &[]);
        silent(agent, &feed_server(&ws, agent, agent.user_turn, &url, &[]));
        assert_eq!(server.join().unwrap().1, r#"{"trigger":"user"}"#);
    }
}

#[test]
fn with_hookvisor_url_the_server_evaluates_over_a_unix_socket() {
    let ws = workspace_with_lint("exit 0");
    let socket: PathBuf = ws.base().join("hv.sock");
    let listener = UnixListener::bind(&socket).unwrap();
    let server = serve_once(
        move || listener.accept().unwrap().0,
        "200 OK",
        SERVER_REPROMPT.to_owned(),
    );
    let url = format!("unix:{}", socket.display());
    let reason = blocked(&CLAUDE, &feed_server(&ws, &CLAUDE, "stop.json", &url, &[]));
    assert!(reason.contains("from the server"), "{reason}");
    let (head, body) = server.join().unwrap();
    assert!(
        head.starts_with("POST /v1/turns/end HTTP/1.1\r\n"),
        "{head}"
    );
    assert_eq!(body, r#"{"trigger":"user"}"#);
}

#[test]
fn a_server_reprompt_without_a_message_still_gives_a_reason() {
    // Codex refuses decision:block with an empty reason; no agent gets one.
    let ws = workspace_with_lint("exit 0");
    let canned = SERVER_REPROMPT.replace(
        &SERVER_REPROMPT[SERVER_REPROMPT.find("\"message\"").unwrap()
            ..SERVER_REPROMPT.find(",\"attempt\"").unwrap()],
        "\"message\":null",
    );
    assert!(canned.contains("\"message\":null,\"attempt\""), "{canned}");
    let (url, server) = tcp_server("200 OK", &canned);
    let reason = blocked(&CODEX, &feed_server(&ws, &CODEX, "stop.json", &url, &[]));
    assert!(reason.contains("hookvisor status"), "{reason}");
    server.join().unwrap();
}

#[test]
fn server_errors_follow_the_failure_policy() {
    let ws = workspace_with_lint("exit 0");
    let (url, server) = tcp_server("409 Conflict", r#"{"error":"an evaluation is running"}"#);
    let open = feed_server(&ws, &CLAUDE, "stop.json", &url, &[]);
    silent(&CLAUDE, &open);
    assert!(
        stderr(&open).contains("refused the request (409"),
        "{}",
        stderr(&open)
    );
    assert!(stderr(&open).contains("an evaluation is running"));
    server.join().unwrap();

    let (url, server) = tcp_server("401 Unauthorized", r#"{"error":"bad token"}"#);
    let reason = blocked(
        &GEMINI,
        &feed_server(&ws, &GEMINI, "after-agent.json", &url, &["--fail-closed"]),
    );
    assert!(reason.contains("HOOKVISOR_TOKEN"), "{reason}");
    server.join().unwrap();

    // Nobody listening: a port that was just free.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}");
    let open = feed_server(&ws, &CODEX, "stop.json", &url, &[]);
    silent(&CODEX, &open);
    assert!(stderr(&open).contains("cannot reach"), "{}", stderr(&open));
    let reason = blocked(
        &CODEX,
        &feed_server(&ws, &CODEX, "stop.json", &url, &["--fail-closed"]),
    );
    assert!(reason.contains("cannot reach"), "{reason}");

    let (url, server) = tcp_server("200 OK", "<html>not hookvisor</html>");
    let open = feed_server(&ws, &CLAUDE, "stop.json", &url, &[]);
    silent(&CLAUDE, &open);
    assert!(stderr(&open).contains("cannot read"), "{}", stderr(&open));
    server.join().unwrap();
}

/// Whether `pid` is gone (or a zombie nobody has reaped yet).
fn is_gone(pid: &str) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit(')')
            .next()
            .is_some_and(|rest| rest.trim_start().starts_with('Z')),
        Err(_) => true,
    }
}

#[test]
fn an_agent_that_gives_up_on_the_adapter_stops_the_running_hook() {
    // Agents kill a hook that outlives its timeout; the hook's processes must not linger.
    let ws = workspace_with_lint(r#"echo $$ > "$HV_PIDFILE"; sleep 60 & wait"#);
    let pidfile = ws.base().join("hook.pid");
    let mut cmd = ws.hookvisor_command();
    cmd.arg("claude-stop")
        .env_remove("HOOKVISOR_URL")
        .env("HV_PIDFILE", &pidfile)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(&fixture(&CLAUDE, "stop.json", ws.path()))
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let hook_pid = loop {
        if let Ok(pid) = fs::read_to_string(&pidfile)
            && !pid.trim().is_empty()
        {
            break pid.trim().to_owned();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the hook never started"
        );
        thread::sleep(std::time::Duration::from_millis(20));
    };
    let kill = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let output = child.wait_with_output().unwrap();
    silent(&CLAUDE, &output);
    assert!(stderr(&output).contains("cancelled"), "{}", stderr(&output));
    while !is_gone(&hook_pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "hook process {hook_pid} outlived the adapter"
        );
        thread::sleep(std::time::Duration::from_millis(20));
    }
}

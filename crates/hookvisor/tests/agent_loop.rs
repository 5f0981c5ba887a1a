//! End-to-end tests of `hookvisor loop` (EVENTS.md §3.2, §5 rules 5, 12, 18): the built binary
//! driving a scripted `/bin/sh` fake agent (`fixtures/loop/agent.sh`) through real hooks, with
//! every prompt, exit code, `session.json` and, after SIGINT, `/proc` checked.

mod common;

use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{Workspace, code, stderr};
use serde_json::Value;

/// A workspace with the fake agent and its control directory.
struct Fixture {
    ws: Workspace,
    /// `$FAKE_DIR`: the agent's prompts and steps.
    fake: PathBuf,
    agent: PathBuf,
}

impl Fixture {
    fn new() -> Fixture {
        let ws = Workspace::new();
        let fake = ws.base().join("fake");
        fs::create_dir_all(&fake).unwrap();
        let agent = ws.base().join("agent.sh");
        fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/loop/agent.sh"),
            &agent,
        )
        .unwrap();
        fs::set_permissions(&agent, fs::Permissions::from_mode(0o755)).unwrap();
        Fixture { ws, fake, agent }
    }

    /// A declarative hook `.discobot/hooks/<name>.yml`.
    fn hook(&self, name: &str, front: &str) {
        self.ws.write(
            &format!(".discobot/hooks/{name}.yml"),
            &format!("---\n{front}\n---\n"),
        );
    }

    /// Shell lines the agent runs in iteration `i` (`"any"`: every iteration without its own).
    fn step(&self, i: &str, lines: &str) {
        fs::write(self.fake.join(format!("step.{i}")), lines).unwrap();
    }

    /// `hookvisor loop OPTS -- agent.sh AGENT_ARGS`, ready to run.
    fn command(&self, opts: &[&str], agent_args: &[&str]) -> Command {
        let mut cmd = self.ws.hookvisor_command();
        cmd.arg("loop").args(opts).arg("--").arg(&self.agent);
        cmd.args(agent_args)
            .env("FAKE_DIR", &self.fake)
            .env("HOOKVISOR_BIN", env!("CARGO_BIN_EXE_hookvisor"));
        cmd
    }

    fn run(&self, opts: &[&str]) -> Output {
        common::tick();
        self.command(opts, &[])
            .output()
            .expect("run hookvisor loop")
    }

    /// The prompt the agent got in iteration `i`.
    fn prompt(&self, i: u64) -> String {
        let path = self.fake.join(format!("prompt.{i}"));
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// How many iterations started the agent.
    fn iterations(&self) -> usize {
        fs::read_to_string(self.fake.join("iterations"))
            .unwrap_or_default()
            .lines()
            .count()
    }

    fn session(&self) -> Value {
        serde_json::from_slice(&fs::read(self.ws.state_dir().join("session.json")).unwrap())
            .unwrap()
    }

    /// Lines the hooks appended to `<workspace>/trace`.
    fn trace(&self) -> Vec<String> {
        fs::read_to_string(self.ws.path().join("trace"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

#[test]
fn each_prompt_is_context_then_block_reason_then_task_prompt_and_the_done_file_ends_with_0() {
    let f = Fixture::new();
    f.hook(
        "context",
        "event: turn.start\npipe_output: true\nrun: echo \"context of ${iteration}\"",
    );
    f.hook(
        "lint",
        "name: Lint\nevent: turn.end\nrun: 'if [ -e fixme ]; then echo fix the file >&2; exit 1; fi'",
    );
    f.step("1", "echo broken > fixme");
    f.step("2", "rm fixme; touch \"$HOOKVISOR_DONE\"");
    let out = f.run(&["--prompt", "Fix the bug."]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // Not a terminal: no progress line, nothing to say.
    assert_eq!(stderr(&out), "");
    assert_eq!(f.prompt(1), "context of 1\n\nFix the bug.\n");
    let second = f.prompt(2);
    let (context, rest) = second.split_once("\n\n").unwrap();
    assert_eq!(context, "context of 2");
    let reason = rest.strip_suffix("\n\nFix the bug.\n").expect(&second);
    assert!(
        reason.starts_with("[Discobot Hook Failed] \"Lint\""),
        "{reason}"
    );
    assert!(reason.contains("fix the file"), "{reason}");
    assert_eq!(f.iterations(), 2);
    let session = f.session();
    assert_eq!(session["reason"], "done");
    assert_eq!(session["iterations"], 2);
}

#[test]
fn the_prompt_replaces_a_literal_prompt_argument_whole() {
    let f = Fixture::new();
    f.step("any", "touch \"$HOOKVISOR_DONE\"");
    common::tick();
    let text = "it's \"$(touch pwned)\" *; two words";
    let out = f
        .command(&["--prompt", text], &["--prompt", "{prompt}"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // One argument, byte for byte, never given to a shell.
    assert_eq!(f.prompt(1), text);
    assert!(!f.ws.path().join("pwned").exists());
}

#[test]
fn until_ends_with_0_max_iterations_with_1_and_session_json_says_so() {
    let f = Fixture::new();
    f.step("2", "echo ok > finished");
    let out = f.run(&["--until", "test -e finished", "--prompt-file", "/dev/null"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(f.iterations(), 2);
    let s = f.session();
    assert_eq!(s["reason"], "done");
    assert_eq!(s["iterations"], 2);
    let id = s["id"].as_str().unwrap();
    let parts: Vec<&str> = id.split('-').collect();
    assert_eq!(parts.len(), 3, "{id}");
    assert_eq!(parts[0], "session");
    assert!(parts[1].parse::<u64>().unwrap() > 1_700_000_000_000, "{id}");
    assert_eq!(parts[2].len(), 6, "{id}");
    for at in ["startedAt", "endedAt"] {
        let t = s[at].as_str().unwrap();
        assert!(t.ends_with('Z') && t.len() == 24, "{at}: {t}");
    }
    assert!(s["startedAt"].as_str() <= s["endedAt"].as_str());
    assert_eq!(
        s["agent"],
        serde_json::json!([f.agent.to_str().unwrap()]),
        "{s}"
    );
    assert_eq!(s["owner"], "agent.sh");
    // Every iteration ran under that session id.
    let iterations = fs::read_to_string(f.fake.join("iterations")).unwrap();
    assert_eq!(iterations, format!("1 {id}\n2 {id}\n"));

    let f = Fixture::new();
    let out = f.run(&["--max-iterations", "3", "--owner", "iteratr"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(f.iterations(), 3);
    assert_eq!(f.session()["reason"], "max_iterations");
    assert_eq!(f.session()["iterations"], 3);
    assert_eq!(f.session()["owner"], "iteratr");
}

#[test]
fn a_turn_start_block_ends_the_loop_with_1_before_the_agent_runs() {
    let f = Fixture::new();
    f.hook(
        "budget",
        "event: turn.start\nrun: 'echo out of budget >&2; exit 2'",
    );
    f.hook(
        "end",
        "event: session.end\nrun: echo \"end ${reason}\" >> trace",
    );
    let out = f.run(&["--prompt", "x"]);
    assert_eq!(code(&out), 1);
    assert!(stderr(&out).contains("out of budget"), "{}", stderr(&out));
    assert_eq!(f.iterations(), 0);
    assert_eq!(f.trace(), ["end blocked"]);
    assert_eq!(f.session()["reason"], "blocked");
}

#[test]
fn an_abort_exits_3() {
    let f = Fixture::new();
    f.hook(
        "stop",
        "event: turn.end\non_failure: abort\nblock_on: never\nrun: 'echo tests are gone >&2; exit 1'",
    );
    let out = f.run(&["--prompt", "x"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert_eq!(f.iterations(), 1);
    assert_eq!(f.session()["reason"], "aborted");
}

#[test]
fn a_failed_iteration_fires_error_whose_piped_output_is_the_next_prompt() {
    let f = Fixture::new();
    f.hook(
        "recover",
        "event: error\npipe_output: true\nrun: 'echo \"exit ${status}; last lines:\"; echo \"${error}\"'",
    );
    f.hook(
        "context",
        "event: turn.end\npipe_output: true\nrun: echo \"turn ${iteration} ended\"; echo ${iteration} >> trace",
    );
    f.step("1", "exit 0");
    f.step("2", "for n in $(seq 1 25); do echo line $n; done; exit 7");
    f.step("3", "touch \"$HOOKVISOR_DONE\"");
    let out = f.run(&["--prompt", "Task."]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(f.prompt(2), "turn 1 ended\n\nTask.\n");
    // The recovery replaces the task prompt for one iteration; the last 20 lines of the log.
    let last: String = (6..=25).map(|n| format!("line {n}\n")).collect();
    assert_eq!(f.prompt(3), format!("exit 7; last lines:\n{last}"));
    // turn.end ran only after the iterations that exited 0; its last words were delivered in
    // a final iteration, with the task prompt again.
    assert_eq!(f.trace(), ["1", "3", "4"]);
    assert_eq!(f.prompt(4), "turn 3 ended\n\nTask.\n");
    assert_eq!(f.iterations(), 4);
    assert_eq!(f.session()["reason"], "done");
}

#[test]
fn three_failures_in_a_row_end_the_loop_with_1() {
    let f = Fixture::new();
    f.hook(
        "errors",
        "event: error\nrun: echo \"error ${iteration} ${status}\" >> trace",
    );
    f.hook("turn", "event: turn.end\nrun: echo turn >> trace");
    f.step("1", "exit 0");
    f.step("2", "exit 1");
    f.step("3", "exit 0");
    f.step("any", "kill -9 $$");
    let out = f.run(&["--prompt", "x", "--max-iterations", "10"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(
        f.trace(),
        [
            "turn",
            "error 2 1",
            "turn",
            "error 4 137",
            "error 5 137",
            "error 6 137"
        ]
    );
    assert_eq!(f.iterations(), 6);
    assert_eq!(f.session()["reason"], "failures");
    assert!(stderr(&out).contains("6.log"), "{}", stderr(&out));
}

#[test]
fn a_turn_timeout_is_a_failure() {
    let f = Fixture::new();
    f.hook(
        "errors",
        "event: error\nrun: echo \"${timedOut} ${status}\" >> trace",
    );
    f.step("1", "sleep 30");
    f.step("2", "touch \"$HOOKVISOR_DONE\"");
    let out = f.run(&["--turn-timeout", "1"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(f.trace(), ["true 124"]);
}

#[test]
fn a_session_stop_block_buys_one_more_iteration_and_leftover_context_a_final_one() {
    let f = Fixture::new();
    f.hook(
        "todos",
        "event: session.stop\nrun: 'if [ ! -e asked ]; then touch asked; echo two TODOs open >&2; exit 2; fi'",
    );
    f.hook(
        "note",
        "event: session.stop\nphase: post\npipe_output: true\nrun: echo \"stop ${decision}\"",
    );
    f.hook(
        "end",
        "event: session.end\npipe_output: true\nrun: echo \"end ${reason} ${iterations}\" | tee -a trace",
    );
    f.step("any", "touch \"$HOOKVISOR_DONE\"");
    let out = f.run(&["--prompt", "Task."]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(f.prompt(1), "Task.\n");
    assert_eq!(f.prompt(2), "stop block\n\ntwo TODOs open\n\nTask.\n");
    // The second stop was allowed; what it piped went to the agent in one last iteration.
    assert_eq!(f.prompt(3), "stop allow\n\nTask.\n");
    assert_eq!(f.iterations(), 3);
    assert_eq!(f.trace(), ["end done 3"]);
    // session.end's own piped output reached no turn: discarded, and said so.
    assert!(
        stderr(&out).contains("discarded 1 context entry"),
        "{}",
        stderr(&out)
    );
    let buffer = fs::read_to_string(f.ws.state_dir().join("context.json")).unwrap();
    assert!(!buffer.contains("end done"), "{buffer}");
}

#[test]
fn task_complete_fired_by_the_agent_runs_its_hook_in_the_loops_session() {
    let f = Fixture::new();
    f.hook(
        "tasks",
        "event: task.complete\nrun: echo \"${task_id} ${session} ${trigger}\" >> trace",
    );
    f.hook(
        "stage",
        "event: stage.complete\nrun: echo \"stage ${stage}\" >> trace",
    );
    f.step(
        "1",
        "\"$HOOKVISOR_BIN\" fire task.complete --data '{\"task_id\":\"T-1\"}' || exit 9\n\
         echo after >> trace; touch \"$HOOKVISOR_DONE\"",
    );
    let out = f.run(&["--stage", "build"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let id = f.session()["id"].as_str().unwrap().to_owned();
    assert_eq!(
        f.trace(),
        [
            format!("T-1 {id} user"),
            "after".into(),
            "stage build".into()
        ]
    );
    let status = f.ws.status();
    assert!(status["hooks"]["tasks"].is_object(), "{status}");
}

#[test]
fn sigint_kills_the_agents_group_then_session_end_runs_interrupted_and_exits_130() {
    interrupted_by(nix::sys::signal::Signal::SIGINT, 130);
}

#[test]
fn sigterm_does_the_same_and_exits_143() {
    interrupted_by(nix::sys::signal::Signal::SIGTERM, 143);
}

/// The loop gets `signal` while its agent (with a grandchild `sleep`) runs: both are gone
/// from `/proc` when it exits with `code`, and `session.end` ran with `interrupted`.
fn interrupted_by(signal: nix::sys::signal::Signal, code: i32) {
    let f = Fixture::new();
    f.hook(
        "end",
        "event: session.end\nrun: echo \"end ${reason}\" >> trace",
    );
    let ready = f.fake.join("ready");
    nix::unistd::mkfifo(&ready, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    f.step(
        "1",
        "sleep 1000 & echo $! > \"$FAKE_DIR/grandchild\"; echo $$ > \"$FAKE_DIR/agent\"\n\
         echo ready > \"$FAKE_DIR/ready\"; wait",
    );
    common::tick();
    let mut child = f
        .command(&["--prompt", "x"], &[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The agent's line on the FIFO says both pids are recorded.
    assert_eq!(read_fifo(&ready, &mut child), "ready\n");
    let pid = |name: &str| -> i32 {
        fs::read_to_string(f.fake.join(name))
            .unwrap()
            .trim()
            .parse()
            .unwrap()
    };
    let (agent, grandchild) = (pid("agent"), pid("grandchild"));
    assert!(Path::new(&format!("/proc/{grandchild}")).exists());
    nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), signal).unwrap();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(code), "{err}");
    for pid in [agent, grandchild] {
        assert!(
            gone(pid),
            "{pid} is still running: {:?}",
            fs::read_to_string(format!("/proc/{pid}/stat"))
        );
    }
    assert_eq!(f.trace(), ["end interrupted"]);
    assert_eq!(f.session()["reason"], "interrupted");
    assert_eq!(f.session()["iterations"], 1);
}

/// The first write to the FIFO at `path`, awaited (a loop that exits first fails the test
/// rather than leaving it waiting for a writer that never comes).
fn read_fifo(path: &Path, child: &mut std::process::Child) -> String {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    use std::os::unix::fs::OpenOptionsExt;
    // Non-blocking, so that opening does not wait for the writer; poll does, for its data.
    let mut fifo = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .unwrap();
    loop {
        let mut fds = [PollFd::new(fifo.as_fd(), PollFlags::POLLIN)];
        let ready = poll(&mut fds, PollTimeout::from(100u16)).unwrap();
        if ready > 0 {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            panic!("the loop exited ({status}) before its agent wrote to the FIFO");
        }
    }
    let mut text = String::new();
    // The writer writes one short line and keeps running: read what is there.
    let mut chunk = [0; 64];
    let n = fifo.read(&mut chunk).unwrap();
    text.push_str(&String::from_utf8_lossy(&chunk[..n]));
    text
}

/// Whether `pid` is gone from `/proc`: dead and reaped (hookvisor reaps what it killed).
fn gone(pid: i32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn the_prompt_file_must_be_readable() {
    let f = Fixture::new();
    let out = f.run(&["--prompt-file", "/nonexistent/prompt.md"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("--prompt-file /nonexistent/prompt.md"),
        "{}",
        stderr(&out)
    );
    assert_eq!(f.iterations(), 0);
}

#[test]
fn on_a_terminal_each_iteration_prints_one_progress_line() {
    let f = Fixture::new();
    f.step("2", "exit 4");
    f.step("3", "touch \"$HOOKVISOR_DONE\"");
    let pty = nix::pty::openpty(None, None).unwrap();
    common::tick();
    let mut child = f
        .command(&["--prompt", "x"], &[])
        .stderr(Stdio::from(pty.slave))
        .spawn()
        .unwrap();
    let status = child.wait().unwrap();
    // The terminal keeps what was written until it is read; the closed far end then reads
    // as EIO, which ends the text.
    let mut text = Vec::new();
    let mut master = fs::File::from(pty.master);
    let mut chunk = [0; 4096];
    while let Ok(n) = master.read(&mut chunk) {
        if n == 0 {
            break;
        }
        text.extend_from_slice(&chunk[..n]);
    }
    let text = String::from_utf8_lossy(&text).replace("\r\n", "\n");
    assert_eq!(status.code(), Some(0), "{text}");
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3, "{text}");
    let expected = [
        "turn.end: allow",
        "agent exited 4",
        "turn.end: allow, session.stop: allow, done",
    ];
    for (i, (line, what)) in lines.iter().zip(expected).enumerate() {
        let head = format!("hookvisor loop: iteration {}/20, ", i + 1);
        assert!(line.starts_with(&head), "{line}");
        assert!(line.ends_with(&format!("s, {what}")), "{line}");
    }
}

#[test]
fn an_error_hook_that_aborts_ends_the_loop_with_3() {
    let f = Fixture::new();
    f.hook(
        "give-up",
        "event: error\non_failure: abort\nrun: 'echo no point >&2; exit 1'",
    );
    f.step("any", "exit 1");
    let out = f.run(&["--prompt", "x"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert_eq!(f.iterations(), 1);
    assert!(stderr(&out).contains("no point"), "{}", stderr(&out));
}

#[test]
fn the_phase1_loop_guard_never_stops_the_loops_re_prompts() {
    let f = Fixture::new();
    f.hook(
        "never",
        "name: Never\nevent: turn.end\nrun: 'echo still failing >&2; exit 1'",
    );
    // Past the guard's three re-prompts, every turn is still re-prompted with the reason.
    let out = f.run(&["--prompt", "Task.", "--max-iterations", "6"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(f.iterations(), 6);
    assert_eq!(f.prompt(1), "Task.\n");
    for i in 2..=6 {
        let prompt = f.prompt(i);
        assert!(
            prompt.starts_with("[Discobot Hook Failed] \"Never\"")
                && prompt.ends_with("\n\nTask.\n"),
            "{i}: {prompt}"
        );
        assert!(prompt.contains("still failing"), "{i}: {prompt}");
    }
    assert_eq!(f.session()["reason"], "max_iterations");
}

#[test]
fn an_agent_that_does_not_exist_is_a_usage_error() {
    let f = Fixture::new();
    let out =
        f.ws.hookvisor(&["loop", "--", "no-such-agent-hookvisor", "{prompt}"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("no-such-agent-hookvisor is not an executable file"),
        "{}",
        stderr(&out)
    );
    assert!(!f.ws.state_dir().join("session.json").exists());
    // A bare name is looked up in PATH.
    f.step("any", "touch \"$HOOKVISOR_DONE\"");
    let bare =
        f.ws.hookvisor_command()
            .args(["loop", "--", "agent.sh"])
            .env("PATH", format!("{}:/usr/bin:/bin", f.ws.base().display()))
            .env("FAKE_DIR", &f.fake)
            .output()
            .unwrap();
    assert_eq!(code(&bare), 0, "{}", stderr(&bare));
}

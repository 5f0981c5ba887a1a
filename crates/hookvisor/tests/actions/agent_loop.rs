//! End-to-end tests of `hookvisor loop` (docs/EVENTS.md §3.2, §5 rules 5, 12, 18): the built binary
//! driving a scripted `/bin/sh` fake agent (`fixtures/loop/agent.sh`) through real hooks, with
//! every prompt, exit code, `session.json` and, after SIGINT, `/proc` checked.

use crate::common;

use std::fs;
use std::io::Read;
use std::path::Path;
use std::process::Stdio;

use common::{Workspace, code, stderr};
use serde_json::Value;

use common::fake_agent::FakeAgent as Fixture;

#[test]
fn each_prompt_is_context_then_block_reason_then_task_prompt_and_the_done_file_ends_with_0() {
    let f = Fixture::new(Workspace::new());
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
    let f = Fixture::new(Workspace::new());
    f.step(
        "any",
        "readlink /proc/$$/fd/0 > \"$FAKE_DIR/stdin\"; touch \"$HOOKVISOR_DONE\"",
    );
    common::tick();
    let text = "it's \"$(touch pwned)\" *; two words";
    let out = f
        .command(&["--prompt", text], &["--prompt", "{prompt}"])
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // One argument, byte for byte, never given to a shell; stdin is /dev/null.
    assert_eq!(f.prompt(1), text);
    assert_eq!(
        fs::read_to_string(f.fake.join("stdin")).unwrap(),
        "/dev/null\n"
    );
    assert!(!f.ws.path().join("pwned").exists());
}

#[test]
fn until_ends_with_0_max_iterations_with_1_and_session_json_says_so() {
    let f = Fixture::new(Workspace::new());
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

    let f = Fixture::new(Workspace::new());
    let out = f.run(&["--max-iterations", "3", "--owner", "iteratr"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(f.iterations(), 3);
    assert_eq!(f.session()["reason"], "max_iterations");
    assert_eq!(f.session()["iterations"], 3);
    assert_eq!(f.session()["owner"], "iteratr");
}

#[test]
fn a_turn_start_block_ends_the_loop_with_1_before_the_agent_runs() {
    let f = Fixture::new(Workspace::new());
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
    let f = Fixture::new(Workspace::new());
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
    let f = Fixture::new(Workspace::new());
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
    // turn.end ran only after the iterations that exited 0; its last words were delivered
    // alone in a final delivery, which fires no turn.end.
    assert_eq!(f.trace(), ["1", "3"]);
    assert_eq!(f.prompt(4), "turn 3 ended\n");
    assert_eq!(f.iterations(), 4);
    assert_eq!(f.session()["reason"], "done");
}

#[test]
fn three_failures_in_a_row_end_the_loop_with_1() {
    let f = Fixture::new(Workspace::new());
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
    let f = Fixture::new(Workspace::new());
    f.hook(
        "errors",
        "event: error\nrun: echo \"${timedOut} ${status}\" >> trace",
    );
    f.step("1", "sleep 30 & echo $! > \"$FAKE_DIR/grandchild\"; wait");
    f.step("2", "touch \"$HOOKVISOR_DONE\"");
    let started = std::time::Instant::now();
    let out = f.run(&["--turn-timeout", "1"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(f.trace(), ["true 124"]);
    // Stopped after its second, the agent's group with it.
    assert!(started.elapsed() < std::time::Duration::from_secs(10));
    assert!(gone(pid_in(&f, "grandchild")));
}

#[test]
fn a_session_stop_block_buys_one_more_iteration_and_leftover_context_a_final_one() {
    let f = Fixture::new(Workspace::new());
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
    // The second stop was allowed; what it piped went to the agent alone, in a final delivery.
    assert_eq!(f.prompt(3), "stop allow\n");
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
    let f = Fixture::new(Workspace::new());
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

#[test]
fn sighup_does_the_same_and_exits_129() {
    interrupted_by(nix::sys::signal::Signal::SIGHUP, 129);
}

/// Shell lines for an agent step that leaves behind, and waits until they run: a grandchild
/// `sleep` in its group (`$FAKE_DIR/grandchild`), an escaped one that cleared its environment
/// and left the group (`setsid env -i`, `$FAKE_DIR/escaped`), and a `task.complete` fired in
/// the background whose hook ([`Fixture::sleeping_task_hook`]) runs a `sleep`
/// (`$FAKE_DIR/hooksleep`). Its FIFOs are made here.
fn leave_processes_behind(f: &Fixture) -> &'static str {
    for fifo in ["escaped.fifo", "hook.fifo"] {
        nix::unistd::mkfifo(
            &f.fake.join(fifo),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
    }
    f.hook(
        "sleepy-task",
        "event: task.complete\nrun: 'sleep 1000 & echo $! > \"$FAKE_DIR/hooksleep\"; echo up > \"$FAKE_DIR/hook.fifo\"; wait'",
    );
    "sleep 1000 & echo $! > \"$FAKE_DIR/grandchild\"; echo $$ > \"$FAKE_DIR/agent\"\n\
     setsid env -i /bin/sh -c 'echo $$ > \"$1\"; exec sleep 1000' sh \"$FAKE_DIR/escaped.fifo\" &\n\
     cat \"$FAKE_DIR/escaped.fifo\" > \"$FAKE_DIR/escaped\"\n\
     \"$HOOKVISOR_BIN\" fire task.complete --data '{\"task_id\":\"T\"}' > /dev/null 2>&1 &\n\
     cat \"$FAKE_DIR/hook.fifo\" > /dev/null\n"
}

/// The pid a step wrote to `$FAKE_DIR/<name>`.
fn pid_in(f: &Fixture, name: &str) -> i32 {
    let path = f.fake.join(name);
    fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .trim()
        .parse()
        .unwrap()
}

/// Asserts that the processes [`leave_processes_behind`] started are gone, and that no process
/// of this fixture (its `FAKE_DIR` in the environment) is left anywhere in `/proc`.
fn assert_nothing_left(f: &Fixture) {
    for name in ["agent", "grandchild", "escaped", "hooksleep"] {
        let pid = pid_in(f, name);
        assert!(
            gone(pid),
            "{name} ({pid}) is still running: {:?}",
            fs::read_to_string(format!("/proc/{pid}/stat"))
        );
    }
    let left = fixture_processes(f);
    assert!(left.is_empty(), "still running: {left:?}");
}

/// Every process whose environment holds this fixture's `FAKE_DIR`, with its command line.
fn fixture_processes(f: &Fixture) -> Vec<(i32, String)> {
    let mut entry = format!("FAKE_DIR={}", f.fake.display()).into_bytes();
    entry.push(0);
    let mut found = Vec::new();
    for proc_entry in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = proc_entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<i32>().ok())
        else {
            continue;
        };
        let environ = fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        if environ.split_inclusive(|&b| b == 0).any(|e| e == entry) {
            let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            found.push((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")));
        }
    }
    found
}

#[test]
fn nothing_the_agent_or_its_hooks_started_outlives_the_loop() {
    let f = Fixture::new(Workspace::new());
    let leave = leave_processes_behind(&f);
    f.step("1", &format!("{leave}touch \"$HOOKVISOR_DONE\""));
    let out = f.run(&["--prompt", "x"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_nothing_left(&f);
}

#[test]
fn orphans_are_reaped_after_each_iteration_not_left_as_zombies() {
    let f = Fixture::new(Workspace::new());
    f.step("any", "sleep 100 &");
    f.step(
        "3",
        "cat /proc/$PPID/task/*/children > \"$FAKE_DIR/children\"; echo $$ > \"$FAKE_DIR/self\"",
    );
    let out = f.run(&["--prompt", "x", "--max-iterations", "3"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    // In the third iteration the loop's only child is that iteration's agent.
    let children = fs::read_to_string(f.fake.join("children")).unwrap();
    let me = pid_in(&f, "self").to_string();
    assert_eq!(
        children.split_whitespace().collect::<Vec<_>>(),
        [me.as_str()]
    );
}

/// The loop gets `signal` while its agent runs, having left processes behind of every kind
/// ([`leave_processes_behind`]): none is left when it exits with `code`, the agent was dead
/// before `session.end` ran, which ran with `interrupted`.
fn interrupted_by(signal: nix::sys::signal::Signal, code: i32) {
    let f = Fixture::new(Workspace::new());
    f.hook(
        "end",
        "event: session.end\nrun: 'if kill -0 $(cat \"$FAKE_DIR/agent\") 2>/dev/null; then echo agent alive; else echo agent dead; fi >> trace; echo \"end ${reason}\" >> trace'",
    );
    let ready = f.fake.join("ready");
    nix::unistd::mkfifo(&ready, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let leave = leave_processes_behind(&f);
    f.step(
        "1",
        &format!("{leave}echo ready > \"$FAKE_DIR/ready\"; wait"),
    );
    common::tick();
    let mut child = f
        .command(&["--prompt", "x"], &[])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // The agent's line on the FIFO says every pid is recorded.
    assert_eq!(read_fifo(&ready, &mut child), "ready\n");
    assert!(!gone(pid_in(&f, "escaped")));
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
    assert_nothing_left(&f);
    assert_eq!(f.trace(), ["agent dead", "end interrupted"]);
    assert_eq!(f.session()["reason"], "interrupted");
    assert_eq!(f.session()["iterations"], 1);
}

/// Starts the loop with a `session.end` hook that says so on `$FAKE_DIR/end.fifo` and then
/// sleeps 20 s; `agent_step` is the agent's first step. Returns the loop once the hook runs.
fn loop_in_session_end(f: &Fixture, agent_step: &str) -> std::process::Child {
    let end = f.fake.join("end.fifo");
    nix::unistd::mkfifo(&end, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    f.hook(
        "end",
        "event: session.end\nrun: 'echo \"end ${reason}\" > \"$FAKE_DIR/end.fifo\"; sleep 20'",
    );
    f.step("1", agent_step);
    common::tick();
    let mut child = f
        .command(&["--prompt", "x"], &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let _ = read_fifo(&end, &mut child);
    child
}

#[test]
fn a_second_signal_stops_session_end_at_once() {
    let f = Fixture::new(Workspace::new());
    let ready = f.fake.join("ready");
    nix::unistd::mkfifo(&ready, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let end = f.fake.join("end.fifo");
    nix::unistd::mkfifo(&end, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    f.hook(
        "end",
        "event: session.end\nrun: 'echo \"end ${reason}\" > \"$FAKE_DIR/end.fifo\"; sleep 20'",
    );
    f.step("1", "echo ready > \"$FAKE_DIR/ready\"; sleep 1000");
    common::tick();
    let mut child = f
        .command(&["--prompt", "x"], &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    read_fifo(&ready, &mut child);
    let loop_pid = nix::unistd::Pid::from_raw(child.id() as i32);
    nix::sys::signal::kill(loop_pid, nix::sys::signal::Signal::SIGINT).unwrap();
    assert_eq!(read_fifo(&end, &mut child), "end interrupted\n");
    let second = std::time::Instant::now();
    nix::sys::signal::kill(loop_pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let status = child.wait().unwrap();
    // The first signal names the exit status; the hook's `sleep 20` did not run out.
    assert_eq!(status.code(), Some(130));
    assert!(
        second.elapsed() < std::time::Duration::from_secs(15),
        "{:?}",
        second.elapsed()
    );
    assert_eq!(f.session()["reason"], "interrupted");
}

#[test]
fn after_one_signal_session_end_gets_a_few_seconds_and_a_signal_during_it_is_the_exit_status() {
    let f = Fixture::new(Workspace::new());
    // The loop is done; a SIGTERM arrives while its session.end runs.
    let mut child = loop_in_session_end(&f, "touch \"$HOOKVISOR_DONE\"");
    let signalled = std::time::Instant::now();
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(143));
    // Stopped by the budget (5 s), not by the end of the hook's `sleep 20`.
    let took = signalled.elapsed();
    assert!(
        took >= std::time::Duration::from_secs(4) && took < std::time::Duration::from_secs(15),
        "{took:?}"
    );
    assert_eq!(f.session()["reason"], "done");
}

/// iteratr's final delivery: the pending buffer goes to the agent alone; no `turn.start` or
/// `turn.end` fires for it (a `turn.end` abort there cannot happen), the task prompt is not
/// sent again.
#[test]
fn the_final_delivery_sends_the_buffer_alone_and_fires_no_turn_events() {
    let f = Fixture::new(Workspace::new());
    // session.stop leaves context, so a final delivery (iteration 2) follows the done.
    f.hook(
        "note",
        "event: session.stop\nphase: post\npipe_output: true\nrun: echo \"stop ${decision}\"",
    );
    f.hook(
        "last",
        "event: turn.end\non_failure: abort\nblock_on: never\nrun: 'echo \"end ${iteration}\" >> trace; exit 1'",
    );
    f.hook(
        "first",
        "event: turn.start\nrun: 'echo \"start ${iteration}\" >> trace'",
    );
    f.step("1", "touch \"$HOOKVISOR_DONE\"");
    let out = f.run(&["--prompt", "x"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    f.hook(
        "last",
        "event: turn.end\nrun: 'echo \"end ${iteration}\" >> trace'",
    );
    fs::remove_dir_all(&f.fake).unwrap();
    fs::create_dir(&f.fake).unwrap();
    fs::remove_file(f.ws.path().join("trace")).unwrap();
    f.step("1", "touch \"$HOOKVISOR_DONE\"");
    let out = f.run(&["--prompt", "x"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(f.iterations(), 2);
    assert_eq!(f.prompt(2), "stop allow\n");
    assert_eq!(f.trace(), ["start 1", "end 1"]);
    assert_eq!(f.session()["reason"], "done");
}

#[test]
fn a_session_stop_block_at_the_last_iteration_is_delivered_and_reported() {
    let f = Fixture::new(Workspace::new());
    f.hook(
        "todos",
        "event: session.stop\nrun: 'echo two TODOs open >&2; exit 2'",
    );
    f.step("any", "touch \"$HOOKVISOR_DONE\"");
    let out = f.run(&["--prompt", "Task.", "--max-iterations", "1"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(f.iterations(), 2);
    assert!(f.prompt(2).contains("two TODOs open"), "{}", f.prompt(2));
    assert!(stderr(&out).contains("two TODOs open"), "{}", stderr(&out));
    assert_eq!(f.session()["reason"], "max_iterations");
}

#[test]
fn the_loop_mints_its_own_session_unless_told_and_its_state_dir_is_its_own() {
    let f = Fixture::new(Workspace::new());
    f.step("any", "touch \"$HOOKVISOR_DONE\"");
    common::tick();
    // The sandbox's and an enclosing hookvisor session's ids name no loop; no state dir given.
    let out = f
        .command(&["--prompt", "x"], &[])
        .env_remove("HOOKVISOR_STATE_DIR")
        .env("DISCOBOT_SESSION_ID", "sandbox-1")
        .env("HOOKVISOR_SESSION", "hv-1")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let sessions = f.ws.base().join("home/.discobot");
    let names: Vec<String> = fs::read_dir(&sessions)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
    assert!(names[0].starts_with("session-"), "{names:?}");
    let record = sessions.join(&names[0]).join("hooks/session.json");
    let record: Value = serde_json::from_slice(&fs::read(record).unwrap()).unwrap();
    assert_eq!(record["id"], names[0].as_str());
    let iterations = fs::read_to_string(f.fake.join("iterations")).unwrap();
    assert_eq!(iterations, format!("1 {}\n", names[0]));
    // --session names it.
    let out = f.run(&["--session", "mine", "--prompt", "x"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(f.session()["id"], "mine");
}

#[test]
fn a_loop_in_a_loops_agent_has_a_state_dir_of_its_own() {
    let f = Fixture::new(Workspace::new());
    // The inner loop's agent says it is done; the outer's never does.
    f.step(
        "1",
        "\"$HOOKVISOR_BIN\" loop --max-iterations 1 -- /bin/sh -c \
         'echo \"$HOOKVISOR_STATE_DIR\" > \"$FAKE_DIR/inner-state\"; touch \"$HOOKVISOR_DONE\"' \
         || exit 9",
    );
    let out = f.run(&["--prompt", "x", "--max-iterations", "2"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(f.iterations(), 2);
    assert_eq!(f.session()["reason"], "max_iterations");
    let inner = fs::read_to_string(f.fake.join("inner-state")).unwrap();
    let children = f.ws.state_dir().join("children");
    let inner = Path::new(inner.trim());
    assert_eq!(inner.parent(), Some(children.as_path()));
    let name = inner.file_name().unwrap().to_str().unwrap();
    assert!(name.starts_with("loop-1-session-"), "{name}");
    let record: Value =
        serde_json::from_slice(&fs::read(inner.join("session.json")).unwrap()).unwrap();
    assert_eq!(record["reason"], "done");
}

#[test]
fn a_second_loop_in_the_same_state_dir_is_refused() {
    let f = Fixture::new(Workspace::new());
    let ready = f.fake.join("ready");
    let go = f.fake.join("go");
    for fifo in [&ready, &go] {
        nix::unistd::mkfifo(fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    }
    f.step(
        "1",
        "echo ready > \"$FAKE_DIR/ready\"; read x < \"$FAKE_DIR/go\"; touch \"$HOOKVISOR_DONE\"",
    );
    common::tick();
    let mut first = f
        .command(&["--prompt", "x"], &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    read_fifo(&ready, &mut first);
    let second = f.run(&["--prompt", "y"]);
    assert_eq!(code(&second), 1, "{}", stderr(&second));
    assert!(
        stderr(&second).contains("another hookvisor loop runs in this state dir"),
        "{}",
        stderr(&second)
    );
    fs::write(&go, "go\n").unwrap();
    assert_eq!(first.wait().unwrap().code(), Some(0));
    assert_eq!(f.iterations(), 1);
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
    let f = Fixture::new(Workspace::new());
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
    let f = Fixture::new(Workspace::new());
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
    let f = Fixture::new(Workspace::new());
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
    let f = Fixture::new(Workspace::new());
    f.hook(
        "never",
        "name: Never\nevent: turn.end\nrun: 'echo still failing >&2; exit 1'",
    );
    // Past the guard's three re-prompts, every turn is still re-prompted with the reason; the
    // block of the sixth, the last allowed, is delivered alone in a final delivery (no task
    // prompt) and reported.
    let out = f.run(&["--prompt", "Task.", "--max-iterations", "6"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(f.iterations(), 7);
    assert!(stderr(&out).contains("still failing"), "{}", stderr(&out));
    assert_eq!(f.prompt(1), "Task.\n");
    for i in 2..=7 {
        let prompt = f.prompt(i);
        assert!(
            prompt.starts_with("[Discobot Hook Failed] \"Never\"")
                && (prompt.ends_with("\n\nTask.\n") == (i < 7)),
            "{i}: {prompt}"
        );
        assert!(prompt.contains("still failing"), "{i}: {prompt}");
    }
    assert_eq!(f.session()["reason"], "max_iterations");
}

#[test]
fn an_agent_that_does_not_exist_is_a_usage_error() {
    let f = Fixture::new(Workspace::new());
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

#[test]
fn a_symlink_put_in_place_of_the_loop_dir_moves_none_of_its_files() {
    let f = Fixture::new(Workspace::new());
    let other = f.ws.base().join("other");
    fs::create_dir_all(&other).unwrap();
    fs::write(other.join("done"), "").unwrap();
    // The agent swaps `loop/` for a link to a directory that holds a done file.
    f.step(
        "1",
        "mv \"$HOOKVISOR_STATE_DIR/loop\" \"$HOOKVISOR_STATE_DIR/loop.old\"\n\
         ln -s \"$FAKE_DIR/../other\" \"$HOOKVISOR_STATE_DIR/loop\"",
    );
    let out = f.run(&["--prompt", "x", "--max-iterations", "2"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(f.iterations(), 2);
    assert_eq!(f.session()["reason"], "max_iterations");
    assert!(other.join("done").exists());
    assert!(!other.join("2.log").exists());
    assert!(f.ws.state_dir().join("loop.old/2.log").exists());
    // The next loop refuses the link.
    let out = f.run(&["--prompt", "x"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(stderr(&out).contains("symbolic link"), "{}", stderr(&out));
    assert!(other.join("done").exists());
}

#[test]
fn a_prompt_too_long_for_an_argument_is_an_error_and_session_end_says_error() {
    let f = Fixture::new(Workspace::new());
    f.hook(
        "end",
        "event: session.end\nrun: echo \"end ${reason}\" >> trace",
    );
    let prompt = f.ws.base().join("prompt.md");
    fs::write(&prompt, "x".repeat(200_000)).unwrap();
    common::tick();
    let out = f
        .command(
            &["--prompt-file", prompt.to_str().unwrap()],
            &["--prompt", "{prompt}"],
        )
        .output()
        .unwrap();
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("at most 131071 bytes") && stderr(&out).contains("on stdin"),
        "{}",
        stderr(&out)
    );
    assert_eq!(f.iterations(), 0);
    assert_eq!(f.trace(), ["end error"]);
    assert_eq!(f.session()["reason"], "error");
}

#[test]
fn a_relative_agent_path_is_the_callers_not_the_workspaces() {
    let f = Fixture::new(Workspace::new());
    f.step("any", "touch \"$HOOKVISOR_DONE\"");
    common::tick();
    let out =
        f.ws.hookvisor_command()
            .current_dir(f.ws.base())
            .args(["loop", "--workspace"])
            .arg(f.ws.path())
            .args(["--", "./agent.sh"])
            .env("FAKE_DIR", &f.fake)
            .output()
            .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(f.iterations(), 1);
}

#[test]
fn zero_iterations_or_a_zero_timeout_is_a_usage_error() {
    let f = Fixture::new(Workspace::new());
    for opts in [["--max-iterations", "0"], ["--turn-timeout", "0"]] {
        let out = f.run(&opts);
        assert_eq!(code(&out), 2, "{opts:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(opts[0]), "{}", stderr(&out));
    }
    assert_eq!(f.iterations(), 0);
    assert!(!f.ws.state_dir().join("session.json").exists());
}

#[test]
fn the_agent_gets_the_loops_variables_and_no_servers() {
    let f = Fixture::new(Workspace::new());
    f.step(
        "any",
        "env | grep -E '^(HOOKVISOR|DISCOBOT)_' | grep -v '^HOOKVISOR_BIN=' | cut -d= -f1 | sort \
         > \"$FAKE_DIR/env\"; touch \"$HOOKVISOR_DONE\"",
    );
    common::tick();
    let out = f
        .command(&["--prompt", "x"], &[])
        .env("HOOKVISOR_URL", "http://127.0.0.1:1")
        .env("HOOKVISOR_SOCKET", "/nonexistent.sock")
        .env("HOOKVISOR_TOKEN", "secret")
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let names = fs::read_to_string(f.fake.join("env")).unwrap();
    // What this test process inherited itself (CI exports HOOKVISOR_AGENT_CLIENTS) passes on.
    let inherited: Vec<String> = std::env::vars().map(|(name, _)| name).collect();
    for server in ["HOOKVISOR_URL", "HOOKVISOR_SOCKET", "HOOKVISOR_TOKEN"] {
        assert!(
            !names.lines().any(|n| n == server),
            "{server} reached the agent"
        );
    }
    assert_eq!(
        names
            .lines()
            .filter(|name| !inherited.iter().any(|i| i == name))
            .collect::<Vec<_>>(),
        [
            "DISCOBOT_WORKSPACE",
            "HOOKVISOR_DONE",
            "HOOKVISOR_ITERATION",
            "HOOKVISOR_LOOP",
            "HOOKVISOR_LOOP_OWNER",
            "HOOKVISOR_RUN",
            "HOOKVISOR_SESSION",
            "HOOKVISOR_STATE_DIR"
        ]
    );
}

#[test]
fn aborts_from_turn_start_and_session_stop_exit_3() {
    let f = Fixture::new(Workspace::new());
    f.hook(
        "no",
        "event: turn.start\non_failure: abort\nrun: 'echo not today >&2; exit 1'",
    );
    let out = f.run(&["--prompt", "x"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert_eq!(f.iterations(), 0);
    assert_eq!(f.session()["reason"], "aborted");

    let f = Fixture::new(Workspace::new());
    f.hook(
        "no",
        "event: session.stop\non_failure: abort\nrun: 'echo not done >&2; exit 1'",
    );
    f.step("any", "touch \"$HOOKVISOR_DONE\"");
    let out = f.run(&["--prompt", "x"]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert_eq!(f.iterations(), 1);
    assert_eq!(f.session()["reason"], "aborted");
    assert!(stderr(&out).contains("not done"), "{}", stderr(&out));
}

#[test]
fn stage_complete_fires_after_done_or_the_limit_only() {
    let stage_lines = |opts: &[&str], step: Option<&str>, block: bool| {
        let f = Fixture::new(Workspace::new());
        f.hook(
            "stage",
            "event: stage.complete\nrun: echo \"stage ${stage} ${reason}\" >> trace",
        );
        if block {
            f.hook("budget", "event: turn.start\nrun: 'exit 2'");
        }
        if let Some(step) = step {
            f.step("any", step);
        }
        let mut args = vec!["--stage", "build"];
        args.extend_from_slice(opts);
        f.run(&args);
        f.trace()
    };
    assert_eq!(
        stage_lines(&[], Some("touch \"$HOOKVISOR_DONE\""), false),
        ["stage build done"]
    );
    assert_eq!(
        stage_lines(&["--max-iterations", "1"], None, false),
        ["stage build max_iterations"]
    );
    assert!(stage_lines(&[], None, true).is_empty());
    assert!(stage_lines(&[], Some("exit 1"), false).is_empty());
}

/// docs/EVENTS.md §1.3 `await: false`: an iteration never waits for such a hook (nor does the
/// sweep of leftovers between iterations kill it); its run is recorded when it ends.
#[test]
fn an_unawaited_hook_never_holds_an_iteration() {
    let f = Fixture::new(Workspace::new());
    let gate = f.ws.base().join("gate");
    common::gate(&gate);
    f.hook(
        "slow",
        &format!(
            "event: turn.start\nawait: false\ntimeout: 30\nrun: cat '{}' > /dev/null",
            gate.display()
        ),
    );
    f.hook("fast", "event: turn.start\nrun: 'true'");
    f.step("any", "touch \"$HOOKVISOR_DONE\"");
    let out = f.run(&["--prompt", "Task."]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let status = f.ws.status();
    assert!(
        status["hooks"].get("slow").is_none(),
        "the loop waited for the unawaited hook: {status}"
    );
    common::open_gate(&gate);
    common::wait_until("the unawaited run is recorded", || {
        f.ws.status()["hooks"]["slow"]["runCount"] == 1
    });
    assert_eq!(f.ws.status()["hooks"]["slow"]["lastResult"], "success");
}

/// The same for an unawaited hook the agent's own hookvisor fired (an adapter, `fire`): its
/// detached run is re-parented to the loop, whose sweep of leftovers spares it, as it spares
/// its own.
#[test]
fn the_sweep_spares_a_detached_run_the_agent_started() {
    let f = Fixture::new(Workspace::new());
    let gate = f.ws.base().join("gate");
    common::gate(&gate);
    f.hook(
        "slow",
        &format!(
            "event: tool.after\nawait: false\ntimeout: 30\nrun: cat '{}' > /dev/null",
            gate.display()
        ),
    );
    f.step(
        "any",
        &format!(
            "'{}' fire tool.after && touch \"$HOOKVISOR_DONE\"",
            env!("CARGO_BIN_EXE_hookvisor")
        ),
    );
    let out = f.run(&["--prompt", "Task."]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    common::open_gate(&gate);
    common::wait_until("the unawaited run is recorded", || {
        f.ws.status()["hooks"]["slow"]["runCount"] == 1
    });
}

/// Only a real detached run is spared: a hookvisor the agent started with `--deliver` in its
/// command line (here as its `argv[0]`) but running something else (an awaited `fire`, whose
/// hook sleeps) is a leftover like any other, and so is what it runs.
#[test]
fn the_sweep_spares_no_hookvisor_that_only_says_deliver() {
    let f = Fixture::new(Workspace::new());
    let pid_file = f.ws.base().join("sleeper.pid");
    f.hook(
        "sleeper",
        &format!(
            "event: tool.after\ntimeout: 300\nrun: echo $$ > '{}.tmp' && mv '{0}.tmp' '{0}' && exec sleep 300",
            pid_file.display()
        ),
    );
    f.step(
        "any",
        &format!(
            "env -u HOOKVISOR_RUN setsid bash -c 'exec -a --deliver \"$0\" fire tool.after' '{}' </dev/null >/dev/null 2>&1 &\n\
             while [ ! -s '{}' ]; do sleep 0.05; done; touch \"$HOOKVISOR_DONE\"",
            env!("CARGO_BIN_EXE_hookvisor"),
            pid_file.display()
        ),
    );
    let out = f.run(&["--prompt", "Task."]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let pid: i32 = std::fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let alive = std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| {
        !s.rsplit(')')
            .next()
            .unwrap_or("")
            .trim_start()
            .starts_with('Z')
    });
    if alive {
        let _ = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status();
    }
    assert!(!alive, "the agent's process {pid} outlived the loop");
}

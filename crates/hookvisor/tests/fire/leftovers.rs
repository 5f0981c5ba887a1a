//! What a hook leaves running (a `setsid` daemon, out of its process group) is killed when the
//! hook ends, for every way a hook runs: `hookvisor run`, a real `git commit`, and `serve`.

use crate::common;

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use common::serve::Server;
use common::{Workspace, check};

/// A hook body that starts a daemon in a session of its own and waits until it wrote its pid.
fn daemon_body(pid_file: &Path) -> String {
    format!(
        "setsid sh -c 'echo $$ > {pid}; exec sleep 1000' </dev/null >/dev/null 2>&1 &\n\
         while [ ! -s {pid} ]; do :; done",
        pid = pid_file.display()
    )
}

/// Waits (bounded) until the daemon whose pid is in `pid_file` is gone or a zombie.
fn assert_killed(pid_file: &Path) {
    let pid: i32 = fs::read_to_string(pid_file)
        .expect("the hook started its daemon")
        .trim()
        .parse()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let state = fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .map(|stat| stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap());
        if matches!(state, None | Some('Z')) {
            return;
        }
        if Instant::now() > deadline {
            // Do not leave it behind for the next test run.
            let _ = nix::sys::signal::kill(
                nix::unistd::Pid::from_raw(pid),
                nix::sys::signal::Signal::SIGKILL,
            );
            let environ = fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
            let marker: Vec<String> = environ
                .split(|b| *b == 0)
                .filter(|e| e.starts_with(b"HOOKVISOR_RUN="))
                .map(|e| String::from_utf8_lossy(e).into_owned())
                .collect();
            let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            let ppid = status
                .lines()
                .find(|l| l.starts_with("PPid"))
                .unwrap_or("")
                .to_owned();
            panic!("the hook's daemon {pid} outlived it ({marker:?}, {ppid})");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn run_kills_what_a_file_hook_left_running() {
    let ws = Workspace::new();
    let pid_file = ws.base().join("daemon.pid");
    ws.hook("daemon.sh", "file", "pattern: '*'", &daemon_body(&pid_file));
    let out = ws.hookvisor(&["run", "daemon"]);
    check(out, "hookvisor run daemon");
    assert_killed(&pid_file);
    let log = fs::read_to_string(ws.state_dir().join("output/daemon.log")).unwrap();
    assert!(
        log.contains("killed 1 process(es) the hook left running"),
        "{log}"
    );
}

#[test]
fn a_commit_kills_what_a_pre_commit_hook_left_running() {
    let ws = Workspace::git();
    let pid_file = ws.base().join("daemon.pid");
    ws.hook("daemon.sh", "pre-commit", "", &daemon_body(&pid_file));
    check(
        ws.hookvisor(&["pre-commit", "install"]),
        "pre-commit install",
    );
    ws.stage("a.txt", "a\n");
    check(ws.commit("first"), "git commit");
    assert_killed(&pid_file);
}

#[test]
fn serve_kills_what_a_rerun_hook_left_running() {
    let ws = Workspace::new();
    let pid_file = ws.base().join("daemon.pid");
    ws.hook("daemon.sh", "file", "pattern: '*'", &daemon_body(&pid_file));
    let server = Server::tcp(&ws);
    let rerun = server.post("/hooks/daemon/rerun", "{}");
    assert_eq!(rerun.status, 200, "{}", rerun.body);
    assert_killed(&pid_file);
    server.stop();
}

/// A hook that runs `hookvisor fire` in the background and exits: the inner run's hook adds
/// its marker to the outer one (`HOOKVISOR_RUN=outer:inner`), so the daemon it starts is
/// still the outer run's, and is killed with the rest when the outer hook ends.
#[test]
fn a_nested_runs_daemon_carries_the_outer_runs_marker_too() {
    let ws = Workspace::new();
    let pid_file = ws.base().join("daemon.pid");
    let inner = format!("{}\nsleep 1000", daemon_body(&pid_file));
    ws.write(
        ".discobot/hooks/inner.yml",
        &format!(
            "---\nevent: task.complete\nrun: {}\n---\n",
            serde_json::to_string(&inner).unwrap()
        ),
    );
    ws.hook(
        "outer.sh",
        "file",
        "pattern: '*'",
        &format!(
            "\"$HOOKVISOR_BIN\" fire task.complete >/dev/null 2>&1 &\n\
             while [ ! -s {pid} ]; do :; done",
            pid = pid_file.display()
        ),
    );
    let out = ws
        .hookvisor_command()
        .args(["run", "outer"])
        .env("HOOKVISOR_BIN", env!("CARGO_BIN_EXE_hookvisor"))
        .output()
        .unwrap();
    check(out, "hookvisor run outer");
    assert_killed(&pid_file);
}

/// A hook body whose daemon buries its marker behind about 1.8 MB of environment, near the most
/// an exec takes with the usual 8 MB stack (a string is at most 128 KiB, so in 18 variables),
/// and writes its environment's size to `size_file`.
fn buried_marker_body(pid_file: &Path, size_file: &Path) -> String {
    let variables: String = (1..=18).map(|i| format!("B{i}=\"$big\" ")).collect();
    format!(
        "big=$(head -c 100000 /dev/zero | tr '\\0' x)\n\
         setsid env -i {variables}HOOKVISOR_RUN=\"$HOOKVISOR_RUN\" \
         /bin/sh -c 'echo $$ > {pid}; exec sleep 1000' </dev/null >/dev/null 2>&1 &\n\
         i=0\n\
         while [ ! -s {pid} ] && [ $i -lt 3000 ]; do sleep 0.01; i=$((i+1)); done\n\
         i=0\n\
         while [ \"$(wc -c < /proc/$(cat {pid})/environ)\" -lt 1500000 ] && [ $i -lt 3000 ]; do \
         sleep 0.01; i=$((i+1)); done\n\
         wc -c < /proc/$(cat {pid})/environ > {size}",
        pid = pid_file.display(),
        size = size_file.display(),
    )
}

/// Attack: a leftover puts its marker last, after megabytes of environment, so that a scan that
/// read only the start of `/proc/<pid>/environ` would let it go. Through `run` (a subreaper,
/// which reads its own descendants) and `serve` (which reads every process in `/proc`).
#[test]
fn a_marker_buried_behind_megabytes_of_environment_is_still_found() {
    for through in ["run", "serve"] {
        let ws = Workspace::new();
        let pid_file = ws.base().join("daemon.pid");
        let size_file = ws.base().join("environ.size");
        ws.hook(
            "buried.sh",
            "file",
            "pattern: '*'",
            &buried_marker_body(&pid_file, &size_file),
        );
        if through == "run" {
            check(ws.hookvisor(&["run", "buried"]), "hookvisor run buried");
            assert_killed(&pid_file);
        } else {
            let server = Server::tcp(&ws);
            let rerun = server.post("/hooks/buried/rerun", "{}");
            assert_eq!(rerun.status, 200, "{}", rerun.body);
            assert_killed(&pid_file);
            server.stop();
        }
        let size: usize = fs::read_to_string(&size_file)
            .unwrap_or_default()
            .trim()
            .parse()
            .unwrap_or(0);
        assert!(
            size > 1_500_000,
            "{through}: the daemon's environment is {size} bytes, not the megabytes of the attack"
        );
    }
}

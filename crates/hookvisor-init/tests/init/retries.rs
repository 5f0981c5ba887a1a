//! End-to-end tests of session hook retries with the built init as PID 1: a failing session
//! hook is run again, after a wait, up to its `retries`, and recorded once (discobot's
//! `runSessionHookWithRetry`).
//!
//! Needs root and util-linux (`unshare`). Outside CI a test that cannot run says so and
//! returns; with CI=true it fails.

use std::fs;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common;

use common::*;

/// A hook body that counts its attempts in `count` (as `$n`) before running `rest`.
fn counting(count: &Path, rest: &str) -> String {
    format!(
        "n=$(($(cat {c} 2>/dev/null || echo 0) + 1)); printf %s $n > {c}\n{rest}",
        c = count.display()
    )
}

/// Written from discobot's `TestRunSessionHookPersistsAggregateStatusAfterRetries`: one run,
/// three attempts, one successful record; and a blocking hook holds CMD until its last attempt.
#[test]
fn a_blocking_hook_is_retried_before_cmd_starts_and_recorded_once() {
    if !namespaces() {
        return;
    }
    let w = Workspace::new();
    let count = w.path("count");
    w.hook(
        "10-flaky.sh",
        "# blocking: true\n",
        &counting(
            &count,
            "if [ $n -lt 3 ]; then echo \"failing on attempt $n\"; exit 1; fi\n\
             echo \"succeeded on attempt $n\"",
        ),
    );
    let script = format!("echo \"cmd saw $(cat {})\"", count.display());
    let out = pid1(&w.args(&["--", "sh", "-c", &script]))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "cmd saw 3\n",
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "session hook \"10-flaky\" failed with exit code 1 (attempt 1/10); trying again in 0.5s"
        ),
        "{stderr}"
    );

    let entry = &w.status()["hooks"]["10-flaky"];
    assert_eq!(entry["lastResult"], "success", "{entry}");
    assert_eq!(entry["lastExitCode"], 0, "{entry}");
    assert_eq!(entry["runCount"], 1, "{entry}");
    assert_eq!(entry["failCount"], 0, "{entry}");
    assert_eq!(entry["consecutiveFailures"], 0, "{entry}");
    assert_eq!(
        w.log("10-flaky"),
        "=== Attempt 1/10 ===\nfailing on attempt 1\n\n\
         === Attempt 2/10 ===\nfailing on attempt 2\n\n\
         === Attempt 3/10 ===\nsucceeded on attempt 3\n"
    );
}

/// The wait between two attempts ends the moment the container is told to stop: TERM during
/// the 4 s wait before the fifth attempt stops the init at once, runs no fifth attempt, never
/// starts CMD, and records the run as stopped.
#[test]
fn term_during_the_wait_between_attempts_stops_the_container_at_once() {
    if !namespaces() {
        return;
    }
    let w = Workspace::new();
    let count = w.path("count");
    let cmd_ran = w.path("cmd-ran");
    w.hook(
        "10-down.sh",
        "# blocking: true\n",
        &counting(&count, "echo \"attempt $n\"; exit 1"),
    );
    let cmd = cmd_ran.to_str().unwrap();
    let init = Running::start(pid1(&w.args(&["--grace", "5", "--", "touch", cmd])));
    // The log gets an attempt's header once that attempt has ended, just before the wait.
    let log = w.state.join("output/10-down.log");
    poll(
        || {
            fs::read_to_string(&log)
                .ok()
                .filter(|l| l.contains("=== Attempt 4/10 ==="))
        },
        "the fourth attempt to fail",
    );
    let signalled = Instant::now();
    init.signal(libc::SIGTERM);
    let (status, _, err) = init.finish();
    let took = signalled.elapsed();
    assert_eq!(code(status), 128 + libc::SIGTERM, "{err}");
    assert!(
        took < Duration::from_secs(2),
        "stopped after {took:?}: {err}"
    );
    assert!(!cmd_ran.exists(), "CMD started after TERM");
    assert_eq!(fs::read_to_string(&count).unwrap(), "4");
    let entry = &w.status()["hooks"]["10-down"];
    assert_eq!(entry["lastResult"], "failure", "{entry}");
    assert_eq!(entry["lastExitCode"], 1, "{entry}");
    assert_eq!(entry["runCount"], 1, "{entry}");
    assert!(
        entry["note"].as_str().unwrap().contains("session ended"),
        "{entry}"
    );
}

/// A root hook runs from the bytes sealed when the session started, attempt after attempt: one
/// that rewrites its own file and fails runs the original again, never the rewrite.
#[test]
fn every_attempt_of_a_root_hook_runs_the_bytes_read_at_start() {
    if !namespaces() {
        return;
    }
    let w = Workspace::new();
    let count = w.path("count");
    let file = w.ws.join(".discobot/hooks/10-root.sh");
    let rewrite = w.path("rewrite.sh");
    fs::write(
        &rewrite,
        "#!/bin/sh\n#---\n# type: session\n# run_as: root\n# blocking: true\n#---\necho rewritten\n",
    )
    .unwrap();
    w.hook(
        "10-root.sh",
        "# blocking: true\n# run_as: root\n",
        &counting(
            &count,
            &format!(
                "echo \"original, attempt $n, as $(id -u)\"\n\
                 if [ $n -eq 1 ]; then cat {} > {}; exit 1; fi",
                rewrite.display(),
                file.display()
            ),
        ),
    );
    let out = pid1(&w.args(&["--", "true"])).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        fs::read_to_string(&file).unwrap().contains("rewritten"),
        "the hook did not rewrite its file"
    );
    assert_eq!(
        w.log("10-root"),
        "=== Attempt 1/10 ===\noriginal, attempt 1, as 0\n\n\
         === Attempt 2/10 ===\noriginal, attempt 2, as 0\n"
    );
    assert_eq!(w.status()["hooks"]["10-root"]["lastResult"], "success");
}

/// What an attempt leaves running, even a daemon that dropped the run's marker and left its
/// process group, is killed before the next attempt starts.
#[test]
fn what_an_attempt_leaves_running_is_killed_before_the_next() {
    if !namespaces() {
        return;
    }
    let w = Workspace::new();
    let count = w.path("count");
    let pid_file = w.path("daemon.pid");
    w.hook(
        "10-daemon.sh",
        "# blocking: true\n",
        &counting(
            &count,
            &format!(
                "if [ $n -eq 1 ]; then\n\
                   env -i setsid sh -c 'echo $$ > {p}; exec sleep 1000' </dev/null >/dev/null 2>&1 &\n\
                   while [ ! -s {p} ]; do :; done\n\
                   exit 1\n\
                 fi\n\
                 if kill -0 \"$(cat {p})\" 2>/dev/null; then echo daemon alive; else echo daemon gone; fi",
                p = pid_file.display()
            ),
        ),
    );
    let out = pid1(&w.args(&["--", "true"])).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let log = w.log("10-daemon");
    assert!(
        log.ends_with("=== Attempt 2/10 ===\ndaemon gone\n"),
        "{log}"
    );
    assert!(
        stderr.contains("session hook \"10-daemon\" left 1 process(es) running; killed"),
        "{stderr}"
    );
}

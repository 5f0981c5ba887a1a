//! End-to-end tests of `hookvisor-init`: the built binary runs as PID 1 of a fresh PID namespace
//! (`unshare --pid --fork --mount-proc`), with real processes, real signals and a real user.
//!
//! Needs root and util-linux (`unshare`, `script`), procps (`ps`), passwd (`useradd`) and bash.
//! Outside CI a test that cannot run says so and returns; with CI=true it fails.

// Test-only raw calls (pre_exec, kill); the product's unsafe lives in hookvisor-core's sys.rs.
#![allow(unsafe_code)]

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::*;

// ---------------------------------------------------------------------------------------------
// PID 1 duties

#[test]
fn every_exit_code_passes_through() {
    if !namespaces() {
        return;
    }
    let codes: Vec<i32> = (0..256).collect();
    let failures: Vec<String> = std::thread::scope(|scope| {
        let workers: Vec<_> = codes
            .chunks(32)
            .map(|chunk| {
                scope.spawn(move || {
                    let mut failures = Vec::new();
                    for &n in chunk {
                        let exit = format!("exit {n}");
                        let status = pid1(&["--", "sh", "-c", &exit])
                            .stderr(Stdio::null())
                            .status()
                            .unwrap();
                        if status.code() != Some(n) {
                            failures.push(format!("exit {n} gave {status}"));
                        }
                    }
                    failures
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().unwrap())
            .collect()
    });
    assert!(failures.is_empty(), "{failures:?}");
}

#[test]
fn death_by_signal_gives_128_plus_n() {
    if !namespaces() {
        return;
    }
    for (name, n) in [
        ("TERM", 15),
        ("HUP", 1),
        ("INT", 2),
        ("USR1", 10),
        ("USR2", 12),
        ("KILL", 9),
    ] {
        let script = format!("kill -{name} $$");
        let status = pid1(&["--", "sh", "-c", &script]).status().unwrap();
        assert_eq!(status.code(), Some(128 + n), "SIG{name}");
    }
}

#[test]
fn every_catchable_signal_reaches_the_child() {
    if !namespaces() {
        return;
    }
    let w = Workspace::new();
    let record = w.path("signals");
    // Everything but KILL and STOP (uncatchable), CHLD (the init's own), the faults the init
    // keeps for itself (ILL TRAP ABRT BUS FPE SEGV SYS) and 32/33 (the C library's). INT and
    // TERM go last: they start the shutdown, and TERM makes the child exit.
    let excluded = [9, 19, 17, 4, 5, 6, 7, 8, 11, 31, 32, 33, 2, 15];
    let mut signals: Vec<i32> = (1..=64).filter(|s| !excluded.contains(s)).collect();
    signals.extend([2, 15]);
    let script = r#"
        out=$1
        # Not CHLD: bash gets its own from every command it runs.
        for s in $(seq 1 64); do
            [ $s = 17 ] || trap "echo $s >> $out" $s 2>/dev/null
        done
        trap "echo 15 >> $out; exit 0" TERM
        sleep 1000 & pid=$!
        touch "$out.ready"
        while :; do wait $pid; done
    "#;
    let args = [
        "--grace",
        "30",
        "--",
        "bash",
        "-c",
        script,
        "bash",
        record.to_str().unwrap(),
    ];
    let init = Running::start(pid1(&args));
    wait_for_file(&w.path("signals.ready"));
    for (i, &sig) in signals.iter().enumerate() {
        init.signal(sig);
        // Standard signals do not queue: wait until this one arrived before sending the next.
        poll(
            || {
                let got = fs::read_to_string(&record).unwrap_or_default();
                (got.lines().count() > i).then_some(())
            },
            &format!("signal {sig} to reach the child"),
        );
    }
    let (status, _, err) = init.finish();
    assert_eq!(code(status), 0, "{err}");
    let got: Vec<i32> = fs::read_to_string(&record)
        .unwrap()
        .lines()
        .map(|l| l.parse().unwrap())
        .collect();
    assert_eq!(got, signals);
}

#[test]
fn kill_group_forwards_to_the_whole_process_group() {
    if !namespaces() {
        return;
    }
    let w = Workspace::new();
    let got = w.path("got");
    // A grandchild in CMD's group records USR1; without --kill-group only CMD would get it.
    let script = r#"
        trap "" USR1
        (trap "echo grandchild >> $1; exit 0" USR1; touch "$1.ready"; while :; do sleep 0.05; done) &
        wait
    "#;
    let args = [
        "--kill-group",
        "--",
        "sh",
        "-c",
        script,
        "sh",
        got.to_str().unwrap(),
    ];
    let init = Running::start(pid1(&args));
    wait_for_file(&w.path("got.ready"));
    init.signal(libc::SIGUSR1);
    let (status, _, err) = init.finish();
    assert_eq!(code(status), 0, "{err}");
    assert_eq!(fs::read_to_string(&got).unwrap(), "grandchild\n");
}

#[test]
fn hundreds_of_orphans_are_reaped() {
    if !namespaces() {
        return;
    }
    // 300 grandchildren orphaned at once; CMD succeeds when, within the deadline, none is left
    // running and no zombie is left in the namespace.
    let script = r#"
        i=0
        while [ $i -lt 300 ]; do ( sleep 0.2 & ); i=$((i + 1)); done
        n=0
        while [ $n -lt 400 ]; do
            zombies=$(grep -l '^State:.*Z' /proc/[0-9]*/status 2>/dev/null | wc -l)
            sleeping=$(grep -l '^Name:.sleep$' /proc/[0-9]*/status 2>/dev/null | wc -l)
            [ "$zombies" -eq 0 ] && [ "$sleeping" -eq 0 ] && exit 0
            sleep 0.05
            n=$((n + 1))
        done
        echo "left: $zombies zombies, $sleeping sleeping"
        exit 1
    "#;
    let out = pid1(&["--", "sh", "-c", script]).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

#[test]
fn a_child_ignoring_term_is_killed_after_the_grace() {
    if !namespaces() {
        return;
    }
    let w = Workspace::new();
    let ready = w.path("ready");
    let script = r#"trap "" TERM; touch "$1"; sleep 1000"#;
    let args = [
        "--grace",
        "1",
        "--",
        "sh",
        "-c",
        script,
        "sh",
        ready.to_str().unwrap(),
    ];
    let init = Running::start(pid1(&args));
    wait_for_file(&ready);
    let sent = Instant::now();
    init.signal(libc::SIGTERM);
    let (status, _, err) = init.finish();
    let took = sent.elapsed();
    assert_eq!(code(status), 137, "{err}");
    assert!(
        // Not killed, it would sleep its 1000 s; the upper bound leaves a loaded machine room.
        took >= Duration::from_secs(1) && took < Duration::from_secs(20),
        "killed after {took:?}"
    );
    assert!(err.contains("grace period"), "{err}");
}

#[test]
fn signals_the_init_was_given_ignored_stay_ignored_in_cmd() {
    if !namespaces() {
        return;
    }
    // As under nohup: HUP and PIPE ignored by whoever started the init.
    let mut command = pid1(&["--", "cat", "/proc/self/status"]);
    // SAFETY: signal() is async-signal-safe; runs after pid1's own reset.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            libc::signal(libc::SIGPIPE, libc::SIG_IGN);
            Ok(())
        });
    }
    let out = command.output().unwrap();
    assert!(out.status.success());
    let status = String::from_utf8(out.stdout).unwrap();
    let ignored = status
        .lines()
        .find(|l| l.starts_with("SigIgn"))
        .and_then(|l| l.split_whitespace().nth(1))
        .map(|hex| u64::from_str_radix(hex, 16).unwrap());
    let want = (1u64 << (libc::SIGHUP - 1)) | (1u64 << (libc::SIGPIPE - 1));
    assert_eq!(ignored, Some(want), "{status}");
}

#[test]
fn cmd_starts_with_the_signal_state_the_init_was_given() {
    if !namespaces() {
        return;
    }
    // The init blocks every signal and skips std's runtime (which ignores SIGPIPE); CMD must
    // see neither, only the default state `pid1` gives the init.
    let out = pid1(&["--", "cat", "/proc/self/status"]).output().unwrap();
    assert!(out.status.success());
    let status = String::from_utf8(out.stdout).unwrap();
    for field in ["SigBlk", "SigIgn"] {
        let line = status
            .lines()
            .find(|l| l.starts_with(field))
            .unwrap_or_else(|| panic!("no {field} in {status}"));
        assert_eq!(
            line.split_whitespace().nth(1),
            Some("0000000000000000"),
            "{line}"
        );
    }
}

#[test]
fn no_descriptor_leaks_into_cmd_or_hooks() {
    if !namespaces() {
        return;
    }
    let w = Workspace::new();
    w.hook("10-fds.sh", "# blocking: true\n", "ls /proc/self/fd");
    // Descriptor 7 is open in the init (it inherits it from this shell); neither CMD nor the
    // hook may get it. `ls` itself holds 3, its handle on the directory it lists.
    let mut command = Command::new("sh");
    command
        .arg("-c")
        .arg(r#"exec 7</etc/hostname; exec "$@""#)
        .arg("sh")
        .arg("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--kill-child", INIT])
        .args(w.args(&["--", "ls", "/proc/self/fd"]));
    let out = command.output().unwrap();
    assert!(out.status.success(), "{out:?}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "0\n1\n2\n3\n");
    assert_eq!(w.log("10-fds"), "0\n1\n2\n3\n");
}

#[test]
fn cmd_gets_the_terminal_foreground() {
    if !namespaces() {
        return;
    }
    if Command::new("script").arg("--version").output().is_err() {
        assert!(!in_ci(), "CI=true but `script` (util-linux) is missing");
        eprintln!("note: no `script`; test skipped");
        return;
    }
    // `script` gives the init a terminal; CMD's group must be the terminal's foreground group.
    let inner = format!(
        "unshare --pid --fork --mount-proc --kill-child {INIT} -- sh -c \
         'set -- $(ps -o pgid=,tpgid= -p $$); [ \"$1\" = \"$2\" ] && echo FOREGROUND || echo \"BACKGROUND $1 $2\"'"
    );
    let out = Command::new("script")
        .args(["-qec", &inner, "/dev/null"])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("FOREGROUND"), "{stdout}");
}

#[test]
fn as_a_subreaper_it_stops_every_descendant_when_cmd_exits() {
    // Not PID 1: the init becomes a subreaper, adopts CMD's orphan, and stops it at the end.
    let w = Workspace::new();
    let pidfile = w.path("orphan.pid");
    let script = r#"( setsid sleep 1000 & echo $! > "$1" ); exit 3"#;
    let out = Command::new(INIT)
        .args(["--grace", "5", "--", "sh", "-c", script, "sh"])
        .arg(&pidfile)
        .env("HOOKVISOR_STATE_DIR", w.path("state"))
        .env("DISCOBOT_WORKSPACE", &w.ws)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let orphan: i32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(is_gone(orphan), "the orphan {orphan} outlived the init");
}

// ---------------------------------------------------------------------------------------------
// Session hooks

#[test]
fn hooks_run_in_order_blocking_first_and_failures_do_not_stop_the_rest() {
    if !namespaces() {
        return;
    }
    let w = Workspace::new();
    let order = w.path("order");
    let cmd_started = w.path("cmd-started");
    let o = order.display();
    let c = cmd_started.display();
    w.hook(
        "10-first.sh",
        "# blocking: true\n",
        &format!("echo 10 >> {o}"),
    );
    // `retries: 0`: one attempt each (retries have their own tests, in retries.rs).
    w.hook(
        "20-fails.sh",
        "# blocking: true\n# retries: 0\n",
        &format!("echo 20 >> {o}; echo broken; exit 7"),
    );
    w.hook(
        "30-slow.sh",
        "# blocking: true\n# timeout: 1\n# retries: 0\n",
        &format!("echo 30 >> {o}; exec sleep 1000"),
    );
    // A background hook that can only finish once CMD runs: proof they overlap.
    w.hook(
        "40-waits-for-cmd.sh",
        "",
        &format!("while [ ! -e {c} ]; do sleep 0.01; done; echo 40 >> {o}"),
    );
    w.hook("50-last.sh", "", &format!("echo 50 >> {o}"));
    // CMD sees every blocking hook done, then waits for the background ones to be recorded
    // (not only to have written their line: CMD's exit stops whatever still runs).
    let status_path = w.state.join("status.json");
    let script = format!(
        r#"echo "cmd saw $(cat {o} | tr '\n' ' ')"; touch {c}
           until grep -A14 '"50-last": {{' {s} 2>/dev/null | grep -q '"lastResult": "success"'; do
             sleep 0.01
           done"#,
        s = status_path.display()
    );
    let out = pid1(&w.args(&["--", "sh", "-c", &script]))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(String::from_utf8_lossy(&out.stdout), "cmd saw 10 20 30 \n");
    assert_eq!(fs::read_to_string(&order).unwrap(), "10\n20\n30\n40\n50\n");
    // Output goes to the log and, prefixed, to the init's stderr; failures are reported.
    assert!(w.log("20-fails").contains("broken"));
    assert!(stderr.contains("[20-fails] broken"), "{stderr}");
    assert!(
        stderr.contains("\"20-fails\" failed with exit code 7"),
        "{stderr}"
    );
    assert!(stderr.contains("\"30-slow\" timed out"), "{stderr}");

    let status = w.status();
    for (id, result, exit, timed_out) in [
        ("10-first", "success", 0, false),
        ("20-fails", "failure", 7, false),
        ("30-slow", "failure", 124, true),
        ("40-waits-for-cmd", "success", 0, false),
        ("50-last", "success", 0, false),
    ] {
        let entry = &status["hooks"][id];
        assert_eq!(entry["type"], "session", "{id}");
        assert_eq!(entry["lastResult"], result, "{id}");
        assert_eq!(entry["lastExitCode"], exit, "{id}");
        assert_eq!(entry["runCount"], 1, "{id}");
        assert_eq!(
            entry["timedOut"].as_bool().unwrap_or(false),
            timed_out,
            "{id}"
        );
    }
}

/// A session id is any plain name, one that starts with `-` too (as the sandbox's
/// `$DISCOBOT_SESSION_ID` may): `hookvisor init-pass` gets each value as a value, never as an
/// option, so the hooks of such a session run and are recorded like any other's.
#[test]
fn a_session_id_starting_with_a_dash_still_runs_the_hooks() {
    if !namespaces() {
        return;
    }
    let w = Workspace::new();
    w.hook("10-before.sh", "# blocking: true\n", "echo before");
    w.hook("20-beside.sh", "", "echo beside");
    let status = w.state.join("status.json");
    let script = format!(
        "until grep -A6 '\"20-beside\": {{' {} 2>/dev/null | grep -q success; do sleep 0.01; done",
        status.display()
    );
    let out = pid1(&[
        "--workspace",
        w.ws.to_str().unwrap(),
        "--state-dir",
        w.state.to_str().unwrap(),
        "--",
        "timeout",
        "20",
        "sh",
        "-c",
        &script,
    ])
    .env("DISCOBOT_SESSION_ID", "-x")
    .output()
    .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    for id in ["10-before", "20-beside"] {
        assert_eq!(
            w.status()["hooks"][id]["lastResult"],
            "success",
            "{id}: {stderr}"
        );
    }
}

#[test]
fn invalid_run_as_is_reported_and_never_run() {
    if !namespaces() {
        return;
    }
    let w = Workspace::new();
    let marker = w.path("ran");
    w.hook(
        "10-admin.sh",
        "# blocking: true\n# run_as: admin\n",
        &format!("id -u > {}", marker.display()),
    );
    w.hook("20-fine.sh", "# blocking: true\n", "true");
    let out = pid1(&w.args(&["--", "true"])).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!marker.exists(), "a hook with run_as: admin ran");
    assert!(
        stderr.contains("10-admin.sh") && stderr.contains("invalid run_as 'admin'"),
        "{stderr}"
    );
    let status = w.status();
    assert!(status["hooks"].get("10-admin").is_none(), "{status}");
    assert_eq!(status["hooks"]["20-fine"]["lastResult"], "success");
}

#[test]
fn hooks_and_cmd_run_as_root_or_as_the_user() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let user = nix::unistd::User::from_name("hv-test").unwrap().unwrap();
    let extra = nix::unistd::Group::from_name("hv-test-extra")
        .unwrap()
        .unwrap();
    let w = Workspace::new();
    let probe = "echo \"uid=$(id -u) gid=$(id -g) groups=$(id -G) home=$HOME user=$USER logname=$LOGNAME shell=$SHELL\"";
    w.hook(
        "10-root.sh",
        "# blocking: true\n# run_as: root\n",
        &format!("{probe} | cut -d' ' -f1"),
    );
    w.hook("20-user.sh", "# blocking: true\n# run_as: user\n", probe);
    w.hook("30-default.sh", "# blocking: true\n", "id -u");
    // CMD runs as the user too, and can write the state dir the init prepared.
    let script = format!("{probe}; touch \"$HOOKVISOR_STATE_DIR/from-cmd\"");
    let out = pid1(&w.args(&["--user", "hv-test", "--", "sh", "-c", &script]))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");

    let mut groups = [user.gid.as_raw(), extra.gid.as_raw()];
    groups.sort();
    let groups = groups
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" ");
    let as_user = format!(
        "uid={} gid={} groups={groups} home={} user=hv-test logname=hv-test shell={}\n",
        user.uid,
        user.gid,
        user.dir.display(),
        user.shell.display()
    );
    assert_eq!(w.log("10-root"), "uid=0\n");
    let mut user_log = w.log("20-user");
    // `id -G` lists the groups in the kernel's order; compare them sorted.
    user_log = sort_groups(&user_log);
    assert_eq!(user_log, as_user);
    assert_eq!(w.log("30-default"), format!("{}\n", user.uid));
    assert_eq!(sort_groups(&String::from_utf8_lossy(&out.stdout)), as_user);

    // The state dir and everything in it belongs to the user.
    for path in [
        w.state.clone(),
        w.state.join("status.json"),
        w.state.join("status.json.lock"),
        w.state.join("output"),
        w.state.join("output/10-root.log"),
        w.state.join("from-cmd"),
    ] {
        let meta = fs::symlink_metadata(&path).unwrap();
        assert_eq!(meta.uid(), user.uid.as_raw(), "{}", path.display());
    }
    let status = w.status();
    for id in ["10-root", "20-user", "30-default"] {
        assert_eq!(status["hooks"][id]["lastResult"], "success", "{id}");
    }
}

/// Issue 28: `event: session.start` is `type: session`, root included: the init plans such a
/// hook as a root session hook and must run it, not refuse it as changed after it was read.
#[test]
fn an_event_session_start_root_hook_without_type_runs_as_root() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let w = Workspace::new();
    let path = w.ws.join(".discobot/hooks/10-root.sh");
    fs::write(
        &path,
        "#!/bin/sh\n#---\n# event: session.start\n# run_as: root\n#---\nid -u\n",
    )
    .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    let out = pid1(&w.args(&["--user", "hv-test", "--", "true"]))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("changed after it was read"), "{stderr}");
    assert_eq!(
        w.status()["hooks"]["10-root"]["lastResult"],
        "success",
        "{stderr}"
    );
    assert_eq!(w.log("10-root"), "0\n");
}

fn sort_groups(line: &str) -> String {
    let Some(start) = line.find("groups=") else {
        return line.to_owned();
    };
    let rest = &line[start + 7..];
    let end = rest.find(" home=").unwrap_or(rest.len());
    let mut groups: Vec<u32> = rest[..end]
        .split_whitespace()
        .map(|g| g.parse().unwrap())
        .collect();
    groups.sort();
    let groups = groups
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(" ");
    format!("{}groups={groups}{}", &line[..start], &rest[end..])
}

#[test]
fn a_background_hook_still_running_when_cmd_exits_is_stopped_and_recorded() {
    if !namespaces() {
        return;
    }
    let w = Workspace::new();
    let started = w.path("bg-started");
    w.hook(
        "10-forever.sh",
        "",
        &format!("echo started; touch {}; exec sleep 1000", started.display()),
    );
    let script = format!(
        "while [ ! -e {} ]; do sleep 0.01; done; exit 5",
        started.display()
    );
    let begun = Instant::now();
    let out = pid1(&w.args(&["--grace", "30", "--", "sh", "-c", &script]))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    // TERM stops the hook at once: no need to wait for the grace (the bound, well under it,
    // also covers the whole container's start).
    assert!(
        begun.elapsed() < Duration::from_secs(20),
        "{:?}",
        begun.elapsed()
    );
    let entry = &w.status()["hooks"]["10-forever"];
    assert_eq!(entry["lastResult"], "failure", "{entry}");
    assert!(
        entry["note"].as_str().unwrap().contains("session ended"),
        "{entry}"
    );
    assert!(w.log("10-forever").starts_with("started\n"));
}

#[test]
fn term_during_a_blocking_hook_stops_it_and_never_starts_cmd() {
    if !namespaces() {
        return;
    }
    let w = Workspace::new();
    let ready = w.path("hook-ready");
    let cmd_ran = w.path("cmd-ran");
    w.hook(
        "10-slow.sh",
        "# blocking: true\n",
        &format!("touch {}; exec sleep 1000", ready.display()),
    );
    let script = format!("touch {}", cmd_ran.display());
    let init = Running::start(pid1(&w.args(&["--grace", "5", "--", "sh", "-c", &script])));
    wait_for_file(&ready);
    init.signal(libc::SIGTERM);
    let (status, _, err) = init.finish();
    assert_eq!(code(status), 128 + libc::SIGTERM, "{err}");
    assert!(!cmd_ran.exists(), "CMD started after TERM");
    let entry = &w.status()["hooks"]["10-slow"];
    assert_eq!(entry["lastResult"], "failure", "{entry}");
    assert!(entry["note"].is_string(), "{entry}");
}

#[test]
fn without_root_everything_runs_unprivileged_with_one_warning() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let user = nix::unistd::User::from_name("hv-test").unwrap().unwrap();
    let w = Workspace::new();
    fs::create_dir(&w.state).unwrap();
    nix::unistd::chown(&w.state, Some(user.uid), Some(user.gid)).unwrap();
    w.hook("10-root.sh", "# blocking: true\n# run_as: root\n", "id -u");
    w.hook("20-user.sh", "# blocking: true\n", "id -u");
    // Options from the environment this time; setpriv drops root before the init starts.
    let mut command = Command::new("unshare");
    command
        .args(["--pid", "--fork", "--mount-proc", "--kill-child"])
        .args([
            "setpriv",
            "--reuid",
            "hv-test",
            "--regid",
            "hv-test",
            "--init-groups",
        ])
        .args([INIT, "--user", "someone-else", "--", "id", "-u"])
        .env("HOOKVISOR_WORKSPACE", &w.ws)
        .env("HOOKVISOR_STATE_DIR", &w.state)
        .env("DISCOBOT_SESSION_ID", "unprivileged");
    let out = command.output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let uid = format!("{}\n", user.uid);
    assert_eq!(String::from_utf8_lossy(&out.stdout), uid);
    assert_eq!(w.log("10-root"), uid);
    assert_eq!(w.log("20-user"), uid);
    let warnings: Vec<&str> = stderr.lines().filter(|l| l.contains("warning")).collect();
    assert_eq!(warnings.len(), 2, "{stderr}");
    assert!(
        warnings[0].contains("instead of --user someone-else"),
        "{stderr}"
    );
    assert!(
        warnings[1].contains("run_as: root session hooks run unprivileged"),
        "{stderr}"
    );
    assert_eq!(w.status()["hooks"]["10-root"]["lastResult"], "success");
}

#[test]
fn an_unknown_user_is_a_usage_error_naming_it() {
    if ensure_test_user().is_none() {
        return;
    }
    let out = Command::new(INIT)
        .args(["--user", "hv-no-such-user", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("no user 'hv-no-such-user' in /etc/passwd"),
        "{stderr}"
    );
}

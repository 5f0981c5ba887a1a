//! End-to-end tests of the exit statuses of docs/DESIGN.md: 2 only for usage and configuration
//! errors, 1 when hookvisor fails at its work (a file it cannot write is not the user's typo).

use crate::common;

use std::fs;

use common::{Workspace, stderr};

#[test]
fn usage_errors_exit_2() {
    let ws = Workspace::new();
    ws.hook("lint.sh", "file", "pattern: '*.rs'", "exit 0");
    for (args, says) in [
        (&["run", "nosuch"][..], "known ids: lint"),
        (&["--session", "../escape", "list"][..], "not a plain name"),
        (
            &["--workspace", "/nonexistent/dir", "list"][..],
            "/nonexistent/dir",
        ),
        (&["list", "--no-such-flag"][..], "--no-such-flag"),
    ] {
        let out = ws.hookvisor(args);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", stderr(&out));
        assert!(stderr(&out).contains(says), "{args:?}: {}", stderr(&out));
    }
}

/// Regression: every error used to convert to exit 2, telling the caller to fix a command
/// line that was right.
#[test]
fn a_state_dir_that_is_a_file_exits_1_not_2() {
    let ws = Workspace::new();
    ws.hook("lint.sh", "file", "pattern: '*.rs'", "exit 0");
    let file = ws.base().join("state-is-a-file");
    fs::write(&file, "not a directory").unwrap();
    let state_dir = file.to_str().unwrap();
    for args in [
        &["--state-dir", state_dir, "run", "lint"][..],
        &["--state-dir", state_dir, "session"][..],
    ] {
        let out = ws.hookvisor(args);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {}", stderr(&out));
        assert!(
            stderr(&out).contains(state_dir),
            "{args:?} must name the state dir: {}",
            stderr(&out)
        );
    }
    assert_eq!(fs::read_to_string(&file).unwrap(), "not a directory");
}

/// `serve -- AGENT` exits with the agent's status, returned from the command rather than
/// `process::exit`: the exit must not wait for the hook still running in the runtime's
/// blocking pool when the agent goes.
#[test]
fn serve_passes_the_agent_status_through_while_a_hook_runs() {
    use common::serve::Server;
    use nix::sys::signal::kill;
    use nix::sys::stat::Mode;
    use nix::unistd::{Pid, mkfifo};

    let ws = Workspace::new();
    let started = ws.base().join("started");
    mkfifo(&started, Mode::from_bits_truncate(0o600)).unwrap();
    let pid_file = ws.base().join("hook.pid");
    ws.hook(
        "hang.sh",
        "file",
        "pattern: '*.rs'",
        &format!("echo $$ > '{}'\nexec sleep 1000", started.display()),
    );
    let script = format!(
        r#"hp=${{HOOKVISOR_URL#http://}}
exec 3<>/dev/tcp/${{hp%:*}}/${{hp##*:}}
printf 'POST /hooks/hang/rerun HTTP/1.0\r\nContent-Type: application/json\r\nContent-Length: 0\r\n\r\n' >&3
exec 4<>'{}'
read -t 30 pid <&4 || exit 99
echo "$pid" > '{}'
exit 5"#,
        started.display(),
        pid_file.display()
    );
    // The rerun answers only once the hook ends; the hook's pid on the FIFO says it started
    // (opened read-write, so that a hook that never starts fails the test with 99, not a hang).
    let mut server = Server::start(
        &ws,
        &["--listen", "127.0.0.1:0", "--", "bash", "-c", &script],
        &[],
    );
    assert_eq!(server.wait().code(), Some(5));
    let pid: i32 = fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    // Dead, or a zombie its new parent has not reaped yet.
    let alive = kill(Pid::from_raw(pid), None).is_ok()
        && fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            !stat
                .rsplit(')')
                .next()
                .unwrap_or("")
                .trim_start()
                .starts_with('Z')
        });
    assert!(!alive, "the hook {pid} outlived the server");
}

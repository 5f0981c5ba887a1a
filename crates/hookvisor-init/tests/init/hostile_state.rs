//! A state dir the agent booby-trapped before the container (re)started (issue 12, item 7).
//!
//! The state dir belongs to the run user, so code the agent ran can leave anything in it. The
//! init, PID 1 and root, records the session hooks there before CMD starts: whatever it finds,
//! it must not block (a FIFO), read without end (a symlink to /dev/zero) or give up; it moves
//! the thing aside, says so on stderr, starts a fresh status.json and runs CMD.
//!
//! Needs root and util-linux, as the tests of `init.rs`; outside CI a test that cannot run says
//! so and returns.

// Test-only raw calls (pre_exec, kill); the product's unsafe lives in hookvisor-core's sys.rs.
#![allow(unsafe_code)]

use std::fs;
use std::io;
use std::os::unix::fs::{FileTypeExt, PermissionsExt, lchown};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use crate::common;

use common::*;

/// The init's address space is capped at this: it needs a few MiB, and reading /dev/zero to
/// the end must fail the test, not take the machine's memory.
const MEMORY_CAP: libc::rlim_t = 256 << 20;

/// What the init left: its exit code, stdout and stderr, and the workspace.
struct Outcome {
    code: i32,
    stdout: String,
    stderr: String,
    w: Workspace,
}

/// Runs the init as PID 1 for the user `hv-test`, with a blocking session hook, after `plant`
/// put something hostile in the state dir (owned by `hv-test`, as in a real container).
/// `None` when the test cannot run here.
fn run_after(plant: impl FnOnce(&Path)) -> Option<Outcome> {
    if !namespaces() || ensure_test_user().is_none() {
        return None;
    }
    let user = nix::unistd::User::from_name("hv-test").unwrap().unwrap();
    let w = Workspace::new();
    w.hook("10-hello.sh", "# blocking: true\n", "echo hello");
    fs::create_dir(&w.state).unwrap();
    fs::set_permissions(&w.state, fs::Permissions::from_mode(0o755)).unwrap();
    plant(&w.state);
    for entry in fs::read_dir(&w.state).unwrap() {
        lchown(
            entry.unwrap().path(),
            Some(user.uid.as_raw()),
            Some(user.gid.as_raw()),
        )
        .unwrap();
    }
    lchown(&w.state, Some(user.uid.as_raw()), Some(user.gid.as_raw())).unwrap();

    let mut command = pid1(&w.args(&["--user", "hv-test", "--", "sh", "-c", "echo started"]));
    // SAFETY: setrlimit is async-signal-safe and reads only the local it is given.
    unsafe {
        command.pre_exec(|| {
            let cap = libc::rlimit {
                rlim_cur: MEMORY_CAP,
                rlim_max: MEMORY_CAP,
            };
            if libc::setrlimit(libc::RLIMIT_AS, &cap) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(())
        });
    }
    // `finish` fails the test if the init has not exited by the deadline, and kills it.
    let (status, stdout, stderr) = Running::start(command).finish();
    Some(Outcome {
        code: code(status),
        stdout,
        stderr,
        w,
    })
}

impl Outcome {
    /// CMD ran, the init exited 0, the session hook was recorded in a fresh regular
    /// status.json, and stderr names `name` and where it went; returns that place.
    fn assert_recovered(&self, name: &str) -> PathBuf {
        let Outcome {
            code,
            stdout,
            stderr,
            w,
        } = self;
        assert_eq!(*code, 0, "{stderr}");
        assert_eq!(stdout, "started\n", "{stderr}");
        let status = w.state.join("status.json");
        assert!(fs::symlink_metadata(&status).unwrap().is_file());
        assert_eq!(w.status()["hooks"]["10-hello"]["lastResult"], "success");
        let prefix = format!("{name}.corrupt-");
        let aside: Vec<PathBuf> = fs::read_dir(&w.state)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&prefix)
            })
            .collect();
        assert_eq!(aside.len(), 1, "{aside:?}");
        let warning = stderr
            .lines()
            .find(|l| l.starts_with("hookvisor-init: warning: ") && l.contains("moved it aside"))
            .unwrap_or_else(|| panic!("no warning about the moved file:\n{stderr}"));
        assert!(
            warning.contains(&w.state.join(name).display().to_string())
                && warning.contains(&aside[0].display().to_string()),
            "{warning}"
        );
        aside[0].clone()
    }
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
}

#[test]
fn a_fifo_status_json_does_not_block_pid_1() {
    let Some(outcome) = run_after(|state| mkfifo(&state.join("status.json"))) else {
        return;
    };
    let aside = outcome.assert_recovered("status.json");
    assert!(fs::symlink_metadata(aside).unwrap().file_type().is_fifo());
}

#[test]
fn a_fifo_lock_file_does_not_block_pid_1() {
    let Some(outcome) = run_after(|state| mkfifo(&state.join("status.json.lock"))) else {
        return;
    };
    let aside = outcome.assert_recovered("status.json.lock");
    assert!(fs::symlink_metadata(aside).unwrap().file_type().is_fifo());
    let lock = outcome.w.state.join("status.json.lock");
    assert!(fs::symlink_metadata(lock).unwrap().is_file());
}

#[test]
fn a_status_json_linked_to_dev_zero_does_not_exhaust_pid_1() {
    let Some(outcome) = run_after(|state| {
        std::os::unix::fs::symlink("/dev/zero", state.join("status.json")).unwrap();
    }) else {
        return;
    };
    let aside = outcome.assert_recovered("status.json");
    assert_eq!(fs::read_link(aside).unwrap(), Path::new("/dev/zero"));
}

//! Helpers shared by the init's end-to-end tests: the built init as PID 1 of a new PID
//! namespace, a workspace with hooks, the test user, and polling with a deadline.

#![allow(dead_code)]
// A helper module shared by several test crates: `pub` is its interface to each of them.
#![allow(unreachable_pub)]
// Test-only raw calls (pre_exec, kill); the product's unsafe lives in hookvisor-core's sys.rs.
#![allow(unsafe_code)]

use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde_json::Value;

pub const INIT: &str = env!("CARGO_BIN_EXE_hookvisor-init");

/// Long enough for a loaded CI machine, short enough that a hang fails instead of stalling.
pub const DEADLINE: Duration = Duration::from_secs(30);

// The test kit's helpers, where the tests of this crate look for them; each binary uses a part.
#[allow(unused_imports)]
pub use hookvisor_testkit::{ensure_test_user, in_ci};

/// Whether PID namespaces work here: root (or CI, where their absence is a failure).
pub fn namespaces() -> bool {
    static WORKS: OnceLock<bool> = OnceLock::new();
    let works = *WORKS.get_or_init(|| {
        Command::new("unshare")
            .args(["--pid", "--fork", "--mount-proc", "true"])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    });
    if !works {
        assert!(
            !in_ci(),
            "CI=true but `unshare --pid --fork --mount-proc` fails: run as root with util-linux"
        );
        eprintln!("note: PID namespaces unavailable (not root?); test skipped");
    }
    works
}

/// `hookvisor-init ARGS` as PID 1 of a new PID namespace, killed with it if the test gives up.
pub fn pid1(args: &[&str]) -> Command {
    let mut command = Command::new("unshare");
    command
        .args(["--pid", "--fork", "--mount-proc", "--kill-child", INIT])
        .args(args);
    // The init is given the default signal state, whatever this test was started with (a shell's
    // background job ignores INT and QUIT, nohup ignores HUP): the tests check what it does
    // with a known state, and that CMD gets that state back.
    // SAFETY: only async-signal-safe calls between fork and exec.
    unsafe {
        command.pre_exec(|| {
            for sig in 1..=31 {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
            let mut none: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut none);
            libc::sigprocmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
            Ok(())
        });
    }
    for var in [
        "DISCOBOT_WORKSPACE",
        "DISCOBOT_SESSION_ID",
        "SESSION_ID",
        "HOOKVISOR_STATE_DIR",
        "HOOKVISOR_USER",
        "HOOKVISOR_WORKSPACE",
        "HOOKVISOR_GRACE",
        "HOOKVISOR_KILL_GROUP",
    ] {
        command.env_remove(var);
    }
    command
}

/// A started init with its output captured.
pub struct Running {
    pub child: Child,
}

impl Running {
    pub fn start(mut command: Command) -> Running {
        let child = command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn unshare");
        Running { child }
    }

    /// The init's pid as seen from here: the child `unshare` forked.
    pub fn init_pid(&self) -> i32 {
        let unshare = self.child.id() as i32;
        poll(|| children_of(unshare).first().copied(), "unshare's child")
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill has no memory-safety preconditions.
        let rc = unsafe { libc::kill(self.init_pid(), sig) };
        assert_eq!(rc, 0, "kill({sig}): {}", std::io::Error::last_os_error());
    }

    /// Waits for the end (killing it at the deadline) and returns status, stdout, stderr.
    pub fn finish(mut self) -> (ExitStatus, String, String) {
        let status = poll(|| self.child.try_wait().unwrap(), "the init to exit");
        let mut out = String::new();
        let mut err = String::new();
        self.child
            .stdout
            .take()
            .unwrap()
            .read_to_string(&mut out)
            .unwrap();
        self.child
            .stderr
            .take()
            .unwrap()
            .read_to_string(&mut err)
            .unwrap();
        (status, out, err)
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // --kill-child takes the whole namespace down with unshare.
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Polls `check` until it gives a value; panics naming `what` at the deadline.
pub fn poll<T>(mut check: impl FnMut() -> Option<T>, what: &str) -> T {
    let deadline = Instant::now() + DEADLINE;
    loop {
        if let Some(value) = check() {
            return value;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

pub fn wait_for_file(path: &Path) {
    poll(|| path.exists().then_some(()), &path.display().to_string());
}

pub fn children_of(parent: i32) -> Vec<i32> {
    let mut found = Vec::new();
    for entry in fs::read_dir("/proc").unwrap().flatten() {
        let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
            continue;
        };
        let Ok(stat) = fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        let after = &stat[stat.rfind(')').unwrap() + 1..];
        if after.split_whitespace().nth(1) == Some(&parent.to_string()) {
            found.push(pid);
        }
    }
    found
}

/// True when `pid` is gone or a zombie nobody can run anymore.
pub fn is_gone(pid: i32) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => stat[stat.rfind(')').unwrap() + 2..].starts_with('Z'),
    }
}

pub fn code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| panic!("unshare died: {status}"))
}

/// A workspace with `.discobot/hooks/` and a state dir, readable by the test user.
pub struct Workspace {
    pub _temp: tempfile::TempDir,
    pub root: PathBuf,
    pub ws: PathBuf,
    pub state: PathBuf,
}

/// Builds `hookvisor` beside the init once per test run: the init runs its session hooks
/// through it (`hookvisor init-pass`), and `cargo test -p hookvisor-init` alone builds only
/// the init, which would test whatever `hookvisor` an earlier build left there.
pub fn build_hookvisor() {
    static BUILT: OnceLock<()> = OnceLock::new();
    BUILT.get_or_init(|| {
        let status = Command::new(env!("CARGO"))
            .args(["build", "--quiet", "-p", "hookvisor", "--bin", "hookvisor"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .status()
            .expect("cargo runs");
        assert!(status.success(), "cargo build -p hookvisor failed");
    });
}

impl Workspace {
    pub fn new() -> Workspace {
        build_hookvisor();
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().to_owned();
        fs::set_permissions(&root, fs::Permissions::from_mode(0o755)).unwrap();
        let ws = root.join("ws");
        fs::create_dir_all(ws.join(".discobot/hooks")).unwrap();
        Workspace {
            state: root.join("state"),
            _temp: temp,
            root,
            ws,
        }
    }

    /// Writes a session hook; `front` holds extra front matter lines.
    pub fn hook(&self, file: &str, front: &str, body: &str) {
        let path = self.ws.join(".discobot/hooks").join(file);
        fs::write(
            &path,
            format!("#!/bin/sh\n#---\n# type: session\n{front}#---\n{body}\n"),
        )
        .unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// A file of the temp dir, for markers.
    pub fn path(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// The init's options for this workspace, then `extra`.
    pub fn args<'a>(&'a self, extra: &[&'a str]) -> Vec<&'a str> {
        let mut args = vec![
            "--workspace",
            self.ws.to_str().unwrap(),
            "--state-dir",
            self.state.to_str().unwrap(),
            "--session",
            "test",
        ];
        args.extend_from_slice(extra);
        args
    }

    pub fn status(&self) -> Value {
        serde_json::from_slice(&fs::read(self.state.join("status.json")).unwrap()).unwrap()
    }

    pub fn log(&self, id: &str) -> String {
        fs::read_to_string(self.state.join("output").join(format!("{id}.log"))).unwrap()
    }
}

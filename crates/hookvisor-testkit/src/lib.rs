//! The one home of the helpers that the tests of several hookvisor crates share (issue 30): the
//! real test user `hv-test`, CI's rule that a test which cannot run fails instead of skipping,
//! waiting on an event instead of sleeping, and the one HTTP receiver ([`http`]). A dev-dependency only, never published; it
//! depends on no hookvisor crate, so the core's own unit tests can use it too.
//!
//! ```no_run
//! let Some(_one_at_a_time) = hookvisor_testkit::ensure_test_user() else {
//!     return; // not root, outside CI
//! };
//! let user = hookvisor_testkit::test_user();
//! # let _ = user;
//! ```

pub mod http;

use std::fs;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Whether this is a CI run (`CI=true`): there a test that cannot run fails instead of skipping.
pub fn in_ci() -> bool {
    std::env::var_os("CI").is_some_and(|v| v == "true")
}

/// Held while a test runs processes as `hv-test`: a root hook is refused while any process of
/// the run user exists, so the tests of one binary that use the test user take turns.
pub type OneAtATime = MutexGuard<'static, ()>;

/// Creates the test user `hv-test` with the supplementary group `hv-test-extra` once, safely
/// when the tests of several binaries race (a file lock), and returns [`OneAtATime`]. Needs
/// root: `None` (the test skips) outside CI, a failure with CI=true.
pub fn ensure_test_user() -> Option<OneAtATime> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    if !nix::unistd::Uid::effective().is_root() {
        assert!(
            !in_ci(),
            "CI=true but not root: cannot create the user hv-test"
        );
        eprintln!("note: not root; test skipped");
        return None;
    }
    let guard = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let lock = fs::File::create("/tmp/hookvisor-test-user.lock").unwrap();
    lock.lock().unwrap();
    for cmd in [
        "getent group hv-test-extra >/dev/null || groupadd hv-test-extra",
        "id hv-test >/dev/null 2>&1 || useradd --create-home --groups hv-test-extra hv-test",
        "id -nG hv-test | grep -qw hv-test-extra || usermod -aG hv-test-extra hv-test",
    ] {
        let status = Command::new("/bin/sh").args(["-c", cmd]).status().unwrap();
        assert!(status.success(), "{cmd}: {status}");
    }
    Some(guard)
}

/// The test user's passwd entry ([`ensure_test_user`] made it).
pub fn test_user() -> nix::unistd::User {
    nix::unistd::User::from_name("hv-test")
        .unwrap()
        .expect("hv-test exists")
}

/// Waits until `done` holds, looking every 20 ms, for at most a minute (a loaded machine);
/// panics naming `what`. For what happens after a command returned (a detached run's record).
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A named pipe: a hook that runs `cat GATE` waits in it until [`open_gate`] lets it go.
pub fn gate(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
}

/// Lets the hook waiting in the gate `path` go: waits until it reads (an open for writing
/// without blocking fails until a reader is there), then closes, which is its end of file.
pub fn open_gate(path: &Path) {
    use std::os::unix::fs::OpenOptionsExt;
    wait_until("a hook reads the gate", || {
        fs::OpenOptions::new()
            .write(true)
            .custom_flags(nix::fcntl::OFlag::O_NONBLOCK.bits())
            .open(path)
            .is_ok()
    });
}

/// Runs git in `dir` with a fixed identity, `main` as the first branch and no signing, whatever
/// the caller's configuration says; panics with its stderr on failure.
pub fn git(dir: &Path, args: &[&str]) -> Output {
    let out = Command::new("git")
        .args([
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "-c",
            "init.defaultBranch=main",
            "-c",
            "commit.gpgsign=false",
        ])
        .args(args)
        .current_dir(dir)
        .output()
        .expect("git runs (apt-get install git)");
    assert!(
        out.status.success(),
        "git {args:?} in {}: {}",
        dir.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

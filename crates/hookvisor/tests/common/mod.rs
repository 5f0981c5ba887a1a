//! The one helper of the end-to-end tests: a temporary workspace (optionally a git repository),
//! hooks with front matter written in one call, and the built `hookvisor` run against a private
//! state dir, all isolated from the caller's environment and git configuration.
//!
//! ```ignore
//! let ws = Workspace::git();
//! ws.hook("lint.sh", "pre-commit", "pattern: '*.rs'", "exit 1");
//! assert!(ws.hookvisor(&["pre-commit", "install"]).status.success());
//! ```

// A helper module shared by several test crates: `pub` is its interface to each of them.
#![allow(unreachable_pub)]
// Each test file uses its own part of this module.
#![allow(dead_code)]

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

/// Variables of the caller that would change what hookvisor or git does in a test.
const LEAKY_VARIABLES: &[&str] = &[
    "DISCOBOT_WORKSPACE",
    "DISCOBOT_SESSION_ID",
    "SESSION_ID",
    "HOOKVISOR_STATE_DIR",
    "HOOKVISOR_SESSION",
    "HOOKVISOR_SKIP",
    "HOOKVISOR_TOKEN",
    "HOOKVISOR_URL",
    "HOOKVISOR_SOCKET",
    "HOOKVISOR_MAX_RETRIES",
    // Global hooks: the private home's directory, never the caller's.
    "HOOKVISOR_GLOBAL_HOOKS",
    // The loop's owner leaves its tool's hook file unread (docs/EVENTS.md §5 rule 12).
    "HOOKVISOR_LOOP_OWNER",
    "XDG_CONFIG_HOME",
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
];

/// A temporary workspace with a private home and state dir; everything is removed on drop.
pub struct Workspace {
    _temp: tempfile::TempDir,
    root: PathBuf,
    state: PathBuf,
    home: PathBuf,
}

impl Workspace {
    /// An empty workspace, not a git repository.
    pub fn new() -> Workspace {
        Workspace::named("workspace", "state")
    }

    /// A workspace that is a fresh git repository on branch `main`, with no commit yet.
    pub fn git() -> Workspace {
        Workspace::git_named("workspace", "state")
    }

    /// Like [`Workspace::git`], with the workspace and state dirs given these names (to test
    /// names with spaces, quotes, `$` and backticks).
    pub fn git_named(workspace: &str, state: &str) -> Workspace {
        let ws = Workspace::named(workspace, state);
        ws.git_ok(&["init", "-q", "-b", "main"]);
        ws
    }

    fn named(workspace: &str, state: &str) -> Workspace {
        let temp = tempfile::tempdir().expect("create a temp dir");
        let base = temp.path().canonicalize().expect("canonical temp dir");
        let ws = Workspace {
            root: base.join(workspace),
            state: base.join(state),
            home: base.join("home"),
            _temp: temp,
        };
        fs::create_dir_all(&ws.root).unwrap();
        fs::create_dir_all(&ws.home).unwrap();
        ws
    }

    /// The workspace root (absolute, canonical).
    pub fn path(&self) -> &Path {
        &self.root
    }

    /// The private state dir every `hookvisor` command of this workspace uses.
    pub fn state_dir(&self) -> &Path {
        &self.state
    }

    /// The global hooks directory of the private home (`~/.config/hookvisor/hooks`), created.
    pub fn global_hooks(&self) -> PathBuf {
        let dir = self.home.join(".config/hookvisor/hooks");
        fs::create_dir_all(&dir).unwrap();
        dir
    }

    /// The directory that holds the workspace, the state dir and the home, for extra files.
    pub fn base(&self) -> &Path {
        self.root.parent().unwrap()
    }

    /// Writes `.discobot/hooks/<file>`, executable, with `type: <kind>` plus `front_matter`
    /// (YAML lines, may be empty) in a `#---` block, then `body`. Returns its path.
    pub fn hook(&self, file: &str, kind: &str, front_matter: &str, body: &str) -> PathBuf {
        self.hook_in(&self.root, file, kind, front_matter, body)
    }

    /// [`Workspace::hook`] for another work tree (a linked worktree, a submodule).
    pub fn hook_in(
        &self,
        root: &Path,
        file: &str,
        kind: &str,
        front_matter: &str,
        body: &str,
    ) -> PathBuf {
        let mut text = format!("#!/bin/sh\n#---\n# type: {kind}\n");
        for line in front_matter.lines().filter(|l| !l.trim().is_empty()) {
            text.push_str(&format!("# {line}\n"));
        }
        text.push_str("#---\n");
        text.push_str(body);
        text.push('\n');
        let dir = root.join(".discobot/hooks");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join(file);
        fs::write(&path, text).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        path
    }

    /// Writes a workspace file (creating its directories).
    pub fn write(&self, relative: &str, contents: &str) -> PathBuf {
        let path = self.root.join(relative);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, contents).unwrap();
        path
    }

    /// A `git` command in `dir`, isolated from the caller's configuration and identity.
    pub fn git_command(&self, dir: &Path) -> Command {
        let mut cmd = Command::new("git");
        cmd.current_dir(dir);
        self.isolate(&mut cmd);
        cmd.env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .env("GIT_AUTHOR_NAME", "Test")
            .env("GIT_AUTHOR_EMAIL", "test@example.com")
            .env("GIT_COMMITTER_NAME", "Test")
            .env("GIT_COMMITTER_EMAIL", "test@example.com")
            // Submodules from a local path need this since git 2.38.1.
            .env("GIT_CONFIG_COUNT", "1")
            .env("GIT_CONFIG_KEY_0", "protocol.file.allow")
            .env("GIT_CONFIG_VALUE_0", "always");
        cmd
    }

    /// Runs git in the workspace.
    pub fn git_run(&self, args: &[&str]) -> Output {
        self.git_command(&self.root)
            .args(args)
            .output()
            .expect("run git")
    }

    /// Runs git in the workspace, panics with its output if it fails, returns its stdout.
    pub fn git_ok(&self, args: &[&str]) -> String {
        check(self.git_run(args), &format!("git {}", args.join(" ")))
    }

    /// Writes a file and stages it.
    pub fn stage(&self, relative: &str, contents: &str) {
        self.write(relative, contents);
        self.git_ok(&["add", "--", relative]);
    }

    /// `git commit -m <message>` in `dir`, with the given extra environment.
    pub fn commit_in(&self, dir: &Path, message: &str, env: &[(&str, &str)]) -> Output {
        let mut cmd = self.git_command(dir);
        cmd.args(["commit", "-q", "-m", message]);
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().expect("run git commit")
    }

    /// `git commit -m <message>` in the workspace.
    pub fn commit(&self, message: &str) -> Output {
        self.commit_in(&self.root, message, &[])
    }

    /// The built `hookvisor` run in the workspace with the private state dir (through
    /// `HOOKVISOR_STATE_DIR`, so that `--state-dir` in `args` still wins).
    pub fn hookvisor(&self, args: &[&str]) -> Output {
        self.hookvisor_command()
            .args(args)
            .output()
            .expect("run hookvisor")
    }

    /// The command [`Workspace::hookvisor`] runs, for extra environment or stdin.
    pub fn hookvisor_command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_hookvisor"));
        cmd.current_dir(&self.root);
        self.isolate(&mut cmd);
        cmd.env("HOOKVISOR_STATE_DIR", &self.state);
        cmd
    }

    /// `status.json` of the private state dir, parsed.
    pub fn status(&self) -> serde_json::Value {
        let path = self.state.join("status.json");
        let bytes = fs::read(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        serde_json::from_slice(&bytes).expect("status.json is JSON")
    }

    fn isolate(&self, cmd: &mut Command) {
        for name in LEAKY_VARIABLES {
            cmd.env_remove(name);
        }
        cmd.env("HOME", &self.home);
    }
}

/// Waits until the coarse clock the kernel stamps files with has passed the present, so that
/// every file written before the call is strictly older than any cutoff taken after it. Without
/// this a hook run within the same clock tick as the test's last write would (correctly, by
/// design) see that write as a change and run again; the tests that count runs must not depend
/// on luck. Waiting for the coarse clock merely to move is not enough: with Linux's multigrain
/// timestamps (6.13+) a file stat'ed since its last change gets a fine-grained stamp on the next
/// one, which can lie ahead of the coarse clock after it ticked.
pub fn tick() {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let present =
        hookvisor_core::changes::Timestamp::from_nanos(i64::try_from(now.as_nanos()).unwrap());
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while hookvisor_core::changes::Timestamp::now() <= present {
        assert!(
            std::time::Instant::now() < deadline,
            "the coarse clock did not pass the present"
        );
        std::thread::yield_now();
    }
}

/// Panics with the command's output unless it succeeded; returns its stdout.
pub fn check(output: Output, what: &str) -> String {
    assert!(
        output.status.success(),
        "{what} failed ({}):\nstdout: {}\nstderr: {}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The stderr of a command, lossily decoded.
pub fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

/// The stdout of a command, lossily decoded.
pub fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// The exit code of a command that exited.
pub fn code(output: &Output) -> i32 {
    output.status.code().expect("exited")
}

/// The stdout of a command as JSON; a failure shows both streams.
pub fn json_of(output: &Output) -> serde_json::Value {
    serde_json::from_slice(&output.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}\nstderr: {}", stdout(output), stderr(output)))
}

/// `hookvisor serve` under test and a small HTTP client (tests/serve/serve.rs, tests/serve/dashboard.rs).
pub mod fake_agent;
pub mod serve;
/// A probe of an `await: false` hook (tests/git/commit_after.rs, tests/cli/eval.rs).
pub mod unawaited;

// The test kit's helpers, where the tests of this crate look for them; each binary uses a part.
#[allow(unused_imports)]
pub use hookvisor_testkit::{ensure_test_user, gate, open_gate, test_user, wait_until};

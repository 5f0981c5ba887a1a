//! Session runners: children of the init that run one pass of the session hooks by becoming
//! `hookvisor init-pass PASS` (crates/hookvisor, `commands/init_pass.rs`), and exit.
//!
//! The hook model, the pipeline and the actions live in `hookvisor`, so PID 1 links none of
//! them. Hooks run in a child, never in the init itself, so the executor's `waitpid(hook)` and
//! the init's `waitpid(-1)` live in different processes and can never steal each other's
//! child. The init reaps a runner like any other child, and TERM stops it: the pass cancels
//! its hook, records it as stopped and exits. A runner killed before it could record is
//! followed by a recorder, `hookvisor init-pass PASS --record-killed NOTE`.
//!
//! Root runs `hookvisor` only when no account but root can change it or a directory above it
//! (root never runs what the agent can change).

use std::ffi::{OsStr, OsString};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use hookvisor_core::Context;
use nix::unistd::Pid;

use crate::signals::Inherited;
use crate::spawn;

/// A pass of the session hooks (`hookvisor init-pass`'s argument).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pass {
    /// The blocking hooks, the root hooks and the awaited `session.start` hooks.
    BeforeCmd,
    /// The others, beside CMD.
    BesideCmd,
}

impl Pass {
    fn as_str(self) -> &'static str {
        match self {
            Pass::BeforeCmd => "before-cmd",
            Pass::BesideCmd => "beside-cmd",
        }
    }
}

/// A runner the init started and has not reaped yet.
#[derive(Debug)]
pub(crate) struct Runner {
    /// Its process id.
    pub pid: Pid,
    /// The pass it runs, to record its hooks if it dies before it can; `None` for a recorder.
    pub pass: Option<Pass>,
}

/// How the init starts `hookvisor init-pass`: the same for every pass of one container.
#[derive(Clone)]
pub(crate) struct PassCommand {
    /// `hookvisor` beside the init, checked for a root run.
    program: PathBuf,
    /// The global options: the resolved context.
    globals: Vec<OsString>,
    /// The pass's own options after the pass name.
    options: Vec<OsString>,
    /// The signal state a program starts with.
    inherited: Inherited,
}

impl PassCommand {
    /// The command for `ctx`, or the one line that says why no session hook can run.
    ///
    /// `user` is the `--user` spec the init switches to (root only), `grace` the init's: a
    /// stopped hook gets half of it between TERM and KILL, so that the pass has time to record
    /// it before the init kills the pass.
    pub(crate) fn new(
        ctx: &Context,
        user: Option<&str>,
        root_hooks: &str,
        grace: Duration,
        inherited: Inherited,
    ) -> Result<PassCommand, String> {
        let program = std::env::current_exe()
            .map_err(|e| format!("cannot find hookvisor-init's own path: {e}"))?
            .with_file_name("hookvisor");
        // Root never runs what another account can change (README "Running as root").
        match hookvisor_core::user_fs::writable_by_others(&program) {
            Ok(None) => {}
            Ok(Some((at, _))) => {
                return Err(format!(
                    "{} can be changed by an account other than root; install hookvisor \
                     root's and closed to others beside hookvisor-init",
                    at.display()
                ));
            }
            Err(e) => {
                return Err(format!(
                    "{}: {e}; install hookvisor beside hookvisor-init",
                    program.display()
                ));
            }
        }
        let globals = vec![
            option("--workspace", &ctx.workspace),
            option("--state-dir", &ctx.state_dir),
            option("--session", &ctx.session_id),
        ];
        let mut options = vec![
            option("--root-hooks", root_hooks),
            option("--kill-grace", (grace / 2).as_secs_f64().to_string()),
        ];
        if let Some(user) = user {
            options.push(option("--user", user));
        }
        if std::process::id() == 1 {
            options.push("--pid1".into());
        }
        Ok(PassCommand {
            program,
            globals,
            options,
            inherited,
        })
    }

    /// Starts `pass`.
    pub(crate) fn start(&self, pass: Pass) -> std::io::Result<Runner> {
        let pid = self.fork(pass, &[])?;
        Ok(Runner {
            pid,
            pass: Some(pass),
        })
    }

    /// Starts the recorder of a `pass` that was killed before it recorded its running hook.
    pub(crate) fn record_killed(&self, pass: Pass, note: &str) -> std::io::Result<Runner> {
        let pid = self.fork(pass, &[option("--record-killed", note)])?;
        Ok(Runner { pid, pass: None })
    }

    fn fork(&self, pass: Pass, extra: &[OsString]) -> std::io::Result<Pid> {
        let mut command = Command::new(&self.program);
        // The pass speaks as the init (its lines and warnings say `hookvisor-init:`).
        command
            .arg0("hookvisor-init")
            .args(&self.globals)
            .args(["init-pass", pass.as_str()])
            .args(&self.options)
            .args(extra);
        let inherited = self.inherited;
        spawn::fork_runner(move || {
            // A program starts with the signal state the init was given, not the init's.
            if let Err(e) = inherited.restore_in_child() {
                eprintln!("hookvisor-init: session hooks not run: {e}");
                return 1;
            }
            // Nothing the init inherited reaches the pass, nor the agent's code it starts as
            // the user (a spawn's argv), as nothing reaches CMD.
            hookvisor_core::sys::mark_cloexec_above_stdio();
            let e = command.exec();
            eprintln!(
                "hookvisor-init: session hooks not run: cannot run {}: {e}",
                self.program.display()
            );
            1
        })
    }
}

/// `--name=value` as one word: a value that starts with `-` (a session id may) is never taken
/// for an option of its own.
fn option(name: &str, value: impl AsRef<OsStr>) -> OsString {
    let mut word = OsString::from(name);
    word.push("=");
    word.push(value);
    word
}

//! Session runners: forked copies of the init that run a list of session hooks through
//! hookvisor-core and exit.
//!
//! Hooks run in a child, never in the init itself, so the executor's `waitpid(hook)` and the
//! init's `waitpid(-1)` live in different processes and can never steal each other's child.
//! The init reaps a runner like any other child; a runner that is told to stop (SIGTERM or
//! SIGINT) cancels its hook, records it as stopped, and exits.

use std::time::Duration;

use hookvisor_core::{CancelToken, Context, Credentials, Hook, SessionOptions, run_session};
use nix::sys::signal::{SigSet, Signal};
use nix::unistd::Pid;

use crate::spawn;

/// A runner the init started and has not reaped yet.
#[derive(Debug)]
pub struct Runner {
    /// Its process id.
    pub pid: Pid,
    /// The hooks it runs, to fix up their records if it dies before it can.
    pub hooks: Vec<Hook>,
}

/// Forks a runner for `hooks`. `grace` is the init's: a stopped hook gets half of it between
/// TERM and KILL, so that the runner has time to record it before the init kills the runner.
pub fn start(
    ctx: &Context,
    hooks: Vec<Hook>,
    user: Option<&Credentials>,
    grace: Duration,
) -> std::io::Result<Runner> {
    let options = SessionOptions {
        user: user.cloned(),
        cancel: None,
        echo: true,
        kill_grace: Some(grace / 2),
    };
    let pid = spawn::fork_runner(|| body(ctx, &hooks, options))?;
    Ok(Runner { pid, hooks })
}

/// The runner process: exit status 0 when every hook succeeded, 1 otherwise.
fn body(ctx: &Context, hooks: &[Hook], mut options: SessionOptions) -> i32 {
    let cancel = CancelToken::new();
    options.cancel = Some(cancel.clone());
    // The runner inherited the init's mask, every signal blocked; this thread takes the two
    // that mean "stop" and turns them into a cancel of the running hook.
    let mut stop = SigSet::empty();
    stop.add(Signal::SIGTERM);
    stop.add(Signal::SIGINT);
    std::thread::spawn(move || {
        if stop.wait().is_ok() {
            cancel.cancel();
        }
    });
    let runs = run_session(ctx, hooks, &options, |run| {
        if run.success {
            return;
        }
        let how = match (run.exit_code, run.timed_out) {
            (_, true) => "timed out".to_owned(),
            (Some(code), false) => format!("failed with exit code {code}"),
            (None, false) => "could not run".to_owned(),
        };
        let note = run
            .note
            .as_deref()
            .map_or(String::new(), |n| format!(" ({n})"));
        eprintln!(
            "hookvisor-init: session hook \"{}\" {how}{note}; log: {}",
            run.hook_name,
            run.log_path.display()
        );
    });
    if runs.len() == hooks.len() && runs.iter().all(|r| r.success) {
        0
    } else {
        1
    }
}

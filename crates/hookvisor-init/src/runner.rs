//! Session runners: forked copies of the init that run a list of session hooks through
//! hookvisor-core and exit.
//!
//! Hooks run in a child, never in the init itself, so the executor's `waitpid(hook)` and the
//! init's `waitpid(-1)` live in different processes and can never steal each other's child.
//! The init reaps a runner like any other child; a runner that is told to stop (SIGTERM or
//! SIGINT) cancels its hook, records it as stopped, and exits.
//!
//! A runner is a child subreaper: what a hook leaves running (a daemon started with `setsid`,
//! a double fork) comes back to it and is killed as soon as each attempt of the hook ends,
//! before the next attempt or the next hook starts. So nothing a root hook starts outlives it
//! as root, and nothing a user hook starts is left to interfere with its next attempt or with
//! the root hooks after it.
//!
//! After its phase-1 hooks, the runner before CMD becomes `hookvisor fire session.start` for
//! the event hooks: it first drops root for good, so those hooks, which cannot say `run_as`,
//! are read and run as the user, by the program that links their actions.

use std::os::unix::process::CommandExt as _;
use std::process::Command;
use std::time::Duration;

use hookvisor_core::session::{Attempt, RootImages, SessionHook, SessionOptions};
use hookvisor_core::{CancelToken, Context, Credentials, Hook, run_session};
use nix::sys::signal::{SigSet, Signal};
use nix::unistd::{Gid, Pid, Uid, setgid, setgroups, setuid};

use crate::spawn;
use crate::sweep;

/// How many sweeps of leftovers a runner makes before it gives up on a process that forks
/// faster than it is killed (each sweep kills everything it found).
const LEFTOVER_SWEEPS: usize = 100;

/// A runner the init started and has not reaped yet.
#[derive(Debug)]
pub(crate) struct Runner {
    /// Its process id.
    pub pid: Pid,
    /// The hooks it runs, to fix up their records if it dies before it can.
    pub hooks: Vec<Hook>,
}

/// Forks a runner for `hooks`, then, when `events`, for the `session.start` event hooks. `grace` is the init's: a stopped hook gets half of
/// it between TERM and KILL, so that the runner has time to record it before the init kills
/// the runner.
pub(crate) fn start(
    ctx: &Context,
    hooks: Vec<SessionHook>,
    events: bool,
    user: Option<&Credentials>,
    root_images: RootImages,
    grace: Duration,
) -> std::io::Result<Runner> {
    let options = SessionOptions {
        user: user.cloned(),
        cancel: None,
        echo: true,
        kill_grace: Some(grace / 2),
        root_images,
        after_attempt: Some(after_attempt),
        ..SessionOptions::default()
    };
    let pid = spawn::fork_runner(|| body(ctx, &hooks, events, options))?;
    let hooks = hooks.into_iter().map(|h| h.hook).collect();
    Ok(Runner { pid, hooks })
}

/// The runner process: exit status 0 when every hook succeeded, 1 otherwise.
fn body(ctx: &Context, hooks: &[SessionHook], events: bool, mut options: SessionOptions) -> i32 {
    let cancel = CancelToken::new();
    options.cancel = Some(cancel.clone());
    if let Err(e) = nix::sys::prctl::set_child_subreaper(true) {
        eprintln!(
            "hookvisor-init: warning: a session runner cannot become a subreaper ({e}); \
             processes a hook leaves behind may outlive it"
        );
    }
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
            // A success that could not be recorded (a full disk) still says so.
            if let Some(note) = &run.note {
                eprintln!(
                    "hookvisor-init: session hook \"{}\" succeeded; {note}",
                    run.hook_name
                );
            }
            return;
        }
        let how = how(run.exit_code, run.timed_out);
        let attempts = match run.attempts {
            0 | 1 => String::new(),
            n => format!(" after {n} attempts"),
        };
        let note = run
            .note
            .as_deref()
            .map_or(String::new(), |n| format!(" ({n})"));
        eprintln!(
            "hookvisor-init: session hook \"{}\" {how}{attempts}{note}; log: {}",
            run.hook_name,
            run.log_path.display()
        );
    });
    let passed = runs.len() == hooks.len() && runs.iter().all(|r| r.success);
    let events_passed =
        !events || cancel_requested(&options) || fire_events(ctx, options.user.as_ref());
    if passed && events_passed { 0 } else { 1 }
}

/// Puts the user's identity in this process's environment, which the event hooks inherit, as
/// phase-1 user hooks get it from the executor.
#[allow(unsafe_code)]
fn take_identity(user: &Credentials) {
    for (name, value) in [
        ("HOME", user.home.as_os_str()),
        ("USER", user.user.as_ref()),
        ("LOGNAME", user.user.as_ref()),
        ("SHELL", user.shell.as_os_str()),
    ] {
        // SAFETY: the runner's only other thread waits for signals in sigwait and never reads
        // the environment.
        unsafe { std::env::set_var(name, value) };
    }
}

/// Whether the runner was told to stop: then no event hook starts.
fn cancel_requested(options: &SessionOptions) -> bool {
    options
        .cancel
        .as_ref()
        .is_some_and(CancelToken::is_cancelled)
}

/// Drops root for good (to `user`), then becomes `hookvisor fire session.start`: the event
/// hooks need the actions this program does not link (webhooks, spawns, git), and `fire` runs
/// the awaited ones before it exits and detaches the others (EVENTS.md §1.3), so CMD waits
/// for the first alone. Returns (false) only when it cannot; root without a user to become
/// runs none of them: nothing declared them root.
fn fire_events(ctx: &Context, user: Option<&Credentials>) -> bool {
    if Uid::effective().is_root() {
        let Some(user) = user else {
            eprintln!(
                "hookvisor-init: session.start event hooks not run: they never run as root, \
                 and no --user names whom to run them as"
            );
            return false;
        };
        let groups: Vec<Gid> = user.groups.iter().map(|&g| Gid::from_raw(g)).collect();
        // Groups, gid, uid: each later step needs the privilege the earlier ones keep.
        let dropped = setgroups(&groups)
            .and_then(|()| setgid(Gid::from_raw(user.gid)))
            .and_then(|()| setuid(Uid::from_raw(user.uid)));
        if let Err(e) = dropped {
            eprintln!(
                "hookvisor-init: session.start event hooks not run: cannot become {}: {e}",
                user.user
            );
            return false;
        }
        take_identity(user);
    }
    let hookvisor = match std::env::current_exe() {
        Ok(init) => init.with_file_name("hookvisor"),
        Err(e) => {
            eprintln!("hookvisor-init: session.start event hooks not run: {e}");
            return false;
        }
    };
    let mut fire = Command::new(&hookvisor);
    fire.arg("--workspace")
        .arg(&ctx.workspace)
        .arg("--state-dir")
        .arg(&ctx.state_dir)
        .arg("--session")
        .arg(&ctx.session_id)
        .args(["fire", "session.start"]);
    // The runner took every signal blocked from the init; a program starts with none. A stop
    // that arrives from here on ends the runner, which the init then records.
    let _ = SigSet::all().thread_unblock();
    let e = fire.exec();
    eprintln!(
        "hookvisor-init: session.start event hooks not run: cannot run {}: {e} (install \
         hookvisor beside hookvisor-init)",
        hookvisor.display()
    );
    false
}

/// After each attempt of a hook: kill what it left running, and say when it is tried again.
fn after_attempt(attempt: &Attempt<'_>) {
    let name = &attempt.hook.name;
    let killed = kill_leftovers();
    if killed > 0 {
        eprintln!(
            "hookvisor-init: session hook \"{name}\" left {killed} process(es) running; killed"
        );
    }
    if let Some(wait) = attempt.retry_in {
        eprintln!(
            "hookvisor-init: session hook \"{name}\" {} (attempt {}/{}); trying again in {}s",
            how(Some(attempt.exit_code), attempt.timed_out),
            attempt.number,
            attempt.of,
            wait.as_secs_f64()
        );
    }
}

/// How a run or an attempt failed, for the init's lines.
fn how(exit_code: Option<i32>, timed_out: bool) -> String {
    match (exit_code, timed_out) {
        (_, true) => "timed out".to_owned(),
        (Some(code), false) => format!("failed with exit code {code}"),
        (None, false) => "could not run".to_owned(),
    }
}

/// Kills every descendant of this runner (what the hook that just ended left behind) and reaps
/// them; returns how many were found at first.
///
/// Never waits for a child that is still alive: a process forked between a sweep and its kill
/// is caught by the next sweep, and a tree that outlives [`LEFTOVER_SWEEPS`] sweeps is left to
/// the init's final stop rather than holding the runner forever.
fn kill_leftovers() -> usize {
    let mut found = None;
    for _ in 0..LEFTOVER_SWEEPS {
        let signalled = sweep::signal_all(libc::SIGKILL);
        found.get_or_insert(signalled);
        // Reap what is dead already: the killed, and orphans of the killed that came to us.
        while let Ok(Some(_)) = hookvisor_core::sys::reap_any() {}
        if signalled == 0 {
            break;
        }
    }
    found.unwrap_or(0)
}

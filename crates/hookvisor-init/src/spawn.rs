//! Starting the init's two kinds of children: CMD (exec'd, with the process state a fresh
//! program expects) and session runners (forked copies of the init that run hooks and exit).
//!
//! Code between `fork` and `exec` may only call async-signal-safe functions: the system calls
//! are hookvisor-core's `sys` ones; the `unsafe` left here is registering that code and `fork`.

#![allow(unsafe_code)]

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::process::CommandExt;
use std::process::Command;

use hookvisor_core::{Credentials, sys};
use nix::unistd::{ForkResult, Gid, Pid, Uid, setgid, setgroups, setpgid, setuid};

use crate::signals::Inherited;

/// Starts CMD in its own process group, in the foreground of the terminal when stdin is one,
/// as `user` when given, with the signal state the init inherited and no descriptor but 0-2.
///
/// `env` is added to the init's environment (the user's HOME, USER, LOGNAME, SHELL and the
/// resolved hookvisor context). A failure to exec is returned here, not seen as an exit.
pub(crate) fn command(
    cmd: &[OsString],
    user: Option<&Credentials>,
    env: &[(OsString, OsString)],
    inherited: Inherited,
) -> io::Result<Pid> {
    let (program, args) = cmd
        .split_first()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "empty command"))?;
    let mut command = Command::new(program);
    command.args(args).envs(env.iter().map(|(k, v)| (k, v)));
    // Everything the child needs is computed here, before fork: nothing below allocates.
    let ids = user.map(|c| {
        (
            Uid::from_raw(c.uid),
            Gid::from_raw(c.gid),
            c.groups
                .iter()
                .map(|&g| Gid::from_raw(g))
                .collect::<Vec<_>>(),
        )
    });
    // SAFETY: the closure runs in the forked child before exec and calls only async-signal-safe
    // functions (hookvisor-core's `sys` ones and `Inherited::restore_in_child`) on data prepared
    // before the fork; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            // Its own group, so a terminal's job control and --kill-group address it alone.
            setpgid(Pid::from_raw(0), Pid::from_raw(0))?;
            // Signals are still blocked here, so the SIGTTOU a background group would get for
            // this is not delivered.
            sys::take_terminal(false)?;
            if let Some((uid, gid, groups)) = &ids {
                // Groups, gid, uid: each later step needs the privilege the earlier ones keep.
                setgroups(groups)?;
                setgid(*gid)?;
                setuid(*uid)?;
            }
            // Nothing the init inherited leaks into CMD.
            sys::mark_cloexec_above_stdio();
            inherited.restore_in_child()
        });
    }
    let child = command.spawn()?;
    // The child is reaped by the init's one waitpid(-1) loop; the std handle never waits.
    Ok(Pid::from_raw(child.id() as i32))
}

/// Forks a copy of the init that runs `body` and exits with the status it returns.
///
/// The init is single-threaded, so the copy may do anything a program may do, threads and
/// allocation included. The caller reaps it like any other child.
pub(crate) fn fork_runner(body: impl FnOnce() -> i32) -> io::Result<Pid> {
    // Buffered output written before the fork would otherwise be flushed twice.
    io::stdout().flush()?;
    // SAFETY: the init process is single-threaded (no thread is ever started in it), so the
    // child gets a consistent copy of every lock and allocator state.
    match unsafe { nix::unistd::fork() }? {
        ForkResult::Parent { child } => Ok(child),
        ForkResult::Child => {
            let code = body();
            let _ = io::stdout().flush();
            let _ = io::stderr().flush();
            // SAFETY: _exit ends the process without running the parent's atexit handlers or
            // destructors a second time.
            unsafe { libc::_exit(code) }
        }
    }
}

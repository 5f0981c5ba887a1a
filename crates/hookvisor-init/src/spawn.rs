//! Starting the init's two kinds of children: CMD (exec'd, with the process state a fresh
//! program expects) and session runners (forked copies of the init that run hooks and exit).
//!
//! This is the only module with `unsafe` beyond the signal calls: code between `fork` and
//! `exec` may only call async-signal-safe functions, and each block says why it holds.

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::process::CommandExt;
use std::process::Command;

use hookvisor_core::Credentials;
use nix::unistd::{ForkResult, Pid};

use crate::signals::Inherited;

/// `CLOSE_RANGE_CLOEXEC` from linux/close_range.h; libc does not export it on every target.
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

/// Starts CMD in its own process group, in the foreground of the terminal when stdin is one,
/// as `user` when given, with the signal state the init inherited and no descriptor but 0-2.
///
/// `env` is added to the init's environment (the user's HOME, USER, LOGNAME, SHELL and the
/// resolved hookvisor context). A failure to exec is returned here, not seen as an exit.
pub fn command(
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
            c.uid as libc::uid_t,
            c.gid as libc::gid_t,
            c.groups
                .iter()
                .map(|&g| g as libc::gid_t)
                .collect::<Vec<_>>(),
        )
    });
    // SAFETY: the closure runs in the forked child before exec and calls only async-signal-safe
    // functions (setpgid, isatty, tcsetpgrp, setgroups, setgid, setuid, signal, sigprocmask,
    // syscall/fcntl, getrlimit) on data prepared before the fork; it allocates nothing.
    unsafe {
        command.pre_exec(move || {
            // Its own group, so a terminal's job control and --kill-group address it alone.
            if libc::setpgid(0, 0) != 0 {
                return Err(io::Error::last_os_error());
            }
            // Signals are still blocked here, so the SIGTTOU a background group would get for
            // this is not delivered.
            if libc::isatty(0) == 1 {
                libc::tcsetpgrp(0, libc::getpid());
            }
            if let Some((uid, gid, groups)) = &ids
                && (libc::setgroups(groups.len(), groups.as_ptr()) != 0
                    || libc::setgid(*gid) != 0
                    || libc::setuid(*uid) != 0)
            {
                return Err(io::Error::last_os_error());
            }
            close_inherited_descriptors();
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
pub fn fork_runner(body: impl FnOnce() -> i32) -> io::Result<Pid> {
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

/// Marks every descriptor above 2 close-on-exec, so nothing the init inherited leaks into CMD.
///
/// Close-on-exec rather than close: std's own exec-error pipe must survive until exec.
fn close_inherited_descriptors() {
    // SAFETY: close_range only changes descriptor flags; async-signal-safe as a raw syscall.
    let done = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    } == 0;
    if done {
        return;
    }
    // Kernels before 5.11: walk every possible descriptor.
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into `limit`; fcntl on a closed descriptor fails harmlessly.
    unsafe {
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(1 << 20) as libc::c_int
        } else {
            65536
        };
        for fd in 3..max {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

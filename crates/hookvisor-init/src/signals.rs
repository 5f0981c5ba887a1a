//! Signals, the tini way: every catchable signal stays blocked in the init and is taken with
//! `sigtimedwait`, so there is no handler, no async-signal-safety to think about, and no signal
//! is lost between two waits. Children get back the mask and dispositions the init started with.
//!
//! Raw signal numbers (not nix's `Signal`) are used throughout because real-time signals must be
//! forwarded too and nix's enum has no room for them.

#![allow(unsafe_code)]

use std::io;
use std::mem::MaybeUninit;
use std::time::Duration;

use libc::c_int;
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};

/// Signals the kernel raises for a fault of the init itself; blocking them would hide the fault,
/// so they keep their default action and are not forwarded (as in tini).
const SYNCHRONOUS: [Signal; 7] = [
    Signal::SIGFPE,
    Signal::SIGILL,
    Signal::SIGSEGV,
    Signal::SIGBUS,
    Signal::SIGABRT,
    Signal::SIGTRAP,
    Signal::SIGSYS,
];

/// The two real-time signals the C library keeps for its threads (SIGCANCEL, SIGSETXID).
///
/// glibc's `posix_spawn` leaves them ignored in the programs it starts, and its `signal()`
/// refuses to touch them, so the init usually starts with them ignored by accident; CMD gets
/// them back at their default through the raw system call.
const RESERVED: [c_int; 2] = [32, 33];

/// The state the init found its signals in, to hand back to CMD.
///
/// `exec` resets every caught signal to its default and keeps the ignored ones, and the init
/// changes no disposition itself (it skips std's runtime, which would ignore SIGPIPE: see
/// `main.rs`). What a child has to put back is the mask, the reserved pair, and SIGPIPE, which
/// std's `Command` sets to its default in every child it starts.
#[derive(Clone, Copy)]
pub(crate) struct Inherited {
    /// The mask the init was started with.
    mask: SigSet,
    /// Whether SIGPIPE was ignored when the init started.
    pipe_ignored: bool,
}

/// The set the init blocks and waits on.
pub(crate) struct Blocked {
    set: SigSet,
}

/// Blocks every catchable, non-synchronous signal and returns what was there before.
///
/// Must run before any child exists, so that no signal arrives while nobody waits for it.
pub(crate) fn block_all() -> io::Result<(Blocked, Inherited)> {
    let mut set = SigSet::all();
    for sig in SYNCHRONOUS {
        set.remove(sig);
    }
    let mut old = SigSet::empty();
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&set), Some(&mut old))?;
    let mut pipe = MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: a null new action only queries; `pipe` is valid writable memory, and zeroed
    // memory is a valid sigaction if the query fails.
    let pipe_ignored = unsafe {
        libc::sigaction(libc::SIGPIPE, std::ptr::null(), pipe.as_mut_ptr()) == 0
            && pipe.assume_init().sa_sigaction == libc::SIG_IGN
    };
    Ok((
        Blocked { set },
        Inherited {
            mask: old,
            pipe_ignored,
        },
    ))
}

impl Blocked {
    /// Waits for one of the blocked signals, at most `timeout` (`None`: as long as it takes).
    ///
    /// Returns `None` when the timeout passed or the wait was interrupted.
    pub(crate) fn wait(&self, timeout: Option<Duration>) -> Option<c_int> {
        let sig = match timeout {
            Some(timeout) => {
                let ts = libc::timespec {
                    tv_sec: timeout.as_secs().min(i64::MAX as u64) as libc::time_t,
                    tv_nsec: timeout.subsec_nanos() as libc::c_long,
                };
                // SAFETY: `self.set` and `ts` are valid for the call; a null siginfo is allowed.
                unsafe { libc::sigtimedwait(self.set.as_ref(), std::ptr::null_mut(), &ts) }
            }
            // SAFETY: as above.
            None => unsafe { libc::sigwaitinfo(self.set.as_ref(), std::ptr::null_mut()) },
        };
        (sig > 0).then_some(sig)
    }
}

impl Inherited {
    /// Gives the calling process the mask and dispositions the init started with.
    ///
    /// Meant for a freshly forked child before `exec`: it only calls async-signal-safe functions
    /// and allocates nothing.
    pub(crate) fn restore_in_child(&self) -> io::Result<()> {
        // Every other disposition is still the one the init was given, so it is left alone
        // rather than set again one system call per signal on CMD's start-up path.
        if self.pipe_ignored {
            // SAFETY: signal() is async-signal-safe.
            unsafe { libc::signal(libc::SIGPIPE, libc::SIG_IGN) };
        }
        for sig in RESERVED {
            hookvisor_core::sys::reset_signal(sig);
        }
        // sigprocmask is async-signal-safe.
        Ok(sigprocmask(
            SigmaskHow::SIG_SETMASK,
            Some(&self.mask),
            None,
        )?)
    }
}

/// Sends signal `sig` to `pid` (a negative pid is a process group, -1 everyone we may signal).
pub(crate) fn send(pid: i32, sig: c_int) -> io::Result<()> {
    hookvisor_core::sys::kill(pid, sig)
}

/// True for the signals that ask the container to stop.
pub(crate) fn is_shutdown(sig: c_int) -> bool {
    sig == libc::SIGTERM || sig == libc::SIGINT
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_term_and_int_stop_the_container() {
        for (sig, stops) in [
            (libc::SIGTERM, true),
            (libc::SIGINT, true),
            (libc::SIGHUP, false),
            (libc::SIGQUIT, false),
            (libc::SIGUSR1, false),
        ] {
            assert_eq!(is_shutdown(sig), stops, "signal {sig}");
        }
    }
}

//! Watching a started child to its end: one `poll` over its output, its exit, the clock and the
//! cancel token, and the signals to its process group.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::process::ExitStatus;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::Pid;

use super::capture::Stream;
use super::output::Sink;
use super::{CancelToken, Ending, RunOptions, TICK};
use crate::sys;

/// Size of the one read buffer a run uses, whatever the hook prints. A pipe holds 64 KiB, so a
/// full one takes a few reads; a buffer of that size cost a hook that prints nothing 16 page
/// faults to zero it, about 70 µs of a `fire` around the hook `true` (BENCHMARKS.md, case 7).
const READ_BUFFER: usize = 8 * 1024;
/// How long output is still read after the child is gone and its group killed.
const DRAIN: Duration = Duration::from_millis(200);

/// The read ends of the output pipes, each with its stream, at fixed positions; a reader becomes
/// `None` at its EOF (or when never used: the merged pipe takes only the first).
pub(super) type Readers = [Option<(OwnedFd, Stream)>; 2];

/// Reaps the child `pid` (once), giving its exit status.
pub(super) fn reap(pid: Pid) -> io::Result<ExitStatus> {
    sys::wait_pid(pid.as_raw())
}

/// True when the child has exited; it stays a zombie, so its pid (and the group id it gave its
/// group) cannot be reused before we kill the group and reap it.
fn has_exited(pid: Pid) -> io::Result<bool> {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    loop {
        match waitid(Id::Pid(pid), flags) {
            Ok(WaitStatus::StillAlive) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Sends a signal to the child's whole group; a group already gone is not an error.
fn signal_group(pid: Pid, signal: Signal) {
    let _ = killpg(pid, signal);
}

/// The loop of a run: read output, watch the child, the clock and the cancel token, until the
/// child is reaped and its output drained. `readers` are the read ends of the output pipes, each
/// with the stream it carries: the merged pipe alone, or stdout's and stderr's.
pub(super) fn supervise(
    pid: Pid,
    mut readers: Readers,
    sink: &mut Sink,
    timeout: Duration,
    options: &RunOptions,
) -> io::Result<(ExitStatus, Ending)> {
    // `None` on kernels without pidfd (< 5.3); the loop then checks every [`TICK`].
    let pidfd = sys::pidfd_open(pid.as_raw());
    let cancel = options.cancel.as_ref();
    let cancel_fd = cancel.and_then(CancelToken::wake_fd);
    let deadline = Instant::now().checked_add(timeout);

    let mut buffer = [0u8; READ_BUFFER];
    let mut ending = Ending::Exited;
    let mut kill_at: Option<Instant> = None;
    let mut stopping = false;
    let mut status: Option<(ExitStatus, Instant)> = None;

    loop {
        let now = Instant::now();
        if status.is_none() {
            let why = if cancel.is_some_and(CancelToken::is_cancelled) {
                Some(Ending::Cancelled)
            } else if deadline.is_some_and(|d| now >= d) {
                Some(Ending::TimedOut)
            } else {
                None
            };
            if let Some(why) = why
                && !stopping
            {
                stopping = true;
                ending = why;
                signal_group(pid, Signal::SIGTERM);
                kill_at = Some(now + options.kill_grace);
            }
            if kill_at.is_some_and(|at| now >= at) {
                signal_group(pid, Signal::SIGKILL);
                kill_at = None;
            }
            if has_exited(pid)? {
                // Whatever the hook left running goes with it.
                signal_group(pid, Signal::SIGKILL);
                status = Some((reap(pid)?, now));
            }
        }
        if let Some((exit, exited_at)) = status
            && (readers.iter().all(Option::is_none) || now >= exited_at + DRAIN)
        {
            return Ok((exit, ending));
        }

        let mut wake: Option<Instant> = None;
        let mut earliest = |at: Instant| wake = Some(wake.map_or(at, |w| w.min(at)));
        match status {
            Some((_, exited_at)) => earliest(exited_at + DRAIN),
            None => {
                if let Some(at) = kill_at {
                    earliest(at);
                }
                if let Some(d) = deadline
                    && !stopping
                {
                    earliest(d);
                }
                if pidfd.is_none() || (cancel.is_some() && cancel_fd.is_none()) {
                    earliest(now + TICK);
                }
            }
        }

        let mut fds = Vec::with_capacity(5);
        // Which reader each of the first poll slots is; every reader fits, there are two.
        let mut polled: [Option<usize>; 2] = [None; 2];
        for (i, (fd, _)) in readers
            .iter()
            .enumerate()
            .filter_map(|(i, r)| r.as_ref().map(|r| (i, r)))
        {
            if let Some(slot) = polled.get_mut(fds.len()) {
                *slot = Some(i);
                fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
            }
        }
        // The pidfd only wakes the loop; the exit itself is checked at the top of each turn.
        if let (Some(fd), None) = (&pidfd, status) {
            fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
        }
        if let Some(fd) = cancel_fd
            && status.is_none()
            && !stopping
        {
            fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
            // The token's signals, when it has them; the check at the top of the turn reads it.
            if let Some(signals) = cancel.and_then(CancelToken::signal_fd) {
                fds.push(PollFd::new(signals.as_fd(), PollFlags::POLLIN));
            }
        }
        let timeout = wake.map_or(PollTimeout::NONE, |at| {
            // Round up, so the loop never spins through the last partial millisecond.
            let ms = at.saturating_duration_since(now).as_micros().div_ceil(1000);
            PollTimeout::from(ms.min(u128::from(u16::MAX)) as u16)
        });
        match poll(&mut fds, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        let mut ready = [false; 2];
        for (slot, fd) in fds.iter().enumerate() {
            if let Some(Some(i)) = polled.get(slot)
                && let Some(flag) = ready.get_mut(*i)
            {
                *flag = fd.revents().is_some_and(|r| {
                    r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
                });
            }
        }
        drop(fds);

        // One read per ready pipe and turn: neither stream can starve the other.
        for (reader, _) in readers.iter_mut().zip(ready).filter(|(_, ready)| *ready) {
            let Some((fd, stream)) = reader else {
                continue;
            };
            match nix::unistd::read(&*fd, &mut buffer) {
                Ok(0) => *reader = None,
                Ok(n) => sink.output_from(*stream, buffer.get(..n).unwrap_or_default()),
                Err(Errno::EAGAIN | Errno::EINTR) => {}
                Err(_) => *reader = None,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::*;
    use crate::event::HookKind;
    use crate::exec::tests::{fixture, run};
    use crate::exec::{CancelToken, RunOptions, run_hook};

    /// Live (not zombie) processes whose process group is `pgid`.
    fn live_members(pgid: i32) -> Vec<String> {
        crate::procfs::pids()
            .into_iter()
            .filter_map(|pid| Some((pid, crate::procfs::stat(pid)?)))
            .filter(|(_, stat)| stat.pgrp() == Some(pgid) && stat.state() != Some('Z'))
            .map(|(pid, stat)| format!("{pid} {stat:?}"))
            .collect()
    }

    /// Polls until no live process of the group is left, or fails after a deadline.
    fn assert_group_gone(pgid: i32) {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let members = live_members(pgid);
            if members.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "process group {pgid} still has live members: {members:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn first_line_pid(text: &str) -> i32 {
        text.lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid on the first line of {text:?}"))
    }

    #[test]
    fn timeout_kills_the_whole_group_and_returns_promptly() {
        let f = fixture();
        let mut hook = f.hook("slow", HookKind::File, "echo $$\nsleep 1000 &\nsleep 1000");
        hook.timeout = Duration::from_secs(1);
        let options = RunOptions {
            kill_grace: Duration::from_millis(500),
            ..RunOptions::default()
        };
        let started = Instant::now();
        let out = run_hook(&f.ctx, &hook, &[], &options).unwrap();
        let elapsed = started.elapsed();
        // Without the kill the run would take the sleep's 1000 s; the bound leaves a loaded
        // machine room.
        assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
        assert_eq!(out.exit_code, 124);
        assert!(out.timed_out && !out.success());
        let log = f.log("slow");
        assert!(log.ends_with("[hook timed out after 1s]\n"), "{log:?}");
        assert_group_gone(first_line_pid(&log));
    }

    #[test]
    fn a_group_ignoring_term_is_killed_after_the_grace() {
        let f = fixture();
        let mut hook = f.hook(
            "stubborn",
            HookKind::Session,
            "trap '' TERM\necho $$\nsleep 1000 &\nsleep 1000",
        );
        // A second: `sh` must have set its trap before the TERM comes, even on a loaded machine.
        hook.timeout = Duration::from_secs(1);
        let options = RunOptions {
            kill_grace: Duration::from_millis(500),
            ..RunOptions::default()
        };
        let started = Instant::now();
        let out = run_hook(&f.ctx, &hook, &[], &options).unwrap();
        let elapsed = started.elapsed();
        assert!(
            elapsed >= Duration::from_millis(1500),
            "SIGKILL came before the grace: {elapsed:?}"
        );
        assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
        assert_eq!(out.exit_code, 124);
        assert!(f.log("stubborn").contains("[hook timed out after 1s]"));
        assert_group_gone(first_line_pid(&out.tail));
    }

    #[test]
    fn leftovers_are_killed_when_the_hook_exits() {
        let f = fixture();
        let hook = f.hook("bg", HookKind::Session, "echo $$\nsleep 1000 &\nexit 3");
        let started = Instant::now();
        let out = run(&f, &hook);
        assert!(started.elapsed() < Duration::from_secs(10));
        assert_eq!(out.exit_code, 3);
        assert_group_gone(first_line_pid(&out.tail));
    }

    #[test]
    fn an_escaped_descendant_holding_the_pipe_is_killed_and_does_not_hang_the_run() {
        let f = fixture();
        let pid_file = f.ctx.workspace.join("daemon.pid");
        let hook = f.hook(
            "escape",
            HookKind::Session,
            "setsid sh -c 'echo $$ > daemon.pid.tmp; mv daemon.pid.tmp daemon.pid; exec sleep 1000' &\n\
             while [ ! -e daemon.pid ]; do :; done\necho done",
        );
        let started = Instant::now();
        let out = run(&f, &hook);
        let elapsed = started.elapsed();
        let daemon: i32 = fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Killed before the run returned; it may take a moment to finish dying, and stays a
        // zombie until its new parent reaps it.
        let state = |pid: i32| crate::procfs::stat(pid).and_then(|stat| stat.state());
        let deadline = Instant::now() + Duration::from_secs(5);
        while !matches!(state(daemon), None | Some('Z')) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let last = state(daemon);
        let _ = nix::sys::signal::kill(Pid::from_raw(daemon), Signal::SIGKILL);
        assert!(matches!(last, None | Some('Z')), "daemon state {last:?}");
        assert!(out.success(), "{out:?}");
        assert_eq!(
            out.tail,
            "done\n[hookvisor: killed 1 process(es) the hook left running]\n"
        );
        assert!(elapsed < Duration::from_secs(10), "took {elapsed:?}");
    }

    #[test]
    fn cancel_from_another_thread_stops_the_run_promptly() {
        let f = fixture();
        let hook = f.hook(
            "cancel-me",
            HookKind::File,
            "echo $$\n: > started\nsleep 1000 &\nsleep 1000",
        );
        let token = CancelToken::new();
        let started_file = f.ctx.workspace.join("started");
        let canceller = {
            let token = token.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(10);
                while !started_file.exists() {
                    assert!(Instant::now() < deadline, "hook never started");
                    std::thread::sleep(Duration::from_millis(5));
                }
                token.cancel();
                Instant::now()
            })
        };
        let options = RunOptions {
            cancel: Some(token.clone()),
            ..RunOptions::default()
        };
        let out = run_hook(&f.ctx, &hook, &[], &options).unwrap();
        let returned = Instant::now();
        let cancelled_at = canceller.join().unwrap();
        assert!(out.cancelled && !out.timed_out && !out.success(), "{out:?}");
        assert!(
            returned - cancelled_at < Duration::from_secs(2),
            "noticed the cancel after {:?}",
            returned - cancelled_at
        );
        assert!(f.log("cancel-me").ends_with("[hook cancelled]\n"));
        assert_group_gone(first_line_pid(&out.tail));

        // A cancelled token keeps later runs from starting at all.
        let marker = f.hook("never", HookKind::File, ": > ran");
        let out = run_hook(&f.ctx, &marker, &[], &options).unwrap();
        assert!(out.cancelled);
        assert!(!f.ctx.workspace.join("ran").exists());
    }
}

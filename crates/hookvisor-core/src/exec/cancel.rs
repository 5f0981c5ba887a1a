//! Stopping runs from elsewhere: the [`CancelToken`], the pipe that wakes a waiting `poll`, and
//! the signals that cancel a one-shot command's runs ([`CancelToken::on_signals`]).

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};

use super::TICK;

/// Stops a running hook from another thread (or, across `fork`, another process).
///
/// Cancelling is permanent: a cancelled token stops every run it is given to, including runs
/// that start later, which then do not start at all.
#[derive(Debug, Clone, Default)]
pub struct CancelToken {
    inner: Arc<CancelInner>,
}

#[derive(Debug)]
struct CancelInner {
    cancelled: AtomicBool,
    /// A pipe that becomes readable on cancel, so a run waiting in `poll` wakes at once. `None`
    /// when no descriptor was available; runs then re-check the flag every [`TICK`].
    wake: Option<(OwnedFd, OwnedFd)>,
    /// The blocked signals that cancel the token ([`CancelToken::on_signals`]), read when the
    /// flag is checked; a run's `poll` waits on it beside the pipe.
    signals: Option<SignalFd>,
}

impl Default for CancelInner {
    fn default() -> Self {
        CancelInner {
            cancelled: AtomicBool::new(false),
            wake: nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).ok(),
            signals: None,
        }
    }
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Stops every run using this token: its process group gets SIGTERM, then SIGKILL after the
    /// grace.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        if let Some((_, write)) = &self.inner.wake {
            // The pipe is never drained, so one byte keeps it readable for good; a full pipe
            // (EAGAIN) is as readable as one byte, so the result does not matter.
            let _ = nix::unistd::write(write, b"x");
        }
    }

    /// A token cancelled by any of `signals` as well: they are blocked in the calling thread
    /// and read from a `signalfd` whenever the token is checked, so no thread waits for them.
    ///
    /// Call it before any thread starts (threads inherit the mask; one that does not block
    /// them would take the signal with its default action). The executor empties the mask of
    /// every hook it starts. Fails when the signals cannot be blocked or the descriptor made;
    /// the mask is then as it was.
    pub fn on_signals(signals: &[Signal]) -> nix::Result<CancelToken> {
        let mut set = SigSet::empty();
        for signal in signals {
            set.add(*signal);
        }
        let mut old = SigSet::empty();
        set.thread_swap_mask(nix::sys::signal::SigmaskHow::SIG_BLOCK)
            .map(|previous| old = previous)?;
        match SignalFd::with_flags(&set, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC) {
            Ok(fd) => Ok(CancelToken {
                inner: Arc::new(CancelInner {
                    signals: Some(fd),
                    ..CancelInner::default()
                }),
            }),
            Err(e) => {
                let _ = old.thread_set_mask();
                Err(e)
            }
        }
    }

    /// True once [`CancelToken::cancel`] was called or one of the token's signals came.
    pub fn is_cancelled(&self) -> bool {
        if self.inner.cancelled.load(Ordering::SeqCst) {
            return true;
        }
        // A pending signal is taken (it is blocked, so nothing else would) and cancels for good.
        if let Some(fd) = &self.inner.signals
            && let Ok(Some(_)) = fd.read_signal()
        {
            self.cancel();
            return true;
        }
        false
    }

    /// Waits until the token is cancelled or `timeout` has passed; true when it was cancelled.
    /// Wakes at once on a cancel (the token's pipe), without polling.
    pub fn wait_for(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if self.is_cancelled() {
                return true;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            // Round up, so the loop never spins through the last partial millisecond.
            let ms = left.as_micros().div_ceil(1000).min(u128::from(u16::MAX)) as u16;
            match self.wake_fd() {
                Some(fd) => {
                    let mut fds = vec![PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
                    if let Some(signals) = self.signal_fd() {
                        fds.push(PollFd::new(signals.as_fd(), PollFlags::POLLIN));
                    }
                    let _ = poll(&mut fds, PollTimeout::from(ms));
                }
                // No pipe could be made: look every tick.
                None => std::thread::sleep(left.min(TICK)),
            }
        }
    }

    /// The read end of the token's pipe: readable once it is cancelled (also polled by the
    /// callback waits, beside their own pipe).
    pub fn wake_fd(&self) -> Option<&OwnedFd> {
        self.inner.wake.as_ref().map(|(read, _)| read)
    }

    /// The `signalfd` of [`CancelToken::on_signals`]: readable when one of them is pending.
    pub fn signal_fd(&self) -> Option<&SignalFd> {
        self.inner.signals.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_of_the_token_cancels_it_and_wakes_wait_for() {
        // Sent to this test's thread alone (glibc's raise is a tgkill to the caller), where the
        // token blocks it; SIGUSR2, which nothing else in the tests uses.
        let token = CancelToken::on_signals(&[Signal::SIGUSR2]).unwrap();
        assert!(!token.is_cancelled());
        assert!(!token.wait_for(Duration::from_millis(5)));
        nix::sys::signal::raise(Signal::SIGUSR2).unwrap();
        let started = Instant::now();
        assert!(token.wait_for(Duration::from_secs(60)));
        assert!(started.elapsed() < Duration::from_secs(30));
        assert!(token.is_cancelled(), "and for good");
        assert!(token.clone().is_cancelled(), "in every clone");
    }

    #[test]
    fn wait_for_times_out_on_a_token_nobody_cancels() {
        let token = CancelToken::new();
        let started = Instant::now();
        assert!(!token.wait_for(Duration::from_millis(30)));
        assert!(started.elapsed() >= Duration::from_millis(30));
        assert!(!token.is_cancelled());
    }

    #[test]
    fn a_cancel_from_another_thread_wakes_wait_for_and_lasts() {
        let token = CancelToken::new();
        let canceller = {
            let token = token.clone();
            std::thread::spawn(move || token.cancel())
        };
        let started = Instant::now();
        // Far longer than the test may take: only the cancel can end the wait in time.
        assert!(token.wait_for(Duration::from_secs(60)));
        assert!(started.elapsed() < Duration::from_secs(30));
        canceller.join().unwrap();
        assert!(token.is_cancelled());
        // Cancelling is permanent, and a second cancel is harmless.
        token.cancel();
        assert!(token.wait_for(Duration::ZERO));
    }
}

//! Stopping runs from elsewhere: the [`CancelToken`] and the pipe that wakes a waiting `poll`.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

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
}

impl Default for CancelInner {
    fn default() -> Self {
        CancelInner {
            cancelled: AtomicBool::new(false),
            wake: nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).ok(),
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

    /// True once [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
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
                    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
                    let _ = poll(&mut fds, PollTimeout::from(ms));
                }
                // No pipe could be made: look every tick.
                None => std::thread::sleep(left.min(TICK)),
            }
        }
    }

    pub(super) fn wake_fd(&self) -> Option<&OwnedFd> {
        self.inner.wake.as_ref().map(|(read, _)| read)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

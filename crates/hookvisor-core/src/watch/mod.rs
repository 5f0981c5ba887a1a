//! Every file watch of hookvisor, on nix's inotify: named files and directory trees for a
//! server ([`FileWatch`]), a workspace's dirty set kept warm ([`ChangeWatcher`]) and the paths
//! changed since a token for git's fsmonitor hook ([`ChangeFeed`]), and the
//! closes of one open file that a waiter for `status.json`'s lock sleeps on (`Closes`).
//!
//! The rules every watch here keeps:
//!
//! 1. **Changes only.** The kernel is asked for creations, deletions, writes, attribute changes
//!    and moves, never for opens or reads (`notify` always asks for `IN_OPEN`): the workspace
//!    root is watched, and every listing of it (each `git status`) would otherwise be an event.
//!    That made each `git status` of a 100k-file repository 10 % slower while the server
//!    watched (BENCHMARKS.md, case 2).
//! 2. **A lost queue is a change.** `IN_Q_OVERFLOW` means events were dropped: the watcher
//!    says "anything may have changed" (a full scan, a new discovery), never "nothing".
//! 3. **Bounded.** Events are read a buffer at a time and folded into bounded state
//!    (`changes::MAX_TOUCHED`); nothing grows with the number of events.

#![forbid(unsafe_code)]

mod changes;
mod feed;
mod files;

use std::io;
use std::os::fd::AsFd;
use std::path::Path;
use std::time::Duration;

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};

pub use changes::{ChangeWatcher, MAX_TOUCHED, ScanKind};
pub use feed::{ChangeFeed, FsmonitorAnswer, MAX_JOURNAL, MAX_JOURNAL_BYTES};
pub use files::{FileWatch, FileWatchError, WatchedFile};

/// `IN_EXCL_UNLINK` (Linux 2.6.36), which nix does not name: no events for files already
/// unlinked.
const IN_EXCL_UNLINK: AddWatchFlags = AddWatchFlags::from_bits_retain(libc::IN_EXCL_UNLINK);

/// A new inotify instance, closed on exec; `nonblocking` for one read from a `poll` loop.
fn instance(nonblocking: bool) -> io::Result<Inotify> {
    let mut flags = InitFlags::IN_CLOEXEC;
    if nonblocking {
        flags |= InitFlags::IN_NONBLOCK;
    }
    Ok(Inotify::init(flags)?)
}

/// Waits until `fd` is readable or `timeout` (`None`: forever) has passed; an interrupted wait
/// ends early.
fn wait_readable(fd: impl AsFd, timeout: Option<Duration>) -> io::Result<()> {
    let timeout = timeout.map_or(PollTimeout::NONE, |t| {
        PollTimeout::try_from(t).unwrap_or(PollTimeout::MAX)
    });
    match poll(&mut [PollFd::new(fd.as_fd(), PollFlags::POLLIN)], timeout) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// Every close of one open file, so that a waiter for a lock taken on it wakes when a holder
/// closes it (a writer unlocks by closing).
#[derive(Debug)]
pub(crate) struct Closes(Inotify);

impl Closes {
    /// Watches the closes of the file open as `fd`; `None` without inotify (or /proc).
    pub(crate) fn of(fd: &impl std::os::fd::AsRawFd) -> Option<Closes> {
        let inotify = instance(true).ok()?;
        // Through /proc, the watch is on the inode we opened, whatever the path names now.
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        inotify
            .add_watch(
                Path::new(&path),
                AddWatchFlags::IN_CLOSE_WRITE | AddWatchFlags::IN_CLOSE_NOWRITE,
            )
            .ok()?;
        Some(Closes(inotify))
    }

    /// Waits until a close is seen or `pause` has passed, and drops the events.
    pub(crate) fn wait(&self, pause: Duration) {
        // An error only ends the pause early.
        let _ = wait_readable(&self.0, Some(pause));
        while self.0.read_events().is_ok_and(|events| !events.is_empty()) {}
    }
}

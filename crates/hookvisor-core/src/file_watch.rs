//! A few named files, which may not exist yet, watched for changes: what a server watches of
//! the other tools' hook files it reads in place ([`crate::import::source_files`]).
//!
//! 1. **Through their directories.** Each file is watched through the nearest directory of its
//!    path that exists, no higher than its [`WatchedFile::root`] (the workspace, the home
//!    directory): editors replace files by renaming, which a watch of the file itself would not
//!    survive, and a file that does not exist yet is seen when it, or a directory on its way,
//!    is created. A file whose root does not exist is not watched.
//! 2. **Changes only.** The kernel is asked for creations, deletions, writes, attribute changes
//!    and moves, never for opens or reads (as in `change_watch`, and unlike `notify`): the
//!    workspace root is one of these directories, and every listing of it (each `git status`)
//!    would otherwise be an event.
//! 3. **Called after following.** An event on a file's path or on a directory on its way (or a
//!    lost queue) moves the watches first (a directory made or removed on the way), then calls
//!    `changed` once for the batch: whatever is written after the call raises another event.
//!    Events on other names of those directories are dropped at once.
//! 4. **Dropping** the [`FileWatch`] ends its thread and closes the instance. A symbolic link is
//!    followed when its directory is watched, but an edit of the file it names is not seen.

#![forbid(unsafe_code)]

use std::io::{self, PipeReader, PipeWriter};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use inotify::{EventMask, Inotify, WatchDescriptor, WatchMask};
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

/// One file to watch, and the directory above which its watch never goes (rule 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedFile {
    /// The file, absolute.
    pub path: PathBuf,
    /// A directory above it (the workspace, the home directory).
    pub root: PathBuf,
}

/// Why watching could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch other tools' hook files: {0}")]
pub struct FileWatchError(#[from] io::Error);

/// The files of [`FileWatch::start`] under watch, until dropped (the module's rules).
#[derive(Debug)]
pub struct FileWatch {
    /// Closed on drop: its end wakes the thread to stop.
    stop: Option<PipeWriter>,
    thread: Option<JoinHandle<()>>,
}

impl FileWatch {
    /// Watches `files`, calling `changed` on the watch's own thread after each batch of events
    /// that may have changed one of them (rule 3).
    pub fn start(
        files: Vec<WatchedFile>,
        changed: impl FnMut() + Send + 'static,
    ) -> Result<FileWatch, FileWatchError> {
        let inotify = Inotify::init()?;
        let (wake, stop) = io::pipe()?;
        let mut reader = Reader {
            inotify,
            files,
            watched: Vec::new(),
        };
        // The first watches are in place when `start` returns: nothing written after it is lost.
        reader.follow();
        let thread = std::thread::Builder::new()
            .name("hookvisor-file-watch".into())
            .spawn(move || reader.run(&wake, changed))?;
        Ok(FileWatch {
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for FileWatch {
    fn drop(&mut self) {
        // Closing the pipe's only writer is the thread's POLLHUP.
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// What the kernel is asked for (rule 2).
fn watch_mask() -> WatchMask {
    WatchMask::CREATE
        | WatchMask::DELETE
        | WatchMask::MODIFY
        | WatchMask::CLOSE_WRITE
        | WatchMask::ATTRIB
        | WatchMask::MOVED_FROM
        | WatchMask::MOVED_TO
        | WatchMask::DELETE_SELF
        | WatchMask::MOVE_SELF
        | WatchMask::ONLYDIR
        | WatchMask::EXCL_UNLINK
}

struct Reader {
    inotify: Inotify,
    files: Vec<WatchedFile>,
    /// The directories watched, each with its watch.
    watched: Vec<(PathBuf, WatchDescriptor)>,
}

impl Reader {
    /// Until `wake` ends: waits for events, follows, calls `changed`.
    fn run(mut self, wake: &PipeReader, mut changed: impl FnMut()) {
        let mut buffer = [0u8; 4096];
        loop {
            let mut fds = [
                PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN),
                PollFd::new(wake.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    tracing::warn!("watching other tools' hook files stopped: {e}");
                    return;
                }
            }
            if fds[1].any().unwrap_or(true) {
                return;
            }
            let mut relevant = false;
            loop {
                let events = match self.inotify.read_events(&mut buffer) {
                    Ok(events) => events,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        tracing::warn!("watching other tools' hook files stopped: {e}");
                        return;
                    }
                };
                for event in events {
                    relevant |= event.mask.contains(EventMask::Q_OVERFLOW)
                        || self.concerns(&event.wd, event.name.map(Path::new));
                }
            }
            if relevant {
                self.follow();
                changed();
            }
        }
    }

    /// Whether an event of watch `wd` on `name` (none: the directory itself) may change a
    /// file: it names the file or a directory on its way (rule 3).
    fn concerns(&self, wd: &WatchDescriptor, name: Option<&Path>) -> bool {
        self.watched
            .iter()
            .filter(|(_, w)| w == wd)
            .any(|(dir, _)| match name {
                None => true,
                Some(name) => {
                    let path = dir.join(name);
                    self.files.iter().any(|f| f.path.starts_with(&path))
                }
            })
    }

    /// Moves the watches to the nearest existing directory of each file (rule 1).
    fn follow(&mut self) {
        let wanted: Vec<PathBuf> = self.files.iter().filter_map(nearest_dir).collect();
        let mut watches = self.inotify.watches();
        // What is no longer on a file's way (removed or superseded by a deeper directory).
        let (kept, gone): (Vec<_>, Vec<_>) = std::mem::take(&mut self.watched)
            .into_iter()
            .partition(|(dir, _)| wanted.contains(dir));
        for (_, wd) in gone {
            // Two paths may name one directory, and so share its watch.
            if !kept.iter().any(|(_, w)| *w == wd) {
                // A removed directory's watch is gone already.
                let _ = watches.remove(wd);
            }
        }
        self.watched = kept;
        for dir in wanted {
            if self.watched.iter().any(|(d, _)| *d == dir) {
                continue;
            }
            match watches.add(&dir, watch_mask()) {
                Ok(wd) => self.watched.push((dir, wd)),
                // Removed since it was looked at: its parent's event follows again.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(
                    "cannot watch {} for other tools' hook files: {e}",
                    dir.display()
                ),
            }
        }
    }
}

/// The nearest existing directory on `file`'s way, no higher than its root (rule 1).
fn nearest_dir(file: &WatchedFile) -> Option<PathBuf> {
    let mut dir = file.path.parent()?;
    loop {
        if !dir.starts_with(&file.root) {
            return None;
        }
        if dir.is_dir() {
            return Some(dir.to_owned());
        }
        dir = dir.parent()?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::{self, RecvTimeoutError};
    use std::time::Duration;

    /// Long enough for a loaded machine; a watch that misses an event fails after it.
    const WAIT: Duration = Duration::from_secs(20);

    /// Waits for a call that saw `file` as `want` (`None`: no file): calls made for earlier
    /// events of a change come before it and are passed over.
    fn until(rx: &mpsc::Receiver<Option<String>>, want: Option<&str>, what: &str) {
        loop {
            match rx.recv_timeout(WAIT) {
                Ok(seen) if seen.as_deref() == want => return,
                Ok(_) => continue,
                Err(e) => panic!("{what}: {e}"),
            }
        }
    }

    #[test]
    fn a_file_made_later_in_a_directory_made_later_is_followed_until_the_watch_is_dropped() {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().join("ws");
        std::fs::create_dir(&root).unwrap();
        let dir = root.join(".autoagent");
        let file = dir.join("config.json");
        let (tx, rx) = mpsc::channel();
        let watched = WatchedFile {
            path: file.clone(),
            root: root.clone(),
        };
        let read = file.clone();
        let watch = FileWatch::start(vec![watched], move || {
            let _ = tx.send(std::fs::read_to_string(&read).ok());
        })
        .unwrap();
        // The directory on the way, then the file in it: the watch followed before the call.
        std::fs::create_dir(&dir).unwrap();
        until(&rx, None, "the directory on the way");
        std::fs::write(&file, "1").unwrap();
        until(&rx, Some("1"), "the file in the new directory");
        // An editor's save: a new file renamed over it.
        std::fs::write(dir.join("config.json.tmp"), "2").unwrap();
        std::fs::rename(dir.join("config.json.tmp"), &file).unwrap();
        until(&rx, Some("2"), "the file replaced");
        // Removed with its directory, the watch goes back to the root and still follows.
        std::fs::remove_dir_all(&dir).unwrap();
        until(&rx, None, "the directory removed");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(&file, "3").unwrap();
        until(&rx, Some("3"), "the file made again");
        // Dropping it ends the thread, and with it the callback and its sender.
        drop(watch);
        loop {
            match rx.recv_timeout(WAIT) {
                Ok(_) => continue,
                Err(RecvTimeoutError::Disconnected) => break,
                Err(RecvTimeoutError::Timeout) => panic!("the watch thread outlived its drop"),
            }
        }
    }

    #[test]
    fn the_nearest_existing_directory_stays_under_the_root() {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().join("ws");
        std::fs::create_dir_all(root.join("a")).unwrap();
        let at = |path: &str, root: &Path| {
            nearest_dir(&WatchedFile {
                path: temp.path().join(path),
                root: root.to_owned(),
            })
        };
        assert_eq!(at("ws/f", &root), Some(root.clone()));
        assert_eq!(at("ws/a/b/c/f", &root), Some(root.join("a")));
        assert_eq!(at("ws/x/f", &root), Some(root.clone()));
        // A root that does not exist watches nothing, and nothing above it.
        assert_eq!(at("gone/x/f", &temp.path().join("gone")), None);
    }
}

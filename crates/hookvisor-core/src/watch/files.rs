//! A few named files and directory trees, which may not exist yet, watched for changes: what a
//! server watches of the hooks (`.discobot`), of `status.json`, and of the other tools' hook
//! files it reads in place ([`crate::import::source_files`]).
//!
//! 1. **Through their directories.** Each file is watched through the nearest directory of its
//!    path that exists, no higher than its [`WatchedFile::root`] (the workspace, the home
//!    directory): editors replace files by renaming, which a watch of the file itself would not
//!    survive, and a file that does not exist yet is seen when it, or a directory on its way,
//!    is created. A file whose root does not exist is not watched. A tree
//!    ([`WatchedFile::tree`]) is watched so while it does not exist, and then every directory
//!    in it, one watch each, but those of its exceptions (links followed, each directory
//!    once, 4096 at most).
//! 2. **Changes only** (the `watch` module's rule 1).
//! 3. **Called after following.** An event on a file's path, in a tree, or on a directory on
//!    their way (or a lost queue) moves the watches first (a directory made or removed), then
//!    calls `changed` once for the batch: whatever is written after the call raises another
//!    event. Events on other names of those directories are dropped at once.
//! 4. **Dropping** the [`FileWatch`] ends its thread and closes the instance. A symbolic link is
//!    followed when its directory is watched, but an edit of the file it names is not seen.

use std::io::{self, PipeReader, PipeWriter};
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::thread::JoinHandle;

use nix::errno::Errno;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::inotify::{AddWatchFlags, Inotify, WatchDescriptor};

/// One file (or tree) to watch, and the directory above which its watch never goes (rule 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchedFile {
    /// The file, absolute.
    pub path: PathBuf,
    /// A directory above it (the workspace, the home directory).
    pub root: PathBuf,
    /// `Some` for a tree: everything under `path` is watched too, but what is under these.
    except: Option<Vec<PathBuf>>,
}

impl WatchedFile {
    /// The file `path`, watched no higher than `root`.
    pub fn file(path: PathBuf, root: PathBuf) -> WatchedFile {
        WatchedFile {
            path,
            root,
            except: None,
        }
    }

    /// The directory `path` and everything in it but what is under `except`, watched no higher
    /// than `root`.
    pub fn tree(path: PathBuf, root: PathBuf, except: Vec<PathBuf>) -> WatchedFile {
        WatchedFile {
            path,
            root,
            except: Some(except),
        }
    }

    /// Whether an event on `path` may change this file or tree: it names the file, a
    /// directory on its way, or something in the tree but its exceptions.
    fn concerns(&self, path: &Path) -> bool {
        self.path.starts_with(path)
            || self.except.as_ref().is_some_and(|except| {
                path.starts_with(&self.path) && !except.iter().any(|e| path.starts_with(e))
            })
    }

    /// The directories to watch for it: the nearest existing one on its way, and for a tree
    /// that exists, every directory in it but its exceptions (rule 1).
    fn dirs(&self) -> Vec<PathBuf> {
        let Some(except) = &self.except else {
            return nearest_dir(self).into_iter().collect();
        };
        if !self.path.is_dir() {
            return nearest_dir(self).into_iter().collect();
        }
        // Links to directories are followed (`.discobot/hooks` may be one), each directory
        // watched once however many links lead to it, so a loop of links ends.
        let id = |path: &Path| std::fs::metadata(path).ok().map(|m| (m.dev(), m.ino()));
        let mut seen: Vec<_> = id(&self.path).into_iter().collect();
        let mut dirs = vec![self.path.clone()];
        let mut next = 0;
        while let Some(dir) = dirs.get(next).cloned() {
            next += 1;
            if dirs.len() >= MAX_TREE_DIRS {
                tracing::warn!(
                    "{} holds more than {MAX_TREE_DIRS} directories; the rest is not watched",
                    self.path.display()
                );
                break;
            }
            for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
                let path = entry.path();
                if path.is_dir()
                    && !except.iter().any(|e| path.starts_with(e))
                    && let Some(id) = id(&path)
                    && !seen.contains(&id)
                {
                    seen.push(id);
                    dirs.push(path);
                }
            }
        }
        dirs
    }
}

/// Why watching could not start.
#[derive(Debug, thiserror::Error)]
#[error("cannot watch hook files: {0}")]
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
        let inotify = super::instance(true)?;
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

/// The most directories of one tree that are watched: the walk and the watches stay bounded
/// even when a link in the tree leads to a large directory.
const MAX_TREE_DIRS: usize = 4096;

/// What the kernel is asked for (rule 2).
const WATCH_MASK: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MODIFY)
    .union(AddWatchFlags::IN_CLOSE_WRITE)
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_DELETE_SELF)
    .union(AddWatchFlags::IN_MOVE_SELF)
    .union(AddWatchFlags::IN_ONLYDIR)
    .union(super::IN_EXCL_UNLINK);

struct Reader {
    inotify: Inotify,
    files: Vec<WatchedFile>,
    /// The directories watched, each with its watch.
    watched: Vec<(PathBuf, WatchDescriptor)>,
}

impl Reader {
    /// Until `wake` ends: waits for events, follows, calls `changed`.
    fn run(mut self, wake: &PipeReader, mut changed: impl FnMut()) {
        loop {
            let mut fds = [
                PollFd::new(self.inotify.as_fd(), PollFlags::POLLIN),
                PollFd::new(wake.as_fd(), PollFlags::POLLIN),
            ];
            match poll(&mut fds, PollTimeout::NONE) {
                Ok(_) => {}
                Err(Errno::EINTR) => continue,
                Err(e) => {
                    tracing::warn!("watching hook files stopped: {e}");
                    return;
                }
            }
            if fds[1].any().unwrap_or(true) {
                return;
            }
            let mut relevant = false;
            loop {
                let events = match self.inotify.read_events() {
                    Ok(events) => events,
                    Err(Errno::EAGAIN) => break,
                    Err(Errno::EINTR) => continue,
                    Err(e) => {
                        tracing::warn!("watching hook files stopped: {e}");
                        return;
                    }
                };
                for event in events {
                    relevant |= event.mask.contains(AddWatchFlags::IN_Q_OVERFLOW)
                        || self.concerns(event.wd, event.name.as_deref().map(Path::new));
                }
            }
            if relevant {
                self.follow();
                changed();
            }
        }
    }

    /// Whether an event of watch `wd` on `name` (none: the directory itself) may change a
    /// file or tree (rule 3).
    fn concerns(&self, wd: WatchDescriptor, name: Option<&Path>) -> bool {
        self.watched
            .iter()
            .filter(|(_, w)| *w == wd)
            .any(|(dir, _)| match name {
                None => true,
                Some(name) => {
                    let path = dir.join(name);
                    self.files.iter().any(|f| f.concerns(&path))
                }
            })
    }

    /// Moves the watches to the nearest existing directory of each file (rule 1).
    fn follow(&mut self) {
        let wanted: Vec<PathBuf> = self.files.iter().flat_map(WatchedFile::dirs).collect();
        // What is no longer on a file's way (removed or superseded by a deeper directory).
        let (kept, gone): (Vec<_>, Vec<_>) = std::mem::take(&mut self.watched)
            .into_iter()
            .partition(|(dir, _)| wanted.contains(dir));
        for (_, wd) in gone {
            // Two paths may name one directory, and so share its watch.
            if !kept.iter().any(|(_, w)| *w == wd) {
                // A removed directory's watch is gone already.
                let _ = self.inotify.rm_watch(wd);
            }
        }
        self.watched = kept;
        for dir in wanted {
            if self.watched.iter().any(|(d, _)| *d == dir) {
                continue;
            }
            match self.inotify.add_watch(&dir, WATCH_MASK) {
                Ok(wd) => self.watched.push((dir, wd)),
                // Removed since it was looked at: its parent's event follows again.
                Err(Errno::ENOENT) => {}
                Err(e) => tracing::warn!("cannot watch {} for hook files: {e}", dir.display()),
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
        let watched = WatchedFile::file(file.clone(), root.clone());
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

    /// What `serve` watches: `.discobot` but the state dir in it, and `status.json`. An event
    /// reaches a watch of the directory it happens in (or of the path itself).
    #[test]
    fn paths_are_classified() {
        let temp = tempfile::tempdir().unwrap();
        let ws = temp.path().join("ws");
        let state = ws.join(".discobot/state");
        std::fs::create_dir_all(ws.join(".discobot/hooks")).unwrap();
        std::fs::create_dir_all(&state).unwrap();
        let hooks = WatchedFile::tree(ws.join(".discobot"), ws.clone(), vec![state.clone()]);
        let status = WatchedFile::file(state.join("status.json"), state.clone());
        let rings = |watch: &WatchedFile, path: &Path| {
            let dirs = watch.dirs();
            let seen = dirs
                .iter()
                .any(|d| path == d || path.parent() == Some(d.as_path()));
            seen && (dirs.iter().any(|d| path == d) || watch.concerns(path))
        };
        let cases = [
            ("ws/.discobot/hooks/lint.sh", Some("hooks")),
            ("ws/.discobot/hooks", Some("hooks")),
            ("ws/.discobot", Some("hooks")),
            ("ws/.discobot/state/status.json", Some("status")),
            ("ws/.discobot/state/status.json.lock", None),
            ("ws/.discobot/state/.tmpXYZ", None),
            ("ws/src/main.rs", None),
            ("ws/.discobotx", None),
        ];
        for (path, want) in cases {
            let path = temp.path().join(path);
            let got = match (rings(&hooks, &path), rings(&status, &path)) {
                (true, false) => Some("hooks"),
                (false, true) => Some("status"),
                (false, false) => None,
                (true, true) => panic!("{} rings both", path.display()),
            };
            assert_eq!(got, want, "{}", path.display());
        }
    }

    /// Opening and reading the files of a tree is no change: answering an event by reading the
    /// hooks must not raise another (rule 2). A tree's new directory is watched too.
    #[test]
    fn reads_are_not_changes_and_a_new_directory_in_a_tree_is_watched() {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().join("ws");
        let tree = root.join(".discobot");
        std::fs::create_dir_all(tree.join("hooks")).unwrap();
        std::fs::write(tree.join("hooks/a.sh"), "a").unwrap();
        let (tx, rx) = mpsc::channel();
        let marker = tree.join("hooks/marker");
        let seen = marker.clone();
        let watch = FileWatch::start(
            vec![WatchedFile::tree(tree.clone(), root, vec![])],
            move || {
                let _ = tx.send(std::fs::read_to_string(&seen).ok());
            },
        )
        .unwrap();
        for _ in 0..3 {
            std::fs::read_dir(tree.join("hooks"))
                .unwrap()
                .for_each(drop);
            std::fs::read_to_string(tree.join("hooks/a.sh")).unwrap();
        }
        std::fs::write(&marker, "1").unwrap();
        // Events come in order: a call for the reads would come before the marker's and see
        // no marker. The marker's creation may call before its write ("").
        loop {
            match rx.recv_timeout(WAIT).unwrap().as_deref() {
                Some("1") => break,
                Some("") => continue,
                other => panic!("a call before the marker was written: {other:?}"),
            }
        }
        std::fs::create_dir(tree.join("hooks/sub")).unwrap();
        until(&rx, Some("1"), "the new directory");
        std::fs::write(tree.join("hooks/sub/b.sh"), "b").unwrap();
        std::fs::write(&marker, "2").unwrap();
        until(&rx, Some("2"), "the file in the new directory");
        drop(watch);
    }

    #[test]
    fn the_nearest_existing_directory_stays_under_the_root() {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().join("ws");
        std::fs::create_dir_all(root.join("a")).unwrap();
        let at = |path: &str, root: &Path| {
            nearest_dir(&WatchedFile::file(temp.path().join(path), root.to_owned()))
        };
        assert_eq!(at("ws/f", &root), Some(root.clone()));
        assert_eq!(at("ws/a/b/c/f", &root), Some(root.join("a")));
        assert_eq!(at("ws/x/f", &root), Some(root.clone()));
        // A root that does not exist watches nothing, and nothing above it.
        assert_eq!(at("gone/x/f", &temp.path().join("gone")), None);
    }
}

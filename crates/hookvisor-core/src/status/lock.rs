//! The writers' lock (rule 1): an exclusive `flock` of `status.json.lock`, waited for at most the
//! store's lock timeout, with a lock file that breaks rule 3 replaced (rule 4).

use std::fs::{self, File, OpenOptions, TryLockError};
use std::io;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use super::StatusStore;
use super::store::StatusError;
use crate::state::{FILE_MODE, parent_dir};
use crate::untrusted::{OPEN_FLAGS, move_aside, open_regular};
use crate::watch::Closes;

/// The longest pause between two tries of a lock someone holds.
const LOCK_RETRY_MAX: Duration = Duration::from_millis(10);

impl StatusStore {
    /// Takes the exclusive lock (rules 1 and 3); it is released when the returned guard is
    /// dropped or the process dies.
    pub(crate) fn lock(&self) -> Result<Locked, StatusError> {
        let lock_path = self.lock_path();
        let deadline = Instant::now() + self.lock_timeout;
        let lock_error = |source| StatusError::Lock {
            path: lock_path.clone(),
            source,
        };
        // A lock file made by another user (the init runs as root) may not be writable by us;
        // flock needs only an open descriptor, so an existing one is opened read-only.
        let file = loop {
            match open_regular(&lock_path) {
                Ok(Ok(file)) => break file,
                Ok(Err(_)) => self.replace_lock(&lock_path, deadline)?,
                Err(e) if e.kind() == io::ErrorKind::NotFound => match create_lock(&lock_path) {
                    Ok(file) => break file,
                    // Another writer made it just now: open theirs.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(lock_error(e)),
                },
                Err(e) => return Err(lock_error(e)),
            }
            if Instant::now() >= deadline {
                return Err(self.lock_timeout_error());
            }
        };
        match lock_until(&file, deadline) {
            Ok(true) => Ok(Locked(Some(file))),
            Ok(false) => Err(self.lock_timeout_error()),
            Err(e) => Err(lock_error(e)),
        }
    }

    /// Moves aside a lock file that breaks rule 3 and makes a new one (rule 4). Writers that
    /// both found the bad file must not both replace it: the second would move aside the good
    /// lock the first made, and the two would lock different inodes. So this runs under a lock
    /// of the state dir and looks again first.
    fn replace_lock(&self, lock_path: &Path, deadline: Instant) -> Result<(), StatusError> {
        let lock_error = |source| StatusError::Lock {
            path: lock_path.to_owned(),
            source,
        };
        let dir = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY)
            .open(parent_dir(lock_path))
            .map_err(lock_error)?;
        if !lock_until(&dir, deadline).map_err(lock_error)? {
            return Err(self.lock_timeout_error());
        }
        match open_regular(lock_path) {
            // Another writer replaced it first.
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(why)) => move_aside(lock_path, &why).map_err(lock_error)?,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(lock_error(e)),
        }
        match create_lock(lock_path) {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(()),
            Err(e) => Err(lock_error(e)),
        }
    }

    fn lock_timeout_error(&self) -> StatusError {
        StatusError::LockTimeout {
            path: self.lock_path(),
            waited: self.lock_timeout,
        }
    }
}

/// The lock of a writer, held until dropped.
pub(crate) struct Locked(Option<File>);

impl Drop for Locked {
    fn drop(&mut self) {
        if let Some(file) = self.0.take() {
            // Unlock before the close: the close wakes the waiters (see `lock_until`), and
            // they must find the lock free.
            let _ = file.unlock();
            drop(file);
            // Let a waiter just woken run before this process can take the lock again.
            thread::yield_now();
        }
    }
}

/// Makes a new lock file, failing if anything is already there (so never through a symbolic
/// link).
fn create_lock(path: &Path) -> io::Result<File> {
    let file = OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(FILE_MODE)
        .custom_flags(OPEN_FLAGS)
        .open(path)?;
    // Whatever the umask, other users of the state dir must be able to open it.
    file.set_permissions(fs::Permissions::from_mode(FILE_MODE))?;
    Ok(file)
}

/// Takes an exclusive `flock` of `file` without ever blocking in `flock`, trying again until
/// `deadline`. False when it is still taken then.
///
/// Between tries a waiter sleeps until someone closes the file (a writer unlocks by closing it;
/// inotify says so at once) or [`LOCK_RETRY_MAX`] has passed. Waking at the close matters: a
/// waiter that merely slept would nearly always find the lock taken again by the writer that
/// just dropped it, and under many back-to-back writers could starve past its deadline.
fn lock_until(file: &File, deadline: Instant) -> io::Result<bool> {
    let mut closes = None;
    loop {
        match file.try_lock() {
            Ok(()) => return Ok(true),
            Err(TryLockError::WouldBlock) => {}
            Err(TryLockError::Error(e)) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(TryLockError::Error(e)) => return Err(e),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Ok(false);
        }
        let pause = left.min(LOCK_RETRY_MAX);
        match closes.get_or_insert_with(|| Closes::of(file)) {
            Some(closes) => closes.wait(pause),
            None => thread::sleep(pause),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::FileTypeExt;

    use super::*;
    use crate::status::tests::{mkfifo, set_aside, within};

    #[test]
    fn a_fifo_lock_file_is_moved_aside_and_recreated() {
        let dir = tempfile::tempdir().unwrap();
        let store = StatusStore::new(dir.path().join("status.json"));
        mkfifo(&store.lock_path());
        let writer = store.clone();
        within("update", move || {
            writer.update(|s| s.set_pending("a", true))
        })
        .unwrap();
        assert_eq!(store.load().unwrap().pending_hooks, ["a"]);
        let meta = fs::symlink_metadata(store.lock_path()).unwrap();
        assert!(meta.file_type().is_file(), "{meta:?}");
        assert_eq!(meta.permissions().mode() & 0o777, 0o644);
        let aside = set_aside(dir.path(), "status.json.lock");
        assert_eq!(aside.len(), 1, "{aside:?}");
        assert!(
            fs::symlink_metadata(&aside[0])
                .unwrap()
                .file_type()
                .is_fifo()
        );
    }

    #[test]
    fn a_symlinked_lock_file_is_replaced_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let store = StatusStore::new(dir.path().join("status.json"));
        // Dangling: following it, root would create a file wherever the agent points.
        let target = dir.path().join("made-by-root");
        std::os::unix::fs::symlink(&target, store.lock_path()).unwrap();
        store.update(|s| s.set_pending("a", true)).unwrap();
        assert!(
            fs::symlink_metadata(&target).is_err(),
            "the lock was followed"
        );
        assert!(
            fs::symlink_metadata(store.lock_path())
                .unwrap()
                .file_type()
                .is_file()
        );
        let aside = set_aside(dir.path(), "status.json.lock");
        assert_eq!(aside.len(), 1, "{aside:?}");
        assert_eq!(fs::read_link(&aside[0]).unwrap(), target);
        assert_eq!(store.load().unwrap().pending_hooks, ["a"]);
    }

    #[test]
    fn a_lock_held_by_another_process_fails_in_bounded_time() {
        let dir = tempfile::tempdir().unwrap();
        let store = StatusStore::new(dir.path().join("status.json"))
            .with_lock_timeout(Duration::from_millis(300));
        // What an agent can do: take the lock and keep it. The shell execs into sleep, which
        // inherits the locked descriptor; it says "locked" once it holds the lock.
        struct KillOnDrop(std::process::Child);
        impl Drop for KillOnDrop {
            fn drop(&mut self) {
                let _ = self.0.kill();
                let _ = self.0.wait();
            }
        }
        let mut holder = std::process::Command::new("sh")
            .args([
                "-c",
                "exec 9>>\"$1\"; flock 9; echo locked; exec sleep 120",
                "sh",
            ])
            .arg(store.lock_path())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .map(KillOnDrop)
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(holder.0.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        assert_eq!(line, "locked\n");

        let writer = store.clone();
        let started = std::time::Instant::now();
        let err = within("update", move || {
            writer.update(|s| s.set_pending("a", true))
        })
        .unwrap_err();
        let waited = started.elapsed();
        assert!(matches!(err, StatusError::LockTimeout { .. }), "{err:?}");
        assert!(waited >= Duration::from_millis(300), "{waited:?}");
        let message = err.to_string();
        assert!(
            message.starts_with(&format!(
                "{} is still locked after 0.3s",
                store.lock_path().display()
            )),
            "{message}"
        );
        assert!(message.contains("fuser -v"), "{message}");
        assert!(!message.contains('\n'), "{message}");
        assert!(
            !store.path().exists(),
            "nothing was written without the lock"
        );

        // Once the holder is gone, the next writer gets the lock at once.
        drop(holder);
        store.update(|s| s.set_pending("a", true)).unwrap();
        assert_eq!(store.load().unwrap().pending_hooks, ["a"]);
    }
}

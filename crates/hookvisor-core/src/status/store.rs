//! Reading and updating one `status.json`: readers without a lock, writers under it with an atomic
//! replace (rule 2), and a file that is not a status moved aside (rule 4).

use std::fs;
use std::io;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::history::{History, RunInfo};
use super::{RunResult, Status};
use crate::context::Context;
use crate::exec::RunOutcome;
use crate::hook::Hook;
use crate::state::{
    Durability, StateDir, TEMP_SUFFIX, parent_dir, read_capped, temp_prefix, write_atomic,
};
use crate::untrusted::{move_aside, open_regular, warn};

/// The largest `status.json` read (rule 3); a bigger one is moved aside like a corrupt one.
const MAX_STATUS_BYTES: u64 = 8 << 20;

/// How long a writer waits for the lock unless told otherwise (rule 1).
const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// Reads and updates one `status.json` following the rules in the module documentation.
#[derive(Debug, Clone)]
pub struct StatusStore {
    path: PathBuf,
    // Read by `lock`, which waits for the lock at most this long.
    pub(super) lock_timeout: Duration,
    // How `update` replaces the file.
    durability: Durability,
    // What the runs this store records were fired by, for their history.
    run_info: Option<RunInfo>,
}

/// What [`StatusStore::read`] found at `status.json`.
enum Found {
    Missing,
    /// The status and the bytes it was parsed from.
    Parsed(Status, Vec<u8>),
    /// Something not to read as a status, and why ("is a FIFO, not a regular file").
    Unusable(String),
}

impl StatusStore {
    /// A store for the `status.json` at `path`. Nothing is touched until the first call. Its
    /// writers wait for the lock at most 10 s.
    pub fn new(path: impl Into<PathBuf>) -> StatusStore {
        StatusStore {
            path: path.into(),
            lock_timeout: LOCK_TIMEOUT,
            durability: Durability::Durable,
            run_info: None,
        }
    }

    /// This store, for recording the runs of one firing: their history names its event,
    /// trigger, session and files ([`super::history`]).
    pub fn for_run(&self, info: RunInfo) -> StatusStore {
        StatusStore {
            run_info: Some(info),
            ..self.clone()
        }
    }

    /// The run histories beside this `status.json`.
    pub fn history(&self) -> History {
        History::new(StateDir::new(parent_dir(&self.path)))
    }

    /// Sets what the last recorded run of `hook_id` decided and the exact text the agent got
    /// because of it, in its history, under the lock.
    pub fn annotate_run(
        &self,
        hook_id: &str,
        decision: &str,
        agent_text: Option<&str>,
    ) -> Result<(), StatusError> {
        let history = self.history();
        self.update(|_| history.annotate(hook_id, decision, agent_text))?
            .map_err(|source| StatusError::Write {
                path: StateDir::new(parent_dir(&self.path)).run_history(hook_id),
                source,
            })
    }

    /// Sets how [`StatusStore::update`] replaces the file. The default, [`Durability::Durable`],
    /// fsyncs it and its directory; with [`Durability::Replaceable`] a reader still never sees
    /// a partial file, but a power loss may take the last writes back.
    pub fn with_durability(mut self, durability: Durability) -> StatusStore {
        self.durability = durability;
        self
    }

    /// Sets how long [`StatusStore::update`] waits for the lock another process holds before
    /// it fails with [`StatusError::LockTimeout`]. The default is 10 s.
    pub fn with_lock_timeout(mut self, timeout: Duration) -> StatusStore {
        self.lock_timeout = timeout;
        self
    }

    /// The store of a context: `<state>/status.json`.
    pub fn for_context(ctx: &Context) -> StatusStore {
        StatusStore::new(ctx.status_path())
    }

    /// Records a finished run of `hook` (see [`HookStatus::record`](super::HookStatus::record)) with `note`, under the
    /// lock like every [`StatusStore::update`]: the one way evaluation, rerun, session and
    /// pre-commit record a run.
    pub fn record(
        &self,
        ctx: &Context,
        hook: &Hook,
        outcome: &RunOutcome,
        note: Option<&str>,
        now: SystemTime,
    ) -> Result<(), StatusError> {
        self.update(|status| {
            let entry = status.entry(hook, ctx);
            entry.record(outcome, now);
            entry.note = note.map(str::to_owned);
        })
    }

    /// The path of `status.json`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the status without locking and without ever blocking. A missing file is an empty
    /// status; so is a corrupt, oversized or non-regular one (rules 3 and 4), with a warning:
    /// the next writer moves it aside, a reader leaves it for inspection.
    pub fn load(&self) -> Result<Status, StatusError> {
        Ok(match self.read()? {
            Found::Missing => Status::default(),
            Found::Parsed(status, _) => status,
            Found::Unusable(why) => {
                warn(format_args!(
                    "{} {why}; reading it as empty until the next write moves it aside",
                    self.path.display()
                ));
                Status::default()
            }
        })
    }

    /// Applies `f` to the current status under the exclusive lock and writes the result
    /// atomically; the file is not rewritten when `f` changed nothing. Creates the state dir
    /// if needed. Waits while another writer holds the lock, at most the lock timeout.
    pub fn update<T>(&self, f: impl FnOnce(&mut Status) -> T) -> Result<T, StatusError> {
        // The state dir is made when the lock cannot be, for want of it (the first write); a
        // file in its way is reported as such.
        let _lock = match self.lock() {
            Err(StatusError::Lock { source, .. })
                if matches!(source.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) =>
            {
                let dir = parent_dir(&self.path);
                fs::DirBuilder::new()
                    .recursive(true)
                    .mode(0o755)
                    .create(dir)
                    .map_err(|source| StatusError::CreateDir {
                        path: dir.to_owned(),
                        source,
                    })?;
                self.lock()?
            }
            locked => locked?,
        };
        self.remove_dead_temp_files();
        let (mut status, before) = match self.read()? {
            Found::Missing => (Status::default(), None),
            Found::Parsed(status, bytes) => (status, Some(bytes)),
            Found::Unusable(why) => {
                move_aside(&self.path, &why).map_err(|source| StatusError::Write {
                    path: self.path.clone(),
                    source,
                })?;
                (Status::default(), None)
            }
        };
        let finished: Vec<(String, u64)> = status
            .hooks
            .iter()
            .map(|(id, h)| (id.clone(), h.run_count))
            .collect();
        let value = f(&mut status);
        self.add_to_histories(&status, &finished);
        let after = status.to_json();
        if before.as_deref() != Some(after.as_slice()) {
            write_atomic(&self.path, &after, self.durability).map_err(|source| {
                StatusError::Write {
                    path: self.path.clone(),
                    source,
                }
            })?;
        }
        Ok(value)
    }

    /// Appends every run `status` counts beyond `before` (id, runCount) to its hook's history.
    /// A history that cannot be written costs a warning, never the status write.
    fn add_to_histories(&self, status: &Status, before: &[(String, u64)]) {
        let history = self.history();
        for (id, entry) in &status.hooks {
            let was = before
                .iter()
                .find(|(b, _)| b == id)
                .map_or(0, |(_, count)| *count);
            if entry.run_count > was
                && let Err(e) = history.append(id, entry, self.run_info.as_ref())
            {
                warn(format_args!(
                    "cannot add a run of '{id}' to its history: {e}"
                ));
            }
        }
    }

    /// Startup recovery (see [`Status::recover_interrupted`]); call it before anything of this
    /// state dir runs a hook. Returns the ids recovered, and writes nothing when there are none.
    pub fn recover_interrupted(&self) -> Result<Vec<String>, StatusError> {
        let running = self
            .load()?
            .hooks
            .values()
            .any(|h| h.last_result == RunResult::Running);
        if !running {
            return Ok(Vec::new());
        }
        self.update(Status::recover_interrupted)
    }

    /// `status.json.lock`, next to the file it guards.
    pub fn lock_path(&self) -> PathBuf {
        crate::state::lock_path(&self.path)
    }

    /// Reads `status.json` following rule 3: a regular file, opened without following or
    /// blocking, read up to [`MAX_STATUS_BYTES`].
    fn read(&self) -> Result<Found, StatusError> {
        let read_error = |source| StatusError::Read {
            path: self.path.clone(),
            source,
        };
        let file = match open_regular(&self.path) {
            Ok(Ok(file)) => file,
            Ok(Err(why)) => return Ok(Found::Unusable(why)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Found::Missing),
            Err(e) => return Err(read_error(e)),
        };
        let Some(bytes) = read_capped(file, MAX_STATUS_BYTES).map_err(read_error)? else {
            return Ok(Found::Unusable(format!(
                "is over the limit of {} MiB",
                MAX_STATUS_BYTES >> 20
            )));
        };
        Ok(match Status::from_json(&bytes) {
            Ok(status) => Found::Parsed(status, bytes),
            Err(e) => Found::Unusable(format!("does not parse ({e})")),
        })
    }

    /// Under the lock, any temp file of ours belongs to a writer that died mid-write. Removing
    /// unlinks the name itself: a symbolic link planted under such a name goes, its target
    /// stays. Each writer's temp file has a random name of its own, so even writers that an
    /// agent got both "under the lock" (by replacing the lock file while it was held) never
    /// rename each other's half-written file.
    pub(crate) fn remove_dead_temp_files(&self) {
        let Some(prefix) = temp_prefix(&self.path) else {
            return;
        };
        let Ok(entries) = fs::read_dir(parent_dir(&self.path)) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(&prefix) && name.ends_with(TEMP_SUFFIX) {
                let _ = fs::remove_file(entry.path());
            }
        }
    }
}

/// Why `status.json` could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum StatusError {
    /// The state dir could not be created.
    #[error(
        "cannot create state dir {}: {source}; create it writable by this user or pass --state-dir",
        path.display()
    )]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// The lock file could not be opened or locked.
    #[error(
        "cannot lock {}: {source}; make the state dir writable or pass --state-dir",
        path.display()
    )]
    Lock {
        /// The lock file.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// Another process held the lock for the whole lock timeout. hookvisor's writers hold it
    /// for milliseconds, so the holder is stuck or holds it on purpose: most likely a process
    /// of the agent, which owns the state dir.
    #[error(
        "{path} is still locked after {secs}s; hookvisor holds it for milliseconds, so \
         another process keeps it, most likely one of the agent's: find it with \
         `fuser -v {path}` and stop it, or pass --state-dir",
        path = path.display(),
        secs = waited.as_secs_f64()
    )]
    LockTimeout {
        /// The lock file.
        path: PathBuf,
        /// How long the writer waited.
        waited: Duration,
    },
    /// `status.json` exists but could not be read.
    #[error(
        "cannot read {}: {source}; make it readable by this user or pass --state-dir",
        path.display()
    )]
    Read {
        /// The status file.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// The new `status.json` could not be written, or a corrupt one moved aside.
    #[error(
        "cannot write {}: {source}; make the state dir writable or pass --state-dir",
        path.display()
    )]
    Write {
        /// The status file.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::event::HookKind;
    use crate::status::tests::{assert_status_moved_aside, at, context, hook, outcome, set_aside};

    #[test]
    fn interrupted_runs_become_pending_and_file_hooks_are_requeued() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let store = StatusStore::for_context(&ctx);
        assert_eq!(store.recover_interrupted().unwrap(), Vec::<String>::new());
        assert!(!store.path().exists(), "nothing to recover writes nothing");
        store
            .update(|s| {
                s.entry(&hook("fmt", HookKind::File), &ctx).begin(at(1));
                s.entry(&hook("lint", HookKind::File), &ctx).begin(at(1));
                s.set_pending("lint", true);
                s.entry(&hook("setup", HookKind::Session), &ctx)
                    .begin(at(1));
                s.entry(&hook("ok", HookKind::File), &ctx)
                    .record(&outcome(0, false, Duration::ZERO), at(1));
            })
            .unwrap();
        let recovered = store.recover_interrupted().unwrap();
        assert_eq!(recovered, ["fmt", "lint", "setup"]);
        let status = store.load().unwrap();
        for id in ["fmt", "lint", "setup"] {
            assert_eq!(status.hooks[id].last_result, RunResult::Pending, "{id}");
        }
        assert_eq!(status.hooks["ok"].last_result, RunResult::Success);
        assert_eq!(
            status.pending_hooks,
            ["fmt", "lint"],
            "session hooks are not requeued; the set is sorted by id"
        );
        assert_eq!(store.recover_interrupted().unwrap(), Vec::<String>::new());
    }

    #[test]
    fn a_corrupt_file_is_read_as_empty_and_moved_aside_by_the_next_writer() {
        let dir = tempfile::tempdir().unwrap();
        let store = StatusStore::new(dir.path().join("status.json"));
        let garbage = b"{\"hooks\": {\"a\": tru";
        fs::write(store.path(), garbage).unwrap();

        assert_eq!(store.load().unwrap(), Status::default());
        assert_eq!(
            fs::read(store.path()).unwrap(),
            garbage,
            "a reader moves nothing"
        );

        store.update(|s| s.set_pending("a", true)).unwrap();
        let aside: Vec<PathBuf> = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains("status.json.corrupt-"))
            .collect();
        assert_eq!(aside.len(), 1, "{aside:?}");
        assert_eq!(fs::read(&aside[0]).unwrap(), garbage);
        let name = aside[0].file_name().unwrap().to_string_lossy().into_owned();
        assert!(
            name.len() == "status.json.corrupt-20261122T050910.123Z".len() && name.ends_with('Z'),
            "{name}"
        );
        assert_eq!(store.load().unwrap().pending_hooks, ["a"]);
    }

    #[test]
    fn update_creates_the_state_dir_and_readable_files() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("home/.discobot/s1/hooks/status.json");
        let store = StatusStore::new(&path);
        let turns = store
            .update(|s| {
                s.consecutive_hook_turns += 1;
                s.consecutive_hook_turns
            })
            .unwrap();
        assert_eq!(turns, 1);
        for file in [path.clone(), store.lock_path()] {
            let mode = fs::metadata(&file).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o644, "{}", file.display());
        }
        assert_eq!(store.load().unwrap().consecutive_hook_turns, 1);
        let names: Vec<String> = fs::read_dir(path.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names
                .iter()
                .all(|n| n == "status.json" || n == "status.json.lock"),
            "no temp file is left behind: {names:?}"
        );
    }

    #[test]
    fn a_replaceable_store_still_replaces_the_file_whole() {
        let dir = tempfile::tempdir().unwrap();
        let durable = StatusStore::new(dir.path().join("a/status.json"));
        let replaceable = StatusStore::new(dir.path().join("b/status.json"))
            .with_durability(Durability::Replaceable);
        for store in [&durable, &replaceable] {
            store.update(|s| s.set_pending("a", true)).unwrap();
            let inode = std::os::unix::fs::MetadataExt::ino(&fs::metadata(store.path()).unwrap());
            store.update(|s| s.set_pending("b", true)).unwrap();
            // A new file renamed over the old one, never the old one written in place.
            let after = std::os::unix::fs::MetadataExt::ino(&fs::metadata(store.path()).unwrap());
            assert_ne!(after, inode);
            assert_eq!(store.load().unwrap().pending_hooks, ["a", "b"]);
        }
        assert_eq!(
            fs::read(durable.path()).unwrap(),
            fs::read(replaceable.path()).unwrap()
        );
        let left = fs::read_dir(dir.path().join("b")).unwrap().count();
        assert_eq!(left, 2, "status.json and its lock, no temp file");
    }

    #[test]
    fn an_update_that_changes_nothing_does_not_rewrite() {
        let dir = tempfile::tempdir().unwrap();
        let store = StatusStore::new(dir.path().join("status.json"));
        store.update(|s| s.set_pending("a", true)).unwrap();
        let inode = |p: &Path| std::os::unix::fs::MetadataExt::ino(&fs::metadata(p).unwrap());
        let before = inode(store.path());
        store.update(|s| s.set_pending("a", true)).unwrap();
        assert_eq!(inode(store.path()), before);
        store.update(|s| s.set_pending("a", false)).unwrap();
        assert_ne!(inode(store.path()), before);
    }

    #[test]
    fn errors_name_the_path_and_the_fix() {
        let dir = tempfile::tempdir().unwrap();
        let blocker = dir.path().join("file");
        fs::write(&blocker, "").unwrap();
        let store = StatusStore::new(blocker.join("status.json"));
        let err = store.update(|_| ()).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("cannot create state dir {}", blocker.display())),
            "{err}"
        );
        assert!(err.ends_with("or pass --state-dir"), "{err}");
        assert!(!err.contains('\n'));
        // (A directory named status.json is no error but a corrupt file: see the tests of a
        // hostile state dir below.)
        let path = blocker.join("status.json");
        let err = StatusStore::new(&path).load().unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("cannot read {}", path.display())),
            "{err}"
        );
    }

    #[test]
    fn write_atomic_replaces_and_keeps_the_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("settings.json");
        write_atomic(&path, b"one", Durability::Durable).unwrap();
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o644
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        write_atomic(&path, b"two", Durability::Durable).unwrap();
        assert_eq!(fs::read(&path).unwrap(), b"two");
        assert_eq!(
            fs::metadata(&path).unwrap().permissions().mode() & 0o777,
            0o600
        );
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_status_json_over_the_size_limit_is_moved_aside() {
        // Valid JSON of exactly `len` bytes.
        let json = |len: u64| {
            let mut bytes = br#"{"padding":""#.to_vec();
            bytes.resize(len as usize - 2, b'x');
            bytes.extend_from_slice(b"\"}");
            bytes
        };
        let dir = tempfile::tempdir().unwrap();
        let store = StatusStore::new(dir.path().join("status.json"));
        fs::write(store.path(), json(MAX_STATUS_BYTES)).unwrap();
        assert!(
            store.load().unwrap().extra.contains_key("padding"),
            "a file at the limit is read"
        );
        let padding = store
            .update(|s| s.extra.remove("padding").is_some())
            .unwrap();
        assert!(padding, "and updated");
        assert_eq!(set_aside(dir.path(), "status.json"), Vec::<PathBuf>::new());

        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("status.json"), json(MAX_STATUS_BYTES + 1)).unwrap();
        let aside = assert_status_moved_aside(dir.path());
        assert_eq!(fs::metadata(aside).unwrap().len(), MAX_STATUS_BYTES + 1);
    }

    #[test]
    fn dead_temp_file_cleanup_does_not_follow_symlinks() {
        let dir = tempfile::tempdir().unwrap();
        let store = StatusStore::new(dir.path().join("status.json"));
        let target = dir.path().join("target");
        fs::write(&target, "kept").unwrap();
        let planted = dir.path().join(".status.json.abcdef.tmp");
        std::os::unix::fs::symlink(&target, &planted).unwrap();
        store.update(|s| s.set_pending("a", true)).unwrap();
        assert!(
            fs::symlink_metadata(&planted).is_err(),
            "the temp name is cleaned"
        );
        assert_eq!(fs::read_to_string(&target).unwrap(), "kept");
    }
}

//! The `status.json` store: what every hook did last, which file hooks are pending, and the
//! loop-guard counter, shared by the init, the server, the CLI and the pre-commit path.
//!
//! The schema is discobot's (DESIGN.md, "status.json"), so its dashboards keep working. The rules
//! every writer follows live here, once:
//!
//! 1. Writers serialise on an exclusive `flock` of `status.json.lock`, a file that is never
//!    deleted (deleting a lock file lets two writers lock two different inodes). The kernel drops
//!    the lock when its holder dies, so a killed writer never blocks the next one. A writer holds
//!    the lock for milliseconds, so one held for long is held on purpose: a writer waits for it
//!    at most its store's lock timeout, 10 s unless [`StatusStore::with_lock_timeout`] says
//!    otherwise, and then fails with [`StatusError::LockTimeout`].
//! 2. Under the lock a writer reads, modifies and writes a temp file in the same directory,
//!    fsyncs it, renames it over `status.json` and fsyncs the directory. Readers take no lock:
//!    the rename means they see the old file or the new one, never a torn one.
//! 3. The state dir belongs to the run user, so whatever code the agent ran may have left
//!    anything there, and the init (root, PID 1) reads it before CMD starts. `status.json` and
//!    its lock are opened without following a symbolic link and without blocking
//!    (`O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC`) and used only when they are regular
//!    files with at most one link: never a FIFO, a device, a socket, a directory or a hard link
//!    to a file elsewhere. `status.json` is read up to 8 MiB, hundreds of times a real one.
//! 4. A `status.json` that breaks rule 3 or does not parse is moved aside to
//!    `status.json.corrupt-<UTC time>` by the next writer, with a warning, and a fresh status is
//!    started; readers treat it as empty. A lock file that breaks rule 3 is moved aside the same
//!    way (`status.json.lock.corrupt-<UTC time>`) and made again: no writer ever locked it, so
//!    rule 1 holds. Warnings go to `tracing`, or to stderr when no subscriber listens (the init
//!    installs none).
//! 5. Fields and hook entries this version does not know are kept through a read-modify-write,
//!    so a newer hookvisor or another tool sharing the file loses nothing.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File, OpenOptions, TryLockError};
use std::io::{self, Read};
use std::os::unix::fs::{DirBuilderExt, FileTypeExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use crate::context::Context;
use crate::exec::RunOutcome;
use crate::hook::{Hook, HookKind};
use crate::state::{Durability, FILE_MODE, TEMP_SUFFIX, parent_dir, temp_prefix, write_atomic};
use crate::timestamp::{rfc3339, rfc3339_millis};

/// The largest `status.json` read (rule 3); a bigger one is moved aside like a corrupt one.
const MAX_STATUS_BYTES: u64 = 8 << 20;

/// How long a writer waits for the lock unless told otherwise (rule 1).
const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// The longest pause between two tries of a lock someone holds.
const LOCK_RETRY_MAX: Duration = Duration::from_millis(10);

/// How `status.json` and its lock are opened (rule 3). std adds `O_CLOEXEC`.
const OPEN_FLAGS: i32 = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY;

/// The contents of `status.json`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    /// The last run of every hook that has been recorded, by hook id.
    pub hooks: BTreeMap<String, HookStatus>,
    /// File hooks waiting to run, sorted by id as strings (`hook-1`, `hook-10`, `hook-2`, as
    /// discobot keeps them), without duplicates. Only membership matters: pending hooks run in
    /// discovery order (see `evaluate`), never in this order.
    pub pending_hooks: Vec<String>,
    /// When the last end-of-turn evaluation finished (RFC 3339); written as `""` while unset,
    /// as discobot does, whose readers expect a string.
    pub last_evaluated_at: Option<String>,
    /// Loop guard: turns in a row started by a hook re-prompt (DESIGN.md, evaluation step 5).
    pub consecutive_hook_turns: u32,
    /// Top-level fields this version does not know, written back unchanged.
    pub extra: Map<String, Value>,
    /// Hook entries that do not parse as a [`HookStatus`] (a kind from a newer version, say),
    /// written back unchanged until a run of that id replaces them.
    unparsed_hooks: BTreeMap<String, Value>,
}

/// What one hook did last, as dashboards read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookStatus {
    /// The hook's id, the key of its entry.
    #[serde(default)]
    pub hook_id: String,
    /// Its display name at the last recording.
    #[serde(default)]
    pub hook_name: String,
    /// Its kind.
    #[serde(rename = "type")]
    pub kind: HookKind,
    /// When the last run started (RFC 3339); `None` before the first run.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub last_run_at: Option<String>,
    /// How the last run ended, or that one is running or waiting.
    #[serde(default)]
    pub last_result: RunResult,
    /// Exit status of the last finished run.
    #[serde(default)]
    pub last_exit_code: Option<i32>,
    /// The log of the last run.
    #[serde(default)]
    pub output_path: String,
    /// Finished runs.
    #[serde(default)]
    pub run_count: u64,
    /// Finished runs that failed.
    #[serde(default)]
    pub fail_count: u64,
    /// Failed runs since the last success.
    #[serde(default)]
    pub consecutive_failures: u64,
    /// Whether the last run was killed for exceeding its timeout.
    #[serde(default, skip_serializing_if = "is_false")]
    pub timed_out: bool,
    /// How long the last finished run took, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Why the last run ended as it did when its exit code alone does not say (stopped by the
    /// end of the session, refused, interrupted); discobot's dashboards ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Fields this version does not know, written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The `lastResult` of a hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunResult {
    /// The last run exited 0.
    Success,
    /// The last run failed, timed out or could not start.
    Failure,
    /// A run is in progress (or its writer died; see [`StatusStore::recover_interrupted`]).
    Running,
    /// Waiting to run. The state of an entry that has never run.
    #[default]
    Pending,
}

impl RunResult {
    /// The spelling in `status.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunResult::Success => "success",
            RunResult::Failure => "failure",
            RunResult::Running => "running",
            RunResult::Pending => "pending",
        }
    }
}

impl fmt::Display for RunResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Status {
    /// The entry of `hook`, created if missing, with its name, type and log path brought up to
    /// date (the front matter may have renamed it since its last run).
    pub fn entry(&mut self, hook: &Hook, ctx: &Context) -> &mut HookStatus {
        self.unparsed_hooks.remove(&hook.id);
        let output_path = ctx.log_path(&hook.id).display().to_string();
        let entry = self
            .hooks
            .entry(hook.id.clone())
            .or_insert_with(|| HookStatus::new(&hook.id, &hook.name, hook.kind));
        entry.hook_name.clone_from(&hook.name);
        entry.kind = hook.kind;
        entry.output_path = output_path;
        entry
    }

    /// Adds `id` to the pending set (in its sorted place, once) or removes it. Returns whether
    /// the set changed.
    pub fn set_pending(&mut self, id: &str, pending: bool) -> bool {
        match (pending, self.is_pending(id)) {
            (true, false) => {
                let at = self.pending_hooks.partition_point(|p| p.as_str() < id);
                self.pending_hooks.insert(at, id.to_owned());
                true
            }
            (false, true) => {
                self.pending_hooks.retain(|p| p != id);
                true
            }
            _ => false,
        }
    }

    /// Whether `id` is in the pending set.
    pub fn is_pending(&self, id: &str) -> bool {
        self.pending_hooks.iter().any(|p| p == id)
    }

    /// Turns every entry left `running` by a writer that died into `pending`, and puts the file
    /// hooks among them back into the pending set so the next evaluation reruns them. Returns
    /// the ids recovered.
    pub fn recover_interrupted(&mut self) -> Vec<String> {
        let mut recovered = Vec::new();
        let mut requeue = Vec::new();
        for (id, entry) in &mut self.hooks {
            if entry.last_result == RunResult::Running {
                entry.last_result = RunResult::Pending;
                recovered.push(id.clone());
                if entry.kind == HookKind::File {
                    requeue.push(id.clone());
                }
            }
        }
        for id in requeue {
            self.set_pending(&id, true);
        }
        recovered
    }

    /// Parses `status.json` bytes. Empty strings and nulls that discobot writes for unset
    /// values read as unset.
    pub fn from_json(bytes: &[u8]) -> serde_json::Result<Status> {
        serde_json::from_slice(bytes)
    }

    /// The bytes written to `status.json`: pretty JSON and a final newline, so that `cat` and
    /// diffs read well.
    pub fn to_json(&self) -> Vec<u8> {
        // Serializing cannot fail: every map key is a string and every value is plain data.
        let mut bytes = serde_json::to_vec_pretty(self).expect("status serializes");
        bytes.push(b'\n');
        bytes
    }
}

impl HookStatus {
    /// A never-run entry: pending, no counters.
    pub fn new(id: &str, name: &str, kind: HookKind) -> HookStatus {
        HookStatus {
            hook_id: id.to_owned(),
            hook_name: name.to_owned(),
            kind,
            last_run_at: None,
            last_result: RunResult::Pending,
            last_exit_code: None,
            output_path: String::new(),
            run_count: 0,
            fail_count: 0,
            consecutive_failures: 0,
            timed_out: false,
            duration_ms: None,
            note: None,
            extra: Map::new(),
        }
    }

    /// Records that a run started at `now`: dashboards show it running.
    pub fn begin(&mut self, now: SystemTime) {
        self.last_result = RunResult::Running;
        self.last_run_at = Some(rfc3339(now));
    }

    /// Records a finished run, with discobot's counters: every run counts, a failure adds to
    /// both failure counters, a success resets the consecutive one. `lastRunAt` is the start of
    /// the run (`now - duration`), the same value [`HookStatus::begin`] wrote, so a writer that
    /// skips `begin` (the pre-commit path) records the same thing. The note of an earlier run
    /// is cleared: it described that run.
    pub fn record(&mut self, outcome: &RunOutcome, now: SystemTime) {
        let result = if outcome.success() {
            RunResult::Success
        } else {
            RunResult::Failure
        };
        self.count(
            Some(outcome.exit_code),
            result,
            outcome.timed_out,
            outcome.duration,
            now,
        );
        self.note = None;
    }

    /// Records a run that ended without an outcome (refused before it started, or its runner
    /// killed) as a failure without an exit code, with `note` saying why.
    pub fn record_unfinished(&mut self, note: &str, duration: Duration, now: SystemTime) {
        self.count(None, RunResult::Failure, false, duration, now);
        self.note = Some(note.to_owned());
    }

    fn count(
        &mut self,
        exit_code: Option<i32>,
        result: RunResult,
        timed_out: bool,
        duration: Duration,
        now: SystemTime,
    ) {
        self.run_count += 1;
        if result == RunResult::Success {
            self.consecutive_failures = 0;
        } else {
            self.fail_count += 1;
            self.consecutive_failures += 1;
        }
        self.last_result = result;
        self.last_exit_code = exit_code;
        self.timed_out = timed_out;
        self.duration_ms = Some(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
        self.last_run_at = Some(rfc3339(now.checked_sub(duration).unwrap_or(now)));
    }
}

/// Reads and updates one `status.json` following the rules in the module documentation.
#[derive(Debug, Clone)]
pub struct StatusStore {
    path: PathBuf,
    lock_timeout: Duration,
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
        }
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

    /// Records a finished run of `hook` (see [`HookStatus::record`]) with `note`, under the
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
        let dir = parent_dir(&self.path);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|source| StatusError::CreateDir {
                path: dir.to_owned(),
                source,
            })?;
        let _lock = self.lock()?;
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
        let value = f(&mut status);
        let after = status.to_json();
        if before.as_deref() != Some(after.as_slice()) {
            write_atomic(&self.path, &after, Durability::Durable).map_err(|source| {
                StatusError::Write {
                    path: self.path.clone(),
                    source,
                }
            })?;
        }
        Ok(value)
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
        let mut name = self.path.file_name().unwrap_or_default().to_owned();
        name.push(".lock");
        self.path.with_file_name(name)
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
        let mut bytes = Vec::new();
        file.take(MAX_STATUS_BYTES + 1)
            .read_to_end(&mut bytes)
            .map_err(read_error)?;
        if bytes.len() as u64 > MAX_STATUS_BYTES {
            return Ok(Found::Unusable(format!(
                "is over the limit of {} MiB",
                MAX_STATUS_BYTES >> 20
            )));
        }
        Ok(match Status::from_json(&bytes) {
            Ok(status) => Found::Parsed(status, bytes),
            Err(e) => Found::Unusable(format!("does not parse ({e})")),
        })
    }

    /// Takes the exclusive lock (rules 1 and 3); it is released when the returned guard is
    /// dropped or the process dies.
    fn lock(&self) -> Result<Locked, StatusError> {
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

    /// Under the lock, any temp file of ours belongs to a writer that died mid-write. Removing
    /// unlinks the name itself: a symbolic link planted under such a name goes, its target
    /// stays.
    fn remove_dead_temp_files(&self) {
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

/// The lock of a writer, held until dropped.
struct Locked(Option<File>);

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

/// Opens `path` read-only if it is a regular file with at most one link (rule 3), never
/// following a symbolic link and never blocking; `Ok(Err(why))` says what it is instead.
fn open_regular(path: &Path) -> io::Result<Result<File, String>> {
    // Looking first keeps us from opening a device or a FIFO at all; looking at what was opened
    // closes the race with whoever swaps the file in between.
    if let Some(why) = not_ours(&fs::symlink_metadata(path)?) {
        return Ok(Err(why));
    }
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(OPEN_FLAGS)
        .open(path)
    {
        Ok(file) => file,
        // Swapped since: a symbolic link now (ELOOP), or a socket (ENXIO)...
        Err(e) => {
            return match fs::symlink_metadata(path).ok().as_ref().and_then(not_ours) {
                Some(why) => Ok(Err(why)),
                None => Err(e),
            };
        }
    };
    Ok(match not_ours(&file.metadata()?) {
        Some(why) => Err(why),
        None => Ok(file),
    })
}

/// Why a file of the state dir is not one this store could have made (rule 3), or `None`.
///
/// A regular file with no link is fine: a reader may open `status.json` just before a writer
/// renames a new one over it.
pub(crate) fn not_ours(meta: &fs::Metadata) -> Option<String> {
    let kind = meta.file_type();
    let what = if kind.is_file() {
        if meta.nlink() <= 1 {
            return None;
        }
        return Some(format!(
            "is a regular file with {} hard links, not one hookvisor made",
            meta.nlink()
        ));
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_dir() {
        "a directory"
    } else {
        "something else"
    };
    Some(format!("is {what}, not a regular file"))
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
        match closes.get_or_insert_with(|| watch_closes(file)) {
            Some(inotify) => wait_for_close(inotify, pause),
            None => thread::sleep(pause),
        }
    }
}

/// An inotify instance reporting every close of `file`, or `None` without inotify (or /proc):
/// then waiters only sleep.
fn watch_closes(file: &File) -> Option<inotify::Inotify> {
    use std::os::fd::AsRawFd;
    let inotify = inotify::Inotify::init().ok()?;
    // Through /proc, the watch is on the inode we opened, whatever the path names now.
    inotify
        .watches()
        .add(
            format!("/proc/self/fd/{}", file.as_raw_fd()),
            inotify::WatchMask::CLOSE_WRITE | inotify::WatchMask::CLOSE_NOWRITE,
        )
        .ok()?;
    Some(inotify)
}

/// Waits until `inotify` has events or `pause` has passed, and drops the events.
fn wait_for_close(inotify: &mut inotify::Inotify, pause: Duration) {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    let timeout = PollTimeout::try_from(pause).unwrap_or(PollTimeout::MAX);
    let mut fds = [PollFd::new(inotify.as_fd(), PollFlags::POLLIN)];
    // An error (EINTR) only ends the pause early.
    let _ = poll(&mut fds, timeout);
    let mut buffer = [0u8; 1024];
    while inotify
        .read_events(&mut buffer)
        .is_ok_and(|mut events| events.next().is_some())
    {}
}

/// Renames `path`, which `why` describes, to `<path>.corrupt-<UTC time>` with a warning
/// (rule 4). Nothing there any more is no error: someone moved it first.
fn move_aside(path: &Path, why: &str) -> io::Result<()> {
    let stamp = rfc3339_millis(SystemTime::now()).replace([':', '-'], "");
    let mut aside = PathBuf::from(format!("{}.corrupt-{stamp}", path.display()));
    let mut n = 1;
    while fs::symlink_metadata(&aside).is_ok() {
        aside = PathBuf::from(format!("{}.corrupt-{stamp}-{n}", path.display()));
        n += 1;
    }
    match fs::rename(path, &aside) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    warn(format_args!(
        "{} {why}; moved it aside to {} and started a fresh one",
        path.display(),
        aside.display()
    ));
    Ok(())
}

/// Warns through `tracing`, or, when no subscriber listens (the init installs none), on stderr
/// as `<program>: warning: ...`: a status file moved aside is for a person to see.
fn warn(message: fmt::Arguments<'_>) {
    let listening =
        tracing::dispatcher::get_default(|d| !d.is::<tracing::subscriber::NoSubscriber>());
    if listening {
        tracing::warn!("{message}");
    } else {
        let program = std::env::args_os()
            .next()
            .and_then(|arg0| {
                Path::new(&arg0)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "hookvisor".to_owned());
        eprintln!("{program}: warning: {message}");
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

/// The shape of the file as read: hook entries stay raw until each is parsed on its own, so one
/// entry this version cannot read does not make the whole file corrupt.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusFile {
    #[serde(default, deserialize_with = "null_as_default")]
    hooks: BTreeMap<String, Value>,
    #[serde(default, deserialize_with = "null_as_default")]
    pending_hooks: Vec<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    last_evaluated_at: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    consecutive_hook_turns: u32,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Status, D::Error> {
        let file = StatusFile::deserialize(deserializer)?;
        let mut status = Status {
            hooks: BTreeMap::new(),
            pending_hooks: Vec::new(),
            last_evaluated_at: file.last_evaluated_at,
            consecutive_hook_turns: file.consecutive_hook_turns,
            extra: file.extra,
            unparsed_hooks: BTreeMap::new(),
        };
        for id in file.pending_hooks {
            status.set_pending(&id, true);
        }
        for (id, raw) in file.hooks {
            match HookStatus::deserialize(&raw) {
                Ok(mut entry) => {
                    if entry.hook_id.is_empty() {
                        entry.hook_id.clone_from(&id);
                    }
                    status.hooks.insert(id, entry);
                }
                Err(e) => {
                    // Debug, not warn: every load would repeat it while the entry is there.
                    tracing::debug!(hook = %id, error = %e, "status entry not understood; keeping it as is");
                    status.unparsed_hooks.insert(id, raw);
                }
            }
        }
        Ok(status)
    }
}

impl Serialize for Status {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(untagged)]
        enum Entry<'a> {
            Known(&'a HookStatus),
            Unparsed(&'a Value),
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Out<'a> {
            hooks: BTreeMap<&'a str, Entry<'a>>,
            pending_hooks: &'a [String],
            last_evaluated_at: &'a str,
            #[serde(skip_serializing_if = "is_zero")]
            consecutive_hook_turns: u32,
            #[serde(flatten)]
            extra: &'a Map<String, Value>,
        }
        let mut hooks: BTreeMap<&str, Entry<'_>> = self
            .unparsed_hooks
            .iter()
            .map(|(id, raw)| (id.as_str(), Entry::Unparsed(raw)))
            .collect();
        hooks.extend(
            self.hooks
                .iter()
                .map(|(id, h)| (id.as_str(), Entry::Known(h))),
        );
        Out {
            hooks,
            pending_hooks: &self.pending_hooks,
            last_evaluated_at: self.last_evaluated_at.as_deref().unwrap_or(""),
            consecutive_hook_turns: self.consecutive_hook_turns,
            extra: &self.extra,
        }
        .serialize(serializer)
    }
}

/// discobot writes `""` for a time that is not set.
fn empty_as_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}

/// Go writes a nil map or slice as `null`.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn hook(id: &str, kind: HookKind) -> Hook {
        Hook {
            id: id.to_owned(),
            name: format!("{id} check"),
            kind,
            path: PathBuf::from(format!("/ws/.discobot/hooks/{id}.sh")),
            description: None,
            run_as: crate::hook::RunAs::User,
            blocking: false,
            pattern: None,
            notify_llm: true,
            timeout: kind.default_timeout(),
        }
    }

    fn context(state_dir: &Path) -> Context {
        Context {
            workspace: PathBuf::from("/ws"),
            session_id: "default".to_owned(),
            state_dir: state_dir.to_owned(),
        }
    }

    /// What a run that exited with `exit_code` did, as far as the status records it.
    fn outcome(exit_code: i32, timed_out: bool, duration: Duration) -> RunOutcome {
        RunOutcome {
            exit_code,
            timed_out,
            cancelled: false,
            duration,
            tail: String::new(),
            output_bytes: 0,
            log_truncated: false,
        }
    }

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    /// DESIGN.md's example with values filled in, as discobot would write it.
    const DESIGN_EXAMPLE: &str = r#"{
  "hooks": {
    "go-fmt": {
      "hookId": "go-fmt",
      "hookName": "Go format check",
      "type": "file",
      "lastRunAt": "2026-11-22T05:09:10Z",
      "lastResult": "failure",
      "lastExitCode": 1,
      "outputPath": "/home/u/.discobot/s1/hooks/output/go-fmt.log",
      "runCount": 3,
      "failCount": 2,
      "consecutiveFailures": 1
    },
    "setup": {
      "hookId": "setup",
      "hookName": "setup",
      "type": "session",
      "lastRunAt": "2026-11-22T05:00:00Z",
      "lastResult": "success",
      "lastExitCode": 0,
      "outputPath": "/home/u/.discobot/s1/hooks/output/setup.log",
      "runCount": 1,
      "failCount": 0,
      "consecutiveFailures": 0
    }
  },
  "pendingHooks": [
    "go-fmt"
  ],
  "lastEvaluatedAt": "2026-11-22T05:09:11Z"
}
"#;

    #[test]
    fn design_example_round_trips_byte_for_byte() {
        let status = Status::from_json(DESIGN_EXAMPLE.as_bytes()).unwrap();
        let fmt = &status.hooks["go-fmt"];
        assert_eq!(fmt.kind, HookKind::File);
        assert_eq!(fmt.last_result, RunResult::Failure);
        assert_eq!(fmt.last_exit_code, Some(1));
        assert_eq!(
            (fmt.run_count, fmt.fail_count, fmt.consecutive_failures),
            (3, 2, 1)
        );
        assert_eq!(status.pending_hooks, ["go-fmt"]);
        assert_eq!(
            status.last_evaluated_at.as_deref(),
            Some("2026-11-22T05:09:11Z")
        );
        assert_eq!(String::from_utf8(status.to_json()).unwrap(), DESIGN_EXAMPLE);
    }

    #[test]
    fn written_entries_carry_every_design_field_name() {
        let dir = tempfile::tempdir().unwrap();
        let mut status = Status::default();
        let entry = status.entry(&hook("lint", HookKind::PreCommit), &context(dir.path()));
        entry.begin(at(10));
        let value: Value = serde_json::from_slice(&status.to_json()).unwrap();
        // Sorted: whether serde_json's map keeps file order depends on a workspace-wide feature.
        let mut top: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        top.sort_unstable();
        assert_eq!(top, ["hooks", "lastEvaluatedAt", "pendingHooks"]);
        let entry = value["hooks"]["lint"].as_object().unwrap();
        for field in [
            "hookId",
            "hookName",
            "type",
            "lastRunAt",
            "lastResult",
            "lastExitCode",
            "outputPath",
            "runCount",
            "failCount",
            "consecutiveFailures",
        ] {
            assert!(entry.contains_key(field), "{field} missing from {entry:?}");
        }
        assert_eq!(entry["type"], "pre-commit");
        assert_eq!(entry["lastResult"], "running");
        assert_eq!(entry["lastRunAt"], "1970-01-01T00:00:10Z");
        assert_eq!(
            entry["outputPath"],
            dir.path().join("output/lint.log").display().to_string()
        );
    }

    #[test]
    fn unknown_fields_and_entries_survive_a_read_modify_write() {
        let input = r#"{"hooks":{
            "a":{"hookId":"a","hookName":"a","type":"file","lastResult":"success","runCount":1,
                 "dashboardColor":"green"},
            "b":{"hookId":"b","type":"turn-start","lastResult":"running"}},
          "pendingHooks":["a"],"lastEvaluatedAt":"","consecutiveHookTurns":2,
          "owner":{"tool":"dash","v":3}}"#;
        let mut status = Status::from_json(input.as_bytes()).unwrap();
        assert_eq!(
            status.last_evaluated_at, None,
            "discobot's empty time is unset"
        );
        status.set_pending("a", false);
        status.hooks.get_mut("a").unwrap().run_count += 1;
        let out: Value = serde_json::from_slice(&status.to_json()).unwrap();
        assert_eq!(out["owner"], serde_json::json!({"tool": "dash", "v": 3}));
        assert_eq!(out["hooks"]["a"]["dashboardColor"], "green");
        assert_eq!(out["hooks"]["a"]["runCount"], 2);
        assert_eq!(
            out["hooks"]["b"],
            serde_json::json!({"hookId": "b", "type": "turn-start", "lastResult": "running"}),
            "an entry of an unknown kind is kept verbatim"
        );
        assert_eq!(out["consecutiveHookTurns"], 2);
        assert_eq!(out["pendingHooks"], serde_json::json!([]));
    }

    #[test]
    fn go_nulls_and_missing_fields_read_as_empty() {
        for input in [
            "{}",
            r#"{"hooks":null,"pendingHooks":null,"lastEvaluatedAt":null}"#,
            r#"{"hooks":{},"pendingHooks":[],"lastEvaluatedAt":""}"#,
        ] {
            assert_eq!(
                Status::from_json(input.as_bytes()).unwrap(),
                Status::default(),
                "{input}"
            );
        }
        let dup = Status::from_json(br#"{"pendingHooks":["a","b","a"]}"#).unwrap();
        assert_eq!(
            dup.pending_hooks,
            ["a", "b"],
            "duplicates from another writer are dropped"
        );
    }

    #[test]
    fn entry_refreshes_name_and_replaces_an_unparsed_entry() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let mut status =
            Status::from_json(br#"{"hooks":{"x":{"type":"future-kind","runCount":9}}}"#).unwrap();
        let mut h = hook("x", HookKind::File);
        status
            .entry(&h, &ctx)
            .record(&outcome(0, false, Duration::ZERO), at(5));
        h.name = "Renamed".to_owned();
        let entry = status.entry(&h, &ctx);
        assert_eq!(entry.hook_name, "Renamed");
        assert_eq!(entry.run_count, 1);
        let out: Value = serde_json::from_slice(&status.to_json()).unwrap();
        assert_eq!(out["hooks"]["x"]["type"], "file");
    }

    #[test]
    fn counters_follow_discobot() {
        // (runs as s = success / f = failure, runCount, failCount, consecutiveFailures, last)
        let table = [
            ("", 0, 0, 0, RunResult::Pending),
            ("s", 1, 0, 0, RunResult::Success),
            ("f", 1, 1, 1, RunResult::Failure),
            ("ff", 2, 2, 2, RunResult::Failure),
            ("ffs", 3, 2, 0, RunResult::Success),
            ("ffsf", 4, 3, 1, RunResult::Failure),
            ("sssfffs", 7, 3, 0, RunResult::Success),
            ("fsfsff", 6, 4, 2, RunResult::Failure),
        ];
        for (runs, run_count, fail_count, consecutive, last) in table {
            let mut entry = HookStatus::new("h", "h", HookKind::File);
            for (i, run) in runs.chars().enumerate() {
                let success = run == 's';
                entry.begin(at(100 * i as u64));
                assert_eq!(entry.last_result, RunResult::Running);
                entry.record(
                    &outcome(i32::from(!success), false, Duration::from_millis(1500)),
                    at(100 * i as u64 + 2),
                );
            }
            assert_eq!(
                (
                    entry.run_count,
                    entry.fail_count,
                    entry.consecutive_failures,
                    entry.last_result
                ),
                (run_count, fail_count, consecutive, last),
                "runs {runs:?}"
            );
        }
    }

    #[test]
    fn record_keeps_code_timeout_duration_and_start_time() {
        let mut entry = HookStatus::new("h", "h", HookKind::Session);
        entry.record(
            &outcome(124, true, Duration::from_millis(2_500)),
            at(1_795_324_153),
        );
        assert_eq!(entry.last_exit_code, Some(124));
        assert!(entry.timed_out);
        assert_eq!(entry.duration_ms, Some(2_500));
        // 2.5 s before 05:09:13 is 05:09:10.5; the second is floored.
        assert_eq!(entry.last_run_at.as_deref(), Some("2026-11-22T05:09:10Z"));
        entry.record_unfinished("refused", Duration::ZERO, at(0));
        assert_eq!(entry.last_exit_code, None);
        assert_eq!(entry.last_result, RunResult::Failure);
        assert!(!entry.timed_out, "a later run clears timedOut");
        assert_eq!(entry.note.as_deref(), Some("refused"));
        entry.record(&outcome(0, false, Duration::ZERO), at(1));
        assert_eq!(entry.note, None, "a note describes only its own run");
    }

    #[test]
    fn note_is_a_field_of_the_entry_in_json() {
        let text = br#"{"hooks":{"h":{"type":"session","note":"stopped","x":1}}}"#;
        let status = Status::from_json(text).unwrap();
        let entry = &status.hooks["h"];
        assert_eq!(entry.note.as_deref(), Some("stopped"));
        assert!(!entry.extra.contains_key("note"), "{:?}", entry.extra);
        let out: Value = serde_json::from_slice(&status.to_json()).unwrap();
        assert_eq!(out["hooks"]["h"]["note"], "stopped");
        assert_eq!(out["hooks"]["h"]["x"], 1);
    }

    #[test]
    fn pending_set_is_sorted_and_has_no_duplicates() {
        // (set_pending calls in order, the set afterwards). The set is sorted by id, as
        // discobot keeps it, not in the order hooks became pending: rows 2 and 3 used to expect
        // ["b", "a"]. Nothing takes the run order from it (evaluate.rs walks discovery order).
        type Ops = &'static [(&'static str, bool)];
        let table: [(Ops, &[&str]); 5] = [
            (&[("a", true), ("b", true), ("c", true)], &["a", "b", "c"]),
            (&[("b", true), ("a", true), ("b", true)], &["a", "b"]),
            (
                &[("a", true), ("b", true), ("a", false), ("a", true)],
                &["a", "b"],
            ),
            (
                &[("a", true), ("b", true), ("c", true), ("b", false)],
                &["a", "c"],
            ),
            (&[("a", false), ("x", true), ("x", false)], &[]),
        ];
        for (ops, expected) in table {
            let mut status = Status::default();
            for &(id, pending) in ops {
                status.set_pending(id, pending);
            }
            assert_eq!(status.pending_hooks, expected, "{ops:?}");
            for id in ["a", "b", "c", "x"] {
                assert_eq!(status.is_pending(id), expected.contains(&id));
            }
        }
        let mut status = Status::default();
        assert!(status.set_pending("a", true));
        assert!(!status.set_pending("a", true));
        assert!(status.set_pending("a", false));
        assert!(!status.set_pending("a", false));
    }

    #[test]
    fn pending_ids_sort_as_strings() {
        // Written from discobot's TestAddPendingHooks_SortsHookIDsAlphaNumerically.
        let mut status = Status::default();
        for id in ["hook-2", "hook-10", "hook-1", "hook-2"] {
            status.set_pending(id, true);
        }
        assert_eq!(status.pending_hooks, ["hook-1", "hook-10", "hook-2"]);

        // A file another writer left unsorted reads, and is written back, sorted.
        let read =
            Status::from_json(br#"{"pendingHooks":["z","hook-2","a","hook-10","a"]}"#).unwrap();
        assert_eq!(read.pending_hooks, ["a", "hook-10", "hook-2", "z"]);
        let out: Value = serde_json::from_slice(&read.to_json()).unwrap();
        assert_eq!(
            out["pendingHooks"],
            serde_json::json!(["a", "hook-10", "hook-2", "z"])
        );
    }

    #[test]
    fn last_evaluated_at_is_an_empty_string_until_an_evaluation() {
        // discobot's StatusFile.LastEvaluatedAt is a plain string, "" until the first
        // evaluation, and its TypeScript reader asserts a string: never null, never missing.
        let out: Value = serde_json::from_slice(&Status::default().to_json()).unwrap();
        assert_eq!(out["lastEvaluatedAt"], "", "{out}");
        let mut status = Status::from_json(br#"{"lastEvaluatedAt":null}"#).unwrap();
        let out: Value = serde_json::from_slice(&status.to_json()).unwrap();
        assert_eq!(out["lastEvaluatedAt"], "", "{out}");
        status.last_evaluated_at = Some("2026-11-22T05:09:11Z".into());
        let out: Value = serde_json::from_slice(&status.to_json()).unwrap();
        assert_eq!(out["lastEvaluatedAt"], "2026-11-22T05:09:11Z");
    }

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

    // -----------------------------------------------------------------------------------------
    // A state dir the agent controls (issue 12, item 7): nothing in it may block, bloat or leak.

    /// Longer than any lock timeout below: a store still busy after this is stuck for good.
    const STUCK: Duration = Duration::from_secs(20);

    /// Runs `f` on a thread and returns what it gives, failing the test if it is still busy
    /// after [`STUCK`]: a store that blocks on a hostile file fails the test instead of hanging
    /// it (the thread stays blocked until the test binary exits).
    fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (done, result) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(f());
        });
        match result.recv_timeout(STUCK) {
            Ok(value) => value,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("{what}: still blocked after {STUCK:?}")
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
        }
    }

    /// The files `<name>.corrupt-*` of `dir`.
    fn set_aside(dir: &Path, name: &str) -> Vec<PathBuf> {
        let prefix = format!("{name}.corrupt-");
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&prefix)
            })
            .collect()
    }

    /// The reader sees an empty status and moves nothing; the next writer moves the hostile
    /// `status.json` aside (returned) and writes a fresh regular one. Neither blocks.
    fn assert_status_moved_aside(dir: &Path) -> PathBuf {
        let store = StatusStore::new(dir.join("status.json"));
        let reader = store.clone();
        // Not assert_eq: an oversized status would fill the terminal.
        let loaded = within("load", move || reader.load()).unwrap();
        assert!(loaded == Status::default(), "the reader read it");
        assert_eq!(set_aside(dir, "status.json"), Vec::<PathBuf>::new());
        let writer = store.clone();
        within("update", move || {
            writer.update(|s| s.set_pending("a", true))
        })
        .unwrap();
        let meta = fs::symlink_metadata(store.path()).unwrap();
        assert!(meta.file_type().is_file(), "{meta:?}");
        assert_eq!(store.load().unwrap().pending_hooks, ["a"]);
        let aside = set_aside(dir, "status.json");
        assert_eq!(aside.len(), 1, "{aside:?}");
        aside.into_iter().next().unwrap()
    }

    fn mkfifo(path: &Path) {
        nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    }

    #[test]
    fn a_fifo_status_json_is_moved_aside_not_read() {
        let dir = tempfile::tempdir().unwrap();
        mkfifo(&dir.path().join("status.json"));
        let aside = assert_status_moved_aside(dir.path());
        assert!(fs::symlink_metadata(aside).unwrap().file_type().is_fifo());
    }

    #[test]
    fn a_directory_named_status_json_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("status.json")).unwrap();
        fs::write(dir.path().join("status.json/inside"), "kept").unwrap();
        let aside = assert_status_moved_aside(dir.path());
        assert_eq!(fs::read_to_string(aside.join("inside")).unwrap(), "kept");
    }

    #[test]
    fn a_symlinked_status_json_is_not_followed_and_its_target_not_leaked() {
        let dir = tempfile::tempdir().unwrap();
        // A root-only file that happens to be JSON: followed, its fields would be kept as
        // unknown ones and written into the new status.json, which dashboards and the user read.
        let secret = dir.path().join("secret.json");
        fs::write(&secret, r#"{"apiKey":"hunter2"}"#).unwrap();
        fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&secret, dir.path().join("status.json")).unwrap();

        let store = StatusStore::new(dir.path().join("status.json"));
        assert!(
            store.load().unwrap().extra.is_empty(),
            "the reader followed"
        );
        let aside = assert_status_moved_aside(dir.path());
        assert_eq!(fs::read_link(aside).unwrap(), secret);
        let written = fs::read_to_string(store.path()).unwrap();
        assert!(!written.contains("hunter2"), "{written}");
        assert_eq!(
            fs::metadata(store.path()).unwrap().permissions().mode() & 0o777,
            0o644,
            "the mode is not the target's either"
        );
        assert_eq!(
            fs::read_to_string(&secret).unwrap(),
            r#"{"apiKey":"hunter2"}"#
        );
        assert_eq!(
            fs::metadata(&secret).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn a_status_json_linked_to_dev_zero_is_not_read_forever() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("status.json")).unwrap();
        let aside = assert_status_moved_aside(dir.path());
        assert_eq!(fs::read_link(aside).unwrap(), Path::new("/dev/zero"));
    }

    #[test]
    fn sockets_devices_and_hard_links_at_status_json_are_moved_aside() {
        // A socket cannot even be opened; a hard link may be to any file of the file system
        // (every status.json this code writes has one link).
        let dir = tempfile::tempdir().unwrap();
        let _socket =
            std::os::unix::net::UnixListener::bind(dir.path().join("status.json")).unwrap();
        let aside = assert_status_moved_aside(dir.path());
        assert!(fs::symlink_metadata(aside).unwrap().file_type().is_socket());

        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere.json");
        fs::write(&elsewhere, r#"{"apiKey":"hunter2"}"#).unwrap();
        fs::hard_link(&elsewhere, dir.path().join("status.json")).unwrap();
        assert_status_moved_aside(dir.path());
        let written = fs::read_to_string(dir.path().join("status.json")).unwrap();
        assert!(!written.contains("hunter2"), "{written}");
        assert_eq!(
            fs::read_to_string(&elsewhere).unwrap(),
            r#"{"apiKey":"hunter2"}"#
        );

        // Only root can make a device node (then it is the same /dev/zero, without a symlink).
        if nix::unistd::Uid::effective().is_root() {
            let dir = tempfile::tempdir().unwrap();
            nix::sys::stat::mknod(
                &dir.path().join("status.json"),
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::from_bits_truncate(0o666),
                nix::sys::stat::makedev(1, 5),
            )
            .unwrap();
            let aside = assert_status_moved_aside(dir.path());
            assert!(
                fs::symlink_metadata(aside)
                    .unwrap()
                    .file_type()
                    .is_char_device()
            );
        }
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

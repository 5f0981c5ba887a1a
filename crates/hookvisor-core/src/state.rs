//! The state dir: the one place that knows the name of every file hookvisor keeps there, and
//! the one atomic writer every such file (and the settings and git hooks written elsewhere) goes
//! through.
//!
//! Paths are only named here; creating them stays with their owners, which create them while
//! acting as the run user (`user_fs::act_as`), so they belong to that user without a chown.

use std::fs::{self, File};
use std::io::{self, Read as _, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use crate::untrusted::not_ours;

/// Mode of a new file of [`write_atomic`]: dashboards running as other users read it.
pub(crate) const FILE_MODE: u32 = 0o644;

/// Temp files of [`write_atomic`] end so, after `.<name>.XXXXXX`: hidden, and recognisable.
pub(crate) const TEMP_SUFFIX: &str = ".tmp";

/// A session's state dir and the names of the files in it (docs/DESIGN.md, "State dir").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StateDir {
    root: PathBuf,
}

impl StateDir {
    /// The state dir at `root`; nothing is touched.
    pub fn new(root: impl Into<PathBuf>) -> StateDir {
        StateDir { root: root.into() }
    }

    /// The directory itself.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The name of [`StateDir::status`], for a caller that opens it relative to the state dir
    /// it holds open.
    pub const STATUS_FILE: &'static str = "status.json";

    /// `status.json`, the record of every hook's last run.
    pub fn status(&self) -> PathBuf {
        self.root.join(Self::STATUS_FILE)
    }

    /// `status.json.lock`, which writers of `status.json` hold.
    pub fn status_lock(&self) -> PathBuf {
        lock_path(&self.status())
    }

    /// `output/`, where hook logs live.
    pub fn output_dir(&self) -> PathBuf {
        self.root.join("output")
    }

    /// `output/<hookId>.log`, the log of a hook's last run.
    pub fn log(&self, hook_id: &str) -> PathBuf {
        self.output_dir().join(format!("{hook_id}.log"))
    }

    /// `runs/`, the run history of every hook (`crate::status::history`).
    pub fn runs_dir(&self) -> PathBuf {
        self.root.join("runs")
    }

    /// `runs/<hookId>.jsonl`, a hook's last runs, one JSON object a line, oldest first.
    pub fn run_history(&self, hook_id: &str) -> PathBuf {
        self.runs_dir().join(format!("{hook_id}.jsonl"))
    }

    /// `runs/<hookId>/`, the logs of a hook's last runs.
    pub fn run_logs_dir(&self, hook_id: &str) -> PathBuf {
        self.runs_dir().join(hook_id)
    }

    /// `runs/<hookId>/<run>.log`, the log of run number `run` of a hook.
    pub fn run_log(&self, hook_id: &str, run: u64) -> PathBuf {
        self.run_logs_dir(hook_id).join(format!("{run}.log"))
    }

    /// `changed/<hookId>`, the changed-file list handed to a file hook.
    pub fn changed_list(&self, hook_id: &str) -> PathBuf {
        self.root.join("changed").join(hook_id)
    }

    /// `.last-eval`, the evaluator's per-hook cutoffs.
    pub fn eval_marker(&self) -> PathBuf {
        self.root.join(".last-eval")
    }

    /// `eval.lock`, held by one evaluation at a time.
    pub fn eval_lock(&self) -> PathBuf {
        self.root.join("eval.lock")
    }

    /// `changes.journal`, where deletions are remembered between scans.
    pub fn changes_journal(&self) -> PathBuf {
        self.root.join("changes.journal")
    }

    /// The directory of the change watcher's sync cookies: the state dir itself, which is ours
    /// and outside the watched workspace's `.git`.
    pub fn cookie_dir(&self) -> &Path {
        &self.root
    }

    /// `context.json`, the context buffer's FIFO of piped hook output (docs/EVENTS.md §1.6).
    pub fn context_buffer(&self) -> PathBuf {
        self.root.join("context.json")
    }

    /// `agent-turns.json`, the adapters' turn log.
    pub fn turn_log(&self) -> PathBuf {
        self.root.join("agent-turns.json")
    }

    /// `fire/`, where the payload files of each hook run sit while it runs.
    pub fn run_files_dir(&self) -> PathBuf {
        self.root.join("fire")
    }

    /// `children/`, the state dirs of the child sessions this one started (spawned agents,
    /// loops inside a loop).
    pub fn children_dir(&self) -> PathBuf {
        self.root.join("children")
    }

    /// `loop/`, the agent loop's directory (its prompt, context and logs).
    pub fn loop_dir(&self) -> PathBuf {
        self.root.join("loop")
    }

    /// `session.json`, the agent loop's record of its session.
    pub fn session_record(&self) -> PathBuf {
        self.root.join("session.json")
    }
}

/// What a crash right after [`write_atomic`] may leave behind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Durability {
    /// The file and its directory are fsynced: after a crash the file is the new one.
    Durable,
    /// The file's data is on disk before the rename, its directory is not: after a crash the
    /// file is the old one or the new one, whole, never empty; only the last write may be lost.
    /// An `fdatasync` orders it, unless the file system does so itself: tmpfs, and ext4 with its
    /// default `auto_da_alloc` when the rename replaces a file (README, "Crashes and status.json").
    /// For records written on every tool call, where a directory fsync per call is too dear.
    Whole,
    /// No fsync: readers still never see a partial file, but after a crash it may be the old
    /// one or empty. For files whose loss is harmless and written too often for a sync.
    Replaceable,
}

/// Replaces `path` with `bytes` so that no reader ever sees a partial file: write a temp file in
/// the same directory, rename it over, and sync as `durability` says.
///
/// The file keeps the permission bits of the regular file it replaces; a new file, or one
/// replacing a symbolic link, a hard link or anything else, gets 0644 (a link's target is not
/// read, nor its mode copied). The temp file is created with `O_EXCL`, so never through a
/// symbolic link, and the rename replaces a link instead of following it. Concurrent writers of
/// the same path must serialise themselves (the last rename wins).
pub fn write_atomic(path: &Path, bytes: &[u8], durability: Durability) -> io::Result<()> {
    let existing = fs::symlink_metadata(path).ok();
    let mode = match &existing {
        Some(meta) if not_ours(meta).is_none() => meta.permissions().mode() & 0o777,
        _ => FILE_MODE,
    };
    replace_file(path, bytes, durability, mode, existing.is_some())
}

/// [`write_atomic`] giving the file exactly `mode`, whatever it replaces: for a git hook, which
/// must be executable from the moment git can see it.
pub(crate) fn write_atomic_with_mode(
    path: &Path,
    bytes: &[u8],
    durability: Durability,
    mode: u32,
) -> io::Result<()> {
    let replaces = durability == Durability::Whole && fs::symlink_metadata(path).is_ok();
    replace_file(path, bytes, durability, mode, replaces)
}

/// The temp file, the sync `durability` asks for and the rename of [`write_atomic`];
/// `replaces` says whether `path` exists (read once by the caller, which needed its mode).
fn replace_file(
    path: &Path,
    bytes: &[u8],
    durability: Durability,
    mode: u32,
    replaces: bool,
) -> io::Result<()> {
    let dir = parent_dir(path);
    let prefix = temp_prefix(path)
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "path has no file name"))?;
    let mut temp = tempfile::Builder::new()
        .prefix(&prefix)
        .suffix(TEMP_SUFFIX)
        .tempfile_in(dir)?;
    temp.write_all(bytes)?;
    // tempfile creates 0600, and fchmod is not reduced by the umask.
    temp.as_file()
        .set_permissions(fs::Permissions::from_mode(mode))?;
    match durability {
        Durability::Durable => temp.as_file().sync_all()?,
        // The data must be on disk before the rename can be: then a crash shows old or new.
        // Some file systems order that themselves when the rename replaces a file.
        Durability::Whole => {
            if !(replaces && crate::replace_order::orders_replace(temp.as_file())) {
                temp.as_file().sync_data()?;
            }
        }
        Durability::Replaceable => {}
    }
    temp.persist(path).map_err(|e| e.error)?;
    if durability == Durability::Durable {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

/// All of `reader`, or `None` when it holds more than `limit` bytes: a state file anybody with
/// the run user's uid can grow is read bounded, however large it gets.
pub fn read_capped(reader: impl io::Read, limit: u64) -> io::Result<Option<Vec<u8>>> {
    // Room for a usual state file at once: from empty, std reads a `Take` 32 bytes first and
    // then in doubling steps, seven reads for a 500-byte status.json.
    let mut bytes = Vec::with_capacity(limit.min(8192) as usize + 1);
    reader
        .take(limit.saturating_add(1))
        .read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= limit).then_some(bytes))
}

/// The directory `path` is in; `.` for a bare file name.
pub(crate) fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// The lock file of `path`, `<name>.lock` next to it, which its writers hold (`status.json`'s
/// is `status.json.lock`).
pub(crate) fn lock_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_owned();
    name.push(".lock");
    path.with_file_name(name)
}

/// Temp files of `path` are `.<name>.XXXXXX.tmp`: hidden, and recognisable as ours.
pub(crate) fn temp_prefix(path: &Path) -> Option<String> {
    path.file_name()
        .map(|name| format!(".{}.", name.to_string_lossy()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    #[test]
    fn every_path_is_inside_the_state_dir() {
        let state = StateDir::new("/s");
        assert_eq!(state.status(), Path::new("/s/status.json"));
        assert_eq!(state.status_lock(), Path::new("/s/status.json.lock"));
        assert_eq!(state.log("a"), Path::new("/s/output/a.log"));
        assert_eq!(state.changed_list("a"), Path::new("/s/changed/a"));
        assert_eq!(state.eval_marker(), Path::new("/s/.last-eval"));
        assert_eq!(state.eval_lock(), Path::new("/s/eval.lock"));
        assert_eq!(state.changes_journal(), Path::new("/s/changes.journal"));
        assert_eq!(state.cookie_dir(), Path::new("/s"));
        assert_eq!(state.turn_log(), Path::new("/s/agent-turns.json"));
        assert_eq!(state.context_buffer(), Path::new("/s/context.json"));
    }

    #[test]
    fn the_given_mode_wins_over_the_old_file_and_no_temp_file_is_left() {
        let dir = tempfile::tempdir().unwrap();
        let hook = dir.path().join("pre-commit");
        fs::write(&hook, "old").unwrap();
        fs::set_permissions(&hook, fs::Permissions::from_mode(0o600)).unwrap();
        write_atomic_with_mode(&hook, b"new", Durability::Replaceable, 0o755).unwrap();
        assert_eq!(fs::read(&hook).unwrap(), b"new");
        assert_eq!(fs::metadata(&hook).unwrap().mode() & 0o7777, 0o755);
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        // Every durability replaces the file whole and leaves no temp file.
        for durability in [Durability::Durable, Durability::Whole] {
            write_atomic(&hook, b"newer", durability).unwrap();
            assert_eq!(fs::read(&hook).unwrap(), b"newer");
            assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
        }
    }

    #[test]
    fn a_missing_directory_is_an_error_not_created() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("missing/file");
        assert!(write_atomic(&path, b"x", Durability::Durable).is_err());
        assert!(!dir.path().join("missing").exists());
    }
}

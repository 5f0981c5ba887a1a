//! What changed in a workspace: its dirty set, when each dirty file last changed, and which
//! files were deleted since when (DESIGN.md, "End-of-turn evaluation", step 1).
//!
//! The rules, written once here:
//!
//! 1. The scan's cutoff is taken *before* anything is looked at, with the clock the kernel stamps
//!    files with, so a file written after the cutoff always has a stamp at or after it.
//! 2. In a git work tree the dirty set is what `git status` reports under the workspace:
//!    modified vs `HEAD`, staged, untracked and not ignored, deleted (staged or not), both sides of
//!    a rename (the new path present, the old one deleted), every file of a repository with no
//!    commit yet. Only dirty files are stat'ed; clean files cost nothing beyond git's own scan.
//!    git runs with `GIT_OPTIONAL_LOCKS=0`, so a scan never takes the index lock and a concurrent
//!    `git commit` never fails because of it.
//! 3. Outside git (no work tree, or no `git` program) every file of the workspace is dirty: a walk
//!    that honours `.gitignore` files, skips `.git` and includes other hidden files. Deletions
//!    are the paths of the previous walk that are gone.
//! 4. A present file changed at `max(mtime, ctime)`; a whole-second stamp is read as the end of
//!    its second, as it may come from a file system with second granularity. Coarse stamps can
//!    only make a file look changed, never hide a change.
//! 5. A deleted path was noticed at the cutoff of the first scan that saw it deleted, and keeps
//!    that time, recorded in the journal, while it stays deleted; a path that is back (or whose
//!    deletion was committed) leaves the journal. A hook whose cutoff is later has already seen
//!    the deletion. Outside git, where a deletion never ends, the journal forgets it after
//!    [`ScanOptions::deleted_retention`].
//! 6. Paths are relative to the workspace, with `/` separators, and kept as bytes: a name that
//!    is not UTF-8 reaches the hooks exactly as it is on disk. Where a path is serialised (the
//!    journal, [`DirtyFile`]), such a name is written as a NUL followed by the hex of its bytes;
//!    no file name holds a NUL, so the two spellings never meet.
//!
//! The types say nothing of git, so a file-system watcher can produce them as well.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::git::{Git, GitError};
use crate::state::{Durability, parent_dir, write_atomic};

/// A point in time, in nanoseconds since the Unix epoch (serialised as that number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(i64);

const NANOS_PER_SEC: i64 = 1_000_000_000;

impl Timestamp {
    /// Now, read from the clock the kernel stamps files with (`CLOCK_REALTIME_COARSE`), so that
    /// any file written afterwards has an mtime and ctime at or after it.
    pub fn now() -> Timestamp {
        match nix::time::clock_gettime(nix::time::ClockId::CLOCK_REALTIME_COARSE) {
            Ok(t) => Timestamp::from_parts(t.tv_sec(), t.tv_nsec()),
            // Not on this kernel: one tick (at most 10 ms) back from the fine clock is as early.
            Err(_) => Timestamp(Timestamp::from_system_time(SystemTime::now()).0 - 10_000_000),
        }
    }

    /// The time `t`, saturating outside the years 1678..2262.
    pub(crate) fn from_system_time(t: SystemTime) -> Timestamp {
        let nanos = match t.duration_since(UNIX_EPOCH) {
            Ok(after) => i64::try_from(after.as_nanos()).unwrap_or(i64::MAX),
            Err(before) => i64::try_from(before.duration().as_nanos())
                .map(|n| -n)
                .unwrap_or(i64::MIN),
        };
        Timestamp(nanos)
    }

    /// When the file behind `meta` last changed: `max(mtime, ctime)` (rule 4 of the module
    /// docs: a whole-second stamp counts as the end of its second).
    pub(crate) fn of_metadata(meta: &fs::Metadata) -> Timestamp {
        Timestamp::changed_at(
            (meta.mtime(), meta.mtime_nsec()),
            (meta.ctime(), meta.ctime_nsec()),
        )
    }

    /// [`Timestamp::of_metadata`] on `(seconds, nanoseconds)` pairs.
    fn changed_at(mtime: (i64, i64), ctime: (i64, i64)) -> Timestamp {
        let mtime = Timestamp::from_parts(mtime.0, mtime.1);
        let ctime = Timestamp::from_parts(ctime.0, ctime.1);
        let latest = mtime.max(ctime);
        if latest.0.rem_euclid(NANOS_PER_SEC) == 0 {
            Timestamp(latest.0.saturating_add(NANOS_PER_SEC - 1))
        } else {
            latest
        }
    }

    /// The timestamp `nanos` nanoseconds after the epoch.
    pub fn from_nanos(nanos: i64) -> Timestamp {
        Timestamp(nanos)
    }

    /// Nanoseconds since the epoch.
    pub fn as_nanos(self) -> i64 {
        self.0
    }

    /// The same instant as a [`SystemTime`].
    pub fn to_system_time(self) -> SystemTime {
        let magnitude = Duration::from_nanos(self.0.unsigned_abs());
        if self.0 >= 0 {
            UNIX_EPOCH + magnitude
        } else {
            UNIX_EPOCH - magnitude
        }
    }

    fn from_parts(secs: i64, nanos: i64) -> Timestamp {
        Timestamp(secs.saturating_mul(NANOS_PER_SEC).saturating_add(nanos))
    }
}

/// One dirty path of a workspace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DirtyFile {
    /// Relative to the workspace, `/`-separated, never starting with `./` (module rule 6).
    #[serde(with = "name")]
    pub path: PathBuf,
    /// Whether it exists, and since when it is as it is.
    pub state: FileState,
}

/// Whether a dirty path exists.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "kind")]
pub enum FileState {
    /// The file exists.
    Present {
        /// `max(mtime, ctime)` (module rule 4).
        changed_at: Timestamp,
    },
    /// The file is gone.
    Deleted {
        /// The cutoff of the first scan that saw it gone (module rule 5).
        noticed_at: Timestamp,
    },
}

impl FileState {
    /// The time this state is dated from: `changed_at` or `noticed_at`.
    pub(crate) fn since(&self) -> Timestamp {
        match *self {
            FileState::Present { changed_at } => changed_at,
            FileState::Deleted { noticed_at } => noticed_at,
        }
    }
}

/// The dirty set of a workspace at one moment.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChangeScan {
    /// Taken before scanning: the next evaluation asks for changes since this.
    pub cutoff: Timestamp,
    /// Every dirty path, sorted by path, each once.
    pub files: Vec<DirtyFile>,
    /// Whether the dirty set came from git (`false`: a walk of the whole workspace).
    pub git: bool,
}

impl ChangeScan {
    /// The files changed or deleted at or after `since`; `None` gives every dirty file.
    pub fn changed_since(&self, since: Option<Timestamp>) -> impl Iterator<Item = &DirtyFile> {
        self.files
            .iter()
            .filter(move |f| since.is_none_or(|since| f.state.since() >= since))
    }

    /// Every dirty path, deletions included, sorted.
    pub fn dirty_paths(&self) -> impl Iterator<Item = &Path> {
        self.files.iter().map(|f| f.path.as_path())
    }
}

/// Options of a scan; [`ScanOptions::default`] suits an evaluation.
#[derive(Debug, Clone)]
pub struct ScanOptions {
    /// Paths never reported nor walked (the state dir when it lives in the workspace): absolute,
    /// or relative to the workspace. Default: none.
    pub exclude: Vec<PathBuf>,
    /// The git program. A missing program means a walk. Default: `git` from `PATH`.
    pub git: Git,
    /// Whether to ask git at all; `false` always walks. Default: `true`.
    pub use_git: bool,
    /// How long the journal keeps a deletion outside git, where it never ends (module rule 5).
    /// Default: 24 hours.
    pub deleted_retention: Duration,
}

impl Default for ScanOptions {
    fn default() -> Self {
        ScanOptions {
            exclude: Vec::new(),
            git: Git::default(),
            use_git: true,
            deleted_retention: Duration::from_secs(24 * 60 * 60),
        }
    }
}

impl ScanOptions {
    /// The defaults.
    pub fn new() -> ScanOptions {
        ScanOptions::default()
    }

    /// Adds a path never to report nor walk (absolute, or relative to the workspace).
    pub fn exclude(mut self, path: impl Into<PathBuf>) -> ScanOptions {
        self.exclude.push(path.into());
        self
    }

    /// Sets the git program (`use_git(false)` to walk even in a work tree).
    pub fn git(mut self, program: impl Into<OsString>) -> ScanOptions {
        self.git = Git::new(program);
        self
    }

    /// Whether to ask git at all.
    pub fn use_git(mut self, yes: bool) -> ScanOptions {
        self.use_git = yes;
        self
    }

    /// How long a deletion is remembered outside git.
    pub fn deleted_retention(mut self, retention: Duration) -> ScanOptions {
        self.deleted_retention = retention;
        self
    }
}

/// Why a scan failed. A corrupt journal is not one: it is reset with a warning.
#[derive(Debug, thiserror::Error)]
pub enum ChangesError {
    /// The workspace cannot be read.
    #[error(
        "workspace {}: {source}; pass an existing, readable directory with --workspace",
        path.display()
    )]
    Workspace {
        /// The workspace given.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// git could not be started (a missing git is not an error: the workspace is walked).
    #[error("cannot run `{command}`: {source}; check that git is installed and executable")]
    GitSpawn {
        /// The command line.
        command: String,
        /// What the system said.
        source: io::Error,
    },
    /// git ran and failed, or printed what it should not.
    #[error("`{command}` failed: {message}; fix the repository (run the command to see all)")]
    Git {
        /// The command line and where it ran.
        command: String,
        /// The first line of its stderr, or what was wrong with its output.
        message: String,
    },
    /// The journal could not be written.
    #[error(
        "cannot write the change journal {}: {source}; make the state dir writable or \
         pass another with --state-dir",
        path.display()
    )]
    Journal {
        /// The journal's path.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// The directory of the change watcher's sync cookies could not be created.
    #[error(
        "cannot create the change watcher's cookie dir {}: {source}; make the state dir \
         writable or pass another with --state-dir",
        path.display()
    )]
    CookieDir {
        /// The directory.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
}

/// Scans `workspace` with the default options; `journal` is a file this module owns
/// (normally `<state>/changes.journal`) where deletions are remembered between scans.
pub fn scan(workspace: &Path, journal: &Path) -> Result<ChangeScan, ChangesError> {
    scan_with(workspace, journal, &ScanOptions::default())
}

/// [`scan`] with options (the module docs give the rules).
pub fn scan_with(
    workspace: &Path,
    journal: &Path,
    options: &ScanOptions,
) -> Result<ChangeScan, ChangesError> {
    // Rule 1: before anything is looked at.
    scan_at(workspace, journal, options, Timestamp::now())
}

/// [`scan_with`] with a cutoff the caller took (rule 1: before anything was looked at; a
/// watcher takes it before it drains its events).
pub(crate) fn scan_at(
    workspace: &Path,
    journal: &Path,
    options: &ScanOptions,
    cutoff: Timestamp,
) -> Result<ChangeScan, ChangesError> {
    let workspace = canonical_workspace(workspace)?;
    let excluded = Excluded::new(&workspace, &options.exclude);
    let (previous, reset) = Journal::load(journal, &workspace);

    let git = if options.use_git {
        git_dirty(&workspace, &options.git, &excluded, &[])?
    } else {
        None
    };
    let (observed, walked) = match git {
        Some(observed) => (observed, None),
        None => {
            let present = walk(&workspace, &excluded);
            let mut observed: BTreeMap<OsString, Observed> = present
                .into_iter()
                .map(|(path, at)| (path, Observed::Present(at)))
                .collect();
            let retention = i64::try_from(options.deleted_retention.as_nanos()).unwrap_or(i64::MAX);
            let gone = previous
                .walk
                .iter()
                .flatten()
                .chain(previous.deleted.iter().filter_map(|(path, noticed)| {
                    (cutoff.0.saturating_sub(noticed.0) <= retention).then_some(path)
                }));
            for path in gone {
                // A file the walk no longer sees may only have become ignored: not a deletion.
                if !observed.contains_key(path)
                    && !excluded.contains(path.as_bytes())
                    && fs::symlink_metadata(workspace.join(path)).is_err()
                {
                    observed.insert(path.clone(), Observed::Deleted);
                }
            }
            let walked: Vec<OsString> = observed
                .iter()
                .filter(|(_, o)| matches!(o, Observed::Present(_)))
                .map(|(p, _)| p.clone())
                .collect();
            (observed, Some(walked))
        }
    };
    settle(
        &workspace, journal, previous, reset, observed, walked, cutoff,
    )
}

/// The scan `previous` would become if it were made again at `cutoff`, looking again only at
/// `touched`: paths relative to the workspace, each a file or a directory (all it holds), that
/// may have changed since `previous` was made. Every other path keeps what `previous` said.
///
/// This is what a file-system watcher asks for: the dirty set is the same as a full scan's as
/// long as `touched` holds every path changed since `previous` and git's index and `HEAD` did
/// not move. Outside git, or when git refuses a path (one inside a submodule), it is a full scan.
pub(crate) fn rescan(
    workspace: &Path,
    journal: &Path,
    options: &ScanOptions,
    cutoff: Timestamp,
    previous: &ChangeScan,
    touched: &[PathBuf],
) -> Result<ChangeScan, ChangesError> {
    if !previous.git || !options.use_git {
        return scan_at(workspace, journal, options, cutoff);
    }
    let workspace = canonical_workspace(workspace)?;
    let excluded = Excluded::new(&workspace, &options.exclude);
    let touched: BTreeSet<&[u8]> = touched
        .iter()
        .map(|p| trim_slashes(p.as_os_str().as_bytes()))
        .filter(|p| !p.is_empty() && !excluded.contains(p))
        .collect();
    let (mut journal_before, reset) = Journal::load(journal, &workspace);
    let is_touched = |path: &[u8]| {
        touched.contains(path)
            || path
                .iter()
                .enumerate()
                .any(|(i, &b)| b == b'/' && touched.contains(&path[..i]))
    };
    let mut observed: BTreeMap<OsString, Observed> = previous
        .files
        .iter()
        .filter(|f| !is_touched(f.path.as_os_str().as_bytes()))
        .map(|f| {
            let seen = match f.state {
                FileState::Present { changed_at } => Observed::Present(changed_at),
                FileState::Deleted { .. } => Observed::Deleted,
            };
            (f.path.clone().into_os_string(), seen)
        })
        .collect();
    if !touched.is_empty() {
        let pathspecs: Vec<&OsStr> = touched.into_iter().map(OsStr::from_bytes).collect();
        match git_dirty(&workspace, &options.git, &excluded, &pathspecs) {
            Ok(Some(found)) => observed.extend(found),
            Ok(None) | Err(ChangesError::Git { .. }) => {
                return scan_at(&workspace, journal, options, cutoff);
            }
            Err(e) => return Err(e),
        }
    }
    // Deletions the previous scan dated keep their date even if the journal was reset since.
    for f in &previous.files {
        if let FileState::Deleted { noticed_at } = f.state {
            journal_before
                .deleted
                .entry(f.path.clone().into_os_string())
                .or_insert(noticed_at);
        }
    }
    settle(
        &workspace,
        journal,
        journal_before,
        reset,
        observed,
        None,
        cutoff,
    )
}

fn trim_slashes(mut path: &[u8]) -> &[u8] {
    while let Some(rest) = path.strip_suffix(b"/") {
        path = rest;
    }
    path
}

fn canonical_workspace(workspace: &Path) -> Result<PathBuf, ChangesError> {
    workspace
        .canonicalize()
        .map_err(|source| ChangesError::Workspace {
            path: workspace.to_path_buf(),
            source,
        })
}

/// Dates what a scan observed (rule 5) and writes the journal when it changed. `walked` is the
/// walk's file list outside git, `None` when git gave the dirty set.
fn settle(
    workspace: &Path,
    journal: &Path,
    previous: Journal,
    reset: bool,
    observed: BTreeMap<OsString, Observed>,
    walked: Option<Vec<OsString>>,
    cutoff: Timestamp,
) -> Result<ChangeScan, ChangesError> {
    let from_git = walked.is_none();
    // Rule 5: a deletion keeps the time it was first noticed.
    let mut next = Journal {
        version: JOURNAL_VERSION,
        workspace: workspace.to_string_lossy().into_owned(),
        deleted: BTreeMap::new(),
        walk: walked,
    };
    let files = observed
        .into_iter()
        .map(|(path, observed)| {
            let state = match observed {
                Observed::Present(changed_at) => FileState::Present { changed_at },
                Observed::Deleted => {
                    let noticed_at = previous.deleted.get(&path).copied().unwrap_or(cutoff);
                    next.deleted.insert(path.clone(), noticed_at);
                    FileState::Deleted { noticed_at }
                }
            };
            DirtyFile {
                path: PathBuf::from(path),
                state,
            }
        })
        .collect();
    if reset || next != previous {
        next.save(journal)?;
    }
    Ok(ChangeScan {
        cutoff,
        files,
        git: from_git,
    })
}

/// What a scan saw of one path, before the journal dates deletions.
#[derive(Debug, Clone, Copy)]
enum Observed {
    Present(Timestamp),
    Deleted,
}

/// The excluded paths, relative to the workspace, as bytes without a trailing `/`.
struct Excluded(Vec<Vec<u8>>);

impl Excluded {
    fn new(workspace: &Path, exclude: &[PathBuf]) -> Excluded {
        let relative = exclude
            .iter()
            .filter_map(|path| {
                let absolute = if path.is_absolute() {
                    path.canonicalize().unwrap_or_else(|_| path.clone())
                } else {
                    workspace.join(path)
                };
                let rel = absolute.strip_prefix(workspace).ok()?;
                let bytes = rel.as_os_str().as_bytes();
                // Excluding the workspace itself would hide everything; that is never meant.
                (!bytes.is_empty()).then(|| bytes.to_vec())
            })
            .collect();
        Excluded(relative)
    }

    fn contains(&self, rel: impl AsRef<[u8]>) -> bool {
        let rel = rel.as_ref();
        self.0
            .iter()
            .any(|ex| rel.starts_with(ex) && (rel.len() == ex.len() || rel[ex.len()] == b'/'))
    }
}

/// The dirty set according to git, or `None` when the workspace is not in a work tree or git
/// is not installed (rule 3).
///
/// With `pathspecs` (relative to the workspace, taken literally) only those paths are asked
/// about; a path git cannot answer for makes it fail with [`ChangesError::Git`].
fn git_dirty(
    workspace: &Path,
    git: &Git,
    excluded: &Excluded,
    pathspecs: &[&OsStr],
) -> Result<Option<BTreeMap<OsString, Observed>>, ChangesError> {
    let Some(prefix) = git_prefix(workspace, git)? else {
        return Ok(None);
    };
    let mut args: Vec<OsString> = [
        "status",
        "--porcelain=v1",
        "-z",
        "--untracked-files=all",
        "--no-renames",
    ]
    .map(OsString::from)
    .into();
    if !pathspecs.is_empty() {
        args.push("--".into());
        args.extend(pathspecs.iter().map(|p| {
            let mut literal = OsString::from(":(literal)");
            literal.push(p);
            literal
        }));
    } else if !prefix.is_empty() {
        // Only the workspace's part of the repository; at the top, no pathspec keeps git's
        // fast paths (the untracked cache) open.
        args.extend(["--".into(), ".".into()]);
    }
    let Some(stdout) = run_git(workspace, git, &args)? else {
        return Ok(None);
    };
    let paths = parse_porcelain(&stdout, &prefix).map_err(|message| ChangesError::Git {
        command: git.command_line(workspace, &args),
        message,
    })?;
    let paths: Vec<&[u8]> = paths
        .into_iter()
        .filter(|p| !excluded.contains(p))
        .collect();
    Ok(Some(stat_all(workspace, &paths)))
}

/// The workspace's path inside its work tree (`sub/dir/`, empty at the top), or `None` when
/// the workspace is not in one.
///
/// A `.git` in the workspace itself settles it without a process (the common case, and the one
/// that sits on every turn); anything else is asked of git, which knows about `GIT_DIR`,
/// ceilings and file-system boundaries.
fn git_prefix(workspace: &Path, git: &Git) -> Result<Option<Vec<u8>>, ChangesError> {
    let overridden = ["GIT_DIR", "GIT_WORK_TREE"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if !overridden {
        if workspace.join(".git").exists() {
            return Ok(Some(Vec::new()));
        }
        if !workspace
            .ancestors()
            .skip(1)
            .any(|d| d.join(".git").exists())
        {
            return Ok(None);
        }
    }
    let Some(out) = run_git(
        workspace,
        git,
        &["rev-parse".into(), "--show-prefix".into()],
    )?
    else {
        return Ok(None);
    };
    let line = out.strip_suffix(b"\n").unwrap_or(&out);
    Ok(Some(line.to_vec()))
}

/// Runs git in `workspace`; `None` when git is missing or the workspace is in no work tree.
fn run_git(
    workspace: &Path,
    git: &Git,
    args: &[OsString],
) -> Result<Option<Vec<u8>>, ChangesError> {
    match git.output(workspace, args) {
        Ok(stdout) => Ok(Some(stdout)),
        Err(GitError::NotARepository { .. }) => Ok(None),
        Err(GitError::Missing { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            tracing::debug!(
                "{}: not found, walking the workspace",
                git.program().to_string_lossy()
            );
            Ok(None)
        }
        Err(GitError::Missing { command, source }) => {
            Err(ChangesError::GitSpawn { command, source })
        }
        Err(GitError::Failed {
            command,
            status,
            stderr,
        }) => Err(ChangesError::Git {
            command,
            message: format!("{stderr} ({status})"),
        }),
    }
}

/// The paths of `git status --porcelain=v1 -z` output, relative to the workspace whose
/// repository path is `prefix`: both sides of a rename or copy, trailing `/` of nested
/// repositories removed. Paths outside the prefix cannot occur with the pathspec and are skipped.
fn parse_porcelain<'a>(out: &'a [u8], prefix: &[u8]) -> Result<Vec<&'a [u8]>, String> {
    let mut paths = Vec::new();
    let mut fields = out.split(|&b| b == 0);
    while let Some(entry) = fields.next() {
        if entry.is_empty() {
            continue;
        }
        if entry.len() < 4 || entry[2] != b' ' {
            return Err(format!(
                "unexpected status entry {:?}",
                String::from_utf8_lossy(entry)
            ));
        }
        let (x, y) = (entry[0], entry[1]);
        paths.push(&entry[3..]);
        if matches!(x, b'R' | b'C') || matches!(y, b'R' | b'C') {
            match fields.next().filter(|orig| !orig.is_empty()) {
                // A copy leaves its source as it was; a rename deletes it.
                Some(orig) if x == b'R' || y == b'R' => paths.push(orig),
                Some(_) => {}
                None => return Err("a rename entry without its original path".to_owned()),
            }
        }
    }
    Ok(paths
        .into_iter()
        .filter_map(|p| p.strip_prefix(prefix))
        .map(|p| p.strip_suffix(b"/").unwrap_or(p))
        .filter(|p| !p.is_empty())
        .collect())
}

/// Stats the dirty paths (never the clean ones), in parallel when there are many.
fn stat_all(workspace: &Path, paths: &[&[u8]]) -> BTreeMap<OsString, Observed> {
    const PER_THREAD: usize = 256;
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(paths.len().div_ceil(PER_THREAD))
        .max(1);
    let stat_chunk = |chunk: &[&[u8]]| -> Vec<(OsString, Observed)> {
        chunk
            .iter()
            .map(|rel| (OsStr::from_bytes(rel).to_owned(), stat_one(workspace, rel)))
            .collect()
    };
    if threads == 1 {
        return stat_chunk(paths).into_iter().collect();
    }
    let chunk_len = paths.len().div_ceil(threads);
    std::thread::scope(|s| {
        let handles: Vec<_> = paths
            .chunks(chunk_len)
            .map(|chunk| s.spawn(move || stat_chunk(chunk)))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().expect("stat threads do not panic"))
            .collect()
    })
}

fn stat_one(workspace: &Path, rel: &[u8]) -> Observed {
    let path = workspace.join(OsStr::from_bytes(rel));
    match fs::symlink_metadata(&path) {
        Ok(meta) => Observed::Present(Timestamp::of_metadata(&meta)),
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            Observed::Deleted
        }
        Err(e) => {
            // Unknown is treated as changed just now: a hook may run for nothing, never miss.
            tracing::warn!("{}: {e}; counting it as changed", path.display());
            Observed::Present(Timestamp::now())
        }
    }
}

/// Every file of the workspace with its change time, honouring `.gitignore` (rule 3).
fn walk(workspace: &Path, excluded: &Excluded) -> Vec<(OsString, Timestamp)> {
    let root = workspace.to_path_buf();
    let excluded: Vec<PathBuf> = excluded
        .0
        .iter()
        .map(|rel| workspace.join(OsStr::from_bytes(rel)))
        .collect();
    let walker = git_walk(workspace, excluded).build_parallel();
    let found = Mutex::new(Vec::new());
    walker.run(|| {
        let mut local = Collector {
            found: &found,
            local: Vec::new(),
        };
        let root = root.clone();
        Box::new(move |entry| {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    tracing::warn!("walking {}: {e}; its files are not checked", root.display());
                    return ignore::WalkState::Continue;
                }
            };
            if entry.file_type().is_none_or(|t| t.is_dir()) {
                return ignore::WalkState::Continue;
            }
            let Ok(rel) = entry.path().strip_prefix(&root) else {
                return ignore::WalkState::Continue;
            };
            let at = match entry.metadata() {
                Ok(meta) => Timestamp::of_metadata(&meta),
                Err(_) => Timestamp::now(),
            };
            local.local.push((rel.as_os_str().to_owned(), at));
            ignore::WalkState::Continue
        })
    });
    found.into_inner().unwrap_or_else(|e| e.into_inner())
}

/// A walk of `root` that enters what git would look at: `.gitignore`, `info/exclude` and the
/// global excludes honoured (also above `root`, up to the repository's top), hidden files
/// included, `.git`, links and the `excluded` paths (absolute) left out.
pub(crate) fn git_walk(root: &Path, excluded: Vec<PathBuf>) -> ignore::WalkBuilder {
    let mut builder = ignore::WalkBuilder::new(root);
    builder
        .hidden(false)
        // `.ignore` files are ripgrep's, not git's.
        .ignore(false)
        .git_ignore(true)
        .git_exclude(true)
        .git_global(true)
        .require_git(false)
        .parents(true)
        .follow_links(false)
        .filter_entry(move |entry| {
            entry.file_name() != ".git" && !excluded.iter().any(|ex| entry.path() == ex)
        });
    builder
}

/// A walker thread's findings, handed over once when the thread is done.
struct Collector<'a> {
    found: &'a Mutex<Vec<(OsString, Timestamp)>>,
    local: Vec<(OsString, Timestamp)>,
}

impl Drop for Collector<'_> {
    fn drop(&mut self) {
        let mut found = self.found.lock().unwrap_or_else(|e| e.into_inner());
        found.append(&mut self.local);
    }
}

const JOURNAL_VERSION: u32 = 1;

/// What a scan leaves for the next: deletions with the time they were noticed, and outside git
/// the files the walk found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(into = "JournalFile", try_from = "JournalFile")]
struct Journal {
    version: u32,
    /// Lossy when not UTF-8: it only tells whose journal this is.
    workspace: String,
    deleted: BTreeMap<OsString, Timestamp>,
    walk: Option<Vec<OsString>>,
}

/// The journal as written: names in the spelling of module rule 6.
#[derive(Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct JournalFile {
    version: u32,
    workspace: String,
    deleted: BTreeMap<String, Timestamp>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    walk: Option<Vec<String>>,
}

impl From<Journal> for JournalFile {
    fn from(j: Journal) -> JournalFile {
        let encode = |n: &OsString| name::encode(n).into_owned();
        JournalFile {
            version: j.version,
            workspace: j.workspace,
            deleted: j.deleted.iter().map(|(n, t)| (encode(n), *t)).collect(),
            walk: j.walk.as_ref().map(|w| w.iter().map(encode).collect()),
        }
    }
}

impl TryFrom<JournalFile> for Journal {
    type Error = String;

    fn try_from(j: JournalFile) -> Result<Journal, String> {
        Ok(Journal {
            version: j.version,
            workspace: j.workspace,
            deleted: j
                .deleted
                .iter()
                .map(|(n, t)| Ok((name::decode(n)?, *t)))
                .collect::<Result<_, String>>()?,
            walk: j
                .walk
                .map(|w| w.iter().map(|n| name::decode(n)).collect())
                .transpose()?,
        })
    }
}

/// The serialised spelling of a relative path (module rule 6): itself when it is UTF-8, else a
/// NUL followed by the hex of its bytes.
mod name {
    use super::*;

    pub(super) fn encode(name: &OsStr) -> Cow<'_, str> {
        match name.to_str() {
            Some(text) => Cow::Borrowed(text),
            None => {
                let mut text = String::from("\0");
                for byte in name.as_bytes() {
                    text.push_str(&format!("{byte:02x}"));
                }
                Cow::Owned(text)
            }
        }
    }

    pub(super) fn decode(text: &str) -> Result<OsString, String> {
        let Some(hex) = text.strip_prefix('\0') else {
            return Ok(OsString::from(text));
        };
        let bad = || format!("{text:?} is not a NUL and hex digits");
        if hex.len() % 2 != 0 {
            return Err(bad());
        }
        (0..hex.len())
            .step_by(2)
            .map(|i| {
                hex.get(i..i + 2)
                    .and_then(|b| u8::from_str_radix(b, 16).ok())
            })
            .collect::<Option<Vec<u8>>>()
            .map(OsString::from_vec)
            .ok_or_else(bad)
    }

    pub(super) fn serialize<S: Serializer>(path: &Path, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(&encode(path.as_os_str()))
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<PathBuf, D::Error> {
        let text = String::deserialize(deserializer)?;
        decode(&text)
            .map(PathBuf::from)
            .map_err(serde::de::Error::custom)
    }
}

impl Journal {
    fn empty(workspace: &Path) -> Journal {
        Journal {
            version: JOURNAL_VERSION,
            workspace: workspace.to_string_lossy().into_owned(),
            deleted: BTreeMap::new(),
            walk: None,
        }
    }

    /// The journal at `path`; an empty one when there is none, it is unreadable, or it belongs
    /// to another workspace. `true` when a bad file should be replaced even if nothing changed.
    fn load(path: &Path, workspace: &Path) -> (Journal, bool) {
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return (Journal::empty(workspace), false);
            }
            Err(e) => {
                tracing::warn!(
                    "change journal {}: {e}; starting a new one (deletions noticed before may be \
                     reported again); make it readable to keep them",
                    path.display()
                );
                return (Journal::empty(workspace), true);
            }
        };
        let fresh = Journal::empty(workspace);
        match serde_json::from_slice::<Journal>(&bytes) {
            Ok(j) if j.version == fresh.version && j.workspace == fresh.workspace => (j, false),
            Ok(_) => (fresh, true),
            Err(e) => {
                tracing::warn!(
                    "change journal {}: corrupt ({e}); starting a new one (deletions noticed \
                     before may be reported again)",
                    path.display()
                );
                (fresh, true)
            }
        }
    }

    /// Writes the journal atomically and durably: a deletion it forgets is reported again.
    fn save(&self, path: &Path) -> Result<(), ChangesError> {
        let error = |source| ChangesError::Journal {
            path: path.to_path_buf(),
            source,
        };
        fs::create_dir_all(parent_dir(path)).map_err(error)?;
        let bytes = serde_json::to_vec(self).expect("a journal always serialises");
        write_atomic(path, &bytes, Durability::Durable).map_err(error)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;
    use std::process::Command;
    use std::process::Output;
    use std::sync::atomic::Ordering;

    /// Runs git in `dir` with a fixed identity; panics with its stderr on failure.
    fn git(dir: &Path, args: &[&str]) -> Output {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(dir)
            .output()
            .expect("git runs");
        assert!(
            out.status.success(),
            "git {args:?} in {}: {}",
            dir.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        out
    }

    fn has_git() -> bool {
        let found = Command::new("git").arg("--version").output().is_ok();
        if !found {
            assert!(
                std::env::var_os("CI").is_none(),
                "git is required in CI (apt-get install git)"
            );
            eprintln!("note: git not installed; skipping");
        }
        found
    }

    fn write(root: &Path, rel: impl AsRef<Path>, text: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    /// A workspace `<tmp>/ws` and, outside it, a state dir `<tmp>/state` for the journal.
    struct Fixture {
        tmp: tempfile::TempDir,
        ws: PathBuf,
    }

    impl Fixture {
        fn plain() -> Fixture {
            let tmp = tempfile::tempdir().unwrap();
            let ws = tmp.path().join("ws");
            fs::create_dir(&ws).unwrap();
            Fixture { tmp, ws }
        }

        /// The workspace.
        fn path(&self) -> &Path {
            &self.ws
        }

        fn state(&self) -> PathBuf {
            self.tmp.path().join("state")
        }
    }

    /// A repository with `a.txt`, `dir/b.txt`, `dir/c.txt` and a `.gitignore` committed.
    fn repo() -> Fixture {
        let fx = Fixture::plain();
        let root = fx.path();
        git(root, &["init", "-q"]);
        write(root, "a.txt", "a\n");
        write(root, "dir/b.txt", "b\n");
        write(root, "dir/c.txt", "c\n");
        write(root, ".gitignore", "ignored/\n*.log\n");
        git(root, &["add", "-A"]);
        git(root, &["commit", "-q", "-m", "base"]);
        fx
    }

    /// The dirty set as `(path, "present" | "deleted")`, sorted, each byte of a path that is
    /// not UTF-8 written `\xNN` (so that the exact bytes are checked, not U+FFFD).
    fn summary(scan: &ChangeScan) -> Vec<(String, &'static str)> {
        scan.files
            .iter()
            .map(|f| {
                let state = match f.state {
                    FileState::Present { .. } => "present",
                    FileState::Deleted { .. } => "deleted",
                };
                (escaped(&f.path), state)
            })
            .collect()
    }

    fn escaped(path: &Path) -> String {
        let mut text = String::new();
        for chunk in path.as_os_str().as_bytes().utf8_chunks() {
            text.push_str(chunk.valid());
            for byte in chunk.invalid() {
                text.push_str(&format!("\\x{byte:02x}"));
            }
        }
        text
    }

    fn expect(list: &[(&str, &'static str)]) -> Vec<(String, &'static str)> {
        let mut list: Vec<_> = list.iter().map(|&(p, s)| (p.to_owned(), s)).collect();
        list.sort();
        list
    }

    fn journal_in(fx: &Fixture) -> PathBuf {
        fx.state().join("changes.journal")
    }

    fn non_utf8_name() -> &'static OsStr {
        OsStr::from_bytes(b"caf\xe9.txt")
    }

    #[test]
    fn git_dirty_set_table() {
        if !has_git() {
            return;
        }
        type Setup = fn(&Path);
        type Expected = &'static [(&'static str, &'static str)];
        let table: &[(&str, Setup, Expected)] = &[
            ("clean", |_| {}, &[]),
            (
                "modified",
                |r| write(r, "a.txt", "changed\n"),
                &[("a.txt", "present")],
            ),
            (
                "staged",
                |r| {
                    write(r, "dir/b.txt", "staged\n");
                    git(r, &["add", "dir/b.txt"]);
                },
                &[("dir/b.txt", "present")],
            ),
            (
                "untracked in a new directory",
                |r| write(r, "new/deep/x.txt", "x"),
                &[("new/deep/x.txt", "present")],
            ),
            (
                "ignored is not reported",
                |r| {
                    write(r, "ignored/x.txt", "x");
                    write(r, "dir/debug.log", "x");
                },
                &[],
            ),
            (
                "deleted in the work tree",
                |r| fs::remove_file(r.join("a.txt")).unwrap(),
                &[("a.txt", "deleted")],
            ),
            (
                "deleted and staged",
                |r| {
                    git(r, &["rm", "-q", "dir/c.txt"]);
                },
                &[("dir/c.txt", "deleted")],
            ),
            (
                "removed from the index only",
                |r| {
                    git(r, &["rm", "-q", "--cached", "a.txt"]);
                },
                &[("a.txt", "present")],
            ),
            (
                "staged rename",
                |r| {
                    git(r, &["mv", "a.txt", "z.txt"]);
                },
                &[("a.txt", "deleted"), ("z.txt", "present")],
            ),
            (
                "rename in the work tree",
                |r| fs::rename(r.join("dir/b.txt"), r.join("b2.txt")).unwrap(),
                &[("dir/b.txt", "deleted"), ("b2.txt", "present")],
            ),
            (
                "staged rename with intent-to-add",
                |r| {
                    fs::rename(r.join("a.txt"), r.join("moved.txt")).unwrap();
                    git(r, &["add", "-N", "moved.txt"]);
                },
                &[("a.txt", "deleted"), ("moved.txt", "present")],
            ),
            (
                "directory replaced by a file",
                |r| {
                    fs::remove_dir_all(r.join("dir")).unwrap();
                    write(r, "dir", "now a file");
                },
                &[
                    ("dir", "present"),
                    ("dir/b.txt", "deleted"),
                    ("dir/c.txt", "deleted"),
                ],
            ),
            (
                "file replaced by a symlink",
                |r| {
                    fs::remove_file(r.join("a.txt")).unwrap();
                    symlink("dir/b.txt", r.join("a.txt")).unwrap();
                },
                &[("a.txt", "present")],
            ),
            (
                "dangling symlink",
                |r| symlink("nowhere", r.join("link")).unwrap(),
                &[("link", "present")],
            ),
            (
                "names with spaces, quotes, tabs and newlines",
                |r| {
                    write(r, "with space.txt", "x");
                    write(r, "quo\"te's.txt", "x");
                    write(r, "tab\there.txt", "x");
                    write(r, "new\nline.txt", "x");
                    write(r, "sp ace/ü.txt", "x");
                },
                &[
                    ("with space.txt", "present"),
                    ("quo\"te's.txt", "present"),
                    ("tab\there.txt", "present"),
                    ("new\nline.txt", "present"),
                    ("sp ace/ü.txt", "present"),
                ],
            ),
            (
                "a name that is not UTF-8 is kept, byte for byte",
                |r| fs::write(r.join(non_utf8_name()), "x").unwrap(),
                &[("caf\\xe9.txt", "present")],
            ),
            (
                "a deleted name that is not UTF-8",
                |r| {
                    fs::write(r.join(non_utf8_name()), "x").unwrap();
                    git(r, &["add", "-A"]);
                    git(r, &["commit", "-q", "-m", "latin-1"]);
                    fs::remove_file(r.join(non_utf8_name())).unwrap();
                },
                &[("caf\\xe9.txt", "deleted")],
            ),
            (
                "nested repository",
                |r| {
                    let nested = r.join("nested");
                    fs::create_dir(&nested).unwrap();
                    git(&nested, &["init", "-q"]);
                    write(&nested, "inner.txt", "x");
                },
                &[("nested", "present")],
            ),
        ];
        for (name, setup, expected) in table {
            let tmp = repo();
            setup(tmp.path());
            let scan = scan(tmp.path(), &journal_in(&tmp)).unwrap();
            assert!(scan.git, "{name}: scanned with git");
            assert_eq!(summary(&scan), expect(expected), "{name}");
        }
    }

    #[test]
    fn repository_without_a_commit() {
        if !has_git() {
            return;
        }
        let tmp = Fixture::plain();
        let root = tmp.path();
        git(root, &["init", "-q"]);
        write(root, "staged.txt", "x");
        write(root, "sub/untracked.txt", "x");
        write(root, "skip.log", "x");
        write(root, ".gitignore", "*.log\n");
        git(root, &["add", "staged.txt"]);
        let scan = scan(root, &journal_in(&tmp)).unwrap();
        assert!(scan.git);
        assert_eq!(
            summary(&scan),
            expect(&[
                (".gitignore", "present"),
                ("staged.txt", "present"),
                ("sub/untracked.txt", "present"),
            ])
        );
    }

    #[test]
    fn workspace_in_a_subdirectory_of_the_repository() {
        if !has_git() {
            return;
        }
        for sub in ["sub", "deep/er sub", "caf\u{e9}"] {
            let tmp = repo();
            let root = tmp.path();
            let ws = root.join(sub);
            write(&ws, "tracked.txt", "t");
            git(root, &["add", "-A"]);
            git(root, &["commit", "-q", "-m", "sub"]);
            write(root, "a.txt", "outside, modified");
            write(root, "outside-new.txt", "outside, untracked");
            write(&ws, "tracked.txt", "modified");
            write(&ws, "inner/new.txt", "untracked");
            let scan = scan(&ws, &journal_in(&tmp)).unwrap();
            assert!(scan.git, "{sub}");
            assert_eq!(
                summary(&scan),
                expect(&[("inner/new.txt", "present"), ("tracked.txt", "present")]),
                "{sub}"
            );
        }
    }

    #[test]
    fn walk_without_git_honours_gitignore_and_skips_dot_git() {
        let tmp = Fixture::plain();
        let ws = tmp.path().to_path_buf();
        write(&ws, ".gitignore", "*.log\nbuild/\n");
        write(&ws, "src/main.rs", "x");
        write(&ws, "src/.gitignore", "gen.rs\n");
        write(&ws, "src/gen.rs", "x");
        write(&ws, "build/out", "x");
        write(&ws, "debug.log", "x");
        write(&ws, ".env", "x");
        write(&ws, ".config/tool.toml", "x");
        // An empty `.git` is no repository: git refuses it and the walk must still skip it.
        write(&ws, ".git/HEAD", "garbage");
        write(&ws, "with space.txt", "x");
        fs::write(ws.join(non_utf8_name()), "x").unwrap();
        let expected = expect(&[
            (".config/tool.toml", "present"),
            (".env", "present"),
            (".gitignore", "present"),
            ("caf\\xe9.txt", "present"),
            ("src/.gitignore", "present"),
            ("src/main.rs", "present"),
            ("with space.txt", "present"),
        ]);
        let journal = journal_in(&tmp);
        let variants = [
            ("git refuses the directory", ScanOptions::new()),
            ("git missing", ScanOptions::new().git("/nonexistent/git")),
            ("git not used", ScanOptions::new().use_git(false)),
        ];
        for (name, options) in variants {
            let scan = scan_with(&ws, &journal, &options).unwrap();
            assert!(!scan.git, "{name}");
            assert_eq!(summary(&scan), expected, "{name}");
        }
    }

    #[test]
    fn walk_of_a_git_work_tree_skips_its_git_dir() {
        if !has_git() {
            return;
        }
        let tmp = repo();
        write(tmp.path(), "x.log", "ignored");
        let scan = scan_with(
            tmp.path(),
            &journal_in(&tmp),
            &ScanOptions::new().use_git(false),
        )
        .unwrap();
        assert!(!scan.git);
        assert_eq!(
            summary(&scan),
            expect(&[
                (".gitignore", "present"),
                ("a.txt", "present"),
                ("dir/b.txt", "present"),
                ("dir/c.txt", "present"),
            ])
        );
    }

    /// Deletion dates across scans, in both modes: kept while deleted, cleared when restored.
    #[test]
    fn deletion_is_dated_by_the_first_scan_that_saw_it() {
        let with_git = has_git();
        for use_git in [true, false] {
            if use_git && !with_git {
                continue;
            }
            let tmp = if use_git {
                repo()
            } else {
                let fx = Fixture::plain();
                write(fx.path(), "a.txt", "a\n");
                write(fx.path(), "dir/b.txt", "b\n");
                fx
            };
            let root = tmp.path();
            let journal = journal_in(&tmp);
            let options = ScanOptions::new().use_git(use_git);
            let deleted_at = |scan: &ChangeScan, path: &str| {
                scan.files
                    .iter()
                    .find(|f| f.path == Path::new(path))
                    .map(|f| f.state)
            };

            let first = scan_with(root, &journal, &options).unwrap();
            assert_eq!(first.git, use_git);
            fs::remove_file(root.join("a.txt")).unwrap();
            let second = scan_with(root, &journal, &options).unwrap();
            assert_eq!(
                deleted_at(&second, "a.txt"),
                Some(FileState::Deleted {
                    noticed_at: second.cutoff
                }),
                "git: {use_git}"
            );
            assert!(second.cutoff >= first.cutoff);
            let third = scan_with(root, &journal, &options).unwrap();
            assert_eq!(
                deleted_at(&third, "a.txt"),
                Some(FileState::Deleted {
                    noticed_at: second.cutoff
                }),
                "git: {use_git}: the date stays"
            );
            // A hook that ran after the deletion was noticed has seen it.
            let later = Timestamp::from_nanos(second.cutoff.as_nanos() + 1);
            let a = Path::new("a.txt");
            assert!(third.changed_since(Some(later)).all(|f| f.path != a));
            assert!(
                third
                    .changed_since(Some(second.cutoff))
                    .any(|f| f.path == a)
            );

            write(root, "a.txt", "a\n");
            let restored = scan_with(root, &journal, &options).unwrap();
            if use_git {
                assert!(deleted_at(&restored, "a.txt").is_none(), "clean again");
            } else {
                assert!(matches!(
                    deleted_at(&restored, "a.txt"),
                    Some(FileState::Present { .. })
                ));
            }
            let text = fs::read_to_string(&journal).unwrap();
            assert!(!text.contains("\"a.txt\":"), "left the journal: {text}");

            // Deleted again: a new date.
            fs::remove_file(root.join("a.txt")).unwrap();
            let again = scan_with(root, &journal, &options).unwrap();
            assert_eq!(
                deleted_at(&again, "a.txt"),
                Some(FileState::Deleted {
                    noticed_at: again.cutoff
                })
            );
        }
    }

    #[test]
    fn committed_deletion_leaves_the_journal() {
        if !has_git() {
            return;
        }
        let tmp = repo();
        let root = tmp.path();
        let journal = journal_in(&tmp);
        git(root, &["rm", "-q", "a.txt"]);
        let scan1 = scan(root, &journal).unwrap();
        assert_eq!(summary(&scan1), expect(&[("a.txt", "deleted")]));
        git(root, &["commit", "-q", "-m", "rm"]);
        let scan2 = scan(root, &journal).unwrap();
        assert!(scan2.files.is_empty());
        let text = fs::read_to_string(&journal).unwrap();
        assert!(!text.contains("a.txt"), "{text}");
    }

    #[test]
    fn walk_forgets_deletions_after_the_retention() {
        let tmp = Fixture::plain();
        let root = tmp.path().to_path_buf();
        write(&root, "a.txt", "a");
        let journal = journal_in(&tmp);
        let keep = ScanOptions::new().use_git(false);
        scan_with(&root, &journal, &keep).unwrap();
        fs::remove_file(root.join("a.txt")).unwrap();
        let noticed = scan_with(&root, &journal, &keep).unwrap();
        assert_eq!(summary(&noticed), expect(&[("a.txt", "deleted")]));
        let kept = scan_with(&root, &journal, &keep).unwrap();
        assert_eq!(summary(&kept), expect(&[("a.txt", "deleted")]));
        let forget = keep.deleted_retention(Duration::ZERO);
        // Poll until the coarse clock moves past the noticed date (one tick at most).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while Timestamp::now() <= noticed.cutoff {
            assert!(
                std::time::Instant::now() < deadline,
                "the clock never moved"
            );
            std::thread::yield_now();
        }
        let forgotten = scan_with(&root, &journal, &forget).unwrap();
        assert!(forgotten.files.is_empty(), "{:?}", forgotten.files);
    }

    #[test]
    fn walk_does_not_report_a_newly_ignored_file_as_deleted() {
        let tmp = Fixture::plain();
        let root = tmp.path();
        write(root, "keep.txt", "k");
        write(root, "out.log", "x");
        let journal = journal_in(&tmp);
        let options = ScanOptions::new().use_git(false);
        let first = scan_with(root, &journal, &options).unwrap();
        assert_eq!(
            summary(&first),
            expect(&[("keep.txt", "present"), ("out.log", "present")])
        );
        write(root, ".gitignore", "*.log\n");
        let second = scan_with(root, &journal, &options).unwrap();
        assert_eq!(
            summary(&second),
            expect(&[(".gitignore", "present"), ("keep.txt", "present")])
        );
    }

    #[test]
    fn excluded_state_dir_is_never_reported() {
        let with_git = has_git();
        for use_git in [true, false] {
            if use_git && !with_git {
                continue;
            }
            let tmp = repo_or_plain(use_git);
            let root = tmp.path();
            let state = root.join(".discobot/state");
            write(&state, "status.json", "{}");
            write(&state, "output/hook.log", "x");
            write(
                root,
                ".discobot/stateful.txt",
                "a sibling with the same prefix",
            );
            let journal = state.join("changes.journal");
            for exclude in [state.clone(), PathBuf::from(".discobot/state")] {
                let options = ScanOptions::new().use_git(use_git).exclude(&exclude);
                let scan = scan_with(root, &journal, &options).unwrap();
                let paths: Vec<&str> = scan.dirty_paths().map(|p| p.to_str().unwrap()).collect();
                assert!(
                    paths.contains(&".discobot/stateful.txt"),
                    "git: {use_git}: {paths:?}"
                );
                assert!(
                    paths.iter().all(|p| !p.starts_with(".discobot/state/")),
                    "git: {use_git}, exclude {exclude:?}: {paths:?}"
                );
            }
        }
    }

    fn repo_or_plain(use_git: bool) -> Fixture {
        if use_git { repo() } else { Fixture::plain() }
    }

    /// A file written after the cutoff is at or after it, however coarse the file clock.
    #[test]
    fn a_file_written_after_the_cutoff_is_never_missed() {
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("f");
        for i in 0..2000 {
            let cutoff = Timestamp::now();
            fs::write(&path, i.to_string()).unwrap();
            let changed = Timestamp::of_metadata(&fs::symlink_metadata(&path).unwrap());
            assert!(changed >= cutoff, "round {i}: {changed:?} < {cutoff:?}");
        }
    }

    #[test]
    fn scan_cutoff_comes_before_the_changes_it_misses() {
        let tmp = Fixture::plain();
        let root = tmp.path().to_path_buf();
        write(&root, "a.txt", "a");
        let journal = journal_in(&tmp);
        let options = ScanOptions::new().use_git(false);
        let before = scan_with(&root, &journal, &options).unwrap();
        write(&root, "a.txt", "changed after the scan");
        let after = scan_with(&root, &journal, &options).unwrap();
        let changed: Vec<&str> = after
            .changed_since(Some(before.cutoff))
            .map(|f| f.path.to_str().unwrap())
            .collect();
        assert_eq!(changed, ["a.txt"]);
    }

    #[test]
    fn changed_at_table() {
        const S: i64 = NANOS_PER_SEC;
        type Stamp = (i64, i64);
        // (mtime, ctime, expected nanoseconds)
        let table: &[(Stamp, Stamp, i64)] = &[
            ((10, 5), (10, 7), 10 * S + 7),
            ((11, 5), (10, 7), 11 * S + 5),
            ((10, 5), (10, 5), 10 * S + 5),
            // A whole-second stamp may hide up to a second: read it as the end of the second.
            ((10, 0), (9, 999), 10 * S + S - 1),
            ((9, 0), (10, 0), 10 * S + S - 1),
            ((10, 0), (10, 1), 10 * S + 1),
            ((-1, 500), (-2, 0), -S + 500),
        ];
        for &(mtime, ctime, expected) in table {
            assert_eq!(
                Timestamp::changed_at(mtime, ctime).as_nanos(),
                expected,
                "mtime {mtime:?} ctime {ctime:?}"
            );
        }
    }

    #[test]
    fn timestamp_conversions_and_serde() {
        let t = SystemTime::UNIX_EPOCH + Duration::new(1_700_000_000, 123_456_789);
        let ts = Timestamp::from_system_time(t);
        assert_eq!(ts.as_nanos(), 1_700_000_000_123_456_789);
        assert_eq!(ts.to_system_time(), t);
        let before = SystemTime::UNIX_EPOCH - Duration::from_nanos(5);
        assert_eq!(Timestamp::from_system_time(before).as_nanos(), -5);
        assert_eq!(Timestamp::from_nanos(-5).to_system_time(), before);
        assert_eq!(serde_json::to_string(&ts).unwrap(), "1700000000123456789");
        let back: Timestamp = serde_json::from_str("1700000000123456789").unwrap();
        assert_eq!(back, ts);
        let fine = Timestamp::from_system_time(SystemTime::now());
        let coarse = Timestamp::now();
        // The coarse clock lags the fine one by at most a tick, never leads it.
        assert!(coarse <= Timestamp::from_system_time(SystemTime::now()));
        assert!(fine.as_nanos() - coarse.as_nanos() < 100_000_000);
    }

    #[test]
    fn changed_since_table() {
        let t = Timestamp::from_nanos;
        let scan = ChangeScan {
            cutoff: t(100),
            git: true,
            files: vec![
                DirtyFile {
                    path: "old".into(),
                    state: FileState::Present { changed_at: t(10) },
                },
                DirtyFile {
                    path: "edge".into(),
                    state: FileState::Present { changed_at: t(50) },
                },
                DirtyFile {
                    path: "new".into(),
                    state: FileState::Present { changed_at: t(90) },
                },
                DirtyFile {
                    path: "gone-early".into(),
                    state: FileState::Deleted { noticed_at: t(20) },
                },
                DirtyFile {
                    path: "gone-late".into(),
                    state: FileState::Deleted { noticed_at: t(60) },
                },
            ],
        };
        let table: &[(Option<i64>, &[&str])] = &[
            (None, &["old", "edge", "new", "gone-early", "gone-late"]),
            (Some(0), &["old", "edge", "new", "gone-early", "gone-late"]),
            (Some(50), &["edge", "new", "gone-late"]),
            (Some(51), &["new", "gone-late"]),
            (Some(61), &["new"]),
            (Some(91), &[]),
        ];
        for &(since, expected) in table {
            let got: Vec<&str> = scan
                .changed_since(since.map(t))
                .map(|f| f.path.to_str().unwrap())
                .collect();
            assert_eq!(got, expected, "since {since:?}");
        }
        assert_eq!(
            scan.dirty_paths()
                .map(|p| p.to_str().unwrap())
                .collect::<Vec<_>>(),
            ["old", "edge", "new", "gone-early", "gone-late"]
        );
    }

    #[test]
    fn parse_porcelain_table() {
        type Expected = Result<&'static [&'static [u8]], &'static str>;
        // (output, prefix, expected paths, or an error fragment)
        let table: &[(&[u8], &[u8], Expected)] = &[
            (b"", b"", Ok(&[])),
            (b" M a.txt\0", b"", Ok(&[b"a.txt"])),
            (b"?? new\nline\0", b"", Ok(&[b"new\nline"])),
            (b"R  new\0old\0 M x\0", b"", Ok(&[b"new", b"old", b"x"])),
            (b"RM new\0old\0", b"", Ok(&[b"new", b"old"])),
            (b"C  copy\0src\0", b"", Ok(&[b"copy"])),
            (b" R new\0old\0", b"", Ok(&[b"new", b"old"])),
            (b"?? nested/\0", b"", Ok(&[b"nested"])),
            (b" M sub/a\0?? sub/b c\0", b"sub/", Ok(&[b"a", b"b c"])),
            (b" M other/a\0", b"sub/", Ok(&[])),
            (b"D  caf\xe9\0", b"", Ok(&[b"caf\xe9"])),
            (b"XY\0", b"", Err("unexpected status entry")),
            (b"R  new\0", b"", Err("without its original path")),
        ];
        for &(out, prefix, ref expected) in table {
            let got = parse_porcelain(out, prefix);
            match expected {
                Ok(paths) => assert_eq!(got.as_deref(), Ok(*paths), "{out:?}"),
                Err(fragment) => {
                    let err = got.unwrap_err();
                    assert!(err.contains(fragment), "{out:?}: {err}");
                }
            }
        }
    }

    #[test]
    fn excluded_table() {
        let ws = Path::new("/ws");
        let excluded = Excluded::new(
            ws,
            &[
                PathBuf::from("/ws/.state"),
                PathBuf::from("rel/dir/"),
                PathBuf::from("/elsewhere/state"),
                PathBuf::from("/ws"),
            ],
        );
        let table: &[(&str, bool)] = &[
            (".state", true),
            (".state/status.json", true),
            (".stateful", false),
            ("rel/dir", true),
            ("rel/dir/x", true),
            ("rel/directory", false),
            ("rel", false),
            ("elsewhere/state", false),
            ("a.txt", false),
        ];
        for &(path, expected) in table {
            assert_eq!(excluded.contains(path), expected, "{path}");
        }
    }

    /// Rule 6: a name that is not UTF-8 goes through the journal byte for byte: outside git
    /// its deletion is noticed and keeps its date, as any other's.
    #[test]
    fn a_deleted_name_that_is_not_utf8_keeps_its_date_through_the_journal() {
        let tmp = Fixture::plain();
        let root = tmp.path().to_path_buf();
        fs::write(root.join(non_utf8_name()), "x").unwrap();
        let journal = journal_in(&tmp);
        let options = ScanOptions::new().use_git(false);
        let first = scan_with(&root, &journal, &options).unwrap();
        assert_eq!(summary(&first), expect(&[("caf\\xe9.txt", "present")]));
        fs::remove_file(root.join(non_utf8_name())).unwrap();
        let second = scan_with(&root, &journal, &options).unwrap();
        let third = scan_with(&root, &journal, &options).unwrap();
        for scan in [&second, &third] {
            assert_eq!(
                scan.files,
                [DirtyFile {
                    path: PathBuf::from(non_utf8_name()),
                    state: FileState::Deleted {
                        noticed_at: second.cutoff
                    },
                }]
            );
        }
    }

    #[test]
    fn serialised_names_table() {
        let table: &[(&[u8], &str)] = &[
            (b"a.txt", "a.txt"),
            (b"dir/\xc3\xbc.txt", "dir/\u{fc}.txt"),
            (b"caf\xe9.txt", "\x00636166e92e747874"),
            (b"\xff", "\0ff"),
        ];
        for &(bytes, text) in table {
            let path = PathBuf::from(OsStr::from_bytes(bytes));
            assert_eq!(name::encode(path.as_os_str()), text);
            assert_eq!(name::decode(text).unwrap(), path.as_os_str());
            let file = DirtyFile {
                path: path.clone(),
                state: FileState::Present {
                    changed_at: Timestamp::from_nanos(1),
                },
            };
            let json = serde_json::to_string(&file).unwrap();
            assert_eq!(serde_json::from_str::<DirtyFile>(&json).unwrap(), file);
        }
        for bad in ["\0abc", "\0zz", "\0é"] {
            assert!(name::decode(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn corrupt_journal_is_reset_with_a_warning() {
        let tmp = Fixture::plain();
        let root = tmp.path().to_path_buf();
        write(&root, "a.txt", "a");
        let journal = journal_in(&tmp);
        write(&tmp.state(), "changes.journal", "{ not json");
        let options = ScanOptions::new().use_git(false);
        let scan = scan_with(&root, &journal, &options).unwrap();
        assert_eq!(summary(&scan), expect(&[("a.txt", "present")]));
        let text = fs::read_to_string(&journal).unwrap();
        let parsed: Journal = serde_json::from_str(&text).unwrap();
        assert_eq!(parsed.walk, Some(vec![OsString::from("a.txt")]));
    }

    #[test]
    fn journal_of_another_workspace_is_not_used() {
        let tmp = Fixture::plain();
        let (one, two) = (tmp.path().join("one"), tmp.path().join("two"));
        write(&one, "only-in-one.txt", "x");
        write(&two, "b.txt", "x");
        let journal = journal_in(&tmp);
        let options = ScanOptions::new().use_git(false);
        scan_with(&one, &journal, &options).unwrap();
        let scan = scan_with(&two, &journal, &options).unwrap();
        assert_eq!(summary(&scan), expect(&[("b.txt", "present")]));
    }

    #[test]
    fn unwritable_journal_is_an_error_naming_it() {
        let tmp = Fixture::plain();
        let root = tmp.path().to_path_buf();
        write(&root, "a.txt", "a");
        // A parent that is a file cannot become a directory, even for root.
        write(&tmp.state(), "blocker", "x");
        let journal = tmp.state().join("blocker/changes.journal");
        let err = scan_with(&root, &journal, &ScanOptions::new().use_git(false)).unwrap_err();
        assert!(matches!(err, ChangesError::Journal { .. }), "{err:?}");
        let text = err.to_string();
        assert!(text.contains("blocker/changes.journal"), "{text}");
        assert!(text.contains("--state-dir"), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }

    #[test]
    fn missing_workspace_is_an_error_naming_it() {
        let tmp = Fixture::plain();
        let missing = tmp.path().join("missing");
        let err = scan(&missing, &journal_in(&tmp)).unwrap_err();
        assert!(matches!(err, ChangesError::Workspace { .. }));
        assert!(err.to_string().contains("missing"), "{err}");
    }

    #[test]
    fn git_failure_names_the_command_and_the_first_stderr_line() {
        if !has_git() {
            return;
        }
        let tmp = repo();
        fs::write(tmp.path().join(".git/index"), "garbage, not an index").unwrap();
        let err = scan(tmp.path(), &journal_in(&tmp)).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, ChangesError::Git { .. }), "{err:?}");
        assert!(text.contains("git status --porcelain=v1"), "{text}");
        assert!(text.contains("index"), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }

    /// `git status` refreshes a stale index when it can take the lock; a scan must not, or a
    /// concurrent `git commit` fails on `index.lock`.
    #[test]
    fn scan_never_writes_the_index() {
        if !has_git() {
            return;
        }
        let tmp = repo();
        let root = tmp.path();
        let index = root.join(".git/index");
        // Same content, new stat data: the index entry is stale and git would rewrite it.
        let later = SystemTime::now() + Duration::from_secs(5);
        fs::File::options()
            .write(true)
            .open(root.join("a.txt"))
            .unwrap()
            .set_modified(later)
            .unwrap();
        let before = fs::metadata(&index).unwrap();
        let scan = scan(root, &journal_in(&tmp)).unwrap();
        assert!(scan.files.is_empty(), "{:?}", scan.files);
        let after = fs::metadata(&index).unwrap();
        assert_eq!(
            (before.ino(), before.mtime(), before.mtime_nsec()),
            (after.ino(), after.mtime(), after.mtime_nsec()),
            "the index was rewritten"
        );
    }

    #[test]
    fn commits_succeed_while_scans_run() {
        if !has_git() {
            return;
        }
        let tmp = repo();
        let root = tmp.path().to_path_buf();
        let journal = journal_in(&tmp);
        let done = std::sync::atomic::AtomicBool::new(false);
        /// Stops the scanner however the commit loop ends, so a failed commit cannot hang.
        struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);
        impl Drop for StopOnDrop<'_> {
            fn drop(&mut self) {
                self.0.store(true, Ordering::Relaxed);
            }
        }
        std::thread::scope(|s| {
            let scanner = s.spawn(|| {
                let mut scans = 0;
                while !done.load(Ordering::Relaxed) {
                    scan(&root, &journal).unwrap();
                    scans += 1;
                }
                scans
            });
            let stop = StopOnDrop(&done);
            for i in 0..15 {
                write(&root, "a.txt", &format!("{i}\n"));
                git(&root, &["commit", "-q", "-a", "-m", &format!("c{i}")]);
            }
            drop(stop);
            assert!(scanner.join().unwrap() > 0);
        });
    }
}

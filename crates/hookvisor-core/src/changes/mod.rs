//! What changed in a workspace: its dirty set, when each dirty file last changed, and which
//! files were deleted since when (docs/DESIGN.md, "End-of-turn evaluation", step 1).
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
//!
//! This file holds the types and the order of a scan; its parts live beside it: `git` asks git
//! for the dirty set (rule 2), `walk` walks a workspace outside git (rule 3) and `journal`
//! remembers deletions between scans (rules 5 and 6).

mod git;
mod journal;
mod walk;

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use self::git::git_dirty;
use self::journal::{JOURNAL_VERSION, Journal, name};
use self::walk::{Excluded, walk};
// Lives in walk.rs; the change watcher walks the same way as a scan.
pub(crate) use self::walk::git_walk;
use crate::git::Git;

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
    /// Root does not run git in a repository another account can change (`crate::git`
    /// rule 4); nor does it walk instead, which would hide the refusal.
    #[error(transparent)]
    Refused(crate::git::GitError),
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    pub(super) use hookvisor_testkit::git;

    pub(super) fn has_git() -> bool {
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

    pub(super) fn write(root: &Path, rel: impl AsRef<Path>, text: &str) {
        let path = root.join(rel);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }

    /// A workspace `<tmp>/ws` and, outside it, a state dir `<tmp>/state` for the journal.
    pub(super) struct Fixture {
        tmp: tempfile::TempDir,
        ws: PathBuf,
    }

    impl Fixture {
        pub(super) fn plain() -> Fixture {
            let tmp = tempfile::tempdir().unwrap();
            let ws = tmp.path().join("ws");
            fs::create_dir(&ws).unwrap();
            Fixture { tmp, ws }
        }

        /// The workspace.
        pub(super) fn path(&self) -> &Path {
            &self.ws
        }

        pub(super) fn state(&self) -> PathBuf {
            self.tmp.path().join("state")
        }
    }

    /// A repository with `a.txt`, `dir/b.txt`, `dir/c.txt` and a `.gitignore` committed.
    pub(super) fn repo() -> Fixture {
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
    pub(super) fn summary(scan: &ChangeScan) -> Vec<(String, &'static str)> {
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

    pub(super) fn expect(list: &[(&str, &'static str)]) -> Vec<(String, &'static str)> {
        let mut list: Vec<_> = list.iter().map(|&(p, s)| (p.to_owned(), s)).collect();
        list.sort();
        list
    }

    pub(super) fn journal_in(fx: &Fixture) -> PathBuf {
        fx.state().join("changes.journal")
    }

    pub(super) fn non_utf8_name() -> &'static OsStr {
        OsStr::from_bytes(b"caf\xe9.txt")
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
    fn missing_workspace_is_an_error_naming_it() {
        let tmp = Fixture::plain();
        let missing = tmp.path().join("missing");
        let err = scan(&missing, &journal_in(&tmp)).unwrap_err();
        assert!(matches!(err, ChangesError::Workspace { .. }));
        assert!(err.to_string().contains("missing"), "{err}");
    }
}

//! A workspace's dirty set kept warm by inotify, for a long-running server: an end-of-turn scan
//! looks again only at the paths that changed since the previous one, and a turn in which
//! nothing changed costs no `git status` at all.
//!
//! The rules, written once here:
//!
//! 1. The cutoff is taken first; then a *cookie* file is created in a watched directory and the
//!    scan waits for its event (watchman's sync). inotify delivers the events of one instance in
//!    order, so every change made before the cutoff has been seen by then. The cookie's name
//!    cannot be guessed and only that name counts: the state dir is the agent's, and a name it
//!    made in advance would end the wait early.
//! 2. The kernel is asked only for events that change files (the `watch` module's rule 1): not
//!    opens, reads or closes, so a `git status` (or anything else that reads the workspace)
//!    costs the watcher nothing.
//! 3. Every directory of the workspace that `git status` could report from is watched, one
//!    non-recursive watch each: the directories the `.gitignore`-aware walk enters, plus those
//!    holding tracked files that are ignored (looked for under the directories the walk
//!    skipped, and only there: `git ls-files` is not run when it skipped none). `.git` is
//!    never watched; the state dir is watched only for the cookies.
//! 4. A path event marks that path (file or directory) *touched*. A new directory is watched
//!    when the scan finds it, and stays touched until then, so what was written in it before
//!    its watch is covered by the scan of the whole directory.
//! 5. The watcher is not trusted, and the next scan is a full one, when: it starts; the kernel's
//!    queue overflowed; reading events failed or a watch could not be added; a `.gitignore`
//!    changed; a directory was moved (the watches below it keep the old names); the cookie did not come
//!    back in time; more than [`MAX_TOUCHED`] paths were touched; or git's `HEAD`, refs, index
//!    entries or `info/exclude` changed (a commit, `git add`, a reset change the dirty set without touching
//!    a file). Without inotify (no watches left), every scan is a full one.
//! 6. Whatever the path, the answer is the one `crate::changes::scan_at` would give: a touched-only
//!    scan is `crate::changes::rescan` of the previous result.
//! 7. Every touched path is also journaled for git's fsmonitor hook ([`ChangeFeed`], whose
//!    module docs give its rules); the reader watches a new directory as soon as it sees it.

use std::collections::{BTreeSet, HashMap};
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::inotify::{AddWatchFlags, Inotify, WatchDescriptor};

use super::feed::{self, ChangeFeed, Feed};
use crate::changes::{ChangeScan, ChangesError, ScanOptions, Timestamp, git_walk, rescan, scan_at};

/// More touched paths than this between two scans make the next scan a full one: the list is
/// bounded whatever a build writes, and past this many paths git's own scan is the cheaper.
pub const MAX_TOUCHED: usize = 2048;

/// How long a scan waits for its cookie before it stops trusting the watcher.
const COOKIE_TIMEOUT: Duration = Duration::from_secs(2);

/// The prefix of cookie file names (rule 1).
const COOKIE_PREFIX: &str = ".hookvisor-cookie-";

/// Rule 2: what changes files, and nothing that only reads them. `EXCL_UNLINK`: no events for
/// files already unlinked; `ONLYDIR`: a path that is no longer a directory is not watched.
const WATCH_MASK: AddWatchFlags = AddWatchFlags::IN_CREATE
    .union(AddWatchFlags::IN_DELETE)
    .union(AddWatchFlags::IN_MODIFY)
    .union(AddWatchFlags::IN_ATTRIB)
    .union(AddWatchFlags::IN_MOVED_FROM)
    .union(AddWatchFlags::IN_MOVED_TO)
    .union(AddWatchFlags::IN_MOVE_SELF)
    .union(AddWatchFlags::IN_DONT_FOLLOW)
    .union(super::IN_EXCL_UNLINK)
    .union(AddWatchFlags::IN_ONLYDIR);

/// How a scan was answered, for logs, metrics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanKind {
    /// `git status` (or the walk) over the whole workspace.
    Full,
    /// `git status` limited to the touched paths.
    Touched,
    /// Nothing changed: the previous dirty set, with the new cutoff.
    Unchanged,
}

/// Keeps a workspace's dirty set warm between scans (module docs give the rules).
pub struct ChangeWatcher {
    workspace: PathBuf,
    journal: PathBuf,
    options: ScanOptions,
    /// The options' excluded paths, absolute (the walks and the reader skip them).
    excluded: Vec<PathBuf>,
    cookie_dir: PathBuf,
    /// `None` when inotify is unavailable: every scan is then a full one.
    watcher: Option<Reader>,
    git: Option<GitDirs>,
    previous: Option<(ChangeScan, Option<Fingerprint>)>,
    cookies: u64,
    /// Keys of this process's own that make the cookie names unguessable (rule 1).
    cookie_keys: std::hash::RandomState,
    /// The journal of touched paths for git's fsmonitor hook (rule 7).
    feed: Arc<Feed>,
}

/// git's index and `info/exclude`, whose changes can change what must be watched (rule 3).
fn git_files(git: Option<&GitDirs>) -> Option<[PathBuf; 2]> {
    let git = git?;
    Some([
        git.git_dir.join("index"),
        git.common_dir.join("info").join("exclude"),
    ])
}

impl std::fmt::Debug for ChangeWatcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChangeWatcher")
            .field("workspace", &self.workspace)
            .field("watching", &self.watcher.is_some())
            .field("watched", &self.watched_dirs())
            .finish_non_exhaustive()
    }
}

/// What the reader collected for the next scan, which takes it whole.
#[derive(Debug, Default)]
struct Pending {
    /// Relative to the workspace, as bytes (a name need not be UTF-8).
    touched: BTreeSet<PathBuf>,
    new_dirs: BTreeSet<PathBuf>,
    /// Rule 5: the next scan is a full one.
    distrust: Option<String>,
    /// The watches must be made again (a directory moved, a `.gitignore` changed, an error).
    rewatch: bool,
}

/// The reader's state, shared with the scan under one lock.
#[derive(Debug, Default)]
struct Seen {
    pending: Pending,
    /// The name of the cookie the scan waits for, and whether it came back (rule 1).
    cookie: Option<(String, bool)>,
    /// The directory of each watch, to name the paths of its events.
    dirs: HashMap<WatchDescriptor, PathBuf>,
    /// The directories the walk skips (ignored), whose tracked files are looked for when the
    /// index changes (rule 3).
    ignored_roots: BTreeSet<PathBuf>,
}

#[derive(Debug, Default)]
struct Shared {
    seen: Mutex<Seen>,
    cookie_arrived: Condvar,
    /// Tells the reader thread to end at its next event.
    stop: AtomicBool,
}

/// One inotify instance: its watches, and the thread that reads its events.
struct Reader {
    inotify: Arc<Inotify>,
    shared: Arc<Shared>,
    /// The cookie dir's watch: removing it wakes the reader to stop.
    cookie_watch: WatchDescriptor,
}

impl Drop for Reader {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::SeqCst);
        // Its IN_IGNORED event wakes the reader, which then closes the instance.
        let _ = self.inotify.rm_watch(self.cookie_watch);
    }
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, Seen> {
        self.seen.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl ChangeWatcher {
    /// Starts watching `workspace`; `journal` and `options` are those of [`crate::changes::scan_with`],
    /// `cookie_dir` a directory of ours outside `.git` (the state dir) for the sync cookies.
    ///
    /// Watching that cannot start is logged and leaves a watcher that always scans in full.
    pub fn start(
        workspace: &Path,
        journal: &Path,
        options: ScanOptions,
        cookie_dir: &Path,
    ) -> Result<ChangeWatcher, ChangesError> {
        let workspace = workspace
            .canonicalize()
            .map_err(|source| ChangesError::Workspace {
                path: workspace.to_path_buf(),
                source,
            })?;
        fs::create_dir_all(cookie_dir).map_err(|source| ChangesError::CookieDir {
            path: cookie_dir.to_path_buf(),
            source,
        })?;
        let cookie_dir = cookie_dir
            .canonicalize()
            .unwrap_or_else(|_| cookie_dir.to_path_buf());
        let excluded = options
            .exclude
            .iter()
            .map(|p| {
                let p = if p.is_absolute() {
                    p.clone()
                } else {
                    workspace.join(p)
                };
                p.canonicalize().unwrap_or(p)
            })
            .collect();
        let feed = Arc::new(Feed::new(&cookie_dir));
        let mut watcher = ChangeWatcher {
            feed,
            // Found by `rewatch`, like everything else that a restart renews.
            git: None,
            workspace,
            journal: journal.to_path_buf(),
            options,
            excluded,
            cookie_dir,
            watcher: None,
            previous: None,
            cookies: 0,
            cookie_keys: std::hash::RandomState::new(),
        };
        watcher.rewatch();
        Ok(watcher)
    }

    /// The paths changed since a token, for git's fsmonitor hook; queries on it need no lock
    /// of this watcher.
    pub fn feed(&self) -> ChangeFeed {
        ChangeFeed(self.feed.clone())
    }

    /// Makes the watches again if the reader asked for it (a moved directory, a changed
    /// `.gitignore`), keeping what the next scan must know; the fsmonitor journal answers
    /// "everything" until then.
    pub fn keep_watching(&mut self) {
        let Some(shared) = self.watcher.as_ref().map(|r| r.shared.clone()) else {
            return;
        };
        let now = feed::stamps(git_files(self.git.as_ref()).as_ref());
        // Other excludes: other directories to watch.
        let excludes_changed = now[1] != self.feed.checked()[1];
        if !shared.lock().pending.rewatch && !excludes_changed {
            self.watch_new_tracked(now);
            return;
        }
        let mut pending = std::mem::take(&mut shared.lock().pending);
        self.rewatch();
        pending.rewatch = false;
        if let Some(reader) = &self.watcher {
            let mut seen = reader.shared.lock();
            let fresh = std::mem::take(&mut seen.pending);
            pending.touched.extend(fresh.touched);
            pending.new_dirs.extend(fresh.new_dirs);
            pending.distrust = pending.distrust.or(fresh.distrust);
            pending.rewatch |= fresh.rewatch;
            seen.pending = pending;
        }
    }

    /// A changed index may track files in directories `.gitignore` skips, which rule 3 watches:
    /// watches those not watched yet, and journals them whole (the fsmonitor journal answers
    /// "everything" while the index differs from the one last looked at).
    fn watch_new_tracked(&mut self, now: feed::GitStamps) {
        if self.feed.checked() == now {
            return;
        }
        let (watched, roots): (std::collections::HashSet<PathBuf>, _) = match &self.watcher {
            Some(reader) => {
                let seen = reader.shared.lock();
                (
                    seen.dirs.values().cloned().collect(),
                    seen.ignored_roots.clone(),
                )
            }
            None => return,
        };
        for dir in self.ignored_tracked_dirs(&roots) {
            if watched.contains(&dir) {
                continue;
            }
            if let Err(e) = self.watch_one(&dir) {
                tracing::warn!("{e}");
                self.feed.stop();
                return;
            }
            if let Ok(rel) = dir.strip_prefix(&self.workspace) {
                let mut path = rel.as_os_str().as_bytes().to_vec();
                path.push(b'/');
                self.feed.push(path);
            }
        }
        self.feed.set_checked(now);
    }

    /// Whether inotify is in use (`false`: every scan is a full one).
    pub fn is_watching(&self) -> bool {
        self.watcher.is_some()
    }

    /// How many directories are watched, the state dir's included; 0 when not watching.
    pub fn watched_dirs(&self) -> usize {
        self.watcher
            .as_ref()
            .map_or(0, |r| r.shared.lock().dirs.len())
    }

    /// The dirty set now, as [`crate::changes::scan_with`] would give it, and how it was answered.
    pub fn scan(&mut self) -> Result<(ChangeScan, ScanKind), ChangesError> {
        // Rule 1: the cutoff, then the cookie.
        let cutoff = Timestamp::now();
        let mut distrust = self.sync().err();
        let pending = self
            .watcher
            .as_ref()
            .map(|reader| std::mem::take(&mut reader.shared.lock().pending))
            .unwrap_or_default();
        distrust = distrust.or(pending.distrust);
        if pending.rewatch {
            self.rewatch();
        } else {
            for dir in &pending.new_dirs {
                if let Err(e) = self.watch_tree(dir) {
                    distrust.get_or_insert(e);
                }
            }
        }
        let (git, workspace) = (&self.options.git, &self.workspace);
        let fingerprint = self
            .git
            .as_mut()
            .map(|dirs| dirs.fingerprint(git, workspace));
        let previous = match self.previous.take() {
            None => {
                distrust.get_or_insert_with(|| "first scan".to_owned());
                None
            }
            Some((scan, before)) if before != fingerprint => {
                distrust.get_or_insert_with(|| "git's index or HEAD moved".to_owned());
                Some(scan)
            }
            Some((scan, _)) => Some(scan),
        };
        if self.watcher.is_none() {
            distrust = Some("not watching".to_owned());
        }
        let (scan, kind) = match (previous, distrust) {
            (Some(previous), None) if pending.touched.is_empty() => {
                let mut scan = previous;
                scan.cutoff = cutoff;
                (scan, ScanKind::Unchanged)
            }
            (Some(previous), None) => {
                let touched: Vec<PathBuf> = pending.touched.into_iter().collect();
                let scan = rescan(
                    &self.workspace,
                    &self.journal,
                    &self.options,
                    cutoff,
                    &previous,
                    &touched,
                )?;
                (scan, ScanKind::Touched)
            }
            (_, why) => {
                let why = why.as_deref().unwrap_or("first scan");
                tracing::debug!("full scan of {}: {why}", self.workspace.display());
                let scan = scan_at(&self.workspace, &self.journal, &self.options, cutoff)?;
                (scan, ScanKind::Full)
            }
        };
        self.previous = Some((scan.clone(), fingerprint));
        Ok((scan, kind))
    }

    /// Rule 1: writes a cookie and waits for its event. `Err` says why the watcher cannot be
    /// trusted for this scan.
    fn sync(&mut self) -> Result<(), String> {
        let Some(shared) = self.watcher.as_ref().map(|r| r.shared.clone()) else {
            return Ok(());
        };
        self.cookies += 1;
        let name = format!(
            "{COOKIE_PREFIX}{}-{}-{:016x}",
            std::process::id(),
            self.cookies,
            std::hash::BuildHasher::hash_one(&self.cookie_keys, self.cookies)
        );
        let cookie = self.cookie_dir.join(&name);
        shared.lock().cookie = Some((name, false));
        if let Err(e) = fs::write(&cookie, b"") {
            shared.lock().cookie = None;
            return Err(format!("cookie {}: {e}", cookie.display()));
        }
        let deadline = Instant::now() + COOKIE_TIMEOUT;
        let mut seen = shared.lock();
        let arrived = loop {
            if matches!(seen.cookie, Some((_, true))) {
                break true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break false;
            }
            seen = shared
                .cookie_arrived
                .wait_timeout(seen, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        seen.cookie = None;
        drop(seen);
        let _ = fs::remove_file(&cookie);
        if arrived {
            Ok(())
        } else {
            tracing::warn!(
                "the file watcher did not see {} within {COOKIE_TIMEOUT:?}; scanning in full",
                cookie.display()
            );
            Err("the cookie did not come back".to_owned())
        }
    }

    /// Starts over: a new inotify instance watching every directory of rule 3.
    fn rewatch(&mut self) {
        // Dropping the old reader stops its thread and closes its instance.
        self.watcher = None;
        self.feed.stop();
        self.git = self
            .options
            .use_git
            .then(|| GitDirs::find(&self.workspace, &self.options))
            .flatten();
        match Reader::start(
            &self.workspace,
            &self.cookie_dir,
            self.excluded.clone(),
            self.feed.clone(),
        ) {
            Ok(reader) => self.watcher = Some(reader),
            Err(e) => {
                tracing::warn!("cannot watch files ({e}); every turn scans the whole workspace");
                return;
            }
        }
        let files = git_files(self.git.as_ref());
        // Taken first: a change during the walk makes the next query look again.
        let checked = feed::stamps(files.as_ref());
        let mut dirs = self.walk_dirs(&self.workspace);
        let roots = skipped_dirs(&dirs, &self.excluded);
        dirs.extend(self.ignored_tracked_dirs(&roots));
        if let Some(reader) = &self.watcher {
            reader.shared.lock().ignored_roots = roots;
        }
        for dir in dirs {
            if let Err(e) = self.watch_one(&dir) {
                tracing::warn!("{e}; every turn scans the whole workspace");
                self.watcher = None;
                return;
            }
        }
        let exact = self
            .git
            .as_ref()
            .is_some_and(|git| git.toplevel == self.workspace);
        self.feed.start(exact, files, checked);
    }

    /// Watches `dir` and every directory under it the walk enters (rule 2, 3).
    fn watch_tree(&mut self, dir: &Path) -> Result<(), String> {
        if !dir.is_dir() || self.is_ignored_dir(dir) {
            return Ok(());
        }
        for d in self.walk_dirs(dir) {
            self.watch_one(&d)?;
        }
        Ok(())
    }

    fn watch_one(&mut self, dir: &Path) -> Result<(), String> {
        let Some(reader) = self.watcher.as_mut() else {
            return Ok(());
        };
        match reader.watch(dir) {
            Ok(()) => Ok(()),
            // Gone again (or no longer a directory) before it could be watched: nothing in it
            // to miss, and its parent's event says it changed.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => Ok(()),
            Err(e) => Err(format!(
                "cannot watch {} ({e}); raise fs.inotify.max_user_watches",
                dir.display()
            )),
        }
    }

    /// The directories at and under `root` that the `.gitignore`-aware walk enters.
    fn walk_dirs(&self, root: &Path) -> Vec<PathBuf> {
        walk_dirs(root, &self.excluded)
    }

    fn is_ignored_dir(&self, dir: &Path) -> bool {
        is_ignored_dir(&self.workspace, &self.excluded, dir)
    }

    /// The directories holding tracked files that `.gitignore` would skip (rule 2): a change
    /// there is still a change to git. Only the tracked files under `roots`, the directories
    /// the walk skipped, can be there: none, no git to ask.
    fn ignored_tracked_dirs(&self, roots: &BTreeSet<PathBuf>) -> BTreeSet<PathBuf> {
        if self.git.is_none() || roots.is_empty() {
            return BTreeSet::new();
        }
        let mut args: Vec<std::ffi::OsString> =
            vec!["ls-files".into(), "-z".into(), "--cached".into()];
        // Every tracked file under the roots; a long list costs more to match than asking
        // git which tracked files it ignores.
        if roots.len() > 256 {
            args.extend(["--ignored".into(), "--exclude-standard".into()]);
        } else {
            args.push("--".into());
            for root in roots {
                let Ok(rel) = root.strip_prefix(&self.workspace) else {
                    continue;
                };
                let mut spec = std::ffi::OsString::from(":(top,literal)");
                spec.push(rel);
                args.push(spec);
            }
        }
        let out = self.options.git.output(&self.workspace, &args);
        let Ok(out) = out else {
            return BTreeSet::new();
        };
        let mut dirs = BTreeSet::new();
        for name in out.split(|&b| b == 0).filter(|n| !n.is_empty()) {
            let path = self.workspace.join(OsStr::from_bytes(name));
            for dir in path.ancestors().skip(1) {
                if !dir.starts_with(&self.workspace) || !dirs.insert(dir.to_path_buf()) {
                    break;
                }
            }
        }
        dirs
    }
}

/// The directories at and under `root` that the `.gitignore`-aware walk enters.
fn walk_dirs(root: &Path, excluded: &[PathBuf]) -> Vec<PathBuf> {
    git_walk(root, excluded.to_vec())
        .build()
        .filter_map(Result::ok)
        .filter(|e| e.file_type().is_some_and(|t| t.is_dir()))
        .map(ignore::DirEntry::into_path)
        .collect()
}

/// The directories in `walked` (the walk's) that the walk skipped: ignored ones, not `.git`
/// nor `excluded`.
fn skipped_dirs(walked: &[PathBuf], excluded: &[PathBuf]) -> BTreeSet<PathBuf> {
    let entered: std::collections::HashSet<&Path> = walked.iter().map(PathBuf::as_path).collect();
    let mut skipped = BTreeSet::new();
    for dir in walked {
        let Ok(entries) = fs::read_dir(dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if entry.file_type().is_ok_and(|t| t.is_dir())
                && entry.file_name() != ".git"
                && !entered.contains(path.as_path())
                && !excluded.iter().any(|ex| path.starts_with(ex))
            {
                skipped.insert(path);
            }
        }
    }
    skipped
}

/// Whether the walk of `dir`'s parent would skip `dir` (ignored, excluded or `.git`).
fn is_ignored_dir(workspace: &Path, excluded: &[PathBuf], dir: &Path) -> bool {
    let Some(parent) = dir.parent() else {
        return false;
    };
    if !dir.starts_with(workspace) || dir == workspace {
        return false;
    }
    !git_walk(parent, excluded.to_vec())
        .max_depth(Some(1))
        .build()
        .filter_map(Result::ok)
        .any(|e| e.path() == dir)
}

impl Reader {
    /// A new inotify instance watching `cookie_dir`, and its reader thread.
    fn start(
        workspace: &Path,
        cookie_dir: &Path,
        excluded: Vec<PathBuf>,
        feed: Arc<Feed>,
    ) -> io::Result<Reader> {
        let inotify = Arc::new(super::instance(false)?);
        let shared = Arc::new(Shared::default());
        let cookie_watch = {
            let mut seen = shared.lock();
            let wd = inotify.add_watch(cookie_dir, WATCH_MASK)?;
            seen.dirs.insert(wd, cookie_dir.to_path_buf());
            wd
        };
        let events = Events {
            shared: shared.clone(),
            workspace: workspace.to_path_buf(),
            cookie_dir: cookie_dir.to_path_buf(),
            excluded,
            feed,
        };
        let reading = inotify.clone();
        std::thread::Builder::new()
            .name("hv-inotify".to_owned())
            .spawn(move || events.read(&reading))?;
        Ok(Reader {
            inotify,
            shared,
            cookie_watch,
        })
    }

    /// Watches `dir`. The map is updated under the lock the reader takes for each batch, so no
    /// event of the new watch can be read before its directory is known.
    fn watch(&mut self, dir: &Path) -> io::Result<()> {
        let mut seen = self.shared.lock();
        let wd = self.inotify.add_watch(dir, WATCH_MASK)?;
        seen.dirs.insert(wd, dir.to_path_buf());
        Ok(())
    }
}

/// The reader thread's side: turns events into touched paths, never blocks on the scan.
struct Events {
    shared: Arc<Shared>,
    workspace: PathBuf,
    cookie_dir: PathBuf,
    excluded: Vec<PathBuf>,
    feed: Arc<Feed>,
}

impl Events {
    fn read(self, inotify: &Inotify) {
        loop {
            let events = inotify.read_events();
            let mut seen = self.shared.lock();
            if self.shared.stop.load(Ordering::SeqCst) {
                return;
            }
            match events {
                Ok(events) => {
                    for event in events {
                        self.record(
                            inotify,
                            &mut seen,
                            event.wd,
                            event.mask,
                            event.name.as_deref(),
                        );
                    }
                }
                Err(Errno::EINTR) => {}
                Err(e) => {
                    seen.pending.distrust = Some(format!("reading file events: {e}"));
                    seen.pending.rewatch = true;
                    self.feed.stop();
                    return;
                }
            }
            self.shared.cookie_arrived.notify_all();
        }
    }

    fn record(
        &self,
        inotify: &Inotify,
        seen: &mut Seen,
        wd: WatchDescriptor,
        mask: AddWatchFlags,
        name: Option<&OsStr>,
    ) {
        if mask.contains(AddWatchFlags::IN_Q_OVERFLOW) {
            seen.pending.distrust = Some("the kernel's event queue overflowed".to_owned());
            self.feed.reset();
            return;
        }
        if mask.contains(AddWatchFlags::IN_IGNORED) {
            seen.dirs.remove(&wd);
            return;
        }
        let Some(dir) = seen.dirs.get(&wd) else {
            return;
        };
        let path = match name {
            Some(name) => dir.join(name),
            None => dir.clone(),
        };
        if mask.contains(AddWatchFlags::IN_MOVE_SELF) {
            // Rule 5: this directory and its watches now answer to another name.
            seen.pending.distrust = Some(format!("{} was moved", path.display()));
            seen.pending.rewatch = true;
            self.feed.stop();
            return;
        }
        if path.parent() == Some(self.cookie_dir.as_path()) {
            let Some(name) = path.file_name().and_then(OsStr::to_str) else {
                return;
            };
            // Only the awaited name counts: the state dir is the agent's (rule 1).
            match &mut seen.cookie {
                Some((awaited, arrived)) if awaited == name => *arrived = true,
                _ => self.feed.cookie_seen(name),
            }
            return;
        }
        let Ok(rel) = path.strip_prefix(&self.workspace) else {
            return;
        };
        let rel = rel.to_path_buf();
        if rel.as_os_str().is_empty()
            || rel.starts_with(".git")
            || self.excluded.iter().any(|ex| path.starts_with(ex))
        {
            return;
        }
        let is_dir = mask.contains(AddWatchFlags::IN_ISDIR);
        if is_dir && mask.contains(AddWatchFlags::IN_MOVED_FROM) {
            // Rule 5: the watches below it keep the old names.
            seen.pending.distrust = Some(format!("{} was moved", rel.display()));
            seen.pending.rewatch = true;
            self.feed.stop();
        }
        if path.file_name().is_some_and(|n| n == ".gitignore") {
            seen.pending.distrust = Some(format!("{} changed", rel.display()));
            seen.pending.rewatch = true;
            // The set of watched directories may change with it.
            self.feed.stop();
        }
        let mut journaled = rel.as_os_str().as_bytes().to_vec();
        if is_dir && mask.intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO) {
            if seen.pending.new_dirs.len() < MAX_TOUCHED {
                seen.pending.new_dirs.insert(path.clone());
                // Rule 7: watched now, and journaled whole.
                self.watch_new_tree(inotify, seen, &path);
                journaled.push(b'/');
            } else {
                // Bounded like `touched`: past this, watching everything again is cheaper.
                seen.pending.rewatch = true;
                seen.pending
                    .distrust
                    .get_or_insert_with(|| format!("more than {MAX_TOUCHED} directories created"));
                self.feed.stop();
            }
        }
        self.feed.push(journaled);
        if seen.pending.touched.len() >= MAX_TOUCHED {
            seen.pending
                .distrust
                .get_or_insert_with(|| format!("more than {MAX_TOUCHED} paths changed"));
            return;
        }
        seen.pending.touched.insert(rel);
    }
}

impl Events {
    /// Watches `dir` and every directory under it that the walk enters, unless the walk skips
    /// `dir` itself; a watch that cannot be added makes the watches be made again.
    fn watch_new_tree(&self, inotify: &Inotify, seen: &mut Seen, dir: &Path) {
        if is_ignored_dir(&self.workspace, &self.excluded, dir) {
            if dir.file_name().is_some_and(|n| n != ".git")
                && !self.excluded.iter().any(|ex| dir.starts_with(ex))
            {
                seen.ignored_roots.insert(dir.to_path_buf());
            }
            return;
        }
        let walked = walk_dirs(dir, &self.excluded);
        seen.ignored_roots
            .extend(skipped_dirs(&walked, &self.excluded));
        for d in walked {
            match inotify.add_watch(&d, WATCH_MASK) {
                Ok(wd) => {
                    seen.dirs.insert(wd, d);
                }
                Err(Errno::ENOENT | Errno::ENOTDIR) => {}
                Err(e) => {
                    seen.pending.distrust = Some(format!("cannot watch {} ({e})", d.display()));
                    seen.pending.rewatch = true;
                    self.feed.stop();
                    return;
                }
            }
        }
    }
}

/// Where git keeps what decides the dirty set besides the files (rule 4).
#[derive(Debug, Clone)]
struct GitDirs {
    git_dir: PathBuf,
    common_dir: PathBuf,
    /// The root of the work tree (canonical), which git's fsmonitor paths are relative to.
    toplevel: PathBuf,
    /// Keys of this process's own for the index summaries, which nobody can aim a collision at.
    keys: std::hash::RandomState,
    /// The index's stamp and its entries' summary when last summed up.
    last_index: Option<(FileStamp, u64)>,
}

/// The index as it decides the dirty set: its entries (mode, object, stage, name, the
/// assume-unchanged and skip-worktree bits), not the file. git rewrites the file without
/// changing them (its stat cache, the untracked cache and fsmonitor token of every `git status`
/// through an fsmonitor), which must not cost the next turn a full scan.
#[derive(Debug, Clone, PartialEq, Eq)]
enum IndexSummary {
    /// A keyed hash of `git ls-files -z --stage -v`.
    Entries(u64),
    /// The file's stamp, when git could not list the entries (`None`: no index).
    File(Option<FileStamp>),
}

/// A cheap summary of `HEAD`, the refs, the index and `info/exclude`: equal summaries mean git
/// would compare the files with the same commit and the same index.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Fingerprint {
    /// `HEAD` as written: a ref name or a commit id.
    head: Vec<u8>,
    /// The loose ref `HEAD` names, when there is one.
    target: Option<Vec<u8>>,
    index: IndexSummary,
    /// Size, mtime and inode of `packed-refs`, `reftable/tables.list` and `info/exclude`
    /// (`None`: absent).
    stamps: [Option<FileStamp>; 3],
}

/// What `fs::metadata` says changed about a file: size, mtime (seconds, nanoseconds), inode.
type FileStamp = (u64, i64, i64, u64);

impl GitDirs {
    fn find(workspace: &Path, options: &ScanOptions) -> Option<GitDirs> {
        let out = options
            .git
            .output(
                workspace,
                &[
                    "rev-parse",
                    "--absolute-git-dir",
                    "--git-common-dir",
                    "--show-toplevel",
                ],
            )
            .ok()?;
        let text = String::from_utf8(out).ok()?;
        let mut lines = text.lines();
        let git_dir = PathBuf::from(lines.next()?);
        let common = PathBuf::from(lines.next()?);
        let toplevel = lines
            .next()
            .map(|t| {
                let t = PathBuf::from(t);
                t.canonicalize().unwrap_or(t)
            })
            .unwrap_or_default();
        let common_dir = if common.is_absolute() {
            common
        } else {
            workspace.join(common)
        };
        Some(GitDirs {
            git_dir,
            common_dir,
            toplevel,
            keys: std::hash::RandomState::new(),
            last_index: None,
        })
    }

    /// The index's entries summed up (git run in `workspace`) when its file changed since the
    /// last time, else the last summary.
    fn index_summary(&mut self, git: &crate::git::Git, workspace: &Path) -> IndexSummary {
        use std::hash::{BuildHasher, Hasher};
        let Some(stamp) = stat(self.git_dir.join("index")) else {
            self.last_index = None;
            return IndexSummary::File(None);
        };
        if let Some((last, sum)) = self.last_index
            && last == stamp
        {
            return IndexSummary::Entries(sum);
        }
        match git.output(workspace, &["ls-files", "-z", "--stage", "-v"]) {
            Ok(out) => {
                let mut hasher = self.keys.build_hasher();
                hasher.write(&out);
                let sum = hasher.finish();
                self.last_index = Some((stamp, sum));
                IndexSummary::Entries(sum)
            }
            Err(_) => {
                self.last_index = None;
                IndexSummary::File(Some(stamp))
            }
        }
    }

    fn fingerprint(&mut self, git: &crate::git::Git, workspace: &Path) -> Fingerprint {
        let head = fs::read(self.git_dir.join("HEAD")).unwrap_or_default();
        let target = std::str::from_utf8(&head)
            .ok()
            .and_then(|h| h.strip_prefix("ref: "))
            .map(str::trim)
            .and_then(|r| read_ref(&self.common_dir, &self.git_dir, r));
        Fingerprint {
            index: self.index_summary(git, workspace),
            stamps: [
                stat(self.common_dir.join("packed-refs")),
                stat(self.common_dir.join("reftable").join("tables.list")),
                stat(self.common_dir.join("info").join("exclude")),
            ],
            head,
            target,
        }
    }
}

/// `path`'s stamp, `None` when it does not exist.
fn stat(path: PathBuf) -> Option<FileStamp> {
    let m = fs::metadata(path).ok()?;
    Some((m.len(), m.mtime(), m.mtime_nsec(), m.ino()))
}

/// The contents of a loose ref, if there is one (a packed one is in `packed-refs`'s stat).
fn read_ref(common_dir: &Path, git_dir: &Path, name: &str) -> Option<Vec<u8>> {
    fs::read(git_dir.join(name))
        .or_else(|_| fs::read(common_dir.join(name)))
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    /// A `git status` through an fsmonitor rewrites the index after every change (its token,
    /// its untracked cache): the entries are what count, not the file.
    #[test]
    fn an_index_rewritten_with_the_same_entries_is_no_reason_for_a_full_scan() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        fs::create_dir_all(&ws).unwrap();
        let git = |args: &[&str]| {
            let out = std::process::Command::new("git")
                .current_dir(&ws)
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .args(["-c", "user.name=t", "-c", "user.email=t@t"])
                .args(args)
                .output()
                .unwrap();
            assert!(out.status.success(), "git {args:?}: {out:?}");
        };
        git(&["init", "-q"]);
        fs::write(ws.join("a"), "a").unwrap();
        git(&["add", "a"]);
        git(&["commit", "-qm", "a"]);
        let mut watcher = ChangeWatcher::start(
            &ws,
            &tmp.path().join("journal"),
            ScanOptions::new(),
            &tmp.path().join("cookies"),
        )
        .unwrap();
        assert_eq!(watcher.scan().unwrap().1, ScanKind::Full);
        assert_eq!(watcher.scan().unwrap().1, ScanKind::Unchanged);
        // The same entries in a new file: an untracked cache added.
        let before = fs::metadata(ws.join(".git/index")).unwrap().ino();
        git(&["update-index", "--untracked-cache"]);
        assert_ne!(fs::metadata(ws.join(".git/index")).unwrap().ino(), before);
        assert_eq!(watcher.scan().unwrap().1, ScanKind::Unchanged);
        // Other entries: a full scan.
        fs::write(ws.join("a"), "b").unwrap();
        git(&["add", "a"]);
        let (scan, kind) = watcher.scan().unwrap();
        assert_eq!(kind, ScanKind::Full);
        assert_eq!(scan.files.len(), 1, "{:?}", scan.files);
    }

    #[test]
    fn a_queue_overflow_makes_the_next_scan_a_full_one() {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        fs::create_dir_all(ws.join("d")).unwrap();
        let options = ScanOptions::new().use_git(false);
        let mut watcher = ChangeWatcher::start(
            &ws,
            &tmp.path().join("journal"),
            options.clone(),
            &tmp.path().join("cookies"),
        )
        .unwrap();
        assert!(watcher.is_watching(), "inotify must work here");
        assert_eq!(watcher.scan().unwrap().1, ScanKind::Full);
        assert_eq!(watcher.scan().unwrap().1, ScanKind::Unchanged);

        let limit: usize = fs::read_to_string("/proc/sys/fs/inotify/max_queued_events")
            .ok()
            .and_then(|s| s.trim().parse().ok())
            .unwrap_or(16_384);
        let shared = watcher.watcher.as_ref().unwrap().shared.clone();
        {
            // The reader blocks on this lock after its next read, so the kernel's queue fills:
            // more writes than it holds, to few enough files that the touched bound stays far.
            let _held = shared.lock();
            let mut files: Vec<fs::File> = (0..100)
                .map(|i| fs::File::create(ws.join(format!("d/f{i}"))).unwrap())
                .collect();
            for round in 0..limit / 100 + 50 {
                for f in &mut files {
                    write!(f, "{round}").unwrap();
                }
            }
        }
        let (scan, kind) = watcher.scan().unwrap();
        assert_eq!(
            kind,
            ScanKind::Full,
            "an overflowed queue cannot be trusted"
        );
        assert_eq!(scan.files.len(), 100, "{:?}", scan.files);
        // Trusted again afterwards.
        assert_eq!(watcher.scan().unwrap().1, ScanKind::Unchanged);
        fs::write(ws.join("d/f0"), "again").unwrap();
        assert_eq!(watcher.scan().unwrap().1, ScanKind::Touched);
    }
}

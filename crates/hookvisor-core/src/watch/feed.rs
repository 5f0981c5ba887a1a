//! The paths changed since a token, for git's `core.fsmonitor` hook (protocol version 2,
//! `Documentation/config/core.txt` of git): a bounded journal of the paths the change watcher
//! saw, numbered in the order the kernel reported them.
//!
//! The rules, written once here:
//!
//! 1. A token is `hookvisor:<instance>:<n>`: this watcher (one per server start) and a place
//!    in the journal. The answer to a token is every path journaled since, and the token of
//!    now; git keeps the new token in its index and sends it next time.
//! 2. The answer is *everything* (`/`: git checks every file) whenever it could be short: a
//!    token of another instance (a restarted server, git's first timestamp), older than what
//!    the journal keeps ([`MAX_JOURNAL`] paths, [`MAX_JOURNAL_BYTES`]), or from before the watcher stopped trusting itself
//!    (a lost queue, a moved directory, a changed `.gitignore`, watches that must be made
//!    again: [`ChangeFeed::reset`] makes earlier tokens unknown); while the watches are not
//!    all in place; when the workspace is not the root of its git work tree; when the sync
//!    cookie did not come back; while git's index or `info/exclude` differs from the one the
//!    watches were last made for (the change watcher's rule 3 watches the directories of
//!    tracked files `.gitignore` skips, which a `git add -f` can add, and the directories the
//!    excludes leave to git).
//! 3. A change made before git asked is in the answer: the query writes a cookie and waits for
//!    its event (the change watcher's rule 1), and reads the journal only then. The cookie's
//!    name cannot be guessed and only that name counts: the state dir is the agent's, and a
//!    name it made in advance would end the wait before the watcher read the changes.
//! 4. A directory created (or moved in) is watched by the reader as soon as it is seen, with
//!    everything under it, and journaled as `dir/` only then: git looks again at everything
//!    under it, which covers what was written before the watch.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::fs;
use std::hash::{BuildHasher, RandomState};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// How many changed paths the journal keeps; a token older than these is answered
/// "everything".
pub const MAX_JOURNAL: usize = 65_536;

/// The most bytes of paths the journal keeps (the agent names the paths, each up to
/// `PATH_MAX`): past this the oldest go, as past [`MAX_JOURNAL`].
pub const MAX_JOURNAL_BYTES: usize = 4 << 20;

/// How long a query waits for its cookie before it answers "everything".
const COOKIE_TIMEOUT: Duration = Duration::from_secs(1);

/// The prefix of the fsmonitor queries' cookie names (the scans' are `.hookvisor-cookie-`).
pub(super) const COOKIE_PREFIX: &str = ".hookvisor-fsmonitor-";

/// The answer to one query: the new token and the changed paths, `None` for everything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FsmonitorAnswer {
    /// The token git sends with its next query.
    pub token: String,
    /// Paths relative to the work tree, as bytes; a directory ends in `/`. `None`: everything.
    pub paths: Option<Vec<Vec<u8>>>,
}

impl FsmonitorAnswer {
    /// "Everything", with `token`.
    pub fn everything(token: impl Into<String>) -> FsmonitorAnswer {
        FsmonitorAnswer {
            token: token.into(),
            paths: None,
        }
    }

    /// What a version 2 hook prints: the token, NUL, then each path followed by NUL (`/` alone
    /// for everything).
    pub fn to_hook_output(&self) -> Vec<u8> {
        let mut out = self.token.as_bytes().to_vec();
        out.push(0);
        match &self.paths {
            None => out.extend_from_slice(b"/\0"),
            Some(paths) => {
                for path in paths {
                    out.extend_from_slice(path);
                    out.push(0);
                }
            }
        }
        out
    }
}

/// A handle on a change watcher's journal, cheap to clone; queries need no lock of the
/// watcher itself.
#[derive(Debug, Clone)]
pub struct ChangeFeed(pub(super) Arc<Feed>);

#[derive(Debug)]
pub(super) struct Feed {
    instance: String,
    cookie_dir: PathBuf,
    cookies: AtomicU64,
    /// Keys of this process's own that make the cookie names unguessable (rule 3).
    keys: RandomState,
    state: Mutex<FeedState>,
    cookie_arrived: Condvar,
}

#[derive(Debug, Default)]
struct FeedState {
    /// Every watch is in place (rule 2).
    live: bool,
    /// The workspace is the root of its git work tree (rule 2).
    exact: bool,
    /// The number of the next path journaled.
    next: u64,
    /// Tokens below this are unknown (rule 2).
    floor: u64,
    /// The highest token given: a path journaled again since is journaled once.
    given: u64,
    entries: VecDeque<(u64, Vec<u8>)>,
    /// The bytes of the paths in `entries`.
    bytes: usize,
    /// The cookies of the queries waiting now, by name, and whether each came back.
    awaited: HashMap<String, bool>,
    /// git's index and `info/exclude`, and their stamps when the watches were last made to
    /// cover them.
    git_files: Option<[PathBuf; 2]>,
    checked: GitStamps,
}

/// Size, mtime (seconds, nanoseconds) and inode of a file.
pub(super) type Stamp = (u64, i64, i64, u64);

/// The stamps of git's index and `info/exclude` (`None`: absent).
pub(super) type GitStamps = [Option<Stamp>; 2];

/// `path`'s stamp, `None` when it does not exist.
pub(super) fn stamp_of(path: &Path) -> Option<Stamp> {
    use std::os::unix::fs::MetadataExt;
    let m = fs::metadata(path).ok()?;
    Some((m.len(), m.mtime(), m.mtime_nsec(), m.ino()))
}

/// The stamps of `files` now.
pub(super) fn stamps(files: Option<&[PathBuf; 2]>) -> GitStamps {
    files.map_or([None, None], |[index, exclude]| {
        [stamp_of(index), stamp_of(exclude)]
    })
}

impl Feed {
    pub(super) fn new(cookie_dir: &Path) -> Feed {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        Feed {
            instance: format!("{}-{nanos:x}", std::process::id()),
            cookie_dir: cookie_dir.to_path_buf(),
            cookies: AtomicU64::new(0),
            keys: RandomState::new(),
            state: Mutex::new(FeedState::default()),
            cookie_arrived: Condvar::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, FeedState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Journals `path` (relative, a directory ending in `/`).
    pub(super) fn push(&self, path: Vec<u8>) {
        let mut state = self.lock();
        // A file written in many pieces: no token falls between its events.
        if let Some((last, same)) = state.entries.back()
            && *last >= state.given
            && *same == path
        {
            return;
        }
        let n = state.next;
        state.next += 1;
        state.bytes += path.len();
        state.entries.push_back((n, path));
        while state.entries.len() > MAX_JOURNAL || state.bytes > MAX_JOURNAL_BYTES {
            let Some((dropped, path)) = state.entries.pop_front() else {
                break;
            };
            state.bytes -= path.len();
            state.floor = state.floor.max(dropped + 1);
        }
    }

    /// Rule 2: every token given so far becomes unknown.
    pub(super) fn reset(&self) {
        let mut state = self.lock();
        state.next += 1;
        state.floor = state.next;
        state.entries.clear();
        state.bytes = 0;
    }

    /// The watches are gone or must be made again: answers are "everything" until
    /// [`Feed::start`].
    pub(super) fn stop(&self) {
        self.lock().live = false;
        self.reset();
    }

    /// Every watch is in place (again), made for `checked` of `git_files` (the index and
    /// `info/exclude`); `exact`: the workspace is its work tree's root.
    pub(super) fn start(&self, exact: bool, git_files: Option<[PathBuf; 2]>, checked: GitStamps) {
        self.reset();
        let mut state = self.lock();
        state.live = true;
        state.exact = exact;
        state.git_files = git_files;
        state.checked = checked;
    }

    /// The stamps of git's files the watches were last made for.
    pub(super) fn checked(&self) -> GitStamps {
        self.lock().checked
    }

    pub(super) fn set_checked(&self, checked: GitStamps) {
        self.lock().checked = checked;
    }

    /// A file `name` appeared in the cookie dir: the cookie of a waiting query, or nothing.
    pub(super) fn cookie_seen(&self, name: &str) {
        let mut state = self.lock();
        if let Some(arrived) = state.awaited.get_mut(name) {
            *arrived = true;
            self.cookie_arrived.notify_all();
        }
    }

    fn token(&self, n: u64) -> String {
        format!("hookvisor:{}:{n}", self.instance)
    }

    /// Rule 3: writes a cookie and waits for its event; `false` when it did not come back.
    fn sync(&self) -> bool {
        let n = self.cookies.fetch_add(1, Ordering::SeqCst) + 1;
        let name = format!(
            "{COOKIE_PREFIX}{}-{n}-{:016x}",
            std::process::id(),
            self.keys.hash_one(n)
        );
        let cookie = self.cookie_dir.join(&name);
        self.lock().awaited.insert(name.clone(), false);
        if let Err(e) = fs::write(&cookie, b"") {
            tracing::warn!("fsmonitor cookie {}: {e}", cookie.display());
            self.lock().awaited.remove(&name);
            return false;
        }
        let deadline = Instant::now() + COOKIE_TIMEOUT;
        let mut state = self.lock();
        let arrived = loop {
            if state.awaited.get(&name) == Some(&true) {
                break true;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break false;
            }
            state = self
                .cookie_arrived
                .wait_timeout(state, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        };
        state.awaited.remove(&name);
        drop(state);
        let _ = fs::remove_file(&cookie);
        arrived
    }
}

impl ChangeFeed {
    /// The paths changed since `token` (module docs give the rules). It blocks until the
    /// watcher has read the events of every change made before the call (at most a second).
    pub fn since(&self, token: &str) -> FsmonitorAnswer {
        let feed = &self.0;
        let synced = feed.sync();
        let mut state = feed.lock();
        state.given = state.next;
        let now = feed.token(state.next);
        let git_now = stamps(state.git_files.as_ref());
        if !(synced && state.live && state.exact && git_now == state.checked) {
            return FsmonitorAnswer::everything(now);
        }
        let known = token
            .strip_prefix("hookvisor:")
            .and_then(|rest| rest.rsplit_once(':'))
            .filter(|(instance, _)| *instance == feed.instance)
            .and_then(|(_, n)| n.parse::<u64>().ok())
            .filter(|n| (state.floor..=state.next).contains(n));
        let Some(from) = known else {
            return FsmonitorAnswer::everything(now);
        };
        let first = state.entries.partition_point(|(n, _)| *n < from);
        let paths: BTreeSet<&Vec<u8>> = state.entries.range(first..).map(|(_, p)| p).collect();
        FsmonitorAnswer {
            token: now,
            paths: Some(paths.into_iter().cloned().collect()),
        }
    }

    /// Makes every token given so far unknown (their next answer is "everything").
    pub fn reset(&self) {
        self.0.reset();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(tmp: &Path) -> ChangeFeed {
        let feed = Feed::new(tmp);
        feed.start(true, None, [None, None]);
        ChangeFeed(Arc::new(feed))
    }

    /// `feed.since(token)` with a thread in the reader's place: it reports the query's cookie,
    /// read from the cookie dir.
    fn since(feed: &ChangeFeed, token: &str) -> FsmonitorAnswer {
        std::thread::scope(|s| {
            s.spawn(|| {
                loop {
                    let names = fs::read_dir(&feed.0.cookie_dir).unwrap();
                    if let Some(name) = names.flatten().next() {
                        feed.0.cookie_seen(name.file_name().to_str().unwrap());
                        return;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
            });
            feed.since(token)
        })
    }

    #[test]
    fn tokens_of_another_instance_or_below_the_floor_are_everything() {
        let tmp = tempfile::tempdir().unwrap();
        let feed = live(tmp.path());
        let first = since(&feed, "1700000000000000000");
        assert_eq!(first.paths, None);
        feed.0.push(b"a".to_vec());
        feed.0.push(b"d/".to_vec());
        feed.0.push(b"a".to_vec());
        let second = since(&feed, &first.token);
        assert_eq!(
            second.paths,
            Some(vec![b"a".to_vec(), b"d/".to_vec()]),
            "each path once"
        );
        assert_eq!(since(&feed, &second.token).paths, Some(vec![]));
        feed.reset();
        assert_eq!(since(&feed, &second.token).paths, None, "reset");
        let other = format!("hookvisor:1-2:{}", feed.0.lock().next);
        assert_eq!(since(&feed, &other).paths, None, "another instance");
    }

    #[test]
    fn a_path_journaled_again_after_a_token_was_given_is_in_the_next_answer() {
        let tmp = tempfile::tempdir().unwrap();
        let feed = live(tmp.path());
        let first = since(&feed, "none");
        feed.0.push(b"x".to_vec());
        feed.0.push(b"x".to_vec());
        assert_eq!(feed.0.lock().entries.len(), 1, "journaled once");
        let second = since(&feed, &first.token);
        assert_eq!(second.paths, Some(vec![b"x".to_vec()]));
        feed.0.push(b"x".to_vec());
        assert_eq!(since(&feed, &second.token).paths, Some(vec![b"x".to_vec()]));
    }

    #[test]
    fn a_token_older_than_the_journal_is_everything() {
        let tmp = tempfile::tempdir().unwrap();
        let feed = live(tmp.path());
        let token = feed.0.token(feed.0.lock().next);
        for i in 0..=MAX_JOURNAL {
            feed.0.push(format!("f{i}").into_bytes());
        }
        assert_eq!(since(&feed, &token).paths, None);
    }

    #[test]
    fn the_hook_output_is_token_nul_paths() {
        let answer = FsmonitorAnswer {
            token: "t".into(),
            paths: Some(vec![b"a".to_vec(), b"d/".to_vec()]),
        };
        assert_eq!(answer.to_hook_output(), b"t\0a\0d/\0");
        assert_eq!(FsmonitorAnswer::everything("t").to_hook_output(), b"t\0/\0");
    }
}

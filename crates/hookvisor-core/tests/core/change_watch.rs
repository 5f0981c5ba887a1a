//! The inotify-kept dirty set gives the same answer as a full scan, after every kind of change,
//! and answers from its events (not by scanning in full) when it can.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

use hookvisor_core::changes::{ChangeScan, FileState, ScanOptions, scan_with};
use hookvisor_core::watch::{ChangeWatcher, ScanKind};
use hookvisor_testkit::git;

fn write(root: &Path, rel: &str, text: &str) {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// `(path, Some(changed_at))` for a present file, `(path, None)` for a deleted one. The dates
/// of deletions are left out: each journal dates them at its own first sight.
fn summary(scan: &ChangeScan) -> Vec<(PathBuf, Option<i64>)> {
    scan.files
        .iter()
        .map(|f| {
            let at = match f.state {
                FileState::Present { changed_at } => Some(changed_at.as_nanos()),
                FileState::Deleted { .. } => None,
            };
            (f.path.clone(), at)
        })
        .collect()
}

/// Held shared by every [`Pair`], whole by the test that counts this process's reader threads
/// (it must not count other tests' watchers).
static WATCHERS: std::sync::RwLock<()> = std::sync::RwLock::new(());

/// A watcher on `ws` and, beside it, full scans with a journal of their own.
struct Pair {
    ws: PathBuf,
    watcher: ChangeWatcher,
    full_journal: PathBuf,
    options: ScanOptions,
    kinds: Vec<ScanKind>,
    // Declared last, so dropped after the watcher.
    _shared: Option<std::sync::RwLockReadGuard<'static, ()>>,
}

impl Pair {
    fn new(ws: &Path, state: &Path) -> Pair {
        let shared = WATCHERS.read().unwrap_or_else(|e| e.into_inner());
        Pair {
            _shared: Some(shared),
            ..Pair::unshared(ws, state)
        }
    }

    /// A pair for a test that holds [`WATCHERS`] whole.
    fn unshared(ws: &Path, state: &Path) -> Pair {
        let options = ScanOptions::new().exclude(state);
        let watcher = ChangeWatcher::start(
            ws,
            &state.join("watch.journal"),
            options.clone(),
            &state.join("cookies"),
        )
        .unwrap();
        assert!(
            watcher.is_watching(),
            "inotify must work here (fs.inotify.max_user_watches / max_user_instances)"
        );
        Pair {
            ws: ws.to_path_buf(),
            watcher,
            full_journal: state.join("full.journal"),
            options,
            kinds: Vec::new(),
            _shared: None,
        }
    }

    /// Scans both ways, asserts they agree, and says how the watcher answered.
    fn check(&mut self, step: &str) -> ScanKind {
        let (got, kind) = self.watcher.scan().unwrap();
        let want = scan_with(&self.ws, &self.full_journal, &self.options).unwrap();
        assert_eq!(
            summary(&got),
            summary(&want),
            "after {step}: the watcher ({kind:?}) and a full scan disagree"
        );
        assert!(got.cutoff <= want.cutoff, "after {step}: cutoff taken late");
        self.kinds.push(kind);
        kind
    }
}

fn repo(tmp: &Path) -> PathBuf {
    let ws = tmp.join("ws");
    fs::create_dir_all(&ws).unwrap();
    git(&ws, &["init", "-q"]);
    write(&ws, "a.txt", "a\n");
    write(&ws, "src/lib.rs", "lib\n");
    write(&ws, "src/deep/x.rs", "x\n");
    write(&ws, "docs/guide.md", "guide\n");
    write(&ws, ".gitignore", "build/\n*.log\n");
    write(&ws, "build/keep.txt", "tracked though ignored\n");
    git(&ws, &["add", "-A"]);
    git(&ws, &["add", "-f", "build/keep.txt"]);
    git(&ws, &["commit", "-q", "-m", "base"]);
    ws
}

#[test]
fn every_kind_of_change_gives_what_a_full_scan_gives() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = repo(tmp.path());
    let mut pair = Pair::new(&ws, &tmp.path().join("state"));

    assert_eq!(pair.check("start"), ScanKind::Full);
    assert_eq!(pair.check("nothing"), ScanKind::Unchanged);

    // Reading is not changing: git status, a read of every file, a listing of every directory.
    // (A git status that may write the index moves git's state, which is rule 5's full scan;
    // this one only reads.)
    let status = Command::new("git")
        .args(["status", "--porcelain"])
        .env("GIT_OPTIONAL_LOCKS", "0")
        .current_dir(&ws)
        .output()
        .unwrap();
    assert!(status.status.success());
    for entry in walk_files(&ws) {
        fs::read(&entry).unwrap();
    }
    assert_eq!(pair.check("only reads"), ScanKind::Unchanged);

    write(&ws, "a.txt", "a2\n");
    assert_eq!(pair.check("a tracked file modified"), ScanKind::Touched);
    assert_eq!(pair.check("nothing again"), ScanKind::Unchanged);

    write(&ws, "src/new.rs", "new\n");
    assert_eq!(pair.check("an untracked file"), ScanKind::Touched);

    fs::create_dir_all(ws.join("pkg/a/b")).unwrap();
    write(&ws, "pkg/a/b/c.go", "package b\n");
    write(&ws, "pkg/top.go", "package pkg\n");
    assert_eq!(pair.check("new nested directories"), ScanKind::Touched);
    write(&ws, "pkg/a/b/c.go", "package b // edited\n");
    assert_eq!(
        pair.check("a file in a directory watched late"),
        ScanKind::Touched
    );

    fs::remove_file(ws.join("src/deep/x.rs")).unwrap();
    assert_eq!(pair.check("a tracked file deleted"), ScanKind::Touched);
    fs::remove_dir_all(ws.join("docs")).unwrap();
    pair.check("a tracked directory deleted");

    fs::rename(ws.join("src/lib.rs"), ws.join("src/renamed.rs")).unwrap();
    pair.check("a file renamed");
    fs::rename(ws.join("pkg"), ws.join("pkg2")).unwrap();
    pair.check("a directory renamed");
    write(&ws, "pkg2/a/b/c.go", "package b // after the rename\n");
    pair.check("a file in the renamed directory");

    write(&ws, "debug.log", "ignored\n");
    write(&ws, "build/out.o", "ignored\n");
    assert_eq!(pair.check("ignored files"), ScanKind::Touched);
    write(&ws, "build/keep.txt", "changed\n");
    pair.check("a tracked file in an ignored directory");

    write(&ws, ".gitignore", "build/\n");
    assert_eq!(pair.check(".gitignore changed"), ScanKind::Full);
    write(&ws, "later.log", "no longer ignored\n");
    pair.check("a file .gitignore stopped ignoring");

    git(&ws, &["add", "a.txt"]);
    pair.check("git add");
    git(&ws, &["commit", "-q", "-m", "two"]);
    assert_eq!(pair.check("git commit"), ScanKind::Full);
    git(&ws, &["reset", "-q", "--soft", "HEAD~1"]);
    pair.check("git reset --soft");
    git(&ws, &["rm", "-q", "--cached", "a.txt"]);
    pair.check("git rm --cached");
    git(&ws, &["reset", "-q", "--hard"]);
    pair.check("git reset --hard");

    use std::os::unix::fs::PermissionsExt;
    fs::set_permissions(ws.join("a.txt"), fs::Permissions::from_mode(0o755)).unwrap();
    pair.check("chmod");

    write(&ws, "odd name 'q' \"d\".txt", "x\n");
    write(&ws, "line\nbreak.txt", "x\n");
    pair.check("names with spaces, quotes and a newline");

    assert_eq!(pair.check("nothing at the end"), ScanKind::Unchanged);
}

#[test]
fn many_changes_fall_back_to_a_full_scan_with_the_same_answer() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = repo(tmp.path());
    let mut pair = Pair::new(&ws, &tmp.path().join("state"));
    pair.check("start");
    // Written into a new directory, they would be one touched path: the directory.
    write(&ws, "gen/first.txt", "x\n");
    assert_eq!(pair.check("a new directory"), ScanKind::Touched);
    for i in 0..hookvisor_core::watch::MAX_TOUCHED + 10 {
        write(&ws, &format!("gen/f{i}.txt"), "x\n");
    }
    assert_eq!(pair.check("more paths than the bound"), ScanKind::Full);
    write(&ws, "gen/f1.txt", "y\n");
    assert_eq!(pair.check("one more after"), ScanKind::Touched);
}

/// Every file under `dir`, `.git` left out.
fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if entry.file_name() == ".git" {
            continue;
        }
        if path.is_dir() {
            files.extend(walk_files(&path));
        } else {
            files.push(path);
        }
    }
    files
}

/// The threads of this process that read inotify events for a watcher.
fn reader_threads() -> usize {
    fs::read_dir("/proc/self/task")
        .unwrap()
        .flatten()
        .filter(|t| {
            fs::read_to_string(t.path().join("comm")).is_ok_and(|c| c.trim() == "hv-inotify")
        })
        .count()
}

#[test]
fn restarts_and_drops_leave_no_reader_thread_behind() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = repo(tmp.path());
    let _alone = WATCHERS.write().unwrap_or_else(|e| e.into_inner());
    let mut pair = Pair::unshared(&ws, &tmp.path().join("state"));
    pair.check("start");
    // Each .gitignore edit makes the watcher start over with a new instance and thread.
    for i in 0..5 {
        write(&ws, ".gitignore", &format!("build/\n*.tmp{i}\n"));
        assert_eq!(pair.check(&format!(".gitignore edit {i}")), ScanKind::Full);
    }
    drop(pair);
    // No other test runs a watcher meanwhile. A thread's end cannot be awaited from outside
    // it: look every millisecond.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while reader_threads() > 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "{} inotify reader threads still running",
            reader_threads()
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
}

/// A small deterministic generator (xorshift64*), so a failure replays exactly.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }
}

#[test]
fn random_edits_agree_with_full_scans() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = repo(tmp.path());
    let mut pair = Pair::new(&ws, &tmp.path().join("state"));
    pair.check("start");
    let dirs = ["", "src", "src/deep", "t", "t/u", "build"];
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for round in 0..60 {
        for _ in 0..1 + rng.below(4) {
            let dir = dirs[rng.below(dirs.len())];
            let name = format!("f{}.txt", rng.below(6));
            let rel = if dir.is_empty() {
                name
            } else {
                format!("{dir}/{name}")
            };
            match rng.below(7) {
                0..=2 => write(&ws, &rel, &format!("{round}\n")),
                3 => {
                    let _ = fs::remove_file(ws.join(&rel));
                }
                4 => {
                    let to = format!("{}/moved{}.txt", dirs[1], rng.below(3));
                    let _ = fs::rename(ws.join(&rel), ws.join(to));
                }
                5 => {
                    let _ = fs::remove_dir_all(ws.join(dirs[3 + rng.below(2)]));
                }
                _ => {
                    git(&ws, &["add", "-A"]);
                }
            }
        }
        pair.check(&format!("round {round}"));
    }
    let fast = pair.kinds.iter().filter(|k| **k != ScanKind::Full).count();
    assert!(
        fast >= 10,
        "the watcher answered only {fast} of {} scans from its events: {:?}",
        pair.kinds.len(),
        pair.kinds
    );
}

#[test]
fn a_repository_subdirectory_as_workspace() {
    let tmp = tempfile::tempdir().unwrap();
    let top = repo(tmp.path());
    let ws = top.join("src");
    let mut pair = Pair::new(&ws, &tmp.path().join("state"));
    pair.check("start");
    write(&top, "outside.txt", "not in the workspace\n");
    write(&ws, "inside.rs", "in it\n");
    assert_eq!(pair.check("one file in, one out"), ScanKind::Touched);
    fs::remove_file(ws.join("lib.rs")).unwrap();
    pair.check("a deletion");
}

#[test]
fn a_workspace_without_git() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("plain");
    write(&ws, "a.txt", "a\n");
    write(&ws, "d/b.txt", "b\n");
    let mut pair = Pair::new(&ws, &tmp.path().join("state"));
    pair.check("start");
    assert_eq!(pair.check("nothing"), ScanKind::Unchanged);
    write(&ws, "d/c.txt", "c\n");
    pair.check("a new file");
    fs::remove_file(ws.join("a.txt")).unwrap();
    pair.check("a deletion");
    assert_eq!(pair.check("nothing again"), ScanKind::Unchanged);
}

/// Issue 12: a name that is not UTF-8 is touched like any other: answered from the events (it
/// used to make the watcher distrust itself and scan in full), with the exact bytes, created,
/// edited and deleted (the deletion through the journal).
#[test]
fn a_name_that_is_not_utf8_is_answered_from_the_events_byte_for_byte() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().unwrap();
    let ws = repo(tmp.path());
    let mut pair = Pair::new(&ws, &tmp.path().join("state"));
    assert_eq!(pair.check("start"), ScanKind::Full);
    let name = OsStr::from_bytes(b"src/caf\xe9.rs");
    fs::write(ws.join(name), "x").unwrap();
    assert_eq!(pair.check("create"), ScanKind::Touched);
    let (scan, _) = pair.watcher.scan().unwrap();
    assert!(
        scan.files.iter().any(|f| f.path.as_os_str() == name),
        "{:?}",
        scan.files
    );
    git(&ws, &["add", "-A"]);
    git(&ws, &["commit", "-q", "-m", "odd"]);
    assert_eq!(pair.check("commit"), ScanKind::Full);
    fs::write(ws.join(name), "edited").unwrap();
    assert_eq!(pair.check("edit"), ScanKind::Touched);
    fs::remove_file(ws.join(name)).unwrap();
    assert_eq!(pair.check("delete"), ScanKind::Touched);
    let (scan, _) = pair.watcher.scan().unwrap();
    assert!(
        scan.files
            .iter()
            .any(|f| f.path.as_os_str() == name && matches!(f.state, FileState::Deleted { .. })),
        "{:?}",
        scan.files
    );
}

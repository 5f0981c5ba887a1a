//! The dirty set according to git: `git status` of the workspace's part of its work tree, and a
//! `stat` of each dirty path. The rules cited here are those of the `changes` module docs (2).

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::fs;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::walk::Excluded;
use super::{ChangesError, Observed, Timestamp};
use crate::git::{Git, GitError};

/// The dirty set according to git, or `None` when the workspace is not in a work tree or git
/// is not installed (rule 3).
///
/// With `pathspecs` (relative to the workspace, taken literally) only those paths are asked
/// about; a path git cannot answer for makes it fail with [`ChangesError::Git`].
pub(super) fn git_dirty(
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
        Err(err @ (GitError::Exposed { .. } | GitError::Unchecked { .. })) => {
            Err(ChangesError::Refused(err))
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

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::{MetadataExt, symlink};
    use std::sync::atomic::Ordering;
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::changes::tests::{
        Fixture, expect, git, has_git, journal_in, non_utf8_name, repo, summary, write,
    };
    use crate::changes::{ChangesError, scan};

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

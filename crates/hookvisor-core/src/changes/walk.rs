//! A workspace outside git: every file not ignored, walked the way git would look, and the paths
//! a scan never reports. The rules cited here are those of the `changes` module docs (3).

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::Timestamp;

/// The excluded paths, relative to the workspace, as bytes without a trailing `/`.
pub(super) struct Excluded(Vec<Vec<u8>>);

impl Excluded {
    pub(super) fn new(workspace: &Path, exclude: &[PathBuf]) -> Excluded {
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

    pub(super) fn contains(&self, rel: impl AsRef<[u8]>) -> bool {
        let rel = rel.as_ref();
        self.0
            .iter()
            .any(|ex| rel.starts_with(ex) && (rel.len() == ex.len() || rel[ex.len()] == b'/'))
    }
}

/// Every file of the workspace with its change time, honouring `.gitignore` (rule 3).
pub(super) fn walk(workspace: &Path, excluded: &Excluded) -> Vec<(OsString, Timestamp)> {
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

#[cfg(test)]
mod tests {
    use std::fs;
    use std::path::PathBuf;

    use super::*;
    use crate::changes::tests::{
        Fixture, expect, has_git, journal_in, non_utf8_name, repo, summary, write,
    };
    use crate::changes::{ScanOptions, scan_with};

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
}

//! The children of a state dir as a dashboard reads them: the child dirs under
//! `<state>/children/`, the record of the detached ones, and each child's own `status.json`,
//! all in a directory the agent can write.
//!
//! The rules, written once here:
//!
//! 1. **Names.** A child is named by its dir's name: `[A-Za-z0-9._-]`, 1 to 255 bytes, no
//!    leading `.` and no `..` anywhere ([`is_child_name`]). Any other name is refused before
//!    the file system is touched; a dir of another name is not listed.
//! 2. **No link is followed.** `children/`, the child dir and the files in them are opened one
//!    component at a time, each relative to the descriptor of the one before (`openat`), with
//!    `O_NOFOLLOW`; `children/` and a child dir must be directories owned by our effective uid,
//!    and a file must be a regular file with one link, opened without blocking (so a FIFO
//!    cannot hang the reader): the status store's rule 3.
//! 3. **Bounded.** A child's `status.json` is read up to 8 MiB (the store's limit),
//!    `children.json` up to 16 MiB, and at most [`MAX_LISTED`] children are listed, the most
//!    recently changed first, of the first [`MAX_SCANNED`] entries of `children/` (the agent
//!    can plant millions, and each costs an open and a stat).
//! 4. **Whose child.** A detached child's hook is the one its record names. Another child's is
//!    read from its name, `<event>-<iteration>-<hookId>[-N]` (module rule 2), against the
//!    spawn hooks of the parent's status: an exact `<hookId>` wins over one followed by `-N`.
//!    A name that matches no hook is listed without one.
//! 5. **Detached state.** The record's `running` is shown as `exited` once its process is gone
//!    (the same pid and start-time check `session.end` makes).

use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd as _, OwnedFd};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use nix::fcntl::{OFlag, openat};
use nix::sys::stat::Mode;
use serde::Serialize;

use super::detached;
use hookvisor_core::context::Context;
use hookvisor_core::state::StateDir;
use hookvisor_core::status::Status;
use hookvisor_core::timestamp::rfc3339;
use hookvisor_core::untrusted::not_ours;

/// The most children listed (rule 3).
pub(crate) const MAX_LISTED: usize = 500;

/// The most entries of `children/` read for one listing (rule 3).
pub(crate) const MAX_SCANNED: usize = 10 * MAX_LISTED;

/// Bytes of a child's `status.json` read, as the status store reads its own.
const MAX_STATUS_BYTES: u64 = 8 << 20;

/// Bytes of `children.json` read, as the detached record's writer reads it.
const MAX_RECORD_BYTES: u64 = 16 << 20;

/// One child dir, as `GET /v1/children` lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ChildInfo {
    /// The dir's name under `children/`, which names the child in every route.
    pub name: String,
    /// The spawn hook it belongs to, when known (rule 4).
    pub hook_id: Option<String>,
    /// When the dir last changed (RFC 3339).
    pub modified_at: Option<String>,
    /// Whether it holds a `status.json` of its own (a pipeline child's loop writes one).
    pub has_status: bool,
    /// Its record, for a detached child.
    pub detached: Option<DetachedInfo>,
}

/// A detached child's record (rule 5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DetachedInfo {
    /// Its pid, also its process group.
    pub pid: i32,
    /// `running`, `exited` or `stopped` (by `session.end`).
    pub state: String,
    /// When it started (RFC 3339).
    pub started_at: String,
}

/// Why the children or one child's status cannot be read; each says what to do.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ChildrenError {
    /// The name breaks rule 1.
    #[error(
        "'{name}' is no child name; use a name from GET /v1/children (letters, digits, '.', '_', \
         '-', no '..')"
    )]
    BadName {
        /// The name as given, shortened.
        name: String,
    },
    /// No such child, or no `status.json` in it.
    #[error("{} does not exist; GET /v1/children lists the children", path.display())]
    NotFound {
        /// What is missing.
        path: PathBuf,
    },
    /// Something is there that hookvisor did not make (rule 2), or is over its limit.
    #[error("{} {why}; remove it, hookvisor does not read it", path.display())]
    Unusable {
        /// The file or dir.
        path: PathBuf,
        /// What it is instead.
        why: String,
    },
    /// The file system failed.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// Where.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// The child's `status.json` does not parse.
    #[error(
        "{} does not parse ({source}); status files are replaced whole, so something other than \
         hookvisor wrote it: remove it",
        path.display()
    )]
    Parse {
        /// The file.
        path: PathBuf,
        /// What the parser said.
        source: serde_json::Error,
    },
}

/// Whether `name` may name a child (rule 1).
pub fn is_child_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 255
        && !name.starts_with('.')
        && !name.contains("..")
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// The children of `ctx`'s state dir, most recently changed first; `status` is the parent's,
/// for rule 4. No `children/` yet is an empty list.
pub fn list_children(ctx: &Context, status: &Status) -> Result<Vec<ChildInfo>, ChildrenError> {
    let root = children_path(ctx);
    let children = match open_dir(None, &root) {
        Ok(fd) => fd,
        Err(ChildrenError::NotFound { .. }) => return Ok(Vec::new()),
        Err(err) => return Err(err),
    };
    let record = read_record(&children, &root);
    // The names, through the descriptor: a `children` swapped for a link since is not read.
    let listed = std::fs::read_dir(format!("/proc/self/fd/{}", children.as_raw_fd()))
        .map_err(|source| io_error(&root, source))?;
    let mut found = Vec::new();
    for entry in listed.flatten().take(MAX_SCANNED) {
        let Some(name) = entry.file_name().to_str().map(str::to_owned) else {
            continue;
        };
        if !is_child_name(&name) {
            continue;
        }
        // Rule 2 for each: a dir of ours, not a link.
        let Ok(dir) = open_dir(Some(&children), Path::new(&name)) else {
            continue;
        };
        let modified = File::from(dir.try_clone().map_err(|e| io_error(&root, e))?)
            .metadata()
            .ok()
            .map(|m| SystemTime::UNIX_EPOCH + Duration::from_secs(m.mtime().max(0) as u64));
        let has_status = open_file(&dir, &root.join(&name), StateDir::STATUS_FILE).is_ok();
        found.push((modified, name, has_status));
    }
    found.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    found.truncate(MAX_LISTED);
    let children_dir = ctx.state().children_dir();
    Ok(found
        .into_iter()
        .map(|(modified, name, has_status)| {
            let detached = record
                .iter()
                .find(|e| e.dir.file_name() == Some(name.as_ref()));
            let hook_id = match detached {
                Some(entry) => Some(entry.hook_id.clone()),
                None => hook_of(&name, status),
            };
            ChildInfo {
                hook_id,
                modified_at: modified.map(rfc3339),
                has_status,
                detached: detached.map(|entry| DetachedInfo {
                    pid: entry.pid,
                    state: detached::shown_state(entry, &children_dir),
                    started_at: rfc3339(
                        SystemTime::UNIX_EPOCH + Duration::from_secs(entry.started_at),
                    ),
                }),
                name,
            }
        })
        .collect())
}

/// The `status.json` of the child `name` of `ctx`'s state dir (rules 1 to 3).
pub fn child_status(ctx: &Context, name: &str) -> Result<Status, ChildrenError> {
    if !is_child_name(name) {
        return Err(ChildrenError::BadName {
            name: name.chars().take(80).collect(),
        });
    }
    let root = children_path(ctx);
    let children = open_dir(None, &root)?;
    let dir = open_dir(Some(&children), Path::new(name))?;
    let path = root.join(name).join(StateDir::STATUS_FILE);
    let file = open_file(&dir, &root.join(name), StateDir::STATUS_FILE)?;
    let bytes = read_bounded(file, &path, MAX_STATUS_BYTES)?;
    Status::from_json(&bytes).map_err(|source| ChildrenError::Parse { path, source })
}

/// `<state>/children`.
fn children_path(ctx: &Context) -> PathBuf {
    ctx.state().children_dir()
}

/// Rule 4: the spawn hook of `status` whose child dirs are named like `name`.
fn hook_of(name: &str, status: &Status) -> Option<String> {
    let mut suffixed = None;
    for (id, entry) in &status.hooks {
        if entry.action.as_deref() != Some("spawn") {
            continue;
        }
        let Some(event) = entry.event.as_deref() else {
            continue;
        };
        // `<event>-<iteration>-`, then the id, then maybe `-N`.
        let Some(rest) = name
            .strip_prefix(super::child::plain(event).as_str())
            .and_then(|r| r.strip_prefix('-'))
        else {
            continue;
        };
        let Some((iteration, rest)) = rest.split_once('-') else {
            continue;
        };
        if iteration.is_empty() || !iteration.bytes().all(|b| b.is_ascii_digit()) {
            continue;
        }
        let plain_id = super::child::plain(id);
        if rest == plain_id {
            return Some(id.clone());
        }
        let retry = rest
            .strip_prefix(plain_id.as_str())
            .and_then(|r| r.strip_prefix('-'));
        if retry.is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit())) {
            suffixed.get_or_insert_with(|| id.clone());
        }
    }
    suffixed
}

/// The detached record, or none when there is no `children.json`. A record that is not one
/// hookvisor wrote (rule 2, 3) or that does not parse is left out with a warning: the children
/// it named are then listed without their pids, the rest as ever.
fn read_record(children: &OwnedFd, root: &Path) -> Vec<detached::Entry> {
    let path = root.join("children.json");
    let bytes = match open_file(children, root, "children.json")
        .and_then(|file| read_bounded(file, &path, MAX_RECORD_BYTES))
    {
        Ok(bytes) => bytes,
        Err(ChildrenError::NotFound { .. }) => return Vec::new(),
        Err(err) => {
            tracing::warn!("{err}");
            return Vec::new();
        }
    };
    serde_json::from_slice(&bytes).unwrap_or_else(|err| {
        tracing::warn!(
            "{} does not parse ({err}); listing the children without it",
            path.display()
        );
        Vec::new()
    })
}

/// Opens the directory `path` (relative to `parent`, one component, when given) without
/// following a link; it must be ours (rule 2).
fn open_dir(parent: Option<&OwnedFd>, path: &Path) -> Result<OwnedFd, ChildrenError> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
    let opened = match parent {
        Some(parent) => openat(parent, path, flags, Mode::empty()),
        None => nix::fcntl::open(path, flags, Mode::empty()),
    };
    let fd = opened.map_err(|errno| match errno {
        nix::errno::Errno::ENOENT => ChildrenError::NotFound {
            path: path.to_owned(),
        },
        // O_NOFOLLOW on a link, O_DIRECTORY on anything else.
        nix::errno::Errno::ELOOP | nix::errno::Errno::ENOTDIR => ChildrenError::Unusable {
            path: path.to_owned(),
            why: "is no directory (a symbolic link or a file)".to_owned(),
        },
        other => io_error(path, io::Error::from(other)),
    })?;
    let meta = File::from(fd.try_clone().map_err(|e| io_error(path, e))?)
        .metadata()
        .map_err(|e| io_error(path, e))?;
    if meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(ChildrenError::Unusable {
            path: path.to_owned(),
            why: format!("is owned by uid {}, not by us", meta.uid()),
        });
    }
    Ok(fd)
}

/// Opens the file `name` of the directory `dir` (at `dir_path`, for messages) read-only if it
/// is a regular file with one link, without following a link or blocking (rule 2).
fn open_file(dir: &OwnedFd, dir_path: &Path, name: &str) -> Result<File, ChildrenError> {
    let path = dir_path.join(name);
    let flags = OFlag::O_RDONLY
        | OFlag::O_NOFOLLOW
        | OFlag::O_NONBLOCK
        | OFlag::O_NOCTTY
        | OFlag::O_CLOEXEC;
    let fd = openat(dir, name, flags, Mode::empty()).map_err(|errno| match errno {
        nix::errno::Errno::ENOENT => ChildrenError::NotFound { path: path.clone() },
        nix::errno::Errno::ELOOP => ChildrenError::Unusable {
            path: path.clone(),
            why: "is a symbolic link, not a regular file".to_owned(),
        },
        other => io_error(&path, io::Error::from(other)),
    })?;
    let file = File::from(fd);
    let meta = file.metadata().map_err(|e| io_error(&path, e))?;
    match not_ours(&meta) {
        Some(why) => Err(ChildrenError::Unusable { path, why }),
        None => Ok(file),
    }
}

/// All of `file`, refused over `limit` bytes (rule 3).
fn read_bounded(file: File, path: &Path, limit: u64) -> Result<Vec<u8>, ChildrenError> {
    hookvisor_core::state::read_capped(file, limit)
        .map_err(|e| io_error(path, e))?
        .ok_or_else(|| ChildrenError::Unusable {
            path: path.to_owned(),
            why: format!("is over the limit of {} MiB", limit >> 20),
        })
}

fn io_error(path: &Path, source: io::Error) -> ChildrenError {
    ChildrenError::Io {
        path: path.to_owned(),
        source,
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::symlink;

    use super::*;
    use hookvisor_core::status::HookStatus;

    fn ctx(dir: &Path) -> Context {
        Context {
            workspace: dir.join("ws"),
            session_id: "s".into(),
            state_dir: dir.join("state"),
        }
    }

    fn spawn_entry(id: &str, event: &str) -> HookStatus {
        let mut entry = HookStatus::new(
            id,
            id,
            hookvisor_core::status::EntryType::Event(event.into()),
        );
        entry.event = Some(event.into());
        entry.action = Some("spawn".into());
        entry
    }

    #[test]
    fn names() {
        for ok in ["task.complete-0-review", "a", "x-1_2.3"] {
            assert!(is_child_name(ok), "{ok}");
        }
        for bad in [
            "",
            ".",
            "..",
            "a..b",
            ".hidden",
            "a/b",
            "a b",
            "é",
            &"x".repeat(256),
        ] {
            assert!(!is_child_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_child_belongs_to_the_hook_its_name_says() {
        let mut status = Status::default();
        status
            .hooks
            .insert("review".into(), spawn_entry("review", "task.complete"));
        status
            .hooks
            .insert("review-2".into(), spawn_entry("review-2", "task.complete"));
        status.hooks.insert(
            "plain".into(),
            HookStatus::new("plain", "plain", hookvisor_core::HookKind::File),
        );
        let cases = [
            ("task.complete-0-review", Some("review")),
            ("task.complete-12-review-3", Some("review")),
            ("task.complete-0-review-2", Some("review-2")),
            ("task.complete-0-review-2-1", Some("review-2")),
            ("task.complete-x-review", None),
            ("stage.complete-0-review", None),
            ("task.complete-0-plain", None),
            ("task.complete-0-reviewer", None),
        ];
        for (name, want) in cases {
            assert_eq!(hook_of(name, &status).as_deref(), want, "{name}");
        }
    }

    #[test]
    fn links_fifos_and_strangers_are_not_read() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = ctx(dir.path());
        assert_eq!(
            list_children(&ctx, &Status::default()).unwrap(),
            [],
            "no children/ yet"
        );
        let children = ctx.state().children_dir();
        fs::create_dir_all(children.join("task.complete-0-a")).unwrap();
        fs::write(
            children.join("task.complete-0-a/status.json"),
            r#"{"hooks":{},"pendingHooks":["x"]}"#,
        )
        .unwrap();
        // A child dir that is a link to a real child elsewhere, and a status that is one.
        let elsewhere = dir.path().join("elsewhere");
        fs::create_dir_all(&elsewhere).unwrap();
        fs::write(elsewhere.join("status.json"), "{}").unwrap();
        symlink(&elsewhere, children.join("task.complete-0-link")).unwrap();
        fs::create_dir(children.join("task.complete-0-b")).unwrap();
        symlink(
            elsewhere.join("status.json"),
            children.join("task.complete-0-b/status.json"),
        )
        .unwrap();
        fs::create_dir(children.join("task.complete-0-fifo")).unwrap();
        nix::unistd::mkfifo(
            &children.join("task.complete-0-fifo/status.json"),
            Mode::from_bits_truncate(0o600),
        )
        .unwrap();

        // A record that is a link to elsewhere is no record, and no reason to list nothing.
        fs::write(elsewhere.join("children.json"), "[]").unwrap();
        symlink(
            elsewhere.join("children.json"),
            children.join("children.json"),
        )
        .unwrap();
        let listed = list_children(&ctx, &Status::default()).unwrap();
        let mut names: Vec<(&str, bool)> = listed
            .iter()
            .map(|c| (c.name.as_str(), c.has_status))
            .collect();
        names.sort_unstable();
        assert_eq!(
            names,
            [
                ("task.complete-0-a", true),
                ("task.complete-0-b", false),
                ("task.complete-0-fifo", false)
            ]
        );
        let status = child_status(&ctx, "task.complete-0-a").unwrap();
        assert_eq!(status.pending_hooks, ["x"]);
        for (name, want) in [
            ("task.complete-0-link", "is no directory"),
            ("task.complete-0-b", "symbolic link"),
            ("task.complete-0-fifo", "FIFO"),
            ("task.complete-0-none", "does not exist"),
            ("../state", "no child name"),
        ] {
            let err = child_status(&ctx, name).unwrap_err().to_string();
            assert!(err.contains(want), "{name}: {err}");
        }

        // `children` itself a link: nothing is read through it.
        fs::rename(&children, dir.path().join("moved")).unwrap();
        symlink(dir.path().join("moved"), &children).unwrap();
        let err = child_status(&ctx, "task.complete-0-a")
            .unwrap_err()
            .to_string();
        assert!(err.contains("is no directory"), "{err}");
        assert!(list_children(&ctx, &Status::default()).is_err());
    }
}

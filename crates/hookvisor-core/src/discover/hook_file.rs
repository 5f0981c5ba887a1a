//! Reading one entry of the hooks directory: what kind of file it is, its head and its front
//! matter.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::fields::{Loaded, hook_from_fields};
use super::{GLOBAL_ID_PREFIX, KNOWN_FIELDS};
use crate::event::HookKind;
use crate::frontmatter::{self, FrontMatterError, Note};
use crate::hook::hook_id;
use crate::hook::{Binds, Hook, Origin, Problem, ProblemKind, RunAs};

/// How much of a script is read to find its front matter.
const HEAD_LIMIT: u64 = 64 * 1024;

/// What a hook file says besides the [`Hook`] itself.
pub(super) struct HookFile {
    pub(super) hook: Hook,
    /// Front matter keys hookvisor does not know.
    pub(super) unknown: Vec<String>,
    /// Where the front matter's readings disagree (front matter rule 7).
    pub(super) notes: Vec<Note>,
    /// Front matter `retries`, when given.
    pub(super) retries: Option<u32>,
    /// The 1-based line of each front matter field, for the warnings' lines.
    pub(super) lines: BTreeMap<String, usize>,
}

/// Reads one entry: `Ok(None)` for a directory, `Err` for a file that will not run.
pub(super) fn read_hook(path: &Path, origin: Origin) -> Result<Option<HookFile>, Box<Problem>> {
    // Only a script or a `.yml`/`.yaml` can be a hook: another file binds no event (Binds).
    let yaml = path
        .file_name()
        .is_some_and(|n| is_yaml(&n.to_string_lossy()));
    // What the file's head says it meant to be; a file whose head is unread may be anything.
    // An executable is run as a hook whatever its first bytes (a mark or no `#!` only makes
    // it fail), so its head may name a gate too.
    let executable =
        || fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0);
    let refuse = |kind: ProblemKind, head: Option<&str>| {
        let binds = match head {
            Some(text) => Binds::of_head(
                text,
                yaml || text.trim_start_matches('\u{feff}').starts_with("#!") || executable(),
            ),
            None if kind.hides_the_file() => Binds::Any,
            None => Binds::Nothing,
        };
        let line = kind
            .line()
            .or_else(|| head.and_then(|text| line_of(&kind, text)));
        Box::new(Problem {
            path: path.to_owned(),
            line,
            binds,
            kind,
        })
    };
    // A file refused before its head is read still says which kind of hook it meant to be.
    let refuse_by_file = |kind: ProblemKind| match read_head(path) {
        Ok(head) => refuse(kind, Some(&String::from_utf8_lossy(&head))),
        Err(_) => refuse(kind, None),
    };
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Err(refuse_by_file(ProblemKind::NameNotUtf8));
    };
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(_) if fs::symlink_metadata(path).is_ok() => {
            let target = fs::read_link(path)
                .map(|t| t.display().to_string())
                .unwrap_or_default();
            return Err(refuse(ProblemKind::BrokenSymlink { target }, None));
        }
        Err(e) => {
            let error = e.to_string();
            return Err(refuse(ProblemKind::Inaccessible { error }, None));
        }
    };
    if meta.is_dir() {
        return Ok(None);
    }
    if !meta.is_file() {
        return Err(refuse(ProblemKind::NotRegularFile, None));
    }
    let id = hook_id(name);
    if id.is_empty() {
        return Err(refuse_by_file(ProblemKind::EmptyId));
    }
    // A prefix no workspace id can have: the two directories never share an id in status.json.
    let id = match origin {
        // Imported hooks come from no hook file; their ids are the importer's.
        Origin::Workspace | Origin::Imported { .. } => id,
        Origin::Global => format!("{GLOBAL_ID_PREFIX}{id}"),
    };
    let head = read_head(path).map_err(|e| {
        let error = e.to_string();
        refuse(ProblemKind::Unreadable { error }, None)
    })?;
    let text = String::from_utf8_lossy(&head);
    let refuse = |kind: ProblemKind| refuse(kind, Some(&text));
    let executable = meta.permissions().mode() & 0o111 != 0;
    if !executable && is_yaml(name) {
        return read_declarative(id, path, &text, origin)
            .map_err(refuse)
            .map(Some);
    }
    if !text.starts_with("#!") {
        if text.starts_with("\u{7f}ELF") {
            return Err(refuse(ProblemKind::Binary));
        }
        return Err(refuse(ProblemKind::NoShebang));
    }
    let front = frontmatter::read(&text).map_err(|e| {
        refuse(match e {
            FrontMatterError::Crlf => ProblemKind::CrlfLineEndings {
                path: path.to_owned(),
            },
            other => ProblemKind::FrontMatter(other),
        })
    })?;
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(refuse(ProblemKind::NotExecutable {
            path: path.to_owned(),
        }));
    }
    hook_file(id, path, front, false, origin)
        .map_err(refuse)
        .map(Some)
}

/// A hook from its read front matter, with what discovery reports besides.
fn hook_file(
    id: String,
    path: &Path,
    front: frontmatter::FrontMatter,
    declarative: bool,
    origin: Origin,
) -> Result<HookFile, ProblemKind> {
    let Loaded { hook, retries } = hook_from_fields(id, path, &front, declarative, origin)?;
    let unknown = front
        .fields
        .keys()
        .filter(|k| !KNOWN_FIELDS.contains(&k.as_str()))
        .cloned()
        .collect();
    Ok(HookFile {
        hook,
        unknown,
        notes: front.notes,
        retries,
        lines: front.lines,
    })
}

/// Whether `head`, the first bytes of the file `hook` was read from, declares what planned it
/// as a root hook: a script the phase-1 runner runs as a session hook, `run_as: root` (by
/// `type: session` or its `event: session.start`). The seal re-reads the bytes it will run
/// with this, discovery's own reading, so that plan and check cannot disagree.
pub(crate) fn declares_root_session(hook: &Hook, head: &[u8]) -> bool {
    let text = String::from_utf8_lossy(head);
    if !text.starts_with("#!") {
        return false;
    }
    let Ok(front) = frontmatter::read(&text) else {
        return false;
    };
    hook_from_fields(hook.id.clone(), &hook.path, &front, false, hook.origin).is_ok_and(
        |Loaded { hook, .. }| {
            hook.phase1 && hook.kind == HookKind::Session && hook.run_as == RunAs::Root
        },
    )
}

/// Whether a file name ends in `.yml` or `.yaml`, in any case.
fn is_yaml(name: &str) -> bool {
    name.rsplit_once('.')
        .is_some_and(|(_, ext)| ext.eq_ignore_ascii_case("yml") || ext.eq_ignore_ascii_case("yaml"))
}

/// A declarative hook (docs/EVENTS.md §2.1): a non-executable `.yml` whose whole content is one
/// `---` front matter block, saying with `run` or `argv` what to run.
fn read_declarative(
    id: String,
    path: &Path,
    text: &str,
    origin: Origin,
) -> Result<HookFile, ProblemKind> {
    // Line 1 must open the block: a `#!` line would make it a script that is not executable.
    if !text.starts_with("---") {
        return Err(ProblemKind::FrontMatter(FrontMatterError::Missing));
    }
    let front = frontmatter::read(text).map_err(|e| match e {
        FrontMatterError::Crlf => ProblemKind::CrlfLineEndings {
            path: path.to_owned(),
        },
        other => ProblemKind::FrontMatter(other),
    })?;
    let after = text
        .split('\n')
        .enumerate()
        .skip(front.end_line)
        .find(|(_, line)| !line.trim().is_empty());
    if let Some((index, _)) = after {
        return Err(ProblemKind::TextAfterFrontMatter { line: index + 1 });
    }
    hook_file(id, path, front, true, origin)
}

/// The line of a hook file whose head is `text` that `kind`, naming none itself, is on
/// (docs/EVENTS.md §5 rule 10): the field at fault; the front matter's first line for a field that
/// is missing or a block that does not read; else the file's first line. `None` for a problem
/// of the file's name, which is on no line.
fn line_of(kind: &ProblemKind, text: &str) -> Option<usize> {
    let opening = if text.starts_with("#!") { 2 } else { 1 };
    match kind {
        ProblemKind::NameNotUtf8 | ProblemKind::EmptyId => None,
        ProblemKind::FrontMatter(
            FrontMatterError::Unclosed { line, .. } | FrontMatterError::Syntax { line, .. },
        ) => Some(*line),
        ProblemKind::FrontMatter(FrontMatterError::NotOnItsLine { .. })
        | ProblemKind::MissingType
        | ProblemKind::MissingEvent
        | ProblemKind::NoCommand => Some(opening),
        _ => {
            let field = kind
                .field()
                .and_then(|key| frontmatter::read(text).ok()?.lines.get(key).copied());
            Some(field.unwrap_or(1))
        }
    }
}

/// The first [`HEAD_LIMIT`] bytes of a regular file. The agent can write the hooks directory, so
/// the open never waits (a FIFO opens at once) and what was opened is checked, not what the
/// path was a moment before: anything but a regular file is an error, never a read.
fn read_head(path: &Path) -> std::io::Result<Vec<u8>> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut head = Vec::new();
    file.take(HEAD_LIMIT).read_to_end(&mut head)?;
    Ok(head)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;
    use crate::discover::tests::Dir;
    use crate::event::Event;

    /// The agent can write the hooks directory: a FIFO there must never make discovery wait
    /// for a writer that never comes (an evaluation, a `fire`, the init's discovery would hang).
    /// A name that is not UTF-8, or that makes an empty id, used to be read for its declared
    /// kind before its type was checked.
    #[test]
    fn a_fifo_in_the_hooks_dir_never_blocks_discovery() {
        use std::ffi::OsStr;
        use std::os::unix::ffi::OsStrExt;
        use std::sync::mpsc;
        use std::time::Duration;

        let dir = Dir::new();
        let mode = nix::sys::stat::Mode::from_bits_truncate(0o644);
        for name in [OsStr::from_bytes(b"\xffhook.sh"), OsStr::new("@@@.sh")] {
            nix::unistd::mkfifo(&dir.0.path().join(name), mode).unwrap();
        }
        let hooks = dir.0.path().to_owned();
        let (done, finished) = mpsc::channel();
        std::thread::spawn(move || done.send(crate::discover(&hooks)).unwrap());
        let discovery = finished
            .recv_timeout(Duration::from_secs(10))
            .expect("discovery blocked on a FIFO");
        assert!(discovery.hooks.is_empty());
        assert_eq!(discovery.problems.len(), 2, "{:?}", discovery.problems);
        for problem in &discovery.problems {
            assert_eq!(problem.line, None, "{problem}: its head was never read");
        }
    }

    /// Pre-commit keeps the problems of pre-commit hooks (and of files it cannot read) from
    /// what discovery stored, by the one reading of their head a gate uses.
    #[test]
    fn problems_say_whether_the_file_may_be_a_pre_commit_hook() {
        let dir = Dir::new();
        dir.hook("commit.sh", "# type: pre-commit\n# run_as: admin");
        dir.hook("session.sh", "# type: session\n# run_as: admin");
        dir.hook("untyped.sh", "# name: x");
        dir.write(
            "noexec.sh",
            "#!/bin/sh\n#---\n# type: pre-commit\n#---\n",
            0o644,
        );
        dir.write(
            "crlf.sh",
            "#!/bin/sh\r\n#---\r\n# type: pre-commit\r\n#---\r\n",
            0o755,
        );
        dir.write("mentions.sh", "#!/bin/sh\n# a pre-commit hook\n", 0o755);
        dir.write("silent.sh", "#!/bin/sh\necho hi\n", 0o755);
        dir.hook("event.sh", "# event: commit.before\n# when: (");
        dir.hook("dup.sh", "# type: pre-commit");
        dir.hook("DUP.py", "# type: file\n# pattern: x");
        symlink(dir.0.path().join("gone"), dir.0.path().join("broken.sh")).unwrap();

        let d = dir.discover();
        let got: Vec<(String, bool)> = d
            .problems
            .iter()
            .map(|p| {
                let name = p.path.file_name().unwrap().to_string_lossy().into_owned();
                (name, p.may_bind(&Event::CommitBefore))
            })
            .collect();
        let want = [
            ("DUP.py", false),
            ("broken.sh", true),
            ("commit.sh", true),
            ("crlf.sh", true),
            ("dup.sh", true),
            ("event.sh", true),
            ("mentions.sh", true),
            ("noexec.sh", true),
            ("session.sh", false),
            ("silent.sh", false),
            ("untyped.sh", false),
        ];
        let want: Vec<(String, bool)> = want
            .into_iter()
            .map(|(name, may)| (name.to_owned(), may))
            .collect();
        assert_eq!(got, want);
    }

    /// A gate fails closed on the files that may be its hooks (crate::fire step 1): what each
    /// broken file binds, and that files which cannot be hooks bind nothing.
    #[test]
    fn problems_say_which_event_the_file_meant_to_bind() {
        let dir = Dir::new();
        dir.hook("gate.sh", "# event: tool.before\n# when: (");
        dir.hook("typed.sh", "# type: file\n# run_as: admin");
        dir.hook("typo.sh", "# event: tool.befor");
        dir.write("unclosed.yml", "---\nevent: tool.after\n", 0o644);
        dir.write(
            "crlf.sh",
            "#!/bin/sh\r\n#---\r\n# event: turn.start\r\n#---\r\n",
            0o755,
        );
        dir.write("helper.sh", "#!/bin/sh\necho hi\n", 0o755);
        dir.write("README.md", "---\nevent: tool.before\n", 0o644);
        dir.write("gate.yml~", "---\nevent: tool.before\nrun: x\n---\n", 0o644);
        dir.write("notes.md", "---\ntitle: notes\n---\n", 0o644);
        dir.hook("one.sh", "# event: task.start");
        dir.hook("ONE.py", "# event: task.start");
        symlink(dir.0.path().join("gone"), dir.0.path().join("broken.sh")).unwrap();

        let got: Vec<(String, Binds)> = dir
            .discover()
            .problems
            .into_iter()
            .map(|p| {
                (
                    p.path.file_name().unwrap().to_string_lossy().into(),
                    p.binds,
                )
            })
            .collect();
        let want = [
            ("ONE.py", Binds::Event(Event::TaskStart)),
            ("README.md", Binds::Nothing),
            ("broken.sh", Binds::Any),
            ("crlf.sh", Binds::Event(Event::TurnStart)),
            ("gate.sh", Binds::Event(Event::ToolBefore)),
            ("gate.yml~", Binds::Nothing),
            ("helper.sh", Binds::Nothing),
            ("notes.md", Binds::Nothing),
            ("one.sh", Binds::Event(Event::TaskStart)),
            ("typed.sh", Binds::Phase1(HookKind::File)),
            ("typo.sh", Binds::Any),
            ("unclosed.yml", Binds::Any),
        ];
        let want: Vec<(String, Binds)> = want.into_iter().map(|(n, b)| (n.into(), b)).collect();
        assert_eq!(got, want);
    }
}

//! `hookvisor import [SOURCE] --print|--write` (docs/EVENTS.md §2.2, §5 rule 11): the other tools'
//! entries made declarative hook files, and taken out of their files, so that each runs once.
//! The rules, written once here:
//!
//! 1. **What.** Every entry that runs today (the module's rules 1 to 4), the same ones
//!    discovery reads, source by source; entries with problems are not converted and stay in
//!    their file, each named with its line. A file that does not parse stops the import
//!    before anything changes.
//! 2. **Which files.** Without SOURCE, the workspace's files of the tools `sources:` of
//!    `hookvisor.yml` reads; with a tool's name, that tool's workspace file whatever `sources:`
//!    says. A user file (`~/.autoagent/config.json`, `~/.config/nyzhi/config.toml`) serves
//!    every workspace, so it is converted only when named by its path, into hookvisor's
//!    global hooks directory, which every workspace reads too. When `hookvisor.yml` turns
//!    off the hooks the new files would join (`sources` without `discobot`, or global hooks
//!    off), the import is refused: the hooks would stop running unnoticed.
//! 3. **Names** are the hook's id made a file name: `<tool>-<event>-<n>.yml`, the tool's event
//!    in snake case, `n` the entry's index among that event's entries (`iteratr:post_iteration:0`
//!    becomes `iteratr-post_iteration-0.yml`), zero-padded when the event has more than ten
//!    (`-00` … `-11`) so that the files sort, and run, in the entries' order: stable across
//!    runs, and the same entry as `list` showed. An existing file of that name, or one whose id is the same
//!    (`iteratr-post_iteration-0.sh`), is refused by name before anything is written: the
//!    import never picks another name behind the user's back.
//! 4. **Content**: a `---` front matter block with a comment naming the entry's `file:line`,
//!    `name:` (what `list` showed), then every field with the source's default written out
//!    ([`super::render`]), so the file behaves as the entry did.
//! 5. **Writing**, file by file of the tools: the new files are written (each a temp file
//!    renamed without replacing anything), then the tool's file is rewritten without the
//!    entries ([`super::edit`]), or deleted when nothing else is left in it. If the file
//!    changed since it was read, or cannot be written, that file's new hooks are removed
//!    again: at no moment after the import does an entry run twice or not at all.
//! 6. **Checked before written**: the edited text is read again by the tool's reader, and must
//!    have no hook left and the same problems; else the file is refused with the line.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use super::edit::{self, EditError, Edited, Entry, Format};
use super::json_lines::Step;
use super::{
    IMPORTED, ImportNote, Imported, ImportedHook, UserDirs, files_of, next_index, parse,
    read_source, render,
};
use crate::config::{Config, ConfigError, Source, workspace_file};
use crate::hook::hook_id;
use crate::state::{Durability, write_atomic};

/// What to import.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selection {
    /// Every tool's workspace file that `sources:` reads (rule 2).
    All,
    /// One tool's workspace file.
    Tool(Source),
    /// One file of a tool, the workspace's or the user's, by its absolute path.
    File(PathBuf),
}

impl Selection {
    /// The selection a command line's SOURCE names: a tool's name, else a path (relative to
    /// `cwd`).
    pub fn from_arg(source: Option<&str>, cwd: &Path) -> Selection {
        match source {
            None => Selection::All,
            Some(word) => match IMPORTED.iter().find(|s| s.as_str() == word) {
                Some(source) => Selection::Tool(*source),
                None => Selection::File(cwd.join(word)),
            },
        }
    }
}

/// Why nothing was imported, or why a file's import stopped.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// `hookvisor.yml` does not parse; `sources:` cannot be known.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A named tool has no file in the workspace.
    #[error("no {file} in {}; nothing to import from {tool}", workspace.display())]
    NoFile {
        /// The tool.
        tool: Source,
        /// Its file's name.
        file: &'static str,
        /// The workspace.
        workspace: PathBuf,
    },
    /// A named path is no file hookvisor reads here.
    #[error(
        "{}: not a hook file hookvisor reads in this workspace; name iteratr, autoagent, \
         nyzhi or pipelines, or one of their files (.iteratr.hooks.yml, \
         .autoagent/config.json, .nyzhi/config.toml, pipeline.yaml, loop.yaml, \
         ~/.autoagent/config.json, ~/.config/nyzhi/config.toml, \
         ~/.config/agent-pipelines/hooks.yaml)",
        .0.display()
    )]
    UnknownFile(PathBuf),
    /// A workspace path to be written or removed leads out of the workspace through a link
    /// (the agent can make such links; install refuses them the same way).
    #[error(
        "{}: a symbolic link leads out of the workspace ({}); remove the link or import from \
         the file itself (nothing was changed)",
        path.display(), target.display()
    )]
    OutsideWorkspace {
        /// The path in the workspace.
        path: PathBuf,
        /// Where it really is.
        target: PathBuf,
    },
    /// A tool's file cannot be read.
    #[error("{}: {message}", path.display())]
    Unreadable {
        /// The file.
        path: PathBuf,
        /// Why, and the fix.
        message: String,
    },
    /// A tool's file does not parse (rule 1).
    #[error("{}{}: {message}; fix it, then run again (nothing was changed)",
        path.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Unparsable {
        /// The file.
        path: PathBuf,
        /// The line, when the parser says.
        line: Option<usize>,
        /// What the parser said.
        message: String,
    },
    /// A new hook's file exists (rule 3).
    #[error("{} exists; move it away, then run again (nothing was changed)", .0.display())]
    Exists(PathBuf),
    /// Another hook file has the id a new one would have (rule 3).
    #[error(
        "{} has the id '{id}' that {} would have; rename it, then run again (nothing was \
         changed)", existing.display(), planned.display()
    )]
    SameId {
        /// The file already there.
        existing: PathBuf,
        /// The file the import would write.
        planned: PathBuf,
        /// Their id.
        id: String,
    },
    /// The entries cannot be cut out of the tool's file (rules 5, 6).
    #[error("{}:{line}: {message} (nothing was changed in it)", path.display())]
    CannotEdit {
        /// The file.
        path: PathBuf,
        /// The line of the entry at fault.
        line: usize,
        /// What is wrong and the fix.
        message: String,
    },
    /// A user file's hooks have no global hooks directory to go to.
    #[error(
        "{}: no global hooks directory for its hooks; set HOME or HOOKVISOR_GLOBAL_HOOKS",
        .0.display()
    )]
    NoGlobalDir(PathBuf),
    /// The hooks would go where `hookvisor.yml` turns hooks off (rule 2).
    #[error(
        "{}: its hooks would go to the {target} hooks, which {} turns off ('sources' or \
         'disable_global_hooks'); turn them on first (nothing was changed)",
        path.display(), config.display()
    )]
    TargetOff {
        /// The tool's file.
        path: PathBuf,
        /// Where its hooks would go.
        target: Source,
        /// `hookvisor.yml`.
        config: PathBuf,
    },
    /// The tool's file changed between reading and writing (rule 5).
    #[error("{} changed while importing; run again (its new hooks were removed)", .0.display())]
    Changed(PathBuf),
    /// Writing a file failed.
    #[error("{}: {source}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
}

impl ImportError {
    /// Whether the command line or a file must change (exit 2), rather than the system having
    /// failed (1).
    pub fn is_usage(&self) -> bool {
        !matches!(
            self,
            ImportError::Io { .. } | ImportError::Changed(_) | ImportError::Unreadable { .. }
        )
    }
}

/// One declarative hook file to write.
#[derive(Debug, Clone)]
pub struct NewFile {
    /// Where it goes.
    pub path: PathBuf,
    /// Its path as the user knows it (`.discobot/hooks/NAME` in the workspace).
    pub shown: String,
    /// Its text.
    pub content: String,
}

/// One tool's file and what becomes of it.
#[derive(Debug, Clone)]
pub struct SourcePlan {
    /// The tool.
    pub source: Source,
    /// The file as read (a link stays a link).
    pub path: PathBuf,
    /// Its path as the user knows it.
    pub shown: String,
    /// The hook files its entries become.
    pub files: Vec<NewFile>,
    /// Entries not converted, each with its line and problem: they stay in the file.
    pub left: Vec<ImportNote>,
    /// What the reader warned about the converted entries: true of the new files too.
    pub warnings: Vec<ImportNote>,
    /// The text read, which must still be there when it is rewritten.
    original: String,
    /// The file's new text; `None`: nothing is left, it goes.
    edited: Option<String>,
}

impl SourcePlan {
    /// Whether the file is deleted (nothing else is left in it).
    pub fn deletes(&self) -> bool {
        self.edited.is_none()
    }
}

/// Everything `import` would do.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The tools' files, in run order.
    pub sources: Vec<SourcePlan>,
    /// Files found but not converted, and why (a user file, a tool not in `sources:`).
    pub skipped: Vec<String>,
}

/// What `write` did to one tool's file.
#[derive(Debug, Clone)]
pub struct Written {
    /// The file, as the user knows it.
    pub shown: String,
    /// The hook files written, as the user knows them.
    pub files: Vec<String>,
    /// Whether the file was deleted rather than rewritten.
    pub deleted: bool,
}

/// What `selection` would import in `workspace` (rules 1 to 4, 6): nothing is written.
/// `global` is the global hooks directory, where the hooks of a user file go.
pub fn plan(
    workspace: &Path,
    user: &UserDirs,
    global: Option<&Path>,
    selection: &Selection,
) -> Result<Plan, ImportError> {
    let config = Config::load(workspace)?.unwrap_or_default();
    let wanted = match selection {
        Selection::File(path) => Some(known_file(workspace, user, path)?),
        _ => None,
    };
    let mut plan = Plan::default();
    for source in IMPORTED {
        if matches!(selection, Selection::Tool(s) if *s != source) {
            continue;
        }
        if let Some((s, _)) = &wanted
            && *s != source
        {
            continue;
        }
        let mut counts = Vec::new();
        for (path, is_user) in files_of(source, workspace, user) {
            let Some(text) = read_source(&path).map_err(|message| ImportError::Unreadable {
                path: path.clone(),
                message,
            })?
            else {
                continue;
            };
            let imported = match parse(source, &text) {
                Ok(None) => continue,
                Ok(Some(imported)) => imported,
                Err(e) => {
                    return Err(ImportError::Unparsable {
                        path,
                        line: e.line,
                        message: e.message,
                    });
                }
            };
            // Counted for every file read, converted or not: names follow discovery's ids.
            let indexes: Vec<usize> = (imported.hooks.iter())
                .map(|h| next_index(&mut counts, &h.source_event))
                .collect();
            let shown = shown(workspace, &path);
            let convert = match &wanted {
                Some((_, named)) => *named == path,
                None => !is_user && (config.reads(source) || *selection != Selection::All),
            };
            if convert {
                let found = Found {
                    source,
                    path: path.clone(),
                    is_user,
                    shown,
                    text,
                };
                let places = (workspace, user, global, &config);
                let planned = file_plan(found, imported, &indexes, places)?;
                let inside = (!is_user).then_some(&path).into_iter();
                let new_files = planned.files.iter().map(|f| &f.path);
                for written in inside.chain(new_files.filter(|p| p.starts_with(workspace))) {
                    if let Some(target) = outside_workspace(workspace, written) {
                        return Err(ImportError::OutsideWorkspace {
                            path: written.clone(),
                            target,
                        });
                    }
                }
                plan.sources.push(planned);
            } else if wanted.is_none() {
                plan.skipped.push(match is_user {
                    true => format!(
                        "{shown}: the user's {source} file serves every workspace; not \
                         converted (name its path to convert it into the global hooks)"
                    ),
                    false => format!(
                        "{shown}: {source} is not in sources of {}; not converted (name it \
                         to convert it)",
                        Config::path(workspace).display()
                    ),
                });
            }
            // AutoAgent's workspace hooks replace the user's (the module's rule 4).
            if source == Source::Autoagent {
                break;
            }
        }
    }
    if plan.sources.is_empty() {
        match (selection, &wanted) {
            (Selection::Tool(source), _) => {
                return Err(ImportError::NoFile {
                    tool: *source,
                    file: workspace_file(*source),
                    workspace: workspace.to_owned(),
                });
            }
            (_, Some((_, path))) => return Err(ImportError::UnknownFile(path.clone())),
            _ => {}
        }
    }
    refuse_collisions(&plan)?;
    Ok(plan)
}

/// A tool's file read, to be converted.
struct Found {
    source: Source,
    path: PathBuf,
    is_user: bool,
    shown: String,
    text: String,
}

/// The plan of one file whose entries are converted (rules 2 to 4): its hooks go to the
/// workspace's hooks, a user file's to the global ones.
fn file_plan(
    found: Found,
    imported: Imported,
    indexes: &[usize],
    (workspace, user, global, config): (&Path, &UserDirs, Option<&Path>, &Config),
) -> Result<SourcePlan, ImportError> {
    let Found {
        source,
        path,
        is_user,
        shown,
        text,
    } = found;
    let (dir, target) = match is_user {
        true => (
            global
                .map(Path::to_owned)
                .ok_or_else(|| ImportError::NoGlobalDir(path.clone()))?,
            Source::Global,
        ),
        false => (workspace.join(".discobot/hooks"), Source::Discobot),
    };
    // Moved where nothing reads them, the hooks would stop running unnoticed.
    if !config.reads(target) && !imported.hooks.is_empty() {
        return Err(ImportError::TargetOff {
            path,
            target,
            config: Config::path(workspace),
        });
    }
    // AutoAgent's workspace `hooks` hide the user's: an emptied one stays.
    let keep = source == Source::Autoagent && !is_user && user_has_hooks(source, workspace, user);
    let keep = keep.then(|| vec![Step::Key("hooks".to_owned())]);
    // Names sort as the entries ran: `-00 … -11` when an event has more than ten (rule 3).
    let width = |event: &str| {
        let last = (imported.hooks.iter().zip(indexes))
            .filter(|(h, _)| h.source_event == event)
            .map(|(_, n)| *n)
            .max()
            .unwrap_or(0);
        last.to_string().len()
    };
    let files = (imported.hooks.iter().zip(indexes))
        .map(|(hook, n)| {
            let name = file_name(source, &hook.source_event, *n, width(&hook.source_event));
            new_file((workspace, source, &dir), name, hook, &shown)
        })
        .collect();
    source_plan(source, path, shown, text, imported, files, keep.as_deref())
}

/// The tool and path of a named file, when it is one of the tools' files.
fn known_file(
    workspace: &Path,
    user: &UserDirs,
    path: &Path,
) -> Result<(Source, PathBuf), ImportError> {
    let same = |a: &Path, b: &Path| {
        a == b
            || matches!((fs::canonicalize(a), fs::canonicalize(b)),
                (Ok(a), Ok(b)) if a == b)
    };
    IMPORTED
        .into_iter()
        .flat_map(|source| {
            files_of(source, workspace, user)
                .into_iter()
                .map(move |(file, _)| (source, file))
        })
        .find(|(_, file)| same(file, path))
        .ok_or_else(|| ImportError::UnknownFile(path.to_owned()))
}

/// Whether the user's file of `source` has hooks (AutoAgent's rule 4).
fn user_has_hooks(source: Source, workspace: &Path, user: &UserDirs) -> bool {
    files_of(source, workspace, user)
        .into_iter()
        .filter(|(_, is_user)| *is_user)
        .filter_map(|(path, _)| read_source(&path).ok().flatten())
        .any(|text| matches!(parse(source, &text), Ok(Some(_))))
}

/// `path` relative to the workspace when inside it, else as it is.
fn shown(workspace: &Path, path: &Path) -> String {
    path.strip_prefix(workspace)
        .unwrap_or(path)
        .display()
        .to_string()
}

/// The file name of the `n`th entry of `event`, `n` zero-padded to `width` digits (rule 3).
fn file_name(source: Source, event: &str, n: usize, width: usize) -> String {
    let mut snake = String::new();
    for (i, c) in event.chars().enumerate() {
        match c {
            'A'..='Z' => {
                if i > 0 {
                    snake.push('_');
                }
                snake.push(c.to_ascii_lowercase());
            }
            'a'..='z' | '0'..='9' | '_' => snake.push(c),
            _ => snake.push('-'),
        }
    }
    format!("{source}-{snake}-{n:0width$}.yml")
}

/// The declarative file of `hook` (rule 4).
fn new_file(
    (workspace, source, dir): (&Path, Source, &Path),
    name: String,
    hook: &ImportedHook,
    from: &str,
) -> NewFile {
    let path = dir.join(name);
    let content = format!(
        "---\n# Imported by `hookvisor import` from {from}:{} ({source}'s {} hook).\n\
         name: {}\n{}---\n",
        hook.line,
        hook.source_event,
        super::quoted(&hook.title),
        render(hook)
    );
    NewFile {
        shown: shown(workspace, &path),
        path,
        content,
    }
}

/// The plan of one file: its edited text, checked by its reader (rule 6).
fn source_plan(
    source: Source,
    path: PathBuf,
    shown: String,
    text: String,
    imported: Imported,
    files: Vec<NewFile>,
    keep: Option<&[Step]>,
) -> Result<SourcePlan, ImportError> {
    let refuse = |EditError { line, message }| ImportError::CannotEdit {
        path: path.clone(),
        line,
        message,
    };
    let edited = match imported.hooks.is_empty() {
        true => Some(text.clone()),
        false => {
            let format = Format::of(&path).ok_or_else(|| {
                refuse(EditError {
                    line: 1,
                    message: "no extension saying its format".to_owned(),
                })
            })?;
            let entries: Vec<Entry<'_>> = (imported.hooks.iter())
                .map(|h| Entry {
                    path: &h.entry,
                    line: h.line,
                })
                .collect();
            match edit::remove(format, &text, &entries, keep).map_err(refuse)? {
                Edited::Empty => None,
                Edited::Text(edited) => Some(edited),
            }
        }
    };
    let problems =
        |i: &Imported| -> Vec<String> { i.problems.iter().map(|n| n.message.clone()).collect() };
    let left_over = match &edited {
        None => Ok(Some(Imported::default())),
        Some(edited) => parse(source, edited),
    };
    let first = imported.hooks.first().map_or(1, |h| h.line);
    match left_over {
        Ok(None) => {}
        Ok(Some(left)) if left.hooks.is_empty() && problems(&left) == problems(&imported) => {}
        Ok(Some(_)) | Err(_) => {
            return Err(refuse(EditError {
                line: first,
                message: "hookvisor cannot cut its entries out cleanly; move them by hand \
                          (hookvisor import --print shows the new files)"
                    .to_owned(),
            }));
        }
    }
    Ok(SourcePlan {
        source,
        path,
        shown,
        files,
        left: imported.problems,
        warnings: imported.warnings,
        original: text,
        edited,
    })
}

/// Rule 3's refusals: a new file's name or id taken in its directory.
fn refuse_collisions(plan: &Plan) -> Result<(), ImportError> {
    let mut ids: BTreeMap<PathBuf, Vec<(String, PathBuf)>> = BTreeMap::new();
    for file in plan.sources.iter().flat_map(|s| &s.files) {
        if file.path.symlink_metadata().is_ok() {
            return Err(ImportError::Exists(file.path.clone()));
        }
        let dir = file.path.parent().unwrap_or(Path::new("."));
        let existing = ids.entry(dir.to_owned()).or_insert_with(|| {
            fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|name| !name.starts_with('.'))
                .map(|name| (hook_id(&name), dir.join(name)))
                .collect()
        });
        let name = file.path.file_name().and_then(|n| n.to_str());
        let id = hook_id(name.unwrap_or_default());
        if let Some((_, other)) = existing.iter().find(|(other, _)| *other == id) {
            return Err(ImportError::SameId {
                existing: other.clone(),
                planned: file.path.clone(),
                id,
            });
        }
    }
    Ok(())
}

/// Where `path`, or its nearest existing ancestor, really is when that is outside the real
/// workspace: `.discobot` or a tool's file linked elsewhere must not take a write or a removal
/// of ours there.
fn outside_workspace(workspace: &Path, path: &Path) -> Option<PathBuf> {
    let root = fs::canonicalize(workspace).ok()?;
    let existing = path.ancestors().find(|p| p.exists())?;
    let real = fs::canonicalize(existing).ok()?;
    (!real.starts_with(&root)).then_some(real)
}

/// Does what `plan` planned (rule 5), file by file of the tools.
pub fn write(plan: &Plan) -> Result<Vec<Written>, ImportError> {
    let mut done = Vec::new();
    for source in plan.sources.iter().filter(|s| !s.files.is_empty()) {
        let mut written: Vec<&Path> = Vec::new();
        let result = write_source(source, &mut written);
        if result.is_err() {
            for path in written {
                let _ = fs::remove_file(path);
            }
        }
        result?;
        done.push(Written {
            shown: source.shown.clone(),
            files: source.files.iter().map(|f| f.shown.clone()).collect(),
            deleted: source.deletes(),
        });
    }
    Ok(done)
}

/// One tool's file: its new hooks, then the file itself; `written` collects what to remove
/// should a later step fail.
fn write_source<'a>(
    source: &'a SourcePlan,
    written: &mut Vec<&'a Path>,
) -> Result<(), ImportError> {
    let io = |path: &Path| {
        let path = path.to_owned();
        move |source| ImportError::Io { path, source }
    };
    for file in &source.files {
        write_new(file)?;
        written.push(&file.path);
    }
    // Through a link to the file it names: dotfiles are often links into a repository.
    let real = fs::canonicalize(&source.path).map_err(io(&source.path))?;
    let now = read_source(&real).ok().flatten();
    if now.as_deref() != Some(source.original.as_str()) {
        return Err(ImportError::Changed(source.path.clone()));
    }
    match &source.edited {
        Some(text) => write_atomic(&real, text.as_bytes(), Durability::Durable).map_err(io(&real)),
        None => {
            fs::remove_file(&real).map_err(io(&real))?;
            if real != source.path {
                let _ = fs::remove_file(&source.path);
            }
            Ok(())
        }
    }
}

/// A new file, 0644 (a declarative hook is not executable), never replacing one.
fn write_new(file: &NewFile) -> Result<(), ImportError> {
    let io = |source| ImportError::Io {
        path: file.path.clone(),
        source,
    };
    let dir = file.path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(io)?;
    let mut temp = tempfile::Builder::new()
        .prefix(".import.")
        .suffix(".tmp")
        .tempfile_in(dir)
        .map_err(io)?;
    temp.write_all(file.content.as_bytes()).map_err(io)?;
    temp.as_file()
        .set_permissions(fs::Permissions::from_mode(0o644))
        .map_err(io)?;
    temp.as_file().sync_all().map_err(io)?;
    temp.persist_noclobber(&file.path)
        .map_err(|e| match e.error.kind() {
            io::ErrorKind::AlreadyExists => ImportError::Exists(file.path.clone()),
            _ => io(e.error),
        })?;
    fs::File::open(dir).and_then(|d| d.sync_all()).map_err(io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Command, HookAction};

    const ITERATR: &str = "version: 1\nhooks:\n  pre_iteration:\n    - command: \"git status --short\"\n      timeout: 5\n      pipe_output: true\n  on_task_complete:\n    - command: \"./scripts/validate.sh {{task_id}}\"\n    - command: 'printf \"%s\\n\" \"a  b\" | tr -d \"\\\\\" # it''s'\n";
    const AUTOAGENT: &str = r#"{"logLevel": "info", "hooks": {
  "PostExecutionStart": [{"type": "command", "command": "bash track.sh", "timeout": 1500}],
  "PreExecutionEnd": [{"type": "command", "command": "bash validate.sh", "blocking": true}],
  "PostExecutionEnd": [
    {"type": "git-commit", "message": "Complete issue #{{issueNumber}}", "noVerify": true},
    {"type": "git-push", "remote": "origin", "branch": "current"}
  ]}}"#;
    const NYZHI: &str = "[[agent.hooks]]\nevent = \"after_edit\"\ncommand = \"cargo fmt -- {file}\"\npattern = \"*.rs, src/api/\"\n\n[[agent.hooks]]\nevent = \"pre_tool\"\ntool_name = \"git_commit\"\ncommand = \"cargo test\"\nblock = true\ntimeout = 120\n";

    /// Every converted entry, read back from its file by discovery, is the entry again: the
    /// same render, the same script, no problem or unknown field.
    #[test]
    fn written_files_read_back_as_the_entries() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        for (file, text) in [
            (".iteratr.hooks.yml", ITERATR),
            (".autoagent/config.json", AUTOAGENT),
            (".nyzhi/config.toml", NYZHI),
        ] {
            fs::create_dir_all(ws.join(file).parent().unwrap()).unwrap();
            fs::write(ws.join(file), text).unwrap();
        }
        let user = UserDirs::default();
        let plan = plan(ws, &user, None, &Selection::All).unwrap();
        let mut originals = Vec::new();
        // The three sources written above; agent-pipelines' files are converted in its tests.
        for source in IMPORTED.into_iter().filter(|s| *s != Source::Pipelines) {
            let text = fs::read_to_string(ws.join(workspace_file(source))).unwrap();
            originals.extend(parse(source, &text).unwrap().unwrap().hooks);
        }
        let written = write(&plan).unwrap();
        assert_eq!(written.iter().map(|w| w.files.len()).sum::<usize>(), 9);
        assert!(
            written
                .iter()
                .all(|w| w.deleted != (w.shown == ".autoagent/config.json"))
        );
        assert_eq!(
            fs::read_to_string(ws.join(".autoagent/config.json")).unwrap(),
            "{\"logLevel\": \"info\"}"
        );
        let found = crate::discover::discover(&ws.join(".discobot/hooks"));
        assert!(found.problems.is_empty(), "{:?}", found.problems);
        // AutoAgent's event data, and nyzhi's `git_commit` gate, which the reader warned
        // about too.
        assert!(
            (found.warnings.iter()).all(|w| matches!(
                &w.kind,
                crate::hook::ProblemKind::UnknownVariable { name } if name == "issuenumber"
            ) || w.kind
                == crate::hook::ProblemKind::GitCommitToolIsAHint),
            "{:?}",
            found.warnings
        );
        let files = plan.sources.iter().flat_map(|s| &s.files);
        for (original, file) in originals.iter().zip(files) {
            let name = file.path.file_name().unwrap().to_str().unwrap();
            let hook = (found.hooks.iter())
                .find(|h| h.id == hook_id(name))
                .unwrap_or_else(|| panic!("{name} not found"));
            assert_eq!(hook.name, original.title);
            let back = ImportedHook {
                spec: hook.spec.clone(),
                timeout: hook.timeout,
                pattern: hook.pattern.clone(),
                ..original.clone()
            };
            assert_eq!(render(&back), render(original), "{name}");
            let script = |spec: &crate::event::EventSpec| match &spec.action {
                HookAction::Command(Command::Run(t)) => Some(t.script().to_owned()),
                _ => None,
            };
            assert_eq!(script(&hook.spec), script(&original.spec), "{name}");
        }
    }

    /// A file edited between the plan and the write is left as it is now, and the hooks
    /// already written for it are removed again: nothing runs twice.
    #[test]
    fn a_file_changed_since_it_was_read_is_left_and_its_hooks_removed() {
        let dir = tempfile::tempdir().unwrap();
        let ws = dir.path();
        fs::write(ws.join(".iteratr.hooks.yml"), ITERATR).unwrap();
        let plan = plan(ws, &UserDirs::default(), None, &Selection::All).unwrap();
        let edited = format!("{ITERATR}  session_end:\n    - command: \"true\"\n");
        fs::write(ws.join(".iteratr.hooks.yml"), &edited).unwrap();
        let err = write(&plan).unwrap_err();
        assert!(matches!(err, ImportError::Changed(_)), "{err}");
        assert_eq!(
            fs::read_to_string(ws.join(".iteratr.hooks.yml")).unwrap(),
            edited
        );
        let left: Vec<_> = fs::read_dir(ws.join(".discobot/hooks"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }

    #[test]
    fn names_are_ids_in_snake_case() {
        assert_eq!(
            file_name(Source::Iteratr, "post_iteration", 0, 1),
            "iteratr-post_iteration-0.yml"
        );
        assert_eq!(
            file_name(Source::Autoagent, "PreExecutionEnd", 2, 1),
            "autoagent-pre_execution_end-2.yml"
        );
        assert_eq!(
            hook_id(&file_name(Source::Nyzhi, "after_edit", 1, 1)),
            "nyzhi-after_edit-1"
        );
        assert_eq!(
            file_name(Source::Iteratr, "post_iteration", 3, 2),
            "iteratr-post_iteration-03.yml"
        );
    }
}

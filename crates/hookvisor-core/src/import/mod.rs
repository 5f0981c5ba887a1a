//! Other tools' hook files, read in place on every load (docs/EVENTS.md §2.2, §5 rules 7, 12, 13,
//! 17): iteratr's `.iteratr.hooks.yml`, AutoAgent's `.autoagent/config.json`, nyzhi's
//! `[[agent.hooks]]` and agent-pipelines' `hooks:`, each entry mapped onto the event model so that it runs under hookvisor as
//! it ran in its own tool, with no converted copy to go stale.
//!
//! The rules, written once here:
//!
//! 1. **One reader per tool** (`iteratr`, `autoagent`, `nyzhi`, `pipelines`) turns a file's text into
//!    [`Imported`]: the entries as [`ImportedHook`]s, each with the line of its first line, and
//!    the entries that will not run as problems naming the line of the offending value. A file
//!    that does not parse is an [`Unparsable`], and its source is skipped whole: running half a
//!    file whose other half the tool itself would refuse is no import.
//! 2. **Defaults written out.** Every field of §1.3 an entry leaves out gets the *source's*
//!    default, set explicitly on the spec (timeouts, `block_on`, `pipe_output`, `phase`,
//!    `reason_from`), so an import behaves as it did in its own tool, not as a hookvisor hook
//!    with hookvisor's defaults would.
//! 3. **Commands are `run:` scripts.** A source's command is shell text for `sh -c`: its
//!    placeholders (`{{session}}`, `{file}`, `{{issueNumber}}`) become template references
//!    *before* the text is parsed (the `command` module), so the injection-safe rewrite of
//!    [`crate::template`] applies to them as to any `run:`, and a value never becomes shell text.
//! 4. **Where, in order** (rule 7): iteratr, AutoAgent, nyzhi, agent-pipelines, after
//!    `.discobot/hooks` and before the global hooks; each tool's workspace file, then the
//!    user's where the tool has one (AutoAgent's `~/.autoagent/config.json` only when the
//!    workspace's file has no `hooks`, which replace the user's; nyzhi's user `config.toml`
//!    after the workspace's; agent-pipelines' `pipeline.yaml`, then `loop.yaml`, then the
//!    user's global `agent-pipelines/hooks.yaml` of `$XDG_CONFIG_HOME` or `~/.config`).
//!    agent-pipelines' global file is one of the two *global kinds*: `disable_global_hooks:
//!    true` in `hookvisor.yml` or in either workspace file turns off both it and hookvisor's
//!    global hooks. Under `hookvisor loop --pipeline FILE` only FILE and its current stage's
//!    file are read in place of those two (then the global file), and no other source.
//! 5. **Who reads.** `sources:` of `hookvisor.yml` names the tools read (default all). The
//!    *owner*, the tool `hookvisor loop` supervises (§5 rule 12: `loop -- iteratr …`), runs its
//!    own hooks, so its file is not read: the loop passes the owner to its discovery and
//!    exports it to the agent as [`LOOP_OWNER_VARIABLE`], which every other command's discovery
//!    honours.
//! 6. **Ids** are `<source>:<event>:<n>` (`iteratr:post_iteration:0`): the tool, its own event
//!    name, and the entry's index among that event's entries of the tool (workspace file, then
//!    user file). `list`, `check` and status show the entry as `file:line`.
//! 7. **Reading** follows links (dotfiles are often links) but opens without blocking and takes
//!    only a regular file of at most [`MAX_SOURCE_BYTES`]; a missing file costs one failed open.
//! 8. **Moving over** (`hookvisor import`): [`plan`] turns each entry into a declarative hook
//!    file and [`write`] writes them and cuts the entries out of their file (the `convert`
//!    module's rules, the `edit` module's per format). A reader gives each hook its
//!    `entry` path; nothing else of a new source is needed for it to be imported.
//!
//! [`Imported`]: crate::import::Imported
//! [`ImportedHook`]: crate::import::ImportedHook
//! [`Unparsable`]: crate::import::Unparsable
//! [`LOOP_OWNER_VARIABLE`]: crate::import::LOOP_OWNER_VARIABLE
//! [`MAX_SOURCE_BYTES`]: crate::import::MAX_SOURCE_BYTES
//! [`plan`]: crate::import::plan
//! [`write`]: crate::import::write

#![forbid(unsafe_code)]

mod autoagent;
pub(crate) mod command;
mod convert;
mod edit;
mod iteratr;
mod json_lines;
mod nyzhi;
mod pipelines;

pub use convert::{ImportError, NewFile, Plan, Selection, SourcePlan, Written, plan, write};
use json_lines::Step;

/// One entry of a YAML hook list (iteratr's, agent-pipelines'): its fields by key, each with
/// its line.
type YamlEntry = std::collections::BTreeMap<String, serde_saphyr::Spanned<serde_json::Value>>;

/// The entries of one hook point of a YAML file, each with its line.
type YamlEntries = Vec<serde_saphyr::Spanned<YamlEntry>>;

/// A YAML file's `hooks:` map: each list by its key, with the key's line.
type YamlHooks = std::collections::BTreeMap<String, serde_saphyr::Spanned<Option<YamlEntries>>>;

/// The lists of a YAML file's `hooks:` map (iteratr's hook types, agent-pipelines' hook
/// points) with the line of each key, in the file's order: the order of the runs and the ids.
fn yaml_hook_lists(text: &str, hooks: Option<YamlHooks>) -> Vec<(usize, String, YamlEntries)> {
    let lines = LineIndex::new(text);
    let mut lists: Vec<(usize, String, YamlEntries)> = hooks
        .unwrap_or_default()
        .into_iter()
        .map(|(name, list)| {
            let line = lines.key_line(&name, saphyr_line(&list));
            (line, name, list.value.unwrap_or_default())
        })
        .collect();
    lists.sort_by_key(|(line, _, _)| *line);
    lists
}

use std::ffi::OsString;
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::{Config, Source, SourceUse, workspace_file};
use crate::event::{EventSpec, HookAction};
use crate::hook::{Hook, Origin, Problem, ProblemKind, RunAs};
use crate::pattern::Pattern;

/// The variable `hookvisor loop` exports to its agent: the name of the tool it supervises
/// (rule 5), whose own hook file discovery then leaves to it.
pub const LOOP_OWNER_VARIABLE: &str = "HOOKVISOR_LOOP_OWNER";

/// The largest hook file of another tool read; more is a problem, never a cut read.
pub const MAX_SOURCE_BYTES: u64 = 1 << 20;

/// One entry of another tool's hook file, mapped onto the event model (rule 2).
#[derive(Debug, Clone)]
pub struct ImportedHook {
    /// The tool's own name of the event (`post_iteration`, `PreExecutionEnd`, `after_edit`).
    pub source_event: String,
    /// The 1-based line of the entry's first line.
    pub line: usize,
    /// What `list` and status show as its name: the command as the file writes it, or the
    /// built-in action, its first line cut at 60 characters.
    pub title: String,
    /// The event, the fields of §1.3 with the source's defaults, and the action.
    pub spec: EventSpec,
    /// How long a run may take: the entry's, else the source's default.
    pub timeout: Duration,
    /// The files it cares about (nyzhi's `pattern`), as a hookvisor pattern.
    pub pattern: Option<Pattern>,
    /// The `run:` text the command became (its placeholders made references), for `import`
    /// and the tests; `None` for a built-in action.
    pub run: Option<String>,
    /// Where the entry is in its file, as keys and list indexes (`hooks`, `post_iteration`,
    /// 0; the index counts every entry of the list, those with problems too): what `import
    /// --write` removes from a JSON or TOML file ([`edit`]; in YAML the entry's `line` says).
    pub(crate) entry: Vec<Step>,
}

/// Something about one entry, at a line of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImportNote {
    /// 1-based line of the offending value, else of the entry.
    pub line: usize,
    /// What is wrong and the fix.
    pub message: String,
}

/// What a reader made of a file that parses (rule 1).
#[derive(Debug, Clone, Default)]
pub struct Imported {
    /// The entries that run, in the file's order.
    pub hooks: Vec<ImportedHook>,
    /// Entries that do not run, and why.
    pub problems: Vec<ImportNote>,
    /// Entries that run but probably not as meant (iteratr v2's `pre_iteration` note, a
    /// placeholder the event never sets).
    pub warnings: Vec<ImportNote>,
    /// The file says `disable_global_hooks: true` (agent-pipelines' `pipeline.yaml` and
    /// `loop.yaml`): both global kinds are off (rule 4).
    pub disable_global_hooks: bool,
}

impl Imported {
    /// Problems and warnings by line, as every reader reports them.
    fn in_line_order(mut self) -> Self {
        self.problems.sort_by_key(|n| n.line);
        self.warnings.sort_by_key(|n| n.line);
        self
    }
}

/// A file that does not parse: its source is skipped whole (rule 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct Unparsable {
    /// 1-based line of the error, when the parser says.
    pub line: Option<usize>,
    /// What the parser said, and the fix.
    pub message: String,
}

/// agent-pipelines' stage file, read after its pipeline file (rule 4).
const PIPELINES_STAGE_FILE: &str = "loop.yaml";

/// The sources this module reads, in run order (rule 4).
pub(crate) const IMPORTED: [Source; 4] = [
    Source::Iteratr,
    Source::Autoagent,
    Source::Nyzhi,
    Source::Pipelines,
];

/// Where the user's files of the tools are: the home directory and `$XDG_CONFIG_HOME`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct UserDirs {
    /// `$HOME`, when set and not empty.
    pub home: Option<PathBuf>,
    /// `$XDG_CONFIG_HOME` when absolute, else `$HOME/.config`.
    pub config: Option<PathBuf>,
}

impl UserDirs {
    /// The directories the variables `var` gives name.
    pub fn from_vars(var: impl Fn(&str) -> Option<OsString>) -> UserDirs {
        let non_empty = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        let home = non_empty("HOME");
        let config = non_empty("XDG_CONFIG_HOME")
            .filter(|dir| dir.is_absolute())
            .or_else(|| home.as_ref().map(|h| h.join(".config")));
        UserDirs { home, config }
    }
}

/// What discovery takes from the imported sources: hooks in run order, problems, warnings,
/// and one [`SourceUse`] per source.
#[derive(Debug, Default)]
pub(crate) struct Sources {
    pub(crate) hooks: Vec<Hook>,
    pub(crate) problems: Vec<Problem>,
    pub(crate) warnings: Vec<Problem>,
    pub(crate) uses: Vec<SourceUse>,
    /// A workspace agent-pipelines file said `disable_global_hooks: true`, which turns
    /// hookvisor's global hooks off too (rule 4).
    pub(crate) disable_global_hooks: bool,
}

/// Reads every imported source `config` allows but the loop's `owner` (rules 4, 5); under a
/// loop of a pipeline file, only `pipeline`'s files (the pipeline's, its stage's) and
/// agent-pipelines' global file.
pub(crate) fn read_sources(
    workspace: &Path,
    user: &UserDirs,
    config: &Config,
    owner: Option<&str>,
    pipeline: Option<&[PathBuf]>,
) -> Sources {
    let mut out = Sources::default();
    for source in IMPORTED {
        let skipped = |note: String| SourceUse {
            source,
            used: false,
            note,
            dir: None,
        };
        // A file left unread on purpose is still named, so `check` says why it is not run.
        let unread = |note: String| {
            let file = workspace.join(workspace_file(source));
            SourceUse {
                dir: file.symlink_metadata().is_ok().then_some(file),
                ..skipped(note)
            }
        };
        if pipeline.is_some() && source != Source::Pipelines {
            out.uses.push(unread(
                "hookvisor loop runs a pipeline file: only its hooks run".to_owned(),
            ));
            continue;
        }
        if !config.reads(source) && pipeline.is_none() {
            out.uses.push(unread("not in sources".to_owned()));
            continue;
        }
        if owner == Some(source.as_str()) && pipeline.is_none() {
            out.uses.push(unread(format!(
                "hookvisor loop runs {source}, which runs its own hooks"
            )));
            continue;
        }
        let mut read = Vec::new();
        let mut counts: Vec<(String, usize)> = Vec::new();
        let mut failed = false;
        let mut found: Option<PathBuf> = None;
        let mut off: Option<String> = None;
        // Kept apart until every file of the source has been read: one that does not parse
        // skips the source whole (rule 1).
        let mut hooks = Vec::new();
        let files = match pipeline {
            Some(files) => (files.iter().map(|f| (f.clone(), false)))
                .chain(
                    files_of(source, workspace, user)
                        .into_iter()
                        .filter(|f| f.1),
                )
                .collect(),
            None => files_of(source, workspace, user),
        };
        for (path, is_user) in files {
            // Both global kinds are off with either switch (rule 4).
            if is_user
                && source == Source::Pipelines
                && (config.disable_global_hooks || out.disable_global_hooks)
            {
                off = Some(format!("{} off (disable_global_hooks)", path.display()));
                continue;
            }
            let text = match read_source(&path) {
                Ok(None) => continue,
                Ok(Some(text)) => {
                    found.get_or_insert_with(|| path.clone());
                    text
                }
                Err(message) => {
                    found.get_or_insert_with(|| path.clone());
                    out.problems.push(problem(&path, None, message));
                    read = vec![format!("{} is unreadable", path.display())];
                    failed = true;
                    break;
                }
            };
            let imported = match parse(source, &text) {
                // AutoAgent's workspace file without `hooks` leaves the user's (rule 4).
                Ok(None) => continue,
                Ok(Some(imported)) => imported,
                Err(Unparsable { line, message }) => {
                    out.problems.push(problem(
                        &path,
                        line,
                        format!("{message}; the whole file is skipped until it parses"),
                    ));
                    read = vec![format!("{} does not parse", path.display())];
                    failed = true;
                    break;
                }
            };
            if imported.disable_global_hooks {
                match is_user {
                    false => out.disable_global_hooks = true,
                    true => out.warnings.push(problem(
                        &path,
                        None,
                        "disable_global_hooks in the global file turns nothing off; put it in \
                         the workspace's pipeline.yaml or loop.yaml"
                            .to_owned(),
                    )),
                }
            }
            let shown = match is_user {
                true => path.display().to_string(),
                false => path
                    .strip_prefix(workspace)
                    .unwrap_or(&path)
                    .display()
                    .to_string(),
            };
            read.push(format!("{shown}: {} hooks", imported.hooks.len()));
            for note in imported.problems {
                out.problems
                    .push(problem(&path, Some(note.line), note.message));
            }
            for note in imported.warnings {
                out.warnings
                    .push(problem(&path, Some(note.line), note.message));
            }
            for hook in imported.hooks {
                let n = next_index(&mut counts, &hook.source_event);
                let id = format!("{source}:{}:{n}", hook.source_event);
                let origin = Origin::Imported {
                    source,
                    user: is_user,
                    line: hook.line,
                };
                hooks.push(into_hook(hook, id, &path, origin));
            }
            // AutoAgent's workspace hooks replace the user's (rule 4).
            if source == Source::Autoagent {
                break;
            }
        }
        if !failed {
            out.hooks.append(&mut hooks);
        }
        let missing = match source {
            Source::Pipelines => format!("no {}, {PIPELINES_STAGE_FILE}", workspace_file(source)),
            _ => format!("no {}", workspace_file(source)),
        };
        out.uses.push(match (read.is_empty(), failed) {
            (true, _) => skipped(missing),
            (false, failed) => SourceUse {
                source,
                used: !failed,
                note: read.join(", "),
                dir: found,
            },
        });
        if let (Some(off), Some(used)) = (off, out.uses.last_mut()) {
            used.note = format!("{}, {off}", used.note);
        }
    }
    out
}

/// What `source`'s reader makes of `text`: `Ok(None)` for a file that leaves the hooks to
/// the next one (AutoAgent's without `hooks`, rule 4).
fn parse(source: Source, text: &str) -> Result<Option<Imported>, Unparsable> {
    match source {
        Source::Iteratr => iteratr::read(text).map(Some),
        Source::Autoagent => autoagent::read(text),
        Source::Pipelines => pipelines::read(text).map(Some),
        _ => nyzhi::read(text).map(Some),
    }
}

/// The index of the next entry of `event` among those counted so far (rule 6's `<n>`).
fn next_index(counts: &mut Vec<(String, usize)>, event: &str) -> usize {
    match counts.iter_mut().find(|(e, _)| e == event) {
        Some((_, n)) => {
            *n += 1;
            *n - 1
        }
        None => {
            counts.push((event.to_owned(), 1));
            0
        }
    }
}

/// Every file of the other tools that discovery may read (rule 4), whether it exists or not,
/// each under the directory it belongs to: what a server watches besides `.discobot`, so that an
/// edit of one updates the hooks it shows (rule 7: read in place on every load).
pub fn source_files(workspace: &Path, user: &UserDirs) -> Vec<crate::watch::WatchedFile> {
    IMPORTED
        .into_iter()
        .flat_map(|source| files_of(source, workspace, user))
        .map(|(path, is_user)| {
            let root = match is_user {
                false => workspace.to_owned(),
                // The user's files are under the home directory or `$XDG_CONFIG_HOME`.
                true => [user.home.as_deref(), user.config.as_deref()]
                    .into_iter()
                    .flatten()
                    .find(|dir| path.starts_with(dir))
                    .unwrap_or(workspace)
                    .to_owned(),
            };
            crate::watch::WatchedFile::file(path, root)
        })
        .collect()
}

/// The files of `source`, the workspace's first, each with whether it is the user's.
fn files_of(source: Source, workspace: &Path, user: &UserDirs) -> Vec<(PathBuf, bool)> {
    let mut files = vec![(workspace.join(workspace_file(source)), false)];
    if source == Source::Pipelines {
        files.push((workspace.join(PIPELINES_STAGE_FILE), false));
    }
    let user_file = match source {
        Source::Autoagent => user.home.as_ref().map(|h| h.join(".autoagent/config.json")),
        Source::Nyzhi => user.config.as_ref().map(|c| c.join("nyzhi/config.toml")),
        Source::Pipelines => user
            .config
            .as_ref()
            .map(|c| c.join("agent-pipelines/hooks.yaml")),
        _ => None,
    };
    files.extend(user_file.map(|f| (f, true)));
    files
}

/// A problem of `path` for `check`: `file:line: reason`.
fn problem(path: &Path, line: Option<usize>, message: String) -> Problem {
    Problem::new(
        path.to_owned(),
        ProblemKind::Import { line, message },
        Default::default(),
    )
}

/// The hook an entry becomes, under `id`, declared in `path`.
fn into_hook(imported: ImportedHook, id: String, path: &Path, origin: Origin) -> Hook {
    let kind = imported
        .spec
        .event
        .phase1_kind()
        .unwrap_or(crate::event::HookKind::Session);
    Hook {
        name: imported.title,
        id,
        kind,
        path: path.to_owned(),
        description: imported.run,
        run_as: RunAs::User,
        blocking: false,
        pattern: imported.pattern,
        notify_llm: true,
        timeout: imported.timeout,
        spec: imported.spec,
        origin,
        // Another tool's entry runs by the event model, whatever its event.
        phase1: false,
    }
}

/// A hook's name made of the text its entry runs: the first line, at most 60 characters, so
/// that it fits a row of `list` and the dashboard.
pub(crate) fn title(text: &str) -> String {
    const MAX: usize = 60;
    let first = text.trim().lines().next().unwrap_or_default();
    let mut title: String = first.chars().take(MAX).collect();
    if first.chars().count() > MAX || text.trim().lines().nth(1).is_some() {
        title.push('…');
    }
    title
}

/// The text of a source file: `Ok(None)` when there is none (rule 7).
fn read_source(path: &Path) -> Result<Option<String>, String> {
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(path);
    let file: File = match file {
        Ok(file) => file,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(format!("cannot open: {e}; check its permissions")),
    };
    let meta = file.metadata().map_err(|e| format!("cannot read: {e}"))?;
    if !meta.is_file() {
        return Err("not a regular file; make it one or remove it".to_owned());
    }
    let too_large = |len: u64| {
        format!("{len} bytes, over the {MAX_SOURCE_BYTES} a hook file may have; shorten it")
    };
    if meta.len() > MAX_SOURCE_BYTES {
        return Err(too_large(meta.len()));
    }
    // It may have grown since the look.
    let bytes = crate::state::read_capped(file, MAX_SOURCE_BYTES)
        .map_err(|e| format!("cannot read: {e}"))?
        .ok_or_else(|| too_large(MAX_SOURCE_BYTES + 1))?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| "not UTF-8 text; save it as UTF-8".to_owned())
}

/// The spec of `action` on `event` with every §1.3 field at the event model's default;
/// each reader then writes its source's defaults over it (rule 2).
fn base_spec(event: crate::event::Event, action: HookAction) -> EventSpec {
    let mut spec = EventSpec::for_kind(
        event
            .phase1_kind()
            .unwrap_or(crate::event::HookKind::Session),
    );
    spec.block_on = event.default_block_on();
    spec.retries = crate::event::DEFAULT_EVENT_RETRIES;
    spec.await_ = true;
    spec.event = event;
    spec.action = action;
    spec.declared = true;
    spec
}

/// Placeholders that sat inside single quotes (see [`command`]) are refused unless the
/// command is one whose arguments no program parses as code: a value there becomes one literal
/// piece of the quoted text, which `sh -c '…'`, `awk '…'` or `ssh host '…'` would run, so only
/// [`command::quotes_are_text`] commands (`echo '… {{issueTitle}}' >> log`) keep them. The
/// others are a problem and the hook does not run: hookvisor's promise is that no value ever
/// becomes shell text, for imported hooks as for `run:`.
fn refuse_single_quoted(translated: &command::Translated, line: usize) -> Result<(), ImportNote> {
    let Some(name) = translated.single_quoted.first() else {
        return Ok(());
    };
    if command::quotes_are_text(&translated.text, &translated.single_quoted) {
        return Ok(());
    }
    Err(ImportNote {
        line,
        message: format!(
            "the placeholder of '{name}' is inside '…' of a command that may run that text as \
             a script (sh -c, awk, ssh…), where its value would become code: move it out of \
             the quotes and pass it as an argument, as in sh -c '… \"$1\"' _ <it>"
        ),
    })
}

/// The 1-based line of a value YAML read (1 when it gave none).
fn saphyr_line<T>(spanned: &serde_saphyr::Spanned<T>) -> usize {
    usize::try_from(spanned.referenced.line())
        .ok()
        .filter(|l| *l > 0)
        .unwrap_or(1)
}

/// A YAML file that does not parse, with its line and what the parser said on one line.
fn yaml_unparsable(e: serde_saphyr::Error) -> Unparsable {
    let e = e.without_snippet();
    let line = e
        .location()
        .and_then(|l| usize::try_from(l.line()).ok())
        .filter(|l| *l > 0);
    let message = match &e {
        serde_saphyr::Error::DuplicateMappingKey { key, .. } => format!(
            "'{}' is given twice; keep one",
            key.as_deref().unwrap_or("a key")
        ),
        serde_saphyr::Error::Budget { .. } => {
            "anchors and aliases are not read; write each value out".to_owned()
        }
        _ => {
            let rendered = e.to_string();
            let reason = rendered
                .rfind(" at line ")
                .map_or(rendered.as_str(), |at| &rendered[..at]);
            format!(
                "not YAML as expected: {}",
                reason.trim().trim_end_matches('.')
            )
        }
    };
    Unparsable { line, message }
}

/// Where each line of a file starts, found once: a reader asks for the line of every key and
/// entry, and scanning the text from its start each time made a 1 MiB file of small entries
/// take over a minute at every load (import review F3).
pub(super) struct LineIndex<'a> {
    text: &'a str,
    /// The byte offset of each line's start; `starts[0]` is 0.
    starts: Vec<usize>,
}

impl<'a> LineIndex<'a> {
    /// The index of `text`.
    pub(super) fn new(text: &'a str) -> Self {
        let starts = std::iter::once(0)
            .chain(text.match_indices('\n').map(|(i, _)| i + 1))
            .collect();
        LineIndex { text, starts }
    }

    /// The text indexed.
    pub(super) fn text(&self) -> &'a str {
        self.text
    }

    /// The 1-based line of byte `offset`.
    pub(super) fn line_at(&self, offset: usize) -> usize {
        self.starts.partition_point(|&start| start <= offset).max(1)
    }

    /// The text of 1-based line `line`, without its newline.
    fn line(&self, line: usize) -> &'a str {
        let start = self
            .starts
            .get(line - 1)
            .copied()
            .unwrap_or(self.text.len());
        let end = self
            .starts
            .get(line)
            .map_or(self.text.len(), |next| next - 1);
        self.text.get(start..end.max(start)).unwrap_or("")
    }

    /// The line of the key `name` whose value starts at `value_line`: that line, or the
    /// first line above it that is neither blank nor a comment (a block value starts below
    /// its key), else `value_line`.
    pub(super) fn key_line(&self, name: &str, value_line: usize) -> usize {
        let is_key = |line: usize| {
            self.line(line)
                .trim_start()
                .strip_prefix(name)
                .is_some_and(|rest| rest.trim_start().starts_with(':'))
        };
        if value_line == 0 || is_key(value_line) {
            return value_line;
        }
        (1..value_line)
            .rev()
            .find(|&line| {
                let text = self.line(line).trim_start();
                !text.is_empty() && !text.starts_with('#')
            })
            .filter(|&line| is_key(line))
            .unwrap_or(value_line)
    }
}

/// The front matter of a declarative hook saying what `hook` does, every field written out:
/// what `import --print` shows, and what the golden tests compare.
pub fn render(hook: &ImportedHook) -> String {
    use crate::event::PipeOutput;
    use crate::policy::OnFailure;
    let spec = &hook.spec;
    let mut out = format!("event: {}\n", spec.event);
    if let Some(tool) = &spec.tool {
        out += &format!("tool: {}\n", quoted(&tool.to_string()));
    }
    if let Some(pattern) = &hook.pattern {
        out += &format!("pattern: {}\n", quoted(pattern.as_str()));
    }
    if let Some(when) = &spec.when {
        out += &format!("when: {}\n", quoted(&when.to_string()));
    }
    out += &format!("phase: {}\n", spec.phase.as_str());
    out += &format!("await: {}\n", spec.await_);
    out += &format!("timeout: {}\n", hook.timeout.as_secs());
    out += &format!("block_on: {}\n", spec.block_on.as_str());
    out += &format!("on_failure: {}\n", spec.on_failure.as_str());
    if matches!(
        spec.on_failure,
        OnFailure::Retry | OnFailure::RetryThenAbort
    ) {
        out += &format!("retries: {}\n", spec.retries);
        out += &format!("retry_delay: {}\n", spec.retry_delay.as_secs());
    }
    out += &format!(
        "pipe_output: {}\n",
        match spec.pipe_output {
            PipeOutput::Never => "false",
            PipeOutput::Always => "true",
            PipeOutput::Failure => "failure",
        }
    );
    out += &format!("reason_from: {}\n", spec.reason_from.as_str());
    if let crate::payload::StdinDialect::AutoAgent { event_name } = &spec.stdin {
        out += &format!("stdin: autoagent {event_name}\n");
    }
    if spec.env == crate::payload::EnvDialect::Pipelines {
        out += "env: pipelines\n";
    }
    out += &format!("action: {}\n", spec.action.as_str());
    // A field left to its default (git-push's current branch) is no field of the file.
    for (key, value) in spec.action.fields() {
        if !value.is_null() {
            out += &format!("{key}: {value}\n");
        }
    }
    if let Some(run) = &hook.run {
        out += &format!("run: {}\n", quoted(run));
    }
    out
}

/// A YAML double-quoted string (JSON's escapes are YAML's).
fn quoted(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn the_line_index_finds_lines_and_keys_without_rescanning() {
        let text = "a: 1\nhooks:\n  # note\n\n  - x\nb:\n  - y\n";
        let lines = LineIndex::new(text);
        assert_eq!(lines.line_at(0), 1);
        assert_eq!(lines.line_at(5), 2);
        assert_eq!(lines.line_at(text.len()), 8);
        assert_eq!(lines.key_line("hooks", 5), 2);
        assert_eq!(lines.key_line("b", 7), 6);
        assert_eq!(lines.key_line("a", 1), 1);
        assert_eq!(lines.key_line("zz", 7), 7);
        // Twenty thousand keys, each found from the index (F3: a scan from the start of the
        // text for every key took seconds at every load).
        let big: String = (0..20_000).map(|i| format!("k{i}:\n  - v\n")).collect();
        let lines = LineIndex::new(&big);
        for i in 0..20_000 {
            assert_eq!(lines.key_line(&format!("k{i}"), 2 * i + 2), 2 * i + 1);
        }
    }
    use crate::config::Sources as SourceList;
    use std::fs;

    /// The rendering of every hook of `imported`, each after a `# file:line` comment.
    pub(crate) fn golden(imported: &Imported) -> String {
        imported
            .hooks
            .iter()
            .map(|h| format!("# {} line {}\n{}", h.source_event, h.line, render(h)))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The notes as `line: message`.
    pub(crate) fn notes(notes: &[ImportNote]) -> Vec<String> {
        notes
            .iter()
            .map(|n| format!("{}: {}", n.line, n.message))
            .collect()
    }

    struct Ws {
        dir: tempfile::TempDir,
    }

    impl Ws {
        fn new() -> Ws {
            Ws {
                dir: tempfile::tempdir().unwrap(),
            }
        }
        fn ws(&self) -> PathBuf {
            self.dir.path().join("ws")
        }
        fn user(&self) -> UserDirs {
            UserDirs::from_vars(|name| {
                (name == "HOME").then(|| self.dir.path().join("home").into_os_string())
            })
        }
        fn write(&self, rel: &str, text: &str) -> PathBuf {
            let path = self.dir.path().join(rel);
            fs::create_dir_all(path.parent().unwrap()).unwrap();
            fs::write(&path, text).unwrap();
            path
        }
        fn read(&self, config: &Config, owner: Option<&str>) -> Sources {
            read_sources(&self.ws(), &self.user(), config, owner, None)
        }
    }

    fn ids(sources: &Sources) -> Vec<String> {
        sources.hooks.iter().map(|h| h.id.clone()).collect()
    }

    const ITERATR: &str = "hooks:\n  post_iteration:\n    - command: \"go test ./...\"\n";
    const NYZHI: &str = "[[agent.hooks]]\nevent = \"after_turn\"\ncommand = \"cargo clippy\"\n";
    const AUTOAGENT: &str =
        "{\"hooks\": {\"Stop\": [{\"type\": \"command\", \"command\": \"true\"}]}}";
    const PIPELINES: &str = "hooks:\n  on_error:\n    - type: shell\n      command: \"true\"\n";

    #[test]
    fn sources_are_read_in_rule_7_order_with_ids_and_lines() {
        let ws = Ws::new();
        ws.write("ws/.iteratr.hooks.yml", ITERATR);
        ws.write("ws/.autoagent/config.json", AUTOAGENT);
        ws.write("ws/.nyzhi/config.toml", NYZHI);
        ws.write("home/.config/nyzhi/config.toml", &format!("\n{NYZHI}"));
        ws.write("ws/loop.yaml", PIPELINES);
        ws.write("ws/pipeline.yaml", &format!("name: p\n{PIPELINES}"));
        ws.write("home/.config/agent-pipelines/hooks.yaml", PIPELINES);
        let read = ws.read(&Config::default(), None);
        assert!(read.problems.is_empty(), "{:?}", read.problems);
        assert_eq!(
            ids(&read),
            [
                "iteratr:post_iteration:0",
                "autoagent:Stop:0",
                "nyzhi:after_turn:0",
                "nyzhi:after_turn:1",
                "pipelines:on_error:0",
                "pipelines:on_error:1",
                "pipelines:on_error:2",
            ]
        );
        assert_eq!(read.hooks[0].name, "go test ./...");
        assert_eq!(
            title(&format!("{}\nb", "a".repeat(70))),
            format!("{}…", "a".repeat(60))
        );
        let sources: Vec<String> = read.hooks.iter().map(Hook::source).collect();
        let user_nyzhi = ws.dir.path().join("home/.config/nyzhi/config.toml");
        assert_eq!(
            sources,
            [
                ".iteratr.hooks.yml:3".to_owned(),
                ".autoagent/config.json:1".to_owned(),
                ".nyzhi/config.toml:1".to_owned(),
                format!("{}:2", user_nyzhi.display()),
                "pipeline.yaml:4".to_owned(),
                "loop.yaml:3".to_owned(),
                format!(
                    "{}:3",
                    ws.dir
                        .path()
                        .join("home/.config/agent-pipelines/hooks.yaml")
                        .display()
                ),
            ]
        );
        assert!(read.uses.iter().all(|u| u.used), "{:?}", read.uses);
    }

    /// Rule 4: a workspace agent-pipelines file's `disable_global_hooks`, or hookvisor.yml's,
    /// leaves the user's `hooks.yaml` unread and says so.
    #[test]
    fn disable_global_hooks_turns_off_the_pipelines_global_file() {
        let ws = Ws::new();
        ws.write("home/.config/agent-pipelines/hooks.yaml", PIPELINES);
        ws.write("ws/pipeline.yaml", PIPELINES);
        let both = ws.read(&Config::default(), None);
        assert_eq!(both.hooks.len(), 2);
        assert!(!both.disable_global_hooks);
        ws.write("ws/loop.yaml", "disable_global_hooks: true\n");
        let read = ws.read(&Config::default(), None);
        assert_eq!(ids(&read), ["pipelines:on_error:0"]);
        assert!(read.disable_global_hooks);
        let pipelines = &read.uses[3];
        assert!(
            pipelines
                .note
                .ends_with("hooks.yaml off (disable_global_hooks)"),
            "{pipelines}"
        );
        ws.write("ws/loop.yaml", "");
        let config = Config {
            disable_global_hooks: true,
            ..Config::default()
        };
        assert_eq!(ids(&ws.read(&config, None)), ["pipelines:on_error:0"]);
    }

    #[test]
    fn the_loop_owner_and_sources_leave_files_unread() {
        let ws = Ws::new();
        ws.write("ws/.iteratr.hooks.yml", ITERATR);
        ws.write("ws/.nyzhi/config.toml", NYZHI);
        let read = ws.read(&Config::default(), Some("iteratr"));
        assert_eq!(ids(&read), ["nyzhi:after_turn:0"]);
        let iteratr = &read.uses[0];
        assert!(
            !iteratr.used && iteratr.note.contains("loop runs iteratr"),
            "{iteratr}"
        );
        assert_eq!(iteratr.dir, Some(ws.ws().join(".iteratr.hooks.yml")));
        let config = Config {
            sources: SourceList::Only(vec![Source::Iteratr]),
            ..Config::default()
        };
        let read = ws.read(&config, None);
        assert_eq!(ids(&read), ["iteratr:post_iteration:0"]);
        assert_eq!(read.uses[2].to_string(), "nyzhi skipped (not in sources)");
        let read = ws.read(&config, Some("claude"));
        assert_eq!(ids(&read), ["iteratr:post_iteration:0"]);
    }

    #[test]
    fn autoagent_workspace_hooks_replace_the_users() {
        let ws = Ws::new();
        ws.write(
            "home/.autoagent/config.json",
            "{\"hooks\": {\"PreGitCommit\": [{\"type\": \"command\", \"command\": \"true\"}]}}",
        );
        let read = ws.read(&Config::default(), None);
        assert_eq!(ids(&read), ["autoagent:PreGitCommit:0"]);
        assert!(read.hooks[0].source().starts_with('/'));
        // A workspace file without `hooks` leaves the user's; one with them replaces them.
        ws.write("ws/.autoagent/config.json", "{\"logLevel\": \"info\"}");
        assert_eq!(
            ids(&ws.read(&Config::default(), None)),
            ["autoagent:PreGitCommit:0"]
        );
        ws.write("ws/.autoagent/config.json", AUTOAGENT);
        assert_eq!(
            ids(&ws.read(&Config::default(), None)),
            ["autoagent:Stop:0"]
        );
    }

    #[test]
    fn an_unparsable_file_is_skipped_whole_with_its_line() {
        let ws = Ws::new();
        let path = ws.write(
            "ws/.iteratr.hooks.yml",
            "hooks:\n  post_iteration:\n    - command: \"x\"\n   - oops: [\n",
        );
        ws.write("ws/.nyzhi/config.toml", "[[agent.hooks]]\nevent = \n");
        let read = ws.read(&Config::default(), None);
        assert!(read.hooks.is_empty(), "{:?}", ids(&read));
        let problems: Vec<String> = read.problems.iter().map(ToString::to_string).collect();
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(
            problems[0].starts_with(&format!("{}:4: ", path.display())),
            "{problems:?}"
        );
        assert!(problems[0].ends_with("the whole file is skipped until it parses"));
        assert!(problems[1].contains("config.toml:2: "), "{problems:?}");
        let iteratr = &read.uses[0];
        assert!(
            !iteratr.used && iteratr.note.contains("does not parse"),
            "{iteratr}"
        );
        // A broken user file skips the tool's workspace file too: the source is one.
        ws.write("ws/.iteratr.hooks.yml", ITERATR);
        ws.write("ws/.nyzhi/config.toml", NYZHI);
        ws.write(
            "home/.config/nyzhi/config.toml",
            "[[agent.hooks]]\nevent = \n",
        );
        let read = ws.read(&Config::default(), None);
        assert_eq!(ids(&read), ["iteratr:post_iteration:0"]);
        let nyzhi = &read.uses[2];
        assert!(
            !nyzhi.used && nyzhi.note.ends_with("config.toml does not parse"),
            "{nyzhi}"
        );
    }

    #[test]
    fn a_source_that_is_no_regular_file_is_a_problem_not_a_hang() {
        let ws = Ws::new();
        fs::create_dir_all(ws.ws().join(".nyzhi")).unwrap();
        nix::unistd::mkfifo(
            &ws.ws().join(".nyzhi/config.toml"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        let read = ws.read(&Config::default(), None);
        assert_eq!(read.problems.len(), 1);
        assert!(
            read.problems[0]
                .to_string()
                .ends_with("not a regular file; make it one or remove it"),
            "{}",
            read.problems[0]
        );
    }
}

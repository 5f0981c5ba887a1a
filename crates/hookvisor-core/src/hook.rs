//! What a hook is once its file has been read: kind, identity, and the fields of its front matter
//! with their defaults applied.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use crate::event::{Event, EventSpec, HookKind, UnknownEvent, UnknownKind};
use crate::frontmatter::FrontMatterError;
use crate::pattern::{Pattern, PatternError};
use crate::policy::UnknownWord;
use crate::template::TemplateError;
use crate::when::WhenError;

/// Which account a hook runs as.
///
/// Only `run_as: root` spelled exactly gives root; anything unrecognised is a problem, never root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunAs {
    /// The container's root account; only session hooks started by the init can have it.
    Root,
    /// The unprivileged run user. The default.
    #[default]
    User,
}

impl RunAs {
    /// The spelling used in front matter and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            RunAs::Root => "root",
            RunAs::User => "user",
        }
    }
}

impl From<UnknownKind> for ProblemKind {
    fn from(err: UnknownKind) -> Self {
        ProblemKind::UnknownType { value: err.value }
    }
}

impl FromStr for RunAs {
    type Err = ProblemKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "root" => Ok(RunAs::Root),
            "user" => Ok(RunAs::User),
            other => Err(ProblemKind::InvalidRunAs {
                value: other.to_owned(),
            }),
        }
    }
}

/// Where a hook was found (docs/EVENTS.md §5 rule 7); workspace hooks run before global ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub enum Origin {
    /// `.discobot/hooks` of the workspace. The default.
    #[default]
    Workspace,
    /// An entry of another tool's hook file, read in place (docs/EVENTS.md §2.2): its id starts
    /// with the source's name (`iteratr:post_iteration:0`).
    Imported {
        /// The tool whose file it is.
        source: crate::config::Source,
        /// Whether the file is the user's (`~/.autoagent/config.json`), not the workspace's.
        user: bool,
        /// The 1-based line of the entry's first line.
        line: usize,
    },
    /// hookvisor's global hooks (`~/.config/hookvisor/hooks`); their ids start with `global:`.
    Global,
}

/// A hook that passed every check of discovery and can be run: one value for every source
/// (`.discobot/hooks`, the other tools' files, the global hooks).
///
/// # Binding, action, policy
///
/// [`Hook::spec`] holds the event binding (`event`, `phase`, `tool`, [`Hook::pattern`],
/// `when`), the action (plain data) and the policy (`await`, `block_on`, `on_failure`,
/// `retries`, [`Hook::timeout`], `pipe_output`, [`Hook::run_as`]). discobot's kinds are event
/// bindings (docs/EVENTS.md §2.1): `file` is `turn.end` with a pattern, `session` the container's
/// `session.start`, `pre-commit` `commit.before`; `kind` is the event's phase-1 kind (else
/// [`HookKind::Session`] as a stand-in), for `status.json` and `DISCOBOT_HOOK_TYPE`.
///
/// # Phase 1
///
/// [`Hook::phase1`] is true when phase 1 runs the hook exactly as it asks: an executable
/// script whose event has a phase-1 kind (for `turn.end`, with a `pattern`) and whose front
/// matter sets none of the §1.3 fields the phase-1 runners would ignore (`tool`, `when`,
/// `phase`, `await`, `block_on`, `on_failure`, `retry_delay`, `pipe_output`, `reason_from`,
/// `run`, `argv`, `action`). The phase-1 runners run such hooks with phase 1's semantics (exit
/// code only, DISCOBOT_* variables, discobot's `status.json` entry); the others run through
/// the event dispatcher's runner, so a new event hook never runs as a phase-1 hook by
/// accident. An event hook's `timeout` defaults to 60 seconds (§1.3 `command`).
#[derive(Debug, Clone)]
pub struct Hook {
    /// Stable identifier derived from the file name (see [`crate::hook::hook_id`]).
    pub id: String,
    /// Display name: front matter `name`, else the id.
    pub name: String,
    /// When the hook runs.
    pub kind: HookKind,
    /// Absolute path of the script.
    pub path: PathBuf,
    /// Front matter `description`, if any.
    pub description: Option<String>,
    /// The account it runs as.
    pub run_as: RunAs,
    /// Session hooks only: finish before the agent command starts. Default false.
    pub blocking: bool,
    /// The files it cares about; required for file hooks, optional for pre-commit hooks.
    pub pattern: Option<Pattern>,
    /// Whether a failure re-prompts the model. Default true.
    pub notify_llm: bool,
    /// How long a run may take before its process group is killed.
    pub timeout: Duration,
    /// The event it binds to and the §1.3 fields of its front matter, defaults applied.
    pub spec: EventSpec,
    /// Where it was found.
    pub origin: Origin,
    /// Whether phase 1's semantics run it (see [`Hook`]'s "Phase 1").
    pub phase1: bool,
}

impl Hook {
    /// The file name of the script, for messages.
    pub fn file_name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// Where the hook is declared, `relative/path:line` (docs/EVENTS.md §5 rule 10): the hooks dir
    /// relative to the workspace, and line 1, where both a script and a declarative file start;
    /// a global hook's absolute path, since it is in no workspace. An imported hook names its
    /// entry's first line in the other tool's file, relative to the workspace unless it is the
    /// user's.
    pub fn source(&self) -> String {
        match self.origin {
            Origin::Workspace => format!(".discobot/hooks/{}:1", self.file_name()),
            Origin::Global => format!("{}:1", self.path.display()),
            // agent-pipelines' two workspace files both sit at the top: the name says which.
            Origin::Imported {
                source: crate::config::Source::Pipelines,
                user: false,
                line,
            } => format!("{}:{line}", self.file_name()),
            Origin::Imported {
                source,
                user: false,
                line,
            } => format!("{}:{line}", crate::config::workspace_file(source)),
            Origin::Imported {
                user: true, line, ..
            } => format!("{}:{line}", self.path.display()),
        }
    }

    /// True when a workspace-relative path is one this hook cares about (as bytes: see
    /// [`Pattern`]'s rules).
    ///
    /// A hook without a pattern matches every file.
    pub fn matches(&self, relative_path: impl AsRef<Path>) -> bool {
        self.pattern
            .as_ref()
            .is_none_or(|p| p.is_match(relative_path))
    }
}

/// A file in the hooks directory that will not run or is probably a mistake, and why.
///
/// It serialises as `{"path", "reason"}`, its path lossily converted to UTF-8 (the name may be
/// the very problem) and its reason the text of its [`ProblemKind`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The hook file at fault.
    pub path: PathBuf,
    /// What is wrong and how to fix it.
    pub kind: ProblemKind,
    /// The 1-based line of the file it is on (docs/EVENTS.md §5 rule 10): the line the kind names,
    /// else the line of the field at fault, else the file's first line; `None` when the file
    /// could not be read or the problem is its name's.
    pub line: Option<usize>,
    /// The event the file meant to bind, read once from its head: a gate of that event fails
    /// closed on it ([`crate::fire`]'s step 1), and a phase-1 runner reports it as one of its
    /// own.
    pub binds: Binds,
}

/// Which event a file that does not load meant to bind, read as far as its head allows: a
/// gate of that event blocks rather than run without it ([`crate::fire`]'s step 1).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Binds {
    /// Nothing says it is a hook: a file that is neither a script (`#!`) nor a `.yml`/`.yaml`
    /// (a README, an editor's backup), one without front matter or naming neither `event`
    /// nor `type`, or a problem that is no hook file's (the config, an imported source).
    #[default]
    Nothing,
    /// The event its front matter names by `event`.
    Event(Event),
    /// The phase-1 kind its front matter names by `type` (its event is the kind's); for a
    /// script without front matter that mentions `pre-commit`, `pre-commit` (a commit must
    /// hear of a pre-commit hook it will not run). A phase-1 runner warns about such a file,
    /// as phase 1 did, where it fails closed on one of [`Binds::Event`].
    Phase1(HookKind),
    /// Any event: a hook whose front matter does not parse, whose `event` or `type` is none
    /// hookvisor knows, or a file (or the directory) that cannot be read.
    Any,
}

impl Binds {
    /// What a hook file's head `text` says it binds; `hook_like` when the file is a script or a
    /// `.yml`/`.yaml` (only those can be hooks).
    pub(crate) fn of_head(text: &str, hook_like: bool) -> Binds {
        if !hook_like {
            return Binds::Nothing;
        }
        // CRs and a byte-order mark dropped: a CRLF file still says its event.
        let text = text.replace('\r', "");
        let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
        match crate::frontmatter::parse(text) {
            Ok(fields) => {
                let event = fields.get("event").map(|e| e.trim().parse::<Event>().ok());
                let kind = fields
                    .get("type")
                    .map(|t| t.trim().parse::<HookKind>().ok());
                match (event, kind) {
                    (Some(Some(event)), _) => Binds::Event(event),
                    (None, Some(Some(kind))) => Binds::Phase1(kind),
                    (Some(None), _) | (None, Some(None)) => Binds::Any,
                    (None, None) => Binds::Nothing,
                }
            }
            // Front matter where discovery does not look (a `.yml` without `---`, a comment
            // before it, `# event:` lines without `#---`) may still be a gate's.
            Err(FrontMatterError::Missing) if names_a_hook_field(text) => Binds::Any,
            Err(FrontMatterError::Missing) if text.contains("pre-commit") => {
                Binds::Phase1(HookKind::PreCommit)
            }
            Err(FrontMatterError::Missing) => Binds::Nothing,
            Err(_) => Binds::Any,
        }
    }
}

/// Whether a line of `text`, comment prefix (`#`, `//`) and blanks aside, starts with
/// `event:` or `type:`, the fields that make a file a hook.
fn names_a_hook_field(text: &str) -> bool {
    text.lines().any(|line| {
        let line = line.trim_start();
        let line = line
            .strip_prefix("//")
            .or_else(|| line.strip_prefix('#'))
            .unwrap_or(line)
            .trim_start();
        ["event", "type"].iter().any(|key| {
            line.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start_matches([' ', '\t']).starts_with(':'))
        })
    })
}

impl Problem {
    /// A problem of `path` on the line its kind names, if any.
    pub fn new(path: PathBuf, kind: ProblemKind, binds: Binds) -> Problem {
        Problem {
            path,
            line: kind.line(),
            kind,
            binds,
        }
    }

    /// Whether the file may be a hook of `event`, whose gate then blocks ([`Binds`]).
    pub fn may_bind(&self, event: &Event) -> bool {
        match &self.binds {
            Binds::Nothing => false,
            Binds::Event(bound) => bound == event,
            Binds::Phase1(kind) => Event::of_kind(*kind) == *event,
            Binds::Any => true,
        }
    }

    /// Where the problem is as `relative/path[:line]` from `workspace`, as a hook's
    /// [`Hook::source`] (docs/EVENTS.md §5 rule 10); a file outside it (a user's) keeps its path.
    pub fn source(&self, workspace: &Path) -> String {
        let path = self.path.strip_prefix(workspace).unwrap_or(&self.path);
        match self.line {
            Some(line) => format!("{}:{line}", path.display()),
            None => path.display().to_string(),
        }
    }
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.path.display(), self.kind),
            None => write!(f, "{}: {}", self.path.display(), self.kind),
        }
    }
}

impl Serialize for Problem {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeStruct;
        let mut problem = serializer.serialize_struct("Problem", 2)?;
        // `Path`'s own `Serialize` fails on bytes that are not UTF-8, and a failure there has
        // aborted a server.
        problem.serialize_field("path", &self.path.to_string_lossy())?;
        problem.serialize_field("reason", &self.kind.to_string())?;
        problem.end()
    }
}

/// Every reason a hook file is refused or warned about, with the data its message needs; the
/// message says what is wrong and what to do (globset's `ErrorKind` is the model).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProblemKind {
    /// The hooks directory exists but cannot be listed.
    #[error("cannot read the hooks directory: {error}")]
    HooksDirUnreadable {
        /// The system's error, as text: an `io::Error` can be neither cloned nor compared.
        error: String,
    },
    /// The file name is not UTF-8, so it gives no hook id.
    #[error("the file name is not UTF-8; rename the file")]
    NameNotUtf8,
    /// A symbolic link whose target does not exist.
    #[error("broken symlink to '{target}'; fix the link or remove it")]
    BrokenSymlink {
        /// The link's target as written, empty when the link cannot be read either.
        target: String,
    },
    /// The file's metadata cannot be read.
    #[error("cannot read: {error}")]
    Inaccessible {
        /// The system's error, as text.
        error: String,
    },
    /// A FIFO, socket or device: nothing that can be run as a script.
    #[error("not a regular file; hooks are executable scripts")]
    NotRegularFile,
    /// The file name has none of the characters a hook id keeps.
    #[error(
        "the file name gives an empty hook id; use letters or digits in the name (ids keep [a-z0-9_-])"
    )]
    EmptyId,
    /// The file's contents cannot be read.
    #[error("cannot read: {error}; check its permissions")]
    Unreadable {
        /// The system's error, as text.
        error: String,
    },
    /// An executable binary: it has nowhere to write front matter.
    #[error("a binary has no front matter; wrap it in a script with a #! line")]
    Binary,
    /// The file does not start with `#!`.
    #[error("no #! line; start the file with one such as #!/bin/sh")]
    NoShebang,
    /// The file has CRLF line endings, which the front matter reader refuses.
    #[error("CRLF line endings; run `sed -i 's/\\r$//' {}`", path.display())]
    CrlfLineEndings {
        /// The file, for the command that fixes it.
        path: PathBuf,
    },
    /// The front matter is missing, unclosed or unreadable.
    #[error(transparent)]
    FrontMatter(#[from] FrontMatterError),
    /// The file is not executable.
    #[error("not executable; run `chmod +x {}`", path.display())]
    NotExecutable {
        /// The file, for the command that fixes it.
        path: PathBuf,
    },
    /// A field is given without a value.
    #[error("'{key}' has no value; give it one or remove the line")]
    NoValue {
        /// The field.
        key: String,
    },
    /// The front matter has no `type`.
    #[error("missing 'type'; add 'type: session', 'type: file' or 'type: pre-commit'")]
    MissingType,
    /// `type` names no kind of hook.
    #[error("unknown type '{value}'; use one of session, file, pre-commit")]
    UnknownType {
        /// The value as written.
        value: String,
    },
    /// `run_as` is neither `root` nor `user`.
    #[error("invalid run_as '{value}'; use 'root' or 'user' (the hook is not run, never as root)")]
    InvalidRunAs {
        /// The value as written.
        value: String,
    },
    /// `blocking` or `notify_llm` is no boolean.
    #[error("invalid {key} '{value}'; use true or false")]
    InvalidBool {
        /// The field.
        key: String,
        /// The value as written.
        value: String,
    },
    /// A file hook without a `pattern` would never run.
    #[error("a file hook needs a 'pattern', such as 'pattern: \"*.go\"'")]
    MissingPattern,
    /// `pattern` does not compile.
    #[error(transparent)]
    InvalidPattern(#[from] PatternError),
    /// `timeout` is not a positive number of seconds up to 30 days.
    #[error(
        "invalid timeout '{value}'; use a positive number of seconds up to 30 days (720h) such \
         as 'timeout: 120'"
    )]
    InvalidTimeout {
        /// The value as written.
        value: String,
    },
    /// `retries` is not a whole number within the limit.
    #[error("invalid retries '{value}'; use a whole number from 0 (run once) to {max}")]
    InvalidRetries {
        /// The value as written.
        value: String,
        /// The most retries a hook may ask for.
        max: u32,
    },
    /// Two files give the same hook id; neither runs, as either could be meant.
    #[error("hook id '{id}' is also the id of {}; rename one of the files", others.join(", "))]
    DuplicateId {
        /// The shared id.
        id: String,
        /// The names of the other files with this id.
        others: Vec<String>,
    },
    /// A warning: a front matter key hookvisor does not read (often a typo).
    #[error("unknown front matter field '{key}' is ignored; known fields: {}", known.join(", "))]
    UnknownField {
        /// The key as written.
        key: String,
        /// The keys hookvisor reads.
        known: &'static [&'static str],
    },
    /// A warning: the line reads as a list of globs here and as one glob in discobot.
    #[error(
        "line {line}: '{key}' is read as the globs '{used}'; discobot read the line as the one \
         glob '{discobot}'; write '{key}: \"{used}\"' to say the same to both"
    )]
    DiscobotReadsOtherwise {
        /// 1-based line in the file.
        line: usize,
        /// The field.
        key: String,
        /// The value hookvisor uses.
        used: String,
        /// The value discobot used.
        discobot: String,
    },
    /// A warning: YAML reads the value otherwise than it is taken, as written.
    #[error(
        "line {line}: '{key}' is taken as written, '{used}', as discobot did; YAML reads {}; \
         quote the value so that both read it alike",
        yaml.as_ref().map_or_else(|| "no value".to_owned(), |y| format!("'{y}'"))
    )]
    YamlReadsOtherwise {
        /// 1-based line in the file.
        line: usize,
        /// The field.
        key: String,
        /// The value hookvisor uses.
        used: String,
        /// YAML's value, `None` when YAML reads none.
        yaml: Option<String>,
    },
    /// A warning: a `${name}` in `run`/`argv` that hookvisor sets for no event, or not for the
    /// hook's (`crate::payload::provides`, docs/EVENTS.md §4.1 rule 5): it must come in the event's
    /// data, or each run fails.
    #[error(
        "${{{name}}} is no variable hookvisor sets for this hook's event; unless every firing \
         passes it in its data, the run fails: check the name (docs/EVENTS.md §4.1)"
    )]
    UnknownVariable {
        /// The name as referenced.
        name: String,
    },
    /// A warning: a `${name}` in a webhook's url, headers or body that hookvisor sets for no
    /// event and that neither `secrets.env` nor this environment defines (docs/EVENTS.md §5 rule 20).
    #[error(
        "${{{name}}} is no variable hookvisor sets, and neither ~/.config/hookvisor/secrets.env \
         nor this environment defines {upper}; unless every firing passes it in its data, the \
         run fails: add it to secrets.env or check the name"
    )]
    UnknownWebhookName {
        /// The name as referenced.
        name: String,
        /// The variable name usually written for it.
        upper: String,
    },
    /// A warning: a `tool:` name that no supported agent's tool has and that is no canonical
    /// name (docs/EVENTS.md §5 rule 6): no call would match it.
    #[error(
        "tool: '{name}' is no tool of Claude Code, Codex or Gemini CLI and no canonical name \
         (bash, write, edit, apply_patch, git_commit), so no call matches it: check the name"
    )]
    UnknownTool {
        /// The name as written.
        name: String,
    },
    /// A warning: a hook that would block tool calls named `git_commit`, which the name
    /// cannot hold (docs/EVENTS.md §5 rule 6 reads the common spelling only).
    #[error(
        "tool: git_commit matches only the common spelling of a shell 'git commit'; \
         'command git commit', 'sh -c \"git commit\"', 'env X=1 git commit' or an alias pass \
         it, so this gate is a hint the model can walk around: gate commits with \
         'event: commit.before', which runs inside git's own pre-commit hook"
    )]
    GitCommitToolIsAHint,
    /// A warning: `retries` is given to a hook that is not a session hook.
    #[error("retries applies to session hooks only; it is ignored for a {kind} hook")]
    RetriesIgnored {
        /// The hook's kind.
        kind: HookKind,
    },
    /// A warning: a root session hook that is not `blocking` runs as if it were.
    #[error(
        "run_as: root session hooks finish before the agent starts, as if blocking: true (no \
         root hook runs beside the agent; README, Security); add 'blocking: true' to say so"
    )]
    RootRunsBlocking,
    /// An awaited webhook on a gate under `on_timeout: continue`: a timeout, a wait that
    /// cannot start or a flooded listener lets the event go on.
    #[error(
        "this gate waits for its callback under 'on_timeout: continue', so a wait that times out \
         or cannot start (a failed delivery, a taken callback port, a flooded listener, all of \
         which the agent can cause) lets the event go on; use 'on_timeout: abort' for approvals"
    )]
    GateContinuesWithoutAnswer,
    /// A problem as another process reported it (`hookvisor serve` to an adapter): its text.
    #[error("{0}")]
    Reported(String),
    /// `event` names no event.
    #[error("{error}")]
    InvalidEvent {
        /// 1-based line of the field.
        line: usize,
        /// The name and the known ones.
        error: UnknownEvent,
    },
    /// `type` and `event` are both given and name different events.
    #[error(
        "'type: {kind}' is the event {}, but 'event' says {event}; drop 'type' or make them agree",
        crate::event::Event::of_kind(*.kind)
    )]
    TypeEventDisagree {
        /// 1-based line of `event`.
        line: usize,
        /// The kind `type` gives.
        kind: HookKind,
        /// The event `event` gives, as written.
        event: String,
    },
    /// `phase`, `block_on` or `on_failure` is none of its words.
    #[error("{error}")]
    InvalidWord {
        /// 1-based line of the field.
        line: usize,
        /// The field, the value and the words.
        error: UnknownWord,
    },
    /// `await`, `pipe_output`, `reason_from` or `retry_delay` has a value it does not take.
    #[error("invalid {key} '{value}'; use {expected}")]
    InvalidValue {
        /// 1-based line of the field.
        line: usize,
        /// The field.
        key: &'static str,
        /// The value as written.
        value: String,
        /// What it takes.
        expected: &'static str,
    },
    /// `tool` is a regex that does not compile (docs/EVENTS.md §5 rule 6).
    #[error("{error}")]
    InvalidTool {
        /// 1-based line of the field.
        line: usize,
        /// The value and what the compiler said.
        error: crate::event::InvalidToolMatcher,
    },
    /// `when` does not parse (docs/EVENTS.md §4.2); the error says where in the condition.
    #[error("{error}")]
    InvalidWhen {
        /// 1-based line of the field.
        line: usize,
        /// The parser's error, which starts with `when:`.
        error: WhenError,
    },
    /// `run` cannot be made injection-safe (docs/EVENTS.md §4.1 rule 1); lines and columns are
    /// within the `run` text.
    #[error("run: {error}")]
    InvalidRun {
        /// 1-based line of the field.
        line: usize,
        /// The lexer's error, with its line and column in the text.
        error: TemplateError,
    },
    /// `argv` is not a non-empty list of strings, or an element has a `${` that is no name.
    #[error("argv: {message}")]
    InvalidArgv {
        /// 1-based line of the field.
        line: usize,
        /// What is wrong and the fix.
        message: String,
    },
    /// `run` and `argv` are both given.
    #[error("give 'run' or 'argv', not both")]
    RunAndArgv {
        /// 1-based line of the second of them.
        line: usize,
    },
    /// A field of `action: git-commit` or `git-push` is refused (docs/EVENTS.md §1.2, §4.1 rule 4).
    #[error("{error}")]
    InvalidGitAction {
        /// 1-based line of the field.
        line: usize,
        /// What is wrong and the fix.
        error: crate::git_action::GitFieldError,
    },
    /// A field of `action: spawn` is refused (docs/EVENTS.md §4.4).
    #[error("{error}")]
    InvalidSpawnAction {
        /// 1-based line of the field.
        line: usize,
        /// What is wrong and the fix.
        error: crate::spawn::SpawnFieldError,
    },
    /// A field of `action: webhook` is refused (docs/EVENTS.md §4.1 rule 3, §4.3).
    #[error("{error}")]
    InvalidWebhookAction {
        /// 1-based line of the field.
        line: usize,
        /// What is wrong and the fix.
        error: crate::webhook::WebhookFieldError,
    },
    /// `action` names a model-driven action, which hookvisor does not run (docs/EVENTS.md §1.2).
    #[error(
        "action '{action}' is unsupported: hookvisor runs no prompt or agent hooks; write the \
         check as a command"
    )]
    ActionUnsupported {
        /// 1-based line of the field.
        line: usize,
        /// The action.
        action: String,
    },
    /// `action` names no action.
    #[error("unknown action '{value}'; use command, webhook, spawn, git-commit or git-push")]
    UnknownAction {
        /// 1-based line of the field.
        line: usize,
        /// The value as written.
        value: String,
    },
    /// An executable script carries `run` or `argv` (docs/EVENTS.md §5 rule 9): which would run?
    #[error(
        "an executable script with '{key}': a script runs itself; drop '{key}', or make the \
         file a non-executable .yml of front matter only"
    )]
    ScriptWithCommand {
        /// 1-based line of the field.
        line: usize,
        /// `run` or `argv`.
        key: &'static str,
    },
    /// A declarative `.yml` hook has neither `run` nor `argv`.
    #[error("a declarative hook needs 'run: \"…\"' (sh -c) or 'argv: [program, …]' (no shell)")]
    NoCommand,
    /// A declarative `.yml` hook has neither `event` nor `type`.
    #[error("missing 'event'; add one such as 'event: turn.end'")]
    MissingEvent,
    /// `run_as: root` on a hook of the event model: `run_as` is a phase-1 field (docs/EVENTS.md
    /// §1.3), accepted on the phase-1 session, file and pre-commit scripts; the init runs the
    /// session ones as root, before the agent starts, from bytes it sealed (README, Security).
    #[error(
        "run_as: root is for phase-1 hooks (an executable script with 'type: session', 'type: \
         file' or 'type: pre-commit' and no event fields); this {event} hook runs as the user: \
         drop 'run_as' or make it such a script"
    )]
    RootOutsideSession {
        /// 1-based line of `run_as`.
        line: usize,
        /// The hook's event.
        event: String,
    },
    /// `blocking` on a hook of the event model: it is phase 1's session field ("the agent waits
    /// for it"), and on an event hook it could mean `await` or AutoAgent's "may block"
    /// (docs/EVENTS.md §1.5), which fail differently when the hook crashes.
    #[error(
        "'blocking' is for phase-1 session hooks (an executable script with 'type: session' \
         and no event fields); on this {event} hook say what it means: 'await: true' (the \
         event waits for it, the default) and/or 'block_on: failure' (any failure or crash \
         blocks), then drop 'blocking'"
    )]
    BlockingOutsideSession {
        /// 1-based line of `blocking`.
        line: usize,
        /// The hook's event.
        event: String,
    },
    /// `.discobot/hookvisor.yml` is refused (config module, rule 1); global hooks are off until
    /// it is fixed (rule 2).
    #[error("{0}; until it is fixed, global hooks are off and every setting is its default")]
    Config(crate::config::ConfigError),
    /// A global hook asks for root: the global hooks directory is the user's, which the agent
    /// can write, so it never gives root (README, Security).
    #[error(
        "run_as: root is refused for a global hook: its directory is writable by the user; \
         drop 'run_as' (it then runs as the user), or put the hook in the workspace's \
         .discobot/hooks"
    )]
    GlobalRunAsRoot {
        /// 1-based line of `run_as`.
        line: usize,
    },
    /// An entry of another tool's hook file that is not run, or is run otherwise than it may
    /// seem, or the whole file when it does not parse (docs/EVENTS.md §2.2): the message says which
    /// and the fix.
    #[error("{message}")]
    Import {
        /// 1-based line of the offending value, else of the entry; `None` when unknown.
        line: Option<usize>,
        /// What is wrong and what to do.
        message: String,
    },
    /// A declarative `.yml` hook has text after its front matter.
    #[error(
        "a declarative .yml hook is front matter only; remove this text after the closing \
         '---', or make the file an executable script"
    )]
    TextAfterFrontMatter {
        /// 1-based line of the first such text.
        line: usize,
    },
}

impl ProblemKind {
    /// The 1-based line of the hook file the problem is on, where one is known, for
    /// `file:line: reason`.
    pub fn line(&self) -> Option<usize> {
        match self {
            ProblemKind::InvalidEvent { line, .. }
            | ProblemKind::TypeEventDisagree { line, .. }
            | ProblemKind::InvalidWord { line, .. }
            | ProblemKind::InvalidValue { line, .. }
            | ProblemKind::InvalidWhen { line, .. }
            | ProblemKind::InvalidTool { line, .. }
            | ProblemKind::InvalidRun { line, .. }
            | ProblemKind::InvalidArgv { line, .. }
            | ProblemKind::RunAndArgv { line }
            | ProblemKind::InvalidGitAction { line, .. }
            | ProblemKind::InvalidSpawnAction { line, .. }
            | ProblemKind::InvalidWebhookAction { line, .. }
            | ProblemKind::ActionUnsupported { line, .. }
            | ProblemKind::UnknownAction { line, .. }
            | ProblemKind::ScriptWithCommand { line, .. }
            | ProblemKind::RootOutsideSession { line, .. }
            | ProblemKind::BlockingOutsideSession { line, .. }
            | ProblemKind::TextAfterFrontMatter { line }
            | ProblemKind::GlobalRunAsRoot { line } => Some(*line),
            ProblemKind::Config(error) => error.line,
            ProblemKind::Import { line, .. } => *line,
            _ => None,
        }
    }

    /// The front matter field at fault, for a kind whose text names no line: its line is the
    /// problem's (docs/EVENTS.md §5 rule 10).
    pub fn field(&self) -> Option<&str> {
        Some(match self {
            ProblemKind::NoValue { key } | ProblemKind::InvalidBool { key, .. } => key,
            ProblemKind::UnknownField { key, .. } => key,
            ProblemKind::UnknownType { .. } | ProblemKind::MissingPattern => "type",
            ProblemKind::InvalidRunAs { .. } => "run_as",
            ProblemKind::InvalidPattern(_) => "pattern",
            ProblemKind::InvalidTimeout { .. } => "timeout",
            ProblemKind::InvalidRetries { .. } | ProblemKind::RetriesIgnored { .. } => "retries",
            ProblemKind::RootRunsBlocking => "run_as",
            _ => return None,
        })
    }

    /// Whether the problem kept the file from being read, so that nothing is known of what it
    /// declares.
    pub fn hides_the_file(&self) -> bool {
        matches!(
            self,
            ProblemKind::HooksDirUnreadable { .. }
                | ProblemKind::BrokenSymlink { .. }
                | ProblemKind::Inaccessible { .. }
                | ProblemKind::NotRegularFile
                | ProblemKind::Unreadable { .. }
        )
    }
}

/// Extensions stripped from a file name to make its id (case-insensitive, one only).
/// `yml` and `yaml` name declarative hooks (docs/EVENTS.md §2.1); phase 1 never ran such files.
const SCRIPT_EXTENSIONS: [&str; 11] = [
    "sh", "bash", "zsh", "py", "js", "ts", "rb", "pl", "php", "yml", "yaml",
];

/// The hook id of a file name: strip one script extension, `.` → `-`, lowercase, keep
/// `[a-z0-9_-]`, trim `-` (`foo.bar.sh` → `foo-bar`, `test (1).sh` → `test1`).
pub fn hook_id(file_name: &str) -> String {
    let stem = match file_name.rsplit_once('.') {
        Some((stem, ext))
            if SCRIPT_EXTENSIONS
                .iter()
                .any(|known| ext.eq_ignore_ascii_case(known)) =>
        {
            stem
        }
        _ => file_name,
    };
    let id: String = stem
        .chars()
        .map(|c| {
            if c == '.' {
                '-'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-'))
        .collect();
    id.trim_matches('-').to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_spelling() {
        for kind in HookKind::ALL {
            assert_eq!(kind.as_str().parse::<HookKind>(), Ok(kind));
        }
        assert!("pre_commit".parse::<HookKind>().is_err());
    }

    #[test]
    fn run_as_accepts_only_the_two_spellings() {
        assert_eq!("root".parse::<RunAs>(), Ok(RunAs::Root));
        assert_eq!("user".parse::<RunAs>(), Ok(RunAs::User));
        for bad in ["Root", "ROOT", "admin", "", "root "] {
            assert!(bad.parse::<RunAs>().is_err(), "{bad:?} must be rejected");
        }
    }

    #[test]
    fn a_problem_with_a_line_prints_it_after_the_path() {
        let problem = |kind| Problem::new(PathBuf::from("/hooks/a.yml"), kind, Binds::Nothing);
        let with_line = problem(ProblemKind::RunAndArgv { line: 4 });
        assert_eq!(
            with_line.to_string(),
            "/hooks/a.yml:4: give 'run' or 'argv', not both"
        );
        let without = problem(ProblemKind::NoCommand);
        assert!(
            without
                .to_string()
                .starts_with("/hooks/a.yml: a declarative hook needs")
        );
        assert_eq!(ProblemKind::MissingType.line(), None);
    }

    #[test]
    fn a_problem_with_a_name_that_is_not_utf8_serialises_lossily() {
        use std::os::unix::ffi::OsStrExt;
        let problem = Problem::new(
            PathBuf::from(std::ffi::OsStr::from_bytes(b"/hooks/bad\xff.sh")),
            ProblemKind::NameNotUtf8,
            Binds::Nothing,
        );
        assert_eq!(
            serde_json::to_value(&problem).unwrap(),
            serde_json::json!({
                "path": "/hooks/bad\u{FFFD}.sh",
                "reason": "the file name is not UTF-8; rename the file",
            })
        );
    }
}

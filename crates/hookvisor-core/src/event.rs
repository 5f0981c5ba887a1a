//! The events hooks bind to and what a hook declares about its run (docs/EVENTS.md §1.1–§1.3, §2.1,
//! §5 rules 6, 8, 9, 15).
//!
//! The rules, written once here:
//!
//! 1. **Names** (§1.1, §5 rule 15). An event is one of the canonical names of §1.1
//!    ([`Event::ALL`](crate::event::Event::ALL)), or an agent's own event bound raw, `claude.X`, `codex.X` or `gemini.X`
//!    (`claude.PreCompact`), where `X` is letters, digits and `_`. Any other name is an error
//!    whose text lists the known ones, so a typo is reported with its fix.
//! 2. **Gates** (§1.1, "block =" column). Gates can be blocked; notices cannot. A raw event is
//!    a gate: hookvisor cannot know what the agent does with a block, so it passes the block
//!    on and lets the agent decide, which is how the agents treat exit 2 (§3.1).
//! 3. **Default `block_on`** (§1.3 †): `failure` on `turn.end` and `commit.before` (phase-1
//!    linters exit 1), `exit2` elsewhere, so a crashing guard fails open.
//! 4. **Phase-1 kinds** (§2.1): `type: session` ≡ `session.start`, `type: file` ≡ `turn.end`,
//!    `type: pre-commit` ≡ `commit.before` ([`Event::of_kind`](crate::event::Event::of_kind), [`Event::phase1_kind`](crate::event::Event::phase1_kind)).
//! 5. **Tool matcher** (§5 rule 6): a `tool` of only `[A-Za-z0-9_|*]` is a `|`-list of exact
//!    names, `*` meaning all; anything else is a regex over the whole name, compiled at load.
//! 6. **Actions** (§1.2, §5 rule 9): a hook's action is a command: its own script file, an
//!    `argv:` list run without a shell, or a `run:` text run by `sh -c` after the injection-safe
//!    rewrite of [`crate::template`]; or one of the built-in actions `webhook`, `spawn`,
//!    `git-commit` and `git-push`. `prompt` and `agent` are not supported (discovery reports
//!    them).
//!
//! How a hook file says these things, and how discovery keeps event hooks away from the
//! phase-1 runners, is in [`crate::Hook`]'s documentation.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::agents::{Agent, Route};
use crate::policy::{BlockOn, OnFailure, Phase, ReasonFrom};
use crate::template::ShellTemplate;
use crate::when::Condition;

/// The moment of the agent's life a hook belongs to.
///
/// The enum is `non_exhaustive` because more lifecycle points will come (turn start, session end,
/// tool calls); code that matches on it must keep a fallback arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum HookKind {
    /// Runs once when the container starts (`type: session`).
    Session,
    /// Runs at the end of an LLM turn when a file matching its pattern changed (`type: file`).
    File,
    /// Runs inside `git commit` through the generated git hook (`type: pre-commit`).
    PreCommit,
}

impl HookKind {
    /// Every kind, in the order the documentation lists them.
    pub const ALL: [HookKind; 3] = [HookKind::Session, HookKind::File, HookKind::PreCommit];

    /// The spelling used in front matter, `status.json` and `DISCOBOT_HOOK_TYPE`.
    pub fn as_str(self) -> &'static str {
        match self {
            HookKind::Session => "session",
            HookKind::File => "file",
            HookKind::PreCommit => "pre-commit",
        }
    }

    /// The timeout a hook of this kind gets when its front matter names none.
    pub fn default_timeout(self) -> Duration {
        match self {
            HookKind::Session => Duration::from_secs(300),
            HookKind::File => Duration::from_secs(900),
            HookKind::PreCommit => Duration::from_secs(300),
        }
    }
}

impl fmt::Display for HookKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for HookKind {
    type Err = UnknownKind;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "session" => Ok(HookKind::Session),
            "file" => Ok(HookKind::File),
            "pre-commit" => Ok(HookKind::PreCommit),
            other => Err(UnknownKind {
                value: other.to_owned(),
            }),
        }
    }
}

/// A `type` that is no phase-1 kind; a hook file's problem
/// ([`ProblemKind::UnknownType`](crate::hook::ProblemKind::UnknownType)).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown type '{value}'; use one of session, file, pre-commit")]
pub struct UnknownKind {
    /// The value written.
    pub value: String,
}

/// An event a hook binds to: a canonical one of docs/EVENTS.md §1.1, or an agent's own (rule 1).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Event {
    /// The session starts (phase 1: `type: session`).
    SessionStart,
    /// A turn starts (the user's prompt); a block refuses the prompt.
    TurnStart,
    /// A tool is about to run; a block denies it.
    ToolBefore,
    /// A tool ran; a block is feedback to the model.
    ToolAfter,
    /// A tool failed.
    ToolFailed,
    /// A file tool wrote a path.
    FileEdited,
    /// A turn ends (phase 1: `type: file`); a block re-prompts.
    TurnEnd,
    /// A task is created; a block keeps it from starting.
    TaskStart,
    /// A task is reported done; a block rejects it.
    TaskComplete,
    /// A teammate is about to go idle; a block keeps it working.
    TeamIdle,
    /// A pipeline stage completed.
    StageComplete,
    /// The agent is about to stop; a block buys one more turn.
    SessionStop,
    /// The session ended.
    SessionEnd,
    /// The agent failed.
    Error,
    /// A commit is about to be made (phase 1: `type: pre-commit`); a block refuses it.
    CommitBefore,
    /// A commit was made.
    CommitAfter,
    /// An agent's own event, bound by its own name (`claude.PreCompact`).
    Raw {
        /// Whose event it is.
        agent: Agent,
        /// The agent's name for it, as the agent spells it.
        name: String,
    },
}

/// The canonical names, in the order of docs/EVENTS.md §1.1, with their gate flag.
const CANONICAL: [(&str, bool); 16] = [
    ("session.start", false),
    ("turn.start", true),
    ("tool.before", true),
    ("tool.after", true),
    ("tool.failed", false),
    ("file.edited", false),
    ("turn.end", true),
    ("task.start", true),
    ("task.complete", true),
    ("team.idle", true),
    ("stage.complete", false),
    ("session.stop", true),
    ("session.end", false),
    ("error", false),
    ("commit.before", true),
    ("commit.after", false),
];

impl Event {
    /// Every canonical event, in the order of docs/EVENTS.md §1.1.
    pub const ALL: [Event; 16] = [
        Event::SessionStart,
        Event::TurnStart,
        Event::ToolBefore,
        Event::ToolAfter,
        Event::ToolFailed,
        Event::FileEdited,
        Event::TurnEnd,
        Event::TaskStart,
        Event::TaskComplete,
        Event::TeamIdle,
        Event::StageComplete,
        Event::SessionStop,
        Event::SessionEnd,
        Event::Error,
        Event::CommitBefore,
        Event::CommitAfter,
    ];

    /// Index into [`CANONICAL`]; `None` for a raw event.
    fn index(&self) -> Option<usize> {
        Some(match self {
            Event::SessionStart => 0,
            Event::TurnStart => 1,
            Event::ToolBefore => 2,
            Event::ToolAfter => 3,
            Event::ToolFailed => 4,
            Event::FileEdited => 5,
            Event::TurnEnd => 6,
            Event::TaskStart => 7,
            Event::TaskComplete => 8,
            Event::TeamIdle => 9,
            Event::StageComplete => 10,
            Event::SessionStop => 11,
            Event::SessionEnd => 12,
            Event::Error => 13,
            Event::CommitBefore => 14,
            Event::CommitAfter => 15,
            Event::Raw { .. } => return None,
        })
    }

    /// Whether a block on this event is passed back to its caller (rule 2); raw events are gates.
    pub fn is_gate(&self) -> bool {
        self.index().is_none_or(|i| CANONICAL[i].1)
    }

    /// The `block_on` a hook of this event gets when it names none (rule 3).
    pub fn default_block_on(&self) -> BlockOn {
        match self {
            Event::TurnEnd | Event::CommitBefore => BlockOn::Failure,
            _ => BlockOn::Exit2,
        }
    }

    /// The event a phase-1 kind is (rule 4).
    pub fn of_kind(kind: HookKind) -> Event {
        match kind {
            HookKind::Session => Event::SessionStart,
            HookKind::File => Event::TurnEnd,
            HookKind::PreCommit => Event::CommitBefore,
        }
    }

    /// The phase-1 kind this event is, if any (rule 4).
    pub fn phase1_kind(&self) -> Option<HookKind> {
        match self {
            Event::SessionStart => Some(HookKind::Session),
            Event::TurnEnd => Some(HookKind::File),
            Event::CommitBefore => Some(HookKind::PreCommit),
            _ => None,
        }
    }
}

impl fmt::Display for Event {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self, self.index()) {
            (Event::Raw { agent, name }, _) => write!(f, "{}.{name}", agent.as_str()),
            (_, Some(i)) => f.write_str(CANONICAL[i].0),
            // `index` is `None` only for `Raw`, matched above.
            (_, None) => Ok(()),
        }
    }
}

/// An event name that is neither canonical nor a raw agent event (rule 1).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown event '{name}'; use one of {}, or an agent's own event as claude.NAME, codex.NAME \
     or gemini.NAME",
    CANONICAL.map(|(n, _)| n).join(", ")
)]
pub struct UnknownEvent {
    /// The name as written.
    pub name: String,
}

impl FromStr for Event {
    type Err = UnknownEvent;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if let Some(i) = CANONICAL.iter().position(|(name, _)| *name == s) {
            return Ok(Event::ALL[i].clone());
        }
        let unknown = || UnknownEvent { name: s.to_owned() };
        let (prefix, name) = s.split_once('.').ok_or_else(unknown)?;
        let agent = Agent::from_word(prefix).ok_or_else(unknown)?;
        let valid =
            !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !valid {
            return Err(unknown());
        }
        Ok(Event::Raw {
            agent,
            name: name.to_owned(),
        })
    }
}

/// Which tool calls a hook of a tool event cares about (`tool:`, rule 5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolMatcher {
    /// Every tool (`*`).
    All,
    /// These names (`Write|Edit`); one with a `*` is a glob (`Bash*`, `mcp__*`), where `*`
    /// matches any run of characters (see [`ToolMatcher::matches`]).
    Names(Vec<String>),
    /// A regex matched against the whole name (`mcp__.*__write`, `Edit.?`).
    Regex(ToolRegex),
}

/// A `tool:` regex, compiled once at load and anchored at both ends (§5 rule 6: "matched
/// against the whole name", as Claude Code matches its own matchers).
#[derive(Debug, Clone)]
pub struct ToolRegex {
    text: String,
    compiled: regex::Regex,
}

impl ToolRegex {
    /// The regex as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }
}

impl PartialEq for ToolRegex {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for ToolRegex {}

/// A `tool:` value that is neither a list of names nor a regex that compiles.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "tool: '{text}' is no regex ({reason}); write a regex that compiles, or names joined by '|'"
)]
pub struct InvalidToolMatcher {
    /// The value as written.
    pub text: String,
    /// What the regex compiler said, on one line.
    pub reason: String,
}

/// The most memory one compiled `tool:` regex may take: a hook file must not make every
/// `fire` build a huge automaton.
const TOOL_REGEX_SIZE_LIMIT: usize = 1 << 20;

impl ToolMatcher {
    /// Reads a `tool:` value by rule 6; a regex is compiled here, once.
    pub fn parse(text: &str) -> Result<ToolMatcher, InvalidToolMatcher> {
        let plain = text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'|' | b'*'));
        if !plain {
            let compiled = regex::RegexBuilder::new(&format!("^(?:{text})$"))
                .size_limit(TOOL_REGEX_SIZE_LIMIT)
                .build()
                .map_err(|e| InvalidToolMatcher {
                    text: text.to_owned(),
                    reason: e
                        .to_string()
                        .split_whitespace()
                        .collect::<Vec<_>>()
                        .join(" "),
                })?;
            return Ok(ToolMatcher::Regex(ToolRegex {
                text: text.to_owned(),
                compiled,
            }));
        }
        let names: Vec<&str> = text.split('|').filter(|n| !n.is_empty()).collect();
        if names.is_empty() || names.contains(&"*") {
            return Ok(ToolMatcher::All);
        }
        Ok(ToolMatcher::Names(
            names.into_iter().map(str::to_owned).collect(),
        ))
    }

    /// Whether a tool call is selected by rule 6: by the agent's name `tool_name`, by its
    /// canonical name ([`canonical_tool`]), or, for a shell call whose `command` is a `git
    /// commit`, by `git_commit`.
    pub fn matches_call(&self, tool_name: Option<&str>, command: Option<&str>) -> bool {
        if self.matches(tool_name) {
            return true;
        }
        let canonical = tool_name.and_then(canonical_tool);
        canonical.is_some_and(|c| self.matches(Some(c)))
            || (canonical == Some("bash")
                && command.is_some_and(is_git_commit)
                && self.matches(Some("git_commit")))
    }

    /// Whether a call of the tool `tool_name` (`None`: the event names no tool) is selected.
    /// A name with a `*` matches as a glob: taking `mcp__*` as an exact name would never
    /// match, and a gate that never runs lets every call through.
    pub fn matches(&self, tool_name: Option<&str>) -> bool {
        match self {
            ToolMatcher::All => true,
            ToolMatcher::Names(names) => {
                tool_name.is_some_and(|tool| names.iter().any(|n| name_matches(n, tool)))
            }
            ToolMatcher::Regex(regex) => {
                tool_name.is_some_and(|tool| regex.compiled.is_match(tool))
            }
        }
    }
}

/// The canonical tool names of docs/EVENTS.md §5 rule 6; each agent's row spells them its own way
/// ([`crate::agents::Spec::canonical_tools`]), so that a hook with `tool: bash` matches Claude's
/// `Bash` and Gemini's `run_shell_command`. `git_commit` has no tool of its own: it is a shell
/// call whose command is a `git commit` ([`ToolMatcher::matches_call`]).
pub const CANONICAL_TOOLS: [&str; 5] = ["write", "edit", "apply_patch", "bash", "git_commit"];

/// The canonical name of an agent's tool (`Bash` → `bash`); `None` for a tool without one.
pub fn canonical_tool(agent_name: &str) -> Option<&'static str> {
    Agent::ALL
        .iter()
        .find_map(|agent| agent.spec().canonical_tool(agent_name))
}

/// Whether some supported agent has a tool of this name, or it is a canonical one: `check`
/// warns on a `tool:` name that is neither, since such a hook never runs.
pub fn is_known_tool(name: &str) -> bool {
    name.starts_with("mcp__")
        || CANONICAL_TOOLS.contains(&name)
        || Agent::ALL.iter().any(|agent| {
            let spec = agent.spec();
            spec.canonical_tool(name).is_some() || spec.other_tools.contains(&name)
        })
}

/// Whether a shell `command` runs `git commit` (as a whole command of a `;`, `&&`, `||` or `|`
/// list, after `VAR=value` assignments and git's global options).
///
/// A hint, not a parser: `command git commit`, `(git commit)`, `env … git commit`, `\git
/// commit`, `sh -c 'git commit'` or an alias are not seen, so `tool: git_commit` is no gate;
/// `commit.before` is (it runs inside git's own pre-commit hook).
pub fn is_git_commit(command: &str) -> bool {
    command.split(['\n', ';', '&', '|']).any(|part| {
        let mut words = part
            .split_whitespace()
            .map(|w| w.trim_matches(['\'', '"']))
            .skip_while(|w| w.contains('=') && !w.starts_with('-'));
        let is_git = words
            .next()
            .is_some_and(|w| w == "git" || w.ends_with("/git"));
        if !is_git {
            return false;
        }
        let mut takes_value = false;
        for word in words {
            if takes_value {
                takes_value = false;
            } else if matches!(word, "-C" | "-c" | "--git-dir" | "--work-tree") {
                takes_value = true;
            } else if !word.starts_with('-') {
                return word == "commit";
            }
        }
        false
    })
}

/// Whether `tool` is `name`, or matches it as a glob when it has a `*`.
fn name_matches(name: &str, tool: &str) -> bool {
    if !name.contains('*') {
        return name == tool;
    }
    // Runs of `*` are one `*`: globset refuses a `**` inside a name, and here they mean the
    // same. `parse` let only letters, digits, `_` and `*` through, so nothing else is special.
    let mut glob = String::with_capacity(name.len());
    for c in name.chars() {
        if !(c == '*' && glob.ends_with('*')) {
            glob.push(c);
        }
    }
    globset::GlobBuilder::new(&glob)
        .literal_separator(false)
        .build()
        .is_ok_and(|g| g.compile_matcher().is_match(tool))
}

impl fmt::Display for ToolMatcher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ToolMatcher::All => f.write_str("*"),
            ToolMatcher::Names(names) => f.write_str(&names.join("|")),
            ToolMatcher::Regex(regex) => f.write_str(&regex.text),
        }
    }
}

/// Where a hook's output goes besides the log (`pipe_output`, docs/EVENTS.md §1.3, §1.6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PipeOutput {
    /// Nowhere else (the default).
    #[default]
    Never,
    /// Always into the context buffer.
    Always,
    /// Into the context buffer when the run failed.
    Failure,
}

impl PipeOutput {
    /// The spelling used in front matter and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            PipeOutput::Never => "false",
            PipeOutput::Always => "true",
            PipeOutput::Failure => "failure",
        }
    }
}

/// What a command hook runs (rule 6).
#[derive(Debug, Clone)]
pub enum Command {
    /// The hook file itself, an executable script.
    Script,
    /// `argv:`: a program and its arguments, run without a shell.
    Argv(Vec<String>),
    /// `run:`: a script for `sh -c`, its placeholders rewritten at load.
    Run(ShellTemplate),
}

/// What a hook does when it runs (rule 6).
#[derive(Debug, Clone)]
pub enum HookAction {
    /// A command: a script, an argv or a `run:` text.
    Command(Command),
    /// `action: git-commit` (docs/EVENTS.md §1.2, §5 rule 24).
    GitCommit(crate::git_action::GitCommit),
    /// `action: git-push` (docs/EVENTS.md §1.2).
    GitPush(crate::git_action::GitPush),
    /// `action: spawn` (docs/EVENTS.md §4.4, §5 rule 23).
    Spawn(crate::spawn::Spawn),
    /// `action: webhook` (docs/EVENTS.md §4.3, §5 rules 20, 22).
    Webhook(crate::webhook::Webhook),
}

impl HookAction {
    /// The `action:` word, for `list` and status.
    pub fn as_str(&self) -> &'static str {
        match self {
            HookAction::Command(_) => "command",
            HookAction::GitCommit(_) => "git-commit",
            HookAction::GitPush(_) => "git-push",
            HookAction::Spawn(_) => "spawn",
            HookAction::Webhook(_) => "webhook",
        }
    }

    /// The action's own fields as `list` shows them, in front matter spelling; none for a
    /// command, whose `run`/`argv` is its file.
    pub fn fields(&self) -> Vec<(&'static str, serde_json::Value)> {
        let fields = match self {
            HookAction::Command(_) => Vec::new(),
            HookAction::GitCommit(action) => action.fields(),
            HookAction::GitPush(action) => action.fields(),
            HookAction::Spawn(action) => action.fields(),
            HookAction::Webhook(action) => action.fields(),
        };
        fields
            .into_iter()
            .map(|(key, value)| (key, sorted_keys(&value)))
            .collect()
    }
}

/// `value` with every object's keys in sorted order, whichever order serde_json keeps (its
/// `preserve_order` feature is on in the workspace build, off for this crate alone), so `list`
/// and `import --print` show a body the same way in every build.
fn sorted_keys(value: &serde_json::Value) -> serde_json::Value {
    match value {
        serde_json::Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            serde_json::Value::Object(
                keys.into_iter()
                    .map(|key| (key.clone(), sorted_keys(&map[key])))
                    .collect(),
            )
        }
        serde_json::Value::Array(items) => {
            serde_json::Value::Array(items.iter().map(sorted_keys).collect())
        }
        other => other.clone(),
    }
}

/// What a hook's front matter says about its event and how its result is judged
/// (docs/EVENTS.md §1.3), defaults applied.
#[derive(Debug, Clone)]
pub struct EventSpec {
    /// The event it binds to: `event:`, else the event of its `type`.
    pub event: Event,
    /// `tool:`, for tool events; `None` matches every tool.
    pub tool: Option<ToolMatcher>,
    /// `when:`, parsed at load.
    pub when: Option<Condition>,
    /// `phase:`; default `pre`.
    pub phase: Phase,
    /// `await:`; default true (a phase-1 session hook: its `blocking`).
    pub await_: bool,
    /// `block_on:`; default [`Event::default_block_on`].
    pub block_on: BlockOn,
    /// `on_failure:`; default `continue`.
    pub on_failure: OnFailure,
    /// `retries:`: re-runs after the first under `on_failure: retry` (session hooks: their
    /// phase-1 retries); default 3, for session hooks [`crate::policy::DEFAULT_RETRIES`].
    pub retries: u32,
    /// `retry_delay:`; default 5 seconds.
    pub retry_delay: Duration,
    /// `pipe_output:`; default `false`.
    pub pipe_output: PipeOutput,
    /// `reason_from:`; default stderr first.
    pub reason_from: ReasonFrom,
    /// `action:` and its fields; default the hook's own script.
    pub action: HookAction,
    /// Which JSON the hook reads on stdin; default the event JSON (an AutoAgent import: its
    /// own, docs/EVENTS.md §2.2).
    pub stdin: crate::payload::StdinDialect,
    /// Which names the hook's environment has besides hookvisor's; default none (an
    /// agent-pipelines import: its own, docs/EVENTS.md §2.2).
    pub env: crate::payload::EnvDialect,
    /// Whether the front matter names any field of the event model (`event:` or a field of
    /// §1.3), or the hook is a declarative file: `list` shows the event fields of such hooks
    /// and keeps phase-1 hooks' JSON as it was.
    pub declared: bool,
}

impl EventSpec {
    /// Whether this hook would block a tool call named `git_commit` (`tool.before`, `pre`,
    /// awaited, blocking on its exit): a gate that the name cannot hold, since
    /// [`is_git_commit`] reads only the common spelling of a shell `git commit`; `check` warns
    /// and points to `commit.before`, which runs inside git's own hook.
    pub fn gates_commits_by_tool(&self) -> bool {
        self.event == Event::ToolBefore
            && self.phase == Phase::Pre
            && self.await_
            && self.block_on != BlockOn::Never
            && matches!(&self.tool, Some(ToolMatcher::Names(names)) if names.iter().any(|n| n == "git_commit"))
    }
}

/// The default `retries` of a hook that is not a session hook (docs/EVENTS.md §1.3).
pub(crate) const DEFAULT_EVENT_RETRIES: u32 = 3;

/// The default `retry_delay` (docs/EVENTS.md §1.3).
pub(crate) const DEFAULT_RETRY_DELAY: Duration = Duration::from_secs(5);

impl EventSpec {
    /// The spec of a phase-1 hook of this kind with nothing of the event model in its front
    /// matter: its event, every default.
    pub fn for_kind(kind: HookKind) -> EventSpec {
        let event = Event::of_kind(kind);
        EventSpec {
            block_on: event.default_block_on(),
            event,
            tool: None,
            when: None,
            phase: Phase::Pre,
            await_: kind != HookKind::Session,
            on_failure: OnFailure::Continue,
            retries: if kind == HookKind::Session {
                crate::policy::DEFAULT_RETRIES
            } else {
                DEFAULT_EVENT_RETRIES
            },
            retry_delay: DEFAULT_RETRY_DELAY,
            pipe_output: PipeOutput::Never,
            reason_from: ReasonFrom::Stderr,
            action: HookAction::Command(Command::Script),
            stdin: crate::payload::StdinDialect::Canonical,
            env: crate::payload::EnvDialect::Canonical,
            declared: false,
        }
    }
}

/// What each agent route fires: here, beside the events, so that `agents` (the agents' rows)
/// uses no module above it.
impl Route {
    /// The canonical events the adapter fires for this route (docs/EVENTS.md §3.1).
    pub fn fires(self) -> &'static [Event] {
        match self {
            Route::SessionStart => &[Event::SessionStart],
            Route::TurnStart => &[Event::TurnStart],
            Route::ToolBefore => &[Event::ToolBefore],
            Route::ToolAfter => &[Event::ToolAfter, Event::FileEdited],
            Route::ToolFailed => &[Event::ToolFailed],
            Route::Error => &[Event::Error],
            Route::TurnEnd => &[Event::TurnEnd, Event::SessionStop],
            Route::TaskStart => &[Event::TaskStart],
            Route::TaskComplete => &[Event::TaskComplete],
            Route::TeamIdle => &[Event::TeamIdle],
            Route::SessionEnd => &[Event::SessionEnd],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_names_round_trip_and_raw_names_parse() {
        for event in Event::ALL {
            assert_eq!(event.to_string().parse::<Event>(), Ok(event.clone()));
        }
        let raw: Event = "claude.PreCompact".parse().unwrap();
        assert_eq!(
            raw,
            Event::Raw {
                agent: Agent::Claude,
                name: "PreCompact".into()
            }
        );
        assert_eq!(raw.to_string(), "claude.PreCompact");
        assert_eq!(
            "gemini.BeforeModel".parse::<Event>().unwrap().to_string(),
            "gemini.BeforeModel"
        );
        assert!("codex.Stop".parse::<Event>().is_ok());
    }

    #[test]
    fn unknown_names_are_refused_naming_the_known_ones() {
        for bad in [
            "",
            "turn_end",
            "Turn.End",
            "claude.",
            "claude.Pre Compact",
            "cursor.Stop",
            "claude.a.b",
            "session.start ",
            "turn",
        ] {
            let err = bad.parse::<Event>().unwrap_err();
            assert_eq!(err.name, bad);
            let text = err.to_string();
            assert!(
                text.starts_with(&format!(
                    "unknown event '{bad}'; use one of session.start, turn.start,"
                )),
                "{text}"
            );
            assert!(
                text.contains("commit.after, or an agent's own event as claude.NAME"),
                "{text}"
            );
        }
    }

    #[test]
    fn gates_follow_the_block_column() {
        let gates: Vec<String> = Event::ALL
            .iter()
            .filter(|e| e.is_gate())
            .map(Event::to_string)
            .collect();
        assert_eq!(
            gates,
            [
                "turn.start",
                "tool.before",
                "tool.after",
                "turn.end",
                "task.start",
                "task.complete",
                "team.idle",
                "session.stop",
                "commit.before"
            ]
        );
        assert!("claude.PreCompact".parse::<Event>().unwrap().is_gate());
    }

    #[test]
    fn default_block_on_is_failure_only_for_the_phase1_linters() {
        for event in Event::ALL {
            let want = if matches!(event, Event::TurnEnd | Event::CommitBefore) {
                BlockOn::Failure
            } else {
                BlockOn::Exit2
            };
            assert_eq!(event.default_block_on(), want, "{event}");
        }
        let raw: Event = "codex.Stop".parse().unwrap();
        assert_eq!(raw.default_block_on(), BlockOn::Exit2);
    }

    #[test]
    fn phase1_kinds_map_both_ways() {
        for kind in HookKind::ALL {
            assert_eq!(Event::of_kind(kind).phase1_kind(), Some(kind));
        }
        assert_eq!(Event::of_kind(HookKind::File), Event::TurnEnd);
        let with_kind = Event::ALL
            .iter()
            .filter(|e| e.phase1_kind().is_some())
            .count();
        assert_eq!(with_kind, 3);
    }

    #[test]
    fn a_phase1_kind_gets_its_event_and_the_defaults() {
        let session = EventSpec::for_kind(HookKind::Session);
        assert_eq!(session.event, Event::SessionStart);
        assert_eq!(session.block_on, BlockOn::Exit2);
        assert_eq!(session.retries, crate::policy::DEFAULT_RETRIES);
        assert!(
            !session.await_,
            "phase-1 session hooks do not block by default"
        );
        let file = EventSpec::for_kind(HookKind::File);
        assert_eq!(
            (file.event, file.block_on, file.retries, file.await_),
            (Event::TurnEnd, BlockOn::Failure, 3, true)
        );
        let commit = EventSpec::for_kind(HookKind::PreCommit);
        assert_eq!(
            (
                commit.event,
                commit.block_on,
                commit.phase,
                commit.on_failure
            ),
            (
                Event::CommitBefore,
                BlockOn::Failure,
                Phase::Pre,
                OnFailure::Continue
            )
        );
        assert!(matches!(
            commit.action,
            HookAction::Command(Command::Script)
        ));
        assert!(!commit.declared && commit.when.is_none() && commit.tool.is_none());
    }

    #[test]
    fn tool_matchers_by_rule_5() {
        let names = |n: &[&str]| ToolMatcher::Names(n.iter().map(|s| s.to_string()).collect());
        let table: &[(&str, ToolMatcher)] = &[
            ("*", ToolMatcher::All),
            ("Write|*", ToolMatcher::All),
            ("Write|Edit", names(&["Write", "Edit"])),
            ("Bash", names(&["Bash"])),
            ("mcp__github", names(&["mcp__github"])),
        ];
        for (tool, want) in table {
            assert_eq!(&ToolMatcher::parse(tool).unwrap(), want, "{tool}");
        }
        for regex in ["mcp__.*", "Edit.?", "Write Edit"] {
            let parsed = ToolMatcher::parse(regex).unwrap();
            assert!(
                matches!(&parsed, ToolMatcher::Regex(r) if r.as_str() == regex),
                "{regex}: {parsed:?}"
            );
            assert_eq!(parsed.to_string(), regex);
        }
    }

    /// A regex matches the whole name, never a part of it; a bad one is refused at load.
    #[test]
    fn tool_regexes_match_whole_names_and_bad_ones_are_refused() {
        // (tool:, tool name, selected)
        let table: &[(&str, Option<&str>, bool)] = &[
            ("mcp__.*", Some("mcp__github__create_issue"), true),
            ("mcp__.*", Some("x_mcp__github"), false),
            ("Edit.?", Some("Edit"), true),
            ("Edit.?", Some("MultiEdit"), false),
            ("Edit.?", Some("Edit12"), false),
            ("Write|Edit.*", Some("Write"), true),
            ("Write|Edit.*", Some("Writer"), false),
            ("(?i)bash", Some("BASH"), true),
            ("mcp__.*", None, false),
        ];
        for (tool, name, want) in table {
            let matcher = ToolMatcher::parse(tool).unwrap();
            assert_eq!(matcher.matches(*name), *want, "{tool} {name:?}");
        }
        let err = ToolMatcher::parse("Edit(").unwrap_err();
        assert_eq!(err.text, "Edit(");
        assert!(
            err.to_string().starts_with("tool: 'Edit(' is no regex (")
                && !err.to_string().contains('\n'),
            "{err}"
        );
        // A regex whose automaton would be huge is refused, not built.
        assert!(ToolMatcher::parse("(a{1000}){1000}").is_err());
    }

    /// A `*` inside a name is a glob, not part of an exact name that no tool has.
    #[test]
    fn tool_names_with_a_star_match_as_globs() {
        // (tool:, tool name, selected)
        let table: &[(&str, Option<&str>, bool)] = &[
            ("Bash*", Some("Bash"), true),
            ("Bash*", Some("BashOutput"), true),
            ("Bash*", Some("bash"), false),
            ("Bash*", Some("MyBash"), false),
            ("mcp__*", Some("mcp__github__create_issue"), true),
            ("mcp__*", Some("mcp_x"), false),
            ("mcp__*__write", Some("mcp__fs__write"), true),
            ("mcp__*__write", Some("mcp__fs__read"), false),
            ("Write|mcp__**", Some("mcp__a/b"), true),
            ("Write|Edit*", Some("Write"), true),
            ("Write|Edit*", Some("EditFile"), true),
            ("Write|Edit", Some("Edit2"), false),
            ("Bash*", None, false),
            ("*", None, true),
        ];
        for (tool, name, want) in table {
            let matcher = ToolMatcher::parse(tool).unwrap();
            assert_eq!(matcher.matches(*name), *want, "{tool} {name:?}");
        }
    }

    #[test]
    fn canonical_tool_names_match_each_agents_tool() {
        // The `tool:` value, the agent's tool name, the call's command, and whether it runs.
        let cases: &[(&str, &str, Option<&str>, bool)] = &[
            ("bash", "Bash", None, true),
            ("bash", "run_shell_command", None, true),
            ("bash", "shell", None, true),
            ("bash", "Write", None, false),
            ("Bash", "Bash", None, true),
            ("Bash", "run_shell_command", None, false),
            ("write", "write_file", None, true),
            ("write", "Write", None, true),
            ("edit", "MultiEdit", None, true),
            ("edit", "replace", None, true),
            ("write|edit", "Edit", None, true),
            ("apply_patch", "apply_patch", None, true),
            ("git_commit", "Bash", Some("git commit -m x"), true),
            (
                "git_commit",
                "run_shell_command",
                Some("cd a && git -C b commit"),
                true,
            ),
            (
                "git_commit",
                "Bash",
                Some("GIT_AUTHOR_NAME=x git commit"),
                true,
            ),
            ("git_commit", "Bash", Some("git status; echo commit"), false),
            ("git_commit", "Bash", Some("git log --grep commit"), false),
            ("git_commit", "Write", Some("git commit"), false),
            ("bash", "Bash", Some("git commit"), true),
        ];
        for (tool, name, command, want) in cases {
            let matcher = ToolMatcher::parse(tool).unwrap();
            assert_eq!(
                matcher.matches_call(Some(name), *command),
                *want,
                "{tool} {name} {command:?}"
            );
        }
        assert!(is_known_tool("bash") && is_known_tool("run_shell_command"));
        assert!(is_known_tool("mcp__fs__write") && !is_known_tool("Bahs"));
    }
}

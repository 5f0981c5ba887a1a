//! The agents hookvisor plugs into, one row each: everything that differs between their hook
//! protocols. `install` writes an agent's settings from its row, the adapter reads the agent's
//! events and answers it from the same row, and a raw event (`claude.PreCompact`) and a tool
//! name (`Bash` → `bash`) are read through it, so none of them can disagree.
//!
//! | agent | adapter (old alias) | settings (workspace, or home with `--user-level`) | turn end | timeout |
//! |---|---|---|---|---|
//! | Claude Code | `adapter claude` (`claude-stop`) | `.claude/settings.json` | `Stop`, `SubagentStop` | seconds |
//! | Codex | `adapter codex` (`codex-stop`) | `.codex/hooks.json` (`$CODEX_HOME/hooks.json` at user level) | `Stop`, `SubagentStop` | seconds |
//! | Gemini CLI | `adapter gemini` (`gemini-after-agent`) | `.gemini/settings.json` | `AfterAgent` | milliseconds |
//!
//! The old turn-end command of each row is an alias of `adapter AGENT` (docs/EVENTS.md §3.1): the
//! same code answers every event through either name.
//!
//! Each row also names the variable holding the agent's start directory (`CLAUDE_PROJECT_DIR`,
//! `GEMINI_PROJECT_DIR`; none for Codex), where the adapter looks for the workspace after
//! `--workspace`; the agent's file tools with where their `tool_input` names the paths
//! (Claude Code `Write`/`Edit`/`MultiEdit` `file_path`, `NotebookEdit` `notebook_path`; Gemini
//! CLI `write_file`/`replace` `file_path`; Codex `apply_patch`, a patch in `command`); its
//! spellings of the canonical tools (docs/EVENTS.md §5 rule 6) and its other built-in tools; how it
//! reads a block ([`Answers`]: Gemini CLI's `deny`, Codex's tool gate that ignores
//! `continue: false`); and whether it runs hooks only once trusted (Codex).
//!
//! All three agents read hooks in the same shape, `{"hooks":
//! {"<Event>": [{"hooks": [{"type": "command", "command": ..., "timeout": ...}]}]}}`; Gemini
//! CLI's entries also carry a `name` and a `description`.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

/// An agent hookvisor plugs into; its facts are its row, [`Agent::spec`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Agent {
    /// Claude Code (.claude/settings.json).
    Claude,
    /// Codex (.codex/hooks.json).
    Codex,
    /// Gemini CLI (.gemini/settings.json).
    Gemini,
}

impl Agent {
    /// Every agent, in the order of the table.
    pub const ALL: [Agent; 3] = [Agent::Claude, Agent::Codex, Agent::Gemini];

    /// The agent's row of the table.
    pub fn spec(self) -> &'static Spec {
        match self {
            Agent::Claude => &CLAUDE,
            Agent::Codex => &CODEX,
            Agent::Gemini => &GEMINI,
        }
    }

    /// The agent's word: on the command line (`adapter claude`) and as the prefix of its raw
    /// event names (`claude.PreCompact`).
    pub fn as_str(self) -> &'static str {
        self.spec().word
    }

    /// The agent whose word is `word`.
    pub fn from_word(word: &str) -> Option<Agent> {
        Agent::ALL.into_iter().find(|a| a.as_str() == word)
    }
}

/// How hookvisor meets one agent; the module docs show every row.
#[derive(Debug)]
pub struct Spec {
    /// The agent's name, for messages.
    pub name: &'static str,
    /// The agent's word ([`Agent::as_str`]).
    pub word: &'static str,
    /// The old turn-end subcommand, an alias of `hookvisor adapter AGENT` that `install`
    /// upgrades in place.
    pub command: &'static str,
    /// Where the agent reads its hooks.
    pub settings: Settings,
    /// The unit of a hook's `timeout`.
    pub timeout_unit: TimeoutUnit,
    /// Whether hook entries carry a `name` and a `description` (Gemini CLI's
    /// `/hooks enable|disable <name>`).
    pub named_hooks: bool,
    /// Whether the agent runs a hook only once the user trusts it, and skips it silently until
    /// then (Codex; `install` records the trust through `codex app-server`).
    pub needs_trust: bool,
    /// Every event `hookvisor adapter` answers for the agent and what it fires (docs/EVENTS.md
    /// §3.1); `install` registers all of them (§5 rule 17).
    pub routes: &'static [(&'static str, Route)],
    /// How the agent reads a block and an abort.
    pub answers: Answers,
    /// The variable in which the agent tells its hooks the directory it was started in (the
    /// project); the adapter's workspace after `--workspace`.
    pub project_dir_var: Option<&'static str>,
    /// The agent's tools that write files, and where in `tool_input` each names them:
    /// `tool.before`/`tool.after` carry them as `files` (so `pattern:` selects), and
    /// `tool.after` fires `file.edited` for each.
    pub file_tools: &'static [(&'static str, ToolPaths)],
    /// The agent's spellings of the canonical tools (docs/EVENTS.md §5 rule 6), as `(the agent's
    /// name, the canonical one)`: a hook with `tool: bash` matches Claude Code's `Bash`.
    pub canonical_tools: &'static [(&'static str, &'static str)],
    /// The agent's other built-in tools, which `check` knows as tool names.
    pub other_tools: &'static [&'static str],
}

/// How an agent reads a hook's block or abort, where the agents differ (docs/EVENTS.md §3.1; the
/// adapter's `protocol` module has the shapes they share and the sources).
#[derive(Debug)]
pub struct Answers {
    /// The `decision` word that blocks a prompt or a turn end: `block`, Gemini CLI's `deny`.
    pub block: &'static str,
    /// Whether a tool gate is denied by that same `decision` (Gemini CLI) rather than by
    /// `hookSpecificOutput.permissionDecision: "deny"`.
    pub deny_tool_by_decision: bool,
    /// Whether a block after a tool goes to the model as `additionalContext` beside the tool's
    /// result (Gemini CLI, where a `deny` would replace the result) rather than as
    /// `decision: "block"`.
    pub after_tool_block_as_context: bool,
    /// Whether an abort of a tool gate is sent as a deny: Codex's PreToolUse rejects
    /// `continue: false` and then runs the tool.
    pub abort_tool_as_deny: bool,
}

/// Where a file tool's `tool_input` names the paths it writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolPaths {
    /// The first of these string fields that is present: one path.
    Field(&'static [&'static str]),
    /// This string field holds an `apply_patch` text, whose `*** Add File:`, `*** Update
    /// File:`, `*** Delete File:` and `*** Move to:` lines name the paths.
    Patch(&'static str),
}

/// Where an agent's hooks live: `<dir>/<file>` in the workspace, or in the home directory at
/// user level.
#[derive(Debug)]
pub struct Settings {
    /// The agent's directory, e.g. `.claude`.
    pub dir: &'static str,
    /// The file in it.
    pub file: &'static str,
    /// A variable that, when set, names the user-level directory instead of `~/<dir>`.
    pub user_dir_var: Option<&'static str>,
}

/// What `hookvisor adapter` fires for one of an agent's events (docs/EVENTS.md §1.1, §3.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// `session.start`; its context and the buffer become `additionalContext`.
    SessionStart,
    /// `turn.start`: the prompt is recorded for the loop guard, then the buffer is drained.
    TurnStart,
    /// `tool.before`: a block denies the tool.
    ToolBefore,
    /// `tool.after`, and `file.edited` once per path a file tool wrote.
    ToolAfter,
    /// `tool.failed`: a notice whose context goes back at once.
    ToolFailed,
    /// `error`: a notice whose context waits in the buffer.
    Error,
    /// `turn.end` (the file hooks and the loop guard), then `session.stop` when it passes.
    TurnEnd,
    /// `task.start`: a block keeps the task from starting.
    TaskStart,
    /// `task.complete`: a block rejects the task.
    TaskComplete,
    /// `team.idle`: a block keeps the teammate working.
    TeamIdle,
    /// `session.end`: handed to `serve` or to a detached process, never waited for.
    SessionEnd,
}

impl Route {
    /// Whether `hookvisor loop` fires this event itself around each agent run (docs/EVENTS.md
    /// §3.2), so an adapter under the loop answers it with nothing: otherwise `session.start`
    /// and `session.end` would fire once per iteration's agent process, and `turn.start`,
    /// `turn.end`, `session.stop` and `error` twice per iteration.
    pub fn owned_by_loop(self) -> bool {
        matches!(
            self,
            Route::SessionStart
                | Route::TurnStart
                | Route::TurnEnd
                | Route::Error
                | Route::SessionEnd
        )
    }
}

/// Claude Code's events and their canonical ones, per its hooks reference
/// (<https://code.claude.com/docs/en/hooks>, "Hook events").
static CLAUDE_ROUTES: [(&str, Route); 12] = [
    ("SessionStart", Route::SessionStart),
    ("UserPromptSubmit", Route::TurnStart),
    ("PreToolUse", Route::ToolBefore),
    ("PostToolUse", Route::ToolAfter),
    ("PostToolUseFailure", Route::ToolFailed),
    ("StopFailure", Route::Error),
    ("Stop", Route::TurnEnd),
    ("SubagentStop", Route::TurnEnd),
    ("TaskCreated", Route::TaskStart),
    ("TaskCompleted", Route::TaskComplete),
    ("TeammateIdle", Route::TeamIdle),
    ("SessionEnd", Route::SessionEnd),
];

/// Codex's subset (docs/EVENTS.md §5 rule 17), per openai/codex `codex-rs/hooks/src/events/`
/// (`session_start.rs`, `user_prompt_submit.rs`, `pre_tool_use.rs`, `post_tool_use.rs`,
/// `stop.rs`, `subagent_stop.rs`; Codex 0.169 also sends `SessionEnd`, after flushing the
/// transcript). Its other events (`PreCompact`, `PermissionRequest`, …) bind raw.
static CODEX_ROUTES: [(&str, Route); 7] = [
    ("SessionStart", Route::SessionStart),
    ("UserPromptSubmit", Route::TurnStart),
    ("PreToolUse", Route::ToolBefore),
    ("PostToolUse", Route::ToolAfter),
    ("Stop", Route::TurnEnd),
    ("SubagentStop", Route::TurnEnd),
    ("SessionEnd", Route::SessionEnd),
];

/// Gemini CLI's events, per its hooks reference (<https://geminicli.com/docs/hooks/reference>).
static GEMINI_ROUTES: [(&str, Route); 6] = [
    ("SessionStart", Route::SessionStart),
    ("BeforeAgent", Route::TurnStart),
    ("BeforeTool", Route::ToolBefore),
    ("AfterTool", Route::ToolAfter),
    ("AfterAgent", Route::TurnEnd),
    ("SessionEnd", Route::SessionEnd),
];

/// Claude Code's file tools, per its tools reference (<https://code.claude.com/docs/en/hooks>,
/// "PreToolUse input"): absolute paths.
static CLAUDE_FILE_TOOLS: [(&str, ToolPaths); 4] = [
    ("Write", ToolPaths::Field(&["file_path"])),
    ("Edit", ToolPaths::Field(&["file_path"])),
    ("MultiEdit", ToolPaths::Field(&["file_path"])),
    ("NotebookEdit", ToolPaths::Field(&["notebook_path"])),
];

/// Codex's one file tool: PreToolUse and PostToolUse send the patch as `tool_input.command`
/// (openai/codex `core/src/tools/handlers/apply_patch.rs`, `pre_tool_use_payload`), its paths
/// relative to the call's `cwd`.
static CODEX_FILE_TOOLS: [(&str, ToolPaths); 1] = [("apply_patch", ToolPaths::Patch("command"))];

/// Gemini CLI's file tools (`write_file`, `replace`: `file_path`; `absolute_path` in older
/// releases).
static GEMINI_FILE_TOOLS: [(&str, ToolPaths); 2] = [
    (
        "write_file",
        ToolPaths::Field(&["file_path", "absolute_path"]),
    ),
    ("replace", ToolPaths::Field(&["file_path", "absolute_path"])),
];

/// The unit of an agent's hook timeouts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutUnit {
    /// Seconds.
    Seconds,
    /// Milliseconds.
    Milliseconds,
}

static CLAUDE: Spec = Spec {
    name: "Claude Code",
    word: "claude",
    command: "claude-stop",
    settings: Settings {
        dir: ".claude",
        file: "settings.json",
        user_dir_var: None,
    },
    timeout_unit: TimeoutUnit::Seconds,
    named_hooks: false,
    needs_trust: false,
    routes: &CLAUDE_ROUTES,
    answers: Answers {
        block: "block",
        deny_tool_by_decision: false,
        after_tool_block_as_context: false,
        abort_tool_as_deny: false,
    },
    project_dir_var: Some("CLAUDE_PROJECT_DIR"),
    file_tools: &CLAUDE_FILE_TOOLS,
    // Claude Code's tools reference (<https://code.claude.com/docs/en/hooks>).
    canonical_tools: &[
        ("Write", "write"),
        ("Edit", "edit"),
        ("MultiEdit", "edit"),
        ("Bash", "bash"),
    ],
    other_tools: &[
        "Read",
        "Glob",
        "Grep",
        "LS",
        "NotebookEdit",
        "NotebookRead",
        "WebFetch",
        "WebSearch",
        "Task",
        "Agent",
        "TodoWrite",
        "BashOutput",
        "KillShell",
        "KillBash",
        "ExitPlanMode",
        "SlashCommand",
        "Skill",
        "AskUserQuestion",
    ],
};

static CODEX: Spec = Spec {
    name: "Codex",
    word: "codex",
    command: "codex-stop",
    settings: Settings {
        dir: ".codex",
        file: "hooks.json",
        user_dir_var: Some("CODEX_HOME"),
    },
    timeout_unit: TimeoutUnit::Seconds,
    named_hooks: false,
    needs_trust: true,
    routes: &CODEX_ROUTES,
    answers: Answers {
        block: "block",
        deny_tool_by_decision: false,
        after_tool_block_as_context: false,
        abort_tool_as_deny: true,
    },
    project_dir_var: None,
    file_tools: &CODEX_FILE_TOOLS,
    canonical_tools: &[("apply_patch", "apply_patch"), ("shell", "bash")],
    other_tools: &["update_plan", "view_image"],
};

static GEMINI: Spec = Spec {
    name: "Gemini CLI",
    word: "gemini",
    command: "gemini-after-agent",
    settings: Settings {
        dir: ".gemini",
        file: "settings.json",
        user_dir_var: None,
    },
    timeout_unit: TimeoutUnit::Milliseconds,
    named_hooks: true,
    needs_trust: false,
    routes: &GEMINI_ROUTES,
    answers: Answers {
        block: "deny",
        deny_tool_by_decision: true,
        after_tool_block_as_context: true,
        abort_tool_as_deny: false,
    },
    project_dir_var: Some("GEMINI_PROJECT_DIR"),
    file_tools: &GEMINI_FILE_TOOLS,
    canonical_tools: &[
        ("write_file", "write"),
        ("replace", "edit"),
        ("run_shell_command", "bash"),
    ],
    other_tools: &[
        "read_file",
        "read_many_files",
        "list_directory",
        "glob",
        "search_file_content",
        "grep_search",
        "web_fetch",
        "google_web_search",
        "save_memory",
        "write_todos",
    ],
};

impl Spec {
    /// The turn-end events: the agent's, then a subagent's.
    pub fn stop_events(&self) -> impl Iterator<Item = &'static str> + use<> {
        self.routes
            .iter()
            .filter(|(_, route)| *route == Route::TurnEnd)
            .map(|(name, _)| *name)
    }

    /// The canonical name of the agent's tool `name` (`Bash` → `bash`).
    pub fn canonical_tool(&self, name: &str) -> Option<&'static str> {
        self.canonical_tools
            .iter()
            .find(|(tool, _)| *tool == name)
            .map(|(_, canonical)| *canonical)
    }

    /// Where the agent's tool `name` names the files it writes; `None` for a tool that
    /// writes none the adapter knows of.
    pub fn file_tool(&self, name: &str) -> Option<ToolPaths> {
        self.file_tools
            .iter()
            .find(|(tool, _)| *tool == name)
            .map(|(_, paths)| *paths)
    }

    /// What `hookvisor adapter` fires for the agent's event `name`; `None` for an event it
    /// fires raw (`claude.PreCompact`).
    pub fn route(&self, name: &str) -> Option<Route> {
        self.routes
            .iter()
            .find(|(event, _)| *event == name)
            .map(|(_, route)| *route)
    }

    /// The settings file: in `workspace`, or at user level in the home directory (or the
    /// directory the agent's variable names). `None` at user level without a usable `HOME`.
    pub fn settings_path(
        &self,
        user_level: bool,
        workspace: &Path,
        var: impl Fn(&str) -> Option<OsString>,
    ) -> Option<PathBuf> {
        let dir = if user_level {
            self.user_dir(var)?
        } else {
            workspace.join(self.settings.dir)
        };
        Some(dir.join(self.settings.file))
    }

    /// The agent's user-level directory: the one its variable names, else `~/<dir>`; `None`
    /// without either.
    pub fn user_dir(&self, var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
        let set = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
        self.settings
            .user_dir_var
            .and_then(set)
            .or_else(|| Some(set("HOME")?.join(self.settings.dir)))
    }
}

impl TimeoutUnit {
    /// `secs` seconds in this unit.
    pub fn of_secs(self, secs: u64) -> u64 {
        match self {
            TimeoutUnit::Seconds => secs,
            TimeoutUnit::Milliseconds => secs * 1000,
        }
    }

    /// A timeout in this unit, for messages: `1800 s`, `60000 ms`.
    pub fn show(self, timeout: u64) -> String {
        match self {
            TimeoutUnit::Seconds => format!("{timeout} s"),
            TimeoutUnit::Milliseconds => format!("{timeout} ms"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_paths() {
        let env = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| OsString::from(v))
            }
        };
        let ws = Path::new("/w");
        // The agent, user level, the environment, the path.
        type Case = (
            Agent,
            bool,
            &'static [(&'static str, &'static str)],
            Option<&'static str>,
        );
        let cases: &[Case] = &[
            (Agent::Claude, false, &[], Some("/w/.claude/settings.json")),
            (
                Agent::Claude,
                true,
                &[("HOME", "/h")],
                Some("/h/.claude/settings.json"),
            ),
            (Agent::Claude, true, &[("HOME", "")], None),
            (Agent::Claude, true, &[("CODEX_HOME", "/c")], None),
            (
                Agent::Codex,
                false,
                &[("CODEX_HOME", "/c")],
                Some("/w/.codex/hooks.json"),
            ),
            (
                Agent::Codex,
                true,
                &[("HOME", "/h"), ("CODEX_HOME", "/c")],
                Some("/c/hooks.json"),
            ),
            (
                Agent::Codex,
                true,
                &[("HOME", "/h"), ("CODEX_HOME", "")],
                Some("/h/.codex/hooks.json"),
            ),
            (
                Agent::Codex,
                true,
                &[("CODEX_HOME", "/c")],
                Some("/c/hooks.json"),
            ),
            (Agent::Codex, true, &[], None),
            (Agent::Gemini, false, &[], Some("/w/.gemini/settings.json")),
            (
                Agent::Gemini,
                true,
                &[("HOME", "/h")],
                Some("/h/.gemini/settings.json"),
            ),
        ];
        for (agent, user_level, vars, want) in cases {
            let got = agent.spec().settings_path(*user_level, ws, env(vars));
            assert_eq!(
                got,
                want.map(PathBuf::from),
                "{agent:?} user_level={user_level} {vars:?}"
            );
        }
    }

    #[test]
    fn timeouts_in_the_agents_unit() {
        assert_eq!(Agent::Claude.spec().timeout_unit.of_secs(60), 60);
        assert_eq!(Agent::Gemini.spec().timeout_unit.of_secs(60), 60_000);
        assert_eq!(TimeoutUnit::Seconds.show(1800), "1800 s");
        assert_eq!(TimeoutUnit::Milliseconds.show(60_000), "60000 ms");
    }

    #[test]
    fn routes_are_unique_and_hold_the_turn_end_and_prompt_events() {
        for agent in Agent::ALL {
            let spec = agent.spec();
            let mut names: Vec<&str> = spec.routes.iter().map(|(name, _)| *name).collect();
            names.sort_unstable();
            names.dedup();
            assert_eq!(names.len(), spec.routes.len(), "{agent:?}");
            for stop in spec.stop_events() {
                assert_eq!(spec.route(stop), Some(Route::TurnEnd), "{agent:?} {stop}");
            }
            assert_eq!(spec.route("PreCompact"), None, "{agent:?}");
        }
        let stops = |agent: Agent| agent.spec().stop_events().collect::<Vec<_>>();
        assert_eq!(stops(Agent::Claude), ["Stop", "SubagentStop"]);
        assert_eq!(stops(Agent::Codex), ["Stop", "SubagentStop"]);
        assert_eq!(stops(Agent::Gemini), ["AfterAgent"]);
    }
}

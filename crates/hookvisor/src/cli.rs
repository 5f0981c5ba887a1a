//! The command line of `hookvisor`, as DESIGN.md states it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

pub use crate::agents::Agent;

/// Hook runtime for sandboxed AI coding agents.
#[derive(Debug, Parser)]
#[command(name = "hookvisor", version, about, propagate_version = true)]
pub struct Cli {
    /// Workspace root [default: $DISCOBOT_WORKSPACE, else the current directory; the adapters
    /// take the agent's cwd first].
    #[arg(long, global = true, value_name = "DIR")]
    pub workspace: Option<PathBuf>,
    /// State directory [default: $HOOKVISOR_STATE_DIR, else ~/.discobot/SESSION/hooks].
    #[arg(long, global = true, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Session id [default: $DISCOBOT_SESSION_ID, else $SESSION_ID, else: the adapters use
    /// the agent's session_id, `status` the latest agent session of the workspace, the others
    /// "default"].
    #[arg(long = "session", global = true, value_name = "ID")]
    pub session: Option<String>,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Every subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the hooks of the workspace and the files that will not run.
    List {
        /// Print JSON: {"hooks":[...],"problems":[...]}.
        #[arg(long)]
        json: bool,
    },
    /// Print one line per hook file that will not run; exit 1 if there is any.
    Check,
    /// Evaluate file hooks at the end of an LLM turn.
    Eval(EvalArgs),
    /// Run one hook now, whatever its type.
    Run {
        /// The hook id (see `hookvisor list`).
        id: String,
        /// Print {"hookId","exitCode","success","timedOut"}.
        #[arg(long)]
        json: bool,
    },
    /// Show the recorded status of every hook; without a session given, of the latest agent
    /// session of the workspace (naming the others).
    Status {
        /// Print status.json as is.
        #[arg(long)]
        json: bool,
    },
    /// Run the session hooks, as the init does.
    Session {
        /// Account for `run_as: user` hooks when running as root: a name or a uid, with an
        /// optional group (`USER[:GROUP]`).
        #[arg(long, value_name = "USER[:GROUP]")]
        user: Option<String>,
        /// Which run_as: root hooks run: all, owned (only those the user cannot change), none.
        #[arg(long, value_name = "WHICH", env = "HOOKVISOR_ROOT_HOOKS")]
        root_hooks: Option<String>,
    },
    /// Manage and run the git pre-commit hook.
    #[command(name = "pre-commit", subcommand)]
    PreCommit(PreCommitCommand),
    /// Serve the HTTP API and dashboard, optionally supervising the agent.
    Serve(ServeArgs),
    /// Claude Code adapter: Stop, SubagentStop and UserPromptSubmit hook (JSON on stdin).
    ///
    /// The state dir is keyed by the agent's session_id unless --session, $DISCOBOT_SESSION_ID,
    /// $SESSION_ID or --state-dir say otherwise.
    ClaudeStop(AdapterArgs),
    /// Codex adapter: Stop, SubagentStop and UserPromptSubmit hook (JSON on stdin).
    ///
    /// The state dir is keyed by the agent's session_id unless --session, $DISCOBOT_SESSION_ID,
    /// $SESSION_ID or --state-dir say otherwise.
    CodexStop(AdapterArgs),
    /// Gemini CLI adapter: AfterAgent and BeforeAgent hook (JSON on stdin).
    ///
    /// The state dir is keyed by the agent's session_id unless --session, $DISCOBOT_SESSION_ID,
    /// $SESSION_ID or --state-dir say otherwise.
    GeminiAfterAgent(AdapterArgs),
    /// Add hookvisor's turn-end and prompt hooks to an agent's settings.
    Install(InstallArgs),
    /// Remove hookvisor's hooks from an agent's settings.
    Uninstall(InstallArgs),
}

/// Options of `eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// What started the turn that just ended: `user` resets the loop guard, `hook` counts.
    #[arg(long, value_enum, default_value_t = Trigger::User)]
    pub trigger: Trigger,
    /// Print the evaluation as JSON.
    #[arg(long)]
    pub json: bool,
    /// Hook-triggered re-prompts allowed per user turn.
    #[arg(long, env = "HOOKVISOR_MAX_RETRIES", default_value_t = 3)]
    pub max_retries: u32,
}

/// What started a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Trigger {
    /// A user message.
    User,
    /// A re-prompt from a failing hook.
    Hook,
}

/// `pre-commit` subcommands.
#[derive(Debug, Subcommand)]
pub enum PreCommitCommand {
    /// Write the git hook where git looks for it.
    Install,
    /// Remove our git hook and restore the one it replaced.
    Uninstall,
    /// Run the pre-commit hooks on the staged files (what the git hook calls).
    Run,
}

/// Options of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// TCP address to listen on (loopback unless --allow-remote).
    #[arg(long, value_name = "ADDR", conflicts_with = "socket")]
    pub listen: Option<String>,
    /// Unix socket to listen on (created 0600).
    #[arg(long, value_name = "PATH")]
    pub socket: Option<PathBuf>,
    /// Allow a non-loopback --listen address; requires HOOKVISOR_TOKEN.
    #[arg(long)]
    pub allow_remote: bool,
    /// Hook-triggered re-prompts allowed per user turn.
    #[arg(long, env = "HOOKVISOR_MAX_RETRIES", default_value_t = 3)]
    pub max_retries: u32,
    /// The agent command to supervise.
    #[arg(last = true, value_name = "AGENT_CMD")]
    pub agent: Vec<std::ffi::OsString>,
}

/// Options of the agent adapters.
#[derive(Debug, Args)]
pub struct AdapterArgs {
    /// Block the agent with the error as the reason when hookvisor itself fails.
    #[arg(long)]
    pub fail_closed: bool,
    /// Hook-triggered re-prompts allowed per user turn.
    #[arg(long, env = "HOOKVISOR_MAX_RETRIES", default_value_t = 3)]
    pub max_retries: u32,
}

/// Options of `install` and `uninstall`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// The agent whose settings to change.
    #[arg(value_enum)]
    pub agent: Agent,
    /// Change the user's settings instead of the workspace's.
    #[arg(long)]
    pub user_level: bool,
    /// Install the adapter with --fail-closed (block the agent when hookvisor itself fails).
    #[arg(long)]
    pub fail_closed: bool,
}

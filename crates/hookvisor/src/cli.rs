//! The command line of `hookvisor`, as docs/DESIGN.md states it.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Args, Parser, Subcommand, ValueEnum};
use hookvisor_core::agents::Agent;
use hookvisor_core::precommit::repository_top;
use hookvisor_core::{Context, ContextError, ContextOverrides, Credentials};

use crate::error::CliError;

/// Hook runtime for sandboxed AI coding agents.
#[derive(Debug, Parser)]
#[command(name = "hookvisor", version, about, propagate_version = true)]
pub struct Cli {
    /// The options every subcommand shares.
    #[command(flatten)]
    pub globals: GlobalArgs,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The command line of this process, parsed. `fire` sits on every tool call of an agent,
    /// and building clap's parser of all fifteen subcommands was a third of a fire that finds
    /// no hook (BENCHMARKS.md, case 7); so [`parse_fire`] reads a plain `fire` line by hand
    /// first. Anything else, and anything it is unsure of (`--help`, a repeated option, a value
    /// starting with `-`), goes to clap, so every message and exit status is clap's.
    pub fn parse_args() -> Cli {
        Cli::parse_line(std::env::args_os().collect())
    }

    /// [`Cli::parse_args`] of a given command line, program name first.
    fn parse_line(args: Vec<OsString>) -> Cli {
        if let Some(cli) = parse_fire(&args).or_else(|| parse_adapter(&args)) {
            return cli;
        }
        let hook_command = is_agent_hook_line(&args);
        match Cli::try_parse_from(args) {
            Ok(cli) => cli,
            // clap exits 2 on a refused line, and 2 is "block" to every agent: a bad option
            // or `$HOOKVISOR_MAX_RETRIES` in an agent's hook would deny each tool call and
            // re-prompt each stop without end. An adapter fails open instead (docs/EVENTS.md §3.1).
            Err(err) if hook_command && err.use_stderr() => {
                let _ = err.print();
                eprintln!("hookvisor: the hook command above was refused; failing open");
                std::process::exit(1);
            }
            Err(err) => err.exit(),
        }
    }
}

/// Whether a command line runs one of the agent adapters, which answer an agent's hook and
/// must never exit 2 for an error of their own.
fn is_agent_hook_line(args: &[OsString]) -> bool {
    args.iter().skip(1).any(|word| {
        word.to_str().is_some_and(|word| {
            word == "adapter" || Agent::ALL.iter().any(|a| a.spec().command == word)
        })
    })
}

/// A `fire` command line as clap would parse it, or `None` when it is not one, or has anything
/// this reader does not know (then clap parses it, and refuses it or knows better).
fn parse_fire(args: &[OsString]) -> Option<Cli> {
    // A variable clap reads for `fire` (its value may need clap's refusal).
    if std::env::var_os("HOOKVISOR_MAX_RETRIES").is_some() {
        return None;
    }
    let mut globals = GlobalArgs::default();
    let mut subcommand = false;
    let mut event = None;
    let mut data = None;
    let mut json = false;
    let mut trigger = None;
    let mut words = args.iter().skip(1).map(|a| a.to_str());
    let mut positional_only = false;
    while let Some(word) = words.next() {
        let word = word?;
        if positional_only || !word.starts_with('-') || word == "-" {
            if !subcommand {
                subcommand = word == "fire";
                if !subcommand {
                    return None;
                }
            } else if event.replace(word.to_owned()).is_some() {
                return None;
            }
            continue;
        }
        if word == "--" && subcommand {
            positional_only = true;
            continue;
        }
        if word == "--json" && subcommand {
            if json {
                return None;
            }
            json = true;
            continue;
        }
        let (name, inline) = match word.split_once('=') {
            Some((name, value)) => (name, Some(value)),
            None => (word, None),
        };
        // Every other option takes a value, which clap refuses to take from a word like an
        // option (a lone `-` is a value: `--data -` reads stdin).
        let value = match inline {
            Some(value) => value,
            None => words.next()??,
        };
        if value.is_empty() || value.starts_with('-') && value != "-" {
            return None;
        }
        let slot_taken = match name {
            "--workspace" => globals.workspace.replace(value.into()).is_some(),
            "--state-dir" => globals.state_dir.replace(value.into()).is_some(),
            "--session" => globals.session.replace(value.to_owned()).is_some(),
            "--data" if subcommand => data.replace(value.to_owned()).is_some(),
            "--trigger" if subcommand => {
                let value = FireTrigger::from_str(value, false).ok()?;
                trigger.replace(value).is_some()
            }
            _ => return None,
        };
        if slot_taken {
            return None;
        }
    }
    Some(Cli {
        globals,
        command: Command::Fire(FireArgs {
            event: event?,
            data,
            json,
            trigger: trigger.unwrap_or(FireTrigger::User),
            max_retries: None,
            deliver: None,
        }),
    })
}

/// An `adapter AGENT` command line as `install` writes it (`--fail-closed`, `--state-dir`,
/// `--session`, `--workspace`), read by hand for the reason [`parse_fire`] is: the adapter
/// runs on every tool call of an agent. `None` for anything else, which clap then parses.
fn parse_adapter(args: &[OsString]) -> Option<Cli> {
    if std::env::var_os("HOOKVISOR_MAX_RETRIES").is_some() {
        return None;
    }
    let mut words = args.iter().skip(1).map(|a| a.to_str());
    let mut globals = GlobalArgs::default();
    let mut agent = None;
    let mut subcommand = false;
    let mut fail_closed = false;
    while let Some(word) = words.next() {
        let word = word?;
        if !word.starts_with('-') {
            if !subcommand {
                subcommand = word == "adapter";
                if !subcommand {
                    return None;
                }
            } else {
                let parsed = Agent::from_word(word)?;
                if agent.replace(parsed).is_some() {
                    return None;
                }
            }
            continue;
        }
        if word == "--fail-closed" && subcommand {
            if fail_closed {
                return None;
            }
            fail_closed = true;
            continue;
        }
        let value = words.next()??;
        if value.is_empty() || value.starts_with('-') {
            return None;
        }
        let slot_taken = match word {
            "--workspace" => globals.workspace.replace(value.into()).is_some(),
            "--state-dir" => globals.state_dir.replace(value.into()).is_some(),
            "--session" => globals.session.replace(value.to_owned()).is_some(),
            _ => return None,
        };
        if slot_taken {
            return None;
        }
    }
    Some(Cli {
        globals,
        command: Command::Adapter(AgentAdapterArgs {
            agent: agent?,
            adapter: AdapterArgs {
                fail_closed,
                max_retries: None,
            },
        }),
    })
}

/// The global options, as given; [`GlobalArgs::resolve`] adds the environment they fall back to.
#[derive(Debug, Clone, Default, Args)]
pub struct GlobalArgs {
    /// Workspace root [default: $DISCOBOT_WORKSPACE, else the current directory; the adapters
    /// look up from the agent's cwd, after the agent's project variable].
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
}

/// The variables a context falls back to (docs/DESIGN.md "Files and names"), read once.
/// `HOOKVISOR_SESSION` is the session id `loop` gives its agent (docs/EVENTS.md §5 rule 18).
/// Beside them, each agent's `project_dir_var` (`CLAUDE_PROJECT_DIR`): its start directory,
/// which its hooks inherit (the adapters' workspace, [`Globals::agent_context`]).
const CONTEXT_VARIABLES: [&str; 6] = [
    "HOOKVISOR_SESSION",
    "DISCOBOT_WORKSPACE",
    "DISCOBOT_SESSION_ID",
    "SESSION_ID",
    "HOOKVISOR_STATE_DIR",
    "HOME",
];

impl GlobalArgs {
    /// The one step from the global options and the process environment to what every
    /// command resolves its context from.
    pub fn resolve(self) -> Globals {
        self.resolve_with(|name| std::env::var_os(name))
    }

    /// [`GlobalArgs::resolve`] over a given environment (the tests').
    pub fn resolve_with(self, var: impl Fn(&str) -> Option<OsString>) -> Globals {
        let project_dirs = Agent::ALL.iter().filter_map(|a| a.spec().project_dir_var);
        let env = CONTEXT_VARIABLES
            .into_iter()
            .chain(project_dirs)
            .filter_map(|name| var(name).filter(|v| !v.is_empty()).map(|v| (name, v)))
            .collect();
        Globals { args: self, env }
    }
}

/// The global options with their environment: every way a command gets its context is a
/// method here, so the precedence rules live in one place and differ only where a command's
/// job needs it (each method says why).
#[derive(Debug, Clone)]
pub struct Globals {
    /// The options as given on the command line.
    pub args: GlobalArgs,
    /// The non-empty [`CONTEXT_VARIABLES`] and agents' project variables.
    env: Vec<(&'static str, OsString)>,
}

impl Globals {
    /// A variable of [`Globals::env`], when set and not empty.
    fn var(&self, name: &str) -> Option<OsString> {
        self.env
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, v)| v.clone())
    }

    fn resolve(&self, overrides: ContextOverrides) -> Result<Context, ContextError> {
        Context::resolve_with(overrides, |name| self.var(name))
    }

    fn overrides(&self) -> ContextOverrides {
        ContextOverrides {
            workspace: self.args.workspace.clone(),
            state_dir: self.args.state_dir.clone(),
            session_id: self.named_session(),
            home: None,
        }
    }

    /// `--session`, else `$HOOKVISOR_SESSION`: a session named for hookvisor alone, which
    /// wins over the sandbox's `$DISCOBOT_SESSION_ID` (a `loop`'s agent runs in both).
    fn named_session(&self) -> Option<String> {
        self.args.session.clone().or_else(|| {
            self.var("HOOKVISOR_SESSION")
                .and_then(|v| v.into_string().ok())
        })
    }

    /// The context of most commands: options, then the environment, then defaults.
    pub fn context(&self) -> Result<Context, ContextError> {
        self.resolve(self.overrides())
    }

    /// The context for hooks run as another user (`session --user`): the default state dir
    /// is in that user's home, not root's.
    pub fn context_as(&self, user: Option<&Credentials>) -> Result<Context, ContextError> {
        self.resolve(ContextOverrides {
            home: user.map(|u| u.home.clone()),
            ..self.overrides()
        })
    }

    /// The context of `status` showing one recorded agent session.
    pub fn context_of_session(&self, session: &str) -> Result<Context, ContextError> {
        self.resolve(ContextOverrides {
            session_id: Some(session.to_owned()),
            ..self.overrides()
        })
    }

    /// The context of a commit: the workspace is `--workspace`, else the top level of the work
    /// tree git runs the hook in, never `$DISCOBOT_WORKSPACE`: a linked worktree or a
    /// submodule commits with its own hooks.
    pub fn commit_context(&self) -> Result<Context, CliError> {
        let workspace = match &self.args.workspace {
            Some(dir) => dir.clone(),
            None => repository_top(&std::env::current_dir()?)?,
        };
        Ok(self.resolve(ContextOverrides {
            workspace: Some(workspace),
            ..self.overrides()
        })?)
    }

    /// The context of an agent's event. The workspace is found as git finds a repository, what
    /// the agent's model cannot change first:
    ///
    /// 1. `--workspace` (which `install` writes into the agent's settings);
    /// 2. upward from the agent's project variable `project_var` (`CLAUDE_PROJECT_DIR`,
    ///    `GEMINI_PROJECT_DIR`: the directory the agent was started in, perhaps below the
    ///    workspace) to the one directory with hooks, else the repository's top
    ///    ([`hookvisor_core::enclosing_workspace`]: two nested directories with hooks are an
    ///    error, since the agent can make the nearer one);
    /// 3. `$DISCOBOT_WORKSPACE`;
    /// 4. upward from the event's `cwd` in the same way. The model moves `cwd` at will (one
    ///    `cd` in a shell call), and could leave an empty `.discobot/hooks` there (an error
    ///    then, as in 2), which is why this comes last;
    /// 5. the current directory.
    ///
    /// The session is from the options or the environment, else the agent's own
    /// (`agent_session`, already a plain name), so that each agent session keeps its own
    /// loop guard.
    pub fn agent_context(
        &self,
        project_var: Option<&str>,
        cwd: Option<PathBuf>,
        agent_session: Option<String>,
    ) -> Result<Context, ContextError> {
        let env_session =
            self.var("DISCOBOT_SESSION_ID").is_some() || self.var("SESSION_ID").is_some();
        let session_id = self
            .named_session()
            .or(if env_session { None } else { agent_session });
        let started = project_var.and_then(|v| self.var(v));
        let workspace = match (&self.args.workspace, started) {
            (Some(given), _) => Some(given.clone()),
            (None, Some(started)) => {
                Some(hookvisor_core::enclosing_workspace(Path::new(&started))?)
            }
            (None, None) => match self.var("DISCOBOT_WORKSPACE") {
                Some(dir) => Some(PathBuf::from(dir)),
                None => cwd
                    .map(|dir| hookvisor_core::enclosing_workspace(&dir))
                    .transpose()?,
            },
        };
        self.resolve(ContextOverrides {
            workspace,
            session_id,
            ..self.overrides()
        })
    }

    /// The workspace alone, for `install`: resolving the whole context would demand a HOME
    /// for a state dir that installing never touches.
    pub fn workspace(&self) -> Result<PathBuf, CliError> {
        let dir = self
            .args
            .workspace
            .clone()
            .or_else(|| self.var("DISCOBOT_WORKSPACE").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("."));
        dir.canonicalize()
            .ok()
            .filter(|d| d.is_dir())
            .ok_or_else(|| {
                CliError::usage(format!(
                    "workspace {} is not a directory; pass an existing one with --workspace",
                    dir.display()
                ))
            })
    }

    /// Whether any global option was given: then `eval` evaluates itself rather than asking
    /// the server of `$HOOKVISOR_URL`, which serves its own context.
    pub fn any_given(&self) -> bool {
        self.args.workspace.is_some()
            || self.args.state_dir.is_some()
            || self.args.session.is_some()
    }

    /// Whether `--workspace` or `--state-dir` was given: then `fire` runs the hooks itself
    /// rather than asking the server of `$HOOKVISOR_URL` (a `--session` is sent along).
    pub fn names_a_directory(&self) -> bool {
        self.args.workspace.is_some() || self.args.state_dir.is_some()
    }

    /// Whether an option or variable names the session or the state dir; when none does,
    /// `status` looks for the agent sessions of the workspace.
    pub fn names_a_session(&self) -> bool {
        self.args.session.is_some()
            || self.args.state_dir.is_some()
            || self.var("HOOKVISOR_SESSION").is_some()
            || ["DISCOBOT_SESSION_ID", "SESSION_ID", "HOOKVISOR_STATE_DIR"]
                .iter()
                .any(|name| self.var(name).is_some())
    }

    /// `$HOME`, when set and not empty: where the agent sessions' state dirs are.
    pub fn home(&self) -> Option<PathBuf> {
        self.var("HOME").map(PathBuf::from)
    }
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
    /// Fire an event: run its event hooks and print the decision (exit 0 allow, 1 block,
    /// 3 abort, 2 usage).
    Fire(FireArgs),
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
    /// One pass of the session hooks as hookvisor-init runs them (started by the init).
    #[command(name = "init-pass", hide = true)]
    InitPass(InitPassArgs),
    /// Manage and run the git pre-commit hook.
    #[command(name = "pre-commit", subcommand)]
    PreCommit(PreCommitCommand),
    /// Manage and run the git post-commit hook, which fires commit.after.
    #[command(name = "post-commit", subcommand)]
    PostCommit(PreCommitCommand),
    /// Serve the HTTP API and dashboard, optionally supervising the agent.
    Serve(ServeArgs),
    /// The agent adapter: every hook event of Claude Code, Codex or Gemini CLI (JSON on stdin),
    /// fired as hookvisor's events and answered in the agent's protocol.
    ///
    /// The state dir is keyed by the agent's session_id unless --session, $DISCOBOT_SESSION_ID,
    /// $SESSION_ID or --state-dir say otherwise.
    Adapter(AgentAdapterArgs),
    /// The old name of `adapter claude`, which it is an alias of: every event (JSON on stdin).
    ///
    /// The state dir is keyed by the agent's session_id unless --session, $DISCOBOT_SESSION_ID,
    /// $SESSION_ID or --state-dir say otherwise.
    ClaudeStop(AdapterArgs),
    /// The old name of `adapter codex`, which it is an alias of: every event (JSON on stdin).
    ///
    /// The state dir is keyed by the agent's session_id unless --session, $DISCOBOT_SESSION_ID,
    /// $SESSION_ID or --state-dir say otherwise.
    CodexStop(AdapterArgs),
    /// The old name of `adapter gemini`, which it is an alias of: every event (JSON on stdin).
    ///
    /// The state dir is keyed by the agent's session_id unless --session, $DISCOBOT_SESSION_ID,
    /// $SESSION_ID or --state-dir say otherwise.
    GeminiAfterAgent(AdapterArgs),
    /// Add `hookvisor adapter AGENT` to an agent's settings on every event the adapter
    /// answers (turn end, prompt, tools, session) and the agent's own events hooks name;
    /// `install git-fsmonitor` makes git ask `serve` what changed (`core.fsmonitor`).
    Install(InstallArgs),
    /// Remove hookvisor's hooks from an agent's settings (`git-fsmonitor`: put back the git
    /// config `install` changed).
    Uninstall(InstallArgs),
    /// Git's fsmonitor hook (what `install git-fsmonitor` sets `core.fsmonitor` to): prints the
    /// paths changed since TOKEN as the server of `$HOOKVISOR_URL` saw them, or "everything"
    /// (`/`) when no server of this work tree answers.
    GitFsmonitor {
        /// The hook protocol version git asks for; only 2 is answered (any other fails, and
        /// git then checks everything).
        #[arg(value_name = "VERSION")]
        protocol: u32,
        /// The token of git's last answer.
        #[arg(default_value = "")]
        token: String,
    },
    /// Drive a headless agent: run it iteration by iteration with the loop's events around
    /// it (exit 0 done, 1 limit, block or failures, 3 abort, 130/143 interrupted).
    Loop(LoopArgs),
    /// Move other tools' hooks into .discobot/hooks as declarative files (exit 1 when an
    /// entry with a problem was left in place).
    Import(ImportArgs),
}

/// Options of `import` (docs/EVENTS.md §2.2, §5 rule 11).
#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("mode").required(true).args(["print", "write"]))]
pub struct ImportArgs {
    /// iteratr, autoagent, nyzhi, pipelines (agent-pipelines), or one of their files
    /// [default: every tool's workspace file that `sources` reads].
    #[arg(value_name = "SOURCE")]
    pub source: Option<String>,
    /// Print each new file as `==> PATH <==` and its content; change nothing.
    #[arg(long)]
    pub print: bool,
    /// Write the new files, then remove the converted entries from their files (deleting a
    /// file left with nothing else).
    #[arg(long)]
    pub write: bool,
}

/// Options of `eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// What started the turn that just ended: `user` resets the loop guard, `hook` counts,
    /// `loop` is not guarded.
    #[arg(long, value_enum, default_value_t = Trigger::User)]
    pub trigger: Trigger,
    /// Print the evaluation as JSON.
    #[arg(long)]
    pub json: bool,
    /// Hook-triggered re-prompts allowed per user turn [default: `max_retries` of
    /// .discobot/hookvisor.yml, else 3].
    #[arg(long, env = "HOOKVISOR_MAX_RETRIES")]
    pub max_retries: Option<u32>,
}

/// Options of `fire` (docs/EVENTS.md §3, §5 rule 15); `--session` is the global option.
#[derive(Debug, Args)]
pub struct FireArgs {
    /// The event: a canonical name (`tool.before`) or an agent's own (`claude.PreCompact`).
    pub event: String,
    /// The event's data: a JSON object, `@FILE` to read it from a file, or `-` from stdin.
    #[arg(long, value_name = "JSON|@FILE|-")]
    pub data: Option<String>,
    /// Print the reply as JSON.
    #[arg(long)]
    pub json: bool,
    /// Who fired the event.
    #[arg(long, value_enum, default_value_t = FireTrigger::User)]
    pub trigger: FireTrigger,
    /// Hook-triggered re-prompts allowed per user turn (turn.end, session.stop) [default:
    /// `max_retries` of .discobot/hookvisor.yml, else 3].
    #[arg(long, env = "HOOKVISOR_MAX_RETRIES")]
    pub max_retries: Option<u32>,
    /// Internal: deliver this unawaited webhook, the event JSON of its firing on stdin (the
    /// detached child a `fire` leaves it to; docs/EVENTS.md §4.3).
    #[arg(long, value_name = "HOOK", hide = true, conflicts_with = "data")]
    pub deliver: Option<String>,
}

/// Who fired an event (`${trigger}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum FireTrigger {
    /// A person or an agent's own event.
    User,
    /// A hook.
    Hook,
    /// `hookvisor loop`.
    Loop,
}

impl FireTrigger {
    /// The word hooks see.
    pub fn as_str(self) -> &'static str {
        match self {
            FireTrigger::User => "user",
            FireTrigger::Hook => "hook",
            FireTrigger::Loop => "loop",
        }
    }
}

/// What started a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Trigger {
    /// A user message.
    User,
    /// A re-prompt from a failing hook.
    Hook,
    /// `hookvisor loop`: the loop guard does not apply.
    Loop,
}

/// Options of `loop` (docs/EVENTS.md §3.2).
#[derive(Debug, Args)]
pub struct LoopArgs {
    /// The task prompt, after the context and the last block reason.
    #[arg(long, value_name = "TEXT", conflicts_with = "prompt_file")]
    pub prompt: Option<String>,
    /// Read the task prompt from this file.
    #[arg(long, value_name = "FILE")]
    pub prompt_file: Option<PathBuf>,
    /// A `sh -c` command run in the workspace after each passing iteration: exit 0 is done.
    #[arg(long, value_name = "CMD")]
    pub until: Option<String>,
    /// Iterations at most.
    #[arg(long, value_name = "N", default_value_t = 20,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_iterations: u64,
    /// Seconds an iteration's agent may run before its process group is stopped [default: no
    /// limit].
    #[arg(long, value_name = "SECS", value_parser = clap::value_parser!(u64).range(1..))]
    pub turn_timeout: Option<u64>,
    /// The pipeline stage (`${stage}`); `stage.complete` fires at the end.
    #[arg(long, value_name = "NAME")]
    pub stage: Option<String>,
    /// A pipeline file (a path, or NAME for `.discobot/pipelines/NAME.yml`): only its hooks
    /// and its current stage's run, its stages one after the other.
    #[arg(long, value_name = "FILE|NAME")]
    pub pipeline: Option<PathBuf>,
    /// Whose own hooks the agent runs [default: the file name of AGENT_CMD's first word].
    #[arg(long, value_name = "NAME")]
    pub owner: Option<String>,
    /// The agent command; an argument that is exactly `{prompt}` becomes the prompt, else the
    /// prompt is its stdin.
    #[arg(last = true, required = true, value_name = "AGENT_CMD")]
    pub agent: Vec<std::ffi::OsString>,
}

/// `pre-commit` subcommands.
#[derive(Debug, Subcommand)]
pub enum PreCommitCommand {
    /// Write the git hook where git looks for it.
    Install,
    /// Remove our git hook and restore the one it replaced.
    Uninstall,
    /// Run the hooks (what the git hook calls): pre-commit on the staged files; post-commit
    /// fires commit.after for the new commit.
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
    /// Hook-triggered re-prompts allowed per user turn [default: `max_retries` of
    /// .discobot/hookvisor.yml, else 3].
    #[arg(long, env = "HOOKVISOR_MAX_RETRIES")]
    pub max_retries: Option<u32>,
    /// Install this agent's adapter first, in the user's settings for this workspace (`install
    /// AGENT --user-level --workspace DIR`), so the agent started here runs the hooks; a
    /// container's way to set up its agent. Repeat it, or separate agents with commas.
    /// `git-fsmonitor` sets the user's git config so that the agent's git asks this server what
    /// changed (`install git-fsmonitor --user-level`).
    #[arg(long, value_name = "AGENT", value_parser = target_parser(), value_delimiter = ',', env = "HOOKVISOR_INSTALL")]
    pub install: Vec<InstallTarget>,
    /// The agent command to supervise.
    #[arg(last = true, value_name = "AGENT_CMD")]
    pub agent: Vec<std::ffi::OsString>,
}

/// Options of the agent adapters.
#[derive(Debug, Args)]
pub struct AdapterArgs {
    /// Block the agent with the error as the reason when hookvisor itself fails (tool gates
    /// are denied on a failure without it).
    #[arg(long)]
    pub fail_closed: bool,
    /// Hook-triggered re-prompts allowed per user turn [default: `max_retries` of
    /// .discobot/hookvisor.yml, else 3].
    #[arg(long, env = "HOOKVISOR_MAX_RETRIES")]
    pub max_retries: Option<u32>,
}

/// Options of `adapter`.
#[derive(Debug, Args)]
pub struct AgentAdapterArgs {
    /// The agent whose hook event is on stdin.
    #[arg(value_parser = agent_parser())]
    pub agent: Agent,
    #[command(flatten)]
    pub adapter: AdapterArgs,
}

/// Reads an agent's word (`claude`); `--help` lists each with its settings file.
fn agent_parser() -> impl clap::builder::TypedValueParser<Value = Agent> {
    use clap::builder::TypedValueParser;

    let words = Agent::ALL.map(|agent| {
        let spec = agent.spec();
        let help = format!(
            "{} ({}/{})",
            spec.name, spec.settings.dir, spec.settings.file
        );
        clap::builder::PossibleValue::new(spec.word).help(help)
    });
    clap::builder::PossibleValuesParser::new(words)
        .map(|word: String| Agent::from_word(&word).expect("one of the listed words"))
}

/// What `install` sets up: an agent's adapter, or git's fsmonitor hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstallTarget {
    /// The adapter in this agent's settings.
    Agent(Agent),
    /// `core.fsmonitor` of the workspace's git repository (docs/guide/git.md).
    GitFsmonitor,
}

/// The word of `install git-fsmonitor`.
pub const GIT_FSMONITOR: &str = "git-fsmonitor";

/// Reads an agent's word or `git-fsmonitor`; `--help` lists each.
fn target_parser() -> impl clap::builder::TypedValueParser<Value = InstallTarget> {
    use clap::builder::TypedValueParser;

    let mut words: Vec<clap::builder::PossibleValue> = Agent::ALL
        .map(|agent| {
            let spec = agent.spec();
            let help = format!(
                "{} ({}/{})",
                spec.name, spec.settings.dir, spec.settings.file
            );
            clap::builder::PossibleValue::new(spec.word).help(help)
        })
        .into_iter()
        .collect();
    words.push(
        clap::builder::PossibleValue::new(GIT_FSMONITOR)
            .help("git's core.fsmonitor, answered by `hookvisor serve` (.git/config)"),
    );
    clap::builder::PossibleValuesParser::new(words).map(|word: String| {
        Agent::from_word(&word).map_or(InstallTarget::GitFsmonitor, InstallTarget::Agent)
    })
}

/// Options of `install` and `uninstall`.
#[derive(Debug, Args)]
pub struct InstallArgs {
    /// The agent whose settings to change, or `git-fsmonitor`.
    #[arg(value_parser = target_parser())]
    pub agent: InstallTarget,
    /// Change the user's settings instead of the workspace's.
    #[arg(long)]
    pub user_level: bool,
    /// Install the adapter with --fail-closed (block the agent when hookvisor itself fails).
    #[arg(long)]
    pub fail_closed: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn globals(args: GlobalArgs, env: &[(&str, &str)]) -> Globals {
        args.resolve_with(|name| {
            env.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| OsString::from(v))
        })
    }

    #[test]
    fn the_fire_reader_parses_as_clap_does_or_leaves_the_line_to_clap() {
        let line = |words: &[&str]| -> Vec<OsString> { words.iter().map(OsString::from).collect() };
        let taken: &[&[&str]] = &[
            &["hv", "fire", "tool.before"],
            &["hv", "--workspace", "/w", "fire", "tool.before", "--json"],
            &[
                "hv",
                "--session=s",
                "fire",
                "x",
                "--state-dir",
                "/s",
                "--data",
                "{}",
            ],
            &[
                "hv",
                "fire",
                "--trigger",
                "hook",
                "--workspace=/w",
                "--",
                "-x",
            ],
            &["hv", "fire", "x", "--data", "-", "--trigger=loop"],
            &[
                "hv",
                "fire",
                "x",
                "--data=@f.json",
                "--json",
                "--session",
                "s",
            ],
            &["hv", "fire", "--", "x"],
        ];
        for words in taken {
            let read = parse_fire(&line(words)).map(|cli| format!("{cli:?}"));
            let clap = Cli::try_parse_from(line(words)).unwrap();
            assert_eq!(read, Some(format!("{clap:?}")), "{words:?}");
        }
        // Lines clap refuses, answers otherwise, or that are no plain fire.
        let left: &[&[&str]] = &[
            &["hv", "fire"],
            &["hv", "fire", "x", "y"],
            &["hv", "fire", "x", "--json", "--json"],
            &["hv", "fire", "x", "--data", "a", "--data", "b"],
            &["hv", "fire", "x", "--trigger", "User"],
            &["hv", "fire", "x", "--data", "-x"],
            &["hv", "fire", "x", "--data"],
            &["hv", "fire", "x", "--data="],
            &["hv", "fire", "x", "--json=true"],
            &["hv", "fire", "x", "--help"],
            &["hv", "fire", "x", "-h"],
            &["hv", "fire", "--version"],
            &["hv", "--json", "fire", "x"],
            &["hv", "--data", "{}", "fire", "x"],
            &["hv", "--workspace", "a", "--workspace", "b", "fire", "x"],
            &["hv", "--", "fire", "x"],
            &["hv", "list"],
            &["hv", "-V"],
            &["hv"],
        ];
        for words in left {
            assert!(parse_fire(&line(words)).is_none(), "{words:?}");
        }
    }

    #[test]
    fn options_beat_the_environment_and_empty_variables_count_as_unset() {
        let ws = tempfile::tempdir().unwrap();
        let env = &[
            ("HOME", "/h"),
            ("DISCOBOT_SESSION_ID", ""),
            ("SESSION_ID", "pod"),
            ("HOOKVISOR_STATE_DIR", ""),
        ];
        let args = GlobalArgs {
            workspace: Some(ws.path().into()),
            ..GlobalArgs::default()
        };
        let ctx = globals(args.clone(), env).context().unwrap();
        assert_eq!(ctx.workspace, ws.path().canonicalize().unwrap());
        assert_eq!(ctx.session_id, "pod");
        assert_eq!(ctx.state_dir, PathBuf::from("/h/.discobot/pod/hooks"));
        assert!(globals(args.clone(), env).names_a_session());
        assert!(!globals(args.clone(), &[("HOOKVISOR_STATE_DIR", "")]).names_a_session());

        let args = GlobalArgs {
            session: Some("cli".into()),
            state_dir: Some("/state".into()),
            ..args
        };
        let ctx = globals(args, env).context().unwrap();
        assert_eq!(ctx.session_id, "cli");
        assert_eq!(ctx.state_dir, PathBuf::from("/state"));
    }

    #[test]
    fn hookvisor_session_names_the_session_before_the_sandboxs_variables() {
        let ws = tempfile::tempdir().unwrap();
        let env = &[
            ("HOME", "/h"),
            ("DISCOBOT_SESSION_ID", "pod"),
            ("HOOKVISOR_SESSION", "session-1-abcdef"),
        ];
        let args = GlobalArgs {
            workspace: Some(ws.path().into()),
            ..GlobalArgs::default()
        };
        let g = globals(args.clone(), env);
        assert_eq!(g.context().unwrap().session_id, "session-1-abcdef");
        assert!(g.names_a_session());
        let agent = g.agent_context(None, None, Some("agent".into())).unwrap();
        assert_eq!(agent.session_id, "session-1-abcdef");
        // --session still wins; without either, the sandbox's names the session.
        let cli = GlobalArgs {
            session: Some("cli".into()),
            ..args.clone()
        };
        assert_eq!(globals(cli, env).context().unwrap().session_id, "cli");
        let sandbox = globals(args, &env[..2]);
        assert_eq!(sandbox.context().unwrap().session_id, "pod");
    }

    #[test]
    fn each_command_rule_differs_only_where_it_says() {
        let ws = tempfile::tempdir().unwrap();
        let env = &[
            ("HOME", "/h"),
            ("DISCOBOT_WORKSPACE", ws.path().to_str().unwrap()),
        ];
        let plain = globals(GlobalArgs::default(), env);
        assert!(!plain.any_given());
        assert_eq!(
            plain.workspace().unwrap(),
            ws.path().canonicalize().unwrap()
        );
        assert_eq!(plain.home(), Some(PathBuf::from("/h")));
        let ctx = plain.context_of_session("agent").unwrap();
        assert_eq!(ctx.state_dir, PathBuf::from("/h/.discobot/agent/hooks"));
        // An agent's session counts only when nothing else names one.
        let ctx = plain
            .agent_context(None, None, Some("agent".into()))
            .unwrap();
        assert_eq!(ctx.session_id, "agent");
        let ctx = globals(
            GlobalArgs::default(),
            &[("HOME", "/h"), ("SESSION_ID", "pod")],
        )
        .agent_context(None, Some(ws.path().into()), Some("agent".into()))
        .unwrap();
        assert_eq!(ctx.session_id, "pod");
        assert_eq!(ctx.workspace, ws.path().canonicalize().unwrap());

        let missing = globals(
            GlobalArgs {
                workspace: Some("/nonexistent/dir".into()),
                ..GlobalArgs::default()
            },
            env,
        );
        assert!(missing.any_given());
        assert_eq!(
            missing.workspace().unwrap_err().exit,
            crate::error::Exit::Usage
        );
    }

    /// The hand reader of `adapter` lines agrees with clap wherever it answers.
    #[test]
    fn adapter_lines_read_by_hand_as_clap_reads_them() {
        let lines: &[&[&str]] = &[
            &["hv", "adapter", "claude"],
            &["hv", "adapter", "gemini", "--fail-closed"],
            &[
                "hv",
                "--state-dir",
                "/s",
                "adapter",
                "codex",
                "--session",
                "x",
            ],
            &[
                "hv",
                "adapter",
                "claude",
                "--workspace",
                "/w",
                "--fail-closed",
            ],
        ];
        for line in lines {
            let args: Vec<OsString> = line.iter().map(OsString::from).collect();
            let by_hand = parse_adapter(&args).expect("read by hand");
            assert_eq!(
                format!("{by_hand:?}"),
                format!("{:?}", Cli::parse_from(args)),
                "{line:?}"
            );
        }
        for line in [
            &["hv", "adapter"][..],
            &["hv", "adapter", "claude", "--help"],
            &["hv", "adapter", "claude", "--fail-closed", "--fail-closed"],
            &["hv", "adapter", "vim"],
            &["hv", "fire", "tool.before"],
        ] {
            let args: Vec<OsString> = line.iter().map(OsString::from).collect();
            assert!(parse_adapter(&args).is_none(), "{line:?}");
        }
    }

    #[test]
    fn every_adapter_is_a_subcommand() {
        use clap::CommandFactory;

        let cli = Cli::command();
        for agent in Agent::ALL {
            let command = agent.spec().command;
            assert!(
                cli.find_subcommand(command).is_some(),
                "{agent:?}: no `hookvisor {command}`"
            );
        }
    }
}

/// `hookvisor init-pass`: what hookvisor-init asks of one of its passes.
#[derive(Debug, Args)]
pub struct InitPassArgs {
    /// Which pass: the hooks before CMD starts, or those beside it.
    pub pass: InitPass,
    /// The account of CMD and `run_as: user` hooks, which the init (root) switches to.
    #[arg(long, value_name = "USER[:GROUP]")]
    pub user: Option<String>,
    /// Which run_as: root hooks run: all, owned, none.
    #[arg(long, value_name = "WHICH")]
    pub root_hooks: Option<String>,
    /// Seconds between a stopped hook's TERM and its KILL.
    #[arg(long, value_name = "SECS")]
    pub kill_grace: Option<f64>,
    /// The init is PID 1 of a new container: nothing of the agent's runs yet.
    #[arg(long)]
    pub pid1: bool,
    /// Record the pass's hooks still `running` as failed with this note, and run nothing.
    #[arg(long, value_name = "NOTE")]
    pub record_killed: Option<String>,
}

/// The two passes of hookvisor-init's session hooks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum InitPass {
    /// The blocking hooks, every root hook and the awaited `session.start` hooks.
    BeforeCmd,
    /// The other session hooks and the unawaited `session.start` hooks.
    BesideCmd,
}

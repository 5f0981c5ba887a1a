//! hookvisor-core holds the whole policy of hookvisor, the hook runtime for sandboxed AI coding
//! agents: finding the hooks of a workspace and of other tools' files, running them when an
//! event fires, judging and recording every run in `status.json`, and the reply to the agent.
//! It has no HTTP and no command-line parsing; the binaries are thin shells over it. The code
//! cites its contract as `docs/DESIGN.md` (phase 1) and `docs/EVENTS.md §…` (the event model): both are
//! in the repository, `docs/DESIGN.md` and `docs/EVENTS.md`.
//!
//! # The centre: [`fire::fire`]
//!
//! Every hook runs because an event fired (docs/EVENTS.md §1). [`fire::fire`] takes a [`Firing`] (the
//! [`Event`], its data, who fired it), selects the event's hooks from a [`Discovery`], runs them
//! in order, judges each run, records it and returns the [`Reply`]: the [`Decision`], its
//! reason, the context for the agent. Its steps are written once, in the module doc of
//! [`fire`]. `turn.end` goes through it too: it is handed to the end-of-turn evaluation
//! ([`Evaluator`], `fire::evaluate`), which runs the phase-1 file hooks with the `event:
//! turn.end` hooks (`hookvisor eval` ≡ `hookvisor fire turn.end`). The commands, `serve`, the
//! agent adapters, the init's session runner ([`run_session`]), the git hook
//! ([`run_pre_commit`]) and `loop` ([`agent_loop`]) are fronts over it.
//!
//! ```
//! use std::fs;
//!
//! use hookvisor_core::fire::fire;
//! use hookvisor_core::{Context, Decision, Event, Firing, discover};
//! use serde_json::json;
//!
//! let dir = tempfile::tempdir()?;
//! let ctx = Context {
//!     workspace: dir.path().join("ws"),
//!     session_id: "example".into(),
//!     state_dir: dir.path().join("state"),
//! };
//! fs::create_dir_all(ctx.hooks_dir())?;
//! // A gate: before a shell command, refuse one; exit 2 blocks, with stderr as the reason.
//! fs::write(
//!     ctx.hooks_dir().join("no-rm.yml"),
//!     "---\nevent: tool.before\ntool: bash\nwhen: ${tool_input.command} == 'rm -rf /'\n\
//!      run: echo 'not that one' >&2; exit 2\n---\n",
//! )?;
//! let discovery = discover(&ctx.hooks_dir());
//! assert!(discovery.problems.is_empty(), "{:?}", discovery.problems);
//!
//! // The agent is about to run `rm -rf /` (Claude Code's `Bash` is the canonical `bash`).
//! let mut firing = Firing::new(Event::ToolBefore);
//! firing.data = json!({"tool_name": "Bash", "tool_input": {"command": "rm -rf /"}})
//!     .as_object()
//!     .cloned()
//!     .unwrap_or_default();
//! let reply = fire(&ctx, &discovery, &firing)?;
//! assert_eq!(reply.decision, Decision::Block);
//! assert_eq!(reply.reason.as_deref(), Some("not that one"));
//!
//! // Another command: `when:` is false, the hook does not run, the call goes on.
//! firing.data["tool_input"] = json!({"command": "ls"});
//! let reply = fire(&ctx, &discovery, &firing)?;
//! assert_eq!(reply.decision, Decision::Allow);
//! assert!(reply.results.is_empty());
//!
//! // The end of a turn fires the same way: a phase-1 file hook whose file changed re-prompts.
//! let check = ctx.hooks_dir().join("check-notes.sh");
//! fs::write(
//!     &check,
//!     "#!/bin/sh\n#---\n# type: file\n# pattern: '*.txt'\n#---\n\
//!      grep -q TODO $DISCOBOT_CHANGED_FILES && { echo 'a TODO is left'; exit 1; }\nexit 0\n",
//! )?;
//! # use std::os::unix::fs::PermissionsExt;
//! fs::set_permissions(&check, fs::Permissions::from_mode(0o755))?;
//! fs::write(ctx.workspace.join("notes.txt"), "TODO: finish\n")?;
//! let discovery = discover(&ctx.hooks_dir());
//! let reply = fire(&ctx, &discovery, &Firing::new(Event::TurnEnd))?;
//! assert_eq!(reply.decision, Decision::Block);
//! assert!(reply.reason.unwrap().contains("a TODO is left"));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! # The map
//!
//! Each module uses only modules listed before it: there is no import cycle among the modules
//! of any crate (`scripts/module-cycles.py` checks it). The root re-exports what the binaries
//! use most; the rest is reached through its module.
//!
//! - **Foundations.** [`sys`]: the raw system calls, the only `unsafe` of the core.
//!   [`procfs`]: the one reader of `/proc`. [`watch`]: every inotify watch.
//!   [`account`]: the users and groups `--user` and `run_as` name ([`Credentials`]).
//!   [`user_fs`]: file system work done with the run user's credentials. [`leftovers`]: what a
//!   hook leaves running, found and killed. [`timestamp`]: RFC 3339 times as status.json writes
//!   them. [`state`]: the name of every file in the state dir, and the one atomic writer (with
//!   [`untrusted`], opening files of a dir the agent can write, and `replace_order`).
//!   [`git`]: running git with one environment and one reading of its failures. [`pattern`]: the
//!   glob language of `pattern:`. [`frontmatter`]: finding and reading a file's front matter.
//!   [`template`]: `${name}` in `run:` and `argv:`, injection-safe. [`when`]: the condition
//!   language. [`payload`]: the event JSON and variables a hook gets. [`produced`]: values an
//!   action hands to the later hooks of its firing.
//! - **The hook model**, plain data. [`config`]: `.discobot/hookvisor.yml` ([`Config`]), and
//!   the sources of hooks. [`context`]: the workspace, session id and state dir every command
//!   works on ([`Context`]). [`policy`]: `phase`, `block_on`, `on_failure`, `on_timeout`,
//!   `reason_from`. The built-in actions' specs: [`git_action`] (`git-commit`, `git-push`),
//!   [`spawn`], [`webhook`] (with [`secrets`], the names a webhook may resolve). [`event`]: the
//!   events, what a hook binds to and does ([`Event`], [`HookKind`]). [`agents`]: the agents
//!   hookvisor plugs into, one row of protocol differences each. [`hook`]: a loaded hook
//!   and a file that does not load ([`Hook`], [`Problem`]).
//! - **Reading hooks.** [`import`]: other tools' hook files read in place (iteratr, AutoAgent,
//!   nyzhi, agent-pipelines); [`watch`] watches them for a server.
//!   [`discover`](mod@discover): the hooks of `.discobot/hooks/`, the global hooks and the
//!   imported ones, and the files that do not load ([`Discovery`]).
//! - **Running and recording.** [`message`]: the re-prompt text of a failing hook.
//!   [`decision`]: one run judged, verdicts combined, the [`Reply`]. [`seal`]: a root hook's
//!   program sealed in a memory file. [`exec`]: running one command: environment, credentials,
//!   timeout, process group, log.
//!   [`status`]: `status.json` ([`StatusStore`]). [`context_buffer`]: piped output for the next
//!   turn. [`turns`]: who started each turn, for the loop guard ([`TurnLog`], [`Trigger`]).
//!   [`changes`], [`watch::ChangeWatcher`]: a workspace's dirty set, kept warm by inotify for a
//!   server, and its journal of changed paths for git's fsmonitor hook ([`watch::ChangeFeed`]).
//!   [`firing`]: one event to fire ([`Firing`]). [`runner`]: what the pipeline asks of
//!   the runners of the built-in actions, which live in the crate `hookvisor-actions`.
//! - **The pipeline.** [`fire`]: an event's hooks selected, run, judged, recorded, and the
//!   reply; `fire::evaluate` is the end of a turn.
//! - **Fronts in the core.** [`session`]: the session hooks run once when the container
//!   starts, then `session.start`. [`precommit`]: the generated git pre-commit hook and its run,
//!   `commit.before` included. [`agent_loop`]: `hookvisor loop`, a headless agent driven
//!   iteration by iteration.

#![deny(missing_docs)]

pub mod account;
/// `hookvisor loop`: a headless agent driven iteration by iteration (docs/EVENTS.md §3.2).
pub mod agent_loop;
pub mod agents;
pub mod changes;
pub mod config;
pub mod context;
/// The context buffer: piped hook output waiting for the next turn (docs/EVENTS.md §1.6).
pub mod context_buffer;
/// The blocking protocol: one run judged, verdicts combined, the reply (docs/EVENTS.md §1.4, §1.5, §5).
pub mod decision;
pub mod discover;
/// The events hooks bind to and what a hook declares about its run (docs/EVENTS.md §1.1–§1.3).
pub mod event;
pub mod exec;
/// The event dispatcher: an event's hooks selected, run, judged, and the reply (docs/EVENTS.md §1.4).
pub mod fire;
pub mod firing;
pub mod frontmatter;
pub mod git;
pub mod git_action;
pub mod hook;
/// Other tools' hook files read in place: iteratr, AutoAgent, nyzhi (docs/EVENTS.md §2.2).
pub mod import;
pub mod leftovers;
pub mod message;
pub mod pattern;
/// The event JSON and environment a hook of the event model receives (docs/EVENTS.md §4.1).
pub mod payload;
pub mod policy;
pub mod precommit;
pub mod procfs;
/// Values an action hands to the later hooks of its firing (docs/EVENTS.md §4.1).
pub mod produced;
mod replace_order;
pub mod runner;
pub mod seal;
pub mod secrets;
pub mod session;
pub mod spawn;
pub mod state;
pub mod status;
pub mod sys;
/// `${name}` template variables in `run:` and `argv:`, injection-safe (docs/EVENTS.md §4.1).
pub mod template;
pub mod timestamp;
pub mod turns;
pub mod untrusted;
pub mod user_fs;
pub mod watch;
pub mod webhook;
/// The `when:` condition language of hooks: parsed once, evaluated over typed variables.
pub mod when;

pub use account::Credentials;
pub use config::Config;
pub use context::{Context, ContextError, ContextOverrides, enclosing_workspace};
pub use decision::{Decision, Reply};
pub use discover::{Discovery, discover, discover_workspace};
pub use event::{Event, HookKind};
pub use exec::{CancelToken, RunOutcome};
pub use fire::evaluate::{Action, EvalError, EvalOptions, EvalReport, Evaluator};
pub use firing::Firing;
pub use hook::{Hook, Problem, ProblemKind};
pub use precommit::run_pre_commit;
pub use session::{fire_session_start, run_session};
pub use status::{RunResult, Status, StatusError, StatusStore};
pub use turns::{Trigger, TurnLog};

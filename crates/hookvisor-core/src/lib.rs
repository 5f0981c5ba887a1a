//! hookvisor-core holds the whole policy of hookvisor, the hook runtime for sandboxed AI coding
//! agents: finding the hooks of a workspace, reading their front matter, running them, telling
//! what changed, evaluating file hooks at the end of a turn, and recording every run in
//! `status.json`. It has no HTTP and no command-line parsing; the binaries are thin shells over it.
//!
//! # Modules
//!
//! - `config`: `.discobot/hookvisor.yml`, the workspace's settings of hookvisor ([`Config`]).
//! - `context`: the workspace, session id and state dir every command works on ([`Context`]).
//! - `discover`: the hooks of `.discobot/hooks/` and the global hooks, and the files that do not
//!   load ([`discover_workspace`], [`discover()`] for one directory).
//! - `frontmatter`: finding a script's front matter and reading its fields.
//! - `hook`: a loaded hook, its kind and run-as user ([`Hook`], [`Problem`]).
//! - `pattern`: the glob language of a hook's `pattern` ([`Pattern`]).
//! - `exec`: running one hook: environment, credentials, timeout, process group, log.
//! - `seal`: a root hook's program sealed in a memory file before it runs.
//! - `leftovers`: what a hook leaves running, found and killed.
//! - `sys`: the raw system calls, the only `unsafe` of the core.
//! - `account`: the users and groups `--user` and `run_as` name.
//! - `user_fs`: file system work done with the run user's credentials.
//! - `git`: running git with one environment and one reading of its failures.
//! - `git_action`: the built-in `git-commit` and `git-push` actions ([`GitCommit`], [`GitPush`]).
//! - `spawn`: the `spawn` action: a child loop or program in its own state dir ([`Spawn`]).
//! - `webhook`: the `webhook` action: an HTTP request from templates, retried under one
//!   delivery id ([`Webhook`]).
//! - `secrets`: `~/.config/hookvisor/secrets.env`: values for webhooks only, names that spawn
//!   keeps from its children ([`SecretsError`]).
//! - `changes`: a workspace's dirty set and when each file changed ([`scan`]).
//! - `change_watch`: the dirty set kept warm by inotify for a server ([`ChangeWatcher`]).
//! - `file_watch`: other tools' hook files watched by a server, existing or not ([`FileWatch`]).
//! - `evaluate`: the end-of-turn evaluation ([`Evaluator`]): the file hooks and the
//!   `event: turn.end` hooks, one evaluation for `eval` and `fire turn.end`.
//! - `message`: the re-prompt text of a failing hook ([`Failure`]).
//! - `status`: the `status.json` store of every run ([`StatusStore`]).
//! - `session`: the session hooks run once when the container starts ([`run_session`]), and
//!   the `session.start` event hooks after them ([`fire_session_start`]).
//! - `precommit`: the generated git pre-commit hook and its run ([`run_pre_commit`]), the
//!   `commit.before` event hooks included.
//! - `turns`: who started an agent's turn, behind the loop guard's trigger ([`TurnLog`]).
//! - `state`: the name of every file in the state dir, and the one atomic writer ([`StateDir`]).
//! - `timestamp`: RFC 3339 times as status.json writes them ([`rfc3339`]).
//!
//! The event model of EVENTS.md is built on top, as public modules: [`event`] (the events
//! and what a hook declares), [`when`] (conditions), [`template`] (`${name}` in `run:` and
//! `argv:`), [`decision`] (the blocking protocol), [`payload`] (the event JSON and variables a
//! hook gets), [`produced`] (values an action hands to the later hooks of its firing),
//! [`context_buffer`] (piped output for the next turn) and [`fire`] (running an
//! event's hooks: `hookvisor fire`). [`agent_loop`] drives a headless agent with those events
//! (`hookvisor loop`).
//! [`callback`] is the listener an awaited webhook waits on (its module doc says the rules).
//!
//! # Example
//!
//! One file hook, a changed file, the end of a turn:
//!
//! ```
//! use std::fs;
//! use std::os::unix::fs::PermissionsExt;
//!
//! use hookvisor_core::{Action, Context, EvalOptions, Evaluator, discover};
//!
//! let dir = tempfile::tempdir()?;
//! let ctx = Context {
//!     workspace: dir.path().join("ws"),
//!     session_id: "example".into(),
//!     state_dir: dir.path().join("state"),
//! };
//! fs::create_dir_all(ctx.hooks_dir())?;
//! let script = ctx.hooks_dir().join("check-notes.sh");
//! fs::write(
//!     &script,
//!     "#!/bin/sh\n#---\n# name: Check notes\n# type: file\n# pattern: '*.txt'\n#---\n\
//!      grep -q TODO $DISCOBOT_CHANGED_FILES && { echo 'a TODO is left'; exit 1; }\nexit 0\n",
//! )?;
//! fs::set_permissions(&script, fs::Permissions::from_mode(0o755))?;
//! fs::write(ctx.workspace.join("notes.txt"), "TODO: finish\n")?;
//!
//! let discovery = discover(&ctx.hooks_dir());
//! assert!(discovery.problems.is_empty(), "{:?}", discovery.problems);
//! let mut evaluator = Evaluator::new(ctx.clone()).with_discovery(discovery);
//! let report = evaluator.end_turn(&EvalOptions::default())?;
//!
//! assert_eq!(report.action, Action::Reprompt);
//! assert_eq!(report.results[0].hook_id, "check-notes");
//! assert_eq!(report.results[0].files, [std::path::Path::new("notes.txt")]);
//! assert_eq!(report.pending, ["check-notes"]);
//! assert!(report.message.unwrap().contains("a TODO is left"));
//!
//! // The model fixes the file: the next turn passes and nothing stays pending.
//! fs::write(ctx.workspace.join("notes.txt"), "done\n")?;
//! let report = evaluator.end_turn(&EvalOptions::default())?;
//! assert_eq!(report.action, Action::Pass);
//! assert!(report.pending.is_empty());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

#![deny(missing_docs)]

mod account;
/// `hookvisor loop`: a headless agent driven iteration by iteration (EVENTS.md §3.2).
pub mod agent_loop;
// Documented by its own module doc: an outer line here would make rustdoc resolve the module
// doc's links from the crate root.
pub mod callback;
mod change_watch;
mod changes;
mod config;
mod context;
/// The context buffer: piped hook output waiting for the next turn (EVENTS.md §1.6).
pub mod context_buffer;
/// The blocking protocol: one run judged, verdicts combined, the reply (EVENTS.md §1.4, §1.5, §5).
pub mod decision;
mod discover;
/// The events hooks bind to and what a hook declares about its run (EVENTS.md §1.1–§1.3).
pub mod event;
mod exec;
mod file_watch;
/// The event dispatcher: an event's hooks selected, run, judged, and the reply (EVENTS.md §1.4).
pub mod fire;
pub mod firing;
mod frontmatter;
mod git;
mod git_action;
mod hook;
/// Other tools' hook files read in place: iteratr, AutoAgent, nyzhi (EVENTS.md §2.2).
pub mod import;
mod leftovers;
mod message;
mod pattern;
/// The event JSON and environment a hook of the event model receives (EVENTS.md §4.1).
pub mod payload;
pub mod policy;
mod precommit;
/// Values an action hands to the later hooks of its firing (EVENTS.md §4.1).
pub mod produced;
mod replace_order;
mod runner;
mod seal;
mod secrets;
mod session;
mod spawn;
mod state;
mod status;
pub mod sys;
/// `${name}` template variables in `run:` and `argv:`, injection-safe (EVENTS.md §4.1).
pub mod template;
mod timestamp;
mod turns;
mod untrusted;
mod user_fs;
mod webhook;
/// The `when:` condition language of hooks: parsed once, evaluated over typed variables.
pub mod when;

pub use account::{AccountError, Credentials};
pub use change_watch::{ChangeWatcher, MAX_TOUCHED, ScanKind};
pub use changes::{
    ChangeScan, ChangesError, DirtyFile, FileState, ScanOptions, Timestamp, scan, scan_with,
};
pub use config::{
    CONFIG_FILE, Callback, Config, ConfigError, DEFAULT_MAX_RETRIES, Source, SourceUse, Sources,
};
pub use context::{Context, ContextError, ContextOverrides, enclosing_workspace};
pub use discover::has_commit_hooks;
pub use discover::{
    Discovery, GLOBAL_ID_PREFIX, Places, discover, discover_workspace, discover_workspace_in,
    discover_workspace_owned, discover_workspace_with, global_hooks_dir,
};
pub use event::HookKind;
pub use exec::{CancelToken, Capture, Captured, ExecError, RunOptions, RunOutcome, run_hook};
pub use file_watch::{FileWatch, FileWatchError, WatchedFile};
pub use fire::evaluate::{Action, EvalError, EvalOptions, EvalReport, Evaluator, HookResult};
pub use frontmatter::{FrontMatterError, parse as parse_front_matter};
pub use git::MANAGED_MARKER;
pub use git::{Git, GitError, RunningGit};
pub use git_action::{AddMode, GitCommit, GitFieldError, GitPush, KEPT_VARIABLES, RefError};
pub use hook::{Binds, Hook, Origin, Problem, ProblemKind, RunAs, hook_id};
pub use leftovers::{become_subreaper, kill_children};
pub use message::{Failure, sanitize};
pub use pattern::{Pattern, PatternError};
pub use policy::DEFAULT_RETRIES;
pub use precommit::{
    Ensured, GitHook, Installed, PreCommitError, PreCommitEvent, PreCommitReport, PreCommitSkip,
    SKIP_VARIABLE, Uninstalled, ensure_pre_commit, git_hooks_dir, repository_top, run_pre_commit,
    staged_files, uninstall_pre_commit,
};
pub use runner::spawn::{
    ChildInfo, ChildrenError, DetachedInfo, child_status, is_child_name, list_children,
};
pub use seal::{RootHooks, SealError, SealedScript};
pub use secrets::SecretsError;
pub use session::{
    Attempt, Backoff, RootImages, STOPPED_NOTE, SessionError, SessionHook, SessionOptions,
    SessionPlan, SessionRun, credentials_for, fail_interrupted, fire_session_start,
    prepare_state_dir, run_session,
};
pub use spawn::{
    DEFAULT_SPAWN_TIMEOUT, MAX_SPAWN_DEPTH, PipelineError, PipelineSpec, Spawn, SpawnFieldError,
    SpawnTarget, SpawnWorkspace,
};
pub use state::{Durability, StateDir, write_atomic};
pub use status::{
    CallbackState, CallbackWait, EntryType, HookStatus, RunResult, Status, StatusError,
    StatusStore, open_state_file,
};
pub use timestamp::{parse_rfc3339, rfc3339};
pub use turns::{
    Answer, MAX_SESSIONS, MAX_TURN_LOG_BYTES, Prompt, Stop, Trigger, TurnLog, TurnLogError,
};
pub use user_fs::{ActingAs, act_as, agent_running, writable_by_others};
pub use webhook::{
    DEFAULT_CALLBACK_TIMEOUT, DEFAULT_WEBHOOK_TIMEOUT, Method, UrlPolicyError, UrlTemplate,
    Webhook, WebhookFieldError,
};

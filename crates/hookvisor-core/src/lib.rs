//! hookvisor-core holds the whole policy of hookvisor, the hook runtime for sandboxed AI coding
//! agents: finding the hooks of a workspace, reading their front matter, running them, telling
//! what changed, evaluating file hooks at the end of a turn, and recording every run in
//! `status.json`. It has no HTTP and no command-line parsing; the binaries are thin shells over it.

#![deny(missing_docs)]

mod account;
mod change_watch;
mod changes;
mod context;
mod discover;
mod evaluate;
mod exec;
mod frontmatter;
mod git;
mod hook;
mod leftovers;
mod message;
mod pattern;
mod precommit;
mod seal;
mod session;
mod status;
pub mod sys;
mod timestamp;
mod turns;
mod user_fs;

pub use account::{AccountError, Credentials};
pub use change_watch::{ChangeWatcher, MAX_TOUCHED, ScanKind};
pub use changes::{
    ChangeScan, ChangesError, DirtyFile, FileState, ScanOptions, Timestamp, rescan, scan, scan_at,
    scan_with,
};
pub use context::{Context, ContextError, ContextOverrides};
pub use discover::{Discovery, discover, hook_id};
pub use evaluate::{
    Action, EvalError, EvalLock, EvalOptions, EvalReport, HookResult, Trigger, evaluate,
    evaluate_scan, evaluate_watched, evaluate_with, run_now, scan_workspace, watch_workspace,
};
pub use exec::{CancelToken, ExecError, Invocation, RunOptions, RunOutcome, run_command, run_hook};
pub use frontmatter::{FrontMatterError, parse as parse_front_matter};
pub use git::{Git, GitError, RunningGit};
pub use hook::{Hook, HookKind, Problem, RunAs};
pub use leftovers::become_subreaper;
pub use message::{Failure, sanitize};
pub use pattern::{Pattern, PatternError};
pub use precommit::{
    Ensured, GitHook, Installed, MANAGED_MARKER, PreCommitError, PreCommitEvent, PreCommitReport,
    PreCommitSkip, SKIP_VARIABLE, Uninstalled, ensure_pre_commit, git_hooks_dir, repository_top,
    run_pre_commit, staged_files, uninstall_pre_commit,
};
pub use seal::{RootHooks, SealError, SealedScript};
pub use session::{
    Attempt, Backoff, DEFAULT_RETRIES, NOTE_FIELD, RootImages, STOPPED_NOTE, SessionError,
    SessionHook, SessionOptions, SessionPlan, SessionRun, credentials_for, fail_interrupted,
    prepare_state_dir, run_session,
};
pub use status::{HookStatus, RunResult, Status, StatusError, StatusStore, write_atomic};
pub use timestamp::parse_rfc3339;
pub use turns::{Answer, MAX_SESSIONS, MAX_TURN_LOG_BYTES, Prompt, Stop, TurnLog, TurnLogError};
pub use user_fs::{ActingAs, act_as, agent_running};

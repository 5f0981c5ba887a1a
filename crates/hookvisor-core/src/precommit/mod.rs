//! Pre-commit hooks: the generated git hook, its installation where git looks, and the run that
//! git starts inside `git commit`.
//!
//! The rules, written once here:
//!
//! 1. The git hook goes where git looks for it: `git rev-parse --git-path hooks` run in the
//!    workspace, so `core.hooksPath`, linked worktrees (which share the common hooks dir) and
//!    submodules (`.git/modules/<name>/hooks`) all work.
//! 2. Ours is a tiny `#!/bin/sh` script carrying [`MANAGED_MARKER`]. A foreign `pre-commit` found
//!    at install is kept as `pre-commit.original` and run first; its failure stops the commit.
//!    Install overwrites only ours; uninstall removes only ours and renames the original back
//!    (the same inode, so its bytes and mode are exactly what they were).
//! 3. The script records the absolute path of `hookvisor` and the state dir and session given at
//!    install; `HOOKVISOR_STATE_DIR` and `DISCOBOT_SESSION_ID` set at commit time win. When the
//!    binary is gone it says so and how to reinstall, and fails.
//! 4. `hookvisor pre-commit run` reads the hooks at commit time from the top level of the
//!    repository git runs it in (a linked worktree uses its own `.discobot/hooks` and index), so
//!    hook files can be added, edited or deleted without re-installing.
//! 5. It runs, in file-name order, each pre-commit hook whose pattern matches a staged file
//!    (added, copied, modified or renamed; a rename gives the new path, deletions are left out)
//!    with those files, or every hook without a pattern with all staged files; it stops at the
//!    first failure, whose exit code becomes the commit's. Unstaged work is never touched.
//! 6. `HOOKVISOR_SKIP=1` skips every hook; `HOOKVISOR_SKIP=id1,id2` skips those hooks.
//! 7. Hooks of the event model bound to `commit.before` (docs/EVENTS.md §2.1: `type: pre-commit` ≡
//!    `event: commit.before`; a declarative `.yml`, or a script with `when`, `block_on`, …) run
//!    after the phase-1 hooks passed, through the event dispatcher, with the staged files as the
//!    event's `files` (so `pattern:` selects on them): a block or an abort refuses the commit
//!    with its reason, as the first failing phase-1 hook does (an `await: false` one is a
//!    notice, run detached: the commit does not wait for it). Their presence alone installs the
//!    git hook. A gate fails closed: a hook file that does not load and names `event:
//!    commit.before` refuses the commit (the dispatcher's step 1), and installs the git hook as
//!    a loaded gate does; a broken phase-1 script only warns, as in phase 1.
//! 8. Hooks bound to `commit.after` (AutoAgent's `PostGitCommit`) fire from a second generated
//!    git hook, `post-commit`, installed, chained and removed by rules 1 to 3 like the first,
//!    so every commit in the workspace fires them, the agent's own and the `git-commit`
//!    action's. `${commit}` is the new commit's id, `files` the paths it changed. It is a
//!    notice: the commit is made, and nothing the hooks do fails it; an `await: false` one
//!    runs detached, so `git commit` does not wait for it. Their presence alone installs the
//!    post-commit hook.
//!
//! Each hook runs through the event dispatcher's run/judge/record step ([`crate::fire`]), a
//! phase-1 script with phase 1's semantics (its exit code, DISCOBOT_* variables, its output as
//! it came), without the "running" record elsewhere written first: a commit waits for its
//! hooks anyway.
//!
//! This file holds the errors and the run inside `git commit` (rules 4 to 6); `git_hook` writes
//! and removes the scripts git starts (rules 1 to 3), `staged` asks git what the commit holds,
//! and `post_commit` fires `commit.after` (rule 8).
//!
//! [`MANAGED_MARKER`]: crate::git::MANAGED_MARKER

mod git_hook;
mod post_commit;
mod staged;

use std::io;
use std::path::{Path, PathBuf};

pub use self::git_hook::{
    Ensured, GitHook, GitHookKind, Installed, Uninstalled, ensure_git_hooks, git_hooks_dir,
    uninstall_git_hook,
};
pub use self::post_commit::run_post_commit;
use self::staged::{STAGED_ARGS, staged_from};
pub use self::staged::{repository_top, staged_files};
use crate::context::Context;
use crate::decision::{Decision, Reply};
use crate::discover::{Discovery, discover_workspace};
use crate::event::Event;
use crate::event::HookKind;
use crate::exec::{CancelToken, ExecError, RunOutcome};
use crate::fire::{FireError, fire, run_judged};
use crate::firing::Firing;
use crate::git::{Git, GitError, RunningGit};
use crate::hook::{Binds, Hook, Problem};
use crate::status::{StatusError, StatusStore};

/// The variable that skips hooks at commit time (rule 6).
pub const SKIP_VARIABLE: &str = "HOOKVISOR_SKIP";

/// Why a pre-commit operation failed.
#[derive(Debug, thiserror::Error)]
pub enum PreCommitError {
    /// `git` could not be started.
    #[error("cannot run git: {0}; install git or put it on PATH")]
    GitMissing(#[source] io::Error),
    /// The directory is not inside a git repository.
    #[error(
        "{} is not in a git repository; run `git init` there or pass --workspace",
        .0.display()
    )]
    NotARepository(PathBuf),
    /// Root does not run git in a repository another account can change (`crate::git` rule 4).
    #[error(transparent)]
    Refused(GitError),
    /// A git command failed.
    #[error("`git {args}` failed in {}: {message}", dir.display())]
    Git {
        /// Where it ran.
        dir: PathBuf,
        /// The arguments, for the message.
        args: String,
        /// What git printed on stderr (first line).
        message: String,
    },
    /// A file of the hooks directory could not be read or written.
    #[error(
        "cannot {action} {}: {source}; check the permissions of the directory",
        path.display()
    )]
    Io {
        /// The file or directory at fault.
        path: PathBuf,
        /// What was being done ("write", "rename", ...).
        action: &'static str,
        /// What the file system said.
        source: io::Error,
    },
    /// Both a foreign `pre-commit` and a `pre-commit.original` exist: installing would lose one.
    #[error(
        "{} is not hookvisor's and {} already exists; merge or move one of them aside, then \
         install again",
        hook.display(),
        original.display()
    )]
    OriginalExists {
        /// The foreign hook.
        hook: PathBuf,
        /// The original already kept.
        original: PathBuf,
    },
    /// The path of the running `hookvisor` binary is unknown.
    #[error("cannot find the path of the hookvisor binary: {0}; run it by its full path")]
    CurrentExe(#[source] io::Error),
    /// A hook could not be run.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// Its run could not be recorded.
    #[error(transparent)]
    Status(#[from] StatusError),
    /// The `commit.before` event hooks could not be run to a decision.
    #[error("commit.before hooks: {0}")]
    Event(#[from] FireError),
}

fn io_error(path: &Path, action: &'static str) -> impl FnOnce(io::Error) -> PreCommitError {
    let path = path.to_owned();
    move |source| PreCommitError::Io {
        path,
        action,
        source,
    }
}

/// Which hooks `HOOKVISOR_SKIP` turns off (rule 6).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum PreCommitSkip {
    /// Run every hook. The default.
    #[default]
    Nothing,
    /// `HOOKVISOR_SKIP=1`: run none.
    All,
    /// `HOOKVISOR_SKIP=id1,id2`: run all but these.
    Hooks(Vec<String>),
}

impl PreCommitSkip {
    /// Reads a value of `HOOKVISOR_SKIP`: empty is nothing, `1`, `true` or `all` is everything,
    /// anything else a comma-separated list of hook ids.
    pub fn parse(value: &str) -> PreCommitSkip {
        let value = value.trim();
        if value.is_empty() {
            return PreCommitSkip::Nothing;
        }
        if ["1", "true", "all"]
            .iter()
            .any(|v| value.eq_ignore_ascii_case(v))
        {
            return PreCommitSkip::All;
        }
        PreCommitSkip::Hooks(
            value
                .split(',')
                .map(str::trim)
                .filter(|id| !id.is_empty())
                .map(str::to_owned)
                .collect(),
        )
    }

    /// Reads `HOOKVISOR_SKIP` from the environment.
    pub fn from_env() -> PreCommitSkip {
        std::env::var(SKIP_VARIABLE)
            .map(|v| PreCommitSkip::parse(&v))
            .unwrap_or_default()
    }

    fn skips(&self, hook: &Hook) -> bool {
        match self {
            PreCommitSkip::Nothing => false,
            PreCommitSkip::All => true,
            PreCommitSkip::Hooks(ids) => ids.contains(&hook.id),
        }
    }
}

/// What happens during [`run_pre_commit`], in order, for the caller to report.
#[derive(Debug)]
pub enum PreCommitEvent<'a> {
    /// A hook file that may be a pre-commit hook will not run; it does not block the commit.
    Problem(&'a Problem),
    /// `HOOKVISOR_SKIP=1`: nothing runs.
    SkippedAll,
    /// This hook is named in `HOOKVISOR_SKIP`.
    Skipped(&'a Hook),
    /// `HOOKVISOR_SKIP` names an id that is no pre-commit hook (a typo would skip nothing).
    UnknownSkip(&'a str),
    /// The hook is about to run on these files.
    Started(&'a Hook, &'a [PathBuf]),
    /// The hook finished.
    Finished(&'a Hook, &'a [PathBuf], &'a RunOutcome),
    /// The `commit.before` event hooks ran (rule 7); a block or an abort refuses the commit.
    Decided(&'a Reply),
}

/// The result of [`run_pre_commit`].
#[derive(Debug, Default)]
pub struct PreCommitReport {
    /// The ids of the hooks that ran, with their exit codes, in order.
    pub runs: Vec<(String, i32)>,
    /// The id of the hook that failed, if one did (the last of `runs`).
    pub failed: Option<String>,
    /// The reply of the `commit.before` event hooks, when there were some to run.
    pub decided: Option<Reply>,
}

impl PreCommitReport {
    /// The exit status for git: 0 when nothing failed, else the failing hook's code
    /// (1 when that code does not fit an exit status).
    pub fn exit_code(&self) -> i32 {
        match (&self.failed, self.runs.last()) {
            (Some(_), Some((_, code))) if (1..=255).contains(code) => *code,
            (Some(_), _) => 1,
            (None, _) => 0,
        }
    }
}

/// Runs the pre-commit hooks of `ctx.workspace` on the staged files (rules 4 to 6), recording
/// each run in `status.json` and its log, and telling `on_event` what happens.
///
/// `ctx.workspace` must be the top level of the work tree (see [`repository_top`]).
pub fn run_pre_commit(
    ctx: &Context,
    skip: &PreCommitSkip,
    mut on_event: impl FnMut(PreCommitEvent<'_>),
) -> Result<PreCommitReport, PreCommitError> {
    let mut report = PreCommitReport::default();
    if *skip == PreCommitSkip::All {
        on_event(PreCommitEvent::SkippedAll);
        return Ok(report);
    }
    // git works out the staged files while the hooks are read: the commit waits for both, and
    // the git process is the larger part of that wait. Its errors matter only if a hook runs.
    let staged = Git::default().spawn(&ctx.workspace, &STAGED_ARGS);
    let discovery = discover_workspace(ctx);
    for problem in discovery
        .problems
        .iter()
        .filter(|p| p.may_bind(&Event::CommitBefore))
    {
        on_event(PreCommitEvent::Problem(problem));
    }
    let hooks: Vec<&Hook> = discovery.of_kind(HookKind::PreCommit).collect();
    let gates: Vec<&Hook> = discovery
        .event_hooks()
        .filter(|h| h.spec.event == Event::CommitBefore)
        .collect();
    if let PreCommitSkip::Hooks(ids) = skip {
        let known = |id: &str| hooks.iter().chain(&gates).any(|h| h.id == id);
        for id in ids.iter().filter(|id| !known(id)) {
            on_event(PreCommitEvent::UnknownSkip(id));
        }
    }
    let mut to_run = Vec::new();
    for hook in hooks {
        if skip.skips(hook) {
            on_event(PreCommitEvent::Skipped(hook));
        } else {
            to_run.push(hook);
        }
    }
    // A gate fails closed (crate::fire, step 1) on a file that does not load and names
    // `event: commit.before`; a broken phase-1 script (`type: pre-commit`, or a file nothing
    // says is a gate) warns above, as in phase 1.
    let mut gates_to_run = Discovery {
        problems: (discovery.problems.iter())
            .filter(|p| p.binds == Binds::Event(Event::CommitBefore))
            .cloned()
            .collect(),
        ..Discovery::default()
    };
    for hook in gates {
        if skip.skips(hook) {
            on_event(PreCommitEvent::Skipped(hook));
        } else {
            gates_to_run.hooks.push(hook.clone());
        }
    }
    if to_run.is_empty() && !gates_to_run.fires(&Event::CommitBefore) {
        if let Ok(git) = staged {
            git.abandon();
        }
        return Ok(report);
    }

    let staged = staged
        .and_then(RunningGit::wait)
        .map_err(|e| from_git(&ctx.workspace, &STAGED_ARGS, e));
    let staged = staged_from(&ctx.workspace, staged)?;
    let store = StatusStore::for_context(ctx);
    for hook in to_run {
        let files: Vec<PathBuf> = staged.iter().filter(|f| hook.matches(f)).cloned().collect();
        if hook.pattern.is_some() && files.is_empty() {
            continue;
        }
        on_event(PreCommitEvent::Started(hook, &files));
        // Through the dispatcher's run/judge/record step, as every runner runs its hooks; a
        // phase-1 script keeps phase 1's semantics there (crate::fire, step 1).
        let mut firing = Firing::new(Event::CommitBefore);
        firing.files = Some(files.clone());
        let payload = crate::fire::payload(ctx, &firing, None);
        let done = run_judged(
            ctx,
            hook,
            &firing,
            &payload,
            &store,
            &CancelToken::default(),
        )?;
        let Some(outcome) = done.and_then(|done| done.phase1) else {
            continue;
        };
        on_event(PreCommitEvent::Finished(hook, &files, &outcome));
        report.runs.push((hook.id.clone(), outcome.exit_code));
        if !outcome.success() {
            report.failed = Some(hook.id.clone());
            return Ok(report);
        }
    }
    if !gates_to_run.fires(&Event::CommitBefore) {
        return Ok(report);
    }
    let mut firing = Firing::new(Event::CommitBefore);
    firing.files = Some(staged);
    // `git commit` waits for this process: an unawaited hook goes on without it (docs/EVENTS.md §1.3).
    firing.detach_unawaited = true;
    let reply = fire(ctx, &gates_to_run, &firing)?;
    on_event(PreCommitEvent::Decided(&reply));
    if reply.decision != Decision::Allow {
        let decider = reply.decider().unwrap_or("commit.before").to_owned();
        report.runs.push((decider.clone(), 1));
        report.failed = Some(decider);
    }
    report.decided = Some(reply);
    Ok(report)
}

/// Runs git in `dir` and returns its stdout; a failure carries the first line of its stderr.
fn git(dir: &Path, args: &[&str]) -> Result<Vec<u8>, PreCommitError> {
    Git::default()
        .output(dir, args)
        .map_err(|e| from_git(dir, args, e))
}

/// Our error for what `git args` in `dir` gave.
fn from_git(dir: &Path, args: &[&str], error: GitError) -> PreCommitError {
    match error {
        GitError::Missing { source, .. }
            if source.kind() == io::ErrorKind::NotFound && !dir.is_dir() =>
        {
            PreCommitError::Io {
                path: dir.to_owned(),
                action: "enter",
                source,
            }
        }
        GitError::Missing { source, .. } => PreCommitError::GitMissing(source),
        err @ (GitError::Exposed { .. } | GitError::Unchecked { .. }) => {
            PreCommitError::Refused(err)
        }
        GitError::NotARepository { .. } => PreCommitError::NotARepository(dir.to_owned()),
        GitError::Failed { stderr, .. } => PreCommitError::Git {
            dir: dir.to_owned(),
            args: args.join(" "),
            message: if stderr.is_empty() {
                "no message".to_owned()
            } else {
                stderr
            },
        },
    }
}

fn strip_newline(mut out: Vec<u8>) -> Vec<u8> {
    if out.last() == Some(&b'\n') {
        out.pop();
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn skip_values() {
        let hooks =
            |ids: &[&str]| PreCommitSkip::Hooks(ids.iter().map(|s| s.to_string()).collect());
        for (value, expected) in [
            ("", PreCommitSkip::Nothing),
            ("  ", PreCommitSkip::Nothing),
            ("1", PreCommitSkip::All),
            ("true", PreCommitSkip::All),
            ("ALL", PreCommitSkip::All),
            ("lint", hooks(&["lint"])),
            ("lint, fmt ,,", hooks(&["lint", "fmt"])),
            ("0", hooks(&["0"])),
        ] {
            assert_eq!(PreCommitSkip::parse(value), expected, "{value:?}");
        }
    }

    #[test]
    fn exit_code_of_reports() {
        let report = |runs: &[i32], failed: bool| PreCommitReport {
            runs: runs.iter().map(|c| ("h".to_owned(), *c)).collect(),
            failed: failed.then(|| "h".to_owned()),
            decided: None,
        };
        for (r, code) in [
            (report(&[], false), 0),
            (report(&[0, 0], false), 0),
            (report(&[0, 3], true), 3),
            (report(&[124], true), 124),
            (report(&[0], true), 1),
            (report(&[300], true), 1),
            (report(&[-1], true), 1),
        ] {
            assert_eq!(r.exit_code(), code, "{r:?}");
        }
    }
}

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

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use nix::fcntl::{Flock, FlockArg};

use crate::context::Context;
use crate::discover::{Discovery, discover};
use crate::exec::{ExecError, RunOptions, RunOutcome, run_hook};
use crate::git::{Git, GitError, RunningGit};
use crate::hook::{Hook, HookKind, Problem};
use crate::state::{Durability, write_atomic_with_mode};
use crate::status::{StatusError, StatusStore};

/// The line that marks a git hook as ours: only a hook carrying it is overwritten or removed.
pub const MANAGED_MARKER: &str = "# discobot:managed";

/// The name git gives the hook.
const HOOK_NAME: &str = "pre-commit";
/// Where a foreign hook is kept while ours is installed.
const ORIGINAL_NAME: &str = "pre-commit.original";
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
}

fn io_error(path: &Path, action: &'static str) -> impl FnOnce(io::Error) -> PreCommitError {
    let path = path.to_owned();
    move |source| PreCommitError::Io {
        path,
        action,
        source,
    }
}

/// The generated git hook: what it calls and the defaults it passes (rule 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitHook {
    program: PathBuf,
    state_dir: Option<PathBuf>,
    session_id: Option<String>,
}

/// What [`GitHook::install`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installed {
    /// Ours was written where there was no hook.
    Created(PathBuf),
    /// A foreign hook was kept as `pre-commit.original` (the second path) and ours written.
    Chained(PathBuf, PathBuf),
    /// An older version of ours was replaced.
    Updated(PathBuf),
    /// Ours was already there, byte for byte.
    Unchanged(PathBuf),
}

impl Installed {
    /// The path of the installed git hook.
    pub fn path(&self) -> &Path {
        match self {
            Installed::Created(p)
            | Installed::Chained(p, _)
            | Installed::Updated(p)
            | Installed::Unchanged(p) => p,
        }
    }
}

/// What [`uninstall_pre_commit`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Uninstalled {
    /// Ours was removed; there was no original.
    Removed(PathBuf),
    /// Ours was replaced by the original it had kept.
    Restored(PathBuf),
    /// The hook there is not ours; it was left alone.
    NotOurs(PathBuf),
    /// There was no hook.
    NotInstalled(PathBuf),
}

/// What [`ensure_pre_commit`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ensured {
    /// There are pre-commit hooks; the git hook is in place.
    Installed(Installed),
    /// There are none; the git hook was checked and removed if ours.
    Uninstalled(Uninstalled),
    /// The workspace is not a git repository: there is nothing to install.
    NotARepository,
}

impl GitHook {
    /// A git hook that calls `program` (an absolute path) with no recorded state dir or session.
    pub fn new(program: impl Into<PathBuf>) -> GitHook {
        GitHook {
            program: program.into(),
            state_dir: None,
            session_id: None,
        }
    }

    /// The git hook that calls the running binary with the context's state dir and session.
    pub fn for_context(ctx: &Context) -> Result<GitHook, PreCommitError> {
        let program = std::env::current_exe().map_err(PreCommitError::CurrentExe)?;
        Ok(GitHook::new(program)
            .state_dir(&ctx.state_dir)
            .session(&ctx.session_id))
    }

    /// The state dir used when `HOOKVISOR_STATE_DIR` is unset at commit time. Default: none.
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> GitHook {
        self.state_dir = Some(dir.into());
        self
    }

    /// The session used when `DISCOBOT_SESSION_ID` is unset at commit time. Default: none.
    pub fn session(mut self, id: impl Into<String>) -> GitHook {
        self.session_id = Some(id.into());
        self
    }

    /// The text of the script.
    pub fn script(&self) -> Vec<u8> {
        let mut s = Vec::new();
        s.extend_from_slice(b"#!/bin/sh\n");
        s.extend_from_slice(MANAGED_MARKER.as_bytes());
        s.extend_from_slice(
            b"\n# Written by `hookvisor pre-commit install`; `hookvisor pre-commit uninstall` \
              removes it\n# and puts back pre-commit.original. The hooks themselves are read \
              from .discobot/hooks\n# at each commit.\n",
        );
        s.extend_from_slice(b"hookvisor=");
        s.extend_from_slice(&shell_quote(self.program.as_os_str()));
        s.extend_from_slice(
            br#"
original="${0%/*}/pre-commit.original"
if [ -x "$original" ]; then
	"$original" "$@" || exit $?
fi
if [ ! -x "$hookvisor" ]; then
	printf 'hookvisor: %s is gone, so the pre-commit hooks cannot run; reinstall with `hookvisor pre-commit install` (or commit with --no-verify)\n' "$hookvisor" >&2
	exit 1
fi
"#,
        );
        let defaults = [
            (
                "HOOKVISOR_STATE_DIR",
                self.state_dir.as_deref().map(Path::as_os_str),
            ),
            (
                "DISCOBOT_SESSION_ID",
                self.session_id.as_deref().map(OsStr::new),
            ),
        ];
        for (name, value) in defaults {
            if let Some(value) = value {
                let line = format!("if [ -z \"${{{name}-}}\" ]; then {name}=");
                s.extend_from_slice(line.as_bytes());
                s.extend_from_slice(&shell_quote(value));
                s.extend_from_slice(format!("; export {name}; fi\n").as_bytes());
            }
        }
        s.extend_from_slice(b"exec \"$hookvisor\" pre-commit run\n");
        s
    }

    /// Installs the script in the git hooks dir of the repository containing `repo_dir`
    /// (rules 1 and 2). Running it again changes nothing.
    pub fn install(&self, repo_dir: &Path) -> Result<Installed, PreCommitError> {
        let dir = git_hooks_dir(repo_dir)?;
        fs::create_dir_all(&dir).map_err(io_error(&dir, "create"))?;
        let _lock = lock_dir(&dir)?;
        let hook = dir.join(HOOK_NAME);
        let original = dir.join(ORIGINAL_NAME);
        let script = self.script();
        match read_hook(&hook)? {
            Some(current) if current == script => Ok(Installed::Unchanged(hook)),
            Some(current) if is_ours(&current) => {
                write_script(&hook, &script)?;
                Ok(Installed::Updated(hook))
            }
            Some(_) => {
                if fs::symlink_metadata(&original).is_ok() {
                    return Err(PreCommitError::OriginalExists { hook, original });
                }
                // A hard link, not a copy: the original keeps its inode, so uninstall can give
                // back its exact bytes and mode by renaming it.
                fs::hard_link(&hook, &original).map_err(io_error(&original, "create"))?;
                write_script(&hook, &script)?;
                Ok(Installed::Chained(hook, original))
            }
            None => {
                write_script(&hook, &script)?;
                Ok(Installed::Created(hook))
            }
        }
    }

    /// Installs when the discovery holds pre-commit hooks, else removes the git hook if it is
    /// ours. A workspace outside git is not an error: there is nothing to install.
    pub fn ensure(
        &self,
        repo_dir: &Path,
        discovery: &Discovery,
    ) -> Result<Ensured, PreCommitError> {
        let result = if discovery.of_kind(HookKind::PreCommit).next().is_some() {
            self.install(repo_dir).map(Ensured::Installed)
        } else {
            uninstall_pre_commit(repo_dir).map(Ensured::Uninstalled)
        };
        match result {
            Err(PreCommitError::NotARepository(_)) => Ok(Ensured::NotARepository),
            other => other,
        }
    }
}

/// Makes the git hook of `ctx.workspace` match its hooks (see [`GitHook::ensure`]): what `eval`,
/// `session` and `serve` call so that adding the first pre-commit hook is enough.
pub fn ensure_pre_commit(ctx: &Context, discovery: &Discovery) -> Result<Ensured, PreCommitError> {
    GitHook::for_context(ctx)?.ensure(&ctx.workspace, discovery)
}

/// Removes our git hook from the repository containing `repo_dir` and puts back the original
/// it kept; a hook that is not ours is left alone (rule 2).
pub fn uninstall_pre_commit(repo_dir: &Path) -> Result<Uninstalled, PreCommitError> {
    let dir = git_hooks_dir(repo_dir)?;
    let hook = dir.join(HOOK_NAME);
    if !dir.is_dir() {
        return Ok(Uninstalled::NotInstalled(hook));
    }
    let _lock = lock_dir(&dir)?;
    let original = dir.join(ORIGINAL_NAME);
    match read_hook(&hook)? {
        Some(current) if is_ours(&current) => {
            if fs::symlink_metadata(&original).is_ok() {
                fs::rename(&original, &hook).map_err(io_error(&original, "rename"))?;
                Ok(Uninstalled::Restored(hook))
            } else {
                fs::remove_file(&hook).map_err(io_error(&hook, "remove"))?;
                Ok(Uninstalled::Removed(hook))
            }
        }
        Some(_) => Ok(Uninstalled::NotOurs(hook)),
        // Ours was deleted by hand: the original it kept is still the repository's hook.
        None if fs::symlink_metadata(&original).is_ok() => {
            fs::rename(&original, &hook).map_err(io_error(&original, "rename"))?;
            Ok(Uninstalled::Restored(hook))
        }
        None => Ok(Uninstalled::NotInstalled(hook)),
    }
}

/// Where git looks for hooks for the repository containing `repo_dir` (rule 1), absolute.
pub fn git_hooks_dir(repo_dir: &Path) -> Result<PathBuf, PreCommitError> {
    let out = git(repo_dir, &["rev-parse", "--git-path", "hooks"])?;
    let dir = repo_dir.join(OsString::from_vec(strip_newline(out)));
    // git answers relative to `repo_dir` (`../.git/modules/sub/hooks`); say it plainly.
    Ok(dir.canonicalize().unwrap_or(dir))
}

/// The top level of the work tree containing `dir`: `dir` itself when it holds `.git` (git
/// starts hooks there, so the commit path costs a `stat`, not a process), else what
/// `git rev-parse --show-toplevel` says.
pub fn repository_top(dir: &Path) -> Result<PathBuf, PreCommitError> {
    if fs::symlink_metadata(dir.join(".git")).is_ok() {
        return Ok(dir.to_owned());
    }
    let out = git(dir, &["rev-parse", "--show-toplevel"])?;
    if out.is_empty() || out == b"\n" {
        return Err(PreCommitError::Git {
            dir: dir.to_owned(),
            args: "rev-parse --show-toplevel".into(),
            message: "no work tree (a bare repository?); run it in a checkout".into(),
        });
    }
    Ok(PathBuf::from(OsString::from_vec(strip_newline(out))))
}

/// The staged files of the index git uses (`GIT_INDEX_FILE` during a commit), relative to the
/// top level `top`: added, copied, modified and renamed files (new path), never deletions.
///
/// Names are kept as bytes: one that is not UTF-8 reaches the hooks exactly.
pub fn staged_files(top: &Path) -> Result<Vec<PathBuf>, PreCommitError> {
    staged_from(top, git(top, &STAGED_ARGS))
}

/// The git command behind [`staged_files`]: the plumbing `diff-index`, which costs a commit
/// about a third less than `git diff --cached` (same answer, less set-up).
const STAGED_ARGS: [&str; 7] = [
    "diff-index",
    "--cached",
    "--name-only",
    "-z",
    "--no-renames",
    "--diff-filter=ACMR",
    "HEAD",
];

/// The staged files from what `git diff-index ... HEAD` gave. Before the first commit there is
/// no HEAD: every file of the index is staged, so compare with the empty tree instead.
fn staged_from(
    top: &Path,
    against_head: Result<Vec<u8>, PreCommitError>,
) -> Result<Vec<PathBuf>, PreCommitError> {
    let out = match against_head {
        Err(PreCommitError::Git { .. })
            if git(top, &["rev-parse", "-q", "--verify", "HEAD"]).is_err() =>
        {
            // The empty tree's id depends on the repository's hash (SHA-1 or SHA-256).
            let empty = git(top, &["hash-object", "-t", "tree", "/dev/null"])?;
            let empty = String::from_utf8_lossy(&strip_newline(empty)).into_owned();
            let mut args: [&str; 7] = STAGED_ARGS;
            args[args.len() - 1] = &empty;
            git(top, &args)?
        }
        other => other?,
    };
    Ok(out
        .split(|&b| b == 0)
        .filter(|name| !name.is_empty())
        .map(|name| PathBuf::from(OsStr::from_bytes(name)))
        .collect())
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
}

/// The result of [`run_pre_commit`].
#[derive(Debug, Default)]
pub struct PreCommitReport {
    /// The ids of the hooks that ran, with their exit codes, in order.
    pub runs: Vec<(String, i32)>,
    /// The id of the hook that failed, if one did (the last of `runs`).
    pub failed: Option<String>,
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
    let discovery = discover(&ctx.hooks_dir());
    for problem in discovery
        .problems
        .iter()
        .filter(|p| p.may_be(HookKind::PreCommit))
    {
        on_event(PreCommitEvent::Problem(problem));
    }
    let hooks: Vec<&Hook> = discovery.of_kind(HookKind::PreCommit).collect();
    if let PreCommitSkip::Hooks(ids) = skip {
        for id in ids.iter().filter(|id| !hooks.iter().any(|h| h.id == **id)) {
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
    if to_run.is_empty() {
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
        // No `begin` record: a commit waits for its hooks anyway, and each status write costs
        // two fsyncs on the commit path. `record` writes the same `lastRunAt`.
        let outcome = run_hook(ctx, hook, &files, &RunOptions::default())?;
        store.record(ctx, hook, &outcome, None, SystemTime::now())?;
        on_event(PreCommitEvent::Finished(hook, &files, &outcome));
        report.runs.push((hook.id.clone(), outcome.exit_code));
        if !outcome.success() {
            report.failed = Some(hook.id.clone());
            break;
        }
    }
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

/// The contents of the hook file (through a symlink), or `None` when there is none.
fn read_hook(hook: &Path) -> Result<Option<Vec<u8>>, PreCommitError> {
    match fs::read(hook) {
        Ok(bytes) => Ok(Some(bytes)),
        // A dangling symlink is still somebody's hook: keep it like any foreign one.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Ok(fs::symlink_metadata(hook).is_ok().then(Vec::new))
        }
        Err(e) => Err(io_error(hook, "read")(e)),
    }
}

fn is_ours(contents: &[u8]) -> bool {
    contents
        .split(|&b| b == b'\n')
        .take(3)
        .any(|line| line == MANAGED_MARKER.as_bytes())
}

/// Serialises installs and uninstalls of one hooks dir (the server, `eval` and `session` may
/// ensure at the same time); without it two installers could both move the foreign hook aside
/// and lose it. The lock is on the directory itself, so nothing is left behind.
fn lock_dir(dir: &Path) -> Result<Flock<File>, PreCommitError> {
    let handle = File::open(dir).map_err(io_error(dir, "open"))?;
    Flock::lock(handle, FlockArg::LockExclusive).map_err(|(_, errno)| PreCommitError::Io {
        path: dir.to_owned(),
        action: "lock",
        source: errno.into(),
    })
}

/// Writes the script next to `hook` and renames it over: git never sees half a script, nor a
/// script it cannot execute, and a commit running the old one keeps its file. No fsync: a hook
/// lost in a crash is written again by the next `ensure`.
fn write_script(hook: &Path, script: &[u8]) -> Result<(), PreCommitError> {
    write_atomic_with_mode(hook, script, Durability::Replaceable, 0o755)
        .map_err(io_error(hook, "write"))
}

/// `value` in single quotes for `sh`: safe for spaces, `$`, backticks, quotes and newlines.
fn shell_quote(value: &OsStr) -> Vec<u8> {
    let mut quoted = vec![b'\''];
    for &b in value.as_bytes() {
        if b == b'\'' {
            quoted.extend_from_slice(b"'\\''");
        } else {
            quoted.push(b);
        }
    }
    quoted.push(b'\'');
    quoted
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::process::Command;

    /// A fresh git repository in a temp dir.
    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("git")
            .args(["init", "-q"])
            .current_dir(dir.path())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .status()
            .expect("git must be installed to test pre-commit hooks");
        assert!(status.success());
        dir
    }

    fn write_pre_commit_hook(repo: &Path) -> PathBuf {
        let dir = repo.join(".discobot/hooks");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lint.sh");
        fs::write(&path, "#!/bin/sh\n#---\n# type: pre-commit\n#---\nexit 0\n").unwrap();
        fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn ensure_follows_the_hook_set() {
        let repo = repo();
        let root = repo.path().canonicalize().unwrap();
        let hooks = root.join(".discobot/hooks");
        let git_hook = root.join(".git/hooks/pre-commit");
        let ensure = |hv: &str| GitHook::new(hv).ensure(&root, &discover(&hooks)).unwrap();

        assert_eq!(
            ensure("/bin/hv"),
            Ensured::Uninstalled(Uninstalled::NotInstalled(git_hook.clone()))
        );
        let lint = write_pre_commit_hook(&root);
        assert_eq!(
            ensure("/bin/hv"),
            Ensured::Installed(Installed::Created(git_hook.clone()))
        );
        assert_eq!(
            ensure("/bin/hv"),
            Ensured::Installed(Installed::Unchanged(git_hook.clone()))
        );
        assert_eq!(
            ensure("/other/hv"),
            Ensured::Installed(Installed::Updated(git_hook.clone()))
        );
        fs::remove_file(&lint).unwrap();
        assert_eq!(
            ensure("/bin/hv"),
            Ensured::Uninstalled(Uninstalled::Removed(git_hook.clone()))
        );
        assert!(!git_hook.exists());

        // With no pre-commit hooks left, a foreign git hook is not ours to remove.
        fs::write(&git_hook, "#!/bin/sh\nexit 0\n").unwrap();
        assert_eq!(
            ensure("/bin/hv"),
            Ensured::Uninstalled(Uninstalled::NotOurs(git_hook.clone()))
        );
        assert_eq!(fs::read(&git_hook).unwrap(), b"#!/bin/sh\nexit 0\n");

        let plain = tempfile::tempdir().unwrap();
        let discovery = discover(&plain.path().join("none"));
        assert_eq!(
            GitHook::new("/bin/hv")
                .ensure(plain.path(), &discovery)
                .unwrap(),
            Ensured::NotARepository
        );
    }

    #[test]
    fn concurrent_installs_keep_the_foreign_hook() {
        let repo = repo();
        let root = repo.path().canonicalize().unwrap();
        let git_hook = root.join(".git/hooks/pre-commit");
        let foreign = b"#!/bin/sh\necho foreign\n";
        fs::write(&git_hook, foreign).unwrap();
        let barrier = std::sync::Barrier::new(8);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    barrier.wait();
                    GitHook::new("/bin/hv").install(&root).unwrap()
                });
            }
        });
        assert!(is_ours(&fs::read(&git_hook).unwrap()));
        assert_eq!(
            fs::read(root.join(".git/hooks/pre-commit.original")).unwrap(),
            foreign
        );
        assert_eq!(
            uninstall_pre_commit(&root).unwrap(),
            Uninstalled::Restored(git_hook.clone())
        );
        assert_eq!(fs::read(&git_hook).unwrap(), foreign);
    }

    #[test]
    fn a_foreign_hook_beside_a_kept_original_is_a_conflict() {
        let repo = repo();
        let root = repo.path().canonicalize().unwrap();
        let dir = root.join(".git/hooks");
        fs::write(dir.join("pre-commit"), "#!/bin/sh\necho new\n").unwrap();
        fs::write(dir.join("pre-commit.original"), "#!/bin/sh\necho old\n").unwrap();
        let err = GitHook::new("/bin/hv").install(&root).unwrap_err();
        assert!(
            matches!(err, PreCommitError::OriginalExists { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("pre-commit.original"), "{err}");
        assert_eq!(
            fs::read(dir.join("pre-commit")).unwrap(),
            b"#!/bin/sh\necho new\n"
        );
    }

    #[test]
    fn shell_quote_round_trips_through_sh() {
        for value in [
            "plain",
            "with space",
            "it's",
            "$HOME and ${x}",
            "`id` $(id)",
            "back\\slash \"dq\"",
            "new\nline",
            "'",
            "",
            "-n",
        ] {
            let mut script = b"printf '%s' ".to_vec();
            script.extend_from_slice(&shell_quote(OsStr::new(value)));
            let out = Command::new("sh")
                .arg("-c")
                .arg(OsStr::from_bytes(&script))
                .output()
                .unwrap();
            assert!(out.status.success(), "{value:?}");
            assert_eq!(String::from_utf8(out.stdout).unwrap(), value);
        }
    }

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
    fn marker_is_recognised_only_near_the_top() {
        for (text, ours) in [
            (GitHook::new("/bin/hookvisor").script(), true),
            (b"#!/bin/sh\n# discobot:managed\n".to_vec(), true),
            (b"#!/bin/sh\nexec lint\n".to_vec(), false),
            (b"#!/bin/sh\n\n\n\n# discobot:managed\n".to_vec(), false),
            (b"#!/bin/sh\necho '# discobot:managed'\n".to_vec(), false),
        ] {
            assert_eq!(is_ours(&text), ours, "{}", String::from_utf8_lossy(&text));
        }
    }

    #[test]
    fn exit_code_of_reports() {
        let report = |runs: &[i32], failed: bool| PreCommitReport {
            runs: runs.iter().map(|c| ("h".to_owned(), *c)).collect(),
            failed: failed.then(|| "h".to_owned()),
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

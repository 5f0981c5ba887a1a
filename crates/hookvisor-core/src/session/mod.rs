//! Session hooks: the ones that run once when the container starts.
//!
//! The rules, written once here for `hookvisor-init` and `hookvisor session` alike:
//!
//! 1. Session hooks run in discovery order (file name order), the `blocking: true` ones first:
//!    the init waits for those before it starts the agent command, and runs the others in the
//!    background, still in order, while the command starts ([`SessionPlan`]). A `run_as: root`
//!    hook is always blocking: no root hook ever runs while the agent's processes exist.
//! 2. `run_as: root` runs as root, `run_as: user` as the run user (supplementary groups, gid,
//!    uid, and HOME, USER, LOGNAME, SHELL from its passwd entry). A process that is not root
//!    runs everything as itself; [`SessionPlan::unprivileged_root_hooks`] lets the caller say so.
//!    A root process runs a root hook only from the bytes it read into a [`SealedScript`] when
//!    the plan was made, and only as `--root-hooks` ([`RootHooks`]) allows.
//! 3. Each hook has its own timeout (default 300 s) after which its whole process group is
//!    killed. A failed attempt (an exit status other than 0, a timeout) is made again, up to the
//!    hook's `retries` ([`SessionHook::retries`]; default [`DEFAULT_RETRIES`], so 10 attempts in
//!    all, as discobot's init), after a wait ([`Backoff`]: 0.5 s, doubling, at most 5 s) that
//!    ends the moment the session is cancelled. A run that could not start (a refused root hook,
//!    a log that cannot be made) and a stopped one are not retried. Every attempt of a root hook
//!    runs the same sealed bytes. What an attempt leaves running is killed before the next
//!    ([`SessionOptions::after_attempt`]). A blocking hook holds the agent command until its last
//!    attempt. A failure is recorded and reported and never stops the hooks after it.
//! 4. Every run is recorded once in `status.json` as type `session`: `running` when its first
//!    attempt starts, then the result of its last attempt (`runCount` +1; `failCount` +1 only
//!    when the last attempt failed). A run stopped because the session ended (the agent command
//!    exited or the container is stopping), in an attempt or in the wait before the next, is a
//!    failure with a `note` field saying so, and so is a run whose runner was killed before it
//!    could record it ([`fail_interrupted`]).
//! 5. When root runs hooks for an unprivileged user, it acts on the state dir with that user's
//!    file-system credentials ([`act_as`]): what it creates is the user's, and a
//!    link the agent planted there leads nowhere the user could not go. Nothing is chowned.
//! 6. A run's log is one file, as discobot writes it: when a run takes more than one attempt,
//!    each attempt's output follows a line `=== Attempt k/N ===`, with a blank line between
//!    attempts. A run of one attempt (it passed, the hook has `retries: 0`, or the session ended
//!    before the second) has the plain output. While an attempt runs, the log holds that
//!    attempt's output; the earlier ones are put back in front of it when it ends.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt, lchown};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nix::unistd::Uid;

use crate::context::Context;
use crate::discover::Discovery;
use crate::exec::{CancelToken, Credentials, RunOptions, RunOutcome, run_hook};
use crate::hook::{Hook, HookKind, RunAs};
use crate::seal::{RootHooks, SealedScript};
use crate::status::{RunResult, StatusError, StatusStore};
use crate::user_fs::{act_as, guarded_by_sticky, writable_by};

/// The note of a hook stopped because the session ended under it.
pub const STOPPED_NOTE: &str = "stopped before it finished: the session ended (the agent command exited or the container is stopping)";

/// How many times a failed session hook is run again when its front matter names no `retries`:
/// 9, so 10 attempts in all, as discobot's init makes (`sessionHookMaxAttempts`).
pub const DEFAULT_RETRIES: u32 = 9;

/// A session hook, with what only session hooks have.
#[derive(Debug, Clone)]
pub struct SessionHook {
    /// The hook.
    pub hook: Hook,
    /// How many times a failed run is tried again (front matter `retries`): `retries: 0` runs it
    /// once, `retries: 2` at most three times. Default [`DEFAULT_RETRIES`].
    pub retries: u32,
}

impl SessionHook {
    /// The most attempts a run makes: one, then the retries.
    pub fn attempts(&self) -> u32 {
        self.retries.saturating_add(1)
    }
}

/// The wait before each retry of a session hook: `first` before the second attempt, twice as
/// long before each next one, never more than `max`. `Backoff::default()` waits 0.5 s, 1 s,
/// 2 s, 4 s, then 5 s each time (discobot's init retries at once; see the README).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The wait before the second attempt.
    pub first: Duration,
    /// The longest wait.
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Backoff {
        Backoff {
            first: Duration::from_millis(500),
            max: Duration::from_secs(5),
        }
    }
}

impl Backoff {
    /// The wait before attempt `attempt` (2 or more; the first attempt has none).
    pub fn before(&self, attempt: u32) -> Duration {
        let doublings = attempt.saturating_sub(2).min(31);
        self.first.saturating_mul(1 << doublings).min(self.max)
    }
}

/// How one attempt of a session hook ended, for [`SessionOptions::after_attempt`].
#[derive(Debug, Clone)]
pub struct Attempt<'a> {
    /// The hook.
    pub hook: &'a Hook,
    /// Which attempt this was, from 1.
    pub number: u32,
    /// The most attempts the run makes.
    pub of: u32,
    /// Its exit status (124 timeout, 128+n signal, 126/127 could not start).
    pub exit_code: i32,
    /// Exited 0 in time.
    pub success: bool,
    /// The timeout stopped it.
    pub timed_out: bool,
    /// The wait before the next attempt, when one follows (unless the session is cancelled
    /// meanwhile).
    pub retry_in: Option<Duration>,
}

/// The session hooks of a workspace, split the way they run (rule 1 of the module docs).
#[derive(Debug, Clone, Default)]
pub struct SessionPlan {
    /// Hooks with `blocking: true`, and every `run_as: root` hook, in order: they finish before
    /// the agent command starts.
    pub blocking: Vec<SessionHook>,
    /// The other session hooks, in order: they run while the agent command starts.
    pub background: Vec<SessionHook>,
    /// `run_as: root` hooks that said `blocking: false` and run before the agent all the same.
    pub promoted: Vec<Hook>,
    /// What each root hook runs from when this process is root, by hook id: its sealed bytes,
    /// or why it will not run. Passed on to [`SessionOptions::root_images`].
    pub root_images: RootImages,
}

/// Sealed root hooks by id, or the reason one will not run (see [`SessionPlan::root_images`]).
pub type RootImages = BTreeMap<String, Result<Arc<SealedScript>, String>>;

impl SessionPlan {
    /// Picks the session hooks out of a discovery, keeping its order; every root hook runs
    /// (`--root-hooks all`) and there is no unprivileged user.
    pub fn new(discovery: &Discovery) -> SessionPlan {
        SessionPlan::with_policy(discovery, RootHooks::All, None)
    }

    /// Keeps every root hook from running, each recorded as failed with `reason` (the agent's
    /// processes exist: [`agent_running`](crate::agent_running)).
    pub fn refuse_root_hooks(&mut self, reason: &str) {
        for image in self.root_images.values_mut() {
            *image = Err(reason.to_owned());
        }
    }

    /// Picks the session hooks out of a discovery for a run whose agent is `user`, sealing
    /// each root hook as `policy` allows when this process is root.
    pub fn with_policy(
        discovery: &Discovery,
        policy: RootHooks,
        user: Option<&Credentials>,
    ) -> SessionPlan {
        let mut plan = SessionPlan::default();
        for hook in discovery.of_kind(HookKind::Session) {
            let root = hook.run_as == RunAs::Root;
            if root && !hook.blocking {
                plan.promoted.push(hook.clone());
            }
            if root && Uid::effective().is_root() {
                let image = SealedScript::seal(hook, policy, user)
                    .map(Arc::new)
                    .map_err(|e| e.to_string());
                plan.root_images.insert(hook.id.clone(), image);
            }
            let session_hook = SessionHook {
                hook: hook.clone(),
                retries: discovery
                    .retries
                    .get(&hook.id)
                    .copied()
                    .unwrap_or(DEFAULT_RETRIES),
            };
            if hook.blocking || root {
                plan.blocking.push(session_hook);
            } else {
                plan.background.push(session_hook);
            }
        }
        plan
    }

    /// Every session hook in the order `hookvisor session` runs them: blocking ones first.
    pub fn all(&self) -> impl Iterator<Item = &SessionHook> {
        self.blocking.iter().chain(&self.background)
    }

    /// True when there is no session hook at all.
    pub fn is_empty(&self) -> bool {
        self.blocking.is_empty() && self.background.is_empty()
    }

    /// True when some hook asks for root but this process is not root, so it will run
    /// unprivileged; callers print one warning for it.
    pub fn unprivileged_root_hooks(&self) -> bool {
        !Uid::effective().is_root() && self.all().any(|h| h.hook.run_as == RunAs::Root)
    }
}

/// How [`run_session`] runs the hooks. `SessionOptions::default()` runs them as the current
/// user, with no way to stop them early, without echo, with the default [`Backoff`].
#[derive(Debug, Clone, Default)]
pub struct SessionOptions {
    /// The account of `run_as: user` hooks when this process is root. `None`: the current user.
    pub user: Option<Credentials>,
    /// Stops the running hook and skips the rest; the stopped run is recorded with
    /// [`STOPPED_NOTE`]. Default `None`.
    pub cancel: Option<CancelToken>,
    /// Copy each hook's output to our stderr as `[name] line`. Default false.
    pub echo: bool,
    /// Time between SIGTERM and SIGKILL when a hook is stopped. Default: the executor's.
    pub kill_grace: Option<Duration>,
    /// What root hooks run from when this process is root ([`SessionPlan::root_images`]); a
    /// root hook missing here is not run. Default empty.
    pub root_images: RootImages,
    /// The wait between two attempts of a hook. Default [`Backoff::default`].
    pub backoff: Backoff,
    /// Called as each attempt that ran ends, before the wait, the next attempt or the record:
    /// the init kills what the attempt left running here, and says when it tries again.
    /// Default `None`.
    pub after_attempt: Option<fn(&Attempt<'_>)>,
}

/// What one session hook did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRun {
    /// The hook's id.
    pub hook_id: String,
    /// The hook's display name.
    pub hook_name: String,
    /// Its exit status (124 timeout, 128+n signal, 126/127 could not start); `None` when the
    /// run could not even be attempted.
    pub exit_code: Option<i32>,
    /// Exited 0 in time.
    pub success: bool,
    /// The timeout stopped it.
    pub timed_out: bool,
    /// Why it ended, when the exit code does not say: stopped by the session's end, or the
    /// error that kept it from running.
    pub note: Option<String>,
    /// Its log.
    pub log_path: PathBuf,
    /// How many attempts it made (0 when it could not be attempted).
    pub attempts: u32,
}

/// A problem with the state dir of a session, which the hooks themselves do not depend on.
#[derive(Debug)]
pub enum SessionError {
    /// The state dir or one of its parents could not be created.
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// A directory of the state dir's path could not be given to the run user.
    HandOver {
        /// The directory.
        path: PathBuf,
        /// The user it was for.
        uid: u32,
        /// What the file system said.
        source: io::Error,
    },
    /// The user's file-system credentials could not be taken.
    ActAs(io::Error),
    /// `status.json` could not be written.
    Status(StatusError),
}

impl fmt::Display for SessionError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SessionError::CreateDir { path, source } => write!(
                f,
                "cannot create state dir {}: {source}; create it or pass --state-dir",
                path.display()
            ),
            SessionError::HandOver { path, uid, source } => write!(
                f,
                "cannot give {} to uid {uid}: {source}; run as root or pass a --state-dir the user owns",
                path.display()
            ),
            SessionError::ActAs(e) => write!(
                f,
                "cannot act as the run user on the state dir: {e}; run hookvisor-init as root"
            ),
            SessionError::Status(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for SessionError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            SessionError::CreateDir { source, .. }
            | SessionError::HandOver { source, .. }
            | SessionError::ActAs(source) => Some(source),
            SessionError::Status(e) => Some(e),
        }
    }
}

impl From<StatusError> for SessionError {
    fn from(e: StatusError) -> SessionError {
        SessionError::Status(e)
    }
}

/// The credentials a hook runs with (rule 2): `None` keeps ours.
///
/// Only a root process switches: `run_as: user` to `user` when one is given, `run_as: root`
/// to root's own account (a thread acting as the user must not lend the hook its file-system
/// ids). A process that is not root never switches.
pub fn credentials_for(run_as: RunAs, user: Option<&Credentials>) -> Option<Credentials> {
    if !Uid::effective().is_root() {
        return None;
    }
    let user = user.filter(|u| u.uid != 0);
    match run_as {
        RunAs::Root => user.map(|_| root_account()),
        RunAs::User => user.cloned(),
    }
}

/// Root's account, for root hooks: its passwd entry when there is one.
fn root_account() -> Credentials {
    Credentials::from_name("root")
        .ok()
        .filter(|c| c.uid == 0)
        .unwrap_or_else(|| Credentials {
            user: "root".to_owned(),
            uid: 0,
            gid: 0,
            groups: vec![0],
            home: PathBuf::from("/root"),
            shell: PathBuf::from("/bin/sh"),
        })
}

/// Runs `hooks` one after the other (rules 2-4, 6), each up to its retries, recording each
/// run once in `status.json` and calling `on_finish` as each ends. Stops early only when
/// `options.cancel` is cancelled; the hooks not started then are neither run nor recorded.
///
/// A status that cannot be written does not stop the hooks; `on_finish` sees the run anyway and
/// the returned runs carry the error in their note.
///
/// The calling thread acts on the file system as `options.user` for the whole call (rule 5).
pub fn run_session(
    ctx: &Context,
    hooks: &[SessionHook],
    options: &SessionOptions,
    mut on_finish: impl FnMut(&SessionRun),
) -> Vec<SessionRun> {
    let store = StatusStore::for_context(ctx);
    let acting = act_as(options.user.as_ref());
    let mut runs = Vec::with_capacity(hooks.len());
    for session_hook in hooks {
        let hook = &session_hook.hook;
        if cancelled(options) {
            break;
        }
        let mut status_error = store
            .update(|s| s.entry(hook, ctx).begin(SystemTime::now()))
            .err();
        let mut run_options = RunOptions {
            credentials: credentials_for(hook.run_as, options.user.as_ref()),
            cancel: options.cancel.clone(),
            echo_prefix: options.echo.then(|| hook.name.clone()),
            ..RunOptions::default()
        };
        if let Some(grace) = options.kill_grace {
            run_options.kill_grace = grace;
        }
        let refused = match &acting {
            Err(e) => Some(format!(
                "not run: cannot act as the run user on the state dir: {e}"
            )),
            Ok(_) if hook.run_as == RunAs::Root && Uid::effective().is_root() => {
                match options.root_images.get(&hook.id) {
                    // Every attempt runs these same bytes (rule 3).
                    Some(Ok(image)) => {
                        run_options.sealed = Some(Arc::clone(image));
                        None
                    }
                    Some(Err(reason)) => Some(reason.clone()),
                    None => Some(format!(
                        "{}: not run: a root hook runs only from the bytes read when the \
                         session started",
                        hook.path.display()
                    )),
                }
            }
            Ok(_) => None,
        };
        let started = SystemTime::now();
        let (result, attempts) = match refused {
            Some(reason) => (Err(reason), 0),
            None => attempt_until_done(ctx, session_hook, &run_options, options),
        };
        let mut run = match &result {
            Ok(outcome) => SessionRun {
                hook_id: hook.id.clone(),
                hook_name: hook.name.clone(),
                exit_code: Some(outcome.exit_code),
                success: outcome.success(),
                timed_out: outcome.timed_out,
                // The signal that ended the session may reach the hook before the cancel
                // does (the init signals every process); it was stopped all the same. So was
                // a run whose wait for its next attempt the cancel ended.
                note: (outcome.cancelled || !outcome.success() && cancelled(options))
                    .then(|| STOPPED_NOTE.to_owned()),
                log_path: ctx.log_path(&hook.id),
                attempts,
            },
            Err(reason) => SessionRun {
                hook_id: hook.id.clone(),
                hook_name: hook.name.clone(),
                exit_code: None,
                success: false,
                timed_out: false,
                note: Some(reason.clone()),
                log_path: ctx.log_path(&hook.id),
                attempts,
            },
        };
        let duration = started.elapsed().unwrap_or_default();
        let now = SystemTime::now();
        let recorded = match result {
            // The status shows the whole span, every attempt and the waits between them.
            Ok(outcome) => store.record(
                ctx,
                hook,
                &RunOutcome {
                    duration,
                    ..outcome
                },
                run.note.as_deref(),
                now,
            ),
            Err(reason) => {
                store.update(|s| s.entry(hook, ctx).record_unfinished(&reason, duration, now))
            }
        };
        status_error = status_error.or(recorded.err());
        if let Some(e) = status_error {
            let note = run.note.take().map_or(String::new(), |n| format!("{n}; "));
            run.note = Some(format!("{note}not recorded: {e}"));
        }
        on_finish(&run);
        runs.push(run);
    }
    runs
}

/// Runs one hook until an attempt passes, is stopped or cannot run, or none is left (rule 3),
/// keeping every attempt's output in its log (rule 6). Returns the last attempt's result and
/// how many attempts ran.
fn attempt_until_done(
    ctx: &Context,
    session_hook: &SessionHook,
    run_options: &RunOptions,
    options: &SessionOptions,
) -> (Result<RunOutcome, String>, u32) {
    let hook = &session_hook.hook;
    let of = session_hook.attempts();
    let log = AttemptLog::new(ctx.log_path(&hook.id), of);
    let mut number = 0;
    loop {
        number += 1;
        log.before(number);
        let result = run_hook(ctx, hook, &[], run_options).map_err(|e| e.to_string());
        let outcome = match &result {
            Ok(outcome) => outcome,
            Err(_) => {
                // Nothing to add: keep the earlier attempts' log as it was.
                log.restore();
                return (result, number);
            }
        };
        let stopped = outcome.cancelled || cancelled(options);
        let retry_in = (!outcome.success() && !stopped && number < of)
            .then(|| options.backoff.before(number + 1));
        if let Some(after) = options.after_attempt {
            after(&Attempt {
                hook,
                number,
                of,
                exit_code: outcome.exit_code,
                success: outcome.success(),
                timed_out: outcome.timed_out,
                retry_in,
            });
        }
        log.after(number);
        let Some(wait) = retry_in else {
            return (result, number);
        };
        if !sleep_unless_cancelled(options, wait) {
            log.append(&format!(
                "[{STOPPED_NOTE}, before attempt {}/{of}]",
                number + 1
            ));
            return (result, number);
        }
    }
}

/// Sleeps for `wait` unless `options.cancel` is cancelled first; true when it slept the whole
/// wait.
fn sleep_unless_cancelled(options: &SessionOptions, wait: Duration) -> bool {
    match &options.cancel {
        Some(cancel) => !cancel.wait_for(wait),
        None => {
            std::thread::sleep(wait);
            true
        }
    }
}

/// The one log of a run that may take several attempts (rule 6). Each attempt's run creates
/// the log afresh (`exec`); the earlier attempts wait beside it in a hidden file meanwhile.
///
/// Everything here is best effort, as logging is in `exec`: a log that cannot be put together
/// never fails the run. Files are opened without following links and only when they are
/// regular, since the hook may have replaced them.
struct AttemptLog {
    /// The log, `output/<id>.log`.
    path: PathBuf,
    /// The earlier attempts while one runs: `output/.<id>.log.attempts`.
    earlier: PathBuf,
    /// Where the next log is put together: `output/.<id>.log.tmp`.
    temp: PathBuf,
    /// The most attempts the run makes.
    of: u32,
}

impl AttemptLog {
    fn new(path: PathBuf, of: u32) -> AttemptLog {
        let hidden = |suffix: &str| {
            let name = path.file_name().unwrap_or_default().to_string_lossy();
            path.with_file_name(format!(".{name}{suffix}"))
        };
        AttemptLog {
            earlier: hidden(".attempts"),
            temp: hidden(".tmp"),
            path,
            of,
        }
    }

    /// Before attempt `number`, which makes the log afresh: set the earlier attempts aside,
    /// the first one under its header now that a second follows.
    fn before(&self, number: u32) {
        match number {
            1 => {}
            2 => self.join(1, false, &self.earlier),
            _ => {
                let _ = fs::rename(&self.path, &self.earlier);
            }
        }
    }

    /// Puts the earlier attempts back when an attempt made no log.
    fn restore(&self) {
        if fs::symlink_metadata(&self.path).is_err() {
            let _ = fs::rename(&self.earlier, &self.path);
        }
    }

    /// After attempt `number`: from the second on, the log becomes the earlier attempts, then
    /// this one's output under its header. The first keeps its plain log until a second starts.
    fn after(&self, number: u32) {
        if number > 1 {
            self.join(number, true, &self.path);
            let _ = fs::remove_file(&self.earlier);
        }
    }

    /// Writes the earlier attempts (when `with_earlier`), then the log under the header of
    /// attempt `number`, to `to`.
    fn join(&self, number: u32, with_earlier: bool, to: &Path) {
        if self.write_joined(number, with_earlier).is_ok() {
            let _ = fs::rename(&self.temp, to);
        }
        let _ = fs::remove_file(&self.temp);
    }

    fn write_joined(&self, number: u32, with_earlier: bool) -> io::Result<()> {
        match fs::remove_file(&self.temp) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
            _ => {}
        }
        let file = OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o644)
            .open(&self.temp)?;
        // Readable by anyone, whatever the umask, as `exec` makes every log.
        file.set_permissions(fs::Permissions::from_mode(0o644))?;
        let mut out = Joined {
            out: BufWriter::new(file),
            last: None,
        };
        // Each attempt's log is capped by `exec`; this bounds what a hook that grew its log
        // after the fact can make us copy.
        let limit = RunOptions::default().log_limit + 64 * 1024;
        if with_earlier {
            out.copy(&self.earlier, limit.saturating_mul(u64::from(number - 1)))?;
        }
        if out.last.is_some() {
            out.write(b"\n")?;
        }
        out.write(format!("=== Attempt {number}/{} ===\n", self.of).as_bytes())?;
        out.copy(&self.path, limit)?;
        if out.last.is_some_and(|b| b != b'\n') {
            out.write(b"\n")?;
        }
        out.out.into_inner().map_err(|e| e.into_error())?.sync_all()
    }

    /// Adds a line of ours at the end of the log.
    fn append(&self, line: &str) {
        let log = OpenOptions::new()
            .append(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&self.path);
        if let Ok(mut log) = log
            && log.metadata().is_ok_and(|m| m.is_file())
        {
            let _ = writeln!(log, "{line}");
        }
    }
}

/// The log being put together, and its last byte.
struct Joined {
    out: BufWriter<File>,
    last: Option<u8>,
}

impl Joined {
    fn write(&mut self, bytes: &[u8]) -> io::Result<()> {
        if let Some(&last) = bytes.last() {
            self.out.write_all(bytes)?;
            self.last = Some(last);
        }
        Ok(())
    }

    /// Copies at most `limit` bytes of the regular file at `path`, if there is one, with a note
    /// when it was longer.
    fn copy(&mut self, path: &Path, limit: u64) -> io::Result<()> {
        let file = OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(path);
        let Ok(file) = file else {
            return Ok(());
        };
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Ok(());
        }
        let mut reader = file.take(limit);
        let mut buffer = vec![0; 64 * 1024];
        loop {
            let n = match reader.read(&mut buffer) {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            self.write(&buffer[..n])?;
        }
        let mut rest = reader.into_inner();
        if rest.read(&mut [0])? > 0 {
            if self.last.is_some_and(|b| b != b'\n') {
                self.write(b"\n")?;
            }
            self.write(b"[output cut: the log grew past its limit after the hook ended]\n")?;
        }
        Ok(())
    }
}

/// Records every hook of `hooks` still `running` in `status.json` as a failure with `note`,
/// and appends the note to its log. For a runner that was killed before it could record its
/// hooks itself. Acts on the state dir as `user` (rule 5). Returns the ids changed.
pub fn fail_interrupted(
    ctx: &Context,
    hooks: &[Hook],
    note: &str,
    user: Option<&Credentials>,
) -> Result<Vec<String>, SessionError> {
    let _acting = act_as(user).map_err(SessionError::ActAs)?;
    let store = StatusStore::for_context(ctx);
    let now = SystemTime::now();
    let failed = store.update(|s| {
        let mut failed = Vec::new();
        for hook in hooks {
            let Some(entry) = s.hooks.get(&hook.id) else {
                continue;
            };
            if entry.last_result != RunResult::Running {
                continue;
            }
            let started = entry
                .last_run_at
                .as_deref()
                .and_then(crate::timestamp::parse_rfc3339)
                .unwrap_or(now);
            s.entry(hook, ctx).record_unfinished(
                note,
                now.duration_since(started).unwrap_or_default(),
                now,
            );
            failed.push(hook.id.clone());
        }
        failed
    })?;
    for id in &failed {
        // The log is a record for people; a missing one is not worth failing over.
        if let Ok(mut log) = OpenOptions::new().append(true).open(ctx.log_path(id)) {
            let _ = writeln!(log, "[{note}]");
        }
    }
    Ok(failed)
}

/// Creates the state dir of `ctx` (and its missing parents) with an empty `status.json`, its
/// lock and `output/`, so that the user's own processes can write the state later.
///
/// When we are root and `user` is not, root creates only the missing directories whose parent
/// the user cannot write (no one but root can interfere there) and gives each to the user as it
/// makes it; from the first directory the user can write, everything is done with the user's
/// file-system credentials (rule 5). Nothing that exists is chowned.
pub fn prepare_state_dir(ctx: &Context, user: Option<&Credentials>) -> Result<(), SessionError> {
    let user = user.filter(|u| u.uid != 0 && Uid::effective().is_root());
    if let Some(user) = user {
        root_part_of_path(&ctx.state_dir, user)?;
    }
    let _acting = act_as(user).map_err(SessionError::ActAs)?;
    let output = ctx.state().output_dir();
    fs::create_dir_all(&output).map_err(|source| SessionError::CreateDir {
        path: output,
        source,
    })?;
    // An update that changes nothing still creates the lock file and a valid status.json.
    StatusStore::for_context(ctx).update(|_| ())?;
    Ok(())
}

/// Walks `dir` from `/` while no one but root can change what each name on the way refers to
/// (its parent is closed to `user`, or is sticky like `/tmp` and root owns the entry), creates
/// the first missing directory as root and gives it to `user`, and stops there or at the first
/// name the user could change (a link is followed only with the user's credentials).
fn root_part_of_path(dir: &Path, user: &Credentials) -> Result<(), SessionError> {
    let create_error = |path: &Path, source| SessionError::CreateDir {
        path: path.to_owned(),
        source,
    };
    let mut path = PathBuf::from("/");
    let mut parent = fs::metadata(&path).map_err(|e| create_error(&path, e))?;
    for component in dir.components() {
        let name = match component {
            Component::RootDir => continue,
            Component::Normal(name) => name,
            // `..` or `.` in the path: leave the rest to the user.
            _ => return Ok(()),
        };
        let child = path.join(name);
        let parent_open = writable_by(&parent, user);
        let sticky = guarded_by_sticky(&parent, user);
        match fs::symlink_metadata(&child) {
            Ok(meta) if meta.is_dir() && (!parent_open || (sticky && meta.uid() == 0)) => {
                path = child;
                parent = meta;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound && (!parent_open || sticky) => {
                match fs::DirBuilder::new().mode(0o755).create(&child) {
                    // Someone made it first: whatever it is, the user's credentials handle it.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
                    other => other.map_err(|e| create_error(&child, e))?,
                }
                // Ours, in a directory where the user can neither remove nor rename it.
                return lchown(&child, Some(user.uid), Some(user.gid)).map_err(|source| {
                    SessionError::HandOver {
                        path: child.clone(),
                        uid: user.uid,
                        source,
                    }
                });
            }
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(create_error(&child, e));
            }
            _ => return Ok(()),
        }
    }
    Ok(())
}

fn cancelled(options: &SessionOptions) -> bool {
    options
        .cancel
        .as_ref()
        .is_some_and(CancelToken::is_cancelled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Instant;

    use crate::discover::discover;
    use crate::status::Status;

    struct Fixture {
        _dir: tempfile::TempDir,
        ctx: Context,
    }

    impl Fixture {
        fn new() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let workspace = dir.path().join("ws");
            fs::create_dir_all(workspace.join(".discobot/hooks")).unwrap();
            let ctx = Context {
                workspace,
                session_id: "s1".into(),
                state_dir: dir.path().join("state"),
            };
            Fixture { _dir: dir, ctx }
        }

        fn hook(&self, file: &str, front: &str, body: &str) {
            let path = self.ctx.hooks_dir().join(file);
            fs::write(
                &path,
                format!("#!/bin/sh\n#---\n# type: session\n{front}#---\n{body}\n"),
            )
            .unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }

        fn plan(&self) -> SessionPlan {
            let discovery = discover(&self.ctx.hooks_dir());
            assert!(discovery.problems.is_empty(), "{:?}", discovery.problems);
            SessionPlan::new(&discovery)
        }

        fn status(&self) -> Status {
            StatusStore::for_context(&self.ctx).load().unwrap()
        }
    }

    #[test]
    fn plan_keeps_file_order_and_puts_blocking_hooks_first() {
        let f = Fixture::new();
        f.hook("30-c.sh", "# blocking: true\n", "true");
        f.hook("10-a.sh", "", "true");
        f.hook("20-b.sh", "# blocking: true\n", "true");
        let file_hook = f.ctx.hooks_dir().join("40-file.sh");
        fs::write(
            &file_hook,
            "#!/bin/sh\n#---\n# type: file\n# pattern: '*'\n#---\n",
        )
        .unwrap();
        fs::set_permissions(&file_hook, fs::Permissions::from_mode(0o755)).unwrap();
        let plan = f.plan();
        let ids =
            |hooks: &[SessionHook]| hooks.iter().map(|h| h.hook.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&plan.blocking), ["20-b", "30-c"]);
        assert_eq!(ids(&plan.background), ["10-a"]);
        let all: Vec<_> = plan.all().map(|h| h.hook.id.as_str()).collect();
        assert_eq!(all, ["20-b", "30-c", "10-a"]);
    }

    #[test]
    fn a_failing_hook_is_recorded_and_does_not_stop_the_rest() {
        let f = Fixture::new();
        f.hook("10-fails.sh", "# retries: 0\n", "echo broken; exit 3");
        f.hook(
            "20-slow.sh",
            "# timeout: 1\n# retries: 0\n",
            "exec sleep 30",
        );
        f.hook("30-fine.sh", "", "echo fine");
        let plan = f.plan();
        let mut seen = Vec::new();
        let runs = run_session(&f.ctx, &plan.background, &SessionOptions::default(), |r| {
            seen.push(r.hook_id.clone())
        });
        assert_eq!(seen, ["10-fails", "20-slow", "30-fine"]);
        let table: Vec<_> = runs
            .iter()
            .map(|r| (r.hook_id.as_str(), r.exit_code, r.success, r.timed_out))
            .collect();
        assert_eq!(
            table,
            [
                ("10-fails", Some(3), false, false),
                ("20-slow", Some(124), false, true),
                ("30-fine", Some(0), true, false),
            ]
        );
        let status = f.status();
        for (id, result, code, failures) in [
            ("10-fails", RunResult::Failure, Some(3), 1),
            ("20-slow", RunResult::Failure, Some(124), 1),
            ("30-fine", RunResult::Success, Some(0), 0),
        ] {
            let entry = &status.hooks[id];
            assert_eq!(entry.kind, HookKind::Session, "{id}");
            assert_eq!(entry.last_result, result, "{id}");
            assert_eq!(entry.last_exit_code, code, "{id}");
            assert_eq!(entry.fail_count, failures, "{id}");
            assert_eq!(entry.run_count, 1, "{id}");
            assert_eq!(entry.note, None, "{id}");
        }
        assert!(status.hooks["20-slow"].timed_out);
        let log = fs::read_to_string(f.ctx.log_path("10-fails")).unwrap();
        assert!(log.contains("broken"), "{log}");
    }

    /// Written from discobot's `TestRunSessionHookWithRetry` ("retries until success", "marks
    /// failure after ten attempts") and `TestRunSessionHookPersistsAggregateStatusAfterRetries`:
    /// a failing session hook is run again, in one run that records one result, with the output
    /// of every attempt under its header in the one log.
    #[test]
    fn a_failing_hook_is_retried_in_one_run_that_records_one_result() {
        let f = Fixture::new();
        // Each attempt counts itself in `<hook>.count` and exits with the code `exits` gives it.
        let counting = |exits: &str| {
            format!(
                "n=$(($(cat \"$0.count\" 2>/dev/null || echo 0) + 1)); echo $n > \"$0.count\"\n\
                 code=$({exits}); echo \"attempt $n: exit $code\"; exit $code"
            )
        };
        // (file, extra front matter, exit codes by attempt, attempts, exit code, log)
        type Row<'a> = (&'a str, &'a str, &'a str, u32, i32, &'a str);
        let table: &[Row] = &[
            (
                "10-third-time.sh",
                "",
                "[ $n -lt 3 ] && echo 1 || echo 0",
                3,
                0,
                "=== Attempt 1/10 ===\nattempt 1: exit 1\n\n=== Attempt 2/10 ===\nattempt 2: exit 1\n\n\
                 === Attempt 3/10 ===\nattempt 3: exit 0\n",
            ),
            (
                "20-never.sh",
                "# retries: 2\n",
                "echo $((10 + n))",
                3,
                13,
                "=== Attempt 1/3 ===\nattempt 1: exit 11\n\n=== Attempt 2/3 ===\nattempt 2: exit 12\n\n\
                 === Attempt 3/3 ===\nattempt 3: exit 13\n",
            ),
            (
                "30-off.sh",
                "# retries: 0\n",
                "echo 7",
                1,
                7,
                "attempt 1: exit 7\n",
            ),
            ("40-fine.sh", "", "echo 0", 1, 0, "attempt 1: exit 0\n"),
        ];
        for (file, front, exits, ..) in table {
            f.hook(file, front, &counting(exits));
        }
        let plan = f.plan();
        let runs = run_session(&f.ctx, &plan.background, &SessionOptions::default(), |_| {});
        let status = f.status();
        let mut wrong = Vec::new();
        for (run, &(file, _, _, attempts, code, log)) in runs.iter().zip(table) {
            let id = &run.hook_id;
            let count = fs::read_to_string(f.ctx.hooks_dir().join(format!("{file}.count")));
            let entry = &status.hooks[id];
            let got = (
                count.map(|c| c.trim().to_owned()).unwrap_or_default(),
                run.exit_code,
                run.success,
                entry.last_exit_code,
                entry.last_result,
                (
                    entry.run_count,
                    entry.fail_count,
                    entry.consecutive_failures,
                ),
                fs::read_to_string(&run.log_path).unwrap_or_default(),
            );
            let failed = u64::from(code != 0);
            let want = (
                attempts.to_string(),
                Some(code),
                code == 0,
                Some(code),
                if code == 0 {
                    RunResult::Success
                } else {
                    RunResult::Failure
                },
                (1, failed, failed),
                log.to_owned(),
            );
            if got != want {
                wrong.push(format!("{id}: got {got:?}\n  want {want:?}"));
            }
        }
        assert_eq!(runs.len(), table.len(), "{runs:?}");
        assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    }

    /// Written from discobot's `TestRunSessionHookWithRetry` ("marks failure after ten
    /// attempts"): without `retries`, a hook that always fails runs ten times, records the last
    /// exit code, and `after_attempt` hears of every attempt.
    #[test]
    fn ten_attempts_by_default_and_the_last_exit_code() {
        use std::sync::Mutex;
        /// (number, of, exit code, wait before the next) of each attempt.
        type Seen = (u32, u32, i32, Option<Duration>);
        static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());
        let f = Fixture::new();
        f.hook("10-always.sh", "", "echo still failing; exit 17");
        let plan = f.plan();
        let backoff = Backoff {
            first: Duration::from_millis(1),
            max: Duration::from_millis(4),
        };
        let options = SessionOptions {
            backoff,
            after_attempt: Some(|a| {
                let seen = (a.number, a.of, a.exit_code, a.retry_in);
                SEEN.lock().unwrap().push(seen);
            }),
            ..SessionOptions::default()
        };
        let runs = run_session(&f.ctx, &plan.background, &options, |_| {});
        assert_eq!(
            (runs[0].exit_code, runs[0].success, runs[0].attempts),
            (Some(17), false, 10)
        );
        let waits = [1, 2, 4, 4, 4, 4, 4, 4, 4].map(Duration::from_millis);
        let expected: Vec<_> = (1..=10)
            .map(|n| (n, 10, 17, waits.get(n as usize - 1).copied()))
            .collect();
        assert_eq!(*SEEN.lock().unwrap(), expected);
        let entry = &f.status().hooks["10-always"];
        assert_eq!(
            (entry.run_count, entry.fail_count, entry.last_exit_code),
            (1, 1, Some(17))
        );
        let log = fs::read_to_string(f.ctx.log_path("10-always")).unwrap();
        let headers: Vec<_> = log.lines().filter(|l| l.starts_with("===")).collect();
        assert_eq!(headers.len(), 10, "{log}");
        assert!(
            log.ends_with("\n=== Attempt 10/10 ===\nstill failing\n"),
            "{log}"
        );
    }

    /// A cancel ends the wait for the next attempt at once: the run is recorded as stopped with
    /// its last attempt's exit code, and no other attempt starts.
    #[test]
    fn a_cancel_ends_the_wait_between_attempts_at_once() {
        use std::sync::atomic::{AtomicBool, Ordering};
        /// Set as the first attempt ends with a retry to come, just before the wait.
        static WAITING: AtomicBool = AtomicBool::new(false);
        let f = Fixture::new();
        f.hook("10-down.sh", "", "echo down; exit 4");
        let plan = f.plan();
        let log = f.ctx.log_path("10-down");
        let cancel = CancelToken::new();
        let canceller = {
            let cancel = cancel.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(30);
                while !WAITING.load(Ordering::SeqCst) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                cancel.cancel();
                Instant::now()
            })
        };
        let options = SessionOptions {
            cancel: Some(cancel),
            backoff: Backoff {
                first: Duration::from_secs(600),
                max: Duration::from_secs(600),
            },
            after_attempt: Some(|a| {
                if a.retry_in.is_some() {
                    WAITING.store(true, Ordering::SeqCst);
                }
            }),
            ..SessionOptions::default()
        };
        let runs = run_session(&f.ctx, &plan.background, &options, |_| {});
        let cancelled_at = canceller.join().unwrap();
        assert!(cancelled_at.elapsed() < Duration::from_secs(5));
        assert_eq!(runs[0].exit_code, Some(4));
        assert_eq!(runs[0].attempts, 1);
        assert_eq!(runs[0].note.as_deref(), Some(STOPPED_NOTE));
        let entry = &f.status().hooks["10-down"];
        assert_eq!(entry.last_result, RunResult::Failure);
        assert_eq!(entry.note.as_deref(), Some(STOPPED_NOTE));
        assert_eq!(
            fs::read_to_string(&log).unwrap(),
            format!("down\n[{STOPPED_NOTE}, before attempt 2/10]\n")
        );
    }

    #[test]
    fn backoff_doubles_up_to_its_most() {
        let backoff = Backoff::default();
        let waits: Vec<f64> = (2..=11).map(|n| backoff.before(n).as_secs_f64()).collect();
        assert_eq!(waits, [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0]);
        assert_eq!(backoff.before(u32::MAX), Duration::from_secs(5));
    }

    #[test]
    fn a_cancelled_session_notes_the_stopped_hook_and_skips_the_rest() {
        let f = Fixture::new();
        f.hook("10-waits.sh", "", "touch \"$0.started\"; exec sleep 30");
        f.hook("20-never.sh", "", "echo should not run");
        let plan = f.plan();
        let started = f.ctx.hooks_dir().join("10-waits.sh.started");
        let cancel = CancelToken::new();
        let canceller = {
            let cancel = cancel.clone();
            std::thread::spawn(move || {
                let deadline = std::time::Instant::now() + Duration::from_secs(10);
                while !started.exists() && std::time::Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(10));
                }
                cancel.cancel();
            })
        };
        let options = SessionOptions {
            cancel: Some(cancel),
            kill_grace: Some(Duration::from_millis(200)),
            ..SessionOptions::default()
        };
        let runs = run_session(&f.ctx, &plan.background, &options, |_| {});
        canceller.join().unwrap();
        assert_eq!(runs.len(), 1, "{runs:?}");
        assert_eq!(runs[0].note.as_deref(), Some(STOPPED_NOTE));
        let status = f.status();
        let entry = &status.hooks["10-waits"];
        assert_eq!(entry.last_result, RunResult::Failure);
        assert_eq!(entry.note.as_deref(), Some(STOPPED_NOTE));
        assert!(!status.hooks.contains_key("20-never"));
    }

    #[test]
    fn interrupted_runs_become_failures_with_the_note() {
        let f = Fixture::new();
        f.hook("10-a.sh", "", "true");
        f.hook("20-b.sh", "", "true");
        f.hook("30-c.sh", "", "true");
        let plan = f.plan();
        let hooks: Vec<Hook> = plan.background.into_iter().map(|h| h.hook).collect();
        let store = StatusStore::for_context(&f.ctx);
        store
            .update(|s| {
                s.entry(&hooks[0], &f.ctx).begin(SystemTime::now());
                let done = s.entry(&hooks[1], &f.ctx);
                done.begin(SystemTime::now());
                done.record(
                    &RunOutcome {
                        exit_code: 0,
                        timed_out: false,
                        cancelled: false,
                        duration: Duration::ZERO,
                        tail: String::new(),
                        output_bytes: 0,
                        log_truncated: false,
                    },
                    SystemTime::now(),
                );
            })
            .unwrap();
        fs::create_dir_all(f.ctx.log_path("x").parent().unwrap()).unwrap();
        fs::write(f.ctx.log_path("10-a"), "partial output\n").unwrap();

        let failed =
            fail_interrupted(&f.ctx, &hooks, "killed after the grace period", None).unwrap();
        assert_eq!(failed, ["10-a"]);
        let status = f.status();
        for (id, result, note) in [
            (
                "10-a",
                Some(RunResult::Failure),
                Some("killed after the grace period"),
            ),
            ("20-b", Some(RunResult::Success), None),
            ("30-c", None, None),
        ] {
            let entry = status.hooks.get(id);
            assert_eq!(entry.map(|e| e.last_result), result, "{id}");
            assert_eq!(entry.and_then(|e| e.note.as_deref()), note, "{id}");
        }
        assert_eq!(
            fs::read_to_string(f.ctx.log_path("10-a")).unwrap(),
            "partial output\n[killed after the grace period]\n"
        );
    }

    #[test]
    fn prepare_state_dir_creates_status_lock_and_output() {
        let f = Fixture::new();
        let ctx = Context {
            state_dir: f.ctx.state_dir.join("deep/er"),
            ..f.ctx.clone()
        };
        prepare_state_dir(&ctx, None).unwrap();
        for path in [
            ctx.status_path(),
            StatusStore::for_context(&ctx).lock_path(),
            ctx.state_dir.join("output"),
        ] {
            assert!(path.exists(), "{}", path.display());
        }
        assert_eq!(
            StatusStore::for_context(&ctx).load().unwrap(),
            Status::default()
        );
    }

    #[test]
    fn credentials_switch_only_for_user_hooks_run_by_root() {
        let other = Credentials {
            user: "someone".into(),
            uid: 4242,
            gid: 4242,
            groups: vec![4242],
            home: "/home/someone".into(),
            shell: "/bin/sh".into(),
        };
        let root = Uid::effective().is_root();
        // A root hook switches to root's own account: the thread may be acting as the user.
        for (run_as, user, switches_to) in [
            (RunAs::Root, Some(&other), root.then_some(0)),
            (RunAs::Root, None, None),
            (RunAs::User, Some(&other), root.then_some(4242)),
            (RunAs::User, None, None),
        ] {
            assert_eq!(
                credentials_for(run_as, user).map(|c| c.uid),
                switches_to,
                "{run_as:?} {user:?}"
            );
        }
    }

    /// An unprivileged account with no passwd entry, for the tests that run as root.
    fn someone() -> Credentials {
        Credentials {
            user: "someone".into(),
            uid: 4242,
            gid: 4343,
            groups: vec![4343],
            home: "/nonexistent".into(),
            shell: "/bin/sh".into(),
        }
    }

    #[test]
    fn root_makes_nothing_in_a_sticky_directory_the_user_owns() {
        if !Uid::effective().is_root() {
            assert!(std::env::var_os("CI").is_none(), "CI must run this as root");
            eprintln!("note: needs root; skipped");
            return;
        }
        let user = someone();
        let f = Fixture::new();
        fs::set_permissions(f._dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        // The user's own home, sticky and read-only to it: the sticky bit does not stop its
        // owner from moving entries, so root must not create anything there; the user cannot.
        let home = f._dir.path().join("home");
        fs::create_dir(&home).unwrap();
        std::os::unix::fs::lchown(&home, Some(4242), Some(4343)).unwrap();
        fs::set_permissions(&home, fs::Permissions::from_mode(0o1555)).unwrap();
        let ctx = Context {
            state_dir: home.join(".discobot/s/hooks"),
            ..f.ctx.clone()
        };
        let prepared = std::thread::scope(|s| {
            s.spawn(|| prepare_state_dir(&ctx, Some(&user)))
                .join()
                .unwrap()
        });
        assert!(prepared.is_err(), "{prepared:?}");
        assert!(!home.join(".discobot").exists());
    }

    #[test]
    fn root_prepares_a_state_dir_as_the_user_and_follows_no_planted_link() {
        if !Uid::effective().is_root() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run this test as root"
            );
            eprintln!("note: needs root; skipped");
            return;
        }
        use std::os::unix::fs::MetadataExt;
        let user = someone();
        let f = Fixture::new();
        fs::set_permissions(f._dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        // Missing directories under root's: made by root for the user, the rest by the user.
        let ctx = Context {
            state_dir: f._dir.path().join("state/deep"),
            ..f.ctx.clone()
        };
        // A separate thread: acting as the user changes the calling thread's credentials.
        let prepared = std::thread::scope(|s| {
            s.spawn(|| prepare_state_dir(&ctx, Some(&user)))
                .join()
                .unwrap()
        });
        prepared.unwrap();
        for path in [
            "state",
            "state/deep",
            "state/deep/output",
            "state/deep/status.json",
        ] {
            let meta = fs::symlink_metadata(f._dir.path().join(path)).unwrap();
            assert_eq!((meta.uid(), meta.gid()), (4242, 4343), "{path}");
        }

        // The user points its state dir's output at a directory of root's: nothing is made there.
        let root_only = f._dir.path().join("root-only");
        fs::create_dir(&root_only).unwrap();
        fs::set_permissions(&root_only, fs::Permissions::from_mode(0o700)).unwrap();
        let planted = f._dir.path().join("planted");
        fs::create_dir(&planted).unwrap();
        std::os::unix::fs::lchown(&planted, Some(4242), Some(4343)).unwrap();
        std::os::unix::fs::symlink(&root_only, planted.join("output")).unwrap();
        let ctx = Context {
            state_dir: planted.clone(),
            ..f.ctx.clone()
        };
        f.hook("10-a.sh", "", "echo hello");
        let plan = f.plan();
        let options = SessionOptions {
            user: Some(user.clone()),
            ..SessionOptions::default()
        };
        let runs = std::thread::scope(|s| {
            s.spawn(|| {
                prepare_state_dir(&ctx, Some(&user)).unwrap();
                run_session(&ctx, &plan.background, &options, |_| {})
            })
            .join()
            .unwrap()
        });
        // The log cannot be made where the link points: the run fails, saying why.
        assert!(!runs[0].success, "{runs:?}");
        let note = runs[0].note.as_deref().unwrap_or_default();
        assert!(note.contains("Permission denied"), "{note}");
        assert_eq!(fs::read_dir(&root_only).unwrap().count(), 0);
        assert_eq!(fs::metadata(&root_only).unwrap().uid(), 0);
    }
}

//! The session runner's rules for the run step ([`SessionStep`]): the attempts of one hook,
//! the wait between them and the one log they share (crate::session rules 3, 4 and 6).

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::{Done, finished, run_once};
use crate::account::Credentials;
use crate::context::Context;
use crate::decision::{FinishedRun, Judge};
use crate::exec::{CancelToken, RunOptions, RunOutcome};
use crate::firing::Firing;
use crate::hook::{Hook, RunAs};
use crate::payload::Payload;
use crate::runner::Ran;
use crate::seal::RootImages;
use crate::status::StatusStore;

/// The note of a hook stopped because the session ended under it.
pub const STOPPED_NOTE: &str = "stopped before it finished: the session ended (the agent command exited or the container is stopping)";

/// How [`run_session`](crate::session::run_session) runs the hooks. `SessionOptions::default()` runs them as the current
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
    /// What root hooks run from when this process is root ([`SessionPlan::root_images`](crate::session::SessionPlan::root_images)); a
    /// root hook missing here is not run. Default empty.
    pub root_images: RootImages,
    /// The wait between two attempts of a hook. Default [`Backoff::default`].
    pub backoff: Backoff,
    /// Called as each attempt that ran ends, before the wait, the next attempt or the record:
    /// the init kills what the attempt left running here, and says when it tries again.
    /// Default `None`.
    pub after_attempt: Option<fn(&Attempt<'_>)>,
}

/// The credentials a hook runs with (rule 2): `None` keeps ours.
///
/// Only a root process switches: `run_as: user` to `user` when one is given, `run_as: root`
/// to root's own account (a thread acting as the user must not lend the hook its file-system
/// ids). A process that is not root never switches.
pub fn credentials_for(run_as: RunAs, user: Option<&Credentials>) -> Option<Credentials> {
    if !nix::unistd::Uid::effective().is_root() {
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

/// The session runner's rules for a phase-1 hook with retries (crate::session rules 2, 3, 6):
/// it runs as `user` (root hooks from their sealed image), is tried again after any failure
/// with `backoff`, shows as running once, keeps every attempt in one log, and is recorded
/// once; a cancel or a failed status write is carried on the result instead of ending it.
pub(crate) struct SessionStep<'a> {
    /// The run user, sealed root images, echo, kill grace, backoff and after-attempt callback.
    pub(crate) options: &'a SessionOptions,
    /// The most attempts: one, then the retries.
    pub(crate) attempts: u32,
}

impl SessionStep<'_> {
    /// The run options of `hook`, or why it may not run: a root hook runs only from the bytes
    /// read when the session started, never from a file the agent can change.
    pub(super) fn run_options(
        &self,
        hook: &Hook,
        cancel: &CancelToken,
    ) -> Result<RunOptions, String> {
        let mut options = RunOptions {
            credentials: credentials_for(hook.run_as, self.options.user.as_ref()),
            cancel: Some(cancel.clone()),
            echo_prefix: self.options.echo.then(|| hook.name.clone()),
            ..RunOptions::default()
        };
        if let Some(grace) = self.options.kill_grace {
            options.kill_grace = grace;
        }
        if hook.run_as == RunAs::Root && nix::unistd::Uid::effective().is_root() {
            // Every attempt runs these same bytes.
            match self.options.root_images.get(&hook.id) {
                Some(Ok(image)) => options.sealed = Some(std::sync::Arc::clone(image)),
                Some(Err(reason)) => return Err(reason.clone()),
                None => {
                    return Err(format!(
                        "{}: not run: a root hook runs only from the bytes read when the \
                         session started",
                        hook.path.display()
                    ));
                }
            }
        }
        Ok(options)
    }
}

/// [`run_judged`](super::run_judged) under the session's rules ([`SessionStep`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn run_attempts(
    ctx: &Context,
    hook: &Hook,
    firing: &Firing,
    payload: &Payload,
    store: &StatusStore,
    cancel: &CancelToken,
    step: &SessionStep<'_>,
    judge: &Judge,
) -> Done {
    let mut status_error = store
        .update(|s| s.entry(hook, ctx).begin(SystemTime::now()))
        .err();
    let started = SystemTime::now();
    let of = step.attempts;
    let log = AttemptLog::new(ctx.log_path(&hook.id), of);
    let mut number = 0;
    let (result, attempts) = loop {
        number += 1;
        log.before(number);
        let outcome = match run_once(ctx, hook, firing, payload, cancel, Some(step)) {
            Ok(Ran::Finished(action)) => action.outcome,
            Ok(Ran::Refused(reason)) => break (Err(reason), number - 1),
            Err(e) => {
                // Nothing to add: keep the earlier attempts' log as it was.
                log.restore();
                break (Err(e.to_string()), number);
            }
        };
        let stopped = outcome.cancelled || cancel.is_cancelled();
        let retry_in = (!outcome.success() && !stopped && number < of)
            .then(|| step.options.backoff.before(number + 1));
        if let Some(after) = step.options.after_attempt {
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
            break (Ok(outcome), number);
        };
        if cancel.wait_for(wait) {
            log.append(&format!(
                "[{STOPPED_NOTE}, before attempt {}/{of}]",
                number + 1
            ));
            break (Ok(outcome), number);
        }
    };
    let duration = started.elapsed().unwrap_or_default();
    let now = SystemTime::now();
    let (run, mut note, recorded, phase1) = match result {
        Ok(outcome) => {
            // The signal that ended the session may reach the hook before the cancel does
            // (the init signals every process); it was stopped all the same. So was a run
            // whose wait for its next attempt the cancel ended.
            let note = (outcome.cancelled || !outcome.success() && cancel.is_cancelled())
                .then(|| STOPPED_NOTE.to_owned());
            // The status shows the whole span, every attempt and the waits between them.
            let outcome = RunOutcome {
                duration,
                ..outcome
            };
            let recorded = store.record(ctx, hook, &outcome, note.as_deref(), now);
            (finished(ctx, hook, &outcome), note, recorded, Some(outcome))
        }
        Err(reason) => {
            let recorded =
                store.update(|s| s.entry(hook, ctx).record_unfinished(&reason, duration, now));
            // Not `unfinished`: the log keeps the attempts that ran.
            let run = FinishedRun {
                exit_code: 1,
                timed_out: None,
                stdout: Vec::new(),
                stderr: reason.clone().into_bytes(),
                log_path: Some(ctx.log_path(&hook.id)),
            };
            (run, Some(reason), recorded, None)
        }
    };
    status_error = status_error.or(recorded.err());
    if let Some(e) = status_error {
        let earlier = note.take().map_or(String::new(), |n| format!("{n}; "));
        note = Some(format!("{earlier}not recorded: {e}"));
    }
    Done {
        judgment: judge.judge(&run),
        run,
        produced: Vec::new(),
        phase1,
        session: Some((attempts, note)),
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

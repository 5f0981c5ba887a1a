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
//!    A root process runs a root hook only from the bytes it read into a
//!    [`SealedScript`](crate::seal::SealedScript) when the plan was made, and only as `--root-hooks`
//!    ([`RootHooks`](crate::seal::RootHooks)) allows.
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
//!
//! 7. Hooks of the event model bound to `session.start` (docs/EVENTS.md §2.1: `type: session` ≡
//!    `event: session.start`; a declarative `.yml`, or a script using `when`, `await`, …) are
//!    fired through the event dispatcher after the phase-1 hooks of the same pass: the `await:
//!    true` ones before the agent starts, the others beside it ([`fire_session_start`]). They
//!    never run as root: `run_as` is a phase-1 field, so the caller fires them from a process
//!    that is the run user for good (the init's runner drops root first), or not at all.
//!
//! This file holds the rules and the run of a session; each step lives in a module of its own:
//! `plan` picks the hooks and seals the root ones (rule 1), `retry` makes the attempts of one
//! hook and puts their log together (rules 3 and 6), and `state_dir` prepares the state dir
//! as the run user (rule 5).
//!
//! [`DEFAULT_RETRIES`]: crate::policy::DEFAULT_RETRIES

mod plan;
#[cfg(test)]
mod retry;
mod state_dir;

use std::fmt;
use std::fs::OpenOptions;
use std::io::{self, Write};
use std::path::PathBuf;
use std::time::SystemTime;

pub use self::plan::SessionPlan;
pub use self::state_dir::prepare_state_dir;
use crate::account::Credentials;
use crate::context::Context;
use crate::decision::Reply;
use crate::discover::Discovery;
use crate::event::Event;
use crate::exec::{CancelToken, RunOutcome};
pub use crate::fire::attempts::{Attempt, Backoff, STOPPED_NOTE, SessionOptions, credentials_for};
use crate::fire::{Done, FireError, SessionStep, run_judged_with};
use crate::firing::Firing;
use crate::hook::Hook;
pub use crate::seal::RootImages;
use crate::status::{RunResult, StatusError, StatusStore};
use crate::user_fs::act_as;

/// A session hook, with what only session hooks have.
#[derive(Debug, Clone)]
pub struct SessionHook {
    /// The hook.
    pub hook: Hook,
    /// How many times a failed run is tried again (front matter `retries`): `retries: 0` runs it
    /// once, `retries: 2` at most three times. Default
    /// [`DEFAULT_RETRIES`](crate::policy::DEFAULT_RETRIES).
    pub retries: u32,
}

impl SessionHook {
    /// The most attempts a run makes: one, then the retries.
    pub fn attempts(&self) -> u32 {
        self.retries.saturating_add(1)
    }
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

/// Runs `hooks` one after the other (rules 2-4, 6), each up to its retries, recording each
/// run once in `status.json` and calling `on_finish` as each ends. Stops early only when
/// `options.cancel` is cancelled; the hooks not started then are neither run nor recorded.
///
/// A status that cannot be written does not stop the hooks; `on_finish` sees the run anyway and
/// the returned runs carry the error in their note.
///
/// Each hook runs through the event dispatcher's run step under the session's rules (the
/// step's `SessionStep`). The calling thread acts on the file system as `options.user` for
/// the whole call (rule 5).
pub fn run_session(
    ctx: &Context,
    hooks: &[SessionHook],
    options: &SessionOptions,
    mut on_finish: impl FnMut(&SessionRun),
) -> Vec<SessionRun> {
    let acting = act_as(options.user.as_ref());
    // Without the run user's credentials nothing is written to the state dir, which the agent
    // can change: a root process never acts there as root (rule 5). The runs are reported,
    // refused, and not recorded.
    let store = StatusStore::for_context(ctx);
    let cancel = options.cancel.clone().unwrap_or_default();
    let firing = Firing::new(Event::SessionStart);
    let payload = crate::fire::payload(ctx, &firing, None);
    let mut runs = Vec::with_capacity(hooks.len());
    for session_hook in hooks {
        let hook = &session_hook.hook;
        if cancel.is_cancelled() {
            break;
        }
        let step = SessionStep {
            options,
            attempts: session_hook.attempts(),
        };
        let done = match &acting {
            Err(e) => Err(format!(
                "not run and not recorded: cannot act as the run user on the state dir: {e}"
            )),
            Ok(_) => run_judged_with(ctx, hook, &firing, &payload, &store, &cancel, Some(&step))
                .map_err(|e| e.to_string()),
        };
        let run = match done {
            Ok(Some(Done {
                phase1,
                session: Some((attempts, note)),
                ..
            })) => SessionRun {
                hook_id: hook.id.clone(),
                hook_name: hook.name.clone(),
                exit_code: phase1.as_ref().map(|o| o.exit_code),
                success: phase1.as_ref().is_some_and(RunOutcome::success),
                timed_out: phase1.as_ref().is_some_and(|o| o.timed_out),
                note,
                log_path: ctx.log_path(&hook.id),
                attempts,
            },
            // Every session hook is a phase-1 script, which the step always runs.
            Ok(_) => continue,
            Err(reason) => SessionRun {
                hook_id: hook.id.clone(),
                hook_name: hook.name.clone(),
                exit_code: None,
                success: false,
                timed_out: false,
                note: Some(reason),
                log_path: ctx.log_path(&hook.id),
                attempts: 0,
            },
        };
        on_finish(&run);
        runs.push(run);
    }
    runs
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

/// Fires `session.start` for the event hooks of `discovery` whose `await` is `awaited` (rule
/// 7), in this process, as whoever it is; returns `None` when there is no such hook. The caller
/// reads the hooks as the user who runs them (the init's runner after it dropped root).
pub fn fire_session_start(
    ctx: &Context,
    discovery: &Discovery,
    awaited: bool,
    cancel: Option<CancelToken>,
) -> Result<Option<Reply>, FireError> {
    let hooks = Discovery {
        hooks: discovery
            .event_hooks()
            .filter(|h| h.spec.event == Event::SessionStart && h.spec.await_ == awaited)
            .cloned()
            .collect(),
        ..Discovery::default()
    };
    if hooks.hooks.is_empty() {
        return Ok(None);
    }
    let mut firing = Firing::new(Event::SessionStart);
    firing.cancel = cancel;
    crate::fire::fire_hooks(ctx, &hooks, &firing, |_| {}).map(Some)
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::time::Duration;

    use nix::unistd::Uid;

    use super::*;
    use crate::discover::discover;
    use crate::event::HookKind;
    use crate::hook::RunAs;
    use crate::status::Status;

    /// A workspace with a hooks dir and a state dir, in a temporary directory.
    pub(super) struct Fixture {
        pub(super) _dir: tempfile::TempDir,
        pub(super) ctx: Context,
    }

    impl Fixture {
        pub(super) fn new() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let ctx = crate::context::test_context(dir.path());
            Fixture { _dir: dir, ctx }
        }

        pub(super) fn hook(&self, file: &str, front: &str, body: &str) {
            let path = self.ctx.hooks_dir().join(file);
            fs::write(
                &path,
                format!("#!/bin/sh\n#---\n# type: session\n{front}#---\n{body}\n"),
            )
            .unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }

        pub(super) fn plan(&self) -> SessionPlan {
            let discovery = discover(&self.ctx.hooks_dir());
            assert!(discovery.problems.is_empty(), "{:?}", discovery.problems);
            SessionPlan::new(&discovery)
        }

        pub(super) fn status(&self) -> Status {
            StatusStore::for_context(&self.ctx).load().unwrap()
        }
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
                done.record(&RunOutcome::default(), SystemTime::now());
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

    /// Root that cannot take the run user's file-system credentials (here: more supplementary
    /// groups than the kernel takes) writes nothing in the state dir: the hook is refused and
    /// the run reported, not recorded as root.
    #[test]
    fn nothing_is_written_as_root_when_the_run_user_cannot_be_acted_as() {
        if !Uid::effective().is_root() {
            assert!(
                std::env::var_os("CI").is_none_or(|v| v != "true"),
                "CI=true but not root: cannot test acting as another user"
            );
            return;
        }
        let f = Fixture::new();
        f.hook("10-user.sh", "", "echo ran");
        let unusable = Credentials {
            user: "many-groups".into(),
            uid: 4242,
            gid: 4242,
            groups: (0..70_000).collect(),
            home: "/nonexistent".into(),
            shell: "/bin/sh".into(),
        };
        let options = SessionOptions {
            user: Some(unusable),
            ..SessionOptions::default()
        };
        let runs = run_session(&f.ctx, &f.plan().background, &options, |_| {});
        assert_eq!(runs.len(), 1);
        let note = runs[0].note.as_deref().unwrap_or_default();
        assert!(
            note.starts_with("not run and not recorded: cannot act as the run user"),
            "{note}"
        );
        assert!(!runs[0].success);
        assert!(
            !f.ctx.status_path().exists(),
            "status.json was written as root"
        );
        assert!(!f.ctx.log_path("10-user").exists(), "the hook ran");
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
}

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
//!    killed. A failure is recorded and reported and never stops the hooks after it.
//! 4. Every run is recorded in `status.json` as type `session`: `running` when it starts, then
//!    its result. A run stopped because the session ended (the agent command exited or the
//!    container is stopping) is a failure with a `note` field saying so, and so is a run whose
//!    runner was killed before it could record it ([`fail_interrupted`]).
//! 5. When root runs hooks for an unprivileged user, it acts on the state dir with that user's
//!    file-system credentials ([`act_as`](crate::act_as)): what it creates is the user's, and a
//!    link the agent planted there leads nowhere the user could not go. Nothing is chowned.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, lchown};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use nix::unistd::Uid;
use serde_json::Value;

use crate::context::Context;
use crate::discover::Discovery;
use crate::exec::{CancelToken, Credentials, RunOptions, run_hook};
use crate::hook::{Hook, HookKind, RunAs};
use crate::seal::{RootHooks, SealedScript};
use crate::status::{RunResult, StatusError, StatusStore};
use crate::user_fs::{act_as, guarded_by_sticky, writable_by};

/// The field of a `status.json` entry that says why a run ended the way it did, when the exit
/// code alone does not (an extra field; discobot's dashboards ignore it).
pub const NOTE_FIELD: &str = "note";

/// The note of a hook stopped because the session ended under it.
pub const STOPPED_NOTE: &str = "stopped before it finished: the session ended (the agent command exited or the container is stopping)";

/// The session hooks of a workspace, split the way they run (rule 1 of the module docs).
#[derive(Debug, Clone, Default)]
pub struct SessionPlan {
    /// Hooks with `blocking: true`, and every `run_as: root` hook, in order: they finish before
    /// the agent command starts.
    pub blocking: Vec<Hook>,
    /// The other session hooks, in order: they run while the agent command starts.
    pub background: Vec<Hook>,
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
            if hook.blocking || root {
                plan.blocking.push(hook.clone());
            } else {
                plan.background.push(hook.clone());
            }
        }
        plan
    }

    /// Every session hook in the order `hookvisor session` runs them: blocking ones first.
    pub fn all(&self) -> impl Iterator<Item = &Hook> {
        self.blocking.iter().chain(&self.background)
    }

    /// True when there is no session hook at all.
    pub fn is_empty(&self) -> bool {
        self.blocking.is_empty() && self.background.is_empty()
    }

    /// True when some hook asks for root but this process is not root, so it will run
    /// unprivileged; callers print one warning for it.
    pub fn unprivileged_root_hooks(&self) -> bool {
        !Uid::effective().is_root() && self.all().any(|h| h.run_as == RunAs::Root)
    }
}

/// How [`run_session`] runs the hooks. `SessionOptions::default()` runs them as the current
/// user, with no way to stop them early, without echo.
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

/// Runs `hooks` one after the other (rules 2-4), recording each in `status.json` and calling
/// `on_finish` as each ends. Stops early only when `options.cancel` is cancelled; the hooks not
/// started then are neither run nor recorded.
///
/// A status that cannot be written does not stop the hooks; `on_finish` sees the run anyway and
/// the returned runs carry the error in their note.
///
/// The calling thread acts on the file system as `options.user` for the whole call (rule 5).
pub fn run_session(
    ctx: &Context,
    hooks: &[Hook],
    options: &SessionOptions,
    mut on_finish: impl FnMut(&SessionRun),
) -> Vec<SessionRun> {
    let store = StatusStore::for_context(ctx);
    let acting = act_as(options.user.as_ref());
    let mut runs = Vec::with_capacity(hooks.len());
    for hook in hooks {
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
        let result = match refused {
            Some(reason) => Err(reason),
            None => run_hook(ctx, hook, &[], &run_options).map_err(|e| e.to_string()),
        };
        let mut run = match result {
            Ok(outcome) => SessionRun {
                hook_id: hook.id.clone(),
                hook_name: hook.name.clone(),
                exit_code: Some(outcome.exit_code),
                success: outcome.success(),
                timed_out: outcome.timed_out,
                // The signal that ended the session may reach the hook before the cancel
                // does (the init signals every process); it was stopped all the same.
                note: (outcome.cancelled || !outcome.success() && cancelled(options))
                    .then(|| STOPPED_NOTE.to_owned()),
                log_path: ctx.log_path(&hook.id),
            },
            Err(reason) => SessionRun {
                hook_id: hook.id.clone(),
                hook_name: hook.name.clone(),
                exit_code: None,
                success: false,
                timed_out: false,
                note: Some(reason),
                log_path: ctx.log_path(&hook.id),
            },
        };
        let duration = started.elapsed().unwrap_or_default();
        let recorded = store.update(|s| {
            let entry = s.entry(hook, ctx);
            entry.finish(
                run.exit_code,
                run.success,
                run.timed_out,
                duration,
                SystemTime::now(),
            );
            set_note(&mut entry.extra, run.note.as_deref());
        });
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
                .and_then(crate::status::parse_rfc3339)
                .unwrap_or(now);
            let entry = s.entry(hook, ctx);
            entry.finish(
                None,
                false,
                false,
                now.duration_since(started).unwrap_or_default(),
                now,
            );
            set_note(&mut entry.extra, Some(note));
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
    let output = ctx.state_dir.join("output");
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

fn set_note(extra: &mut serde_json::Map<String, Value>, note: Option<&str>) {
    match note {
        Some(note) => {
            extra.insert(NOTE_FIELD.to_owned(), Value::String(note.to_owned()));
        }
        None => {
            extra.remove(NOTE_FIELD);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

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
        let ids = |hooks: &[Hook]| hooks.iter().map(|h| h.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&plan.blocking), ["20-b", "30-c"]);
        assert_eq!(ids(&plan.background), ["10-a"]);
        let all: Vec<_> = plan.all().map(|h| h.id.as_str()).collect();
        assert_eq!(all, ["20-b", "30-c", "10-a"]);
    }

    #[test]
    fn a_failing_hook_is_recorded_and_does_not_stop_the_rest() {
        let f = Fixture::new();
        f.hook("10-fails.sh", "", "echo broken; exit 3");
        f.hook("20-slow.sh", "# timeout: 1\n", "exec sleep 30");
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
            assert!(!entry.extra.contains_key(NOTE_FIELD), "{id}");
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
        assert_eq!(entry.extra[NOTE_FIELD], STOPPED_NOTE);
        assert!(!status.hooks.contains_key("20-never"));
    }

    #[test]
    fn interrupted_runs_become_failures_with_the_note() {
        let f = Fixture::new();
        f.hook("10-a.sh", "", "true");
        f.hook("20-b.sh", "", "true");
        f.hook("30-c.sh", "", "true");
        let plan = f.plan();
        let hooks = &plan.background;
        let store = StatusStore::for_context(&f.ctx);
        store
            .update(|s| {
                s.entry(&hooks[0], &f.ctx).begin(SystemTime::now());
                let done = s.entry(&hooks[1], &f.ctx);
                done.begin(SystemTime::now());
                done.finish(0, true, false, Duration::ZERO, SystemTime::now());
            })
            .unwrap();
        fs::create_dir_all(f.ctx.log_path("x").parent().unwrap()).unwrap();
        fs::write(f.ctx.log_path("10-a"), "partial output\n").unwrap();

        let failed =
            fail_interrupted(&f.ctx, hooks, "killed after the grace period", None).unwrap();
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
            assert_eq!(
                entry.and_then(|e| e.extra.get(NOTE_FIELD)?.as_str()),
                note,
                "{id}"
            );
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

    #[test]
    fn root_makes_nothing_in_a_sticky_directory_the_user_owns() {
        if !Uid::effective().is_root() {
            assert!(std::env::var_os("CI").is_none(), "CI must run this as root");
            eprintln!("note: needs root; skipped");
            return;
        }
        let user = Credentials {
            user: "someone".into(),
            uid: 4242,
            gid: 4343,
            groups: vec![4343],
            home: "/nonexistent".into(),
            shell: "/bin/sh".into(),
        };
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
        let user = Credentials {
            user: "someone".into(),
            uid: 4242,
            gid: 4343,
            groups: vec![4343],
            home: "/nonexistent".into(),
            shell: "/bin/sh".into(),
        };
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

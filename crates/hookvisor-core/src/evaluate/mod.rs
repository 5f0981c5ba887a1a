//! End-of-turn evaluation of file hooks.
//!
//! The steps, written once here (DESIGN.md, "End-of-turn evaluation"):
//!
//! 1. The cutoff `t0` is taken before scanning. Changed files are the dirty files (see
//!    [`crate::scan`]) whose mtime or ctime is at or after the previous evaluation's cutoff, plus
//!    deletions noticed since then.
//! 2. Each file hook whose pattern matches a changed file joins the pending set (kept in
//!    `status.json`, so it survives restarts).
//! 3. Pending hooks are taken in discovery (file name) order. A hook whose pattern now matches no
//!    dirty file leaves the pending set without running. A hook that already ran runs again only
//!    when a file matching its pattern changed since its own cutoff, taken just before that run:
//!    the same inputs give the same failure, so an unchanged workspace re-prompts nothing.
//! 4. The first failure stops the evaluation. With `notify_llm` the action is `reprompt` and the
//!    message says what failed; without it, `failed`. A success leaves the pending set.
//! 5. The loop guard counts consecutive hook-triggered turns: a `user` turn resets it to 0, a
//!    `hook` turn adds one. A failure re-prompts while the count is below `max_retries`;
//!    otherwise the action is `gave_up` and the hook stays pending for the next user turn.
//! 6. A cancel (a user message arriving) kills the running hook's process group; the hook goes
//!    back to pending and nothing else is recorded for it.
//! 7. Files of the hooks directory that do not load (a [`Problem`] of discovery) are all in the
//!    report's `problems`. Those the model broke re-prompt like a failing hook, under the same
//!    loop guard: a file that changed this turn (step 1's changed set, so at the first
//!    evaluation every dirty file), or whose problem was not there at the previous evaluation
//!    (a broken file committed in the turn, a new file taking its id). Any other problem is
//!    older than the turn: it is reported, never re-prompted. The re-prompt names the files
//!    before a failing hook's message, if there is one.
//!
//! The action is `pass` when the evaluation ran no failing hook and re-prompts for no hook
//! file, even if hooks stay pending or other files do not load.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;
use std::time::SystemTime;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::change_watch::{ChangeWatcher, ScanKind};
use crate::changes::{self, ChangeScan, DirtyFile, FileState, ScanOptions, Timestamp};
use crate::context::Context;
use crate::discover::{Discovery, discover};
use crate::exec::{CancelToken, ExecError, RunOptions, RunOutcome, run_hook};
use crate::hook::{Hook, HookKind, Problem, ProblemKind};
use crate::message::{Failure, broken_hooks_message};
use crate::state::{Durability, write_atomic};
use crate::status::{RunResult, Status, StatusError, StatusStore};
use crate::timestamp::rfc3339;

/// Who started the turn that just ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    /// A user message: the loop guard starts again.
    User,
    /// A re-prompt from a failing hook: the loop guard counts it.
    Hook,
}

/// Options of one evaluation.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// What started the turn that just ended. Default: [`Trigger::User`].
    pub trigger: Trigger,
    /// Hook-triggered re-prompts allowed per user turn. Default: 3.
    pub max_retries: u32,
    /// Cancels the evaluation, killing the running hook. Default: none.
    pub cancel: Option<CancelToken>,
}

impl Default for EvalOptions {
    fn default() -> Self {
        EvalOptions {
            trigger: Trigger::User,
            max_retries: 3,
            cancel: None,
        }
    }
}

/// What the agent should do after the turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Action {
    /// Nothing failed: let the agent stop.
    Pass,
    /// A hook failed and the model should fix it: send the message as a new prompt.
    Reprompt,
    /// A hook with `notify_llm: false` failed: record it, do not re-prompt.
    Failed,
    /// The loop guard ran out: stop re-prompting until the next user turn.
    GaveUp,
}

/// One hook run of an evaluation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookResult {
    /// The hook's id.
    pub hook_id: String,
    /// Its exit status.
    pub exit_code: i32,
    /// Whether it passed.
    pub success: bool,
    /// Whether it was killed for exceeding its timeout.
    pub timed_out: bool,
    /// The files it ran on, workspace-relative, exactly as named on disk. In JSON a name that is
    /// not UTF-8 shows its bad bytes as U+FFFD; the hook itself got the exact bytes.
    #[serde(serialize_with = "lossy")]
    pub files: Vec<PathBuf>,
}

/// Paths as strings, bytes that are not UTF-8 replaced by U+FFFD (`Path`'s own `Serialize`
/// fails on them, and the eval JSON must always be written).
fn lossy<S: Serializer>(paths: &[PathBuf], serializer: S) -> Result<S::Ok, S::Error> {
    serializer.collect_seq(paths.iter().map(|p| p.to_string_lossy()))
}

/// The outcome of an evaluation, serialised as DESIGN.md's eval JSON.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EvalReport {
    /// What the agent should do.
    pub action: Action,
    /// The re-prompt text when `action` is `reprompt`.
    pub message: Option<String>,
    /// The re-prompt number this failure would be (1 after a user turn).
    pub attempt: u32,
    /// Re-prompts allowed per user turn.
    pub max_attempts: u32,
    /// Hooks still pending after the evaluation.
    pub pending: Vec<String>,
    /// The hooks that ran, in order.
    pub results: Vec<HookResult>,
    /// Every file of the hooks directory that does not load, as `hookvisor check` lists it
    /// (module step 7), whether or not it re-prompts.
    #[serde(default, deserialize_with = "read_problems")]
    pub problems: Vec<Problem>,
    /// The failure behind `message`, for callers that must shorten it.
    #[serde(skip)]
    pub failure: Option<Failure>,
    /// The hook files behind `message` (paths workspace-relative), for callers that must
    /// shorten it; a subset of `problems`.
    #[serde(skip)]
    pub broken: Vec<Problem>,
}

impl EvalReport {
    /// The message shortened to `limit` characters (an agent's limit), keeping the log path.
    pub fn message_within(&self, limit: usize) -> Option<String> {
        let message = self.message.as_ref()?;
        if self.broken.is_empty() {
            return Some(match &self.failure {
                Some(failure) => failure.message_within(limit),
                None => message.chars().take(limit).collect(),
            });
        }
        let head = broken_hooks_message(&self.broken, self.attempt, self.max_attempts);
        let used = head.chars().count() + 2;
        Some(match &self.failure {
            Some(failure) if used < limit => {
                format!("{head}\n\n{}", failure.message_within(limit - used))
            }
            _ => head.chars().take(limit).collect(),
        })
    }
}

/// `problems` as a server sends them; a server from before they were reported sends none.
fn read_problems<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Problem>, D::Error> {
    #[derive(Deserialize)]
    struct Sent {
        path: String,
        reason: String,
    }
    let sent = Option::<Vec<Sent>>::deserialize(d)?.unwrap_or_default();
    Ok(sent
        .into_iter()
        .map(|p| Problem {
            path: p.path.into(),
            kind: ProblemKind::Reported(p.reason),
            declared: None,
        })
        .collect())
}

/// Why an evaluation could not complete.
#[derive(Debug, thiserror::Error)]
pub enum EvalError {
    /// status.json could not be read or written.
    #[error(transparent)]
    Status(#[from] StatusError),
    /// Change detection failed.
    #[error(transparent)]
    Changes(#[from] changes::ChangesError),
    /// A hook could not be started at all (its log could not be created, ...).
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The evaluation marker (`.last-eval`) could not be written.
    #[error("cannot write {}: {source}; make the state dir writable or pass --state-dir", path.display())]
    Marker {
        /// The marker's path.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// The evaluation lock (`eval.lock`) could not be created or taken.
    #[error("cannot lock {}: {source}; make the state dir writable or pass --state-dir", path.display())]
    Lock {
        /// The lock's path.
        path: PathBuf,
        /// What the file system said.
        #[source]
        source: std::io::Error,
    },
    /// The evaluation was cancelled; the hook that was running is pending again.
    #[error("evaluation cancelled; the running hook is pending again")]
    Cancelled,
}

/// The evaluator's own state: the previous cutoff and each hook's cutoff, in `<state>/.last-eval`.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Marker {
    /// The cutoff of the previous evaluation.
    cutoff: Option<Timestamp>,
    /// Per file hook: the time taken just before its last run.
    #[serde(default)]
    hooks: BTreeMap<String, Timestamp>,
    /// The problems of the previous evaluation, reason by path (module step 7); `None` before
    /// one recorded them, when no problem counts as new.
    #[serde(default)]
    problems: Option<BTreeMap<String, String>>,
}

impl Marker {
    fn path(ctx: &Context) -> PathBuf {
        ctx.state().eval_marker()
    }

    fn load(ctx: &Context) -> Marker {
        let path = Self::path(ctx);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(
                    "{}: unreadable ({e}); starting without cutoffs, hooks may run again",
                    path.display()
                );
                Marker::default()
            }),
            Err(_) => Marker::default(),
        }
    }

    fn save(&self, ctx: &Context) -> Result<(), EvalError> {
        let path = Self::path(ctx);
        let bytes = serde_json::to_vec(self).expect("a marker always serialises");
        // Losing the cutoffs in a crash only makes hooks run again, so no fsync on every turn.
        write_atomic(&path, &bytes, Durability::Replaceable)
            .map_err(|source| EvalError::Marker { path, source })
    }
}

/// End-of-turn evaluation of one workspace: its context, the hooks (discovered afresh at each
/// turn unless given) and, for a server, a change watcher that keeps the dirty set warm.
///
/// Evaluations and explicit runs of one state dir are serialised by a lock file, across
/// processes; a second one waits.
#[derive(Debug)]
pub struct Evaluator {
    ctx: Context,
    discovery: Option<Discovery>,
    watcher: Option<ChangeWatcher>,
    last_scan: Option<ScanKind>,
}

impl Evaluator {
    /// An evaluator that discovers the hooks and scans the whole workspace at every turn.
    pub fn new(ctx: Context) -> Evaluator {
        Evaluator {
            ctx,
            discovery: None,
            watcher: None,
            last_scan: None,
        }
    }

    /// Evaluates the hooks the caller already discovered instead of discovering them again.
    pub fn with_discovery(mut self, discovery: Discovery) -> Evaluator {
        self.discovery = Some(discovery);
        self
    }

    /// Takes the dirty set from `watcher` (see [`Evaluator::start_watcher`]) instead of a scan.
    pub fn watched(mut self, watcher: ChangeWatcher) -> Evaluator {
        self.watcher = Some(watcher);
        self
    }

    /// Starts a file-system watcher for `ctx`'s workspace, for [`Evaluator::watched`]; it answers
    /// as a full scan would, with the same journal (see [`ChangeWatcher`]).
    pub fn start_watcher(ctx: &Context) -> Result<ChangeWatcher, EvalError> {
        watch_workspace(ctx)
    }

    /// The change watcher, if the evaluator has one.
    pub fn watcher(&self) -> Option<&ChangeWatcher> {
        self.watcher.as_ref()
    }

    /// How the last [`Evaluator::end_turn`] got its dirty set (a server counts them); `None`
    /// before one scanned.
    pub fn last_scan(&self) -> Option<ScanKind> {
        self.last_scan
    }

    /// Runs the end-of-turn evaluation of the file hooks (module docs give the steps).
    pub fn end_turn(&mut self, options: &EvalOptions) -> Result<EvalReport, EvalError> {
        let _lock = EvalLock::acquire(&self.ctx)?;
        let scan = match self.watcher.as_mut() {
            Some(watcher) => {
                let (scan, kind) = watcher.scan()?;
                self.last_scan = Some(kind);
                scan
            }
            None => {
                let scan = scan_workspace(&self.ctx)?;
                self.last_scan = Some(ScanKind::Full);
                scan
            }
        };
        match &self.discovery {
            Some(discovery) => evaluate_scan(&self.ctx, discovery, &scan, options),
            None => evaluate_scan(&self.ctx, &discover(&self.ctx.hooks_dir()), &scan, options),
        }
    }

    /// Runs one hook now, whatever its kind, and records it (`hookvisor run`, the HTTP rerun).
    ///
    /// A file hook runs with the dirty files matching its pattern (from a full scan) and leaves
    /// the pending set on success; its cutoff moves as if an evaluation had run it.
    pub fn run_now(
        &self,
        hook: &Hook,
        cancel: Option<&CancelToken>,
    ) -> Result<HookResult, EvalError> {
        run_now(&self.ctx, hook, cancel)
    }
}

/// Scans the workspace for changes, keeping the scan journal in the state dir.
fn scan_workspace(ctx: &Context) -> Result<ChangeScan, EvalError> {
    Ok(changes::scan_with(
        &ctx.workspace,
        &journal_path(ctx),
        &scan_options(ctx),
    )?)
}

/// Starts a file-system watcher that keeps the workspace's dirty set warm, for a server; it
/// answers as [`scan_workspace`] would, with the same journal (see [`ChangeWatcher`]).
fn watch_workspace(ctx: &Context) -> Result<ChangeWatcher, EvalError> {
    Ok(ChangeWatcher::start(
        &ctx.workspace,
        &journal_path(ctx),
        scan_options(ctx),
        ctx.state().cookie_dir(),
    )?)
}

fn journal_path(ctx: &Context) -> PathBuf {
    ctx.state().changes_journal()
}

/// The state dir is never part of the dirty set, even when it lives in the workspace.
fn scan_options(ctx: &Context) -> ScanOptions {
    ScanOptions {
        exclude: vec![ctx.state_dir.clone()],
        ..ScanOptions::default()
    }
}

/// The evaluation on a discovery and a scan; the caller holds an [`EvalLock`].
fn evaluate_scan(
    ctx: &Context,
    discovery: &Discovery,
    scan: &ChangeScan,
    options: &EvalOptions,
) -> Result<EvalReport, EvalError> {
    let store = StatusStore::for_context(ctx);
    let mut marker = Marker::load(ctx);
    let file_hooks: Vec<&Hook> = discovery.of_kind(HookKind::File).collect();

    // Steps 1, 2 and 5 (counting): one read-modify-write of status.json.
    let changed: Vec<&DirtyFile> = scan.changed_since(marker.cutoff).collect();
    let broken = broken_this_turn(ctx, discovery, &changed, marker.problems.as_ref());
    let (hook_turns, nothing_pending, status) = store.update(|status| {
        status.consecutive_hook_turns = match options.trigger {
            Trigger::User => 0,
            Trigger::Hook => status.consecutive_hook_turns.saturating_add(1),
        };
        for hook in &file_hooks {
            let entry = status.entry(hook, ctx);
            if entry.last_result == RunResult::Running {
                // Left running by an evaluation that died: only evaluations run file hooks,
                // and we hold the evaluation lock.
                entry.last_result = RunResult::Pending;
            }
            if changed.iter().any(|f| hook.matches(&f.path)) {
                status.set_pending(&hook.id, true);
            }
        }
        let known: Vec<String> = file_hooks.iter().map(|h| h.id.clone()).collect();
        status.pending_hooks.retain(|id| known.contains(id));
        let nothing_pending = status.pending_hooks.is_empty();
        if nothing_pending {
            // Nothing will run: this is the evaluation's only write of status.json.
            status.last_evaluated_at = Some(rfc3339(SystemTime::now()));
        }
        (
            status.consecutive_hook_turns,
            nothing_pending,
            status.clone(),
        )
    })?;
    marker.cutoff = Some(scan.cutoff);
    // The files to re-prompt for count as seen only once this evaluation has said so: a cancel
    // must not lose them, and the cutoff has moved past their change.
    marker.problems = Some(seen_problems(ctx, discovery, &broken));
    marker.save(ctx)?;

    let attempt = hook_turns.saturating_add(1);
    let mut report = EvalReport {
        action: Action::Pass,
        message: None,
        attempt,
        max_attempts: options.max_retries,
        pending: Vec::new(),
        results: Vec::new(),
        problems: discovery.problems.clone(),
        failure: None,
        broken: Vec::new(),
    };
    if !nothing_pending {
        run_pending(
            ctx,
            status,
            &mut marker,
            scan,
            &file_hooks,
            options,
            &mut report,
        )?;
    }

    // Step 7: hook files the model broke re-prompt like a failing hook, under the same guard.
    if !broken.is_empty() {
        marker.problems = Some(seen_problems(ctx, discovery, &[]));
        marker.save(ctx)?;
    }
    if !broken.is_empty() && report.action != Action::GaveUp {
        if attempt <= options.max_retries {
            let head = broken_hooks_message(&broken, attempt, options.max_retries);
            report.message = Some(match &report.failure {
                Some(failure) => format!("{head}\n\n{}", failure.message()),
                None => head,
            });
            report.action = Action::Reprompt;
            report.broken = broken;
        } else {
            report.action = Action::GaveUp;
        }
    }
    Ok(report)
}

/// Module step 7: the problems of the hook files the model broke, paths workspace-relative.
fn broken_this_turn(
    ctx: &Context,
    discovery: &Discovery,
    changed: &[&DirtyFile],
    before: Option<&BTreeMap<String, String>>,
) -> Vec<Problem> {
    let hooks_dir = ctx.hooks_dir();
    discovery
        .problems
        .iter()
        .filter(|p| p.path.parent() == Some(hooks_dir.as_path()))
        .filter_map(|p| {
            let relative = p.path.strip_prefix(&ctx.workspace).ok()?;
            let touched = changed.iter().any(|f| f.path == relative);
            let new = before.is_some_and(|before| {
                before.get(p.path.to_string_lossy().as_ref()) != Some(&p.kind.to_string())
            });
            (touched || new).then(|| Problem {
                path: relative.to_owned(),
                ..p.clone()
            })
        })
        .collect()
}

/// The problems to remember as seen by this evaluation, reason by path, but for `unsaid` (with
/// workspace-relative paths, as [`broken_this_turn`] gives them).
fn seen_problems(
    ctx: &Context,
    discovery: &Discovery,
    unsaid: &[Problem],
) -> BTreeMap<String, String> {
    discovery
        .problems
        .iter()
        .filter(|p| !unsaid.iter().any(|u| ctx.workspace.join(&u.path) == p.path))
        .map(|p| (p.path.to_string_lossy().into_owned(), p.kind.to_string()))
        .collect()
}

/// Steps 3 and 4: runs the pending hooks in discovery order, stopping at the first failure,
/// and records the outcome in `report`; a failure re-prompts while `report.attempt` is within
/// `max_retries` (step 5).
///
/// `status` is the one the evaluation loaded, replaced by what each write returns, instead of
/// a read of `status.json` per hook. That loses nothing: every write still merges under the
/// store's lock, and the pending set changes only under the evaluation lock we hold (startup
/// recovery aside, which runs before any evaluation).
fn run_pending(
    ctx: &Context,
    mut status: Status,
    marker: &mut Marker,
    scan: &ChangeScan,
    file_hooks: &[&Hook],
    options: &EvalOptions,
    report: &mut EvalReport,
) -> Result<(), EvalError> {
    let store = &StatusStore::for_context(ctx);
    for &hook in file_hooks {
        if !status.is_pending(&hook.id) {
            continue;
        }
        let dirty: Vec<&DirtyFile> = scan
            .files
            .iter()
            .filter(|f| hook.matches(&f.path))
            .collect();
        if dirty.is_empty() {
            status = store.update(|s| {
                s.set_pending(&hook.id, false);
                s.clone()
            })?;
            continue;
        }
        let own_cutoff = marker.hooks.get(&hook.id).copied();
        if own_cutoff.is_some()
            && !scan
                .changed_since(own_cutoff)
                .any(|f| hook.matches(&f.path))
        {
            continue;
        }
        let files: Vec<PathBuf> = dirty
            .iter()
            .filter(|f| matches!(f.state, FileState::Present { .. }))
            .map(|f| f.path.clone())
            .collect();
        let cutoff = Timestamp::now();
        let outcome = run_recorded(ctx, store, hook, &files, options.cancel.as_ref())?;
        marker.hooks.insert(hook.id.clone(), cutoff);
        marker.save(ctx)?;
        report.results.push(HookResult {
            hook_id: hook.id.clone(),
            exit_code: outcome.exit_code,
            success: outcome.success(),
            timed_out: outcome.timed_out,
            files: files.clone(),
        });
        if outcome.success() {
            status = store.update(|s| {
                s.set_pending(&hook.id, false);
                s.clone()
            })?;
            continue;
        }
        let failure = Failure {
            hook_name: hook.name.clone(),
            pattern: hook.pattern.as_ref().map(|p| p.as_str().to_owned()),
            files,
            exit_code: outcome.exit_code,
            timed_out_after: outcome.timed_out.then_some(hook.timeout),
            output_tail: outcome.tail.clone(),
            output_cut: outcome.output_bytes > outcome.tail.len() as u64,
            log_path: ctx.log_path(&hook.id),
            attempt: report.attempt,
            max_attempts: options.max_retries,
        };
        if !hook.notify_llm {
            report.action = Action::Failed;
        } else if report.attempt <= options.max_retries {
            report.action = Action::Reprompt;
            report.message = Some(failure.message());
            report.failure = Some(failure);
        } else {
            report.action = Action::GaveUp;
        }
        break;
    }

    report.pending = store.update(|s| {
        s.last_evaluated_at = Some(rfc3339(SystemTime::now()));
        s.pending_hooks.clone()
    })?;
    Ok(())
}

/// Runs one hook with its status entry marked running, then records the outcome. A cancelled
/// run is recorded as pending, not as a failure, and ends the evaluation.
fn run_recorded(
    ctx: &Context,
    store: &StatusStore,
    hook: &Hook,
    files: &[PathBuf],
    cancel: Option<&CancelToken>,
) -> Result<RunOutcome, EvalError> {
    store.update(|s| s.entry(hook, ctx).begin(SystemTime::now()))?;
    let options = RunOptions {
        cancel: cancel.cloned(),
        ..RunOptions::default()
    };
    let outcome = match run_hook(ctx, hook, files, &options) {
        Ok(outcome) => outcome,
        Err(e) => {
            store.update(|s| s.entry(hook, ctx).last_result = RunResult::Pending)?;
            return Err(e.into());
        }
    };
    if outcome.cancelled {
        store.update(|s| {
            s.entry(hook, ctx).last_result = RunResult::Pending;
            s.set_pending(&hook.id, true);
        })?;
        return Err(EvalError::Cancelled);
    }
    store.record(ctx, hook, &outcome, None, SystemTime::now())?;
    Ok(outcome)
}

/// [`Evaluator::run_now`].
fn run_now(
    ctx: &Context,
    hook: &Hook,
    cancel: Option<&CancelToken>,
) -> Result<HookResult, EvalError> {
    let _lock = EvalLock::acquire(ctx)?;
    let store = StatusStore::for_context(ctx);
    let files: Vec<PathBuf> = if hook.kind == HookKind::File {
        scan_workspace(ctx)?
            .files
            .iter()
            .filter(|f| matches!(f.state, FileState::Present { .. }) && hook.matches(&f.path))
            .map(|f| f.path.clone())
            .collect()
    } else {
        Vec::new()
    };
    let cutoff = Timestamp::now();
    let outcome = run_recorded(ctx, &store, hook, &files, cancel)?;
    if hook.kind == HookKind::File {
        let mut marker = Marker::load(ctx);
        marker.hooks.insert(hook.id.clone(), cutoff);
        marker.save(ctx)?;
        if outcome.success() {
            store.update(|s| s.set_pending(&hook.id, false))?;
        }
    }
    Ok(HookResult {
        hook_id: hook.id.clone(),
        exit_code: outcome.exit_code,
        success: outcome.success(),
        timed_out: outcome.timed_out,
        files,
    })
}

/// Serialises evaluations and explicit runs of one state dir, across processes: both move the
/// cutoffs in `.last-eval` and the scan journal. Released on drop.
#[derive(Debug)]
pub(crate) struct EvalLock {
    _file: fs::File,
}

impl EvalLock {
    /// Waits for and takes `<state>/eval.lock`, creating the state dir if needed.
    pub(crate) fn acquire(ctx: &Context) -> Result<EvalLock, EvalError> {
        let path = ctx.state().eval_lock();
        let lock_error = |source| EvalError::Lock {
            path: path.clone(),
            source,
        };
        fs::create_dir_all(&ctx.state_dir).map_err(lock_error)?;
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(lock_error)?;
        file.lock().map_err(lock_error)?;
        Ok(EvalLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    use crate::status::StatusStore;

    /// A workspace outside git (so every file is dirty), its hooks and a log of their runs kept
    /// outside it, so that logging a run is no change.
    struct Fixture {
        _dir: tempfile::TempDir,
        ctx: Context,
        runs: PathBuf,
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
            let runs = dir.path().join("runs");
            Fixture {
                _dir: dir,
                ctx,
                runs,
            }
        }

        /// A file hook on `pattern` that logs its run and fails when a file it got says `bad`.
        fn hook(&self, file: &str, pattern: &str, front: &str) {
            let path = self.ctx.hooks_dir().join(file);
            let script = format!(
                "#!/bin/sh\n#---\n# type: file\n# pattern: '{pattern}'\n{front}#---\n\
                 echo \"$HOOKVISOR_HOOK_ID $DISCOBOT_CHANGED_FILES\" >> '{}'\n\
                 ! grep -q bad $DISCOBOT_CHANGED_FILES\n",
                self.runs.display()
            );
            fs::write(&path, script).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }

        /// What the model does in a turn: writes a file, then lets the file clock tick, so that
        /// a cutoff taken afterwards is strictly later than the write (a write within the
        /// cutoff's own tick counts as a change, by design, and would make runs depend on luck).
        fn write(&self, name: &str, content: &str) {
            fs::write(self.ctx.workspace.join(name), content).unwrap();
            tick();
        }

        fn end_turn(&self, trigger: Trigger, max_retries: u32) -> EvalReport {
            let options = EvalOptions {
                trigger,
                max_retries,
                cancel: None,
            };
            Evaluator::new(self.ctx.clone()).end_turn(&options).unwrap()
        }

        /// The runs so far, one `id files` line each.
        fn runs(&self) -> Vec<String> {
            fs::read_to_string(&self.runs)
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect()
        }
    }

    /// Waits until the coarse clock files are stamped with has moved on.
    fn tick() {
        let start = Timestamp::now();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while Timestamp::now() <= start {
            assert!(
                std::time::Instant::now() < deadline,
                "the coarse clock did not move"
            );
            std::thread::yield_now();
        }
    }

    fn ran(report: &EvalReport) -> Vec<(&str, bool)> {
        report
            .results
            .iter()
            .map(|r| (r.hook_id.as_str(), r.success))
            .collect()
    }

    #[test]
    fn a_failing_hook_stays_pending_until_it_passes_and_an_unrelated_change_runs_nothing() {
        let f = Fixture::new();
        f.hook("check.sh", "*.txt", "");
        f.write("a.txt", "bad\n");

        let report = f.end_turn(Trigger::User, 3);
        assert_eq!(report.action, Action::Reprompt);
        assert_eq!(ran(&report), [("check", false)]);
        assert_eq!(report.results[0].files, [PathBuf::from("a.txt")]);
        assert_eq!(report.pending, ["check"]);
        let message = report.message.unwrap();
        assert!(message.contains("\"check\""), "{message}");

        // Nothing the hook matches changed: the same input would give the same failure.
        f.write("notes.md", "bad\n");
        let report = f.end_turn(Trigger::Hook, 3);
        assert_eq!(report.action, Action::Pass);
        assert!(report.results.is_empty(), "{:?}", report.results);
        assert_eq!(report.pending, ["check"]);
        assert_eq!(f.runs(), ["check a.txt"]);

        f.write("a.txt", "fixed\n");
        let report = f.end_turn(Trigger::Hook, 3);
        assert_eq!(report.action, Action::Pass);
        assert_eq!(ran(&report), [("check", true)]);
        assert!(report.pending.is_empty(), "{:?}", report.pending);
        let status = StatusStore::for_context(&f.ctx).load().unwrap();
        assert!(!status.is_pending("check"));

        // Passed and unchanged: a new turn runs nothing.
        let report = f.end_turn(Trigger::User, 3);
        assert!(report.results.is_empty(), "{:?}", report.results);
        assert_eq!(f.runs(), ["check a.txt", "check a.txt"]);
    }

    #[test]
    fn each_hook_reruns_only_on_changes_after_its_own_run() {
        let f = Fixture::new();
        f.hook("10-text.sh", "*.txt", "");
        f.hook("20-notes.sh", "*.md", "");
        f.write("a.txt", "bad\n");
        f.write("n.md", "bad\n");

        // The first failure stops the evaluation: 20-notes is pending but has not run.
        let report = f.end_turn(Trigger::User, 3);
        assert_eq!(ran(&report), [("10-text", false)]);
        assert_eq!(report.pending, ["10-text", "20-notes"]);

        // No change at all: 10-text saw a.txt already; 20-notes never ran, so n.md, although
        // older than the previous evaluation, is new to it.
        let report = f.end_turn(Trigger::Hook, 3);
        assert_eq!(report.action, Action::Reprompt);
        assert_eq!(ran(&report), [("20-notes", false)]);
        assert_eq!(report.results[0].files, [PathBuf::from("n.md")]);

        // n.md changed after 20-notes ran; a.txt did not change after 10-text ran.
        f.write("n.md", "fixed\n");
        let report = f.end_turn(Trigger::Hook, 3);
        assert_eq!(report.action, Action::Pass);
        assert_eq!(ran(&report), [("20-notes", true)]);
        assert_eq!(report.pending, ["10-text"]);

        f.write("a.txt", "fixed\n");
        let report = f.end_turn(Trigger::User, 3);
        assert_eq!(ran(&report), [("10-text", true)]);
        assert!(report.pending.is_empty(), "{:?}", report.pending);
        assert_eq!(
            f.runs(),
            [
                "10-text a.txt",
                "20-notes n.md",
                "20-notes n.md",
                "10-text a.txt"
            ]
        );
    }

    #[test]
    fn a_file_written_while_its_hook_runs_is_a_change_for_the_next_evaluation() {
        let f = Fixture::new();
        // A formatter: it rewrites the file it checks, after its cutoff was taken.
        let path = f.ctx.hooks_dir().join("format.sh");
        let script = format!(
            "#!/bin/sh\n#---\n# type: file\n# pattern: '*.txt'\n#---\n\
             echo run >> '{}'\necho formatted > a.txt\n",
            f.runs.display()
        );
        fs::write(&path, script).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        f.write("a.txt", "raw\n");

        let report = f.end_turn(Trigger::User, 3);
        assert_eq!(ran(&report), [("format", true)]);
        tick();
        let report = f.end_turn(Trigger::User, 3);
        assert_eq!(ran(&report), [("format", true)]);
        assert_eq!(f.runs().len(), 2);
    }

    #[test]
    fn the_loop_guard_gives_up_after_max_retries_until_the_next_user_turn() {
        let f = Fixture::new();
        f.hook("check.sh", "*.txt", "");
        f.write("a.txt", "bad 0\n");
        let report = f.end_turn(Trigger::User, 2);
        assert_eq!(
            (report.action, report.attempt, report.max_attempts),
            (Action::Reprompt, 1, 2)
        );
        assert!(report.message.unwrap().ends_with("(Attempt 1/2)"));

        f.write("a.txt", "bad 1\n");
        let report = f.end_turn(Trigger::Hook, 2);
        assert_eq!((report.action, report.attempt), (Action::Reprompt, 2));

        // The third hook-triggered turn: the hook runs and fails, but the model is not asked
        // again; the hook stays pending.
        f.write("a.txt", "bad 2\n");
        let report = f.end_turn(Trigger::Hook, 2);
        assert_eq!((report.action, report.attempt), (Action::GaveUp, 3));
        assert_eq!(ran(&report), [("check", false)]);
        assert_eq!(report.message, None);
        assert_eq!(report.pending, ["check"]);

        f.write("a.txt", "bad 3\n");
        let report = f.end_turn(Trigger::Hook, 2);
        assert_eq!((report.action, report.attempt), (Action::GaveUp, 4));

        // A user message starts the count again.
        f.write("a.txt", "bad 4\n");
        let report = f.end_turn(Trigger::User, 2);
        assert_eq!((report.action, report.attempt), (Action::Reprompt, 1));
        assert_eq!(f.runs().len(), 5);
    }

    #[test]
    fn a_hook_that_does_not_notify_the_model_fails_without_a_message() {
        let f = Fixture::new();
        f.hook("quiet.sh", "*.txt", "# notify_llm: false\n");
        f.write("a.txt", "bad\n");
        let report = f.end_turn(Trigger::User, 3);
        assert_eq!(report.action, Action::Failed);
        assert_eq!(report.message, None);
        assert_eq!(report.pending, ["quiet"]);
    }

    #[test]
    fn run_now_moves_the_hooks_cutoff_and_a_pass_leaves_the_pending_set() {
        let f = Fixture::new();
        f.hook("check.sh", "*.txt", "");
        f.write("a.txt", "bad\n");
        assert_eq!(f.end_turn(Trigger::User, 3).action, Action::Reprompt);

        f.write("a.txt", "fixed\n");
        let discovery = discover(&f.ctx.hooks_dir());
        let hook = discovery.get("check").unwrap();
        let result = Evaluator::new(f.ctx.clone()).run_now(hook, None).unwrap();
        assert!(result.success);
        assert_eq!(result.files, [PathBuf::from("a.txt")]);

        let status = StatusStore::for_context(&f.ctx).load().unwrap();
        assert!(!status.is_pending("check"));

        // The fix is a change since the last evaluation, so the hook joins the pending set
        // again (step 2), but the explicit run already saw it: nothing runs (step 3).
        let report = f.end_turn(Trigger::User, 3);
        assert_eq!(report.action, Action::Pass);
        assert!(report.results.is_empty(), "{:?}", report.results);
        assert_eq!(f.runs().len(), 2);
    }

    fn problem(path: &str, reason: &str) -> Problem {
        Problem {
            path: path.into(),
            kind: ProblemKind::Reported(reason.into()),
            declared: None,
        }
    }

    #[test]
    fn problems_travel_as_json_and_an_older_server_sends_none() {
        let old = r#"{"action":"pass","message":null,"attempt":1,"maxAttempts":3,"pending":[],"results":[]}"#;
        let report: EvalReport = serde_json::from_str(old).unwrap();
        assert!(report.problems.is_empty());

        let sent = r#"{"action":"pass","message":null,"attempt":1,"maxAttempts":3,"pending":[],
            "results":[],"problems":[{"path":"/w/.discobot/hooks/x.sh","reason":"bad"}]}"#;
        let report: EvalReport = serde_json::from_str(sent).unwrap();
        assert_eq!(report.problems, [problem("/w/.discobot/hooks/x.sh", "bad")]);
        let back = serde_json::to_value(&report).unwrap();
        assert_eq!(
            back["problems"],
            serde_json::json!([{"path": "/w/.discobot/hooks/x.sh", "reason": "bad"}])
        );
    }

    #[test]
    fn a_message_naming_broken_files_and_a_failure_shortens_the_failure() {
        let broken = vec![problem(".discobot/hooks/x.sh", "invalid run_as 'admin'")];
        let failure = Failure {
            hook_name: "lint".into(),
            pattern: Some("*.txt".into()),
            files: vec!["a.txt".into()],
            exit_code: 1,
            timed_out_after: None,
            output_tail: (0..400)
                .map(|i| format!("line {i} {}\n", "x".repeat(60)))
                .collect(),
            output_cut: true,
            log_path: "/state/output/lint.log".into(),
            attempt: 2,
            max_attempts: 3,
        };
        let head = broken_hooks_message(&broken, 2, 3);
        let report = EvalReport {
            action: Action::Reprompt,
            message: Some(format!("{head}\n\n{}", failure.message())),
            attempt: 2,
            max_attempts: 3,
            pending: vec!["lint".into()],
            results: Vec::new(),
            problems: broken.clone(),
            failure: Some(failure),
            broken,
        };
        let text = report.message_within(1_000).unwrap();
        assert!(text.chars().count() <= 1_000, "{}", text.len());
        assert!(text.starts_with(&format!("{head}\n\n[Discobot Hook Failed] \"lint\"")));
        assert!(text.contains("/state/output/lint.log"), "{text}");
        assert!(text.ends_with("(Attempt 2/3)"), "{text}");

        // Too small for both: the hook files come first.
        let text = report.message_within(40).unwrap();
        assert_eq!(text, head.chars().take(40).collect::<String>());
    }
}

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
use std::fmt;
use std::fs;
use std::path::PathBuf;
use std::time::SystemTime;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::change_watch::{ChangeWatcher, ScanKind};
use crate::changes::{self, ChangeScan, DirtyFile, FileState, ScanOptions, Timestamp};
use crate::context::Context;
use crate::discover::{Discovery, discover};
use crate::exec::{CancelToken, ExecError, RunOptions, run_hook};
use crate::hook::{Hook, HookKind, Problem};
use crate::message::{Failure, broken_hooks_message};
use crate::status::{RunResult, StatusError, StatusStore, write_replacing};
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
            reason: p.reason,
        })
        .collect())
}

/// Why an evaluation could not complete.
#[derive(Debug)]
pub enum EvalError {
    /// status.json could not be read or written.
    Status(StatusError),
    /// Change detection failed.
    Changes(changes::ChangesError),
    /// A hook could not be started at all (its log could not be created, ...).
    Exec(ExecError),
    /// A marker file could not be written.
    Marker {
        /// The marker's path.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// The evaluation was cancelled; the hook that was running is pending again.
    Cancelled,
}

impl fmt::Display for EvalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EvalError::Status(e) => e.fmt(f),
            EvalError::Changes(e) => e.fmt(f),
            EvalError::Exec(e) => e.fmt(f),
            EvalError::Marker { path, source } => write!(
                f,
                "cannot write {}: {source}; make the state dir writable or pass --state-dir",
                path.display()
            ),
            EvalError::Cancelled => {
                f.write_str("evaluation cancelled; the running hook is pending again")
            }
        }
    }
}

impl std::error::Error for EvalError {}

impl From<StatusError> for EvalError {
    fn from(e: StatusError) -> Self {
        EvalError::Status(e)
    }
}

impl From<changes::ChangesError> for EvalError {
    fn from(e: changes::ChangesError) -> Self {
        EvalError::Changes(e)
    }
}

impl From<ExecError> for EvalError {
    fn from(e: ExecError) -> Self {
        EvalError::Exec(e)
    }
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
        ctx.state_dir.join(".last-eval")
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
        write_replacing(&path, &bytes).map_err(|source| EvalError::Marker { path, source })
    }
}

/// Scans the workspace for changes, keeping the scan journal in the state dir.
pub fn scan_workspace(ctx: &Context) -> Result<ChangeScan, EvalError> {
    Ok(changes::scan_with(
        &ctx.workspace,
        &journal_path(ctx),
        &scan_options(ctx),
    )?)
}

/// Starts a file-system watcher that keeps the workspace's dirty set warm, for a server; it
/// answers as [`scan_workspace`] would, with the same journal (see [`ChangeWatcher`]).
pub fn watch_workspace(ctx: &Context) -> Result<ChangeWatcher, EvalError> {
    Ok(ChangeWatcher::start(
        &ctx.workspace,
        &journal_path(ctx),
        scan_options(ctx),
        &ctx.state_dir,
    )?)
}

/// [`evaluate`] with the dirty set from `watcher`; also says how the scan was answered.
pub fn evaluate_watched(
    ctx: &Context,
    watcher: &mut ChangeWatcher,
    options: &EvalOptions,
) -> Result<(EvalReport, ScanKind), EvalError> {
    let _lock = EvalLock::acquire(ctx)?;
    let (scan, kind) = watcher.scan()?;
    let report = evaluate_scan(ctx, &discover(&ctx.hooks_dir()), &scan, options)?;
    Ok((report, kind))
}

fn journal_path(ctx: &Context) -> PathBuf {
    ctx.state_dir.join("changes.journal")
}

/// The state dir is never part of the dirty set, even when it lives in the workspace.
fn scan_options(ctx: &Context) -> ScanOptions {
    ScanOptions {
        exclude: vec![ctx.state_dir.clone()],
        ..ScanOptions::default()
    }
}

/// Runs the end-of-turn evaluation of the file hooks (module docs give the steps).
///
/// Evaluations of one state dir are serialised by a lock file; a second one waits.
pub fn evaluate(ctx: &Context, options: &EvalOptions) -> Result<EvalReport, EvalError> {
    evaluate_with(ctx, &discover(&ctx.hooks_dir()), options)
}

/// [`evaluate`] with the hooks the caller already discovered.
pub fn evaluate_with(
    ctx: &Context,
    discovery: &Discovery,
    options: &EvalOptions,
) -> Result<EvalReport, EvalError> {
    let _lock = EvalLock::acquire(ctx)?;
    let scan = scan_workspace(ctx)?;
    evaluate_scan(ctx, discovery, &scan, options)
}

/// [`evaluate`] on a discovery and a scan the caller already has (the server keeps both warm).
///
/// The caller holds an [`EvalLock`].
pub fn evaluate_scan(
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
    let (hook_turns, nothing_pending) = store.update(|status| {
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
        (status.consecutive_hook_turns, nothing_pending)
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
            &store,
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
                before.get(p.path.to_string_lossy().as_ref()) != Some(&p.reason)
            });
            (touched || new).then(|| Problem {
                path: relative.to_owned(),
                reason: p.reason.clone(),
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
        .map(|p| (p.path.to_string_lossy().into_owned(), p.reason.clone()))
        .collect()
}

/// Steps 3 and 4: runs the pending hooks in discovery order, stopping at the first failure,
/// and records the outcome in `report`; a failure re-prompts while `report.attempt` is within
/// `max_retries` (step 5).
fn run_pending(
    ctx: &Context,
    store: &StatusStore,
    marker: &mut Marker,
    scan: &ChangeScan,
    file_hooks: &[&Hook],
    options: &EvalOptions,
    report: &mut EvalReport,
) -> Result<(), EvalError> {
    for &hook in file_hooks {
        if !store.load()?.is_pending(&hook.id) {
            continue;
        }
        let dirty: Vec<&DirtyFile> = scan
            .files
            .iter()
            .filter(|f| hook.matches(&f.path))
            .collect();
        if dirty.is_empty() {
            store.update(|s| s.set_pending(&hook.id, false))?;
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
            store.update(|s| s.set_pending(&hook.id, false))?;
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
) -> Result<crate::exec::RunOutcome, EvalError> {
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
    store.update(|s| {
        s.entry(hook, ctx).finish(
            outcome.exit_code,
            outcome.success(),
            outcome.timed_out,
            outcome.duration,
            SystemTime::now(),
        )
    })?;
    Ok(outcome)
}

/// Runs one hook now, whatever its kind, and records it (`hookvisor run`, the HTTP rerun).
///
/// A file hook runs with the dirty files matching its pattern and leaves the pending set on
/// success; its cutoff moves as if an evaluation had run it.
pub fn run_now(
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
pub struct EvalLock {
    _file: fs::File,
}

impl EvalLock {
    /// Waits for and takes `<state>/eval.lock`, creating the state dir if needed.
    pub fn acquire(ctx: &Context) -> Result<EvalLock, EvalError> {
        let path = ctx.state_dir.join("eval.lock");
        let marker_error = |source| EvalError::Marker {
            path: path.clone(),
            source,
        };
        fs::create_dir_all(&ctx.state_dir).map_err(marker_error)?;
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(marker_error)?;
        file.lock().map_err(marker_error)?;
        Ok(EvalLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(path: &str, reason: &str) -> Problem {
        Problem {
            path: path.into(),
            reason: reason.into(),
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

//! End-of-turn evaluation of file hooks and of the `event: turn.end` hooks.
//!
//! The steps, written once here (docs/DESIGN.md, "End-of-turn evaluation"):
//!
//! 1. The cutoff `t0` is taken before scanning. Changed files are the dirty files (see
//!    [`crate::changes::scan`]) whose mtime or ctime is at or after the previous evaluation's cutoff, plus
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
//! 8. `eval` ≡ `fire turn.end` (docs/EVENTS.md §5 rule 8). The `pre` `event: turn.end` hooks with a
//!    `pattern` are file hooks of steps 2–4, taken with the phase-1 ones in file-name order;
//!    those without a pattern run at every turn end in that same order (docs/EVENTS.md §1.4,
//!    settled), on the files changed in the turn, while no failure stopped the evaluation (so
//!    one named before a failing file hook runs, one named after it does not); `post` hooks
//!    run last, see `${decision}`
//!    and cannot block (one with a pattern only when a matching file changed in the turn). Every
//!    hook of the turn end, phase-1 file hooks included, runs through the event dispatcher's
//!    run/judge/record step ([`crate::fire`], steps 5–8: `when`, `run:`, retries, judgment,
//!    `pipe_output`; a phase-1 script with phase 1's semantics). A block is step 4's failure, its reason standing as
//!    the output of the re-prompt; a failure that does not block is recorded and the pass goes
//!    on; an abort stops it with the action `failed`. A `when` that is false leaves the pending
//!    set like a pass. A `loop` trigger leaves the guard's count alone and always re-prompts.
//!
//! The action is `pass` when the evaluation ran no failing hook and re-prompts for no hook
//! file, even if hooks stay pending or other files do not load.
//!
//! [`Problem`]: crate::Problem

mod event_hooks;
mod marker;
mod report;
mod run;
mod turn;

use std::path::PathBuf;

use self::marker::EvalLock;
pub use self::report::{Action, EvalReport, HookResult};
use self::run::run_now;
use self::turn::evaluate_scan;
use crate::changes::{self, ChangeScan, ScanOptions};
use crate::context::Context;
use crate::discover::{Discovery, discover_workspace};
use crate::event::Event;
use crate::exec::{CancelToken, ExecError};
use crate::fire::FireError;
use crate::firing::Firing;
use crate::hook::Hook;
use crate::status::StatusError;
use crate::turns::Trigger;
use crate::watch::{ChangeWatcher, ScanKind};

/// Options of one evaluation.
#[derive(Debug, Clone)]
pub struct EvalOptions {
    /// What started the turn that just ended. Default: [`Trigger::User`].
    pub trigger: Trigger,
    /// Hook-triggered re-prompts allowed per user turn. Default: 3.
    pub max_retries: u32,
    /// Cancels the evaluation, killing the running hook. Default: none.
    pub cancel: Option<CancelToken>,
    /// The caller's own count of hook-triggered turns in a row that this turn end ends (an
    /// adapter's turn log, `crate::turns` rule 5). The guard counts the lower of it and
    /// `status.json`'s, which the agent can also write: a count raised in one alone does not
    /// end the guard early. Default: none, `status.json`'s alone.
    pub hook_turns: Option<u32>,
}

impl Default for EvalOptions {
    fn default() -> Self {
        EvalOptions {
            trigger: Trigger::User,
            max_retries: 3,
            cancel: None,
            hook_turns: None,
        }
    }
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
    /// An `event: turn.end` hook could not be run (its run directory, the context buffer).
    #[error(transparent)]
    Event(Box<FireError>),
}

impl From<FireError> for EvalError {
    fn from(err: FireError) -> Self {
        match err {
            FireError::Cancelled => EvalError::Cancelled,
            FireError::Exec(e) => EvalError::Exec(e),
            FireError::Status(e) => EvalError::Status(e),
            other => EvalError::Event(Box::new(other)),
        }
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

    /// The change watcher, to keep its watches up between turns.
    pub fn watcher_mut(&mut self) -> Option<&mut ChangeWatcher> {
        self.watcher.as_mut()
    }

    /// How the last [`Evaluator::end_turn`] got its dirty set (a server counts them); `None`
    /// before one scanned.
    pub fn last_scan(&self) -> Option<ScanKind> {
        self.last_scan
    }

    /// Runs the end-of-turn evaluation of the file hooks (module docs give the steps).
    pub fn end_turn(&mut self, options: &EvalOptions) -> Result<EvalReport, EvalError> {
        let mut firing = Firing::new(Event::TurnEnd);
        firing.trigger = options.trigger.as_str().to_owned();
        self.end_turn_with(options, &firing)
    }

    /// [`Evaluator::end_turn`] answering a fired `turn.end`: the `event: turn.end` hooks see
    /// `firing`'s data, session, iteration and stage (its event, trigger, files, cancel and
    /// `max_attempts` are the evaluation's own: `options` and the scan).
    pub fn end_turn_with(
        &mut self,
        options: &EvalOptions,
        firing: &Firing,
    ) -> Result<EvalReport, EvalError> {
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
            Some(discovery) => evaluate_scan(&self.ctx, discovery, &scan, options, firing),
            None => {
                let discovery = discover_workspace(&self.ctx);
                evaluate_scan(&self.ctx, &discovery, &scan, options, firing)
            }
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

/// `fire turn.end` (docs/EVENTS.md §5 rule 8): one evaluation on `discovery` with a full scan, under
/// the evaluation lock, its options taken from the firing.
pub(crate) fn end_turn_once(
    ctx: &Context,
    discovery: &Discovery,
    firing: &Firing,
) -> Result<EvalReport, EvalError> {
    let options = EvalOptions {
        trigger: Trigger::from_word(&firing.trigger),
        max_retries: firing.max_attempts,
        cancel: firing.cancel.clone(),
        hook_turns: firing.hook_turns,
    };
    let _lock = EvalLock::acquire(ctx)?;
    let scan = scan_workspace(ctx)?;
    evaluate_scan(ctx, discovery, &scan, &options, firing)
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

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::changes::Timestamp;

    /// A workspace outside git (so every file is dirty), its hooks and a log of their runs kept
    /// outside it, so that logging a run is no change.
    pub(super) struct Fixture {
        _dir: tempfile::TempDir,
        pub(super) ctx: Context,
        pub(super) runs: PathBuf,
    }

    impl Fixture {
        pub(super) fn new() -> Fixture {
            let dir = tempfile::tempdir().unwrap();
            let ctx = crate::context::test_context(dir.path());
            let runs = dir.path().join("runs");
            Fixture {
                _dir: dir,
                ctx,
                runs,
            }
        }

        /// A file hook on `pattern` that logs its run and fails when a file it got says `bad`.
        pub(super) fn hook(&self, file: &str, pattern: &str, front: &str) {
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
        pub(super) fn write(&self, name: &str, content: &str) {
            fs::write(self.ctx.workspace.join(name), content).unwrap();
            tick();
        }

        pub(super) fn end_turn(&self, trigger: Trigger, max_retries: u32) -> EvalReport {
            let options = EvalOptions {
                trigger,
                max_retries,
                cancel: None,
                hook_turns: None,
            };
            Evaluator::new(self.ctx.clone()).end_turn(&options).unwrap()
        }

        /// The runs so far, one `id files` line each.
        pub(super) fn runs(&self) -> Vec<String> {
            fs::read_to_string(&self.runs)
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect()
        }
    }

    /// Waits until the coarse clock files are stamped with has passed the present, so that every
    /// file written before the call is strictly older than a cutoff taken after it. Waiting for
    /// the coarse clock merely to move is not enough: with Linux's multigrain timestamps (6.13+)
    /// a file stat'ed since its last change gets a fine-grained stamp on the next one, which can
    /// lie ahead of the coarse clock after it ticked (94 % of such writes here, by about 1 ms).
    pub(super) fn tick() {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        let present = Timestamp::from_nanos(i64::try_from(now.as_nanos()).unwrap());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while Timestamp::now() <= present {
            assert!(
                std::time::Instant::now() < deadline,
                "the coarse clock did not pass the present"
            );
            std::thread::yield_now();
        }
    }

    pub(super) fn ran(report: &EvalReport) -> Vec<(&str, bool)> {
        report
            .results
            .iter()
            .map(|r| (r.hook_id.as_str(), r.success))
            .collect()
    }
}

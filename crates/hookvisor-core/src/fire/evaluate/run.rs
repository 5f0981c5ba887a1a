//! One hook run recorded in `status.json`, for an evaluation or on request.

use std::path::PathBuf;
use std::time::SystemTime;

use super::marker::{EvalLock, Marker};
use super::{EvalError, HookResult, scan_workspace};
use crate::changes::{FileState, Timestamp};
use crate::context::Context;
use crate::event::HookKind;
use crate::exec::{CancelToken, RunOptions, RunOutcome, run_hook};
use crate::hook::Hook;
use crate::status::{RunResult, StatusStore};

/// Runs one hook with its status entry marked running, then records the outcome. A cancelled
/// run is recorded as pending, not as a failure, and ends the evaluation.
pub(super) fn run_recorded(
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

/// [`Evaluator::run_now`](super::Evaluator::run_now).
pub(super) fn run_now(
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

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use crate::discover::discover;
    use crate::fire::evaluate::tests::Fixture;
    use crate::fire::evaluate::{Action, Evaluator};
    use crate::status::StatusStore;
    use crate::turns::Trigger;

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
}

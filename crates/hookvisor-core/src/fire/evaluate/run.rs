//! One phase-1 hook run now, on request (`hookvisor run ID`, the rerun route), through the
//! event dispatcher's run/judge/record step ([`crate::fire`]), as every runner runs hooks.

use std::path::PathBuf;

use super::marker::{EvalLock, Marker};
use super::{EvalError, HookResult, scan_workspace};
use crate::changes::{FileState, Timestamp};
use crate::context::Context;
use crate::event::HookKind;
use crate::exec::CancelToken;
use crate::fire;
use crate::firing::Firing;
use crate::hook::Hook;
use crate::status::StatusStore;

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
    let mut firing = Firing::new(hook.spec.event.clone());
    firing.files = Some(files.clone());
    let payload = fire::payload(ctx, &firing, None);
    let cancel = cancel.cloned().unwrap_or_default();
    // Only an event hook has a `when`; one that is false runs nothing, which is no failure.
    let Some(done) = fire::run_judged(ctx, hook, &firing, &payload, &store, &cancel)? else {
        return Ok(HookResult {
            hook_id: hook.id.clone(),
            exit_code: 0,
            success: true,
            timed_out: false,
            files,
        });
    };
    let success = done.run.timed_out.is_none() && done.run.exit_code == 0;
    if hook.kind == HookKind::File {
        let mut marker = Marker::load(ctx);
        marker.hooks.insert(hook.id.clone(), cutoff);
        marker.save(ctx)?;
        if success {
            store.update(|s| s.set_pending(&hook.id, false))?;
        }
    }
    Ok(HookResult {
        hook_id: hook.id.clone(),
        exit_code: done.run.exit_code,
        success,
        timed_out: done.run.timed_out.is_some(),
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

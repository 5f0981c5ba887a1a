//! The `event: turn.end` hooks of an evaluation (docs/EVENTS.md §5 rule 8): which of them join the
//! file hooks' pending set, which run at every turn end, and one run of such a hook through the
//! event dispatcher's runner (`when`, `run:`/`argv:`, retries, judgment, `pipe_output`).

use std::path::PathBuf;

use super::{EvalError, EvalOptions, HookResult};
use crate::context::Context;
use crate::context_buffer::ContextBuffer;
use crate::discover::Discovery;
use crate::event::Event;
use crate::event::HookKind;
use crate::fire::{self, Done};
use crate::firing::Firing;
use crate::hook::Hook;
use crate::hook::Origin;
use crate::message::Failure;
use crate::policy::Phase;
use crate::produced::Earlier;
use crate::status::StatusStore;

/// A hook of the turn end's `pre` pass, and how it runs.
#[derive(Clone, Copy)]
pub(super) struct TurnHook<'a> {
    /// The hook.
    pub(super) hook: &'a Hook,
    /// True for an `event: turn.end` hook without a pattern: it keeps no pending set and runs
    /// at every turn end on the files that changed in the turn (docs/EVENTS.md §5 rule 8).
    pub(super) every_turn: bool,
}

/// The hooks of the turn end's `pre` pass in their one order (docs/EVENTS.md §1.4): the phase-1
/// file hooks and the `pre` `event: turn.end` hooks, with or without a pattern, by file name,
/// the workspace's first, then the other tools' (in the order they were read), then the
/// global ones.
pub(super) fn pre_pass(discovery: &Discovery) -> Vec<TurnHook<'_>> {
    let phase1 = discovery.of_kind(HookKind::File).map(|hook| TurnHook {
        hook,
        every_turn: false,
    });
    let event = turn_end_hooks(discovery, Phase::Pre).map(|hook| TurnHook {
        hook,
        every_turn: hook.pattern.is_none(),
    });
    let mut hooks: Vec<TurnHook<'_>> = phase1.chain(event).collect();
    // Stable: imported hooks keep the order their sources were read in.
    hooks.sort_by_cached_key(|h| match h.hook.origin {
        Origin::Workspace => (0, h.hook.file_name()),
        Origin::Imported { .. } => (1, String::new()),
        Origin::Global => (2, h.hook.file_name()),
    });
    hooks
}

/// The `event: turn.end` hooks of `phase`, in file-name order.
pub(super) fn turn_end_hooks(discovery: &Discovery, phase: Phase) -> impl Iterator<Item = &Hook> {
    discovery
        .event_hooks()
        .filter(move |h| h.spec.event == Event::TurnEnd && h.spec.phase == phase)
}

/// Runs one `event: turn.end` hook on `files` and judges it; `None` when its `when` is false.
/// `decision` is `${decision}` for a `post` hook; `earlier` holds what earlier actions of this
/// turn end produced, and takes what this one produces. Recorded in `status.json` by the runner.
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    ctx: &Context,
    store: &StatusStore,
    hook: &Hook,
    files: &[PathBuf],
    turn: &Firing,
    options: &EvalOptions,
    decision: Option<&str>,
    earlier: &mut Earlier,
) -> Result<Option<Done>, EvalError> {
    let mut firing = turn.clone();
    firing.event = Event::TurnEnd;
    firing.trigger = options.trigger.as_str().to_owned();
    firing.files = Some(files.to_vec());
    firing.cancel = options.cancel.clone();
    let cancel = options.cancel.clone().unwrap_or_default();
    let payload = earlier.apply(fire::payload(ctx, &firing, decision));
    // docs/EVENTS.md §1.3: an unawaited hook without a pending set never holds the turn end; the
    // dispatcher's rule (`fire::detach`) runs it apart, as for every event.
    if !hook.spec.await_
        && hook.pattern.is_none()
        && turn.detach_unawaited
        && fire::detach(ctx, hook, &firing, &payload, decision)
    {
        return Ok(None);
    }
    let done = fire::run_judged(ctx, hook, &firing, &payload, store, &cancel)?;
    // A cancel during a retry wait ends the run judged; the evaluation still has no outcome.
    if cancel.is_cancelled() {
        return Err(EvalError::Cancelled);
    }
    let mut done = done;
    if let Some(done) = &mut done {
        earlier.record(&done.produced);
        // `${last_hook_status}` at the turn end as at every event (crate::produced, rule 5).
        earlier.record_status(done.run.timed_out.is_some() || done.run.exit_code != 0);
        fire::pipe(&ContextBuffer::new(&ctx.state()), hook, done)?;
    }
    Ok(done)
}

/// The eval JSON's result of an event hook's run.
pub(super) fn result(hook: &Hook, files: Vec<PathBuf>, done: &Done) -> HookResult {
    HookResult {
        hook_id: hook.id.clone(),
        exit_code: done.run.exit_code,
        success: done.run.timed_out.is_none() && done.run.exit_code == 0,
        timed_out: done.run.timed_out.is_some(),
        files,
    }
}

/// The phase-1 re-prompt of a hook that blocked: a phase-1 hook's output as phase 1 quotes it;
/// an event hook's reason (stderr, else stdout, or the JSON decision's reason, already shrunk
/// by the judge) standing as the output.
pub(super) fn failure(
    ctx: &Context,
    hook: &Hook,
    files: Vec<PathBuf>,
    done: &Done,
    reason: &str,
    attempt: u32,
    max_attempts: u32,
) -> Failure {
    Failure {
        hook_name: hook.name.clone(),
        pattern: hook.pattern.as_ref().map(|p| p.as_str().to_owned()),
        files,
        exit_code: done.run.exit_code,
        timed_out_after: done.run.timed_out,
        output_tail: done
            .phase1
            .as_ref()
            .map_or_else(|| reason.to_owned(), |run| run.tail.clone()),
        output_cut: (done.phase1.as_ref())
            .is_some_and(|run| run.output_bytes > run.tail.len() as u64),
        log_path: ctx.log_path(&hook.id),
        attempt,
        max_attempts,
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::time::{Duration, Instant};

    use serde_json::json;

    use crate::decision::Decision;
    use crate::exec::CancelToken;
    use crate::fire::evaluate::tests::{Fixture, ran};
    use crate::fire::evaluate::{Action, EvalError, EvalOptions, Evaluator};
    use crate::firing::Firing;
    use crate::status::StatusStore;
    use crate::turns::Trigger;

    /// A declarative hook `name.yml`; `RUNS` in `front` stands for the runs log's path.
    fn yml(f: &Fixture, name: &str, front: &str) {
        let front = front.replace("RUNS", &f.runs.display().to_string());
        let path = f.ctx.hooks_dir().join(format!("{name}.yml"));
        fs::write(path, format!("---\n{front}\n---\n")).unwrap();
    }

    fn end_turn_with(f: &Fixture, data: serde_json::Value) -> crate::EvalReport {
        let mut turn = Firing::new(crate::event::Event::TurnEnd);
        turn.data = data.as_object().unwrap().clone();
        Evaluator::new(f.ctx.clone())
            .end_turn_with(&EvalOptions::default(), &turn)
            .unwrap()
    }

    #[test]
    fn an_abort_ends_the_pass_and_post_hooks_see_the_decision() {
        let f = Fixture::new();
        yml(
            &f,
            "a-gate",
            "event: turn.end\npattern: '*.txt'\nblock_on: never\non_failure: abort\n\
             run: 'echo broken >&2; exit 1'",
        );
        yml(&f, "b-every", "event: turn.end\nrun: 'echo every >> RUNS'");
        yml(
            &f,
            "c-post",
            "event: turn.end\nphase: post\nrun: 'echo post ${decision} >> RUNS; exit 2'",
        );
        f.write("a.txt", "x\n");
        let report = f.end_turn(Trigger::User, 3);
        assert_eq!(ran(&report), [("a-gate", false), ("c-post", false)]);
        assert_eq!(report.action, Action::Failed);
        assert_eq!(report.decision(), Decision::Abort);
        assert_eq!(f.runs(), ["post abort"]);
        let reply = report.reply();
        assert_eq!(reply.reason.as_deref(), Some("broken"));
        assert_eq!(
            reply.results[1]["blocked"], false,
            "post hooks cannot block"
        );
        assert_eq!(report.pending, ["a-gate"], "a failure stays pending");
    }

    #[test]
    fn a_failure_that_does_not_block_is_recorded_and_the_pass_goes_on() {
        let f = Fixture::new();
        yml(
            &f,
            "a-soft",
            "event: turn.end\npattern: '*.txt'\nblock_on: exit2\nrun: 'exit 1'",
        );
        yml(&f, "b-every", "event: turn.end\nrun: 'echo every >> RUNS'");
        f.write("a.txt", "x\n");
        let report = f.end_turn(Trigger::User, 3);
        assert_eq!(ran(&report), [("a-soft", false), ("b-every", true)]);
        assert_eq!(report.action, Action::Pass);
        assert_eq!(report.pending, ["a-soft"]);
    }

    #[test]
    fn a_false_when_leaves_the_pending_set_and_data_reaches_the_hooks() {
        let f = Fixture::new();
        yml(
            &f,
            "gated",
            "event: turn.end\npattern: '*.txt'\nwhen: ${go} == true\nrun: 'echo ran >> RUNS'",
        );
        f.write("a.txt", "x\n");
        let report = end_turn_with(&f, json!({"go": false}));
        assert!(report.results.is_empty(), "{:?}", report.results);
        assert!(report.pending.is_empty(), "{:?}", report.pending);
        f.write("a.txt", "y\n");
        let report = end_turn_with(&f, json!({"go": true}));
        assert_eq!(ran(&report), [("gated", true)]);
        assert_eq!(f.runs(), ["ran"]);
    }

    #[test]
    fn a_cancelled_event_hook_is_pending_again_and_not_recorded() {
        let f = Fixture::new();
        let started = f.runs.with_extension("started");
        yml(
            &f,
            "slow",
            &format!(
                "event: turn.end\npattern: '*.txt'\nrun: 'touch {}; sleep 30'",
                started.display()
            ),
        );
        f.write("a.txt", "x\n");
        let cancel = CancelToken::new();
        let options = EvalOptions {
            cancel: Some(cancel.clone()),
            ..EvalOptions::default()
        };
        let ctx = f.ctx.clone();
        let began = Instant::now();
        let evaluation = std::thread::spawn(move || Evaluator::new(ctx).end_turn(&options));
        // The hook's own mark says it runs; then the user's message arrives.
        while !started.exists() {
            assert!(
                began.elapsed() < Duration::from_secs(20),
                "the hook never started"
            );
            std::thread::yield_now();
        }
        cancel.cancel();
        let err = evaluation.join().unwrap().unwrap_err();
        assert!(matches!(err, EvalError::Cancelled), "{err}");
        assert!(began.elapsed() < Duration::from_secs(20));
        let status = StatusStore::for_context(&f.ctx).load().unwrap();
        assert!(status.is_pending("slow"));
        assert_eq!(status.hooks["slow"].run_count, 0);
    }
}

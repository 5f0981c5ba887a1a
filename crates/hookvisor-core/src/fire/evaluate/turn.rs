//! Steps 1 to 5 and 7 of the module docs: one evaluation on a discovery and a scan.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::SystemTime;

use super::event_hooks::{self, TurnHook};
use super::marker::Marker;
use super::{Action, EvalError, EvalOptions, EvalReport};
use crate::changes::{ChangeScan, DirtyFile, FileState, Timestamp};
use crate::context::Context;
use crate::decision::Verdict;
use crate::discover::Discovery;
use crate::fire::Done;
use crate::firing::Firing;
use crate::hook::{Hook, Problem};
use crate::message::{Failure, broken_hooks_message};
use crate::policy::Phase;
use crate::produced::Earlier;
use crate::status::{RunResult, Status, StatusStore};
use crate::timestamp::rfc3339;
use crate::turns::Trigger;

/// The evaluation on a discovery and a scan; the caller holds an [`EvalLock`].
///
/// [`EvalLock`]: super::marker::EvalLock
pub(super) fn evaluate_scan(
    ctx: &Context,
    discovery: &Discovery,
    scan: &ChangeScan,
    options: &EvalOptions,
    turn: &Firing,
) -> Result<EvalReport, EvalError> {
    let store = StatusStore::for_context(ctx);
    let mut marker = Marker::load(ctx);
    let pre_pass = event_hooks::pre_pass(discovery);

    // Steps 1, 2 and 5 (counting): one read-modify-write of status.json.
    let changed: Vec<&DirtyFile> = scan.changed_since(marker.cutoff).collect();
    let broken = broken_this_turn(ctx, discovery, &changed, marker.problems.as_ref());
    let (hook_turns, nothing_pending, status) = store.update(|status| {
        let counted = match options.trigger {
            Trigger::User => 0,
            Trigger::Hook => status.consecutive_hook_turns.saturating_add(1),
            Trigger::Loop => status.consecutive_hook_turns,
        };
        // Bounded by the caller's own record, when it keeps one (`EvalOptions::hook_turns`).
        status.consecutive_hook_turns = match options.hook_turns {
            Some(recorded) if options.trigger != Trigger::Loop => counted.min(recorded),
            _ => counted,
        };
        for &TurnHook { hook, .. } in pre_pass.iter().filter(|h| !h.every_turn) {
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
        let known: Vec<String> = pre_pass
            .iter()
            .filter(|h| !h.every_turn)
            .map(|h| h.hook.id.clone())
            .collect();
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
        abort: None,
        context: Vec::new(),
        blocked_by: None,
    };
    // What the event hooks' actions produce, for the hooks after them in this turn end.
    let mut earlier = Earlier::default();
    // Rule 8: the pattern-less `event: turn.end` hooks run at every turn end, on the files that
    // changed in the turn.
    let changed_files: Vec<PathBuf> = changed
        .iter()
        .filter(|f| matches!(f.state, FileState::Present { .. }))
        .map(|f| f.path.clone())
        .collect();
    if !nothing_pending || pre_pass.iter().any(|h| h.every_turn) {
        let pass = PrePass {
            hooks: &pre_pass,
            scan,
            changed: &changed_files,
        };
        run_pre_pass(
            ctx,
            status,
            &mut marker,
            &pass,
            options,
            turn,
            &mut report,
            &mut earlier,
        )?;
    }

    // Step 7: hook files the model broke re-prompt like a failing hook, under the same guard.
    if !broken.is_empty() {
        marker.problems = Some(seen_problems(ctx, discovery, &[]));
        marker.save(ctx)?;
    }
    if !broken.is_empty() && report.action != Action::GaveUp && report.abort.is_none() {
        if guard_allows(options, attempt) {
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

    // §1.4: the `post` hooks of turn.end run last, see `${decision}` and cannot block; one with
    // a pattern runs when a file it matches changed in the turn.
    let decision = report.decision();
    for hook in event_hooks::turn_end_hooks(discovery, Phase::Post) {
        let files: Vec<PathBuf> = changed_files
            .iter()
            .filter(|f| hook.matches(f))
            .cloned()
            .collect();
        if hook.pattern.is_some() && files.is_empty() {
            continue;
        }
        let Some(done) = event_hooks::run(
            ctx,
            &store,
            hook,
            &files,
            turn,
            options,
            Some(decision.as_str()),
            &mut earlier,
        )?
        else {
            continue;
        };
        report.results.push(event_hooks::result(hook, files, &done));
        report.context.extend(done.judgment.context.iter().cloned());
    }
    // The run that re-prompts keeps the exact text the agent is sent in its history.
    if let (Some(id), Some(message)) = (&report.blocked_by, &report.message)
        && let Err(e) = store.annotate_run(id, "reprompt", Some(message))
    {
        tracing::warn!("{e}");
    }
    Ok(report)
}

/// Whether the loop guard lets a failure re-prompt: within `max_retries` hook-triggered turns,
/// or always in a `loop` (docs/EVENTS.md §3.2).
fn guard_allows(options: &EvalOptions, attempt: u32) -> bool {
    options.trigger == Trigger::Loop || attempt <= options.max_retries
}

/// Step 4 for a failing hook: re-prompt, `failed` or `gave_up`, by `notify_llm` and the guard.
fn stop_at(hook: &Hook, failure: Failure, options: &EvalOptions, report: &mut EvalReport) {
    if !hook.notify_llm {
        report.action = Action::Failed;
    } else if guard_allows(options, report.attempt) {
        report.action = Action::Reprompt;
        report.message = Some(failure.message());
        report.failure = Some(failure);
        report.blocked_by = Some(hook.id.clone());
    } else {
        report.action = Action::GaveUp;
    }
}

/// Folds an event hook's judgment into the report; true when it ends the pre pass (a block,
/// which re-prompts like a failing file hook, or an abort). A failure that does not block is
/// recorded and the pass goes on, as in `fire`.
fn judged_stop(
    ctx: &Context,
    hook: &Hook,
    files: Vec<PathBuf>,
    done: &Done,
    options: &EvalOptions,
    report: &mut EvalReport,
) -> bool {
    match &done.judgment.verdict {
        Verdict::Block { reason } => {
            let failure = event_hooks::failure(
                ctx,
                hook,
                files,
                done,
                reason,
                report.attempt,
                options.max_retries,
            );
            stop_at(hook, failure, options, report);
            true
        }
        Verdict::Abort { reason } => {
            report.action = Action::Failed;
            report.abort = Some(reason.clone());
            true
        }
        Verdict::Allow | Verdict::Success | Verdict::Failure { .. } => false,
    }
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

/// The `pre` pass of a turn end: its hooks in order, the workspace scan, and the files that
/// changed in the turn (what a pattern-less hook runs on).
struct PrePass<'a> {
    hooks: &'a [TurnHook<'a>],
    scan: &'a ChangeScan,
    changed: &'a [PathBuf],
}

/// Steps 3 and 4: runs the pending hooks and the pattern-less `turn.end` hooks in their one
/// order (docs/EVENTS.md §1.4), stopping at the first failure, and records the outcome in `report`;
/// a failure re-prompts while `report.attempt` is within `max_retries` (step 5).
///
/// `status` is the one the evaluation loaded, replaced by what each write returns, instead of
/// a read of `status.json` per hook. That loses nothing: every write still merges under the
/// store's lock, and the pending set changes only under the evaluation lock we hold (startup
/// recovery aside, which runs before any evaluation).
#[allow(clippy::too_many_arguments)]
fn run_pre_pass(
    ctx: &Context,
    mut status: Status,
    marker: &mut Marker,
    pass: &PrePass<'_>,
    options: &EvalOptions,
    turn: &Firing,
    report: &mut EvalReport,
    earlier: &mut Earlier,
) -> Result<(), EvalError> {
    let store = &StatusStore::for_context(ctx);
    let scan = pass.scan;
    for &TurnHook { hook, every_turn } in pass.hooks {
        if every_turn {
            let files = pass.changed.to_vec();
            let Some(done) =
                event_hooks::run(ctx, store, hook, &files, turn, options, None, earlier)?
            else {
                continue;
            };
            report
                .results
                .push(event_hooks::result(hook, files.clone(), &done));
            report.context.extend(done.judgment.context.iter().cloned());
            if judged_stop(ctx, hook, files, &done, options, report) {
                break;
            }
            continue;
        }
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
        // Phase-1 file hooks and `event: turn.end` hooks alike run through the event
        // dispatcher's run/judge/record step (crate::fire), each with its own semantics.
        let Some(done) = event_hooks::run(ctx, store, hook, &files, turn, options, None, earlier)?
        else {
            // Its `when` is false for this change: nothing to check, as if it had passed.
            status = store.update(|s| {
                s.set_pending(&hook.id, false);
                s.clone()
            })?;
            continue;
        };
        marker.hooks.insert(hook.id.clone(), cutoff);
        marker.save(ctx)?;
        report
            .results
            .push(event_hooks::result(hook, files.clone(), &done));
        report.context.extend(done.judgment.context.iter().cloned());
        if matches!(done.judgment.verdict, Verdict::Allow | Verdict::Success) {
            status = store.update(|s| {
                s.set_pending(&hook.id, false);
                s.clone()
            })?;
        }
        if judged_stop(ctx, hook, files, &done, options, report) {
            break;
        }
    }

    report.pending = store.update(|s| {
        s.last_evaluated_at = Some(rfc3339(SystemTime::now()));
        s.pending_hooks.clone()
    })?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::fire::evaluate::tests::{Fixture, ran, tick};

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
}

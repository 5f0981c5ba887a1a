//! The event dispatcher: one event fired, its hooks selected, run in order and judged, and the
//! reply (docs/EVENTS.md §1.4, §1.6, §3, §5 rules 1, 4, 5, 6, 15, 19, 20).
//!
//! [`fire`] follows these steps, written once here:
//!
//! 1. **Selection** (§1.4). The hooks are [`Discovery::event_hooks`] whose `spec.event` is the
//!    fired event, in discovery (file-name) order. `turn.end` is the exception (rule 8: `eval`
//!    ≡ `fire turn.end`): it is handed whole to the end-of-turn evaluation ([`Evaluator`]), which
//!    runs the phase-1 file hooks with the `event: turn.end` hooks, each through this module's
//!    run/judge/record step (steps 5–8; a phase-1 script keeps phase 1's semantics there: it
//!    shows as running, runs with the DISCOBOT_* variables and no event JSON, its output kept
//!    as it came for its re-prompt, judged by its exit code alone), and whose report gives the
//!    reply. Other phase-1 hooks
//!    ([`Hook::phase1`]) are not selected here: the session runner runs `session.start`'s
//!    through this step under its own rules (`SessionStep`: retries with backoff, one record,
//!    one log), the pre-commit runner `commit.before`'s, and firing one of those events runs
//!    only its event hooks. A **gate
//!    fails closed on a hook file that does not load** ([`Discovery::unloaded_gate`]): when a
//!    file of the hooks directories may be a hook of this gate ([`Binds`]: its front matter
//!    names the event, or does not parse, or the file cannot be read), the event blocks before
//!    any hook runs, the reason naming the file, its line and error, and the fix. Whatever its
//!    `tool:` or `pattern:` would have said. A notice runs without it (the commands warn), and
//!    so does `turn.end`, whose evaluation re-prompts for the files the model broke (its
//!    step 7). A file that can be no hook (neither `#!` nor `.yml`/`.yaml`) binds nothing.
//! 2. **Tool** (§5 rule 6). A hook with `tool:` runs only when `data.tool_name` is a string it
//!    matches: `*` matches every call (also one without a tool name), a `|`-list matches its
//!    exact names (a name with `*` as a glob); anything else is a regex over the whole name.
//!    The agent's name also matches by its canonical one (`Bash` by `bash`), and a shell call
//!    whose `tool_input.command` is a `git commit` by `git_commit` ([`ToolMatcher::matches_call`];
//!    a hint read from the common spelling only: `commit.before` is the gate that holds).
//! 3. **Pattern**. A hook with `pattern:` runs only when one of the firing's `files` matches it
//!    (workspace-relative paths; when none are given, the strings of `data.files`, which is how
//!    `serve` and the adapters pass them); an event without files runs no hook that has a
//!    pattern. `tool.before` is a gate and fails closed instead: its pattern hooks also run
//!    when the files are unknown (neither given), and for a file outside the workspace
//!    (absolute, or leading out with `..`), which no workspace pattern can judge.
//! 4. **Passes** (§1.4). Every `pre` hook runs, then every `post` hook. The first block or abort
//!    ends the `pre` pass ([`Outcome::ends_pre_pass`]). The decision is made when the `pre`
//!    pass ends (§3: `serve` answers then, through [`fire_deciding`]); `post` hooks still run,
//!    see it as `${decision}`, and cannot change it: only a `pre` hook of a gate can block (§1.5),
//!    and a `post` hook's failure is recorded, never an abort of a decision already sent.
//! 5. **When** (§4.2). A hook's `when:` is evaluated just before its run, over the payload
//!    ([`Payload::lookup`]). False skips the hook (nothing is recorded). An evaluation error
//!    *fails* the hook, never read as true or false: its message, prefixed by the hook's
//!    source and condition, is the run's output (stderr, exit 1), and [`Judge::judge_refused`]
//!    judges it: a hook that can block blocks, whatever its `block_on`, since the values are
//!    often the model's (a gate fails closed); any other hook records the failure. The same
//!    holds for an action refused in step 6 (most often for the event's values).
//! 6. **Run** (§4.1, rule 19). Each run writes the payload's files directly into
//!    `<state>/fire/`, their names prefixed by one unique to the run, and removes them when it
//!    ends ([`Payload::environment_prefixed`]); the event JSON is the child's stdin, from
//!    bytes in a sealed memory file the agent cannot change (the source of truth: the files can
//!    change under the hook, see the payload's "Known limit"); stdout and stderr are captured
//!    apart for the judge. A script hook runs through [`run_hook`]; `argv:` is expanded by
//!    [`template::expand_argv`] and run without a shell; `run:` is `sh -c SCRIPT` after every
//!    referenced name was checked to exist and to be in the environment (rule 20). An unknown
//!    name, an empty argv, or an argv item `execve` cannot pass (a NUL byte, 128 KiB or more)
//!    is a failed run with its reason, never an empty or cut value. The timeout is the
//!    hook's. The payload also carries what earlier actions of this firing produced
//!    (`${spawn_output}`, `${hook_response}`: [`produced`]); an action's runner hands its
//!    values back in its `ActionRun`, and may judge its own run there (a spawn's
//!    `on_timeout: abort`), the outcome recorded as it happened all the same.
//! 7. **Retry and judgment** (§5 rule 1). A run the judge wants re-run (`on_failure: retry`) is
//!    re-run up to `retries` times, `retry_delay` apart (a [`CancelToken`] wait, so a cancel
//!    ends it); the last run is judged with [`Judge`] and folded into the [`Outcome`]. Each run
//!    is recorded in `status.json` with its `event`, `source` and `action`.
//! 8. **Context** (§1.6, §5 rule 17), one rule for every caller. What a run says to the agent
//!    is its JSON `additionalContext`, then its output (stdout, then stderr) when
//!    `pipe_output` is `true`, or `failure` and the last run failed; a failed or timed-out
//!    run's output is announced first, `hook ID failed with exit code N:` or `hook ID timed
//!    out after Ns:` on a line of its own (as iteratr and nyzhi tell their agents). It goes to
//!    the reply's `context` when the agent reads this event's answer for context
//!    (`tool.after`, `file.edited`, `tool.failed`: PostToolUse, AfterTool,
//!    PostToolUseFailure), else to the [`ContextBuffer`]; never both. What `post` and unawaited
//!    hooks say comes after the answer, so it goes to the buffer. `session.end` discards the
//!    buffer after its hooks ran, into the session's log ([`ContextBuffer::discard`]), and its
//!    reply says how many entries as `discarded`.
//! 9. **Drain** (§5 rule 5). `turn.start` drains the buffer into the reply's `context` after its
//!    own hooks ran, so what they piped is included; a blocked or aborted `turn.start` leaves the
//!    buffer for the next one, since a refused prompt reaches no model.
//! 10. **Cancel**. When [`Firing::cancel`] is cancelled, the running hook is stopped, no further
//!     hook starts and [`fire`] returns [`FireError::Cancelled`]: half an event has no decision.
//! 11. **Reply** (§5 rule 4). `{event, decision, reason, context, results, attempt,
//!     maxAttempts}`; each result is `{hookId, exitCode, success, timedOut, files, blocked}`,
//!     the phase-1 fields plus `blocked`. `attempt`/`maxAttempts` are the phase-1 loop guard's
//!     for `turn.end` ([`EvalReport::reply`], which adds the eval JSON's `action`, `message`,
//!     `pending` and `problems`) and `session.stop`, `null` otherwise. The guard counts turns by
//!     their trigger at `turn.end`; `session.stop` reads the count (`attempt` = count + 1), and
//!     a block past [`Firing::max_attempts`] is let through, like phase 1's `gave_up`, unless
//!     the trigger is `loop`; [`Reply::gave_up`] tells the caller, whose turn log keeps it
//!     given up until the user's next prompt.
//!
//! **Hand-over.** When the `pre` pass blocked or aborted, the `post` hooks see `success: false`
//! and `error` = the reason in the event's data (AutoAgent's executor sets them before
//! PostExecutionEnd: the post phase of the same event is AutoAgent's matching post event).
//!
//! **Unawaited hooks** (`await: false`, §1.3) never hold the reply, and are judged as notices:
//! they cannot block what was already decided. With [`Firing::detach_unawaited`] (the `fire`
//! and `eval` commands, the adapters, `loop`, the git hooks and `serve`'s turn end: callers
//! that wait for [`fire`] to return) each one, but a spawn, which detaches its own child, is
//! run by a detached `hookvisor fire --deliver` of this executable, which records the run when
//! it ends (the `detached` module says who reaps what). Otherwise they
//! run in this process after the decision was handed over, before the `post` pass: `serve`'s
//! other events answer first ([`fire_deciding`]), and the init runs them on a thread of its
//! own. The detached run is [`deliver`]: that hook alone. The
//! end-of-turn evaluation applies the same rule to its hooks without a pattern.
//!
//! [`Discovery::event_hooks`]: crate::Discovery::event_hooks
//! [`Evaluator`]: crate::Evaluator
//! [`EvalReport::reply`]: crate::EvalReport::reply
//! [`Firing::max_attempts`]: crate::firing::Firing::max_attempts
//! [`Hook::phase1`]: crate::hook::Hook::phase1
//! [`Discovery::unloaded_gate`]: crate::Discovery::unloaded_gate
//! [`Binds`]: crate::hook::Binds
//! [`Outcome::ends_pre_pass`]: crate::decision::Outcome::ends_pre_pass
//! [`Outcome`]: crate::decision::Outcome
//! [`Reply::gave_up`]: crate::decision::Reply::gave_up
//! [`Payload::lookup`]: crate::payload::Payload::lookup
//! [`Payload::environment_prefixed`]: crate::payload::Payload::environment_prefixed
//! [`run_hook`]: crate::exec::run_hook
//! [`template::expand_argv`]: crate::template::expand_argv
//! [`CancelToken`]: crate::CancelToken
//! [`Judge`]: crate::decision::Judge
//! [`Judge::judge_refused`]: crate::decision::Judge::judge_refused
//! [`ContextBuffer`]: crate::context_buffer::ContextBuffer
//! [`ContextBuffer::discard`]: crate::context_buffer::ContextBuffer::discard
//! [`Firing::detach_unawaited`]: crate::firing::Firing::detach_unawaited
//! [`ToolMatcher::matches_call`]: crate::event::ToolMatcher::matches_call
//! [`Firing::cancel`]: crate::firing::Firing::cancel
//! [`fire`]: crate::fire::fire
//! [`fire_deciding`]: crate::fire::fire_deciding
//! [`deliver`]: crate::fire::deliver
//! [`FireError::Cancelled`]: crate::fire::FireError::Cancelled
//! [`produced`]: crate::produced

#![forbid(unsafe_code)]

mod detached;
/// The end-of-turn evaluation `turn.end` is handed to (step 1): the phase-1 file hooks with the
/// `event: turn.end` hooks, run through this module's steps 5–8.
pub mod evaluate;

pub(crate) mod attempts;

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value as Json, json};

pub(crate) use self::attempts::SessionStep;
use self::attempts::run_attempts;
use self::evaluate::EvalError;
use crate::context::Context;
use crate::context_buffer::{ContextBuffer, ContextBufferError, MAX_CONTEXT_CHARS};
use crate::decision::{Decision, FinishedRun, Judge, Judgment, Outcome, Reply, Verdict};
use crate::discover::Discovery;
use crate::event::{Command, Event, HookAction, PipeOutput};
use crate::exec::{
    CancelToken, Capture, ExecError, Invocation, RunOptions, RunOutcome, run_command, run_hook,
};
use crate::firing::Firing;
use crate::hook::Hook;
use crate::payload::{Payload, RunFiles};
use crate::policy::Phase;
use crate::produced::{Earlier, Produced};
use crate::runner::Ran;
use crate::status::{StatusError, StatusStore};
use crate::template;
use crate::turns::Trigger;

/// Bytes of each stream kept for the judge: a decision or reason longer than this is no use to
/// an agent, whose own cap is 10,000 characters.
const CAPTURE_LIMIT: usize = 1024 * 1024;

/// Linux's `MAX_ARG_STRLEN`: `execve` refuses one argument of this many bytes with its NUL.
const MAX_ARG_BYTES: usize = 128 << 10;

/// Why an event could not be fired to the end. A hook that fails is no error: it is judged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FireError {
    /// A run's payload files (or `<state>/fire/` for them) could not be made.
    #[error(
        "cannot create the run's payload files {}: {source}; make the state dir writable or \
         pass --state-dir",
        path.display()
    )]
    RunDir {
        /// The directory.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// A hook could not be started at all (its log, its stdin, the system).
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// `status.json` could not be updated.
    #[error(transparent)]
    Status(#[from] StatusError),
    /// The context buffer could not be appended to or drained.
    #[error(transparent)]
    Buffer(#[from] ContextBufferError),
    /// The firing's cancel token stopped the event before its hooks were done; no decision
    /// was reached, so none is returned (a caller of a gate treats this as a refusal).
    #[error("interrupted before the hooks of the event were done")]
    Cancelled,
    /// The end-of-turn evaluation `turn.end` delegates to could not complete.
    #[error(transparent)]
    Eval(Box<EvalError>),
}

impl From<EvalError> for FireError {
    fn from(err: EvalError) -> Self {
        match err {
            EvalError::Cancelled => FireError::Cancelled,
            other => FireError::Eval(Box::new(other)),
        }
    }
}

/// Fires `firing.event`: runs its event hooks by the steps of the [module documentation](self)
/// and returns the reply.
pub fn fire(ctx: &Context, discovery: &Discovery, firing: &Firing) -> Result<Reply, FireError> {
    fire_deciding(ctx, discovery, firing, |_| {})
}

/// [`fire`], handing the reply to `decided` the moment the `pre` pass ends (docs/EVENTS.md §3: the
/// caller answers then, and the `post` hooks run after), and returning it with the `post`
/// runs' results added. A `post` hook cannot change the decision, so a server may answer
/// before it runs; a cancel during the `post` pass stops it and keeps the decision.
pub fn fire_deciding(
    ctx: &Context,
    discovery: &Discovery,
    firing: &Firing,
    decided: impl FnOnce(&Reply),
) -> Result<Reply, FireError> {
    if firing.event == Event::TurnEnd {
        let reply = self::evaluate::end_turn_once(ctx, discovery, firing)?.reply();
        decided(&reply);
        return Ok(reply);
    }
    fire_hooks(ctx, discovery, firing, decided)
}

/// [`fire_deciding`] of an event other than `turn.end`: its event hooks only. Kept apart so
/// that a caller that fires no `turn.end` (the init's session runner) links no evaluation,
/// whose change walker would bring NSS lookups into the static init.
pub(crate) fn fire_hooks(
    ctx: &Context,
    discovery: &Discovery,
    firing: &Firing,
    decided: impl FnOnce(&Reply),
) -> Result<Reply, FireError> {
    let given;
    let firing = match (&firing.files, files_of_data(&firing.data)) {
        (None, Some(files)) => {
            given = Firing {
                files: Some(files),
                ..firing.clone()
            };
            &given
        }
        _ => firing,
    };
    // docs/EVENTS.md §4.4: detached children of this state dir end with its session, first.
    if firing.event == Event::SessionEnd
        && let Some(runners) = crate::runner::installed()
    {
        runners.end_session(ctx);
    }
    let cancel = firing.cancel.clone().unwrap_or_default();
    let buffer = ContextBuffer::new(&ctx.state());
    // An event run is recorded whole but without the directory fsync: it is written on every
    // tool call of an agent, and a crash may lose the last record but never the file (case 7).
    let store = StatusStore::for_context(ctx).with_durability(crate::state::Durability::Whole);
    let hooks = |phase| {
        discovery
            .event_hooks()
            .filter(move |h| h.spec.phase == phase && selected(h, firing))
    };
    let mut outcome = Outcome::new();
    // Step 1: a gate whose hook file does not load fails closed, before any hook runs.
    if let Some(problem) = discovery.unloaded_gate(&firing.event) {
        let reason = format!(
            "{}: {}; this hook file does not load, so {} is blocked: fix the hook file or \
             remove it (`hookvisor check` shows the error)",
            problem.source(&ctx.workspace),
            problem.kind,
            firing.event
        );
        outcome.push(Judgment::from(Verdict::Block { reason }));
    }
    let mut results = Vec::new();
    // Step 8: the context of the `pre` pass, for the reply when the agent reads it there.
    let mut answered = Vec::new();
    let in_reply = answers_context(&firing.event);
    // Values of earlier actions, for every later hook of this firing (crate::produced).
    let mut earlier = Earlier::default();
    for hook in hooks(Phase::Pre).filter(|h| h.spec.await_) {
        if outcome.ends_pre_pass() || cancel.is_cancelled() {
            break;
        }
        let payload = earlier.apply(payload(ctx, firing, None));
        let Some(mut done) = run_judged(ctx, hook, firing, &payload, &store, &cancel)? else {
            continue;
        };
        earlier.record(&done.produced);
        earlier.record_status(done.run.timed_out.is_some() || done.run.exit_code != 0);
        let context = take_context(hook, &mut done);
        if in_reply {
            answered.extend(context);
        } else {
            buffer_all(&buffer, hook, context)?;
        }
        results.push(result_json(hook, firing, &done));
        outcome.push(done.judgment);
    }
    // A block or abort reached before the cancel stands (an awaited callback cancelled under
    // `on_timeout: abort`): a bare cancel is what a caller may take as "allow".
    if cancel.is_cancelled() && !outcome.ends_pre_pass() {
        return Err(FireError::Cancelled);
    }
    let allowed = outcome.decision() == Decision::Allow;
    let attempts = if firing.event == Event::SessionStop {
        Some(session_stop_guard(&store, firing, &mut outcome)?)
    } else {
        None
    };
    let mut reply = outcome.into_reply(firing.event.to_string(), results, attempts);
    reply.context = answered;
    // A refused prompt reaches no model: the buffer waits for the next turn.start.
    if firing.event == Event::TurnStart && allowed {
        let drained = buffer.drain(MAX_CONTEXT_CHARS)?;
        if !drained.text.is_empty() {
            reply.context.push(drained.text);
        }
    }
    // §1.6: what no prompt took ends with the session, written to its log, before the answer
    // (serve answers here, and a next prompt may follow at once); the reply says how much,
    // for a caller that tells its user (`loop`).
    let ends_session = firing.event == Event::SessionEnd;
    if ends_session {
        let discarded = buffer.discard()?;
        reply.phase1.insert("discarded".into(), discarded.into());
    }
    decided(&reply);
    let decision = reply.decision.as_str();
    // The `post` pass learns what the `pre` pass did, as AutoAgent's executor tells
    // PostExecutionEnd: a block or abort is `success: false` and `error` = its reason.
    let handed;
    let post = match &reply.reason {
        Some(reason) if reply.decision != Decision::Allow => {
            let mut data = firing.data.clone();
            data.insert("success".into(), Json::Bool(false));
            data.insert("error".into(), Json::String(reason.clone()));
            handed = Firing {
                data,
                ..firing.clone()
            };
            &handed
        }
        _ => firing,
    };
    // §1.3 `await: false`: after the decision, in order, then the `post` pass.
    let unawaited = hooks(Phase::Pre).filter(|h| !h.spec.await_);
    for hook in unawaited.chain(hooks(Phase::Post)) {
        if cancel.is_cancelled() {
            break;
        }
        let (firing, seen) = match hook.spec.phase {
            Phase::Post => (post, Some(decision)),
            Phase::Pre => (firing, None),
        };
        let payload = earlier.apply(payload(ctx, firing, seen));
        if !hook.spec.await_ && firing.detach_unawaited && detach(ctx, hook, firing, &payload, seen)
        {
            continue;
        }
        let Some(mut done) = run_judged(ctx, hook, firing, &payload, &store, &cancel)? else {
            continue;
        };
        earlier.record(&done.produced);
        earlier.record_status(done.run.timed_out.is_some() || done.run.exit_code != 0);
        // After the answer: what these hooks say waits for the next prompt.
        buffer_all(&buffer, hook, take_context(hook, &mut done))?;
        reply.results.push(result_json(hook, firing, &done));
    }
    if ends_session {
        // What the `post` hooks of `session.end` said has no prompt to go to either.
        let discarded = buffer.discard()?;
        if let Some(count) = reply.phase1.get_mut("discarded") {
            *count = (count.as_u64().unwrap_or(0) + discarded as u64).into();
        }
    }
    Ok(reply)
}

/// Step 8's one rule: whether the agent reads this event's reply for context
/// (PostToolUse/AfterTool and the file edits they report, PostToolUseFailure:
/// `additionalContext` beside the tool's result). Every other event's context goes to the
/// buffer, which `turn.start` drains into its reply (step 9).
fn answers_context(event: &Event) -> bool {
    matches!(
        event,
        Event::ToolAfter | Event::FileEdited | Event::ToolFailed
    )
}

/// §1.3 `await: false` for a caller that waits for the firing: `hook` is run by a detached
/// `hookvisor fire --deliver` of this executable ([`deliver`]), which records the run as any
/// and reaps the hook; true when it started. `decision` is `${decision}` for a `post` hook. A
/// spawn detaches its own child (crate::spawn), so it runs here. The executable is looked up
/// only here: a `readlink` every firing would pay for nothing. When none starts, the hook
/// runs in this process, as when not detached.
pub(crate) fn detach(
    ctx: &Context,
    hook: &Hook,
    firing: &Firing,
    payload: &Payload,
    decision: Option<&str>,
) -> bool {
    if matches!(hook.spec.action, HookAction::Spawn(_)) {
        return false;
    }
    let started = std::env::current_exe()
        .and_then(|exe| detached::deliver_detached(&exe, ctx, hook, firing, payload, decision));
    match started {
        Ok(()) => true,
        Err(err) => {
            tracing::warn!(hook = %hook.id, "cannot start the detached run, running it here: {err}");
            false
        }
    }
}

/// The run of one unawaited hook that a firing detached (`hookvisor fire --deliver ID`, see
/// the "Unawaited hooks" paragraph of the [module documentation](self)): steps 5–8 for the
/// hook `id` of `firing`'s event alone, judged as a notice, recorded, and what it says put in
/// the buffer. Nothing else of the event runs again (the drain of `turn.start`, the discard of
/// `session.end`, the loop guard, the evaluation of `turn.end`): the firing that detached it
/// did those. `decision` is `${decision}` for a `post` hook. `None` when no such hook is
/// found; else its result, as the reply's `results` has it.
pub fn deliver(
    ctx: &Context,
    discovery: &Discovery,
    firing: &Firing,
    id: &str,
    decision: Option<&str>,
) -> Result<Option<Json>, FireError> {
    let Some(hook) = discovery
        .event_hooks()
        .find(|h| h.id == id && h.spec.event == firing.event && !h.spec.await_)
    else {
        return Ok(None);
    };
    let cancel = firing.cancel.clone().unwrap_or_default();
    let store = StatusStore::for_context(ctx).with_durability(crate::state::Durability::Whole);
    let seen = (hook.spec.phase == Phase::Post)
        .then_some(decision)
        .flatten();
    let payload = payload(ctx, firing, seen);
    let Some(mut done) = run_judged(ctx, hook, firing, &payload, &store, &cancel)? else {
        return Ok(None);
    };
    buffer_all(
        &ContextBuffer::new(&ctx.state()),
        hook,
        take_context(hook, &mut done),
    )?;
    Ok(Some(result_json(hook, firing, &done)))
}

/// Step 11 for `session.stop`: the phase-1 loop guard's `(attempt, maxAttempts)`, and a block
/// past the guard given up (allowed) unless a loop fired it (§3.2: its own limits apply).
///
/// The guard counts turns, not events: a `turn.end` counted the turn that just ended (a `hook`
/// trigger adds one, a `user` one resets), so a block here is "one more turn", which the next
/// `turn.end` counts with its `hook` trigger. Reading the count is this event's only extra work.
fn session_stop_guard(
    store: &StatusStore,
    firing: &Firing,
    outcome: &mut Outcome,
) -> Result<(u32, u32), FireError> {
    let stored = store.load()?.consecutive_hook_turns;
    let counted = firing
        .hook_turns
        .map_or(stored, |recorded| stored.min(recorded));
    let attempt = counted.saturating_add(1);
    let guarded = Trigger::from_word(&firing.trigger) != Trigger::Loop;
    if guarded && attempt > firing.max_attempts && outcome.decision() == Decision::Block {
        tracing::warn!(
            "session.stop blocked again; giving up after {} re-prompts until the next user turn",
            firing.max_attempts
        );
        outcome.give_up();
    }
    Ok((attempt, firing.max_attempts))
}

/// Steps 1–3: the hook binds this event and its `tool` and `pattern` match.
fn selected(hook: &Hook, firing: &Firing) -> bool {
    if hook.spec.event != firing.event {
        return false;
    }
    let tool_name = firing.data.get("tool_name").and_then(Json::as_str);
    let command = firing
        .data
        .get("tool_input")
        .and_then(|input| input.get("command"))
        .and_then(Json::as_str);
    let tool_ok = hook
        .spec
        .tool
        .as_ref()
        .is_none_or(|matcher| matcher.matches_call(tool_name, command));
    tool_ok && pattern_selects(hook, firing)
}

/// Step 3: whether the hook's `pattern` (if any) selects the firing's files. A `tool.before`
/// gate fails closed: unknown files, or a file outside the workspace, select it.
fn pattern_selects(hook: &Hook, firing: &Firing) -> bool {
    if hook.pattern.is_none() {
        return true;
    }
    let gate = firing.event == Event::ToolBefore;
    match &firing.files {
        None => gate,
        Some(files) => files.iter().any(|f| {
            hook.matches(f)
                || (gate
                    && (f.is_absolute() || f.components().next() == Some(Component::ParentDir)))
        }),
    }
}

/// `data.files` as the firing's files, when the firing was given none: `serve` and the
/// adapters pass them in the event's data. `None` when absent or not a list of strings.
fn files_of_data(data: &Map<String, Json>) -> Option<Vec<PathBuf>> {
    data.get("files")?
        .as_array()?
        .iter()
        .map(|f| f.as_str().map(PathBuf::from))
        .collect()
}

/// The payload of one run; `decision` is `${decision}` for the `post` pass.
pub(crate) fn payload(ctx: &Context, firing: &Firing, decision: Option<&str>) -> Payload {
    let session = firing.session.as_deref().unwrap_or(&ctx.session_id);
    let mut payload = Payload::new(
        firing.event.to_string(),
        session,
        ctx.workspace.clone(),
        firing.trigger.clone(),
    )
    .data(firing.data.clone());
    if let Some(iteration) = firing.iteration {
        payload = payload.iteration(iteration);
    }
    if let Some(stage) = &firing.stage {
        payload = payload.stage(stage.clone());
    }
    if let Some(files) = &firing.files {
        payload = payload.files(files.iter().map(|f| f.as_os_str().to_owned()));
    }
    // The event's own data wins a name (`error`'s `status` is the agent's exit status).
    for (name, value) in firing
        .vars
        .iter()
        .filter(|(n, _)| !firing.data.contains_key(*n))
    {
        payload = payload.json_var(name, value.clone());
    }
    if let Some(decision) = decision {
        payload = payload.text_var("decision", decision);
    }
    payload
}

/// One hook's last run and its judgment.
pub(crate) struct Done {
    /// What the last run means for the event.
    pub(crate) judgment: Judgment,
    /// The last run.
    pub(crate) run: FinishedRun,
    /// What the last run's action produced for the later hooks (crate::produced).
    pub(crate) produced: Vec<Produced>,
    /// A phase-1 hook's last run as phase 1 reports it (its output as it came, the last 64
    /// KiB, for the re-prompt and the commit's message); `None` for other hooks.
    pub(crate) phase1: Option<RunOutcome>,
    /// Under [`SessionStep`]: the attempts made (0 when none could start) and why the run
    /// ended when its exit code does not say (stopped, refused, not recorded).
    pub(crate) session: Option<(u32, Option<String>)>,
}

/// Steps 5–7 for one hook: `None` when its `when` is false. A cancelled run is not recorded
/// (it has no result) and ends the event with [`FireError::Cancelled`].
pub(crate) fn run_judged(
    ctx: &Context,
    hook: &Hook,
    firing: &Firing,
    payload: &Payload,
    store: &StatusStore,
    cancel: &CancelToken,
) -> Result<Option<Done>, FireError> {
    run_judged_with(ctx, hook, firing, payload, store, cancel, None)
}

/// [`run_judged`], under the session's rules when `session` is given and the hook is a
/// phase-1 script ([`SessionStep`]); then it always returns a result.
pub(crate) fn run_judged_with(
    ctx: &Context,
    hook: &Hook,
    firing: &Firing,
    payload: &Payload,
    store: &StatusStore,
    cancel: &CancelToken,
    session: Option<&SessionStep<'_>>,
) -> Result<Option<Done>, FireError> {
    // The history of each run names the firing it ran for, and keeps what it told the agent.
    let store = &store.for_run(crate::status::history::RunInfo::of(payload));
    let done = run_judged_unannotated(ctx, hook, firing, payload, store, cancel, session)?;
    // A gate's reply carries a block's reason to the agent; a turn end's re-prompt is kept by
    // the evaluation, which alone knows which failure the agent is told of.
    if let Some(done) = done.as_ref().filter(|_| firing.event.is_gate())
        && firing.event != Event::TurnEnd
    {
        let told = match &done.judgment.verdict {
            Verdict::Block { reason } => Some(("block", reason)),
            Verdict::Abort { reason } => Some(("abort", reason)),
            _ => None,
        };
        if let Some((decision, reason)) = told
            && let Err(e) = store.annotate_run(&hook.id, decision, Some(reason))
        {
            tracing::warn!("{e}");
        }
    }
    Ok(done)
}

/// [`run_judged_with`] before its decision is kept in the run's history.
fn run_judged_unannotated(
    ctx: &Context,
    hook: &Hook,
    firing: &Firing,
    payload: &Payload,
    store: &StatusStore,
    cancel: &CancelToken,
    session: Option<&SessionStep<'_>>,
) -> Result<Option<Done>, FireError> {
    // An unawaited hook runs after the decision went out: it is judged as a notice.
    let mut judge = Judge::new(
        firing.event.is_gate() && hook.spec.await_,
        hook.spec.phase,
        hook.spec.block_on,
        hook.spec.on_failure,
    );
    judge.reason_from = hook.spec.reason_from;
    // Evaluated once: a re-run is the same run again (§5 rule 1), on the same payload.
    match refusal(hook, payload) {
        Refusal::Skip => return Ok(None),
        // Deterministic, so never re-run: the same condition fails the same way.
        Refusal::Fail(message) => {
            let run = record_refused(ctx, hook, store, &message)?;
            return Ok(Some(Done {
                judgment: judge.judge_refused(&run),
                run,
                produced: Vec::new(),
                phase1: None,
                session: None,
            }));
        }
        Refusal::Run => {}
    }
    if let Some(step) = session {
        return Ok(Some(run_attempts(
            ctx, hook, firing, payload, store, cancel, step, &judge,
        )));
    }
    let mut retries_left = hook.spec.retries;
    loop {
        // A phase-1 hook shows as running while it runs, as phase 1's runners showed it; but
        // not inside `git commit`, which waits for its hooks anyway and where a status write
        // costs two fsyncs (BENCHMARKS.md, case 3).
        if hook.phase1 && firing.event != Event::CommitBefore {
            store.update(|s| s.entry(hook, ctx).begin(SystemTime::now()))?;
        }
        let mut phase1 = None;
        let (run, deterministic, judged, produced) =
            match run_once(ctx, hook, firing, payload, cancel, None)? {
                Ran::Finished(action) if action.outcome.cancelled => {
                    // A cancelled phase-1 run has no result: it is pending again.
                    if hook.phase1 {
                        store.update(|s| {
                            s.entry(hook, ctx).last_result = crate::status::RunResult::Pending;
                            s.set_pending(&hook.id, true);
                        })?;
                    }
                    return Err(FireError::Cancelled);
                }
                Ran::Finished(action) => {
                    let outcome = &action.outcome;
                    if hook.phase1 {
                        phase1 = Some(outcome.clone());
                    }
                    store.update(|status| {
                        status.entry(hook, ctx).record(outcome, SystemTime::now());
                    })?;
                    let run = finished(ctx, hook, outcome);
                    // An action's own verdict is final: the same cause would decide again.
                    let deterministic = action.verdict.is_some();
                    let judged = action.verdict.map(Judgment::from);
                    (run, deterministic, judged, action.produced)
                }
                Ran::Refused(message) => {
                    let run = record_refused(ctx, hook, store, &message)?;
                    let judged = Some(judge.judge_refused(&run));
                    (run, true, judged, Vec::new())
                }
            };
        let judgment = judged.unwrap_or_else(|| judge.judge(&run));
        for warning in &judgment.warnings {
            tracing::warn!("{}: {warning}", hook.file_name());
        }
        let again = judgment.wants_retry() && retries_left > 0 && !deterministic;
        // A cancel during the wait ends the retries; `fire` then reports the cancel.
        if again && !cancel.wait_for(hook.spec.retry_delay) {
            retries_left -= 1;
            continue;
        }
        return Ok(Some(Done {
            judgment,
            run,
            produced,
            phase1,
            session: None,
        }));
    }
}

/// Records a run that failed before starting (a `when` error, an unknown name) and returns it
/// as the judge sees it.
fn record_refused(
    ctx: &Context,
    hook: &Hook,
    store: &StatusStore,
    message: &str,
) -> Result<FinishedRun, FireError> {
    let run = unfinished(ctx, hook, message);
    store.update(|status| {
        let entry = status.entry(hook, ctx);
        entry.record_unfinished(message, Duration::ZERO, SystemTime::now());
    })?;
    Ok(run)
}

/// What is decided about a hook before anything runs.
enum Refusal {
    /// `when` is false.
    Skip,
    /// It fails without running, with this message as its output.
    Fail(String),
    /// It runs.
    Run,
}

/// Step 5: the hook's `when`, evaluated now. An error names where the hook is declared and
/// its condition, since the error's column counts within the condition.
fn refusal(hook: &Hook, payload: &Payload) -> Refusal {
    let Some(condition) = &hook.spec.when else {
        return Refusal::Run;
    };
    let lookup = |path: &[&str]| payload.lookup(path);
    match condition.eval(&lookup) {
        Ok(true) => Refusal::Run,
        Ok(false) => Refusal::Skip,
        Err(err) => {
            // Every `WhenError` reads `when: …`, for a caller to prefix; the condition goes
            // between the two.
            let err = err.to_string();
            let detail = err.strip_prefix("when: ").unwrap_or(&err);
            Refusal::Fail(format!("{}: when: {condition}: {detail}", hook.source()))
        }
    }
}

/// The payload's files for one run of `hook_id` in `dir` (see [`run_once`]). The prefix is
/// unique: our pid (no other live process has it), the time in nanoseconds (a file left by a
/// killed `fire` whose pid was reused), and a counter (runs of this process); a name that
/// exists all the same is retried with the next count.
fn run_files(payload: &Payload, dir: &Path, hook_id: &str) -> Result<RunFiles, FireError> {
    static RUNS: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let mut attempts = 0;
    loop {
        let run = RUNS.fetch_add(1, Ordering::Relaxed);
        let prefix = format!("{}-{nanos}-{run}.", std::process::id());
        match payload.environment_prefixed(dir, &prefix) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists && attempts < 3 => attempts += 1,
            result => {
                return result.map_err(|source| FireError::RunDir {
                    path: dir.join(format!("{prefix}* ({hook_id})")),
                    source,
                });
            }
        }
    }
}

/// Step 6: one run of the hook's action, its payload files in the state dir's `fire/`.
pub(super) fn run_once(
    ctx: &Context,
    hook: &Hook,
    firing: &Firing,
    payload: &Payload,
    cancel: &CancelToken,
    session: Option<&SessionStep<'_>>,
) -> Result<Ran, FireError> {
    // The built-in actions run in their own crate (crate::runner), with no payload files.
    if !matches!(hook.spec.action, HookAction::Command(_)) {
        let Some(runners) = crate::runner::installed() else {
            return Ok(Ran::Refused(format!(
                "this program cannot run `action: {}`; `hookvisor fire` runs it",
                hook.spec.action.as_str()
            )));
        };
        if let Some(ran) = runners.run(ctx, hook, payload, cancel)? {
            return Ok(ran);
        }
    }
    // A phase-1 script runs as phase 1 ran it: DISCOBOT_* variables, no event JSON, stdout
    // and stderr together (its re-prompt quotes them as they came), judged by its exit code
    // alone since the judge sees no stdout.
    if hook.phase1 {
        let files = firing.files.as_deref().unwrap_or_default();
        let options = match session.map(|step| step.run_options(hook, cancel)) {
            Some(Ok(options)) => options,
            Some(Err(reason)) => return Ok(Ran::Refused(reason)),
            None => RunOptions {
                cancel: Some(cancel.clone()),
                ..RunOptions::default()
            },
        };
        return Ok(Ran::Finished(run_hook(ctx, hook, files, &options)?.into()));
    }
    let parent = ctx.state().run_files_dir();
    // The payload's files, removed when the run is over (dropping `files`). They sit directly
    // in `fire/` under a name unique to this run, so concurrent `fire`s share the directory:
    // a directory per run cost a `mkdir` and an `rmdir`, 0.3 ms each on ext4, more than the
    // hook `true` itself (BENCHMARKS.md, case 7). `fire/` is made the first time it is missing.
    let files = match run_files(payload, &parent, &hook.id) {
        Err(FireError::RunDir { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
            fs::create_dir_all(&parent).map_err(|source| FireError::RunDir {
                path: parent.clone(),
                source,
            })?;
            run_files(payload, &parent, &hook.id)?
        }
        files => files?,
    };
    let env = &files.env;
    let options = RunOptions {
        cancel: Some(cancel.clone()),
        extra_env: crate::payload::dialect_environment(hook.spec.env, env.clone()),
        // From bytes, not a file in the run directory the agent could rewrite (exec rule 1).
        stdin: Some(payload.stdin_json_for(&hook.spec.stdin).into()),
        capture: Capture::Separate {
            limit: CAPTURE_LIMIT,
        },
        ..RunOptions::default()
    };
    let HookAction::Command(command) = &hook.spec.action else {
        return Ok(Ran::Refused(format!(
            "action '{}' has no runner here",
            hook.spec.action.as_str()
        )));
    };
    let (program, found, args): (PathBuf, Option<PathBuf>, Vec<OsString>) = match command {
        Command::Script => {
            let files = firing.files.as_deref().unwrap_or_default();
            let outcome = run_hook(ctx, hook, files, &options)?;
            return Ok(Ran::Finished(outcome.into()));
        }
        Command::Argv(argv) => {
            let expanded = match template::expand_argv(argv, |n| payload.template_value(n)) {
                Ok(expanded) => expanded,
                Err(err) => return Ok(Ran::Refused(format!("argv: {err}"))),
            };
            // What `execve` cannot pass is refused here, where the run can say why: a NUL
            // would end the argument early, an over-long one fail the exec.
            for (i, arg) in expanded.iter().enumerate() {
                let bytes = arg.as_encoded_bytes();
                if bytes.contains(&0) {
                    return Ok(Ran::Refused(format!(
                        "argv: item {i} has a NUL byte, which no argument can hold; read the \
                         value from the event JSON on stdin"
                    )));
                }
                if bytes.len() >= MAX_ARG_BYTES {
                    return Ok(Ran::Refused(format!(
                        "argv: item {i} is {} bytes, over the 128 KiB one argument can hold; \
                         read the value from the event JSON on stdin",
                        bytes.len()
                    )));
                }
            }
            let mut expanded = expanded.into_iter();
            let Some(program) = expanded.next().filter(|p| !p.is_empty()) else {
                return Ok(Ran::Refused("argv: the program expands to nothing".into()));
            };
            (PathBuf::from(program), None, expanded.collect())
        }
        Command::Run(script) => {
            // Rule 20: an unknown name fails the run; the shell would read it as empty.
            if let Some(name) = script
                .references()
                .iter()
                .find(|n| payload.template_value(n).is_none())
            {
                return Ok(Ran::Refused(format!(
                    "run: unknown template variable ${{{name}}}; set it in --data or fix the name"
                )));
            }
            // A value too large for the environment is only in a file (payload rule 5): the
            // script's `$HOOKVISOR_X` would be empty, which rule 20 forbids as well.
            if let Some(name) = script.references().iter().find(|n| {
                let var = template::env_name(n);
                !env.iter().any(|(k, _)| k.as_os_str() == var.as_str())
            }) {
                let var = template::env_name(name);
                let file = format!("{var}_FILE");
                if env.iter().any(|(k, _)| k.as_os_str() == file.as_str()) {
                    return Ok(Ran::Refused(format!(
                        "run: ${{{name}}} is too large for the environment; read the file \
                         ${file} instead"
                    )));
                }
                // Payload rules 6-9: a name ending in _FILE or _NUL, a too long one, one
                // another value took, or one past the budget.
                return Ok(Ran::Refused(format!(
                    "run: ${{{name}}} is not in the environment; read it from the event JSON \
                     on stdin"
                )));
            }
            // A plain command runs without the shell, as `sh -c` would run it, saving the
            // shell's start (BENCHMARKS.md, case 7); one execve cannot run (not in PATH, not
            // executable, a script without `#!`) goes to sh, which handles it as ever. The
            // lookup is made once, here: the run's PATH is ours.
            let direct = script.plain_command().and_then(|words| {
                let found = crate::exec::direct_exec_path(Path::new(words[0]))?;
                Some((words, found))
            });
            match direct {
                Some((words, found)) => (
                    PathBuf::from(words[0]),
                    Some(found),
                    words[1..].iter().map(OsString::from).collect(),
                ),
                None => (
                    PathBuf::from("/bin/sh"),
                    None,
                    vec!["-c".into(), script.script().into()],
                ),
            }
        }
    };
    let mut vars = vec![
        ("DISCOBOT_SESSION_ID".into(), ctx.session_id.clone().into()),
        ("DISCOBOT_WORKSPACE".into(), ctx.workspace.clone().into()),
        ("HOOKVISOR_HOOK_ID".into(), hook.id.clone().into()),
        ("HOOKVISOR_HOOK_PATH".into(), hook.path.clone().into()),
    ];
    vars.extend(env.iter().cloned());
    let invocation = Invocation {
        program,
        found,
        args,
        env: vars,
        // The API token is the server's secret; a changed list belongs to another run.
        env_remove: vec![
            "HOOKVISOR_TOKEN".into(),
            "DISCOBOT_CHANGED_FILES".into(),
            "HOOKVISOR_CHANGED_FILES_NUL".into(),
        ],
        cwd: ctx.workspace.clone(),
        log_path: ctx.log_path(&hook.id),
        timeout: hook.timeout,
    };
    Ok(Ran::Finished(run_command(&invocation, &options)?.into()))
}

/// The judge's view of a finished run.
pub(super) fn finished(ctx: &Context, hook: &Hook, outcome: &RunOutcome) -> FinishedRun {
    let captured = outcome.captured.clone().unwrap_or_default();
    FinishedRun {
        exit_code: outcome.exit_code,
        timed_out: outcome.timed_out.then_some(hook.timeout),
        stdout: captured.stdout,
        stderr: captured.stderr,
        log_path: Some(ctx.log_path(&hook.id)),
    }
}

/// A run that failed before starting: exit 1 with `message` on stderr, also written to its log
/// so that `outputPath` shows why.
fn unfinished(ctx: &Context, hook: &Hook, message: &str) -> FinishedRun {
    let log = ctx.log_path(&hook.id);
    if let Err(err) = crate::exec::write_whole_log(&log, format!("{message}\n").as_bytes()) {
        tracing::warn!("cannot write {}: {err}", log.display());
    }
    FinishedRun {
        exit_code: 1,
        timed_out: None,
        stdout: Vec::new(),
        stderr: format!("{message}\n").into_bytes(),
        log_path: Some(log),
    }
}

/// Step 8 where no reply takes context (`turn.end`'s evaluation): the run's context, taken
/// out of `done` ([`take_context`]), into the buffer.
pub(crate) fn pipe(buffer: &ContextBuffer, hook: &Hook, done: &mut Done) -> Result<(), FireError> {
    buffer_all(buffer, hook, take_context(hook, done))
}

/// Appends each text to the buffer, as piped by `hook`.
fn buffer_all(buffer: &ContextBuffer, hook: &Hook, texts: Vec<String>) -> Result<(), FireError> {
    for text in texts {
        buffer.append(&hook.id, &text)?;
    }
    Ok(())
}

/// Step 8: what one run says to the agent, oldest first, taken out of `done` so that it is
/// delivered once: the hook's own `additionalContext`, then its output when `pipe_output`
/// asks (stdout, then stderr). A failed or timed-out run's output is announced first, as
/// iteratr and nyzhi tell their agents: `hook ID failed with exit code N:` or `hook ID timed
/// out after Ns:` on a line of its own.
pub(crate) fn take_context(hook: &Hook, done: &mut Done) -> Vec<String> {
    let mut texts = std::mem::take(&mut done.judgment.context);
    let run = &done.run;
    let failed = run.timed_out.is_some() || run.exit_code != 0;
    let wanted = match hook.spec.pipe_output {
        PipeOutput::Never => false,
        PipeOutput::Always => true,
        PipeOutput::Failure => failed,
    };
    if wanted {
        let mut text = match (run.timed_out, failed) {
            (Some(after), _) => format!("hook {} timed out after {}s:\n", hook.id, after.as_secs()),
            (None, true) => format!(
                "hook {} failed with exit code {}:\n",
                hook.id, run.exit_code
            ),
            (None, false) => String::new(),
        };
        text.push_str(&String::from_utf8_lossy(&run.stdout));
        text.push_str(&String::from_utf8_lossy(&run.stderr));
        if !text.is_empty() {
            texts.push(text);
        }
    }
    texts
}

/// One entry of the reply's `results`: the phase-1 fields plus `blocked`.
fn result_json(hook: &Hook, firing: &Firing, done: &Done) -> Json {
    let files: Vec<String> = firing
        .files
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|f| f.to_string_lossy().into_owned())
        .collect();
    json!({
        "hookId": hook.id,
        "exitCode": done.run.exit_code,
        "success": done.run.timed_out.is_none() && done.run.exit_code == 0,
        "timedOut": done.run.timed_out.is_some(),
        "files": files,
        "blocked": matches!(done.judgment.verdict, Verdict::Block { .. }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A workspace with a hooks dir and a state dir, removed on drop.
    struct Ws {
        _temp: tempfile::TempDir,
        ctx: Context,
    }

    impl Ws {
        fn new() -> Ws {
            let temp = tempfile::tempdir().unwrap();
            let ctx = crate::context::test_context(temp.path());
            Ws { _temp: temp, ctx }
        }

        /// A declarative hook `name.yml` with this front matter.
        fn yml(&self, name: &str, front: &str) {
            let path = self.ctx.hooks_dir().join(format!("{name}.yml"));
            fs::write(path, format!("---\n{front}\n---\n")).unwrap();
        }

        /// An executable script hook with this front matter and body.
        fn script(&self, name: &str, front: &str, body: &str) {
            let path = self.ctx.hooks_dir().join(name);
            fs::write(&path, format!("#!/bin/sh\n#---\n{front}\n#---\n{body}\n")).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }

        fn fire(&self, firing: &Firing) -> Reply {
            let discovery = crate::discover(&self.ctx.hooks_dir());
            assert!(discovery.problems.is_empty(), "{:?}", discovery.problems);
            fire(&self.ctx, &discovery, firing).unwrap()
        }

        fn fire_event(&self, event: &str, data: Json) -> Reply {
            let mut firing = Firing::new(event.parse().unwrap());
            if let Json::Object(map) = data {
                firing.data = map;
            }
            self.fire(&firing)
        }

        /// Lines the hooks appended to `trace` in the workspace.
        fn trace(&self) -> Vec<String> {
            fs::read_to_string(self.ctx.workspace.join("trace"))
                .unwrap_or_default()
                .lines()
                .map(str::to_owned)
                .collect()
        }

        fn status(&self) -> crate::Status {
            StatusStore::for_context(&self.ctx).load().unwrap()
        }
    }

    fn ids(reply: &Reply) -> Vec<String> {
        reply
            .results
            .iter()
            .map(|r| r["hookId"].as_str().unwrap().to_owned())
            .collect()
    }

    #[test]
    fn exit_codes_give_allow_block_and_abort() {
        // (front matter, decision, reason)
        let table: &[(&str, Decision, Option<&str>)] = &[
            ("run: exit 0", Decision::Allow, None),
            ("run: echo no >&2; exit 2", Decision::Block, Some("no")),
            ("run: exit 1", Decision::Allow, None),
            (
                "run: exit 1\nblock_on: failure",
                Decision::Block,
                Some("exited 1"),
            ),
            (
                "run: exit 1\non_failure: abort",
                Decision::Abort,
                Some("exited 1"),
            ),
            (
                "run: echo '{\"decision\":\"block\",\"reason\":\"json\"}'",
                Decision::Block,
                Some("json"),
            ),
        ];
        for (front, decision, reason) in table {
            let ws = Ws::new();
            ws.yml("h", &format!("event: tool.before\n{front}"));
            let reply = ws.fire_event("tool.before", json!({}));
            assert_eq!(reply.decision, *decision, "{front}");
            assert_eq!(reply.reason.as_deref(), *reason, "{front}");
            assert_eq!(ids(&reply), ["h"]);
            assert_eq!(
                reply.results[0]["blocked"],
                *decision == Decision::Block,
                "{front}"
            );
        }
    }

    #[test]
    fn a_notice_never_blocks() {
        let ws = Ws::new();
        ws.yml("h", "event: session.end\nrun: exit 2");
        let reply = ws.fire_event("session.end", json!({}));
        assert_eq!(reply.decision, Decision::Allow);
        assert_eq!(reply.results[0]["exitCode"], 2);
        assert_eq!(reply.results[0]["blocked"], false);
    }

    #[test]
    fn when_true_runs_false_skips_and_an_error_fails_the_hook() {
        let ws = Ws::new();
        ws.yml(
            "a",
            "event: task.complete\nwhen: ${n} == 1\nrun: echo a >> trace",
        );
        ws.yml(
            "b",
            "event: task.complete\nwhen: ${n} == 2\nrun: echo b >> trace",
        );
        ws.yml(
            "c",
            "event: task.complete\nwhen: ${missing} == 1\nblock_on: failure\nrun: echo c >> trace",
        );
        let reply = ws.fire_event("task.complete", json!({"n": 1}));
        assert_eq!(ws.trace(), ["a"]);
        assert_eq!(ids(&reply), ["a", "c"]);
        assert_eq!(reply.decision, Decision::Block);
        let reason = reply.reason.unwrap();
        assert!(reason.contains("missing"), "{reason}");
        let status = ws.status();
        assert!(!status.hooks.contains_key("b"));
        let c = &status.hooks["c"];
        assert_eq!((c.run_count, c.fail_count), (1, 1));
        assert!(c.note.as_deref().unwrap_or_default().contains("missing"));
        let log = fs::read_to_string(ws.ctx.log_path("c")).unwrap();
        assert!(log.contains("missing"), "{log}");
    }

    /// A plain command is looked up in PATH once and exec'd as written: `argv[0]` is the word,
    /// not the path it was found at; a missing program still goes to sh, which says so.
    #[test]
    fn a_plain_command_runs_with_its_word_as_argv0() {
        let ws = Ws::new();
        ws.yml("argv", "event: task.start\nrun: cat /proc/self/cmdline");
        ws.yml("missing", "event: task.start\nrun: hv-no-such-program x");
        let reply = ws.fire_event("task.start", json!({}));
        assert_eq!(ids(&reply), ["argv", "missing"]);
        let log = fs::read(ws.ctx.log_path("argv")).unwrap();
        assert_eq!(log, b"cat\0/proc/self/cmdline\0");
        let status = ws.status();
        assert_eq!(status.hooks["missing"].last_exit_code, Some(127));
        let log = fs::read_to_string(ws.ctx.log_path("missing")).unwrap();
        assert!(log.contains("hv-no-such-program: not found"), "{log}");
    }

    #[test]
    fn tool_lists_match_exact_names_and_regexes_whole_names() {
        let ws = Ws::new();
        ws.yml(
            "any",
            "event: tool.before\ntool: '*'\nrun: echo any >> trace",
        );
        ws.yml(
            "bash",
            "event: tool.before\ntool: Bash\nrun: echo bash >> trace",
        );
        ws.yml(
            "files",
            "event: tool.before\ntool: Write|Edit\nrun: echo files >> trace",
        );
        ws.yml(
            "regex",
            "event: tool.before\ntool: 'mcp__.*'\nrun: echo regex >> trace",
        );
        ws.fire_event("tool.before", json!({"tool_name": "Edit"}));
        assert_eq!(ws.trace(), ["any", "files"]);
        ws.fire_event("tool.before", json!({"tool_name": "bash"}));
        assert_eq!(ws.trace(), ["any", "files", "any"], "names are exact");
        ws.fire_event("tool.before", json!({"tool_name": "mcp__x"}));
        assert_eq!(ws.trace(), ["any", "files", "any", "any", "regex"]);
        ws.fire_event("tool.before", json!({"tool_name": "my_mcp__x"}));
        assert_eq!(
            ws.trace(),
            ["any", "files", "any", "any", "regex", "any"],
            "a regex matches the whole name"
        );
    }

    /// Review finding 10: `Bash*` and `mcp__*` were exact names no tool has, so a gate written
    /// with them never ran.
    #[test]
    fn a_tool_glob_selects_its_tools() {
        let ws = Ws::new();
        ws.yml(
            "mcp",
            "event: tool.before\ntool: mcp__*\nrun: echo mcp >> trace",
        );
        ws.yml(
            "bash",
            "event: tool.before\ntool: Read|Bash*\nrun: echo bash >> trace",
        );
        ws.fire_event("tool.before", json!({"tool_name": "mcp__github__push"}));
        assert_eq!(ws.trace(), ["mcp"]);
        ws.fire_event("tool.before", json!({"tool_name": "BashOutput"}));
        assert_eq!(ws.trace(), ["mcp", "bash"]);
        ws.fire_event("tool.before", json!({"tool_name": "Write"}));
        assert_eq!(ws.trace(), ["mcp", "bash"]);
    }

    #[test]
    fn other_events_and_unmatched_patterns_run_nothing() {
        let ws = Ws::new();
        ws.yml("h", "event: tool.after\nrun: echo h >> trace");
        ws.yml(
            "p",
            "event: task.start\npattern: '*.rs'\nrun: echo p >> trace",
        );
        assert!(ws.fire_event("tool.before", json!({})).results.is_empty());
        assert!(ws.fire_event("task.start", json!({})).results.is_empty());
        let mut firing = Firing::new(Event::TaskStart);
        firing.files = Some(vec!["README.md".into()]);
        assert!(ws.fire(&firing).results.is_empty());
        firing.files = Some(vec!["README.md".into(), "src/main.rs".into()]);
        assert_eq!(ids(&ws.fire(&firing)), ["p"]);
        assert_eq!(ws.trace(), ["p"]);
    }

    /// Issue 28: a `tool.before` gate with a pattern fails closed: it runs for a matching
    /// file given in `data.files` (as serve and the adapters pass them), for unknown files and
    /// for a file outside the workspace, and only a known file inside that does not match
    /// skips it. Other events keep "no files, no pattern hook".
    #[test]
    fn a_tool_gate_with_a_pattern_fails_closed() {
        let ws = Ws::new();
        ws.yml(
            "g",
            "event: tool.before\npattern: '*.lock, migrations/**'\nrun: echo g >> trace",
        );
        ws.yml(
            "a",
            "event: tool.after\npattern: '*.lock'\nrun: echo a >> trace",
        );
        let gate = |data: Json| ids(&ws.fire_event("tool.before", data));
        let none: [&str; 0] = [];
        assert_eq!(gate(json!({"files": ["Cargo.lock"]})), ["g"]);
        assert_eq!(
            gate(json!({"files": ["src/main.rs", "migrations/001.sql"]})),
            ["g"]
        );
        assert_eq!(gate(json!({"files": ["src/main.rs"]})), none);
        assert_eq!(
            gate(json!({"files": []})),
            none,
            "a tool that writes no file"
        );
        assert_eq!(gate(json!({})), ["g"], "unknown files");
        assert_eq!(gate(json!({"files": [1]})), ["g"], "unreadable files");
        assert_eq!(gate(json!({"files": ["/etc/x.txt"]})), ["g"], "outside");
        assert_eq!(gate(json!({"files": ["../w2/x.txt"]})), ["g"], "outside");
        // tool.after is no gate: a pattern needs a match.
        let after = |data: Json| ids(&ws.fire_event("tool.after", data));
        assert_eq!(after(json!({})), none);
        assert_eq!(after(json!({"files": ["/etc/x.txt"]})), none);
        assert_eq!(after(json!({"files": ["a/Cargo.lock"]})), ["a"]);
    }

    #[test]
    fn pre_then_post_with_decision_and_the_first_block_ends_the_pre_pass() {
        let ws = Ws::new();
        ws.yml(
            "a-post",
            "event: task.complete\nphase: post\nrun: echo post ${decision} >> trace",
        );
        ws.yml("b-pre", "event: task.complete\nrun: echo pre1 >> trace");
        ws.yml(
            "c-block",
            "event: task.complete\nrun: echo block >> trace; echo stop >&2; exit 2",
        );
        ws.yml("d-pre", "event: task.complete\nrun: echo pre2 >> trace");
        ws.yml(
            "e-post",
            "event: task.complete\nphase: post\nrun: 'echo post2 >> trace; exit 2'",
        );
        let reply = ws.fire_event("task.complete", json!({}));
        assert_eq!(ws.trace(), ["pre1", "block", "post block", "post2"]);
        assert_eq!(ids(&reply), ["b-pre", "c-block", "a-post", "e-post"]);
        assert_eq!(reply.decision, Decision::Block);
        assert_eq!(reply.reason.as_deref(), Some("stop"));
        assert_eq!(
            reply.results[3]["blocked"], false,
            "post hooks cannot block"
        );
    }

    /// §1.3 `await: false`: the hook runs after the decision was handed over, before the
    /// `post` pass, and its exit 2 blocks nothing.
    #[test]
    fn unawaited_hooks_run_after_the_decision_and_cannot_block() {
        let ws = Ws::new();
        ws.yml(
            "a-unawaited",
            "event: tool.before\nawait: false\nrun: 'echo unawaited >> trace; exit 2'",
        );
        ws.yml("b-pre", "event: tool.before\nrun: echo pre >> trace");
        ws.yml(
            "c-post",
            "event: tool.before\nphase: post\nrun: echo post ${decision} >> trace",
        );
        let discovery = crate::discover(&ws.ctx.hooks_dir());
        let mut at_decision = None;
        let reply = fire_deciding(
            &ws.ctx,
            &discovery,
            &Firing::new(Event::ToolBefore),
            |decided| at_decision = Some((ws.trace(), decided.decision)),
        )
        .unwrap();
        assert_eq!(at_decision, Some((vec!["pre".to_owned()], Decision::Allow)));
        assert_eq!(ws.trace(), ["pre", "unawaited", "post allow"]);
        assert_eq!(reply.decision, Decision::Allow);
        assert_eq!(ids(&reply), ["b-pre", "a-unawaited", "c-post"]);
        assert_eq!(reply.results[1]["blocked"], false, "{:?}", reply.results);
    }

    #[test]
    fn post_hooks_see_allow() {
        let ws = Ws::new();
        ws.yml(
            "a",
            "event: task.complete\nphase: post\nrun: echo ${decision} >> trace",
        );
        ws.fire_event("task.complete", json!({}));
        assert_eq!(ws.trace(), ["allow"]);
    }

    #[test]
    fn piped_output_is_drained_by_turn_start_after_its_own_hooks() {
        let ws = Ws::new();
        ws.yml(
            "lint",
            "event: error\npipe_output: true\nrun: echo lint says hi",
        );
        ws.yml(
            "quiet",
            "event: error\npipe_output: failure\nrun: echo never piped",
        );
        ws.yml(
            "loud",
            "event: error\npipe_output: failure\nrun: echo failed once; exit 1",
        );
        ws.yml(
            "start",
            "event: turn.start\npipe_output: true\nrun: echo from turn.start",
        );
        let reply = ws.fire_event("error", json!({}));
        assert!(reply.context.is_empty(), "only turn.start drains");
        let reply = ws.fire_event("turn.start", json!({}));
        assert_eq!(reply.context.len(), 1, "{:?}", reply.context);
        let text = &reply.context[0];
        let at = |s: &str| {
            text.find(s)
                .unwrap_or_else(|| panic!("{s} not in {text:?}"))
        };
        assert!(at("lint says hi") < at("failed once"));
        assert!(at("failed once") < at("from turn.start"));
        assert!(!text.contains("never piped"));
        let reply = ws.fire_event("turn.start", json!({}));
        assert_eq!(reply.context.len(), 1, "its own hook pipes again");
        assert!(!reply.context[0].contains("lint"), "the buffer was emptied");
    }

    #[test]
    fn a_blocked_turn_start_keeps_the_buffer() {
        let ws = Ws::new();
        ws.yml("lint", "event: error\npipe_output: true\nrun: echo keep me");
        ws.yml(
            "gate",
            "event: turn.start\nwhen: ${open} == false\nrun: exit 2",
        );
        ws.fire_event("error", json!({}));
        let refused = ws.fire_event("turn.start", json!({"open": false}));
        assert_eq!(refused.decision, Decision::Block);
        assert!(refused.context.is_empty());
        let next = ws.fire_event("turn.start", json!({"open": true}));
        assert_eq!(next.decision, Decision::Allow);
        assert_eq!(next.context, ["keep me\n"]);
    }

    #[test]
    fn a_timeout_blocks_under_block_on_failure() {
        let ws = Ws::new();
        ws.yml(
            "slow",
            "event: task.start\ntimeout: 1\nblock_on: failure\nrun: sleep 30",
        );
        let started = std::time::Instant::now();
        let reply = ws.fire_event("task.start", json!({}));
        assert!(started.elapsed().as_secs() < 10);
        assert_eq!(reply.decision, Decision::Block);
        assert_eq!(reply.reason.as_deref(), Some("timed out after 1s"));
        assert_eq!(reply.results[0]["timedOut"], true);
    }

    #[test]
    fn a_cancelled_firing_has_no_decision() {
        let ws = Ws::new();
        ws.yml("a", "event: task.start\nrun: echo a >> trace");
        let mut firing = Firing::new(Event::TaskStart);
        let cancel = CancelToken::new();
        cancel.cancel();
        firing.cancel = Some(cancel);
        let discovery = crate::discover(&ws.ctx.hooks_dir());
        let err = fire(&ws.ctx, &discovery, &firing).unwrap_err();
        assert!(matches!(err, FireError::Cancelled), "{err}");
        assert!(ws.trace().is_empty());
    }

    /// Step 8: context is answered where the agent reads it (tool.after), else buffered for
    /// the next turn.start (a gate's JSON `additionalContext`); each once.
    #[test]
    fn additional_context_goes_to_the_reply_where_the_agent_reads_it_else_the_buffer() {
        let ws = Ws::new();
        ws.yml(
            "ctx",
            "event: tool.before\nrun: echo '{\"additionalContext\":\"remember tests\"}'",
        );
        ws.yml(
            "after",
            "event: tool.after\nrun: echo '{\"additionalContext\":\"ran\"}'",
        );
        assert_eq!(ws.fire_event("tool.after", json!({})).context, ["ran"]);
        assert!(ws.fire_event("tool.before", json!({})).context.is_empty());
        assert_eq!(
            ws.fire_event("turn.start", json!({})).context,
            ["remember tests\n"]
        );
        assert!(ws.fire_event("turn.start", json!({})).context.is_empty());
    }

    #[test]
    fn retries_rerun_a_failure_then_go_on() {
        let ws = Ws::new();
        ws.yml(
            "flaky",
            "event: task.start\non_failure: retry\nretries: 2\nretry_delay: 0\n\
             run: echo x >> trace; exit 1",
        );
        let reply = ws.fire_event("task.start", json!({}));
        assert_eq!(ws.trace().len(), 3, "one run and two re-runs");
        assert_eq!(reply.decision, Decision::Allow);
        assert_eq!(reply.results.len(), 1, "one result per hook");
        let flaky = &ws.status().hooks["flaky"];
        assert_eq!((flaky.run_count, flaky.fail_count), (3, 3));
    }

    #[test]
    fn a_when_error_is_not_retried() {
        let ws = Ws::new();
        ws.yml(
            "w",
            "event: task.start\non_failure: retry\nretries: 3\nretry_delay: 0\n\
             when: ${nope} == 1\nrun: exit 0",
        );
        let reply = ws.fire_event("task.start", json!({}));
        assert_eq!(reply.results[0]["success"], false);
        assert_eq!(ws.status().hooks["w"].run_count, 1);
    }

    #[test]
    fn a_retry_that_passes_stops_retrying() {
        let ws = Ws::new();
        ws.yml(
            "flaky",
            "event: task.start\non_failure: [retry, abort]\nretries: 5\nretry_delay: 0\n\
             run: echo x >> trace; test $(wc -l < trace) -ge 2",
        );
        let reply = ws.fire_event("task.start", json!({}));
        assert_eq!(ws.trace().len(), 2);
        assert_eq!(reply.decision, Decision::Allow);
    }

    #[test]
    fn unknown_names_fail_the_run_and_never_expand_empty() {
        let ws = Ws::new();
        ws.yml(
            "r",
            "event: task.start\nblock_on: failure\nrun: echo ${nope} >> trace",
        );
        ws.yml(
            "a",
            "event: task.start\nphase: post\nargv: [sh, -c, 'echo $0 >> trace', '${nope}']",
        );
        let reply = ws.fire_event("task.start", json!({}));
        assert!(ws.trace().is_empty());
        assert_eq!(reply.decision, Decision::Block);
        assert!(reply.reason.unwrap().contains("nope"));
        assert_eq!(reply.results[1]["exitCode"], 1);
        let status = ws.status();
        assert!(status.hooks["a"].note.as_deref().unwrap().contains("nope"));
    }

    #[test]
    fn a_value_only_in_a_file_fails_a_run_hook_and_reaches_argv() {
        let ws = Ws::new();
        ws.yml(
            "r",
            "event: task.start\nblock_on: failure\nrun: echo ${big} > run.out",
        );
        ws.yml("a", "event: task.start\nphase: post\nargv: [sh, -c, 'printf %s \"$1\" > argv.out', sh, '${big}']");
        let big = "x".repeat(70_000);
        let reply = ws.fire_event("task.start", json!({ "big": big }));
        assert_eq!(reply.decision, Decision::Block);
        assert!(reply.reason.unwrap().contains("HOOKVISOR_BIG_FILE"));
        assert!(!ws.ctx.workspace.join("run.out").exists());
        assert_eq!(
            fs::read_to_string(ws.ctx.workspace.join("argv.out")).unwrap(),
            big
        );
    }

    /// A `run:` reference to a name the environment keeps for files fails the run, and says
    /// where the value is, instead of naming a file that does not exist.
    #[test]
    fn a_run_reference_to_a_file_name_fails_and_points_to_stdin() {
        let ws = Ws::new();
        ws.yml(
            "r",
            "event: task.start\nblock_on: failure\nrun: cat ${note_file} > run.out",
        );
        let reply = ws.fire_event("task.start", json!({ "note_file": "/etc/passwd" }));
        assert_eq!(reply.decision, Decision::Block, "{reply:?}");
        let reason = reply.reason.unwrap();
        assert!(reason.contains("not in the environment"), "{reason}");
        assert!(!ws.ctx.workspace.join("run.out").exists());
    }

    /// Review finding 8: an argument no `execve` takes (a NUL byte, over 128 KiB) fails the
    /// run with a message, not `fire` with an internal error.
    #[test]
    fn an_argv_value_exec_cannot_take_fails_the_run_with_a_reason() {
        for (value, why) in [
            (json!("a\u{0}b"), "NUL byte"),
            (json!("x".repeat(MAX_ARG_BYTES)), "over the 128 KiB"),
        ] {
            let ws = Ws::new();
            ws.yml(
                "a",
                "event: task.start\nblock_on: failure\nargv: [sh, -c, ': > ran', sh, '${v}']",
            );
            let reply = ws.fire_event("task.start", json!({ "v": value }));
            assert_eq!(reply.decision, Decision::Block, "{why}: {reply:?}");
            let reason = reply.reason.unwrap();
            assert!(reason.contains(why) && reason.contains("argv"), "{reason}");
            assert!(!ws.ctx.workspace.join("ran").exists());
        }
        // One byte under the limit still runs.
        let ws = Ws::new();
        ws.yml(
            "a",
            "event: task.start\nargv: [sh, -c, 'printf %s \"$1\" | wc -c > n', sh, '${v}']",
        );
        let value = "x".repeat(MAX_ARG_BYTES - 1);
        let reply = ws.fire_event("task.start", json!({ "v": value }));
        assert_eq!(reply.decision, Decision::Allow, "{reply:?}");
        let n = fs::read_to_string(ws.ctx.workspace.join("n")).unwrap();
        assert_eq!(n.trim(), (MAX_ARG_BYTES - 1).to_string());
    }

    #[test]
    fn hostile_values_reach_run_and_argv_byte_exact() {
        let ws = Ws::new();
        let hostile = "' \" $ ; & | ` $(touch SENTINEL) `touch SENTINEL`\nline2";
        ws.yml("r", "event: task.start\nrun: printf '%s' ${v} > run.out");
        ws.yml(
            "a",
            "event: task.start\nargv: [sh, -c, 'printf %s \"$1\" > argv.out', sh, '${v}']",
        );
        let reply = ws.fire_event("task.start", json!({"v": hostile}));
        assert_eq!(reply.decision, Decision::Allow, "{reply:?}");
        for out in ["run.out", "argv.out"] {
            assert_eq!(
                fs::read_to_string(ws.ctx.workspace.join(out)).unwrap(),
                hostile
            );
        }
        assert!(!ws.ctx.workspace.join("SENTINEL").exists());
    }

    #[test]
    fn scripts_get_the_event_json_on_stdin_and_the_variables() {
        let ws = Ws::new();
        ws.script(
            "s.sh",
            "# event: task.complete",
            "cat > stdin.json; printf '%s' \"$HOOKVISOR_TASK_ID\" > id.txt",
        );
        let mut firing = Firing::new(Event::TaskComplete);
        firing.data = json!({"task_id": "t-1"}).as_object().unwrap().clone();
        firing.session = Some("other".into());
        firing.stage = Some("plan".into());
        ws.fire(&firing);
        let stdin: Json =
            serde_json::from_slice(&fs::read(ws.ctx.workspace.join("stdin.json")).unwrap())
                .unwrap();
        assert_eq!(stdin["event"], "task.complete");
        assert_eq!(stdin["session"], "other");
        assert_eq!(stdin["stage"], "plan");
        assert_eq!(stdin["trigger"], "user");
        assert_eq!(stdin["data"]["task_id"], "t-1");
        assert_eq!(
            fs::read_to_string(ws.ctx.workspace.join("id.txt")).unwrap(),
            "t-1"
        );
    }

    #[test]
    fn status_records_event_source_and_action() {
        let ws = Ws::new();
        ws.yml("h", "event: task.start\nrun: exit 0");
        ws.script("s.sh", "# event: task.start", "exit 3");
        ws.fire_event("task.start", json!({}));
        ws.fire_event("task.start", json!({}));
        let bytes = fs::read(ws.ctx.status_path()).unwrap();
        let json: Json = serde_json::from_slice(&bytes).unwrap();
        let h = &json["hooks"]["h"];
        assert_eq!(h["event"], "task.start");
        assert_eq!(h["source"], ".discobot/hooks/h.yml:1");
        assert_eq!(h["action"], "command");
        assert_eq!(h["runCount"], 2);
        let s = &json["hooks"]["s"];
        assert_eq!(s["source"], ".discobot/hooks/s.sh:1");
        assert_eq!(
            (s["runCount"].as_u64(), s["lastExitCode"].as_i64()),
            (Some(2), Some(3))
        );
        // A phase-1 entry keeps its JSON: no event fields.
        let phase1 = serde_json::to_value(crate::status::HookStatus::new(
            "x",
            "x",
            crate::HookKind::File,
        ))
        .unwrap();
        assert!(phase1.get("event").is_none() && phase1.get("source").is_none());
        assert!(phase1.get("action").is_none());
    }
}

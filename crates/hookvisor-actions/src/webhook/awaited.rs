//! An awaited webhook (rule 8): a callback registered, the request sent with its URL, the
//! wait, and what the answer means for the event.

use std::time::{Duration, Instant, SystemTime};

use serde_json::json;

use super::run::{Sent, send};
use crate::callback::{self, Answer, Pending, Verdict as CallbackVerdict};
use hookvisor_core::config::{Callback, Config};
use hookvisor_core::context::Context;
use hookvisor_core::decision::{DEFAULT_MAX_REASON, Verdict};
use hookvisor_core::exec::{CancelToken, Captured, ExecError, RunOutcome};
use hookvisor_core::hook::Hook;
use hookvisor_core::payload::Payload;
use hookvisor_core::policy::OnTimeout;
use hookvisor_core::produced::{Produced, ProducedName};
use hookvisor_core::runner::ActionRun;
use hookvisor_core::runner::Ran;
use hookvisor_core::state::Durability;
use hookvisor_core::status::{CallbackState, CallbackWait, StatusStore};
use hookvisor_core::webhook::Webhook;

/// Runs an awaited webhook: registers its callback, sends it, waits the hook's `timeout`.
///
/// A wait that cannot start (the listener or the token cannot be made, the request cannot be
/// expanded or is not delivered after its retries) has no answer, and is judged as a timeout
/// by `on_timeout` (docs/EVENTS.md §4.3): under `abort`, the default, the event is aborted whatever
/// `on_failure` and `block_on` say, since the agent can make a request fail (a long or
/// multi-line value, a squatted `callback_port`, a parallel call on the same port) and a gate
/// that asks someone must not open because asking failed.
pub(super) fn run(
    ctx: &Context,
    hook: &Hook,
    action: &Webhook,
    payload: &Payload,
    cancel: &CancelToken,
) -> Result<Ran, ExecError> {
    let pending = match register(ctx, action) {
        Ok(pending) => pending,
        Err(message) => return unstarted(ctx, hook, action, None, message),
    };
    let mut sent = match send(hook, action, payload, Some(&pending), cancel) {
        Ok(sent) => sent,
        Err(message) => return unstarted(ctx, hook, action, None, message),
    };
    if sent.outcome.cancelled {
        // A signal during the delivery is no answer either (see `judged`'s cancel).
        let message = "webhook: cancelled before the callback wait began".to_owned();
        return unstarted(ctx, hook, action, Some(sent), message);
    }
    if !sent.delivered {
        // Nobody was told where to answer, so nothing is awaited; dropping `pending` revokes
        // the token.
        sent.note("callback: not awaited: the webhook was not delivered");
        let message = "webhook: the request with the callback URL was not delivered".to_owned();
        return unstarted(ctx, hook, action, Some(sent), message);
    }
    let store = StatusStore::for_context(ctx).with_durability(Durability::Whole);
    let since = SystemTime::now();
    let limit = wait_limit(hook.timeout, callback::wait_cap());
    // A timeout too far out for the clock (the parser bounds it; this is the last guard) is
    // shown as the furthest the clock can say rather than a panic after the message went out.
    let timeout_at = hookvisor_core::timestamp::rfc3339(since.checked_add(limit).unwrap_or(since));
    mark(
        &store,
        ctx,
        hook,
        CallbackState::Waiting,
        since,
        &timeout_at,
    );
    sent.note(&format!(
        "callback: waiting up to {}s (until {timeout_at}){}",
        limit.as_secs(),
        if limit < hook.timeout {
            "; the agent's own hook timeout caps the wait"
        } else {
            ""
        }
    ));
    let waiting = Instant::now();
    let answer = pending.wait(limit, cancel);
    sent.outcome.duration += waiting.elapsed();
    let state = match &answer {
        Answer::Taken(_) => CallbackState::Answered,
        Answer::TimedOut => CallbackState::TimedOut,
        Answer::Cancelled => CallbackState::Revoked,
    };
    mark(&store, ctx, hook, state, SystemTime::now(), &timeout_at);
    judged(ctx, hook, action, sent, answer, limit).map(Ran::Finished)
}

/// How long a wait lasts: the hook's `timeout`, at most the process's `cap` (an agent that
/// kills its hook at its own timeout would otherwise decide instead of `on_timeout`).
fn wait_limit(timeout: Duration, cap: Option<Duration>) -> Duration {
    cap.map_or(timeout, |cap| cap.min(timeout))
}

/// The run of a wait that never started (see [`run`]): under `on_timeout: abort` the event is
/// aborted naming `message`; under `continue` it is a failure like any other, as a timeout is.
fn unstarted(
    ctx: &Context,
    hook: &Hook,
    action: &Webhook,
    sent: Option<Sent>,
    message: String,
) -> Result<Ran, ExecError> {
    if action.on_timeout != OnTimeout::Abort {
        return Ok(match sent {
            Some(sent) => Ran::Finished(sent.finish(ctx, hook)?.into()),
            None => Ran::Refused(message),
        });
    }
    let mut sent = sent.unwrap_or_else(|| Sent {
        outcome: RunOutcome {
            exit_code: 1,
            ..RunOutcome::default()
        },
        log: Vec::new(),
        delivered: false,
        secrets: Vec::new(),
    });
    let reason = format!("{message}; so no callback can come (on_timeout: abort)");
    sent.note(&reason);
    if sent.outcome.exit_code == 0 {
        sent.outcome.exit_code = 1;
    }
    // Judged, not a bare cancel: `fire` hands the abort on (see `judged`).
    sent.outcome.cancelled = false;
    sent.outcome.captured = Some(Captured {
        stderr: format!("{reason}\n").into_bytes(),
        ..Captured::default()
    });
    let verdict = Verdict::Abort {
        reason: hookvisor_core::decision::shrink(
            &reason,
            Some(&ctx.log_path(&hook.id)),
            DEFAULT_MAX_REASON,
        ),
    };
    Ok(Ran::Finished(ActionRun {
        outcome: sent.finish(ctx, hook)?,
        produced: Vec::new(),
        verdict: Some(verdict),
    }))
}

/// A wait on this process's callback listener, on the hook's `callback_port`, else the
/// configuration's `callback.port`, else an ephemeral port.
fn register(ctx: &Context, action: &Webhook) -> Result<Pending, String> {
    // A broken file leaves every setting its default (config rule 2); `check` shows why.
    let config = Config::load(&ctx.workspace)
        .unwrap_or_else(|err| {
            tracing::warn!(
                "{}: {err}; the callback listener takes its defaults",
                Config::path(&ctx.workspace).display()
            );
            None
        })
        .unwrap_or_default();
    let wanted = Callback {
        port: action.callback_port.or(config.callback.port),
        public_url: config.callback.public_url,
    };
    let listener = callback::listener(&wanted).map_err(|err| format!("webhook: {err}"))?;
    listener.register().map_err(|err| format!("webhook: {err}"))
}

/// What the wait's end means: the outcome as status.json records it, the verdict, and
/// `${hook_response}` for the later hooks.
fn judged(
    ctx: &Context,
    hook: &Hook,
    action: &Webhook,
    mut sent: Sent,
    answer: Answer,
    limit: Duration,
) -> Result<ActionRun, ExecError> {
    let mut verdict = None;
    let mut produced = Vec::new();
    // The receiver's own reply stays in the log; what the judge reads is the callback's.
    let mut stdout = Vec::new();
    let mut stderr = Vec::new();
    match answer {
        Answer::Taken(response) => {
            let word = match response.verdict {
                CallbackVerdict::Success => "approved",
                CallbackVerdict::Abort => "rejected",
                CallbackVerdict::Block => "blocked",
            };
            let said = response.message.as_deref().unwrap_or("");
            sent.note(&format!(
                "callback: {word}{}{said}",
                if said.is_empty() { "" } else { ": " }
            ));
            let hook_response = response.json.to_string();
            sent.note(&format!("hook_response: {hook_response}"));
            produced.push(Produced {
                name: ProducedName::HookResponse,
                value: hook_response,
            });
            match response.verdict {
                CallbackVerdict::Success => {}
                // Said in the agents' protocol, so the judge decides whether this hook can
                // block (a `pre` hook of a gate) and a notice's block is logged and ignored.
                CallbackVerdict::Block => {
                    let reason = response
                        .message
                        .unwrap_or_else(|| "blocked by the webhook's callback".to_owned());
                    stdout = json!({"decision": "block", "reason": reason})
                        .to_string()
                        .into_bytes();
                }
                // An abort whatever `on_failure` says (docs/EVENTS.md §4.3), so the action's own.
                CallbackVerdict::Abort => {
                    let reason = match response.message {
                        Some(message) => format!("the webhook's callback rejected it: {message}"),
                        None => "the webhook's callback rejected it".to_owned(),
                    };
                    sent.outcome.exit_code = 1;
                    stderr = format!("{reason}\n").into_bytes();
                    verdict = Some(Verdict::Abort {
                        reason: hookvisor_core::decision::shrink(
                            &reason,
                            Some(&ctx.log_path(&hook.id)),
                            DEFAULT_MAX_REASON,
                        ),
                    });
                }
            }
        }
        Answer::TimedOut => {
            let message = format!(
                "webhook: no callback within {}s; the callback URL no longer answers",
                limit.as_secs()
            );
            // Recorded as what happened, a timeout (exit 124, as a command's).
            sent.outcome.timed_out = true;
            sent.outcome.exit_code = 124;
            stderr = format!("{message}\n").into_bytes();
            sent.note(&format!(
                "{message}; on_timeout: {}",
                action.on_timeout.as_str()
            ));
            if action.on_timeout == OnTimeout::Abort {
                verdict = Some(Verdict::Abort {
                    reason: format!("{message} (on_timeout: abort)"),
                });
            }
        }
        // A signal to the waiting process (the agent's uid can send one) must not be an
        // answer: under `on_timeout: abort` it aborts the event as a timeout would, and `fire`
        // hands that decision on rather than a bare cancel a caller might take as "allow".
        Answer::Cancelled if action.on_timeout == OnTimeout::Abort => {
            let message = "webhook: the callback wait was cancelled before an answer came";
            sent.note(&format!("{message}; on_timeout: abort"));
            sent.outcome.exit_code = 1;
            stderr = format!("{message}\n").into_bytes();
            verdict = Some(Verdict::Abort {
                reason: format!("{message} (on_timeout: abort)"),
            });
        }
        Answer::Cancelled => {
            sent.note("callback: the wait was cancelled");
            sent.outcome.cancelled = true;
        }
    }
    sent.outcome.captured = Some(Captured {
        stdout,
        stderr,
        ..Captured::default()
    });
    Ok(ActionRun {
        outcome: sent.finish(ctx, hook)?,
        produced,
        verdict,
    })
}

/// Writes where the wait stands into the hook's status entry (the contract of
/// `status::callback`): never the URL or its token. A status that cannot be written is logged
/// and the wait goes on: the field is for dashboards, the run's record still comes.
fn mark(
    store: &StatusStore,
    ctx: &Context,
    hook: &Hook,
    state: CallbackState,
    since: SystemTime,
    timeout_at: &str,
) {
    let wait = CallbackWait {
        state,
        since: hookvisor_core::timestamp::rfc3339(since),
        timeout_at: timeout_at.to_owned(),
    };
    if let Err(err) = store.update(|status| status.entry(hook, ctx).callback = Some(wait)) {
        tracing::warn!(
            "{}: cannot note the callback wait ({}) in status.json: {err}",
            hook.file_name(),
            state.as_str()
        );
    }
}

//! Server-sent events: what the dashboard and agents hear without polling.
//!
//! Hook runs are recorded by whoever runs them (this server, `hookvisor run`, the pre-commit
//! path, the init) in `status.json`, so the run events are derived from the file: every time it
//! is replaced, [`status_events`] compares it with the previous version. That way a run is
//! announced once whoever made it, and the events can never disagree with the file.

use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::{self, KeepAlive, Sse};
use futures_util::Stream;
use hookvisor_core::decision::Decision;
use hookvisor_core::status::CallbackState;
use hookvisor_core::status::history::History;
use hookvisor_core::{Action, RunResult, Status};
use serde::Serialize;
use tokio::sync::{broadcast, watch};

/// How many events a slow subscriber may fall behind before it misses some.
const CAPACITY: usize = 256;

/// How often an idle stream sends a comment, so proxies and clients keep it open.
const KEEP_ALIVE: Duration = Duration::from_secs(15);

/// One event; serialised as the SSE `data` with its kind as the SSE `event` name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "camelCase",
    rename_all_fields = "camelCase"
)]
pub enum Event {
    /// A hook started running.
    HookStarted {
        /// The hook's id.
        hook_id: String,
    },
    /// A hook finished, with its recorded result.
    HookFinished {
        /// The hook's id.
        hook_id: String,
        /// Whether it passed.
        success: bool,
        /// Its exit status.
        exit_code: Option<i32>,
        /// Whether it was killed for its timeout.
        timed_out: bool,
        /// How long it ran, when recorded.
        duration_ms: Option<u64>,
    },
    /// A run started: [`Event::HookStarted`] with the run's number (the `run` of
    /// `/hooks/{id}/runs`) and what its history says of it; `trigger` and `session` are null
    /// for a run seen while it runs (status.json does not say them).
    RunStarted {
        /// The hook's id.
        hook_id: String,
        /// The run's number.
        run: u64,
        /// The event it runs for.
        event: Option<String>,
        /// `user`, `hook` or `loop`.
        trigger: Option<String>,
        /// The agent session.
        session: Option<String>,
    },
    /// A run finished: [`Event::HookFinished`] with the run's number and its history record.
    RunFinished {
        /// The hook's id.
        hook_id: String,
        /// The run's number.
        run: u64,
        /// `success`, `failure` or `timeout`.
        result: String,
        /// Its exit status.
        exit_code: Option<i32>,
        /// How long it ran.
        duration_ms: Option<u64>,
        /// What it decided for the agent, when known yet (a turn end's re-prompt is added when
        /// the evaluation ends: `evaluationDone` follows).
        decision: Option<String>,
        /// The agent session.
        session: Option<String>,
    },
    /// An awaited webhook's callback wait began or ended (status.json's `callback`).
    CallbackChanged {
        /// The hook's id.
        hook_id: String,
        /// The wait's state now; `null` when the entry no longer has one.
        state: Option<CallbackState>,
    },
    /// The set of pending file hooks changed.
    PendingChanged {
        /// The pending hooks, in order.
        pending: Vec<String>,
    },
    /// An end-of-turn evaluation finished.
    EvaluationDone {
        /// What the agent was told to do.
        action: Action,
        /// The hooks still pending.
        pending: Vec<String>,
    },
    /// An evaluation was cancelled by a new turn; its hook is pending again.
    EvaluationCancelled,
    /// The hook files changed: hooks or problems were added, removed or edited.
    HooksChanged {
        /// How many hooks can run.
        hooks: usize,
        /// How many files will not run.
        problems: usize,
    },
    /// A gate of a session started waiting, or one of the session's gates left (decided, or
    /// its client went away).
    GateQueue {
        /// The session (its `session_id`, else the server's).
        session: String,
        /// How many of its gates wait behind the running one.
        waiting: usize,
    },
    /// A turn end waits for the running job: it will answer with the evaluation's outcome, or
    /// evaluate once the explicit run is over.
    TurnWaiting {
        /// What it waits for: "an evaluation" or "a run of 'ID'".
        behind: String,
    },
    /// An event fired through `POST /v1/events/{event}` was decided (docs/EVENTS.md §3).
    #[serde(rename = "event.decided")]
    Decided {
        /// The canonical event name.
        event: String,
        /// What its hooks decided.
        decision: Decision,
        /// The block or abort reason; `null` on allow.
        reason: Option<String>,
        /// The reply's results, one per run: `{hookId, exitCode, success, timedOut, files,
        /// blocked}`, so the dashboard can tell which hook blocked.
        results: Vec<serde_json::Value>,
    },
}

impl Event {
    /// The SSE event name, the same as the `type` field.
    pub fn name(&self) -> &'static str {
        match self {
            Event::HookStarted { .. } => "hookStarted",
            Event::HookFinished { .. } => "hookFinished",
            Event::RunStarted { .. } => "runStarted",
            Event::RunFinished { .. } => "runFinished",
            Event::CallbackChanged { .. } => "callbackChanged",
            Event::PendingChanged { .. } => "pendingChanged",
            Event::EvaluationDone { .. } => "evaluationDone",
            Event::EvaluationCancelled => "evaluationCancelled",
            Event::HooksChanged { .. } => "hooksChanged",
            Event::GateQueue { .. } => "gateQueue",
            Event::TurnWaiting { .. } => "turnWaiting",
            Event::Decided { .. } => "event.decided",
        }
    }
}

/// The fan-out point: publishers send, every open `/v1/events` stream receives.
#[derive(Debug, Clone)]
pub struct Hub {
    sender: broadcast::Sender<Event>,
}

impl Default for Hub {
    fn default() -> Self {
        Hub {
            sender: broadcast::channel(CAPACITY).0,
        }
    }
}

impl Hub {
    /// Sends an event to every subscriber; nobody listening is fine.
    pub fn publish(&self, event: Event) {
        tracing::debug!(event = event.name(), "event");
        let _ = self.sender.send(event);
    }

    /// A receiver of every event published from now on.
    pub fn subscribe(&self) -> broadcast::Receiver<Event> {
        self.sender.subscribe()
    }

    /// The SSE response of `/v1/events`: every event until `shutdown` turns true, with
    /// keep-alive comments in between. A subscriber that falls behind skips what it missed.
    pub fn stream(
        &self,
        shutdown: watch::Receiver<bool>,
    ) -> Sse<impl Stream<Item = Result<sse::Event, Infallible>> + use<>> {
        let receiver = self.subscribe();
        let stream = futures_util::stream::unfold(
            (receiver, shutdown),
            |(mut receiver, mut shutdown)| async move {
                loop {
                    if *shutdown.borrow() {
                        return None;
                    }
                    let event = tokio::select! {
                        event = receiver.recv() => event,
                        _ = shutdown.changed() => return None,
                    };
                    match event {
                        Ok(event) => {
                            let data = serde_json::to_string(&event).expect("events serialise");
                            let sse = sse::Event::default().event(event.name()).data(data);
                            return Some((Ok(sse), (receiver, shutdown)));
                        }
                        Err(broadcast::error::RecvError::Lagged(n)) => {
                            tracing::debug!("an event stream fell behind and skipped {n} events");
                        }
                        Err(broadcast::error::RecvError::Closed) => return None,
                    }
                }
            },
        );
        Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
    }
}

/// A hook run seen finishing in `status.json`, for the duration histogram.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    /// The hook's id.
    pub hook_id: String,
    /// How long it ran, when recorded.
    pub duration_ms: Option<u64>,
}

/// The events that turn `old` into `new`, and the runs that finished in between.
///
/// A run counts as finished when its hook's `runCount` grew. A run too quick to be seen
/// `running` still gets its `hookStarted` just before its `hookFinished`, so every run is
/// announced as a pair. Several runs between two reads are announced once, with the last result.
pub fn status_events(old: &Status, new: &Status) -> (Vec<Event>, Vec<Finished>) {
    let mut events = Vec::new();
    let mut finished = Vec::new();
    for (id, entry) in &new.hooks {
        let before = old.hooks.get(id);
        let was_running = before.is_some_and(|b| b.last_result == RunResult::Running);
        let old_runs = before.map_or(0, |b| b.run_count);
        if entry.run_count > old_runs {
            if !was_running {
                events.push(Event::HookStarted {
                    hook_id: id.clone(),
                });
            }
            events.push(Event::HookFinished {
                hook_id: id.clone(),
                success: entry.last_result == RunResult::Success,
                exit_code: entry.last_exit_code,
                timed_out: entry.timed_out,
                duration_ms: entry.duration_ms,
            });
            finished.push(Finished {
                hook_id: id.clone(),
                duration_ms: entry.duration_ms,
            });
        }
        if entry.last_result == RunResult::Running && !was_running {
            events.push(Event::HookStarted {
                hook_id: id.clone(),
            });
        }
        if entry.callback != before.and_then(|b| b.callback.clone()) {
            events.push(Event::CallbackChanged {
                hook_id: id.clone(),
                state: entry.callback.as_ref().map(|c| c.state),
            });
        }
    }
    if old.pending_hooks != new.pending_hooks {
        events.push(Event::PendingChanged {
            pending: new.pending_hooks.clone(),
        });
    }
    (events, finished)
}

/// `events` with a [`Event::RunStarted`] after each `hookStarted` and a [`Event::RunFinished`]
/// after each `hookFinished`, numbered from `new` and filled from the run's history record.
pub fn with_run_events(events: Vec<Event>, new: &Status, history: &History) -> Vec<Event> {
    let mut out = Vec::with_capacity(events.len() * 2);
    for (i, event) in events.iter().enumerate() {
        out.push(event.clone());
        let (hook_id, finished) = match event {
            Event::HookStarted { hook_id } => (hook_id, false),
            Event::HookFinished { hook_id, .. } => (hook_id, true),
            _ => continue,
        };
        let Some(entry) = new.hooks.get(hook_id) else {
            continue;
        };
        // A start followed by its hook's finish is the run just recorded; else it runs now.
        let recorded = finished
            || events[i + 1..]
                .iter()
                .any(|e| matches!(e, Event::HookFinished { hook_id: id, .. } if id == hook_id));
        let run = entry.run_count.saturating_add(u64::from(!recorded));
        let record = recorded.then(|| history.run(hook_id, run)).flatten();
        let record = record.as_ref();
        out.push(if finished {
            Event::RunFinished {
                hook_id: hook_id.clone(),
                run,
                result: record.map_or_else(
                    || entry.last_result.as_str().to_owned(),
                    |r| r.result.clone(),
                ),
                exit_code: entry.last_exit_code,
                duration_ms: entry.duration_ms,
                decision: record.and_then(|r| r.decision.clone()),
                session: record.and_then(|r| r.session.clone()),
            }
        } else {
            Event::RunStarted {
                hook_id: hook_id.clone(),
                run,
                event: record
                    .and_then(|r| r.event.clone())
                    .or_else(|| entry.event.clone()),
                trigger: record.and_then(|r| r.trigger.clone()),
                session: record.and_then(|r| r.session.clone()),
            }
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookvisor_core::HookKind;
    use hookvisor_core::status::HookStatus;

    fn entry(result: RunResult, runs: u64, exit: Option<i32>) -> HookStatus {
        let mut s = HookStatus::new("x", "x", HookKind::File);
        s.last_result = result;
        s.run_count = runs;
        s.last_exit_code = exit;
        s
    }

    fn status(hooks: &[(&str, HookStatus)], pending: &[&str]) -> Status {
        let mut s = Status::default();
        for (id, h) in hooks {
            s.hooks.insert(id.to_string(), h.clone());
        }
        s.pending_hooks = pending.iter().map(|p| p.to_string()).collect();
        s
    }

    fn names(events: &[Event]) -> Vec<String> {
        events
            .iter()
            .map(|e| match e {
                Event::HookStarted { hook_id } => format!("started {hook_id}"),
                Event::HookFinished {
                    hook_id, exit_code, ..
                } => format!("finished {hook_id} {exit_code:?}"),
                Event::PendingChanged { pending } => format!("pending {}", pending.join(",")),
                Event::CallbackChanged { hook_id, state } => {
                    format!("callback {hook_id} {:?}", state.map(CallbackState::as_str))
                }
                other => other.name().to_owned(),
            })
            .collect()
    }

    #[test]
    fn status_diffs_become_events() {
        use RunResult::*;
        let cases: Vec<(&str, Status, Status, Vec<&str>)> = vec![
            (
                "nothing changed",
                status(&[], &[]),
                status(&[], &[]),
                vec![],
            ),
            (
                "a hook starts",
                status(&[("a", entry(Pending, 0, None))], &[]),
                status(&[("a", entry(Running, 0, None))], &[]),
                vec!["started a"],
            ),
            (
                "a seen running finishes",
                status(&[("a", entry(Running, 0, None))], &[]),
                status(&[("a", entry(Failure, 1, Some(3)))], &[]),
                vec!["finished a Some(3)"],
            ),
            (
                "a run too quick to be seen running is still a pair",
                status(&[("a", entry(Success, 4, Some(0)))], &[]),
                status(&[("a", entry(Success, 5, Some(0)))], &[]),
                vec!["started a", "finished a Some(0)"],
            ),
            (
                "a new entry that already ran",
                status(&[], &[]),
                status(&[("b", entry(Failure, 1, Some(1)))], &[]),
                vec!["started b", "finished b Some(1)"],
            ),
            (
                "finished then started again between two reads",
                status(&[("a", entry(Success, 1, Some(0)))], &[]),
                status(&[("a", entry(Running, 2, Some(0)))], &[]),
                vec!["started a", "finished a Some(0)", "started a"],
            ),
            (
                "pending set changes",
                status(&[], &["a"]),
                status(&[], &["a", "b"]),
                vec!["pending a,b"],
            ),
            (
                "cancelled run goes back to pending: no finish",
                status(&[("a", entry(Running, 2, Some(0)))], &[]),
                status(&[("a", entry(Pending, 2, Some(0)))], &["a"]),
                vec!["pending a"],
            ),
        ];
        for (what, old, new, want) in cases {
            let (events, _) = status_events(&old, &new);
            assert_eq!(names(&events), want, "{what}");
        }
    }

    /// A callback wait changes while its run goes on: the dashboard hears of it.
    #[test]
    fn a_callback_wait_is_announced_when_it_changes() {
        let running = entry(RunResult::Running, 0, None);
        let mut waiting = running.clone();
        waiting.callback = Some(hookvisor_core::status::CallbackWait {
            state: CallbackState::Waiting,
            since: "2026-01-01T10:00:00Z".into(),
            timeout_at: "2026-01-01T11:00:00Z".into(),
        });
        let mut answered = waiting.clone();
        if let Some(wait) = answered.callback.as_mut() {
            wait.state = CallbackState::Answered;
        }
        let steps = [
            (&running, &waiting, vec!["callback a Some(\"waiting\")"]),
            (&waiting, &waiting, vec![]),
            (&waiting, &answered, vec!["callback a Some(\"answered\")"]),
            (&answered, &running, vec!["callback a None"]),
        ];
        for (old, new, want) in steps {
            let (events, _) = status_events(
                &status(&[("a", old.clone())], &[]),
                &status(&[("a", new.clone())], &[]),
            );
            assert_eq!(names(&events), want);
        }
    }

    #[test]
    fn finished_runs_carry_their_duration() {
        let mut done = entry(RunResult::Success, 1, Some(0));
        done.duration_ms = Some(1500);
        let (_, finished) = status_events(&status(&[], &[]), &status(&[("a", done)], &[]));
        assert_eq!(
            finished,
            vec![Finished {
                hook_id: "a".into(),
                duration_ms: Some(1500)
            }]
        );
    }

    #[test]
    fn events_serialise_with_their_type() {
        let event = Event::HookFinished {
            hook_id: "lint".into(),
            success: false,
            exit_code: Some(2),
            timed_out: false,
            duration_ms: None,
        };
        assert_eq!(
            serde_json::to_value(&event).unwrap(),
            serde_json::json!({"type": "hookFinished", "hookId": "lint", "success": false,
                "exitCode": 2, "timedOut": false, "durationMs": null})
        );
        let names = [
            Event::HookStarted {
                hook_id: "a".into(),
            },
            Event::PendingChanged { pending: vec![] },
            Event::EvaluationDone {
                action: Action::Pass,
                pending: vec![],
            },
            Event::EvaluationCancelled,
            Event::HooksChanged {
                hooks: 0,
                problems: 0,
            },
        ];
        for event in names {
            assert_eq!(
                serde_json::to_value(&event).unwrap()["type"],
                event.name(),
                "{event:?}"
            );
        }
    }
}

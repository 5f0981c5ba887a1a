//! The verdicts of an event's hooks combined (docs/EVENTS.md §1.4) and the reply (§5 rule 4).

use serde::{Deserialize, Serialize};

use super::judge::{Judgment, Verdict};

/// What an event's hooks decided, as the reply spells it; ordered allow < block < abort.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Decision {
    /// Nothing blocked: the event goes on.
    #[default]
    Allow,
    /// A gate's `pre` hook refused the event.
    Block,
    /// The event ends (`on_failure: abort`, a callback reject, `continue: false`).
    Abort,
}

impl Decision {
    /// The word of the reply and of `${decision}`.
    pub fn as_str(self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Block => "block",
            Decision::Abort => "abort",
        }
    }
}

impl Verdict {
    /// What this verdict counts as when verdicts combine: success and failure count as allow.
    pub fn decision(&self) -> Decision {
        match self {
            Verdict::Allow | Verdict::Success | Verdict::Failure { .. } => Decision::Allow,
            Verdict::Block { .. } => Decision::Block,
            Verdict::Abort { .. } => Decision::Abort,
        }
    }

    fn reason(&self) -> Option<&str> {
        match self {
            Verdict::Block { reason } | Verdict::Abort { reason } => Some(reason),
            Verdict::Allow | Verdict::Success | Verdict::Failure { .. } => None,
        }
    }
}

/// The judgments of an event's hooks folded in run order: abort > block > allow.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Outcome {
    decision: Decision,
    reason: Option<String>,
    context: Vec<String>,
}

impl Outcome {
    /// The outcome of no hooks: allow.
    pub fn new() -> Self {
        Outcome::default()
    }

    /// Every judgment folded, in order (what the `pre` pass would stop early is still folded).
    pub fn combine(judgments: impl IntoIterator<Item = Judgment>) -> Self {
        let mut outcome = Outcome::new();
        for judgment in judgments {
            outcome.push(judgment);
        }
        outcome
    }

    /// Folds the next hook's judgment: a higher decision takes over with its reason, an equal
    /// one keeps the first reason; context is appended, oldest first.
    pub fn push(&mut self, judgment: Judgment) {
        let decision = judgment.verdict.decision();
        if decision > self.decision {
            self.decision = decision;
            self.reason = judgment.verdict.reason().map(str::to_owned);
        }
        self.context.extend(judgment.context);
    }

    /// True once a hook blocked or aborted: the engine runs no further `pre` hook, since later
    /// gates would judge stale work (§1.4).
    pub fn ends_pre_pass(&self) -> bool {
        self.decision != Decision::Allow
    }

    /// Lets a block through: the loop guard of `turn.end`/`session.stop` ran out, so the agent
    /// may stop although a hook blocked (docs/DESIGN.md's `gave_up`). An abort stays.
    pub fn give_up(&mut self) {
        if self.decision == Decision::Block {
            self.decision = Decision::Allow;
            self.reason = None;
        }
    }

    /// The decision so far.
    pub fn decision(&self) -> Decision {
        self.decision
    }

    /// The block or stop reason; `None` on allow.
    pub fn reason(&self) -> Option<&str> {
        self.reason.as_deref()
    }

    /// The context the hooks gave, oldest first.
    pub fn context(&self) -> &[String] {
        &self.context
    }

    /// The reply of `fire` and `/v1/events/{event}`; `attempts` is `(attempt, maxAttempts)` for
    /// `turn.end` and `session.stop`, `None` for other events.
    pub fn into_reply(
        self,
        event: impl Into<String>,
        results: Vec<serde_json::Value>,
        attempts: Option<(u32, u32)>,
    ) -> Reply {
        Reply {
            event: event.into(),
            decision: self.decision,
            reason: self.reason,
            context: self.context,
            results,
            attempt: attempts.map(|(attempt, _)| attempt),
            max_attempts: attempts.map(|(_, max)| max),
            phase1: serde_json::Map::new(),
        }
    }
}

/// The reply of an event (§5 rule 4); every field is always present, `null` where unset.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Reply {
    /// The canonical event name.
    pub event: String,
    /// What the hooks decided.
    pub decision: Decision,
    /// `null` on allow, the block reason on block, the stop reason on abort.
    pub reason: Option<String>,
    /// Context for the agent, oldest first.
    pub context: Vec<String>,
    /// One entry per run: phase-1 result fields plus `blocked`.
    pub results: Vec<serde_json::Value>,
    /// This re-prompt's number for `turn.end`/`session.stop`; `null` otherwise.
    pub attempt: Option<u32>,
    /// Re-prompts allowed for `turn.end`/`session.stop`; `null` otherwise.
    pub max_attempts: Option<u32>,
    /// Fields of one event, inline beside the others: for `turn.end`, those of phase 1's eval
    /// JSON the reply lacks (`action`, `message`, `pending`, `problems`); for `session.end`,
    /// `discarded`, the context entries no prompt took (docs/EVENTS.md §1.6); empty for others.
    #[serde(flatten)]
    pub phase1: serde_json::Map<String, serde_json::Value>,
}

impl Reply {
    /// Whether the loop guard gave up on this `session.stop` (or `turn.end`): a hook blocked,
    /// and the block was let through because the re-prompts ran out (docs/DESIGN.md's `gave_up`).
    /// The caller remembers it until the user's next prompt, so that later stops stay allowed.
    pub fn gave_up(&self) -> bool {
        self.decision == Decision::Allow && self.results.iter().any(|r| r["blocked"] == true)
    }

    /// The id of the hook a block or abort is told against: the last run that blocked, else
    /// the last run (an abort names no blocker); `None` when nothing ran.
    pub fn decider(&self) -> Option<&str> {
        self.results
            .iter()
            .rev()
            .find(|r| r["blocked"] == true)
            .or(self.results.last())
            .and_then(|r| r["hookId"].as_str())
    }
}

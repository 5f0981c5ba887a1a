//! The eval JSON: what an evaluation tells the agent, and its message cut to an agent's limit.

use std::path::PathBuf;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value as Json};

use crate::decision::{Decision, Reply};
use crate::event::Event;
use crate::hook::{Problem, ProblemKind};
use crate::message::{Failure, broken_hooks_message};

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

/// The outcome of an evaluation, serialised as docs/DESIGN.md's eval JSON.
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
    /// The stop reason when an `event: turn.end` hook aborted (`on_failure: abort`,
    /// `continue: false`); the action is then `failed`. Not in the eval JSON: the reply has it.
    #[serde(skip)]
    pub abort: Option<String>,
    /// `additionalContext` of the `event: turn.end` hooks, oldest first (the reply's `context`).
    #[serde(skip)]
    pub context: Vec<String>,
    /// The hook whose failure is the re-prompt, if one is (the reply's `blocked`).
    #[serde(skip)]
    pub blocked_by: Option<String>,
}

impl EvalReport {
    /// The evaluation as an event's decision: `abort` when a hook aborted, `block` when the
    /// agent is re-prompted, else `allow` (a failure nobody is told of, or the guard gave up).
    pub fn decision(&self) -> Decision {
        if self.abort.is_some() {
            Decision::Abort
        } else if self.action == Action::Reprompt {
            Decision::Block
        } else {
            Decision::Allow
        }
    }

    /// The reply of `fire turn.end` and `POST /v1/events/turn.end` (docs/EVENTS.md §5 rule 4):
    /// `reason` is the re-prompt on block, `attempt`/`maxAttempts` the loop guard's, each
    /// result has `blocked`, and the eval JSON's `action`, `message`, `pending` and `problems`
    /// come along (§1.4: `turn.end` keeps phase 1's action).
    pub fn reply(&self) -> Reply {
        let decision = self.decision();
        let reason = match decision {
            Decision::Abort => self.abort.clone(),
            Decision::Block => self.message.clone(),
            Decision::Allow => None,
        };
        let results = self
            .results
            .iter()
            .map(|result| {
                let mut json = serde_json::to_value(result).expect("a result always serialises");
                let blocked = decision == Decision::Block
                    && self.blocked_by.as_deref() == Some(result.hook_id.as_str());
                json["blocked"] = Json::Bool(blocked);
                json
            })
            .collect();
        let mut phase1 = Map::new();
        if let Ok(Json::Object(mut eval)) = serde_json::to_value(self) {
            for key in ["action", "message", "pending", "problems"] {
                if let Some(value) = eval.remove(key) {
                    phase1.insert(key.to_owned(), value);
                }
            }
        }
        Reply {
            event: Event::TurnEnd.to_string(),
            decision,
            reason,
            context: self.context.clone(),
            results,
            attempt: Some(self.attempt),
            max_attempts: Some(self.max_attempts),
            phase1,
        }
    }

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
        .map(|p| {
            Problem::new(
                p.path.into(),
                ProblemKind::Reported(p.reason),
                Default::default(),
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn problem(path: &str, reason: &str) -> Problem {
        Problem::new(
            path.into(),
            ProblemKind::Reported(reason.into()),
            Default::default(),
        )
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
            abort: None,
            context: Vec::new(),
            blocked_by: None,
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

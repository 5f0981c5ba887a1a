//! What `hookvisor adapter` prints for a decision: each agent's own protocol (docs/EVENTS.md §3.1),
//! nothing else. Allow prints nothing (exit 0); every other answer is one JSON line on stdout
//! and exit 0, except the events whose block the agents take only as exit 2 with the reason
//! on stderr. Where the agents differ is each one's row ([`Answers`]).
//!
//! Sources, per agent:
//! - Claude Code, <https://code.claude.com/docs/en/hooks> ("Hook output", "Decision
//!   control"): `{"decision":"block","reason"}` for UserPromptSubmit, PostToolUse and Stop;
//!   `hookSpecificOutput.permissionDecision:"deny"` for PreToolUse;
//!   `hookSpecificOutput.additionalContext` for SessionStart, UserPromptSubmit, PostToolUse
//!   and PostToolUseFailure; exit 2 with stderr for TaskCreated, TaskCompleted and
//!   TeammateIdle; `{"continue":false,"stopReason"}` to end the session.
//! - Codex, openai/codex `codex-rs/hooks/src/engine/output_parser.rs` and
//!   `codex-rs/hooks/src/events/pre_tool_use.rs`: Claude's shapes, a reason never empty;
//!   PreToolUse rejects `continue:false` (and then runs the tool), so an abort there is a deny.
//! - Gemini CLI, <https://geminicli.com/docs/hooks/reference>: `{"decision":"deny","reason"}`
//!   for BeforeAgent, BeforeTool and AfterAgent; in AfterTool a `deny` would replace the tool's
//!   result, so a block goes as `hookSpecificOutput.additionalContext` beside it.

use hookvisor_core::decision::Decision;
use serde_json::{Map, Value, json};

use hookvisor_core::agents::{Answers, Route};

/// The reason of a block that came without one: the agents show an empty reason as nothing.
pub(super) const NO_REASON: &str =
    "A hookvisor hook blocked this; run `hookvisor status` to see which and why.";

/// What the adapter tells the agent: a stdout line, a stderr line, an exit status.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Said {
    /// One JSON object for stdout.
    pub(super) stdout: Option<Value>,
    /// The reason for stderr (exit-2 answers).
    pub(super) stderr: Option<String>,
    /// The exit status.
    pub(super) exit: i32,
}

/// What the hooks decided, in the adapter's terms.
#[derive(Debug, Default)]
pub(super) struct Decided {
    /// Allow, block or abort.
    pub(super) decision: Decision,
    /// The block or abort reason.
    pub(super) reason: Option<String>,
    /// Text for the model now.
    pub(super) context: Vec<String>,
}

/// Whether `route`'s context reaches the model in this same answer (`additionalContext`);
/// the others leave it in the buffer for the next prompt.
pub(super) fn answers_context(route: Option<Route>) -> bool {
    matches!(
        route,
        Some(Route::SessionStart | Route::TurnStart | Route::ToolAfter | Route::ToolFailed)
    )
}

/// The answer to an event `event` of the agent that reads `answers` (`route` `None`: fired
/// raw).
pub(super) fn say(answers: &Answers, event: &str, route: Option<Route>, decided: &Decided) -> Said {
    let reason = decided
        .reason
        .as_deref()
        .filter(|r| !r.trim().is_empty())
        .unwrap_or(NO_REASON)
        .to_owned();
    let context = (answers_context(route) && !decided.context.is_empty())
        .then(|| decided.context.join("\n\n"));
    let specific = |fields: Map<String, Value>| {
        let mut out = Map::new();
        out.insert("hookEventName".into(), event.into());
        out.extend(fields);
        json!({ "hookSpecificOutput": out })
    };
    let with_context = |context: Option<String>| {
        context.map(|c| {
            let mut m = Map::new();
            m.insert("additionalContext".into(), c.into());
            specific(m)
        })
    };
    let stdout = |value: Value| Said {
        stdout: Some(value),
        ..Said::default()
    };
    match decided.decision {
        Decision::Allow => Said {
            stdout: with_context(context),
            ..Said::default()
        },
        Decision::Abort if answers.abort_tool_as_deny && route == Some(Route::ToolBefore) => {
            stdout(deny_tool(event, &reason))
        }
        Decision::Abort => stdout(json!({"continue": false, "stopReason": reason})),
        Decision::Block => match route {
            Some(Route::ToolBefore) if !answers.deny_tool_by_decision => {
                stdout(deny_tool(event, &reason))
            }
            Some(Route::TurnStart | Route::ToolBefore | Route::TurnEnd) => {
                stdout(json!({"decision": answers.block, "reason": reason}))
            }
            Some(Route::ToolAfter) if answers.after_tool_block_as_context => {
                let text = match context {
                    Some(c) => format!("{reason}\n\n{c}"),
                    None => reason,
                };
                stdout(with_context(Some(text)).unwrap_or_default())
            }
            Some(Route::ToolAfter) => {
                let mut out = json!({"decision": "block", "reason": reason});
                if let Some(Value::Object(extra)) = with_context(context) {
                    out.as_object_mut().expect("an object").extend(extra);
                }
                stdout(out)
            }
            // Task and teammate events, and raw ones: exit 2 is the block the agents honour.
            _ => Said {
                stdout: None,
                stderr: Some(reason),
                exit: 2,
            },
        },
    }
}

/// PreToolUse's deny (Claude Code, Codex: [`Answers::deny_tool_by_decision`] false).
fn deny_tool(event: &str, reason: &str) -> Value {
    json!({"hookSpecificOutput": {
        "hookEventName": event,
        "permissionDecision": "deny",
        "permissionDecisionReason": reason,
    }})
}

#[cfg(test)]
mod tests {
    use super::*;
    use hookvisor_core::agents::Agent;

    fn decided(decision: Decision, reason: &str, context: &[&str]) -> Decided {
        Decided {
            decision,
            reason: Some(reason.to_owned()),
            context: context.iter().map(|c| (*c).to_owned()).collect(),
        }
    }

    #[test]
    fn each_agent_gets_its_own_words() {
        use Decision::{Abort, Allow, Block};
        type Case = (
            Agent,
            &'static str,
            Option<Route>,
            Decision,
            &'static str,
            i32,
        );
        let cases: &[Case] = &[
            (
                Agent::Claude,
                "PreToolUse",
                Some(Route::ToolBefore),
                Allow,
                "",
                0,
            ),
            (
                Agent::Claude,
                "PreToolUse",
                Some(Route::ToolBefore),
                Block,
                r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no"}}"#,
                0,
            ),
            (
                Agent::Claude,
                "PreToolUse",
                Some(Route::ToolBefore),
                Abort,
                r#"{"continue":false,"stopReason":"no"}"#,
                0,
            ),
            (
                Agent::Codex,
                "PreToolUse",
                Some(Route::ToolBefore),
                Abort,
                r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no"}}"#,
                0,
            ),
            (
                Agent::Gemini,
                "BeforeTool",
                Some(Route::ToolBefore),
                Block,
                r#"{"decision":"deny","reason":"no"}"#,
                0,
            ),
            (
                Agent::Gemini,
                "AfterTool",
                Some(Route::ToolAfter),
                Block,
                r#"{"hookSpecificOutput":{"hookEventName":"AfterTool","additionalContext":"no"}}"#,
                0,
            ),
            (
                Agent::Claude,
                "UserPromptSubmit",
                Some(Route::TurnStart),
                Block,
                r#"{"decision":"block","reason":"no"}"#,
                0,
            ),
            (
                Agent::Claude,
                "TaskCompleted",
                Some(Route::TaskComplete),
                Block,
                "",
                2,
            ),
            (Agent::Claude, "PreCompact", None, Block, "", 2),
        ];
        for (agent, event, route, decision, want, exit) in cases {
            let said = say(
                &agent.spec().answers,
                event,
                *route,
                &decided(*decision, "no", &[]),
            );
            let got = said.stdout.map(|v| v.to_string()).unwrap_or_default();
            assert_eq!(got, *want, "{agent:?} {event} {decision:?}");
            assert_eq!(said.exit, *exit, "{agent:?} {event} {decision:?}");
        }
    }

    #[test]
    fn context_goes_back_only_where_the_agent_takes_it() {
        let ctx = decided(Decision::Allow, "", &["a", "b"]);
        let claude = &Agent::Claude.spec().answers;
        let said = say(claude, "SessionStart", Some(Route::SessionStart), &ctx);
        assert_eq!(
            said.stdout.unwrap().to_string(),
            r#"{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":"a\n\nb"}}"#
        );
        let said = say(claude, "PreToolUse", Some(Route::ToolBefore), &ctx);
        assert_eq!(said, Said::default());
        let blank = Decided {
            decision: Decision::Block,
            reason: Some(" ".into()),
            context: vec![],
        };
        let said = say(
            &Agent::Codex.spec().answers,
            "UserPromptSubmit",
            Some(Route::TurnStart),
            &blank,
        );
        assert_eq!(said.stdout.unwrap()["reason"], NO_REASON);
    }
}

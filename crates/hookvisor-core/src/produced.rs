//! Values an action hands to the later hooks of the same firing (docs/EVENTS.md §4.1 "from earlier
//! actions": `spawn_output`, `hook_response`).
//!
//! The rules, written once here:
//!
//! 1. **Who produces.** An action's run returns its values as [`Produced`] beside its outcome:
//!    a spawn whose child succeeded with an `output.json` gives `spawn_output`, the file's text
//!    (§4.4); an awaited webhook's callback gives `hook_response`, its `{"query", "body"}` JSON
//!    (§5 rule 22). A failed, refused or detached run gives nothing.
//! 2. **Who sees it.** Every hook that runs after it in the same firing, whatever its phase or
//!    `await`; never another firing (a value is the event's, like its data). The latest value
//!    of a name wins: a second spawn's output replaces the first's.
//! 3. **How.** As a variable of the payload ([`Payload::document_var`]): `${spawn_output}` is
//!    the text exactly, `${spawn_output.verdict}` reads inside it when it is one JSON object,
//!    and the environment has `HOOKVISOR_SPAWN_OUTPUT` (by file, `HOOKVISOR_SPAWN_OUTPUT_FILE`,
//!    over 64 KiB: payload rule 5) with the object's keys flattened beside it. Not in the event
//!    JSON on stdin, which stays the event's.
//! 4. **Cost.** A firing in which nothing was produced builds its payloads as before: no
//!    variable, no file.
//! 5. **`${last_hook_status}`** (§1.4, §5 rule 14) is every run's product: `success` or
//!    `failed` (agent-pipelines' words; status.json keeps `failure`), for the hooks after the
//!    last one that ran in the firing. A hook its `when` skipped ran nothing and changes
//!    nothing, as in agent-pipelines; a refused run (an unknown name) failed. Unset before
//!    the first run, so a `when:` reading it there fails rather than guesses.
//!
//! [`Payload::document_var`]: crate::payload::Payload::document_var
//! [`Produced`]: crate::produced::Produced

#![forbid(unsafe_code)]

use std::fmt;

use crate::payload::Payload;

/// The variable of rule 5.
const LAST_HOOK_STATUS: &str = "last_hook_status";

/// The name of a value an action produces (docs/EVENTS.md §4.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ProducedName {
    /// `${spawn_output}`: the text of a spawn child's `output.json` (§4.4).
    SpawnOutput,
    /// `${hook_response}`: an awaited webhook's callback, `{"query":{…},"body":…}` (§5 rule 22).
    HookResponse,
}

impl ProducedName {
    /// The template variable's name.
    pub fn as_str(self) -> &'static str {
        match self {
            ProducedName::SpawnOutput => "spawn_output",
            ProducedName::HookResponse => "hook_response",
        }
    }
}

impl fmt::Display for ProducedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One value an action's run hands to the later hooks of its firing (rule 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Produced {
    /// Which variable it sets.
    pub name: ProducedName,
    /// Its text, exactly; read as JSON by `${name.key}` when it is one JSON object.
    pub value: String,
}

/// The latest value of each name produced so far in one firing (rule 2).
#[derive(Debug, Clone, Default)]
pub(crate) struct Earlier {
    /// At most one value per name, the latest.
    values: Vec<Produced>,
    /// Whether the last run failed (rule 5); `None` before the first.
    last_failed: Option<bool>,
}

impl Earlier {
    /// Keeps whether the last run failed, for `${last_hook_status}` (rule 5).
    pub(crate) fn record_status(&mut self, failed: bool) {
        self.last_failed = Some(failed);
    }

    /// Keeps `produced`, each replacing an earlier value of its name.
    pub(crate) fn record(&mut self, produced: &[Produced]) {
        for value in produced {
            self.values.retain(|v| v.name != value.name);
            self.values.push(value.clone());
        }
    }

    /// `payload` with every value kept as its variable (rule 3); unchanged when none is.
    pub(crate) fn apply(&self, payload: Payload) -> Payload {
        let payload = match self.last_failed {
            None => payload,
            Some(failed) => {
                payload.text_var(LAST_HOOK_STATUS, if failed { "failed" } else { "success" })
            }
        };
        self.values.iter().fold(payload, |payload, value| {
            payload.document_var(value.name.as_str(), value.value.clone())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::when::Value;

    fn produced(name: ProducedName, value: &str) -> Produced {
        Produced {
            name,
            value: value.to_owned(),
        }
    }

    #[test]
    fn the_latest_value_of_a_name_wins_and_others_stay() {
        let mut earlier = Earlier::default();
        earlier.record(&[produced(ProducedName::SpawnOutput, r#"{"n":1}"#)]);
        earlier.record(&[produced(ProducedName::HookResponse, r#"{"query":{}}"#)]);
        earlier.record(&[produced(ProducedName::SpawnOutput, r#"{"n":2}"#)]);
        let payload = earlier.apply(Payload::new("task.complete", "s", "/w", "user"));
        assert_eq!(
            payload.lookup(&["spawn_output", "n"]),
            Some(Value::Json(serde_json::json!(2)))
        );
        assert!(payload.lookup(&["hook_response", "query"]).is_some());
    }

    #[test]
    fn the_last_run_sets_last_hook_status_in_pipelines_words() {
        let mut earlier = Earlier::default();
        let status = |earlier: &Earlier| {
            earlier
                .apply(Payload::new("turn.end", "s", "/w", "user"))
                .lookup(&["last_hook_status"])
        };
        assert_eq!(status(&earlier), None);
        earlier.record_status(true);
        assert_eq!(status(&earlier), Some(Value::Text("failed".into())));
        earlier.record_status(false);
        assert_eq!(status(&earlier), Some(Value::Text("success".into())));
    }

    #[test]
    fn nothing_produced_adds_no_variable() {
        let payload = Earlier::default().apply(Payload::new("task.complete", "s", "/w", "user"));
        assert_eq!(payload.lookup(&["spawn_output"]), None);
    }
}

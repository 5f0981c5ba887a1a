//! The JSON shape of `status.json`: discobot's field names and spellings, and what this version
//! does not know kept as it was (rule 5).

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

use super::{HookStatus, Status};

/// The shape of the file as read: hook entries stay raw until each is parsed on its own, so one
/// entry this version cannot read does not make the whole file corrupt.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct StatusFile {
    #[serde(default, deserialize_with = "null_as_default")]
    hooks: BTreeMap<String, Value>,
    #[serde(default, deserialize_with = "null_as_default")]
    pending_hooks: Vec<String>,
    #[serde(default, deserialize_with = "empty_as_none")]
    last_evaluated_at: Option<String>,
    #[serde(default, deserialize_with = "null_as_default")]
    consecutive_hook_turns: u32,
    #[serde(flatten)]
    extra: Map<String, Value>,
}

impl<'de> Deserialize<'de> for Status {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Status, D::Error> {
        let file = StatusFile::deserialize(deserializer)?;
        let mut status = Status {
            hooks: BTreeMap::new(),
            pending_hooks: Vec::new(),
            last_evaluated_at: file.last_evaluated_at,
            consecutive_hook_turns: file.consecutive_hook_turns,
            extra: file.extra,
            unparsed_hooks: BTreeMap::new(),
        };
        // Sorted and once each, as `set_pending` keeps it; in one sort, since the agent can
        // write a list of any length and inserting each in its place is quadratic.
        let mut pending = file.pending_hooks;
        pending.sort_unstable();
        pending.dedup();
        status.pending_hooks = pending;
        for (id, raw) in file.hooks {
            match HookStatus::deserialize(&raw) {
                Ok(mut entry) => {
                    if entry.hook_id.is_empty() {
                        entry.hook_id.clone_from(&id);
                    }
                    status.hooks.insert(id, entry);
                }
                Err(e) => {
                    // Debug, not warn: every load would repeat it while the entry is there.
                    tracing::debug!(hook = %id, error = %e, "status entry not understood; keeping it as is");
                    status.unparsed_hooks.insert(id, raw);
                }
            }
        }
        Ok(status)
    }
}

impl Serialize for Status {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        #[derive(Serialize)]
        #[serde(untagged)]
        enum Entry<'a> {
            Known(&'a HookStatus),
            Unparsed(&'a Value),
        }
        #[derive(Serialize)]
        #[serde(rename_all = "camelCase")]
        struct Out<'a> {
            hooks: BTreeMap<&'a str, Entry<'a>>,
            pending_hooks: &'a [String],
            last_evaluated_at: &'a str,
            #[serde(skip_serializing_if = "is_zero")]
            consecutive_hook_turns: u32,
            #[serde(flatten)]
            extra: &'a Map<String, Value>,
        }
        let mut hooks: BTreeMap<&str, Entry<'_>> = self
            .unparsed_hooks
            .iter()
            .map(|(id, raw)| (id.as_str(), Entry::Unparsed(raw)))
            .collect();
        hooks.extend(
            self.hooks
                .iter()
                .map(|(id, h)| (id.as_str(), Entry::Known(h))),
        );
        Out {
            hooks,
            pending_hooks: &self.pending_hooks,
            last_evaluated_at: self.last_evaluated_at.as_deref().unwrap_or(""),
            consecutive_hook_turns: self.consecutive_hook_turns,
            extra: &self.extra,
        }
        .serialize(serializer)
    }
}

/// discobot writes `""` for a time that is not set.
pub(super) fn empty_as_none<'de, D: Deserializer<'de>>(d: D) -> Result<Option<String>, D::Error> {
    Ok(Option::<String>::deserialize(d)?.filter(|s| !s.is_empty()))
}

/// Go writes a nil map or slice as `null`.
fn null_as_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Default + Deserialize<'de>,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

pub(super) fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::HookKind;
    use crate::status::RunResult;
    use crate::status::tests::{at, context, hook};

    /// docs/DESIGN.md's example with values filled in, as discobot would write it.
    const DESIGN_EXAMPLE: &str = r#"{
  "hooks": {
    "go-fmt": {
      "hookId": "go-fmt",
      "hookName": "Go format check",
      "type": "file",
      "lastRunAt": "2026-11-22T05:09:10Z",
      "lastResult": "failure",
      "lastExitCode": 1,
      "outputPath": "/home/u/.discobot/s1/hooks/output/go-fmt.log",
      "runCount": 3,
      "failCount": 2,
      "consecutiveFailures": 1
    },
    "setup": {
      "hookId": "setup",
      "hookName": "setup",
      "type": "session",
      "lastRunAt": "2026-11-22T05:00:00Z",
      "lastResult": "success",
      "lastExitCode": 0,
      "outputPath": "/home/u/.discobot/s1/hooks/output/setup.log",
      "runCount": 1,
      "failCount": 0,
      "consecutiveFailures": 0
    }
  },
  "pendingHooks": [
    "go-fmt"
  ],
  "lastEvaluatedAt": "2026-11-22T05:09:11Z"
}
"#;

    #[test]
    fn design_example_round_trips_byte_for_byte() {
        let status = Status::from_json(DESIGN_EXAMPLE.as_bytes()).unwrap();
        let fmt = &status.hooks["go-fmt"];
        assert_eq!(fmt.kind, HookKind::File);
        assert_eq!(fmt.last_result, RunResult::Failure);
        assert_eq!(fmt.last_exit_code, Some(1));
        assert_eq!(
            (fmt.run_count, fmt.fail_count, fmt.consecutive_failures),
            (3, 2, 1)
        );
        assert_eq!(status.pending_hooks, ["go-fmt"]);
        assert_eq!(
            status.last_evaluated_at.as_deref(),
            Some("2026-11-22T05:09:11Z")
        );
        assert_eq!(String::from_utf8(status.to_json()).unwrap(), DESIGN_EXAMPLE);
    }

    #[test]
    fn written_entries_carry_every_design_field_name() {
        let dir = tempfile::tempdir().unwrap();
        let mut status = Status::default();
        let entry = status.entry(&hook("lint", HookKind::PreCommit), &context(dir.path()));
        entry.begin(at(10));
        let value: Value = serde_json::from_slice(&status.to_json()).unwrap();
        // Sorted: whether serde_json's map keeps file order depends on a workspace-wide feature.
        let mut top: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        top.sort_unstable();
        assert_eq!(top, ["hooks", "lastEvaluatedAt", "pendingHooks"]);
        let entry = value["hooks"]["lint"].as_object().unwrap();
        for field in [
            "hookId",
            "hookName",
            "type",
            "lastRunAt",
            "lastResult",
            "lastExitCode",
            "outputPath",
            "runCount",
            "failCount",
            "consecutiveFailures",
        ] {
            assert!(entry.contains_key(field), "{field} missing from {entry:?}");
        }
        assert_eq!(entry["type"], "pre-commit");
        assert_eq!(entry["lastResult"], "running");
        assert_eq!(entry["lastRunAt"], "1970-01-01T00:00:10Z");
        assert_eq!(
            entry["outputPath"],
            dir.path().join("output/lint.log").display().to_string()
        );
    }

    #[test]
    fn unknown_fields_and_entries_survive_a_read_modify_write() {
        let input = r#"{"hooks":{
            "a":{"hookId":"a","hookName":"a","type":"file","lastResult":"success","runCount":1,
                 "dashboardColor":"green"},
            "b":{"hookId":"b","type":"turn-start","lastResult":"running"}},
          "pendingHooks":["a"],"lastEvaluatedAt":"","consecutiveHookTurns":2,
          "owner":{"tool":"dash","v":3}}"#;
        let mut status = Status::from_json(input.as_bytes()).unwrap();
        assert_eq!(
            status.last_evaluated_at, None,
            "discobot's empty time is unset"
        );
        status.set_pending("a", false);
        status.hooks.get_mut("a").unwrap().run_count += 1;
        let out: Value = serde_json::from_slice(&status.to_json()).unwrap();
        assert_eq!(out["owner"], serde_json::json!({"tool": "dash", "v": 3}));
        assert_eq!(out["hooks"]["a"]["dashboardColor"], "green");
        assert_eq!(out["hooks"]["a"]["runCount"], 2);
        assert_eq!(
            out["hooks"]["b"],
            serde_json::json!({"hookId": "b", "type": "turn-start", "lastResult": "running"}),
            "an entry of an unknown kind is kept verbatim"
        );
        assert_eq!(out["consecutiveHookTurns"], 2);
        assert_eq!(out["pendingHooks"], serde_json::json!([]));
    }

    #[test]
    fn go_nulls_and_missing_fields_read_as_empty() {
        for input in [
            "{}",
            r#"{"hooks":null,"pendingHooks":null,"lastEvaluatedAt":null}"#,
            r#"{"hooks":{},"pendingHooks":[],"lastEvaluatedAt":""}"#,
        ] {
            assert_eq!(
                Status::from_json(input.as_bytes()).unwrap(),
                Status::default(),
                "{input}"
            );
        }
        let dup = Status::from_json(br#"{"pendingHooks":["a","b","a"]}"#).unwrap();
        assert_eq!(
            dup.pending_hooks,
            ["a", "b"],
            "duplicates from another writer are dropped"
        );
    }

    #[test]
    fn note_is_a_field_of_the_entry_in_json() {
        let text = br#"{"hooks":{"h":{"type":"session","note":"stopped","x":1}}}"#;
        let status = Status::from_json(text).unwrap();
        let entry = &status.hooks["h"];
        assert_eq!(entry.note.as_deref(), Some("stopped"));
        assert!(!entry.extra.contains_key("note"), "{:?}", entry.extra);
        let out: Value = serde_json::from_slice(&status.to_json()).unwrap();
        assert_eq!(out["hooks"]["h"]["note"], "stopped");
        assert_eq!(out["hooks"]["h"]["x"], 1);
    }

    #[test]
    fn last_evaluated_at_is_an_empty_string_until_an_evaluation() {
        // discobot's StatusFile.LastEvaluatedAt is a plain string, "" until the first
        // evaluation, and its TypeScript reader asserts a string: never null, never missing.
        let out: Value = serde_json::from_slice(&Status::default().to_json()).unwrap();
        assert_eq!(out["lastEvaluatedAt"], "", "{out}");
        let mut status = Status::from_json(br#"{"lastEvaluatedAt":null}"#).unwrap();
        let out: Value = serde_json::from_slice(&status.to_json()).unwrap();
        assert_eq!(out["lastEvaluatedAt"], "", "{out}");
        status.last_evaluated_at = Some("2026-11-22T05:09:11Z".into());
        let out: Value = serde_json::from_slice(&status.to_json()).unwrap();
        assert_eq!(out["lastEvaluatedAt"], "2026-11-22T05:09:11Z");
    }
}

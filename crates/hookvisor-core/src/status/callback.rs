//! The `callback` field of a hook's status entry: where an awaited webhook stands with its
//! callback (docs/EVENTS.md §4.3), for dashboards ("waiting for approval since …").
//!
//! The contract, for the writer (the callback listener) and every reader:
//!
//! 1. **Shape.** `"callback": {"state", "since", "timeoutAt"}` on the entry of the webhook
//!    hook, `state` one of `waiting`, `answered`, `timed_out`, `revoked`, and both times RFC 3339
//!    UTC as [`rfc3339`](crate::timestamp::rfc3339) writes them.
//! 2. **Writes.** When the webhook was delivered and its wait begins: `waiting`, `since` = now,
//!    `timeoutAt` = now + the hook's `timeout`. When the wait ends: the state it ended in
//!    (`answered` by the first request on the token, `timed_out` at `timeoutAt`, `revoked` by a
//!    cancel or the server's end), `since` = when it ended, `timeoutAt` unchanged. Each is one
//!    [`StatusStore::update`](crate::StatusStore::update) of the entry, like any record.
//! 3. **Never a secret.** Neither the callback URL nor its token, nor a hash of it: the agent
//!    reads `status.json` (it owns the state dir) and the URL is the capability that approves.
//! 4. **Lifetime.** A run's record leaves the field as it is: the runner records the run when
//!    the wait is over, and the last wait stays visible until the next one replaces it. An entry
//!    that never waited has no field, so phase-1 and other entries are unchanged byte for byte.
//! 5. **Readers** that do not know a state (a newer version's) keep the entry: it is kept
//!    unparsed and written back as it was (rule 5 of the store).

use serde::{Deserialize, Serialize};

/// Where an awaited webhook stands with its callback: the entry's `callback` field (see the
/// module documentation for who writes what).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CallbackWait {
    /// The state the wait is in.
    pub state: CallbackState,
    /// When it entered that state (RFC 3339).
    pub since: String,
    /// When the wait times out, or timed out (RFC 3339).
    pub timeout_at: String,
}

/// The state of a callback wait (rule 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CallbackState {
    /// Delivered; no callback yet.
    Waiting,
    /// The callback came (whatever its `action` said: the run's result tells).
    Answered,
    /// No callback before `timeoutAt`; the token is revoked.
    TimedOut,
    /// The wait was given up (a cancel, the server's end); the token is revoked.
    Revoked,
}

impl CallbackState {
    /// The spelling in `status.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            CallbackState::Waiting => "waiting",
            CallbackState::Answered => "answered",
            CallbackState::TimedOut => "timed_out",
            CallbackState::Revoked => "revoked",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::HookKind;
    use crate::status::HookStatus;
    use crate::status::Status;

    #[test]
    fn the_field_reads_and_writes_as_documented() {
        let json = r#"{"hooks":{"approve":{"hookId":"approve","type":"stage.complete",
            "lastResult":"running","callback":{"state":"timed_out",
            "since":"2026-01-01T10:00:00Z","timeoutAt":"2026-01-01T10:00:00Z"}}},
            "pendingHooks":[]}"#;
        let status = Status::from_json(json.as_bytes()).unwrap();
        let wait = status.hooks["approve"].callback.clone().unwrap();
        assert_eq!(wait.state, CallbackState::TimedOut);
        assert_eq!(wait.state.as_str(), "timed_out");
        let written: serde_json::Value = serde_json::from_slice(&status.to_json()).unwrap();
        assert_eq!(
            written["hooks"]["approve"]["callback"],
            serde_json::json!({"state": "timed_out", "since": "2026-01-01T10:00:00Z",
                               "timeoutAt": "2026-01-01T10:00:00Z"})
        );
    }

    #[test]
    fn an_entry_without_a_wait_has_no_field() {
        let entry = serde_json::to_value(HookStatus::new("x", "x", HookKind::File)).unwrap();
        assert!(entry.get("callback").is_none(), "{entry}");
    }

    /// Rule 5: a state from a newer version keeps its entry as written, not the whole file.
    #[test]
    fn an_unknown_state_keeps_the_entry_as_written() {
        let json = r#"{"hooks":{"a":{"hookId":"a","type":"file","callback":{"state":"paused",
            "since":"x","timeoutAt":"y"}},"b":{"hookId":"b","type":"file"}}}"#;
        let status = Status::from_json(json.as_bytes()).unwrap();
        assert!(status.hooks.contains_key("b"));
        let written: serde_json::Value = serde_json::from_slice(&status.to_json()).unwrap();
        assert_eq!(written["hooks"]["a"]["callback"]["state"], "paused");
    }
}

//! `<state>/session.json`: AutoAgent's session record of one loop (docs/EVENTS.md §3.2, §5 rule 18).

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::path::Path;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::state::{Durability, write_atomic};
use crate::timestamp::rfc3339_millis;

/// The record as written: `{id, startedAt, endedAt, iterations, reason, agent, owner}`;
/// `endedAt` and `reason` are `null` while the loop runs.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct SessionRecord {
    /// The session id.
    pub(crate) id: String,
    /// When the loop started (RFC 3339 UTC, milliseconds).
    pub(crate) started_at: String,
    /// When it ended.
    pub(crate) ended_at: Option<String>,
    /// Iterations the agent was started for.
    pub(crate) iterations: u64,
    /// Why it ended (`Ending::as_str`).
    pub(crate) reason: Option<String>,
    /// The agent command, one string per argument (lossy UTF-8).
    pub(crate) agent: Vec<String>,
    /// Whose hooks the agent runs itself (§5 rule 12).
    pub(crate) owner: String,
}

impl SessionRecord {
    /// Writes the record to `path` atomically: a reader sees the old record or the new one.
    pub(crate) fn write(&self, path: &Path) -> io::Result<()> {
        let mut bytes = serde_json::to_vec_pretty(self).map_err(io::Error::other)?;
        bytes.push(b'\n');
        write_atomic(path, &bytes, Durability::Whole)
    }
}

/// A new AutoAgent session id, `session-<unix ms>-<6 of [a-z0-9]>`. The six characters only
/// tell apart loops started in the same millisecond, so std's randomly keyed hasher is
/// enough: nothing trusts the id to be unguessable.
pub fn new_session_id() -> String {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(now.as_nanos());
    hasher.write_u32(std::process::id());
    let mut bits = hasher.finish();
    const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";
    let suffix: String = (0..6)
        .map(|_| {
            let c = ALPHABET[(bits % 36) as usize];
            bits /= 36;
            char::from(c)
        })
        .collect();
    format!("session-{}-{suffix}", now.as_millis())
}

/// RFC 3339 UTC with milliseconds, as the record writes times.
pub(crate) fn now() -> String {
    rfc3339_millis(SystemTime::now())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_have_autoagents_shape_and_differ() {
        let a = new_session_id();
        let b = new_session_id();
        assert_ne!(a, b);
        let parts: Vec<&str> = a.split('-').collect();
        assert_eq!(parts.len(), 3, "{a}");
        assert_eq!(parts[0], "session");
        assert!(parts[1].len() >= 13 && parts[1].bytes().all(|c| c.is_ascii_digit()));
        assert_eq!(parts[2].len(), 6);
        assert!(
            parts[2]
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
        );
    }
}

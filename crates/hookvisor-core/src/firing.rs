//! One event to fire ([`Firing`]): the input of [`crate::fire`], and of the runners an event's
//! hooks go through.

use std::path::PathBuf;

use serde_json::{Map, Value as Json};

use crate::config::DEFAULT_MAX_RETRIES;
use crate::event::Event;
use crate::exec::CancelToken;

/// One event to fire: what happened, and the variables its hooks see (EVENTS.md §5 rule 19).
#[derive(Debug, Clone)]
pub struct Firing {
    /// The event.
    pub event: Event,
    /// The event's data object (`--data`); each key is also a template variable.
    pub data: Map<String, Json>,
    /// Who fired it: `user`, `hook` or `loop`.
    pub trigger: String,
    /// The session id; `None` uses the context's.
    pub session: Option<String>,
    /// The loop's turn number, when a loop fires.
    pub iteration: Option<u64>,
    /// The pipeline stage, when there is one.
    pub stage: Option<String>,
    /// The workspace-relative paths the event concerns (`pattern:` matches these).
    pub files: Option<Vec<PathBuf>>,
    /// Stops a running hook and a retry wait when cancelled.
    pub cancel: Option<CancelToken>,
    /// Hook-triggered re-prompts allowed per user turn, for the loop guard of `turn.end` and
    /// `session.stop` (DESIGN.md's `max_retries`). Default: 3.
    pub max_attempts: u32,
    /// The caller's own count of hook-triggered turns in a row, bounding `status.json`'s for
    /// the loop guard ([`EvalOptions::hook_turns`]). Default: none.
    ///
    /// [`EvalOptions::hook_turns`]: crate::fire::evaluate::EvalOptions::hook_turns
    pub hook_turns: Option<u32>,
    /// Whether unawaited webhooks are delivered by a detached child running this executable
    /// (the hookvisor binary), for a caller that exits with its decision (EVENTS.md §4.3,
    /// `crate::runner::webhook`'s `detached` module). Default `false`: they run in this process after
    /// the decision (a server, a loop).
    pub detach_webhooks: bool,
}

impl Firing {
    /// A firing of `event` by the user, with empty data and nothing else set.
    pub fn new(event: Event) -> Firing {
        Firing {
            event,
            data: Map::new(),
            trigger: "user".to_owned(),
            session: None,
            iteration: None,
            stage: None,
            files: None,
            cancel: None,
            max_attempts: DEFAULT_MAX_RETRIES,
            hook_turns: None,
            detach_webhooks: false,
        }
    }
}

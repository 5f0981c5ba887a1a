//! One event to fire ([`Firing`]): the input of [`crate::fire`], and of the runners an event's
//! hooks go through.

use std::path::PathBuf;

use serde_json::{Map, Value as Json};

use crate::config::DEFAULT_MAX_RETRIES;
use crate::event::Event;
use crate::exec::CancelToken;

/// One event to fire: what happened, and the variables its hooks see (docs/EVENTS.md §5 rule 19).
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
    /// `session.stop` (docs/DESIGN.md's `max_retries`). Default: 3.
    pub max_attempts: u32,
    /// The caller's own count of hook-triggered turns in a row, bounding `status.json`'s for
    /// the loop guard ([`EvalOptions::hook_turns`]). Default: none.
    ///
    /// [`EvalOptions::hook_turns`]: crate::fire::evaluate::EvalOptions::hook_turns
    pub hook_turns: Option<u32>,
    /// Whether unawaited hooks (`await: false`) are run by a detached child running this
    /// executable (the hookvisor binary), which records them (the "Unawaited hooks" paragraph
    /// of `crate::fire`'s module documentation). Default `false`: they run in this process
    /// after the decision, for a caller that answers then and lives on (a server, the init).
    pub detach_unawaited: bool,
    /// Variables the caller sets besides the event's (the loop's `max_iterations`,
    /// `progress`, `status`, `ctx`, `next_stage`): template variables, not in the
    /// event JSON; a key of `data` of the same name wins. Default none.
    pub vars: Map<String, Json>,
    /// The agent-pipelines files the hooks were read from (`loop --pipeline`: the pipeline's,
    /// its stage's), so that a detached run reads the same hooks. Default none: the workspace's.
    pub pipeline: Option<Vec<PathBuf>>,
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
            detach_unawaited: false,
            vars: Map::new(),
            pipeline: None,
        }
    }
}

//! What an evaluation keeps between turns (`.last-eval`) and the lock that serialises them.

use std::collections::BTreeMap;
use std::fs;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use super::EvalError;
use crate::changes::Timestamp;
use crate::context::Context;
use crate::state::{Durability, write_atomic};

/// The evaluator's own state: the previous cutoff and each hook's cutoff, in `<state>/.last-eval`.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Marker {
    /// The cutoff of the previous evaluation.
    pub(super) cutoff: Option<Timestamp>,
    /// Per file hook: the time taken just before its last run.
    #[serde(default)]
    pub(super) hooks: BTreeMap<String, Timestamp>,
    /// The problems of the previous evaluation, reason by path (module step 7); `None` before
    /// one recorded them, when no problem counts as new.
    #[serde(default)]
    pub(super) problems: Option<BTreeMap<String, String>>,
}

impl Marker {
    fn path(ctx: &Context) -> PathBuf {
        ctx.state().eval_marker()
    }

    pub(super) fn load(ctx: &Context) -> Marker {
        let path = Self::path(ctx);
        match fs::read(&path) {
            Ok(bytes) => serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                tracing::warn!(
                    "{}: unreadable ({e}); starting without cutoffs, hooks may run again",
                    path.display()
                );
                Marker::default()
            }),
            Err(_) => Marker::default(),
        }
    }

    pub(super) fn save(&self, ctx: &Context) -> Result<(), EvalError> {
        let path = Self::path(ctx);
        let bytes = serde_json::to_vec(self).expect("a marker always serialises");
        // Losing the cutoffs in a crash only makes hooks run again, so no fsync on every turn.
        write_atomic(&path, &bytes, Durability::Replaceable)
            .map_err(|source| EvalError::Marker { path, source })
    }
}

/// Serialises evaluations and explicit runs of one state dir, across processes: both move the
/// cutoffs in `.last-eval` and the scan journal. Released on drop.
#[derive(Debug)]
pub(crate) struct EvalLock {
    _file: fs::File,
}

impl EvalLock {
    /// Waits for and takes `<state>/eval.lock`, creating the state dir if needed.
    pub(crate) fn acquire(ctx: &Context) -> Result<EvalLock, EvalError> {
        let path = ctx.state().eval_lock();
        let lock_error = |source| EvalError::Lock {
            path: path.clone(),
            source,
        };
        fs::create_dir_all(&ctx.state_dir).map_err(lock_error)?;
        let file = fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(lock_error)?;
        file.lock().map_err(lock_error)?;
        Ok(EvalLock { _file: file })
    }
}

//! What [`crate::fire`]'s step 6 asks of the runners of the built-in actions, and what they
//! hand back. A command runs through [`crate::exec`]; `git-commit`, `git-push`, `spawn` and
//! `webhook` ([`crate::git_action`], [`crate::spawn`], [`crate::webhook`] hold their fields and
//! rules) run in the crate `hookvisor-actions`, which the `hookvisor` binary links and installs
//! ([`install`]). PID 1 does not link them: it runs only phase-1 hooks, which are commands, and
//! starts `hookvisor` for the rest. A program with no runners installed refuses such a hook
//! with a line that says so, never runs it some other way.

use std::sync::OnceLock;

use crate::context::Context;
use crate::decision::Verdict;
use crate::exec::{CancelToken, ExecError, RunOutcome};
use crate::hook::Hook;
use crate::payload::Payload;
use crate::produced::Produced;

/// The runners of the built-in actions, as one program installs them.
pub trait ActionRunners: Sync {
    /// One run of `hook`'s action, or `None` when its action is a command.
    fn run(
        &self,
        ctx: &Context,
        hook: &Hook,
        payload: &Payload,
        cancel: &CancelToken,
    ) -> Result<Option<Ran>, ExecError>;

    /// docs/EVENTS.md §4.4: the detached children of `ctx`'s state dir end with its session.
    fn end_session(&self, ctx: &Context);
}

static INSTALLED: OnceLock<&'static dyn ActionRunners> = OnceLock::new();

/// Makes `runners` the ones every firing of this process uses; the first call wins.
pub fn install(runners: &'static dyn ActionRunners) {
    let _ = INSTALLED.set(runners);
}

/// The runners this process installed, if any.
pub(crate) fn installed() -> Option<&'static dyn ActionRunners> {
    INSTALLED.get().copied()
}

/// How one run of an action ended, as every runner hands it to [`crate::fire`]'s step 6.
pub enum Ran {
    /// It ran (or its program could not start, which exec reports as an outcome); an action
    /// may hand on values and its own verdict ([`ActionRun`]).
    Finished(ActionRun),
    /// It was refused before starting, most often for the event's values (a name the event
    /// lacks, a NUL byte, an argument too large, a spawn's inputs, a webhook's url, a git
    /// ref), which the model chooses: judged like a `when` that cannot be evaluated
    /// ([`Judge::judge_refused`]: blocks where the hook can block), and never re-run, since
    /// the same firing fails the same way.
    ///
    /// [`Judge::judge_refused`]: crate::decision::Judge::judge_refused
    Refused(String),
}

/// One run of an action as its runner hands it back to [`crate::fire`]'s step 7.
pub struct ActionRun {
    /// How the run ended, as `status.json` records it: a timeout stays a timeout.
    pub outcome: RunOutcome,
    /// Values for the later hooks of the firing (crate::produced); none for most actions.
    pub produced: Vec<Produced>,
    /// The verdict of an action that judges its own run (a spawn's `on_timeout: abort`),
    /// standing instead of the judge's; never re-run.
    pub verdict: Option<Verdict>,
}

impl From<RunOutcome> for ActionRun {
    /// A run judged by the judge that produced nothing: what a command gives.
    fn from(outcome: RunOutcome) -> Self {
        ActionRun {
            outcome,
            produced: Vec::new(),
            verdict: None,
        }
    }
}

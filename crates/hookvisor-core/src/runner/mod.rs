//! The runners of the built-in actions: above the hook model, whose specs they run, and below
//! [`crate::fire`], which calls them in its step 6. `git` runs `git-commit` and `git-push`
//! ([`crate::git_action`] holds their fields and rules), `spawn` a child ([`crate::spawn`]) and
//! `webhook` a request ([`crate::webhook`]); a command runs through [`crate::exec`]. Each hands
//! back how its run ended (`Ran`).

pub(crate) mod git;
pub mod spawn;
pub(crate) mod webhook;

use crate::decision::Verdict;
use crate::exec::RunOutcome;
use crate::produced::Produced;

/// How one run of an action ended, as every runner hands it to [`crate::fire`]'s step 6.
pub(crate) enum Ran {
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
pub(crate) struct ActionRun {
    /// How the run ended, as `status.json` records it: a timeout stays a timeout.
    pub(crate) outcome: RunOutcome,
    /// Values for the later hooks of the firing (crate::produced); none for most actions.
    pub(crate) produced: Vec<Produced>,
    /// The verdict of an action that judges its own run (a spawn's `on_timeout: abort`),
    /// standing instead of the judge's; never re-run.
    pub(crate) verdict: Option<Verdict>,
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

//! The blocking protocol (docs/EVENTS.md §1.4, §1.5, §5 rules 1–4): how one finished run of a hook
//! is judged, how the verdicts of an event's hooks combine, and the reply that reports them.
//!
//! # The words (§1.3)
//!
//! The front-matter fields it reads, `phase`, `block_on`, `on_failure`, `on_timeout` and
//! `reason_from`, are data of the hook model: [`crate::policy`].
//!
//! # Judging one run (§1.5, §5 rules 1–3): [`Judge::judge`]
//!
//! A hook *can block* when its event is a gate and its phase is `pre`; every other hook (a notice,
//! or any `post` hook) cannot. The judge reads a [`FinishedRun`] (exit code, timeout, stdout and
//! stderr, captured apart) and gives a [`Judgment`]: a [`Verdict`], the context the hook adds and
//! warnings for the log. The table of §1.5, row by row:
//!
//! | hook result | `pre` hook, gate | notice or `post` |
//! |---|---|---|
//! | exit 0, stdout not one JSON object | [`Verdict::Allow`] | [`Verdict::Success`] |
//! | exit 0, stdout one JSON object | rules J1–J4 below | [`Verdict::Success`], JSON ignored (warned) |
//! | exit 2 | block unless `block_on: never`; else `on_failure` | `on_failure` |
//! | other non-zero, timeout | block if `block_on: failure`; else `on_failure` | `on_failure` |
//!
//! A `when` that cannot be evaluated, or a command that cannot take the event's values, is a
//! run that failed before it started ([`Judge::judge_refused`]): a hook that can block blocks
//! on it whatever its `block_on`,
//! which judges only the hook's own exit (docs/EVENTS.md: on a gate, what hookvisor cannot do
//! blocks); elsewhere it is a failure like any other.
//!
//! `on_failure` gives [`Verdict::Abort`] for `abort` and `[retry, abort]`, and
//! [`Verdict::Failure`] (recorded; the event goes on) for `continue` and `retry`. The table's
//! "failure" for exit 2 on a notice is read with rule 1: a failure, then `on_failure`.
//!
//! JSON is read only on exit 0 and only when stdout, with JSON white space around it, is exactly
//! one JSON object: trailing text or a second object makes it plain output (warned when it starts
//! with `{`), since a crashed or chatty script's partial output is no decision; a JSON object on
//! the stdout of a failed run is warned and ignored. In that object:
//!
//! - J1. `continue: false` → abort, reason `stopReason` (abort > block, so it wins over
//!   `decision`).
//! - J2. `decision` `block` or `deny` → block, reason = `reason`, blank line, `feedback` (either
//!   may be missing; with neither, a fixed text says so). `approve` or `allow` → allow, for this
//!   hook only: later hooks still run (rule 3). Any other value is warned and allows.
//! - J3. `additionalContext`, top-level and inside `hookSpecificOutput` (in that order), is the
//!   hook's context (rule 3); it is kept whatever the decision. A value that is not a string is
//!   warned and dropped.
//! - J4. Other fields are ignored: a hook may print its agent's whole protocol.
//!
//! # Reasons (§5 rule 2)
//!
//! A failure's reason is stderr, else stdout, else `exited N` / `timed out after Ns`
//! ([`ReasonFrom::Stdout`] flips the first two); "empty" means only white space. Every reason is
//! sanitised like phase-1 output (no escape sequences) and shrinks like a phase-1 re-prompt:
//! inlined up to 200 lines and 5 KiB, else the last 15 lines and the log's path, and never longer
//! than [`Judge::max_reason`] characters (then lines are cut at 200 characters and fewer are
//! shown, down to the note alone, which is cut last).
//!
//! # Retries (§5 rule 1)
//!
//! Retrying is the caller's loop, since it sleeps and re-runs: a failed run (non-zero exit or
//! timeout) under `on_failure: retry` or `[retry, abort]` has [`Judgment::wants_retry`] set.
//! The caller re-runs while it is set and re-runs are left (`retries`, `retry_delay` apart), and
//! uses the judgment of the last run. A run is judged the same whatever its attempt: under
//! `retry` the last failure goes on ([`Verdict::Failure`]), under `[retry, abort]` it aborts;
//! `block_on` is applied to the last run only, so a guard's exit 2 is also re-run first.
//!
//! # Combining (§1.4) and the reply (§5 rule 4)
//!
//! [`Outcome`] folds the judgments of an event's hooks in run order: abort > block > allow (a
//! success or a recorded failure counts as allow). The first block or abort ends the `pre` pass
//! ([`Outcome::ends_pre_pass`]); the reason is that of the first verdict of the highest rank.
//! [`Outcome::into_reply`] makes the [`Reply`] of `fire` and `/v1/events/{event}`.
//!
//! # Capture
//!
//! The dispatcher (`fire`) runs event hooks with exec's `Capture::Separate`, which keeps stdout
//! and stderr apart, and fills a [`FinishedRun`] from them; exec's own notes (`[hook timed out
//! after Ns]`) go to the log only, so they never become a reason. A caller with only merged
//! output can give it as `stdout` with an empty `stderr`: verdicts are the same except that a
//! hook's JSON is refused when it also wrote to stderr and a reason holds both streams.
//!
//! [`BlockOn`]: crate::policy::BlockOn
//! [`FinishedRun`]: crate::decision::FinishedRun
//! [`Judge::judge`]: crate::decision::Judge::judge
//! [`Judge::judge_refused`]: crate::decision::Judge::judge_refused
//! [`Judge::max_reason`]: crate::decision::Judge::max_reason
//! [`Judgment::wants_retry`]: crate::decision::Judgment::wants_retry
//! [`Judgment`]: crate::decision::Judgment
//! [`OnFailure`]: crate::policy::OnFailure
//! [`OnTimeout`]: crate::policy::OnTimeout
//! [`Outcome::ends_pre_pass`]: crate::decision::Outcome::ends_pre_pass
//! [`Outcome::into_reply`]: crate::decision::Outcome::into_reply
//! [`Outcome`]: crate::decision::Outcome
//! [`Phase`]: crate::policy::Phase
//! [`ReasonFrom::Stdout`]: crate::policy::ReasonFrom::Stdout
//! [`ReasonFrom`]: crate::policy::ReasonFrom
//! [`Reply`]: crate::decision::Reply
//! [`Verdict::Abort`]: crate::decision::Verdict::Abort
//! [`Verdict::Allow`]: crate::decision::Verdict::Allow
//! [`Verdict::Failure`]: crate::decision::Verdict::Failure
//! [`Verdict::Success`]: crate::decision::Verdict::Success
//! [`Verdict`]: crate::decision::Verdict

mod judge;
mod outcome;
#[cfg(test)]
mod tests;

pub use judge::{DEFAULT_MAX_REASON, FinishedRun, Judge, Judgment, Verdict};
// Reasons an action judges itself (a webhook callback's rejection) shrink like the judge's.
pub use judge::shrink;
pub use outcome::{Decision, Outcome, Reply};

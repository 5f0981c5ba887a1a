//! What a hook's front matter says about blocking and failure (docs/EVENTS.md §1.3): the words
//! `phase`, `block_on`, `on_failure`, `on_timeout` (awaited spawns and webhooks) and
//! `reason_from` ([`Phase`], [`BlockOn`], [`OnFailure`], [`OnTimeout`], [`ReasonFrom`]), parsed
//! with `FromStr` and written with `as_str`, and the retries a session hook gets by default.
//! They are plain data of the hook model; [`crate::decision`] judges runs by them.

use std::fmt;
use std::str::FromStr;

/// When a hook runs within its event (`phase`): `pre` hooks run first and may block; `post`
/// hooks run after every `pre` hook, cannot block and see `${decision}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Phase {
    /// Before the decision (the default).
    #[default]
    Pre,
    /// After the decision; never blocks.
    Post,
}

/// Which results of a `pre` hook on a gate block (`block_on`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BlockOn {
    /// Any non-zero exit or a timeout blocks (phase-1 linters exit 1).
    Failure,
    /// Only exit 2 blocks, as in Claude Code, Codex, Gemini CLI and AutoAgent: a crashing guard
    /// fails open.
    Exit2,
    /// Nothing blocks; failures go to `on_failure`.
    Never,
}

/// What a failed run that does not block leads to (`on_failure`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnFailure {
    /// Record the failure and go on (the default).
    #[default]
    Continue,
    /// End the event with `abort`.
    Abort,
    /// Re-run (`retries` times, `retry_delay` apart) before judging; then go on.
    Retry,
    /// Re-run before judging; then abort (`[retry, abort]`).
    RetryThenAbort,
}

/// What a timeout of an awaited spawn child or webhook callback means (`on_timeout`, §1.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum OnTimeout {
    /// The event ends with abort, whatever the event or the hook's phase (the default).
    #[default]
    Abort,
    /// A failure, judged by `block_on` and `on_failure` like any other.
    Continue,
}

/// Where a failure's reason is read first (`reason_from`, §5 rule 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ReasonFrom {
    /// stderr, else stdout (the default; Claude, AutoAgent and nyzhi's code).
    #[default]
    Stderr,
    /// stdout, else stderr (nyzhi imports whose scripts write feedback to stdout).
    Stdout,
}

/// A `phase`, `block_on`, `on_failure`, `on_timeout` or `reason_from` value that is none of the
/// words.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {field} '{value}'; use {expected}")]
pub struct UnknownWord {
    /// The field.
    pub field: &'static str,
    /// The value written.
    pub value: String,
    /// The accepted words, for the message.
    pub expected: &'static str,
}

macro_rules! words {
    ($ty:ty, $field:literal, $expected:literal, { $($word:literal => $variant:path),+ $(,)? }) => {
        impl $ty {
            /// The spelling used in front matter and JSON.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($variant => $word,)+
                }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.pad(self.as_str())
            }
        }

        impl FromStr for $ty {
            type Err = UnknownWord;

            fn from_str(s: &str) -> Result<Self, Self::Err> {
                match s {
                    $($word => Ok($variant),)+
                    other => Err(UnknownWord {
                        field: $field,
                        value: other.to_owned(),
                        expected: $expected,
                    }),
                }
            }
        }
    };
}

words!(Phase, "phase", "'pre' or 'post'", { "pre" => Phase::Pre, "post" => Phase::Post });
words!(BlockOn, "block_on", "'failure', 'exit2' or 'never'", {
    "failure" => BlockOn::Failure,
    "exit2" => BlockOn::Exit2,
    "never" => BlockOn::Never,
});
words!(OnFailure, "on_failure", "'continue', 'abort', 'retry' or [retry, abort]", {
    "continue" => OnFailure::Continue,
    "abort" => OnFailure::Abort,
    "retry" => OnFailure::Retry,
    "retry,abort" => OnFailure::RetryThenAbort,
});
words!(OnTimeout, "on_timeout", "'abort' or 'continue'", {
    "abort" => OnTimeout::Abort,
    "continue" => OnTimeout::Continue,
});
words!(ReasonFrom, "reason_from", "'stderr' or 'stdout'", {
    "stderr" => ReasonFrom::Stderr,
    "stdout" => ReasonFrom::Stdout,
});

/// How many times a failed session hook is run again when its front matter names no `retries`:
/// 9, so 10 attempts in all, as discobot's init makes (`sessionHookMaxAttempts`).
pub const DEFAULT_RETRIES: u32 = 9;

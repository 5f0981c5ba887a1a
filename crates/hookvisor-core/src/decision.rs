//! The blocking protocol (EVENTS.md §1.4, §1.5, §5 rules 1–4): the words a hook uses to say how
//! its result is judged.
//!
//! These are the values of the front-matter fields `phase`, `block_on` and `on_failure`; the
//! judge that turns one finished run into a verdict builds on them.

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

/// A `phase`, `block_on` or `on_failure` value that is none of the words.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_round_trips_and_others_are_refused() {
        for phase in [Phase::Pre, Phase::Post] {
            assert_eq!(phase.as_str().parse::<Phase>(), Ok(phase));
        }
        for block_on in [BlockOn::Failure, BlockOn::Exit2, BlockOn::Never] {
            assert_eq!(block_on.as_str().parse::<BlockOn>(), Ok(block_on));
        }
        for on_failure in [
            OnFailure::Continue,
            OnFailure::Abort,
            OnFailure::Retry,
            OnFailure::RetryThenAbort,
        ] {
            assert_eq!(on_failure.as_str().parse::<OnFailure>(), Ok(on_failure));
        }
        let err = "Exit2".parse::<BlockOn>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "invalid block_on 'Exit2'; use 'failure', 'exit2' or 'never'"
        );
        assert!("".parse::<Phase>().is_err());
    }
}

//! The one error type of the binary: a line to print and an exit status.
//!
//! docs/DESIGN.md's statuses: 0 ok, 1 a hook failed or a check found problems, 2 a usage or
//! configuration error. It names no status of its own for hookvisor failing at its work (a
//! file that cannot be written, git failing, status.json unreadable), so those exit 1: never 2,
//! which tells the caller to fix the command line or the configuration. Each error type says
//! which of its failures are which below, rather than one blanket conversion.

use std::fmt;
use std::io;

use hookvisor_core::account::AccountError;
use hookvisor_core::precommit::PreCommitError;
use hookvisor_core::session::SessionError;
use hookvisor_core::{ContextError, EvalError, StatusError};

use crate::turn_client::TurnClientError;

/// How the process exits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Everything passed.
    Ok,
    /// A hook failed, a check found problems, or hookvisor failed at its work.
    Failed,
    /// A usage or configuration error.
    Usage,
    /// Another program's status passed through (the agent of `serve`, a pre-commit hook's
    /// code), already mapped to 128+n for a signal. Only the low 8 bits reach the parent, as
    /// with `exit(2)`.
    Status(i32),
}

impl Exit {
    /// The status the process exits with.
    pub fn code(self) -> u8 {
        match self {
            Exit::Ok => 0,
            Exit::Failed => 1,
            Exit::Usage => 2,
            // The truncation is the kernel's too: a status is one byte.
            Exit::Status(code) => code as u8,
        }
    }
}

/// A failure of a command: printed as `hookvisor: <message>` and exits with `exit`.
#[derive(Debug)]
pub struct CliError {
    /// The one line to print.
    pub message: String,
    /// The exit status.
    pub exit: Exit,
}

impl CliError {
    /// A usage or configuration error (exit 2).
    pub fn usage(message: impl fmt::Display) -> CliError {
        CliError {
            message: message.to_string(),
            exit: Exit::Usage,
        }
    }

    /// hookvisor failed at its work (exit 1).
    pub fn failed(message: impl fmt::Display) -> CliError {
        CliError {
            message: message.to_string(),
            exit: Exit::Failed,
        }
    }
}

/// Reading, writing, stdout: the system failed, not the command line.
impl From<io::Error> for CliError {
    fn from(err: io::Error) -> CliError {
        CliError::failed(err)
    }
}

/// A workspace that is no directory, no HOME for the default state dir, a bad session id:
/// all fixed on the command line or in the environment.
impl From<ContextError> for CliError {
    fn from(err: ContextError) -> CliError {
        CliError::usage(err)
    }
}

impl From<StatusError> for CliError {
    fn from(err: StatusError) -> CliError {
        CliError::failed(err)
    }
}

/// A cancelled evaluation (exit 1 as before), or one that could not record, detect changes or
/// start a hook.
impl From<EvalError> for CliError {
    fn from(err: EvalError) -> CliError {
        CliError::failed(err)
    }
}

impl From<SessionError> for CliError {
    fn from(err: SessionError) -> CliError {
        CliError::failed(err)
    }
}

/// A `--user` that names nobody is a bad value; unreadable account files are not.
impl From<AccountError> for CliError {
    fn from(err: AccountError) -> CliError {
        match err {
            AccountError::UnknownUser(_)
            | AccountError::UnknownGroup(_)
            | AccountError::BadSpec { .. } => CliError::usage(err),
            _ => CliError::failed(err),
        }
    }
}

/// Outside a repository, a foreign hook that would be lost, or root in a repository another
/// account can change: the user picks another directory, moves a file or runs it as the
/// user. git failing or a file that cannot be written is a failure.
impl From<PreCommitError> for CliError {
    fn from(err: PreCommitError) -> CliError {
        match err {
            PreCommitError::NotARepository(_)
            | PreCommitError::OriginalExists { .. }
            | PreCommitError::Refused(_) => CliError::usage(err),
            _ => CliError::failed(err),
        }
    }
}

/// A `$HOOKVISOR_URL` this client cannot speak is configuration; a server that does not answer
/// is a failure.
impl From<TurnClientError> for CliError {
    fn from(err: TurnClientError) -> CliError {
        match err {
            TurnClientError::BadUrl { .. } => CliError::usage(err),
            _ => CliError::failed(err),
        }
    }
}

/// What a command returns.
pub type CliResult = Result<Exit, CliError>;

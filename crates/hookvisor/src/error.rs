//! The one error type of the binary: a line to print and an exit status.

use std::fmt;
use std::process::ExitCode;

/// Exit statuses of DESIGN.md.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exit {
    /// Everything passed.
    Ok = 0,
    /// A hook failed or a check found problems.
    Failed = 1,
    /// A usage or configuration error.
    Usage = 2,
}

impl From<Exit> for ExitCode {
    fn from(exit: Exit) -> ExitCode {
        ExitCode::from(exit as u8)
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
}

impl<E: std::error::Error> From<E> for CliError {
    fn from(err: E) -> CliError {
        CliError::usage(err)
    }
}

/// What a command returns.
pub type CliResult = Result<Exit, CliError>;

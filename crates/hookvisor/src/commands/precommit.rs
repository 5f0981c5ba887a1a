//! `pre-commit install|uninstall|run`.

use crate::error::{CliError, CliResult};

use crate::cli::PreCommitCommand;
use crate::commands::Globals;

/// `hookvisor pre-commit ...`.
pub fn run(_globals: &Globals, _command: &PreCommitCommand) -> CliResult {
    Err(CliError::usage("pre-commit is not built yet"))
}

//! `list` and `check`.

use crate::error::{CliError, CliResult};

use crate::commands::Globals;

/// `hookvisor list`.
pub fn run(_globals: &Globals, _json: bool) -> CliResult {
    Err(CliError::usage("list is not built yet"))
}

/// `hookvisor check`.
pub fn check(_globals: &Globals) -> CliResult {
    Err(CliError::usage("check is not built yet"))
}

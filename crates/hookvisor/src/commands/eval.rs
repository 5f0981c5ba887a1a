//! `eval`, `run` and `status`.

use crate::error::{CliError, CliResult};

use crate::cli::EvalArgs;
use crate::commands::Globals;

/// `hookvisor eval`.
pub fn run(_globals: &Globals, _args: &EvalArgs) -> CliResult {
    Err(CliError::usage("eval is not built yet"))
}

/// `hookvisor run ID`.
pub fn run_one(_globals: &Globals, _id: &str, _json: bool) -> CliResult {
    Err(CliError::usage("run is not built yet"))
}

/// `hookvisor status`.
pub fn status(_globals: &Globals, _json: bool) -> CliResult {
    Err(CliError::usage("status is not built yet"))
}

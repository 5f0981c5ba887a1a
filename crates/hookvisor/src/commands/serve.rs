//! `serve`: HTTP API, dashboard, agent supervision.

use crate::error::{CliError, CliResult};

use crate::cli::ServeArgs;
use crate::commands::Globals;

/// `hookvisor serve`.
pub fn run(_globals: &Globals, _args: ServeArgs) -> CliResult {
    Err(CliError::usage("serve is not built yet"))
}

//! `session`: run the session hooks.

use crate::error::{CliError, CliResult};

use crate::commands::Globals;

/// `hookvisor session`.
pub fn run(_globals: &Globals, _user: Option<&str>) -> CliResult {
    Err(CliError::usage("session is not built yet"))
}

//! `install` and `uninstall` of the agent adapters.

use crate::error::{CliError, CliResult};

use crate::cli::InstallArgs;
use crate::commands::Globals;

/// `hookvisor install AGENT`.
pub fn install(_globals: &Globals, _args: &InstallArgs) -> CliResult {
    Err(CliError::usage("install is not built yet"))
}

/// `hookvisor uninstall AGENT`.
pub fn uninstall(_globals: &Globals, _args: &InstallArgs) -> CliResult {
    Err(CliError::usage("uninstall is not built yet"))
}

//! The agent Stop-hook adapters.

use crate::error::{CliError, CliResult};

use crate::cli::{AdapterArgs, Agent};
use crate::commands::Globals;

/// `hookvisor claude-stop|codex-stop|gemini-after-agent`.
pub fn run(_globals: &Globals, _agent: Agent, _args: &AdapterArgs) -> CliResult {
    Err(CliError::usage("adapters are not built yet"))
}

//! One module per subcommand; each turns parsed arguments into one call into the core.

pub mod adapter;
pub mod eval;
pub mod install;
pub mod list;
pub mod precommit;
pub mod serve;
pub mod session;

use std::path::PathBuf;

use hookvisor_core::{Context, ContextOverrides};

use crate::error::CliError;

/// The global options every subcommand shares.
#[derive(Debug, Clone, Default)]
pub struct Globals {
    /// `--workspace`.
    pub workspace: Option<PathBuf>,
    /// `--state-dir`.
    pub state_dir: Option<PathBuf>,
    /// `--session`.
    pub session: Option<String>,
}

impl Globals {
    /// Resolves the workspace, session and state dir (DESIGN.md "Files and names").
    pub fn context(&self) -> Result<Context, CliError> {
        Ok(Context::resolve(ContextOverrides {
            workspace: self.workspace.clone(),
            state_dir: self.state_dir.clone(),
            session_id: self.session.clone(),
            home: None,
        })?)
    }
}

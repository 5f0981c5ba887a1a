//! One module per subcommand; each turns parsed arguments into one call into the core.

pub mod adapter;
pub mod eval;
pub mod fire;
pub mod import;
pub mod install;
pub mod list;
pub mod loop_cmd;
pub mod precommit;
pub mod serve;
pub mod session;

/// What every command gets its context from, resolved once by `main`.
pub use crate::cli::Globals;

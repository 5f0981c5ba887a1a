//! One module per subcommand; each turns parsed arguments into one call into the core.

pub mod adapter;
pub mod eval;
pub mod fire;
pub mod git_fsmonitor;
pub mod import;
pub mod init_pass;
pub mod install;
pub mod list;
pub mod loop_cmd;
pub mod precommit;
pub mod serve;
pub mod session;

/// What every command gets its context from, resolved once by `main`.
pub use crate::cli::Globals;

/// Refuses a run as root whose state dir (or a directory on the way to it) another account
/// can write: root would create, unlink and rename there names the agent points anywhere
/// with a link. `session --user` acts there with the user's credentials instead.
pub fn refuse_others_state_dir(
    ctx: &hookvisor_core::Context,
) -> Result<(), crate::error::CliError> {
    use crate::error::CliError;
    match hookvisor_core::user_fs::writable_by_others(&ctx.state_dir) {
        Ok(None) => Ok(()),
        Ok(Some((path, owner))) => {
            let who =
                owner.map_or_else(|| "a group or everyone".to_owned(), |u| format!("uid {u}"));
            Err(CliError::usage(format!(
                "refusing to run as root with the state dir {}: {} can be changed by {who}; run \
                 this command as the user who owns it, or give --state-dir a directory only \
                 root can write",
                ctx.state_dir.display(),
                path.display()
            )))
        }
        Err(err) => Err(CliError::failed(format!(
            "cannot check who can write the state dir {}: {err}",
            ctx.state_dir.display()
        ))),
    }
}

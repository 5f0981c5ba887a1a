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
/// with a link. `session --user` acts there with the user's credentials instead. Refuses as
/// well a workspace whose repository another account can change (`hookvisor_core::git`
/// rule 4): each git call would refuse it anyway, and saying so at the start gives the one
/// exit status of a configuration error (2), which a gate's caller reads as "blocked"; and
/// hooks another account can change ([`refuse_others_hooks`]).
pub fn refuse_what_others_can_change(
    ctx: &hookvisor_core::Context,
) -> Result<(), crate::error::CliError> {
    use crate::error::CliError;
    match hookvisor_core::user_fs::writable_by_others(&ctx.state_dir) {
        Ok(None) => {}
        Ok(Some((path, owner))) => {
            let who = hookvisor_core::user_fs::writer_name(owner);
            return Err(CliError::usage(format!(
                "refusing to run as root with the state dir {}: {} can be changed by {who}; run \
                 this command as the user who owns it, or give --state-dir a directory only \
                 root can write",
                ctx.state_dir.display(),
                path.display()
            )));
        }
        Err(err) => {
            return Err(CliError::failed(format!(
                "cannot check who can write the state dir {}: {err}",
                ctx.state_dir.display()
            )));
        }
    }
    hookvisor_core::git::may_run_in(&ctx.workspace).map_err(CliError::usage)?;
    refuse_others_hooks(ctx)
}

/// As root, refuses a run whose hooks another account can change: root runs them, and a
/// workspace root owns can hold a hooks directory or a hook file that is the agent's (a `COPY
/// --chown` that left only the top directory root's). Judged are `hookvisor.yml`, the hooks
/// directory and every file a hook of the workspace was read from (the global ones and the
/// other tools' included), each with every directory above it.
fn refuse_others_hooks(ctx: &hookvisor_core::Context) -> Result<(), crate::error::CliError> {
    use crate::error::CliError;
    if !nix::unistd::Uid::effective().is_root() {
        return Ok(());
    }
    let judge = |path: &std::path::Path| {
        if path.symlink_metadata().is_err() {
            return Ok(());
        }
        match hookvisor_core::user_fs::writable_by_others(path) {
            Ok(None) => Ok(()),
            Ok(Some((open, owner))) => {
                let who = hookvisor_core::user_fs::writer_name(owner);
                Err(CliError::usage(format!(
                    "refusing to run hooks as root: {} can be changed by {who} (at {}), and \
                     root would run what it says; run this command as the user who owns it, \
                     or make it writable only by root",
                    path.display(),
                    open.display()
                )))
            }
            Err(err) => Err(CliError::failed(format!(
                "cannot check who can change the hook {}: {err}",
                path.display()
            ))),
        }
    };
    // What discovery reads is judged before it is read, then each file a hook came from.
    judge(&hookvisor_core::Config::path(&ctx.workspace))?;
    judge(&ctx.hooks_dir())?;
    let discovery = hookvisor_core::discover::discover_workspace(ctx);
    let mut paths: Vec<_> = discovery.hooks.iter().map(|hook| &hook.path).collect();
    paths.dedup();
    paths.into_iter().try_for_each(|path| judge(path))
}

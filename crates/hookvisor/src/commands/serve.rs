//! `serve`: HTTP API, dashboard, agent supervision (the server itself is in [`crate::serve`]).

use std::path::Path;
use std::process::{Command, Stdio};

use crate::cli::{GIT_FSMONITOR, InstallTarget, ServeArgs};
use crate::commands::Globals;
use crate::error::{CliError, CliResult, Exit};
use crate::serve::{self, Config, Listen};

/// `hookvisor serve [--listen ADDR | --socket PATH] [--allow-remote] [-- AGENT_CMD...]`.
pub fn run(globals: &Globals, args: ServeArgs) -> CliResult {
    let token = std::env::var("HOOKVISOR_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    let listen = Listen::resolve(
        args.listen.as_deref(),
        args.socket.as_deref(),
        args.allow_remote,
        token.is_some(),
    )?;
    let ctx = globals.context()?;
    super::refuse_what_others_can_change(&ctx)?;
    // The adapters first, so the agent reads them when it starts; in the settings of whoever
    // runs serve (a container's home), never in the repository's files. A child `install`,
    // whose report goes to stderr: serve's stdout starts with its `listening on` line.
    // As root it would write settings through whatever HOME says, which may be a directory
    // the agent can change: fail closed, the init runs serve as the user.
    if !args.install.is_empty() && nix::unistd::Uid::effective().is_root() {
        return Err(CliError::usage(
            "--install as root: run serve as the agent's user (hookvisor-init --user USER), or \
             run `hookvisor install AGENT` yourself",
        ));
    }
    for target in &args.install {
        install_adapter(*target, &ctx.workspace)?;
    }
    // Read once: the server's loop guard keeps the limit it started with.
    let max_retries = hookvisor_core::Config::load(&ctx.workspace)
        .ok()
        .flatten()
        .unwrap_or_default()
        .max_retries_or(args.max_retries);
    let config = Config {
        ctx,
        listen,
        token,
        max_retries,
        agent: args.agent,
    };
    // The agent's status is passed through whatever it is (128+n for a signal).
    Ok(match serve::run(config)? {
        0 => Exit::Ok,
        code => Exit::Status(code),
    })
}

/// `hookvisor --workspace WORKSPACE install AGENT --user-level` (`git-fsmonitor` too: in the
/// user's git config, not the repository's), its output on our stderr.
fn install_adapter(target: InstallTarget, workspace: &Path) -> Result<(), CliError> {
    let word = match target {
        InstallTarget::Agent(agent) => agent.spec().word,
        InstallTarget::GitFsmonitor => GIT_FSMONITOR,
    };
    let args = ["install", word, "--user-level"];
    let failed = |why: String| CliError::usage(format!("--install {}: {why}", args[1]));
    let exe = std::env::current_exe().map_err(|e| failed(e.to_string()))?;
    let status = Command::new(exe)
        .arg("--workspace")
        .arg(workspace)
        .args(args)
        .stdin(Stdio::null())
        .stdout(std::io::stderr())
        .status()
        .map_err(|e| failed(e.to_string()))?;
    if !status.success() {
        return Err(failed(format!(
            "`hookvisor install` failed ({status}); see above"
        )));
    }
    Ok(())
}

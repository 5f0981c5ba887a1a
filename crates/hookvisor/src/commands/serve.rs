//! `serve`: HTTP API, dashboard, agent supervision (the server itself is in [`crate::serve`]).

use crate::cli::ServeArgs;
use crate::commands::Globals;
use crate::error::{CliResult, Exit};
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
    super::refuse_others_state_dir(&ctx)?;
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

//! `serve`: HTTP API, dashboard, agent supervision (the server itself is in [`crate::serve`]).

use crate::cli::ServeArgs;
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
    let config = Config {
        ctx: globals.context()?,
        listen,
        token,
        max_retries: args.max_retries,
        agent: args.agent,
    };
    let code = serve::run(config).map_err(CliError::usage)?;
    if code == 0 {
        return Ok(Exit::Ok);
    }
    // The agent's status is passed through whatever it is (128+n for a signal), which the
    // three-valued `Exit` cannot carry; everything the server owned is dropped by now.
    std::process::exit(code)
}

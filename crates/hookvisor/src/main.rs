//! `hookvisor`: the command-line face of hookvisor-core. Parse, resolve, call into the core,
//! print one line on error.

// In a binary no item is reachable from outside; `pub` in its modules marks each module's
// interface to the others, and the whole tree is private anyway (issue 15 item 6 scopes
// `unreachable_pub` to the library and the init).
#![allow(unreachable_pub)]

mod agents;
mod cli;
mod commands;
mod error;
mod interrupt;
mod serve;
mod turn_client;

use std::process::ExitCode;

use cli::{Agent, Cli, Command};
use error::CliResult;

fn main() -> ExitCode {
    let cli = Cli::parse_args();
    log_to_stderr();
    match run(cli) {
        Ok(exit) => exit.into(),
        Err(err) => {
            eprintln!("hookvisor: {}", err.message);
            err.exit.into()
        }
    }
}

/// Diagnostics (`tracing`) go to stderr, filtered by `HOOKVISOR_LOG` (default `warn`; e.g.
/// `HOOKVISOR_LOG=debug`), without timestamps when a person reads them on a terminal.
fn log_to_stderr() {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("HOOKVISOR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let format = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    // A second subscriber cannot be installed; there is none before this one.
    let _ = if std::io::stderr().is_terminal() {
        format.without_time().try_init()
    } else {
        format.try_init()
    };
}

fn run(cli: Cli) -> CliResult {
    let globals = cli.globals.resolve();
    // What a hook leaves running comes back to a command that runs hooks one at a time, which
    // kills it (hookvisor-core's `leftovers`). A server is not a subreaper: it finds them in
    // /proc and leaves the reaping to the init.
    if !matches!(cli.command, Command::Serve(_))
        && let Err(e) = hookvisor_core::become_subreaper()
    {
        eprintln!("hookvisor: warning: cannot become a child subreaper: {e}");
    }
    match cli.command {
        Command::List { json } => commands::list::run(&globals, json),
        Command::Check => commands::list::check(&globals),
        Command::Eval(args) => commands::eval::run(&globals, &args),
        Command::Fire(args) => commands::fire::run(&globals, &args),
        Command::Run { id, json } => commands::eval::run_one(&globals, &id, json),
        Command::Status { json } => commands::eval::status(&globals, json),
        Command::Session { user, root_hooks } => {
            commands::session::run(&globals, user.as_deref(), root_hooks.as_deref())
        }
        Command::PreCommit(sub) => commands::precommit::run(&globals, &sub),
        Command::Serve(args) => commands::serve::run(&globals, args),
        Command::ClaudeStop(args) => commands::adapter::run(&globals, Agent::Claude, &args),
        Command::CodexStop(args) => commands::adapter::run(&globals, Agent::Codex, &args),
        Command::GeminiAfterAgent(args) => commands::adapter::run(&globals, Agent::Gemini, &args),
        Command::Install(args) => commands::install::install(&globals, &args),
        Command::Uninstall(args) => commands::install::uninstall(&globals, &args),
    }
}

//! `hookvisor`: the command-line face of hookvisor-core. Parse, resolve, call into the core,
//! print one line on error.

mod cli;
mod commands;
mod error;
mod interrupt;
mod serve;
mod turn_client;

use std::process::ExitCode;

use clap::Parser;

use cli::{Agent, Cli, Command};
use error::CliResult;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli) {
        Ok(exit) => exit.into(),
        Err(err) => {
            eprintln!("hookvisor: {}", err.message);
            err.exit.into()
        }
    }
}

fn run(cli: Cli) -> CliResult {
    let globals = commands::Globals {
        workspace: cli.workspace,
        state_dir: cli.state_dir,
        session: cli.session,
    };
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

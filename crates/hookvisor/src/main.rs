//! `hookvisor`: the command-line face of hookvisor-core. Parse, resolve, call into the core,
//! print one line on error.

// The C runtime calls our `main` directly, skipping std's start-up, whose stack-overflow
// handler has glibc read and parse /proc/self/maps on every start: 50 µs, a twentieth of a
// `fire` that finds no hook, which runs on every tool call of an agent (BENCHMARKS.md, case 7).
// What of that start-up hookvisor relies on, `std_start_up` does. std works as usual; the
// arguments come from glibc. A stack overflow of the main thread is a plain SIGSEGV, without
// std's message. Unit tests keep the harness's `main`.
#![cfg_attr(not(test), no_main)]
// In a binary no item is reachable from outside; `pub` in its modules marks each module's
// interface to the others, and the whole tree is private anyway (issue 15 item 6 scopes
// `unreachable_pub` to the library and the init).
#![allow(unreachable_pub)]

mod cli;
mod commands;
mod error;
mod interrupt;
mod list;
mod serve;
mod turn_client;

use std::ffi::{c_char, c_int};
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::IntoRawFd;

use nix::libc;
use nix::sys::signal::{SigHandler, Signal, signal};

use cli::{Cli, Command};
use error::CliResult;
use hookvisor_core::agents::Agent;

/// The entry point the C runtime calls (see the `no_main` note above).
// `no_mangle` is an unsafe attribute (the symbol could clash); this is the one C entry point.
#[allow(unsafe_code)]
#[cfg_attr(not(test), unsafe(no_mangle))]
extern "C" fn main(_argc: c_int, _argv: *const *const c_char) -> c_int {
    // Before any secret exists (a callback token, secrets.env, a server's key): the agent runs
    // as our uid, and a descriptor on /proc/PID/mem opened while we were dumpable stays valid.
    if let Err(err) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("hookvisor: cannot make this process non-dumpable: {err}");
        return 1;
    }
    std_start_up();
    hookvisor_actions::install();
    let cli = Cli::parse_args();
    // A pass of the init speaks as the init: a warning of the core goes to stderr as
    // `hookvisor-init: warning: …` when no subscriber listens (its argv[0] is the init's).
    if !matches!(cli.command, Command::InitPass(_)) {
        log_to_stderr();
    }
    let exit = match run(cli) {
        Ok(exit) => exit,
        Err(err) => {
            eprintln!("hookvisor: {}", err.message);
            err.exit
        }
    };
    // std flushes stdout after its `main`; the C runtime's `exit` does not know Rust's buffer.
    let _ = io::stdout().flush();
    c_int::from(exit.code())
}

/// What std's start-up does that hookvisor relies on: the three standard descriptors are open
/// (else a file opened later would become stdout, and output meant for the terminal would
/// land in it), and SIGPIPE is ignored (a reader that went away is an error to report, not
/// death). Hooks get SIGPIPE back by the executor, as before.
#[allow(unsafe_code)]
fn std_start_up() {
    for fd in 0..=2 {
        // SAFETY: F_GETFD reads the descriptor's flags and changes nothing.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            // open(2) returns the lowest free descriptor: this one, as the ones below are open.
            if let Ok(null) = File::options().read(true).write(true).open("/dev/null") {
                let _ = null.into_raw_fd();
            }
        }
    }
    // SAFETY: SIG_IGN installs no handler, and no other thread exists yet.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigIgn) };
}

/// Diagnostics (`tracing`) go to stderr, filtered by `HOOKVISOR_LOG` (default `warn`; e.g.
/// `HOOKVISOR_LOG=debug`), without timestamps when a person reads them on a terminal.
fn log_to_stderr() {
    // With the default filter, the subscriber is made at the first warning, which a `fire` on
    // an agent's every tool call almost never has: making it (a registry whose first shard
    // zeroes 32 KiB, and the filter) was a seventh of such a fire's instructions.
    let dispatch = match std::env::var_os("HOOKVISOR_LOG") {
        Some(_) => tracing::Dispatch::new(stderr_subscriber()),
        None => tracing::Dispatch::new(FirstWarning::default()),
    };
    // A second subscriber cannot be installed; there is none before this one.
    let _ = tracing::dispatcher::set_global_default(dispatch);
}

/// The subscriber that writes diagnostics to stderr (see [`log_to_stderr`]).
fn stderr_subscriber() -> Box<dyn tracing::Subscriber + Send + Sync> {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_env("HOOKVISOR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let format = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_target(false);
    if std::io::stderr().is_terminal() {
        Box::new(format.without_time().finish())
    } else {
        Box::new(format.finish())
    }
}

/// The default filter (`warn`) without its cost until something is at that level: callsites
/// below it are never enabled, and the first at it makes the real subscriber, which takes
/// every call from then on.
#[derive(Default)]
struct FirstWarning(std::sync::OnceLock<Box<dyn tracing::Subscriber + Send + Sync>>);

impl FirstWarning {
    const LEVEL: tracing::level_filters::LevelFilter = tracing::level_filters::LevelFilter::WARN;

    fn inner(&self) -> &(dyn tracing::Subscriber + Send + Sync) {
        self.0.get_or_init(stderr_subscriber).as_ref()
    }
}

impl tracing::Subscriber for FirstWarning {
    fn register_callsite(
        &self,
        metadata: &'static tracing::Metadata<'static>,
    ) -> tracing::subscriber::Interest {
        if Self::LEVEL >= *metadata.level() {
            self.inner().register_callsite(metadata)
        } else {
            tracing::subscriber::Interest::never()
        }
    }

    fn max_level_hint(&self) -> Option<tracing::level_filters::LevelFilter> {
        Some(Self::LEVEL)
    }

    fn enabled(&self, metadata: &tracing::Metadata<'_>) -> bool {
        Self::LEVEL >= *metadata.level() && self.inner().enabled(metadata)
    }

    fn new_span(&self, span: &tracing::span::Attributes<'_>) -> tracing::span::Id {
        self.inner().new_span(span)
    }

    fn record(&self, span: &tracing::span::Id, values: &tracing::span::Record<'_>) {
        self.inner().record(span, values);
    }

    fn record_follows_from(&self, span: &tracing::span::Id, follows: &tracing::span::Id) {
        self.inner().record_follows_from(span, follows);
    }

    fn event(&self, event: &tracing::Event<'_>) {
        self.inner().event(event);
    }

    fn enter(&self, span: &tracing::span::Id) {
        self.inner().enter(span);
    }

    fn exit(&self, span: &tracing::span::Id) {
        self.inner().exit(span);
    }

    fn clone_span(&self, id: &tracing::span::Id) -> tracing::span::Id {
        self.inner().clone_span(id)
    }

    fn try_close(&self, id: tracing::span::Id) -> bool {
        self.inner().try_close(id)
    }
}

fn run(cli: Cli) -> CliResult {
    let globals = cli.globals.resolve();
    // What a hook leaves running comes back to a command that runs hooks one at a time, which
    // kills it (hookvisor-core's `leftovers`). A server is not a subreaper: it finds them in
    // /proc and leaves the reaping to the init.
    if !matches!(cli.command, Command::Serve(_))
        && let Err(e) = hookvisor_core::leftovers::become_subreaper()
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
        Command::InitPass(args) => commands::init_pass::run(&globals, &args),
        Command::PreCommit(sub) => commands::precommit::run(
            &globals,
            hookvisor_core::precommit::GitHookKind::PreCommit,
            &sub,
        ),
        Command::PostCommit(sub) => commands::precommit::run(
            &globals,
            hookvisor_core::precommit::GitHookKind::PostCommit,
            &sub,
        ),
        Command::Serve(args) => commands::serve::run(&globals, args),
        Command::Adapter(args) => {
            commands::adapter::events::run(&globals, args.agent, &args.adapter)
        }
        // The old names (docs/EVENTS.md §3.1): aliases of `adapter AGENT`, every event included.
        Command::ClaudeStop(args) => commands::adapter::events::run(&globals, Agent::Claude, &args),
        Command::CodexStop(args) => commands::adapter::events::run(&globals, Agent::Codex, &args),
        Command::GeminiAfterAgent(args) => {
            commands::adapter::events::run(&globals, Agent::Gemini, &args)
        }
        Command::Install(args) => commands::install::install(&globals, &args),
        Command::Import(args) => commands::import::run(&globals, &args),
        Command::Uninstall(args) => commands::install::uninstall(&globals, &args),
        Command::GitFsmonitor { protocol, token } => commands::git_fsmonitor::run(protocol, &token),
        Command::Loop(args) => commands::loop_cmd::run(&globals, &args),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stderr_subscriber_is_made_at_the_first_warning_only() {
        let dispatch = tracing::Dispatch::new(FirstWarning::default());
        let made = || {
            dispatch
                .downcast_ref::<FirstWarning>()
                .unwrap()
                .0
                .get()
                .is_some()
        };
        tracing::dispatcher::with_default(&dispatch, || {
            tracing::debug!("below the filter");
            tracing::info!("below the filter");
        });
        assert!(!made(), "a debug or info event made the subscriber");
        tracing::dispatcher::with_default(&dispatch, || tracing::warn!("at the filter"));
        assert!(made(), "a warning did not make the subscriber");
    }
}

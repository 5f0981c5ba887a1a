//! `fire`: one event fired from the command line (EVENTS.md §3 "CLI", §5 rule 15).
//!
//! The hooks run in this process, on this context. Forwarding to a running `serve` when
//! `HOOKVISOR_URL` is set (§3) is not done yet.

use std::fs;
use std::io::{self, Read, Write};

use hookvisor_core::decision::{Decision, Reply};
use hookvisor_core::discover;
use hookvisor_core::event::Event;
use hookvisor_core::fire::{Firing, fire};
use serde_json::{Map, Value};

use crate::cli::FireArgs;
use crate::commands::Globals;
use crate::error::{CliError, CliResult, Exit};
use crate::interrupt::cancel_on_signals;

/// The exit status of an abort (§3): apart from a block's 1 and a usage error's 2.
const ABORT_EXIT: i32 = 3;

/// `hookvisor fire EVENT`: runs the event's hooks; prints the block or abort reason on stderr,
/// or the reply with `--json`; exits 0 allow, 1 block, 3 abort, 2 on a usage error.
pub fn run(globals: &Globals, args: &FireArgs) -> CliResult {
    let event: Event = args.event.parse().map_err(CliError::usage)?;
    let data = match &args.data {
        Some(spec) => read_data(spec)?,
        None => Map::new(),
    };
    let ctx = globals.context()?;
    let mut firing = Firing::new(event);
    firing.data = data;
    firing.trigger = args.trigger.as_str().to_owned();
    let discovery = discover(&ctx.hooks_dir());
    // The signal thread only where a hook can run: an event nothing binds (most tool calls of
    // an agent) returns at once, and a thread is a tenth of its cost (BENCHMARKS.md, case 7).
    if discovery
        .event_hooks
        .iter()
        .any(|h| h.spec.event == firing.event)
    {
        firing.cancel = Some(cancel_on_signals());
    }
    for problem in &discovery.problems {
        eprintln!("hookvisor: warning: {problem}");
    }
    let reply = fire(&ctx, &discovery, &firing).map_err(CliError::failed)?;
    print_reply(&reply, args.json)?;
    Ok(match reply.decision {
        Decision::Allow => Exit::Ok,
        Decision::Block => Exit::Failed,
        Decision::Abort => Exit::Status(ABORT_EXIT),
    })
}

/// `--data`: a JSON object inline, from `@FILE`, or from stdin (`-`); anything else is a usage
/// error naming the option.
fn read_data(spec: &str) -> Result<Map<String, Value>, CliError> {
    let text = if spec == "-" {
        let mut text = String::new();
        io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| CliError::usage(format!("--data -: cannot read stdin: {e}")))?;
        text
    } else if let Some(path) = spec.strip_prefix('@') {
        fs::read_to_string(path).map_err(|e| CliError::usage(format!("--data @{path}: {e}")))?
    } else {
        spec.to_owned()
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err(CliError::usage(
            "--data: expected a JSON object such as '{\"key\": 1}'",
        )),
        Err(e) => Err(CliError::usage(format!(
            "--data: not JSON ({e}); pass a JSON object, @FILE or -"
        ))),
    }
}

/// The reply as one JSON line on stdout with `--json`; else the reason of a block or abort
/// on stderr and the context on stdout.
fn print_reply(reply: &Reply, json: bool) -> io::Result<()> {
    let mut out = io::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, reply)?;
        writeln!(out)?;
        return Ok(());
    }
    for context in &reply.context {
        writeln!(out, "{context}")?;
    }
    if let Some(reason) = &reply.reason {
        eprintln!("{reason}");
    }
    Ok(())
}

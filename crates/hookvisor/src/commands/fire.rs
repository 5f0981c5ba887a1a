//! `fire`: one event fired from the command line (docs/EVENTS.md §3 "CLI", §5 rule 15).
//!
//! The hooks run in this process, on this context; or, when `HOOKVISOR_URL` is set and neither
//! `--workspace` nor `--state-dir` is given, in the running `serve` (§3), which then sees the
//! event on its dashboard and event stream, and runs the gates of a session one at a time.

use std::fs;
use std::io::{self, Read, Write};

use hookvisor_core::decision::{Decision, Reply};
use hookvisor_core::discover::discover_workspace_owned;
use hookvisor_core::event::Event;
use hookvisor_core::fire::fire;
use hookvisor_core::firing::Firing;
use hookvisor_core::{CancelToken, discover_workspace};
use nix::sys::signal::Signal;
use serde_json::{Map, Value};

use crate::cli::FireArgs;
use crate::commands::Globals;
use crate::error::{CliError, CliResult, Exit};
use crate::interrupt::cancel_on_signals;
use crate::turn_client::{TurnClient, TurnClientError};

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
    let server = (!globals.names_a_directory())
        .then(|| TurnClient::from_env(|name| std::env::var(name).ok()))
        .flatten();
    if let Some(client) = server {
        return forward(&client?, globals, args, &event, data);
    }
    let ctx = globals.context()?;
    super::refuse_what_others_can_change(&ctx)?;
    let mut firing = Firing::new(event);
    firing.data = data;
    firing.trigger = args.trigger.as_str().to_owned();
    // The detached child of an unawaited hook: that hook alone, run here and recorded.
    if let Some(id) = &args.deliver {
        let (mut firing, decision) = delivered_firing(firing)?;
        let discovery = match firing.pipeline.as_deref() {
            // `loop --pipeline`'s hooks; the owner is moot there.
            Some(files) => discover_workspace_owned(&ctx, "", Some(files)),
            None => discover_workspace(&ctx),
        };
        firing_cancel(&mut firing);
        let ran = hookvisor_core::fire::deliver(&ctx, &discovery, &firing, id, decision.as_deref())
            .map_err(CliError::failed)?;
        if ran.is_none() {
            return Err(CliError::usage(format!(
                "--deliver: no unawaited event hook '{id}'"
            )));
        }
        return Ok(Exit::Ok);
    }
    let discovery = discover_workspace(&ctx);
    let mut firing = firing;
    firing.max_attempts = discovery.config.max_retries_or(args.max_retries);
    // Signals cancel only where a hook can run: an event nothing binds (most tool calls of an
    // agent) returns at once. They are read from a signalfd, not by a thread of their own,
    // which cost as much as the rest of a `fire` around the hook (BENCHMARKS.md, case 7); the
    // thread stays the fallback. `turn.end` also runs the phase-1 file hooks.
    if firing.event == Event::TurnEnd || discovery.fires(&firing.event) {
        firing_cancel(&mut firing);
        // This process exits with its decision; an unawaited hook goes on without it.
        firing.detach_unawaited = true;
    }
    for problem in &discovery.problems {
        eprintln!("hookvisor: warning: {problem}");
    }
    if firing.event == Event::TurnEnd {
        // As `eval` does: rule 8 makes them one.
        super::precommit::ensure_installed(&ctx, &discovery);
    }
    let reply = fire(&ctx, &discovery, &firing).map_err(CliError::failed)?;
    print_reply(&reply, args.json)?;
    Ok(exit(reply.decision))
}

/// Cancels the firing on SIGINT, SIGTERM and SIGHUP.
fn firing_cancel(firing: &mut Firing) {
    let signals = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];
    firing.cancel = Some(CancelToken::on_signals(&signals).unwrap_or_else(|_| cancel_on_signals()));
}

/// `--deliver`: the firing as its event JSON on stdin says (docs/EVENTS.md §5 rule 19): data,
/// trigger, iteration, stage and files; and beside them the `decision` a `post` hook sees,
/// the caller's `vars` and the `pipeline` files the hooks were read from.
fn delivered_firing(mut firing: Firing) -> Result<(Firing, Option<String>), CliError> {
    let mut text = String::new();
    io::stdin()
        .read_to_string(&mut text)
        .map_err(|e| CliError::usage(format!("--deliver: cannot read the event JSON: {e}")))?;
    let event: Value = serde_json::from_str(&text)
        .map_err(|e| CliError::usage(format!("--deliver: the event JSON does not parse: {e}")))?;
    if let Some(data) = event.get("data").and_then(Value::as_object) {
        firing.data = data.clone();
    }
    if let Some(trigger) = event.get("trigger").and_then(Value::as_str) {
        trigger.clone_into(&mut firing.trigger);
    }
    firing.iteration = event.get("iteration").and_then(Value::as_u64);
    firing.stage = event
        .get("stage")
        .and_then(Value::as_str)
        .map(str::to_owned);
    firing.files = event.get("files").and_then(Value::as_array).map(|files| {
        files
            .iter()
            .filter_map(Value::as_str)
            .map(std::path::PathBuf::from)
            .collect()
    });
    if let Some(vars) = event.get("vars").and_then(Value::as_object) {
        firing.vars = vars.clone();
    }
    firing.pipeline = event
        .get("pipeline")
        .and_then(Value::as_array)
        .map(|files| {
            files
                .iter()
                .filter_map(Value::as_str)
                .map(std::path::PathBuf::from)
                .collect()
        });
    let decision = event
        .get("decision")
        .and_then(Value::as_str)
        .map(str::to_owned);
    Ok((firing, decision))
}

/// The exit status of a decision (§3).
fn exit(decision: Decision) -> Exit {
    match decision {
        Decision::Allow => Exit::Ok,
        Decision::Block => Exit::Failed,
        Decision::Abort => Exit::Status(ABORT_EXIT),
    }
}

/// Fires the event in the server of `$HOOKVISOR_URL` and prints its reply as if fired here.
/// The server's 400 (a bad field) and 404 (an event it does not know) are usage errors.
fn forward(
    client: &TurnClient,
    globals: &Globals,
    args: &FireArgs,
    event: &Event,
    data: Map<String, Value>,
) -> CliResult {
    let mut body = Map::new();
    if let Some(session) = &globals.args.session {
        body.insert("session_id".into(), session.clone().into());
    }
    body.insert("trigger".into(), args.trigger.as_str().into());
    body.insert("data".into(), Value::Object(data));
    let answer = match client.fire_event(&event.to_string(), &Value::Object(body)) {
        Ok(answer) => answer,
        Err(
            err @ TurnClientError::Status {
                code: 400 | 404, ..
            },
        ) => {
            return Err(CliError::usage(err));
        }
        Err(err) => return Err(err.into()),
    };
    let reply: Reply = serde_json::from_value(answer.clone()).map_err(|e| {
        CliError::failed(format!(
            "the hookvisor server sent a reply this client cannot read ({e}); use the same \
             hookvisor version for the server and the client"
        ))
    })?;
    if args.json {
        // The server's reply as it sent it: fields this client does not know pass through.
        let mut out = io::stdout().lock();
        serde_json::to_writer(&mut out, &answer).map_err(io::Error::from)?;
        writeln!(out)?;
    } else {
        print_reply(&reply, false)?;
    }
    Ok(exit(reply.decision))
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
        fs::read_to_string(path).map_err(|e| {
            CliError::usage(format!(
                "--data @{path}: {e}; name a readable file of JSON, or pass the JSON inline"
            ))
        })?
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
    // A failure that did not block is no decision, but never goes unsaid.
    for result in &reply.results {
        if result["success"] == false && result["blocked"] != true {
            let id = result["hookId"].as_str().unwrap_or("?");
            let how = match result["timedOut"] == true {
                true => "timed out".to_owned(),
                false => format!("failed with exit code {}", result["exitCode"]),
            };
            eprintln!(
                "hookvisor: warning: hook '{id}' {how} and did not block; its output is in its \
                 log (`hookvisor status`)"
            );
        }
    }
    Ok(())
}

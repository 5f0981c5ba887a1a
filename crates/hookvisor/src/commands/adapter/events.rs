//! `hookvisor adapter claude|codex|gemini`: every hook event of an agent, dispatched on its
//! `hook_event_name` to the canonical event of docs/EVENTS.md §3.1 (the agent's routes in
//! [`hookvisor_core::agents`]), the answer in the agent's own protocol ([`super::protocol`]).
//!
//! - Stop/SubagentStop/AfterAgent: the turn end of the old adapters ([`super`]), unchanged,
//!   then `session.stop` when it passed (§1.1 footnote ²); a `session.stop` block is recorded
//!   as a re-prompt, so the loop guard counts it.
//! - UserPromptSubmit/BeforeAgent: the prompt is recorded for the loop guard (never blocking),
//!   then `turn.start`, whose reply carries the drained context buffer (rule 5).
//! - PostToolUse/AfterTool: `tool.after`, then `file.edited` once per path a file tool wrote.
//! - SessionEnd: a detached copy of this command fires `session.end` (in-process, or in the
//!   server of `$HOOKVISOR_URL`), so the agent is never held past its 1.5 s budget.
//! - Any other event is fired raw (`claude.PreCompact`).
//!
//! An event no hook binds evaluates nothing: after discovery it answers allow at once (only
//! `turn.start` still drains the buffer). When hookvisor itself fails (a server that is gone,
//! refuses or does not answer in time, an unreadable input or state dir), a tool gate
//! (`tool.before`: PreToolUse, BeforeTool) is denied with the error as the reason: a gate
//! that lets a call through unchecked breaks its promise. Other events fail open (stderr,
//! exit 0) unless `--fail-closed`, which blocks with the error as the reason where the event
//! can be blocked.

use std::env;
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use hookvisor_core::agents::{Agent, Route};
use hookvisor_core::context_buffer::ContextBuffer;
use hookvisor_core::decision::{Decision, Reply};
use hookvisor_core::event::Event as CoreEvent;
use hookvisor_core::fire::fire;
use hookvisor_core::firing::Firing;
use hookvisor_core::{CancelToken, Context, Discovery, EvalError, TurnLog, discover_workspace};
use serde_json::{Map, Value};

use super::protocol::{Decided, Said, say};
use super::tools::{Touched, event_data};
use super::{AdapterError, MAX_INPUT, TurnEnd, Verdict, context, end_turn};
use crate::cli::AdapterArgs;
use crate::commands::Globals;
use crate::commands::install::{EVENT_TIMEOUT_SECS, route_timeout_secs};
use crate::error::{CliResult, Exit};
use crate::interrupt::cancel_on_signals;
use crate::turn_client::TurnClient;

/// Set in the detached process that fires `session.end`.
const DETACHED_VAR: &str = "HOOKVISOR_ADAPTER_DETACHED";

/// `hookvisor adapter AGENT`: answers one hook event of the agent, then exits with the
/// status its protocol expects.
pub fn run(globals: &Globals, agent: Agent, args: &AdapterArgs) -> CliResult {
    // First, before any thread: a SIGTERM, SIGINT or SIGHUP (the agent's uid can send them)
    // at any stage cancels and is answered, never kills this process with nothing said, which
    // the agent takes as "go on".
    let cancel = cancel_on_signals();
    let mut bytes = Vec::new();
    let read = io::stdin()
        .lock()
        .take(MAX_INPUT)
        .read_to_end(&mut bytes)
        .map_err(AdapterError::Stdin);
    let input = read.and_then(|_| parse(&bytes));
    let name = input
        .as_ref()
        .ok()
        .and_then(|(map, _)| map.get("hook_event_name"))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    // An input without a name is a turn end, as the old adapters took it.
    let route = if name.is_empty() {
        Some(Route::TurnEnd)
    } else {
        agent.spec().route(&name)
    };
    if under_loop() && route.is_some_and(Route::owned_by_loop) {
        // The loop fires this event itself; the agent is told nothing.
        return Ok(Exit::Ok);
    }
    if env::var_os(DETACHED_VAR).is_none() {
        hookvisor_actions::callback::cap_waits(callback_cap(route));
    }
    let outcome = input.and_then(|(map, turn)| {
        let call = Call {
            globals,
            agent,
            args,
            name: &name,
            input: &map,
            turn: &turn,
            deadline: callback_cap(route),
            cancel: &cancel,
        };
        call.answer(route, &bytes)
    });
    let said = match outcome {
        Ok(decided) => say(&agent.spec().answers, &name, route, &decided),
        // Before the cancel's arm: a signal (which the agent's uid can send) must not turn a
        // fail-closed gate into "allow".
        Err(err) if fails_closed(route, args) || (err.hides_checks() && can_block(route)) => {
            let why = if route == Some(Route::ToolBefore) {
                "a tool gate fails closed"
            } else if args.fail_closed {
                "the hook runs with --fail-closed"
            } else {
                "the agent could have made the second workspace"
            };
            let decided = Decided {
                decision: Decision::Block,
                reason: Some(format!(
                    "hookvisor could not check this event: {err}. (It is blocked because {why}.)"
                )),
                context: Vec::new(),
            };
            say(&agent.spec().answers, &name, route, &decided)
        }
        Err(AdapterError::Eval(EvalError::Cancelled)) => {
            eprintln!("hookvisor: {}", EvalError::Cancelled);
            Said::default()
        }
        Err(err) => {
            eprintln!(
                "hookvisor: {err} (failing open: {} goes on; --fail-closed blocks instead)",
                agent.spec().name
            );
            Said::default()
        }
    };
    if let Some(value) = &said.stdout {
        let mut out = io::stdout().lock();
        writeln!(out, "{value}")?;
        out.flush()?;
    }
    if let Some(reason) = &said.stderr {
        eprintln!("{reason}");
    }
    Ok(match said.exit {
        0 => Exit::Ok,
        code => Exit::Status(code),
    })
}

/// How long before the agent's own hook timeout a callback wait ends (docs/EVENTS.md §4.3).
const CALLBACK_MARGIN: Duration = Duration::from_secs(10);

/// The longest a callback wait lasts when the agent runs this hook: the timeout `install`
/// writes for `route` less [`CALLBACK_MARGIN`]. The agent kills a hook at its timeout and then
/// goes on (Claude: "a timed-out hook does not block"), so the wait must end first and be
/// judged by its `on_timeout`.
pub(super) fn callback_cap(route: Option<Route>) -> Duration {
    let installed = route.map_or(EVENT_TIMEOUT_SECS, route_timeout_secs);
    Duration::from_secs(installed)
        .saturating_sub(CALLBACK_MARGIN)
        .max(Duration::from_secs(1))
}

/// Whether this agent runs under `hookvisor loop`, which sets `HOOKVISOR_LOOP=1` in its
/// environment and fires the session and turn events itself (docs/EVENTS.md §3.2).
pub(crate) fn under_loop() -> bool {
    env::var_os("HOOKVISOR_LOOP").is_some_and(|v| v == "1")
}

/// Whether a hookvisor failure on `route` blocks: always for a tool gate, whose promise is that
/// no call it did not allow runs; for the other events that can be blocked, with
/// `--fail-closed`.
fn fails_closed(route: Option<Route>, args: &AdapterArgs) -> bool {
    route == Some(Route::ToolBefore) || (args.fail_closed && can_block(route))
}

/// Whether a block of `route` means anything (notices cannot be blocked).
fn can_block(route: Option<Route>) -> bool {
    !matches!(
        route,
        Some(Route::SessionStart | Route::ToolFailed | Route::Error | Route::SessionEnd)
    )
}

/// The agent's JSON, as a map and as the old adapters' turn-end fields.
fn parse(bytes: &[u8]) -> Result<(Map<String, Value>, TurnEnd), AdapterError> {
    if bytes.iter().all(u8::is_ascii_whitespace) {
        return Err(AdapterError::Empty);
    }
    let map: Map<String, Value> = serde_json::from_slice(bytes).map_err(AdapterError::Json)?;
    let turn: TurnEnd =
        serde_json::from_value(Value::Object(map.clone())).map_err(AdapterError::Json)?;
    Ok((map, turn))
}

/// One call of the adapter.
struct Call<'a> {
    globals: &'a Globals,
    agent: Agent,
    args: &'a AdapterArgs,
    /// The agent's `hook_event_name`.
    name: &'a str,
    input: &'a Map<String, Value>,
    turn: &'a TurnEnd,
    /// How long the server may take to answer: the agent kills this process at its hook
    /// timeout and then goes on as if allowed, so a gate must be denied before that.
    deadline: Duration,
    /// Cancelled by a signal: ends a wait on the server too.
    cancel: &'a CancelToken,
}

impl Call<'_> {
    /// Fires what `route` asks and returns the decision.
    fn answer(&self, route: Option<Route>, bytes: &[u8]) -> Result<Decided, AdapterError> {
        let ctx =
            context(self.globals, self.agent.spec(), self.turn).map_err(AdapterError::Context)?;
        let mut fired = Fired::new(self, &ctx);
        let touched = if self.input.contains_key("tool_name") {
            let file_tools = fired.discovery().config.file_tools.clone();
            Touched::of(self.agent.spec(), self.input, &ctx.workspace, &file_tools)
        } else {
            Touched::Other(Vec::new())
        };
        let data = event_data(self.input, &touched);
        let event = match route {
            None => {
                let raw = format!("{}.{}", self.agent.as_str(), self.name);
                raw.parse::<CoreEvent>()
                    .map_err(|e| AdapterError::Event(e.to_string()))?
            }
            Some(Route::TurnEnd) => return self.turn_end(ctx, data),
            Some(Route::SessionEnd) if env::var_os(DETACHED_VAR).is_none() => {
                detach(bytes)?;
                return Ok(Decided::default());
            }
            // The first event a route fires is its canonical one (`TurnEnd`, two, is above).
            Some(route) => route.fires()[0].clone(),
        };
        if route == Some(Route::TurnStart) {
            // Never blocks the prompt: the loop guard only loses one count.
            let session = self.turn.session_id.as_deref().unwrap_or_default();
            if let Err(e) = TurnLog::for_context(&ctx).prompt(session, self.turn.prompt.as_deref())
            {
                eprintln!("hookvisor: cannot record the prompt: {e} (the prompt goes on)");
            }
        }
        // The pipeline puts each event's context where it belongs (hookvisor-core's `fire`,
        // step 8): in the reply of the events whose answer the agent reads it from, else in
        // the buffer; `session.end` discards the buffer into the session's log.
        let reply = fired.fire(&event, data.clone(), None)?;
        let mut decided = decided(&reply);
        if route == Some(Route::SessionStart) {
            // §1.6: SessionStart delivers the buffer as TurnStart does.
            let drained = ContextBuffer::new(&ctx.state())
                .drain(hookvisor_core::context_buffer::MAX_CONTEXT_CHARS)
                .map_err(|e| AdapterError::Event(e.to_string()))?;
            if !drained.text.is_empty() {
                decided.context.push(drained.text);
            }
        }
        if route == Some(Route::ToolAfter) {
            for path in touched.written() {
                let mut data = data.clone();
                let file = Value::from(path.to_string_lossy().into_owned());
                data.insert("files".into(), Value::Array(vec![file.clone()]));
                data.insert("file".into(), file);
                let reply = fired.fire(&CoreEvent::FileEdited, data, Some(vec![path]))?;
                decided.context.extend(reply.context);
            }
        }
        Ok(decided)
    }

    /// Stop/SubagentStop/AfterAgent: the old adapters' turn end, then `session.stop` when it
    /// passed; the turn log records what the agent was finally told.
    fn turn_end(&self, ctx: Context, data: Map<String, Value>) -> Result<Decided, AdapterError> {
        let ended = end_turn(ctx.clone(), self.args, self.turn)?;
        if let Verdict::Block(reason) = &ended.verdict {
            ended.record(ended.answer())?;
            return Ok(Decided {
                decision: Decision::Block,
                reason: Some(reason.clone()),
                context: Vec::new(),
            });
        }
        if ended.action != hookvisor_core::Action::Pass {
            ended.record(ended.answer())?;
            return Ok(Decided::default());
        }
        let mut fired = Fired::new(self, &ctx);
        fired.trigger = ended.stop.trigger.as_str();
        fired.hook_turns = Some(ended.stop.hook_turns);
        let reply = fired.fire(&CoreEvent::SessionStop, data, None)?;
        let decided = decided(&reply);
        match (&decided.decision, &decided.reason) {
            (Decision::Block, reason) => {
                let reason = reason.as_deref().unwrap_or(super::protocol::NO_REASON);
                ended.record(hookvisor_core::turns::Answer::Block(reason))?;
            }
            // The guard ran out: later stops stay given up until the user prompts.
            _ if reply.gave_up() => ended.record(hookvisor_core::turns::Answer::GaveUp)?,
            _ => ended.record(ended.answer())?,
        }
        Ok(decided)
    }
}

/// Fires events of one call: in the server of `$HOOKVISOR_URL`, else in-process with one
/// discovery of the hooks.
struct Fired<'a> {
    call: &'a Call<'a>,
    ctx: &'a Context,
    discovery: Option<Discovery>,
    trigger: &'static str,
    /// The turn log's count for the loop guard (`hookvisor_core::turns` rule 5).
    hook_turns: Option<u32>,
}

impl<'a> Fired<'a> {
    fn new(call: &'a Call<'a>, ctx: &'a Context) -> Fired<'a> {
        Fired {
            call,
            ctx,
            discovery: None,
            trigger: "user",
            hook_turns: None,
        }
    }

    /// The hooks of the workspace, read once.
    fn discovery(&mut self) -> &Discovery {
        self.discovery
            .get_or_insert_with(|| discover_workspace(self.ctx))
    }

    fn fire(
        &mut self,
        event: &CoreEvent,
        data: Map<String, Value>,
        files: Option<Vec<PathBuf>>,
    ) -> Result<Reply, AdapterError> {
        if let Some(client) = TurnClient::from_env(|name| env::var(name).ok()) {
            let mut body = Map::new();
            body.insert("session_id".into(), self.ctx.session_id.clone().into());
            body.insert("trigger".into(), self.trigger.into());
            body.insert("data".into(), Value::Object(data));
            // The deadline is the whole wait's, so the agent's own timeout never comes first; a
            // signal ends the wait, judged as a failure.
            let answer = client
                .map_err(AdapterError::Server)?
                .with_deadline(self.call.deadline)
                .with_cancel(self.call.cancel.clone())
                .fire_event(&event.to_string(), &Value::Object(body))?;
            return serde_json::from_value(answer).map_err(|e| {
                AdapterError::Event(format!(
                    "the hookvisor server sent a reply this adapter cannot read ({e}); use the \
                     same hookvisor version for both"
                ))
            });
        }
        let max_retries = self.call.args.max_retries;
        let trigger = self.trigger;
        let discovery = self.discovery();
        let bound = discovery.fires(event);
        // Unbound events evaluate nothing (rule 17's ≤ 1.5× `true`); turn.start still drains.
        if !bound && *event != CoreEvent::TurnStart {
            return Ok(allow(event));
        }
        let mut firing = Firing::new(event.clone());
        firing.data = data;
        firing.files = files;
        firing.trigger = trigger.to_owned();
        firing.max_attempts = discovery.config.max_retries_or(max_retries);
        firing.hook_turns = self.hook_turns;
        // The agent waits for this process: an unawaited hook goes on without it.
        firing.detach_unawaited = true;
        if bound {
            firing.cancel = Some(self.call.cancel.clone());
        }
        let discovery = self.discovery.as_ref().expect("read above");
        fire(self.ctx, discovery, &firing).map_err(|e| match e {
            hookvisor_core::fire::FireError::Cancelled => AdapterError::Eval(EvalError::Cancelled),
            other => AdapterError::Event(other.to_string()),
        })
    }
}

/// The reply of an event no hook binds.
fn allow(event: &CoreEvent) -> Reply {
    Reply {
        event: event.to_string(),
        decision: Decision::Allow,
        reason: None,
        context: Vec::new(),
        results: Vec::new(),
        attempt: None,
        max_attempts: None,
        phase1: Map::new(),
    }
}

/// A reply in the adapter's terms.
fn decided(reply: &Reply) -> Decided {
    Decided {
        decision: reply.decision,
        reason: reply.reason.clone(),
        context: reply.context.clone(),
    }
}

/// Runs this same command again, detached (its own process group, no output the agent waits
/// on), with the agent's JSON on its stdin, to fire `session.end` after the agent moved on.
fn detach(bytes: &[u8]) -> Result<(), AdapterError> {
    use std::os::unix::process::CommandExt;

    let exe = env::current_exe().map_err(|e| AdapterError::Event(e.to_string()))?;
    let mut child = Command::new(exe)
        .args(env::args_os().skip(1))
        .env(DETACHED_VAR, "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .map_err(|e| AdapterError::Event(format!("cannot start the session.end process: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        // The child reads its stdin first, so this never waits long; a child that died
        // early is its own loss, not the agent's.
        let _ = stdin.write_all(bytes);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The review's F3: Claude's installed 600 s is shorter than the default 3600 s wait, so
    /// an unanswered approval was decided by the agent's kill (allow), never by `on_timeout`.
    #[test]
    fn a_callback_wait_ends_ten_seconds_before_the_agents_timeout() {
        let secs = |route| callback_cap(route).as_secs();
        assert_eq!(secs(Some(Route::ToolBefore)), 590);
        assert_eq!(secs(Some(Route::TurnEnd)), 1790);
        assert_eq!(secs(Some(Route::SessionEnd)), 50);
        assert_eq!(secs(None), EVENT_TIMEOUT_SECS - 10);
        for route in [Route::ToolBefore, Route::TurnEnd, Route::SessionEnd] {
            assert!(callback_cap(Some(route)).as_secs() < route_timeout_secs(route));
        }
    }
}

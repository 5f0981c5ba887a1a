//! The agents' turn end, shared by every adapter name (`adapter AGENT` and its aliases). Each
//! agent's events and decision word are its row of the agent table ([`hookvisor_core::agents`]).
//!
//! Each reads the agent's hook JSON on stdin, evaluates the file hooks (in-process, or through
//! `hookvisor serve` when `HOOKVISOR_URL` is set) and answers in the one form that makes the
//! agent keep working: exit 0 with `{"decision":"block","reason":...}` (`"deny"` for Gemini CLI),
//! the reason becoming the model's next prompt. A non-zero exit would only be shown as a hook
//! error, and `continue:false` would end the session; neither re-prompts. On a pass, or when
//! the loop guard gives up, the adapter prints nothing and the agent stops.
//!
//! - The agent's prompt event (`UserPromptSubmit`, Gemini CLI's `BeforeAgent`) is recorded in
//!   the state dir's turn log before `turn.start` fires ([`events`]). A stop that follows one
//!   of our blocks with no user prompt in between is hook-triggered, whatever the agent's
//!   `stop_hook_active` says; without prompt events (older settings) the flag decides, helped
//!   by Gemini CLI's `prompt` field (hookvisor-core's `turns` module has the rules). The loop
//!   guard is hookvisor's own, counted in the state dir, so it holds whatever the agent's own
//!   limits are. A failure to record a prompt never blocks the prompt.
//! - The workspace is found as git finds a repository ([`Globals::agent_context`] has the
//!   order): `--workspace` (which `install` writes), the agent's project variable
//!   (`CLAUDE_PROJECT_DIR`), `$DISCOBOT_WORKSPACE`, then upward from the agent's `cwd`, which
//!   the model moves with one `cd`. The session is `--session`, else
//!   `$DISCOBOT_SESSION_ID`/`$SESSION_ID`, else the agent's `session_id`.
//! - When hookvisor itself fails (unreadable input, unwritable state dir, server unreachable) a
//!   turn end fails open by default: the error goes to stderr and the agent stops.
//!   `--fail-closed` blocks with the error as the reason instead. (The `adapter` command's
//!   tool gates always fail closed: see [`events`].)
//!
//! The `adapter` command ([`events`]) answers every event of the agents, and uses this
//! module's turn end for `Stop`/`AfterAgent`. The old commands `claude-stop`, `codex-stop` and
//! `gemini-after-agent` are aliases of it (docs/EVENTS.md §3.1): `main` sends them to the same
//! [`events::run`], so every event fires through either name.

use std::env;
use std::fmt;
use std::io;
use std::path::PathBuf;

use hookvisor_core::agents::{Route, Spec};
use hookvisor_core::turns::{Answer, TurnLogError};
use hookvisor_core::{
    Action, Context, ContextError, EvalError, EvalOptions, EvalReport, Evaluator, TurnLog,
};
use serde::Deserialize;

use crate::cli::AdapterArgs;
use crate::commands::Globals;
use crate::interrupt::cancel_on_signals;
use crate::turn_client::{TurnClient, TurnClientError};

pub mod events;
mod protocol;
mod tools;

/// Longest reason handed to an agent, in characters: under Claude Code's 10,000-character cap
/// on hook output, with room for the JSON around it.
pub const REASON_LIMIT: usize = 9_500;
/// Most bytes read from stdin; the agents send a few kilobytes, plus the last message.
const MAX_INPUT: u64 = 16 * 1024 * 1024;

/// The fields of the agents' turn-end JSON that matter here; every other field is ignored and
/// every one of these may be missing.
#[derive(Debug, Default, Deserialize)]
struct TurnEnd {
    session_id: Option<String>,
    cwd: Option<PathBuf>,
    stop_hook_active: Option<bool>,
    /// The user's prompt: on a prompt event, and on Gemini CLI's `AfterAgent`.
    prompt: Option<String>,
}

/// Why the adapter could not decide; each says what to do.
#[derive(Debug)]
enum AdapterError {
    Stdin(io::Error),
    Empty,
    Json(serde_json::Error),
    Context(ContextError),
    Eval(EvalError),
    Server(TurnClientError),
    Turns(TurnLogError),
    /// An event of `hookvisor adapter` could not be fired.
    Event(String),
}

impl fmt::Display for AdapterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            AdapterError::Stdin(e) => write!(f, "cannot read the hook JSON on stdin: {e}"),
            AdapterError::Empty => f.write_str(
                "no hook JSON on stdin; run this command from the agent's turn-end hook \
                 (`hookvisor install`)",
            ),
            AdapterError::Json(e) => write!(
                f,
                "the hook JSON on stdin is not a JSON object of the expected shape ({e}); \
                 check that the agent's hook runs the matching adapter"
            ),
            AdapterError::Context(e) => e.fmt(f),
            AdapterError::Eval(e) => e.fmt(f),
            AdapterError::Server(e) => e.fmt(f),
            AdapterError::Turns(e) => e.fmt(f),
            AdapterError::Event(e) => f.write_str(e),
        }
    }
}

/// A signal during the wait is a cancel, as it is in-process.
impl From<TurnClientError> for AdapterError {
    fn from(err: TurnClientError) -> AdapterError {
        match err {
            TurnClientError::Cancelled => AdapterError::Eval(EvalError::Cancelled),
            err => AdapterError::Server(err),
        }
    }
}

impl AdapterError {
    /// Whether the agent itself may have caused this error to switch the checks off: a second
    /// workspace of hooks made around its directory ([`ContextError::NestedWorkspaces`]). Such
    /// an error blocks wherever a block means something, whatever `--fail-closed` says.
    fn hides_checks(&self) -> bool {
        matches!(
            self,
            AdapterError::Context(ContextError::NestedWorkspaces { .. })
        )
    }
}

/// What the agent is told.
#[derive(Debug, PartialEq, Eq)]
enum Verdict {
    /// Let it stop; print nothing.
    Stop,
    /// Keep it working on this prompt.
    Block(String),
}

/// A turn end judged by the file hooks, before its answer is recorded in the turn log (the
/// `adapter` command fires `session.stop` in between).
struct TurnEnded {
    /// The turn's context.
    ctx: Context,
    /// What the evaluation tells the agent.
    verdict: Verdict,
    /// The evaluation's action.
    action: Action,
    /// The turn log's reading of the stop.
    stop: hookvisor_core::turns::Stop,
    /// The agent's session id, as sent.
    session: String,
}

impl TurnEnded {
    /// The turn log's answer for [`TurnEnded::verdict`].
    fn answer(&self) -> Answer<'_> {
        match (&self.verdict, self.action) {
            (Verdict::Block(reason), _) => Answer::Block(reason),
            (Verdict::Stop, Action::GaveUp) => Answer::GaveUp,
            (Verdict::Stop, _) => Answer::Stop,
        }
    }

    /// Records what the agent was told, for the loop guard.
    fn record(&self, answer: Answer<'_>) -> Result<(), AdapterError> {
        TurnLog::for_context(&self.ctx)
            .answered(&self.session, &self.stop, answer)
            .map_err(AdapterError::Turns)
    }
}

/// Evaluates the turn that ended: the file hooks and `turn.end` hooks, in-process or in the
/// server of `$HOOKVISOR_URL`, with the loop guard's trigger.
fn end_turn(ctx: Context, args: &AdapterArgs, input: &TurnEnd) -> Result<TurnEnded, AdapterError> {
    let turns = TurnLog::for_context(&ctx);
    let session = input.session_id.clone().unwrap_or_default();
    let stop = turns
        .stop(&session, input.stop_hook_active, input.prompt.as_deref())
        .map_err(AdapterError::Turns)?;
    let trigger = stop.trigger;
    let report = match TurnClient::from_env(|name| env::var(name).ok()) {
        Some(client) => client
            // Answered before the agent's own hook timeout, which would let the stop through.
            .and_then(|client| {
                client
                    .with_deadline(events::callback_cap(Some(Route::TurnEnd)))
                    .with_cancel(cancel_on_signals())
                    .end_turn(trigger)
            })?,
        None => {
            // One reading of the hooks and hookvisor.yml for the turn (a broken file leaves
            // the defaults; `check` reports it).
            let discovery = hookvisor_core::discover_workspace(&ctx);
            // As `eval` does: adding the first commit hook is enough (serve does its own).
            crate::commands::precommit::ensure_installed(&ctx, &discovery);
            let options = EvalOptions {
                trigger,
                max_retries: discovery.config.max_retries_or(args.max_retries),
                cancel: Some(cancel_on_signals()),
                hook_turns: Some(stop.hook_turns),
            };
            // The agent waits for this process: an unawaited hook goes on without it.
            let mut turn =
                hookvisor_core::firing::Firing::new(hookvisor_core::event::Event::TurnEnd);
            turn.trigger = trigger.as_str().to_owned();
            turn.detach_unawaited = true;
            Evaluator::new(ctx.clone())
                .with_discovery(discovery)
                .end_turn_with(&options, &turn)
                .map_err(AdapterError::Eval)?
        }
    };
    Ok(TurnEnded {
        ctx,
        verdict: verdict(&report),
        action: report.action,
        stop,
        session,
    })
}

/// The context of an event of the agent `spec` ([`Globals::agent_context`]), from the
/// agent's project variable, its `cwd` and its session id made a plain name: the one way
/// every adapter (`adapter AGENT` and the old turn-end aliases) finds the workspace.
fn context(globals: &Globals, spec: &Spec, input: &TurnEnd) -> Result<Context, ContextError> {
    globals.agent_context(
        spec.project_dir_var,
        input.cwd.clone(),
        input.session_id.as_deref().and_then(plain_session),
    )
}

/// An agent's session id as a state dir name: other characters become `_`; nothing usable
/// gives `None` (the default session).
fn plain_session(id: &str) -> Option<String> {
    let name: String = id
        .chars()
        .take(128)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    let name = name.trim_start_matches('.').to_owned();
    (!name.is_empty()).then_some(name)
}

/// Turns an evaluation into what the agent is told, saying on stderr which hook files do not
/// load and why a failure does not re-prompt.
fn verdict(report: &EvalReport) -> Verdict {
    super::eval::warn_problems(report);
    let failed = report.results.iter().rev().find(|r| !r.success);
    let failed_id = failed.map_or("a hook", |r| r.hook_id.as_str());
    match report.action {
        Action::Reprompt => Verdict::Block(reason(report)),
        Action::Pass => Verdict::Stop,
        Action::Failed => {
            eprintln!(
                "hookvisor: hook '{failed_id}' failed (notify_llm is false, so the model is \
                 not re-prompted)"
            );
            Verdict::Stop
        }
        Action::GaveUp if failed.is_none() => {
            eprintln!(
                "hookvisor: the hook files above still do not load after {} re-prompts; \
                 letting the agent stop",
                report.max_attempts
            );
            Verdict::Stop
        }
        Action::GaveUp => {
            eprintln!(
                "hookvisor: hook '{failed_id}' still fails after {} re-prompts; letting the \
                 agent stop. It stays pending and runs again at a turn end once a file it \
                 matches changes (or now: `hookvisor run {failed_id}`)",
                report.max_attempts
            );
            Verdict::Stop
        }
    }
}

/// The re-prompt, never empty and at most [`REASON_LIMIT`] characters, the log path kept.
fn reason(report: &EvalReport) -> String {
    let message = if report.failure.is_some() || !report.broken.is_empty() {
        report.message_within(REASON_LIMIT)
    } else {
        // An evaluation from the server carries only the text: cut its middle, keeping the
        // header (hook, files, log path) and the closing request with the attempt count.
        report.message.as_deref().map(|m| fit(m, REASON_LIMIT))
    };
    match message.filter(|m| !m.trim().is_empty()) {
        Some(message) => message,
        None => "A hookvisor hook failed after this turn; run `hookvisor status` to see which, \
                 fix it, and make sure it passes."
            .to_owned(),
    }
}

/// `text` in at most `limit` characters: its start and its last paragraph around a marker.
fn fit(text: &str, limit: usize) -> String {
    let total = text.chars().count();
    if total <= limit {
        return text.to_owned();
    }
    const MARK: &str = "\n[… output shortened; see the log …]\n\n";
    let tail = text
        .rfind("\n\n")
        .map(|at| &text[at + 2..])
        .filter(|t| t.chars().count() + MARK.chars().count() < limit / 2)
        .unwrap_or("");
    let head = limit.saturating_sub(MARK.chars().count() + tail.chars().count());
    let mut out: String = text.chars().take(head).collect();
    out.push_str(MARK);
    out.push_str(tail);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::GlobalArgs;

    #[test]
    fn session_names_are_made_plain() {
        let cases: &[(&str, Option<&str>)] = &[
            (
                "8f3a2c1e-1b2c-4d5e-9f00-123456789abc",
                Some("8f3a2c1e-1b2c-4d5e-9f00-123456789abc"),
            ),
            ("a/b c", Some("a_b_c")),
            ("..", None),
            ("../x", Some("_x")),
            ("", None),
        ];
        for (id, want) in cases {
            assert_eq!(plain_session(id).as_deref(), *want, "{id}");
        }
    }

    #[test]
    fn context_takes_cwd_and_the_agent_session_unless_told_otherwise() {
        let ws = tempfile::tempdir().unwrap();
        let other = tempfile::tempdir().unwrap();
        let input = TurnEnd {
            session_id: Some("agent-session".into()),
            cwd: Some(ws.path().into()),
            ..Default::default()
        };
        let env_with = |pairs: &'static [(&'static str, &'static str)]| {
            move |name: &str| {
                pairs
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| std::ffi::OsString::from(v))
            }
        };
        let globals = |args: GlobalArgs, env| args.resolve_with(env_with(env));
        let claude = hookvisor_core::agents::Agent::Claude.spec();
        let ctx = context(
            &globals(GlobalArgs::default(), &[("HOME", "/h")]),
            claude,
            &input,
        )
        .unwrap();
        assert_eq!(ctx.workspace, ws.path().canonicalize().unwrap());
        assert_eq!(ctx.session_id, "agent-session");
        assert_eq!(
            ctx.state_dir,
            PathBuf::from("/h/.discobot/agent-session/hooks")
        );

        let ctx = context(
            &globals(
                GlobalArgs::default(),
                &[("HOME", "/h"), ("DISCOBOT_SESSION_ID", "pod")],
            ),
            claude,
            &input,
        )
        .unwrap();
        assert_eq!(ctx.session_id, "pod");

        let args = GlobalArgs {
            workspace: Some(other.path().into()),
            session: Some("cli".into()),
            ..Default::default()
        };
        let ctx = context(&globals(args, &[("HOME", "/h")]), claude, &input).unwrap();
        assert_eq!(ctx.workspace, other.path().canonicalize().unwrap());
        assert_eq!(ctx.session_id, "cli");
    }

    #[test]
    fn fit_keeps_the_start_and_the_closing_paragraph() {
        let short = "a\n\nb";
        assert_eq!(fit(short, 100), short);
        let long = format!(
            "[Discobot Hook Failed] \"x\"\n\n{}\n\nPlease fix. (Attempt 1/3)",
            "y".repeat(500)
        );
        let got = fit(&long, 200);
        assert_eq!(got.chars().count(), 200);
        assert!(got.starts_with("[Discobot Hook Failed]"));
        assert!(got.ends_with("Please fix. (Attempt 1/3)"));
        let no_paragraph = "z".repeat(300);
        let got = fit(&no_paragraph, 100);
        assert_eq!(got.chars().count(), 100);
    }
}

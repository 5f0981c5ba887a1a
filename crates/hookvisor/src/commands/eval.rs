//! `eval`, `run` and `status`: file-hook evaluation and one-off runs from the command line.

use std::io::{self, Write};

use hookvisor_core::event::Event;
use hookvisor_core::firing::Firing;
use hookvisor_core::{
    Action, EvalOptions, EvalReport, Evaluator, StatusStore, Trigger, discover_workspace,
};

use crate::cli::{self, EvalArgs};
use crate::commands::Globals;
use crate::error::{CliError, CliResult, Exit};
use crate::interrupt::cancel_on_signals;
use crate::turn_client::TurnClient;

/// `hookvisor eval`: prints the re-prompt (or the JSON report); exit 0 only on `pass`.
///
/// With `HOOKVISOR_URL` set (an agent started by `hookvisor serve -- AGENT`) and no
/// `--workspace`, `--state-dir` or `--session` given, the running server evaluates: its file
/// watcher answers quicker than a scan, and its events and dashboard see the turn.
pub fn run(globals: &Globals, args: &EvalArgs) -> CliResult {
    let trigger = match args.trigger {
        cli::Trigger::User => Trigger::User,
        cli::Trigger::Hook => Trigger::Hook,
        cli::Trigger::Loop => Trigger::Loop,
    };
    let server = (!globals.any_given())
        .then(|| TurnClient::from_env(|name| std::env::var(name).ok()))
        .flatten();
    let report = match server {
        Some(client) => client.and_then(|client| client.end_turn(trigger))?,
        None => {
            let ctx = globals.context()?;
            super::refuse_what_others_can_change(&ctx)?;
            let discovery = discover_workspace(&ctx);
            let options = EvalOptions {
                trigger,
                max_retries: discovery.config.max_retries_or(args.max_retries),
                cancel: Some(cancel_on_signals()),
                hook_turns: None,
            };
            super::precommit::ensure_installed(&ctx, &discovery);
            // Rule 8, `eval` ≡ `fire turn.end`: this process exits with the report, and an
            // unawaited hook goes on without it (docs/EVENTS.md §1.3).
            let mut turn = Firing::new(Event::TurnEnd);
            turn.trigger = trigger.as_str().to_owned();
            turn.detach_unawaited = true;
            Evaluator::new(ctx)
                .with_discovery(discovery)
                .end_turn_with(&options, &turn)?
        }
    };
    print_report(&report, args.json)?;
    Ok(match report.action {
        Action::Pass => Exit::Ok,
        _ => Exit::Failed,
    })
}

/// Prints the JSON report, or the message; either way each hook file that does not load gets a
/// line on stderr, so a hook that stopped running never goes unsaid.
fn print_report(report: &EvalReport, json: bool) -> io::Result<()> {
    warn_problems(report);
    let mut out = io::stdout().lock();
    if json {
        serde_json::to_writer(&mut out, report)?;
        writeln!(out)?;
        return Ok(());
    }
    if let Some(message) = &report.message {
        writeln!(out, "{message}")?;
    }
    if let Some(reason) = &report.abort {
        // An `event: turn.end` hook with `on_failure: abort` (docs/EVENTS.md §1.4): no re-prompt.
        eprintln!("hookvisor: a turn.end hook aborted: {reason}");
        return Ok(());
    }
    let failed = report.results.iter().find(|r| !r.success);
    match (report.action, failed) {
        (Action::Failed, Some(result)) => eprintln!(
            "hookvisor: hook '{}' failed with exit code {} (notify_llm is false, so no re-prompt)",
            result.hook_id, result.exit_code
        ),
        (Action::GaveUp, Some(result)) => eprintln!(
            "hookvisor: hook '{}' failed again; giving up after {} re-prompts. It stays pending \
             and runs again at a turn end once a file it matches changes",
            result.hook_id, report.max_attempts
        ),
        (Action::GaveUp, None) => eprintln!(
            "hookvisor: the hook files above still do not load; giving up after {} re-prompts \
             until the next user turn",
            report.max_attempts
        ),
        _ => {}
    }
    Ok(())
}

/// One stderr line per file of the hooks directory that does not load (eval and the adapters).
pub fn warn_problems(report: &EvalReport) {
    for problem in &report.problems {
        eprintln!(
            "hookvisor: hook file does not load, it is not run: {}: {}",
            problem.path.display(),
            problem.kind
        );
    }
}

/// `hookvisor run ID`: runs one hook of any type now and records it.
pub fn run_one(globals: &Globals, id: &str, json: bool) -> CliResult {
    let ctx = globals.context()?;
    super::refuse_what_others_can_change(&ctx)?;
    let discovery = discover_workspace(&ctx);
    // A hook of the event model runs when its event fires: it has a payload and a decision.
    if let Some(hook) = discovery.event_hooks().find(|h| h.id == id) {
        return Err(CliError::usage(format!(
            "'{id}' is a hook of the event {}; `hookvisor run` runs phase-1 hooks only: fire \
             its event with `hookvisor fire {} --data '{{...}}'`",
            hook.spec.event, hook.spec.event
        )));
    }
    let Some(hook) = discovery.get(id) else {
        let known: Vec<&str> = (discovery.hooks.iter())
            .filter(|h| h.phase1)
            .map(|h| h.id.as_str())
            .collect();
        return Err(CliError::usage(format!(
            "no hook '{id}' in {}; known ids: {} (see `hookvisor list`)",
            ctx.hooks_dir().display(),
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        )));
    };
    let result = Evaluator::new(ctx.clone()).run_now(hook, Some(&cancel_on_signals()))?;
    let mut out = io::stdout().lock();
    if json {
        writeln!(
            out,
            "{}",
            serde_json::json!({
                "hookId": result.hook_id,
                "exitCode": result.exit_code,
                "success": result.success,
                "timedOut": result.timed_out,
            })
        )?;
    } else {
        writeln!(
            out,
            "{}: {} (exit code {}{}); log: {}",
            result.hook_id,
            if result.success { "passed" } else { "failed" },
            result.exit_code,
            if result.timed_out { ", timed out" } else { "" },
            ctx.log_path(&result.hook_id).display()
        )?;
    }
    Ok(if result.success {
        Exit::Ok
    } else {
        Exit::Failed
    })
}

/// `hookvisor status`: a table, or status.json as stored. Without a session or state dir
/// given, the latest agent session of the workspace (see [`workspace_session`]).
pub fn status(globals: &Globals, json: bool) -> CliResult {
    let (ctx, found) = match workspace_session(globals)? {
        Some((ctx, found)) => (ctx, Some(found)),
        None => (globals.context()?, None),
    };
    let store = StatusStore::for_context(&ctx);
    let mut out = io::stdout().lock();
    if let Some(found) = found.filter(|_| !json) {
        writeln!(out, "{found}")?;
    }
    if json {
        // Through the store, which reads a bounded regular file and nothing a link points at;
        // unknown fields survive, so this is status.json as stored.
        out.write_all(&store.load()?.to_json())?;
        return Ok(Exit::Ok);
    }
    let status = store.load()?;
    if status.hooks.is_empty() {
        writeln!(out, "no hook has run yet ({})", ctx.status_path().display())?;
        return Ok(Exit::Ok);
    }
    // Phase 1's width, wider only for an event name that needs it (`stage.complete`).
    let width = status
        .hooks
        .values()
        .map(|h| h.kind.as_str().len())
        .max()
        .unwrap_or(0)
        .max(10);
    writeln!(
        out,
        "{:<24} {:<width$} {:<8} {:>4} {:>5} {:>5}  {:<20} PENDING",
        "ID", "TYPE", "RESULT", "EXIT", "RUNS", "FAILS", "LAST RUN"
    )?;
    for (id, hook) in &status.hooks {
        writeln!(
            out,
            "{:<24} {:<width$} {:<8} {:>4} {:>5} {:>5}  {:<20} {}",
            id,
            hook.kind.as_str(),
            hook.last_result.as_str(),
            hook.last_exit_code
                .map_or("-".to_owned(), |c| c.to_string()),
            hook.run_count,
            hook.fail_count,
            hook.last_run_at.as_deref().unwrap_or("-"),
            if status.is_pending(id) { "yes" } else { "" }
        )?;
    }
    Ok(Exit::Ok)
}

/// The agent sessions an adapter recorded for this workspace, when nothing names a session or
/// state dir (no `--session`, `--state-dir`, `$DISCOBOT_SESSION_ID`, `$SESSION_ID`,
/// `$HOOKVISOR_STATE_DIR`): the adapters key their state by the agent's session id, under
/// `~/.discobot/<session>/hooks`, each with a turn log that names its workspace. Returns the
/// context of the latest (by its status.json) and a line naming it and the others, or `None`
/// when there is none (then `default` applies, as for every other command).
fn workspace_session(
    globals: &Globals,
) -> Result<Option<(hookvisor_core::Context, String)>, CliError> {
    use hookvisor_core::TurnLog;
    use std::fs;
    use std::time::SystemTime;

    if globals.names_a_session() {
        return Ok(None);
    }
    let Some(home) = globals.home() else {
        return Ok(None);
    };
    let workspace = globals.context()?.workspace;
    let root = home.join(".discobot");
    let Ok(entries) = fs::read_dir(&root) else {
        return Ok(None);
    };
    let mut sessions: Vec<(SystemTime, String)> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name().into_string().ok()?;
            let state = entry.path().join("hooks");
            let changed =
                fs::symlink_metadata(hookvisor_core::state::StateDir::new(&state).status())
                    .and_then(|m| m.modified())
                    .ok()?;
            let recorded = TurnLog::in_state_dir(&state).workspace()?;
            (recorded == workspace).then_some((changed, name))
        })
        .collect();
    sessions.sort_by(|a, b| b.cmp(a));
    let Some((_, latest)) = sessions.first() else {
        return Ok(None);
    };
    let ctx = globals.context_of_session(latest)?;
    let mut line = format!(
        "session {latest} ({}; state in {})",
        if sessions.len() == 1 {
            "the one agent session of this workspace".to_owned()
        } else {
            format!(
                "the latest of {} agent sessions of this workspace",
                sessions.len()
            )
        },
        ctx.state_dir.display()
    );
    if sessions.len() > 1 {
        let others: Vec<&str> = sessions[1..].iter().map(|(_, n)| n.as_str()).collect();
        line.push_str(&format!(
            "\nothers, newest first: {}; pick one with --session ID",
            others.join(", ")
        ));
    }
    Ok(Some((ctx, line)))
}

//! The event dispatcher: one event fired, its hooks selected, run in order and judged, and the
//! reply (EVENTS.md §1.4, §1.6, §3, §5 rules 1, 4, 5, 6, 15, 19, 20).
//!
//! [`fire`] follows these steps, written once here:
//!
//! 1. **Selection** (§1.4). The hooks are [`Discovery::event_hooks`] whose `spec.event` is the
//!    fired event, in discovery (file-name) order. Phase-1 hooks ([`Discovery::hooks`]) are not
//!    run here: `turn.end` (≡ `eval`, rule 8), `session.start` and `commit.before` keep their
//!    phase-1 runners, and firing one of those events runs only its event hooks until the later
//!    wiring joins the two.
//! 2. **Tool** (§5 rule 6). A hook with `tool:` runs only when `data.tool_name` is a string it
//!    matches: `*` matches every call (also one without a tool name), a `|`-list matches its
//!    exact names. A regex matcher never matches: the core has no regex engine yet, so such a
//!    hook is skipped (with a warning in the log) rather than run on a guess.
//! 3. **Pattern**. A hook with `pattern:` runs only when one of the firing's `files` matches it;
//!    an event without files runs no hook that has a pattern.
//! 4. **Passes** (§1.4). Every `pre` hook runs, then every `post` hook. The first block or abort
//!    ends the `pre` pass ([`Outcome::ends_pre_pass`]); `post` hooks still run, and see the
//!    decision so far as `${decision}`. Only a `pre` hook of a gate can block (§1.5).
//! 5. **When** (§4.2). A hook's `when:` is evaluated just before its run, over the payload
//!    ([`Payload::lookup`]). False skips the hook (nothing is recorded). An evaluation error
//!    *fails* the hook: its message is the run's output (stderr, exit 1) and is judged as a
//!    failure, never read as true or false.
//! 6. **Run** (§4.1, rule 19). Each run gets a fresh directory under `<state>/fire/` for the
//!    payload's files ([`Payload::environment`]); the event JSON is the child's stdin; stdout and
//!    stderr are captured apart for the judge. A script hook runs through [`run_hook`]; `argv:`
//!    is expanded by [`template::expand_argv`] and run without a shell; `run:` is
//!    `sh -c SCRIPT` after every referenced name was checked to exist (rule 20). An unknown
//!    name or an empty argv is a failed run, never an empty value. The timeout is the hook's.
//! 7. **Retry and judgment** (§5 rule 1). A run the judge wants re-run (`on_failure: retry`) is
//!    re-run up to `retries` times, `retry_delay` apart (a [`CancelToken`] wait, so a cancel
//!    ends it); the last run is judged with [`Judge`] and folded into the [`Outcome`]. Each run
//!    is recorded in `status.json` with its `event`, `source` and `action`.
//! 8. **Pipe** (§1.6). `pipe_output: true`, or `failure` when the last run failed, appends the
//!    run's output (stdout, then stderr) to the [`ContextBuffer`]. A hook's own
//!    `additionalContext` goes straight to the reply's `context`.
//! 9. **Drain** (§5 rule 5). `turn.start` drains the buffer into the reply's `context` after its
//!    own hooks ran, so what they piped is included.
//! 10. **Reply** (§5 rule 4). `{event, decision, reason, context, results, attempt,
//!     maxAttempts}`; each result is `{hookId, exitCode, success, timedOut, files, blocked}`,
//!     the phase-1 fields plus `blocked`. `attempt`/`maxAttempts` are `null`: the loop guard of
//!     `turn.end`/`session.stop` belongs to the later wiring.
//!
//! Unawaited hooks (`await: false`) are awaited here as well: a CLI has nowhere to leave them.
//!
//! [`Discovery::event_hooks`]: crate::Discovery::event_hooks
//! [`Discovery::hooks`]: crate::Discovery::hooks
//! [`Outcome::ends_pre_pass`]: crate::decision::Outcome::ends_pre_pass
//! [`Outcome`]: crate::decision::Outcome
//! [`Payload::lookup`]: crate::payload::Payload::lookup
//! [`Payload::environment`]: crate::payload::Payload::environment
//! [`run_hook`]: crate::run_hook
//! [`template::expand_argv`]: crate::template::expand_argv
//! [`CancelToken`]: crate::CancelToken
//! [`Judge`]: crate::decision::Judge
//! [`ContextBuffer`]: crate::context_buffer::ContextBuffer

#![forbid(unsafe_code)]

use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime};

use serde_json::{Map, Value as Json, json};

use crate::context::Context;
use crate::context_buffer::{ContextBuffer, ContextBufferError, MAX_CONTEXT_CHARS};
use crate::decision::{FinishedRun, Judge, Judgment, Outcome, Phase, Reply, Verdict};
use crate::discover::Discovery;
use crate::event::{Command, Event, HookAction, PipeOutput, ToolMatcher};
use crate::exec::{
    CancelToken, Capture, ExecError, Invocation, RunOptions, RunOutcome, run_command, run_hook,
};
use crate::hook::Hook;
use crate::payload::Payload;
use crate::status::{StatusError, StatusStore};
use crate::template;

/// Bytes of each stream kept for the judge: a decision or reason longer than this is no use to
/// an agent, whose own cap is 10,000 characters.
const CAPTURE_LIMIT: usize = 1024 * 1024;

/// One event to fire: what happened, and the variables its hooks see (EVENTS.md §5 rule 19).
#[derive(Debug, Clone)]
pub struct Firing {
    /// The event.
    pub event: Event,
    /// The event's data object (`--data`); each key is also a template variable.
    pub data: Map<String, Json>,
    /// Who fired it: `user`, `hook` or `loop`.
    pub trigger: String,
    /// The session id; `None` uses the context's.
    pub session: Option<String>,
    /// The loop's turn number, when a loop fires.
    pub iteration: Option<u64>,
    /// The pipeline stage, when there is one.
    pub stage: Option<String>,
    /// The workspace-relative paths the event concerns (`pattern:` matches these).
    pub files: Option<Vec<PathBuf>>,
    /// Stops a running hook and a retry wait when cancelled.
    pub cancel: Option<CancelToken>,
}

impl Firing {
    /// A firing of `event` by the user, with empty data and nothing else set.
    pub fn new(event: Event) -> Firing {
        Firing {
            event,
            data: Map::new(),
            trigger: "user".to_owned(),
            session: None,
            iteration: None,
            stage: None,
            files: None,
            cancel: None,
        }
    }
}

/// Why an event could not be fired to the end. A hook that fails is no error: it is judged.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FireError {
    /// A run's directory under the state dir could not be made.
    #[error(
        "cannot create the run directory {}: {source}; make the state dir writable or pass \
         --state-dir",
        path.display()
    )]
    RunDir {
        /// The directory.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// A hook could not be started at all (its log, its stdin, the system).
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// `status.json` could not be updated.
    #[error(transparent)]
    Status(#[from] StatusError),
    /// The context buffer could not be appended to or drained.
    #[error(transparent)]
    Buffer(#[from] ContextBufferError),
}

/// Fires `firing.event`: runs its event hooks by the steps of the [module documentation](self)
/// and returns the reply.
pub fn fire(ctx: &Context, discovery: &Discovery, firing: &Firing) -> Result<Reply, FireError> {
    let cancel = firing.cancel.clone().unwrap_or_default();
    let buffer = ContextBuffer::new(&ctx.state());
    let store = StatusStore::for_context(ctx);
    let mut outcome = Outcome::new();
    let mut results = Vec::new();
    for phase in [Phase::Pre, Phase::Post] {
        for hook in discovery.event_hooks.iter().filter(|h| selected(h, firing)) {
            if hook.spec.phase != phase {
                continue;
            }
            if phase == Phase::Pre && outcome.ends_pre_pass() {
                break;
            }
            let decision = (phase == Phase::Post).then(|| outcome.decision().as_str());
            let payload = payload(ctx, firing, decision);
            let Some(done) = run_judged(ctx, hook, firing, &payload, &store, &cancel)? else {
                continue;
            };
            pipe(&buffer, hook, &done)?;
            results.push(result_json(hook, firing, &done));
            outcome.push(done.judgment);
        }
    }
    let mut reply = outcome.into_reply(firing.event.to_string(), results, None);
    if firing.event == Event::TurnStart {
        let drained = buffer.drain(MAX_CONTEXT_CHARS)?;
        if !drained.text.is_empty() {
            reply.context.push(drained.text);
        }
    }
    Ok(reply)
}

/// Steps 1–3: the hook binds this event and its `tool` and `pattern` match.
fn selected(hook: &Hook, firing: &Firing) -> bool {
    if hook.spec.event != firing.event {
        return false;
    }
    let tool_name = firing.data.get("tool_name").and_then(Json::as_str);
    let tool_ok = match &hook.spec.tool {
        None | Some(ToolMatcher::All) => true,
        Some(ToolMatcher::Names(names)) => tool_name.is_some_and(|t| names.iter().any(|n| n == t)),
        Some(ToolMatcher::Regex(text)) => {
            tracing::warn!(
                "{}: tool regex '{text}' is not supported yet; the hook does not run",
                hook.file_name()
            );
            false
        }
    };
    let pattern_ok = hook.pattern.is_none()
        || firing
            .files
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|f| hook.matches(f));
    tool_ok && pattern_ok
}

/// The payload of one run; `decision` is `${decision}` for the `post` pass.
fn payload(ctx: &Context, firing: &Firing, decision: Option<&str>) -> Payload {
    let session = firing.session.as_deref().unwrap_or(&ctx.session_id);
    let mut payload = Payload::new(
        firing.event.to_string(),
        session,
        ctx.workspace.clone(),
        firing.trigger.clone(),
    )
    .data(firing.data.clone());
    if let Some(iteration) = firing.iteration {
        payload = payload.iteration(iteration);
    }
    if let Some(stage) = &firing.stage {
        payload = payload.stage(stage.clone());
    }
    if let Some(files) = &firing.files {
        payload = payload.files(files.iter().map(|f| f.as_os_str().to_owned()));
    }
    if let Some(decision) = decision {
        payload = payload.text_var("decision", decision);
    }
    payload
}

/// One hook's last run and its judgment.
struct Done {
    judgment: Judgment,
    run: FinishedRun,
}

/// Steps 5–7 for one hook: `None` when its `when` is false.
fn run_judged(
    ctx: &Context,
    hook: &Hook,
    firing: &Firing,
    payload: &Payload,
    store: &StatusStore,
    cancel: &CancelToken,
) -> Result<Option<Done>, FireError> {
    let mut judge = Judge::new(
        firing.event.is_gate(),
        hook.spec.phase,
        hook.spec.block_on,
        hook.spec.on_failure,
    );
    judge.reason_from = hook.spec.reason_from;
    let mut retries_left = hook.spec.retries;
    loop {
        let started = Instant::now();
        let run = match refusal(hook, payload) {
            Refusal::Skip => return Ok(None),
            Refusal::Fail(message) => {
                let run = unfinished(ctx, hook, &message);
                store.update(|status| {
                    let entry = status.entry(hook, ctx);
                    entry.record_unfinished(&message, started.elapsed(), SystemTime::now());
                    label(entry, hook);
                })?;
                run
            }
            Refusal::Run => match run_once(ctx, hook, firing, payload, cancel)? {
                Ran::Finished(outcome) => {
                    store.update(|status| {
                        let entry = status.entry(hook, ctx);
                        entry.record(&outcome, SystemTime::now());
                        label(entry, hook);
                    })?;
                    finished(ctx, hook, &outcome)
                }
                Ran::Refused(message) => {
                    let run = unfinished(ctx, hook, &message);
                    store.update(|status| {
                        let entry = status.entry(hook, ctx);
                        entry.record_unfinished(&message, started.elapsed(), SystemTime::now());
                        label(entry, hook);
                    })?;
                    run
                }
            },
        };
        let judgment = judge.judge(&run);
        for warning in &judgment.warnings {
            tracing::warn!("{}: {warning}", hook.file_name());
        }
        if judgment.wants_retry() && retries_left > 0 && !cancel.is_cancelled() {
            retries_left -= 1;
            if cancel.wait_for(hook.spec.retry_delay) {
                return Ok(Some(Done { judgment, run }));
            }
            continue;
        }
        return Ok(Some(Done { judgment, run }));
    }
}

/// The status fields of the event model (EVENTS.md §2.1, §5 rule 10).
fn label(entry: &mut crate::status::HookStatus, hook: &Hook) {
    entry.event = Some(hook.spec.event.to_string());
    entry.source = Some(source_of(hook));
    entry.action = Some(hook.spec.action.as_str().to_owned());
}

/// Where a hook is declared, `relative/path:line`: its file in the hooks dir, line 1, where
/// both a script and a declarative file start (the same as `list --json`).
fn source_of(hook: &Hook) -> String {
    format!(".discobot/hooks/{}:1", hook.file_name())
}

/// What is decided about a hook before anything runs.
enum Refusal {
    /// `when` is false.
    Skip,
    /// It fails without running, with this message as its output.
    Fail(String),
    /// It runs.
    Run,
}

/// Step 5: the hook's `when`, evaluated now.
fn refusal(hook: &Hook, payload: &Payload) -> Refusal {
    let Some(condition) = &hook.spec.when else {
        return Refusal::Run;
    };
    let lookup = |path: &[&str]| payload.lookup(path);
    match condition.eval(&lookup) {
        Ok(true) => Refusal::Run,
        Ok(false) => Refusal::Skip,
        Err(err) => Refusal::Fail(err.to_string()),
    }
}

/// How a run ended.
enum Ran {
    /// It ran (or its program could not start, which exec reports as an outcome).
    Finished(RunOutcome),
    /// It was refused before starting: an unknown name or an empty argv.
    Refused(String),
}

/// Step 6: one run of the hook's action in a fresh run directory.
fn run_once(
    ctx: &Context,
    hook: &Hook,
    firing: &Firing,
    payload: &Payload,
    cancel: &CancelToken,
) -> Result<Ran, FireError> {
    let parent = ctx.state().root().join("fire");
    fs::create_dir_all(&parent).map_err(|source| FireError::RunDir {
        path: parent.clone(),
        source,
    })?;
    // Removed when the run is over: its files are the payload, kept in the log's place by
    // nobody; a fresh name per run lets concurrent `fire`s share the state dir.
    let dir = tempfile::Builder::new()
        .prefix(&format!("{}-", hook.id))
        .tempdir_in(&parent)
        .map_err(|source| FireError::RunDir {
            path: parent.clone(),
            source,
        })?;
    let run_dir_error = |source| FireError::RunDir {
        path: dir.path().to_owned(),
        source,
    };
    let env = payload.environment(dir.path()).map_err(run_dir_error)?;
    let stdin = dir.path().join("stdin.json");
    fs::write(&stdin, payload.stdin_json()).map_err(run_dir_error)?;
    let options = RunOptions {
        cancel: Some(cancel.clone()),
        extra_env: env.clone(),
        stdin: Some(stdin),
        capture: Capture::Separate {
            limit: CAPTURE_LIMIT,
        },
        ..RunOptions::default()
    };
    let HookAction::Command(command) = &hook.spec.action;
    let (program, args): (PathBuf, Vec<OsString>) = match command {
        Command::Script => {
            let files = firing.files.as_deref().unwrap_or_default();
            return Ok(Ran::Finished(run_hook(ctx, hook, files, &options)?));
        }
        Command::Argv(argv) => {
            let expanded = match template::expand_argv(argv, |n| payload.template_value(n)) {
                Ok(expanded) => expanded,
                Err(err) => return Ok(Ran::Refused(format!("argv: {err}"))),
            };
            let mut expanded = expanded.into_iter();
            let Some(program) = expanded.next().filter(|p| !p.is_empty()) else {
                return Ok(Ran::Refused("argv: the program expands to nothing".into()));
            };
            (PathBuf::from(program), expanded.collect())
        }
        Command::Run(script) => {
            // Rule 20: an unknown name fails the run; the shell would read it as empty.
            if let Some(name) = script
                .references()
                .iter()
                .find(|n| payload.template_value(n).is_none())
            {
                return Ok(Ran::Refused(format!(
                    "run: unknown template variable ${{{name}}}; set it in --data or fix the name"
                )));
            }
            (
                PathBuf::from("/bin/sh"),
                vec!["-c".into(), script.script().into()],
            )
        }
    };
    let mut vars = vec![
        ("DISCOBOT_SESSION_ID".into(), ctx.session_id.clone().into()),
        ("DISCOBOT_WORKSPACE".into(), ctx.workspace.clone().into()),
        ("HOOKVISOR_HOOK_ID".into(), hook.id.clone().into()),
        ("HOOKVISOR_HOOK_PATH".into(), hook.path.clone().into()),
    ];
    vars.extend(env);
    let invocation = Invocation {
        program,
        args,
        env: vars,
        // The API token is the server's secret; a changed list belongs to another run.
        env_remove: vec![
            "HOOKVISOR_TOKEN".into(),
            "DISCOBOT_CHANGED_FILES".into(),
            "HOOKVISOR_CHANGED_FILES_NUL".into(),
        ],
        cwd: ctx.workspace.clone(),
        log_path: ctx.log_path(&hook.id),
        timeout: hook.timeout,
    };
    Ok(Ran::Finished(run_command(&invocation, &options)?))
}

/// The judge's view of a finished run.
fn finished(ctx: &Context, hook: &Hook, outcome: &RunOutcome) -> FinishedRun {
    let captured = outcome.captured.clone().unwrap_or_default();
    FinishedRun {
        exit_code: outcome.exit_code,
        timed_out: outcome.timed_out.then_some(hook.timeout),
        stdout: captured.stdout,
        stderr: captured.stderr,
        log_path: Some(ctx.log_path(&hook.id)),
    }
}

/// A run that failed before starting: exit 1 with `message` on stderr, also written to its log
/// so that `outputPath` shows why.
fn unfinished(ctx: &Context, hook: &Hook, message: &str) -> FinishedRun {
    let log = ctx.log_path(&hook.id);
    if let Err(err) = write_log(&log, message) {
        tracing::warn!("cannot write {}: {err}", log.display());
    }
    FinishedRun {
        exit_code: 1,
        timed_out: None,
        stdout: Vec::new(),
        stderr: format!("{message}\n").into_bytes(),
        log_path: Some(log),
    }
}

fn write_log(path: &Path, message: &str) -> io::Result<()> {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir)?;
    }
    fs::write(path, format!("{message}\n"))
}

/// Step 8: the run's output into the context buffer when `pipe_output` asks.
fn pipe(buffer: &ContextBuffer, hook: &Hook, done: &Done) -> Result<(), FireError> {
    let failed = done.run.timed_out.is_some() || done.run.exit_code != 0;
    let wanted = match hook.spec.pipe_output {
        PipeOutput::Never => false,
        PipeOutput::Always => true,
        PipeOutput::Failure => failed,
    };
    if wanted {
        let mut text = String::from_utf8_lossy(&done.run.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&done.run.stderr));
        buffer.append(&hook.id, &text)?;
    }
    Ok(())
}

/// One entry of the reply's `results`: the phase-1 fields plus `blocked`.
fn result_json(hook: &Hook, firing: &Firing, done: &Done) -> Json {
    let files: Vec<String> = firing
        .files
        .as_deref()
        .unwrap_or_default()
        .iter()
        .map(|f| f.to_string_lossy().into_owned())
        .collect();
    json!({
        "hookId": hook.id,
        "exitCode": done.run.exit_code,
        "success": done.run.timed_out.is_none() && done.run.exit_code == 0,
        "timedOut": done.run.timed_out.is_some(),
        "files": files,
        "blocked": matches!(done.judgment.verdict, Verdict::Block { .. }),
    })
}

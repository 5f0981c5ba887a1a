//! `loop`: drives a headless agent (docs/EVENTS.md §3.2); the driver is hookvisor-core's
//! `agent_loop`, this is its arguments, its signals and its progress line.

use std::fs;
use std::io::IsTerminal;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

use hookvisor_core::CancelToken;
use hookvisor_core::agent_loop::{
    Ending, LoopOptions, LoopStage, Progress, new_session_id, run_loop,
};
use hookvisor_core::discover_workspace;
use hookvisor_core::spawn::PipelineSpec;
use nix::sys::signal::{SigSet, Signal};

use crate::cli::LoopArgs;
use crate::commands::Globals;
use crate::error::{CliError, CliResult, Exit};

/// The exit status of an abort (§3), as `fire`'s.
const ABORT_EXIT: i32 = 3;

/// `hookvisor loop [OPTS] -- AGENT_CMD…`: exits 0 done, 1 limit, block or failures, 3 abort,
/// 128+n on signal n.
pub fn run(globals: &Globals, args: &LoopArgs) -> CliResult {
    let mut options = options(args)?;
    // A loop is a session of its own: the sandbox's or an enclosing loop's id (in the
    // environment) would share their state dir, so only `--session` names it.
    let session = globals.args.session.clone().unwrap_or_else(new_session_id);
    let mut ctx = globals.context_of_session(&session)?;
    if globals.args.state_dir.is_none()
        && let Some(iteration) = enclosing_iteration()
    {
        ctx.state_dir = ctx
            .state()
            .children_dir()
            .join(format!("loop-{iteration}-{session}"));
    }
    super::refuse_what_others_can_change(&ctx)?;
    if let Some(pipeline) = &args.pipeline {
        pipeline_options(&mut options, &ctx.workspace, pipeline, args)?;
    }
    let discovery = discover_workspace(&ctx);
    for problem in &discovery.problems {
        eprintln!("hookvisor: warning: {problem}");
    }
    // As `fire turn.end` does: every iteration ends with one.
    super::precommit::ensure_installed(&ctx, &discovery);
    let signal = Arc::new(AtomicI32::new(0));
    options.end_cancel = CancelToken::new();
    options.cancel = cancel_on_signals(Arc::clone(&signal), options.end_cancel.clone());
    // `main` made this process a child subreaper, and it runs nothing but the loop.
    options.kill_strays = true;
    let terminal = std::io::stderr().is_terminal();
    let report = run_loop(&ctx, &options, |progress| {
        if terminal {
            print_progress(progress, options.max_iterations);
        }
    })
    .map_err(|e| CliError::failed(format!("loop: {e}")));
    // Whatever the ending, nothing the loop started outlives it.
    hookvisor_core::leftovers::kill_children();
    let report = report?;
    match &report.reason {
        Some(reason) => eprintln!(
            "hookvisor: loop ended ({}): {reason}",
            report.ending.as_str()
        ),
        None if report.ending != Ending::Done => eprintln!(
            "hookvisor: loop ended ({}) after {} iteration(s); the agent's output is in {}",
            report.ending.as_str(),
            report.iterations,
            ctx.state().loop_dir().display()
        ),
        None => {}
    }
    if report.discarded > 0 {
        eprintln!(
            "hookvisor: session.end discarded {} context entr{} no iteration delivered",
            report.discarded,
            if report.discarded == 1 { "y" } else { "ies" }
        );
    }
    // A signal is the exit status whenever one arrived, even during `session.end`.
    Ok(match (signal.load(Ordering::SeqCst), report.ending) {
        (n, _) if n != 0 => Exit::Status(128 + n),
        (_, Ending::Done) => Exit::Ok,
        (_, Ending::Aborted) => Exit::Status(ABORT_EXIT),
        (_, Ending::Interrupted) => Exit::Status(128 + Signal::SIGTERM as i32),
        _ => Exit::Failed,
    })
}

/// The driver's options from the command line; a prompt file that cannot be read is a usage
/// error naming it.
fn options(args: &LoopArgs) -> Result<LoopOptions, CliError> {
    // Every iteration would fail the same way, three times, before saying so.
    if let Some(program) = args.agent.first()
        && !is_program(Path::new(program))
    {
        return Err(CliError::usage(format!(
            "AGENT_CMD: {} is not an executable file nor found in PATH; give the agent's path \
             or install it",
            program.to_string_lossy()
        )));
    }
    let mut agent = args.agent.clone();
    // A relative path is the caller's (the check above), but the agent runs in the workspace.
    if let Some(program) = agent.first_mut()
        && program.as_bytes().contains(&b'/')
        && let Ok(absolute) = std::path::absolute(Path::new(program))
    {
        *program = absolute.into_os_string();
    }
    let mut options = LoopOptions::new(agent);
    options.prompt = match (&args.prompt, &args.prompt_file) {
        (Some(text), _) => text.clone(),
        (None, Some(path)) => fs::read_to_string(path).map_err(|e| {
            CliError::usage(format!(
                "--prompt-file {}: {e}; name a readable UTF-8 file, or pass --prompt TEXT",
                path.display()
            ))
        })?,
        (None, None) => String::new(),
    };
    options.until = args.until.clone();
    options.max_iterations = args.max_iterations;
    options.turn_timeout = args.turn_timeout.map(Duration::from_secs);
    options.stage = args.stage.clone();
    if let Some(owner) = &args.owner {
        // An owner no source has would leave every file read twice, silently (a typo).
        let owners: Vec<&str> = hookvisor_core::config::Source::ALL
            .into_iter()
            .filter(|s| {
                !matches!(
                    s,
                    hookvisor_core::config::Source::Discobot
                        | hookvisor_core::config::Source::Global
                )
            })
            .map(hookvisor_core::config::Source::as_str)
            .collect();
        if !owners.contains(&owner.as_str()) {
            return Err(CliError::usage(format!(
                "--owner: '{owner}' is no tool whose hook files hookvisor reads; use one of {}",
                owners.join(", ")
            )));
        }
        options.owner = owner.clone();
    }
    Ok(options)
}

/// `--pipeline FILE|NAME` (docs/EVENTS.md §5 rule 18): the file's hooks and stages, and its
/// prompt and `until` where the command line gives none. A file that cannot be used is a
/// usage error naming its line.
fn pipeline_options(
    options: &mut LoopOptions,
    workspace: &Path,
    pipeline: &Path,
    args: &LoopArgs,
) -> Result<(), CliError> {
    let bare = pipeline.components().count() == 1
        && !pipeline.as_os_str().as_bytes().contains(&b'.')
        && !pipeline.exists();
    let path = match bare {
        true => PipelineSpec::path_of(workspace, &pipeline.to_string_lossy()),
        false => std::path::absolute(pipeline).unwrap_or_else(|_| pipeline.to_owned()),
    };
    let spec =
        PipelineSpec::load(&path).map_err(|e| CliError::usage(format!("--pipeline: {e}")))?;
    if args.prompt.is_none() && args.prompt_file.is_none() {
        options.prompt = spec.prompt.unwrap_or_default();
    }
    if args.until.is_none() {
        options.until = spec.until;
    }
    options.stages = (spec.stages.into_iter())
        .filter(|s| args.stage.as_ref().is_none_or(|only| *only == s.name))
        .map(|s| LoopStage {
            name: s.name,
            file: s.file,
            max_iterations: s.runs,
        })
        .collect();
    if let Some(stage) = &args.stage
        && options.stages.is_empty()
        && PipelineSpec::load(&path).is_ok_and(|s| !s.stages.is_empty())
    {
        return Err(CliError::usage(format!(
            "--stage {stage}: {} has no stage of that name",
            path.display()
        )));
    }
    options.pipeline = Some(path);
    Ok(())
}

/// Whether `program` is an executable file: a path as given, a bare name in `$PATH` (as the
/// executor will look it up).
fn is_program(program: &Path) -> bool {
    let executable = |path: &Path| {
        fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.components().count() != 1 || program.as_os_str().as_bytes().contains(&b'/') {
        return executable(program);
    }
    std::env::var_os("PATH")
        .is_some_and(|path| std::env::split_paths(&path).any(|dir| executable(&dir.join(program))))
}

/// The iteration of the loop whose agent runs this one (`$HOOKVISOR_ITERATION`), if any.
fn enclosing_iteration() -> Option<u64> {
    std::env::var("HOOKVISOR_ITERATION").ok()?.parse().ok()
}

/// How long `session.end`'s hooks may run after the first signal: a container stopped by a
/// signal is killed some seconds later (`docker stop`: 10 s), and the hooks should end first.
const INTERRUPTED_END_BUDGET: Duration = Duration::from_secs(5);

/// SIGINT, SIGTERM and SIGHUP cancel the loop (the driver then kills the agent's process
/// group and fires `session.end`); a second one, or [`INTERRUPTED_END_BUDGET`] after the
/// first, cancels `end`, stopping `session.end`'s hooks. The first signal's number is kept
/// for the exit status. The signals are blocked
/// before any thread starts, so only the waiting thread receives them; the executor clears
/// the mask in the agent and every hook.
fn cancel_on_signals(received: Arc<AtomicI32>, end: CancelToken) -> CancelToken {
    let token = CancelToken::new();
    let mut signals = SigSet::empty();
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        signals.add(signal);
    }
    if signals.thread_block().is_ok() {
        let waiter = token.clone();
        std::thread::spawn(move || {
            while let Ok(signal) = signals.wait() {
                if waiter.is_cancelled() {
                    end.cancel();
                } else {
                    received.store(signal as i32, Ordering::SeqCst);
                    waiter.cancel();
                    let budget = end.clone();
                    // Wakes at once when a second signal cancels the token first.
                    std::thread::spawn(move || {
                        if !budget.wait_for(INTERRUPTED_END_BUDGET) {
                            budget.cancel();
                        }
                    });
                }
            }
        });
    }
    token
}

/// `hookvisor loop: iteration 3/20, 12.4s, turn.end: allow` on stderr.
fn print_progress(progress: &Progress, max: u64) {
    eprintln!(
        "hookvisor loop: iteration {}/{max}, {:.1}s, {}",
        progress.iteration,
        progress.elapsed.as_secs_f64(),
        progress.decision
    );
}

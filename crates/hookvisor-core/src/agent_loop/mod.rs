//! `hookvisor loop`: a headless agent driven iteration by iteration, with the events of
//! docs/EVENTS.md §3.2 fired around it (§5 rules 5, 12, 18).
//!
//! [`run_loop`] follows these rules, written once here:
//!
//! 1. **Start.** `<state>/loop/` is opened once (a symbolic link there is refused) and every
//!    file of the loop is reached through that handle, so a link the agent puts in its place
//!    later moves nothing; `<state>/loop/lock` is locked for the loop's life (a second loop in
//!    the state dir is [`LoopError::Busy`]). Any `done` left by an earlier loop is removed,
//!    `session.json` is written (`endedAt: null`), and `session.start` fires. Every event the loop fires has the
//!    trigger `loop`, so the phase-1 loop guard never stops it: the loop's own limits do.
//! 2. **Iteration** `i` (from 1): `turn.start` fires and drains the context buffer (rule 5).
//!    A block ends the loop ([`Ending::Blocked`]). The agent then runs with the prompt of
//!    rule 5, in its own process group, in the workspace, with the variables of rule 6, its
//!    output streamed to `<state>/loop/<i>.log`, stopped after the turn timeout.
//! 3. **Success** (exit 0): `turn.end` fires (the end-of-turn evaluation: file hooks and
//!    `event: turn.end` hooks). A block re-prompts: its reason goes into the next prompt. Else
//!    the loop is done when `$HOOKVISOR_DONE` is a regular file or `--until` (`sh -c` in the
//!    workspace, log `<state>/loop/until.log`, stopped after the turn timeout, else after
//!    [`UNTIL_TIMEOUT`]) exits 0; then `session.stop` fires, and a block is one more
//!    iteration with its reason, the done file removed so the agent must say so again.
//! 4. **Failure** (non-zero exit, timeout, death by a signal): `error` fires with `data`
//!    `{status, error, log, timedOut}` (`error` = the last 20 lines of the agent's output).
//!    What its hooks pipe (`pipe_output`) is the *recovery prompt*: it replaces the task prompt
//!    for the next iteration only (context still first); nothing piped keeps the task prompt.
//!    Three failures in a row end the loop ([`Ending::Failures`]). No `turn.end` fires.
//! 5. **Prompt** = the drained context (oldest first), then the last block reason, then the
//!    task or recovery prompt, separated by blank lines. It is the agent's stdin, or, when an
//!    argument of the agent command is exactly `{prompt}`, that one argument (never split,
//!    never given to a shell), with stdin on `/dev/null`; one longer than
//!    [`MAX_PROMPT_ARGUMENT`] or holding a NUL is [`LoopError::PromptArgument`].
//! 6. **Agent environment**: `HOOKVISOR_LOOP=1` (an adapter's turn-end hook can tell that the
//!    loop runs the end-of-turn evaluation itself), `HOOKVISOR_SESSION`, `HOOKVISOR_ITERATION`, `HOOKVISOR_DONE` (a
//!    path: create it when done), `HOOKVISOR_STATE_DIR` and `DISCOBOT_WORKSPACE`, so that a
//!    `hookvisor fire task.complete` the agent runs lands in this loop's state dir and runs the
//!    workspace's hooks, and `HOOKVISOR_LOOP_OWNER` (the owner, whose own hook file every
//!    discovery of the loop and of its agent then leaves to it, docs/EVENTS.md §5 rule 12); `HOOKVISOR_URL`, `HOOKVISOR_SOCKET` and `HOOKVISOR_TOKEN` are removed
//!    (the loop hosts no server, and a server's would take the agent's events elsewhere).
//! 7. **Limit**: after [`LoopOptions::max_iterations`] iterations without done, the loop ends
//!    ([`Ending::MaxIterations`]); a block in the last one is delivered by rule 8 and
//!    reported. An abort from any event's hooks ends it at once ([`Ending::Aborted`]).
//! 8. **End.** After done or the limit, leftover context in the buffer, or a block reason no
//!    iteration received, is sent to the agent alone (iteratr's final delivery: the pending
//!    buffer, then the block reason; no `turn.start` or `turn.end` fires and the task prompt
//!    is not sent again), then `stage.complete` fires when a stage is set. Whatever the ending, `session.end` fires with `data.reason`
//!    (`Ending::as_str`, or `error` when the loop itself failed, [`LoopError`]), which
//!    discards what is still in the buffer into the session's log (counted in
//!    [`LoopReport::discarded`]), and
//!    `session.json` gets `endedAt`, `iterations` and `reason`.
//! 9. **Interrupt.** When [`LoopOptions::cancel`] is cancelled (the command's first signal),
//!    the running agent's process group or hook is killed, nothing else starts, and
//!    `session.end` fires with `data.reason: interrupted` ([`Ending::Interrupted`]) on
//!    [`LoopOptions::end_cancel`], which stops its hooks in turn.
//! 10. **Leftovers.** With [`LoopOptions::kill_strays`] (a child subreaper running nothing but
//!    the loop), after every agent, `--until` and event every child the process still has is
//!    killed and reaped: what a run left behind, in its group or not, marked or not, never
//!    reaches the next step, and no zombie piles up; the detached runners of unawaited hooks
//!    (docs/EVENTS.md §1.3, `crate::fire`) are spared: they outlive the step on purpose, and a
//!    thread of this process reaps each.
//! 11. **Pipeline.** With [`LoopOptions::pipeline`] (`--pipeline`, a pipeline file of
//!    `crate::spawn`'s format) the hooks that run are that file's and the current stage's own
//!    file's (agent-pipelines' `pipeline.yaml` and `loop.yaml`, with the global kinds), no
//!    other hook of the workspace: a spawned child is such a loop and runs its own pipeline's
//!    hooks. Its [`LoopOptions::stages`] run one after the other, each for its own
//!    iterations at most, with `${stage}` its name: `session.start` once (in the first stage),
//!    then per stage rules 2 to 7, its final delivery and `stage.complete`, the done file
//!    removed between stages. An abort of `stage.complete` (a rejected approval) ends the loop
//!    [`Ending::Aborted`] with its reason; the last stage's ending is the loop's.
//! 12. **Variables** of every event of the loop (agent-pipelines' names, docs/EVENTS.md §5 rule 14):
//!    `${max_iterations}` (the stage's), `${next_stage}` (empty in the last stage),
//!    `${progress}` (`<state>/loop/progress.md`, made empty at the start, the agent's to
//!    write), `${status}` (`<state>/status.json`) and `${ctx}` (`<state>/loop/context.json`:
//!    session, stage, next stage, iteration, limit and those paths, written before each
//!    event). A key of the event's data wins a name (`error`'s `status`).
//!
//! [`run_loop`]: crate::agent_loop::run_loop
//! [`LoopOptions::pipeline`]: crate::agent_loop::LoopOptions::pipeline
//! [`LoopOptions::stages`]: crate::agent_loop::LoopOptions::stages
//! [`Ending::Blocked`]: crate::agent_loop::Ending::Blocked
//! [`Ending::Failures`]: crate::agent_loop::Ending::Failures
//! [`Ending::MaxIterations`]: crate::agent_loop::Ending::MaxIterations
//! [`Ending::Aborted`]: crate::agent_loop::Ending::Aborted
//! [`Ending::Interrupted`]: crate::agent_loop::Ending::Interrupted
//! [`LoopOptions::max_iterations`]: crate::agent_loop::LoopOptions::max_iterations
//! [`LoopOptions::cancel`]: crate::agent_loop::LoopOptions::cancel
//! [`LoopReport::discarded`]: crate::agent_loop::LoopReport::discarded
//! [`LoopOptions::end_cancel`]: crate::agent_loop::LoopOptions::end_cancel
//! [`LoopOptions::kill_strays`]: crate::agent_loop::LoopOptions::kill_strays
//! [`LoopError`]: crate::agent_loop::LoopError
//! [`LoopError::Busy`]: crate::agent_loop::LoopError::Busy
//! [`LoopError::PromptArgument`]: crate::agent_loop::LoopError::PromptArgument
//! [`UNTIL_TIMEOUT`]: crate::agent_loop::UNTIL_TIMEOUT
//! [`MAX_PROMPT_ARGUMENT`]: crate::agent_loop::MAX_PROMPT_ARGUMENT

#![forbid(unsafe_code)]

mod agent;
mod loop_dir;
mod prompt;
mod record;

use std::ffi::OsString;
use std::fs;
use std::io;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::{Map, Value as Json, json};

use crate::context::Context;
use crate::context_buffer::{ContextBuffer, ContextBufferError, MAX_CONTEXT_CHARS};
use crate::decision::{Decision, Reply};
use crate::discover::{Discovery, discover_workspace_owned};
use crate::event::Event;
use crate::exec::{CancelToken, ExecError, RunOutcome};
use crate::fire::{FireError, fire};
use crate::firing::Firing;
use crate::import::LOOP_OWNER_VARIABLE;
use crate::state::{Durability, write_atomic};

use self::agent::{ERROR_LINES, Launch, agent_log, last_lines, launch};
use self::loop_dir::LoopDir;
pub use self::prompt::PROMPT_PLACEHOLDER;
use self::record::SessionRecord;
pub use self::record::new_session_id;

/// The loop's progress file, `${progress}` (rule 12): the agent's to write, made empty at the
/// start.
const PROGRESS_FILE: &str = "progress.md";

/// `${ctx}` (rule 12): the loop's state as JSON, written before each event.
const CONTEXT_FILE: &str = "context.json";

/// Iterations a loop runs at most unless told otherwise (docs/EVENTS.md §3.2).
pub const DEFAULT_MAX_ITERATIONS: u64 = 20;

/// Bytes a `{prompt}` argument may have: one argument of `execve` is at most 128 KiB
/// (`MAX_ARG_STRLEN`), its final NUL included.
pub const MAX_PROMPT_ARGUMENT: usize = 128 * 1024 - 1;

/// How long `--until` may run when no turn timeout is given.
pub const UNTIL_TIMEOUT: Duration = Duration::from_secs(60);

/// Agent failures in a row that end a loop (§5 rule 18).
pub const MAX_FAILURES_IN_A_ROW: u32 = 3;

/// What a loop runs and how; [`LoopOptions::new`] gives the defaults each field states.
#[derive(Debug, Clone)]
pub struct LoopOptions {
    /// The agent command, `argv[0]` first. Required, not empty.
    pub agent: Vec<OsString>,
    /// The task prompt (`--prompt`, `--prompt-file`). Default empty.
    pub prompt: String,
    /// A `sh -c` command run in the workspace after each passing iteration: exit 0 is done.
    /// Default `None`.
    pub until: Option<String>,
    /// Iterations at most (rule 7). Default [`DEFAULT_MAX_ITERATIONS`].
    pub max_iterations: u64,
    /// When an iteration's agent is stopped (a failure, rule 4). Default `None`: never.
    pub turn_timeout: Option<Duration>,
    /// `${stage}` of every event; `stage.complete` fires at the end. Default `None`.
    pub stage: Option<String>,
    /// The pipeline file (`--pipeline`, rule 11): only its hooks and its current stage's run.
    /// Default `None`.
    pub pipeline: Option<PathBuf>,
    /// The pipeline's stages, run in order (rule 11); empty: one stage, [`LoopOptions::stage`].
    /// Default empty.
    pub stages: Vec<LoopStage>,
    /// Whose own hooks the agent runs (§5 rule 12), kept in `session.json`. Default the file
    /// name of `argv[0]`.
    pub owner: String,
    /// Stops the loop when cancelled (rule 9). Default a token nothing cancels.
    pub cancel: CancelToken,
    /// Stops `session.end`'s hooks when cancelled (a second signal, rule 9). Default a token
    /// nothing cancels.
    pub end_cancel: CancelToken,
    /// Whether the process is the loop's alone (the command line's, a child subreaper): then
    /// after every agent, `--until` and event, every child it still has is killed and reaped
    /// ([`kill_children`](crate::leftovers::kill_children), rule 10). Default `false`.
    pub kill_strays: bool,
}

/// Programs that run the command after them (`npx iteratr`, `env A=1 nyzhi`, `timeout 1h
/// autoagent`): the owner is the program they start, not the wrapper, or both the tool and
/// hookvisor would run the tool's hooks.
const WRAPPERS: [&str; 14] = [
    "npx", "bunx", "pnpx", "uvx", "pipx", "env", "sudo", "doas", "nice", "nohup", "timeout",
    "stdbuf", "time", "exec",
];

/// The loop owner of rule 12: the file name of the agent command's first word, looked
/// through [`WRAPPERS`] (their options, `NAME=value` words and `timeout`'s duration skipped),
/// an npm package's scope and version left out (`@acme/iteratr@2` → `iteratr`), and
/// agent-pipelines' `engine.sh` read as `pipelines`.
fn owner_of(agent: &[OsString]) -> String {
    // Options of the wrappers that take the next word as their value (`sudo -u USER`,
    // `env -u NAME`, `npx -p PACKAGE`, `timeout -s SIGNAL`, `nice -n 5`).
    const VALUED: [&str; 8] = ["-u", "-g", "-C", "-S", "-n", "-s", "-k", "-p"];
    let mut skip_next = false;
    let mut wrapped = false;
    for word in agent.iter().map(|word| word.to_string_lossy()) {
        let name = Path::new(word.as_ref())
            .file_name()
            .map_or_else(|| word.to_string(), |n| n.to_string_lossy().into_owned());
        if wrapped && (skip_next || word.starts_with('-') || word.contains('=')) {
            skip_next = !skip_next && VALUED.contains(&word.as_ref());
            continue;
        }
        if WRAPPERS.contains(&name.as_str()) {
            wrapped = true;
            // `timeout DURATION COMMAND`.
            skip_next = name == "timeout";
            continue;
        }
        let package = name
            .strip_prefix('@')
            .map_or(name.as_str(), |_| word.rsplit('/').next().unwrap_or(&name));
        let bare = package.split('@').next().unwrap_or(package);
        return match bare {
            "engine.sh" => "pipelines".to_owned(),
            other => other.to_owned(),
        };
    }
    String::new()
}

impl LoopOptions {
    /// Options to run `agent` (`argv[0]` first) with every default.
    pub fn new(agent: Vec<OsString>) -> LoopOptions {
        let owner = owner_of(&agent);
        LoopOptions {
            agent,
            prompt: String::new(),
            until: None,
            max_iterations: DEFAULT_MAX_ITERATIONS,
            turn_timeout: None,
            stage: None,
            pipeline: None,
            stages: Vec::new(),
            owner,
            cancel: CancelToken::new(),
            end_cancel: CancelToken::new(),
            kill_strays: false,
        }
    }
}

/// One stage of a pipeline (rule 11).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopStage {
    /// Its name, `${stage}`.
    pub name: String,
    /// Its own agent-pipelines file (`loop.yaml`), whose hooks run during it.
    pub file: Option<PathBuf>,
    /// Its iterations at most; `None`: [`LoopOptions::max_iterations`].
    pub max_iterations: Option<u64>,
}

/// Why a loop ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Ending {
    /// The agent was done (done file or `--until`) and `session.stop` let it stop.
    Done,
    /// [`LoopOptions::max_iterations`] ran without done.
    MaxIterations,
    /// A `turn.start` hook refused the prompt.
    Blocked,
    /// The agent failed [`MAX_FAILURES_IN_A_ROW`] times in a row.
    Failures,
    /// A hook aborted (`on_failure: abort`, `continue: false`).
    Aborted,
    /// The loop's cancel token was cancelled (a signal).
    Interrupted,
}

impl Ending {
    /// The word `session.json`'s `reason` and `session.end`'s `data.reason` carry.
    pub fn as_str(self) -> &'static str {
        match self {
            Ending::Done => "done",
            Ending::MaxIterations => "max_iterations",
            Ending::Blocked => "blocked",
            Ending::Failures => "failures",
            Ending::Aborted => "aborted",
            Ending::Interrupted => "interrupted",
        }
    }
}

/// How a loop went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoopReport {
    /// The session id (`session.json`'s `id`).
    pub session_id: String,
    /// Why it ended.
    pub ending: Ending,
    /// Iterations the agent was started for, the final delivery included.
    pub iterations: u64,
    /// The block or abort reason that ended it, the last failure's, or that of a block in the
    /// last iteration or the final delivery, when there is one.
    pub reason: Option<String>,
    /// Entries of context discarded at `session.end` (rule 8).
    pub discarded: usize,
}

/// One finished iteration, for a progress line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Progress {
    /// The iteration's number, from 1.
    pub iteration: u64,
    /// Time since the loop started.
    pub elapsed: Duration,
    /// What the iteration came to, its events' decisions in order: `turn.end: allow`,
    /// `agent exited 3`, `turn.end: allow, session.stop: allow, done`, ….
    pub decision: String,
}

/// Why a loop could not run to its end. Hook failures and agent failures are no error: they
/// are judged and handled by the rules of the [module documentation](self).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoopError {
    /// The agent command is empty.
    #[error("no agent command; give one after `--`, e.g. `hookvisor loop -- my-agent {{prompt}}`")]
    NoAgent,
    /// An event could not be fired to its end.
    #[error("{event}: {source}")]
    Fire {
        /// The event.
        event: String,
        /// Why.
        source: FireError,
    },
    /// The agent or `--until` could not be started at all (its log, the system).
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// The context buffer could not be read or emptied.
    #[error(transparent)]
    Buffer(#[from] ContextBufferError),
    /// Another loop holds the state dir's `loop/lock`.
    #[error(
        "{}: another hookvisor loop runs in this state dir; wait for it, or pass --session or \
         --state-dir to run this one apart",
        path.display()
    )]
    Busy {
        /// The lock file.
        path: PathBuf,
    },
    /// The prompt cannot be one argument of the agent command (`{prompt}`).
    #[error(
        "the prompt ({len} bytes{nul}) cannot be the agent's {{prompt}} argument: the system \
         takes at most {max} bytes and no NUL; drop {{prompt}} from the agent command to give \
         it the prompt on stdin"
    )]
    PromptArgument {
        /// The prompt's length in bytes.
        len: usize,
        /// `", with a NUL"` when it holds one.
        nul: &'static str,
        /// The limit, [`MAX_PROMPT_ARGUMENT`].
        max: usize,
    },
    /// A file of the loop in the state dir could not be written or removed.
    #[error("{}: {source}; make the state dir writable or pass --state-dir", path.display())]
    State {
        /// The file.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
}

/// Runs the loop of the [module documentation](self) in `ctx` with `ctx.session_id` as its
/// session id, calling `progress` after each iteration.
pub fn run_loop(
    ctx: &Context,
    options: &LoopOptions,
    progress: impl FnMut(&Progress),
) -> Result<LoopReport, LoopError> {
    if options.agent.is_empty() {
        return Err(LoopError::NoAgent);
    }
    let mut driver = Driver::start(ctx, options, progress)?;
    let ending = match driver.iterate() {
        Ok(ending) => ending,
        Err(Stop::Interrupted) => Ending::Interrupted,
        Err(Stop::Error(err)) => return Err(driver.fail(err)),
    };
    driver.finish(ending)
}

/// Why the iterations stopped early: a signal, or the loop's own failure.
enum Stop {
    Interrupted,
    Error(LoopError),
}

impl<E: Into<LoopError>> From<E> for Stop {
    fn from(err: E) -> Stop {
        Stop::Error(err.into())
    }
}

/// What comes of one iteration.
enum Turn {
    /// The agent exited 0 and `turn.end` passed.
    Passed,
    /// `turn.end` blocked: its reason goes into the next prompt.
    Reprompt,
    /// The agent failed (rule 4).
    Failed,
    /// The loop ends here.
    End(Ending),
}

/// The state of one loop between its events.
struct Driver<'a, P> {
    ctx: &'a Context,
    /// `<state>/loop/lock`, locked for the loop's life: one loop per state dir.
    _lock: fs::File,
    options: &'a LoopOptions,
    progress: P,
    started: Instant,
    record: SessionRecord,
    buffer: ContextBuffer,
    /// `<state>/loop/`, held open: `done`, the logs and the lock are found through it.
    loop_dir: LoopDir,
    /// The variables of rule 6 but `HOOKVISOR_ITERATION`.
    env: Vec<(OsString, OsString)>,
    iteration: u64,
    /// The reason of the last block, for the next prompt.
    block_reason: Option<String>,
    /// What the `error` hooks piped, for the next prompt in place of the task prompt.
    recovery: Option<String>,
    /// Context drained outside `turn.start` (the recovery's neighbours), for the next prompt.
    held_context: Vec<String>,
    /// The reason that ended the loop, for the report.
    reason: Option<String>,
    /// What the current iteration came to so far (`turn.end: allow, done`).
    decision: String,
    /// Why the agent failed last, the reason when failures end the loop.
    last_failure: Option<String>,
    /// The current stage (rule 11).
    stage: Option<LoopStage>,
    /// The name of the stage after it, `${next_stage}`.
    next_stage: Option<String>,
    /// `self.iteration` when the current stage started.
    stage_start: u64,
}

impl<'a, P: FnMut(&Progress)> Driver<'a, P> {
    /// Rule 1.
    fn start(
        ctx: &'a Context,
        options: &'a LoopOptions,
        progress: P,
    ) -> Result<Driver<'a, P>, LoopError> {
        let loop_dir = LoopDir::open(&ctx.state())?;
        let lock = lock_state(&loop_dir)?;
        remove_done(&loop_dir)?;
        make_progress(&loop_dir)?;
        let done_file = loop_dir.shown("done");
        let env = vec![
            ("HOOKVISOR_LOOP".into(), "1".into()),
            ("HOOKVISOR_SESSION".into(), ctx.session_id.clone().into()),
            ("HOOKVISOR_DONE".into(), done_file.clone().into()),
            ("HOOKVISOR_STATE_DIR".into(), ctx.state_dir.clone().into()),
            ("DISCOBOT_WORKSPACE".into(), ctx.workspace.clone().into()),
            // §5 rule 12: the agent's own `hookvisor fire` leaves the owner's hooks to it too.
            (LOOP_OWNER_VARIABLE.into(), options.owner.clone().into()),
        ];
        let record = SessionRecord {
            id: ctx.session_id.clone(),
            started_at: record::now(),
            ended_at: None,
            iterations: 0,
            reason: None,
            agent: options
                .agent
                .iter()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            owner: options.owner.clone(),
        };
        let driver = Driver {
            ctx,
            _lock: lock,
            options,
            progress,
            started: Instant::now(),
            record,
            buffer: ContextBuffer::new(&ctx.state()),
            loop_dir,
            env,
            iteration: 0,
            block_reason: None,
            recovery: None,
            held_context: Vec::new(),
            reason: None,
            decision: String::new(),
            last_failure: None,
            stage: None,
            next_stage: None,
            stage_start: 0,
        };
        driver.write_record()?;
        Ok(driver)
    }

    /// Rules 1–8 and 11: `session.start`, then each stage's iterations until one of them ends
    /// it, its final delivery and `stage.complete`.
    fn iterate(&mut self) -> Result<Ending, Stop> {
        let stages = match self.options.stages.is_empty() {
            true => vec![LoopStage {
                name: self.options.stage.clone().unwrap_or_default(),
                file: None,
                max_iterations: None,
            }],
            false => self.options.stages.clone(),
        };
        let enter = |driver: &mut Self, i: usize| {
            driver.next_stage = stages.get(i + 1).map(|s| s.name.clone());
            driver.stage = stages.get(i).cloned().filter(|s| !s.name.is_empty());
            driver.stage_start = driver.iteration;
        };
        // `session.start` is the first stage's, as agent-pipelines' `on_session_start`.
        enter(self, 0);
        let reply = self.fire(Event::SessionStart, Map::new())?;
        if let Some(ending) = self.aborted(&reply) {
            return Ok(ending);
        }
        let mut ending = Ending::Done;
        for (i, stage) in stages.iter().enumerate() {
            if i > 0 {
                // The agent says so again for each stage.
                remove_done(&self.loop_dir)?;
                enter(self, i);
            }
            let max = stage.max_iterations.unwrap_or(self.options.max_iterations);
            ending = self.run_stage(max)?;
            if !matches!(ending, Ending::Done | Ending::MaxIterations) {
                return Ok(ending);
            }
            self.final_delivery()?;
            if let Some(end) = self.stage_complete(ending)? {
                return Ok(end);
            }
        }
        Ok(ending)
    }

    /// Rules 2–7 for one stage of at most `max` iterations.
    fn run_stage(&mut self, max: u64) -> Result<Ending, Stop> {
        let mut failures = 0;
        loop {
            if self.iteration - self.stage_start >= max {
                // A block at the limit: its reason goes in the final delivery, and is reported.
                self.reason.clone_from(&self.block_reason);
                return Ok(Ending::MaxIterations);
            }
            let turn = self.turn()?;
            let ending = self.after_turn(turn, &mut failures)?;
            self.report_progress();
            if let Some(ending) = ending {
                return Ok(ending);
            }
        }
    }

    /// Rule 8: `stage.complete` fires when a stage is set; an abort there (a rejected
    /// approval, `on_failure: abort`) ends the loop aborted, with its reason.
    fn stage_complete(&mut self, ending: Ending) -> Result<Option<Ending>, Stop> {
        if self.stage.is_none() {
            return Ok(None);
        }
        let mut data = Map::new();
        data.insert("reason".into(), ending.as_str().into());
        let reply = self.fire(Event::StageComplete, data)?;
        Ok((reply.decision == Decision::Abort).then(|| {
            self.reason = reply.reason;
            Ending::Aborted
        }))
    }

    /// Rules 3, 4 and 7 after an iteration: whether the loop ends, and how.
    fn after_turn(&mut self, turn: Turn, failures: &mut u32) -> Result<Option<Ending>, Stop> {
        match turn {
            Turn::Failed => {
                *failures += 1;
                if *failures >= MAX_FAILURES_IN_A_ROW {
                    self.note("giving up");
                    self.reason = self.last_failure.take();
                    return Ok(Some(Ending::Failures));
                }
                return Ok(None);
            }
            Turn::End(ending) => return Ok(Some(ending)),
            Turn::Reprompt => {
                *failures = 0;
                return Ok(None);
            }
            Turn::Passed => *failures = 0,
        }
        if !self.is_done()? {
            return Ok(None);
        }
        let mut data = Map::new();
        data.insert("iterations".into(), self.iteration.into());
        let reply = self.fire(Event::SessionStop, data)?;
        self.note(&format!("session.stop: {}", reply.decision.as_str()));
        match reply.decision {
            Decision::Allow => {
                self.note("done");
                Ok(Some(Ending::Done))
            }
            Decision::Block => {
                remove_done(&self.loop_dir)?;
                self.block_reason = reply.reason;
                Ok(None)
            }
            Decision::Abort => {
                self.reason = reply.reason;
                Ok(Some(Ending::Aborted))
            }
        }
    }

    /// One iteration (rules 2–5).
    fn turn(&mut self) -> Result<Turn, Stop> {
        self.iteration += 1;
        let reply = self.fire(Event::TurnStart, Map::new())?;
        match reply.decision {
            Decision::Allow => {}
            Decision::Block | Decision::Abort => {
                self.reason = reply.reason;
                self.note(&format!("turn.start: {}", reply.decision.as_str()));
                // The agent never started for this one.
                self.iteration -= 1;
                return Ok(Turn::End(match reply.decision {
                    Decision::Block => Ending::Blocked,
                    _ => Ending::Aborted,
                }));
            }
        }
        let mut context = std::mem::take(&mut self.held_context);
        context.extend(reply.context);
        let task = self.recovery.take();
        let text = prompt::assemble(
            &context,
            self.block_reason.take().as_deref(),
            task.as_deref().unwrap_or(&self.options.prompt),
        );
        let run = self.prompt_agent(&text)?;
        if !run.success() {
            return self.agent_failed(&run);
        }
        let reply = self.fire(Event::TurnEnd, Map::new())?;
        self.note(&format!("turn.end: {}", reply.decision.as_str()));
        match reply.decision {
            Decision::Allow => Ok(Turn::Passed),
            Decision::Block => {
                self.block_reason = reply.reason;
                Ok(Turn::Reprompt)
            }
            Decision::Abort => {
                self.reason = reply.reason;
                Ok(Turn::End(Ending::Aborted))
            }
        }
    }

    /// The iteration recorded, then its agent run with `text`; an interrupt stops the loop.
    fn prompt_agent(&mut self, text: &str) -> Result<RunOutcome, Stop> {
        self.record.iterations = self.iteration;
        self.write_record()?;
        let run = self.run_agent(text)?;
        if run.cancelled || self.options.cancel.is_cancelled() {
            return Err(Stop::Interrupted);
        }
        Ok(run)
    }

    /// Rule 2: the agent of this iteration, with its prompt.
    fn run_agent(&self, text: &str) -> Result<RunOutcome, LoopError> {
        let (args, stdin) = prompt::deliver(&self.options.agent[1..], text);
        if stdin.is_none() && (text.len() > MAX_PROMPT_ARGUMENT || text.contains('\0')) {
            return Err(LoopError::PromptArgument {
                len: text.len(),
                nul: if text.contains('\0') {
                    ", with a NUL"
                } else {
                    ""
                },
                max: MAX_PROMPT_ARGUMENT,
            });
        }
        let mut env = self.env.clone();
        env.push((
            "HOOKVISOR_ITERATION".into(),
            self.iteration.to_string().into(),
        ));
        let run = launch(
            self.ctx,
            Launch {
                program: PathBuf::from(&self.options.agent[0]),
                args,
                stdin,
                log: self.loop_dir.pinned(&agent_log(self.iteration)),
                timeout: self.options.turn_timeout,
                env: &env,
            },
            &self.options.cancel,
        );
        self.sweep();
        Ok(run?)
    }

    /// Rule 4: `error` fires; what its hooks piped becomes the recovery prompt. An abort from
    /// its hooks ends the loop (rule 7).
    fn agent_failed(&mut self, run: &RunOutcome) -> Result<Turn, Stop> {
        let log = self.loop_dir.shown(&agent_log(self.iteration));
        let mut data = Map::new();
        data.insert("status".into(), run.exit_code.into());
        data.insert("error".into(), last_lines(&run.tail, ERROR_LINES).into());
        data.insert("log".into(), log.to_string_lossy().into_owned().into());
        data.insert("timedOut".into(), run.timed_out.into());
        self.last_failure = Some(match run.timed_out {
            true => format!("the agent timed out; its output is in {}", log.display()),
            false => format!(
                "the agent exited {}; its output is in {}",
                run.exit_code,
                log.display()
            ),
        });
        // What was piped before the failure is context, and stays first (rule 4): it is taken
        // out now so that what the `error` hooks pipe can be told apart from it.
        let before = self.buffer.drain(MAX_CONTEXT_CHARS)?;
        if !before.text.is_empty() {
            self.held_context.push(before.text);
        }
        let reply = self.fire(Event::Error, data)?;
        if reply.decision == Decision::Abort {
            self.reason = reply.reason;
            self.note("error: abort");
            return Ok(Turn::End(Ending::Aborted));
        }
        let piped = self.buffer.drain(MAX_CONTEXT_CHARS)?;
        if !piped.text.is_empty() {
            self.recovery = Some(piped.text);
        }
        let status = match run.timed_out {
            true => "agent timed out".to_owned(),
            false => format!("agent exited {}", run.exit_code),
        };
        self.note(&status);
        Ok(Turn::Failed)
    }

    /// Rule 3: the done file, else `--until`.
    fn is_done(&self) -> Result<bool, Stop> {
        // Only a file the agent made: a link could name anything.
        if self.loop_dir.has_file("done") {
            return Ok(true);
        }
        let Some(until) = &self.options.until else {
            return Ok(false);
        };
        let run = launch(
            self.ctx,
            Launch {
                program: PathBuf::from("/bin/sh"),
                args: vec!["-c".into(), until.into()],
                stdin: None,
                log: self.loop_dir.pinned("until.log"),
                timeout: Some(self.options.turn_timeout.unwrap_or(UNTIL_TIMEOUT)),
                env: &self.env,
            },
            &self.options.cancel,
        );
        self.sweep();
        let run = run?;
        if run.cancelled {
            return Err(Stop::Interrupted);
        }
        Ok(run.success())
    }

    /// Rule 8 (and 9): `session.end`, the record.
    fn finish(mut self, ending: Ending) -> Result<LoopReport, LoopError> {
        // `session.end` discards what no turn took (docs/EVENTS.md §1.6), in its session log.
        let fired = self.session_end(ending.as_str());
        let recorded = self.finish_record(ending.as_str());
        // The first failure is the one to report; a later one is a consequence or beside it.
        let discarded = fired?;
        recorded?;
        // Logged by the caller, which knows where its reader is (the report counts them).
        tracing::debug!("session.end: discarded {discarded} context entries");
        Ok(LoopReport {
            session_id: self.record.id.clone(),
            ending,
            iterations: self.iteration,
            reason: self.reason.take(),
            discarded,
        })
    }

    /// Rule 8 after the loop's own failure: `session.end` fires with the reason `error` and the
    /// record says so, both as well as they can; the failure is what is returned.
    fn fail(mut self, err: LoopError) -> LoopError {
        if let Err(e) = self.session_end("error") {
            tracing::warn!("after `{err}`: {e}");
        }
        if let Err(e) = self.buffer.discard() {
            tracing::warn!("after `{err}`: {e}");
        }
        if let Err(e) = self.finish_record("error") {
            tracing::warn!("after `{err}`: {e}");
        }
        err
    }

    /// Fires `session.end` with `data.reason` = `reason`. It runs also after an interrupt, on a
    /// token of its own ([`LoopOptions::end_cancel`]: the loop's is cancelled, and this event is
    /// how hooks learn that the loop was interrupted). Its hooks being cancelled is no error.
    fn session_end(&self, reason: &str) -> Result<usize, LoopError> {
        let data = json!({"reason": reason, "iterations": self.iteration});
        let mut firing = self.firing(Event::SessionEnd);
        firing.cancel = Some(self.options.end_cancel.clone());
        if let Json::Object(data) = data {
            firing.data = data;
        }
        let discovery = self.discover();
        let fired = fire(self.ctx, &discovery, &firing);
        self.sweep();
        match fired {
            Ok(reply) => Ok(reply.phase1["discarded"].as_u64().unwrap_or(0) as usize),
            Err(FireError::Cancelled) => {
                tracing::debug!("session.end: its hooks were stopped");
                // Stopped before the discard: what is left goes now.
                Ok(self.buffer.discard().unwrap_or_else(|e| {
                    tracing::warn!("session.end: {e}");
                    0
                }))
            }
            Err(source) => Err(LoopError::Fire {
                event: Event::SessionEnd.to_string(),
                source,
            }),
        }
    }

    /// Rule 8: leftover context, or a block reason no iteration delivered, goes to the agent
    /// alone, as iteratr's final delivery sends its pending buffer: no `turn.start` or
    /// `turn.end` fires (their hooks would run once more, and pipe what nobody reads), and the
    /// task prompt is not sent again. The agent's failure there is only noted.
    fn final_delivery(&mut self) -> Result<(), Stop> {
        let mut context = std::mem::take(&mut self.held_context);
        let drained = self.buffer.drain(MAX_CONTEXT_CHARS)?;
        if !drained.text.is_empty() {
            context.push(drained.text);
        }
        if context.is_empty() && self.block_reason.is_none() {
            return Ok(());
        }
        self.note("final delivery");
        self.iteration += 1;
        let text = prompt::assemble(&context, self.block_reason.take().as_deref(), "");
        let run = self.prompt_agent(&text)?;
        if !run.success() {
            self.note(&match run.timed_out {
                true => "agent timed out".to_owned(),
                false => format!("agent exited {}", run.exit_code),
            });
        }
        self.report_progress();
        Ok(())
    }

    /// Rule 10: when the process is the loop's alone, what the last run left is killed.
    fn sweep(&self) {
        if self.options.kill_strays {
            let killed = crate::leftovers::kill_children();
            if killed > 0 {
                tracing::debug!("killed and reaped {killed} leftover process(es)");
            }
        }
    }

    /// Fires `event` with `data` on a fresh discovery (hooks are read in place, docs/EVENTS.md
    /// §2.2: the agent may have changed them since the last event).
    fn fire(&self, event: Event, data: Map<String, Json>) -> Result<Reply, Stop> {
        let mut firing = self.firing(event.clone());
        firing.data = data;
        let discovery = self.discover();
        // Never a limit here (the trigger is `loop`), but the number re-prompts print.
        firing.max_attempts = discovery.config.max_retries_or(None);
        let fired = fire(self.ctx, &discovery, &firing);
        self.sweep();
        match fired {
            Ok(reply) => Ok(reply),
            Err(FireError::Cancelled) => Err(Stop::Interrupted),
            Err(source) if self.options.cancel.is_cancelled() => {
                tracing::debug!("{event} after the interrupt: {source}");
                Err(Stop::Interrupted)
            }
            Err(source) => Err(Stop::Error(LoopError::Fire {
                event: event.to_string(),
                source,
            })),
        }
    }

    /// The hooks of the workspace, read again; under `--pipeline`, the pipeline's and its
    /// current stage's only (rule 11).
    fn discover(&self) -> Discovery {
        let files = self.pipeline_files();
        discover_workspace_owned(self.ctx, &self.options.owner, files.as_deref())
    }

    /// Under `--pipeline`, the files whose hooks run: the pipeline's and its current stage's.
    fn pipeline_files(&self) -> Option<Vec<PathBuf>> {
        let pipeline = self.options.pipeline.clone()?;
        Some(
            std::iter::once(pipeline)
                .chain(self.stage.as_ref().and_then(|s| s.file.clone()))
                .collect(),
        )
    }

    /// The loop's variables of every event (rule 12): `max_iterations` (the current stage's),
    /// `next_stage`, and the paths `progress`, `status`, `ctx` (agent-pipelines' `CTX`: a
    /// `_file` name could not be in the environment), the last written now with what it says.
    fn vars(&self) -> Map<String, Json> {
        let max = (self.stage.as_ref().and_then(|s| s.max_iterations))
            .unwrap_or(self.options.max_iterations);
        let progress = self.loop_dir.shown(PROGRESS_FILE);
        let status = self.ctx.state().status();
        let context_file = self.loop_dir.shown(CONTEXT_FILE);
        let context = json!({
            "session": self.ctx.session_id,
            "stage": self.stage.as_ref().map(|s| &s.name),
            "next_stage": self.next_stage,
            "iteration": self.iteration,
            "max_iterations": max,
            "paths": {"progress": progress, "status": status},
        });
        if let Err(err) = write_atomic(
            &self.loop_dir.pinned(CONTEXT_FILE),
            context.to_string().as_bytes(),
            Durability::Replaceable,
        ) {
            tracing::warn!("{}: {err}", context_file.display());
        }
        let path = |p: PathBuf| Json::from(p.to_string_lossy().into_owned());
        let mut vars = Map::new();
        vars.insert("max_iterations".into(), max.into());
        vars.insert(
            "next_stage".into(),
            self.next_stage.clone().unwrap_or_default().into(),
        );
        vars.insert("progress".into(), path(progress));
        vars.insert("status".into(), path(status));
        vars.insert("ctx".into(), path(context_file));
        vars
    }

    /// A firing of `event` by the loop, with its iteration and stage.
    fn firing(&self, event: Event) -> Firing {
        let mut firing = Firing::new(event);
        firing.trigger = "loop".to_owned();
        // An unawaited hook never holds an iteration (docs/EVENTS.md §1.3).
        firing.detach_unawaited = true;
        firing.iteration = (self.iteration > 0).then_some(self.iteration);
        firing.stage = self.stage.as_ref().map(|s| s.name.clone());
        firing.vars = self.vars();
        firing.pipeline = self.pipeline_files();
        firing.cancel = Some(self.options.cancel.clone());
        firing
    }

    /// An abort of a notice (`session.start`) ends the loop before its first iteration.
    fn aborted(&mut self, reply: &Reply) -> Option<Ending> {
        (reply.decision == Decision::Abort).then(|| {
            self.reason = reply.reason.clone();
            Ending::Aborted
        })
    }

    /// Adds to what the current iteration came to, for its progress line.
    fn note(&mut self, what: &str) {
        if !self.decision.is_empty() {
            self.decision.push_str(", ");
        }
        self.decision.push_str(what);
    }

    /// Hands the iteration's progress to the caller, once per iteration.
    fn report_progress(&mut self) {
        let progress = Progress {
            iteration: self.iteration,
            elapsed: self.started.elapsed(),
            decision: std::mem::take(&mut self.decision),
        };
        (self.progress)(&progress);
    }

    fn write_record(&self) -> Result<(), LoopError> {
        let path = self.ctx.state().session_record();
        self.record
            .write(&path)
            .map_err(|source| LoopError::State { path, source })
    }

    fn finish_record(&mut self, reason: &str) -> Result<(), LoopError> {
        self.record.ended_at = Some(record::now());
        self.record.iterations = self.iteration;
        self.record.reason = Some(reason.to_owned());
        self.write_record()
    }
}

/// Takes `<loop dir>/lock` for the loop's life (released when the file is closed, also by a
/// killed loop); another loop holding it is [`LoopError::Busy`].
fn lock_state(loop_dir: &LoopDir) -> Result<fs::File, LoopError> {
    let path = loop_dir.shown("lock");
    let file = fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(loop_dir.pinned("lock"))
        .map_err(|source| LoopError::State {
            path: path.clone(),
            source,
        })?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(fs::TryLockError::WouldBlock) => Err(LoopError::Busy { path }),
        Err(fs::TryLockError::Error(source)) => Err(LoopError::State { path, source }),
    }
}

/// Makes `<loop dir>/progress.md` when missing (never through a link), for `${progress}`.
fn make_progress(loop_dir: &LoopDir) -> Result<(), LoopError> {
    fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(loop_dir.pinned(PROGRESS_FILE))
        .map(drop)
        .map_err(|source| LoopError::State {
            path: loop_dir.shown(PROGRESS_FILE),
            source,
        })
}

/// Removes the done file (a link itself, never what it names); one that is not there is fine.
fn remove_done(loop_dir: &LoopDir) -> Result<(), LoopError> {
    match fs::remove_file(loop_dir.pinned("done")) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(LoopError::State {
            path: loop_dir.shown("done"),
            source,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_owner_is_looked_for_through_wrappers() {
        let owner =
            |words: &[&str]| owner_of(&words.iter().map(OsString::from).collect::<Vec<_>>());
        assert_eq!(owner(&["/usr/bin/iteratr", "build"]), "iteratr");
        assert_eq!(owner(&["npx", "-y", "@acme/iteratr@2.1", "run"]), "iteratr");
        assert_eq!(owner(&["npx", "-p", "@acme/tools", "nyzhi"]), "nyzhi");
        assert_eq!(owner(&["env", "A=1", "-u", "B", "autoagent"]), "autoagent");
        assert_eq!(owner(&["sudo", "-u", "agent", "iteratr"]), "iteratr");
        assert_eq!(owner(&["timeout", "1h", "nyzhi", "-p", "x"]), "nyzhi");
        assert_eq!(
            owner(&["./scripts/engine.sh", "--pipeline", "review"]),
            "pipelines"
        );
        assert_eq!(owner(&["claude", "-p"]), "claude");
        assert_eq!(owner(&[]), "");
    }
}

//! `hookvisor serve`: the HTTP API and dashboard over one workspace, file-hook evaluation at the
//! end of each turn, pre-commit (re)installation, and optionally the agent as a child.
//!
//! The server runs on a current-thread tokio runtime: it mostly waits. Hook runs and every file
//! read go to the blocking pool: the executor waits on processes synchronously, and one read
//! of a slow disk on the runtime thread would stall every route. Everything it serves is read
//! from the files the core writes (`status.json`, the logs, the hooks directory), so the API
//! shows runs made by anyone, not only by this server.
//!
//! What keeps the server to its own clients: the token when one is set, [`guard`] against web
//! pages, [`conn`]'s limits against clients that never finish a request.
//!
//! Concurrent requests that judge the same state wait for each other instead of being refused,
//! since a refusal reaches an agent as "no hook answered", which lets the call through:
//!
//! - The gates of one session (docs/EVENTS.md §5 rule 4) run one at a time, the others waiting in
//!   arrival order: the agents run the tool calls of one reply at once, and a second gate
//!   must judge the state the first one leaves. At most [`MAX_QUEUED_GATES`] wait per session
//!   and none longer than [`GATE_WAIT`]; beyond either the answer is 503 naming the limit. A
//!   client that disconnects while waiting leaves the queue at once.
//! - A turn end (`/v1/turns/end`, `turn.end`) that arrives while an evaluation runs answers
//!   with that evaluation's report when it blocks or re-prompts: the turn ends arrived
//!   together, the workspace is judged once and the loop guard counts one turn end, not two.
//!   A pass is not shared (it may predate the latest edits): the waiting turn end evaluates.
//!   One that arrives during an explicit run waits for it, then evaluates. An explicit run (`/hooks/{id}/rerun`, a person's click)
//!   during any job is still refused with 409.

mod agent;
mod children;
mod conn;
mod events;
mod guard;
mod listen;
mod metrics;
mod routes;
mod runs;
mod watch;

use std::collections::HashMap;
use std::ffi::OsString;
use std::fmt;
use std::io::{self, Write};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use axum::Router;
use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use hookvisor_core::{
    Action, CancelToken, Context, Discovery, Evaluator, Hook, Status, StatusStore,
    discover_workspace,
};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch as channel};

pub use events::Event;
pub use guard::Guard;
pub use listen::{Listen, ListenError};
use routes::ServerError;

use crate::error::CliError;

/// How long a graceful shutdown waits for open connections before it exits anyway.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// The most gates of one session that wait behind the running one; the agents run about ten
/// tool calls at once.
pub const MAX_QUEUED_GATES: usize = 32;

/// The longest a gate waits for its turn: the agents' own timeout for a gate hook
/// (`hookvisor install` writes 600 s), after which nobody reads the answer.
pub const GATE_WAIT: Duration = Duration::from_secs(600);

/// Everything `serve` needs, resolved from the command line and the environment.
#[derive(Debug, Clone)]
pub struct Config {
    /// The workspace, session and state dir.
    pub ctx: Context,
    /// Where to listen.
    pub listen: Listen,
    /// `HOOKVISOR_TOKEN`: when set, every route but `/healthz` needs it as a bearer token.
    pub token: Option<String>,
    /// Hook-triggered re-prompts allowed per user turn.
    pub max_retries: u32,
    /// The agent command to supervise; empty for none.
    pub agent: Vec<OsString>,
}

/// Why the server could not start.
#[derive(Debug)]
pub enum ServeError {
    /// Listening failed.
    Listen(ListenError),
    /// The runtime, a signal handler or the agent could not be set up.
    Setup {
        /// What was being set up.
        what: String,
        /// What the system said.
        source: io::Error,
    },
}

impl fmt::Display for ServeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServeError::Listen(e) => e.fmt(f),
            ServeError::Setup { what, source } => write!(f, "{what}: {source}"),
        }
    }
}

impl std::error::Error for ServeError {}

impl From<ListenError> for ServeError {
    fn from(e: ListenError) -> Self {
        ServeError::Listen(e)
    }
}

/// A `--listen`/`--socket` value that cannot be used (not an address, remote without a token,
/// a path another server holds) is a usage error; a bind the system refuses is a failure.
impl From<ListenError> for CliError {
    fn from(err: ListenError) -> CliError {
        match err {
            ListenError::Bind { .. } => CliError::failed(err),
            _ => CliError::usage(err),
        }
    }
}

impl From<ServeError> for CliError {
    fn from(err: ServeError) -> CliError {
        match err {
            ServeError::Listen(e) => e.into(),
            ServeError::Setup { .. } => CliError::failed(err),
        }
    }
}

fn setup(what: impl Into<String>) -> impl FnOnce(io::Error) -> ServeError {
    let what = what.into();
    move |source| ServeError::Setup { what, source }
}

/// What the server is doing with the hooks; one thing at a time.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobKind {
    /// An end-of-turn evaluation.
    Evaluation,
    /// An explicit run of one hook.
    Rerun(String),
}

impl fmt::Display for JobKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            JobKind::Evaluation => f.write_str("an evaluation"),
            JobKind::Rerun(id) => write!(f, "a run of '{id}'"),
        }
    }
}

/// What an evaluation answered, for the turn ends that arrived while it ran.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// The report.
    Report(Arc<hookvisor_core::EvalReport>),
    /// A new turn cancelled it.
    Cancelled,
    /// It failed; the server's message.
    Failed(String),
}

#[derive(Debug)]
struct Job {
    kind: JobKind,
    cancel: CancelToken,
    /// Holds an evaluation's outcome once it is known, and closes when the job ends, for
    /// whoever waits on a cancel or shares the evaluation.
    done: channel::Receiver<Option<Outcome>>,
}

/// Holds the job slot until dropped; dropping it frees the slot and wakes the waiters.
#[derive(Debug)]
pub struct JobGuard {
    state: Arc<AppState>,
    done: channel::Sender<Option<Outcome>>,
}

impl JobGuard {
    /// Hands an evaluation's outcome to the turn ends waiting on it.
    fn finish(&self, outcome: Outcome) {
        self.done.send_replace(Some(outcome));
    }
}

/// What a turn end does: run the evaluation, or answer with the one that ran meanwhile.
#[derive(Debug)]
enum TurnSlot {
    /// The slot is ours: evaluate.
    Run(JobGuard, CancelToken),
    /// An evaluation that was running when the request came answered it.
    Shared(Outcome),
}

impl Drop for JobGuard {
    fn drop(&mut self) {
        *self.state.job.lock().expect("job lock") = None;
        // The run changed status.json; announce it even if the file watch is unavailable.
        self.state.refresh_status();
    }
}

/// One session's gates: the running one and those waiting for it.
#[derive(Debug)]
struct SessionGates {
    /// One permit: the running gate holds it; tokio hands it on in arrival order.
    turn: Arc<Semaphore>,
    /// The gates of the session in the server, running or waiting.
    present: usize,
}

/// A gate's place in its session's queue, running or waiting; dropping it (the gate ended, or
/// its client went away while it waited) gives the place up.
#[derive(Debug)]
struct GateTicket {
    state: Arc<AppState>,
    session: String,
}

impl GateTicket {
    /// Counts a gate in, or refuses it when [`MAX_QUEUED_GATES`] already wait.
    fn take(
        state: &Arc<AppState>,
        session: String,
    ) -> Result<(GateTicket, Arc<Semaphore>), ServerError> {
        let mut gates = state.gates.lock().expect("gates lock");
        let entry = gates
            .entry(session.clone())
            .or_insert_with(|| SessionGates {
                turn: Arc::new(Semaphore::new(1)),
                present: 0,
            });
        if entry.present > MAX_QUEUED_GATES {
            return Err(ServerError::GateQueueFull {
                session,
                limit: MAX_QUEUED_GATES,
            });
        }
        entry.present += 1;
        let turn = entry.turn.clone();
        state.publish_queue(&session, entry.present);
        Ok((
            GateTicket {
                state: state.clone(),
                session,
            },
            turn,
        ))
    }
}

impl Drop for GateTicket {
    fn drop(&mut self) {
        let mut gates = self.state.gates.lock().expect("gates lock");
        let Some(entry) = gates.get_mut(&self.session) else {
            return;
        };
        entry.present -= 1;
        let present = entry.present;
        if present == 0 {
            gates.remove(&self.session);
        }
        self.state.publish_queue(&self.session, present);
    }
}

/// Holds a session's gate until dropped; the next waiting gate of the session then runs.
#[derive(Debug)]
pub struct GateGuard {
    // The permit drops first: were the ticket first, the session's entry could go while the
    // permit is still held, and a new gate would get a fresh semaphore and run beside this one.
    _permit: OwnedSemaphorePermit,
    _ticket: GateTicket,
}

/// The state every handler shares.
#[derive(Debug)]
pub struct AppState {
    ctx: Context,
    token: Option<String>,
    max_retries: u32,
    discovery: RwLock<Arc<Discovery>>,
    hub: events::Hub,
    metrics: metrics::Metrics,
    job: Mutex<Option<Job>>,
    /// The sessions with a gate firing now, and their gates waiting for it (module docs):
    /// a second gate of one session would judge a state the first one is still changing.
    gates: Mutex<HashMap<String, SessionGates>>,
    /// Ends the turns, with the dirty set kept warm by inotify once its watcher has started
    /// (until then turns scan in full).
    evaluator: Mutex<Evaluator>,
    /// The watcher's journal for git's fsmonitor hook, once the watcher has started.
    fsmonitor: std::sync::OnceLock<hookvisor_core::watch::ChangeFeed>,
    /// The last status.json seen, to turn the next one into events.
    seen: Mutex<Status>,
    /// Held across a refresh's read of status.json, so that the read last is the one kept;
    /// handlers never take it, so a slow read cannot block the runtime thread through it.
    refreshing: Mutex<()>,
    shutdown: channel::Sender<bool>,
}

impl AppState {
    /// Reads the hooks and the status of `ctx`, ready to serve.
    pub fn new(ctx: Context, token: Option<String>, max_retries: u32) -> Arc<AppState> {
        let discovery = discover_workspace(&ctx);
        let seen = StatusStore::for_context(&ctx).load().unwrap_or_default();
        Arc::new(AppState {
            token: token.filter(|t| !t.is_empty()),
            max_retries,
            discovery: RwLock::new(Arc::new(discovery)),
            hub: events::Hub::default(),
            metrics: metrics::Metrics::default(),
            job: Mutex::new(None),
            gates: Mutex::new(HashMap::new()),
            evaluator: Mutex::new(Evaluator::new(ctx.clone())),
            fsmonitor: std::sync::OnceLock::new(),
            seen: Mutex::new(seen),
            refreshing: Mutex::new(()),
            shutdown: channel::channel(false).0,
            ctx,
        })
    }

    pub(super) fn store(&self) -> StatusStore {
        StatusStore::for_context(&self.ctx)
    }

    /// The hooks as last discovered (the watcher keeps this fresh).
    pub fn discovery(&self) -> Arc<Discovery> {
        self.discovery.read().expect("discovery lock").clone()
    }

    /// Scans the hooks directory again; on a change, syncs the pre-commit hook and tells the
    /// subscribers. Returns whether anything changed.
    pub fn rediscover(&self) -> bool {
        let fresh = discover_workspace(&self.ctx);
        let old = self.discovery();
        let listing = |d: &Discovery| crate::list::list_json(d, &self.ctx.workspace);
        if listing(&old) == listing(&fresh) {
            return false;
        }
        let (hooks, problems) = (fresh.hooks.len(), fresh.problems.len());
        sync_precommit(&self.ctx, &fresh);
        *self.discovery.write().expect("discovery lock") = Arc::new(fresh);
        self.hub.publish(Event::HooksChanged { hooks, problems });
        true
    }

    /// Starts the change watcher and makes its first (full) scan, so the first turn is quick.
    /// Without it, turns scan the whole workspace.
    fn start_change_watch(&self) {
        let mut watcher = match Evaluator::start_watcher(&self.ctx) {
            Ok(w) => w,
            Err(e) => {
                tracing::warn!("{e}; every turn scans the whole workspace");
                return;
            }
        };
        if let Err(e) = watcher.scan() {
            tracing::warn!("{e}");
        }
        tracing::debug!("{watcher:?}");
        self.metrics.set_watched_dirs(watcher.watched_dirs());
        let _ = self.fsmonitor.set(watcher.feed());
        *self.evaluator.lock().expect("evaluator lock") =
            Evaluator::new(self.ctx.clone()).watched(watcher);
    }

    /// What git's fsmonitor hook prints for `token` (docs/guide/git.md): the paths changed
    /// since, or "everything" while the watcher starts. It blocks (a cookie round trip).
    pub fn fsmonitor_since(
        &self,
        token: &str,
        work_tree: &std::path::Path,
    ) -> hookvisor_core::watch::FsmonitorAnswer {
        use hookvisor_core::watch::FsmonitorAnswer;
        let Some(feed) = self.fsmonitor.get() else {
            return FsmonitorAnswer::everything("hookvisor:starting");
        };
        // The journal is of this workspace: another work tree's paths are not in it.
        let ours = work_tree
            .canonicalize()
            .is_ok_and(|dir| self.ctx.workspace.canonicalize().is_ok_and(|ws| ws == dir));
        if !ours {
            return FsmonitorAnswer::everything("hookvisor:elsewhere");
        }
        // Watches a moved directory or a `.gitignore` edit asked for are made here unless a
        // turn's evaluation holds the watcher (its scan makes them; until then: everything).
        if let Ok(mut evaluator) = self.evaluator.try_lock()
            && let Some(watcher) = evaluator.watcher_mut()
        {
            watcher.keep_watching();
        }
        feed.since(token)
    }

    /// The end-of-turn evaluation answering `turn` (a fired `turn.end`), with the warm dirty
    /// set when the watcher is running.
    fn evaluate(
        &self,
        options: &hookvisor_core::EvalOptions,
        turn: &hookvisor_core::firing::Firing,
    ) -> Result<hookvisor_core::EvalReport, hookvisor_core::EvalError> {
        let mut evaluator = self.evaluator.lock().expect("evaluator lock");
        if evaluator.watcher().is_none() {
            self.metrics
                .record_scan(hookvisor_core::watch::ScanKind::Full);
            return evaluator.end_turn_with(options, turn);
        }
        let report = evaluator.end_turn_with(options, turn)?;
        if let Some(kind) = evaluator.last_scan() {
            self.metrics.record_scan(kind);
        }
        if let Some(watcher) = evaluator.watcher() {
            // A scan may have made the watches again (a `.gitignore` edit, a moved directory).
            self.metrics.set_watched_dirs(watcher.watched_dirs());
        }
        Ok(report)
    }

    /// Reads status.json and publishes what changed since the last read. It blocks: on the
    /// runtime, call [`AppState::refresh_status_blocking`].
    pub fn refresh_status(&self) {
        let _refreshing = self.refreshing.lock().expect("refresh lock");
        let fresh = match self.store().load() {
            Ok(status) => status,
            Err(e) => {
                tracing::warn!("{e}");
                return;
            }
        };
        let mut seen = self.seen.lock().expect("status lock");
        let (events, finished) = events::status_events(&seen, &fresh);
        let events = events::with_run_events(events, &fresh, &self.store().history());
        for run in finished {
            if let Some(ms) = run.duration_ms {
                self.metrics.observe_run(&run.hook_id, ms);
            }
        }
        for event in events {
            self.hub.publish(event);
        }
        *seen = fresh;
    }

    /// [`AppState::refresh_status`] off the runtime thread.
    async fn refresh_status_blocking(self: &Arc<Self>) {
        let state = self.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || state.refresh_status()).await {
            tracing::warn!("reading status.json failed: {e}");
        }
    }

    /// status.json with an entry for every discovered phase-1 hook: one that never ran is
    /// `pending` (an event hook has no entry until its event fires). It blocks (a file read).
    fn status_with_discovered(&self) -> Result<Status, ServerError> {
        let mut status = self
            .store()
            .load()
            .map_err(|e| ServerError::Internal(e.to_string()))?;
        for hook in self.discovery().hooks.iter().filter(|h| h.phase1) {
            if !status.hooks.contains_key(&hook.id) {
                status.entry(hook, &self.ctx);
            }
        }
        Ok(status)
    }

    /// [`AppState::rediscover`] off the runtime thread: it reads files and may run git.
    async fn rediscover_blocking(self: &Arc<Self>) {
        let state = self.clone();
        if let Err(e) = tokio::task::spawn_blocking(move || state.rediscover()).await {
            tracing::warn!("hook discovery failed: {e}");
        }
    }

    /// The hook with this id, reading the directory again if the watcher has not caught up.
    async fn hook(self: &Arc<Self>, id: &str) -> Result<Hook, ServerError> {
        if let Some(hook) = self.discovery().get(id) {
            return Ok(hook.clone());
        }
        self.rediscover_blocking().await;
        self.discovery()
            .get(id)
            .cloned()
            .ok_or_else(|| ServerError::UnknownHook(id.to_owned()))
    }

    /// Accepts an id that names a hook now, of any kind (`GET /v1/hooks` lists it), or one
    /// recorded in status.json (its log remains).
    async fn known_id(self: &Arc<Self>, id: &str) -> Result<(), ServerError> {
        let plain = !id.is_empty()
            && id
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'_');
        let recorded = || {
            self.seen
                .lock()
                .expect("status lock")
                .hooks
                .contains_key(id)
        };
        let listed = || self.discovery().hooks.iter().any(|h| h.id == id);
        if plain && !recorded() && !listed() {
            self.rediscover_blocking().await;
        }
        if plain && (recorded() || listed()) {
            Ok(())
        } else {
            Err(ServerError::UnknownHook(id.to_owned()))
        }
    }

    /// Takes the job slot, or says what holds it.
    fn begin(self: &Arc<Self>, kind: JobKind) -> Result<(JobGuard, CancelToken), ServerError> {
        let mut slot = self.job.lock().expect("job lock");
        if let Some(job) = slot.as_ref() {
            return Err(ServerError::Busy(job.kind.to_string()));
        }
        Ok(self.occupy(&mut slot, kind))
    }

    fn occupy(self: &Arc<Self>, slot: &mut Option<Job>, kind: JobKind) -> (JobGuard, CancelToken) {
        let cancel = CancelToken::new();
        let (done_tx, done_rx) = channel::channel(None);
        *slot = Some(Job {
            kind,
            cancel: cancel.clone(),
            done: done_rx,
        });
        let guard = JobGuard {
            state: self.clone(),
            done: done_tx,
        };
        (guard, cancel)
    }

    /// Takes the job slot for an evaluation; while one runs, waits for it and shares its
    /// outcome; while an explicit run holds the slot, waits for it (module docs). Nothing is
    /// held while waiting, so a client that goes away leaves nothing behind.
    async fn begin_turn(self: &Arc<Self>) -> TurnSlot {
        loop {
            let (mut done, shared) = {
                let mut slot = self.job.lock().expect("job lock");
                match slot.as_ref() {
                    None => {
                        let (guard, cancel) = self.occupy(&mut slot, JobKind::Evaluation);
                        return TurnSlot::Run(guard, cancel);
                    }
                    Some(job) => {
                        self.hub.publish(Event::TurnWaiting {
                            behind: job.kind.to_string(),
                        });
                        (job.done.clone(), job.kind == JobKind::Evaluation)
                    }
                }
            };
            // The sender never sends but the outcome: `changed` fails once the job's guard
            // drops, after the outcome if there is one.
            let _ = done.wait_for(Option::is_some).await;
            let outcome = done.borrow().clone();
            // A pass judged the workspace as that evaluation found it, maybe before the
            // latest edits (the agent can start a turn end itself): this turn end judges again.
            match outcome {
                Some(Outcome::Report(report)) if report.action == Action::Pass => {}
                Some(outcome) if shared => return TurnSlot::Shared(outcome),
                _ => {}
            }
        }
    }

    /// Takes the gate of `session` (docs/EVENTS.md §5 rule 4), waiting in arrival order while
    /// another gate of the session runs; refused when too many wait or the wait is too long
    /// (module docs). The gate is released when the guard drops, however the firing ends.
    async fn begin_gate(self: &Arc<Self>, session: String) -> Result<GateGuard, ServerError> {
        let (ticket, turn) = GateTicket::take(self, session)?;
        match tokio::time::timeout(GATE_WAIT, turn.acquire_owned()).await {
            Ok(permit) => Ok(GateGuard {
                _permit: permit.expect("the gate semaphore is never closed"),
                _ticket: ticket,
            }),
            Err(_) => Err(ServerError::GateWaitedTooLong {
                session: ticket.session.clone(),
                waited: GATE_WAIT,
            }),
        }
    }

    /// Tells the event streams how many gates of `session` are in the server.
    fn publish_queue(&self, session: &str, present: usize) {
        self.hub.publish(Event::GateQueue {
            session: session.to_owned(),
            waiting: present.saturating_sub(1),
        });
    }

    /// Cancels the running job if `which` selects it, and waits until it has ended (its hook
    /// killed and recorded as pending). Returns whether a job was cancelled.
    async fn cancel(&self, which: impl Fn(&JobKind) -> bool) -> bool {
        let done = {
            let slot = self.job.lock().expect("job lock");
            match slot.as_ref() {
                Some(job) if which(&job.kind) => {
                    job.cancel.cancel();
                    Some(job.done.clone())
                }
                _ => None,
            }
        };
        match done {
            Some(mut done) => {
                // `changed` fails exactly when the job's guard drops.
                while done.changed().await.is_ok() {}
                true
            }
            None => false,
        }
    }
}

/// Installs the git pre-commit and post-commit hooks when there are hooks for them, removes
/// ours when there are none; as root, only in a workspace no other account can change. A
/// failure is logged: the API keeps working without it.
fn sync_precommit(ctx: &Context, discovery: &Discovery) {
    match hookvisor_core::precommit::ensure_git_hooks(ctx, discovery) {
        Ok(Some(done)) => tracing::debug!("git hooks: {done:?}"),
        Ok(None) => tracing::warn!(
            "git hooks not synced: as root, {} can be changed by another account; run serve as \
             its user",
            ctx.workspace.display()
        ),
        Err(e) => tracing::warn!("{e}"),
    }
}

/// The router: every route of docs/DESIGN.md "HTTP API" over `state`, for a server listening where
/// `guard` says.
pub fn app(state: Arc<AppState>, guard: Guard) -> Router {
    Router::new()
        .route("/", get(routes::dashboard))
        .route("/hooks/status", get(routes::status))
        .route("/hooks/{id}/output", get(routes::output))
        .route("/hooks/{id}/rerun", post(routes::rerun))
        .route("/hooks/{id}/runs", get(runs::list))
        .route("/hooks/{id}/runs/{run}/output", get(runs::output))
        .route("/v1/hooks", get(routes::hooks))
        .route("/v1/children", get(children::list))
        .route("/v1/children/{name}/status", get(children::status))
        .route("/v1/sessions", get(runs::sessions))
        .route("/v1/timeline", get(runs::timeline))
        .route("/v1/turns/end", post(routes::turn_end))
        .route("/v1/turns/start", post(routes::turn_start))
        .route("/v1/events", get(routes::events))
        .route("/v1/events/{event}", post(routes::fire_event))
        .route("/v1/fsmonitor", post(routes::fsmonitor))
        .route("/metrics", get(routes::metrics))
        // Routes above need the token; routes below do not.
        .route_layer(middleware::from_fn_with_state(state.clone(), require_token))
        .route("/healthz", get(routes::healthz))
        .fallback(routes::not_found)
        .with_state(state)
        // Layers below wrap those above, and apply to every route and the fallback: the guard
        // refuses a web page's request before its body is read.
        .layer(middleware::from_fn(conn::read_body_in_time))
        .layer(middleware::from_fn_with_state(guard, guard::guard))
}

async fn require_token(
    State(state): State<Arc<AppState>>,
    request: Request,
    next: Next,
) -> Response {
    let Some(expected) = state.token.as_deref() else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.split_once(' ')?;
            scheme
                .eq_ignore_ascii_case("bearer")
                .then_some(token.trim())
        });
    match given {
        Some(given) if same_token(expected.as_bytes(), given.as_bytes()) => next.run(request).await,
        _ => ServerError::Unauthorized.into_response(),
    }
}

/// Compares in time that depends only on the expected token's length, so response timing does
/// not reveal how much of a guess was right.
fn same_token(expected: &[u8], given: &[u8]) -> bool {
    let mut diff = expected.len() ^ given.len();
    for (i, e) in expected.iter().enumerate() {
        diff |= usize::from(e ^ given.get(i).copied().unwrap_or(0));
    }
    std::hint::black_box(diff) == 0
}

/// Runs the server until a signal (or, with an agent, until the agent exits); returns the exit
/// status: 0, or the agent's.
pub fn run(config: Config) -> Result<i32, ServeError> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        // Hook runs are the only blocking work and run one at a time; a few threads cover the
        // file reads of concurrent requests too. Idle threads go away quickly to keep RSS low.
        .max_blocking_threads(4)
        .thread_keep_alive(Duration::from_secs(2))
        .build()
        .map_err(setup("cannot start the async runtime"))?;
    let result = runtime.block_on(serve(config));
    // A read stuck on a hung file keeps its blocking thread; it must not keep the process.
    runtime.shutdown_timeout(SHUTDOWN_GRACE);
    result
}

async fn serve(config: Config) -> Result<i32, ServeError> {
    // 1. Signals first, so none that arrives from now on is lost.
    let mut signals = agent::Signals::new().map_err(setup("cannot install signal handlers"))?;

    // 2. Runs left `running` by a server that died are pending again; hooks read; git hook synced.
    let store = StatusStore::for_context(&config.ctx);
    if let Err(e) = store.recover_interrupted() {
        tracing::warn!("{e}");
    }
    let state = AppState::new(config.ctx.clone(), config.token.clone(), config.max_retries);
    sync_precommit(&state.ctx, &state.discovery());

    // 3. Listen; nothing is accepted yet.
    enum Bound {
        Tcp(tokio::net::TcpListener, SocketAddr),
        Unix(tokio::net::UnixListener, std::path::PathBuf),
    }
    let bound = match &config.listen {
        Listen::Tcp(addr) => {
            let listener = tokio::net::TcpListener::bind(addr)
                .await
                .map_err(|source| ListenError::Bind {
                    what: addr.to_string(),
                    source,
                })?;
            let local = listener.local_addr().map_err(setup("local address"))?;
            Bound::Tcp(listener, local)
        }
        Listen::Unix(path) => Bound::Unix(listen::bind_unix(path)?, path.clone()),
    };

    // 4. Watch the hooks directory and status.json before answering anyone, so that a change
    //    made once the server answers is seen; the workspace watch for the turns' scans warms up
    //    in the background.
    let watcher = watch::spawn(state.clone()).await;
    let warm = state.clone();
    tokio::task::spawn_blocking(move || warm.start_change_watch());

    // 5. Serve, and say where on the first line of stdout (tests and scripts read it).
    let stop = state.shutdown.subscribe();
    let (server, url, socket) = match bound {
        Bound::Tcp(listener, local) => {
            let router = app(state.clone(), Guard::Tcp(local));
            let task = tokio::spawn(conn::serve(listener, router, stop));
            (task, format!("http://{local}"), None)
        }
        Bound::Unix(listener, path) => {
            let router = app(state.clone(), Guard::Unix);
            let task = tokio::spawn(conn::serve(listener, router, stop));
            (task, format!("unix:{}", path.display()), Some(path))
        }
    };
    announce(&url).map_err(setup("cannot write to stdout"))?;

    // 6. The agent, if any, then wait for the end.
    let exit = if config.agent.is_empty() {
        let signal = signals.next().await;
        tracing::info!("{signal}: shutting down");
        0
    } else {
        let env = agent_env(&url, socket.as_deref());
        let child = agent::Agent::spawn(&config.agent, &env).map_err(setup(format!(
            "cannot start {}",
            config.agent[0].to_string_lossy()
        )))?;
        child.supervise(&mut signals).await
    };

    // 7. Graceful shutdown: stop the running hook (it is recorded as pending), close the event
    //    streams, let requests in flight finish.
    state.cancel(|_| true).await;
    state.shutdown.send_replace(true);
    watcher.abort();
    match tokio::time::timeout(SHUTDOWN_GRACE, server).await {
        Ok(Err(e)) => tracing::warn!("server: {e}"),
        Err(_) => tracing::warn!("connections still open after {SHUTDOWN_GRACE:?}; closing"),
        Ok(Ok(())) => {}
    }
    if let Some(path) = socket {
        let _ = std::fs::remove_file(path);
    }
    Ok(exit)
}

fn announce(url: &str) -> io::Result<()> {
    let mut out = io::stdout().lock();
    writeln!(out, "listening on {url}")?;
    out.flush()
}

/// `HOOKVISOR_URL` (and `HOOKVISOR_SOCKET` for a socket, where the URL's host is a placeholder:
/// `curl --unix-socket "$HOOKVISOR_SOCKET" "$HOOKVISOR_URL/healthz"`).
fn agent_env(url: &str, socket: Option<&std::path::Path>) -> Vec<(OsString, OsString)> {
    match socket {
        None => vec![("HOOKVISOR_URL".into(), url.into())],
        Some(path) => vec![
            ("HOOKVISOR_URL".into(), "http://localhost".into()),
            ("HOOKVISOR_SOCKET".into(), path.into()),
        ],
    }
}

#[cfg(test)]
mod tests;

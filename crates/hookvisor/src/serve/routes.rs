//! The handlers: typed signatures over [`AppState`], one error type, JSON everywhere but the
//! dashboard, `/healthz` and `/metrics`.

use std::io::{self, Read, Seek, SeekFrom};
use std::path::Path;
use std::sync::Arc;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{StatusCode, header};
use axum::response::{Html, IntoResponse, Response};
use hookvisor_core::decision::Reply;
use hookvisor_core::event::Event as HookEvent;
use hookvisor_core::fire::{FireError, fire_deciding};
use hookvisor_core::firing::Firing;
use hookvisor_core::{EvalError, EvalOptions, EvalReport, Evaluator, Trigger, discover_workspace};
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::events::Event;
use super::{AppState, GateGuard, JobKind, Outcome, TurnSlot, metrics};

/// How much of a log `/hooks/{id}/output` returns: the end, where failures are reported; 200 KiB
/// as in discobot.
pub const OUTPUT_TAIL: u64 = 200 * 1024;

/// Every way a request fails, each with its status; the body is always `{"error": "..."}`.
#[derive(Debug)]
pub enum ServerError {
    /// No hook with this id.
    UnknownHook(String),
    /// No such route.
    NoRoute(String),
    /// Missing or wrong bearer token.
    Unauthorized,
    /// Another evaluation or run holds the hooks.
    Busy(String),
    /// A new turn cancelled this evaluation.
    Cancelled,
    /// The `Host` header names another server (DNS rebinding): see [`super::guard`].
    ForeignHost {
        /// The header as sent.
        host: String,
        /// The port the server listens on, for the advice.
        port: u16,
    },
    /// The request comes from a page of another origin: see [`super::guard`].
    ForeignOrigin {
        /// The header as sent.
        origin: String,
        /// The server's own origin, for the advice.
        own: String,
    },
    /// A request that changes something is not JSON (the `Content-Type` given, or "none").
    NotJson(String),
    /// The request did not arrive in time: see [`super::conn`].
    SlowRequest,
    /// The request body is not what the route takes.
    BadRequest(String),
    /// Too many gates of this session wait already (see [`super::MAX_QUEUED_GATES`]).
    GateQueueFull {
        /// The session.
        session: String,
        /// How many may wait.
        limit: usize,
    },
    /// A gate waited [`super::GATE_WAIT`] for the session's running gate.
    GateWaitedTooLong {
        /// The session.
        session: String,
        /// How long it waited.
        waited: std::time::Duration,
    },
    /// No event by this name; the message names the known ones.
    UnknownEvent(String),
    /// A child of the state dir cannot be read: a bad name 400, none 404, a file hookvisor
    /// did not make 403, the rest 500.
    Child(hookvisor_actions::spawn::ChildrenError),
    /// The core failed (status.json unwritable, ...).
    Internal(String),
    /// No such run of a hook, or no such session: the message says which.
    NotFound(String),
}

impl IntoResponse for ServerError {
    fn into_response(self) -> Response {
        let (status, message) = match &self {
            ServerError::UnknownHook(id) => (
                StatusCode::NOT_FOUND,
                format!("no hook '{id}'; GET /v1/hooks lists the hooks"),
            ),
            ServerError::NotFound(what) => (StatusCode::NOT_FOUND, what.clone()),
            ServerError::NoRoute(path) => (
                StatusCode::NOT_FOUND,
                format!("no route {path}; see docs/DESIGN.md \"HTTP API\""),
            ),
            ServerError::Unauthorized => (
                StatusCode::UNAUTHORIZED,
                "missing or wrong token; send Authorization: Bearer $HOOKVISOR_TOKEN".to_owned(),
            ),
            ServerError::Busy(what) => (
                StatusCode::CONFLICT,
                format!("{what} is running; one evaluation at a time, retry when it is done"),
            ),
            ServerError::Cancelled => (
                StatusCode::CONFLICT,
                "evaluation cancelled by a new turn; the running hook is pending again".to_owned(),
            ),
            ServerError::ForeignHost { host, port } => (
                StatusCode::FORBIDDEN,
                format!(
                    "Host '{host}' is not this server; name it localhost:{port} or \
                     127.0.0.1:{port} (a web page that reached it under another name is refused)"
                ),
            ),
            ServerError::ForeignOrigin { origin, own } => (
                StatusCode::FORBIDDEN,
                format!(
                    "Origin '{origin}' is not this server; web pages other than the dashboard \
                     at {own}/ cannot use the API, clients should send no Origin"
                ),
            ),
            ServerError::NotJson(given) => (
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                format!(
                    "Content-Type {given} refused; send Content-Type: application/json with \
                     every POST, even with an empty body"
                ),
            ),
            ServerError::SlowRequest => (
                StatusCode::REQUEST_TIMEOUT,
                "the request body did not arrive in time; send the whole request at once"
                    .to_owned(),
            ),
            ServerError::BadRequest(why) => (StatusCode::BAD_REQUEST, why.clone()),
            ServerError::GateQueueFull { session, limit } => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "{limit} gates of session '{session}' already wait for the running one; \
                     this one is refused (an adapter denies the call)"
                ),
            ),
            ServerError::GateWaitedTooLong { session, waited } => (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "a gate of session '{session}' waited {}s for the session's running gate; \
                     this one is refused (an adapter denies the call)",
                    waited.as_secs()
                ),
            ),
            ServerError::UnknownEvent(why) => (StatusCode::NOT_FOUND, why.clone()),
            ServerError::Child(err) => {
                use hookvisor_actions::spawn::ChildrenError as E;
                let status = match err {
                    E::BadName { .. } => StatusCode::BAD_REQUEST,
                    E::NotFound { .. } => StatusCode::NOT_FOUND,
                    E::Unusable { .. } => StatusCode::FORBIDDEN,
                    _ => StatusCode::INTERNAL_SERVER_ERROR,
                };
                (status, err.to_string())
            }
            ServerError::Internal(why) => (StatusCode::INTERNAL_SERVER_ERROR, why.clone()),
        };
        let mut body = json!({ "error": message });
        if matches!(self, ServerError::Cancelled) {
            body["cancelled"] = Value::Bool(true);
        }
        let mut response = (status, Json(body)).into_response();
        if matches!(self, ServerError::Unauthorized) {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, "Bearer".parse().expect("valid"));
        }
        response
    }
}

impl From<EvalError> for ServerError {
    fn from(err: EvalError) -> Self {
        match err {
            EvalError::Cancelled => ServerError::Cancelled,
            other => ServerError::Internal(other.to_string()),
        }
    }
}

type Result<T, E = ServerError> = std::result::Result<T, E>;

/// `GET /`: the dashboard, one self-contained page.
pub async fn dashboard() -> Html<&'static str> {
    Html(include_str!("dashboard.html"))
}

/// `GET /healthz`: answers while the server runs; never needs the token.
pub async fn healthz() -> &'static str {
    "ok\n"
}

/// `GET /hooks/status`: status.json, with hooks that never ran listed as `pending`.
pub async fn status(State(state): State<Arc<AppState>>) -> Result<Json<Value>> {
    let status = blocking(move || state.status_with_discovered()).await??;
    Ok(Json(
        serde_json::to_value(status).expect("status serialises"),
    ))
}

/// `GET /v1/hooks`: the `hookvisor list --json` shape, problems included.
pub async fn hooks(State(state): State<Arc<AppState>>) -> Json<Value> {
    let discovery = state.discovery();
    let mut listed = crate::list::list_json(&discovery, &state.ctx.workspace);
    // Every hook lists its event fields; the page also needs to know which ones the rerun
    // route runs (the phase-1 hooks).
    if let Some(hooks) = listed["hooks"].as_array_mut() {
        for hook in hooks {
            let id = hook["id"].as_str().unwrap_or_default();
            hook["rerun"] = Value::Bool(discovery.get(id).is_some());
        }
    }
    Json(listed)
}

/// `GET /hooks/{id}/output`: the end of the hook's last log, in discobot's shape: `output` (the
/// last [`OUTPUT_TAIL`] bytes, in whole lines), `sizeBytes` (the whole log), `displayedBytes`
/// (the UTF-8 length of `output`) and `tooLarge` (whether `output` is only the end);
/// `truncated` is the older name of `tooLarge`, kept for clients that read it.
pub async fn output(
    State(state): State<Arc<AppState>>,
    UrlPath(id): UrlPath<String>,
) -> Result<Json<Value>> {
    state.known_id(&id).await?;
    let path = state.ctx.log_path(&id);
    let (output, size, too_large) = blocking(move || read_tail(&path, OUTPUT_TAIL))
        .await?
        .map_err(|e| ServerError::Internal(format!("cannot read the log of '{id}': {e}")))?;
    Ok(Json(json!({
        "displayedBytes": output.len(),
        "output": output,
        "sizeBytes": size,
        "tooLarge": too_large,
        "truncated": too_large,
    })))
}

/// `POST /hooks/{id}/rerun`: runs the hook now and answers with its result.
pub async fn rerun(
    State(state): State<Arc<AppState>>,
    UrlPath(id): UrlPath<String>,
) -> Result<Json<Value>> {
    let hook = state.hook(&id).await?;
    let (job, cancel) = state.begin(JobKind::Rerun(id))?;
    let ctx = state.ctx.clone();
    let result = run_blocking(move || {
        let result = Evaluator::new(ctx).run_now(&hook, Some(&cancel));
        drop(job);
        result
    })
    .await?;
    Ok(Json(json!({
        "hookId": result.hook_id,
        "success": result.success,
        "exitCode": result.exit_code,
        "timedOut": result.timed_out,
    })))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TurnBody {
    #[serde(default = "user")]
    trigger: Trigger,
}

fn user() -> Trigger {
    Trigger::User
}

/// `POST /v1/turns/end` `{"trigger":"user|hook|loop"}`: the end-of-turn evaluation, as eval
/// JSON; the same hooks and status records as `POST /v1/events/turn.end` (docs/EVENTS.md §3).
pub async fn turn_end(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Json<Value>> {
    let trigger = parse_turn(&body)?;
    let mut turn = Firing::new(HookEvent::TurnEnd);
    turn.trigger = trigger.as_str().to_owned();
    let report = end_turn(&state, turn).await?;
    Ok(Json(
        serde_json::to_value(&report).expect("reports serialise"),
    ))
}

/// One end-of-turn evaluation on the server's evaluator, with its metrics and SSE events; or,
/// when one is running, its outcome (a `/v1/turns/start` cancels it): see the module docs of
/// [`super`].
async fn end_turn(state: &Arc<AppState>, mut turn: Firing) -> Result<EvalReport> {
    // The reply waits for the evaluation: an unawaited hook runs apart (docs/EVENTS.md §1.3).
    turn.detach_unawaited = true;
    let (job, cancel) = match state.begin_turn().await {
        TurnSlot::Run(job, cancel) => (job, cancel),
        TurnSlot::Shared(Outcome::Report(report)) => return Ok(EvalReport::clone(&report)),
        TurnSlot::Shared(Outcome::Cancelled) => return Err(ServerError::Cancelled),
        TurnSlot::Shared(Outcome::Failed(why)) => return Err(ServerError::Internal(why)),
    };
    let options = EvalOptions {
        trigger: Trigger::from_word(&turn.trigger),
        max_retries: state.max_retries,
        cancel: Some(cancel),
        hook_turns: None,
    };
    let evaluator = state.clone();
    let outcome = run_blocking(move || {
        let report = evaluator.evaluate(&options, &turn);
        job.finish(match &report {
            Ok(report) => Outcome::Report(Arc::new(report.clone())),
            Err(EvalError::Cancelled) => Outcome::Cancelled,
            Err(e) => Outcome::Failed(e.to_string()),
        });
        drop(job);
        report
    })
    .await;
    match outcome {
        Ok(report) => {
            state.metrics.record_evaluation(&report);
            state.hub.publish(Event::EvaluationDone {
                action: report.action,
                pending: report.pending.clone(),
            });
            Ok(report)
        }
        Err(ServerError::Cancelled) => {
            state.hub.publish(Event::EvaluationCancelled);
            Err(ServerError::Cancelled)
        }
        Err(e) => Err(e),
    }
}

/// `POST /v1/turns/start`: a user message arrived; cancels a running evaluation and answers
/// once its hook is killed and pending again.
pub async fn turn_start(State(state): State<Arc<AppState>>, body: Bytes) -> Result<Json<Value>> {
    parse_turn(&body)?;
    let cancelled = state.cancel(|kind| *kind == JobKind::Evaluation).await;
    Ok(Json(json!({ "cancelled": cancelled })))
}

/// What `POST /v1/events/{event}` takes: every field optional (docs/EVENTS.md §3, §5 rule 4).
#[derive(Debug, Default, PartialEq)]
struct EventBody {
    session_id: Option<String>,
    trigger: Option<String>,
    data: Map<String, Value>,
}

/// Reads an event body by hand rather than with serde, so that each refusal names its field.
/// An empty body is an empty firing.
fn parse_event_body(body: &[u8]) -> Result<EventBody> {
    let mut parsed = EventBody::default();
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(parsed);
    }
    let fields = match serde_json::from_slice::<Value>(body) {
        Ok(Value::Object(fields)) => fields,
        Ok(_) => {
            return Err(ServerError::BadRequest(
                "bad body: expected a JSON object {\"session_id\"?, \"trigger\"?, \"data\"?}"
                    .to_owned(),
            ));
        }
        Err(e) => return Err(ServerError::BadRequest(format!("bad body: not JSON ({e})"))),
    };
    let bad = |field: &str, want: &str| {
        ServerError::BadRequest(format!("bad field '{field}': expected {want}"))
    };
    for (name, value) in fields {
        match (name.as_str(), value) {
            ("session_id", Value::String(id)) => parsed.session_id = Some(id),
            ("session_id", _) => return Err(bad("session_id", "a string")),
            ("trigger", Value::String(t)) if matches!(t.as_str(), "user" | "hook" | "loop") => {
                parsed.trigger = Some(t)
            }
            ("trigger", _) => return Err(bad("trigger", "\"user\", \"hook\" or \"loop\"")),
            ("data", Value::Object(data)) => parsed.data = data,
            ("data", _) => return Err(bad("data", "a JSON object")),
            (other, _) => {
                return Err(ServerError::BadRequest(format!(
                    "unknown field '{other}'; the body takes session_id, trigger and data"
                )));
            }
        }
    }
    Ok(parsed)
}

/// `POST /v1/events/{event}` `{session_id?, trigger?, data?}`: fires the event's hooks on a fresh
/// discovery and answers with the reply (docs/EVENTS.md §3, §5 rule 4); a block is 200 too.
pub async fn fire_event(
    State(state): State<Arc<AppState>>,
    UrlPath(name): UrlPath<String>,
    body: Bytes,
) -> Result<Json<Value>> {
    let event: HookEvent = name
        .parse()
        .map_err(|e: hookvisor_core::event::UnknownEvent| {
            ServerError::UnknownEvent(e.to_string())
        })?;
    let body = parse_event_body(&body)?;
    if event == HookEvent::TurnStart {
        // A prompt arrived: the evaluation of the previous turn judges stale work, as on
        // `/v1/turns/start` (docs/EVENTS.md §3.1: UserPromptSubmit cancels eval).
        state.cancel(|kind| *kind == JobKind::Evaluation).await;
    }
    let gate = if event.is_gate() {
        let session = body
            .session_id
            .clone()
            .unwrap_or_else(|| state.ctx.session_id.clone());
        Some(state.begin_gate(session).await?)
    } else {
        None
    };
    let mut firing = Firing::new(event);
    firing.data = body.data;
    if let Some(trigger) = body.trigger {
        firing.trigger = trigger;
    }
    firing.session = body.session_id;
    firing.max_attempts = state.max_retries;
    let reply = if firing.event == HookEvent::TurnEnd {
        // Rule 8: the evaluation of `/v1/turns/end`, its watcher and its one-at-a-time job.
        let reply = end_turn(&state, firing).await.map(|report| report.reply());
        drop(gate);
        reply?
    } else {
        fire_blocking(&state, firing, gate).await?
    };
    state.hub.publish(Event::Decided {
        event: reply.event.clone(),
        decision: reply.decision,
        reason: reply.reason.clone(),
        results: reply.results.clone(),
    });
    Ok(Json(
        serde_json::to_value(&reply).expect("replies serialise"),
    ))
}

/// Fires an event other than `turn.end` on the blocking pool, on a fresh discovery.
async fn fire_blocking(
    state: &Arc<AppState>,
    firing: Firing,
    gate: Option<GateGuard>,
) -> Result<Reply> {
    let ctx = state.ctx.clone();
    let (answer, decided) = tokio::sync::oneshot::channel();
    let answer = std::sync::Mutex::new(Some(answer));
    let send = move |reply: std::result::Result<Reply, FireError>| {
        let taken = answer.lock().map(|mut a| a.take());
        if let Ok(Some(answer)) = taken {
            // The client may be gone; the hooks' records stand all the same.
            let _ = answer.send(reply);
        }
    };
    tokio::task::spawn_blocking(move || {
        // Fresh: a hook written a moment ago must bind, watcher or not.
        let discovery = discover_workspace(&ctx);
        // §3: the reply goes out when the `pre` pass ends; `post` hooks run after it, here.
        let fired = fire_deciding(&ctx, &discovery, &firing, |reply| {
            // The gate is decided: the session's next gate may start while `post` hooks run.
            drop(gate);
            send(Ok(reply.clone()));
        });
        // Before the decision this answers the request; after it, `send` does nothing.
        if let Err(e) = fired {
            tracing::warn!("{}: {e}", firing.event);
            send(Err(e));
        }
    });
    decided
        .await
        .map_err(|_| ServerError::Internal("the event's worker ended without a decision".into()))?
        .map_err(|e| match e {
            FireError::Cancelled => ServerError::Cancelled,
            other => ServerError::Internal(other.to_string()),
        })
}

/// `GET /v1/events`: server-sent events, see [`super::events`].
pub async fn events(State(state): State<Arc<AppState>>) -> impl IntoResponse {
    state.hub.stream(state.shutdown.subscribe())
}

/// `GET /metrics`: Prometheus text.
pub async fn metrics(State(state): State<Arc<AppState>>) -> Result<Response> {
    let store = state.store();
    let status = blocking(move || store.load())
        .await?
        .map_err(|e| ServerError::Internal(e.to_string()))?;
    let text = state.metrics.render(&status, &state.discovery());
    Ok(([(header::CONTENT_TYPE, metrics::CONTENT_TYPE)], text).into_response())
}

/// Any other path.
pub async fn not_found(uri: axum::http::Uri) -> ServerError {
    ServerError::NoRoute(uri.path().to_owned())
}

/// An empty body is a user turn; anything else must be `{"trigger": "user"|"hook"|"loop"}`.
fn parse_turn(body: &[u8]) -> Result<Trigger> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(Trigger::User);
    }
    serde_json::from_slice::<TurnBody>(body)
        .map(|b| b.trigger)
        .map_err(|e| {
            ServerError::BadRequest(format!(
                "bad body ({e}); send {{\"trigger\": \"user\"}} or {{\"trigger\": \"hook\"}}"
            ))
        })
}

/// Runs hook work on the blocking pool: the executor waits on processes synchronously.
async fn run_blocking<T: Send + 'static>(
    work: impl FnOnce() -> std::result::Result<T, EvalError> + Send + 'static,
) -> Result<T> {
    blocking(work).await?.map_err(ServerError::from)
}

/// Runs `work`, which reads files or waits on processes, on the blocking pool: on the runtime
/// thread, one slow read would stall every route.
pub(super) async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ServerError::Internal(format!("worker failed: {e}")))
}

/// The last `limit` bytes of a log as text (whole lines when cut), its size, and whether it was
/// cut. A hook that never ran has an empty log.
pub(super) fn read_tail(path: &Path, limit: u64) -> io::Result<(String, u64, bool)> {
    // The agent can write the state dir: a log replaced by a link to a secret or by a FIFO
    // must be refused, not served or waited on.
    let file = match hookvisor_core::status::open_state_file(path) {
        Ok(Ok(file)) => file,
        Ok(Err(why)) => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("{} is {why}, not a log hookvisor wrote", path.display()),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok((String::new(), 0, false)),
        Err(e) => return Err(e),
    };
    let (text, start, size) = tail_of(file, limit)?;
    Ok((text, size, start > 0))
}

/// The last `limit` bytes of an open log as text, whole lines when cut: the text, the byte it
/// starts at, and the log's size.
pub(super) fn tail_of(mut file: std::fs::File, limit: u64) -> io::Result<(String, u64, u64)> {
    let size = file.metadata()?.len();
    let mut start = size.saturating_sub(limit);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::with_capacity((size - start) as usize);
    file.take(limit).read_to_end(&mut bytes)?;
    if start > 0
        && let Some(newline) = bytes.iter().position(|&b| b == b'\n')
    {
        bytes.drain(..=newline);
        start += newline as u64 + 1;
    }
    Ok((String::from_utf8_lossy(&bytes).into_owned(), start, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_log_replaced_by_a_link_or_a_fifo_is_refused_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        std::fs::write(&secret, "key\n").unwrap();
        let link = dir.path().join("link.log");
        std::os::unix::fs::symlink(&secret, &link).unwrap();
        let err = read_tail(&link, 100).unwrap_err().to_string();
        assert!(err.contains("not a log hookvisor wrote"), "{err}");
        let fifo = dir.path().join("fifo.log");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = read_tail(&fifo, 100).unwrap_err().to_string();
        assert!(err.contains("not a log hookvisor wrote"), "{err}");
        assert_eq!(read_tail(&dir.path().join("none.log"), 100).unwrap().1, 0);
    }

    #[test]
    fn tails_keep_whole_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        let cases: [(&str, u64, &str, bool); 5] = [
            ("", 10, "", false),
            ("one\ntwo\n", 100, "one\ntwo\n", false),
            ("one\ntwo\nthree\n", 8, "three\n", true),
            ("one\ntwo\nthree\n", 6, "", true),
            ("héllo\n", 6, "", true),
        ];
        for (content, limit, want, cut) in cases {
            std::fs::write(&path, content).unwrap();
            let (text, size, truncated) = read_tail(&path, limit).unwrap();
            assert_eq!(
                (text.as_str(), size, truncated),
                (want, content.len() as u64, cut),
                "{content:?} limit {limit}"
            );
        }
        let missing = read_tail(&dir.path().join("none.log"), 10).unwrap();
        assert_eq!(missing, (String::new(), 0, false));
    }

    #[test]
    fn event_bodies_name_the_bad_field() {
        let ok =
            parse_event_body(br#"{"session_id":"s","trigger":"loop","data":{"a":1}}"#).unwrap();
        assert_eq!(ok.session_id.as_deref(), Some("s"));
        assert_eq!(ok.trigger.as_deref(), Some("loop"));
        assert_eq!(ok.data.get("a"), Some(&json!(1)));
        assert_eq!(parse_event_body(b" ").unwrap(), EventBody::default());
        let cases: [(&str, &str); 7] = [
            (r#"{"data":[1]}"#, "'data'"),
            (r#"{"trigger":"cron"}"#, "'trigger'"),
            (r#"{"trigger":1}"#, "'trigger'"),
            (r#"{"session_id":7}"#, "'session_id'"),
            (r#"{"sesion_id":"x"}"#, "'sesion_id'"),
            ("[1]", "JSON object"),
            ("{", "not JSON"),
        ];
        for (body, want) in cases {
            match parse_event_body(body.as_bytes()) {
                Err(ServerError::BadRequest(why)) => assert!(why.contains(want), "{body}: {why}"),
                other => panic!("{body}: {other:?}"),
            }
        }
    }

    #[test]
    fn turn_bodies() {
        let cases: [(&str, Option<Trigger>); 6] = [
            ("", Some(Trigger::User)),
            ("  \n", Some(Trigger::User)),
            (r#"{"trigger":"hook"}"#, Some(Trigger::Hook)),
            (r#"{"trigger":"user"}"#, Some(Trigger::User)),
            (r#"{"trigger":"robot"}"#, None),
            (r#"{"trigge":"user"}"#, None),
        ];
        for (body, want) in cases {
            assert_eq!(parse_turn(body.as_bytes()).ok(), want, "{body:?}");
        }
    }
}

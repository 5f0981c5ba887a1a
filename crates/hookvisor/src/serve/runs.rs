//! The run history of each hook (`hookvisor_core::status::history`), read from disk on every
//! request: the server keeps none of it in memory.

use std::collections::BTreeMap;
use std::io::{self, Read, Seek, SeekFrom};
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path as UrlPath, Query, State};
use hookvisor_actions::spawn::{is_child_name, list_children};
use hookvisor_core::state::StateDir;
use hookvisor_core::status::history::{History, MAX_RUNS, RunRecord};
use hookvisor_core::status::{HookStatus, RunResult};
use serde::Deserialize;
use serde_json::{Value, json};

use super::AppState;
use super::routes::{OUTPUT_TAIL, ServerError, blocking, tail_of};

/// Runs answered when `?limit=` is not given.
const DEFAULT_LIMIT: usize = 50;

/// `?limit=N`.
#[derive(Debug, Deserialize)]
pub struct Limit {
    limit: Option<usize>,
}

/// `?offset=N`.
#[derive(Debug, Deserialize)]
pub struct Offset {
    offset: Option<u64>,
}

/// The run that is going on now, from status.json: its number is the next one.
fn running(entry: Option<&HookStatus>, last: u64) -> Option<RunRecord> {
    let entry = entry.filter(|e| e.last_result == RunResult::Running)?;
    Some(RunRecord {
        run: entry.run_count.max(last).saturating_add(1),
        started_at: entry.last_run_at.clone().unwrap_or_default(),
        result: RunResult::Running.as_str().to_owned(),
        event: entry.event.clone(),
        has_output: true,
        ..RunRecord::default()
    })
}

/// `GET /hooks/{id}/runs?limit=N`: `{"hookId", "runs": [...]}`, newest first, at most `limit`
/// (50 by default, 200 at most); a run going on now comes first with `result: running`.
pub async fn list(
    State(state): State<Arc<AppState>>,
    UrlPath(id): UrlPath<String>,
    Query(query): Query<Limit>,
) -> Result<Json<Value>, ServerError> {
    state.known_id(&id).await?;
    let limit = query.limit.unwrap_or(DEFAULT_LIMIT).min(MAX_RUNS);
    let runs = blocking(move || {
        let store = state.store();
        let mut runs = store.history().runs(&id, limit);
        let entry = store.load().ok().and_then(|s| s.hooks.get(&id).cloned());
        if let Some(now) = running(entry.as_ref(), runs.first().map_or(0, |r| r.run)) {
            runs.insert(0, now);
            runs.truncate(limit);
        }
        json!({ "hookId": id, "runs": runs })
    })
    .await?;
    Ok(Json(runs))
}

/// `GET /hooks/{id}/runs/{run}/output?offset=N`: `{"output", "offset", "nextOffset",
/// "sizeBytes", "running"}`, the run's log from byte `offset` (by default the last 200 KiB in
/// whole lines, as `/hooks/{id}/output`) up to `nextOffset`; the running run's log is the live
/// `output/<id>.log`, so a page polls with `?offset=<nextOffset>` and appends.
pub async fn output(
    State(state): State<Arc<AppState>>,
    UrlPath((id, run)): UrlPath<(String, u64)>,
    Query(query): Query<Offset>,
) -> Result<Json<Value>, ServerError> {
    state.known_id(&id).await?;
    let ctx = state.ctx.clone();
    blocking(move || {
        let store = state.store();
        let history = store.history();
        let kept = history.run(&id, run);
        let last = history.runs(&id, 1).first().map_or(0, |r| r.run);
        let entry = store.load().ok().and_then(|s| s.hooks.get(&id).cloned());
        let now = running(entry.as_ref(), last).filter(|r| r.run == run);
        let unknown = || ServerError::NotFound(format!("no run {run} of hook '{id}'"));
        let read = |file: io::Result<Result<std::fs::File, String>>| match file {
            Ok(Ok(file)) => read_from(file, query.offset),
            Ok(Err(why)) => Err(ServerError::Internal(format!(
                "the log of run {run} of '{id}' {why}, not a log hookvisor wrote"
            ))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok((String::new(), 0, 0, 0)),
            Err(e) => Err(ServerError::Internal(format!(
                "cannot read the log of run {run} of '{id}': {e}"
            ))),
        };
        let (output, start, next, size) = if now.is_some() {
            read(hookvisor_core::status::open_state_file(&ctx.log_path(&id)))?
        } else if let Some(record) = kept {
            if !record.has_output {
                (String::new(), 0, 0, 0)
            } else {
                read(history.open_log(&id, run))?
            }
        } else {
            return Err(unknown());
        };
        Ok(Json(json!({
            "output": output,
            "offset": start,
            "nextOffset": next,
            "sizeBytes": size,
            "running": now.is_some(),
        })))
    })
    .await?
}

/// The log from `offset` (at most [`OUTPUT_TAIL`] bytes), or its tail in whole lines: the text,
/// the byte it starts at, the byte after it, and the log's size.
fn read_from(
    mut file: std::fs::File,
    offset: Option<u64>,
) -> Result<(String, u64, u64, u64), ServerError> {
    let internal = |e: io::Error| ServerError::Internal(format!("cannot read a run's log: {e}"));
    let size = file.metadata().map_err(internal)?.len();
    let Some(offset) = offset else {
        let (text, start, size) = tail_of(file, OUTPUT_TAIL).map_err(internal)?;
        return Ok((text, start, size, size));
    };
    let start = offset.min(size);
    file.seek(SeekFrom::Start(start)).map_err(internal)?;
    let mut bytes = Vec::new();
    file.take(OUTPUT_TAIL)
        .read_to_end(&mut bytes)
        .map_err(internal)?;
    let next = start + bytes.len() as u64;
    Ok((
        String::from_utf8_lossy(&bytes).into_owned(),
        start,
        next,
        size,
    ))
}

/// `?session=ID&limit=N`.
#[derive(Debug, Deserialize)]
pub struct TimelineQuery {
    session: String,
    limit: Option<usize>,
}

/// Entries `/v1/timeline` answers when `?limit=` is not given, and at most.
const TIMELINE_LIMIT: usize = 200;

/// Sessions `/v1/sessions` lists at most, the most recent.
const SESSIONS_LIMIT: usize = 500;

/// Keeps the `limit` runs of `runs` that started last, oldest first (a stable sort: runs that
/// started at once keep their order).
fn keep_latest(runs: &mut Vec<(String, RunRecord)>, limit: usize) {
    runs.sort_by(|a, b| a.1.started_at.cmp(&b.1.started_at));
    let skip = runs.len().saturating_sub(limit);
    runs.drain(..skip);
}

/// Keeps the `limit` sessions of `seen` (session -> (last activity, agent)) active last.
fn keep_recent(seen: &mut BTreeMap<String, (String, Option<&'static str>)>, limit: usize) {
    if seen.len() <= limit || limit == 0 {
        return;
    }
    let mut ats: Vec<&String> = seen.values().map(|(at, _)| at).collect();
    ats.sort_unstable_by(|a, b| b.cmp(a));
    let oldest_kept = ats[limit - 1].clone();
    seen.retain(|_, (at, _)| *at >= oldest_kept);
    // Ties at the boundary: the extra ones go in key order.
    let extra = seen.len().saturating_sub(limit);
    let tied: Vec<String> = seen
        .iter()
        .filter(|(_, (at, _))| *at == oldest_kept)
        .map(|(k, _)| k.clone())
        .take(extra)
        .collect();
    for key in tied {
        seen.remove(&key);
    }
}

/// When a run ended: its start plus its duration, as RFC 3339 (for sorting, as text).
fn ended(run: &RunRecord) -> String {
    let Some(start) = hookvisor_core::timestamp::parse_rfc3339(&run.started_at) else {
        return run.started_at.clone();
    };
    let end = start + std::time::Duration::from_millis(run.duration_ms.unwrap_or(0));
    hookvisor_core::timestamp::rfc3339(end)
}

/// `GET /v1/sessions`: `{"sessions": [{id, agent, lastActivity, parent, child, running}]}`, the
/// most recent activity first: the agent sessions named by the runs of the history (their
/// `session`), and each spawned child of the state dir as `child:NAME`, its `parent` the session
/// of its spawn hook's last run.
pub async fn sessions(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ServerError> {
    let answer = blocking(move || {
        let store = state.store();
        let status = store.load().unwrap_or_default();
        let history = store.history();
        // session -> (last activity, agent)
        let mut seen: BTreeMap<String, (String, Option<&'static str>)> = BTreeMap::new();
        let mut last_of_hook: BTreeMap<String, Option<String>> = BTreeMap::new();
        history.for_each_run(|id, run| {
            if !last_of_hook.contains_key(id) {
                last_of_hook.insert(id.to_owned(), run.session.clone());
            }
            let Some(session) = run.session.clone() else {
                return;
            };
            let at = ended(&run);
            let agent = (run.trigger.as_deref() == Some("loop")).then_some("loop");
            let slot = seen.entry(session).or_insert_with(|| (at.clone(), agent));
            if at > slot.0 {
                slot.0 = at;
            }
            slot.1 = slot.1.or(agent);
            // Histories the agent filled with sessions: the most recent are kept.
            if seen.len() > 2 * SESSIONS_LIMIT {
                keep_recent(&mut seen, SESSIONS_LIMIT);
            }
        });
        keep_recent(&mut seen, SESSIONS_LIMIT);
        let running = status
            .hooks
            .values()
            .any(|h| h.last_result == RunResult::Running);
        let mut sessions: Vec<Value> = seen
            .into_iter()
            .map(|(id, (at, agent))| {
                json!({
                    "id": id, "agent": agent, "lastActivity": at, "parent": null,
                    "child": null, "running": running && id == state.ctx.session_id,
                })
            })
            .collect();
        let children = list_children(&state.ctx, &status).unwrap_or_else(|e| {
            tracing::warn!("{e}");
            Vec::new()
        });
        for child in children {
            let parent = child
                .hook_id
                .as_ref()
                .and_then(|id| last_of_hook.get(id).cloned().flatten())
                .unwrap_or_else(|| state.ctx.session_id.clone());
            let running = child
                .detached
                .as_ref()
                .is_some_and(|d| d.state == "running");
            sessions.push(json!({
                "id": format!("child:{}", child.name),
                "agent": null,
                "lastActivity": child.modified_at,
                "parent": parent,
                "child": child.name,
                "running": running,
            }));
        }
        sessions.sort_by(|a, b| {
            let at = |v: &Value| v["lastActivity"].as_str().unwrap_or_default().to_owned();
            at(b).cmp(&at(a))
        });
        json!({ "sessions": sessions })
    })
    .await?;
    Ok(Json(answer))
}

/// `GET /v1/timeline?session=ID&limit=N`: `{"session", "entries": [...]}`, the last `limit`
/// runs (200 by default and at most) of that session oldest first, from the run histories:
/// each `{at, kind, hookId, run, result, durationMs, decision, tool, agentText, reprompt}`.
/// `session=child:NAME` is a spawned child's: every run in its own state dir.
pub async fn timeline(
    State(state): State<Arc<AppState>>,
    Query(query): Query<TimelineQuery>,
) -> Result<Json<Value>, ServerError> {
    let limit = query.limit.unwrap_or(TIMELINE_LIMIT).min(TIMELINE_LIMIT);
    let answer = blocking(move || {
        let session = query.session;
        let (history, of_child) = match session.strip_prefix("child:") {
            Some(name) if is_child_name(name) => {
                let dir = state.ctx.state().children_dir().join(name);
                if !dir.is_dir() {
                    return Err(ServerError::NotFound(format!("no child '{name}'")));
                }
                (History::new(StateDir::new(dir)), true)
            }
            Some(name) => return Err(ServerError::BadRequest(format!("bad child name '{name}'"))),
            None => (state.store().history(), false),
        };
        // The histories are read one at a time, and only the last `limit` runs kept.
        let mut runs: Vec<(String, RunRecord)> = Vec::new();
        history.for_each_run(|id, r| {
            if of_child || r.session.as_deref() == Some(session.as_str()) {
                runs.push((id.to_owned(), r));
                if runs.len() > 2 * limit {
                    keep_latest(&mut runs, limit);
                }
            }
        });
        keep_latest(&mut runs, limit);
        let entries: Vec<Value> = runs
            .into_iter()
            .map(|(id, r)| {
                json!({
                    "at": r.started_at, "kind": r.event, "hookId": id, "run": r.run,
                    "result": r.result, "durationMs": r.duration_ms, "decision": r.decision,
                    "tool": r.tool, "agentText": r.agent_text,
                    "reprompt": r.decision.as_deref() == Some("reprompt"),
                })
            })
            .collect();
        Ok(json!({ "session": session, "entries": entries }))
    })
    .await??;
    Ok(Json(answer))
}

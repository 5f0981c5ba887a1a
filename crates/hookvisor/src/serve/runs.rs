//! The run history of each hook (`hookvisor_core::status::history`), read from disk on every
//! request: the server keeps none of it in memory.

use std::io::{self, Read, Seek, SeekFrom};
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path as UrlPath, Query, State};
use hookvisor_core::status::history::{MAX_RUNS, RunRecord};
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
        run: entry.run_count.max(last) + 1,
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

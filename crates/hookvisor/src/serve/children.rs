//! The spawned children of the server's state dir (docs/EVENTS.md §4.4), read-only: the list, and
//! each child's own `status.json`. The core reads them (`hookvisor_actions::spawn::list_children`), as
//! everything under the state dir, as files the agent may have planted.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path as UrlPath, State};
use hookvisor_actions::spawn::{ChildrenError, child_status, list_children};
use serde_json::{Value, json};

use super::AppState;
use super::routes::{ServerError, blocking};

/// `GET /v1/children`: `{"children": [{name, hookId, modifiedAt, hasStatus, detached}]}`, the
/// most recently changed first; `detached` is `{pid, state, startedAt}` or null.
pub async fn list(State(state): State<Arc<AppState>>) -> Result<Json<Value>, ServerError> {
    let children = blocking(move || {
        let status = state
            .store()
            .load()
            .map_err(|e| ServerError::Internal(e.to_string()))?;
        list_children(&state.ctx, &status).map_err(ServerError::from)
    })
    .await??;
    Ok(Json(json!({ "children": children })))
}

/// `GET /v1/children/{name}/status`: the child's own `status.json`, in the shape of
/// `/hooks/status`.
pub async fn status(
    State(state): State<Arc<AppState>>,
    UrlPath(name): UrlPath<String>,
) -> Result<Json<Value>, ServerError> {
    let status = blocking(move || child_status(&state.ctx, &name)).await??;
    Ok(Json(
        serde_json::to_value(status).expect("status serialises"),
    ))
}

impl From<ChildrenError> for ServerError {
    fn from(err: ChildrenError) -> Self {
        ServerError::Child(err)
    }
}

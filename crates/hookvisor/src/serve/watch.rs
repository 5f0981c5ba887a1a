//! Watching the files the server reflects: the hooks (`.discobot`) and the other tools' hook
//! files discovery reads in place (hooks added, edited, removed: re-discover, sync the pre-commit
//! hook, tell subscribers) and `status.json` (runs by anyone: publish their events).
//!
//! The watches ([`FileWatch`]) only ring a bell on their threads; the work is done once per
//! burst however many events rang it (an editor's save is several events), on the blocking
//! pool: it reads files.

use std::path::PathBuf;
use std::sync::Arc;

use hookvisor_core::Context;
use hookvisor_core::import::UserDirs;
use hookvisor_core::watch::{FileWatch, WatchedFile};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::AppState;

struct Bells {
    hooks: Notify,
    status: Notify,
}

/// Starts watching for `state` and returns once the watches are in place; the task it returns
/// re-discovers and re-reads as changes come. Without inotify (no watches left), the server
/// still works: its own runs refresh the status.
pub async fn spawn(state: Arc<AppState>) -> JoinHandle<()> {
    let bells = Arc::new(Bells {
        hooks: Notify::new(),
        status: Notify::new(),
    });
    let (ctx, ringing) = (state.ctx.clone(), bells.clone());
    let watches = tokio::task::spawn_blocking(move || start(&ctx, &ringing))
        .await
        .unwrap_or_else(|e| {
            tracing::warn!("cannot watch the hooks: {e}");
            Vec::new()
        });
    tokio::spawn(async move {
        // Watched as long as the task lives.
        let _watches = watches;
        loop {
            tokio::select! {
                _ = bells.hooks.notified() => {
                    let rediscover = state.clone();
                    if let Err(e) = tokio::task::spawn_blocking(move || rediscover.rediscover()).await {
                        tracing::warn!("hook discovery failed: {e}");
                    }
                }
                _ = bells.status.notified() => state.refresh_status_blocking().await,
            }
        }
    })
}

/// The hooks bell rings for `.discobot` and everything in it but the state dir (which may live
/// there), and for the other tools' hook files
/// ([`hookvisor_core::import::source_files`]); the status bell for `status.json`.
fn start(ctx: &Context, bells: &Arc<Bells>) -> Vec<FileWatch> {
    if let Err(e) = std::fs::create_dir_all(&ctx.state_dir) {
        tracing::warn!("cannot make {}: {e}", ctx.state_dir.display());
    }
    let discobot: PathBuf = ctx.workspace.join(".discobot");
    let user = UserDirs::from_vars(|name| std::env::var_os(name));
    let mut hooks = hookvisor_core::import::source_files(&ctx.workspace, &user);
    hooks.push(WatchedFile::tree(
        discobot,
        ctx.workspace.clone(),
        vec![ctx.state_dir.clone()],
    ));
    let ring = bells.clone();
    let hooks = FileWatch::start(hooks, move || ring.hooks.notify_one()).inspect_err(|e| {
        tracing::warn!(
            "{e}; hook changes show after a restart ({})",
            ctx.hooks_dir().display()
        );
    });
    let status = WatchedFile::file(ctx.status_path(), ctx.state_dir.clone());
    let ring = bells.clone();
    let status = FileWatch::start(vec![status], move || ring.status.notify_one())
        .inspect_err(|e| tracing::warn!("{e}; runs by others show after a restart"));
    hooks.into_iter().chain(status).collect()
}

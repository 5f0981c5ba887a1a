//! Watching the files the server reflects: the hooks directory and the other tools' hook files
//! discovery reads in place (hooks added, edited, removed: re-discover, sync the pre-commit
//! hook, tell subscribers) and `status.json` (runs by anyone: publish their events).
//!
//! inotify events arrive on notify's thread and only ring a bell; the work is done once per
//! burst however many events rang it (an editor's save is several events), on the blocking
//! pool: it reads files, and adding watches walks directories.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use hookvisor_core::Context;
use hookvisor_core::file_watch::FileWatch;
use hookvisor_core::import::UserDirs;
use notify::{EventKind, RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use super::AppState;

/// What a changed path means for the server.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// Something under `<workspace>/.discobot`, where the hooks live.
    Hooks,
    /// `status.json` was replaced.
    Status,
}

/// Classifies one path from an event; `None` for paths the server does not reflect.
fn classify(path: &Path, discobot: &Path, status: &Path, state_dir: &Path) -> Option<Change> {
    if path == status {
        return Some(Change::Status);
    }
    // The state dir may live under .discobot; its lock and temp files are not hooks.
    if path.starts_with(state_dir) {
        return None;
    }
    path.starts_with(discobot).then_some(Change::Hooks)
}

/// Whether an event can mean the files changed. notify also reports opens and closes: reading
/// the hooks or `status.json` in answer to an event raises more of those, so counting them
/// would make the server re-read forever. A write always comes with a `Modify` event too.
fn is_change(kind: &EventKind) -> bool {
    !matches!(kind, EventKind::Access(_))
}

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
    let sources = start_sources(&state.ctx, bells.clone()).await;
    let (ctx, ringing) = (state.ctx.clone(), bells.clone());
    let mut watcher = match tokio::task::spawn_blocking(move || start(&ctx, ringing)).await {
        Ok(Ok(watcher)) => Some(watcher),
        Ok(Err(e)) => {
            tracing::warn!(
                "cannot watch {} ({e}); hook changes show after a restart",
                state.ctx.hooks_dir().display()
            );
            None
        }
        Err(e) => {
            tracing::warn!("cannot watch the hooks: {e}");
            None
        }
    };
    tokio::spawn(async move {
        // Watched as long as the task lives.
        let _sources = sources;
        loop {
            tokio::select! {
                _ = bells.hooks.notified() => {
                    // The watch goes to the blocking pool with the work and comes back.
                    let (mut moved, rediscover) = (watcher.take(), state.clone());
                    let followed = tokio::task::spawn_blocking(move || {
                        if let Some(w) = moved.as_mut() {
                            w.follow_discobot();
                        }
                        rediscover.rediscover();
                        moved
                    });
                    match followed.await {
                        Ok(back) => watcher = back,
                        Err(e) => tracing::warn!("hook discovery failed: {e}"),
                    }
                }
                _ = bells.status.notified() => state.refresh_status_blocking().await,
            }
        }
    })
}

/// Watches the other tools' hook files ([`hookvisor_core::import::source_files`]): an edit of
/// one rings the hooks bell like an edit under `.discobot`. Their directories include the
/// workspace root, which is why this is not `notify` (it would hear every listing of it).
async fn start_sources(ctx: &Context, bells: Arc<Bells>) -> Option<FileWatch> {
    let user = UserDirs::from_vars(|name| std::env::var_os(name));
    let files = hookvisor_core::import::source_files(&ctx.workspace, &user);
    let started = tokio::task::spawn_blocking(move || {
        FileWatch::start(files, move || bells.hooks.notify_one())
    });
    match started.await {
        Ok(Ok(watch)) => Some(watch),
        Ok(Err(e)) => {
            tracing::warn!("{e}; edits of them show after a restart");
            None
        }
        Err(e) => {
            tracing::warn!("cannot watch other tools' hook files: {e}");
            None
        }
    }
}

struct Watch {
    inner: RecommendedWatcher,
    workspace: PathBuf,
    discobot: PathBuf,
    watching_discobot: bool,
    watching_workspace: bool,
}

impl Watch {
    /// Watches `.discobot` recursively while it exists, and the workspace itself (not
    /// recursively) only while it does not, to see it appear. notify asks the kernel for opens
    /// too, so a watched workspace turned every listing of a top-level directory (a thousand
    /// per `git status` of a large repository) into an event for this server to read.
    fn follow_discobot(&mut self) {
        // Twice at most: `.discobot` may appear again while the workspace watch is being set up.
        for _ in 0..2 {
            let exists = self.discobot.is_dir();
            if exists && !self.watching_discobot {
                match self.inner.watch(&self.discobot, RecursiveMode::Recursive) {
                    Ok(()) => self.watching_discobot = true,
                    Err(e) => tracing::warn!("cannot watch {}: {e}", self.discobot.display()),
                }
            } else if !exists && self.watching_discobot {
                // Its watch went with it; a new one is taken when it comes back.
                let _ = self.inner.unwatch(&self.discobot);
                self.watching_discobot = false;
            }
            if self.watching_discobot && self.watching_workspace {
                let _ = self.inner.unwatch(&self.workspace);
                self.watching_workspace = false;
            } else if !self.watching_discobot && !self.watching_workspace {
                match self
                    .inner
                    .watch(&self.workspace, RecursiveMode::NonRecursive)
                {
                    Ok(()) => self.watching_workspace = true,
                    Err(e) => tracing::warn!("cannot watch {}: {e}", self.workspace.display()),
                }
            }
            if self.watching_discobot == self.discobot.is_dir() {
                return;
            }
        }
    }
}

fn start(ctx: &Context, bells: Arc<Bells>) -> notify::Result<Watch> {
    let discobot = ctx.workspace.join(".discobot");
    let status = ctx.status_path();
    let state_dir = ctx.state_dir.clone();
    let paths = (discobot.clone(), status, state_dir.clone());
    let inner = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
        let Ok(event) = event else { return };
        if !is_change(&event.kind) {
            return;
        }
        let (discobot, status, state_dir) = &paths;
        for path in &event.paths {
            match classify(path, discobot, status, state_dir) {
                Some(Change::Hooks) => bells.hooks.notify_one(),
                Some(Change::Status) => bells.status.notify_one(),
                None => {}
            }
        }
    })?;
    let mut watch = Watch {
        inner,
        workspace: ctx.workspace.clone(),
        discobot,
        watching_discobot: false,
        watching_workspace: false,
    };
    std::fs::create_dir_all(&state_dir)?;
    watch.inner.watch(&state_dir, RecursiveMode::NonRecursive)?;
    watch.follow_discobot();
    Ok(watch)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_and_closes_are_not_changes() {
        use notify::event::{AccessKind, AccessMode, CreateKind, DataChange, ModifyKind};
        assert!(!is_change(&EventKind::Access(AccessKind::Open(
            AccessMode::Any
        ))));
        assert!(!is_change(&EventKind::Access(AccessKind::Close(
            AccessMode::Read
        ))));
        assert!(!is_change(&EventKind::Access(AccessKind::Close(
            AccessMode::Write
        ))));
        assert!(is_change(&EventKind::Modify(ModifyKind::Data(
            DataChange::Any
        ))));
        assert!(is_change(&EventKind::Create(CreateKind::File)));
        assert!(is_change(&EventKind::Remove(
            notify::event::RemoveKind::Any
        )));
    }

    #[test]
    fn paths_are_classified() {
        let discobot = Path::new("/ws/.discobot");
        let state = Path::new("/ws/.discobot/state");
        let status = Path::new("/ws/.discobot/state/status.json");
        let cases = [
            ("/ws/.discobot/hooks/lint.sh", Some(Change::Hooks)),
            ("/ws/.discobot/hooks", Some(Change::Hooks)),
            ("/ws/.discobot", Some(Change::Hooks)),
            ("/ws/.discobot/state/status.json", Some(Change::Status)),
            ("/ws/.discobot/state/status.json.lock", None),
            ("/ws/.discobot/state/.tmpXYZ", None),
            ("/ws/src/main.rs", None),
            ("/ws/.discobotx", None),
        ];
        for (path, want) in cases {
            assert_eq!(
                classify(Path::new(path), discobot, status, state),
                want,
                "{path}"
            );
        }
    }
}

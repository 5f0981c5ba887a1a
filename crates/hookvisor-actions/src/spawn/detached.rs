//! Unawaited children (rule 8 of the module): started in a process group of their own and
//! recorded in `<state>/children/children.json`, then stopped when `session.end` fires for that
//! state dir.
//!
//! 1. **Record.** Each entry holds the child's pid (= its process group) and its start time in
//!    clock ticks since boot (`/proc/<pid>/stat` field 22), so a pid the kernel has given to
//!    another process since is never signalled, and the process must carry
//!    `HOOKVISOR_STATE_DIR=<its child dir>` in its environment, so a record rewritten by the
//!    agent names nothing else. Writers serialise on `children.lock`; the file
//!    is replaced atomically.
//! 2. **Stop.** At `session.end` every running entry gets [`GRACE`] to end on its own, then its
//!    group gets SIGTERM, then after [`KILL_GRACE`] SIGKILL. Its worktree, if any, is removed
//!    (`git worktree remove`, never a recursive delete of a recorded path) only when the entry
//!    was a live child of ours as `session.end` began and the worktree is `<its dir>/worktree`
//!    of this workspace; else a line says what was left. The entry is marked `stopped` (or
//!    `exited` when it had ended by itself). The process must also run as our uid.
//! 3. The firing process may exit before its children: a child is not waited for by the CLI,
//!    only reaped by a thread while the process lives (a server), else by its new parent.

use std::fs;
use std::io::{self, Read as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use super::child::remove_worktree;
use hookvisor_core::context::Context;
use hookvisor_core::exec::Invocation;
use hookvisor_core::hook::Hook;
use hookvisor_core::procfs;
use hookvisor_core::state::{Durability, write_atomic};

/// Time a detached child has after `session.end` to end on its own (docs/EVENTS.md §4.4).
pub(crate) const GRACE: Duration = Duration::from_secs(30);

/// Time between SIGTERM and SIGKILL.
pub(crate) const KILL_GRACE: Duration = Duration::from_secs(5);

/// How often a stopping child is looked at: it is no child of ours, so there is nothing to wait on.
const POLL: Duration = Duration::from_millis(100);

/// Entries kept in `children.json`: older finished ones are dropped first.
const MAX_ENTRIES: usize = 1000;

/// One detached child as `children.json` records it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub(super) struct Entry {
    /// Its pid, also its process group.
    pub(super) pid: i32,
    /// `/proc/<pid>/stat` field 22 when it started.
    start_ticks: u64,
    /// Its child dir.
    pub(super) dir: PathBuf,
    /// The hook that spawned it.
    pub(super) hook_id: String,
    /// Seconds since the epoch when it started.
    pub(super) started_at: u64,
    /// Its worktree and the repository it belongs to, when it has one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    worktree: Option<(PathBuf, PathBuf)>,
    /// `running`, `stopped` or `exited`.
    state: String,
}

/// `<state>/children`, where the record lives.
fn children_dir(ctx: &Context) -> PathBuf {
    ctx.state().children_dir()
}

/// Starts `invocation` detached, its output in `<dir>/child.log`, and records it; the pid.
pub(super) fn start(
    ctx: &Context,
    hook: &Hook,
    invocation: &Invocation,
    dir: &Path,
    worktree: Option<PathBuf>,
) -> io::Result<u32> {
    let log = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(dir.join("child.log"))?;
    let env = std::env::vars_os()
        .filter(|(name, _)| !invocation.env_remove.contains(name))
        .chain(invocation.env.iter().cloned());
    let mut child = Command::new(&invocation.program)
        .args(&invocation.args)
        .env_clear()
        .envs(env)
        .current_dir(&invocation.cwd)
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        // Its own group: session.end signals the whole of it, and a Ctrl-C of ours does not.
        .process_group(0)
        .spawn()
        .map_err(|err| {
            io::Error::new(
                err.kind(),
                format!("cannot start {}: {err}", invocation.program.display()),
            )
        })?;
    let pid = child.id();
    // Rule 3: reaped while we live; nothing waits for it otherwise.
    std::thread::spawn(move || child.wait());
    let entry = Entry {
        pid: i32::try_from(pid).unwrap_or(i32::MAX),
        start_ticks: start_ticks(pid).unwrap_or(0),
        dir: dir.to_owned(),
        hook_id: hook.id.clone(),
        started_at: SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        worktree: worktree.map(|w| (ctx.workspace.clone(), w)),
        state: "running".to_owned(),
    };
    update(ctx, |entries| {
        if entries.len() >= MAX_ENTRIES
            && let Some(i) = entries.iter().position(|e| e.state != "running")
        {
            entries.remove(i);
        }
        entries.push(entry);
    })?;
    Ok(pid)
}

/// Rule 2: stops the detached children recorded in this context's state dir. Called first
/// thing when `session.end` fires; a failure is logged, never in the way of the event.
pub(crate) fn stop_detached(ctx: &Context) {
    let record = children_dir(ctx).join("children.json");
    if fs::symlink_metadata(&record).is_err() {
        return;
    }
    let result = update(ctx, |entries| {
        let running: Vec<usize> = (0..entries.len())
            .filter(|&i| entries.get(i).is_some_and(|e| e.state == "running"))
            .collect();
        let children = children_dir(ctx);
        // Only a process started as one of these children is signalled: a record the agent
        // rewrote cannot name another process (rule 2).
        let alive = |e: &Entry| is_alive(e.pid, e.start_ticks) && is_child(e, &children);
        // Only the worktree of a child seen live and ours now is removed: a recorded path is
        // never trusted alone (rule 2).
        let ours: Vec<bool> = entries.iter().map(alive).collect();
        let mut stopped = vec![false; entries.len()];
        let deadline = Instant::now() + GRACE;
        while running.iter().any(|&i| entries.get(i).is_some_and(alive))
            && Instant::now() < deadline
        {
            std::thread::sleep(POLL);
        }
        for signal in [Signal::SIGTERM, Signal::SIGKILL] {
            for &i in &running {
                if let Some(entry) = entries.get(i).filter(|e| alive(e)) {
                    tracing::info!(
                        "session.end: {signal} to detached child {} ({})",
                        entry.pid,
                        entry.dir.display()
                    );
                    let _ = killpg(Pid::from_raw(entry.pid), signal);
                    if let Some(s) = stopped.get_mut(i) {
                        *s = true;
                    }
                }
            }
            let deadline = Instant::now() + KILL_GRACE;
            while running.iter().any(|&i| entries.get(i).is_some_and(alive))
                && Instant::now() < deadline
            {
                std::thread::sleep(POLL);
            }
        }
        for &i in &running {
            let was_stopped = stopped.get(i).copied().unwrap_or(false);
            let was_ours = ours.get(i).copied().unwrap_or(false);
            if let Some(entry) = entries.get_mut(i) {
                if let Some((workspace, path)) = entry.worktree.take() {
                    if was_ours && workspace == ctx.workspace && path == entry.dir.join("worktree")
                    {
                        remove_worktree(&workspace, &path);
                    } else {
                        tracing::warn!(
                            "session.end: not removing {}: recorded for pid {}, which is no \
                             running child of this state dir",
                            path.display(),
                            entry.pid
                        );
                    }
                }
                entry.state = if was_stopped { "stopped" } else { "exited" }.to_owned();
            }
        }
    });
    if let Err(err) = result {
        tracing::warn!(
            "cannot stop the detached children of {}: {err}",
            record.display()
        );
    }
}

/// The state a dashboard shows for `entry` of the record in `children`: the recorded one, but
/// `exited` for a `running` child whose process is gone (the check of rule 2).
pub(super) fn shown_state(entry: &Entry, children: &Path) -> String {
    if entry.state == "running"
        && !(is_alive(entry.pid, entry.start_ticks) && is_child(entry, children))
    {
        return "exited".to_owned();
    }
    entry.state.clone()
}

/// Runs `change` on the record under its lock and writes it back.
fn update(ctx: &Context, change: impl FnOnce(&mut Vec<Entry>)) -> io::Result<()> {
    let dir = children_dir(ctx);
    let lock = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join("children.lock"))?;
    lock.lock()?;
    let path = dir.join("children.json");
    let mut entries: Vec<Entry> = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
    {
        Ok(file) => {
            let mut bytes = Vec::new();
            file.take(16 * 1024 * 1024).read_to_end(&mut bytes)?;
            // A damaged record is started afresh: the children it named can no longer be told
            // apart from other processes.
            serde_json::from_slice(&bytes).unwrap_or_default()
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => Vec::new(),
        Err(err) => return Err(err),
    };
    change(&mut entries);
    let bytes = serde_json::to_vec_pretty(&entries).map_err(io::Error::other)?;
    write_atomic(&path, &bytes, Durability::Replaceable)
}

/// Whether the process of `entry` was started as a child of `children`: its dir is one of
/// them, it runs as our uid (a process of the agent's cannot pass for a child of root), and
/// its environment, as it was exec'd, names that dir as its state dir. A `hookvisor loop`
/// child is non-dumpable, its environment unreadable to a parent that is not root: its
/// command line, which names the dir as `--state-dir`, stands in.
fn is_child(entry: &Entry, children: &Path) -> bool {
    if entry.dir.parent() != Some(children)
        || real_uid(entry.pid) != Some(nix::unistd::geteuid().as_raw())
    {
        return false;
    }
    let dir = entry.dir.as_os_str().as_encoded_bytes();
    match hookvisor_core::leftovers::environment(entry.pid) {
        hookvisor_core::leftovers::Environment::Read(environ) => {
            let mut wanted = b"HOOKVISOR_STATE_DIR=".to_vec();
            wanted.extend_from_slice(dir);
            environ
                .split(|b| *b == 0)
                .any(|var| var == wanted.as_slice())
        }
        hookvisor_core::leftovers::Environment::Unreadable => {
            procfs::cmdline(entry.pid).is_ok_and(|cmdline| {
                let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
                args.windows(2)
                    .any(|w| w[0] == b"--state-dir" && w[1] == dir)
            })
        }
        hookvisor_core::leftovers::Environment::MidExec => false,
    }
}

/// The real uid of `pid` (`/proc/<pid>/status`, readable whatever its dumpable flag).
fn real_uid(pid: i32) -> Option<u32> {
    procfs::uids(pid)?.first().copied()
}

/// `/proc/<pid>/stat`: the state letter and field 22, the start time.
fn stat(pid: u32) -> Option<(char, u64)> {
    let stat = procfs::stat(i32::try_from(pid).ok()?)?;
    Some((stat.state()?, stat.start_ticks()?))
}

/// The start time of `pid`, in clock ticks since boot.
fn start_ticks(pid: u32) -> Option<u64> {
    stat(pid).map(|(_, ticks)| ticks)
}

/// Whether the process recorded as (`pid`, `ticks`) still runs: the same start time, and not
/// dead waiting for its reaper.
fn is_alive(pid: i32, ticks: u64) -> bool {
    let Ok(pid) = u32::try_from(pid) else {
        return false;
    };
    matches!(stat(pid), Some((state, t)) if t == ticks && !matches!(state, 'Z' | 'X'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_of_ourselves() {
        let pid = std::process::id();
        let (state, ticks) = stat(pid).unwrap();
        assert!(matches!(state, 'R' | 'S'), "{state}");
        assert!(is_alive(i32::try_from(pid).unwrap(), ticks));
        assert!(
            !is_alive(i32::try_from(pid).unwrap(), ticks + 1),
            "another start time"
        );
        assert!(!is_alive(-1, 0));
    }

    #[test]
    fn a_record_names_only_processes_started_as_its_children() {
        let children = Path::new("/state/children");
        let mut entry = Entry {
            pid: i32::try_from(std::process::id()).unwrap(),
            start_ticks: 0,
            dir: children.join("task.complete-0-x"),
            hook_id: "x".into(),
            started_at: 0,
            worktree: None,
            state: "running".into(),
        };
        // This test process was not started with that state dir.
        assert!(!is_child(&entry, children));
        entry.dir = PathBuf::from("/elsewhere/x");
        assert!(!is_child(&entry, children));
    }
}

//! What a hook leaves running when it exits: found and killed, for every hook kind.
//!
//! The executor kills the hook's process group when the hook exits, but a process that left the
//! group (`setsid`, a daemon's double fork) escapes that. Every run puts a marker of its own in
//! its environment (`HOOKVISOR_RUN`), which the hook's descendants inherit; after the hook
//! exits, every process still carrying the marker is killed, round after round, until none is
//! left (each round reaches one more generation of a tree that forks while it dies).
//!
//! Where they are found depends on who reaps them:
//!
//! - A command-line process that runs hooks one at a time is a child subreaper
//!   ([`become_subreaper`]): the orphans come back to it, so only its own children are read,
//!   which costs a few system calls, and it reaps what it kills.
//! - A long-lived server is not (it could not tell a hook's dead orphan from a child another
//!   thread is about to wait for, and would collect zombies): the orphans go to the container's
//!   init, which reaps them, and the server finds them by reading `/proc`.
//!
//! A descendant that cleared its environment is not recognised; it is stopped with everything
//! else when the session ends.

use std::fs;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

/// The variable that marks a run's processes.
pub(crate) const RUN_MARKER_VARIABLE: &str = "HOOKVISOR_RUN";

/// How many rounds of "kill the orphans, reap them, look again" are made for one run: each
/// round reaches one more generation of a process tree that forks while it dies.
const ROUNDS: usize = 64;

/// How long a run may keep looking at a process caught in the middle of an exec (it shows no
/// environment until the kernel has built the new one). An exec lasts microseconds, but on a
/// loaded machine one that waits for the disk lasts longer than a few rounds of yielding; only
/// a process really in an exec makes the caller wait, so the bound costs nothing otherwise.
const EXEC_PATIENCE: std::time::Duration = std::time::Duration::from_secs(1);

/// Makes this process a child subreaper, so that what its hooks leave behind comes back to it.
/// Every binary that runs hooks calls it at start.
pub fn become_subreaper() -> io::Result<()> {
    nix::sys::prctl::set_child_subreaper(true).map_err(io::Error::from)
}

/// A new marker value, unique within this process and across processes.
pub(crate) fn new_marker() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    format!(
        "{}.{}.{nanos}",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// Kills every process that carries `marker` (and reaps those that are our children), round
/// after round until none is left; returns how many there were.
pub(crate) fn kill(marker: &str) -> usize {
    let subreaper = nix::sys::prctl::get_child_subreaper().unwrap_or(false);
    let mut entry = format!("{RUN_MARKER_VARIABLE}={marker}").into_bytes();
    entry.push(0);
    let me = std::process::id() as i32;
    // A process still dying is found again in the next round; it counts once.
    let mut killed = std::collections::BTreeSet::new();
    let mut rounds = 0;
    let mut unsure_since = None;
    while rounds < ROUNDS {
        let candidates = if subreaper {
            own_children()
        } else {
            every_process()
        };
        let mut marked = Vec::new();
        let mut unsure = false;
        for pid in candidates.into_iter().filter(|&pid| pid != me) {
            match carries(pid, &entry) {
                Some(true) => marked.push(pid),
                Some(false) => {}
                // A process caught in the middle of an exec shows no environment for an
                // instant: look again rather than let it go.
                None => unsure = true,
            }
        }
        if marked.is_empty() {
            if unsure
                && unsure_since
                    .get_or_insert_with(std::time::Instant::now)
                    .elapsed()
                    < EXEC_PATIENCE
            {
                std::thread::sleep(std::time::Duration::from_micros(200));
                continue;
            }
            break;
        }
        for &pid in &marked {
            // A child of ours cannot be reused before we reap it; another process could only
            // between the read of its environment and this call, a window no pid wraps around in.
            let _ = crate::sys::kill(pid, libc::SIGKILL);
        }
        if subreaper {
            for &pid in &marked {
                // Our own child: waiting for it by pid steals no one else's status.
                let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
            }
        }
        killed.extend(marked);
        rounds += 1;
    }
    killed.len()
}

/// The children of every thread of this process (orphans may be re-parented to any of them).
fn own_children() -> Vec<i32> {
    let mut children = Vec::new();
    let Ok(tasks) = fs::read_dir("/proc/self/task") else {
        return children;
    };
    for task in tasks.flatten() {
        if let Ok(text) = fs::read_to_string(task.path().join("children")) {
            children.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    children
}

/// Every process this one can see.
fn every_process() -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .collect()
}

/// Whether `/proc/<pid>/environ` holds `entry` (`NAME=value\0`) as a whole entry; `None` when
/// it cannot tell because the process is in the middle of an exec: its new memory has no
/// environment and no command line yet. (After an exec the command line is never empty, the
/// kernel gives an empty `argv` an `""`; a process that cleared its environment still has one.
/// Zombies and kernel threads, which have neither, are settled.)
fn carries(pid: i32, entry: &[u8]) -> Option<bool> {
    let Ok(environ) = fs::read(format!("/proc/{pid}/environ")) else {
        return Some(false);
    };
    if environ.is_empty() {
        let mid_exec = fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.is_empty())
            && fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    let mut fields = stat.get(stat.rfind(')')? + 2..)?.split_whitespace();
                    let state = fields.next()?;
                    let parent: i32 = fields.next()?.parse().ok()?;
                    Some(!(matches!(state, "Z" | "X") || parent == 2 || pid == 2))
                })
                .unwrap_or(false);
        return (!mid_exec).then_some(false);
    }
    Some(
        environ
            .split_inclusive(|&b| b == 0)
            .any(|candidate| candidate == entry),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_are_unique() {
        let a = new_marker();
        let b = new_marker();
        assert_ne!(a, b);
        assert!(a.starts_with(&format!("{}.", std::process::id())));
    }

    #[test]
    fn an_entry_matches_whole() {
        let environ = b"A=1\0HOOKVISOR_RUN=7.1.9\0HOOKVISOR_RUN=7.1.90\0";
        let has = |entry: &[u8]| environ.split_inclusive(|&b| b == 0).any(|c| c == entry);
        assert!(has(b"HOOKVISOR_RUN=7.1.9\0"));
        assert!(!has(b"HOOKVISOR_RUN=7.1\0"));
        assert!(!has(b"RUN=7.1.9\0"));
    }

    /// A process that cleared its environment is told apart from one in the middle of an exec
    /// at once (it has a command line), so it never makes a run wait; a marked one is found.
    #[test]
    fn an_empty_environment_after_exec_is_settled_and_a_marked_one_is_found() {
        let mut bare = std::process::Command::new("env")
            .args(["-i", "sleep", "100"])
            .spawn()
            .unwrap();
        let mut marked = std::process::Command::new("sleep")
            .arg("100")
            .env(RUN_MARKER_VARIABLE, "test.1")
            .spawn()
            .unwrap();
        let entry = format!("{RUN_MARKER_VARIABLE}=test.1\0").into_bytes();
        // Wait until each has finished its exec into sleep (its command line says so).
        for pid in [bare.id(), marked.id()] {
            while !fs::read(format!("/proc/{pid}/cmdline"))
                .unwrap()
                .starts_with(b"sleep\0")
            {
                std::thread::yield_now();
            }
        }
        assert_eq!(carries(bare.id() as i32, &entry), Some(false));
        assert_eq!(carries(marked.id() as i32, &entry), Some(true));
        for child in [&mut bare, &mut marked] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }
}

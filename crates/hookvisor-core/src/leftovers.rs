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
//! A run inside a run (a hook that runs `hookvisor fire`, an agent of `hookvisor loop`) adds its
//! marker to the one it inherited (`HOOKVISOR_RUN=outer:inner`, `add_marker`), so the outer
//! run still recognises its grandchildren: a marker matches by membership.
//!
//! A descendant that cleared its environment is not recognised; it is stopped with everything
//! else when the session ends, or, under `hookvisor loop`, by [`kill_children`] between runs.

use std::ffi::OsString;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::procfs;

/// The variable that marks a run's processes.
pub(crate) const RUN_MARKER_VARIABLE: &str = "HOOKVISOR_RUN";

/// How many rounds of "kill the orphans, reap them, look again" are made for one run: each
/// round reaches one more generation of a process tree that forks while it dies.
const ROUNDS: usize = 64;

/// How long a run may keep looking at a process caught in the middle of an exec (it shows no
/// environment until the kernel has built the new one). An exec lasts microseconds, but on a
/// loaded machine one that waits for the disk lasts longer than a few rounds of yielding; only
/// a process really in an exec makes the caller wait, so the bound costs nothing otherwise.
const EXEC_PATIENCE: Duration = Duration::from_secs(1);

/// The first pause before looking again at a process caught mid-exec; each pause doubles. A
/// real exec is over within the first few, while a process that only looks mid-exec for the
/// whole [`EXEC_PATIENCE`] (an unprivileged process can empty its command line and environment
/// with `prctl(PR_SET_MM_MAP)`) costs a few dozen scans of `/proc`, not thousands.
const EXEC_PAUSE_FIRST: Duration = Duration::from_micros(200);
/// The longest pause: a process that finishes its exec late is still seen within this.
const EXEC_PAUSE_MAX: Duration = Duration::from_millis(50);

/// The pause after `previous` (none yet: the first) while a process looks mid-exec.
fn next_exec_pause(previous: Option<Duration>) -> Duration {
    previous.map_or(EXEC_PAUSE_FIRST, |p| (p * 2).min(EXEC_PAUSE_MAX))
}

/// Children started to outlive the run that started them (the detached runner of an
/// unawaited hook, `crate::fire`'s `detached` module), which [`kill_children`]
/// leaves alone, as it does the runners it adopts ([`adopted_runner`]).
static SPARED: std::sync::Mutex<Vec<i32>> = std::sync::Mutex::new(Vec::new());

/// Spares the child `pid` from [`kill_children`] until [`unspare`]: call it before anything
/// can sweep, and [`unspare`] once the child is reaped (until then its pid names nobody else).
pub(crate) fn spare(pid: u32) {
    if let Ok(mut spared) = SPARED.lock() {
        spared.push(pid as i32);
    }
}

/// Ends [`spare`].
pub(crate) fn unspare(pid: u32) {
    if let Ok(mut spared) = SPARED.lock() {
        spared.retain(|&p| p != pid as i32);
    }
}

/// Whether the child `pid` is the detached runner of an unawaited hook that a hookvisor the
/// agent ran started (an adapter, `fire`), re-parented to us when that one exited: this very
/// executable running `fire --deliver`. It supervises its hook up to the hook's timeout and
/// records it, so a sweep spares it as it spares ours. Whoever starts one, it is hookvisor
/// running a hook of the workspace, nothing else.
fn adopted_runner(pid: i32) -> bool {
    // The exact command line `fire`'s `detached` module gives it, not `--deliver` anywhere:
    // the agent names its processes as it likes (`exec -a --deliver hookvisor run …`).
    procfs::runs_our_exe(pid) && procfs::cmdline(pid).is_ok_and(|line| is_deliver_line(&line))
}

/// Whether `cmdline` (NUL-separated, as `/proc/PID/cmdline`) is `EXE --workspace W --state-dir S
/// --session ID fire EVENT --deliver HOOK`, the detached runner's and nothing else.
fn is_deliver_line(cmdline: &[u8]) -> bool {
    let args: Vec<&[u8]> = cmdline
        .strip_suffix(b"\0")
        .unwrap_or(cmdline)
        .split(|&b| b == 0)
        .collect();
    args.len() == 11
        && args[1] == b"--workspace"
        && args[3] == b"--state-dir"
        && args[5] == b"--session"
        && args[7] == b"fire"
        && args[9] == b"--deliver"
}

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

/// Adds `marker` to a child's environment: after the marker it inherited, if any, so that every
/// enclosing run still recognises the child (`outer:inner`; markers hold no `:`).
pub(crate) fn add_marker(env: &mut Vec<(OsString, OsString)>, marker: &str) {
    match env.iter_mut().find(|(name, _)| name == RUN_MARKER_VARIABLE) {
        Some((_, value)) if !value.is_empty() => {
            value.push(":");
            value.push(marker);
        }
        Some((_, value)) => *value = marker.into(),
        None => env.push((RUN_MARKER_VARIABLE.into(), marker.into())),
    }
}

/// Kills every process that carries `marker` (and reaps those that are our children), round
/// after round until none is left; returns how many there were.
pub(crate) fn kill(marker: &str) -> usize {
    let subreaper = nix::sys::prctl::get_child_subreaper().unwrap_or(false);
    if subreaper && has_no_children() {
        // Everything the hook left behind is our descendant, so under one of our children:
        // none, nothing to look for (most runs; the scan of `/proc` costs tens of µs).
        return 0;
    }
    let entry = marker.as_bytes();
    let me = std::process::id() as i32;
    // A process still dying is found again in the next round; it counts once.
    let mut killed = std::collections::BTreeSet::new();
    let mut rounds = 0;
    let mut unsure_since = None;
    let mut pause = None;
    let mut looked_again = false;
    while rounds < ROUNDS {
        // A subreaper looks through its whole tree, not only its children: a killed hook's
        // descendants come back to it only once their parent has finished dying, which the
        // first round may not wait for.
        let candidates = if subreaper {
            own_descendants()
        } else {
            procfs::pids()
        };
        let mut marked = Vec::new();
        let mut unsure = false;
        for pid in candidates.into_iter().filter(|&pid| pid != me) {
            match carries(pid, entry) {
                Some(true) => marked.push(pid),
                Some(false) => {}
                // A process caught in the middle of an exec shows no environment for an
                // instant: look again rather than let it go.
                None => unsure = true,
            }
        }
        if marked.is_empty() {
            if unsure && unsure_since.get_or_insert_with(Instant::now).elapsed() < EXEC_PATIENCE {
                let next = next_exec_pause(pause);
                pause = Some(next);
                std::thread::sleep(next);
                continue;
            }
            // An orphan re-parented to us while this round read its dying parent's list of
            // children was in neither list (the kernel calls those lists unreliable unless the
            // tasks are frozen); it is our own child by the time the round ends, so an empty
            // round is looked at once more before it is believed.
            if subreaper && !looked_again {
                looked_again = true;
                continue;
            }
            break;
        }
        // A process found mid-exec before has nothing to do with the next: it gets a quick
        // second look again.
        pause = None;
        looked_again = false;
        for &pid in &marked {
            // A child of ours cannot be reused before we reap it; another process could only
            // between the read of its environment and this call, a window no pid wraps around in.
            let _ = kill_pid(pid);
        }
        if subreaper {
            let children = procfs::children(None);
            for pid in marked.iter().filter(|pid| children.contains(pid)) {
                // Our own child: waiting for it by pid steals no one else's status.
                let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(*pid), None);
            }
        }
        killed.extend(marked);
        rounds += 1;
    }
    killed.len()
}

/// Kills (SIGKILL) and reaps every child of this process, round after round until none is left
/// (a tree that forks while it dies sends its orphans back to a subreaper); returns how many
/// there were. Only for a process that runs one thing at a time and calls this between runs:
/// then every child it still has is a leftover, whatever its environment says (one that
/// cleared it or left the group escapes the marker search, not this). Zombies are reaped too.
/// The detached runners of unawaited hooks are spared (`spare`, `adopted_runner`).
pub fn kill_children() -> usize {
    kill_children_sparing(true)
}

/// [`kill_children`] sparing nothing: for a root process between session hooks (the init's
/// pass), which starts no detached runner, so a child that passes for one (the same
/// executable, the same command line) is a leftover of a user hook like any other, and would
/// run the agent's code beside the root hooks after it.
pub fn kill_every_child() -> usize {
    kill_children_sparing(false)
}

fn kill_children_sparing(runners: bool) -> usize {
    let me = std::process::id() as i32;
    let mut killed = std::collections::BTreeSet::new();
    for _ in 0..ROUNDS {
        let spared = if runners {
            SPARED.lock().map(|s| s.clone()).unwrap_or_default()
        } else {
            Vec::new()
        };
        let children: Vec<i32> = procfs::children(None)
            .into_iter()
            .filter(|&p| p != me && !(runners && (spared.contains(&p) || adopted_runner(p))))
            .collect();
        if children.is_empty() {
            break;
        }
        for &pid in &children {
            // Our own child: its pid cannot be reused before we reap it.
            let _ = kill_pid(pid);
        }
        for &pid in &children {
            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid), None);
        }
        killed.extend(children);
    }
    // Children that `/proc` did not list yet (one re-parented in the meantime) and are dead.
    while let Ok(status) = nix::sys::wait::waitpid(None, Some(nix::sys::wait::WaitPidFlag::WNOHANG))
    {
        if status == nix::sys::wait::WaitStatus::StillAlive {
            break;
        }
    }
    killed.len()
}

/// SIGKILL to `pid`.
fn kill_pid(pid: i32) -> nix::Result<()> {
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(pid),
        nix::sys::signal::Signal::SIGKILL,
    )
}

/// Whether this process has no child at all, alive or dead: `waitid` on any child says
/// `ECHILD`. It looks without reaping (`WNOWAIT`) or waiting (`WNOHANG`).
///
/// For a subreaper that has reaped its hook, this settles that the hook left nothing: an
/// orphan is re-parented to us when its parent dies, before that parent can be reaped, so a
/// leftover is our child, or the descendant of one.
fn has_no_children() -> bool {
    nix::sys::wait::waitid(
        nix::sys::wait::Id::All,
        nix::sys::wait::WaitPidFlag::WEXITED
            | nix::sys::wait::WaitPidFlag::WNOHANG
            | nix::sys::wait::WaitPidFlag::WNOWAIT,
    ) == Err(nix::errno::Errno::ECHILD)
}

/// The children of this process, theirs, and so on (bounded, as `/proc` can change under us).
fn own_descendants() -> Vec<i32> {
    let mut found = procfs::children(None);
    let mut next = 0;
    while next < found.len() && found.len() < 100_000 {
        let pid = found[next];
        next += 1;
        for child in procfs::children(Some(pid)) {
            if !found.contains(&child) {
                found.push(child);
            }
        }
    }
    found
}

/// Whether `/proc/<pid>/environ` holds `marker` in a `HOOKVISOR_RUN` entry (one of its
/// `:`-separated values, [`add_marker`]); `None` when it cannot tell because the process is in
/// the middle of an exec.
fn carries(pid: i32, marker: &[u8]) -> Option<bool> {
    match environment(pid) {
        Environment::Read(environ) => Some(holds_marker(&environ, marker)),
        Environment::MidExec => None,
        Environment::Unreadable => Some(false),
    }
}

/// What `/proc/<pid>/environ` says of a process.
pub enum Environment {
    /// The environment its current program started with (empty if it was cleared).
    Read(Vec<u8>),
    /// In the middle of an exec: the new program has no environment yet; ask again.
    MidExec,
    /// Gone, or not ours to read.
    Unreadable,
}

/// Reads the environment of `pid`, telling an empty one from two things that read empty too:
/// a process in the middle of an exec (its new memory has no environment and no command line
/// yet), and a read that lost a race with an exec. The kernel ties the open file to the memory
/// the process had at `open`; if an exec replaces it before the `read`, the read returns
/// nothing, whatever the new environment holds. So after an empty read, once the command line
/// shows the process is not mid-exec (after an exec it is never empty: the kernel gives an
/// empty `argv` an `""`), the environment is read again, afresh. Zombies and kernel threads,
/// which have neither, read as empty.
pub fn environment(pid: i32) -> Environment {
    settle_environment(pid, procfs::environ(pid))
}

/// [`environment`] given what a first read of the file returned.
fn settle_environment(pid: i32, first_read: io::Result<Vec<u8>>) -> Environment {
    match first_read {
        Ok(environ) if !environ.is_empty() => Environment::Read(environ),
        Ok(_) => match procfs::cmdline(pid) {
            Ok(cmdline) if !cmdline.is_empty() => {
                procfs::environ(pid).map_or(Environment::Unreadable, Environment::Read)
            }
            Ok(_) if is_mid_exec(pid) => Environment::MidExec,
            Ok(_) => Environment::Read(Vec::new()),
            Err(_) => Environment::Unreadable,
        },
        Err(_) => Environment::Unreadable,
    }
}

/// Whether a process whose command line reads empty is in an exec: it is neither dead nor a
/// kernel thread (which have none either).
fn is_mid_exec(pid: i32) -> bool {
    procfs::stat(pid)
        .and_then(|stat| mid_exec_by_stat(&stat))
        .unwrap_or(false)
}

/// [`is_mid_exec`] from `/proc/<pid>/stat`: alive, and without `PF_KTHREAD` in its flags.
/// Not "its parent is pid 2": in a PID namespace pid 2 is an ordinary process (the init's
/// session runner, the parent of every leftover it adopts), and kthreadd is not there.
fn mid_exec_by_stat(stat: &procfs::Stat) -> Option<bool> {
    const PF_KTHREAD: u64 = 0x0020_0000;
    let state = stat.state()?;
    let flags = stat.flags()?;
    Some(!matches!(state, 'Z' | 'X') && flags & PF_KTHREAD == 0)
}

/// Whether an environment block (`NAME=value\0…`) has `marker` among the `:`-separated values
/// of a `HOOKVISOR_RUN` entry.
fn holds_marker(environ: &[u8], marker: &[u8]) -> bool {
    let prefix = format!("{RUN_MARKER_VARIABLE}=");
    environ
        .split(|&b| b == 0)
        .filter_map(|entry| entry.strip_prefix(prefix.as_bytes()))
        .any(|value| value.split(|&b| b == b':').any(|m| m == marker))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// [`super::mid_exec_by_stat`] of the text of a `stat` file.
    fn mid_exec_by_stat(stat: &[u8]) -> Option<bool> {
        super::mid_exec_by_stat(&procfs::Stat::parse(stat)?)
    }

    /// A process that keeps looking mid-exec for the whole patience (review of d9e6cf1: an
    /// unprivileged one can, with `prctl(PR_SET_MM_MAP)`) is looked at a few dozen times, where a
    /// fixed 200 µs pause looked 5,000 times; the first looks still come within a millisecond.
    #[test]
    fn pauses_for_a_process_mid_exec_double_up_to_a_bound() {
        let mut pause = None;
        let mut waited = Duration::ZERO;
        let mut looks = 0;
        let mut pauses = Vec::new();
        while waited < EXEC_PATIENCE {
            let next = next_exec_pause(pause);
            pause = Some(next);
            pauses.push(next);
            waited += next;
            looks += 1;
        }
        assert_eq!(pauses[0], Duration::from_micros(200));
        assert_eq!(pauses[1], Duration::from_micros(400));
        assert!(pauses[..3].iter().sum::<Duration>() < Duration::from_millis(2));
        // Doubling up to the cap, then the cap: 200 µs × 2⁸ = 51.2 ms is the first cut to 50.
        assert_eq!(pauses[7], Duration::from_micros(25_600), "{pauses:?}");
        assert!(
            pauses[8..].iter().all(|&p| p == Duration::from_millis(50)),
            "{pauses:?}"
        );
        assert!((20..40).contains(&looks), "{looks} looks in {waited:?}");
    }

    /// Found by the sandbox test under load: a leftover caught in an exec (no environment, no
    /// command line) whose parent is pid 2, the init's session runner in its PID namespace,
    /// was taken for a kernel thread, read as having an empty environment, and let go.
    #[test]
    fn mid_exec_is_told_from_kernel_threads_and_the_dead_by_flags_not_by_parent() {
        let stat = |state: &str, ppid: i32, flags: u64| {
            format!("7 (sh) {state} {ppid} 7 7 0 -1 {flags} 120 0 0 0 0 0 0 0 20 0 1 0")
                .into_bytes()
        };
        assert_eq!(mid_exec_by_stat(&stat("R", 2, 0x0040_0000)), Some(true));
        assert_eq!(mid_exec_by_stat(&stat("D", 1, 0x0040_0100)), Some(true));
        assert_eq!(mid_exec_by_stat(&stat("S", 2, 0x0020_8040)), Some(false));
        assert_eq!(mid_exec_by_stat(&stat("I", 0, 0x0420_8060)), Some(false));
        assert_eq!(mid_exec_by_stat(&stat("Z", 2, 0x0040_0104)), Some(false));
        assert_eq!(mid_exec_by_stat(&stat("X", 2, 0)), Some(false));
        // A command with spaces and parentheses of its own.
        let odd = b"9 (a) b (c)) R 2 9 9 0 -1 4194304 0 0";
        assert_eq!(mid_exec_by_stat(odd), Some(true));
        // A name cut in the middle of a character (found by review): not UTF-8, still alive.
        let cut = b"9 (\xe6\x97\xa5\xe6) R 2 9 9 0 -1 4194304 0 0";
        assert_eq!(mid_exec_by_stat(cut), Some(true));
        assert_eq!(mid_exec_by_stat(b"garbage"), None);
        // kthreadd and this process, as /proc shows them.
        if let Ok(kthreadd) = fs::read("/proc/2/stat")
            && kthreadd.windows(10).any(|w| w == b"(kthreadd)")
        {
            assert_eq!(mid_exec_by_stat(&kthreadd), Some(false));
        }
        let me = fs::read("/proc/self/stat").unwrap();
        assert_eq!(mid_exec_by_stat(&me), Some(true));
    }

    #[test]
    fn markers_are_unique() {
        let a = new_marker();
        let b = new_marker();
        assert_ne!(a, b);
        assert!(a.starts_with(&format!("{}.", std::process::id())));
    }

    #[test]
    fn a_marker_matches_whole_among_nested_ones() {
        let environ = b"A=1\0HOOKVISOR_RUN=7.1.9:8.0.5\0XHOOKVISOR_RUN=6.6.6\0";
        assert!(holds_marker(environ, b"7.1.9"));
        assert!(holds_marker(environ, b"8.0.5"));
        assert!(!holds_marker(environ, b"7.1"));
        assert!(!holds_marker(environ, b"6.6.6"));
        assert!(!holds_marker(b"A=HOOKVISOR_RUN=1\0", b"1"));
    }

    #[test]
    fn nested_markers_accumulate() {
        let mut env = vec![(OsString::from("HOOKVISOR_RUN"), OsString::from("1.0.1"))];
        add_marker(&mut env, "2.0.2");
        assert_eq!(env, [("HOOKVISOR_RUN".into(), "1.0.1:2.0.2".into())]);
        let mut env = Vec::new();
        add_marker(&mut env, "3.0.3");
        assert_eq!(env, [("HOOKVISOR_RUN".into(), "3.0.3".into())]);
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
        let entry = b"test.1";
        // Wait until each has finished its exec into sleep (its command line says so).
        for pid in [bare.id(), marked.id()] {
            while !fs::read(format!("/proc/{pid}/cmdline"))
                .unwrap()
                .starts_with(b"sleep\0")
            {
                std::thread::yield_now();
            }
        }
        assert_eq!(carries(bare.id() as i32, entry), Some(false));
        assert_eq!(carries(marked.id() as i32, entry), Some(true));
        for child in [&mut bare, &mut marked] {
            child.kill().unwrap();
            child.wait().unwrap();
        }
    }

    /// The race CI lost once: the environment file opened before an exec and read after it
    /// reads empty (the kernel reads the old, gone memory). The process is still found.
    #[test]
    fn an_environment_read_that_lost_a_race_with_an_exec_is_read_again() {
        use std::io::{Read, Write};
        let mut child = std::process::Command::new("sh")
            .args(["-c", "read go; exec sleep 100"])
            .env(RUN_MARKER_VARIABLE, "test.2")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let pid = child.id() as i32;
        let mut before_exec = fs::File::open(format!("/proc/{pid}/environ")).unwrap();
        child.stdin.take().unwrap().write_all(b"go\n").unwrap();
        while !fs::read(format!("/proc/{pid}/cmdline"))
            .unwrap()
            .starts_with(b"sleep\0")
        {
            std::thread::yield_now();
        }
        let mut stale = Vec::new();
        before_exec.read_to_end(&mut stale).unwrap();
        assert_eq!(
            stale, b"",
            "the kernel no longer reads the old memory empty"
        );
        let Environment::Read(environ) = settle_environment(pid, Ok(stale)) else {
            panic!("a process that finished its exec is settled");
        };
        assert!(holds_marker(&environ, b"test.2"));
        child.kill().unwrap();
        child.wait().unwrap();
    }

    /// A subreaper without children settles at once that a run left nothing; a child, alive
    /// or dead and not yet reaped, makes it look.
    #[test]
    fn no_children_is_told_without_reaping() {
        crate::exec::tests::run_isolated("leftovers::tests::no_children_child");
    }

    #[test]
    #[ignore = "run by no_children_is_told_without_reaping in a process of its own"]
    fn no_children_child() {
        become_subreaper().unwrap();
        assert!(has_no_children());
        let mut child = std::process::Command::new("sleep")
            .arg("100")
            .spawn()
            .unwrap();
        assert!(!has_no_children(), "a live child");
        child.kill().unwrap();
        // Dead, not reaped: still a child, and looking must not reap it.
        while !fs::read_to_string(format!("/proc/{}/stat", child.id()))
            .unwrap()
            .contains(") Z ")
        {
            std::thread::yield_now();
        }
        assert!(!has_no_children(), "a zombie child");
        assert!(!has_no_children(), "still there: not reaped by looking");
        child.wait().unwrap();
        assert!(has_no_children());
        assert_eq!(kill("no.such.marker"), 0);
    }
}

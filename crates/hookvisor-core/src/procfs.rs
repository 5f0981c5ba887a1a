//! The one reader of `/proc`: the list of processes, `/proc/PID/stat`, the uids of
//! `/proc/PID/status`, the children the kernel lists per thread, a command line and an
//! environment. The leftover sweep, the init's signalling of what is left, the check for the
//! agent's processes and the spawn runner's registry all read processes through it.
//!
//! Every read is of a process that may vanish (or exec) under us: a process gone reads as
//! `None` or an empty list, never as an error the caller must handle.

#![forbid(unsafe_code)]

use std::fs;
use std::io;

/// Every process visible in `/proc` (this one included).
pub fn pids() -> Vec<i32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .collect()
}

/// The fields of `/proc/PID/stat` after the command's name (`proc_pid_stat(5)` numbers them
/// from 1 = pid; this holds 3 = state onwards).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stat(String);

impl Stat {
    /// Parses the text of `/proc/PID/stat`. The command's name may hold spaces and
    /// parentheses and any bytes (the kernel cuts it at 15, perhaps in the middle of a
    /// character), so the fields are counted from the last `)`; they are ASCII.
    pub fn parse(stat: &[u8]) -> Option<Stat> {
        let close = stat.iter().rposition(|&b| b == b')')?;
        let rest = std::str::from_utf8(&stat[close + 1..]).ok()?;
        Some(Stat(rest.to_owned()))
    }

    /// Field `n` of `proc_pid_stat(5)` (3 = state, 4 = ppid, ...), when there is one.
    fn field(&self, n: usize) -> Option<&str> {
        self.0.split_whitespace().nth(n.checked_sub(3)?)
    }

    /// The state letter (`R`, `S`, `Z`, ...).
    pub fn state(&self) -> Option<char> {
        self.field(3)?.chars().next()
    }

    /// The parent's pid.
    pub fn ppid(&self) -> Option<i32> {
        self.field(4)?.parse().ok()
    }

    /// The process group.
    pub fn pgrp(&self) -> Option<i32> {
        self.field(5)?.parse().ok()
    }

    /// The kernel's `PF_*` flags.
    pub fn flags(&self) -> Option<u64> {
        self.field(9)?.parse().ok()
    }

    /// The start time, in clock ticks since boot.
    pub fn start_ticks(&self) -> Option<u64> {
        self.field(22)?.parse().ok()
    }
}

/// `/proc/<pid>/stat`, parsed; `None` when the process is gone.
pub fn stat(pid: i32) -> Option<Stat> {
    // As bytes: the command's name need not be UTF-8 (see [`Stat::parse`]).
    Stat::parse(&fs::read(format!("/proc/{pid}/stat")).ok()?)
}

/// The ids of the `Uid:` line of `/proc/<pid>/status` (real, effective, saved, file-system),
/// readable whatever the process's dumpable flag.
pub fn uids(pid: i32) -> Option<Vec<u32>> {
    let status = fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let ids = status.lines().find_map(|line| line.strip_prefix("Uid:"))?;
    ids.split_whitespace().map(|id| id.parse().ok()).collect()
}

/// The children of every thread of `pid` (`None`: this process), as the kernel lists them in
/// `task/*/children` (orphans may be re-parented to any thread).
pub fn children(pid: Option<i32>) -> Vec<i32> {
    let tasks = match pid {
        Some(pid) => fs::read_dir(format!("/proc/{pid}/task")),
        None => fs::read_dir("/proc/self/task"),
    };
    let mut children = Vec::new();
    for task in tasks.into_iter().flatten().flatten() {
        if let Ok(text) = fs::read_to_string(task.path().join("children")) {
            children.extend(
                text.split_whitespace()
                    .filter_map(|p| p.parse::<i32>().ok()),
            );
        }
    }
    children
}

/// `/proc/<pid>/cmdline`: the arguments, each ending in a NUL.
pub fn cmdline(pid: i32) -> io::Result<Vec<u8>> {
    fs::read(format!("/proc/{pid}/cmdline"))
}

/// `/proc/<pid>/environ`: the environment the process's program started with.
pub fn environ(pid: i32) -> io::Result<Vec<u8>> {
    fs::read(format!("/proc/{pid}/environ"))
}

/// Whether `pid` runs this very executable (the same file: device and inode).
pub fn runs_our_exe(pid: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (
        fs::metadata(format!("/proc/{pid}/exe")),
        fs::metadata("/proc/self/exe"),
    ) {
        (Ok(theirs), Ok(ours)) => theirs.dev() == ours.dev() && theirs.ino() == ours.ino(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_are_counted_after_the_last_parenthesis() {
        let stat = Stat::parse(b"12 (a b) c) R 99 7 7 0 -1 4194304 0 0").unwrap();
        assert_eq!(stat.state(), Some('R'));
        assert_eq!(stat.ppid(), Some(99));
        assert_eq!(stat.pgrp(), Some(7));
        assert_eq!(stat.flags(), Some(4_194_304));
        assert_eq!(stat.start_ticks(), None);
        // A name cut in the middle of a character: not UTF-8, still read.
        let cut = Stat::parse(b"9 (\xe6\x97\xa5\xe6) S 2 9").unwrap();
        assert_eq!((cut.state(), cut.ppid()), (Some('S'), Some(2)));
        assert_eq!(Stat::parse(b"garbage"), None);
        assert_eq!(Stat::parse(b"12 (x)").unwrap().state(), None);
    }

    #[test]
    fn this_process_is_listed_and_read() {
        let me = std::process::id() as i32;
        assert!(pids().contains(&me));
        let stat = stat(me).unwrap();
        assert_eq!(stat.ppid(), Some(nix::unistd::getppid().as_raw()));
        assert!(stat.start_ticks().is_some());
        let uid = nix::unistd::getuid().as_raw();
        assert_eq!(uids(me).unwrap()[0], uid);
        assert!(runs_our_exe(me));
        assert!(cmdline(me).unwrap().ends_with(b"\0"));
    }
}

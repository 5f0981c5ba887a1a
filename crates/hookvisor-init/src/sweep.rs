//! Signalling "everything that is left": as PID 1 that is every process of the namespace
//! (`kill(-1)`); as a subreaper it is only our descendants, found through /proc, because
//! `kill(-1)` there would reach every process of the user on the machine.

use std::collections::HashMap;

use hookvisor_core::procfs;
use libc::c_int;

use crate::signals;

/// Sends `sig` to every process the init is responsible for. Returns how many were signalled
/// (for PID 1, 1 means "at least one").
pub(crate) fn signal_all(sig: c_int) -> usize {
    let me = std::process::id() as i32;
    if me == 1 {
        return usize::from(signals::send(-1, sig).is_ok());
    }
    let mut count = 0;
    for pid in descendants(me) {
        if signals::send(pid, sig).is_ok() {
            count += 1;
        }
    }
    count
}

/// Every live descendant of `root`, parents before children.
fn descendants(root: i32) -> Vec<i32> {
    let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
    for pid in procfs::pids() {
        if let Some(ppid) = procfs::stat(pid).and_then(|stat| stat.ppid()) {
            children.entry(ppid).or_default().push(pid);
        }
    }
    let mut found = Vec::new();
    let mut queue = vec![root];
    while let Some(pid) = queue.pop() {
        for &child in children.get(&pid).map(Vec::as_slice).unwrap_or_default() {
            found.push(child);
            queue.push(child);
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parent_is_read_after_the_command_name() {
        let parent_of = |stat: &str| procfs::Stat::parse(stat.as_bytes())?.ppid();
        for (stat, parent) in [
            ("12 (sh) S 7 12 12 0 -1", Some(7)),
            ("12 (a b) c) R 99 12 12 0", Some(99)),
            ("12 (x)", None),
            ("garbage", None),
        ] {
            assert_eq!(parent_of(stat), parent, "{stat:?}");
        }
    }

    #[test]
    fn descendants_include_grandchildren() {
        let mut child = std::process::Command::new("sh")
            .args(["-c", "sleep 30 & echo $!; wait"])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        std::io::BufRead::read_line(
            &mut std::io::BufReader::new(child.stdout.take().unwrap()),
            &mut line,
        )
        .unwrap();
        let grandchild: i32 = line.trim().parse().unwrap();
        let found = descendants(std::process::id() as i32);
        signals::send(grandchild, libc::SIGKILL).unwrap();
        child.wait().unwrap();
        assert!(found.contains(&(child.id() as i32)), "{found:?}");
        assert!(found.contains(&grandchild), "{found:?}");
    }
}

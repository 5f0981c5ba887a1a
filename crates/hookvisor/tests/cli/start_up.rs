//! End-to-end tests of what `hookvisor` does before any command, in place of std's start-up,
//! which it skips (`no_main`, see main.rs): SIGPIPE ignored in hookvisor and not in its hooks,
//! closed standard descriptors opened on /dev/null.

use crate::common;

use std::fs;
use std::process::Command;

use common::{Workspace, stderr};

/// A `task.start` hook running `sh probe.sh`, which writes the SigIgn masks of its parent
/// (hookvisor) and of itself, and what hookvisor's descriptors 0 to 2 are, into the workspace.
fn probe(ws: &Workspace) {
    ws.write(
        "probe.sh",
        "grep '^SigIgn:' /proc/$PPID/status > parent.txt\n\
         grep '^SigIgn:' /proc/$$/status > own.txt\n\
         readlink /proc/$PPID/fd/0 /proc/$PPID/fd/1 /proc/$PPID/fd/2 > parent-fds.txt\n",
    );
    ws.write(
        ".discobot/hooks/probe.yml",
        "---\nevent: task.start\nargv: [\"sh\", \"probe.sh\"]\n---\n",
    );
}

/// Whether the `SigIgn:` line in `file` has SIGPIPE (13) set.
fn ignores_sigpipe(ws: &Workspace, file: &str) -> bool {
    let text = fs::read_to_string(ws.path().join(file)).expect(file);
    let hex = text.trim().trim_start_matches("SigIgn:").trim();
    let mask = u64::from_str_radix(hex, 16).expect("a hex mask");
    mask & (1 << (13 - 1)) != 0
}

#[test]
fn hookvisor_ignores_sigpipe_and_its_hooks_do_not() {
    let ws = Workspace::new();
    probe(&ws);
    let out = ws.hookvisor(&["fire", "task.start"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(ignores_sigpipe(&ws, "parent.txt"), "hookvisor");
    assert!(!ignores_sigpipe(&ws, "own.txt"), "the hook");
}

#[test]
fn closed_standard_descriptors_are_opened_on_dev_null() {
    let ws = Workspace::new();
    probe(&ws);
    // Run with stdin, stdout and stderr closed: a file hookvisor opens must not become one of
    // them, or the reply would be written into it (or fail on a closed descriptor).
    let template = ws.hookvisor_command();
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "exec \"$0\" fire task.start --json <&- >&- 2>&-"])
        .arg(env!("CARGO_BIN_EXE_hookvisor"))
        .current_dir(ws.path());
    for (name, value) in template.get_envs() {
        match value {
            Some(value) => cmd.env(name, value),
            None => cmd.env_remove(name),
        };
    }
    let out = cmd.output().expect("run sh");
    assert!(out.status.success(), "{out:?}");
    let fds = fs::read_to_string(ws.path().join("parent-fds.txt")).unwrap();
    assert_eq!(
        fds,
        "/dev/null\n".repeat(3),
        "hookvisor's 0, 1 and 2 while its hook ran"
    );
    let status = ws.status();
    assert_eq!(status["hooks"]["probe"]["lastExitCode"], 0, "{status}");
    for entry in walk(ws.state_dir()) {
        let text = fs::read(&entry).unwrap_or_default();
        assert!(
            // The reply's own field: the run history records a `decision` too.
            !String::from_utf8_lossy(&text).contains("\"maxAttempts\""),
            "the reply landed in {}",
            entry.display()
        );
    }
}

/// Every regular file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files
}

//! Many `hookvisor run` processes at once against one state dir: no update of status.json is
//! lost, and a reader that never takes the lock never parses a torn file.

use crate::common;

use std::fs;
use std::process::Child;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;

use common::Workspace;

const HOOKS: usize = 4;
const RUNS_PER_HOOK: usize = 6;

#[test]
fn concurrent_runs_lose_no_update_and_readers_never_see_a_torn_file() {
    let ws = Workspace::git();
    for i in 0..HOOKS {
        // Odd hooks fail, so failCount and consecutiveFailures are checked as well.
        let body = if i % 2 == 0 {
            "echo ok"
        } else {
            "echo no; exit 3"
        };
        ws.hook(&format!("h{i}.sh"), "file", "pattern: '*.txt'", body);
    }
    // The first run creates status.json; the reader starts on a file that exists.
    common::check(ws.hookvisor(&["run", "h0"]), "first run");

    let status_path = ws.state_dir().join("status.json");
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let stop = stop.clone();
        let path = status_path.clone();
        thread::spawn(move || {
            let mut reads = 0usize;
            while !stop.load(Ordering::Relaxed) {
                let bytes = fs::read(&path).expect("status.json never disappears");
                serde_json::from_slice::<serde_json::Value>(&bytes).unwrap_or_else(|e| {
                    panic!(
                        "torn status.json ({e}): {}",
                        String::from_utf8_lossy(&bytes)
                    )
                });
                reads += 1;
            }
            reads
        })
    };

    let children: Vec<(usize, Child)> = (0..HOOKS)
        .flat_map(|i| (0..RUNS_PER_HOOK).map(move |_| i))
        .map(|i| {
            let child = ws
                .hookvisor_command()
                .args(["run", &format!("h{i}")])
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .expect("spawn hookvisor run");
            (i, child)
        })
        .collect();
    for (i, mut child) in children {
        let code = child.wait().unwrap().code();
        let expected = if i % 2 == 0 { 0 } else { 1 };
        assert_eq!(code, Some(expected), "hookvisor run h{i}");
    }
    stop.store(true, Ordering::Relaxed);
    let reads = reader.join().expect("the reader saw only whole files");
    assert!(reads > 0);

    let status = ws.status();
    for i in 0..HOOKS {
        let entry = &status["hooks"][format!("h{i}")];
        let runs = RUNS_PER_HOOK + usize::from(i == 0);
        assert_eq!(entry["runCount"], runs, "h{i}: {entry}");
        if i % 2 == 0 {
            assert_eq!(entry["failCount"], 0, "h{i}: {entry}");
            assert_eq!(entry["lastResult"], "success", "h{i}: {entry}");
        } else {
            assert_eq!(entry["failCount"], runs, "h{i}: {entry}");
            assert_eq!(entry["consecutiveFailures"], runs, "h{i}: {entry}");
            assert_eq!(entry["lastExitCode"], 3, "h{i}: {entry}");
        }
    }
}

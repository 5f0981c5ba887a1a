//! End-to-end tests of end-of-turn evaluation (`hookvisor eval`), `run ID` and `status`: the
//! built binary on real git repositories (and a workspace without git), with status.json, the
//! logs and the re-prompt checked after every turn.

use crate::common;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant, SystemTime};

use common::{Workspace, tick};
use hookvisor_core::timestamp::parse_rfc3339;
use serde_json::{Value, json};

/// Keys of `eval --json` (docs/DESIGN.md, "End-of-turn evaluation").
const REPORT_KEYS: &[&str] = &[
    "action",
    "message",
    "attempt",
    "maxAttempts",
    "pending",
    "results",
    "problems",
];
/// Keys of each entry of its `results`.
const RESULT_KEYS: &[&str] = &["hookId", "exitCode", "success", "timedOut", "files"];
/// Keys of each entry of its `problems` (the shape of `list --json`).
const PROBLEM_KEYS: &[&str] = &["path", "reason"];

/// What the model does in a turn: writes a workspace file, then lets the clock tick.
fn edit(ws: &Workspace, relative: &str, contents: &str) {
    ws.write(relative, contents);
    tick();
}

/// The exit code of a finished command.
fn code(output: &Output) -> i32 {
    output
        .status
        .code()
        .unwrap_or_else(|| panic!("killed by a signal: {}", output.status))
}

/// Runs `hookvisor eval --json <args>`, checks the report has exactly docs/DESIGN.md's keys and that
/// the exit status agrees with the action (0 only on `pass`), and returns the parsed report.
fn eval_json(ws: &Workspace, args: &[&str]) -> Value {
    eval_json_env(ws, args, &[])
}

/// [`eval_json`] with extra environment.
fn eval_json_env(ws: &Workspace, args: &[&str], env: &[(&str, &str)]) -> Value {
    let mut cmd = ws.hookvisor_command();
    cmd.args(["eval", "--json"]).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let output = cmd.output().expect("run hookvisor eval");
    report_of(&output)
}

/// Parses and checks the report printed by `eval --json`.
fn report_of(output: &Output) -> Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let report: Value = serde_json::from_str(&stdout).unwrap_or_else(|e| {
        panic!(
            "eval --json printed no JSON ({e}; {}):\nstdout: {stdout}\nstderr: {}",
            output.status,
            common::stderr(output)
        )
    });
    assert_shape(&report);
    let expected = if report["action"] == "pass" { 0 } else { 1 };
    assert_eq!(code(output), expected, "exit status of {report}");
    report
}

/// Asserts the exact key sets and value types of an eval report.
fn assert_shape(report: &Value) {
    let keys: BTreeSet<&str> = report
        .as_object()
        .expect("the report is an object")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(keys, REPORT_KEYS.iter().copied().collect(), "{report}");
    assert!(
        ["pass", "reprompt", "failed", "gave_up"].contains(&report["action"].as_str().unwrap()),
        "{report}"
    );
    assert!(report["message"].is_null() || report["message"].is_string());
    assert_eq!(
        report["message"].is_string(),
        report["action"] == "reprompt",
        "a message exactly when re-prompting: {report}"
    );
    assert!(report["attempt"].is_u64() && report["maxAttempts"].is_u64());
    assert!(
        report["pending"]
            .as_array()
            .unwrap()
            .iter()
            .all(Value::is_string)
    );
    for result in report["results"].as_array().unwrap() {
        let keys: BTreeSet<&str> = result
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, RESULT_KEYS.iter().copied().collect(), "{result}");
        assert!(result["hookId"].is_string() && result["exitCode"].is_i64());
        assert!(result["success"].is_boolean() && result["timedOut"].is_boolean());
        assert!(
            result["files"]
                .as_array()
                .unwrap()
                .iter()
                .all(Value::is_string)
        );
    }
    for problem in report["problems"].as_array().unwrap() {
        let keys: BTreeSet<&str> = problem
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        assert_eq!(keys, PROBLEM_KEYS.iter().copied().collect(), "{problem}");
        assert!(problem["path"].is_string() && problem["reason"].is_string());
    }
}

/// The ids of the hooks that ran, in order.
fn ran(report: &Value) -> Vec<String> {
    report["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["hookId"].as_str().unwrap().to_owned())
        .collect()
}

/// The status.json entry of one hook.
fn entry(ws: &Workspace, id: &str) -> Value {
    let status = ws.status();
    let entry = status["hooks"][id].clone();
    assert!(entry.is_object(), "no entry for {id} in {status}");
    entry
}

/// Asserts the counters of a status entry: (lastResult, lastExitCode, runCount, failCount,
/// consecutiveFailures).
fn assert_counters(ws: &Workspace, id: &str, expected: (&str, Option<i32>, u64, u64, u64)) {
    let e = entry(ws, id);
    let got = (
        e["lastResult"].as_str().unwrap().to_owned(),
        e["lastExitCode"].as_i64().map(|c| c as i32),
        e["runCount"].as_u64().unwrap(),
        e["failCount"].as_u64().unwrap(),
        e["consecutiveFailures"].as_u64().unwrap(),
    );
    let want = (
        expected.0.to_owned(),
        expected.1,
        expected.2,
        expected.3,
        expected.4,
    );
    assert_eq!(got, want, "{id}: {e}");
}

/// The loop guard's counter in status.json (written only when not 0).
fn hook_turns(ws: &Workspace) -> u64 {
    let status = ws.status();
    match status.get("consecutiveHookTurns") {
        None => 0,
        Some(n) => n
            .as_u64()
            .unwrap_or_else(|| panic!("consecutiveHookTurns: {status}")),
    }
}

/// The pending set in status.json.
fn pending(ws: &Workspace) -> Value {
    ws.status()["pendingHooks"].clone()
}

/// The re-prompt of a hook in the seed format, output inlined.
fn seed_message(name: &str, pattern: &str, files: &str, code: i32, output: &str, n: u32) -> String {
    format!(
        "[Discobot Hook Failed] \"{name}\" (pattern: {pattern})\n\nFiles: {files}\nExit code: \
         {code}\n\nOutput:\n{output}\n\nPlease fix the issues and ensure the hook passes. \
         (Attempt {n}/3)"
    )
}

/// A file hook that fails, naming each matching file that contains "bad".
const CHECK_BODY: &str = r#"status=0
for f in $DISCOBOT_CHANGED_FILES; do
  if grep -q bad "$f"; then echo "$f: contains bad"; status=1; fi
done
exit $status"#;

#[test]
fn failure_reprompts_then_the_fix_passes_with_status_json_at_every_step() {
    let ws = Workspace::git();
    ws.hook(
        "check.sh",
        "file",
        "name: Text check\npattern: '*.txt'",
        CHECK_BODY,
    );
    ws.stage("README.md", "hello\n");
    common::check(ws.commit("initial"), "initial commit");
    let before = SystemTime::now() - Duration::from_secs(2);

    // Turn 1 (user): the model writes a bad file.
    edit(&ws, "notes/a.txt", "bad line\n");
    let report = eval_json(&ws, &["--trigger", "user"]);
    let message = seed_message(
        "Text check",
        "*.txt",
        "notes/a.txt",
        1,
        "notes/a.txt: contains bad",
        1,
    );
    assert_eq!(
        report,
        json!({
            "action": "reprompt", "message": message, "attempt": 1, "maxAttempts": 3,
            "pending": ["check"],
            "results": [{"hookId": "check", "exitCode": 1, "success": false, "timedOut": false,
                         "files": ["notes/a.txt"]}],
            "problems": [],
        })
    );
    let status = ws.status();
    assert_eq!(status["pendingHooks"], json!(["check"]));
    assert!(status.get("consecutiveHookTurns").is_none_or(|n| n == 0));
    let evaluated = parse_rfc3339(status["lastEvaluatedAt"].as_str().unwrap()).unwrap();
    assert!(evaluated >= before, "lastEvaluatedAt {status}");
    let log = ws.state_dir().join("output/check.log");
    let e = entry(&ws, "check");
    assert_eq!(e["hookId"], "check");
    assert_eq!(e["hookName"], "Text check");
    assert_eq!(e["type"], "file");
    assert_eq!(e["outputPath"], log.to_str().unwrap());
    let ran_at = parse_rfc3339(e["lastRunAt"].as_str().unwrap()).expect("lastRunAt is RFC 3339");
    assert!(ran_at >= before && ran_at <= SystemTime::now() + Duration::from_secs(2));
    assert_counters(&ws, "check", ("failure", Some(1), 1, 1, 1));
    assert_eq!(
        fs::read_to_string(&log).unwrap(),
        "notes/a.txt: contains bad\n"
    );

    // Turn 2 (the re-prompt): the model tries and fails; the text mode prints the message.
    edit(&ws, "notes/a.txt", "still bad\n");
    let output = ws.hookvisor(&["eval", "--trigger", "hook"]);
    assert_eq!(code(&output), 1, "{}", common::stderr(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!(
            "{}\n",
            seed_message(
                "Text check",
                "*.txt",
                "notes/a.txt",
                1,
                "notes/a.txt: contains bad",
                2
            )
        )
    );
    assert_eq!(pending(&ws), json!(["check"]));
    assert_eq!(hook_turns(&ws), 1);
    assert_counters(&ws, "check", ("failure", Some(1), 2, 2, 2));

    // Turn 3 (the second re-prompt): the model fixes it.
    edit(&ws, "notes/a.txt", "good line\n");
    let report = eval_json(&ws, &["--trigger", "hook"]);
    assert_eq!(
        report,
        json!({
            "action": "pass", "message": null, "attempt": 3, "maxAttempts": 3, "pending": [],
            "results": [{"hookId": "check", "exitCode": 0, "success": true, "timedOut": false,
                         "files": ["notes/a.txt"]}],
            "problems": [],
        })
    );
    assert_eq!(pending(&ws), json!([]));
    assert_eq!(hook_turns(&ws), 2);
    assert_counters(&ws, "check", ("success", Some(0), 3, 2, 0));
    assert_eq!(fs::read_to_string(&log).unwrap(), "", "the log is per run");

    // Nothing changed since: the hook does not run again, and text mode prints nothing.
    let output = ws.hookvisor(&["eval"]);
    assert_eq!(code(&output), 0, "{}", common::stderr(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "");
    assert_counters(&ws, "check", ("success", Some(0), 3, 2, 0));
    assert_eq!(hook_turns(&ws), 0, "a user turn resets");

    // Committed: the dirty set is empty, nothing becomes pending.
    ws.git_ok(&["add", "-A"]);
    common::check(ws.commit("fix"), "commit the fix");
    tick();
    let report = eval_json(&ws, &[]);
    assert_eq!(report["action"], "pass");
    assert_eq!(ran(&report), Vec::<String>::new());
    assert_eq!(pending(&ws), json!([]));
}

/// Drives a hook that always fails through a user turn, `max + 2` hook turns and a user turn,
/// the model editing the file every turn, and checks the exact sequence of actions.
fn assert_loop_guard(max: u32, args: &[&str], env: &[(&str, &str)]) {
    let ws = Workspace::git();
    ws.hook(
        "always.sh",
        "file",
        "pattern: '*.txt'",
        "echo still broken; exit 2",
    );
    let turn = |n: usize, trigger: &str| {
        edit(&ws, "a.txt", &format!("attempt {n}\n"));
        let mut all = vec!["--trigger", trigger];
        all.extend_from_slice(args);
        let report = eval_json_env(&ws, &all, env);
        assert_eq!(ran(&report), ["always"], "the edit makes it run: {report}");
        assert_eq!(report["maxAttempts"], max, "{report}");
        assert_eq!(report["pending"], json!(["always"]));
        report
    };
    let expect = |hook_turns: u32| {
        if hook_turns < max {
            "reprompt"
        } else {
            "gave_up"
        }
    };

    let mut actions = Vec::new();
    let mut expected = Vec::new();
    let report = turn(0, "user");
    assert_eq!(report["attempt"], 1);
    actions.push(report["action"].as_str().unwrap().to_owned());
    expected.push(expect(0));
    for k in 1..=max + 2 {
        let report = turn(k as usize, "hook");
        assert_eq!(report["attempt"], k + 1, "{report}");
        if report["action"] == "reprompt" {
            let message = report["message"].as_str().unwrap();
            assert!(
                message.ends_with(&format!("(Attempt {}/{max})", k + 1)),
                "{message}"
            );
        }
        assert_eq!(hook_turns(&ws), u64::from(k));
        actions.push(report["action"].as_str().unwrap().to_owned());
        expected.push(expect(k));
    }
    let report = turn(max as usize + 3, "user");
    assert_eq!(report["attempt"], 1);
    assert_eq!(hook_turns(&ws), 0);
    actions.push(report["action"].as_str().unwrap().to_owned());
    expected.push(expect(0));

    assert_eq!(actions, expected, "max_retries {max}");
    let reprompts = actions.iter().filter(|a| *a == "reprompt").count() as u32;
    assert_eq!(reprompts, max + u32::from(max > 0), "{actions:?}");
    let runs = u64::from(max) + 4;
    assert_counters(&ws, "always", ("failure", Some(2), runs, runs, runs));
}

#[test]
fn loop_guard_allows_exactly_three_reprompts_per_user_turn_by_default() {
    assert_loop_guard(3, &[], &[]);
}

#[test]
fn loop_guard_follows_max_retries_option() {
    assert_loop_guard(1, &["--max-retries", "1"], &[]);
    // The option wins over the variable.
    assert_loop_guard(
        0,
        &["--max-retries", "0"],
        &[("HOOKVISOR_MAX_RETRIES", "5")],
    );
}

#[test]
fn loop_guard_follows_hookvisor_max_retries_variable() {
    assert_loop_guard(2, &[], &[("HOOKVISOR_MAX_RETRIES", "2")]);
}

#[test]
fn giving_up_says_so_on_stderr_and_prints_no_message() {
    let ws = Workspace::git();
    ws.hook("always.sh", "file", "pattern: '*.txt'", "echo nope; exit 1");
    edit(&ws, "a.txt", "1\n");
    let output = ws.hookvisor(&["eval", "--max-retries", "0"]);
    assert_eq!(code(&output), 1);
    assert_eq!(String::from_utf8_lossy(&output.stdout), "");
    let stderr = common::stderr(&output);
    assert!(
        stderr.contains("'always'") && stderr.contains("giving up"),
        "{stderr}"
    );
}

#[test]
fn an_unchanged_workspace_reprompts_nothing() {
    let ws = Workspace::git();
    ws.hook("check.sh", "file", "pattern: '*.txt'", CHECK_BODY);
    ws.stage("base.txt", "fine\n");
    common::check(ws.commit("initial"), "initial commit");

    edit(&ws, "a.txt", "bad\n");
    let report = eval_json(&ws, &[]);
    assert_eq!(report["action"], "reprompt");
    assert_counters(&ws, "check", ("failure", Some(1), 1, 1, 1));

    // The model did nothing: the same inputs would give the same failure.
    for trigger in ["hook", "user", "hook"] {
        let report = eval_json(&ws, &["--trigger", trigger]);
        assert_eq!(report["action"], "pass", "{report}");
        assert_eq!(ran(&report), Vec::<String>::new());
        assert_eq!(report["pending"], json!(["check"]));
        assert_counters(&ws, "check", ("failure", Some(1), 1, 1, 1));
        assert_eq!(pending(&ws), json!(["check"]));
    }

    // A change that does not match its pattern does not run it either.
    edit(&ws, "notes.md", "unrelated\n");
    let report = eval_json(&ws, &[]);
    assert_eq!(
        (report["action"].as_str(), ran(&report)),
        (Some("pass"), vec![])
    );
    assert_counters(&ws, "check", ("failure", Some(1), 1, 1, 1));

    // A change to a file it checks does, even a file that was already dirty.
    edit(&ws, "a.txt", "bad again\n");
    let report = eval_json(&ws, &[]);
    assert_eq!(report["action"], "reprompt");
    assert_counters(&ws, "check", ("failure", Some(1), 2, 2, 2));

    // An explicit run reruns it whatever changed.
    let output = ws.hookvisor(&["run", "check"]);
    assert_eq!(code(&output), 1);
    assert_counters(&ws, "check", ("failure", Some(1), 3, 3, 3));

    // Reverting the file to HEAD (deleting the new one) leaves nothing for it to check: it
    // leaves the pending set without running.
    fs::remove_file(ws.path().join("a.txt")).unwrap();
    tick();
    let report = eval_json(&ws, &[]);
    assert_eq!(report["action"], "pass");
    assert_eq!(ran(&report), Vec::<String>::new());
    assert_eq!(pending(&ws), json!([]));
    assert_counters(&ws, "check", ("failure", Some(1), 3, 3, 3));
}

#[test]
fn the_first_failure_stops_the_evaluation_and_later_hooks_stay_pending() {
    let ws = Workspace::git();
    ws.hook("10-first.sh", "file", "pattern: '*.txt'", CHECK_BODY);
    ws.hook(
        "20-second.sh",
        "file",
        "pattern: '*.txt'",
        "echo second ran with $DISCOBOT_CHANGED_FILES",
    );
    edit(&ws, "a.txt", "bad\n");
    let report = eval_json(&ws, &[]);
    assert_eq!(report["action"], "reprompt");
    assert_eq!(ran(&report), ["10-first"]);
    assert_eq!(report["pending"], json!(["10-first", "20-second"]));
    assert_eq!(pending(&ws), json!(["10-first", "20-second"]));
    assert_counters(&ws, "20-second", ("pending", None, 0, 0, 0));
    let second_log = ws.state_dir().join("output/20-second.log");
    assert!(!second_log.exists(), "the second hook never started");

    edit(&ws, "a.txt", "good\n");
    let report = eval_json(&ws, &["--trigger", "hook"]);
    assert_eq!(report["action"], "pass");
    assert_eq!(ran(&report), ["10-first", "20-second"]);
    assert_eq!(report["pending"], json!([]));
    assert_counters(&ws, "10-first", ("success", Some(0), 2, 1, 0));
    assert_counters(&ws, "20-second", ("success", Some(0), 1, 0, 0));
    assert_eq!(
        fs::read_to_string(second_log).unwrap(),
        "second ran with a.txt\n"
    );
}

#[test]
fn notify_llm_false_fails_without_a_message() {
    let ws = Workspace::git();
    ws.hook(
        "quiet.sh",
        "file",
        "pattern: '*.txt'\nnotify_llm: false",
        "echo secret failure; exit 7",
    );
    edit(&ws, "a.txt", "x\n");
    let report = eval_json(&ws, &[]);
    assert_eq!(
        report,
        json!({
            "action": "failed", "message": null, "attempt": 1, "maxAttempts": 3,
            "pending": ["quiet"],
            "results": [{"hookId": "quiet", "exitCode": 7, "success": false, "timedOut": false,
                         "files": ["a.txt"]}],
            "problems": [],
        })
    );
    assert_counters(&ws, "quiet", ("failure", Some(7), 1, 1, 1));

    edit(&ws, "a.txt", "y\n");
    let output = ws.hookvisor(&["eval"]);
    assert_eq!(code(&output), 1);
    assert_eq!(String::from_utf8_lossy(&output.stdout), "", "no re-prompt");
    let stderr = common::stderr(&output);
    assert!(
        stderr.contains("'quiet'") && stderr.contains("exit code 7"),
        "{stderr}"
    );
    assert!(!stderr.contains("secret failure"), "{stderr}");
}

/// `VmHWM` (peak resident set) in a `/proc/<pid>/status` file, if the process has memory.
fn peak_rss_kib(status: &str) -> Option<u64> {
    let text = fs::read_to_string(status).ok()?;
    let line = text.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Bytes `seq 1 n` prints.
fn seq_bytes(n: u64) -> u64 {
    let mut total = 0;
    let mut low = 1;
    let mut digits = 1;
    while low <= n {
        let high = (low * 10 - 1).min(n);
        total += (high - low + 1) * (digits + 1);
        low *= 10;
        digits += 1;
    }
    total
}

#[test]
fn huge_output_keeps_memory_bounded_caps_the_log_and_shows_the_tail() {
    // About 100 MB of output, through a pipe, into an evaluation.
    const LINES: u64 = 12_000_000;
    const LOG_LIMIT: u64 = 8 * 1024 * 1024;
    let ws = Workspace::git();
    // The hook announces itself once all its output went through, then waits.
    let BlockedEval { child, go, .. } = blocked_eval(
        &ws,
        "big.sh",
        &format!("seq 1 {LINES}; touch \"$HV_STARTED\"; read line < \"$HV_GO\"; exit 3"),
        "x\n",
    );
    // The peak resident set of the hookvisor process itself, from /proc (getrusage of children
    // would also count this test process: a child spawned with vfork records its parent's peak
    // when it execs). First once all the output went through, while the hook waits...
    let status = format!("/proc/{}/status", child.id());
    let mut peak_kib = peak_rss_kib(&status).expect("hookvisor is running");
    fs::OpenOptions::new()
        .write(true)
        .open(&go)
        .unwrap()
        .write_all(b"go\n")
        .unwrap();
    // ...then for as long as it runs (a zombie has no memory lines).
    while let Some(kib) = peak_rss_kib(&status) {
        peak_kib = peak_kib.max(kib);
        std::thread::yield_now();
    }
    let report = report_of(&child.wait_with_output().unwrap());
    assert!(
        peak_kib < 32 * 1024,
        "the evaluation of a hook printing {} MB peaked at {peak_kib} KiB",
        seq_bytes(LINES) / 1_000_000
    );

    assert_eq!(report["action"], "reprompt");
    let log_path = ws.state_dir().join("output/big.log");
    let tail: String = (LINES - 14..=LINES).map(|n| format!("{n}\n")).collect();
    assert_eq!(
        report["message"].as_str().unwrap(),
        format!(
            "[Discobot Hook Failed] \"big\" (pattern: *.txt)\n\nFiles: a.txt\nExit code: 3\n\n\
             Output (last 15 lines; full log: {}):\n{tail}\nPlease fix the issues and ensure \
             the hook passes. (Attempt 1/3)",
            log_path.display()
        )
    );

    let log = fs::read(&log_path).unwrap();
    let note = format!(
        "[output truncated: {} more bytes not logged]\n",
        seq_bytes(LINES) - LOG_LIMIT
    );
    assert!(log.starts_with(b"1\n2\n3\n"));
    assert!(
        log.ends_with(note.as_bytes()),
        "log ends with {:?}",
        String::from_utf8_lossy(&log[log.len().saturating_sub(100)..])
    );
    assert!(log.len() as u64 <= LOG_LIMIT + note.len() as u64 + 1);
    assert_eq!(entry(&ws, "big")["lastExitCode"], 3);
}

#[test]
fn patterns_without_a_slash_match_at_any_depth_and_with_one_are_anchored() {
    let ws = Workspace::git();
    ws.stage("cmd/x/old.go", "package x\n");
    common::check(ws.commit("initial"), "initial commit");
    let body = "printf '%s\\n' \"$DISCOBOT_CHANGED_FILES\"";
    ws.hook("go.sh", "file", "pattern: '*.go'", body);
    ws.hook("ts.sh", "file", "pattern: 'src/**/*.ts'", body);
    ws.hook("md.sh", "file", "pattern: 'docs/*.md'", body);
    for file in [
        "cmd/x/main.go",
        "main.go",
        "internal/a/b/c.go",
        "src/a.ts",
        "src/deep/er/b.ts",
        "lib/c.ts",
        "lib/src/d.ts",
        "docs/sub/e.md",
        "README.md",
    ] {
        ws.write(file, "x\n");
    }
    ws.write("cmd/x/old.go", "package x // changed\n");
    tick();
    let report = eval_json(&ws, &[]);
    assert_eq!(report["action"], "pass");
    assert_eq!(
        report["results"],
        json!([
            {"hookId": "go", "exitCode": 0, "success": true, "timedOut": false,
             "files": ["cmd/x/main.go", "cmd/x/old.go", "internal/a/b/c.go", "main.go"]},
            {"hookId": "ts", "exitCode": 0, "success": true, "timedOut": false,
             "files": ["src/a.ts", "src/deep/er/b.ts"]},
        ]),
        "md.sh must not match docs/sub/e.md"
    );
    assert!(
        ws.status()["hooks"]
            .get("md")
            .is_some_and(|e| e["runCount"] == 0)
    );
    assert_eq!(
        fs::read_to_string(ws.state_dir().join("output/go.log")).unwrap(),
        "cmd/x/main.go cmd/x/old.go internal/a/b/c.go main.go\n"
    );
}

/// Creates a FIFO.
fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
}

/// Polls until `path` exists (an event the test cannot otherwise await).
fn wait_for_file(path: &Path) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !path.exists() {
        assert!(
            Instant::now() < deadline,
            "{} never appeared",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// An `eval --json` caught in the middle of a file hook on `*.txt` (the file `hook` of the hooks
/// dir): the hook runs `script`, which announces itself by making `$HV_STARTED` and then blocks
/// reading `$HV_GO`, a FIFO. `a.txt` is written with `contents` first; returns once the hook
/// has announced itself.
struct BlockedEval {
    child: Child,
    started: PathBuf,
    go: PathBuf,
}

fn blocked_eval(ws: &Workspace, hook: &str, script: &str, contents: &str) -> BlockedEval {
    ws.hook(hook, "file", "pattern: '*.txt'", script);
    let started = ws.base().join("started");
    let go = ws.base().join("go");
    mkfifo(&go);
    edit(ws, "a.txt", contents);
    let child = ws
        .hookvisor_command()
        .args(["eval", "--json"])
        .env("HV_STARTED", &started)
        .env("HV_GO", &go)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&started);
    BlockedEval { child, started, go }
}

#[test]
fn an_edit_made_while_a_hook_runs_is_caught_next_turn() {
    let ws = Workspace::git();
    // The hook says it started, then waits for the test to let it finish.
    let BlockedEval { child, started, go } = blocked_eval(
        &ws,
        "wait.sh",
        "echo \"$DISCOBOT_CHANGED_FILES\" > \"$HV_STARTED\"; read line < \"$HV_GO\"; exit 0",
        "first\n",
    );
    assert_eq!(entry(&ws, "wait")["lastResult"], "running");
    // The model's edit lands while the hook runs.
    ws.write("a.txt", "edited during the run\n");
    ws.write("b.txt", "new during the run\n");
    // Opening the FIFO for writing waits for the hook to open it for reading.
    fs::OpenOptions::new()
        .write(true)
        .open(&go)
        .unwrap()
        .write_all(b"go\n")
        .unwrap();
    let report = report_of(&child.wait_with_output().unwrap());
    assert_eq!(report["action"], "pass");
    assert_eq!(report["results"][0]["files"], json!(["a.txt"]));
    assert_eq!(pending(&ws), json!([]));
    tick();

    // Next turn: both edits are seen and the hook runs again on them.
    let dev_null = Path::new("/dev/null");
    fs::remove_file(&started).unwrap();
    let env = [
        ("HV_STARTED", started.to_str().unwrap()),
        ("HV_GO", dev_null.to_str().unwrap()),
    ];
    let report = eval_json_env(&ws, &[], &env);
    assert_eq!(report["action"], "pass");
    assert_eq!(ran(&report), ["wait"]);
    assert_eq!(report["results"][0]["files"], json!(["a.txt", "b.txt"]));
    assert_eq!(fs::read_to_string(&started).unwrap(), "a.txt b.txt\n");

    // And then not again.
    let report = eval_json_env(&ws, &[], &env);
    assert_eq!(ran(&report), Vec::<String>::new());
    assert_counters(&ws, "wait", ("success", Some(0), 2, 0, 0));
}

#[test]
fn a_workspace_without_git_is_walked() {
    let ws = Workspace::new();
    assert!(!ws.path().join(".git").exists());
    ws.hook("check.sh", "file", "pattern: '*.txt'", CHECK_BODY);
    ws.write(".gitignore", "ignored.txt\nbuild/\n");
    ws.write("ignored.txt", "bad\n");
    ws.write("build/out.txt", "bad\n");
    edit(&ws, "sub/a.txt", "bad\n");
    let report = eval_json(&ws, &[]);
    assert_eq!(report["action"], "reprompt");
    assert_eq!(report["results"][0]["files"], json!(["sub/a.txt"]));
    assert!(
        report["message"]
            .as_str()
            .unwrap()
            .contains("\nOutput:\nsub/a.txt: contains bad\n")
    );

    // Unchanged: nothing runs.
    let report = eval_json(&ws, &["--trigger", "hook"]);
    assert_eq!(
        (report["action"].as_str(), ran(&report)),
        (Some("pass"), vec![])
    );
    assert_eq!(report["pending"], json!(["check"]));

    // Ignored files changing run nothing either.
    edit(&ws, "ignored.txt", "bad, still ignored\n");
    let report = eval_json(&ws, &["--trigger", "hook"]);
    assert_eq!(ran(&report), Vec::<String>::new());

    // The fix is seen by its mtime.
    edit(&ws, "sub/a.txt", "good\n");
    let report = eval_json(&ws, &["--trigger", "hook"]);
    assert_eq!(report["action"], "pass");
    assert_eq!(ran(&report), ["check"]);
    assert_eq!(report["pending"], json!([]));
    assert_counters(&ws, "check", ("success", Some(0), 2, 1, 0));
}

#[test]
fn a_repository_subdirectory_as_workspace_sees_only_its_files_relative_to_itself() {
    let ws = Workspace::git();
    let app = ws.path().join("app");
    ws.stage("app/tracked.txt", "fine\n");
    ws.stage("other/tracked.txt", "fine\n");
    common::check(ws.commit("initial"), "initial commit");
    let body = "echo \"$(pwd)|$DISCOBOT_WORKSPACE|$DISCOBOT_CHANGED_FILES\"; \
                for f in $DISCOBOT_CHANGED_FILES; do test -f \"$f\" || exit 9; done";
    ws.hook_in(&app, "all.sh", "file", "pattern: '*.txt'", body);
    ws.hook_in(&app, "src.sh", "file", "pattern: 'src/*.txt'", body);
    ws.write("app/tracked.txt", "modified\n");
    ws.write("app/src/new.txt", "new\n");
    ws.write("src/outside.txt", "new, outside the workspace\n");
    ws.write("other/tracked.txt", "modified, outside\n");
    tick();

    let report = eval_json(&ws, &["--workspace", app.to_str().unwrap()]);
    assert_eq!(
        report["results"],
        json!([
            {"hookId": "all", "exitCode": 0, "success": true, "timedOut": false,
             "files": ["src/new.txt", "tracked.txt"]},
            {"hookId": "src", "exitCode": 0, "success": true, "timedOut": false,
             "files": ["src/new.txt"]},
        ])
    );
    let app = app.to_str().unwrap();
    assert_eq!(
        fs::read_to_string(ws.state_dir().join("output/src.log")).unwrap(),
        format!("{app}|{app}|src/new.txt\n")
    );
    assert_eq!(
        fs::read_to_string(ws.state_dir().join("output/all.log")).unwrap(),
        format!("{app}|{app}|src/new.txt tracked.txt\n")
    );
}

#[test]
fn odd_file_names_reach_the_hook_intact_through_the_nul_list() {
    let ws = Workspace::git();
    let copy = ws.base().join("changed.nul");
    ws.hook(
        "names.sh",
        "file",
        "pattern: '*.txt'",
        &format!(
            "cp \"$HOOKVISOR_CHANGED_FILES_NUL\" '{}'\n\
             xargs -0 -n1 test -f < \"$HOOKVISOR_CHANGED_FILES_NUL\" || exit 5",
            copy.display()
        ),
    );
    let names = [
        "with space.txt",
        "it's \"quoted\".txt",
        "new\nline.txt",
        "tab\there.txt",
        "$(not a command) `nor this`.txt",
        "-starts-with-dash.txt",
        "dir with space/ünïcödé.txt",
        "back\\slash.txt",
    ];
    for name in names {
        ws.write(name, "x\n");
    }
    tick();
    let report = eval_json(&ws, &[]);
    assert_eq!(report["action"], "pass", "{report}");
    let mut expected: Vec<&str> = names.to_vec();
    expected.sort();
    let listed = fs::read(&copy).unwrap();
    let got: Vec<String> = listed
        .split(|b| *b == 0)
        .filter(|s| !s.is_empty())
        .map(|s| String::from_utf8(s.to_vec()).unwrap())
        .collect();
    let mut sorted = got.clone();
    sorted.sort();
    assert_eq!(sorted, expected);
    let reported: Vec<&str> = report["results"][0]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f.as_str().unwrap())
        .collect();
    assert_eq!(reported, got, "the NUL list and the report agree, in order");
}

/// Issue 12: a file name that is not UTF-8 reaches the hook byte for byte through the NUL list
/// (it used to arrive with U+FFFD in place of the bad byte, naming a file that does not exist),
/// is matched by `*.txt` like any other, and shows lossily in the JSON report.
#[test]
fn a_name_that_is_not_utf8_reaches_the_hook_byte_for_byte() {
    let ws = Workspace::git();
    let copy = ws.base().join("changed.nul");
    let spaced = ws.base().join("changed.txt");
    ws.hook(
        "names.sh",
        "file",
        "pattern: '*.txt'",
        &format!(
            "cp \"$HOOKVISOR_CHANGED_FILES_NUL\" '{}'\n\
             printf '%s' \"$DISCOBOT_CHANGED_FILES\" > '{}'\n\
             xargs -0 -n1 test -f < \"$HOOKVISOR_CHANGED_FILES_NUL\" || exit 5",
            copy.display(),
            spaced.display()
        ),
    );
    ws.write("plain.txt", "x\n");
    fs::create_dir_all(ws.path().join("sub")).unwrap();
    fs::write(ws.path().join(OsStr::from_bytes(b"\xff.txt")), "x\n").unwrap();
    fs::write(ws.path().join(OsStr::from_bytes(b"sub/caf\xe9.txt")), "x\n").unwrap();
    tick();
    let report = eval_json(&ws, &[]);
    assert_eq!(report["action"], "pass", "{report}");
    assert_eq!(
        fs::read(&copy).unwrap(),
        b"plain.txt\0sub/caf\xe9.txt\0\xff.txt\0",
        "the NUL list holds the exact bytes of each name"
    );
    assert_eq!(
        fs::read(&spaced).unwrap(),
        b"plain.txt sub/caf\xe9.txt \xff.txt",
        "DISCOBOT_CHANGED_FILES too"
    );
    assert_eq!(
        report["results"][0]["files"],
        json!(["plain.txt", "sub/caf\u{FFFD}.txt", "\u{FFFD}.txt"]),
        "JSON shows the names lossily"
    );
}

#[test]
fn run_records_session_and_pre_commit_hooks_and_rejects_unknown_ids() {
    let ws = Workspace::git();
    ws.hook("setup.sh", "session", "name: Set up", "echo set up");
    ws.hook("lint.sh", "pre-commit", "", "echo lint failed; exit 4");
    ws.hook("slow.sh", "session", "timeout: 1", "exec sleep 30");

    let output = ws.hookvisor(&["run", "setup"]);
    assert_eq!(code(&output), 0, "{}", common::stderr(&output));
    let log = ws.state_dir().join("output/setup.log");
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("setup: passed (exit code 0); log: {}\n", log.display())
    );
    let output = ws.hookvisor(&["run", "setup", "--json"]);
    assert_eq!(code(&output), 0);
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        result,
        json!({"hookId": "setup", "exitCode": 0, "success": true, "timedOut": false})
    );
    let e = entry(&ws, "setup");
    assert_eq!(
        (e["type"].as_str(), e["hookName"].as_str()),
        (Some("session"), Some("Set up"))
    );
    assert_counters(&ws, "setup", ("success", Some(0), 2, 0, 0));
    assert_eq!(fs::read_to_string(&log).unwrap(), "set up\n");

    let output = ws.hookvisor(&["run", "lint", "--json"]);
    assert_eq!(code(&output), 1);
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        result,
        json!({"hookId": "lint", "exitCode": 4, "success": false, "timedOut": false})
    );
    assert_eq!(entry(&ws, "lint")["type"], "pre-commit");
    assert_counters(&ws, "lint", ("failure", Some(4), 1, 1, 1));

    let output = ws.hookvisor(&["run", "slow", "--json"]);
    assert_eq!(code(&output), 1);
    let result: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        result,
        json!({"hookId": "slow", "exitCode": 124, "success": false, "timedOut": true})
    );
    assert_eq!(entry(&ws, "slow")["lastExitCode"], 124);

    let output = ws.hookvisor(&["run", "nope"]);
    assert_eq!(code(&output), 2);
    let stderr = common::stderr(&output);
    assert!(stderr.contains("'nope'"), "{stderr}");
    assert!(
        stderr.contains("setup") && stderr.contains("hookvisor list"),
        "{stderr}"
    );
    assert_eq!(stderr.trim_end().lines().count(), 1, "one line: {stderr}");

    // Session and pre-commit hooks never become pending file hooks.
    assert_eq!(pending(&ws), json!([]));

    // `status --json` is status.json as stored; `status` is a table naming every hook.
    let output = ws.hookvisor(&["status", "--json"]);
    assert_eq!(code(&output), 0);
    assert_eq!(
        output.stdout,
        fs::read(ws.state_dir().join("status.json")).unwrap()
    );
    let output = ws.hookvisor(&["status"]);
    assert_eq!(code(&output), 0);
    let table = String::from_utf8_lossy(&output.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 4, "{table}");
    assert!(lines[0].starts_with("ID "), "{table}");
    let row = |id: &str| -> Vec<&str> {
        lines
            .iter()
            .find(|l| l.starts_with(&format!("{id} ")))
            .unwrap_or_else(|| panic!("no row for {id}: {table}"))
            .split_whitespace()
            .collect()
    };
    assert_eq!(
        row("lint")[..6],
        ["lint", "pre-commit", "failure", "4", "1", "1"]
    );
    assert_eq!(
        row("setup")[..6],
        ["setup", "session", "success", "0", "2", "0"]
    );
}

#[test]
fn status_before_any_run() {
    let ws = Workspace::git();
    let output = ws.hookvisor(&["status", "--json"]);
    assert_eq!(code(&output), 0);
    let status: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["hooks"], json!({}));
    assert_eq!(status["pendingHooks"], json!([]));
    let output = ws.hookvisor(&["status"]);
    assert_eq!(code(&output), 0);
    assert!(String::from_utf8_lossy(&output.stdout).starts_with("no hook has run yet"));
}

#[test]
fn eval_json_with_nothing_to_do_and_usage_errors() {
    let ws = Workspace::git();
    let report = eval_json(&ws, &[]);
    assert_eq!(
        report,
        json!({"action": "pass", "message": null, "attempt": 1, "maxAttempts": 3,
               "pending": [], "results": [], "problems": []})
    );
    let report = eval_json(&ws, &["--trigger", "hook", "--max-retries", "5"]);
    assert_eq!(
        (&report["attempt"], &report["maxAttempts"]),
        (&json!(2), &json!(5))
    );

    let output = ws.hookvisor(&["eval", "--trigger", "sometimes"]);
    assert_eq!(code(&output), 2);
    let output = ws.hookvisor(&["eval", "--workspace", "/nonexistent/hv-workspace"]);
    assert_eq!(code(&output), 2);
    assert!(common::stderr(&output).contains("/nonexistent/hv-workspace"));
}

#[test]
fn a_timed_out_hook_says_so_in_the_message() {
    let ws = Workspace::git();
    ws.hook(
        "slow.sh",
        "file",
        "pattern: '*.txt'\ntimeout: 1",
        "echo starting; exec sleep 30",
    );
    edit(&ws, "a.txt", "x\n");
    let report = eval_json(&ws, &[]);
    assert_eq!(report["action"], "reprompt");
    assert_eq!(
        report["results"],
        json!([{"hookId": "slow", "exitCode": 124, "success": false, "timedOut": true,
                "files": ["a.txt"]}])
    );
    let message = report["message"].as_str().unwrap();
    assert!(
        message.contains("Exit code: 124 (timed out after 1s)\n"),
        "{message}"
    );
    assert!(message.contains("starting"), "{message}");
}

#[test]
fn a_terminated_evaluation_kills_the_hook_and_leaves_it_pending() {
    let ws = Workspace::git();
    // The hook records its pid, then blocks on a FIFO nobody writes to.
    let BlockedEval { child, started, .. } = blocked_eval(
        &ws,
        "wait.sh",
        "echo $$ > \"$HV_STARTED.tmp\"; mv \"$HV_STARTED.tmp\" \"$HV_STARTED\"; \
         read line < \"$HV_GO\"; exit 0",
        "x\n",
    );
    let hook_pid: i32 = fs::read_to_string(&started)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    let hook_pid = nix::unistd::Pid::from_raw(hook_pid);
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let output = child.wait_with_output().unwrap();
    assert_eq!(code(&output), 1, "{}", common::stderr(&output));
    assert!(
        common::stderr(&output).contains("cancelled"),
        "{}",
        common::stderr(&output)
    );
    // The hook is gone (killed with its group, reaped by whoever inherited it).
    let deadline = Instant::now() + Duration::from_secs(10);
    while nix::sys::signal::kill(hook_pid, None).is_ok() {
        assert!(
            Instant::now() < deadline,
            "the hook outlived its evaluation"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(pending(&ws), json!(["wait"]));
    assert_counters(&ws, "wait", ("pending", None, 0, 0, 0));

    // Nothing is lost: the next evaluation runs it although nothing changed.
    fs::remove_file(&started).unwrap();
    let env = [
        ("HV_STARTED", started.to_str().unwrap()),
        ("HV_GO", "/dev/null"),
    ];
    let report = eval_json_env(&ws, &["--trigger", "hook"], &env);
    assert_eq!(report["action"], "pass");
    assert_eq!(ran(&report), ["wait"]);
    assert_eq!(pending(&ws), json!([]));
    assert_counters(&ws, "wait", ("success", Some(0), 1, 0, 0));
}

#[test]
fn the_message_names_at_most_20_files_and_output_cannot_break_it() {
    let ws = Workspace::git();
    ws.hook(
        "many.sh",
        "file",
        "name: Many\npattern: '*.txt'",
        r"printf 'plain\n\033[31mred\033[0m\n\033]0;title\007```\n<b>markup</b>\r\n'; exit 1",
    );
    let mut names: Vec<String> = (0..23).map(|i| format!("f{i:02}.txt")).collect();
    for name in &names {
        ws.write(name, "x\n");
    }
    tick();
    let report = eval_json(&ws, &[]);
    names.sort();
    assert_eq!(report["results"][0]["files"], json!(names));
    let message = report["message"].as_str().unwrap();
    assert_eq!(
        message,
        format!(
            "[Discobot Hook Failed] \"Many\" (pattern: *.txt)\n\nFiles: {} and 3 more\nExit \
             code: 1\n\nOutput:\nplain\nred\n```\n<b>markup</b>\n\nPlease fix the issues and \
             ensure the hook passes. (Attempt 1/3)",
            names[..20].join(", ")
        )
    );
}

#[test]
fn staged_renamed_and_deleted_files_count_and_a_commit_clears_them() {
    let ws = Workspace::git();
    ws.stage("old.txt", "x\n");
    ws.stage("gone.txt", "x\n");
    common::check(ws.commit("initial"), "initial commit");
    ws.hook(
        "txt.sh",
        "file",
        "pattern: '*.txt'",
        "echo \"$DISCOBOT_CHANGED_FILES\"",
    );
    ws.git_ok(&["mv", "old.txt", "new.txt"]);
    fs::remove_file(ws.path().join("gone.txt")).unwrap();
    ws.stage("staged.txt", "y\n");
    tick();
    let report = eval_json(&ws, &[]);
    assert_eq!(ran(&report), ["txt"]);
    // Deleted paths make a hook run but are not passed to it: there is nothing to check.
    assert_eq!(
        report["results"][0]["files"],
        json!(["new.txt", "staged.txt"])
    );

    ws.git_ok(&["add", "-A"]);
    common::check(ws.commit("move"), "commit");
    tick();
    let report = eval_json(&ws, &[]);
    assert_eq!(ran(&report), Vec::<String>::new());
    assert_eq!(report["pending"], json!([]));
}

// ---------------------------------------------------------------------------------------------
// discobot compatibility (issue 14): the pending set's order, lastEvaluatedAt, and hook files
// that do not load.

#[test]
fn pending_is_sorted_by_id_but_hooks_run_in_file_name_order() {
    // discobot sorts pendingHooks (TestAddPendingHooks_SortsHookIDsAlphaNumerically) and runs
    // pending hooks in discovery order; here the two orders differ: file names sort capitals
    // first (Z-first.sh before a-second.sh), ids are lowercase (a-second before z-first).
    let ws = Workspace::git();
    ws.hook("Z-first.sh", "file", "pattern: '*.txt'", CHECK_BODY);
    ws.hook("a-second.sh", "file", "pattern: '*.txt'", "exit 0");
    edit(&ws, "a.txt", "bad\n");
    let report = eval_json(&ws, &[]);
    assert_eq!(report["action"], "reprompt", "{report}");
    assert_eq!(
        ran(&report),
        ["z-first"],
        "file-name order runs Z-first.sh first"
    );
    assert_eq!(report["pending"], json!(["a-second", "z-first"]));
    assert_eq!(pending(&ws), json!(["a-second", "z-first"]));

    edit(&ws, "a.txt", "good\n");
    let report = eval_json(&ws, &["--trigger", "hook"]);
    assert_eq!(report["action"], "pass", "{report}");
    assert_eq!(ran(&report), ["z-first", "a-second"]);
    assert_eq!(pending(&ws), json!([]));
}

#[test]
fn last_evaluated_at_is_an_empty_string_until_the_first_evaluation() {
    // discobot's reader asserts a string: "" before the first evaluation, never null.
    let ws = Workspace::git();
    ws.hook("setup.sh", "session", "", "exit 0");
    let output = ws.hookvisor(&["status", "--json"]);
    assert_eq!(code(&output), 0);
    let status: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(status["lastEvaluatedAt"], "", "{status}");

    // A run writes status.json, and no evaluation has happened yet.
    common::check(ws.hookvisor(&["run", "setup"]), "run setup");
    assert_eq!(ws.status()["lastEvaluatedAt"], "", "{}", ws.status());

    eval_json(&ws, &[]);
    let status = ws.status();
    let at = status["lastEvaluatedAt"].as_str().unwrap();
    assert!(parse_rfc3339(at).is_some(), "{status}");
}

/// The re-prompt for hook files that do not load: one block per file, workspace-relative.
fn broken_message(files: &[(&str, &str)], n: u32) -> String {
    let mut text = String::new();
    for (file, reason) in files {
        text.push_str(&format!(
            "[Discobot Hook Failed] hook file .discobot/hooks/{file} does not load\n\n\
             Reason: {reason}\n\n"
        ));
    }
    let what = if files.len() == 1 { "file" } else { "files" };
    format!("{text}Please fix the hook {what}. (Attempt {n}/3)")
}

/// The problems of a report as (file name, reason).
fn problems(report: &Value) -> Vec<(String, String)> {
    report["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let path = Path::new(p["path"].as_str().unwrap());
            (
                path.file_name().unwrap().to_string_lossy().into_owned(),
                p["reason"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// A committed git workspace with the file hook `check.sh` on `*.txt`, and one evaluation done.
fn committed_check_hook() -> Workspace {
    let ws = Workspace::git();
    ws.hook("check.sh", "file", "pattern: '*.txt'", CHECK_BODY);
    ws.stage("README.md", "hello\n");
    ws.git_ok(&["add", "-A"]);
    common::check(ws.commit("initial"), "initial commit");
    tick();
    let report = eval_json(&ws, &[]);
    assert_eq!(
        (&report["action"], &report["problems"]),
        (&json!("pass"), &json!([]))
    );
    ws
}

#[test]
fn a_hook_file_broken_this_turn_reprompts_until_the_loop_guard_gives_up() {
    let ws = committed_check_hook();
    let path = ws.path().join(".discobot/hooks/check.sh");

    // Turn 1 (user): the model breaks the hook with a value discobot would have run.
    ws.hook(
        "check.sh",
        "file",
        "pattern: '*.txt'\nrun_as: admin",
        CHECK_BODY,
    );
    tick();
    let report = eval_json(&ws, &["--trigger", "user"]);
    let reason = report["problems"][0]["reason"].as_str().unwrap().to_owned();
    assert!(reason.contains("invalid run_as 'admin'"), "{reason}");
    assert_eq!(
        report,
        json!({
            "action": "reprompt", "message": broken_message(&[("check.sh", &reason)], 1),
            "attempt": 1, "maxAttempts": 3, "pending": [], "results": [],
            "problems": [{"path": path.to_str().unwrap(), "reason": reason}],
        })
    );

    // Turn 2 (the re-prompt): another value it refuses; the text mode prints the re-prompt
    // and a stderr line for the problem.
    ws.hook(
        "check.sh",
        "file",
        "pattern: '*.txt'\nnotify_llm: maybe",
        CHECK_BODY,
    );
    tick();
    let reason = listed_reason(&ws, "check.sh");
    assert!(reason.contains("invalid notify_llm 'maybe'"), "{reason}");
    let output = ws.hookvisor(&["eval", "--trigger", "hook"]);
    assert_eq!(code(&output), 1, "{}", common::stderr(&output));
    assert_eq!(
        String::from_utf8_lossy(&output.stdout),
        format!("{}\n", broken_message(&[("check.sh", &reason)], 2))
    );
    let stderr = common::stderr(&output);
    assert!(
        stderr.contains(&format!("{}: {reason}", path.display())),
        "{stderr}"
    );
    assert_eq!(hook_turns(&ws), 1);

    // Turn 3: CRLF line endings.
    fs::write(
        &path,
        "#!/bin/sh\r\n#---\r\n# type: file\r\n# pattern: '*.txt'\r\n#---\r\nexit 0\r\n",
    )
    .unwrap();
    tick();
    let report = eval_json(&ws, &["--trigger", "hook"]);
    let reason = listed_reason(&ws, "check.sh");
    assert!(reason.contains("CRLF line endings; run `sed"), "{reason}");
    assert_eq!(report["action"], "reprompt", "{report}");
    assert_eq!(
        report["message"],
        broken_message(&[("check.sh", &reason)], 3)
    );

    // Turn 4: still broken after three re-prompts; the loop guard gives up, as for any hook.
    ws.hook(
        "check.sh",
        "file",
        "pattern: '*.txt'\nrun_as: admin",
        CHECK_BODY,
    );
    tick();
    let output = ws.hookvisor(&["eval", "--json", "--trigger", "hook"]);
    let report = report_of(&output);
    assert_eq!(
        (&report["action"], &report["message"], &report["attempt"]),
        (&json!("gave_up"), &Value::Null, &json!(4)),
        "{report}"
    );
    assert_eq!(problems(&report).len(), 1, "{report}");
    assert!(
        common::stderr(&output).contains("check.sh: invalid run_as 'admin'"),
        "{}",
        common::stderr(&output)
    );
    assert_eq!(hook_turns(&ws), 3);

    // Turn 5: so does a further hook turn; the text mode says why nothing is printed.
    ws.hook(
        "check.sh",
        "file",
        "pattern: '*.txt'\nrun_as: admin\n",
        "exit 0",
    );
    tick();
    let output = ws.hookvisor(&["eval", "--trigger", "hook"]);
    assert_eq!(code(&output), 1, "{}", common::stderr(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "");
    assert!(
        common::stderr(&output).contains("still do not load; giving up after 3 re-prompts"),
        "{}",
        common::stderr(&output)
    );

    // The user's next turn: the file is untouched, so it is a known problem: stderr only.
    let output = ws.hookvisor(&["eval"]);
    assert_eq!(code(&output), 0, "{}", common::stderr(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "");
    assert!(
        common::stderr(&output).contains("check.sh: invalid run_as 'admin'"),
        "{}",
        common::stderr(&output)
    );

    // Fixed: the hook is back and runs on the next change.
    ws.hook("check.sh", "file", "pattern: '*.txt'", CHECK_BODY);
    edit(&ws, "a.txt", "fine\n");
    let report = eval_json(&ws, &[]);
    assert_eq!(
        (&report["action"], &report["problems"], ran(&report)),
        (&json!("pass"), &json!([]), vec!["check".to_owned()])
    );
}

/// The reason `list --json` gives for a file of the hooks directory.
fn listed_reason(ws: &Workspace, file: &str) -> String {
    let list: Value =
        serde_json::from_str(&common::check(ws.hookvisor(&["list", "--json"]), "list")).unwrap();
    problems(&list)
        .into_iter()
        .find(|(name, _)| name == file)
        .unwrap_or_else(|| panic!("no problem for {file}: {list}"))
        .1
}

#[test]
fn hook_files_broken_before_the_turn_are_reported_but_do_not_reprompt() {
    // What a discobot user moving over has committed: files discobot runs and hookvisor refuses.
    let ws = Workspace::git();
    ws.hook(
        "bad-run-as.sh",
        "file",
        "pattern: '*.txt'\nrun_as: admin",
        "exit 1",
    );
    ws.hook(
        "bad-notify.sh",
        "file",
        "pattern: '*.txt'\nnotify_llm: maybe",
        "exit 1",
    );
    ws.hook(
        "bad-blocking.sh",
        "session",
        "blocking: sometimes",
        "exit 0",
    );
    let crlf = ws.path().join(".discobot/hooks/crlf.sh");
    fs::write(
        &crlf,
        "#!/bin/sh\r\n#---\r\n# type: file\r\n# pattern: '*.txt'\r\n#---\r\nexit 1\r\n",
    )
    .unwrap();
    fs::set_permissions(&crlf, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    ws.hook("lint.sh", "file", "pattern: '*.txt'", "exit 1");
    ws.hook("LINT.py", "file", "pattern: '*.txt'", "exit 1");
    ws.hook("ok.sh", "file", "pattern: '*.txt'", "exit 0");
    ws.git_ok(&["add", "-A"]);
    common::check(ws.commit("hooks"), "commit the hooks");
    tick();

    edit(&ws, "a.txt", "x\n");
    let report = eval_json(&ws, &[]);
    assert_eq!(report["action"], "pass", "{report}");
    assert_eq!(report["message"], Value::Null);
    assert_eq!(ran(&report), ["ok"]);
    let found = problems(&report);
    let names: Vec<&str> = found.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "LINT.py",
            "bad-blocking.sh",
            "bad-notify.sh",
            "bad-run-as.sh",
            "crlf.sh",
            "lint.sh"
        ]
    );
    for ((name, reason), want) in found.iter().zip([
        "hook id 'lint' is also the id of lint.sh",
        "invalid blocking 'sometimes'",
        "invalid notify_llm 'maybe'",
        "invalid run_as 'admin'",
        "CRLF line endings",
        "hook id 'lint' is also the id of LINT.py",
    ]) {
        assert!(reason.contains(want), "{name}: {reason}");
    }

    // The text mode: exit 0, no re-prompt, one stderr line per problem.
    edit(&ws, "a.txt", "y\n");
    let output = ws.hookvisor(&["eval"]);
    assert_eq!(code(&output), 0, "{}", common::stderr(&output));
    assert_eq!(String::from_utf8_lossy(&output.stdout), "");
    let stderr = common::stderr(&output);
    for (name, reason) in &found {
        let line = format!(
            "{}: {reason}",
            ws.path().join(".discobot/hooks").join(name).display()
        );
        assert_eq!(
            stderr.lines().filter(|l| l.contains(&line)).count(),
            1,
            "{name}: {stderr}"
        );
    }
}

#[test]
fn a_hook_file_broken_and_committed_in_one_turn_still_reprompts() {
    // Not dirty, but its problem is new since the last evaluation: the model made it.
    let ws = committed_check_hook();
    ws.hook(
        "check.sh",
        "file",
        "pattern: '*.txt'\nrun_as: admin",
        CHECK_BODY,
    );
    ws.git_ok(&["commit", "-qam", "break the hook"]);
    tick();
    let reason = listed_reason(&ws, "check.sh");
    let report = eval_json(&ws, &[]);
    assert_eq!(report["action"], "reprompt", "{report}");
    assert_eq!(
        report["message"],
        broken_message(&[("check.sh", &reason)], 1)
    );

    // The next turn changed nothing: known now, reported only.
    let report = eval_json(&ws, &["--trigger", "hook"]);
    assert_eq!(
        (&report["action"], problems(&report).len()),
        (&json!("pass"), 1),
        "{report}"
    );

    // Fixed and committed; then a new file takes its id: both files are named, the one the
    // model did not touch too, since its problem is new.
    ws.hook("check.sh", "file", "pattern: '*.txt'", CHECK_BODY);
    ws.git_ok(&["commit", "-qam", "fix the hook"]);
    tick();
    assert_eq!(eval_json(&ws, &[])["problems"], json!([]));
    ws.hook("check.py", "file", "pattern: '*.md'", "exit 0");
    tick();
    let report = eval_json(&ws, &[]);
    let (py, sh) = (
        listed_reason(&ws, "check.py"),
        listed_reason(&ws, "check.sh"),
    );
    assert_eq!(
        report["message"],
        broken_message(&[("check.py", &py), ("check.sh", &sh)], 1),
        "{report}"
    );
}

#[test]
fn a_broken_hook_file_and_a_failing_hook_share_one_reprompt() {
    let ws = committed_check_hook();
    ws.hook(
        "new.sh",
        "file",
        "pattern: '*.md'\nblocking: perhaps",
        "exit 0",
    );
    edit(&ws, "a.txt", "bad\n");
    let reason = listed_reason(&ws, "new.sh");
    let report = eval_json(&ws, &[]);
    assert_eq!(ran(&report), ["check"]);
    assert_eq!(
        report["message"],
        format!(
            "{}\n\n{}",
            broken_message(&[("new.sh", &reason)], 1),
            seed_message("check", "*.txt", "a.txt", 1, "a.txt: contains bad", 1)
        ),
        "{report}"
    );
}

#[test]
fn a_cancelled_evaluation_does_not_lose_a_broken_hook_file() {
    let ws = Workspace::git();
    ws.hook(
        "broken.sh",
        "file",
        "pattern: '*.md'\nrun_as: admin",
        "exit 0",
    );
    let BlockedEval { child, started, .. } = blocked_eval(
        &ws,
        "wait.sh",
        "touch \"$HV_STARTED\"; read line < \"$HV_GO\"; exit 0",
        "x\n",
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let output = child.wait_with_output().unwrap();
    assert!(
        common::stderr(&output).contains("cancelled"),
        "{}",
        common::stderr(&output)
    );

    // The next evaluation still re-prompts for the file, though its change is behind the cutoff.
    let env = [
        ("HV_STARTED", started.to_str().unwrap()),
        ("HV_GO", "/dev/null"),
    ];
    let reason = listed_reason(&ws, "broken.sh");
    let report = eval_json_env(&ws, &["--trigger", "user"], &env);
    assert_eq!(ran(&report), ["wait"]);
    assert_eq!(
        report["message"],
        broken_message(&[("broken.sh", &reason)], 1),
        "{report}"
    );
}

/// Diagnostics used to go nowhere (no subscriber was installed): a corrupt change journal was
/// replaced in silence. They reach stderr, and `HOOKVISOR_LOG` filters them.
#[test]
fn a_corrupt_change_journal_is_said_on_stderr() {
    let ws = Workspace::git();
    ws.hook("lint.sh", "file", "pattern: '*.txt'", "true");
    let journal = ws.state_dir().join("changes.journal");
    fs::create_dir_all(ws.state_dir()).unwrap();
    fs::write(&journal, "{ not json").unwrap();
    let out = ws.hookvisor(&["eval"]);
    let err = common::stderr(&out);
    assert!(
        err.contains("WARN") && err.contains("changes.journal: corrupt"),
        "{err}"
    );
    fs::write(&journal, "{ not json").unwrap();
    let out = ws
        .hookvisor_command()
        .arg("eval")
        .env("HOOKVISOR_LOG", "error")
        .output()
        .unwrap();
    assert!(!common::stderr(&out).contains("corrupt"), "filtered out");
}

/// docs/EVENTS.md §5 rule 8: `eval` runs the `event: turn.end` hooks too, and keeps its own JSON
/// shape and exit codes for them; an abort is `failed` with one line saying why.
#[test]
fn eval_runs_event_turn_end_hooks_in_its_own_shape() {
    let ws = Workspace::git();
    ws.write(
        ".discobot/hooks/10-lint.yml",
        "---\nevent: turn.end\npattern: '*.txt'\nrun: '! grep -q bad ${files}'\n---\n",
    );
    edit(&ws, "a.txt", "bad\n");
    let report = eval_json(&ws, &[]);
    assert_eq!(report["action"], "reprompt");
    assert_eq!(ran(&report), ["10-lint"]);
    assert_eq!(report["pending"], json!(["10-lint"]));
    let entry = entry(&ws, "10-lint");
    assert_eq!(
        (entry["runCount"].as_u64(), entry["event"].as_str()),
        (Some(1), Some("turn.end"))
    );

    edit(&ws, "a.txt", "fine\n");
    ws.write(
        ".discobot/hooks/20-stop.yml",
        "---\nevent: turn.end\nblock_on: never\non_failure: abort\nrun: 'echo out of budget >&2; exit 1'\n---\n",
    );
    let report = eval_json(&ws, &["--trigger", "hook"]);
    assert_eq!(report["action"], "failed");
    assert_eq!(ran(&report), ["10-lint", "20-stop"]);
    let out = ws.hookvisor(&["eval"]);
    assert_eq!(code(&out), 1);
    let err = common::stderr(&out);
    assert!(
        err.contains("hookvisor: a turn.end hook aborted: out of budget"),
        "{err}"
    );
}

/// `eval` is `fire turn.end` (docs/EVENTS.md §5 rule 8): an unawaited `event: turn.end` hook without
/// a pattern runs detached there too, so the evaluation answers while it still runs.
#[test]
fn eval_does_not_wait_for_an_unawaited_turn_end_hook() {
    let ws = Workspace::git();
    let probe = common::unawaited::Unawaited::new(ws.base());
    ws.write(
        ".discobot/hooks/notify.yml",
        &format!("---\nevent: turn.end\n{}\n---\n", probe.front()),
    );
    let out = ws.hookvisor(&["eval"]);
    assert_eq!(code(&out), 0, "{}", common::stderr(&out));
    assert_eq!(probe.still_running("eval"), "turn.end\n");
}

/// A committed repository of root's with the file hook `check` on `*.txt`, its base directory
/// open for the agent to reach (0755).
fn root_repository_with_a_check() -> Workspace {
    use std::os::unix::fs::PermissionsExt;
    let ws = Workspace::git();
    ws.hook("check.sh", "file", "pattern: '*.txt'", CHECK_BODY);
    ws.stage("a.txt", "good\n");
    common::check(ws.commit("one"), "commit");
    fs::set_permissions(ws.base(), fs::Permissions::from_mode(0o755)).unwrap();
    ws
}

/// A committed repository made as Kubernetes' `fsGroup` leaves a volume: root's, with the group
/// of `hv-test` given write access (to everything when `whole`, else only to `.git`), in which
/// the agent (hv-test) has set `core.fsmonitor` to its own script, which writes who ran it to a
/// marker only root could create; then a file of the turn changed. Returns the workspace, the
/// marker and the test user's turn; `None` without the test user.
fn fs_group_repository_with_a_planted_fsmonitor(
    whole: bool,
) -> Option<(Workspace, PathBuf, std::sync::MutexGuard<'static, ()>)> {
    repository_with_a_planted_fsmonitor(
        whole,
        &[&["chgrp", "-R", "hv-test"], &["chmod", "-R", "g+w"]],
    )
}

/// [`fs_group_repository_with_a_planted_fsmonitor`], with `grant` (a command given the path
/// as its last argument) opening the workspace (or `.git`) to the agent.
fn repository_with_a_planted_fsmonitor(
    whole: bool,
    grant: &[&[&str]],
) -> Option<(Workspace, PathBuf, std::sync::MutexGuard<'static, ()>)> {
    let turn = common::ensure_test_user()?;
    let ws = root_repository_with_a_check();
    let opened = if whole {
        ws.path().to_owned()
    } else {
        ws.path().join(".git")
    };
    for command in grant {
        let status = std::process::Command::new(command[0])
            .args(&command[1..])
            .arg(&opened)
            .status()
            .unwrap_or_else(|e| panic!("{}: {e}", command[0]));
        assert!(status.success(), "{command:?}");
    }
    let marker = ws.base().join("fsmonitor-ran");
    let script = opened.join("fsmonitor.sh");
    plant_fsmonitor(&marker, &script, &ws.path().join(".git/config"));
    edit(&ws, "b.txt", "bad\n");
    Some((ws, marker, turn))
}

/// As the agent: writes `script`, which records who ran it in `marker`, and names it as
/// `core.fsmonitor` at the end of the git config file `config`.
fn plant_fsmonitor(marker: &Path, script: &Path, config: &Path) {
    use std::os::unix::process::CommandExt;
    let user = common::test_user();
    let plant = format!(
        "printf '#!/bin/sh\\nid -u > {marker}\\n' > {script} && chmod 755 {script} && \
         printf '[core]\\n\\tfsmonitor = {script}\\n' >> {config}",
        marker = marker.display(),
        script = script.display(),
        config = config.display(),
    );
    let out = std::process::Command::new("/bin/sh")
        .args(["-c", &plant])
        .uid(user.uid.as_raw())
        .gid(user.gid.as_raw())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", common::stderr(&out));
}

/// Root's `eval` after a change in the turn refuses in one line (exit 2) that names `names`,
/// and the agent's fsmonitor never ran.
fn assert_eval_refused(ws: &Workspace, marker: &Path, names: &str) {
    edit(ws, "b.txt", "bad\n");
    let out = ws.hookvisor(&["eval"]);
    let err = common::stderr(&out);
    assert!(!marker.exists(), "root ran the agent's fsmonitor; {err}");
    assert_eq!(code(&out), 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(names), "{err}");
}

/// Root's `eval`, `fire turn.end` and `run` never run git in a workspace that is root's but
/// the agent's group can write (`fsGroup`): git's `safe.directory` looks only at the owner, so
/// the agent's `core.fsmonitor` ran as root. Each refuses in one line (exit 2) naming the
/// workspace and the fix, and the agent's script never runs.
#[test]
fn root_runs_no_git_in_a_workspace_the_agents_group_can_write() {
    for whole in [true, false] {
        let Some((ws, marker, _turn)) = fs_group_repository_with_a_planted_fsmonitor(whole) else {
            return;
        };
        for args in [&["eval"][..], &["fire", "turn.end"], &["run", "check"]] {
            let out = ws.hookvisor(args);
            let err = common::stderr(&out);
            assert!(
                !marker.exists(),
                "{args:?} (whole {whole}): root ran the agent's fsmonitor; {err}"
            );
            assert_eq!(code(&out), 2, "{args:?} (whole {whole}): {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(
                err.contains(&format!(
                    "refusing to run git as root in {}",
                    ws.path().display()
                )) && err.contains("run this as the user who owns it"),
                "{err}"
            );
        }
    }
}

/// The other side: CI runs as root with its workspace in the sticky `/tmp` (the test's own
/// temp dirs are such), and with `.git` only root can write, root's git runs as before.
#[test]
fn root_runs_git_in_a_workspace_only_root_can_write_under_tmp() {
    let ws = Workspace::git();
    ws.hook("check.sh", "file", "pattern: '*.txt'", CHECK_BODY);
    edit(&ws, "a.txt", "bad\n");
    let report = eval_json(&ws, &[]);
    assert_eq!(report["action"], "reprompt");
    assert_eq!(report["results"][0]["files"], json!(["a.txt"]));
}

/// The same attack through git's global config: root runs `eval` in its own workspace with
/// `HOME` the user's (`sudo -E`, a container's shared home), where the agent wrote a
/// `.gitconfig` naming its `core.fsmonitor`. Root refuses (exit 2, one line naming the file)
/// and the script never runs.
#[test]
fn root_runs_no_git_with_a_home_the_agent_can_write() {
    let Some(_turn) = common::ensure_test_user() else {
        return;
    };
    let user = common::test_user();
    let ws = root_repository_with_a_check();
    let home = ws.base().join("home");
    std::os::unix::fs::chown(&home, Some(user.uid.as_raw()), Some(user.gid.as_raw())).unwrap();
    let marker = ws.base().join("fsmonitor-ran");
    let script = home.join("fsmonitor.sh");
    plant_fsmonitor(&marker, &script, &home.join(".gitconfig"));
    assert_eval_refused(&ws, &marker, &home.display().to_string());
}

/// The same attack where a POSIX ACL, not the mode, lets the agent write (`setfacl -m
/// u:hv-test:rwx`, as a volume's provisioner may do): the mode then shows only the root group
/// and the mask, which the check read as root's alone, and root ran the agent's fsmonitor.
#[test]
fn root_runs_no_git_in_a_workspace_an_acl_lets_the_agent_write() {
    for whole in [true, false] {
        let acl = "u:hv-test:rwx,d:u:hv-test:rwx";
        let Some((ws, marker, _turn)) =
            repository_with_a_planted_fsmonitor(whole, &[&["setfacl", "-R", "-m", acl]])
        else {
            return;
        };
        let out = ws.hookvisor(&["eval"]);
        let err = common::stderr(&out);
        assert!(
            !marker.exists(),
            "(whole {whole}): root ran the agent's fsmonitor; {err}"
        );
        assert_eq!(code(&out), 2, "(whole {whole}): {err}");
        let uid = format!("can be changed by uid {}", common::test_user().uid);
        assert!(
            err.contains("refusing to run git as root in") && err.contains(&uid),
            "{err}"
        );
    }
}

/// Attack: the workspace and its `.git` are root's alone, but its hooks are the agent's (a
/// `COPY --chown` that left only the top directory root's; a hook file of an earlier run):
/// the agent rewrites `check.sh`, and root's `eval`, `fire turn.end` and `run` ran it as
/// root. Each refuses (exit 2, one line naming the hook or its directory) and the agent's
/// script never runs, whether the agent owns the hooks directory or only the file.
#[test]
fn root_runs_no_hook_the_agent_can_change() {
    use std::os::unix::process::CommandExt;
    let Some(_turn) = common::ensure_test_user() else {
        return;
    };
    let user = common::test_user();
    for owned in [".discobot", ".discobot/hooks/check.sh"] {
        let ws = root_repository_with_a_check();
        let hook = ws.path().join(".discobot/hooks/check.sh");
        let chown = std::process::Command::new("chown")
            .args(["-R", &format!("{}:{}", user.uid, user.gid)])
            .arg(ws.path().join(owned))
            .status()
            .unwrap();
        assert!(chown.success());
        let marker = ws.base().join("hook-ran");
        let body = format!(
            "#!/bin/sh\n#---\n# type: file\n# pattern: '*.txt'\n#---\nid -u > {}\n",
            marker.display()
        );
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", "cat > \"$0\"", hook.to_str().unwrap()])
            .stdin(std::process::Stdio::piped())
            .uid(user.uid.as_raw())
            .gid(user.gid.as_raw())
            .spawn()
            .and_then(|mut child| {
                child.stdin.take().unwrap().write_all(body.as_bytes())?;
                child.wait_with_output()
            })
            .unwrap();
        assert!(out.status.success(), "{}", common::stderr(&out));
        edit(&ws, "b.txt", "bad\n");
        for args in [&["eval"][..], &["fire", "turn.end"], &["run", "check"]] {
            let out = ws.hookvisor(args);
            let err = common::stderr(&out);
            assert!(
                !marker.exists(),
                "{args:?} ({owned}): root ran the agent's hook; {err}"
            );
            assert_eq!(code(&out), 2, "{args:?} ({owned}): {err}");
            assert_eq!(err.lines().count(), 1, "{err}");
            let hooks_dir = ws.path().join(".discobot/hooks");
            assert!(
                err.contains(&hooks_dir.display().to_string())
                    && err.contains(&format!("uid {}", user.uid)),
                "{err}"
            );
        }
    }
}

/// Attack: the repository is root's alone but for `.git/commondir`, a file the agent owns
/// (an earlier run's). Its content was read and the directory it named judged, but the file
/// was not: the agent could point it at a common dir of its own (with its config) between
/// root's check and git's read. Root refuses (exit 2, one line naming the file) while the file
/// still names the repository's own `.git`.
#[test]
fn root_runs_no_git_with_a_commondir_the_agent_owns() {
    let Some(_turn) = common::ensure_test_user() else {
        return;
    };
    let user = common::test_user();
    let ws = root_repository_with_a_check();
    let commondir = ws.path().join(".git/commondir");
    fs::write(
        &commondir,
        format!("{}\n", ws.path().join(".git").display()),
    )
    .unwrap();
    std::os::unix::fs::chown(&commondir, Some(user.uid.as_raw()), Some(user.gid.as_raw())).unwrap();
    edit(&ws, "b.txt", "bad\n");
    let out = ws.hookvisor(&["eval"]);
    let err = common::stderr(&out);
    assert_eq!(code(&out), 2, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains(&commondir.display().to_string()), "{err}");
}

/// Attack: the repository is root's alone but for the config of a submodule's git dir
/// (`.git/modules/sub/config`), a file the agent owns, where it sets `core.fsmonitor`. Root's
/// `git status` recurses into the submodule, and git's `safe.directory` looks at directories'
/// owners, not the config's: root ran the agent's script. Root refuses (exit 2, one line naming
/// the file) and the script never runs.
#[test]
fn root_runs_no_git_with_a_submodule_config_the_agent_owns() {
    use std::os::unix::fs::PermissionsExt;
    let Some(_turn) = common::ensure_test_user() else {
        return;
    };
    let user = common::test_user();
    let ws = Workspace::git();
    ws.hook("check.sh", "file", "pattern: '*.txt'", CHECK_BODY);
    ws.stage("a.txt", "good\n");
    common::check(ws.commit("one"), "commit");
    let upstream = ws.base().join("upstream");
    fs::create_dir(&upstream).unwrap();
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["commit", "-q", "--allow-empty", "-m", "s"],
    ] {
        common::check(
            ws.git_command(&upstream).args(args).output().unwrap(),
            "upstream",
        );
    }
    ws.git_ok(&["submodule", "add", "-q", upstream.to_str().unwrap(), "sub"]);
    common::check(ws.commit("sub"), "commit the submodule");
    fs::set_permissions(ws.base(), fs::Permissions::from_mode(0o755)).unwrap();
    let agent = ws.base().join("agent");
    fs::create_dir(&agent).unwrap();
    let config = ws.path().join(".git/modules/sub/config");
    for path in [&agent, &config] {
        std::os::unix::fs::chown(path, Some(user.uid.as_raw()), Some(user.gid.as_raw())).unwrap();
    }
    let marker = agent.join("fsmonitor-ran");
    let script = agent.join("fsmonitor.sh");
    plant_fsmonitor(&marker, &script, &config);
    assert_eval_refused(&ws, &marker, &config.display().to_string());
}

/// Attack: root's `.git/config` includes a file of the work tree (`[include] path =
/// ../project.gitconfig`, a team's shared settings), and that file is the agent's. git reads
/// it as config: root ran the `core.fsmonitor` the agent wrote there. Root refuses (exit 2,
/// one line naming the included file) and the script never runs.
#[test]
fn root_runs_no_git_with_an_included_config_the_agent_owns() {
    let Some(_turn) = common::ensure_test_user() else {
        return;
    };
    let user = common::test_user();
    let ws = root_repository_with_a_check();
    ws.git_ok(&["config", "include.path", "../project.gitconfig"]);
    let included = ws.write("project.gitconfig", "");
    let agent = ws.base().join("agent");
    fs::create_dir(&agent).unwrap();
    for path in [&agent, &included] {
        std::os::unix::fs::chown(path, Some(user.uid.as_raw()), Some(user.gid.as_raw())).unwrap();
    }
    let marker = agent.join("fsmonitor-ran");
    let script = agent.join("fsmonitor.sh");
    plant_fsmonitor(&marker, &script, &included);
    assert_eval_refused(&ws, &marker, "project.gitconfig");
}

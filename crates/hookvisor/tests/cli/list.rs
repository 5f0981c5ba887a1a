//! End-to-end tests of `hookvisor list [--json]` and `hookvisor check`: the JSON shape of
//! docs/DESIGN.md, the exit statuses, and every file that will not run named with its reason.

use crate::common;

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use common::Workspace;
use serde_json::{Value, json};

/// Keys of each hook of `list --json`: docs/DESIGN.md's, plus `description`.
const HOOK_KEYS: &[&str] = &[
    "id",
    "name",
    "type",
    "path",
    "runAs",
    "pattern",
    "notifyLlm",
    "blocking",
    "timeout",
    "description",
    "event",
    "phase",
    "action",
    "source",
    "tool",
    "when",
    "await",
    "blockOn",
    "onFailure",
];

/// `hook` with the event fields of a phase-1 script (docs/EVENTS.md §5 rule 10): `event`, its
/// `await` and `blockOn`, the rest their defaults.
fn with_event(mut hook: Value, event: &str, await_: bool, block_on: &str) -> Value {
    let name = Path::new(hook["path"].as_str().unwrap())
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .to_owned();
    let fields = json!({"event": event, "phase": "pre", "action": "command",
        "source": format!(".discobot/hooks/{name}:1"), "tool": null, "when": null,
        "await": await_, "blockOn": block_on, "onFailure": "continue"});
    for (key, value) in fields.as_object().unwrap() {
        hook[key] = value.clone();
    }
    hook
}

fn code(output: &Output) -> i32 {
    output.status.code().expect("exited")
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Writes a hook file as is, with a mode.
fn raw_hook(ws: &Workspace, file: &str, text: &str, mode: u32) -> PathBuf {
    let dir = ws.path().join(".discobot/hooks");
    fs::create_dir_all(&dir).unwrap();
    let path = dir.join(file);
    fs::write(&path, text).unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
    path
}

/// Three valid hooks, one of each type, with non-default fields.
fn valid_hooks(ws: &Workspace) -> [PathBuf; 3] {
    [
        ws.hook(
            "10-lint.sh",
            "file",
            "name: Go lint\npattern: *.go\nnotify_llm: no\ntimeout: 60\ndescription: gofmt -l",
            "exit 0",
        ),
        ws.hook(
            "20-Setup.Env.sh",
            "session",
            "run_as: root\nblocking: true",
            "exit 0",
        ),
        ws.hook("30-commit.py", "pre-commit", "", "exit 0"),
    ]
}

/// The hooks dir's files that will not run, and a fragment of each reason.
fn broken_hooks(ws: &Workspace) -> Vec<(PathBuf, &'static str)> {
    vec![
        (
            raw_hook(
                ws,
                "crlf.sh",
                "#!/bin/sh\r\n#---\r\n# type: session\r\n#---\r\n",
                0o755,
            ),
            "CRLF line endings; run `sed -i",
        ),
        (
            raw_hook(
                ws,
                "noexec.sh",
                "#!/bin/sh\n#---\n# type: session\n#---\n",
                0o644,
            ),
            "not executable; run `chmod +x",
        ),
        (
            ws.hook("nopattern.sh", "file", "", "exit 0"),
            "a file hook needs a 'pattern'",
        ),
        (
            raw_hook(ws, "notype.sh", "#!/bin/sh\n#---\n# name: x\n#---\n", 0o755),
            "missing 'type'",
        ),
        (
            ws.hook("runas.sh", "session", "run_as: admin", "exit 0"),
            "invalid run_as 'admin'",
        ),
    ]
}

fn s(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn list_json_has_the_exact_shape_with_hooks_and_problems() {
    let ws = Workspace::git();
    let [lint, setup, commit] = valid_hooks(&ws);
    let broken = broken_hooks(&ws);
    let warn = ws.hook("warn.sh", "session", "colour: red", "exit 0");
    // Hidden files and directories are not hooks and not problems.
    raw_hook(&ws, ".hidden.sh", "not a hook", 0o644);
    fs::create_dir_all(ws.path().join(".discobot/hooks/lib")).unwrap();

    let output = ws.hookvisor(&["list", "--json"]);
    assert_eq!(code(&output), 0, "{}", common::stderr(&output));
    let list: Value = serde_json::from_slice(&output.stdout).expect("list --json is JSON");
    let top: BTreeSet<&str> = list
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.as_str())
        .collect();
    assert_eq!(top, BTreeSet::from(["hooks", "problems", "warnings"]));

    for hook in list["hooks"].as_array().unwrap() {
        let keys: BTreeSet<&str> = hook
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .filter(|&k| k != "retries" || hook["type"] != "session")
            .collect();
        assert_eq!(keys, HOOK_KEYS.iter().copied().collect(), "{hook}");
    }
    assert_eq!(
        list["hooks"],
        json!([
            with_event(
                json!({"id": "10-lint", "name": "Go lint", "type": "file", "path": s(&lint),
             "runAs": "user", "pattern": "*.go", "notifyLlm": false, "blocking": false,
             "timeout": 60, "description": "gofmt -l"}),
                "turn.end",
                true,
                "failure"
            ),
            with_event(
                json!({"id": "20-setup-env", "name": "20-setup-env", "type": "session", "path": s(&setup),
             "runAs": "root", "pattern": null, "notifyLlm": true, "blocking": true,
             "timeout": 300, "description": null, "retries": 9}),
                "session.start",
                true,
                "exit2"
            ),
            with_event(
                json!({"id": "30-commit", "name": "30-commit", "type": "pre-commit", "path": s(&commit),
             "runAs": "user", "pattern": null, "notifyLlm": true, "blocking": false,
             "timeout": 300, "description": null}),
                "commit.before",
                true,
                "failure"
            ),
            with_event(
                json!({"id": "warn", "name": "warn", "type": "session", "path": s(&warn),
             "runAs": "user", "pattern": null, "notifyLlm": true, "blocking": false,
             "timeout": 300, "description": null, "retries": 9}),
                "session.start",
                false,
                "exit2"
            ),
        ])
    );

    let problems = list["problems"].as_array().unwrap();
    assert_eq!(problems.len(), broken.len(), "{problems:#?}");
    for (problem, (path, reason)) in problems.iter().zip(&broken) {
        let keys: BTreeSet<&str> = problem
            .as_object()
            .unwrap()
            .keys()
            .map(|k| k.as_str())
            .collect();
        assert_eq!(keys, BTreeSet::from(["path", "reason", "line"]));
        assert_eq!(problem["path"], s(path));
        let got = problem["reason"].as_str().unwrap();
        assert!(
            got.contains(reason),
            "{}: {got:?} lacks {reason:?}",
            path.display()
        );
    }

    let warnings = list["warnings"].as_array().unwrap();
    assert_eq!(warnings.len(), 1, "{warnings:#?}");
    assert_eq!(
        warnings[0]["path"],
        s(&ws.path().join(".discobot/hooks/warn.sh"))
    );
    assert!(warnings[0]["reason"].as_str().unwrap().contains("'colour'"));
}

#[test]
fn a_file_hook_defaults_to_the_design_defaults() {
    let ws = Workspace::new();
    let path = ws.hook("fmt.sh", "file", "pattern: '*.rs, *.toml'", "exit 0");
    let list: Value = serde_json::from_slice(&ws.hookvisor(&["list", "--json"]).stdout).unwrap();
    assert_eq!(
        list,
        json!({
            "hooks": [with_event(json!({"id": "fmt", "name": "fmt", "type": "file", "path": s(&path),
                       "runAs": "user", "pattern": "*.rs, *.toml", "notifyLlm": true,
                       "blocking": false, "timeout": 900, "description": null}),
                       "turn.end", true, "failure")],
            "problems": [], "warnings": [],
        })
    );
}

#[test]
fn check_exits_0_when_clean_and_1_naming_each_file_and_its_fix() {
    let ws = Workspace::git();

    // No hooks dir at all: nothing to report.
    let output = ws.hookvisor(&["check"]);
    assert_eq!((code(&output), stdout(&output)), (0, String::new()));

    valid_hooks(&ws);
    let output = ws.hookvisor(&["check"]);
    assert_eq!((code(&output), stdout(&output)), (0, String::new()));

    // A warning is reported but is not a failure.
    let warn = ws.hook("warn.sh", "session", "colour: red", "exit 0");
    let output = ws.hookvisor(&["check"]);
    assert_eq!(code(&output), 0);
    let text = stdout(&output);
    assert_eq!(text.lines().count(), 1, "{text}");
    assert!(
        text.starts_with(&format!("{}:4: warning: ", warn.display())),
        "{text}"
    );

    let broken = broken_hooks(&ws);
    let output = ws.hookvisor(&["check"]);
    assert_eq!(code(&output), 1);
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines.len(),
        broken.len() + 1,
        "one line per problem and warning:\n{text}"
    );
    for (line, (path, reason)) in lines.iter().zip(&broken) {
        let prefix = format!("{}:", path.display());
        assert!(
            line.starts_with(&prefix),
            "{line:?} does not start with {prefix:?}"
        );
        assert!(line.contains(reason), "{line:?} lacks {reason:?}");
    }

    // Following the fixes the messages give makes check pass again.
    let crlf = &broken[0].0;
    fs::write(
        crlf,
        fs::read_to_string(crlf).unwrap().replace("\r\n", "\n"),
    )
    .unwrap();
    fs::set_permissions(&broken[1].0, fs::Permissions::from_mode(0o755)).unwrap();
    for (path, _) in &broken[2..] {
        fs::remove_file(path).unwrap();
    }
    fs::remove_file(&warn).unwrap();
    let output = ws.hookvisor(&["check"]);
    assert_eq!((code(&output), stdout(&output)), (0, String::new()));
}

#[test]
fn duplicate_ids_are_reported_for_both_files_and_neither_runs() {
    let ws = Workspace::new();
    let a = ws.hook("dup.sh", "session", "", "exit 0");
    let b = ws.hook("DUP.py", "session", "", "exit 0");
    let output = ws.hookvisor(&["check"]);
    assert_eq!(code(&output), 1);
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(
        lines[0].starts_with(&format!("{}: ", b.display())),
        "{text}"
    );
    assert!(lines[0].contains("dup.sh"), "{text}");
    assert!(
        lines[1].starts_with(&format!("{}: ", a.display())),
        "{text}"
    );
    assert!(lines[1].contains("DUP.py"), "{text}");
    let list: Value = serde_json::from_slice(&ws.hookvisor(&["list", "--json"]).stdout).unwrap();
    assert_eq!(list["hooks"], json!([]));
    let output = ws.hookvisor(&["run", "dup"]);
    assert_eq!(code(&output), 2);
}

#[test]
fn list_prints_a_table_then_the_problems() {
    let ws = Workspace::git();
    let output = ws.hookvisor(&["list"]);
    assert_eq!(code(&output), 0);
    assert_eq!(
        stdout(&output),
        format!(
            "no hooks in {}\n",
            ws.path().join(".discobot/hooks").display()
        )
    );

    valid_hooks(&ws);
    let noexec = raw_hook(
        &ws,
        "noexec.sh",
        "#!/bin/sh\n#---\n# type: session\n#---\n",
        0o644,
    );
    let output = ws.hookvisor(&["list"]);
    assert_eq!(
        code(&output),
        0,
        "list reports problems, check fails on them"
    );
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 5, "{text}");
    let words = |line: &str| {
        line.split_whitespace()
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    assert_eq!(words(lines[0]), ["ID", "TYPE", "AS", "PATTERN", "NAME"]);
    assert_eq!(
        words(lines[1]),
        ["10-lint", "file", "user", "*.go", "Go", "lint"]
    );
    assert_eq!(
        words(lines[2]),
        ["20-setup-env", "session", "root", "-", "20-setup-env"]
    );
    assert_eq!(
        words(lines[3]),
        ["30-commit", "pre-commit", "user", "-", "30-commit"]
    );
    assert!(
        lines[4].starts_with(&format!("{}:1: not executable", noexec.display())),
        "{text}"
    );
}

#[test]
fn a_missing_workspace_is_a_usage_error_naming_it() {
    let ws = Workspace::new();
    for command in [&["list"][..], &["list", "--json"], &["check"]] {
        let mut args = vec!["--workspace", "/nonexistent/hv-list-workspace"];
        args.extend_from_slice(command);
        let output = ws.hookvisor(&args);
        assert_eq!(code(&output), 2, "{command:?}");
        let stderr = common::stderr(&output);
        assert!(
            stderr.contains("/nonexistent/hv-list-workspace"),
            "{stderr}"
        );
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(output.stdout.is_empty());
    }
}

#[test]
fn the_workspace_comes_from_discobot_workspace() {
    let ws = Workspace::new();
    let path = ws.hook("a.sh", "session", "", "exit 0");
    let output = ws
        .hookvisor_command()
        .current_dir("/")
        .env("DISCOBOT_WORKSPACE", ws.path())
        .args(["list", "--json"])
        .output()
        .unwrap();
    let list: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(list["hooks"][0]["path"], s(&path));
}

/// Issue 12: a hook file whose name is not UTF-8 used to make `list --json` panic (exit 134 in
/// the release build, and `serve`, which lists the same JSON, aborted). It is a problem like any
/// other: named lossily, with the fix, in JSON, in the table and in `check`.
#[test]
fn a_hook_file_name_that_is_not_utf8_is_a_problem_not_a_crash() {
    let ws = Workspace::git();
    ws.hook("ok.sh", "session", "", "exit 0");
    let dir = ws.path().join(".discobot/hooks");
    let bad = dir.join(OsStr::from_bytes(b"bad\xff.sh"));
    fs::write(&bad, "#!/bin/sh\n#---\n# type: session\n#---\nexit 0\n").unwrap();
    fs::set_permissions(&bad, fs::Permissions::from_mode(0o755)).unwrap();
    let shown = format!("{}/bad\u{FFFD}.sh", dir.display());
    let reason = "the file name is not UTF-8; rename the file";

    let output = ws.hookvisor(&["list", "--json"]);
    assert_eq!(code(&output), 0, "{}", common::stderr(&output));
    let listed: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(listed["hooks"].as_array().unwrap().len(), 1, "{listed}");
    assert_eq!(
        listed["problems"],
        json!([{ "path": shown, "reason": reason }])
    );

    let output = ws.hookvisor(&["list"]);
    assert_eq!(code(&output), 0, "{}", common::stderr(&output));
    assert!(
        stdout(&output).contains(&format!("{shown}: {reason}")),
        "{}",
        stdout(&output)
    );

    let output = ws.hookvisor(&["check"]);
    assert_eq!(code(&output), 1);
    assert_eq!(stdout(&output), format!("{shown}: {reason}\n"));
}

/// A workspace whose own path is not UTF-8 lists its hooks, paths shown lossily.
#[test]
fn a_workspace_path_that_is_not_utf8_lists_its_hooks() {
    let ws = Workspace::new();
    let odd = ws.base().join(OsStr::from_bytes(b"ws\xfe"));
    let hooks = odd.join(".discobot/hooks");
    fs::create_dir_all(&hooks).unwrap();
    let hook = hooks.join("ok.sh");
    fs::write(&hook, "#!/bin/sh\n#---\n# type: session\n#---\nexit 0\n").unwrap();
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o755)).unwrap();
    let output = ws
        .hookvisor_command()
        .arg("--workspace")
        .arg(&odd)
        .args(["list", "--json"])
        .output()
        .unwrap();
    assert_eq!(code(&output), 0, "{}", common::stderr(&output));
    let listed: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(
        listed["hooks"][0]["path"],
        json!(hook.to_string_lossy()),
        "{listed}"
    );
}

/// docs/EVENTS.md §5 rule 10: hooks of the event model carry `event`, `phase`, `action`, `source`,
/// `tool`, `when`, `await`, `blockOn` and `onFailure` beside the phase-1 fields; a declarative
/// `.yml` hook is listed; a phase-1 hook beside them keeps its JSON; a problem with a known
/// line prints as `file:line: reason`.
#[test]
fn event_hooks_list_their_event_fields_and_problems_their_line() {
    let ws = Workspace::new();
    let guard = raw_hook(
        &ws,
        "guard.sh",
        "#!/bin/sh\n---\nevent: tool.before\ntool: Bash\nwhen: ${iteration} > 1\n\
         on_failure: [retry, abort]\n---\nexit 0\n",
        0o755,
    );
    let plan = raw_hook(
        &ws,
        "plan.yml",
        "---\nevent: stage.complete\nphase: post\nawait: false\nrun: echo ${stage}\n---\n",
        0o644,
    );
    let lint = ws.hook("lint.sh", "file", "pattern: '*.go'", "exit 0");
    let list: Value = serde_json::from_slice(&ws.hookvisor(&["list", "--json"]).stdout).unwrap();
    assert_eq!(
        list["hooks"],
        json!([
            {"id": "guard", "name": "guard", "type": "tool.before", "path": s(&guard),
             "runAs": "user", "pattern": null, "notifyLlm": true, "blocking": false,
             "timeout": 60, "description": null,
             "event": "tool.before", "phase": "pre", "action": "command",
             "source": ".discobot/hooks/guard.sh:1", "tool": "Bash",
             "when": "${iteration} > 1", "await": true, "blockOn": "exit2",
             "onFailure": ["retry", "abort"]},
            with_event(json!({"id": "lint", "name": "lint", "type": "file", "path": s(&lint),
             "runAs": "user", "pattern": "*.go", "notifyLlm": true, "blocking": false,
             "timeout": 900, "description": null}), "turn.end", true, "failure"),
            {"id": "plan", "name": "plan", "type": "stage.complete", "path": s(&plan),
             "runAs": "user", "pattern": null, "notifyLlm": true, "blocking": false,
             "timeout": 60, "description": null,
             "event": "stage.complete", "phase": "post", "action": "command",
             "source": ".discobot/hooks/plan.yml:1", "tool": null, "when": null,
             "await": false, "blockOn": "exit2", "onFailure": "continue"},
        ])
    );
    assert_eq!(list["problems"], json!([]));

    let bad = raw_hook(
        &ws,
        "bad.yml",
        "---\nevent: turn.end\nwhen: ${x} == (1\nrun: make\n---\n",
        0o644,
    );
    let output = ws.hookvisor(&["check"]);
    assert_eq!(code(&output), 1);
    assert_eq!(
        stdout(&output),
        format!("{}:3: when: expected ')' at column 11\n", bad.display())
    );
    let list: Value = serde_json::from_slice(&ws.hookvisor(&["list", "--json"]).stdout).unwrap();
    assert_eq!(
        list["problems"],
        json!([{"path": s(&bad), "reason": "when: expected ')' at column 11", "line": 3}])
    );
}

/// docs/EVENTS.md §5 rule 10, settled for phase 1 too: every hook of `list --json` has its event
/// fields, so a dashboard finds phase-1 file hooks among the `turn.end` hooks; and a problem of
/// a discobot-format file names its line (`path:line`), the field's line when a field is at
/// fault, else the file's first line.
#[test]
fn phase1_hooks_list_their_event_fields_and_their_problems_a_line() {
    let ws = Workspace::git();
    let [lint, setup, commit] = valid_hooks(&ws);
    let list: Value = serde_json::from_slice(&ws.hookvisor(&["list", "--json"]).stdout).unwrap();
    let fields = |event: &str, path: &Path, await_: bool, block_on: &str| {
        let name = path.file_name().unwrap().to_str().unwrap();
        json!({"event": event, "phase": "pre", "action": "command",
               "source": format!(".discobot/hooks/{name}:1"), "tool": null, "when": null,
               "await": await_, "blockOn": block_on, "onFailure": "continue"})
    };
    for (hook, want) in list["hooks"].as_array().unwrap().iter().zip([
        fields("turn.end", &lint, true, "failure"),
        fields("session.start", &setup, true, "exit2"),
        fields("commit.before", &commit, true, "failure"),
    ]) {
        for (key, value) in want.as_object().unwrap() {
            assert_eq!(&hook[key], value, "{key} of {hook}");
        }
    }

    let broken = broken_hooks(&ws);
    // crlf, noexec: the file; nopattern: its `type`; notype: the block's first line; runas:
    // its `run_as`.
    let lines = [1, 1, 3, 2, 4];
    let output = ws.hookvisor(&["check"]);
    let text = stdout(&output);
    for ((path, reason), line) in broken.iter().zip(lines) {
        let want = format!("{}:{line}: ", path.display());
        assert!(
            text.lines()
                .any(|l| l.starts_with(&want) && l.contains(reason)),
            "no {want}{reason} in\n{text}"
        );
    }
    let list: Value = serde_json::from_slice(&ws.hookvisor(&["list", "--json"]).stdout).unwrap();
    let got: Vec<u64> = list["problems"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["line"].as_u64().unwrap_or(0))
        .collect();
    assert_eq!(got, lines.map(|l| l as u64));
}

/// The table of `list` gives each event-model hook a second line with its source and the
/// fields of rule 10 as its front matter spells them; a phase-1 row beside it stays one line;
/// problems and warnings follow as `file:line: reason`, the same lines `check` prints.
#[test]
fn list_shows_each_event_hook_on_a_line_of_its_own_and_problems_with_their_line() {
    let ws = Workspace::new();
    raw_hook(
        &ws,
        "guard.sh",
        "#!/bin/sh\n---\nevent: tool.before\ntool: Bash|Write\nwhen: ${iteration} > 1\n\
         on_failure: [retry, abort]\n---\nexit 0\n",
        0o755,
    );
    raw_hook(
        &ws,
        "plan.yml",
        "---\nevent: stage.complete\nphase: post\nawait: false\nrun: echo ${stage}\n---\n",
        0o644,
    );
    ws.hook("lint.sh", "file", "pattern: '*.go'", "exit 0");
    let bad = raw_hook(
        &ws,
        "bad.yml",
        "---\nevent: turn.end\nwhen: ${x} == (1\nrun: make\n---\n",
        0o644,
    );
    let output = ws.hookvisor(&["list"]);
    assert_eq!(code(&output), 0, "{}", common::stderr(&output));
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    let pad = " ".repeat(25);
    // The TYPE column is as wide as `stage.complete`, so every row lines up.
    assert_eq!(
        lines[1..],
        [
            format!(
                "guard{}tool.before    user   -{}guard",
                " ".repeat(20),
                " ".repeat(24)
            ),
            format!(
                "{pad}.discobot/hooks/guard.sh:1  event: tool.before  phase: pre  action: command  \
                 tool: Bash|Write  when: ${{iteration}} > 1  await: true  block_on: exit2  \
                 on_failure: [retry, abort]"
            ),
            format!(
                "lint{}file           user   *.go{}lint",
                " ".repeat(21),
                " ".repeat(21)
            ),
            format!(
                "plan{}stage.complete user   -{}plan",
                " ".repeat(21),
                " ".repeat(24)
            ),
            format!(
                "{pad}.discobot/hooks/plan.yml:1  event: stage.complete  phase: post  \
                 action: command  await: false  block_on: exit2  on_failure: continue"
            ),
            format!("{}:3: when: expected ')' at column 11", bad.display()),
        ],
        "{text}"
    );
    let check = ws.hookvisor(&["check"]);
    assert_eq!(code(&check), 1);
    assert_eq!(stdout(&check), format!("{}\n", lines[6]));
}

/// docs/EVENTS.md §2.1 end to end: an event hook fired by `hookvisor fire` is recorded with its
/// event as `type` and its `event`, `source` and `action`; a phase-1 hook run by `hookvisor run`
/// beside it has exactly discobot's fields; `status` shows both, and so does the file after a
/// later writer read and rewrote it.
#[test]
fn status_records_an_event_hook_by_its_event_and_a_phase1_hook_as_before() {
    let ws = Workspace::new();
    raw_hook(
        &ws,
        "guard.yml",
        "---\nevent: tool.before\nrun: exit 2\n---\n",
        0o644,
    );
    ws.hook("lint.sh", "file", "pattern: '*.go'", "exit 0");
    let fired = ws.hookvisor(&["fire", "tool.before", "--data", r#"{"tool_name":"Bash"}"#]);
    assert_eq!(code(&fired), 1, "{}", common::stderr(&fired));
    let ran = ws.hookvisor(&["run", "lint"]);
    assert_eq!(code(&ran), 0, "{}", common::stderr(&ran));

    let check = |status: &Value| {
        let guard = &status["hooks"]["guard"];
        assert_eq!(guard["type"], "tool.before", "{guard}");
        assert_eq!(guard["event"], "tool.before");
        assert_eq!(guard["source"], ".discobot/hooks/guard.yml:1");
        assert_eq!(guard["action"], "command");
        assert_eq!(guard["lastExitCode"], 2);
        let lint = status["hooks"]["lint"].as_object().unwrap();
        assert_eq!(lint["type"], "file");
        let mut keys: Vec<&str> = lint.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "consecutiveFailures",
                "durationMs",
                "failCount",
                "hookId",
                "hookName",
                "lastExitCode",
                "lastResult",
                "lastRunAt",
                "outputPath",
                "runCount",
                "type"
            ]
        );
    };
    check(&ws.status());
    let shown = ws.hookvisor(&["status", "--json"]);
    check(&serde_json::from_slice(&shown.stdout).unwrap());

    let table = stdout(&ws.hookvisor(&["status"]));
    let row = |id: &str| {
        table
            .lines()
            .find(|l| l.starts_with(id))
            .unwrap_or_else(|| panic!("no {id} in {table}"))
            .split_whitespace()
            .take(3)
            .collect::<Vec<_>>()
    };
    assert_eq!(row("guard"), ["guard", "tool.before", "failure"]);
    assert_eq!(row("lint"), ["lint", "file", "success"]);

    // Another writer (a second run) reads the event entry and keeps it.
    assert_eq!(code(&ws.hookvisor(&["run", "lint"])), 0);
    check(&ws.status());
    assert_eq!(ws.status()["hooks"]["guard"]["runCount"], 1);
}

/// docs/EVENTS.md §4.1 rule 5: `check` warns on a `${name}` hookvisor sets for no event (a typo
/// fails every run), in `run:` and `argv:`, and says nothing of the names it sets.
#[test]
fn check_warns_on_a_variable_hookvisor_never_sets() {
    let ws = Workspace::new();
    raw_hook(
        &ws,
        "u.yml",
        "---\nevent: tool.before\nrun: echo ${nosuch} ${tool_name} ${Data.x} ${agent.cwd}\n---\n",
        0o644,
    );
    raw_hook(
        &ws,
        "v.yml",
        "---\nevent: tool.before\nargv: [echo, '${file}', '--x=${typo}']\n---\n",
        0o644,
    );
    let out = ws.hookvisor(&["check"]);
    assert_eq!(
        code(&out),
        0,
        "warnings do not fail check: {}",
        stdout(&out)
    );
    let text = stdout(&out);
    let warned: Vec<&str> = text
        .lines()
        .filter_map(|l| l.split("warning: ").nth(1))
        .filter_map(|w| w.split(' ').next())
        .collect();
    assert_eq!(warned, ["${nosuch}", "${typo}"], "{text}");
}

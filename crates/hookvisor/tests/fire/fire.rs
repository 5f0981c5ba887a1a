//! End-to-end tests of `hookvisor fire` (docs/EVENTS.md §3 "CLI", §5 rules 4, 5, 15, 19): the built
//! binary firing events at real `/bin/sh` hooks, with exit codes, the reply, the context
//! buffer and status.json checked, and twenty `fire` processes at once.

use crate::common;

use std::fs;
use std::io::Write;
use std::process::{Output, Stdio};
use std::thread;

use common::Workspace;
use serde_json::Value;

/// Writes a declarative hook `.discobot/hooks/<name>.yml` with this front matter.
fn yml(ws: &Workspace, name: &str, front: &str) {
    ws.write(
        &format!(".discobot/hooks/{name}.yml"),
        &format!("---\n{front}\n---\n"),
    );
}

fn code(out: &Output) -> i32 {
    out.status.code().expect("exited")
}

fn stderr(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).into_owned()
}

/// The reply of `fire --json`.
fn reply(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {:?} {}", out.stdout, stderr(out)))
}

/// Lines the hooks appended to `trace`.
fn trace(ws: &Workspace) -> Vec<String> {
    fs::read_to_string(ws.path().join("trace"))
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

fn status(ws: &Workspace) -> Value {
    serde_json::from_slice(&fs::read(ws.state_dir().join("status.json")).unwrap()).unwrap()
}

#[test]
fn exit_codes_are_allow_0_block_1_abort_3() {
    let ws = Workspace::new();
    yml(
        &ws,
        "guard",
        "event: tool.before\nrun: 'test \"${tool_name}\" != Bash || { echo no shell >&2; exit 2; }'",
    );
    yml(
        &ws,
        "stop",
        "event: task.complete\non_failure: abort\nrun: echo out of budget >&2; exit 1",
    );

    let allow = ws.hookvisor(&["fire", "tool.before", "--data", r#"{"tool_name":"Read"}"#]);
    assert_eq!(code(&allow), 0, "{}", stderr(&allow));
    assert_eq!(stderr(&allow), "");

    let block = ws.hookvisor(&["fire", "tool.before", "--data", r#"{"tool_name":"Bash"}"#]);
    assert_eq!(code(&block), 1);
    assert_eq!(stderr(&block), "no shell\n");

    let abort = ws.hookvisor(&["fire", "task.complete", "--json"]);
    assert_eq!(code(&abort), 3);
    let r = reply(&abort);
    assert_eq!(r["event"], "task.complete");
    assert_eq!(r["decision"], "abort");
    assert_eq!(r["reason"], "out of budget");
    assert_eq!(r["attempt"], Value::Null);
    assert_eq!(r["maxAttempts"], Value::Null);
    assert_eq!(r["results"][0]["hookId"], "stop");
    assert_eq!(r["results"][0]["exitCode"], 1);
    assert_eq!(r["results"][0]["blocked"], false);

    // An event nothing binds allows.
    let none = ws.hookvisor(&["fire", "claude.PreCompact", "--json"]);
    assert_eq!(code(&none), 0);
    assert_eq!(reply(&none)["results"], Value::Array(vec![]));
}

#[test]
fn usage_errors_exit_2() {
    let ws = Workspace::new();
    let unknown = ws.hookvisor(&["fire", "turn_end"]);
    assert_eq!(code(&unknown), 2);
    let text = stderr(&unknown);
    assert!(text.contains("unknown event 'turn_end'"), "{text}");
    assert!(
        text.contains("turn.end") && text.contains("claude.NAME"),
        "{text}"
    );
    for bad in ["{", "[1]", "\"x\"", "@missing.json"] {
        let out = ws.hookvisor(&["fire", "tool.before", "--data", bad]);
        assert_eq!(code(&out), 2, "{bad}: {}", stderr(&out));
        assert!(stderr(&out).contains("--data"), "{bad}: {}", stderr(&out));
    }
    let trigger = ws.hookvisor(&["fire", "tool.before", "--trigger", "cron"]);
    assert_eq!(code(&trigger), 2);
}

#[test]
fn data_comes_inline_from_a_file_or_stdin_with_trigger_and_session() {
    let ws = Workspace::new();
    yml(
        &ws,
        "dump",
        "event: task.start\nrun: cat > \"${task_id}.json\"",
    );
    fs::write(ws.base().join("d.json"), r#"{"task_id":"file"}"#).unwrap();
    let file_arg = format!("@{}", ws.base().join("d.json").display());
    assert_eq!(
        code(&ws.hookvisor(&["fire", "task.start", "--data", &file_arg])),
        0
    );
    let inline = ws.hookvisor(&[
        "fire",
        "task.start",
        "--data",
        r#"{"task_id":"inline"}"#,
        "--trigger",
        "loop",
        "--session",
        "s-9",
    ]);
    assert_eq!(code(&inline), 0, "{}", stderr(&inline));
    let mut child = ws
        .hookvisor_command()
        .args(["fire", "task.start", "--data", "-"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(br#"{"task_id":"stdin"}"#)
        .unwrap();
    assert!(child.wait().unwrap().success());
    for (name, trigger) in [("file", "user"), ("inline", "loop"), ("stdin", "user")] {
        let json: Value =
            serde_json::from_slice(&fs::read(ws.path().join(format!("{name}.json"))).unwrap())
                .unwrap();
        assert_eq!(json["event"], "task.start");
        assert_eq!(json["data"]["task_id"], name);
        assert_eq!(json["trigger"], trigger, "{name}");
    }
    let inline: Value =
        serde_json::from_slice(&fs::read(ws.path().join("inline.json")).unwrap()).unwrap();
    assert_eq!(inline["session"], "s-9");
}

#[test]
fn hostile_data_reaches_run_and_argv_hooks_byte_exact() {
    let ws = Workspace::new();
    let hostile = "' \" $ ; & | \\ ` $(touch SENTINEL) `touch SENTINEL`\nsecond line";
    yml(
        &ws,
        "a-run",
        "event: task.start\nrun: printf '%s' ${v} > run.out",
    );
    yml(
        &ws,
        "b-argv",
        "event: task.start\nargv: [/bin/sh, -c, 'printf %s \"$1\" > argv.out', sh, '${v}']",
    );
    let data = serde_json::json!({ "v": hostile }).to_string();
    let out = ws.hookvisor(&["fire", "task.start", "--data", &data, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = reply(&out);
    assert_eq!(r["results"].as_array().unwrap().len(), 2);
    for file in ["run.out", "argv.out"] {
        assert_eq!(
            fs::read(ws.path().join(file)).unwrap(),
            hostile.as_bytes(),
            "{file}"
        );
    }
    assert!(!ws.path().join("SENTINEL").exists());
    assert!(!ws.base().join("SENTINEL").exists());
}

/// Issue 28: a placeholder in an argument that a nested shell or interpreter parses again as
/// code (`run: sh -c "echo checking ${tool_input.command}"`, fired with `$(touch pwned)`) is
/// refused by `check` with the file, its line and the column in the text, and firing the
/// event runs nothing of the value (nor a value that names the program); the safe positional
/// form passes the value verbatim.
#[test]
fn a_value_never_becomes_code_through_a_nested_interpreter() {
    let shell = "$(touch pwned)";
    // (field and text, a fragment of the fix, the value)
    let cases: &[(&str, &str, &str)] = &[
        (
            "run: sh -c \"echo checking ${v}\"",
            "sh -c '… \"$1\"' _ ${v}",
            shell,
        ),
        (
            "run: bash -lc \"echo ${v}\"",
            "bash -c '… \"$1\"' _ ${v}",
            shell,
        ),
        ("run: /bin/sh -c \"echo ${v}\"", "\"$HOOKVISOR_V\"", shell),
        ("run: env FOO=1 sh -c \"echo ${v}\"", "_ ${v}", shell),
        ("argv: [sh, -c, \"echo ${v}\"]", "_ ${v}", shell),
        (
            "run: ssh -o BatchMode=yes localhost \"echo ${v}\"",
            "standard input",
            shell,
        ),
        ("run: echo a | xargs sh -c \"echo ${v}\"", "xargs", shell),
        (
            "run: find . -maxdepth 0 -exec sh -c \"echo ${v}\" \\;",
            "_ ${v}",
            shell,
        ),
        (
            "run: python3 -c \"print('${v}')\"",
            "HOOKVISOR_V",
            "'); import os; os.system('touch pwned'); print('",
        ),
        (
            "run: awk \"BEGIN { print \\\"${v}\\\" }\"",
            "ENVIRON[\"HOOKVISOR_V\"]",
            "\"; system(\"touch pwned\"); print \"",
        ),
        // Behind a wrapper the prefixes do not list: awk and a command-line program read
        // an operand as code without an option.
        (
            "run: taskset 1 awk \"BEGIN { print \\\"${v}\\\" }\"",
            "ENVIRON[\"HOOKVISOR_V\"]",
            "\"; system(\"touch pwned\"); print \"",
        ),
        (
            "run: unshare -r flock lock -c \"echo ${v}\"",
            "standard input",
            shell,
        ),
        // A value that names the program runs what it names.
        ("run: ${v} pwned", "case ${v} in", "touch"),
    ];
    for (field, fix, value) in cases {
        let ws = Workspace::new();
        yml(&ws, "gate", &format!("event: task.start\n{field}"));
        let check = ws.hookvisor(&["check"]);
        let out = String::from_utf8_lossy(&check.stdout).into_owned();
        let path = ws.path().join(".discobot/hooks/gate.yml");
        // The column of the `$` in the run text, or in the argv element `echo ${v}`.
        let column = match field.strip_prefix("run: ") {
            Some(run) => run[..run.find("${").unwrap()].chars().count() + 1,
            None => 6,
        };
        let at = match field.starts_with("argv") {
            true => format!("{}:3: argv: element 2, column {column}: ", path.display()),
            false => format!("{}:3: run: line 1, column {column}: ", path.display()),
        };
        assert_eq!(code(&check), 1, "{field}: {out}");
        let first = out.lines().next().unwrap_or_default();
        assert!(first.starts_with(&at), "{field}: {first:?} lacks {at:?}");
        assert!(first.contains("${v} is in "), "{field}: {first}");
        assert!(first.contains(fix), "{field}: {first:?} lacks {fix:?}");
        let data = serde_json::json!({ "v": value }).to_string();
        // The refused hook does not load; task.start is a gate, so it fails closed.
        let fired = ws.hookvisor(&["fire", "task.start", "--data", &data, "--json"]);
        assert_eq!(code(&fired), 1, "{field}: {}", stderr(&fired));
        let reason = reply(&fired)["reason"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(
            reason.starts_with(".discobot/hooks/gate.yml:3: "),
            "{field}: {reason}"
        );
        assert!(!ws.path().join("pwned").exists(), "{field}: the value ran");
        assert!(!ws.base().join("pwned").exists(), "{field}: the value ran");
    }

    // The safe forms the messages give pass the value verbatim and run none of it.
    let ws = Workspace::new();
    yml(
        &ws,
        "a-sh",
        "event: task.start\nrun: bash -lc 'printf %s \"$1\" > sh.out' bash ${v}",
    );
    yml(
        &ws,
        "b-env",
        "event: task.start\nrun: sh -c 'printf %s \"$HOOKVISOR_V\" > env.out'",
    );
    let check = ws.hookvisor(&["check"]);
    assert_eq!(
        code(&check),
        0,
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let value = "$(touch pwned)`touch pwned`\"; touch pwned; #'";
    let data = serde_json::json!({ "v": value }).to_string();
    let fired = ws.hookvisor(&["fire", "task.start", "--data", &data, "--json"]);
    assert_eq!(code(&fired), 0, "{}", stderr(&fired));
    for file in ["sh.out", "env.out"] {
        assert_eq!(fs::read_to_string(ws.path().join(file)).unwrap(), value);
    }
    assert!(!ws.path().join("pwned").exists());
}

#[test]
fn when_true_runs_false_skips_and_an_error_fails() {
    let ws = Workspace::new();
    yml(
        &ws,
        "a",
        "event: stage.complete\nwhen: ${stage_name} == 'plan'\nrun: echo a >> trace",
    );
    yml(
        &ws,
        "b",
        "event: stage.complete\nwhen: ${stage_name} == 'build'\nrun: echo b >> trace",
    );
    yml(
        &ws,
        "c",
        "event: stage.complete\nwhen: ${n} % 0 == 1\nrun: echo c >> trace",
    );
    let out = ws.hookvisor(&[
        "fire",
        "stage.complete",
        "--data",
        r#"{"stage_name":"plan","n":1}"#,
        "--json",
    ]);
    assert_eq!(
        code(&out),
        0,
        "a failure on a notice goes on: {}",
        stderr(&out)
    );
    assert_eq!(trace(&ws), ["a"]);
    let r = reply(&out);
    let results = r["results"].as_array().unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(results[1]["hookId"], "c");
    assert_eq!(results[1]["success"], false);
    let message = ".discobot/hooks/c.yml:1: when: ${n} % 0 == 1: '%' at column 6 divides by zero";
    let log = fs::read_to_string(ws.state_dir().join("output/c.log")).unwrap();
    assert_eq!(log, format!("{message}\n"));
    let hooks = &status(&ws)["hooks"];
    assert!(hooks.get("b").is_none());
    assert_eq!(hooks["c"]["lastResult"], "failure");
    assert_eq!(hooks["c"]["note"], message);
    // On a gate the same error blocks, whatever `block_on`, its message the reason.
    yml(
        &ws,
        "d",
        "event: task.start\nblock_on: never\nwhen: ${n} % 0 == 1\nrun: exit 0",
    );
    let out = ws.hookvisor(&["fire", "task.start", "--data", r#"{"n":1}"#]);
    assert_eq!(code(&out), 1);
    assert_eq!(
        stderr(&out),
        format!("{}\n", message.replace("c.yml", "d.yml"))
    );
}

#[test]
fn canonical_integer_text_from_event_data_compares_as_an_integer() {
    // The contract's settled question (docs/EVENTS.md §4.2): `"10"` in the data is the integer 10,
    // as the same text is in a template variable; `"010"` is no canonical integer's text.
    let ws = Workspace::new();
    yml(
        &ws,
        "big",
        "event: stage.complete\nwhen: ${n} > 9\nrun: echo big >> trace",
    );
    yml(
        &ws,
        "ten",
        "event: stage.complete\nwhen: ${n} == 10\nrun: echo ten >> trace",
    );
    let out = ws.hookvisor(&["fire", "stage.complete", "--data", r#"{"n":"10"}"#]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(trace(&ws), ["big", "ten"]);
    let out = ws.hookvisor(&["fire", "stage.complete", "--data", r#"{"n":"010"}"#]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        trace(&ws),
        ["big", "ten"],
        "'010' is a string: big fails, ten is false"
    );
    assert_eq!(ws.status()["hooks"]["big"]["lastResult"], "failure");
}

/// A guard on a value the model sends (issue 28): `limit` is the model's to choose.
const LIMIT_GUARD: &str = "when: ${tool_input.limit} > 1000\nrun: 'echo too many >&2; exit 2'";

/// What the model can send for `limit` that the condition cannot evaluate, and what the
/// evaluation then says.
const UNEVALUABLE_LIMITS: [(&str, &str); 4] = [
    (
        r#"{"limit":"05000"}"#,
        "'>' at column 21 needs integers, got a string",
    ),
    (
        r#"{"limit":5000.0}"#,
        "${tool_input.limit} at column 1 is a JSON float",
    ),
    (
        r#"{"limit":[5000]}"#,
        "${tool_input.limit} at column 1 is a JSON array",
    ),
    (r#"{}"#, "unknown variable ${tool_input.limit} at column 1"),
];

#[test]
fn a_when_the_model_cannot_let_be_evaluated_blocks_a_gate() {
    let ws = Workspace::new();
    yml(&ws, "limit", &format!("event: tool.before\n{LIMIT_GUARD}"));
    for (input, error) in UNEVALUABLE_LIMITS {
        let data = format!(r#"{{"tool_name":"Read","tool_input":{input}}}"#);
        let out = ws.hookvisor(&["fire", "tool.before", "--data", &data, "--json"]);
        assert_eq!(code(&out), 1, "{input} denies the call: {}", stderr(&out));
        let r = reply(&out);
        assert_eq!(r["decision"], "block", "{input}");
        let reason = r["reason"].as_str().unwrap();
        assert!(
            reason.contains("limit.yml") && reason.contains("${tool_input.limit} > 1000"),
            "{input}: the reason names the hook and its condition: {reason}"
        );
        assert!(reason.contains(error), "{input}: {reason}");
        assert_eq!(ws.status()["hooks"]["limit"]["lastResult"], "failure");
    }
    // tool.after is a gate too (docs/EVENTS.md §1.1): its block is feedback to the model, the
    // call having run, and the error reaches the model that way.
    yml(&ws, "limit", &format!("event: tool.after\n{LIMIT_GUARD}"));
    let data = r#"{"tool_name":"Read","tool_input":{"limit":"05000"}}"#;
    let out = ws.hookvisor(&["fire", "tool.after", "--data", data, "--json"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert!(
        reply(&out)["reason"]
            .as_str()
            .unwrap()
            .contains("needs integers")
    );
    yml(&ws, "limit", &format!("event: tool.before\n{LIMIT_GUARD}"));
    // The guard itself still judges what it can evaluate.
    let data = r#"{"tool_name":"Read","tool_input":{"limit":5000}}"#;
    let out = ws.hookvisor(&["fire", "tool.before", "--data", data]);
    assert_eq!((code(&out), stderr(&out)), (1, "too many\n".to_owned()));
    let data = r#"{"tool_name":"Read","tool_input":{"limit":10}}"#;
    assert_eq!(
        code(&ws.hookvisor(&["fire", "tool.before", "--data", data])),
        0
    );
}

#[test]
fn a_when_that_cannot_be_evaluated_where_nothing_can_block_is_a_recorded_failure() {
    // A notice (tool.failed), a `post` hook and an unawaited one cannot block: the error is
    // the run's failure and the event goes on.
    for (name, front) in [
        ("notice", format!("event: tool.failed\n{LIMIT_GUARD}")),
        (
            "post",
            format!("event: tool.before\nphase: post\n{LIMIT_GUARD}"),
        ),
        (
            "unawaited",
            format!("event: tool.before\nawait: false\n{LIMIT_GUARD}"),
        ),
    ] {
        let ws = Workspace::new();
        yml(&ws, name, &front);
        let event = if name == "notice" {
            "tool.failed"
        } else {
            "tool.before"
        };
        for (runs, (input, error)) in UNEVALUABLE_LIMITS.iter().enumerate() {
            let data = format!(r#"{{"tool_name":"Read","tool_input":{input}}}"#);
            let out = ws.hookvisor(&["fire", event, "--data", &data, "--json"]);
            assert_eq!(code(&out), 0, "{name} {input}: {}", stderr(&out));
            let r = reply(&out);
            assert_eq!(r["decision"], "allow", "{name} {input}");
            if name == "unawaited" {
                // Run by a detached process, which records it when it ends.
                common::wait_until("the unawaited run is recorded", || {
                    ws.state_dir().join("status.json").exists()
                        && ws.status()["hooks"][name]["runCount"] == runs + 1
                });
            } else {
                assert_eq!(r["results"][0]["success"], false, "{name} {input}");
            }
            let hook = &ws.status()["hooks"][name];
            assert_eq!(hook["lastResult"], "failure", "{name} {input}");
            let note = hook["note"].as_str().unwrap();
            assert!(note.contains(error), "{name} {input}: {note}");
            assert!(
                note.starts_with(&format!(
                    ".discobot/hooks/{name}.yml:1: when: ${{tool_input.limit}} > 1000: "
                )),
                "{name} {input}: the note names the hook and its condition: {note}"
            );
        }
    }
}

#[test]
fn a_value_the_model_sends_that_a_command_cannot_take_blocks_a_gate() {
    // A `run:` naming a field the model left out, and an `argv:` item holding a NUL byte,
    // cannot run: on a gate that blocks, whatever `block_on` says of the hook's own exit.
    let ws = Workspace::new();
    yml(
        &ws,
        "path",
        "event: tool.before\nrun: 'case ${tool_input.path} in secret*) exit 2;; esac'",
    );
    yml(
        &ws,
        "grep",
        "event: tool.before\nargv: [sh, -c, 'case \"$1\" in *rm*) exit 2;; esac', sh, '${tool_input.command}']",
    );
    for (data, names) in [
        (
            r#"{"tool_name":"Read","tool_input":{"name":"secret.txt","command":"cat"}}"#,
            "tool_input.path",
        ),
        (
            r#"{"tool_name":"Bash","tool_input":{"path":"a","command":"rm -rf /\u0000"}}"#,
            "NUL",
        ),
    ] {
        let out = ws.hookvisor(&["fire", "tool.before", "--data", data, "--json"]);
        assert_eq!(code(&out), 1, "{data}: {}", stderr(&out));
        let reason = reply(&out)["reason"].as_str().unwrap().to_owned();
        assert!(reason.contains(names), "{data}: {reason}");
    }
    // On a notice the same refusals are recorded failures, and the event goes on.
    yml(
        &ws,
        "path",
        "event: tool.failed\nrun: 'case ${tool_input.path} in secret*) exit 2;; esac'",
    );
    let data = r#"{"tool_name":"Read","tool_input":{"name":"secret.txt"}}"#;
    let out = ws.hookvisor(&["fire", "tool.failed", "--data", data, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(ws.status()["hooks"]["path"]["lastResult"], "failure");
}

#[test]
fn an_action_refused_for_the_models_values_blocks_a_gate_too() {
    // The attacker's review of issue 28: a spawn whose inputs name a field the model left out
    // was judged by `block_on`, and so let the call through; now it blocks like a command.
    let ws = Workspace::new();
    yml(
        &ws,
        "review",
        "event: tool.before\naction: spawn\nargv: ['true']\ninputs: {path: \"${tool_input.path}\"}",
    );
    let data = r#"{"tool_name":"Write","tool_input":{"file_path":"a.rs"}}"#;
    let out = ws.hookvisor(&["fire", "tool.before", "--data", data, "--json"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let said = reply(&out);
    assert_eq!(said["decision"], "block", "{said}");
    assert!(
        said["reason"].as_str().unwrap().contains("tool_input.path"),
        "{said}"
    );
}

#[test]
fn tool_lists_match_exact_names() {
    let ws = Workspace::new();
    yml(
        &ws,
        "a",
        "event: tool.after\ntool: Write|Edit\nrun: echo ${tool_name} >> trace",
    );
    yml(&ws, "b", "event: tool.after\nrun: echo all >> trace");
    for tool in ["Write", "Bash", "Edit", "edit"] {
        let data = format!(r#"{{"tool_name":"{tool}"}}"#);
        assert_eq!(
            code(&ws.hookvisor(&["fire", "tool.after", "--data", &data])),
            0
        );
    }
    assert_eq!(trace(&ws), ["Write", "all", "all", "Edit", "all", "all"]);
}

#[test]
fn pre_runs_before_post_and_the_first_block_ends_the_pre_pass() {
    let ws = Workspace::new();
    yml(
        &ws,
        "1-post",
        "event: turn.start\nphase: post\nrun: echo post ${decision} >> trace",
    );
    yml(&ws, "2-pre", "event: turn.start\nrun: echo pre >> trace");
    yml(
        &ws,
        "3-block",
        "event: turn.start\nrun: echo block >> trace; echo refused >&2; exit 2",
    );
    yml(&ws, "4-late", "event: turn.start\nrun: echo late >> trace");
    let out = ws.hookvisor(&["fire", "turn.start"]);
    assert_eq!(code(&out), 1);
    assert_eq!(stderr(&out), "refused\n");
    assert_eq!(trace(&ws), ["pre", "block", "post block"]);
}

#[test]
fn piped_output_comes_back_from_turn_start() {
    let ws = Workspace::new();
    yml(
        &ws,
        "lint",
        "event: error\npipe_output: true\nrun: echo 'lint: 2 warnings'",
    );
    yml(
        &ws,
        "greet",
        "event: turn.start\npipe_output: true\nrun: echo welcome back",
    );
    assert_eq!(code(&ws.hookvisor(&["fire", "error"])), 0);
    let out = ws.hookvisor(&["fire", "turn.start", "--json"]);
    assert_eq!(code(&out), 0);
    let r = reply(&out);
    let context = r["context"].as_array().unwrap();
    assert_eq!(context.len(), 1, "{r}");
    let text = context[0].as_str().unwrap();
    let lint = text.find("lint: 2 warnings").expect(text);
    let greet = text.find("welcome back").expect(text);
    assert!(lint < greet, "oldest first: {text}");
    // Without --json the context goes to stdout.
    assert_eq!(code(&ws.hookvisor(&["fire", "error"])), 0);
    let out = ws.hookvisor(&["fire", "turn.start"]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("lint: 2 warnings") && text.contains("welcome back"),
        "{text}"
    );
}

#[test]
fn status_json_gains_event_source_and_action() {
    let ws = Workspace::new();
    yml(&ws, "note", "event: session.end\nrun: exit 0");
    ws.hook("lint.sh", "file", "pattern: '*.rs'", "exit 0");
    assert_eq!(code(&ws.hookvisor(&["fire", "session.end"])), 0);
    let note = &status(&ws)["hooks"]["note"];
    assert_eq!(note["event"], "session.end");
    assert_eq!(note["source"], ".discobot/hooks/note.yml:1");
    assert_eq!(note["action"], "command");
    assert_eq!(note["runCount"], 1);
    assert_eq!(note["lastResult"], "success");
    // A phase-1 run keeps its entry as it was.
    assert_eq!(code(&ws.hookvisor(&["run", "lint"])), 0);
    let lint = &status(&ws)["hooks"]["lint"];
    assert_eq!(lint["type"], "file");
    assert!(
        lint.get("event").is_none() && lint.get("source").is_none(),
        "{lint}"
    );
    assert!(lint.get("action").is_none(), "{lint}");
}

/// Twenty `fire` processes at once, each firing three times in order: status.json counts
/// every run, and the buffer keeps each writer's entries in its order.
#[test]
fn twenty_concurrent_fires_lose_no_run_and_keep_each_writer_fifo() {
    const WRITERS: usize = 20;
    const EACH: usize = 3;
    let ws = Workspace::new();
    yml(
        &ws,
        "pipe",
        "event: error\npipe_output: true\nrun: echo \"w${writer}-${seq}\"",
    );
    thread::scope(|scope| {
        for writer in 0..WRITERS {
            let ws = &ws;
            scope.spawn(move || {
                for seq in 0..EACH {
                    let data = format!(r#"{{"writer":{writer},"seq":{seq}}}"#);
                    let out = ws.hookvisor(&["fire", "error", "--data", &data]);
                    assert_eq!(code(&out), 0, "{}", stderr(&out));
                }
            });
        }
    });
    let pipe = &status(&ws)["hooks"]["pipe"];
    assert_eq!(pipe["runCount"], WRITERS * EACH);
    assert_eq!(pipe["failCount"], 0);
    let out = ws.hookvisor(&["fire", "turn.start", "--json"]);
    let r = reply(&out);
    let text = r["context"][0].as_str().unwrap().to_owned();
    let lines: Vec<&str> = text.lines().filter(|l| l.starts_with('w')).collect();
    assert_eq!(lines.len(), WRITERS * EACH, "{text}");
    for writer in 0..WRITERS {
        let mine: Vec<&str> = lines
            .iter()
            .copied()
            .filter(|l| l.split('-').next() == Some(&format!("w{writer}")))
            .collect();
        let want: Vec<String> = (0..EACH).map(|s| format!("w{writer}-{s}")).collect();
        assert_eq!(mine, want, "writer {writer}");
    }
}

/// A `run:` of plain words runs its program without `sh -c` (case 7's speed), and everything
/// the shell would treat otherwise still goes through sh: a script without `#!`, a program
/// not in PATH, a builtin, an expansion. dash exports `PWD` to what it runs and hookvisor
/// does not, so a Perl tool (no shell of its own) tells which started it.
#[test]
fn a_plain_run_execs_its_program_and_anything_else_goes_through_sh() {
    use std::os::unix::fs::PermissionsExt;
    let ws = Workspace::new();
    let bin = ws.path().join("bin");
    fs::create_dir(&bin).unwrap();
    let tool = |name: &str, text: &str| {
        let path = bin.join(name);
        fs::write(&path, text).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    };
    tool(
        "started-by",
        "#!/usr/bin/perl\nopen(my $f, '>>', \"$ENV{DISCOBOT_WORKSPACE}/trace\") or die;\n\
         print $f (exists $ENV{PWD} ? 'sh' : 'hookvisor'), \" @ARGV\\n\";\n",
    );
    tool(
        "no-shebang",
        "echo \"no-shebang $*\" >> \"$DISCOBOT_WORKSPACE/trace\"\n",
    );
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    yml(&ws, "a", "event: task.start\nrun: started-by one --two=2");
    yml(&ws, "b", "event: task.start\nrun: no-shebang three");
    yml(
        &ws,
        "c",
        "event: task.start\nrun: started-by $DISCOBOT_SESSION_ID",
    );
    yml(&ws, "d", "event: task.start\nrun: no-such-program-anywhere");
    yml(&ws, "e", "event: task.start\nrun: echo builtin >> trace");
    let out = ws
        .hookvisor_command()
        .args(["fire", "task.start", "--json", "--session", "s1"])
        .env("PATH", &path)
        .env_remove("PWD")
        .output()
        .unwrap();
    let r = reply(&out);
    assert_eq!(
        trace(&ws),
        [
            "hookvisor one --two=2",
            "no-shebang three",
            "sh s1",
            "builtin"
        ],
        "{r}"
    );
    let d = &r["results"][3];
    assert_eq!(d["hookId"], "d");
    assert_eq!(d["exitCode"], 127, "{r}");
    let log = fs::read_to_string(ws.state_dir().join("output/d.log")).unwrap();
    assert!(log.contains("no-such-program-anywhere: not found"), "{log}");
}

// turn.end ≡ eval (docs/EVENTS.md §5 rule 8, §1.4, §3): the phase-1 evaluation and the event hooks
// of turn.end, in a real git repository. Hooks trace outside the workspace, so that tracing a
// run is no change of the work tree.

/// A git workspace and the trace file its hooks append to, outside the work tree.
fn turn_workspace() -> (Workspace, String) {
    let ws = Workspace::git();
    ws.write("README.md", "readme\n");
    ws.git_ok(&["add", "README.md"]);
    common::check(ws.commit("initial"), "commit");
    let trace = ws.base().join("trace").display().to_string();
    (ws, trace)
}

/// Lines of the trace outside the workspace.
fn turn_trace(path: &str) -> Vec<String> {
    fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// `fire turn.end --json` with these extra arguments: the exit code and the reply.
fn fire_turn_end(ws: &Workspace, extra: &[&str]) -> (i32, Value) {
    let mut args = vec!["fire", "turn.end", "--json"];
    args.extend_from_slice(extra);
    let out = ws.hookvisor(&args);
    (code(&out), reply(&out))
}

/// What the model does in a turn: writes a file, then lets the file clock pass the write.
fn model_writes(ws: &Workspace, file: &str, text: &str) {
    ws.write(file, text);
    common::tick();
}

#[test]
fn a_turn_end_hook_with_a_pattern_runs_on_its_changes_and_one_without_every_turn() {
    let (ws, trace) = turn_workspace();
    yml(
        &ws,
        "lint",
        &format!(
            "event: turn.end\npattern: '*.txt'\n\
             run: 'echo lint ${{files}} >> {trace}; ! grep -q bad ${{files}}'"
        ),
    );
    // Named after `lint`: hooks run in file-name order (§1.4), with or without a pattern.
    yml(
        &ws,
        "z-every",
        &format!("event: turn.end\nrun: 'echo every >> {trace}'"),
    );
    // The hook files themselves are untracked, hence changed: neither matches them.
    model_writes(&ws, "a.txt", "ok\n");
    let (exit, r) = fire_turn_end(&ws, &[]);
    assert_eq!(exit, 0, "{r}");
    assert_eq!(turn_trace(&trace), ["lint a.txt", "every"]);
    assert_eq!(r["event"], "turn.end");
    assert_eq!(r["decision"], "allow");
    assert_eq!(r["reason"], Value::Null);
    assert_eq!(
        (r["attempt"].as_u64(), r["maxAttempts"].as_u64()),
        (Some(1), Some(3))
    );
    assert_eq!(r["action"], "pass");
    assert_eq!(r["pending"], serde_json::json!([]));
    let ids: Vec<&str> = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["hookId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["lint", "z-every"]);
    assert_eq!(r["results"][0]["files"], serde_json::json!(["a.txt"]));
    assert_eq!(r["results"][0]["blocked"], false);

    // No new change: the pattern'd hook saw a.txt already; the other runs at every turn end.
    let (exit, _) = fire_turn_end(&ws, &["--trigger", "hook"]);
    assert_eq!(exit, 0);
    assert_eq!(turn_trace(&trace), ["lint a.txt", "every", "every"]);
    // A change it does not match runs it neither.
    model_writes(&ws, "notes.md", "bad\n");
    fire_turn_end(&ws, &["--trigger", "hook"]);
    assert_eq!(turn_trace(&trace).len(), 4);
    assert_eq!(turn_trace(&trace)[3], "every");

    // A failure re-prompts with phase 1's text and ends the pre pass: `every` does not run.
    model_writes(&ws, "a.txt", "bad\n");
    let (exit, r) = fire_turn_end(&ws, &[]);
    assert_eq!(exit, 1, "{r}");
    assert_eq!(turn_trace(&trace)[4..], ["lint a.txt"]);
    assert_eq!(r["decision"], "block");
    assert_eq!(r["action"], "reprompt");
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.starts_with(
            "[Discobot Hook Failed] \"lint\" (pattern: *.txt)\n\nFiles: a.txt\nExit code: 1"
        ),
        "{reason}"
    );
    assert!(reason.ends_with("(Attempt 1/3)"), "{reason}");
    assert_eq!(r["message"], r["reason"]);
    assert_eq!(r["results"][0]["blocked"], true);
    assert_eq!(r["pending"], serde_json::json!(["lint"]));
    assert_eq!(ws.status()["pendingHooks"], serde_json::json!(["lint"]));

    // Unchanged, the same input would fail the same way: nothing re-prompts; `every` runs.
    let (exit, r) = fire_turn_end(&ws, &["--trigger", "hook"]);
    assert_eq!((exit, r["decision"].as_str()), (0, Some("allow")), "{r}");
    assert_eq!(turn_trace(&trace)[5..], ["every"]);

    // Fixed: the hook passes and leaves the pending set.
    model_writes(&ws, "a.txt", "fine\n");
    let (exit, r) = fire_turn_end(&ws, &["--trigger", "hook"]);
    assert_eq!(exit, 0, "{r}");
    assert_eq!(turn_trace(&trace)[6..], ["lint a.txt", "every"]);
    assert_eq!(ws.status()["pendingHooks"], serde_json::json!([]));
}

/// docs/EVENTS.md §1.4, settled: a pattern-less `turn.end` hook runs in file-name order with the
/// file hooks (not after all of them), so one named before a failing file hook runs before the
/// re-prompt, and one named after it does not (the first block ends the pre pass).
#[test]
fn pattern_less_turn_end_hooks_run_in_file_name_order_with_the_file_hooks() {
    let (ws, trace) = turn_workspace();
    yml(
        &ws,
        "a-every",
        &format!("event: turn.end\nrun: 'echo a-every >> {trace}'"),
    );
    ws.hook(
        "b-lint.sh",
        "file",
        "pattern: '*.txt'",
        &format!("echo b-lint >> {trace}\n! grep -q bad a.txt"),
    );
    yml(
        &ws,
        "c-every",
        &format!("event: turn.end\nrun: 'echo c-every >> {trace}'"),
    );
    model_writes(&ws, "a.txt", "ok\n");
    let (exit, r) = fire_turn_end(&ws, &[]);
    assert_eq!(exit, 0, "{r}");
    assert_eq!(turn_trace(&trace), ["a-every", "b-lint", "c-every"]);
    let ids: Vec<&str> = r["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["hookId"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a-every", "b-lint", "c-every"]);

    model_writes(&ws, "a.txt", "bad\n");
    let (exit, r) = fire_turn_end(&ws, &[]);
    assert_eq!(exit, 1, "{r}");
    assert_eq!(r["action"], "reprompt");
    assert_eq!(turn_trace(&trace)[3..], ["a-every", "b-lint"]);
    // `eval` is the same turn end.
    model_writes(&ws, "a.txt", "bad again\n");
    let out = ws.hookvisor(&["eval", "--trigger", "hook"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(turn_trace(&trace)[5..], ["a-every", "b-lint"]);
}

#[test]
fn a_failing_pattern_less_turn_end_hook_re_prompts_with_the_phase1_text() {
    let (ws, _trace) = turn_workspace();
    yml(
        &ws,
        "done",
        "name: Done check\nevent: turn.end\nrun: 'echo the task list is not done >&2; exit 1'",
    );
    // Committed: nothing changed in the turn, and it runs all the same.
    ws.git_ok(&["add", "."]);
    common::check(ws.commit("hooks"), "commit");
    // `eval` runs it too, with its own output: the re-prompt on stdout, exit 1.
    let out = ws.hookvisor(&["eval"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        text.starts_with("[Discobot Hook Failed] \"Done check\"\n\nExit code: 1"),
        "{text}"
    );
    assert!(text.contains("the task list is not done"), "{text}");
    assert!(text.trim_end().ends_with("(Attempt 1/3)"), "{text}");

    let (exit, r) = fire_turn_end(&ws, &["--trigger", "hook"]);
    assert_eq!(exit, 1, "{r}");
    assert_eq!(r["decision"], "block");
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("[Discobot Hook Failed] \"Done check\""),
        "{reason}"
    );
    assert!(reason.ends_with("(Attempt 2/3)"), "{reason}");
    assert_eq!(r["results"][0]["blocked"], true);
    // It keeps no pending set: nothing is pending.
    assert_eq!(r["pending"], serde_json::json!([]));
}

#[test]
fn attempts_count_blocked_turn_ends_and_session_stops_and_a_user_turn_resets_them() {
    let (ws, trace) = turn_workspace();
    let base = ws.base().display().to_string();
    yml(
        &ws,
        "turn",
        &format!(
            "event: turn.end\nrun: 'echo turn >> {trace}; \
             if [ -e {base}/turn-fails ]; then echo turn fails >&2; exit 1; fi'"
        ),
    );
    yml(
        &ws,
        "stop",
        &format!(
            "event: session.stop\nrun: 'if [ -e {base}/stop-blocks ]; then echo keep going >&2; exit 2; fi'"
        ),
    );
    let turn_fails = |on: bool| set_flag(&ws.base().join("turn-fails"), on);
    let stop_blocks = |on: bool| set_flag(&ws.base().join("stop-blocks"), on);
    let attempts = |r: &Value| {
        (
            r["decision"].as_str().unwrap().to_owned(),
            r["attempt"].as_u64().unwrap(),
            r["maxAttempts"].as_u64().unwrap(),
        )
    };
    let fire_stop = |trigger: &str| {
        let out = ws.hookvisor(&[
            "fire",
            "session.stop",
            "--json",
            "--max-retries",
            "2",
            "--trigger",
            trigger,
        ]);
        (code(&out), reply(&out))
    };
    let max2 = ["--max-retries", "2"];

    // A user turn: turn.end blocks, re-prompt 1 of 2.
    turn_fails(true);
    let (_, r) = fire_turn_end(&ws, &[&max2[..], &["--trigger", "user"]].concat());
    assert_eq!(attempts(&r), ("block".into(), 1, 2));
    // The re-prompted turn passes, but session.stop blocks: one more turn, re-prompt 2 of 2.
    turn_fails(false);
    stop_blocks(true);
    let (_, r) = fire_turn_end(&ws, &[&max2[..], &["--trigger", "hook"]].concat());
    assert_eq!(attempts(&r), ("allow".into(), 2, 2));
    let (exit, r) = fire_stop("hook");
    assert_eq!((exit, attempts(&r)), (1, ("block".into(), 2, 2)), "{r}");
    assert_eq!(r["reason"], "keep going");
    // That turn counted: the guard has run out, for turn.end (eval's `gave_up`) ...
    turn_fails(true);
    let (exit, r) = fire_turn_end(&ws, &[&max2[..], &["--trigger", "hook"]].concat());
    assert_eq!((exit, attempts(&r)), (0, ("allow".into(), 3, 2)), "{r}");
    assert_eq!(r["action"], "gave_up");
    assert_eq!(r["reason"], Value::Null);
    // ... and for session.stop.
    let (exit, r) = fire_stop("hook");
    assert_eq!((exit, attempts(&r)), (0, ("allow".into(), 3, 2)), "{r}");
    // `eval` shares the count: another hook turn is the 4th.
    let out = ws.hookvisor(&["eval", "--json", "--trigger", "hook", "--max-retries", "2"]);
    let eval: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (eval["action"].as_str(), eval["attempt"].as_u64()),
        (Some("gave_up"), Some(4))
    );
    // A user turn starts the count again, for both events.
    let (exit, r) = fire_turn_end(&ws, &[&max2[..], &["--trigger", "user"]].concat());
    assert_eq!((exit, attempts(&r)), (1, ("block".into(), 1, 2)), "{r}");
    let (exit, r) = fire_stop("user");
    assert_eq!((exit, attempts(&r)), (1, ("block".into(), 1, 2)), "{r}");
    assert_eq!(turn_trace(&trace).len(), 5);
}

#[test]
fn a_loop_turn_end_is_not_stopped_by_the_guard() {
    let (ws, _trace) = turn_workspace();
    yml(
        &ws,
        "never",
        "event: turn.end\nrun: 'echo never done >&2; exit 1'",
    );
    yml(
        &ws,
        "stop",
        "event: session.stop\nrun: 'echo again >&2; exit 2'",
    );
    for _ in 0..4 {
        let (exit, r) = fire_turn_end(&ws, &["--trigger", "loop", "--max-retries", "1"]);
        assert_eq!((exit, r["decision"].as_str()), (1, Some("block")), "{r}");
        assert_eq!(r["action"], "reprompt");
        let out = ws.hookvisor(&[
            "fire",
            "session.stop",
            "--json",
            "--trigger",
            "loop",
            "--max-retries",
            "1",
        ]);
        assert_eq!(code(&out), 1, "{}", stderr(&out));
    }
    // The loop's turns are not the guard's: a hook turn after them is the first re-prompt.
    let (exit, r) = fire_turn_end(&ws, &["--trigger", "hook", "--max-retries", "2"]);
    assert_eq!((exit, r["attempt"].as_u64()), (1, Some(2)), "{r}");
    let (exit, r) = fire_turn_end(&ws, &["--trigger", "hook", "--max-retries", "2"]);
    assert_eq!((exit, r["action"].as_str()), (0, Some("gave_up")), "{r}");
}

#[test]
fn fire_turn_end_and_eval_record_the_same_status() {
    let mut statuses = Vec::new();
    for command in [&["eval"][..], &["fire", "turn.end"][..]] {
        let (ws, _trace) = turn_workspace();
        ws.hook(
            "10-script.sh",
            "file",
            "pattern: '*.txt'",
            "grep -q ok a.txt",
        );
        yml(
            &ws,
            "20-lint",
            "event: turn.end\npattern: '*.txt'\nrun: 'exit 0'",
        );
        yml(
            &ws,
            "30-every",
            "event: turn.end\nrun: 'echo failing >&2; exit 1'",
        );
        yml(
            &ws,
            "40-after",
            "event: turn.end\nphase: post\nrun: 'exit 3'",
        );
        model_writes(&ws, "a.txt", "ok\n");
        let out = ws.hookvisor(command);
        assert_eq!(code(&out), 1, "{command:?}: {}", stderr(&out));
        let mut status = ws.status();
        for entry in status["hooks"].as_object_mut().unwrap().values_mut() {
            let entry = entry.as_object_mut().unwrap();
            for key in ["lastRunAt", "durationMs", "outputPath"] {
                entry.remove(key);
            }
        }
        status.as_object_mut().unwrap().remove("lastEvaluatedAt");
        statuses.push(status);
    }
    assert_eq!(statuses[0], statuses[1]);
    let hooks = &statuses[0]["hooks"];
    for (id, runs, fails) in [
        ("10-script", 1, 0),
        ("20-lint", 1, 0),
        ("30-every", 1, 1),
        ("40-after", 1, 1),
    ] {
        assert_eq!(
            (
                hooks[id]["runCount"].as_u64(),
                hooks[id]["failCount"].as_u64()
            ),
            (Some(runs), Some(fails)),
            "{id}: {hooks}"
        );
    }
    assert_eq!(hooks["20-lint"]["event"], "turn.end");
    assert_eq!(hooks["20-lint"]["source"], ".discobot/hooks/20-lint.yml:1");
}

/// Creates or removes a flag file a hook tests for.
fn set_flag(path: &std::path::Path, on: bool) {
    if on {
        fs::write(path, "").unwrap();
    } else {
        let _ = fs::remove_file(path);
    }
}

/// A hook that fails without blocking (a notice, or `block_on` not covering it) decides
/// nothing, but `fire` says so on stderr; and `run ID` names the event of an event hook.
/// A gate hook whose `run:` the injection lexer refuses (issue 28).
const REFUSED_GATE: &str = "event: tool.before\nrun: sh -c \"echo checking ${tool_input.command}\"";

/// A gate's hook file that does not load fails closed (issue 28): its event blocks, the
/// reason naming the file, the error and the fix; a notice's broken hook is a warning, and
/// front matter that does not parse (its event unknown) blocks every gate.
#[test]
fn a_gate_hook_that_cannot_be_loaded_blocks_its_event() {
    let ws = Workspace::new();
    yml(&ws, "guard", REFUSED_GATE);
    let data = r#"{"tool_name":"Bash","tool_input":{"command":"$(touch pwned)"}}"#;
    let out = ws.hookvisor(&["fire", "tool.before", "--data", data, "--json"]);
    assert_eq!(
        code(&out),
        1,
        "a broken gate denies the call: {}",
        stderr(&out)
    );
    let reason = reply(&out)["reason"].as_str().unwrap().to_owned();
    for part in [
        "guard.yml:3",
        "sh -c",
        "fix the hook file or remove it",
        "hookvisor check",
    ] {
        assert!(reason.contains(part), "{part}: {reason}");
    }
    assert!(!ws.path().join("pwned").exists());
    // Another gate is not this file's: it goes on.
    let out = ws.hookvisor(&["fire", "turn.start", "--data", "{}"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let check = ws.hookvisor(&["check"]);
    assert_ne!(code(&check), 0);
    assert!(
        common::stdout(&check).contains("guard.yml") || stderr(&check).contains("guard.yml"),
        "{}",
        stderr(&check)
    );

    // On a notice, a broken hook is a warning, as before.
    yml(
        &ws,
        "guard",
        &REFUSED_GATE.replace("tool.before", "tool.failed"),
    );
    let out = ws.hookvisor(&["fire", "tool.failed", "--data", data]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("warning") && stderr(&out).contains("guard.yml"),
        "{}",
        stderr(&out)
    );

    // Front matter that does not parse says no event: every gate blocks, no notice.
    fs::remove_file(ws.path().join(".discobot/hooks/guard.yml")).unwrap();
    ws.write(
        ".discobot/hooks/broken.yml",
        "---\nevent: tool.after\nrun: 'true'\n",
    );
    for gate in ["tool.before", "turn.start", "session.stop"] {
        let out = ws.hookvisor(&["fire", gate, "--data", "{}", "--json"]);
        assert_eq!(code(&out), 1, "{gate}: {}", stderr(&out));
        let reason = reply(&out)["reason"].as_str().unwrap().to_owned();
        assert!(
            reason.contains("broken.yml") && reason.contains("never closed"),
            "{gate}: {reason}"
        );
    }
    let out = ws.hookvisor(&["fire", "tool.failed", "--data", "{}"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// `blocking` is phase 1's session field (docs/EVENTS.md §1.5: one word, one meaning). On an event
/// hook it once meant `await` and let a crashing gate through; now the file is refused, naming
/// the line and the two fields that say what was meant, and the gate fails closed on it.
#[test]
fn blocking_on_an_event_hook_is_refused_and_its_gate_fails_closed() {
    let ws = Workspace::new();
    yml(
        &ws,
        "guard",
        "event: tool.before\nblocking: true\nrun: 'echo crashed >&2; exit 1'",
    );
    let out = ws.hookvisor(&["fire", "tool.before", "--data", "{}", "--json"]);
    assert_eq!(code(&out), 1, "the gate fails closed: {}", stderr(&out));
    let reason = reply(&out)["reason"].as_str().unwrap().to_owned();
    for part in ["guard.yml:3", "blocking", "await", "block_on: failure"] {
        assert!(reason.contains(part), "{part}: {reason}");
    }
    let list = ws.hookvisor(&["list", "--json"]);
    let listed: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(listed["hooks"], serde_json::json!([]), "{listed}");
    let problem = listed["problems"][0]["reason"].as_str().unwrap();
    assert!(problem.contains("block_on: failure"), "{problem}");
    // Phase 1's session hooks keep it.
    fs::remove_file(ws.path().join(".discobot/hooks/guard.yml")).unwrap();
    ws.hook("setup.sh", "session", "blocking: true", "true");
    let list = ws.hookvisor(&["list", "--json"]);
    let listed: Value = serde_json::from_slice(&list.stdout).unwrap();
    assert_eq!(listed["hooks"][0]["blocking"], true, "{listed}");
    assert_eq!(listed["problems"], serde_json::json!([]), "{listed}");
}

/// Files in the hooks directory that are no hooks (a README, notes with front matter, an
/// editor's backup of a broken gate, a helper script) block no gate.
#[test]
fn a_file_that_is_no_hook_blocks_nothing() {
    let ws = Workspace::new();
    ws.write(
        ".discobot/hooks/README.md",
        "# Our hooks\n\nguard.yml checks commands.\n",
    );
    ws.write(".discobot/hooks/notes.md", "---\ntitle: notes\n---\ntext\n");
    ws.write(
        ".discobot/hooks/guard.yml~",
        &format!("---\n{REFUSED_GATE}\n---\n"),
    );
    ws.write(".discobot/hooks/old.yml.bak", "---\nevent: tool.before\n");
    let data = r#"{"tool_name":"Bash","tool_input":{"command":"ls"}}"#;
    for gate in ["tool.before", "turn.start", "session.stop"] {
        let out = ws.hookvisor(&["fire", gate, "--data", data]);
        assert_eq!(code(&out), 0, "{gate}: {}", stderr(&out));
    }
}

/// A gate file whose front matter is not where discovery reads it (a `.yml` without `---`,
/// a comment or a byte-order mark before it, a script without `#!` or without `#---`) does
/// not load either, and still names its event: the gate blocks rather than run without it.
#[test]
fn a_gate_file_whose_front_matter_is_misplaced_blocks() {
    use std::os::unix::fs::PermissionsExt;
    let cases = [
        ("guard.yml", "event: tool.before\nrun: exit 2\n", false),
        (
            "guard.yml",
            "# Block shells\n---\nevent: tool.before\nrun: exit 2\n---\n",
            false,
        ),
        (
            "guard.yml",
            "\u{feff}---\nevent: tool.before\nrun: exit 2\n---\n",
            false,
        ),
        (
            "guard.sh",
            "#!/bin/sh\n# event: tool.before\nexit 2\n",
            true,
        ),
        (
            "guard.sh",
            "#---\n# event: tool.before\n#---\nexit 2\n",
            true,
        ),
    ];
    let data = r#"{"tool_name":"Bash","tool_input":{"command":"ls"}}"#;
    for (name, text, executable) in cases {
        let ws = Workspace::new();
        let path = ws.write(&format!(".discobot/hooks/{name}"), text);
        if executable {
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let out = ws.hookvisor(&["fire", "tool.before", "--data", data, "--json"]);
        assert_eq!(code(&out), 1, "{text:?}: {}", stderr(&out));
        let reason = reply(&out)["reason"].as_str().unwrap().to_owned();
        assert!(reason.contains(name), "{text:?}: {reason}");
    }
}

#[test]
fn a_failure_that_does_not_block_is_said_and_run_points_to_fire() {
    let ws = Workspace::new();
    yml(&ws, "q", "event: tool.before\nrun: echo broken >&2; exit 1");
    let out = ws.hookvisor(&["fire", "tool.before", "--data", "{}"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "hookvisor: warning: hook 'q' failed with exit code 1 and did not block; its output is \
         in its log (`hookvisor status`)\n"
    );
    let run = ws.hookvisor(&["run", "q"]);
    assert_eq!(code(&run), 2);
    assert!(
        stderr(&run).contains("'q' is a hook of the event tool.before")
            && stderr(&run).contains("hookvisor fire tool.before"),
        "{}",
        stderr(&run)
    );
}

/// SIGTERM to `fire` cancels its hook (read from a signalfd, no signal thread): the hook's
/// whole group dies, `fire` exits, and the run's payload files are gone from `<state>/fire/`.
#[test]
fn a_terminated_fire_kills_the_hook_group_and_removes_its_files() {
    let ws = Workspace::new();
    let ready = ws.path().join("ready");
    nix::unistd::mkfifo(&ready, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    // The hook starts a grandchild in its group, then says both pids through the FIFO.
    ws.write(
        "wait.sh",
        "sleep 60 & echo \"$$ $! $HOOKVISOR_PAYLOAD\" > ready; wait\n",
    );
    yml(
        &ws,
        "wait",
        "event: task.start\nargv: [\"/bin/sh\", \"wait.sh\"]",
    );
    common::tick();
    let child = ws
        .hookvisor_command()
        .args(["fire", "task.start"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Opening the FIFO for reading waits for the hook to open it for writing.
    let said = fs::read_to_string(&ready).unwrap();
    let mut words = said.split_whitespace();
    let mut pid = || nix::unistd::Pid::from_raw(words.next().unwrap().parse().unwrap());
    let (hook, grandchild) = (pid(), pid());
    let payload = said.split_whitespace().nth(2).unwrap().to_owned();
    assert!(
        payload.starts_with(ws.state_dir().join("fire").to_str().unwrap()),
        "{payload}"
    );
    assert!(
        fs::metadata(&payload).is_ok(),
        "the payload file exists while the hook runs"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let output = child.wait_with_output().unwrap();
    // An exit status, not death by SIGTERM: the signal was taken as a cancel.
    assert!(output.status.code().is_some(), "{output:?}");
    // Both are gone: killed with the group, reaped by `fire` or by whoever inherited them.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    for pid in [hook, grandchild] {
        while nix::sys::signal::kill(pid, None).is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "{pid} outlived the fire"
            );
            thread::sleep(std::time::Duration::from_millis(5));
        }
    }
    let left: Vec<_> = fs::read_dir(ws.state_dir().join("fire"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(left.is_empty(), "files left: {left:?}");
}

/// Attack: the agent owns the state dir (the sandbox's `HOOKVISOR_STATE_DIR`) and plants
/// `output -> /a/root-only/dir`; then root runs `fire`. Root creates and removes nothing there
/// (it refuses, in one line, a state dir another account can change), and nothing of the
/// state dir is followed.
#[test]
fn root_fires_nothing_through_a_link_the_agent_planted_in_its_state_dir() {
    use std::os::unix::fs::{PermissionsExt as _, chown, symlink};
    let Some(_one_at_a_time) = common::ensure_test_user() else {
        return;
    };
    let user = common::test_user();
    let ws = Workspace::new();
    fs::set_permissions(ws.base(), fs::Permissions::from_mode(0o755)).unwrap();
    yml(&ws, "note", "event: task.complete\nrun: echo noted");
    let root_only = ws.base().join("root-only");
    fs::create_dir(&root_only).unwrap();
    fs::set_permissions(&root_only, fs::Permissions::from_mode(0o700)).unwrap();
    // A file root keeps there under the name fire would unlink.
    fs::write(root_only.join("note.log"), "root's\n").unwrap();
    fs::create_dir(ws.state_dir()).unwrap();
    chown(
        ws.state_dir(),
        Some(user.uid.as_raw()),
        Some(user.gid.as_raw()),
    )
    .unwrap();
    symlink(&root_only, ws.state_dir().join("output")).unwrap();

    let out = ws.hookvisor(&["fire", "task.complete"]);
    let mut names: Vec<_> = fs::read_dir(&root_only)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    names.sort();
    assert_eq!(names, ["note.log"], "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(root_only.join("note.log")).unwrap(),
        "root's\n"
    );
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("refusing to run as root"),
        "{}",
        stderr(&out)
    );
}

/// The unawaited hook of the delivery tests: it waits in the gate `gate` until the test lets
/// it go, so a reply that came back while it waits was not held by it.
fn unawaited(ws: &Workspace, event: &str) -> std::path::PathBuf {
    let gate = ws.base().join("gate");
    common::gate(&gate);
    yml(
        ws,
        "slow",
        &format!(
            "event: {event}\nawait: false\ntimeout: 30\nrun: cat '{}' > /dev/null; echo slow ran",
            gate.display()
        ),
    );
    yml(ws, "fast", &format!("event: {event}\nrun: 'true'"));
    gate
}

/// After the reply: the unawaited hook is still running (not recorded), and once let go its
/// run is recorded, as any run is.
fn recorded_after_the_reply(ws: &Workspace, gate: &std::path::Path) {
    let status = ws.status();
    assert_eq!(status["hooks"]["fast"]["runCount"], 1, "{status}");
    assert!(
        status["hooks"].get("slow").is_none(),
        "the reply waited for the unawaited hook: {status}"
    );
    common::open_gate(gate);
    common::wait_until("the unawaited run is recorded", || {
        ws.status()["hooks"]["slow"]["runCount"] == 1
    });
    let slow = &ws.status()["hooks"]["slow"];
    assert_eq!(slow["lastResult"], "success", "{slow}");
}

/// docs/EVENTS.md §1.3 `await: false`: the reply of `fire` never waits for a command hook marked
/// so; a detached process runs it and records it.
#[test]
fn an_unawaited_command_hook_never_holds_the_reply_of_fire() {
    let ws = Workspace::new();
    let gate = unawaited(&ws, "tool.after");
    let out = ws.hookvisor(&["fire", "tool.after", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = reply(&out);
    assert_eq!(r["results"].as_array().map(Vec::len), Some(1), "{r}");
    recorded_after_the_reply(&ws, &gate);
}

/// The same through `serve`: the HTTP reply comes back while the hook runs.
#[test]
fn an_unawaited_command_hook_never_holds_the_http_reply() {
    let ws = Workspace::new();
    let gate = unawaited(&ws, "tool.after");
    let server = common::serve::Server::tcp(&ws);
    let answer = server.post("/v1/events/tool.after", "{}");
    assert_eq!(answer.status, 200, "{}", answer.body);
    recorded_after_the_reply(&ws, &gate);
    server.stop();
}

/// §1.6, §5 rule 17: tool.after answers piped output in its own reply; a gate's JSON
/// `additionalContext` goes to the buffer for the next turn.start, once.
#[test]
fn context_is_answered_where_the_agent_takes_it_else_buffered_once() {
    let ws = Workspace::new();
    yml(
        &ws,
        "lint",
        "event: tool.after\npipe_output: true\nrun: echo lint says hi",
    );
    yml(
        &ws,
        "gate",
        "event: tool.before\nrun: echo '{\"additionalContext\":\"remember tests\"}'",
    );
    let after = reply(&ws.hookvisor(&["fire", "tool.after", "--json"]));
    assert_eq!(
        after["context"],
        serde_json::json!(["lint says hi\n"]),
        "{after}"
    );
    let before = reply(&ws.hookvisor(&["fire", "tool.before", "--json"]));
    assert_eq!(before["context"], serde_json::json!([]), "{before}");
    let start = reply(&ws.hookvisor(&["fire", "turn.start", "--json"]));
    assert_eq!(
        start["context"],
        serde_json::json!(["remember tests\n"]),
        "{start}"
    );
}

/// §1.6: `session.end` discards what no prompt took, on `fire` too, and says so in the
/// session's log; the next session's first prompt starts empty.
#[test]
fn session_end_discards_the_buffer_into_the_session_log() {
    let ws = Workspace::new();
    yml(
        &ws,
        "gate",
        "event: tool.before\nrun: echo '{\"additionalContext\":\"left over\"}'",
    );
    ws.hookvisor(&["fire", "tool.before"]);
    let out = ws.hookvisor(&["fire", "session.end"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let start = reply(&ws.hookvisor(&["fire", "turn.start", "--json"]));
    assert_eq!(start["context"], serde_json::json!([]), "{start}");
    let log = fs::read_to_string(ws.state_dir().join("output/session.log")).unwrap();
    assert!(
        log.contains("session.end: discarded 1 undelivered context entry"),
        "{log}"
    );
    assert!(log.contains("left over"), "{log}");
}

/// The same through `serve`.
#[test]
fn session_end_discards_the_buffer_through_serve() {
    let ws = Workspace::new();
    yml(
        &ws,
        "gate",
        "event: tool.before\nrun: echo '{\"additionalContext\":\"left over\"}'",
    );
    yml(
        &ws,
        "err",
        "event: error\npipe_output: true\nrun: echo left over too",
    );
    let server = common::serve::Server::tcp(&ws);
    assert_eq!(server.post("/v1/events/tool.before", "{}").status, 200);
    assert_eq!(server.post("/v1/events/error", "{}").status, 200);
    assert_eq!(server.post("/v1/events/session.end", "{}").status, 200);
    let start = server.post("/v1/events/turn.start", "{}").json();
    assert_eq!(start["context"], serde_json::json!([]), "{start}");
    server.stop();
}

/// serve answers `session.end` when its `pre` pass ends: the buffer is emptied before that
/// answer, so a prompt that follows it at once never gets the ended session's context, and what
/// a `post` hook of `session.end` pipes afterwards is discarded too.
#[test]
fn serve_empties_the_buffer_before_it_answers_session_end() {
    let ws = Workspace::new();
    let gate = ws.base().join("gate");
    common::gate(&gate);
    yml(
        &ws,
        "err",
        "event: error\npipe_output: true\nrun: echo left over",
    );
    yml(
        &ws,
        "last-words",
        &format!(
            "event: session.end\nphase: post\npipe_output: true\nrun: cat '{}' >/dev/null; echo said after the end",
            gate.display()
        ),
    );
    let server = common::serve::Server::tcp(&ws);
    assert_eq!(server.post("/v1/events/error", "{}").status, 200);
    assert_eq!(server.post("/v1/events/session.end", "{}").status, 200);
    // The `post` hook still waits in its gate: whatever serve does with the next prompt.
    let start = std::thread::scope(|scope| {
        let addr = &server.addr;
        let start = scope.spawn(move || {
            common::serve::request(addr, "POST", "/v1/events/turn.start", &[], "{}").json()
        });
        common::open_gate(&gate);
        start.join().unwrap()
    });
    assert_eq!(start["context"], serde_json::json!([]), "{start}");
    common::wait_until("the post hook's output is discarded", || {
        fs::read_to_string(ws.state_dir().join("output/session.log"))
            .is_ok_and(|log| log.contains("said after the end"))
    });
    let start = server.post("/v1/events/turn.start", "{}").json();
    assert_eq!(start["context"], serde_json::json!([]), "{start}");
    server.stop();
}

/// A piped hook that failed or timed out reaches the agent announced, then its output, as
/// iteratr and nyzhi tell their agents.
#[test]
fn a_failed_or_timed_out_piped_hook_is_announced() {
    let ws = Workspace::new();
    yml(
        &ws,
        "a-broken",
        "event: tool.after\npipe_output: failure\nrun: echo 3 errors; exit 3",
    );
    yml(
        &ws,
        "b-slow",
        "event: tool.after\npipe_output: true\ntimeout: 1\nrun: echo half done; exec sleep 30",
    );
    let r = reply(&ws.hookvisor(&["fire", "tool.after", "--json"]));
    assert_eq!(
        r["context"],
        serde_json::json!([
            "hook a-broken failed with exit code 3:\n3 errors\n",
            "hook b-slow timed out after 1s:\nhalf done\n",
        ]),
        "{r}"
    );
}

/// AutoAgent's executor: after a `pre` hook blocks, the post pass sees `success: false` and
/// `error` = the reason, in its variables and its event JSON.
#[test]
fn a_blocked_pre_pass_hands_success_false_and_the_error_to_the_post_pass() {
    let ws = Workspace::new();
    yml(
        &ws,
        "a-pre",
        "event: task.complete\nrun: echo tests fail >&2; exit 2",
    );
    yml(
        &ws,
        "b-post",
        "event: task.complete\nphase: post\nrun: 'echo \"${success} ${error}\" >> trace; cat > post.json'",
    );
    let out = ws.hookvisor(&["fire", "task.complete", "--data", r#"{"success":true}"#]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(trace(&ws), ["false tests fail"]);
    let stdin: Value =
        serde_json::from_slice(&fs::read(ws.path().join("post.json")).unwrap()).unwrap();
    assert_eq!(stdin["data"]["success"], false, "{stdin}");
    assert_eq!(stdin["data"]["error"], "tests fail", "{stdin}");
}

/// The detached run is that hook alone: an unawaited hook of a refused `turn.start` does
/// not drain the buffer the refusal kept (as the event run again would, without the gate),
/// and a `post` one sees the firing's `${decision}`, not its own.
#[test]
fn a_detached_run_is_its_hook_alone() {
    let ws = Workspace::new();
    let gate = unawaited(&ws, "turn.start");
    let closed = ws.base().join("closed");
    yml(
        &ws,
        "zz-closed",
        &format!(
            "event: turn.start\nrun: 'if [ -e {} ]; then echo closed >&2; exit 2; fi'",
            closed.display()
        ),
    );
    yml(
        &ws,
        "err",
        "event: error\npipe_output: true\nrun: echo keep me",
    );
    yml(&ws, "no", "event: task.complete\nrun: echo no >&2; exit 2");
    yml(
        &ws,
        "post",
        "event: task.complete\nphase: post\nawait: false\nrun: echo ${decision} > post.out",
    );
    assert_eq!(code(&ws.hookvisor(&["fire", "error"])), 0);
    fs::write(&closed, "").unwrap();
    assert_eq!(code(&ws.hookvisor(&["fire", "turn.start"])), 1);
    recorded_after_the_reply(&ws, &gate);
    fs::remove_file(&closed).unwrap();
    let start = reply(&ws.hookvisor(&["fire", "turn.start", "--json"]));
    assert_eq!(
        start["context"],
        serde_json::json!(["keep me\n"]),
        "{start}"
    );
    // That turn.start detached the hook again: let it go too.
    common::open_gate(&gate);
    assert_eq!(code(&ws.hookvisor(&["fire", "task.complete"])), 1);
    let out = ws.path().join("post.out");
    common::wait_until("the post hook ran", || {
        fs::read_to_string(&out).is_ok_and(|t| t.ends_with('\n'))
    });
    assert_eq!(fs::read_to_string(&out).unwrap(), "block\n");
}

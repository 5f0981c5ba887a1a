//! Other tools' hook files read in place (docs/EVENTS.md §2.2), through the built binary: each
//! reference document's example in its own file name, fired as hookvisor fires events, with
//! hostile values that must stay one argument and never become shell text.

use crate::common;

use std::fs;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::{Output, Stdio};

use common::{Workspace, code, stderr, stdout};
use serde_json::{Value, json};

/// An executable script of the workspace.
fn script(ws: &Workspace, relative: &str, body: &str) {
    let path = ws.write(relative, &format!("#!/bin/sh\n{body}\n"));
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// The reply of `fire --json`.
fn reply(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {} {}", stdout(out), stderr(out)))
}

/// `hookvisor adapter claude` on `input`, its `@WORKSPACE@` made the workspace.
fn claude(ws: &Workspace, input: &Value) -> Output {
    let text = input
        .to_string()
        .replace("@WORKSPACE@", ws.path().to_str().unwrap());
    let mut child = ws
        .hookvisor_command()
        .args(["adapter", "claude"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run hookvisor adapter claude");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// A Claude Code fixture of tests/fixtures/claude, parsed.
fn fixture(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/claude")
        .join(name);
    serde_json::from_str(&fs::read_to_string(path).unwrap()).unwrap()
}

/// docs/upstream/iteratr-hooks.md, "Config Format", as its document writes it.
const ITERATR: &str =
    include_str!("../../../hookvisor-core/src/import/reference/iteratr.hooks.yml");

/// iteratr's `on_task_complete` gets `{{task_id}}` as one argument however hostile, and its
/// piped output reaches the next turn, as iteratr's pending buffer did.
#[test]
fn iteratr_task_ids_stay_one_argument_and_pipe_to_the_next_turn() {
    let ws = Workspace::new();
    ws.write(".iteratr.hooks.yml", ITERATR);
    script(
        &ws,
        "scripts/validate.sh",
        "printf '%s\\n' \"$#\" \"$1\" > args\necho \"validated $1\"",
    );
    let id = "t 1; touch pwned $(touch pwned2) `touch pwned3`";
    let data = json!({ "task_id": id }).to_string();
    let out = ws.hookvisor(&["fire", "task.complete", "--data", &data, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = reply(&out);
    assert_eq!(r["results"][0]["hookId"], "iteratr:on_task_complete:0");
    assert_eq!(
        fs::read_to_string(ws.path().join("args")).unwrap(),
        format!("1\n{id}\n")
    );
    for pwned in ["pwned", "pwned2", "pwned3"] {
        assert!(!ws.path().join(pwned).exists(), "{pwned} was created");
    }
    // The pending buffer is drained at the next iteration's start.
    let turn = reply(&ws.hookvisor(&["fire", "turn.start", "--json"]));
    let context = turn["context"].to_string();
    assert!(context.contains(&format!("validated {id}")), "{turn}");

    // `list --json` shows the entry where it is written (docs/EVENTS.md §5 rule 10).
    let list: Value = serde_json::from_slice(&ws.hookvisor(&["list", "--json"]).stdout).unwrap();
    let hook = list["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|h| h["id"] == "iteratr:on_task_complete:0")
        .unwrap_or_else(|| panic!("{list}"))
        .clone();
    assert_eq!(hook["source"], ".iteratr.hooks.yml:28");
    assert_eq!(hook["event"], "task.complete");
    assert_eq!(hook["blockOn"], "never");
    assert_eq!(hook["timeout"], 30);
    assert_eq!(list["hooks"].as_array().unwrap().len(), 7);
}

/// `check` names every problem as `file:line: reason`, warnings too, and says which sources
/// it read.
#[test]
fn check_reports_imported_problems_with_their_lines() {
    let ws = Workspace::new();
    let file = ws.write(
        ".iteratr.hooks.yml",
        "hooks:\n  pre_iteration:\n    - command: \"golangci-lint run ./...\"\n      timeout: 30\n  post_iteration:\n    - command: \"make\"\n      timeout: soon\n",
    );
    let nyzhi = ws.write(".nyzhi/config.toml", "[[agent.hooks]]\nevent = \n");
    let out = ws.hookvisor(&["check"]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    let text = stdout(&out);
    let lines: Vec<&str> = text.lines().collect();
    let at = |path: &Path, line: usize| format!("{}:{line}: ", path.display());
    assert!(
        lines[0].starts_with(&format!(
            "{}timeout: \"soon\" is no whole number of seconds",
            at(&file, 7)
        )),
        "{text}"
    );
    assert!(
        lines[1].starts_with(&format!("{}not TOML as nyzhi reads it", at(&nyzhi, 2))),
        "{text}"
    );
    assert!(
        lines[1].ends_with("the whole file is skipped until it parses"),
        "{text}"
    );
    assert!(
        lines[2].starts_with(&format!(
            "{}warning: pre_iteration without pipe_output",
            at(&file, 3)
        )),
        "{text}"
    );
    assert!(
        text.contains("source: iteratr used (.iteratr.hooks.yml: 1 hooks)"),
        "{text}"
    );
    assert!(text.contains("source: nyzhi skipped ("), "{text}");
}

/// nyzhi's `{file}` for a file named `a b$(touch x).rs` is one argument, and `x` never
/// appears: the file written by Claude's Write tool, through `hookvisor adapter claude`.
#[test]
fn nyzhi_file_placeholders_stay_one_argument() {
    let ws = Workspace::new();
    ws.write(
        ".nyzhi/config.toml",
        "[[agent.hooks]]\nevent = \"after_edit\"\ncommand = \"./fmt.sh {file}\"\npattern = \"*.rs\"\ntimeout = 30\n",
    );
    script(&ws, "fmt.sh", "printf '%s\\n' \"$#\" \"$1\" > args");
    let name = "a b$(touch x).rs";
    ws.write(name, "fn main() {}\n");
    let mut input = fixture("post-tool-use.json");
    input["tool_input"]["file_path"] = json!(format!("@WORKSPACE@/{name}"));
    input["tool_response"]["filePath"] = json!(format!("@WORKSPACE@/{name}"));
    let out = claude(&ws, &input);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(ws.path().join("args")).unwrap(),
        format!("1\n{name}\n")
    );
    assert!(
        !ws.path().join("x").exists(),
        "the file name ran as shell text"
    );

    // A file the pattern does not match runs nothing.
    fs::remove_file(ws.path().join("args")).unwrap();
    input["tool_input"]["file_path"] = json!("@WORKSPACE@/notes.txt");
    let out = claude(&ws, &input);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!ws.path().join("args").exists());
}

/// nyzhi's "Run tests before commits": `block = true` on `pre_tool` `git_commit` denies a
/// Claude PreToolUse whose Bash command is a `git commit`, with the hook's stderr as the
/// reason; other calls are allowed.
#[test]
fn nyzhi_blocking_pre_tool_git_commit_denies_claudes_commit() {
    let ws = Workspace::new();
    ws.write(
        ".nyzhi/config.toml",
        "[[agent.hooks]]\nevent = \"pre_tool\"\ntool_name = \"git_commit\"\ncommand = \"./test.sh\"\nblock = true\ntimeout = 120\n",
    );
    script(&ws, "test.sh", "echo '2 tests failed' >&2\nexit 1");
    let mut input = fixture("pre-tool-use.json");
    input["tool_input"]["command"] = json!("git commit -m 'add auth'");
    let out = claude(&ws, &input);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let answer: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    assert_eq!(
        answer,
        json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "deny",
            "permissionDecisionReason": "2 tests failed",
        }})
    );
    input["tool_input"]["command"] = json!("git status");
    let out = claude(&ws, &input);
    assert_eq!((code(&out), stdout(&out)), (0, String::new()));
}

/// docs/upstream/autoagent-hooks-design.md, `.autoagent/hooks/validate-execution.sh`.
const VALIDATE: &str = r#"#!/bin/bash
# Validates execution output before marking complete

INPUT=$(cat)
SUCCESS=$(echo "$INPUT" | jq -r '.success')
FILES_MODIFIED=$(echo "$INPUT" | jq -r '.filesModified[]?')

# Only validate successful executions
if [ "$SUCCESS" != "true" ]; then
  exit 0
fi

# Check if tests were added/modified
if ! echo "$FILES_MODIFIED" | grep -q "\.test\." && ! echo "$FILES_MODIFIED" | grep -q "\.spec\."; then
  echo "ERROR: No test files were modified" >&2
  echo "Please add tests for the implemented functionality" >&2
  exit 2  # Block completion
fi

# Run linting
if ! npm run lint --silent; then
  echo "ERROR: Linting failed" >&2
  exit 2  # Block completion
fi

exit 0
"#;

/// AutoAgent's `PreExecutionEnd` hook, its document's script: exit 2 blocks `task.complete`
/// with stderr as the reason; the script reads AutoAgent's own JSON on stdin.
#[test]
fn autoagent_validate_execution_exit_2_blocks_with_stderr() {
    let ws = Workspace::new();
    ws.write(
        ".autoagent/config.json",
        r#"{
  "logLevel": "info",
  "hooks": {
    "PreExecutionEnd": [
      {
        "type": "command",
        "command": "bash .autoagent/hooks/validate-execution.sh",
        "blocking": true,
        "timeout": 60000
      }
    ],
    "PostExecutionEnd": [
      {
        "type": "command",
        "command": "cat > post-input.json; echo 'Issue {{issueNumber}}' > post-issue"
      }
    ]
  }
}"#,
    );
    ws.write(".autoagent/hooks/validate-execution.sh", VALIDATE);
    let data = json!({
        "issueNumber": 1,
        "issueTitle": "Implement user authentication",
        "success": true,
        "filesModified": ["src/auth.ts"],
    })
    .to_string();
    let out = ws.hookvisor(&[
        "--session",
        "s-1",
        "fire",
        "task.complete",
        "--data",
        &data,
        "--json",
    ]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let r = reply(&out);
    assert_eq!(r["decision"], "block");
    assert_eq!(
        r["reason"],
        "ERROR: No test files were modified\nPlease add tests for the implemented functionality"
    );
    // The Post hook ran after the decision, on AutoAgent's JSON.
    let input: Value =
        serde_json::from_slice(&fs::read(ws.path().join("post-input.json")).unwrap()).unwrap();
    assert_eq!(input["eventName"], "PostExecutionEnd");
    assert_eq!(input["sessionId"], "s-1");
    assert_eq!(input["workspace"], ws.path().to_str().unwrap());
    assert!(
        input["timestamp"].as_u64().unwrap() > 1_600_000_000_000,
        "{input}"
    );
    assert_eq!(input["issueTitle"], "Implement user authentication");
    assert_eq!(
        fs::read_to_string(ws.path().join("post-issue")).unwrap(),
        "Issue 1\n"
    );

    // With a test file the gate passes (the lint step finds no npm project and exits 2 too,
    // so the script's last branch is taken out of the workspace by a stub `npm`).
    script(&ws, "bin/npm", "exit 0");
    let path = format!(
        "{}:{}",
        ws.path().join("bin").display(),
        std::env::var("PATH").unwrap()
    );
    let data = json!({"success": true, "filesModified": ["src/auth.test.ts"], "issueNumber": 1})
        .to_string();
    let out = ws
        .hookvisor_command()
        .args(["fire", "task.complete", "--data", &data])
        .env("PATH", path)
        .output()
        .unwrap();
    assert_eq!(code(&out), 0, "{}", stderr(&out));
}

/// Under `hookvisor loop -- iteratr …` iteratr runs its own hooks: the loop's agent and every
/// discovery of it leave `.iteratr.hooks.yml` unread, and nyzhi's file is still read.
#[test]
fn the_loop_owner_runs_its_own_hooks() {
    let ws = Workspace::new();
    ws.write(
        ".iteratr.hooks.yml",
        "hooks:\n  session_start:\n    - command: \"echo iteratr >> trace\"\n",
    );
    ws.write(
        ".nyzhi/config.toml",
        "[[agent.hooks]]\nevent = \"session_start\"\ncommand = \"echo nyzhi >> trace\"\n",
    );
    // The agent is a program named iteratr, which asks hookvisor what it would run.
    let hookvisor = env!("CARGO_BIN_EXE_hookvisor");
    script(
        &ws,
        "bin/iteratr",
        &format!("'{hookvisor}' list --json > listed.json\ntouch \"$HOOKVISOR_DONE\""),
    );
    let agent = ws.path().join("bin/iteratr");
    let out = ws.hookvisor(&[
        "loop",
        "--max-iterations",
        "1",
        "--",
        agent.to_str().unwrap(),
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(ws.path().join("trace")).unwrap(),
        "nyzhi\n"
    );
    let listed: Value =
        serde_json::from_slice(&fs::read(ws.path().join("listed.json")).unwrap()).unwrap();
    let ids: Vec<&str> = listed["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["nyzhi:session_start:0"]);
    // Outside the loop both are read.
    let out = ws.hookvisor(&["fire", "session.start"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(ws.path().join("trace")).unwrap(),
        "nyzhi\niteratr\nnyzhi\n"
    );
}

/// docs/upstream/autoagent-hooks-design.md, `.autoagent/hooks/check-incomplete-todos.sh`.
const CHECK_TODOS: &str =
    include_str!("../../../hookvisor-core/src/import/reference/check-incomplete-todos.sh");

/// AutoAgent's `Stop` hook (docs/EVENTS.md §5 rule 13: `session.stop`, pre): its JSON decision
/// keeps the session going while TODO.md has open items, and lets it stop once none is left.
#[test]
fn autoagent_stop_hook_blocks_while_todos_are_open() {
    let ws = Workspace::new();
    ws.write(
        ".autoagent/config.json",
        r#"{"hooks": {"Stop": [{"type": "command", "command": "bash .autoagent/hooks/check-incomplete-todos.sh"}]}}"#,
    );
    ws.write(".autoagent/hooks/check-incomplete-todos.sh", CHECK_TODOS);
    ws.write("TODO.md", "- [x] login\n- [ ] logout\n- [ ] reset\n");
    let out = ws.hookvisor(&["fire", "session.stop", "--json"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    let r = reply(&out);
    assert_eq!(r["decision"], "block");
    assert_eq!(
        r["reason"],
        "There are 2 incomplete todos remaining. Please complete them or mark this as intentional."
    );
    assert_eq!(r["results"][0]["hookId"], "autoagent:Stop:0");
    ws.write("TODO.md", "- [x] login\n- [x] logout\n- [x] reset\n");
    let out = ws.hookvisor(&["fire", "session.stop", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(reply(&out)["decision"], "allow");
}

/// AutoAgent throws when `PreExecutionStart` blocks, so `PostExecutionStart` never runs then
/// (docs/EVENTS.md §2.2: `when: ${decision} == 'allow'`); it runs when execution starts.
#[test]
fn autoagent_post_execution_start_runs_only_when_started() {
    let ws = Workspace::new();
    ws.write(
        ".autoagent/config.json",
        r#"{"hooks": {
  "PreExecutionStart": [{"type": "command", "command": "test -e ready || { echo not ready >&2; exit 2; }"}],
  "PostExecutionStart": [{"type": "command", "command": "echo 'started {{issueNumber}}' >> trace"}]
}}"#,
    );
    let data = json!({"issueNumber": 7}).to_string();
    let out = ws.hookvisor(&["fire", "task.start", "--data", &data, "--json"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(reply(&out)["reason"], "not ready");
    assert!(
        !ws.path().join("trace").exists(),
        "a Post hook ran after a block"
    );
    ws.write("ready", "");
    let out = ws.hookvisor(&["fire", "task.start", "--data", &data]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(ws.path().join("trace")).unwrap(),
        "started 7\n"
    );
}

/// iteratr's lifecycle ("Hook Lifecycle & Timing") under `hookvisor loop` with another agent:
/// `session_start` output piped to the first iteration, `pre_iteration` to its own, a task the
/// agent completes and `post_iteration` to the next, `session_end` last.
#[test]
fn iteratr_hooks_follow_its_lifecycle_under_hookvisor_loop() {
    let ws = Workspace::new();
    ws.write(
        ".iteratr.hooks.yml",
        r#"hooks:
  session_start:
    - command: "echo built {{session}}"
      pipe_output: true
  pre_iteration:
    - command: "echo lint {{iteration}}"
      pipe_output: true
  post_iteration:
    - command: "echo tested {{iteration}}"
      pipe_output: true
  on_task_complete:
    - command: "echo validated {{task_id}}: {{task_content}}"
      pipe_output: true
  session_end:
    - command: "echo end >> trace"
"#,
    );
    let hookvisor = env!("CARGO_BIN_EXE_hookvisor");
    script(
        &ws,
        "agent.sh",
        &format!(
            "cat > \"prompt-$HOOKVISOR_ITERATION\"\n\
             if [ \"$HOOKVISOR_ITERATION\" = 1 ]; then\n\
               '{hookvisor}' fire task.complete --data '{{\"task_id\": \"T-1\", \"task_content\": \"add login\"}}'\n\
             else\n  touch \"$HOOKVISOR_DONE\"\nfi"
        ),
    );
    let out = ws.hookvisor(&[
        "--session",
        "s-7",
        "loop",
        "--max-iterations",
        "3",
        "--prompt",
        "do the task",
        "--",
        "./agent.sh",
    ]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let prompt = |i: u32| fs::read_to_string(ws.path().join(format!("prompt-{i}"))).unwrap();
    assert_eq!(prompt(1), "built s-7\nlint 1\n\ndo the task\n");
    assert_eq!(
        prompt(2),
        "validated T-1: add login\ntested 1\nlint 2\n\ndo the task\n"
    );
    // The final delivery: what the last post_iteration piped, alone (iteratr's pending
    // buffer; no pre_iteration, no task prompt).
    assert_eq!(prompt(3), "tested 2\n");
    assert!(!ws.path().join("prompt-4").exists());
    assert_eq!(
        fs::read_to_string(ws.path().join("trace")).unwrap(),
        "end\n"
    );
}

/// nyzhi's "Run clippy after each turn" without `block`: a failure does not stop Claude, and
/// its output reaches the model with the next prompt ("Results are reported back to the
/// agent so it can react to failures").
#[test]
fn nyzhi_after_turn_failures_reach_the_next_prompt_without_blocking() {
    let ws = Workspace::git();
    ws.write(
        ".nyzhi/config.toml",
        "[[agent.hooks]]\nevent = \"after_turn\"\ncommand = \"./clippy.sh\"\ntimeout = 60\n",
    );
    script(
        &ws,
        "clippy.sh",
        "echo 'warning: unused variable `x`' >&2\nexit 1",
    );
    let out = claude(&ws, &fixture("stop.json"));
    assert_eq!(
        (code(&out), stdout(&out)),
        (0, String::new()),
        "{}",
        stderr(&out)
    );
    let out = claude(&ws, &fixture("user-prompt-submit.json"));
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let answer: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    let context = answer["hookSpecificOutput"]["additionalContext"]
        .as_str()
        .unwrap_or_else(|| panic!("{answer}"));
    assert!(context.contains("warning: unused variable `x`"), "{answer}");
}

// ---- agent-pipelines (issue 19, i19-pipelines): `pipeline.yaml`, `loop.yaml` and
// `~/.config/agent-pipelines/hooks.yaml` read in place. Kept together at the end of the file.

/// The user's agent-pipelines `hooks.yaml` in the workspace's private home.
fn pipelines_global(ws: &Workspace, text: &str) {
    let path = ws.base().join("home/.config/agent-pipelines/hooks.yaml");
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// A shell hook's `${CHANGED_FILES}` and `${ITERATION}` are template references, quoted by
/// the `run:` rewrite so that a hostile file name stays one argument and never shell text, and
/// the script also reads agent-pipelines' names from its environment.
#[test]
fn pipelines_shell_names_are_references_and_exported_variables() {
    let ws = Workspace::new();
    ws.write(
        "pipeline.yaml",
        "name: full-workflow\nstages:\n  - name: work\n    loop: work\n\nhooks:\n  on_error:\n    \
         - type: shell\n      command: \"./show.sh ${CHANGED_FILES} ${ITERATION}\"\n      \
         await: true\n",
    );
    script(
        &ws,
        "show.sh",
        "printf '%s\\n' \"$#\" \"$1\" \"$2\" \"$CHANGED_FILES\" \"$ITERATION\" \"$ERROR\" > args",
    );
    let hostile = "a b; touch pwned $(touch pwned2).txt";
    let data = json!({ "files": [hostile], "iteration": 7, "error": "boom" }).to_string();
    let out = ws.hookvisor(&["fire", "error", "--data", &data, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let r = reply(&out);
    assert_eq!(r["results"][0]["hookId"], "pipelines:on_error:0", "{r}");
    assert_eq!(r["results"][0]["exitCode"], 0, "{r}");
    assert_eq!(
        fs::read_to_string(ws.path().join("args")).unwrap(),
        format!("2\n{hostile}\n7\n{hostile}\n7\nboom\n")
    );
    for pwned in ["pwned", "pwned2"] {
        assert!(!ws.path().join(pwned).exists(), "{pwned} was created");
    }
    let list: Value = serde_json::from_slice(&ws.hookvisor(&["list", "--json"]).stdout).unwrap();
    let hook = &list["hooks"][0];
    assert_eq!(hook["id"], "pipelines:on_error:0", "{list}");
    assert_eq!(hook["source"], "pipeline.yaml:8");
    assert_eq!(hook["blockOn"], "never");
    assert_eq!(hook["timeout"], 300);
}

/// Pattern 4 ("Quality Gate with Fallback"): `${LAST_HOOK_STATUS}` is the previous action's
/// result in agent-pipelines' words, so the fallback runs after a failure only.
#[test]
fn pipelines_last_hook_status_follows_the_previous_action() {
    let ws = Workspace::new();
    let file = |first: &str| {
        format!(
            "hooks:\n  on_error:\n    - type: shell\n      command: \"{first}\"\n      \
             await: true\n    - type: shell\n      command: \"echo $LAST_HOOK_STATUS >> trace\"\n      \
             await: true\n      when: \"${{LAST_HOOK_STATUS}} == 'failed'\"\n"
        )
    };
    ws.write("loop.yaml", &file("exit 3"));
    let out = ws.hookvisor(&["fire", "error", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(ws.path().join("trace")).unwrap(),
        "failed\n"
    );
    ws.write("loop.yaml", &file("true"));
    let r = reply(&ws.hookvisor(&["fire", "error", "--json"]));
    assert_eq!(r["results"].as_array().unwrap().len(), 1, "{r}");
    assert_eq!(
        fs::read_to_string(ws.path().join("trace")).unwrap(),
        "failed\n"
    );
}

/// `disable_global_hooks: true` in a pipeline's file turns off both global kinds: the user's
/// agent-pipelines `hooks.yaml` and hookvisor's global hooks (docs/EVENTS.md §5 rule 7).
#[test]
fn pipelines_disable_global_hooks_turns_off_both_global_kinds() {
    let ws = Workspace::new();
    // Awaited, so that they run in the pre pass with the global hook, in rule 7's order.
    let append = |what: &str| {
        format!(
            "hooks:\n  on_error:\n    - type: shell\n      command: \"echo {what} >> trace\"\n      \
             await: true\n"
        )
    };
    ws.write("pipeline.yaml", &append("workspace"));
    pipelines_global(&ws, &append("pipelines-global"));
    fs::write(
        ws.global_hooks().join("g.yml"),
        "---\nevent: error\nrun: echo hookvisor-global >> trace\n---\n",
    )
    .unwrap();
    let trace = || {
        let text = fs::read_to_string(ws.path().join("trace")).unwrap_or_default();
        fs::remove_file(ws.path().join("trace")).ok();
        text
    };
    let out = ws.hookvisor(&["fire", "error"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(trace(), "workspace\npipelines-global\nhookvisor-global\n");

    ws.write(
        "pipeline.yaml",
        &format!("disable_global_hooks: true\n{}", append("workspace")),
    );
    let out = ws.hookvisor(&["fire", "error"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(trace(), "workspace\n");
    let check = ws.hookvisor(&["check"]);
    let text = format!("{}{}", stdout(&check), stderr(&check));
    assert!(text.contains("off (disable_global_hooks)"), "{text}");
}

/// "Conditions", every 10 iterations: the spawn runs its child pipeline on iteration 10 and
/// not on 9 (`${ITERATION} % 10 == 0` through the `when:` grammar's `%`).
#[test]
fn pipelines_spawn_every_tenth_iteration_runs_on_10_not_9() {
    let ws = Workspace::git();
    let marker = ws.base().join("spawned");
    let agent = ws.base().join("agent.sh");
    fs::write(
        &agent,
        format!(
            "#!/bin/sh\necho \"$(cat \"$HOOKVISOR_INPUTS\")\" >> '{}'\ntouch \"$HOOKVISOR_DONE\"\n",
            marker.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&agent, fs::Permissions::from_mode(0o755)).unwrap();
    ws.write(
        ".discobot/pipelines/code-review.yml",
        &format!("agent: [{}]\nmax_iterations: 1\n", agent.display()),
    );
    ws.write(
        "loop.yaml",
        "hooks:\n  on_iteration_complete:\n    # Every 10 iterations\n    - type: spawn\n      \
         pipeline: code-review\n      inputs:\n        iteration: \"${ITERATION}\"\n      \
         when: \"${ITERATION} % 10 == 0\"\n",
    );
    let fire = |iteration: u64| {
        let data = json!({ "iteration": iteration }).to_string();
        let out = ws.hookvisor(&["fire", "turn.end", "--data", &data, "--json"]);
        assert_eq!(code(&out), 0, "{}", stderr(&out));
        reply(&out)
    };
    let nine = fire(9);
    assert_eq!(nine["results"].as_array().unwrap().len(), 0, "{nine}");
    assert!(!marker.exists(), "spawned on iteration 9");
    let ten = fire(10);
    assert_eq!(
        ten["results"][0]["hookId"],
        "pipelines:on_iteration_complete:0"
    );
    assert_eq!(ten["results"][0]["exitCode"], 0, "{ten}");
    // Inputs keep their JSON types (docs/EVENTS.md §5 rule 23): the iteration is a number.
    let inputs: Value = serde_json::from_str(&fs::read_to_string(&marker).unwrap()).unwrap();
    assert_eq!(inputs, json!({ "iteration": 10 }));
}

/// `check` names what will not run as `file:line: reason`: a condition outside the `when:`
/// grammar is a problem of its line, never a hook that runs always or never; a file that
/// does not parse is skipped whole with one problem.
#[test]
fn pipelines_problems_name_their_lines_in_check() {
    let ws = Workspace::new();
    let pipeline = ws.write(
        "pipeline.yaml",
        "hooks:\n  on_iteration_complete:\n    - type: shell\n      command: ./ok.sh\n    \
         - type: shell\n      command: ./x.sh\n      when: \"${ITERATION} =~ 10\"\n    \
         - type: notify\n",
    );
    let stage = ws.write("loop.yaml", "hooks:\n  on_error: [\n");
    let out = ws.hookvisor(&["check"]);
    assert_eq!(code(&out), 1, "{}", stdout(&out));
    let text = stdout(&out);
    let at = |path: &Path, line: usize| format!("{}:{line}: ", path.display());
    for want in [
        format!("{}when: expected '==' at column 14", at(&pipeline, 7)),
        format!("{}unknown action type 'notify'", at(&pipeline, 8)),
    ] {
        assert!(text.lines().any(|l| l.starts_with(&want)), "{want}\n{text}");
    }
    assert!(
        text.lines()
            .any(|l| l.starts_with(&stage.display().to_string())
                && l.ends_with("the whole file is skipped until it parses")),
        "{text}"
    );
    // The broken stage file skips the source whole: ok.sh does not run either.
    assert!(text.contains("source: pipelines skipped ("), "{text}");
}

/// `check` warns about a `${name}` no event of the hook sets, by one rule for every hook: the
/// loop's variables (`${MAX_ITERATIONS}`, `${PROGRESS}`, `${STATUS}`, `${CTX}`) are set for the
/// loop's events and pass there, but not on a tool call; a tool's name not at a turn end.
#[test]
fn check_warns_about_a_variable_the_hooks_event_does_not_set() {
    let ws = Workspace::new();
    let pipeline = ws.write(
        "pipeline.yaml",
        "hooks:\n  on_iteration_complete:\n    - type: shell\n      command: \"echo ${MAX_ITERATIONS} ${PROGRESS} ${STATUS} ${CTX}\"\n",
    );
    ws.write(
        ".discobot/hooks/guard.yml",
        "---\nevent: tool.before\nrun: echo ${max_iterations}\n---\n",
    );
    ws.write(
        ".discobot/hooks/lint.yml",
        "---\nevent: turn.end\nrun: echo ${progress} ${tool_name}\n---\n",
    );
    let out = ws.hookvisor(&["check"]);
    let text = stdout(&out) + &stderr(&out);
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with(&pipeline.display().to_string())),
        "{text}"
    );
    let warned = |file: &str, name: &str| {
        text.lines().any(|l| {
            l.contains(file) && l.contains(&format!("${{{name}}} is no variable hookvisor sets"))
        })
    };
    assert!(warned("guard.yml", "max_iterations"), "{text}");
    assert!(warned("lint.yml", "tool_name"), "{text}");
    assert!(!warned("lint.yml", "progress"), "{text}");
}

/// Serves one webhook on 127.0.0.1: answers it 200, then GETs the URL `pick` takes from its
/// JSON body, as a person pressing a button in a chat would. Joining gives the body.
fn pipelines_receiver(
    pick: impl FnOnce(&Value) -> String + Send + 'static,
) -> (u16, std::thread::JoinHandle<Value>) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = std::thread::spawn(move || {
        let (mut stream, request) = hookvisor_testkit::http::accept_request(&listener);
        let body = request.body;
        stream
            .write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            .unwrap();
        drop(stream);
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(hookvisor_testkit::http::call_back(&pick(&body), ""), 200);
        body
    });
    (port, handle)
}

/// Pattern 2, "Human Approval Gate", as the document writes it: the webhook sends
/// `${CALLBACK_URL}?action=…` buttons and waits; Reject aborts the event, Approve lets it
/// pass, and a stage other than `plan` sends nothing.
#[test]
fn pipelines_human_approval_gate_waits_for_its_callback() {
    let ws = Workspace::new();
    ws.write(
        "pipeline.yaml",
        include_str!("../../../hookvisor-core/src/import/reference/pipelines.approval-gate.yaml"),
    );
    let fire = |button: usize, stage: &str| {
        let (port, received) = pipelines_receiver(move |body| {
            body["blocks"][0]["elements"][button]["url"]
                .as_str()
                .unwrap()
                .to_owned()
        });
        let data = json!({ "stage": stage }).to_string();
        let out = ws
            .hookvisor_command()
            .args(["fire", "stage.complete", "--json", "--data", &data])
            .env("SLACK_WEBHOOK", format!("http://127.0.0.1:{port}/hook"))
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (out, received)
    };
    let (out, received) = fire(1, "plan");
    assert_eq!(code(&out), 3, "{}{}", stdout(&out), stderr(&out));
    assert_eq!(reply(&out)["decision"], "abort");
    let body = received.join().unwrap();
    assert_eq!(body["text"], "Plan ready for default", "{body}");

    let (out, received) = fire(0, "plan");
    assert_eq!(code(&out), 0, "{}{}", stdout(&out), stderr(&out));
    assert_eq!(reply(&out)["results"][0]["success"], true);
    received.join().unwrap();

    // `when:` false: the hook runs nothing, so it needs no receiver.
    let data = json!({ "stage": "work" }).to_string();
    let out = ws.hookvisor(&["fire", "stage.complete", "--json", "--data", &data]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(reply(&out)["results"].as_array().unwrap().len(), 0);
}

/// Import review F1: a placeholder inside single quotes of a command that may run that text
/// (`sh -c '…'`) is a problem and the hook does not run, so a hostile value never becomes
/// code; inside `echo '…'` it stays text.
#[test]
fn a_single_quoted_placeholder_reaches_no_inner_shell() {
    let ws = Workspace::new();
    ws.write(
        ".iteratr.hooks.yml",
        "version: 1\nhooks:\n  on_error:\n    - command: \"sh -c 'echo got {{error}}' >> trace\"\n    - command: \"echo 'said {{error}}' >> trace\"\n",
    );
    let check = ws.hookvisor(&["check"]);
    let text = String::from_utf8_lossy(&check.stderr).into_owned()
        + &String::from_utf8_lossy(&check.stdout);
    assert!(
        text.contains(".iteratr.hooks.yml:4: the placeholder of 'error' is inside"),
        "{text}"
    );
    let data = json!({"error": "boom; touch PWNED"}).to_string();
    let out = ws.hookvisor(&["fire", "error", "--data", &data, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!ws.path().join("PWNED").exists(), "the value ran as code");
    assert_eq!(
        fs::read_to_string(ws.path().join("trace")).unwrap(),
        "said boom; touch PWNED\n"
    );
}

/// Issue 28: a placeholder inside the double quotes of a `sh -c`/`bash -c` script, which the
/// inner shell parses again, is refused at load with the source file's line and the safe
/// form: iteratr's `sh -c "echo failed {{error}}"` fired with `$(touch PWNED)`, and nyzhi's
/// `bash -c "wc -l {file}"` after Claude writes a file named `a.rs;touch X;#`, run nothing of
/// the value; `hookvisor import` leaves both entries in place with the same reason.
#[test]
fn a_placeholder_in_a_nested_shell_script_is_refused_and_runs_nothing() {
    let ws = Workspace::new();
    ws.write(
        ".iteratr.hooks.yml",
        "version: 1\nhooks:\n  on_error:\n    - command: \"sh -c \\\"echo failed {{error}}\\\" >> trace\"\n    - command: \"sh -c 'echo said \\\"$1\\\" >> trace' _ {{error}}\"\n",
    );
    ws.write(
        ".nyzhi/config.toml",
        "[[agent.hooks]]\nevent = \"after_edit\"\ncommand = \"bash -c \\\"wc -l {file}\\\" > wc.out\"\npattern = \"*.rs\"\n",
    );
    let check = ws.hookvisor(&["check"]);
    assert_eq!(code(&check), 1, "{}", stdout(&check));
    let text = stdout(&check);
    let iteratr = ws.path().join(".iteratr.hooks.yml");
    let nyzhi = ws.path().join(".nyzhi/config.toml");
    for (path, line, shell, name) in [(&iteratr, 4, "sh", "error"), (&nyzhi, 3, "bash", "file")] {
        let want = format!("{}:{line}: command: line 1, column ", path.display());
        let fix = format!("`{shell} -c '… \"$1\"' _ ${{{name}}}`");
        assert!(
            text.lines()
                .any(|l| l.starts_with(&want) && l.contains(&fix)),
            "{want} … {fix}: {text}"
        );
    }

    let data = json!({"error": "$(touch PWNED)"}).to_string();
    let out = ws.hookvisor(&["fire", "error", "--data", &data, "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!ws.path().join("PWNED").exists(), "the value ran as code");
    // The safe positional form, accepted, passes it verbatim.
    assert_eq!(
        fs::read_to_string(ws.path().join("trace")).unwrap(),
        "said $(touch PWNED)\n"
    );

    let name = "a.rs;touch X;#";
    ws.write(name, "fn main() {}\n");
    let mut input = fixture("post-tool-use.json");
    input["tool_input"]["file_path"] = json!(format!("@WORKSPACE@/{name}"));
    input["tool_response"]["filePath"] = json!(format!("@WORKSPACE@/{name}"));
    let out = claude(&ws, &input);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!ws.path().join("X").exists(), "the file name ran as code");

    let import = ws.hookvisor(&["import", "--print"]);
    assert_eq!(code(&import), 1, "{}", stderr(&import));
    for (file, line) in [(".iteratr.hooks.yml", 4), (".nyzhi/config.toml", 3)] {
        let want = format!("{file}:{line}: left in place, not converted: command: line 1");
        assert!(
            stderr(&import).contains(&want),
            "{want}: {}",
            stderr(&import)
        );
    }
    assert!(
        !stdout(&import).contains("failed ${error}"),
        "{}",
        stdout(&import)
    );
}

/// Import review F4: the owner is found through a wrapper (`env A=1 iteratr`), so iteratr's
/// hooks do not run twice; an `--owner` no tool has is a usage error, not a silent no-op.
#[test]
fn the_loop_owner_is_found_through_a_wrapper_and_a_wrong_owner_is_refused() {
    let ws = Workspace::new();
    ws.write(
        ".iteratr.hooks.yml",
        "hooks:\n  session_start:\n    - command: \"echo iteratr >> trace\"\n",
    );
    script(&ws, "bin/iteratr", "touch \"$HOOKVISOR_DONE\"");
    let agent = ws.path().join("bin/iteratr");
    let agent = agent.to_str().unwrap();
    let out = ws.hookvisor(&["loop", "--max-iterations", "1", "--", "env", "A=1", agent]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        !ws.path().join("trace").exists(),
        "iteratr's hook ran under hookvisor too"
    );

    let out = ws.hookvisor(&["loop", "--owner", "iteratrr", "--", agent]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("'iteratrr' is no tool"),
        "{}",
        stderr(&out)
    );
}

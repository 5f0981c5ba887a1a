//! Other tools' hook files read in place (docs/EVENTS.md §2.2) proved end to end: each reference
//! document's own hooks under `hookvisor loop` driving the scripted fake agent of
//! `fixtures/loop/agent.sh` (no LLM), in a real git repository where they commit, and `serve`'s
//! dashboard following edits of those files.

use crate::common;

use std::fs;
use std::time::Instant;

use common::serve::{DEADLINE, Server};
use common::{Workspace, code, stderr};
use serde_json::Value;

use common::fake_agent::FakeAgent as Fixture;

/// docs/upstream/autoagent-hooks-design.md, `.autoagent/hooks/check-incomplete-todos.sh`, as its
/// document writes it.
const CHECK_TODOS: &str =
    include_str!("../../../hookvisor-core/src/import/reference/check-incomplete-todos.sh");

/// AutoAgent's Stop hook keeps `loop` going while TODO.md has open items: the agent says it is
/// done after checking off one of two, is sent back with the hook's reason, and the loop ends
/// once it has checked off the other.
#[test]
fn autoagents_todo_stop_hook_keeps_the_loop_going_until_the_todos_are_done() {
    let f = Fixture::new(Workspace::new());
    f.ws.write(
        ".autoagent/config.json",
        r#"{"hooks": {"Stop": [
  {"type": "command", "command": "bash .autoagent/hooks/check-incomplete-todos.sh"},
  {"type": "command", "command": "cat > stop-input.json"}
]}}"#,
    );
    f.ws.write(".autoagent/hooks/check-incomplete-todos.sh", CHECK_TODOS);
    f.ws.write("TODO.md", "- [ ] login\n- [ ] logout\n");
    f.step(
        "1",
        "printf -- '- [x] login\\n- [ ] logout\\n' > TODO.md; touch \"$HOOKVISOR_DONE\"",
    );
    f.step(
        "2",
        "printf -- '- [x] login\\n- [x] logout\\n' > TODO.md; touch \"$HOOKVISOR_DONE\"",
    );
    let out = f.run(&["--max-iterations", "5", "--prompt", "Work through TODO.md."]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(f.prompt(1), "Work through TODO.md.\n");
    assert_eq!(
        f.prompt(2),
        "There are 1 incomplete todos remaining. Please complete them or mark this as \
         intentional.\n\nWork through TODO.md.\n"
    );
    // Nothing piped, no block left: no final delivery after the allowed stop.
    assert_eq!(f.iterations(), 2);
    assert_eq!(f.session()["reason"], "done");
    assert_eq!(
        f.ws.status()["hooks"]["autoagent:Stop:0"]["lastResult"],
        "success",
        "{}",
        f.ws.status()
    );
    // The hook read AutoAgent's own input (its script takes `.sessionId` with jq): the loop's
    // session, from the last, allowed stop.
    let input: Value =
        serde_json::from_slice(&fs::read(f.ws.path().join("stop-input.json")).unwrap()).unwrap();
    assert_eq!(input["eventName"], "Stop", "{input}");
    assert_eq!(input["reason"], "completed", "{input}");
    assert_eq!(input["sessionId"], f.session()["id"], "{input}");
    assert_eq!(input["workspace"], f.ws.path().to_str().unwrap(), "{input}");
}

/// AutoAgent's `set-auto-commit true` hook: `git-commit` on `PostExecutionEnd`. The agent
/// reports its issue done (`fire task.complete`, AutoAgent's execution end) after changing a
/// file, and the commit is there with the configured message; reporting again with nothing
/// changed is a success that makes no commit.
#[test]
fn autoagents_git_commit_hook_commits_the_agents_work_under_loop() {
    let f = Fixture::new(Workspace::git());
    f.ws.write(
        ".autoagent/config.json",
        r#"{
  "gitAutoCommit": false,
  "hooks": {
    "PostExecutionEnd": [
      {
        "type": "git-commit",
        "message": "Complete issue #{{issueNumber}}: {{issueTitle}}"
      }
    ]
  }
}"#,
    );
    f.ws.git_ok(&["config", "user.name", "Agent"]);
    f.ws.git_ok(&["config", "user.email", "agent@example.com"]);
    f.ws.git_ok(&["add", "-A"]);
    f.ws.git_ok(&["commit", "-q", "-m", "initial"]);
    let report = r#""$HOOKVISOR_BIN" fire task.complete --data '{"issueNumber": 1, "issueTitle": "Implement user authentication; $(touch pwned)"}' >> "$FAKE_DIR/fired"; echo "exit $?" >> "$FAKE_DIR/fired""#;
    f.step(
        "1",
        &format!("mkdir -p src; echo 'export const login = 1;' > src/auth.ts\n{report}"),
    );
    f.step("2", &format!("{report}\ntouch \"$HOOKVISOR_DONE\""));
    let out = f.run(&["--max-iterations", "3"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(f.fake.join("fired")).unwrap(),
        "exit 0\nexit 0\n"
    );
    let log = f.ws.git_ok(&["log", "--format=%s%x00%an", "main"]);
    assert_eq!(
        log,
        "Complete issue #1: Implement user authentication; $(touch pwned)\0Agent\ninitial\0Test\n"
    );
    assert_eq!(
        f.ws.git_ok(&["show", "--name-only", "--format=", "HEAD"]),
        "src/auth.ts\n"
    );
    assert!(!f.ws.path().join("pwned").exists());
    assert_eq!(f.ws.git_ok(&["status", "--porcelain"]), "");
    let hook = &f.ws.status()["hooks"]["autoagent:PostExecutionEnd:0"];
    assert_eq!(hook["lastResult"], "success", "{hook}");
}

/// iteratr's `post_iteration` with `pipe_output: true` ("Agent sees failures next iteration"):
/// what twelve hooks print, a failing test run's included, reaches the next prompt in the
/// file's order (FIFO: `-0 … -11`, never `-0 -1 -10 -11 -2`), a failure blocks nothing, and
/// what the last iteration's hooks piped is iteratr's final delivery: the pending buffer
/// alone, no `pre_iteration` run again, no task prompt, no `post_iteration` after it.
#[test]
fn iteratr_post_iteration_output_reaches_the_next_prompt_in_order_and_is_finally_delivered() {
    let f = Fixture::new(Workspace::new());
    let mut config = String::from(
        r#"version: 1

hooks:
  pre_iteration:
    - command: "echo 'lint {{iteration}}' >> trace"
  post_iteration:
    - command: "echo \"FAIL: TestLogin (iteration {{iteration}})\"; exit 1"
      timeout: 120
      pipe_output: true  # Agent sees failures next iteration
"#,
    );
    for n in 1..12 {
        config.push_str(&format!(
            "    - command: \"echo 'check {n} of {{{{iteration}}}}'\"\n      pipe_output: true\n"
        ));
    }
    config.push_str("    - command: \"echo 'post {{iteration}}' >> trace\"\n");
    f.ws.write(".iteratr.hooks.yml", &config);
    f.step("2", "touch \"$HOOKVISOR_DONE\"");
    let out = f.run(&["--max-iterations", "5", "--prompt", "Fix the tests."]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    // The failing hook is announced by its id: in place, then as `import` named its file.
    let piped = |id: &str, i: u64| {
        let mut text =
            format!("hook {id} failed with exit code 1:\nFAIL: TestLogin (iteration {i})\n");
        for n in 1..12 {
            text.push_str(&format!("check {n} of {i}\n"));
        }
        text
    };
    assert_eq!(f.prompt(1), "Fix the tests.\n");
    assert_eq!(
        f.prompt(2),
        format!("{}\nFix the tests.\n", piped("iteratr:post_iteration:0", 1))
    );
    // The final delivery: the pending buffer only.
    assert_eq!(f.prompt(3), piped("iteratr:post_iteration:0", 2));
    assert_eq!(f.iterations(), 3);
    assert_eq!(f.session()["reason"], "done");
    assert_eq!(f.trace(), ["lint 1", "post 1", "lint 2", "post 2"]);
    assert!(!stderr(&out).contains("discarded"), "{}", stderr(&out));

    // Moved over by `import`, the entries keep their order: the files sort as they ran.
    let out = f.ws.hookvisor(&["import", "iteratr", "--write"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut names: Vec<String> = fs::read_dir(f.ws.path().join(".discobot/hooks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("iteratr-post_iteration-"))
        .collect();
    names.sort();
    let expected: Vec<String> = (0..13)
        .map(|n| format!("iteratr-post_iteration-{n:02}.yml"))
        .collect();
    assert_eq!(names, expected);
    fs::remove_dir_all(&f.fake).unwrap();
    fs::create_dir(&f.fake).unwrap();
    fs::remove_file(f.ws.path().join("trace")).unwrap();
    f.step("1", "touch \"$HOOKVISOR_DONE\"");
    let out = f.run(&["--max-iterations", "2", "--prompt", "Again."]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(f.prompt(2), piped("iteratr-post_iteration-00", 1));
    assert_eq!(f.trace(), ["lint 1", "post 1"]);
}

/// iteratr's `on_error` with `pipe_output: true` ("Show agent changes before error"): when the
/// agent fails, its output is the recovery prompt of the next iteration, in place of the task
/// prompt for that one only, with `{{error}}` (the agent's last lines, hostile here) one value
/// that never becomes shell text.
#[test]
fn iteratrs_on_error_output_is_the_next_iterations_recovery_prompt() {
    let f = Fixture::new(Workspace::new());
    f.ws.write(
        ".iteratr.hooks.yml",
        r#"hooks:
  on_error:
    - command: "printf 'recover from: %s\n' {{error}}"
      timeout: 10
      pipe_output: true  # Show agent changes before error
"#,
    );
    f.step("1", "echo 'panic: $(touch pwned) `touch pwned2`'; exit 3");
    f.step("2", "touch \"$HOOKVISOR_DONE\"");
    let out = f.run(&["--max-iterations", "4", "--prompt", "Ship it."]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        f.prompt(2),
        "recover from: panic: $(touch pwned) `touch pwned2`\n"
    );
    for pwned in ["pwned", "pwned2"] {
        assert!(!f.ws.path().join(pwned).exists(), "{pwned} was created");
    }
    assert_eq!(f.iterations(), 2);
}

/// nyzhi's "Run clippy after each turn" without `block` under `loop`: its failure blocks
/// nothing, and its output (stderr first, as nyzhi reads it) is in the next prompt.
#[test]
fn nyzhis_after_turn_failure_reaches_the_loops_next_prompt_without_blocking() {
    let f = Fixture::new(Workspace::git());
    f.ws.write(
        ".nyzhi/config.toml",
        "[[agent.hooks]]\nevent = \"after_turn\"\ncommand = \"test -e clean || { echo 'warning: unused variable `x`' >&2; exit 1; }\"\ntimeout = 60\n",
    );
    f.step("1", "echo 'let x = 1;' > lib.rs");
    f.step("2", "touch clean \"$HOOKVISOR_DONE\"");
    let out = f.run(&["--max-iterations", "4", "--prompt", "Tidy up."]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        f.prompt(2),
        "hook nyzhi:after_turn:0 failed with exit code 1:\nwarning: unused variable `x`\n\nTidy up.\n"
    );
    assert_eq!(f.iterations(), 2);
}

/// `serve` watches the other tools' files as it watches `.discobot`: iteratr's file made after
/// the start, then edited into a problem, AutoAgent's in a directory made after the start, and
/// nyzhi's user file, each change the hook list it serves; the problem says where as `check`'s reader would look
/// for it, relative to the workspace.
#[test]
fn serve_follows_edits_of_other_tools_files_and_places_their_problems_in_the_workspace() {
    let ws = Workspace::new();
    let server = Server::tcp(&ws);
    let mut events = server.events();
    let wait_for =
        |events: &mut common::serve::Events, what: &str, cond: &dyn Fn(&Value) -> bool| {
            let start = Instant::now();
            loop {
                let list = server.get("/v1/hooks").json();
                if cond(&list) {
                    return list;
                }
                assert!(start.elapsed() < DEADLINE, "{what}: {list}");
                events.until(|name, _| name == "hooksChanged");
            }
        };
    let has_hook = |id: &'static str| {
        move |list: &Value| {
            list["hooks"]
                .as_array()
                .unwrap()
                .iter()
                .any(|h| h["id"] == id)
        }
    };

    ws.write(
        ".iteratr.hooks.yml",
        "hooks:\n  session_start:\n    - command: \"echo hi\"\n",
    );
    wait_for(
        &mut events,
        "the new file",
        &has_hook("iteratr:session_start:0"),
    );

    ws.write(
        ".iteratr.hooks.yml",
        "hooks:\n  post_iteration:\n    - command: \"make\"\n      timeout: soon\n",
    );
    let list = wait_for(&mut events, "the problem", &|l| {
        !l["problems"].as_array().unwrap().is_empty()
    });
    let problem = &list["problems"][0];
    assert_eq!(problem["source"], ".iteratr.hooks.yml:4", "{list}");
    assert_eq!(
        problem["path"],
        ws.path().join(".iteratr.hooks.yml").to_str().unwrap()
    );
    assert!(
        problem["reason"]
            .as_str()
            .unwrap()
            .starts_with("timeout: \"soon\" is no whole number of seconds"),
        "{list}"
    );
    assert!(!has_hook("iteratr:session_start:0")(&list), "{list}");

    ws.write(
        ".autoagent/config.json",
        r#"{"hooks": {"Stop": [{"type": "command", "command": "true"}]}}"#,
    );
    wait_for(
        &mut events,
        "the new directory's file",
        &has_hook("autoagent:Stop:0"),
    );
    // A user's file, two directories below the home that do not exist yet.
    let user = ws.base().join("home/.config/nyzhi/config.toml");
    fs::create_dir_all(user.parent().unwrap()).unwrap();
    fs::write(
        &user,
        "[[agent.hooks]]\nevent = \"after_turn\"\ncommand = \"cargo clippy\"\n",
    )
    .unwrap();
    wait_for(
        &mut events,
        "the user's file",
        &has_hook("nyzhi:after_turn:0"),
    );
    fs::remove_file(ws.path().join(".iteratr.hooks.yml")).unwrap();
    wait_for(&mut events, "the file gone", &|l| {
        l["problems"].as_array().unwrap().is_empty()
    });
}

/// nyzhi's `tool_name` is a comma list ("write,edit"): a `pre_tool` hook with `block = true`
/// blocks an edit and a write the agent reports under `loop` (its reason, stderr first, in the
/// reply), and lets a bash call through.
#[test]
fn nyzhis_comma_listed_tool_names_each_match_under_loop() {
    let f = Fixture::new(Workspace::new());
    f.ws.write(
        ".nyzhi/config.toml",
        "[[agent.hooks]]\nevent = \"pre_tool\"\ntool_name = \"write, edit\"\ncommand = \"echo 'run the tests first' >&2; exit 1\"\nblock = true\ntimeout = 120\n",
    );
    let call = |tool: &str| {
        format!(
            r#""$HOOKVISOR_BIN" fire tool.before --data '{{"tool_name": "{tool}", "tool_input": {{}}}}' >> "$FAKE_DIR/fired" 2>&1; echo "{tool} exit $?" >> "$FAKE_DIR/fired""#
        )
    };
    f.step(
        "1",
        &format!(
            "{}\n{}\n{}\ntouch \"$HOOKVISOR_DONE\"",
            call("edit"),
            call("write"),
            call("bash")
        ),
    );
    let out = f.run(&["--max-iterations", "2", "--prompt", "Edit."]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let fired = fs::read_to_string(f.fake.join("fired")).unwrap();
    let exits: Vec<&str> = fired.lines().filter(|l| l.contains(" exit ")).collect();
    assert_eq!(
        exits,
        ["edit exit 1", "write exit 1", "bash exit 0"],
        "{fired}"
    );
    assert_eq!(fired.matches("run the tests first").count(), 2, "{fired}");
}

/// agent-pipelines (docs/upstream/agent-pipelines-unified-hooks.md) under `loop --pipeline FILE`:
/// its two stages run in order, each with the pipeline's hooks and its own `loop.yaml`'s;
/// `on_session_start` fires once; the variables it defines are set (`${MAX_ITERATIONS}` the
/// stage's `runs`, `${NEXT_STAGE}`, the paths `${PROGRESS}`, `${STATUS}`, `${CTX}`, and
/// `${LAST_HOOK_STATUS}` after an action of the same hook point); a spawned review pipeline runs
/// its own hooks only, not its parent's (whose spawn would recur down to the depth limit); and
/// the approval rejected on `on_stage_complete` stops the pipeline: exit 3, the rejection
/// named, `on_session_complete` told `aborted`.
#[test]
fn agent_pipelines_stages_spawn_and_a_rejected_approval_run_as_its_document_says() {
    use hookvisor_testkit::http::{call_back, receiver};
    let f = Fixture::new(Workspace::new());
    let (port, received) = receiver(|url| {
        assert_eq!(
            call_back(url, "?action=reject&message=plan+not+approved"),
            200
        );
    });
    f.ws.write(
        "scripts/pipelines/full.yaml",
        &format!(
            r#"name: full-workflow
description: Complete workflow with approvals

stages:
  - name: plan
    loop: improve-plan
    runs: 2
  - name: work
    loop: work

hooks:
  on_session_start:
    - type: shell
      command: "echo \"start max=${{MAX_ITERATIONS}}\" >> trace"
  on_iteration_complete:
    - type: shell
      command: "echo \"complete ${{STAGE}} ${{ITERATION}}/${{MAX_ITERATIONS}} next=${{NEXT_STAGE}}\" >> trace; test -f ${{PROGRESS}} && test -f ${{STATUS}} && test -f ${{CTX}}"
      await: true
    - type: shell
      command: "echo \"tests ${{LAST_HOOK_STATUS}}\" >> trace"
      await: true
      when: "${{LAST_HOOK_STATUS}} == 'success'"
    - type: spawn
      pipeline: code-review
      await: true
      inputs:
        parent_session: "${{SESSION}}"
      when: "${{ITERATION}} == 1"
  on_stage_complete:
    - type: webhook
      url: "http://127.0.0.1:{port}/approve"
      body:
        cb: "${{CALLBACK_URL}}"
        text: "Stage ${{STAGE}} ready for review"
      await: true
      when: "${{STAGE}} == 'work'"
  on_session_complete:
    - type: shell
      command: "echo \"end $(jq -r .data.reason)\" >> trace"
      await: true
"#
        ),
    );
    f.ws.write(
        "scripts/loops/improve-plan/loop.yaml",
        "name: improve-plan\ntermination:\n  type: queue\nhooks:\n  on_iteration_complete:\n    - type: shell\n      command: \"echo \\\"plan stage hook ${ITERATION}\\\" >> trace\"\n      await: true\n",
    );
    f.ws.write(
        "scripts/loops/work/loop.yaml",
        "name: work\nhooks:\n  on_iteration_complete:\n    - type: shell\n      command: \"echo \\\"work stage hook ${ITERATION}\\\" >> trace\"\n      await: true\n",
    );
    f.ws.write(
        ".discobot/pipelines/code-review.yml",
        "agent: [sh, -c, 'echo \"review agent $HOOKVISOR_SPAWN_DEPTH\" >> trace; touch \"$HOOKVISOR_DONE\"']\nprompt: Review.\nmax_iterations: 1\nhooks:\n  on_session_start:\n    - type: shell\n      command: \"echo review hook >> trace\"\n      await: true\n",
    );
    // Plan takes both its runs; work is done at once.
    f.step("2", ": still planning");
    f.step("3", "touch \"$HOOKVISOR_DONE\"");
    let out = f.run(&[
        "--pipeline",
        "scripts/pipelines/full.yaml",
        "--prompt",
        "Build it.",
    ]);
    assert_eq!(code(&out), 3, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("plan not approved"),
        "{}",
        stderr(&out)
    );
    // Joined once the loop is known to have sent the approval request.
    received.join().unwrap();
    assert_eq!(f.session()["reason"], "aborted");
    assert_eq!(
        f.iterations(),
        3,
        "{:?} {}",
        f.trace(),
        fs::read_to_string(f.fake.join("iterations")).unwrap()
    );
    assert_eq!(
        f.trace(),
        [
            "start max=2",
            "complete plan 1/2 next=work",
            "tests success",
            "review hook",
            "review agent 1",
            "plan stage hook 1",
            "complete plan 2/2 next=work",
            "tests success",
            "plan stage hook 2",
            "complete work 3/20 next=",
            "tests success",
            "work stage hook 3",
            "end aborted",
        ]
    );
}

/// AutoAgent with twelve `PreExecutionEnd` hooks (docs/upstream/autoagent-hooks-design.md): under
/// `loop`, the agent's `fire task.complete` runs them in the file's order, the last one's exit
/// 2 blocking with its stderr; moved over by `import`, the files sort, and run, in that order
/// (`-00 … -11`, never `-0 -1 -10 -11 -2`).
#[test]
fn autoagents_twelve_hooks_of_one_event_run_in_their_order_in_place_and_imported() {
    let f = Fixture::new(Workspace::new());
    let mut hooks: Vec<String> = (0..11)
        .map(|n| {
            format!(
                r#"{{"type": "command", "command": "echo 'pre {n} {{{{issueNumber}}}}' >> trace"}}"#
            )
        })
        .collect();
    hooks.push(r#"{"type": "command", "command": "echo 'tests failed' >&2; exit 2"}"#.to_owned());
    f.ws.write(
        ".autoagent/config.json",
        &format!(
            r#"{{"hooks": {{"PreExecutionEnd": [{}]}}}}"#,
            hooks.join(",\n")
        ),
    );
    f.step(
        "1",
        r#""$HOOKVISOR_BIN" fire task.complete --data '{"issueNumber": 7}' >> "$FAKE_DIR/fired" 2>&1; echo "exit $?" >> "$FAKE_DIR/fired"; touch "$HOOKVISOR_DONE""#,
    );
    let expected: Vec<String> = (0..11).map(|n| format!("pre {n} 7")).collect();
    let out = f.run(&["--max-iterations", "2", "--prompt", "Ship."]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let fired = fs::read_to_string(f.fake.join("fired")).unwrap();
    assert!(
        fired.contains("tests failed") && fired.ends_with("exit 1\n"),
        "{fired}"
    );
    assert_eq!(f.trace(), expected);

    let out = f.ws.hookvisor(&["import", "autoagent", "--write"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let mut names: Vec<String> = fs::read_dir(f.ws.path().join(".discobot/hooks"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    let files: Vec<String> = (0..12)
        .map(|n| format!("autoagent-pre_execution_end-{n:02}.yml"))
        .collect();
    assert_eq!(names, files);
    fs::remove_file(f.ws.path().join("trace")).unwrap();
    fs::remove_file(f.fake.join("fired")).unwrap();
    let out = f.run(&["--max-iterations", "2", "--prompt", "Ship."]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let fired = fs::read_to_string(f.fake.join("fired")).unwrap();
    assert!(
        fired.contains("tests failed") && fired.ends_with("exit 1\n"),
        "{fired}"
    );
    assert_eq!(f.trace(), expected);
}

//! `action: spawn` (docs/EVENTS.md §4.4, §5 rule 23) fired through the real `hookvisor fire`: real
//! child processes, a real `hookvisor loop` driving a fake agent, real git worktrees.

use crate::common;

use std::fs;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Child;

use common::{Workspace, check, code, json_of, stderr, stdout};
use serde_json::json;

/// `.discobot/hooks/NAME.yml` of `ws`: a `task.complete` hook with `front`.
fn hook(ws: &Workspace, name: &str, front: &str) {
    ws.write(
        &format!(".discobot/hooks/{name}.yml"),
        &format!("---\nevent: task.complete\n{front}---\n"),
    );
}

/// `hookvisor fire task.complete --json --data DATA`: the exit code and the reply.
fn fire(ws: &Workspace, data: &str) -> (i32, serde_json::Value) {
    let out = ws.hookvisor(&["fire", "task.complete", "--json", "--data", data]);
    (code(&out), json_of(&out))
}

/// The child dirs under `state`'s `children/`, sorted.
fn children(state: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = fs::read_dir(state.join("children"))
        .map(|entries| {
            entries
                .flatten()
                .map(|e| e.path())
                .filter(|p| p.is_dir())
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

fn mode(path: &Path) -> u32 {
    fs::symlink_metadata(path).unwrap().permissions().mode() & 0o7777
}

fn read_json(path: &Path) -> serde_json::Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}: {text}", path.display()))
}

/// A YAML single-quoted scalar of `text`.
fn quoted(text: &str) -> String {
    format!("'{}'", text.replace('\'', "''"))
}

#[test]
fn layout_modes_and_typed_inputs_and_output() {
    let ws = Workspace::new();
    hook(
        &ws,
        "review",
        &format!(
            "action: spawn\nargv: [sh, -c, {}]\ninputs:\n  task: \"${{task_id}}\"\n  n: \"${{n}}\"\n  obj: \"${{obj}}\"\n  who: \"${{session}}\"\n  text: \"task ${{task_id}} of ${{n}}\"\n  fixed: [1, true, null]\n",
            quoted(
                "printf '%s\\n' \"$HOOKVISOR_STATE_DIR\" \"$HOOKVISOR_SPAWN_DEPTH\" \
                 \"$HOOKVISOR_PARENT_SESSION\" \"$HOOKVISOR_INPUTS\" \"$HOOKVISOR_OUTPUT\" \"$PWD\" \
                 > \"$HOOKVISOR_STATE_DIR/seen\"; \
                 printf '{\"verdict\": \"ok\", \"score\": 0.5, \"notes\": [\"a\"]}' > \"$HOOKVISOR_OUTPUT\""
            )
        ),
    );
    let (exit, reply) = fire(
        &ws,
        r#"{"task_id": "T-1", "n": 5, "obj": {"a": [1, true]}}"#,
    );
    assert_eq!(exit, 0, "{reply}");
    assert_eq!(reply["decision"], "allow", "{reply}");
    assert_eq!(reply["results"][0]["exitCode"], 0, "{reply}");

    let root = ws.state_dir().join("children");
    assert_eq!(mode(&root), 0o700);
    let dirs = children(ws.state_dir());
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    let dir = &dirs[0];
    let name = dir.file_name().unwrap().to_string_lossy().into_owned();
    assert!(name.starts_with("task.complete-0-review"), "{name}");
    assert_eq!(mode(dir), 0o700);

    // inputs.json keeps JSON types; output.json is what the child wrote.
    assert_eq!(
        read_json(&dir.join("inputs.json")),
        json!({"task": "T-1", "n": 5, "obj": {"a": [1, true]}, "who": "default", "text": "task T-1 of 5",
               "fixed": [1, true, null]})
    );
    assert_eq!(
        read_json(&dir.join("output.json")),
        json!({"verdict": "ok", "score": 0.5, "notes": ["a"]})
    );
    let seen = fs::read_to_string(dir.join("seen")).unwrap();
    let seen: Vec<&str> = seen.lines().collect();
    assert_eq!(
        seen[0],
        dir.to_str().unwrap(),
        "the child's state dir is its own"
    );
    assert_eq!(seen[1], "1", "depth counts from 1");
    assert_eq!(seen[2], "default", "the parent's session");
    assert_eq!(seen[3], dir.join("inputs.json").to_str().unwrap());
    assert_eq!(seen[4], dir.join("output.json").to_str().unwrap());
    assert_eq!(
        seen[5],
        ws.path().to_str().unwrap(),
        "shared: the workspace"
    );

    // The same firing again gets a dir of its own.
    let (exit, reply) = fire(&ws, r#"{"task_id": "T-2", "n": 1, "obj": {}}"#);
    assert_eq!(exit, 0, "{reply}");
    let dirs = children(ws.state_dir());
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    assert!(
        dirs[1].to_string_lossy().ends_with(&format!("{name}-1")),
        "{dirs:?}"
    );
    assert_eq!(read_json(&dirs[1].join("inputs.json"))["task"], "T-2");
}

#[test]
fn output_that_is_no_object_fails_the_spawn() {
    let ws = Workspace::new();
    hook(
        &ws,
        "bad",
        &format!(
            "action: spawn\nargv: [sh, -c, {}]\non_failure: abort\n",
            quoted("echo '[1, 2]' > \"$HOOKVISOR_OUTPUT\"")
        ),
    );
    let (exit, reply) = fire(&ws, "{}");
    assert_eq!(reply["decision"], "abort", "{reply}");
    assert_ne!(exit, 0);
    assert_eq!(reply["results"][0]["exitCode"], 1, "{reply}");
    assert!(
        reply["reason"]
            .as_str()
            .unwrap()
            .contains("not one JSON object"),
        "{reply}"
    );
}

#[test]
fn unknown_input_names_refuse_the_run() {
    let ws = Workspace::new();
    hook(
        &ws,
        "typo",
        "action: spawn\nargv: ['true']\ninputs: {task: \"${tsak_id}\"}\non_failure: abort\n",
    );
    let (_, reply) = fire(&ws, r#"{"task_id": "T-1"}"#);
    assert_eq!(reply["decision"], "abort", "{reply}");
    assert!(
        reply["reason"].as_str().unwrap().contains("${tsak_id}"),
        "{reply}"
    );
    assert!(children(ws.state_dir()).is_empty(), "nothing was made");
}

/// The first write to the FIFO at `path` (a `fire` that exits first fails the test rather than
/// leaving it waiting for a writer that never comes).
fn read_fifo(path: &Path, child: &mut Child) -> String {
    use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
    use std::os::fd::AsFd;
    use std::os::unix::fs::OpenOptionsExt;
    let mut fifo = fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(path)
        .unwrap();
    loop {
        let mut fds = [PollFd::new(fifo.as_fd(), PollFlags::POLLIN)];
        if poll(&mut fds, PollTimeout::from(100u16)).unwrap() > 0 {
            break;
        }
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            child
                .stderr
                .take()
                .unwrap()
                .read_to_string(&mut err)
                .unwrap();
            panic!("fire exited ({status}) before the child wrote to the FIFO: {err}");
        }
    }
    let mut chunk = [0; 64];
    let n = fifo.read(&mut chunk).unwrap();
    String::from_utf8_lossy(&chunk[..n]).into_owned()
}

fn mkfifo(path: &Path) {
    nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
}

#[test]
fn secrets_and_event_variables_never_reach_the_child() {
    let ws = Workspace::new();
    let ready = ws.base().join("ready");
    let go = ws.base().join("go");
    mkfifo(&ready);
    mkfifo(&go);
    let secrets = ws.base().join("home/.config/hookvisor");
    fs::create_dir_all(&secrets).unwrap();
    fs::write(
        secrets.join("secrets.env"),
        "# webhook secrets\nCHAT_TOKEN=file-secret-value\nexport OTHER_KEY=x\n",
    )
    .unwrap();
    hook(
        &ws,
        "env",
        &format!(
            "action: spawn\nargv: [sh, -c, {}]\ninputs: {{handed: \"${{secret_payload}}\"}}\n",
            quoted(&format!(
                "echo $$ > {}; read x < {}",
                ready.display(),
                go.display()
            ))
        ),
    );
    let mut fire = ws
        .hookvisor_command()
        .args([
            "fire",
            "task.complete",
            "--json",
            "--data",
            r#"{"secret_payload": "payload-value-42"}"#,
        ])
        // As if hookvisor ran inside a hook: a payload variable, a webhook secret, an event
        // variable; and what must pass: an agent credential.
        .env("HOOKVISOR_SECRET_PAYLOAD", "payload-value-42")
        .env("HOOKVISOR_WEBHOOK_SECRET_X", "hunter2-webhook")
        .env("DISCOBOT_CHANGED_FILES", "a.rs")
        .env("CHAT_TOKEN", "file-secret-value")
        .env("ANTHROPIC_API_KEY", "agent-credential")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let pid = read_fifo(&ready, &mut fire);
    let pid = pid.trim();
    let environ = fs::read(format!("/proc/{pid}/environ")).unwrap();
    // Let the child go before asserting, so a failure leaves no process behind.
    fs::OpenOptions::new()
        .write(true)
        .open(&go)
        .unwrap()
        .write_all(b"go\n")
        .unwrap();
    let out = fire.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));

    let vars: Vec<String> = environ
        .split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect();
    let text = vars.join("\n");
    for absent in [
        "payload-value-42",
        "hunter2-webhook",
        "HOOKVISOR_WEBHOOK_SECRET_X",
        "HOOKVISOR_SECRET_PAYLOAD",
        "file-secret-value",
        "DISCOBOT_",
        "HOOKVISOR_PAYLOAD",
    ] {
        assert!(
            !text.contains(absent),
            "{absent} in the child's environment:\n{text}"
        );
    }
    let dir = &children(ws.state_dir())[0];
    for present in [
        "ANTHROPIC_API_KEY=agent-credential".to_owned(),
        "HOOKVISOR_SPAWN_DEPTH=1".to_owned(),
        format!("HOOKVISOR_STATE_DIR={}", dir.display()),
        format!("HOOKVISOR_INPUTS={}", dir.join("inputs.json").display()),
    ] {
        assert!(vars.contains(&present), "{present} missing:\n{text}");
    }
    // Parent data flows through inputs only.
    assert_eq!(
        read_json(&dir.join("inputs.json")),
        json!({"handed": "payload-value-42"})
    );
}

/// A repository with an identity and one commit of README.md.
fn repo() -> Workspace {
    let ws = Workspace::git();
    ws.git_ok(&["config", "user.name", "Test"]);
    ws.git_ok(&["config", "user.email", "test@example.com"]);
    ws.stage("README.md", "hello\n");
    check(ws.commit("initial"), "initial commit");
    ws
}

#[test]
fn a_worktree_child_edits_its_own_tree_which_is_removed_after() {
    let ws = repo();
    for (round, exit) in [(0, "0"), (1, "3")] {
        hook(
            &ws,
            "edit",
            &format!(
                "action: spawn\nworkspace: worktree\nargv: [sh, -c, {}]\n",
                quoted(&format!(
                    "echo child > README.md; pwd > \"$HOOKVISOR_STATE_DIR/cwd\"; \
                     git status --porcelain > \"$HOOKVISOR_STATE_DIR/status\"; exit {exit}"
                ))
            ),
        );
        let (_, reply) = fire(&ws, "{}");
        assert_eq!(
            reply["results"][0]["exitCode"],
            exit.parse::<i32>().unwrap(),
            "{reply}"
        );
        let dir = &children(ws.state_dir())[round];
        let worktree = dir.join("worktree");
        assert_eq!(
            fs::read_to_string(dir.join("cwd")).unwrap().trim(),
            worktree.to_str().unwrap(),
            "the child ran in its worktree"
        );
        assert_eq!(
            fs::read_to_string(dir.join("status")).unwrap(),
            " M README.md\n",
            "the child's edit was in its worktree"
        );
        assert_eq!(
            fs::read_to_string(ws.path().join("README.md")).unwrap(),
            "hello\n"
        );
        assert!(!worktree.exists(), "round {round}: the worktree is gone");
        let list = ws.git_ok(&["worktree", "list", "--porcelain"]);
        assert_eq!(list.matches("worktree ").count(), 1, "{list}");
    }
}

#[test]
fn a_fourth_level_fails_with_a_clear_message() {
    let ws = Workspace::new();
    let bin = env!("CARGO_BIN_EXE_hookvisor");
    let depths = ws.base().join("depths");
    hook(
        &ws,
        "nest",
        &format!(
            "action: spawn\nargv: [sh, -c, {}]\n",
            quoted(&format!(
                "echo \"$HOOKVISOR_SPAWN_DEPTH\" >> {}; {bin} fire task.complete --json > \
                 \"$HOOKVISOR_STATE_DIR/reply.json\"",
                depths.display()
            ))
        ),
    );
    let (exit, reply) = fire(&ws, "{}");
    assert_eq!(exit, 0, "{reply}");
    assert_eq!(fs::read_to_string(&depths).unwrap(), "1\n2\n3\n");
    // Three nested child dirs; the third one's firing was refused.
    let one = &children(ws.state_dir())[0];
    let two = &children(one)[0];
    let three = &children(two)[0];
    assert!(children(three).is_empty());
    let deepest = read_json(&three.join("reply.json"));
    let result = &deepest["results"][0];
    assert_eq!(result["exitCode"], 1, "{deepest}");
    let status = read_json(&three.join("status.json"));
    let text = status.to_string();
    assert!(text.contains("at most 3 deep"), "{text}");
}

#[test]
fn a_pipeline_child_drives_its_agent_to_done() {
    let ws = Workspace::new();
    let agent = ws.base().join("agent.sh");
    fs::write(
        &agent,
        "#!/bin/sh\n\
         echo \"$HOOKVISOR_ITERATION\" >> \"$HOOKVISOR_STATE_DIR/iterations\"\n\
         if [ \"$HOOKVISOR_ITERATION\" = 2 ]; then\n\
           printf '{\"reviewed\": true, \"inputs\": %s}' \"$(cat \"$HOOKVISOR_INPUTS\")\" > \"$HOOKVISOR_OUTPUT\"\n\
           touch \"$HOOKVISOR_DONE\"\n\
         fi\n",
    )
    .unwrap();
    fs::set_permissions(&agent, fs::Permissions::from_mode(0o755)).unwrap();
    ws.write(
        ".discobot/pipelines/review.yml",
        &format!(
            "agent: [{}]\nprompt: review the task\nmax_iterations: 3\n",
            agent.display()
        ),
    );
    hook(
        &ws,
        "review",
        "action: spawn\npipeline: review\ninputs: {task: \"${task_id}\"}\n",
    );
    let (exit, reply) = fire(&ws, r#"{"task_id": "T-9"}"#);
    assert_eq!(exit, 0, "{reply}");
    assert_eq!(reply["results"][0]["exitCode"], 0, "{reply}");
    let dir = &children(ws.state_dir())[0];
    assert_eq!(
        fs::read_to_string(dir.join("iterations")).unwrap(),
        "1\n2\n"
    );
    assert_eq!(
        read_json(&dir.join("output.json")),
        json!({"reviewed": true, "inputs": {"task": "T-9"}})
    );
    // The loop kept its session in the child dir.
    let session = read_json(&dir.join("session.json"));
    assert_eq!(session["iterations"], 2, "{session}");

    // A loop that reaches its limit without done is a failed spawn.
    ws.write(
        ".discobot/pipelines/review.yml",
        &format!("agent: [{}]\nmax_iterations: 1\n", agent.display()),
    );
    let (_, reply) = fire(&ws, r#"{"task_id": "T-10"}"#);
    assert_ne!(reply["results"][0]["exitCode"], 0, "{reply}");

    // A broken pipeline file is named with its line.
    ws.write(
        ".discobot/pipelines/review.yml",
        &format!("agent: [{}]\nmodel: x\n", agent.display()),
    );
    let (_, reply) = fire(&ws, r#"{"task_id": "T-11"}"#);
    assert_eq!(reply["results"][0]["exitCode"], 1, "{reply}");
    let log = fs::read_to_string(ws.state_dir().join("output/review.log")).unwrap();
    assert!(
        log.contains("pipelines/review.yml:2: unknown field"),
        "{log}"
    );
}

#[test]
fn a_detached_child_is_stopped_at_session_end() {
    let ws = repo();
    hook(
        &ws,
        "bg",
        "action: spawn\nawait: false\nworkspace: worktree\nargv: [sh, -c, 'exec sleep 600']\n",
    );
    let (exit, reply) = fire(&ws, "{}");
    assert_eq!(exit, 0, "{reply}");
    assert_eq!(reply["results"][0]["exitCode"], 0, "{reply}");
    let record = ws.state_dir().join("children/children.json");
    let entries = read_json(&record);
    let pid = entries[0]["pid"].as_i64().unwrap();
    assert_eq!(entries[0]["state"], "running");
    assert!(!gone(pid), "the child runs after fire returned");

    let out = ws.hookvisor(&["fire", "session.end", "--json"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(gone(pid), "{pid} still runs after session.end");
    assert_eq!(read_json(&record)[0]["state"], "stopped");
    // The worktree of a live child of ours goes with it.
    let dir = PathBuf::from(entries[0]["dir"].as_str().unwrap());
    assert!(!dir.join("worktree").exists(), "the worktree is gone");
    let list = ws.git_ok(&["worktree", "list", "--porcelain"]);
    assert_eq!(list.matches("worktree ").count(), 1, "{list}");
}

/// Attack: a `children.json` rewritten by hand (the agent's own, were the state dir its)
/// names a running child whose "worktree" is any directory, outside the workspace or in it.
/// Neither `fire session.end` nor the `session.end` of a `loop` removes a directory a record
/// names, unless it is the worktree of a live child of ours.
#[test]
fn a_forged_record_makes_session_end_remove_no_directory() {
    let ws = repo();
    let outside = ws.base().join("precious");
    let inside = ws.path().join("src");
    let children = ws.state_dir().join("children");
    fs::create_dir_all(&children).unwrap();
    fs::set_permissions(&children, fs::Permissions::from_mode(0o700)).unwrap();
    for ending in [
        &["fire", "session.end"][..],
        &["loop", "--max-iterations", "1", "--", "true"],
    ] {
        for dir in [&outside, &inside] {
            fs::create_dir_all(dir).unwrap();
            fs::write(dir.join("keep"), "keep\n").unwrap();
        }
        let entry = |n: usize, worktree: &Path| {
            serde_json::json!({
                "pid": 1, "startTicks": 0, "dir": children.join(format!("task.complete-0-x-{n}")),
                "hookId": "x", "startedAt": 0, "worktree": [ws.path(), worktree],
                "state": "running",
            })
        };
        let record = serde_json::json!([entry(1, &outside), entry(2, &inside)]);
        fs::write(children.join("children.json"), record.to_string()).unwrap();
        let mut cmd = ws.hookvisor_command();
        cmd.arg("--state-dir").arg(ws.state_dir()).args(ending);
        let out = cmd.output().unwrap();
        for dir in [&outside, &inside] {
            assert!(
                dir.join("keep").exists(),
                "{ending:?} removed {}: {}",
                dir.display(),
                stderr(&out)
            );
        }
    }
}

/// Whether `pid` is gone from `/proc`, or a zombie: dead, and reaped only by its new parent,
/// which is this machine's init (it reaps nothing here).
fn gone(pid: i64) -> bool {
    match fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        Ok(stat) => {
            let state = stat.rsplit(')').next().unwrap_or("").trim_start();
            state.starts_with('Z') || state.starts_with('X')
        }
    }
}

#[test]
fn check_and_list_show_the_fields() {
    let ws = Workspace::new();
    hook(
        &ws,
        "review",
        "action: spawn\npipeline: review\nworkspace: worktree\ninputs:\n  task: \"${task_id}\"\n  n: 3\n",
    );
    hook(
        &ws,
        "wrong",
        "action: spawn\npipeline: review\nworkspace: copy\n",
    );
    let list = json_of(&ws.hookvisor(&["list", "--json"]));
    let text = list.to_string();
    let review = list["hooks"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|h| h["id"].as_str().is_some_and(|id| id.starts_with("review")))
        .unwrap_or_else(|| panic!("{text}"));
    assert_eq!(review["action"], "spawn");
    assert_eq!(review["pipeline"], "review");
    assert_eq!(review["workspace"], "worktree");
    assert_eq!(review["inputs"], json!({"task": "${task_id}", "n": 3}));
    let out = ws.hookvisor(&["check"]);
    let all = format!("{}{}", stdout(&out), stderr(&out));
    assert!(all.contains("wrong.yml:5"), "{all}");
    assert!(
        all.contains("workspace: 'copy' is not shared or worktree"),
        "{all}"
    );
}

#[test]
fn a_timeout_stops_the_child_and_follows_on_timeout() {
    let ws = repo();
    let pid_file = ws.base().join("pid");
    let script = quoted(&format!("echo $$ > {}; exec sleep 600", pid_file.display()));
    // The default, abort, ends the event; the worktree goes with the child.
    hook(
        &ws,
        "slow",
        &format!("action: spawn\nworkspace: worktree\ntimeout: 1\nargv: [sh, -c, {script}]\n"),
    );
    let (exit, reply) = fire(&ws, "{}");
    assert_eq!(reply["decision"], "abort", "{reply}");
    assert_eq!(exit, 3, "{reply}");
    assert!(
        reply["reason"]
            .as_str()
            .unwrap()
            .contains("timed out after 1s"),
        "{reply}"
    );
    // Recorded as the timeout it was, as a command's: never exit 0 (the bug: `exitCode: 0`).
    assert_eq!(
        (
            &reply["results"][0]["exitCode"],
            &reply["results"][0]["timedOut"]
        ),
        (&json!(124), &json!(true)),
        "{reply}"
    );
    let status = read_json(&ws.state_dir().join("status.json"));
    let slow = &status["hooks"]["slow"];
    assert_eq!(slow["lastResult"], "failure", "{slow}");
    assert_eq!(slow["lastExitCode"], 124, "{slow}");
    assert_eq!(slow["timedOut"], true, "{slow}");
    let pid: i64 = fs::read_to_string(&pid_file)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(gone(pid), "the child's group was stopped");
    let dir = &children(ws.state_dir())[0];
    assert!(
        !dir.join("worktree").exists(),
        "the worktree is gone after a timeout"
    );
    let list = ws.git_ok(&["worktree", "list", "--porcelain"]);
    assert_eq!(list.matches("worktree ").count(), 1, "{list}");

    // continue: a failure like any other, judged by on_failure (continue).
    hook(
        &ws,
        "slow",
        &format!("action: spawn\ntimeout: 1\non_timeout: continue\nargv: [sh, -c, {script}]\n"),
    );
    let (exit, reply) = fire(&ws, "{}");
    assert_eq!(exit, 0, "{reply}");
    assert_eq!(reply["decision"], "allow", "{reply}");
    assert_eq!(reply["results"][0]["timedOut"], true, "{reply}");
}

/// `on_timeout: abort` aborts a notice too (no gate to block, and no `continue: false` to
/// read), and a retry policy does not re-run it.
#[test]
fn on_timeout_abort_aborts_a_notice_and_is_not_retried() {
    let ws = Workspace::new();
    let runs = ws.base().join("runs");
    let script = quoted(&format!("echo run >> {}; exec sleep 600", runs.display()));
    ws.write(
        ".discobot/hooks/slow.yml",
        &format!(
            "---\nevent: commit.after\naction: spawn\ntimeout: 1\non_failure: retry\n\
             retries: 2\nretry_delay: 0\nargv: [sh, -c, {script}]\n---\n"
        ),
    );
    let out = ws.hookvisor(&["fire", "commit.after", "--json"]);
    let reply = json_of(&out);
    assert_eq!(reply["decision"], "abort", "{reply}");
    assert_eq!(code(&out), 3, "{reply}");
    assert_eq!(reply["results"][0]["timedOut"], true, "{reply}");
    assert_eq!(fs::read_to_string(&runs).unwrap(), "run\n", "run once");
}

/// docs/EVENTS.md §4.1/§4.4: a later hook of the same firing reads the child's `output.json` as
/// `${spawn_output}` (its text exactly) and `${spawn_output.verdict}` (inside it), through
/// `run:` and `argv:`; a hook before the spawn has no such variable.
#[test]
fn a_later_hook_reads_the_spawn_output() {
    let ws = Workspace::new();
    let output = "{\"verdict\":\"ok\",\"n\":3}";
    hook(
        &ws,
        "1-review",
        &format!(
            "action: spawn\nargv: [sh, -c, {}]\n",
            quoted(&format!("printf '%s' '{output}' > \"$HOOKVISOR_OUTPUT\""))
        ),
    );
    hook(
        &ws,
        "2-echo",
        "run: 'echo ${spawn_output} > whole.out; echo ${spawn_output.verdict} ${spawn_output.n} > verdict.out'\n",
    );
    hook(
        &ws,
        "3-argv",
        "phase: post\nwhen: ${spawn_output.verdict} == 'ok'\n\
         argv: [sh, -c, 'printf %s \"$1\" > argv.out', sh, '${spawn_output}']\n",
    );
    let (exit, reply) = fire(&ws, "{}");
    assert_eq!(exit, 0, "{reply}");
    let read = |name: &str| {
        fs::read_to_string(ws.path().join(name)).unwrap_or_else(|e| panic!("{name}: {e}: {reply}"))
    };
    assert_eq!(read("whole.out"), format!("{output}\n"));
    assert_eq!(read("verdict.out"), "ok 3\n");
    assert_eq!(read("argv.out"), output);
    let results = reply["results"].as_array().unwrap();
    assert!(results.iter().all(|r| r["success"] == true), "{reply}");

    // A hook before the spawn has no such variable: it cannot run, and on this gate that
    // blocks, so the spawn does not start either.
    fs::remove_file(ws.path().join("whole.out")).unwrap();
    hook(
        &ws,
        "0-before",
        "when: ${trigger} == 'user'\nrun: 'echo ${spawn_output} > before.out'\n",
    );
    let (exit, reply) = fire(&ws, "{}");
    assert_eq!(exit, 1, "{reply}");
    assert_eq!(reply["decision"], "block", "{reply}");
    assert!(
        reply["reason"]
            .as_str()
            .unwrap()
            .contains("${spawn_output}"),
        "{reply}"
    );
    assert!(!ws.path().join("before.out").exists(), "{reply}");
    assert!(!ws.path().join("whole.out").exists(), "{reply}");
    fs::remove_file(ws.path().join(".discobot/hooks/0-before.yml")).unwrap();

    // The next firing starts without it: a value is its firing's.
    hook(&ws, "1-review", "run: 'true'\n");
    let (_, reply) = fire(&ws, "{}");
    assert!(!ws.path().join("whole.out").exists(), "{reply}");
}

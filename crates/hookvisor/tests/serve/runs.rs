//! The run history (issue 32) through the real `hookvisor serve`: every run a runner records
//! (`hookvisor run`, a turn end, an event) is kept on disk, newest first, bounded, and read
//! back after a restart; files the agent plants in `runs/` hurt nothing.

use crate::common;

use std::fs;
use std::os::unix::fs::symlink;
use std::time::Instant;

use common::Workspace;
use common::serve::{DEADLINE, Server};
use serde_json::{Value, json};

/// Writes a declarative hook `.discobot/hooks/<name>.yml` with this front matter.
fn yml(ws: &Workspace, name: &str, front: &str) {
    ws.write(
        &format!(".discobot/hooks/{name}.yml"),
        &format!("---\n{front}\n---\n"),
    );
}

/// The runs of `id` as the server answers them.
fn runs(server: &Server, path: &str) -> Vec<Value> {
    let answer = server.get(path);
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()["runs"].as_array().unwrap().clone()
}

/// The text of the kept log of a run.
fn output(server: &Server, id: &str, run: &Value) -> Value {
    let answer = server.get(&format!("/hooks/{id}/runs/{}/output", run["run"]));
    assert_eq!(answer.status, 200, "{}", answer.body);
    answer.json()
}

#[test]
fn runs_of_run_a_turn_end_and_an_event_are_kept_newest_first() {
    let ws = Workspace::git();
    ws.hook(
        "check.sh",
        "file",
        "pattern: '*.txt'",
        "echo checked; cat \"$DISCOBOT_CHANGED_FILES\" 2>/dev/null; exit 1",
    );
    yml(
        &ws,
        "guard",
        "event: tool.before\nrun: 'test \"${tool_name}\" != Bash || { echo no shell >&2; exit 2; }'",
    );
    ws.write("seed", "");
    ws.git_ok(&["add", "."]);
    ws.git_ok(&["commit", "-qm", "seed", "--no-verify"]);

    // `hookvisor run`, before any server.
    let ran = ws.hookvisor(&["run", "check"]);
    assert_eq!(common::code(&ran), 1, "{}", common::stderr(&ran));

    let server = Server::tcp(&ws);
    ws.write("a.txt", "changed");
    let eval = server.post("/v1/turns/end", r#"{"trigger":"user"}"#).json();
    assert_eq!(eval["action"], "reprompt", "{eval}");
    let message = eval["message"].as_str().unwrap();

    let check = runs(&server, "/hooks/check/runs");
    assert_eq!(check.len(), 2, "{check:?}");
    let (turn, by_run) = (&check[0], &check[1]);
    assert_eq!((&turn["run"], &by_run["run"]), (&json!(2), &json!(1)));
    assert_eq!(turn["result"], "failure");
    assert_eq!(turn["exitCode"], 1);
    assert_eq!(turn["event"], "turn.end", "{turn}");
    assert_eq!(turn["trigger"], "user");
    assert_eq!(turn["files"], json!(["a.txt"]), "{turn}");
    assert_eq!(turn["decision"], "reprompt");
    assert_eq!(turn["agentText"], message, "the exact re-prompt");
    assert!(turn["durationMs"].is_u64() && turn["startedAt"].is_string());
    assert_eq!(turn["hasOutput"], true);
    assert_eq!(by_run["decision"], Value::Null, "nobody was told of it");
    assert_eq!(
        runs(&server, "/hooks/check/runs?limit=1"),
        check[..1].to_vec()
    );

    let out = output(&server, "check", turn);
    assert!(
        out["output"].as_str().unwrap().starts_with("checked\n"),
        "{out}"
    );
    assert_eq!(out["running"], false);
    assert_eq!(out["offset"], 0);
    assert_eq!(out["sizeBytes"], out["nextOffset"]);
    let from = server.get("/hooks/check/runs/2/output?offset=3").json();
    assert!(
        from["output"].as_str().unwrap().starts_with("cked\n"),
        "{from}"
    );
    assert_eq!(from["offset"], 3);

    // An event: the gate's block and the reason the agent got.
    let data = r#"{"session_id":"s-1","data":{"tool_name":"Bash"}}"#;
    let block = server.post("/v1/events/tool.before", data).json();
    assert_eq!(block["decision"], "block", "{block}");
    let guard = runs(&server, "/hooks/guard/runs");
    assert_eq!(guard.len(), 1, "{guard:?}");
    assert_eq!(guard[0]["event"], "tool.before");
    assert_eq!(guard[0]["session"], "s-1");
    assert_eq!(guard[0]["tool"], "Bash");
    assert_eq!(guard[0]["decision"], "block");
    assert_eq!(guard[0]["agentText"], block["reason"], "{guard:?}");

    let missing = server.get("/hooks/check/runs/99/output");
    assert_eq!(missing.status, 404, "{}", missing.body);
    assert_eq!(server.get("/hooks/nope/runs").status, 404);
}

#[test]
fn the_history_is_bounded_at_200_runs_and_survives_a_restart() {
    let ws = Workspace::new();
    ws.hook("count.sh", "session", "", "echo run");
    let server = Server::tcp(&ws);
    for _ in 0..205 {
        assert_eq!(server.post("/hooks/count/rerun", "").status, 200);
    }
    let all = runs(&server, "/hooks/count/runs?limit=1000");
    assert_eq!(all.len(), 200);
    assert_eq!((&all[0]["run"], &all[199]["run"]), (&json!(205), &json!(6)));
    assert_eq!(
        runs(&server, "/hooks/count/runs").len(),
        50,
        "the default limit"
    );
    let with_output = all.iter().filter(|r| r["hasOutput"] == true).count();
    assert_eq!(with_output, 20, "the last 20 logs are kept");
    assert_eq!(output(&server, "count", &all[0])["output"], "run\n");
    let old = server.get("/hooks/count/runs/6/output").json();
    assert_eq!(old["output"], "", "{old}");
    let kept = fs::read_dir(ws.state_dir().join("runs/count"))
        .unwrap()
        .count();
    assert_eq!(kept, 20);
    server.stop();

    let server = Server::tcp(&ws);
    assert_eq!(runs(&server, "/hooks/count/runs?limit=200"), all);
    assert_eq!(server.post("/hooks/count/rerun", "").status, 200);
    assert_eq!(runs(&server, "/hooks/count/runs?limit=1")[0]["run"], 206);
}

#[test]
fn files_planted_in_the_history_hurt_nothing() {
    let ws = Workspace::new();
    for id in ["fifo", "link", "huge", "garbage"] {
        ws.hook(&format!("{id}.sh"), "session", "", "echo ok");
    }
    let dir = ws.state_dir().join("runs");
    fs::create_dir_all(&dir).unwrap();
    nix::unistd::mkfifo(&dir.join("fifo.jsonl"), nix::sys::stat::Mode::S_IRWXU).unwrap();
    let secret = ws.base().join("root-file");
    fs::write(&secret, "secret\n").unwrap();
    symlink(&secret, dir.join("link.jsonl")).unwrap();
    fs::create_dir_all(dir.join("link")).unwrap();
    symlink(&secret, dir.join("link/1.log")).unwrap();
    let huge = fs::File::create(dir.join("huge.jsonl")).unwrap();
    huge.set_len(1 << 30).unwrap();
    fs::write(dir.join("garbage.jsonl"), "{\"run\": 1, \"started\n[]\n").unwrap();

    let server = Server::tcp(&ws);
    for id in ["fifo", "link", "huge", "garbage"] {
        let start = Instant::now();
        assert_eq!(
            runs(&server, &format!("/hooks/{id}/runs")),
            Vec::<Value>::new()
        );
        assert!(start.elapsed() < DEADLINE / 4, "{id} answered at once");
        assert_eq!(server.post(&format!("/hooks/{id}/rerun"), "").status, 200);
        let after = runs(&server, &format!("/hooks/{id}/runs"));
        assert_eq!(after.len(), 1, "{id}: {after:?}");
        assert_eq!(output(&server, id, &after[0])["output"], "ok\n", "{id}");
    }
    assert_eq!(fs::read_to_string(&secret).unwrap(), "secret\n");
    let aside = fs::read_dir(&dir)
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .contains(".jsonl.corrupt-")
        })
        .count();
    assert_eq!(aside, 4, "each planted file is moved aside");
    assert!(
        server.get("/healthz").status == 200,
        "the server is still up"
    );
}

#[test]
fn sse_announces_each_runs_start_and_end_with_its_number() {
    let ws = Workspace::new();
    ws.hook("count.sh", "session", "", "echo run");
    yml(
        &ws,
        "guard",
        "event: tool.before\nrun: 'echo no >&2; exit 2'",
    );
    let server = Server::tcp(&ws);
    let mut events = server.events();
    for _ in 0..2 {
        assert_eq!(server.post("/hooks/count/rerun", "").status, 200);
    }
    let seen = events.until(|name, data| name == "runFinished" && data["run"] == 2);
    let runs: Vec<(String, Value)> = seen
        .into_iter()
        .filter(|(name, _)| name.starts_with("run"))
        .map(|(name, data)| (name, data["run"].clone()))
        .collect();
    let want: Vec<(String, Value)> = [
        ("runStarted", 1),
        ("runFinished", 1),
        ("runStarted", 2),
        ("runFinished", 2),
    ]
    .iter()
    .map(|(n, r)| (n.to_string(), json!(r)))
    .collect();
    assert_eq!(runs, want);

    let data = r#"{"session_id":"s-9","data":{"tool_name":"Bash"}}"#;
    assert_eq!(server.post("/v1/events/tool.before", data).status, 200);
    let seen = events.until(|name, data| name == "runFinished" && data["hookId"] == "guard");
    let (_, finished) = seen.last().unwrap();
    assert_eq!(finished["session"], "s-9", "{finished}");
    assert_eq!(finished["result"], "failure");
    assert_eq!(finished["exitCode"], 2);
    let (_, started) = seen.iter().rev().find(|(n, _)| n == "runStarted").unwrap();
    assert_eq!(
        (&started["event"], &started["trigger"], &started["session"]),
        (&json!("tool.before"), &json!("user"), &json!("s-9")),
        "{started}"
    );
}

#[test]
fn sessions_list_a_spawned_child_under_its_parent_and_the_timeline_shows_the_reprompt() {
    let ws = Workspace::git();
    let exe = env!("CARGO_BIN_EXE_hookvisor");
    yml(
        &ws,
        "review",
        &format!("event: task.complete\naction: spawn\nargv: ['{exe}', fire, stage.complete]"),
    );
    yml(&ws, "child-step", "event: stage.complete\nrun: exit 0");
    ws.hook(
        "check.sh",
        "file",
        "pattern: '*.txt'",
        "echo 'fix a.txt'; exit 1",
    );
    ws.write("seed", "");
    ws.git_ok(&["add", "."]);
    ws.git_ok(&["commit", "-qm", "seed", "--no-verify"]);
    let fired = ws.hookvisor(&["fire", "task.complete", "--json"]);
    assert_eq!(common::code(&fired), 0, "{}", common::stderr(&fired));

    let server = Server::tcp(&ws);
    ws.write("a.txt", "changed");
    let eval = server.post("/v1/turns/end", r#"{"trigger":"user"}"#).json();
    assert_eq!(eval["action"], "reprompt", "{eval}");

    let review = runs(&server, "/hooks/review/runs");
    let parent = review[0]["session"].as_str().unwrap().to_owned();
    let sessions = server.get("/v1/sessions").json();
    let list = sessions["sessions"].as_array().unwrap();
    let child = list
        .iter()
        .find(|s| s["child"] == "task.complete-0-review")
        .unwrap_or_else(|| panic!("no child in {sessions}"));
    assert_eq!(child["id"], "child:task.complete-0-review");
    assert_eq!(child["parent"], parent.as_str());
    assert!(
        list.iter()
            .any(|s| s["id"] == parent.as_str() && s["parent"].is_null()),
        "{sessions}"
    );

    let timeline = server.get(&format!("/v1/timeline?session={parent}")).json();
    let entries = timeline["entries"].as_array().unwrap();
    let kinds: Vec<&str> = entries
        .iter()
        .map(|e| e["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["task.complete", "turn.end"], "{timeline}");
    let turn = &entries[1];
    assert_eq!(turn["hookId"], "check");
    assert_eq!(turn["reprompt"], true);
    assert_eq!(
        turn["agentText"], eval["message"],
        "the exact text the model saw"
    );

    let of_child = server
        .get("/v1/timeline?session=child:task.complete-0-review")
        .json();
    assert_eq!(of_child["entries"][0]["hookId"], "child-step", "{of_child}");
    assert_eq!(of_child["entries"][0]["kind"], "stage.complete");
    assert_eq!(server.get("/v1/timeline?session=child:nope").status, 404);
}

/// A hook of any kind that `/v1/hooks` lists has a history before its first run: an empty
/// one (the page showed "history unavailable" for an event hook that never ran), and its
/// output too; an id no hook has is still 404.
#[test]
fn a_listed_hook_that_never_ran_has_an_empty_history() {
    let ws = Workspace::git();
    yml(&ws, "child-step", "event: stage.complete\nrun: echo hi");
    let server = Server::tcp(&ws);
    assert_eq!(runs(&server, "/hooks/child-step/runs"), Vec::<Value>::new());
    assert_eq!(server.get("/hooks/child-step/output").status, 200);
    let unknown = server.get("/hooks/no-such-hook/runs");
    assert_eq!(unknown.status, 404, "{}", unknown.body);
}

/// `VmHWM` (peak resident set, KiB) of process `pid`.
fn peak_kib(pid: u32) -> u64 {
    let text = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = text.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The agent may fill `runs/` with histories just under the size a reader takes, each run with
/// a long text: the sessions and the timeline read them all, and must not hold them all.
#[test]
fn many_large_planted_histories_cost_the_server_a_bounded_memory() {
    let ws = Workspace::new();
    let dir = ws.state_dir().join("runs");
    fs::create_dir_all(&dir).unwrap();
    let text = "x".repeat(110 * 1024);
    for hook in 0..300 {
        let lines: String = (1..=9)
            .map(|run| {
                let record = json!({
                    "run": run, "startedAt": format!("2026-01-01T00:{hook:02}:0{run}Z"),
                    "result": "failure", "session": "s", "agentText": text,
                });
                format!("{record}\n")
            })
            .collect();
        fs::write(dir.join(format!("h{hook}.jsonl")), lines).unwrap();
    }
    let server = Server::tcp(&ws);
    let pid = server.child.id();
    let before = peak_kib(pid);
    let sessions = server.get("/v1/sessions");
    assert_eq!(sessions.status, 200, "{}", sessions.body);
    assert_eq!(sessions.json()["sessions"][0]["id"], "s");
    let timeline = server.get("/v1/timeline?session=s");
    assert_eq!(timeline.status, 200);
    assert_eq!(timeline.json()["entries"].as_array().unwrap().len(), 200);
    let peak = peak_kib(pid);
    assert!(
        peak < before + 64 * 1024,
        "peak resident set {peak} KiB, {before} KiB before"
    );
}

/// A planted history whose last run has the largest number: no run can follow it, so the next
/// run moves it aside and is recorded and listed (no overflow in the recorder or the server).
#[test]
fn a_planted_largest_run_number_breaks_nothing() {
    let ws = Workspace::new();
    ws.hook("big.sh", "session", "", "echo ok");
    let dir = ws.state_dir().join("runs");
    fs::create_dir_all(&dir).unwrap();
    let record = json!({"run": u64::MAX, "startedAt": "2026-01-01T00:00:00Z", "result": "success"});
    fs::write(dir.join("big.jsonl"), format!("{record}\n")).unwrap();
    let server = Server::tcp(&ws);
    assert_eq!(server.post("/hooks/big/rerun", "").status, 200);
    let after = runs(&server, "/hooks/big/runs");
    assert_eq!(
        after.len(),
        1,
        "the planted history was moved aside: {after:?}"
    );
    assert_eq!(output(&server, "big", &after[0])["output"], "ok\n");
}

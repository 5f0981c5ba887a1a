//! `POST /v1/events/{event}` end to end (docs/EVENTS.md §3, §5 rule 4): the built `hookvisor serve`
//! on a loopback port, declarative event hooks run by `/bin/sh`, replies, refusals and the
//! `event.decided` server-sent event.

use crate::common;

use std::fs;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::mpsc;

use common::Workspace;
use common::serve::{DEADLINE, Server, request};
use nix::sys::stat::Mode;
use nix::unistd::mkfifo;
use serde_json::Value;

/// Writes a declarative hook `.discobot/hooks/<name>.yml` with this front matter.
fn yml(ws: &Workspace, name: &str, front: &str) {
    ws.write(
        &format!(".discobot/hooks/{name}.yml"),
        &format!("---\n{front}\n---\n"),
    );
}

/// The `error` of a refusal.
fn error(body: &Value) -> String {
    body["error"].as_str().unwrap_or_default().to_owned()
}

/// A guard on `tool.before`: blocks `Bash` with a reason on stderr (exit 2), allows the rest.
fn guard(ws: &Workspace) {
    yml(
        ws,
        "guard",
        "event: tool.before\nrun: 'test \"${tool_name}\" != Bash || { echo no shell >&2; exit 2; }'",
    );
}

/// A gate's hook file that does not load blocks the gate under `serve` too (issue 28); a
/// notice goes on.
#[test]
fn a_gate_hook_that_cannot_be_loaded_blocks_under_serve() {
    let ws = Workspace::new();
    yml(
        &ws,
        "guard",
        "event: tool.before\nrun: sh -c \"echo checking ${tool_input.command}\"",
    );
    let server = Server::tcp(&ws);
    let data = r#"{"data":{"tool_name":"Bash","tool_input":{"command":"ls"}}}"#;
    let block = server.post("/v1/events/tool.before", data);
    assert_eq!(block.status, 200, "{}", block.body);
    let r = block.json();
    assert_eq!(r["decision"], "block", "{r}");
    let reason = r["reason"].as_str().unwrap();
    assert!(
        reason.contains("guard.yml:3") && reason.contains("hookvisor check"),
        "{reason}"
    );
    let notice = server.post("/v1/events/tool.failed", data);
    assert_eq!(notice.json()["decision"], "allow", "{}", notice.body);
}

#[test]
fn allow_and_block_are_200_with_the_reply_and_an_sse_event() {
    let ws = Workspace::new();
    guard(&ws);
    let server = Server::tcp(&ws);
    let mut events = server.events();

    let allow = server.post("/v1/events/tool.before", r#"{"data":{"tool_name":"Read"}}"#);
    assert_eq!(allow.status, 200, "{}", allow.body);
    let r = allow.json();
    assert_eq!(r["event"], "tool.before");
    assert_eq!(r["decision"], "allow");
    assert_eq!(r["reason"], Value::Null);
    assert_eq!(r["results"][0]["hookId"], "guard");
    assert_eq!(r["attempt"], Value::Null);

    let block = server.post(
        "/v1/events/tool.before",
        r#"{"trigger":"hook","session_id":"s1","data":{"tool_name":"Bash"}}"#,
    );
    assert_eq!(block.status, 200, "{}", block.body);
    let r = block.json();
    assert_eq!(r["decision"], "block");
    assert_eq!(r["reason"], "no shell");

    // An empty body is an empty firing.
    let empty = server.post("/v1/events/session.start", "");
    assert_eq!(empty.status, 200, "{}", empty.body);
    assert_eq!(empty.json()["decision"], "allow");

    let decided: Vec<Value> = (0..3)
        .map(|_| {
            let seen = events.until(|name, _| name == "event.decided");
            seen.last().unwrap().1.clone()
        })
        .collect();
    let brief: Vec<(&str, &str, &Value)> = decided
        .iter()
        .map(|d| {
            (
                d["event"].as_str().unwrap(),
                d["decision"].as_str().unwrap(),
                &d["reason"],
            )
        })
        .collect();
    assert_eq!(
        brief,
        [
            ("tool.before", "allow", &Value::Null),
            ("tool.before", "block", &Value::from("no shell")),
            ("session.start", "allow", &Value::Null),
        ]
    );
    assert_eq!(decided[0]["type"], "event.decided");
    server.stop();
}

#[test]
fn unknown_events_are_404_and_bad_fields_400_naming_them() {
    let ws = Workspace::new();
    guard(&ws);
    let server = Server::tcp(&ws);

    let unknown = server.post("/v1/events/turn_end", "{}");
    assert_eq!(unknown.status, 404, "{}", unknown.body);
    let why = error(&unknown.json());
    assert!(why.contains("unknown event 'turn_end'"), "{why}");
    assert!(
        why.contains("turn.end") && why.contains("claude.NAME"),
        "{why}"
    );

    for (body, field) in [
        (r#"{"data":[1]}"#, "data"),
        (r#"{"data":"x"}"#, "data"),
        (r#"{"trigger":"cron"}"#, "trigger"),
        (r#"{"session_id":1}"#, "session_id"),
        (r#"{"tool_name":"Bash"}"#, "tool_name"),
    ] {
        let response = server.post("/v1/events/tool.before", body);
        assert_eq!(response.status, 400, "{body}: {}", response.body);
        let why = error(&response.json());
        assert!(why.contains(&format!("'{field}'")), "{body}: {why}");
    }
    let not_json = server.post("/v1/events/tool.before", "{");
    assert_eq!(not_json.status, 400, "{}", not_json.body);
    server.stop();
}

#[test]
fn the_existing_guards_cover_the_route() {
    let ws = Workspace::new();
    guard(&ws);
    let server = Server::start(
        &ws,
        &["--listen", "127.0.0.1:0"],
        &[("HOOKVISOR_TOKEN", "open sesame")],
    );
    let path = "/v1/events/tool.before";
    let body = r#"{"data":{"tool_name":"Read"}}"#;

    let no_token = server.post(path, body);
    assert_eq!(no_token.status, 401, "{}", no_token.body);
    let auth = [("Authorization", "Bearer open sesame")];
    let foreign = request(
        &server.addr,
        "POST",
        path,
        &[auth[0], ("Origin", "http://evil.example")],
        body,
    );
    assert_eq!(foreign.status, 403, "{}", foreign.body);
    let text = request(
        &server.addr,
        "POST",
        path,
        &[auth[0], ("Content-Type", "text/plain")],
        body,
    );
    assert_eq!(text.status, 415, "{}", text.body);
    let ok = request(&server.addr, "POST", path, &auth, body);
    assert_eq!(ok.status, 200, "{}", ok.body);
    server.stop();
}

/// Makes a named pipe: opening one end waits for the other, which orders the test and the hook
/// without sleeping.
fn fifo(path: &Path) {
    mkfifo(path, Mode::from_bits_truncate(0o600)).unwrap();
}

/// A `tool.before` hook that announces each run on `started`, holds its gate until the test
/// writes a line to `go`, then denies with "no shell" when the tool is `Bash`; other tools get
/// through at once. The FIFOs order the test and the hook without sleeping.
struct HeldGate {
    started: std::path::PathBuf,
    go: std::path::PathBuf,
}

impl HeldGate {
    fn install(ws: &Workspace) -> HeldGate {
        let (started, go) = (ws.base().join("started"), ws.base().join("go"));
        fifo(&started);
        fifo(&go);
        yml(
            ws,
            "hold",
            &format!(
                "event: tool.before\nrun: 'test \"${{tool_name}}\" = Bash || exit 0; echo up > {}; \
                 read line < {}; echo no shell >&2; exit 2'",
                started.display(),
                go.display()
            ),
        );
        HeldGate { started, go }
    }

    /// Waits until a run of the hook has started (in a thread, so that a hook that never
    /// starts fails the test instead of hanging it).
    fn started(&self) {
        let (tx, rx) = mpsc::channel();
        let started = self.started.clone();
        std::thread::spawn(move || {
            let mut up = String::new();
            let read = fs::File::open(&started).and_then(|mut f| f.read_to_string(&mut up));
            let _ = tx.send(read.map(|_| up));
        });
        let up = rx.recv_timeout(DEADLINE).expect("the hook starts").unwrap();
        assert_eq!(up, "up\n");
    }

    /// Lets the running hook go on.
    fn release(&self) {
        fs::OpenOptions::new()
            .write(true)
            .open(&self.go)
            .unwrap()
            .write_all(b"go\n")
            .unwrap();
    }
}

/// `POST /v1/events/tool.before` for `tool` in a thread; its response arrives on `tx`.
fn gate_in_thread(
    server: &Server,
    tool: &str,
    tx: &mpsc::Sender<(String, common::serve::Response)>,
) -> std::thread::JoinHandle<()> {
    let (addr, tx, tool) = (server.addr.clone(), tx.clone(), tool.to_owned());
    let body = format!(r#"{{"data":{{"tool_name":"{tool}"}}}}"#);
    std::thread::spawn(move || {
        let response = request(&addr, "POST", "/v1/events/tool.before", &[], &body);
        let _ = tx.send((tool, response));
    })
}

/// Waits for the `gateQueue` event saying that `waiting` gates of `session` wait.
fn queue_reaches(events: &mut common::serve::Events, session: &str, waiting: usize) {
    events.until(|name, data| {
        name == "gateQueue" && data["session"] == session && data["waiting"] == waiting
    });
}

/// Issue 28: the agents run the tool calls of one reply at once. A second gate of the session
/// was refused with 409, which the adapter took for "allow": the call ran unchecked. Now it
/// waits its turn and gets its own hook's decision.
#[test]
fn parallel_gates_of_one_session_wait_their_turn_and_both_are_decided() {
    let ws = Workspace::new();
    let held = HeldGate::install(&ws);
    yml(&ws, "note", "event: session.start\nrun: exit 0");
    let server = Server::start(&ws, &["--listen", "127.0.0.1:0", "--session", "s0"], &[]);
    let mut events = server.events();

    let (tx, rx) = mpsc::channel();
    let first = gate_in_thread(&server, "Bash", &tx);
    held.started();
    // The same session (the server's, as none is named): it waits behind the first.
    let second = gate_in_thread(&server, "Bash", &tx);
    queue_reaches(&mut events, "s0", 1);
    // Another session's gate and a notice of this one go on meanwhile.
    let other = server.post(
        "/v1/events/tool.before",
        r#"{"session_id":"other","data":{"tool_name":"Read"}}"#,
    );
    assert_eq!(other.status, 200, "{}", other.body);
    let notice = server.post("/v1/events/session.start", "{}");
    assert_eq!(notice.status, 200, "{}", notice.body);
    assert!(
        rx.try_recv().is_err(),
        "a gate answered before its hook ended"
    );

    // The first decides; only then does the second's hook run, and it decides too.
    held.release();
    let (_, answer) = rx.recv_timeout(DEADLINE).expect("the first gate answers");
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(answer.json()["decision"], "block", "{}", answer.body);
    held.started();
    held.release();
    let (_, answer) = rx.recv_timeout(DEADLINE).expect("the second gate answers");
    assert_eq!(answer.status, 200, "{}", answer.body);
    assert_eq!(
        (&answer.json()["decision"], &answer.json()["reason"]),
        (&Value::from("block"), &Value::from("no shell")),
        "{}",
        answer.body
    );
    first.join().unwrap();
    second.join().unwrap();
    queue_reaches(&mut events, "s0", 0);
    server.stop();
}

/// The queue of one session is bounded: past [`MAX_QUEUED`] waiting gates the next is refused
/// with 503 and a reason (which an adapter turns into a deny); a client that goes away while it
/// waits gives its place up at once.
#[test]
fn a_session_queue_is_bounded_and_a_client_that_leaves_frees_its_place() {
    const MAX_QUEUED: usize = 32;
    let ws = Workspace::new();
    let held = HeldGate::install(&ws);
    let server = Server::start(&ws, &["--listen", "127.0.0.1:0", "--session", "s0"], &[]);
    let mut events = server.events();
    let (tx, rx) = mpsc::channel();
    let mut threads = vec![gate_in_thread(&server, "Bash", &tx)];
    held.started();

    // The first in the queue is a client that will leave.
    let leaving = common::serve::send(
        &server.addr,
        "POST",
        "/v1/events/tool.before",
        &[],
        r#"{"data":{"tool_name":"Read"}}"#,
    );
    queue_reaches(&mut events, "s0", 1);
    for _ in 1..MAX_QUEUED {
        threads.push(gate_in_thread(&server, "Read", &tx));
    }
    queue_reaches(&mut events, "s0", MAX_QUEUED);

    let refused = server.post("/v1/events/tool.before", r#"{"data":{"tool_name":"Read"}}"#);
    assert_eq!(refused.status, 503, "{}", refused.body);
    let why = error(&refused.json());
    assert!(
        why.contains(&format!("{MAX_QUEUED} gates of session 's0' already wait")),
        "{why}"
    );

    drop(leaving);
    queue_reaches(&mut events, "s0", MAX_QUEUED - 1);
    // Its place is free: one more may wait.
    threads.push(gate_in_thread(&server, "Read", &tx));
    queue_reaches(&mut events, "s0", MAX_QUEUED);
    assert!(
        rx.try_recv().is_err(),
        "a gate answered before its hook ended"
    );

    held.release();
    for _ in 0..=MAX_QUEUED {
        let (tool, answer) = rx
            .recv_timeout(DEADLINE)
            .expect("every waiting gate answers");
        assert_eq!(answer.status, 200, "{tool}: {}", answer.body);
        let want = if tool == "Bash" { "block" } else { "allow" };
        assert_eq!(answer.json()["decision"], want, "{tool}: {}", answer.body);
    }
    for thread in threads {
        thread.join().unwrap();
    }
    // Nothing of the queue is left: a gate runs at once.
    let again = server.post("/v1/events/tool.before", r#"{"data":{"tool_name":"Read"}}"#);
    assert_eq!(again.status, 200, "{}", again.body);
    server.stop();
}

/// docs/EVENTS.md §3: `/v1/turns/end` ≡ `/v1/events/turn.end`: the same evaluation (pending set,
/// loop guard, status records) answering in its own shape, which stays the eval JSON.
#[test]
fn turns_end_and_events_turn_end_are_one_evaluation() {
    let ws = Workspace::git();
    let trace = ws.base().join("trace").display().to_string();
    yml(
        &ws,
        "lint",
        &format!(
            "event: turn.end\npattern: '*.txt'\n\
             run: 'echo lint ${{files}} $HOOKVISOR_WHO >> {trace}; ! grep -q bad ${{files}}'"
        ),
    );
    let server = Server::tcp(&ws);
    let mut events = server.events();
    ws.write("a.txt", "bad\n");
    common::tick();

    let old = server.post("/v1/turns/end", r#"{"trigger":"user"}"#);
    assert_eq!(old.status, 200, "{}", old.body);
    let old = old.json();
    let mut keys: Vec<&str> = old
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    keys.sort_unstable();
    assert_eq!(
        keys,
        [
            "action",
            "attempt",
            "maxAttempts",
            "message",
            "pending",
            "problems",
            "results"
        ]
    );
    assert_eq!(old["action"], "reprompt");
    assert_eq!(old["pending"], serde_json::json!(["lint"]));
    assert!(
        old["message"]
            .as_str()
            .unwrap()
            .starts_with("[Discobot Hook Failed] \"lint\"")
    );
    let mut result: Vec<&str> = old["results"][0]
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    result.sort_unstable();
    assert_eq!(
        result,
        ["exitCode", "files", "hookId", "success", "timedOut"]
    );
    events.until(|name, _| name == "evaluationDone");

    // The same hook through the event route, with data: a fixed file passes, attempt 2.
    ws.write("a.txt", "fine\n");
    common::tick();
    let new = server.post(
        "/v1/events/turn.end",
        r#"{"trigger":"hook","data":{"who":"agent"}}"#,
    );
    assert_eq!(new.status, 200, "{}", new.body);
    let r = new.json();
    assert_eq!(r["event"], "turn.end");
    assert_eq!(r["decision"], "allow");
    assert_eq!(r["action"], "pass");
    assert_eq!(
        (r["attempt"].as_u64(), r["maxAttempts"].as_u64()),
        (Some(2), Some(3))
    );
    assert_eq!(r["results"][0]["blocked"], false);
    assert_eq!(r["pending"], serde_json::json!([]));
    events.until(|name, _| name == "evaluationDone");
    events.until(|name, v| name == "event.decided" && v["event"] == "turn.end");
    let lines: Vec<String> = fs::read_to_string(&trace)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(lines, ["lint a.txt", "lint a.txt agent"]);
    let lint = &ws.status()["hooks"]["lint"];
    assert_eq!(
        (lint["runCount"].as_u64(), lint["failCount"].as_u64()),
        (Some(2), Some(1))
    );

    // A loop's turn is accepted by the old route too, and not guarded.
    let looped = server.post("/v1/turns/end", r#"{"trigger":"loop"}"#);
    assert_eq!(looped.status, 200, "{}", looped.body);
    assert_eq!(looped.json()["attempt"], 2, "a loop turn leaves the count");
}

/// docs/EVENTS.md §3: the reply goes out when the `pre` pass ends; a `post` hook runs after it, sees
/// the decision, and does not hold the session's next gate.
#[test]
fn the_reply_leaves_when_the_pre_pass_ends_and_post_hooks_run_after_it() {
    let ws = Workspace::new();
    let (go, done) = (ws.base().join("go"), ws.base().join("done"));
    fifo(&go);
    fifo(&done);
    guard(&ws);
    // For Bash calls only: waits for the test, then says what it saw as the decision.
    yml(
        &ws,
        "after",
        &format!(
            "event: tool.before\nphase: post\nwhen: ${{tool_name}} == 'Bash'\nrun: 'read line < {}; echo ${{decision}} > {}'",
            go.display(),
            done.display()
        ),
    );
    let server = Server::tcp(&ws);
    // Answered while the post hook waits on `go`: a server that waited for it would hang here
    // until the request's deadline.
    let block = server.post("/v1/events/tool.before", r#"{"data":{"tool_name":"Bash"}}"#);
    assert_eq!(block.status, 200, "{}", block.body);
    let reply = block.json();
    assert_eq!(reply["decision"], "block");
    assert_eq!(reply["reason"], "no shell");
    assert_eq!(reply["results"].as_array().unwrap().len(), 1, "{reply}");
    // The session's next gate is not held by the post hook still running.
    let next = server.post("/v1/events/tool.before", r#"{"data":{"tool_name":"Read"}}"#);
    assert_eq!(next.status, 200, "{}", next.body);
    assert_eq!(next.json()["decision"], "allow");

    fs::OpenOptions::new()
        .write(true)
        .open(&go)
        .unwrap()
        .write_all(b"go\n")
        .unwrap();
    let mut seen = String::new();
    fs::File::open(&done)
        .unwrap()
        .read_to_string(&mut seen)
        .unwrap();
    assert_eq!(seen, "block\n");
    server.stop();
}

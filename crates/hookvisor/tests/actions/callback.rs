//! Awaited webhooks (docs/EVENTS.md §4.3, §5 rule 22) through the real `hookvisor fire`: the
//! webhook reaches a receiver on 127.0.0.1, which answers the `${callback_url}` it was sent
//! over real TCP, as a person approving in a chat would; the fire (or `serve`) waits for it and
//! decides.

use crate::common;

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Output, Stdio};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use common::serve::{DEADLINE, Server, request};
use common::{Workspace, json_of};
use hookvisor_testkit::http::{call_back, read_request, receiver};
use serde_json::Value as Json;

/// `.discobot/hooks/NAME.yml`: an awaited webhook on `tool.before` (a gate) to `port`, sending
/// its callback URL and the tool in its body, with `extra` front matter.
fn approval_hook(ws: &Workspace, name: &str, port: u16, extra: &str) {
    webhook_hook(ws, name, "tool.before", port, extra);
}

/// [`approval_hook`] on `event`.
fn webhook_hook(ws: &Workspace, name: &str, event: &str, port: u16, extra: &str) {
    ws.write(
        &format!(".discobot/hooks/{name}.yml"),
        &format!(
            "---\nevent: {event}\naction: webhook\nurl: http://127.0.0.1:{port}/approve\n\
             body:\n  cb: \"${{callback_url}}\"\n  tool: \"${{tool_name}}\"\n{extra}---\n"
        ),
    );
}

/// `hookvisor fire tool.before --json` for a Bash call, run to its end.
fn fire(ws: &Workspace) -> Output {
    ws.hookvisor_command()
        .args([
            "fire",
            "tool.before",
            "--json",
            "--data",
            r#"{"tool_name":"Bash"}"#,
        ])
        .stdin(Stdio::null())
        .output()
        .expect("run hookvisor")
}

/// Every file under `dir`, read: where a token must never be.
fn every_file(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if let Ok(bytes) = fs::read(&path) {
                files.push((path.display().to_string(), bytes));
            }
        }
    }
    files
}

#[test]
fn a_block_from_the_callback_blocks_the_gate_with_its_message() {
    let ws = Workspace::new();
    let (port, received) = receiver(|url| {
        assert_eq!(call_back(url, "?action=block&message=not+on+Fridays"), 200);
        // Taken once: the same URL again is gone.
        assert_eq!(call_back(url, "?action=approve"), 410);
    });
    approval_hook(&ws, "approve", port, "");
    let out = fire(&ws);
    let reply = json_of(&out);
    assert_eq!(reply["decision"], "block", "{reply}");
    assert_eq!(reply["reason"], "not on Fridays", "{reply}");
    let body = received.join().unwrap();
    assert_eq!(body["tool"], "Bash");
    let url = body["cb"].as_str().unwrap();
    let token = url.rsplit('/').next().unwrap();
    assert_eq!(token.len(), 43, "{url}");

    let entry = &ws.status()["hooks"]["approve"];
    assert_eq!(entry["callback"]["state"], "answered", "{entry}");
    assert!(entry["callback"]["timeoutAt"].is_string(), "{entry}");
    // The token is the capability to approve: nothing the agent can read holds it.
    for (path, bytes) in every_file(ws.state_dir()) {
        let text = String::from_utf8_lossy(&bytes);
        assert!(!text.contains(token), "{path} holds the callback token");
    }
    let log = fs::read_to_string(ws.state_dir().join("output/approve.log")).unwrap();
    assert!(
        log.contains(r#""cb":"http://127.0.0.1:"#),
        "the echo is logged: {log}"
    );
    assert!(log.contains("/cb/[secret]"), "with the token masked: {log}");
    assert!(!String::from_utf8_lossy(&out.stderr).contains(token));
}

#[test]
fn a_block_on_a_notice_is_logged_and_ignored() {
    let ws = Workspace::new();
    let (port, received) = receiver(|url| {
        assert_eq!(call_back(url, "?action=block&message=too+late"), 200);
    });
    webhook_hook(&ws, "announce", "stage.complete", port, "");
    let out = ws.hookvisor(&[
        "fire",
        "stage.complete",
        "--json",
        "--data",
        r#"{"tool_name":"x"}"#,
    ]);
    let reply = json_of(&out);
    received.join().unwrap();
    assert_eq!(reply["decision"], "allow", "{reply}");
    assert_eq!(reply["results"][0]["blocked"], false, "{reply}");
    assert_eq!(reply["results"][0]["success"], true, "{reply}");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot decide"),
        "the ignored block is warned: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_reject_aborts_whatever_on_failure_says() {
    let ws = Workspace::new();
    let (port, received) = receiver(|url| {
        assert_eq!(call_back(url, "?action=reject&message=wrong+repo"), 200);
    });
    approval_hook(
        &ws,
        "approve",
        port,
        "on_failure: continue\nblock_on: never\n",
    );
    let reply = json_of(&fire(&ws));
    received.join().unwrap();
    assert_eq!(reply["decision"], "abort", "{reply}");
    let reason = reply["reason"].as_str().unwrap();
    assert!(reason.contains("wrong repo"), "{reply}");
    assert_eq!(ws.status()["hooks"]["approve"]["lastResult"], "failure");
}

#[test]
fn an_approval_allows_and_later_hooks_see_the_hook_response() {
    let ws = Workspace::new();
    let (port, received) = receiver(|url| {
        let target = format!("{url}?action=approve&reviewer=ann");
        let rest = target.strip_prefix("http://").unwrap();
        let (host, path) = rest.split_once('/').unwrap();
        let body = r#"{"note":"looks fine","n":2}"#;
        let mut stream = TcpStream::connect(host).unwrap();
        write!(
            stream,
            "POST /{path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).unwrap();
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        assert!(answer.ends_with(r#"{"ok":true}"#), "{answer}");
    });
    approval_hook(&ws, "a-approve", port, "");
    ws.write(
        ".discobot/hooks/b-after.yml",
        "---\nevent: tool.before\nrun: printf '%s|%s' \"${hook_response.query.reviewer}\" \
         \"${hook_response.body.n}\" > after.txt\n---\n",
    );
    let reply = json_of(&fire(&ws));
    received.join().unwrap();
    assert_eq!(reply["decision"], "allow", "{reply}");
    assert_eq!(
        fs::read_to_string(ws.path().join("after.txt")).unwrap(),
        "ann|2"
    );
}

#[test]
fn no_callback_in_time_aborts_by_default_and_continue_is_a_failure() {
    let ws = Workspace::new();
    let (port, received) = receiver(|_| {});
    approval_hook(&ws, "approve", port, "timeout: 1\n");
    let out = fire(&ws);
    let reply = json_of(&out);
    received.join().unwrap();
    assert_eq!(reply["decision"], "abort", "{reply}");
    assert!(
        reply["reason"]
            .as_str()
            .unwrap()
            .contains("no callback within 1s"),
        "{reply}"
    );
    let entry = &ws.status()["hooks"]["approve"];
    assert_eq!(entry["callback"]["state"], "timed_out", "{entry}");
    assert_eq!(entry["timedOut"], true, "{entry}");

    let (port, received) = receiver(|_| {});
    approval_hook(&ws, "approve", port, "timeout: 1\non_timeout: continue\n");
    let reply = json_of(&fire(&ws));
    received.join().unwrap();
    // tool.before blocks on exit 2 only by default: a timeout is a recorded failure.
    assert_eq!(reply["decision"], "allow", "{reply}");
    assert_eq!(reply["results"][0]["timedOut"], true, "{reply}");
}

/// A receiver that answers every request `status` with an empty body until the test ends; the
/// number of requests it got.
fn refusing_receiver(status: &'static str) -> (u16, mpsc::Receiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let (got, requests) = mpsc::channel();
    thread::spawn(move || {
        for mut stream in listener.incoming().flatten() {
            read_request(&mut stream);
            let _ = write!(
                stream,
                "HTTP/1.1 {status}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            );
            if got.send(()).is_err() {
                return;
            }
        }
    });
    (port, requests)
}

/// `hookvisor fire tool.before --json` with `data`, run to its end.
fn fire_with(ws: &Workspace, data: &str) -> Output {
    ws.hookvisor_command()
        .args(["fire", "tool.before", "--json", "--data", data])
        .stdin(Stdio::null())
        .output()
        .expect("run hookvisor")
}

/// The review's F1, first cause: a receiver refusing the message (a chat API's 400 for a
/// long one, which the agent's data can make) asked nobody, so the gate was allowed by the
/// default `on_failure: continue`. It is judged by `on_timeout` now.
#[test]
fn a_webhook_that_is_not_delivered_aborts_by_on_timeout_whatever_on_failure_says() {
    let ws = Workspace::new();
    let (port, requests) = refusing_receiver("400 Bad Request");
    approval_hook(
        &ws,
        "approve",
        port,
        "on_failure: continue\nblock_on: never\n",
    );
    let reply = json_of(&fire(&ws));
    requests
        .recv_timeout(DEADLINE)
        .expect("the receiver was asked");
    assert_eq!(reply["decision"], "abort", "{reply}");
    let reason = reply["reason"].as_str().unwrap();
    assert!(reason.contains("was not delivered"), "{reply}");
    assert!(reason.contains("on_timeout: abort"), "{reply}");
    // Nothing was awaited.
    assert!(ws.status()["hooks"]["approve"].get("callback").is_none());

    // Under `on_timeout: continue` it is a failure like any other, as a timeout is.
    approval_hook(&ws, "approve", port, "on_timeout: continue\n");
    let reply = json_of(&fire(&ws));
    assert_eq!(reply["decision"], "allow", "{reply}");
    assert_eq!(reply["results"][0]["success"], false, "{reply}");
}

/// F1, second cause: a value the agent chose (a multi-line command) cannot be expanded into a
/// header, so the request is never sent.
#[test]
fn a_request_that_cannot_be_expanded_aborts_the_gate() {
    let ws = Workspace::new();
    // Port 9: were the request sent, it would fail differently.
    approval_hook(
        &ws,
        "approve",
        9,
        "headers:\n  X-Command: \"${tool_input.command}\"\n",
    );
    let out = fire_with(
        &ws,
        r#"{"tool_name":"Bash","tool_input":{"command":"true\ngit push --force"}}"#,
    );
    let reply = json_of(&out);
    assert_eq!(reply["decision"], "abort", "{reply}");
    let log = fs::read_to_string(ws.state_dir().join("output/approve.log")).unwrap();
    assert!(log.contains("LF"), "{log}");
}

/// F1, third cause: the agent squats the configured callback port.
#[test]
fn a_taken_callback_port_aborts_the_gate_naming_it() {
    let ws = Workspace::new();
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = squatter.local_addr().unwrap().port();
    // The webhook is never sent: its receiver's port is never listened on.
    approval_hook(&ws, "approve", 9, &format!("callback_port: {taken}\n"));
    let out = fire(&ws);
    let reply = json_of(&out);
    assert_eq!(reply["decision"], "abort", "{reply}");
    assert!(
        reply["reason"]
            .as_str()
            .unwrap()
            .contains(&format!("callback port {taken}")),
        "{reply}"
    );
    let log = fs::read_to_string(ws.state_dir().join("output/approve.log")).unwrap();
    assert!(log.contains(&format!("callback port {taken}")), "{log}");
    drop(squatter);
}

/// F2: with a fixed port, a second tool call while the first waits cannot listen; it was let
/// through at once. It is aborted now, and the first still waits for its own answer.
#[test]
fn a_second_gate_on_a_busy_fixed_port_is_not_allowed() {
    let ws = Workspace::new();
    let port = {
        let probe = TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let (sent, url) = mpsc::channel::<String>();
    let (receiver_port, received) = receiver(move |url| sent.send(url.to_owned()).unwrap());
    approval_hook(
        &ws,
        "approve",
        receiver_port,
        &format!("callback_port: {port}\n"),
    );
    let first = ws
        .hookvisor_command()
        .args([
            "fire",
            "tool.before",
            "--json",
            "--data",
            r#"{"tool_name":"Read"}"#,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let url = url
        .recv_timeout(DEADLINE)
        .expect("the first webhook reaches the receiver");
    // The first fire listens on the port now (it sent its URL).
    let second = fire_with(&ws, r#"{"tool_name":"Bash"}"#);
    let reply = json_of(&second);
    assert_eq!(reply["decision"], "abort", "{reply}");
    assert!(
        reply["reason"].as_str().unwrap().contains("is in use"),
        "{reply}"
    );
    assert_eq!(call_back(&url, "?action=approve"), 200);
    let first = first.wait_with_output().unwrap();
    assert_eq!(json_of(&first)["decision"], "allow");
    received.join().unwrap();
}

#[test]
fn serve_hosts_the_listener_and_announces_the_wait() {
    let ws = Workspace::new();
    let (sent, url) = mpsc::channel::<String>();
    let (port, received) = receiver(move |url| sent.send(url.to_owned()).unwrap());
    approval_hook(&ws, "approve", port, "");
    let server = Server::tcp(&ws);
    let mut events = server.events();
    // The POST is answered when the callback came: from another thread.
    let addr = server.addr.clone();
    let post = thread::spawn(move || {
        request(
            &addr,
            "POST",
            "/v1/events/tool.before",
            &[],
            r#"{"data":{"tool_name":"Bash"}}"#,
        )
    });
    let url = url
        .recv_timeout(DEADLINE)
        .expect("the webhook reaches the receiver");
    events.until(|name, data| name == "callbackChanged" && data["state"] == "waiting");
    assert_eq!(call_back(&url, "?action=block&message=ask+first"), 200);
    let reply = post.join().unwrap();
    assert_eq!(reply.status, 200, "{}", reply.body);
    let reply = reply.json();
    assert_eq!(reply["decision"], "block", "{reply}");
    assert_eq!(reply["reason"], "ask first", "{reply}");
    events.until(|name, data| name == "callbackChanged" && data["state"] == "answered");
    received.join().unwrap();
    // The server's listener outlives the wait; the token does not.
    assert_eq!(call_back(&url, "?action=approve"), 410);
}

/// Runs `hookvisor adapter claude ARGS` on a Claude PreToolUse for Bash, its approval hook
/// with `extra` front matter; sends it SIGTERM once its callback wait is open, and returns what
/// it said.
fn adapter_terminated_while_waiting(ws: &Workspace, extra: &str, args: &[&str]) -> Output {
    let (sent, url) = mpsc::channel::<String>();
    let (port, received) = receiver(move |url| sent.send(url.to_owned()).unwrap());
    approval_hook(ws, "approve", port, extra);
    let mut child = ws
        .hookvisor_command()
        .args(["adapter", "claude"])
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let input = serde_json::json!({
        "session_id": "s1",
        "cwd": ws.path(),
        "hook_event_name": "PreToolUse",
        "tool_name": "Bash",
        "tool_input": {"command": "git push --force"},
    });
    child
        .stdin
        .take()
        .unwrap()
        .write_all(input.to_string().as_bytes())
        .unwrap();
    url.recv_timeout(DEADLINE)
        .expect("the webhook reaches the receiver");
    // The wait is open once status.json says so (written after the delivery, before the wait).
    let deadline = std::time::Instant::now() + DEADLINE;
    let state = || {
        let bytes = fs::read(ws.state_dir().join("status.json")).unwrap_or_default();
        let status: Json = serde_json::from_slice(&bytes).unwrap_or_default();
        status["hooks"]["approve"]["callback"]["state"].clone()
    };
    while state() != "waiting" {
        assert!(std::time::Instant::now() < deadline, "the wait never began");
        thread::sleep(Duration::from_millis(20));
    }
    let pid = nix::unistd::Pid::from_raw(i32::try_from(child.id()).unwrap());
    nix::sys::signal::kill(pid, nix::sys::signal::Signal::SIGTERM).unwrap();
    let out = child.wait_with_output().unwrap();
    received.join().unwrap();
    out
}

/// What the adapter printed for Claude, parsed.
fn said_to_claude(out: &Output) -> Json {
    let text = String::from_utf8_lossy(&out.stdout);
    serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{e}: {text} / {}", String::from_utf8_lossy(&out.stderr)))
}

/// The review's F4: a SIGTERM during the wait (the agent's uid can send one) answered nothing,
/// which Claude takes as "go on", even with `--fail-closed`. A cancelled wait is judged by
/// `on_timeout` now: aborted by default; any other cancel of a tool gate denies.
#[test]
fn a_signal_during_an_adapters_wait_never_lets_the_tool_through() {
    let ws = Workspace::new();
    let out = adapter_terminated_while_waiting(&ws, "", &[]);
    // An abort stops Claude (docs/EVENTS.md §3.1), the tool included.
    let reply = said_to_claude(&out);
    assert_eq!(reply["continue"], false, "{reply}");
    assert!(
        reply["stopReason"].as_str().unwrap().contains("cancelled"),
        "{reply}"
    );
    assert_eq!(
        ws.status()["hooks"]["approve"]["callback"]["state"],
        "revoked"
    );

    // A tool gate fails closed before the cancel's arm: a bare cancel (`on_timeout: continue`)
    // denies, with or without `--fail-closed` (issue 28).
    for args in [&[][..], &["--fail-closed"][..]] {
        let out = adapter_terminated_while_waiting(&ws, "on_timeout: continue\n", args);
        let reply = said_to_claude(&out);
        let said = &reply["hookSpecificOutput"];
        assert_eq!(said["permissionDecision"], "deny", "{args:?}: {reply}");
        assert!(
            said["permissionDecisionReason"]
                .as_str()
                .unwrap()
                .contains("a tool gate fails closed"),
            "{args:?}: {reply}"
        );
    }
}

/// Whether a process of `user` can open `/proc/<pid>/mem`: `Err` with the shell's complaint
/// when it cannot.
fn mem_opens_as(user: &nix::unistd::User, pid: u32) -> Result<(), String> {
    use std::os::unix::process::CommandExt as _;
    let out = std::process::Command::new("/bin/sh")
        .args(["-c", &format!("exec 3</proc/{pid}/mem")])
        .uid(user.uid.as_raw())
        .gid(user.gid.as_raw())
        .output()
        .unwrap();
    if out.status.success() {
        Ok(())
    } else {
        Err(common::stderr(&out))
    }
}

/// The state letter of `/proc/<pid>/stat` once its command is `hookvisor` (after the exec):
/// waits for `S`, a sleep the program chose (a read of its stdin), which the loader before
/// `main` never makes.
fn wait_until_hookvisor_sleeps(pid: u32) {
    let deadline = std::time::Instant::now() + DEADLINE;
    loop {
        let stat = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        if stat.contains("(hookvisor) S") {
            return;
        }
        assert!(std::time::Instant::now() < deadline, "{pid}: {stat}");
        thread::sleep(Duration::from_millis(5));
    }
}

/// Attack: the agent (serve's uid) opens `/proc/<serve>/mem` before the first callback is
/// registered; the descriptor would stay valid after the server turns non-dumpable, and read
/// the token of every later wait. Both `serve` and the per-event adapter refuse it from the
/// start of `main`.
#[test]
fn serve_and_the_adapter_are_not_dumpable_from_their_first_instruction() {
    let Some(_one_at_a_time) = common::ensure_test_user() else {
        return;
    };
    let user = common::test_user();
    let ws = Workspace::new();
    let chown = std::process::Command::new("chown")
        .args(["-R", &format!("{}:{}", user.uid, user.gid)])
        .arg(ws.base())
        .status()
        .unwrap();
    assert!(chown.success());

    let mut cmd = ws.hookvisor_command();
    cmd.args(["serve", "--listen", "127.0.0.1:0"]);
    std::os::unix::process::CommandExt::uid(&mut cmd, user.uid.as_raw());
    std::os::unix::process::CommandExt::gid(&mut cmd, user.gid.as_raw());
    let server = Server::spawn(cmd);
    let opened = mem_opens_as(&user, server.child.id());
    server.stop();
    assert!(opened.is_err(), "serve's memory opened by its uid");

    let mut cmd = ws.hookvisor_command();
    cmd.arg("claude-stop")
        .env_remove("HOOKVISOR_URL")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    std::os::unix::process::CommandExt::uid(&mut cmd, user.uid.as_raw());
    std::os::unix::process::CommandExt::gid(&mut cmd, user.gid.as_raw());
    let mut adapter = cmd.spawn().unwrap();
    wait_until_hookvisor_sleeps(adapter.id());
    let opened = mem_opens_as(&user, adapter.id());
    drop(adapter.stdin.take());
    let _ = adapter.wait();
    assert!(opened.is_err(), "the adapter's memory opened by its uid");
}

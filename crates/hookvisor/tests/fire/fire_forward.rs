//! `hookvisor fire` with `HOOKVISOR_URL` set (docs/EVENTS.md §3 "CLI"): the event is fired in the
//! running `hookvisor serve`, over loopback TCP or its Unix socket, and the CLI prints the
//! server's reply and exits by its decision as if it had run the hooks itself.

use crate::common;

use std::process::Output;

use common::Workspace;
use common::serve::{Addr, Server};
use serde_json::Value;

/// A `tool.before` guard in `ws` that blocks `Bash` (exit 2, reason on stderr).
fn guard(ws: &Workspace) {
    ws.write(
        ".discobot/hooks/guard.yml",
        "---\nevent: tool.before\nrun: 'test \"${tool_name}\" != Bash || { echo no shell >&2; exit 2; }'\n---\n",
    );
}

/// The server's URL for `HOOKVISOR_URL`.
fn url(server: &Server) -> String {
    match &server.addr {
        Addr::Tcp(addr) => format!("http://{addr}"),
        Addr::Unix(path) => format!("unix:{}", path.display()),
    }
}

/// `hookvisor fire ARGS` run from `client` (a workspace without hooks) with `env` added.
fn fire(client: &Workspace, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut cmd = client.hookvisor_command();
    cmd.arg("fire").args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.output().expect("run hookvisor fire")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn fire_runs_the_event_in_the_server_and_exits_by_its_decision() {
    let served = Workspace::new();
    guard(&served);
    let server = Server::tcp(&served);
    let mut events = server.events();
    // The client's own workspace has no hooks: only the server can block.
    let client = Workspace::new();
    let url = url(&server);
    let env = [("HOOKVISOR_URL", url.as_str())];

    let out = fire(
        &client,
        &["tool.before", "--data", r#"{"tool_name":"Bash"}"#, "--json"],
        &env,
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let reply: Value = serde_json::from_slice(&out.stdout).expect("the reply is JSON");
    assert_eq!(reply["event"], "tool.before");
    assert_eq!(reply["decision"], "block");
    assert_eq!(reply["reason"], "no shell");
    assert_eq!(reply["results"][0]["hookId"], "guard");
    let decided = events.until(|name, _| name == "event.decided");
    assert_eq!(decided.last().unwrap().1["decision"], "block");
    // Recorded by the server, in its state dir; the client's holds nothing.
    assert_eq!(served.status()["hooks"]["guard"]["runCount"], 1);
    assert!(!client.state_dir().join("status.json").exists());

    // Without --json: the reason on stderr, exit 1; an allowed call exits 0.
    let out = fire(
        &client,
        &["tool.before", "--data", r#"{"tool_name":"Bash"}"#],
        &env,
    );
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stderr), "no shell\n");
    let out = fire(
        &client,
        &["tool.before", "--data", r#"{"tool_name":"Read"}"#],
        &env,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(served.status()["hooks"]["guard"]["runCount"], 3);

    // --workspace names a context: the hooks run here, where there are none.
    let out = fire(
        &client,
        &[
            "--workspace",
            client.path().to_str().unwrap(),
            "tool.before",
            "--data",
            r#"{"tool_name":"Bash"}"#,
        ],
        &env,
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(served.status()["hooks"]["guard"]["runCount"], 3);
}

#[test]
fn a_server_with_a_token_needs_it_and_a_dead_one_is_named() {
    let served = Workspace::new();
    guard(&served);
    let server = Server::start(
        &served,
        &["--listen", "127.0.0.1:0"],
        &[("HOOKVISOR_TOKEN", "s3cret")],
    );
    let client = Workspace::new();
    let url = url(&server);
    let data = ["tool.before", "--data", r#"{"tool_name":"Bash"}"#];

    let out = fire(&client, &data, &[("HOOKVISOR_URL", &url)]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(
        err.contains("(401)") && err.contains("HOOKVISOR_TOKEN"),
        "{err}"
    );
    assert!(!served.state_dir().join("status.json").exists(), "{err}");

    let out = fire(
        &client,
        &data,
        &[("HOOKVISOR_URL", &url), ("HOOKVISOR_TOKEN", "s3cret")],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    assert_eq!(text(&out.stderr), "no shell\n");

    drop(server);
    let out = fire(&client, &data, &[("HOOKVISOR_URL", &url)]);
    assert_eq!(out.status.code(), Some(1));
    let err = text(&out.stderr);
    assert!(err.contains("cannot reach the hookvisor server"), "{err}");
    let out = fire(&client, &data, &[("HOOKVISOR_URL", "ftp://x")]);
    assert_eq!(out.status.code(), Some(2), "a bad URL is a usage error");
}

#[test]
fn fire_reaches_a_server_on_its_unix_socket() {
    let served = Workspace::new();
    guard(&served);
    let socket = served.base().join("hv.sock");
    let server = Server::start(&served, &["--socket", socket.to_str().unwrap()], &[]);
    let client = Workspace::new();
    let out = fire(
        &client,
        &["tool.before", "--data", r#"{"tool_name":"Bash"}"#, "--json"],
        &[("HOOKVISOR_URL", &url(&server))],
    );
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    let reply: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(reply["reason"], "no shell");
}

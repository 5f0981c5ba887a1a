//! `hookvisor serve` end to end: the built binary on a loopback port or a Unix socket, real
//! hooks, real signals, a small HTTP/1.0 client, server-sent events read as they arrive.

// Test-only raw calls (pre_exec, kill); the product's unsafe lives in hookvisor-core's sys.rs.
#![allow(unsafe_code)]

use crate::common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Workspace;
use common::serve::{Addr, DEADLINE, Events, Server, request, send};
use nix::sys::resource::{Resource, setrlimit};
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

// ---------------------------------------------------------------------------------------------
// Prometheus text format, checked line by line.

/// Parses an exposition, failing on any line the text format does not allow; returns every
/// sample by its series (`name{labels}` as written).
fn parse_prometheus(text: &str) -> Result<BTreeMap<String, f64>, String> {
    fn valid_name(name: &str) -> bool {
        let mut chars = name.chars();
        chars
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic() || c == '_' || c == ':')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
    }
    fn parse_labels(labels: &str) -> Result<Vec<(String, String)>, String> {
        let mut out = Vec::new();
        let mut rest = labels;
        while !rest.is_empty() {
            let (name, after) = rest.split_once("=\"").ok_or(format!("label {rest:?}"))?;
            if !valid_name(name) {
                return Err(format!("label name {name:?}"));
            }
            let mut value = String::new();
            let mut chars = after.char_indices();
            let end = loop {
                match chars.next() {
                    Some((_, '\\')) => match chars.next() {
                        Some((_, 'n')) => value.push('\n'),
                        Some((_, c @ ('\\' | '"'))) => value.push(c),
                        other => return Err(format!("escape {other:?} in {labels:?}")),
                    },
                    Some((i, '"')) => break i,
                    Some((_, c)) => value.push(c),
                    None => return Err(format!("unterminated label value in {labels:?}")),
                }
            };
            out.push((name.to_owned(), value));
            rest = &after[end + 1..];
            rest = rest.strip_prefix(',').unwrap_or(rest);
        }
        Ok(out)
    }
    let mut types: BTreeMap<String, String> = BTreeMap::new();
    let mut samples = BTreeMap::new();
    for (n, line) in text.lines().enumerate() {
        let at = |why: String| format!("line {}: {why}: {line:?}", n + 1);
        if line.is_empty() {
            continue;
        }
        if let Some(comment) = line.strip_prefix("# ") {
            let mut parts = comment.splitn(3, ' ');
            match (parts.next(), parts.next(), parts.next()) {
                (Some("HELP"), Some(name), Some(_)) if valid_name(name) => {}
                (Some("TYPE"), Some(name), Some(kind)) if valid_name(name) => {
                    if !["counter", "gauge", "histogram", "summary", "untyped"].contains(&kind) {
                        return Err(at(format!("type {kind}")));
                    }
                    if types.insert(name.to_owned(), kind.to_owned()).is_some() {
                        return Err(at("second TYPE".into()));
                    }
                }
                _ => return Err(at("bad comment".into())),
            }
            continue;
        }
        let (series, value) = line.rsplit_once(' ').ok_or_else(|| at("no value".into()))?;
        let value: f64 = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().map_err(|_| at(format!("value {v:?}")))?,
        };
        let (name, labels) = match series.split_once('{') {
            Some((name, rest)) => {
                let labels = rest.strip_suffix('}').ok_or_else(|| at("labels".into()))?;
                (name, parse_labels(labels).map_err(at)?)
            }
            None => (series, Vec::new()),
        };
        if !valid_name(name) {
            return Err(at(format!("name {name:?}")));
        }
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| {
                name.strip_suffix(s)
                    .filter(|f| types.get(*f).map(String::as_str) == Some("histogram"))
            })
            .unwrap_or(name);
        if !types.contains_key(family) {
            return Err(at(format!("sample before the TYPE of {family}")));
        }
        if name.ends_with("_bucket") && !labels.iter().any(|(k, _)| k == "le") {
            return Err(at("bucket without le".into()));
        }
        if samples.insert(series.to_owned(), value).is_some() {
            return Err(at("duplicate series".into()));
        }
    }
    Ok(samples)
}

#[test]
fn the_prometheus_checker_rejects_what_it_must() {
    let good = "# HELP a_total A thing.\n# TYPE a_total counter\na_total{hook=\"x\\\"y\"} 3\n";
    assert_eq!(
        parse_prometheus(good).unwrap()["a_total{hook=\"x\\\"y\"}"],
        3.0
    );
    let bad = [
        "a_total 3\n",                                  // no TYPE
        "# TYPE a counter\na{hook=\"x} 1\n",            // unterminated label
        "# TYPE a counter\na 1.2.3\n",                  // bad value
        "# TYPE a counter\n# TYPE a counter\n",         // second TYPE
        "# TYPE a thing\n",                             // unknown type
        "# TYPE 1a counter\n1a 1\n",                    // bad name
        "# TYPE a counter\na 1\na 2\n",                 // duplicate
        "# TYPE h histogram\nh_bucket{hook=\"x\"} 1\n", // bucket without le
    ];
    for text in bad {
        assert!(parse_prometheus(text).is_err(), "accepted {text:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Fixtures.

/// A git workspace with a failing session hook, a passing file hook, a noisy hook whose log is
/// larger than what `/output` returns, and a file that is not a valid hook, all committed as a
/// repository's hooks are (an uncommitted file that does not load would be taken as one the
/// model broke in the first turn, and re-prompt).
fn workspace() -> Workspace {
    let ws = Workspace::git();
    ws.hook(
        "fails.sh",
        "session",
        "name: Always fails",
        "echo 'it <b>broke</b>'\nexit 3",
    );
    ws.hook("lint.sh", "file", "pattern: '*.rs'", "exit 0");
    ws.hook(
        "noisy.sh",
        "session",
        "",
        "yes 'a line of output' | head -n 50000\necho the end",
    );
    ws.hook("broken.sh", "nonsense", "", "exit 0");
    ws.git_ok(&["add", "."]);
    ws.git_ok(&["commit", "-qm", "hooks", "--no-verify"]);
    ws
}

/// A file hook on `*.txt` that tells its pid through a FIFO, then blocks reading another FIFO
/// nobody writes: it runs until it is killed.
struct BlockingHook {
    started: PathBuf,
}

impl BlockingHook {
    fn install(ws: &Workspace) -> BlockingHook {
        let started = ws.base().join("started");
        let never = ws.base().join("never-written");
        for fifo in [&started, &never] {
            let made = std::process::Command::new("mkfifo")
                .arg(fifo)
                .status()
                .unwrap();
            assert!(made.success());
        }
        ws.hook(
            "slow.sh",
            "file",
            "pattern: '*.txt'",
            &format!(
                "echo $$ > '{}'\nread line < '{}'",
                started.display(),
                never.display()
            ),
        );
        BlockingHook { started }
    }

    /// Waits until the hook process runs and returns its pid.
    fn pid(&self) -> Pid {
        let (tx, rx) = mpsc::channel();
        let started = self.started.clone();
        std::thread::spawn(move || {
            let _ = tx.send(std::fs::read_to_string(started));
        });
        let text = rx.recv_timeout(DEADLINE).expect("the hook starts").unwrap();
        Pid::from_raw(text.trim().parse().unwrap())
    }
}

fn process_is_gone(pid: Pid) -> bool {
    kill(pid, None).is_err()
}

// ---------------------------------------------------------------------------------------------
// Tests.

#[test]
fn every_route_answers_over_tcp() {
    let ws = workspace();
    let server = Server::tcp(&ws);

    let health = server.get("/healthz");
    assert_eq!((health.status, health.body.as_str()), (200, "ok\n"));

    let page = server.get("/");
    assert_eq!(page.status, 200);
    assert!(
        page.header("content-type")
            .unwrap()
            .starts_with("text/html")
    );
    assert!(page.body.contains("EventSource(\"/v1/events\")"));

    let list = server.get("/v1/hooks");
    assert_eq!(list.status, 200);
    let list = list.json();
    let ids: Vec<&str> = list["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["fails", "lint", "noisy"]);
    assert_eq!(list["hooks"][0]["name"], "Always fails");
    assert_eq!(list["problems"].as_array().unwrap().len(), 1, "{list}");
    assert!(
        list["problems"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("nonsense")
    );

    let status = server.get("/hooks/status");
    assert_eq!(status.status, 200);
    let status = status.json();
    for id in ["fails", "lint", "noisy"] {
        assert_eq!(
            status["hooks"][id]["lastResult"], "pending",
            "{id}: {status}"
        );
        assert_eq!(status["hooks"][id]["runCount"], 0);
    }

    let rerun = server.post("/hooks/fails/rerun", "");
    assert_eq!(rerun.status, 200, "{}", rerun.body);
    let rerun = rerun.json();
    assert_eq!(
        (&rerun["success"], &rerun["exitCode"]),
        (&json!(false), &json!(3))
    );

    let output = server.get("/hooks/fails/output").json();
    assert_eq!(
        output,
        json!({"output": "it <b>broke</b>\n", "sizeBytes": 16, "displayedBytes": 16,
               "tooLarge": false, "truncated": false})
    );

    let status = server.get("/hooks/status").json();
    let entry = &status["hooks"]["fails"];
    assert_eq!(
        (
            &entry["lastResult"],
            &entry["lastExitCode"],
            &entry["runCount"],
            &entry["failCount"]
        ),
        (&json!("failure"), &json!(3), &json!(1), &json!(1))
    );

    // A huge log comes back as its end, in whole lines.
    assert_eq!(
        server.post("/hooks/noisy/rerun", "").json()["success"],
        true
    );
    let output = server.get("/hooks/noisy/output").json();
    let text = output["output"].as_str().unwrap();
    assert_eq!(output["truncated"], true);
    assert_eq!(output["sizeBytes"], 50000 * 17 + 8);
    assert!(
        text.len() <= 200 * 1024 && text.len() > 200 * 1024 - 17,
        "{}",
        text.len()
    );
    assert!(
        text.starts_with("a line of output\n") && text.ends_with("a line of output\nthe end\n")
    );

    // Nothing changed since the start: the evaluation passes.
    let eval = server.post("/v1/turns/end", r#"{"trigger":"user"}"#);
    assert_eq!(eval.status, 200, "{}", eval.body);
    let eval = eval.json();
    assert_eq!(
        (&eval["action"], &eval["attempt"], &eval["maxAttempts"]),
        (&json!("pass"), &json!(1), &json!(3))
    );
    assert_eq!(
        server
            .post("/v1/turns/start", r#"{"trigger":"user"}"#)
            .json(),
        json!({"cancelled": false})
    );

    let bad = server.post("/v1/turns/end", r#"{"trigger":"sometimes"}"#);
    assert_eq!(bad.status, 400);
    assert!(bad.json()["error"].as_str().unwrap().contains("trigger"));

    for (method, path) in [
        ("POST", "/hooks/nope/rerun"),
        ("GET", "/hooks/nope/output"),
        ("GET", "/hooks/..%2Fstatus.json/output"),
        ("GET", "/nowhere"),
        ("DELETE", "/hooks/fails/rerun"),
    ] {
        let response = request(&server.addr, method, path, &[], "");
        assert!(
            matches!(response.status, 404 | 405),
            "{method} {path}: {}",
            response.status
        );
        if response.status == 404 {
            assert!(response.json()["error"].is_string(), "{method} {path}");
        }
    }
    assert_eq!(server.stop().code(), Some(0));
}

#[test]
fn output_answers_discobots_shape_with_a_200_kib_tail() {
    // discobot's GET /hooks/{id}/output: the log's last 200 KiB, its size, how much is shown
    // and whether it is cut; `truncated` stays as the older name of `tooLarge`.
    let ws = workspace();
    let server = Server::tcp(&ws);
    let empty = json!({"output": "", "sizeBytes": 0, "displayedBytes": 0, "tooLarge": false,
                       "truncated": false});
    assert_eq!(server.get("/hooks/fails/output").json(), empty, "never ran");

    assert_eq!(server.post("/hooks/fails/rerun", "").status, 200);
    assert_eq!(
        server.get("/hooks/fails/output").json(),
        json!({"output": "it <b>broke</b>\n", "sizeBytes": 16, "displayedBytes": 16,
               "tooLarge": false, "truncated": false})
    );

    assert_eq!(server.post("/hooks/noisy/rerun", "").status, 200);
    let output = server.get("/hooks/noisy/output").json();
    let text = output["output"].as_str().unwrap();
    let size = 50000 * 17 + 8;
    assert_eq!(
        (
            &output["sizeBytes"],
            &output["displayedBytes"],
            &output["tooLarge"],
            &output["truncated"]
        ),
        (&json!(size), &json!(text.len()), &json!(true), &json!(true)),
        "{}",
        &output["output"].as_str().unwrap()[..100]
    );
    assert!(
        text.len() <= 200 * 1024 && text.len() > 200 * 1024 - 17,
        "the last 200 KiB in whole lines: {}",
        text.len()
    );
    assert!(text.starts_with("a line of output\n") && text.ends_with("output\nthe end\n"));

    let unknown = server.get("/hooks/nope/output");
    assert_eq!(unknown.status, 404);
    let body = unknown.json();
    assert_eq!(body.as_object().unwrap().len(), 1, "{body}");
    assert!(body["error"].is_string());
}

#[test]
fn turn_end_reports_hook_files_that_do_not_load() {
    let ws = txt_hook_workspace("exit 0");
    ws.hook("old.sh", "nonsense", "", "exit 0");
    ws.git_ok(&["add", "."]);
    ws.git_ok(&["commit", "-qm", "an old problem", "--no-verify"]);
    let server = Server::tcp(&ws);
    let turn = || {
        let eval = server.post("/v1/turns/end", r#"{"trigger":"user"}"#);
        assert_eq!(eval.status, 200, "{}", eval.body);
        eval.json()
    };
    let files = |eval: &Value| -> Vec<String> {
        eval["problems"]
            .as_array()
            .unwrap_or_else(|| panic!("no problems array: {eval}"))
            .iter()
            .map(|p| {
                let path = p["path"].as_str().unwrap();
                assert!(p["reason"].is_string(), "{p}");
                path.rsplit('/').next().unwrap().to_owned()
            })
            .collect()
    };

    // A file that was already broken is reported, not re-prompted.
    let eval = turn();
    assert_eq!(
        (&eval["action"], &eval["message"]),
        (&json!("pass"), &Value::Null),
        "{eval}"
    );
    assert_eq!(files(&eval), ["old.sh"]);

    // The model breaks the file hook: the turn re-prompts, naming it.
    ws.hook(
        "check.sh",
        "file",
        "pattern: '*.txt'\nrun_as: admin",
        "exit 0",
    );
    let eval = turn();
    assert_eq!(eval["action"], "reprompt", "{eval}");
    let message = eval["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "[Discobot Hook Failed] hook file .discobot/hooks/check.sh does not load\n\n\
             Reason: invalid run_as 'admin'"
        ),
        "{message}"
    );
    assert!(
        message.ends_with("Please fix the hook file. (Attempt 1/3)"),
        "{message}"
    );
    assert!(!message.contains("old.sh"), "{message}");
    assert_eq!(files(&eval), ["check.sh", "old.sh"]);
}

#[test]
fn turns_use_the_file_watcher_and_miss_no_edit() {
    let ws = txt_hook_workspace(
        "for f in $DISCOBOT_CHANGED_FILES; do echo \"checked $f\"; ! grep -q bad \"$f\" || exit 1; done",
    );
    let server = Server::tcp(&ws);
    let metrics = || parse_prometheus(&server.get("/metrics").body).unwrap();
    wait_for_change_watcher(&server);
    let turn = || server.post("/v1/turns/end", r#"{"trigger":"user"}"#).json();
    let files = |eval: &Value| -> Vec<Value> {
        eval["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["files"].clone())
            .collect()
    };

    // Each edit is made right before the request: the cookie sync must still see it.
    ws.write("a.txt", "good");
    let eval = turn();
    assert_eq!(eval["action"], "pass", "{eval}");
    assert_eq!(files(&eval), [json!(["a.txt"])], "{eval}");

    let eval = turn();
    assert_eq!(eval["action"], "pass", "{eval}");
    assert_eq!(files(&eval), Vec::<Value>::new(), "nothing changed: {eval}");

    ws.write("sub/dir/b.txt", "bad");
    let eval = turn();
    assert_eq!(eval["action"], "reprompt", "{eval}");
    assert_eq!(files(&eval), [json!(["a.txt", "sub/dir/b.txt"])], "{eval}");

    ws.write("sub/dir/b.txt", "fixed");
    let eval = turn();
    assert_eq!(eval["action"], "pass", "{eval}");
    assert_eq!(files(&eval), [json!(["a.txt", "sub/dir/b.txt"])], "{eval}");

    let samples = metrics();
    assert!(
        samples["hookvisor_scans_total{kind=\"unchanged\"}"] >= 1.0
            && samples["hookvisor_scans_total{kind=\"touched\"}"] >= 3.0,
        "the watcher answered too few turns: {samples:?}"
    );
}

/// A git workspace with one commit and a file hook `check` on `*.txt` running `body`.
fn txt_hook_workspace(body: &str) -> Workspace {
    let ws = Workspace::git();
    ws.hook("check.sh", "file", "pattern: '*.txt'", body);
    ws.write("seed", "");
    ws.git_ok(&["add", "."]);
    ws.git_ok(&["commit", "-qm", "seed", "--no-verify"]);
    ws
}

/// Waits until the server's workspace watcher runs: it starts in the background, and until
/// then turns scan in full.
fn wait_for_change_watcher(server: &Server) {
    let started = Instant::now();
    while parse_prometheus(&server.get("/metrics").body).unwrap()["hookvisor_watched_dirs"] == 0.0 {
        assert!(
            started.elapsed() < DEADLINE,
            "the change watcher never started"
        );
        std::thread::yield_now();
    }
}

/// CPU time (user + system, in clock ticks) the process has used so far.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let after = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = after.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

#[test]
fn an_idle_server_uses_no_cpu() {
    let ws = workspace();
    let server = Server::tcp(&ws);
    // What used to start a loop: reading the hooks and status.json raised inotify events that
    // the watcher took for changes, and answered by reading them again.
    wait_for_change_watcher(&server);
    assert_eq!(server.post("/hooks/fails/rerun", "").status, 200);
    assert_eq!(server.get("/hooks/status").status, 200);
    assert_eq!(server.get("/hooks/noisy/output").status, 200);
    // Not a synchronisation: the window over which an idle server's CPU time is observed.
    // A loop uses a whole core (100 ticks a second); an idle server, none. The bound leaves
    // room for the end of the rerun the post started.
    let pid = server.child.id();
    let before = cpu_ticks(pid);
    std::thread::sleep(std::time::Duration::from_secs(1));
    let used = cpu_ticks(pid) - before;
    assert!(
        used <= 30,
        "an idle server used {used} ticks of CPU in one second"
    );
}

#[test]
fn metrics_parse_as_prometheus_text() {
    let ws = workspace();
    let server = Server::tcp(&ws);
    assert_eq!(server.post("/hooks/fails/rerun", "").status, 200);
    assert_eq!(server.post("/hooks/fails/rerun", "").status, 200);
    let response = server.get("/metrics");
    assert_eq!(response.status, 200);
    assert!(
        response
            .header("content-type")
            .unwrap()
            .starts_with("text/plain; version=0.0.4")
    );
    let samples =
        parse_prometheus(&response.body).unwrap_or_else(|e| panic!("{e}\n{}", response.body));
    let value = |series: &str| {
        *samples
            .get(series)
            .unwrap_or_else(|| panic!("no {series} in\n{}", response.body))
    };
    assert_eq!(value("hookvisor_hook_runs_total{hook=\"fails\"}"), 2.0);
    assert_eq!(value("hookvisor_hook_failures_total{hook=\"fails\"}"), 2.0);
    assert_eq!(value("hookvisor_hook_runs_total{hook=\"lint\"}"), 0.0);
    assert_eq!(
        value("hookvisor_hook_duration_seconds_count{hook=\"fails\"}"),
        2.0
    );
    assert_eq!(
        value("hookvisor_hook_duration_seconds_bucket{hook=\"fails\",le=\"+Inf\"}"),
        2.0
    );
    assert_eq!(value("hookvisor_pending_hooks"), 0.0);
    assert_eq!(value("hookvisor_hook_problems"), 1.0);
    assert_eq!(value("hookvisor_hook_reprompts_total{hook=\"fails\"}"), 0.0);
    assert_eq!(value("hookvisor_hook_gave_ups_total{hook=\"lint\"}"), 0.0);
    // Buckets are cumulative.
    let buckets: Vec<f64> = samples
        .iter()
        .filter(|(k, _)| k.starts_with("hookvisor_hook_duration_seconds_bucket{hook=\"fails\""))
        .map(|(_, v)| *v)
        .collect();
    assert!(
        buckets.len() > 5 && buckets.iter().all(|b| *b <= 2.0),
        "{buckets:?}"
    );
}

#[test]
fn reprompts_and_gave_ups_are_counted_per_hook() {
    let ws = txt_hook_workspace("echo bad; exit 1");
    let server = Server::tcp(&ws);
    let mut results = Vec::new();
    for (n, trigger) in ["user", "hook", "hook", "hook"].iter().enumerate() {
        ws.write("a.txt", &format!("change {n}"));
        let eval = server
            .post("/v1/turns/end", &format!(r#"{{"trigger":"{trigger}"}}"#))
            .json();
        results.push(eval["action"].as_str().unwrap().to_owned());
    }
    assert_eq!(results, ["reprompt", "reprompt", "reprompt", "gave_up"]);
    let samples = parse_prometheus(&server.get("/metrics").body).unwrap();
    assert_eq!(
        samples["hookvisor_hook_reprompts_total{hook=\"check\"}"],
        3.0
    );
    assert_eq!(
        samples["hookvisor_hook_gave_ups_total{hook=\"check\"}"],
        1.0
    );
    assert_eq!(
        samples["hookvisor_evaluations_total{action=\"reprompt\"}"],
        3.0
    );
    assert_eq!(samples["hookvisor_pending_hooks"], 1.0);
}

#[test]
fn a_unix_socket_is_private_and_removed_on_exit() {
    let ws = workspace();
    let socket = ws.base().join("hv.sock");
    let server = Server::start(&ws, &["--socket", socket.to_str().unwrap()], &[]);
    let mode = std::fs::metadata(&socket).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert_eq!(server.get("/healthz").body, "ok\n");
    assert_eq!(
        server.get("/hooks/status").json()["hooks"]["lint"]["lastResult"],
        "pending"
    );
    let rerun = server.post("/hooks/fails/rerun", "").json();
    assert_eq!(rerun["exitCode"], 3);
    assert_eq!(server.stop().code(), Some(0));
    assert!(!socket.exists());
}

#[test]
fn the_token_is_required_everywhere_but_healthz() {
    let ws = workspace();
    let server = Server::start(
        &ws,
        &["--listen", "127.0.0.1:0"],
        &[("HOOKVISOR_TOKEN", "open sesame")],
    );
    assert_eq!(server.get("/healthz").status, 200);
    for path in [
        "/",
        "/hooks/status",
        "/v1/hooks",
        "/metrics",
        "/v1/events",
        "/hooks/fails/output",
    ] {
        let anonymous = server.get(path);
        assert_eq!(anonymous.status, 401, "{path}");
        assert!(
            anonymous.json()["error"]
                .as_str()
                .unwrap()
                .contains("HOOKVISOR_TOKEN")
        );
        let wrong = request(
            &server.addr,
            "GET",
            path,
            &[("Authorization", "Bearer open")],
            "",
        );
        assert_eq!(wrong.status, 401, "{path}");
    }
    let rerun = request(&server.addr, "POST", "/hooks/fails/rerun", &[], "");
    assert_eq!(rerun.status, 401);
    assert!(
        !ws.state_dir().join("output/fails.log").exists(),
        "an unauthorised rerun ran"
    );
    let authorised = request(
        &server.addr,
        "GET",
        "/v1/hooks",
        &[("Authorization", "Bearer open sesame")],
        "",
    );
    assert_eq!(authorised.status, 200);
}

#[test]
fn remote_addresses_need_allow_remote_and_a_token() {
    let ws = workspace();
    type Case = (
        &'static [&'static str],
        &'static [(&'static str, &'static str)],
        &'static str,
    );
    let cases: [Case; 4] = [
        (&["--listen", "0.0.0.0:0"], &[], "not a loopback address"),
        (
            &["--listen", "0.0.0.0:0"],
            &[("HOOKVISOR_TOKEN", "t")],
            "not a loopback address",
        ),
        (
            &["--listen", "0.0.0.0:0", "--allow-remote"],
            &[],
            "HOOKVISOR_TOKEN",
        ),
        (&["--listen", "not an address"], &[], "not an address"),
    ];
    for (args, env, message) in cases {
        let mut cmd = ws.hookvisor_command();
        cmd.arg("serve").args(args).stdin(Stdio::null());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let output = cmd.output().unwrap();
        assert_eq!(output.status.code(), Some(2), "{args:?}");
        let stderr = common::stderr(&output);
        assert!(stderr.contains(message), "{args:?}: {stderr}");
        assert!(output.stdout.is_empty(), "{args:?} listened");
    }
}

#[test]
fn events_arrive_during_a_rerun() {
    let ws = workspace();
    let server = Server::tcp(&ws);
    let mut events = server.events();
    let rerun = server.post("/hooks/fails/rerun", "");
    assert_eq!(rerun.status, 200);
    let seen = events.until(|name, data| name == "hookFinished" && data["hookId"] == "fails");
    let names: Vec<&str> = seen.iter().map(|(n, _)| n.as_str()).collect();
    assert!(names.contains(&"hookStarted"), "{seen:?}");
    let started = names.iter().position(|n| *n == "hookStarted").unwrap();
    assert_eq!(
        seen[started].1,
        json!({"type": "hookStarted", "hookId": "fails"})
    );
    let finished = &seen.last().unwrap().1;
    assert_eq!(
        (&finished["success"], &finished["exitCode"]),
        (&json!(false), &json!(3))
    );
    assert!(finished["durationMs"].is_u64());
}

/// A turn end that arrives while an evaluation runs: once it was refused with 409, and the
/// adapter let the agent stop while the evaluation said re-prompt (issue 28). Now it answers
/// with that evaluation's report: the workspace judged once, the loop guard counting once.
#[test]
fn a_turn_end_during_an_evaluation_shares_its_report_and_counts_once() {
    let ws = Workspace::git();
    let slow = BlockingHook::install(&ws);
    ws.write("seed", "");
    ws.git_ok(&["add", "."]);
    ws.git_ok(&["commit", "-qm", "seed", "--no-verify"]);
    let server = Server::tcp(&ws);
    let mut events = server.events();
    ws.write("notes.txt", "changed");

    let turn_end = |trigger: &'static str| {
        let addr = server.addr.clone();
        let body = format!(r#"{{"trigger":"{trigger}"}}"#);
        std::thread::spawn(move || request(&addr, "POST", "/v1/turns/end", &[], &body))
    };
    let first = turn_end("user");
    events.until(|name, data| name == "hookStarted" && data["hookId"] == "slow");
    let pid = slow.pid();
    let second = turn_end("hook");
    events.until(|name, data| name == "turnWaiting" && data["behind"] == "an evaluation");
    // The hook fails (killed from outside, as a crash would be): a re-prompt, for both.
    kill(pid, Signal::SIGKILL).unwrap();
    let (first, second) = (first.join().unwrap(), second.join().unwrap());
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(first.json()["action"], "reprompt", "{}", first.body);
    assert_eq!(first.json(), second.json());
    // A second evaluation, hook-triggered, would have counted one hook turn.
    let status = ws.status();
    let hook_turns = status["consecutiveHookTurns"].as_u64().unwrap_or(0);
    assert_eq!(hook_turns, 0, "one user turn end: {status}");
    assert_eq!(
        status["hooks"]["slow"]["runCount"], 1,
        "one run for both: {status}"
    );
}

/// Attack review 2: a shared pass was judged on the workspace as the running evaluation found
/// it, so the agent could start a turn end (it can reach the server), edit, and end its turn
/// behind it: its Stop passed on the state before the edit. A pass is not shared: the turn
/// end waiting behind it evaluates the workspace as it is now.
#[test]
fn a_turn_end_behind_a_passing_evaluation_judges_the_workspace_again() {
    let ws = Workspace::git();
    let slow = BlockingHook::install(&ws);
    let release = || std::fs::write(ws.base().join("never-written"), "go\n").unwrap();
    ws.write("seed", "");
    ws.git_ok(&["add", "."]);
    ws.git_ok(&["commit", "-qm", "seed", "--no-verify"]);
    let server = Server::tcp(&ws);
    let mut events = server.events();
    ws.write("notes.txt", "clean");

    let turn_end = |trigger: &'static str| {
        let addr = server.addr.clone();
        let body = format!(r#"{{"trigger":"{trigger}"}}"#);
        std::thread::spawn(move || request(&addr, "POST", "/v1/turns/end", &[], &body))
    };
    let first = turn_end("user");
    events.until(|name, data| name == "hookStarted" && data["hookId"] == "slow");
    slow.pid();
    let second = turn_end("user");
    events.until(|name, data| name == "turnWaiting" && data["behind"] == "an evaluation");
    // The edit the first evaluation never saw.
    ws.write("notes.txt", "edited after the evaluation began");
    release();
    assert_eq!(first.join().unwrap().json()["action"], "pass");
    // The second turn end runs the hook again, on the edited file.
    slow.pid();
    release();
    let second = second.join().unwrap();
    assert_eq!(second.status, 200, "{}", second.body);
    let status = ws.status();
    assert_eq!(status["hooks"]["slow"]["runCount"], 2, "{status}");
}

#[test]
fn a_rerun_during_an_evaluation_is_409_and_a_new_turn_cancels_it() {
    let ws = Workspace::git();
    let slow = BlockingHook::install(&ws);
    ws.write("seed", "");
    ws.git_ok(&["add", "."]);
    ws.git_ok(&["commit", "-qm", "seed", "--no-verify"]);
    let server = Server::tcp(&ws);
    let mut events = server.events();
    ws.write("notes.txt", "changed");

    let addr = server.addr.clone();
    let first = std::thread::spawn(move || {
        request(&addr, "POST", "/v1/turns/end", &[], r#"{"trigger":"user"}"#)
    });
    events.until(|name, data| name == "hookStarted" && data["hookId"] == "slow");
    let pid = slow.pid();
    assert_eq!(
        server.get("/hooks/status").json()["hooks"]["slow"]["lastResult"],
        "running"
    );

    let addr = server.addr.clone();
    let second = std::thread::spawn(move || {
        request(&addr, "POST", "/v1/turns/end", &[], r#"{"trigger":"hook"}"#)
    });
    events.until(|name, data| name == "turnWaiting" && data["behind"] == "an evaluation");
    let rerun = server.post("/hooks/slow/rerun", "");
    assert_eq!(
        rerun.status, 409,
        "a rerun is refused during an evaluation: {}",
        rerun.body
    );

    // The new turn returns once the hook is dead and recorded as pending.
    assert_eq!(
        server
            .post("/v1/turns/start", r#"{"trigger":"user"}"#)
            .json(),
        json!({"cancelled": true})
    );
    assert!(process_is_gone(pid), "the hook survived the cancel");
    let status = server.get("/hooks/status").json();
    assert_eq!(status["hooks"]["slow"]["lastResult"], "pending", "{status}");
    assert_eq!(status["pendingHooks"], json!(["slow"]));
    assert_eq!(
        status["hooks"]["slow"]["runCount"], 0,
        "a cancelled run is not a run"
    );

    // Both turn ends, the one that waited for it too, learn that it was cancelled.
    for turn_end in [first, second] {
        let answer = turn_end.join().unwrap();
        assert_eq!(answer.status, 409, "{}", answer.body);
        assert_eq!(answer.json()["cancelled"], true);
    }
    events.until(|name, _| name == "evaluationCancelled");

    // The slot is free again: the next turn runs the still-pending hook.
    let addr = server.addr.clone();
    let third = std::thread::spawn(move || request(&addr, "POST", "/v1/turns/end", &[], ""));
    events.until(|name, data| name == "hookStarted" && data["hookId"] == "slow");
    let pid = slow.pid();
    assert_eq!(
        server.post("/v1/turns/start", "").json(),
        json!({"cancelled": true})
    );
    assert!(process_is_gone(pid));
    assert_eq!(third.join().unwrap().status, 409);

    // The event route's turn.start (an adapter's UserPromptSubmit) cancels the same way.
    let addr = server.addr.clone();
    let fourth = std::thread::spawn(move || request(&addr, "POST", "/v1/turns/end", &[], ""));
    events.until(|name, data| name == "hookStarted" && data["hookId"] == "slow");
    let pid = slow.pid();
    let started = server.post("/v1/events/turn.start", "");
    assert_eq!(started.status, 200, "{}", started.body);
    assert_eq!(started.json()["decision"], "allow");
    assert!(process_is_gone(pid), "the hook survived turn.start");
    assert_eq!(fourth.join().unwrap().status, 409);
    events.until(|name, _| name == "evaluationCancelled");
}

#[test]
fn sigterm_cancels_the_running_hook_and_exits_0() {
    let ws = Workspace::git();
    let slow = BlockingHook::install(&ws);
    let mut server = Server::tcp(&ws);
    let mut events = server.events();
    let addr = server.addr.clone();
    let rerun = std::thread::spawn(move || {
        let mut reader = send(&addr, "POST", "/hooks/slow/rerun", &[], "");
        let mut text = String::new();
        let _ = reader.read_to_string(&mut text);
        text
    });
    events.until(|name, data| name == "hookStarted" && data["hookId"] == "slow");
    let pid = slow.pid();
    server.signal(Signal::SIGTERM);
    assert_eq!(server.wait().code(), Some(0));
    assert!(process_is_gone(pid));
    let status = ws.status();
    assert_eq!(status["hooks"]["slow"]["lastResult"], "pending", "{status}");
    // The rerun in flight was answered before the server went away.
    let answer = rerun.join().unwrap();
    assert!(
        answer.lines().next().is_some_and(|l| l.contains(" 409 ")),
        "{answer}"
    );
}

#[test]
fn hook_files_are_watched_and_the_git_hook_follows() {
    let ws = Workspace::git();
    let server = Server::tcp(&ws);
    let mut events = server.events();
    let git_hook = ws.path().join(".git/hooks/pre-commit");
    assert!(!git_hook.exists());

    let wait_for = |events: &mut Events, what: &str, cond: &dyn Fn(&Value) -> bool| {
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

    ws.hook("fmt.sh", "pre-commit", "", "exit 0");
    wait_for(&mut events, "the new hook", &|l| {
        l["hooks"][0]["id"] == "fmt"
    });
    let script = std::fs::read_to_string(&git_hook).expect("the git hook is installed");
    assert!(script.contains("# discobot:managed"), "{script}");

    ws.hook("bad.sh", "file", "", "exit 0");
    // The watcher may see the file half written first; what counts is the state it settles in.
    wait_for(&mut events, "the problem", &|l| {
        l["problems"].as_array().is_some_and(|p| {
            p.iter().any(|p| {
                p["path"].as_str().unwrap().ends_with("bad.sh")
                    && p["reason"].as_str().unwrap().contains("pattern")
            })
        })
    });

    std::fs::remove_file(ws.path().join(".discobot/hooks/fmt.sh")).unwrap();
    wait_for(&mut events, "the hook gone", &|l| {
        l["hooks"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["id"] != "fmt")
    });
    assert!(
        !git_hook.exists(),
        "our git hook stays without pre-commit hooks"
    );
}

#[test]
fn hooks_dir_created_after_start_is_watched() {
    let ws = Workspace::new();
    let server = Server::tcp(&ws);
    let mut events = server.events();
    assert_eq!(server.get("/v1/hooks").json()["hooks"], json!([]));
    ws.hook("late.sh", "session", "", "exit 0");
    let start = Instant::now();
    while server.get("/v1/hooks").json()["hooks"][0]["id"] != "late" {
        assert!(start.elapsed() < DEADLINE, "the new hooks dir was not seen");
        events.until(|name, _| name == "hooksChanged");
    }
    // Once `.discobot` exists the workspace itself is no longer watched; removing it and
    // making it again must still be seen.
    std::fs::remove_dir_all(ws.path().join(".discobot")).unwrap();
    while server.get("/v1/hooks").json()["hooks"] != json!([]) {
        assert!(
            start.elapsed() < DEADLINE,
            "the removed hooks dir was not seen"
        );
        events.until(|name, _| name == "hooksChanged");
    }
    ws.hook("again.sh", "session", "", "exit 0");
    while server.get("/v1/hooks").json()["hooks"][0]["id"] != "again" {
        assert!(
            start.elapsed() < DEADLINE,
            "the hooks dir made again was not seen"
        );
        events.until(|name, _| name == "hooksChanged");
    }
}

// ---------------------------------------------------------------------------------------------
// Agent mode.

fn agent(ws: &Workspace, extra: &[&str], script: &str) -> Server {
    let mut args = vec!["--listen", "127.0.0.1:0"];
    args.extend_from_slice(extra);
    args.extend(["--", "bash", "-c", script]);
    Server::start(ws, &args, &[])
}

#[test]
fn the_agent_reaches_the_server_and_its_status_is_ours() {
    let ws = workspace();
    let script = r#"hp=${HOOKVISOR_URL#http://}
exec 3<>/dev/tcp/${hp%:*}/${hp##*:}
printf 'GET /healthz HTTP/1.0\r\n\r\n' >&3
tail -n 1 <&3 | grep -qx ok && exit 7
exit 1"#;
    let mut server = agent(&ws, &[], script);
    assert_eq!(server.wait().code(), Some(7));
}

/// Issue 31: `--install` (a container's CMD) puts the adapters in the user's settings before
/// the agent starts, pinned to this workspace, and writes nothing into the repository.
#[test]
fn install_puts_the_adapters_in_the_users_settings_before_the_agent_starts() {
    let ws = workspace();
    let script = format!(
        "grep -q 'adapter claude --workspace {ws}' \"$HOME/.claude/settings.json\" && \
         grep -q 'adapter gemini --workspace {ws}' \"$HOME/.gemini/settings.json\" && \
         ! test -e {ws}/.claude && exit 7; exit 1",
        ws = ws.path().display()
    );
    if nix::unistd::Uid::effective().is_root() {
        // Root would write through a HOME the agent may control: refused (scripts/
        // container-smoke.sh runs it as the image's user and checks the settings).
        let out = ws
            .hookvisor_command()
            .args(["serve", "--install", "claude", "--", "true"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2));
        assert!(String::from_utf8_lossy(&out.stderr).contains("--install as root"));
        return;
    }
    let mut server = agent(&ws, &["--install", "claude,gemini"], &script);
    assert_eq!(server.wait().code(), Some(7));
}

#[test]
fn an_agent_killed_by_a_signal_gives_128_plus_n() {
    let ws = workspace();
    let mut server = agent(&ws, &[], "kill -KILL $$");
    assert_eq!(server.wait().code(), Some(137));
}

#[test]
fn signals_are_forwarded_to_the_agent() {
    for (signal, code) in [
        (Signal::SIGTERM, 42),
        (Signal::SIGINT, 43),
        (Signal::SIGHUP, 44),
    ] {
        let ws = workspace();
        let script = r#"sleep 1000 & s=$!
trap 'kill $s; exit 42' TERM
trap 'kill $s; exit 43' INT
trap 'kill $s; exit 44' HUP
echo ready
wait"#;
        let mut server = agent(&ws, &[], script);
        let ready = server.lines.recv_timeout(DEADLINE).unwrap();
        assert_eq!(ready, "ready");
        server.signal(signal);
        assert_eq!(server.wait().code(), Some(code), "{signal}");
    }
}

#[test]
fn the_agent_reaches_a_socket_server() {
    let ws = workspace();
    if std::process::Command::new("curl")
        .arg("--version")
        .output()
        .is_err()
    {
        assert!(
            std::env::var_os("CI").is_none(),
            "curl is required (Debian package curl)"
        );
        eprintln!("note: curl not installed; skipping");
        return;
    }
    let socket = ws.base().join("agent.sock");
    let script = r#"curl -sf --unix-socket "$HOOKVISOR_SOCKET" "$HOOKVISOR_URL/healthz" | grep -qx ok && exit 5"#;
    let mut server = Server::start(
        &ws,
        &[
            "--socket",
            socket.to_str().unwrap(),
            "--",
            "bash",
            "-c",
            script,
        ],
        &[],
    );
    assert_eq!(server.wait().code(), Some(5));
    assert!(!socket.exists());
}

#[test]
fn eval_and_adapters_reach_a_socket_server_through_hookvisor_socket() {
    let ws = txt_hook_workspace("echo 'a.txt is wrong'; exit 1");
    let socket = ws.base().join("hv.sock");
    let server = Server::start(&ws, &["--socket", socket.to_str().unwrap()], &[]);
    // What `serve --socket PATH -- AGENT` gives the agent: a placeholder URL and the socket.
    let agent_env = [
        ("HOOKVISOR_URL", "http://localhost"),
        ("HOOKVISOR_SOCKET", socket.to_str().unwrap()),
    ];
    let before = server.get("/metrics").body;
    assert!(before.contains("hookvisor_evaluations_total{action=\"reprompt\"} 0"));

    ws.write("a.txt", "one");
    let out = ws
        .hookvisor_command()
        .env_remove("HOOKVISOR_STATE_DIR")
        .envs(agent_env)
        .args(["eval", "--json"])
        .output()
        .unwrap();
    let eval: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", common::stderr(&out)));
    assert_eq!(eval["action"], "reprompt", "{eval}");
    assert_eq!(out.status.code(), Some(1));

    ws.write("a.txt", "two");
    let mut adapter = ws
        .hookvisor_command()
        .env_remove("HOOKVISOR_STATE_DIR")
        .envs(agent_env)
        .arg("claude-stop")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stop = format!(
        r#"{{"session_id":"s","cwd":"{}","hook_event_name":"Stop","stop_hook_active":true}}"#,
        ws.path().display()
    );
    std::io::Write::write_all(adapter.stdin.as_mut().unwrap(), stop.as_bytes()).unwrap();
    let out = adapter.wait_with_output().unwrap();
    let verdict: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: stdout {:?}, stderr {}",
            out.stdout,
            common::stderr(&out)
        )
    });
    assert_eq!(verdict["decision"], "block", "{verdict}");
    assert!(
        verdict["reason"]
            .as_str()
            .unwrap()
            .contains("a.txt is wrong"),
        "{verdict}"
    );

    // Both turns were the server's: its counters moved.
    let after = server.get("/metrics").body;
    assert!(
        after.contains("hookvisor_evaluations_total{action=\"reprompt\"} 2"),
        "{after}"
    );
}

// ---------------------------------------------------------------------------------------------
// The sandbox: web pages, stuck clients and slow files cannot take the server over.

/// The port of a TCP server.
fn port(server: &Server) -> String {
    let Addr::Tcp(addr) = &server.addr else {
        panic!("not a TCP server")
    };
    addr.rsplit(':').next().unwrap().to_owned()
}

/// Whether status.json (if there is one) shows no hook-triggered turn.
fn loop_guard_untouched(server: &Server) -> bool {
    let status = server.get("/hooks/status").json();
    status
        .get("consecutiveHookTurns")
        .is_none_or(|n| *n == json!(0))
}

#[test]
fn foreign_hosts_and_origins_are_403_and_posts_must_be_json() {
    let ws = workspace();
    let server = Server::tcp(&ws);
    let port = port(&server);
    let ran = || ws.state_dir().join("output/fails.log").exists();
    let error = |r: &common::serve::Response| r.json()["error"].as_str().unwrap().to_owned();

    // A DNS-rebinding page reaches the server under its own name.
    let foreign_hosts = [
        "evil.example".to_owned(),
        format!("evil.example:{port}"),
        format!("127.0.0.1.evil.example:{port}"),
        format!("localhost.evil.example:{port}"),
        format!("[::2]:{port}"),
        format!("10.0.0.1:{port}"),
    ];
    for host in &foreign_hosts {
        for (method, path) in [
            ("GET", "/healthz"),
            ("GET", "/"),
            ("GET", "/hooks/fails/output"),
            ("POST", "/hooks/fails/rerun"),
        ] {
            let response = request(&server.addr, method, path, &[("Host", host)], "");
            assert_eq!(response.status, 403, "Host {host}: {method} {path}");
            assert!(error(&response).contains("Host"), "{}", response.body);
        }
    }

    // A page on another origin, another port of this machine, a sandboxed frame or a file.
    let foreign_origins = [
        "http://evil.example".to_owned(),
        format!("http://evil.example:{port}"),
        "http://127.0.0.1:1".to_owned(),
        format!("https://localhost.evil.example:{port}"),
        "null".to_owned(),
        "file://".to_owned(),
    ];
    for origin in &foreign_origins {
        for (method, path) in [
            ("POST", "/hooks/fails/rerun"),
            ("POST", "/v1/turns/end"),
            ("GET", "/hooks/fails/output"),
        ] {
            let headers = [("Origin", origin.as_str())];
            let response = request(
                &server.addr,
                method,
                path,
                &headers,
                r#"{"trigger":"hook"}"#,
            );
            assert_eq!(response.status, 403, "Origin {origin}: {method} {path}");
            assert!(error(&response).contains("Origin"), "{}", response.body);
        }
    }

    // What a no-cors fetch or a form can send is not JSON: 415.
    for content_type in [
        "text/plain;charset=UTF-8",
        "application/x-www-form-urlencoded",
        "multipart/form-data; boundary=x",
        "application/jsonp",
        "",
    ] {
        for path in ["/v1/turns/end", "/hooks/fails/rerun", "/v1/turns/start"] {
            let headers = [("Content-Type", content_type)];
            let response = request(
                &server.addr,
                "POST",
                path,
                &headers,
                r#"{"trigger":"hook"}"#,
            );
            assert_eq!(response.status, 415, "{content_type:?}: {path}");
            assert!(
                error(&response).contains("Content-Type: application/json"),
                "{}",
                response.body
            );
        }
    }
    assert!(!ran(), "a refused request ran the hook");
    assert!(loop_guard_untouched(&server), "a refused turn counted");

    // What the server's own clients send is accepted.
    for host in [
        "localhost".to_owned(),
        format!("LocalHost:{port}"),
        "127.0.0.1".to_owned(),
        format!("127.0.0.1:{port}"),
        format!("127.1.2.3:{port}"),
        format!("[::1]:{port}"),
    ] {
        let response = request(&server.addr, "GET", "/healthz", &[("Host", &host)], "");
        assert_eq!(response.status, 200, "Host {host}");
    }
    for origin in [
        format!("http://127.0.0.1:{port}"),
        format!("http://localhost:{port}"),
        format!("http://[::1]:{port}"),
    ] {
        let headers = [("Origin", origin.as_str())];
        let response = request(&server.addr, "POST", "/v1/turns/start", &headers, "");
        assert_eq!(response.status, 200, "Origin {origin}: {}", response.body);
    }
    let headers = [("Content-Type", "Application/JSON; charset=utf-8")];
    let body = r#"{"trigger":"user"}"#;
    let response = request(&server.addr, "POST", "/v1/turns/end", &headers, body);
    assert_eq!(response.status, 200, "{}", response.body);
    assert_eq!(server.post("/hooks/fails/rerun", "").status, 200);
    assert!(ran());
}

#[test]
fn over_a_socket_any_host_will_do_but_posts_must_still_be_json() {
    let ws = workspace();
    let socket = ws.base().join("hv.sock");
    let server = Server::start(&ws, &["--socket", socket.to_str().unwrap()], &[]);
    // No browser reaches a socket: a client names the server as it likes, or not at all.
    for host in ["hookvisor", "evil.example:80", ""] {
        let response = request(&server.addr, "GET", "/healthz", &[("Host", host)], "");
        assert_eq!(response.status, 200, "Host {host:?}");
    }
    let headers = [("Content-Type", "text/plain")];
    let response = request(
        &server.addr,
        "POST",
        "/v1/turns/end",
        &headers,
        r#"{"trigger":"hook"}"#,
    );
    assert_eq!(response.status, 415, "{}", response.body);
    assert!(loop_guard_untouched(&server));
}

/// Answers `GET /healthz` on its own thread: `None` if that takes longer than `within`.
fn healthz_within(addr: &Addr, within: Duration) -> Option<u16> {
    let (tx, rx) = mpsc::channel();
    let addr = addr.clone();
    std::thread::spawn(move || {
        let _ = tx.send(request(&addr, "GET", "/healthz", &[], "").status);
    });
    rx.recv_timeout(within).ok()
}

/// Idle connections, half-sent heads and half-sent bodies: clients that never finish. The
/// server gets 300 file descriptors, as a small container might give it; 300 such clients used
/// to take them all, and then nothing was accepted any more.
#[test]
fn idle_and_half_sent_connections_do_not_stall_the_server() {
    const CLIENTS: usize = 300;
    let ws = workspace();
    let mut cmd = ws.hookvisor_command();
    cmd.args(["serve", "--listen", "127.0.0.1:0"]);
    // SAFETY: between fork and exec the child calls only setrlimit, which is async-signal-safe
    // and touches no memory shared with the parent.
    unsafe {
        cmd.pre_exec(|| {
            setrlimit(Resource::RLIMIT_NOFILE, CLIENTS as u64, CLIENTS as u64)
                .map_err(std::io::Error::from)
        });
    }
    let server = Server::spawn(cmd);
    let Addr::Tcp(addr) = &server.addr else {
        unreachable!()
    };
    let mut clients = Vec::new();
    for i in 0..CLIENTS {
        let mut client = TcpStream::connect(addr).unwrap();
        let start: &[u8] = match i % 3 {
            0 => b"",
            1 => b"GET /healthz HTTP/1.1\r\nHost: localhost\r\n",
            _ => {
                b"POST /v1/turns/end HTTP/1.1\r\nHost: localhost\r\n\
                   Content-Type: application/json\r\nContent-Length: 100\r\n\r\n{"
            }
        };
        client.write_all(start).unwrap();
        clients.push(client);
    }

    // The server reads a request in 5 s at most: the stuck clients make it wait that long,
    // but not forever.
    let bound = Duration::from_secs(20);
    let started = Instant::now();
    assert_eq!(
        healthz_within(&server.addr, bound),
        Some(200),
        "/healthz did not answer within {bound:?} of {CLIENTS} stuck connections"
    );
    eprintln!("/healthz answered after {:?}", started.elapsed());

    // Every stuck client was let go: an end of stream (after a 408 for the half-sent bodies).
    for (i, mut client) in clients.into_iter().enumerate() {
        let left = (started + 2 * bound).saturating_duration_since(Instant::now());
        client
            .set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        let mut rest = Vec::new();
        match client.read_to_end(&mut rest) {
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("client {i} ({} bytes sent) still open: {e}", i % 3),
        }
    }
    eprintln!("all {CLIENTS} closed after {:?}", started.elapsed());
    assert_eq!(healthz_within(&server.addr, bound), Some(200));
}

/// The agent can write the state dir: a hook's log replaced by a FIFO is refused at once, never
/// opened (which would wait for a writer and hold a thread), and the other routes answer.
#[test]
fn a_log_that_is_a_fifo_is_refused_at_once_not_waited_on() {
    let ws = workspace();
    let server = Server::tcp(&ws);
    let output = ws.state_dir().join("output");
    std::fs::create_dir_all(&output).unwrap();
    let log = output.join("lint.log");
    nix::unistd::mkfifo(&log, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();

    let (output_tx, output_rx) = mpsc::channel();
    let addr = server.addr.clone();
    std::thread::spawn(move || {
        let answer = request(&addr, "GET", "/hooks/lint/output", &[], "");
        let _ = output_tx.send((answer.status, answer.body));
    });
    let (status, body) = output_rx
        .recv_timeout(DEADLINE)
        .expect("the log request never finished: the server waited on the FIFO");
    assert_eq!(status, 500, "{body}");
    assert!(body.contains("not a log hookvisor wrote"), "{body}");
    assert!(!blocked_in_fifo_open(server.child.id()));
    assert_eq!(server.get("/v1/hooks").status, 200);
    assert_eq!(server.get("/hooks/status").status, 200);
}

/// True when a thread of `pid` waits in the open of a FIFO for its other end.
fn blocked_in_fifo_open(pid: u32) -> bool {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return false;
    };
    tasks.flatten().any(|task| {
        std::fs::read_to_string(task.path().join("wchan")).is_ok_and(|w| w == "wait_for_partner")
    })
}

/// The children routes (new with spawn) as the attacker tries them: a DNS-rebinding page
/// (another Host) and a page of another origin get 403 before the state dir is read, and a
/// child dir the agent planted as a link to a directory elsewhere, a FIFO status or a name
/// that is not UTF-8 is never read or waited on.
#[test]
fn children_routes_refuse_foreign_pages_and_planted_files() {
    use std::os::unix::ffi::OsStrExt;
    let ws = workspace();
    let children = ws.state_dir().join("children");
    std::fs::create_dir_all(&children).unwrap();
    // A directory elsewhere with a status.json the agent wants served.
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::write(elsewhere.path().join("status.json"), "{\"secret\":1}").unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), children.join("task.start-0-linked")).unwrap();
    // A child whose status.json is a FIFO: opening it would wait for a writer.
    let fifo_child = children.join("task.start-0-fifo");
    std::fs::create_dir(&fifo_child).unwrap();
    nix::unistd::mkfifo(
        &fifo_child.join("status.json"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    // A name that is not UTF-8.
    std::fs::create_dir(children.join(std::ffi::OsStr::from_bytes(b"task.start-0-\xff"))).unwrap();
    let server = Server::tcp(&ws);
    let port = port(&server);

    for path in ["/v1/children", "/v1/children/task.start-0-linked/status"] {
        let host = format!("evil.example:{port}");
        let response = request(&server.addr, "GET", path, &[("Host", &host)], "");
        assert_eq!(response.status, 403, "Host: {path}");
        let response = request(
            &server.addr,
            "GET",
            path,
            &[("Origin", "http://evil.example")],
            "",
        );
        assert_eq!(response.status, 403, "Origin: {path}");
    }

    let list = server.get("/v1/children");
    assert_eq!(list.status, 200, "{}", list.body);
    assert!(!list.body.contains("secret"), "{}", list.body);
    for name in ["task.start-0-linked", "task.start-0-fifo"] {
        let (tx, rx) = mpsc::channel();
        let addr = server.addr.clone();
        let path = format!("/v1/children/{name}/status");
        std::thread::spawn(move || {
            let _ = tx.send(request(&addr, "GET", &path, &[], ""));
        });
        let response = rx
            .recv_timeout(DEADLINE)
            .expect("the server waited on a planted file");
        assert_ne!(response.status, 200, "{name}: {}", response.body);
        assert!(!response.body.contains("secret"), "{}", response.body);
    }
    assert_eq!(
        request(
            &server.addr,
            "GET",
            "/v1/children/task.start-0-%FF/status",
            &[],
            ""
        )
        .status,
        400
    );
}

//! The dashboard in a real browser, and web pages that try to drive the server from one:
//! headless Chromium driven through chromedriver (WebDriver) with fantoccini, against the built
//! `hookvisor serve`.
//!
//! Needs Debian's `chromium` and `chromium-driver`. Without them the test fails under CI=true
//! and prints a note elsewhere. It leaves `target/dashboard.png` and `target/dashboard-events.png`
//! behind for people to look at.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Workspace;
use common::serve::{Addr, DEADLINE, Server, request};
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;
use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::{Value, json};

const CHROMIUM: &str = "/usr/bin/chromium";
const CHROMEDRIVER: &str = "/usr/bin/chromedriver";

/// A chromedriver on a free loopback port, killed on drop.
pub struct Driver {
    child: Child,
    url: String,
    _profile: tempfile::TempDir,
}

impl Driver {
    /// Starts chromedriver, or returns `None` (outside CI only) when the browser is missing.
    pub fn start() -> Option<Driver> {
        if !Path::new(CHROMIUM).exists() || !Path::new(CHROMEDRIVER).exists() {
            assert!(
                std::env::var_os("CI").is_none(),
                "{CHROMIUM} and {CHROMEDRIVER} are required: apt-get install chromium chromium-driver"
            );
            eprintln!("note: chromium or chromedriver not installed; skipping the browser test");
            return None;
        }
        // chromedriver takes no port 0; a port just freed by the kernel is free enough.
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        // Its own process group, so that dropping it also ends the browsers it started, even
        // when a failed test never closed its session.
        let mut child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .process_group(0)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start chromedriver");
        // It says when it listens.
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let start = Instant::now();
        loop {
            let line = rx
                .recv_timeout(DEADLINE.saturating_sub(start.elapsed()))
                .expect("chromedriver starts");
            if line.contains("started successfully") {
                break;
            }
        }
        Some(Driver {
            child,
            url: format!("http://127.0.0.1:{port}"),
            _profile: tempfile::tempdir().unwrap(),
        })
    }

    pub async fn browser(&self) -> Client {
        self.browser_with(&[]).await
    }

    /// A browser session with extra command-line switches.
    pub async fn browser_with(&self, extra: &[&str]) -> Client {
        let profile = self._profile.path().display();
        let mut args = vec![
            "--headless".to_owned(),
            "--no-sandbox".to_owned(),
            "--disable-gpu".to_owned(),
            "--disable-quic".to_owned(),
            "--no-first-run".to_owned(),
            "--disable-background-networking".to_owned(),
            "--disable-component-update".to_owned(),
            "--disable-sync".to_owned(),
            "--no-proxy-server".to_owned(),
            format!("--user-data-dir={profile}"),
            "--window-size=1280,760".to_owned(),
        ];
        args.extend(extra.iter().map(|a| a.to_string()));
        let capabilities = json!({
            "goog:chromeOptions": { "binary": CHROMIUM, "args": args }
        });
        let Value::Object(capabilities) = capabilities else {
            unreachable!()
        };
        ClientBuilder::new(HttpConnector::new())
            .capabilities(capabilities)
            .connect(&self.url)
            .await
            .expect("a browser session")
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        let group = Pid::from_raw(-(self.child.id() as i32));
        let _ = kill(group, Signal::SIGKILL);
        let _ = self.child.wait();
    }
}

/// The `data-hook` of every row of the hooks table, read in one script: the table is redrawn
/// on every event, and rows found one call before reading them may be stale by then.
pub async fn row_ids(client: &Client) -> Vec<String> {
    let ids = client
        .execute(
            "return Array.from(document.querySelectorAll('#hooks tbody tr'), r => r.dataset.hook);",
            vec![],
        )
        .await
        .unwrap();
    serde_json::from_value(ids).unwrap()
}

/// Polls the page until `css` matches an element whose text contains `needle`, returning that
/// text; the page changes on its own (events), so there is nothing to await but the condition.
pub async fn wait_for_text(client: &Client, css: &str, needle: &str) -> String {
    let start = Instant::now();
    loop {
        if let Ok(element) = client.find(Locator::Css(css)).await {
            let text = element.text().await.unwrap_or_default();
            if text.contains(needle) {
                return text;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{css}: {text:?} never contained {needle:?}"
            );
        }
        assert!(start.elapsed() < DEADLINE, "{css} never appeared");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

pub async fn wait_for(client: &Client, css: &str) {
    client
        .wait()
        .at_most(DEADLINE)
        .for_element(Locator::Css(css))
        .await
        .unwrap_or_else(|e| panic!("{css}: {e}"));
}

pub fn screenshot_path() -> PathBuf {
    // CARGO_TARGET_TMPDIR is <target>/tmp.
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .unwrap()
        .join("dashboard.png")
}

#[tokio::test]
async fn the_dashboard_lists_hooks_reruns_and_updates_live() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let ws = Workspace::git();
    ws.hook(
        "fails.sh",
        "session",
        "name: Database migrations\ndescription: apply pending migrations",
        "echo 'migrating <b>users</b>'\necho 'error: relation \"users\" already exists' >&2\nexit 3",
    );
    ws.hook(
        "lint.sh",
        "file",
        "name: Go format check\npattern: '*.go'",
        "echo formatted\nexit 0",
    );
    ws.hook("types.sh", "pre-commit", "pattern: '*.ts'", "exit 0");
    ws.hook("broken.sh", "nonsense", "", "exit 0");
    let server = Server::tcp(&ws);
    let Addr::Tcp(addr) = &server.addr else {
        unreachable!()
    };
    let client = driver.browser().await;
    client.goto(&format!("http://{addr}/")).await.unwrap();

    // The page lists the hooks and the file that will not run.
    wait_for(&client, "tr[data-hook='types']").await;
    let ids = row_ids(&client).await;
    assert_eq!(ids, ["fails", "lint", "types"]);
    // Read through wait_for_text: the table may be redrawn between finding the row and reading
    // it, and a redrawn row is a stale element, not a failure.
    let lint = wait_for_text(&client, "tr[data-hook='lint']", "not run yet").await;
    assert!(
        lint.contains("Go format check") && lint.contains("*.go") && lint.contains("not run yet"),
        "{lint}"
    );
    let problems = wait_for_text(&client, "#problems", "broken.sh").await;
    assert!(problems.contains("nonsense"), "{problems}");

    // Everything that follows happens without a reload: this mark would be gone.
    client
        .execute("window.hookvisorTestMark = 42; return 1;", vec![])
        .await
        .unwrap();
    wait_for(&client, "#live.on").await;

    // A rerun click: the hook shows as failed with its exit code and its output, as text.
    client
        .find(Locator::Css("tr[data-hook='fails'] button"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for(&client, "tr[data-hook='fails'][data-state='failure']").await;
    let row = wait_for_text(&client, "tr[data-hook='fails'] td.exit", "3").await;
    assert_eq!(row, "3");
    let output = wait_for_text(&client, "#output", "already exists").await;
    assert!(output.contains("migrating <b>users</b>"), "{output}");
    assert!(
        client
            .find_all(Locator::Css("#output b"))
            .await
            .unwrap()
            .is_empty(),
        "hook output was interpreted as HTML"
    );

    // A run made elsewhere (here through the API) appears live.
    let rerun = request(&server.addr, "POST", "/hooks/lint/rerun", &[], "");
    assert_eq!(rerun.status, 200, "{}", rerun.body);
    wait_for(&client, "tr[data-hook='lint'][data-state='success']").await;
    let runs = wait_for_text(&client, "tr[data-hook='lint'] td.num", "1").await;
    assert_eq!(runs, "1");
    let mark = client
        .execute("return window.hookvisorTestMark;", vec![])
        .await
        .unwrap();
    assert_eq!(mark, json!(42), "the page reloaded");

    // Back to the failing hook's output for the picture.
    client
        .find(Locator::Css("tr[data-hook='fails']"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for_text(&client, "#output-title", "Database migrations").await;
    let png = client.screenshot().await.unwrap();
    assert!(png.starts_with(b"\x89PNG"));
    std::fs::write(screenshot_path(), png).unwrap();
    client.close().await.unwrap();
}

/// Writes a declarative hook, `.discobot/hooks/<name>.yml`.
pub fn yml(ws: &Workspace, name: &str, front: &str) {
    ws.write(
        &format!(".discobot/hooks/{name}.yml"),
        &format!("---\n{front}\n---\n"),
    );
}

/// Event hooks sit beside the phase-1 ones with their event and source, and an event fired
/// through the API shows, without a reload, which hook blocked and which allowed, and the
/// event's decision; the hook's block reason, HTML included, stays text.
#[tokio::test]
async fn the_dashboard_shows_event_hooks_and_their_decisions_live() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let ws = Workspace::git();
    ws.hook("setup.sh", "session", "name: Setup", "exit 0");
    yml(&ws, "allow", "event: tool.before\nrun: exit 0");
    yml(
        &ws,
        "guard",
        "event: tool.before\ntool: Bash\n\
         on_failure: abort\n\
         run: 'test \"${command}\" != halt || exit 1; \
         test \"${command}\" != rm || { printf \"no <b>rm</b> here\" >&2; exit 2; }'",
    );
    yml(&ws, "later", "event: turn.end\nphase: post\nrun: exit 0");
    yml(&ws, "bad", "event: turn.end\nwhen: ${x} == (1\nrun: make");
    let server = Server::tcp(&ws);
    let Addr::Tcp(addr) = &server.addr else {
        unreachable!()
    };
    let client = driver.browser().await;
    client.goto(&format!("http://{addr}/")).await.unwrap();

    wait_for(&client, "tr[data-hook='later']").await;
    let ids = row_ids(&client).await;
    assert_eq!(ids, ["allow", "guard", "later", "setup"]);
    let guard = wait_for_text(&client, "tr[data-hook='guard']", "guard.yml").await;
    for shown in [
        ".discobot/hooks/guard.yml:1",
        "tool.before",
        "pre",
        "tool: Bash",
        "not run yet",
    ] {
        assert!(guard.contains(shown), "{shown:?} missing from {guard:?}");
    }
    let problems = wait_for_text(&client, "#problems", "bad.yml").await;
    assert_eq!(
        problems,
        ".discobot/hooks/bad.yml:3: when: expected ')' at column 11"
    );
    // Another tool's file, written while the page is open, is watched too; its problem is
    // placed in the workspace, not at an absolute path.
    ws.write(
        ".iteratr.hooks.yml",
        "hooks:\n  post_iteration:\n    - command: make\n      timeout: soon\n",
    );
    let problems = wait_for_text(&client, "#problems", ".iteratr.hooks.yml").await;
    assert!(
        problems.lines().any(|l| l
            .starts_with(".iteratr.hooks.yml:4: timeout: \"soon\" is no whole number of seconds")),
        "{problems}"
    );
    // A turn.end hook's type is its phase-1 kind; its event and phase are shown beside it.
    let later = wait_for_text(&client, "tr[data-hook='later'] td.type", "turn.end").await;
    assert!(
        later.starts_with("file") && later.contains("post"),
        "{later}"
    );
    // Event hooks run when their event fires: no rerun button; the phase-1 hook keeps its own.
    for (id, buttons) in [("allow", 0), ("guard", 0), ("later", 0), ("setup", 1)] {
        let found = client
            .find_all(Locator::Css(&format!("tr[data-hook='{id}'] button")))
            .await
            .unwrap();
        assert_eq!(found.len(), buttons, "{id}");
    }

    client
        .execute("window.hookvisorTestMark = 7; return 1;", vec![])
        .await
        .unwrap();
    wait_for(&client, "#live.on").await;

    let reply = server.post(
        "/v1/events/tool.before",
        r#"{"data":{"tool_name":"Bash","command":"rm"}}"#,
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    assert_eq!(reply.json()["decision"], "block", "{}", reply.body);

    wait_for(&client, "tr[data-hook='guard'][data-decision='blocked']").await;
    wait_for(&client, "tr[data-hook='allow'][data-decision='allowed']").await;
    let event = wait_for_text(&client, "#last-event", "block").await;
    assert_eq!(event, "tool.before → block");
    let exit = wait_for_text(&client, "tr[data-hook='guard'] td.exit", "2").await;
    assert_eq!(exit, "2");
    let later = client
        .find(Locator::Css("tr[data-hook='later']"))
        .await
        .unwrap();
    assert_eq!(
        later.attr("data-decision").await.unwrap(),
        None,
        "a hook of another event has no decision"
    );
    let title = client
        .find(Locator::Css("tr[data-hook='guard'] .decision"))
        .await
        .unwrap()
        .attr("title")
        .await
        .unwrap()
        .unwrap_or_default();
    assert!(title.contains("no <b>rm</b> here"), "{title:?}");
    assert!(
        client
            .find_all(Locator::Css("#hooks b, header b"))
            .await
            .unwrap()
            .is_empty(),
        "a hook's reason was interpreted as HTML"
    );

    // The same hook allowing the next call turns its mark around.
    let reply = server.post(
        "/v1/events/tool.before",
        r#"{"data":{"tool_name":"Bash","command":"ls"}}"#,
    );
    assert_eq!(reply.json()["decision"], "allow", "{}", reply.body);
    wait_for(&client, "tr[data-hook='guard'][data-decision='allowed']").await;
    wait_for_text(&client, "#last-event", "allow").await;
    // An aborted event calls no hook allowed: the results do not say which one aborted it.
    let reply = server.post(
        "/v1/events/tool.before",
        r#"{"data":{"tool_name":"Bash","command":"halt"}}"#,
    );
    assert_eq!(reply.json()["decision"], "abort", "{}", reply.body);
    wait_for(&client, "tr[data-hook='guard'][data-decision='aborted']").await;
    wait_for(&client, "tr[data-hook='allow'][data-decision='aborted']").await;
    wait_for_text(&client, "#last-event", "abort").await;
    let mark = client
        .execute("return window.hookvisorTestMark;", vec![])
        .await
        .unwrap();
    assert_eq!(mark, json!(7), "the page reloaded");
    let png = client.screenshot().await.unwrap();
    std::fs::write(
        screenshot_path().with_file_name("dashboard-events.png"),
        png,
    )
    .unwrap();
    client.close().await.unwrap();
}

/// A workspace whose hooks leave traces: `marker` writes a file when it runs, `secret` prints
/// what a page must not read. Returns the workspace and the marker's path.
fn attacked_workspace() -> (Workspace, PathBuf) {
    let ws = Workspace::git();
    let marker = ws.base().join("marker-ran");
    ws.hook(
        "marker.sh",
        "session",
        "",
        &format!("echo ran >> '{}'", marker.display()),
    );
    ws.hook("secret.sh", "session", "", "echo 'the secret is 42'");
    (ws, marker)
}

/// The hostile site: a second loopback HTTP server, on its own port, that serves `page` for
/// `/` and 404 for anything else. Returns its URL.
fn hostile_site(page: String) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let mut reader = BufReader::new(stream);
            let mut first = String::new();
            if reader.read_line(&mut first).is_err() {
                continue;
            }
            // The rest of the head; the requests are GETs without a body.
            let mut line = String::new();
            while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
                line.clear();
            }
            let (status, body) = if first.starts_with("GET / ") {
                ("200 OK", page.as_str())
            } else {
                ("404 Not Found", "")
            };
            let response = format!(
                "HTTP/1.0 {status}\r\nContent-Type: text/html\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let _ = reader.get_mut().write_all(response.as_bytes());
        }
    });
    url
}

/// The server's status as its own clients see it.
fn status(server: &Server) -> Value {
    request(&server.addr, "GET", "/hooks/status", &[], "").json()
}

#[tokio::test]
async fn a_page_on_another_origin_cannot_drive_the_server() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let (ws, marker) = attacked_workspace();
    let server = Server::tcp(&ws);
    let Addr::Tcp(addr) = &server.addr else {
        unreachable!()
    };
    // What any site can do without the server's consent: "simple" POSTs (no-cors, text/plain)
    // whose answers it cannot see but whose effects happen, and a read it hopes is allowed.
    let page = format!(
        r#"<!doctype html><title>hostile</title><script>
const target = "http://{addr}";
const post = (path, body) => fetch(target + path, {{ method: "POST", mode: "no-cors", body }})
  .then(() => "sent", (e) => "error: " + e);
(async () => {{
  const results = {{ rerun: await post("/hooks/marker/rerun", "{{}}"), turns: [] }};
  for (let i = 0; i < 5; i++) results.turns.push(await post("/v1/turns/end", '{{"trigger":"hook"}}'));
  try {{
    const response = await fetch(target + "/hooks/secret/output");
    results.read = "read: " + await response.text();
  }} catch (e) {{
    results.read = "error: " + e;
  }}
  window.results = results;
  const done = document.createElement("p");
  done.id = "done";
  document.body.appendChild(done);
}})();
</script>"#
    );
    let site = hostile_site(page);
    let secret = request(&server.addr, "POST", "/hooks/secret/rerun", &[], "");
    assert_eq!(secret.status, 200, "{}", secret.body);

    let client = driver.browser().await;
    client.goto(&site).await.unwrap();
    // Every fetch has settled once the page says so; the server answered each before that.
    wait_for(&client, "#done").await;
    let results = client
        .execute("return window.results;", vec![])
        .await
        .unwrap();
    assert_eq!(results["rerun"], "sent", "{results}");
    let read = results["read"].as_str().unwrap();
    assert!(
        read.starts_with("error"),
        "the page read the output: {read}"
    );

    assert!(!marker.exists(), "the page reran a hook");
    let status = status(&server);
    assert_eq!(status["hooks"]["marker"]["runCount"], 0, "{status}");
    assert!(
        status
            .get("consecutiveHookTurns")
            .is_none_or(|n| *n == json!(0)),
        "the page moved the loop guard: {status}"
    );
    client.close().await.unwrap();
}

#[tokio::test]
async fn a_rebound_name_cannot_read_or_drive_the_server() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let (ws, marker) = attacked_workspace();
    let server = Server::tcp(&ws);
    let Addr::Tcp(addr) = &server.addr else {
        unreachable!()
    };
    let port = addr.rsplit(':').next().unwrap();
    let secret = request(&server.addr, "POST", "/hooks/secret/rerun", &[], "");
    assert_eq!(secret.status, 200, "{}", secret.body);

    // DNS rebinding, after the switch: the attacker's name now resolves to this machine, so its
    // page and the server are one origin to the browser, and only the Host header tells them
    // apart.
    let client = driver
        .browser_with(&["--host-resolver-rules=MAP evil.test 127.0.0.1"])
        .await;
    client
        .goto(&format!("http://evil.test:{port}/"))
        .await
        .unwrap();
    let script = r#"
const done = arguments[arguments.length - 1];
const outcome = async (request) => {
  try {
    const response = await request;
    return [response.status, await response.text()];
  } catch (e) {
    return [0, String(e)];
  }
};
(async () => done({
  read: await outcome(fetch("/hooks/secret/output")),
  rerun: await outcome(fetch("/hooks/marker/rerun", {
    method: "POST", headers: { "Content-Type": "application/json" }, body: "{}",
  })),
}))();
"#;
    let results = client.execute_async(script, vec![]).await.unwrap();
    assert_eq!(results["read"][0], 403, "{results}");
    assert!(
        !results["read"][1].as_str().unwrap().contains("the secret"),
        "{results}"
    );
    assert_eq!(results["rerun"][0], 403, "{results}");
    assert!(!marker.exists(), "the page reran a hook");
    assert_eq!(status(&server)["hooks"]["marker"]["runCount"], 0);
    client.close().await.unwrap();
}

/// A workspace with a spawn hook whose child is a real `hookvisor fire` in its own state dir
/// (so the child has a `status.json` of its own, with `child-step`'s run in it), a detached
/// spawn that ends at once, and `approve`, whose status entry a test gives a callback wait.
/// Fires `task.complete` once and returns the workspace and the awaited child's dir name.
fn spawned_workspace() -> (Workspace, String) {
    let ws = Workspace::git();
    let exe = env!("CARGO_BIN_EXE_hookvisor");
    yml(
        &ws,
        "review",
        &format!("event: task.complete\naction: spawn\nargv: ['{exe}', fire, stage.complete]"),
    );
    yml(
        &ws,
        "watcher",
        "event: task.complete\naction: spawn\nawait: false\nargv: ['true']",
    );
    yml(&ws, "child-step", "event: stage.complete\nrun: exit 0");
    yml(&ws, "approve", "event: task.complete\nrun: exit 0");
    let out = ws.hookvisor(&["fire", "task.complete", "--json"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let child = "task.complete-0-review".to_owned();
    let own = ws
        .state_dir()
        .join("children")
        .join(&child)
        .join("status.json");
    assert!(own.exists(), "the child wrote no status of its own");
    (ws, child)
}

/// Gives `approve`'s entry a callback wait in `state`, as the callback listener writes it.
fn set_callback(ws: &Workspace, state: hookvisor_core::status::CallbackState) {
    hookvisor_core::StatusStore::new(ws.state_dir().join("status.json"))
        .update(|status| {
            let entry = status.hooks.get_mut("approve").expect("approve ran");
            entry.callback = Some(hookvisor_core::status::CallbackWait {
                state,
                since: "2026-01-01T10:00:00Z".into(),
                timeout_at: "2026-01-01T11:00:00Z".into(),
            });
        })
        .unwrap();
}

/// docs/EVENTS.md §4.3/§4.4 on the page: a webhook waiting for its callback says so (and when it
/// times out), live as the wait ends; a spawn hook lists its children, and the link of one
/// opens the child's own status on the page.
#[tokio::test]
async fn the_dashboard_shows_children_and_callback_waits() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let (ws, child) = spawned_workspace();
    set_callback(&ws, hookvisor_core::status::CallbackState::Waiting);
    let server = Server::tcp(&ws);
    let Addr::Tcp(addr) = &server.addr else {
        unreachable!()
    };
    let client = driver.browser().await;
    client.goto(&format!("http://{addr}/")).await.unwrap();

    let approve = wait_for_text(&client, "tr[data-hook='approve'] .callback", "waiting").await;
    assert!(
        approve.starts_with("waiting for approval since ") && approve.contains(", times out at "),
        "{approve}"
    );
    let link = format!("tr[data-hook='review'] li[data-child='{child}'] a");
    wait_for(&client, &link).await;
    let detached = wait_for_text(
        &client,
        "tr[data-hook='watcher'] li[data-child^='task.complete-0-watcher']",
        "detached",
    )
    .await;
    assert!(
        detached.contains("pid ") && detached.contains("exited"),
        "{detached}"
    );

    client
        .execute("window.hookvisorTestMark = 9; return 1;", vec![])
        .await
        .unwrap();
    wait_for(&client, "#live.on").await;
    client
        .find(Locator::Css(&link))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    let title = wait_for_text(&client, "#child-title", &child).await;
    assert_eq!(title, format!("Child {child}"));
    wait_for(
        &client,
        "#child-hooks tr[data-hook='child-step'][data-state='success']",
    )
    .await;
    assert!(
        client
            .find_all(Locator::Css("#child-hooks tr[data-hook='approve']"))
            .await
            .unwrap()
            .is_empty(),
        "the child's status is its own, not the parent's"
    );

    // The wait ends while the page is open: it says so without a reload.
    set_callback(&ws, hookvisor_core::status::CallbackState::Answered);
    wait_for_text(&client, "tr[data-hook='approve'] .callback", "answered").await;
    let mark = client
        .execute("return window.hookvisorTestMark;", vec![])
        .await
        .unwrap();
    assert_eq!(mark, json!(9), "the page reloaded");
    let png = client.screenshot().await.unwrap();
    std::fs::write(
        screenshot_path().with_file_name("dashboard-children.png"),
        png,
    )
    .unwrap();

    // Closing the child's panel takes `#child=` out of the address (window.history).
    client
        .find(Locator::Css("#child-close"))
        .await
        .unwrap()
        .click()
        .await
        .unwrap();
    wait_for(&client, "#child-panel[hidden]").await;
    let hash = client
        .execute("return location.hash;", vec![])
        .await
        .unwrap();
    assert_eq!(hash, json!(""));
    client.close().await.unwrap();
}

/// The children routes without a browser: the list says whose child is whose, a child's status
/// is its own, and names, links and the token are checked (the agent writes the state dir).
#[test]
fn the_children_routes_read_only_what_hookvisor_made() {
    let (ws, child) = spawned_workspace();
    let children = ws.state_dir().join("children");
    // A child dir the agent swapped for a link to another state dir, and a status that is one.
    std::os::unix::fs::symlink(ws.state_dir(), children.join("task.complete-0-planted")).unwrap();
    std::fs::create_dir(children.join("task.complete-0-review-1")).unwrap();
    std::os::unix::fs::symlink(
        ws.state_dir().join("status.json"),
        children.join("task.complete-0-review-1/status.json"),
    )
    .unwrap();
    let server = Server::start(
        &ws,
        &["--listen", "127.0.0.1:0"],
        &[("HOOKVISOR_TOKEN", "s3cret")],
    );
    let auth = [("Authorization", "Bearer s3cret")];
    let get = |path: &str| request(&server.addr, "GET", path, &auth, "");

    assert_eq!(
        request(&server.addr, "GET", "/v1/children", &[], "").status,
        401
    );
    let list = get("/v1/children");
    assert_eq!(list.status, 200, "{}", list.body);
    let list = list.json();
    let by_name = |name: &str| {
        list["children"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} not in {list}"))
    };
    let review = by_name(&child);
    assert_eq!(
        (&review["hookId"], &review["hasStatus"], &review["detached"]),
        (&json!("review"), &json!(true), &Value::Null)
    );
    let retry = by_name("task.complete-0-review-1");
    assert_eq!(retry["hookId"], "review");
    assert_eq!(
        retry["hasStatus"], false,
        "a linked status is none: {retry}"
    );
    let watcher = list["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["hookId"] == "watcher")
        .unwrap_or_else(|| panic!("no watcher child in {list}"));
    assert!(
        watcher["detached"]["pid"].as_i64().unwrap() > 0,
        "{watcher}"
    );
    assert!(
        list["children"]
            .as_array()
            .unwrap()
            .iter()
            .all(|c| c["name"] != "task.complete-0-planted"),
        "a linked child dir is listed: {list}"
    );

    let own = get(&format!("/v1/children/{child}/status"));
    assert_eq!(own.status, 200, "{}", own.body);
    let own = own.json();
    assert_eq!(own["hooks"]["child-step"]["lastResult"], "success", "{own}");
    assert!(own["hooks"].get("review").is_none(), "{own}");
    assert_eq!(
        request(
            &server.addr,
            "GET",
            &format!("/v1/children/{child}/status"),
            &[],
            ""
        )
        .status,
        401
    );
    for (name, status, says) in [
        ("task.complete-0-planted", 403, "no directory"),
        ("task.complete-0-review-1", 403, "symbolic link"),
        ("task.complete-0-nobody", 404, "does not exist"),
        ("..", 400, "no child name"),
        ("a..b", 400, "no child name"),
        ("%2E%2E%2Fstatus.json", 400, "no child name"),
        ("x%20y", 400, "no child name"),
    ] {
        let answer = get(&format!("/v1/children/{name}/status"));
        assert_eq!(answer.status, status, "{name}: {}", answer.body);
        let error = answer.json()["error"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        assert!(error.contains(says), "{name}: {error}");
    }
}

//! The dashboard's run history, run output, session switcher and turn timeline (issue 32) in
//! headless Chromium, against the built `hookvisor serve`; the browser set-up is the one of
//! `dashboard.rs`. `the_dashboard_screenshots` makes the pictures of docs/guide/dashboard.md:
//! `SCREENSHOTS=overwrite cargo test -p hookvisor --test serve -- dashboard_screenshots`
//! rewrites docs/images/dashboard-*.png; without it they go to `target/`.

use crate::common;
use crate::dashboard::{Driver, screenshot_path, wait_for, wait_for_text, yml};

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::Workspace;
use common::serve::{Addr, DEADLINE, Server};
use fantoccini::actions::{InputSource, KeyAction, KeyActions};
use fantoccini::key::Key;
use fantoccini::{Client, Locator};
use serde_json::{Value, json};

/// Runs `script` in the page and returns its value (one script: the page redraws on events, and
/// elements found one call before reading them may be stale by then).
async fn js(client: &Client, script: &str) -> Value {
    client.execute(script, vec![]).await.unwrap()
}

/// Polls `script` until it returns `true`; the page changes on its own (events, polls), so there
/// is nothing to await but the condition. `what` names it in the failure.
async fn wait_until(client: &Client, script: &str, what: &str) {
    let start = Instant::now();
    loop {
        if js(client, script).await == json!(true) {
            return;
        }
        assert!(start.elapsed() < DEADLINE, "never true: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Clicks what `css` finds; a row redrawn between finding and clicking it is found again.
async fn click(client: &Client, css: &str) {
    let start = Instant::now();
    loop {
        let tried = match client.find(Locator::Css(css)).await {
            Ok(element) => element.click().await,
            Err(e) => Err(e),
        };
        match tried {
            Ok(()) => return,
            Err(e) => assert!(start.elapsed() < DEADLINE, "{css}: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Presses a key on the real keyboard, wherever the focus is.
async fn press(client: &Client, key: char) {
    let keys = KeyActions::new("keyboard".into())
        .then(KeyAction::Down { value: key })
        .then(KeyAction::Up { value: key });
    client.perform_actions(keys).await.unwrap();
}

/// Presses Tab until the focused element matches `css`, as a keyboard user gets there.
async fn tab_to(client: &Client, css: &str) {
    let check = format!("return document.activeElement.matches({});", json!(css));
    for _ in 0..60 {
        press(client, Key::Tab.into()).await;
        if js(client, &check).await == json!(true) {
            return;
        }
    }
    let at = js(
        client,
        "return document.activeElement.outerHTML.slice(0, 200);",
    )
    .await;
    panic!("Tab never reached {css}; the focus is on {at}");
}

/// The server's address, for the page.
fn url(server: &Server) -> String {
    let Addr::Tcp(addr) = &server.addr else {
        unreachable!()
    };
    format!("http://{addr}/")
}

/// Reruns `id` through the API from another thread (a rerun answers when the run ends).
fn rerun_in_background(server: &Server, id: &str) -> std::thread::JoinHandle<u16> {
    let addr = server.addr.clone();
    let path = format!("/hooks/{id}/rerun");
    std::thread::spawn(move || common::serve::request(&addr, "POST", &path, &[], "").status)
}

fn rerun(server: &Server, id: &str) {
    let reply = server.post(&format!("/hooks/{id}/rerun"), "");
    assert_eq!(reply.status, 200, "{}", reply.body);
}

/// A hook's sparkline in the table: the results of its bars, oldest first.
async fn spark_results(client: &Client, id: &str) -> Vec<String> {
    let script = format!(
        "return Array.from(document.querySelectorAll('tr[data-hook={id}] svg.spark g'), \
         g => g.dataset.result);"
    );
    serde_json::from_value(js(client, &script).await).unwrap()
}

/// A session hook that fails on every third run, taking a different time on each, and prints
/// what run it is; its counter lives outside the workspace (the server watches the workspace).
fn flaky_hook(ws: &Workspace, file: &str, name: &str) -> PathBuf {
    let counter = ws.base().join(format!("{file}.count"));
    ws.hook(
        file,
        "session",
        &format!("name: {name}"),
        &format!(
            "n=$(cat '{c}' 2>/dev/null || echo 0); n=$((n + 1)); echo $n > '{c}'\n\
             sleep 0.$(( (n * 37) % 9 ))\n\
             echo \"test run $n: 41 passed\"\n\
             if [ $((n % 3)) -eq 0 ]; then echo \"test run $n: 1 failed (db_pool)\" >&2; exit 1; fi",
            c = counter.display()
        ),
    );
    counter
}

/// History: each hook's sparkline shows its runs with their results (also as a shape and a
/// label), updated live from runStarted/runFinished; the selected hook's runs are listed, and a
/// run's log is shown while it runs, appended as the hook prints.
#[tokio::test]
async fn the_dashboard_shows_history_and_streams_a_running_hook() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let ws = Workspace::git();
    flaky_hook(&ws, "tests.sh", "Unit tests");
    // Two gates: what the hook prints between them reaches the page by no event, only by
    // the page asking for the log's new bytes while the run runs.
    let gate = ws.base().join("gate");
    let last_gate = ws.base().join("last-gate");
    ws.hook(
        "stream.sh",
        "session",
        "name: Slow build",
        &format!(
            "echo 'step 1: <b>compiled</b>'\n\
             while [ ! -e '{g}' ]; do sleep 0.05; done\n\
             echo 'step 2: linked'\n\
             while [ ! -e '{l}' ]; do sleep 0.05; done\n\
             echo 'step 3: done'",
            g = gate.display(),
            l = last_gate.display()
        ),
    );
    let server = Server::tcp(&ws);
    for _ in 0..3 {
        rerun(&server, "tests");
    }
    let client = driver.browser().await;
    client.goto(&url(&server)).await.unwrap();

    // The history recorded before the page opened: three runs, the third failed.
    wait_for(
        &client,
        "tr[data-hook='tests'] svg.spark g[data-result='failure']",
    )
    .await;
    assert_eq!(
        spark_results(&client, "tests").await,
        ["success", "success", "failure"]
    );
    // Not by colour alone: the failed run's bar carries a cross, and the chart says it in words.
    let label = js(
        &client,
        "const s = document.querySelector(\"tr[data-hook='tests'] svg.spark\"); \
         return [s.getAttribute('aria-label'), \
                 s.querySelectorAll(\"g[data-result='failure'] path.mark\").length];",
    )
    .await;
    assert_eq!(label[1], 1, "{label}");
    let words = label[0].as_str().unwrap();
    assert!(
        words.contains("2 success") && words.contains("1 failure"),
        "{words}"
    );
    let stream = wait_for_text(&client, "tr[data-hook='stream'] .spark-cell", "no runs").await;
    assert_eq!(stream, "no runs yet");

    client
        .execute("window.hookvisorTestMark = 32; return 1;", vec![])
        .await
        .unwrap();
    wait_for(&client, "#live.on").await;

    // A run made elsewhere appears live.
    rerun(&server, "tests");
    wait_until(
        &client,
        "return document.querySelectorAll(\"tr[data-hook='tests'] svg.spark g\").length === 4;",
        "a fourth bar",
    )
    .await;

    // The selected hook's runs, newest first, with result words and the newest run's log.
    click(&client, "tr[data-hook='tests']").await;
    wait_for_text(&client, "#history-title", "Unit tests").await;
    wait_for(&client, "#runs tr[data-run='4'][data-result='success']").await;
    let failed = wait_for_text(&client, "#runs tr[data-run='3']", "failure").await;
    assert!(failed.contains("✗ failure"), "{failed}");
    let output = wait_for_text(&client, "#output", "test run 4").await;
    assert!(output.contains("41 passed"), "{output}");
    // An older run's log, picked in the list.
    click(&client, "#runs tr[data-run='3']").await;
    let output = wait_for_text(&client, "#output", "test run 3").await;
    assert!(output.contains("1 failed (db_pool)"), "{output}");
    wait_for_text(&client, "#output-title", "run 3").await;

    // A hook that prints, waits for the gate file, prints again: its log shows while it runs.
    click(&client, "tr[data-hook='stream']").await;
    wait_for_text(&client, "#history-title", "Slow build").await;
    let running = rerun_in_background(&server, "stream");
    wait_for(&client, "#runs tr[data-run='1'][data-result='running']").await;
    wait_for(
        &client,
        "tr[data-hook='stream'] svg.spark g[data-result='running']",
    )
    .await;
    let output = wait_for_text(&client, "#output", "step 1").await;
    assert_eq!(output.trim(), "step 1: <b>compiled</b>", "printed as text");
    assert!(
        client
            .find_all(Locator::Css("#output b"))
            .await
            .unwrap()
            .is_empty(),
        "hook output was interpreted as HTML"
    );
    wait_for(&client, "#output[data-running='true']").await;
    std::fs::write(&gate, "").unwrap();
    let output = wait_for_text(&client, "#output", "step 2").await;
    assert_eq!(
        output, "step 1: <b>compiled</b>\nstep 2: linked",
        "appended once"
    );
    wait_for(&client, "#runs tr[data-run='1'][data-result='running']").await;
    std::fs::write(&last_gate, "").unwrap();
    let output = wait_for_text(&client, "#output", "step 3").await;
    assert_eq!(
        output, "step 1: <b>compiled</b>\nstep 2: linked\nstep 3: done",
        "appended once"
    );
    wait_for(&client, "#runs tr[data-run='1'][data-result='success']").await;
    wait_for(&client, "#output[data-running='false']").await;
    assert_eq!(running.join().unwrap(), 200);
    let mark = js(&client, "return window.hookvisorTestMark;").await;
    assert_eq!(mark, json!(32), "the page reloaded");
    client.close().await.unwrap();
}

/// The API's view of the sessions, for finding a child's id.
fn sessions(server: &Server) -> Vec<Value> {
    let reply = server.get("/v1/sessions");
    assert_eq!(reply.status, 200, "{}", reply.body);
    reply.json()["sessions"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

/// Fires `event` in `session` through the API; returns the reply.
fn fire(server: &Server, session: &str, event: &str, data: Value) -> Value {
    let body = json!({ "session_id": session, "data": data }).to_string();
    let reply = server.post(&format!("/v1/events/{event}"), &body);
    assert_eq!(reply.status, 200, "{event}: {}", reply.body);
    reply.json()
}

/// A workspace with hooks on a turn: `prompt` on turn.start, `guard` on Bash that denies `rm`,
/// `tests` on turn.end that re-prompts until the file `fixed` exists (outside the workspace),
/// and `review`, a spawn hook on task.complete whose child is a real `hookvisor fire`.
fn turn_workspace() -> (Workspace, PathBuf) {
    let ws = Workspace::git();
    let fixed = ws.base().join("fixed");
    yml(
        &ws,
        "prompt",
        "name: Prompt log\nevent: turn.start\nrun: exit 0",
    );
    yml(
        &ws,
        "guard",
        "name: No rm\nevent: tool.before\ntool: Bash\n\
         run: 'test \"${command}\" != rm || { echo \"rm is not allowed here\" >&2; exit 2; }'",
    );
    yml(
        &ws,
        "tests",
        &format!(
            "name: Tests pass\nevent: turn.end\n\
             run: 'test -e {f} || {{ printf \"2 tests failed:\\n  <b>parse_args</b>\\n\" >&2; exit 2; }}'",
            f = fixed.display()
        ),
    );
    let exe = env!("CARGO_BIN_EXE_hookvisor");
    yml(
        &ws,
        "review",
        &format!(
            "name: Review\nevent: task.complete\naction: spawn\nargv: ['{exe}', fire, stage.complete]"
        ),
    );
    yml(&ws, "child-step", "event: stage.complete\nrun: exit 0");
    (ws, fixed)
}

/// One agent turn of `session`: a prompt, two Bash calls (one denied), a stop that is
/// re-prompted, a third call and a stop that passes. Returns the re-prompt's reason.
fn play_turn(server: &Server, session: &str, fixed: &Path) -> String {
    fire(
        server,
        session,
        "turn.start",
        json!({ "prompt": "fix the parser" }),
    );
    let denied = fire(
        server,
        session,
        "tool.before",
        json!({ "tool_name": "Bash", "command": "rm" }),
    );
    assert_eq!(denied["decision"], "block", "{denied}");
    let allowed = fire(
        server,
        session,
        "tool.before",
        json!({ "tool_name": "Bash", "command": "cargo test" }),
    );
    assert_eq!(allowed["decision"], "allow", "{allowed}");
    let stop = fire(server, session, "turn.end", json!({}));
    assert_eq!(stop["decision"], "block", "{stop}");
    let reason = stop["reason"].as_str().unwrap().to_owned();
    std::fs::write(fixed, "").unwrap();
    let stop = fire(server, session, "turn.end", json!({}));
    assert_eq!(stop["decision"], "allow", "{stop}");
    std::fs::remove_file(fixed).unwrap();
    reason
}

/// The session switcher lists the workspace's sessions, a spawned child under the session that
/// spawned it; the selected session's timeline shows its turn: turn.start, the tool gates with
/// what they decided, turn.end, and the re-prompt with the exact text the model was sent.
#[tokio::test]
async fn the_dashboard_shows_sessions_and_a_turn_timeline() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let (ws, fixed) = turn_workspace();
    let server = Server::tcp(&ws);
    let reason = play_turn(&server, "sess-older", &fixed);
    fire(&server, "sess-older", "task.complete", json!({}));
    let client = driver.browser().await;
    client.goto(&url(&server)).await.unwrap();

    // The child the spawn made is listed under the session that spawned it, not beside it.
    let child = sessions(&server)
        .into_iter()
        .find(|s| s["parent"] == "sess-older")
        .unwrap_or_else(|| panic!("no child of sess-older in {:?}", sessions(&server)));
    let child_id = child["id"].as_str().unwrap().to_owned();
    let nested = format!(
        "#sessions > li[data-session='sess-older'] > ul > li[data-session={}] button",
        json!(child_id)
    );
    wait_for(&client, &nested).await;
    let top = js(
        &client,
        "return Array.from(document.querySelectorAll('#sessions > li'), l => l.dataset.session);",
    )
    .await;
    assert!(
        !top.as_array().unwrap().contains(&json!(child_id)),
        "the child is listed at the top: {top}"
    );

    // The most recent session is shown first; a turn of another session arrives live and the
    // switcher offers it without a reload.
    client
        .execute("window.hookvisorTestMark = 33; return 1;", vec![])
        .await
        .unwrap();
    wait_for(&client, "#live.on").await;
    fire(
        &server,
        "sess-newer",
        "turn.start",
        json!({ "prompt": "hello" }),
    );
    wait_for(&client, "#sessions > li[data-session='sess-newer'] button").await;

    click(
        &client,
        "#sessions > li[data-session='sess-older'] > button",
    )
    .await;
    wait_for(&client, "#timeline[data-session='sess-older'] li").await;
    let kinds = js(
        &client,
        "return Array.from(document.querySelectorAll('#timeline > li'), \
         l => [l.dataset.kind, l.dataset.decision || '', l.dataset.reprompt || '']);",
    )
    .await;
    let kinds: Vec<(String, String, String)> = serde_json::from_value(kinds).unwrap();
    let kind_list: Vec<&str> = kinds.iter().map(|k| k.0.as_str()).collect();
    let first = |kind: &str| {
        kind_list
            .iter()
            .position(|k| *k == kind)
            .unwrap_or_else(|| panic!("no {kind} in {kinds:?}"))
    };
    assert!(
        first("turn.start") < first("tool.before") && first("tool.before") < first("turn.end"),
        "{kinds:?}"
    );
    let gates: Vec<&str> = kinds
        .iter()
        .filter(|k| k.0 == "tool.before")
        .map(|k| k.1.as_str())
        .collect();
    assert_eq!(gates, ["block", "allow"], "{kinds:?}");
    let denied = wait_for_text(&client, "#timeline > li[data-kind='tool.before']", "denied").await;
    assert!(denied.contains("No rm"), "{denied}");

    // The re-prompt, with the text exactly as the agent was sent it (HTML in it stays text).
    let sent = js(
        &client,
        "const l = document.querySelector(\"#timeline > li[data-reprompt='true']\"); \
         return l && [l.textContent, l.querySelector('pre.agent-text').textContent];",
    )
    .await;
    assert!(sent.is_array(), "no re-prompt in the timeline: {kinds:?}");
    assert!(sent[0].as_str().unwrap().contains("re-prompt"), "{sent}");
    assert_eq!(sent[1], json!(reason), "the text the model saw");
    assert!(
        client
            .find_all(Locator::Css("#timeline b"))
            .await
            .unwrap()
            .is_empty(),
        "the re-prompt was interpreted as HTML"
    );

    // The re-prompting run's log opens from the timeline.
    click(
        &client,
        "#timeline > li[data-reprompt='true'] button.runlink",
    )
    .await;
    wait_for_text(&client, "#output-title", "Tests pass").await;
    wait_for_text(&client, "#output", "parse_args").await;

    // Another session's timeline is its own; the switcher works by keyboard.
    tab_to(&client, "#sessions li[data-session='sess-newer'] button").await;
    press(&client, Key::Enter.into()).await;
    wait_for(&client, "#timeline[data-session='sess-newer']").await;
    wait_for(
        &client,
        "#sessions li[data-session='sess-newer'] button[aria-current='true']",
    )
    .await;
    wait_until(
        &client,
        "return Array.from(document.querySelectorAll('#timeline > li'), l => l.dataset.kind)\
         .join() === 'turn.start';",
        "sess-newer's timeline is its one turn.start",
    )
    .await;
    let mark = js(&client, "return window.hookvisorTestMark;").await;
    assert_eq!(mark, json!(33), "the page reloaded");
    client.close().await.unwrap();
}

/// The page by keyboard alone: Tab reaches a hook's row, Enter opens its history, Space on a
/// run shows its log (the session switcher's keys are in the timeline test); the focus is
/// visible, and a live redraw leaves it where it was.
#[tokio::test]
async fn the_dashboard_works_by_keyboard() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let ws = Workspace::git();
    flaky_hook(&ws, "tests.sh", "Unit tests");
    ws.hook("other.sh", "session", "name: Other", "echo other");
    let server = Server::tcp(&ws);
    rerun(&server, "tests");
    rerun(&server, "tests");
    let client = driver.browser().await;
    client.goto(&url(&server)).await.unwrap();
    wait_for(&client, "tr[data-hook='tests'] svg.spark").await;
    wait_for(&client, "#live.on").await;

    tab_to(&client, "tr[data-hook='tests']").await;
    let outline = js(
        &client,
        "return getComputedStyle(document.activeElement).outlineStyle;",
    )
    .await;
    assert_ne!(outline, "none", "the focus is not visible");
    press(&client, Key::Enter.into()).await;
    wait_for_text(&client, "#history-title", "Unit tests").await;
    wait_for(&client, "tr[data-hook='tests'][aria-current='true']").await;

    // A run elsewhere redraws the table; the focus stays on the row.
    rerun(&server, "other");
    wait_for(&client, "tr[data-hook='other'][data-state='success']").await;
    wait_until(
        &client,
        "return document.querySelectorAll(\"tr[data-hook='other'] svg.spark g\").length === 1;",
        "other's run in its sparkline",
    )
    .await;
    let focused = js(
        &client,
        "return document.activeElement.dataset.focusKey || null;",
    )
    .await;
    assert_eq!(focused, "hook:tests", "a redraw moved the focus");

    tab_to(&client, "#runs tr[data-run='1']").await;
    let label = js(
        &client,
        "return document.activeElement.getAttribute('aria-label');",
    )
    .await;
    assert!(
        label.as_str().unwrap().starts_with("run 1: success"),
        "{label}"
    );
    press(&client, Key::Space.into()).await;
    wait_for_text(&client, "#output-title", "run 1").await;
    wait_for_text(&client, "#output", "test run 1").await;
    wait_for(&client, "#runs tr[data-run='1'][aria-current='true']").await;

    let labelled = js(
        &client,
        "return Array.from(document.querySelectorAll('svg.spark, #sessions button, \
         tbody tr[tabindex]')).every(e => (e.getAttribute('aria-label') || '').length > 0);",
    )
    .await;
    assert_eq!(labelled, json!(true), "an element without an aria-label");
    client.close().await.unwrap();
}

/// A restarted server: the page reconnects by itself and the history, read from disk, is still
/// there, live and after a reload.
#[tokio::test]
async fn the_dashboard_survives_a_server_restart() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let ws = Workspace::git();
    flaky_hook(&ws, "tests.sh", "Unit tests");
    let server = Server::tcp(&ws);
    let Addr::Tcp(addr) = server.addr.clone() else {
        unreachable!()
    };
    rerun(&server, "tests");
    rerun(&server, "tests");
    let client = driver.browser().await;
    client.goto(&url(&server)).await.unwrap();
    wait_for(&client, "#live.on").await;
    wait_until(
        &client,
        "return document.querySelectorAll(\"tr[data-hook='tests'] svg.spark g\").length === 2;",
        "two runs",
    )
    .await;
    client
        .execute("window.hookvisorTestMark = 34; return 1;", vec![])
        .await
        .unwrap();

    assert!(server.stop().success());
    wait_for(&client, "#live.off").await;
    let server = Server::start(&ws, &["--listen", &addr], &[]);
    wait_for(&client, "#live.on").await;
    // The third run is the one that fails; it arrives over the new event stream.
    rerun(&server, "tests");
    wait_until(
        &client,
        "return Array.from(document.querySelectorAll(\"tr[data-hook='tests'] svg.spark g\"), \
         g => g.dataset.result).join() === 'success,success,failure';",
        "three runs, the third failed, without a reload",
    )
    .await;
    let mark = js(&client, "return window.hookvisorTestMark;").await;
    assert_eq!(mark, json!(34), "the page reloaded");

    client.refresh().await.unwrap();
    wait_until(
        &client,
        "return Array.from(document.querySelectorAll(\"tr[data-hook='tests'] svg.spark g\"), \
         g => g.dataset.result).join() === 'success,success,failure';",
        "three runs after a reload",
    )
    .await;
    client.close().await.unwrap();
}

/// docs/images/dashboard-*.png, the pictures of docs/guide/dashboard.md and the README, from a
/// sample workspace at 1000×650; `SCREENSHOTS=overwrite` writes them there, else to `target/`.
#[tokio::test]
async fn the_dashboard_screenshots() {
    let Some(driver) = Driver::start() else {
        return;
    };
    let (ws, fixed) = turn_workspace();
    flaky_hook(&ws, "unit.sh", "Unit tests");
    ws.hook(
        "fmt.sh",
        "file",
        "name: Format check\npattern: '*.rs'",
        "echo formatted",
    );
    ws.hook(
        "migrate.sh",
        "session",
        "name: Database migrations",
        "echo 'applying 0042_users.sql'\necho 'ok'",
    );
    let server = Server::tcp(&ws);
    for _ in 0..14 {
        rerun(&server, "unit");
    }
    rerun(&server, "migrate");
    rerun(&server, "fmt");
    play_turn(&server, "3f9c2a7e-claude", &fixed);
    fire(&server, "3f9c2a7e-claude", "task.complete", json!({}));
    fire(&server, "b81d04c2-codex", "turn.start", json!({}));

    let client = driver.browser().await;
    client.goto(&url(&server)).await.unwrap();
    // 1000×650 of page: the window's size less what its frame takes.
    let frame = js(
        &client,
        "return [window.outerWidth - window.innerWidth, window.outerHeight - window.innerHeight];",
    )
    .await;
    let frame = |i: usize| u32::try_from(frame[i].as_u64().unwrap()).unwrap();
    client
        .set_window_size(1000 + frame(0), 650 + frame(1))
        .await
        .unwrap();
    wait_for(&client, "#live.on").await;
    wait_for(&client, "tr[data-hook='fmt'] svg.spark").await;
    wait_for(
        &client,
        "#sessions li[data-session='3f9c2a7e-claude'] ul li",
    )
    .await;
    let dir = if std::env::var_os("SCREENSHOTS").is_some_and(|v| v == "overwrite") {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/images")
    } else {
        screenshot_path().parent().unwrap().to_owned()
    };
    let shoot = |name: &'static str| {
        let client = client.clone();
        let path = dir.join(name);
        async move {
            let png = client.screenshot().await.unwrap();
            assert!(png.starts_with(b"\x89PNG"));
            // The IHDR chunk's width and height.
            assert_eq!(
                (&png[16..20], &png[20..24]),
                (&1000u32.to_be_bytes()[..], &650u32.to_be_bytes()[..]),
                "{name}: not 1000×650"
            );
            std::fs::write(&path, png).unwrap();
        }
    };
    shoot("dashboard-hooks.png").await;

    // The history and a run's log.
    click(&client, "tr[data-hook='unit']").await;
    wait_for(&client, "#runs tr[data-run='12']").await;
    click(&client, "#runs tr[data-run='12']").await;
    wait_for_text(&client, "#output", "test run 12").await;
    js(
        &client,
        "document.getElementById('history-panel').scrollIntoView(); return 1;",
    )
    .await;
    shoot("dashboard-history.png").await;

    // The sessions and the timeline of the one with the re-prompt.
    click(
        &client,
        "#sessions > li[data-session='3f9c2a7e-claude'] > button",
    )
    .await;
    wait_for(
        &client,
        "#timeline[data-session='3f9c2a7e-claude'] li[data-reprompt='true']",
    )
    .await;
    js(
        &client,
        "document.getElementById('sessions-heading').scrollIntoView(); return 1;",
    )
    .await;
    shoot("dashboard-timeline.png").await;
    client.close().await.unwrap();
}

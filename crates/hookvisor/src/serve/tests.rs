//! The router called directly with `tower::ServiceExt::oneshot` (axum's testing example); the
//! same routes over real sockets are in `tests/serve/serve.rs`.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::Value;
use tower::ServiceExt;

use super::*;

struct Fixture {
    _dir: tempfile::TempDir,
    state: Arc<AppState>,
}

fn fixture(token: Option<&str>) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let workspace = dir.path().canonicalize().unwrap().join("ws");
    let hooks = workspace.join(".discobot/hooks");
    fs::create_dir_all(&hooks).unwrap();
    let hook = |name: &str, text: &str| {
        let path = hooks.join(name);
        fs::write(&path, text).unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
    };
    hook(
        "fails.sh",
        "#!/bin/sh\n#---\n# name: Always fails\n# type: session\n#---\necho 'it <b>broke</b>'\nexit 3\n",
    );
    hook(
        "lint.sh",
        "#!/bin/sh\n#---\n# type: file\n# pattern: '*.rs'\n#---\nexit 0\n",
    );
    hook("broken.sh", "#!/bin/sh\n#---\n# type: nonsense\n#---\n");
    let ctx = Context {
        workspace,
        session_id: "test".into(),
        state_dir: dir.path().join("state"),
    };
    Fixture {
        state: AppState::new(ctx, token.map(str::to_owned), 3),
        _dir: dir,
    }
}

/// The guard of a server on the default address.
fn guard() -> Guard {
    Guard::Tcp(listen::DEFAULT_ADDR.parse().unwrap())
}

async fn call(
    state: &Arc<AppState>,
    method: Method,
    path: &str,
    token: Option<&str>,
) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method.clone()).uri(path);
    if let Some(token) = token {
        request = request.header(header::AUTHORIZATION, format!("Bearer {token}"));
    }
    if method == Method::POST {
        request = request.header(header::CONTENT_TYPE, "application/json");
    }
    let response = app(state.clone(), guard())
        .oneshot(request.body(Body::empty()).unwrap())
        .await
        .unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let body = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    (status, body)
}

#[tokio::test]
async fn routes_answer_with_their_shapes() {
    let f = fixture(None);
    let (code, body) = call(&f.state, Method::GET, "/healthz", None).await;
    assert_eq!((code, body), (StatusCode::OK, Value::String("ok\n".into())));

    let (code, list) = call(&f.state, Method::GET, "/v1/hooks", None).await;
    assert_eq!(code, StatusCode::OK);
    let ids: Vec<&str> = list["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["fails", "lint"]);
    let problems = list["problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{list}");
    assert!(problems[0]["path"].as_str().unwrap().ends_with("broken.sh"));
    assert!(problems[0]["reason"].as_str().unwrap().contains("nonsense"));

    // Never run: listed as pending, not missing.
    let (code, status) = call(&f.state, Method::GET, "/hooks/status", None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(status["hooks"]["lint"]["lastResult"], "pending", "{status}");
    assert_eq!(status["hooks"]["fails"]["type"], "session");
    assert_eq!(status["hooks"]["fails"]["runCount"], 0);

    let (code, out) = call(&f.state, Method::GET, "/hooks/fails/output", None).await;
    assert_eq!(code, StatusCode::OK);
    assert_eq!(
        out,
        serde_json::json!({"output": "", "sizeBytes": 0, "displayedBytes": 0, "tooLarge": false,
                           "truncated": false})
    );

    let (code, page) = call(&f.state, Method::GET, "/", None).await;
    assert_eq!(code, StatusCode::OK);
    assert!(page.as_str().unwrap().contains("<title>hookvisor</title>"));
}

#[tokio::test]
async fn rerun_runs_the_hook_and_its_output_is_served() {
    let f = fixture(None);
    let (code, result) = call(&f.state, Method::POST, "/hooks/fails/rerun", None).await;
    assert_eq!(code, StatusCode::OK, "{result}");
    assert_eq!(result["success"], false);
    assert_eq!(result["exitCode"], 3);

    let (_, out) = call(&f.state, Method::GET, "/hooks/fails/output", None).await;
    assert!(
        out["output"].as_str().unwrap().contains("it <b>broke</b>"),
        "{out}"
    );
    assert!(out["sizeBytes"].as_u64().unwrap() > 0);

    let (_, status) = call(&f.state, Method::GET, "/hooks/status", None).await;
    let entry = &status["hooks"]["fails"];
    assert_eq!(
        (
            &entry["lastResult"],
            &entry["runCount"],
            &entry["lastExitCode"]
        ),
        (&"failure".into(), &1.into(), &3.into())
    );
    // The job slot is free again.
    assert!(f.state.job.lock().unwrap().is_none());
}

#[tokio::test]
async fn unknown_things_are_404_with_an_error() {
    let f = fixture(None);
    let cases = [
        (Method::POST, "/hooks/nope/rerun"),
        (Method::GET, "/hooks/nope/output"),
        (Method::GET, "/hooks/..%2F..%2Fetc%2Fpasswd/output"),
        (Method::GET, "/hooks/Lint/output"),
        (Method::GET, "/no/such/route"),
    ];
    for (method, path) in cases {
        let (code, body) = call(&f.state, method.clone(), path, None).await;
        assert_eq!(code, StatusCode::NOT_FOUND, "{method} {path}: {body}");
        assert!(body["error"].is_string(), "{method} {path}: {body}");
    }
}

#[tokio::test]
async fn the_token_guards_every_route_but_healthz() {
    let f = fixture(Some("s3cret"));
    let routes = [
        (Method::GET, "/"),
        (Method::GET, "/hooks/status"),
        (Method::GET, "/hooks/fails/output"),
        (Method::POST, "/hooks/fails/rerun"),
        (Method::GET, "/v1/hooks"),
        (Method::POST, "/v1/turns/end"),
        (Method::POST, "/v1/turns/start"),
        (Method::GET, "/v1/events"),
        (Method::POST, "/v1/fsmonitor"),
        (Method::GET, "/metrics"),
    ];
    for (method, path) in routes {
        for token in [None, Some("wrong"), Some("s3cre"), Some("s3cret2")] {
            let (code, body) = call(&f.state, method.clone(), path, token).await;
            assert_eq!(code, StatusCode::UNAUTHORIZED, "{method} {path} {token:?}");
            assert!(body["error"].as_str().unwrap().contains("Bearer"));
        }
    }
    let (code, _) = call(&f.state, Method::GET, "/healthz", None).await;
    assert_eq!(code, StatusCode::OK);
    let (code, _) = call(&f.state, Method::GET, "/v1/hooks", Some("s3cret")).await;
    assert_eq!(code, StatusCode::OK);
}

#[tokio::test]
async fn a_rerun_during_a_job_is_409_and_a_turn_end_waits_for_it() {
    let f = fixture(None);
    let (job, _cancel) = f.state.begin(JobKind::Rerun("fails".into())).unwrap();
    let (code, body) = call(&f.state, Method::POST, "/hooks/lint/rerun", None).await;
    assert_eq!(code, StatusCode::CONFLICT);
    assert!(
        body["error"].as_str().unwrap().contains("a run of 'fails'"),
        "{body}"
    );
    // A turn end is no person's click: it waits for the run, then evaluates.
    let mut events = f.state.hub.subscribe();
    let state = f.state.clone();
    let turn_end =
        tokio::spawn(async move { call(&state, Method::POST, "/v1/turns/end", None).await });
    loop {
        if let events::Event::TurnWaiting { behind } = events.recv().await.unwrap() {
            assert_eq!(behind, "a run of 'fails'");
            break;
        }
    }
    assert!(!turn_end.is_finished());
    // turns/start cancels evaluations only, not an explicit run.
    let (code, body) = call(&f.state, Method::POST, "/v1/turns/start", None).await;
    assert_eq!((code, &body["cancelled"]), (StatusCode::OK, &false.into()));
    drop(job);
    let (code, body) = turn_end.await.unwrap();
    assert_eq!(
        (code, &body["attempt"]),
        (StatusCode::OK, &1.into()),
        "{body}"
    );
}

#[tokio::test]
async fn bad_turn_bodies_are_400() {
    let f = fixture(None);
    let request = Request::post("/v1/turns/end")
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(r#"{"trigger":"robot"}"#))
        .unwrap();
    let response = app(f.state.clone(), guard())
        .oneshot(request)
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn the_guard_covers_every_route_and_the_fallback() {
    let f = fixture(Some("t"));
    let send = |method: Method, path: &str, headers: &[(header::HeaderName, &str)]| {
        let mut request = Request::builder().method(method).uri(path);
        for (name, value) in headers {
            request = request.header(name, *value);
        }
        app(f.state.clone(), guard()).oneshot(request.body(Body::empty()).unwrap())
    };
    let routes = [
        (Method::GET, "/"),
        (Method::GET, "/healthz"),
        (Method::GET, "/hooks/status"),
        (Method::GET, "/hooks/fails/output"),
        (Method::POST, "/hooks/fails/rerun"),
        (Method::GET, "/v1/hooks"),
        (Method::POST, "/v1/turns/end"),
        (Method::POST, "/v1/turns/start"),
        (Method::GET, "/v1/events"),
        (Method::POST, "/v1/fsmonitor"),
        (Method::GET, "/metrics"),
        (Method::GET, "/nowhere"),
        (Method::PUT, "/nowhere"),
    ];
    let json = (header::CONTENT_TYPE, "application/json");
    for (method, path) in routes {
        // Refused before the token is looked at: no route answers a foreign page at all.
        let host = [(header::HOST, "evil.example"), json.clone()];
        let response = send(method.clone(), path, &host).await.unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{method} {path}");
        let origin = [(header::ORIGIN, "http://evil.example"), json.clone()];
        let response = send(method.clone(), path, &origin).await.unwrap();
        assert_eq!(response.status(), StatusCode::FORBIDDEN, "{method} {path}");
        if method == Method::POST {
            let plain = [(header::CONTENT_TYPE, "text/plain")];
            let response = send(method.clone(), path, &plain).await.unwrap();
            assert_eq!(
                response.status(),
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "{method} {path}"
            );
        }
    }
}

#[test]
fn tokens_compare_whole() {
    let cases = [
        ("abc", "abc", true),
        ("abc", "abd", false),
        ("abc", "ab", false),
        ("abc", "abcd", false),
        ("abc", "", false),
        ("", "", true),
    ];
    for (expected, given, want) in cases {
        assert_eq!(
            same_token(expected.as_bytes(), given.as_bytes()),
            want,
            "{expected:?} vs {given:?}"
        );
    }
}

#[test]
fn agents_learn_where_the_server_is() {
    let tcp = agent_env("http://127.0.0.1:7433", None);
    assert_eq!(
        tcp,
        vec![("HOOKVISOR_URL".into(), "http://127.0.0.1:7433".into())]
    );
    let unix = agent_env("unix:/run/hv.sock", Some(Path::new("/run/hv.sock")));
    assert_eq!(
        unix,
        vec![
            ("HOOKVISOR_URL".into(), "http://localhost".into()),
            ("HOOKVISOR_SOCKET".into(), "/run/hv.sock".into())
        ]
    );
}

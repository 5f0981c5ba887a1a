//! The callback listener over real TCP on 127.0.0.1: waits taken by real HTTP requests, in any
//! order, once; everything else 404; timeouts, cancels, bounds.
//!
//! The process's listener ([`listener`]) is shared by the tests of this binary, which run in
//! parallel: each works only on its own waits, and none changes its `public_url`. Tests that
//! need a listener of their own (a port, a base, a limit) bind one with [`Listener::bind`].

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::thread;
use std::time::{Duration, Instant};

use hookvisor_actions::callback::{
    self, Answer, CallbackError, Listener, MAX_BODY, MAX_CONNECTIONS, Pending, Verdict, listener,
};
use hookvisor_core::CancelToken;
use hookvisor_core::config::Callback;
use serde_json::{Value as Json, json};

/// Longer than any test may take: a wait that ends did so for its own reason.
const FOREVER: Duration = Duration::from_secs(3600);

fn shared() -> &'static Listener {
    listener(&Callback::default()).expect("the callback listener starts")
}

/// One HTTP/1.1 request over a fresh connection; the status and body of the answer, read to
/// the end (the listener closes every connection).
fn send(
    addr: SocketAddr,
    method: &str,
    target: &str,
    headers: &[&str],
    body: &[u8],
) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).expect("connect to the listener");
    let mut head = format!("{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n");
    for header in headers {
        head.push_str(header);
        head.push_str("\r\n");
    }
    if !body.is_empty() {
        head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    head.push_str("\r\n");
    // One write: a listener that refuses on the head alone closes without reading the body,
    // and bytes it never read make that close a reset, which can cost the answer.
    let mut request = head.into_bytes();
    request.extend_from_slice(body);
    stream.write_all(&request).unwrap();
    read_answer(stream)
}

fn read_answer(mut stream: TcpStream) -> (u16, String) {
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut raw = Vec::new();
    stream
        .read_to_end(&mut raw)
        .expect("read the answer to its end");
    let text = String::from_utf8(raw).expect("a UTF-8 answer");
    let (head, body) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("a partial answer: {text}"));
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.strip_prefix("HTTP/1.1 "))
        .and_then(|rest| rest.get(..3))
        .unwrap_or_else(|| panic!("an HTTP answer: {text}"));
    let connection = lines.find_map(|line| {
        let (name, value) = line.split_once(':')?;
        name.eq_ignore_ascii_case("connection")
            .then(|| value.trim().to_owned())
    });
    assert_eq!(connection.as_deref(), Some("close"), "every answer closes");
    (status.parse().unwrap(), body.to_owned())
}

/// The path of a wait's URL, `/cb/<token>`.
fn path(pending: &Pending) -> String {
    let (_, token) = pending.url().split_once("/cb/").expect("a /cb/ URL");
    format!("/cb/{token}")
}

fn token(pending: &Pending) -> String {
    path(pending)["/cb/".len()..].to_owned()
}

fn get(pending: &Pending, query: &str) -> (u16, String) {
    send(
        shared().local_addr(),
        "GET",
        &format!("{}{query}", path(pending)),
        &[],
        b"",
    )
}

fn taken(answer: Answer) -> callback::Response {
    match answer {
        Answer::Taken(response) => response,
        other => panic!("expected an answer, got {other:?}"),
    }
}

#[test]
fn the_listener_is_one_per_process_on_loopback() {
    let first = shared();
    let again = shared();
    assert!(std::ptr::eq(first, again));
    assert!(first.local_addr().ip().is_loopback());
    assert_ne!(first.local_addr().port(), 0);
    let pending = first.register().unwrap();
    assert_eq!(
        pending.url(),
        format!("http://{}/cb/{}", first.local_addr(), token(&pending))
    );
    assert_eq!(pending.token(), token(&pending));

    // Its own port may be named; another one cannot be served as well.
    let port = first.local_addr().port();
    let same = listener(&Callback {
        port: Some(port),
        public_url: None,
    })
    .unwrap();
    assert!(std::ptr::eq(first, same));
    let other = if port == 65535 { 65534 } else { port + 1 };
    let err = listener(&Callback {
        port: Some(other),
        public_url: None,
    })
    .unwrap_err();
    assert!(matches!(err, CallbackError::OtherPort { .. }), "{err:?}");
    let text = err.to_string();
    assert!(
        text.contains(&port.to_string()) && text.contains(&other.to_string()),
        "{text}"
    );
}

#[test]
fn concurrent_waits_answered_out_of_order_each_get_their_own_answer() {
    let cancel = CancelToken::new();
    let pendings: Vec<Pending> = (0..4).map(|_| shared().register().unwrap()).collect();
    let paths: Vec<String> = pendings.iter().map(path).collect();
    let waiting: Vec<_> = pendings
        .into_iter()
        .map(|pending| {
            let cancel = cancel.clone();
            thread::spawn(move || pending.wait(FOREVER, &cancel))
        })
        .collect();
    for i in [2, 0, 3, 1] {
        let target = format!("{}?action=block&message=number+{i}", paths[i]);
        assert_eq!(
            send(shared().local_addr(), "GET", &target, &[], b""),
            (200, r#"{"ok":true}"#.into())
        );
    }
    for (i, waiter) in waiting.into_iter().enumerate() {
        let response = taken(waiter.join().unwrap());
        assert_eq!(response.verdict, Verdict::Block);
        assert_eq!(response.message, Some(format!("number {i}")));
    }
}

#[test]
fn a_token_is_taken_once_then_gone() {
    let pending = shared().register().unwrap();
    assert_eq!(
        get(&pending, "?action=approve"),
        (200, r#"{"ok":true}"#.into())
    );
    let (status, body) = get(&pending, "?action=reject");
    assert_eq!(status, 410, "{body}");
    let pipelines = format!("/callback?token={}", token(&pending));
    assert_eq!(
        send(shared().local_addr(), "POST", &pipelines, &[], b"").0,
        410
    );
    // The first answer stands, and the wait ends at once though its timeout is long.
    let response = taken(pending.wait(FOREVER, &CancelToken::new()));
    assert_eq!(response.verdict, Verdict::Success);
}

#[test]
fn every_other_request_is_a_bare_404() {
    let pending = shared().register().unwrap();
    let stranger = "A".repeat(token(&pending).len());
    let token = token(&pending);
    let addr = shared().local_addr();
    for (method, target) in [
        ("GET", "/".to_owned()),
        ("GET", "/cb/".into()),
        ("GET", "/cb".into()),
        ("GET", "/callback".into()),
        ("POST", "/callback?token=".into()),
        ("GET", "/status".into()),
        ("GET", "/v1/status".into()),
        ("GET", format!("/cb/{stranger}")),
        ("GET", format!("/callback?token={stranger}")),
        ("GET", format!("/cb/{token}/extra")),
        ("PUT", format!("/cb/{token}")),
        ("DELETE", format!("/cb/{token}")),
        ("OPTIONS", "*".into()),
    ] {
        assert_eq!(
            send(addr, method, &target, &[], b""),
            (404, String::new()),
            "{method} {target}"
        );
    }
    // None of them took the wait.
    assert_eq!(get(&pending, "?action=approve").0, 200);
    assert_eq!(
        taken(pending.wait(FOREVER, &CancelToken::new())).verdict,
        Verdict::Success
    );
}

#[test]
fn a_wait_that_times_out_revokes_its_token() {
    let pending = shared().register().unwrap();
    let target = path(&pending);
    let started = Instant::now();
    assert_eq!(
        pending.wait(Duration::from_millis(50), &CancelToken::new()),
        Answer::TimedOut
    );
    assert!(started.elapsed() >= Duration::from_millis(50));
    assert_eq!(send(shared().local_addr(), "GET", &target, &[], b"").0, 410);
}

#[test]
fn a_cancel_ends_a_wait_at_once_and_revokes_its_token() {
    let pending = shared().register().unwrap();
    let target = path(&pending);
    let cancel = CancelToken::new();
    let waiter = {
        let cancel = cancel.clone();
        thread::spawn(move || pending.wait(FOREVER, &cancel))
    };
    let started = Instant::now();
    cancel.cancel();
    assert_eq!(waiter.join().unwrap(), Answer::Cancelled);
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(send(shared().local_addr(), "GET", &target, &[], b"").0, 410);
}

#[test]
fn a_dropped_wait_revokes_its_token() {
    let pending = shared().register().unwrap();
    let target = path(&pending);
    drop(pending);
    assert_eq!(
        send(shared().local_addr(), "POST", &target, &[], b"").0,
        410
    );
}

#[test]
fn actions_and_messages_over_http() {
    let addr = shared().local_addr();
    let json_type = "Content-Type: application/json";
    let form_type = "Content-Type: application/x-www-form-urlencoded";
    let cases = [
        ("GET", "?action=approve", None, "", Verdict::Success, None),
        ("GET", "?action=none", None, "", Verdict::Success, None),
        (
            "GET",
            "?action=reject&message=wrong+branch",
            None,
            "",
            Verdict::Abort,
            Some("wrong branch"),
        ),
        (
            "POST",
            "",
            Some(json_type),
            r#"{"action":"block","message":"add a test"}"#,
            Verdict::Block,
            Some("add a test"),
        ),
        (
            "POST",
            "?action=approve",
            Some(json_type),
            r#"{"action":"deny"}"#,
            Verdict::Abort,
            None,
        ),
        (
            "POST",
            "",
            Some(form_type),
            "action=block&message=needs+docs",
            Verdict::Block,
            Some("needs docs"),
        ),
    ];
    for (method, query, content_type, body, verdict, message) in cases {
        let pending = shared().register().unwrap();
        let headers: Vec<&str> = content_type.into_iter().collect();
        let target = format!("{}{query}", path(&pending));
        assert_eq!(
            send(addr, method, &target, &headers, body.as_bytes()).0,
            200,
            "{method} {query} {body}"
        );
        let response = taken(pending.wait(FOREVER, &CancelToken::new()));
        assert_eq!(
            (response.verdict, response.message.as_deref()),
            (verdict, message),
            "{query} {body}"
        );
    }
}

#[test]
fn the_pipelines_route_and_the_hook_response() {
    let pending = shared().register().unwrap();
    let target = format!(
        "/callback?token={}&action=block&message=see+review&reviewer=ann",
        token(&pending)
    );
    let (status, _) = send(
        shared().local_addr(),
        "POST",
        &target,
        &["Content-Type: application/json"],
        br#"{"comments":[1,2]}"#,
    );
    assert_eq!(status, 200);
    let response = taken(pending.wait(FOREVER, &CancelToken::new()));
    assert_eq!(response.verdict, Verdict::Block);
    assert_eq!(response.message.as_deref(), Some("see review"));
    // The token is the credential, not part of the answer later hooks see.
    assert_eq!(
        response.json,
        json!({
            "query": {"action": "block", "message": "see review", "reviewer": "ann"},
            "body": {"comments": [1, 2]},
        })
    );
}

#[test]
fn refused_requests_leave_the_wait_open() {
    let pending = shared().register().unwrap();
    let addr = shared().local_addr();
    let target = path(&pending);

    let oversize = vec![b'x'; MAX_BODY + 1];
    assert_eq!(send(addr, "POST", &target, &[], &oversize).0, 413);

    let mut chunked = TcpStream::connect(addr).unwrap();
    write!(
        chunked,
        "POST {target} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"
    )
    .unwrap();
    assert_eq!(read_answer(chunked).0, 411);

    let (status, body) = get(&pending, "?action=maybe");
    assert_eq!(status, 400);
    let body: Json = serde_json::from_str(&body).unwrap();
    assert_eq!(
        body["error"],
        "unknown action 'maybe'; use approve, continue, none, reject, abort, deny or block"
    );

    // A body of exactly the limit is fine, and takes the wait.
    let mut exact = br#"{"action":"block","message":"long"} "#.to_vec();
    exact.resize(MAX_BODY, b' ');
    assert_eq!(
        send(
            addr,
            "POST",
            &target,
            &["Content-Type: application/json"],
            &exact
        )
        .0,
        200
    );
    let response = taken(pending.wait(FOREVER, &CancelToken::new()));
    assert_eq!(response.verdict, Verdict::Block);
}

/// The review's table (F6, F7): each of these was taken as an approval, though most meant
/// "reject" and the first says nothing (a link scanner's fetch). Each is refused now, the
/// wait stays open, and the human's real answer still takes it.
#[test]
fn requests_that_do_not_plainly_answer_leave_the_wait_open() {
    let pending = shared().register().unwrap();
    let addr = shared().local_addr();
    let target = path(&pending);
    let json_type = "Content-Type: application/json";
    // A method, a query, headers, a body, and the status it is refused with.
    type Case<'a> = (&'a str, &'a str, &'a [&'a str], &'a [u8], u16);
    let cases: [Case; 8] = [
        ("GET", "", &[], b"", 400),
        ("POST", "", &[], b"", 400),
        (
            "POST",
            "",
            &["Content-Type: multipart/form-data; boundary=x"],
            b"--x\r\nContent-Disposition: form-data; name=\"action\"\r\n\r\nreject\r\n--x--\r\n",
            415,
        ),
        (
            "POST",
            "",
            &["Content-Type: text/plain"],
            b"action=reject",
            415,
        ),
        ("GET", "?Action=reject", &[], b"", 400),
        ("POST", "", &[json_type], br#"{"Action":"reject"}"#, 400),
        (
            "POST",
            "",
            &[json_type],
            br#"{"action":"reject","action":"approve"}"#,
            400,
        ),
        (
            "POST",
            "?action=approve",
            &[json_type],
            b"\xef\xbb\xbf{\"action\":\"reject\"}",
            400,
        ),
    ];
    for (method, query, headers, body, status) in cases {
        let (got, answer) = send(addr, method, &format!("{target}{query}"), headers, body);
        assert_eq!(got, status, "{method} {query} {headers:?}: {answer}");
    }
    assert_eq!(get(&pending, "?action=reject").0, 200);
    let response = taken(pending.wait(FOREVER, &CancelToken::new()));
    assert_eq!(response.verdict, Verdict::Abort);
}

#[test]
fn a_taken_configured_port_is_an_error_naming_it() {
    let squatter = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = squatter.local_addr().unwrap().port();
    let err = Listener::bind(&Callback {
        port: Some(port),
        public_url: None,
    })
    .unwrap_err();
    assert!(
        matches!(err, CallbackError::PortTaken { port: p } if p == port),
        "{err:?}"
    );
    let text = err.to_string();
    assert!(text.contains(&format!("callback port {port}")), "{text}");
    assert!(text.contains("callback.port"), "{text}");
}

#[test]
fn an_own_listener_serves_a_public_base_and_stops_when_dropped() {
    let own = Listener::bind(&Callback {
        port: None,
        public_url: Some("https://hooks.example.com/".into()),
    })
    .unwrap();
    let addr = own.local_addr();
    assert!(addr.ip().is_loopback());
    let pending = own.register().unwrap();
    assert!(
        pending.url().starts_with("https://hooks.example.com/cb/"),
        "no double slash"
    );
    // The base is only what is sent; the request still reaches 127.0.0.1.
    let approve = format!("{}?action=approve", path(&pending));
    assert_eq!(send(addr, "GET", &approve, &[], b"").0, 200);
    // A wait of one listener is unknown to another.
    let elsewhere = shared().register().unwrap();
    assert_eq!(send(addr, "GET", &path(&elsewhere), &[], b"").0, 404);
    assert_eq!(
        taken(pending.wait(FOREVER, &CancelToken::new())).verdict,
        Verdict::Success
    );

    drop(own);
    let refused = TcpStream::connect(addr).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::ConnectionRefused);
}

#[test]
fn connections_past_the_limit_are_refused_with_503() {
    let own = Listener::bind(&Callback::default()).unwrap();
    let addr = own.local_addr();
    // Registered first: the idle connections keep their places only for the head timeout, so
    // as little as possible comes between their opening and the first one's request.
    let pending = own.register().unwrap();
    // Connections that send nothing each hold a place until they send or time out.
    let idle: Vec<TcpStream> = (0..MAX_CONNECTIONS)
        .map(|_| TcpStream::connect(addr).unwrap())
        .collect();
    let extra = TcpStream::connect(addr).unwrap();
    assert_eq!(read_answer(extra), (503, String::new()));
    // A connection that held a place is still served.
    let mut first = idle.into_iter().next().unwrap();
    write!(
        first,
        "GET {}?action=approve HTTP/1.1\r\n\r\n",
        path(&pending)
    )
    .unwrap();
    assert_eq!(read_answer(first).0, 200);
}

#[test]
fn the_token_is_not_in_debug_output_or_errors() {
    let pending = shared().register().unwrap();
    let token = token(&pending);
    assert!(!format!("{pending:?}").contains(&token));
    let (_, body) = get(&pending, "?action=nope");
    assert!(!body.contains(&token), "{body}");
}

#[test]
fn the_listener_threads_block_every_signal() {
    // A request answered: the accepting thread has run, so it carries its name (a thread
    // names itself when it starts).
    assert_eq!(send(shared().local_addr(), "GET", "/", &[], b"").0, 404);
    // Thread names are cut to 15 bytes in comm: "hookvisor-callb".
    let mut seen = 0;
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let task = task.unwrap().path();
        let Ok(comm) = std::fs::read_to_string(task.join("comm")) else {
            continue; // a thread that just ended
        };
        if !comm.starts_with("hookvisor-callb") {
            continue;
        }
        let Ok(status) = std::fs::read_to_string(task.join("status")) else {
            continue;
        };
        let blocked = status
            .lines()
            .find_map(|line| line.strip_prefix("SigBlk:"))
            .map(|hex| u64::from_str_radix(hex.trim(), 16).unwrap())
            .unwrap();
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGUSR1] {
            assert_ne!(
                blocked & (1 << (signal - 1)),
                0,
                "{comm}: signal {signal} not blocked"
            );
        }
        seen += 1;
    }
    assert!(
        seen >= 1,
        "the accepting thread of the listener was not found"
    );
}

/// The review's F5: the waiting process held the token in memory, and a process of the same
/// uid read it from `/proc/PID/mem` and approved itself. Registering makes the process
/// non-dumpable first, which the kernel then enforces for same-uid readers.
#[test]
fn a_process_that_registers_a_wait_is_not_dumpable() {
    let pending = shared().register().unwrap();
    assert!(!nix::sys::prctl::get_dumpable().unwrap());
    // Root has CAP_SYS_PTRACE, which the flag does not stop: the flag alone is checked then.
    if nix::unistd::geteuid().is_root() {
        return;
    }
    let mem = format!("/proc/{}/mem", std::process::id());
    let reader = std::process::Command::new("sh")
        .args(["-c", "exec 3<\"$1\"", "sh", &mem])
        .output()
        .unwrap();
    assert!(!reader.status.success(), "a same-uid process opened {mem}");
    let said = String::from_utf8_lossy(&reader.stderr);
    assert!(said.contains("Permission denied"), "{said}");
    drop(pending);
}

/// Sends `raw` and closes the sending side; the status of the answer, or `None` when the
/// listener closed without one.
fn send_raw(addr: SocketAddr, raw: &[u8]) -> Option<u16> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream.write_all(raw).unwrap();
    stream.shutdown(std::net::Shutdown::Write).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    answer.get(9..12).map(|status| status.parse().unwrap())
}

/// Rule 4's bounds on what a request may be, each refused without taking the wait: too large
/// a head or too many headers, a malformed one, a body past its limit or of two lengths, one
/// that ends early; a client that says nothing is closed unanswered.
#[test]
fn malformed_and_oversized_requests_are_refused_by_table() {
    let pending = shared().register().unwrap();
    let addr = shared().local_addr();
    let target = path(&pending);
    let big = format!(
        "GET {target}?{} HTTP/1.1\r\n\r\n",
        "a".repeat(callback::MAX_HEAD)
    );
    let headers = (0..=32)
        .map(|i| format!("X-{i}: y\r\n"))
        .collect::<String>();
    let many = format!("GET {target} HTTP/1.1\r\n{headers}\r\n");
    let over = format!(
        "POST {target} HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
        MAX_BODY + 1
    );
    let two = format!("POST {target} HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab");
    let negative = format!("POST {target} HTTP/1.1\r\nContent-Length: -1\r\n\r\n");
    let huge = format!("POST {target} HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n");
    let half_body = format!("POST {target} HTTP/1.1\r\nContent-Length: 9\r\n\r\nhalf");
    let cases: [(&[u8], Option<u16>); 9] = [
        (big.as_bytes(), Some(431)),
        (many.as_bytes(), Some(431)),
        (over.as_bytes(), Some(413)),
        (two.as_bytes(), Some(400)),
        (negative.as_bytes(), Some(400)),
        (huge.as_bytes(), Some(400)),
        (half_body.as_bytes(), Some(400)),
        (b"\x00\x01junk\r\n\r\n", Some(400)),
        (b"", None),
    ];
    for (raw, want) in cases {
        assert_eq!(
            send_raw(addr, raw),
            want,
            "{}",
            String::from_utf8_lossy(&raw[..raw.len().min(80)])
        );
    }
    assert_eq!(get(&pending, "?action=approve").0, 200);
    assert_eq!(
        taken(pending.wait(FOREVER, &CancelToken::new())).verdict,
        Verdict::Success
    );
}

/// A client that stops within its head gives its place back after the head timeout, closed
/// unanswered.
#[test]
fn a_client_that_stops_within_its_head_is_closed_after_the_head_timeout() {
    let mut stream = TcpStream::connect(shared().local_addr()).unwrap();
    stream.write_all(b"GET /cb/x HTTP/1.1\r\n").unwrap();
    let started = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
    let took = started.elapsed();
    assert!(
        took >= callback::HEAD_TIMEOUT - Duration::from_millis(100)
            && took < callback::READ_TIMEOUT,
        "closed after {took:?}"
    );
}

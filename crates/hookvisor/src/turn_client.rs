//! The agent adapters' and `fire`'s way to a running `hookvisor serve`: one HTTP/1.1 request,
//! `POST /v1/turns/end` or `POST /v1/events/{event}`, over TCP or a Unix socket.
//!
//! hyper's connection-level client speaks the protocol, on a current-thread tokio runtime built
//! for the one request: no pool, no connector, nothing started beyond the socket, so the
//! adapter stays as quick to launch as the rest of the CLI. The deadline bounds the whole
//! exchange (connect, send, every byte of the answer), and a [`CancelToken`] ends it at once.
//!
//! `HOOKVISOR_URL` is `http://host:port[/prefix]` or `unix:/path/to.sock`; `HOOKVISOR_SOCKET`,
//! when set, is the socket to reach it through (what `serve --socket PATH -- AGENT` gives the
//! agent, beside a placeholder URL); `HOOKVISOR_TOKEN`, when set, is sent as
//! `Authorization: Bearer <token>`.

use std::fmt;
use std::io;
use std::path::PathBuf;
use std::time::Duration;

use http_body_util::{BodyExt, Limited};
use hyper::header::{ACCEPT, AUTHORIZATION, CONNECTION, CONTENT_TYPE, HOST, USER_AGENT};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpStream, UnixStream};

use hookvisor_core::{CancelToken, EvalReport, Trigger};

/// How long connecting may take; the answer itself may take as long as the hooks run, which the
/// agent's own hook timeout bounds.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest body accepted, so a confused peer cannot exhaust memory (hyper bounds the head).
const MAX_RESPONSE: usize = 16 * 1024 * 1024;
/// How often a wait looks at its [`CancelToken`].
const CANCEL_TICK: Duration = Duration::from_millis(20);

/// Where the server listens, parsed from `HOOKVISOR_URL`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerAddr {
    /// `http://host:port/prefix`.
    Tcp {
        /// `host:port`, as sent in the `Host` header and resolved to connect.
        authority: String,
        /// A path prefix put before `/v1/...`, without a trailing `/` (often empty).
        prefix: String,
    },
    /// `unix:/path/to.sock`.
    Unix {
        /// The socket's path.
        path: PathBuf,
    },
}

/// Why asking the server failed; each names the URL and what to check.
#[derive(Debug)]
pub enum TurnClientError {
    /// `HOOKVISOR_URL` is not a URL this client speaks.
    BadUrl {
        /// The value given.
        url: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The server could not be reached.
    Connect {
        /// The value of `HOOKVISOR_URL`.
        url: String,
        /// What the socket said.
        source: io::Error,
    },
    /// The connection broke while sending or receiving.
    Io {
        /// The value of `HOOKVISOR_URL`.
        url: String,
        /// What the socket said.
        source: io::Error,
    },
    /// The answer is not HTTP/1.x this client understands.
    Protocol {
        /// The value of `HOOKVISOR_URL`.
        url: String,
        /// What was wrong.
        why: String,
    },
    /// The server answered with an error status.
    Status {
        /// The value of `HOOKVISOR_URL`.
        url: String,
        /// The HTTP status code.
        code: u16,
        /// The server's `{"error"}` text, or the start of its body.
        message: String,
    },
    /// No whole answer came within the client's deadline ([`TurnClient::with_deadline`]).
    Timeout {
        /// The value of `HOOKVISOR_URL`.
        url: String,
        /// The deadline.
        after: Duration,
    },
    /// The wait was cancelled ([`TurnClient::with_cancel`]): a signal came.
    Cancelled,
    /// The server answered 200 with a body that is not the JSON this client asked for.
    Body {
        /// The value of `HOOKVISOR_URL`.
        url: String,
        /// What serde said.
        source: serde_json::Error,
    },
}

impl fmt::Display for TurnClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TurnClientError::BadUrl { url, why } => write!(
                f,
                "HOOKVISOR_URL '{url}': {why}; use http://127.0.0.1:7433 or unix:/path/to.sock"
            ),
            TurnClientError::Connect { url, source } => write!(
                f,
                "cannot reach the hookvisor server at {url}: {source}; start `hookvisor serve` \
                 or unset HOOKVISOR_URL to evaluate in-process"
            ),
            TurnClientError::Io { url, source } => write!(
                f,
                "connection to the hookvisor server at {url} broke: {source}; check the \
                 server's log"
            ),
            TurnClientError::Protocol { url, why } => write!(
                f,
                "the server at {url} did not answer as hookvisor serve does ({why}); check \
                 that HOOKVISOR_URL points at `hookvisor serve`"
            ),
            TurnClientError::Status { url, code: 401, .. } => write!(
                f,
                "the hookvisor server at {url} refused the request (401); set \
                 HOOKVISOR_TOKEN to the server's token"
            ),
            TurnClientError::Status {
                url,
                code: 409,
                message,
            } => write!(
                f,
                "the hookvisor server at {url} refused the request (409: {message})"
            ),
            TurnClientError::Status { url, code, message } => write!(
                f,
                "the hookvisor server at {url} answered {code}: {message}"
            ),
            TurnClientError::Timeout { url, after } => write!(
                f,
                "the hookvisor server at {url} did not answer within {} s; check the server's \
                 log",
                after.as_secs()
            ),
            TurnClientError::Cancelled => {
                f.write_str("the wait for the hookvisor server was cancelled")
            }
            TurnClientError::Body { url, source } => write!(
                f,
                "the hookvisor server at {url} sent an answer this client cannot read \
                 ({source}); use the same hookvisor version for the server and the client"
            ),
        }
    }
}

impl std::error::Error for TurnClientError {}

impl ServerAddr {
    /// Parses `http://host[:port][/prefix]` or `unix:/path/to.sock` (also `unix:///path`).
    pub fn parse(url: &str) -> Result<ServerAddr, TurnClientError> {
        let bad = |why| TurnClientError::BadUrl {
            url: url.to_owned(),
            why,
        };
        if let Some(rest) = url.strip_prefix("unix:") {
            let path = rest.strip_prefix("//").unwrap_or(rest);
            if !path.starts_with('/') {
                return Err(bad("a unix: URL needs an absolute socket path"));
            }
            return Ok(ServerAddr::Unix { path: path.into() });
        }
        if url.starts_with("https://") {
            return Err(bad(
                "https is not supported (the server listens on loopback or a socket)",
            ));
        }
        let Some(rest) = url.strip_prefix("http://") else {
            return Err(bad("the URL must start with http:// or unix:"));
        };
        let (authority, path) = match rest.find('/') {
            Some(slash) => (&rest[..slash], &rest[slash..]),
            None => (rest, ""),
        };
        if authority.is_empty() || authority.contains('@') {
            return Err(bad("the URL needs a host and port, without user info"));
        }
        if path.contains(['?', '#']) {
            return Err(bad("the URL must not have a query or fragment"));
        }
        let has_port = match authority.rfind(']') {
            Some(bracket) => authority[bracket..].contains(':'),
            None => authority.contains(':'),
        };
        let authority = if has_port {
            authority.to_owned()
        } else {
            format!("{authority}:80")
        };
        Ok(ServerAddr::Tcp {
            authority,
            prefix: path.trim_end_matches('/').to_owned(),
        })
    }
}

/// One server, as `HOOKVISOR_URL` and `HOOKVISOR_TOKEN` describe it.
#[derive(Debug, Clone)]
pub struct TurnClient {
    url: String,
    addr: ServerAddr,
    token: Option<String>,
    /// How long the whole exchange may take; `None` waits as long as the server takes.
    deadline: Option<Duration>,
    /// Ends the wait when cancelled.
    cancel: Option<CancelToken>,
}

impl TurnClient {
    /// The server the environment names (`HOOKVISOR_URL`, `HOOKVISOR_SOCKET`,
    /// `HOOKVISOR_TOKEN`, read through `var`), or `None` when `HOOKVISOR_URL` is unset or empty.
    pub fn from_env(
        var: impl Fn(&str) -> Option<String>,
    ) -> Option<Result<TurnClient, TurnClientError>> {
        let url = var("HOOKVISOR_URL").filter(|u| !u.is_empty())?;
        let token = var("HOOKVISOR_TOKEN");
        Some(match var("HOOKVISOR_SOCKET").filter(|s| !s.is_empty()) {
            Some(socket) if socket.starts_with('/') => Ok(TurnClient {
                url: format!("{url} (through {socket})"),
                addr: ServerAddr::Unix {
                    path: socket.into(),
                },
                token: token.filter(|t| !t.is_empty()),
                deadline: None,
                cancel: None,
            }),
            Some(socket) => Err(TurnClientError::BadUrl {
                url: socket,
                why: "HOOKVISOR_SOCKET must be an absolute socket path",
            }),
            None => TurnClient::new(&url, token),
        })
    }

    /// A client for `url` that sends `token` as a bearer token when there is one.
    pub fn new(url: &str, token: Option<String>) -> Result<TurnClient, TurnClientError> {
        Ok(TurnClient {
            url: url.to_owned(),
            addr: ServerAddr::parse(url)?,
            token: token.filter(|t| !t.is_empty()),
            deadline: None,
            cancel: None,
        })
    }

    /// The Unix socket this client connects through, if it does not use TCP.
    pub fn socket(&self) -> Option<&std::path::Path> {
        match &self.addr {
            ServerAddr::Unix { path } => Some(path),
            ServerAddr::Tcp { .. } => None,
        }
    }

    /// Gives up on an answer that has not wholly come within `deadline`, counted from the
    /// connect ([`TurnClientError::Timeout`]): an adapter must answer before the agent kills it.
    pub fn with_deadline(mut self, deadline: Duration) -> TurnClient {
        self.deadline = Some(deadline);
        self
    }

    /// Gives up at once when `cancel` is cancelled ([`TurnClientError::Cancelled`]): a signal
    /// to an adapter is answered, never left waiting on the server.
    pub fn with_cancel(mut self, cancel: CancelToken) -> TurnClient {
        self.cancel = Some(cancel);
        self
    }

    /// `POST /v1/turns/end {"trigger": ...}`: the server evaluates and answers the eval JSON.
    pub fn end_turn(&self, trigger: Trigger) -> Result<EvalReport, TurnClientError> {
        let body = serde_json::json!({ "trigger": trigger }).to_string();
        self.post_json("/v1/turns/end", &body)
    }

    /// `POST /v1/events/{event}` with `body` (`{session_id?, trigger, data}`): the server fires
    /// the event and answers its reply (docs/EVENTS.md §3, §5 rule 4), here as JSON. A 400 or 404
    /// comes back as [`TurnClientError::Status`], for the caller to treat as a usage error.
    pub fn fire_event(
        &self,
        event: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, TurnClientError> {
        self.post_json(&format!("/v1/events/{event}"), &body.to_string())
    }

    /// `POST /v1/fsmonitor {"token": ..., "work_tree": ...}`: what git's fsmonitor hook
    /// (version 2) prints for `token` in `work_tree`, as the server answers it.
    pub fn fsmonitor(
        &self,
        token: &str,
        work_tree: &std::path::Path,
    ) -> Result<Vec<u8>, TurnClientError> {
        let body = serde_json::json!({ "token": token, "work_tree": work_tree.to_string_lossy() })
            .to_string();
        let (code, body) = self.post("/v1/fsmonitor", &body)?;
        if code != 200 {
            return Err(TurnClientError::Status {
                url: self.url.clone(),
                code,
                message: error_text(&body),
            });
        }
        Ok(body)
    }

    /// Sends one request and reads a 200 answer's JSON body; any other status is an error
    /// carrying the server's message.
    fn post_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
        body: &str,
    ) -> Result<T, TurnClientError> {
        let (code, body) = self.post(path, body)?;
        if code != 200 {
            return Err(TurnClientError::Status {
                url: self.url.clone(),
                code,
                message: error_text(&body),
            });
        }
        serde_json::from_slice(&body).map_err(|source| TurnClientError::Body {
            url: self.url.clone(),
            source,
        })
    }

    /// Sends one request and returns the status code and the body, within the deadline and
    /// until the cancel.
    fn post(&self, path: &str, body: &str) -> Result<(u16, Vec<u8>), TurnClientError> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(|source| self.io_err(source))?;
        runtime.block_on(async {
            let exchange = async {
                match self.deadline {
                    Some(after) => tokio::time::timeout(after, self.exchange(path, body))
                        .await
                        .unwrap_or_else(|_| {
                            Err(TurnClientError::Timeout {
                                url: self.url.clone(),
                                after,
                            })
                        }),
                    None => self.exchange(path, body).await,
                }
            };
            tokio::select! {
                answer = exchange => answer,
                () = cancelled(self.cancel.as_ref()) => Err(TurnClientError::Cancelled),
            }
        })
    }

    /// Connects, then sends the request and reads the answer.
    async fn exchange(&self, path: &str, body: &str) -> Result<(u16, Vec<u8>), TurnClientError> {
        let connect_err = |source| TurnClientError::Connect {
            url: self.url.clone(),
            source,
        };
        match &self.addr {
            ServerAddr::Tcp { authority, prefix } => {
                let stream = self.connect_tcp(authority).await?;
                self.send(stream, authority, &format!("{prefix}{path}"), body)
                    .await
            }
            ServerAddr::Unix { path: socket } => {
                let stream = UnixStream::connect(socket).await.map_err(connect_err)?;
                self.send(stream, "localhost", path, body).await
            }
        }
    }

    /// The first address of `authority` that accepts within [`CONNECT_TIMEOUT`].
    async fn connect_tcp(&self, authority: &str) -> Result<TcpStream, TurnClientError> {
        let connect_err = |source| TurnClientError::Connect {
            url: self.url.clone(),
            source,
        };
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the host resolved to no address");
        for addr in tokio::net::lookup_host(authority)
            .await
            .map_err(connect_err)?
        {
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => return Ok(stream),
                Ok(Err(e)) => last = e,
                Err(_) => last = io::ErrorKind::TimedOut.into(),
            }
        }
        Err(connect_err(last))
    }

    /// One `POST target` on a connected stream: the status and the whole body.
    async fn send(
        &self,
        stream: impl AsyncRead + AsyncWrite + Send + Unpin + 'static,
        host: &str,
        target: &str,
        body: &str,
    ) -> Result<(u16, Vec<u8>), TurnClientError> {
        // Title case: what curl and the old client sent, and what simple receivers look for.
        let (mut sender, connection) = hyper::client::conn::http1::Builder::new()
            .title_case_headers(true)
            .handshake(TokioIo::new(stream))
            .await
            .map_err(|e| self.hyper_err(e))?;
        // Drives the socket while the request and the answer go through `sender`; its own
        // error comes back through them.
        tokio::spawn(connection);
        let mut request = hyper::Request::post(target)
            .header(HOST, host)
            .header(USER_AGENT, concat!("hookvisor/", env!("CARGO_PKG_VERSION")))
            .header(ACCEPT, "application/json")
            .header(CONTENT_TYPE, "application/json")
            .header(CONNECTION, "close");
        if let Some(token) = &self.token {
            request = request.header(AUTHORIZATION, format!("Bearer {token}"));
        }
        let request = request
            .body(body.to_owned())
            .map_err(|e| self.protocol(format!("the request: {e}")))?;
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| self.hyper_err(e))?;
        let code = response.status().as_u16();
        let body = Limited::new(response.into_body(), MAX_RESPONSE)
            .collect()
            .await
            .map_err(|e| match e.downcast::<hyper::Error>() {
                Ok(e) => self.hyper_err(*e),
                // Only Limited's own error is not hyper's.
                Err(e) => self.protocol(format!("the body: {e}")),
            })?;
        Ok((code, body.to_bytes().to_vec()))
    }

    fn io_err(&self, source: io::Error) -> TurnClientError {
        TurnClientError::Io {
            url: self.url.clone(),
            source,
        }
    }

    fn protocol(&self, why: String) -> TurnClientError {
        TurnClientError::Protocol {
            url: self.url.clone(),
            why,
        }
    }

    /// A socket's error as [`TurnClientError::Io`]; the rest (an answer that ends early or is
    /// not HTTP/1.x) as [`TurnClientError::Protocol`].
    fn hyper_err(&self, err: hyper::Error) -> TurnClientError {
        use std::error::Error as _;
        let io = err
            .source()
            .and_then(|source| source.downcast_ref::<io::Error>());
        match io {
            Some(io) if !err.is_incomplete_message() => {
                self.io_err(io::Error::new(io.kind(), io.to_string()))
            }
            _ if err.is_incomplete_message() => {
                self.protocol("the connection closed before a whole answer".into())
            }
            _ => self.protocol(err.to_string()),
        }
    }
}

/// Resolves when `cancel` is cancelled; never without one.
async fn cancelled(cancel: Option<&CancelToken>) {
    let Some(cancel) = cancel else {
        return std::future::pending().await;
    };
    while !cancel.is_cancelled() {
        tokio::time::sleep(CANCEL_TICK).await;
    }
}

/// The `error` field of a JSON error body, else the body's first line, kept short.
fn error_text(body: &[u8]) -> String {
    if let Ok(serde_json::Value::Object(map)) = serde_json::from_slice(body)
        && let Some(serde_json::Value::String(error)) = map.get("error")
    {
        return error.clone();
    }
    let text = String::from_utf8_lossy(body);
    let line = text.lines().next().unwrap_or_default().trim();
    if line.is_empty() {
        "(empty body)".to_owned()
    } else {
        line.chars().take(200).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_urls() {
        let tcp = |authority: &str, prefix: &str| ServerAddr::Tcp {
            authority: authority.into(),
            prefix: prefix.into(),
        };
        let cases: &[(&str, Option<ServerAddr>)] = &[
            ("http://127.0.0.1:7433", Some(tcp("127.0.0.1:7433", ""))),
            ("http://127.0.0.1:7433/", Some(tcp("127.0.0.1:7433", ""))),
            ("http://localhost:1/hv/", Some(tcp("localhost:1", "/hv"))),
            ("http://localhost", Some(tcp("localhost:80", ""))),
            ("http://[::1]:7433", Some(tcp("[::1]:7433", ""))),
            ("http://[::1]", Some(tcp("[::1]:80", ""))),
            (
                "unix:/run/hv.sock",
                Some(ServerAddr::Unix {
                    path: "/run/hv.sock".into(),
                }),
            ),
            (
                "unix:///run/hv.sock",
                Some(ServerAddr::Unix {
                    path: "/run/hv.sock".into(),
                }),
            ),
            ("unix:relative.sock", None),
            ("https://127.0.0.1:7433", None),
            ("127.0.0.1:7433", None),
            ("http://", None),
            ("http://u:p@host:1", None),
            ("http://host:1/x?y", None),
        ];
        for (url, want) in cases {
            let got = ServerAddr::parse(url).ok();
            assert_eq!(&got, want, "{url}");
        }
    }

    /// A server on loopback that takes one request (its body is `ping`), then sends `answer`
    /// in pieces of `piece` bytes, `pause` apart, and closes.
    fn answering(answer: &'static str, piece: usize, pause: Duration) -> String {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            let mut request = Vec::new();
            let mut buf = [0; 4096];
            while !request.ends_with(b"ping") {
                match conn.read(&mut buf) {
                    Ok(0) | Err(_) => return,
                    Ok(n) => request.extend_from_slice(&buf[..n]),
                }
            }
            for part in answer.as_bytes().chunks(piece) {
                if conn.write_all(part).and_then(|()| conn.flush()).is_err() {
                    return;
                }
                std::thread::sleep(pause);
            }
        });
        url
    }

    #[test]
    fn reads_responses() {
        let cases: &[(&str, Option<(u16, &str)>)] = &[
            (
                "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}trailing",
                Some((200, "{}")),
            ),
            (
                "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n",
                Some((200, "abcde")),
            ),
            ("HTTP/1.0 409 Conflict\r\n\r\nbusy", Some((409, "busy"))),
            ("HTTP/1.1 200 OK\nContent-Length: 1\n\nx", Some((200, "x"))),
            ("HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab", None),
            ("SSH-2.0-OpenSSH\r\n", None),
            ("HTTP/1.1 200 OK\r\nContent-Length: 1\r\n", None),
            ("HTTP/1.1 200 OK\r\nno colon\r\n\r\n", None),
            (
                "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                None,
            ),
        ];
        for (raw, want) in cases {
            let want = want.map(|(code, body)| (code, body.to_owned()));
            // Small pieces split the head across reads, as a slow socket does.
            for piece in [1, 7, 4096] {
                let url = answering(raw, piece, Duration::ZERO);
                let got = TurnClient::new(&url, None)
                    .unwrap()
                    .post("/x", "ping")
                    .ok()
                    .map(|(code, body)| (code, String::from_utf8(body).unwrap()));
                assert_eq!(got, want, "{raw:?} sent {piece} bytes at a time");
            }
        }
    }

    /// The deadline is the whole wait's: a server that trickles its answer a byte at a time,
    /// each well within the deadline, is given up on when the deadline passes.
    #[test]
    fn a_trickled_answer_times_out_at_the_deadline() {
        let answer = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nX-Slow: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa\r\n\r\n{}";
        let url = answering(answer, 1, Duration::from_millis(100));
        let started = std::time::Instant::now();
        let got = TurnClient::new(&url, None)
            .unwrap()
            .with_deadline(Duration::from_millis(500))
            .post("/x", "ping");
        let took = started.elapsed();
        assert!(got.is_err(), "{got:?}");
        assert!(took < Duration::from_secs(2), "gave up after {took:?}");
    }

    #[test]
    fn error_text_prefers_the_error_field() {
        let cases: &[(&str, &str)] = &[
            (r#"{"error":"evaluation running"}"#, "evaluation running"),
            ("plain text\nsecond line", "plain text"),
            ("", "(empty body)"),
            (r#"{"other":1}"#, r#"{"other":1}"#),
        ];
        for (body, want) in cases {
            assert_eq!(error_text(body.as_bytes()), *want, "{body}");
        }
    }

    #[test]
    fn status_errors_say_what_to_do() {
        let err = |code| TurnClientError::Status {
            url: "http://127.0.0.1:1".into(),
            code,
            message: "m".into(),
        };
        assert!(err(401).to_string().contains("HOOKVISOR_TOKEN"));
        assert!(
            err(409)
                .to_string()
                .contains("refused the request (409: m)")
        );
        assert!(err(500).to_string().contains("answered 500: m"));
    }
}

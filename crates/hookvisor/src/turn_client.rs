//! The agent adapters' and `fire`'s way to a running `hookvisor serve`: one blocking HTTP/1.1
//! request, `POST /v1/turns/end` or `POST /v1/events/{event}`, over TCP or a Unix socket.
//!
//! A Stop hook is a short-lived process that sends one request and waits for one answer, so
//! blocking `std` sockets with httparse for the answer's head serve it better than an HTTP
//! client stack: nothing to start, nothing to configure, and the adapter stays as quick to
//! launch as the rest of the CLI.
//!
//! `HOOKVISOR_URL` is `http://host:port[/prefix]` or `unix:/path/to.sock`; `HOOKVISOR_SOCKET`,
//! when set, is the socket to reach it through (what `serve --socket PATH -- AGENT` gives the
//! agent, beside a placeholder URL); `HOOKVISOR_TOKEN`, when set, is sent as
//! `Authorization: Bearer <token>`.

use std::fmt;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::Duration;

use hookvisor_core::{EvalReport, Trigger};

/// How long connecting may take; the answer itself may take as long as the hooks run, which the
/// agent's own hook timeout bounds.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// The largest header block or body accepted, so a confused peer cannot exhaust memory.
const MAX_RESPONSE: u64 = 16 * 1024 * 1024;

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
    /// How long the answer may take; `None` waits as long as the server takes.
    deadline: Option<Duration>,
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
        })
    }

    /// Gives up on an answer that has not come within `deadline` (an [`TurnClientError::Io`]
    /// that says it timed out): an adapter must answer before the agent kills it.
    pub fn with_deadline(mut self, deadline: Duration) -> TurnClient {
        self.deadline = Some(deadline);
        self
    }

    /// `POST /v1/turns/end {"trigger": ...}`: the server evaluates and answers the eval JSON.
    pub fn end_turn(&self, trigger: Trigger) -> Result<EvalReport, TurnClientError> {
        let body = serde_json::json!({ "trigger": trigger }).to_string();
        self.post_json("/v1/turns/end", &body)
    }

    /// `POST /v1/events/{event}` with `body` (`{session_id?, trigger, data}`): the server fires
    /// the event and answers its reply (EVENTS.md §3, §5 rule 4), here as JSON. A 400 or 404
    /// comes back as [`TurnClientError::Status`], for the caller to treat as a usage error.
    pub fn fire_event(
        &self,
        event: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value, TurnClientError> {
        self.post_json(&format!("/v1/events/{event}"), &body.to_string())
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

    /// Sends one request and returns the status code and the body.
    fn post(&self, path: &str, body: &str) -> Result<(u16, Vec<u8>), TurnClientError> {
        let (host, target) = match &self.addr {
            ServerAddr::Tcp { authority, prefix } => {
                (authority.as_str(), format!("{prefix}{path}"))
            }
            ServerAddr::Unix { .. } => ("localhost", path.to_owned()),
        };
        let mut request = format!(
            "POST {target} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: hookvisor/{}\r\n\
             Accept: application/json\r\nContent-Type: application/json\r\n\
             Content-Length: {}\r\nConnection: close\r\n",
            env!("CARGO_PKG_VERSION"),
            body.len()
        );
        if let Some(token) = &self.token {
            request.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        request.push_str("\r\n");
        request.push_str(body);

        let io_err = |source| TurnClientError::Io {
            url: self.url.clone(),
            source,
        };
        match &self.addr {
            ServerAddr::Tcp { authority, .. } => {
                let mut stream = self.connect_tcp(authority)?;
                stream.set_read_timeout(self.deadline).map_err(io_err)?;
                stream.write_all(request.as_bytes()).map_err(io_err)?;
                read_response(&mut BufReader::new(stream), &self.url)
            }
            ServerAddr::Unix { path } => {
                let mut stream =
                    UnixStream::connect(path).map_err(|source| TurnClientError::Connect {
                        url: self.url.clone(),
                        source,
                    })?;
                stream.set_read_timeout(self.deadline).map_err(io_err)?;
                stream.write_all(request.as_bytes()).map_err(io_err)?;
                read_response(&mut BufReader::new(stream), &self.url)
            }
        }
    }

    fn connect_tcp(&self, authority: &str) -> Result<TcpStream, TurnClientError> {
        let connect_err = |source| TurnClientError::Connect {
            url: self.url.clone(),
            source,
        };
        let mut last = io::Error::new(io::ErrorKind::NotFound, "the host resolved to no address");
        for addr in authority.to_socket_addrs().map_err(connect_err)? {
            match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                Ok(stream) => return Ok(stream),
                Err(e) => last = e,
            }
        }
        Err(connect_err(last))
    }
}

/// The most header lines an answer may have; serve sends a handful.
const MAX_HEADERS: usize = 64;

/// Reads a status line, headers and a body (Content-Length, chunked, or up to EOF).
fn read_response(reader: &mut impl BufRead, url: &str) -> Result<(u16, Vec<u8>), TurnClientError> {
    let protocol = |why: String| TurnClientError::Protocol {
        url: url.to_owned(),
        why,
    };
    let io_err = |source| TurnClientError::Io {
        url: url.to_owned(),
        source,
    };
    let mut reader = reader.take(MAX_RESPONSE);
    let head = read_head(&mut reader).map_err(|e| match e {
        HeadError::Io(source) => io_err(source),
        HeadError::Protocol(why) => protocol(why),
    })?;
    let mut body = Vec::new();
    if head.chunked {
        loop {
            let mut line = Vec::new();
            reader.read_until(b'\n', &mut line).map_err(io_err)?;
            let size = match httparse::parse_chunk_size(&line) {
                Ok(httparse::Status::Complete((_, size))) => size,
                _ => {
                    return Err(protocol(format!(
                        "chunk size '{}'",
                        String::from_utf8_lossy(&line).trim_end()
                    )));
                }
            };
            if size == 0 {
                break;
            }
            read_exactly(&mut reader, size, &mut body).map_err(io_err)?;
            reader.read_until(b'\n', &mut Vec::new()).map_err(io_err)?;
        }
    } else if let Some(length) = head.length {
        read_exactly(&mut reader, length, &mut body).map_err(io_err)?;
    } else {
        reader.read_to_end(&mut body).map_err(io_err)?;
    }
    Ok((head.code, body))
}

/// What of a response head decides how to read the body.
struct Head {
    /// The status code.
    code: u16,
    /// `Content-Length`, when given.
    length: Option<u64>,
    /// Whether the body comes in chunks.
    chunked: bool,
}

/// Why a response head could not be read.
enum HeadError {
    /// The connection broke.
    Io(io::Error),
    /// The bytes are not an HTTP/1.x response head.
    Protocol(String),
}

/// Reads up to the blank line after the headers and parses them with httparse, leaving the
/// body unread in `reader`.
fn read_head(reader: &mut impl BufRead) -> Result<Head, HeadError> {
    let mut raw = Vec::new();
    loop {
        let fresh = reader.fill_buf().map_err(HeadError::Io)?;
        if fresh.is_empty() {
            return Err(HeadError::Protocol("the headers end early".into()));
        }
        let fresh_len = fresh.len();
        raw.extend_from_slice(fresh);
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut response = httparse::Response::new(&mut headers);
        let head_len = match response.parse(&raw) {
            Ok(httparse::Status::Complete(head_len)) => head_len,
            Ok(httparse::Status::Partial) => {
                reader.consume(fresh_len);
                continue;
            }
            Err(e) => return Err(HeadError::Protocol(format!("response head: {e}"))),
        };
        // Only the head is consumed; what followed it in this read is the body's start.
        reader.consume(fresh_len - (raw.len() - head_len));
        let code = response.code.unwrap_or_default();
        let mut head = Head {
            code,
            length: None,
            chunked: false,
        };
        for header in response.headers.iter() {
            let value = String::from_utf8_lossy(header.value);
            let value = value.trim();
            if header.name.eq_ignore_ascii_case("content-length") {
                head.length = Some(
                    value
                        .parse::<u64>()
                        .map_err(|_| HeadError::Protocol(format!("Content-Length '{value}'")))?,
                );
            } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
                head.chunked = value.to_ascii_lowercase().contains("chunked");
            }
        }
        return Ok(head);
    }
}

fn read_exactly(reader: &mut impl Read, count: u64, into: &mut Vec<u8>) -> io::Result<()> {
    let read = reader.take(count).read_to_end(into)?;
    if (read as u64) < count {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("the body ended after {read} of {count} bytes"),
        ));
    }
    Ok(())
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
            // Small buffers split the head across reads, as a slow socket does.
            for capacity in [1, 7, 4096] {
                let mut reader = BufReader::with_capacity(capacity, raw.as_bytes());
                let got = read_response(&mut reader, "http://x:1")
                    .ok()
                    .map(|(code, body)| (code, String::from_utf8(body).unwrap()));
                assert_eq!(got, want, "{raw:?} read {capacity} bytes at a time");
            }
        }
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

//! Serving the two routes over hyper (rules 2 and 4): a current-thread tokio runtime on the
//! listener's own thread accepts connections, at most [`MAX_CONNECTIONS`] at once, and hyper's
//! HTTP/1 server reads each one's single request within the bounds before [`respond`] routes it
//! and offers it to the wait.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};

use http_body_util::{BodyExt, Limited};
use hyper::body::{Body as _, Incoming};
use hyper::header::{CACHE_CONTROL, CONNECTION, CONTENT_TYPE, HeaderValue, TRANSFER_ENCODING};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, oneshot};

use super::token::{self, TokenHash};
use super::waits::{Offer, Waits};
use super::{HEAD_TIMEOUT, MAX_BODY, MAX_CONNECTIONS, MAX_HEAD, READ_TIMEOUT, answer};

/// The most headers a request may have; more is 431 like an oversized head.
const MAX_HEADERS: usize = 32;

/// How long unread request bytes are drained after an answer (so closing does not reset the
/// connection before the client has read the answer), and at most how many.
const LINGER: Duration = Duration::from_secs(2);
const LINGER_BYTES: usize = 256 * 1024;

/// How often the listener warns that it refused connections: a flood of them, which the agent
/// can make, must not flood the log as well.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// The answer to a connection past [`MAX_CONNECTIONS`], written as it is accepted, before any
/// request: reading one would hold the place the limit keeps free.
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 0\r\n\
    cache-control: no-store\r\nconnection: close\r\n\r\n";

/// Accepts connections on `socket` until `stop` fires (or its sender is dropped), each served
/// by a task of its own, at most [`MAX_CONNECTIONS`] at once.
pub(super) async fn accept(
    socket: std::net::TcpListener,
    waits: Arc<Waits>,
    mut stop: oneshot::Receiver<()>,
) {
    let socket = match TcpListener::from_std(socket) {
        Ok(socket) => socket,
        Err(err) => {
            tracing::error!("callback listener stopped: {err}");
            return;
        }
    };
    let places = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut refusals = Refusals::default();
    loop {
        let stream = tokio::select! {
            _ = &mut stop => return,
            accepted = socket.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(err) => {
                    // EMFILE and the like pass; the connection waits in the backlog meanwhile.
                    tracing::warn!("callback listener: accept failed: {err}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            },
        };
        let Ok(place) = Arc::clone(&places).try_acquire_owned() else {
            if let Some(refused) = refusals.refused(Instant::now()) {
                tracing::warn!(
                    "callback listener: {MAX_CONNECTIONS} connections busy, {refused} refused \
                     (503) since the last warning"
                );
            }
            // A fresh socket's buffer takes the few bytes at once; no linger, which would
            // hold a place after all.
            let _ = stream.try_write(BUSY);
            continue;
        };
        let waits = Arc::clone(&waits);
        tokio::spawn(async move {
            serve(stream, waits).await;
            drop(place);
        });
    }
}

/// Serves the one request of `stream`: its head within [`HEAD_TIMEOUT`] (a connection that
/// has not sent it by then is closed unanswered), the whole within [`READ_TIMEOUT`].
async fn serve(stream: TcpStream, waits: Arc<Waits>) {
    let deadline = tokio::time::Instant::now() + READ_TIMEOUT;
    let service = hyper::service::service_fn(move |request| {
        let waits = Arc::clone(&waits);
        async move { Ok::<_, Infallible>(respond(request, &waits, deadline).await) }
    });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(HEAD_TIMEOUT)
        .max_header_size(MAX_HEAD)
        .max_headers(MAX_HEADERS)
        .keep_alive(false)
        .serve_connection(TokioIo::new(Lingering::new(stream)), service);
    // The answer and its linger after the read's deadline; a client that reads nothing is
    // dropped then.
    let _ = tokio::time::timeout_at(deadline + 2 * LINGER, connection).await;
}

/// The reply to `request`: routed first, so any other path is 404 before its body is read;
/// then its body read whole; then offered to the wait.
async fn respond(
    request: Request<Incoming>,
    waits: &Waits,
    deadline: tokio::time::Instant,
) -> Response<String> {
    // Only the origin form (`/cb/…`): a request naming a scheme or host is no route.
    let uri = request.uri();
    let target = match (uri.scheme(), uri.path_and_query()) {
        (None, Some(target)) => target.as_str(),
        _ => "",
    };
    let Some((hash, query)) = route(request.method().as_str(), target) else {
        return reply(StatusCode::NOT_FOUND, String::new());
    };
    if request.headers().contains_key(TRANSFER_ENCODING) {
        return reply(StatusCode::LENGTH_REQUIRED, String::new());
    }
    if request
        .body()
        .size_hint()
        .exact()
        .is_some_and(|length| length > MAX_BODY as u64)
    {
        return reply(StatusCode::PAYLOAD_TOO_LARGE, String::new());
    }
    let content_type = request
        .headers()
        .get(CONTENT_TYPE)
        .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
    let body = Limited::new(request.into_body(), MAX_BODY).collect();
    let body = match tokio::time::timeout_at(deadline, body).await {
        Ok(Ok(body)) => body.to_bytes(),
        Err(_) => return reply(StatusCode::REQUEST_TIMEOUT, String::new()),
        // It ended before its Content-Length.
        Ok(Err(_)) => return reply(StatusCode::BAD_REQUEST, String::new()),
    };
    let said = answer::read(&query, content_type.as_deref(), &body);
    let verdict = said.as_ref().ok().map(|r| r.verdict);
    match waits.offer(hash, said) {
        Offer::Taken => {
            tracing::info!("callback {hash:?} answered: {verdict:?}");
            reply(StatusCode::OK, r#"{"ok":true}"#.into())
        }
        Offer::Gone => {
            tracing::info!("callback {hash:?}: refused a request for an ended wait");
            reply(
                StatusCode::GONE,
                error_body("this callback was answered already or has expired"),
            )
        }
        Offer::Unknown => reply(StatusCode::NOT_FOUND, String::new()),
        Offer::Refused(refused) => {
            tracing::info!("callback {hash:?}: refused a request: {refused}");
            let status = StatusCode::from_u16(refused.status).unwrap_or(StatusCode::BAD_REQUEST);
            reply(status, error_body(&refused.reason))
        }
    }
}

/// The token hash and query of the two routes (rule 2); `None` for anything else.
fn route(method: &str, target: &str) -> Option<(TokenHash, String)> {
    if method != "GET" && method != "POST" {
        return None;
    }
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let token = match path {
        "/callback" => {
            let mut tokens = form_urlencoded::parse(query.as_bytes())
                .filter(|(key, _)| key == "token")
                .map(|(_, value)| value);
            let token = tokens.next()?;
            // Two tokens: which one is meant is anybody's guess.
            if tokens.next().is_some() {
                return None;
            }
            token.into_owned()
        }
        _ => path.strip_prefix("/cb/")?.to_owned(),
    };
    token::well_formed(&token).then(|| (TokenHash::of(&token), query.to_owned()))
}

fn error_body(reason: &str) -> String {
    serde_json::json!({"ok": false, "error": reason}).to_string()
}

/// `status` with `body` (JSON when not empty, else no information beyond the status), never
/// cached, and the connection closed after it.
fn reply(status: StatusCode, body: String) -> Response<String> {
    let mut response = Response::new(String::new());
    *response.status_mut() = status;
    let headers = response.headers_mut();
    if !body.is_empty() {
        headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    }
    headers.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    *response.body_mut() = body;
    response
}

/// The connections refused for want of a place, warned about at most every [`WARN_EVERY`].
#[derive(Default)]
struct Refusals {
    /// When the last warning was given.
    warned: Option<Instant>,
    /// Refusals since then.
    since: u64,
}

impl Refusals {
    /// Counts one refusal at `now`; the number to warn about when a warning is due.
    fn refused(&mut self, now: Instant) -> Option<u64> {
        self.since += 1;
        match self.warned {
            Some(warned) if now.saturating_duration_since(warned) < WARN_EVERY => None,
            _ => {
                self.warned = Some(now);
                Some(std::mem::take(&mut self.since))
            }
        }
    }
}

/// A connection that closes gracefully: when hyper shuts it down after the answer, unread
/// request bytes are drained for a moment, since closing a socket with unread data resets the
/// connection, which can throw away the answer before the client reads it (a 413 after a
/// large body).
struct Lingering {
    stream: TcpStream,
    /// Once the write side is shut: when draining ends, and how much was drained.
    draining: Option<(Pin<Box<tokio::time::Sleep>>, usize)>,
}

impl Lingering {
    fn new(stream: TcpStream) -> Lingering {
        Lingering {
            stream,
            draining: None,
        }
    }
}

impl AsyncRead for Lingering {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Lingering {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if this.draining.is_none() {
            ready!(Pin::new(&mut this.stream).poll_shutdown(cx))?;
            this.draining = Some((Box::pin(tokio::time::sleep(LINGER)), 0));
        }
        let (until, drained) = this.draining.as_mut().expect("set above");
        let mut sink = [0u8; 8192];
        while *drained < LINGER_BYTES && until.as_mut().poll(cx).is_pending() {
            let mut buf = ReadBuf::new(&mut sink);
            match ready!(Pin::new(&mut this.stream).poll_read(cx, &mut buf)) {
                Ok(()) if !buf.filled().is_empty() => *drained += buf.filled().len(),
                // The client closed its side, or the socket failed: nothing left to wait for.
                _ => break,
            }
        }
        Poll::Ready(Ok(()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The review's F8: each refused connection of a flood wrote a warning line.
    #[test]
    fn refusals_are_warned_about_once_per_period_with_their_count() {
        let start = Instant::now();
        let mut refusals = Refusals::default();
        assert_eq!(refusals.refused(start), Some(1));
        for _ in 0..999 {
            assert_eq!(refusals.refused(start + Duration::from_secs(1)), None);
        }
        assert_eq!(refusals.refused(start + WARN_EVERY), Some(1000));
        assert_eq!(refusals.refused(start + WARN_EVERY), None);
    }

    #[test]
    fn routes_by_table() {
        let token = "A".repeat(token::TOKEN_LEN);
        let hash = TokenHash::of(&token);
        let cases = [
            ("GET", format!("/cb/{token}"), Some((hash, ""))),
            (
                "POST",
                format!("/cb/{token}?action=block"),
                Some((hash, "action=block")),
            ),
            (
                "GET",
                format!("/callback?token={token}"),
                Some((hash, "token=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA")),
            ),
            (
                "POST",
                format!("/callback?action=approve&token={token}"),
                Some((
                    hash,
                    "action=approve&token=AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA",
                )),
            ),
            ("PUT", format!("/cb/{token}"), None),
            ("HEAD", format!("/cb/{token}"), None),
            ("get", format!("/cb/{token}"), None),
            ("GET", "/".into(), None),
            ("GET", "/cb/".into(), None),
            ("GET", "/cb".into(), None),
            ("GET", "/callback".into(), None),
            ("GET", "/callback?token=".into(), None),
            ("GET", "/status".into(), None),
            ("GET", format!("/cb/{token}/"), None),
            ("GET", format!("/cb/{token}/x"), None),
            ("GET", format!("//cb/{token}"), None),
            ("GET", format!("/cb/../cb/{token}"), None),
            ("GET", format!("/callback/?token={token}"), None),
            (
                "GET",
                format!("/callback?token={token}&token={token}"),
                None,
            ),
            ("GET", format!("/cb/{token}A"), None),
        ];
        for (method, target, want) in cases {
            let got = route(method, &target);
            let want = want.map(|(hash, query)| (hash, query.to_owned()));
            assert!(got == want, "{method} {target}: {got:?}");
        }
    }
}

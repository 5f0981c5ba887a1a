//! Accepting connections and routing each one's single request (rules 2 and 4).

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags, PollTimeout, poll};

use super::request::{self, Refusal};
use super::token::{self, TokenHash};
use super::waits::{Offer, Waits};
use super::{HEAD_TIMEOUT, MAX_CONNECTIONS, READ_TIMEOUT, answer};

/// How long an answer may take to write, and how long unread request bytes are drained after
/// it (so closing does not reset the connection before the client has read the answer).
const LINGER: Duration = Duration::from_secs(2);

/// The most unread bytes drained after an answer.
const LINGER_BYTES: usize = 256 * 1024;

/// How often the listener warns that it refused connections: a flood of them, which the agent
/// can make, must not flood the log as well.
const WARN_EVERY: Duration = Duration::from_secs(10);

/// Accepts connections until `stop` becomes readable, each served on a thread of its own, at
/// most [`MAX_CONNECTIONS`] at once.
pub(super) fn accept(socket: TcpListener, waits: Arc<Waits>, stop: OwnedFd) {
    let serving = Arc::new(AtomicUsize::new(0));
    let mut refusals = Refusals::default();
    loop {
        let mut fds = [
            PollFd::new(socket.as_fd(), PollFlags::POLLIN),
            PollFd::new(stop.as_fd(), PollFlags::POLLIN),
        ];
        if let Err(err) = poll(&mut fds, PollTimeout::NONE) {
            if err == nix::errno::Errno::EINTR {
                continue;
            }
            tracing::error!("callback listener stopped: poll failed: {err}");
            return;
        }
        if fds[1].any().unwrap_or(false) {
            return;
        }
        let stream = match socket.accept() {
            Ok((stream, _)) => stream,
            Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(err) => {
                // EMFILE and the like pass; the connection waits in the backlog meanwhile.
                tracing::warn!("callback listener: accept failed: {err}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        // Counted here, before the thread starts, so the bound holds however threads are
        // scheduled.
        if serving.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            serving.fetch_sub(1, Ordering::SeqCst);
            if let Some(refused) = refusals.refused(Instant::now()) {
                tracing::warn!(
                    "callback listener: {MAX_CONNECTIONS} connections busy, {refused} refused \
                     (503) since the last warning"
                );
            }
            // Written from this thread, so without the drain: lingering here would stall
            // accepting for everyone. A fresh socket's buffer takes the few bytes at once.
            let _ = write_reply(&stream, &Reply::status(503));
            continue;
        }
        let slot = Slot(Arc::clone(&serving));
        let waits = Arc::clone(&waits);
        let started = std::thread::Builder::new()
            .name("hookvisor-callback-conn".into())
            .spawn(move || {
                let _slot = slot;
                serve(stream, &waits);
            });
        if let Err(err) = started {
            // The closure, the stream and its slot are dropped with the error.
            tracing::warn!("callback listener: cannot start a thread: {err}");
        }
    }
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

/// One connection's place among the [`MAX_CONNECTIONS`], given back when it ends.
struct Slot(Arc<AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Reads one request, answers it, closes.
fn serve(mut stream: TcpStream, waits: &Waits) {
    let deadline = Instant::now() + READ_TIMEOUT;
    let reply = match respond(&mut stream, waits, deadline) {
        Ok(reply) => reply,
        Err(Refusal::Status(status)) => Reply::status(status),
        Err(Refusal::Gone) => return,
    };
    let _ = answer_with(stream, &reply);
}

/// The reply to the request on `stream`: routed first, so any other path is 404 before its
/// body is read; then read whole; then offered to the wait.
fn respond(stream: &mut TcpStream, waits: &Waits, deadline: Instant) -> Result<Reply, Refusal> {
    let head = request::read_head(stream, deadline.min(Instant::now() + HEAD_TIMEOUT))?;
    let Some((hash, query)) = route(&head.method, &head.target) else {
        return Ok(Reply::status(404));
    };
    let content_type = head.content_type.clone();
    let body = request::read_body(stream, head, deadline)?;
    let said = answer::read(&query, content_type.as_deref(), &body);
    let verdict = said.as_ref().ok().map(|r| r.verdict);
    Ok(match waits.offer(hash, said) {
        Offer::Taken => {
            tracing::info!("callback {hash:?} answered: {verdict:?}");
            Reply::json(200, r#"{"ok":true}"#.into())
        }
        Offer::Gone => {
            tracing::info!("callback {hash:?}: refused a request for an ended wait");
            Reply::json(
                410,
                error_body("this callback was answered already or has expired"),
            )
        }
        Offer::Unknown => Reply::status(404),
        Offer::Refused(refused) => {
            tracing::info!("callback {hash:?}: refused a request: {refused}");
            Reply::json(refused.status, error_body(&refused.reason))
        }
    })
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

/// A status and an optional JSON body.
struct Reply {
    status: u16,
    body: String,
}

impl Reply {
    /// A status with no body: no information beyond it.
    fn status(status: u16) -> Reply {
        Reply {
            status,
            body: String::new(),
        }
    }

    fn json(status: u16, body: String) -> Reply {
        Reply { status, body }
    }
}

/// Writes `reply` with `Connection: close`, then closes gracefully: unread request bytes are
/// drained for a moment, since closing a socket with unread data resets the connection, which
/// can throw away the answer before the client reads it (a 413 after a large body).
fn answer_with(mut stream: TcpStream, reply: &Reply) -> std::io::Result<()> {
    write_reply(&stream, reply)?;
    stream.shutdown(Shutdown::Write)?;
    let until = Instant::now() + LINGER;
    let mut drained = 0;
    let mut sink = [0u8; 8192];
    while drained < LINGER_BYTES {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut sink) {
            Ok(0) | Err(_) => break,
            Ok(n) => drained += n,
        }
    }
    Ok(())
}

/// Writes `reply` whole, within [`LINGER`].
fn write_reply(mut stream: &TcpStream, reply: &Reply) -> std::io::Result<()> {
    let reason = match reply.status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        408 => "Request Timeout",
        410 => "Gone",
        411 => "Length Required",
        413 => "Content Too Large",
        415 => "Unsupported Media Type",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "",
    };
    let content_type = if reply.body.is_empty() {
        ""
    } else {
        "Content-Type: application/json\r\n"
    };
    let text = format!(
        "HTTP/1.1 {} {reason}\r\n{content_type}Content-Length: {}\r\nCache-Control: no-store\r\n\
         Connection: close\r\n\r\n{}",
        reply.status,
        reply.body.len(),
        reply.body
    );
    stream.set_write_timeout(Some(LINGER))?;
    stream.write_all(text.as_bytes())
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

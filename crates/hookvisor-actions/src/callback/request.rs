//! Reading one callback request within the bounds of rule 4: the head parsed by `httparse`, the
//! body by `Content-Length` only, the whole within one deadline.

use std::io::{ErrorKind, Read};
use std::net::TcpStream;
use std::time::Instant;

use super::{MAX_BODY, MAX_HEAD};

/// The most headers a request may have; more is 431 like an oversized head.
const MAX_HEADERS: usize = 32;

/// A request head read whole.
#[derive(Debug)]
pub(super) struct Head {
    /// `GET`, `POST`, or whatever else the client sent (routed to 404).
    pub(super) method: String,
    /// The request target as sent: path and query.
    pub(super) target: String,
    /// `Content-Length`, 0 without one.
    pub(super) content_length: usize,
    /// `Content-Type`, if any.
    pub(super) content_type: Option<String>,
    /// Whether a `Transfer-Encoding` was sent (chunked bodies are refused).
    transfer_encoding: bool,
    /// What was read past the head: the start of the body.
    rest: Vec<u8>,
}

/// Why a request is not read whole.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// Answer with this status (400, 408, 411, 413, 431).
    Status(u16),
    /// The client went away or the socket failed: nobody to answer.
    Gone,
}

/// Reads and parses the request head, at most [`MAX_HEAD`] bytes, before `deadline`; a client
/// that sends nothing by then is [`Refusal::Gone`].
pub(super) fn read_head(stream: &mut TcpStream, deadline: Instant) -> Result<Head, Refusal> {
    let mut buf = Vec::with_capacity(1024);
    loop {
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut request = httparse::Request::new(&mut headers);
        match request.parse(&buf) {
            Ok(httparse::Status::Complete(len)) => {
                return head_of(&request, buf[len..].to_vec());
            }
            Ok(httparse::Status::Partial) => {}
            Err(httparse::Error::TooManyHeaders) => return Err(Refusal::Status(431)),
            Err(_) => return Err(Refusal::Status(400)),
        }
        if buf.len() >= MAX_HEAD {
            return Err(Refusal::Status(431));
        }
        let start = buf.len();
        buf.resize(MAX_HEAD, 0);
        let read = read_some(stream, &mut buf[start..], deadline);
        buf.truncate(start + read.as_ref().copied().unwrap_or(0));
        // A connection that said nothing in time gets no answer, so it is not kept for the
        // answer's linger either: idle connections are a flood's cheapest way to hold places.
        if start == 0 && read == Err(Refusal::Status(408)) {
            return Err(Refusal::Gone);
        }
        match read? {
            0 if start == 0 => return Err(Refusal::Gone),
            // The client stopped sending halfway through its head.
            0 => return Err(Refusal::Status(400)),
            _ => {}
        }
    }
}

/// Reads the body `head` announces, at most [`MAX_BODY`] bytes, before `deadline`.
pub(super) fn read_body(
    stream: &mut TcpStream,
    head: Head,
    deadline: Instant,
) -> Result<Vec<u8>, Refusal> {
    if head.transfer_encoding {
        return Err(Refusal::Status(411));
    }
    if head.content_length > MAX_BODY {
        return Err(Refusal::Status(413));
    }
    let mut body = head.rest;
    // Bytes past the announced length (a pipelined request) are not ours: Connection: close.
    body.truncate(head.content_length);
    let mut have = body.len();
    body.resize(head.content_length, 0);
    while have < body.len() {
        match read_some(stream, &mut body[have..], deadline)? {
            0 => return Err(Refusal::Status(400)),
            n => have += n,
        }
    }
    Ok(body)
}

fn head_of(request: &httparse::Request<'_, '_>, rest: Vec<u8>) -> Result<Head, Refusal> {
    let (Some(method), Some(target)) = (request.method, request.path) else {
        return Err(Refusal::Status(400));
    };
    let mut content_length = None;
    let mut content_type = None;
    let mut transfer_encoding = false;
    for header in request.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            let value = std::str::from_utf8(header.value)
                .ok()
                .map(str::trim)
                .filter(|v| !v.is_empty() && v.bytes().all(|b| b.is_ascii_digit()))
                // Too large for usize is as much too large as anything past MAX_BODY.
                .map(|v| v.parse::<usize>().unwrap_or(usize::MAX))
                .ok_or(Refusal::Status(400))?;
            // Two different lengths are how requests get smuggled past a proxy.
            if content_length.is_some_and(|earlier| earlier != value) {
                return Err(Refusal::Status(400));
            }
            content_length = Some(value);
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            transfer_encoding = true;
        } else if header.name.eq_ignore_ascii_case("content-type") {
            content_type = Some(String::from_utf8_lossy(header.value).into_owned());
        }
    }
    Ok(Head {
        method: method.to_owned(),
        target: target.to_owned(),
        content_length: content_length.unwrap_or(0),
        content_type,
        transfer_encoding,
        rest,
    })
}

/// One read bounded by `deadline`: the socket's read timeout is what is left of it, so a client
/// trickling a byte at a time still runs out.
fn read_some(stream: &mut TcpStream, buf: &mut [u8], deadline: Instant) -> Result<usize, Refusal> {
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Refusal::Status(408));
        }
        stream
            .set_read_timeout(Some(left))
            .map_err(|_| Refusal::Gone)?;
        match stream.read(buf) {
            Ok(n) => return Ok(n),
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return Err(Refusal::Status(408));
            }
            Err(_) => return Err(Refusal::Gone),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::TcpListener;
    use std::time::Duration;

    use super::*;

    /// A connected pair over real TCP: what the client sends, the server side to read from.
    fn pair(sent: &[u8]) -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        client.write_all(sent).unwrap();
        let (server, _) = listener.accept().unwrap();
        (client, server)
    }

    fn read_whole(sent: &[u8]) -> Result<(Head, Vec<u8>), Refusal> {
        let (client, mut server) = pair(sent);
        // The client is done: a short read is an end, not a wait.
        client.shutdown(std::net::Shutdown::Write).unwrap();
        let deadline = Instant::now() + Duration::from_secs(30);
        let head = read_head(&mut server, deadline)?;
        let (method, target) = (head.method.clone(), head.target.clone());
        let body = read_body(&mut server, head, deadline)?;
        let again = Head {
            method,
            target,
            content_length: 0,
            content_type: None,
            transfer_encoding: false,
            rest: Vec::new(),
        };
        Ok((again, body))
    }

    #[test]
    fn a_request_with_a_body_is_read_whole() {
        let (head, body) =
            read_whole(b"POST /cb/x?a=1 HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello")
                .unwrap();
        assert_eq!(
            (head.method.as_str(), head.target.as_str()),
            ("POST", "/cb/x?a=1")
        );
        assert_eq!(body, b"hello");
    }

    #[test]
    fn refusals_by_table() {
        let big = format!("GET /{} HTTP/1.1\r\n\r\n", "a".repeat(MAX_HEAD));
        let headers = (0..=MAX_HEADERS)
            .map(|i| format!("X-{i}: y\r\n"))
            .collect::<String>();
        let many = format!("GET / HTTP/1.1\r\n{headers}\r\n");
        let over = format!(
            "POST / HTTP/1.1\r\nContent-Length: {}\r\n\r\n",
            MAX_BODY + 1
        );
        let cases: [(&[u8], Refusal); 9] = [
            (big.as_bytes(), Refusal::Status(431)),
            (many.as_bytes(), Refusal::Status(431)),
            (over.as_bytes(), Refusal::Status(413)),
            (
                b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999999\r\n\r\n",
                Refusal::Status(413),
            ),
            (
                b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
                Refusal::Status(411),
            ),
            (
                b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
                Refusal::Status(400),
            ),
            (
                b"POST / HTTP/1.1\r\nContent-Length: -1\r\n\r\n",
                Refusal::Status(400),
            ),
            // The client stops within the head, then within the body.
            (b"GET / HTTP/1.1\r\nHost", Refusal::Status(400)),
            (
                b"POST / HTTP/1.1\r\nContent-Length: 9\r\n\r\nhalf",
                Refusal::Status(400),
            ),
        ];
        for (sent, want) in cases {
            let got = read_whole(sent).map(|_| ());
            assert_eq!(
                got,
                Err(want),
                "{}",
                String::from_utf8_lossy(&sent[..sent.len().min(80)])
            );
        }
        assert_eq!(read_whole(b"").map(|_| ()), Err(Refusal::Gone));
        assert_eq!(
            read_whole(b"\x00\x01junk\r\n\r\n").map(|_| ()),
            Err(Refusal::Status(400))
        );
    }

    #[test]
    fn a_client_that_stops_sending_runs_out_of_time() {
        let (_client, mut server) = pair(b"GET /cb/x HTTP/1.1\r\n");
        let started = Instant::now();
        let deadline = started + Duration::from_millis(200);
        assert_eq!(
            read_head(&mut server, deadline).map(|_| ()),
            Err(Refusal::Status(408))
        );
        assert!(started.elapsed() >= Duration::from_millis(200));
    }

    /// The review's F8: an idle connection was answered 408 and lingered over, holding its
    /// place for the whole read timeout and more. It is dropped unanswered now.
    #[test]
    fn a_client_that_sends_nothing_is_dropped_unanswered() {
        let (_client, mut server) = pair(b"");
        let deadline = Instant::now() + Duration::from_millis(100);
        assert_eq!(
            read_head(&mut server, deadline).map(|_| ()),
            Err(Refusal::Gone)
        );
    }
}

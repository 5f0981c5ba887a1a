//! A webhook receiver on 127.0.0.1 that answers the `${callback_url}` it was sent over real
//! TCP, as a person approving in a chat would (tests/actions/callback.rs, tests/import/import_loop.rs).

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use serde_json::Value as Json;

/// A receiver of one webhook: answers it 200 with the body it got, then calls `answer` with the callback URL the
/// body carried. Joining gives the body it got.
pub fn receiver(answer: impl FnOnce(&str) + Send + 'static) -> (u16, JoinHandle<Json>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = thread::spawn(move || {
        let (mut stream, _) = listener.accept().unwrap();
        let body = read_request(&mut stream);
        // Echoed back, as a chat API returns the message it posted: the token must not reach
        // the log through the answer.
        write!(
            stream,
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
            body.len()
        )
        .unwrap();
        stream.write_all(&body).unwrap();
        drop(stream);
        let body: Json = serde_json::from_slice(&body).unwrap();
        answer(
            body["cb"]
                .as_str()
                .expect("the body carries the callback URL"),
        );
        body
    });
    (port, handle)
}

/// Reads one HTTP request whole; its body.
pub fn read_request(stream: &mut TcpStream) -> Vec<u8> {
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let n = stream.read(&mut chunk).unwrap();
        assert_ne!(n, 0, "the request ended early");
        raw.extend_from_slice(&chunk[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 32];
        let mut request = httparse::Request::new(&mut headers);
        if let httparse::Status::Complete(len) = request.parse(&raw).unwrap() {
            let length: usize = request
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
                .unwrap_or(0);
            if raw.len() >= len + length {
                return raw[len..len + length].to_vec();
            }
        }
    }
}

/// A GET of `url` (`http://127.0.0.1:PORT/…`) with `query` appended; the status.
pub fn call_back(url: &str, query: &str) -> u16 {
    let rest = url.strip_prefix("http://").expect("an http URL");
    let (host, path) = rest.split_once('/').unwrap();
    let mut stream = TcpStream::connect(host).unwrap();
    write!(
        stream,
        "GET /{path}{query} HTTP/1.1\r\nHost: {host}\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    answer[9..12].parse().unwrap()
}

//! The one HTTP receiver of the tests: a server thread on 127.0.0.1 that answers a script of
//! answers and hands over every request it took, and the request reader it is built on.

use std::io::{BufRead as _, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use serde_json::Value;

/// One request a receiver took.
#[derive(Debug)]
pub struct Request {
    /// `GET`, `POST`, …
    pub method: String,
    /// The request target: path and query.
    pub path: String,
    /// Lower-cased names.
    pub headers: Vec<(String, String)>,
    /// As sent, `Content-Length` bytes.
    pub body: Vec<u8>,
}

impl Request {
    /// The value of the header `name` (lower case).
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, v)| v.as_str())
    }

    /// The body as JSON; panics with the body when it is not.
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&self.body)))
    }
}

/// One HTTP/1.1 request with a `Content-Length` body; `None` when the client went away.
pub fn read_request(stream: impl Read) -> Option<Request> {
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_owned();
    let path = parts.next()?.to_owned();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).ok()?;
        let line = line.trim_end_matches(['\r', '\n']);
        if line.is_empty() {
            break;
        }
        let (name, value) = line.split_once(':')?;
        headers.push((name.to_ascii_lowercase(), value.trim().to_owned()));
    }
    let length = headers
        .iter()
        .find(|(n, _)| n == "content-length")
        .map_or(0, |(_, v)| v.parse::<usize>().unwrap());
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Request {
        method,
        path,
        headers,
        body,
    })
}

/// Accepts one connection on `listener` and reads its request whole (a minute at the most).
pub fn accept_request(listener: &TcpListener) -> (TcpStream, Request) {
    let (mut stream, _) = listener.accept().unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let request = read_request(&mut stream).expect("the request ended early");
    (stream, request)
}

/// An answer: status, extra header lines, body. Status 0 answers nothing and holds the
/// connection open.
pub type Answer = (u16, String, String);

/// A stream a receiver talks over: TCP, or TLS over it.
pub trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

/// A receiver on 127.0.0.1: answers its connections with `answers` in turn (the last one
/// again for any more), and hands every request it took to [`Receiver::taken`].
pub struct Receiver {
    /// `http://127.0.0.1:PORT`.
    pub url: String,
    /// Every request taken, handed over before it is answered.
    pub requests: mpsc::Receiver<Request>,
}

impl Receiver {
    /// A receiver over plain TCP.
    pub fn start(answers: Vec<Answer>) -> Receiver {
        Receiver::start_with(answers, |stream| Box::new(stream))
    }

    /// A receiver whose connections go through `wrap` (TLS).
    pub fn start_with(
        answers: Vec<Answer>,
        wrap: impl Fn(TcpStream) -> Box<dyn ReadWrite> + Send + 'static,
    ) -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = mpsc::channel();
        // Lives as long as the test process: it blocks in `accept` once the test is done.
        thread::spawn(move || {
            let mut held = Vec::new();
            for (n, stream) in listener.incoming().enumerate() {
                let Ok(stream) = stream else { continue };
                let mut stream = wrap(stream);
                let Some(request) = read_request(&mut *stream) else {
                    continue;
                };
                let (status, extra, body) = answers[n.min(answers.len() - 1)].clone();
                // Handed over before the reply: once `fire` has its answer, it may return and
                // the test look at what was taken before this thread runs again.
                if tx.send(request).is_err() {
                    return;
                }
                if status == 0 {
                    held.push(stream);
                    continue;
                }
                let reply = format!(
                    "HTTP/1.1 {status} X\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(reply.as_bytes());
                let _ = stream.flush();
            }
        });
        Receiver {
            url: format!("http://127.0.0.1:{port}"),
            requests: rx,
        }
    }

    /// `127.0.0.1:PORT`, as a `NAME_HOSTS` entry names it.
    pub fn host(&self) -> &str {
        self.url.trim_start_matches("http://")
    }

    /// The requests taken so far. `fire` waits for its webhook, so after it returns every
    /// attempt has been answered and handed over.
    pub fn taken(&self) -> Vec<Request> {
        self.requests.try_iter().collect()
    }
}

/// A receiver of one webhook that answers the `${callback_url}` it was sent, as a person
/// approving in a chat would: answers it 200 with the body it got, then calls `answer` with the
/// callback URL the body carried (its `cb`). Joining gives the body it got.
pub fn receiver(answer: impl FnOnce(&str) + Send + 'static) -> (u16, JoinHandle<Value>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let handle = thread::spawn(move || {
        let (mut stream, request) = accept_request(&listener);
        let body = request.body;
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
        let body: Value = serde_json::from_slice(&body).unwrap();
        answer(
            body["cb"]
                .as_str()
                .expect("the body carries the callback URL"),
        );
        body
    });
    (port, handle)
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

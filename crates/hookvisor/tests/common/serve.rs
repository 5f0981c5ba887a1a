//! `hookvisor serve` under test: started on a free port or a socket, its address read from its
//! first line of output, and a small HTTP/1.0 client. With HTTP/1.0 the server ends every body by
//! closing the connection, so there is no chunked encoding to undo, even for the event stream.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use nix::sys::signal::{Signal, kill};
use nix::unistd::Pid;
use serde_json::Value;

use super::Workspace;

/// Long enough for a loaded CI machine (an fsync of status.json can wait seconds behind other
/// writers on a busy disk), short enough that a hang fails the test.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// Where the server listens.
#[derive(Debug, Clone)]
pub enum Addr {
    Tcp(String),
    Unix(PathBuf),
}

/// A connection, over TCP or a Unix socket.
pub trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

impl Addr {
    /// Opens a connection with the deadline as read timeout.
    pub fn connect(&self) -> Box<dyn Stream> {
        let stream: Box<dyn Stream> = match self {
            Addr::Tcp(addr) => {
                let s = TcpStream::connect(addr).expect("connect to the server");
                s.set_read_timeout(Some(DEADLINE)).unwrap();
                Box::new(s)
            }
            Addr::Unix(path) => {
                let s = UnixStream::connect(path).expect("connect to the socket");
                s.set_read_timeout(Some(DEADLINE)).unwrap();
                Box::new(s)
            }
        };
        stream
    }
}

/// A running `hookvisor serve`; killed on drop if a test did not stop it.
pub struct Server {
    /// The `hookvisor serve` process.
    pub child: Child,
    /// Where it listens.
    pub addr: Addr,
    /// stdout after the `listening on` line (the agent's output, in agent mode).
    pub lines: mpsc::Receiver<String>,
}

impl Server {
    /// Starts `hookvisor serve ARGS` in `ws` with `env` added; returns once it listens.
    pub fn start(ws: &Workspace, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = ws.hookvisor_command();
        cmd.arg("serve").args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Server::spawn(cmd)
    }

    /// Starts `cmd`, a `hookvisor serve` command made by the caller; returns once it listens.
    pub fn spawn(mut cmd: Command) -> Server {
        cmd.stdin(Stdio::null()).stdout(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn hookvisor serve");
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let first = lines
            .recv_timeout(DEADLINE)
            .expect("serve prints `listening on ...` first");
        let url = first
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("first line: {first:?}"));
        let addr = if let Some(addr) = url.strip_prefix("http://") {
            Addr::Tcp(addr.to_owned())
        } else if let Some(path) = url.strip_prefix("unix:") {
            Addr::Unix(path.into())
        } else {
            panic!("unexpected address {url:?}")
        };
        Server { child, addr, lines }
    }

    /// Starts the server on a free loopback port.
    pub fn tcp(ws: &Workspace) -> Server {
        Server::start(ws, &["--listen", "127.0.0.1:0"], &[])
    }

    /// `GET path`.
    pub fn get(&self, path: &str) -> Response {
        request(&self.addr, "GET", path, &[], "")
    }

    /// `POST path` with a JSON body (or none when empty).
    pub fn post(&self, path: &str, body: &str) -> Response {
        request(&self.addr, "POST", path, &[], body)
    }

    /// Subscribes to `/v1/events`.
    pub fn events(&self) -> Events {
        Events::open(&self.addr)
    }

    /// Sends `sig` to the server.
    pub fn signal(&self, sig: Signal) {
        kill(Pid::from_raw(self.child.id() as i32), sig).unwrap();
    }

    /// Waits for the server to exit, failing the test after the deadline.
    pub fn wait(&mut self) -> ExitStatus {
        let start = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(start.elapsed() < DEADLINE, "serve did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGTERM, then waits for the exit.
    pub fn stop(mut self) -> ExitStatus {
        self.signal(Signal::SIGTERM);
        self.wait()
    }
}

impl Drop for Server {
    /// A test that failed half-way leaves a server behind: SIGTERM first, so it stops the hook it
    /// runs (hooks live in their own process groups and would outlive a SIGKILLed server).
    fn drop(&mut self) {
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        let _ = kill(Pid::from_raw(self.child.id() as i32), Signal::SIGTERM);
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(5) {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A whole response.
#[derive(Debug)]
pub struct Response {
    /// The status code.
    pub status: u16,
    /// The headers, as sent.
    pub headers: Vec<(String, String)>,
    /// The body.
    pub body: String,
}

impl Response {
    /// The body as JSON; panics with the body if it is not.
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("{e}: not JSON: {:?}", self.body))
    }

    /// A header by name, ignoring case.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Sends a request; returns the connection to read the response from.
///
/// The request says `Host: localhost`, and a POST says `Content-Type: application/json`, as
/// the server requires; a header in `headers` replaces these, and one with an empty value leaves
/// them out.
pub fn send(
    addr: &Addr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> BufReader<Box<dyn Stream>> {
    let mut stream = addr.connect();
    let mut message = format!(
        "{method} {path} HTTP/1.0\r\nContent-Length: {}\r\n",
        body.len()
    );
    let mut defaults = vec![("Host", "localhost")];
    if method == "POST" {
        defaults.push(("Content-Type", "application/json"));
    }
    let given = |name: &str| headers.iter().any(|(k, _)| k.eq_ignore_ascii_case(name));
    let defaults = defaults.into_iter().filter(|(k, _)| !given(k));
    for (k, v) in defaults.chain(headers.iter().copied()) {
        if !v.is_empty() {
            message.push_str(&format!("{k}: {v}\r\n"));
        }
    }
    message.push_str("\r\n");
    // One write: a server that refuses on the head alone (415, 403) answers and closes without
    // reading the body, and a second write could then meet the closed socket (EPIPE).
    message.push_str(body);
    stream.write_all(message.as_bytes()).unwrap();
    stream.flush().unwrap();
    BufReader::new(stream)
}

/// Reads the status line and headers.
pub fn read_head(reader: &mut impl BufRead) -> (u16, Vec<(String, String)>) {
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    let status: u16 = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("status line {line:?}"));
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':').unwrap();
        headers.push((k.to_owned(), v.trim().to_owned()));
    }
    (status, headers)
}

/// One request, its whole response.
pub fn request(
    addr: &Addr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Response {
    let mut reader = send(addr, method, path, headers, body);
    let (status, headers) = read_head(&mut reader);
    let mut body = String::new();
    reader.read_to_string(&mut body).unwrap();
    Response {
        status,
        headers,
        body,
    }
}

/// An open `/v1/events` stream.
pub struct Events {
    reader: BufReader<Box<dyn Stream>>,
}

impl Events {
    /// Opens the stream; returns once the server has subscribed it.
    pub fn open(addr: &Addr) -> Events {
        let mut reader = send(addr, "GET", "/v1/events", &[], "");
        // The headers come once the server has subscribed: events from now on are ours.
        let (status, headers) = read_head(&mut reader);
        assert_eq!(status, 200);
        assert!(
            headers
                .iter()
                .any(|(k, v)| k.eq_ignore_ascii_case("content-type")
                    && v.starts_with("text/event-stream")),
            "{headers:?}"
        );
        Events { reader }
    }

    /// The next event as (name, data); keep-alive comments are skipped.
    pub fn next(&mut self) -> (String, Value) {
        let (mut name, mut data) = (String::new(), String::new());
        loop {
            let mut line = String::new();
            let n = self
                .reader
                .read_line(&mut line)
                .expect("an event before the deadline");
            assert!(n > 0, "the event stream ended");
            let line = line.trim_end_matches(['\r', '\n']);
            if line.is_empty() {
                if !data.is_empty() {
                    return (name, serde_json::from_str(&data).unwrap());
                }
                continue;
            }
            if let Some(v) = line.strip_prefix("event:") {
                name = v.trim().to_owned();
            } else if let Some(v) = line.strip_prefix("data:") {
                data.push_str(v.trim());
            }
        }
    }

    /// Events until one satisfies `want`, which is returned; the others are returned too, in
    /// order, for assertions on what came before.
    pub fn until(&mut self, want: impl Fn(&str, &Value) -> bool) -> Vec<(String, Value)> {
        let start = Instant::now();
        let mut seen = Vec::new();
        loop {
            assert!(
                start.elapsed() < DEADLINE,
                "no matching event; saw {seen:?}"
            );
            let (name, data) = self.next();
            let done = want(&name, &data);
            seen.push((name, data));
            if done {
                return seen;
            }
        }
    }
}

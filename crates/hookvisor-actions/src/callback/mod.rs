//! The callback listener an awaited webhook waits on (docs/EVENTS.md §4.3, §5 rule 22): a person or
//! a service answers a hook by requesting the one-use `${callback_url}` the webhook sent out.
//!
//! The rules, written once here:
//!
//! 1. **One listener per process**, on 127.0.0.1 only, started on first use by [`listener`]
//!    (`serve` and the firing CLI both call it; a CLI-hosted one lives as long as the CLI). Its
//!    port is `callback.port` of `.discobot/hookvisor.yml` (or a hook's `callback_port`, passed
//!    in the same [`Callback`] value), else ephemeral: fixed ports collide across sessions. A
//!    configured port that is taken is an error naming it. `callback.public_url` changes only
//!    the base of `${callback_url}` (a tunnel or proxy in front), never what is bound.
//! 2. **Two routes and nothing else**: `GET|POST /cb/<token>` and agent-pipelines'
//!    `GET|POST /callback?token=<token>`. Every other method or path is a bare 404, so a tunnel
//!    exposes nothing else and a scanner learns nothing.
//! 3. **Tokens**: 32 bytes of the OS CSPRNG, spelled base64url without padding, one per wait
//!    ([`Listener::register`]). Only their SHA-256 is kept. The first acceptable request takes
//!    the wait (one mutex) and is answered 200 `{"ok":true}`; any later request for it is 410,
//!    as is one after the wait timed out, was cancelled or was dropped; an unknown token is
//!    404. The last [`REVOKED_KEPT`] ended tokens are remembered for their 410; older ones
//!    fall back to 404. A token never appears in a log line or an error.
//! 4. **Bounded requests**, read by hyper's HTTP/1 server: a head of at most [`MAX_HEAD`]
//!    bytes and 32 headers (else 431; a malformed one is 400), a body of at most [`MAX_BODY`]
//!    bytes announced by `Content-Length` (larger: 413; `Transfer-Encoding`: 411), the head
//!    within [`HEAD_TIMEOUT`] (a connection that has not sent it by then is closed
//!    unanswered), the whole request within [`READ_TIMEOUT`] (else 408), at most
//!    [`MAX_CONNECTIONS`] connections served at once (more: 503), and `Connection: close`
//!    after every answer. A refused request never takes the wait.
//! 5. **The answer**, read strictly so that nothing but a plain answer takes the wait:
//!    `action` and `message` come from the query (`?action=approve`), from an
//!    `application/json` body that is one object with each key once (no BOM), or from an
//!    `application/x-www-form-urlencoded` body; the body wins over the query. A body of any
//!    other type (text, multipart, none given) is 415; a key that differs from `action` or
//!    `message` only in case is 400. `approve`, `continue` or `none` is [`Verdict::Success`];
//!    `reject`, `abort`, `deny` is [`Verdict::Abort`]; `block` is [`Verdict::Block`] (the
//!    value's case does not matter). No action at all is 400: link unfurlers, mail scanners and
//!    prefetches fetch a bare URL by themselves, and must not answer for a person. Any other
//!    action, a repeated one or one that is no string is 400 too. Every refusal leaves the
//!    wait open, so the sender can correct it. `${hook_response}` is `{"query":{…},"body":…}`:
//!    every query parameter but the pipelines `token` (repeated ones as an array), and the
//!    body as JSON, a form body as its text (`null` when there is none).
//! 6. **A wait ends exactly once** ([`Pending::wait`]): [`Answer::Taken`] when a request took
//!    it (even if the deadline or a cancel came at the same moment: its sender was told 200),
//!    else [`Answer::TimedOut`] or [`Answer::Cancelled`]. Waits live in memory: a restart ends
//!    them all, and their senders then get 404.
//!
//! This file holds the listener and the waits' public face; `token` makes and hashes tokens,
//! `waits` is the table requests and waits meet in (rules 3 and 6), `answer` reads what a
//! request says (rule 5) and `server` accepts connections, bounds them and routes their
//! requests (rules 2 and 4), on a current-thread tokio runtime of the listener's own thread.

#![forbid(unsafe_code)]

mod answer;
mod server;
mod token;
mod waits;

use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{SigSet, SigmaskHow};

use hookvisor_core::config::Callback;
use hookvisor_core::exec::CancelToken;

use self::token::{Token, TokenHash};
use self::waits::Waits;

/// The longest request head taken, request line and headers (rule 4).
pub const MAX_HEAD: usize = 8 * 1024;

/// The largest request body taken (rule 4; docs/EVENTS.md §4.3).
pub const MAX_BODY: usize = 64 * 1024;

/// How long one connection may take to send its whole request (rule 4).
pub const READ_TIMEOUT: Duration = Duration::from_secs(10);

/// How long one connection may take to send its request head (rule 4): a client sends it at
/// once, and an idle connection gives its place back soon.
pub const HEAD_TIMEOUT: Duration = Duration::from_secs(2);

/// How many connections are served at once; more are answered 503 (rule 4).
pub const MAX_CONNECTIONS: usize = 32;

/// How many ended tokens are remembered to answer 410 rather than 404 (rule 3).
pub const REVOKED_KEPT: usize = 1024;

/// Why the callback listener cannot start or take a wait.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CallbackError {
    /// The configured port is in use by another program.
    #[error(
        "callback port {port} on 127.0.0.1 is in use by another program; stop it, or set \
         `callback.port` in .discobot/hookvisor.yml (or the hook's `callback_port`) to a free \
         port, or to 0 for an ephemeral one"
    )]
    PortTaken {
        /// The port asked for.
        port: u16,
    },
    /// This process's listener already runs on another port than the one now asked for.
    #[error(
        "the callback listener of this process already listens on port {running}, so callback \
         port {wanted} cannot be served too; give every hook the same `callback_port` (or none)"
    )]
    OtherPort {
        /// The port the listener has.
        running: u16,
        /// The port asked for.
        wanted: u16,
    },
    /// Binding failed for another reason than a taken port.
    #[error("cannot listen for callbacks on 127.0.0.1:{port}: {source}")]
    Bind {
        /// The port asked for, 0 for an ephemeral one.
        port: u16,
        /// What the system said.
        source: std::io::Error,
    },
    /// The OS randomness a token is made from failed.
    #[error("cannot make a callback token: the system's random source failed: {0}")]
    Random(getrandom::Error),
    /// A thread or descriptor could not be made (the process is out of them).
    #[error("cannot {what} for the callback listener: {source}")]
    Resource {
        /// What was being made.
        what: &'static str,
        /// What the system said.
        source: std::io::Error,
    },
}

/// The longest any wait of this process lasts, in seconds; 0 for no cap.
static WAIT_CAP_SECS: AtomicU64 = AtomicU64::new(0);

/// Caps every later wait of this process at `cap`, for a host that is itself killed at a
/// deadline: an agent kills its hook at its own timeout and treats that as no decision, so the
/// wait must end first and be judged by `on_timeout`. Default: no cap.
pub fn cap_waits(cap: Duration) {
    // At least a second: 0 would mean no cap.
    WAIT_CAP_SECS.store(cap.as_secs().max(1), Ordering::Relaxed);
}

/// The cap [`cap_waits`] set, if any.
pub(crate) fn wait_cap() -> Option<Duration> {
    match WAIT_CAP_SECS.load(Ordering::Relaxed) {
        0 => None,
        secs => Some(Duration::from_secs(secs)),
    }
}

/// The process's one callback listener, started on first use (rule 1); later calls return the
/// same one.
///
/// A later call may change the `public_url` base of the `${callback_url}`s registered after it
/// (the configuration was edited); a port other than the running one is
/// [`CallbackError::OtherPort`], since one process serves one port.
pub fn listener(config: &Callback) -> Result<&'static Listener, CallbackError> {
    static PROCESS: Mutex<Option<&'static Listener>> = Mutex::new(None);
    let mut process = PROCESS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(running) = *process {
        match config.port {
            Some(wanted) if wanted != 0 && wanted != running.addr.port() => {
                return Err(CallbackError::OtherPort {
                    running: running.addr.port(),
                    wanted,
                });
            }
            _ => {}
        }
        running.set_public_url(config.public_url.as_deref());
        return Ok(running);
    }
    // Leaked on purpose: it lives as long as the process (rule 1), and waits borrow it.
    let started: &'static Listener = Box::leak(Box::new(Listener::bind(config)?));
    *process = Some(started);
    Ok(started)
}

/// A callback listener: the bound socket, the thread accepting on it, and its open waits.
///
/// [`listener`] gives the process's one; [`Listener::bind`] makes an own one (tests, or a
/// host that wants it stopped when dropped).
pub struct Listener {
    addr: SocketAddr,
    /// The base of `${callback_url}`, without a trailing `/`.
    base: RwLock<String>,
    waits: Arc<Waits>,
    /// Dropped to stop the accepting thread.
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    accepting: Option<JoinHandle<()>>,
}

impl std::fmt::Debug for Listener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Listener")
            .field("addr", &self.addr)
            .field(
                "base",
                &*self.base.read().unwrap_or_else(PoisonError::into_inner),
            )
            .finish_non_exhaustive()
    }
}

impl Listener {
    /// Binds 127.0.0.1 on `config.port` (ephemeral when unset or 0) and starts accepting.
    /// Dropping it stops accepting, and ends the connections being served.
    pub fn bind(config: &Callback) -> Result<Listener, CallbackError> {
        let port = config.port.unwrap_or(0);
        let socket = TcpListener::bind((Ipv4Addr::LOCALHOST, port)).map_err(|source| {
            if source.kind() == std::io::ErrorKind::AddrInUse && port != 0 {
                CallbackError::PortTaken { port }
            } else {
                CallbackError::Bind { port, source }
            }
        })?;
        let resource = |what| move |source| CallbackError::Resource { what, source };
        let addr = socket
            .local_addr()
            .map_err(resource("read the bound address"))?;
        socket
            .set_nonblocking(true)
            .map_err(resource("make the socket non-blocking"))?;
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .enable_time()
            .build()
            .map_err(resource("start a runtime"))?;
        let (stop, stopped) = tokio::sync::oneshot::channel();
        let waits = Arc::new(Waits::default());
        // The listener's thread (it serves every connection) starts with every signal blocked,
        // so a SIGINT or SIGTERM meant for the command's `CancelToken::on_signals` is never
        // taken by it with its default action when the listener starts before that token.
        // Blocked here and restored, rather than in the new thread, so no signal falls between
        // its start and its mask.
        let mask = SigSet::all().thread_swap_mask(SigmaskHow::SIG_SETMASK);
        let accepting = std::thread::Builder::new()
            .name("hookvisor-callback".into())
            .spawn({
                let waits = Arc::clone(&waits);
                move || runtime.block_on(server::accept(socket, waits, stopped))
            });
        if let Ok(old) = mask {
            let _ = old.thread_set_mask();
        }
        let accepting = accepting.map_err(resource("start a thread"))?;
        tracing::debug!("callback listener on {addr}");
        let listener = Listener {
            addr,
            base: RwLock::new(String::new()),
            waits,
            stop: Some(stop),
            accepting: Some(accepting),
        };
        listener.set_public_url(config.public_url.as_deref());
        Ok(listener)
    }

    /// The address it listens on, 127.0.0.1 and its port.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// A new wait with a fresh token; its [`Pending::url`] is the `${callback_url}` to send.
    ///
    /// First it makes the process non-dumpable (`prctl(PR_SET_DUMPABLE, 0)`), before the token
    /// exists: the agent runs as the same uid, and without that (on a host without Yama's
    /// ptrace scope) it could read the token from `/proc/PID/mem` and approve itself.
    /// The binaries do so as the first thing of `main` (a descriptor opened earlier would stay
    /// valid); this call is for other users of the library, and repeats harmlessly.
    pub fn register(&self) -> Result<Pending, CallbackError> {
        nix::sys::prctl::set_dumpable(false).map_err(|e| CallbackError::Resource {
            what: "make the process non-dumpable",
            source: e.into(),
        })?;
        let token = Token::new().map_err(CallbackError::Random)?;
        let (wake_read, wake) =
            nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).map_err(|e| {
                CallbackError::Resource {
                    what: "make a pipe",
                    source: e.into(),
                }
            })?;
        let hash = token.hash();
        self.waits.open(hash, wake);
        let base = self.base.read().unwrap_or_else(PoisonError::into_inner);
        let url = format!("{base}/cb/{}", token.text());
        Ok(Pending {
            token_at: url.len() - token.text().len(),
            url,
            hash,
            waits: Arc::clone(&self.waits),
            wake: wake_read,
        })
    }

    fn set_public_url(&self, public_url: Option<&str>) {
        let base = match public_url {
            Some(url) => url.trim_end_matches('/').to_owned(),
            None => format!("http://{}", self.addr),
        };
        *self.base.write().unwrap_or_else(PoisonError::into_inner) = base;
    }
}

impl Drop for Listener {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(accepting) = self.accepting.take() {
            let _ = accepting.join();
        }
    }
}

/// One open wait: a token the listener takes requests for until [`Pending::wait`] ends or the
/// value is dropped (either revokes the token: later requests get 410).
pub struct Pending {
    url: String,
    /// Where the token starts in `url`.
    token_at: usize,
    hash: TokenHash,
    waits: Arc<Waits>,
    /// Readable once a request took the wait.
    wake: OwnedFd,
}

impl std::fmt::Debug for Pending {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL carries the token, which no log may show (rule 3).
        f.debug_struct("Pending").field("wait", &self.hash).finish()
    }
}

impl Pending {
    /// `${callback_url}`: `<base>/cb/<token>`, the base being `callback.public_url` or
    /// `http://127.0.0.1:PORT`. It carries the token: send it, never log it.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The token alone, the secret part of [`Pending::url`]: for masking it wherever a
    /// receiver may echo it back (a chat API returning the message it posted).
    pub fn token(&self) -> &str {
        &self.url[self.token_at..]
    }

    /// Waits until a request takes the wait, `timeout` passes or `cancel` is cancelled, then
    /// revokes the token (rule 6). Wakes at once on each, without polling.
    pub fn wait(self, timeout: Duration, cancel: &CancelToken) -> Answer {
        // A timeout past the clock's range is no deadline (the hook parser bounds it).
        let deadline = Instant::now().checked_add(timeout);
        loop {
            if let Some(response) = self.waits.taken(self.hash) {
                return Answer::Taken(response);
            }
            if cancel.is_cancelled() {
                return self.end(Answer::Cancelled);
            }
            let left = deadline.map_or(Duration::MAX, |deadline| {
                deadline.saturating_duration_since(Instant::now())
            });
            if left.is_zero() {
                return self.end(Answer::TimedOut);
            }
            let mut fds = vec![PollFd::new(self.wake.as_fd(), PollFlags::POLLIN)];
            let cancel_wake = cancel.wake_fd();
            if let Some(fd) = cancel_wake {
                fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
            }
            if let Some(signals) = cancel.signal_fd() {
                fds.push(PollFd::new(signals.as_fd(), PollFlags::POLLIN));
            }
            // Without the cancel pipe (no descriptor was left) a cancel is seen every 50 ms.
            let most = if cancel_wake.is_some() {
                Duration::from_millis(u64::from(u16::MAX))
            } else {
                Duration::from_millis(50)
            };
            // Round up, so the loop never spins through the last partial millisecond.
            let ms = left.min(most).as_micros().div_ceil(1000) as u16;
            let _ = poll(&mut fds, PollTimeout::from(ms));
        }
    }

    /// Ends the wait as `otherwise` unless a request took it meanwhile: its sender was told 200.
    fn end(&self, otherwise: Answer) -> Answer {
        match self.waits.close(self.hash) {
            Some(response) => Answer::Taken(response),
            None => otherwise,
        }
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        // A no-op after `wait`, which already closed the wait.
        self.waits.close(self.hash);
    }
}

/// How a wait ended (rule 6).
#[derive(Debug, Clone, PartialEq)]
pub enum Answer {
    /// A request took the wait.
    Taken(Response),
    /// The timeout passed first.
    TimedOut,
    /// The cancel token was cancelled first.
    Cancelled,
}

/// What the request that took a wait said (rule 5).
#[derive(Debug, Clone, PartialEq)]
pub struct Response {
    /// Its `action`.
    pub verdict: Verdict,
    /// Its `message`, if any.
    pub message: Option<String>,
    /// `${hook_response}`: `{"query":{…},"body":…}`.
    pub json: serde_json::Value,
}

/// The `action` of a callback (rule 5).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// `approve`, `continue` or `none`: the hook succeeded.
    Success,
    /// `reject`, `abort` or `deny`: the event is aborted, whatever `on_failure` says.
    Abort,
    /// `block`: the event is blocked, the `message` its reason.
    Block,
}

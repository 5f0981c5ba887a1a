//! Rule 6 of the module: sending one request, with retries under one delivery id.

use std::io::Read as _;
use std::sync::{Arc, mpsc};
use std::time::Duration;

use ureq::http;
use ureq::tls::{RootCerts, TlsConfig};

use super::expand::Request;
use hookvisor_core::exec::CancelToken;

/// The waits before the second, third and fourth attempts (docs/EVENTS.md §5 rule 22).
const BACKOFF: [Duration; 3] = [
    Duration::from_secs(1),
    Duration::from_secs(2),
    Duration::from_secs(4),
];

/// Bytes of a response body kept (as `${hook_response}` will be); the rest is not read.
pub(super) const MAX_RESPONSE: usize = 64 * 1024;

/// How often a wait for an attempt looks at the cancel token: the client blocks, so the
/// attempt runs on a thread of its own and the wait polls.
const CANCEL_CHECK: Duration = Duration::from_millis(50);

/// The header every attempt of one delivery carries, with the same id.
pub(super) const DELIVERY_HEADER: &str = "X-Hookvisor-Delivery";

/// How a delivery ended.
#[derive(Debug)]
pub(super) enum Delivery {
    /// A 2xx answered, with this status and body.
    Delivered(Answer),
    /// The last attempt failed: with this message, and the answer when there was one.
    Failed(String, Option<Answer>),
    /// The cancel token stopped it.
    Cancelled,
}

/// What the receiver answered.
#[derive(Debug)]
pub(super) struct Answer {
    /// The status code.
    pub(super) status: u16,
    /// The first [`MAX_RESPONSE`] bytes of the body.
    pub(super) body: Vec<u8>,
    /// The body was longer, or broke off before its end.
    pub(super) truncated: bool,
}

/// What one attempt came to.
enum Attempt {
    /// Done, for good or ill: no retry.
    Final(Delivery),
    /// Worth another try: a connect error, a timeout or a 5xx.
    Retry(String, Option<Answer>),
}

/// A fresh delivery id: 128 random bits written as a version-4 UUID.
pub(super) fn delivery_id() -> Result<String, String> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|err| format!("no random bytes for a delivery id: {err}"))?;
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    Ok(format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    ))
}

/// Sends `request` under `id` until an attempt is final or the retries are spent; `timeout`
/// bounds each attempt, `log` hears one line per attempt and wait.
pub(super) fn deliver(
    request: Arc<Request>,
    id: &str,
    timeout: Duration,
    cancel: &CancelToken,
    log: &mut dyn FnMut(String),
) -> Delivery {
    let agent = agent(timeout);
    let mut number = 1;
    loop {
        if cancel.is_cancelled() {
            return Delivery::Cancelled;
        }
        let Some(attempt) = cancellable(&agent, &request, id, cancel) else {
            log(format!(
                "attempt {number}: cancelled while sending; the receiver may have the request"
            ));
            return Delivery::Cancelled;
        };
        let (message, answer) = match attempt {
            Attempt::Final(delivery) => {
                match &delivery {
                    Delivery::Delivered(answer) => {
                        log(format!("attempt {number}: {}", status_line(answer.status)));
                    }
                    Delivery::Failed(message, _) => log(format!("attempt {number}: {message}")),
                    Delivery::Cancelled => {}
                }
                return delivery;
            }
            Attempt::Retry(message, answer) => (message, answer),
        };
        log(format!("attempt {number}: {message}"));
        let Some(wait) = BACKOFF.get(number - 1) else {
            return Delivery::Failed(format!("{message}, after {number} attempts"), answer);
        };
        log(format!("retrying in {} s", wait.as_secs()));
        if cancel.wait_for(*wait) {
            return Delivery::Cancelled;
        }
        number += 1;
    }
}

/// One attempt on a thread of its own, waited for until it ends or `cancel` fires (`None`):
/// the client cannot be interrupted, so a cancelled attempt is left to end alone, within its
/// timeout.
fn cancellable(
    agent: &ureq::Agent,
    request: &Arc<Request>,
    id: &str,
    cancel: &CancelToken,
) -> Option<Attempt> {
    let (tx, rx) = mpsc::channel();
    let (agent, request, id) = (agent.clone(), Arc::clone(request), id.to_owned());
    let spawned = std::thread::Builder::new()
        .name("webhook".to_owned())
        .spawn(move || {
            // The receiver is gone only after a cancel, when the result is not wanted.
            let _ = tx.send(attempt(&agent, &request, &id));
        });
    if let Err(err) = spawned {
        return Some(Attempt::Final(Delivery::Failed(
            format!("cannot start a thread to send: {err}"),
            None,
        )));
    }
    loop {
        match rx.recv_timeout(CANCEL_CHECK) {
            Ok(attempt) => return Some(attempt),
            Err(mpsc::RecvTimeoutError::Timeout) if cancel.is_cancelled() => return None,
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => {
                return Some(Attempt::Final(Delivery::Failed(
                    "the sending thread ended without an answer".to_owned(),
                    None,
                )));
            }
        }
    }
}

/// The client: no proxy (a proxy from the environment would see loopback traffic and could
/// be the agent's), no redirect, statuses as answers, the platform's roots.
fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .proxy(None)
        .max_redirects(0)
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .user_agent(format!("hookvisor/{}", env!("CARGO_PKG_VERSION")))
        .tls_config(
            TlsConfig::builder()
                .root_certs(RootCerts::PlatformVerifier)
                .build(),
        )
        .build()
        .into()
}

/// One attempt, judged.
fn attempt(agent: &ureq::Agent, request: &Request, id: &str) -> Attempt {
    let mut builder = http::Request::builder()
        .method(request.method.as_str())
        .uri(request.url.as_str())
        .header(DELIVERY_HEADER, id);
    let has_type = request
        .headers
        .iter()
        .any(|(n, _)| n.eq_ignore_ascii_case("content-type"));
    if request.body.is_some() && !has_type {
        builder = builder.header("Content-Type", "application/json");
    }
    for (name, value) in &request.headers {
        builder = builder.header(name.as_str(), value.as_str());
    }
    let sent = match &request.body {
        Some(body) => builder.body(body.clone()).map(|r| agent.run(r)),
        None => builder.body(()).map(|r| agent.run(r)),
    };
    let result = match sent {
        Ok(result) => result,
        // Names and values were checked when expanded; what is left is final.
        Err(err) => return Attempt::Final(Delivery::Failed(format!("bad request: {err}"), None)),
    };
    let mut response = match result {
        Ok(response) => response,
        Err(err) => {
            let message = describe(&err);
            return match err {
                // rustls reports a refused certificate or a broken handshake as invalid data:
                // the next attempt meets the same certificate.
                ureq::Error::Io(io) if io.kind() == std::io::ErrorKind::InvalidData => {
                    Attempt::Final(Delivery::Failed(message, None))
                }
                ureq::Error::Timeout(_)
                | ureq::Error::Io(_)
                | ureq::Error::ConnectionFailed
                | ureq::Error::HostNotFound => Attempt::Retry(message, None),
                _ => Attempt::Final(Delivery::Failed(message, None)),
            };
        }
    };
    let status = response.status().as_u16();
    let location = response
        .headers()
        .get("location")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let mut body = Vec::new();
    // A body that breaks off leaves what came, marked as cut: the status is the answer.
    let broke_off = response
        .body_mut()
        .as_reader()
        .take(MAX_RESPONSE as u64 + 1)
        .read_to_end(&mut body)
        .is_err();
    let truncated = broke_off || body.len() > MAX_RESPONSE;
    body.truncate(MAX_RESPONSE);
    let answer = Answer {
        status,
        body,
        truncated,
    };
    match status {
        // Delivered, even when the body broke off: the receiver has the request.
        200..=299 => Attempt::Final(Delivery::Delivered(answer)),
        300..=399 => Attempt::Final(Delivery::Failed(
            format!(
                "{}: a redirect{}, not followed; point the url at the final address",
                status_line(status),
                location.map_or_else(String::new, |l| format!(" to {l}"))
            ),
            Some(answer),
        )),
        500..=599 => Attempt::Retry(status_line(status), Some(answer)),
        _ => Attempt::Final(Delivery::Failed(
            format!("{}, not retried", status_line(status)),
            Some(answer),
        )),
    }
}

/// `503 Service Unavailable`.
pub(super) fn status_line(status: u16) -> String {
    let reason = http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason());
    match reason {
        Some(reason) => format!("{status} {reason}"),
        None => status.to_string(),
    }
}

/// A client error in words, on one line.
fn describe(err: &ureq::Error) -> String {
    let text = match err {
        ureq::Error::Timeout(_) => "no answer within the attempt's time".to_owned(),
        ureq::Error::ConnectionFailed => "connection failed".to_owned(),
        ureq::Error::HostNotFound => "host not found".to_owned(),
        ureq::Error::Io(io) if io.to_string().contains("certificate") => format!(
            "TLS: {io}; if the server's CA is a private one, name its PEM file in SSL_CERT_FILE"
        ),
        other => other.to_string(),
    };
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delivery_ids_are_fresh_uuids() {
        let a = delivery_id().unwrap();
        let b = delivery_id().unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        assert_eq!(&a[14..15], "4", "{a}");
        assert!(a.chars().all(|c| c.is_ascii_hexdigit() || c == '-'), "{a}");
    }

    #[test]
    fn status_lines() {
        assert_eq!(status_line(503), "503 Service Unavailable");
        assert_eq!(status_line(299), "299");
    }
}

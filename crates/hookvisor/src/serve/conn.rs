//! Serving connections: HTTP/1 on the TCP or Unix listener, with two limits so that clients
//! that never finish a request cannot take the server:
//!
//! - A request must arrive within [`READ_TIMEOUT`]: its head (hyper's header-read timeout, which
//!   also closes a connection left idle between requests) and its body
//!   ([`read_body_in_time`], which answers 408). A client sends its few bytes of JSON at once.
//! - At most [`max_connections`] are open at once. At the limit the server stops accepting: new
//!   connections wait in the kernel's listen queue until one closes, which the timeout ensures
//!   for stuck ones. Without the limit, enough idle connections used every file descriptor, and
//!   then nothing was accepted any more. An event stream counts while its client listens.

use std::pin::pin;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::serve::Listener;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use nix::sys::resource::{Resource, getrlimit};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};

use super::routes::ServerError;

/// How long a request may take to arrive, head and body each.
pub const READ_TIMEOUT: Duration = Duration::from_secs(5);

/// The most connections open at once, when file descriptors allow.
const MAX_CONNECTIONS: u64 = 256;

/// File descriptors kept for everything but connections: hook pipes and logs, status.json and
/// its lock, the watchers, git.
const RESERVED_FDS: u64 = 64;

/// The largest request body read; the routes take a few bytes of JSON.
const MAX_BODY: usize = 64 * 1024;

/// [`MAX_CONNECTIONS`], or fewer when the file descriptor limit leaves less than that beside
/// [`RESERVED_FDS`] (a small container); never fewer than 8.
pub fn max_connections() -> usize {
    let soft = getrlimit(Resource::RLIMIT_NOFILE).map_or(u64::MAX, |(soft, _)| soft);
    limit_for(soft)
}

fn limit_for(descriptors: u64) -> usize {
    descriptors
        .saturating_sub(RESERVED_FDS)
        .clamp(8, MAX_CONNECTIONS) as usize
}

/// Serves `router` on `listener` until `stop` turns true; then stops accepting, asks the open
/// connections to close once their request is answered, and returns when all have closed.
pub async fn serve<L: Listener>(mut listener: L, router: Router, mut stop: watch::Receiver<bool>) {
    let limit = max_connections();
    tracing::debug!("at most {limit} connections");
    let slots = Arc::new(Semaphore::new(limit));
    loop {
        // A slot before an accept: at the limit, connections wait in the kernel's queue.
        let slot = tokio::select! {
            slot = slots.clone().acquire_owned() => slot.expect("the semaphore is never closed"),
            () = stopped(&mut stop) => break,
        };
        let io = tokio::select! {
            (io, _) = listener.accept() => io,
            () = stopped(&mut stop) => break,
        };
        tokio::spawn(connection(io, router.clone(), stop.clone(), slot));
    }
    drop(listener);
    // Each connection holds its slot until it closes.
    let _ = slots.acquire_many(limit as u32).await;
}

/// Returns once `stop` turns true (or its sender is gone).
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|stop| *stop).await;
}

/// One connection, until the client or a timeout closes it, or the server stops.
async fn connection<I>(
    io: I,
    router: Router,
    mut stop: watch::Receiver<bool>,
    slot: OwnedSemaphorePermit,
) where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(READ_TIMEOUT);
    let service = TowerToHyperService::new(router);
    let mut conn = pin!(builder.serve_connection(TokioIo::new(io), service));
    let result = tokio::select! {
        result = conn.as_mut() => result,
        () = stopped(&mut stop) => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    if let Err(e) = result {
        // A timeout or a client that went away: nothing anyone needs to act on.
        tracing::debug!("connection closed: {e}");
    }
    drop(slot);
}

/// Middleware: reads the request body within [`READ_TIMEOUT`] (408 after it) and up to
/// [`MAX_BODY`], before the route sees it, so that a body that stops half-way holds its
/// connection for the timeout only.
pub async fn read_body_in_time(request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let read = axum::body::to_bytes(body, MAX_BODY);
    let bytes = match tokio::time::timeout(READ_TIMEOUT, read).await {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => {
            return ServerError::BadRequest(format!(
                "cannot read the request body ({e}); send at most {MAX_BODY} bytes of JSON"
            ))
            .into_response();
        }
        Err(_) => return ServerError::SlowRequest.into_response(),
    };
    next.run(Request::from_parts(parts, Body::from(bytes)))
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_limit_leaves_descriptors_for_the_rest() {
        let cases = [
            (u64::MAX, 256),
            (1_048_576, 256),
            (1024, 256),
            (320, 256),
            (300, 236),
            (256, 192),
            (64, 8),
            (0, 8),
        ];
        for (descriptors, want) in cases {
            assert_eq!(limit_for(descriptors), want, "{descriptors}");
        }
    }
}

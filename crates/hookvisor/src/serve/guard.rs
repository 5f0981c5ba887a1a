//! The browser guard: what keeps a web page from driving the server.
//!
//! An agent has a browser, and any page it opens can send requests to loopback. Three checks,
//! in this order, on every request to every route:
//!
//! 1. **Host** (TCP only). The `Host` header must name this server: `localhost`, an address of
//!    `127.0.0.0/8`, `[::1]` or the address it listens on, with any port or none. A page that
//!    reached the server through DNS rebinding names its own domain and is refused with 403.
//!    A server listening on all interfaces (`--allow-remote`, which needs `HOOKVISOR_TOKEN`)
//!    answers to any name: the token, which no page can attach, is what protects it.
//! 2. **Origin**. A browser says which page sent a request; the page must be served by this
//!    server: an origin whose host passes rule 1 and whose port is the server's. No `Origin`
//!    (curl, the adapters) is fine; `null` (a sandboxed frame, a file) is foreign: 403.
//! 3. **Content type**. A POST must say `Content-Type: application/json`, which no page can
//!    send to another origin without the CORS preflight this server never grants: a form or a
//!    no-cors `fetch` gets 415. Other methods need that preflight whatever their content type.
//!
//! Over a Unix socket, which no browser can reach, `Host` may be anything; an `Origin`, if one
//! comes, must still be a loopback name.

use std::net::{IpAddr, SocketAddr};

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::routes::ServerError;

/// Which requests count as the server's own; see the module documentation for the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guard {
    /// Listening on this TCP address (after binding, so port 0 is resolved).
    Tcp(SocketAddr),
    /// Listening on a Unix socket.
    Unix,
}

impl Guard {
    /// Whether `host` (no port, brackets removed) names this server.
    fn own_host(&self, host: &str) -> bool {
        if host.eq_ignore_ascii_case("localhost") {
            return true;
        }
        let Ok(ip) = host.parse::<IpAddr>() else {
            // Any name but localhost could be rebound to us.
            return matches!(self, Guard::Tcp(addr) if addr.ip().is_unspecified());
        };
        let ip = ip.to_canonical();
        match self {
            Guard::Tcp(addr) => ip.is_loopback() || ip == addr.ip() || addr.ip().is_unspecified(),
            Guard::Unix => ip.is_loopback(),
        }
    }

    /// Rule 1: the `Host` header, when there is one (HTTP/1.0 clients may omit it).
    fn check_host(&self, headers: &HeaderMap) -> Result<(), ServerError> {
        let Guard::Tcp(addr) = self else {
            return Ok(());
        };
        let Some(value) = headers.get(header::HOST) else {
            return Ok(());
        };
        let value = value.to_str().unwrap_or("?");
        match split_authority(value) {
            Some((host, _)) if self.own_host(host) => Ok(()),
            _ => Err(ServerError::ForeignHost {
                host: value.to_owned(),
                port: addr.port(),
            }),
        }
    }

    /// Rule 2: the `Origin` header, when there is one.
    fn check_origin(&self, headers: &HeaderMap) -> Result<(), ServerError> {
        let Some(value) = headers.get(header::ORIGIN) else {
            return Ok(());
        };
        let value = value.to_str().unwrap_or("?");
        let own = parse_origin(value).is_some_and(|(host, port)| {
            self.own_host(host)
                && match self {
                    Guard::Tcp(addr) => port == addr.port(),
                    Guard::Unix => true,
                }
        });
        if own {
            return Ok(());
        }
        Err(ServerError::ForeignOrigin {
            origin: value.to_owned(),
            own: match self {
                Guard::Tcp(addr) => format!("http://localhost:{}", addr.port()),
                Guard::Unix => "http://localhost".to_owned(),
            },
        })
    }
}

/// Rule 3: a POST must be JSON.
fn check_content_type(method: &Method, headers: &HeaderMap) -> Result<(), ServerError> {
    if method != Method::POST {
        return Ok(());
    }
    let given = headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("?"));
    let media_type = given.map(|v| v.split(';').next().unwrap_or("").trim());
    match media_type {
        Some(t) if t.eq_ignore_ascii_case("application/json") => Ok(()),
        _ => Err(ServerError::NotJson(given.unwrap_or("none").to_owned())),
    }
}

/// The middleware: the three rules, then the route.
pub async fn guard(State(guard): State<Guard>, request: Request, next: Next) -> Response {
    let headers = request.headers();
    let checked = guard
        .check_host(headers)
        .and_then(|()| guard.check_origin(headers))
        .and_then(|()| check_content_type(request.method(), headers));
    match checked {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            tracing::info!(
                "refused {} {}: {refusal:?}",
                request.method(),
                request.uri()
            );
            refusal.into_response()
        }
    }
}

/// `host[:port]` or `[v6][:port]` into the host (without brackets) and the port, if any;
/// `None` when it is neither.
fn split_authority(authority: &str) -> Option<(&str, Option<u16>)> {
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest.split_once(']')?;
        match after {
            "" => (host, None),
            _ => (host, Some(after.strip_prefix(':')?)),
        }
    } else {
        match authority.split_once(':') {
            // Two colons without brackets: an IPv6 address no browser sends this way.
            Some((_, port)) if port.contains(':') => return None,
            Some((host, port)) => (host, Some(port)),
            None => (authority, None),
        }
    };
    if host.is_empty() {
        return None;
    }
    let port = match port {
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => Some(p.parse().ok()?),
        Some(_) => return None,
        None => None,
    };
    Some((host, port))
}

/// `http://host[:port]` or `https://...` into the host and the port (the scheme's when none);
/// `None` for `null` and anything else.
fn parse_origin(origin: &str) -> Option<(&str, u16)> {
    let (rest, default) = if let Some(rest) = origin.strip_prefix("http://") {
        (rest, 80)
    } else if let Some(rest) = origin.strip_prefix("https://") {
        (rest, 443)
    } else {
        return None;
    };
    let (host, port) = split_authority(rest)?;
    Some((host, port.unwrap_or(default)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(header::HeaderName, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(name.clone(), value.parse().unwrap());
        }
        map
    }

    #[test]
    fn authorities_split() {
        type Split<'a> = Option<(&'a str, Option<u16>)>;
        let cases: [(&str, Split); 11] = [
            ("localhost", Some(("localhost", None))),
            ("localhost:7433", Some(("localhost", Some(7433)))),
            ("127.0.0.1:80", Some(("127.0.0.1", Some(80)))),
            ("[::1]", Some(("::1", None))),
            ("[::1]:7433", Some(("::1", Some(7433)))),
            ("::1", None),
            ("[::1]x", None),
            ("localhost:", None),
            ("localhost:99999", None),
            (":80", None),
            ("localhost:+1", None),
        ];
        for (text, want) in cases {
            assert_eq!(split_authority(text), want, "{text:?}");
        }
    }

    #[test]
    fn hosts_on_loopback() {
        let guard = Guard::Tcp("127.0.0.1:7433".parse().unwrap());
        let cases = [
            ("localhost", true),
            ("LOCALHOST:7433", true),
            ("127.0.0.1:7433", true),
            ("127.9.8.7", true),
            ("[::1]:7433", true),
            ("[::ffff:127.0.0.1]:7433", true),
            ("evil.example", false),
            ("evil.example:7433", false),
            ("localhost.evil.example", false),
            ("127.0.0.1.evil.example", false),
            ("10.0.0.1:7433", false),
            ("[::2]:7433", false),
            ("0x7f.0.0.1", false),
            ("", false),
        ];
        for (host, ok) in cases {
            let got = guard.check_host(&headers(&[(header::HOST, host)]));
            assert_eq!(got.is_ok(), ok, "{host:?}: {got:?}");
        }
        assert!(guard.check_host(&HeaderMap::new()).is_ok(), "no Host");
    }

    #[test]
    fn hosts_elsewhere() {
        let remote = Guard::Tcp("10.1.2.3:7433".parse().unwrap());
        assert!(
            remote
                .check_host(&headers(&[(header::HOST, "10.1.2.3:7433")]))
                .is_ok()
        );
        assert!(
            remote
                .check_host(&headers(&[(header::HOST, "localhost")]))
                .is_ok()
        );
        assert!(
            remote
                .check_host(&headers(&[(header::HOST, "devbox")]))
                .is_err()
        );
        let everywhere = Guard::Tcp("0.0.0.0:7433".parse().unwrap());
        assert!(
            everywhere
                .check_host(&headers(&[(header::HOST, "devbox")]))
                .is_ok()
        );
        let unix = Guard::Unix;
        assert!(
            unix.check_host(&headers(&[(header::HOST, "evil.example")]))
                .is_ok()
        );
    }

    #[test]
    fn origins() {
        let guard = Guard::Tcp("127.0.0.1:7433".parse().unwrap());
        let cases = [
            ("http://127.0.0.1:7433", true),
            ("http://localhost:7433", true),
            ("http://[::1]:7433", true),
            ("https://localhost:7433", true),
            ("http://127.0.0.1", false),
            ("http://127.0.0.1:8000", false),
            ("http://evil.example:7433", false),
            ("http://localhost.evil.example:7433", false),
            ("null", false),
            ("file://", false),
            ("chrome-extension://abc", false),
            ("http://localhost:7433/path", false),
        ];
        for (origin, ok) in cases {
            let got = guard.check_origin(&headers(&[(header::ORIGIN, origin)]));
            assert_eq!(got.is_ok(), ok, "{origin:?}: {got:?}");
        }
        assert!(guard.check_origin(&HeaderMap::new()).is_ok(), "no Origin");
        let unix = Guard::Unix;
        assert!(
            unix.check_origin(&headers(&[(header::ORIGIN, "http://localhost")]))
                .is_ok()
        );
        assert!(
            unix.check_origin(&headers(&[(header::ORIGIN, "http://evil.example")]))
                .is_err()
        );
    }

    #[test]
    fn content_types() {
        let json = |v: &str| headers(&[(header::CONTENT_TYPE, v)]);
        assert!(check_content_type(&Method::GET, &HeaderMap::new()).is_ok());
        assert!(check_content_type(&Method::HEAD, &json("text/plain")).is_ok());
        assert!(check_content_type(&Method::POST, &json("application/json")).is_ok());
        assert!(
            check_content_type(&Method::POST, &json("Application/JSON ; charset=utf-8")).is_ok()
        );
        for bad in [
            "text/plain;charset=UTF-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
            "",
        ] {
            assert!(
                check_content_type(&Method::POST, &json(bad)).is_err(),
                "{bad:?}"
            );
        }
        assert!(check_content_type(&Method::POST, &HeaderMap::new()).is_err());
        assert!(check_content_type(&Method::DELETE, &HeaderMap::new()).is_ok());
    }
}

//! Rule 3 of the module: where a webhook may go. `https` anywhere; `http` only to a host that
//! is loopback as written, since plain text to any other host can be read on the way.

use std::net::{IpAddr, ToSocketAddrs as _};

use url::{Host, Url};

/// Why a URL may not be sent to; each says the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UrlPolicyError {
    /// Neither `https` nor `http`.
    #[error("scheme '{scheme}' is not https; write https://…")]
    Scheme {
        /// The scheme.
        scheme: String,
    },
    /// `http` to a host that is not loopback as written.
    #[error(
        "http to {host} would send the request in clear text; use https://, or http only to \
         127.0.0.1, [::1] or localhost"
    )]
    Insecure {
        /// The host.
        host: String,
    },
    /// No host at all.
    #[error("no host; write https://host/…")]
    NoHost,
    /// `localhost` resolves to an address that is not loopback (a changed `/etc/hosts`).
    #[error(
        "localhost resolves to {address}, which is not loopback; fix /etc/hosts or write \
         http://127.0.0.1"
    )]
    LocalhostNotLoopback {
        /// The address.
        address: IpAddr,
    },
}

/// The byte offset where the authority of `text` ends (after `scheme://host:port`): the first
/// `/`, `?` or `#` after `://`, else the end; `None` without `://`.
pub fn authority_end(text: &str) -> Option<usize> {
    let start = text.find("://")? + 3;
    Some(
        text[start..]
            .find(['/', '?', '#'])
            .map_or(text.len(), |i| start + i),
    )
}

/// Checks the scheme and host as written, with no name resolved: at load and at send.
pub fn check_literal(url: &Url) -> Result<(), UrlPolicyError> {
    let host = url.host().ok_or(UrlPolicyError::NoHost)?;
    match url.scheme() {
        "https" => Ok(()),
        "http" if is_loopback(&host) => Ok(()),
        "http" => Err(UrlPolicyError::Insecure {
            host: host.to_string(),
        }),
        other => Err(UrlPolicyError::Scheme {
            scheme: other.to_owned(),
        }),
    }
}

/// [`check_literal`], and for `http://localhost` every address the name resolves to must be
/// loopback: the name is only loopback by convention. Just before sending.
pub fn check_at_send(url: &Url) -> Result<(), UrlPolicyError> {
    check_literal(url)?;
    if url.scheme() == "http"
        && let Some(Host::Domain(name)) = url.host()
    {
        let port = url.port_or_known_default().unwrap_or(80);
        // A name that does not resolve fails the send itself, with the client's words.
        if let Ok(addresses) = (name, port).to_socket_addrs() {
            for address in addresses {
                if !address.ip().is_loopback() {
                    return Err(UrlPolicyError::LocalhostNotLoopback {
                        address: address.ip(),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Whether a host is loopback as written: `127.0.0.0/8`, `::1` (also as `::ffff:127.x`), or
/// `localhost` (the URL parser lower-cases names).
pub fn is_loopback(host: &Host<&str>) -> bool {
    match host {
        Host::Ipv4(ip) => ip.is_loopback(),
        Host::Ipv6(ip) => {
            ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
        Host::Domain(name) => *name == "localhost",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn https_anywhere_http_only_to_loopback() {
        // (url, allowed)
        let table = [
            ("https://example.com/x", true),
            ("https://10.0.0.1/x", true),
            ("http://127.0.0.1:9/x", true),
            ("http://127.255.0.1/x", true),
            ("http://[::1]/x", true),
            ("http://[::ffff:127.0.0.1]/x", true),
            ("http://localhost:8/x", true),
            ("http://LocalHost/x", true),
            ("http://localhost.evil.com/x", false),
            ("http://127.0.0.1.nip.io/x", false),
            ("http://0.0.0.0/x", false),
            ("http://10.0.0.1/x", false),
            ("http://example.com/x", false),
            ("http://[::2]/x", false),
            ("ftp://localhost/x", false),
            ("file:///etc/passwd", false),
        ];
        for (url, allowed) in table {
            let parsed = Url::parse(url).unwrap();
            assert_eq!(check_literal(&parsed).is_ok(), allowed, "{url}");
        }
        // Numeric forms the URL parser normalizes are judged by the address they are.
        let decimal = Url::parse("http://2130706433/x").unwrap();
        assert!(check_literal(&decimal).is_ok(), "{decimal}");
        assert!(check_at_send(&Url::parse("http://localhost:1/").unwrap()).is_ok());
    }

    #[test]
    fn the_authority_ends_at_the_path() {
        assert_eq!(authority_end("https://h:1/p?q"), Some(11));
        assert_eq!(authority_end("https://h?q"), Some(9));
        assert_eq!(authority_end("https://h"), Some(9));
        assert_eq!(authority_end("h/x"), None);
    }
}

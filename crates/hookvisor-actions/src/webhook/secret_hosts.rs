//! Rule 8 of the module: the hosts a secret may go to, as the user lists them in `NAME_HOSTS`.
//!
//! A hook file says where its request goes, and the agent may write hook files; only the
//! user's own `NAME_HOSTS` line can say where the value of `NAME` is meant to go.

use url::{Host, Url};

use hookvisor_core::webhook::url_policy;

/// One entry of a `NAME_HOSTS` list.
#[derive(Debug, PartialEq, Eq)]
struct Allowed {
    /// The host, or for `*.` the domain whose subdomains are meant.
    host: Host<String>,
    /// `*.example.com`: any subdomain of `host`, not `host` itself.
    subdomains: bool,
    /// `host:port`: only this port.
    port: Option<u16>,
}

/// Why a secret may not go to a URL.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Refusal {
    /// No `NAME_HOSTS` at all.
    Unlisted,
    /// `NAME_HOSTS` does not list the URL's host (and, for loopback, port).
    NotListed,
    /// This entry of `NAME_HOSTS` is no host.
    BadEntry(String),
}

/// Whether a secret whose `NAME_HOSTS` value is `list` may go to `url` (rule 8). Loopback
/// hosts need an entry with the port: whoever binds a free loopback port first, the agent
/// included, receives what is sent there.
pub(super) fn check(list: Option<&str>, url: &Url) -> Result<(), Refusal> {
    let list = list.ok_or(Refusal::Unlisted)?;
    let Some(host) = url.host().map(|h| h.to_owned()) else {
        return Err(Refusal::NotListed);
    };
    let port = url.port_or_known_default();
    let loopback = url.host().is_some_and(|h| url_policy::is_loopback(&h));
    let mut allowed = false;
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        // Every entry is checked, so a typo is reported even after a match.
        allowed |= parse_entry(entry)?.allows(&host, port, loopback);
    }
    if allowed {
        Ok(())
    } else {
        Err(Refusal::NotListed)
    }
}

/// The entry to add to `NAME_HOSTS` for `url`: its host, with the port for loopback.
pub(super) fn entry_for(url: &Url) -> String {
    let host = url.host_str().unwrap_or_default();
    let loopback = url.host().is_some_and(|h| url_policy::is_loopback(&h));
    match url.port_or_known_default() {
        Some(port) if loopback => format!("{host}:{port}"),
        _ => host.to_owned(),
    }
}

/// One entry: `host`, `host:port`, `[v6]:port` or `*.domain`, the host normalised by the URL
/// parser as the request's host is.
fn parse_entry(entry: &str) -> Result<Allowed, Refusal> {
    let bad = || Refusal::BadEntry(entry.to_owned());
    let (subdomains, rest) = match entry.strip_prefix("*.") {
        Some(rest) => (true, rest),
        None => (false, entry),
    };
    let (host, port) = match rest.strip_prefix('[') {
        Some(_) => {
            let end = rest.find(']').ok_or_else(bad)? + 1;
            match &rest[end..] {
                "" => (&rest[..end], None),
                tail => (&rest[..end], Some(tail.strip_prefix(':').ok_or_else(bad)?)),
            }
        }
        None => match rest.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (rest, None),
        },
    };
    let port = match port {
        None => None,
        Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
            Some(p.parse::<u16>().map_err(|_| bad())?)
        }
        Some(_) => return Err(bad()),
    };
    let host = Host::parse(host).map_err(|_| bad())?;
    if subdomains && !matches!(host, Host::Domain(_)) {
        return Err(bad());
    }
    Ok(Allowed {
        host,
        subdomains,
        port,
    })
}

impl Allowed {
    /// Whether this entry admits `host` at `port`.
    fn allows(&self, host: &Host<String>, port: Option<u16>, loopback: bool) -> bool {
        if loopback && self.port.is_none() {
            return false;
        }
        if self.port.is_some_and(|p| Some(p) != port) {
            return false;
        }
        match (&self.host, host) {
            _ if !self.subdomains => self.host == *host,
            (Host::Domain(base), Host::Domain(name)) => name
                .strip_suffix(base.as_str())
                .is_some_and(|sub| sub.len() > 1 && sub.ends_with('.')),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(list: &str, url: &str) -> Result<(), Refusal> {
        check(Some(list), &Url::parse(url).unwrap())
    }

    #[test]
    fn hosts_ports_and_subdomains() {
        assert_eq!(to("api.github.com", "https://api.github.com/x"), Ok(()));
        assert_eq!(
            to("API.GitHub.com ", "https://api.github.com:8443/"),
            Ok(())
        );
        assert_eq!(to("api.github.com:443", "https://api.github.com/x"), Ok(()));
        assert_eq!(
            to("api.github.com:8443", "https://api.github.com/x"),
            Err(Refusal::NotListed)
        );
        assert_eq!(
            to("github.com", "https://api.github.com/x"),
            Err(Refusal::NotListed)
        );
        assert_eq!(
            to("a.io, *.example.com", "https://x.y.example.com/"),
            Ok(())
        );
        assert_eq!(
            to("*.example.com", "https://example.com/"),
            Err(Refusal::NotListed)
        );
        assert_eq!(
            to("*.example.com", "https://badexample.com/"),
            Err(Refusal::NotListed)
        );
        assert_eq!(
            to("example.com", "https://example.com.evil.io/"),
            Err(Refusal::NotListed)
        );
        assert_eq!(
            check(None, &Url::parse("https://h/").unwrap()),
            Err(Refusal::Unlisted)
        );
        assert_eq!(to("", "https://h/"), Err(Refusal::NotListed));
        for bad in ["a b", "h:x", "h:", "*.1.2.3.4", "[::1", "[::1]x", "h:70000"] {
            assert_eq!(
                to(&format!("h, {bad}"), "https://h/"),
                Err(Refusal::BadEntry(bad.to_owned())),
                "{bad}"
            );
        }
    }

    #[test]
    fn loopback_needs_its_port() {
        for (list, url) in [
            ("127.0.0.1", "http://127.0.0.1:9000/x"),
            ("localhost", "http://localhost/x"),
            ("127.0.0.1:9001", "http://127.0.0.1:9000/x"),
            ("*.localhost:80", "http://localhost/x"),
        ] {
            assert_eq!(to(list, url), Err(Refusal::NotListed), "{list} {url}");
        }
        assert_eq!(to("127.0.0.1:9000", "http://127.0.0.1:9000/x"), Ok(()));
        // Compared after the parser's normalisation, on both sides.
        assert_eq!(to("0x7f.0.0.1:9000", "http://127.0.0.1:9000/x"), Ok(()));
        assert_eq!(to("LOCALHOST:80", "http://localhost/x"), Ok(()));
        assert_eq!(to("[::1]:8080", "http://[0::1]:8080/x"), Ok(()));
        let url = Url::parse("http://127.0.0.1:9000/x").unwrap();
        assert_eq!(entry_for(&url), "127.0.0.1:9000");
        let url = Url::parse("https://API.example.com/x").unwrap();
        assert_eq!(entry_for(&url), "api.example.com");
    }
}

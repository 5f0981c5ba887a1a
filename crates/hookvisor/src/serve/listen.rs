//! Where the server listens, and the rule that keeps it off the network by default: a TCP address
//! must be loopback unless `--allow-remote` is given together with `HOOKVISOR_TOKEN`.

use std::fmt;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};

/// The default `--listen` address (docs/DESIGN.md).
pub const DEFAULT_ADDR: &str = "127.0.0.1:7433";

/// A resolved listening address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Listen {
    /// A TCP address; port 0 picks a free port.
    Tcp(SocketAddr),
    /// A Unix socket path, created mode 0600.
    Unix(PathBuf),
}

/// Why the server could not listen where it was asked to.
#[derive(Debug)]
pub enum ListenError {
    /// `--listen` is not an address.
    BadAddress(String),
    /// A non-loopback address without `--allow-remote`.
    Remote(String),
    /// `--allow-remote` without a token to protect the API.
    NoToken(String),
    /// The socket path is taken by a live server or by something that is not a socket.
    InUse(PathBuf),
    /// Binding failed.
    Bind {
        /// The address or path.
        what: String,
        /// What the system said.
        source: io::Error,
    },
}

impl fmt::Display for ListenError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenError::BadAddress(addr) => write!(
                f,
                "--listen {addr}: not an address; use HOST:PORT such as {DEFAULT_ADDR}"
            ),
            ListenError::Remote(addr) => write!(
                f,
                "--listen {addr} is not a loopback address; use 127.0.0.1 or --socket, or pass \
                 --allow-remote with HOOKVISOR_TOKEN set"
            ),
            ListenError::NoToken(addr) => write!(
                f,
                "--allow-remote for {addr} needs a bearer token; set HOOKVISOR_TOKEN"
            ),
            ListenError::InUse(path) => write!(
                f,
                "{}: in use by a running server or not a socket; stop it or choose another --socket",
                path.display()
            ),
            ListenError::Bind { what, source } => write!(
                f,
                "cannot listen on {what}: {source}; choose another --listen or --socket"
            ),
        }
    }
}

impl std::error::Error for ListenError {}

impl Listen {
    /// Resolves `--listen`/`--socket`, refusing a remote address unless it is allowed and a
    /// token is set.
    pub fn resolve(
        listen: Option<&str>,
        socket: Option<&Path>,
        allow_remote: bool,
        has_token: bool,
    ) -> Result<Listen, ListenError> {
        if let Some(path) = socket {
            return Ok(Listen::Unix(path.to_owned()));
        }
        let text = listen.unwrap_or(DEFAULT_ADDR);
        let addrs: Vec<SocketAddr> = match text.parse::<SocketAddr>() {
            Ok(addr) => vec![addr],
            // A name such as localhost:7433; resolving it does not leave the machine for
            // loopback names, and a remote name is refused below anyway.
            Err(_) => text
                .to_socket_addrs()
                .map_err(|_| ListenError::BadAddress(text.to_owned()))?
                .collect(),
        };
        let addr = *addrs
            .first()
            .ok_or_else(|| ListenError::BadAddress(text.to_owned()))?;
        if addrs.iter().all(|a| a.ip().is_loopback()) {
            return Ok(Listen::Tcp(addr));
        }
        if !allow_remote {
            return Err(ListenError::Remote(text.to_owned()));
        }
        if !has_token {
            return Err(ListenError::NoToken(text.to_owned()));
        }
        Ok(Listen::Tcp(addr))
    }
}

/// Binds a Unix socket readable and writable by its owner only.
///
/// A socket file left by a server that died is replaced; one a live server answers on is not.
pub fn bind_unix(path: &Path) -> Result<tokio::net::UnixListener, ListenError> {
    let bind_error = |source| ListenError::Bind {
        what: path.display().to_string(),
        source,
    };
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => {
            if UnixStream::connect(path).is_ok() {
                return Err(ListenError::InUse(path.to_owned()));
            }
            std::fs::remove_file(path).map_err(bind_error)?;
        }
        Ok(_) => return Err(ListenError::InUse(path.to_owned())),
        Err(_) => {}
    }
    // The umask makes the socket 0600 from its creation: a chmod after bind would leave a window
    // in which another user could connect. Nothing else creates files while we bind.
    let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
    let bound = tokio::net::UnixListener::bind(path);
    nix::sys::stat::umask(old);
    let listener = bound.map_err(bind_error)?;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).map_err(bind_error)?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_is_accepted_and_remote_needs_both_switches() {
        let tcp = |s: &str| Listen::Tcp(s.parse().unwrap());
        type Case = (
            Option<&'static str>,
            bool,
            bool,
            Result<Listen, &'static str>,
        );
        let cases: Vec<Case> = vec![
            (None, false, false, Ok(tcp(DEFAULT_ADDR))),
            (Some("127.0.0.1:0"), false, false, Ok(tcp("127.0.0.1:0"))),
            (Some("127.1.2.3:80"), false, false, Ok(tcp("127.1.2.3:80"))),
            (Some("[::1]:7433"), false, false, Ok(tcp("[::1]:7433"))),
            (Some("0.0.0.0:7433"), false, false, Err("not a loopback")),
            (Some("0.0.0.0:7433"), false, true, Err("not a loopback")),
            (Some("0.0.0.0:7433"), true, false, Err("HOOKVISOR_TOKEN")),
            (Some("0.0.0.0:7433"), true, true, Ok(tcp("0.0.0.0:7433"))),
            (Some("[::]:1"), false, false, Err("not a loopback")),
            (Some("nonsense"), false, false, Err("not an address")),
        ];
        for (listen, allow, token, want) in cases {
            let got = Listen::resolve(listen, None, allow, token);
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{listen:?}"),
                (Err(err), Err(text)) => {
                    assert!(err.to_string().contains(text), "{listen:?}: {err}")
                }
                (got, want) => panic!("{listen:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn socket_wins_and_is_created_0600() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("hv.sock");
        let listen = Listen::resolve(Some("0.0.0.0:1"), Some(&path), false, false).unwrap();
        assert_eq!(listen, Listen::Unix(path.clone()));
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = bind_unix(&path).unwrap();
            let mode = std::fs::metadata(&path).unwrap().permissions().mode();
            assert_eq!(mode & 0o777, 0o600);
            // A live server keeps its socket.
            let err = bind_unix(&path).unwrap_err();
            assert!(err.to_string().contains("in use"), "{err}");
            drop(listener);
            // A dead server's socket is replaced.
            bind_unix(&path).unwrap();
        });
        let file = dir.path().join("plain");
        std::fs::write(&file, "x").unwrap();
        assert!(matches!(bind_unix(&file), Err(ListenError::InUse(_))));
    }
}

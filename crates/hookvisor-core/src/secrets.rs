//! `~/.config/hookvisor/secrets.env`: the values a webhook's url, headers and body may name
//! without the event supplying them (docs/EVENTS.md §4.1 rule 6, §5 rule 20).
//!
//! The rules, written once here:
//!
//! 1. **Where.** `$XDG_CONFIG_HOME/hookvisor/secrets.env`, else `$HOME/.config/hookvisor/
//!    secrets.env`. A missing file defines nothing.
//! 2. **Lines.** `NAME=value` or `export NAME=value`; blank lines and lines starting with `#`
//!    are skipped. `NAME` is `[A-Za-z_][A-Za-z0-9_]*`; the value is the rest of the line with
//!    the blanks around it removed and one pair of matching surrounding quotes (`'…'` or
//!    `"…"`) taken off; nothing else is interpreted (no escapes, no `$`). Any other line is an
//!    error naming its line, never skipped: a value silently missing would be sent as nothing.
//! 3. **Mode.** The file must be a regular file (not a link, FIFO or device: it is opened
//!    without following a link and without blocking, as `status.json` is) that is ours and
//!    neither group- nor other-accessible (`chmod 600`); otherwise it is refused, whatever it
//!    holds.
//! 4. **Lookup** is case-insensitive, as template names are: `${github_token}` finds
//!    `GITHUB_TOKEN`. Two names that differ only in case are ambiguous and refused.
//! 5. **Never exported.** Nothing here enters a hook's environment, and a spawned child loses
//!    every variable of hookvisor's own environment that the file names (`names`).

use std::io::{self, Read as _};
use std::os::unix::fs::MetadataExt as _;
use std::path::{Path, PathBuf};

use crate::untrusted::open_regular;

/// Bytes of the file read; a larger one is refused rather than read in part.
const MAX_BYTES: u64 = 1024 * 1024;

/// The secrets of one file (rule 2), by name as written.
#[derive(Debug, Clone, Default)]
pub struct Secrets {
    entries: Vec<(String, String)>,
}

/// Why the secrets file cannot be used; each says the file, the line when there is one, and
/// the fix.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SecretsError {
    /// Group or others may access it (rule 3).
    #[error(
        "{}: mode {mode:03o} lets other users read secrets; run `chmod 600 {}`",
        path.display(),
        path.display()
    )]
    Exposed {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// A link, FIFO, device or hard-linked file (rule 3): a FIFO would block every run.
    #[error(
        "{} {why}; replace it with a regular file of mode 600",
        path.display()
    )]
    NotRegular {
        /// The file.
        path: PathBuf,
        /// What it is instead.
        why: String,
    },
    /// Another user owns it (rule 3).
    #[error(
        "{}: owned by uid {uid}, not by this user; recreate it as this user with mode 600",
        path.display()
    )]
    NotOurs {
        /// The file.
        path: PathBuf,
        /// Its owner.
        uid: u32,
    },
    /// A line that is no `NAME=value`, blank line or comment (rule 2).
    #[error(
        "{}:{line}: no NAME=value; write NAME=value, export NAME=value or a # comment",
        path.display()
    )]
    Syntax {
        /// The file.
        path: PathBuf,
        /// 1-based line.
        line: usize,
    },
    /// Two names differ only in case (rule 4).
    #[error(
        "{}: {first} and {second} differ only in case, and template names are case-insensitive; \
         rename one",
        path.display()
    )]
    Ambiguous {
        /// The file.
        path: PathBuf,
        /// One name.
        first: String,
        /// The other.
        second: String,
    },
    /// It cannot be read, or is over 1 MiB.
    #[error("cannot read {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// What failed.
        source: io::Error,
    },
}

/// The file of rule 1; `None` when neither variable says where the configuration is.
pub(crate) fn path() -> Option<PathBuf> {
    std::env::var_os("XDG_CONFIG_HOME")
        .filter(|d| !d.is_empty())
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))
        .map(|config| config.join("hookvisor").join("secrets.env"))
}

impl Secrets {
    /// Reads the file of rule 1 with every rule checked; empty when there is none.
    pub fn load() -> Result<Secrets, SecretsError> {
        match path() {
            Some(path) => Secrets::load_from(&path),
            None => Ok(Secrets::default()),
        }
    }

    /// Reads `path` with every rule checked; empty when it does not exist.
    pub fn load_from(path: &Path) -> Result<Secrets, SecretsError> {
        let Some(text) = read(path, true)? else {
            return Ok(Secrets::default());
        };
        let secrets = parse(&text).map_err(|line| SecretsError::Syntax {
            path: path.to_owned(),
            line,
        })?;
        for (i, (first, _)) in secrets.entries.iter().enumerate() {
            if let Some((second, _)) = secrets.entries[i + 1..]
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case(first) && n != first)
            {
                return Err(SecretsError::Ambiguous {
                    path: path.to_owned(),
                    first: first.clone(),
                    second: second.clone(),
                });
            }
        }
        Ok(secrets)
    }

    /// The value of `name`, case-insensitively (rule 4); a name given twice keeps the last
    /// line, as a shell sourcing the file would.
    pub fn get(&self, name: &str) -> Option<&str> {
        self.entries
            .iter()
            .rev()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
}

/// Every name the file defines, for keeping them out of a child's environment (rule 5). Read
/// leniently: a file refused by rule 3 or with a bad line still names what it would define, so
/// nothing it holds can reach a child.
pub fn names() -> Vec<String> {
    path().map_or_else(Vec::new, |path| names_in(&path))
}

/// The names `path` defines, read as [`names`] reads them.
fn names_in(path: &Path) -> Vec<String> {
    let Ok(Some(text)) = read(path, false) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| entry(line).ok().flatten().map(|(name, _)| name.to_owned()))
        .collect()
}

/// The file's text, `None` when it does not exist; `strict` checks rule 3 on the file opened.
fn read(path: &Path, strict: bool) -> Result<Option<String>, SecretsError> {
    let failed = |source| SecretsError::Read {
        path: path.to_owned(),
        source,
    };
    // Never blocking in open(2) on a FIFO the agent put there, never following its link.
    let file = match open_regular(path) {
        Ok(Ok(file)) => file,
        Ok(Err(why)) => {
            return Err(SecretsError::NotRegular {
                path: path.to_owned(),
                why,
            });
        }
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(failed(err)),
    };
    if strict {
        // The opened file's own metadata: a rename between a stat and the open changes nothing.
        let meta = file.metadata().map_err(failed)?;
        let me = nix::unistd::geteuid().as_raw();
        if meta.uid() != me {
            return Err(SecretsError::NotOurs {
                path: path.to_owned(),
                uid: meta.uid(),
            });
        }
        if meta.mode() & 0o077 != 0 {
            return Err(SecretsError::Exposed {
                path: path.to_owned(),
                mode: meta.mode() & 0o777,
            });
        }
    }
    let mut text = String::new();
    file.take(MAX_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(failed)?;
    if text.len() as u64 > MAX_BYTES {
        return Err(failed(io::Error::other("over 1 MiB")));
    }
    Ok(Some(text))
}

/// The entries of the file's text; `Err` is the 1-based line that is none (rule 2).
fn parse(text: &str) -> Result<Secrets, usize> {
    let mut entries = Vec::new();
    for (index, line) in text.lines().enumerate() {
        if let Some((name, value)) = entry(line).map_err(|()| index + 1)? {
            entries.push((name.to_owned(), value.to_owned()));
        }
    }
    Ok(Secrets { entries })
}

/// One line: `Ok(None)` for a blank line or comment, `Err` for a line that is no entry.
fn entry(line: &str) -> Result<Option<(&str, &str)>, ()> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return Ok(None);
    }
    let line = line.strip_prefix("export ").map_or(line, str::trim_start);
    let (name, value) = line.split_once('=').ok_or(())?;
    let name = name.trim_end();
    let valid = name
        .bytes()
        .next()
        .is_some_and(|b| b.is_ascii_alphabetic() || b == b'_')
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    if !valid {
        return Err(());
    }
    let value = value.trim();
    let unquoted = ['"', '\'']
        .iter()
        .find_map(|q| value.strip_prefix(*q)?.strip_suffix(*q))
        .filter(|_| value.len() >= 2)
        .unwrap_or(value);
    Ok(Some((name, unquoted)))
}

/// The value of `name` in hookvisor's own environment (rule 5): the usual upper-case
/// spelling first, then any other case of it. Never a `HOOKVISOR_*` variable: those are
/// hookvisor's own (its server's token among them), not secrets meant for a hook.
pub fn environment_value(name: &str) -> Option<String> {
    let upper = name.to_ascii_uppercase();
    if upper.starts_with("HOOKVISOR_") {
        return None;
    }
    std::env::var_os(&upper)
        .or_else(|| {
            std::env::vars_os()
                .find(|(n, _)| n.to_string_lossy().eq_ignore_ascii_case(name))
                .map(|(_, v)| v)
        })
        .map(|v| v.to_string_lossy().into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt as _;

    #[test]
    fn lines_by_rule_2() {
        let text = "# tokens\n\nGITHUB_TOKEN=ghp_1\nexport  SLACK_URL = \"https://h/x?a=b\" \n\
                    QUOTED='it''s'\nEMPTY=\nEQ=a=b\n";
        let secrets = parse(text).unwrap();
        assert_eq!(secrets.get("github_token"), Some("ghp_1"));
        assert_eq!(secrets.get("SLACK_URL"), Some("https://h/x?a=b"));
        assert_eq!(secrets.get("quoted"), Some("it''s"));
        assert_eq!(secrets.get("EMPTY"), Some(""));
        assert_eq!(secrets.get("EQ"), Some("a=b"));
        assert_eq!(secrets.get("nope"), None);
        for (bad, line) in [
            ("A=1\nnot an entry\n", 2),
            ("1A=x", 1),
            ("A B=x", 1),
            ("=x", 1),
        ] {
            assert_eq!(parse(bad).unwrap_err(), line, "{bad:?}");
        }
    }

    #[test]
    fn mode_and_case_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets.env");
        assert!(Secrets::load_from(&path).unwrap().get("x").is_none());
        fs::write(&path, "TOKEN=t\n").unwrap();
        fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        let err = Secrets::load_from(&path).unwrap_err().to_string();
        assert!(
            err.contains("mode 640") && err.contains("chmod 600"),
            "{err}"
        );
        fs::set_permissions(&path, fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(Secrets::load_from(&path).unwrap().get("token"), Some("t"));
        fs::write(&path, "TOKEN=t\nToken=u\n").unwrap();
        let err = Secrets::load_from(&path).unwrap_err().to_string();
        assert!(err.contains("differ only in case"), "{err}");
        fs::write(&path, "TOKEN=t\nbad line\n").unwrap();
        let err = Secrets::load_from(&path).unwrap_err().to_string();
        assert!(err.contains("secrets.env:2: no NAME=value"), "{err}");
    }

    #[test]
    fn only_a_regular_file_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("secrets.env");
        // A FIFO: opening it blocking would wait for a writer for ever.
        nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let fifo = path.clone();
        std::thread::spawn(move || tx.send(Secrets::load_from(&fifo).map(|_| ())));
        // A blocking open never returns: the bound turns that into a failure, not a hang.
        let loaded = rx.recv_timeout(std::time::Duration::from_secs(10));
        let err = loaded
            .expect("opening a FIFO blocked")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("secrets.env is a FIFO, not a regular file; replace it"),
            "{err}"
        );
        assert!(names_in(&path).is_empty());
        fs::remove_file(&path).unwrap();
        let real = dir.path().join("real.env");
        fs::write(&real, "TOKEN=t\n").unwrap();
        fs::set_permissions(&real, fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&real, &path).unwrap();
        let err = Secrets::load_from(&path).unwrap_err().to_string();
        assert!(
            err.contains("is a symbolic link, not a regular file"),
            "{err}"
        );
        assert!(Secrets::load_from(&real).is_ok());
    }
}

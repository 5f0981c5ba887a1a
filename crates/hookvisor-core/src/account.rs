//! Accounts: whom `--user` names, read from `/etc/passwd` and `/etc/group` directly.
//!
//! PID 1 of a container must not depend on the image's name-service set-up. The init is linked
//! statically against glibc, and a static glibc that follows `/etc/nsswitch.conf` to a module
//! of the image's glibc (`passwd: files systemd`, Debian's default once libnss-systemd is
//! installed, and Ubuntu's) crashes. So, as runc and gosu do, nothing here goes through NSS: no
//! `getpwnam`, no `getgrouplist`, no nsswitch.conf. [`Credentials::from_name`] resolves a
//! `--user` value by these rules:
//!
//! 1. The value is `USER` or `USER:GROUP`. A `USER` of digits only is a uid, anything else a
//!    login name; `GROUP` likewise is a gid or a group name. Ids go up to 2147483647, as in
//!    runc (`u32::MAX` would mean "unchanged" to `setuid`).
//! 2. The first `/etc/passwd` entry with that name, or that uid for a number, gives the name,
//!    uid, primary gid, home and shell (an empty home is `/`, an empty shell `/bin/sh`). A name
//!    without an entry is an error. A uid without one is still a valid account: its name is
//!    the number, its home `/`, its shell `/bin/sh` and its gid the same number (never root's
//!    group by default).
//! 3. The groups are the primary gid, then the gid of every `/etc/group` entry that lists the
//!    user's name among its members, in file order, each once. A `GROUP` replaces all of that:
//!    the gid is that group's and the only group, as with `docker run --user`.
//! 4. Blank lines, `#` comments, lines with too few or too many fields, ids that are not a
//!    number in range and NIS `+`/`-` lines are skipped, not fatal. A missing file has no
//!    entries; a file that exists but cannot be read is an error.

#![forbid(unsafe_code)]

use std::ffi::OsStr;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::unistd::{Gid, Uid};

/// The user database read for `--user`.
const PASSWD: &str = "/etc/passwd";
/// The group database read for the groups of `--user`.
const GROUP: &str = "/etc/group";
/// The highest uid or gid accepted (rule 1).
const MAX_ID: u32 = i32::MAX as u32;

/// The account a hook runs as: what `setgroups`/`setgid`/`setuid` and `HOME`, `USER`, `LOGNAME`
/// and `SHELL` are set to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Credentials {
    /// Login name.
    pub user: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Every group the user is in, the primary one included.
    pub groups: Vec<u32>,
    /// Home directory, given to the hook as `HOME`.
    pub home: PathBuf,
    /// Login shell, given to the hook as `SHELL`.
    pub shell: PathBuf,
}

impl Credentials {
    /// The account `spec` names: `NAME`, `UID`, `NAME:GROUP` or `UID:GID`, read from
    /// `/etc/passwd` and `/etc/group` by the rules of this module, never through NSS.
    pub fn from_name(spec: &str) -> Result<Credentials, AccountError> {
        let passwd = parse_passwd(&read_table(Path::new(PASSWD))?);
        let groups = parse_group(&read_table(Path::new(GROUP))?);
        resolve(spec, &passwd, &groups)
    }

    /// The identity this process runs with now: its real uid and gid, its supplementary groups,
    /// and the name, home and shell of that uid's `/etc/passwd` entry.
    ///
    /// A uid without an entry (common in containers) still works: the name is the number, the
    /// home `$HOME` (else `/`) and the shell `/bin/sh`.
    pub fn current() -> Result<Credentials, AccountError> {
        let uid = Uid::current().as_raw();
        let gid = Gid::current().as_raw();
        let groups = nix::unistd::getgroups()
            .map_err(AccountError::OwnGroups)?
            .into_iter()
            .map(Gid::as_raw)
            .collect();
        let passwd = parse_passwd(&read_table(Path::new(PASSWD))?);
        Ok(match passwd.into_iter().find(|entry| entry.uid == uid) {
            Some(entry) => Credentials {
                user: entry.name,
                uid,
                gid,
                groups,
                home: entry.home,
                shell: entry.shell,
            },
            None => Credentials {
                user: uid.to_string(),
                uid,
                gid,
                groups,
                home: std::env::var_os("HOME")
                    .filter(|h| !h.is_empty())
                    .map_or_else(|| PathBuf::from("/"), PathBuf::from),
                shell: PathBuf::from("/bin/sh"),
            },
        })
    }
}

/// Why an account could not be resolved.
#[derive(Debug, thiserror::Error)]
pub enum AccountError {
    /// No `/etc/passwd` entry has this login name.
    #[error("no user '{0}' in {PASSWD}; create it (useradd {0}) or pass --user UID[:GID]")]
    UnknownUser(String),
    /// No `/etc/group` entry has this group name.
    #[error("no group '{0}' in {GROUP}; create it (groupadd {0}) or pass --user USER:GID")]
    UnknownGroup(String),
    /// The value is not `USER[:GROUP]` with ids in range.
    #[error("--user '{spec}': {reason}; pass NAME, UID, NAME:GROUP or UID:GID")]
    BadSpec {
        /// The value given.
        spec: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// `/etc/passwd` or `/etc/group` exists but cannot be read.
    #[error(
        "cannot read {}: {source}; make it a readable file or pass --user UID:GID",
        path.display()
    )]
    Read {
        /// The file.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// This process's own supplementary groups cannot be read.
    #[error("cannot read this process's groups: {0}")]
    OwnGroups(#[source] Errno),
}

/// One usable line of `/etc/passwd`.
#[derive(Debug, PartialEq)]
struct PasswdEntry {
    name: String,
    uid: u32,
    gid: u32,
    home: PathBuf,
    shell: PathBuf,
}

/// One usable line of `/etc/group`.
#[derive(Debug, PartialEq)]
struct GroupEntry {
    name: String,
    gid: u32,
    members: Vec<String>,
}

/// A user or a group as `--user` gives it (rule 1).
#[derive(Debug, Clone, Copy)]
enum Named<'a> {
    Id(u32),
    Name(&'a str),
}

/// Rules 1 to 3 over parsed tables.
fn resolve(
    spec: &str,
    passwd: &[PasswdEntry],
    groups: &[GroupEntry],
) -> Result<Credentials, AccountError> {
    let (user, group) = match spec.split_once(':') {
        Some((user, group)) => (user, Some(group)),
        None => (spec, None),
    };
    let bad = |reason| AccountError::BadSpec {
        spec: spec.to_owned(),
        reason,
    };
    let user = named(user).ok_or_else(|| bad("the user is empty or an id above 2147483647"))?;
    let group = group
        .map(|g| named(g).ok_or_else(|| bad("the group is empty or an id above 2147483647")))
        .transpose()?;

    let entry = passwd.iter().find(|e| match user {
        Named::Name(name) => e.name == name,
        Named::Id(uid) => e.uid == uid,
    });
    let mut account = match (entry, user) {
        (Some(e), _) => Credentials {
            user: e.name.clone(),
            uid: e.uid,
            gid: e.gid,
            groups: vec![e.gid],
            home: e.home.clone(),
            shell: e.shell.clone(),
        },
        (None, Named::Id(uid)) => Credentials {
            user: uid.to_string(),
            uid,
            gid: uid,
            groups: vec![uid],
            home: PathBuf::from("/"),
            shell: PathBuf::from("/bin/sh"),
        },
        (None, Named::Name(name)) => return Err(AccountError::UnknownUser(name.to_owned())),
    };
    match group {
        Some(group) => {
            account.gid = match group {
                Named::Id(gid) => gid,
                Named::Name(name) => {
                    groups
                        .iter()
                        .find(|g| g.name == name)
                        .ok_or_else(|| AccountError::UnknownGroup(name.to_owned()))?
                        .gid
                }
            };
            account.groups = vec![account.gid];
        }
        None if entry.is_some() => {
            for g in groups {
                if g.members.contains(&account.user) && !account.groups.contains(&g.gid) {
                    account.groups.push(g.gid);
                }
            }
        }
        None => {}
    }
    Ok(account)
}

/// Rule 1 for one side of `USER:GROUP`; `None` when empty or out of range.
fn named(text: &str) -> Option<Named<'_>> {
    if text.is_empty() {
        None
    } else if text.bytes().all(|b| b.is_ascii_digit()) {
        id(text.as_bytes()).map(Named::Id)
    } else {
        Some(Named::Name(text))
    }
}

/// A file's bytes; a missing file is an empty one (rule 4).
fn read_table(path: &Path) -> Result<Vec<u8>, AccountError> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(bytes),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(source) => Err(AccountError::Read {
            path: path.to_owned(),
            source,
        }),
    }
}

/// The entries of an `/etc/passwd` file, `name:password:uid:gid:gecos:home:shell` (rule 4).
fn parse_passwd(data: &[u8]) -> Vec<PasswdEntry> {
    records(data)
        .filter_map(|fields| {
            let [name, _, uid, gid, _, home, shell] = fields[..] else {
                return None;
            };
            Some(PasswdEntry {
                name: login_name(name)?,
                uid: id(uid)?,
                gid: id(gid)?,
                home: path_or(home, "/"),
                shell: path_or(shell, "/bin/sh"),
            })
        })
        .collect()
}

/// The entries of an `/etc/group` file, `name:password:gid:member,member...` (rule 4).
fn parse_group(data: &[u8]) -> Vec<GroupEntry> {
    records(data)
        .filter_map(|fields| {
            let [name, _, gid, members] = fields[..] else {
                return None;
            };
            Some(GroupEntry {
                name: login_name(name)?,
                gid: id(gid)?,
                members: members
                    .split(|&b| b == b',')
                    .filter_map(|m| std::str::from_utf8(m.trim_ascii()).ok())
                    .filter(|m| !m.is_empty())
                    .map(str::to_owned)
                    .collect(),
            })
        })
        .collect()
}

/// The `:`-separated fields of every line that is neither blank nor a comment.
fn records(data: &[u8]) -> impl Iterator<Item = Vec<&[u8]>> {
    data.split(|&b| b == b'\n')
        .map(<[u8]>::trim_ascii)
        .filter(|line| !line.is_empty() && !line.starts_with(b"#"))
        .map(|line| line.split(|&b| b == b':').collect())
}

/// A user or group name: UTF-8, not empty, not a NIS `+`/`-` line.
fn login_name(field: &[u8]) -> Option<String> {
    let name = std::str::from_utf8(field).ok()?;
    (!name.is_empty() && !name.starts_with(['+', '-'])).then(|| name.to_owned())
}

/// A uid or gid: decimal digits only, at most [`MAX_ID`].
fn id(field: &[u8]) -> Option<u32> {
    if field.is_empty() || !field.iter().all(u8::is_ascii_digit) {
        return None;
    }
    std::str::from_utf8(field)
        .ok()?
        .parse::<u32>()
        .ok()
        .filter(|&id| id <= MAX_ID)
}

fn path_or(field: &[u8], default: &str) -> PathBuf {
    if field.is_empty() {
        PathBuf::from(default)
    } else {
        PathBuf::from(OsStr::from_bytes(field))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD_FILE: &str = "\
# a comment, then a blank line

root:x:0:0:root:/root:/bin/bash
agent:x:1000:1000:Agent,,,:/home/agent:/bin/bash
loner:x:1001:1001::/home/loner:/bin/zsh
  padded:x:1002:1002::/home/padded:/bin/sh  
short:x:1003:1003
toolong:x:1004:1004::/h:/bin/sh:extra
badid:x:-1:1005::/h:/bin/sh
huge:x:4294967295:1006::/h:/bin/sh
+nis::::::
empty::1007:1007:::
agent:x:2000:2000::/duplicate:/bin/sh
1500:x:1600:1600::/home/numeric-name:/bin/sh
";

    const GROUP_FILE: &str = "\
# comment
root:x:0:
agent:x:1000:
loner:x:1001:
docker:x:998:agent, padded
sudo:x:27:agent
broken:x:notanumber:agent
short:x:999
staff:x:50:agent,agent
audio:x:29:padded,agent
";

    fn creds(spec: &str) -> Result<Credentials, AccountError> {
        resolve(
            spec,
            &parse_passwd(PASSWD_FILE.as_bytes()),
            &parse_group(GROUP_FILE.as_bytes()),
        )
    }

    /// (spec, uid, gid, groups, user, home, shell)
    type Want = (
        &'static str,
        u32,
        u32,
        &'static [u32],
        &'static str,
        &'static str,
        &'static str,
    );

    #[test]
    fn accounts_resolve_by_the_rules() {
        let table: &[Want] = &[
            // Supplementary groups in file order, each once, the primary first.
            (
                "agent",
                1000,
                1000,
                &[1000, 998, 27, 50, 29],
                "agent",
                "/home/agent",
                "/bin/bash",
            ),
            // A user in no extra group has its primary group only.
            (
                "loner",
                1001,
                1001,
                &[1001],
                "loner",
                "/home/loner",
                "/bin/zsh",
            ),
            ("root", 0, 0, &[0], "root", "/root", "/bin/bash"),
            // Leading and trailing blanks do not hide an entry; members are trimmed too.
            (
                "padded",
                1002,
                1002,
                &[1002, 998, 29],
                "padded",
                "/home/padded",
                "/bin/sh",
            ),
            // Empty home and shell fields get the defaults of passwd(5).
            ("empty", 1007, 1007, &[1007], "empty", "/", "/bin/sh"),
            // A number is a uid: its entry gives the rest, groups included.
            (
                "1000",
                1000,
                1000,
                &[1000, 998, 27, 50, 29],
                "agent",
                "/home/agent",
                "/bin/bash",
            ),
            // ... even when some entry's name is that number.
            ("1500", 1500, 1500, &[1500], "1500", "/", "/bin/sh"),
            (
                "1600",
                1600,
                1600,
                &[1600],
                "1500",
                "/home/numeric-name",
                "/bin/sh",
            ),
            // A uid without an entry: its own number as name and gid, home /, /bin/sh.
            ("1234", 1234, 1234, &[1234], "1234", "/", "/bin/sh"),
            ("1234:1234", 1234, 1234, &[1234], "1234", "/", "/bin/sh"),
            ("1234:5", 1234, 5, &[5], "1234", "/", "/bin/sh"),
            // A group replaces the primary gid and every supplementary group.
            (
                "agent:4321",
                1000,
                4321,
                &[4321],
                "agent",
                "/home/agent",
                "/bin/bash",
            ),
            (
                "agent:docker",
                1000,
                998,
                &[998],
                "agent",
                "/home/agent",
                "/bin/bash",
            ),
            (
                "1000:sudo",
                1000,
                27,
                &[27],
                "agent",
                "/home/agent",
                "/bin/bash",
            ),
            ("0", 0, 0, &[0], "root", "/root", "/bin/bash"),
            (
                "2147483647",
                2147483647,
                2147483647,
                &[2147483647],
                "2147483647",
                "/",
                "/bin/sh",
            ),
        ];
        for &(spec, uid, gid, groups, user, home, shell) in table {
            let got = creds(spec).unwrap_or_else(|e| panic!("{spec}: {e}"));
            let want = Credentials {
                user: user.to_owned(),
                uid,
                gid,
                groups: groups.to_vec(),
                home: home.into(),
                shell: shell.into(),
            };
            assert_eq!(got, want, "{spec}");
        }
    }

    #[test]
    fn malformed_lines_are_skipped() {
        let names: Vec<String> = parse_passwd(PASSWD_FILE.as_bytes())
            .into_iter()
            .map(|e| e.name)
            .collect();
        assert_eq!(
            names,
            ["root", "agent", "loner", "padded", "empty", "agent", "1500"]
        );
        let groups: Vec<(String, u32)> = parse_group(GROUP_FILE.as_bytes())
            .into_iter()
            .map(|g| (g.name, g.gid))
            .collect();
        let want = [
            ("root", 0),
            ("agent", 1000),
            ("loner", 1001),
            ("docker", 998),
            ("sudo", 27),
            ("staff", 50),
            ("audio", 29),
        ];
        assert_eq!(
            groups,
            want.map(|(n, g)| (n.to_owned(), g)).to_vec(),
            "a short or non-numeric group line is skipped"
        );
        // CRLF files, binary junk and a file without a final newline still parse.
        let entries = parse_passwd(b"\xff\xfe:x:1:1::/:/bin/sh\r\na:x:5:6:\xc3:/h\xff:/bin/sh");
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].home, Path::new(OsStr::from_bytes(b"/h\xff")));
        assert!(parse_passwd(b"").is_empty());
    }

    #[test]
    fn mistakes_are_one_line_naming_the_file_and_the_fix() {
        let cases = [
            (
                "nobody-here",
                "no user 'nobody-here' in /etc/passwd; create it (useradd nobody-here) or pass --user UID[:GID]",
            ),
            // Entries the parser skipped do not exist.
            (
                "short",
                "no user 'short' in /etc/passwd; create it (useradd short) or pass --user UID[:GID]",
            ),
            (
                "agent:wheel",
                "no group 'wheel' in /etc/group; create it (groupadd wheel) or pass --user USER:GID",
            ),
            (
                "4294967295",
                "--user '4294967295': the user is empty or an id above 2147483647; pass NAME, UID, NAME:GROUP or UID:GID",
            ),
            (
                "1000:4294967295",
                "--user '1000:4294967295': the group is empty or an id above 2147483647; pass NAME, UID, NAME:GROUP or UID:GID",
            ),
            (
                ":1000",
                "--user ':1000': the user is empty or an id above 2147483647; pass NAME, UID, NAME:GROUP or UID:GID",
            ),
            (
                "agent:",
                "--user 'agent:': the group is empty or an id above 2147483647; pass NAME, UID, NAME:GROUP or UID:GID",
            ),
        ];
        for (spec, want) in cases {
            assert_eq!(creds(spec).unwrap_err().to_string(), want, "{spec}");
        }
    }

    #[test]
    fn an_unreadable_table_is_an_error_and_a_missing_one_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(read_table(&dir.path().join("absent")).unwrap(), b"");
        // A directory cannot be read as a file, whoever runs the test.
        let err = read_table(dir.path()).unwrap_err().to_string();
        assert!(
            err.starts_with(&format!("cannot read {}: ", dir.path().display())),
            "{err}"
        );
    }

    #[test]
    fn the_current_identity_comes_from_the_kernel() {
        let me = Credentials::current().unwrap();
        assert_eq!(me.uid, Uid::current().as_raw());
        assert_eq!(me.gid, Gid::current().as_raw());
        if me.uid == 0 {
            assert_eq!(me.user, "root");
        }
    }
}

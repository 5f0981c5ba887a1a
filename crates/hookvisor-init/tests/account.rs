//! End-to-end tests of `--user` with the init as it ships: linked statically against glibc by
//! `scripts/build-release.sh`, started as PID 1 of new PID and mount namespaces. The mount
//! namespace lets a test put another `/etc/nsswitch.conf` in place, or none, without touching
//! the host's.
//!
//! Needs root, util-linux (`unshare`, `mount`), passwd (`useradd`), binutils (`nm`) and
//! libnss-systemd, whose NSS module is what a static glibc crashes on; scripts/test.sh installs
//! them. Outside CI a test that cannot run says so and returns; with CI=true it fails.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Instant;

mod common;

use common::*;

/// The name-service configuration of Debian with libnss-systemd installed, and of Ubuntu.
const NSS_SYSTEMD: &str = "passwd: files systemd\ngroup: files systemd\nshadow: files systemd\n";

/// What CMD prints: its ids and the identity variables the init gave it.
const PROBE: &str = r#"id -u; id -g; id -G; echo "$HOME $USER $LOGNAME $SHELL""#;

#[test]
fn a_named_user_is_read_from_etc_passwd_whatever_nsswitch_says() {
    if !static_init_runs() {
        return;
    }
    let want = expected("hv-test");
    let conf = tempfile::NamedTempFile::new().unwrap();
    fs::write(conf.path(), NSS_SYSTEMD).unwrap();
    let etc = tempfile::tempdir().unwrap();
    let with_systemd = format!("mount --bind {} /etc/nsswitch.conf", conf.path().display());
    // A private copy of /etc without the file, mounted over /etc in the test's namespace only.
    let without_file = format!(
        "cp -a /etc {0}/etc && rm -f {0}/etc/nsswitch.conf && mount --bind {0}/etc /etc \
         && ! test -e /etc/nsswitch.conf",
        etc.path().display()
    );
    for (setup, what) in [
        (with_systemd.as_str(), "passwd: files systemd"),
        (without_file.as_str(), "no /etc/nsswitch.conf"),
    ] {
        for user in ["hv-test".to_owned(), want.uid.to_string()] {
            let out = run_as(&user, setup);
            assert_eq!(probe(&out), want, "--user {user} under {what}");
        }
    }
}

#[test]
fn a_numeric_uid_needs_no_passwd_entry() {
    if !static_init_runs() {
        return;
    }
    let setup = systemd_nsswitch();
    let nobody = |uid: u32, gid: u32| Probe {
        uid,
        gid,
        groups: vec![gid],
        env: format!("/ {uid} {uid} /bin/sh"),
    };
    assert_eq!(probe(&run_as("1234:1234", &setup.0)), nobody(1234, 1234));
    assert_eq!(probe(&run_as("1234:4321", &setup.0)), nobody(1234, 4321));
    // Without a gid the group is the uid's number, never root's group.
    assert_eq!(probe(&run_as("1234", &setup.0)), nobody(1234, 1234));
    // A group given with a known user replaces its groups, as with `docker run --user`.
    let mut want = expected("hv-test");
    want.gid = 4321;
    want.groups = vec![4321];
    assert_eq!(probe(&run_as("hv-test:4321", &setup.0)), want);
}

#[test]
fn an_unknown_user_is_one_line_naming_the_file() {
    if !static_init_runs() {
        return;
    }
    let setup = systemd_nsswitch();
    let out = run_as("hv-no-such-user", &setup.0);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "hookvisor-init: no user 'hv-no-such-user' in /etc/passwd; create it \
         (useradd hv-no-such-user) or pass --user UID[:GID]\n"
    );
    assert!(out.stdout.is_empty(), "CMD ran: {out:?}");
}

/// The static init must not contain glibc's passwd and group lookups at all: linked in, any of
/// them can load an NSS module of the image's glibc, which crashes a static binary.
#[test]
fn the_shipped_init_links_no_passwd_or_group_lookup() {
    if !static_init_runs() {
        return;
    }
    let out = Command::new("nm")
        .arg(shipped_init())
        .output()
        .expect("nm (binutils) is needed to read the init's symbols");
    assert!(out.status.success(), "nm: {out:?}");
    let symbols = String::from_utf8_lossy(&out.stdout);
    let lookups = [
        "getpwnam",
        "getpwnam_r",
        "getpwuid",
        "getpwuid_r",
        "getpwent",
        "getgrnam",
        "getgrnam_r",
        "getgrgid",
        "getgrgid_r",
        "getgrent",
        "getgrouplist",
        "initgroups",
    ];
    let found: Vec<&str> = symbols
        .lines()
        .filter_map(|line| line.split_whitespace().last())
        .filter(|name| lookups.contains(name))
        .collect();
    assert!(
        found.is_empty(),
        "NSS lookups linked into the init: {found:?}"
    );
}

// ---------------------------------------------------------------------------------------------
// Helpers

/// Root, namespaces, the test user, the NSS module and the shipped binary, all at hand.
fn static_init_runs() -> bool {
    if !namespaces() || ensure_test_user().is_none() {
        return false;
    }
    if !nss_systemd_installed() {
        assert!(
            !in_ci(),
            "CI=true but libnss-systemd is not installed: apt-get install libnss-systemd"
        );
        eprintln!(
            "note: libnss-systemd missing: the crash these tests guard against cannot happen"
        );
    }
    shipped_init();
    true
}

/// The init as it ships, built once per run of these tests by `scripts/build-release.sh init` into
/// `${CARGO_TARGET_DIR:-target}/release`, where container-smoke.sh and bench.sh take it too
/// (so CI builds it once for all three). The init alone: these tests run no `hookvisor`, whose
/// release build (axum, tokio, hyper under LTO) was most of their time.
fn shipped_init() -> &'static Path {
    static BUILT: OnceLock<PathBuf> = OnceLock::new();
    BUILT.get_or_init(|| {
        let repo = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .canonicalize()
            .unwrap();
        let started = Instant::now();
        let out = Command::new(repo.join("scripts/build-release.sh"))
            .arg("init")
            .current_dir(&repo)
            .output()
            .expect("run scripts/build-release.sh");
        assert!(
            out.status.success(),
            "scripts/build-release.sh: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        eprintln!(
            "note: scripts/build-release.sh init took {:.1?}",
            started.elapsed()
        );
        let target = std::env::var_os("CARGO_TARGET_DIR")
            .map_or_else(|| repo.join("target"), |dir| repo.join(dir));
        target.join("release/hookvisor-init")
    })
}

fn nss_systemd_installed() -> bool {
    ["/lib", "/usr/lib", "/lib64", "/usr/lib64"]
        .iter()
        .flat_map(|dir| {
            let nested = fs::read_dir(dir)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path());
            std::iter::once(PathBuf::from(dir)).chain(nested)
        })
        .any(|dir| dir.join("libnss_systemd.so.2").exists())
}

/// A setup line that mounts `passwd: files systemd` over /etc/nsswitch.conf, and its file.
fn systemd_nsswitch() -> (String, tempfile::NamedTempFile) {
    let conf = tempfile::NamedTempFile::new().unwrap();
    fs::write(conf.path(), NSS_SYSTEMD).unwrap();
    let setup = format!("mount --bind {} /etc/nsswitch.conf", conf.path().display());
    (setup, conf)
}

/// `hookvisor-init --user USER -- sh -c PROBE` as it ships, as PID 1 of new PID and mount
/// namespaces, after `setup` ran as root in that mount namespace (mounts there are private).
fn run_as(user: &str, setup: &str) -> Output {
    let w = Workspace::new();
    let script = format!("{setup} && exec \"$@\"");
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "--pid", "--fork", "--mount-proc", "--kill-child"])
        .args(["sh", "-c", &script, "sh"])
        .arg(shipped_init())
        .args(w.args(&["--user", user, "--", "sh", "-c", PROBE]))
        .current_dir(&w.root);
    for var in [
        "HOOKVISOR_USER",
        "HOOKVISOR_STATE_DIR",
        "DISCOBOT_WORKSPACE",
    ] {
        command.env_remove(var);
    }
    command.output().expect("spawn unshare")
}

/// The identity CMD reported.
#[derive(Debug, PartialEq)]
struct Probe {
    uid: u32,
    gid: u32,
    /// Sorted, without duplicates.
    groups: Vec<u32>,
    /// `$HOME $USER $LOGNAME $SHELL`.
    env: String,
}

fn probe(out: &Output) -> Probe {
    let text = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = text.lines().collect();
    assert!(
        out.status.success() && lines.len() == 4,
        "{}; stdout {text:?}; stderr {:?}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let mut groups: Vec<u32> = lines[2].split(' ').map(|g| g.parse().unwrap()).collect();
    groups.sort_unstable();
    groups.dedup();
    Probe {
        uid: lines[0].parse().unwrap(),
        gid: lines[1].parse().unwrap(),
        groups,
        env: lines[3].to_owned(),
    }
}

/// What the system's own tools say about `name` (this test binary may use NSS: it is dynamic).
fn expected(name: &str) -> Probe {
    let user = nix::unistd::User::from_name(name).unwrap().unwrap();
    let c_name = std::ffi::CString::new(name).unwrap();
    let mut groups: Vec<u32> = nix::unistd::getgrouplist(&c_name, user.gid)
        .unwrap()
        .into_iter()
        .map(|g| g.as_raw())
        .collect();
    groups.sort_unstable();
    groups.dedup();
    assert!(
        groups.len() > 1,
        "{name} has no supplementary group: {groups:?}"
    );
    Probe {
        uid: user.uid.as_raw(),
        gid: user.gid.as_raw(),
        groups,
        env: format!(
            "{} {name} {name} {}",
            user.dir.display(),
            user.shell.display()
        ),
    }
}

//! scripts/demo.sh, the newcomer's first run, with `--no-serve`: the init as PID 1 of a PID
//! namespace (root's, or a user namespace for anyone else), the re-prompt and the blocked
//! commit, exit 0; and a failure when a step does not go as expected.
//!
//! Needs root (PID namespaces, the test user); with CI=true a test that cannot run fails.

use crate::common;

use std::path::Path;
use std::process::Command;

use common::*;

/// Runs `scripts/demo.sh --no-serve` with the binaries of this test run, as `user` or as
/// ourselves, with `env` added; returns its exit code and its output.
fn demo(user: Option<&str>, env: &[(&str, &str)]) -> (i32, String) {
    build_hookvisor();
    let tmp = tempfile::tempdir().unwrap();
    let bin = Path::new(INIT).parent().unwrap();
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/demo.sh");
    // env(1) after runuser, which resets HOME and the like.
    let mut command = Command::new("env");
    if let Some(user) = user {
        let user = nix::unistd::User::from_name(user).unwrap().unwrap();
        std::os::unix::fs::chown(tmp.path(), Some(user.uid.as_raw()), None).unwrap();
        command = Command::new("runuser");
        command.args(["-u", &user.name, "--", "env"]);
    }
    command.arg(format!("TMPDIR={}", tmp.path().display()));
    for (k, v) in env {
        command.arg(format!("{k}={v}"));
    }
    let out = command
        .arg(&script)
        .args(["--no-serve", "--bin-dir"])
        .arg(bin)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (code(out.status), text)
}

/// The lines that say the demo showed what it is for.
fn assert_shows_the_product(code: i32, out: &str, user: &str) {
    assert_eq!(code, 0, "{out}");
    let pid1 = out
        .lines()
        .find(|l| l.split_whitespace().next() == Some("1"))
        .unwrap_or_else(|| panic!("no PID 1 in the ps listing:\n{out}"));
    assert!(
        pid1.contains(user) && pid1.contains("hookvisor-init"),
        "{out}"
    );
    for line in [
        "[Welcome] session demo starting in ",
        &format!("/workspace as {user}\n"),
        "[Discobot Hook Failed] \"No trailing whitespace\"",
        "hookvisor: commit blocked",
        "the clean commit passed",
        "demo: all steps went as expected",
    ] {
        assert!(out.contains(line), "missing {line:?} in:\n{out}");
    }
}

#[test]
fn demo_runs_the_init_as_pid1_as_root() {
    if !namespaces() {
        return;
    }
    let (code, out) = demo(None, &[]);
    assert_shows_the_product(code, &out, "root");
}

#[test]
fn demo_runs_in_a_user_namespace_as_a_user() {
    let Some(_one_at_a_time) = ensure_test_user() else {
        return;
    };
    let (code, out) = demo(Some("hv-test"), &[]);
    assert_shows_the_product(code, &out, "hv-test");
}

#[test]
fn demo_fails_when_the_commit_is_not_blocked() {
    if !namespaces() {
        return;
    }
    let (code, out) = demo(None, &[("HOOKVISOR_SKIP", "no-fixme")]);
    assert_eq!(code, 1, "{out}");
    assert!(
        out.contains("demo: FAILED: the commit went through"),
        "{out}"
    );
}

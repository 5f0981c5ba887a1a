//! `hookvisor session`: the session hooks without the init.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;

use common::{Workspace, ensure_test_user, stderr, test_user};

#[test]
fn session_runs_blocking_hooks_first_records_them_and_fails_when_one_fails() {
    let ws = Workspace::new();
    let order = ws.base().join("order");
    let o = order.display();
    ws.hook("10-later.sh", "session", "", &format!("echo 10 >> {o}"));
    ws.hook(
        "20-early.sh",
        "session",
        "blocking: true\nretries: 0",
        &format!("echo 20 >> {o}; echo oops; exit 4"),
    );
    ws.hook("30-last.sh", "session", "", &format!("echo 30 >> {o}"));
    ws.hook(
        "40-file.sh",
        "file",
        "pattern: '*'",
        &format!("echo 40 >> {o}"),
    );
    ws.hook(
        "50-bad.sh",
        "session",
        "run_as: admin",
        &format!("echo 50 >> {o}"),
    );

    let out = ws.hookvisor(&["session"]);
    let err = stderr(&out);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(fs::read_to_string(&order).unwrap(), "20\n10\n30\n");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let lines: Vec<&str> = stdout
        .lines()
        .map(|l| l.split("; log:").next().unwrap())
        .collect();
    assert_eq!(
        lines,
        ["FAIL  20-early (exit 4)", "ok    10-later", "ok    30-last"]
    );
    assert!(err.contains("[20-early] oops"), "{err}");
    assert!(err.contains("50-bad.sh") && err.contains("run_as"), "{err}");

    let status = ws.status();
    for (id, result) in [
        ("10-later", "success"),
        ("20-early", "failure"),
        ("30-last", "success"),
    ] {
        assert_eq!(status["hooks"][id]["type"], "session", "{id}");
        assert_eq!(status["hooks"][id]["lastResult"], result, "{id}");
    }
    assert!(status["hooks"].get("40-file").is_none());
    assert!(status["hooks"].get("50-bad").is_none());
}

#[test]
fn session_as_root_runs_user_hooks_as_the_user() {
    let Some(_one_at_a_time) = ensure_test_user() else {
        return;
    };
    let user = test_user();

    let ws = Workspace::new();
    // The temp dir is private to root; the user must be able to reach the workspace.
    fs::set_permissions(ws.base(), fs::Permissions::from_mode(0o755)).unwrap();
    ws.hook("10-root.sh", "session", "run_as: root", "id -u");
    ws.hook("20-user.sh", "session", "run_as: user", "id -u; echo $HOME");
    let out = ws.hookvisor(&["session", "--user", "hv-test"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let log = |id: &str| fs::read_to_string(ws.state_dir().join(format!("output/{id}.log")));
    assert_eq!(log("10-root").unwrap(), "0\n");
    assert_eq!(
        log("20-user").unwrap(),
        format!("{}\n{}\n", user.uid, user.dir.display())
    );
    use std::os::unix::fs::MetadataExt;
    let owner = fs::metadata(ws.state_dir().join("status.json"))
        .unwrap()
        .uid();
    assert_eq!(owner, user.uid.as_raw());
}

/// Attack: the agent, still running, writes a root hook, and someone runs `hookvisor session
/// --user` as root. Root hooks never run beside the agent's processes; `--root-hooks none`
/// (or `HOOKVISOR_ROOT_HOOKS`) is honoured.
#[test]
fn session_as_root_runs_no_root_hook_while_the_agent_runs() {
    let Some(_one_at_a_time) = ensure_test_user() else {
        return;
    };
    let ws = Workspace::new();
    fs::set_permissions(ws.base(), fs::Permissions::from_mode(0o755)).unwrap();
    let pwned = ws.base().join("pwned");
    ws.hook(
        "05-agent.sh",
        "session",
        "run_as: root",
        &format!("id -u > {}", pwned.display()),
    );
    ws.hook("10-user.sh", "session", "", "true");
    // The ids are changed before `spawn` returns (setpriv would change them only after its
    // exec, perhaps after `session` had looked for the agent's processes).
    let user = test_user();
    let mut agent = Command::new("sleep")
        .arg("60")
        .uid(user.uid.as_raw())
        .gid(user.gid.as_raw())
        .spawn()
        .unwrap();
    let out = ws.hookvisor(&["session", "--user", "hv-test"]);
    agent.kill().unwrap();
    agent.wait().unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(!pwned.exists(), "a root hook ran beside the agent");
    let entry = &ws.status()["hooks"]["05-agent"];
    let note = entry["note"].as_str().unwrap_or_default();
    assert!(note.contains("processes of hv-test are running"), "{entry}");
    assert_eq!(ws.status()["hooks"]["10-user"]["lastResult"], "success");

    // No agent: `--root-hooks none` still keeps it from running.
    let out = ws
        .hookvisor_command()
        .args(["session", "--user", "hv-test"])
        .env("HOOKVISOR_ROOT_HOOKS", "none")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(!pwned.exists());
    let note = ws.status()["hooks"]["05-agent"]["note"].clone();
    assert!(
        note.as_str().unwrap().contains("--root-hooks none"),
        "{note}"
    );

    let out = ws.hookvisor(&["session", "--user", "hv-test"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&pwned).unwrap(), "0\n");
}

/// Attack: links planted in the agent's `.git/hooks` under the names the pre-commit installer
/// writes. Run as root, `session` used to install the git hook itself, writing through them.
#[test]
fn session_as_root_writes_nothing_into_the_agents_git_dir() {
    let Some(_one_at_a_time) = ensure_test_user() else {
        return;
    };
    let ws = Workspace::git();
    fs::set_permissions(ws.base(), fs::Permissions::from_mode(0o755)).unwrap();
    let victim = ws.base().join("victim");
    fs::write(&victim, "root's\n").unwrap();
    fs::set_permissions(&victim, fs::Permissions::from_mode(0o600)).unwrap();
    ws.hook("check.sh", "pre-commit", "", "true");
    let hooks = ws.path().join(".git/hooks");
    fs::create_dir_all(&hooks).unwrap();
    std::os::unix::fs::symlink(&victim, hooks.join("pre-commit")).unwrap();
    let out = ws
        .hookvisor_command()
        .args(["session", "--user", "hv-test"])
        .env("GIT_CONFIG_COUNT", "1")
        .env("GIT_CONFIG_KEY_0", "safe.directory")
        .env("GIT_CONFIG_VALUE_0", "*")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&victim).unwrap(), "root's\n");
    let mode = fs::metadata(&victim).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert!(
        fs::symlink_metadata(hooks.join("pre-commit"))
            .unwrap()
            .is_symlink()
    );
}

/// `session.start` hooks of the event model (a declarative `.yml`) run after the phase-1 ones
/// when `session` runs as the user, and never as root: as root it runs none and says so.
#[test]
fn session_start_event_hooks_run_as_the_user_and_never_as_root() {
    let Some(_one_at_a_time) = ensure_test_user() else {
        return;
    };
    let user = test_user();
    let ws = Workspace::new();
    fs::set_permissions(ws.base(), fs::Permissions::from_mode(0o755)).unwrap();
    ws.hook("10-user.sh", "session", "run_as: user", "id -u");
    ws.write(
        ".discobot/hooks/20-event.yml",
        "---\nevent: session.start\nrun: id -u\n---\n",
    );

    let as_root = ws.hookvisor(&["session", "--user", "hv-test"]);
    assert_eq!(as_root.status.code(), Some(1), "{}", stderr(&as_root));
    assert!(
        stderr(&as_root).contains("session.start event hooks not run: they never run as root"),
        "{}",
        stderr(&as_root)
    );
    assert!(!ws.state_dir().join("output/20-event.log").exists());

    // As the user: both run, the event hook after the phase-1 one.
    let chown = Command::new("chown")
        .args(["-R", "hv-test:hv-test"])
        .arg(ws.base())
        .status()
        .unwrap();
    assert!(chown.success());
    let mut cmd = ws.hookvisor_command();
    cmd.uid(user.uid.as_raw()).gid(user.gid.as_raw());
    let as_user = cmd.arg("session").output().unwrap();
    assert_eq!(as_user.status.code(), Some(0), "{}", stderr(&as_user));
    let said = String::from_utf8_lossy(&as_user.stdout);
    assert_eq!(
        said,
        "ok    10-user\nok    20-event\n",
        "{}",
        stderr(&as_user)
    );
    let log = fs::read_to_string(ws.state_dir().join("output/20-event.log")).unwrap();
    assert_eq!(log, format!("{}\n", user.uid));
}

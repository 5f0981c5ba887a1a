//! The privilege boundary, tried as the agent would: each test is an attack by CMD (or by a
//! user hook), running as the unprivileged test user under the real init as PID 1, and checks
//! that it gets nothing from root. Each one succeeded against hookvisor-init before 2026-11-23.
//!
//! Needs root (PID namespaces, `useradd`); with CI=true a test that cannot run fails.

// Test-only raw calls (pre_exec, kill); the product's unsafe lives in hookvisor-core's sys.rs.
#![allow(unsafe_code)]

use crate::common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use common::*;

/// The test user's uid and gid.
fn test_user() -> (u32, u32) {
    let user = nix::unistd::User::from_name("hv-test").unwrap().unwrap();
    (user.uid.as_raw(), user.gid.as_raw())
}

/// Gives `path` and everything under it to the test user, as a workspace checked out for the
/// agent is.
fn give_to_test_user(path: &Path) {
    let status = Command::new("chown")
        .args(["-R", "hv-test:hv-test"])
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

/// A root-owned directory the user cannot enter, holding one root-only file.
fn root_only_dir(w: &Workspace, name: &str) -> std::path::PathBuf {
    let dir = w.path(name);
    fs::create_dir(&dir).unwrap();
    fs::write(dir.join("secret"), "root's\n").unwrap();
    fs::set_permissions(dir.join("secret"), fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(&dir, fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// Runs one user hook and one root hook (`echo hello`, blocking) under the init with
/// `--user hv-test`; returns the exit code, what `root_only` holds afterwards, and stderr.
fn run_user_and_root_hook(
    w: &Workspace,
    root_only: &Path,
) -> (i32, Vec<std::ffi::OsString>, String) {
    w.hook("10-user.sh", "# blocking: true\n", "echo hello");
    w.hook(
        "20-root.sh",
        "# blocking: true\n# run_as: root\n",
        "echo hello",
    );
    let (code, _, err) = run(&w.args(&["--user", "hv-test", "--", "true"]));
    let made = fs::read_dir(root_only)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    (code, made, err)
}

fn run(args: &[&str]) -> (i32, String, String) {
    let out = pid1(args).output().unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Item 1: a root hook that said `blocking: false` used to run in the background after CMD
/// started, so CMD could rewrite it first. It now runs before CMD.
#[test]
fn cmd_cannot_swap_a_root_hook_that_is_not_blocking() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let w = Workspace::new();
    let pwned = w.path("pwned");
    w.hook("10-root.sh", "# run_as: root\n", "echo original");
    give_to_test_user(&w.ws);
    // CMD puts its own root hook in place, then waits until the hook has run (bounded).
    let evil = format!(
        "#!/bin/sh\n#---\n# type: session\n# run_as: root\n#---\nid -u > {}\n",
        pwned.display()
    );
    let hook = w.ws.join(".discobot/hooks/10-root.sh");
    let script = format!(
        "printf '%s' '{evil}' > {hook}.new && chmod +x {hook}.new && mv {hook}.new {hook}; \
         for i in $(seq 100); do grep -q '\"lastResult\": \"\\(success\\|failure\\)\"' \
         {status} 2>/dev/null && break; sleep 0.05; done",
        hook = hook.display(),
        status = w.state.join("status.json").display(),
    );
    let (code, _, err) = run(&w.args(&["--user", "hv-test", "--", "sh", "-c", &script]));
    assert_eq!(code, 0, "{err}");
    assert!(!pwned.exists(), "CMD's script ran as root: {err}");
    assert_eq!(w.log("10-root"), "original\n");
    assert!(
        err.contains("run before CMD starts, blocking: false notwithstanding"),
        "{err}"
    );
}

/// Item 1: a root hook runs from the bytes read when the init started, even when a user hook
/// before it rewrites the file; and what a user hook leaves running is killed before the next
/// hook starts, so it cannot rewrite anything later.
#[test]
fn a_root_hook_runs_the_bytes_read_at_start_and_user_leftovers_are_killed() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let w = Workspace::new();
    let pwned = w.path("pwned");
    let pid_file = w.ws.join("leftover.pid");
    let root_hook = w.ws.join(".discobot/hooks/20-root.sh");
    let evil = format!(
        "#!/bin/sh\n#---\n# type: session\n# run_as: root\n# blocking: true\n#---\nid -u > {}\n",
        pwned.display()
    );
    w.hook(
        "10-user.sh",
        "# blocking: true\n",
        &format!(
            "printf '%s' '{evil}' > {root}.new && chmod +x {root}.new && mv {root}.new {root}\n\
             setsid sh -c 'echo $$ > {pid}; exec sleep 1000' </dev/null >/dev/null 2>&1 &\n\
             while [ ! -s {pid} ]; do :; done",
            root = root_hook.display(),
            pid = pid_file.display(),
        ),
    );
    w.hook(
        "20-root.sh",
        "# blocking: true\n# run_as: root\n",
        &format!(
            "echo \"original, as $(id -u), \\$0 is $0, path $HOOKVISOR_HOOK_PATH\"\n\
             if kill -0 \"$(cat {})\" 2>/dev/null; then echo leftover alive; fi",
            pid_file.display()
        ),
    );
    give_to_test_user(&w.ws);
    let (code, _, err) = run(&w.args(&["--user", "hv-test", "--", "true"]));
    assert_eq!(code, 0, "{err}");
    assert!(!pwned.exists(), "the rewritten hook ran as root: {err}");
    let log = w.log("20-root");
    assert!(log.starts_with("original, as 0, $0 is /dev/fd/"), "{log}");
    assert!(
        log.contains(&format!("path {}", root_hook.display())),
        "{log}"
    );
    assert!(!log.contains("leftover alive"), "{log}");
    let user_log = w.log("10-user");
    assert!(
        user_log.contains("process(es) the hook left running]"),
        "log {user_log:?}; stderr {err}"
    );
}

/// `--root-hooks owned` runs a root hook only when the user can write neither the file nor a
/// directory above it; `none` runs none. Either way the refusal is recorded.
#[test]
fn root_hooks_policy_owned_and_none() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let w = Workspace::new();
    w.hook("10-root.sh", "# blocking: true\n# run_as: root\n", "id -u");
    // Root's workspace, closed to the user: `owned` runs it.
    let (code, _, err) =
        run(&w.args(&["--user", "hv-test", "--root-hooks", "owned", "--", "true"]));
    assert_eq!(code, 0, "{err}");
    assert_eq!(w.log("10-root"), "0\n");

    // The agent's workspace: `owned` refuses, and says why.
    give_to_test_user(&w.ws);
    let (code, _, err) =
        run(&w.args(&["--user", "hv-test", "--root-hooks", "owned", "--", "true"]));
    assert_eq!(code, 0, "{err}");
    let entry = &w.status()["hooks"]["10-root"];
    assert_eq!(entry["lastResult"], "failure", "{entry}");
    let note = entry["note"].as_str().unwrap();
    assert!(
        note.contains("--root-hooks owned") && note.contains("hv-test"),
        "{note}"
    );
    assert_eq!(entry["runCount"], 2, "{entry}");

    let (code, _, err) = run(&w.args(&["--user", "hv-test", "--root-hooks", "none", "--", "true"]));
    assert_eq!(code, 0, "{err}");
    let entry = &w.status()["hooks"]["10-root"];
    assert!(
        entry["note"]
            .as_str()
            .unwrap()
            .contains("--root-hooks none"),
        "{entry}"
    );
}

/// Item 2: the state dir used to be chowned to the user recursively at exit, through whatever
/// links CMD had put on its path. Nothing is chowned now.
#[test]
fn no_chown_follows_a_link_cmd_put_on_the_state_path() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let w = Workspace::new();
    let (uid, gid) = test_user();
    let home = w.path("home");
    fs::create_dir(&home).unwrap();
    nix::unistd::chown(&home, Some(uid.into()), Some(gid.into())).unwrap();
    let state = home.join("session/hooks");
    // Root's directory, shaped like a state dir, that CMD will link the session to.
    let target = w.path("root-dir");
    fs::create_dir_all(target.join("hooks")).unwrap();
    fs::write(target.join("hooks/secret"), "root's\n").unwrap();
    w.hook("10-user.sh", "# blocking: true\n", "true");
    let script = format!(
        "mv {home}/session {home}/old && ln -s {target} {home}/session",
        home = home.display(),
        target = target.display()
    );
    let (code, _, err) = run(&[
        "--workspace",
        w.ws.to_str().unwrap(),
        "--state-dir",
        state.to_str().unwrap(),
        "--user",
        "hv-test",
        "--",
        "sh",
        "-c",
        &script,
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        fs::symlink_metadata(home.join("session"))
            .unwrap()
            .is_symlink(),
        "CMD could not link the session: {err}"
    );
    for path in ["", "hooks", "hooks/secret"] {
        let meta = fs::symlink_metadata(target.join(path)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (0, 0), "{path} was given away");
    }
}

/// Item 3: links the agent planted in its state dir before the init started: `output/` to a
/// root-only directory, and a dangling `status.json.lock`. Root used to create files through
/// both (and give the log to the user).
#[test]
fn root_writes_nothing_through_links_planted_in_the_state_dir() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let w = Workspace::new();
    let (uid, gid) = test_user();
    let root_only = root_only_dir(&w, "root-only");
    fs::create_dir(&w.state).unwrap();
    std::os::unix::fs::symlink(&root_only, w.state.join("output")).unwrap();
    let created_by_root = w.path("lock-target");
    std::os::unix::fs::symlink(&created_by_root, w.state.join("status.json.lock")).unwrap();
    nix::unistd::chown(&w.state, Some(uid.into()), Some(gid.into())).unwrap();
    let (code, made, err) = run_user_and_root_hook(&w, &root_only);
    assert_eq!(code, 0, "{err}");
    assert_eq!(
        made,
        ["secret"],
        "root wrote into a directory the agent pointed at"
    );
    assert!(!created_by_root.exists(), "root created the lock's target");
}

/// The state dir and `output/` are made only when a first open finds them missing (case 7's
/// bookkeeping). A dangling link the agent plants in their place, pointing into a directory
/// only root can write, must not become a directory there: neither for the log (`output/`)
/// nor for status.json (the whole state dir).
#[test]
fn root_makes_no_directory_through_a_dangling_link_planted_for_a_missing_one() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let (uid, gid) = test_user();
    for planted in ["output", "state"] {
        let w = Workspace::new();
        let root_only = root_only_dir(&w, "root-only");
        let target = root_only.join("made");
        if planted == "output" {
            fs::create_dir(&w.state).unwrap();
            std::os::unix::fs::symlink(&target, w.state.join("output")).unwrap();
            nix::unistd::chown(&w.state, Some(uid.into()), Some(gid.into())).unwrap();
        } else {
            std::os::unix::fs::symlink(&target, &w.state).unwrap();
        }
        let (_, made, err) = run_user_and_root_hook(&w, &root_only);
        assert_eq!(
            made,
            ["secret"],
            "{planted}: root made a directory where the agent's link pointed; stderr {err}"
        );
    }
}

/// Item 4: `status.json` linked to a root-only JSON file holding a secret: root used to read
/// it, keep its unknown fields and write them into a status.json the agent can read.
#[test]
fn root_reads_nothing_through_a_status_link() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let w = Workspace::new();
    let (uid, gid) = test_user();
    let secret = w.path("secret.json");
    fs::write(&secret, r#"{"hooks": {}, "apiKey": "TOPSECRET"}"#).unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    fs::create_dir(&w.state).unwrap();
    std::os::unix::fs::symlink(&secret, w.state.join("status.json")).unwrap();
    nix::unistd::chown(&w.state, Some(uid.into()), Some(gid.into())).unwrap();
    w.hook("10-root.sh", "# blocking: true\n# run_as: root\n", "true");
    let (code, _, err) = run(&w.args(&["--user", "hv-test", "--", "true"]));
    assert_eq!(code, 0, "{err}");
    for entry in fs::read_dir(&w.state).unwrap() {
        let path = entry.unwrap().path();
        if fs::symlink_metadata(&path).unwrap().is_file() {
            let text = fs::read_to_string(&path).unwrap_or_default();
            assert!(
                !text.contains("TOPSECRET"),
                "{} holds the secret",
                path.display()
            );
        }
    }
    assert_eq!(fs::metadata(&secret).unwrap().uid(), 0);
}

/// Low: a hook's output echoed by the init cannot rewrite the terminal.
#[test]
fn echoed_hook_output_carries_no_escape_sequences() {
    if !namespaces() {
        return;
    }
    let w = Workspace::new();
    w.hook(
        "10-noisy.sh",
        "# blocking: true\n",
        r"printf '\033]0;owned\007visible\033[2J\033[1;31m red\r\n'",
    );
    let (code, _, err) = run(&w.args(&["--", "true"]));
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("[10-noisy] visible red\n"), "{err:?}");
    assert!(!err.contains('\u{1b}'), "{err:?}");
}

/// Low: on a full disk, a session hook that succeeded but could not be recorded says so.
#[test]
fn a_success_that_cannot_be_recorded_is_reported() {
    if !namespaces() {
        return;
    }
    let w = Workspace::new();
    fs::create_dir(&w.state).unwrap();
    w.hook("10-fine.sh", "# blocking: true\n", "true");
    // A tiny file system for the state dir, filled once the init has prepared it.
    let args = w.args(&["--", "true"]);
    let fill = format!(
        "mount -t tmpfs -o size=64k tmpfs {state} && \
         dd if=/dev/zero of={state}/filler bs=1k count=60 2>/dev/null; \
         exec unshare --pid --fork --mount-proc --kill-child {init} \"$@\"",
        state = w.state.display(),
        init = INIT,
    );
    let mut command = Command::new("unshare");
    command
        .args(["--mount", "sh", "-c", &fill, "sh"])
        .args(&args);
    let out = command.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
    assert!(
        err.contains("session hook \"10-fine\" succeeded; not recorded"),
        "{err}"
    );
}

/// Item 7 (PID 1 never waits on the agent): CMD holds the status lock, so a background session
/// runner waits for it, and dies. The init used to record the runner's hook itself, waiting for
/// the lock, and so stopped forwarding signals: TERM never reached CMD, which never let go.
#[test]
fn pid1_keeps_forwarding_signals_while_the_agent_holds_the_status_lock() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let w = Workspace::new();
    let started = w.path("bg-started");
    let locked = w.path("locked");
    fs::create_dir(&w.state).unwrap();
    let (uid, gid) = test_user();
    nix::unistd::chown(&w.state, Some(uid.into()), Some(gid.into())).unwrap();
    fs::set_permissions(w.path(""), fs::Permissions::from_mode(0o777)).unwrap();
    w.hook(
        "10-bg.sh",
        "",
        &format!("touch {}; exec sleep 1000", started.display()),
    );
    let script = format!(
        "exec flock {lock} sh -c 'touch {locked}; exec sleep 1000'",
        lock = w.state.join("status.json.lock").display(),
        locked = locked.display()
    );
    let init = Running::start(pid1(&w.args(&[
        "--user", "hv-test", "--grace", "2", "--", "sh", "-c", &script,
    ])));
    // The background runner now waits for the lock CMD holds.
    wait_for_file(&locked);
    let runner = poll(
        || {
            children_of(init.init_pid()).into_iter().find(|&pid| {
                fs::read_to_string(format!("/proc/{pid}/comm"))
                    .is_ok_and(|comm| comm.trim() == "hookvisor-init")
            })
        },
        "the session runner",
    );
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(runner, libc::SIGKILL) }, 0);
    init.signal(libc::SIGTERM);
    let (status, _, err) = init.finish();
    assert_eq!(code(status), 128 + libc::SIGTERM, "{err}");
}

/// A hook file linked to a root-only file: the init read it as root and quoted its lines in a
/// front matter error. It reads the hooks dir with the user's credentials now.
#[test]
fn a_hook_linked_to_a_root_only_file_reveals_nothing() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let w = Workspace::new();
    let secret = w.path("secret");
    fs::write(&secret, "#!/bin/sh\n---\nAPI_TOKEN=hunter2-secret\n---\n").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    std::os::unix::fs::symlink(&secret, w.ws.join(".discobot/hooks/05-leak.sh")).unwrap();
    w.hook("10-user.sh", "# blocking: true\n", "true");
    give_to_test_user(&w.ws);
    let (code, _, err) = run(&w.args(&["--user", "hv-test", "--", "true"]));
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("hunter2"), "{err}");
    assert!(
        err.contains("05-leak.sh"),
        "the file is still reported: {err}"
    );
}

/// `session.start` hooks of the event model (a declarative `.yml`) run as the user, never as
/// root: the awaited one before CMD starts, the other beside it; one that asks for root is a
/// problem and does not run at all.
#[test]
fn session_start_event_hooks_run_as_the_user_and_never_as_root() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let w = Workspace::new();
    let awaited = w.ws.join("awaited");
    let background = w.ws.join("background");
    let rooted = w.ws.join("rooted");
    let yml = |name: &str, front: &str| {
        fs::write(
            w.ws.join(".discobot/hooks").join(name),
            format!("---\nevent: session.start\n{front}\n---\n"),
        )
        .unwrap();
    };
    yml(
        "20-awaited.yml",
        &format!(
            "await: true\nrun: 'id -u > {0}.tmp; echo \"$HOME\" >> {0}.tmp; mv {0}.tmp {0}'",
            awaited.display()
        ),
    );
    yml(
        "30-background.yml",
        &format!("await: false\nrun: 'id -u > {}'", background.display()),
    );
    yml(
        "40-rooted.yml",
        &format!("run_as: root\nrun: 'id -u > {}'", rooted.display()),
    );
    // A phase-1 root hook runs first, as root, in the same runner that then drops root.
    w.hook("10-root.sh", "# run_as: root\n# blocking: true\n", "id -u");
    give_to_test_user(&w.ws);
    // CMD sees the awaited hook's file at once, and waits (bounded) for the background one.
    let script = format!(
        "test -s {awaited} || {{ echo 'CMD started before the awaited hook' >&2; exit 9; }}; \
         for i in $(seq 200); do test -s {background} && break; sleep 0.05; done",
        awaited = awaited.display(),
        background = background.display(),
    );
    let (code, _, err) = run(&w.args(&["--user", "hv-test", "--", "sh", "-c", &script]));
    assert_eq!(code, 0, "{err}");
    let (uid, _) = test_user();
    let home = nix::unistd::User::from_name("hv-test")
        .unwrap()
        .unwrap()
        .dir;
    assert_eq!(
        fs::read_to_string(&awaited).unwrap(),
        format!("{uid}\n{}\n", home.display())
    );
    assert_eq!(fs::read_to_string(&background).unwrap(), format!("{uid}\n"));
    assert!(!rooted.exists(), "a run_as: root event hook ran: {err}");
    assert!(
        err.contains("40-rooted.yml:3: run_as: root is for phase-1 hooks ("),
        "{err}"
    );
    assert_eq!(w.log("10-root"), "0\n");
    let status = w.status();
    assert_eq!(status["hooks"]["20-awaited"]["event"], "session.start");
    assert_eq!(status["hooks"]["20-awaited"]["lastResult"], "success");
}

/// The attack on the drop itself: a `session.start` event hook, run by the runner that ran a
/// root hook just before, reads its own credentials. Every uid and gid slot (real, effective,
/// saved, file-system) is the user's, no supplementary group is root's, and it holds no
/// capability, not even a permitted or ambient one it could raise.
#[test]
fn a_session_start_event_hook_keeps_nothing_of_root() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let w = Workspace::new();
    let seen = w.ws.join("creds");
    fs::write(
        w.ws.join(".discobot/hooks/20-creds.yml"),
        format!(
            "---\nevent: session.start\nawait: true\nrun: 'grep -E \"^(Uid|Gid|Groups|CapInh|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):\" /proc/self/status > {0}.tmp; mv {0}.tmp {0}'\n---\n",
            seen.display()
        ),
    )
    .unwrap();
    w.hook("10-root.sh", "# run_as: root\n# blocking: true\n", "true");
    give_to_test_user(&w.ws);
    let (code, _, err) = run(&w.args(&["--user", "hv-test", "--", "true"]));
    assert_eq!(code, 0, "{err}");
    let status = fs::read_to_string(&seen).unwrap_or_else(|e| panic!("{e}: {err}"));
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .map(|v| v.split_whitespace().collect::<Vec<_>>())
            .unwrap_or_default()
    };
    let (uid, gid) = test_user();
    assert_eq!(field("Uid"), vec![uid.to_string().as_str(); 4], "{status}");
    assert_eq!(field("Gid"), vec![gid.to_string().as_str(); 4], "{status}");
    assert!(!field("Groups").contains(&"0"), "{status}");
    for caps in ["CapInh", "CapPrm", "CapEff", "CapAmb"] {
        assert_eq!(field(caps), ["0000000000000000"], "{caps}: {status}");
    }
}

/// A descriptor the init inherited (root's: here `/etc/shadow`, as a runtime might leak one)
/// reaches no code of the agent's: not through `hookvisor init-pass`, whose unawaited
/// `session.start` spawn starts the workspace's argv, as the user, as a detached child.
#[test]
fn no_descriptor_the_init_inherited_reaches_a_spawned_child() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let w = Workspace::new();
    let seen = w.ws.join("fds");
    fs::write(
        w.ws.join(".discobot/hooks/20-spawn.yml"),
        format!(
            "---\nevent: session.start\nawait: false\naction: spawn\nargv: [sh, -c, 'ls /proc/self/fd > {0}.tmp; mv {0}.tmp {0}']\n---\n",
            seen.display()
        ),
    )
    .unwrap();
    give_to_test_user(&w.ws);
    let script = format!("until [ -e {} ]; do sleep 0.01; done", seen.display());
    let out = Command::new("sh")
        .arg("-c")
        .arg(r#"exec 7</etc/shadow; exec "$@""#)
        .arg("sh")
        .arg("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--kill-child", INIT])
        .args(w.args(&[
            "--user", "hv-test", "--", "timeout", "20", "sh", "-c", &script,
        ]))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    // Its stdin, stdout (the file), stderr (its log), and `ls`'s handle on the directory.
    assert_eq!(fs::read_to_string(&seen).unwrap(), "0\n1\n2\n3\n", "{err}");
}

/// A user hook leaves behind what passes for hookvisor's detached runner of an unawaited hook
/// (the very executable, `… fire EVENT --deliver HOOK`, out of the hook's group and without
/// its run marker), which runs a hook of the workspace as the agent. The pass kills it with
/// the rest of the hook's leftovers: no code of the agent's runs beside the root hook after it.
#[test]
fn a_user_hook_cannot_leave_a_deliver_runner_beside_a_root_hook() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let w = Workspace::new();
    let hookvisor = Path::new(INIT).with_file_name("hookvisor");
    let ticks = w.ws.join("ticks");
    let event = w.ws.join("event.json");
    let seen = w.path("seen");
    fs::write(&event, "{}").unwrap();
    fs::write(
        w.ws.join(".discobot/hooks/loop.yml"),
        format!(
            "---\nevent: task.complete\nawait: false\ntimeout: 60\nrun: 'while :; do echo >> {}; sleep 0.01; done'\n---\n",
            ticks.display()
        ),
    )
    .unwrap();
    w.hook(
        "10-user.sh",
        "# blocking: true\n",
        &format!(
            "env -u HOOKVISOR_RUN setsid {} --workspace {} --state-dir {} --session test \
             fire task.complete --deliver loop < {} > /dev/null 2>&1 &\n\
             until [ -s {t} ]; do sleep 0.01; done",
            hookvisor.display(),
            w.ws.display(),
            w.state.display(),
            event.display(),
            t = ticks.display()
        ),
    );
    w.hook(
        "20-root.sh",
        "# blocking: true\n# run_as: root\n# retries: 0\n",
        &format!(
            "a=$(wc -l < {t}); sleep 0.3; b=$(wc -l < {t}); echo $a $b > {}",
            seen.display(),
            t = ticks.display()
        ),
    );
    give_to_test_user(&w.ws);
    let (code, _, err) = run(&w.args(&["--user", "hv-test", "--", "true"]));
    assert_eq!(code, 0, "{err}");
    let seen = fs::read_to_string(&seen).unwrap_or_else(|e| panic!("{e}: {err}"));
    let counts: Vec<&str> = seen.split_whitespace().collect();
    assert_eq!(counts.len(), 2, "{seen}");
    assert_eq!(
        counts[0], counts[1],
        "the agent's loop ran beside the root hook: {err}"
    );
}

/// Issue 31: a workspace another uid owns (a container's volume) is the user's to work in with
/// git (CMD, `hookvisor eval`, a user hook), through `safe.directory` in their environment
/// only; root's git keeps refusing a workspace the user owns, so the agent's `.git/config`
/// never runs as root.
#[test]
fn the_users_git_trusts_the_workspace_and_roots_does_not() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let hookvisor = Path::new(env!("CARGO_BIN_EXE_hookvisor-init")).with_file_name("hookvisor");
    // Root's repository, open to the user: their git refused it before.
    let w = Workspace::new();
    hookvisor_testkit::git(&w.ws, &["init", "-q"]);
    fs::set_permissions(&w.ws, fs::Permissions::from_mode(0o777)).unwrap();
    w.hook(
        "10-user.sh",
        "# blocking: true\n",
        "git status --porcelain >/dev/null && echo user-git-ok",
    );
    let script = format!(
        "cd {} && git status --porcelain >/dev/null && echo cmd-git-ok && {} eval && echo eval-ok",
        w.ws.display(),
        hookvisor.display()
    );
    let (code, out, err) = run(&w.args(&["--user", "hv-test", "--", "sh", "-c", &script]));
    assert_eq!(code, 0, "stdout {out}; stderr {err}");
    assert!(
        out.contains("cmd-git-ok") && out.contains("eval-ok"),
        "{out} {err}"
    );
    assert!(
        w.log("10-user").contains("user-git-ok"),
        "{}",
        w.log("10-user")
    );

    // The user's repository: a root hook's git still refuses it.
    let w = Workspace::new();
    hookvisor_testkit::git(&w.ws, &["init", "-q"]);
    w.hook(
        "10-root.sh",
        "# blocking: true\n# run_as: root\n",
        "git status --porcelain && echo root-git-ran",
    );
    give_to_test_user(&w.ws);
    let (code, _, err) = run(&w.args(&["--user", "hv-test", "--", "true"]));
    assert_eq!(code, 0, "{err}");
    let log = w.log("10-root");
    assert!(
        !log.contains("root-git-ran") && log.contains("dubious ownership"),
        "{log}"
    );
}

//! The init and global hooks (docs/EVENTS.md §2.1): the global hooks directory is the user's, which
//! the agent can write, so the init never reads it; a `run_as: root` hook there must never run
//! as root, whichever way the directory is named (the user's home, `$XDG_CONFIG_HOME`,
//! `$HOOKVISOR_GLOBAL_HOOKS` in the init's environment).
//!
//! Needs root (PID namespaces, `useradd`); with CI=true a test that cannot run fails.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::*;

/// Writes a blocking session hook `file` into `dir` that records its uid in `marker`.
fn session_hook(dir: &Path, file: &str, run_as: &str, marker: &Path) {
    fs::create_dir_all(dir).unwrap();
    let path = dir.join(file);
    fs::write(
        &path,
        format!(
            "#!/bin/sh\n#---\n# type: session\n# blocking: true\n# run_as: {run_as}\n#---\n\
             id -u > '{}'\n",
            marker.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// Removes the hooks this test put into the test user's real home, whatever happens.
struct Cleanup(Vec<PathBuf>);

impl Drop for Cleanup {
    fn drop(&mut self) {
        for path in &self.0 {
            let _ = fs::remove_file(path);
        }
    }
}

#[test]
fn the_init_never_runs_a_global_hook_and_never_as_root() {
    if !namespaces() || ensure_test_user().is_none() {
        return;
    }
    let w = Workspace::new();
    let user = nix::unistd::User::from_name("hv-test").unwrap().unwrap();
    let home_dir = user.dir.join(".config/hookvisor/hooks");
    let xdg = w.path("xdg");
    let pointed = w.path("pointed");
    // A unique name in the shared home, so that runs of this test never meet.
    let unique = format!("hv-init-test-{}.sh", std::process::id());
    let mut planted = Vec::new();
    for (n, dir) in [&home_dir, &xdg.join("hookvisor/hooks"), &pointed]
        .into_iter()
        .enumerate()
    {
        session_hook(
            dir,
            &format!("root-{unique}"),
            "root",
            &w.path(&format!("root-{n}")),
        );
        session_hook(
            dir,
            &format!("user-{unique}"),
            "user",
            &w.path(&format!("user-{n}")),
        );
        planted.push(dir.join(format!("root-{unique}")));
        planted.push(dir.join(format!("user-{unique}")));
    }
    let _cleanup = Cleanup(planted);
    // The workspace's own root hook runs: hooks did run, just not the global ones.
    let ran = w.path("workspace-root");
    w.hook(
        "setup.sh",
        "# blocking: true\n# run_as: root\n",
        &format!("id -u > '{}'", ran.display()),
    );

    let mut command = pid1(&w.args(&["--user", "hv-test", "--", "true"]));
    command
        .env("XDG_CONFIG_HOME", &xdg)
        .env("HOOKVISOR_GLOBAL_HOOKS", &pointed);
    let out = command.output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(code(out.status), 0, "{err}");
    assert_eq!(fs::read_to_string(&ran).unwrap(), "0\n", "{err}");
    for n in 0..3 {
        for kind in ["root", "user"] {
            let marker = w.path(&format!("{kind}-{n}"));
            assert!(!marker.exists(), "a global {kind} hook ran: {err}");
        }
    }
    let status = w.status();
    let ids: Vec<&String> = status["hooks"].as_object().unwrap().keys().collect();
    assert_eq!(ids, ["setup"], "{status}");
}

//! `scripts/bench.sh` runs binaries and hooks from its scratch dir, as root when it installs
//! tools, and that dir's default path (`/tmp/hookvisor-bench`) is one anybody can guess. Planted
//! beforehand as a link, as a directory others can write, or as somebody else's directory, it
//! must be refused before anything is written into it or run from it.

use std::fs;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bench(scratch: &Path) -> Output {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/bench.sh");
    Command::new("bash")
        .arg(script)
        .arg("7")
        .env("HOOKVISOR_BENCH_DIR", scratch)
        .output()
        .expect("run scripts/bench.sh")
}

fn refused(scratch: &Path, why: &str) {
    let out = bench(scratch);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains(why), "{err}");
    assert!(
        !err.contains("scripts/build-release.sh"),
        "it went on to build: {err}"
    );
}

fn empty(dir: &Path) -> bool {
    fs::read_dir(dir).unwrap().next().is_none()
}

/// The attacker's directory the planted link points to stays untouched.
#[test]
fn a_scratch_dir_planted_as_a_link_is_refused_and_its_target_left_alone() {
    let base = tempfile::tempdir().unwrap();
    let theirs = base.path().join("theirs");
    fs::create_dir(&theirs).unwrap();
    let planted = base.path().join("hookvisor-bench");
    symlink(&theirs, &planted).unwrap();
    refused(&planted, "is a symbolic link");
    assert!(empty(&theirs), "the script wrote into the link's target");
}

#[test]
fn a_scratch_dir_others_can_write_is_refused() {
    let base = tempfile::tempdir().unwrap();
    let open: PathBuf = base.path().join("hookvisor-bench");
    fs::create_dir(&open).unwrap();
    for mode in [0o777, 0o1777, 0o775, 0o757] {
        fs::set_permissions(&open, fs::Permissions::from_mode(mode)).unwrap();
        refused(&open, "can be written by others");
    }
    assert!(empty(&open));
}

#[test]
fn a_scratch_path_that_is_a_file_is_refused() {
    let base = tempfile::tempdir().unwrap();
    let file = base.path().join("hookvisor-bench");
    fs::write(&file, "").unwrap();
    refused(&file, "is not a directory");
}

/// Root (as CI runs the script) must not take a directory another user made.
#[test]
fn a_scratch_dir_of_another_user_is_refused_by_root() {
    if !nix::unistd::Uid::effective().is_root() {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI runs as root and must run this test"
        );
        return;
    }
    let base = tempfile::tempdir().unwrap();
    let theirs = base.path().join("hookvisor-bench");
    fs::create_dir(&theirs).unwrap();
    fs::set_permissions(&theirs, fs::Permissions::from_mode(0o755)).unwrap();
    // nobody, as Debian numbers it.
    nix::unistd::chown(&theirs, Some(nix::unistd::Uid::from_raw(65534)), None).unwrap();
    refused(&theirs, "belongs to uid 65534");
    assert!(empty(&theirs));
}

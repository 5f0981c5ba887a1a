//! `hookvisor pre-commit install|uninstall|run` through real `git commit`s.

use crate::common;

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use common::{Workspace, check, stderr};

/// A hook body that appends its files (space-joined, then the NUL list) to `$HV_TEST_OUT`.
const RECORD_FILES: &str = r#"printf '%s|%s\n' "$DISCOBOT_CHANGED_FILES" "$(tr '\0' ':' < "$HOOKVISOR_CHANGED_FILES_NUL")" >> "$HV_TEST_OUT""#;

fn install(ws: &Workspace) -> String {
    check(
        ws.hookvisor(&["pre-commit", "install"]),
        "pre-commit install",
    )
}

/// A repository with one commit, so that a blocked commit leaves HEAD where it was.
fn repo_with_commit() -> Workspace {
    let ws = Workspace::git();
    ws.stage("README.md", "hello\n");
    check(ws.commit("initial"), "initial commit");
    ws
}

fn head(ws: &Workspace) -> String {
    ws.git_ok(&["rev-parse", "HEAD"])
}

fn out_file(ws: &Workspace) -> PathBuf {
    ws.base().join("hook-out")
}

fn commit_recording(ws: &Workspace, dir: &Path, message: &str) -> std::process::Output {
    let out = out_file(ws);
    ws.commit_in(dir, message, &[("HV_TEST_OUT", out.to_str().unwrap())])
}

fn recorded(ws: &Workspace) -> String {
    fs::read_to_string(out_file(ws)).unwrap_or_default()
}

fn git_hook_path(ws: &Workspace) -> PathBuf {
    ws.path().join(".git/hooks/pre-commit")
}

#[test]
fn clean_commit_passes_and_the_hook_sees_the_staged_files() {
    let ws = repo_with_commit();
    ws.hook("check.sh", "pre-commit", "name: Check", RECORD_FILES);
    let said = install(&ws);
    assert!(
        said.contains(&git_hook_path(&ws).display().to_string()),
        "install must say where: {said}"
    );
    ws.stage("src/a.rs", "fn a() {}\n");
    ws.stage("b.txt", "b\n");
    let out = commit_recording(&ws, ws.path(), "two files");
    check(out, "commit");
    assert_eq!(recorded(&ws), "b.txt src/a.rs|b.txt:src/a.rs:\n");
    assert_eq!(ws.git_ok(&["log", "-1", "--format=%s"]), "two files\n");
}

#[test]
fn failing_hook_blocks_the_commit_and_shows_its_output() {
    let ws = repo_with_commit();
    ws.hook(
        "lint.sh",
        "pre-commit",
        "name: Lint things",
        "echo \"lint: $DISCOBOT_CHANGED_FILES is badly formatted\"\necho to-stderr >&2\nexit 3",
    );
    install(&ws);
    let before = head(&ws);
    ws.stage("bad.rs", "fn  x(){}\n");
    let out = ws.commit("should not land");
    assert!(!out.status.success(), "the commit must be blocked");
    let err = stderr(&out);
    assert!(
        err.contains("\"Lint things\" failed with exit code 3"),
        "{err}"
    );
    assert!(err.contains("lint: bad.rs is badly formatted"), "{err}");
    assert!(err.contains("to-stderr"), "{err}");
    assert!(err.contains("HOOKVISOR_SKIP=lint"), "{err}");
    assert_eq!(head(&ws), before);

    // Run directly, the command exits with the hook's own code.
    let run = ws.hookvisor(&["pre-commit", "run"]);
    assert_eq!(run.status.code(), Some(3), "{}", stderr(&run));
}

#[test]
fn hooks_run_in_file_name_order_and_stop_at_the_first_failure() {
    let ws = repo_with_commit();
    let log = ws.base().join("order");
    let append = |tag: &str| format!("echo {tag} >> '{}'", log.display());
    ws.hook("10-first.sh", "pre-commit", "", &append("first"));
    ws.hook(
        "20-second.sh",
        "pre-commit",
        "",
        &format!("{}\nexit 1", append("second")),
    );
    ws.hook("30-third.sh", "pre-commit", "", &append("third"));
    ws.hook("05-file.sh", "file", "pattern: '*'", &append("file hook"));
    install(&ws);
    ws.stage("x", "x\n");
    assert!(!ws.commit("x").status.success());
    assert_eq!(fs::read_to_string(&log).unwrap(), "first\nsecond\n");
}

#[test]
fn status_json_records_every_run_with_its_exit_code() {
    let ws = repo_with_commit();
    let flag = ws.base().join("fail-now");
    ws.hook(
        "gate.sh",
        "pre-commit",
        "name: Gate",
        &format!(
            "echo gate ran\n[ -e '{}' ] && exit 7\nexit 0",
            flag.display()
        ),
    );
    install(&ws);
    ws.stage("one", "1\n");
    check(ws.commit("one"), "first commit");
    fs::write(&flag, "").unwrap();
    ws.stage("two", "2\n");
    assert!(!ws.commit("two").status.success());

    let status = ws.status();
    let gate = &status["hooks"]["gate"];
    assert_eq!(gate["type"], "pre-commit");
    assert_eq!(gate["hookName"], "Gate");
    assert_eq!(gate["runCount"], 2);
    assert_eq!(gate["failCount"], 1);
    assert_eq!(gate["consecutiveFailures"], 1);
    assert_eq!(gate["lastExitCode"], 7);
    assert_eq!(gate["lastResult"], "failure");
    let log = gate["outputPath"].as_str().unwrap();
    assert!(fs::read_to_string(log).unwrap().contains("gate ran"));
}

#[test]
fn a_foreign_hook_is_chained_and_restored_byte_for_byte() {
    let ws = repo_with_commit();
    let original_text = "#!/bin/sh\n# someone else's hook\necho original ran >> \"$HV_TEST_OUT\"\n[ -e fail-original ] && { echo original says no; exit 5; }\nexit 0\n";
    let hook = git_hook_path(&ws);
    fs::write(&hook, original_text).unwrap();
    fs::set_permissions(&hook, fs::Permissions::from_mode(0o750)).unwrap();
    ws.hook(
        "ours.sh",
        "pre-commit",
        "",
        "echo ours ran >> \"$HV_TEST_OUT\"",
    );

    let said = install(&ws);
    assert!(said.contains("pre-commit.original"), "{said}");
    ws.stage("a", "a\n");
    check(
        commit_recording(&ws, ws.path(), "a"),
        "commit with both hooks",
    );
    assert_eq!(recorded(&ws), "original ran\nours ran\n");

    // Its failure blocks the commit before ours runs.
    ws.write("fail-original", "");
    ws.stage("b", "b\n");
    let out = commit_recording(&ws, ws.path(), "b");
    assert!(!out.status.success());
    assert!(
        stderr(&out).contains("original says no"),
        "{}",
        stderr(&out)
    );
    assert_eq!(recorded(&ws), "original ran\nours ran\noriginal ran\n");

    let said = check(ws.hookvisor(&["pre-commit", "uninstall"]), "uninstall");
    assert!(said.contains("put back the original"), "{said}");
    assert_eq!(fs::read_to_string(&hook).unwrap(), original_text);
    assert_eq!(
        fs::metadata(&hook).unwrap().permissions().mode() & 0o7777,
        0o750
    );
    assert!(!hook.with_file_name("pre-commit.original").exists());

    // A second uninstall leaves the foreign hook alone.
    let said = check(
        ws.hookvisor(&["pre-commit", "uninstall"]),
        "uninstall again",
    );
    assert!(said.contains("not hookvisor's"), "{said}");
    assert_eq!(fs::read_to_string(&hook).unwrap(), original_text);
}

#[test]
fn reinstall_is_idempotent_and_never_chains_to_itself() {
    let ws = repo_with_commit();
    ws.hook("h.sh", "pre-commit", "", "exit 0");
    install(&ws);
    let hook = git_hook_path(&ws);
    let first = fs::read(&hook).unwrap();
    assert!(install(&ws).contains("already installed"));
    assert_eq!(fs::read(&hook).unwrap(), first);

    // Another state dir rewrites ours in place, still without an original.
    let other = ws.base().join("other-state");
    let out = ws.hookvisor(&[
        "--state-dir",
        other.to_str().unwrap(),
        "pre-commit",
        "install",
    ]);
    assert!(check(out, "install elsewhere").contains("updated"));
    assert_ne!(fs::read(&hook).unwrap(), first);
    assert!(!hook.with_file_name("pre-commit.original").exists());
    assert!(fs::metadata(&hook).unwrap().permissions().mode() & 0o111 != 0);

    let said = check(ws.hookvisor(&["pre-commit", "uninstall"]), "uninstall");
    assert!(said.contains("removed"), "{said}");
    assert!(!hook.exists());
}

#[test]
fn only_hooks_whose_pattern_matches_a_staged_file_run() {
    let ws = repo_with_commit();
    ws.hook(
        "rust.sh",
        "pre-commit",
        "pattern: '*.rs'",
        "echo rust hook ran; exit 1",
    );
    ws.hook("docs.sh", "pre-commit", "pattern: 'docs/**'", RECORD_FILES);
    install(&ws);

    ws.stage("notes.md", "n\n");
    ws.stage("docs/a b.md", "d\n");
    ws.write("unstaged.rs", "not staged\n");
    check(
        commit_recording(&ws, ws.path(), "docs"),
        "commit without rust files",
    );
    assert_eq!(recorded(&ws), "docs/a b.md|docs/a b.md:\n");

    // Deletions are not passed on; a rename gives the new path.
    ws.git_ok(&["rm", "-q", "notes.md"]);
    ws.git_ok(&["mv", "docs/a b.md", "docs/renamed.md"]);
    check(
        commit_recording(&ws, ws.path(), "rename"),
        "commit a rename",
    );
    assert_eq!(
        recorded(&ws),
        "docs/a b.md|docs/a b.md:\ndocs/renamed.md|docs/renamed.md:\n"
    );

    ws.stage("src/lib.rs", "x\n");
    let out = ws.commit("rust");
    assert!(!out.status.success());
    assert!(stderr(&out).contains("rust hook ran"));
}

#[test]
fn a_partial_commit_checks_the_files_being_committed() {
    let ws = repo_with_commit();
    ws.hook("files.sh", "pre-commit", "", RECORD_FILES);
    ws.stage("a.txt", "a\n");
    ws.stage("b.txt", "b\n");
    install(&ws);
    // `git commit a.txt` commits from a temporary index that holds only a.txt's change.
    let out = out_file(&ws);
    let mut cmd = ws.git_command(ws.path());
    cmd.args(["commit", "-q", "-m", "only a", "a.txt"])
        .env("HV_TEST_OUT", &out);
    check(cmd.output().unwrap(), "partial commit");
    assert_eq!(recorded(&ws), "a.txt|a.txt:\n");
}

#[test]
fn unstaged_and_untracked_work_is_left_alone() {
    let ws = repo_with_commit();
    ws.hook("look.sh", "pre-commit", "", "cat a.txt; exit 0");
    install(&ws);
    ws.stage("a.txt", "staged\n");
    ws.write("a.txt", "staged\nunstaged edit\n");
    ws.write("untracked.txt", "mine\n");
    check(ws.commit("a"), "commit");
    assert_eq!(
        fs::read_to_string(ws.path().join("a.txt")).unwrap(),
        "staged\nunstaged edit\n"
    );
    assert_eq!(ws.git_ok(&["show", "HEAD:a.txt"]), "staged\n");
    assert_eq!(
        fs::read_to_string(ws.path().join("untracked.txt")).unwrap(),
        "mine\n"
    );
    assert_eq!(ws.git_ok(&["stash", "list"]), "");
}

#[test]
fn core_hooks_path_is_honoured() {
    let ws = repo_with_commit();
    ws.git_ok(&["config", "core.hooksPath", "my hooks"]);
    ws.hook(
        "no.sh",
        "pre-commit",
        "",
        "echo blocked by hooksPath hook; exit 1",
    );
    let said = install(&ws);
    let expected = ws.path().join("my hooks/pre-commit");
    assert!(said.contains(&expected.display().to_string()), "{said}");
    assert!(expected.exists());
    assert!(!git_hook_path(&ws).exists());
    ws.stage("x", "x\n");
    let out = ws.commit("x");
    assert!(!out.status.success());
    assert!(stderr(&out).contains("blocked by hooksPath hook"));
}

#[test]
fn a_linked_worktree_uses_its_own_hooks_and_index() {
    let ws = repo_with_commit();
    ws.hook(
        "check.sh",
        "pre-commit",
        "",
        &format!("echo main hook\n{RECORD_FILES}"),
    );
    ws.git_ok(&["add", ".discobot"]);
    install(&ws);
    check(
        commit_recording(&ws, ws.path(), "hooks"),
        "commit the hooks",
    );

    let wt = ws.base().join("linked tree");
    ws.git_ok(&["worktree", "add", "-q", "-b", "wt", wt.to_str().unwrap()]);
    ws.hook_in(
        &wt,
        "check.sh",
        "pre-commit",
        "",
        "echo worktree hook says no; exit 4",
    );
    fs::write(wt.join("w.txt"), "w\n").unwrap();
    check(
        ws.git_command(&wt).args(["add", "w.txt"]).output().unwrap(),
        "add in worktree",
    );
    let out = ws.commit_in(&wt, "in the worktree", &[]);
    assert!(!out.status.success(), "the worktree's own hook must run");
    assert!(
        stderr(&out).contains("worktree hook says no"),
        "{}",
        stderr(&out)
    );

    // The main tree still uses its hook, on its own index.
    ws.stage("m.txt", "m\n");
    check(commit_recording(&ws, ws.path(), "main"), "commit in main");
    assert!(
        recorded(&ws).ends_with("m.txt|m.txt:\n"),
        "{}",
        recorded(&ws)
    );
}

#[test]
fn a_submodule_gets_the_hook_in_its_own_git_dir() {
    let sub_src = repo_with_commit();
    let ws = repo_with_commit();
    check(
        ws.git_run(&[
            "submodule",
            "add",
            "-q",
            sub_src.path().to_str().unwrap(),
            "sub",
        ]),
        "submodule add",
    );
    let sub = ws.path().join("sub");
    ws.hook_in(
        &sub,
        "sub.sh",
        "pre-commit",
        "",
        "echo submodule hook says no; exit 1",
    );
    let out = ws.hookvisor(&[
        "--workspace",
        sub.to_str().unwrap(),
        "pre-commit",
        "install",
    ]);
    let said = check(out, "install in the submodule");
    let expected = ws.path().join(".git/modules/sub/hooks/pre-commit");
    assert!(said.contains(&expected.display().to_string()), "{said}");

    fs::write(sub.join("s.txt"), "s\n").unwrap();
    check(
        ws.git_command(&sub)
            .args(["add", "s.txt"])
            .output()
            .unwrap(),
        "add in submodule",
    );
    let out = ws.commit_in(&sub, "in the submodule", &[]);
    assert!(!out.status.success());
    assert!(stderr(&out).contains("submodule hook says no"));
}

#[test]
fn names_with_spaces_quotes_dollars_and_backticks() {
    let ws = Workspace::git_named("work $HOME 'q' \"d\" `id` sp", "state $(id) 'q' `b`");
    ws.stage("README", "r\n");
    check(ws.commit("initial"), "initial commit");
    ws.hook(
        "lint $x 'q' `b`.sh",
        "pre-commit",
        "name: \"Lint $x `b` 'q'\"",
        &format!("{RECORD_FILES}\nexit 2"),
    );
    install(&ws);
    let weird = "we ird $x `b` 'q' \"d\".txt";
    ws.stage(weird, "w\n");
    let out = commit_recording(&ws, ws.path(), "weird");
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains("\"Lint $x `b` 'q'\" failed with exit code 2"),
        "{err}"
    );
    assert_eq!(recorded(&ws), format!("{weird}|{weird}:\n"));
    let status = ws.status();
    assert_eq!(status["hooks"]["lintxqb"]["lastExitCode"], 2, "{status}");
}

#[test]
fn hooks_are_read_at_commit_time() {
    let ws = repo_with_commit();
    let hook = ws.hook("no.sh", "pre-commit", "", "exit 1");
    install(&ws);
    ws.stage("a", "a\n");
    assert!(!ws.commit("blocked").status.success());

    // Deleting the hook, then the whole hooks dir, lets commits through without re-installing.
    fs::remove_file(&hook).unwrap();
    check(ws.commit("no hook file"), "commit without the hook file");
    fs::remove_dir_all(ws.path().join(".discobot")).unwrap();
    ws.stage("b", "b\n");
    check(ws.commit("no hooks dir"), "commit without a hooks dir");

    // A hook added after install runs without re-installing.
    ws.hook("new.sh", "pre-commit", "", "echo new hook says no; exit 1");
    ws.stage("c", "c\n");
    let out = ws.commit("new hook");
    assert!(stderr(&out).contains("new hook says no"));
}

#[test]
fn a_broken_pre_commit_hook_warns_but_does_not_block() {
    let ws = repo_with_commit();
    let hook = ws.hook("broken.sh", "pre-commit", "run_as: admin", "exit 1");
    install(&ws);
    ws.stage("a", "a\n");
    let out = ws.commit("a");
    check(out.clone(), "commit with a broken hook");
    let err = stderr(&out);
    assert!(
        err.contains("warning") && err.contains(&hook.display().to_string()),
        "{err}"
    );
}

#[test]
fn hookvisor_skip_turns_off_all_or_some_hooks() {
    let ws = repo_with_commit();
    ws.hook("alpha.sh", "pre-commit", "", "echo alpha says no; exit 1");
    ws.hook("beta.sh", "pre-commit", "", "echo beta says no; exit 1");
    install(&ws);
    ws.stage("a", "a\n");

    let out = ws.commit_in(ws.path(), "skip alpha", &[("HOOKVISOR_SKIP", "alpha")]);
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("skipped \"alpha\""), "{err}");
    assert!(
        err.contains("beta says no") && !err.contains("alpha says no"),
        "{err}"
    );

    let out = ws.commit_in(
        ws.path(),
        "skip both",
        &[("HOOKVISOR_SKIP", "alpha, beta,typo")],
    );
    check(out.clone(), "commit skipping both");
    let err = stderr(&out);
    assert!(
        err.contains("skipped \"alpha\"") && err.contains("skipped \"beta\""),
        "{err}"
    );
    assert!(
        err.contains("'typo'"),
        "an unknown id must be reported: {err}"
    );

    ws.stage("b", "b\n");
    let out = ws.commit_in(ws.path(), "skip all", &[("HOOKVISOR_SKIP", "1")]);
    check(out.clone(), "commit skipping all");
    assert!(
        stderr(&out).contains("HOOKVISOR_SKIP=1"),
        "{}",
        stderr(&out)
    );
    assert!(ws.status()["hooks"].get("alpha").is_none());
}

#[test]
fn the_state_dir_of_the_commit_environment_wins_over_the_recorded_one() {
    let ws = repo_with_commit();
    ws.hook("ok.sh", "pre-commit", "", "exit 0");
    install(&ws);
    let other = ws.base().join("commit-time state");
    ws.stage("a", "a\n");
    let out = ws.commit_in(
        ws.path(),
        "a",
        &[("HOOKVISOR_STATE_DIR", other.to_str().unwrap())],
    );
    check(out, "commit");
    assert!(other.join("status.json").exists());
    assert!(!ws.state_dir().join("status.json").exists());

    ws.stage("b", "b\n");
    check(ws.commit("b"), "commit");
    assert_eq!(ws.status()["hooks"]["ok"]["runCount"], 1);
}

#[test]
fn a_moved_binary_gives_a_clear_message() {
    let ws = repo_with_commit();
    ws.hook("ok.sh", "pre-commit", "", "exit 0");
    let bin_dir = ws.base().join("bin $dir 'q'");
    fs::create_dir_all(&bin_dir).unwrap();
    let copy = bin_dir.join("hookvisor");
    fs::copy(env!("CARGO_BIN_EXE_hookvisor"), &copy).unwrap();
    let out = std::process::Command::new(&copy)
        .current_dir(ws.path())
        .args(["--state-dir", ws.state_dir().to_str().unwrap()])
        .args(["pre-commit", "install"])
        .output()
        .unwrap();
    check(out, "install from the copy");
    fs::remove_file(&copy).unwrap();

    ws.stage("a", "a\n");
    let out = ws.commit("a");
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(
        err.contains(&format!("{} is gone", copy.display())),
        "{err}"
    );
    assert!(err.contains("hookvisor pre-commit install"), "{err}");
}

#[test]
fn install_outside_a_repository_is_a_clear_error() {
    let ws = Workspace::new();
    let out = ws.hookvisor(&["pre-commit", "install"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).contains("not in a git repository"),
        "{}",
        stderr(&out)
    );
}

/// git speaks the user's language; hookvisor reads its messages, so it asks for C. A German
/// locale is compiled into a private directory (LOCPATH) for this test; the machine's stay.
#[test]
fn install_outside_a_repository_is_a_clear_error_in_any_language() {
    let ws = Workspace::new();
    let locales = ws.base().join("locales");
    std::fs::create_dir_all(&locales).unwrap();
    let made = std::process::Command::new("localedef")
        .args(["-i", "de_DE", "-f", "UTF-8"])
        .arg(locales.join("de_DE.UTF-8"))
        .status();
    if !made.is_ok_and(|s| s.success()) {
        assert!(
            std::env::var_os("CI").is_none_or(|v| v != "true"),
            "CI=true but localedef cannot compile de_DE (install the locales package)"
        );
        eprintln!("note: no de_DE locale source; test skipped");
        return;
    }
    // Debian's git, which is built with its translations, answers in German here.
    let path = "/usr/bin:/bin";
    let german = ws
        .git_command(ws.path())
        .args(["rev-parse", "--git-path", "hooks"])
        .env("PATH", path)
        .env("LOCPATH", &locales)
        .env("LC_ALL", "de_DE.UTF-8")
        .output()
        .unwrap();
    let said = stderr(&german);
    assert!(
        !said.contains("not a git repository"),
        "git spoke English: {said}"
    );
    let out = ws
        .hookvisor_command()
        .args(["pre-commit", "install"])
        .env("PATH", path)
        .env("LOCPATH", &locales)
        .env("LC_ALL", "de_DE.UTF-8")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not in a git repository; run `git init`"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_hook_that_times_out_blocks_the_commit() {
    let ws = repo_with_commit();
    ws.hook(
        "slow.sh",
        "pre-commit",
        "name: Slow\ntimeout: 1",
        "echo started; sleep 30",
    );
    install(&ws);
    ws.stage("a", "a\n");
    let started = std::time::Instant::now();
    let out = ws.commit("a");
    assert!(!out.status.success());
    assert!(started.elapsed() < std::time::Duration::from_secs(20));
    let err = stderr(&out);
    assert!(
        err.contains("\"Slow\" timed out") && err.contains("started"),
        "{err}"
    );
    let status = ws.status();
    assert_eq!(status["hooks"]["slow"]["lastExitCode"], 124, "{status}");
}

#[test]
fn without_pre_commit_hooks_run_does_nothing_not_even_git() {
    // Not a repository: the run must succeed without asking git for anything.
    let ws = Workspace::new();
    ws.hook("fmt.sh", "file", "pattern: '*.rs'", "exit 1");
    let out = ws.hookvisor(&[
        "--workspace",
        ws.path().to_str().unwrap(),
        "pre-commit",
        "run",
    ]);
    check(out.clone(), "run without pre-commit hooks");
    assert_eq!(stderr(&out), "");
    assert!(!ws.state_dir().join("status.json").exists());
}

/// Issue 12: a staged file whose name is not UTF-8 reaches the pre-commit hook byte for byte (it
/// used to arrive with U+FFFD in place of the bad byte) and is matched by `*.txt`.
#[test]
fn a_staged_name_that_is_not_utf8_reaches_the_hook_byte_for_byte() {
    let ws = repo_with_commit();
    let copy = ws.base().join("staged.nul");
    ws.hook(
        "names.sh",
        "pre-commit",
        "pattern: '*.txt'",
        &format!(
            "cp \"$HOOKVISOR_CHANGED_FILES_NUL\" '{}'\n\
             xargs -0 -n1 test -f < \"$HOOKVISOR_CHANGED_FILES_NUL\" || exit 5",
            copy.display()
        ),
    );
    install(&ws);
    ws.stage("plain.txt", "x\n");
    fs::write(ws.path().join(OsStr::from_bytes(b"\xff.txt")), "x\n").unwrap();
    ws.git_ok(&["add", "-A"]);
    check(ws.commit("odd name"), "commit");
    assert_eq!(fs::read(&copy).unwrap(), b"plain.txt\0\xff.txt\0");
}

/// The agent's workspace: owned by hv-test, with a pre-commit hook and `.git/hooks` a link to
/// a directory only root can write, which is returned; `None` without the test user.
fn agent_workspace_linking_hooks_to_root_only()
-> Option<(Workspace, PathBuf, std::sync::MutexGuard<'static, ()>)> {
    let one_at_a_time = common::ensure_test_user()?;
    let user = common::test_user();
    let ws = repo_with_commit();
    ws.hook("lint.sh", "pre-commit", "", "exit 0");
    fs::set_permissions(ws.base(), fs::Permissions::from_mode(0o755)).unwrap();
    let root_only = ws.base().join("root-only");
    fs::create_dir(&root_only).unwrap();
    fs::set_permissions(&root_only, fs::Permissions::from_mode(0o700)).unwrap();
    fs::remove_dir_all(ws.path().join(".git/hooks")).unwrap();
    std::os::unix::fs::symlink(&root_only, ws.path().join(".git/hooks")).unwrap();
    let chown = std::process::Command::new("chown")
        .args(["-hR", &format!("{}:{}", user.uid, user.gid)])
        .arg(ws.path())
        .status()
        .unwrap();
    assert!(chown.success());
    Some((ws, root_only, one_at_a_time))
}

/// As a root shell in the sandbox may: git trusts the agent's repository.
const TRUST_EVERY_REPOSITORY: [(&str, &str); 3] = [
    ("GIT_CONFIG_COUNT", "1"),
    ("GIT_CONFIG_KEY_0", "safe.directory"),
    ("GIT_CONFIG_VALUE_0", "*"),
];

fn names_in(dir: &Path) -> Vec<std::ffi::OsString> {
    fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name())
        .collect()
}

/// Attack: the agent owns the workspace and makes `.git/hooks` a link to a directory only root
/// can write; root then runs `fire turn.end` (which installs the git hook when commit hooks
/// exist). Root writes nothing there: it refuses (exit 2) a workspace another account can
/// change, where it would run git too (the user's own `serve` or `fire` installs the hook).
#[test]
fn root_installs_no_git_hook_through_a_link_the_agent_planted() {
    let Some((ws, root_only, _one_at_a_time)) = agent_workspace_linking_hooks_to_root_only() else {
        return;
    };
    let out = ws
        .hookvisor_command()
        .envs(TRUST_EVERY_REPOSITORY)
        .args(["fire", "turn.end"])
        .output()
        .unwrap();
    let names = names_in(&root_only);
    assert!(names.is_empty(), "{names:?}; {}", stderr(&out));
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
}

/// The same attack on `serve` run as root (with a state dir only root can write, which it
/// accepts): it would sync the git hooks when it starts and whenever the hooks change. It
/// refuses to start in a workspace another account can change (exit 2, one line), and writes
/// nothing through the agent's link.
#[test]
fn root_serve_installs_no_git_hook_through_a_link_the_agent_planted() {
    let Some((ws, root_only, _one_at_a_time)) = agent_workspace_linking_hooks_to_root_only() else {
        return;
    };
    let out = ws
        .hookvisor_command()
        .envs(TRUST_EVERY_REPOSITORY)
        .args(["serve", "--listen", "127.0.0.1:0"])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("refusing to run git as root in"),
        "{}",
        stderr(&out)
    );
    let names = names_in(&root_only);
    assert!(names.is_empty(), "{names:?}");
}

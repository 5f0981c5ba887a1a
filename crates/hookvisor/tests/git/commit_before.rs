//! `commit.before` event hooks inside real `git commit`s (docs/EVENTS.md §2.1: `type: pre-commit` ≡
//! `event: commit.before`): a declarative `.yml` gate runs after the phase-1 pre-commit hooks,
//! sees the staged files, and refuses the commit with its reason.

use crate::common;

use std::fs;

use common::{Workspace, check, stderr};

/// A repository with one commit and a `commit.before` gate on Rust files that blocks while the
/// file `block` exists and records the staged files it saw in `seen`.
fn repo_with_gate() -> Workspace {
    let ws = Workspace::git();
    ws.stage("README.md", "hello\n");
    check(ws.commit("initial"), "initial commit");
    ws.write(
        ".discobot/hooks/rust-gate.yml",
        "---\nevent: commit.before\npattern: \"**/*.rs\"\nrun: |\n  echo \"${files}\" >> \"${workspace}/../seen\"\n  test ! -e \"${workspace}/block\" || { echo 'no commits while block exists' >&2; exit 1; }\n---\n",
    );
    ws
}

fn head(ws: &Workspace) -> String {
    ws.git_ok(&["rev-parse", "HEAD"])
}

fn seen(ws: &Workspace) -> String {
    fs::read_to_string(ws.base().join("seen")).unwrap_or_default()
}

#[test]
fn a_commit_before_gate_refuses_the_commit_with_its_reason_and_passes_it_when_fixed() {
    let ws = repo_with_gate();
    // `eval` installs the git hook for a workspace whose only commit hook is an event hook.
    check(ws.hookvisor(&["eval"]), "eval");
    assert!(ws.path().join(".git/hooks/pre-commit").exists());

    fs::write(ws.path().join("block"), "").unwrap();
    ws.stage("src/a.rs", "fn a() {}\n");
    let before = head(&ws);
    let out = ws.commit("blocked");
    assert!(!out.status.success(), "the gate must refuse the commit");
    let err = stderr(&out);
    assert!(
        err.contains("commit.before hook \"rust-gate\" blocked the commit"),
        "{err}"
    );
    assert!(err.contains("no commits while block exists"), "{err}");
    assert!(err.contains("HOOKVISOR_SKIP=rust-gate"), "{err}");
    assert_eq!(head(&ws), before);
    assert_eq!(seen(&ws), "src/a.rs\n");
    let status = ws.status();
    let entry = &status["hooks"]["rust-gate"];
    assert_eq!(entry["event"], "commit.before", "{entry}");
    assert_eq!(entry["lastResult"], "failure", "{entry}");

    // Skipped by id, the commit goes through; so it does once the gate passes.
    let skipped = ws.commit_in(ws.path(), "skipped", &[("HOOKVISOR_SKIP", "rust-gate")]);
    check(skipped, "commit with the gate skipped");
    fs::remove_file(ws.path().join("block")).unwrap();
    ws.stage("src/b.rs", "fn b() {}\n");
    check(ws.commit("passes"), "commit once fixed");
    assert_eq!(ws.git_ok(&["log", "-1", "--format=%s"]), "passes\n");
    assert_eq!(seen(&ws), "src/a.rs\nsrc/b.rs\n");

    // No staged file matches the pattern: the gate does not run.
    fs::write(ws.path().join("block"), "").unwrap();
    ws.stage("notes.txt", "n\n");
    check(ws.commit("no rust"), "commit without Rust files");
    assert_eq!(seen(&ws), "src/a.rs\nsrc/b.rs\n");
}

#[test]
fn a_failing_phase1_hook_stops_the_commit_before_the_gate_runs() {
    let ws = repo_with_gate();
    ws.hook(
        "lint.sh",
        "pre-commit",
        "name: Lint",
        "echo lint failed\nexit 4",
    );
    check(ws.hookvisor(&["pre-commit", "install"]), "install");
    ws.stage("src/a.rs", "fn a() {}\n");
    let out = ws.commit("blocked by lint");
    assert!(!out.status.success());
    let err = stderr(&out);
    assert!(err.contains("\"Lint\" failed with exit code 4"), "{err}");
    assert_eq!(seen(&ws), "", "the gate ran after a failed phase-1 hook");
    let run = ws.hookvisor(&["pre-commit", "run"]);
    assert_eq!(run.status.code(), Some(4), "{}", stderr(&run));
}

/// A gate fails closed, inside `git commit` as through `fire commit.before`: a `commit.before`
/// gate file that does not load refuses the commit, naming the file, its line and the fix. A
/// broken phase-1 `type: pre-commit` script only warns, as in phase 1.
#[test]
fn a_commit_before_gate_that_does_not_load_refuses_the_commit() {
    let ws = Workspace::git();
    ws.stage("README.md", "hello\n");
    check(ws.commit("initial"), "initial commit");
    ws.write(
        ".discobot/hooks/gate.yml",
        "---\nevent: commit.before\nwhen: ${x} == (1\nrun: exit 0\n---\n",
    );
    check(ws.hookvisor(&["pre-commit", "install"]), "install");
    ws.stage("a.txt", "a\n");
    let before = head(&ws);
    let out = ws.commit("with a broken gate");
    assert!(
        !out.status.success(),
        "the broken gate must refuse the commit"
    );
    let err = stderr(&out);
    assert!(err.contains("gate.yml:3"), "{err}");
    assert!(err.contains("fix the hook file or remove it"), "{err}");
    assert_eq!(head(&ws), before);

    // Fixed, the commit goes through.
    ws.write(
        ".discobot/hooks/gate.yml",
        "---\nevent: commit.before\nrun: exit 0\n---\n",
    );
    check(
        ws.commit("with the gate fixed"),
        "commit with the gate fixed",
    );
}

/// The git hook a broken `commit.before` gate needs stays in place: a turn end (`eval`) with
/// a `commit.after` hook beside it syncs the git hooks, and must not take the pre-commit one
/// out because the gate no longer loads; a workspace whose only gate is broken gets it
/// installed. Either way the commit is refused, never made without its gate.
#[test]
fn a_broken_commit_before_gate_keeps_its_git_hook() {
    let ws = Workspace::git();
    ws.stage("README.md", "hello\n");
    check(ws.commit("initial"), "initial commit");
    ws.write(
        ".discobot/hooks/gate.yml",
        "---\nevent: commit.before\nrun: echo 'gate says no' >&2; exit 1\n---\n",
    );
    ws.write(
        ".discobot/hooks/after.yml",
        "---\nevent: commit.after\nrun: 'true'\n---\n",
    );
    check(ws.hookvisor(&["eval"]), "eval");
    assert!(ws.path().join(".git/hooks/pre-commit").exists());
    // `blocking: true` (AutoAgent's "may block") is refused on an event hook: it does not load.
    ws.write(
        ".discobot/hooks/gate.yml",
        "---\nevent: commit.before\nblocking: true\nrun: echo 'gate says no' >&2; exit 1\n---\n",
    );
    let _ = ws.hookvisor(&["eval"]);
    ws.stage("a.txt", "a\n");
    let before = head(&ws);
    let out = ws.commit("past a broken gate");
    assert!(
        !out.status.success(),
        "the broken gate let the commit through"
    );
    assert_eq!(head(&ws), before);

    // A workspace whose only commit hook is a broken gate: the turn end installs the git hook.
    let ws = Workspace::git();
    ws.stage("README.md", "hello\n");
    check(ws.commit("initial"), "initial commit");
    ws.write(
        ".discobot/hooks/gate.yml",
        "---\nevent: commit.before\nblocking: true\nrun: exit 1\n---\n",
    );
    let _ = ws.hookvisor(&["eval"]);
    ws.stage("a.txt", "a\n");
    let before = head(&ws);
    let out = ws.commit("past a broken gate");
    assert!(
        !out.status.success(),
        "the broken gate let the commit through"
    );
    assert_eq!(head(&ws), before);
}

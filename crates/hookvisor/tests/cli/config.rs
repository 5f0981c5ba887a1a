//! End-to-end tests of `.discobot/hookvisor.yml` (docs/EVENTS.md §2.1): each key's effect through
//! the built `hookvisor`, and each refusal as a `file:line: reason; fix` problem of `check`
//! and `list`, with global hooks off while the file is broken.

use crate::common;

use std::fs;
use std::os::unix::fs::symlink;

use common::{Workspace, code, json_of, stdout};
use serde_json::Value;

fn config(ws: &Workspace, text: &str) {
    ws.write(".discobot/hookvisor.yml", text);
}

/// `eval --json` with extra arguments and environment, after a fresh change to `notes.txt`.
fn eval(ws: &Workspace, args: &[&str], env: &[(&str, &str)]) -> Value {
    common::tick();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    ws.write("notes.txt", &format!("{stamp}\n"));
    let mut cmd = ws.hookvisor_command();
    cmd.args(["eval", "--json"]).args(args);
    for (k, v) in env {
        cmd.env(k, v);
    }
    json_of(&cmd.output().unwrap())
}

#[test]
fn max_retries_comes_from_the_flag_then_the_environment_then_the_file_then_3() {
    let ws = Workspace::git();
    ws.hook(
        "lint.sh",
        "file",
        "pattern: '*.txt'",
        "echo always broken; exit 1",
    );
    assert_eq!(eval(&ws, &[], &[])["maxAttempts"], 3);
    config(&ws, "max_retries: 1\n");
    assert_eq!(eval(&ws, &[], &[])["maxAttempts"], 1);
    let env = [("HOOKVISOR_MAX_RETRIES", "2")];
    assert_eq!(eval(&ws, &[], &env)["maxAttempts"], 2);
    assert_eq!(eval(&ws, &["--max-retries", "5"], &env)["maxAttempts"], 5);

    // The file's limit is the loop guard's: one re-prompt, then the model is let go.
    let first = eval(&ws, &["--trigger", "user"], &[]);
    assert_eq!(first["action"], "reprompt", "{first}");
    let second = eval(&ws, &["--trigger", "hook"], &[]);
    assert_eq!(second["action"], "gave_up", "{second}");
}

#[test]
fn sources_without_discobot_reads_no_workspace_hooks_and_check_says_what_is_used() {
    let ws = Workspace::git();
    ws.hook("lint.sh", "file", "pattern: '*.txt'", "exit 1");
    config(&ws, "sources: [global, pipelines]\n");
    let report = eval(&ws, &[], &[]);
    assert_eq!(report["action"], "pass", "{report}");
    assert_eq!(report["results"], serde_json::json!([]));

    let check = ws.hookvisor(&["check"]);
    assert_eq!(code(&check), 0, "{}", stdout(&check));
    let lines: Vec<String> = stdout(&check).lines().map(str::to_owned).collect();
    let home = ws.base().join("home/.config/hookvisor/hooks");
    let want = [
        "source: discobot skipped (not in sources)".to_owned(),
        "source: iteratr skipped (not in sources)".to_owned(),
        "source: autoagent skipped (not in sources)".to_owned(),
        "source: nyzhi skipped (not in sources)".to_owned(),
        "source: pipelines skipped (no pipeline.yaml, loop.yaml)".to_owned(),
        // No such directory in the test's HOME: nothing is read there.
        format!("source: global skipped (no directory {})", home.display()),
    ];
    assert_eq!(lines, want);
    // `list` says first that the workspace's hooks are off, not merely that there are none.
    let list = stdout(&ws.hookvisor(&["list"]));
    assert!(
        list.starts_with(&format!(
            "the hooks of {} are off: 'sources' in ",
            ws.path().join(".discobot/hooks").display()
        )),
        "{list}"
    );
}

#[test]
fn callback_and_file_tools_are_read_and_a_valid_file_is_no_problem() {
    let ws = Workspace::new();
    config(
        &ws,
        "# hookvisor settings\nmax_retries: 0\nsources: auto\ndisable_global_hooks: false\n\
         callback:\n  port: 0\n  public_url: 'https://hooks.example.com/cb'\n\
         file_tools: [Write, mcp__fs__write_file]\n",
    );
    let check = ws.hookvisor(&["check"]);
    assert_eq!(code(&check), 0, "{}", stdout(&check));
    let list = json_of(&ws.hookvisor(&["list", "--json"]));
    assert_eq!(list["problems"], serde_json::json!([]));
}

#[test]
fn each_refusal_is_a_problem_with_its_file_line_and_fix() {
    let ws = Workspace::new();
    let path = ws.path().join(".discobot/hookvisor.yml");
    let table: [(&str, usize, &str, &str); 8] = [
        (
            "max_retries: 2\nretry: 1\n",
            2,
            "unknown field `retry`",
            "remove the key",
        ),
        ("max_retries: many\n", 1, "max_retries: ", "whole number"),
        (
            "disable_global_hooks: sometimes\n",
            1,
            "disable_global_hooks: ",
            "true or false",
        ),
        (
            "callback:\n  port: 99999\n",
            2,
            "callback port 99999 is out of range",
            "0 for an ephemeral",
        ),
        (
            "callback:\n  public_url: 'hooks.example.com'\n",
            2,
            "is not http:// or https://",
            "https://hooks.example.com",
        ),
        (
            "sources:\n  - discobot\n  - cursor\n",
            3,
            "unknown source 'cursor'",
            "use one of discobot, iteratr",
        ),
        (
            "sources: everything\n",
            1,
            "sources 'everything'",
            "sources: auto",
        ),
        (
            "file_tools: Write\n",
            1,
            "file_tools: ",
            "list of tool names",
        ),
    ];
    for (text, line, reason, fix) in table {
        config(&ws, text);
        let check = ws.hookvisor(&["check"]);
        assert_eq!(code(&check), 1, "{text:?}: {}", stdout(&check));
        let out = stdout(&check);
        let first = out.lines().next().unwrap_or_default();
        let prefix = format!("{}:{line}: ", path.display());
        assert!(
            first.starts_with(&prefix),
            "{text:?}: {first:?} lacks {prefix:?}"
        );
        assert!(
            first.contains(reason),
            "{text:?}: {first:?} lacks {reason:?}"
        );
        assert!(first.contains(fix), "{text:?}: {first:?} lacks {fix:?}");
        assert!(first.contains("global hooks are off"), "{first}");

        let list = json_of(&ws.hookvisor(&["list", "--json"]));
        let problem = &list["problems"][0];
        assert_eq!(problem["path"], path.to_str().unwrap(), "{text:?}");
        assert_eq!(problem["line"], line, "{text:?}");
    }
}

/// A broken file keeps what runs without it (the workspace's hooks) and turns off what it may
/// have meant to turn off (global hooks).
#[test]
fn a_broken_file_runs_the_workspace_hooks_but_no_global_hook() {
    let ws = Workspace::git();
    ws.hook("lint.sh", "file", "pattern: '*.txt'", "exit 0");
    let global = ws.global_hooks();
    fs::write(
        global.join("g.sh"),
        "#!/bin/sh\n#---\n# type: file\n# pattern: '*.txt'\n#---\nexit 0\n",
    )
    .unwrap();
    fs::set_permissions(
        global.join("g.sh"),
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )
    .unwrap();
    let ids = |report: &Value| -> Vec<String> {
        report["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["hookId"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(ids(&eval(&ws, &[], &[])), ["lint", "global:g"]);
    config(&ws, "disable_global_hooks: [yes]\n");
    assert_eq!(ids(&eval(&ws, &[], &[])), ["lint"]);
    let check = stdout(&ws.hookvisor(&["check"]));
    assert!(
        check.contains("source: global skipped (") && check.contains("hookvisor.yml is broken)"),
        "{check}"
    );
}

/// The agent writes the workspace: a link or a FIFO at the file's place is refused, not
/// followed or waited on.
#[test]
fn a_linked_or_fifo_config_is_a_problem_not_followed_or_waited_on() {
    let ws = Workspace::new();
    let path = ws.path().join(".discobot/hookvisor.yml");
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    let target = ws.base().join("elsewhere.yml");
    fs::write(&target, "max_retries: 1\n").unwrap();
    symlink(&target, &path).unwrap();
    let check = ws.hookvisor(&["check"]);
    assert_eq!(code(&check), 1);
    assert!(
        stdout(&check).starts_with(&format!("{}: is a symbolic link", path.display())),
        "{}",
        stdout(&check)
    );

    fs::remove_file(&path).unwrap();
    nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o644)).unwrap();
    // A wait on the FIFO would hang `check` forever; the test harness would time out.
    let check = ws.hookvisor(&["check"]);
    assert_eq!(code(&check), 1);
    assert!(
        stdout(&check).contains("is not a regular file"),
        "{}",
        stdout(&check)
    );
}

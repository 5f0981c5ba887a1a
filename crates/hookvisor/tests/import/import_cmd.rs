//! `hookvisor import [SOURCE] --print|--write` (docs/EVENTS.md §2.2, §5 rule 11) through the built
//! binary, on real temporary workspaces with a private HOME: the reference documents' examples
//! printed as golden files, written, their files left with everything but the converted
//! entries, and each hook run exactly once by `fire` afterwards.

use crate::common;

use std::fs;
use std::path::Path;

use common::{Workspace, code, stderr, stdout};

/// docs/upstream/iteratr-hooks.md, "Config Format", as its document writes it.
const ITERATR: &str =
    include_str!("../../../hookvisor-core/src/import/reference/iteratr.hooks.yml");

/// docs/upstream/autoagent-hooks-design.md, "Configuration Structure".
const AUTOAGENT: &str =
    include_str!("../../../hookvisor-core/src/import/reference/autoagent.config.json");

/// docs/upstream/nyzhi-hooks.md, "Configuration", between the settings of a real config.
const NYZHI: &str = r#"# nyzhi, project settings
[agent]
model = "claude-sonnet"  # the default model

[[agent.hooks]]
event = "after_edit"
command = "cargo fmt -- {file}"
pattern = "*.rs"
timeout = 30

[[agent.hooks]]
event = "after_turn"
command = "cargo clippy --all -- -D warnings"
timeout = 60

# The terminal UI.
[tui]
theme = "dark"
"#;

/// The golden output of `import --print` for a source, in tests/fixtures/import.
fn golden(name: &str) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/import")
        .join(name);
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The names of `.discobot/hooks`, sorted.
fn hook_files(ws: &Workspace) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(ws.path().join(".discobot/hooks"))
        .map(|dir| {
            dir.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
}

/// `import SOURCE --print` of each reference example is its golden file, and changes nothing.
#[test]
fn print_shows_each_reference_example_as_declarative_files() {
    for (file, text, source, golden_name) in [
        (".iteratr.hooks.yml", ITERATR, "iteratr", "iteratr.print"),
        (
            ".autoagent/config.json",
            AUTOAGENT,
            "autoagent",
            "autoagent.print",
        ),
        (".nyzhi/config.toml", NYZHI, "nyzhi", "nyzhi.print"),
    ] {
        let ws = Workspace::new();
        ws.write(file, text);
        let out = ws.hookvisor(&["import", source, "--print"]);
        assert_eq!(code(&out), 0, "{source}: {}", stderr(&out));
        assert_eq!(stdout(&out), golden(golden_name), "{source}");
        assert_eq!(fs::read_to_string(ws.path().join(file)).unwrap(), text);
        assert!(
            hook_files(&ws).is_empty(),
            "{source}: {:?}",
            hook_files(&ws)
        );
        // Without SOURCE, every tool's file found: the same here.
        let all = ws.hookvisor(&["import", "--print"]);
        assert_eq!(stdout(&all), stdout(&out), "{source}");
    }
}

/// iteratr's file of only hooks (and its format's `version`) is deleted; the files are those
/// `--print` showed.
#[test]
fn write_converts_iteratr_and_deletes_a_file_of_only_hooks() {
    let ws = Workspace::new();
    ws.write(".iteratr.hooks.yml", ITERATR);
    let printed = stdout(&ws.hookvisor(&["import", "--print"]));
    let out = ws.hookvisor(&["import", "--write"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stdout(&out).ends_with("deleted .iteratr.hooks.yml (nothing else was in it)\n"),
        "{}",
        stdout(&out)
    );
    assert!(!ws.path().join(".iteratr.hooks.yml").exists());
    let names = hook_files(&ws);
    assert_eq!(names.len(), 7, "{names:?}");
    for name in &names {
        let text = fs::read_to_string(ws.path().join(".discobot/hooks").join(name)).unwrap();
        let shown = format!("==> .discobot/hooks/{name} <==\n{text}");
        assert!(
            printed.contains(&shown),
            "{name} is not what --print showed"
        );
    }
    // Declarative hooks are not executable, and check finds nothing wrong with them.
    let meta = fs::metadata(ws.path().join(".discobot/hooks/iteratr-on_error-0.yml")).unwrap();
    assert_eq!(
        std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o777,
        0o644
    );
    let check = ws.hookvisor(&["check"]);
    assert_eq!(code(&check), 0, "{}{}", stdout(&check), stderr(&check));
}

/// AutoAgent's settings stay, byte for byte, and lose `hooks`.
#[test]
fn write_converts_autoagent_and_keeps_its_settings() {
    let ws = Workspace::new();
    ws.write(".autoagent/config.json", AUTOAGENT);
    let out = ws.hookvisor(&["import", "autoagent", "--write"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(ws.path().join(".autoagent/config.json")).unwrap(),
        "{\n  \"providers\": [\"claude\", \"gemini\"],\n  \"failoverDelay\": 5000,\n  \
         \"retryAttempts\": 3,\n  \"maxTokens\": 100000,\n  \"rateLimitCooldown\": 3600000,\n  \
         \"gitAutoCommit\": false,\n  \"logLevel\": \"info\"\n}\n"
    );
    assert_eq!(
        hook_files(&ws),
        [
            "autoagent-post_execution_end-0.yml",
            "autoagent-post_execution_end-1.yml",
            "autoagent-post_execution_start-0.yml",
            "autoagent-pre_execution_end-0.yml",
            "autoagent-pre_execution_start-0.yml",
        ]
    );
    assert!(
        stdout(&out).ends_with("removed 5 converted entries from .autoagent/config.json\n"),
        "{}",
        stdout(&out)
    );
}

/// nyzhi's other tables keep their comments; a file of only hooks is deleted.
#[test]
fn write_converts_nyzhi_and_keeps_its_other_tables() {
    let ws = Workspace::new();
    ws.write(".nyzhi/config.toml", NYZHI);
    let out = ws.hookvisor(&["import", ".nyzhi/config.toml", "--write"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(ws.path().join(".nyzhi/config.toml")).unwrap(),
        "# nyzhi, project settings\n[agent]\nmodel = \"claude-sonnet\"  # the default model\n\n\
         # The terminal UI.\n[tui]\ntheme = \"dark\"\n"
    );
    assert_eq!(
        hook_files(&ws),
        ["nyzhi-after_edit-0.yml", "nyzhi-after_turn-0.yml"]
    );
    let only = Workspace::new();
    only.write(
        ".nyzhi/config.toml",
        "[[agent.hooks]]\nevent = \"after_turn\"\ncommand = \"true\"\n",
    );
    let out = only.hookvisor(&["import", "nyzhi", "--write"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(!only.path().join(".nyzhi/config.toml").exists());
}

/// Before and after `--write`, `fire` runs each tool's hook once: never twice, never not.
#[test]
fn after_write_fire_runs_each_hook_exactly_once() {
    let ws = Workspace::new();
    ws.write(
        ".iteratr.hooks.yml",
        "hooks:\n  post_iteration:\n    - command: \"echo iteratr >> trace\"\n",
    );
    ws.write(
        ".autoagent/config.json",
        "{\"logLevel\": \"info\", \"hooks\": {\"Stop\": [{\"type\": \"command\", \"command\": \"echo autoagent >> trace\"}]}}",
    );
    ws.write(
        ".nyzhi/config.toml",
        "[agent]\nmodel = \"m\"\n\n[[agent.hooks]]\nevent = \"after_turn\"\ncommand = \"echo nyzhi >> trace\"\n",
    );
    let fire = |ws: &Workspace| {
        for event in ["turn.end", "session.stop"] {
            let out = ws.hookvisor(&["fire", event]);
            assert_eq!(code(&out), 0, "{event}: {}", stderr(&out));
        }
    };
    let trace = |ws: &Workspace| {
        let text = fs::read_to_string(ws.path().join("trace")).unwrap_or_default();
        fs::remove_file(ws.path().join("trace")).unwrap_or_default();
        text
    };
    fire(&ws);
    let before = trace(&ws);
    assert_eq!(before, "iteratr\nnyzhi\nautoagent\n");
    let out = ws.hookvisor(&["import", "--write"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    fire(&ws);
    // `.discobot/hooks` run in file-name order now.
    assert_eq!(trace(&ws), "iteratr\nnyzhi\nautoagent\n");
    let list = stdout(&ws.hookvisor(&["list"]));
    assert!(!list.contains("iteratr:"), "{list}");
}

/// A new file's name taken is refused by name, and nothing changes anywhere.
#[test]
fn an_existing_target_is_refused_and_nothing_changes() {
    for existing in [
        "iteratr-post_iteration-0.yml",
        "iteratr-post_iteration-0.sh",
    ] {
        let ws = Workspace::new();
        ws.write(".iteratr.hooks.yml", ITERATR);
        ws.write(".nyzhi/config.toml", NYZHI);
        let taken = ws.write(&format!(".discobot/hooks/{existing}"), "mine\n");
        let out = ws.hookvisor(&["import", "--write"]);
        assert_eq!(code(&out), 2, "{}", stderr(&out));
        let err = stderr(&out);
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.starts_with(&format!("hookvisor: {}", taken.display()))
                && err.contains("nothing was changed"),
            "{err}"
        );
        assert_eq!(hook_files(&ws), [existing]);
        assert_eq!(fs::read_to_string(&taken).unwrap(), "mine\n");
        assert_eq!(
            fs::read_to_string(ws.path().join(".iteratr.hooks.yml")).unwrap(),
            ITERATR
        );
        assert_eq!(
            fs::read_to_string(ws.path().join(".nyzhi/config.toml")).unwrap(),
            NYZHI
        );
    }
}

/// An entry with a problem is not converted: it stays, with its comment, named on stderr,
/// and the command exits 1; the others are converted.
#[test]
fn an_entry_with_a_problem_stays_in_place() {
    let ws = Workspace::new();
    let text = "version: 1\nhooks:\n  post_iteration:\n    - command: \"make\"\n    # Too slow for now.\n    - command: \"make slow\"\n      timeout: soon\n  session_end:\n    - command: \"git push\"\n";
    ws.write(".iteratr.hooks.yml", text);
    let out = ws.hookvisor(&["import", "iteratr", "--write"]);
    assert_eq!(code(&out), 1, "{}", stderr(&out));
    assert_eq!(
        stderr(&out),
        "hookvisor: .iteratr.hooks.yml:7: left in place, not converted: timeout: \"soon\" is \
         no whole number of seconds; write one such as 'timeout: 30'\n"
    );
    assert_eq!(
        fs::read_to_string(ws.path().join(".iteratr.hooks.yml")).unwrap(),
        "version: 1\nhooks:\n  post_iteration:\n    # Too slow for now.\n    - command: \"make slow\"\n      timeout: soon\n"
    );
    assert_eq!(
        hook_files(&ws),
        ["iteratr-post_iteration-0.yml", "iteratr-session_end-0.yml"]
    );
    // Fixed, it is now the first post_iteration entry, whose name the earlier import's file
    // holds: refused by name, never overwritten nor renamed behind the user's back.
    ws.write(
        ".iteratr.hooks.yml",
        &fs::read_to_string(ws.path().join(".iteratr.hooks.yml"))
            .unwrap()
            .replace("soon", "30"),
    );
    let out = ws.hookvisor(&["import", "iteratr", "--write"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("iteratr-post_iteration-0.yml exists; move it away"),
        "{}",
        stderr(&out)
    );
}

/// A user file serves every workspace: it is named but left alone unless named by its path,
/// and then goes to the global hooks.
#[test]
fn a_user_file_is_converted_only_by_its_path_into_the_global_hooks() {
    let ws = Workspace::new();
    let user = ws.base().join("home/.config/nyzhi/config.toml");
    fs::create_dir_all(user.parent().unwrap()).unwrap();
    fs::write(&user, NYZHI).unwrap();
    let out = ws.hookvisor(&["import", "--write"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("the user's nyzhi file serves every workspace; not converted"),
        "{}",
        stderr(&out)
    );
    assert_eq!(fs::read_to_string(&user).unwrap(), NYZHI);
    let out = ws.hookvisor(&["import", user.to_str().unwrap(), "--write"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    let global = ws.global_hooks();
    assert!(global.join("nyzhi-after_turn-0.yml").is_file());
    assert!(!fs::read_to_string(&user).unwrap().contains("agent.hooks"));
    let list = stdout(&ws.hookvisor(&["list"]));
    assert!(list.contains("global:nyzhi-after_turn-0"), "{list}");
}

/// AutoAgent's workspace `hooks` hide the user's: emptied, they stay as `{}`, so the user's
/// do not start running here.
#[test]
fn autoagent_keeps_an_empty_hooks_that_hides_the_users() {
    let ws = Workspace::new();
    let user = ws.base().join("home/.autoagent/config.json");
    fs::create_dir_all(user.parent().unwrap()).unwrap();
    fs::write(
        &user,
        "{\"hooks\": {\"Stop\": [{\"type\": \"command\", \"command\": \"echo user >> trace\"}]}}",
    )
    .unwrap();
    ws.write(
        ".autoagent/config.json",
        "{\"hooks\": {\"Stop\": [{\"type\": \"command\", \"command\": \"echo workspace >> trace\"}]}}",
    );
    let out = ws.hookvisor(&["import", "--write"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(ws.path().join(".autoagent/config.json")).unwrap(),
        "{\"hooks\": {}}"
    );
    let out = ws.hookvisor(&["fire", "session.stop"]);
    assert_eq!(code(&out), 0, "{}", stderr(&out));
    assert_eq!(
        fs::read_to_string(ws.path().join("trace")).unwrap(),
        "workspace\n"
    );
}

/// Hooks moved where `hookvisor.yml` turns hooks off would stop running: refused.
#[test]
fn hooks_are_not_moved_where_nothing_reads_them() {
    let ws = Workspace::new();
    ws.write(".discobot/hookvisor.yml", "sources: [iteratr, nyzhi]\n");
    ws.write(".nyzhi/config.toml", NYZHI);
    let out = ws.hookvisor(&["import", "--write"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out)
            .contains(".nyzhi/config.toml: its hooks would go to the discobot hooks, which"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        fs::read_to_string(ws.path().join(".nyzhi/config.toml")).unwrap(),
        NYZHI
    );
    assert!(hook_files(&ws).is_empty());
}

/// Usage: a mode is required, an unknown file is named.
#[test]
fn usage_errors_exit_2_with_one_line() {
    let ws = Workspace::new();
    assert_eq!(code(&ws.hookvisor(&["import"])), 2);
    assert_eq!(code(&ws.hookvisor(&["import", "--print", "--write"])), 2);
    ws.write("hooks.yml", "hooks: {}\n");
    let out = ws.hookvisor(&["import", "hooks.yml", "--print"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("hooks.yml: not a hook file hookvisor reads in this workspace"),
        "{}",
        stderr(&out)
    );
    let out = ws.hookvisor(&["import", "nyzhi", "--print"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).contains("no .nyzhi/config.toml in"),
        "{}",
        stderr(&out)
    );
    ws.write(".iteratr.hooks.yml", "hooks:\n  post_iteration: [\n");
    let out = ws.hookvisor(&["import", "--write"]);
    assert_eq!(code(&out), 2);
    assert!(
        stderr(&out).starts_with("hookvisor: ") && stderr(&out).contains(".iteratr.hooks.yml:"),
        "{}",
        stderr(&out)
    );
}

/// Import review F2: a tool's file or `.discobot` that a link takes out of the workspace is
/// refused with one line, and nothing outside is written or removed.
#[test]
fn links_out_of_the_workspace_are_refused_and_nothing_changes() {
    // The tool's file is a link to a file elsewhere.
    let ws = Workspace::new();
    let elsewhere = tempfile::tempdir().unwrap();
    let outside = elsewhere.path().join("kept.yml");
    fs::write(&outside, ITERATR).unwrap();
    std::os::unix::fs::symlink(&outside, ws.path().join(".iteratr.hooks.yml")).unwrap();
    let out = ws.hookvisor(&["import", "--write"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    let err = stderr(&out);
    assert!(
        err.contains("a symbolic link leads out of the workspace"),
        "{err}"
    );
    assert_eq!(fs::read_to_string(&outside).unwrap(), ITERATR);
    assert!(!ws.path().join(".discobot/hooks").exists());

    // `.discobot` is a link to a directory elsewhere.
    let ws = Workspace::new();
    ws.write(".iteratr.hooks.yml", ITERATR);
    let target = elsewhere.path().join("discobot");
    fs::create_dir(&target).unwrap();
    std::os::unix::fs::symlink(&target, ws.path().join(".discobot")).unwrap();
    let out = ws.hookvisor(&["import", "--write"]);
    assert_eq!(code(&out), 2, "{}", stderr(&out));
    assert!(
        stderr(&out).contains("a symbolic link leads out of the workspace"),
        "{}",
        stderr(&out)
    );
    assert_eq!(
        fs::read_dir(&target).unwrap().count(),
        0,
        "nothing written outside"
    );
    assert_eq!(
        fs::read_to_string(ws.path().join(".iteratr.hooks.yml")).unwrap(),
        ITERATR
    );
}

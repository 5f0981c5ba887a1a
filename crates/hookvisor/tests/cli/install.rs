//! `hookvisor install|uninstall claude|codex|gemini` on real settings files: ones that already
//! hold other settings and hooks, run twice, corrupt, commented, symlinked; and the command
//! written, run through a shell as the agents run it.

use crate::common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::{Workspace, check, stderr};
use serde_json::{Value, json};

/// One agent: its subcommand, settings file, events and timeout.
struct Agent {
    name: &'static str,
    subcommand: &'static str,
    file: &'static str,
    events: &'static [&'static str],
    timeout: u64,
    /// How many events `install` registers (docs/EVENTS.md §5 rule 17: all the adapter answers).
    all: usize,
    /// The event that announces a user's prompt, and its timeout.
    prompt_event: &'static str,
    prompt_timeout: u64,
    /// Settings as a user might have them: other settings, other hooks on our event and others.
    existing: &'static str,
}

const CLAUDE: Agent = Agent {
    name: "claude",
    subcommand: "adapter claude",
    file: ".claude/settings.json",
    events: &["Stop", "SubagentStop"],
    timeout: 1800,
    all: 12,
    prompt_event: "UserPromptSubmit",
    prompt_timeout: 600,
    existing: r#"{
  "permissions": {
    "allow": ["Bash(npm run lint)"],
    "deny": ["Read(./.env)"]
  },
  "model": "opus",
  "hooks": {
    "PreToolUse": [
      {"matcher": "Bash", "hooks": [{"type": "command", "command": "./guard.sh"}]}
    ],
    "Stop": [
      {"hooks": [{"type": "command", "command": "npx tsc --noEmit", "timeout": 120}]}
    ]
  },
  "env": {"FOO": "1"}
}
"#,
};
const CODEX: Agent = Agent {
    name: "codex",
    subcommand: "adapter codex",
    file: ".codex/hooks.json",
    events: &["Stop", "SubagentStop"],
    timeout: 1800,
    all: 7,
    prompt_event: "UserPromptSubmit",
    prompt_timeout: 600,
    existing: r#"{
  "hooks": {
    "SessionStart": [
      {"matcher": "startup", "hooks": [{"type": "command", "command": "python3 .codex/hooks/session_start.py"}]}
    ],
    "Stop": [
      {"hooks": [{"type": "command", "command": "uvx ruff check", "timeout": 30}]}
    ]
  }
}
"#,
};
const GEMINI: Agent = Agent {
    name: "gemini",
    subcommand: "adapter gemini",
    file: ".gemini/settings.json",
    events: &["AfterAgent"],
    timeout: 1_800_000,
    all: 6,
    prompt_event: "BeforeAgent",
    prompt_timeout: 600_000,
    existing: r#"{
  "theme": "GitHub",
  "tools": {"enableHooks": true},
  "hooks": {
    "disabled": ["auto-test"],
    "BeforeTool": [
      {"matcher": "write_file|replace", "hooks": [{"name": "secret-scanner", "type": "command", "command": "$GEMINI_PROJECT_DIR/.gemini/hooks/scan.sh", "timeout": 5000}]}
    ],
    "AfterAgent": [
      {"hooks": [{"name": "auto-test", "type": "command", "command": "npm test", "timeout": 60000}]}
    ]
  }
}
"#,
};
const AGENTS: [&Agent; 3] = [&CLAUDE, &CODEX, &GEMINI];

fn exe() -> &'static str {
    env!("CARGO_BIN_EXE_hookvisor")
}

/// The `--workspace` `install` writes after the subcommand (a test workspace's path needs no
/// quotes).
fn pinned(ws: &Workspace) -> String {
    format!(" --workspace {}", ws.path().display())
}

fn read_json(path: &Path) -> Value {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}\n{text}", path.display()))
}

/// The entries of ours under `event`, whatever group holds them.
fn ours<'a>(settings: &'a Value, event: &str, subcommand: &str) -> Vec<&'a Value> {
    settings["hooks"][event]
        .as_array()
        .into_iter()
        .flatten()
        .flat_map(|group| group["hooks"].as_array().into_iter().flatten())
        .filter(|hook| {
            hook["command"]
                .as_str()
                .is_some_and(|c| c.contains("hookvisor") && c.contains(subcommand))
        })
        .collect()
}

/// `settings` with every entry of ours taken out (and the groups, events emptied by that).
fn without_ours(mut settings: Value, subcommand: &str) -> Value {
    if let Some(hooks) = settings.get_mut("hooks").and_then(Value::as_object_mut) {
        for groups in hooks.values_mut() {
            if let Some(groups) = groups.as_array_mut() {
                groups.retain(|group| {
                    !group["hooks"].as_array().is_some_and(|list| {
                        list.iter().all(|h| {
                            h["command"]
                                .as_str()
                                .is_some_and(|c| c.contains(subcommand))
                        })
                    })
                });
            }
        }
        hooks.retain(|_, groups| groups.as_array().is_none_or(|g| !g.is_empty()));
    }
    settings
}

/// `hookvisor install`, with no `codex` on PATH and a private CODEX_HOME (the real-client
/// suite covers trust through a real Codex).
fn install(ws: &Workspace, args: &[&str]) -> Output {
    ws.hookvisor_command()
        .arg("install")
        .args(args)
        .env("PATH", "/usr/bin:/bin")
        .env("CODEX_HOME", ws.base().join("codex-home"))
        .output()
        .expect("run hookvisor install")
}

fn uninstall(ws: &Workspace, args: &[&str]) -> Output {
    ws.hookvisor(&[&["uninstall"], args].concat())
}

fn backups(dir: &Path, file_name: &str) -> Vec<PathBuf> {
    let prefix = format!("{file_name}.bak-");
    let mut found: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_str()
                .unwrap()
                .starts_with(&prefix)
        })
        .collect();
    found.sort();
    found
}

#[test]
fn install_keeps_every_other_setting_and_hook_and_is_idempotent() {
    for agent in AGENTS {
        let ws = Workspace::new();
        let path = ws.write(agent.file, agent.existing);
        let before: Value = serde_json::from_str(agent.existing).unwrap();

        let said = check(install(&ws, &[agent.name]), "install");
        assert!(said.contains(path.to_str().unwrap()), "{said}");
        let after = read_json(&path);
        for event in agent.events {
            let entries = ours(&after, event, agent.subcommand);
            assert_eq!(entries.len(), 1, "{}: {event}: {after:#}", agent.name);
            assert_eq!(
                entries[0]["command"],
                format!("{} {}{}", exe(), agent.subcommand, pinned(&ws))
            );
            assert_eq!(entries[0]["type"], "command");
            assert_eq!(entries[0]["timeout"], agent.timeout);
        }
        let prompt = ours(&after, agent.prompt_event, agent.subcommand);
        assert_eq!(prompt.len(), 1, "{}: {after:#}", agent.name);
        assert_eq!(
            prompt[0]["command"],
            format!("{} {}{}", exe(), agent.subcommand, pinned(&ws))
        );
        assert_eq!(prompt[0]["timeout"], agent.prompt_timeout);
        assert!(
            said.contains(agent.prompt_event),
            "install names every event: {said}"
        );
        assert_eq!(
            without_ours(after.clone(), agent.subcommand),
            before,
            "{}",
            agent.name
        );
        // Keys stay where the user put them.
        let text = fs::read_to_string(&path).unwrap();
        let first_key = agent.existing.split('"').nth(1).unwrap();
        assert!(
            text.trim_start()
                .starts_with(&format!("{{\n  \"{first_key}\"")),
            "{text}"
        );

        let once = fs::read(&path).unwrap();
        let said = check(install(&ws, &[agent.name]), "install again");
        assert!(said.contains("already installed"), "{said}");
        assert_eq!(
            fs::read(&path).unwrap(),
            once,
            "{}: second install changed the file",
            agent.name
        );

        let said = check(uninstall(&ws, &[agent.name]), "uninstall");
        assert!(said.contains(&format!("removed {}", agent.all)), "{said}");
        assert_eq!(read_json(&path), before, "{}", agent.name);
        let said = check(uninstall(&ws, &[agent.name]), "uninstall again");
        assert!(said.contains("nothing to remove"), "{said}");
        assert_eq!(read_json(&path), before);
        assert!(backups(path.parent().unwrap(), "settings.json").is_empty());
    }
}

#[test]
fn install_creates_a_missing_file_and_uninstall_leaves_the_rest() {
    for agent in AGENTS {
        let ws = Workspace::new();
        check(install(&ws, &[agent.name]), "install");
        let path = ws.path().join(agent.file);
        let settings = read_json(&path);
        for event in agent.events.iter().chain([&agent.prompt_event]) {
            assert_eq!(ours(&settings, event, agent.subcommand).len(), 1);
        }
        check(uninstall(&ws, &[agent.name]), "uninstall");
        assert_eq!(read_json(&path), json!({}));
    }
}

#[test]
fn uninstall_removes_only_ours() {
    let ws = Workspace::new();
    let path = ws.write(
        CLAUDE.file,
        &format!(
            r#"{{"hooks": {{"Stop": [{{"hooks": [
                {{"type": "command", "command": "echo hookvisor rocks"}},
                {{"type": "command", "command": "{exe} claude-stop --fail-closed"}},
                {{"type": "command", "command": "{exe} codex-stop"}}
            ]}}]}}}}"#,
            exe = exe()
        ),
    );
    let said = check(uninstall(&ws, &["claude"]), "uninstall");
    assert!(said.contains("removed 1 "), "{said}");
    let commands: Vec<String> = read_json(&path)["hooks"]["Stop"][0]["hooks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["command"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        commands,
        [
            "echo hookvisor rocks".to_owned(),
            format!("{} codex-stop", exe())
        ]
    );
}

#[test]
fn a_corrupt_file_is_backed_up_not_overwritten() {
    for agent in AGENTS {
        let ws = Workspace::new();
        let corrupt = "{\"hooks\": {\"Stop\": [ oops\n";
        let path = ws.write(agent.file, corrupt);

        let output = install(&ws, &[agent.name]);
        check(output.clone(), "install over a corrupt file");
        let dir = path.parent().unwrap();
        let name = path.file_name().unwrap().to_str().unwrap();
        let saved = backups(dir, name);
        assert_eq!(saved.len(), 1, "{}: {saved:?}", agent.name);
        assert_eq!(fs::read_to_string(&saved[0]).unwrap(), corrupt);
        assert!(
            stderr(&output).contains(saved[0].to_str().unwrap()),
            "must say where the original went: {}",
            stderr(&output)
        );
        let settings = read_json(&path);
        assert_eq!(ours(&settings, agent.events[0], agent.subcommand).len(), 1);

        // Uninstall never rewrites what it cannot read.
        fs::write(&path, corrupt).unwrap();
        let output = uninstall(&ws, &[agent.name]);
        assert_eq!(output.status.code(), Some(2), "{}", stderr(&output));
        assert!(
            stderr(&output).contains("not valid JSON"),
            "{}",
            stderr(&output)
        );
        assert_eq!(fs::read_to_string(&path).unwrap(), corrupt);
    }
}

#[test]
fn a_commented_gemini_settings_file_is_kept_as_a_backup() {
    let ws = Workspace::new();
    let commented = "{\n  // my theme\n  \"theme\": \"GitHub\" /* dark later */\n}\n";
    let path = ws.write(GEMINI.file, commented);
    let output = install(&ws, &["gemini"]);
    check(output.clone(), "install");
    assert!(stderr(&output).contains("comments"), "{}", stderr(&output));
    let saved = backups(path.parent().unwrap(), "settings.json");
    assert_eq!(fs::read_to_string(&saved[0]).unwrap(), commented);
    let settings = read_json(&path);
    assert_eq!(settings["theme"], "GitHub");
    assert_eq!(ours(&settings, "AfterAgent", "adapter gemini").len(), 1);
}

#[test]
fn an_unexpected_shape_is_reported_and_left_alone() {
    let ws = Workspace::new();
    let odd = r#"{"hooks": {"Stop": {"hooks": []}}}"#;
    let path = ws.write(CLAUDE.file, odd);
    let output = install(&ws, &["claude"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(
        stderr(&output).contains("hooks.Stop"),
        "{}",
        stderr(&output)
    );
    assert_eq!(fs::read_to_string(&path).unwrap(), odd);
}

#[test]
fn user_level_writes_the_home_settings() {
    let ws = Workspace::new();
    let home = ws.base().join("home");
    for agent in [&CLAUDE, &GEMINI] {
        check(
            install(&ws, &[agent.name, "--user-level"]),
            "install --user-level",
        );
        let settings = read_json(&home.join(agent.file));
        let entries = ours(&settings, agent.events[0], agent.subcommand);
        assert_eq!(entries.len(), 1);
        // Every project's: no workspace pinned, the adapter finds each one.
        assert_eq!(
            entries[0]["command"],
            format!("{} {}", exe(), agent.subcommand)
        );
        assert!(!ws.path().join(agent.file).exists());
    }
    let output = ws
        .hookvisor_command()
        .args(["install", "codex", "--user-level"])
        .env("PATH", "/usr/bin:/bin")
        .env_remove("CODEX_HOME")
        .output()
        .unwrap();
    check(output, "install codex");
    assert!(home.join(".codex/hooks.json").is_file());

    let codex_home = ws.base().join("codex-home");
    let output = ws
        .hookvisor_command()
        .args(["install", "codex", "--user-level"])
        .env("PATH", "/usr/bin:/bin")
        .env("CODEX_HOME", &codex_home)
        .output()
        .unwrap();
    check(output, "install codex with CODEX_HOME");
    let settings = read_json(&codex_home.join("hooks.json"));
    assert_eq!(ours(&settings, "Stop", "adapter codex").len(), 1);
}

#[test]
fn a_symlinked_settings_file_stays_a_symlink_and_keeps_its_mode() {
    let ws = Workspace::new();
    let real = ws.path().join("dotfiles/claude-settings.json");
    fs::create_dir_all(real.parent().unwrap()).unwrap();
    fs::write(&real, r#"{"model": "opus"}"#).unwrap();
    fs::set_permissions(&real, fs::Permissions::from_mode(0o600)).unwrap();
    fs::create_dir_all(ws.path().join(".claude")).unwrap();
    let link = ws.path().join(CLAUDE.file);
    std::os::unix::fs::symlink(&real, &link).unwrap();

    check(install(&ws, &["claude"]), "install");
    assert!(
        fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    let settings = read_json(&real);
    assert_eq!(settings["model"], "opus");
    assert_eq!(ours(&settings, "Stop", "adapter claude").len(), 1);
    assert_eq!(
        fs::metadata(&real).unwrap().permissions().mode() & 0o777,
        0o600
    );
}

#[test]
fn the_written_command_runs_the_adapter_through_a_shell() {
    // Options given to install are repeated, quoted, in the command.
    let ws = Workspace::git();
    ws.stage("README.md", "hello\n");
    check(ws.commit("initial"), "initial commit");
    ws.hook(
        "lint.sh",
        "file",
        "pattern: '*.txt'",
        "echo bad notes; exit 1",
    );
    ws.write("notes.txt", "x\n");
    let state = ws.base().join("state dir's");
    check(
        install(
            &ws,
            &[
                "claude",
                "--fail-closed",
                "--state-dir",
                state.to_str().unwrap(),
            ],
        ),
        "install",
    );
    let settings = read_json(&ws.path().join(CLAUDE.file));
    let command = ours(&settings, "Stop", "adapter claude")[0]["command"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(command.contains("--fail-closed"), "{command}");
    assert!(command.contains(r"'\''"), "quoted: {command}");

    // As Claude Code runs it: through a shell, the hook JSON on stdin.
    let stdin = format!(
        r#"{{"session_id":"s1","cwd":"{}","hook_event_name":"Stop","stop_hook_active":false}}"#,
        ws.path().display()
    );
    let mut child = Command::new("sh")
        .args(["-c", &command])
        .env_remove("HOOKVISOR_URL")
        .env_remove("HOOKVISOR_STATE_DIR")
        .env("HOME", ws.base().join("home"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write as _;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let output = child.wait_with_output().unwrap();
    let stdout = check(output, "the installed command");
    let answer: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(answer["decision"], "block");
    assert!(answer["reason"].as_str().unwrap().contains("bad notes"));
    assert!(
        state.join("status.json").is_file(),
        "the --state-dir given at install is used"
    );
}

/// Runs an installed `command` as the agents do: through a shell, `input` on stdin.
fn run_installed(ws: &Workspace, command: &str, input: &Value) -> Output {
    use std::io::Write as _;
    let mut child = Command::new("sh")
        .args(["-c", command])
        .current_dir(ws.path())
        .env_remove("HOOKVISOR_URL")
        .env("HOOKVISOR_STATE_DIR", ws.state_dir())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stdin = input.to_string();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

#[test]
fn the_installed_prompt_event_bounds_re_prompts_whatever_the_flag_says() {
    // Each agent's turn end as its real client sends it in a re-prompted turn where the model
    // used a tool: Gemini CLI 0.61 says stop_hook_active false there. The prompt event that
    // `install` registered is what tells the user's turn apart.
    for agent in AGENTS {
        let ws = Workspace::git();
        ws.stage("README.md", "hello\n");
        check(ws.commit("initial"), "initial commit");
        ws.hook(
            "lint.sh",
            "file",
            "pattern: '*.txt'",
            "echo bad notes; exit 1",
        );
        check(install(&ws, &[agent.name]), "install");
        let settings = read_json(&ws.path().join(agent.file));
        let command = |event: &str| {
            ours(&settings, event, agent.subcommand)[0]["command"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        let (prompt, stop) = (command(agent.prompt_event), command(agent.events[0]));
        let session = json!({"session_id": "s1", "cwd": ws.path()});
        let event = |name: &str, extra: Value| {
            let mut input = session.clone();
            input["hook_event_name"] = json!(name);
            for (k, v) in extra.as_object().unwrap() {
                input[k] = v.clone();
            }
            input
        };
        let said = run_installed(
            &ws,
            &prompt,
            &event(agent.prompt_event, json!({"prompt": "add notes"})),
        );
        assert_eq!(check(said, "the prompt event"), "", "{}", agent.name);
        let mut seen = Vec::new();
        for turn in 0..5 {
            ws.write("notes.txt", &format!("edit {turn}\n"));
            let input = event(
                agent.events[0],
                json!({"stop_hook_active": false, "prompt": "add notes"}),
            );
            let stdout = check(run_installed(&ws, &stop, &input), "the turn end");
            seen.push(if stdout.is_empty() {
                "stop".to_owned()
            } else {
                let reason = serde_json::from_str::<Value>(&stdout).unwrap()["reason"]
                    .as_str()
                    .unwrap()
                    .to_owned();
                reason[reason.rfind("(Attempt ").unwrap()..].to_owned()
            });
        }
        assert_eq!(
            seen,
            [
                "(Attempt 1/3)",
                "(Attempt 2/3)",
                "(Attempt 3/3)",
                "stop",
                "stop"
            ],
            "{}",
            agent.name
        );
    }
}

#[test]
fn install_codex_says_how_to_trust_the_project_and_the_hooks() {
    let ws = Workspace::new();
    let said = check(install(&ws, &["codex"]), "install codex");
    let config = ws.base().join("codex-home/config.toml");
    let want = [
        "Codex runs these hooks only once it trusts them, and skips them silently".to_owned(),
        format!("add to {}", config.display()),
        format!("[projects.\"{}\"]", ws.path().display()),
        "trust_level = \"trusted\"".to_owned(),
        "type /hooks and trust the hookvisor entries".to_owned(),
        "run `hookvisor install codex` again".to_owned(),
        "`codex` is not on PATH".to_owned(),
    ];
    for line in want {
        assert!(said.contains(&line), "missing {line:?} in:\n{said}");
    }
    // Said again when nothing changed: the hooks may still be untrusted.
    let again = check(install(&ws, &["codex"]), "install codex again");
    assert!(again.contains("type /hooks"), "{again}");
    // The user's own hooks file needs no project trust.
    let user = check(
        install(&ws, &["codex", "--user-level"]),
        "install --user-level",
    );
    assert!(!user.contains("Trust the project"), "{user}");
    assert!(user.contains("install codex` again --user-level"), "{user}");
    // Other agents need no such step.
    assert!(!check(install(&ws, &["claude"]), "install claude").contains("trust"));
}

/// Re-installing over an old `claude-stop` registration upgrades it in place to `adapter
/// claude` and adds the other events; uninstall then leaves the user's own hooks exactly as
/// they were written.
#[test]
fn install_upgrades_an_old_turn_end_registration() {
    let ws = Workspace::new();
    let foreign_only = r#"{
  "hooks": {
    "Stop": [
      {
        "hooks": [
          {
            "type": "command",
            "command": "npx tsc --noEmit"
          }
        ]
      }
    ]
  }
}
"#;
    let old = format!(
        r#"{{"hooks": {{
            "Stop": [{{"hooks": [{{"type": "command", "command": "npx tsc --noEmit"}},
                                {{"type": "command", "command": "{exe} claude-stop", "timeout": 1800}}]}}],
            "SubagentStop": [{{"hooks": [{{"type": "command", "command": "{exe} claude-stop", "timeout": 1800}}]}}],
            "UserPromptSubmit": [{{"hooks": [{{"type": "command", "command": "{exe} claude-stop", "timeout": 60}}]}}]
        }}}}"#,
        exe = exe()
    );
    let path = ws.write(CLAUDE.file, &old);
    check(install(&ws, &["claude"]), "install");
    let text = fs::read_to_string(&path).unwrap();
    assert!(!text.contains("claude-stop"), "{text}");
    let settings = read_json(&path);
    let stop = settings["hooks"]["Stop"][0]["hooks"].as_array().unwrap();
    assert_eq!(stop[0]["command"], "npx tsc --noEmit");
    assert_eq!(
        stop[1]["command"],
        format!("{} adapter claude{}", exe(), pinned(&ws))
    );
    for (event, _) in [
        ("PreToolUse", 0),
        ("SessionEnd", 0),
        ("UserPromptSubmit", 0),
    ] {
        assert_eq!(ours(&settings, event, "adapter claude").len(), 1, "{event}");
    }
    assert_eq!(settings["hooks"].as_object().unwrap().len(), CLAUDE.all);
    let once = fs::read(&path).unwrap();
    check(install(&ws, &["claude"]), "install again");
    assert_eq!(fs::read(&path).unwrap(), once, "install is idempotent");
    let said = check(uninstall(&ws, &["claude"]), "uninstall");
    assert!(said.contains(&format!("removed {} ", CLAUDE.all)), "{said}");
    assert_eq!(fs::read_to_string(&path).unwrap(), foreign_only);
}

#[test]
fn a_link_out_of_the_workspace_is_refused_and_its_target_left_alone() {
    // The agent can write the workspace: a link planted there must not make the user's
    // `install` or `uninstall` rewrite a file of the agent's choosing.
    let ws = Workspace::new();
    let victim = ws.base().join("bashrc");
    fs::write(&victim, "export PATH=/usr/bin\n").unwrap();
    fs::create_dir_all(ws.path().join(".claude")).unwrap();
    std::os::unix::fs::symlink(&victim, ws.path().join(CLAUDE.file)).unwrap();
    for out in [install(&ws, &["claude"]), uninstall(&ws, &["claude"])] {
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(stderr(&out).contains("leads out of the workspace"));
    }
    assert_eq!(
        fs::read_to_string(&victim).unwrap(),
        "export PATH=/usr/bin\n"
    );
    assert!(backups(ws.base(), "bashrc").is_empty());

    // A linked `.claude` directory leading out is refused the same way.
    let ws = Workspace::new();
    let elsewhere = ws.base().join("elsewhere");
    fs::create_dir_all(&elsewhere).unwrap();
    std::os::unix::fs::symlink(&elsewhere, ws.path().join(".claude")).unwrap();
    let out = install(&ws, &["claude"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
}

/// `install` binds every event a hook of the workspace needs (docs/EVENTS.md §3 "CLI"): an agent's
/// raw event (`claude.PreCompact`), which the adapter then fires, and Codex's `SessionEnd`
/// for `session.end`; a raw event of another agent is not written.
#[test]
fn install_binds_the_raw_events_the_hooks_name() {
    let ws = Workspace::git();
    let log = ws.base().join("compacted");
    ws.write(
        ".discobot/hooks/compact.yml",
        &format!(
            "---\nevent: claude.PreCompact\nrun: echo \"${{agent.trigger}}\" >> '{}'\n---\n",
            log.display()
        ),
    );
    ws.write(
        ".discobot/hooks/gemini-model.yml",
        "---\nevent: gemini.BeforeModel\nrun: 'true'\n---\n",
    );
    check(install(&ws, &["claude"]), "install claude");
    let settings = read_json(&ws.path().join(CLAUDE.file));
    let entries = ours(&settings, "PreCompact", "adapter claude");
    assert_eq!(entries.len(), 1, "{settings:#}");
    assert!(ours(&settings, "BeforeModel", "adapter claude").is_empty());
    // Installing again changes nothing.
    let again = check(install(&ws, &["claude"]), "install claude again");
    assert!(again.contains("already installed"), "{again}");

    let command = entries[0]["command"].as_str().unwrap();
    let input = json!({
        "session_id": "s1",
        "cwd": ws.path(),
        "hook_event_name": "PreCompact",
        "trigger": "manual",
        "custom_instructions": ""
    });
    let out = run_installed(&ws, command, &input);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(fs::read_to_string(&log).unwrap(), "manual\n");

    check(install(&ws, &["codex"]), "install codex");
    let settings = read_json(&ws.path().join(CODEX.file));
    assert_eq!(
        ours(&settings, "SessionEnd", "adapter codex").len(),
        1,
        "{settings:#}"
    );
    assert!(ours(&settings, "PreCompact", "adapter codex").is_empty());
}

/// `check` warns, one line per hook naming its file and the fix, about a hook that no
/// installed agent can fire: a raw event of an agent that is not installed, or not bound
/// since the hook was added; an agent's event no installed agent's row maps.
#[test]
fn check_warns_about_hooks_no_installed_agent_fires() {
    let ws = Workspace::git();
    for (file, event) in [
        ("a", "claude.PreCompact"),
        ("b", "gemini.BeforeModel"),
        ("c", "team.idle"),
        ("d", "tool.after"),
    ] {
        ws.write(
            &format!(".discobot/hooks/{file}.yml"),
            &format!("---\nevent: {event}\nrun: 'true'\n---\n"),
        );
    }
    let warnings = |ws: &Workspace| -> Vec<String> {
        let out = ws
            .hookvisor_command()
            .arg("check")
            .env("CODEX_HOME", ws.base().join("codex-home"))
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", common::stdout(&out));
        common::stdout(&out)
            .lines()
            .filter(|l| l.contains("warning:"))
            .map(str::to_owned)
            .collect()
    };
    check(install(&ws, &["codex"]), "install codex");
    let said = warnings(&ws);
    assert_eq!(said.len(), 3, "{said:#?}");
    assert!(
        said[0].starts_with(".discobot/hooks/a.yml:1: warning: "),
        "{}",
        said[0]
    );
    assert!(
        said[0].contains("`hookvisor install claude`"),
        "{}",
        said[0]
    );
    assert!(
        said[1].starts_with(".discobot/hooks/b.yml:1: warning: "),
        "{}",
        said[1]
    );
    assert!(
        said[1].contains("`hookvisor install gemini`"),
        "{}",
        said[1]
    );
    assert!(
        said[2].starts_with(".discobot/hooks/c.yml:1: warning: "),
        "{}",
        said[2]
    );
    assert!(said[2].contains("team.idle"), "{}", said[2]);

    check(install(&ws, &["claude"]), "install claude");
    ws.write(
        ".discobot/hooks/e.yml",
        "---\nevent: claude.Notification\nrun: 'true'\n---\n",
    );
    let said = warnings(&ws);
    assert_eq!(said.len(), 2, "{said:#?}");
    assert!(
        said[0].starts_with(".discobot/hooks/b.yml:1: warning: "),
        "{}",
        said[0]
    );
    assert!(
        said[1].starts_with(".discobot/hooks/e.yml:1: warning: "),
        "{}",
        said[1]
    );
    assert!(said[1].contains("Notification"), "{}", said[1]);
    assert!(
        said[1].contains("`hookvisor install claude`"),
        "{}",
        said[1]
    );
}

/// Attack: `check` and `list` read the agents' settings files to say which hooks never fire,
/// and the agent writes the workspace's: a FIFO (or a link to `/dev/zero`) planted as
/// `.claude/settings.json` must not hang them or grow their memory without bound. The file is
/// skipped as unreadable and `check` still answers.
#[test]
fn check_is_not_stalled_by_a_fifo_planted_as_the_settings() {
    let ws = Workspace::git();
    ws.write(
        ".discobot/hooks/a.yml",
        "---\nevent: claude.PreCompact\nrun: 'true'\n---\n",
    );
    fs::create_dir_all(ws.path().join(".claude")).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(ws.path().join(".claude/settings.json"))
        .status()
        .unwrap();
    assert!(made.success());
    for command in ["check", "list"] {
        let mut cmd = std::process::Command::new("timeout");
        cmd.args(["-k", "5", "20"])
            .arg(env!("CARGO_BIN_EXE_hookvisor"));
        let out = cmd
            .arg(command)
            .current_dir(ws.path())
            .env("HOOKVISOR_STATE_DIR", ws.state_dir())
            .env("HOME", ws.base().join("home"))
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{command}: {:?} {}",
            out.status,
            common::stdout(&out)
        );
    }
}

/// Attack: root runs `install --user-level` for the user's HOME (owned by hv-test), whose
/// settings file the agent made a link to a file only root can write. Root never follows it:
/// it refuses in one line (exit 2) naming the directory and the fix, and the root file and
/// its directory are as they were. `uninstall` likewise.
#[test]
fn root_follows_no_link_in_a_home_another_account_can_change() {
    let Some(_one_at_a_time) = common::ensure_test_user() else {
        return;
    };
    let user = common::test_user();
    let ws = Workspace::new();
    fs::set_permissions(ws.base(), fs::Permissions::from_mode(0o755)).unwrap();
    let root_only = ws.base().join("root-only");
    fs::create_dir(&root_only).unwrap();
    let secret = root_only.join("shadow");
    fs::write(&secret, "root:!:20000::::::\n").unwrap();
    fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
    fs::set_permissions(&root_only, fs::Permissions::from_mode(0o700)).unwrap();
    let home = ws.base().join("home");
    fs::create_dir_all(home.join(".claude")).unwrap();
    std::os::unix::fs::symlink(&secret, home.join(CLAUDE.file)).unwrap();
    let chown = Command::new("chown")
        .args(["-hR", &format!("{}:{}", user.uid, user.gid)])
        .arg(&home)
        .status()
        .unwrap();
    assert!(chown.success());

    for out in [
        install(&ws, &["claude", "--user-level"]),
        uninstall(&ws, &["claude", "--user-level"]),
    ] {
        let err = stderr(&out);
        assert_eq!(
            fs::read_to_string(&secret).unwrap(),
            "root:!:20000::::::\n",
            "{err}"
        );
        let names: Vec<_> = fs::read_dir(&root_only)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["shadow"], "{err}");
        assert_eq!(out.status.code(), Some(2), "{err}");
        assert_eq!(err.lines().count(), 1, "{err}");
        assert!(
            err.contains(&home.display().to_string()) && err.contains("as that user"),
            "{err}"
        );
    }
}

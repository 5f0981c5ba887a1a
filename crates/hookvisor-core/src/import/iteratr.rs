//! iteratr's `.iteratr.hooks.yml` (docs/upstream/iteratr-hooks.md), read by the table of docs/EVENTS.md
//! §2.2: `command` → `run`, `{{session}}`…`{{error}}` → references, 30 s, `block_on: never`,
//! `pipe_output` as written (default `false`, v2).
//!
//! | iteratr | event | its variables |
//! |---|---|---|
//! | `session_start` | `session.start` | session |
//! | `pre_iteration` | `turn.start` | session, iteration |
//! | `post_iteration` | `turn.end` | session, iteration |
//! | `session_end` | `session.end` | session |
//! | `on_task_complete` | `task.complete` | session, task_id, task_content |
//! | `on_error` | `error` | session, iteration, error |
//!
//! iteratr runs every hook whatever it exits with ("Graceful error handling (continue session
//! with error in output)"), hence `block_on: never` and `on_failure: continue`; what a failing
//! hook prints reaches the agent only when piped. An `on_error` hook's piped output is the
//! recovery prompt of `hookvisor loop`, as in iteratr. A `{{name}}` iteratr does not set for the
//! hook's event (iteratr put an empty value) is a warning: hookvisor fails such a run rather
//! than pass an empty value (§5 rule 20). A `pre_iteration` hook without `pipe_output` is a
//! warning too: iteratr v2 stopped piping it by default, and its migration note asks for the
//! line.
//!
//! Two differences from iteratr's Go loader, both about bad files: the YAML is read as
//! hookvisor reads all YAML the agent can write (no anchors, aliases or repeated keys: such a
//! file is skipped whole, with its line), and a value of the wrong type skips only its entry,
//! named by `check`, where iteratr dropped the whole file and ran no hook.

#![forbid(unsafe_code)]

use std::time::Duration;

use serde::Deserialize;
use serde_json::Value as Json;
use serde_saphyr::Spanned;

use super::command::{Placeholders, to_run};
use super::json_lines::Step;
use super::{
    ImportNote, Imported, ImportedHook, Unparsable, YamlEntry as Entry, YamlHooks, base_spec,
};
use crate::event::{Command, Event, HookAction, PipeOutput};
use crate::policy::{BlockOn, OnFailure, Phase, ReasonFrom};
use crate::template::ShellTemplate;

/// iteratr's default timeout ("30 second default timeout").
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The names iteratr expands.
const NAMES: [&str; 5] = ["session", "iteration", "task_id", "task_content", "error"];

/// iteratr's hook types: their event and the names iteratr sets for them.
const TYPES: [(&str, Event, &[&str]); 6] = [
    ("session_start", Event::SessionStart, &["session"]),
    ("pre_iteration", Event::TurnStart, &["session", "iteration"]),
    ("post_iteration", Event::TurnEnd, &["session", "iteration"]),
    ("session_end", Event::SessionEnd, &["session"]),
    (
        "on_task_complete",
        Event::TaskComplete,
        &["session", "task_id", "task_content"],
    ),
    ("on_error", Event::Error, &["session", "iteration", "error"]),
];

/// The keys of an entry (iteratr's `HookConfig`).
const KEYS: [&str; 3] = ["command", "timeout", "pipe_output"];

/// The file as YAML reads it. iteratr's Go loader ignores unknown top-level keys, and so does
/// this one; `version` is read by nobody.
#[derive(Deserialize)]
struct File {
    #[serde(default)]
    hooks: Option<YamlHooks>,
}

/// Reads `.iteratr.hooks.yml` (the module documentation).
pub(crate) fn read(text: &str) -> Result<Imported, Unparsable> {
    let mut imported = Imported::default();
    if text.trim().is_empty() {
        return Ok(imported);
    }
    let file: File =
        serde_saphyr::from_str_with_options(text, crate::frontmatter::strict_options())
            .map_err(super::yaml_unparsable)?;
    for (line, name, entries) in super::yaml_hook_lists(text, file.hooks) {
        let Some((_, event, names)) = TYPES.iter().find(|(n, _, _)| *n == name) else {
            imported.problems.push(ImportNote {
                line,
                message: format!(
                    "unknown iteratr hook type '{name}', which iteratr ignores too; use one of {}",
                    TYPES.map(|(n, _, _)| n).join(", ")
                ),
            });
            continue;
        };
        for (index, entry) in entries.iter().enumerate() {
            match entry_hook(&name, event, names, entry, &mut imported.warnings) {
                Ok(mut hook) => {
                    hook.entry = vec![
                        Step::Key("hooks".into()),
                        Step::Key(name.clone()),
                        Step::Index(index),
                    ];
                    imported.hooks.push(hook);
                }
                Err(note) => imported.problems.push(note),
            }
        }
    }
    Ok(imported.in_line_order())
}

/// One entry of the hook type `name`, or why it does not run.
fn entry_hook(
    name: &str,
    event: &Event,
    names: &[&str],
    entry: &Spanned<Entry>,
    warnings: &mut Vec<ImportNote>,
) -> Result<ImportedHook, ImportNote> {
    let line = super::saphyr_line(entry);
    let at = |key: &str| entry.value.get(key).map_or(line, super::saphyr_line);
    let note = |line: usize, message: String| ImportNote { line, message };
    for key in entry.value.keys().filter(|k| !KEYS.contains(&k.as_str())) {
        warnings.push(note(
            at(key),
            format!(
                "unknown key '{key}' is ignored, as iteratr ignores it; known keys: {}",
                KEYS.join(", ")
            ),
        ));
    }
    let command = match entry.value.get("command").map(|c| &c.value) {
        Some(Json::String(c)) if !c.trim().is_empty() => c,
        Some(_) => {
            return Err(note(
                at("command"),
                "command: give the shell command as text".into(),
            ));
        }
        None => {
            return Err(note(
                line,
                "no 'command'; give one such as 'command: \"go test ./...\"'".into(),
            ));
        }
    };
    let timeout = match entry.value.get("timeout").map(|t| &t.value) {
        None => DEFAULT_TIMEOUT,
        // iteratr takes 0 as unset.
        Some(Json::Number(n)) if n.as_u64() == Some(0) => DEFAULT_TIMEOUT,
        Some(Json::Number(n)) if n.as_u64().is_some() => {
            Duration::from_secs(n.as_u64().unwrap_or_default())
        }
        Some(other) => {
            return Err(note(
                at("timeout"),
                format!(
                    "timeout: {other} is no whole number of seconds; write one such as 'timeout: 30'"
                ),
            ));
        }
    };
    let pipe_output = match entry.value.get("pipe_output").map(|p| &p.value) {
        None | Some(Json::Bool(false)) => PipeOutput::Never,
        Some(Json::Bool(true)) => PipeOutput::Always,
        Some(other) => {
            return Err(note(
                at("pipe_output"),
                format!("pipe_output: {other} is not true or false"),
            ));
        }
    };
    if name == "pre_iteration" && !entry.value.contains_key("pipe_output") {
        warnings.push(note(
            line,
            "pre_iteration without pipe_output: since iteratr v2 its output no longer reaches \
             the agent (nor here); add 'pipe_output: true' to keep v1's behaviour, or \
             'pipe_output: false' to say it is meant"
                .into(),
        ));
    }
    let translated = to_run(command, Placeholders::Named(&NAMES));
    for unset in translated
        .names
        .iter()
        .filter(|n| !names.contains(&n.as_str()))
    {
        warnings.push(note(
            at("command"),
            format!(
                "{{{{{unset}}}}} is not set for {name} hooks (iteratr put an empty value); \
                 hookvisor fails such a run instead: remove it or move the hook"
            ),
        ));
    }
    super::refuse_single_quoted(&translated, at("command"))?;
    let run = translated.text;
    let template =
        ShellTemplate::parse(&run).map_err(|e| note(at("command"), format!("command: {e}")))?;
    let mut spec = base_spec(event.clone(), HookAction::Command(Command::Run(template)));
    spec.phase = Phase::Pre;
    spec.await_ = true;
    spec.block_on = BlockOn::Never;
    spec.on_failure = OnFailure::Continue;
    spec.pipe_output = pipe_output;
    spec.reason_from = ReasonFrom::Stderr;
    Ok(ImportedHook {
        source_event: name.to_owned(),
        line,
        title: super::title(command),
        spec,
        timeout,
        pattern: None,
        run: Some(run),
        entry: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::tests::{golden, notes};

    /// docs/upstream/iteratr-hooks.md, "Config Format".
    const CONFIG_FORMAT: &str = include_str!("reference/iteratr.hooks.yml");

    /// Every field of one iteratr entry, as the golden files write them.
    fn entry(event: &str, timeout: u64, pipe: &str, run: &str) -> String {
        format!(
            "event: {event}\nphase: pre\nawait: true\ntimeout: {timeout}\nblock_on: never\n\
             on_failure: continue\npipe_output: {pipe}\nreason_from: stderr\naction: command\n\
             run: \"{run}\"\n"
        )
    }

    #[test]
    fn the_config_format_example() {
        let imported = read(CONFIG_FORMAT).unwrap();
        assert!(imported.problems.is_empty() && imported.warnings.is_empty());
        let want = [
            (
                "session_start",
                5,
                entry("session.start", 60, "true", "go build ./..."),
            ),
            (
                "pre_iteration",
                10,
                entry("turn.start", 30, "true", "golangci-lint run ./..."),
            ),
            (
                "pre_iteration",
                13,
                entry("turn.start", 5, "true", "git status --short"),
            ),
            (
                "post_iteration",
                18,
                entry("turn.end", 120, "true", "go test ./... -short"),
            ),
            (
                "session_end",
                23,
                entry("session.end", 30, "false", "git push origin HEAD"),
            ),
            (
                "on_task_complete",
                28,
                entry(
                    "task.complete",
                    30,
                    "true",
                    "./scripts/validate.sh ${task_id}",
                ),
            ),
            ("on_error", 33, entry("error", 10, "true", "git diff HEAD")),
        ]
        .map(|(event, line, text)| format!("# {event} line {line}\n{text}"))
        .join("\n");
        assert_eq!(golden(&imported), want);
    }

    /// docs/upstream/iteratr-hooks.md, "Migration Guide": v1's file warns, v2's does not.
    #[test]
    fn the_migration_guide_examples() {
        let v1 = "hooks:\n  pre_iteration:\n    - command: \"golangci-lint run ./...\"\n      timeout: 30\n";
        let imported = read(v1).unwrap();
        assert_eq!(
            golden(&imported),
            format!(
                "# pre_iteration line 3\n{}",
                entry("turn.start", 30, "false", "golangci-lint run ./...")
            )
        );
        let warnings = notes(&imported.warnings);
        assert_eq!(warnings.len(), 1);
        assert!(
            warnings[0].starts_with("3: pre_iteration without pipe_output: since iteratr v2"),
            "{warnings:?}"
        );
        let v2 = format!("{v1}      pipe_output: true  # ADD THIS LINE\n");
        let imported = read(&v2).unwrap();
        assert!(imported.warnings.is_empty());
        assert_eq!(
            golden(&imported),
            format!(
                "# pre_iteration line 3\n{}",
                entry("turn.start", 30, "true", "golangci-lint run ./...")
            )
        );
    }

    #[test]
    fn problems_name_the_line_of_the_offending_value() {
        let text = "hooks:\n  post_iteration:\n    - command: \"make\"\n      timeout: soon\n    - timeout: 5\n    - command: \"echo '{{session}}'\"\n  session_start:\n    - command: \"echo {{task_id}}\"\n      pipe: true\n  post_iteraton:\n    - command: \"x\"\n";
        let imported = read(text).unwrap();
        assert_eq!(
            notes(&imported.problems),
            [
                "4: timeout: \"soon\" is no whole number of seconds; write one such as 'timeout: 30'",
                "5: no 'command'; give one such as 'command: \"go test ./...\"'",
                "10: unknown iteratr hook type 'post_iteraton', which iteratr ignores too; use \
                 one of session_start, pre_iteration, post_iteration, session_end, \
                 on_task_complete, on_error",
            ]
        );
        assert_eq!(
            notes(&imported.warnings),
            [
                "8: {{task_id}} is not set for session_start hooks (iteratr put an empty \
                 value); hookvisor fails such a run instead: remove it or move the hook",
                "9: unknown key 'pipe' is ignored, as iteratr ignores it; known keys: command, \
                 timeout, pipe_output",
            ]
        );
        assert_eq!(imported.hooks.len(), 2);
        assert_eq!(
            imported.hooks[0].run.as_deref(),
            Some("echo ''${session}''")
        );
    }

    #[test]
    fn an_unparsable_file_names_its_line() {
        let err = read("hooks:\n  post_iteration:\n    - command: [\n").unwrap_err();
        assert_eq!(err.line, Some(3), "{err:?}");
        assert_eq!(err.message, "not YAML as expected: unclosed bracket '['");
        let err = read("hooks:\n  a: []\n  a: []\n").unwrap_err();
        assert!(err.message.contains("'a' is given twice"), "{err:?}");
    }
}

//! nyzhi's `[[agent.hooks]]` of `config.toml` (docs/upstream/nyzhi-hooks.md), read by the table of
//! docs/EVENTS.md §2.2 and §5 rules 7 and 17: `{file}` → `${file}`, `tool_name` → `tool`, 30 s,
//! `block = true` → `block_on: failure`, else `never` with `pipe_output: failure`; team events
//! `exit2`; reasons stderr first.
//!
//! | nyzhi | event |
//! |---|---|
//! | `after_edit` | `file.edited` (`{file}`, `pattern`) |
//! | `after_turn` | `turn.end` |
//! | `pre_tool`, `post_tool`, `post_tool_failure` | `tool.before`, `tool.after`, `tool.failed` (`tool_name`) |
//! | `teammate_idle`, `task_completed` | `team.idle`, `task.complete` |
//! | `session_start`, `user_prompt_submit` (newer configs, rule 7) | `session.start`, `turn.start` |
//!
//! A hook that does not block has its results "reported back to the agent" in nyzhi: here its
//! output goes to the context buffer when it fails. Team events block by exit 2 as in nyzhi
//! (`block = true`: by any failure), their reason being the block's reason, so they pipe
//! nothing. nyzhi's pattern is a comma list of globs (`*.rs`) and path substrings (`src/api/`);
//! a substring becomes the globs of the paths containing it as whole segments,
//! `{src/api/**,**/src/api/**}`, warned about when it does not end with `/` (nyzhi also matched
//! it inside a name). `pattern` outside `after_edit` and `tool_name` outside the tool events
//! are ignored by nyzhi, and warned about and ignored here. nyzhi's tool names are the
//! canonical ones of §5 rule 6 (`bash`, `write`, `edit`, `apply_patch`, `git_commit`), but for
//! `multi_edit`, which becomes `edit` (Claude's `Edit` and `MultiEdit`). `tool_name` is a comma
//! list, as nyzhi splits it (`write,edit`, spaces around a name ignored): any name matches.

#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::time::Duration;

use serde::Deserialize;
use toml::{Spanned, Value};

use super::command::{Placeholders, to_run};
use super::json_lines::Step;
use super::{ImportNote, Imported, ImportedHook, LineIndex, Unparsable, base_spec};
use crate::event::{Command, Event, HookAction, PipeOutput, ToolMatcher, is_known_tool};
use crate::pattern::Pattern;
use crate::policy::{BlockOn, OnFailure, Phase, ReasonFrom};
use crate::template::ShellTemplate;

/// nyzhi's default timeout ("Timeout in seconds (default: 30)").
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// nyzhi's events and ours.
const EVENTS: [(&str, Event); 9] = [
    ("after_edit", Event::FileEdited),
    ("after_turn", Event::TurnEnd),
    ("pre_tool", Event::ToolBefore),
    ("post_tool", Event::ToolAfter),
    ("post_tool_failure", Event::ToolFailed),
    ("teammate_idle", Event::TeamIdle),
    ("task_completed", Event::TaskComplete),
    ("session_start", Event::SessionStart),
    ("user_prompt_submit", Event::TurnStart),
];

/// The keys of an entry ("Hook Properties"), and `hook_type`, which nyzhi's config reads
/// (`command`, the default; `prompt` and `agent` are "reserved for future use").
const KEYS: [&str; 7] = [
    "event",
    "command",
    "pattern",
    "timeout",
    "block",
    "tool_name",
    "hook_type",
];

/// One entry's fields by key, each with its span.
type Entry = BTreeMap<String, Spanned<Value>>;

/// The file as TOML reads it: only `agent.hooks` is nyzhi's hooks; other keys are its settings.
#[derive(Deserialize)]
struct File {
    #[serde(default)]
    agent: Option<Agent>,
}

#[derive(Deserialize)]
struct Agent {
    #[serde(default)]
    hooks: Option<Vec<Spanned<Entry>>>,
}

/// Reads a nyzhi `config.toml` (the module documentation).
pub(crate) fn read(text: &str) -> Result<Imported, Unparsable> {
    let file: File = toml::from_str(text).map_err(|e| Unparsable {
        line: e.span().map(|s| LineIndex::new(text).line_at(s.start)),
        message: format!(
            "not TOML as nyzhi reads it: {}",
            e.message().split_whitespace().collect::<Vec<_>>().join(" ")
        ),
    })?;
    let mut imported = Imported::default();
    let entries = file.agent.and_then(|a| a.hooks).unwrap_or_default();
    let lines = LineIndex::new(text);
    for (index, entry) in entries.iter().enumerate() {
        match entry_hook(&lines, entry, &mut imported.warnings) {
            Ok(hook) => imported.hooks.push(ImportedHook {
                entry: vec![
                    Step::Key("agent".into()),
                    Step::Key("hooks".into()),
                    Step::Index(index),
                ],
                ..hook
            }),
            Err(note) => imported.problems.push(note),
        }
    }
    Ok(imported.in_line_order())
}

/// One `[[agent.hooks]]` entry, or why it does not run.
fn entry_hook(
    lines: &LineIndex<'_>,
    entry: &Spanned<Entry>,
    warnings: &mut Vec<ImportNote>,
) -> Result<ImportedHook, ImportNote> {
    let line = lines.line_at(entry.span().start);
    let fields = entry.get_ref();
    let at = |key: &str| {
        fields
            .get(key)
            .map_or(line, |v| lines.line_at(v.span().start))
    };
    let note = |line: usize, message: String| ImportNote { line, message };
    // A value as the file writes it, for messages.
    let written = |key: &str| {
        fields
            .get(key)
            .and_then(|v| lines.text().get(v.span()))
            .unwrap_or_default()
            .to_owned()
    };
    let string = |key: &str| -> Result<Option<&str>, ImportNote> {
        match fields.get(key).map(Spanned::get_ref) {
            None => Ok(None),
            Some(Value::String(s)) => Ok(Some(s)),
            Some(_) => Err(note(
                at(key),
                format!(
                    "{key}: {} is not a string; write it in quotes",
                    written(key)
                ),
            )),
        }
    };
    // A model-driven hook is refused whole (docs/EVENTS.md §1.2), before its other keys (`prompt`,
    // `model`) are warned about as unknown, and before a missing `command` is.
    match string("hook_type")? {
        None | Some("command") => {}
        Some(kind @ ("prompt" | "agent")) => {
            return Err(note(
                at("hook_type"),
                format!(
                    "hook_type: '{kind}' is unsupported: hookvisor runs no prompt or agent \
                     hooks; write the check as a command"
                ),
            ));
        }
        Some(other) => {
            return Err(note(
                at("hook_type"),
                format!("hook_type: '{other}' is not command, prompt or agent"),
            ));
        }
    }
    for key in fields.keys().filter(|k| !KEYS.contains(&k.as_str())) {
        warnings.push(note(
            at(key),
            format!(
                "unknown key '{key}' is ignored; known keys: {}",
                KEYS.join(", ")
            ),
        ));
    }
    let Some(name) = string("event")? else {
        return Err(note(
            line,
            "no 'event'; add one such as event = \"after_turn\"".into(),
        ));
    };
    let Some((_, event)) = EVENTS.iter().find(|(n, _)| *n == name) else {
        return Err(note(
            at("event"),
            format!(
                "unknown nyzhi event '{name}'; use one of {}",
                EVENTS.map(|(n, _)| n).join(", ")
            ),
        ));
    };
    let command = match string("command")? {
        Some(c) if !c.trim().is_empty() => c,
        _ => {
            return Err(note(
                at("command"),
                "no 'command'; add one such as command = \"cargo test\"".into(),
            ));
        }
    };
    let timeout = match fields.get("timeout").map(Spanned::get_ref) {
        None => DEFAULT_TIMEOUT,
        Some(Value::Integer(n)) if *n > 0 => Duration::from_secs(n.unsigned_abs()),
        Some(_) => {
            return Err(note(
                at("timeout"),
                format!(
                    "timeout: {} is no positive whole number of seconds",
                    written("timeout")
                ),
            ));
        }
    };
    let block = match fields.get("block").map(Spanned::get_ref) {
        None => false,
        Some(Value::Boolean(b)) => *b,
        Some(_) => {
            return Err(note(
                at("block"),
                format!("block: {} is not true or false", written("block")),
            ));
        }
    };
    let tool_event = matches!(
        event,
        Event::ToolBefore | Event::ToolAfter | Event::ToolFailed
    );
    let tool = match string("tool_name")? {
        Some(tool) if tool_event => {
            // nyzhi reads a comma list of names (`write,edit`), each trimmed; its own file
            // tool `multi_edit` has no canonical name of the same spelling.
            let names: Vec<&str> = tool
                .split(',')
                .map(str::trim)
                .filter(|n| !n.is_empty())
                .map(|n| if n == "multi_edit" { "edit" } else { n })
                .collect();
            let matcher = ToolMatcher::parse(&names.join("|"))
                .map_err(|e| note(at("tool_name"), format!("tool_name: {e}")))?;
            if let ToolMatcher::Names(names) = &matcher {
                for unknown in names
                    .iter()
                    .filter(|n| !n.contains('*') && !is_known_tool(n))
                {
                    warnings.push(note(
                        at("tool_name"),
                        format!(
                            "tool_name '{unknown}' is no tool of Claude Code, Codex or Gemini \
                             CLI and no canonical name (bash, write, edit, apply_patch, \
                             git_commit), so no call matches it under hookvisor"
                        ),
                    ));
                }
            }
            Some(matcher)
        }
        Some(_) => {
            warnings.push(note(
                at("tool_name"),
                format!("tool_name applies to pre_tool, post_tool and post_tool_failure; nyzhi ignores it on {name}, and so does hookvisor"),
            ));
            None
        }
        None => None,
    };
    let pattern = match string("pattern")? {
        Some(pattern) if *event == Event::FileEdited => {
            let (globs, loose) = globs(pattern);
            for substring in loose {
                warnings.push(note(
                    at("pattern"),
                    format!(
                        "pattern '{substring}': nyzhi matched it anywhere in a path, also \
                         inside a name; hookvisor matches it as whole path segments ({globs}); \
                         end it with '/' or write a glob to say which"
                    ),
                ));
            }
            let compiled =
                Pattern::new(&globs).map_err(|e| note(at("pattern"), format!("pattern: {e}")))?;
            Some(compiled)
        }
        Some(_) => {
            warnings.push(note(
                at("pattern"),
                format!("pattern applies to after_edit; nyzhi ignores it on {name}, and so does hookvisor"),
            ));
            None
        }
        None => None,
    };
    let translated = to_run(command, Placeholders::Single(&["file"]));
    if !translated.names.is_empty() && *event != Event::FileEdited {
        warnings.push(note(
            at("command"),
            format!(
                "{{file}} is set only for after_edit hooks; on {name} hookvisor fails the run \
                 rather than pass nyzhi's literal '{{file}}': remove it"
            ),
        ));
    }
    super::refuse_single_quoted(&translated, at("command"))?;
    let run = translated.text;
    let template =
        ShellTemplate::parse(&run).map_err(|e| note(at("command"), format!("command: {e}")))?;
    let team = matches!(event, Event::TeamIdle | Event::TaskComplete);
    let mut spec = base_spec(event.clone(), HookAction::Command(Command::Run(template)));
    spec.phase = Phase::Pre;
    spec.await_ = true;
    spec.tool = tool;
    spec.on_failure = OnFailure::Continue;
    // Rule 17: nyzhi's code reads stderr first, whatever its documentation says.
    spec.reason_from = ReasonFrom::Stderr;
    (spec.block_on, spec.pipe_output) = match (block, team) {
        (true, _) => (BlockOn::Failure, PipeOutput::Never),
        (false, true) => (BlockOn::Exit2, PipeOutput::Never),
        (false, false) => (BlockOn::Never, PipeOutput::Failure),
    };
    if spec.gates_commits_by_tool() {
        let hint = crate::hook::ProblemKind::GitCommitToolIsAHint;
        warnings.push(note(at("tool_name"), hint.to_string()));
    }
    Ok(ImportedHook {
        source_event: name.to_owned(),
        line,
        title: super::title(command),
        spec,
        timeout,
        pattern,
        run: Some(run),
        entry: Vec::new(),
    })
}

/// nyzhi's pattern as hookvisor globs, and the substrings that could match inside a name.
fn globs(pattern: &str) -> (String, Vec<String>) {
    let mut out = Vec::new();
    let mut loose = Vec::new();
    for item in pattern.split(',').map(str::trim).filter(|i| !i.is_empty()) {
        if item.contains(['*', '?', '[', '{']) {
            out.push(item.to_owned());
            continue;
        }
        let core = item.trim_matches('/');
        if item.ends_with('/') {
            out.push(format!("{{{core}/**,**/{core}/**}}"));
        } else {
            out.push(format!("{{{core},**/{core},{core}/**,**/{core}/**}}"));
            loose.push(item.to_owned());
        }
    }
    (out.join(","), loose)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::tests::{golden, notes};

    /// One nyzhi hook as the golden files write it: `extra` holds the lines between `event`
    /// and `phase` (`tool`, `pattern`).
    fn entry(event: &str, extra: &str, timeout: u64, block: bool, run: &str) -> String {
        let (block_on, pipe) = match block {
            true => ("failure", "false"),
            false => ("never", "failure"),
        };
        format!(
            "event: {event}\n{extra}phase: pre\nawait: true\ntimeout: {timeout}\n\
             block_on: {block_on}\non_failure: continue\npipe_output: {pipe}\n\
             reason_from: stderr\naction: command\nrun: \"{run}\"\n"
        )
    }

    fn one(text: &str) -> String {
        let imported = read(text).unwrap();
        assert!(imported.problems.is_empty(), "{:?}", imported.problems);
        // A blocking `git_commit` gate is imported, with the warning that it is a hint.
        let hint = crate::hook::ProblemKind::GitCommitToolIsAHint.to_string();
        assert!(
            imported.warnings.iter().all(|w| w.message == hint),
            "{:?}",
            imported.warnings
        );
        golden(&imported)
    }

    /// docs/upstream/nyzhi-hooks.md, "Configuration".
    #[test]
    fn the_configuration_example() {
        let text = "[[agent.hooks]]\nevent = \"after_edit\"\ncommand = \"cargo fmt -- {file}\"\npattern = \"*.rs\"\ntimeout = 30\n\n[[agent.hooks]]\nevent = \"after_turn\"\ncommand = \"cargo clippy --all -- -D warnings\"\ntimeout = 60\n";
        let want = [
            format!(
                "# after_edit line 1\n{}",
                entry(
                    "file.edited",
                    "pattern: \"*.rs\"\n",
                    30,
                    false,
                    "cargo fmt -- ${file}"
                )
            ),
            format!(
                "# after_turn line 7\n{}",
                entry(
                    "turn.end",
                    "",
                    60,
                    false,
                    "cargo clippy --all -- -D warnings"
                )
            ),
        ]
        .join("\n");
        assert_eq!(one(text), want);
    }

    /// docs/upstream/nyzhi-hooks.md, "Placeholders", "Blocking Hooks" and "Examples".
    #[test]
    fn every_other_example() {
        let hook = |body: &str| format!("[[agent.hooks]]\n{body}");
        let table: [(&str, String); 7] = [
            (
                "event = \"after_edit\"\ncommand = \"prettier --write {file}\"\npattern = \"*.ts,*.tsx\"\n",
                entry(
                    "file.edited",
                    "pattern: \"*.ts,*.tsx\"\n",
                    30,
                    false,
                    "prettier --write ${file}",
                ),
            ),
            (
                "event = \"pre_tool\"\ntool_name = \"git_commit\"\ncommand = \"cargo test\"\nblock = true\ntimeout = 120\n",
                entry(
                    "tool.before",
                    "tool: \"git_commit\"\n",
                    120,
                    true,
                    "cargo test",
                ),
            ),
            (
                "event = \"after_edit\"\ncommand = \"cargo fmt -- {file}\"\npattern = \"*.rs\"\ntimeout = 30\n",
                entry(
                    "file.edited",
                    "pattern: \"*.rs\"\n",
                    30,
                    false,
                    "cargo fmt -- ${file}",
                ),
            ),
            (
                "event = \"after_turn\"\ncommand = \"cargo clippy --all -- -D warnings\"\ntimeout = 60\n",
                entry(
                    "turn.end",
                    "",
                    60,
                    false,
                    "cargo clippy --all -- -D warnings",
                ),
            ),
            (
                "event = \"after_edit\"\ncommand = \"eslint --fix {file}\"\npattern = \"*.ts,*.tsx\"\ntimeout = 15\n",
                entry(
                    "file.edited",
                    "pattern: \"*.ts,*.tsx\"\n",
                    15,
                    false,
                    "eslint --fix ${file}",
                ),
            ),
            (
                "event = \"pre_tool\"\ntool_name = \"git_commit\"\ncommand = \"npm test\"\nblock = true\ntimeout = 120\n",
                entry(
                    "tool.before",
                    "tool: \"git_commit\"\n",
                    120,
                    true,
                    "npm test",
                ),
            ),
            (
                "event = \"after_edit\"\ncommand = \"black {file}\"\npattern = \"*.py\"\ntimeout = 15\n",
                entry(
                    "file.edited",
                    "pattern: \"*.py\"\n",
                    15,
                    false,
                    "black ${file}",
                ),
            ),
        ];
        for (body, want) in table {
            let source_event = body.split('"').nth(1).unwrap();
            assert_eq!(
                one(&hook(body)),
                format!("# {source_event} line 1\n{want}"),
                "{body}"
            );
        }
    }

    #[test]
    fn team_events_block_by_exit_2_and_substrings_become_segments() {
        let text = "[[agent.hooks]]\nevent = \"task_completed\"\ncommand = \"./check.sh\"\n\n[[agent.hooks]]\nevent = \"after_edit\"\ncommand = \"make api\"\npattern = \"src/api/, *.proto\"\n";
        let imported = read(text).unwrap();
        let rendered = golden(&imported);
        assert!(
            rendered.contains("event: task.complete\nphase: pre\nawait: true\ntimeout: 30\nblock_on: exit2\non_failure: continue\npipe_output: false\n"),
            "{rendered}"
        );
        let pattern = imported.hooks[1].pattern.as_ref().unwrap();
        assert_eq!(pattern.as_str(), "{src/api/**,**/src/api/**},*.proto");
        for (path, want) in [
            ("src/api/a.rs", true),
            ("lib/src/api/b/c.rs", true),
            ("src/apis/a.rs", false),
            ("x/y.proto", true),
        ] {
            assert_eq!(pattern.is_match(path), want, "{path}");
        }
        assert!(imported.warnings.is_empty(), "{:?}", imported.warnings);
    }

    #[test]
    fn problems_and_warnings_name_their_lines() {
        let text = "[agent]\nmodel = \"x\"\n\n[[agent.hooks]]\nevent = \"after_edit\"\ncommand = \"fmt {file}\"\npattern = \"api\"\n\n[[agent.hooks]]\nevent = \"before_turn\"\ncommand = \"x\"\n\n[[agent.hooks]]\nevent = \"after_turn\"\ncommand = \"lint {file}\"\ntimeout = \"60\"\n\n[[agent.hooks]]\nevent = \"after_turn\"\ncommand = \"lint {file}\"\ntool_name = \"Bash\"\nhook_type = \"command\"\n";
        let imported = read(text).unwrap();
        assert_eq!(
            notes(&imported.problems),
            [
                "10: unknown nyzhi event 'before_turn'; use one of after_edit, after_turn, \
                 pre_tool, post_tool, post_tool_failure, teammate_idle, task_completed, \
                 session_start, user_prompt_submit",
                "16: timeout: \"60\" is no positive whole number of seconds",
            ]
        );
        assert_eq!(
            notes(&imported.warnings),
            [
                "7: pattern 'api': nyzhi matched it anywhere in a path, also inside a name; \
                 hookvisor matches it as whole path segments ({api,**/api,api/**,**/api/**}); \
                 end it with '/' or write a glob to say which",
                "20: {file} is set only for after_edit hooks; on after_turn hookvisor fails \
                 the run rather than pass nyzhi's literal '{file}': remove it",
                "21: tool_name applies to pre_tool, post_tool and post_tool_failure; nyzhi \
                 ignores it on after_turn, and so does hookvisor",
            ]
        );
        let ids: Vec<usize> = imported.hooks.iter().map(|h| h.line).collect();
        assert_eq!(ids, [4, 18]);
    }

    /// nyzhi's `hook_type = "prompt"`/`"agent"` (its config's key; "reserved for future use")
    /// is reported unsupported, not as a hook without a command (docs/EVENTS.md §1.2).
    #[test]
    fn prompt_and_agent_hooks_are_unsupported() {
        let text = "[[agent.hooks]]\nevent = \"after_turn\"\nhook_type = \"prompt\"\nprompt = \"Review the diff\"\n\n[[agent.hooks]]\nevent = \"after_turn\"\nhook_type = \"agent\"\ninstructions = \"Review\"\nmodel = \"m\"\n\n[[agent.hooks]]\nevent = \"after_turn\"\nhook_type = \"llm\"\ncommand = \"x\"\n";
        let imported = read(text).unwrap();
        assert_eq!(
            notes(&imported.problems),
            [
                "3: hook_type: 'prompt' is unsupported: hookvisor runs no prompt or agent hooks; \
                 write the check as a command",
                "8: hook_type: 'agent' is unsupported: hookvisor runs no prompt or agent hooks; \
                 write the check as a command",
                "14: hook_type: 'llm' is not command, prompt or agent",
            ]
        );
        assert!(imported.warnings.is_empty(), "{:?}", imported.warnings);
        assert!(imported.hooks.is_empty());
    }

    #[test]
    fn an_unparsable_file_names_its_line() {
        let err = read("[agent]\n\n[[agent.hooks]]\nevent = \n").unwrap_err();
        assert_eq!(err.line, Some(4), "{err:?}");
        assert!(
            err.message.starts_with("not TOML as nyzhi reads it: "),
            "{err:?}"
        );
    }
}

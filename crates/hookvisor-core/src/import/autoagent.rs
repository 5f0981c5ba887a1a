//! AutoAgent's `hooks` of `.autoagent/config.json` (docs/upstream/autoagent-hooks-design.md), read
//! by the table of docs/EVENTS.md §2.2 and §5 rule 13.
//!
//! | AutoAgent | event | phase | `block_on` |
//! |---|---|---|---|
//! | `PreExecutionStart` | `task.start` | pre | `exit2` |
//! | `PostExecutionStart` | `task.start` | post, `when: ${decision} == 'allow'` | `never` |
//! | `PreExecutionEnd` | `task.complete` | pre | `exit2` |
//! | `PostExecutionEnd` | `task.complete` | post | `never` |
//! | `Stop` | `session.stop` | pre | `exit2` |
//! | `PreGitCommit` | `commit.before` | pre | `exit2` |
//! | `PostGitCommit` | `commit.after` | post | `never` |
//!
//! As in AutoAgent's `HookManager`: only a Pre hook blocks, by exit 2 (stderr the reason) or a
//! JSON `decision`; `blocking: false` makes it `never`; other failures and timeouts are logged
//! and the hooks go on (`on_failure: continue`); `timeout` is milliseconds, rounded up to
//! seconds, default 60 s. `PostExecutionStart` runs only when execution started, since
//! AutoAgent throws on a blocked `PreExecutionStart`. The hook reads AutoAgent's own JSON on
//! stdin ([`StdinDialect::AutoAgent`]). `{{name}}` in a command or a commit message is a
//! reference to the event data's `name` (`{{issueNumber}}`): AutoAgent left an unknown one as
//! text, hookvisor fails such a run (§5 rule 20), so names hookvisor does not set are warned
//! about. The built-in `git-commit` (`message`, `noVerify`) and `git-push` (`remote`,
//! `branch`, `"current"` being the current branch) are hookvisor's actions of the same names.
//!
//! [`StdinDialect::AutoAgent`]: crate::payload::StdinDialect::AutoAgent

#![forbid(unsafe_code)]

use std::time::Duration;

use serde_json::{Map, Value as Json};

use super::command::{Placeholders, Translated, to_run, to_template};
use super::json_lines::{Step, value_lines};
use super::{ImportNote, Imported, ImportedHook, Unparsable, base_spec};
use crate::event::{Event, HookAction, PipeOutput};
use crate::git_action::{GitCommit, GitPush};
use crate::payload::StdinDialect;
use crate::policy::{BlockOn, OnFailure, Phase, ReasonFrom};
use crate::template::ShellTemplate;
use crate::when::Condition;

/// AutoAgent's default timeout ("Default: 60 seconds (60000ms)").
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// AutoAgent's hook points: the event, and whether they are Pre hooks.
const POINTS: [(&str, Event, bool); 7] = [
    ("PreExecutionStart", Event::TaskStart, true),
    ("PostExecutionStart", Event::TaskStart, false),
    ("PreExecutionEnd", Event::TaskComplete, true),
    ("PostExecutionEnd", Event::TaskComplete, false),
    ("Stop", Event::SessionStop, true),
    ("PreGitCommit", Event::CommitBefore, true),
    ("PostGitCommit", Event::CommitAfter, false),
];

/// The keys of an entry, all types together.
const KEYS: [&str; 8] = [
    "type", "command", "blocking", "timeout", "message", "noVerify", "remote", "branch",
];

/// Reads an AutoAgent `config.json`: `Ok(None)` when it has no `hooks` (the module's rule 4
/// then reads the user's).
pub(crate) fn read(text: &str) -> Result<Option<Imported>, Unparsable> {
    let config: Json = serde_json::from_str(text).map_err(|e| Unparsable {
        line: Some(e.line()).filter(|l| *l > 0),
        message: format!(
            "not JSON as AutoAgent reads it: {}",
            strip_position(&e.to_string())
        ),
    })?;
    let Json::Object(mut config) = config else {
        return Err(Unparsable {
            line: Some(1),
            message: "the file is not a JSON object of settings".to_owned(),
        });
    };
    let Some(hooks) = config.remove("hooks") else {
        return Ok(None);
    };
    let lines = value_lines(text);
    let line_of = |path: &[Step]| lines.get(path).copied().unwrap_or(1);
    let key = |k: &str| Step::Key(k.to_owned());
    let Json::Object(hooks) = hooks else {
        return Err(Unparsable {
            line: Some(line_of(&[key("hooks")])),
            message: "'hooks' is not an object of hook points".to_owned(),
        });
    };
    let mut points: Vec<(usize, String, Json)> = hooks
        .into_iter()
        .map(|(point, list)| (line_of(&[key("hooks"), key(&point)]), point, list))
        .collect();
    points.sort_by_key(|(line, _, _)| *line);
    let mut imported = Imported::default();
    for (line, point, list) in points {
        let Some((_, event, pre)) = POINTS.iter().find(|(p, _, _)| *p == point) else {
            imported.problems.push(ImportNote {
                line,
                message: format!(
                    "unknown AutoAgent hook point '{point}'; use one of {}",
                    POINTS.map(|(p, _, _)| p).join(", ")
                ),
            });
            continue;
        };
        let Json::Array(entries) = list else {
            imported.problems.push(ImportNote {
                line,
                message: format!("{point}: not a list of hooks; write [{{\"type\": \"command\", \"command\": \"…\"}}]"),
            });
            continue;
        };
        for (index, entry) in entries.iter().enumerate() {
            let base = [key("hooks"), key(&point), Step::Index(index)];
            let at = |field: &str| {
                let mut path = base.to_vec();
                path.push(key(field));
                lines.get(&path).copied().unwrap_or_else(|| line_of(&base))
            };
            let entry_line = line_of(&base);
            match entry_hook(
                &point,
                event,
                *pre,
                entry,
                entry_line,
                &at,
                &mut imported.warnings,
            ) {
                Ok(hook) => imported.hooks.push(ImportedHook {
                    entry: base.to_vec(),
                    ..hook
                }),
                Err(note) => imported.problems.push(note),
            }
        }
    }
    Ok(Some(imported.in_line_order()))
}

/// serde_json's message without its " at line N column M" (the line goes apart).
fn strip_position(message: &str) -> &str {
    message
        .rfind(" at line ")
        .map_or(message, |at| &message[..at])
}

/// One entry of the hook point `point`, or why it does not run.
fn entry_hook(
    point: &str,
    event: &Event,
    pre: bool,
    entry: &Json,
    line: usize,
    at: &dyn Fn(&str) -> usize,
    warnings: &mut Vec<ImportNote>,
) -> Result<ImportedHook, ImportNote> {
    let note = |line: usize, message: String| ImportNote { line, message };
    let Json::Object(fields) = entry else {
        return Err(note(
            line,
            "a hook is an object such as {\"type\": \"command\", \"command\": \"…\"}".into(),
        ));
    };
    for unknown in fields.keys().filter(|k| !KEYS.contains(&k.as_str())) {
        warnings.push(note(
            at(unknown),
            format!(
                "unknown key '{unknown}' is ignored; known keys: {}",
                KEYS.join(", ")
            ),
        ));
    }
    let text = |key: &str| -> Result<Option<&str>, ImportNote> {
        match fields.get(key) {
            None => Ok(None),
            Some(Json::String(s)) => Ok(Some(s)),
            Some(other) => Err(note(at(key), format!("{key}: {other} is not a string"))),
        }
    };
    let timeout = match fields.get("timeout") {
        // AutoAgent falls back to its default for a missing or zero timeout.
        None => DEFAULT_TIMEOUT,
        Some(Json::Number(n)) if n.as_u64() == Some(0) => DEFAULT_TIMEOUT,
        Some(Json::Number(n)) if n.as_u64().is_some() => {
            Duration::from_secs(n.as_u64().unwrap_or_default().div_ceil(1000))
        }
        Some(other) => {
            return Err(note(
                at("timeout"),
                format!("timeout: {other} is no whole number of milliseconds, such as 60000"),
            ));
        }
    };
    let blocking = match fields.get("blocking") {
        None => None,
        Some(Json::Bool(b)) => Some(*b),
        Some(other) => {
            return Err(note(
                at("blocking"),
                format!("blocking: {other} is not true or false"),
            ));
        }
    };
    if blocking == Some(true) && !pre {
        warnings.push(note(
            at("blocking"),
            format!("blocking: true on {point}: only Pre hooks block, in AutoAgent as here"),
        ));
    }
    let action_type = text("type")?.unwrap_or("command");
    let mut names = Vec::new();
    let mut refer = |translated: Translated, line: usize| {
        super::refuse_single_quoted(&translated, line)?;
        names.extend(translated.names.into_iter().map(|n| (n, line)));
        Ok::<_, ImportNote>(translated.text)
    };
    let title = match (action_type, text("command")?, text("message")?) {
        ("command", Some(command), _) => super::title(command),
        ("git-commit", _, Some(message)) => super::title(&format!("git-commit: {message}")),
        (other, _, _) => other.to_owned(),
    };
    let (action, run) = match action_type {
        "command" => {
            let command = match text("command")? {
                Some(c) if !c.trim().is_empty() => c,
                _ => {
                    return Err(note(
                        at("command"),
                        "no 'command'; add one such as \"command\": \"npm test\"".into(),
                    ));
                }
            };
            let run = refer(to_run(command, Placeholders::AnyNamed), at("command"))?;
            let template = ShellTemplate::parse(&run)
                .map_err(|e| note(at("command"), format!("command: {e}")))?;
            (
                HookAction::Command(crate::event::Command::Run(template)),
                Some(run),
            )
        }
        "git-commit" => {
            // Said in AutoAgent's words: the action's own refusal shows hookvisor's YAML.
            if text("message")?.is_none_or(|m| m.trim().is_empty()) {
                return Err(note(
                    if fields.contains_key("message") {
                        at("message")
                    } else {
                        line
                    },
                    "git-commit: no 'message'; add one such as \"message\": \"Complete issue \
                     #{{issueNumber}}: {{issueTitle}}\""
                        .into(),
                ));
            }
            let message = text("message")?
                .map(|m| refer(to_template(m, Placeholders::AnyNamed), at("message")))
                .transpose()?;
            let no_verify = match fields.get("noVerify") {
                None | Some(Json::Bool(false)) => "false",
                Some(Json::Bool(true)) => "true",
                Some(other) => {
                    return Err(note(
                        at("noVerify"),
                        format!("noVerify: {other} is not true or false"),
                    ));
                }
            };
            let mut given = Map::new();
            given.insert("add".into(), "all".into());
            given.insert("no_verify".into(), no_verify.into());
            if let Some(message) = message {
                given.insert("message".into(), message.into());
            }
            let field = |k: &str| given.get(k).and_then(Json::as_str);
            let commit = GitCommit::from_fields(field, true).map_err(|e| {
                note(
                    e.key()
                        .map_or(line, |k| at(if k == "no_verify" { "noVerify" } else { k })),
                    format!("git-commit: {e}"),
                )
            })?;
            (HookAction::GitCommit(commit), None)
        }
        "git-push" => {
            let remote = text("remote")?.unwrap_or("origin");
            let branch = text("branch")?.filter(|b| *b != "current");
            let field = |k: &str| match k {
                "remote" => Some(remote),
                "branch" => branch,
                _ => None,
            };
            let push = GitPush::from_fields(field, true)
                .map_err(|e| note(e.key().map_or(line, at), format!("git-push: {e}")))?;
            (HookAction::GitPush(push), None)
        }
        other => {
            return Err(note(
                at("type"),
                format!("unknown hook type '{other}'; use command, git-commit or git-push"),
            ));
        }
    };
    for (name, line) in names {
        if !crate::payload::is_known_name(&name) {
            warnings.push(note(
                line,
                format!(
                    "{{{{{name}}}}} is AutoAgent's event data: under hookvisor the run fails \
                     unless the event is fired with '{name}' in its data (hookvisor fire \
                     {event} --data '{{\"{name}\": …}}')"
                ),
            ));
        }
    }
    let mut spec = base_spec(event.clone(), action);
    spec.phase = if pre { Phase::Pre } else { Phase::Post };
    spec.await_ = true;
    spec.block_on = match (pre, blocking) {
        (true, Some(false)) | (false, _) => BlockOn::Never,
        (true, _) => BlockOn::Exit2,
    };
    spec.on_failure = OnFailure::Continue;
    spec.pipe_output = PipeOutput::Never;
    spec.reason_from = ReasonFrom::Stderr;
    spec.stdin = StdinDialect::AutoAgent {
        event_name: point.to_owned(),
    };
    if point == "PostExecutionStart" {
        spec.when = Some(
            Condition::parse("${decision} == 'allow'").map_err(|e| note(line, e.to_string()))?,
        );
    }
    Ok(ImportedHook {
        source_event: point.to_owned(),
        line,
        title,
        spec,
        timeout,
        pattern: None,
        run,
        entry: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::tests::{golden, notes};

    /// docs/upstream/autoagent-hooks-design.md, "Configuration Structure".
    const CONFIGURATION: &str = include_str!("reference/autoagent.config.json");

    /// The fields every AutoAgent hook shares, as the golden files write them.
    fn fields(event: &str, point: &str, when: bool, block_on: &str, action: &str) -> String {
        let pre = point.starts_with("Pre") || point == "Stop";
        format!(
            "event: {event}\n{}phase: {}\nawait: true\ntimeout: 60\nblock_on: {block_on}\n\
             on_failure: continue\npipe_output: false\nreason_from: stderr\n\
             stdin: autoagent {point}\naction: {action}\n",
            if when {
                "when: \"${decision} == 'allow'\"\n"
            } else {
                ""
            },
            if pre { "pre" } else { "post" },
        )
    }

    #[test]
    fn the_configuration_structure_example() {
        let imported = read(CONFIGURATION).unwrap().unwrap();
        assert!(imported.problems.is_empty(), "{:?}", imported.problems);
        let want = [
            format!(
                "# PreExecutionStart line 11\n{}run: \"{}\"\n",
                fields("task.start", "PreExecutionStart", false, "exit2", "command"),
                "echo 'About to start issue '${issueNumber}': '${issueTitle}'' >> ~/.autoagent/execution.log"
            ),
            format!(
                "# PostExecutionStart line 17\n{}run: \"bash .autoagent/hooks/track-execution-start.sh\"\n",
                fields("task.start", "PostExecutionStart", true, "never", "command"),
            ),
            format!(
                "# PreExecutionEnd line 23\n{}run: \"bash .autoagent/hooks/validate-execution.sh\"\n",
                fields("task.complete", "PreExecutionEnd", false, "exit2", "command"),
            ),
            format!(
                "# PostExecutionEnd line 31\n{}run: \"bash .autoagent/hooks/notify-completion.sh\"\n",
                fields("task.complete", "PostExecutionEnd", false, "never", "command"),
            ),
            format!(
                "# PostExecutionEnd line 35\n{}message: \"Complete issue #${{issueNumber}}: ${{issueTitle}}\"\nadd: \"all\"\nno_verify: false\n",
                fields("task.complete", "PostExecutionEnd", false, "never", "git-commit"),
            ),
        ]
        .join("\n");
        assert_eq!(golden(&imported), want);
        // `echo '… {{issueTitle}}' >> log`: single quotes of echo are text, kept without a word.
        let warnings = notes(&imported.warnings);
        assert!(
            !warnings.iter().any(|w| w.contains("inside '…'")),
            "{warnings:?}"
        );
        assert!(imported.problems.is_empty(), "{:?}", imported.problems);
        assert!(
            warnings
                .iter()
                .any(|w| w.starts_with("13: {{issueNumber}} is AutoAgent's event data")),
            "{warnings:?}"
        );
        assert!(
            warnings
                .iter()
                .any(|w| w.starts_with("37: {{issueTitle}} is AutoAgent's event data")),
            "{warnings:?}"
        );
    }

    /// "Built-in Hook Types", "Convenience Commands": git-commit with noVerify, git-push to
    /// the current branch, and `set-auto-commit true`'s configuration.
    #[test]
    fn the_built_in_hook_examples() {
        let text = r#"{
  "hooks": {
    "PostExecutionEnd": [
      {
        "type": "git-commit",
        "message": "Complete issue #{{issueNumber}}: {{issueTitle}}",
        "noVerify": false
      },
      {
        "type": "git-push",
        "remote": "origin",
        "branch": "current"
      }
    ]
  }
}"#;
        let imported = read(text).unwrap().unwrap();
        assert!(imported.problems.is_empty(), "{:?}", imported.problems);
        let rendered = golden(&imported);
        assert!(rendered.contains("action: git-commit\nmessage: \"Complete issue #${issueNumber}: ${issueTitle}\"\nadd: \"all\"\nno_verify: false\n"), "{rendered}");
        assert!(
            rendered.contains("# PostExecutionEnd line 9\n"),
            "{rendered}"
        );
        assert!(
            rendered.ends_with("action: git-push\nremote: \"origin\"\n"),
            "{rendered}"
        );
    }

    /// "Convenience Commands": the configuration `set-auto-commit true` writes, and "Template
    /// Variables"' command.
    #[test]
    fn the_set_auto_commit_and_template_variable_examples() {
        let text = r#"{
  "hooks": {
    "PostExecutionEnd": [
      {
        "type": "git-commit",
        "message": "Complete issue #{{issueNumber}}: {{issueTitle}}"
      }
    ]
  }
}"#;
        let imported = read(text).unwrap().unwrap();
        assert!(imported.problems.is_empty(), "{:?}", imported.problems);
        assert_eq!(
            golden(&imported),
            format!(
                "# PostExecutionEnd line 4\n{}message: \"Complete issue #${{issueNumber}}: \
                 ${{issueTitle}}\"\nadd: \"all\"\nno_verify: false\n",
                fields(
                    "task.complete",
                    "PostExecutionEnd",
                    false,
                    "never",
                    "git-commit"
                ),
            )
        );
        assert_eq!(
            imported.hooks[0].title,
            "git-commit: Complete issue #{{issueNumber}}: {{issueTitle}}"
        );
        let text = r#"{"hooks": {"PreExecutionStart": [{"type": "command", "command": "echo 'Starting issue {{issueNumber}}' >> log.txt"}]}}"#;
        let imported = read(text).unwrap().unwrap();
        assert_eq!(
            golden(&imported),
            format!(
                "# PreExecutionStart line 1\n{}run: \"echo 'Starting issue '${{issueNumber}}'' >> log.txt\"\n",
                fields("task.start", "PreExecutionStart", false, "exit2", "command"),
            )
        );
    }

    /// "Hook Execution Order": the example carries `//` comments, which JSON (and AutoAgent's
    /// `JSON.parse`) refuses: the file is skipped whole, with the line.
    #[test]
    fn the_execution_order_example_is_no_json() {
        let text = "\"PostExecutionEnd\": [\n  { \"type\": \"command\", \"command\": \"npm test\" },      // Runs first\n]";
        let err = read(&format!("{{{text}}}")).unwrap_err();
        assert_eq!(err.line, Some(2), "{err:?}");
        assert!(
            err.message.starts_with("not JSON as AutoAgent reads it: "),
            "{err:?}"
        );
    }

    #[test]
    fn other_points_timeouts_and_problems() {
        let text = r#"{"hooks": {
  "Stop": [{"type": "command", "command": "bash .autoagent/hooks/check-incomplete-todos.sh", "timeout": 1500}],
  "PreGitCommit": [{"type": "command", "command": "npm run lint", "blocking": false}],
  "PostGitCommit": [{"type": "command", "command": "git push"}],
  "PreExecutonEnd": [],
  "PreExecutionEnd": [{"type": "shell", "command": "x"}, {"command": 5}, {"type": "command", "command": "x", "timeout": "1s"}]
}}"#;
        let imported = read(text).unwrap().unwrap();
        let rendered = golden(&imported);
        assert!(rendered.contains("# Stop line 2\nevent: session.stop\nphase: pre\nawait: true\ntimeout: 2\nblock_on: exit2\n"), "{rendered}");
        assert!(rendered.contains("# PreGitCommit line 3\nevent: commit.before\nphase: pre\nawait: true\ntimeout: 60\nblock_on: never\n"), "{rendered}");
        assert!(
            rendered.contains("# PostGitCommit line 4\nevent: commit.after\nphase: post\n"),
            "{rendered}"
        );
        assert_eq!(
            notes(&imported.problems),
            [
                "5: unknown AutoAgent hook point 'PreExecutonEnd'; use one of PreExecutionStart, \
                 PostExecutionStart, PreExecutionEnd, PostExecutionEnd, Stop, PreGitCommit, \
                 PostGitCommit",
                "6: unknown hook type 'shell'; use command, git-commit or git-push",
                "6: command: 5 is not a string",
                "6: timeout: \"1s\" is no whole number of milliseconds, such as 60000",
            ]
        );
        // A git-commit without a message is told the fix in AutoAgent's JSON, not hookvisor's
        // YAML.
        let text = "{\"hooks\": {\"PostExecutionEnd\": [\n  {\"type\": \"git-commit\"},\n  {\"type\": \"git-commit\",\n   \"message\": \" \"}\n]}}";
        let imported = read(text).unwrap().unwrap();
        let fix = "git-commit: no 'message'; add one such as \"message\": \"Complete issue \
                   #{{issueNumber}}: {{issueTitle}}\"";
        assert_eq!(
            notes(&imported.problems),
            [format!("2: {fix}"), format!("4: {fix}")]
        );
        assert_eq!(
            read("{\"logLevel\": \"info\"}")
                .unwrap()
                .map(|i| i.hooks.len()),
            None
        );
        assert_eq!(read("[]").unwrap_err().line, Some(1));
    }
}

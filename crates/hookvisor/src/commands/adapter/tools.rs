//! The agent fields of a tool event as the hooks see them (EVENTS.md §5 rules 6 and 16), and
//! the paths a file tool wrote (§1.1 footnote ¹: one `file.edited` per path).
//!
//! Where each agent puts a written path, per its documents:
//! - Claude Code `Write`, `Edit`, `MultiEdit`: `tool_input.file_path`, absolute
//!   (<https://code.claude.com/docs/en/hooks>, "PreToolUse input").
//! - Gemini CLI `write_file`, `replace`: `tool_input.file_path`
//!   (<https://geminicli.com/docs/hooks/reference>, "BeforeTool"/"AfterTool" input).
//! - Codex `apply_patch`: the patch text in `tool_input.command` (openai/codex
//!   `codex-rs/hooks/src/events/post_tool_use.rs`), whose `*** Add File:`, `*** Update File:`,
//!   `*** Delete File:` and `*** Move to:` lines name the paths.
//! - A tool named in `file_tools` of hookvisor.yml: `tool_input.file_path`, else `path`.

use std::path::{Component, Path, PathBuf};

use hookvisor_core::event::canonical_tool;
use serde_json::{Map, Value};

/// The most paths one patch may name: a pathological patch must not fire unbounded events.
const MAX_PATHS: usize = 1000;

/// The canonical `data` of an agent's event (rule 16): `tool_name`, `tool` (rule 6: the
/// canonical name, else the agent's), `tool_input`, `file` (relative to `workspace`),
/// `task_id`, `task_content`, `error`, `prompt`; every other field under `agent`.
pub(super) fn event_data(input: &Map<String, Value>, workspace: &Path) -> Map<String, Value> {
    let mut data = Map::new();
    let mut rest = Map::new();
    for (key, value) in input {
        match key.as_str() {
            "tool_name" | "tool_input" | "task_id" | "task_content" | "error" | "prompt" => {
                data.insert(key.clone(), value.clone());
            }
            _ => {
                rest.insert(key.clone(), value.clone());
            }
        }
    }
    if let Some(name) = input.get("tool_name").and_then(Value::as_str) {
        let canonical = canonical_tool(name).unwrap_or(name);
        data.insert("tool".into(), canonical.into());
    }
    // Claude Code's TaskCreated/TaskCompleted name the task by subject and description.
    if !data.contains_key("task_content") {
        let content = ["task_description", "task_subject"]
            .iter()
            .find_map(|k| input.get(*k).and_then(Value::as_str));
        if let Some(content) = content {
            data.insert("task_content".into(), content.into());
        }
    }
    let file = input
        .get("tool_input")
        .and_then(|i| i.get("file_path").or_else(|| i.get("path")))
        .and_then(Value::as_str);
    if let Some(file) = file {
        let relative = relative_to(workspace, Path::new(file));
        data.insert(
            "file".into(),
            relative.to_string_lossy().into_owned().into(),
        );
    }
    data.insert("agent".into(), Value::Object(rest));
    data
}

/// The paths the tool call `tool_name` wrote, relative to `workspace`, each once, in order;
/// empty for a tool that writes no file.
pub(super) fn written_paths(
    tool_name: &str,
    tool_input: Option<&Value>,
    workspace: &Path,
    file_tools: &[String],
) -> Vec<PathBuf> {
    let Some(input) = tool_input else {
        return Vec::new();
    };
    let mut paths: Vec<String> = Vec::new();
    let single = matches!(canonical_tool(tool_name), Some("write" | "edit"))
        || file_tools.iter().any(|t| t == tool_name);
    if canonical_tool(tool_name) == Some("apply_patch") {
        let mut texts = Vec::new();
        strings(input, &mut texts);
        for text in texts {
            paths.extend(patch_paths(text));
        }
    } else if single {
        let file = input
            .get("file_path")
            .or_else(|| input.get("path"))
            .and_then(Value::as_str);
        paths.extend(file.map(str::to_owned));
    }
    let mut out: Vec<PathBuf> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for path in paths.into_iter().filter(|p| !p.is_empty()) {
        let Some(relative) = written_inside(workspace, Path::new(&path)) else {
            tracing::debug!("file.edited: {path} is outside the workspace; skipped");
            continue;
        };
        if seen.insert(relative.clone()) {
            out.push(relative);
        }
        if out.len() >= MAX_PATHS {
            break;
        }
    }
    out
}

/// Every string inside `value` (a patch may be `command`, `input` or `patch`).
fn strings<'a>(value: &'a Value, out: &mut Vec<&'a str>) {
    match value {
        Value::String(s) => out.push(s),
        Value::Array(items) => items.iter().for_each(|v| strings(v, out)),
        Value::Object(map) => map.values().for_each(|v| strings(v, out)),
        _ => {}
    }
}

/// The paths an `apply_patch` text names.
fn patch_paths(text: &str) -> impl Iterator<Item = String> + '_ {
    const MARKERS: [&str; 4] = [
        "*** Add File:",
        "*** Update File:",
        "*** Delete File:",
        "*** Move to:",
    ];
    text.lines().filter_map(|line| {
        let line = line.trim_end();
        MARKERS
            .iter()
            .find_map(|m| line.strip_prefix(m))
            .map(|p| p.trim().to_owned())
    })
}

/// `path` relative to `workspace` when it lies inside it, else absolute; a relative `path`
/// is taken from the workspace (the agents' `cwd`), and `..` is applied lexically, so
/// `../../etc/passwd` is `/etc/passwd`, never a workspace file `etc/passwd`.
pub(super) fn relative_to(workspace: &Path, path: &Path) -> PathBuf {
    let path = normal(&workspace.join(path));
    inside(workspace, &path).unwrap_or(path)
}

/// `path` (absolute, normal) relative to `workspace`, or `None` when it lies outside.
fn inside(workspace: &Path, path: &Path) -> Option<PathBuf> {
    let roots = [
        Some(normal(workspace)),
        workspace.canonicalize().ok().map(|w| normal(&w)),
    ];
    roots
        .iter()
        .flatten()
        .find_map(|root| path.strip_prefix(root).ok())
        .map(Path::to_owned)
}

/// The workspace-relative path of a file a tool wrote, or `None` outside the workspace: no
/// `file.edited` fires there, since a hook's `pattern` and its work are the workspace's.
fn written_inside(workspace: &Path, path: &Path) -> Option<PathBuf> {
    inside(workspace, &normal(&workspace.join(path))).filter(|p| !p.as_os_str().is_empty())
}

/// `path` with `.` dropped and `..` applied, without touching the file system.
fn normal(path: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                out.pop();
            }
            other => out.push(other),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn file_tools_name_their_paths() {
        let ws = Path::new("/w");
        let none: &[String] = &[];
        let cases: &[(&str, Value, &[&str])] = &[
            ("Write", json!({"file_path": "/w/src/a.rs"}), &["src/a.rs"]),
            ("Edit", json!({"file_path": "/w/./b/../c.rs"}), &["c.rs"]),
            ("MultiEdit", json!({"file_path": "/elsewhere/x"}), &[]),
            (
                "write_file",
                json!({"file_path": "rel/y.md"}),
                &["rel/y.md"],
            ),
            ("replace", json!({"file_path": "/w/z"}), &["z"]),
            // Outside the workspace: no file.edited, however the path is spelled.
            ("Write", json!({"file_path": "../../etc/passwd"}), &[]),
            ("Write", json!({"file_path": "/etc/shadow"}), &[]),
            ("Write", json!({"file_path": "/w/../w2/x"}), &[]),
            ("Write", json!({"file_path": "/w"}), &[]),
            ("Write", json!({"file_path": "d/../e.rs"}), &["e.rs"]),
            ("Bash", json!({"command": "echo > /w/q"}), &[]),
            (
                "apply_patch",
                json!({"command": "*** Begin Patch\n*** Update File: a.txt\n@@\n-x\n+y\n\
                       *** Add File: /w/n/b.txt\n+new\n*** Delete File: c.txt\n\
                       *** Update File: a.txt\n*** Move to: d.txt\n*** End Patch\n"}),
                &["a.txt", "n/b.txt", "c.txt", "d.txt"],
            ),
        ];
        for (tool, input, want) in cases {
            let got = written_paths(tool, Some(input), ws, none);
            let want: Vec<PathBuf> = want.iter().map(PathBuf::from).collect();
            assert_eq!(got, want, "{tool}");
        }
        let mine = ["mcp__fs__write".to_owned()];
        assert_eq!(
            written_paths("mcp__fs__write", Some(&json!({"path": "/w/m"})), ws, &mine),
            [PathBuf::from("m")]
        );
    }

    #[test]
    fn agent_fields_map_to_canonical_names() {
        let input = json!({
            "session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "run_shell_command",
            "tool_input": {"command": "ls", "file_path": "/w/a"}, "cwd": "/w",
        });
        let data = event_data(input.as_object().unwrap(), Path::new("/w"));
        assert_eq!(data["tool"], "bash");
        assert_eq!(data["tool_name"], "run_shell_command");
        assert_eq!(data["file"], "a");
        assert_eq!(data["agent"]["session_id"], "s");
        assert_eq!(data["agent"]["cwd"], "/w");
        assert!(data["agent"].get("tool_name").is_none());
        let task = json!({"task_id": "7", "task_subject": "Ship it"});
        let data = event_data(task.as_object().unwrap(), Path::new("/w"));
        assert_eq!(data["task_content"], "Ship it");
        assert_eq!(data["task_id"], "7");
    }

    #[test]
    fn a_file_field_outside_the_workspace_stays_absolute() {
        let ws = Path::new("/w");
        for (given, want) in [
            ("../../etc/passwd", "/etc/passwd"),
            ("/etc/shadow", "/etc/shadow"),
            ("/w/../w2/x", "/w2/x"),
            ("src/a.rs", "src/a.rs"),
            ("/w/src/../b.rs", "b.rs"),
        ] {
            assert_eq!(
                relative_to(ws, Path::new(given)),
                Path::new(want),
                "{given}"
            );
        }
    }
}

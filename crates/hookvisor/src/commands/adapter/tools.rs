//! The agent fields of a tool event as the hooks see them (docs/EVENTS.md §5 rules 6 and 16), and
//! the files a tool call touches: `tool.before` and `tool.after` carry them as `files` (so a
//! hook's `pattern:` selects by them) and `file`, and `tool.after` fires one `file.edited` per
//! path inside the workspace (§1.1 footnote ¹).
//!
//! Where each agent names the paths is its row of the agent table ([`hookvisor_core::agents`],
//! `file_tools`); a tool named in `file_tools` of hookvisor.yml names its path in
//! `tool_input.file_path`, else `path`. A relative path is taken from the event's `cwd` (where
//! the agent applies it: Codex's patch paths are relative to the call's working directory),
//! and `.` and `..` are applied lexically: a path inside the workspace becomes relative to it,
//! one outside stays absolute (`../../etc/passwd` is `/etc/passwd`, never the workspace's
//! `etc/passwd`). The `files` also hold the other names the same write may reach: a relative
//! path taken from the workspace, and the path through the links of its existing directories
//! (the agent can plant `m -> migrations`) and of a link to a file not made yet. A file tool whose paths cannot be read (a field missing, a patch naming no
//! file) touches *unknown* files: no `files` is sent, and a `tool.before` gate with a pattern
//! then runs rather than being skipped (hookvisor-core's `fire`, step 3).

use std::path::{Component, Path, PathBuf};

use hookvisor_core::agents::{Spec, ToolPaths};
use hookvisor_core::event::canonical_tool;
use serde_json::{Map, Value};

/// The most paths one call may name: past it the files are unknown (a gate runs), and no
/// `file.edited` fires, rather than an unbounded number of events.
const MAX_PATHS: usize = 1000;

/// The files a tool call touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Touched {
    /// No tool, or a tool that writes no file we know of: its `tool_input.file_path` or
    /// `path`, when it names one (a read), then that path through its links, which a gate
    /// sees too.
    Other(Vec<PathBuf>),
    /// A file tool's paths, each once, in order: relative to the workspace when inside it,
    /// else absolute.
    Paths {
        /// The paths as the agent named them, from its `cwd`.
        named: Vec<PathBuf>,
        /// Other names the same writes may reach, which a gate sees too: a relative path taken
        /// from the workspace instead, and each path through the links of its existing
        /// directories (`ln -s migrations m`, then a Write of `m/001.sql`).
        also: Vec<PathBuf>,
    },
    /// A file tool whose paths could not be read.
    Unknown,
}

impl Touched {
    /// The files of a call of the agent `spec`'s tool (`input` is the agent's JSON), with
    /// `file_tools` from hookvisor.yml.
    pub(super) fn of(
        spec: &Spec,
        input: &Map<String, Value>,
        workspace: &Path,
        file_tools: &[String],
    ) -> Touched {
        let Some(tool) = input.get("tool_name").and_then(Value::as_str) else {
            return Touched::Other(Vec::new());
        };
        let tool_input = input.get("tool_input").unwrap_or(&Value::Null);
        // Relative paths are the agent's, from its `cwd`; an odd `cwd` is the workspace.
        let base = input
            .get("cwd")
            .and_then(Value::as_str)
            .map(Path::new)
            .filter(|c| c.is_absolute())
            .unwrap_or(workspace);
        let place = |path: &str| locate(workspace, &normal(&base.join(path)));
        // Another tool's path (a read, a tool of `file_tools`): here, when it names one.
        const ANY_PATH: &[&str] = &["file_path", "path"];
        let kind = spec.file_tool(tool).or_else(|| {
            file_tools
                .iter()
                .any(|t| t == tool)
                .then_some(ToolPaths::Field(ANY_PATH))
        });
        let string = |field: &str| {
            tool_input
                .get(field)
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
        };
        let named: Vec<String> = match kind {
            None => {
                let Some(path) = ANY_PATH.iter().find_map(|f| string(f)) else {
                    return Touched::Other(Vec::new());
                };
                let mut files = vec![place(path)];
                if let Some(real) = through_links(&base.join(path)) {
                    push_new(&mut files, locate(workspace, &normal(&real)));
                }
                return Touched::Other(files);
            }
            Some(ToolPaths::Field(fields)) => fields
                .iter()
                .find_map(|f| string(f))
                .map(str::to_owned)
                .into_iter()
                .collect(),
            Some(ToolPaths::Patch(field)) => string(field).map_or_else(Vec::new, |text| {
                patch_paths(text).filter(|p| !p.is_empty()).collect()
            }),
        };
        if named.is_empty() || named.len() > MAX_PATHS {
            return Touched::Unknown;
        }
        let (mut paths, mut also) = (Vec::new(), Vec::new());
        for path in &named {
            push_new(&mut paths, place(path));
        }
        for path in &named {
            let raw = base.join(path);
            let aliases = [
                Path::new(path)
                    .is_relative()
                    .then(|| normal(&workspace.join(path))),
                through_links(&raw).map(|real| normal(&real)),
            ];
            for alias in aliases.into_iter().flatten() {
                let alias = locate(workspace, &alias);
                if !paths.contains(&alias) {
                    push_new(&mut also, alias);
                }
            }
        }
        Touched::Paths { named: paths, also }
    }

    /// The paths a file tool wrote inside the workspace, for `file.edited`: nothing fires for
    /// a file outside, since a hook's `pattern` and its work are the workspace's.
    pub(super) fn written(&self) -> Vec<PathBuf> {
        match self {
            Touched::Paths { named, .. } => named
                .iter()
                .filter(|p| p.is_relative() && !p.as_os_str().is_empty())
                .cloned()
                .collect(),
            _ => Vec::new(),
        }
    }
}

/// The canonical `data` of an agent's event (rule 16): `tool_name`, `tool` (rule 6: the
/// canonical name, else the agent's), `tool_input`, `files` and `file` (what the call
/// touches), `task_id`, `task_content`, `error`, `prompt`; every other field under `agent`.
pub(super) fn event_data(input: &Map<String, Value>, touched: &Touched) -> Map<String, Value> {
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
        let text = |p: &PathBuf| Value::from(p.to_string_lossy().into_owned());
        let files: Option<Vec<&PathBuf>> = match touched {
            Touched::Other(file) => Some(file.iter().collect()),
            Touched::Paths { named, also } => Some(named.iter().chain(also).collect()),
            // No `files`: unknown, which a gate with a pattern does not skip.
            Touched::Unknown => None,
        };
        if let Some(files) = files {
            if let Some(first) = files.first() {
                data.insert("file".into(), text(first));
            }
            data.insert(
                "files".into(),
                Value::Array(files.into_iter().map(text).collect()),
            );
        }
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
    data.insert("agent".into(), Value::Object(rest));
    data
}

/// The paths an `apply_patch` text names.
fn patch_paths(text: &str) -> impl Iterator<Item = String> + '_ {
    const MARKERS: [&str; 4] = [
        "*** Add File:",
        "*** Update File:",
        "*** Delete File:",
        "*** Move to:",
    ];
    // Indented markers count too: more paths only make a gate run, never skip.
    text.lines().filter_map(|line| {
        let line = line.trim();
        MARKERS
            .iter()
            .find_map(|m| line.strip_prefix(m))
            .map(|p| p.trim().to_owned())
    })
}

/// Adds `path` to `paths` unless it is there.
fn push_new(paths: &mut Vec<PathBuf>, path: PathBuf) {
    if !paths.contains(&path) {
        paths.push(path);
    }
}

/// `path` (absolute) with its longest existing ancestor made canonical (its links and `..`
/// resolved by the file system), the rest appended; `None` when nothing of it exists. A link
/// whose target does not exist yet is followed too (a write creates the target), as many times
/// as the kernel would (40).
fn through_links(path: &Path) -> Option<PathBuf> {
    let mut path = path.to_owned();
    for _ in 0..40 {
        let mut rest = Vec::new();
        let mut existing = path.as_path();
        let target = loop {
            if let Ok(mut real) = existing.canonicalize() {
                real.extend(rest.iter().rev());
                return Some(real);
            }
            if let Ok(target) = std::fs::read_link(existing) {
                break existing.parent()?.join(target);
            }
            rest.push(existing.file_name()?);
            existing = existing.parent()?;
        };
        path = rest.iter().rev().fold(target, |p, part| p.join(part));
    }
    None
}

/// `path` (absolute, normal) relative to `workspace` when it lies inside it, else itself.
fn locate(workspace: &Path, path: &Path) -> PathBuf {
    let path = path.to_owned();
    let roots = [
        Some(normal(workspace)),
        workspace.canonicalize().ok().map(|w| normal(&w)),
    ];
    roots
        .iter()
        .flatten()
        .find_map(|root| path.strip_prefix(root).ok())
        .map_or(path.clone(), Path::to_owned)
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
    use hookvisor_core::agents::Agent;
    use serde_json::json;

    /// What a call touches, as (the files, or None for unknown).
    fn touched(agent: Agent, tool: &str, input: Value, cwd: &str) -> Option<Vec<String>> {
        let event = json!({"tool_name": tool, "tool_input": input, "cwd": cwd});
        let mine = ["mcp__fs__write".to_owned()];
        let got = Touched::of(
            agent.spec(),
            event.as_object().unwrap(),
            Path::new("/w"),
            &mine,
        );
        let show = |p: &PathBuf| p.to_string_lossy().into_owned();
        match got {
            Touched::Paths { named, .. } => Some(named.iter().map(show).collect()),
            Touched::Other(file) => Some(file.iter().map(show).collect()),
            Touched::Unknown => None,
        }
    }

    #[test]
    fn file_tools_name_their_paths() {
        use Agent::{Claude, Codex, Gemini};
        let patch = "*** Begin Patch\n*** Update File: a.txt\n@@\n-x\n+y\n\
                     *** Add File: /w/n/b.txt\n+new\n*** Delete File: c.txt\n\
                     *** Update File: a.txt\n*** Move to: d.txt\n*** End Patch\n";
        // The agent, its tool, the tool's input, the event's cwd, the files (None: unknown).
        type Case<'a> = (Agent, &'a str, Value, &'a str, Option<&'a [&'a str]>);
        let cases: &[Case] = &[
            (
                Claude,
                "Write",
                json!({"file_path": "/w/src/a.rs"}),
                "/w",
                Some(&["src/a.rs"]),
            ),
            (
                Claude,
                "Edit",
                json!({"file_path": "/w/./b/../c.rs"}),
                "/w",
                Some(&["c.rs"]),
            ),
            (
                Claude,
                "MultiEdit",
                json!({"file_path": "/elsewhere/x"}),
                "/w",
                Some(&["/elsewhere/x"]),
            ),
            (
                Claude,
                "NotebookEdit",
                json!({"notebook_path": "/w/n.ipynb"}),
                "/w",
                Some(&["n.ipynb"]),
            ),
            // Relative paths are from the event's cwd, `..` applied.
            (
                Claude,
                "Write",
                json!({"file_path": "Cargo.lock"}),
                "/w/src",
                Some(&["src/Cargo.lock"]),
            ),
            (
                Claude,
                "Write",
                json!({"file_path": "../../etc/passwd"}),
                "/w",
                Some(&["/etc/passwd"]),
            ),
            (
                Claude,
                "Write",
                json!({"file_path": "/w/../w2/x"}),
                "/w",
                Some(&["/w2/x"]),
            ),
            (
                Claude,
                "Write",
                json!({"file_path": "d/../e.rs"}),
                "/w",
                Some(&["e.rs"]),
            ),
            // A file tool whose path cannot be read: unknown.
            (Claude, "Write", json!({"content": "x"}), "/w", None),
            (Claude, "Write", json!({"file_path": 7}), "/w", None),
            (Claude, "Write", json!({"file_path": ""}), "/w", None),
            // Not a file tool: its path when it names one (a read), else none.
            (
                Claude,
                "Read",
                json!({"file_path": "/w/secrets/k"}),
                "/w",
                Some(&["secrets/k"]),
            ),
            (
                Claude,
                "Bash",
                json!({"command": "echo > /w/q"}),
                "/w",
                Some(&[]),
            ),
            // Another agent's tool name is no file tool of this one.
            (
                Claude,
                "write_file",
                json!({"content": "x"}),
                "/w",
                Some(&[]),
            ),
            (
                Gemini,
                "write_file",
                json!({"file_path": "rel/y.md"}),
                "/w",
                Some(&["rel/y.md"]),
            ),
            (
                Gemini,
                "replace",
                json!({"absolute_path": "/w/z"}),
                "/w",
                Some(&["z"]),
            ),
            (Gemini, "replace", json!({}), "/w", None),
            (
                Codex,
                "apply_patch",
                json!({"command": patch}),
                "/w",
                Some(&["a.txt", "n/b.txt", "c.txt", "d.txt"]),
            ),
            (
                Codex,
                "apply_patch",
                json!({"command": "*** Add File: x.sql\n"}),
                "/w/migrations",
                Some(&["migrations/x.sql"]),
            ),
            (
                Codex,
                "apply_patch",
                json!({"command": "no patch here"}),
                "/w",
                None,
            ),
            (Codex, "apply_patch", json!({"input": patch}), "/w", None),
            // hookvisor.yml's file_tools.
            (
                Codex,
                "mcp__fs__write",
                json!({"path": "/w/m"}),
                "/w",
                Some(&["m"]),
            ),
        ];
        for (agent, tool, input, cwd, want) in cases {
            let want = want.map(|w| w.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>());
            assert_eq!(
                touched(*agent, tool, input.clone(), cwd),
                want,
                "{agent:?} {tool} {input}"
            );
        }
    }

    #[test]
    fn file_edited_fires_only_inside_the_workspace() {
        let touched = Touched::Paths {
            named: vec!["a".into(), "/etc/x".into(), "".into()],
            also: vec!["b".into()],
        };
        assert_eq!(touched.written(), [PathBuf::from("a")]);
        assert!(Touched::Unknown.written().is_empty());
        assert!(Touched::Other(vec!["r".into()]).written().is_empty());
    }

    /// A gate sees every name a write may reach: a relative path from the workspace as well
    /// as from `cwd`, and through a link the agent planted.
    #[test]
    fn a_gate_sees_the_other_names_of_a_path() {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().canonicalize().unwrap();
        std::fs::create_dir_all(ws.join("migrations")).unwrap();
        std::os::unix::fs::symlink(ws.join("migrations"), ws.join("m")).unwrap();
        let files = |tool: &str, input: Value, cwd: &Path| {
            let event = json!({"tool_name": tool, "tool_input": input, "cwd": cwd});
            let touched = Touched::of(Agent::Claude.spec(), event.as_object().unwrap(), &ws, &[]);
            event_data(event.as_object().unwrap(), &touched)["files"].clone()
        };
        let at = |rel: &str| ws.join(rel).to_string_lossy().into_owned();
        assert_eq!(
            files("Write", json!({"file_path": at("m/001.sql")}), &ws),
            json!(["m/001.sql", "migrations/001.sql"])
        );
        assert_eq!(
            files("Write", json!({"file_path": at("m/../m/002.sql")}), &ws),
            json!(["m/002.sql", "migrations/002.sql"])
        );
        assert_eq!(
            files(
                "Write",
                json!({"file_path": "x.lock"}),
                &ws.join("migrations")
            ),
            json!(["migrations/x.lock", "x.lock"])
        );
        assert_eq!(
            files("Write", json!({"file_path": at("src/a.rs")}), &ws),
            json!(["src/a.rs"])
        );
    }

    #[test]
    fn agent_fields_map_to_canonical_names() {
        let input = json!({
            "session_id": "s", "hook_event_name": "PreToolUse", "tool_name": "run_shell_command",
            "tool_input": {"command": "ls", "file_path": "/w/a"}, "cwd": "/w",
        });
        let input = input.as_object().unwrap();
        let touched = Touched::of(Agent::Gemini.spec(), input, Path::new("/w"), &[]);
        let data = event_data(input, &touched);
        assert_eq!(data["tool"], "bash");
        assert_eq!(data["tool_name"], "run_shell_command");
        assert_eq!(data["file"], "a");
        assert_eq!(data["files"], json!(["a"]));
        assert_eq!(data["agent"]["session_id"], "s");
        assert_eq!(data["agent"]["cwd"], "/w");
        assert!(data["agent"].get("tool_name").is_none());
        // Unknown files: no `files`, which a gate with a pattern does not skip.
        let data = event_data(input, &Touched::Unknown);
        assert!(data.get("files").is_none());
        let task = json!({"task_id": "7", "task_subject": "Ship it"});
        let data = event_data(task.as_object().unwrap(), &Touched::Other(Vec::new()));
        assert_eq!(data["task_content"], "Ship it");
        assert_eq!(data["task_id"], "7");
        assert!(data.get("files").is_none(), "no tool, no files");
    }
}

//! The `spawn` action (docs/EVENTS.md §1.2, §4.4, §5 rule 23): a hook that starts a child, either a
//! whole `hookvisor loop` described by a pipeline file or a plain program, in a state dir of its
//! own.
//!
//! The rules, written once here:
//!
//! 1. **Declarative only.** `action: spawn` is written in a non-executable `.yml` hook with
//!    exactly one target: `pipeline: NAME` (a loop spec in `.discobot/pipelines/NAME.yml`,
//!    read strictly when the hook runs, see `pipeline`) or `argv: [PROGRAM, ARG…]` (a plain
//!    program, no loop; each element a template like a command's `argv`).
//! 2. **The child dir** is `<state>/children/<event>-<iteration>-<hookId>[-N]/`, `<iteration>`
//!    0 outside a loop; `-N` (1, 2, …) is added when the name is taken, by a retry or an earlier
//!    firing of the same iteration. `children/` and the child dir are made mode 0700 with
//!    `mkdir`, which never follows a symlink left in their place; a `children` that is a symlink
//!    or not ours is refused. The child dir is the child's state dir
//!    (`HOOKVISOR_STATE_DIR`): its own status, logs, session and context buffer.
//! 3. **Inputs** (`inputs:`, a mapping) are the only parent data the child gets: each string
//!    that is exactly one `${name}` takes the value's JSON type (a JSON variable stays JSON,
//!    `${iteration}` is a number, other text a string); any other string has its references
//!    replaced as text. The result is written atomically to `inputs.json` (`{}` without
//!    `inputs:`).
//! 4. **Environment**: hookvisor's own start environment minus event variables (every
//!    `HOOKVISOR_*` and `DISCOBOT_*`, and `SESSION_ID`), responses (they are `HOOKVISOR_*`
//!    too) and secrets (every name `~/.config/hookvisor/secrets.env` defines), plus
//!    `HOOKVISOR_INPUTS`, `HOOKVISOR_OUTPUT`, `HOOKVISOR_PARENT_SESSION`,
//!    `HOOKVISOR_SPAWN_DEPTH` and `HOOKVISOR_STATE_DIR`. Agent credentials (`ANTHROPIC_API_KEY`)
//!    pass: a child agent needs them.
//! 5. **Depth** counts from 1: the child of a process without `HOOKVISOR_SPAWN_DEPTH` is
//!    depth 1; a child that would be depth 4 is refused.
//! 6. **Workspace**: `shared` (the default) runs the child in the workspace; `worktree` runs it
//!    in `git worktree add --detach` of `HEAD` under the child dir, removed (`git worktree
//!    remove --force`) when the child ends, whatever the way it ended.
//! 7. **Outcome.** The child runs in its own process group under the hook's `timeout`
//!    (default 3600 s; the group is killed at the deadline). Success is exit 0 and an
//!    `output.json` that, if present, holds one JSON object; a pipeline child that ends without
//!    done exits non-zero, so it is a failed spawn. A success hands the text of its
//!    `output.json` to the later hooks of the firing as `${spawn_output}` (see
//!    `crate::produced`). A timeout is recorded as one (exit 124, `timedOut`, as a command's)
//!    and judged by `on_timeout`: `abort` (the default) ends the event, whatever its kind or
//!    the hook's phase, and is never re-run; `continue` leaves it a failure judged like any
//!    other (`block_on`, `on_failure`).
//! 8. **`await: false`** children are detached: started in their own process group, recorded
//!    in `<state>/children/children.json` with pid and start time, and stopped when this state
//!    dir's `session.end` fires (see `detached`).
//!
//! This file holds the fields (rules 1, 3's shape, 6, 7's words); `pipeline` reads the loop
//! specs, `child` makes and runs one child (rules 2 to 7), `detached` keeps the unawaited
//! ones (rule 8), and `listing` reads the children back for a dashboard.

#![forbid(unsafe_code)]

pub mod pipeline;

use serde_json::{Value as Json, json};

use crate::policy::OnTimeout;

pub use self::pipeline::{PipelineError, PipelineSpec};

/// The deepest child allowed (rule 5).
pub const MAX_SPAWN_DEPTH: u32 = 3;

/// The timeout of a spawn hook without `timeout:` (docs/EVENTS.md §1.3).
pub const DEFAULT_SPAWN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3600);

/// The front matter fields of `action: spawn`, besides `argv`. Known to `check`, and like the
/// git actions' they do not make a phase-1 script an event hook.
pub(crate) const SPAWN_FIELDS: [&str; 4] = ["pipeline", "inputs", "workspace", "on_timeout"];

/// What a spawn hook starts (rule 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpawnTarget {
    /// `pipeline: NAME`: `hookvisor loop` run by `.discobot/pipelines/NAME.yml`.
    Pipeline(String),
    /// `argv:`: a plain program, each element a template.
    Argv(Vec<String>),
}

/// Where the child works (rule 6).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpawnWorkspace {
    /// The workspace itself. The default.
    Shared,
    /// A detached git worktree of `HEAD` under the child dir, removed afterwards.
    Worktree,
}

/// `action: spawn` and its fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Spawn {
    /// `pipeline:` or `argv:`.
    pub target: SpawnTarget,
    /// `inputs:`, a JSON object whose strings are templates; empty without the field.
    pub inputs: serde_json::Map<String, Json>,
    /// `workspace:`; default [`SpawnWorkspace::Shared`].
    pub workspace: SpawnWorkspace,
    /// `on_timeout:`; default [`OnTimeout::Abort`].
    pub on_timeout: OnTimeout,
}

/// Why the fields of a spawn hook do not load; each names the field and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SpawnFieldError {
    /// The action is in an executable script (rule 1).
    #[error(
        "action 'spawn' is for a declarative hook: put it in a non-executable .yml file of front \
         matter only (chmod -x), or drop 'action:' to run this script"
    )]
    NotDeclarative,
    /// Neither or both of `pipeline` and `argv`.
    #[error("action 'spawn' needs exactly one of 'pipeline: NAME' and 'argv: [PROGRAM, …]'")]
    Target,
    /// `run:` belongs to `action: command`.
    #[error("'run' is no field of action 'spawn'; use 'argv: [sh, -c, …]' or drop it")]
    Run,
    /// `pipeline:` is no plain name.
    #[error(
        "pipeline: '{value}' is no pipeline name; write the NAME of .discobot/pipelines/NAME.yml \
         (letters, digits, '.', '_', '-')"
    )]
    PipelineName {
        /// The value.
        value: String,
    },
    /// `argv:` is refused, with the reason command hooks give.
    #[error("argv: {0}")]
    Argv(String),
    /// `inputs:` is not a mapping.
    #[error(
        "inputs: give a mapping, as in 'inputs: {{task: \"${{task_id}}\", files: \"${{files}}\"}}'"
    )]
    Inputs,
    /// `workspace:` is not one of its words.
    #[error("workspace: '{value}' is not shared or worktree")]
    Workspace {
        /// The value.
        value: String,
    },
    /// `on_timeout:` is not one of its words.
    #[error("on_timeout: '{value}' is not abort or continue")]
    OnTimeout {
        /// The value.
        value: String,
    },
}

impl SpawnFieldError {
    /// The field the error is about, for its line; `None` for the whole entry.
    pub fn key(&self) -> Option<&'static str> {
        match self {
            SpawnFieldError::NotDeclarative => Some("action"),
            SpawnFieldError::Target => None,
            SpawnFieldError::Run => Some("run"),
            SpawnFieldError::PipelineName { .. } => Some("pipeline"),
            SpawnFieldError::Argv(_) => Some("argv"),
            SpawnFieldError::Inputs => Some("inputs"),
            SpawnFieldError::Workspace { .. } => Some("workspace"),
            SpawnFieldError::OnTimeout { .. } => Some("on_timeout"),
        }
    }
}

impl Spawn {
    /// Reads the fields of `action: spawn`: `field` gives a field's value as written (`inputs`
    /// as the JSON text front matter keeps a mapping in), `argv` the checked `argv:` list or
    /// the reason it was refused.
    pub(crate) fn from_fields<'a>(
        field: impl Fn(&str) -> Option<&'a str>,
        argv: Option<Result<Vec<String>, String>>,
        declarative: bool,
    ) -> Result<Spawn, SpawnFieldError> {
        if !declarative {
            return Err(SpawnFieldError::NotDeclarative);
        }
        if field("run").is_some() {
            return Err(SpawnFieldError::Run);
        }
        let target = match (field("pipeline"), argv) {
            (Some(name), None) if is_pipeline_name(name) => SpawnTarget::Pipeline(name.to_owned()),
            (Some(name), None) => {
                return Err(SpawnFieldError::PipelineName {
                    value: name.to_owned(),
                });
            }
            (None, Some(Ok(argv))) => SpawnTarget::Argv(argv),
            (None, Some(Err(reason))) => return Err(SpawnFieldError::Argv(reason)),
            _ => return Err(SpawnFieldError::Target),
        };
        let inputs = match field("inputs") {
            None => serde_json::Map::new(),
            Some(text) => match serde_json::from_str::<Json>(text) {
                Ok(Json::Object(map)) => map,
                _ => return Err(SpawnFieldError::Inputs),
            },
        };
        let workspace = match field("workspace") {
            None | Some("shared") => SpawnWorkspace::Shared,
            Some("worktree") => SpawnWorkspace::Worktree,
            Some(other) => {
                return Err(SpawnFieldError::Workspace {
                    value: other.to_owned(),
                });
            }
        };
        let on_timeout = match field("on_timeout") {
            None => OnTimeout::default(),
            Some(value) => value.parse().map_err(|_| SpawnFieldError::OnTimeout {
                value: value.to_owned(),
            })?,
        };
        Ok(Spawn {
            target,
            inputs,
            workspace,
            on_timeout,
        })
    }

    /// The fields as `list` shows them, in front matter spelling.
    pub fn fields(&self) -> Vec<(&'static str, Json)> {
        let target = match &self.target {
            SpawnTarget::Pipeline(name) => ("pipeline", json!(name)),
            SpawnTarget::Argv(argv) => ("argv", json!(argv)),
        };
        vec![
            target,
            ("inputs", Json::Object(self.inputs.clone())),
            (
                "workspace",
                json!(match self.workspace {
                    SpawnWorkspace::Shared => "shared",
                    SpawnWorkspace::Worktree => "worktree",
                }),
            ),
            ("on_timeout", json!(self.on_timeout.as_str())),
        ]
    }

    /// The template names the argv and inputs use, for `check`'s warning about unknown ones.
    pub fn references(&self) -> Vec<String> {
        let mut names = Vec::new();
        if let SpawnTarget::Argv(argv) = &self.target {
            for item in argv {
                names.extend(crate::template::references(item));
            }
        }
        names.extend(crate::template::json_references(self.inputs.values()));
        names.sort();
        names.dedup();
        names
    }
}

/// A pipeline name: a file name under `.discobot/pipelines/`, never a path (rule 1).
fn is_pipeline_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name.len() <= 128
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn spawn(
        pairs: &[(&str, &str)],
        argv: Option<Result<Vec<String>, String>>,
    ) -> Result<Spawn, SpawnFieldError> {
        let map: BTreeMap<&str, &str> = pairs.iter().copied().collect();
        Spawn::from_fields(|k| map.get(k).copied(), argv, true)
    }

    #[test]
    fn fields_and_defaults() {
        let s = spawn(&[("pipeline", "review")], None).unwrap();
        assert_eq!(s.target, SpawnTarget::Pipeline("review".into()));
        assert_eq!(
            (s.workspace, s.on_timeout),
            (SpawnWorkspace::Shared, OnTimeout::Abort)
        );
        assert!(s.inputs.is_empty());
        let s = spawn(
            &[
                (
                    "inputs",
                    r#"{"task":"${task_id}","n":3,"deep":["${files}"]}"#,
                ),
                ("workspace", "worktree"),
                ("on_timeout", "continue"),
            ],
            Some(Ok(vec!["sh".into(), "-c".into(), "x ${session}".into()])),
        )
        .unwrap();
        assert_eq!(s.references(), ["files", "session", "task_id"]);
        assert_eq!(s.inputs["n"], json!(3));
        assert_eq!(s.workspace, SpawnWorkspace::Worktree);
    }

    #[test]
    fn refusals_name_their_field() {
        let argv = || Some(Ok(vec!["true".to_owned()]));
        type Case<'a> = (
            &'a [(&'a str, &'a str)],
            Option<Result<Vec<String>, String>>,
            Option<&'a str>,
        );
        let table: Vec<Case<'_>> = vec![
            (&[], None, None),
            (&[("pipeline", "a")], argv(), None),
            (&[("pipeline", "../x")], None, Some("pipeline")),
            (&[("pipeline", ".hidden")], None, Some("pipeline")),
            (&[("pipeline", "a/b")], None, Some("pipeline")),
            (&[("run", "x")], argv(), Some("run")),
            (&[("inputs", "[1]")], argv(), Some("inputs")),
            (&[("inputs", "text")], argv(), Some("inputs")),
            (&[("workspace", "copy")], argv(), Some("workspace")),
            (&[("on_timeout", "retry")], argv(), Some("on_timeout")),
            (&[], Some(Err("bad".into())), Some("argv")),
        ];
        for (pairs, argv, key) in table {
            let err = spawn(pairs, argv).unwrap_err();
            assert_eq!(err.key(), key, "{pairs:?}: {err}");
        }
        let script = Spawn::from_fields(|_| None, Some(Ok(vec!["x".into()])), false).unwrap_err();
        assert_eq!(script, SpawnFieldError::NotDeclarative);
    }
}

//! Pipeline files (docs/EVENTS.md §4.4, §5 rules 18 and 23): `.discobot/pipelines/NAME.yml`, the loop a
//! `pipeline:` spawn runs, or any file `hookvisor loop --pipeline` names. Read strictly (an
//! unknown key, a wrong type, anchors or a repeated key are errors naming the file and line):
//!
//! ```yaml
//! agent: [claude, -p, "{prompt}"]   # the agent command, a non-empty list (a spawn needs it)
//! prompt: Review the last commit     # the task prompt (`loop --prompt`)
//! max_iterations: 3                  # `loop --max-iterations` (default: the loop's 20)
//! until: test -f REVIEW.md           # `loop --until`, a `sh -c` string
//! # agent-pipelines' own keys (docs/upstream/agent-pipelines-unified-hooks.md):
//! name: full-workflow
//! description: Plan, then work
//! stages:                            # run in order, each `loop --stage NAME`
//!   - name: plan
//!     loop: improve-plan             # its file: loops/improve-plan/loop.yaml (below)
//!     runs: 5                        # its iterations at most
//! hooks: {on_stage_complete: […]}    # the pipeline's hooks, read by `crate::import`
//! disable_global_hooks: true
//! ```
//!
//! A loop run by a pipeline file runs that file's hooks and its current stage's, and no other
//! hook of the workspace (a spawned child would otherwise run its parent's again, down to the
//! depth limit). A stage's `loop:` (or `stage:`) NAME is its own file, the first of
//! `loops/NAME/loop.yaml`, `stages/NAME/stage.yaml` beside the pipeline file, then in its
//! parent directory (agent-pipelines' `scripts/pipelines/` beside `scripts/loops/`).

use std::path::{Path, PathBuf};

/// The bytes a pipeline file may have: a spec is a few lines.
const MAX_BYTES: u64 = 64 * 1024;

/// A loop spec read from a pipeline file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PipelineSpec {
    /// The agent command, program first; empty when the file gives none.
    pub agent: Vec<String>,
    /// The task prompt.
    pub prompt: Option<String>,
    /// Iterations at most; `None` keeps the loop's default.
    pub max_iterations: Option<u64>,
    /// The done test, a `sh -c` string.
    pub until: Option<String>,
    /// agent-pipelines' stages, in order.
    pub stages: Vec<StageSpec>,
}

/// One stage of a pipeline file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageSpec {
    /// `name:`, the stage's `${stage}`.
    pub name: String,
    /// Its own file (`loop:` or `stage:` found, see the module), when it names one.
    pub file: Option<PathBuf>,
    /// `runs:`, its iterations at most.
    pub runs: Option<u64>,
}

/// Why a pipeline file cannot be used; shown as `file:line: reason`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}:{line}: {reason}", path.display())]
pub struct PipelineError {
    /// The file.
    pub path: PathBuf,
    /// 1-based line (1 when the whole file is at fault).
    pub line: usize,
    /// What is wrong and the fix.
    pub reason: String,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default)]
    agent: Option<Vec<String>>,
    #[serde(default)]
    prompt: Option<String>,
    #[serde(default)]
    max_iterations: Option<u64>,
    #[serde(default)]
    until: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    name: Option<String>,
    #[serde(default)]
    #[allow(dead_code)]
    description: Option<String>,
    #[serde(default)]
    stages: Vec<RawStage>,
    // Read by `crate::import`'s agent-pipelines reader, with its own checks.
    #[serde(default)]
    #[allow(dead_code)]
    hooks: Option<serde_json::Value>,
    #[serde(default)]
    #[allow(dead_code)]
    disable_global_hooks: Option<serde_json::Value>,
}

/// A stage; agent-pipelines' other stage keys (`inputs`, `termination`) mean nothing here.
#[derive(serde::Deserialize)]
struct RawStage {
    name: String,
    #[serde(default, rename = "loop")]
    loop_: Option<String>,
    #[serde(default)]
    stage: Option<String>,
    #[serde(default)]
    runs: Option<u64>,
}

impl PipelineSpec {
    /// `.discobot/pipelines/NAME.yml` of `workspace` (`pipeline: NAME`, `loop --pipeline NAME`).
    pub fn path_of(workspace: &Path, name: &str) -> PathBuf {
        workspace
            .join(".discobot")
            .join("pipelines")
            .join(format!("{name}.yml"))
    }

    /// Reads and checks the pipeline file at `path` (the module's keys); each stage's file is
    /// found, or its absence is the error.
    pub fn load(path: &Path) -> Result<PipelineSpec, PipelineError> {
        load(path)
    }
}

/// [`PipelineSpec::path_of`].
pub fn path_of(workspace: &Path, name: &str) -> PathBuf {
    PipelineSpec::path_of(workspace, name)
}

/// [`PipelineSpec::load`].
pub fn load(path: &Path) -> Result<PipelineSpec, PipelineError> {
    use std::io::Read as _;
    let at = |line: usize, reason: String| PipelineError {
        path: path.to_owned(),
        line,
        reason,
    };
    let mut text = String::new();
    let read = std::fs::File::open(path)
        .and_then(|file| file.take(MAX_BYTES + 1).read_to_string(&mut text));
    match read {
        Ok(n) if n as u64 > MAX_BYTES => {
            return Err(at(1, "over 64 KiB; a pipeline spec is a few lines".into()));
        }
        Ok(_) => {}
        Err(err) => {
            return Err(at(
                1,
                format!(
                    "cannot read it ({err}); create it with agent, prompt, max_iterations, until"
                ),
            ));
        }
    }
    let mut spec = parse(&text).map_err(|(line, reason)| at(line, reason))?;
    let dir = path.parent().unwrap_or(Path::new("."));
    for (stage, raw) in spec.stages.iter_mut().zip(stage_names(&text)) {
        let Some(name) = raw else { continue };
        let candidates = [
            dir.join("loops").join(&name).join("loop.yaml"),
            dir.join("stages").join(&name).join("stage.yaml"),
            dir.join("../loops").join(&name).join("loop.yaml"),
            dir.join("../stages").join(&name).join("stage.yaml"),
        ];
        match candidates.iter().find(|c| c.is_file()) {
            Some(file) => stage.file = Some(file.clone()),
            None => {
                return Err(at(
                    stage_line(&text, &stage.name),
                    format!(
                        "stage '{}': no file of its loop '{name}'; create {} (or {})",
                        stage.name,
                        candidates[0].display(),
                        candidates[2].display()
                    ),
                ));
            }
        }
    }
    Ok(spec)
}

/// Each stage's `loop:` or `stage:` name, in order (the stages as parsed, again: `parse` keeps
/// only the text).
fn stage_names(text: &str) -> Vec<Option<String>> {
    serde_saphyr::from_str_with_options::<Raw>(text, crate::frontmatter::strict_options())
        .map(|raw| {
            raw.stages
                .into_iter()
                .map(|s| s.loop_.or(s.stage))
                .collect()
        })
        .unwrap_or_default()
}

/// The line of the stage named `name`, else 1.
fn stage_line(text: &str, name: &str) -> usize {
    text.lines()
        .position(|l| l.trim_start().trim_start_matches("- ").trim() == format!("name: {name}"))
        .map_or(1, |i| i + 1)
}

/// Parses a pipeline file's text; the error is `(line, reason)`.
fn parse(text: &str) -> Result<PipelineSpec, (usize, String)> {
    let raw: Raw = serde_saphyr::from_str_with_options(text, crate::frontmatter::strict_options())
        .map_err(|e| {
            let e = e.without_snippet();
            let line = e
                .location()
                .and_then(|l| usize::try_from(l.line()).ok())
                .filter(|l| *l > 0)
                .unwrap_or(1);
            let rendered = e.to_string();
            let reason = match rendered.rfind(" at line ") {
                Some(at) => rendered.get(..at).unwrap_or(&rendered).to_owned(),
                None => rendered,
            };
            (
                line,
                format!(
                    "{reason}; the keys are agent (a list), prompt, max_iterations, until, \
                     name, description, stages, hooks, disable_global_hooks"
                ),
            )
        })?;
    let raw_agent_given = raw.agent.is_some();
    let line_of = |key: &str| {
        text.lines()
            .position(|l| l.starts_with(&format!("{key}:")))
            .map_or(1, |i| i + 1)
    };
    let agent = raw.agent.unwrap_or_default();
    if raw_agent_given && agent.first().is_none_or(|p| p.is_empty()) {
        return Err((
            line_of("agent"),
            "agent: give the agent command as a list, program first, as in 'agent: [claude, -p, \
             \"{prompt}\"]'"
                .into(),
        ));
    }
    if raw.max_iterations == Some(0) {
        return Err((
            line_of("max_iterations"),
            "max_iterations: 0 runs nothing; give 1 or more".into(),
        ));
    }
    for (key, value) in [("prompt", &raw.prompt), ("until", &raw.until)] {
        if value.as_deref().is_some_and(|v| v.contains('\0')) {
            return Err((line_of(key), format!("{key}: a NUL byte cannot be passed")));
        }
    }
    if agent.iter().any(|a| a.contains('\0')) {
        return Err((
            line_of("agent"),
            "agent: a NUL byte cannot be passed".into(),
        ));
    }
    for stage in &raw.stages {
        if stage.runs == Some(0) {
            return Err((
                stage_line(text, &stage.name),
                format!(
                    "stage '{}': runs: 0 runs nothing; give 1 or more",
                    stage.name
                ),
            ));
        }
    }
    Ok(PipelineSpec {
        agent,
        prompt: raw.prompt,
        max_iterations: raw.max_iterations,
        until: raw.until,
        stages: (raw.stages.into_iter())
            .map(|s| StageSpec {
                name: s.name,
                file: None,
                runs: s.runs,
            })
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_spec() {
        let spec =
            parse("agent: [sh, agent.sh]\nprompt: go\nmax_iterations: 2\nuntil: 'true'\n").unwrap();
        assert_eq!(spec.agent, ["sh", "agent.sh"]);
        assert_eq!(spec.prompt.as_deref(), Some("go"));
        assert_eq!(spec.max_iterations, Some(2));
        assert_eq!(spec.until.as_deref(), Some("true"));
        let spec = parse("agent:\n  - a\n").unwrap();
        assert_eq!((spec.prompt, spec.max_iterations), (None, None));
    }

    #[test]
    fn refusals_carry_their_line() {
        let table: &[(&str, usize, &str)] = &[
            ("agent: [a]\nmodel: x\n", 2, "unknown field"),
            ("agent: []\n", 1, "program first"),
            ("agent: [a]\nmax_iterations: many\n", 2, ""),
            ("agent: [a]\nmax_iterations: 0\n", 2, "1 or more"),
            ("agent: [a]\nagent: [b]\n", 2, ""),
            ("a: &x [1]\nagent: *x\n", 1, ""),
        ];
        for (text, line, fragment) in table {
            let (got, reason) = parse(text).unwrap_err();
            assert_eq!(got, *line, "{text:?}: {reason}");
            assert!(reason.contains(fragment), "{text:?}: {reason}");
        }
    }

    #[test]
    fn stages_find_their_own_files_or_name_the_one_missing() {
        let dir = tempfile::tempdir().unwrap();
        let pipelines = dir.path().join("scripts/pipelines");
        let work = dir.path().join("scripts/loops/work");
        std::fs::create_dir_all(&pipelines).unwrap();
        std::fs::create_dir_all(&work).unwrap();
        std::fs::write(work.join("loop.yaml"), "name: work\n").unwrap();
        let path = pipelines.join("full.yaml");
        let text = "name: full\nstages:\n  - name: build\n    loop: work\n    runs: 2\n    \
                    inputs: {from: plan}\n  - name: ship\n";
        std::fs::write(&path, text).unwrap();
        let spec = load(&path).unwrap();
        assert_eq!(spec.agent, Vec::<String>::new());
        assert_eq!(spec.stages.len(), 2);
        assert_eq!(spec.stages[0].runs, Some(2));
        assert_eq!(
            spec.stages[0].file.as_deref(),
            Some(pipelines.join("../loops/work/loop.yaml").as_path())
        );
        assert_eq!(spec.stages[1].file, None);
        std::fs::write(&path, "stages:\n  - name: build\n    loop: plan\n").unwrap();
        let err = load(&path).unwrap_err();
        assert_eq!(err.line, 2, "{err}");
        assert!(err.reason.contains("no file of its loop 'plan'"), "{err}");
    }

    #[test]
    fn errors_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = path_of(dir.path(), "missing");
        let err = load(&path).unwrap_err();
        assert!(
            err.to_string()
                .starts_with(&format!("{}:1: ", path.display()))
        );
    }
}

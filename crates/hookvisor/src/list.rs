//! What discovery found, as `list`, `check` and the dashboard show it: for people and for
//! scripts.

use std::io::{self, Write};
use std::path::Path;

use hookvisor_core::config::Source;
use hookvisor_core::event::Event;
use hookvisor_core::policy::OnFailure;
use hookvisor_core::{Config, Context, Discovery, Hook, Problem, ProblemKind};
use serde_json::{Value, json};

/// Every problem as `file[:line]: reason`, then every warning as `file[:line]: warning: reason`.
pub(crate) fn write_problems(out: &mut impl Write, discovery: &Discovery) -> io::Result<()> {
    for problem in &discovery.problems {
        writeln!(out, "{problem}")?;
    }
    for warning in &discovery.warnings {
        let at = warning.path.display();
        match warning.line {
            Some(line) => writeln!(out, "{at}:{line}: warning: {}", warning.kind)?,
            None => writeln!(out, "{at}: warning: {}", warning.kind)?,
        }
    }
    Ok(())
}

/// The event fields of an event-model hook on one line, under its row of `list`: its source,
/// then each field as its front matter spells it (docs/EVENTS.md §5 rule 10's fields, for people).
/// `tool` and `when` appear only when set.
pub(crate) fn event_line(hook: &Hook) -> String {
    let spec = &hook.spec;
    let mut line = format!(
        "{}  event: {}  phase: {}  action: {}",
        hook.source(),
        spec.event,
        spec.phase,
        spec.action.as_str()
    );
    for (key, value) in spec.action.fields() {
        match value {
            Value::String(text) => line.push_str(&format!("  {key}: {text}")),
            // An unset field with a default that is known only when it runs (git-push's branch).
            Value::Null => line.push_str(&format!("  {key}: -")),
            other => line.push_str(&format!("  {key}: {other}")),
        }
    }
    if let Some(tool) = &spec.tool {
        line.push_str(&format!("  tool: {tool}"));
    }
    if let Some(when) = &spec.when {
        line.push_str(&format!("  when: {when}"));
    }
    let on_failure = match spec.on_failure {
        OnFailure::RetryThenAbort => "[retry, abort]",
        other => other.as_str(),
    };
    line.push_str(&format!(
        "  await: {}  block_on: {}  on_failure: {on_failure}",
        spec.await_, spec.block_on
    ));
    one_line(&line)
}

/// `text` with its control characters escaped, so one hook stays one line whatever its front
/// matter holds.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| match c.is_control() {
            true => c.escape_default().to_string(),
            false => c.to_string(),
        })
        .collect()
}

/// One `source: NAME used|skipped (where or why)` line per source of hooks (docs/EVENTS.md §2.2),
/// when there is more than phase 1's `.discobot/hooks` to say: a `hookvisor.yml`, a global
/// hooks directory, or another tool's hook file.
pub(crate) fn write_sources(
    out: &mut impl Write,
    ctx: &Context,
    discovery: &Discovery,
) -> io::Result<()> {
    let configured = std::fs::symlink_metadata(Config::path(&ctx.workspace)).is_ok();
    let global = discovery
        .sources
        .iter()
        .any(|s| s.source == Source::Global && s.dir.as_deref().is_some_and(|d| d.is_dir()));
    // Another tool's file found (docs/EVENTS.md §2.2): say whether it was read.
    let imported = discovery
        .sources
        .iter()
        .any(|s| !matches!(s.source, Source::Discobot | Source::Global) && s.dir.is_some());
    if configured || global || imported {
        for source in &discovery.sources {
            writeln!(out, "source: {source}")?;
        }
    }
    Ok(())
}

/// The JSON of `list --json` (docs/DESIGN.md), also served by the HTTP API. Paths are shown lossily
/// (U+FFFD for bytes that are not UTF-8): a name that is not UTF-8 is itself a listed problem,
/// and `Path`'s own `Serialize` would fail on it.
pub fn list_json(discovery: &Discovery, workspace: &Path) -> Value {
    let problems = |list: &[Problem]| -> Vec<Value> {
        list.iter().map(|p| problem_json(p, workspace)).collect()
    };
    json!({
        "hooks": (discovery.hooks.iter())
            .map(hook_json)
            .collect::<Vec<_>>(),
        "problems": problems(&discovery.problems),
        "warnings": problems(&discovery.warnings),
    })
}

/// The `type` shown: the phase-1 kind, else the event (docs/EVENTS.md §2.1, as status.json).
pub(crate) fn type_of(hook: &Hook) -> String {
    match hook.spec.event.phase1_kind() {
        Some(kind) => kind.as_str().to_owned(),
        None => hook.spec.event.to_string(),
    }
}

fn hook_json(hook: &Hook) -> Value {
    let mut json = json!({
        "id": hook.id,
        "name": hook.name,
        "type": type_of(hook),
        "path": hook.path.to_string_lossy(),
        "runAs": hook.run_as.as_str(),
        "pattern": hook.pattern.as_ref().map(|p| p.as_str()),
        "notifyLlm": hook.notify_llm,
        "blocking": hook.blocking,
        "timeout": hook.timeout.as_secs(),
        "description": hook.description,
    });
    let spec = &hook.spec;
    // Only session hooks are retried, so only they carry the field.
    if spec.event == Event::SessionStart {
        json["retries"] = json!(spec.retries);
    }
    // Every hook shows its event fields (docs/EVENTS.md §5 rule 10), phase-1 hooks included, so
    // that a dashboard finds a `type: file` hook among the `turn.end` hooks.
    json["event"] = json!(spec.event.to_string());
    json["phase"] = json!(spec.phase.as_str());
    json["action"] = json!(spec.action.as_str());
    // An action's own fields, camelCased like the others (`no_verify` → `noVerify`).
    for (key, value) in spec.action.fields() {
        let mut words = key.split('_');
        let mut name = words.next().unwrap_or_default().to_owned();
        for word in words {
            let mut chars = word.chars();
            name.extend(chars.next().map(|c| c.to_ascii_uppercase()));
            name.push_str(chars.as_str());
        }
        json[name] = value;
    }
    json["source"] = json!(hook.source());
    json["tool"] = json!(spec.tool.as_ref().map(ToString::to_string));
    json["when"] = json!(spec.when.as_ref().map(ToString::to_string));
    json["await"] = json!(spec.await_);
    json["blockOn"] = json!(spec.block_on.as_str());
    json["onFailure"] = match spec.on_failure {
        OnFailure::RetryThenAbort => json!(["retry", "abort"]),
        other => json!(other.as_str()),
    };
    json
}

fn problem_json(problem: &Problem, workspace: &Path) -> Value {
    let mut json =
        json!({ "path": problem.path.to_string_lossy(), "reason": problem.kind.to_string() });
    if let Some(line) = problem.line {
        json["line"] = json!(line);
    }
    // Another tool's file says where as its hooks do (docs/EVENTS.md §5 rule 10).
    if matches!(problem.kind, ProblemKind::Import { .. }) {
        json["source"] = json!(problem.source(workspace));
    }
    json
}

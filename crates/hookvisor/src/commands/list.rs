//! `list` and `check`: what discovery found, for people and for scripts.

use std::io::{self, Write};

use hookvisor_core::{DEFAULT_RETRIES, Discovery, Hook, HookKind, Problem, discover};
use serde_json::{Value, json};

use crate::commands::Globals;
use crate::error::{CliResult, Exit};

/// `hookvisor list [--json]`.
pub fn run(globals: &Globals, json: bool) -> CliResult {
    let ctx = globals.context()?;
    let discovery = discover(&ctx.hooks_dir());
    let mut out = io::stdout().lock();
    if json {
        writeln!(out, "{}", list_json(&discovery))?;
        return Ok(Exit::Ok);
    }
    if discovery.hooks.is_empty() {
        writeln!(out, "no hooks in {}", ctx.hooks_dir().display())?;
    } else {
        writeln!(
            out,
            "{:<24} {:<10} {:<6} {:<24} NAME",
            "ID", "TYPE", "AS", "PATTERN"
        )?;
        for hook in &discovery.hooks {
            writeln!(
                out,
                "{:<24} {:<10} {:<6} {:<24} {}",
                hook.id,
                hook.kind,
                hook.run_as.as_str(),
                hook.pattern.as_ref().map_or("-", |p| p.as_str()),
                hook.name
            )?;
        }
    }
    write_problems(&mut out, &discovery)?;
    Ok(Exit::Ok)
}

/// `hookvisor check`: one line per problem; exit 1 if there is any.
pub fn check(globals: &Globals) -> CliResult {
    let ctx = globals.context()?;
    let discovery = discover(&ctx.hooks_dir());
    let mut out = io::stdout().lock();
    write_problems(&mut out, &discovery)?;
    Ok(if discovery.problems.is_empty() {
        Exit::Ok
    } else {
        Exit::Failed
    })
}

fn write_problems(out: &mut impl Write, discovery: &Discovery) -> io::Result<()> {
    for problem in &discovery.problems {
        writeln!(out, "{problem}")?;
    }
    for warning in &discovery.warnings {
        writeln!(out, "{}: warning: {}", warning.path.display(), warning.kind)?;
    }
    Ok(())
}

/// The JSON of `list --json` (DESIGN.md), also served by the HTTP API. Paths are shown lossily
/// (U+FFFD for bytes that are not UTF-8): a name that is not UTF-8 is itself a listed problem,
/// and `Path`'s own `Serialize` would fail on it.
pub fn list_json(discovery: &Discovery) -> Value {
    json!({
        "hooks": discovery
            .hooks
            .iter()
            .map(|hook| hook_json(hook, discovery))
            .collect::<Vec<_>>(),
        "problems": discovery.problems.iter().map(problem_json).collect::<Vec<_>>(),
        "warnings": discovery.warnings.iter().map(problem_json).collect::<Vec<_>>(),
    })
}

fn hook_json(hook: &Hook, discovery: &Discovery) -> Value {
    let mut json = json!({
        "id": hook.id,
        "name": hook.name,
        "type": hook.kind.as_str(),
        "path": hook.path.to_string_lossy(),
        "runAs": hook.run_as.as_str(),
        "pattern": hook.pattern.as_ref().map(|p| p.as_str()),
        "notifyLlm": hook.notify_llm,
        "blocking": hook.blocking,
        "timeout": hook.timeout.as_secs(),
        "description": hook.description,
    });
    // Only session hooks are retried, so only they carry the field.
    if hook.kind == HookKind::Session {
        let retries = discovery.retries.get(&hook.id).copied();
        json["retries"] = json!(retries.unwrap_or(DEFAULT_RETRIES));
    }
    json
}

fn problem_json(problem: &Problem) -> Value {
    json!({ "path": problem.path.to_string_lossy(), "reason": problem.kind.to_string() })
}

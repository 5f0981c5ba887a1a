//! `list` and `check`: what discovery found, for people and for scripts.

use std::io::{self, Write};

use hookvisor_core::config::Source;
use hookvisor_core::{Config, discover_workspace};

use crate::cli::Globals;
use crate::error::{CliResult, Exit};
use crate::list::{event_line, list_json, type_of, write_problems, write_sources};

/// `hookvisor list [--json]`.
pub fn run(globals: &Globals, json: bool) -> CliResult {
    let ctx = globals.context()?;
    let discovery = discover_workspace(&ctx);
    let mut out = io::stdout().lock();
    if json {
        writeln!(out, "{}", list_json(&discovery, &ctx.workspace))?;
        return Ok(Exit::Ok);
    }
    if !discovery.config.reads(Source::Discobot) {
        // Said first, whatever follows: a one-line edit that turns the project's checks off.
        writeln!(
            out,
            "the hooks of {} are off: 'sources' in {} leaves out discobot",
            ctx.hooks_dir().display(),
            Config::path(&ctx.workspace).display()
        )?;
    }
    if discovery.hooks.is_empty() {
        writeln!(out, "no hooks in {}", ctx.hooks_dir().display())?;
    } else {
        // Phase 1's width, wider only for an event name that needs it (`stage.complete`).
        let width = (discovery.hooks.iter())
            .map(|h| type_of(h).len())
            .max()
            .unwrap_or(0)
            .max(10);
        writeln!(
            out,
            "{:<24} {:<width$} {:<6} {:<24} NAME",
            "ID", "TYPE", "AS", "PATTERN"
        )?;
        for hook in &discovery.hooks {
            writeln!(
                out,
                "{:<24} {:<width$} {:<6} {:<24} {}",
                hook.id,
                type_of(hook),
                hook.run_as.as_str(),
                hook.pattern.as_ref().map_or("-", |p| p.as_str()),
                hook.name
            )?;
            if hook.spec.declared {
                writeln!(out, "{:<24} {}", "", event_line(hook))?;
            }
        }
    }
    write_problems(&mut out, &discovery)?;
    for (hook, warning) in super::install::unfired_hooks(&ctx.workspace, &discovery) {
        writeln!(out, "{}: warning: {warning}", hook.source())?;
    }
    write_sources(&mut out, &ctx, &discovery)?;
    Ok(Exit::Ok)
}

/// `hookvisor check`: one line per problem; exit 1 if there is any.
pub fn check(globals: &Globals) -> CliResult {
    let ctx = globals.context()?;
    let discovery = discover_workspace(&ctx);
    let mut out = io::stdout().lock();
    write_problems(&mut out, &discovery)?;
    for (hook, warning) in super::install::unfired_hooks(&ctx.workspace, &discovery) {
        writeln!(out, "{}: warning: {warning}", hook.source())?;
    }
    write_sources(&mut out, &ctx, &discovery)?;
    Ok(if discovery.problems.is_empty() {
        Exit::Ok
    } else {
        Exit::Failed
    })
}

//! `pre-commit install|uninstall|run` and `post-commit install|uninstall|run`: the git side
//! lives in hookvisor-core's precommit module; this file resolves the context and words the
//! results.

use std::io::{self, Write};
use std::path::PathBuf;

use hookvisor_core::decision::{Decision, Reply};
use hookvisor_core::precommit::{
    GitHook, GitHookKind, Installed, PreCommitEvent, PreCommitSkip, SKIP_VARIABLE, Uninstalled,
    ensure_git_hooks, run_post_commit, uninstall_git_hook,
};
use hookvisor_core::{Context, Discovery, RunOutcome, run_pre_commit};

use crate::cli::PreCommitCommand;
use crate::commands::Globals;
use crate::error::{CliError, CliResult, Exit};

/// `hookvisor pre-commit ...` and `hookvisor post-commit ...`.
pub fn run(globals: &Globals, kind: GitHookKind, command: &PreCommitCommand) -> CliResult {
    match (command, kind) {
        (PreCommitCommand::Install, _) => install(globals, kind),
        (PreCommitCommand::Uninstall, _) => uninstall(globals, kind),
        (PreCommitCommand::Run, GitHookKind::PreCommit) => run_hooks(globals),
        (PreCommitCommand::Run, GitHookKind::PostCommit) => run_after(globals),
    }
}

/// What `eval`, `session` and `install` call so that adding the first commit hook is enough:
/// installs the git hooks when there are hooks that run in `git commit` (pre-commit or
/// `commit.before`) or after it (`commit.after`). A failure is a warning; the command goes on.
pub fn ensure_installed(ctx: &Context, discovery: &Discovery) {
    if ![GitHookKind::PreCommit, GitHookKind::PostCommit]
        .iter()
        .any(|kind| kind.needed(discovery))
    {
        return;
    }
    // Root never writes a workspace another account can change: `ensure_git_hooks` says so.
    if let Err(e) = ensure_git_hooks(ctx, discovery) {
        eprintln!("hookvisor: warning: cannot install the git commit hooks: {e}");
    }
}

fn install(globals: &Globals, kind: GitHookKind) -> CliResult {
    let ctx = globals.context()?;
    let installed = GitHook::for_context(&ctx)?
        .kind(kind)
        .install(&ctx.workspace)?;
    let path = installed.path().display();
    let name = kind.name();
    match &installed {
        Installed::Created(_) => println!("installed the {name} hook: {path}"),
        Installed::Updated(_) => println!("updated the {name} hook: {path}"),
        Installed::Unchanged(_) => println!("the {name} hook is already installed: {path}"),
        Installed::Chained(_, original) => println!(
            "installed the {name} hook: {path}; the previous hook, kept as {}, runs first",
            original.display()
        ),
    }
    Ok(Exit::Ok)
}

fn uninstall(globals: &Globals, kind: GitHookKind) -> CliResult {
    let ctx = globals.context()?;
    let name = kind.name();
    match uninstall_git_hook(&ctx.workspace, kind)? {
        Uninstalled::Removed(path) => println!("removed the {name} hook: {}", path.display()),
        Uninstalled::Restored(path) => println!(
            "removed the {name} hook and put back the original: {}",
            path.display()
        ),
        Uninstalled::NotOurs(path) => {
            println!("{} is not hookvisor's; left it alone", path.display())
        }
        Uninstalled::NotInstalled(path) => {
            println!("no {name} hook to remove at {}", path.display())
        }
    }
    Ok(Exit::Ok)
}

/// What the post-commit git hook calls: fires `commit.after`. A notice after the commit was
/// made, so it always exits 0; what failed is said on stderr.
fn run_after(globals: &Globals) -> CliResult {
    let fired = globals.commit_context().and_then(|ctx| {
        super::refuse_what_others_can_change(&ctx)?;
        let reply = run_post_commit(&ctx, &PreCommitSkip::from_env())?;
        Ok((ctx, reply))
    });
    match fired {
        Err(e) => eprintln!("hookvisor: warning: commit.after not fired: {}", e.message),
        Ok((ctx, Some(reply))) => {
            for result in reply.results.iter().filter(|r| r["success"] != true) {
                let id = result["hookId"].as_str().unwrap_or("?");
                eprintln!(
                    "hookvisor: warning: commit.after hook \"{id}\" failed; the commit is \
                     made. Its output is in {}",
                    ctx.log_path(id).display()
                );
            }
        }
        Ok((_, None)) => {}
    }
    Ok(Exit::Ok)
}

/// What the git hook calls, in the context of the commit ([`Globals::commit_context`]).
fn run_hooks(globals: &Globals) -> CliResult {
    let ctx = globals.commit_context()?;
    super::refuse_what_others_can_change(&ctx)?;
    // Buffered, and flushed once per event: one write per line, not one per piece of it.
    let mut err = io::BufWriter::new(io::stderr().lock());
    let report = run_pre_commit(&ctx, &PreCommitSkip::from_env(), |event| {
        // A closed stderr must not change whether the commit goes through.
        let _ = report_event(&mut err, &ctx, event).and_then(|()| err.flush());
    })
    .map_err(|e| {
        // The status is the error's own (git failing is not a usage error); the way out is ours.
        let error = CliError::from(e);
        CliError {
            message: format!(
                "{} (to commit anyway, set {SKIP_VARIABLE}=1 or use git commit --no-verify)",
                error.message
            ),
            ..error
        }
    })?;
    match report.exit_code() {
        0 => Ok(Exit::Ok),
        1 => Ok(Exit::Failed),
        // git passes our status on to nobody, but a wrapper may care which hook code it was.
        code => Ok(Exit::Status(code)),
    }
}

fn report_event(err: &mut impl Write, ctx: &Context, event: PreCommitEvent<'_>) -> io::Result<()> {
    match event {
        PreCommitEvent::Problem(problem) => {
            writeln!(err, "hookvisor: warning: {problem} (not run)")
        }
        PreCommitEvent::SkippedAll => {
            writeln!(
                err,
                "hookvisor: {SKIP_VARIABLE}=1: pre-commit hooks skipped"
            )
        }
        PreCommitEvent::Skipped(hook) => writeln!(
            err,
            "hookvisor: skipped \"{}\" ({SKIP_VARIABLE} names {})",
            hook.name, hook.id
        ),
        PreCommitEvent::UnknownSkip(id) => writeln!(
            err,
            "hookvisor: warning: {SKIP_VARIABLE} names '{id}', which is no pre-commit hook; \
             see `hookvisor list` for the ids"
        ),
        PreCommitEvent::Started(..) => Ok(()),
        PreCommitEvent::Finished(hook, files, outcome) if outcome.success() => writeln!(
            err,
            "hookvisor: passed \"{}\" ({}, {:.2}s)",
            hook.name,
            count_files(files),
            outcome.duration.as_secs_f64()
        ),
        PreCommitEvent::Finished(hook, files, outcome) => {
            report_failure(err, ctx, &hook.name, &hook.id, files, outcome)
        }
        PreCommitEvent::Decided(reply) => report_decided(err, ctx, reply),
    }
}

/// The `commit.before` event hooks' verdict: each run passed or failed, and on a block or an
/// abort its reason and the way around it.
fn report_decided(err: &mut impl Write, ctx: &Context, reply: &Reply) -> io::Result<()> {
    for result in &reply.results {
        let id = result["hookId"].as_str().unwrap_or("?");
        if result["success"] == true {
            writeln!(err, "hookvisor: passed \"{id}\" (commit.before)")?;
        }
    }
    if reply.decision == Decision::Allow {
        return Ok(());
    }
    let id = reply.decider().unwrap_or("commit.before");
    // Hook ids are `[a-z0-9_-]` (discovery), so the id needs no sanitizing.
    let verb = match reply.decision {
        Decision::Abort => "aborted",
        _ => "blocked",
    };
    writeln!(
        err,
        "hookvisor: commit.before hook \"{id}\" {verb} the commit:"
    )?;
    if let Some(reason) = &reply.reason {
        // The agent reads this: hook output must not rewrite the lines around it.
        writeln!(
            err,
            "{}",
            hookvisor_core::message::sanitize(reason.trim_end())
        )?;
    }
    writeln!(
        err,
        "hookvisor: commit blocked; full output in {}. Fix it and commit again, or skip it \
         once with {SKIP_VARIABLE}={id} ({SKIP_VARIABLE}=1 skips all)",
        ctx.log_path(id).display()
    )
}

fn report_failure(
    err: &mut impl Write,
    ctx: &Context,
    name: &str,
    id: &str,
    files: &[PathBuf],
    outcome: &RunOutcome,
) -> io::Result<()> {
    let why = if outcome.timed_out {
        "timed out".to_owned()
    } else {
        format!("failed with exit code {}", outcome.exit_code)
    };
    writeln!(
        err,
        "hookvisor: pre-commit hook \"{name}\" {why} ({})",
        count_files(files)
    )?;
    let tail = outcome.tail.trim_end();
    if !tail.is_empty() {
        if outcome.output_bytes > outcome.tail.len() as u64 {
            writeln!(err, "[...]")?;
        }
        writeln!(err, "{tail}")?;
    }
    writeln!(
        err,
        "hookvisor: commit blocked; full output in {}. Fix it and commit again, or skip it \
         once with {SKIP_VARIABLE}={id} ({SKIP_VARIABLE}=1 skips all)",
        ctx.log_path(id).display()
    )
}

fn count_files(files: &[PathBuf]) -> String {
    match files.len() {
        1 => "1 file".to_owned(),
        n => format!("{n} files"),
    }
}

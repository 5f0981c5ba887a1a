//! `import [SOURCE] --print|--write`: other tools' hooks made `.discobot/hooks` files; the
//! rules are `hookvisor_core::import`'s `convert` module's.

use std::env;
use std::io::{self, Write};

use hookvisor_core::discover::global_hooks_dir;
use hookvisor_core::import::{self, ImportError, Plan, Selection, UserDirs};

use crate::cli::ImportArgs;
use crate::commands::Globals;
use crate::error::{CliError, CliResult, Exit};

/// `hookvisor import [SOURCE] --print|--write`.
pub fn run(globals: &Globals, args: &ImportArgs) -> CliResult {
    let workspace = globals.workspace()?;
    let selection = Selection::from_arg(args.source.as_deref(), &env::current_dir()?);
    let user = UserDirs::from_vars(|name| env::var_os(name));
    let global = global_hooks_dir(|name| env::var_os(name));
    let plan = import::plan(&workspace, &user, global.as_deref(), &selection).map_err(refused)?;
    for note in &plan.skipped {
        eprintln!("hookvisor: {note}");
    }
    let mut out = io::stdout().lock();
    if args.print {
        let files = plan.sources.iter().flat_map(|s| &s.files);
        for (i, file) in files.enumerate() {
            let gap = if i > 0 { "\n" } else { "" };
            write!(out, "{gap}==> {} <==\n{}", file.shown, file.content)?;
        }
    } else {
        for done in import::write(&plan).map_err(refused)? {
            for file in &done.files {
                writeln!(out, "wrote {file}")?;
            }
            match done.deleted {
                true => writeln!(out, "deleted {} (nothing else was in it)", done.shown)?,
                false => writeln!(
                    out,
                    "removed {} converted entries from {}",
                    done.files.len(),
                    done.shown
                )?,
            }
        }
    }
    report(&plan)
}

/// The entries left in place and the readers' warnings, on stderr; exit 1 when an entry was
/// left, as `check` exits 1 on a problem.
fn report(plan: &Plan) -> CliResult {
    let mut left = false;
    for source in &plan.sources {
        for note in &source.warnings {
            eprintln!(
                "hookvisor: {}:{}: warning: {}",
                source.shown, note.line, note.message
            );
        }
        for note in &source.left {
            left = true;
            eprintln!(
                "hookvisor: {}:{}: left in place, not converted: {}",
                source.shown, note.line, note.message
            );
        }
    }
    if plan.sources.iter().all(|s| s.files.is_empty()) && !left {
        eprintln!("hookvisor: no hooks of other tools to import");
    }
    Ok(if left { Exit::Failed } else { Exit::Ok })
}

/// An import refused: a file or the command line must change (2), or the system failed (1).
fn refused(err: ImportError) -> CliError {
    match err.is_usage() {
        true => CliError::usage(err),
        false => CliError::failed(err),
    }
}

//! `install git-fsmonitor` and `uninstall git-fsmonitor`: git's `core.fsmonitor` answered by
//! `hookvisor serve` (docs/guide/git.md).
//!
//! Install sets, in the workspace repository's own config (`.git/config`), `core.fsmonitor`
//! to `<this binary> git-fsmonitor` (git runs it through the shell with `2 TOKEN`),
//! `core.fsmonitorHookVersion` to 2 and `core.untrackedCache` to true, and remembers under
//! `hookvisor.fsmonitor.<name>` what each key was before (`unset`, or `was:<value>`), for the
//! keys it changed only. Uninstall puts back those keys that still hold what install set, and
//! touches nothing else. Both can run twice.

use std::io::Write;
use std::path::{Path, PathBuf};

use hookvisor_core::git::Git;

use super::shell_quote;
use crate::commands::Globals;
use crate::error::{CliError, CliResult, Exit};

/// The subcommand `core.fsmonitor` runs.
pub const HOOK_SUBCOMMAND: &str = "git-fsmonitor";

/// Where install remembers what it changed.
const RECORD: &str = "hookvisor.fsmonitor";

/// The keys install sets: git's name, the short name of its record, and the value (the
/// fsmonitor's is the command, computed).
fn settings(command: &str) -> [(&'static str, &'static str, String); 3] {
    [
        ("core.fsmonitor", "fsmonitor", command.to_owned()),
        (
            "core.fsmonitorHookVersion",
            "fsmonitorHookVersion",
            "2".to_owned(),
        ),
        ("core.untrackedCache", "untrackedCache", "true".to_owned()),
    ]
}

/// Whether `value` is a `core.fsmonitor` install set (whatever path the binary had then).
fn is_our_hook(value: &str) -> bool {
    value.contains("hookvisor") && value.ends_with(&format!(" {HOOK_SUBCOMMAND}"))
}

/// The repository's own value of `key`, if it has one.
fn get(git: &Git, dir: &Path, key: &str) -> Option<String> {
    let out = git.output(dir, &["config", "--local", "--get", key]).ok()?;
    Some(
        String::from_utf8_lossy(&out)
            .trim_end_matches('\n')
            .to_owned(),
    )
}

fn set(git: &Git, dir: &Path, key: &str, value: &str) -> Result<(), CliError> {
    git.output(dir, &["config", "--local", key, value])
        .map(drop)
        .map_err(CliError::failed)
}

fn unset(git: &Git, dir: &Path, key: &str) -> Result<(), CliError> {
    git.output(dir, &["config", "--local", "--unset-all", key])
        .map(drop)
        .map_err(CliError::failed)
}

/// The workspace, which must be the root of its git work tree: git's fsmonitor paths are
/// relative to that root, and the server watches the workspace.
fn work_tree(globals: &Globals, git: &Git) -> Result<PathBuf, CliError> {
    let workspace = globals.workspace()?;
    let out = git
        .output(&workspace, &["rev-parse", "--show-toplevel"])
        .map_err(CliError::usage)?;
    let top = PathBuf::from(String::from_utf8_lossy(&out).trim_end());
    let top = top.canonicalize().unwrap_or(top);
    if top != workspace {
        return Err(CliError::usage(format!(
            "{} is not the root of its git work tree ({}); run `hookvisor --workspace {} \
             install git-fsmonitor` from the root",
            workspace.display(),
            top.display(),
            top.display()
        )));
    }
    Ok(workspace)
}

/// `hookvisor install git-fsmonitor`.
pub fn install(globals: &Globals) -> CliResult {
    let git = Git::default();
    let dir = work_tree(globals, &git)?;
    let exe = std::env::current_exe()
        .map_err(|e| CliError::usage(format!("cannot tell where this hookvisor binary is: {e}")))?;
    let command = format!("{} {HOOK_SUBCOMMAND}", shell_quote(&exe.to_string_lossy()));
    let mut out = std::io::stdout().lock();
    for (key, name, value) in settings(&command) {
        let current = get(&git, &dir, key);
        if current.as_deref() == Some(value.as_str()) {
            writeln!(out, "{key} is already {value}")?;
            continue;
        }
        let record = format!("{RECORD}.{name}");
        // A re-install (a moved binary) keeps what the first install found.
        if get(&git, &dir, &record).is_none() {
            let was = current
                .as_deref()
                .map_or("unset".to_owned(), |v| format!("was:{v}"));
            set(&git, &dir, &record, &was)?;
        }
        set(&git, &dir, key, &value)?;
        writeln!(out, "set {key} = {value}")?;
    }
    writeln!(
        out,
        "git asks the `hookvisor serve` of $HOOKVISOR_URL what changed; without one it checks \
         every file"
    )?;
    Ok(Exit::Ok)
}

/// `hookvisor uninstall git-fsmonitor`.
pub fn uninstall(globals: &Globals) -> CliResult {
    let git = Git::default();
    let dir = work_tree(globals, &git)?;
    let mut out = std::io::stdout().lock();
    let mut restored = 0;
    for (key, name, value) in settings("") {
        let record = format!("{RECORD}.{name}");
        let Some(was) = get(&git, &dir, &record) else {
            continue;
        };
        let current = get(&git, &dir, key);
        let ours = match current.as_deref() {
            Some(v) if key == "core.fsmonitor" => is_our_hook(v),
            Some(v) => v == value,
            None => false,
        };
        if ours {
            match was.strip_prefix("was:") {
                Some(previous) => set(&git, &dir, key, previous)?,
                None => unset(&git, &dir, key)?,
            }
            writeln!(out, "restored {key}")?;
            restored += 1;
        } else {
            writeln!(out, "{key} was changed since install; left as it is")?;
        }
        unset(&git, &dir, &record)?;
    }
    // Empty now; absent when nothing was installed.
    let _ = git.output(&dir, &["config", "--local", "--remove-section", RECORD]);
    if restored == 0 {
        writeln!(out, "nothing of install git-fsmonitor to remove")?;
    }
    Ok(Exit::Ok)
}

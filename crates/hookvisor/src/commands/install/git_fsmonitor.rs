//! `install git-fsmonitor` and `uninstall git-fsmonitor`: git's `core.fsmonitor` answered by
//! `hookvisor serve` (docs/guide/git.md).
//!
//! Install sets, in the workspace repository's own config (`.git/config`; with `--user-level`
//! the user's, `~/.gitconfig`, as a container's setup does), `core.fsmonitor` to `<this binary>
//! git-fsmonitor` (git runs it through the shell with `2 TOKEN`), `core.fsmonitorHookVersion` to
//! 2 and `core.untrackedCache` to true, and remembers under `hookvisor.fsmonitor.<name>` what
//! each key was before (`unset`, or `was:<value>`), for the keys it changed only. Uninstall
//! puts back those keys that still hold what install set, and touches nothing else. Both can
//! run twice.

use std::io::Write;
use std::path::PathBuf;

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

/// One config file (the repository's or the user's), and git to read and write it.
struct Config {
    git: Git,
    dir: PathBuf,
    /// `--local` or `--global`.
    scope: &'static str,
}

impl Config {
    /// The workspace's repository config, or with `user_level` the user's.
    fn new(globals: &Globals, user_level: bool) -> Result<Config, CliError> {
        let git = Git::default();
        if user_level {
            return Ok(Config {
                git,
                dir: std::env::current_dir()?,
                scope: "--global",
            });
        }
        let dir = work_tree(globals, &git)?;
        Ok(Config {
            git,
            dir,
            scope: "--local",
        })
    }

    /// The value of `key` in this file, if it has one.
    fn get(&self, key: &str) -> Option<String> {
        let out = self
            .git
            .output(&self.dir, &["config", self.scope, "--get", key])
            .ok()?;
        Some(
            String::from_utf8_lossy(&out)
                .trim_end_matches('\n')
                .to_owned(),
        )
    }

    fn run(&self, args: &[&str]) -> Result<(), CliError> {
        let mut all = vec!["config", self.scope];
        all.extend_from_slice(args);
        self.git
            .output(&self.dir, &all)
            .map(drop)
            .map_err(CliError::failed)
    }
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

/// `hookvisor install git-fsmonitor [--user-level]`.
pub fn install(globals: &Globals, user_level: bool) -> CliResult {
    let config = Config::new(globals, user_level)?;
    let exe = std::env::current_exe()
        .map_err(|e| CliError::usage(format!("cannot tell where this hookvisor binary is: {e}")))?;
    let command = format!("{} {HOOK_SUBCOMMAND}", shell_quote(&exe.to_string_lossy()));
    let mut out = std::io::stdout().lock();
    for (key, name, value) in settings(&command) {
        let current = config.get(key);
        if current.as_deref() == Some(value.as_str()) {
            writeln!(out, "{key} is already {value}")?;
            continue;
        }
        let record = format!("{RECORD}.{name}");
        // A re-install (a moved binary) keeps what the first install found.
        if config.get(&record).is_none() {
            let was = current
                .as_deref()
                .map_or("unset".to_owned(), |v| format!("was:{v}"));
            config.run(&[&record, &was])?;
        }
        config.run(&[key, &value])?;
        writeln!(out, "set {key} = {value}")?;
    }
    writeln!(
        out,
        "git asks the `hookvisor serve` of $HOOKVISOR_URL what changed; without one it checks \
         every file"
    )?;
    Ok(Exit::Ok)
}

/// `hookvisor uninstall git-fsmonitor [--user-level]`.
pub fn uninstall(globals: &Globals, user_level: bool) -> CliResult {
    let config = Config::new(globals, user_level)?;
    let mut out = std::io::stdout().lock();
    let mut restored = 0;
    for (key, name, value) in settings("") {
        let record = format!("{RECORD}.{name}");
        let Some(was) = config.get(&record) else {
            continue;
        };
        let ours = match config.get(key).as_deref() {
            Some(v) if key == "core.fsmonitor" => is_our_hook(v),
            Some(v) => v == value,
            None => false,
        };
        if ours {
            match was.strip_prefix("was:") {
                Some(previous) => config.run(&[key, previous])?,
                None => config.run(&["--unset-all", key])?,
            }
            writeln!(out, "restored {key}")?;
            restored += 1;
        } else {
            writeln!(out, "{key} was changed since install; left as it is")?;
        }
        config.run(&["--unset-all", &record])?;
    }
    // Empty now; absent when nothing was installed.
    let _ = config.run(&["--remove-section", RECORD]);
    if restored == 0 {
        writeln!(out, "nothing of install git-fsmonitor to remove")?;
    }
    Ok(Exit::Ok)
}

//! `install` and `uninstall`: put `hookvisor adapter AGENT` into an agent's settings for every
//! event the adapter answers (docs/EVENTS.md §5 rule 17) and every raw event of the agent a hook of
//! the workspace binds (`event: claude.PreCompact` → `PreCompact`), or take it out, leaving
//! every other setting and hook as it was. In a workspace, `install` also puts the generated
//! git hooks in place when its hooks need them (`commit.before`, `commit.after`).
//!
//! The file, the events, the adapter and the timeout unit are the agent's row of the agent
//! table ([`hookvisor_core::agents`]), which the adapter reads too. The turn-end events get a
//! [`TIMEOUT_SECS`] timeout, the session end (handed on at once) a [`PROMPT_TIMEOUT_SECS`]
//! one, the others [`EVENT_TIMEOUT_SECS`].
//!
//! An entry is ours when its command is exactly the shape `install` writes
//! (`settings::is_ours`): one program whose file name is `hookvisor`, then `adapter AGENT` or
//! the old turn-end alias (`claude-stop`, which a re-install so upgrades), then only the
//! options `install` repeats; a user's wrapper (`audit.sh && hookvisor adapter claude`) is
//! theirs and left alone. Installing replaces ours in
//! place (or appends one group), so running it twice changes nothing. The file is written atomically, through a symlink to its target. A file that is not
//! JSON is moved to `<file>.bak-<time>` first, never overwritten. Run as root, it refuses a
//! settings file another account can change (a user's home): root never follows the links
//! there; the user installs there as itself.
//!
//! This file is the command: what each agent gets and what is printed. Reading the settings file
//! and editing its hooks entries is `settings`; Codex's hook trust is `codex_trust`.

use std::env;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use hookvisor_core::agents::{Agent, Route, Spec};
use hookvisor_core::event::Event as CoreEvent;
use hookvisor_core::{Discovery, Hook};
use serde_json::{Map, Value};

mod codex_trust;
pub mod git_fsmonitor;
mod settings;

use self::settings::{
    Loaded, SettingsError, add_entry, back_up, is_ours, load, load_bounded, remove_entries,
    resolve_symlink, write_atomic,
};
use crate::cli::{InstallArgs, InstallTarget};
use crate::commands::Globals;
use crate::error::{CliError, CliResult, Exit};

/// The turn-end hook's timeout: long enough for several file hooks at their 900 s default,
/// explicit so an agent's shorter default never kills an evaluation half-way.
pub const TIMEOUT_SECS: u64 = 1800;

/// The session end's timeout: the adapter hands the event on and returns at once.
pub const PROMPT_TIMEOUT_SECS: u64 = 60;

/// The other events' timeout: room for several command hooks at their 60 s default.
pub const EVENT_TIMEOUT_SECS: u64 = 600;

/// The timeout `install` writes for `route`'s entry, in seconds, for every agent: the adapter
/// ends a callback wait before it (`adapter::events`).
pub fn route_timeout_secs(route: Route) -> u64 {
    match route {
        Route::TurnEnd => TIMEOUT_SECS,
        Route::SessionEnd => PROMPT_TIMEOUT_SECS,
        _ => EVENT_TIMEOUT_SECS,
    }
}

/// Where and how one agent is configured: its row of the agent table, and its settings file.
#[derive(Debug, Clone)]
struct Target {
    /// The agent.
    agent: Agent,
    /// The agent's row of the table.
    spec: &'static Spec,
    /// The settings file.
    path: PathBuf,
    /// The agent's own events that hooks bind raw and no route names, sorted.
    raw: Vec<String>,
}

impl Target {
    fn new(agent: Agent, user_level: bool, workspace: &Path) -> Result<Target, CliError> {
        let spec = agent.spec();
        let path = spec
            .settings_path(user_level, workspace, |name| env::var_os(name))
            .ok_or_else(|| CliError::usage("HOME is not set; set it to use --user-level"))?;
        Ok(Target {
            agent,
            spec,
            path,
            raw: Vec::new(),
        })
    }

    /// Also binds the agent's raw events that hooks of `discovery` name (`claude.PreCompact`).
    fn with_raw_events(mut self, discovery: &Discovery) -> Target {
        for hook in discovery.event_hooks() {
            if let CoreEvent::Raw { agent, name } = &hook.spec.event
                && *agent == self.agent
                && self.spec.route(name).is_none()
                && !self.raw.contains(name)
            {
                self.raw.push(name.clone());
            }
        }
        self.raw.sort();
        self
    }

    /// Every event name our entries go under: the routes', then the raw ones.
    fn event_names(&self) -> impl Iterator<Item = &str> {
        self.spec
            .routes
            .iter()
            .map(|(name, _)| *name)
            .chain(self.raw.iter().map(String::as_str))
    }

    /// The adapter's subcommand words: `adapter claude`.
    fn subcommand(&self) -> String {
        format!("adapter {}", self.spec.word)
    }

    /// What marks an entry as ours: today's adapter, or the old turn-end alias (which a
    /// re-install upgrades in place).
    fn ours(&self) -> [String; 2] {
        [self.subcommand(), self.spec.command.to_owned()]
    }

    /// The timeout of `route`'s entry, in the agent's unit.
    fn timeout(&self, route: Route) -> u64 {
        self.spec.timeout_unit.of_secs(route_timeout_secs(route))
    }

    /// Our entry for `route` (`None`: a raw event, fired as it is), running `command`.
    fn entry(&self, command: &str, route: Option<Route>) -> Value {
        let description = match route {
            Some(Route::TurnEnd) => {
                "hookvisor: run the workspace's file hooks; re-prompt on a failure"
            }
            Some(Route::TurnStart) => {
                "hookvisor: fire turn.start and hand the model hookvisor's context"
            }
            _ => "hookvisor: fire this event's hookvisor hooks",
        };
        let timeout = route.map_or(
            self.spec.timeout_unit.of_secs(EVENT_TIMEOUT_SECS),
            |route| self.timeout(route),
        );
        self.entry_with(command, timeout, description)
    }

    /// A hook entry, its keys in the order the agents' documents use.
    fn entry_with(&self, command: &str, timeout: u64, description: &str) -> Value {
        let mut entry = Map::new();
        if self.spec.named_hooks {
            entry.insert("name".into(), Value::from("hookvisor"));
        }
        entry.insert("type".into(), Value::from("command"));
        entry.insert("command".into(), Value::from(command));
        entry.insert("timeout".into(), Value::from(timeout));
        if self.spec.named_hooks {
            entry.insert("description".into(), Value::from(description));
        }
        Value::Object(entry)
    }

    /// Puts our entries, running `command`, under each event the adapter answers (rule 17:
    /// all of them, bound today or not) and each raw event hooks bind. Returns whether
    /// anything changed, or the key with a wrong shape.
    fn add_entries(
        &self,
        settings: &mut Value,
        command: &str,
    ) -> Result<bool, (String, &'static str)> {
        let ours = self.ours();
        let ours: Vec<&str> = ours.iter().map(String::as_str).collect();
        let mut changed = false;
        for name in self.event_names() {
            let entry = self.entry(command, self.spec.route(name));
            changed |= add_entry(settings, name, &ours, &entry)?;
        }
        Ok(changed)
    }
}

/// `hookvisor install AGENT`: adds (or refreshes) our entry; prints what it did.
pub fn install(globals: &Globals, args: &InstallArgs) -> CliResult {
    let agent = match args.agent {
        InstallTarget::Agent(agent) => agent,
        InstallTarget::GitFsmonitor => {
            refuse_agent_options(args)?;
            return git_fsmonitor::install(globals, args.user_level);
        }
    };
    let workspace = workspace(globals, args)?;
    let mut target = Target::new(agent, args.user_level, &workspace)?;
    // The hooks of the workspace `install` runs in (at user level, where it is run, if that
    // is one): their raw events are bound, and in a workspace their git hooks installed.
    if let Ok(ctx) = globals.context() {
        let discovery = hookvisor_core::discover_workspace(&ctx);
        target = target.with_raw_events(&discovery);
        if !args.user_level {
            crate::commands::precommit::ensure_installed(&ctx, &discovery);
        }
    }
    let command = adapter_command(globals, args, &workspace, &target.subcommand())?;
    let path = settings_path(&target.path, args.user_level, &workspace)?;
    let mut settings = match load(&path)? {
        Loaded::Missing => Value::Object(Map::new()),
        Loaded::Json(value) => value,
        Loaded::Lossy { value, why } => {
            let backup = back_up(&path)?;
            eprintln!(
                "hookvisor: {}: {why}; the original is kept at {}",
                path.display(),
                backup.display()
            );
            value
        }
        Loaded::Corrupt { why } => {
            let backup = back_up(&path)?;
            eprintln!(
                "hookvisor: {}: not valid JSON ({why}); kept it as {} and started a new file",
                path.display(),
                backup.display()
            );
            Value::Object(Map::new())
        }
    };
    let shape_error = |(key, want)| SettingsError::Shape {
        path: path.clone(),
        key,
        want,
    };
    let changed = target
        .add_entries(&mut settings, &command)
        .map_err(shape_error)?;
    let mut out = io::stdout().lock();
    if changed {
        write_atomic(&path, &settings)?;
        writeln!(
            out,
            "installed `{command}` in {} for {} (timeout {} for {})",
            path.display(),
            target.event_names().collect::<Vec<_>>().join(", "),
            target
                .spec
                .timeout_unit
                .show(target.timeout(Route::TurnEnd)),
            target.spec.stop_events().collect::<Vec<_>>().join(", "),
        )?;
    } else {
        writeln!(
            out,
            "`{command}` is already installed in {}",
            path.display()
        )?;
    }
    if target.spec.needs_trust {
        let cwd = if args.user_level {
            path.parent().unwrap_or(Path::new("/")).to_owned()
        } else {
            workspace.clone()
        };
        report_codex_trust(
            &mut out,
            target.spec,
            &cwd,
            &path,
            &command,
            args.user_level,
        )?;
    }
    Ok(Exit::Ok)
}

/// Trusts our Codex hooks through Codex's app server when it can, and otherwise prints the
/// exact steps: Codex skips an untrusted hook without a word.
fn report_codex_trust(
    out: &mut impl Write,
    codex: &Spec,
    cwd: &Path,
    settings: &Path,
    command: &str,
    user_level: bool,
) -> io::Result<()> {
    let outcome = codex_trust::trust(cwd, settings, command);
    match &outcome {
        codex_trust::Outcome::Trusted { keys, config } => {
            writeln!(
                out,
                "Codex now trusts these hooks ({}, recorded in {config}). Their hash covers the \
                 command: install again whenever hookvisor moves.",
                keys.join(", ")
            )?;
            return Ok(());
        }
        codex_trust::Outcome::AlreadyTrusted => {
            writeln!(out, "Codex already trusts these hooks.")?;
            return Ok(());
        }
        codex_trust::Outcome::NotListed => {}
        codex_trust::Outcome::NoCodex => {}
        codex_trust::Outcome::Failed(why) => {
            writeln!(out, "hookvisor could not record Codex's trust: {why}")?;
        }
    }
    let codex_home = codex
        .user_dir(|name| env::var_os(name))
        .unwrap_or_else(|| Path::new("~").join(codex.settings.dir));
    writeln!(
        out,
        "Codex runs these hooks only once it trusts them, and skips them silently until then:"
    )?;
    let mut step = 1;
    if !user_level {
        writeln!(
            out,
            "  {step}. Trust the project: add to {}\n       [projects.{}]\n       \
             trust_level = \"trusted\"\n     (or accept Codex's trust prompt when you start \
             `codex` in it).",
            codex_home.join("config.toml").display(),
            serde_json::to_string(&cwd.to_string_lossy()).expect("a string serialises"),
        )?;
        step += 1;
    }
    writeln!(
        out,
        "  {step}. Trust the hooks: run `codex`, type /hooks and trust the hookvisor entries; \
         or, with `codex` on PATH, run `hookvisor install codex` again{}, which records the \
         trust through `codex app-server`.",
        if user_level { " --user-level" } else { "" }
    )?;
    if matches!(outcome, codex_trust::Outcome::NoCodex) {
        writeln!(out, "     (`codex` is not on PATH.)")?;
    }
    Ok(())
}

/// `hookvisor uninstall AGENT`: removes our entries only; prints how many.
pub fn uninstall(globals: &Globals, args: &InstallArgs) -> CliResult {
    let agent = match args.agent {
        InstallTarget::Agent(agent) => agent,
        InstallTarget::GitFsmonitor => {
            refuse_agent_options(args)?;
            return git_fsmonitor::uninstall(globals, args.user_level);
        }
    };
    let workspace = workspace(globals, args)?;
    let target = Target::new(agent, args.user_level, &workspace)?;
    let path = settings_path(&target.path, args.user_level, &workspace)?;
    let mut out = io::stdout().lock();
    let mut settings = match load(&path)? {
        Loaded::Missing => {
            writeln!(out, "{} does not exist; nothing to remove", path.display())?;
            return Ok(Exit::Ok);
        }
        Loaded::Json(value) => value,
        Loaded::Lossy { why, .. } | Loaded::Corrupt { why } => {
            return Err(SettingsError::Unreadable { path, why }.into());
        }
    };
    let ours = target.ours();
    let ours: Vec<&str> = ours.iter().map(String::as_str).collect();
    let removed = remove_entries(&mut settings, &ours);
    if removed == 0 {
        writeln!(
            out,
            "no hookvisor {} hook in {}; nothing to remove",
            target.subcommand(),
            path.display()
        )?;
        return Ok(Exit::Ok);
    }
    write_atomic(&path, &settings)?;
    writeln!(
        out,
        "removed {removed} hookvisor {} hook{} from {}",
        target.subcommand(),
        if removed == 1 { "" } else { "s" },
        path.display()
    )?;
    Ok(Exit::Ok)
}

/// Canonical events only an agent's adapter fires: `loop`, `eval`, `session` and git fire the
/// others.
const AGENT_ONLY: [CoreEvent; 7] = [
    CoreEvent::ToolBefore,
    CoreEvent::ToolAfter,
    CoreEvent::ToolFailed,
    CoreEvent::FileEdited,
    CoreEvent::TaskStart,
    CoreEvent::TaskComplete,
    CoreEvent::TeamIdle,
];

/// The events whose settings hold our entry for `agent`, in the workspace's settings file or
/// the user's; `None` when neither has one (the agent is not installed).
fn bound_events(agent: Agent, workspace: &Path) -> Option<Vec<String>> {
    let target = Target::new(agent, false, workspace).ok()?;
    let ours = target.ours();
    let ours: Vec<&str> = ours.iter().map(String::as_str).collect();
    let user = agent
        .spec()
        .settings_path(true, workspace, |name| env::var_os(name));
    let mut bound: Option<Vec<String>> = None;
    for path in [Some(target.path.clone()), user].into_iter().flatten() {
        // The workspace's file is the agent's to write: read it bounded, never blocking.
        let Ok(Loaded::Json(settings)) = load_bounded(&path) else {
            continue;
        };
        let Some(hooks) = settings.get("hooks").and_then(Value::as_object) else {
            continue;
        };
        for (event, groups) in hooks {
            let entries = groups.as_array().into_iter().flatten();
            let mut entries = entries.flat_map(|g| g["hooks"].as_array().into_iter().flatten());
            if entries.any(|entry| is_ours(entry, &ours)) {
                bound.get_or_insert_with(Vec::new).push(event.clone());
            }
        }
    }
    bound
}

/// `check`'s warnings about hooks no installed agent can fire, each `(hook, what and the fix)`:
/// an agent's raw event when that agent is not installed or the event not bound (installed
/// before the hook was added), and, once some agent is installed, an event only agents fire
/// that no installed agent's row maps.
pub fn unfired_hooks<'a>(workspace: &Path, discovery: &'a Discovery) -> Vec<(&'a Hook, String)> {
    let installed: Vec<(Agent, Vec<String>)> = Agent::ALL
        .into_iter()
        .filter_map(|agent| Some((agent, bound_events(agent, workspace)?)))
        .collect();
    let mut warnings = Vec::new();
    for hook in discovery.event_hooks() {
        let event = &hook.spec.event;
        if let CoreEvent::Raw { agent, name } = event {
            let word = agent.as_str();
            let agent_name = agent.spec().name;
            match installed.iter().find(|(a, _)| a == agent) {
                None => warnings.push((
                    hook,
                    format!(
                        "{event} is {agent_name}'s, which is not installed here, so it never \
                         fires; run `hookvisor install {word}`"
                    ),
                )),
                Some((_, bound)) if !bound.contains(name) => warnings.push((
                    hook,
                    format!(
                        "{agent_name}'s settings do not bind {name}, so {event} never fires; \
                         run `hookvisor install {word}` again"
                    ),
                )),
                Some(_) => {}
            }
            continue;
        }
        if installed.is_empty() || !AGENT_ONLY.contains(event) {
            continue;
        }
        let fired = installed.iter().any(|(agent, _)| {
            agent
                .spec()
                .routes
                .iter()
                .any(|(_, route)| route.fires().contains(event))
        });
        if !fired {
            let names: Vec<&str> = installed.iter().map(|(a, _)| a.spec().name).collect();
            let can: Vec<&str> = Agent::ALL
                .iter()
                .filter(|a| {
                    a.spec()
                        .routes
                        .iter()
                        .any(|(_, r)| r.fires().contains(event))
                })
                .map(|a| a.as_str())
                .collect();
            warnings.push((
                hook,
                format!(
                    "no installed agent ({}) fires {event}, so this hook never runs; install one \
                     that does (`hookvisor install {}`) or bind another event",
                    names.join(", "),
                    can.join("|")
                ),
            ));
        }
    }
    warnings
}

/// The file to rewrite for `path`: a link is followed, since dotfile managers link the
/// user's settings; but a workspace's settings file, or its directory (`.claude`), that leads
/// out of the workspace is refused. The agent can write the workspace, and such a link would
/// make the user's `install` overwrite a file of the agent's choosing (`~/.bashrc`).
///
/// Root refuses, before it reads or follows anything, a settings file that another account
/// could change (the file, a link on the way, or a directory above it, as
/// `user_fs::writable_by_others` judges): a user's `~/.claude/settings.json` linked to
/// `/etc/shadow` would have been rewritten. The owner installs there, as itself.
fn settings_path(path: &Path, user_level: bool, workspace: &Path) -> Result<PathBuf, CliError> {
    match hookvisor_core::user_fs::writable_by_others(path) {
        Ok(None) => {}
        Ok(Some((open, owner))) => {
            let who = hookvisor_core::user_fs::writer_name(owner);
            return Err(CliError::usage(format!(
                "refusing to write {} as root: {} can be changed by {who}, and root would \
                 follow its links; run this command as that user (e.g. `runuser -u USER -- \
                 hookvisor install ...`)",
                path.display(),
                open.display()
            )));
        }
        Err(err) => {
            return Err(CliError::failed(format!(
                "cannot check who can change {}: {err}",
                path.display()
            )));
        }
    }
    let resolved = resolve_symlink(path);
    if user_level {
        return Ok(resolved);
    }
    let root = fs::canonicalize(workspace).unwrap_or_else(|_| workspace.to_owned());
    // What does not exist yet cannot lead anywhere: `install` creates it inside.
    let dir = path.parent().and_then(|dir| fs::canonicalize(dir).ok());
    let file = fs::canonicalize(&resolved).ok();
    let outside = |p: &Path| !p.starts_with(&root);
    if dir.as_deref().is_some_and(outside) || file.as_deref().is_some_and(outside) {
        return Err(CliError::usage(format!(
            "{}: a symbolic link leads out of the workspace ({}); remove the link or edit the \
             file it points to by hand",
            path.display(),
            file.or(dir).unwrap_or_default().display()
        )));
    }
    Ok(resolved)
}

/// `git-fsmonitor` is git's config: the adapter's --fail-closed does not apply.
fn refuse_agent_options(args: &InstallArgs) -> Result<(), CliError> {
    if args.fail_closed {
        return Err(CliError::usage(
            "git-fsmonitor sets git's config, not an adapter: drop --fail-closed",
        ));
    }
    Ok(())
}

/// The workspace whose settings change ([`Globals::workspace`]); none at the user level.
fn workspace(globals: &Globals, args: &InstallArgs) -> Result<PathBuf, CliError> {
    if args.user_level {
        return Ok(PathBuf::new());
    }
    globals.workspace()
}

/// The command the agent runs: this binary's absolute path, shell-quoted, the subcommand, the
/// workspace, and the options given to `install` that the adapter must repeat. The workspace
/// (`workspace`, canonical; at user level only a `--workspace` given) comes first in the
/// adapter's search (`Globals::agent_context`): the agent's `cwd`, which the model moves at
/// will, then never picks another.
fn adapter_command(
    globals: &Globals,
    args: &InstallArgs,
    workspace: &Path,
    subcommand: &str,
) -> Result<String, CliError> {
    let exe = env::current_exe()
        .map_err(|e| CliError::usage(format!("cannot tell where this hookvisor binary is: {e}")))?;
    let mut words = vec![shell_quote(&exe.to_string_lossy()), subcommand.to_owned()];
    if args.fail_closed {
        words.push("--fail-closed".into());
    }
    let pinned = if args.user_level {
        globals
            .args
            .workspace
            .as_ref()
            .map(|dir| std::path::absolute(dir).unwrap_or_else(|_| dir.clone()))
    } else {
        Some(workspace.to_owned())
    };
    if let Some(dir) = pinned {
        words.push("--workspace".into());
        words.push(shell_quote(&dir.to_string_lossy()));
    }
    if let Some(dir) = &globals.args.state_dir {
        let dir = std::path::absolute(dir).unwrap_or_else(|_| dir.clone());
        words.push("--state-dir".into());
        words.push(shell_quote(&dir.to_string_lossy()));
    }
    if let Some(session) = &globals.args.session {
        words.push("--session".into());
        words.push(shell_quote(session));
    }
    Ok(words.join(" "))
}

/// Quotes for a POSIX shell: as is when only safe characters, else in single quotes.
fn shell_quote(word: &str) -> String {
    let safe = |c: char| c.is_ascii_alphanumeric() || "/._-+:,=@%".contains(c);
    if !word.is_empty() && word.chars().all(safe) {
        word.to_owned()
    } else {
        format!("'{}'", word.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The regression the agent table exists for: `install` registered Codex for fewer events
    /// than its adapter answered. For every agent, each event `install` writes is one the
    /// adapter answers, and each event the adapter answers is written, once, as ours.
    #[test]
    fn installs_exactly_the_events_the_adapter_answers() {
        let mut names: Vec<&str> = ["Notification", "PreCompact", "BeforeModel"].into();
        for agent in Agent::ALL {
            names.extend(agent.spec().routes.iter().map(|(name, _)| *name));
        }
        for agent in Agent::ALL {
            let target = Target::new(agent, false, Path::new("/w")).unwrap();
            let command = format!("/usr/bin/hookvisor {}", target.subcommand());
            let mut settings = Value::Object(Map::new());
            assert!(target.add_entries(&mut settings, &command).unwrap());
            let written = settings["hooks"].as_object().unwrap().clone();
            for name in &names {
                let entries: Vec<&Value> = written
                    .get(*name)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .flat_map(|group| group["hooks"].as_array().unwrap())
                    .collect();
                match target.spec.route(name) {
                    None => assert!(entries.is_empty(), "{agent:?} installs {name}"),
                    Some(route) => {
                        assert_eq!(entries.len(), 1, "{agent:?} does not install {name}");
                        assert!(is_ours(entries[0], &[&target.subcommand()]));
                        assert_eq!(entries[0]["timeout"], target.timeout(route), "{name}");
                    }
                }
            }
        }
    }

    #[test]
    fn quotes_for_the_shell() {
        let cases: &[(&str, &str)] = &[
            ("/usr/local/bin/hookvisor", "/usr/local/bin/hookvisor"),
            ("/opt/my tools/hookvisor", "'/opt/my tools/hookvisor'"),
            ("/it's/hookvisor", r"'/it'\''s/hookvisor'"),
            ("$HOME/x", "'$HOME/x'"),
            ("", "''"),
        ];
        for (word, want) in cases {
            assert_eq!(shell_quote(word), *want, "{word}");
        }
    }
}

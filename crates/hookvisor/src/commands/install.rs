//! `install` and `uninstall`: put hookvisor's turn-end adapter into an agent's settings, or take
//! it out, leaving every other setting and hook as it was.
//!
//! The file, the events, the adapter and the timeout unit are the agent's row of the agent
//! table ([`crate::agents`]), which the adapter reads too. The turn-end events get a
//! [`TIMEOUT_SECS`] timeout, the prompt event (which only records the user's prompt for the
//! loop guard) a [`PROMPT_TIMEOUT_SECS`] one.
//!
//! An entry is ours when its command mentions `hookvisor` and the adapter's subcommand;
//! installing replaces ours in place (or appends one group), so running it twice changes
//! nothing. The file is written atomically, through a symlink to its target. A file that is not
//! JSON is moved to `<file>.bak-<time>` first, never overwritten.

use std::env;
use std::fmt;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde::ser::{Serialize, SerializeMap, Serializer};

mod codex_trust;

use crate::agents::{Agent, Event, Spec};
use crate::cli::InstallArgs;
use crate::commands::Globals;
use crate::error::{CliError, CliResult, Exit};

/// The turn-end hook's timeout: long enough for several file hooks at their 900 s default,
/// explicit so an agent's shorter default never kills an evaluation half-way.
pub const TIMEOUT_SECS: u64 = 1800;

/// The prompt event's timeout: it only records the prompt in the state dir.
pub const PROMPT_TIMEOUT_SECS: u64 = 60;

/// Where and how one agent is configured: its row of the agent table, and its settings file.
#[derive(Debug, Clone)]
struct Target {
    /// The agent's row of the table.
    spec: &'static Spec,
    /// The settings file.
    path: PathBuf,
}

impl Target {
    fn new(agent: Agent, user_level: bool, workspace: &Path) -> Result<Target, CliError> {
        let spec = agent.spec();
        let path = spec
            .settings_path(user_level, workspace, |name| env::var_os(name))
            .ok_or_else(|| CliError::usage("HOME is not set; set it to use --user-level"))?;
        Ok(Target { spec, path })
    }

    /// The timeout of `event`'s entry, in the agent's unit.
    fn timeout(&self, event: Event) -> u64 {
        self.spec.timeout_unit.of_secs(match event {
            Event::TurnEnd => TIMEOUT_SECS,
            Event::Prompt => PROMPT_TIMEOUT_SECS,
        })
    }

    /// Our entry for `event`, running `command`.
    fn entry(&self, command: &str, event: Event) -> Json {
        let description = match event {
            Event::TurnEnd => "hookvisor: run the workspace's file hooks; re-prompt on a failure",
            Event::Prompt => {
                "hookvisor: note a user's prompt, so re-prompts are counted per user turn"
            }
        };
        self.entry_with(command, self.timeout(event), description)
    }

    /// A hook entry, its keys in the order the agents' documents use.
    fn entry_with(&self, command: &str, timeout: u64, description: &str) -> Json {
        let mut entry = Object::default();
        if self.spec.named_hooks {
            entry.insert("name", Json::from("hookvisor"));
        }
        entry.insert("type", Json::from("command"));
        entry.insert("command", Json::from(command));
        entry.insert("timeout", Json::Number(timeout.into()));
        if self.spec.named_hooks {
            entry.insert("description", Json::from(description));
        }
        Json::Object(entry)
    }

    /// The timeout of `event`'s entry, for messages.
    fn show_timeout(&self, event: Event) -> String {
        self.spec.timeout_unit.show(self.timeout(event))
    }

    /// Puts our entries, running `command`, under each of the agent's events. Returns whether
    /// anything changed, or the key with a wrong shape.
    fn add_entries(
        &self,
        settings: &mut Json,
        command: &str,
    ) -> Result<bool, (String, &'static str)> {
        let mut changed = false;
        for (name, event) in self.spec.events() {
            changed |= add_entry(
                settings,
                name,
                self.spec.command,
                &self.entry(command, event),
            )?;
        }
        Ok(changed)
    }
}

/// Why a settings file cannot be changed; each names the file and what to do.
#[derive(Debug)]
enum SettingsError {
    /// The file could not be read or written.
    Io {
        path: PathBuf,
        action: &'static str,
        source: io::Error,
    },
    /// The file is JSON, but a key we must change holds something else than expected.
    Shape {
        path: PathBuf,
        key: String,
        want: &'static str,
    },
    /// Uninstall met a file that is not JSON; it is left alone.
    Unreadable { path: PathBuf, why: String },
}

impl fmt::Display for SettingsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SettingsError::Io {
                path,
                action,
                source,
            } => write!(
                f,
                "cannot {action} {}: {source}; check its permissions",
                path.display()
            ),
            SettingsError::Shape { path, key, want } => write!(
                f,
                "{}: `{key}` is not {want}; fix it by hand (nothing was changed)",
                path.display()
            ),
            SettingsError::Unreadable { path, why } => write!(
                f,
                "{}: not valid JSON ({why}); nothing was removed, fix or delete the file",
                path.display()
            ),
        }
    }
}

impl std::error::Error for SettingsError {}

/// A file we cannot read or write is a failure (exit 1); one we must not change is the user's
/// to fix (exit 2).
impl From<SettingsError> for CliError {
    fn from(err: SettingsError) -> CliError {
        match err {
            SettingsError::Io { .. } => CliError::failed(err),
            _ => CliError::usage(err),
        }
    }
}

/// `hookvisor install AGENT`: adds (or refreshes) our entry; prints what it did.
pub fn install(globals: &Globals, args: &InstallArgs) -> CliResult {
    let target = Target::new(args.agent, args.user_level, &workspace(globals, args)?)?;
    let command = adapter_command(globals, args, target.spec.command)?;
    let path = resolve_symlink(&target.path);
    let mut settings = match load(&path)? {
        Loaded::Missing => Json::Object(Object::default()),
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
            Json::Object(Object::default())
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
            "installed `{command}` in {} for {} (timeout {}) and {} (timeout {})",
            path.display(),
            target.spec.stop_events().collect::<Vec<_>>().join(", "),
            target.show_timeout(Event::TurnEnd),
            target.spec.prompt,
            target.show_timeout(Event::Prompt),
        )?;
    } else {
        writeln!(
            out,
            "`{command}` is already installed in {}",
            path.display()
        )?;
    }
    if args.agent == Agent::Codex {
        let cwd = if args.user_level {
            path.parent().unwrap_or(Path::new("/")).to_owned()
        } else {
            workspace(globals, args)?
        };
        report_codex_trust(&mut out, &cwd, &path, &command, args.user_level)?;
    }
    Ok(Exit::Ok)
}

/// Trusts our Codex hooks through Codex's app server when it can, and otherwise prints the
/// exact steps: Codex skips an untrusted hook without a word.
fn report_codex_trust(
    out: &mut impl Write,
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
    let codex = Agent::Codex.spec();
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
    let target = Target::new(args.agent, args.user_level, &workspace(globals, args)?)?;
    let path = resolve_symlink(&target.path);
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
    let removed = remove_entries(&mut settings, target.spec.command);
    if removed == 0 {
        writeln!(
            out,
            "no hookvisor {} hook in {}; nothing to remove",
            target.spec.command,
            path.display()
        )?;
        return Ok(Exit::Ok);
    }
    write_atomic(&path, &settings)?;
    writeln!(
        out,
        "removed {removed} hookvisor {} hook{} from {}",
        target.spec.command,
        if removed == 1 { "" } else { "s" },
        path.display()
    )?;
    Ok(Exit::Ok)
}

/// The workspace whose settings change ([`Globals::workspace`]); none at the user level.
fn workspace(globals: &Globals, args: &InstallArgs) -> Result<PathBuf, CliError> {
    if args.user_level {
        return Ok(PathBuf::new());
    }
    globals.workspace()
}

/// The command the agent runs: this binary's absolute path, shell-quoted, the subcommand, and
/// the options given to `install` that the adapter must repeat.
fn adapter_command(
    globals: &Globals,
    args: &InstallArgs,
    subcommand: &str,
) -> Result<String, CliError> {
    let exe = env::current_exe()
        .map_err(|e| CliError::usage(format!("cannot tell where this hookvisor binary is: {e}")))?;
    let mut words = vec![shell_quote(&exe.to_string_lossy()), subcommand.to_owned()];
    if args.fail_closed {
        words.push("--fail-closed".into());
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

/// Whether a hook entry is one of ours for `subcommand`.
fn is_ours(hook: &Json, subcommand: &str) -> bool {
    let Some(Json::String(command)) = hook.get("command") else {
        return false;
    };
    command.contains("hookvisor")
        && command
            .split_whitespace()
            .any(|word| word.trim_matches(['\'', '"']) == subcommand)
}

/// Puts `entry` under `event`: replaces the first entry of ours in place, drops other
/// copies, or appends a group. Returns whether anything changed, or the key with a wrong shape.
fn add_entry(
    settings: &mut Json,
    event: &str,
    subcommand: &str,
    entry: &Json,
) -> Result<bool, (String, &'static str)> {
    let before = settings.clone();
    let Json::Object(root) = settings else {
        return Err(("(top level)".to_owned(), "an object"));
    };
    let Json::Object(hooks) = root.get_or_insert("hooks", || Json::Object(Object::default()))
    else {
        return Err(("hooks".to_owned(), "an object"));
    };
    let Json::Array(groups) = hooks.get_or_insert(event, || Json::Array(Vec::new())) else {
        return Err((format!("hooks.{event}"), "an array"));
    };
    let mut placed = false;
    let mut emptied = vec![false; groups.len()];
    for (group, emptied) in groups.iter_mut().zip(emptied.iter_mut()) {
        let Some(Json::Array(list)) = group.get_mut("hooks") else {
            continue;
        };
        let had = list.len();
        list.retain_mut(|hook| {
            if !is_ours(hook, subcommand) {
                true
            } else if placed {
                false
            } else {
                *hook = entry.clone();
                placed = true;
                true
            }
        });
        *emptied = had > 0 && list.is_empty();
    }
    let mut flags = emptied.into_iter();
    groups.retain(|_| !flags.next().unwrap_or(false));
    if !placed {
        let mut group = Object::default();
        group.insert("hooks", Json::Array(vec![entry.clone()]));
        groups.push(Json::Object(group));
    }
    Ok(*settings != before)
}

/// Removes every entry of ours for `subcommand`, under any event, with the groups and events
/// that held only ours. Returns how many entries went.
fn remove_entries(settings: &mut Json, subcommand: &str) -> usize {
    let Json::Object(root) = settings else {
        return 0;
    };
    let Some(Json::Object(hooks)) = root.get_mut("hooks") else {
        return 0;
    };
    let mut removed = 0;
    let mut emptied_events = Vec::new();
    for (event, groups) in hooks.0.iter_mut() {
        let Json::Array(groups) = groups else {
            continue;
        };
        let before = removed;
        let mut emptied = Vec::with_capacity(groups.len());
        for group in groups.iter_mut() {
            let Some(Json::Array(list)) = group.get_mut("hooks") else {
                emptied.push(false);
                continue;
            };
            let had = list.len();
            list.retain(|hook| !is_ours(hook, subcommand));
            removed += had - list.len();
            emptied.push(had > list.len() && list.is_empty());
        }
        let mut flags = emptied.into_iter();
        groups.retain(|_| !flags.next().unwrap_or(false));
        if removed > before && groups.is_empty() {
            emptied_events.push(event.clone());
        }
    }
    for event in &emptied_events {
        hooks.remove(event);
    }
    if removed > 0 && hooks.0.is_empty() {
        root.remove("hooks");
    }
    removed
}

/// A settings file as found.
#[derive(Debug)]
enum Loaded {
    /// No file yet (or an empty one).
    Missing,
    /// A JSON object.
    Json(Json),
    /// A JSON object once comments are stripped (Gemini CLI allows them); writing it back
    /// loses them, so the original is backed up first.
    Lossy { value: Json, why: String },
    /// Not a JSON object at all.
    Corrupt { why: String },
}

fn load(path: &Path) -> Result<Loaded, SettingsError> {
    let text = match fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Loaded::Missing),
        Err(source) => {
            return Err(SettingsError::Io {
                path: path.to_owned(),
                action: "read",
                source,
            });
        }
    };
    let Ok(text) = String::from_utf8(text) else {
        return Ok(Loaded::Corrupt {
            why: "not UTF-8".into(),
        });
    };
    if text.trim().is_empty() {
        return Ok(Loaded::Missing);
    }
    Ok(match serde_json::from_str::<Json>(&text) {
        Ok(value @ Json::Object(_)) => Loaded::Json(value),
        Ok(_) => Loaded::Corrupt {
            why: "the top level is not an object".into(),
        },
        Err(strict) => match serde_json::from_str::<Json>(&strip_comments(&text)) {
            Ok(value @ Json::Object(_)) => Loaded::Lossy {
                value,
                why: "it has comments, which are not kept when rewriting it".into(),
            },
            _ => Loaded::Corrupt {
                why: strict.to_string(),
            },
        },
    })
}

/// Removes `//` and `/* */` comments outside strings, keeping line breaks so positions in
/// errors stay meaningful.
fn strip_comments(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            out.push(c);
            match c {
                '\\' => out.extend(chars.next()),
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match (c, chars.peek()) {
            ('"', _) => {
                in_string = true;
                out.push(c);
            }
            ('/', Some('/')) => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                        break;
                    }
                }
            }
            ('/', Some('*')) => {
                chars.next();
                let mut last = ' ';
                for c in chars.by_ref() {
                    if c == '\n' {
                        out.push('\n');
                    }
                    if last == '*' && c == '/' {
                        break;
                    }
                    last = c;
                }
            }
            _ => out.push(c),
        }
    }
    out
}

/// Follows a symlinked settings file (dotfile managers link them) so the link survives.
fn resolve_symlink(path: &Path) -> PathBuf {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
        }
        _ => path.to_owned(),
    }
}

/// Moves `path` to `<path>.bak-<UTC time>` (with a counter if that exists) and returns it.
fn back_up(path: &Path) -> Result<PathBuf, SettingsError> {
    let stamp = utc_stamp(SystemTime::now());
    let mut backup = PathBuf::from(format!("{}.bak-{stamp}", path.display()));
    let mut n = 1;
    while backup.exists() {
        backup = PathBuf::from(format!("{}.bak-{stamp}-{n}", path.display()));
        n += 1;
    }
    fs::copy(path, &backup).map_err(|source| SettingsError::Io {
        path: backup.clone(),
        action: "write the backup",
        source,
    })?;
    Ok(backup)
}

/// `YYYYMMDDTHHMMSSZ`, for backup names that sort by time.
fn utc_stamp(time: SystemTime) -> String {
    let secs = time.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Howard Hinnant's civil_from_days.
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Writes pretty JSON to a temp file beside `path`, fsyncs it, renames it over `path` and
/// fsyncs the directory, keeping the old file's mode, so the agent never reads half a file.
fn write_atomic(path: &Path, settings: &Json) -> Result<(), SettingsError> {
    let io_err = |action, source| SettingsError::Io {
        path: path.to_owned(),
        action,
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| io_err("create the directory of", e))?;
    let mut text = serde_json::to_string_pretty(settings).expect("a JSON value serialises");
    text.push('\n');
    hookvisor_core::write_atomic(path, text.as_bytes(), hookvisor_core::Durability::Durable)
        .map_err(|e| io_err("write", e))
}

/// A JSON value that keeps the order of object keys as written, so rewriting a settings file
/// changes only what we changed. (serde_json's own map sorts keys unless a crate-wide feature
/// is on; a file people edit by hand deserves its order.)
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    Object(Object),
}

/// Key-value pairs in file order; a repeated key keeps its first place and its last value.
#[derive(Debug, Clone, PartialEq, Default)]
struct Object(Vec<(String, Json)>);

impl Object {
    fn insert(&mut self, key: &str, value: Json) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some((_, slot)) => *slot = value,
            None => self.0.push((key.to_owned(), value)),
        }
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut Json> {
        self.0.iter_mut().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    fn get_or_insert(&mut self, key: &str, default: impl FnOnce() -> Json) -> &mut Json {
        let at = match self.0.iter().position(|(k, _)| k == key) {
            Some(at) => at,
            None => {
                self.0.push((key.to_owned(), default()));
                self.0.len() - 1
            }
        };
        &mut self.0[at].1
    }

    fn remove(&mut self, key: &str) {
        self.0.retain(|(k, _)| k != key);
    }
}

impl Json {
    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(object) => object.0.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn get_mut(&mut self, key: &str) -> Option<&mut Json> {
        match self {
            Json::Object(object) => object.get_mut(key),
            _ => None,
        }
    }
}

impl From<&str> for Json {
    fn from(text: &str) -> Json {
        Json::String(text.to_owned())
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => serializer.serialize_unit(),
            Json::Bool(b) => serializer.serialize_bool(*b),
            Json::Number(n) => n.serialize(serializer),
            Json::String(s) => serializer.serialize_str(s),
            Json::Array(items) => items.serialize(serializer),
            Json::Object(object) => {
                let mut map = serializer.serialize_map(Some(object.0.len()))?;
                for (key, value) in &object.0 {
                    map.serialize_entry(key, value)?;
                }
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Json, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_unit<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_none<E: de::Error>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Json, D::Error> {
        Json::deserialize(deserializer)
    }

    fn visit_bool<E: de::Error>(self, b: bool) -> Result<Json, E> {
        Ok(Json::Bool(b))
    }

    fn visit_i64<E: de::Error>(self, n: i64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_u64<E: de::Error>(self, n: u64) -> Result<Json, E> {
        Ok(Json::Number(n.into()))
    }

    fn visit_f64<E: de::Error>(self, n: f64) -> Result<Json, E> {
        Ok(serde_json::Number::from_f64(n).map_or(Json::Null, Json::Number))
    }

    fn visit_str<E: de::Error>(self, s: &str) -> Result<Json, E> {
        Ok(Json::String(s.to_owned()))
    }

    fn visit_string<E: de::Error>(self, s: String) -> Result<Json, E> {
        Ok(Json::String(s))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut object = Object::default();
        while let Some((key, value)) = map.next_entry::<String, Json>()? {
            object.insert(&key, value);
        }
        Ok(Json::Object(object))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// A test value as our ordered type.
    fn j(value: Value) -> Json {
        serde_json::from_value(value).unwrap()
    }

    /// Our type as serde_json's, whose equality ignores key order.
    fn plain(value: &Json) -> Value {
        serde_json::to_value(value).unwrap()
    }

    const CMD: &str = "/usr/bin/hookvisor claude-stop";

    fn entry(command: &str) -> Value {
        json!({"type": "command", "command": command, "timeout": 1800})
    }

    #[test]
    fn add_entry_merges_idempotently() {
        let foreign = json!({"type": "command", "command": "npx lint", "timeout": 5});
        let cases: &[(&str, Value, Value)] = &[
            (
                "empty file",
                json!({}),
                json!({"hooks": {"Stop": [{"hooks": [entry(CMD)]}]}}),
            ),
            (
                "other settings and hooks kept, ours appended",
                json!({"model": "opus", "hooks": {"Stop": [{"hooks": [foreign.clone()]}], "PreToolUse": []}}),
                json!({"model": "opus", "hooks": {"Stop": [{"hooks": [foreign.clone()]}, {"hooks": [entry(CMD)]}], "PreToolUse": []}}),
            ),
            (
                "old entry of ours refreshed in place, duplicates dropped",
                json!({"hooks": {"Stop": [
                    {"hooks": [foreign.clone(), entry("/old/hookvisor claude-stop")]},
                    {"hooks": [entry("'/other/hookvisor' claude-stop --fail-closed")]},
                ]}}),
                json!({"hooks": {"Stop": [{"hooks": [foreign.clone(), entry(CMD)]}]}}),
            ),
            (
                "another adapter's entry is not ours",
                json!({"hooks": {"Stop": [{"hooks": [entry("/usr/bin/hookvisor codex-stop")]}]}}),
                json!({"hooks": {"Stop": [{"hooks": [entry("/usr/bin/hookvisor codex-stop")]}, {"hooks": [entry(CMD)]}]}}),
            ),
        ];
        for (name, before, want) in cases {
            let mut settings = j(before.clone());
            let changed = add_entry(&mut settings, "Stop", "claude-stop", &j(entry(CMD))).unwrap();
            assert_eq!(&plain(&settings), want, "{name}");
            assert_eq!(changed, before != want, "{name}");
            let again = add_entry(&mut settings, "Stop", "claude-stop", &j(entry(CMD))).unwrap();
            assert!(!again, "{name}: second install changed the settings");
        }
    }

    #[test]
    fn add_entry_refuses_unexpected_shapes() {
        let cases: &[(Value, &str)] = &[
            (json!({"hooks": "none"}), "hooks"),
            (json!({"hooks": {"Stop": {"hooks": []}}}), "hooks.Stop"),
            (json!([]), "(top level)"),
        ];
        for (before, key) in cases {
            let mut settings = j(before.clone());
            let err = add_entry(&mut settings, "Stop", "claude-stop", &j(entry(CMD))).unwrap_err();
            assert_eq!(err.0, *key);
            assert_eq!(&plain(&settings), before);
        }
    }

    #[test]
    fn remove_entries_removes_only_ours() {
        let foreign = json!({"type": "command", "command": "echo hookvisor is great"});
        let cases: &[(Value, usize, Value)] = &[
            (
                json!({"hooks": {"Stop": [{"hooks": [entry(CMD)]}], "SubagentStop": [{"hooks": [entry(CMD)]}]}, "x": 1}),
                2,
                json!({"x": 1}),
            ),
            (
                json!({"hooks": {"Stop": [{"hooks": [foreign.clone(), entry(CMD)]}]}}),
                1,
                json!({"hooks": {"Stop": [{"hooks": [foreign.clone()]}]}}),
            ),
            (
                json!({"hooks": {"Stop": [], "PreToolUse": [{"matcher": "Bash", "hooks": [foreign.clone()]}]}}),
                0,
                json!({"hooks": {"Stop": [], "PreToolUse": [{"matcher": "Bash", "hooks": [foreign.clone()]}]}}),
            ),
            (json!({"hooks": 3}), 0, json!({"hooks": 3})),
            (json!({}), 0, json!({})),
        ];
        for (before, count, want) in cases {
            let mut settings = j(before.clone());
            assert_eq!(
                remove_entries(&mut settings, "claude-stop"),
                *count,
                "{before}"
            );
            assert_eq!(&plain(&settings), want, "{before}");
        }
    }

    #[test]
    fn keeps_key_order_and_numbers_as_written() {
        let text = r#"{"zeta":1,"alpha":{"y":2.5,"b":-3},"hooks":{"Stop":[]},"m":[true,null,"s"]}"#;
        let mut settings: Json = serde_json::from_str(text).unwrap();
        let entry = Target::new(Agent::Claude, false, Path::new("/w"))
            .unwrap()
            .entry(CMD, Event::TurnEnd);
        add_entry(&mut settings, "Stop", "claude-stop", &entry).unwrap();
        assert_eq!(
            serde_json::to_string(&settings).unwrap(),
            r#"{"zeta":1,"alpha":{"y":2.5,"b":-3},"hooks":{"Stop":[{"hooks":[{"type":"command","command":"/usr/bin/hookvisor claude-stop","timeout":1800}]}]},"m":[true,null,"s"]}"#
        );
        remove_entries(&mut settings, "claude-stop");
        assert_eq!(
            serde_json::to_string(&settings).unwrap(),
            r#"{"zeta":1,"alpha":{"y":2.5,"b":-3},"m":[true,null,"s"]}"#
        );
    }

    /// The regression the agent table exists for: `install` registered Codex for fewer events
    /// than its adapter answered. For every agent, each event `install` writes is one the
    /// adapter answers, in the same role, and each event the adapter answers is written.
    #[test]
    fn installs_exactly_the_events_the_adapter_answers() {
        use crate::commands::adapter::answers;
        use clap::ValueEnum;

        let mut names: Vec<&str> = ["PreToolUse", "PostToolUse", "Notification", "SessionStart"]
            .into_iter()
            .collect();
        for agent in Agent::value_variants() {
            names.extend(agent.spec().events().map(|(name, _)| name));
        }
        for agent in Agent::value_variants() {
            let target = Target::new(*agent, false, Path::new("/w")).unwrap();
            let command = format!("/usr/bin/hookvisor {}", target.spec.command);
            let mut settings = Json::Object(Object::default());
            assert!(target.add_entries(&mut settings, &command).unwrap());
            let written = plain(&settings)["hooks"].as_object().unwrap().clone();
            for name in &names {
                let entries: Vec<&Value> = written
                    .get(*name)
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .flat_map(|group| group["hooks"].as_array().unwrap())
                    .collect();
                match answers(target.spec, Some(name)) {
                    None => assert!(entries.is_empty(), "{agent:?} installs {name}"),
                    Some(event) => {
                        assert_eq!(entries.len(), 1, "{agent:?} does not install {name}");
                        assert!(is_ours(&j(entries[0].clone()), target.spec.command));
                        assert_eq!(entries[0]["timeout"], target.timeout(event), "{name}");
                    }
                }
            }
        }
    }

    #[test]
    fn recognises_ours() {
        let cases: &[(&str, bool)] = &[
            ("/usr/bin/hookvisor claude-stop", true),
            ("'/opt/my tools/hookvisor' claude-stop --fail-closed", true),
            ("hookvisor \"claude-stop\"", true),
            ("/usr/bin/hookvisor codex-stop", false),
            ("/usr/bin/other claude-stop", false),
            ("/usr/bin/hookvisor claude-stopper", false),
        ];
        for (command, want) in cases {
            assert_eq!(
                is_ours(&j(json!({ "command": command })), "claude-stop"),
                *want,
                "{command}"
            );
        }
        assert!(!is_ours(&j(json!({"type": "prompt"})), "claude-stop"));
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

    #[test]
    fn strips_comments_outside_strings() {
        let cases: &[(&str, &str)] = &[
            ("{\"a\": 1} // note", "{\"a\": 1} "),
            ("{/* x\ny */\"a\": \"//not\"}", "{\n\"a\": \"//not\"}"),
            (r#"{"a": "q\"/*"}"#, r#"{"a": "q\"/*"}"#),
            ("// top\n{}", "\n{}"),
        ];
        for (text, want) in cases {
            assert_eq!(strip_comments(text), *want, "{text}");
        }
    }

    #[test]
    fn stamps_sort_by_time() {
        let cases: &[(u64, &str)] = &[
            (0, "19700101T000000Z"),
            (951_782_400, "20000229T000000Z"),
            (1_767_225_599, "20251231T235959Z"),
        ];
        for (secs, want) in cases {
            let time = UNIX_EPOCH + std::time::Duration::from_secs(*secs);
            assert_eq!(utc_stamp(time), *want);
        }
    }
}

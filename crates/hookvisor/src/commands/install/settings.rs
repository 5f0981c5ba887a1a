//! The settings file: read as the agent wrote it (comments and all), our hooks entries added or
//! removed in the JSON value with every other key kept in its place, and written back atomically.

use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use serde_json::{Map, Value};

use crate::error::CliError;

/// Why a settings file cannot be changed; each names the file and what to do.
#[derive(Debug)]
pub(super) enum SettingsError {
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

/// Whether a hook entry is one of ours: exactly the shape `install` writes, a program named
/// `hookvisor`, one of `ours` (`claude-stop`, `adapter claude`), then only the options
/// `install` repeats. A user's wrapper (`audit.sh && hookvisor adapter claude`) is theirs.
pub(super) fn is_ours(hook: &Value, ours: &[&str]) -> bool {
    let Some(Value::String(command)) = hook.get("command") else {
        return false;
    };
    let Some(words) = shell_words(command) else {
        return false;
    };
    let Some((program, rest)) = words.split_first() else {
        return false;
    };
    if Path::new(program).file_name() != Some("hookvisor".as_ref()) {
        return false;
    }
    ours.iter().any(|sub| {
        let sub: Vec<&str> = sub.split_whitespace().collect();
        !sub.is_empty()
            && rest.len() >= sub.len()
            && rest[..sub.len()]
                .iter()
                .map(String::as_str)
                .eq(sub.iter().copied())
            && only_our_options(&rest[sub.len()..])
    })
}

/// Whether `words` are options `install` writes after the subcommand, and nothing else.
fn only_our_options(words: &[String]) -> bool {
    let mut words = words.iter();
    while let Some(word) = words.next() {
        match word.as_str() {
            "--fail-closed" => {}
            "--state-dir" | "--session" | "--workspace" if words.next().is_some() => {}
            _ => return false,
        }
    }
    true
}

/// The words of a command in the quoting `install` writes (bare words, `'…'` with `'\''`
/// inside) or plain `"…"`; `None` for any other shell syntax (operators, expansions), which
/// makes the command someone else's.
fn shell_words(command: &str) -> Option<Vec<String>> {
    let mut words = Vec::new();
    let mut word: Option<String> = None;
    let mut chars = command.chars();
    while let Some(c) = chars.next() {
        match c {
            ' ' | '\t' => words.extend(word.take()),
            '\'' => {
                let word = word.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '\'' => break,
                        c => word.push(c),
                    }
                }
            }
            '"' => {
                let word = word.get_or_insert_with(String::new);
                loop {
                    match chars.next()? {
                        '"' => break,
                        '$' | '`' | '\\' => return None,
                        c => word.push(c),
                    }
                }
            }
            '\\' => word.get_or_insert_with(String::new).push(chars.next()?),
            c if c.is_alphanumeric() || "/._-+:,=@%".contains(c) => {
                word.get_or_insert_with(String::new).push(c);
            }
            _ => return None,
        }
    }
    words.extend(word);
    Some(words)
}

/// Puts `entry` under `event`: replaces the first entry of ours in place, drops other
/// copies, or appends a group. Returns whether anything changed, or the key with a wrong shape.
pub(super) fn add_entry(
    settings: &mut Value,
    event: &str,
    subcommand: &[&str],
    entry: &Value,
) -> Result<bool, (String, &'static str)> {
    let before = settings.clone();
    let Value::Object(root) = settings else {
        return Err(("(top level)".to_owned(), "an object"));
    };
    let Value::Object(hooks) = root
        .entry("hooks")
        .or_insert_with(|| Value::Object(Map::new()))
    else {
        return Err(("hooks".to_owned(), "an object"));
    };
    let Value::Array(groups) = hooks
        .entry(event)
        .or_insert_with(|| Value::Array(Vec::new()))
    else {
        return Err((format!("hooks.{event}"), "an array"));
    };
    let mut placed = false;
    let mut emptied = vec![false; groups.len()];
    for (group, emptied) in groups.iter_mut().zip(emptied.iter_mut()) {
        let Some(Value::Array(list)) = group.get_mut("hooks") else {
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
        let mut group = Map::new();
        group.insert("hooks".into(), Value::Array(vec![entry.clone()]));
        groups.push(Value::Object(group));
    }
    Ok(*settings != before)
}

/// Removes every entry of ours for `subcommand`, under any event, with the groups and events
/// that held only ours. Returns how many entries went.
pub(super) fn remove_entries(settings: &mut Value, subcommand: &[&str]) -> usize {
    let Value::Object(root) = settings else {
        return 0;
    };
    let Some(Value::Object(hooks)) = root.get_mut("hooks") else {
        return 0;
    };
    let mut removed = 0;
    let mut emptied_events = Vec::new();
    for (event, groups) in hooks.iter_mut() {
        let Value::Array(groups) = groups else {
            continue;
        };
        let before = removed;
        let mut emptied = Vec::with_capacity(groups.len());
        for group in groups.iter_mut() {
            let Some(Value::Array(list)) = group.get_mut("hooks") else {
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
        hooks.shift_remove(event);
    }
    if removed > 0 && hooks.is_empty() {
        root.shift_remove("hooks");
    }
    removed
}

/// A settings file as found.
#[derive(Debug)]
pub(super) enum Loaded {
    /// No file yet (or an empty one).
    Missing,
    /// A JSON object.
    Json(Value),
    /// A JSON object once comments are stripped (Gemini CLI allows them); writing it back
    /// loses them, so the original is backed up first.
    Lossy { value: Value, why: String },
    /// Not a JSON object at all.
    Corrupt { why: String },
}

pub(super) fn load(path: &Path) -> Result<Loaded, SettingsError> {
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
    Ok(parse(text))
}

/// The most bytes of a settings file [`load_bounded`] reads.
const MAX_SETTINGS_BYTES: u64 = 4 << 20;

/// [`load`] for a reader that only looks (`check`, `list`) at a file the agent may have
/// planted: a link is followed, as dotfile managers make them, but only a regular file of at
/// most [`MAX_SETTINGS_BYTES`] is read, opened without blocking, since a FIFO would stall the
/// read and a link to `/dev/zero` fill memory. Anything else is [`Loaded::Corrupt`].
pub(super) fn load_bounded(path: &Path) -> Result<Loaded, SettingsError> {
    use std::io::Read as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let io_error = |source| SettingsError::Io {
        path: path.to_owned(),
        action: "read",
        source,
    };
    let file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK | nix::libc::O_NOCTTY)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Loaded::Missing),
        Err(source) => return Err(io_error(source)),
    };
    if !file.metadata().map_err(io_error)?.is_file() {
        return Ok(Loaded::Corrupt {
            why: "not a regular file".into(),
        });
    }
    let mut text = Vec::new();
    file.take(MAX_SETTINGS_BYTES + 1)
        .read_to_end(&mut text)
        .map_err(io_error)?;
    if text.len() as u64 > MAX_SETTINGS_BYTES {
        return Ok(Loaded::Corrupt {
            why: format!("larger than {MAX_SETTINGS_BYTES} bytes"),
        });
    }
    Ok(parse(text))
}

/// A settings file's bytes as [`load`] reads them.
fn parse(text: Vec<u8>) -> Loaded {
    let Ok(text) = String::from_utf8(text) else {
        return Loaded::Corrupt {
            why: "not UTF-8".into(),
        };
    };
    if text.trim().is_empty() {
        return Loaded::Missing;
    }
    match serde_json::from_str::<Value>(&text) {
        Ok(value @ Value::Object(_)) => Loaded::Json(value),
        Ok(_) => Loaded::Corrupt {
            why: "the top level is not an object".into(),
        },
        Err(strict) => match serde_json::from_str::<Value>(&strip_comments(&text)) {
            Ok(value @ Value::Object(_)) => Loaded::Lossy {
                value,
                why: "it has comments, which are not kept when rewriting it".into(),
            },
            _ => Loaded::Corrupt {
                why: strict.to_string(),
            },
        },
    }
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
pub(super) fn resolve_symlink(path: &Path) -> PathBuf {
    match fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_symlink() => {
            fs::canonicalize(path).unwrap_or_else(|_| path.to_owned())
        }
        _ => path.to_owned(),
    }
}

/// Moves `path` to `<path>.bak-<UTC time>` (with a counter if that exists) and returns it.
pub(super) fn back_up(path: &Path) -> Result<PathBuf, SettingsError> {
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
    hookvisor_core::timestamp::rfc3339(time).replace([':', '-'], "")
}

/// Writes pretty JSON to a temp file beside `path`, fsyncs it, renames it over `path` and
/// fsyncs the directory, keeping the old file's mode, so the agent never reads half a file.
pub(super) fn write_atomic(path: &Path, settings: &Value) -> Result<(), SettingsError> {
    let io_err = |action, source| SettingsError::Io {
        path: path.to_owned(),
        action,
        source,
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(|e| io_err("create the directory of", e))?;
    let mut text = serde_json::to_string_pretty(settings).expect("a JSON value serialises");
    text.push('\n');
    hookvisor_core::state::write_atomic(
        path,
        text.as_bytes(),
        hookvisor_core::state::Durability::Durable,
    )
    .map_err(|e| io_err("write", e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commands::install::Target;
    use hookvisor_core::agents::{Agent, Route};
    use serde_json::{Value, json};

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
            let mut settings = before.clone();
            let changed = add_entry(&mut settings, "Stop", &["claude-stop"], &entry(CMD)).unwrap();
            assert_eq!(&settings, want, "{name}");
            assert_eq!(changed, before != want, "{name}");
            let again = add_entry(&mut settings, "Stop", &["claude-stop"], &entry(CMD)).unwrap();
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
            let mut settings = before.clone();
            let err = add_entry(&mut settings, "Stop", &["claude-stop"], &entry(CMD)).unwrap_err();
            assert_eq!(err.0, *key);
            assert_eq!(&settings, before);
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
            let mut settings = before.clone();
            assert_eq!(
                remove_entries(&mut settings, &["claude-stop"]),
                *count,
                "{before}"
            );
            assert_eq!(&settings, want, "{before}");
        }
    }

    #[test]
    fn keeps_key_order_and_numbers_as_written() {
        let text = r#"{"zeta":1,"alpha":{"y":2.5,"b":-3},"hooks":{"Stop":[]},"m":[true,null,"s"]}"#;
        let mut settings: Value = serde_json::from_str(text).unwrap();
        let entry = Target::new(Agent::Claude, false, Path::new("/w"))
            .unwrap()
            .entry(CMD, Some(Route::TurnEnd));
        add_entry(&mut settings, "Stop", &["claude-stop"], &entry).unwrap();
        assert_eq!(
            serde_json::to_string(&settings).unwrap(),
            r#"{"zeta":1,"alpha":{"y":2.5,"b":-3},"hooks":{"Stop":[{"hooks":[{"type":"command","command":"/usr/bin/hookvisor claude-stop","timeout":1800}]}]},"m":[true,null,"s"]}"#
        );
        remove_entries(&mut settings, &["claude-stop"]);
        assert_eq!(
            serde_json::to_string(&settings).unwrap(),
            r#"{"zeta":1,"alpha":{"y":2.5,"b":-3},"m":[true,null,"s"]}"#
        );
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
            ("/usr/bin/hookvisor adapter claude", true),
            ("/usr/bin/hookvisor adapter codex", false),
            (
                "'/a b/hookvisor' adapter claude --state-dir '/s/it'\\''s' --session x --workspace /w",
                true,
            ),
            // Users' own commands that merely call us are theirs.
            ("bash -c 'audit.sh && hookvisor adapter claude'", false),
            ("audit.sh && /usr/bin/hookvisor adapter claude", false),
            ("/usr/bin/hookvisor adapter claude | tee log", false),
            ("/usr/bin/hookvisor adapter claude --extra", false),
            ("/usr/bin/not-hookvisor adapter claude", false),
            ("\"$HOME/bin/hookvisor\" adapter claude", false),
        ];
        for (command, want) in cases {
            assert_eq!(
                is_ours(
                    &json!({ "command": command }),
                    &["claude-stop", "adapter claude"]
                ),
                *want,
                "{command}"
            );
        }
        assert!(!is_ours(&json!({"type": "prompt"}), &["claude-stop"]));
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
            let time = std::time::UNIX_EPOCH + std::time::Duration::from_secs(*secs);
            assert_eq!(utc_stamp(time), *want);
        }
    }
}

//! `.discobot/hookvisor.yml`: the workspace's settings of hookvisor itself (docs/EVENTS.md §2.1, §5
//! rule 7). The file is optional; every key is.
//!
//! ```yaml
//! max_retries: 5            # the loop guard's limit (docs/DESIGN.md, evaluation step 5)
//! sources: [discobot]       # or `auto` (the default): which hooks are read
//! disable_global_hooks: true
//! callback: {port: 0, public_url: "https://hooks.example.com"}
//! file_tools: [Write, Edit, MultiEdit]
//! ```
//!
//! Rules, written once here:
//!
//! 1. **Strict.** An unknown key, a value of the wrong type, a port outside 0–65535, a
//!    `public_url` that is no `http(s)://host…` URL, an unknown source name, an anchor or alias
//!    or a repeated key is a [`ConfigError`], reported as a problem of the file
//!    (`file:line: reason; fix`) by discovery, `list` and `check`.
//! 2. **A broken file turns off what it could have turned on, and keeps what runs without it.**
//!    The hooks of `.discobot/hooks` run as they do with no file (phase 1), global hooks do
//!    not run (the file may have been meant to disable them), and every other key takes its
//!    default. Refusing the workspace's own checks over a typo would stop them silently; running
//!    hooks the file meant to disable would be worse. `check` fails until the file is fixed.
//! 3. **Read like a hook file, and stricter.** The agent can write the workspace: the file is
//!    opened without following a symbolic link and without waiting (a FIFO opens at once), and
//!    what was opened must be a regular file of at most 64 KiB, or it is a problem.
//! 4. **`max_retries`** counts as: command-line flag (`--max-retries`), then
//!    `$HOOKVISOR_MAX_RETRIES`, then this file, then 3 ([`Config::max_retries_or`]).
//! 5. **`sources`**: `auto` reads every source there is; a list reads only those named.
//!    `discobot` (`.discobot/hooks`), `iteratr`, `autoagent`, `nyzhi`, `pipelines` (their
//!    files, read in place by [`crate::import`], which also leaves out the tool `hookvisor
//!    loop` supervises) and `global` (hookvisor's global hooks). `disable_global_hooks: true`
//!    turns both global kinds off whatever `sources` says: `global` and agent-pipelines'
//!    `~/.config/agent-pipelines/hooks.yaml`.
//! 6. **`callback`** (`port`: 0 for an ephemeral port, else 1–65535; `public_url`) and
//!    **`file_tools`** (tool names) are read and checked for the parts of hookvisor that use
//!    them.

#![forbid(unsafe_code)]

use std::fmt;
use std::fs;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde_saphyr::Spanned;

/// The configuration file, relative to the workspace.
pub const CONFIG_FILE: &str = ".discobot/hookvisor.yml";

/// The loop guard's limit when neither a flag, the environment nor the file sets one.
pub const DEFAULT_MAX_RETRIES: u32 = 3;

/// The largest configuration file read; more is a problem, not a truncated read.
const MAX_CONFIG_BYTES: u64 = 64 * 1024;

/// The settings of `.discobot/hookvisor.yml`, defaults applied (see the module rules).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    /// The loop guard's limit, when the file sets one (rule 4).
    pub max_retries: Option<u32>,
    /// Which sources of hooks are read (rule 5). Default `auto`.
    pub sources: Sources,
    /// Turns global hooks off. Default false.
    pub disable_global_hooks: bool,
    /// Where webhook callbacks are taken (docs/EVENTS.md §4.3). Default: neither set.
    pub callback: Callback,
    /// Tools that write files, besides the known ones (docs/EVENTS.md §1.1, `file.edited`). Default
    /// none.
    pub file_tools: Vec<String>,
}

/// `sources:` of the configuration file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Sources {
    /// Every source found (docs/EVENTS.md §2.2). The default.
    #[default]
    Auto,
    /// Only the sources named, in the file's order.
    Only(Vec<Source>),
}

/// A source of hooks, in the order their hooks run (docs/EVENTS.md §5 rule 7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Source {
    /// `.discobot/hooks` of the workspace.
    Discobot,
    /// iteratr's `.iteratr.hooks.yml`.
    Iteratr,
    /// AutoAgent's `.autoagent/config.json`.
    Autoagent,
    /// nyzhi's `.nyzhi/config.toml`.
    Nyzhi,
    /// agent-pipelines' `pipeline.yaml`, `loop.yaml` and `~/.config/agent-pipelines/hooks.yaml`.
    Pipelines,
    /// hookvisor's global hooks (`~/.config/hookvisor/hooks`).
    Global,
}

impl Source {
    /// Every source, in run order.
    pub const ALL: [Source; 6] = [
        Source::Discobot,
        Source::Iteratr,
        Source::Autoagent,
        Source::Nyzhi,
        Source::Pipelines,
        Source::Global,
    ];

    /// The name `sources:` uses.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Discobot => "discobot",
            Source::Iteratr => "iteratr",
            Source::Autoagent => "autoagent",
            Source::Nyzhi => "nyzhi",
            Source::Pipelines => "pipelines",
            Source::Global => "global",
        }
    }

    fn from_name(name: &str) -> Option<Source> {
        Source::ALL.into_iter().find(|s| s.as_str() == name)
    }
}

/// The path of a source's file relative to the workspace (rule 4 of [`crate::import`]).
pub(crate) fn workspace_file(source: Source) -> &'static str {
    match source {
        Source::Iteratr => ".iteratr.hooks.yml",
        Source::Autoagent => ".autoagent/config.json",
        Source::Nyzhi => ".nyzhi/config.toml",
        Source::Pipelines => "pipeline.yaml",
        Source::Discobot => ".discobot/hooks",
        Source::Global => "~/.config/hookvisor/hooks",
    }
}

impl fmt::Display for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

/// `callback:` of the configuration file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Callback {
    /// The port to listen on for callbacks; 0 (or unset) takes an ephemeral one.
    pub port: Option<u16>,
    /// The URL callbacks are sent to when the listener is behind a proxy, `http(s)://…`.
    pub public_url: Option<String>,
}

/// Whether discovery read one source, and why (for `check`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceUse {
    /// The source.
    pub source: Source,
    /// Whether its hooks were read.
    pub used: bool,
    /// Where its hooks were read from, or why they were not.
    pub note: String,
    /// The directory its hooks were read from, when they were; for another tool's file, the
    /// first file of it found (read or skipped).
    pub dir: Option<PathBuf>,
}

impl fmt::Display for SourceUse {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = if self.used { "used" } else { "skipped" };
        write!(f, "{} {verb} ({})", self.source, self.note)
    }
}

/// Why the configuration file is refused: the line when known, what is wrong and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConfigError {
    /// 1-based line of the offending value, when known.
    pub line: Option<usize>,
    /// What is wrong and what to write instead.
    pub message: String,
}

impl ConfigError {
    fn at(line: Option<usize>, message: impl Into<String>) -> ConfigError {
        ConfigError {
            line,
            message: message.into(),
        }
    }
}

impl Config {
    /// The path of the configuration file of `workspace`.
    pub fn path(workspace: &Path) -> PathBuf {
        workspace.join(CONFIG_FILE)
    }

    /// Reads `<workspace>/.discobot/hookvisor.yml`: `Ok(None)` when there is none.
    pub fn load(workspace: &Path) -> Result<Option<Config>, ConfigError> {
        let Some(text) = read_config(&Config::path(workspace))? else {
            return Ok(None);
        };
        Config::parse(&text).map(Some)
    }

    /// Parses the text of a configuration file (the module's rule 1).
    pub fn parse(text: &str) -> Result<Config, ConfigError> {
        // A file of comments only is an empty document, which no struct deserialises from.
        let blank = text.lines().all(|l| {
            let l = l.trim();
            l.is_empty() || l.starts_with('#') || l == "---" || l == "..."
        });
        if blank {
            return Ok(Config::default());
        }
        let options = crate::frontmatter::strict_options();
        let raw: Raw = serde_saphyr::from_str_with_options(text, options).map_err(|e| {
            let e = e.without_snippet();
            let line = e
                .location()
                .and_then(|l| usize::try_from(l.line()).ok())
                .filter(|l| *l > 0);
            ConfigError::at(line, yaml_reason(e, text, line))
        })?;
        raw.check()
    }

    /// The loop guard's limit: `given` (the flag, else `$HOOKVISOR_MAX_RETRIES`, as the
    /// command line resolves them), else this file's, else [`DEFAULT_MAX_RETRIES`].
    pub fn max_retries_or(&self, given: Option<u32>) -> u32 {
        given.or(self.max_retries).unwrap_or(DEFAULT_MAX_RETRIES)
    }

    /// Whether hooks of `source` are read (rule 5).
    pub fn reads(&self, source: Source) -> bool {
        let listed = match &self.sources {
            Sources::Auto => true,
            Sources::Only(list) => list.contains(&source),
        };
        listed && !(source == Source::Global && self.disable_global_hooks)
    }

    /// What a broken file leaves (rule 2): the defaults, without global hooks.
    pub(crate) fn fallback() -> Config {
        Config {
            disable_global_hooks: true,
            ..Config::default()
        }
    }
}

/// The reason of a YAML or type error, naming the key on the error's line and its fix; the
/// line itself goes apart.
fn yaml_reason(e: &serde_saphyr::Error, text: &str, line: Option<usize>) -> String {
    use serde_saphyr::Error;
    match e {
        Error::DuplicateMappingKey { key, .. } => {
            let key = key.as_deref().unwrap_or("a key");
            return format!("'{key}' is given twice; keep one");
        }
        Error::MergeKeyNotAllowed { .. } => {
            return "merge keys ('<<') are not read; write the keys out".to_owned();
        }
        Error::Budget { .. } => {
            return "anchors and aliases are not read; write each value out".to_owned();
        }
        _ => {}
    }
    let rendered = e.to_string();
    // The rendering ends with " at line N, column M"; the caller prints the line itself.
    let reason = match rendered.rfind(" at line ") {
        Some(at) => &rendered[..at],
        None => rendered.as_str(),
    };
    let reason = reason.trim().trim_end_matches('.');
    if reason.contains("unknown field") {
        return format!("{reason}; remove the key or fix its spelling");
    }
    let syntax = || format!("{reason}; fix the YAML here (README, \"hookvisor.yml\")");
    // Type errors read "invalid i64", "expected sequence start"…; the rest are YAML syntax.
    if !(reason.starts_with("invalid ") || reason.starts_with("expected ")) {
        return syntax();
    }
    let written = line.and_then(|l| text.lines().nth(l.checked_sub(1)?));
    let Some((key, value)) = written
        .and_then(|l| l.trim_start().trim_start_matches("- ").split_once(':'))
        .map(|(key, value)| (key.trim(), value.trim()))
    else {
        if reason == "expected mapping start" {
            return "the file is not a mapping of keys; write lines such as 'max_retries: 3'"
                .to_owned();
        }
        return syntax();
    };
    let (is_not, fix) = match key {
        "max_retries" => ("not a whole number", "write one such as 'max_retries: 3'"),
        "disable_global_hooks" => ("not true or false", "write true or false"),
        "sources" => (
            "neither 'auto' nor a list",
            "write 'auto' or a list such as '[discobot, global]'",
        ),
        "callback" => (
            "not a mapping",
            "write one such as '{port: 0, public_url: \"https://…\"}'",
        ),
        "port" => ("not a whole number", "write one from 0 to 65535"),
        "public_url" => ("not text", "write an http(s) URL in quotes"),
        "file_tools" => (
            "not a list",
            "write a list of tool names such as '[Write, Edit]'",
        ),
        _ => return syntax(),
    };
    let value = match value {
        "" => "the value".to_owned(),
        value => format!("'{value}'"),
    };
    format!("{key}: {value} is {is_not}; {fix}")
}

/// A value as YAML types it, taken only when it is written as that type: `"true"`, `yes` or
/// `"5"` are refused rather than read as a boolean or a number, as the file is read strictly.
struct Written<T>(T);

impl<'de> Deserialize<'de> for Written<bool> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Boolean;
        impl Visitor<'_> for Boolean {
            type Value = Written<bool>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("true or false")
            }
            fn visit_bool<E: de::Error>(self, value: bool) -> Result<Self::Value, E> {
                Ok(Written(value))
            }
        }
        deserializer.deserialize_any(Boolean)
    }
}

impl<'de> Deserialize<'de> for Written<i64> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Integer;
        impl Visitor<'_> for Integer {
            type Value = Written<i64>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a whole number")
            }
            fn visit_i64<E: de::Error>(self, value: i64) -> Result<Self::Value, E> {
                Ok(Written(value))
            }
            fn visit_u64<E: de::Error>(self, value: u64) -> Result<Self::Value, E> {
                i64::try_from(value)
                    .map(Written)
                    .map_err(|_| E::invalid_value(de::Unexpected::Unsigned(value), &self))
            }
        }
        deserializer.deserialize_any(Integer)
    }
}

/// The file as YAML reads it, before the values are checked.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    max_retries: Option<Spanned<Written<i64>>>,
    sources: Option<Spanned<RawSources>>,
    disable_global_hooks: Option<Written<bool>>,
    callback: Option<Spanned<RawCallback>>,
    file_tools: Option<Spanned<Vec<Spanned<String>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawCallback {
    port: Option<Spanned<Written<i64>>>,
    public_url: Option<Spanned<String>>,
}

/// `sources:`, a word or a list of names, each with its line.
enum RawSources {
    Word(String),
    List(Vec<Spanned<String>>),
}

impl<'de> Deserialize<'de> for RawSources {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<RawSources, D::Error> {
        struct SourcesVisitor;
        impl<'de> Visitor<'de> for SourcesVisitor {
            type Value = RawSources;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("'auto' or a list of source names")
            }
            fn visit_str<E: de::Error>(self, word: &str) -> Result<RawSources, E> {
                Ok(RawSources::Word(word.to_owned()))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<RawSources, A::Error> {
                let mut list = Vec::new();
                while let Some(item) = seq.next_element::<Spanned<String>>()? {
                    list.push(item);
                }
                Ok(RawSources::List(list))
            }
        }
        deserializer.deserialize_any(SourcesVisitor)
    }
}

/// The 1-based line of a spanned value, when YAML gave one.
fn line_of<T>(spanned: &Spanned<T>) -> Option<usize> {
    usize::try_from(spanned.referenced.line())
        .ok()
        .filter(|l| *l > 0)
}

impl Raw {
    /// The values checked (the module's rules 1, 5, 6).
    fn check(self) -> Result<Config, ConfigError> {
        let mut config = Config {
            disable_global_hooks: self.disable_global_hooks.is_some_and(|w| w.0),
            ..Config::default()
        };
        if let Some(n) = self.max_retries {
            let value = u32::try_from(n.value.0).map_err(|_| {
                ConfigError::at(
                    line_of(&n),
                    format!(
                        "max_retries {} is out of range; use a whole number from 0 (never \
                         re-prompt) to {}",
                        n.value.0,
                        u32::MAX
                    ),
                )
            })?;
            config.max_retries = Some(value);
        }
        if let Some(sources) = self.sources {
            let line = line_of(&sources);
            config.sources = match sources.value {
                RawSources::Word(word) if word == "auto" => Sources::Auto,
                RawSources::Word(word) => {
                    return Err(ConfigError::at(
                        line,
                        format!(
                            "sources '{word}' is neither 'auto' nor a list; write 'sources: \
                             auto' or a list such as 'sources: [{word}]'"
                        ),
                    ));
                }
                RawSources::List(names) => {
                    let mut list = Vec::new();
                    for name in names {
                        let source = Source::from_name(&name.value).ok_or_else(|| {
                            let known: Vec<&str> = Source::ALL.iter().map(|s| s.as_str()).collect();
                            ConfigError::at(
                                line_of(&name).or(line),
                                format!(
                                    "unknown source '{}'; use one of {}, or 'sources: auto' \
                                     for all",
                                    name.value,
                                    known.join(", ")
                                ),
                            )
                        })?;
                        if !list.contains(&source) {
                            list.push(source);
                        }
                    }
                    Sources::Only(list)
                }
            };
        }
        if let Some(callback) = self.callback {
            if let Some(port) = callback.value.port {
                let value = u16::try_from(port.value.0).map_err(|_| {
                    ConfigError::at(
                        line_of(&port),
                        format!(
                            "callback port {} is out of range; use 1 to 65535, or 0 for an \
                             ephemeral port",
                            port.value.0
                        ),
                    )
                })?;
                config.callback.port = Some(value);
            }
            if let Some(url) = callback.value.public_url {
                if let Err(why) = check_url(&url.value) {
                    return Err(ConfigError::at(
                        line_of(&url),
                        format!(
                            "callback public_url '{}' {why}; write an http(s) URL such as \
                             'https://hooks.example.com'",
                            url.value
                        ),
                    ));
                }
                config.callback.public_url = Some(url.value);
            }
        }
        if let Some(tools) = self.file_tools {
            let list_line = line_of(&tools);
            for tool in tools.value {
                let name = &tool.value;
                if name.is_empty() || name.chars().any(|c| c.is_whitespace() || c.is_control()) {
                    return Err(ConfigError::at(
                        line_of(&tool).or(list_line),
                        format!(
                            "file_tools item '{name}' is no tool name; write the name the agent \
                             uses, such as 'Write'"
                        ),
                    ));
                }
                config.file_tools.push(tool.value);
            }
        }
        Ok(config)
    }
}

/// Why `url` is no absolute `http(s)` URL with a host, if it is not.
fn check_url(url: &str) -> Result<(), &'static str> {
    let rest = url
        .strip_prefix("https://")
        .or_else(|| url.strip_prefix("http://"))
        .ok_or("is not http:// or https://")?;
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("has a space or a control character");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or_default();
    let host = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let host = match host.strip_prefix('[') {
        Some(v6) => v6.split_once(']').map(|(h, _)| h).unwrap_or_default(),
        None => host.split(':').next().unwrap_or_default(),
    };
    if host.is_empty() {
        return Err("has no host");
    }
    Ok(())
}

/// The text of the configuration file, `None` when there is none (rule 3).
fn read_config(path: &Path) -> Result<Option<String>, ConfigError> {
    let refuse = |why: String| ConfigError::at(None, why);
    let file = match fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
    {
        Ok(file) => file,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return Err(refuse(
                "is a symbolic link, which hookvisor does not follow in the workspace; make it \
                 a regular file"
                    .to_owned(),
            ));
        }
        Err(e) => return Err(refuse(format!("cannot open: {e}; check its permissions"))),
    };
    let meta = file
        .metadata()
        .map_err(|e| refuse(format!("cannot read: {e}")))?;
    if !meta.is_file() {
        return Err(refuse(
            "is not a regular file; make it a YAML file (or remove it)".to_owned(),
        ));
    }
    let mut bytes = Vec::new();
    file.take(MAX_CONFIG_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| refuse(format!("cannot read: {e}")))?;
    if bytes.len() as u64 > MAX_CONFIG_BYTES {
        return Err(refuse(format!(
            "is larger than {} KiB; a configuration file is a few lines",
            MAX_CONFIG_BYTES / 1024
        )));
    }
    let text = String::from_utf8(bytes)
        .map_err(|_| refuse("is not UTF-8; save it as UTF-8".to_owned()))?;
    if text.contains('\r') {
        return Err(refuse(format!(
            "CRLF line endings; run `sed -i 's/\\r$//' {}`",
            path.display()
        )));
    }
    Ok(Some(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> ConfigError {
        Config::parse(text).expect_err(text)
    }

    #[test]
    fn every_key_read() {
        let config = Config::parse(
            "# settings\nmax_retries: 5\nsources: [discobot, iteratr]\n\
             disable_global_hooks: true\ncallback:\n  port: 8765\n  public_url: \
             https://h.example.com/cb\nfile_tools:\n  - Write\n  - mcp__fs__write\n",
        )
        .unwrap();
        assert_eq!(
            config,
            Config {
                max_retries: Some(5),
                sources: Sources::Only(vec![Source::Discobot, Source::Iteratr]),
                disable_global_hooks: true,
                callback: Callback {
                    port: Some(8765),
                    public_url: Some("https://h.example.com/cb".into()),
                },
                file_tools: vec!["Write".into(), "mcp__fs__write".into()],
            }
        );
        assert_eq!(Config::parse("").unwrap(), Config::default());
        assert_eq!(
            Config::parse("# nothing\n---\n").unwrap(),
            Config::default()
        );
        assert_eq!(
            Config::parse("sources: auto\n").unwrap().sources,
            Sources::Auto
        );
        assert_eq!(
            Config::parse("callback: {port: 0}\n")
                .unwrap()
                .callback
                .port,
            Some(0)
        );
    }

    #[test]
    fn every_error_names_its_line_and_the_fix() {
        let table: [(&str, usize, &str); 14] = [
            ("max_retries: 3\nretries: 2\n", 2, "unknown field `retries`"),
            (
                "max_retries: lots\n",
                1,
                "max_retries: 'lots' is not a whole number",
            ),
            ("\nmax_retries: -1\n", 2, "max_retries -1 is out of range"),
            ("disable_global_hooks: 3\n", 1, "'3' is not true or false"),
            (
                "disable_global_hooks: \"true\"\n",
                1,
                "disable_global_hooks: '\"true\"' is not true or false",
            ),
            (
                "max_retries: \"5\"\n",
                1,
                "max_retries: '\"5\"' is not a whole number",
            ),
            ("sources: all\n", 1, "sources 'all' is neither 'auto'"),
            (
                "sources:\n  - discobot\n  - iteratr\n  - cursor\n",
                4,
                "unknown source 'cursor'",
            ),
            (
                "callback:\n  port: 70000\n",
                2,
                "callback port 70000 is out of range",
            ),
            ("callback:\n  port: -1\n", 2, "use 1 to 65535, or 0"),
            (
                "callback:\n  public_url: ftp://x\n",
                2,
                "is not http:// or https://",
            ),
            ("callback: {public_url: 'https://'}\n", 1, "has no host"),
            ("callback:\n  host: x\n", 2, "unknown field `host`"),
            ("file_tools: ['']\n", 1, "no tool name"),
        ];
        for (text, line, reason) in table {
            let e = error(text);
            assert_eq!(e.line, Some(line), "{text:?}: {e:?}");
            assert!(e.message.contains(reason), "{text:?}: {e} lacks {reason:?}");
            assert!(e.message.contains("; "), "{text:?}: {e} says no fix");
        }
        let e = error("max_retries: 1\nmax_retries: 2\n");
        assert_eq!(
            (e.line, e.message.as_str()),
            (Some(2), "'max_retries' is given twice; keep one")
        );
        let e = error("max_retries: &x 1\n");
        assert_eq!(
            (e.line, e.message.as_str()),
            (
                Some(1),
                "anchors and aliases are not read; write each value out"
            )
        );
        let e = error("[1, 2]\n");
        assert!(
            e.message.starts_with("the file is not a mapping of keys"),
            "{e}"
        );
        let e = error("sources: [discobot\n");
        assert!(e.message.contains("fix the YAML here"), "{e}");
    }

    #[test]
    fn max_retries_flag_beats_file_beats_default() {
        let file = Config::parse("max_retries: 7\n").unwrap();
        assert_eq!(file.max_retries_or(Some(1)), 1);
        assert_eq!(file.max_retries_or(None), 7);
        assert_eq!(Config::default().max_retries_or(None), DEFAULT_MAX_RETRIES);
    }

    #[test]
    fn sources_and_disable_global_hooks_decide_what_is_read() {
        let auto = Config::default();
        assert!(Source::ALL.iter().all(|s| auto.reads(*s)));
        let off = Config::parse("disable_global_hooks: true\n").unwrap();
        assert!(off.reads(Source::Discobot) && !off.reads(Source::Global));
        let only = Config::parse("sources: [global]\n").unwrap();
        assert!(!only.reads(Source::Discobot) && only.reads(Source::Global));
        let both = Config::parse("sources: [global]\ndisable_global_hooks: true\n").unwrap();
        assert!(!both.reads(Source::Global));
        assert!(!Config::fallback().reads(Source::Global));
    }

    #[test]
    fn the_file_is_never_followed_or_waited_on() {
        use std::os::unix::fs::symlink;
        use std::sync::mpsc;
        use std::time::Duration;

        let ws = tempfile::tempdir().unwrap();
        fs::create_dir_all(ws.path().join(".discobot")).unwrap();
        assert_eq!(Config::load(ws.path()), Ok(None));
        let path = Config::path(ws.path());
        let elsewhere = ws.path().join("real.yml");
        fs::write(&elsewhere, "max_retries: 1\n").unwrap();
        symlink(&elsewhere, &path).unwrap();
        let e = Config::load(ws.path()).unwrap_err();
        assert!(e.message.contains("symbolic link"), "{e}");

        fs::remove_file(&path).unwrap();
        let mode = nix::sys::stat::Mode::from_bits_truncate(0o644);
        nix::unistd::mkfifo(&path, mode).unwrap();
        let dir = ws.path().to_owned();
        let (done, finished) = mpsc::channel();
        std::thread::spawn(move || done.send(Config::load(&dir)).unwrap());
        let got = finished
            .recv_timeout(Duration::from_secs(10))
            .expect("reading the configuration blocked on a FIFO");
        assert!(got.unwrap_err().message.contains("not a regular file"));

        fs::remove_file(&path).unwrap();
        fs::write(&path, "max_retries: 2\r\n").unwrap();
        assert!(
            Config::load(ws.path())
                .unwrap_err()
                .message
                .contains("CRLF")
        );
        fs::write(&path, "max_retries: 2\n").unwrap();
        assert_eq!(
            Config::load(ws.path()).unwrap().unwrap().max_retries,
            Some(2)
        );
    }
}

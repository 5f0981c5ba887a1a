//! Turning the fields of a hook's front matter into a [`Hook`]: the values each field takes,
//! and whether two readings of a field configure the hook alike.

use std::path::Path;
use std::time::Duration;

use crate::event::HookKind;
use crate::event::{
    Command, DEFAULT_EVENT_RETRIES, Event, EventSpec, HookAction, PipeOutput, ToolMatcher,
};
use crate::frontmatter::{FrontMatter, Note, Other, WORD_FIELDS};
use crate::git_action::{GitCommit, GitPush};
use crate::hook::{Hook, Origin, ProblemKind, RunAs};
use crate::pattern::Pattern;
use crate::policy::{BlockOn, OnFailure, Phase, ReasonFrom, UnknownWord};
use crate::spawn::{DEFAULT_SPAWN_TIMEOUT, Spawn};
use crate::template::{ShellTemplate, references};
use crate::webhook::Webhook;
use crate::when::Condition;

/// The most `retries` a session hook may ask for.
const MAX_RETRIES: u32 = 100;

/// The warning for a field read otherwise than another reader would (front matter rule 7), or
/// `None` when both readings configure the hook alike (`notify_llm: False` is `false` either
/// way) or the value is a problem already reported.
pub(super) fn disagreement(note: Note) -> Option<ProblemKind> {
    let Note {
        key,
        line,
        used,
        other,
    } = note;
    match other {
        Other::Discobot(discobot) => Some(ProblemKind::DiscobotReadsOtherwise {
            line,
            key: key.to_owned(),
            used,
            discobot,
        }),
        Other::Yaml(yaml) => {
            let meaning = meaning(key, &used)?;
            if yaml.as_deref().and_then(|y| self::meaning(key, y)) == Some(meaning) {
                return None;
            }
            Some(ProblemKind::YamlReadsOtherwise {
                line,
                key: key.to_owned(),
                used,
                yaml,
            })
        }
    }
}

/// What a field's value configures, to compare two readings of it; `None` for a value that is
/// a problem (or, for text, empty).
fn meaning(key: &str, value: &str) -> Option<String> {
    if !WORD_FIELDS.contains(&key) {
        let text = value.trim_matches([' ', '\t', '\n']);
        return (!text.is_empty()).then(|| text.to_owned());
    }
    match key {
        "type" => value
            .parse::<HookKind>()
            .ok()
            .map(|k| k.as_str().to_owned()),
        "run_as" => value.parse::<RunAs>().ok().map(|r| r.as_str().to_owned()),
        "blocking" | "notify_llm" | "await" => parse_bool(key, value).ok().map(|b| b.to_string()),
        "retry_delay" => parse_seconds(value).map(|t| t.as_secs().to_string()),
        "timeout" => parse_timeout(value).ok().map(|t| t.as_secs().to_string()),
        "retries" => parse_retries(value).ok().map(|r| r.to_string()),
        _ => Some(value.to_owned()),
    }
}

/// A hook as its front matter configures it.
pub(super) struct Loaded {
    pub(super) hook: Hook,
    /// Front matter `retries`, when given.
    pub(super) retries: Option<u32>,
}

/// The fields of the event model (docs/EVENTS.md §1.3, §1.2) that the phase-1 runners do not honour:
/// a hook that sets one is an event hook only.
pub(super) const EVENT_FIELDS: [&str; 14] = [
    "stdin",
    "tool",
    "when",
    "phase",
    "await",
    "block_on",
    "on_failure",
    "retry_delay",
    "pipe_output",
    "reason_from",
    "action",
    "run",
    "argv",
    "env",
];

/// The front matter being turned into a hook, with the lookups every field needs.
#[derive(Clone, Copy)]
struct Front<'a>(&'a FrontMatter);

impl<'a> Front<'a> {
    /// The 1-based line of `key`; a key in a flow mapping has no line of its own, so the
    /// block's first field line stands in.
    fn line(self, key: &str) -> usize {
        let lines = &self.0.lines;
        lines
            .get(key)
            .copied()
            .unwrap_or_else(|| lines.values().copied().min().unwrap_or(1))
    }

    /// Whether `key` is given at all.
    fn has(self, key: &str) -> bool {
        self.0.fields.contains_key(key)
    }

    /// A field taken as written; given without a value, a problem.
    fn field(self, key: &str) -> Result<Option<&'a str>, ProblemKind> {
        match self.0.fields.get(key).map(String::as_str) {
            Some("") => Err(ProblemKind::NoValue {
                key: key.to_owned(),
            }),
            other => Ok(other),
        }
    }

    /// The items of `key` when YAML read it as a list.
    fn list(self, key: &str) -> Option<&'a Vec<String>> {
        self.0.lists.get(key)
    }

    /// A free-text field, trimmed; empty means absent.
    fn text(self, key: &str) -> Option<&'a str> {
        self.0
            .fields
            .get(key)
            .map(|v| v.trim_matches([' ', '\t', '\n']))
            .filter(|v| !v.is_empty())
    }
}

/// Turns front matter into a hook, applying the defaults of docs/DESIGN.md and docs/EVENTS.md §1.3.
///
/// `name` and `description` are free text: trimmed, and empty means absent. Every other field
/// is taken as written (front matter rules 6 and 7) and must have a value when it is given: an
/// odd value is a problem, never a default, and only `run_as: root` gives root. `declarative`
/// says the file is a non-executable `.yml` of front matter only (docs/EVENTS.md §2.1), which must
/// say what to run; an executable script must not (§5 rule 9).
pub(super) fn hook_from_fields(
    id: String,
    path: &Path,
    front: &FrontMatter,
    declarative: bool,
    origin: Origin,
) -> Result<Loaded, ProblemKind> {
    let front = Front(front);
    let typed: Option<HookKind> = front.field("type")?.map(str::parse).transpose()?;
    let named = match front.field("event")? {
        Some(value) => Some(
            value
                .parse::<Event>()
                .map_err(|error| ProblemKind::InvalidEvent {
                    line: front.line("event"),
                    error,
                })?,
        ),
        None => None,
    };
    let event = match (typed, named) {
        (Some(kind), Some(event)) if Event::of_kind(kind) != event => {
            return Err(ProblemKind::TypeEventDisagree {
                line: front.line("event"),
                kind,
                event: event.to_string(),
            });
        }
        (_, Some(event)) => event,
        (Some(kind), None) => Event::of_kind(kind),
        (None, None) if declarative => return Err(ProblemKind::MissingEvent),
        (None, None) => return Err(ProblemKind::MissingType),
    };
    let kind = event.phase1_kind().unwrap_or(HookKind::Session);
    let run_as = match front.field("run_as")? {
        Some(value) => value.parse::<RunAs>()?,
        None => RunAs::User,
    };
    if origin == Origin::Global && run_as == RunAs::Root {
        return Err(ProblemKind::GlobalRunAsRoot {
            line: front.line("run_as"),
        });
    }
    let pattern = match front.field("pattern")? {
        Some(source) => Some(Pattern::new(source)?),
        // `type: file` keeps its rule; rule 8's `event: turn.end` may go without.
        None if typed == Some(HookKind::File) => return Err(ProblemKind::MissingPattern),
        None => None,
    };
    let timeout = match front.field("timeout")? {
        Some(value) => parse_timeout(value)?,
        None if event.phase1_kind().is_some() => kind.default_timeout(),
        None => DEFAULT_COMMAND_TIMEOUT,
    };
    let retries = front.field("retries")?.map(parse_retries).transpose()?;
    let blocking = front
        .field("blocking")?
        .map(|v| parse_bool("blocking", v))
        .transpose()?
        .unwrap_or(false);
    let spec = event_spec(event, kind, blocking, retries, front, declarative)?;
    // §1.3: a spawn waits an hour unless told otherwise, a webhook 30 s (an hour for its
    // callback).
    let timeout = match &spec.action {
        HookAction::Spawn(_) if !front.has("timeout") => DEFAULT_SPAWN_TIMEOUT,
        HookAction::Webhook(action) if !front.has("timeout") => action.default_timeout(),
        _ => timeout,
    };
    let phase1 = !declarative
        && spec.event.phase1_kind().is_some()
        && (spec.event != Event::TurnEnd || pattern.is_some())
        && !EVENT_FIELDS.iter().any(|key| front.has(key));
    // `blocking` is phase 1's "the agent waits for it" (docs/EVENTS.md §1.5: one word, one meaning);
    // on an event hook it read as AutoAgent's "may block" and failed open, so it is refused.
    if !phase1 && front.has("blocking") {
        return Err(ProblemKind::BlockingOutsideSession {
            line: front.line("blocking"),
            event: spec.event.to_string(),
        });
    }
    // Phase-1 hooks keep their rules; an event hook never runs as root (`run_as` is phase 1's).
    if !phase1 && run_as == RunAs::Root {
        return Err(ProblemKind::RootOutsideSession {
            line: front.line("run_as"),
            event: spec.event.to_string(),
        });
    }
    let hook = Hook {
        name: front.text("name").map_or_else(|| id.clone(), str::to_owned),
        id,
        kind,
        path: path.to_owned(),
        description: front.text("description").map(str::to_owned),
        run_as,
        blocking,
        pattern,
        notify_llm: front
            .field("notify_llm")?
            .map(|v| parse_bool("notify_llm", v))
            .transpose()?
            .unwrap_or(true),
        timeout,
        spec,
        origin,
        phase1,
    };
    Ok(Loaded { hook, retries })
}

/// The timeout of a command hook whose event has no phase-1 kind (docs/EVENTS.md §1.3).
const DEFAULT_COMMAND_TIMEOUT: Duration = Duration::from_secs(60);

/// The §1.3 fields of a hook of `event`, each checked, with their defaults.
fn event_spec(
    event: Event,
    kind: HookKind,
    blocking: bool,
    retries: Option<u32>,
    front: Front<'_>,
    declarative: bool,
) -> Result<EventSpec, ProblemKind> {
    let word = |key: &'static str, error: UnknownWord| ProblemKind::InvalidWord {
        line: front.line(key),
        error,
    };
    let invalid =
        |key: &'static str, value: &str, expected: &'static str| ProblemKind::InvalidValue {
            line: front.line(key),
            key,
            value: value.to_owned(),
            expected,
        };
    let mut spec = EventSpec::for_kind(kind);
    // `kind` is a stand-in for events without a phase-1 kind: the defaults follow the event.
    spec.retries = match event {
        Event::SessionStart => crate::policy::DEFAULT_RETRIES,
        _ => DEFAULT_EVENT_RETRIES,
    };
    spec.block_on = event.default_block_on();
    spec.event = event;
    spec.declared =
        declarative || front.has("event") || EVENT_FIELDS.iter().any(|key| front.has(key));
    // §1.3: `await` is phase 1's `blocking` for session hooks, true for the others.
    spec.await_ = match front.field("await")? {
        Some(value) => {
            parse_bool("await", value).map_err(|_| invalid("await", value, "true or false"))?
        }
        None if spec.event == Event::SessionStart => blocking,
        None => true,
    };
    if let Some(value) = front.field("tool")? {
        let matcher = ToolMatcher::parse(value).map_err(|error| ProblemKind::InvalidTool {
            line: front.line("tool"),
            error,
        })?;
        spec.tool = Some(matcher);
    }
    if let Some(value) = front.field("env")? {
        // An agent-pipelines import's scripts read its names too (`import` writes it).
        spec.env = match value {
            "pipelines" => crate::payload::EnvDialect::Pipelines,
            other => return Err(invalid("env", other, "pipelines, agent-pipelines' names")),
        };
    }
    if let Some(value) = front.field("when")? {
        let condition = Condition::parse(value).map_err(|error| ProblemKind::InvalidWhen {
            line: front.line("when"),
            error,
        })?;
        spec.when = Some(condition);
    }
    if let Some(value) = front.field("phase")? {
        spec.phase = value.parse::<Phase>().map_err(|e| word("phase", e))?;
    }
    if let Some(value) = front.field("block_on")? {
        spec.block_on = value.parse::<BlockOn>().map_err(|e| word("block_on", e))?;
    }
    if let Some(value) = front.field("on_failure")? {
        spec.on_failure =
            parse_on_failure(value, front.list("on_failure")).map_err(|e| word("on_failure", e))?;
    }
    if let Some(retries) = retries {
        spec.retries = retries;
    }
    if let Some(value) = front.field("retry_delay")? {
        spec.retry_delay = parse_seconds(value).ok_or_else(|| {
            invalid(
                "retry_delay",
                value,
                "a whole number of seconds such as 'retry_delay: 5'",
            )
        })?;
    }
    if let Some(value) = front.field("pipe_output")? {
        spec.pipe_output = match value {
            "true" => PipeOutput::Always,
            "false" => PipeOutput::Never,
            "failure" => PipeOutput::Failure,
            other => return Err(invalid("pipe_output", other, "true, false or failure")),
        };
    }
    if let Some(value) = front.field("reason_from")? {
        spec.reason_from = match value {
            "stdout" => ReasonFrom::Stdout,
            "stderr" => ReasonFrom::Stderr,
            other => return Err(invalid("reason_from", other, "stdout or stderr")),
        };
    }
    if let Some(value) = front.field("stdin")? {
        // An AutoAgent import's scripts read AutoAgent's hook input (`import` writes it).
        spec.stdin = match value.split_once(' ') {
            Some(("autoagent", event)) if !event.trim().is_empty() => {
                crate::payload::StdinDialect::AutoAgent {
                    event_name: event.trim().to_owned(),
                }
            }
            _ => {
                return Err(invalid(
                    "stdin",
                    value,
                    "'autoagent EVENT', AutoAgent's hook input for its event EVENT",
                ));
            }
        };
    }
    if let Some(value) = front.field("action")? {
        let line = front.line("action");
        match value {
            "command" => {}
            "git-commit" | "git-push" => {
                let field = |key: &str| front.0.fields.get(key).map(String::as_str);
                let action = match value {
                    "git-commit" => {
                        GitCommit::from_fields(field, declarative).map(HookAction::GitCommit)
                    }
                    _ => GitPush::from_fields(field, declarative).map(HookAction::GitPush),
                };
                spec.action = action.map_err(|error| ProblemKind::InvalidGitAction {
                    line: error
                        .key()
                        .map_or_else(|| front.line("action"), |key| front.line(key)),
                    error,
                })?;
                return Ok(spec);
            }
            "spawn" => {
                let field = |key: &str| front.0.fields.get(key).map(String::as_str);
                let listed = front.has("argv").then(|| {
                    argv(front.list("argv"), front.line("argv")).map_err(|problem| match problem {
                        ProblemKind::InvalidArgv { message, .. } => message,
                        other => other.to_string(),
                    })
                });
                let action = Spawn::from_fields(field, listed, declarative);
                spec.action = HookAction::Spawn(action.map_err(|error| {
                    ProblemKind::InvalidSpawnAction {
                        line: error
                            .key()
                            .map_or_else(|| front.line("action"), |key| front.line(key)),
                        error,
                    }
                })?);
                return Ok(spec);
            }
            "webhook" => {
                // `body:` alone (null) is a forgotten value, not an empty string body.
                if let Some(key) = crate::webhook::WEBHOOK_FIELDS
                    .into_iter()
                    .find(|key| front.0.fields.get(*key).is_some_and(String::is_empty))
                {
                    return Err(ProblemKind::NoValue {
                        key: key.to_owned(),
                    });
                }
                let field = |key: &str| front.0.fields.get(key).map(String::as_str);
                let action =
                    Webhook::from_fields(field, declarative).and_then(|w| match spec.on_failure {
                        OnFailure::Retry | OnFailure::RetryThenAbort => {
                            Err(crate::webhook::WebhookFieldError::RetriesItself)
                        }
                        _ => Ok(w),
                    });
                spec.action = HookAction::Webhook(action.map_err(|error| {
                    ProblemKind::InvalidWebhookAction {
                        line: error
                            .key()
                            .map_or_else(|| front.line("action"), |key| front.line(key)),
                        error,
                    }
                })?);
                return Ok(spec);
            }
            "prompt" | "agent" => {
                return Err(ProblemKind::ActionUnsupported {
                    line,
                    action: value.to_owned(),
                });
            }
            other => {
                return Err(ProblemKind::UnknownAction {
                    line,
                    value: other.to_owned(),
                });
            }
        }
    }
    spec.action = HookAction::Command(command(front, declarative)?);
    Ok(spec)
}

/// What a command hook runs: its script, or for a declarative hook its `run` or `argv`
/// (docs/EVENTS.md §1.2, §5 rule 9).
fn command(front: Front<'_>, declarative: bool) -> Result<Command, ProblemKind> {
    if !declarative {
        return match ["run", "argv"].into_iter().find(|key| front.has(key)) {
            Some(key) => Err(ProblemKind::ScriptWithCommand {
                line: front.line(key),
                key,
            }),
            None => Ok(Command::Script),
        };
    }
    match (front.field("run")?, front.has("argv")) {
        (Some(_), true) => Err(ProblemKind::RunAndArgv {
            line: front.line("run").max(front.line("argv")),
        }),
        (Some(run), false) => {
            if run.trim_matches([' ', '\t', '\n']).is_empty() {
                return Err(ProblemKind::NoValue { key: "run".into() });
            }
            ShellTemplate::parse(run)
                .map(Command::Run)
                .map_err(|error| ProblemKind::InvalidRun {
                    line: front.line("run"),
                    error,
                })
        }
        (None, true) => argv(front.list("argv"), front.line("argv")).map(Command::Argv),
        (None, false) => Err(ProblemKind::NoCommand),
    }
}

/// `argv`: a non-empty YAML list of strings, each `${` in it starting a template name.
fn argv(items: Option<&Vec<String>>, line: usize) -> Result<Vec<String>, ProblemKind> {
    let refuse = |message: String| ProblemKind::InvalidArgv { line, message };
    let Some(items) = items else {
        return Err(refuse(
            "give a list of strings, as in 'argv: [prettier, --check, \"${file}\"]'".to_owned(),
        ));
    };
    if items.first().is_none_or(String::is_empty) {
        return Err(refuse(
            "the list needs the program first, as in 'argv: [prettier, --check]'".to_owned(),
        ));
    }
    for (index, item) in items.iter().enumerate() {
        if let Some(column) = stray_placeholder(item) {
            return Err(refuse(format!(
                "element {index}, column {column}: '${{' starts no template name; write \
                 ${{name}} (letters, digits, _ and dots)"
            )));
        }
    }
    crate::template::check_argv(items).map_err(|error| refuse(error.to_string()))?;
    Ok(items.clone())
}

/// The 1-based column (in characters) of the first `${` in `text` that starts no reference
/// [`references`] reads, if any.
fn stray_placeholder(text: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(found) = text.get(from..).and_then(|rest| rest.find("${")) {
        let at = from + found;
        let rest = text.get(at..).unwrap_or_default();
        // A reference is `${name}`: it reads as one name exactly as long as its braces.
        let whole = rest
            .find('}')
            .and_then(|close| rest.get(..=close))
            .filter(|candidate| {
                matches!(references(candidate).as_slice(), [name] if name.len() + 3 == candidate.len())
            });
        match whole {
            Some(reference) => from = at + reference.len(),
            None => return Some(text.get(..at).unwrap_or_default().chars().count() + 1),
        }
    }
    None
}

/// `on_failure`: one word, or the list `[retry, abort]` (a YAML list, or written so on a
/// body the flat reader reads); `retry,abort` as plain text is no spelling of it.
fn parse_on_failure(value: &str, list: Option<&Vec<String>>) -> Result<OnFailure, UnknownWord> {
    let flat_list = value
        .strip_prefix('[')
        .and_then(|v| v.strip_suffix(']'))
        .map(|inner| {
            inner
                .split(',')
                .map(str::trim)
                .collect::<Vec<_>>()
                .join(",")
        });
    let words = match (list, flat_list) {
        (Some(items), _) => items.iter().map(|i| i.trim()).collect::<Vec<_>>().join(","),
        (None, Some(joined)) => joined,
        (None, None) if value.contains(',') => {
            return Err(UnknownWord {
                field: "on_failure",
                value: value.to_owned(),
                expected: "'continue', 'abort', 'retry' or [retry, abort]",
            });
        }
        (None, None) => value.to_owned(),
    };
    words.parse::<OnFailure>().map_err(|mut e| {
        e.value = value.to_owned();
        e
    })
}

/// Whole seconds, optionally with an `s`, `m` or `h` suffix; zero allowed.
fn parse_seconds(value: &str) -> Option<Duration> {
    let (digits, unit) = match value.char_indices().last() {
        Some((i, 's')) => (value.get(..i)?, 1),
        Some((i, 'm')) => (value.get(..i)?, 60),
        Some((i, 'h')) => (value.get(..i)?, 3600),
        _ => (value, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n = digits.parse::<u64>().ok()?;
    Some(Duration::from_secs(n.saturating_mul(unit)))
}

/// How many times a failed session hook is run again: a whole number from 0 to
/// [`MAX_RETRIES`], digits only.
fn parse_retries(value: &str) -> Result<u32, ProblemKind> {
    match value
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| value.parse::<u32>())
    {
        Some(Ok(n)) if n <= MAX_RETRIES => Ok(n),
        _ => Err(ProblemKind::InvalidRetries {
            value: value.to_owned(),
            max: MAX_RETRIES,
        }),
    }
}

/// `true|yes|1|on` and `false|no|0|off`, in any case.
fn parse_bool(key: &str, value: &str) -> Result<bool, ProblemKind> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" | "on" => Ok(true),
        "false" | "no" | "0" | "off" => Ok(false),
        _ => Err(ProblemKind::InvalidBool {
            key: key.to_owned(),
            value: value.to_owned(),
        }),
    }
}

/// The longest `timeout`: 30 days. A longer one is no wait anybody means, and one past the
/// clock's range would panic a deadline after an awaited webhook's message was already sent.
const MAX_TIMEOUT_SECS: u64 = 30 * 24 * 3600;

/// Seconds, optionally with an `s`, `m` or `h` suffix; must be positive and at most
/// [`MAX_TIMEOUT_SECS`].
fn parse_timeout(value: &str) -> Result<Duration, ProblemKind> {
    let (digits, unit) = match value.char_indices().last() {
        Some((i, 's')) => (&value[..i], 1),
        Some((i, 'm')) => (&value[..i], 60),
        Some((i, 'h')) => (&value[..i], 3600),
        _ => (value, 1),
    };
    // `parse` takes a leading `+`; a timeout is digits only.
    match digits
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| digits.parse::<u64>())
    {
        Some(Ok(n)) if n > 0 && n.saturating_mul(unit) <= MAX_TIMEOUT_SECS => {
            Ok(Duration::from_secs(n * unit))
        }
        _ => Err(ProblemKind::InvalidTimeout {
            value: value.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::discover::tests::Dir;
    use crate::event::ToolMatcher;

    /// Discovers one hook whose front matter (after `#!/bin/sh`, between `---` lines) is `body`:
    /// the hook, or the reason it is a problem.
    fn one_hook(body: &str) -> Result<Hook, String> {
        let dir = Dir::new();
        dir.write(
            "h.sh",
            &format!("#!/bin/sh\n---\n{body}\n---\nexit 0\n"),
            0o755,
        );
        let mut d = dir.discover();
        match (d.hooks.pop(), d.problems.pop()) {
            (Some(hook), None) => Ok(hook),
            (None, Some(problem)) => Err(problem.kind.to_string()),
            other => panic!("{body:?}: {other:?}"),
        }
    }

    /// Only `run_as: root` written as such gives root. Each other spelling that YAML or the flat
    /// reader could turn into "root" (padding, trailing text, lists, merge keys, aliases,
    /// escapes, block scalars, repeated keys) is a problem naming the fix, never root.
    #[test]
    fn run_as_is_root_only_when_written_root() {
        use RunAs::{Root, User};
        let table: &[(&str, Result<RunAs, &str>)] = &[
            ("run_as: root", Ok(Root)),
            ("run_as: \"root\"", Ok(Root)),
            ("run_as: 'root'  # needs apt", Ok(Root)),
            ("run_as: root\npattern: *.go", Ok(Root)),
            ("run_as: user", Ok(User)),
            ("name: x", Ok(User)),
            (
                "run_as: \" root\"",
                Err("invalid run_as ' root'; use 'root' or 'user'"),
            ),
            ("run_as: 'root '", Err("invalid run_as 'root '")),
            ("run_as: root\u{3000}", Err("invalid run_as 'root\u{3000}'")),
            ("run_as: Root", Err("invalid run_as 'Root'")),
            ("run_as: 'root'x", Err("text after the closing quote")),
            ("run_as: \"root\" x", Err("text after the closing quote")),
            (
                "run_as: 'root'x\npattern: *.go",
                Err("text after the closing quote"),
            ),
            ("run_as: [root]", Err("'run_as' is a list")),
            ("run_as:\n  - root", Err("'run_as' is a list")),
            ("<<: {run_as: root}", Err("merge key")),
            ("base: &b root\nrun_as: *b", Err("invalid run_as '*b'")),
            ("run_as: user\nrun_as: root", Err("'run_as' is given twice")),
            ("run_as: root\nrun_as: root", Err("'run_as' is given twice")),
            ("run_as: \"\\x72oot\"", Err("invalid run_as '\\x72oot'")),
            ("run_as: >-\n  root", Err("invalid run_as '>-'")),
            ("run_as: |\n  root", Err("invalid run_as '|'")),
            (
                "? run_as\n: root",
                Err("'run_as: VALUE' on a line of its own"),
            ),
            ("{run_as: root}", Err("'{run_as' is not a field name")),
            ("run_as: !custom root", Err("invalid run_as '!custom root'")),
            ("run_as: ~", Err("invalid run_as '~'")),
            ("run_as:", Err("'run_as' has no value")),
            ("name: \"x\nrun_as: root\"", Err("invalid run_as 'root\"'")),
        ];
        let mut wrong = Vec::new();
        let flow = one_hook("{type: session, run_as: root}").map(|h| h.run_as);
        if !flow
            .as_ref()
            .is_err_and(|r| r.contains("on a line of its own"))
        {
            wrong.push(format!("a flow mapping: got {flow:?}"));
        }
        for (field, expected) in table {
            let got = one_hook(&format!("type: session\n{field}")).map(|h| h.run_as);
            let ok = match (&got, expected) {
                (Ok(a), Ok(b)) => a == b,
                (Err(reason), Err(fragment)) => reason.contains(fragment),
                _ => false,
            };
            if !ok {
                wrong.push(format!("{field:?}: got {got:?}, want {expected:?}"));
            }
        }
        assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    }

    /// `notify_llm`, `blocking`, `type` and `timeout` take one word from their line: odd values
    /// (padding, lists, floats, empty, null, trailing text, repeats) are problems, not defaults.
    #[test]
    fn odd_values_of_the_other_word_fields_are_problems() {
        // (front matter after `type: file` + `pattern`, or a whole one, and the expected
        // (notify_llm, blocking) or a fragment of the reason)
        type Expected = Result<(bool, bool), &'static str>;
        let table: &[(&str, Expected)] = &[
            ("notify_llm: false", Ok((false, false))),
            ("notify_llm: No", Ok((false, false))),
            ("notify_llm: 0", Ok((false, false))),
            ("notify_llm: \"false\"", Ok((false, false))),
            ("notify_llm: true", Ok((true, false))),
            ("description: x", Ok((true, false))),
            ("blocking: yes", Ok((true, true))),
            ("notify_llm: \"false \"", Err("invalid notify_llm 'false '")),
            ("notify_llm: [false]", Err("'notify_llm' is a list")),
            ("notify_llm: 0.0", Err("invalid notify_llm '0.0'")),
            ("notify_llm: 00", Err("invalid notify_llm '00'")),
            ("notify_llm:", Err("'notify_llm' has no value")),
            ("notify_llm: ~", Err("invalid notify_llm '~'")),
            ("notify_llm: ''", Err("'notify_llm' has no value")),
            ("notify_llm: 'false'x", Err("text after the closing quote")),
            (
                "notify_llm: false\nnotify_llm: true",
                Err("'notify_llm' is given twice"),
            ),
            ("notify_llm: maybe", Err("invalid notify_llm 'maybe'")),
            ("blocking: 1.0", Err("invalid blocking '1.0'")),
            ("blocking:", Err("'blocking' has no value")),
            ("blocking: [true]", Err("'blocking' is a list")),
            (
                "blocking: true\nblocking: false",
                Err("'blocking' is given twice"),
            ),
            ("timeout: 1e3", Err("invalid timeout '1e3'")),
            ("timeout: [30]", Err("'timeout' is a list")),
            ("timeout:", Err("'timeout' has no value")),
            ("type: session", Err("'type' is given twice")),
            ("pattern: '*.rs'", Err("'pattern' is given twice")),
            ("pattern:", Err("'pattern' is given twice")),
        ];
        let mut wrong = Vec::new();
        for (field, expected) in table {
            let got = one_hook(&format!("type: file\npattern: '*.go'\n{field}"))
                .map(|h| (h.notify_llm, h.blocking));
            let ok = match (&got, expected) {
                (Ok(a), Ok(b)) => a == b,
                (Err(reason), Err(fragment)) => reason.contains(fragment),
                _ => false,
            };
            if !ok {
                wrong.push(format!("{field:?}: got {got:?}, want {expected:?}"));
            }
        }
        let whole: &[(&str, &str)] = &[
            ("type: [session]", "'type' is a list"),
            ("type: ' session'", "unknown type ' session'"),
            ("type: pre-commit\npattern:", "'pattern' has no value"),
            ("type: pre-commit\npattern: ''", "'pattern' has no value"),
        ];
        for (body, fragment) in whole {
            let got = one_hook(body).map(|h| h.id);
            if !got.as_ref().is_err_and(|r| r.contains(fragment)) {
                wrong.push(format!("{body:?}: got {got:?}, want {fragment:?}"));
            }
        }
        assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    }

    /// Discovers one hook whose front matter (after `#!/bin/sh`, between `---` lines) is `body`:
    /// the hook or the reason it is a problem, and the warnings.
    fn one_hook_warned(body: &str) -> (Result<Hook, String>, Vec<String>) {
        let dir = Dir::new();
        dir.write(
            "h.sh",
            &format!("#!/bin/sh\n---\n{body}\n---\nexit 0\n"),
            0o755,
        );
        let mut d = dir.discover();
        let warnings = d.warnings.iter().map(|w| w.kind.to_string()).collect();
        match (d.hooks.pop(), d.problems.pop()) {
            (Some(hook), None) => (Ok(hook), warnings),
            (None, Some(problem)) => (Err(problem.kind.to_string()), warnings),
            other => panic!("{body:?}: {other:?}"),
        }
    }

    /// Front matter rule 7: where YAML would read a discobot-era field otherwise than its line
    /// shows, the line wins and `check` says so; where both agree, or only the meaning of the
    /// spelling differs, nothing is said.
    #[test]
    fn readings_that_disagree_keep_the_line_and_warn() {
        // (front matter after `type: file`, name, pattern, a fragment of the one warning)
        let table: &[(&str, &str, &str, Option<&str>)] = &[
            (
                "name: 1.10\npattern: x",
                "1.10",
                "x",
                Some("YAML reads '1.1'"),
            ),
            (
                "name: True\npattern: x",
                "True",
                "x",
                Some("YAML reads 'true'"),
            ),
            (
                "name: null\npattern: x",
                "null",
                "x",
                Some("YAML reads no value"),
            ),
            ("name: '1.10'\npattern: x", "1.10", "x", None),
            ("name: Go fmt\npattern: '*.go'", "Go fmt", "*.go", None),
            ("pattern: 1.10", "h", "1.10", Some("as written, '1.10'")),
            (
                "pattern: '*.go', '*.ts'",
                "h",
                "*.go, *.ts",
                Some("read as the globs '*.go, *.ts'; discobot read"),
            ),
            ("pattern: x\nnotify_llm: False", "h", "x", None),
            ("pattern: x\ntimeout: 010", "h", "x", None),
            ("pattern: x\nnotify_llm: no", "h", "x", None),
        ];
        let mut wrong = Vec::new();
        for &(body, name, pattern, warning) in table {
            let (hook, warnings) = one_hook_warned(&format!("type: file\n{body}"));
            let got = hook.map(|h| (h.name, h.pattern.map(|p| p.as_str().to_owned())));
            if got != Ok((name.to_owned(), Some(pattern.to_owned()))) {
                wrong.push(format!("{body:?}: got {got:?}"));
            }
            let ok = match warning {
                None => warnings.is_empty(),
                Some(fragment) => warnings.len() == 1 && warnings[0].contains(fragment),
            };
            if !ok {
                wrong.push(format!("{body:?}: warnings {warnings:?}, want {warning:?}"));
            }
        }
        assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    }

    /// `retries` takes a whole number from 0 to 100, written on its own line; other hooks than
    /// session hooks ignore it, with a warning.
    #[test]
    fn retries_spellings() {
        let table: &[(&str, Result<Option<&str>, &str>)] = &[
            ("type: session\nretries: 0", Ok(None)),
            ("type: session\nretries: 3", Ok(None)),
            ("type: session\nretries: 100", Ok(None)),
            ("type: session\nretries: 101", Err("invalid retries '101'")),
            ("type: session\nretries: -1", Err("invalid retries '-1'")),
            ("type: session\nretries: 1.5", Err("invalid retries '1.5'")),
            (
                "type: session\nretries: three",
                Err("invalid retries 'three'"),
            ),
            ("type: session\nretries:", Err("'retries' has no value")),
            ("type: session\nretries: [1]", Err("'retries' is a list")),
            (
                "type: file\npattern: x\nretries: 2",
                Ok(Some("retries applies to session hooks only")),
            ),
        ];
        let mut wrong = Vec::new();
        for &(body, expected) in table {
            let (hook, warnings) = one_hook_warned(body);
            let ok = match (&hook, expected) {
                (Ok(_), Ok(None)) => warnings.is_empty(),
                (Ok(_), Ok(Some(fragment))) => {
                    warnings.len() == 1 && warnings[0].contains(fragment)
                }
                (Err(reason), Err(fragment)) => reason.contains(fragment),
                _ => false,
            };
            if !ok {
                wrong.push(format!(
                    "{body:?}: got {hook:?} {warnings:?}, want {expected:?}"
                ));
            }
        }
        assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    }

    #[test]
    fn bool_and_timeout_spellings() {
        for (v, b) in [
            ("TRUE", true),
            ("Yes", true),
            ("1", true),
            ("false", false),
            ("NO", false),
            ("0", false),
            ("Off", false),
        ] {
            assert_eq!(parse_bool("k", v), Ok(b), "{v}");
        }
        for (v, secs) in [
            ("30", 30),
            ("30s", 30),
            ("2m", 120),
            ("1h", 3600),
            ("720h", 2_592_000),
        ] {
            assert_eq!(parse_timeout(v), Ok(Duration::from_secs(secs)), "{v}");
        }
        // The review's F9: a huge timeout panicked an awaited webhook after it was sent.
        for bad in ["0", "-1", "m", "1.5", "ten", "721h", "9999999999999999999"] {
            assert!(parse_timeout(bad).is_err(), "{bad}");
        }
    }

    /// Discovers one file: the hook and whether phase 1 runs it; or its problem as `check`
    /// prints it, the directory left out.
    fn load(name: &str, text: &str, mode: u32) -> Result<(Hook, bool), String> {
        let dir = Dir::new();
        dir.write(name, text, mode);
        let d = dir.discover();
        if let Some(problem) = d.problems.first() {
            let prefix = format!("{}/", dir.0.path().display());
            return Err(problem.to_string().replacen(&prefix, "", 1));
        }
        match d.hooks.as_slice() {
            [hook] => Ok((hook.clone(), hook.phase1)),
            other => panic!("{text:?}: {other:?}"),
        }
    }

    /// A script `h.sh` whose front matter body (from line 3) is `front`.
    fn script(front: &str) -> Result<(Hook, bool), String> {
        load(
            "h.sh",
            &format!("#!/bin/sh\n---\n{front}\n---\nexit 0\n"),
            0o755,
        )
    }

    /// Every value of the new fields that is refused, with the exact line `check` prints.
    #[test]
    fn refused_values_of_the_event_fields_name_their_line() {
        let table: &[(&str, &str)] = &[
            (
                "event: turn_end",
                "h.sh:3: unknown event 'turn_end'; use one of session.start, turn.start, \
                 tool.before, tool.after, tool.failed, file.edited, turn.end, task.start, \
                 task.complete, team.idle, stage.complete, session.stop, session.end, error, \
                 commit.before, commit.after, or an agent's own event as claude.NAME, \
                 codex.NAME or gemini.NAME",
            ),
            (
                "name: x\nevent: cursor.Stop",
                "h.sh:4: unknown event 'cursor.Stop'; use one of session.start,",
            ),
            (
                "event: tool.before\nphase: during",
                "h.sh:4: invalid phase 'during'; use 'pre' or 'post'",
            ),
            (
                "event: tool.before\nawait: maybe",
                "h.sh:4: invalid await 'maybe'; use true or false",
            ),
            (
                "event: tool.before\nblock_on: Exit2",
                "h.sh:4: invalid block_on 'Exit2'; use 'failure', 'exit2' or 'never'",
            ),
            (
                "event: tool.before\non_failure: retry,abort",
                "h.sh:4: invalid on_failure 'retry,abort'; use 'continue', 'abort', 'retry' \
                 or [retry, abort]",
            ),
            (
                "event: tool.before\non_failure: [abort, retry]",
                "h.sh:4: invalid on_failure 'abort,retry'; use 'continue', 'abort', 'retry' \
                 or [retry, abort]",
            ),
            (
                "event: tool.before\non_failure: stop",
                "h.sh:4: invalid on_failure 'stop'; use 'continue', 'abort', 'retry' or \
                 [retry, abort]",
            ),
            (
                "event: tool.before\nretry_delay: soon",
                "h.sh:4: invalid retry_delay 'soon'; use a whole number of seconds such as \
                 'retry_delay: 5'",
            ),
            (
                "event: tool.before\nretry_delay: -1",
                "h.sh:4: invalid retry_delay '-1'; use a whole number of seconds such as \
                 'retry_delay: 5'",
            ),
            (
                "event: tool.before\nenv: bash",
                "h.sh:4: invalid env 'bash'; use pipelines, agent-pipelines' names",
            ),
            (
                "event: tool.before\npipe_output: yes",
                "h.sh:4: invalid pipe_output 'yes'; use true, false or failure",
            ),
            (
                "event: tool.before\nreason_from: stdin",
                "h.sh:4: invalid reason_from 'stdin'; use stdout or stderr",
            ),
            (
                "event: tool.before\nstdin: json",
                "h.sh:4: invalid stdin 'json'; use 'autoagent EVENT', AutoAgent's hook input \
                 for its event EVENT",
            ),
            (
                "event: tool.before\naction: webhook",
                "h.sh:4: action 'webhook' is for a declarative hook: put it in a \
                 non-executable .yml file",
            ),
            (
                "event: tool.before\naction: git-push",
                "h.sh:4: action 'git-push' is for a declarative hook: put it in a \
                 non-executable .yml file",
            ),
            (
                "event: tool.before\naction: prompt",
                "h.sh:4: action 'prompt' is unsupported: hookvisor runs no prompt or agent \
                 hooks; write the check as a command",
            ),
            (
                "event: tool.before\naction: agent",
                "h.sh:4: action 'agent' is unsupported:",
            ),
            (
                "event: tool.before\naction: email",
                "h.sh:4: unknown action 'email'; use command, webhook, spawn, git-commit or \
                 git-push",
            ),
            (
                "event: tool.before\nwhen: ${x} == (1",
                "h.sh:4: when: expected ')' at column 11",
            ),
            (
                "event: tool.before\nwhen: ${stage} = 'plan'",
                "h.sh:4: when: expected '==' at column 10",
            ),
            (
                "event: tool.before\nrun: echo hi",
                "h.sh:4: an executable script with 'run': a script runs itself; drop 'run', \
                 or make the file a non-executable .yml of front matter only",
            ),
            (
                "event: tool.before\nargv: [echo, hi]",
                "h.sh:4: an executable script with 'argv':",
            ),
            (
                "event: tool.before\ntool: 'Edit('",
                "h.sh:4: tool: 'Edit(' is no regex (",
            ),
            ("event: tool.before\ntool:", "h.sh:4: 'tool' has no value;"),
            ("event:", "h.sh:3: 'event' has no value;"),
            (
                "event: [turn.end]",
                "h.sh:3: front matter line 3: 'event' is a list",
            ),
            (
                "type: session\nevent: turn.end",
                "h.sh:4: 'type: session' is the event session.start, but 'event' says \
                 turn.end; drop 'type' or make them agree",
            ),
            (
                "event: commit.before\ntype: file",
                "h.sh:3: 'type: file' is the event turn.end, but 'event' says commit.before;",
            ),
            (
                "type: file\nevent: turn.end",
                "h.sh:3: a file hook needs a 'pattern'",
            ),
            (
                "event: tool.before\nrun_as: root",
                "h.sh:4: run_as: root is for phase-1 hooks (an executable script with 'type: \
                 session', 'type: file' or 'type: pre-commit' and no event fields); this \
                 tool.before hook runs as the user: drop 'run_as' or make it such a script",
            ),
            (
                "event: session.start\nrun_as: root\nawait: true",
                "h.sh:4: run_as: root is for phase-1 hooks (",
            ),
            (
                "event: session.start\nwhen: ${x} == 1\nrun_as: root",
                "h.sh:5: run_as: root is for phase-1 hooks (",
            ),
        ];
        let mut wrong = Vec::new();
        for (front, want) in table {
            match script(front) {
                Err(got) if got.starts_with(want) => {}
                other => wrong.push(format!("{front:?}: got {other:?}, want {want:?}")),
            }
        }
        assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    }

    /// The accepted values of the new fields, and what they set.
    #[test]
    fn accepted_values_of_the_event_fields() {
        let spec = |front: &str| match script(front) {
            Ok((hook, _)) => hook.spec,
            Err(e) => panic!("{front:?}: {e}"),
        };
        let s = spec("event: tool.before");
        assert_eq!(
            (s.phase, s.await_, s.block_on, s.on_failure),
            (Phase::Pre, true, BlockOn::Exit2, OnFailure::Continue)
        );
        assert_eq!((s.retries, s.retry_delay), (3, Duration::from_secs(5)));
        assert_eq!(
            (s.pipe_output, s.reason_from),
            (PipeOutput::Never, ReasonFrom::Stderr)
        );
        assert!(s.tool.is_none() && s.when.is_none() && s.declared);
        assert!(matches!(s.action, HookAction::Command(Command::Script)));

        assert_eq!(spec("event: tool.after\nphase: post").phase, Phase::Post);
        assert!(!spec("event: tool.after\nawait: false").await_);
        assert!(spec("event: tool.after\nawait: yes").await_);
        for (word, want) in [
            ("failure", BlockOn::Failure),
            ("exit2", BlockOn::Exit2),
            ("never", BlockOn::Never),
        ] {
            assert_eq!(
                spec(&format!("event: turn.start\nblock_on: {word}")).block_on,
                want
            );
        }
        assert_eq!(spec("event: turn.end").block_on, BlockOn::Failure);
        assert_eq!(spec("event: commit.before").block_on, BlockOn::Failure);
        for (text, want) in [
            ("continue", OnFailure::Continue),
            ("abort", OnFailure::Abort),
            ("retry", OnFailure::Retry),
            ("[retry, abort]", OnFailure::RetryThenAbort),
            ("\n  - retry\n  - abort", OnFailure::RetryThenAbort),
        ] {
            let got = spec(&format!("event: error\non_failure: {text}")).on_failure;
            assert_eq!(got, want, "{text:?}");
        }
        // A body only the flat reader reads (`*.go` unquoted) keeps `[retry, abort]`.
        let flat = spec("event: turn.end\npattern: *.go\non_failure: [retry, abort]");
        assert_eq!(flat.on_failure, OnFailure::RetryThenAbort);
        let retried = spec("event: error\non_failure: retry\nretries: 7\nretry_delay: 2m");
        assert_eq!(
            (retried.retries, retried.retry_delay),
            (7, Duration::from_secs(120))
        );
        assert_eq!(
            spec("event: error\nretry_delay: 0").retry_delay,
            Duration::ZERO
        );
        for (text, want) in [
            ("true", PipeOutput::Always),
            ("false", PipeOutput::Never),
            ("failure", PipeOutput::Failure),
        ] {
            assert_eq!(
                spec(&format!("event: error\npipe_output: {text}")).pipe_output,
                want
            );
        }
        assert_eq!(
            spec("event: error\nreason_from: stdout").reason_from,
            ReasonFrom::Stdout
        );
        let tool = spec("event: tool.before\ntool: Write|Edit").tool;
        assert_eq!(
            tool,
            Some(ToolMatcher::Names(vec!["Write".into(), "Edit".into()]))
        );
        assert_eq!(
            spec("event: tool.before\ntool: \"*\"").tool,
            Some(ToolMatcher::All)
        );
        assert_eq!(
            spec("event: tool.before\ntool: mcp__.*").tool,
            Some(ToolMatcher::parse("mcp__.*").unwrap())
        );
        let when = spec("event: stage.complete\nwhen: ${stage} == 'plan'").when;
        assert_eq!(
            when.map(|w| w.to_string()).as_deref(),
            Some("${stage} == 'plan'")
        );
        assert!(matches!(
            spec("event: error\naction: command").action,
            HookAction::Command(Command::Script)
        ));
    }

    /// Which hooks the phase-1 runners see: phase-1 files as before, and an `event:` that
    /// says the same as a `type:`; never a hook that asks for what phase 1 does not do.
    #[test]
    fn event_hooks_are_kept_from_the_phase1_runners() {
        // (front matter, phase 1 runs it, kind, event, timeout)
        let table: &[(&str, bool, HookKind, &str, u64)] = &[
            (
                "type: session",
                true,
                HookKind::Session,
                "session.start",
                300,
            ),
            (
                "type: file\npattern: '*.go'",
                true,
                HookKind::File,
                "turn.end",
                900,
            ),
            (
                "type: pre-commit",
                true,
                HookKind::PreCommit,
                "commit.before",
                300,
            ),
            (
                "event: session.start",
                true,
                HookKind::Session,
                "session.start",
                300,
            ),
            (
                "event: commit.before\ntype: pre-commit",
                true,
                HookKind::PreCommit,
                "commit.before",
                300,
            ),
            (
                "event: turn.end\npattern: '*.go'",
                true,
                HookKind::File,
                "turn.end",
                900,
            ),
            // Rule 8: without a pattern, a turn.end hook runs at every turn end.
            ("event: turn.end", false, HookKind::File, "turn.end", 900),
            (
                "type: session\nwhen: ${x} == 1",
                false,
                HookKind::Session,
                "session.start",
                300,
            ),
            (
                "type: pre-commit\nblock_on: never",
                false,
                HookKind::PreCommit,
                "commit.before",
                300,
            ),
            (
                "event: tool.before",
                false,
                HookKind::Session,
                "tool.before",
                60,
            ),
            (
                "event: claude.PreCompact\ntimeout: 5",
                false,
                HookKind::Session,
                "claude.PreCompact",
                5,
            ),
        ];
        let mut wrong = Vec::new();
        for &(front, phase1, kind, event, timeout) in table {
            let got = script(front)
                .map(|(h, p1)| (p1, h.kind, h.spec.event.to_string(), h.timeout.as_secs()));
            let want = (phase1, kind, event.to_owned(), timeout);
            if got.as_ref() != Ok(&want) {
                wrong.push(format!("{front:?}: got {got:?}, want {want:?}"));
            }
        }
        assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
        // Root stays where phase 1 had it (`event: session.start` is `type: session`), and
        // nowhere in the event model.
        assert!(script("type: file\npattern: x\nrun_as: root").is_ok());
        assert!(script("event: session.start\nrun_as: root").is_ok_and(|(_, phase1)| phase1));
        assert!(script("event: session.start\nwhen: ${x} == 1\nrun_as: root").is_err());
        assert!(script("event: session.start\nawait: false").is_ok());
        // A phase-1 file says nothing of the event model: `list` keeps its JSON.
        assert!(!script("type: session").unwrap().0.spec.declared);
        assert!(script("event: session.start").unwrap().0.spec.declared);
        // Phase 1's `blocking` is a session hook's `await`.
        assert!(!script("type: session").unwrap().0.spec.await_);
        assert!(
            script("type: session\nblocking: true")
                .unwrap()
                .0
                .spec
                .await_
        );
    }

    /// Declarative hooks (docs/EVENTS.md §2.1, §5 rule 9): a non-executable `.yml` of front
    /// matter only, running its `run:` or `argv:`.
    #[test]
    fn declarative_yml_hooks() {
        let (hook, phase1) = load(
            "Notify.Plan.yml",
            "---\nevent: stage.complete\nwhen: ${stage} == 'plan'\nrun: echo ${stage} done\n---\n\n",
            0o644,
        )
        .unwrap();
        assert!(!phase1 && hook.spec.declared);
        assert_eq!(hook.id, "notify-plan");
        match &hook.spec.action {
            HookAction::Command(Command::Run(t)) => {
                assert_eq!(t.script(), "echo \"$HOOKVISOR_STAGE\" done");
            }
            other => panic!("{other:?}"),
        }
        let (hook, _) = load(
            "fmt.yaml",
            "---\nevent: file.edited\nargv: [prettier, --write, \"${file}\"]\n---\n",
            0o600,
        )
        .unwrap();
        assert_eq!(hook.id, "fmt");
        match &hook.spec.action {
            HookAction::Command(Command::Argv(argv)) => {
                assert_eq!(argv, &["prettier", "--write", "${file}"]);
            }
            other => panic!("{other:?}"),
        }
        let (hook, phase1) = load(
            "commit.yml",
            "---\nevent: commit.before\nrun: make lint\n---\n",
            0o644,
        )
        .unwrap();
        assert!(
            !phase1,
            "the pre-commit runner runs scripts, not .yml files"
        );
        assert_eq!(hook.kind, HookKind::PreCommit);

        let table: &[(&str, &str, u32, &str)] = &[
            (
                "a.yml",
                "---\nevent: turn.end\n---\n",
                0o644,
                "a.yml:1: a declarative hook needs 'run: \"…\"' (sh -c) or 'argv: [program, …]' \
                 (no shell)",
            ),
            (
                "a.yml",
                "---\nevent: turn.end\nrun: make\nargv: [make]\n---\n",
                0o644,
                "a.yml:4: give 'run' or 'argv', not both",
            ),
            (
                "a.yml",
                "---\nrun: make\n---\n",
                0o644,
                "a.yml:1: missing 'event'; add one such as 'event: turn.end'",
            ),
            (
                "a.yml",
                "---\nevent: turn.end\nrun: make\n---\necho extra\n",
                0o644,
                "a.yml:5: a declarative .yml hook is front matter only; remove this text after \
                 the closing '---', or make the file an executable script",
            ),
            (
                "a.yml",
                "event: turn.end\nrun: make\n",
                0o644,
                "a.yml:1: no front matter;",
            ),
            (
                "a.yml",
                "---\nevent: turn.end\nargv: make lint\n---\n",
                0o644,
                "a.yml:3: argv: give a list of strings, as in 'argv: [prettier, --check, \
                 \"${file}\"]'",
            ),
            (
                "a.yml",
                "---\nevent: turn.end\nargv: []\n---\n",
                0o644,
                "a.yml:3: argv: the list needs the program first",
            ),
            (
                "a.yml",
                "---\nevent: turn.end\nargv: [grep, 'x${a}${b-c}']\n---\n",
                0o644,
                "a.yml:3: argv: element 1, column 6: '${' starts no template name; write \
                 ${name} (letters, digits, _ and dots)",
            ),
            (
                "a.yml",
                "---\nevent: turn.end\naction: spawn\nrun: x\n---\n",
                0o644,
                "a.yml:4: 'run' is no field of action 'spawn'",
            ),
            (
                "a.yml",
                "---\nevent: turn.end\nrun: |\n  echo ok\n  cat <<EOF\n  ${file}\n  EOF\n---\n",
                0o644,
                "a.yml:3: run: line 3, column 1: ${file} is in a here-document",
            ),
            // An executable .yml is a script, as in phase 1: it must not carry `run:`.
            (
                "a.yml",
                "#!/bin/sh\n---\nevent: turn.end\nrun: make\n---\n",
                0o755,
                "a.yml:4: an executable script with 'run':",
            ),
            // Other non-executable files keep phase 1's problem.
            (
                "a.txt",
                "---\nevent: turn.end\nrun: make\n---\n",
                0o644,
                "a.txt:1: no #! line;",
            ),
        ];
        let mut wrong = Vec::new();
        for (name, text, mode, want) in table {
            match load(name, text, *mode) {
                Err(got) if got.starts_with(want) => {}
                other => wrong.push(format!("{text:?}: got {other:?}, want {want:?}")),
            }
        }
        assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    }

    /// A script and a declarative hook of the same id are duplicates: neither runs.
    #[test]
    fn a_script_and_a_yml_of_one_id_are_duplicates() {
        let dir = Dir::new();
        dir.hook("lint.sh", "# type: file\n# pattern: x");
        dir.write("lint.yml", "---\nevent: turn.end\nrun: make\n---\n", 0o644);
        let d = dir.discover();
        assert!(d.hooks.is_empty(), "{d:?}");
        let reasons: Vec<String> = d.problems.iter().map(|p| p.kind.to_string()).collect();
        assert_eq!(
            reasons,
            [
                "hook id 'lint' is also the id of lint.yml; rename one of the files",
                "hook id 'lint' is also the id of lint.sh; rename one of the files",
            ]
        );
    }

    /// A declarative `run:` hook's rewritten script runs in a real sh, and a value that looks
    /// like shell stays text (docs/EVENTS.md §4.1 rule 1).
    #[test]
    fn a_declarative_run_script_runs_in_sh_with_values_as_text() {
        let (hook, _) = load(
            "say.yml",
            "---\nevent: turn.end\nrun: printf '%s|' ${file} \"${file}\"\n---\n",
            0o644,
        )
        .unwrap();
        let HookAction::Command(Command::Run(template)) = &hook.spec.action else {
            panic!("{:?}", hook.spec.action);
        };
        let out = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(template.script())
            .env("HOOKVISOR_FILE", "$(echo pwned) a;b")
            .output()
            .unwrap();
        assert!(out.status.success());
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "$(echo pwned) a;b|$(echo pwned) a;b|"
        );
    }
}

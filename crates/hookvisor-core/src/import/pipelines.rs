//! agent-pipelines' `hooks:` (docs/upstream/agent-pipelines-unified-hooks.md), read by the table of
//! docs/EVENTS.md §2.2 and §5 rules 7 and 14 from a pipeline's `pipeline.yaml`, a stage's
//! `loop.yaml` and the user's `~/.config/agent-pipelines/hooks.yaml` (under `loop --pipeline`:
//! that file and its current stage's, see `crate::agent_loop`'s rule 11).
//!
//! | agent-pipelines | event |
//! |---|---|
//! | `on_session_start` | `session.start` |
//! | `on_iteration_start` | `turn.start` |
//! | `on_iteration_complete` | `turn.end` |
//! | `on_stage_complete` | `stage.complete` |
//! | `on_session_complete` | `session.end` |
//! | `on_error` | `error` |
//!
//! Its three action types are hookvisor's, one to one: `shell` → a command's `run:`,
//! `webhook` → [`crate::webhook`], `spawn` → [`crate::spawn`] (`pipeline:`, `inputs:`). As in
//! its `hooks.sh`, an action never blocks the agent (`block_on: never`): it goes on or, with
//! `on_failure: abort`, aborts. Its defaults are written out: `await: false` (spawn `true`),
//! `timeout` 300 s (spawn, and a webhook waiting for its callback: 3600 s), `retries` 3 (spawn
//! 0) and `retry_delay` 5 s, used under `on_failure: retry`.
//!
//! Its variables (`${SESSION}`, `${CHANGED_FILES}`…, [`PIPELINES_NAMES`]) become template
//! references wherever it substitutes them (commands, urls, headers, bodies, inputs, `when:`),
//! so a value is never shell text nor condition text; a shell command's bare `${CHANGED_FILES}`
//! is one quoted argument. A shell hook's environment also has the names themselves
//! ([`EnvDialect::Pipelines`]), for the scripts that read `$ITERATION`. Another `${VAR}` is the
//! shell's in a command (`$VAR`), and a secret in a webhook (`secrets.env`, then the
//! environment), as there. Callbacks take an ephemeral port unless `callback_port` is given
//! (docs/EVENTS.md §1.5: 8765 for every session would collide).
//!
//! `disable_global_hooks: true` in `pipeline.yaml` or `loop.yaml` turns off both global kinds:
//! the user's `hooks.yaml` and hookvisor's global hooks (rule 7). What hookvisor cannot run as
//! written (a condition outside the `when:` grammar, a url outside the webhook policy) is a
//! problem of its line, never a hook that runs differently; what neither tool reads
//! (`on_timeout` of a webhook that waits for no callback, `retries` without `on_failure:
//! retry`, an unknown key) is a warning.
//!
//! [`PIPELINES_NAMES`]: crate::payload::PIPELINES_NAMES
//! [`EnvDialect::Pipelines`]: crate::payload::EnvDialect::Pipelines

#![forbid(unsafe_code)]

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value as Json};
use serde_saphyr::Spanned;

use super::command::{Placeholders, to_run, to_template};
use super::{
    ImportNote, Imported, ImportedHook, Unparsable, YamlEntry as Entry, YamlHooks, base_spec,
};
use crate::event::{Command, Event, HookAction, PipeOutput};
use crate::payload::{EnvDialect, PIPELINES_NAMES};
use crate::policy::{BlockOn, OnFailure, Phase, ReasonFrom};
use crate::spawn::Spawn;
use crate::template::ShellTemplate;
use crate::webhook::Webhook;
use crate::when::Condition;

/// Its placeholders: its variables, each as the template name it is.
const NAMES: Placeholders = Placeholders::Braced(&PIPELINES_NAMES);

/// Its timeout of a shell action and of a webhook's send.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);

/// Its timeout of a spawn and of a webhook's callback.
const LONG_TIMEOUT: Duration = Duration::from_secs(3600);

/// Its `retries` of a shell or webhook action (a spawn's is 0, rule 14).
const DEFAULT_RETRIES: u32 = 3;

/// Its `retry_delay`.
const DEFAULT_RETRY_DELAY: Duration = Duration::from_secs(5);

/// Its hook points and their events.
const POINTS: [(&str, Event); 6] = [
    ("on_session_start", Event::SessionStart),
    ("on_iteration_start", Event::TurnStart),
    ("on_iteration_complete", Event::TurnEnd),
    ("on_stage_complete", Event::StageComplete),
    ("on_session_complete", Event::SessionEnd),
    ("on_error", Event::Error),
];

/// The keys every action type has.
const COMMON_KEYS: [&str; 7] = [
    "type",
    "await",
    "when",
    "timeout",
    "on_failure",
    "retries",
    "retry_delay",
];

/// The file as YAML reads it: a pipeline's or stage's other keys (`name`, `stages`,
/// `termination`) are agent-pipelines' and ignored here.
#[derive(Deserialize)]
struct File {
    #[serde(default)]
    hooks: Option<YamlHooks>,
    #[serde(default)]
    disable_global_hooks: Option<Spanned<Json>>,
}

/// Reads one agent-pipelines file (the module documentation).
pub(crate) fn read(text: &str) -> Result<Imported, Unparsable> {
    let mut out = Imported::default();
    // `pipeline.yaml` is a common name (CI systems use it): a file without agent-pipelines'
    // top-level keys is some other tool's, left alone rather than judged by these rules.
    let ours = text.lines().any(|line| {
        ["hooks", "disable_global_hooks"].iter().any(|key| {
            line.strip_prefix(key)
                .is_some_and(|rest| rest.trim_start().starts_with(':'))
        })
    });
    if !ours {
        return Ok(out);
    }
    let file: File =
        serde_saphyr::from_str_with_options(text, crate::frontmatter::strict_options())
            .map_err(super::yaml_unparsable)?;
    if let Some(disable) = &file.disable_global_hooks {
        if !disable.value.is_boolean() {
            out.problems.push(ImportNote {
                line: super::saphyr_line(disable),
                message: format!(
                    "disable_global_hooks: {} is not true or false; global hooks stay off \
                     until it is one",
                    disable.value
                ),
            });
        }
        // A switch that is no boolean was meant to say something: global hooks stay off, as
        // with a broken hookvisor.yml (config rule 2).
        out.disable_global_hooks = disable.value != Json::Bool(false);
    }
    for (line, name, entries) in super::yaml_hook_lists(text, file.hooks) {
        let Some((_, event)) = POINTS.iter().find(|(n, _)| *n == name) else {
            out.problems.push(ImportNote {
                line,
                message: format!(
                    "unknown agent-pipelines hook point '{name}'; use one of {}",
                    POINTS.map(|(n, _)| n).join(", ")
                ),
            });
            continue;
        };
        for entry in entries {
            match entry_hook(&name, event, &entry, &mut out.warnings) {
                Ok(hook) => out.hooks.push(hook),
                Err(note) => out.problems.push(note),
            }
        }
    }
    Ok(out.in_line_order())
}

/// One action of the hook point `point`, or why it does not run.
fn entry_hook(
    point: &str,
    event: &Event,
    entry: &Spanned<Entry>,
    warnings: &mut Vec<ImportNote>,
) -> Result<ImportedHook, ImportNote> {
    let line = super::saphyr_line(entry);
    let fields = &entry.value;
    let at = |key: &str| fields.get(key).map_or(line, super::saphyr_line);
    let note = |line: usize, message: String| ImportNote { line, message };
    let text = |key: &str| -> Result<Option<&str>, ImportNote> {
        match fields.get(key).map(|v| &v.value) {
            None => Ok(None),
            Some(Json::String(s)) => Ok(Some(s)),
            Some(other) => Err(note(at(key), format!("{key}: {other} is not text"))),
        }
    };
    let kind = match text("type")? {
        Some(kind @ ("shell" | "webhook" | "spawn")) => kind,
        Some(other) => {
            return Err(note(
                at("type"),
                format!("unknown action type '{other}'; use shell, webhook or spawn"),
            ));
        }
        None => {
            return Err(note(
                line,
                "no 'type'; give one of shell, webhook, spawn (agent-pipelines runs no action \
                 without it)"
                    .into(),
            ));
        }
    };
    let own: &[&str] = match kind {
        "shell" => &["command"],
        "webhook" => &[
            "url",
            "method",
            "headers",
            "body",
            "callback_port",
            "on_timeout",
        ],
        _ => &["pipeline", "inputs", "on_timeout"],
    };
    for key in fields
        .keys()
        .filter(|k| !COMMON_KEYS.contains(&k.as_str()) && !own.contains(&k.as_str()))
    {
        warnings.push(note(
            at(key),
            format!(
                "unknown key '{key}' of a {kind} action is ignored, as agent-pipelines ignores \
                 it; known keys: {}, {}",
                own.join(", "),
                COMMON_KEYS.join(", ")
            ),
        ));
    }
    let flag = |key: &str, default: bool| match fields.get(key).map(|v| &v.value) {
        None => Ok(default),
        Some(Json::Bool(b)) => Ok(*b),
        Some(other) => Err(note(
            at(key),
            format!("{key}: {other} is not true or false"),
        )),
    };
    let whole = |key: &str| match fields.get(key).map(|v| &v.value) {
        None => Ok(None),
        Some(Json::Number(n)) if n.as_u64().is_some() => Ok(n.as_u64()),
        Some(other) => Err(note(
            at(key),
            format!("{key}: {other} is no whole number; write one such as '{key}: 3'"),
        )),
    };
    let await_ = flag("await", kind == "spawn")?;
    let on_failure = match text("on_failure")? {
        None | Some("continue") => OnFailure::Continue,
        Some("abort") => OnFailure::Abort,
        Some("retry") => OnFailure::Retry,
        Some(other) => {
            return Err(note(
                at("on_failure"),
                format!("on_failure: '{other}' is not abort, continue or retry"),
            ));
        }
    };
    let retries = match whole("retries")? {
        None if kind == "spawn" => 0,
        None => DEFAULT_RETRIES,
        Some(n) => u32::try_from(n)
            .ok()
            .filter(|n| *n <= 100)
            .ok_or_else(|| note(at("retries"), format!("retries: {n} is over 100")))?,
    };
    if fields.contains_key("retries") && on_failure != OnFailure::Retry {
        warnings.push(note(
            at("retries"),
            if kind == "webhook" {
                // agent-pipelines' webhook `retries` are re-sends; hookvisor's are fixed.
                "retries of a webhook: hookvisor re-sends a failed request 3 times (after 1, 2 \
                 and 4 s) whatever this says, and re-runs the whole webhook only under \
                 'on_failure: retry'; drop it, or add that"
            } else {
                "retries without 'on_failure: retry' re-runs nothing, in agent-pipelines as \
                 here; add 'on_failure: retry' or drop it"
            }
            .into(),
        ));
    }
    let retry_delay = whole("retry_delay")?.map_or(DEFAULT_RETRY_DELAY, Duration::from_secs);
    let timeout = match whole("timeout")? {
        Some(0) => return Err(note(at("timeout"), "timeout: 0 lets nothing run".into())),
        given => given.map(Duration::from_secs),
    };
    let on_timeout = text("on_timeout")?;
    if let Some(value) = on_timeout
        && !matches!(value, "abort" | "continue")
    {
        return Err(note(
            at("on_timeout"),
            format!("on_timeout: '{value}' is not abort or continue"),
        ));
    }
    let when = match text("when")? {
        None => None,
        Some(condition) => {
            let translated = to_template(condition, NAMES);
            for name in crate::template::references(&translated.text) {
                if !crate::payload::is_known_name(&name) {
                    warnings.push(note(
                        at("when"),
                        format!(
                            "when: ${{{name}}} is no agent-pipelines variable: hookvisor reads it \
                             from the event's data, and the hook fails when the event has none"
                        ),
                    ));
                }
            }
            Some(
                Condition::parse(&translated.text)
                    .map_err(|e| note(at("when"), format!("{e} of '{}'", translated.text)))?,
            )
        }
    };
    let (action, run, title, default_timeout, env) = match kind {
        "shell" => {
            let command = match text("command")? {
                Some(c) if !c.trim().is_empty() => c,
                _ => {
                    return Err(note(
                        at("command"),
                        "no 'command'; give one such as 'command: \"./scripts/run-tests.sh\"'"
                            .into(),
                    ));
                }
            };
            let translated = to_run(command, NAMES);
            super::refuse_single_quoted(&translated, at("command"))?;
            let template = ShellTemplate::parse(&translated.text)
                .map_err(|e| note(at("command"), format!("command: {e}")))?;
            (
                HookAction::Command(Command::Run(template)),
                Some(translated.text),
                super::title(command),
                DEFAULT_TIMEOUT,
                EnvDialect::Pipelines,
            )
        }
        "webhook" => {
            let mut given: Map<String, Json> = Map::new();
            for key in ["url", "method", "headers", "body", "callback_port"] {
                let Some(value) = fields.get(key) else {
                    continue;
                };
                let value = match (key, &value.value) {
                    ("url" | "method", Json::String(s)) => Json::String(template_text(s)),
                    ("callback_port", Json::Number(n)) => Json::String(n.to_string()),
                    ("headers" | "body", value) => Json::String(templates(value).to_string()),
                    (_, other) => Json::String(other.to_string()),
                };
                given.insert(key.to_owned(), value);
            }
            let load = |given: &Map<String, Json>| {
                Webhook::from_fields(|k| given.get(k).and_then(Json::as_str), true)
                    .map_err(|e| note(e.key().map_or(line, at), format!("webhook: {e}")))
            };
            let mut webhook = load(&given)?;
            let callback = webhook.awaits_callback();
            // agent-pipelines reads on_timeout only while it waits for a callback; so does
            // hookvisor, which refuses the key elsewhere: there it is said to be ignored.
            match on_timeout {
                Some(value) if callback => {
                    given.insert("on_timeout".into(), value.into());
                    webhook = load(&given)?;
                }
                Some(_) => warnings.push(note(
                    at("on_timeout"),
                    "on_timeout is ignored: this webhook waits for no callback (it sends no \
                     ${CALLBACK_URL}), in agent-pipelines as here; drop it"
                        .into(),
                )),
                None => {}
            }
            if await_ && !callback {
                warnings.push(note(
                    at("await"),
                    "await: true without ${CALLBACK_URL}: nobody learns where to answer, so \
                     hookvisor waits for the request only; name ${CALLBACK_URL} in the body to \
                     wait for an answer"
                        .into(),
                ));
            }
            let title = super::title(&format!("webhook: {}", text("url")?.unwrap_or("")));
            let default = if callback {
                LONG_TIMEOUT
            } else {
                DEFAULT_TIMEOUT
            };
            (
                HookAction::Webhook(webhook),
                None,
                title,
                default,
                EnvDialect::Canonical,
            )
        }
        _ => {
            let mut given: Map<String, Json> = Map::new();
            if let Some(pipeline) = text("pipeline")? {
                given.insert("pipeline".into(), pipeline.into());
            }
            if let Some(inputs) = fields.get("inputs") {
                given.insert("inputs".into(), templates(&inputs.value).to_string().into());
            }
            if let Some(on_timeout) = on_timeout {
                given.insert("on_timeout".into(), on_timeout.into());
            }
            let field = |k: &str| given.get(k).and_then(Json::as_str);
            let spawn = Spawn::from_fields(field, None, true)
                .map_err(|e| note(e.key().map_or(line, at), format!("spawn: {e}")))?;
            let title = super::title(&format!("spawn: {}", text("pipeline")?.unwrap_or("")));
            (
                HookAction::Spawn(spawn),
                None,
                title,
                LONG_TIMEOUT,
                EnvDialect::Canonical,
            )
        }
    };
    let mut used: Vec<(String, usize)> = match &action {
        HookAction::Command(Command::Run(script)) => script
            .references()
            .iter()
            .map(|n| (n.to_string(), at("command")))
            .collect(),
        HookAction::Webhook(webhook) => webhook
            .references()
            .into_iter()
            .map(|n| (n, line))
            .collect(),
        HookAction::Spawn(spawn) => spawn
            .references()
            .into_iter()
            .map(|n| (n, at("inputs")))
            .collect(),
        _ => Vec::new(),
    };
    if let Some(condition) = text("when")? {
        let translated = to_template(condition, NAMES).text;
        used.extend(
            crate::template::references(&translated)
                .into_iter()
                .map(|n| (n, at("when"))),
        );
    }
    for (name, line) in used {
        if let Some(why) = unset_here(point, event, kind, &name) {
            warnings.push(note(line, why));
        }
    }
    let mut spec = base_spec(event.clone(), action);
    spec.phase = Phase::Pre;
    spec.await_ = await_;
    spec.block_on = BlockOn::Never;
    spec.on_failure = on_failure;
    spec.retries = retries;
    spec.retry_delay = retry_delay;
    spec.pipe_output = PipeOutput::Never;
    spec.reason_from = ReasonFrom::Stderr;
    spec.env = env;
    spec.when = when;
    Ok(ImportedHook {
        source_event: point.to_owned(),
        line,
        title,
        spec,
        timeout: timeout.unwrap_or(default_timeout),
        pattern: None,
        run,
        // YAML: `hookvisor import --write` finds the entry by its line.
        entry: Vec::new(),
    })
}

/// Why `name` has no value where a `kind` action of `point` uses it, when agent-pipelines put
/// an empty value there: hookvisor fails such a run instead (§5 rule 20), so it is said at
/// load.
fn unset_here(point: &str, event: &Event, kind: &str, name: &str) -> Option<String> {
    let known = crate::payload::is_known_name(name);
    if known && !crate::payload::provides(&event.to_string(), name) {
        return Some(format!(
            "${{{}}} is not set for {point} hooks; its run fails: remove it or move the hook",
            name.to_ascii_uppercase()
        ));
    }
    let name = name.to_ascii_lowercase();
    let why = match name.as_str() {
        "decision" => "${LAST_DECISION} is hookvisor's ${decision}, which only 'phase: post' \
                       hooks see; an imported hook runs in the pre pass, so its run fails"
            .to_owned(),
        "error" if point != "on_error" => format!(
            "${{ERROR}} is set for on_error hooks only (agent-pipelines put an empty value in \
             {point}); hookvisor fails such a run instead: remove it or move the hook"
        ),
        "callback_url" if kind != "webhook" => "${CALLBACK_URL} is a webhook's own callback; a \
                                                 {kind} action has none, so its run fails"
            .replace("{kind}", kind),
        _ => return None,
    };
    Some(why)
}

/// A text agent-pipelines substitutes into, its variables made references.
fn template_text(text: &str) -> String {
    to_template(text, NAMES).text
}

/// `value` with every string in it made a template ([`template_text`]); keys stay literal.
fn templates(value: &Json) -> Json {
    match value {
        Json::String(s) => Json::String(template_text(s)),
        Json::Array(items) => Json::Array(items.iter().map(templates).collect()),
        Json::Object(map) => {
            Json::Object(map.iter().map(|(k, v)| (k.clone(), templates(v))).collect())
        }
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::import::tests::{golden, notes};

    fn read_ok(text: &str) -> Imported {
        read(text).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The golden text of `text`: every hook rendered, then the problems and warnings.
    fn translated(text: &str) -> String {
        let file = read_ok(text);
        let mut out = golden(&file);
        for problem in notes(&file.problems) {
            out += &format!("\nproblem {problem}");
        }
        for warning in notes(&file.warnings) {
            out += &format!("\nwarning {warning}");
        }
        if file.disable_global_hooks {
            out += "\ndisable_global_hooks";
        }
        out
    }

    /// Compares `text`'s translation with `want`, the golden `file`, printing the translation
    /// when they differ; with `HOOKVISOR_BLESS` set, writes it to the file instead.
    fn check(example: &str, text: &str, file: &str, want: &str) {
        let got = translated(text) + "\n";
        if std::env::var_os("HOOKVISOR_BLESS").is_some() {
            let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/src/import/golden/pipelines/");
            std::fs::write(format!("{dir}{file}"), &got).unwrap();
            return;
        }
        assert!(got == want, "{example}: got\n{got}\n---");
    }

    /// "Action Types", 1. Shell.
    const SHELL: &str = r#"hooks:
  on_iteration_complete:
    - type: shell
      command: "./scripts/backup-progress.sh ${PROGRESS}"

    - type: shell
      command: "./scripts/run-tests.sh"
      await: true  # Block until tests complete
      on_failure: abort  # abort | continue | retry
"#;

    /// "Action Types", 2. Webhook.
    const WEBHOOK: &str = r#"hooks:
  on_session_complete:
    # Fire-and-forget notification
    - type: webhook
      url: "${SLACK_WEBHOOK}"
      method: POST
      body:
        text: "Pipeline ${SESSION} completed after ${ITERATION} iterations"

  on_stage_complete:
    # Blocking approval
    - type: webhook
      url: "${SLACK_WEBHOOK}"
      method: POST
      body:
        text: "Plan ready for review"
        actions:
          - label: "Approve"
            callback: "${CALLBACK_URL}?action=approve"
          - label: "Reject"
            callback: "${CALLBACK_URL}?action=reject"
      await: true
      callback_port: 8765
      timeout: 86400  # 24 hours
      on_timeout: abort
      when: "${STAGE} == 'plan'"
"#;

    /// "Action Types", 3. Spawn.
    const SPAWN: &str = r#"hooks:
  on_iteration_complete:
    # Periodic code review
    - type: spawn
      pipeline: code-review
      await: true
      inputs:
        files_changed: "${CHANGED_FILES}"
        parent_session: "${SESSION}"
      when: "${ITERATION} % 10 == 0"

    # Fire-and-forget metrics collection
    - type: spawn
      pipeline: collect-metrics
      inputs:
        session: "${SESSION}"
        iteration: "${ITERATION}"
"#;

    /// "Conditions".
    const CONDITIONS: &str = r#"hooks:
  on_iteration_complete:
    # Only on iteration 1
    - type: shell
      command: "./scripts/first-iteration.sh"
      when: "${ITERATION} == 1"

    # Every 10 iterations
    - type: spawn
      pipeline: code-review
      when: "${ITERATION} % 10 == 0"

    # Only during work stage after iteration 5
    - type: webhook
      url: "${SLACK_WEBHOOK}"
      body: { text: "Progress update" }
      when: "${STAGE} == 'work' && ${ITERATION} > 5"
"#;

    /// "Configuration Locations", Per-Stage (loop.yaml).
    const LOOP_YAML: &str = r#"name: work
description: Implementation stage

termination:
  type: queue

hooks:
  on_iteration_complete:
    - type: shell
      command: "./scripts/backup.sh"
"#;

    /// "Configuration Locations", Per-Pipeline (pipeline.yaml).
    const PIPELINE_YAML: &str = r#"name: full-workflow
description: Complete workflow with approvals

stages:
  - name: plan
    loop: improve-plan
  - name: work
    loop: work

hooks:
  on_stage_complete:
    - type: webhook
      url: "${SLACK_WEBHOOK}"
      body: { text: "Stage ${STAGE} complete" }
      await: true
      when: "${STAGE} == 'plan'"
"#;

    /// "Configuration Locations", Global (~/.config/agent-pipelines/hooks.yaml).
    const GLOBAL: &str = r#"# Applied to all pipelines unless disabled
hooks:
  on_session_complete:
    - type: webhook
      url: "${SLACK_WEBHOOK}"
      body:
        text: "Pipeline ${SESSION} finished"

  on_error:
    - type: webhook
      url: "${PAGERDUTY_WEBHOOK}"
      body:
        text: "Pipeline ${SESSION} failed: ${ERROR}"
"#;

    /// "Disable Global Hooks".
    const DISABLE: &str = r#"# In loop.yaml or pipeline.yaml
disable_global_hooks: true
"#;

    /// "Common Patterns", 1. Notification on Complete.
    const PATTERN_1: &str = r#"hooks:
  on_session_complete:
    - type: webhook
      url: "${SLACK_WEBHOOK}"
      body:
        text: ":white_check_mark: ${SESSION} completed in ${ITERATION} iterations"
"#;

    /// "Common Patterns", 2. Human Approval Gate.
    const PATTERN_2: &str = include_str!("reference/pipelines.approval-gate.yaml");

    /// "Common Patterns", 3. Periodic Code Review.
    const PATTERN_3: &str = r#"hooks:
  on_iteration_complete:
    - type: spawn
      pipeline: code-review
      await: true
      inputs:
        files: "${CHANGED_FILES}"
      when: "${ITERATION} % 10 == 0"
"#;

    /// "Common Patterns", 4. Quality Gate with Fallback.
    const PATTERN_4: &str = r#"hooks:
  on_iteration_complete:
    - type: shell
      command: "./scripts/run-tests.sh"
      await: true
      on_failure: continue  # Don't abort on test failure

    - type: webhook
      url: "${SLACK_WEBHOOK}"
      body:
        text: "Tests failed - manual review needed"
        actions:
          - label: "Ignore and Continue"
            callback: "${CALLBACK_URL}?action=continue"
          - label: "Abort Pipeline"
            callback: "${CALLBACK_URL}?action=abort"
      await: true
      when: "${LAST_HOOK_STATUS} == 'failed'"
"#;

    /// "Common Patterns", 5. Backup + Metrics + Notification.
    const PATTERN_5: &str = r#"hooks:
  on_iteration_complete:
    # All fire-and-forget, run in parallel conceptually
    - type: shell
      command: "./scripts/backup-progress.sh"

    - type: shell
      command: "./scripts/collect-metrics.sh"

    - type: webhook
      url: "${METRICS_ENDPOINT}"
      body:
        session: "${SESSION}"
        iteration: "${ITERATION}"
        timestamp: "${TIMESTAMP}"
"#;

    /// "Common Patterns", 6. Spawn Review Before Final Stage.
    const PATTERN_6: &str = r#"hooks:
  on_stage_complete:
    - type: spawn
      pipeline: comprehensive-review
      await: true
      inputs:
        all_outputs: "${STAGE_OUTPUTS}"
      when: "${NEXT_STAGE} == 'deploy'"
"#;

    /// Every example of the reference document, each beside its golden translation in
    /// `golden/pipelines/` (rendered hooks, then problems, warnings and the global switch).
    #[test]
    fn every_example_of_the_reference_translates_as_its_golden_file() {
        // The file's name and its text, which include_str! needs as a literal.
        macro_rules! golden {
            ($file:literal) => {
                ($file, include_str!(concat!("golden/pipelines/", $file)))
            };
        }
        let examples: [(&str, &str, (&str, &str)); 14] = [
            ("shell", SHELL, golden!("shell.txt")),
            ("webhook", WEBHOOK, golden!("webhook.txt")),
            ("spawn", SPAWN, golden!("spawn.txt")),
            ("conditions", CONDITIONS, golden!("conditions.txt")),
            ("loop.yaml", LOOP_YAML, golden!("loop.txt")),
            ("pipeline.yaml", PIPELINE_YAML, golden!("pipeline.txt")),
            ("global", GLOBAL, golden!("global.txt")),
            ("disable", DISABLE, golden!("disable.txt")),
            ("pattern 1", PATTERN_1, golden!("pattern-1.txt")),
            ("pattern 2", PATTERN_2, golden!("pattern-2.txt")),
            ("pattern 3", PATTERN_3, golden!("pattern-3.txt")),
            ("pattern 4", PATTERN_4, golden!("pattern-4.txt")),
            ("pattern 5", PATTERN_5, golden!("pattern-5.txt")),
            ("pattern 6", PATTERN_6, golden!("pattern-6.txt")),
        ];
        for (example, text, (file, want)) in examples {
            check(example, text, file, want);
        }
    }

    /// Another tool's `pipeline.yaml` (no top-level `hooks:`) is left alone, even when these
    /// rules would refuse it (an anchor): it holds no hooks and no problem.
    #[test]
    fn another_tools_pipeline_yaml_is_left_alone() {
        let ci = "defaults: &defaults\n  image: rust\nbuild:\n  <<: *defaults\n  \
                  steps: [{run: cargo build}]\n";
        let file = read_ok(ci);
        assert!(file.hooks.is_empty() && file.problems.is_empty());
        assert!(read(&format!("{ci}hooks:\n  on_error: []\n")).is_err());
    }

    /// "Core Concept" is a sketch, not a file: `{hook_point}:` is a YAML mapping used as a key,
    /// so the file is unparsable, with its line.
    #[test]
    fn the_core_concept_sketch_is_unparsable_with_its_line() {
        let sketch = "hooks:\n  {hook_point}:\n    - type: shell | webhook | spawn\n      \
                      await: true | false  # default: false\n      when: \"condition\"    # \
                      optional\n";
        let err = read(sketch).expect_err("a mapping key is no hook point");
        assert_eq!(err.line, Some(2), "{err}");
        // Its values alone, under a real hook point, are problems of their lines.
        let values = sketch.replace("{hook_point}", "on_error");
        assert_eq!(
            notes(&read_ok(&values).problems),
            ["3: unknown action type 'shell | webhook | spawn'; use shell, webhook or spawn"]
        );
    }

    /// What hookvisor cannot run as written is a problem of its line, never dropped.
    #[test]
    fn entries_that_cannot_run_are_problems_of_their_lines() {
        let text = r#"hooks:
  on_iteration_complete:
    - type: shell
      when: "${ITERATION} %% 10 == 0"
      command: "./x.sh"
    - type: shell
    - type: webhook
      url: "https://hooks.example.com/x"
      method: FETCH
      on_timeout: continue
    - type: spawn
      pipeline: "../etc"
    - type: shell
      command: "echo `cat ${PROGRESS}`"
    - type: shell
      command: "./ok.sh"
      await: "yes"
    - command: "./untyped.sh"
  on_iteration_end:
    - type: shell
      command: "true"
disable_global_hooks: "yes"
"#;
        let file = read_ok(text);
        assert!(file.hooks.is_empty(), "{}", golden(&file));
        let problems = notes(&file.problems);
        let want = [
            "4: when: expected a value at column 15 of '${iteration} %% 10 == 0'",
            "6: no 'command'; give one such as 'command: \"./scripts/run-tests.sh\"'",
            "9: webhook: method: 'FETCH' is not GET, POST, PUT, PATCH or DELETE",
            "12: spawn: pipeline: '../etc' is no pipeline name; write the NAME of \
             .discobot/pipelines/NAME.yml (letters, digits, '.', '_', '-')",
            "14: command: ",
            "17: await: \"yes\" is not true or false",
            "18: no 'type'; give one of shell, webhook, spawn (agent-pipelines runs no action \
             without it)",
            "19: unknown agent-pipelines hook point 'on_iteration_end'; use one of \
             on_session_start, on_iteration_start, on_iteration_complete, on_stage_complete, \
             on_session_complete, on_error",
            "22: disable_global_hooks: \"yes\" is not true or false; global hooks stay off until \
             it is one",
        ];
        assert_eq!(problems.len(), want.len(), "{problems:#?}");
        for (got, want) in problems.iter().zip(want) {
            assert!(got.starts_with(want), "{got}\nwant {want}");
        }
        assert!(file.disable_global_hooks);
    }

    /// A value never becomes shell text: the names are references the `run:` parser quotes,
    /// the shell's own `${HOME}` stays the shell's, and the parsed script reads the variables;
    /// a name inside single quotes of a program that may run that text is refused.
    #[test]
    fn shell_names_become_quoted_references_and_others_stay_the_shells() {
        let text = "hooks:\n  on_error:\n    - type: shell\n      command: \
                    \"notify ${ERROR} \\\"${CHANGED_FILES}\\\" ${HOME}\"\n      \
                    colour: red\n    - type: shell\n      command: \"sh -c 'echo ${SESSION}'\"\n\
                    \x20   - type: shell\n      command: \"echo 'session ${SESSION}' >> log\"\n";
        let file = read_ok(text);
        let hook = &file.hooks[0];
        assert_eq!(
            hook.run.as_deref(),
            Some("notify ${error} \"${files}\" $HOME")
        );
        let HookAction::Command(Command::Run(script)) = &hook.spec.action else {
            panic!("{:?}", hook.spec.action);
        };
        assert_eq!(script.references(), ["error", "files"]);
        assert_eq!(hook.spec.env, EnvDialect::Pipelines);
        assert_eq!(file.hooks.len(), 2, "the sh -c entry is refused");
        assert_eq!(
            file.hooks[1].run.as_deref(),
            Some("echo 'session '${session}'' >> log")
        );
        let problems = notes(&file.problems);
        assert_eq!(problems.len(), 1, "{problems:#?}");
        assert!(
            problems[0].starts_with("7: the placeholder of 'session' is inside '…' of a command"),
            "{problems:#?}"
        );
        let warnings = notes(&file.warnings);
        assert!(
            warnings
                .iter()
                .any(|w| w.starts_with("5: unknown key 'colour'")),
            "{warnings:#?}"
        );
    }

    /// Retries: written out under `on_failure: retry` (spawn's default 0, rule 14), warned
    /// about without it.
    #[test]
    fn retries_follow_on_failure_and_the_spawn_default_is_zero() {
        let text = "hooks:\n  on_error:\n    - type: spawn\n      pipeline: fix\n      \
                    on_failure: retry\n    - type: shell\n      command: x\n      \
                    on_failure: retry\n      retry_delay: 2\n    - type: shell\n      \
                    command: y\n      retries: 1\n";
        let file = read_ok(text);
        let hooks = &file.hooks;
        assert_eq!((hooks[0].spec.retries, hooks[1].spec.retries), (0, 3));
        assert_eq!(hooks[1].spec.retry_delay, Duration::from_secs(2));
        assert!(render_has(&hooks[0], "retries: 0\nretry_delay: 5\n"));
        assert_eq!(
            notes(&file.warnings),
            [
                "12: retries without 'on_failure: retry' re-runs nothing, in agent-pipelines as \
              here; add 'on_failure: retry' or drop it"
            ]
        );
    }

    /// `on_timeout` is a callback's: taken on a webhook that sends `${CALLBACK_URL}`,
    /// warned about as ignored on one that waits for nothing.
    #[test]
    fn webhook_on_timeout_is_the_callbacks() {
        let text = "hooks:\n  on_stage_complete:\n    - type: webhook\n      \
                    url: https://hooks.example.com/a\n      body: {approve: \"${CALLBACK_URL}\"}\n      \
                    await: true\n      on_timeout: continue\n    - type: webhook\n      \
                    url: https://hooks.example.com/b\n      on_timeout: abort\n";
        let file = read_ok(text);
        let hooks = &file.hooks;
        assert_eq!(hooks.len(), 2, "{:?}", file.problems);
        assert!(render_has(&hooks[0], "on_timeout: \"continue\"\n"));
        assert_eq!(hooks[0].timeout, LONG_TIMEOUT);
        assert_eq!(hooks[1].timeout, DEFAULT_TIMEOUT);
        assert_eq!(
            notes(&file.warnings),
            [
                "10: on_timeout is ignored: this webhook waits for no callback (it sends no \
              ${CALLBACK_URL}), in agent-pipelines as here; drop it"
            ]
        );
    }

    /// A name agent-pipelines left empty where it is used runs here, and fails: said at load.
    #[test]
    fn names_the_event_never_sets_are_warned_about() {
        let text = "hooks:\n  on_iteration_complete:\n    - type: shell\n      \
                    command: \"./r.sh ${ERROR} ${ITERATION}\"\n      \
                    when: \"${LAST_DECISION} == 'stop'\"\n    - type: spawn\n      \
                    pipeline: review\n      inputs: {cb: \"${CALLBACK_URL}\"}\n";
        let file = read_ok(text);
        assert_eq!(file.hooks.len(), 2);
        let warnings = notes(&file.warnings);
        assert_eq!(warnings.len(), 3, "{warnings:#?}");
        assert!(warnings[0].starts_with("4: ${ERROR} is set for on_error hooks only"));
        assert!(warnings[1].starts_with("5: ${LAST_DECISION} is hookvisor's ${decision}"));
        assert!(warnings[2].starts_with("8: ${CALLBACK_URL} is a webhook's own callback; a spawn"));
    }

    /// What `render` writes is a declarative hook that reads back as the same hook: the
    /// event, the condition, the defaults and the exported names.
    #[test]
    fn a_rendered_shell_hook_reads_back_as_a_declarative_hook() {
        let hook = &read_ok(
            SPAWN
                .replace(
                    "type: spawn\n      pipeline: code-review",
                    "type: shell\n      command: ./review.sh ${CHANGED_FILES}",
                )
                .as_str(),
        )
        .hooks[0];
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("review.yml"),
            format!("---\n{}---\n", crate::import::render(hook)),
        )
        .unwrap();
        let found = crate::discover::discover(dir.path());
        assert!(found.problems.is_empty(), "{:?}", found.problems);
        let back = &found.hooks[0];
        assert_eq!(back.spec.env, EnvDialect::Pipelines);
        assert_eq!(back.spec.event, Event::TurnEnd);
        assert_eq!(
            back.spec.when.as_ref().map(ToString::to_string).as_deref(),
            Some("${iteration} % 10 == 0")
        );
        assert_eq!(
            (back.spec.await_, back.spec.block_on),
            (true, BlockOn::Never)
        );
        assert_eq!(back.timeout, DEFAULT_TIMEOUT);
    }

    fn render_has(hook: &ImportedHook, text: &str) -> bool {
        crate::import::render(hook).contains(text)
    }
}

//! One finished run judged by the table of docs/EVENTS.md §1.5 and §5 rules 1–3 (see the module
//! documentation of `decision` for the rules as implemented).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::message::{INLINE_MAX_BYTES, INLINE_MAX_LINES, TAIL_LINES, sanitize};
use crate::policy::{BlockOn, OnFailure, Phase, ReasonFrom};

/// The longest reason a judgment gives, in characters: Claude's cap on hook text (§1.6).
pub const DEFAULT_MAX_REASON: usize = 10_000;

/// Widest line kept when a reason has to shrink past its tail form, as in phase-1 re-prompts.
const SHRUNK_LINE_CHARS: usize = 200;

/// One finished run of a hook, filled by the caller; stdout and stderr are captured apart.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FinishedRun {
    /// The exit status as exec reports it (128+n for signal n); not read when `timed_out` is set.
    pub exit_code: i32,
    /// The timeout, when it stopped the run.
    pub timed_out: Option<Duration>,
    /// What the run wrote to stdout (the only place JSON is read).
    pub stdout: Vec<u8>,
    /// What the run wrote to stderr.
    pub stderr: Vec<u8>,
    /// The run's log, named when a long reason is shortened to its tail.
    pub log_path: Option<PathBuf>,
}

impl FinishedRun {
    fn failed(&self) -> bool {
        self.timed_out.is_some() || self.exit_code != 0
    }
}

/// How one hook's runs are judged: where it stands in its event and its §1.3 fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judge {
    /// The event is a gate (§1.1): its decision returns to the caller.
    pub gate: bool,
    /// The hook's `phase`.
    pub phase: Phase,
    /// The hook's `block_on`.
    pub block_on: BlockOn,
    /// The hook's `on_failure`.
    pub on_failure: OnFailure,
    /// The hook's `reason_from`.
    pub reason_from: ReasonFrom,
    /// The longest reason given, in characters (the agent's cap).
    pub max_reason: usize,
}

/// What a run means for its event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// A `pre` hook of a gate lets the event through (for this hook only).
    Allow,
    /// A notice or `post` hook ran to the end.
    Success,
    /// A `pre` hook of a gate refuses the event; the reason goes back to the agent.
    Block {
        /// Why, already shrunk.
        reason: String,
    },
    /// The event ends with `abort` (`on_failure: abort`, `continue: false`).
    Abort {
        /// Why, already shrunk.
        reason: String,
    },
    /// The run failed without blocking: recorded, and the event goes on.
    Failure {
        /// What it said, already shrunk.
        reason: String,
    },
}

/// The judgment of one run: its verdict, the context it adds and warnings for the log.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judgment {
    /// What the run means for the event.
    pub verdict: Verdict,
    /// `additionalContext` the hook gave, for the context buffer (§1.6), oldest first.
    pub context: Vec<String>,
    /// What was ignored and why, one line each, for the log.
    pub warnings: Vec<String>,
    retry: bool,
}

impl From<Verdict> for Judgment {
    /// A judgment of a verdict alone, for actions judged elsewhere (a webhook's callback).
    fn from(verdict: Verdict) -> Self {
        Judgment {
            verdict,
            context: Vec::new(),
            warnings: Vec::new(),
            retry: false,
        }
    }
}

impl Judgment {
    /// True when the run failed under `on_failure: retry` or `[retry, abort]`: the caller
    /// re-runs the hook if re-runs are left, and keeps this judgment otherwise (§5 rule 1).
    pub fn wants_retry(&self) -> bool {
        self.retry
    }
}

impl Judge {
    /// A judge with the §1.3 defaults for the rest: reason from stderr, [`DEFAULT_MAX_REASON`].
    pub fn new(gate: bool, phase: Phase, block_on: BlockOn, on_failure: OnFailure) -> Self {
        Judge {
            gate,
            phase,
            block_on,
            on_failure,
            reason_from: ReasonFrom::Stderr,
            max_reason: DEFAULT_MAX_REASON,
        }
    }

    /// Judges one finished run; pure, and total over every input.
    pub fn judge(&self, run: &FinishedRun) -> Judgment {
        let can_block = self.can_block();
        let object = one_object(&run.stdout);
        let mut judgment = Judgment::from(Verdict::Success);
        if run.failed() {
            if object.is_some() {
                judgment.warnings.push(
                    "stdout is a JSON object, but a run that fails decides nothing: ignored"
                        .to_owned(),
                );
            }
            self.judge_failure(run, false, &mut judgment);
        } else if !can_block {
            if object.is_some() {
                let why = if self.phase == Phase::Post {
                    "a post hook"
                } else {
                    "a hook of a notice"
                };
                judgment.warnings.push(format!(
                    "stdout is a JSON object, but {why} cannot decide: ignored"
                ));
            }
        } else {
            match object {
                Some(object) => self.judge_object(&object, run, &mut judgment),
                None => {
                    if run.stdout.trim_ascii_start().starts_with(b"{") {
                        judgment.warnings.push(
                            "stdout starts like JSON but is not exactly one JSON object: taken \
                             as plain output"
                                .to_owned(),
                        );
                    }
                    judgment.verdict = Verdict::Allow;
                }
            }
        }
        judgment
    }

    /// Judges a hook that did not run, most often because of the event's values: its `when`
    /// could not be evaluated, or its action cannot take them (a name the event lacks, a NUL
    /// byte, a spawn's inputs, a git ref), `run` holding the error as its output. A hook that
    /// can block blocks, whatever its `block_on` (which judges the hook's own exit), since
    /// those values are often the model's, and one of another type, or none, must not skip
    /// the gate; `on_failure: abort` aborts instead, which stops more. Any other hook fails
    /// and `on_failure` goes on from there. Never re-run: the same values fail the same way.
    pub fn judge_refused(&self, run: &FinishedRun) -> Judgment {
        let mut judgment = Judgment::from(Verdict::Success);
        self.judge_failure(run, true, &mut judgment);
        judgment
    }

    /// Whether this hook's verdict can block its event: a `pre` hook of a gate.
    fn can_block(&self) -> bool {
        self.gate && self.phase == Phase::Pre
    }

    /// A non-zero exit or a timeout: block if `block_on` covers it (a refused run: always),
    /// else `on_failure` (rule 1).
    fn judge_failure(&self, run: &FinishedRun, refused: bool, judgment: &mut Judgment) {
        let exit2 = run.timed_out.is_none() && run.exit_code == 2;
        let aborts = matches!(
            self.on_failure,
            OnFailure::Abort | OnFailure::RetryThenAbort
        );
        // A refused run blocks unless `on_failure` asks for an abort, which stops even more.
        let covered = self.can_block()
            && ((refused && !aborts)
                || match self.block_on {
                    BlockOn::Failure => true,
                    BlockOn::Exit2 => exit2,
                    BlockOn::Never => false,
                });
        let reason = self.failure_reason(run);
        judgment.retry = !refused
            && matches!(
                self.on_failure,
                OnFailure::Retry | OnFailure::RetryThenAbort
            );
        judgment.verdict = if covered {
            Verdict::Block { reason }
        } else if aborts {
            Verdict::Abort { reason }
        } else {
            Verdict::Failure { reason }
        };
    }

    /// Exit 0 with one JSON object from a hook that can block: rules J1–J3.
    fn judge_object(
        &self,
        object: &Map<String, Value>,
        run: &FinishedRun,
        judgment: &mut Judgment,
    ) {
        let nested = object.get("hookSpecificOutput").and_then(Value::as_object);
        for (at, value) in [
            ("additionalContext", object.get("additionalContext")),
            (
                "hookSpecificOutput.additionalContext",
                nested.and_then(|n| n.get("additionalContext")),
            ),
        ] {
            match value {
                None | Some(Value::Null) => {}
                Some(Value::String(text)) => judgment.context.push(sanitize(text)),
                Some(_) => judgment
                    .warnings
                    .push(format!("{at} is not a string: ignored")),
            }
        }
        let log = run.log_path.as_deref();
        if object.get("continue") == Some(&Value::Bool(false)) {
            let reason = text_field(object, "stopReason", &mut judgment.warnings)
                .unwrap_or("stopped by the hook (continue: false)");
            judgment.verdict = Verdict::Abort {
                reason: shrink(reason, log, self.max_reason),
            };
            return;
        }
        judgment.verdict = match object.get("decision") {
            None | Some(Value::Null) => Verdict::Allow,
            Some(Value::String(word)) => match word.as_str() {
                "block" | "deny" => {
                    let reason = text_field(object, "reason", &mut judgment.warnings);
                    let feedback = text_field(object, "feedback", &mut judgment.warnings);
                    let text = match (reason, feedback) {
                        (Some(r), Some(f)) => format!("{r}\n\n{f}"),
                        (Some(one), None) | (None, Some(one)) => one.to_owned(),
                        (None, None) => format!("decision '{word}' without a reason"),
                    };
                    Verdict::Block {
                        reason: shrink(&text, log, self.max_reason),
                    }
                }
                "approve" | "allow" => Verdict::Allow,
                other => {
                    judgment.warnings.push(format!(
                        "decision '{}' is none of block, deny, approve, allow: ignored",
                        sanitize(other).chars().take(40).collect::<String>()
                    ));
                    Verdict::Allow
                }
            },
            Some(_) => {
                judgment
                    .warnings
                    .push("decision is not a string: ignored".to_owned());
                Verdict::Allow
            }
        };
    }

    /// stderr, else stdout (or the other way round), else `exited N` / `timed out after Ns`.
    fn failure_reason(&self, run: &FinishedRun) -> String {
        let stderr = String::from_utf8_lossy(&run.stderr);
        let stdout = String::from_utf8_lossy(&run.stdout);
        let (first, second) = match self.reason_from {
            ReasonFrom::Stderr => (stderr, stdout),
            ReasonFrom::Stdout => (stdout, stderr),
        };
        let log = run.log_path.as_deref();
        for text in [&first, &second] {
            // Empty after sanitising: escape sequences alone say nothing.
            if !sanitize(text).trim().is_empty() {
                return shrink(text, log, self.max_reason);
            }
        }
        let fallback = match run.timed_out {
            Some(after) => format!("timed out after {}s", seconds(after)),
            None => format!("exited {}", run.exit_code),
        };
        shrink(&fallback, log, self.max_reason)
    }
}

/// stdout as exactly one JSON object, JSON white space around it allowed.
fn one_object(stdout: &[u8]) -> Option<Map<String, Value>> {
    // Most hooks print nothing or plain text: those are told apart without serde_json, whose
    // error path (the line and column of the error) starts memchr's CPU feature detection,
    // ten `cpuid`s that trap to the hypervisor in a VM, 52 µs of a `fire` around the hook
    // `true` (BENCHMARKS.md, case 7).
    let first = stdout
        .iter()
        .find(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'));
    if first != Some(&b'{') {
        return None;
    }
    // serde_json refuses trailing text (a second object included) and bounds its own nesting
    // depth, so no output can make this recurse without limit.
    match serde_json::from_slice::<Value>(stdout) {
        Ok(Value::Object(object)) => Some(object),
        _ => None,
    }
}

/// A string field of the decision object; present but not a string is warned and missing.
fn text_field<'a>(
    object: &'a Map<String, Value>,
    name: &str,
    warnings: &mut Vec<String>,
) -> Option<&'a str> {
    match object.get(name) {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) if text.trim().is_empty() => None,
        Some(Value::String(text)) => Some(text),
        Some(_) => {
            warnings.push(format!("{name} is not a string: ignored"));
            None
        }
    }
}

/// Seconds as exec's timeout note writes them: `30`, `0.3`.
fn seconds(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        d.as_secs().to_string()
    } else {
        d.as_secs_f64().to_string()
    }
}

/// A reason as the model reads it, shrunk like a phase-1 re-prompt (`message`): inlined when
/// short, else the last lines and the log's path; never more than `max` characters.
pub fn shrink(text: &str, log: Option<&Path>, max: usize) -> String {
    let clean = sanitize(text);
    let text = clean.trim();
    let lines: Vec<&str> = text.lines().collect();
    let inline = lines.len() <= INLINE_MAX_LINES && text.len() <= INLINE_MAX_BYTES;
    if inline && text.chars().count() <= max {
        return text.to_owned();
    }
    if !inline {
        let full = tail_form(&lines, TAIL_LINES, usize::MAX, log);
        if full.chars().count() <= max {
            return full;
        }
    }
    for count in (0..=TAIL_LINES.min(lines.len())).rev() {
        let shown = tail_form(&lines, count, SHRUNK_LINE_CHARS, log);
        if shown.chars().count() <= max {
            return shown;
        }
    }
    tail_form(&lines, 0, 0, log).chars().take(max).collect()
}

/// `(last N of M lines; full log: PATH)` and the last `count` lines, each cut to `width`.
fn tail_form(lines: &[&str], count: usize, width: usize, log: Option<&Path>) -> String {
    let count = count.min(lines.len());
    let mut text = format!("(last {count} of {} lines", lines.len());
    if let Some(log) = log {
        text.push_str("; full log: ");
        text.push_str(&sanitize(&log.to_string_lossy()));
    }
    text.push(')');
    for line in lines.iter().skip(lines.len() - count) {
        text.push('\n');
        if line.chars().count() > width {
            text.extend(line.chars().take(width));
            text.push('…');
        } else {
            text.push_str(line);
        }
    }
    text
}

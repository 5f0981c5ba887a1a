//! Who started an agent's turn: the memory behind the loop guard's trigger.
//!
//! The loop guard (see [`crate::fire::evaluate`], step 5) must know whether the turn that just ended
//! was started by the user or by one of our re-prompts. An agent's own flag cannot be trusted
//! for that: Gemini CLI sends `stop_hook_active: false` for a re-prompted turn in which the
//! model used a tool. So hookvisor keeps its own record, per agent session, in
//! `<state>/agent-turns.json`:
//!
//! 1. A *prompt event* (Claude Code's and Codex's `UserPromptSubmit`, Gemini CLI's
//!    `BeforeAgent`) is a user turn, unless its prompt holds the reason of the block we still
//!    have outstanding (Gemini CLI announces our re-prompt as a prompt too). A user prompt
//!    clears the outstanding block.
//! 2. Once a session has sent a prompt event, a stop is hook-triggered exactly when a block of
//!    ours is outstanding, whatever the agent's flag says.
//! 3. A session that never sent one (settings installed before hookvisor registered the prompt
//!    event) falls back on the flag: `stop_hook_active: true` is hook-triggered; so is a stop
//!    with a block outstanding and the same `prompt` field as the stop we blocked (Gemini CLI
//!    repeats the user's prompt in every `AfterAgent` of the turn). Anything else is a user
//!    turn, and clears the outstanding block.
//! 4. After the evaluation: a block makes it outstanding; a pass (or a failure that does not
//!    re-prompt) clears it; giving up leaves it, so further stops without a user prompt stay
//!    hook-triggered. A user prompt that arrived during the evaluation wins: the answer to a
//!    stop taken before it changes nothing.
//! 5. The outstanding block counts the blocks in a row since the user's turn; a hook-triggered
//!    stop reports that count as [`Stop::hook_turns`], a user one 0. The loop guard takes the
//!    lower of it and `status.json`'s count ([`EvalOptions::hook_turns`]): both files are in
//!    the state dir, which the agent can write, and a count raised in one of them alone does
//!    not end the guard early (an agent that rewrites both, or runs the adapter itself, can;
//!    no file of the agent's user holds against that agent).
//!
//! [`EvalOptions::hook_turns`]: crate::EvalOptions::hook_turns
//!
//! The file keeps the latest [`MAX_SESSIONS`] sessions. It is read only if it is a regular file
//! of at most [`MAX_TURN_LOG_BYTES`]; anything else is replaced, as if empty.

use std::collections::BTreeMap;
use std::fs::{self, File, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::context::Context;
use crate::state::{Durability, StateDir, write_atomic};

/// Who started the turn that just ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Trigger {
    /// A user message: the loop guard starts again.
    User,
    /// A re-prompt from a failing hook: the loop guard counts it.
    Hook,
    /// `hookvisor loop`: the loop has its own limits, so the guard neither counts the turn nor
    /// stops a re-prompt (docs/EVENTS.md §3.2).
    Loop,
}

impl Trigger {
    /// The trigger of an event's `trigger` word (`user`, `hook`, `loop`); another word is a
    /// user's, which only resets the guard.
    pub fn from_word(word: &str) -> Trigger {
        match word {
            "hook" => Trigger::Hook,
            "loop" => Trigger::Loop,
            _ => Trigger::User,
        }
    }

    /// The word of `${trigger}` and the event JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            Trigger::User => "user",
            Trigger::Hook => "hook",
            Trigger::Loop => "loop",
        }
    }
}

/// Sessions remembered; the least recently seen go first.
pub const MAX_SESSIONS: usize = 64;
/// Largest turn log read; a bigger one is replaced.
pub const MAX_TURN_LOG_BYTES: u64 = 1 << 20;

/// The record of agent turns of one state dir, `<state>/agent-turns.json`.
#[derive(Debug, Clone)]
pub struct TurnLog {
    path: PathBuf,
    /// The workspace recorded with every write, so `hookvisor status` finds the agent
    /// sessions of a workspace.
    workspace: Option<PathBuf>,
}

/// What a prompt event announced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Prompt {
    /// A user's prompt: the next stop is a user turn.
    User,
    /// Our own re-prompt, announced as a prompt: changes nothing.
    Reprompt,
}

/// A stop, as the turn log judged it; hand it back to [`TurnLog::answered`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stop {
    /// What started the turn that ended.
    pub trigger: Trigger,
    /// The user prompts seen when the stop was judged.
    prompts: u64,
    /// The stop's `prompt` field, hashed.
    prompt: Option<u64>,
    /// Hook-triggered turns in a row that this stop ends, by the turn log's count (rule 5).
    pub hook_turns: u32,
}

/// What hookvisor told the agent at a stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Answer<'a> {
    /// Blocked the stop with this reason (a re-prompt).
    Block(&'a str),
    /// Let the agent stop: nothing failed, or the failure does not re-prompt.
    Stop,
    /// Let the agent stop because the loop guard gave up.
    GaveUp,
}

/// Why the turn log could not be read or written; the adapter fails open or closed on it.
#[derive(Debug, thiserror::Error)]
#[error(
    "cannot {action} {}: {source}; make the state dir writable or pass --state-dir",
    path.display()
)]
pub struct TurnLogError {
    path: PathBuf,
    action: &'static str,
    source: io::Error,
}

/// One agent session's record.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Session {
    /// Whether the session has sent a prompt event (rule 2), else the fallback (rule 3).
    #[serde(default)]
    prompt_events: bool,
    /// User prompts seen.
    #[serde(default)]
    prompts: u64,
    /// Our block the agent has not yet answered with a user prompt.
    #[serde(default)]
    block: Option<Block>,
    /// When this session was last seen, in seconds since the epoch.
    #[serde(default)]
    seen: u64,
}

/// An outstanding block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
struct Block {
    /// The reason we sent, trimmed: a prompt that holds it is our re-prompt.
    reason: String,
    /// The blocked stop's `prompt` field, hashed (rule 3).
    prompt: Option<u64>,
    /// Blocks in a row since the user's turn, this one included (rule 5).
    #[serde(default)]
    reprompts: u32,
}

/// The file's contents.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Book {
    /// The workspace the sessions worked in.
    #[serde(default)]
    workspace: Option<PathBuf>,
    #[serde(default)]
    sessions: BTreeMap<String, Session>,
}

impl TurnLog {
    /// The turn log at `path`. Nothing is touched until the first call.
    pub fn new(path: impl Into<PathBuf>) -> TurnLog {
        TurnLog {
            path: path.into(),
            workspace: None,
        }
    }

    /// The turn log of a context, `<state>/agent-turns.json`, which records its workspace.
    pub fn for_context(ctx: &Context) -> TurnLog {
        TurnLog {
            workspace: Some(ctx.workspace.clone()),
            ..TurnLog::in_state_dir(&ctx.state_dir)
        }
    }

    /// The turn log of a state dir, to read.
    pub fn in_state_dir(state_dir: &Path) -> TurnLog {
        TurnLog::new(StateDir::new(state_dir).turn_log())
    }

    /// The workspace the last write recorded, if any; reads without locking.
    pub fn workspace(&self) -> Option<PathBuf> {
        self.read().ok().and_then(|book| book.workspace)
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Records a prompt event of `session` (rule 1) and says what it was.
    pub fn prompt(&self, session: &str, prompt: Option<&str>) -> Result<Prompt, TurnLogError> {
        self.update(session, |s| {
            s.prompt_events = true;
            let ours = match (&s.block, prompt) {
                (Some(block), Some(prompt)) => {
                    !block.reason.is_empty() && prompt.contains(block.reason.as_str())
                }
                _ => false,
            };
            if ours {
                return Prompt::Reprompt;
            }
            s.prompts = s.prompts.wrapping_add(1);
            s.block = None;
            Prompt::User
        })
    }

    /// Judges a stop of `session` from the record, the agent's `stop_hook_active` and its
    /// `prompt` field (rules 2 and 3).
    pub fn stop(
        &self,
        session: &str,
        stop_hook_active: Option<bool>,
        prompt: Option<&str>,
    ) -> Result<Stop, TurnLogError> {
        let prompt = prompt.map(hash);
        self.update(session, |s| {
            let hook = if s.prompt_events {
                s.block.is_some()
            } else {
                stop_hook_active == Some(true)
                    || s.block
                        .as_ref()
                        .is_some_and(|b| prompt.is_some() && b.prompt == prompt)
            };
            if !hook {
                s.block = None;
            }
            Stop {
                trigger: if hook { Trigger::Hook } else { Trigger::User },
                prompts: s.prompts,
                prompt,
                hook_turns: s.block.as_ref().map_or(0, |b| b.reprompts),
            }
        })
    }

    /// Records what hookvisor answered to `stop` (rule 4).
    pub fn answered(
        &self,
        session: &str,
        stop: &Stop,
        answer: Answer<'_>,
    ) -> Result<(), TurnLogError> {
        self.update(session, |s| {
            if s.prompts != stop.prompts {
                // A user prompt came in meanwhile: the agent is on a new turn.
                return;
            }
            match answer {
                Answer::Block(reason) => {
                    s.block = Some(Block {
                        reason: reason.trim().to_owned(),
                        prompt: stop.prompt,
                        reprompts: stop.hook_turns.saturating_add(1),
                    });
                }
                Answer::Stop => s.block = None,
                Answer::GaveUp => {}
            }
        })
    }

    /// Applies `f` to `session`'s record under the log's lock and writes the log back.
    fn update<T>(
        &self,
        session: &str,
        f: impl FnOnce(&mut Session) -> T,
    ) -> Result<T, TurnLogError> {
        let error = |action, source| TurnLogError {
            path: self.path.clone(),
            action,
            source,
        };
        let dir = match self.path.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        fs::create_dir_all(dir).map_err(|e| error("create the directory of", e))?;
        let _lock = self.lock().map_err(|e| error("lock", e))?;
        let mut book = self.read().map_err(|e| error("read", e))?;
        if self.workspace.is_some() {
            book.workspace.clone_from(&self.workspace);
        }
        let entry = book.sessions.entry(session.to_owned()).or_default();
        let value = f(entry);
        entry.seen = now();
        while book.sessions.len() > MAX_SESSIONS {
            let oldest = book
                .sessions
                .iter()
                .filter(|(key, _)| key.as_str() != session)
                .min_by_key(|(_, s)| s.seen)
                .map(|(key, _)| key.clone());
            match oldest {
                Some(key) => book.sessions.remove(&key),
                None => break,
            };
        }
        let bytes = serde_json::to_vec(&book).expect("a turn log always serialises");
        // Losing it in a crash makes the next stop a user turn at worst: no fsync per turn.
        write_atomic(&self.path, &bytes, Durability::Replaceable).map_err(|e| error("write", e))?;
        Ok(value)
    }

    /// The log as stored; missing, unusable or unparsable is empty (and replaced on write).
    fn read(&self) -> io::Result<Book> {
        let meta = match fs::symlink_metadata(&self.path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Book::default()),
            Err(e) => return Err(e),
        };
        if !meta.file_type().is_file() || meta.nlink() != 1 || meta.len() > MAX_TURN_LOG_BYTES {
            tracing::warn!(
                "{}: not a turn log of ours; replacing it",
                self.path.display()
            );
            return Ok(Book::default());
        }
        let file = match OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(&self.path)
        {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Book::default()),
            Err(e) => return Err(e),
        };
        let mut bytes = Vec::new();
        file.take(MAX_TURN_LOG_BYTES).read_to_end(&mut bytes)?;
        Ok(serde_json::from_slice(&bytes).unwrap_or_else(|e| {
            tracing::warn!("{}: unreadable ({e}); starting afresh", self.path.display());
            Book::default()
        }))
    }

    /// Takes `<log>.lock`, released when the file is dropped.
    fn lock(&self) -> io::Result<File> {
        let mut name = self.path.file_name().unwrap_or_default().to_owned();
        name.push(".lock");
        let file = OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
            .open(self.path.with_file_name(name))?;
        file.lock()?;
        Ok(file)
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// FNV-1a: stable across builds, so a log written by one hookvisor is read by the next.
fn hash(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One step of a scripted session and what the log must say.
    enum Step {
        /// A prompt event with this prompt; the expected kind.
        Submit(Option<&'static str>, Prompt),
        /// A stop with this flag and prompt field; the expected trigger; then our answer.
        End(Option<bool>, Option<&'static str>, Trigger, Answer<'static>),
    }
    use Step::*;

    const R: &str = "[Discobot Hook Failed] \"lint\"\n\nPlease fix. (Attempt 1/3)";
    const U: Trigger = Trigger::User;
    const H: Trigger = Trigger::Hook;

    fn play(name: &str, steps: &[Step]) {
        let dir = tempfile::tempdir().unwrap();
        let log = TurnLog::new(dir.path().join("state/agent-turns.json"));
        for (i, step) in steps.iter().enumerate() {
            match step {
                Submit(prompt, want) => {
                    assert_eq!(log.prompt("s", *prompt).unwrap(), *want, "{name}: step {i}");
                }
                End(flag, prompt, want, answer) => {
                    let stop = log.stop("s", *flag, *prompt).unwrap();
                    assert_eq!(stop.trigger, *want, "{name}: step {i}");
                    log.answered("s", &stop, *answer).unwrap();
                }
            }
        }
    }

    #[test]
    fn judges_turns_as_the_module_docs_say() {
        let block = Answer::Block(R);
        let cases: &[(&str, &[Step])] = &[
            (
                "prompt events: a false flag after a block is still a re-prompted turn",
                &[
                    Submit(Some("add a line"), Prompt::User),
                    End(Some(false), Some("add a line"), U, block),
                    Submit(Some(R), Prompt::Reprompt),
                    End(Some(false), Some("add a line"), H, block),
                    End(Some(false), None, H, block),
                    End(Some(false), None, H, Answer::GaveUp),
                    End(Some(false), None, H, Answer::GaveUp),
                    Submit(Some("next"), Prompt::User),
                    End(Some(true), None, U, Answer::Stop),
                ],
            ),
            (
                "prompt events: a pass clears the block",
                &[
                    Submit(None, Prompt::User),
                    End(None, None, U, block),
                    End(Some(true), None, H, Answer::Stop),
                    End(Some(true), None, U, Answer::Stop),
                ],
            ),
            (
                "prompt events: a prompt that only quotes our reason is ours",
                &[
                    Submit(Some("go"), Prompt::User),
                    End(None, None, U, block),
                    Submit(
                        Some(
                            "other hook said no\n\n[Discobot Hook Failed] \"lint\"\n\nPlease fix. (Attempt 1/3)\n",
                        ),
                        Prompt::Reprompt,
                    ),
                    End(Some(false), None, H, Answer::Stop),
                ],
            ),
            (
                "fallback: the flag",
                &[
                    End(Some(false), None, U, block),
                    End(Some(true), None, H, block),
                    End(Some(true), None, H, Answer::GaveUp),
                    End(Some(false), None, U, Answer::Stop),
                ],
            ),
            (
                "fallback: the same prompt field with a block outstanding",
                &[
                    End(Some(false), Some("p"), U, block),
                    End(Some(false), Some("p"), H, block),
                    End(Some(false), Some("p"), H, Answer::GaveUp),
                    End(Some(false), Some("p"), H, Answer::GaveUp),
                    End(Some(false), Some("q"), U, Answer::Stop),
                    // No block outstanding: the same prompt again is a user turn.
                    End(Some(false), Some("q"), U, Answer::Stop),
                ],
            ),
            (
                "fallback: no prompt field, no flag",
                &[End(None, None, U, block), End(None, None, U, block)],
            ),
        ];
        for (name, steps) in cases {
            play(name, steps);
        }
    }

    #[test]
    fn a_prompt_during_the_evaluation_wins() {
        let dir = tempfile::tempdir().unwrap();
        let log = TurnLog::new(dir.path().join("agent-turns.json"));
        log.prompt("s", Some("a")).unwrap();
        let stop = log.stop("s", None, None).unwrap();
        log.prompt("s", Some("b")).unwrap();
        log.answered("s", &stop, Answer::Block(R)).unwrap();
        assert_eq!(log.stop("s", None, None).unwrap().trigger, Trigger::User);
    }

    #[test]
    fn sessions_are_kept_apart_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let log = TurnLog::new(dir.path().join("agent-turns.json"));
        log.prompt("a", Some("x")).unwrap();
        let stop = log.stop("a", None, None).unwrap();
        log.answered("a", &stop, Answer::Block(R)).unwrap();
        log.prompt("b", Some("y")).unwrap();
        assert_eq!(log.stop("b", None, None).unwrap().trigger, Trigger::User);
        assert_eq!(log.stop("a", None, None).unwrap().trigger, Trigger::Hook);
        for i in 0..MAX_SESSIONS + 5 {
            log.prompt(&format!("n{i}"), None).unwrap();
        }
        let book = log.read().unwrap();
        assert_eq!(book.sessions.len(), MAX_SESSIONS);
    }

    #[test]
    fn an_unusable_file_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent-turns.json");
        let target = dir.path().join("elsewhere");
        fs::write(&target, "{}").unwrap();
        std::os::unix::fs::symlink(&target, &path).unwrap();
        let log = TurnLog::new(&path);
        assert_eq!(log.prompt("s", None).unwrap(), Prompt::User);
        assert!(fs::symlink_metadata(&path).unwrap().is_file());
        assert_eq!(fs::read_to_string(&target).unwrap(), "{}");
        // Unparsable: the record is gone, so the fallback (the flag) judges.
        fs::write(&path, "not json").unwrap();
        assert_eq!(
            log.stop("s", Some(true), None).unwrap().trigger,
            Trigger::Hook
        );
    }
}

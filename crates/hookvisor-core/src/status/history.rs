//! The run history of every hook, beside `status.json` (docs/reference/status-json.md, "Run
//! history"): `runs/<hookId>.jsonl` holds the hook's last [`MAX_RUNS`] runs (and at most
//! [`MAX_HISTORY_BYTES`]), one [`RunRecord`] a line, oldest first; `runs/<hookId>/<run>.log`
//! keeps the logs of its last [`MAX_LOGS`] runs, each the last [`MAX_LOG_BYTES`] of the log.
//!
//! Written only by [`StatusStore::update`](super::StatusStore::update), under the status lock,
//! whenever a hook's finished runs (`runCount`) go up: so every runner that records a run adds
//! to it. A run's number is its `runCount`, so it survives restarts and SSE can name it from
//! status.json alone. The state dir is the agent's: the files are opened as `status.json` is
//! (rule 3), replaced whole by [`write_atomic`], and one that is not ours or does not parse is
//! moved aside by the next writer (rule 4) and read as empty meanwhile. Nothing is cached: a
//! reader reads the file on each call, one history at a time, and cuts a record it reads to the
//! bounds a writer keeps.

use std::fs::{self, File};
use std::io::{self, Read, Seek, SeekFrom};
use std::os::unix::fs::DirBuilderExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};

use super::HookStatus;
use crate::state::{Durability, StateDir, read_capped, write_atomic};
use crate::timestamp::rfc3339_millis;
use crate::untrusted::{move_aside, not_ours, open_regular, warn};

/// Runs kept per hook.
pub const MAX_RUNS: usize = 200;
/// The largest history file written; the oldest runs go first. A file read is capped at four
/// times this, so a planted huge one is refused unread.
pub const MAX_HISTORY_BYTES: usize = 256 * 1024;
/// Logs kept per hook (the runs before keep their record, without output).
pub const MAX_LOGS: u64 = 20;
/// The end of a run's log that is kept, as `/hooks/{id}/output` shows it.
pub const MAX_LOG_BYTES: u64 = 200 * 1024;
/// The most hooks [`History::hooks`] lists.
pub const MAX_LISTED: usize = 1000;
/// The longest text a record keeps (the agent's text, a note, a file name).
const MAX_TEXT: usize = 16 * 1024;
/// The most file names a record keeps.
const MAX_FILES: usize = 100;

/// One run of a hook, as `GET /hooks/{id}/runs` shows it.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunRecord {
    /// The run's number: the hook's `runCount` after it.
    pub run: u64,
    /// When it started (RFC 3339).
    pub started_at: String,
    /// How long it took.
    #[serde(default)]
    pub duration_ms: Option<u64>,
    /// Its exit status; `None` when it never started or its runner died.
    #[serde(default)]
    pub exit_code: Option<i32>,
    /// `success`, `failure` or `timeout`.
    pub result: String,
    /// The event it ran for.
    #[serde(default)]
    pub event: Option<String>,
    /// Who fired the event: `user`, `hook` or `loop`.
    #[serde(default)]
    pub trigger: Option<String>,
    /// The agent session it ran in.
    #[serde(default)]
    pub session: Option<String>,
    /// The files it ran on, workspace-relative.
    #[serde(default)]
    pub files: Vec<String>,
    /// The tool of a tool event's run.
    #[serde(default)]
    pub tool: Option<String>,
    /// What its run decided for the agent (`block`, `reprompt`, ...), when known.
    #[serde(default)]
    pub decision: Option<String>,
    /// The exact text the agent received because of this run (a re-prompt), when any.
    #[serde(default)]
    pub agent_text: Option<String>,
    /// Why it ended as it did when the exit code does not say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Whether its log is kept (`GET /hooks/{id}/runs/{run}/output`).
    #[serde(default)]
    pub has_output: bool,
}

impl RunRecord {
    /// This record within the bounds a writer keeps: a planted one may hold longer texts.
    fn bounded(self) -> RunRecord {
        let text = |t: Option<String>| t.map(|t| cut(&t));
        RunRecord {
            started_at: cut(&self.started_at),
            result: cut(&self.result),
            event: text(self.event),
            trigger: text(self.trigger),
            session: text(self.session),
            files: self.files.iter().take(MAX_FILES).map(|f| cut(f)).collect(),
            tool: text(self.tool),
            decision: text(self.decision),
            agent_text: text(self.agent_text),
            note: text(self.note),
            ..self
        }
    }
}

/// What a runner knows of a run that status.json does not say: the event and who fired it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RunInfo {
    /// The event.
    pub event: Option<String>,
    /// `user`, `hook` or `loop`.
    pub trigger: Option<String>,
    /// The session id.
    pub session: Option<String>,
    /// The files, workspace-relative.
    pub files: Vec<String>,
    /// The tool of a tool event (`tool_name`).
    pub tool: Option<String>,
}

impl RunInfo {
    /// What a run's history says of its firing: the event, the trigger, the session, the files.
    pub(crate) fn of(payload: &crate::payload::Payload) -> RunInfo {
        RunInfo {
            event: Some(payload.event.clone()),
            trigger: Some(payload.trigger.clone()),
            session: Some(payload.session.clone()),
            files: payload
                .files
                .iter()
                .flatten()
                .map(|f| f.to_string_lossy().into_owned())
                .collect(),
            tool: payload
                .data
                .get("tool_name")
                .and_then(|t| t.as_str())
                .map(cut),
        }
    }
}

/// The run histories of one state dir.
#[derive(Debug, Clone)]
pub struct History {
    state: StateDir,
}

/// Whether `id` can name a file of `runs/`: hook ids are file names already (`output/<id>.log`),
/// this keeps a strange one out of other directories.
fn usable_id(id: &str) -> bool {
    !id.is_empty() && !id.starts_with('.') && !id.contains('/') && !id.contains('\0')
}

fn cut(text: &str) -> String {
    if text.len() <= MAX_TEXT {
        return text.to_owned();
    }
    let mut end = MAX_TEXT;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &text[..end])
}

impl History {
    /// The histories of the state dir `state`; nothing is touched.
    pub fn new(state: StateDir) -> History {
        History { state }
    }

    /// The last `limit` runs of `hook_id`, newest first. A missing, planted or corrupt history
    /// is empty (with a warning for the latter two).
    pub fn runs(&self, hook_id: &str, limit: usize) -> Vec<RunRecord> {
        let mut runs = self.read_or_warn(hook_id);
        runs.reverse();
        runs.truncate(limit);
        runs
    }

    /// The ids of the hooks with a history, sorted; at most [`MAX_LISTED`] of them, so a
    /// `runs/` the agent filled with names costs a bounded read.
    pub fn hooks(&self) -> Vec<String> {
        let Ok(dir) = fs::read_dir(self.state.runs_dir()) else {
            return Vec::new();
        };
        let mut ids: Vec<String> = dir
            .flatten()
            .take(4 * MAX_LISTED)
            .filter_map(|e| {
                let name = e.file_name().into_string().ok()?;
                let id = name.strip_suffix(".jsonl")?;
                usable_id(id).then(|| id.to_owned())
            })
            .collect();
        ids.sort();
        ids.truncate(MAX_LISTED);
        ids
    }

    /// Every run of every hook [`History::hooks`] lists, one history read at a time (each
    /// newest first): a caller keeps what it needs of them, never all of them at once.
    pub fn for_each_run(&self, mut f: impl FnMut(&str, RunRecord)) {
        for id in self.hooks() {
            for run in self.runs(&id, MAX_RUNS) {
                f(&id, run);
            }
        }
    }

    /// Run `run` of `hook_id`.
    pub fn run(&self, hook_id: &str, run: u64) -> Option<RunRecord> {
        self.read_or_warn(hook_id)
            .into_iter()
            .find(|r| r.run == run)
    }

    /// Opens the kept log of run `run` of `hook_id` as a state file is opened (no link, no
    /// FIFO); `Ok(Err(why))` says what the path is instead.
    pub fn open_log(&self, hook_id: &str, run: u64) -> io::Result<Result<File, String>> {
        if !usable_id(hook_id) {
            return Err(io::ErrorKind::NotFound.into());
        }
        open_regular(&self.state.run_log(hook_id, run))
    }

    fn read_or_warn(&self, hook_id: &str) -> Vec<RunRecord> {
        match self.read(hook_id) {
            Ok(Ok(runs)) => runs,
            Ok(Err(why)) => {
                warn(format_args!(
                    "{} {why}; reading it as empty until the next run moves it aside",
                    self.state.run_history(hook_id).display()
                ));
                Vec::new()
            }
            Err(e) => {
                warn(format_args!(
                    "cannot read {}: {e}",
                    self.state.run_history(hook_id).display()
                ));
                Vec::new()
            }
        }
    }

    /// The history, oldest first; `Ok(Err(why))` when the file is not one we wrote.
    fn read(&self, hook_id: &str) -> io::Result<Result<Vec<RunRecord>, String>> {
        if !usable_id(hook_id) {
            return Ok(Ok(Vec::new()));
        }
        let path = self.state.run_history(hook_id);
        let file = match open_regular(&path) {
            Ok(Ok(file)) => file,
            Ok(Err(why)) => return Ok(Err(why)),
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
                return Ok(Ok(Vec::new()));
            }
            Err(e) => return Err(e),
        };
        let Some(bytes) = read_capped(file, 4 * MAX_HISTORY_BYTES as u64)? else {
            return Ok(Err(format!(
                "is over the limit of {} KiB",
                (4 * MAX_HISTORY_BYTES) >> 10
            )));
        };
        let mut runs = Vec::new();
        for line in bytes.split(|&b| b == b'\n').filter(|l| !l.is_empty()) {
            match serde_json::from_slice::<RunRecord>(line) {
                Ok(run) => runs.push(run.bounded()),
                Err(e) => return Ok(Err(format!("does not parse ({e})"))),
            }
        }
        Ok(Ok(runs))
    }

    /// Adds the run `entry` just recorded for `hook_id` (the status lock held), with a copy of
    /// the end of its log, and drops what is over the bounds.
    pub(crate) fn append(
        &self,
        hook_id: &str,
        entry: &HookStatus,
        info: Option<&RunInfo>,
    ) -> io::Result<()> {
        if !usable_id(hook_id) {
            return Ok(());
        }
        let mut runs = self.read_for_write(hook_id)?;
        // A planted history at the end of the numbers: no run can follow it.
        if runs.last().is_some_and(|r| r.run == u64::MAX) {
            move_aside(
                &self.state.run_history(hook_id),
                "numbers a run with the largest number",
            )?;
            runs.clear();
        }
        let last = runs.last().map_or(0, |r| r.run);
        let run = entry.run_count.max(last + 1);
        let result = if entry.timed_out {
            "timeout"
        } else {
            entry.last_result.as_str()
        };
        let info = info.cloned().unwrap_or_default();
        // To the millisecond, for a timeline of runs within one second: the run ends now.
        let started_at = match entry.duration_ms {
            Some(ms) => rfc3339_millis(SystemTime::now() - Duration::from_millis(ms)),
            None => entry.last_run_at.clone().unwrap_or_default(),
        };
        let has_output = self.keep_log(hook_id, run).unwrap_or_else(|e| {
            warn(format_args!(
                "cannot keep the log of run {run} of '{hook_id}': {e}"
            ));
            false
        });
        runs.push(RunRecord {
            run,
            started_at,
            duration_ms: entry.duration_ms,
            exit_code: entry.last_exit_code,
            result: result.to_owned(),
            event: info.event.or_else(|| entry.event.clone()),
            trigger: info.trigger,
            session: info.session,
            files: info.files.iter().take(MAX_FILES).map(|f| cut(f)).collect(),
            tool: info.tool,
            decision: None,
            agent_text: None,
            note: entry.note.as_deref().map(cut),
            has_output,
        });
        for old in runs
            .iter_mut()
            .filter(|r| r.run.saturating_add(MAX_LOGS) <= run)
        {
            old.has_output = false;
        }
        self.write(hook_id, runs)
    }

    /// Sets the decision and the text the agent got on the last run of `hook_id` (the status
    /// lock held).
    pub(crate) fn annotate(
        &self,
        hook_id: &str,
        decision: &str,
        agent_text: Option<&str>,
    ) -> io::Result<()> {
        if !usable_id(hook_id) {
            return Ok(());
        }
        let mut runs = self.read_for_write(hook_id)?;
        let Some(last) = runs.last_mut() else {
            return Ok(());
        };
        last.decision = Some(decision.to_owned());
        last.agent_text = agent_text.map(cut);
        self.write(hook_id, runs)
    }

    /// The history for a writer: a file that is not ours is moved aside (rule 4).
    fn read_for_write(&self, hook_id: &str) -> io::Result<Vec<RunRecord>> {
        self.own_dir(&self.state.runs_dir())?;
        match self.read(hook_id)? {
            Ok(runs) => Ok(runs),
            Err(why) => {
                move_aside(&self.state.run_history(hook_id), &why)?;
                Ok(Vec::new())
            }
        }
    }

    fn write(&self, hook_id: &str, mut runs: Vec<RunRecord>) -> io::Result<()> {
        let skip = runs.len().saturating_sub(MAX_RUNS);
        runs.drain(..skip);
        let mut lines: Vec<Vec<u8>> = runs
            .iter()
            .map(|r| {
                let mut line = serde_json::to_vec(r).expect("a run record serialises");
                line.push(b'\n');
                line
            })
            .collect();
        let mut total: usize = lines.iter().map(Vec::len).sum();
        while total > MAX_HISTORY_BYTES && lines.len() > 1 {
            total -= lines.remove(0).len();
        }
        // A lost last write on power loss costs one run of a history: no fsync on the hot path.
        write_atomic(
            &self.state.run_history(hook_id),
            &lines.concat(),
            Durability::Replaceable,
        )
    }

    /// Copies the end of `output/<id>.log` to `runs/<id>/<run>.log` and removes the logs of
    /// runs [`MAX_LOGS`] before; false when there was no log to keep.
    fn keep_log(&self, hook_id: &str, run: u64) -> io::Result<bool> {
        let mut file = match open_regular(&self.state.log(hook_id)) {
            Ok(Ok(file)) => file,
            Ok(Err(_)) => return Ok(false),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(e),
        };
        let size = file.metadata()?.len();
        file.seek(SeekFrom::Start(size.saturating_sub(MAX_LOG_BYTES)))?;
        let mut bytes = Vec::new();
        file.take(MAX_LOG_BYTES).read_to_end(&mut bytes)?;
        let dir = self.state.run_logs_dir(hook_id);
        self.own_dir(&dir)?;
        write_atomic(
            &self.state.run_log(hook_id, run),
            &bytes,
            Durability::Replaceable,
        )?;
        // Only the log that just fell out of the window goes: no scan of a directory the agent
        // may have filled with names.
        if let Some(old) = run.checked_sub(MAX_LOGS).filter(|&old| old > 0) {
            // Unlinks the name: a link planted there goes, its target stays.
            let _ = fs::remove_file(self.state.run_log(hook_id, old));
        }
        Ok(true)
    }

    /// Makes `dir` a directory of ours: one planted as a link or a file is moved aside.
    fn own_dir(&self, dir: &Path) -> io::Result<()> {
        match fs::symlink_metadata(dir) {
            Ok(meta) if meta.is_dir() => return Ok(()),
            Ok(meta) => {
                let why = not_ours(&meta).unwrap_or_else(|| "is not a directory".to_owned());
                move_aside(dir, &why)?;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(e),
        }
        match fs::DirBuilder::new().mode(0o755).create(dir) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::HookKind;

    #[test]
    fn a_history_keeps_the_newest_runs_within_its_byte_cap() {
        let dir = tempfile::tempdir().unwrap();
        let history = History::new(StateDir::new(dir.path()));
        let mut entry = HookStatus::new("a", "a", HookKind::File);
        for n in 1..=120 {
            entry.run_count = n;
            entry.note = Some("x".repeat(4000));
            history.append("a", &entry, None).unwrap();
        }
        let size = fs::metadata(dir.path().join("runs/a.jsonl")).unwrap().len();
        assert!(size <= MAX_HISTORY_BYTES as u64, "{size}");
        let runs = history.runs("a", MAX_RUNS);
        assert_eq!(runs[0].run, 120, "the newest first");
        assert!(runs.len() < 120 && runs.len() > 50, "{}", runs.len());
        let last = runs.last().unwrap().run;
        assert_eq!(
            runs.len() as u64,
            120 - last + 1,
            "the oldest went, none between"
        );
    }
}

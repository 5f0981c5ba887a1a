//! The `status.json` store: what every hook did last, which file hooks are pending, and the
//! loop-guard counter, shared by the init, the server, the CLI and the pre-commit path.
//!
//! The schema is discobot's (docs/DESIGN.md, "status.json"), so its dashboards keep working. The rules
//! every writer follows live here, once:
//!
//! 1. Writers serialise on an exclusive `flock` of `status.json.lock`, a file that is never
//!    deleted (deleting a lock file lets two writers lock two different inodes). The kernel drops
//!    the lock when its holder dies, so a killed writer never blocks the next one. A writer holds
//!    the lock for milliseconds, so one held for long is held on purpose: a writer waits for it
//!    at most its store's lock timeout, 10 s unless [`StatusStore::with_lock_timeout`] says
//!    otherwise, and then fails with [`StatusError::LockTimeout`].
//! 2. Under the lock a writer reads, modifies and writes a temp file in the same directory,
//!    fsyncs it, renames it over `status.json` and fsyncs the directory. Readers take no lock:
//!    the rename means they see the old file or the new one, never a torn one.
//! 3. The state dir belongs to the run user, so whatever code the agent ran may have left
//!    anything there, and the init (root, PID 1) reads it before CMD starts. `status.json` and
//!    its lock are opened without following a symbolic link and without blocking
//!    (`O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC`) and used only when they are regular
//!    files with at most one link: never a FIFO, a device, a socket, a directory or a hard link
//!    to a file elsewhere. `status.json` is read up to 8 MiB, hundreds of times a real one.
//! 4. A `status.json` that breaks rule 3 or does not parse is moved aside to
//!    `status.json.corrupt-<UTC time>` by the next writer, with a warning, and a fresh status is
//!    started; readers treat it as empty. A lock file that breaks rule 3 is moved aside the same
//!    way (`status.json.lock.corrupt-<UTC time>`) and made again: no writer ever locked it, so
//!    rule 1 holds. Warnings go to `tracing`, or to stderr when no subscriber listens (the init
//!    installs none).
//! 5. Fields and hook entries this version does not know are kept through a read-modify-write,
//!    so a newer hookvisor or another tool sharing the file loses nothing.
//!
//! This file holds what a status is and how a run is recorded in it; the rest lives apart:
//! `callback` is the contract of an awaited webhook's `callback` field, `file` is its JSON
//! shape (rule 5), `store` reads and updates `status.json` (rules 2 and 4),
//! `lock` serialises its writers (rule 1), and `crate::untrusted` opens the files of a state
//! dir the agent controls (rules 3 and 4).

mod callback;
mod file;
pub mod history;
mod lock;
mod store;

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use serde_json::{Map, Value};

pub use self::callback::{CallbackState, CallbackWait};
use self::file::{empty_as_none, is_false};
pub use self::store::{StatusError, StatusStore};
use crate::untrusted::open_regular;

/// Opens a file of the state dir (a hook's log) for reading as `status.json` is opened: never
/// through a symbolic link, never a FIFO or a device, at most one link, since the agent can
/// write that directory; `Ok(Err(why))` says what the path is instead.
pub fn open_state_file(path: &std::path::Path) -> std::io::Result<Result<std::fs::File, String>> {
    open_regular(path)
}
use crate::context::Context;
use crate::event::Event;
use crate::event::HookKind;
use crate::exec::RunOutcome;
use crate::hook::Hook;
use crate::timestamp::rfc3339;

/// The contents of `status.json`.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Status {
    /// The last run of every hook that has been recorded, by hook id.
    pub hooks: BTreeMap<String, HookStatus>,
    /// File hooks waiting to run, sorted by id as strings (`hook-1`, `hook-10`, `hook-2`, as
    /// discobot keeps them), without duplicates. Only membership matters: pending hooks run in
    /// discovery order (see `evaluate`), never in this order.
    pub pending_hooks: Vec<String>,
    /// When the last end-of-turn evaluation finished (RFC 3339); written as `""` while unset,
    /// as discobot does, whose readers expect a string.
    pub last_evaluated_at: Option<String>,
    /// Loop guard: turns in a row started by a hook re-prompt (docs/DESIGN.md, evaluation step 5).
    pub consecutive_hook_turns: u32,
    /// Top-level fields this version does not know, written back unchanged.
    pub extra: Map<String, Value>,
    /// Hook entries that do not parse as a [`HookStatus`] (a kind from a newer version, say),
    /// written back unchanged until a run of that id replaces them.
    unparsed_hooks: BTreeMap<String, Value>,
}

/// What one hook did last, as dashboards read it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HookStatus {
    /// The hook's id, the key of its entry.
    #[serde(default)]
    pub hook_id: String,
    /// Its display name at the last recording.
    #[serde(default)]
    pub hook_name: String,
    /// Its `type`: the phase-1 kind, else the event (docs/EVENTS.md §2.1).
    #[serde(rename = "type")]
    pub kind: EntryType,
    /// When the last run started (RFC 3339); `None` before the first run.
    #[serde(default, deserialize_with = "empty_as_none")]
    pub last_run_at: Option<String>,
    /// How the last run ended, or that one is running or waiting.
    #[serde(default)]
    pub last_result: RunResult,
    /// Exit status of the last finished run.
    #[serde(default)]
    pub last_exit_code: Option<i32>,
    /// The log of the last run.
    #[serde(default)]
    pub output_path: String,
    /// Finished runs.
    #[serde(default)]
    pub run_count: u64,
    /// Finished runs that failed.
    #[serde(default)]
    pub fail_count: u64,
    /// Failed runs since the last success.
    #[serde(default)]
    pub consecutive_failures: u64,
    /// Whether the last run was killed for exceeding its timeout.
    #[serde(default, skip_serializing_if = "is_false")]
    pub timed_out: bool,
    /// How long the last finished run took, in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// Why the last run ended as it did when its exit code alone does not say (stopped by the
    /// end of the session, refused, interrupted); discobot's dashboards ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// The event of an event-model hook (docs/EVENTS.md §2.1); absent for phase-1 hook files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Where an event-model hook is declared, `relative/path:line` (§5 rule 10); absent for
    /// phase-1 hook files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The `action:` of an event-model hook (§1.2); absent for phase-1 hook files.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// Where an awaited webhook stands with its callback (§4.3); absent for every hook that
    /// never waited for one. Written by the callback listener: see [`CallbackWait`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub callback: Option<CallbackWait>,
    /// Fields this version does not know, written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The `type` of a status entry (docs/EVENTS.md §2.1): the phase-1 kind of a hook whose event has
/// one (so phase-1 entries read exactly as discobot's), else the event's name.
///
/// Any phase-1 kind or any name [`Event`] parses is read, raw agent events included; an entry
/// with another `type` (a newer version's event, say) is kept as it is in the file, unparsed,
/// never a reason to reject the whole file.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum EntryType {
    /// `session`, `file` or `pre-commit`.
    Kind(HookKind),
    /// An event without a phase-1 kind, as [`Event`]'s `Display` writes it (`tool.before`,
    /// `claude.PreCompact`).
    Event(String),
}

impl EntryType {
    /// The `type` of `hook`'s entry: its event's phase-1 kind, else its event.
    pub(crate) fn of(hook: &Hook) -> EntryType {
        match hook.spec.event.phase1_kind() {
            Some(kind) => EntryType::Kind(kind),
            None => EntryType::Event(hook.spec.event.to_string()),
        }
    }

    /// The spelling in `status.json`.
    pub fn as_str(&self) -> &str {
        match self {
            EntryType::Kind(kind) => kind.as_str(),
            EntryType::Event(name) => name,
        }
    }
}

impl From<HookKind> for EntryType {
    fn from(kind: HookKind) -> EntryType {
        EntryType::Kind(kind)
    }
}

impl PartialEq<HookKind> for EntryType {
    fn eq(&self, kind: &HookKind) -> bool {
        *self == EntryType::Kind(*kind)
    }
}

impl fmt::Display for EntryType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl Serialize for EntryType {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

impl<'de> Deserialize<'de> for EntryType {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<EntryType, D::Error> {
        let text = String::deserialize(deserializer)?;
        if let Ok(kind) = text.parse::<HookKind>() {
            return Ok(EntryType::Kind(kind));
        }
        match text.parse::<Event>() {
            // Kept as written, not re-spelled: the entry goes back to the file unchanged.
            Ok(_) => Ok(EntryType::Event(text)),
            Err(e) => Err(serde::de::Error::custom(e)),
        }
    }
}

/// The `lastResult` of a hook.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunResult {
    /// The last run exited 0.
    Success,
    /// The last run failed, timed out or could not start.
    Failure,
    /// A run is in progress (or its writer died; see [`StatusStore::recover_interrupted`]).
    Running,
    /// Waiting to run. The state of an entry that has never run.
    #[default]
    Pending,
}

impl RunResult {
    /// The spelling in `status.json`.
    pub fn as_str(self) -> &'static str {
        match self {
            RunResult::Success => "success",
            RunResult::Failure => "failure",
            RunResult::Running => "running",
            RunResult::Pending => "pending",
        }
    }
}

impl fmt::Display for RunResult {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl Status {
    /// The entry of `hook`, created if missing, with its name, type, event fields and log path
    /// brought up to date (the front matter may have renamed it since its last run).
    pub fn entry(&mut self, hook: &Hook, ctx: &Context) -> &mut HookStatus {
        self.unparsed_hooks.remove(&hook.id);
        let output_path = ctx.log_path(&hook.id).display().to_string();
        let entry = self
            .hooks
            .entry(hook.id.clone())
            .or_insert_with(|| HookStatus::new(&hook.id, &hook.name, EntryType::of(hook)));
        entry.hook_name.clone_from(&hook.name);
        entry.describe(hook);
        entry.output_path = output_path;
        entry
    }

    /// Adds `id` to the pending set (in its sorted place, once) or removes it. Returns whether
    /// the set changed.
    pub fn set_pending(&mut self, id: &str, pending: bool) -> bool {
        match (pending, self.is_pending(id)) {
            (true, false) => {
                let at = self.pending_hooks.partition_point(|p| p.as_str() < id);
                self.pending_hooks.insert(at, id.to_owned());
                true
            }
            (false, true) => {
                self.pending_hooks.retain(|p| p != id);
                true
            }
            _ => false,
        }
    }

    /// Whether `id` is in the pending set.
    pub fn is_pending(&self, id: &str) -> bool {
        self.pending_hooks.iter().any(|p| p == id)
    }

    /// Turns every entry left `running` by a writer that died into `pending`, and puts the file
    /// hooks among them back into the pending set so the next evaluation reruns them. Returns
    /// the ids recovered.
    pub fn recover_interrupted(&mut self) -> Vec<String> {
        let mut recovered = Vec::new();
        let mut requeue = Vec::new();
        for (id, entry) in &mut self.hooks {
            if entry.last_result == RunResult::Running {
                entry.last_result = RunResult::Pending;
                recovered.push(id.clone());
                if entry.kind == HookKind::File {
                    requeue.push(id.clone());
                }
            }
        }
        for id in requeue {
            self.set_pending(&id, true);
        }
        recovered
    }

    /// Parses `status.json` bytes. Empty strings and nulls that discobot writes for unset
    /// values read as unset.
    pub fn from_json(bytes: &[u8]) -> serde_json::Result<Status> {
        serde_json::from_slice(bytes)
    }

    /// The bytes written to `status.json`: pretty JSON and a final newline, so that `cat` and
    /// diffs read well.
    pub fn to_json(&self) -> Vec<u8> {
        // Serializing cannot fail: every map key is a string and every value is plain data.
        let mut bytes = serde_json::to_vec_pretty(self).expect("status serializes");
        bytes.push(b'\n');
        bytes
    }
}

impl HookStatus {
    /// A never-run entry: pending, no counters.
    pub fn new(id: &str, name: &str, kind: impl Into<EntryType>) -> HookStatus {
        HookStatus {
            hook_id: id.to_owned(),
            hook_name: name.to_owned(),
            kind: kind.into(),
            last_run_at: None,
            last_result: RunResult::Pending,
            last_exit_code: None,
            output_path: String::new(),
            run_count: 0,
            fail_count: 0,
            consecutive_failures: 0,
            timed_out: false,
            duration_ms: None,
            note: None,
            event: None,
            source: None,
            action: None,
            callback: None,
            extra: Map::new(),
        }
    }

    /// Sets the `type` and the event fields from `hook` (docs/EVENTS.md §2.1): `event`, `source` and
    /// `action` for a hook of the event model (one whose front matter uses it, see
    /// [`EventSpec::declared`](crate::event::EventSpec::declared)), none for a phase-1 hook
    /// file, whose entry stays field for field what discobot writes.
    pub(crate) fn describe(&mut self, hook: &Hook) {
        self.kind = EntryType::of(hook);
        let spec = &hook.spec;
        (self.event, self.source, self.action) = if spec.declared {
            (
                Some(spec.event.to_string()),
                Some(hook.source()),
                Some(spec.action.as_str().to_owned()),
            )
        } else {
            (None, None, None)
        };
        // A global hook is in no workspace: every runner records where it is (docs/EVENTS.md §2.1).
        if hook.origin == crate::hook::Origin::Global {
            self.source = Some(hook.source());
        }
    }

    /// Records that a run started at `now`: dashboards show it running.
    pub fn begin(&mut self, now: SystemTime) {
        self.last_result = RunResult::Running;
        self.last_run_at = Some(rfc3339(now));
    }

    /// Records a finished run, with discobot's counters: every run counts, a failure adds to
    /// both failure counters, a success resets the consecutive one. `lastRunAt` is the start of
    /// the run (`now - duration`), the same value [`HookStatus::begin`] wrote, so a writer that
    /// skips `begin` (the pre-commit path) records the same thing. The note of an earlier run
    /// is cleared: it described that run.
    pub fn record(&mut self, outcome: &RunOutcome, now: SystemTime) {
        let result = if outcome.success() {
            RunResult::Success
        } else {
            RunResult::Failure
        };
        self.count(
            Some(outcome.exit_code),
            result,
            outcome.timed_out,
            outcome.duration,
            now,
        );
        self.note = None;
    }

    /// Records a run that ended without an outcome (refused before it started, or its runner
    /// killed) as a failure without an exit code, with `note` saying why.
    pub fn record_unfinished(&mut self, note: &str, duration: Duration, now: SystemTime) {
        self.count(None, RunResult::Failure, false, duration, now);
        self.note = Some(note.to_owned());
    }

    fn count(
        &mut self,
        exit_code: Option<i32>,
        result: RunResult,
        timed_out: bool,
        duration: Duration,
        now: SystemTime,
    ) {
        self.run_count += 1;
        if result == RunResult::Success {
            self.consecutive_failures = 0;
        } else {
            self.fail_count += 1;
            self.consecutive_failures += 1;
        }
        self.last_result = result;
        self.last_exit_code = exit_code;
        self.timed_out = timed_out;
        self.duration_ms = Some(u64::try_from(duration.as_millis()).unwrap_or(u64::MAX));
        self.last_run_at = Some(rfc3339(now.checked_sub(duration).unwrap_or(now)));
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::fs;
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    pub(super) fn hook(id: &str, kind: HookKind) -> Hook {
        Hook {
            id: id.to_owned(),
            name: format!("{id} check"),
            kind,
            path: PathBuf::from(format!("/ws/.discobot/hooks/{id}.sh")),
            description: None,
            run_as: crate::hook::RunAs::User,
            blocking: false,
            pattern: None,
            notify_llm: true,
            timeout: kind.default_timeout(),
            spec: crate::event::EventSpec::for_kind(kind),
            origin: crate::hook::Origin::Workspace,
            phase1: true,
        }
    }

    pub(super) fn context(state_dir: &Path) -> Context {
        Context {
            workspace: PathBuf::from("/ws"),
            session_id: "default".to_owned(),
            state_dir: state_dir.to_owned(),
        }
    }

    /// What a run that exited with `exit_code` did, as far as the status records it.
    pub(super) fn outcome(exit_code: i32, timed_out: bool, duration: Duration) -> RunOutcome {
        RunOutcome {
            exit_code,
            timed_out,
            duration,
            ..RunOutcome::default()
        }
    }

    pub(super) fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    #[test]
    fn entry_refreshes_name_and_replaces_an_unparsed_entry() {
        let dir = tempfile::tempdir().unwrap();
        let ctx = context(dir.path());
        let mut status =
            Status::from_json(br#"{"hooks":{"x":{"type":"future-kind","runCount":9}}}"#).unwrap();
        let mut h = hook("x", HookKind::File);
        status
            .entry(&h, &ctx)
            .record(&outcome(0, false, Duration::ZERO), at(5));
        h.name = "Renamed".to_owned();
        let entry = status.entry(&h, &ctx);
        assert_eq!(entry.hook_name, "Renamed");
        assert_eq!(entry.run_count, 1);
        let out: Value = serde_json::from_slice(&status.to_json()).unwrap();
        assert_eq!(out["hooks"]["x"]["type"], "file");
    }

    /// The hooks discovery makes of these `(file name, front matter, executable)`, by id.
    fn discovered(files: &[(&str, &str, bool)]) -> (tempfile::TempDir, BTreeMap<String, Hook>) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        for &(name, front, executable) in files {
            let path = dir.path().join(name);
            let text = match executable {
                true => format!("#!/bin/sh\n#---\n{front}\n#---\nexit 0\n"),
                false => format!("---\n{front}\n---\n"),
            };
            fs::write(&path, text).unwrap();
            let mode = if executable { 0o755 } else { 0o644 };
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
        }
        let discovery = crate::discover(dir.path());
        assert!(discovery.problems.is_empty(), "{:?}", discovery.problems);
        let hooks = discovery.hooks.into_iter();
        (dir, hooks.map(|h| (h.id.clone(), h)).collect())
    }

    #[test]
    fn type_is_the_phase1_kind_else_the_event_and_event_hooks_carry_their_fields() {
        let (dir, hooks) = discovered(&[
            ("lint.sh", "# type: file\n# pattern: '*.go'", true),
            ("setup.sh", "# type: session", true),
            ("guard.sh", "# event: tool.before\n# tool: Bash", true),
            ("compact.sh", "# event: claude.PreCompact", true),
            (
                "late.yml",
                "event: turn.end\nwhen: ${trigger} == 'user'\nrun: make",
                false,
            ),
            ("boot.sh", "# event: session.start", true),
        ]);
        let ctx = context(dir.path());
        let mut status = Status::default();
        for hook in hooks.values() {
            status
                .entry(hook, &ctx)
                .record(&outcome(0, false, Duration::ZERO), at(5));
        }
        let out: Value = serde_json::from_slice(&status.to_json()).unwrap();
        // (id, type, event, source, action); null: absent.
        let table = [
            ("lint", "file", None, None),
            ("setup", "session", None, None),
            (
                "guard",
                "tool.before",
                Some("tool.before"),
                Some("guard.sh"),
            ),
            (
                "compact",
                "claude.PreCompact",
                Some("claude.PreCompact"),
                Some("compact.sh"),
            ),
            ("late", "file", Some("turn.end"), Some("late.yml")),
            ("boot", "session", Some("session.start"), Some("boot.sh")),
        ];
        for (id, kind, event, file) in table {
            let entry = &out["hooks"][id];
            assert_eq!(entry["type"], kind, "{id}: {entry}");
            assert_eq!(entry.get("event").and_then(Value::as_str), event, "{id}");
            let source = file.map(|f| format!(".discobot/hooks/{f}:1"));
            assert_eq!(
                entry.get("source").and_then(Value::as_str),
                source.as_deref(),
                "{id}"
            );
            let action = event.map(|_| "command");
            assert_eq!(entry.get("action").and_then(Value::as_str), action, "{id}");
        }
        // A phase-1 entry has exactly discobot's fields (plus durationMs, written since phase 1).
        let mut keys: Vec<&str> = out["hooks"]["lint"]
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "consecutiveFailures",
                "durationMs",
                "failCount",
                "hookId",
                "hookName",
                "lastExitCode",
                "lastResult",
                "lastRunAt",
                "outputPath",
                "runCount",
                "type"
            ]
        );
        // What was written reads back as it was.
        let again = Status::from_json(&status.to_json()).unwrap();
        assert_eq!(again, status);
        assert_eq!(
            again.hooks["guard"].kind,
            EntryType::Event("tool.before".into())
        );
        assert_eq!(again.hooks["lint"].kind, HookKind::File);
    }

    #[test]
    fn a_hook_file_turned_back_into_phase1_loses_its_event_fields() {
        let (dir, event) = discovered(&[("h.sh", "# event: task.start", true)]);
        let (_dir, phase1) = discovered(&[("h.sh", "# type: session", true)]);
        let ctx = context(dir.path());
        let mut status = Status::default();
        status.entry(&event["h"], &ctx).begin(at(1));
        assert_eq!(status.hooks["h"].kind.as_str(), "task.start");
        let entry = status.entry(&phase1["h"], &ctx);
        assert_eq!(entry.kind, HookKind::Session);
        assert_eq!(
            (&entry.event, &entry.source, &entry.action),
            (&None, &None, &None)
        );
    }

    #[test]
    fn readers_take_every_event_type_and_keep_what_they_cannot_read() {
        let input = r#"{"hooks":{
            "a":{"hookId":"a","type":"tool.before","lastResult":"success","runCount":2,
                 "event":"tool.before","source":".discobot/hooks/a.sh:1","action":"command"},
            "b":{"hookId":"b","type":"codex.Stop","lastResult":"failure","runCount":1},
            "c":{"hookId":"c","type":"stage.begin-of-a-newer-version","runCount":4},
            "d":{"hookId":"d","type":7},
            "e":{"hookId":"e","type":"session","lastResult":"running"}},
          "pendingHooks":[]}"#;
        let mut status = Status::from_json(input.as_bytes()).unwrap();
        assert_eq!(status.hooks["a"].kind.as_str(), "tool.before");
        assert_eq!(status.hooks["a"].run_count, 2);
        assert_eq!(status.hooks["a"].event.as_deref(), Some("tool.before"));
        assert_eq!(
            status.hooks["b"].kind,
            EntryType::Event("codex.Stop".into())
        );
        assert_eq!(status.hooks["e"].kind, HookKind::Session);
        assert_eq!(
            status.hooks.keys().collect::<Vec<_>>(),
            ["a", "b", "e"],
            "entries of types this version cannot read are kept aside, the rest read"
        );
        // Recovery: an event entry left running is pending again, but not in the file hooks'
        // pending set.
        status.hooks.get_mut("a").unwrap().last_result = RunResult::Running;
        assert_eq!(status.recover_interrupted(), ["a", "e"]);
        assert!(status.pending_hooks.is_empty());
        let out: Value = serde_json::from_slice(&status.to_json()).unwrap();
        assert_eq!(
            out["hooks"]["c"],
            serde_json::json!({"hookId": "c", "type": "stage.begin-of-a-newer-version", "runCount": 4})
        );
        assert_eq!(
            out["hooks"]["d"],
            serde_json::json!({"hookId": "d", "type": 7})
        );
        assert_eq!(out["hooks"]["b"]["type"], "codex.Stop");
    }

    #[test]
    fn counters_follow_discobot() {
        // (runs as s = success / f = failure, runCount, failCount, consecutiveFailures, last)
        let table = [
            ("", 0, 0, 0, RunResult::Pending),
            ("s", 1, 0, 0, RunResult::Success),
            ("f", 1, 1, 1, RunResult::Failure),
            ("ff", 2, 2, 2, RunResult::Failure),
            ("ffs", 3, 2, 0, RunResult::Success),
            ("ffsf", 4, 3, 1, RunResult::Failure),
            ("sssfffs", 7, 3, 0, RunResult::Success),
            ("fsfsff", 6, 4, 2, RunResult::Failure),
        ];
        for (runs, run_count, fail_count, consecutive, last) in table {
            let mut entry = HookStatus::new("h", "h", HookKind::File);
            for (i, run) in runs.chars().enumerate() {
                let success = run == 's';
                entry.begin(at(100 * i as u64));
                assert_eq!(entry.last_result, RunResult::Running);
                entry.record(
                    &outcome(i32::from(!success), false, Duration::from_millis(1500)),
                    at(100 * i as u64 + 2),
                );
            }
            assert_eq!(
                (
                    entry.run_count,
                    entry.fail_count,
                    entry.consecutive_failures,
                    entry.last_result
                ),
                (run_count, fail_count, consecutive, last),
                "runs {runs:?}"
            );
        }
    }

    #[test]
    fn record_keeps_code_timeout_duration_and_start_time() {
        let mut entry = HookStatus::new("h", "h", HookKind::Session);
        entry.record(
            &outcome(124, true, Duration::from_millis(2_500)),
            at(1_795_324_153),
        );
        assert_eq!(entry.last_exit_code, Some(124));
        assert!(entry.timed_out);
        assert_eq!(entry.duration_ms, Some(2_500));
        // 2.5 s before 05:09:13 is 05:09:10.5; the second is floored.
        assert_eq!(entry.last_run_at.as_deref(), Some("2026-11-22T05:09:10Z"));
        entry.record_unfinished("refused", Duration::ZERO, at(0));
        assert_eq!(entry.last_exit_code, None);
        assert_eq!(entry.last_result, RunResult::Failure);
        assert!(!entry.timed_out, "a later run clears timedOut");
        assert_eq!(entry.note.as_deref(), Some("refused"));
        entry.record(&outcome(0, false, Duration::ZERO), at(1));
        assert_eq!(entry.note, None, "a note describes only its own run");
    }

    #[test]
    fn pending_set_is_sorted_and_has_no_duplicates() {
        // (set_pending calls in order, the set afterwards). The set is sorted by id, as
        // discobot keeps it, not in the order hooks became pending: rows 2 and 3 used to expect
        // ["b", "a"]. Nothing takes the run order from it (evaluate.rs walks discovery order).
        type Ops = &'static [(&'static str, bool)];
        let table: [(Ops, &[&str]); 5] = [
            (&[("a", true), ("b", true), ("c", true)], &["a", "b", "c"]),
            (&[("b", true), ("a", true), ("b", true)], &["a", "b"]),
            (
                &[("a", true), ("b", true), ("a", false), ("a", true)],
                &["a", "b"],
            ),
            (
                &[("a", true), ("b", true), ("c", true), ("b", false)],
                &["a", "c"],
            ),
            (&[("a", false), ("x", true), ("x", false)], &[]),
        ];
        for (ops, expected) in table {
            let mut status = Status::default();
            for &(id, pending) in ops {
                status.set_pending(id, pending);
            }
            assert_eq!(status.pending_hooks, expected, "{ops:?}");
            for id in ["a", "b", "c", "x"] {
                assert_eq!(status.is_pending(id), expected.contains(&id));
            }
        }
        let mut status = Status::default();
        assert!(status.set_pending("a", true));
        assert!(!status.set_pending("a", true));
        assert!(status.set_pending("a", false));
        assert!(!status.set_pending("a", false));
    }

    #[test]
    fn pending_ids_sort_as_strings() {
        // Written from discobot's TestAddPendingHooks_SortsHookIDsAlphaNumerically.
        let mut status = Status::default();
        for id in ["hook-2", "hook-10", "hook-1", "hook-2"] {
            status.set_pending(id, true);
        }
        assert_eq!(status.pending_hooks, ["hook-1", "hook-10", "hook-2"]);

        // A file another writer left unsorted reads, and is written back, sorted.
        let read =
            Status::from_json(br#"{"pendingHooks":["z","hook-2","a","hook-10","a"]}"#).unwrap();
        assert_eq!(read.pending_hooks, ["a", "hook-10", "hook-2", "z"]);
        let out: Value = serde_json::from_slice(&read.to_json()).unwrap();
        assert_eq!(
            out["pendingHooks"],
            serde_json::json!(["a", "hook-10", "hook-2", "z"])
        );
    }

    // -----------------------------------------------------------------------------------------
    // A state dir the agent controls (issue 12, item 7): nothing in it may block, bloat or leak.

    /// Longer than any lock timeout below: a store still busy after this is stuck for good.
    const STUCK: Duration = Duration::from_secs(20);

    /// Runs `f` on a thread and returns what it gives, failing the test if it is still busy
    /// after [`STUCK`]: a store that blocks on a hostile file fails the test instead of hanging
    /// it (the thread stays blocked until the test binary exits).
    pub(super) fn within<T: Send + 'static>(
        what: &str,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> T {
        let (done, result) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(f());
        });
        match result.recv_timeout(STUCK) {
            Ok(value) => value,
            Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
                panic!("{what}: still blocked after {STUCK:?}")
            }
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
        }
    }

    /// The files `<name>.corrupt-*` of `dir`.
    pub(super) fn set_aside(dir: &Path, name: &str) -> Vec<PathBuf> {
        let prefix = format!("{name}.corrupt-");
        fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| {
                p.file_name()
                    .unwrap()
                    .to_string_lossy()
                    .starts_with(&prefix)
            })
            .collect()
    }

    /// The reader sees an empty status and moves nothing; the next writer moves the hostile
    /// `status.json` aside (returned) and writes a fresh regular one. Neither blocks.
    pub(crate) fn assert_status_moved_aside(dir: &Path) -> PathBuf {
        let store = StatusStore::new(dir.join("status.json"));
        let reader = store.clone();
        // Not assert_eq: an oversized status would fill the terminal.
        let loaded = within("load", move || reader.load()).unwrap();
        assert!(loaded == Status::default(), "the reader read it");
        assert_eq!(set_aside(dir, "status.json"), Vec::<PathBuf>::new());
        let writer = store.clone();
        within("update", move || {
            writer.update(|s| s.set_pending("a", true))
        })
        .unwrap();
        let meta = fs::symlink_metadata(store.path()).unwrap();
        assert!(meta.file_type().is_file(), "{meta:?}");
        assert_eq!(store.load().unwrap().pending_hooks, ["a"]);
        let aside = set_aside(dir, "status.json");
        assert_eq!(aside.len(), 1, "{aside:?}");
        aside.into_iter().next().unwrap()
    }

    pub(crate) fn mkfifo(path: &Path) {
        nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    }
}

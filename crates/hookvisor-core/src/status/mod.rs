//! The `status.json` store: what every hook did last, which file hooks are pending, and the
//! loop-guard counter, shared by the init, the server, the CLI and the pre-commit path.
//!
//! The schema is discobot's (DESIGN.md, "status.json"), so its dashboards keep working. The rules
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
//! `file` is its JSON shape (rule 5), `store` reads and updates `status.json` (rules 2 and 4),
//! `lock` serialises its writers (rule 1) and `untrusted` opens the files of a state dir the
//! agent controls (rules 3 and 4).

mod file;
mod lock;
mod store;
mod untrusted;

use std::collections::BTreeMap;
use std::fmt;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use self::file::{empty_as_none, is_false};
pub use self::store::{StatusError, StatusStore};
pub(crate) use self::untrusted::{OPEN_FLAGS, move_aside, not_ours, open_regular};
use crate::context::Context;
use crate::exec::RunOutcome;
use crate::hook::{Hook, HookKind};
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
    /// Loop guard: turns in a row started by a hook re-prompt (DESIGN.md, evaluation step 5).
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
    /// Its kind.
    #[serde(rename = "type")]
    pub kind: HookKind,
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
    /// The event of an event-model hook (EVENTS.md §2.1); absent for phase-1 runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    /// Where an event-model hook is declared, `relative/path:line` (§5 rule 10); absent for
    /// phase-1 runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    /// The `action:` of an event-model hook (§1.2); absent for phase-1 runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub action: Option<String>,
    /// Fields this version does not know, written back unchanged.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
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
    /// The entry of `hook`, created if missing, with its name, type and log path brought up to
    /// date (the front matter may have renamed it since its last run).
    pub fn entry(&mut self, hook: &Hook, ctx: &Context) -> &mut HookStatus {
        self.unparsed_hooks.remove(&hook.id);
        let output_path = ctx.log_path(&hook.id).display().to_string();
        let entry = self
            .hooks
            .entry(hook.id.clone())
            .or_insert_with(|| HookStatus::new(&hook.id, &hook.name, hook.kind));
        entry.hook_name.clone_from(&hook.name);
        entry.kind = hook.kind;
        entry.output_path = output_path;
        // A global hook is in no workspace: every runner records where it is (EVENTS.md §2.1).
        if hook.origin == crate::Origin::Global {
            entry.source = Some(hook.source());
        }
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
    pub fn new(id: &str, name: &str, kind: HookKind) -> HookStatus {
        HookStatus {
            hook_id: id.to_owned(),
            hook_name: name.to_owned(),
            kind,
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
            extra: Map::new(),
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
mod tests {
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
            origin: crate::Origin::Workspace,
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
            cancelled: false,
            duration,
            tail: String::new(),
            output_bytes: 0,
            log_truncated: false,
            captured: None,
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
    pub(super) fn assert_status_moved_aside(dir: &Path) -> PathBuf {
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

    pub(super) fn mkfifo(path: &Path) {
        nix::unistd::mkfifo(path, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
    }
}

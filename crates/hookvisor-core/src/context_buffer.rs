//! The context buffer (docs/EVENTS.md §1.6, §5 rule 5): a FIFO of raw text that hooks with
//! `pipe_output` leave for the model, kept in `<state>/context.json` until `turn.start` drains
//! it into the prompt or `additionalContext`, or `session.end` discards it.
//!
//! Adapters, `fire` and `serve` are separate processes, so the file follows the rules of
//! `status.json` (see the `status` module), with the same code:
//!
//! 1. Writers serialise on an exclusive `flock` of `context.json.lock`, waited for at most the
//!    buffer's lock timeout (10 s unless [`ContextBuffer::with_lock_timeout`] says otherwise),
//!    then [`ContextBufferError::Lock`]. Every operation, reads included, runs under the lock:
//!    a drain must not lose an entry appended while it delivers.
//! 2. Under the lock the file is read, changed and replaced atomically (temp file, fsync,
//!    rename), so entries keep their order across processes: each writer's entries appear in
//!    the order it appended them, and an append is never lost.
//! 3. The agent controls the state dir: `context.json` is opened without following a symbolic
//!    link and without blocking, and used only when it is a regular file with one link, read up
//!    to [`MAX_BUFFER_BYTES`] (8 MiB). Anything else, or a file that does not parse, is moved
//!    aside to `context.json.corrupt-<UTC time>` with a warning and the buffer starts empty.
//! 4. An append that would make the file larger than [`MAX_BUFFER_BYTES`] (as written, JSON
//!    escapes included, so that rule 3 never moves aside a file this code wrote) fails with
//!    [`ContextBufferError::Full`], naming the limit, rather than dropping older entries
//!    silently (the hook's own log still holds its output).
//!
//! # JSON shape
//!
//! ```json
//! {"entries": [
//!   {"text": "lint: 3 warnings\n", "at": "2026-11-22T05:09:10.042Z", "source": "lint"}
//! ]}
//! ```
//!
//! `entries` oldest first; `at` is when the entry was appended (RFC 3339 UTC, milliseconds);
//! `source` names what piped it (a hook id), empty when unknown. Unknown fields, top-level and
//! per entry, are kept through a read-modify-write, as in `status.json`.
//!
//! # Delivery
//!
//! [`ContextBuffer::drain`] joins the entries oldest first, each ending with a newline (one is
//! added where the text lacks it). When the whole text fits the limit (at most
//! [`MAX_CONTEXT_CHARS`], Claude's cap on `additionalContext`, counted in characters) it is
//! delivered as it is. Otherwise the whole text is saved to
//! `<state>/output/context-<UTC time>.log` and the delivered text is one pointer line and the
//! tail that fits, cut at a line start when one is within the tail:
//!
//! ```text
//! [hookvisor: context truncated: 25000 characters in 3 entries; the full text is in /s/output/context-20261122T050910.042Z.log; the last 9870 characters follow]
//! …tail…
//! ```
//!
//! # Discard
//!
//! [`ContextBuffer::discard`] (at `session.end`) appends what it drops to the session's log,
//! `<state>/output/session.log`: a line `<UTC time> session.end: discarded N undelivered
//! context entries`, then each entry under `--- from <source> at <time> ---`.
//!
//! [`ContextBuffer::discard`]: crate::context_buffer::ContextBuffer::discard
//! [`ContextBuffer::drain`]: crate::context_buffer::ContextBuffer::drain
//! [`ContextBuffer::with_lock_timeout`]: crate::context_buffer::ContextBuffer::with_lock_timeout
//! [`ContextBufferError::Full`]: crate::context_buffer::ContextBufferError::Full
//! [`ContextBufferError::Lock`]: crate::context_buffer::ContextBufferError::Lock
//! [`MAX_BUFFER_BYTES`]: crate::context_buffer::MAX_BUFFER_BYTES
//! [`MAX_CONTEXT_CHARS`]: crate::context_buffer::MAX_CONTEXT_CHARS

#![forbid(unsafe_code)]

use std::fs::{self, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::state::{Durability, FILE_MODE, StateDir, write_atomic};
use crate::status::{StatusError, StatusStore};
use crate::timestamp::rfc3339_millis;
use crate::untrusted::{OPEN_FLAGS, move_aside, open_regular};

/// The most characters a drain delivers: Claude's cap on `additionalContext` (docs/EVENTS.md §1.6).
pub const MAX_CONTEXT_CHARS: usize = 10_000;

/// The largest `context.json` read (rule 3) or made by an append (rule 4), in bytes.
pub const MAX_BUFFER_BYTES: usize = 8 << 20;

/// The session's log in `output/`: what `session.end` discarded.
const SESSION_LOG: &str = "session.log";

/// How long a writer waits for the lock unless told otherwise (rule 1).
const LOCK_TIMEOUT: Duration = Duration::from_secs(10);

/// The context buffer of one state dir; see the [module documentation](self) for its rules.
#[derive(Debug, Clone)]
pub struct ContextBuffer {
    /// `<state>/context.json`.
    path: PathBuf,
    /// `<state>/output`, where an overflowing drain saves the full text.
    output_dir: PathBuf,
    /// Borrowed for its lock (rule 1) and its dead-temp-file sweep: the same code as
    /// `status.json`, pointed at `context.json`, whose lock is then `context.json.lock`.
    store: StatusStore,
}

/// What [`ContextBuffer::drain`] took out of the buffer.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Drained {
    /// The text to deliver, at most the drain's limit in characters; empty when the buffer was.
    pub text: String,
    /// How many entries were drained.
    pub entries: usize,
    /// Where the full text was saved when it did not fit, else `None`.
    pub full_text: Option<PathBuf>,
}

/// Why the context buffer could not be read or changed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ContextBufferError {
    /// The lock could not be taken (or not within the lock timeout).
    #[error(transparent)]
    Lock(#[from] StatusError),
    /// `context.json`, its directory or an overflow log could not be read or written.
    #[error(
        "context buffer {}: {source}; make the state dir writable or pass --state-dir",
        path.display()
    )]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// An append would make `context.json` larger than [`MAX_BUFFER_BYTES`].
    #[error(
        "context buffer {} is full: appending {adding} bytes of text would make it {size} \
         bytes, over the limit of {limit}; it empties at the next turn.start",
        path.display()
    )]
    Full {
        /// `context.json`.
        path: PathBuf,
        /// Bytes of text of the refused append.
        adding: usize,
        /// The size the file would have had.
        size: usize,
        /// [`MAX_BUFFER_BYTES`].
        limit: usize,
    },
}

/// The file's contents (see "JSON shape").
#[derive(Debug, Default, Serialize, Deserialize)]
struct BufferFile {
    #[serde(default)]
    entries: Vec<Entry>,
    /// Top-level fields this version does not know, written back unchanged.
    #[serde(flatten)]
    extra: Map<String, Value>,
}

/// One piece of piped text.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    text: String,
    #[serde(default)]
    at: String,
    #[serde(default)]
    source: String,
    /// Fields this version does not know, written back unchanged.
    #[serde(flatten)]
    extra: Map<String, Value>,
}

impl ContextBuffer {
    /// The buffer of `state`, at `<state>/context.json`. Nothing is touched until the first
    /// call; writers wait for the lock at most 10 s.
    pub fn new(state: &StateDir) -> ContextBuffer {
        let path = state.context_buffer();
        ContextBuffer {
            store: StatusStore::new(&path).with_lock_timeout(LOCK_TIMEOUT),
            path,
            output_dir: state.output_dir(),
        }
    }

    /// Sets how long an operation waits for a lock another process holds before it fails with
    /// [`ContextBufferError::Lock`]. The default is 10 s.
    pub fn with_lock_timeout(mut self, timeout: Duration) -> ContextBuffer {
        self.store = self.store.with_lock_timeout(timeout);
        self
    }

    /// The path of `context.json`.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends `text`, piped by `source` (a hook id; may be empty), as the newest entry. Empty
    /// text is no entry.
    pub fn append(&self, source: &str, text: &str) -> Result<(), ContextBufferError> {
        if text.is_empty() {
            return Ok(());
        }
        self.update(Some(text.len()), |file| {
            file.entries.push(Entry {
                text: text.to_owned(),
                at: rfc3339_millis(SystemTime::now()),
                source: source.to_owned(),
                extra: Map::new(),
            });
            Ok(true)
        })
    }

    /// Takes every entry out and returns the text to deliver, at most `limit_chars` characters
    /// (and never more than [`MAX_CONTEXT_CHARS`]); see "Delivery" in the module documentation.
    /// When the full text must be saved and that fails, nothing is drained.
    pub fn drain(&self, limit_chars: usize) -> Result<Drained, ContextBufferError> {
        let limit = limit_chars.min(MAX_CONTEXT_CHARS);
        let mut drained = Drained::default();
        self.update(None, |file| {
            if file.entries.is_empty() {
                return Ok(false);
            }
            let full = joined(&file.entries);
            drained.entries = file.entries.len();
            let chars = full.chars().count();
            if chars <= limit {
                drained.text = full;
            } else {
                let saved = self.save_full_text(&full)?;
                drained.text = shrink(&full, chars, drained.entries, &saved, limit);
                drained.full_text = Some(saved);
            }
            file.entries.clear();
            Ok(true)
        })?;
        Ok(drained)
    }

    /// Drops every entry (at `session.end`) and returns how many there were. What is dropped
    /// is first appended to the session's log, `<state>/output/session.log` (see "Discard"),
    /// where the user can read what no prompt took; when that fails, nothing is dropped.
    pub fn discard(&self) -> Result<usize, ContextBufferError> {
        let mut count = 0;
        self.update(None, |file| {
            count = file.entries.len();
            if count == 0 {
                return Ok(false);
            }
            self.log_discarded(&file.entries)?;
            file.entries.clear();
            Ok(true)
        })?;
        Ok(count)
    }

    /// The path of the session's log, where [`ContextBuffer::discard`] writes.
    pub fn session_log(&self) -> PathBuf {
        self.output_dir.join(SESSION_LOG)
    }

    /// Appends the discarded entries to the session's log, never through a symbolic link.
    fn log_discarded(&self, entries: &[Entry]) -> Result<(), ContextBufferError> {
        let dir = self.own_output_dir()?;
        let path = dir.join(SESSION_LOG);
        let noun = if entries.len() == 1 {
            "entry"
        } else {
            "entries"
        };
        let mut text = format!(
            "{} session.end: discarded {} undelivered context {noun}\n",
            rfc3339_millis(SystemTime::now()),
            entries.len()
        );
        for entry in entries {
            let source = if entry.source.is_empty() {
                "?"
            } else {
                &entry.source
            };
            text.push_str(&format!("--- from {source} at {} ---\n", entry.at));
            text.push_str(&entry.text);
            if !entry.text.ends_with('\n') {
                text.push('\n');
            }
        }
        self.open_session_log()?
            .write_all(text.as_bytes())
            .map_err(|e| self.io_error(&path, e))
    }

    /// The session's log opened for appending, never through a symbolic link: the discards
    /// go there, and what a detached run of an unawaited hook says of itself.
    pub fn open_session_log(&self) -> Result<fs::File, ContextBufferError> {
        let path = self.own_output_dir()?.join(SESSION_LOG);
        let file = OpenOptions::new()
            .append(true)
            .create(true)
            .mode(FILE_MODE)
            .custom_flags(OPEN_FLAGS)
            .open(&path)
            .map_err(|e| self.io_error(&path, e))?;
        if !file.metadata().is_ok_and(|m| m.is_file()) {
            return Err(self.io_error(&path, io::Error::other("is not a regular file")));
        }
        Ok(file)
    }

    /// `output/`, made when missing; refused when it is a link or a file, since the agent
    /// may have planted one and a log written through it would land wherever it points.
    fn own_output_dir(&self) -> Result<&Path, ContextBufferError> {
        let dir = &self.output_dir;
        if let Ok(meta) = fs::symlink_metadata(dir)
            && !meta.is_dir()
        {
            return Err(self.io_error(
                dir,
                io::Error::other("is not a directory (a symbolic link or a file)"),
            ));
        }
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|e| self.io_error(dir, e))?;
        Ok(dir)
    }

    /// How many entries wait, read under the lock.
    pub fn len(&self) -> Result<usize, ContextBufferError> {
        let mut count = 0;
        self.update(None, |file| {
            count = file.entries.len();
            Ok(false)
        })?;
        Ok(count)
    }

    /// Whether no entry waits.
    pub fn is_empty(&self) -> Result<bool, ContextBufferError> {
        Ok(self.len()? == 0)
    }

    /// Runs `f` on the buffer under the lock (rules 1 to 3) and writes the result when `f`
    /// returns `Ok(true)`. `appending` is the text length of an append, whose result must fit
    /// rule 4; other changes only shrink the file.
    fn update(
        &self,
        appending: Option<usize>,
        f: impl FnOnce(&mut BufferFile) -> Result<bool, ContextBufferError>,
    ) -> Result<(), ContextBufferError> {
        let dir = crate::state::parent_dir(&self.path);
        fs::DirBuilder::new()
            .recursive(true)
            .mode(0o755)
            .create(dir)
            .map_err(|source| self.io_error(dir, source))?;
        let _lock = self.store.lock()?;
        self.store.remove_dead_temp_files();
        let mut file = match self.read()? {
            Ok(file) => file,
            Err(why) => {
                move_aside(&self.path, &why).map_err(|e| self.io_error(&self.path, e))?;
                BufferFile::default()
            }
        };
        if f(&mut file)? {
            let mut bytes = serde_json::to_vec_pretty(&file)
                .map_err(|e| self.io_error(&self.path, io::Error::other(e)))?;
            bytes.push(b'\n');
            if let Some(adding) = appending
                && bytes.len() > MAX_BUFFER_BYTES
            {
                return Err(ContextBufferError::Full {
                    path: self.path.clone(),
                    adding,
                    size: bytes.len(),
                    limit: MAX_BUFFER_BYTES,
                });
            }
            write_atomic(&self.path, &bytes, Durability::Durable)
                .map_err(|e| self.io_error(&self.path, e))?;
        }
        Ok(())
    }

    /// Reads `context.json` (rule 3); `Ok(Err(why))` for a file to move aside. A missing file is
    /// an empty buffer.
    fn read(&self) -> Result<Result<BufferFile, String>, ContextBufferError> {
        let file = match open_regular(&self.path) {
            Ok(Ok(file)) => file,
            Ok(Err(why)) => return Ok(Err(why)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Ok(BufferFile::default())),
            Err(e) => return Err(self.io_error(&self.path, e)),
        };
        let mut bytes = Vec::new();
        file.take(MAX_BUFFER_BYTES as u64 + 1)
            .read_to_end(&mut bytes)
            .map_err(|e| self.io_error(&self.path, e))?;
        if bytes.len() > MAX_BUFFER_BYTES {
            return Ok(Err(format!(
                "is over the limit of {} MiB",
                MAX_BUFFER_BYTES >> 20
            )));
        }
        Ok(serde_json::from_slice(&bytes).map_err(|e| format!("does not parse ({e})")))
    }

    /// Saves the full text of an overflowing drain to a new `output/context-<time>.log`, never
    /// through a symbolic link and never over an existing file.
    fn save_full_text(&self, text: &str) -> Result<PathBuf, ContextBufferError> {
        let dir = self.own_output_dir()?;
        let stamp = rfc3339_millis(SystemTime::now()).replace([':', '-'], "");
        for n in 0..1000 {
            let name = if n == 0 {
                format!("context-{stamp}.log")
            } else {
                format!("context-{stamp}-{n}.log")
            };
            let path = dir.join(name);
            let opened = OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(FILE_MODE)
                .custom_flags(OPEN_FLAGS)
                .open(&path);
            match opened {
                Ok(mut file) => {
                    file.write_all(text.as_bytes())
                        .and_then(|()| file.sync_all())
                        .map_err(|e| self.io_error(&path, e))?;
                    return Ok(path);
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(self.io_error(&path, e)),
            }
        }
        Err(self.io_error(
            dir,
            io::Error::new(io::ErrorKind::AlreadyExists, "no free context log name"),
        ))
    }

    fn io_error(&self, path: &Path, source: io::Error) -> ContextBufferError {
        ContextBufferError::Io {
            path: path.to_owned(),
            source,
        }
    }
}

/// The entries' texts oldest first, each ending with a newline.
fn joined(entries: &[Entry]) -> String {
    let mut out = String::new();
    for entry in entries {
        out.push_str(&entry.text);
        if !entry.text.ends_with('\n') {
            out.push('\n');
        }
    }
    out
}

/// The pointer line and the tail of `full` (of `chars` characters) that fit `limit` characters.
fn shrink(full: &str, chars: usize, entries: usize, saved: &Path, limit: usize) -> String {
    let pointer = |tail: usize| {
        format!(
            "[hookvisor: context truncated: {chars} characters in {entries} entries; the full \
             text is in {}; the last {tail} characters follow]\n",
            saved.display()
        )
    };
    // The tail's digits change the pointer's length; measure with the widest count.
    let room = limit.saturating_sub(pointer(limit).chars().count());
    if room == 0 {
        // A limit too small for the pointer: as much of the pointer as fits.
        return pointer(0).chars().take(limit).collect();
    }
    // Byte offset of the last `room` characters: a char boundary by construction.
    let mut start = full
        .char_indices()
        .rev()
        .nth(room - 1)
        .map_or(0, |(at, _)| at);
    let tail = full.get(start..).unwrap_or_default();
    // Start at a line when the tail holds a line break before its end: a cut line reads badly.
    if let Some(nl) = tail.find('\n')
        && nl + 1 < tail.len()
    {
        start += nl + 1;
    }
    let tail = full.get(start..).unwrap_or_default();
    let mut out = pointer(tail.chars().count());
    out.push_str(tail);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::FileTypeExt;
    use std::process::Command;
    use std::sync::mpsc;
    use std::thread;
    use std::time::Instant;

    fn buffer(dir: &Path) -> ContextBuffer {
        ContextBuffer::new(&StateDir::new(dir))
    }

    /// Runs `f` on a thread and fails the test when it takes over 10 s (a blocked open).
    fn within<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
        let (tx, rx) = mpsc::channel();
        thread::spawn(move || {
            let _ = tx.send(f());
        });
        rx.recv_timeout(Duration::from_secs(10))
            .unwrap_or_else(|_| panic!("{what} blocked"))
    }

    fn set_aside(dir: &Path) -> Vec<PathBuf> {
        let mut found: Vec<PathBuf> = fs::read_dir(dir)
            .unwrap()
            .flatten()
            .filter(|e| {
                e.file_name()
                    .to_string_lossy()
                    .starts_with("context.json.corrupt-")
            })
            .map(|e| e.path())
            .collect();
        found.sort();
        found
    }

    #[test]
    fn entries_drain_oldest_first_and_the_buffer_empties() {
        let dir = tempfile::tempdir().unwrap();
        let buf = buffer(dir.path());
        assert_eq!(buf.drain(MAX_CONTEXT_CHARS).unwrap(), Drained::default());
        buf.append("lint", "first").unwrap();
        buf.append("test", "second\n").unwrap();
        buf.append("x", "").unwrap();
        assert_eq!(buf.len().unwrap(), 2);
        let value: Value = serde_json::from_slice(&fs::read(buf.path()).unwrap()).unwrap();
        assert_eq!(value["entries"][0]["text"], "first");
        assert_eq!(value["entries"][0]["source"], "lint");
        let at = value["entries"][1]["at"].as_str().unwrap();
        assert!(crate::timestamp::parse_rfc3339(at).is_some(), "{at}");
        assert_eq!(at.len(), "2026-11-22T05:09:10.042Z".len(), "{at}");

        let drained = buf.drain(MAX_CONTEXT_CHARS).unwrap();
        assert_eq!(drained.text, "first\nsecond\n");
        assert_eq!((drained.entries, drained.full_text), (2, None));
        assert!(buf.is_empty().unwrap());
        assert_eq!(buf.drain(MAX_CONTEXT_CHARS).unwrap().text, "");
    }

    #[test]
    fn text_exactly_at_the_limit_is_delivered_whole() {
        let dir = tempfile::tempdir().unwrap();
        let buf = buffer(dir.path());
        // 9,999 characters plus the added newline: exactly the cap, counted in characters.
        let text = "é".repeat(MAX_CONTEXT_CHARS - 1);
        buf.append("h", &text).unwrap();
        let drained = buf.drain(usize::MAX).unwrap();
        assert_eq!(drained.text.chars().count(), MAX_CONTEXT_CHARS);
        assert_eq!(drained.full_text, None);
    }

    #[test]
    fn overflow_saves_the_full_text_and_delivers_a_pointer_and_the_tail() {
        let dir = tempfile::tempdir().unwrap();
        let buf = buffer(dir.path());
        let mut expected_full = String::new();
        // 300 appends of 44 characters: over the cap, and few enough fsyncs to stay quick.
        for i in 0..300 {
            let line = format!("line {i:03} ü {}\n", "-".repeat(32));
            buf.append("h", &line).unwrap();
            expected_full.push_str(&line);
        }
        let drained = buf.drain(MAX_CONTEXT_CHARS).unwrap();
        let saved = drained.full_text.clone().expect("saved");
        assert!(saved.starts_with(dir.path().join("output")), "{saved:?}");
        assert_eq!(fs::read_to_string(&saved).unwrap(), expected_full);
        assert!(drained.text.chars().count() <= MAX_CONTEXT_CHARS);
        assert!(drained.text.chars().count() > MAX_CONTEXT_CHARS - 100);
        let (pointer, tail) = drained.text.split_once('\n').unwrap();
        assert!(pointer.contains(&saved.display().to_string()), "{pointer}");
        assert!(pointer.contains("300 entries"), "{pointer}");
        assert!(pointer.contains("13200 characters"), "{pointer}");
        assert!(
            pointer.contains(&format!("the last {} characters", tail.chars().count())),
            "{pointer}"
        );
        assert!(expected_full.ends_with(tail));
        assert!(tail.starts_with("line "), "cut at a line start: {tail:.40}");
        assert!(tail.ends_with(&format!("line 299 ü {}\n", "-".repeat(32))));
        assert_eq!(drained.entries, 300);
        assert!(buf.is_empty().unwrap());

        // A second overflow in the same millisecond gets its own file.
        buf.append("h", &"x".repeat(50)).unwrap();
        let again = buf.drain(20).unwrap();
        assert_ne!(again.full_text.as_ref(), Some(&saved));
        assert_eq!(again.text.chars().count(), 20, "{}", again.text);
    }

    #[test]
    fn one_long_line_is_cut_on_a_char_boundary() {
        let dir = tempfile::tempdir().unwrap();
        let buf = buffer(dir.path());
        buf.append("h", &"日本".repeat(20_000)).unwrap();
        let drained = buf.drain(MAX_CONTEXT_CHARS).unwrap();
        assert!(drained.text.chars().count() <= MAX_CONTEXT_CHARS);
        assert!(drained.text.ends_with("日本\n"));
    }

    #[test]
    fn discard_drops_everything_and_counts_it() {
        let dir = tempfile::tempdir().unwrap();
        let buf = buffer(dir.path());
        assert_eq!(buf.discard().unwrap(), 0);
        buf.append("a", "1").unwrap();
        buf.append("b", "2").unwrap();
        assert_eq!(buf.discard().unwrap(), 2);
        assert!(buf.is_empty().unwrap());
    }

    #[test]
    fn a_full_buffer_refuses_the_append_and_keeps_what_it_holds() {
        let dir = tempfile::tempdir().unwrap();
        let buf = buffer(dir.path());
        buf.append("a", &"x".repeat(MAX_BUFFER_BYTES / 2)).unwrap();
        let err = buf
            .append("b", &"y".repeat(MAX_BUFFER_BYTES / 2))
            .unwrap_err();
        assert!(matches!(err, ContextBufferError::Full { .. }), "{err}");
        // Control characters take six bytes each in JSON: the limit is on the file as written,
        // so the next reader never finds it oversized and moves it aside.
        let err = buf
            .append("c", &"\u{1}".repeat(MAX_BUFFER_BYTES / 4))
            .unwrap_err();
        assert!(matches!(err, ContextBufferError::Full { .. }), "{err}");
        buf.append("d", "small").unwrap();
        assert_eq!(buf.len().unwrap(), 2);
        assert_eq!(set_aside(dir.path()), Vec::<PathBuf>::new());
        let drained = buf.drain(MAX_CONTEXT_CHARS).unwrap();
        let full = fs::read_to_string(drained.full_text.unwrap()).unwrap();
        assert_eq!(full.len(), MAX_BUFFER_BYTES / 2 + "\nsmall\n".len());
        assert!(full.ends_with("x\nsmall\n"));
    }

    #[test]
    fn unknown_fields_survive_and_a_corrupt_file_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        let buf = buffer(dir.path());
        fs::write(
            buf.path(),
            r#"{"owner":"dash","entries":[{"text":"old","color":"red"}]}"#,
        )
        .unwrap();
        buf.append("h", "new").unwrap();
        let value: Value = serde_json::from_slice(&fs::read(buf.path()).unwrap()).unwrap();
        assert_eq!(value["owner"], "dash");
        assert_eq!(value["entries"][0]["color"], "red");
        assert_eq!(buf.drain(100).unwrap().text, "old\nnew\n");

        fs::write(buf.path(), "{not json").unwrap();
        buf.append("h", "fresh").unwrap();
        let aside = set_aside(dir.path());
        assert_eq!(aside.len(), 1);
        assert_eq!(fs::read_to_string(&aside[0]).unwrap(), "{not json");
        assert_eq!(buf.drain(100).unwrap().text, "fresh\n");
    }

    #[test]
    fn hostile_files_are_never_followed_nor_block() {
        // A symbolic link to a secret: not read, not written through, moved aside.
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret.json");
        fs::write(&secret, r#"{"entries":[{"text":"hunter2"}]}"#).unwrap();
        std::os::unix::fs::symlink(&secret, dir.path().join("context.json")).unwrap();
        let buf = buffer(dir.path());
        assert_eq!(within("drain", move || buf.drain(100).unwrap()).text, "");
        let aside = set_aside(dir.path());
        assert_eq!(fs::read_link(&aside[0]).unwrap(), secret);
        assert_eq!(
            fs::read_to_string(&secret).unwrap(),
            r#"{"entries":[{"text":"hunter2"}]}"#
        );

        // A FIFO would block a reader forever; /dev/zero would never end.
        for plant in ["fifo", "zero"] {
            let dir = tempfile::tempdir().unwrap();
            let path = dir.path().join("context.json");
            if plant == "fifo" {
                nix::unistd::mkfifo(&path, nix::sys::stat::Mode::from_bits_truncate(0o666))
                    .unwrap();
            } else {
                std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
            }
            let buf = buffer(dir.path());
            within(plant, move || buf.append("h", "text").unwrap());
            assert_eq!(buffer(dir.path()).drain(100).unwrap().text, "text\n");
            let aside = set_aside(dir.path());
            assert_eq!(aside.len(), 1, "{plant}");
            let kind = fs::symlink_metadata(&aside[0]).unwrap().file_type();
            assert!(kind.is_fifo() || kind.is_symlink(), "{plant}");
        }

        // A huge regular file is not read whole: moved aside.
        let dir = tempfile::tempdir().unwrap();
        let huge = fs::File::create(dir.path().join("context.json")).unwrap();
        huge.set_len(MAX_BUFFER_BYTES as u64 + 10).unwrap();
        let buf = buffer(dir.path());
        let start = Instant::now();
        within("huge", move || buf.append("h", "after").unwrap());
        assert!(start.elapsed() < Duration::from_secs(5));
        assert_eq!(set_aside(dir.path()).len(), 1);
        assert_eq!(buffer(dir.path()).drain(100).unwrap().text, "after\n");

        // A symlinked output dir: the overflow log is refused, nothing is drained.
        let dir = tempfile::tempdir().unwrap();
        let elsewhere = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), dir.path().join("output")).unwrap();
        let buf = buffer(dir.path());
        buf.append("h", &"x".repeat(200)).unwrap();
        assert!(buf.drain(50).is_err());
        assert_eq!(buf.len().unwrap(), 1, "kept for a later drain");
        assert_eq!(fs::read_dir(elsewhere.path()).unwrap().count(), 0);
    }

    #[test]
    fn a_held_lock_fails_in_bounded_time() {
        let dir = tempfile::tempdir().unwrap();
        let buf = buffer(dir.path()).with_lock_timeout(Duration::from_millis(300));
        buf.append("h", "x").unwrap();
        // A rival holds the lock: flock belongs to an open file description, so a second
        // open of the lock file contends with the buffer's own even in this process.
        let rival = fs::File::open(dir.path().join("context.json.lock")).unwrap();
        rival.lock().unwrap();
        let start = Instant::now();
        let err = buf.append("h", "y").unwrap_err();
        let waited = start.elapsed();
        assert!(
            matches!(
                err,
                ContextBufferError::Lock(StatusError::LockTimeout { .. })
            ),
            "{err}"
        );
        assert!(
            waited >= Duration::from_millis(300) && waited < Duration::from_secs(5),
            "{waited:?}"
        );
        rival.unlock().unwrap();
        buf.append("h", "z").unwrap();
        assert_eq!(
            buf.drain(100).unwrap().text,
            "x\nz\n",
            "the refused append left nothing"
        );
    }

    /// Entries per writer in the concurrency tests.
    const PER_WRITER: usize = 15;

    /// One writer of the concurrency tests: run in its own process by
    /// `twenty_processes_append_fifo_per_writer_and_lose_nothing`.
    #[test]
    #[ignore = "run by twenty_processes_append_fifo_per_writer_and_lose_nothing"]
    fn context_buffer_writer_process() {
        let Some(dir) = std::env::var_os("HOOKVISOR_TEST_BUFFER_DIR") else {
            return;
        };
        let writer = std::env::var("HOOKVISOR_TEST_WRITER").unwrap();
        let buf = buffer(Path::new(&dir));
        for i in 0..PER_WRITER {
            buf.append(&writer, &format!("{writer}:{i}")).unwrap();
        }
    }

    /// Checks that every writer's entries are all there, each writer's in order.
    fn assert_fifo_per_writer(text: &str, writers: &[String]) {
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), writers.len() * PER_WRITER, "{text}");
        for writer in writers {
            let mine: Vec<&str> = lines
                .iter()
                .filter(|l| l.rsplit_once(':').map(|(w, _)| w) == Some(writer.as_str()))
                .copied()
                .collect();
            let expected: Vec<String> = (0..PER_WRITER).map(|i| format!("{writer}:{i}")).collect();
            assert_eq!(mine, expected, "{writer}");
        }
    }

    #[test]
    fn twenty_processes_append_fifo_per_writer_and_lose_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let exe = std::env::current_exe().unwrap();
        let writers: Vec<String> = (0..20).map(|w| format!("p{w}")).collect();
        let children: Vec<_> = writers
            .iter()
            .map(|w| {
                Command::new(&exe)
                    .args([
                        "--exact",
                        "context_buffer::tests::context_buffer_writer_process",
                        "--ignored",
                        "--test-threads=1",
                    ])
                    .env("HOOKVISOR_TEST_BUFFER_DIR", dir.path())
                    .env("HOOKVISOR_TEST_WRITER", w)
                    .output_async()
            })
            .collect();
        for child in children {
            let out = child.wait_with_output().unwrap();
            let stdout = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success() && stdout.contains("1 passed"),
                "{stdout}\n{}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        // 300 short entries fit the cap: drained whole.
        let drained = buffer(dir.path()).drain(MAX_CONTEXT_CHARS).unwrap();
        assert_eq!(drained.full_text, None);
        assert_fifo_per_writer(&drained.text, &writers);
        assert_eq!(
            set_aside(dir.path()),
            Vec::<PathBuf>::new(),
            "nothing was corrupt"
        );
    }

    #[test]
    fn threads_and_a_second_process_append_while_one_drains() {
        let dir = tempfile::tempdir().unwrap();
        let exe = std::env::current_exe().unwrap();
        let process = Command::new(&exe)
            .args([
                "--exact",
                "context_buffer::tests::context_buffer_writer_process",
                "--ignored",
                "--test-threads=1",
            ])
            .env("HOOKVISOR_TEST_BUFFER_DIR", dir.path())
            .env("HOOKVISOR_TEST_WRITER", "proc")
            .output_async();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let buf = buffer(dir.path());
                thread::spawn(move || {
                    for i in 0..PER_WRITER {
                        buf.append("t", &format!("t{t}:{i}")).unwrap();
                    }
                })
            })
            .collect();
        // Drains racing the appends: what each drain takes plus what is left is everything.
        let buf = buffer(dir.path());
        let mut delivered = String::new();
        for _ in 0..10 {
            delivered.push_str(&buf.drain(MAX_CONTEXT_CHARS).unwrap().text);
        }
        for t in threads {
            t.join().unwrap();
        }
        assert!(process.wait_with_output().unwrap().status.success());
        delivered.push_str(&buf.drain(MAX_CONTEXT_CHARS).unwrap().text);
        let mut writers: Vec<String> = (0..4).map(|t| format!("t{t}")).collect();
        writers.push("proc".to_owned());
        assert_fifo_per_writer(&delivered, &writers);
    }

    /// A child started without waiting, so that all run at once.
    trait OutputAsync {
        fn output_async(&mut self) -> std::process::Child;
    }

    impl OutputAsync for Command {
        fn output_async(&mut self) -> std::process::Child {
            self.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        }
    }
}

//! Where a run's output goes (the capped log, the in-memory tail, the echo to our stderr) and
//! the files made for a hook: its log and its changed-files list.

use std::fs::{self, File};
use std::io::{self, Write};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use nix::unistd::{Gid, Uid};

use super::capture::{Capturing, Stream};
use super::{Credentials, Ending, ExecError, RunOptions, RunOutcome};

/// How many bytes of output a run keeps in memory for messages.
const TAIL_LIMIT: usize = 64 * 1024;
/// Longest echoed line before it is cut, so one endless line cannot grow memory.
const ECHO_LINE_LIMIT: usize = 8 * 1024;

/// Creates the log afresh and hands it to the run user, who may read it later.
pub(super) fn create_log(
    path: &Path,
    credentials: Option<&Credentials>,
) -> Result<File, ExecError> {
    fresh_file(path, credentials).map_err(|source| ExecError::Log {
        path: path.to_owned(),
        source,
    })
}

/// Writes each name's exact bytes followed by a NUL.
pub(super) fn write_changed_list(
    path: &Path,
    files: &[PathBuf],
    credentials: Option<&Credentials>,
) -> Result<(), ExecError> {
    let names = files.iter().map(|f| f.as_os_str().as_bytes());
    let mut content = Vec::with_capacity(names.clone().map(|n| n.len() + 1).sum());
    for name in names {
        content.extend_from_slice(name);
        content.push(0);
    }
    fresh_file(path, credentials)
        .and_then(|mut file| file.write_all(&content))
        .map_err(|source| ExecError::ChangedList {
            path: path.to_owned(),
            source,
        })
}

/// Replaces `path` with a new, empty, world-readable file owned by the run user.
///
/// The old file is removed and the new one made with `O_EXCL`, which never follows a symlink:
/// a hook that left `output/<id>.log` pointing at `/etc/shadow` must not get a root run to
/// truncate it. Directories created on the way are given to the run user too, so that a first
/// run as root does not lock the user out of the state dir.
fn fresh_file(path: &Path, credentials: Option<&Credentials>) -> io::Result<File> {
    // The directory is there on every run but the first: it is made only when missing.
    let file = match (replace_with_new(path), path.parent()) {
        (Err(e), Some(dir)) if e.kind() == io::ErrorKind::NotFound => {
            let missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
            fs::create_dir_all(dir)?;
            for created in missing {
                if let Ok(handle) = File::open(created) {
                    give_to(&handle, credentials);
                }
            }
            replace_with_new(path)?
        }
        (result, _) => result?,
    };
    // Names of workspace files and hook output are no secret, and the hook may run as another
    // user than the one writing; the mode must not depend on the umask.
    file.set_permissions(fs::Permissions::from_mode(0o644))?;
    give_to(&file, credentials);
    Ok(file)
}

/// Writes a whole log that no process streams into (a refused run, an action's transcript)
/// the way a run's log is made: replaced with `O_EXCL`, never through a link, mode 0644.
pub fn write_whole_log(path: &Path, bytes: &[u8]) -> io::Result<()> {
    fresh_file(path, None)?.write_all(bytes)
}

/// Times [`replace_with_new`] unlinks and creates again while other runs of the same hook race it.
const REPLACE_ATTEMPTS: u32 = 20;

/// Unlinks `path` and creates it anew with `O_EXCL`, so never through a symbolic link. Two runs
/// of the same hook at once (two `fire` processes, a rerun beside an evaluation) can both unlink
/// and then race to create: the loser unlinks the winner's file and tries again, which leaves
/// each run writing its own inode, as a plain replace would. The directory is opened first
/// without following a link (one planted at `output/` would lead anywhere) and both calls name
/// the file relative to it.
fn replace_with_new(path: &Path) -> io::Result<File> {
    use nix::errno::Errno;
    use nix::fcntl::{OFlag, open, openat};
    use nix::sys::stat::Mode;
    use nix::unistd::{UnlinkatFlags, unlinkat};

    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    // `/proc/self/fd/N` is a directory we hold open (see `agent_loop::loop_dir`), named by a
    // link only the kernel makes; a name below it is an ordinary one.
    let nofollow = if dir.parent() == Some(Path::new("/proc/self/fd")) {
        OFlag::empty()
    } else {
        OFlag::O_NOFOLLOW
    };
    let dir = match open(
        dir,
        OFlag::O_RDONLY | OFlag::O_DIRECTORY | nofollow | OFlag::O_CLOEXEC,
        Mode::empty(),
    ) {
        Ok(fd) => fd,
        Err(Errno::ENOTDIR | Errno::ELOOP) if dir.is_symlink() => {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("{} is a symbolic link, never followed", dir.display()),
            ));
        }
        Err(e) => return Err(e.into()),
    };
    let mut attempts = 1;
    loop {
        match unlinkat(&dir, name, UnlinkatFlags::NoRemoveDir) {
            Ok(()) | Err(Errno::ENOENT) => {}
            Err(e) => return Err(e.into()),
        }
        let flags =
            OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        match openat(&dir, name, flags, Mode::from_bits_truncate(0o644)) {
            Err(Errno::EEXIST) if attempts < REPLACE_ATTEMPTS => attempts += 1,
            result => return result.map(File::from).map_err(io::Error::from),
        }
    }
}

/// Chowns something we created for a hook to the hook's user, when we are root and it is not.
/// Best effort: the run itself does not depend on it.
fn give_to(file: &File, credentials: Option<&Credentials>) {
    if let Some(c) = credentials
        && Uid::effective().is_root()
        && c.uid != 0
    {
        let _ = nix::unistd::fchown(file, Some(Uid::from_raw(c.uid)), Some(Gid::from_raw(c.gid)));
    }
}

/// Where output goes: the capped log, the tail, and optionally our stderr.
pub(super) struct Sink {
    log: Option<File>,
    log_limit: u64,
    logged: u64,
    total: u64,
    /// Last byte written to the log, so notes start on a line of their own.
    last: Option<u8>,
    truncation_noted: bool,
    tail: Tail,
    echo: Option<LineEcho>,
    /// The streams kept apart, under `Capture::Separate` only.
    capture: Option<Capturing>,
}

impl Sink {
    pub(super) fn new(log: File, options: &RunOptions) -> Sink {
        Sink {
            log: Some(log),
            log_limit: options.log_limit,
            logged: 0,
            total: 0,
            last: None,
            truncation_noted: false,
            tail: Tail::default(),
            echo: options.echo_prefix.as_deref().map(LineEcho::new),
            capture: Capturing::new(options.capture),
        }
    }

    /// Output the child wrote on `stream`: to the log, the tail and the echo like any output,
    /// and to the capture of that stream.
    pub(super) fn output_from(&mut self, stream: Stream, bytes: &[u8]) {
        if let Some(capture) = &mut self.capture {
            capture.push(stream, bytes);
        }
        self.output(bytes);
    }

    fn output(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.log_limit.saturating_sub(self.logged);
        let logged = &bytes[..bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX))];
        if !logged.is_empty() {
            self.logged += logged.len() as u64;
            self.write_log(logged);
        }
        self.tail.push(bytes);
        if let Some(echo) = &mut self.echo {
            echo.feed(bytes, &mut io::stderr().lock());
        }
    }

    fn write_log(&mut self, bytes: &[u8]) {
        if let Some(log) = &mut self.log {
            if let Err(err) = log.write_all(bytes) {
                // A full disk must not fail the hook; the run goes on, unlogged.
                tracing::warn!("hook log write failed, logging stopped: {err}");
                self.log = None;
            } else if let Some(&b) = bytes.last() {
                self.last = Some(b);
            }
        }
    }

    /// Writes `line` to the log on a line of its own, whatever the hook's last byte was.
    fn write_log_line(&mut self, line: &str) {
        let mut text = Vec::with_capacity(line.len() + 2);
        if self.last.is_some_and(|b| b != b'\n') {
            text.push(b'\n');
        }
        text.extend_from_slice(line.as_bytes());
        text.push(b'\n');
        self.write_log(&text);
    }

    /// A line of ours (not the hook's): always logged, whatever the limit, on a line of its own.
    /// Notes come after the output, so the output's truncation note, if due, goes first.
    pub(super) fn note(&mut self, line: &str) {
        self.note_truncation();
        if let Some(echo) = &mut self.echo {
            echo.finish(&mut io::stderr().lock());
        }
        self.write_log_line(line);
        if self.tail.ends_open() {
            self.tail.push(b"\n");
        }
        self.tail.push(line.as_bytes());
        self.tail.push(b"\n");
        if let Some(echo) = &mut self.echo {
            echo.feed(line.as_bytes(), &mut io::stderr().lock());
            echo.finish(&mut io::stderr().lock());
        }
    }

    pub(super) fn finish(mut self, exit_code: i32, ending: Ending, start: Instant) -> RunOutcome {
        self.note_truncation();
        if let Some(echo) = &mut self.echo {
            echo.finish(&mut io::stderr().lock());
        }
        if let Some(log) = &mut self.log {
            let _ = log.flush();
        }
        RunOutcome {
            exit_code,
            timed_out: ending == Ending::TimedOut,
            cancelled: ending == Ending::Cancelled,
            duration: start.elapsed(),
            tail: self.tail.into_string(),
            output_bytes: self.total,
            log_truncated: self.truncation_noted,
            captured: self.capture.map(Capturing::finish),
        }
    }

    /// Writes `[output truncated: N more bytes not logged]` once, when output was cut. It goes to
    /// the log only: the tail already holds the end of the output.
    fn note_truncation(&mut self) {
        if self.truncation_noted || self.total <= self.logged {
            return;
        }
        self.truncation_noted = true;
        let line = format!(
            "[output truncated: {} more bytes not logged]",
            self.total - self.logged
        );
        self.write_log_line(&line);
    }
}

/// The last [`TAIL_LIMIT`] bytes seen, in at most twice that memory.
#[derive(Default)]
struct Tail {
    buf: Vec<u8>,
    cut: bool,
}

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        if bytes.len() >= TAIL_LIMIT {
            self.buf.clear();
            self.buf
                .extend_from_slice(&bytes[bytes.len() - TAIL_LIMIT..]);
            self.cut = true;
            return;
        }
        // Trimming only past twice the limit keeps the cost of the memmove amortised.
        if self.buf.len() + bytes.len() > 2 * TAIL_LIMIT {
            let keep = TAIL_LIMIT - bytes.len();
            self.buf.drain(..self.buf.len() - keep);
            self.cut = true;
        }
        self.buf.extend_from_slice(bytes);
    }

    fn ends_open(&self) -> bool {
        self.buf.last().is_some_and(|&b| b != b'\n')
    }

    fn into_string(self) -> String {
        let start = self.buf.len().saturating_sub(TAIL_LIMIT);
        let mut tail = &self.buf[start..];
        if self.cut || start > 0 {
            // The cut may fall inside a character; drop its continuation bytes rather than show
            // a replacement character.
            let skip = tail
                .iter()
                .take(3)
                .take_while(|&&b| b & 0xC0 == 0x80)
                .count();
            tail = &tail[skip..];
        }
        String::from_utf8_lossy(tail).into_owned()
    }
}

/// Copies output to a writer line by line, each line prefixed `[name] `.
struct LineEcho {
    prefix: Vec<u8>,
    line: Vec<u8>,
}

impl LineEcho {
    fn new(name: &str) -> LineEcho {
        LineEcho {
            prefix: format!("[{}] ", crate::message::sanitize(name)).into_bytes(),
            line: Vec::new(),
        }
    }

    fn feed(&mut self, mut bytes: &[u8], out: &mut impl Write) {
        while !bytes.is_empty() {
            let room = ECHO_LINE_LIMIT - self.line.len();
            match bytes.iter().take(room).position(|&b| b == b'\n') {
                Some(i) => {
                    self.line.extend_from_slice(&bytes[..i]);
                    bytes = &bytes[i + 1..];
                    self.emit(out);
                }
                None => {
                    let take = bytes.len().min(room);
                    self.line.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if self.line.len() == ECHO_LINE_LIMIT {
                        self.emit(out);
                    }
                }
            }
        }
    }

    fn finish(&mut self, out: &mut impl Write) {
        if !self.line.is_empty() {
            self.emit(out);
        }
    }

    fn emit(&mut self, out: &mut impl Write) {
        // One write per line, so lines of hooks echoing at the same time do not mix.
        // Escape sequences could rewrite the terminal around the line (or the init's own
        // messages); they are removed as in the re-prompt.
        let line = crate::message::sanitize(&String::from_utf8_lossy(&self.line));
        let mut whole = Vec::with_capacity(self.prefix.len() + line.len() + 1);
        whole.extend_from_slice(&self.prefix);
        whole.extend_from_slice(line.as_bytes());
        whole.push(b'\n');
        let _ = out.write_all(&whole);
        self.line.clear();
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::time::Duration;

    use super::*;
    use crate::event::HookKind;
    use crate::exec::run_hook;
    use crate::exec::tests::{fixture, run, run_isolated};

    #[test]
    fn stdout_and_stderr_interleave_in_order_and_the_log_is_overwritten() {
        let f = fixture();
        let hook = f.hook(
            "mixed",
            HookKind::Session,
            "echo out1; echo err1 >&2; echo out2; echo err2 >&2",
        );
        let out = run(&f, &hook);
        let expected = "out1\nerr1\nout2\nerr2\n";
        assert_eq!(f.log("mixed"), expected);
        assert_eq!(out.tail, expected);
        assert_eq!(out.output_bytes, expected.len() as u64);

        let hook = f.hook("mixed", HookKind::Session, "echo second");
        run(&f, &hook);
        assert_eq!(f.log("mixed"), "second\n");
    }

    #[test]
    fn the_log_is_capped_with_a_note_and_the_tail_keeps_the_end() {
        let f = fixture();
        let hook = f.hook(
            "chatty",
            HookKind::Session,
            "printf 'abcdefghij%.0s' $(seq 10); echo END",
        );
        let options = RunOptions {
            log_limit: 25,
            ..RunOptions::default()
        };
        let out = run_hook(&f.ctx, &hook, &[], &options).unwrap();
        assert_eq!(out.output_bytes, 104);
        assert!(out.log_truncated);
        assert_eq!(
            f.log("chatty"),
            "abcdefghijabcdefghijabcde\n[output truncated: 79 more bytes not logged]\n"
        );
        assert!(out.tail.ends_with("abcdefghijEND\n"), "{:?}", out.tail);

        // Notes come in the order things happened: the output was cut, then the clock ran out.
        let mut hook = f.hook(
            "cut-slow",
            HookKind::Session,
            "printf 0123456789; exec sleep 1000",
        );
        // A second: the hook must have printed before the clock runs out, even on a loaded
        // machine.
        hook.timeout = Duration::from_secs(1);
        let options = RunOptions {
            log_limit: 4,
            kill_grace: Duration::from_millis(100),
            ..RunOptions::default()
        };
        let out = run_hook(&f.ctx, &hook, &[], &options).unwrap();
        assert!(out.timed_out && out.log_truncated);
        assert_eq!(
            f.log("cut-slow"),
            "0123\n[output truncated: 6 more bytes not logged]\n[hook timed out after 1s]\n"
        );
        assert_eq!(out.tail, "0123456789\n[hook timed out after 1s]\n");
    }

    #[test]
    fn a_symlink_planted_at_the_log_path_is_replaced_not_followed() {
        let f = fixture();
        let precious = f.ctx.workspace.join("precious");
        fs::write(&precious, "keep me").unwrap();
        let log = f.ctx.log_path("sneaky");
        fs::create_dir_all(log.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&precious, &log).unwrap();
        let hook = f.hook("sneaky", HookKind::Session, "echo overwritten");
        run(&f, &hook);
        assert_eq!(fs::read_to_string(&precious).unwrap(), "keep me");
        assert!(fs::symlink_metadata(&log).unwrap().is_file());
        assert_eq!(f.log("sneaky"), "overwritten\n");
    }

    #[test]
    fn a_symlink_planted_at_the_output_dir_is_not_followed() {
        let f = fixture();
        let elsewhere = f.ctx.workspace.join("elsewhere");
        fs::create_dir(&elsewhere).unwrap();
        fs::write(elsewhere.join("sneaky.log"), "keep me").unwrap();
        let log = f.ctx.log_path("sneaky");
        fs::create_dir_all(log.parent().unwrap().parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&elsewhere, log.parent().unwrap()).unwrap();
        let err = create_log(&log, None).unwrap_err();
        assert!(err.to_string().contains(&*log.to_string_lossy()), "{err}");
        assert_eq!(
            fs::read_to_string(elsewhere.join("sneaky.log")).unwrap(),
            "keep me"
        );
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 1);
    }

    #[test]
    fn only_the_held_directory_itself_is_followed_under_proc_self_fd() {
        use std::os::fd::AsRawFd;
        let f = fixture();
        let held = f.ctx.workspace.join("held");
        let elsewhere = f.ctx.workspace.join("elsewhere");
        fs::create_dir(&held).unwrap();
        fs::create_dir(&elsewhere).unwrap();
        std::os::unix::fs::symlink(&elsewhere, held.join("output")).unwrap();
        let dir = File::open(&held).unwrap();
        let pinned = PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd()));
        create_log(&pinned.join("direct.log"), None).unwrap();
        assert!(held.join("direct.log").is_file());
        assert!(create_log(&pinned.join("output/sneaky.log"), None).is_err());
        assert_eq!(fs::read_dir(&elsewhere).unwrap().count(), 0);
    }

    /// The real measurement runs in a child process of its own (see `huge_output_child`), so
    /// the memory of tests running in parallel cannot blur it.
    #[test]
    fn huge_output_keeps_memory_small() {
        run_isolated("exec::output::tests::huge_output_child");
    }

    pub(in crate::exec) fn high_water_kib() -> u64 {
        let status = fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    #[test]
    #[ignore = "run by huge_output_keeps_memory_small in a process of its own"]
    fn huge_output_child() {
        const SIZE: u64 = 300_000_000;
        let f = fixture();
        let hook = f.hook(
            "huge",
            HookKind::Session,
            &format!("head -c {SIZE} /dev/zero"),
        );
        let before = high_water_kib();
        let out = run(&f, &hook);
        let growth = high_water_kib().saturating_sub(before);
        assert!(out.success(), "{out:?}");
        assert_eq!(out.output_bytes, SIZE);
        assert!(out.log_truncated);
        assert_eq!(out.tail.len(), TAIL_LIMIT);
        assert!(growth < 32 * 1024, "peak memory grew by {growth} KiB");
        let limit = RunOptions::default().log_limit;
        let log = fs::read(f.ctx.log_path("huge")).unwrap();
        let note = format!(
            "\n[output truncated: {} more bytes not logged]\n",
            SIZE - limit
        );
        assert_eq!(log.len() as u64, limit + note.len() as u64);
        assert!(log.ends_with(note.as_bytes()));
    }

    #[test]
    fn unwritable_log_is_an_error_naming_the_path() {
        let f = fixture();
        fs::create_dir_all(&f.ctx.state_dir).unwrap();
        // A file where the output directory should be: fails even for root.
        fs::write(f.ctx.state().output_dir(), "").unwrap();
        let hook = f.hook("x", HookKind::Session, "exit 0");
        let err = run_hook(&f.ctx, &hook, &[], &RunOptions::default()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&f.ctx.log_path("x").display().to_string()),
            "{text}"
        );
        assert!(text.contains("--state-dir"), "{text}");
    }

    #[test]
    fn echo_prefixes_lines_and_cuts_endless_ones() {
        let cases: &[(&[&[u8]], &str)] = &[
            (&[b"a\nb\n"], "[h] a\n[h] b\n"),
            (&[b"par", b"tial\nend"], "[h] partial\n[h] end\n"),
            (&[b"\n\n"], "[h] \n[h] \n"),
        ];
        for (chunks, expected) in cases {
            let mut echo = LineEcho::new("h");
            let mut out = Vec::new();
            for chunk in *chunks {
                echo.feed(chunk, &mut out);
            }
            echo.finish(&mut out);
            assert_eq!(String::from_utf8(out).unwrap(), *expected);
        }
        let mut echo = LineEcho::new("h");
        let mut out = Vec::new();
        echo.feed(&vec![b'x'; ECHO_LINE_LIMIT * 2 + 1], &mut out);
        echo.finish(&mut out);
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 3);
    }

    #[test]
    fn tail_keeps_the_last_bytes_on_a_character_boundary() {
        let cases: Vec<(Vec<Vec<u8>>, usize, &str)> = vec![
            (vec![b"short".to_vec()], 5, "short"),
            (
                vec![vec![b'a'; TAIL_LIMIT + 10], b"end".to_vec()],
                TAIL_LIMIT,
                "end",
            ),
            (
                (0..300)
                    .map(|i| format!("{i:04}").repeat(100).into_bytes())
                    .collect(),
                TAIL_LIMIT,
                "0299",
            ),
            // 'é' is two bytes; a cut in its middle drops the orphan byte.
            (
                vec![format!("{}z", "é".repeat(TAIL_LIMIT)).into_bytes()],
                TAIL_LIMIT,
                "éz",
            ),
        ];
        for (chunks, len, end) in cases {
            let mut tail = Tail::default();
            for chunk in &chunks {
                tail.push(chunk);
            }
            assert!(tail.buf.len() <= 2 * TAIL_LIMIT);
            let text = tail.into_string();
            assert!(text.len() <= len && text.len() + 1 >= len, "{}", text.len());
            assert!(text.ends_with(end));
            assert!(!text.contains('\u{FFFD}'));
        }
    }
}

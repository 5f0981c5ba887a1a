//! Keeping stdout and stderr apart for the caller ([`Capture::Separate`], rule 6 of the module
//! documentation): the first bytes of stdout, the last bytes of stderr, each within its limit.

use std::collections::VecDeque;

use super::{Capture, Captured};

/// Which pipe a chunk of output came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Stream {
    /// The one pipe of [`Capture::Merged`]: both streams, nothing is captured.
    Merged,
    /// The child's stdout under [`Capture::Separate`].
    Stdout,
    /// The child's stderr under [`Capture::Separate`].
    Stderr,
}

/// The two buffers of a separate capture.
#[derive(Debug)]
pub(super) struct Capturing {
    stdout: Head,
    stderr: Last,
}

impl Capturing {
    /// `None` for [`Capture::Merged`], which captures nothing beyond the tail.
    pub(super) fn new(capture: Capture) -> Option<Capturing> {
        match capture {
            Capture::Merged => None,
            Capture::Separate { limit } => Some(Capturing {
                stdout: Head::new(limit),
                stderr: Last::new(limit),
            }),
        }
    }

    pub(super) fn push(&mut self, stream: Stream, bytes: &[u8]) {
        match stream {
            Stream::Stdout => self.stdout.push(bytes),
            Stream::Stderr => self.stderr.push(bytes),
            Stream::Merged => {}
        }
    }

    pub(super) fn finish(self) -> Captured {
        Captured {
            stdout_truncated: self.stdout.truncated,
            stdout: self.stdout.buf,
            stderr_truncated: self.stderr.truncated,
            stderr: self.stderr.buf.into(),
        }
    }
}

/// The first `limit` bytes: a JSON decision is only useful whole, so its beginning is kept.
#[derive(Debug)]
struct Head {
    buf: Vec<u8>,
    limit: usize,
    truncated: bool,
}

impl Head {
    fn new(limit: usize) -> Head {
        // Nothing is reserved up front: the limit may be far larger than what a hook prints.
        Head {
            buf: Vec::new(),
            limit,
            truncated: false,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        let room = self.limit.saturating_sub(self.buf.len());
        let take = bytes.len().min(room);
        self.buf
            .extend_from_slice(bytes.get(..take).unwrap_or_default());
        if take < bytes.len() {
            self.truncated = true;
        }
    }
}

/// The last `limit` bytes: the end of an error message is what explains it.
#[derive(Debug)]
struct Last {
    buf: VecDeque<u8>,
    limit: usize,
    truncated: bool,
}

impl Last {
    fn new(limit: usize) -> Last {
        Last {
            buf: VecDeque::new(),
            limit,
            truncated: false,
        }
    }

    fn push(&mut self, bytes: &[u8]) {
        // Only the chunk's own last `limit` bytes can survive; dropping the rest first keeps the
        // buffer within `limit` plus nothing, whatever the chunk size.
        let keep_from = bytes.len().saturating_sub(self.limit);
        let bytes = bytes.get(keep_from..).unwrap_or_default();
        if keep_from > 0 {
            self.truncated = true;
        }
        let over = (self.buf.len() + bytes.len()).saturating_sub(self.limit);
        if over > 0 {
            self.truncated = true;
            self.buf.drain(..over.min(self.buf.len()));
        }
        self.buf.extend(bytes);
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::time::{Duration, Instant};

    use nix::sys::signal::{Signal, kill};
    use nix::unistd::Pid;

    use super::*;
    use crate::event::HookKind;
    use crate::exec::output::tests::high_water_kib;
    use crate::exec::tests::{Fixture, fixture, run, run_isolated};
    use crate::exec::{RunOptions, RunOutcome, run_hook};
    use crate::hook::Hook;

    fn separate(f: &Fixture, hook: &Hook, limit: usize) -> (RunOutcome, Captured) {
        let options = RunOptions {
            capture: Capture::Separate { limit },
            ..RunOptions::default()
        };
        let mut out = run_hook(&f.ctx, hook, &[], &options).unwrap();
        let captured = out.captured.take().expect("a separate run captures");
        (out, captured)
    }

    fn captured(limit: usize, chunks: &[(Stream, &[u8])]) -> Captured {
        let mut c = Capturing::new(Capture::Separate { limit }).unwrap();
        for (stream, bytes) in chunks {
            c.push(*stream, bytes);
        }
        c.finish()
    }

    #[test]
    fn limits_keep_the_head_of_stdout_and_the_end_of_stderr() {
        use Stream::{Merged, Stderr, Stdout};
        // (limit, chunks, stdout, stdout_truncated, stderr, stderr_truncated)
        type Case = (
            usize,
            &'static [(Stream, &'static [u8])],
            &'static [u8],
            bool,
            &'static [u8],
            bool,
        );
        let cases: &[Case] = &[
            (4, &[], b"", false, b"", false),
            (
                4,
                &[(Stdout, b"abcd"), (Stderr, b"wxyz")],
                b"abcd",
                false,
                b"wxyz",
                false,
            ),
            (
                4,
                &[(Stdout, b"abcde"), (Stderr, b"vwxyz")],
                b"abcd",
                true,
                b"wxyz",
                true,
            ),
            (
                4,
                &[(Stdout, b"ab"), (Stdout, b"cd"), (Stdout, b"e")],
                b"abcd",
                true,
                b"",
                false,
            ),
            (
                4,
                &[(Stderr, b"ab"), (Stderr, b"cde"), (Stderr, b"f")],
                b"",
                false,
                b"cdef",
                true,
            ),
            (
                3,
                &[(Stderr, b"a"), (Stderr, b"0123456789")],
                b"",
                false,
                b"789",
                true,
            ),
            (0, &[(Stdout, b"x"), (Stderr, b"y")], b"", true, b"", true),
            (4, &[(Merged, b"ignored")], b"", false, b"", false),
        ];
        for (i, (limit, chunks, out, out_cut, err, err_cut)) in cases.iter().enumerate() {
            let c = captured(*limit, chunks);
            assert_eq!(c.stdout, *out, "case {i}");
            assert_eq!(c.stdout_truncated, *out_cut, "case {i}");
            assert_eq!(c.stderr, *err, "case {i}");
            assert_eq!(c.stderr_truncated, *err_cut, "case {i}");
        }
        assert!(Capturing::new(Capture::Merged).is_none());
    }

    #[test]
    fn interleaved_streams_are_captured_apart_and_logged_whole() {
        let f = fixture();
        // Non-UTF-8 bytes on both streams; each printf is one write of a whole line.
        let hook = f.hook(
            "both",
            HookKind::Session,
            "i=0\nwhile [ $i -lt 200 ]; do\n  printf 'out %d \\377\\n' $i\n  \
             printf 'err %d \\376\\n' $i >&2\n  i=$((i+1))\ndone",
        );
        let (out, captured) = separate(&f, &hook, 1 << 20);
        assert!(out.success(), "{out:?}");
        let lines = |prefix: &str, last: u8| -> Vec<u8> {
            (0..200)
                .flat_map(|i| {
                    let mut line = format!("{prefix} {i} ").into_bytes();
                    line.extend_from_slice(&[last, b'\n']);
                    line
                })
                .collect()
        };
        let (stdout, stderr) = (lines("out", 0xFF), lines("err", 0xFE));
        assert_eq!(captured.stdout, stdout);
        assert_eq!(captured.stderr, stderr);
        assert!(!captured.stdout_truncated && !captured.stderr_truncated);
        assert_eq!(out.output_bytes, (stdout.len() + stderr.len()) as u64);

        // The log has every byte: each stream's lines in their own order, however the two mix.
        let log = fs::read(f.ctx.log_path("both")).unwrap();
        assert_eq!(log.len(), stdout.len() + stderr.len());
        let of = |prefix: &[u8]| -> Vec<u8> {
            log.split_inclusive(|&b| b == b'\n')
                .filter(|l| l.starts_with(prefix))
                .flatten()
                .copied()
                .collect()
        };
        assert_eq!(of(b"out "), stdout);
        assert_eq!(of(b"err "), stderr);

        // The default keeps one pipe and captures nothing.
        let out = run(&f, &hook);
        assert_eq!(out.captured, None);
        assert_eq!(out.output_bytes, (stdout.len() + stderr.len()) as u64);
    }

    #[test]
    fn each_limit_keeps_the_head_of_stdout_and_the_end_of_stderr() {
        let f = fixture();
        let hook = f.hook(
            "limits",
            HookKind::Session,
            "printf 'abcdefghij%.0s' $(seq 10); echo END\n\
             printf 'ABCDEFGHIJ%.0s' $(seq 10) >&2; echo FIN >&2",
        );
        let (out, captured) = separate(&f, &hook, 8);
        assert!(out.success(), "{out:?}");
        assert_eq!(captured.stdout, b"abcdefgh");
        assert!(captured.stdout_truncated);
        assert_eq!(captured.stderr, b"GHIJFIN\n");
        assert!(captured.stderr_truncated);
        // The limit is the capture's only: the log and the count have it all.
        assert_eq!(out.output_bytes, 208);
        assert_eq!(fs::read(f.ctx.log_path("limits")).unwrap().len(), 208);

        // Exactly the limit is whole, not truncated.
        let hook = f.hook(
            "exact",
            HookKind::Session,
            "printf 12345678; printf 87654321 >&2",
        );
        let (_, captured) = separate(&f, &hook, 8);
        assert_eq!(
            captured,
            Captured {
                stdout: b"12345678".to_vec(),
                stderr: b"87654321".to_vec(),
                stdout_truncated: false,
                stderr_truncated: false,
            }
        );
    }

    #[test]
    fn an_escaped_descendant_holding_either_pipe_does_not_hang_the_run() {
        // (which stream the daemon keeps, the redirection that closes the other)
        for (held, closes) in [("stderr", ">/dev/null"), ("stdout", "2>/dev/null")] {
            let f = fixture();
            let pid_file = f.ctx.workspace.join("daemon.pid");
            let hook = f.hook(
                "escape",
                HookKind::Session,
                &format!(
                    "setsid sh -c 'echo $$ > daemon.pid.tmp; mv daemon.pid.tmp daemon.pid; \
                     exec sleep 1000' {closes} &\n\
                     while [ ! -e daemon.pid ]; do :; done\necho out; echo err >&2"
                ),
            );
            let started = Instant::now();
            let (out, captured) = separate(&f, &hook, 1024);
            let elapsed = started.elapsed();
            if let Ok(pid) = fs::read_to_string(&pid_file).map(|p| p.trim().parse::<i32>()) {
                let _ = pid.map(|pid| kill(Pid::from_raw(pid), Signal::SIGKILL));
            }
            assert!(out.success(), "{held}: {out:?}");
            assert!(elapsed < Duration::from_secs(2), "{held}: took {elapsed:?}");
            assert_eq!(captured.stdout, b"out\n", "{held}");
            assert_eq!(captured.stderr, b"err\n", "{held}");
            assert!(
                out.tail
                    .ends_with("[hookvisor: killed 1 process(es) the hook left running]\n"),
                "{held}: {:?}",
                out.tail
            );
        }
    }

    #[test]
    fn a_timeout_keeps_what_was_captured_and_leaves_our_note_out() {
        let f = fixture();
        let mut hook = f.hook(
            "slow",
            HookKind::Session,
            "echo partial; echo 'still working' >&2; exec sleep 1000",
        );
        // A second: the hook must have printed before the clock runs out, even on a loaded
        // machine.
        hook.timeout = Duration::from_secs(1);
        let options = RunOptions {
            capture: Capture::Separate { limit: 1024 },
            kill_grace: Duration::from_millis(100),
            ..RunOptions::default()
        };
        let started = Instant::now();
        let out = run_hook(&f.ctx, &hook, &[], &options).unwrap();
        assert!(started.elapsed() < Duration::from_secs(10));
        assert!(out.timed_out && out.exit_code == 124, "{out:?}");
        let captured = out.captured.unwrap();
        assert_eq!(captured.stdout, b"partial\n");
        assert_eq!(captured.stderr, b"still working\n");
        let log = String::from_utf8(fs::read(f.ctx.log_path("slow")).unwrap()).unwrap();
        assert!(
            log.contains("partial\n") && log.contains("still working\n"),
            "{log:?}"
        );
        assert!(log.ends_with("[hook timed out after 1s]\n"), "{log:?}");
    }

    #[test]
    fn a_program_that_cannot_start_has_an_empty_capture() {
        let f = fixture();
        let hook = f.raw_hook("not-exec", HookKind::Session, "#!/bin/sh\necho hi\n", 0o644);
        let (out, captured) = separate(&f, &hook, 1024);
        assert_eq!(out.exit_code, 126);
        assert!(out.tail.contains("chmod +x"), "{:?}", out.tail);
        assert_eq!(captured, Captured::default());
    }

    /// As `huge_output_keeps_memory_small`, with both streams at once and a separate capture.
    #[test]
    fn huge_separate_output_keeps_memory_small() {
        run_isolated("exec::capture::tests::huge_separate_output_child");
    }

    #[test]
    #[ignore = "run by huge_separate_output_keeps_memory_small in a process of its own"]
    fn huge_separate_output_child() {
        const EACH: u64 = 150_000_000;
        const LIMIT: usize = 1 << 20;
        let f = fixture();
        let hook = f.hook(
            "huge",
            HookKind::Session,
            &format!("head -c {EACH} /dev/zero & head -c {EACH} /dev/zero >&2; wait"),
        );
        let before = high_water_kib();
        let (out, captured) = separate(&f, &hook, LIMIT);
        let growth = high_water_kib().saturating_sub(before);
        assert!(out.success(), "{out:?}");
        assert_eq!(out.output_bytes, 2 * EACH);
        assert!(out.log_truncated);
        assert_eq!(
            (captured.stdout.len(), captured.stderr.len()),
            (LIMIT, LIMIT)
        );
        assert!(captured.stdout_truncated && captured.stderr_truncated);
        assert!(growth < 32 * 1024, "peak memory grew by {growth} KiB");
        let limit = RunOptions::default().log_limit;
        let log = fs::read(f.ctx.log_path("huge")).unwrap();
        let note = format!(
            "\n[output truncated: {} more bytes not logged]\n",
            2 * EACH - limit
        );
        assert_eq!(log.len() as u64, limit + note.len() as u64);
        assert!(log.ends_with(note.as_bytes()));
    }
}

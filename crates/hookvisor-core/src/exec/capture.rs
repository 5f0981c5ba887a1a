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
    use super::*;

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
}

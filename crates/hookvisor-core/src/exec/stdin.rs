//! The child's stdin from bytes ([`RunOptions::stdin`], rule 1 of the module documentation): a
//! sealed memory file, so that nothing but our descriptor holds the input.
//!
//! A file in a directory would be there for the agent (same uid) to rewrite between our write
//! and the hook's read, and opening a path as root would trust every directory on the way. A
//! memfd has no path: a process that reaches it through `/proc/<pid>/fd/0` can only open it
//! anew, and the seals (`F_SEAL_WRITE | F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL`) refuse every
//! write, writable shared mapping, truncation and growth, and any removal of the seals.
//!
//! Not `F_SEAL_FUTURE_WRITE`, which spares the 7 µs `F_SEAL_WRITE` spends draining every CPU's
//! page lists: it leaves writable a shared mapping the agent made through
//! `/proc/<our pid>/fd/N` before the seal (where `F_SEAL_WRITE` fails with EBUSY and the run
//! fails closed), and gVisor accepts it without enforcing it.
//!
//! [`RunOptions::stdin`]: super::RunOptions::stdin

use std::fs::File;
use std::io::{self, Seek, SeekFrom, Write};
use std::os::fd::{AsFd, OwnedFd};

use super::ExecError;
use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};

/// A sealed memfd holding `bytes`, its offset at the start, for a child's stdin.
pub(super) fn open_stdin(bytes: &[u8]) -> Result<OwnedFd, ExecError> {
    sealed(bytes).map_err(|source| ExecError::Stdin { source })
}

fn sealed(bytes: &[u8]) -> io::Result<OwnedFd> {
    // Close-on-exec: `spawn` dups it onto fd 0, which the child keeps, and no other child of
    // ours should inherit it.
    let fd = memfd_create(
        c"hookvisor-stdin",
        MFdFlags::MFD_CLOEXEC | MFdFlags::MFD_ALLOW_SEALING,
    )?;
    let mut file = File::from(fd);
    file.write_all(bytes)?;
    let seals = SealFlag::F_SEAL_SEAL
        | SealFlag::F_SEAL_SHRINK
        | SealFlag::F_SEAL_GROW
        | SealFlag::F_SEAL_WRITE;
    fcntl(file.as_fd(), FcntlArg::F_ADD_SEALS(seals))?;
    // The child shares this open file description, and so its offset: it must read from 0.
    file.seek(SeekFrom::Start(0))?;
    Ok(OwnedFd::from(file))
}

#[cfg(test)]
mod tests {
    use std::fs::{self, OpenOptions};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::account::Credentials;
    use crate::event::HookKind;
    use crate::exec::spawn::tests::ensure_test_user;
    use crate::exec::tests::fixture;
    use crate::exec::{Capture, RunOptions, run_hook};

    /// Every byte value, a JSON-looking line and more than a pipe buffer's worth, so that the
    /// child reads to the file's end.
    fn payload() -> Arc<[u8]> {
        let mut bytes: Vec<u8> = (0..=255u8).collect();
        bytes.extend_from_slice(b"{\"event\":\"tool.pre\",\"file\":\"caf\xc3\xa9 \xff\xfe\"}\n");
        bytes.extend(std::iter::repeat_n(b"0123456789abcdef".as_slice(), 8192).flatten());
        bytes.into()
    }

    #[test]
    fn stdin_bytes_reach_the_child_byte_exact_from_a_memfd() {
        let f = fixture();
        let hook = f.hook(
            "reads",
            HookKind::Session,
            "cat > got.bin\nreadlink /proc/self/fd/0 >&2",
        );
        let options = RunOptions {
            stdin: Some(payload()),
            capture: Capture::Separate { limit: 4096 },
            ..RunOptions::default()
        };
        let out = run_hook(&f.ctx, &hook, &[], &options).unwrap();
        assert!(out.success(), "{out:?}");
        assert_eq!(
            fs::read(f.ctx.workspace.join("got.bin")).unwrap(),
            &*payload()
        );
        let captured = out.captured.unwrap();
        let link = String::from_utf8_lossy(&captured.stderr);
        assert!(link.starts_with("/memfd:hookvisor-stdin"), "{link}");

        // Through stdout too, where the separate capture keeps it whole within its limit.
        let hook = f.hook("echoes", HookKind::Session, "cat");
        let options = RunOptions {
            capture: Capture::Separate { limit: 1 << 20 },
            ..options
        };
        let out = run_hook(&f.ctx, &hook, &[], &options).unwrap();
        let captured = out.captured.unwrap();
        assert_eq!(captured.stdout, &*payload());
        assert!(!captured.stdout_truncated && captured.stderr.is_empty());
        assert_eq!(fs::read(f.ctx.log_path("echoes")).unwrap(), &*payload());

        // Empty bytes are an empty stdin, not /dev/null's absence of one.
        let hook = f.hook("empty", HookKind::Session, "wc -c < /dev/stdin > n.txt");
        let options = RunOptions {
            stdin: Some(Arc::from(&b""[..])),
            ..RunOptions::default()
        };
        assert!(run_hook(&f.ctx, &hook, &[], &options).unwrap().success());
        let n = fs::read_to_string(f.ctx.workspace.join("n.txt")).unwrap();
        assert_eq!(n.trim(), "0");
    }

    /// Review finding 1: the agent runs as the hook's uid and could rewrite a stdin file
    /// between our write and the hook's read. Through the memfd it cannot: the hook waits,
    /// another process of the same uid tries every way in through `/proc/<pid>/fd/0`, and the
    /// hook still reads the original bytes.
    #[test]
    fn a_process_of_the_same_uid_cannot_change_what_the_hook_reads() {
        let f = fixture();
        let ws = f.ctx.workspace.clone();
        let hook = f.hook(
            "waits",
            HookKind::Session,
            "echo $$ > pid.txt\ni=0\nwhile [ ! -e go ] && [ $i -lt 200 ]; do sleep 0.05; i=$((i+1)); done\ncat > got.bin",
        );
        let options = RunOptions {
            stdin: Some(payload()),
            ..RunOptions::default()
        };
        let (ctx, hook2) = (f.ctx.clone(), hook.clone());
        let run = std::thread::spawn(move || run_hook(&ctx, &hook2, &[], &options));
        let start = Instant::now();
        let pid = loop {
            if let Ok(text) = fs::read_to_string(ws.join("pid.txt"))
                && let Ok(pid) = text.trim().parse::<u32>()
            {
                break pid;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "the hook never started"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        let fd0 = format!("/proc/{pid}/fd/0");
        // Opening it for writing may succeed (a new open file description); writing, truncating
        // or growing it must not.
        if let Ok(mut w) = OpenOptions::new().write(true).open(&fd0) {
            assert!(w.write_all(b"{\"event\":\"forged\"}").is_err());
            assert!(w.set_len(0).is_err());
            assert!(w.set_len(1 << 20).is_err());
        }
        if let Ok(w) = OpenOptions::new().read(true).write(true).open(&fd0) {
            assert!(
                crate::sys::map_shared_writable(w.as_fd()).is_err(),
                "a writable shared mapping was made"
            );
        }
        if let Ok(mut w) = OpenOptions::new().append(true).open(&fd0) {
            assert!(w.write_all(b"forged").is_err());
        }
        let truncated = OpenOptions::new().write(true).truncate(true).open(&fd0);
        assert!(truncated.is_err(), "O_TRUNC went through");
        // Reading it through a new description does not move the hook's offset either.
        let _ = fs::read(&fd0);
        fs::write(ws.join("go"), "").unwrap();
        let out = run.join().unwrap().unwrap();
        assert!(out.success(), "{out:?}");
        assert_eq!(fs::read(ws.join("got.bin")).unwrap(), &*payload());
    }

    /// A root run as another user reads the bytes through the descriptor it inherits.
    #[test]
    fn a_root_run_as_another_user_reads_its_stdin() {
        if ensure_test_user().is_none() {
            return;
        }
        let creds = Credentials::from_name("hv-test").unwrap();
        let f = fixture();
        let root = f.ctx.workspace.parent().unwrap();
        let open = std::os::unix::fs::PermissionsExt::from_mode(0o755);
        fs::set_permissions(root, open).unwrap();
        let hook = f.hook("as-user", HookKind::Session, "cat");
        let options = RunOptions {
            credentials: Some(creds),
            stdin: Some(Arc::from(&b"event\n"[..])),
            ..RunOptions::default()
        };
        let out = run_hook(&f.ctx, &hook, &[], &options).unwrap();
        assert_eq!(out.tail, "event\n", "{out:?}");
    }
}

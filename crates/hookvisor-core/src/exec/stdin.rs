//! The child's stdin from a file ([`RunOptions::stdin`], rule 1 of the module documentation):
//! opened by us before the fork, so the child reads through our descriptor.
//!
//! [`RunOptions::stdin`]: super::RunOptions::stdin

use std::fs::{Metadata, OpenOptions};
use std::io;
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use nix::fcntl::{FcntlArg, OFlag, fcntl};
use nix::unistd::Uid;

use super::{Credentials, ExecError};

/// Opens `path` read-only as a child's stdin.
///
/// `O_NOFOLLOW` refuses a symlink planted at the path (as `output.rs`'s `fresh_file` refuses to
/// follow one for the log); `O_NONBLOCK` makes opening a FIFO return at once instead of waiting for a
/// writer, and the file type check then refuses it, a device or a directory: only a regular file
/// has an end the child can reach. When a root run switches to another user, the file must be
/// readable by that user through its mode bits, so that the descriptor we open as root never
/// hands the hook a file its own user could not open (a hard link to `/etc/shadow`, say); the
/// directories on the way are not checked.
pub(super) fn open_stdin(
    path: &Path,
    credentials: Option<&Credentials>,
) -> Result<OwnedFd, ExecError> {
    let fail = |source: io::Error| ExecError::Stdin {
        path: path.to_owned(),
        source,
    };
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| match e.raw_os_error() {
            // What O_NOFOLLOW reports for a symlink; the kernel's own words would mislead.
            Some(libc::ELOOP) => io::Error::other("it is a symbolic link"),
            _ => e,
        })
        .map_err(fail)?;
    let meta = file.metadata().map_err(fail)?;
    if !meta.file_type().is_file() {
        return Err(fail(io::Error::other(format!(
            "it is {}, not a regular file",
            kind(&meta)
        ))));
    }
    if let Some(c) = credentials
        && Uid::effective().is_root()
        && c.uid != 0
        && !readable_by(&meta, c)
    {
        return Err(fail(io::Error::from(io::ErrorKind::PermissionDenied)));
    }
    // A regular file never blocks; the flag is cleared so the child sees an ordinary descriptor.
    fcntl(&file, FcntlArg::F_SETFL(OFlag::empty())).map_err(|e| fail(e.into()))?;
    Ok(OwnedFd::from(file))
}

/// What the file is, for the message.
fn kind(meta: &Metadata) -> &'static str {
    let t = meta.file_type();
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_dir() {
        "a directory"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() || t.is_block_device() {
        "a device"
    } else {
        "not a regular file"
    }
}

/// The kernel's read check for the user `c`: the owner's bits for the owner, else the group's for
/// a member, else the others' (root's override does not apply: `c` is not root).
fn readable_by(meta: &Metadata, c: &Credentials) -> bool {
    let mode = meta.mode();
    if meta.uid() == c.uid {
        mode & 0o400 != 0
    } else if meta.gid() == c.gid || c.groups.contains(&meta.gid()) {
        mode & 0o040 != 0
    } else {
        mode & 0o004 != 0
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;
    use std::sync::mpsc;
    use std::time::Duration;

    use super::*;
    use crate::exec::spawn::tests::ensure_test_user;
    use crate::exec::tests::fixture;
    use crate::exec::{Capture, RunOptions, run_hook};
    use crate::hook::HookKind;

    /// Every byte value, a JSON-looking line and more than a pipe buffer's worth, so that the
    /// child reads to the file's end.
    fn payload() -> Vec<u8> {
        let mut bytes: Vec<u8> = (0..=255u8).collect();
        bytes.extend_from_slice(b"{\"event\":\"tool.pre\",\"file\":\"caf\xc3\xa9 \xff\xfe\"}\n");
        bytes.extend(std::iter::repeat_n(b"0123456789abcdef".as_slice(), 8192).flatten());
        bytes
    }

    #[test]
    fn a_stdin_file_reaches_the_child_byte_exact() {
        let f = fixture();
        let input = f.ctx.workspace.join("event.json");
        fs::write(&input, payload()).unwrap();
        let hook = f.hook(
            "reads",
            HookKind::Session,
            "cat > got.bin\nreadlink /proc/self/fd/0 >&2",
        );
        let options = RunOptions {
            stdin: Some(input.clone()),
            capture: Capture::Separate { limit: 4096 },
            ..RunOptions::default()
        };
        let out = run_hook(&f.ctx, &hook, &[], &options).unwrap();
        assert!(out.success(), "{out:?}");
        assert_eq!(
            fs::read(f.ctx.workspace.join("got.bin")).unwrap(),
            payload()
        );
        let captured = out.captured.unwrap();
        assert_eq!(
            captured.stderr,
            format!("{}\n", input.display()).into_bytes()
        );

        // Through stdout too, where the separate capture keeps it whole within its limit.
        let hook = f.hook("echoes", HookKind::Session, "cat");
        let options = RunOptions {
            capture: Capture::Separate { limit: 1 << 20 },
            ..options
        };
        let out = run_hook(&f.ctx, &hook, &[], &options).unwrap();
        let captured = out.captured.unwrap();
        assert_eq!(captured.stdout, payload());
        assert!(!captured.stdout_truncated && captured.stderr.is_empty());
        assert_eq!(fs::read(f.ctx.log_path("echoes")).unwrap(), payload());
    }

    #[test]
    fn a_symlink_fifo_directory_or_missing_file_is_refused_without_blocking() {
        let f = fixture();
        let ws = &f.ctx.workspace;
        fs::write(ws.join("real.json"), "{}").unwrap();
        std::os::unix::fs::symlink(ws.join("real.json"), ws.join("link.json")).unwrap();
        nix::unistd::mkfifo(
            &ws.join("fifo"),
            nix::sys::stat::Mode::from_bits_truncate(0o600),
        )
        .unwrap();
        fs::create_dir(ws.join("dir")).unwrap();
        let cases = [
            ("link.json", "symbolic link"),
            ("fifo", "a FIFO, not a regular file"),
            ("dir", "a directory, not a regular file"),
            ("missing.json", "No such file"),
        ];
        let hook = f.hook("never", HookKind::Session, ": > ran");
        for (name, why) in cases {
            let path = ws.join(name);
            let options = RunOptions {
                stdin: Some(path.clone()),
                ..RunOptions::default()
            };
            // A FIFO without a writer would block an ordinary open forever: run it aside and
            // give up on it after a while instead of hanging the suite.
            let (done, result) = mpsc::channel();
            let (ctx, hook) = (f.ctx.clone(), hook.clone());
            std::thread::spawn(move || {
                let _ = done.send(run_hook(&ctx, &hook, &[], &options).map(|_| ()));
            });
            let err = result
                .recv_timeout(Duration::from_secs(5))
                .unwrap_or_else(|_| panic!("{name}: the run blocked"))
                .unwrap_err();
            assert!(matches!(err, ExecError::Stdin { .. }), "{name}: {err:?}");
            let text = err.to_string();
            assert!(text.contains(&path.display().to_string()), "{text}");
            assert!(text.contains(why), "{name}: {text}");
            assert!(text.contains("pass a regular file"), "{text}");
        }
        assert!(!ws.join("ran").exists(), "no run was attempted");
        assert!(!f.ctx.log_path("never").exists(), "nor its log made");
    }

    /// A root run as another user must not read, through our descriptor, what that user cannot.
    #[test]
    fn a_root_run_as_another_user_gets_only_a_file_that_user_can_read() {
        if !ensure_test_user() {
            return;
        }
        let creds = Credentials::from_name("hv-test").unwrap();
        let f = fixture();
        let root = f.ctx.workspace.parent().unwrap();
        fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
        let input = f.ctx.workspace.join("event.json");
        fs::write(&input, "secret\n").unwrap();
        let hook = f.hook("as-user", HookKind::Session, "cat");
        let options = RunOptions {
            credentials: Some(creds.clone()),
            stdin: Some(input.clone()),
            ..RunOptions::default()
        };
        // (mode, owner is the run user, readable)
        let cases = [
            (0o600, false, false),
            (0o640, false, false),
            (0o644, false, true),
            (0o600, true, true),
            (0o044, true, false),
        ];
        for (mode, owned, readable) in cases {
            let owner = if owned { creds.uid } else { 0 };
            nix::unistd::chown(
                &input,
                Some(Uid::from_raw(owner)),
                Some(nix::unistd::Gid::from_raw(0)),
            )
            .unwrap();
            fs::set_permissions(&input, fs::Permissions::from_mode(mode)).unwrap();
            let result = run_hook(&f.ctx, &hook, &[], &options);
            if readable {
                let out = result.unwrap();
                assert_eq!(out.tail, "secret\n", "{mode:o} {owned}: {out:?}");
            } else {
                let text = result.unwrap_err().to_string();
                assert!(
                    text.contains("ermission denied"),
                    "{mode:o} {owned}: {text}"
                );
            }
        }
    }
}

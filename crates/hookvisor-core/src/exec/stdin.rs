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

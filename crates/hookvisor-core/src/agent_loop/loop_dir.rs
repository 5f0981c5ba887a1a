//! `<state>/loop/`, opened once and used through that handle: an agent that replaces the
//! directory with a symbolic link (it may write the state dir) moves none of the loop's files.

use std::fs;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::PathBuf;

use super::LoopError;
use crate::state::StateDir;

/// The loop's directory, held open.
#[derive(Debug)]
pub(crate) struct LoopDir {
    /// The directory itself (`O_DIRECTORY | O_NOFOLLOW`).
    dir: fs::File,
    /// `<state>/loop`, for messages and for the agent.
    path: PathBuf,
}

impl LoopDir {
    /// Makes `<state_dir>/loop` when missing and opens it; a symbolic link there, or a
    /// directory another user owns, is refused.
    pub(crate) fn open(state: &StateDir) -> Result<LoopDir, LoopError> {
        let state_dir = state.root();
        let path = state.loop_dir();
        let state = |source: io::Error| LoopError::State {
            path: path.clone(),
            source,
        };
        fs::create_dir_all(state_dir).map_err(state)?;
        match fs::create_dir(&path) {
            Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(state(e)),
            _ => {}
        }
        let dir = fs::OpenOptions::new()
            .read(true)
            .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|e| {
                state(io::Error::new(
                    e.kind(),
                    format!("not a directory of its own (a symbolic link?): {e}"),
                ))
            })?;
        let owner = dir.metadata().map_err(state)?.uid();
        if owner != nix::unistd::geteuid().as_raw() {
            return Err(state(io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("owned by uid {owner}, not by this user"),
            )));
        }
        Ok(LoopDir { dir, path })
    }

    /// The path that opens `name` in the directory held open, whatever replaced `<state>/loop`
    /// since: the kernel resolves `/proc/self/fd/<fd>` to the open directory itself.
    pub(crate) fn pinned(&self, name: &str) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.dir.as_raw_fd())).join(name)
    }

    /// `<state>/loop/<name>`, as it is shown and given to the agent.
    pub(crate) fn shown(&self, name: &str) -> PathBuf {
        self.path.join(name)
    }

    /// Whether `name` is a regular file in the directory (a link to one is not).
    pub(crate) fn has_file(&self, name: &str) -> bool {
        fs::symlink_metadata(self.pinned(name)).is_ok_and(|m| m.is_file())
    }
}

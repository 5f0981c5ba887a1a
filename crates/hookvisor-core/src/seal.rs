//! A root hook's program, read once into a sealed memory file and executed from there.
//!
//! A hook file lives in the workspace, which the agent can write. If root executed it by its
//! path, whoever changed the file between the moment hookvisor read `run_as: root` in it and
//! the moment the kernel opened it would choose what runs as root. So a root hook is copied
//! into a `memfd`, sealed against every change (`F_SEAL_WRITE|SHRINK|GROW|SEAL`), checked to
//! still declare itself a root session hook, and executed with `execveat(fd, "",
//! AT_EMPTY_PATH)`: the bytes that run are the bytes that were read, whatever happens to the
//! file afterwards. A script's interpreter reads it as `/dev/fd/N`, so `$0` is that path; the
//! hook's own path is in `HOOKVISOR_HOOK_PATH`.

use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use crate::account::Credentials;
use crate::hook::Hook;
use crate::user_fs::first_reachable;
use nix::fcntl::{FcntlArg, SealFlag, fcntl};
use nix::sys::memfd::{MFdFlags, memfd_create};

/// The largest hook file that is sealed; a root hook is a script, not a toolchain.
pub(crate) const SEAL_LIMIT: u64 = 64 * 1024 * 1024;

/// `MFD_EXEC` (Linux 6.3): asks for an executable memfd where `vm.memfd_noexec` would not give
/// one by default. Older kernels refuse the flag with EINVAL and make executable ones anyway.
const MFD_EXEC: libc::c_uint = 0x10;

/// A hook's bytes in a sealed memory file, ready to execute.
#[derive(Debug)]
pub struct SealedScript {
    fd: OwnedFd,
    /// The file it was read from, for messages and `HOOKVISOR_HOOK_PATH`.
    pub path: PathBuf,
}

/// Which `run_as: root` hooks the init runs (`--root-hooks`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RootHooks {
    /// Every one, as the hooks dir says. The default.
    #[default]
    All,
    /// Only those whose file, and every directory above it, the run user cannot write: a
    /// workspace kept from an earlier run cannot carry the agent's edits into root.
    Owned,
    /// None: root hooks are recorded as failed and not run.
    None,
}

impl RootHooks {
    /// Parses `all`, `owned` or `none`.
    pub fn parse(text: &str) -> Result<RootHooks, String> {
        match text {
            "all" => Ok(RootHooks::All),
            "owned" => Ok(RootHooks::Owned),
            "none" => Ok(RootHooks::None),
            other => Err(format!(
                "--root-hooks {other}: use all, owned or none (see README, Security)"
            )),
        }
    }

    /// The spelling `parse` accepts.
    pub fn as_str(self) -> &'static str {
        match self {
            RootHooks::All => "all",
            RootHooks::Owned => "owned",
            RootHooks::None => "none",
        }
    }
}

/// Why a root hook will not run.
#[derive(Debug, thiserror::Error)]
pub enum SealError {
    /// The file could not be read or copied.
    #[error("{}: cannot read the root hook: {source}; check the file", path.display())]
    Io {
        /// The hook file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
    /// The file is not a regular file of at most 64 MiB.
    #[error(
        "{}: a root hook must be a regular file of at most {} MiB, not {what}",
        path.display(),
        SEAL_LIMIT >> 20
    )]
    NotSealable {
        /// The hook file.
        path: PathBuf,
        /// What it is instead.
        what: String,
    },
    /// The bytes read no longer declare a root session hook: the file changed after discovery.
    #[error(
        "{}: changed after it was read (it no longer declares a root session hook); not run",
        path.display()
    )]
    Changed {
        /// The hook file.
        path: PathBuf,
    },
    /// `--root-hooks` keeps this hook from running.
    #[error("{}: not run: {reason}", path.display())]
    Refused {
        /// The hook file.
        path: PathBuf,
        /// Why, in the policy's terms.
        reason: String,
    },
}

impl SealedScript {
    /// Reads `hook`'s file into a sealed memfd, after checking it against `policy` for `user`
    /// (the account the agent runs as; `None` when there is no unprivileged user).
    pub fn seal(
        hook: &Hook,
        policy: RootHooks,
        user: Option<&Credentials>,
    ) -> Result<SealedScript, SealError> {
        let path = hook.path.clone();
        let io_error = |source| SealError::Io {
            path: path.clone(),
            source,
        };
        if policy == RootHooks::None {
            return Err(SealError::Refused {
                path,
                reason: "--root-hooks none".to_owned(),
            });
        }
        // O_NONBLOCK: a FIFO planted under the hook's name must not block the init.
        let mut file = File::options()
            .read(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY)
            .open(&path)
            .map_err(io_error)?;
        let meta = file.metadata().map_err(io_error)?;
        if !meta.is_file() || meta.len() > SEAL_LIMIT {
            let what = if meta.is_file() {
                format!("{} bytes", meta.len())
            } else {
                "a special file".to_owned()
            };
            return Err(SealError::NotSealable { path, what });
        }
        if policy == RootHooks::Owned
            && let Some(user) = user
        {
            owned_check(&path, user)?;
        }
        let memfd = memfd(&hook.id).map_err(io_error)?;
        let mut sealed = File::from(memfd);
        let copied =
            io::copy(&mut (&mut file).take(meta.len() + 1), &mut sealed).map_err(io_error)?;
        if copied != meta.len() {
            return Err(SealError::Changed { path });
        }
        let seals = SealFlag::F_SEAL_SEAL
            | SealFlag::F_SEAL_SHRINK
            | SealFlag::F_SEAL_GROW
            | SealFlag::F_SEAL_WRITE;
        fcntl(sealed.as_fd(), FcntlArg::F_ADD_SEALS(seals)).map_err(|e| io_error(e.into()))?;
        // What was read must still say what discovery read: a root session hook.
        let mut head = Vec::new();
        sealed.seek(SeekFrom::Start(0)).map_err(io_error)?;
        (&mut sealed)
            .take(64 * 1024)
            .read_to_end(&mut head)
            .map_err(io_error)?;
        if !crate::discover::declares_root_session(hook, &head) {
            return Err(SealError::Changed { path });
        }
        Ok(SealedScript {
            fd: sealed.into(),
            path,
        })
    }

    /// The descriptor to execute.
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

/// `--root-hooks owned`: the file and every directory from `/` down to it, through the hook's
/// path as given and through the links it resolves to, are out of the user's reach.
fn owned_check(path: &Path, user: &Credentials) -> Result<(), SealError> {
    match first_reachable(path, user) {
        Ok(None) => Ok(()),
        Ok(Some(reachable)) => Err(SealError::Refused {
            path: path.to_owned(),
            reason: format!(
                "--root-hooks owned and {} can be changed by {}; make the hook and the \
                 directories above it root's and closed to others, or use --root-hooks all",
                reachable.display(),
                user.user
            ),
        }),
        Err(source) => Err(SealError::Io {
            path: path.to_owned(),
            source,
        }),
    }
}

/// A new memfd that may be sealed and executed, closed on exec (the executor opens it for the
/// hook alone).
fn memfd(id: &str) -> io::Result<OwnedFd> {
    let name = std::ffi::CString::new(format!("hookvisor-root-hook:{id}"))
        .unwrap_or_else(|_| c"hookvisor-root-hook".to_owned());
    let base = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    for flags in [base | MFD_EXEC, base] {
        match memfd_create(name.as_c_str(), MFdFlags::from_bits_retain(flags)) {
            Ok(fd) => return Ok(fd),
            Err(err) if err != nix::errno::Errno::EINVAL => return Err(err.into()),
            Err(_) => {}
        }
    }
    Err(io::Error::other("memfd_create refused every flag set"))
}

/// Sealed root hooks by id, or the reason one will not run (see `SessionPlan::root_images`).
pub type RootImages =
    std::collections::BTreeMap<String, Result<std::sync::Arc<SealedScript>, String>>;

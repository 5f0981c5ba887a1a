//! A root process acting on the file system with the run user's credentials.
//!
//! The state dir and the workspace are the user's: the agent, running as that user, can put a
//! symlink, a FIFO or a hard link anywhere in them. A root process that opened, created, read or
//! chowned a path there with its own credentials could be pointed at any file of the machine.
//! So root never does: while an [`ActingAs`] guard lives, the calling thread's file-system uid
//! and gid are the user's and its supplementary groups are the user's groups. Every `open`,
//! `mkdir`, `rename` or `unlink` is then checked as if the user made it (a link to a root-only
//! file fails with `EACCES`), and what it creates belongs to the user, so nothing needs a chown.
//!
//! The real and effective ids stay root, so the agent can neither signal nor trace the process,
//! and a child it spawns can still become root again (`setuid(0)` resets the file-system ids).
//! Everything here changes the calling thread only: `setfsuid` always does, and the groups are
//! set with the raw system call, since glibc's `setgroups` changes every thread of the process.

use std::fs::Metadata;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::unistd::{Gid, Uid, setfsgid, setfsuid};

use crate::account::Credentials;
use crate::sys;

/// While alive, the calling thread acts on the file system as a user; dropping it restores root.
#[derive(Debug)]
#[must_use = "the user's credentials last only as long as the guard"]
pub struct ActingAs {
    groups: Vec<libc::gid_t>,
    fsgid: libc::gid_t,
}

/// Takes `user`'s file-system credentials when this process is root and `user` is not root.
///
/// `Ok(None)` when there is nothing to switch: no user, the user is root, or we are not root
/// (an unprivileged process already acts as itself).
pub fn act_as(user: Option<&Credentials>) -> io::Result<Option<ActingAs>> {
    let Some(user) = user.filter(|u| u.uid != 0) else {
        return Ok(None);
    };
    if !Uid::effective().is_root() {
        return Ok(None);
    }
    let groups: Vec<libc::gid_t> = nix::unistd::getgroups()?
        .into_iter()
        .map(|g| g.as_raw())
        .collect();
    let fsgid = nix::unistd::getegid().as_raw();
    let guard = ActingAs { groups, fsgid };
    // Groups first, in the order of a real switch.
    sys::thread_setgroups(&user.groups)?;
    setfsgid(Gid::from_raw(user.gid));
    setfsuid(Uid::from_raw(user.uid));
    // setfsuid and setfsgid report the previous id, never an error: ask again to be sure (an
    // invalid id, -1, changes nothing and returns the current one).
    let now_uid = setfsuid(Uid::from_raw(u32::MAX)).as_raw();
    let now_gid = setfsgid(Gid::from_raw(u32::MAX)).as_raw();
    if now_uid != user.uid || now_gid != user.gid {
        drop(guard);
        return Err(io::Error::other(format!(
            "cannot take the file-system credentials of {} (uid {})",
            user.user, user.uid
        )));
    }
    Ok(Some(guard))
}

impl Drop for ActingAs {
    fn drop(&mut self) {
        // Restoring root's ids cannot fail while we are root.
        setfsuid(Uid::from_raw(0));
        setfsgid(Gid::from_raw(self.fsgid));
        let _ = sys::thread_setgroups(&self.groups);
    }
}

/// True when `user` can write what `meta` describes (for a directory: create, remove or rename
/// its entries): it owns it, or a group of its or everyone has write permission. The owner
/// counts whatever the mode says, since it may chmod. (POSIX ACLs are not read.)
pub(crate) fn writable_by(meta: &Metadata, user: &Credentials) -> bool {
    let mode = meta.mode();
    meta.uid() == user.uid
        || mode & 0o002 != 0
        || (mode & 0o020 != 0 && (meta.gid() == user.gid || user.groups.contains(&meta.gid())))
}

/// True when the sticky bit of the directory `meta` describes keeps `user` from renaming or
/// removing the entries it does not own: the directory is sticky and not the user's own (the
/// owner of a sticky directory may still move anything in it).
pub(crate) fn guarded_by_sticky(meta: &Metadata, user: &Credentials) -> bool {
    meta.mode() & 0o1000 != 0 && meta.uid() != user.uid
}

/// The pids of the processes running as `uid` (real, effective, saved or file-system id): the
/// agent's, when `uid` is its user. Root hooks never run beside them.
pub(crate) fn processes_of(uid: u32) -> Vec<i32> {
    crate::procfs::pids()
        .into_iter()
        .filter(|&pid| crate::procfs::uids(pid).is_some_and(|ids| ids.contains(&uid)))
        .collect()
}

/// Why root hooks must not run now, when processes of the unprivileged `user` exist (the
/// agent's): a note naming one of them. `None` when there is no such user or process.
pub fn agent_running(user: Option<&Credentials>) -> Option<String> {
    let user = user.filter(|u| u.uid != 0)?;
    let running = processes_of(user.uid);
    (!running.is_empty()).then(|| {
        format!(
            "not run: processes of {} are running (pid {}); root hooks run only before the \
             agent starts",
            user.user, running[0]
        )
    })
}

/// The first name on the way from `/` to `path` (the file itself included) that `user` could
/// change: an entry of a directory it can write (unless the directory is sticky like `/tmp`,
/// not the user's, and someone else owns the entry), or a file or directory it can write. `None` when every
/// step is out of its reach. Links on the way are followed, each checked the same way.
pub(crate) fn first_reachable(path: &Path, user: &Credentials) -> io::Result<Option<PathBuf>> {
    let resolved = path.canonicalize()?;
    for candidate in [path, resolved.as_path()] {
        let mut parent: Option<Metadata> = None;
        let mut at = PathBuf::new();
        for component in candidate.components() {
            at.push(component);
            let meta = std::fs::symlink_metadata(&at)?;
            if let Some(parent) = &parent
                && writable_by(parent, user)
                && !(guarded_by_sticky(parent, user) && meta.uid() != user.uid)
            {
                return Ok(Some(at));
            }
            // A link in a directory out of reach is root's doing; the target is walked too.
            parent = Some(std::fs::metadata(&at)?);
        }
        if parent.is_some_and(|meta| writable_by(&meta, user)) {
            return Ok(Some(candidate.to_owned()));
        }
    }
    Ok(None)
}

/// Who other than root may write `path` (whose metadata is `meta`), if anyone: the owner's
/// uid, a user a POSIX ACL gives write (`setfacl -m u:agent:rwx`, which shows in the mode only
/// as the group's bits), or `None` for a group or everyone. Any group counts, the root group
/// too: OpenShift runs the agent with gid 0 over a workspace made `g=u`, and whom else a group
/// holds cannot be known here.
fn writer_other_than_root(path: &Path, meta: &Metadata) -> io::Result<Option<Option<u32>>> {
    if meta.uid() != 0 {
        return Ok(Some(Some(meta.uid())));
    }
    let group_or_everyone = (meta.mode() & 0o022 != 0).then_some(None);
    let Some(acl) = crate::sys::posix_acl_access(path)? else {
        return Ok(group_or_everyone);
    };
    // The kernel's layout (linux/posix_acl_xattr.h): a version, then (tag, perm, id) entries.
    const USER: u16 = 0x02;
    const GROUP: u16 = 0x08;
    const MASK: u16 = 0x10;
    const WRITE: u16 = 0x02;
    let entries: Vec<(u16, u16, u32)> = acl
        .get(4..)
        .unwrap_or_default()
        .chunks_exact(8)
        .map(|e| {
            (
                u16::from_le_bytes([e[0], e[1]]),
                u16::from_le_bytes([e[2], e[3]]),
                u32::from_le_bytes([e[4], e[5], e[6], e[7]]),
            )
        })
        .collect();
    if entries
        .iter()
        .any(|&(tag, perm, _)| tag == MASK && perm & WRITE == 0)
    {
        return Ok(group_or_everyone);
    }
    let named = entries.iter().find_map(|&(tag, perm, id)| {
        (perm & WRITE != 0 && ((tag == USER && id != 0) || tag == GROUP))
            .then_some((tag == USER).then_some(id))
    });
    Ok(named.or(group_or_everyone))
}

/// Who [`writable_by_others`] found, as its refusals say it: `uid N`, or "a group or
/// everyone".
pub fn writer_name(owner: Option<u32>) -> String {
    owner.map_or_else(|| "a group or everyone".to_owned(), |u| format!("uid {u}"))
}

/// For a root process: the first name on the way from `/` to the directory `dir` (itself
/// included) that an account other than root could change (by its mode or its POSIX ACL),
/// and that account's uid (the owner's, or `None` for "a group or everyone"; see
/// [`writer_name`]). `Ok(None)` when only root can, or when this
/// process is not root (it then has nothing another account could borrow). The part of `dir`
/// that does not exist yet is root's to make, under a parent checked like the rest; links on
/// the way are followed, the target walked too.
///
/// The general rule of a root run (README "Running as root"): a state dir the agent can write
/// is acted on with the user's credentials ([`act_as`]), or not at all.
pub fn writable_by_others(dir: &Path) -> io::Result<Option<(PathBuf, Option<u32>)>> {
    if !Uid::effective().is_root() {
        return Ok(None);
    }
    let mut existing = dir.to_owned();
    while let Err(err) = std::fs::symlink_metadata(&existing) {
        if err.kind() != io::ErrorKind::NotFound || !existing.pop() {
            return Err(err);
        }
    }
    let resolved = existing.canonicalize()?;
    for candidate in [existing.as_path(), resolved.as_path()] {
        // The directory above (links followed) and who other than root may write it.
        let mut parent: Option<(Metadata, Option<Option<u32>>)> = None;
        let mut at = PathBuf::new();
        for component in candidate.components() {
            at.push(component);
            let meta = std::fs::symlink_metadata(&at)?;
            if let Some((parent, Some(writer))) = &parent
                && !(parent.mode() & 0o1000 != 0 && parent.uid() == 0 && meta.uid() == 0)
            {
                return Ok(Some((at, *writer)));
            }
            let meta = std::fs::metadata(&at)?;
            let writer = writer_other_than_root(&at, &meta)?;
            parent = Some((meta, writer));
        }
        if let Some((_, Some(writer))) = parent {
            return Ok(Some((candidate.to_owned(), writer)));
        }
    }
    Ok(None)
}

/// [`writable_by_others`] for an entry of a directory it has cleared: the entry alone, unless
/// it is a link (then the whole way to its target). A few system calls, not a walk from `/`.
pub(crate) fn entry_writable_by_others(path: &Path) -> io::Result<Option<(PathBuf, Option<u32>)>> {
    let meta = std::fs::symlink_metadata(path)?;
    if meta.file_type().is_symlink() {
        return writable_by_others(path);
    }
    Ok(writer_other_than_root(path, &meta)?.map(|writer| (path.to_owned(), writer)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    fn someone() -> Credentials {
        Credentials {
            user: "someone".into(),
            uid: 4242,
            gid: 4242,
            groups: vec![4242, 4343],
            home: "/nonexistent".into(),
            shell: "/bin/sh".into(),
        }
    }

    #[test]
    fn writable_by_owner_group_or_everyone() {
        let dir = tempfile::tempdir().unwrap();
        let me = Credentials::current().unwrap();
        let meta = |mode| {
            fs::set_permissions(dir.path(), fs::Permissions::from_mode(mode)).unwrap();
            fs::metadata(dir.path()).unwrap()
        };
        assert!(writable_by(&meta(0o700), &me), "the owner");
        assert!(!writable_by(&meta(0o755), &someone()), "a stranger");
        assert!(writable_by(&meta(0o757), &someone()), "everyone may write");
        assert!(writable_by(&meta(0o1777), &someone()), "sticky /tmp-like");
        let in_group = Credentials {
            groups: vec![4242, me.gid],
            ..someone()
        };
        assert!(
            writable_by(&meta(0o775), &in_group),
            "a member of the group"
        );
        assert!(!writable_by(&meta(0o755), &in_group), "group without write");
    }

    /// Root's own directory is root's alone until a group may write it, the root group too
    /// (OpenShift's agent has gid 0).
    #[test]
    fn the_root_group_writing_is_others_writing() {
        if !Uid::effective().is_root() {
            assert!(std::env::var_os("CI").is_none(), "CI must run this as root");
            eprintln!("note: needs root; skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        nix::unistd::chown(
            dir.path(),
            Some(Uid::from_raw(0)),
            Some(nix::unistd::Gid::from_raw(0)),
        )
        .unwrap();
        assert_eq!(writable_by_others(dir.path()).unwrap(), None);
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o770)).unwrap();
        assert_eq!(
            writable_by_others(dir.path()).unwrap(),
            Some((dir.path().to_owned(), None))
        );
    }

    #[test]
    fn a_sticky_directory_guards_only_when_it_is_not_the_users() {
        let dir = tempfile::tempdir().unwrap();
        let me = Credentials::current().unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o1777)).unwrap();
        let meta = fs::metadata(dir.path()).unwrap();
        assert!(
            guarded_by_sticky(&meta, &someone()),
            "/tmp-like, someone else's"
        );
        assert!(
            !guarded_by_sticky(&meta, &me),
            "the owner moves anything in it"
        );
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        let meta = fs::metadata(dir.path()).unwrap();
        assert!(!guarded_by_sticky(&meta, &someone()), "not sticky");
    }

    #[test]
    fn processes_of_finds_our_own() {
        let me = Credentials::current().unwrap();
        let mine = processes_of(me.uid);
        assert!(mine.contains(&(std::process::id() as i32)), "{mine:?}");
        assert!(processes_of(4_000_000_000).is_empty());
    }

    #[test]
    fn acting_as_a_user_is_checked_as_that_user_and_restored() {
        if !Uid::effective().is_root() {
            assert!(std::env::var_os("CI").is_none(), "CI must run this as root");
            eprintln!("note: needs root; skipped");
            return;
        }
        let dir = tempfile::tempdir().unwrap();
        let secret = dir.path().join("secret");
        fs::write(&secret, "root only").unwrap();
        fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
        fs::set_permissions(dir.path(), fs::Permissions::from_mode(0o777)).unwrap();
        // A thread of its own: the file-system ids are per thread, and the test harness runs
        // other tests beside this one.
        std::thread::spawn(move || {
            {
                let _guard = act_as(Some(&someone())).unwrap().expect("switched");
                let err = fs::read(&secret).unwrap_err();
                assert_eq!(err.kind(), io::ErrorKind::PermissionDenied);
                let made = secret.with_file_name("made");
                fs::write(&made, "").unwrap();
                let meta = fs::metadata(&made).unwrap();
                assert_eq!((meta.uid(), meta.gid()), (4242, 4242));
            }
            assert_eq!(fs::read(&secret).unwrap(), b"root only");
        })
        .join()
        .unwrap();
    }
}

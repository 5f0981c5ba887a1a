//! Preparing the state dir of a session as the run user, when root runs the hooks (rule 5).

use std::fs;
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, lchown};
use std::path::{Component, Path, PathBuf};

use nix::unistd::Uid;

use super::SessionError;
use crate::account::Credentials;
use crate::context::Context;
use crate::status::StatusStore;
use crate::user_fs::{act_as, guarded_by_sticky, writable_by};

/// Creates the state dir of `ctx` (and its missing parents) with an empty `status.json`, its
/// lock and `output/`, so that the user's own processes can write the state later.
///
/// When we are root and `user` is not, root creates only the missing directories whose parent
/// the user cannot write (no one but root can interfere there) and gives each to the user as it
/// makes it; from the first directory the user can write, everything is done with the user's
/// file-system credentials (rule 5). Nothing that exists is chowned.
pub fn prepare_state_dir(ctx: &Context, user: Option<&Credentials>) -> Result<(), SessionError> {
    let user = user.filter(|u| u.uid != 0 && Uid::effective().is_root());
    if let Some(user) = user {
        root_part_of_path(&ctx.state_dir, user)?;
    }
    let _acting = act_as(user).map_err(SessionError::ActAs)?;
    let output = ctx.state().output_dir();
    fs::create_dir_all(&output).map_err(|source| SessionError::CreateDir {
        path: output,
        source,
    })?;
    // An update that changes nothing still creates the lock file and a valid status.json.
    StatusStore::for_context(ctx).update(|_| ())?;
    Ok(())
}

/// Walks `dir` from `/` while no one but root can change what each name on the way refers to
/// (its parent is closed to `user`, or is sticky like `/tmp` and root owns the entry), creates
/// the first missing directory as root and gives it to `user`, and stops there or at the first
/// name the user could change (a link is followed only with the user's credentials).
fn root_part_of_path(dir: &Path, user: &Credentials) -> Result<(), SessionError> {
    let create_error = |path: &Path, source| SessionError::CreateDir {
        path: path.to_owned(),
        source,
    };
    let mut path = PathBuf::from("/");
    let mut parent = fs::metadata(&path).map_err(|e| create_error(&path, e))?;
    for component in dir.components() {
        let name = match component {
            Component::RootDir => continue,
            Component::Normal(name) => name,
            // `..` or `.` in the path: leave the rest to the user.
            _ => return Ok(()),
        };
        let child = path.join(name);
        let parent_open = writable_by(&parent, user);
        let sticky = guarded_by_sticky(&parent, user);
        match fs::symlink_metadata(&child) {
            Ok(meta) if meta.is_dir() && (!parent_open || (sticky && meta.uid() == 0)) => {
                path = child;
                parent = meta;
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound && (!parent_open || sticky) => {
                match fs::DirBuilder::new().mode(0o755).create(&child) {
                    // Someone made it first: whatever it is, the user's credentials handle it.
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => return Ok(()),
                    other => other.map_err(|e| create_error(&child, e))?,
                }
                // Ours, in a directory where the user can neither remove nor rename it.
                return lchown(&child, Some(user.uid), Some(user.gid)).map_err(|source| {
                    SessionError::HandOver {
                        path: child.clone(),
                        uid: user.uid,
                        source,
                    }
                });
            }
            Err(e) if e.kind() != io::ErrorKind::NotFound => {
                return Err(create_error(&child, e));
            }
            _ => return Ok(()),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::session::tests::Fixture;
    use crate::session::{SessionOptions, run_session};
    use crate::status::Status;

    #[test]
    fn prepare_state_dir_creates_status_lock_and_output() {
        let f = Fixture::new();
        let ctx = Context {
            state_dir: f.ctx.state_dir.join("deep/er"),
            ..f.ctx.clone()
        };
        prepare_state_dir(&ctx, None).unwrap();
        for path in [
            ctx.status_path(),
            StatusStore::for_context(&ctx).lock_path(),
            ctx.state().output_dir(),
        ] {
            assert!(path.exists(), "{}", path.display());
        }
        assert_eq!(
            StatusStore::for_context(&ctx).load().unwrap(),
            Status::default()
        );
    }

    /// An unprivileged account with no passwd entry, for the tests that run as root.
    fn someone() -> Credentials {
        Credentials {
            user: "someone".into(),
            uid: 4242,
            gid: 4343,
            groups: vec![4343],
            home: "/nonexistent".into(),
            shell: "/bin/sh".into(),
        }
    }

    #[test]
    fn root_makes_nothing_in_a_sticky_directory_the_user_owns() {
        if !Uid::effective().is_root() {
            assert!(std::env::var_os("CI").is_none(), "CI must run this as root");
            eprintln!("note: needs root; skipped");
            return;
        }
        let user = someone();
        let f = Fixture::new();
        fs::set_permissions(f._dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        // The user's own home, sticky and read-only to it: the sticky bit does not stop its
        // owner from moving entries, so root must not create anything there; the user cannot.
        let home = f._dir.path().join("home");
        fs::create_dir(&home).unwrap();
        std::os::unix::fs::lchown(&home, Some(4242), Some(4343)).unwrap();
        fs::set_permissions(&home, fs::Permissions::from_mode(0o1555)).unwrap();
        let ctx = Context {
            state_dir: home.join(".discobot/s/hooks"),
            ..f.ctx.clone()
        };
        let prepared = std::thread::scope(|s| {
            s.spawn(|| prepare_state_dir(&ctx, Some(&user)))
                .join()
                .unwrap()
        });
        assert!(prepared.is_err(), "{prepared:?}");
        assert!(!home.join(".discobot").exists());
    }

    #[test]
    fn root_prepares_a_state_dir_as_the_user_and_follows_no_planted_link() {
        if !Uid::effective().is_root() {
            assert!(
                std::env::var_os("CI").is_none(),
                "CI must run this test as root"
            );
            eprintln!("note: needs root; skipped");
            return;
        }
        use std::os::unix::fs::MetadataExt;
        let user = someone();
        let f = Fixture::new();
        fs::set_permissions(f._dir.path(), fs::Permissions::from_mode(0o755)).unwrap();
        // Missing directories under root's: made by root for the user, the rest by the user.
        let ctx = Context {
            state_dir: f._dir.path().join("state/deep"),
            ..f.ctx.clone()
        };
        // A separate thread: acting as the user changes the calling thread's credentials.
        let prepared = std::thread::scope(|s| {
            s.spawn(|| prepare_state_dir(&ctx, Some(&user)))
                .join()
                .unwrap()
        });
        prepared.unwrap();
        for path in [
            "state",
            "state/deep",
            "state/deep/output",
            "state/deep/status.json",
        ] {
            let meta = fs::symlink_metadata(f._dir.path().join(path)).unwrap();
            assert_eq!((meta.uid(), meta.gid()), (4242, 4343), "{path}");
        }

        // The user points its state dir's output at a directory of root's: nothing is made there.
        let root_only = f._dir.path().join("root-only");
        fs::create_dir(&root_only).unwrap();
        fs::set_permissions(&root_only, fs::Permissions::from_mode(0o700)).unwrap();
        let planted = f._dir.path().join("planted");
        fs::create_dir(&planted).unwrap();
        std::os::unix::fs::lchown(&planted, Some(4242), Some(4343)).unwrap();
        std::os::unix::fs::symlink(&root_only, planted.join("output")).unwrap();
        let ctx = Context {
            state_dir: planted.clone(),
            ..f.ctx.clone()
        };
        f.hook("10-a.sh", "", "echo hello");
        let plan = f.plan();
        let options = SessionOptions {
            user: Some(user.clone()),
            ..SessionOptions::default()
        };
        let runs = std::thread::scope(|s| {
            s.spawn(|| {
                prepare_state_dir(&ctx, Some(&user)).unwrap();
                run_session(&ctx, &plan.background, &options, |_| {})
            })
            .join()
            .unwrap()
        });
        // The log cannot be made where the link points: the run fails, saying why.
        assert!(!runs[0].success, "{runs:?}");
        let note = runs[0].note.as_deref().unwrap_or_default();
        assert!(note.contains("a symbolic link, never followed"), "{note}");
        assert_eq!(fs::read_dir(&root_only).unwrap().count(), 0);
        assert_eq!(fs::metadata(&root_only).unwrap().uid(), 0);
    }
}

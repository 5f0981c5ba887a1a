//! The files of a state dir the agent controls: opened only when they are regular files
//! hookvisor could have made, moved aside with a warning when they are not (rules 3 and 4 of
//! [`crate::status`], which `status.json`, its lock, the context buffer and the secrets file
//! follow).

use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::timestamp::rfc3339_millis;

/// How `status.json` and its lock are opened (rule 3). std adds `O_CLOEXEC`.
pub(crate) const OPEN_FLAGS: i32 = libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY;

/// Opens `path` read-only if it is a regular file with at most one link (rule 3), never
/// following a symbolic link and never blocking; `Ok(Err(why))` says what it is instead.
pub(crate) fn open_regular(path: &Path) -> io::Result<Result<File, String>> {
    // Looking first keeps us from opening a device or a FIFO at all; looking at what was opened
    // closes the race with whoever swaps the file in between.
    if let Some(why) = not_ours(&fs::symlink_metadata(path)?) {
        return Ok(Err(why));
    }
    let file = match OpenOptions::new()
        .read(true)
        .custom_flags(OPEN_FLAGS)
        .open(path)
    {
        Ok(file) => file,
        // Swapped since: a symbolic link now (ELOOP), or a socket (ENXIO)...
        Err(e) => {
            return match fs::symlink_metadata(path).ok().as_ref().and_then(not_ours) {
                Some(why) => Ok(Err(why)),
                None => Err(e),
            };
        }
    };
    Ok(match not_ours(&file.metadata()?) {
        Some(why) => Err(why),
        None => Ok(file),
    })
}

/// Why a file of the state dir is not one this store could have made (rule 3), or `None`.
///
/// A regular file with no link is fine: a reader may open `status.json` just before a writer
/// renames a new one over it.
pub fn not_ours(meta: &fs::Metadata) -> Option<String> {
    let kind = meta.file_type();
    let what = if kind.is_file() {
        if meta.nlink() <= 1 {
            return None;
        }
        return Some(format!(
            "is a regular file with {} hard links, not one hookvisor made",
            meta.nlink()
        ));
    } else if kind.is_symlink() {
        "a symbolic link"
    } else if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_socket() {
        "a socket"
    } else if kind.is_char_device() || kind.is_block_device() {
        "a device"
    } else if kind.is_dir() {
        "a directory"
    } else {
        "something else"
    };
    Some(format!("is {what}, not a regular file"))
}

/// Renames `path`, which `why` describes, to `<path>.corrupt-<UTC time>` with a warning
/// (rule 4). Nothing there any more is no error: someone moved it first.
pub(crate) fn move_aside(path: &Path, why: &str) -> io::Result<()> {
    let stamp = rfc3339_millis(SystemTime::now()).replace([':', '-'], "");
    let mut aside = PathBuf::from(format!("{}.corrupt-{stamp}", path.display()));
    let mut n = 1;
    while fs::symlink_metadata(&aside).is_ok() {
        aside = PathBuf::from(format!("{}.corrupt-{stamp}-{n}", path.display()));
        n += 1;
    }
    match fs::rename(path, &aside) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    }
    warn(format_args!(
        "{} {why}; moved it aside to {} and started a fresh one",
        path.display(),
        aside.display()
    ));
    Ok(())
}

/// Warns through `tracing`, or, when no subscriber listens (the init installs none), on stderr
/// as `<program>: warning: ...`: a status file moved aside is for a person to see.
pub(crate) fn warn(message: fmt::Arguments<'_>) {
    let listening =
        tracing::dispatcher::get_default(|d| !d.is::<tracing::subscriber::NoSubscriber>());
    if listening {
        tracing::warn!("{message}");
    } else {
        let program = std::env::args_os()
            .next()
            .and_then(|arg0| {
                Path::new(&arg0)
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
            })
            .unwrap_or_else(|| "hookvisor".to_owned());
        eprintln!("{program}: warning: {message}");
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::status::StatusStore;
    use crate::status::tests::{assert_status_moved_aside, mkfifo};

    #[test]
    fn a_fifo_status_json_is_moved_aside_not_read() {
        let dir = tempfile::tempdir().unwrap();
        mkfifo(&dir.path().join("status.json"));
        let aside = assert_status_moved_aside(dir.path());
        assert!(fs::symlink_metadata(aside).unwrap().file_type().is_fifo());
    }

    #[test]
    fn a_directory_named_status_json_is_moved_aside() {
        let dir = tempfile::tempdir().unwrap();
        fs::create_dir(dir.path().join("status.json")).unwrap();
        fs::write(dir.path().join("status.json/inside"), "kept").unwrap();
        let aside = assert_status_moved_aside(dir.path());
        assert_eq!(fs::read_to_string(aside.join("inside")).unwrap(), "kept");
    }

    #[test]
    fn a_symlinked_status_json_is_not_followed_and_its_target_not_leaked() {
        let dir = tempfile::tempdir().unwrap();
        // A root-only file that happens to be JSON: followed, its fields would be kept as
        // unknown ones and written into the new status.json, which dashboards and the user read.
        let secret = dir.path().join("secret.json");
        fs::write(&secret, r#"{"apiKey":"hunter2"}"#).unwrap();
        fs::set_permissions(&secret, fs::Permissions::from_mode(0o600)).unwrap();
        std::os::unix::fs::symlink(&secret, dir.path().join("status.json")).unwrap();

        let store = StatusStore::new(dir.path().join("status.json"));
        assert!(
            store.load().unwrap().extra.is_empty(),
            "the reader followed"
        );
        let aside = assert_status_moved_aside(dir.path());
        assert_eq!(fs::read_link(aside).unwrap(), secret);
        let written = fs::read_to_string(store.path()).unwrap();
        assert!(!written.contains("hunter2"), "{written}");
        assert_eq!(
            fs::metadata(store.path()).unwrap().permissions().mode() & 0o777,
            0o644,
            "the mode is not the target's either"
        );
        assert_eq!(
            fs::read_to_string(&secret).unwrap(),
            r#"{"apiKey":"hunter2"}"#
        );
        assert_eq!(
            fs::metadata(&secret).unwrap().permissions().mode() & 0o777,
            0o600
        );
    }

    #[test]
    fn a_status_json_linked_to_dev_zero_is_not_read_forever() {
        let dir = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink("/dev/zero", dir.path().join("status.json")).unwrap();
        let aside = assert_status_moved_aside(dir.path());
        assert_eq!(fs::read_link(aside).unwrap(), Path::new("/dev/zero"));
    }

    #[test]
    fn sockets_devices_and_hard_links_at_status_json_are_moved_aside() {
        // A socket cannot even be opened; a hard link may be to any file of the file system
        // (every status.json this code writes has one link).
        let dir = tempfile::tempdir().unwrap();
        let _socket =
            std::os::unix::net::UnixListener::bind(dir.path().join("status.json")).unwrap();
        let aside = assert_status_moved_aside(dir.path());
        assert!(fs::symlink_metadata(aside).unwrap().file_type().is_socket());

        let dir = tempfile::tempdir().unwrap();
        let elsewhere = dir.path().join("elsewhere.json");
        fs::write(&elsewhere, r#"{"apiKey":"hunter2"}"#).unwrap();
        fs::hard_link(&elsewhere, dir.path().join("status.json")).unwrap();
        assert_status_moved_aside(dir.path());
        let written = fs::read_to_string(dir.path().join("status.json")).unwrap();
        assert!(!written.contains("hunter2"), "{written}");
        assert_eq!(
            fs::read_to_string(&elsewhere).unwrap(),
            r#"{"apiKey":"hunter2"}"#
        );

        // Only root can make a device node (then it is the same /dev/zero, without a symlink).
        if nix::unistd::Uid::effective().is_root() {
            let dir = tempfile::tempdir().unwrap();
            nix::sys::stat::mknod(
                &dir.path().join("status.json"),
                nix::sys::stat::SFlag::S_IFCHR,
                nix::sys::stat::Mode::from_bits_truncate(0o666),
                nix::sys::stat::makedev(1, 5),
            )
            .unwrap();
            let aside = assert_status_moved_aside(dir.path());
            assert!(
                fs::symlink_metadata(aside)
                    .unwrap()
                    .file_type()
                    .is_char_device()
            );
        }
    }
}

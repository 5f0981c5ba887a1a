//! Whether the file system itself orders a replacing file's data before the rename that
//! replaces the old file, so that [`crate::state::Durability::Whole`] needs no `fdatasync`.
//!
//! `Whole` promises that after a crash a file is the old one or the new one, never empty or
//! torn. Writing a temp file and renaming it over the old one keeps that promise only if the
//! temp file's data reaches the disk before the rename does; `fdatasync` before the rename
//! forces it, at the price of a disk flush (0.5–0.8 ms on this project's disks, more than
//! everything else a hook run records; BENCHMARKS.md, case 7). Two file systems give the order
//! without it:
//!
//! 1. tmpfs keeps nothing across a crash, so there is nothing to order.
//! 2. ext4 with `auto_da_alloc` (its default) detects the replace-via-rename pattern: the rename
//!    itself starts the write of the new file's data (`ext4_alloc_da_blocks` in `ext4_rename`),
//!    before the rename's own changes exist ("auto_da_alloc" in the kernel's
//!    Documentation/admin-guide/ext4.rst). With a journal in `data=ordered` (its default), the
//!    transaction holding the rename commits only after that data is on disk. Without a
//!    journal (as some VM images make ext4, this project's benchmark machine among them) the
//!    rename's directory block and inodes are written back by the flusher, after
//!    `dirty_expire_centisecs` (30 s by default), while the data write started at the rename:
//!    the data is first by that margin, not by a barrier. An `fdatasync` would not make the
//!    promise hold there either: without a journal nothing orders the freed old inode against
//!    the new directory entry, and e2fsck drops an entry whose inode is free, which only a
//!    directory fsync ([`crate::state::Durability::Durable`]) rules out. So ext4 needs no sync
//!    with `auto_da_alloc` and without `data=writeback` (where a journal commits the rename
//!    without waiting for data), journal or not. That holds only when the rename replaces an
//!    existing file, so a first write still syncs. The options are read from
//!    `/proc/fs/ext4/<dev>/options`, which lists every one (`auto_da_alloc`, or
//!    `noauto_da_alloc`; `data=writeback` when so mounted), the device name from
//!    `/sys/dev/block/<major>:<minor>`: two small reads, once per device and process, where
//!    `/proc/self/mountinfo` cost a tenth of a `fire`.
//!
//! Every other file system, or any doubt (an unreadable file, an unknown device), syncs.

use std::collections::HashMap;
use std::fs::File;
use std::io::Read as _;
use std::os::fd::AsFd;
use std::os::unix::fs::MetadataExt;
use std::sync::{Mutex, OnceLock};

use nix::sys::statfs::{EXT4_SUPER_MAGIC, TMPFS_MAGIC, fstatfs};

/// Whether a temp file `file`, renamed over an existing file, reaches the disk before that
/// rename does without an `fdatasync` (see the module rules).
pub(crate) fn orders_replace(file: &File) -> bool {
    let Ok(stat) = fstatfs(file.as_fd()) else {
        return false;
    };
    let kind = stat.filesystem_type();
    if kind == TMPFS_MAGIC {
        return true;
    }
    // ext2 and ext3 have this magic number too; /proc/fs/ext4 knows only what ext4 mounted.
    if kind != EXT4_SUPER_MAGIC {
        return false;
    }
    let Ok(meta) = file.metadata() else {
        return false;
    };
    let device = meta.dev();
    // One look per device and process: `serve` writes status.json on every run.
    static KNOWN: OnceLock<Mutex<HashMap<u64, bool>>> = OnceLock::new();
    let known = KNOWN.get_or_init(Mutex::default);
    if let Some(&ordered) = known.lock().unwrap_or_else(|e| e.into_inner()).get(&device) {
        return ordered;
    }
    let ordered = ext4_device_orders_replace(device);
    known
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(device, ordered);
    ordered
}

/// Rule 2 for the ext4 file system on `device`.
fn ext4_device_orders_replace(device: u64) -> bool {
    let (major, minor) = (nix::sys::stat::major(device), nix::sys::stat::minor(device));
    let Ok(link) = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}")) else {
        return false;
    };
    let Some(name) = link.file_name().and_then(|n| n.to_str()) else {
        return false;
    };
    // procfs says size 0, so std would read it 32 bytes at a time; it is under 1 KiB.
    let mut options = String::with_capacity(4096);
    File::open(format!("/proc/fs/ext4/{name}/options"))
        .and_then(|mut file| file.read_to_string(&mut options))
        .is_ok_and(|_| options_order_replace(&options))
}

/// `/proc/fs/ext4/<dev>/options`, one option a line: `auto_da_alloc` on, and no
/// `data=writeback`.
fn options_order_replace(options: &str) -> bool {
    let has = |option: &str| options.lines().any(|line| line.trim() == option);
    has("auto_da_alloc") && !has("data=writeback")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_da_alloc_without_writeback_orders_a_replace() {
        let defaults = "rw\ndelalloc\nbarrier\nauto_da_alloc\ndata=ordered\n";
        assert!(options_order_replace(defaults));
        // ext4 without a journal lists no data= mode.
        assert!(options_order_replace("rw\nauto_da_alloc\n"));
        assert!(!options_order_replace(
            "rw\nnoauto_da_alloc\ndata=ordered\n"
        ));
        assert!(!options_order_replace(
            "rw\nauto_da_alloc\ndata=writeback\n"
        ));
        assert!(!options_order_replace(""));
    }

    #[test]
    fn a_file_on_tmpfs_needs_no_sync_and_ext4_is_judged_by_its_options() {
        if let Ok(file) = tempfile::tempfile_in("/dev/shm") {
            assert!(orders_replace(&file));
        }
        let file = tempfile::tempfile_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let device = file.metadata().unwrap().dev();
        let (major, minor) = (nix::sys::stat::major(device), nix::sys::stat::minor(device));
        let options = std::fs::read_link(format!("/sys/dev/block/{major}:{minor}"))
            .ok()
            .and_then(|l| l.file_name().map(|n| n.to_string_lossy().into_owned()))
            .and_then(|name| std::fs::read_to_string(format!("/proc/fs/ext4/{name}/options")).ok());
        let is_ext4 = fstatfs(file.as_fd()).unwrap().filesystem_type() == EXT4_SUPER_MAGIC;
        let expected = is_ext4 && options.as_deref().is_some_and(options_order_replace);
        assert_eq!(orders_replace(&file), expected, "{options:?}");
    }
}

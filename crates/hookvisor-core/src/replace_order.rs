//! Whether the file system itself orders a replacing file's data before the rename that
//! replaces the old file, so that [`crate::state::Durability::Whole`] needs no `fdatasync`.
//!
//! `Whole` promises that after a crash a file is the old one or the new one, never empty or
//! torn. Writing a temp file and renaming it over the old one keeps that promise only if the
//! temp file's data reaches the disk before the rename does; `fdatasync` before the rename
//! forces it, at the price of a journal commit (0.5–0.6 ms on this project's ext4 disks, more
//! than everything else a hook run records; BENCHMARKS.md, case 7). Two file systems give
//! the order without it:
//!
//! 1. tmpfs keeps nothing across a crash, so there is nothing to order.
//! 2. ext4 in its default `data=ordered` mode with `auto_da_alloc` (the default) detects the
//!    replace-via-rename pattern and forces the new file's data blocks to disk before the
//!    rename commits ("auto_da_alloc" in the kernel's Documentation/admin-guide/ext4.rst).
//!    That holds only when the rename replaces an existing file, so a first write still syncs,
//!    and only for ext4 itself (ext2 and ext3 share its magic number: the fstype in
//!    `/proc/self/mountinfo` decides) mounted without `noauto_da_alloc` or `data=writeback`.
//!
//! Every other file system, or any doubt (no mount id, an unreadable mountinfo), syncs.

use std::collections::HashMap;
use std::fs::File;
use std::os::fd::AsFd;
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
    // ext2 and ext3 have this magic number too.
    if kind != EXT4_SUPER_MAGIC {
        return false;
    }
    let Some(mount) = crate::sys::mount_id(file.as_fd()) else {
        return false;
    };
    // One read of mountinfo per mount and process: `serve` writes status.json on every run.
    static KNOWN: OnceLock<Mutex<HashMap<u64, bool>>> = OnceLock::new();
    let known = KNOWN.get_or_init(Mutex::default);
    if let Some(&ordered) = known.lock().unwrap_or_else(|e| e.into_inner()).get(&mount) {
        return ordered;
    }
    let ordered = std::fs::read_to_string("/proc/self/mountinfo")
        .is_ok_and(|info| ext4_orders_replace(&info, mount));
    known
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(mount, ordered);
    ordered
}

/// Rule 2 on the line of `mountinfo` for `mount`: `ID PARENT MAJ:MIN ROOT POINT OPTIONS
/// [OPTIONAL…] - FSTYPE SOURCE SUPER_OPTIONS`.
fn ext4_orders_replace(mountinfo: &str, mount: u64) -> bool {
    let Some(line) = mountinfo
        .lines()
        .find(|line| line.split(' ').next() == Some(mount.to_string().as_str()))
    else {
        return false;
    };
    let Some((_, after)) = line.split_once(" - ") else {
        return false;
    };
    let mut fields = after.split(' ');
    let (Some(fstype), Some(_source), Some(options)) =
        (fields.next(), fields.next(), fields.next())
    else {
        return false;
    };
    fstype == "ext4"
        && options
            .split(',')
            .all(|option| option != "noauto_da_alloc" && option != "data=writeback")
}

#[cfg(test)]
mod tests {
    use super::*;

    const INFO: &str = "\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/vda rw,errors=remount-ro
23 22 0:21 / /tmp rw,nosuid - tmpfs tmpfs rw,size=100k
24 22 8:2 / /data rw - ext4 /dev/vdb rw,noauto_da_alloc
25 22 8:3 / /wb rw - ext4 /dev/vdc rw,data=writeback
26 22 8:4 / /old rw - ext3 /dev/vdd rw,data=ordered
";

    #[test]
    fn only_ext4_with_its_defaults_orders_a_replace() {
        assert!(ext4_orders_replace(INFO, 22));
        for mount in [23, 24, 25, 26, 99] {
            assert!(!ext4_orders_replace(INFO, mount), "mount {mount}");
        }
        assert!(!ext4_orders_replace("garbage\n", 22));
    }

    #[test]
    fn a_file_on_tmpfs_needs_no_sync_and_the_answer_for_this_disk_is_its_mountinfo() {
        if let Ok(file) = tempfile::tempfile_in("/dev/shm") {
            assert!(orders_replace(&file));
        }
        let file = tempfile::tempfile_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        let mount = crate::sys::mount_id(file.as_fd()).expect("kernel reports mount ids");
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
        let line = info
            .lines()
            .find(|l| l.split(' ').next() == Some(mount.to_string().as_str()))
            .unwrap();
        let ext4_defaults = line.contains(" - ext4 ")
            && !line.contains("noauto_da_alloc")
            && !line.contains("data=writeback");
        assert_eq!(orders_replace(&file), ext4_defaults, "{line}");
    }
}

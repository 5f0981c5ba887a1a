//! The raw system calls of hookvisor that nix does not offer, each written once: the only
//! module of the core allowed `unsafe`, shared by the executor, the PID-1 init and `hookvisor
//! serve`. What nix has (memfds and seals, credentials, process groups, signal masks,
//! `prctl`) is called through nix where it is used.
//!
//! What is left: `waitpid` with the raw status (nix's `WaitStatus` cannot hold a death by a
//! real-time signal), `kill` with a raw signal number, `pidfd_open`, `close_range`, the
//! per-thread `setgroups`, `rt_sigaction` for glibc's reserved signals, `execveat` and
//! `posix_spawn` with `addchdir_np`/`addclosefrom_np`, and `getxattr` for a POSIX ACL.
//!
//! Everything here is a safe function over one or two system calls. The functions marked
//! *async-signal-safe* make no allocation and take no lock, so they may run in a forked child
//! between `fork` and `exec` ([`prepare_exec`] and the init's `spawn` module call them there).

#![allow(unsafe_code)]

use std::ffi::{CStr, CString};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::process::{Command, ExitStatus};

use libc::{c_int, gid_t, pid_t};
use nix::sys::signal::{SigSet, SigmaskHow, Signal, sigprocmask};
use nix::unistd::{Gid, Pid, Uid, getpgrp, isatty, setgid, setgroups, setpgid, setuid, tcsetpgrp};

/// Linux's `_NSIG - 1`: the highest signal number whose disposition [`reset_all_signals`]
/// resets.
const LAST_SIGNAL: c_int = 64;
/// Size of the kernel's signal set (`_NSIG / 8`), as `rt_sigaction` wants it.
const KERNEL_SIGSET_SIZE: libc::size_t = 8;
/// `CLOSE_RANGE_CLOEXEC` from linux/close_range.h; libc does not export it on every target.
const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;

fn check(rc: c_int) -> io::Result<()> {
    if rc == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The shell convention for a wait status: the exit code, or 128+n for death by signal n.
///
/// `None` for a status that is neither (stopped or continued); each caller says what that
/// means for it.
pub fn exit_code(status: ExitStatus) -> Option<i32> {
    wait_status_code(status.into_raw())
}

/// The exit status that stands for death by signal `sig`: 128+n.
pub fn signal_exit_code(sig: c_int) -> i32 {
    128 + sig
}

/// [`exit_code`] for the raw status `waitpid` writes.
pub fn wait_status_code(status: c_int) -> Option<i32> {
    if libc::WIFEXITED(status) {
        Some(libc::WEXITSTATUS(status))
    } else if libc::WIFSIGNALED(status) {
        Some(signal_exit_code(libc::WTERMSIG(status)))
    } else {
        None
    }
}

/// One child reaped by [`reap_any`].
#[derive(Debug, Clone, Copy)]
pub struct Reaped {
    /// The child's pid.
    pub pid: pid_t,
    /// Its raw wait status (see [`wait_status_code`]).
    pub status: c_int,
}

/// `waitpid(-1, WNOHANG)`, retried on EINTR: `Ok(Some)` for a reaped child, `Ok(None)` when
/// children remain and none has exited, `Err` otherwise (ECHILD: no child at all).
pub fn reap_any() -> io::Result<Option<Reaped>> {
    loop {
        let mut status: c_int = 0;
        // SAFETY: `status` is a valid c_int for waitpid to write.
        let pid = unsafe { libc::waitpid(-1, &mut status, libc::WNOHANG) };
        if pid > 0 {
            return Ok(Some(Reaped { pid, status }));
        }
        if pid == 0 {
            return Ok(None);
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

/// `waitpid(pid, 0)`, retried on EINTR: reaps that child and returns its status.
pub fn wait_pid(pid: pid_t) -> io::Result<ExitStatus> {
    loop {
        let mut status: c_int = 0;
        // SAFETY: `status` is a valid c_int for waitpid to write.
        if unsafe { libc::waitpid(pid, &mut status, 0) } == pid {
            return Ok(ExitStatus::from_raw(status));
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

/// `kill(2)` with a raw signal number (real-time ones included): a negative pid is a process
/// group, -1 every process we may signal. Async-signal-safe.
pub fn kill(pid: pid_t, sig: c_int) -> io::Result<()> {
    // SAFETY: kill has no memory-safety preconditions; the kernel checks any pid/signal pair.
    check(unsafe { libc::kill(pid, sig) })
}

/// A pollable descriptor that becomes readable when `pid` exits, without reaping it.
/// `None` on kernels without pidfd (< 5.3).
pub fn pidfd_open(pid: pid_t) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes two integers and returns a new descriptor or -1.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    // SAFETY: a non-negative result is a descriptor that nothing else owns.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd as c_int) })
}

/// Maps a page of `fd` shared and writable, and unmaps it at once: whether a seal lets one be
/// made.
#[cfg(test)]
pub fn map_shared_writable(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: a new mapping nothing refers to, of one page, unmapped before returning.
    unsafe {
        let map = libc::mmap(
            std::ptr::null_mut(),
            4096,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            fd.as_raw_fd(),
            0,
        );
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        libc::munmap(map, 4096);
    }
    Ok(())
}

/// Sets `sig` back to its default action with the raw system call, because glibc's
/// `sigaction` refuses its reserved signals 32 and 33. SIGKILL and SIGSTOP refuse with EINVAL;
/// they cannot be ignored anyway. Async-signal-safe.
pub fn reset_signal(sig: c_int) {
    // The kernel's `struct sigaction`, all zero: SIG_DFL, no flags, no restorer, empty mask,
    // whatever the order of its fields on this architecture.
    let default = [0u64; 4];
    // SAFETY: rt_sigaction reads `default` (32 bytes, more than the kernel's struct on every
    // Linux architecture) and writes nothing since the old-action pointer is null.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigaction,
            sig,
            default.as_ptr(),
            std::ptr::null_mut::<u64>(),
            KERNEL_SIGSET_SIZE,
        );
    }
}

/// [`reset_signal`] for every signal, 1 to 64: an ignored one would otherwise be inherited
/// across exec. Async-signal-safe.
pub fn reset_all_signals() {
    for sig in 1..=LAST_SIGNAL {
        reset_signal(sig);
    }
}

/// Marks every descriptor above 2 close-on-exec, so nothing leaks into the program executed
/// next. Async-signal-safe.
///
/// Close-on-exec rather than close: the standard library reports exec errors through a
/// descriptor of its own that must stay open until execve. Kernels before 5.11 have no
/// `close_range`; then every possible descriptor up to `RLIMIT_NOFILE` (at most 2^20, 65536 when
/// unknown) is walked.
pub fn mark_cloexec_above_stdio() {
    // SAFETY: close_range only changes descriptor flags; async-signal-safe as a raw syscall.
    let marked = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            3 as libc::c_uint,
            libc::c_uint::MAX,
            CLOSE_RANGE_CLOEXEC,
        )
    } == 0;
    if marked {
        return;
    }
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into `limit`; fcntl on a closed descriptor fails harmlessly.
    unsafe {
        let max = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) == 0 {
            limit.rlim_cur.min(1 << 20) as c_int
        } else {
            65536
        };
        for fd in 3..max {
            libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        }
    }
}

/// Gives stdin's terminal to the calling process's group when stdin is a terminal; a terminal
/// that refuses is no error. `block_ttou`: block SIGTTOU around the call, as a process in a
/// background group must. Async-signal-safe.
pub fn take_terminal(block_ttou: bool) -> io::Result<()> {
    // SAFETY: fd 0 is only borrowed for the calls below; if it is closed, they fail.
    let stdin = unsafe { BorrowedFd::borrow_raw(0) };
    if !isatty(stdin).unwrap_or(false) {
        return Ok(());
    }
    let mut old = SigSet::empty();
    if block_ttou {
        let ttou = SigSet::from(Signal::SIGTTOU);
        sigprocmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut old))?;
    }
    let _ = tcsetpgrp(stdin, getpgrp());
    if block_ttou {
        sigprocmask(SigmaskHow::SIG_SETMASK, Some(&old), None)?;
    }
    Ok(())
}

/// `setgroups(2)` for the calling thread alone (the raw system call: glibc's `setgroups`
/// changes every thread of the process).
pub fn thread_setgroups(groups: &[gid_t]) -> io::Result<()> {
    // SAFETY: the kernel reads `groups.len()` ids from a live slice.
    let rc = unsafe { libc::syscall(libc::SYS_setgroups, groups.len(), groups.as_ptr()) };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The POSIX access ACL of `path` (links followed) as the kernel stores it, the
/// `system.posix_acl_access` attribute; `None` when it has none or the file system keeps no
/// extended attributes (the mode then says all).
pub fn posix_acl_access(path: &std::path::Path) -> io::Result<Option<Vec<u8>>> {
    use std::os::unix::ffi::OsStrExt;
    let path = CString::new(path.as_os_str().as_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    let name = c"system.posix_acl_access";
    // An ACL holds a header and eight bytes an entry: a few dozen entries fit the first try,
    // and most files have none (this runs for every step of a path).
    let mut value = vec![0u8; 512];
    loop {
        // SAFETY: two NUL-terminated strings and a live buffer of `value.len()` bytes.
        let n = unsafe {
            libc::getxattr(
                path.as_ptr(),
                name.as_ptr(),
                value.as_mut_ptr().cast(),
                value.len(),
            )
        };
        if n >= 0 {
            value.truncate(n as usize);
            return Ok(Some(value));
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            Some(libc::ENODATA | libc::EOPNOTSUPP) => return Ok(None),
            // Larger than the buffer: 64 KiB is the kernel's most for any value.
            Some(libc::ERANGE) if value.len() < 65536 => value.resize(65536, 0),
            _ => return Err(err),
        }
    }
}

/// Everything a hook's child needs between `fork` and `execve`, prepared before the fork
/// because nothing may be allocated after it.
pub struct ExecArgs {
    program: CString,
    /// The argument and environment strings back to back, each ending in a NUL: one allocation
    /// where a `CString` each made four per variable (50k of the instructions a hook's run
    /// cost `fire`, in callgrind).
    _strings: Vec<u8>,
    argv: Vec<*const libc::c_char>,
    envp: Vec<*const libc::c_char>,
    /// `Some` when the credentials must be switched: groups, gid, uid.
    switch: Option<(Vec<Gid>, Gid, Uid)>,
    /// A sealed memfd to execute instead of `program`; kept open across exec, since a script's
    /// interpreter opens it again as `/dev/fd/N`.
    sealed: Option<RawFd>,
}

// SAFETY: the raw pointers in `argv` and `envp` point into `_strings`, which the struct owns and
// never changes after `new`; moving the struct moves the `Vec` headers, not the heap bytes.
unsafe impl Send for ExecArgs {}
// SAFETY: as above; the pointers are only ever read.
unsafe impl Sync for ExecArgs {}

impl ExecArgs {
    /// `program` to execute with `args` (`$0` first) and the environment `env` (name and value
    /// of each variable); `switch`: the groups, gid and uid to take first. A string is cut at
    /// an interior NUL, which cannot come from the OS (paths, environment), rather than failing
    /// the run.
    pub fn new<'a, A, E>(
        program: CString,
        args: A,
        env: E,
        switch: Option<(Vec<Gid>, Gid, Uid)>,
    ) -> ExecArgs
    where
        A: Iterator<Item = &'a [u8]> + Clone,
        E: Iterator<Item = (&'a [u8], &'a [u8])> + Clone,
    {
        let size = args.clone().map(|a| a.len() + 1).sum::<usize>()
            + env
                .clone()
                .map(|(n, v)| n.len() + v.len() + 2)
                .sum::<usize>();
        let mut strings = Vec::with_capacity(size);
        let ends = |parts: &[&[u8]], strings: &mut Vec<u8>| {
            for part in parts {
                match part.iter().position(|&b| b == 0) {
                    Some(nul) => {
                        strings.extend_from_slice(&part[..nul]);
                        break;
                    }
                    None => strings.extend_from_slice(part),
                }
            }
            strings.push(0);
            strings.len()
        };
        let mut starts = Vec::new();
        let mut start = 0;
        for arg in args {
            starts.push(start);
            start = ends(&[arg], &mut strings);
        }
        let argc = starts.len();
        for (name, value) in env {
            starts.push(start);
            // A name with a NUL in it loses its `=` and value with the rest of the string.
            start = ends(&[name, b"=".as_slice(), value], &mut strings);
        }
        let base = strings.as_ptr().cast::<libc::c_char>();
        let pointers = |range: &[usize]| {
            let mut v: Vec<*const libc::c_char> = Vec::with_capacity(range.len() + 1);
            // SAFETY: every start is an offset inside `strings`, which is not resized again.
            v.extend(range.iter().map(|&at| unsafe { base.add(at) }));
            v.push(std::ptr::null());
            v
        };
        let argv = pointers(&starts[..argc]);
        let envp = pointers(&starts[argc..]);
        ExecArgs {
            program,
            _strings: strings,
            argv,
            envp,
            switch,
            sealed: None,
        }
    }

    /// Executes the descriptor `fd` (a sealed memfd the caller keeps open) instead of the
    /// program's path.
    pub fn execute_fd(&mut self, fd: Option<RawFd>) {
        self.sealed = fd;
    }
}

/// Makes `command`'s child, after fork: its own process group, an empty signal mask, default
/// dispositions for every signal, no descriptor above 2, `exec`'s credentials, then `execve`
/// (or `execveat` of the sealed descriptor) of `exec` itself. A failure of any step makes
/// `command.spawn()` fail with it.
pub fn prepare_exec(command: &mut Command, exec: ExecArgs) {
    // SAFETY: `child_setup` only makes async-signal-safe system calls and allocates nothing; it
    // reads `exec`, which the closure owns for as long as the command exists.
    unsafe {
        command.pre_exec(move || child_setup(&exec));
    }
}

fn child_setup(exec: &ExecArgs) -> io::Result<()> {
    setpgid(Pid::from_raw(0), Pid::from_raw(0))?;
    // The init blocks every signal and ignores some; a hook must start from defaults.
    sigprocmask(SigmaskHow::SIG_SETMASK, Some(&SigSet::empty()), None)?;
    reset_all_signals();
    mark_cloexec_above_stdio();
    if let Some((groups, gid, uid)) = &exec.switch {
        // Groups, gid, uid, in that order: each later step needs the privilege the earlier
        // ones keep.
        setgroups(groups)?;
        setgid(*gid)?;
        setuid(*uid)?;
    }
    // SAFETY: fcntl, execveat and execve are async-signal-safe; the pointers point into `exec`,
    // which outlives the calls, and the argument and environment arrays end with a null.
    unsafe {
        match exec.sealed {
            Some(fd) => {
                check(libc::fcntl(fd, libc::F_SETFD, 0))?;
                libc::syscall(
                    libc::SYS_execveat,
                    fd,
                    c"".as_ptr(),
                    exec.argv.as_ptr(),
                    exec.envp.as_ptr(),
                    libc::AT_EMPTY_PATH,
                );
            }
            None => {
                libc::execve(
                    exec.program.as_ptr(),
                    exec.argv.as_ptr(),
                    exec.envp.as_ptr(),
                );
            }
        }
    }
    Err(io::Error::last_os_error())
}

/// Starts `exec` with `posix_spawn(3)` in a process group of its own, with an empty signal
/// mask, every signal at its default action, `stdin` (or `/dev/null`), `stdout` and `stderr` as
/// descriptors 0-2, no other descriptor, in `cwd`; returns its pid.
///
/// The quick path for a hook that keeps our credentials and runs a file by its path: glibc's
/// `posix_spawn` starts the child with `CLONE_VM | CLONE_VFORK`, so nothing of our (large,
/// static) image is copied, where a `fork` copies the page tables and then takes a copy-on-write
/// fault on every page either process touches before the exec. `None` in `exec` for what it
/// cannot do: switching credentials or executing a sealed descriptor ([`prepare_exec`] does).
pub fn posix_spawn(
    exec: &ExecArgs,
    cwd: &CStr,
    stdin: Option<BorrowedFd<'_>>,
    stdout: BorrowedFd<'_>,
    stderr: BorrowedFd<'_>,
) -> Option<io::Result<pid_t>> {
    if exec.switch.is_some() || exec.sealed.is_some() {
        return None;
    }
    Some(posix_spawn_plain(exec, cwd, stdin, stdout, stderr))
}

/// `posix_spawn_file_actions_t` destroyed when dropped.
struct FileActions(libc::posix_spawn_file_actions_t);

impl Drop for FileActions {
    fn drop(&mut self) {
        // SAFETY: initialised by posix_spawn_file_actions_init in `posix_spawn_plain`.
        unsafe { libc::posix_spawn_file_actions_destroy(&mut self.0) };
    }
}

/// `posix_spawnattr_t` destroyed when dropped.
struct SpawnAttr(libc::posix_spawnattr_t);

impl Drop for SpawnAttr {
    fn drop(&mut self) {
        // SAFETY: initialised by posix_spawnattr_init in `posix_spawn_plain`.
        unsafe { libc::posix_spawnattr_destroy(&mut self.0) };
    }
}

/// A `posix_spawn*` result (an errno value, not -1) as an io result.
fn spawn_check(rc: c_int) -> io::Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(rc))
    }
}

fn posix_spawn_plain(
    exec: &ExecArgs,
    cwd: &CStr,
    stdin: Option<BorrowedFd<'_>>,
    stdout: BorrowedFd<'_>,
    stderr: BorrowedFd<'_>,
) -> io::Result<pid_t> {
    // SAFETY: every structure is initialised by its *_init before use and destroyed once by
    // its guard; the strings and pointer arrays live in `exec` and `cwd` for the whole call,
    // and the arrays end with a null. posix_spawn copies what it needs before it returns.
    unsafe {
        let mut actions = FileActions(std::mem::zeroed());
        spawn_check(libc::posix_spawn_file_actions_init(&mut actions.0))?;
        let actions_ptr = &mut actions.0;
        match stdin {
            Some(fd) => spawn_check(libc::posix_spawn_file_actions_adddup2(
                actions_ptr,
                fd.as_raw_fd(),
                0,
            ))?,
            None => spawn_check(libc::posix_spawn_file_actions_addopen(
                actions_ptr,
                0,
                c"/dev/null".as_ptr(),
                libc::O_RDONLY,
                0,
            ))?,
        }
        spawn_check(libc::posix_spawn_file_actions_adddup2(
            actions_ptr,
            stdout.as_raw_fd(),
            1,
        ))?;
        spawn_check(libc::posix_spawn_file_actions_adddup2(
            actions_ptr,
            stderr.as_raw_fd(),
            2,
        ))?;
        spawn_check(libc::posix_spawn_file_actions_addchdir_np(
            actions_ptr,
            cwd.as_ptr(),
        ))?;
        // Also what a careless library left open without close-on-exec.
        spawn_check(libc::posix_spawn_file_actions_addclosefrom_np(
            actions_ptr,
            3,
        ))?;

        let mut attr = SpawnAttr(std::mem::zeroed());
        spawn_check(libc::posix_spawnattr_init(&mut attr.0))?;
        let attr_ptr = &mut attr.0;
        let mut empty: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        // glibc's sigfillset leaves out its two internal signals, which it handles itself.
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        spawn_check(libc::posix_spawnattr_setsigmask(attr_ptr, &empty))?;
        // The init ignores some signals, and an ignored signal stays ignored across exec.
        spawn_check(libc::posix_spawnattr_setsigdefault(attr_ptr, &all))?;
        spawn_check(libc::posix_spawnattr_setpgroup(attr_ptr, 0))?;
        let flags = libc::POSIX_SPAWN_SETPGROUP
            | libc::POSIX_SPAWN_SETSIGMASK
            | libc::POSIX_SPAWN_SETSIGDEF;
        spawn_check(libc::posix_spawnattr_setflags(
            attr_ptr,
            flags as libc::c_short,
        ))?;

        let mut pid: pid_t = 0;
        spawn_check(libc::posix_spawn(
            &mut pid,
            exec.program.as_ptr(),
            &actions.0,
            &attr.0,
            exec.argv.as_ptr().cast::<*mut libc::c_char>(),
            exec.envp.as_ptr().cast::<*mut libc::c_char>(),
        ))?;
        Ok(pid)
    }
}

/// Makes `command`'s child take stdin's terminal for its process group before exec (with
/// SIGTTOU blocked around it, as a background group must); the caller puts it in a group of its
/// own with `process_group(0)`.
pub fn take_terminal_on_exec(command: &mut Command) {
    // SAFETY: the closure runs in the forked child before exec and calls only async-signal-safe
    // functions on fd 0, which stays open; it allocates nothing and touches no lock.
    unsafe {
        command.pre_exec(|| take_terminal(true));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The strings `argv` (or `envp`) points to, up to its null.
    fn strings(pointers: &[*const libc::c_char]) -> Vec<&[u8]> {
        let (last, strings) = pointers.split_last().expect("a null at the end");
        assert!(last.is_null());
        // SAFETY: every pointer before the null points at a NUL-terminated string in `_strings`.
        strings
            .iter()
            .map(|&p| unsafe { CStr::from_ptr(p) }.to_bytes())
            .collect()
    }

    #[test]
    fn exec_args_pack_argv_and_envp_each_ending_in_a_null() {
        let args: [&[u8]; 3] = [b"prog", b"", b"cut\0here"];
        let env: [(&[u8], &[u8]); 4] = [
            (b"A", b"1"),
            (b"EMPTY", b""),
            (b"V", b"x\0y"),
            (b"N\0AME", b"gone"),
        ];
        let exec = ExecArgs::new(
            c"/bin/prog".to_owned(),
            args.iter().copied(),
            env.iter().copied(),
            None,
        );
        assert_eq!(strings(&exec.argv), [&b"prog"[..], b"", b"cut"]);
        assert_eq!(strings(&exec.envp), [&b"A=1"[..], b"EMPTY=", b"V=x", b"N"]);
        let none = ExecArgs::new(
            c"p".to_owned(),
            [&b"p"[..]].into_iter(),
            [].into_iter(),
            None,
        );
        assert_eq!(strings(&none.argv), [&b"p"[..]]);
        assert_eq!(strings(&none.envp), Vec::<&[u8]>::new());
    }

    #[test]
    fn exit_codes_follow_the_shell() {
        for (raw, code) in [
            (0, Some(0)),
            (3 << 8, Some(3)),
            (libc::SIGKILL, Some(128 + libc::SIGKILL)),
            (libc::SIGTERM | 0x80, Some(128 + libc::SIGTERM)),
            (0x137f, None),
        ] {
            assert_eq!(wait_status_code(raw), code, "status {raw:#x}");
        }
    }
}

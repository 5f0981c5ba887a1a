//! Running one hook: environment, working directory, credentials, timeout, process group and the
//! output log (DESIGN.md, "Running a hook").
//!
//! [`run_hook`] is the whole contract for one hook; [`run_command`] is the same machinery for any
//! program. Both are synchronous and single-threaded: one `poll` waits on the output pipe, the
//! child's exit (a pidfd), the [`CancelToken`] and the next deadline, so the PID-1 init can call
//! them from a forked single-threaded child.
//!
//! The rules a run follows, in the order they apply:
//!
//! 1. The program is executed directly (no shell, not even glibc's fallback for files without a
//!    `#!` line) with stdin on `/dev/null` and stdout and stderr on one pipe, so output keeps the
//!    order it was written in. The child gets its own process group, an empty signal mask,
//!    default signal dispositions, no descriptor above 2 and, with [`Credentials`], the user's
//!    supplementary groups, gid and uid, set in that order.
//! 2. At most [`RunOptions::log_limit`] bytes of output go to the log, then one line
//!    `[output truncated: N more bytes not logged]`; the last 64 KiB are kept in memory as the tail.
//! 3. At the timeout, or on cancel, the whole group gets SIGTERM and, after
//!    [`RunOptions::kill_grace`], SIGKILL; a timeout is exit code 124 with a
//!    `[hook timed out after Ns]` line in the log.
//! 4. When the direct child exits, whatever is left of its group is killed; output still in the
//!    pipe is read for at most 200 ms more, so a descendant that escaped the group cannot hold
//!    the run open. Then every process still carrying the run's `HOOKVISOR_RUN` marker (one
//!    that left the group with `setsid`, a daemon) is killed too (see `leftovers`).
//! 5. Exit codes: the child's own; 128+n for death by signal n; 127 when the program or its
//!    interpreter does not exist; 126 for any other failure to start, with the reason in the log.

use std::ffi::{CString, OsString};
use std::fs::{self, File};
use std::io::{self, Write};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout, poll};
use nix::sys::signal::{Signal, killpg};
use nix::sys::wait::{Id, WaitPidFlag, WaitStatus, waitid};
use nix::unistd::{Gid, Pid, Uid};

// Lives in account.rs; session.rs and the tests below name it through here.
pub(crate) use crate::account::Credentials;
use crate::context::Context;
use crate::hook::{Hook, HookKind};
use crate::leftovers::{self, RUN_MARKER_VARIABLE};
use crate::seal::SealedScript;
use crate::sys;

/// How many bytes of output a run keeps in memory for messages.
const TAIL_LIMIT: usize = 64 * 1024;
/// Size of the one read buffer a run uses, whatever the hook prints.
const READ_BUFFER: usize = 64 * 1024;
/// How long output is still read after the child is gone and its group killed.
const DRAIN: Duration = Duration::from_millis(200);
/// Poll tick used only when the kernel has no pidfd or the cancel pipe could not be made.
const TICK: Duration = Duration::from_millis(50);
/// Longest echoed line before it is cut, so one endless line cannot grow memory.
const ECHO_LINE_LIMIT: usize = 8 * 1024;

/// Stops a running hook from another thread (or, across `fork`, another process).
///
/// Cancelling is permanent: a cancelled token stops every run it is given to, including runs
/// that start later, which then do not start at all.
#[derive(Debug, Clone, Default)]
pub struct CancelToken {
    inner: Arc<CancelInner>,
}

#[derive(Debug)]
struct CancelInner {
    cancelled: AtomicBool,
    /// A pipe that becomes readable on cancel, so a run waiting in `poll` wakes at once. `None`
    /// when no descriptor was available; runs then re-check the flag every [`TICK`].
    wake: Option<(OwnedFd, OwnedFd)>,
}

impl Default for CancelInner {
    fn default() -> Self {
        CancelInner {
            cancelled: AtomicBool::new(false),
            wake: nix::unistd::pipe2(OFlag::O_CLOEXEC | OFlag::O_NONBLOCK).ok(),
        }
    }
}

impl CancelToken {
    /// A token that is not cancelled.
    pub fn new() -> CancelToken {
        CancelToken::default()
    }

    /// Stops every run using this token: its process group gets SIGTERM, then SIGKILL after the
    /// grace.
    pub fn cancel(&self) {
        self.inner.cancelled.store(true, Ordering::SeqCst);
        if let Some((_, write)) = &self.inner.wake {
            // The pipe is never drained, so one byte keeps it readable for good; a full pipe
            // (EAGAIN) is as readable as one byte, so the result does not matter.
            let _ = nix::unistd::write(write, b"x");
        }
    }

    /// True once [`CancelToken::cancel`] was called.
    pub fn is_cancelled(&self) -> bool {
        self.inner.cancelled.load(Ordering::SeqCst)
    }

    /// Waits until the token is cancelled or `timeout` has passed; true when it was cancelled.
    /// Wakes at once on a cancel (the token's pipe), without polling.
    pub fn wait_for(&self, timeout: Duration) -> bool {
        let end = Instant::now() + timeout;
        loop {
            if self.is_cancelled() {
                return true;
            }
            let left = end.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            // Round up, so the loop never spins through the last partial millisecond.
            let ms = left.as_micros().div_ceil(1000).min(u128::from(u16::MAX)) as u16;
            match self.wake_fd() {
                Some(fd) => {
                    let mut fds = [PollFd::new(fd.as_fd(), PollFlags::POLLIN)];
                    let _ = poll(&mut fds, PollTimeout::from(ms));
                }
                // No pipe could be made: look every tick.
                None => std::thread::sleep(left.min(TICK)),
            }
        }
    }

    fn wake_fd(&self) -> Option<&OwnedFd> {
        self.inner.wake.as_ref().map(|(read, _)| read)
    }
}

/// How to run: everything that is not the hook itself.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Run as this account (needs root unless it is the current one). `None` keeps the current
    /// credentials untouched. Default `None`.
    pub credentials: Option<Credentials>,
    /// Stops the run when cancelled. Default `None`.
    pub cancel: Option<CancelToken>,
    /// Copy every output line to our stderr as `[<echo_prefix>] line`; give the hook's name, the
    /// brackets are added. Default `None`.
    pub echo_prefix: Option<String>,
    /// Bytes of output written to the log before it is cut with a note. Default 8 MiB.
    pub log_limit: u64,
    /// Time between SIGTERM and SIGKILL when a run is stopped. Default 2 s.
    pub kill_grace: Duration,
    /// Variables added last, over every other. Default none.
    pub extra_env: Vec<(OsString, OsString)>,
    /// Execute these sealed bytes instead of opening the program's path (root hooks, see
    /// [`SealedScript`]). Default `None`.
    pub sealed: Option<Arc<SealedScript>>,
}

impl Default for RunOptions {
    fn default() -> Self {
        RunOptions {
            credentials: None,
            cancel: None,
            echo_prefix: None,
            log_limit: 8 * 1024 * 1024,
            kill_grace: Duration::from_secs(2),
            extra_env: Vec::new(),
            sealed: None,
        }
    }
}

/// What one run did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunOutcome {
    /// The exit status as a shell reports it: 124 on timeout, 128+n for signal n, 127 not found,
    /// 126 could not start.
    pub exit_code: i32,
    /// The timeout stopped it.
    pub timed_out: bool,
    /// A [`CancelToken`] stopped it (or kept it from starting).
    pub cancelled: bool,
    /// Wall time from start to the end of the output.
    pub duration: Duration,
    /// The last 64 KiB of output and notes, as lossy UTF-8.
    pub tail: String,
    /// Bytes the hook wrote, logged or not.
    pub output_bytes: u64,
    /// The log holds only the first `log_limit` bytes.
    pub log_truncated: bool,
}

impl RunOutcome {
    /// True when the hook ran to the end and exited 0.
    pub fn success(&self) -> bool {
        self.exit_code == 0 && !self.timed_out && !self.cancelled
    }
}

/// Why a run could not even be attempted. A program that cannot be started is not an error but
/// an outcome (exit 126 or 127, reason in the log), so that it is recorded like any failure.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The log file or its directory cannot be created.
    #[error(
        "cannot create hook log {}: {source}; make the state dir writable or pass --state-dir",
        path.display()
    )]
    Log {
        /// The log file.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// The changed-files list cannot be written.
    #[error(
        "cannot write changed-files list {}: {source}; make the state dir writable or pass \
         --state-dir",
        path.display()
    )]
    ChangedList {
        /// The list file.
        path: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// The output pipe or the wait for the child failed (out of descriptors or processes).
    #[error(
        "cannot {what} for a hook: {source}; raise the descriptor or process limit (ulimit -n, \
         ulimit -u)"
    )]
    System {
        /// What was being done, e.g. "create the output pipe".
        what: &'static str,
        /// What the kernel said.
        source: io::Error,
    },
}

/// One program to run, for [`run_command`]; [`run_hook`] builds it from a [`Hook`].
#[derive(Debug, Clone)]
pub(crate) struct Invocation {
    /// The program: a path, or a bare name looked up in the child's `PATH`.
    pub(crate) program: PathBuf,
    /// Arguments after `argv[0]` (which is the program as given).
    pub(crate) args: Vec<OsString>,
    /// Variables set over the inherited environment.
    pub(crate) env: Vec<(OsString, OsString)>,
    /// Inherited variables the program must not see.
    pub(crate) env_remove: Vec<OsString>,
    /// Working directory.
    pub(crate) cwd: PathBuf,
    /// Where the output goes; created with its directories, overwritten.
    pub(crate) log_path: PathBuf,
    /// When the process group is stopped.
    pub(crate) timeout: Duration,
}

/// Runs one hook to the end as DESIGN.md "Running a hook" says, and returns what happened.
///
/// The environment is ours plus `DISCOBOT_HOOK_TYPE`, `DISCOBOT_SESSION_ID`,
/// `DISCOBOT_WORKSPACE` and `HOOKVISOR_HOOK_ID`; file and pre-commit hooks also get `files` as
/// `DISCOBOT_CHANGED_FILES` (space-joined) and `HOOKVISOR_CHANGED_FILES_NUL` (a file under
/// `<state>/changed/` holding each name followed by a NUL byte). The cwd is the workspace and
/// the log `ctx.log_path(&hook.id)`.
pub fn run_hook(
    ctx: &Context,
    hook: &Hook,
    files: &[PathBuf],
    options: &RunOptions,
) -> Result<RunOutcome, ExecError> {
    let mut env: Vec<(OsString, OsString)> = vec![
        ("DISCOBOT_HOOK_TYPE".into(), hook.kind.as_str().into()),
        ("DISCOBOT_SESSION_ID".into(), ctx.session_id.clone().into()),
        ("DISCOBOT_WORKSPACE".into(), ctx.workspace.clone().into()),
        ("HOOKVISOR_HOOK_ID".into(), hook.id.clone().into()),
        // A sealed root hook sees `/dev/fd/N` as `$0`; this is where it came from.
        ("HOOKVISOR_HOOK_PATH".into(), hook.path.clone().into()),
    ];
    // The API token is the server's secret, not the repository's: hooks never see it.
    let mut env_remove: Vec<OsString> = vec!["HOOKVISOR_TOKEN".into()];
    if matches!(hook.kind, HookKind::File | HookKind::PreCommit) {
        let list = ctx.state_dir.join("changed").join(&hook.id);
        write_changed_list(&list, files, options.credentials.as_ref())?;
        let spaced: Vec<&[u8]> = files.iter().map(|f| f.as_os_str().as_bytes()).collect();
        env.push((
            "DISCOBOT_CHANGED_FILES".into(),
            std::ffi::OsStr::from_bytes(&spaced.join(&b' ')).to_os_string(),
        ));
        env.push(("HOOKVISOR_CHANGED_FILES_NUL".into(), list.into()));
    } else {
        // A hook started from inside another hook's run must not see that run's files.
        env_remove.push("DISCOBOT_CHANGED_FILES".into());
        env_remove.push("HOOKVISOR_CHANGED_FILES_NUL".into());
    }
    let invocation = Invocation {
        program: hook.path.clone(),
        args: Vec::new(),
        env,
        env_remove,
        cwd: ctx.workspace.clone(),
        log_path: ctx.log_path(&hook.id),
        timeout: hook.timeout,
    };
    run_command(&invocation, options)
}

/// Runs any program with the rules of this module (see the module documentation).
pub(crate) fn run_command(
    invocation: &Invocation,
    options: &RunOptions,
) -> Result<RunOutcome, ExecError> {
    let start = Instant::now();
    let log = create_log(&invocation.log_path, options.credentials.as_ref())?;
    let mut sink = Sink::new(log, options);

    if options
        .cancel
        .as_ref()
        .is_some_and(CancelToken::is_cancelled)
    {
        sink.note("[hook cancelled before it started]");
        return Ok(sink.finish(
            sys::signal_exit_code(libc::SIGTERM),
            Ending::Cancelled,
            start,
        ));
    }

    let mut env = child_env(invocation, options);
    let marker = leftovers::new_marker();
    env.push((RUN_MARKER_VARIABLE.into(), marker.clone().into()));
    let resolved = match &options.sealed {
        Some(sealed) => Some(sealed.path.clone()),
        None => resolve_program(&invocation.program, &env),
    };
    let program = match resolved {
        Some(program) => program,
        None => {
            sink.note(&format!(
                "hookvisor: cannot run {}: not found in PATH",
                invocation.program.display()
            ));
            return Ok(sink.finish(127, Ending::Exited, start));
        }
    };
    if !invocation.cwd.is_dir() {
        sink.note(&format!(
            "hookvisor: cannot run {}: working directory {} does not exist; pass an existing --workspace",
            program.display(),
            invocation.cwd.display()
        ));
        return Ok(sink.finish(126, Ending::Exited, start));
    }
    let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| ExecError::System {
        what: "create the output pipe",
        source: e.into(),
    })?;
    nix::fcntl::fcntl(&read, nix::fcntl::FcntlArg::F_SETFL(OFlag::O_NONBLOCK)).map_err(|e| {
        ExecError::System {
            what: "set up the output pipe",
            source: e.into(),
        }
    })?;

    let mut exec = exec_args(&program, invocation, &env, options.credentials.as_ref());
    exec.execute_fd(options.sealed.as_ref().map(|s| s.fd().as_raw_fd()));
    let mut child = match spawn(&program, invocation, write, exec) {
        Ok(child) => child,
        Err(err) => {
            sink.note(&spawn_failure(&program, &err, options.credentials.as_ref()));
            let code = match err.raw_os_error() {
                Some(libc::ENOENT | libc::ENOTDIR) => 127,
                _ => 126,
            };
            return Ok(sink.finish(code, Ending::Exited, start));
        }
    };

    let supervised = supervise(&mut child, read, &mut sink, invocation.timeout, options);
    let left = leftovers::kill(&marker);
    if left > 0 {
        sink.note(&format!(
            "[hookvisor: killed {left} process(es) the hook left running]"
        ));
    }
    let (status, ending) = match supervised {
        Ok(done) => done,
        Err(source) => {
            // Never leave the group running because our own bookkeeping failed.
            let _ = killpg(child_pid(&child), Signal::SIGKILL);
            let _ = child.wait();
            return Err(ExecError::System {
                what: "wait for the child",
                source,
            });
        }
    };
    let code = match ending {
        Ending::TimedOut => 124,
        Ending::Exited | Ending::Cancelled => sys::exit_code(status).unwrap_or(126),
    };
    let closing = match ending {
        Ending::TimedOut => Some(format!(
            "[hook timed out after {}s]",
            seconds(invocation.timeout)
        )),
        Ending::Cancelled => Some("[hook cancelled]".to_owned()),
        Ending::Exited => None,
    };
    if let Some(line) = closing {
        sink.note(&line);
    }
    Ok(sink.finish(code, ending, start))
}

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    Exited,
    TimedOut,
    Cancelled,
}

fn seconds(d: Duration) -> String {
    if d.subsec_nanos() == 0 {
        d.as_secs().to_string()
    } else {
        d.as_secs_f64().to_string()
    }
}

/// Creates the log afresh and hands it to the run user, who may read it later.
fn create_log(path: &Path, credentials: Option<&Credentials>) -> Result<File, ExecError> {
    fresh_file(path, credentials).map_err(|source| ExecError::Log {
        path: path.to_owned(),
        source,
    })
}

/// Writes each name's exact bytes followed by a NUL.
fn write_changed_list(
    path: &Path,
    files: &[PathBuf],
    credentials: Option<&Credentials>,
) -> Result<(), ExecError> {
    let names = files.iter().map(|f| f.as_os_str().as_bytes());
    let mut content = Vec::with_capacity(names.clone().map(|n| n.len() + 1).sum());
    for name in names {
        content.extend_from_slice(name);
        content.push(0);
    }
    fresh_file(path, credentials)
        .and_then(|mut file| file.write_all(&content))
        .map_err(|source| ExecError::ChangedList {
            path: path.to_owned(),
            source,
        })
}

/// Replaces `path` with a new, empty, world-readable file owned by the run user.
///
/// The old file is removed and the new one made with `O_EXCL`, which never follows a symlink:
/// a hook that left `output/<id>.log` pointing at `/etc/shadow` must not get a root run to
/// truncate it. Directories created on the way are given to the run user too, so that a first
/// run as root does not lock the user out of the state dir.
fn fresh_file(path: &Path, credentials: Option<&Credentials>) -> io::Result<File> {
    if let Some(dir) = path.parent() {
        let missing: Vec<&Path> = dir.ancestors().take_while(|d| !d.exists()).collect();
        fs::create_dir_all(dir)?;
        for created in missing {
            if let Ok(handle) = File::open(created) {
                give_to(&handle, credentials);
            }
        }
    }
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    let file = fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o644)
        .open(path)?;
    // Names of workspace files and hook output are no secret, and the hook may run as another
    // user than the one writing; the mode must not depend on the umask.
    file.set_permissions(fs::Permissions::from_mode(0o644))?;
    give_to(&file, credentials);
    Ok(file)
}

/// Chowns something we created for a hook to the hook's user, when we are root and it is not.
/// Best effort: the run itself does not depend on it.
fn give_to(file: &File, credentials: Option<&Credentials>) {
    if let Some(c) = credentials
        && Uid::effective().is_root()
        && c.uid != 0
    {
        let _ = nix::unistd::fchown(file, Some(Uid::from_raw(c.uid)), Some(Gid::from_raw(c.gid)));
    }
}

/// The complete environment of the child: ours, minus removals, plus the hook's variables, the
/// run user's identity, then the caller's extras.
fn child_env(invocation: &Invocation, options: &RunOptions) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(name, _)| !invocation.env_remove.contains(name))
        .collect();
    let mut set = |name: OsString, value: OsString| {
        match env.iter_mut().find(|(n, _)| *n == name) {
            Some(slot) => slot.1 = value,
            None => env.push((name, value)),
        };
    };
    for (name, value) in &invocation.env {
        set(name.clone(), value.clone());
    }
    if let Some(c) = &options.credentials {
        set("HOME".into(), c.home.clone().into());
        set("USER".into(), c.user.clone().into());
        set("LOGNAME".into(), c.user.clone().into());
        set("SHELL".into(), c.shell.clone().into());
    }
    for (name, value) in &options.extra_env {
        set(name.clone(), value.clone());
    }
    env
}

/// A bare program name is looked up in the child's `PATH` before the fork, because the child
/// calls `execve`, which does no lookup.
fn resolve_program(program: &Path, env: &[(OsString, OsString)]) -> Option<PathBuf> {
    if program.as_os_str().as_bytes().contains(&b'/') {
        return Some(program.to_owned());
    }
    let path = env.iter().find(|(name, _)| name == "PATH").map_or_else(
        || OsString::from("/usr/local/bin:/usr/bin:/bin"),
        |(_, v)| v.clone(),
    );
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| {
            candidate.is_file()
                && nix::unistd::access(candidate.as_path(), nix::unistd::AccessFlags::X_OK).is_ok()
        })
}

fn spawn_failure(program: &Path, err: &io::Error, credentials: Option<&Credentials>) -> String {
    let who = credentials.map_or_else(String::new, |c| format!(" as user {}", c.user));
    let hint = match err.raw_os_error() {
        Some(libc::ENOENT) if program.exists() => {
            "; its interpreter (the #! line) does not exist, fix that line"
        }
        Some(libc::ENOENT) => "; the file is gone, run `hookvisor check`",
        Some(libc::EACCES) => "; make it executable (chmod +x) and readable by that user",
        Some(libc::ENOEXEC) => "; start the file with a #! line naming its interpreter",
        Some(libc::EPERM) => "; switching users needs root",
        _ => "",
    };
    format!(
        "hookvisor: cannot run {}{who}: {err}{hint}",
        program.display()
    )
}

/// Everything the child needs between `fork` and `execve`, prepared before the fork because
/// nothing may be allocated after it.
fn exec_args(
    program: &Path,
    invocation: &Invocation,
    env: &[(OsString, OsString)],
    credentials: Option<&Credentials>,
) -> sys::ExecArgs {
    // Interior NUL bytes cannot come from the OS (paths, environment); a caller-made one is
    // dropped at the NUL rather than failing the run.
    let c = |bytes: &[u8]| {
        let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
        CString::new(&bytes[..end]).unwrap_or_default()
    };
    let mut args = Vec::with_capacity(1 + invocation.args.len());
    args.push(c(invocation.program.as_os_str().as_bytes()));
    args.extend(invocation.args.iter().map(|a| c(a.as_bytes())));
    let env = env
        .iter()
        .map(|(name, value)| {
            let mut pair = name.as_bytes().to_vec();
            pair.push(b'=');
            pair.extend_from_slice(value.as_bytes());
            c(&pair)
        })
        .collect();
    let euid = Uid::effective();
    // Switching needs root; a non-root caller naming its own identity keeps it as is.
    let switch = credentials
        .filter(|c| euid.is_root() || c.uid != euid.as_raw() || c.gid != Gid::effective().as_raw())
        .map(|c| (c.groups.clone(), c.gid, c.uid));
    sys::ExecArgs::new(c(program.as_os_str().as_bytes()), args, env, switch)
}

/// Forks and executes, retrying while the file is busy being written.
///
/// ETXTBSY happens when another thread of ours forked while it held the script open for writing
/// (the classic race of writing a script and running it); it clears as soon as that fork execs.
fn spawn(
    program: &Path,
    invocation: &Invocation,
    output: OwnedFd,
    exec: sys::ExecArgs,
) -> io::Result<Child> {
    let mut command = Command::new(program);
    command
        .current_dir(&invocation.cwd)
        .stdin(Stdio::null())
        .stdout(Stdio::from(output.try_clone()?))
        .stderr(Stdio::from(output));
    sys::prepare_exec(&mut command, exec);
    let mut backoff = Duration::from_millis(1);
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && backoff < TICK * 20 => {
                std::thread::sleep(backoff);
                backoff *= 2;
            }
            // Dropping `command` closes our copies of the pipe's write end, so EOF can come.
            result => return result,
        }
    }
}

fn child_pid(child: &Child) -> Pid {
    Pid::from_raw(child.id() as libc::pid_t)
}

/// True when the child has exited; it stays a zombie, so its pid (and the group id it gave its
/// group) cannot be reused before we kill the group and reap it.
fn has_exited(pid: Pid) -> io::Result<bool> {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    loop {
        match waitid(Id::Pid(pid), flags) {
            Ok(WaitStatus::StillAlive) => return Ok(false),
            Ok(_) => return Ok(true),
            Err(Errno::EINTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Sends a signal to the child's whole group; a group already gone is not an error.
fn signal_group(pid: Pid, signal: Signal) {
    let _ = killpg(pid, signal);
}

/// The loop of a run: read output, watch the child, the clock and the cancel token, until the
/// child is reaped and its output drained.
fn supervise(
    child: &mut Child,
    reader: OwnedFd,
    sink: &mut Sink,
    timeout: Duration,
    options: &RunOptions,
) -> io::Result<(ExitStatus, Ending)> {
    let pid = child_pid(child);
    // `None` on kernels without pidfd (< 5.3); the loop then checks every [`TICK`].
    let pidfd = sys::pidfd_open(pid.as_raw());
    let cancel = options.cancel.as_ref();
    let cancel_fd = cancel.and_then(CancelToken::wake_fd);
    let deadline = Instant::now().checked_add(timeout);

    let mut reader = Some(reader);
    let mut buffer = vec![0u8; READ_BUFFER];
    let mut ending = Ending::Exited;
    let mut kill_at: Option<Instant> = None;
    let mut stopping = false;
    let mut status: Option<(ExitStatus, Instant)> = None;

    loop {
        let now = Instant::now();
        if status.is_none() {
            let why = if cancel.is_some_and(CancelToken::is_cancelled) {
                Some(Ending::Cancelled)
            } else if deadline.is_some_and(|d| now >= d) {
                Some(Ending::TimedOut)
            } else {
                None
            };
            if let Some(why) = why
                && !stopping
            {
                stopping = true;
                ending = why;
                signal_group(pid, Signal::SIGTERM);
                kill_at = Some(now + options.kill_grace);
            }
            if kill_at.is_some_and(|at| now >= at) {
                signal_group(pid, Signal::SIGKILL);
                kill_at = None;
            }
            if has_exited(pid)? {
                // Whatever the hook left running goes with it.
                signal_group(pid, Signal::SIGKILL);
                status = Some((child.wait()?, now));
            }
        }
        if let Some((exit, exited_at)) = status
            && (reader.is_none() || now >= exited_at + DRAIN)
        {
            return Ok((exit, ending));
        }

        let mut wake: Option<Instant> = None;
        let mut earliest = |at: Instant| wake = Some(wake.map_or(at, |w| w.min(at)));
        match status {
            Some((_, exited_at)) => earliest(exited_at + DRAIN),
            None => {
                if let Some(at) = kill_at {
                    earliest(at);
                }
                if let Some(d) = deadline
                    && !stopping
                {
                    earliest(d);
                }
                if pidfd.is_none() || (cancel.is_some() && cancel_fd.is_none()) {
                    earliest(now + TICK);
                }
            }
        }

        let mut fds = Vec::with_capacity(3);
        if let Some(r) = &reader {
            fds.push(PollFd::new(r.as_fd(), PollFlags::POLLIN));
        }
        // The pidfd only wakes the loop; the exit itself is checked at the top of each turn.
        if let (Some(fd), None) = (&pidfd, status) {
            fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
        }
        if let Some(fd) = cancel_fd
            && status.is_none()
            && !stopping
        {
            fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
        }
        let timeout = wake.map_or(PollTimeout::NONE, |at| {
            // Round up, so the loop never spins through the last partial millisecond.
            let ms = at.saturating_duration_since(now).as_micros().div_ceil(1000);
            PollTimeout::from(ms.min(u128::from(u16::MAX)) as u16)
        });
        match poll(&mut fds, timeout) {
            Ok(_) | Err(Errno::EINTR) => {}
            Err(e) => return Err(e.into()),
        }
        let output_ready = reader.is_some()
            && fds[0].revents().is_some_and(|r| {
                r.intersects(PollFlags::POLLIN | PollFlags::POLLHUP | PollFlags::POLLERR)
            });
        drop(fds);

        if output_ready && let Some(r) = &reader {
            match nix::unistd::read(r, &mut buffer) {
                Ok(0) => reader = None,
                Ok(n) => sink.output(&buffer[..n]),
                Err(Errno::EAGAIN | Errno::EINTR) => {}
                Err(_) => reader = None,
            }
        }
    }
}

/// Where output goes: the capped log, the tail, and optionally our stderr.
struct Sink {
    log: Option<File>,
    log_limit: u64,
    logged: u64,
    total: u64,
    /// Last byte written to the log, so notes start on a line of their own.
    last: Option<u8>,
    truncation_noted: bool,
    tail: Tail,
    echo: Option<LineEcho>,
}

impl Sink {
    fn new(log: File, options: &RunOptions) -> Sink {
        Sink {
            log: Some(log),
            log_limit: options.log_limit,
            logged: 0,
            total: 0,
            last: None,
            truncation_noted: false,
            tail: Tail::default(),
            echo: options.echo_prefix.as_deref().map(LineEcho::new),
        }
    }

    fn output(&mut self, bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let room = self.log_limit.saturating_sub(self.logged);
        let logged = &bytes[..bytes.len().min(usize::try_from(room).unwrap_or(usize::MAX))];
        if !logged.is_empty() {
            self.logged += logged.len() as u64;
            self.write_log(logged);
        }
        self.tail.push(bytes);
        if let Some(echo) = &mut self.echo {
            echo.feed(bytes, &mut io::stderr().lock());
        }
    }

    fn write_log(&mut self, bytes: &[u8]) {
        if let Some(log) = &mut self.log {
            if let Err(err) = log.write_all(bytes) {
                // A full disk must not fail the hook; the run goes on, unlogged.
                tracing::warn!("hook log write failed, logging stopped: {err}");
                self.log = None;
            } else if let Some(&b) = bytes.last() {
                self.last = Some(b);
            }
        }
    }

    /// A line of ours (not the hook's): always logged, whatever the limit, on a line of its own.
    /// Notes come after the output, so the output's truncation note, if due, goes first.
    fn note(&mut self, line: &str) {
        self.note_truncation();
        if let Some(echo) = &mut self.echo {
            echo.finish(&mut io::stderr().lock());
        }
        let mut text = Vec::with_capacity(line.len() + 2);
        if self.last.is_some_and(|b| b != b'\n') {
            text.push(b'\n');
        }
        text.extend_from_slice(line.as_bytes());
        text.push(b'\n');
        self.write_log(&text);
        if self.tail.ends_open() {
            self.tail.push(b"\n");
        }
        self.tail.push(line.as_bytes());
        self.tail.push(b"\n");
        if let Some(echo) = &mut self.echo {
            echo.feed(line.as_bytes(), &mut io::stderr().lock());
            echo.finish(&mut io::stderr().lock());
        }
    }

    fn finish(mut self, exit_code: i32, ending: Ending, start: Instant) -> RunOutcome {
        self.note_truncation();
        if let Some(echo) = &mut self.echo {
            echo.finish(&mut io::stderr().lock());
        }
        if let Some(log) = &mut self.log {
            let _ = log.flush();
        }
        RunOutcome {
            exit_code,
            timed_out: ending == Ending::TimedOut,
            cancelled: ending == Ending::Cancelled,
            duration: start.elapsed(),
            tail: self.tail.into_string(),
            output_bytes: self.total,
            log_truncated: self.truncation_noted,
        }
    }

    /// Writes `[output truncated: N more bytes not logged]` once, when output was cut. It goes to
    /// the log only: the tail already holds the end of the output.
    fn note_truncation(&mut self) {
        if self.truncation_noted || self.total <= self.logged {
            return;
        }
        self.truncation_noted = true;
        let line = format!(
            "[output truncated: {} more bytes not logged]",
            self.total - self.logged
        );
        let mut text = Vec::with_capacity(line.len() + 2);
        if self.last.is_some_and(|b| b != b'\n') {
            text.push(b'\n');
        }
        text.extend_from_slice(line.as_bytes());
        text.push(b'\n');
        self.write_log(&text);
    }
}

/// The last [`TAIL_LIMIT`] bytes seen, in at most twice that memory.
#[derive(Default)]
struct Tail {
    buf: Vec<u8>,
    cut: bool,
}

impl Tail {
    fn push(&mut self, bytes: &[u8]) {
        if bytes.len() >= TAIL_LIMIT {
            self.buf.clear();
            self.buf
                .extend_from_slice(&bytes[bytes.len() - TAIL_LIMIT..]);
            self.cut = true;
            return;
        }
        // Trimming only past twice the limit keeps the cost of the memmove amortised.
        if self.buf.len() + bytes.len() > 2 * TAIL_LIMIT {
            let keep = TAIL_LIMIT - bytes.len();
            self.buf.drain(..self.buf.len() - keep);
            self.cut = true;
        }
        self.buf.extend_from_slice(bytes);
    }

    fn ends_open(&self) -> bool {
        self.buf.last().is_some_and(|&b| b != b'\n')
    }

    fn into_string(self) -> String {
        let start = self.buf.len().saturating_sub(TAIL_LIMIT);
        let mut tail = &self.buf[start..];
        if self.cut || start > 0 {
            // The cut may fall inside a character; drop its continuation bytes rather than show
            // a replacement character.
            let skip = tail
                .iter()
                .take(3)
                .take_while(|&&b| b & 0xC0 == 0x80)
                .count();
            tail = &tail[skip..];
        }
        String::from_utf8_lossy(tail).into_owned()
    }
}

/// Copies output to a writer line by line, each line prefixed `[name] `.
struct LineEcho {
    prefix: Vec<u8>,
    line: Vec<u8>,
}

impl LineEcho {
    fn new(name: &str) -> LineEcho {
        LineEcho {
            prefix: format!("[{}] ", crate::message::sanitize(name)).into_bytes(),
            line: Vec::new(),
        }
    }

    fn feed(&mut self, mut bytes: &[u8], out: &mut impl Write) {
        while !bytes.is_empty() {
            let room = ECHO_LINE_LIMIT - self.line.len();
            match bytes.iter().take(room).position(|&b| b == b'\n') {
                Some(i) => {
                    self.line.extend_from_slice(&bytes[..i]);
                    bytes = &bytes[i + 1..];
                    self.emit(out);
                }
                None => {
                    let take = bytes.len().min(room);
                    self.line.extend_from_slice(&bytes[..take]);
                    bytes = &bytes[take..];
                    if self.line.len() == ECHO_LINE_LIMIT {
                        self.emit(out);
                    }
                }
            }
        }
    }

    fn finish(&mut self, out: &mut impl Write) {
        if !self.line.is_empty() {
            self.emit(out);
        }
    }

    fn emit(&mut self, out: &mut impl Write) {
        // One write per line, so lines of hooks echoing at the same time do not mix.
        // Escape sequences could rewrite the terminal around the line (or the init's own
        // messages); they are removed as in the re-prompt.
        let line = crate::message::sanitize(&String::from_utf8_lossy(&self.line));
        let mut whole = Vec::with_capacity(self.prefix.len() + line.len() + 1);
        whole.extend_from_slice(&self.prefix);
        whole.extend_from_slice(line.as_bytes());
        whole.push(b'\n');
        let _ = out.write_all(&whole);
        self.line.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::RunAs;

    struct Fixture {
        _dir: tempfile::TempDir,
        ctx: Context,
    }

    fn fixture() -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().canonicalize().unwrap();
        let workspace = root.join("ws");
        fs::create_dir_all(workspace.join(".discobot/hooks")).unwrap();
        Fixture {
            ctx: Context {
                workspace,
                session_id: "s-test".into(),
                state_dir: root.join("state"),
            },
            _dir: dir,
        }
    }

    impl Fixture {
        /// A hook file `<id>.sh` with this body after a `#!/bin/sh` line.
        fn hook(&self, id: &str, kind: HookKind, body: &str) -> Hook {
            self.raw_hook(id, kind, &format!("#!/bin/sh\n{body}\n"), 0o755)
        }

        fn raw_hook(&self, id: &str, kind: HookKind, content: &str, mode: u32) -> Hook {
            let path = self.ctx.hooks_dir().join(format!("{id}.sh"));
            fs::write(&path, content).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            hook_at(id, kind, path)
        }

        fn log(&self, id: &str) -> String {
            String::from_utf8_lossy(&fs::read(self.ctx.log_path(id)).unwrap()).into_owned()
        }
    }

    fn hook_at(id: &str, kind: HookKind, path: PathBuf) -> Hook {
        Hook {
            id: id.into(),
            name: id.into(),
            kind,
            path,
            description: None,
            run_as: RunAs::User,
            blocking: false,
            pattern: None,
            notify_llm: true,
            timeout: Duration::from_secs(30),
        }
    }

    fn run(f: &Fixture, hook: &Hook) -> RunOutcome {
        run_hook(&f.ctx, hook, &[], &RunOptions::default()).unwrap()
    }

    fn in_ci() -> bool {
        std::env::var_os("CI").is_some_and(|v| v == "true")
    }

    /// Live (not zombie) processes whose process group is `pgid`.
    fn live_members(pgid: i32) -> Vec<String> {
        let mut found = Vec::new();
        for entry in fs::read_dir("/proc").unwrap().flatten() {
            let Ok(stat) = fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            // Fields after the parenthesised command: state, ppid, pgrp, ...
            let Some(rest) = stat.rfind(')').map(|i| &stat[i + 2..]) else {
                continue;
            };
            let fields: Vec<&str> = rest.split(' ').collect();
            if fields.len() > 2 && fields[2] == pgid.to_string() && fields[0] != "Z" {
                found.push(stat.clone());
            }
        }
        found
    }

    /// Polls until no live process of the group is left, or fails after a deadline.
    fn assert_group_gone(pgid: i32) {
        let deadline = Instant::now() + Duration::from_secs(3);
        loop {
            let members = live_members(pgid);
            if members.is_empty() {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "process group {pgid} still has live members: {members:?}"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn first_line_pid(text: &str) -> i32 {
        text.lines()
            .next()
            .and_then(|l| l.trim().parse().ok())
            .unwrap_or_else(|| panic!("no pid on the first line of {text:?}"))
    }

    #[test]
    fn exit_codes() {
        let f = fixture();
        let cases: &[(&str, &str, i32)] = &[
            ("zero", "exit 0", 0),
            ("one", "exit 1", 1),
            ("forty-two", "echo about to fail; exit 42", 42),
            ("term", "kill -TERM $$", 143),
            ("kill", "kill -KILL $$", 137),
        ];
        for (id, body, expected) in cases {
            let out = run(&f, &f.hook(id, HookKind::Session, body));
            assert_eq!(out.exit_code, *expected, "{id}: {out:?}");
            assert_eq!(out.success(), *expected == 0, "{id}");
            assert!(!out.timed_out && !out.cancelled, "{id}");
        }
    }

    #[test]
    fn spawn_failures_are_126_or_127_with_the_reason_logged() {
        let f = fixture();
        let dir = &f.ctx.hooks_dir();
        let cases: Vec<(Hook, i32, &str)> = vec![
            (
                hook_at("missing", HookKind::File, dir.join("missing.sh")),
                127,
                "No such file",
            ),
            (
                f.raw_hook(
                    "bad-interp",
                    HookKind::File,
                    "#!/nonexistent/sh\nexit 0\n",
                    0o755,
                ),
                127,
                "interpreter",
            ),
            (
                f.raw_hook("not-exec", HookKind::File, "#!/bin/sh\nexit 0\n", 0o644),
                126,
                "chmod +x",
            ),
            // No #! line: glibc's execvp would hand this to /bin/sh; we must not.
            (
                f.raw_hook("no-shebang", HookKind::File, "echo ran\nexit 0\n", 0o755),
                126,
                "#! line",
            ),
        ];
        for (hook, expected, reason) in cases {
            let out = run(&f, &hook);
            assert_eq!(out.exit_code, expected, "{}: {out:?}", hook.id);
            let log = f.log(&hook.id);
            assert!(log.contains(reason), "{}: log {log:?}", hook.id);
            assert!(
                !log.contains("ran"),
                "{}: must not run through a shell",
                hook.id
            );
            assert_eq!(log.lines().count(), 1, "{}: one line: {log:?}", hook.id);
            assert!(
                out.tail.contains(reason),
                "{}: tail {:?}",
                hook.id,
                out.tail
            );
        }
    }

    #[test]
    fn environment_and_working_directory() {
        let f = fixture();
        let files: Vec<PathBuf> = vec![
            "plain.go".into(),
            "with space.go".into(),
            "quo\"te's.go".into(),
            "new\nline.go".into(),
        ];
        let hook = f.hook(
            "env-check",
            HookKind::File,
            r#"printf '%s|%s|%s|%s|%s|%s\n' "$DISCOBOT_HOOK_TYPE" "$DISCOBOT_SESSION_ID" \
  "$DISCOBOT_WORKSPACE" "$HOOKVISOR_HOOK_ID" "$(pwd)" "$EXTRA_ONE"
cp "$HOOKVISOR_CHANGED_FILES_NUL" list.bin
printf '%s' "$DISCOBOT_CHANGED_FILES" > spaced.txt"#,
        );
        let options = RunOptions {
            extra_env: vec![("EXTRA_ONE".into(), "extra value".into())],
            ..RunOptions::default()
        };
        let out = run_hook(&f.ctx, &hook, &files, &options).unwrap();
        assert!(out.success(), "{out:?}");
        let ws = f.ctx.workspace.display().to_string();
        assert_eq!(
            out.tail,
            format!("file|s-test|{ws}|env-check|{ws}|extra value\n")
        );
        let list = fs::read(f.ctx.workspace.join("list.bin")).unwrap();
        let names: Vec<PathBuf> = list
            .split(|&b| b == 0)
            .filter(|n| !n.is_empty())
            .map(|n| String::from_utf8(n.to_vec()).unwrap().into())
            .collect();
        assert_eq!(names, files);
        assert!(list.ends_with(&[0]), "each name is NUL-terminated");
        assert_eq!(
            fs::read_to_string(f.ctx.workspace.join("spaced.txt")).unwrap(),
            "plain.go with space.go quo\"te's.go new\nline.go"
        );

        let session = f.hook(
            "session-env",
            HookKind::Session,
            r#"echo "${DISCOBOT_HOOK_TYPE}:${HOOKVISOR_CHANGED_FILES_NUL-unset}""#,
        );
        let out = run_hook(&f.ctx, &session, &files, &RunOptions::default()).unwrap();
        assert_eq!(out.tail, "session:unset\n");
    }

    #[test]
    fn stdout_and_stderr_interleave_in_order_and_the_log_is_overwritten() {
        let f = fixture();
        let hook = f.hook(
            "mixed",
            HookKind::Session,
            "echo out1; echo err1 >&2; echo out2; echo err2 >&2",
        );
        let out = run(&f, &hook);
        let expected = "out1\nerr1\nout2\nerr2\n";
        assert_eq!(f.log("mixed"), expected);
        assert_eq!(out.tail, expected);
        assert_eq!(out.output_bytes, expected.len() as u64);

        let hook = f.hook("mixed", HookKind::Session, "echo second");
        run(&f, &hook);
        assert_eq!(f.log("mixed"), "second\n");
    }

    #[test]
    fn stdin_is_null_and_no_descriptor_leaks() {
        let f = fixture();
        // A descriptor without close-on-exec, the kind a careless library leaves behind.
        let leaky =
            nix::fcntl::open("/dev/null", OFlag::O_RDONLY, nix::sys::stat::Mode::empty()).unwrap();
        let hook = f.hook(
            "fds",
            HookKind::Session,
            "ls /proc/self/fd | tr '\\n' ' '; echo\nreadlink /proc/self/fd/0 /proc/self/fd/1 /proc/self/fd/2",
        );
        let out = run(&f, &hook);
        drop(leaky);
        let lines: Vec<&str> = out.tail.lines().collect();
        assert_eq!(
            lines[0], "0 1 2 3 ",
            "ls sees only 0-2 and its own: {out:?}"
        );
        assert_eq!(lines[1], "/dev/null");
        assert!(lines[2].starts_with("pipe:"), "{lines:?}");
        assert_eq!(lines[2], lines[3], "stdout and stderr are the same pipe");
    }

    /// Runs one `#[ignore]`d test of this module in a fresh process of the test binary, for
    /// tests that change process-wide state or measure the whole process.
    fn run_isolated(test: &str) {
        let exe = std::env::current_exe().unwrap();
        let child = std::process::Command::new(exe)
            .args([
                "--exact",
                &format!("exec::tests::{test}"),
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .output()
            .unwrap();
        let stdout = String::from_utf8_lossy(&child.stdout);
        assert!(
            child.status.success() && stdout.contains("1 passed"),
            "{test} failed: {stdout}\n{}",
            String::from_utf8_lossy(&child.stderr)
        );
    }

    /// The standard library already clears the mask; ignored signals are what only we reset.
    #[test]
    fn signal_state_is_reset() {
        run_isolated("signal_state_child");
    }

    #[test]
    #[ignore = "run by signal_state_is_reset in a process of its own"]
    #[allow(unsafe_code)] // Sets up the state the init leaves, in a process of its own.
    fn signal_state_child() {
        use nix::sys::signal::{SigHandler, SigSet, SigmaskHow, pthread_sigmask, signal};
        let f = fixture();
        // What the init does: block signals, ignore some.
        let mut usr1 = SigSet::empty();
        usr1.add(Signal::SIGUSR1);
        pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&usr1), None).unwrap();
        for ignored in [Signal::SIGHUP, Signal::SIGUSR2, Signal::SIGTTOU] {
            // SAFETY: SIG_IGN installs no handler; this process runs only this test.
            unsafe { signal(ignored, SigHandler::SigIgn) }.unwrap();
        }
        let hook = f.hook(
            "mask",
            HookKind::Session,
            "grep -E '^Sig(Blk|Ign)' /proc/self/status",
        );
        let out = run(&f, &hook);
        assert_eq!(
            out.tail,
            "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"
        );
    }

    #[test]
    fn timeout_kills_the_whole_group_and_returns_promptly() {
        let f = fixture();
        let mut hook = f.hook("slow", HookKind::File, "echo $$\nsleep 1000 &\nsleep 1000");
        hook.timeout = Duration::from_secs(1);
        let options = RunOptions {
            kill_grace: Duration::from_millis(500),
            ..RunOptions::default()
        };
        let started = Instant::now();
        let out = run_hook(&f.ctx, &hook, &[], &options).unwrap();
        let elapsed = started.elapsed();
        assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
        assert_eq!(out.exit_code, 124);
        assert!(out.timed_out && !out.success());
        let log = f.log("slow");
        assert!(log.ends_with("[hook timed out after 1s]\n"), "{log:?}");
        assert_group_gone(first_line_pid(&log));
    }

    #[test]
    fn a_group_ignoring_term_is_killed_after_the_grace() {
        let f = fixture();
        let mut hook = f.hook(
            "stubborn",
            HookKind::Session,
            "trap '' TERM\necho $$\nsleep 1000 &\nsleep 1000",
        );
        hook.timeout = Duration::from_millis(300);
        let options = RunOptions {
            kill_grace: Duration::from_millis(300),
            ..RunOptions::default()
        };
        let started = Instant::now();
        let out = run_hook(&f.ctx, &hook, &[], &options).unwrap();
        let elapsed = started.elapsed();
        assert!(
            elapsed >= Duration::from_millis(600),
            "SIGKILL came before the grace: {elapsed:?}"
        );
        assert!(elapsed < Duration::from_secs(3), "took {elapsed:?}");
        assert_eq!(out.exit_code, 124);
        assert!(f.log("stubborn").contains("[hook timed out after 0.3s]"));
        assert_group_gone(first_line_pid(&out.tail));
    }

    #[test]
    fn leftovers_are_killed_when_the_hook_exits() {
        let f = fixture();
        let hook = f.hook("bg", HookKind::Session, "echo $$\nsleep 1000 &\nexit 3");
        let started = Instant::now();
        let out = run(&f, &hook);
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(out.exit_code, 3);
        assert_group_gone(first_line_pid(&out.tail));
    }

    #[test]
    fn an_escaped_descendant_holding_the_pipe_is_killed_and_does_not_hang_the_run() {
        let f = fixture();
        let pid_file = f.ctx.workspace.join("daemon.pid");
        let hook = f.hook(
            "escape",
            HookKind::Session,
            "setsid sh -c 'echo $$ > daemon.pid.tmp; mv daemon.pid.tmp daemon.pid; exec sleep 1000' &\n\
             while [ ! -e daemon.pid ]; do :; done\necho done",
        );
        let started = Instant::now();
        let out = run(&f, &hook);
        let elapsed = started.elapsed();
        let daemon: i32 = fs::read_to_string(&pid_file)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // Killed before the run returned; it may take a moment to finish dying, and stays a
        // zombie until its new parent reaps it.
        let state = |pid: i32| {
            fs::read_to_string(format!("/proc/{pid}/stat"))
                .map(|stat| stat[stat.rfind(')').unwrap() + 2..].chars().next().unwrap())
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while !matches!(state(daemon), Err(_) | Ok('Z')) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        let last = state(daemon);
        let _ = nix::sys::signal::kill(Pid::from_raw(daemon), Signal::SIGKILL);
        assert!(matches!(last, Err(_) | Ok('Z')), "daemon state {last:?}");
        assert!(out.success(), "{out:?}");
        assert_eq!(
            out.tail,
            "done\n[hookvisor: killed 1 process(es) the hook left running]\n"
        );
        assert!(elapsed < Duration::from_secs(2), "took {elapsed:?}");
    }

    #[test]
    fn cancel_from_another_thread_stops_the_run_promptly() {
        let f = fixture();
        let hook = f.hook(
            "cancel-me",
            HookKind::File,
            "echo $$\n: > started\nsleep 1000 &\nsleep 1000",
        );
        let token = CancelToken::new();
        let started_file = f.ctx.workspace.join("started");
        let canceller = {
            let token = token.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(10);
                while !started_file.exists() {
                    assert!(Instant::now() < deadline, "hook never started");
                    std::thread::sleep(Duration::from_millis(5));
                }
                token.cancel();
                Instant::now()
            })
        };
        let options = RunOptions {
            cancel: Some(token.clone()),
            ..RunOptions::default()
        };
        let out = run_hook(&f.ctx, &hook, &[], &options).unwrap();
        let returned = Instant::now();
        let cancelled_at = canceller.join().unwrap();
        assert!(out.cancelled && !out.timed_out && !out.success(), "{out:?}");
        assert!(
            returned - cancelled_at < Duration::from_millis(500),
            "noticed the cancel after {:?}",
            returned - cancelled_at
        );
        assert!(f.log("cancel-me").ends_with("[hook cancelled]\n"));
        assert_group_gone(first_line_pid(&out.tail));

        // A cancelled token keeps later runs from starting at all.
        let marker = f.hook("never", HookKind::File, ": > ran");
        let out = run_hook(&f.ctx, &marker, &[], &options).unwrap();
        assert!(out.cancelled);
        assert!(!f.ctx.workspace.join("ran").exists());
    }

    #[test]
    fn the_log_is_capped_with_a_note_and_the_tail_keeps_the_end() {
        let f = fixture();
        let hook = f.hook(
            "chatty",
            HookKind::Session,
            "printf 'abcdefghij%.0s' $(seq 10); echo END",
        );
        let options = RunOptions {
            log_limit: 25,
            ..RunOptions::default()
        };
        let out = run_hook(&f.ctx, &hook, &[], &options).unwrap();
        assert_eq!(out.output_bytes, 104);
        assert!(out.log_truncated);
        assert_eq!(
            f.log("chatty"),
            "abcdefghijabcdefghijabcde\n[output truncated: 79 more bytes not logged]\n"
        );
        assert!(out.tail.ends_with("abcdefghijEND\n"), "{:?}", out.tail);

        // Notes come in the order things happened: the output was cut, then the clock ran out.
        let mut hook = f.hook(
            "cut-slow",
            HookKind::Session,
            "printf 0123456789; exec sleep 1000",
        );
        hook.timeout = Duration::from_millis(300);
        let options = RunOptions {
            log_limit: 4,
            kill_grace: Duration::from_millis(100),
            ..RunOptions::default()
        };
        let out = run_hook(&f.ctx, &hook, &[], &options).unwrap();
        assert!(out.timed_out && out.log_truncated);
        assert_eq!(
            f.log("cut-slow"),
            "0123\n[output truncated: 6 more bytes not logged]\n[hook timed out after 0.3s]\n"
        );
        assert_eq!(out.tail, "0123456789\n[hook timed out after 0.3s]\n");
    }

    #[test]
    fn a_symlink_planted_at_the_log_path_is_replaced_not_followed() {
        let f = fixture();
        let precious = f.ctx.workspace.join("precious");
        fs::write(&precious, "keep me").unwrap();
        let log = f.ctx.log_path("sneaky");
        fs::create_dir_all(log.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&precious, &log).unwrap();
        let hook = f.hook("sneaky", HookKind::Session, "echo overwritten");
        run(&f, &hook);
        assert_eq!(fs::read_to_string(&precious).unwrap(), "keep me");
        assert!(fs::symlink_metadata(&log).unwrap().is_file());
        assert_eq!(f.log("sneaky"), "overwritten\n");
    }

    /// The real measurement runs in a child process of its own (see `huge_output_child`), so
    /// the memory of tests running in parallel cannot blur it.
    #[test]
    fn huge_output_keeps_memory_small() {
        run_isolated("huge_output_child");
    }

    fn high_water_kib() -> u64 {
        let status = fs::read_to_string("/proc/self/status").unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmHWM:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    }

    #[test]
    #[ignore = "run by huge_output_keeps_memory_small in a process of its own"]
    fn huge_output_child() {
        const SIZE: u64 = 300_000_000;
        let f = fixture();
        let hook = f.hook(
            "huge",
            HookKind::Session,
            &format!("head -c {SIZE} /dev/zero"),
        );
        let before = high_water_kib();
        let out = run(&f, &hook);
        let growth = high_water_kib().saturating_sub(before);
        assert!(out.success(), "{out:?}");
        assert_eq!(out.output_bytes, SIZE);
        assert!(out.log_truncated);
        assert_eq!(out.tail.len(), TAIL_LIMIT);
        assert!(growth < 32 * 1024, "peak memory grew by {growth} KiB");
        let limit = RunOptions::default().log_limit;
        let log = fs::read(f.ctx.log_path("huge")).unwrap();
        let note = format!(
            "\n[output truncated: {} more bytes not logged]\n",
            SIZE - limit
        );
        assert_eq!(log.len() as u64, limit + note.len() as u64);
        assert!(log.ends_with(note.as_bytes()));
    }

    /// Creates `hv-test` with the supplementary group `hv-test-extra` once, safely when several
    /// tests (or test binaries) do it at the same time. False when not root and not in CI.
    fn ensure_test_user() -> bool {
        if !Uid::effective().is_root() {
            assert!(
                !in_ci(),
                "CI=true but not root: cannot create the user hv-test"
            );
            eprintln!("note: not root, skipping the credentials test");
            return false;
        }
        let lock = File::create("/tmp/hookvisor-test-user.lock").unwrap();
        let _lock = nix::fcntl::Flock::lock(lock, nix::fcntl::FlockArg::LockExclusive)
            .map_err(|(_, e)| e)
            .unwrap();
        let sh = |cmd: &str| {
            let status = std::process::Command::new("/bin/sh")
                .args(["-c", cmd])
                .status()
                .unwrap_or_else(|e| panic!("{cmd}: {e}"));
            assert!(status.success(), "{cmd}: {status}");
        };
        sh("getent group hv-test-extra >/dev/null || groupadd hv-test-extra");
        sh("id hv-test >/dev/null 2>&1 || useradd --create-home --groups hv-test-extra hv-test");
        sh("id -nG hv-test | grep -qw hv-test-extra || usermod -aG hv-test-extra hv-test");
        true
    }

    #[test]
    fn credentials_are_applied() {
        if !ensure_test_user() {
            return;
        }
        let creds = Credentials::from_name("hv-test").unwrap();
        let extra = nix::unistd::Group::from_name("hv-test-extra")
            .unwrap()
            .unwrap()
            .gid
            .as_raw();
        assert!(creds.groups.contains(&extra) && creds.groups.contains(&creds.gid));
        assert_ne!(creds.uid, 0);

        let f = fixture();
        // The temp dir is 0700 root; the user needs to reach the script and the workspace.
        let root = f.ctx.workspace.parent().unwrap();
        fs::set_permissions(root, fs::Permissions::from_mode(0o755)).unwrap();
        let hook = f.hook(
            "whoami",
            HookKind::File,
            "id -u; id -g; id -G; echo \"$HOME $USER $LOGNAME\"; tr '\\0' '\\n' < \"$HOOKVISOR_CHANGED_FILES_NUL\"",
        );
        let options = RunOptions {
            credentials: Some(creds.clone()),
            ..RunOptions::default()
        };
        let out = run_hook(&f.ctx, &hook, &["a.go".into()], &options).unwrap();
        assert!(out.success(), "{out:?}");
        let lines: Vec<&str> = out.tail.lines().collect();
        assert_eq!(lines[0], creds.uid.to_string());
        assert_eq!(lines[1], creds.gid.to_string());
        let mut seen: Vec<u32> = lines[2].split(' ').map(|g| g.parse().unwrap()).collect();
        let mut want = creds.groups.clone();
        seen.sort_unstable();
        want.sort_unstable();
        want.dedup();
        assert_eq!(seen, want);
        assert_eq!(
            lines[3],
            format!("{} hv-test hv-test", creds.home.display())
        );
        assert_eq!(lines[4], "a.go");

        assert_eq!(
            Credentials::from_name("hv-no-such-user")
                .unwrap_err()
                .to_string(),
            "no user 'hv-no-such-user' in /etc/passwd; create it (useradd hv-no-such-user) or pass --user UID[:GID]"
        );
    }

    #[test]
    fn current_credentials_change_nothing() {
        let f = fixture();
        let me = Credentials::current().unwrap();
        let hook = f.hook("me", HookKind::Session, "id -u; echo \"$USER\"");
        let options = RunOptions {
            credentials: Some(me.clone()),
            ..RunOptions::default()
        };
        let out = run_hook(&f.ctx, &hook, &[], &options).unwrap();
        assert!(out.success(), "{out:?}");
        assert_eq!(out.tail, format!("{}\n{}\n", me.uid, me.user));
    }

    #[test]
    fn unwritable_log_is_an_error_naming_the_path() {
        let f = fixture();
        fs::create_dir_all(&f.ctx.state_dir).unwrap();
        // A file where the output directory should be: fails even for root.
        fs::write(f.ctx.state_dir.join("output"), "").unwrap();
        let hook = f.hook("x", HookKind::Session, "exit 0");
        let err = run_hook(&f.ctx, &hook, &[], &RunOptions::default()).unwrap_err();
        let text = err.to_string();
        assert!(
            text.contains(&f.ctx.log_path("x").display().to_string()),
            "{text}"
        );
        assert!(text.contains("--state-dir"), "{text}");
    }

    #[test]
    fn run_command_finds_bare_names_in_path() {
        let f = fixture();
        let invocation = |program: &str| Invocation {
            program: program.into(),
            args: vec![
                "-c".into(),
                "echo \"$0 $1\"".into(),
                "x".into(),
                "arg one".into(),
            ],
            env: Vec::new(),
            env_remove: Vec::new(),
            cwd: f.ctx.workspace.clone(),
            log_path: f.ctx.log_path("cmd"),
            timeout: Duration::from_secs(10),
        };
        let out = run_command(&invocation("sh"), &RunOptions::default()).unwrap();
        assert_eq!(out.tail, "x arg one\n");
        let out = run_command(&invocation("no-such-program-hv"), &RunOptions::default()).unwrap();
        assert_eq!(out.exit_code, 127);
        assert!(f.log("cmd").contains("not found in PATH"));
        let gone = Invocation {
            cwd: f.ctx.workspace.join("gone"),
            ..invocation("sh")
        };
        let out = run_command(&gone, &RunOptions::default()).unwrap();
        assert_eq!(out.exit_code, 126);
        assert!(out.tail.contains("working directory"), "{:?}", out.tail);
    }

    #[test]
    fn echo_prefixes_lines_and_cuts_endless_ones() {
        let cases: &[(&[&[u8]], &str)] = &[
            (&[b"a\nb\n"], "[h] a\n[h] b\n"),
            (&[b"par", b"tial\nend"], "[h] partial\n[h] end\n"),
            (&[b"\n\n"], "[h] \n[h] \n"),
        ];
        for (chunks, expected) in cases {
            let mut echo = LineEcho::new("h");
            let mut out = Vec::new();
            for chunk in *chunks {
                echo.feed(chunk, &mut out);
            }
            echo.finish(&mut out);
            assert_eq!(String::from_utf8(out).unwrap(), *expected);
        }
        let mut echo = LineEcho::new("h");
        let mut out = Vec::new();
        echo.feed(&vec![b'x'; ECHO_LINE_LIMIT * 2 + 1], &mut out);
        echo.finish(&mut out);
        assert_eq!(out.iter().filter(|&&b| b == b'\n').count(), 3);
    }

    #[test]
    fn tail_keeps_the_last_bytes_on_a_character_boundary() {
        let cases: Vec<(Vec<Vec<u8>>, usize, &str)> = vec![
            (vec![b"short".to_vec()], 5, "short"),
            (
                vec![vec![b'a'; TAIL_LIMIT + 10], b"end".to_vec()],
                TAIL_LIMIT,
                "end",
            ),
            (
                (0..300)
                    .map(|i| format!("{i:04}").repeat(100).into_bytes())
                    .collect(),
                TAIL_LIMIT,
                "0299",
            ),
            // 'é' is two bytes; a cut in its middle drops the orphan byte.
            (
                vec![format!("{}z", "é".repeat(TAIL_LIMIT)).into_bytes()],
                TAIL_LIMIT,
                "éz",
            ),
        ];
        for (chunks, len, end) in cases {
            let mut tail = Tail::default();
            for chunk in &chunks {
                tail.push(chunk);
            }
            assert!(tail.buf.len() <= 2 * TAIL_LIMIT);
            let text = tail.into_string();
            assert!(text.len() <= len && text.len() + 1 >= len, "{}", text.len());
            assert!(text.ends_with(end));
            assert!(!text.contains('\u{FFFD}'));
        }
    }
}

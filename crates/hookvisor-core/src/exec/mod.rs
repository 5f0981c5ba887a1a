//! Running one hook: environment, working directory, credentials, timeout, process group and the
//! output log (docs/DESIGN.md, "Running a hook").
//!
//! [`run_hook`] is the whole contract for one hook; `run_command` is the same machinery for any
//! program. Both are synchronous and single-threaded: one `poll` waits on the output pipes, the
//! child's exit (a pidfd), the [`CancelToken`] and the next deadline, so the PID-1 init can call
//! them from a forked single-threaded child.
//!
//! The rules a run follows, in the order they apply:
//!
//! 1. The program is executed directly (no shell, not even glibc's fallback for files without a
//!    `#!` line) with stdin on `/dev/null` and stdout and stderr on one pipe, so output keeps the
//!    order it was written in ([`Capture::Merged`]). [`RunOptions::stdin`] gives it bytes as
//!    stdin instead (docs/EVENTS.md §4.1, "Transport": the event JSON), in a sealed memory file made
//!    before the fork, which no other process can change, and which has no path for the agent to
//!    swap; when it cannot be made, that is an [`ExecError::Stdin`] and nothing runs. The child
//!    gets its own process group, an empty signal mask, default signal dispositions, no
//!    descriptor above 2 and, with [`Credentials`], the user's supplementary groups, gid and uid,
//!    set in that order.
//! 2. At most [`RunOptions::log_limit`] bytes of output go to the log, then one line
//!    `[output truncated: N more bytes not logged]`; the last 64 KiB are kept in memory as the tail.
//! 3. At the timeout, or on cancel, the whole group gets SIGTERM and, after
//!    [`RunOptions::kill_grace`], SIGKILL; a timeout is exit code 124 with a
//!    `[hook timed out after Ns]` line in the log.
//! 4. When the direct child exits, whatever is left of its group is killed; output still in the
//!    pipes is read for at most 200 ms more, so a descendant that escaped the group and holds
//!    either pipe cannot hold the run open. Then every process still carrying the run's
//!    `HOOKVISOR_RUN` marker (one that left the group with `setsid`, a daemon) is killed too (see
//!    `leftovers`).
//! 5. Exit codes: the child's own; 128+n for death by signal n; 127 when the program or its
//!    interpreter does not exist; 126 for any other failure to start, with the reason in the log.
//! 6. [`Capture::Separate`] puts stdout and stderr on two pipes, polled together, and keeps what
//!    each stream carried in [`RunOutcome::captured`] (docs/EVENTS.md §1.5: a decision is "stdout one
//!    JSON object", a reason is "stderr, else stdout"): the *first* `limit` bytes of stdout, since
//!    a JSON decision is only useful whole, and the *last* `limit` bytes of stderr, since the end
//!    of an error is what explains it. The log, the tail and the echo still get every byte of both
//!    under rules 2–4, in the order the reads return them. Each read takes up to 64 KiB (a
//!    default pipe's whole content) from one pipe, so chunks interleave only at read boundaries:
//!    output written close together on the two streams may appear in either order, and a line
//!    written in several pieces may be split by a chunk of the other stream. Only the child's
//!    bytes are captured; our notes (`[hook timed out after Ns]`, why a program could not start)
//!    go to the log and the tail only, and the capture is empty when the program did not start.
//!
//! This file holds the contract and the order of a run; each step lives in a module of its own:
//! `stdin` seals its input and `spawn` starts the child (rule 1), `output` takes what it prints
//! (rule 2) and `capture` keeps the streams apart (rule 6), `supervise` watches it to its end
//! (rules 3 and 4) and `cancel` stops it from elsewhere.

mod cancel;
mod capture;
mod output;
pub use output::write_whole_log;
mod spawn;
mod stdin;
mod supervise;

use std::ffi::OsString;
use std::io;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use nix::fcntl::OFlag;
use nix::sys::signal::{Signal, killpg};

pub use self::cancel::CancelToken;
use self::capture::Stream;
use self::output::{Sink, create_log, write_changed_list};
use self::spawn::{Writers, child_env, exec_args, resolve_program, spawn, spawn_failure};
use self::stdin::open_stdin;
use self::supervise::{reap, supervise};
// Lives in account.rs; session.rs, seal.rs and user_fs.rs name it through here.
use crate::account::Credentials;
use crate::context::Context;
use crate::event::HookKind;
use crate::hook::Hook;
use crate::leftovers;
use crate::seal::SealedScript;
use crate::sys;

/// Poll tick used only when the kernel has no pidfd or the cancel pipe could not be made.
const TICK: Duration = Duration::from_millis(50);

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
    /// The child's stdin: these bytes, in a sealed memfd (rule 1). Default `None`: `/dev/null`.
    pub stdin: Option<Arc<[u8]>>,
    /// Whether stdout and stderr share one pipe or are captured apart (rule 6). Default
    /// [`Capture::Merged`].
    pub capture: Capture,
}

/// How the child's stdout and stderr are taken (rule 6 of the module documentation).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Capture {
    /// One pipe for both, so the log keeps the order things were written in; nothing is
    /// captured beyond [`RunOutcome::tail`]. The default.
    #[default]
    Merged,
    /// Two pipes; [`RunOutcome::captured`] keeps up to `limit` bytes of each stream.
    Separate {
        /// Bytes kept per stream: the first of stdout, the last of stderr.
        limit: usize,
    },
}

/// What a [`Capture::Separate`] run wrote on each stream, within the limit (rule 6).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Captured {
    /// The first `limit` bytes the child wrote to stdout.
    pub stdout: Vec<u8>,
    /// The last `limit` bytes the child wrote to stderr.
    pub stderr: Vec<u8>,
    /// Stdout had more than `limit` bytes; its end is missing.
    pub stdout_truncated: bool,
    /// Stderr had more than `limit` bytes; its beginning is missing.
    pub stderr_truncated: bool,
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
            stdin: None,
            capture: Capture::Merged,
        }
    }
}

/// What one run did. The default is a run that exited 0 at once, printing nothing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
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
    /// Each stream apart under [`Capture::Separate`], also when the program could not start
    /// (then both are empty); `None` under [`Capture::Merged`].
    pub captured: Option<Captured>,
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
    /// The sealed memory file for [`RunOptions::stdin`] cannot be made.
    #[error("cannot make a hook's stdin: {source}")]
    Stdin {
        /// What the system said.
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
pub struct Invocation {
    /// The program: a path, or a bare name looked up in the child's `PATH`.
    pub program: PathBuf,
    /// Where the caller found a bare `program` already (its lookup in the same `PATH`), so
    /// that the run does not look again; `argv[0]` stays `program`. `None`: the run looks.
    pub found: Option<PathBuf>,
    /// Arguments after `argv[0]` (which is the program as given).
    pub args: Vec<OsString>,
    /// Variables set over the inherited environment.
    pub env: Vec<(OsString, OsString)>,
    /// Inherited variables the program must not see.
    pub env_remove: Vec<OsString>,
    /// Working directory.
    pub cwd: PathBuf,
    /// Where the output goes; created with its directories, overwritten.
    pub log_path: PathBuf,
    /// When the process group is stopped.
    pub timeout: Duration,
}

/// Runs one hook to the end as docs/DESIGN.md "Running a hook" says, and returns what happened.
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
        let list = ctx.state().changed_list(&hook.id);
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
        found: None,
        args: Vec::new(),
        env,
        env_remove,
        cwd: ctx.workspace.clone(),
        log_path: ctx.log_path(&hook.id),
        timeout: hook.timeout,
    };
    run_command(&invocation, options)
}

/// Where `execve` itself would run `program` from, named directly or found in our `PATH` as a
/// run looks it up; `None` unless it is an executable file starting with `\x7fELF` or `#!`.
/// A file without either is run by sh, not by the kernel (`ENOEXEC`), so it needs the shell.
pub(crate) fn direct_exec_path(program: &Path) -> Option<PathBuf> {
    use std::io::Read;
    let env: Vec<(OsString, OsString)> = std::env::var_os("PATH")
        .map(|path| ("PATH".into(), path))
        .into_iter()
        .collect();
    let found = resolve_program(program, &env)?;
    // A name with a `/` is taken as it is: nothing checked it.
    nix::unistd::access(found.as_path(), nix::unistd::AccessFlags::X_OK).ok()?;
    let mut magic = [0u8; 4];
    std::fs::File::open(&found)
        .and_then(|mut file| file.read_exact(&mut magic))
        .is_ok_and(|()| magic == *b"\x7fELF" || magic.starts_with(b"#!"))
        .then_some(found)
}

/// Runs any program with the rules of this module (see the module documentation).
pub fn run_command(invocation: &Invocation, options: &RunOptions) -> Result<RunOutcome, ExecError> {
    let start = Instant::now();
    // Before the log is made: a run that cannot get its input is not attempted at all.
    let stdin = match &options.stdin {
        Some(bytes) => Some(open_stdin(bytes)?),
        None => None,
    };
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
    leftovers::add_marker(&mut env, &marker);
    let resolved = match (&options.sealed, &invocation.found) {
        (Some(sealed), _) => Some(sealed.path.clone()),
        (None, Some(found)) => Some(found.clone()),
        (None, None) => resolve_program(&invocation.program, &env),
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
    let (readers, writers) = match options.capture {
        Capture::Merged => {
            let (read, write) = output_pipe()?;
            ([Some((read, Stream::Merged)), None], Writers::Merged(write))
        }
        Capture::Separate { .. } => {
            let (out_read, stdout) = output_pipe()?;
            let (err_read, stderr) = output_pipe()?;
            (
                [
                    Some((out_read, Stream::Stdout)),
                    Some((err_read, Stream::Stderr)),
                ],
                Writers::Separate { stdout, stderr },
            )
        }
    };

    let mut exec = exec_args(&program, invocation, &env, options.credentials.as_ref());
    exec.execute_fd(options.sealed.as_ref().map(|s| s.fd().as_raw_fd()));
    let child = match spawn(&program, invocation, stdin, writers, exec) {
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

    let supervised = supervise(child, readers, &mut sink, invocation.timeout, options);
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
            let _ = killpg(child, Signal::SIGKILL);
            let _ = reap(child);
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

/// A pipe for output: the read end non-blocking for the poll loop, both ends close-on-exec (the
/// child gets its copy of the write end through `dup2`, which clears the flag).
fn output_pipe() -> Result<(OwnedFd, OwnedFd), ExecError> {
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
    Ok((read, write))
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

#[cfg(test)]
pub(crate) mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::hook::RunAs;

    pub(super) struct Fixture {
        _dir: tempfile::TempDir,
        pub(super) ctx: Context,
    }

    pub(super) fn fixture() -> Fixture {
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
        pub(super) fn hook(&self, id: &str, kind: HookKind, body: &str) -> Hook {
            self.raw_hook(id, kind, &format!("#!/bin/sh\n{body}\n"), 0o755)
        }

        pub(super) fn raw_hook(&self, id: &str, kind: HookKind, content: &str, mode: u32) -> Hook {
            let path = self.ctx.hooks_dir().join(format!("{id}.sh"));
            fs::write(&path, content).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            hook_at(id, kind, path)
        }

        pub(super) fn log(&self, id: &str) -> String {
            String::from_utf8_lossy(&fs::read(self.ctx.log_path(id)).unwrap()).into_owned()
        }
    }

    pub(super) fn hook_at(id: &str, kind: HookKind, path: PathBuf) -> Hook {
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
            spec: crate::event::EventSpec::for_kind(kind),
            origin: crate::hook::Origin::Workspace,
            phase1: true,
        }
    }

    pub(super) fn run(f: &Fixture, hook: &Hook) -> RunOutcome {
        run_hook(&f.ctx, hook, &[], &RunOptions::default()).unwrap()
    }

    /// Runs one `#[ignore]`d test, named by its path in the crate, in a fresh process of the test
    /// binary, for tests that change process-wide state or measure the whole process.
    pub(crate) fn run_isolated(test: &str) {
        let exe = std::env::current_exe().unwrap();
        let child = std::process::Command::new(exe)
            .args([
                "--exact",
                test,
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
    fn run_command_finds_bare_names_in_path() {
        let f = fixture();
        let invocation = |program: &str| Invocation {
            program: program.into(),
            found: None,
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
}

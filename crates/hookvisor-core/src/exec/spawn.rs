//! Starting the child: its environment, the program's path, what it needs between `fork` and
//! `execve`, and the message when it cannot start.

use std::ffi::{CString, OsString};
use std::io;
use std::os::fd::AsFd;
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use nix::unistd::{Gid, Pid, Uid};

use super::{Credentials, Invocation, RunOptions, TICK};
use crate::sys;

/// The complete environment of the child: ours, minus removals, plus the hook's variables, the
/// run user's identity, then the caller's extras.
pub(super) fn child_env(
    invocation: &Invocation,
    options: &RunOptions,
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = std::env::vars_os()
        .filter(|(name, _)| !invocation.env_remove.contains(name))
        .collect();
    for (name, value) in &invocation.env {
        set(&mut env, name.clone(), value.clone());
    }
    if let Some(c) = &options.credentials {
        set(&mut env, "HOME".into(), c.home.clone().into());
        set(&mut env, "USER".into(), c.user.clone().into());
        set(&mut env, "LOGNAME".into(), c.user.clone().into());
        set(&mut env, "SHELL".into(), c.shell.clone().into());
    }
    for (name, value) in &options.extra_env {
        set(&mut env, name.clone(), value.clone());
    }
    if options.credentials.as_ref().is_some_and(|c| c.uid != 0) {
        // The user's git works in the hook's workspace whoever owns it; never root's
        // (`git::trust_env`).
        for (name, value) in crate::git::trust_env(&invocation.cwd, &env) {
            set(&mut env, name, value);
        }
    }
    env
}

/// Sets one variable of `env`, replacing the one of that name: each name appears once.
fn set(env: &mut Vec<(OsString, OsString)>, name: OsString, value: OsString) {
    match env.iter_mut().find(|(n, _)| *n == name) {
        Some(slot) => slot.1 = value,
        None => env.push((name, value)),
    }
}

/// A bare program name is looked up in the child's `PATH` before the fork, because the child
/// calls `execve`, which does no lookup.
pub(super) fn resolve_program(program: &Path, env: &[(OsString, OsString)]) -> Option<PathBuf> {
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

pub(super) fn spawn_failure(
    program: &Path,
    err: &io::Error,
    credentials: Option<&Credentials>,
) -> String {
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
pub(super) fn exec_args(
    program: &Path,
    invocation: &Invocation,
    env: &[(OsString, OsString)],
    credentials: Option<&Credentials>,
) -> sys::ExecArgs {
    let args = std::iter::once(invocation.program.as_os_str().as_bytes())
        .chain(invocation.args.iter().map(|a| a.as_bytes()));
    let env = env
        .iter()
        .map(|(name, value)| (name.as_bytes(), value.as_bytes()));
    let euid = Uid::effective();
    // Switching needs root; a non-root caller naming its own identity keeps it as is.
    let switch = credentials
        .filter(|c| euid.is_root() || c.uid != euid.as_raw() || c.gid != Gid::effective().as_raw())
        .map(|c| {
            let groups = c.groups.iter().map(|&g| Gid::from_raw(g)).collect();
            (groups, Gid::from_raw(c.gid), Uid::from_raw(c.uid))
        });
    // A path with a NUL cannot name a file; the empty program fails the spawn with ENOENT.
    let program = CString::new(program.as_os_str().as_bytes()).unwrap_or_default();
    sys::ExecArgs::new(program, args, env, switch)
}

/// The write ends of the output pipes the child gets as stdout and stderr.
pub(super) enum Writers {
    /// One pipe for both ([`Capture::Merged`](super::Capture::Merged)).
    Merged(OwnedFd),
    /// A pipe each ([`Capture::Separate`](super::Capture::Separate)).
    Separate {
        /// Becomes the child's stdout.
        stdout: OwnedFd,
        /// Becomes the child's stderr.
        stderr: OwnedFd,
    },
}

/// Starts the child, retrying while the file is busy being written; `stdin` is an open file
/// (see `stdin.rs`), `None` for `/dev/null`. Returns its pid; the caller reaps it.
///
/// A hook that keeps our credentials and runs a file by its path (every event hook of an agent)
/// starts through `posix_spawn` (a vfork: nothing of our image is copied); switching users or
/// executing a sealed descriptor needs code between fork and exec, so those fork.
///
/// ETXTBSY happens when another thread of ours forked while it held the script open for writing
/// (the classic race of writing a script and running it); it clears as soon as that fork execs.
pub(super) fn spawn(
    program: &Path,
    invocation: &Invocation,
    stdin: Option<OwnedFd>,
    writers: Writers,
    exec: sys::ExecArgs,
) -> io::Result<Pid> {
    let (stdout, stderr) = match writers {
        Writers::Merged(output) => (output.try_clone()?, output),
        Writers::Separate { stdout, stderr } => (stdout, stderr),
    };
    let cwd = CString::new(invocation.cwd.as_os_str().as_bytes())
        .map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    if let Some(first) = sys::posix_spawn(
        &exec,
        &cwd,
        stdin.as_ref().map(AsFd::as_fd),
        stdout.as_fd(),
        stderr.as_fd(),
    ) {
        let mut result = first;
        let mut backoff = Duration::from_millis(1);
        while matches!(&result, Err(e) if e.raw_os_error() == Some(libc::ETXTBSY))
            && backoff < TICK * 20
        {
            std::thread::sleep(backoff);
            backoff *= 2;
            result = sys::posix_spawn(
                &exec,
                &cwd,
                stdin.as_ref().map(AsFd::as_fd),
                stdout.as_fd(),
                stderr.as_fd(),
            )
            .unwrap_or_else(|| Err(io::Error::from_raw_os_error(libc::EINVAL)));
        }
        // Dropping our copies of the pipes' write ends here lets EOF come.
        return result.map(Pid::from_raw);
    }
    let mut command = Command::new(program);
    command
        .current_dir(&invocation.cwd)
        .stdin(stdin.map_or_else(Stdio::null, Stdio::from))
        .stdout(Stdio::from(stdout))
        .stderr(Stdio::from(stderr));
    sys::prepare_exec(&mut command, exec);
    let mut backoff = Duration::from_millis(1);
    loop {
        match command.spawn() {
            Err(e) if e.raw_os_error() == Some(libc::ETXTBSY) && backoff < TICK * 20 => {
                std::thread::sleep(backoff);
                backoff *= 2;
            }
            // Dropping `command` closes our copies of the pipes' write ends, so EOF can come.
            // Dropping the `Child` neither waits nor kills: the pid is reaped by the caller.
            result => return result.map(|child| Pid::from_raw(child.id() as libc::pid_t)),
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use nix::fcntl::OFlag;
    use nix::sys::signal::Signal;

    use super::*;
    use crate::event::HookKind;
    use crate::exec::tests::{fixture, hook_at, run, run_isolated};
    use crate::exec::{RunOptions, run_hook};
    use crate::hook::Hook;

    pub(in crate::exec) use hookvisor_testkit::ensure_test_user;

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

    /// The mask is emptied and the ignored signals reset, through posix_spawn's attributes.
    #[test]
    fn signal_state_is_reset() {
        run_isolated("exec::spawn::tests::signal_state_child");
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
        // glibc's posix_spawn leaves its two internal signals, 32 and 33 (SIGCANCEL and
        // SIGSETXID, below SIGRTMIN), ignored in the child, and that survives exec; every other
        // signal, the three the "init" ignored above among them, is at its default.
        assert_eq!(
            out.tail,
            "SigBlk:\t0000000000000000\nSigIgn:\t0000000180000000\n"
        );
    }

    #[test]
    fn credentials_are_applied() {
        if ensure_test_user().is_none() {
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
}

//! `hookvisor-init`: PID 1 of a hookvisor container.
//!
//! Like tini it reaps every zombie, forwards every signal to the command it runs and exits with
//! that command's status; unlike tini it first runs the workspace's session hooks, as root or
//! as the unprivileged user, and records them in `status.json`. It is single-threaded and
//! synchronous: one loop of `sigtimedwait` + `waitpid(-1)` (see `supervise`).

// The C runtime calls our `main` directly, skipping std's start-up: a stack-overflow handler
// whose set-up has glibc read and parse /proc/self/maps, an alternate signal stack, SIGPIPE
// ignored. The init needs none of it and starts CMD measurably sooner (BENCHMARKS.md, case 4).
// std works as usual; the arguments come from glibc. Unit tests keep the harness's `main`.
#![cfg_attr(not(test), no_main)]

mod config;
mod runner;
mod signals;
mod spawn;
mod supervise;
mod sweep;

use std::ffi::OsString;
use std::io::{self, Write};
use std::os::unix::fs::MetadataExt;

use hookvisor_core::{Context, ContextOverrides, Credentials};
use nix::unistd::Uid;

use config::Config;
use runner::{Pass, PassCommand};
use supervise::Supervisor;

/// The entry point the C runtime calls (see the `no_main` note above).
// `no_mangle` is an unsafe attribute (the symbol could clash); this is the one C entry point.
#[allow(unsafe_code)]
#[cfg_attr(not(test), unsafe(no_mangle))]
extern "C" fn main(_argc: libc::c_int, _argv: *const *const libc::c_char) -> libc::c_int {
    // Before any secret exists: the agent runs as the user, and a descriptor on
    // /proc/PID/mem opened while we were dumpable stays valid.
    if let Err(err) = nix::sys::prctl::set_dumpable(false) {
        eprintln!("hookvisor-init: cannot make this process non-dumpable: {err}");
        return 2;
    }
    let config = Config::from_args();
    let code = match run(config) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("hookvisor-init: {message}");
            2
        }
    };
    let _ = io::stdout().flush();
    let _ = io::stderr().flush();
    code.clamp(0, 255)
}

/// The init, step by step; returns the exit status, or the one line to print for an error
/// that keeps CMD from starting at all.
fn run(config: Config) -> Result<i32, String> {
    // 1. Block every catchable signal before any child exists: from now on they are taken
    //    one at a time by the supervisor's loop, never lost and never handled asynchronously.
    let (blocked, inherited) =
        signals::block_all().map_err(|e| format!("cannot block signals: {e}"))?;

    // 2. Orphans of our descendants must come to us to be reaped, even when we are not PID 1.
    if std::process::id() != 1
        && let Err(e) = nix::sys::prctl::set_child_subreaper(true)
    {
        warn(format_args!(
            "cannot become a child subreaper ({e}); orphans will be reaped by the system's \
             init, and processes that escape CMD may outlive it"
        ));
    }

    // 3. Whom to run as. Only root can switch; anyone else runs everything as itself.
    let user = account(&config)?;

    // 4. Where the hooks are and where their runs go. The state dir belongs to the run user,
    //    whose supervisor writes it later. A broken workspace skips the hooks, not CMD.
    let ctx = match Context::resolve(ContextOverrides {
        workspace: config.workspace.clone(),
        state_dir: config.state_dir.clone(),
        session_id: config.session.clone(),
        home: user.as_ref().map(|u| u.home.clone()),
    }) {
        Ok(ctx) => Some(ctx),
        Err(e) => {
            warn(format_args!("session hooks skipped: {e}"));
            None
        }
    };
    // Without a hooks dir there is nothing to run or record, so CMD starts as cheaply as under
    // tini; `hookvisor serve` creates and recovers the state dir itself when it starts. With
    // one, `hookvisor init-pass` runs each pass (runner.rs).
    let passes = ctx
        .as_ref()
        .filter(|ctx| ctx.hooks_dir().is_dir())
        .and_then(|ctx| {
            let user = user.as_ref().and(config.user.as_deref());
            PassCommand::new(
                ctx,
                user,
                config.root_hooks.as_str(),
                config.grace,
                inherited,
            )
            .map_err(|e| warn(format_args!("session hooks skipped: {e}")))
            .ok()
        });

    let mut supervisor = Supervisor::new(blocked, config.grace, config.kill_group, passes.clone());

    // 5. Blocking session hooks, and every root hook, finish before CMD starts: no root hook
    //    ever runs beside the agent. A TERM meanwhile stops them, and the container stops
    //    without ever starting CMD.
    if let Some(passes) = &passes {
        match passes.start(Pass::BeforeCmd) {
            Ok(runner) => {
                let pid = runner.pid;
                supervisor.adopt_runner(runner);
                supervisor.wait_runner(pid);
            }
            Err(e) => warn(format_args!("cannot start the session hooks: {e}")),
        }
    }
    if let Some(sig) = supervisor.stop_signal() {
        supervisor.stop_everything();
        return Ok(hookvisor_core::sys::signal_exit_code(sig));
    }

    // 6. CMD, as the run user, with the user's identity and the resolved hookvisor context.
    let env = cmd_env(ctx.as_ref(), user.as_ref());
    let spawned = spawn::command(&config.cmd, user.as_ref(), &env, inherited);
    let code = match spawned {
        Ok(pid) => {
            supervisor.adopt_cmd(pid);
            // 7. The other session hooks run in the background while CMD starts.
            if let Some(passes) = &passes {
                match passes.start(Pass::BesideCmd) {
                    Ok(runner) => supervisor.adopt_runner(runner),
                    Err(e) => warn(format_args!("cannot start the session hooks: {e}")),
                }
            }
            // 8. Forward signals and reap until CMD exits.
            supervisor.wait_cmd();
            supervisor.cmd_status().unwrap_or(1)
        }
        Err(e) => {
            eprintln!(
                "hookvisor-init: cannot run {}: {e}",
                config.cmd[0].to_string_lossy()
            );
            if e.kind() == io::ErrorKind::NotFound {
                127
            } else {
                126
            }
        }
    };

    // 9. Nothing outlives CMD: TERM, grace, KILL for whatever is left.
    supervisor.stop_everything();
    Ok(code)
}

/// The account of CMD and `run_as: user` hooks, when we can switch to it.
///
/// `--user` is read from /etc/passwd and /etc/group, never through NSS (`hookvisor_core`'s
/// account module says why and how): PID 1 works whatever the image's nsswitch.conf says.
fn account(config: &Config) -> Result<Option<Credentials>, String> {
    let Some(spec) = &config.user else {
        return Ok(None);
    };
    if Uid::effective().is_root() {
        return Credentials::from_name(spec)
            .map(Some)
            .map_err(|e| e.to_string());
    }
    // Anyone else runs everything as itself, and says so unless --user names that account.
    let uid = Uid::current().as_raw();
    if !Credentials::from_name(spec).is_ok_and(|them| them.uid == uid) {
        let me = Credentials::current().map_or_else(|_| uid.to_string(), |me| me.user);
        warn(format_args!(
            "not running as root: CMD and every hook run as {me} instead of --user {spec}"
        ));
    }
    Ok(None)
}

/// The variables CMD gets on top of ours: the run user's identity, and where hookvisor state
/// is, so `hookvisor serve` finds the same state dir the init wrote.
fn cmd_env(ctx: Option<&Context>, user: Option<&Credentials>) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = Vec::new();
    if let Some(u) = user {
        env.push(("HOME".into(), u.home.clone().into()));
        env.push(("USER".into(), u.user.clone().into()));
        env.push(("LOGNAME".into(), u.user.clone().into()));
        env.push(("SHELL".into(), u.shell.clone().into()));
    }
    if let Some(ctx) = ctx {
        // `--user root` is root: no trust for it either.
        if user.map_or(!Uid::effective().is_root(), |u| u.uid != 0) {
            // CMD's git works in the workspace whoever owns it; root's keeps refusing
            // a workspace it does not own (`hookvisor_core::git::trust_env`).
            let ours: Vec<(OsString, OsString)> = std::env::vars_os().collect();
            env.extend(hookvisor_core::git::trust_env(&ctx.workspace, &ours));
        } else if let Ok(meta) = std::fs::metadata(&ctx.workspace)
            && meta.uid() != 0
        {
            warn(format_args!(
                "{} belongs to uid {}, and CMD runs as root: git refuses it (\"dubious \
                 ownership\"); run CMD as that account with --user",
                ctx.workspace.display(),
                meta.uid()
            ));
        }
        env.push(("DISCOBOT_WORKSPACE".into(), ctx.workspace.clone().into()));
        env.push(("DISCOBOT_SESSION_ID".into(), ctx.session_id.clone().into()));
        env.push(("HOOKVISOR_STATE_DIR".into(), ctx.state_dir.clone().into()));
    }
    env
}

fn warn(message: std::fmt::Arguments<'_>) {
    eprintln!("hookvisor-init: warning: {message}");
}

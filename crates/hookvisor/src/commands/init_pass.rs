//! `hookvisor init-pass`: the session hooks as `hookvisor-init` runs them at container start,
//! one pass at a time. The init links none of the hook model (PID 1 stays as small as tini);
//! it starts this command for each pass in a child of its own and waits for the first.
//!
//! - `before-cmd`: the blocking hooks and every root hook, then the `session.start` event
//!   hooks with `await: true`, before CMD starts. This pass also prepares the state dir,
//!   recovers the records a previous init left unfinished and says once what will not run.
//! - `beside-cmd`: the other session hooks, then the unawaited `session.start` hooks, while
//!   CMD starts.
//! - `--record-killed NOTE`: the init killed a pass before it recorded its running hook; its
//!   hooks still `running` are recorded as failed with the note.
//!
//! The pass is a child subreaper: what a hook leaves running (a daemon started with `setsid`,
//! a double fork) comes back to it and is killed as soon as each attempt of the hook ends, so
//! nothing a root hook starts outlives it as root. The event hooks run after it drops root for
//! good: they cannot say `run_as`. Every line it prints is the init's (`hookvisor-init: …`).

use std::time::Duration;

use hookvisor_core::decision::Decision;
use hookvisor_core::seal::RootHooks;
use hookvisor_core::session::{
    Attempt, SessionHook, SessionOptions, SessionPlan, fail_interrupted, prepare_state_dir,
};
use hookvisor_core::user_fs::{act_as, agent_running};
use hookvisor_core::{
    CancelToken, Context, Credentials, StatusStore, discover, fire_session_start, run_session,
};
use nix::unistd::{Gid, Uid, setgid, setgroups, setuid};

use crate::cli::{InitPass, InitPassArgs};
use crate::commands::Globals;
use crate::error::{CliError, CliResult, Exit};
use crate::interrupt::cancel_on_signals;

/// Runs one pass; exits 0 when every hook of it passed, 1 otherwise.
pub fn run(globals: &Globals, args: &InitPassArgs) -> CliResult {
    // It is the init's runner, and is named so in `ps` and /proc (argv[0] is the init's too).
    let _ = nix::sys::prctl::set_name(c"hookvisor-init");
    let before = args.pass == InitPass::BeforeCmd;
    // The pass before CMD prepares the state dir and says what will not run; a recorder only
    // records.
    let announce = before && args.record_killed.is_none();
    let policy = match &args.root_hooks {
        Some(text) => RootHooks::parse(text).map_err(CliError::usage)?,
        None => RootHooks::All,
    };
    // The init names a user only when it is root and can switch to it.
    let user = match &args.user {
        Some(name) if Uid::effective().is_root() => Some(Credentials::from_name(name)?),
        _ => None,
    };
    let ctx = globals.context_as(user.as_ref())?;
    if announce && let Err(e) = prepare_state_dir(&ctx, user.as_ref()) {
        warn(format_args!("{e}"));
    }
    let Some(mut plan) = plan(&ctx, policy, user.as_ref(), announce) else {
        return Ok(Exit::Failed);
    };
    if announce && !args.pid1 {
        // As PID 1 of a new container nothing of the agent's runs yet; as a subreaper
        // elsewhere the user may have processes, and root hooks never run beside them.
        if let Some(reason) = agent_running(user.as_ref()) {
            plan.refuse_root_hooks(&reason);
        }
    }
    let (hooks, events, root_images) = if before {
        let images = std::mem::take(&mut plan.root_images);
        (plan.blocking, plan.awaited_events, images)
    } else {
        (plan.background, plan.background_events, Default::default())
    };
    if let Some(note) = &args.record_killed {
        record_killed(&ctx, &hooks, note, user.as_ref());
        return Ok(Exit::Ok);
    }
    if hooks.is_empty() && !events {
        return Ok(Exit::Ok);
    }
    if let Err(e) = hookvisor_core::leftovers::become_subreaper() {
        warn(format_args!(
            "a session runner cannot become a subreaper ({e}); processes a hook leaves \
             behind may outlive it"
        ));
    }
    let options = SessionOptions {
        user: user.clone(),
        cancel: Some(cancel_on_signals()),
        echo: true,
        kill_grace: args.kill_grace.map(Duration::from_secs_f64),
        root_images,
        after_attempt: Some(after_attempt),
        ..SessionOptions::default()
    };
    let runs = run_session(&ctx, &hooks, &options, say_run);
    let passed = runs.len() == hooks.len() && runs.iter().all(|r| r.success);
    let stopped = options
        .cancel
        .as_ref()
        .is_some_and(CancelToken::is_cancelled);
    let events_passed =
        !events || stopped || fire_events(&ctx, before, user.as_ref(), options.cancel);
    Ok(if passed && events_passed {
        Exit::Ok
    } else {
        Exit::Failed
    })
}

/// Finds the session hooks, seals the root ones and, when `announce`, reports the files that
/// will not run and recovers the records of runs a previous init left unfinished.
fn plan(
    ctx: &Context,
    policy: RootHooks,
    user: Option<&Credentials>,
    announce: bool,
) -> Option<SessionPlan> {
    // The hooks dir is in the agent's workspace: it is read, root hooks included, with the
    // user's credentials, so a link there to a root-only file reads nothing.
    let acting = match act_as(user) {
        Ok(acting) => acting,
        Err(e) => {
            warn(format_args!("session hooks skipped: {e}"));
            return None;
        }
    };
    // The workspace's hooks only: the init reads no global hooks.
    let discovery = discover(&ctx.hooks_dir());
    let plan = SessionPlan::with_policy(&discovery, policy, user);
    drop(acting);
    if !announce {
        return Some(plan);
    }
    for problem in &discovery.problems {
        warn(format_args!("not run: {problem}"));
    }
    if plan.unprivileged_root_hooks() {
        warn(format_args!(
            "not running as root: run_as: root session hooks run unprivileged"
        ));
    }
    for hook in &plan.promoted {
        warn(format_args!(
            "{}: run_as: root hooks run before CMD starts, blocking: false notwithstanding",
            hook.path.display()
        ));
    }
    let recovered = act_as(user).and_then(|_acting| {
        StatusStore::for_context(ctx)
            .recover_interrupted()
            .map_err(std::io::Error::other)
    });
    if let Err(e) = recovered {
        warn(format_args!("{e}"));
    }
    Some(plan)
}

/// The records of a pass the init had to kill: its hooks still `running` fail with `note`.
fn record_killed(ctx: &Context, hooks: &[SessionHook], note: &str, user: Option<&Credentials>) {
    let hooks: Vec<_> = hooks.iter().map(|h| h.hook.clone()).collect();
    match fail_interrupted(ctx, &hooks, note, user) {
        Ok(ids) if !ids.is_empty() => eprintln!(
            "hookvisor-init: session hook(s) {} recorded as failed: {note}",
            ids.join(", ")
        ),
        Ok(_) => {}
        Err(e) => warn(format_args!("{e}")),
    }
}

/// The line of a hook run that did not simply pass.
fn say_run(run: &hookvisor_core::session::SessionRun) {
    if run.success {
        // A success that could not be recorded (a full disk) still says so.
        if let Some(note) = &run.note {
            eprintln!(
                "hookvisor-init: session hook \"{}\" succeeded; {note}",
                run.hook_name
            );
        }
        return;
    }
    let attempts = match run.attempts {
        0 | 1 => String::new(),
        n => format!(" after {n} attempts"),
    };
    let note = run
        .note
        .as_deref()
        .map_or(String::new(), |n| format!(" ({n})"));
    eprintln!(
        "hookvisor-init: session hook \"{}\" {}{attempts}{note}; log: {}",
        run.hook_name,
        how(run.exit_code, run.timed_out),
        run.log_path.display()
    );
}

/// Drops root for good (to `user`), then fires `session.start` for the event hooks whose
/// `await` is `awaited`; says on stderr what did not pass. Root without a user to become runs
/// none of them: nothing declared them root.
fn fire_events(
    ctx: &Context,
    awaited: bool,
    user: Option<&Credentials>,
    cancel: Option<CancelToken>,
) -> bool {
    if Uid::effective().is_root() {
        let Some(user) = user else {
            eprintln!(
                "hookvisor-init: session.start event hooks not run: they never run as root, \
                 and no --user names whom to run them as"
            );
            return false;
        };
        let groups: Vec<Gid> = user.groups.iter().map(|&g| Gid::from_raw(g)).collect();
        // Groups, gid, uid: each later step needs the privilege the earlier ones keep.
        let dropped = setgroups(&groups)
            .and_then(|()| setgid(Gid::from_raw(user.gid)))
            .and_then(|()| setuid(Uid::from_raw(user.uid)));
        if let Err(e) = dropped {
            eprintln!(
                "hookvisor-init: session.start event hooks not run: cannot become {}: {e}",
                user.user
            );
            return false;
        }
        take_identity(user, &ctx.workspace);
    }
    // Read now, as the user: the workspace's hooks only, as for the phase-1 ones.
    let discovery = discover(&ctx.hooks_dir());
    match fire_session_start(ctx, &discovery, awaited, cancel) {
        Ok(None) => true,
        Ok(Some(reply)) if reply.decision == Decision::Allow => {
            for result in reply.results.iter().filter(|r| r["success"] != true) {
                let id = result["hookId"].as_str().unwrap_or("?");
                eprintln!(
                    "hookvisor-init: session.start hook \"{id}\" failed (exit code {}); log: {}",
                    result["exitCode"],
                    ctx.log_path(id).display()
                );
            }
            reply.results.iter().all(|r| r["success"] == true)
        }
        Ok(Some(reply)) => {
            eprintln!(
                "hookvisor-init: session.start hooks: {}: {}",
                reply.decision.as_str(),
                hookvisor_core::message::sanitize(reply.reason.as_deref().unwrap_or(""))
            );
            false
        }
        Err(e) => {
            eprintln!("hookvisor-init: session.start event hooks: {e}");
            false
        }
    }
}

/// Puts the user's identity in this process's environment, which the event hooks inherit, as
/// phase-1 user hooks get it from the executor; with it git's trust of the workspace, which
/// the user may not own (`hookvisor_core::git::trust_env`).
#[allow(unsafe_code)]
fn take_identity(user: &Credentials, workspace: &std::path::Path) {
    let ours: Vec<(std::ffi::OsString, std::ffi::OsString)> = std::env::vars_os().collect();
    let trust = match user.uid {
        0 => Vec::new(),
        _ => hookvisor_core::git::trust_env(workspace, &ours),
    };
    let identity = [
        ("HOME", user.home.as_os_str()),
        ("USER", user.user.as_ref()),
        ("LOGNAME", user.user.as_ref()),
        ("SHELL", user.shell.as_os_str()),
    ];
    let trust = trust.iter().map(|(n, v)| (n.as_os_str(), v.as_os_str()));
    for (name, value) in identity
        .into_iter()
        .map(|(n, v)| (n.as_ref(), v))
        .chain(trust)
    {
        // SAFETY: the only other thread of this process waits for signals in sigwait and
        // never reads the environment.
        unsafe { std::env::set_var(name, value) };
    }
}

/// After each attempt of a hook: kill what it left running, and say when it is tried again.
fn after_attempt(attempt: &Attempt<'_>) {
    let name = &attempt.hook.name;
    // Everything: a user hook's child that passes for a detached runner is the agent's.
    let killed = hookvisor_core::leftovers::kill_every_child();
    if killed > 0 {
        eprintln!(
            "hookvisor-init: session hook \"{name}\" left {killed} process(es) running; killed"
        );
    }
    if let Some(wait) = attempt.retry_in {
        eprintln!(
            "hookvisor-init: session hook \"{name}\" {} (attempt {}/{}); trying again in {}s",
            how(Some(attempt.exit_code), attempt.timed_out),
            attempt.number,
            attempt.of,
            wait.as_secs_f64()
        );
    }
}

/// How a run or an attempt failed, for the init's lines.
fn how(exit_code: Option<i32>, timed_out: bool) -> String {
    match (exit_code, timed_out) {
        (_, true) => "timed out".to_owned(),
        (Some(code), false) => format!("failed with exit code {code}"),
        (None, false) => "could not run".to_owned(),
    }
}

fn warn(message: std::fmt::Arguments<'_>) {
    eprintln!("hookvisor-init: warning: {message}");
}

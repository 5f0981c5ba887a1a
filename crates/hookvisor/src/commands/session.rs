//! `session`: run the session hooks now, the way `hookvisor-init` does at container start,
//! without the init: blocking ones first, then the others, one after the other.

use std::io::{self, Write};

use hookvisor_core::discover::{Places, discover_workspace_in, global_hooks_dir};
use hookvisor_core::import::UserDirs;
use hookvisor_core::seal::RootHooks;
use hookvisor_core::session::{
    Attempt, SessionHook, SessionOptions, SessionPlan, SessionRun, prepare_state_dir,
};
use hookvisor_core::user_fs::{act_as, agent_running};
use hookvisor_core::{Credentials, StatusStore, fire_session_start, run_session};
use nix::unistd::Uid;

use crate::commands::Globals;
use crate::error::{CliError, CliResult, Exit};
use crate::interrupt::cancel_on_signals;

/// `hookvisor session [--user USER[:GROUP]] [--root-hooks WHICH]`: exit 0 when every session
/// hook passed, 1 otherwise.
pub fn run(globals: &Globals, user: Option<&str>, root_hooks: Option<&str>) -> CliResult {
    let policy = match root_hooks {
        Some(text) => RootHooks::parse(text).map_err(CliError::usage)?,
        None => RootHooks::All,
    };
    let user = match user {
        Some(name) if Uid::effective().is_root() => Some(Credentials::from_name(name)?),
        Some(name) => {
            let me = Credentials::current()?;
            if me.user != name {
                eprintln!(
                    "hookvisor: warning: not running as root: hooks run as {} instead of --user {name}",
                    me.user
                );
            }
            None
        }
        None => None,
    };
    let ctx = globals.context_as(user.as_ref())?;
    prepare_state_dir(&ctx, user.as_ref())?;
    {
        let _acting = act_as(user.as_ref())?;
        StatusStore::for_context(&ctx).recover_interrupted()?;
    }

    // The hooks are the workspace's, which the agent can write: read them (root hooks
    // included) with the user's credentials.
    let (discovery, mut plan) = {
        let _acting = act_as(user.as_ref())?;
        // Global hooks and other tools' user files are the run user's: its home, not the
        // caller's (root's) settings.
        let var = |name: &str| match (name, &user) {
            ("HOME", Some(u)) => Some(u.home.clone().into()),
            ("XDG_CONFIG_HOME", Some(_)) => None,
            _ => std::env::var_os(name),
        };
        let global = global_hooks_dir(var);
        let places = Places {
            global_hooks: global.as_deref(),
            user: UserDirs::from_vars(var),
            owner: None,
            pipeline: None,
        };
        let discovery = discover_workspace_in(&ctx, &places);
        let plan = SessionPlan::with_policy(&discovery, policy, user.as_ref());
        (discovery, plan)
    };
    for problem in &discovery.problems {
        eprintln!("hookvisor: not run: {problem}");
    }
    // Unlike the init, this command may run while the agent does: root hooks never run
    // beside the agent's processes.
    if let Some(reason) = agent_running(user.as_ref()) {
        plan.refuse_root_hooks(&reason);
    }
    // Root never writes the agent's .git (links there could point anywhere); `serve`, as
    // the user, installs the pre-commit hook.
    if !Uid::effective().is_root() {
        super::precommit::ensure_installed(&ctx, &discovery);
    }
    if plan.unprivileged_root_hooks() {
        eprintln!(
            "hookvisor: warning: not running as root: run_as: root session hooks run unprivileged"
        );
    }
    let hooks: Vec<SessionHook> = plan.all().cloned().collect();
    let options = SessionOptions {
        user,
        cancel: Some(cancel_on_signals()),
        echo: true,
        root_images: plan.root_images,
        after_attempt: Some(say_retry),
        ..SessionOptions::default()
    };
    let cancel = options.cancel.clone();
    let mut out = io::stdout().lock();
    let runs = run_session(&ctx, &hooks, &options, |run| {
        // A closed stdout must not stop the hooks after this one.
        let _ = writeln!(out, "{}", summary(run));
    });
    let mut passed = runs.len() == hooks.len() && runs.iter().all(|r| r.success);
    if plan.awaited_events || plan.background_events {
        passed &= session_start_events(&ctx, &discovery, cancel, &mut out);
    }
    Ok(if passed { Exit::Ok } else { Exit::Failed })
}

/// Fires `session.start` for its event hooks, awaited ones first, as this process's user; as
/// root it runs none (nothing declared them root) and says how to run them.
fn session_start_events(
    ctx: &hookvisor_core::Context,
    discovery: &hookvisor_core::Discovery,
    cancel: Option<hookvisor_core::CancelToken>,
    out: &mut impl Write,
) -> bool {
    if Uid::effective().is_root() {
        eprintln!(
            "hookvisor: session.start event hooks not run: they never run as root; run \
             `hookvisor fire session.start` as the user"
        );
        return false;
    }
    let mut passed = true;
    for awaited in [true, false] {
        match fire_session_start(ctx, discovery, awaited, cancel.clone()) {
            Ok(None) => {}
            Ok(Some(reply)) => {
                for result in &reply.results {
                    let id = result["hookId"].as_str().unwrap_or("?");
                    let line = if result["success"] == true {
                        format!("ok    {id}")
                    } else {
                        passed = false;
                        format!(
                            "FAIL  {id} (exit code {}); log: {}",
                            result["exitCode"],
                            ctx.log_path(id).display()
                        )
                    };
                    let _ = writeln!(out, "{line}");
                }
            }
            Err(e) => {
                eprintln!("hookvisor: session.start event hooks: {e}");
                passed = false;
            }
        }
    }
    passed
}

/// Says on stderr that a failed attempt is made again, and when.
fn say_retry(attempt: &Attempt<'_>) {
    let Some(wait) = attempt.retry_in else {
        return;
    };
    eprintln!(
        "hookvisor: session hook \"{}\" {} (attempt {}/{}); trying again in {}s",
        attempt.hook.name,
        how(Some(attempt.exit_code), attempt.timed_out),
        attempt.number,
        attempt.of,
        wait.as_secs_f64()
    );
}

/// One line per hook: `ok`, or `FAIL` with how it failed and where the log is.
fn summary(run: &SessionRun) -> String {
    if run.success {
        return format!("ok    {}", run.hook_id);
    }
    let mut how = how(run.exit_code, run.timed_out);
    if run.attempts > 1 {
        how.push_str(&format!(" after {} attempts", run.attempts));
    }
    let note = run
        .note
        .as_deref()
        .map_or(String::new(), |n| format!("; {n}"));
    format!(
        "FAIL  {} ({how}{note}); log: {}",
        run.hook_id,
        run.log_path.display()
    )
}

/// How a run or an attempt failed.
fn how(exit_code: Option<i32>, timed_out: bool) -> String {
    match (exit_code, timed_out) {
        (_, true) => "timed out".to_owned(),
        (Some(code), false) => format!("exit {code}"),
        (None, false) => "could not run".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summary_says_how_a_hook_failed() {
        let run = |exit_code, success, timed_out, note: Option<&str>| SessionRun {
            attempts: 1,
            hook_id: "setup".into(),
            hook_name: "Setup".into(),
            exit_code,
            success,
            timed_out,
            note: note.map(str::to_owned),
            log_path: "/s/output/setup.log".into(),
        };
        for (run, line) in [
            (run(Some(0), true, false, None), "ok    setup"),
            (
                run(Some(3), false, false, None),
                "FAIL  setup (exit 3); log: /s/output/setup.log",
            ),
            (
                run(Some(124), false, true, None),
                "FAIL  setup (timed out); log: /s/output/setup.log",
            ),
            (
                run(None, false, false, Some("user 'x' does not exist")),
                "FAIL  setup (could not run; user 'x' does not exist); log: /s/output/setup.log",
            ),
            (
                SessionRun {
                    attempts: 10,
                    ..run(Some(17), false, false, None)
                },
                "FAIL  setup (exit 17 after 10 attempts); log: /s/output/setup.log",
            ),
        ] {
            assert_eq!(summary(&run), line);
        }
    }
}

//! The runners of hookvisor's built-in actions (docs/EVENTS.md §4): `webhook` sends a request and
//! may await its answer on the [`callback`] listener, `spawn` starts a child loop, `git` runs
//! `git-commit` and `git-push`. Their fields and rules are the core's ([`hookvisor_core::webhook`],
//! [`hookvisor_core::spawn`], [`hookvisor_core::git_action`]); the core's pipeline calls them
//! through [`hookvisor_core::runner::ActionRunners`], which a program installs once with
//! [`install`]. They live apart from the core because they are its weight (an HTTP client with
//! TLS, an HTTP listener): PID 1 links the core without them.

#![deny(missing_docs)]

pub mod callback;
mod git;
pub mod spawn;
mod webhook;

use hookvisor_core::Context;
use hookvisor_core::exec::{CancelToken, ExecError};
use hookvisor_core::hook::Hook;
use hookvisor_core::payload::Payload;
use hookvisor_core::runner::{ActionRunners, Ran};

/// The runners of this crate, as the core asks for them.
struct BuiltIn;

impl ActionRunners for BuiltIn {
    fn run(
        &self,
        ctx: &Context,
        hook: &Hook,
        payload: &Payload,
        cancel: &CancelToken,
    ) -> Result<Option<Ran>, ExecError> {
        // The git actions run git themselves (hookvisor_core::git_action).
        if let Some(ran) = git::run(ctx, hook, payload, cancel)? {
            return Ok(Some(match ran {
                git::GitRun::Finished(outcome) => Ran::Finished(outcome.into()),
                git::GitRun::Refused(message) => Ran::Refused(message),
            }));
        }
        // A spawn starts its child in a state dir of its own (hookvisor_core::spawn).
        if let Some(ran) = spawn::run(ctx, hook, payload, cancel)? {
            return Ok(Some(ran));
        }
        // A webhook sends its request from here, with no process (hookvisor_core::webhook).
        webhook::run(ctx, hook, payload, cancel)
    }

    fn end_session(&self, ctx: &Context) {
        spawn::stop_detached(ctx);
    }
}

/// Installs the built-in actions' runners for every firing of this process; call it first
/// thing in `main` (and in a test that fires hooks with actions).
pub fn install() {
    hookvisor_core::runner::install(&BuiltIn);
}

#[cfg(test)]
mod tests {
    use std::fs;

    use hookvisor_core::fire::evaluate::{Action, EvalOptions, Evaluator};
    use hookvisor_core::{Context, Trigger};

    /// A spawn among the `turn.end` hooks hands its output to the hooks after it in the same
    /// turn end, the `post` ones included (hookvisor_core::produced rule 2).
    #[test]
    fn a_spawn_output_reaches_the_later_turn_end_hooks() {
        super::install();
        let dir = tempfile::tempdir().unwrap();
        let ctx = Context {
            workspace: dir.path().join("ws"),
            session_id: "test".into(),
            state_dir: dir.path().join("state"),
        };
        let runs = dir.path().join("runs");
        fs::create_dir_all(ctx.hooks_dir()).unwrap();
        let yml = |name: &str, front: &str| {
            let front = front.replace("RUNS", &runs.display().to_string());
            let path = ctx.hooks_dir().join(format!("{name}.yml"));
            fs::write(path, format!("---\n{front}\n---\n")).unwrap();
        };
        yml(
            "a-spawn",
            "event: turn.end\naction: spawn\n\
             argv: [sh, -c, 'printf ''{\"verdict\":\"ok\"}'' > \"$HOOKVISOR_OUTPUT\"']",
        );
        yml(
            "b-every",
            "event: turn.end\nrun: 'echo every ${spawn_output.verdict} >> RUNS'",
        );
        yml(
            "c-post",
            "event: turn.end\nphase: post\nrun: 'echo post ${spawn_output} >> RUNS'",
        );
        let options = EvalOptions {
            trigger: Trigger::User,
            max_retries: 3,
            cancel: None,
            hook_turns: None,
        };
        let report = Evaluator::new(ctx).end_turn(&options).unwrap();
        assert_eq!(report.action, Action::Pass, "{:?}", report.results);
        let runs = fs::read_to_string(&runs).unwrap();
        assert_eq!(
            runs.lines().collect::<Vec<_>>(),
            ["every ok", "post {\"verdict\":\"ok\"}"]
        );
    }
}

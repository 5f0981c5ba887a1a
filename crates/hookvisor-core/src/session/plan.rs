//! Which session hooks run before the agent command and which beside it, and the sealed bytes
//! each root hook runs from (rules 1 and 2).

use std::sync::Arc;

use nix::unistd::Uid;

use super::SessionHook;
use crate::account::Credentials;
use crate::discover::Discovery;
use crate::event::Event;
use crate::event::HookKind;
use crate::hook::{Hook, RunAs};
use crate::seal::RootImages;
use crate::seal::{RootHooks, SealedScript};

/// The session hooks of a workspace, split the way they run (rule 1 of the module docs).
#[derive(Debug, Clone, Default)]
pub struct SessionPlan {
    /// Hooks with `blocking: true`, and every `run_as: root` hook, in order: they finish before
    /// the agent command starts.
    pub blocking: Vec<SessionHook>,
    /// The other session hooks, in order: they run while the agent command starts.
    pub background: Vec<SessionHook>,
    /// `run_as: root` hooks that said `blocking: false` and run before the agent all the same.
    pub promoted: Vec<Hook>,
    /// What each root hook runs from when this process is root, by hook id: its sealed bytes,
    /// or why it will not run. Passed on to [`SessionOptions::root_images`](super::SessionOptions::root_images).
    pub root_images: RootImages,
    /// There are `session.start` event hooks with `await: true`: fired, as the user, after
    /// the blocking hooks and before the agent starts ([`fire_session_start`](super::fire_session_start)).
    pub awaited_events: bool,
    /// There are `session.start` event hooks with `await: false`: fired, as the user, after
    /// the background hooks.
    pub background_events: bool,
}

impl SessionPlan {
    /// Picks the session hooks out of a discovery, keeping its order; every root hook runs
    /// (`--root-hooks all`) and there is no unprivileged user.
    pub fn new(discovery: &Discovery) -> SessionPlan {
        SessionPlan::with_policy(discovery, RootHooks::All, None)
    }

    /// Keeps every root hook from running, each recorded as failed with `reason` (the agent's
    /// processes exist: [`agent_running`](crate::user_fs::agent_running)).
    pub fn refuse_root_hooks(&mut self, reason: &str) {
        for image in self.root_images.values_mut() {
            *image = Err(reason.to_owned());
        }
    }

    /// Picks the session hooks out of a discovery for a run whose agent is `user`, sealing
    /// each root hook as `policy` allows when this process is root.
    pub fn with_policy(
        discovery: &Discovery,
        policy: RootHooks,
        user: Option<&Credentials>,
    ) -> SessionPlan {
        let mut plan = SessionPlan::default();
        for hook in discovery.of_kind(HookKind::Session) {
            let root = hook.run_as == RunAs::Root;
            if root && !hook.blocking {
                plan.promoted.push(hook.clone());
            }
            if root && Uid::effective().is_root() {
                let image = SealedScript::seal(hook, policy, user)
                    .map(Arc::new)
                    .map_err(|e| e.to_string());
                plan.root_images.insert(hook.id.clone(), image);
            }
            let session_hook = SessionHook {
                hook: hook.clone(),
                retries: hook.spec.retries,
            };
            if hook.blocking || root {
                plan.blocking.push(session_hook);
            } else {
                plan.background.push(session_hook);
            }
        }
        for hook in discovery.event_hooks() {
            if hook.spec.event == Event::SessionStart {
                if hook.spec.await_ {
                    plan.awaited_events = true;
                } else {
                    plan.background_events = true;
                }
            }
        }
        plan
    }

    /// Every session hook in the order `hookvisor session` runs them: blocking ones first.
    pub fn all(&self) -> impl Iterator<Item = &SessionHook> {
        self.blocking.iter().chain(&self.background)
    }

    /// True when there is no session hook at all, of either model.
    pub fn is_empty(&self) -> bool {
        self.blocking.is_empty()
            && self.background.is_empty()
            && !self.awaited_events
            && !self.background_events
    }

    /// True when some hook asks for root but this process is not root, so it will run
    /// unprivileged; callers print one warning for it.
    pub fn unprivileged_root_hooks(&self) -> bool {
        !Uid::effective().is_root() && self.all().any(|h| h.hook.run_as == RunAs::Root)
    }
}

#[cfg(test)]
mod tests {
    use std::fs;
    use std::os::unix::fs::PermissionsExt;

    use super::*;
    use crate::session::tests::Fixture;

    #[test]
    fn plan_keeps_file_order_and_puts_blocking_hooks_first() {
        let f = Fixture::new();
        f.hook("30-c.sh", "# blocking: true\n", "true");
        f.hook("10-a.sh", "", "true");
        f.hook("20-b.sh", "# blocking: true\n", "true");
        let file_hook = f.ctx.hooks_dir().join("40-file.sh");
        fs::write(
            &file_hook,
            "#!/bin/sh\n#---\n# type: file\n# pattern: '*'\n#---\n",
        )
        .unwrap();
        fs::set_permissions(&file_hook, fs::Permissions::from_mode(0o755)).unwrap();
        let plan = f.plan();
        let ids =
            |hooks: &[SessionHook]| hooks.iter().map(|h| h.hook.id.clone()).collect::<Vec<_>>();
        assert_eq!(ids(&plan.blocking), ["20-b", "30-c"]);
        assert_eq!(ids(&plan.background), ["10-a"]);
        let all: Vec<_> = plan.all().map(|h| h.hook.id.as_str()).collect();
        assert_eq!(all, ["20-b", "30-c", "10-a"]);
    }
}

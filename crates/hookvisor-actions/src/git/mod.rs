//! The runner of `git-commit` and `git-push`, whose fields and rules are [`hookvisor_core::git_action`]'s:
//! `runner` runs the git steps (rules 7, 8), and `actions` is the order of each action's steps
//! (rules 3 to 5).

#![forbid(unsafe_code)]

mod actions;
mod runner;

pub(crate) use self::actions::{GitRun, run};

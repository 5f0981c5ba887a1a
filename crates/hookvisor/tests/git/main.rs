//! Git: commit_before/commit_after hooks, git actions, pre-commit.
//! One test binary per area (issue 30): each module is a former test file.

// A test crate: `pub` in its modules is their interface to each other.
#![allow(unreachable_pub)]

#[path = "../common/mod.rs"]
mod common;

mod commit_after;
mod commit_before;
mod fsmonitor;
mod git_actions;
mod precommit;

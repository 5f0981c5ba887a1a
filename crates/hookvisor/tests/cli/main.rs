//! The command line: config, eval, list, install, global hooks, exit statuses, start-up, and
//! the book's examples and CLI reference.
//! One test binary per area (issue 30): each module is a former test file.

// A test crate: `pub` in its modules is their interface to each other.
#![allow(unreachable_pub)]

#[path = "../common/mod.rs"]
mod common;

mod bench_scratch;
mod config;
mod docs;
mod eval;
mod exit_status;
mod global_hooks;
mod install;
mod list;
mod run_concurrency;
mod start_up;
mod status_sessions;

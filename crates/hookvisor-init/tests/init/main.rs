//! The init as PID 1: signals, reaping, session hooks, retries, the sandbox, hostile state.
//! One test binary per area (issue 30): each module is a former test file.

// A test crate: `pub` in its modules is their interface to each other.
#![allow(unreachable_pub)]

#[path = "../common/mod.rs"]
mod common;

mod cli_reference;
mod demo;
mod global_hooks;
mod hostile_state;
mod init;
mod retries;
mod sandbox;

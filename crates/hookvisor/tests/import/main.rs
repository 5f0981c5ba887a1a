//! Importing other agents' hooks and loops.
//! One test binary per area (issue 30): each module is a former test file.

// A test crate: `pub` in its modules is their interface to each other.
#![allow(unreachable_pub)]

#[path = "../common/mod.rs"]
mod common;

mod import;
mod import_cmd;
mod import_loop;

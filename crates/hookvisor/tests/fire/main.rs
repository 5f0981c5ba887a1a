//! Firing events: fire, sessions, leftovers and the loop guard.
//! One test binary per area (issue 30): each module is a former test file.

// A test crate: `pub` in its modules is their interface to each other.
#![allow(unreachable_pub)]

#[path = "../common/mod.rs"]
mod common;

mod fire;
mod fire_forward;
mod hidden_leftover;
mod leftovers;
mod loop_guard;
mod session;

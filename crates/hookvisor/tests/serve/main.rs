//! `hookvisor serve`: the server, its events, the dashboard and the adapters.
//! One test binary per area (issue 30): each module is a former test file.

// A test crate: `pub` in its modules is their interface to each other.
#![allow(unreachable_pub)]

#[path = "../common/mod.rs"]
mod common;

mod adapters;
mod adapters_events;
mod dashboard;
mod dashboard_runs;
mod runs;
mod serve;
mod serve_events;

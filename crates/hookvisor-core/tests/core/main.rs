//! The core's integration tests: change detection and concurrent status updates.
//! One test binary per area (issue 30): each module is a former test file.

// A test crate: `pub` in its modules is their interface to each other.
#![allow(unreachable_pub)]

mod change_watch;
mod status_concurrency;

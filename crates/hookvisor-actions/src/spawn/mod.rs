//! The runner of `action: spawn`, whose fields and rules are [`hookvisor_core::spawn`]'s: `child` makes
//! and runs one child (rules 2 to 7), `detached` keeps the unawaited ones (rule 8), and
//! `listing` reads the children back for a dashboard.

#![forbid(unsafe_code)]

mod child;
mod detached;
mod listing;

pub(crate) use self::child::run;
pub(crate) use self::detached::stop_detached;
pub use self::listing::{
    ChildInfo, ChildrenError, DetachedInfo, child_status, is_child_name, list_children,
};

//! The runner of `action: webhook`, whose fields and rules are [`crate::webhook`]'s: `deliver`
//! sends with retries (rule 6), `run` is one run with its log (rule 7), `awaited` the callback
//! wait (rule 9), and `detached` the delivery of an unawaited webhook by a child process.

#![forbid(unsafe_code)]

mod awaited;
mod deliver;
mod detached;
mod run;

pub(crate) use self::detached::deliver_detached;
pub(crate) use self::run::run;

//! The runner of `action: webhook`, whose fields and rules are [`hookvisor_core::webhook`]'s: `deliver`
//! sends with retries (rule 6), `run` is one run with its log (rule 7), `awaited` the callback
//! wait (rule 9) (an unawaited one is delivered by
//! the core's detached runner, `hookvisor_core::fire`).

#![forbid(unsafe_code)]

mod awaited;
mod deliver;
mod expand;
mod run;
mod secret_hosts;

pub(crate) use self::run::run;

//! Ctrl-C and termination for the one-shot commands (`eval`, `run`, the agent adapters).

use hookvisor_core::CancelToken;
use nix::sys::signal::{SigSet, Signal};

/// Turns SIGINT, SIGTERM and SIGHUP into a cancel of the running hook, so an interrupted
/// command (or an agent giving up on its Stop hook) kills the hook's process group and leaves
/// the hook pending instead of orphaning it. One token per process: a second call returns the
/// first's, since two waiters would split the signals between them.
pub fn cancel_on_signals() -> CancelToken {
    static TOKEN: std::sync::OnceLock<CancelToken> = std::sync::OnceLock::new();
    TOKEN.get_or_init(install).clone()
}

fn install() -> CancelToken {
    let token = CancelToken::new();
    let mut signals = SigSet::empty();
    for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
        signals.add(signal);
    }
    // Blocked before any thread starts, so only the waiting thread receives them; the
    // executor clears the mask in each hook it spawns.
    if signals.thread_block().is_ok() {
        let waiter = token.clone();
        std::thread::spawn(move || {
            if signals.wait().is_ok() {
                waiter.cancel();
            }
        });
    }
    token
}

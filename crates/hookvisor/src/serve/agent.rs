//! The agent as a child of the server (`serve -- AGENT_CMD...`), the way tini runs its child:
//! it gets the terminal when we have it, every termination signal we receive is forwarded to it,
//! and its exit status becomes ours (128+n when a signal killed it).

use std::ffi::OsString;
use std::fmt;
use std::io;
use std::os::fd::AsFd;

use nix::sys::signal::{self, SigSet, SigmaskHow, Signal};
use nix::unistd::{self, Pid};
use tokio::signal::unix::{SignalKind, signal};

/// The signals that end the server, or that it forwards to the agent.
pub struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
    hup: tokio::signal::unix::Signal,
}

/// One of the [`Signals`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received(Signal);

impl fmt::Display for Received {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.as_str())
    }
}

impl Signals {
    /// Installs the handlers; from now on these signals are queued for [`Signals::next`].
    pub fn new() -> io::Result<Signals> {
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
            hup: signal(SignalKind::hangup())?,
        })
    }

    /// Waits for the next signal.
    pub async fn next(&mut self) -> Received {
        tokio::select! {
            _ = self.term.recv() => Received(Signal::SIGTERM),
            _ = self.int.recv() => Received(Signal::SIGINT),
            _ = self.hup.recv() => Received(Signal::SIGHUP),
        }
    }
}

/// A running agent.
#[derive(Debug)]
pub struct Agent {
    child: tokio::process::Child,
    pid: Pid,
    /// Whether the agent was given the terminal, which we take back when it is gone.
    took_terminal: bool,
}

impl Agent {
    /// Starts `command` with `env` added to ours.
    pub fn spawn(command: &[OsString], env: &[(OsString, OsString)]) -> io::Result<Agent> {
        let (program, args) = command
            .split_first()
            .ok_or_else(|| io::Error::other("empty agent command"))?;
        let mut cmd = tokio::process::Command::new(program);
        cmd.args(args).envs(env.iter().map(|(k, v)| (k, v)));
        // Like tini: when we own the terminal, the agent gets its own process group and the
        // terminal, so a Ctrl-C reaches it once (from the terminal) rather than twice (from the
        // terminal and again from our forwarding).
        let took_terminal = we_own_the_terminal();
        if took_terminal {
            cmd.process_group(0);
            hookvisor_core::sys::take_terminal_on_exec(cmd.as_std_mut());
        }
        let child = cmd.spawn()?;
        let pid = Pid::from_raw(child.id().map_or(0, |id| id as i32));
        Ok(Agent {
            child,
            pid,
            took_terminal,
        })
    }

    /// Forwards every signal to the agent until it exits; returns its exit status for ours.
    pub async fn supervise(mut self, signals: &mut Signals) -> i32 {
        let status = loop {
            tokio::select! {
                status = self.child.wait() => break status,
                Received(sig) = signals.next() => {
                    tracing::debug!("forwarding {sig} to the agent ({})", self.pid);
                    if let Err(e) = signal::kill(self.pid, sig) {
                        tracing::warn!("cannot forward {sig} to the agent: {e}");
                    }
                }
            }
        };
        if self.took_terminal {
            reclaim_terminal();
        }
        match status {
            // The shell convention (128+n for death by signal n); 1 for anything else.
            Ok(status) => hookvisor_core::sys::exit_code(status).unwrap_or(1),
            Err(e) => {
                tracing::error!("cannot wait for the agent: {e}");
                1
            }
        }
    }
}

/// True when stdin is a terminal whose foreground process group is ours (not when we run in
/// the background, where taking the terminal would steal it from the shell).
fn we_own_the_terminal() -> bool {
    let stdin = io::stdin();
    unistd::isatty(stdin.as_fd()).unwrap_or(false)
        && unistd::tcgetpgrp(stdin.as_fd()).is_ok_and(|pgrp| pgrp == unistd::getpgrp())
}

/// In the server, after the agent exited: the terminal back to our process group, so the shell
/// that started us sees it as it left it.
fn reclaim_terminal() {
    let mut ttou = SigSet::empty();
    ttou.add(Signal::SIGTTOU);
    let mut old = SigSet::empty();
    if signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&ttou), Some(&mut old)).is_ok() {
        let _ = unistd::tcsetpgrp(io::stdin().as_fd(), unistd::getpgrp());
        let _ = signal::pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    }
}

//! The init's one loop: wait for a signal, forward it or note a child's death, reap every
//! zombie, and stop everything when it is time.
//!
//! This is the only place the init waits for children, always with `waitpid(-1)`: a child is
//! never waited for by pid anywhere else, so no wait can steal another's status.

use std::time::{Duration, Instant};

use hookvisor_core::sys;
use libc::c_int;
use nix::unistd::Pid;

use crate::runner::{PassCommand, Runner};
use crate::signals::{self, Blocked};
use crate::sweep;

/// How often the final SIGKILL is repeated while something is still alive: a process forked
/// between two sweeps escapes one, never two.
const KILL_REPEAT: Duration = Duration::from_millis(100);

/// The note of a session hook whose runner had to be killed before it recorded the run.
const KILLED_NOTE: &str =
    "killed by hookvisor-init: the grace period ended before the hook stopped";

/// The children the init knows by name, and the state of a shutdown.
pub(crate) struct Supervisor {
    signals: Blocked,
    grace: Duration,
    kill_group: bool,
    /// How a runner is started, for the recorder of a killed one.
    passes: Option<PassCommand>,
    /// CMD while it runs.
    cmd: Option<Pid>,
    /// CMD's exit status (128+n for signal n) once it is reaped.
    cmd_status: Option<i32>,
    runners: Vec<Runner>,
    /// False once `waitpid(-1)` said there is no child left at all.
    children: bool,
    stop: Option<Stop>,
}

/// A stop in progress: what asked for it, when the grace ends, whether KILL was sent.
#[derive(Clone, Copy)]
struct Stop {
    /// The signal that asked for it; `None` when CMD ended on its own.
    signal: Option<c_int>,
    deadline: Instant,
    killed: bool,
}

impl Supervisor {
    /// A supervisor with no child yet; `signals` must already be blocked.
    pub(crate) fn new(
        signals: Blocked,
        grace: Duration,
        kill_group: bool,
        passes: Option<PassCommand>,
    ) -> Self {
        Supervisor {
            signals,
            grace,
            kill_group,
            passes,
            cmd: None,
            cmd_status: None,
            runners: Vec::new(),
            children: true,
            stop: None,
        }
    }

    /// Adds a runner to the children the init knows.
    pub(crate) fn adopt_runner(&mut self, runner: Runner) {
        self.children = true;
        self.runners.push(runner);
    }

    /// Sets CMD, once it is spawned.
    pub(crate) fn adopt_cmd(&mut self, pid: Pid) {
        self.children = true;
        self.cmd = Some(pid);
    }

    /// The signal that asked the container to stop, if one did.
    pub(crate) fn stop_signal(&self) -> Option<c_int> {
        self.stop.and_then(|s| s.signal)
    }

    /// CMD's exit status: its code, or 128+n when signal n killed it.
    pub(crate) fn cmd_status(&self) -> Option<i32> {
        self.cmd_status
    }

    /// Runs the loop until the runner `pid` is reaped (the blocking session hooks are done), or
    /// until a stop was asked for and the runner is gone.
    pub(crate) fn wait_runner(&mut self, pid: Pid) {
        self.run_until(|s| s.runners.iter().all(|r| r.pid != pid));
    }

    /// Runs the loop until CMD is reaped.
    pub(crate) fn wait_cmd(&mut self) {
        self.run_until(|s| s.cmd.is_none());
    }

    /// Stops whatever is left once CMD is gone: TERM to every process (background session
    /// hooks included), the rest of the grace period, then KILL, until nothing is left.
    pub(crate) fn stop_everything(&mut self) {
        self.reap();
        if !self.children {
            return;
        }
        let stop = self.stop.get_or_insert(Stop {
            signal: None,
            deadline: Instant::now() + self.grace,
            killed: false,
        });
        if !stop.killed {
            sweep::signal_all(libc::SIGTERM);
        }
        self.run_until(|s| !s.children);
    }

    /// The loop: reap, check, wait for one signal or the deadline, handle it.
    fn run_until(&mut self, done: impl Fn(&Self) -> bool) {
        loop {
            self.reap();
            if done(self) {
                return;
            }
            let timeout = self.stop.map(|stop| {
                if stop.killed {
                    KILL_REPEAT
                } else {
                    stop.deadline.saturating_duration_since(Instant::now())
                }
            });
            match self.signals.wait(timeout) {
                Some(libc::SIGCHLD) => {}
                Some(sig) => self.on_signal(sig),
                None => self.on_timeout(),
            }
        }
    }

    /// Forwards `sig` to CMD; TERM and INT also start the stop.
    fn on_signal(&mut self, sig: c_int) {
        if signals::is_shutdown(sig) && self.stop.is_none() {
            self.stop = Some(Stop {
                signal: Some(sig),
                deadline: Instant::now() + self.grace,
                killed: false,
            });
            // Runners cancel their hook and record it as stopped.
            for runner in &self.runners {
                let _ = signals::send(runner.pid.as_raw(), libc::SIGTERM);
            }
        }
        if let Some(pid) = self.cmd {
            let target = if self.kill_group {
                -pid.as_raw()
            } else {
                pid.as_raw()
            };
            // CMD may have exited and not been reaped yet; ESRCH then means nothing.
            let _ = signals::send(target, sig);
        }
    }

    /// The grace period is over: KILL everything, and again until it is all gone.
    fn on_timeout(&mut self) {
        let Some(stop) = &mut self.stop else {
            return;
        };
        if Instant::now() < stop.deadline {
            return;
        }
        if !stop.killed {
            eprintln!(
                "hookvisor-init: grace period of {}s over; killing what is left",
                self.grace.as_secs_f64()
            );
            stop.killed = true;
        }
        sweep::signal_all(libc::SIGKILL);
    }

    /// Reaps every child that has exited: CMD, runners and adopted orphans alike.
    fn reap(&mut self) {
        loop {
            let (pid, status) = match sys::reap_any() {
                Ok(Some(reaped)) => (reaped.pid, reaped.status),
                Ok(None) => return,
                Err(e) => {
                    if e.raw_os_error() == Some(libc::ECHILD) {
                        self.children = false;
                    }
                    return;
                }
            };
            let Some(code) = sys::wait_status_code(status) else {
                continue;
            };
            let pid = Pid::from_raw(pid);
            if self.cmd == Some(pid) {
                self.cmd = None;
                self.cmd_status = Some(code);
            } else if let Some(i) = self.runners.iter().position(|r| r.pid == pid) {
                let runner = self.runners.swap_remove(i);
                let killed = libc::WIFSIGNALED(status);
                // A runner that exited 0 or 1 recorded every hook it ran: a recorder would
                // only touch the state dir while CMD may already be using it.
                if killed || !matches!(code, 0 | 1) {
                    self.runner_ended(runner, killed);
                }
            }
        }
    }

    /// A runner that was killed could not record its running hook; a recorder does it for it.
    ///
    /// The recorder is a forked child, never the init itself: the state dir is the agent's, so
    /// the agent can hold the status lock, and PID 1 must never wait on anything the agent
    /// controls while it has signals to forward.
    fn runner_ended(&mut self, runner: Runner, killed: bool) {
        let (Some(passes), Some(pass)) = (&self.passes, runner.pass) else {
            return;
        };
        let note = if killed {
            KILLED_NOTE
        } else {
            "the session runner exited before recording the hook"
        };
        match passes.record_killed(pass, note) {
            Ok(recorder) => self.adopt_runner(recorder),
            Err(e) => eprintln!("hookvisor-init: warning: cannot record the stopped hooks: {e}"),
        }
    }
}

//! The command line of `hookvisor-init`, resolved into one [`Config`] before anything runs.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;

/// PID 1 for hookvisor containers: reaps zombies, forwards signals, runs the session hooks of
/// the workspace, then runs CMD as the unprivileged user and exits with its status.
#[derive(Debug, Parser)]
#[command(name = "hookvisor-init", version, about)]
struct Args {
    /// Run CMD and `run_as: user` session hooks as this account.
    #[arg(long, env = "HOOKVISOR_USER", value_name = "NAME")]
    user: Option<String>,
    /// Workspace root [default: $DISCOBOT_WORKSPACE, else the current directory].
    #[arg(long, env = "HOOKVISOR_WORKSPACE", value_name = "DIR")]
    workspace: Option<PathBuf>,
    /// Seconds between forwarding TERM and killing whatever is left.
    #[arg(
        long,
        env = "HOOKVISOR_GRACE",
        value_name = "SECS",
        default_value_t = 10.0
    )]
    grace: f64,
    /// State directory [default: $HOOKVISOR_STATE_DIR, else
    /// ~USER/.discobot/SESSION/hooks].
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// Session id [default: $DISCOBOT_SESSION_ID, else $SESSION_ID, else "default"].
    #[arg(long = "session", value_name = "ID")]
    session: Option<String>,
    /// Forward signals to CMD's whole process group instead of CMD alone.
    #[arg(long, env = "HOOKVISOR_KILL_GROUP")]
    kill_group: bool,
    /// The command to run once the blocking session hooks are done.
    #[arg(last = true, required = true, value_name = "CMD")]
    cmd: Vec<OsString>,
}

/// Everything the init needs to know, resolved from the command line and the environment.
#[derive(Debug)]
pub struct Config {
    /// `--user`: the account for CMD and `run_as: user` hooks; `None` runs them as ourselves.
    pub user: Option<String>,
    /// `--workspace`; `None` lets the context fall back to `$DISCOBOT_WORKSPACE` and the cwd.
    pub workspace: Option<PathBuf>,
    /// `--state-dir`; `None` lets the context fall back to `$HOOKVISOR_STATE_DIR` and the home.
    pub state_dir: Option<PathBuf>,
    /// `--session`; `None` lets the context fall back to the environment.
    pub session: Option<String>,
    /// How long processes get between TERM and KILL when stopping.
    pub grace: Duration,
    /// Signal CMD's process group rather than CMD alone.
    pub kill_group: bool,
    /// CMD and its arguments; never empty.
    pub cmd: Vec<OsString>,
}

impl Config {
    /// Parses the command line; prints usage and exits 2 on a mistake, as clap does.
    pub fn from_args() -> Config {
        let args = Args::parse();
        let grace = match Duration::try_from_secs_f64(args.grace) {
            Ok(grace) => grace,
            Err(_) => {
                eprintln!(
                    "hookvisor-init: --grace {} is not a number of seconds; pass e.g. --grace 10",
                    args.grace
                );
                std::process::exit(2);
            }
        };
        Config {
            user: args.user.filter(|u| !u.is_empty()),
            workspace: args.workspace,
            state_dir: args.state_dir,
            session: args.session,
            grace,
            kill_group: args.kill_group,
            cmd: args.cmd,
        }
    }
}

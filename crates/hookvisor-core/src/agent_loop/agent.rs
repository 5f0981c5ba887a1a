//! Running the agent for one iteration, and the `--until` command, through the executor's
//! rules (own process group, timeout, cancel, capped log, bounded tail, leftovers killed).

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::context::Context;
use crate::exec::{CancelToken, ExecError, Invocation, RunOptions, RunOutcome, run_command};

/// How many lines of the agent's output the `error` event carries.
pub(crate) const ERROR_LINES: usize = 20;

/// Bytes of one agent log: the log is streamed, memory holds only the executor's 64 KiB tail,
/// and a runaway agent may fill this much disk per iteration, no more.
const AGENT_LOG_LIMIT: u64 = 64 * 1024 * 1024;

/// Variables the agent must not inherit: a server's address would send its `hookvisor fire`
/// to that server's state dir instead of the loop's, and the server's token is no agent's.
const NOT_INHERITED: [&str; 3] = ["HOOKVISOR_URL", "HOOKVISOR_SOCKET", "HOOKVISOR_TOKEN"];

/// One program to run for the loop: what differs between the agent and `--until`.
pub(crate) struct Launch<'a> {
    /// The program (a path, or a name looked up in `PATH`).
    pub(crate) program: PathBuf,
    /// Its arguments after `argv[0]`.
    pub(crate) args: Vec<OsString>,
    /// Its stdin, else `/dev/null`.
    pub(crate) stdin: Option<Vec<u8>>,
    /// Where its output goes.
    pub(crate) log: PathBuf,
    /// When its process group is stopped; `None` never.
    pub(crate) timeout: Option<Duration>,
    /// The loop's variables (`HOOKVISOR_SESSION`, …), set over the inherited environment.
    pub(crate) env: &'a [(OsString, OsString)],
}

/// Runs `launch` in the workspace and waits for it (or for `cancel`).
pub(crate) fn launch(
    ctx: &Context,
    launch: Launch<'_>,
    cancel: &CancelToken,
) -> Result<RunOutcome, ExecError> {
    let invocation = Invocation {
        program: launch.program,
        found: None,
        args: launch.args,
        env: launch.env.to_vec(),
        env_remove: NOT_INHERITED.iter().map(OsString::from).collect(),
        cwd: ctx.workspace.clone(),
        log_path: launch.log,
        timeout: launch.timeout.unwrap_or(Duration::MAX),
    };
    let options = RunOptions {
        cancel: Some(cancel.clone()),
        log_limit: AGENT_LOG_LIMIT,
        stdin: launch.stdin.map(Arc::from),
        ..RunOptions::default()
    };
    run_command(&invocation, &options)
}

/// The name of an iteration's log in `<state>/loop/`: `<iteration>.log`.
pub(crate) fn agent_log(iteration: u64) -> String {
    format!("{iteration}.log")
}

/// The last `n` lines of a run's output (its in-memory tail, at most 64 KiB), without the
/// final newline.
pub(crate) fn last_lines(tail: &str, n: usize) -> String {
    let text = tail.trim_end_matches('\n');
    let start = text
        .rmatch_indices('\n')
        .nth(n.saturating_sub(1))
        .map_or(0, |(i, _)| i + 1);
    text[start..].to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn last_lines_keeps_the_end() {
        let text: String = (1..=30).map(|i| format!("line {i}\n")).collect();
        let last = last_lines(&text, ERROR_LINES);
        assert_eq!(last.lines().count(), 20);
        assert!(last.starts_with("line 11\n") && last.ends_with("line 30"));
        assert_eq!(last_lines("a\nb", 20), "a\nb");
        assert_eq!(last_lines("", 20), "");
    }
}

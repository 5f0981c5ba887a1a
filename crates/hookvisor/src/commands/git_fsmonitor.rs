//! `git-fsmonitor VERSION TOKEN`: git's fsmonitor hook (`core.fsmonitor`, protocol version 2),
//! which `install git-fsmonitor` sets up (docs/guide/git.md).
//!
//! It asks the server of `$HOOKVISOR_URL` (`POST /v1/fsmonitor`) for the paths changed since
//! TOKEN in the work tree git runs it in, and prints the server's answer. Whenever that answer
//! cannot be had — no server, another workspace's server, no answer within [`DEADLINE`] — it
//! prints a token no server knows and `/`: git then checks every file, so the answer is slow at
//! worst, never wrong. Root's git asks only a socket only root can change.

use std::io::Write;
use std::time::Duration;

use hookvisor_core::watch::FsmonitorAnswer;

use crate::error::{CliError, CliResult, Exit};
use crate::turn_client::TurnClient;

/// How long git waits for the server's answer at most (its cookie round trip is bounded by a
/// second).
pub const DEADLINE: Duration = Duration::from_secs(2);

/// The token of an answer not from a server: unknown to every server, so the next query is
/// answered "everything" too.
const NO_SERVER: &str = "hookvisor:none";

/// Prints the answer for `token` on stdout, as git reads it.
pub fn run(version: u32, token: &str) -> CliResult {
    if version != 2 {
        // git then checks everything (and, without core.fsmonitorHookVersion, asks again as 1).
        return Err(CliError::usage(format!(
            "git-fsmonitor: protocol version {version} is not answered; set \
             core.fsmonitorHookVersion to 2"
        )));
    }
    let answer =
        ask(token).unwrap_or_else(|| FsmonitorAnswer::everything(NO_SERVER).to_hook_output());
    let mut out = std::io::stdout().lock();
    out.write_all(&answer)?;
    out.flush()?;
    Ok(Exit::Ok)
}

/// The server's answer, when the environment names a server and it answers in time. Root
/// asks only a socket no other account can replace ([`root_may_ask`]), judged as the client
/// will connect to it.
fn ask(token: &str) -> Option<Vec<u8>> {
    let client = TurnClient::from_env(|name| std::env::var(name).ok())?
        .ok()?
        .with_deadline(DEADLINE);
    if nix::unistd::Uid::effective().is_root() && !root_may_ask(&client) {
        return None;
    }
    // git runs the hook at the root of its work tree.
    let work_tree = std::env::current_dir().ok()?;
    let answer = client.fsmonitor(token, &work_tree).ok()?;
    // A token, NUL, then the rest: anything else is not an answer to print.
    (answer.iter().position(|&b| b == 0).unwrap_or(0) > 0).then_some(answer)
}

/// Whether root may take an answer from `client`'s server: only through a Unix socket that no
/// account but root can change, it or a directory above it. A loopback port is anyone's once
/// the server is down, and a short answer would hide changes from root's git.
fn root_may_ask(client: &TurnClient) -> bool {
    client.socket().is_some_and(|socket| {
        matches!(
            hookvisor_core::user_fs::writable_by_others(socket),
            Ok(None)
        )
    })
}

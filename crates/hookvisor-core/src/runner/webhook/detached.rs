//! An unawaited webhook (`await: false`) fired by a process that exits with its decision (the
//! `fire` command, an adapter): EVENTS.md §4.3 sends it from a detached child, so an agent
//! waiting for that process never waits for a slow receiver and its retries (up to two
//! minutes).
//!
//! The child is the same binary, `hookvisor --workspace W --state-dir S --session ID fire
//! EVENT --deliver HOOK`, with the event JSON of the firing on its stdin (a pipe, never a file
//! or an argument): it reads the hooks again, runs that one hook as its own unawaited hook,
//! and records the run in status.json and its log as any run. Its environment is ours without
//! `HOOKVISOR_RUN` (it is nobody's leftover: it outlives us on purpose) and `HOOKVISOR_URL`
//! (it delivers here, never through a server). It is in a process group of its own, so a
//! Ctrl-C of the agent's terminal does not stop a delivery already decided. Values of earlier
//! actions of the firing (`${spawn_output}`) do not reach it.

use std::io::{self, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::context::Context;
use crate::firing::Firing;
use crate::hook::Hook;
use crate::payload::Payload;

/// Starts the detached delivery of `hook` with `exe`; it is not waited for.
pub(crate) fn deliver_detached(
    exe: &Path,
    ctx: &Context,
    hook: &Hook,
    firing: &Firing,
    payload: &Payload,
) -> io::Result<()> {
    let session = firing.session.as_deref().unwrap_or(&ctx.session_id);
    let mut child = Command::new(exe)
        .arg("--workspace")
        .arg(&ctx.workspace)
        .arg("--state-dir")
        .arg(ctx.state().root())
        .args(["--session", session, "fire"])
        .arg(firing.event.to_string())
        .args(["--deliver", &hook.id])
        .env_remove(crate::leftovers::RUN_MARKER_VARIABLE)
        .env_remove("HOOKVISOR_URL")
        .current_dir(&ctx.workspace)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()?;
    let json = payload.stdin_json();
    let written = child
        .stdin
        .take()
        .map_or(Ok(()), |mut stdin| stdin.write_all(&json));
    // Reaped by whoever outlives it: a CLI exits at once, a longer-lived caller reaps it here.
    std::thread::spawn(move || child.wait());
    written
}

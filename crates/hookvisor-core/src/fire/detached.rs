//! An unawaited hook (`await: false`, docs/EVENTS.md §1.3) of a firing whose caller does not wait
//! for it (`Firing::detach_unawaited`: `fire`, `eval`, an adapter, `loop`, a git hook,
//! `serve`'s turn end): a webhook, a
//! command or a git action is run by a detached child, so an agent waiting for the caller
//! never waits for the hook (a `sleep`, a slow receiver and its retries).
//!
//! The child is the same binary, `hookvisor --workspace W --state-dir S --session ID fire
//! EVENT --deliver HOOK`, with the event JSON of the firing on its stdin (a pipe, never a file
//! or an argument; a `post` hook's `${decision}` beside its fields as `decision`): it reads
//! the hooks again and runs that one hook alone (`crate::fire::deliver`: nothing else of the
//! event), recording the run in status.json and its log as any run; what it says goes to the
//! context buffer. It is the hook's supervisor: the hook is its child, stopped at its
//! `timeout` and reaped by it, like any run of `fire`. The child itself is reaped by whoever
//! outlives it: a caller that lives on waits for it on a thread (and `loop`'s sweep of
//! leftovers spares it meanwhile); a caller that exits leaves it to the nearest subreaper or
//! init, which reaps it when it ends. Its environment is ours without `HOOKVISOR_RUN` (it is
//! nobody's leftover: it outlives us on purpose) and `HOOKVISOR_URL` (it runs here, never
//! through a server). It is in a process group of its own, so a Ctrl-C of the agent's
//! terminal does not stop a run already decided. Values of earlier actions of the firing
//! (`${spawn_output}`) do not reach it.

use std::io::{self, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::Path;
use std::process::{Command, Stdio};

use crate::context::Context;
use crate::firing::Firing;
use crate::hook::Hook;
use crate::payload::Payload;

/// Starts the detached run of `hook` with `exe`; it is not waited for.
pub(crate) fn deliver_detached(
    exe: &Path,
    ctx: &Context,
    hook: &Hook,
    firing: &Firing,
    payload: &Payload,
    decision: Option<&str>,
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
        // What it says of itself (a hook it cannot find, a record it cannot write) goes to
        // the session's log: nothing it does is lost unseen.
        .stderr(session_log(ctx))
        .process_group(0)
        .spawn()?;
    let mut json = payload.stdin_json();
    // What the child needs besides the event JSON rides beside its fields: a `post` hook's
    // `${decision}`, the caller's variables, and the pipeline files its hooks were read from.
    if let Ok(serde_json::Value::Object(mut event)) = serde_json::from_slice(&json) {
        if let Some(decision) = decision {
            event.insert("decision".into(), decision.into());
        }
        if !firing.vars.is_empty() {
            event.insert("vars".into(), firing.vars.clone().into());
        }
        if let Some(files) = &firing.pipeline {
            let files = files.iter().map(|f| f.to_string_lossy().into_owned());
            event.insert("pipeline".into(), files.collect::<Vec<_>>().into());
        }
        json = serde_json::to_vec(&event).unwrap_or(json);
    }
    let written = child
        .stdin
        .take()
        .map_or(Ok(()), |mut stdin| stdin.write_all(&json));
    // Reaped by whoever outlives it: a CLI exits at once, a longer-lived caller reaps it here.
    let pid = child.id();
    crate::leftovers::spare(pid);
    std::thread::spawn(move || {
        let _ = child.wait();
        crate::leftovers::unspare(pid);
    });
    written
}

/// The session's log as the child's stderr; nowhere when it cannot be opened.
fn session_log(ctx: &Context) -> Stdio {
    crate::context_buffer::ContextBuffer::new(&ctx.state())
        .open_session_log()
        .map_or_else(|_| Stdio::null(), Stdio::from)
}

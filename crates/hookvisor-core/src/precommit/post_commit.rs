//! Rule 8: the run git starts after a commit is made, which fires `commit.after` with the
//! commit.

use std::ffi::OsString;
use std::os::unix::ffi::OsStringExt;
use std::path::PathBuf;

use serde_json::Value as Json;

use super::{PreCommitError, PreCommitSkip, git, strip_newline};
use crate::context::Context;
use crate::decision::Reply;
use crate::discover::discover_workspace;
use crate::event::Event;
use crate::fire::fire;
use crate::firing::Firing;

/// Fires `commit.after` in `ctx.workspace` (the top level of the work tree) for its `HEAD`:
/// `${commit}` is the commit's id, `files` the paths it changed. Hooks `skip` names do not
/// run. `None` when no hook binds the event (git is not even asked).
pub fn run_post_commit(
    ctx: &Context,
    skip: &PreCommitSkip,
) -> Result<Option<Reply>, PreCommitError> {
    if *skip == PreCommitSkip::All {
        return Ok(None);
    }
    let mut discovery = discover_workspace(ctx);
    discovery
        .hooks
        .retain(|h| h.spec.event == Event::CommitAfter && !skip.skips(h));
    if discovery.hooks.is_empty() {
        return Ok(None);
    }
    let commit = strip_newline(git(&ctx.workspace, &["rev-parse", "HEAD"])?);
    let changed = git(
        &ctx.workspace,
        &[
            "diff-tree",
            "-r",
            "--root",
            "--no-commit-id",
            "--name-only",
            "-z",
            "HEAD",
        ],
    )?;
    let mut firing = Firing::new(Event::CommitAfter);
    // `git commit` waits for this process: an unawaited hook goes on without it (docs/EVENTS.md
    // §1.3, on any path).
    firing.detach_unawaited = true;
    firing.data.insert(
        "commit".into(),
        Json::from(String::from_utf8_lossy(&commit).into_owned()),
    );
    firing.files = Some(
        changed
            .split(|&b| b == 0)
            .filter(|p| !p.is_empty())
            .map(|p| PathBuf::from(OsString::from_vec(p.to_vec())))
            .collect(),
    );
    Ok(Some(fire(ctx, &discovery, &firing)?))
}

//! The steps of each git action, in order (rules 2 to 5 of the module).

use std::ffi::OsString;
use std::fs;
use std::io::Read as _;
use std::path::Path;

use super::runner::Runner;
use hookvisor_core::context::Context;
use hookvisor_core::discover::discover_workspace;
use hookvisor_core::event::HookAction;
use hookvisor_core::exec::{CancelToken, ExecError, RunOutcome};
use hookvisor_core::git::MANAGED_MARKER;
use hookvisor_core::git_action::refs::{RefKind, check};
use hookvisor_core::git_action::{AddMode, GitCommit, GitPush};
use hookvisor_core::hook::Hook;
use hookvisor_core::payload::Payload;
use hookvisor_core::template::{self, TemplateError, Value};

/// How a git action's run ended, as the dispatcher records it.
pub(crate) enum GitRun {
    /// Git ran (whatever it said).
    Finished(RunOutcome),
    /// Refused before git ran, by a value of the event: the same firing fails the same way,
    /// so it is never re-run.
    Refused(String),
}

/// Runs the hook's git action with the event's `payload`; `None` when its action is no git
/// action.
pub(crate) fn run(
    ctx: &Context,
    hook: &Hook,
    payload: &Payload,
    cancel: &CancelToken,
) -> Result<Option<GitRun>, ExecError> {
    let session = match payload.template_value("session") {
        Some(Value::Scalar(session)) => session.to_string_lossy().into_owned(),
        _ => ctx.session_id.clone(),
    };
    let ran = match &hook.spec.action {
        HookAction::GitCommit(action) => commit(ctx, hook, &session, action, payload, cancel)?,
        HookAction::GitPush(action) => push(ctx, hook, &session, action, payload, cancel)?,
        _ => return Ok(None),
    };
    Ok(Some(ran))
}

/// `git-commit`: add, see whether anything is staged, commit with the message on stdin.
fn commit(
    ctx: &Context,
    hook: &Hook,
    session: &str,
    action: &GitCommit,
    payload: &Payload,
    cancel: &CancelToken,
) -> Result<GitRun, ExecError> {
    let message = match expand(&action.message, payload) {
        Ok(message) => message.into_encoded_bytes(),
        Err(err) => return Ok(GitRun::Refused(refusal("git-commit", "message", &err))),
    };
    if message.contains(&0) {
        return Ok(GitRun::Refused(
            "git-commit: the expanded message holds a NUL byte, which a commit message cannot; \
             leave that value out of message:"
                .to_owned(),
        ));
    }
    if let Err(err) = hookvisor_core::git::may_run_in(&ctx.workspace) {
        return Ok(GitRun::Refused(format!("git-commit: {err}")));
    }
    let mut git = Runner::new(ctx, hook, session, cancel)?;
    let top = git.git(&["rev-parse", "--show-toplevel"], None)?;
    if !top.ok() {
        return Ok(GitRun::Finished(git.failed(
            &top,
            "the workspace is no git work tree; run git init there or fire in a repository",
        )?));
    }
    let discovery = discover_workspace(ctx);
    // Rule 3: the gates run only through the installed git hook; a commit without it would
    // pass them silently.
    if !action.no_verify && hookvisor_core::discover::has_commit_hooks(&discovery) {
        let hook = git.git(&["rev-parse", "--git-path", "hooks/pre-commit"], None)?;
        if !hook.ok() {
            return Ok(GitRun::Finished(git.failed(
                &hook,
                "cannot find the git hooks dir; nothing was committed",
            )?));
        }
        if !is_managed(&ctx.workspace.join(hook.stdout())) {
            return Ok(GitRun::Finished(git.refused(
                "git-commit: this workspace has commit.before gates, but the git pre-commit hook \
                 that runs them is not installed, so nothing was committed; run `hookvisor \
                 pre-commit install` (eval and serve install it too), or set no_verify: true",
            )?));
        }
    }
    let add: &[&str] = match action.add {
        AddMode::All => &["add", "-A"],
        AddMode::Tracked => &["add", "-u"],
        AddMode::Staged => &[],
    };
    if !add.is_empty() {
        let added = git.git(add, None)?;
        if !added.ok() {
            return Ok(GitRun::Finished(git.failed(
                &added,
                "nothing was committed; fix what git says, or use add: staged",
            )?));
        }
    }
    let staged = git.git(&["diff", "--cached", "--quiet", "--no-ext-diff"], None)?;
    match staged.code() {
        0 if staged.ok() => {
            git.say("nothing to commit; no commit made");
            return Ok(GitRun::Finished(git.done()?));
        }
        1 if !staged.stopped() => {}
        _ => {
            return Ok(GitRun::Finished(git.failed(
                &staged,
                "cannot tell whether anything is staged; nothing was committed",
            )?));
        }
    }
    let mut args = vec!["commit", "--cleanup=verbatim"];
    if action.no_verify {
        args.push("--no-verify");
    }
    args.extend(["-F", "-"]);
    let committed = git.git(&args, Some(&message))?;
    if !committed.ok() {
        return Ok(GitRun::Finished(git.failed(
            &committed,
            "nothing was committed (a commit.before gate or pre-commit hook refused it when its \
             output above says so)",
        )?));
    }
    let head = git.git(&["rev-parse", "HEAD"], None)?;
    match head.ok() {
        true => git.say(&format!("committed {}", head.stdout())),
        false => git.say("committed"),
    }
    // Rule 9: `commit.after` fires once per commit, from the post-commit git hook when ours is
    // installed (git ran it above, even with no_verify), else from here, by the same command.
    if hookvisor_core::discover::has_commit_after_hooks(&discovery) {
        let hook = git.git(&["rev-parse", "--git-path", "hooks/post-commit"], None)?;
        if !(hook.ok() && is_managed(&ctx.workspace.join(hook.stdout()))) {
            // A notice: its failure is in the log, never the action's.
            git.hookvisor(&["post-commit", "run"])?;
        }
    }
    Ok(GitRun::Finished(git.done()?))
}

/// `git-push`: the branch (the current one by default) to the remote, never forced, with an
/// upstream when it has none.
fn push(
    ctx: &Context,
    hook: &Hook,
    session: &str,
    action: &GitPush,
    payload: &Payload,
    cancel: &CancelToken,
) -> Result<GitRun, ExecError> {
    let remote = match checked(RefKind::Remote, &action.remote, payload) {
        Ok(remote) => remote,
        Err(refused) => return Ok(GitRun::Refused(refused)),
    };
    let named = match &action.branch {
        Some(branch) => match checked(RefKind::Branch, branch, payload) {
            Ok(branch) => Some(branch),
            Err(refused) => return Ok(GitRun::Refused(refused)),
        },
        None => None,
    };
    if let Err(err) = hookvisor_core::git::may_run_in(&ctx.workspace) {
        return Ok(GitRun::Refused(format!("git-push: {err}")));
    }
    let mut git = Runner::new(ctx, hook, session, cancel)?;
    // Rule 5: a name git does not know would be read as a path or URL.
    let remotes = git.git(&["remote"], None)?;
    if !remotes.ok() {
        return Ok(GitRun::Finished(git.failed(
            &remotes,
            "cannot list the remotes; nothing was pushed",
        )?));
    }
    if !remotes.stdout().lines().any(|name| name == remote) {
        return Ok(GitRun::Finished(git.refused(&format!(
            "git-push: there is no remote {remote:?} in this repository; add it with git remote \
             add {remote} URL, or fix remote:"
        ))?));
    }
    let branch = match named {
        Some(branch) => branch,
        None => {
            let current = git.git(&["symbolic-ref", "--quiet", "--short", "HEAD"], None)?;
            if !current.ok() {
                return Ok(GitRun::Finished(git.failed(
                    &current,
                    "HEAD is on no branch (detached, or no repository); name one with branch:",
                )?));
            }
            let branch = current.stdout();
            if let Err(err) = check(RefKind::Branch, &branch) {
                return Ok(GitRun::Finished(git.refused(&format!("git-push: {err}"))?));
            }
            branch
        }
    };
    let local = format!("refs/heads/{branch}");
    let exists = git.git(&["rev-parse", "--verify", "--quiet", &local], None)?;
    if !exists.ok() {
        return Ok(GitRun::Finished(git.failed(
            &exists,
            &format!("there is no local branch {branch:?}; create it or fix branch:"),
        )?));
    }
    let upstream = git.git(&["for-each-ref", "--format=%(upstream)", &local], None)?;
    if !upstream.ok() {
        return Ok(GitRun::Finished(
            git.failed(&upstream, "cannot read the branch's upstream")?,
        ));
    }
    let set_upstream = upstream.stdout().is_empty();
    // An explicit refspec without `+`, and no option that forces (rule 5).
    let mut args: Vec<OsString> = vec!["push".into()];
    if set_upstream {
        args.push("-u".into());
    }
    args.extend([
        "--".into(),
        remote.clone().into(),
        format!("{local}:{local}").into(),
    ]);
    let pushed = git.git(&args, None)?;
    if !pushed.ok() {
        return Ok(GitRun::Finished(git.failed(
            &pushed,
            "nothing was pushed; hookvisor never forces, so a branch that is no fast-forward \
             of the remote's must be merged or rebased first",
        )?));
    }
    let note = if set_upstream { ", upstream set" } else { "" };
    git.say(&format!("pushed {branch} to {remote}{note}"));
    Ok(GitRun::Finished(git.done()?))
}

/// Whether the git hook at `path` is hookvisor's (its marker in the first lines, as
/// `pre-commit install` writes it); only its start is read.
fn is_managed(path: &Path) -> bool {
    let mut start = Vec::with_capacity(512);
    let read = fs::File::open(path).and_then(|file| file.take(512).read_to_end(&mut start));
    read.is_ok()
        && start
            .split(|&b| b == b'\n')
            .take(3)
            .any(|line| line == MANAGED_MARKER.as_bytes())
}

/// A template expanded as text: each `${name}` replaced by its value, a list joined with single
/// spaces.
fn expand(text: &str, payload: &Payload) -> Result<OsString, TemplateError> {
    let lookup = |name: &str| {
        payload.template_value(name).map(|value| match value {
            Value::List(items) => Value::Scalar(items.join(std::ffi::OsStr::new(" "))),
            scalar => scalar,
        })
    };
    // One element in, one out: a list inside is joined by the lookup, never split.
    let mut out = template::expand_argv(&[text.to_owned()], lookup)?;
    Ok(out.pop().unwrap_or_default())
}

/// A remote or branch template expanded and checked by rule 6; `Err` is the refusal.
fn checked(kind: RefKind, text: &str, payload: &Payload) -> Result<String, String> {
    let action = "git-push";
    let field = match kind {
        RefKind::Remote => "remote",
        RefKind::Branch => "branch",
    };
    let value = expand(text, payload).map_err(|err| refusal(action, field, &err))?;
    let value = value
        .into_string()
        .map_err(|_| format!("{action}: {field}: the expanded value is not UTF-8; no ref is"))?;
    check(kind, &value).map_err(|err| format!("{action}: {err}"))?;
    Ok(value)
}

/// The refusal for a template that does not expand: an unknown name (docs/EVENTS.md §5 rule 20:
/// never an empty value).
fn refusal(action: &str, field: &str, err: &TemplateError) -> String {
    match err {
        TemplateError::Unknown { name, .. } => format!(
            "{action}: {field}: ${{{name}}} is no template variable of this event; fix the name \
             or pass it with --data (hookvisor check warns about unknown names)"
        ),
        other => format!("{action}: {field}: {other}"),
    }
}

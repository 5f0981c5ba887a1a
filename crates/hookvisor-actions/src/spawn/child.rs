//! One run of a spawn hook: the child dir, its inputs and environment, the child itself and
//! what its end means (rules 2 to 7 of the module).

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Write as _};
use std::os::unix::fs::{DirBuilderExt as _, MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use super::detached;
use hookvisor_core::context::Context;
use hookvisor_core::decision::Verdict;
use hookvisor_core::event::HookAction;
use hookvisor_core::exec::{
    CancelToken, Capture, Captured, ExecError, Invocation, RunOptions, RunOutcome, run_command,
};
use hookvisor_core::git::Git;
use hookvisor_core::hook::Hook;
use hookvisor_core::payload::Payload;
use hookvisor_core::policy::OnTimeout;
use hookvisor_core::produced::{Produced, ProducedName};
use hookvisor_core::runner::{ActionRun, Ran};
use hookvisor_core::spawn::pipeline::{self, PipelineSpec};
use hookvisor_core::spawn::{MAX_SPAWN_DEPTH, Spawn, SpawnTarget, SpawnWorkspace};
use hookvisor_core::state::{Durability, StateDir, write_atomic};
use hookvisor_core::template::{self, TemplateError, Value};

/// Bytes of each of the child's streams kept for the judge, as for a command.
const CAPTURE_LIMIT: usize = 64 * 1024;

/// Bytes of `output.json` read; a larger one is a failed spawn (its path says where it is).
const MAX_OUTPUT_BYTES: u64 = 16 * 1024 * 1024;

/// Names tried for one child dir before giving up (rule 2's `-N`).
const MAX_DIR_TRIES: u32 = 1000;

/// Runs the hook's spawn action with the event's `payload`; `None` when its action is no spawn.
pub(crate) fn run(
    ctx: &Context,
    hook: &Hook,
    payload: &Payload,
    cancel: &CancelToken,
) -> Result<Option<Ran>, ExecError> {
    let HookAction::Spawn(action) = &hook.spec.action else {
        return Ok(None);
    };
    Ok(Some(spawn(ctx, hook, action, payload, cancel)?))
}

/// The steps of one run, in order.
fn spawn(
    ctx: &Context,
    hook: &Hook,
    action: &Spawn,
    payload: &Payload,
    cancel: &CancelToken,
) -> Result<Ran, ExecError> {
    // Rule 5, before anything is made.
    let depth = match parent_depth() {
        Ok(parent) if parent < MAX_SPAWN_DEPTH => parent + 1,
        Ok(parent) => {
            return Ok(Ran::Refused(format!(
                "spawn: this process is a child at depth {parent} (HOOKVISOR_SPAWN_DEPTH), and \
                 children nest at most {MAX_SPAWN_DEPTH} deep; spawn from a shallower level or \
                 use a command"
            )));
        }
        Err(value) => {
            return Ok(Ran::Refused(format!(
                "spawn: HOOKVISOR_SPAWN_DEPTH is '{value}', no depth; unset it or give a number"
            )));
        }
    };
    let inputs = match expand_inputs(&action.inputs, payload) {
        Ok(inputs) => inputs,
        Err(message) => return Ok(Ran::Refused(message)),
    };
    let target = match Target::of(ctx, action, payload) {
        Ok(target) => target,
        Err(message) => return Ok(Ran::Refused(message)),
    };
    let text = |name: &str| match payload.template_value(name) {
        Some(Value::Scalar(value)) => Some(value.to_string_lossy().into_owned()),
        _ => None,
    };
    let session = text("session").unwrap_or_else(|| ctx.session_id.clone());
    let event = text("event").unwrap_or_default();
    let iteration = text("iteration").unwrap_or_else(|| "0".to_owned());

    let dir = match child_dir(ctx, &event, &iteration, &hook.id) {
        Ok(dir) => dir,
        Err(err) => return failed(ctx, hook, &format!("spawn: {err}")),
    };
    let inputs_path = dir.join("inputs.json");
    let output_path = dir.join("output.json");
    let bytes = serde_json::to_vec_pretty(&Json::Object(inputs)).unwrap_or_else(|_| b"{}".into());
    if let Err(err) = write_atomic(&inputs_path, &bytes, Durability::Replaceable) {
        return failed(
            ctx,
            hook,
            &format!("spawn: cannot write {}: {err}", inputs_path.display()),
        );
    }
    // Rule 6: the worktree is removed when this guard drops, on every way out below.
    let worktree = match action.workspace {
        SpawnWorkspace::Shared => None,
        SpawnWorkspace::Worktree => match Worktree::add(&ctx.workspace, &dir.join("worktree")) {
            Ok(worktree) => Some(worktree),
            Err(message) => return failed(ctx, hook, &format!("spawn: {message}")),
        },
    };
    let cwd = worktree
        .as_ref()
        .map_or_else(|| ctx.workspace.clone(), |w| w.path.clone());
    let (program, args) = target.command(&dir, &cwd);
    let env: Vec<(OsString, OsString)> = [
        ("HOOKVISOR_INPUTS", inputs_path.into_os_string()),
        ("HOOKVISOR_OUTPUT", output_path.clone().into_os_string()),
        ("HOOKVISOR_PARENT_SESSION", session.into()),
        ("HOOKVISOR_SPAWN_DEPTH", depth.to_string().into()),
        ("HOOKVISOR_STATE_DIR", dir.clone().into_os_string()),
    ]
    .into_iter()
    .map(|(name, value)| (OsString::from(name), value))
    .collect();
    let invocation = Invocation {
        program,
        found: None,
        args,
        env,
        env_remove: removed_variables(),
        cwd,
        log_path: ctx.log_path(&hook.id),
        timeout: hook.timeout,
    };

    if !hook.spec.await_ {
        // Rule 8: the worktree stays with the child and goes at session.end.
        let kept = worktree.map(Worktree::keep);
        return match detached::start(ctx, hook, &invocation, &dir, kept) {
            Ok(pid) => Ok(Ran::Finished(
                succeeded(
                    ctx,
                    hook,
                    &format!("spawn: detached child {pid} in {}\n", dir.display()),
                )?
                .into(),
            )),
            Err(err) => failed(ctx, hook, &format!("spawn: {err}")),
        };
    }

    let options = RunOptions {
        cancel: Some(cancel.clone()),
        capture: Capture::Separate {
            limit: CAPTURE_LIMIT,
        },
        ..RunOptions::default()
    };
    let mut outcome = run_command(&invocation, &options)?;
    drop(worktree);
    let note = |outcome: &mut RunOutcome, line: String| {
        note(ctx, hook, outcome, &line);
    };
    note(
        &mut outcome,
        format!("hookvisor: spawn: child dir {}", dir.display()),
    );
    if outcome.cancelled {
        return Ok(Ran::Finished(outcome.into()));
    }
    if outcome.timed_out {
        let message = format!(
            "spawn: the child timed out after {}s and its process group was stopped",
            hook.timeout.as_secs()
        );
        let mut run = ActionRun::from(outcome);
        if action.on_timeout == OnTimeout::Abort {
            // The outcome stays what happened (a timeout, exit 124, as a command's is recorded);
            // the abort is this action's verdict, whatever the event or the hook's phase.
            note(
                &mut run.outcome,
                format!("hookvisor: {message}; on_timeout: abort"),
            );
            run.verdict = Some(Verdict::Abort {
                reason: format!("{message} (on_timeout: abort)"),
            });
        }
        return Ok(Ran::Finished(run));
    }
    let mut produced = Vec::new();
    if outcome.exit_code == 0 {
        match check_output(&output_path) {
            // hookvisor_core::produced rule 1: a success hands its output to the later hooks.
            Ok(Some(text)) => produced.push(Produced {
                name: ProducedName::SpawnOutput,
                value: text,
            }),
            Ok(None) => {}
            Err(message) => {
                outcome.exit_code = 1;
                let captured = outcome.captured.get_or_insert_with(Captured::default);
                captured
                    .stderr
                    .extend_from_slice(format!("{message}\n").as_bytes());
                note(&mut outcome, format!("hookvisor: {message}"));
            }
        }
    } else if matches!(action.target, SpawnTarget::Pipeline(_)) {
        let code = outcome.exit_code;
        note(
            &mut outcome,
            format!(
                "hookvisor: spawn: the pipeline child ended without done (exit {}); see {}",
                code,
                StateDir::new(&dir).status().display()
            ),
        );
    }
    Ok(Ran::Finished(ActionRun {
        produced,
        ..outcome.into()
    }))
}

/// What the child runs: a loop of a pipeline file or a plain program (rule 1).
enum Target {
    /// `hookvisor loop` of this spec, by this executable.
    Loop(PathBuf, PathBuf, PipelineSpec),
    /// A program and its arguments, expanded.
    Program(Vec<OsString>),
}

impl Target {
    /// Reads the pipeline file or expands the argv; `Err` is the refusal.
    fn of(ctx: &Context, action: &Spawn, payload: &Payload) -> Result<Target, String> {
        match &action.target {
            SpawnTarget::Pipeline(name) => {
                let path = pipeline::path_of(&ctx.workspace, name);
                let spec = pipeline::load(&path).map_err(|err| format!("spawn: {err}"))?;
                if spec.agent.is_empty() {
                    return Err(format!(
                        "spawn: {}: no agent; give the agent command as a list, program first, \
                         as in 'agent: [claude, -p, \"{{prompt}}\"]'",
                        path.display()
                    ));
                }
                Ok(Target::Loop(hookvisor_exe()?, path, spec))
            }
            SpawnTarget::Argv(argv) => {
                let expanded = template::expand_argv(argv, |n| payload.template_value(n))
                    .map_err(|err| refusal("argv", &err))?;
                if expanded.iter().any(|a| a.as_encoded_bytes().contains(&0)) {
                    return Err(
                        "spawn: argv: a value holds a NUL byte, which no argument can; \
                                pass it through inputs"
                            .to_owned(),
                    );
                }
                match expanded.first() {
                    Some(program) if !program.is_empty() => Ok(Target::Program(expanded)),
                    _ => Err("spawn: argv: the program expands to nothing".to_owned()),
                }
            }
        }
    }

    /// The program and arguments, for the child dir `dir` working in `cwd`.
    fn command(self, dir: &Path, cwd: &Path) -> (PathBuf, Vec<OsString>) {
        match self {
            Target::Program(mut argv) => {
                let program = PathBuf::from(argv.remove(0));
                (program, argv)
            }
            Target::Loop(exe, path, spec) => {
                // `--pipeline`: the child runs its pipeline's hooks, not the workspace's.
                let mut args: Vec<OsString> = vec![
                    "loop".into(),
                    "--state-dir".into(),
                    dir.as_os_str().to_owned(),
                    "--workspace".into(),
                    cwd.as_os_str().to_owned(),
                    "--pipeline".into(),
                    path.into_os_string(),
                ];
                if let Some(n) = spec.max_iterations {
                    args.extend(["--max-iterations".into(), n.to_string().into()]);
                }
                if let Some(until) = spec.until {
                    args.extend(["--until".into(), until.into()]);
                }
                if let Some(prompt) = spec.prompt {
                    args.extend(["--prompt".into(), prompt.into()]);
                }
                args.push("--".into());
                args.extend(spec.agent.into_iter().map(OsString::from));
                (exe, args)
            }
        }
    }
}

/// The `hookvisor` executable a pipeline child runs `loop` with: this process's own, unless
/// its file is gone (replaced by an upgrade); then `hookvisor` beside it, then on `PATH`.
fn hookvisor_exe() -> Result<PathBuf, String> {
    let current = std::env::current_exe().ok();
    if let Some(exe) = &current {
        if exe.is_file() {
            return Ok(exe.clone());
        }
        if let Some(beside) = exe.parent().map(|d| d.join("hookvisor"))
            && beside.is_file()
        {
            return Ok(beside);
        }
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join("hookvisor"))
        .find(|candidate| candidate.is_file())
        .ok_or_else(|| {
            "spawn: cannot find the hookvisor executable to run the pipeline's loop; put \
             hookvisor on PATH"
                .to_owned()
        })
}

/// The depth of this process as a child (0 for none); `Err` holds a value that is no depth.
fn parent_depth() -> Result<u32, String> {
    match std::env::var_os("HOOKVISOR_SPAWN_DEPTH") {
        None => Ok(0),
        Some(value) => {
            let text = value.to_string_lossy().into_owned();
            text.trim().parse::<u32>().map_err(|_| text)
        }
    }
}

/// Rule 3: the inputs with their templates expanded, keeping JSON types.
fn expand_inputs(
    inputs: &serde_json::Map<String, Json>,
    payload: &Payload,
) -> Result<serde_json::Map<String, Json>, String> {
    /// Nesting deeper than YAML front matter can usefully say is refused, not recursed into.
    const MAX_NESTING: usize = 32;
    fn value(json: &Json, payload: &Payload, depth: usize) -> Result<Json, String> {
        if depth > MAX_NESTING {
            return Err("spawn: inputs: nested over 32 levels; flatten them".to_owned());
        }
        Ok(match json {
            Json::String(text) => string(text, payload)?,
            Json::Array(items) => Json::Array(
                items
                    .iter()
                    .map(|i| value(i, payload, depth + 1))
                    .collect::<Result<_, _>>()?,
            ),
            Json::Object(map) => Json::Object(
                map.iter()
                    .map(|(k, v)| Ok((k.clone(), value(v, payload, depth + 1)?)))
                    .collect::<Result<_, String>>()?,
            ),
            other => other.clone(),
        })
    }
    fn string(text: &str, payload: &Payload) -> Result<Json, String> {
        let names = template::references(text);
        // A lone `${name}` keeps its value's type.
        if let [name] = names.as_slice()
            && text.len() == name.len() + 3
            && text.starts_with("${")
            && text.ends_with('}')
        {
            let path: Vec<&str> = name.split('.').collect();
            return match payload.lookup(&path) {
                Some(hookvisor_core::when::Value::Json(json)) => Ok(json),
                Some(hookvisor_core::when::Value::Text(text)) if name == "iteration" => {
                    Ok(text.parse::<u64>().map_or(Json::String(text), Json::from))
                }
                Some(hookvisor_core::when::Value::Text(text)) => Ok(Json::String(text)),
                None => Err(unknown(name)),
            };
        }
        if names.is_empty() {
            return Ok(Json::String(text.to_owned()));
        }
        let lookup = |name: &str| {
            payload.template_value(name).map(|value| match value {
                Value::List(items) => Value::Scalar(items.join(OsStr::new(" "))),
                scalar => scalar,
            })
        };
        let mut out =
            template::expand_argv(&[text.to_owned()], lookup).map_err(|e| refusal("inputs", &e))?;
        Ok(Json::String(
            out.pop().unwrap_or_default().to_string_lossy().into_owned(),
        ))
    }
    inputs
        .iter()
        .map(|(k, v)| Ok((k.clone(), value(v, payload, 0)?)))
        .collect()
}

/// The refusal for an unknown name (docs/EVENTS.md §5 rule 20: never an empty value).
fn unknown(name: &str) -> String {
    format!(
        "spawn: inputs: ${{{name}}} is no template variable of this event; fix the name or pass \
         it with --data (hookvisor check warns about unknown names)"
    )
}

/// The refusal for a template that does not expand.
fn refusal(field: &str, err: &TemplateError) -> String {
    match err {
        TemplateError::Unknown { name, .. } if field == "inputs" => unknown(name),
        TemplateError::Unknown { name, .. } => format!(
            "spawn: {field}: ${{{name}}} is no template variable of this event; fix the name \
             or pass it with --data"
        ),
        other => format!("spawn: {field}: {other}"),
    }
}

/// Rule 4: every variable of ours the child must not see.
fn removed_variables() -> Vec<OsString> {
    let secrets = hookvisor_core::secrets::names();
    std::env::vars_os()
        .map(|(name, _)| name)
        .filter(|name| {
            let text = name.to_string_lossy();
            text.starts_with("HOOKVISOR_")
                || text.starts_with("DISCOBOT_")
                || text == "SESSION_ID"
                || secrets.iter().any(|s| s == &*text)
        })
        .collect()
}

/// Rule 2: makes `<state>/children/` (0700, ours, no symlink) and the first free child dir in
/// it, 0700.
fn child_dir(ctx: &Context, event: &str, iteration: &str, hook_id: &str) -> io::Result<PathBuf> {
    let state = ctx.state();
    let root = state.root().to_owned();
    // The state dir itself is hookvisor's to make, as every run does.
    fs::create_dir_all(&root).map_err(|err| {
        io::Error::new(
            err.kind(),
            format!("cannot create {}: {err}", root.display()),
        )
    })?;
    let children = state.children_dir();
    match fs::DirBuilder::new().mode(0o700).create(&children) {
        Err(err) if err.kind() != io::ErrorKind::AlreadyExists => {
            return Err(io::Error::new(
                err.kind(),
                format!("cannot create {}: {err}", children.display()),
            ));
        }
        _ => {}
    }
    let meta = fs::symlink_metadata(&children)?;
    if !meta.is_dir() || meta.uid() != nix::unistd::geteuid().as_raw() {
        return Err(io::Error::other(format!(
            "{} is no directory of ours (a symlink or another user's); remove it",
            children.display()
        )));
    }
    let base = format!("{}-{}-{}", plain(event), plain(iteration), plain(hook_id));
    for n in 0..MAX_DIR_TRIES {
        let name = match n {
            0 => base.clone(),
            n => format!("{base}-{n}"),
        };
        let dir = children.join(name);
        match fs::DirBuilder::new().mode(0o700).create(&dir) {
            Ok(()) => {
                // The umask may only take bits away; 0700 is what the rule says, exactly.
                fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o700))?;
                return Ok(dir);
            }
            Err(err) if err.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(err) => {
                return Err(io::Error::new(
                    err.kind(),
                    format!("cannot create {}: {err}", dir.display()),
                ));
            }
        }
    }
    Err(io::Error::other(format!(
        "{MAX_DIR_TRIES} child dirs named {base} exist under {}; remove old ones",
        children.display()
    )))
}

/// A name part of a child dir: what is no letter, digit, `.`, `_` or `-` becomes `_`, and a
/// leading dot too, so no part is `..` or hidden.
pub(super) fn plain(text: &str) -> String {
    let mut out: String = text
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '.' | '_' | '-' => c,
            _ => '_',
        })
        .take(100)
        .collect();
    if out.starts_with('.') || out.is_empty() {
        out.insert(0, '_');
    }
    out
}

/// Rule 7: `output.json`, if present, must be one JSON object; its text, `None` without one.
fn check_output(path: &Path) -> Result<Option<String>, String> {
    let file = match open_nofollow(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(err) => return Err(format!("spawn: cannot read {}: {err}", path.display())),
    };
    let bytes = match hookvisor_core::state::read_capped(file, MAX_OUTPUT_BYTES) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            return Err(format!(
                "spawn: {} is over 16 MiB; write a smaller object (a path to a file for bulk data)",
                path.display()
            ));
        }
        Err(err) => return Err(format!("spawn: cannot read {}: {err}", path.display())),
    };
    match serde_json::from_slice::<Json>(&bytes) {
        // JSON text is UTF-8, so the bytes that parsed are a string as they are.
        Ok(Json::Object(_)) => Ok(Some(String::from_utf8_lossy(&bytes).into_owned())),
        _ => Err(format!(
            "spawn: the child exited 0 but {} is not one JSON object; write an object such as \
             {{\"verdict\": \"ok\"}}, or no file",
            path.display()
        )),
    }
}

/// Opens a regular file without following a symlink in its place.
fn open_nofollow(path: &Path) -> io::Result<fs::File> {
    fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
}

/// Adds `line` to the run's log and tail.
fn note(ctx: &Context, hook: &Hook, outcome: &mut RunOutcome, line: &str) {
    let path = ctx.log_path(&hook.id);
    let appended = fs::OpenOptions::new()
        .append(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)
        .and_then(|mut log| writeln!(log, "{line}"));
    if let Err(err) = appended {
        tracing::warn!("cannot add to {}: {err}", path.display());
    }
    if !outcome.tail.is_empty() && !outcome.tail.ends_with('\n') {
        outcome.tail.push('\n');
    }
    outcome.tail.push_str(line);
    outcome.tail.push('\n');
}

/// A run that failed before the child started: exit 1 with `message` on stderr and in the log.
fn failed(ctx: &Context, hook: &Hook, message: &str) -> Result<Ran, ExecError> {
    let outcome = outcome(
        ctx,
        hook,
        1,
        Vec::new(),
        format!("{message}\n").into_bytes(),
    )?;
    Ok(Ran::Finished(outcome.into()))
}

/// A run that succeeded at once (a detached start), saying `said` on stdout.
fn succeeded(ctx: &Context, hook: &Hook, said: &str) -> Result<RunOutcome, ExecError> {
    outcome(ctx, hook, 0, said.as_bytes().to_vec(), Vec::new())
}

/// An outcome made here, its log written where the hook's log goes.
fn outcome(
    ctx: &Context,
    hook: &Hook,
    exit_code: i32,
    stdout: Vec<u8>,
    stderr: Vec<u8>,
) -> Result<RunOutcome, ExecError> {
    let path = ctx.log_path(&hook.id);
    let mut text = stdout.clone();
    text.extend_from_slice(&stderr);
    hookvisor_core::exec::write_whole_log(&path, &text)
        .map_err(|source| ExecError::Log { path, source })?;
    Ok(RunOutcome {
        exit_code,
        tail: String::from_utf8_lossy(&text).into_owned(),
        captured: Some(Captured {
            stdout,
            stderr,
            stdout_truncated: false,
            stderr_truncated: false,
        }),
        ..RunOutcome::default()
    })
}

/// A detached git worktree of `HEAD`, removed on drop (rule 6).
pub(super) struct Worktree {
    /// The repository it belongs to.
    workspace: PathBuf,
    /// The worktree.
    pub(super) path: PathBuf,
    /// Removal is someone else's (a detached child's, at session.end).
    kept: bool,
}

impl Worktree {
    /// `git worktree add --detach PATH HEAD` in `workspace`, with no git hook run.
    fn add(workspace: &Path, path: &Path) -> Result<Worktree, String> {
        let args: [&OsStr; 7] = [
            OsStr::new("-c"),
            OsStr::new("core.hooksPath=/dev/null"),
            OsStr::new("worktree"),
            OsStr::new("add"),
            OsStr::new("--detach"),
            path.as_os_str(),
            OsStr::new("HEAD"),
        ];
        Git::default().output(workspace, &args).map_err(|err| {
            format!("workspace: worktree needs a git repository with a commit: {err}")
        })?;
        Ok(Worktree {
            workspace: workspace.to_owned(),
            path: path.to_owned(),
            kept: false,
        })
    }

    /// Leaves the worktree in place past this guard; its path, for whoever removes it.
    fn keep(mut self) -> PathBuf {
        self.kept = true;
        self.path.clone()
    }
}

impl Drop for Worktree {
    fn drop(&mut self) {
        if !self.kept {
            remove_worktree(&self.workspace, &self.path);
        }
    }
}

/// Removes a worktree the child may have left dirty, and git's record of it. Only git removes
/// it: git deletes only a directory it records as a worktree of `workspace`, where a recursive
/// delete of the path would follow whatever the path names. A failure leaves it, said in a line.
pub(super) fn remove_worktree(workspace: &Path, path: &Path) {
    let args: [&OsStr; 5] = [
        OsStr::new("worktree"),
        OsStr::new("remove"),
        OsStr::new("--force"),
        OsStr::new("--force"),
        path.as_os_str(),
    ];
    if let Err(err) = Git::default().output(workspace, &args) {
        tracing::warn!(
            "cannot remove the worktree {} ({err}); remove it with `git worktree remove --force {}`",
            path.display(),
            path.display()
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dir_name_parts_are_plain() {
        assert_eq!(plain("turn.end"), "turn.end");
        assert_eq!(plain("../x"), "_.._x");
        assert_eq!(plain(".."), "_..");
        assert_eq!(plain(""), "_");
        assert_eq!(plain("a/b c"), "a_b_c");
    }

    #[test]
    fn inputs_keep_their_types() {
        let payload = Payload::new("task.complete", "s1", "/w", "user")
            .iteration(4)
            .data(
                serde_json::json!({"task_id": "t-1", "n": 7, "obj": {"k": [1, true]}})
                    .as_object()
                    .cloned()
                    .unwrap_or_default(),
            );
        let inputs = serde_json::json!({
            "task": "${task_id}",
            "n": "${n}",
            "obj": "${obj}",
            "it": "${iteration}",
            "text": "task ${task_id} #${n}",
            "nested": {"list": ["${n}", 2]},
            "plain": false,
        });
        let out = expand_inputs(inputs.as_object().unwrap(), &payload).unwrap();
        assert_eq!(
            Json::Object(out),
            serde_json::json!({
                "task": "t-1",
                "n": 7,
                "obj": {"k": [1, true]},
                "it": 4,
                "text": "task t-1 #7",
                "nested": {"list": [7, 2]},
                "plain": false,
            })
        );
        let unknown = serde_json::json!({"x": "${nope}"});
        let err = expand_inputs(unknown.as_object().unwrap(), &payload).unwrap_err();
        assert!(err.contains("${nope}"), "{err}");
    }

    #[test]
    fn output_must_be_an_object() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("output.json");
        assert_eq!(check_output(&path), Ok(None), "no file is fine");
        fs::write(&path, "{ \"a\": 1 }\n").unwrap();
        assert_eq!(check_output(&path), Ok(Some("{ \"a\": 1 }\n".to_owned())));
        for bad in ["[1]", "nope", ""] {
            fs::write(&path, bad).unwrap();
            assert!(check_output(&path).is_err(), "{bad:?}");
        }
    }
}

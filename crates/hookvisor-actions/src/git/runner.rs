//! Rules 7 and 8 of the git actions: each git command of one run, in the workspace, with a
//! clean environment and what is left of the hook's timeout, through exec's runner; and the
//! one log and outcome of them all.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::sync::Arc;
use std::time::Instant;

use hookvisor_core::context::Context;
use hookvisor_core::exec::{
    CancelToken, Capture, Captured, ExecError, Invocation, RunOptions, RunOutcome, run_command,
};
use hookvisor_core::git::Git;
use hookvisor_core::git_action::KEPT_VARIABLES;
use hookvisor_core::hook::Hook;

/// Bytes of each stream of one git command kept in memory: git says what it did in a few
/// lines, and the end of a refusing hook's output is what explains it.
const STEP_CAPTURE: usize = 64 * 1024;

/// Bytes of one git command's output in its own log (which is read back only as its tail).
const STEP_LOG_LIMIT: u64 = 1024 * 1024;

/// Bytes of the run's log, all commands together; the rest is cut with a note.
const LOG_LIMIT: usize = 512 * 1024;

/// Bytes of the log kept as the outcome's tail, as exec keeps.
const TAIL: usize = 64 * 1024;

/// One git command that ran.
pub(super) struct Step {
    /// What exec reports.
    outcome: RunOutcome,
    /// The command line, for messages.
    line: String,
}

impl Step {
    /// It ran to the end and exited 0.
    pub(super) fn ok(&self) -> bool {
        self.outcome.success()
    }

    /// Its exit code (124 on timeout).
    pub(super) fn code(&self) -> i32 {
        self.outcome.exit_code
    }

    /// It was stopped by the timeout or a cancel: nothing more may run.
    pub(super) fn stopped(&self) -> bool {
        self.outcome.timed_out || self.outcome.cancelled
    }

    /// Its stdout, within the capture limit, lossily decoded and trimmed of the last newline.
    pub(super) fn stdout(&self) -> String {
        let out = self
            .outcome
            .captured
            .as_ref()
            .map_or(&[][..], |c| &c.stdout);
        String::from_utf8_lossy(out)
            .trim_end_matches('\n')
            .to_owned()
    }
}

/// The git commands of one run of a git action, and what they said.
pub(super) struct Runner<'a> {
    ctx: &'a Context,
    hook: &'a Hook,
    cancel: &'a CancelToken,
    /// Variables set over the kept environment (rule 7).
    env: Vec<(OsString, OsString)>,
    /// Every inherited variable but the kept ones.
    env_remove: Vec<OsString>,
    started: Instant,
    deadline: Instant,
    /// Each command's own log, read back as its tail and removed with the run.
    scratch: tempfile::TempDir,
    /// The run's log: each command line and its output.
    log: Vec<u8>,
    log_truncated: bool,
    /// What the run says it did: the outcome's stdout.
    said: Vec<u8>,
    output_bytes: u64,
    steps: usize,
}

impl<'a> Runner<'a> {
    /// A runner for one run of `hook` fired in `session`; its deadline is the hook's timeout
    /// from now.
    pub(super) fn new(
        ctx: &'a Context,
        hook: &'a Hook,
        session: &str,
        cancel: &'a CancelToken,
    ) -> Result<Runner<'a>, ExecError> {
        let parent = ctx.state().run_files_dir();
        let scratch = fs::create_dir_all(&parent)
            .and_then(|()| {
                tempfile::Builder::new()
                    .prefix(&format!("{}-git-", hook.id))
                    .tempdir_in(&parent)
            })
            .map_err(|source| ExecError::Log {
                path: parent.clone(),
                source,
            })?;
        let env_remove = std::env::vars_os()
            .map(|(name, _)| name)
            .filter(|name| !KEPT_VARIABLES.iter().any(|kept| name == kept))
            .collect();
        let state_dir = ctx.state_dir.clone().into_os_string();
        let env = [
            ("LC_ALL", OsString::from("C")),
            ("GIT_TERMINAL_PROMPT", "0".into()),
            ("GIT_PAGER", "cat".into()),
            ("PAGER", "cat".into()),
            ("GIT_EDITOR", ":".into()),
            // The installed git hook records its gates with the firing's state and session.
            ("HOOKVISOR_STATE_DIR", state_dir),
            ("DISCOBOT_SESSION_ID", session.into()),
            ("HOOKVISOR_SESSION", session.into()),
        ]
        .into_iter()
        .map(|(name, value)| (OsString::from(name), value))
        .collect();
        let started = Instant::now();
        Ok(Runner {
            ctx,
            hook,
            cancel,
            env,
            env_remove,
            started,
            deadline: started + hook.timeout,
            scratch,
            log: Vec::new(),
            log_truncated: false,
            said: Vec::new(),
            output_bytes: 0,
            steps: 0,
        })
    }

    /// Runs `git ARGS` in the workspace with `stdin`, within what is left of the timeout, and
    /// logs it. The program is [`Git`]'s; the environment is rule 7's, not `Git`'s, since
    /// these commands write (a commit, a push) and their hooks inherit it.
    pub(super) fn git<S: AsRef<OsStr>>(
        &mut self,
        args: &[S],
        stdin: Option<&[u8]>,
    ) -> Result<Step, ExecError> {
        let program = Git::default().program().to_owned();
        self.run(program, "git", args, stdin)
    }

    /// Runs this hookvisor binary with `ARGS` as [`Runner::git`] runs git: what the generated
    /// git hooks run, when they are not installed.
    pub(super) fn hookvisor<S: AsRef<OsStr>>(&mut self, args: &[S]) -> Result<Step, ExecError> {
        // A binary that cannot be found is an outcome (127) like any failed step.
        let program = std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into());
        self.run(program.into_os_string(), "hookvisor", args, None)
    }

    fn run<S: AsRef<OsStr>>(
        &mut self,
        program: OsString,
        name: &str,
        args: &[S],
        stdin: Option<&[u8]>,
    ) -> Result<Step, ExecError> {
        self.steps += 1;
        let args: Vec<OsString> = args.iter().map(|a| a.as_ref().to_owned()).collect();
        let mut line = String::from(name);
        for arg in &args {
            line.push(' ');
            line.push_str(&arg.to_string_lossy());
        }
        let invocation = Invocation {
            program: program.into(),
            found: None,
            args,
            env: self.env.clone(),
            env_remove: self.env_remove.clone(),
            cwd: self.ctx.workspace.clone(),
            log_path: self.scratch.path().join(format!("{}.log", self.steps)),
            // At the deadline exec reports a timeout at once: the steps share one timeout.
            timeout: self.deadline.saturating_duration_since(Instant::now()),
        };
        let options = RunOptions {
            cancel: Some(self.cancel.clone()),
            log_limit: STEP_LOG_LIMIT,
            stdin: stdin.map(Arc::from),
            capture: Capture::Separate {
                limit: STEP_CAPTURE,
            },
            ..RunOptions::default()
        };
        let outcome = run_command(&invocation, &options)?;
        self.output_bytes = self.output_bytes.saturating_add(outcome.output_bytes);
        self.append(format!("$ {line}\n").as_bytes());
        self.append(outcome.tail.as_bytes());
        Ok(Step { outcome, line })
    }

    /// Says what the run did: a line of its stdout, also logged.
    pub(super) fn say(&mut self, text: &str) {
        let line = format!("{text}\n");
        self.said.extend_from_slice(line.as_bytes());
        self.append(line.as_bytes());
    }

    /// The run succeeded.
    pub(super) fn done(self) -> Result<RunOutcome, ExecError> {
        self.finish(0, false, false, Vec::new())
    }

    /// The run failed at `step`: its exit code and flags, its stderr (else stdout), and
    /// `message` naming the command and the fix.
    pub(super) fn failed(self, step: &Step, message: &str) -> Result<RunOutcome, ExecError> {
        let captured = step.outcome.captured.clone().unwrap_or_default();
        let mut stderr = match captured.stderr.is_empty() {
            true => captured.stdout,
            false => captured.stderr,
        };
        if !stderr.is_empty() && !stderr.ends_with(b"\n") {
            stderr.push(b'\n');
        }
        let what = if step.outcome.timed_out {
            format!(
                "{} timed out after {}s",
                step.line,
                self.hook.timeout.as_secs()
            )
        } else {
            format!("{} exited {}", step.line, step.outcome.exit_code)
        };
        stderr.extend_from_slice(format!("hookvisor: {what}; {message}\n").as_bytes());
        let code = match step.outcome.exit_code {
            0 => 1,
            code => code,
        };
        self.finish(code, step.outcome.timed_out, step.outcome.cancelled, stderr)
    }

    /// The run failed for a reason of its own after some steps (exit 1, `message` on stderr).
    pub(super) fn refused(self, message: &str) -> Result<RunOutcome, ExecError> {
        self.finish(1, false, false, format!("{message}\n").into_bytes())
    }

    /// The outcome of the whole run; its log written where the hook's log goes.
    fn finish(
        mut self,
        exit_code: i32,
        timed_out: bool,
        cancelled: bool,
        stderr: Vec<u8>,
    ) -> Result<RunOutcome, ExecError> {
        if exit_code != 0 {
            let last = stderr
                .rsplit(|b| *b == b'\n')
                .nth(1)
                .unwrap_or_default()
                .to_vec();
            self.append(&last);
            self.append(b"\n");
        }
        let path = self.ctx.log_path(&self.hook.id);
        hookvisor_core::exec::write_whole_log(&path, &self.log)
            .map_err(|source| ExecError::Log { path, source })?;
        let start = self.log.len().saturating_sub(TAIL);
        let tail = String::from_utf8_lossy(self.log.get(start..).unwrap_or_default()).into_owned();
        Ok(RunOutcome {
            exit_code,
            timed_out,
            cancelled,
            duration: self.started.elapsed(),
            tail,
            output_bytes: self.output_bytes,
            log_truncated: self.log_truncated,
            captured: Some(Captured {
                stdout: self.said,
                stderr,
                stdout_truncated: false,
                stderr_truncated: false,
            }),
        })
    }

    /// Adds to the log within [`LOG_LIMIT`].
    fn append(&mut self, bytes: &[u8]) {
        let room = LOG_LIMIT.saturating_sub(self.log.len());
        if bytes.len() > room {
            self.log_truncated = true;
        }
        self.log
            .extend_from_slice(bytes.get(..room.min(bytes.len())).unwrap_or_default());
    }
}

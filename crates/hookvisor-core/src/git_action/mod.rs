//! The built-in git actions (docs/EVENTS.md §1.2, §4.1 rule 4, §5 rule 24): `action: git-commit`
//! commits the workspace, `action: git-push` pushes one branch, with no script in between.
//!
//! The rules, written once here:
//!
//! 1. **Declarative only.** Both actions are written in a non-executable `.yml` hook; an
//!    executable script runs itself, and `run:`/`argv:` belong to `action: command`.
//! 2. **git-commit fields.** `message` (required) is a template: each `${name}` is replaced by
//!    its value as text (a list joined with single spaces), and the result goes to
//!    `git commit --cleanup=verbatim -F -` on stdin: never an argument, never a shell, so
//!    quotes, `$(…)`, backticks and newlines are committed exactly as written. `add` is `all`
//!    (`git add -A`, the default: agents rarely stage), `tracked` (`git add -u`) or `staged`
//!    (nothing is added). `no_verify: true` adds `--no-verify`.
//! 3. **Gates run once.** The `commit.before` gates run through the git hook hookvisor
//!    installed, inside `git commit`; the action never fires `commit.before` itself, so no gate
//!    runs twice, and `no_verify` skips them as it skips any git hook. A gate's refusal is a
//!    failed run whose output is git's, judged like any failure (docs/EVENTS.md §1.5). When the
//!    workspace has gates but the git hook is not hookvisor's, nothing is committed: the gates
//!    would be passed silently (`pre-commit install`, `eval` and `serve` install it).
//! 4. **Nothing to commit is success**: when the index matches `HEAD` after the `add` step,
//!    no commit is made and the run says so.
//! 5. **git-push fields.** `remote` (default `origin`) is the name of a remote the repository
//!    has (`git remote`), never a URL or path; `branch` (default the current branch) is a local branch, pushed as
//!    `refs/heads/B:refs/heads/B`. The push never forces: no `--force`, no `+` refspec, so a
//!    push that is no fast-forward is refused by git and reported as a failure. A branch without
//!    an upstream gets one (`-u`).
//! 6. **Refs are checked** (§4.1 rule 4): a value that is empty, starts with `-` or `+`, holds
//!    `@{`, or fails `git check-ref-format --branch` (a remote: `git check-ref-format
//!    refs/remotes/NAME/x`, git's own test) is refused: a literal when the hook loads (a
//!    problem `check` shows as `file:line: reason`), a templated one when it runs (a failed run
//!    that is never retried).
//! 7. **A clean git.** Git runs as the firing user, in the workspace, through the same runner
//!    as every hook (its own process group, the hook's `timeout` for all steps together, the
//!    group killed at the deadline or on cancel, output captured within bounds). Its environment
//!    keeps only [`KEPT_VARIABLES`] of ours, so a `GIT_DIR`, `GIT_INDEX_FILE` or
//!    `GIT_CONFIG_*` inherited from a hook context cannot point it at another repository or
//!    turn the gates off; it adds `LC_ALL=C` (git's messages are read), no terminal prompt, no
//!    pager or editor, and the state dir and session, so the installed git hook records its
//!    gates where the firing does. As root it refuses, before any step, a repository another
//!    account can change ([`crate::git::may_run_in`]).
//! 8. **One log.** The run's log holds each git command and its output; its stdout says what
//!    was done (`committed <sha>`, `nothing to commit`, `pushed …`), and a failure ends with a
//!    line naming the git command that failed.
//!
//! 9. **commit.after once.** A commit made fires `commit.after` once: from the post-commit git
//!    hook when hookvisor's is installed (git runs it inside `git commit`), else the action
//!    runs the command that hook runs (`hookvisor post-commit run`) as its last step. A failed
//!    `commit.after` hook never fails the action: the commit is made.
//!
//! This file holds the fields and their reading (rules 1, 2, 5); `refs` checks refs (rule 6),
//! `runner` runs the git steps (rules 7, 8), and `actions` is the order of each action's steps
//! (rules 3 to 5).

#![forbid(unsafe_code)]

pub mod refs;

use serde_json::{Value as Json, json};

pub use self::refs::RefError;
use self::refs::{RefKind, check_literal};

/// The variables of hookvisor's environment git keeps (rule 7): where to find programs and the
/// user's own configuration, a temp dir and time zone, an SSH agent, and the author and
/// committer identity.
pub const KEPT_VARIABLES: [&str; 13] = [
    "PATH",
    "HOME",
    "USER",
    "LOGNAME",
    "SHELL",
    "TMPDIR",
    "TZ",
    "XDG_CONFIG_HOME",
    "SSH_AUTH_SOCK",
    "GIT_AUTHOR_NAME",
    "GIT_AUTHOR_EMAIL",
    "GIT_COMMITTER_NAME",
    "GIT_COMMITTER_EMAIL",
];

/// The front matter fields of the git actions. They are known to `check` (no unknown-field
/// warning) but, unlike the §1.3 fields, do not make a script an event hook: only a
/// declarative `.yml` may carry a git action (rule 1), so a phase-1 script that happens to
/// have a `message:` keeps running in the phase-1 runners as it did.
pub(crate) const GIT_FIELDS: [&str; 5] = ["message", "add", "no_verify", "remote", "branch"];

/// What `add:` stages before a commit (rule 2).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AddMode {
    /// `git add -A`: new, changed and deleted files. The default.
    All,
    /// `git add -u`: changes to files git already tracks.
    Tracked,
    /// Nothing: the commit holds what is staged.
    Staged,
}

impl AddMode {
    /// The word of `add:`.
    pub fn as_str(self) -> &'static str {
        match self {
            AddMode::All => "all",
            AddMode::Tracked => "tracked",
            AddMode::Staged => "staged",
        }
    }
}

/// `action: git-commit` and its fields (rule 2).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitCommit {
    /// `message:`, a template expanded as text when the hook runs.
    pub message: String,
    /// `add:`; default [`AddMode::All`].
    pub add: AddMode,
    /// `no_verify:`; default false.
    pub no_verify: bool,
}

/// `action: git-push` and its fields (rule 5).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitPush {
    /// `remote:`, a template; default `origin`.
    pub remote: String,
    /// `branch:`, a template; `None` pushes the current branch.
    pub branch: Option<String>,
}

/// Why the fields of a git action do not load; each names the field and the fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GitFieldError {
    /// The action is in an executable script (rule 1).
    #[error(
        "action '{action}' is for a declarative hook: put it in a non-executable .yml file of \
         front matter only (chmod -x), or drop 'action:' to run this script"
    )]
    NotDeclarative {
        /// `git-commit` or `git-push`.
        action: &'static str,
    },
    /// A field of another action is given (`run`, `argv`, or the other git action's).
    #[error("'{key}' is no field of action '{action}'; drop it")]
    ForeignField {
        /// The field.
        key: &'static str,
        /// `git-commit` or `git-push`.
        action: &'static str,
    },
    /// `git-commit` without a `message`.
    #[error("action 'git-commit' needs a message, as in 'message: \"task ${{task_id}} done\"'")]
    MissingMessage,
    /// `add:` is not one of its words.
    #[error("add: '{value}' is not all, tracked or staged")]
    InvalidAdd {
        /// The value.
        value: String,
    },
    /// `no_verify:` is not a boolean.
    #[error("no_verify: '{value}' is not true or false")]
    InvalidNoVerify {
        /// The value.
        value: String,
    },
    /// A literal `remote` or `branch` is refused (rule 6).
    #[error("{0}")]
    Ref(#[from] RefError),
}

impl GitFieldError {
    /// The field the error is about, for its line; `None` for the whole entry.
    pub fn key(&self) -> Option<&'static str> {
        match self {
            GitFieldError::NotDeclarative { .. } => Some("action"),
            GitFieldError::ForeignField { key, .. } => Some(key),
            GitFieldError::MissingMessage => None,
            GitFieldError::InvalidAdd { .. } => Some("add"),
            GitFieldError::InvalidNoVerify { .. } => Some("no_verify"),
            GitFieldError::Ref(error) => Some(error.field()),
        }
    }
}

impl GitCommit {
    /// Reads the fields of `action: git-commit`; `field` gives a field's value as written.
    pub(crate) fn from_fields<'a>(
        field: impl Fn(&str) -> Option<&'a str>,
        declarative: bool,
    ) -> Result<GitCommit, GitFieldError> {
        const ACTION: &str = "git-commit";
        check_shape(&field, declarative, ACTION, &["remote", "branch"])?;
        let message = field("message")
            .filter(|m| !m.trim_matches([' ', '\t', '\n']).is_empty())
            .ok_or(GitFieldError::MissingMessage)?;
        let add = match field("add") {
            None | Some("all") => AddMode::All,
            Some("tracked") => AddMode::Tracked,
            Some("staged") => AddMode::Staged,
            Some(other) => {
                return Err(GitFieldError::InvalidAdd {
                    value: other.to_owned(),
                });
            }
        };
        let no_verify = match field("no_verify") {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => {
                return Err(GitFieldError::InvalidNoVerify {
                    value: other.to_owned(),
                });
            }
        };
        Ok(GitCommit {
            message: message.to_owned(),
            add,
            no_verify,
        })
    }

    /// The fields as `list` shows them, in front matter spelling.
    pub fn fields(&self) -> Vec<(&'static str, Json)> {
        vec![
            ("message", json!(self.message)),
            ("add", json!(self.add.as_str())),
            ("no_verify", json!(self.no_verify)),
        ]
    }

    /// The template names the message uses, for `check`'s warning about unknown ones.
    pub fn references(&self) -> Vec<String> {
        crate::template::references(&self.message)
    }
}

impl GitPush {
    /// Reads the fields of `action: git-push`; literal refs are checked now (rule 6).
    pub(crate) fn from_fields<'a>(
        field: impl Fn(&str) -> Option<&'a str>,
        declarative: bool,
    ) -> Result<GitPush, GitFieldError> {
        const ACTION: &str = "git-push";
        check_shape(
            &field,
            declarative,
            ACTION,
            &["message", "add", "no_verify"],
        )?;
        let remote = field("remote").unwrap_or("origin");
        check_literal(RefKind::Remote, remote)?;
        let branch = field("branch");
        if let Some(branch) = branch {
            check_literal(RefKind::Branch, branch)?;
        }
        Ok(GitPush {
            remote: remote.to_owned(),
            branch: branch.map(str::to_owned),
        })
    }

    /// The fields as `list` shows them, in front matter spelling; a missing branch is `null`
    /// (the current one).
    pub fn fields(&self) -> Vec<(&'static str, Json)> {
        vec![
            ("remote", json!(self.remote)),
            ("branch", json!(self.branch)),
        ]
    }

    /// The template names the remote and branch use, for `check`'s warning.
    pub fn references(&self) -> Vec<String> {
        let mut names = crate::template::references(&self.remote);
        if let Some(branch) = &self.branch {
            names.extend(crate::template::references(branch));
        }
        names
    }
}

/// Rule 1, and no field of another action.
fn check_shape<'a>(
    field: &impl Fn(&str) -> Option<&'a str>,
    declarative: bool,
    action: &'static str,
    others: &[&'static str],
) -> Result<(), GitFieldError> {
    if !declarative {
        return Err(GitFieldError::NotDeclarative { action });
    }
    let foreign = ["run", "argv"].iter().chain(others).copied();
    match foreign.into_iter().find(|key| field(key).is_some()) {
        Some(key) => Err(GitFieldError::ForeignField { key, action }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn commit(pairs: &[(&str, &str)]) -> Result<GitCommit, GitFieldError> {
        let map: BTreeMap<&str, &str> = pairs.iter().copied().collect();
        GitCommit::from_fields(|k| map.get(k).copied(), true)
    }

    fn push(pairs: &[(&str, &str)]) -> Result<GitPush, GitFieldError> {
        let map: BTreeMap<&str, &str> = pairs.iter().copied().collect();
        GitPush::from_fields(|k| map.get(k).copied(), true)
    }

    #[test]
    fn commit_fields_and_defaults() {
        let c = commit(&[("message", "done ${task_id}\n")]).unwrap();
        assert_eq!(c.add, AddMode::All);
        assert!(!c.no_verify);
        assert_eq!(c.message, "done ${task_id}\n");
        assert_eq!(c.references(), ["task_id"]);
        let c = commit(&[("message", "m"), ("add", "staged"), ("no_verify", "true")]).unwrap();
        assert_eq!((c.add, c.no_verify), (AddMode::Staged, true));
        assert_eq!(
            commit(&[("message", "m"), ("add", "tracked")]).unwrap().add,
            AddMode::Tracked
        );
    }

    #[test]
    fn commit_refusals_name_their_field() {
        // Fields, the field the error names, and a piece of its text.
        type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a str>, &'a str);
        let table: &[Case<'_>] = &[
            (&[], None, "needs a message"),
            (&[("message", " \n")], None, "needs a message"),
            (
                &[("message", "m"), ("add", "everything")],
                Some("add"),
                "all, tracked",
            ),
            (
                &[("message", "m"), ("no_verify", "yes")],
                Some("no_verify"),
                "true or false",
            ),
            (
                &[("message", "m"), ("run", "x")],
                Some("run"),
                "no field of action",
            ),
            (
                &[("message", "m"), ("branch", "x")],
                Some("branch"),
                "git-commit",
            ),
        ];
        for (pairs, key, text) in table {
            let err = commit(pairs).unwrap_err();
            assert_eq!(err.key(), *key, "{pairs:?}");
            assert!(err.to_string().contains(text), "{pairs:?}: {err}");
        }
        let script = GitCommit::from_fields(|_| Some("m"), false).unwrap_err();
        assert_eq!(script.key(), Some("action"));
    }

    #[test]
    fn push_fields_defaults_and_literal_refs() {
        let p = push(&[]).unwrap();
        assert_eq!((p.remote.as_str(), p.branch.as_deref()), ("origin", None));
        let p = push(&[("remote", "up"), ("branch", "feature/x")]).unwrap();
        assert_eq!(p.branch.as_deref(), Some("feature/x"));
        // A templated value is checked when it runs.
        let p = push(&[("branch", "task-${task_id}")]).unwrap();
        assert_eq!(p.references(), ["task_id"]);
        for (key, value) in [
            ("branch", "-f"),
            ("branch", "+main"),
            ("branch", "a..b"),
            ("branch", "main:other"),
            ("branch", "@{-1}"),
            ("remote", "--receive-pack=x"),
            ("remote", "/tmp/repo"),
            ("remote", "https://example.com/r.git"),
        ] {
            let err = push(&[(key, value)]).unwrap_err();
            assert_eq!(err.key(), Some(key), "{value}");
        }
    }
}

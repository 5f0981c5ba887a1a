//! Rule 6 of the git actions: a remote or branch is refused unless git itself accepts it as
//! one, and never when it could be read as an option or a forcing refspec.

use crate::git::Git;

/// The longest ref value checked; git's own refs are far shorter, and a longer one is no name
/// anybody meant.
const MAX_REF_BYTES: usize = 1024;

/// Which field a value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefKind {
    /// `remote:`, the name of a configured remote.
    Remote,
    /// `branch:`, a local branch name.
    Branch,
}

impl RefKind {
    /// The field's name.
    fn field(self) -> &'static str {
        match self {
            RefKind::Remote => "remote",
            RefKind::Branch => "branch",
        }
    }
}

/// Why a remote or branch is refused (rule 6).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {shown} {reason}", shown = shown(.value))]
pub struct RefError {
    /// `remote` or `branch`.
    field: &'static str,
    /// The value, as given or expanded.
    value: String,
    /// What is wrong with it and the fix.
    reason: &'static str,
}

impl RefError {
    /// The field the value was given in.
    pub fn field(&self) -> &'static str {
        self.field
    }
}

/// The value quoted for a message, cut when long.
fn shown(value: &str) -> String {
    let cut: String = value.chars().take(80).collect();
    let more = if cut.len() < value.len() { "…" } else { "" };
    format!("{:?}", cut + more)
}

/// Checks a value as written in the front matter: fully when it names no template variable,
/// else only its start, the rest being known when the hook runs.
pub fn check_literal(kind: RefKind, value: &str) -> Result<(), RefError> {
    if crate::template::references(value).is_empty() {
        check(kind, value)
    } else {
        check_start(kind, value)
    }
}

/// Rule 6 in full: the value may be used as a `kind`.
pub fn check(kind: RefKind, value: &str) -> Result<(), RefError> {
    check_start(kind, value)?;
    let refuse = |reason| {
        Err(RefError {
            field: kind.field(),
            value: value.to_owned(),
            reason,
        })
    };
    if value.is_empty() {
        return refuse("is empty; name a remote or branch, or drop the field for its default");
    }
    if value.len() > MAX_REF_BYTES || value.contains('\0') {
        return refuse("is no ref name (too long, or a NUL byte); name a branch");
    }
    if value.contains("@{") {
        // `--branch` would resolve `@{-1}` to another branch than the one written.
        return refuse("holds '@{', which git reads as a reflog reference; name the branch");
    }
    // git's own test of a remote name (remote.c, `valid_remote_name`); no `--normalize`, which
    // would collapse the slashes of a path.
    let args: Vec<String> = match kind {
        RefKind::Branch => vec!["--branch".to_owned(), value.to_owned()],
        RefKind::Remote => vec![format!("refs/remotes/{value}/x")],
    };
    match git_accepts(&args) {
        Some(true) => Ok(()),
        Some(false) => match kind {
            RefKind::Branch => {
                refuse("is refused by git check-ref-format --branch; name a valid branch")
            }
            RefKind::Remote => refuse(
                "is no remote name (git check-ref-format); name a configured remote such as \
                 origin, not a URL or path (add one with git remote add)",
            ),
        },
        None => refuse("cannot be checked: git check-ref-format did not run; install git"),
    }
}

/// What can be refused before the value is whole: a leading `-` (an option to git) or `+` (a
/// forced refspec).
fn check_start(kind: RefKind, value: &str) -> Result<(), RefError> {
    let reason = match value.chars().next() {
        Some('-') => "starts with '-', which git would read as an option; name a ref",
        Some('+') => "starts with '+', which would force the push; hookvisor never forces",
        _ => return Ok(()),
    };
    Err(RefError {
        field: kind.field(),
        value: value.to_owned(),
        reason,
    })
}

/// Whether `git check-ref-format ARGS` succeeds; `None` when git cannot be run. It runs
/// outside any repository and with no inherited git variables, so only the name is judged.
fn git_accepts(args: &[String]) -> Option<bool> {
    let args: Vec<&str> = std::iter::once("check-ref-format")
        .chain(args.iter().map(String::as_str))
        .collect();
    Git::default().accepts(&args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refs_by_rule_6() {
        let table: &[(RefKind, &str, Option<&str>)] = &[
            (RefKind::Branch, "main", None),
            (RefKind::Branch, "feature/a-b_c.1", None),
            (RefKind::Branch, "-d", Some("starts with '-'")),
            (RefKind::Branch, "--force", Some("starts with '-'")),
            (RefKind::Branch, "+main", Some("never forces")),
            (RefKind::Branch, "", Some("is empty")),
            (RefKind::Branch, "a b", Some("check-ref-format")),
            (RefKind::Branch, "a..b", Some("check-ref-format")),
            (RefKind::Branch, "x:y", Some("check-ref-format")),
            (RefKind::Branch, "x.lock", Some("check-ref-format")),
            (RefKind::Branch, "HEAD", Some("check-ref-format")),
            (RefKind::Branch, "@{-1}", Some("reflog")),
            (RefKind::Branch, "a\0b", Some("NUL")),
            (RefKind::Remote, "origin", None),
            (RefKind::Remote, "up-stream", None),
            (RefKind::Remote, "-oops", Some("starts with '-'")),
            (RefKind::Remote, "git@host:r.git", Some("not a URL")),
            (RefKind::Remote, "../elsewhere", Some("not a URL")),
        ];
        for (kind, value, want) in table {
            let got = check(*kind, value);
            match want {
                None => assert_eq!(got, Ok(()), "{value:?}"),
                Some(text) => {
                    let err = got.unwrap_err().to_string();
                    assert!(err.contains(text), "{value:?}: {err}");
                    assert!(err.starts_with(kind.field()), "{err}");
                }
            }
        }
        let long = "a".repeat(MAX_REF_BYTES + 1);
        assert!(
            check(RefKind::Branch, &long)
                .unwrap_err()
                .to_string()
                .contains("…")
        );
    }

    #[test]
    fn a_templated_literal_is_checked_only_at_its_start() {
        assert_eq!(check_literal(RefKind::Branch, "task/${task_id}"), Ok(()));
        assert_eq!(check_literal(RefKind::Branch, "${branch}"), Ok(()));
        assert!(check_literal(RefKind::Branch, "-${x}").is_err());
        assert!(check_literal(RefKind::Branch, "a..b").is_err());
    }
}

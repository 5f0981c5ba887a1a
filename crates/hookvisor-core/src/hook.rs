//! What a hook is once its file has been read: kind, identity, and the fields of its front matter
//! with their defaults applied.

use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Serialize, Serializer};

use crate::pattern::Pattern;

/// The moment of the agent's life a hook belongs to.
///
/// The enum is `non_exhaustive` because more lifecycle points will come (turn start, session end,
/// tool calls); code that matches on it must keep a fallback arm.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum HookKind {
    /// Runs once when the container starts (`type: session`).
    Session,
    /// Runs at the end of an LLM turn when a file matching its pattern changed (`type: file`).
    File,
    /// Runs inside `git commit` through the generated git hook (`type: pre-commit`).
    PreCommit,
}

impl HookKind {
    /// Every kind, in the order the documentation lists them.
    pub const ALL: [HookKind; 3] = [HookKind::Session, HookKind::File, HookKind::PreCommit];

    /// The spelling used in front matter, `status.json` and `DISCOBOT_HOOK_TYPE`.
    pub fn as_str(self) -> &'static str {
        match self {
            HookKind::Session => "session",
            HookKind::File => "file",
            HookKind::PreCommit => "pre-commit",
        }
    }

    /// The timeout a hook of this kind gets when its front matter names none.
    pub fn default_timeout(self) -> Duration {
        match self {
            HookKind::Session => Duration::from_secs(300),
            HookKind::File => Duration::from_secs(900),
            HookKind::PreCommit => Duration::from_secs(300),
        }
    }
}

impl fmt::Display for HookKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.pad(self.as_str())
    }
}

impl FromStr for HookKind {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "session" => Ok(HookKind::Session),
            "file" => Ok(HookKind::File),
            "pre-commit" => Ok(HookKind::PreCommit),
            other => Err(format!(
                "unknown type '{other}'; use one of session, file, pre-commit"
            )),
        }
    }
}

/// Which account a hook runs as.
///
/// Only `run_as: root` spelled exactly gives root; anything unrecognised is a problem, never root.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RunAs {
    /// The container's root account; only session hooks started by the init can have it.
    Root,
    /// The unprivileged run user. The default.
    #[default]
    User,
}

impl RunAs {
    /// The spelling used in front matter and JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            RunAs::Root => "root",
            RunAs::User => "user",
        }
    }
}

impl FromStr for RunAs {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "root" => Ok(RunAs::Root),
            "user" => Ok(RunAs::User),
            other => Err(format!(
                "invalid run_as '{other}'; use 'root' or 'user' (the hook is not run, never as root)"
            )),
        }
    }
}

/// A hook that passed every check of discovery and can be run.
#[derive(Debug, Clone)]
pub struct Hook {
    /// Stable identifier derived from the file name (see [`crate::hook_id`]).
    pub id: String,
    /// Display name: front matter `name`, else the id.
    pub name: String,
    /// When the hook runs.
    pub kind: HookKind,
    /// Absolute path of the script.
    pub path: PathBuf,
    /// Front matter `description`, if any.
    pub description: Option<String>,
    /// The account it runs as.
    pub run_as: RunAs,
    /// Session hooks only: finish before the agent command starts. Default false.
    pub blocking: bool,
    /// The files it cares about; required for file hooks, optional for pre-commit hooks.
    pub pattern: Option<Pattern>,
    /// Whether a failure re-prompts the model. Default true.
    pub notify_llm: bool,
    /// How long a run may take before its process group is killed.
    pub timeout: Duration,
}

impl Hook {
    /// The file name of the script, for messages.
    pub fn file_name(&self) -> String {
        self.path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default()
    }

    /// True when a workspace-relative path is one this hook cares about (as bytes: see
    /// [`Pattern`]'s rules).
    ///
    /// A hook without a pattern matches every file.
    pub fn matches(&self, relative_path: impl AsRef<Path>) -> bool {
        self.pattern
            .as_ref()
            .is_none_or(|p| p.is_match(relative_path))
    }
}

/// A file in the hooks directory that will not run, and why.
///
/// It serialises with its path lossily converted to UTF-8: the name may be the very problem.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Problem {
    /// The hook file at fault.
    #[serde(serialize_with = "lossy")]
    pub path: PathBuf,
    /// What is wrong and how to fix it, in one line.
    pub reason: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.reason)
    }
}

/// A path as a string, its bytes that are not UTF-8 replaced by U+FFFD: `Path`'s own
/// `Serialize` fails on them, and a failure there has aborted a server.
fn lossy<S: Serializer>(path: &Path, serializer: S) -> Result<S::Ok, S::Error> {
    serializer.serialize_str(&path.to_string_lossy())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_round_trip_through_their_spelling() {
        for kind in HookKind::ALL {
            assert_eq!(kind.as_str().parse::<HookKind>(), Ok(kind));
        }
        assert!("pre_commit".parse::<HookKind>().is_err());
    }

    #[test]
    fn run_as_accepts_only_the_two_spellings() {
        assert_eq!("root".parse::<RunAs>(), Ok(RunAs::Root));
        assert_eq!("user".parse::<RunAs>(), Ok(RunAs::User));
        for bad in ["Root", "ROOT", "admin", "", "root "] {
            assert!(bad.parse::<RunAs>().is_err(), "{bad:?} must be rejected");
        }
    }

    #[test]
    fn a_problem_with_a_name_that_is_not_utf8_serialises_lossily() {
        use std::os::unix::ffi::OsStrExt;
        let problem = Problem {
            path: PathBuf::from(std::ffi::OsStr::from_bytes(b"/hooks/bad\xff.sh")),
            reason: "the file name is not UTF-8; rename the file".into(),
        };
        assert_eq!(
            serde_json::to_value(&problem).unwrap(),
            serde_json::json!({
                "path": "/hooks/bad\u{FFFD}.sh",
                "reason": "the file name is not UTF-8; rename the file",
            })
        );
    }
}

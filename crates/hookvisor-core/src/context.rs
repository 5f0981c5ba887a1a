//! The three things every command works on: the workspace, the session id and the state dir.
//!
//! Resolution order (docs/DESIGN.md, "Files and names"):
//! - workspace: `--workspace`, else `$DISCOBOT_WORKSPACE`, else the current directory;
//! - session id: `--session`, else `$DISCOBOT_SESSION_ID`, else `$SESSION_ID`, else `default`;
//! - state dir: `--state-dir`, else `$HOOKVISOR_STATE_DIR`, else
//!   `<home of the run user>/.discobot/<session>/hooks`.

use std::env;
use std::ffi::OsString;
use std::fmt;
use std::path::{Path, PathBuf};

use crate::state::StateDir;

/// Where hooks are read from and where their runs are recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    /// The workspace root, absolute.
    pub workspace: PathBuf,
    /// The session id hooks see as `DISCOBOT_SESSION_ID`.
    pub session_id: String,
    /// Where `status.json`, markers and logs live.
    pub state_dir: PathBuf,
}

/// Values given on a command line; `None` falls back to the environment, then to defaults.
#[derive(Debug, Clone, Default)]
pub struct ContextOverrides {
    /// `--workspace`.
    pub workspace: Option<PathBuf>,
    /// `--state-dir`.
    pub state_dir: Option<PathBuf>,
    /// `--session`.
    pub session_id: Option<String>,
    /// Home directory of the run user, when it is not the current user's (the init's `--user`).
    pub home: Option<PathBuf>,
}

/// Why a context could not be resolved.
#[derive(Debug)]
pub enum ContextError {
    /// The workspace does not exist or is not a directory.
    Workspace {
        /// The path given.
        path: PathBuf,
        /// What the file system said.
        source: std::io::Error,
    },
    /// No home directory to put the default state dir in.
    NoHome,
    /// The session id would escape the state dir.
    BadSession(String),
    /// Two workspaces of hooks enclose the agent's directory ([`enclosing_workspace`]).
    NestedWorkspaces {
        /// The nearer one.
        inner: PathBuf,
        /// The next one up.
        outer: PathBuf,
    },
}

impl fmt::Display for ContextError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ContextError::Workspace { path, source } => write!(
                f,
                "workspace {}: {source}; pass an existing directory with --workspace",
                path.display()
            ),
            ContextError::NestedWorkspaces { inner, outer } => write!(
                f,
                "two workspaces of hooks enclose the agent's directory, {} and {}; the \
                 nearer may have been made by the agent to hide the other's gates: give the \
                 adapter --workspace (`hookvisor install --workspace DIR`)",
                inner.display(),
                outer.display()
            ),
            ContextError::NoHome => f.write_str(
                "no home directory for the default state dir; set HOME or pass --state-dir",
            ),
            ContextError::BadSession(id) => write!(
                f,
                "session id '{id}' is not a plain name; use letters, digits, '-', '_' or '.'"
            ),
        }
    }
}

impl std::error::Error for ContextError {}

impl Context {
    /// Resolves the context from overrides, then the environment, then defaults.
    pub fn resolve(overrides: ContextOverrides) -> Result<Context, ContextError> {
        Self::resolve_with(overrides, |name| env::var_os(name))
    }

    /// [`Context::resolve`] with an explicit environment, for tests and for the init, which
    /// resolves on behalf of another user.
    pub fn resolve_with(
        overrides: ContextOverrides,
        var: impl Fn(&str) -> Option<OsString>,
    ) -> Result<Context, ContextError> {
        let non_empty = |name: &str| var(name).filter(|v| !v.is_empty());
        let workspace = overrides
            .workspace
            .or_else(|| non_empty("DISCOBOT_WORKSPACE").map(PathBuf::from))
            .unwrap_or_else(|| PathBuf::from("."));
        let workspace = workspace
            .canonicalize()
            .and_then(|p| {
                if p.is_dir() {
                    Ok(p)
                } else {
                    Err(std::io::Error::other("not a directory"))
                }
            })
            .map_err(|source| ContextError::Workspace {
                path: workspace.clone(),
                source,
            })?;
        let session_id = overrides
            .session_id
            .or_else(|| non_empty("DISCOBOT_SESSION_ID").and_then(|v| v.into_string().ok()))
            .or_else(|| non_empty("SESSION_ID").and_then(|v| v.into_string().ok()))
            .unwrap_or_else(|| "default".to_owned());
        if !is_plain_name(&session_id) {
            return Err(ContextError::BadSession(session_id));
        }
        let state_dir = match overrides
            .state_dir
            .or_else(|| non_empty("HOOKVISOR_STATE_DIR").map(PathBuf::from))
        {
            Some(dir) => absolute(&dir),
            None => {
                let home = overrides
                    .home
                    .or_else(|| non_empty("HOME").map(PathBuf::from))
                    .ok_or(ContextError::NoHome)?;
                // Session `hooks` would make `~/.discobot/hooks/hooks`, and so `~` a workspace
                // of hooks around every workspace below it ([`enclosing_workspace`]).
                if session_id == "hooks" {
                    return Err(ContextError::BadSession(session_id));
                }
                home.join(".discobot").join(&session_id).join("hooks")
            }
        };
        Ok(Context {
            workspace,
            session_id,
            state_dir,
        })
    }

    /// `<workspace>/.discobot/hooks`.
    pub fn hooks_dir(&self) -> PathBuf {
        self.workspace.join(".discobot").join("hooks")
    }

    /// The state dir, which names every file in it.
    pub fn state(&self) -> StateDir {
        StateDir::new(&self.state_dir)
    }

    /// `<state>/status.json`.
    pub fn status_path(&self) -> PathBuf {
        self.state().status()
    }

    /// `<state>/output/<hookId>.log`.
    pub fn log_path(&self, hook_id: &str) -> PathBuf {
        self.state().log(hook_id)
    }
}

/// The workspace that holds `dir`: the one directory among `dir` and its parents that holds
/// `.discobot/hooks/` or `.discobot/hookvisor.yml` (a workspace of hooks), or else the nearest
/// that holds `.git` (the repository's top); `dir` itself when none does. `dir` is made
/// absolute and canonical first, so `..` and links are the file system's.
///
/// Two enclosing workspaces of hooks are an error, not a choice of the nearer: the agent
/// moves its `cwd` at will and can make an empty `.discobot/hooks` (or a `.git`) below the
/// real workspace, which would hide every gate. So a planted marker either changes nothing
/// (`.git` below a workspace of hooks) or makes the adapters fail, and a tool gate fails
/// closed. Nested workspaces of hooks need `--workspace`. The adapters ask this only after
/// what the agent cannot change (`--workspace`, the agent's project variable).
pub fn enclosing_workspace(dir: &Path) -> Result<PathBuf, ContextError> {
    let start = absolute(dir);
    let start = start.canonicalize().unwrap_or(start);
    let holds_hooks = |d: &Path| {
        let discobot = d.join(".discobot");
        discobot.join("hooks").is_dir() || discobot.join("hookvisor.yml").is_file()
    };
    let mut with_hooks = start.ancestors().filter(|d| holds_hooks(d));
    if let Some(inner) = with_hooks.next() {
        return match with_hooks.next() {
            Some(outer) => Err(ContextError::NestedWorkspaces {
                inner: inner.to_owned(),
                outer: outer.to_owned(),
            }),
            None => Ok(inner.to_owned()),
        };
    }
    Ok(start
        .ancestors()
        .find(|d| d.join(".git").exists())
        .unwrap_or(&start)
        .to_owned())
}

fn is_plain_name(id: &str) -> bool {
    !id.is_empty()
        && id != "."
        && id != ".."
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

fn absolute(path: &Path) -> PathBuf {
    if path.is_absolute() {
        path.to_owned()
    } else {
        env::current_dir()
            .map(|cwd| cwd.join(path))
            .unwrap_or_else(|_| path.to_owned())
    }
}

/// The context the unit tests of the core run hooks in: `root/ws` with an empty
/// `.discobot/hooks`, the state dir `root/state` (not made), session `s1`.
#[cfg(test)]
pub(crate) fn test_context(root: &Path) -> Context {
    let workspace = root.join("ws");
    std::fs::create_dir_all(workspace.join(".discobot/hooks")).unwrap();
    Context {
        workspace,
        session_id: "s1".into(),
        state_dir: root.join("state"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<OsString> {
        let pairs: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |name| {
            pairs
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| OsString::from(v))
        }
    }

    #[test]
    fn overrides_beat_environment_beats_defaults() {
        let ws = tempfile::tempdir().unwrap();
        let ws_path = ws.path().canonicalize().unwrap();
        let env = env_of(&[
            ("DISCOBOT_WORKSPACE", "/nonexistent"),
            ("DISCOBOT_SESSION_ID", "envsession"),
            ("SESSION_ID", "other"),
            ("HOME", "/home/x"),
        ]);
        let ctx = Context::resolve_with(
            ContextOverrides {
                workspace: Some(ws_path.clone()),
                ..Default::default()
            },
            &env,
        )
        .unwrap();
        assert_eq!(ctx.workspace, ws_path);
        assert_eq!(ctx.session_id, "envsession");
        assert_eq!(
            ctx.state_dir,
            PathBuf::from("/home/x/.discobot/envsession/hooks")
        );

        let ctx = Context::resolve_with(
            ContextOverrides {
                workspace: Some(ws_path.clone()),
                session_id: Some("cli".into()),
                state_dir: Some("/tmp/state".into()),
                home: None,
            },
            &env,
        )
        .unwrap();
        assert_eq!(ctx.session_id, "cli");
        assert_eq!(ctx.state_dir, PathBuf::from("/tmp/state"));
    }

    #[test]
    fn session_id_falls_back_to_session_id_then_default() {
        let ws = tempfile::tempdir().unwrap();
        let over = || ContextOverrides {
            workspace: Some(ws.path().into()),
            ..Default::default()
        };
        let ctx =
            Context::resolve_with(over(), env_of(&[("SESSION_ID", "s2"), ("HOME", "/h")])).unwrap();
        assert_eq!(ctx.session_id, "s2");
        let ctx = Context::resolve_with(over(), env_of(&[("HOME", "/h")])).unwrap();
        assert_eq!(ctx.session_id, "default");
        assert!(Context::resolve_with(over(), env_of(&[])).is_err());
    }

    #[test]
    fn bad_session_and_missing_workspace_are_errors() {
        let ws = tempfile::tempdir().unwrap();
        let err = Context::resolve_with(
            ContextOverrides {
                workspace: Some(ws.path().into()),
                session_id: Some("../escape".into()),
                ..Default::default()
            },
            env_of(&[("HOME", "/h")]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("../escape"));
        // Attack review 2: its default state dir would make `~/.discobot/hooks`.
        let hooks = ContextOverrides {
            workspace: Some(ws.path().into()),
            session_id: Some("hooks".into()),
            ..Default::default()
        };
        assert!(Context::resolve_with(hooks, env_of(&[("HOME", "/h")])).is_err());
        let err = Context::resolve_with(
            ContextOverrides {
                workspace: Some("/definitely/not/here".into()),
                ..Default::default()
            },
            env_of(&[("HOME", "/h")]),
        )
        .unwrap_err();
        assert!(err.to_string().contains("/definitely/not/here"));
    }

    #[test]
    fn the_enclosing_workspace_is_the_one_with_hooks_else_the_repository_top() {
        let root = tempfile::tempdir().unwrap();
        let root = root.path().canonicalize().unwrap();
        let deep = root.join("repo/src/deep");
        std::fs::create_dir_all(&deep).unwrap();
        let found = |dir: &Path| enclosing_workspace(dir).unwrap();
        // Nothing above: the directory itself.
        assert_eq!(found(&deep), deep);
        std::fs::create_dir_all(root.join("repo/.git")).unwrap();
        assert_eq!(found(&deep), root.join("repo"));
        // `..` is the file system's, and a relative start is from the current directory.
        assert_eq!(found(&deep.join("../deep/./")), root.join("repo"));
        // A state dir's `.discobot/<session>` is no workspace; `.discobot/hooks` is.
        std::fs::create_dir_all(root.join("repo/src/.discobot/s1/hooks")).unwrap();
        assert_eq!(found(&deep), root.join("repo"));
        std::fs::create_dir_all(root.join("repo/src/.discobot/hooks")).unwrap();
        assert_eq!(found(&deep), root.join("repo/src"));
        // A `.git` below a workspace of hooks (a submodule, or one the agent made) hides
        // nothing.
        std::fs::write(deep.join(".git"), "gitdir: x\n").unwrap();
        assert_eq!(found(&deep), root.join("repo/src"));
        // A second workspace of hooks below the first (the agent's empty one) is an error.
        std::fs::create_dir_all(deep.join(".discobot/hooks")).unwrap();
        let err = enclosing_workspace(&deep).unwrap_err().to_string();
        assert!(err.contains("--workspace"), "{err}");
        assert!(
            err.contains(&*root.join("repo/src").to_string_lossy()),
            "{err}"
        );
    }
}

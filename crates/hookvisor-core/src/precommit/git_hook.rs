//! The generated git hooks and their place where git looks (rules 1 to 3 and 8 of the
//! `precommit` module docs): write, chain, update and remove them, one installer at a time.
//! `pre-commit` runs the gates; `post-commit` fires `commit.after`, chained the same way.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};

use super::{PreCommitError, git, io_error, strip_newline};
use crate::context::Context;
use crate::discover::Discovery;
use crate::git::MANAGED_MARKER;
use crate::state::{Durability, write_atomic_with_mode};

/// Which git hook: the one before a commit (the gates) or the one after (`commit.after`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GitHookKind {
    /// `pre-commit`: runs the pre-commit and `commit.before` hooks; its failure stops the commit.
    #[default]
    PreCommit,
    /// `post-commit`: fires `commit.after`, a notice; git ignores its status.
    PostCommit,
}

impl GitHookKind {
    /// The name git gives the hook, which is also our subcommand (`hookvisor pre-commit`).
    pub fn name(self) -> &'static str {
        match self {
            GitHookKind::PreCommit => "pre-commit",
            GitHookKind::PostCommit => "post-commit",
        }
    }

    /// Where a foreign hook is kept while ours is installed.
    fn original(self) -> String {
        format!("{}.original", self.name())
    }

    /// Whether the discovery holds hooks this git hook runs.
    pub fn needed(self, discovery: &Discovery) -> bool {
        match self {
            GitHookKind::PreCommit => crate::discover::has_commit_hooks(discovery),
            GitHookKind::PostCommit => crate::discover::has_commit_after_hooks(discovery),
        }
    }
}

/// The generated git hook: which one, what it calls and the defaults it passes (rule 3).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitHook {
    kind: GitHookKind,
    program: PathBuf,
    state_dir: Option<PathBuf>,
    session_id: Option<String>,
}

/// What [`GitHook::install`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Installed {
    /// Ours was written where there was no hook.
    Created(PathBuf),
    /// A foreign hook was kept as `<name>.original` (the second path) and ours written.
    Chained(PathBuf, PathBuf),
    /// An older version of ours was replaced.
    Updated(PathBuf),
    /// Ours was already there, byte for byte.
    Unchanged(PathBuf),
}

impl Installed {
    /// The path of the installed git hook.
    pub fn path(&self) -> &Path {
        match self {
            Installed::Created(p)
            | Installed::Chained(p, _)
            | Installed::Updated(p)
            | Installed::Unchanged(p) => p,
        }
    }
}

/// What [`uninstall_git_hook`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Uninstalled {
    /// Ours was removed; there was no original.
    Removed(PathBuf),
    /// Ours was replaced by the original it had kept.
    Restored(PathBuf),
    /// The hook there is not ours; it was left alone.
    NotOurs(PathBuf),
    /// There was no hook.
    NotInstalled(PathBuf),
}

/// What [`GitHook::ensure`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ensured {
    /// There are hooks for it; the git hook is in place.
    Installed(Installed),
    /// There are none; the git hook was checked and removed if ours.
    Uninstalled(Uninstalled),
    /// The workspace is not a git repository: there is nothing to install.
    NotARepository,
}

impl GitHook {
    /// A pre-commit git hook that calls `program` (an absolute path) with no recorded state dir
    /// or session.
    pub fn new(program: impl Into<PathBuf>) -> GitHook {
        GitHook {
            kind: GitHookKind::PreCommit,
            program: program.into(),
            state_dir: None,
            session_id: None,
        }
    }

    /// The git hook that calls the running binary with the context's state dir and session.
    pub fn for_context(ctx: &Context) -> Result<GitHook, PreCommitError> {
        let program = std::env::current_exe().map_err(PreCommitError::CurrentExe)?;
        Ok(GitHook::new(program)
            .state_dir(&ctx.state_dir)
            .session(&ctx.session_id))
    }

    /// Which git hook this is. Default: pre-commit.
    pub fn kind(mut self, kind: GitHookKind) -> GitHook {
        self.kind = kind;
        self
    }

    /// The state dir used when `HOOKVISOR_STATE_DIR` is unset at commit time. Default: none.
    pub fn state_dir(mut self, dir: impl Into<PathBuf>) -> GitHook {
        self.state_dir = Some(dir.into());
        self
    }

    /// The session used when `DISCOBOT_SESSION_ID` is unset at commit time. Default: none.
    pub fn session(mut self, id: impl Into<String>) -> GitHook {
        self.session_id = Some(id.into());
        self
    }

    /// The text of the script.
    pub fn script(&self) -> Vec<u8> {
        let name = self.kind.name();
        let mut s = Vec::new();
        s.extend_from_slice(b"#!/bin/sh\n");
        s.extend_from_slice(MANAGED_MARKER.as_bytes());
        s.extend_from_slice(
            format!(
                "\n# Written by `hookvisor {name} install`; `hookvisor {name} uninstall` removes \
                 it\n# and puts back {name}.original. The hooks themselves are read from \
                 .discobot/hooks\n# at each commit.\nhookvisor="
            )
            .as_bytes(),
        );
        s.extend_from_slice(&shell_quote(self.program.as_os_str()));
        s.extend_from_slice(format!("\noriginal=\"${{0%/*}}/{name}.original\"\n").as_bytes());
        s.extend_from_slice(match self.kind {
            GitHookKind::PreCommit => br#"if [ -x "$original" ]; then
	"$original" "$@" || exit $?
fi
if [ ! -x "$hookvisor" ]; then
	printf 'hookvisor: %s is gone, so the pre-commit hooks cannot run; reinstall with `hookvisor pre-commit install` (or commit with --no-verify)\n' "$hookvisor" >&2
	exit 1
fi
"#,
            // The commit is made: the original's failure does not keep commit.after from
            // firing, and nothing here may look like a failed commit.
            GitHookKind::PostCommit => br#"if [ -x "$original" ]; then
	"$original" "$@"
fi
if [ ! -x "$hookvisor" ]; then
	printf 'hookvisor: %s is gone, so the commit.after hooks cannot run; reinstall with `hookvisor post-commit install`\n' "$hookvisor" >&2
	exit 0
fi
"#,
        });
        let defaults = [
            (
                "HOOKVISOR_STATE_DIR",
                self.state_dir.as_deref().map(Path::as_os_str),
            ),
            (
                "DISCOBOT_SESSION_ID",
                self.session_id.as_deref().map(OsStr::new),
            ),
        ];
        for (name, value) in defaults {
            if let Some(value) = value {
                let line = format!("if [ -z \"${{{name}-}}\" ]; then {name}=");
                s.extend_from_slice(line.as_bytes());
                s.extend_from_slice(&shell_quote(value));
                s.extend_from_slice(format!("; export {name}; fi\n").as_bytes());
            }
        }
        s.extend_from_slice(format!("exec \"$hookvisor\" {name} run\n").as_bytes());
        s
    }

    /// Installs the script in the git hooks dir of the repository containing `repo_dir`
    /// (rules 1 and 2). Running it again changes nothing.
    pub fn install(&self, repo_dir: &Path) -> Result<Installed, PreCommitError> {
        self.install_in(&git_hooks_dir(repo_dir)?)
    }

    /// [`GitHook::install`] into the git hooks dir `dir`, already asked of git.
    fn install_in(&self, dir: &Path) -> Result<Installed, PreCommitError> {
        let dir = dir.to_owned();
        fs::create_dir_all(&dir).map_err(io_error(&dir, "create"))?;
        let _lock = lock_dir(&dir)?;
        let hook = dir.join(self.kind.name());
        let original = dir.join(self.kind.original());
        let script = self.script();
        match read_hook(&hook)? {
            Some(current) if current == script => Ok(Installed::Unchanged(hook)),
            Some(current) if is_ours(&current) => {
                write_script(&hook, &script)?;
                Ok(Installed::Updated(hook))
            }
            Some(_) => {
                if fs::symlink_metadata(&original).is_ok() {
                    return Err(PreCommitError::OriginalExists { hook, original });
                }
                // A hard link, not a copy: the original keeps its inode, so uninstall can give
                // back its exact bytes and mode by renaming it.
                fs::hard_link(&hook, &original).map_err(io_error(&original, "create"))?;
                write_script(&hook, &script)?;
                Ok(Installed::Chained(hook, original))
            }
            None => {
                write_script(&hook, &script)?;
                Ok(Installed::Created(hook))
            }
        }
    }

    /// Installs when the discovery holds hooks this git hook runs ([`GitHookKind::needed`]:
    /// pre-commit or `commit.before` hooks, or `commit.after` ones), else removes the git hook
    /// if it is ours. A workspace outside git is not an error: there is nothing to install.
    pub fn ensure(
        &self,
        repo_dir: &Path,
        discovery: &Discovery,
    ) -> Result<Ensured, PreCommitError> {
        match git_hooks_dir(repo_dir) {
            Ok(dir) => self.ensure_in(&dir, discovery),
            Err(PreCommitError::NotARepository(_)) => Ok(Ensured::NotARepository),
            Err(e) => Err(e),
        }
    }

    /// [`GitHook::ensure`] in the git hooks dir `dir`, already asked of git.
    fn ensure_in(&self, dir: &Path, discovery: &Discovery) -> Result<Ensured, PreCommitError> {
        if self.kind.needed(discovery) {
            self.install_in(dir).map(Ensured::Installed)
        } else {
            uninstall_in(dir, self.kind).map(Ensured::Uninstalled)
        }
    }
}

/// Makes both git hooks of `ctx.workspace` match its hooks (see [`GitHook::ensure`]): what
/// `eval`, `session`, `serve` and `install` call so that adding the first commit hook is
/// enough. The pre-commit result first; `None`, with nothing touched, for a root process in a
/// workspace another account can change: a link in its `.git`, or its `core.hooksPath`,
/// points anywhere (the user's own `serve` or `fire` installs the hooks).
pub fn ensure_git_hooks(
    ctx: &Context,
    discovery: &Discovery,
) -> Result<Option<[Ensured; 2]>, PreCommitError> {
    if !matches!(crate::user_fs::writable_by_others(&ctx.workspace), Ok(None)) {
        return Ok(None);
    }
    let hook = GitHook::for_context(ctx)?;
    // One `git rev-parse` for both: this runs at every turn end.
    let dir = match git_hooks_dir(&ctx.workspace) {
        Ok(dir) => dir,
        Err(PreCommitError::NotARepository(_)) => {
            return Ok(Some([Ensured::NotARepository, Ensured::NotARepository]));
        }
        Err(e) => return Err(e),
    };
    Ok(Some([
        hook.clone().ensure_in(&dir, discovery)?,
        hook.kind(GitHookKind::PostCommit)
            .ensure_in(&dir, discovery)?,
    ]))
}

/// Removes our git hook `kind` from the repository containing `repo_dir` and puts back the
/// original it kept; a hook that is not ours is left alone (rule 2).
pub fn uninstall_git_hook(
    repo_dir: &Path,
    kind: GitHookKind,
) -> Result<Uninstalled, PreCommitError> {
    uninstall_in(&git_hooks_dir(repo_dir)?, kind)
}

/// [`uninstall_git_hook`] in the git hooks dir `dir`, already asked of git.
fn uninstall_in(dir: &Path, kind: GitHookKind) -> Result<Uninstalled, PreCommitError> {
    let hook = dir.join(kind.name());
    if !dir.is_dir() {
        return Ok(Uninstalled::NotInstalled(hook));
    }
    let _lock = lock_dir(dir)?;
    let original = dir.join(kind.original());
    match read_hook(&hook)? {
        Some(current) if is_ours(&current) => {
            if fs::symlink_metadata(&original).is_ok() {
                fs::rename(&original, &hook).map_err(io_error(&original, "rename"))?;
                Ok(Uninstalled::Restored(hook))
            } else {
                fs::remove_file(&hook).map_err(io_error(&hook, "remove"))?;
                Ok(Uninstalled::Removed(hook))
            }
        }
        Some(_) => Ok(Uninstalled::NotOurs(hook)),
        // Ours was deleted by hand: the original it kept is still the repository's hook.
        None if fs::symlink_metadata(&original).is_ok() => {
            fs::rename(&original, &hook).map_err(io_error(&original, "rename"))?;
            Ok(Uninstalled::Restored(hook))
        }
        None => Ok(Uninstalled::NotInstalled(hook)),
    }
}

/// Where git looks for hooks for the repository containing `repo_dir` (rule 1), absolute.
pub fn git_hooks_dir(repo_dir: &Path) -> Result<PathBuf, PreCommitError> {
    let out = git(repo_dir, &["rev-parse", "--git-path", "hooks"])?;
    let dir = repo_dir.join(OsString::from_vec(strip_newline(out)));
    // git answers relative to `repo_dir` (`../.git/modules/sub/hooks`); say it plainly.
    Ok(dir.canonicalize().unwrap_or(dir))
}

/// The contents of the hook file (through a symlink), or `None` when there is none.
fn read_hook(hook: &Path) -> Result<Option<Vec<u8>>, PreCommitError> {
    match fs::read(hook) {
        Ok(bytes) => Ok(Some(bytes)),
        // A dangling symlink is still somebody's hook: keep it like any foreign one.
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Ok(fs::symlink_metadata(hook).is_ok().then(Vec::new))
        }
        Err(e) => Err(io_error(hook, "read")(e)),
    }
}

fn is_ours(contents: &[u8]) -> bool {
    contents
        .split(|&b| b == b'\n')
        .take(3)
        .any(|line| line == MANAGED_MARKER.as_bytes())
}

/// Serialises installs and uninstalls of one hooks dir (the server, `eval` and `session` may
/// ensure at the same time); without it two installers could both move the foreign hook aside
/// and lose it. The lock is on the directory itself, so nothing is left behind.
fn lock_dir(dir: &Path) -> Result<Flock<File>, PreCommitError> {
    let handle = File::open(dir).map_err(io_error(dir, "open"))?;
    Flock::lock(handle, FlockArg::LockExclusive).map_err(|(_, errno)| PreCommitError::Io {
        path: dir.to_owned(),
        action: "lock",
        source: errno.into(),
    })
}

/// Writes the script next to `hook` and renames it over: git never sees half a script, nor a
/// script it cannot execute, and a commit running the old one keeps its file. No fsync: a hook
/// lost in a crash is written again by the next `ensure`.
fn write_script(hook: &Path, script: &[u8]) -> Result<(), PreCommitError> {
    write_atomic_with_mode(hook, script, Durability::Replaceable, 0o755)
        .map_err(io_error(hook, "write"))
}

/// `value` in single quotes for `sh`: safe for spaces, `$`, backticks, quotes and newlines.
fn shell_quote(value: &OsStr) -> Vec<u8> {
    let mut quoted = vec![b'\''];
    for &b in value.as_bytes() {
        if b == b'\'' {
            quoted.extend_from_slice(b"'\\''");
        } else {
            quoted.push(b);
        }
    }
    quoted.push(b'\'');
    quoted
}

#[cfg(test)]
mod tests {
    use std::process::Command;

    use super::*;
    use crate::discover::discover;

    /// A fresh git repository in a temp dir.
    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let status = Command::new("git")
            .args(["init", "-q"])
            .current_dir(dir.path())
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .status()
            .expect("git must be installed to test pre-commit hooks");
        assert!(status.success());
        dir
    }

    fn write_pre_commit_hook(repo: &Path) -> PathBuf {
        let dir = repo.join(".discobot/hooks");
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("lint.sh");
        fs::write(&path, "#!/bin/sh\n#---\n# type: pre-commit\n#---\nexit 0\n").unwrap();
        fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        path
    }

    #[test]
    fn ensure_follows_the_hook_set() {
        let repo = repo();
        let root = repo.path().canonicalize().unwrap();
        let hooks = root.join(".discobot/hooks");
        let git_hook = root.join(".git/hooks/pre-commit");
        let ensure = |hv: &str| GitHook::new(hv).ensure(&root, &discover(&hooks)).unwrap();

        assert_eq!(
            ensure("/bin/hv"),
            Ensured::Uninstalled(Uninstalled::NotInstalled(git_hook.clone()))
        );
        let lint = write_pre_commit_hook(&root);
        assert_eq!(
            ensure("/bin/hv"),
            Ensured::Installed(Installed::Created(git_hook.clone()))
        );
        assert_eq!(
            ensure("/bin/hv"),
            Ensured::Installed(Installed::Unchanged(git_hook.clone()))
        );
        assert_eq!(
            ensure("/other/hv"),
            Ensured::Installed(Installed::Updated(git_hook.clone()))
        );
        fs::remove_file(&lint).unwrap();
        assert_eq!(
            ensure("/bin/hv"),
            Ensured::Uninstalled(Uninstalled::Removed(git_hook.clone()))
        );
        assert!(!git_hook.exists());

        // With no pre-commit hooks left, a foreign git hook is not ours to remove.
        fs::write(&git_hook, "#!/bin/sh\nexit 0\n").unwrap();
        assert_eq!(
            ensure("/bin/hv"),
            Ensured::Uninstalled(Uninstalled::NotOurs(git_hook.clone()))
        );
        assert_eq!(fs::read(&git_hook).unwrap(), b"#!/bin/sh\nexit 0\n");

        let plain = tempfile::tempdir().unwrap();
        let discovery = discover(&plain.path().join("none"));
        assert_eq!(
            GitHook::new("/bin/hv")
                .ensure(plain.path(), &discovery)
                .unwrap(),
            Ensured::NotARepository
        );
    }

    #[test]
    fn concurrent_installs_keep_the_foreign_hook() {
        let repo = repo();
        let root = repo.path().canonicalize().unwrap();
        let git_hook = root.join(".git/hooks/pre-commit");
        let foreign = b"#!/bin/sh\necho foreign\n";
        fs::write(&git_hook, foreign).unwrap();
        let barrier = std::sync::Barrier::new(8);
        std::thread::scope(|scope| {
            for _ in 0..8 {
                scope.spawn(|| {
                    barrier.wait();
                    GitHook::new("/bin/hv").install(&root).unwrap()
                });
            }
        });
        assert!(is_ours(&fs::read(&git_hook).unwrap()));
        assert_eq!(
            fs::read(root.join(".git/hooks/pre-commit.original")).unwrap(),
            foreign
        );
        assert_eq!(
            uninstall_git_hook(&root, GitHookKind::PreCommit).unwrap(),
            Uninstalled::Restored(git_hook.clone())
        );
        assert_eq!(fs::read(&git_hook).unwrap(), foreign);
    }

    #[test]
    fn a_foreign_hook_beside_a_kept_original_is_a_conflict() {
        let repo = repo();
        let root = repo.path().canonicalize().unwrap();
        let dir = root.join(".git/hooks");
        fs::write(dir.join("pre-commit"), "#!/bin/sh\necho new\n").unwrap();
        fs::write(dir.join("pre-commit.original"), "#!/bin/sh\necho old\n").unwrap();
        let err = GitHook::new("/bin/hv").install(&root).unwrap_err();
        assert!(
            matches!(err, PreCommitError::OriginalExists { .. }),
            "{err}"
        );
        assert!(err.to_string().contains("pre-commit.original"), "{err}");
        assert_eq!(
            fs::read(dir.join("pre-commit")).unwrap(),
            b"#!/bin/sh\necho new\n"
        );
    }

    /// The post-commit hook is a notice: a failing original does not keep ours from running,
    /// and a binary that is gone is said and exits 0 (git ignores it anyway).
    #[test]
    fn the_post_commit_script_never_fails_the_commit() {
        let dir = tempfile::tempdir().unwrap();
        let hook = dir.path().join("post-commit");
        let script = GitHook::new(dir.path().join("gone"))
            .kind(GitHookKind::PostCommit)
            .script();
        fs::write(&hook, &script).unwrap();
        let original = dir.path().join("post-commit.original");
        fs::write(&original, "#!/bin/sh\necho original ran\nexit 3\n").unwrap();
        for path in [&hook, &original] {
            fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        }
        let out = Command::new(&hook).output().unwrap();
        assert!(out.status.success(), "{out:?}");
        assert_eq!(out.stdout, b"original ran\n");
        let said = String::from_utf8_lossy(&out.stderr);
        assert!(said.contains("hookvisor post-commit install"), "{said}");
        assert!(is_ours(&script));
        assert!(
            String::from_utf8_lossy(&script).ends_with("exec \"$hookvisor\" post-commit run\n")
        );
    }

    #[test]
    fn shell_quote_round_trips_through_sh() {
        for value in [
            "plain",
            "with space",
            "it's",
            "$HOME and ${x}",
            "`id` $(id)",
            "back\\slash \"dq\"",
            "new\nline",
            "'",
            "",
            "-n",
        ] {
            let mut script = b"printf '%s' ".to_vec();
            script.extend_from_slice(&shell_quote(OsStr::new(value)));
            let out = Command::new("sh")
                .arg("-c")
                .arg(OsStr::from_bytes(&script))
                .output()
                .unwrap();
            assert!(out.status.success(), "{value:?}");
            assert_eq!(String::from_utf8(out.stdout).unwrap(), value);
        }
    }

    #[test]
    fn marker_is_recognised_only_near_the_top() {
        for (text, ours) in [
            (GitHook::new("/bin/hookvisor").script(), true),
            (b"#!/bin/sh\n# discobot:managed\n".to_vec(), true),
            (b"#!/bin/sh\nexec lint\n".to_vec(), false),
            (b"#!/bin/sh\n\n\n\n# discobot:managed\n".to_vec(), false),
            (b"#!/bin/sh\necho '# discobot:managed'\n".to_vec(), false),
        ] {
            assert_eq!(is_ours(&text), ours, "{}", String::from_utf8_lossy(&text));
        }
    }
}

//! Running git: one program, one environment, one reading of its failures.
//!
//! Every git command of hookvisor goes through a [`Git`]:
//!
//! 1. `LC_ALL=C` and no `LANGUAGE`: git's messages are read ("not a git repository"), so they are
//!    never a translation, whatever the user's locale.
//! 2. `GIT_OPTIONAL_LOCKS=0`: hookvisor only reads. A `git status` then never takes the index
//!    lock, so a concurrent `git commit` never fails on `index.lock`; the commands run inside a
//!    commit (`diff-index --cached`, `rev-parse`, `hash-object` without `-w`) take no optional
//!    lock, so for them it changes nothing.
//! 3. `GIT_PAGER=cat` and stdin from `/dev/null`: git never waits for a terminal.
//!    `-c core.fsmonitor=false`: hookvisor's scans have serve's own watcher or none, so the
//!    repository's fsmonitor hook (ours, `install git-fsmonitor`) would only start a process
//!    that answers "everything".
//! 4. As root, never in a repository another account can change ([`exposed`]): git runs what a
//!    repository's config names (`core.fsmonitor`, `core.hooksPath`, filter drivers,
//!    `include.path`), and its `safe.directory` check looks only at owners, so a root-owned
//!    workspace the agent can write (Kubernetes' `fsGroup`, a mode 0777 volume) would run the
//!    agent's programs as root. [`Git::spawn`] refuses with [`GitError::Exposed`] instead.
//!
//! The rest of the environment is inherited: `GIT_DIR`, `GIT_INDEX_FILE` and the like are how git
//! tells its hooks where they run.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};

/// The line that marks a git hook as hookvisor's (the generated pre-commit hook): only a hook carrying it is overwritten or removed.
pub const MANAGED_MARKER: &str = "# discobot:managed";

/// The variables that make git trust the repository at `dir` (`safe.directory`, in git's command
/// scope, which it honours like the global config), added after the `GIT_CONFIG_COUNT` entries
/// `env` already holds. For the run user's processes only: a workspace another uid owns (a
/// container's volume) is the user's to work in, while root's git keeps refusing it, which is
/// what keeps the agent's `.git/config` (`core.fsmonitor`, `core.hooksPath`) from running as root
/// (git checks only the owner: a root-owned workspace the agent can write is not covered).
pub fn trust_env(dir: &Path, env: &[(OsString, OsString)]) -> Vec<(OsString, OsString)> {
    let count = env
        .iter()
        .rev()
        .find(|(name, _)| name == "GIT_CONFIG_COUNT")
        .and_then(|(_, value)| value.to_str()?.parse::<u32>().ok())
        .unwrap_or(0);
    // A count at its limit takes no more: the user's git refuses as before, nothing wraps.
    let Some(next) = count.checked_add(1) else {
        return Vec::new();
    };
    vec![
        (
            format!("GIT_CONFIG_KEY_{count}").into(),
            "safe.directory".into(),
        ),
        (
            format!("GIT_CONFIG_VALUE_{count}").into(),
            dir.as_os_str().to_owned(),
        ),
        ("GIT_CONFIG_COUNT".into(), next.to_string().into()),
    ]
}

/// The git program and the environment it runs in (module docs). Cheap to clone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Git {
    program: OsString,
}

impl Default for Git {
    /// `git` from `PATH`.
    fn default() -> Self {
        Git::new("git")
    }
}

impl Git {
    /// The git at `program`: a path, or a name looked up in `PATH`.
    pub fn new(program: impl Into<OsString>) -> Git {
        Git {
            program: program.into(),
        }
    }

    /// The program, as given.
    pub fn program(&self) -> &OsStr {
        &self.program
    }

    /// Runs `git args` in `dir` and returns its stdout.
    pub fn output<S: AsRef<OsStr>>(&self, dir: &Path, args: &[S]) -> Result<Vec<u8>, GitError> {
        self.spawn(dir, args)?.wait()
    }

    /// Starts `git args` in `dir`; [`RunningGit::wait`] returns what [`Git::output`] would.
    /// As root, refuses a repository another account can change (module rule 4).
    pub fn spawn<S: AsRef<OsStr>>(&self, dir: &Path, args: &[S]) -> Result<RunningGit, GitError> {
        may_run_in(dir)?;
        let child = self
            .command(dir, args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn();
        match child {
            Ok(child) => Ok(RunningGit {
                child,
                dir: dir.to_owned(),
                command: self.command_line(dir, args),
            }),
            Err(source) => Err(GitError::Missing {
                command: self.command_line(dir, args),
                source,
            }),
        }
    }

    /// Whether `git args` succeeds, run in `/` without the `GIT_*` variables it would inherit
    /// (those of a repository git runs a hook in): for a command that judges a value alone,
    /// such as `check-ref-format`. `None` when git cannot be run.
    pub(crate) fn accepts<S: AsRef<OsStr>>(&self, args: &[S]) -> Option<bool> {
        let mut cmd = self.command(Path::new("/"), args);
        for (name, _) in std::env::vars_os() {
            if name.as_encoded_bytes().starts_with(b"GIT_") {
                cmd.env_remove(name);
            }
        }
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .ok()
            .map(|status| status.success())
    }

    /// `git args` in `dir`, in the environment of the module docs.
    fn command<S: AsRef<OsStr>>(&self, dir: &Path, args: &[S]) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(["-c", "core.fsmonitor=false"])
            .args(args)
            .current_dir(dir)
            .env("LC_ALL", "C")
            .env_remove("LANGUAGE")
            .env("GIT_OPTIONAL_LOCKS", "0")
            .env("GIT_PAGER", "cat")
            .stdin(Stdio::null());
        cmd
    }

    /// `git args (in dir)`, as the errors say it.
    pub(crate) fn command_line<S: AsRef<OsStr>>(&self, dir: &Path, args: &[S]) -> String {
        let mut line = self.program.to_string_lossy().into_owned();
        for arg in args {
            line.push(' ');
            line.push_str(&arg.as_ref().to_string_lossy());
        }
        format!("{line} (in {})", dir.display())
    }
}

/// For a root process: the first path git would read its repository and configuration from
/// in `dir` that an account other than root could change, and that account's uid (`None` for
/// "a group or everyone"), as [`crate::user_fs::writable_by_others`] judges each path (a
/// sticky root directory like `/tmp` stays closed for root's own entries). `Ok(None)` when
/// only root can change them all, or when this process is not root.
///
/// The paths: `dir` and every directory above it (the work tree's top is one of them); every
/// `.git` from `dir` up (git takes the first that is a repository; each is checked), the git
/// dir a gitfile names, `commondir` and the common dir it names, and their `config`,
/// `config.worktree` and `hooks` (or a `core.hooksPath`) with each file in it, each file a
/// config includes, and the same of each submodule's git dir under their `modules` (a
/// directory with a `HEAD` is taken for a bare repository); `GIT_DIR`,
/// `GIT_WORK_TREE` and `GIT_COMMON_DIR` when set; and the user's and system's config files.
///
/// Only root pays, at every call: no verdict is kept, so a directory opened while the process
/// runs is refused from then on. That is a few dozen `stat`s, 0.14 to 0.22 ms in a debug
/// build, a tenth of starting `git rev-parse` (1.4 to 2.3 ms on the same machine); a root
/// `eval` runs git once or twice. With the ACLs, the hooks and the includes read too it is
/// about twice that (0.65 ms against 0.34 ms, one loaded machine, a fresh repository).
pub fn exposed(dir: &Path) -> io::Result<Option<(PathBuf, Option<u32>)>> {
    if !nix::unistd::Uid::effective().is_root() {
        return Ok(None);
    }
    // Each path is judged before anything is read from it: a FIFO the agent put in a
    // `commondir` would hang the read.
    let judge = |path: &Path| crate::user_fs::writable_by_others(path);
    let dir = std::path::absolute(dir)?;
    let mut git_dirs: Vec<PathBuf> = Vec::new();
    let mut paths = vec![dir.clone()];
    for (var, is_git_dir) in [
        ("GIT_DIR", true),
        ("GIT_COMMON_DIR", true),
        ("GIT_WORK_TREE", false),
    ] {
        if let Some(value) = std::env::var_os(var).filter(|v| !v.is_empty()) {
            let path = dir.join(value);
            if is_git_dir {
                git_dirs.push(path);
            } else {
                paths.push(path);
            }
        }
    }
    for path in &paths {
        if let Some(found) = judge(path)? {
            return Ok(Some(found));
        }
    }
    let mut hooks_paths = Vec::new();
    for config in user_and_system_config(&dir) {
        if let Some(found) = judge_config(&config, 0, &mut hooks_paths)? {
            return Ok(Some(found));
        }
    }
    // What discovery may take on the way up: a `.git`, or the directory itself when it looks
    // like a bare repository (a `HEAD` in it).
    for at in dir.ancestors() {
        let dot_git = at.join(".git");
        if fs::symlink_metadata(&dot_git).is_ok() {
            git_dirs.push(dot_git);
        }
        if fs::symlink_metadata(at.join("HEAD")).is_ok() {
            git_dirs.push(at.to_owned());
        }
    }
    for git_dir in git_dirs {
        if let Some(found) = judge(&git_dir)? {
            return Ok(Some(found));
        }
        // A gitfile names the git dir; git follows no further gitfile from there.
        let git_dir = if git_dir.is_file() {
            let Some(target) = first_line(&git_dir)?
                .as_deref()
                .and_then(|l| l.strip_prefix("gitdir:"))
                .map(|target| {
                    git_dir
                        .parent()
                        .unwrap_or(Path::new("/"))
                        .join(target.trim())
                })
            else {
                continue;
            };
            if let Some(found) = judge(&target)? {
                return Ok(Some(found));
            }
            target
        } else {
            git_dir
        };
        let mut dirs = vec![git_dir.clone()];
        // The file too, not only what it names now: its owner could rewrite it after the check.
        let commondir = git_dir.join("commondir");
        if fs::symlink_metadata(&commondir).is_ok()
            && let Some(found) = judge(&commondir)?
        {
            return Ok(Some(found));
        }
        if let Some(common) = first_line(&commondir)? {
            let common = git_dir.join(common.trim());
            if let Some(found) = judge(&common)? {
                return Ok(Some(found));
            }
            dirs.push(common);
        }
        // Submodules' git dirs (`modules/NAME`, nested ones in theirs) join the list: `git
        // status` runs git in each submodule, with its config and hooks.
        let mut walked = 0;
        while let Some(d) = dirs.pop() {
            let mut under = vec![d.join("modules")];
            while let Some(at) = under.pop() {
                walked += 1;
                if walked > 10_000 {
                    return Err(io::Error::other(format!(
                        "too many submodule directories under {}",
                        d.display()
                    )));
                }
                if fs::symlink_metadata(&at).is_err() {
                    continue;
                }
                if let Some(found) = judge(&at)? {
                    return Ok(Some(found));
                }
                if !at.is_dir() {
                    continue;
                }
                if at.join("HEAD").exists() && at != d.join("modules") {
                    dirs.push(at);
                    continue;
                }
                for entry in fs::read_dir(&at)? {
                    under.push(entry?.path());
                }
            }
            for name in ["config", "config.worktree"] {
                let file = d.join(name);
                if fs::symlink_metadata(&file).is_ok()
                    && let Some(found) = judge_config(&file, 0, &mut hooks_paths)?
                {
                    return Ok(Some(found));
                }
            }
            if let Some(found) = judge_hooks(&d.join("hooks"))? {
                return Ok(Some(found));
            }
        }
    }
    // `core.hooksPath` replaces `hooks`; a relative one is taken from the work tree's top:
    // `GIT_WORK_TREE`, else the first directory from `dir` up with a `.git`.
    let top = match std::env::var_os("GIT_WORK_TREE").filter(|v| !v.is_empty()) {
        Some(tree) => dir.join(tree),
        None => dir
            .ancestors()
            .find(|at| fs::symlink_metadata(at.join(".git")).is_ok())
            .unwrap_or(&dir)
            .to_owned(),
    };
    for hooks in &hooks_paths {
        if let Some(found) = judge_hooks(&top.join(hooks))? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// The hooks directory git runs a commit's `pre-commit` from, then each file in it (which can
/// be another account's in a directory only root can write); judged as [`exposed`] judges.
fn judge_hooks(hooks: &Path) -> io::Result<Option<(PathBuf, Option<u32>)>> {
    if let Some(found) = crate::user_fs::writable_by_others(hooks)? {
        return Ok(Some(found));
    }
    if fs::metadata(hooks).is_ok_and(|m| m.is_dir()) {
        for entry in fs::read_dir(hooks)? {
            if let Some(found) = crate::user_fs::entry_writable_by_others(&entry?.path())? {
                return Ok(Some(found));
            }
        }
    }
    Ok(None)
}

/// The config files git reads besides the repository's, as its environment names them:
/// `GIT_CONFIG_GLOBAL`, else `~/.gitconfig` and `$XDG_CONFIG_HOME/git/config` (a root run
/// with a user's `HOME` reads the user's); and unless `GIT_CONFIG_NOSYSTEM`, the system's.
/// Missing ones count too (their directory is judged: the file can appear). `/dev/null`, which
/// reads empty whoever writes it, is left out.
fn user_and_system_config(dir: &Path) -> Vec<PathBuf> {
    let var = |name| std::env::var_os(name).filter(|v| !v.is_empty());
    let mut files = Vec::new();
    match var("GIT_CONFIG_GLOBAL") {
        Some(global) => files.push(dir.join(global)),
        None => {
            let home = var("HOME").map(PathBuf::from);
            if let Some(home) = &home {
                files.push(home.join(".gitconfig"));
            }
            match var("XDG_CONFIG_HOME") {
                Some(xdg) => files.push(PathBuf::from(xdg).join("git/config")),
                None => files.extend(home.map(|h| h.join(".config/git/config"))),
            }
        }
    }
    if var("GIT_CONFIG_NOSYSTEM").is_none() {
        files.push(var("GIT_CONFIG_SYSTEM").map_or_else(
            || PathBuf::from("/etc/gitconfig"),
            |system| dir.join(system),
        ));
    }
    files.retain(|f| f != Path::new("/dev/null"));
    files
}

/// `Ok` when git may run in `dir`; as root, [`GitError::Exposed`] (or
/// [`GitError::Unchecked`]) for a repository another account can change (module rule 4). For
/// the git commands that do not go through [`Git::spawn`] (the git actions' runner).
pub fn may_run_in(dir: &Path) -> Result<(), GitError> {
    match exposed(dir) {
        Ok(None) => Ok(()),
        Ok(Some((path, owner))) => Err(GitError::Exposed {
            dir: dir.to_owned(),
            path,
            owner,
        }),
        Err(source) => Err(GitError::Unchecked {
            dir: dir.to_owned(),
            source,
        }),
    }
}

/// The config file `file` judged, then each file it includes (`include.path`,
/// `includeIf.*.path`: git reads them as config, a work tree's shared `.gitconfig` say),
/// judged the same way before it is read, to git's depth of 10.
/// Each `core.hooksPath` read is added to `hooks_paths` (`~/` expanded, relative kept).
fn judge_config(
    file: &Path,
    depth: u8,
    hooks_paths: &mut Vec<PathBuf>,
) -> io::Result<Option<(PathBuf, Option<u32>)>> {
    if let Some(found) = crate::user_fs::writable_by_others(file)? {
        return Ok(Some(found));
    }
    let Some(text) = read_regular(file, 1 << 20)? else {
        return Ok(None);
    };
    if depth >= 10 {
        return Err(io::Error::other(format!(
            "{}: config includes nested deeper than git reads",
            file.display()
        )));
    }
    let mut section = String::new();
    for line in text.lines() {
        let mut line = line.trim();
        if let Some(header) = line.strip_prefix('[') {
            let (name, rest) = header.split_once(']').unwrap_or((header, ""));
            section = name.trim().to_ascii_lowercase();
            line = rest.trim();
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        let key = key.trim();
        let value = value.trim().trim_matches('"');
        let home = || {
            std::env::var_os("HOME")
                .map(PathBuf::from)
                .unwrap_or_default()
        };
        if section == "core" && key.eq_ignore_ascii_case("hookspath") {
            hooks_paths.push(match value.strip_prefix("~/") {
                Some(rest) => home().join(rest),
                None => PathBuf::from(value),
            });
            continue;
        }
        let included = section == "include" || section.starts_with("includeif");
        if !included || !key.eq_ignore_ascii_case("path") {
            continue;
        }
        let path = match value.strip_prefix("~/") {
            Some(rest) => home().join(rest),
            None => file.parent().unwrap_or(Path::new("/")).join(value),
        };
        if let Some(found) = judge_config(&path, depth + 1, hooks_paths)? {
            return Ok(Some(found));
        }
    }
    Ok(None)
}

/// At most `limit` bytes of the regular file at `path`, as text; `None` when there is no such
/// regular file. Opened without blocking, so a FIFO there cannot hang root.
fn read_regular(path: &Path, limit: u64) -> io::Result<Option<String>> {
    use std::os::unix::fs::OpenOptionsExt;
    let opened = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path);
    let file = match opened {
        Ok(file) => file,
        Err(e)
            if matches!(
                e.kind(),
                io::ErrorKind::NotFound | io::ErrorKind::NotADirectory
            ) =>
        {
            return Ok(None);
        }
        Err(e) => return Err(e),
    };
    if !file.metadata()?.is_file() {
        return Ok(None);
    }
    // Not UTF-8 is an error, never a lossy guess: a path read wrong would be judged wrong.
    let mut text = String::new();
    file.take(limit).read_to_string(&mut text)?;
    Ok(Some(text))
}

/// The first line of the small file at `path` (a gitfile, `commondir`), `None` when there is
/// no such regular file ([`read_regular`]).
fn first_line(path: &Path) -> io::Result<Option<String>> {
    Ok(read_regular(path, 4096)?.and_then(|text| text.lines().next().map(str::to_owned)))
}

/// A git command started by [`Git::spawn`].
#[derive(Debug)]
pub struct RunningGit {
    child: Child,
    dir: PathBuf,
    command: String,
}

impl RunningGit {
    /// Waits for git and returns its stdout.
    pub fn wait(self) -> Result<Vec<u8>, GitError> {
        let RunningGit {
            child,
            dir,
            command,
        } = self;
        let output = match child.wait_with_output() {
            Ok(output) => output,
            Err(source) => return Err(GitError::Missing { command, source }),
        };
        if output.status.success() {
            return Ok(output.stdout);
        }
        let stderr = String::from_utf8_lossy(&output.stderr);
        // In English: `LC_ALL=C` (module rule 1).
        if stderr.contains("not a git repository") {
            return Err(GitError::NotARepository { dir });
        }
        Err(GitError::Failed {
            command,
            status: output.status,
            stderr: stderr
                .lines()
                .map(str::trim)
                .find(|l| !l.is_empty())
                .unwrap_or("")
                .to_owned(),
        })
    }

    /// Stops git when its answer is not needed after all. Only for commands that merely read.
    pub fn abandon(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Why a git command gave no answer.
#[derive(Debug, thiserror::Error)]
pub enum GitError {
    /// git could not be run: the program is missing or not executable (or, for a
    /// [`io::ErrorKind::NotFound`], the directory to run it in is missing).
    #[error("cannot run `{command}`: {source}; install git or put it on PATH")]
    Missing {
        /// `git args (in dir)`.
        command: String,
        /// What the system said.
        source: io::Error,
    },
    /// The directory is in no git repository.
    #[error(
        "{} is not in a git repository; run `git init` there or work in a checkout",
        dir.display()
    )]
    NotARepository {
        /// Where git ran.
        dir: PathBuf,
    },
    /// Root would run git in a repository another account can change (module rule 4).
    #[error(
        "refusing to run git as root in {}: {} can be changed by {}, and git runs what its \
         config names; run this as the user who owns it, or make it (and the directories \
         above it) writable only by root",
        dir.display(),
        path.display(),
        crate::user_fs::writer_name(*owner)
    )]
    Exposed {
        /// Where git would have run.
        dir: PathBuf,
        /// The first path another account can change.
        path: PathBuf,
        /// That account's uid; `None` for a group or everyone.
        owner: Option<u32>,
    },
    /// Root could not tell who can change the repository, so git was not run.
    #[error(
        "refusing to run git as root in {}: cannot check who can change it: {source}",
        dir.display()
    )]
    Unchecked {
        /// Where git would have run.
        dir: PathBuf,
        /// What the file system said.
        source: io::Error,
    },
    /// git ran and failed.
    #[error(
        "`{command}` failed: {} ({status}); run it in the repository to see all of git's message",
        if stderr.is_empty() { "no message" } else { stderr }
    )]
    Failed {
        /// `git args (in dir)`.
        command: String,
        /// How it ended.
        status: ExitStatus,
        /// The first non-empty line of its stderr (empty when it said nothing).
        stderr: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A fresh repository with one commit, made through [`Git`] itself.
    fn repo() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let git = |args: &[&str]| {
            let config = [
                "-c",
                "user.name=t",
                "-c",
                "user.email=t@t",
                "-c",
                "init.defaultBranch=main",
                "-c",
                "commit.gpgsign=false",
            ];
            Git::default()
                .output(dir.path(), &[&config[..], args].concat())
                .unwrap()
        };
        git(&["init", "-q"]);
        fs::write(dir.path().join("a"), "a\n").unwrap();
        git(&["add", "a"]);
        git(&["commit", "-qm", "one"]);
        dir
    }

    #[test]
    fn output_is_gits_stdout() {
        let repo = repo();
        let out = Git::default()
            .output(repo.path(), &["ls-files", "-z"])
            .unwrap();
        assert_eq!(out, b"a\0");
        let branch = Git::default()
            .output(repo.path(), &["rev-parse", "--abbrev-ref", "HEAD"])
            .unwrap();
        assert_eq!(branch, b"main\n");
    }

    #[test]
    fn spawn_runs_in_the_background_and_waits_for_the_same_answer() {
        let repo = repo();
        let running = Git::default()
            .spawn(repo.path(), &["ls-files", "-z"])
            .unwrap();
        assert_eq!(running.wait().unwrap(), b"a\0");
        // Abandoning reaps the child without its answer.
        Git::default()
            .spawn(repo.path(), &["log", "--oneline"])
            .unwrap()
            .abandon();
    }

    #[test]
    fn the_environment_is_fixed() {
        let repo = repo();
        // `git var` prints what git would use; the pager is the one set here.
        let pager = Git::default()
            .output(repo.path(), &["var", "GIT_PAGER"])
            .unwrap();
        assert_eq!(pager, b"cat\n");
    }

    #[test]
    fn a_plain_dir_is_not_a_repository() {
        let plain = tempfile::tempdir().unwrap();
        let err = Git::default()
            .output(plain.path(), &["rev-parse", "--git-path", "hooks"])
            .unwrap_err();
        assert!(
            matches!(&err, GitError::NotARepository { dir } if dir == plain.path()),
            "{err:?}"
        );
        let text = err.to_string();
        assert!(
            text.contains("not in a git repository; run `git init`"),
            "{text}"
        );
        assert!(!text.contains('\n'), "{text}");
    }

    /// Set in the child of [`a_plain_dir_is_not_a_repository_in_german_too`].
    const GERMAN_CHILD: &str = "HOOKVISOR_GIT_TEST_GERMAN_CHILD";

    /// The user speaks German (a de_DE locale compiled into a private `LOCPATH`, Debian's git
    /// with its translations): git still tells "not a repository" apart. The locale must be in
    /// the test process's environment, so the test runs itself again in a child.
    #[test]
    fn a_plain_dir_is_not_a_repository_in_german_too() {
        if std::env::var_os(GERMAN_CHILD).is_some() {
            let plain = tempfile::tempdir().unwrap();
            let err = Git::new("/usr/bin/git")
                .output(plain.path(), &["rev-parse", "--git-path", "hooks"])
                .unwrap_err();
            assert!(matches!(err, GitError::NotARepository { .. }), "{err:?}");
            return;
        }
        let base = tempfile::tempdir().unwrap();
        let locales = base.path().join("locales");
        fs::create_dir_all(&locales).unwrap();
        let made = Command::new("localedef")
            .args(["-i", "de_DE", "-f", "UTF-8"])
            .arg(locales.join("de_DE.UTF-8"))
            .status();
        let german = |command: &mut Command| {
            command
                .env("PATH", "/usr/bin:/bin")
                .env("LOCPATH", &locales)
                .env("LC_ALL", "de_DE.UTF-8")
                .env("LANG", "de_DE.UTF-8")
                .env("LANGUAGE", "de");
        };
        let mut plain_git = Command::new("/usr/bin/git");
        plain_git.args(["rev-parse", "--git-path", "hooks"]);
        plain_git.current_dir(base.path());
        german(&mut plain_git);
        let speaks_german = made.is_ok_and(|s| s.success())
            && plain_git.output().is_ok_and(|o| {
                let said = String::from_utf8_lossy(&o.stderr).into_owned();
                !o.status.success() && !said.contains("not a git repository")
            });
        if !speaks_german {
            assert!(
                std::env::var_os("CI").is_none_or(|v| v != "true"),
                "CI=true but no German git (install locales and Debian's git)"
            );
            eprintln!("note: no de_DE locale or no translated git; test skipped");
            return;
        }
        let mut child = Command::new(std::env::current_exe().unwrap());
        child
            .args([
                "--exact",
                "git::tests::a_plain_dir_is_not_a_repository_in_german_too",
                "--nocapture",
            ])
            .env(GERMAN_CHILD, "1");
        german(&mut child);
        let out = child.output().unwrap();
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(
            String::from_utf8_lossy(&out.stdout).contains("1 passed"),
            "{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }

    #[test]
    fn a_bogus_program_is_missing() {
        let plain = tempfile::tempdir().unwrap();
        let err = Git::new("/nonexistent/git")
            .output(plain.path(), &["status"])
            .unwrap_err();
        let GitError::Missing { command, source } = &err else {
            panic!("{err:?}");
        };
        assert_eq!(source.kind(), io::ErrorKind::NotFound);
        assert!(
            command.starts_with("/nonexistent/git status (in "),
            "{command}"
        );
        let text = err.to_string();
        assert!(text.contains("install git or put it on PATH"), "{text}");
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn a_failure_carries_the_command_and_the_first_stderr_line() {
        let repo = repo();
        let err = Git::default()
            .output(repo.path(), &["rev-parse", "--verify", "no-such-ref"])
            .unwrap_err();
        let GitError::Failed {
            command,
            status,
            stderr,
        } = &err
        else {
            panic!("{err:?}");
        };
        assert!(command.starts_with("git rev-parse --verify no-such-ref (in "));
        assert!(!status.success());
        assert_eq!(stderr, "fatal: Needed a single revision");
        let text = err.to_string();
        assert!(text.contains("fatal: Needed a single revision"), "{text}");
        assert!(!text.contains('\n'), "{text}");
    }

    /// Rule 4, as root: a repository another account can change (its work tree, its `.git`,
    /// its config, the git dir a gitfile names) is refused before git starts, so the
    /// `core.fsmonitor` planted there never runs; a repository only root can change, in the
    /// sticky `/tmp`, runs as before.
    #[test]
    fn as_root_a_repository_others_can_change_is_refused() {
        use std::os::unix::fs::PermissionsExt;
        if !nix::unistd::Uid::effective().is_root() {
            assert!(std::env::var_os("CI").is_none(), "CI must run this as root");
            eprintln!("note: needs root; skipped");
            return;
        }
        let repo = repo();
        let dir = repo.path();
        let marker = dir.join("fsmonitor-ran");
        let script = dir.join("fsmonitor.sh");
        fs::write(&script, format!("#!/bin/sh\ntouch {}\n", marker.display())).unwrap();
        fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
        Git::default()
            .output(dir, &["config", "core.fsmonitor", script.to_str().unwrap()])
            .unwrap();
        let mode = |path: &Path, mode| {
            fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
        };
        let refused = |open: &Path| {
            let err = Git::default().output(dir, &["status"]).unwrap_err();
            assert!(
                matches!(&err, GitError::Exposed { path, owner: None, .. } if path == open),
                "{err:?}"
            );
            assert!(!marker.exists(), "root ran the fsmonitor");
            assert!(!err.to_string().contains('\n'), "{err}");
        };
        mode(dir, 0o777);
        refused(dir);
        mode(dir, 0o700);
        mode(&dir.join(".git"), 0o777);
        // The agent's FIFO as `commondir` is never opened: `.git` is judged first.
        let fifo = dir.join(".git/commondir");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o666)).unwrap();
        refused(&dir.join(".git"));
        fs::remove_file(&fifo).unwrap();
        mode(&dir.join(".git"), 0o755);
        mode(&dir.join(".git/config"), 0o666);
        refused(&dir.join(".git/config"));
        mode(&dir.join(".git/config"), 0o644);
        // A gitfile naming a git dir others can change.
        let linked = tempfile::tempdir().unwrap();
        let open = tempfile::tempdir().unwrap();
        fs::rename(dir.join(".git"), open.path().join("git")).unwrap();
        fs::write(
            linked.path().join(".git"),
            format!("gitdir: {}\n", open.path().join("git").display()),
        )
        .unwrap();
        mode(open.path(), 0o777);
        let err = Git::default()
            .output(linked.path(), &["status"])
            .unwrap_err();
        assert!(matches!(err, GitError::Exposed { .. }), "{err:?}");
        mode(open.path(), 0o700);
        fs::rename(open.path().join("git"), dir.join(".git")).unwrap();
        // Only root can change it: git runs, and even root's own fsmonitor stays off (rule 3).
        Git::default().output(dir, &["status"]).unwrap();
        assert!(!marker.exists());
    }

    fn env(pairs: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        pairs
            .iter()
            .map(|(n, v)| ((*n).into(), (*v).into()))
            .collect()
    }

    #[test]
    fn trust_is_appended_after_the_entries_the_environment_has() {
        let trust = trust_env(Path::new("/w"), &env(&[("GIT_CONFIG_COUNT", "2")]));
        assert_eq!(
            trust,
            env(&[
                ("GIT_CONFIG_KEY_2", "safe.directory"),
                ("GIT_CONFIG_VALUE_2", "/w"),
                ("GIT_CONFIG_COUNT", "3")
            ])
        );
        let fresh = trust_env(Path::new("/w"), &env(&[("GIT_CONFIG_COUNT", "x")]));
        assert_eq!(fresh[0].0, "GIT_CONFIG_KEY_0");
        assert!(trust_env(Path::new("/w"), &env(&[("GIT_CONFIG_COUNT", "4294967295")])).is_empty());
    }
}

//! Finding the hooks of a workspace: every top-level, non-hidden file of `.discobot/hooks/` is
//! either a [`Hook`] or a [`Problem`] that says why it will not run. Nothing is dropped silently.
//!
//! A hook is an executable script with front matter, or (docs/EVENTS.md §2.1, §5 rule 9) a
//! *declarative* hook: a non-executable `.yml`/`.yaml` file that is one `---` front matter block
//! and nothing else, running its `run:` (`sh -c`) or `argv:` (no shell). An executable script
//! that carries `run:` or `argv:` is a problem, since either could be what runs. Every hook, of
//! every source, is one [`Hook`] in the one list [`Discovery::hooks`]; [`Hook::phase1`] says
//! whether phase 1's semantics run it (the rule is in [`Hook`]'s documentation). A problem
//! prints as `file:line: reason`.
//!
//! # A workspace's hooks
//!
//! [`discover_workspace`] is what the commands call: it reads `.discobot/hookvisor.yml`
//! ([`Config`], with its rules), then `.discobot/hooks`, then hookvisor's **global hooks**
//! (docs/EVENTS.md §2.1, §5 rule 7), and puts them together in that order, so that global hooks run
//! after the workspace's in every runner (session, file, pre-commit, events). Rules of global
//! hooks, written once here:
//!
//! 1. **Where.** `$HOOKVISOR_GLOBAL_HOOKS` when set, else `$XDG_CONFIG_HOME/hookvisor/hooks`
//!    (when absolute), else `$HOME/.config/hookvisor/hooks` of the user hookvisor runs as
//!    ([`global_hooks_dir`]). A missing directory has no hooks.
//! 2. **Same files.** Scripts and declarative `.yml` hooks, read with the same rules as
//!    `.discobot/hooks` ([`discover()`]).
//! 3. **Ids.** A global hook's id is its file's id after [`GLOBAL_ID_PREFIX`] (`global:lint`):
//!    workspace ids keep `[a-z0-9_-]`, so the two never collide in `status.json`, logs or `eval
//!    ID`, and each says where it came from.
//! 4. **Never root.** The directory is the user's, which the agent can write: `run_as: root`
//!    there is a problem ([`ProblemKind::GlobalRunAsRoot`]), never a root run. The init reads
//!    only the workspace's hooks ([`discover()`]), through the user's credentials.
//! 5. **Off** with `disable_global_hooks: true` (in `hookvisor.yml`, or in an agent-pipelines
//!    workspace file: [`crate::import`]'s rule 4), with `sources` not naming `global`, and
//!    while `hookvisor.yml` is broken.
//!
//! This file walks the directory and judges the hooks together (ids, duplicates, warnings);
//! `hook_file` reads one file and its front matter, and `fields` turns the front matter's
//! fields into a hook.

mod fields;
mod hook_file;

use std::collections::BTreeMap;
use std::env;
use std::ffi::OsString;
use std::fs;
use std::path::{Path, PathBuf};

use self::fields::{EVENT_FIELDS, disagreement};
pub(crate) use self::hook_file::declares_root_session;
use self::hook_file::{HookFile, read_hook};
use crate::config::{Config, Source, SourceUse};
use crate::context::Context;
use crate::event::HookKind;
use crate::event::{Command, Event, HookAction};
use crate::git_action::GIT_FIELDS;
use crate::hook::{Binds, Hook, Origin, Problem, ProblemKind, RunAs};
use crate::import::{IMPORTED, LOOP_OWNER_VARIABLE, UserDirs, read_sources};
use crate::spawn::SPAWN_FIELDS;
use crate::webhook::WEBHOOK_FIELDS;

/// What starts the id of every global hook (the module's rule 3).
pub const GLOBAL_ID_PREFIX: &str = "global:";

/// Front matter keys of phase 1 and `event:`; with [`EVENT_FIELDS`], every key hookvisor reads.
const PHASE1_FIELDS: [&str; 10] = [
    "name",
    "type",
    "description",
    "run_as",
    "blocking",
    "pattern",
    "notify_llm",
    "timeout",
    "retries",
    "event",
];

/// Front matter keys hookvisor reads; others are reported as warnings.
const KNOWN_FIELDS: [&str;
    PHASE1_FIELDS.len()
        + EVENT_FIELDS.len()
        + GIT_FIELDS.len()
        + SPAWN_FIELDS.len()
        + WEBHOOK_FIELDS.len()] = {
    let groups: [&[&str]; 5] = [
        &PHASE1_FIELDS,
        &EVENT_FIELDS,
        &GIT_FIELDS,
        &SPAWN_FIELDS,
        &WEBHOOK_FIELDS,
    ];
    let mut known = [""; PHASE1_FIELDS.len()
        + EVENT_FIELDS.len()
        + GIT_FIELDS.len()
        + SPAWN_FIELDS.len()
        + WEBHOOK_FIELDS.len()];
    let (mut i, mut group) = (0, 0);
    while group < groups.len() {
        let mut j = 0;
        while j < groups[group].len() {
            known[i] = groups[group][j];
            i += 1;
            j += 1;
        }
        group += 1;
    }
    known
};

/// The result of scanning a hooks directory.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    /// Every hook, in the order they run (docs/EVENTS.md §1.4): `.discobot/hooks` by file name, the
    /// other tools' files in the order of §5 rule 7, then the global hooks by file name.
    pub hooks: Vec<Hook>,
    /// Files that will not run, with the reason, in file-name order.
    pub problems: Vec<Problem>,
    /// Things that do not stop a hook but are probably mistakes (unknown front matter keys,
    /// values YAML reads otherwise than the line shows).
    pub warnings: Vec<Problem>,
    /// `.discobot/hookvisor.yml` as [`discover_workspace`] read it; the defaults otherwise
    /// (and, when the file is broken, the defaults without global hooks).
    pub config: Config,
    /// Each source of hooks and whether [`discover_workspace`] read it; empty from
    /// [`discover()`].
    pub sources: Vec<SourceUse>,
}

impl Discovery {
    /// The phase-1 hook with this id (what `run ID`, `eval ID` and the rerun route run).
    pub fn get(&self, id: &str) -> Option<&Hook> {
        self.hooks.iter().find(|h| h.phase1 && h.id == id)
    }

    /// The phase-1 hooks of one kind, in order.
    pub fn of_kind(&self, kind: HookKind) -> impl Iterator<Item = &Hook> {
        self.hooks
            .iter()
            .filter(move |h| h.phase1 && h.kind == kind)
    }

    /// The hooks the event dispatcher runs (every hook but the phase-1 ones), in order.
    pub fn event_hooks(&self) -> impl Iterator<Item = &Hook> {
        self.hooks.iter().filter(|h| !h.phase1)
    }

    /// The first file that does not load and may be a hook of `event`, when `event` is a gate:
    /// the gate blocks on it ([`crate::fire`]'s step 1). A notice runs without it.
    pub fn unloaded_gate(&self, event: &Event) -> Option<&Problem> {
        if !event.is_gate() {
            return None;
        }
        self.problems.iter().find(|p| p.may_bind(event))
    }

    /// Whether firing `event` has anything to do: an event hook of it, or a file that blocks
    /// its gate ([`Discovery::unloaded_gate`]). Callers skip the firing of an event that has not.
    pub fn fires(&self, event: &Event) -> bool {
        self.event_hooks().any(|h| h.spec.event == *event) || self.unloaded_gate(event).is_some()
    }
}

/// The hooks of a workspace: its configuration, `.discobot/hooks`, the other tools' files
/// ([`crate::import`]), then the global hooks of [`global_hooks_dir`], all from the
/// environment (the module's rules).
pub fn discover_workspace(ctx: &Context) -> Discovery {
    let global = global_hooks_dir(|name| env::var_os(name));
    discover_workspace_with(ctx, global.as_deref())
}

/// [`discover_workspace`] under `hookvisor loop` supervising `owner`, whose own hook file is
/// left to it ([`crate::import`], rule 5), or running the pipeline files `pipeline`
/// ([`Places::pipeline`]).
pub fn discover_workspace_owned(
    ctx: &Context,
    owner: &str,
    pipeline: Option<&[PathBuf]>,
) -> Discovery {
    let global = global_hooks_dir(|name| env::var_os(name));
    let places = Places {
        global_hooks: global.as_deref(),
        user: UserDirs::from_vars(|name| env::var_os(name)),
        owner: Some(owner),
        pipeline,
    };
    discover_workspace_in(ctx, &places)
}

/// [`discover_workspace`] with the global hooks directory given (`None`: there is none); the
/// user's files of other tools and the loop's owner ([`LOOP_OWNER_VARIABLE`]) come from the
/// environment.
pub fn discover_workspace_with(ctx: &Context, global_hooks: Option<&Path>) -> Discovery {
    let owner = env::var(LOOP_OWNER_VARIABLE).ok().filter(|o| !o.is_empty());
    let places = Places {
        global_hooks,
        user: UserDirs::from_vars(|name| env::var_os(name)),
        owner: owner.as_deref(),
        pipeline: None,
    };
    discover_workspace_in(ctx, &places)
}

/// Where discovery looks outside `.discobot/hooks`, and whose hooks it leaves alone.
#[derive(Debug, Clone, Default)]
pub struct Places<'a> {
    /// The global hooks directory; `None`: there is none.
    pub global_hooks: Option<&'a Path>,
    /// The user's directories, where the other tools keep their user files.
    pub user: UserDirs,
    /// The tool `hookvisor loop` supervises, which runs its own hooks. Default none.
    pub owner: Option<&'a str>,
    /// The agent-pipelines files of `loop --pipeline` (the pipeline's, its stage's): then only
    /// their hooks and the global kinds run ([`crate::import`]). Default none.
    pub pipeline: Option<&'a [PathBuf]>,
}

/// [`discover_workspace`] with every place given.
pub fn discover_workspace_in(ctx: &Context, places: &Places<'_>) -> Discovery {
    let global_hooks = places.global_hooks;
    let config_path = Config::path(&ctx.workspace);
    let (config, broken) = match Config::load(&ctx.workspace) {
        Ok(config) => (config.unwrap_or_default(), None),
        Err(error) => (
            Config::fallback(),
            Some(Problem::new(
                config_path.clone(),
                ProblemKind::Config(error),
                Binds::Nothing,
            )),
        ),
    };
    let mut discovery = match config.reads(Source::Discobot) && places.pipeline.is_none() {
        true => discover(&ctx.hooks_dir()),
        false => Discovery::default(),
    };
    let imported = match broken {
        // A broken file may have meant to leave them out, as global hooks (config rule 2).
        Some(_) => None,
        None => Some(read_sources(
            &ctx.workspace,
            &places.user,
            &config,
            places.owner,
            places.pipeline,
        )),
    };
    if let Some(imported) = &imported {
        discovery.hooks.extend(imported.hooks.iter().cloned());
        discovery.problems.extend(imported.problems.iter().cloned());
        discovery.warnings.extend(imported.warnings.iter().cloned());
    }
    // A workspace agent-pipelines file's `disable_global_hooks` turns them off too (rule 7).
    let pipelines_off = imported.as_ref().is_some_and(|i| i.disable_global_hooks);
    if config.reads(Source::Global)
        && !pipelines_off
        && let Some(dir) = global_hooks
    {
        let global = discover_dir(dir, Origin::Global);
        discovery.hooks.extend(global.hooks);
        discovery.problems.extend(global.problems);
        discovery.warnings.extend(global.warnings);
    }
    discovery.sources = Source::ALL
        .into_iter()
        .map(|source| {
            let skipped = |note: String| SourceUse {
                source,
                used: false,
                note,
                dir: None,
            };
            if (source == Source::Global || IMPORTED.contains(&source)) && broken.is_some() {
                return skipped(format!("{} is broken", config_path.display()));
            }
            if let Some(used) = imported
                .as_ref()
                .and_then(|i| i.uses.iter().find(|u| u.source == source))
            {
                return used.clone();
            }
            if source == Source::Global && config.disable_global_hooks {
                return skipped("disable_global_hooks: true".to_owned());
            }
            if source == Source::Global && pipelines_off {
                return skipped("disable_global_hooks: true in an agent-pipelines file".to_owned());
            }
            if !config.reads(source) {
                return skipped("not in sources".to_owned());
            }
            let dir = match source {
                Source::Global => global_hooks.map(Path::to_owned),
                _ => Some(ctx.hooks_dir()),
            };
            match dir {
                // A global directory that does not exist holds no hooks: say so, not "used".
                Some(dir) if source == Source::Global && !dir.is_dir() => SourceUse {
                    source,
                    used: false,
                    note: format!("no directory {}", dir.display()),
                    dir: Some(dir),
                },
                Some(dir) => SourceUse {
                    source,
                    used: true,
                    note: dir.display().to_string(),
                    dir: Some(dir),
                },
                None => skipped("no home directory; set HOME or HOOKVISOR_GLOBAL_HOOKS".to_owned()),
            }
        })
        .collect();
    if let Some(problem) = broken {
        discovery.problems.insert(0, problem);
    }
    discovery.config = config;
    discovery
}

/// The global hooks directory (the module's rule 1), from the variables `var` gives.
pub fn global_hooks_dir(var: impl Fn(&str) -> Option<OsString>) -> Option<PathBuf> {
    let non_empty = |name: &str| var(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    if let Some(dir) = non_empty("HOOKVISOR_GLOBAL_HOOKS") {
        return Some(dir);
    }
    // The XDG base directory spec: a relative value is invalid and is ignored.
    let config_home = non_empty("XDG_CONFIG_HOME")
        .filter(|dir| dir.is_absolute())
        .or_else(|| non_empty("HOME").map(|home| home.join(".config")))?;
    Some(config_home.join("hookvisor").join("hooks"))
}

/// Scans `hooks_dir` (normally `<workspace>/.discobot/hooks`), and only it: no configuration,
/// no global hooks (see [`discover_workspace`]).
///
/// A missing directory means no hooks. Directories inside it are skipped (hooks are top-level
/// files); hidden entries (starting with `.`) are ignored.
pub fn discover(hooks_dir: &Path) -> Discovery {
    discover_dir(hooks_dir, Origin::Workspace)
}

/// [`discover`] of a directory of workspace or global hooks.
fn discover_dir(hooks_dir: &Path, origin: Origin) -> Discovery {
    let mut discovery = Discovery::default();
    let entries = match fs::read_dir(hooks_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return discovery,
        Err(e) => {
            discovery.problems.push(Problem::new(
                hooks_dir.to_owned(),
                ProblemKind::HooksDirUnreadable {
                    error: e.to_string(),
                },
                // Its hooks are unknown: any gate may be one of theirs.
                Binds::Any,
            ));
            return discovery;
        }
    };
    let mut paths: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.file_name()
                .is_some_and(|n| !n.as_encoded_bytes().starts_with(b"."))
        })
        .collect();
    paths.sort();

    let mut candidates = Vec::new();
    for path in paths {
        match read_hook(&path, origin) {
            Ok(Some(read)) => {
                let HookFile {
                    hook,
                    unknown,
                    notes,
                    retries,
                    lines,
                } = read;
                let mut warn = |kind: ProblemKind| {
                    // On the field's line, else the file's first (docs/EVENTS.md §5 rule 10).
                    let line = kind.line().or_else(|| {
                        let key = kind.field()?;
                        lines.get(key).copied()
                    });
                    discovery.warnings.push(Problem {
                        path: path.clone(),
                        line: line.or(Some(1)),
                        kind,
                        binds: Binds::Nothing,
                    });
                };
                for key in unknown {
                    warn(ProblemKind::UnknownField {
                        key,
                        known: &KNOWN_FIELDS,
                    });
                }
                for note in notes {
                    if let Some(kind) = disagreement(note) {
                        warn(kind);
                    }
                }
                // Every hook keeps its `retries` in its spec: a session hook's attempts, an
                // event hook's `on_failure: retry`; a phase-1 file or pre-commit hook has none.
                if retries.is_some() && hook.phase1 && hook.kind != HookKind::Session {
                    warn(ProblemKind::RetriesIgnored { kind: hook.kind });
                }
                if hook.spec.event == Event::SessionStart
                    && hook.run_as == RunAs::Root
                    && !hook.blocking
                {
                    warn(ProblemKind::RootRunsBlocking);
                }
                if let HookAction::Webhook(action) = &hook.spec.action
                    && hook.spec.event.is_gate()
                    && hook.spec.phase == crate::policy::Phase::Pre
                    && hook.spec.await_
                    && action.awaits_callback()
                    && action.on_timeout == crate::policy::OnTimeout::Continue
                {
                    warn(ProblemKind::GateContinuesWithoutAnswer);
                }
                let referenced: Vec<String> = match &hook.spec.action {
                    HookAction::Command(Command::Run(script)) => script.references().to_vec(),
                    HookAction::Command(Command::Argv(items)) => items
                        .iter()
                        .flat_map(|i| crate::template::references(i))
                        .collect(),
                    HookAction::GitCommit(action) => action.references(),
                    HookAction::GitPush(action) => action.references(),
                    HookAction::Spawn(action) => action.references(),
                    HookAction::Webhook(action) => action.references(),
                    HookAction::Command(Command::Script) => Vec::new(),
                };
                let mut unknown: Vec<String> = referenced
                    .into_iter()
                    .filter(|n| !crate::payload::provides(&hook.spec.event.to_string(), n))
                    .collect();
                unknown.dedup();
                for name in unknown {
                    match &hook.spec.action {
                        // A webhook's other names are secrets (docs/EVENTS.md §5 rule 20).
                        HookAction::Webhook(_) if crate::webhook::is_defined_secret(&name) => {}
                        HookAction::Webhook(_) => warn(ProblemKind::UnknownWebhookName {
                            upper: name.to_ascii_uppercase(),
                            name,
                        }),
                        _ => warn(ProblemKind::UnknownVariable { name }),
                    }
                }
                if hook.spec.gates_commits_by_tool() {
                    warn(ProblemKind::GitCommitToolIsAHint);
                }
                if let Some(crate::event::ToolMatcher::Names(names)) = &hook.spec.tool {
                    let unknown = names
                        .iter()
                        .filter(|n| !n.contains('*') && !crate::event::is_known_tool(n));
                    for name in unknown {
                        warn(ProblemKind::UnknownTool { name: name.clone() });
                    }
                }
                candidates.push(hook);
            }
            Ok(None) => {}
            Err(problem) => discovery.problems.push(*problem),
        }
    }

    let mut by_id: BTreeMap<&str, Vec<&Hook>> = BTreeMap::new();
    for hook in &candidates {
        by_id.entry(&hook.id).or_default().push(hook);
    }
    by_id.retain(|_, hooks| hooks.len() > 1);
    for (id, hooks) in &by_id {
        for hook in hooks {
            let others: Vec<String> = hooks
                .iter()
                .filter(|other| other.path != hook.path)
                .map(|other| file_name(&other.path))
                .collect();
            discovery.problems.push(Problem::new(
                hook.path.clone(),
                ProblemKind::DuplicateId {
                    id: (*id).to_owned(),
                    others,
                },
                // Neither runs: a gate of either fails closed.
                match hook.phase1 {
                    true => Binds::Phase1(hook.kind),
                    false => Binds::Event(hook.spec.event.clone()),
                },
            ));
        }
    }
    let duplicated: Vec<String> = by_id.into_keys().map(str::to_owned).collect();
    discovery.hooks = candidates
        .into_iter()
        .filter(|hook| !duplicated.contains(&hook.id))
        .collect();
    discovery.problems.sort_by(|a, b| a.path.cmp(&b.path));
    discovery
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Whether the workspace has hooks that run inside `git commit`: phase-1 pre-commit hooks or
/// event hooks bound to `commit.before` (`precommit`'s rule 7), or a `commit.before` gate file
/// that does not load, which refuses the commit from there (a gate fails closed): without the
/// git hook it would be skipped, not refused. Each installs the git hook.
pub fn has_commit_hooks(discovery: &Discovery) -> bool {
    let gate = Binds::Event(Event::CommitBefore);
    discovery
        .hooks
        .iter()
        .any(|h| h.spec.event == Event::CommitBefore)
        || discovery.problems.iter().any(|p| p.binds == gate)
}

/// Whether the workspace has hooks bound to `commit.after` (`precommit`'s rule 8), which
/// install the post-commit git hook.
pub fn has_commit_after_hooks(discovery: &Discovery) -> bool {
    discovery
        .hooks
        .iter()
        .any(|h| h.spec.event == Event::CommitAfter)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::hook::hook_id;
    use std::os::unix::fs::{PermissionsExt, symlink};
    use std::time::Duration;

    #[test]
    fn hook_id_table() {
        let table = [
            ("foo.bar.sh", "foo-bar"),
            ("my@service!.sh", "myservice"),
            ("test (1).sh", "test1"),
            ("lint.sh", "lint"),
            ("Lint.SH", "lint"),
            ("build.py", "build"),
            ("check.ts", "check"),
            ("run.rb", "run"),
            ("x.pl", "x"),
            ("x.php", "x"),
            ("x.js", "x"),
            ("x.zsh", "x"),
            ("x.bash", "x"),
            ("go-fmt", "go-fmt"),
            ("go_fmt", "go_fmt"),
            ("archive.tar.gz", "archive-tar-gz"),
            ("a.sh.sh", "a-sh"),
            ("-dash-.sh", "dash"),
            ("01-setup.sh", "01-setup"),
            ("ÜBER.sh", "ber"),
            ("@@@.sh", ""),
            ("x.SH.bak", "x-sh-bak"),
        ];
        for (name, id) in table {
            assert_eq!(hook_id(name), id, "{name}");
        }
    }

    /// A hooks directory, in a temporary directory.
    pub(super) struct Dir(pub(super) tempfile::TempDir);

    impl Dir {
        pub(super) fn new() -> Dir {
            Dir(tempfile::tempdir().unwrap())
        }
        pub(super) fn write(&self, name: &str, text: &str, mode: u32) -> PathBuf {
            let path = self.0.path().join(name);
            fs::write(&path, text).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            path
        }
        pub(super) fn hook(&self, name: &str, front: &str) -> PathBuf {
            self.write(
                name,
                &format!("#!/bin/sh\n#---\n{front}\n#---\nexit 0\n"),
                0o755,
            )
        }
        pub(super) fn discover(&self) -> Discovery {
            discover(self.0.path())
        }
        pub(super) fn reason(&self, name: &str) -> String {
            let d = self.discover();
            let p = d
                .problems
                .iter()
                .find(|p| p.path.file_name().unwrap() == name)
                .unwrap_or_else(|| panic!("no problem for {name}: {d:?}"));
            p.kind.to_string()
        }
    }

    #[test]
    fn a_valid_hook_of_each_kind_with_defaults() {
        let dir = Dir::new();
        dir.hook("b-lint.sh", "# type: file\n# pattern: *.go");
        dir.hook(
            "a-setup.sh",
            "# type: session\n# run_as: root\n# blocking: yes",
        );
        dir.hook(
            "c-commit.sh",
            "# type: pre-commit\n# name: Commit check\n# notify_llm: No\n# timeout: 2m",
        );
        let d = dir.discover();
        assert!(d.problems.is_empty(), "{:?}", d.problems);
        let ids: Vec<_> = d.hooks.iter().map(|h| h.id.as_str()).collect();
        assert_eq!(ids, ["a-setup", "b-lint", "c-commit"]);

        let setup = d.get("a-setup").unwrap();
        assert_eq!(
            (setup.kind, setup.run_as, setup.blocking),
            (HookKind::Session, RunAs::Root, true)
        );
        assert_eq!(setup.timeout, Duration::from_secs(300));
        assert_eq!(setup.name, "a-setup");

        let lint = d.get("b-lint").unwrap();
        assert_eq!(lint.kind, HookKind::File);
        assert_eq!(lint.run_as, RunAs::User);
        assert!(lint.notify_llm);
        assert_eq!(lint.timeout, Duration::from_secs(900));
        assert!(lint.matches("cmd/x/main.go"));

        let commit = d.get("c-commit").unwrap();
        assert_eq!(commit.name, "Commit check");
        assert!(!commit.notify_llm);
        assert_eq!(commit.timeout, Duration::from_secs(120));
        assert!(commit.pattern.is_none());
        assert!(commit.matches("anything"));
    }

    #[test]
    fn every_problem_reason() {
        let dir = Dir::new();
        dir.write(
            "noexec.sh",
            "#!/bin/sh\n#---\n# type: file\n# pattern: x\n#---\n",
            0o644,
        );
        dir.write("noshebang.sh", "#---\n# type: session\n#---\n", 0o755);
        dir.hook("notype.sh", "# name: x");
        dir.hook("badtype.sh", "# type: post-commit");
        dir.hook("nopattern.sh", "# type: file");
        dir.hook("badrunas.sh", "# type: session\n# run_as: admin");
        dir.hook("badbool.sh", "# type: session\n# blocking: maybe");
        dir.hook("badtimeout.sh", "# type: session\n# timeout: soon");
        dir.hook("badpattern.sh", "# type: file\n# pattern: src/[x");
        dir.write("nofront.sh", "#!/bin/sh\necho hi\n", 0o755);
        dir.write(
            "unclosed.sh",
            "#!/bin/sh\n#---\n# type: session\necho\n",
            0o755,
        );
        dir.write(
            "crlf.sh",
            "#!/bin/sh\r\n#---\r\n# type: session\r\n#---\r\n",
            0o755,
        );
        dir.hook("dup.sh", "# type: session");
        dir.hook("DUP.py", "# type: session");
        dir.hook("@@.sh", "# type: session");
        symlink(
            dir.0.path().join("missing-target"),
            dir.0.path().join("broken.sh"),
        )
        .unwrap();
        dir.write("binary", "\u{7f}ELF\0\0", 0o755);

        let expect = [
            ("noexec.sh", "not executable; run `chmod +x"),
            ("noshebang.sh", "no #! line"),
            ("notype.sh", "missing 'type'"),
            ("badtype.sh", "unknown type 'post-commit'"),
            ("nopattern.sh", "a file hook needs a 'pattern'"),
            ("badrunas.sh", "invalid run_as 'admin'"),
            ("badbool.sh", "invalid blocking 'maybe'"),
            ("badtimeout.sh", "invalid timeout 'soon'"),
            ("badpattern.sh", "invalid pattern 'src/[x'"),
            ("nofront.sh", "no front matter"),
            ("unclosed.sh", "never closed"),
            ("crlf.sh", "CRLF line endings; run `sed -i 's/\\r$//'"),
            ("dup.sh", "hook id 'dup' is also the id of DUP.py"),
            ("DUP.py", "hook id 'dup' is also the id of dup.sh"),
            ("@@.sh", "empty hook id"),
            ("broken.sh", "broken symlink"),
            ("binary", "a binary has no front matter"),
        ];
        for (name, reason) in expect {
            let got = dir.reason(name);
            assert!(got.contains(reason), "{name}: {got:?} lacks {reason:?}");
        }
        let d = dir.discover();
        assert!(d.hooks.is_empty(), "{:?}", d.hooks);
        assert_eq!(d.problems.len(), expect.len());
    }

    #[test]
    fn hidden_files_and_directories_are_skipped_and_missing_dir_is_empty() {
        let dir = Dir::new();
        dir.hook(".hidden.sh", "# type: session");
        fs::create_dir(dir.0.path().join("lib")).unwrap();
        dir.hook("ok.sh", "# type: session");
        let d = dir.discover();
        assert_eq!(d.hooks.len(), 1);
        assert!(d.problems.is_empty());
        let missing = discover(&dir.0.path().join("nope"));
        assert!(missing.hooks.is_empty() && missing.problems.is_empty());
    }

    #[test]
    fn a_root_session_hook_that_is_not_blocking_warns() {
        let dir = Dir::new();
        dir.hook("a.sh", "# type: session\n# run_as: root");
        dir.hook("b.sh", "# type: session\n# run_as: root\n# blocking: false");
        dir.hook("c.sh", "# type: session\n# run_as: root\n# blocking: true");
        dir.hook("d.sh", "# type: session");
        let d = dir.discover();
        let warned: Vec<String> = d
            .warnings
            .iter()
            .filter(|w| w.kind == ProblemKind::RootRunsBlocking)
            .map(|w| w.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(warned, ["a.sh", "b.sh"]);
    }

    /// The review's F8 and F1: under `on_timeout: continue` the agent can make an approval
    /// gate's wait fail or time out, and the event goes on.
    #[test]
    fn an_awaited_gate_under_on_timeout_continue_warns() {
        let dir = Dir::new();
        let webhook = |event: &str, extra: &str| {
            format!(
                "---\nevent: {event}\naction: webhook\nurl: https://h.example/x\n\
                 body: {{cb: \"${{callback_url}}\"}}\n{extra}---\n"
            )
        };
        dir.write(
            "a.yml",
            &webhook("tool.before", "on_timeout: continue\n"),
            0o644,
        );
        dir.write("b.yml", &webhook("tool.before", ""), 0o644);
        dir.write(
            "c.yml",
            &webhook("tool.failed", "on_timeout: continue\n"),
            0o644,
        );
        let d = dir.discover();
        assert!(d.problems.is_empty(), "{:?}", d.problems);
        let warned: Vec<String> = d
            .warnings
            .iter()
            .filter(|w| w.kind == ProblemKind::GateContinuesWithoutAnswer)
            .map(|w| w.path.file_name().unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(warned, ["a.yml"]);
    }

    #[test]
    fn symlinked_hooks_run_and_unknown_keys_warn() {
        let dir = Dir::new();
        let target = dir.hook("real.sh", "# type: session\n# patern: x");
        symlink(&target, dir.0.path().join("link.sh")).unwrap();
        let d = dir.discover();
        assert_eq!(d.hooks.len(), 2);
        assert_eq!(d.warnings.len(), 2);
        assert!(
            d.warnings[0]
                .kind
                .to_string()
                .contains("unknown front matter field 'patern'")
        );
    }

    /// A workspace with `.discobot/hooks` and a global hooks dir beside it.
    struct Both {
        _dir: tempfile::TempDir,
        ctx: Context,
        global: PathBuf,
    }

    impl Both {
        fn new() -> Both {
            let dir = tempfile::tempdir().unwrap();
            let ctx = Context {
                workspace: dir.path().join("ws"),
                session_id: "t".into(),
                state_dir: dir.path().join("state"),
            };
            let global = dir.path().join("global");
            fs::create_dir_all(ctx.hooks_dir()).unwrap();
            fs::create_dir_all(&global).unwrap();
            Both {
                _dir: dir,
                ctx,
                global,
            }
        }
        fn hook(dir: &Path, name: &str, front: &str) {
            let path = dir.join(name);
            fs::write(&path, format!("#!/bin/sh\n#---\n{front}\n#---\nexit 0\n")).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).unwrap();
        }
        fn config(&self, text: &str) {
            fs::write(Config::path(&self.ctx.workspace), text).unwrap();
        }
        fn discover(&self) -> Discovery {
            discover_workspace_with(&self.ctx, Some(&self.global))
        }
    }

    fn ids(hooks: &[Hook]) -> Vec<&str> {
        hooks.iter().map(|h| h.id.as_str()).collect()
    }

    #[test]
    fn global_hooks_come_after_the_workspace_with_their_own_ids() {
        let both = Both::new();
        Both::hook(&both.global, "a-lint.sh", "# type: file\n# pattern: '*'");
        Both::hook(
            &both.ctx.hooks_dir(),
            "lint.sh",
            "# type: file\n# pattern: '*'",
        );
        Both::hook(&both.ctx.hooks_dir(), "z.sh", "# event: tool.before");
        Both::hook(&both.global, "lint.sh", "# event: tool.before");
        let d = both.discover();
        assert!(d.problems.is_empty(), "{:?}", d.problems);
        assert_eq!(ids(&d.hooks), ["lint", "z", "global:a-lint", "global:lint"]);
        let phase1: Vec<&str> = (d.hooks.iter().filter(|h| h.phase1))
            .map(|h| h.id.as_str())
            .collect();
        assert_eq!(phase1, ["lint", "global:a-lint"]);
        let global = &d.hooks[3];
        assert_eq!(global.origin, Origin::Global);
        assert_eq!(
            global.source(),
            format!("{}:1", both.global.join("lint.sh").display())
        );
        assert_eq!(d.hooks[0].source(), ".discobot/hooks/lint.sh:1");
        let used: Vec<(Source, bool)> = d.sources.iter().map(|s| (s.source, s.used)).collect();
        assert_eq!(
            used,
            [
                (Source::Discobot, true),
                (Source::Iteratr, false),
                (Source::Autoagent, false),
                (Source::Nyzhi, false),
                (Source::Pipelines, false),
                (Source::Global, true),
            ]
        );
    }

    #[test]
    fn a_global_root_hook_is_refused_with_its_line_never_run_as_root() {
        let both = Both::new();
        Both::hook(
            &both.global,
            "setup.sh",
            "# type: session\n# blocking: true\n# run_as: root",
        );
        Both::hook(&both.global, "user.sh", "# type: session\n# run_as: user");
        Both::hook(
            &both.ctx.hooks_dir(),
            "root.sh",
            "# type: session\n# run_as: root\n# blocking: true",
        );
        let d = both.discover();
        assert_eq!(ids(&d.hooks), ["root", "global:user"]);
        assert_eq!(d.problems.len(), 1, "{:?}", d.problems);
        let problem = d.problems[0].to_string();
        let want = format!(
            "{}:5: run_as: root is refused for a global hook",
            both.global.join("setup.sh").display()
        );
        assert!(problem.starts_with(&want), "{problem}");
        assert!(
            d.hooks
                .iter()
                .all(|h| h.origin == Origin::Workspace || h.run_as == RunAs::User)
        );
    }

    #[test]
    fn config_turns_sources_off_and_a_broken_one_turns_global_hooks_off() {
        let both = Both::new();
        Both::hook(&both.ctx.hooks_dir(), "ws.sh", "# type: session");
        Both::hook(&both.global, "g.sh", "# type: session");
        let table: [(&str, &[&str], &str); 5] = [
            ("", &["ws", "global:g"], ""),
            (
                "disable_global_hooks: true\n",
                &["ws"],
                "disable_global_hooks: true",
            ),
            ("sources: [discobot]\n", &["ws"], "not in sources"),
            ("sources: [global]\n", &["global:g"], ""),
            (
                "sources: auto\ncolour: red\n",
                &["ws"],
                "hookvisor.yml is broken",
            ),
        ];
        for (text, want, global_note) in table {
            both.config(text);
            let d = both.discover();
            assert_eq!(ids(&d.hooks), want, "{text:?}");
            let global = d
                .sources
                .iter()
                .find(|s| s.source == Source::Global)
                .unwrap();
            if !global_note.is_empty() {
                assert!(
                    !global.used && global.note.contains(global_note),
                    "{text:?}: {global}"
                );
            }
            let broken = text.contains("colour");
            assert_eq!(
                d.problems.len(),
                usize::from(broken),
                "{text:?}: {:?}",
                d.problems
            );
            if broken {
                let problem = d.problems[0].to_string();
                let want = format!(
                    "{}:2: unknown field `colour`",
                    Config::path(&both.ctx.workspace).display()
                );
                assert!(problem.starts_with(&want), "{problem}");
                assert_eq!(d.config, Config::fallback());
            }
        }
    }

    #[test]
    fn the_global_hooks_dir_of_the_environment() {
        type Vars = &'static [(&'static str, &'static str)];
        let table: [(Vars, Option<&str>); 5] = [
            (&[("HOME", "/h")], Some("/h/.config/hookvisor/hooks")),
            (
                &[("HOME", "/h"), ("XDG_CONFIG_HOME", "/x")],
                Some("/x/hookvisor/hooks"),
            ),
            (
                &[("HOME", "/h"), ("XDG_CONFIG_HOME", "rel")],
                Some("/h/.config/hookvisor/hooks"),
            ),
            (
                &[("HOME", "/h"), ("HOOKVISOR_GLOBAL_HOOKS", "/g")],
                Some("/g"),
            ),
            (&[("HOME", "")], None),
        ];
        for (vars, want) in table {
            let got = global_hooks_dir(|name| {
                vars.iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| OsString::from(v))
            });
            assert_eq!(got.as_deref(), want.map(Path::new), "{vars:?}");
        }
    }
}

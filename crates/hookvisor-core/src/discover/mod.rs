//! Finding the hooks of a workspace: every top-level, non-hidden file of `.discobot/hooks/` is
//! either a [`Hook`] or a [`Problem`] that says why it will not run. Nothing is dropped silently.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::frontmatter::{self, Fields, FrontMatterError, Note, Other, WORD_FIELDS};
use crate::hook::{Hook, HookKind, Problem, ProblemKind, RunAs};
use crate::pattern::Pattern;

/// How much of a script is read to find its front matter.
const HEAD_LIMIT: u64 = 64 * 1024;

/// Extensions stripped from a file name to make its id (case-insensitive, one only).
const SCRIPT_EXTENSIONS: [&str; 9] = ["sh", "bash", "zsh", "py", "js", "ts", "rb", "pl", "php"];

/// Front matter keys hookvisor reads; others are reported as warnings.
const KNOWN_FIELDS: [&str; 9] = [
    "name",
    "type",
    "description",
    "run_as",
    "blocking",
    "pattern",
    "notify_llm",
    "timeout",
    "retries",
];

/// The most `retries` a session hook may ask for.
const MAX_RETRIES: u32 = 100;

/// The result of scanning a hooks directory.
#[derive(Debug, Clone, Default)]
pub struct Discovery {
    /// Hooks that can run, in file-name order.
    pub hooks: Vec<Hook>,
    /// Files that will not run, with the reason, in file-name order.
    pub problems: Vec<Problem>,
    /// Things that do not stop a hook but are probably mistakes (unknown front matter keys,
    /// values YAML reads otherwise than the line shows).
    pub warnings: Vec<Problem>,
    /// Front matter `retries` of the session hooks that give it, by hook id; the others get
    /// [`DEFAULT_RETRIES`](crate::DEFAULT_RETRIES).
    pub retries: BTreeMap<String, u32>,
}

impl Discovery {
    /// The hook with this id, if it was discovered.
    pub fn get(&self, id: &str) -> Option<&Hook> {
        self.hooks.iter().find(|h| h.id == id)
    }

    /// The hooks of one kind, in discovery order.
    pub fn of_kind(&self, kind: HookKind) -> impl Iterator<Item = &Hook> {
        self.hooks.iter().filter(move |h| h.kind == kind)
    }
}

/// Scans `hooks_dir` (normally `<workspace>/.discobot/hooks`).
///
/// A missing directory means no hooks. Directories inside it are skipped (hooks are top-level
/// files); hidden entries (starting with `.`) are ignored.
pub fn discover(hooks_dir: &Path) -> Discovery {
    let mut discovery = Discovery::default();
    let entries = match fs::read_dir(hooks_dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return discovery,
        Err(e) => {
            discovery.problems.push(Problem {
                path: hooks_dir.to_owned(),
                kind: ProblemKind::HooksDirUnreadable {
                    error: e.to_string(),
                },
                declared: None,
            });
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
        match read_hook(&path) {
            Ok(Some(read)) => {
                let HookFile {
                    hook,
                    unknown,
                    notes,
                    retries,
                } = read;
                let mut warn = |kind: ProblemKind| {
                    discovery.warnings.push(Problem {
                        path: path.clone(),
                        kind,
                        declared: Some(hook.kind),
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
                match retries {
                    Some(retries) if hook.kind == HookKind::Session => {
                        discovery.retries.insert(hook.id.clone(), retries);
                    }
                    Some(_) => warn(ProblemKind::RetriesIgnored { kind: hook.kind }),
                    None => {}
                }
                if hook.kind == HookKind::Session && hook.run_as == RunAs::Root && !hook.blocking {
                    warn(ProblemKind::RootRunsBlocking);
                }
                candidates.push(hook);
            }
            Ok(None) => {}
            Err(problem) => discovery.problems.push(problem),
        }
    }

    let mut by_id: BTreeMap<&str, Vec<&Hook>> = BTreeMap::new();
    for hook in &candidates {
        by_id.entry(&hook.id).or_default().push(hook);
    }
    let duplicated: Vec<(String, Vec<(PathBuf, HookKind)>)> = by_id
        .into_iter()
        .filter(|(_, hooks)| hooks.len() > 1)
        .map(|(id, hooks)| {
            (
                id.to_owned(),
                hooks.iter().map(|h| (h.path.clone(), h.kind)).collect(),
            )
        })
        .collect();
    for (id, hooks) in &duplicated {
        for (path, kind) in hooks {
            let others: Vec<String> = hooks
                .iter()
                .filter(|(p, _)| p != path)
                .map(|(p, _)| file_name(p))
                .collect();
            discovery.problems.push(Problem {
                path: path.clone(),
                kind: ProblemKind::DuplicateId {
                    id: id.clone(),
                    others,
                },
                declared: Some(*kind),
            });
        }
    }
    for (id, _) in &duplicated {
        discovery.retries.remove(id);
    }
    discovery.hooks = candidates
        .into_iter()
        .filter(|h| !duplicated.iter().any(|(id, _)| *id == h.id))
        .collect();
    discovery.problems.sort_by(|a, b| a.path.cmp(&b.path));
    discovery
}

/// The hook id of a file name: strip one script extension, `.` → `-`, lowercase, keep
/// `[a-z0-9_-]`, trim `-` (`foo.bar.sh` → `foo-bar`, `test (1).sh` → `test1`).
pub fn hook_id(file_name: &str) -> String {
    let stem = match file_name.rsplit_once('.') {
        Some((stem, ext))
            if SCRIPT_EXTENSIONS
                .iter()
                .any(|known| ext.eq_ignore_ascii_case(known)) =>
        {
            stem
        }
        _ => file_name,
    };
    let id: String = stem
        .chars()
        .map(|c| {
            if c == '.' {
                '-'
            } else {
                c.to_ascii_lowercase()
            }
        })
        .filter(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '_' | '-'))
        .collect();
    id.trim_matches('-').to_owned()
}

fn file_name(path: &Path) -> String {
    path.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// What a hook file says besides the [`Hook`] itself.
struct HookFile {
    hook: Hook,
    /// Front matter keys hookvisor does not know.
    unknown: Vec<String>,
    /// Where the front matter's readings disagree (front matter rule 7).
    notes: Vec<Note>,
    /// Front matter `retries`, when given.
    retries: Option<u32>,
}

/// The warning for a field read otherwise than another reader would (front matter rule 7), or
/// `None` when both readings configure the hook alike (`notify_llm: False` is `false` either
/// way) or the value is a problem already reported.
fn disagreement(note: Note) -> Option<ProblemKind> {
    let Note {
        key,
        line,
        used,
        other,
    } = note;
    match other {
        Other::Discobot(discobot) => Some(ProblemKind::DiscobotReadsOtherwise {
            line,
            key: key.to_owned(),
            used,
            discobot,
        }),
        Other::Yaml(yaml) => {
            let meaning = meaning(key, &used)?;
            if yaml.as_deref().and_then(|y| self::meaning(key, y)) == Some(meaning) {
                return None;
            }
            Some(ProblemKind::YamlReadsOtherwise {
                line,
                key: key.to_owned(),
                used,
                yaml,
            })
        }
    }
}

/// What a field's value configures, to compare two readings of it; `None` for a value that is
/// a problem (or, for text, empty).
fn meaning(key: &str, value: &str) -> Option<String> {
    if !WORD_FIELDS.contains(&key) {
        let text = value.trim_matches([' ', '\t', '\n']);
        return (!text.is_empty()).then(|| text.to_owned());
    }
    match key {
        "type" => value
            .parse::<HookKind>()
            .ok()
            .map(|k| k.as_str().to_owned()),
        "run_as" => value.parse::<RunAs>().ok().map(|r| r.as_str().to_owned()),
        "blocking" | "notify_llm" => parse_bool(key, value).ok().map(|b| b.to_string()),
        "timeout" => parse_timeout(value).ok().map(|t| t.as_secs().to_string()),
        "retries" => parse_retries(value).ok().map(|r| r.to_string()),
        _ => Some(value.to_owned()),
    }
}

/// Reads one entry: `Ok(None)` for a directory, `Err` for a file that will not run.
fn read_hook(path: &Path) -> Result<Option<HookFile>, Problem> {
    let refuse = |kind: ProblemKind, declared: Option<HookKind>| Problem {
        path: path.to_owned(),
        kind,
        declared,
    };
    // A file refused before its head is read still says which kind of hook it meant to be.
    let declared_by_file = || {
        read_head(path)
            .ok()
            .and_then(|head| declared_kind(&String::from_utf8_lossy(&head)))
    };
    let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
        return Err(refuse(ProblemKind::NameNotUtf8, declared_by_file()));
    };
    let meta = match fs::metadata(path) {
        Ok(meta) => meta,
        Err(_) if fs::symlink_metadata(path).is_ok() => {
            let target = fs::read_link(path)
                .map(|t| t.display().to_string())
                .unwrap_or_default();
            return Err(refuse(ProblemKind::BrokenSymlink { target }, None));
        }
        Err(e) => {
            let error = e.to_string();
            return Err(refuse(ProblemKind::Inaccessible { error }, None));
        }
    };
    if meta.is_dir() {
        return Ok(None);
    }
    if !meta.is_file() {
        return Err(refuse(ProblemKind::NotRegularFile, None));
    }
    let id = hook_id(name);
    if id.is_empty() {
        return Err(refuse(ProblemKind::EmptyId, declared_by_file()));
    }
    let head = read_head(path).map_err(|e| {
        let error = e.to_string();
        refuse(ProblemKind::Unreadable { error }, None)
    })?;
    let text = String::from_utf8_lossy(&head);
    let refuse = |kind: ProblemKind| refuse(kind, declared_kind(&text));
    if !text.starts_with("#!") {
        if text.starts_with("\u{7f}ELF") {
            return Err(refuse(ProblemKind::Binary));
        }
        return Err(refuse(ProblemKind::NoShebang));
    }
    let front = frontmatter::read(&text).map_err(|e| {
        refuse(match e {
            FrontMatterError::Crlf => ProblemKind::CrlfLineEndings {
                path: path.to_owned(),
            },
            other => ProblemKind::FrontMatter(other),
        })
    })?;
    if meta.permissions().mode() & 0o111 == 0 {
        return Err(refuse(ProblemKind::NotExecutable {
            path: path.to_owned(),
        }));
    }
    let fields = &front.fields;
    let (hook, retries) = hook_from_fields(id, path, fields).map_err(refuse)?;
    let unknown = fields
        .keys()
        .filter(|k| !KNOWN_FIELDS.contains(&k.as_str()))
        .cloned()
        .collect();
    Ok(Some(HookFile {
        hook,
        unknown,
        notes: front.notes,
        retries,
    }))
}

/// The kind of hook a file's head declares: its front matter's `type`, read as pre-commit
/// always read it (CRs dropped); without readable front matter, `pre-commit` when the file
/// mentions it, since a commit must hear of a broken pre-commit hook.
fn declared_kind(text: &str) -> Option<HookKind> {
    match frontmatter::parse(&text.replace('\r', "")) {
        Ok(fields) => fields.get("type").and_then(|t| t.trim().parse().ok()),
        Err(_) => text.contains("pre-commit").then_some(HookKind::PreCommit),
    }
}

fn read_head(path: &Path) -> std::io::Result<Vec<u8>> {
    let mut head = Vec::new();
    fs::File::open(path)?
        .take(HEAD_LIMIT)
        .read_to_end(&mut head)?;
    Ok(head)
}

/// Turns front matter fields into a hook, applying the defaults of DESIGN.md, and its
/// `retries` when given.
///
/// `name` and `description` are free text: trimmed, and empty means absent. Every other field
/// is taken as written (front matter rules 6 and 7) and must have a value when it is given: an
/// odd value is a problem, never a default, and only `run_as: root` gives root.
fn hook_from_fields(
    id: String,
    path: &Path,
    fields: &Fields,
) -> Result<(Hook, Option<u32>), ProblemKind> {
    let text = |key: &str| {
        fields
            .get(key)
            .map(|v| v.trim_matches([' ', '\t', '\n']))
            .filter(|v| !v.is_empty())
    };
    let field = |key: &str| -> Result<Option<&str>, ProblemKind> {
        match fields.get(key).map(String::as_str) {
            Some("") => Err(ProblemKind::NoValue {
                key: key.to_owned(),
            }),
            other => Ok(other),
        }
    };
    let kind: HookKind = field("type")?.ok_or(ProblemKind::MissingType)?.parse()?;
    let run_as = match field("run_as")? {
        Some(value) => value.parse::<RunAs>()?,
        None => RunAs::User,
    };
    let pattern = match field("pattern")? {
        Some(source) => Some(Pattern::new(source)?),
        None if kind == HookKind::File => return Err(ProblemKind::MissingPattern),
        None => None,
    };
    let timeout = match field("timeout")? {
        Some(value) => parse_timeout(value)?,
        None => kind.default_timeout(),
    };
    let retries = field("retries")?.map(parse_retries).transpose()?;
    let hook = Hook {
        name: text("name").map_or_else(|| id.clone(), str::to_owned),
        id,
        kind,
        path: path.to_owned(),
        description: text("description").map(str::to_owned),
        run_as,
        blocking: field("blocking")?
            .map(|v| parse_bool("blocking", v))
            .transpose()?
            .unwrap_or(false),
        pattern,
        notify_llm: field("notify_llm")?
            .map(|v| parse_bool("notify_llm", v))
            .transpose()?
            .unwrap_or(true),
        timeout,
    };
    Ok((hook, retries))
}

/// How many times a failed session hook is run again: a whole number from 0 to
/// [`MAX_RETRIES`], digits only.
fn parse_retries(value: &str) -> Result<u32, ProblemKind> {
    match value
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| value.parse::<u32>())
    {
        Some(Ok(n)) if n <= MAX_RETRIES => Ok(n),
        _ => Err(ProblemKind::InvalidRetries {
            value: value.to_owned(),
            max: MAX_RETRIES,
        }),
    }
}

/// `true|yes|1|on` and `false|no|0|off`, in any case.
fn parse_bool(key: &str, value: &str) -> Result<bool, ProblemKind> {
    match value.to_ascii_lowercase().as_str() {
        "true" | "yes" | "1" | "on" => Ok(true),
        "false" | "no" | "0" | "off" => Ok(false),
        _ => Err(ProblemKind::InvalidBool {
            key: key.to_owned(),
            value: value.to_owned(),
        }),
    }
}

/// Seconds, optionally with an `s`, `m` or `h` suffix; must be positive.
fn parse_timeout(value: &str) -> Result<Duration, ProblemKind> {
    let (digits, unit) = match value.char_indices().last() {
        Some((i, 's')) => (&value[..i], 1),
        Some((i, 'm')) => (&value[..i], 60),
        Some((i, 'h')) => (&value[..i], 3600),
        _ => (value, 1),
    };
    // `parse` takes a leading `+`; a timeout is digits only.
    match digits
        .bytes()
        .all(|b| b.is_ascii_digit())
        .then(|| digits.parse::<u64>())
    {
        Some(Ok(n)) if n > 0 => Ok(Duration::from_secs(n.saturating_mul(unit))),
        _ => Err(ProblemKind::InvalidTimeout {
            value: value.to_owned(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

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

    struct Dir(tempfile::TempDir);

    impl Dir {
        fn new() -> Dir {
            Dir(tempfile::tempdir().unwrap())
        }
        fn write(&self, name: &str, text: &str, mode: u32) -> PathBuf {
            let path = self.0.path().join(name);
            fs::write(&path, text).unwrap();
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).unwrap();
            path
        }
        fn hook(&self, name: &str, front: &str) -> PathBuf {
            self.write(
                name,
                &format!("#!/bin/sh\n#---\n{front}\n#---\nexit 0\n"),
                0o755,
            )
        }
        fn discover(&self) -> Discovery {
            discover(self.0.path())
        }
        fn reason(&self, name: &str) -> String {
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

    /// Pre-commit keeps the problems of pre-commit hooks (and of files it cannot read) from
    /// what discovery stored, without reading the files again.
    #[test]
    fn problems_say_which_kind_of_hook_the_file_declared() {
        let dir = Dir::new();
        dir.hook("commit.sh", "# type: pre-commit\n# run_as: admin");
        dir.hook("session.sh", "# type: session\n# run_as: admin");
        dir.hook("untyped.sh", "# name: x");
        dir.write(
            "noexec.sh",
            "#!/bin/sh\n#---\n# type: pre-commit\n#---\n",
            0o644,
        );
        dir.write(
            "crlf.sh",
            "#!/bin/sh\r\n#---\r\n# type: pre-commit\r\n#---\r\n",
            0o755,
        );
        dir.write("mentions.sh", "#!/bin/sh\n# a pre-commit hook\n", 0o755);
        dir.write("silent.sh", "#!/bin/sh\necho hi\n", 0o755);
        dir.hook("dup.sh", "# type: pre-commit");
        dir.hook("DUP.py", "# type: file\n# pattern: x");
        symlink(dir.0.path().join("gone"), dir.0.path().join("broken.sh")).unwrap();

        let d = dir.discover();
        let got: Vec<(String, Option<HookKind>, bool)> = d
            .problems
            .iter()
            .map(|p| {
                let name = p.path.file_name().unwrap().to_string_lossy().into_owned();
                (name, p.declared, p.may_be(HookKind::PreCommit))
            })
            .collect();
        let want = [
            ("DUP.py", Some(HookKind::File), false),
            ("broken.sh", None, true),
            ("commit.sh", Some(HookKind::PreCommit), true),
            ("crlf.sh", Some(HookKind::PreCommit), true),
            ("dup.sh", Some(HookKind::PreCommit), true),
            ("mentions.sh", Some(HookKind::PreCommit), true),
            ("noexec.sh", Some(HookKind::PreCommit), true),
            ("session.sh", Some(HookKind::Session), false),
            ("silent.sh", None, false),
            ("untyped.sh", None, false),
        ];
        let want: Vec<(String, Option<HookKind>, bool)> = want
            .into_iter()
            .map(|(name, kind, may)| (name.to_owned(), kind, may))
            .collect();
        assert_eq!(got, want);
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

    /// Discovers one hook whose front matter (after `#!/bin/sh`, between `---` lines) is `body`:
    /// the hook, or the reason it is a problem.
    fn one_hook(body: &str) -> Result<Hook, String> {
        let dir = Dir::new();
        dir.write(
            "h.sh",
            &format!("#!/bin/sh\n---\n{body}\n---\nexit 0\n"),
            0o755,
        );
        let mut d = dir.discover();
        match (d.hooks.pop(), d.problems.pop()) {
            (Some(hook), None) => Ok(hook),
            (None, Some(problem)) => Err(problem.kind.to_string()),
            other => panic!("{body:?}: {other:?}"),
        }
    }

    /// Only `run_as: root` written as such gives root. Each other spelling that YAML or the flat
    /// reader could turn into "root" (padding, trailing text, lists, merge keys, aliases,
    /// escapes, block scalars, repeated keys) is a problem naming the fix, never root.
    #[test]
    fn run_as_is_root_only_when_written_root() {
        use RunAs::{Root, User};
        let table: &[(&str, Result<RunAs, &str>)] = &[
            ("run_as: root", Ok(Root)),
            ("run_as: \"root\"", Ok(Root)),
            ("run_as: 'root'  # needs apt", Ok(Root)),
            ("run_as: root\npattern: *.go", Ok(Root)),
            ("run_as: user", Ok(User)),
            ("name: x", Ok(User)),
            (
                "run_as: \" root\"",
                Err("invalid run_as ' root'; use 'root' or 'user'"),
            ),
            ("run_as: 'root '", Err("invalid run_as 'root '")),
            ("run_as: root\u{3000}", Err("invalid run_as 'root\u{3000}'")),
            ("run_as: Root", Err("invalid run_as 'Root'")),
            ("run_as: 'root'x", Err("text after the closing quote")),
            ("run_as: \"root\" x", Err("text after the closing quote")),
            (
                "run_as: 'root'x\npattern: *.go",
                Err("text after the closing quote"),
            ),
            ("run_as: [root]", Err("'run_as' is a list")),
            ("run_as:\n  - root", Err("'run_as' is a list")),
            ("<<: {run_as: root}", Err("merge key")),
            ("base: &b root\nrun_as: *b", Err("invalid run_as '*b'")),
            ("run_as: user\nrun_as: root", Err("'run_as' is given twice")),
            ("run_as: root\nrun_as: root", Err("'run_as' is given twice")),
            ("run_as: \"\\x72oot\"", Err("invalid run_as '\\x72oot'")),
            ("run_as: >-\n  root", Err("invalid run_as '>-'")),
            ("run_as: |\n  root", Err("invalid run_as '|'")),
            (
                "? run_as\n: root",
                Err("'run_as: VALUE' on a line of its own"),
            ),
            ("{run_as: root}", Err("'{run_as' is not a field name")),
            ("run_as: !custom root", Err("invalid run_as '!custom root'")),
            ("run_as: ~", Err("invalid run_as '~'")),
            ("run_as:", Err("'run_as' has no value")),
            ("name: \"x\nrun_as: root\"", Err("invalid run_as 'root\"'")),
        ];
        let mut wrong = Vec::new();
        let flow = one_hook("{type: session, run_as: root}").map(|h| h.run_as);
        if !flow
            .as_ref()
            .is_err_and(|r| r.contains("on a line of its own"))
        {
            wrong.push(format!("a flow mapping: got {flow:?}"));
        }
        for (field, expected) in table {
            let got = one_hook(&format!("type: session\n{field}")).map(|h| h.run_as);
            let ok = match (&got, expected) {
                (Ok(a), Ok(b)) => a == b,
                (Err(reason), Err(fragment)) => reason.contains(fragment),
                _ => false,
            };
            if !ok {
                wrong.push(format!("{field:?}: got {got:?}, want {expected:?}"));
            }
        }
        assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    }

    /// `notify_llm`, `blocking`, `type` and `timeout` take one word from their line: odd values
    /// (padding, lists, floats, empty, null, trailing text, repeats) are problems, not defaults.
    #[test]
    fn odd_values_of_the_other_word_fields_are_problems() {
        // (front matter after `type: file` + `pattern`, or a whole one, and the expected
        // (notify_llm, blocking) or a fragment of the reason)
        type Expected = Result<(bool, bool), &'static str>;
        let table: &[(&str, Expected)] = &[
            ("notify_llm: false", Ok((false, false))),
            ("notify_llm: No", Ok((false, false))),
            ("notify_llm: 0", Ok((false, false))),
            ("notify_llm: \"false\"", Ok((false, false))),
            ("notify_llm: true", Ok((true, false))),
            ("description: x", Ok((true, false))),
            ("blocking: yes", Ok((true, true))),
            ("notify_llm: \"false \"", Err("invalid notify_llm 'false '")),
            ("notify_llm: [false]", Err("'notify_llm' is a list")),
            ("notify_llm: 0.0", Err("invalid notify_llm '0.0'")),
            ("notify_llm: 00", Err("invalid notify_llm '00'")),
            ("notify_llm:", Err("'notify_llm' has no value")),
            ("notify_llm: ~", Err("invalid notify_llm '~'")),
            ("notify_llm: ''", Err("'notify_llm' has no value")),
            ("notify_llm: 'false'x", Err("text after the closing quote")),
            (
                "notify_llm: false\nnotify_llm: true",
                Err("'notify_llm' is given twice"),
            ),
            ("notify_llm: maybe", Err("invalid notify_llm 'maybe'")),
            ("blocking: 1.0", Err("invalid blocking '1.0'")),
            ("blocking:", Err("'blocking' has no value")),
            ("blocking: [true]", Err("'blocking' is a list")),
            (
                "blocking: true\nblocking: false",
                Err("'blocking' is given twice"),
            ),
            ("timeout: 1e3", Err("invalid timeout '1e3'")),
            ("timeout: [30]", Err("'timeout' is a list")),
            ("timeout:", Err("'timeout' has no value")),
            ("type: session", Err("'type' is given twice")),
            ("pattern: '*.rs'", Err("'pattern' is given twice")),
            ("pattern:", Err("'pattern' is given twice")),
        ];
        let mut wrong = Vec::new();
        for (field, expected) in table {
            let got = one_hook(&format!("type: file\npattern: '*.go'\n{field}"))
                .map(|h| (h.notify_llm, h.blocking));
            let ok = match (&got, expected) {
                (Ok(a), Ok(b)) => a == b,
                (Err(reason), Err(fragment)) => reason.contains(fragment),
                _ => false,
            };
            if !ok {
                wrong.push(format!("{field:?}: got {got:?}, want {expected:?}"));
            }
        }
        let whole: &[(&str, &str)] = &[
            ("type: [session]", "'type' is a list"),
            ("type: ' session'", "unknown type ' session'"),
            ("type: pre-commit\npattern:", "'pattern' has no value"),
            ("type: pre-commit\npattern: ''", "'pattern' has no value"),
        ];
        for (body, fragment) in whole {
            let got = one_hook(body).map(|h| h.id);
            if !got.as_ref().is_err_and(|r| r.contains(fragment)) {
                wrong.push(format!("{body:?}: got {got:?}, want {fragment:?}"));
            }
        }
        assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    }

    /// Discovers one hook whose front matter (after `#!/bin/sh`, between `---` lines) is `body`:
    /// the hook or the reason it is a problem, and the warnings.
    fn one_hook_warned(body: &str) -> (Result<Hook, String>, Vec<String>) {
        let dir = Dir::new();
        dir.write(
            "h.sh",
            &format!("#!/bin/sh\n---\n{body}\n---\nexit 0\n"),
            0o755,
        );
        let mut d = dir.discover();
        let warnings = d.warnings.iter().map(|w| w.kind.to_string()).collect();
        match (d.hooks.pop(), d.problems.pop()) {
            (Some(hook), None) => (Ok(hook), warnings),
            (None, Some(problem)) => (Err(problem.kind.to_string()), warnings),
            other => panic!("{body:?}: {other:?}"),
        }
    }

    /// Front matter rule 7: where YAML would read a discobot-era field otherwise than its line
    /// shows, the line wins and `check` says so; where both agree, or only the meaning of the
    /// spelling differs, nothing is said.
    #[test]
    fn readings_that_disagree_keep_the_line_and_warn() {
        // (front matter after `type: file`, name, pattern, a fragment of the one warning)
        let table: &[(&str, &str, &str, Option<&str>)] = &[
            (
                "name: 1.10\npattern: x",
                "1.10",
                "x",
                Some("YAML reads '1.1'"),
            ),
            (
                "name: True\npattern: x",
                "True",
                "x",
                Some("YAML reads 'true'"),
            ),
            (
                "name: null\npattern: x",
                "null",
                "x",
                Some("YAML reads no value"),
            ),
            ("name: '1.10'\npattern: x", "1.10", "x", None),
            ("name: Go fmt\npattern: '*.go'", "Go fmt", "*.go", None),
            ("pattern: 1.10", "h", "1.10", Some("as written, '1.10'")),
            (
                "pattern: '*.go', '*.ts'",
                "h",
                "*.go, *.ts",
                Some("read as the globs '*.go, *.ts'; discobot read"),
            ),
            ("pattern: x\nnotify_llm: False", "h", "x", None),
            ("pattern: x\ntimeout: 010", "h", "x", None),
            ("pattern: x\nnotify_llm: no", "h", "x", None),
        ];
        let mut wrong = Vec::new();
        for &(body, name, pattern, warning) in table {
            let (hook, warnings) = one_hook_warned(&format!("type: file\n{body}"));
            let got = hook.map(|h| (h.name, h.pattern.map(|p| p.as_str().to_owned())));
            if got != Ok((name.to_owned(), Some(pattern.to_owned()))) {
                wrong.push(format!("{body:?}: got {got:?}"));
            }
            let ok = match warning {
                None => warnings.is_empty(),
                Some(fragment) => warnings.len() == 1 && warnings[0].contains(fragment),
            };
            if !ok {
                wrong.push(format!("{body:?}: warnings {warnings:?}, want {warning:?}"));
            }
        }
        assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    }

    /// `retries` takes a whole number from 0 to 100, written on its own line; other hooks than
    /// session hooks ignore it, with a warning.
    #[test]
    fn retries_spellings() {
        let table: &[(&str, Result<Option<&str>, &str>)] = &[
            ("type: session\nretries: 0", Ok(None)),
            ("type: session\nretries: 3", Ok(None)),
            ("type: session\nretries: 100", Ok(None)),
            ("type: session\nretries: 101", Err("invalid retries '101'")),
            ("type: session\nretries: -1", Err("invalid retries '-1'")),
            ("type: session\nretries: 1.5", Err("invalid retries '1.5'")),
            (
                "type: session\nretries: three",
                Err("invalid retries 'three'"),
            ),
            ("type: session\nretries:", Err("'retries' has no value")),
            ("type: session\nretries: [1]", Err("'retries' is a list")),
            (
                "type: file\npattern: x\nretries: 2",
                Ok(Some("retries applies to session hooks only")),
            ),
        ];
        let mut wrong = Vec::new();
        for &(body, expected) in table {
            let (hook, warnings) = one_hook_warned(body);
            let ok = match (&hook, expected) {
                (Ok(_), Ok(None)) => warnings.is_empty(),
                (Ok(_), Ok(Some(fragment))) => {
                    warnings.len() == 1 && warnings[0].contains(fragment)
                }
                (Err(reason), Err(fragment)) => reason.contains(fragment),
                _ => false,
            };
            if !ok {
                wrong.push(format!(
                    "{body:?}: got {hook:?} {warnings:?}, want {expected:?}"
                ));
            }
        }
        assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    }

    #[test]
    fn bool_and_timeout_spellings() {
        for (v, b) in [
            ("TRUE", true),
            ("Yes", true),
            ("1", true),
            ("false", false),
            ("NO", false),
            ("0", false),
            ("Off", false),
        ] {
            assert_eq!(parse_bool("k", v), Ok(b), "{v}");
        }
        for (v, secs) in [("30", 30), ("30s", 30), ("2m", 120), ("1h", 3600)] {
            assert_eq!(parse_timeout(v), Ok(Duration::from_secs(secs)), "{v}");
        }
        for bad in ["0", "-1", "m", "1.5", "ten"] {
            assert!(parse_timeout(bad).is_err(), "{bad}");
        }
    }
}

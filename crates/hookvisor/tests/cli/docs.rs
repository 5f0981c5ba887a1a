//! The book is true (issue 31): every hook file and `console` example of the README and of the
//! book's guide and reference runs through the real binary, the CLI reference is clap's own help,
//! and no link or citation points outside the repository.
//!
//! How a page's examples run (docs/book.toml points authors here):
//!
//! - Each page gets a fresh workspace: a git repository with one empty commit, HOME and
//!   HOOKVISOR_STATE_DIR in fresh directories, `hookvisor` first on PATH, no other variable of
//!   ours. Output names them `[WORKSPACE]`, `[HOME]` and `[STATE]`.
//! - A fenced block whose info string holds `file=PATH` is written to PATH (0755 when it starts
//!   with `#!`); `hookvisor check` must then name no problem with it, or, with `check=fail`, one.
//! - A ```` ```console ```` block runs: each `$ COMMAND` line with `sh -c` in the workspace,
//!   stdout and stderr together, checked against the lines up to the next `$ ` with snapbox's
//!   wildcards (`[..]` within a line, `...` for lines). `? N` right after the command is its
//!   exit status (default 0).

use std::fmt::Write as _;
use std::fs;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use hookvisor_testkit::git;
use snapbox::report::Palette;
use snapbox::{Assert, Data, Redactions};

/// The repository's root, or `HOOKVISOR_DOCS_ROOT`: another checkout's book, checked with this
/// build (for writing the book in a worktree without building there).
fn root() -> PathBuf {
    let root = std::env::var_os("HOOKVISOR_DOCS_ROOT").map(PathBuf::from);
    let root = root.unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../.."));
    root.canonicalize().unwrap()
}

/// The pages whose examples run: the README and the book's own chapters (the contract and
/// the upstream systems' descriptions are quoted, not run).
fn pages() -> Vec<PathBuf> {
    let root = root();
    let mut pages = vec![root.join("README.md"), root.join("docs/introduction.md")];
    for dir in ["docs/guide", "docs/reference"] {
        let mut found: Vec<PathBuf> = fs::read_dir(root.join(dir))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|e| e == "md"))
            .collect();
        found.sort();
        pages.extend(found);
    }
    pages
}

/// A fenced code block: its info string, first line number (1-based) and content.
struct Block {
    info: String,
    line: usize,
    text: String,
}

/// The fenced blocks of a markdown text, also those indented in lists.
fn blocks(markdown: &str) -> Vec<Block> {
    let mut out = Vec::new();
    // The open block: its fence's indent and characters, and what it holds so far.
    let mut open: Option<(usize, String, Block)> = None;
    for (n, line) in markdown.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let fence: String = trimmed
            .chars()
            .take_while(|&c| c == '`' || c == '~')
            .collect();
        match &mut open {
            None if fence.len() >= 3 && fence.chars().all(|c| c == fence.as_bytes()[0] as char) => {
                let info = trimmed[fence.len()..].trim().to_string();
                open = Some((
                    indent,
                    fence,
                    Block {
                        info,
                        line: n + 2,
                        text: String::new(),
                    },
                ));
            }
            None => {}
            Some((_, f, _)) if trimmed.trim_end() == fence && fence.len() >= f.len() => {
                out.push(open.take().unwrap().2);
            }
            Some((indent, _, block)) => {
                let strip = line.len() - line.trim_start_matches(' ').len();
                block.text.push_str(&line[strip.min(*indent)..]);
                block.text.push('\n');
            }
        }
    }
    out
}

/// One page's workspace and the paths its output names.
struct PageRun {
    _dir: tempfile::TempDir,
    workspace: PathBuf,
    home: PathBuf,
    state: PathBuf,
    assert: Assert,
}

impl PageRun {
    fn new() -> PageRun {
        let dir = tempfile::tempdir().unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (workspace, home, state) = (base.join("ws"), base.join("home"), base.join("state"));
        for d in [&workspace, &home, &state] {
            fs::create_dir(d).unwrap();
        }
        git(&workspace, &["init", "-q", "-b", "main"]);
        git(&workspace, &["config", "user.name", "Docs"]);
        git(&workspace, &["config", "user.email", "docs@example.com"]);
        git(&workspace, &["commit", "-q", "--allow-empty", "-m", "init"]);
        let mut redactions = Redactions::new();
        for (name, path) in [
            ("[WORKSPACE]", &workspace),
            ("[HOME]", &home),
            ("[STATE]", &state),
        ] {
            redactions.insert(name, path.display().to_string()).unwrap();
        }
        let assert = Assert::new()
            .redact_with(redactions)
            .palette(Palette::plain());
        PageRun {
            _dir: dir,
            workspace,
            home,
            state,
            assert,
        }
    }

    /// Runs `script` with `sh -c` in the workspace: its exit status and output (both streams).
    fn sh(&self, script: &str) -> (i32, String) {
        let bin = Path::new(env!("CARGO_BIN_EXE_hookvisor")).parent().unwrap();
        let (mut reader, writer) = std::io::pipe().unwrap();
        let mut child = Command::new("timeout")
            .args(["120", "sh", "-c", script])
            .current_dir(&self.workspace)
            .env_clear()
            .env(
                "PATH",
                format!(
                    "{}:/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
                    bin.display()
                ),
            )
            .env("HOME", &self.home)
            .env("HOOKVISOR_STATE_DIR", &self.state)
            .env("LC_ALL", "C")
            .stdin(Stdio::null())
            .stdout(writer.try_clone().unwrap())
            .stderr(writer)
            .spawn()
            .unwrap();
        let mut output = String::new();
        reader.read_to_string(&mut output).unwrap();
        let status = child.wait().unwrap();
        (status.code().unwrap_or(-1), output)
    }

    /// Runs one block of `page`; each problem is a line added to `failures`.
    fn run(&self, page: &str, block: &Block, failures: &mut String) {
        let mut words = block.info.split_whitespace();
        let lang = words.next().unwrap_or("");
        let attrs: Vec<&str> = words.collect();
        if let Some(path) = attrs.iter().find_map(|a| a.strip_prefix("file=")) {
            self.write_file(page, block, path, attrs.contains(&"check=fail"), failures);
        } else if lang == "console" {
            self.console(page, block, failures);
        }
    }

    fn write_file(
        &self,
        page: &str,
        block: &Block,
        path: &str,
        broken: bool,
        failures: &mut String,
    ) {
        let file = self.workspace.join(path);
        fs::create_dir_all(file.parent().unwrap()).unwrap();
        fs::write(&file, &block.text).unwrap();
        if block.text.starts_with("#!") {
            fs::set_permissions(&file, fs::Permissions::from_mode(0o755)).unwrap();
        }
        let (_, problems) = self.sh("hookvisor check");
        let named = format!("{}:", file.display());
        let mine: Vec<&str> = problems.lines().filter(|l| l.starts_with(&named)).collect();
        if mine.is_empty() == broken {
            let want = if broken { "a problem" } else { "no problem" };
            let _ = writeln!(
                failures,
                "{page}:{}: {path}: `hookvisor check` should name {want}, it said:\n{problems}",
                block.line
            );
        }
    }

    fn console(&self, page: &str, block: &Block, failures: &mut String) {
        let mut commands: Vec<(usize, String, i32, String)> = Vec::new();
        for (i, line) in block.text.lines().enumerate() {
            if let Some(command) = line.strip_prefix("$ ") {
                commands.push((block.line + i, command.to_string(), 0, String::new()));
            } else if let Some(last) = commands.last_mut() {
                match line.strip_prefix("? ") {
                    Some(code) if last.3.is_empty() => {
                        last.2 = code.trim().parse().expect("`? N` takes a number")
                    }
                    _ => {
                        last.3.push_str(line);
                        last.3.push('\n');
                    }
                }
            }
        }
        for (line, command, want_status, expected) in commands {
            let (status, output) = self.sh(&command);
            let matched = self.assert.try_eq(
                Some(&"output"),
                Data::text(output.trim_end().to_string()),
                Data::text(expected.trim_end().to_string()),
            );
            if status != want_status {
                let _ = writeln!(
                    failures,
                    "{page}:{line}: `{command}` exited {status}, the page says {want_status}; it printed:\n{output}"
                );
            } else if let Err(diff) = matched {
                let _ = writeln!(
                    failures,
                    "{page}:{line}: `{command}` printed otherwise:\n{diff}"
                );
            }
        }
    }
}

/// Every example of every page runs as the page shows it (a test per page would hide the
/// count; this reports every failing example at once).
#[test]
fn the_books_examples_run_as_written() {
    let root = &root();
    let failures: Vec<String> = std::thread::scope(|scope| {
        let runs: Vec<_> = pages()
            .into_iter()
            .map(|page| {
                scope.spawn(move || {
                    let name = page.strip_prefix(root).unwrap().display().to_string();
                    let text = fs::read_to_string(&page).unwrap();
                    let run = PageRun::new();
                    let mut failures = String::new();
                    for block in blocks(&text) {
                        run.run(&name, &block, &mut failures);
                    }
                    failures
                })
            })
            .collect();
        runs.into_iter().map(|r| r.join().unwrap()).collect()
    });
    let failures = failures.concat();
    assert!(
        failures.is_empty(),
        "examples of the book that do not run as written:\n{failures}"
    );
}

/// `hookvisor --help` and each subcommand's, as one page (docs/reference/cli.md).
fn cli_reference() -> String {
    let mut page = String::from(
        "# Command line\n\n\
         <!-- Generated from the binary's --help by crates/hookvisor/tests/cli/docs.rs; do not \
         edit. Rewrite it with: SNAPSHOTS=overwrite cargo test -p hookvisor --test cli docs -->\n\n\
         Every command and option of `hookvisor`, as its `--help` prints it. The PID 1 binary's \
         options are in [hookvisor-init](init-cli.md).\n",
    );
    let mut todo = vec![Vec::<String>::new()];
    while let Some(path) = todo.pop() {
        let help = help_of(&path);
        let name = std::iter::once("hookvisor".to_string()).chain(path.iter().cloned());
        let _ = write!(
            page,
            "\n## `{}`\n\n```text\n{}\n```\n",
            name.collect::<Vec<_>>().join(" "),
            help.trim_end()
        );
        let mut subcommands: Vec<Vec<String>> = help
            .split("\nCommands:\n")
            .nth(1)
            .map(|list| {
                list.lines()
                    .take_while(|l| l.starts_with("  "))
                    .filter_map(|l| l.split_whitespace().next())
                    .filter(|&c| c != "help")
                    .map(|c| path.iter().cloned().chain([c.to_string()]).collect())
                    .collect()
            })
            .unwrap_or_default();
        subcommands.reverse();
        todo.extend(subcommands);
    }
    page
}

fn help_of(path: &[String]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_hookvisor"))
        .args(path)
        .arg("--help")
        .env_clear()
        .env("COLUMNS", "100")
        .output()
        .unwrap();
    assert!(output.status.success(), "hookvisor {path:?} --help failed");
    String::from_utf8(output.stdout).unwrap()
}

/// The CLI reference cannot drift: it is the binary's help, checked in.
#[test]
fn the_cli_reference_is_the_binarys_help() {
    Assert::new().action_env("SNAPSHOTS").eq(
        cli_reference(),
        snapbox::file!["../../../../docs/reference/cli.md"],
    );
}

/// Every markdown file of the repository that links elsewhere in it: the targets exist, and no
/// file, comment or script points outside the clone (the old contract lived in a sibling `shared`
/// directory).
#[test]
fn links_and_citations_stay_inside_the_repository() {
    let root = root();
    let listed = git(&root, &["ls-files", "-z"]);
    let files: Vec<PathBuf> = listed
        .stdout
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| root.join(String::from_utf8_lossy(p).as_ref()))
        .filter(|p| p.exists())
        .collect();
    let mut failures = String::new();
    for file in &files {
        let Ok(text) = fs::read_to_string(file) else {
            continue;
        };
        let name = file.strip_prefix(&root).unwrap().display().to_string();
        if text.contains(concat!("../", "shared/")) && !name.starts_with("docs/upstream/") {
            let _ = writeln!(
                failures,
                "{name}: points into ../shared, outside the repository"
            );
        }
        if name.ends_with(".md") {
            for (line, target) in relative_links(&text) {
                let path = target.split('#').next().unwrap();
                if !path.is_empty() && !file.parent().unwrap().join(path).exists() {
                    let _ = writeln!(failures, "{name}:{line}: link to {target}: no such file");
                }
            }
        }
        if name.ends_with(".rs") || name.starts_with("scripts/") {
            for doc in cited_docs(&text) {
                if !root.join(&doc).exists() {
                    let _ = writeln!(failures, "{name}: cites {doc}, which does not exist");
                }
            }
        }
    }
    assert!(failures.is_empty(), "{failures}");
}

/// The relative link targets of a markdown text, `[text](target)`, with their line numbers.
fn relative_links(text: &str) -> Vec<(usize, String)> {
    let mut links = Vec::new();
    let mut in_code = false;
    for (n, line) in text.lines().enumerate() {
        if line.trim_start().starts_with("```") {
            in_code = !in_code;
        }
        if in_code {
            continue;
        }
        for piece in line.split("](").skip(1) {
            let target = piece.split([')', ' ']).next().unwrap_or("");
            let external = target.contains("://") || target.starts_with("mailto:");
            if !external && !target.is_empty() && !target.starts_with('#') {
                links.push((n + 1, target.to_string()));
            }
        }
    }
    links
}

/// The `docs/….md` paths the comments of a source file or script cite (`docs/EVENTS.md §4.1`);
/// test data in strings (a made-up `docs` page) is not a citation.
fn cited_docs(text: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        let comment = line.trim_start();
        if !(comment.starts_with("//") || comment.starts_with('#')) {
            continue;
        }
        let mut rest = comment;
        while let Some(at) = rest.find("docs/") {
            let before = rest[..at].chars().last();
            let tail = &rest[at..];
            let len = tail
                .find(|c: char| !(c.is_ascii_alphanumeric() || "/._-".contains(c)))
                .unwrap_or(tail.len());
            let path = tail[..len].trim_end_matches('.');
            if path.ends_with(".md")
                && !before.is_some_and(|c| c.is_ascii_alphanumeric() || c == '/')
            {
                found.push(path.to_string());
            }
            rest = &tail[len.max(5)..];
        }
    }
    found
}

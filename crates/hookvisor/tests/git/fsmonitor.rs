//! `hookvisor serve` as git's `core.fsmonitor` (docs/guide/git.md): real git, the real hook, the
//! real server. git's own t7519-status-fsmonitor.sh is the model: after every kind of change,
//! `git status` through the hook says what a `git status` that checks everything says (with
//! another copy of the index, so the comparison leaves the fsmonitor's state alone).

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::common::serve::{Server, request};
use crate::common::{Workspace, check, stdout};

/// A repository with `install git-fsmonitor` done and a server on a socket (when running).
struct Repo {
    ws: Workspace,
    socket: PathBuf,
    server: Option<Server>,
    /// Where git's trace2 events of the last status through the hook went.
    trace: PathBuf,
}

impl Repo {
    /// A committed repository (`a`, `d/b`, `d/e/c`, a `.gitignore` of `build/` and `*.log`),
    /// installed, with the server started and its watcher ready.
    fn new() -> Repo {
        let ws = Workspace::git();
        ws.write("a", "a\n");
        ws.write("d/b", "b\n");
        ws.write("d/e/c", "c\n");
        ws.write(".gitignore", "build/\n*.log\n");
        ws.git_ok(&["add", "-A"]);
        check(ws.commit("init"), "commit");
        check(ws.hookvisor(&["install", "git-fsmonitor"]), "install");
        let socket = ws.base().join("serve.sock");
        let trace = ws.base().join("trace2.json");
        let mut repo = Repo {
            ws,
            socket,
            server: None,
            trace,
        };
        repo.start();
        repo
    }

    fn start(&mut self) {
        let socket = self.socket.to_str().unwrap().to_owned();
        self.server = Some(Server::start(&self.ws, &["--socket", &socket], &[]));
        self.wait_until_watching();
    }

    fn restart(&mut self) {
        if let Some(server) = self.server.take() {
            server.stop();
        }
        self.start();
    }

    /// The environment an agent started by `serve` has.
    fn env(&self, cmd: &mut Command) {
        cmd.env("HOOKVISOR_URL", "http://localhost")
            .env("HOOKVISOR_SOCKET", &self.socket);
    }

    fn git(&self, args: &[&str]) -> Output {
        let mut cmd = self.ws.git_command(self.ws.path());
        self.env(&mut cmd);
        cmd.args(args).output().expect("run git")
    }

    fn git_ok(&self, args: &[&str]) -> String {
        check(self.git(args), &format!("git {}", args.join(" ")))
    }

    /// The hook as git runs it, in the work tree: its raw output.
    fn hook(&self, token: &str) -> Vec<u8> {
        let mut cmd = self.ws.hookvisor_command();
        self.env(&mut cmd);
        let out = cmd.args(["git-fsmonitor", "2", token]).output().unwrap();
        assert!(out.status.success(), "hook: {out:?}");
        out.stdout
    }

    /// The server answers from its journal once its watcher is up: until then "everything".
    fn wait_until_watching(&self) {
        let mut token = String::from("none");
        for _ in 0..600 {
            let (next, paths) = parse(&self.hook(&token));
            if paths.is_some() {
                return;
            }
            token = next;
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        panic!("the server never answered from its journal");
    }

    /// `git status --porcelain ARGS` through the hook, and whether the hook's answer was
    /// "everything".
    fn status_fsmonitor(&self, args: &[&str]) -> (String, bool) {
        let _ = fs::remove_file(&self.trace);
        let mut cmd = self.ws.git_command(self.ws.path());
        self.env(&mut cmd);
        cmd.env("GIT_TRACE2_EVENT", &self.trace)
            .args(["status", "--porcelain"])
            .args(args);
        let out = check(cmd.output().unwrap(), "git status");
        let trace = fs::read_to_string(&self.trace).unwrap_or_default();
        (out, trace.contains("query/trivial-response"))
    }

    /// `git status --porcelain ARGS` that checks every file: no fsmonitor, no untracked cache,
    /// on a copy of the index.
    fn status_plain(&self, args: &[&str]) -> String {
        let index = self.ws.base().join("index.copy");
        let _ = fs::remove_file(&index);
        if let Ok(bytes) = fs::read(self.ws.path().join(".git/index")) {
            fs::write(&index, bytes).unwrap();
        }
        let mut cmd = self.ws.git_command(self.ws.path());
        cmd.env("GIT_INDEX_FILE", &index).args([
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.untrackedCache=false",
            "status",
            "--porcelain",
        ]);
        check(cmd.args(args).output().unwrap(), "git status (plain)")
    }

    /// Both statuses, default and `-uall`, must agree; returns how many hook answers were
    /// "everything".
    fn assert_same(&self, what: &str) -> usize {
        let mut trivial = 0;
        for args in [&[][..], &["--untracked-files=all"][..]] {
            let (through_hook, everything) = self.status_fsmonitor(args);
            let plain = self.status_plain(args);
            assert_eq!(
                through_hook, plain,
                "git status --porcelain {args:?} through the hook differs after {what}"
            );
            trivial += usize::from(everything);
        }
        trivial
    }
}

/// The hook's output: the token and the paths (`None`: everything).
fn parse(out: &[u8]) -> (String, Option<Vec<String>>) {
    let mut parts = out.split(|&b| b == 0);
    let token = String::from_utf8(parts.next().unwrap().to_vec()).unwrap();
    let rest: Vec<String> = parts
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect();
    if rest == ["/"] {
        (token, None)
    } else {
        (token, Some(rest))
    }
}

fn config(ws: &Workspace, key: &str) -> Option<String> {
    let out = ws.git_run(&["config", "--local", "--get", key]);
    out.status
        .success()
        .then(|| stdout(&out).trim_end().to_owned())
}

#[test]
fn install_sets_git_fsmonitor_and_uninstall_puts_back_what_was_there() {
    let ws = Workspace::git();
    ws.git_ok(&["config", "core.untrackedCache", "false"]);
    check(ws.hookvisor(&["install", "git-fsmonitor"]), "install");
    let hook = config(&ws, "core.fsmonitor").expect("core.fsmonitor set");
    assert!(
        hook.ends_with(" git-fsmonitor") && hook.contains("hookvisor"),
        "{hook}"
    );
    assert_eq!(
        config(&ws, "core.fsmonitorHookVersion").as_deref(),
        Some("2")
    );
    assert_eq!(config(&ws, "core.untrackedCache").as_deref(), Some("true"));
    // Twice: the same, and what was there before is still remembered.
    check(ws.hookvisor(&["install", "git-fsmonitor"]), "install again");
    let out = check(ws.hookvisor(&["uninstall", "git-fsmonitor"]), "uninstall");
    assert!(out.contains("restored core.fsmonitor"), "{out}");
    assert_eq!(config(&ws, "core.fsmonitor"), None);
    assert_eq!(config(&ws, "core.fsmonitorHookVersion"), None);
    assert_eq!(config(&ws, "core.untrackedCache").as_deref(), Some("false"));
    let left = ws.git_ok(&["config", "--local", "--list"]);
    assert!(!left.contains("hookvisor"), "{left}");

    // A subdirectory is not the work tree git's paths are relative to.
    fs::create_dir_all(ws.path().join("sub")).unwrap();
    let out = ws.hookvisor(&["--workspace", "sub", "install", "git-fsmonitor"]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
}

/// What `serve --install git-fsmonitor` runs (a container's setup): the user's git config, so
/// nothing lands in the repository.
#[test]
fn user_level_install_writes_the_users_git_config_not_the_repositorys() {
    let ws = Workspace::git();
    check(
        ws.hookvisor(&["install", "git-fsmonitor", "--user-level"]),
        "install --user-level",
    );
    let gitconfig = ws.base().join("home/.gitconfig");
    let text = fs::read_to_string(&gitconfig).unwrap();
    assert!(text.contains(" git-fsmonitor"), "{text}");
    assert!(text.contains("fsmonitorHookVersion = 2"), "{text}");
    assert_eq!(config(&ws, "core.fsmonitor"), None);
    check(
        ws.hookvisor(&["uninstall", "git-fsmonitor", "--user-level"]),
        "uninstall --user-level",
    );
    let text = fs::read_to_string(&gitconfig).unwrap();
    assert!(!text.contains("fsmonitor"), "{text}");
}

#[test]
fn the_hook_answers_everything_when_no_server_answers() {
    let ws = Workspace::git();
    let out = ws
        .hookvisor(&["git-fsmonitor", "2", "hookvisor:x:1"])
        .stdout;
    assert_eq!(parse(&out).1, None, "no server named");
    let mut cmd = ws.hookvisor_command();
    cmd.env("HOOKVISOR_URL", "http://localhost")
        .env("HOOKVISOR_SOCKET", ws.base().join("nobody.sock"));
    let out = cmd.args(["git-fsmonitor", "2", "t"]).output().unwrap();
    assert!(out.status.success());
    assert_eq!(parse(&out.stdout).1, None, "a server that does not answer");
}

/// Root's git (a root `~/.gitconfig` set by `install git-fsmonitor --user-level`) asks only a
/// socket no other account can replace: a loopback port is anyone's to take once the server
/// is down, and a short answer would hide changes from root's `git status`. Over TCP, root's
/// hook answers "everything" without asking.
#[test]
fn as_root_the_hook_asks_no_server_over_tcp() {
    if !nix::unistd::Uid::effective().is_root() {
        assert!(std::env::var_os("CI").is_none(), "CI must run this as root");
        eprintln!("note: needs root; skipped");
        return;
    }
    let ws = Workspace::git();
    let server = Server::tcp(&ws);
    let crate::common::serve::Addr::Tcp(addr) = &server.addr else {
        unreachable!("a TCP server")
    };
    let mut cmd = ws.hookvisor_command();
    cmd.env("HOOKVISOR_URL", format!("http://{addr}"));
    let out = cmd
        .args(["git-fsmonitor", "2", "hookvisor:x:1"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let (token, paths) = parse(&out.stdout);
    assert_eq!(
        (token.as_str(), paths),
        ("hookvisor:none", None),
        "root asked a TCP server"
    );
}

/// A change and what to call it.
type Step<'a> = (&'a str, &'a dyn Fn(&Repo));

#[test]
fn git_status_through_serve_sees_every_change_t7519() {
    let repo = Repo::new();
    let mut trivial = repo.assert_same("start");
    // The changes of t7519's "status doesn't detect unreported modifications", from the other
    // side: each one reported, each one seen.
    let steps: &[Step] = &[
        ("modify a tracked file", &|r| {
            r.ws.write("a", "changed\n");
        }),
        ("a new untracked file", &|r| {
            r.ws.write("new", "n\n");
        }),
        ("a file in a new directory", &|r| {
            r.ws.write("n/m/x", "x\n");
        }),
        ("another file in that directory", &|r| {
            r.ws.write("n/m/y", "y\n");
        }),
        ("git add of the new directory", &|r| {
            r.git_ok(&["add", "n"]);
        }),
        ("modify a tracked file in the new directory", &|r| {
            r.ws.write("n/m/x", "changed\n");
        }),
        ("delete a tracked file", &|r| {
            fs::remove_file(r.ws.path().join("d/b")).unwrap();
        }),
        ("an ignored file", &|r| {
            r.ws.write("build/out", "o\n");
            r.ws.write("d/x.log", "l\n");
        }),
        ("git add -A", &|r| {
            r.git_ok(&["add", "-A"]);
        }),
        ("commit", &|r| {
            r.git_ok(&["commit", "-qm", "two"]);
        }),
        ("mode change", &|r| {
            let p = r.ws.path().join("a");
            fs::set_permissions(&p, fs::Permissions::from_mode(0o755)).unwrap();
        }),
        ("remove a directory", &|r| {
            fs::remove_dir_all(r.ws.path().join("n")).unwrap();
        }),
        ("git add -f of an ignored file, then a change to it", &|r| {
            r.git_ok(&["add", "-f", "build/out"]);
            r.git_ok(&["status", "--porcelain"]);
            r.ws.write("build/out", "changed\n");
        }),
        ("a directory excluded by info/exclude", &|r| {
            r.ws.write(".git/info/exclude", "x/\n");
            r.ws.write("x/f", "f\n");
        }),
        ("no longer excluded, then tracked", &|r| {
            r.ws.write(".git/info/exclude", "");
            r.git_ok(&["add", "x"]);
        }),
        ("a change in the directory no longer excluded", &|r| {
            r.ws.write("x/f", "changed\n");
        }),
        ("move a directory", &|r| {
            fs::rename(r.ws.path().join("d"), r.ws.path().join("d2")).unwrap();
        }),
        ("a file in the moved directory", &|r| {
            r.ws.write("d2/e/z", "z\n");
        }),
    ];
    for (what, step) in steps {
        step(&repo);
        trivial += repo.assert_same(what);
    }
    // The answers came from the journal, not from checking everything each time: a directory
    // moved, a `git add -f` and the first query may each cost one.
    assert!(
        trivial <= 8,
        "{trivial} of {} answers were everything",
        2 * (steps.len() + 1)
    );
    // The server counts them the same way.
    let metrics = request(
        &repo.server.as_ref().unwrap().addr,
        "GET",
        "/metrics",
        &[],
        "",
    )
    .body;
    let count = |kind: &str| -> usize {
        let line = format!("hookvisor_fsmonitor_answers_total{{kind=\"{kind}\"}} ");
        metrics
            .lines()
            .find_map(|l| l.strip_prefix(&line))
            .and_then(|n| n.parse().ok())
            .unwrap_or_else(|| panic!("no {line} in {metrics}"))
    };
    assert!(
        count("paths") >= 2 * (steps.len() + 1) - trivial,
        "{metrics}"
    );
    assert!(count("everything") >= trivial, "{metrics}");
}

#[test]
fn the_answer_names_what_changed_since_the_token_and_a_restart_forgets_tokens() {
    let mut repo = Repo::new();
    let (token, _) = parse(&repo.hook("none"));
    let (token, paths) = parse(&repo.hook(&token));
    assert_eq!(paths, Some(vec![]), "nothing changed");
    // A change made just before git asks is in the answer (the cookie round trip).
    repo.ws.write("a", "x\n");
    repo.ws.write("n/f", "x\n");
    let (token, paths) = parse(&repo.hook(&token));
    let paths = paths.expect("an answer from the journal");
    assert!(paths.contains(&"a".to_owned()), "{paths:?}");
    assert!(paths.contains(&"n/".to_owned()), "{paths:?}");

    repo.restart();
    assert_eq!(
        parse(&repo.hook(&token)).1,
        None,
        "a token of the server before the restart"
    );
    assert_eq!(
        parse(&repo.hook("1700000000000000000")).1,
        None,
        "git's first token"
    );
    repo.ws.write("a", "y\n");
    repo.assert_same("a restart");
}

#[test]
fn the_fsmonitor_route_needs_the_token() {
    let ws = Workspace::git();
    let socket = ws.base().join("s.sock");
    let server = Server::start(
        &ws,
        &["--socket", socket.to_str().unwrap()],
        &[("HOOKVISOR_TOKEN", "secret")],
    );
    let body = format!(r#"{{"token":"t","work_tree":"{}"}}"#, ws.path().display());
    let refused = request(&server.addr, "POST", "/v1/fsmonitor", &[], &body);
    assert_eq!(refused.status, 401, "{}", refused.body);
    let answered = request(
        &server.addr,
        "POST",
        "/v1/fsmonitor",
        &[("Authorization", "Bearer secret")],
        &body,
    );
    assert_eq!(answered.status, 200, "{}", answered.body);
    // Another work tree's question is answered "everything".
    let elsewhere = request(
        &server.addr,
        "POST",
        "/v1/fsmonitor",
        &[("Authorization", "Bearer secret")],
        r#"{"token":"t","work_tree":"/"}"#,
    );
    assert!(elsewhere.body.ends_with("\0/\0"), "{:?}", elsewhere.body);
}

/// A small xorshift generator: the property test's steps, repeatable from the seed printed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, items: &'a [T]) -> Option<&'a T> {
        (!items.is_empty()).then(|| &items[self.below(items.len())])
    }
}

/// Every file of the work tree, relative, `.git` left out.
fn files(root: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let Ok(entries) = fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.file_name().is_some_and(|n| n == ".git") {
                continue;
            }
            if path.is_dir() {
                dirs.push(path);
            } else {
                out.push(
                    path.strip_prefix(root)
                        .unwrap()
                        .to_string_lossy()
                        .into_owned(),
                );
            }
        }
    }
    out.sort();
    out
}

fn dirs(root: &Path) -> Vec<String> {
    let mut out: Vec<String> = files(root)
        .iter()
        .filter_map(|f| {
            Path::new(f)
                .parent()
                .map(|p| p.to_string_lossy().into_owned())
        })
        .filter(|p| !p.is_empty())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// One random step; returns what it did.
fn random_step(repo: &mut Repo, rng: &mut Rng, n: usize) -> String {
    let root = repo.ws.path().to_path_buf();
    let names = [
        "a",
        "b",
        "d/b",
        "d/e/c",
        "d/f",
        "x/y/z",
        "build/o",
        "d/e/q.log",
    ];
    let existing = files(&root);
    match rng.below(16) {
        0..=2 => {
            let name = rng.pick(&names).unwrap().to_string();
            repo.ws.write(&name, &format!("{n}\n"));
            format!("write {name}")
        }
        3 => match rng.pick(&existing) {
            Some(f) if f != ".gitignore" => {
                fs::remove_file(root.join(f)).unwrap();
                format!("delete {f}")
            }
            _ => "nothing".into(),
        },
        4 => match rng.pick(&existing) {
            Some(f) if f != ".gitignore" => {
                let to = format!(
                    "r{n}/{}",
                    Path::new(f).file_name().unwrap().to_string_lossy()
                );
                fs::create_dir_all(root.join(format!("r{n}"))).unwrap();
                fs::rename(root.join(f), root.join(&to)).unwrap();
                format!("rename {f} {to}")
            }
            _ => "nothing".into(),
        },
        5 => {
            let dir = format!("new{n}/sub");
            repo.ws.write(&format!("{dir}/f"), "f\n");
            repo.ws.write(&format!("{dir}/g.log"), "g\n");
            format!("new tree {dir}")
        }
        6 => match rng.pick(&dirs(&root)) {
            Some(d) if !d.starts_with("build") => {
                let to = format!("moved{n}");
                fs::rename(root.join(d), root.join(&to)).unwrap();
                format!("move dir {d} {to}")
            }
            _ => "nothing".into(),
        },
        7 => {
            repo.git_ok(&["add", "-A"]);
            "git add -A".into()
        }
        8 => match rng.pick(&existing) {
            Some(f) => {
                let _ = repo.git(&["add", "-f", "--", f]);
                format!("git add -f {f}")
            }
            None => "nothing".into(),
        },
        9 => {
            repo.git_ok(&["commit", "-q", "--allow-empty", "-m", &format!("c{n}")]);
            "commit".into()
        }
        10 => {
            let branch = if rng.below(2) == 0 { "main" } else { "other" };
            let _ = repo.git(&["branch", "other"]);
            let _ = repo.git(&["checkout", "-q", "-f", branch]);
            format!("checkout -f {branch}")
        }
        11 => {
            repo.git_ok(&["reset", "-q"]);
            "git reset".into()
        }
        12 => {
            let text = if rng.below(2) == 0 {
                "build/\n*.log\n"
            } else {
                "build/\n*.log\nd/\n"
            };
            repo.ws.write(".gitignore", text);
            format!(".gitignore {text:?}")
        }
        13 => match rng.pick(&existing) {
            Some(f) => {
                let p = root.join(f);
                let mode = fs::metadata(&p).unwrap().permissions().mode() ^ 0o100;
                fs::set_permissions(&p, fs::Permissions::from_mode(mode)).unwrap();
                format!("chmod {f}")
            }
            None => "nothing".into(),
        },
        14 => {
            repo.restart();
            "restart serve".into()
        }
        _ => match rng.pick(&existing) {
            Some(f) => {
                let _ = repo.git(&["rm", "-q", "--cached", "--", f]);
                format!("git rm --cached {f}")
            }
            None => "nothing".into(),
        },
    }
}

#[test]
fn git_status_through_serve_matches_a_full_check_after_random_changes() {
    let seeds: Vec<u64> = match std::env::var("HOOKVISOR_FSMONITOR_SEED") {
        Ok(seed) => vec![seed.parse().expect("a number")],
        Err(_) => vec![0x9e37_79b9_7f4a_7c15, 42, 7_777_777],
    };
    for seed in seeds {
        let mut repo = Repo::new();
        let mut rng = Rng(seed);
        let mut log = Vec::new();
        let mut trivial = 0;
        const STEPS: usize = 30;
        for n in 0..STEPS {
            log.push(random_step(&mut repo, &mut rng, n));
            let what = format!("seed {seed}, steps {log:?}");
            trivial += repo.assert_same(&what);
        }
        // Most answers come from the journal (a moved directory, a `.gitignore` edit, a
        // restart or a changed index with `git add -f` each cost one "everything").
        assert!(
            trivial <= STEPS,
            "seed {seed}: {trivial} of {} answers were everything: {log:?}",
            STEPS * 2
        );
    }
}

/// The state dir is the agent's: a cookie name it makes there in advance (the server's pid and
/// a number above the next queries') must not stand for a query's own cookie, or the answer is
/// given before the watcher has read the changes made just before it (rule 3). A turn's
/// evaluation holds the watcher meanwhile, so the query waits for nothing else.
#[test]
fn a_cookie_the_agent_makes_in_advance_does_not_end_a_query_early() {
    let mut repo = Repo::new();
    let started = repo.ws.base().join("started");
    let release = repo.ws.base().join("release");
    repo.ws.hook(
        "slow.sh",
        "file",
        "name: slow\npattern: '*.txt'",
        &format!(
            "touch '{}'; while [ ! -e '{}' ]; do sleep 0.05; done",
            started.display(),
            release.display()
        ),
    );
    repo.restart();
    repo.ws.write("notes.txt", "x\n");
    let server = repo.server.as_ref().unwrap();
    let pid = server.child.id();
    let ask = |token: &str| {
        let body = serde_json::json!({ "token": token, "work_tree": repo.ws.path() });
        let answer = server.post("/v1/fsmonitor", &body.to_string());
        assert_eq!(answer.status, 200, "{}", answer.body);
        parse(answer.body.as_bytes())
    };
    let (token, _) = ask("none");
    std::thread::scope(|s| {
        let addr = &server.addr;
        let turn =
            s.spawn(move || request(addr, "POST", "/v1/turns/end", &[], r#"{"trigger":"user"}"#));
        while !started.exists() {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        // Numbers far above any query's, made before the queries that follow.
        for n in [1_000_000_000u64, 1_000_000_001] {
            let forged = repo
                .ws
                .state_dir()
                .join(format!(".hookvisor-fsmonitor-{pid}-{n}"));
            fs::write(forged, b"").unwrap();
        }
        let (token, _) = ask(&token);
        // A tree moved in at once: the watcher journals `big/` only once it has watched every
        // directory under it, which takes it a while.
        let big = repo.ws.base().join("big");
        for i in 0..3000 {
            fs::create_dir_all(big.join(format!("d{i}/e"))).unwrap();
        }
        fs::rename(&big, repo.ws.path().join("big")).unwrap();
        let (_, paths) = ask(&token);
        fs::write(&release, b"").unwrap();
        turn.join().unwrap();
        let paths = paths.expect("an answer from the journal");
        assert!(
            paths.contains(&"big/".to_owned()),
            "big/ missing: {paths:?}"
        );
    });
}

/// The end of a turn's scan syncs with a cookie in the state dir too: a name the agent made
/// there in advance must not end its wait before the watcher has read the last changes, or a
/// file hook (a gate) does not run on a file changed just before the turn ended.
#[test]
fn a_scan_cookie_the_agent_makes_in_advance_does_not_hide_a_change() {
    let mut repo = Repo::new();
    let seen = repo.ws.base().join("seen");
    repo.ws.hook(
        "lint.sh",
        "file",
        "name: lint\npattern: '*.txt'",
        &format!(
            "printf '%s\\n' \"$DISCOBOT_CHANGED_FILES\" >> '{}'",
            seen.display()
        ),
    );
    repo.restart();
    let server = repo.server.as_ref().unwrap();
    let turn = || {
        let answer = server.post("/v1/turns/end", r#"{"trigger":"user"}"#);
        assert_eq!(answer.status, 200, "{}", answer.body);
    };
    repo.ws.write("first.txt", "x\n");
    turn();
    assert!(fs::read_to_string(&seen).unwrap().contains("first.txt"));
    let pid = server.child.id();
    for n in [1_000_000_000u64, 1_000_000_001, 1_000_000_002] {
        let forged = repo
            .ws
            .state_dir()
            .join(format!(".hookvisor-cookie-{pid}-{n}"));
        fs::write(forged, b"").unwrap();
    }
    turn();
    // A tree moved in keeps the watcher busy a while; the file written next waits behind it.
    let big = repo.ws.base().join("big");
    for i in 0..20000 {
        fs::create_dir_all(big.join(format!("d{i}"))).unwrap();
    }
    fs::rename(&big, repo.ws.path().join("big")).unwrap();
    repo.ws.write("late.txt", "x\n");
    turn();
    let seen = fs::read_to_string(&seen).unwrap();
    assert!(seen.contains("late.txt"), "the hook ran on: {seen}");
}

/// The journal keeps the paths the agent changed: long ones (near `PATH_MAX`) by the ten
/// thousand must not cost the server their size.
#[test]
fn a_journal_of_long_paths_costs_the_server_a_bounded_memory() {
    let repo = Repo::new();
    let server = repo.server.as_ref().unwrap();
    let pid = server.child.id();
    let peak = || {
        let text = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let line = text.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
        line.split_whitespace()
            .nth(1)
            .unwrap()
            .parse::<u64>()
            .unwrap()
    };
    let (token, _) = parse(&repo.hook("none"));
    let before = peak();
    let mut deep = repo.ws.path().to_path_buf();
    for level in 0..14 {
        deep.push(format!("{level}{}", "d".repeat(248)));
    }
    fs::create_dir_all(&deep).unwrap();
    let (token, _) = parse(&repo.hook(&token));
    for i in 0..20_000 {
        fs::File::create(deep.join(format!("{i:05}{}", "f".repeat(240)))).unwrap();
    }
    // Every path journaled (the cookie round trip) before the peak is read.
    let _ = repo.hook(&token);
    let after = peak();
    assert!(
        after < before + 40 * 1024,
        "peak resident set {after} KiB, {before} KiB before"
    );
}

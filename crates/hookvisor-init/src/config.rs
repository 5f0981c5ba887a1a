//! The command line of `hookvisor-init`, resolved into one [`Config`] before anything runs.
//!
//! Parsed by hand, as tini does with getopt: the init has seven options, and a parser library
//! costs it about a megabyte of resident memory and a tenth of a millisecond of start-up on every
//! container start (BENCHMARKS.md, case 4). Even lexopt, a bare tokenizer, grew the static
//! init by 12.4 KiB for the same behaviour (issue 15), so the loop below stays.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Duration;

use hookvisor_core::seal::RootHooks;

const USAGE: &str = "\
PID 1 for hookvisor containers: reaps zombies, forwards signals, runs the session hooks of
the workspace, then runs CMD as the unprivileged user and exits with its status.

Usage: hookvisor-init [OPTIONS] [--] CMD [ARGS]...

Options:
      --user USER[:GROUP]
                         Run CMD and `run_as: user` session hooks as this account: a name
                         or uid, optionally :group or :gid, read from /etc/passwd and
                         /etc/group (never NSS); a uid needs no entry [env: HOOKVISOR_USER]
      --workspace DIR    Workspace root [env: HOOKVISOR_WORKSPACE; default: $DISCOBOT_WORKSPACE,
                         else the current directory]
      --grace SECS       Seconds between forwarding TERM and killing whatever is left
                         [env: HOOKVISOR_GRACE; default: 10]
      --state-dir DIR    State directory [default: $HOOKVISOR_STATE_DIR, else
                         ~USER/.discobot/SESSION/hooks]
      --session ID       Session id [default: $DISCOBOT_SESSION_ID, else $SESSION_ID, else
                         \"default\"]
      --kill-group       Forward signals to CMD's whole process group instead of CMD alone
                         [env: HOOKVISOR_KILL_GROUP]
      --root-hooks WHICH Which run_as: root session hooks run: all; owned (only those whose
                         file and directories the user cannot write); none
                         [env: HOOKVISOR_ROOT_HOOKS; default: all]
  -h, --help             Print help
  -V, --version          Print version
";

/// Everything the init needs to know, resolved from the command line and the environment.
#[derive(Debug, PartialEq)]
pub(crate) struct Config {
    /// `--user`: the account for CMD and `run_as: user` hooks; `None` runs them as ourselves.
    pub user: Option<String>,
    /// `--workspace`; `None` lets the context fall back to `$DISCOBOT_WORKSPACE` and the cwd.
    pub workspace: Option<PathBuf>,
    /// `--state-dir`; `None` lets the context fall back to `$HOOKVISOR_STATE_DIR` and the home.
    pub state_dir: Option<PathBuf>,
    /// `--session`; `None` lets the context fall back to the environment.
    pub session: Option<String>,
    /// How long processes get between TERM and KILL when stopping.
    pub grace: Duration,
    /// Signal CMD's process group rather than CMD alone.
    pub kill_group: bool,
    /// Which root hooks run.
    pub root_hooks: RootHooks,
    /// CMD and its arguments; never empty.
    pub cmd: Vec<OsString>,
}

/// What the command line asks for.
#[derive(Debug, PartialEq)]
pub(crate) enum Parsed {
    /// Run.
    Run(Config),
    /// Print this text to stdout and exit 0 (`--help`, `--version`).
    Print(String),
}

impl Config {
    /// Parses the command line; prints usage or the version and exits 0 when asked, and exits
    /// 2 with one line on a mistake.
    pub(crate) fn from_args() -> Config {
        let env = |name: &str| std::env::var_os(name);
        match parse(std::env::args_os().skip(1), env) {
            Ok(Parsed::Run(config)) => config,
            Ok(Parsed::Print(text)) => {
                print!("{text}");
                std::process::exit(0);
            }
            Err(e) => {
                eprintln!("hookvisor-init: {e}");
                std::process::exit(2);
            }
        }
    }
}

/// Parses `args` (without the program name), reading fallbacks through `env`.
pub(crate) fn parse(
    args: impl IntoIterator<Item = OsString>,
    env: impl Fn(&str) -> Option<OsString>,
) -> Result<Parsed, String> {
    let mut args = args.into_iter();
    let mut user = None;
    let mut workspace = None;
    let mut grace = None;
    let mut state_dir = None;
    let mut session = None;
    let mut kill_group = None;
    let mut root_hooks = None;
    let mut cmd = Vec::new();
    while let Some(arg) = args.next() {
        let Some(text) = arg.to_str().filter(|t| t.starts_with('-')) else {
            // The first word that is not an option starts CMD, as with tini.
            cmd.push(arg);
            break;
        };
        let (name, inline) = match text.split_once('=') {
            Some((name, value)) if name.starts_with("--") => (name, Some(OsString::from(value))),
            _ => (text, None),
        };
        let mut value = |slot: &mut Option<OsString>| -> Result<(), String> {
            let given = inline
                .clone()
                .or_else(|| args.next())
                .ok_or_else(|| format!("{name} needs a value; see hookvisor-init --help"))?;
            *slot = Some(given);
            Ok(())
        };
        match name {
            "--" => break,
            "-h" | "--help" => return Ok(Parsed::Print(USAGE.to_owned())),
            "-V" | "--version" => {
                return Ok(Parsed::Print(format!(
                    "hookvisor-init {}\n",
                    env!("CARGO_PKG_VERSION")
                )));
            }
            "--user" => value(&mut user)?,
            "--workspace" => value(&mut workspace)?,
            "--grace" => value(&mut grace)?,
            "--state-dir" => value(&mut state_dir)?,
            "--session" => value(&mut session)?,
            "--root-hooks" => value(&mut root_hooks)?,
            "--kill-group" if inline.is_none() => kill_group = Some(true),
            _ => {
                return Err(format!(
                    "unknown option '{text}'; see hookvisor-init --help (put `--` before a CMD \
                     that starts with '-')"
                ));
            }
        }
    }
    cmd.extend(args);
    if cmd.is_empty() {
        return Err("no CMD to run; usage: hookvisor-init [OPTIONS] -- CMD [ARGS]...".to_owned());
    }

    let user = user.or_else(|| env("HOOKVISOR_USER"));
    let workspace = workspace.or_else(|| env("HOOKVISOR_WORKSPACE"));
    let grace = grace.or_else(|| env("HOOKVISOR_GRACE"));
    let root_hooks = match root_hooks.or_else(|| env("HOOKVISOR_ROOT_HOOKS")) {
        Some(text) => RootHooks::parse(&text.to_string_lossy())?,
        None => RootHooks::All,
    };
    let kill_group = match kill_group {
        Some(yes) => yes,
        None => env("HOOKVISOR_KILL_GROUP").is_some_and(|v| truthy(&v)),
    };
    Ok(Parsed::Run(Config {
        user: user
            .map(|u| utf8("--user", u))
            .transpose()?
            .filter(|u| !u.is_empty()),
        workspace: workspace.filter(|w| !w.is_empty()).map(PathBuf::from),
        state_dir: state_dir.map(PathBuf::from),
        session: session.map(|s| utf8("--session", s)).transpose()?,
        grace: match grace {
            Some(text) => seconds(&text)?,
            None => Duration::from_secs(10),
        },
        kill_group,
        root_hooks,
        cmd,
    }))
}

fn utf8(what: &str, value: OsString) -> Result<String, String> {
    value
        .into_string()
        .map_err(|v| format!("{what} {}: not UTF-8", v.to_string_lossy()))
}

fn seconds(text: &OsStr) -> Result<Duration, String> {
    text.to_str()
        .and_then(|t| t.trim().parse::<f64>().ok())
        .and_then(|secs| Duration::try_from_secs_f64(secs).ok())
        .ok_or_else(|| {
            format!(
                "--grace {} is not a number of seconds; pass e.g. --grace 10",
                text.to_string_lossy()
            )
        })
}

/// A flag's variable: empty, `0`, `false`, `no`, `off` (any case) are false, as with clap.
fn truthy(value: &OsStr) -> bool {
    let v = value.to_string_lossy().trim().to_ascii_lowercase();
    !matches!(v.as_str(), "" | "0" | "false" | "no" | "off" | "n" | "f")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str], vars: &[(&str, &str)]) -> Result<Config, String> {
        let vars: Vec<(String, OsString)> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), OsString::from(v)))
            .collect();
        let env = |name: &str| vars.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
        match parse(args.iter().map(OsString::from), env)? {
            Parsed::Run(config) => Ok(config),
            Parsed::Print(text) => Err(format!("printed {text}")),
        }
    }

    #[test]
    fn options_values_and_cmd() {
        let c = run(
            &[
                "--user",
                "agent",
                "--workspace=/w",
                "--grace",
                "2.5",
                "--state-dir",
                "/s",
                "--session=x",
                "--kill-group",
                "--",
                "sh",
                "-c",
                "true",
            ],
            &[],
        )
        .unwrap();
        assert_eq!(c.user.as_deref(), Some("agent"));
        assert_eq!(c.workspace, Some(PathBuf::from("/w")));
        assert_eq!(c.grace, Duration::from_millis(2500));
        assert_eq!(c.state_dir, Some(PathBuf::from("/s")));
        assert_eq!(c.session.as_deref(), Some("x"));
        assert!(c.kill_group);
        assert_eq!(c.root_hooks, RootHooks::All);
        assert_eq!(c.cmd, ["sh", "-c", "true"]);
        let c = run(&["--root-hooks", "owned", "true"], &[]).unwrap();
        assert_eq!(c.root_hooks, RootHooks::Owned);
        let c = run(&["true"], &[("HOOKVISOR_ROOT_HOOKS", "none")]).unwrap();
        assert_eq!(c.root_hooks, RootHooks::None);
        assert!(run(&["--root-hooks", "some", "true"], &[]).is_err());
    }

    #[test]
    fn cmd_without_the_double_dash_keeps_its_own_options() {
        let c = run(&["ls", "-l", "--user", "x"], &[]).unwrap();
        assert_eq!(c.cmd, ["ls", "-l", "--user", "x"]);
        assert_eq!(c.user, None);
        assert_eq!(c.grace, Duration::from_secs(10));
    }

    #[test]
    fn variables_fill_in_and_options_win() {
        let vars = [
            ("HOOKVISOR_USER", "fromenv"),
            ("HOOKVISOR_GRACE", "3"),
            ("HOOKVISOR_KILL_GROUP", "yes"),
            ("HOOKVISOR_WORKSPACE", "/env"),
        ];
        let c = run(&["--", "true"], &vars).unwrap();
        assert_eq!(c.user.as_deref(), Some("fromenv"));
        assert_eq!(c.grace, Duration::from_secs(3));
        assert!(c.kill_group);
        assert_eq!(c.workspace, Some(PathBuf::from("/env")));
        let c = run(&["--user", "flag", "--grace", "1", "--", "true"], &vars).unwrap();
        assert_eq!(c.user.as_deref(), Some("flag"));
        assert_eq!(c.grace, Duration::from_secs(1));
        for off in ["0", "false", "No", "OFF", ""] {
            let c = run(&["true"], &[("HOOKVISOR_KILL_GROUP", off)]).unwrap();
            assert!(!c.kill_group, "{off:?}");
        }
    }

    #[test]
    fn mistakes_are_one_line_naming_the_fix() {
        let cases: [(&[&str], &str); 5] = [
            (&[], "no CMD"),
            (&["--"], "no CMD"),
            (
                &["--grace", "soon", "--", "true"],
                "--grace soon is not a number",
            ),
            (&["--user"], "--user needs a value"),
            (
                &["--frobnicate", "--", "true"],
                "unknown option '--frobnicate'",
            ),
        ];
        for (args, want) in cases {
            let e = run(args, &[]).unwrap_err();
            assert!(e.contains(want) && !e.contains('\n'), "{args:?}: {e}");
        }
        assert!(run(&["--grace", "-1", "--", "true"], &[]).is_err());
    }

    #[test]
    fn help_and_version_print() {
        let env = |_: &str| None;
        let Ok(Parsed::Print(help)) = parse([OsString::from("--help")], env) else {
            panic!("--help prints");
        };
        for option in [
            "--user",
            "--workspace",
            "--grace",
            "--state-dir",
            "--session",
            "--kill-group",
            "--root-hooks",
        ] {
            assert!(help.contains(option), "{option} missing from --help");
        }
        let Ok(Parsed::Print(version)) = parse([OsString::from("-V")], env) else {
            panic!("-V prints");
        };
        assert!(version.starts_with("hookvisor-init 0."), "{version}");
    }
}

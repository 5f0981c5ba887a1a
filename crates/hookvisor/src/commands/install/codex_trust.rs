//! Codex's hook trust, recorded the way Codex itself offers: through `codex app-server`.
//!
//! Codex runs a hook only when (1) the hook file is the user's own or the project that holds
//! it is trusted (`[projects."<dir>"] trust_level = "trusted"` in `$CODEX_HOME/config.toml`),
//! and (2) the hook's hash, which covers its event, command and timeout, is recorded as
//! trusted (`[hooks.state."<file>:<event>:<group>:<index>"] trusted_hash = "..."`). Otherwise
//! it skips the hook without a word. Its TUI records (2) with `/hooks`; its app server offers
//! the same to programs: `hooks/list` gives each hook's key, hash and trust status, and
//! `config/batchWrite` stores the hash. After `install codex` has written our entries, this
//! asks the app server for them and trusts exactly those whose command is the one we wrote.
//! Trusting the project is the user's decision: it is only ever printed as a step.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver};
use std::thread;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// How long the app server may take to answer everything.
const DEADLINE: Duration = Duration::from_secs(60);

/// What became of the hooks' trust.
#[derive(Debug)]
pub enum Outcome {
    /// These hooks are trusted now; the config file that records it.
    Trusted { keys: Vec<String>, config: String },
    /// Codex already trusted every one of them.
    AlreadyTrusted,
    /// Codex does not list them: the project is not trusted.
    NotListed,
    /// No `codex` on PATH.
    NoCodex,
    /// The app server failed; why.
    Failed(String),
}

/// Trusts the hooks of `settings` whose command is `command`, as Codex sees them from `cwd`.
pub fn trust(cwd: &Path, settings: &Path, command: &str) -> Outcome {
    let child = Command::new("codex")
        .args(["app-server", "--listen", "stdio://"])
        .current_dir(cwd)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn();
    let child = match child {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Outcome::NoCodex,
        Err(e) => return Outcome::Failed(format!("cannot start `codex app-server`: {e}")),
    };
    let mut server = AppServer::new(child);
    match server.trust(cwd, settings, command) {
        Ok(outcome) => outcome,
        Err(why) => Outcome::Failed(why),
    }
}

/// A `codex app-server` on stdio, killed on drop.
struct AppServer {
    child: Child,
    stdin: Option<ChildStdin>,
    lines: Receiver<Value>,
    next_id: u64,
    deadline: Instant,
}

impl AppServer {
    fn new(mut child: Child) -> AppServer {
        let stdout = child.stdout.take().expect("piped stdout");
        let (send, lines) = mpsc::channel();
        thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if let Ok(value) = serde_json::from_str::<Value>(&line)
                    && send.send(value).is_err()
                {
                    break;
                }
            }
        });
        AppServer {
            stdin: child.stdin.take(),
            child,
            lines,
            next_id: 1,
            deadline: Instant::now() + DEADLINE,
        }
    }

    fn send(&mut self, message: &Value) -> Result<(), String> {
        let stdin = self
            .stdin
            .as_mut()
            .ok_or("the app server's stdin is closed")?;
        let mut line = message.to_string();
        line.push('\n');
        stdin
            .write_all(line.as_bytes())
            .and_then(|()| stdin.flush())
            .map_err(|e| format!("cannot write to `codex app-server`: {e}"))
    }

    /// Sends a request and waits for its answer, skipping notifications.
    fn call(&mut self, method: &str, params: Value) -> Result<Value, String> {
        let id = self.next_id;
        self.next_id += 1;
        self.send(&json!({"id": id, "method": method, "params": params}))?;
        loop {
            let left = self.deadline.saturating_duration_since(Instant::now());
            let message = self.lines.recv_timeout(left).map_err(|_| {
                format!("`codex app-server` did not answer {method} in {DEADLINE:?}")
            })?;
            if message["id"] != json!(id) {
                continue;
            }
            if let Some(error) = message.get("error") {
                return Err(format!("`codex app-server` refused {method}: {error}"));
            }
            return Ok(message["result"].clone());
        }
    }

    fn trust(&mut self, cwd: &Path, settings: &Path, command: &str) -> Result<Outcome, String> {
        self.call(
            "initialize",
            json!({"clientInfo": {"name": "hookvisor", "version": env!("CARGO_PKG_VERSION")}}),
        )?;
        self.send(&json!({"method": "initialized"}))?;
        let listed = self.call("hooks/list", json!({"cwds": [cwd]}))?;
        let settings = canonical(settings);
        let ours: Vec<&Value> = listed["data"]
            .as_array()
            .into_iter()
            .flatten()
            .flat_map(|entry| entry["hooks"].as_array().into_iter().flatten())
            .filter(|hook| {
                hook["command"] == json!(command)
                    && hook["sourcePath"]
                        .as_str()
                        .is_some_and(|p| canonical(Path::new(p)) == settings)
            })
            .collect();
        if ours.is_empty() {
            return Ok(Outcome::NotListed);
        }
        let mut state = serde_json::Map::new();
        for hook in &ours {
            if hook["trustStatus"] == "trusted" {
                continue;
            }
            let (Some(key), Some(hash)) = (hook["key"].as_str(), hook["currentHash"].as_str())
            else {
                return Err(format!(
                    "`codex app-server` listed a hook without key or hash: {hook}"
                ));
            };
            state.insert(key.to_owned(), json!({"trusted_hash": hash}));
        }
        if state.is_empty() {
            return Ok(Outcome::AlreadyTrusted);
        }
        let keys: Vec<String> = state.keys().cloned().collect();
        let written = self.call(
            "config/batchWrite",
            json!({"edits": [{"keyPath": "hooks.state", "mergeStrategy": "upsert", "value": state}]}),
        )?;
        Ok(Outcome::Trusted {
            keys,
            config: written["filePath"]
                .as_str()
                .unwrap_or("Codex's config.toml")
                .to_owned(),
        })
    }
}

impl Drop for AppServer {
    fn drop(&mut self) {
        self.stdin.take();
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn canonical(path: &Path) -> PathBuf {
    path.canonicalize().unwrap_or_else(|_| path.to_owned())
}

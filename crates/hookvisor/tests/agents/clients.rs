//! The pinned agent clients: installed from npm by scripts/test.sh into a cache dir outside
//! the checkout, at the versions of `clients.json` (this directory; bump them there).

use std::env;
use std::fs;
use std::path::PathBuf;

use serde_json::Value;

/// The package of each client and its command.
const PACKAGES: &[(&str, &str)] = &[
    ("claude", "@anthropic-ai/claude-code"),
    ("codex", "@openai/codex"),
    ("gemini", "@google/gemini-cli"),
];

/// `$HOOKVISOR_AGENT_CLIENTS`, else `${HOOKVISOR_CACHE:-/var/cache/hookvisor-test}/npm`: the
/// npm prefix scripts/test.sh installs into.
pub fn prefix() -> PathBuf {
    if let Some(dir) = env::var_os("HOOKVISOR_AGENT_CLIENTS").filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let cache = env::var_os("HOOKVISOR_CACHE")
        .filter(|d| !d.is_empty())
        .map_or_else(|| PathBuf::from("/var/cache/hookvisor-test"), PathBuf::from);
    cache.join("npm")
}

/// The client's executable at its pinned version, or `None` (with a note) to skip. Under
/// `CI=true` a missing or wrong client fails the test instead.
pub fn client(command: &str) -> Option<PathBuf> {
    let (_, package) = PACKAGES
        .iter()
        .find(|(c, _)| *c == command)
        .expect("a known client");
    let pinned: Value = serde_json::from_str(include_str!("clients.json")).unwrap();
    let want = pinned["dependencies"][package].as_str().expect("pinned");
    let prefix = prefix();
    let manifest = prefix
        .join("node_modules")
        .join(package)
        .join("package.json");
    let found = fs::read_to_string(&manifest)
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .and_then(|m| m["version"].as_str().map(str::to_owned));
    let bin = prefix.join("node_modules/.bin").join(command);
    let problem = match found {
        Some(version) if version == want && bin.exists() => return Some(bin),
        Some(version) if version != want => format!("{package} is {version}, pinned {want}"),
        _ => format!(
            "{package} {want} is not installed under {}",
            prefix.display()
        ),
    };
    let fix = "run scripts/test.sh (or its npm step) to install the pinned clients";
    if env::var("CI").as_deref() == Ok("true") {
        panic!("{problem}; {fix}");
    }
    eprintln!("skipping the {command} suite: {problem}; {fix}");
    None
}

//! `hookvisor loop` driving the scripted `/bin/sh` fake agent of `fixtures/loop/agent.sh` (no
//! LLM): a workspace, the agent copied beside it, and its control directory `$FAKE_DIR`, where
//! the agent finds its steps and leaves its prompts.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use super::Workspace;

/// A workspace with the fake agent and its control directory.
pub struct FakeAgent {
    pub ws: Workspace,
    /// `$FAKE_DIR`: the agent's prompts and steps.
    pub fake: PathBuf,
    pub agent: PathBuf,
}

impl FakeAgent {
    pub fn new(ws: Workspace) -> FakeAgent {
        let fake = ws.base().join("fake");
        fs::create_dir_all(&fake).unwrap();
        let agent = ws.base().join("agent.sh");
        fs::copy(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/loop/agent.sh"),
            &agent,
        )
        .unwrap();
        fs::set_permissions(&agent, fs::Permissions::from_mode(0o755)).unwrap();
        FakeAgent { ws, fake, agent }
    }

    /// A declarative hook `.discobot/hooks/<name>.yml`.
    pub fn hook(&self, name: &str, front: &str) {
        self.ws.write(
            &format!(".discobot/hooks/{name}.yml"),
            &format!("---\n{front}\n---\n"),
        );
    }

    /// Shell lines the agent runs in iteration `i` (`"any"`: every iteration without its own).
    pub fn step(&self, i: &str, lines: &str) {
        fs::write(self.fake.join(format!("step.{i}")), lines).unwrap();
    }

    /// `hookvisor loop OPTS -- agent.sh AGENT_ARGS`, ready to run.
    pub fn command(&self, opts: &[&str], agent_args: &[&str]) -> Command {
        let mut cmd = self.ws.hookvisor_command();
        cmd.arg("loop").args(opts).arg("--").arg(&self.agent);
        cmd.args(agent_args)
            .env("FAKE_DIR", &self.fake)
            .env("HOOKVISOR_BIN", env!("CARGO_BIN_EXE_hookvisor"));
        cmd
    }

    /// `hookvisor loop OPTS -- agent.sh`, run to its end.
    pub fn run(&self, opts: &[&str]) -> Output {
        super::tick();
        self.command(opts, &[])
            .output()
            .expect("run hookvisor loop")
    }

    /// The prompt the agent got in iteration `i`.
    pub fn prompt(&self, i: u64) -> String {
        let path = self.fake.join(format!("prompt.{i}"));
        fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
    }

    /// How many iterations started the agent.
    pub fn iterations(&self) -> usize {
        fs::read_to_string(self.fake.join("iterations"))
            .unwrap_or_default()
            .lines()
            .count()
    }

    /// The loop's `session.json`.
    pub fn session(&self) -> Value {
        serde_json::from_slice(&fs::read(self.ws.state_dir().join("session.json")).unwrap())
            .unwrap()
    }

    /// Lines the hooks appended to `<workspace>/trace`.
    pub fn trace(&self) -> Vec<String> {
        fs::read_to_string(self.ws.path().join("trace"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

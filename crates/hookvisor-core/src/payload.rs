//! What a hook of the event model receives (docs/EVENTS.md §4.1 "Transport", §5 rule 19): the event
//! JSON on stdin, the same JSON in a file, and every template variable in the environment.
//!
//! # The event JSON
//!
//! `{"event", "session", "workspace", "timestamp", "trigger", "iteration"?, "stage"?, "files"?,
//! "data"}`, in this order, one line, from [`Payload::stdin_json`]. `timestamp` is RFC 3339 UTC
//! with milliseconds; `iteration`, `stage` and `files` are left out when unset; `data` is the
//! event's data object as given; extra variables (below) are not in it. JSON text is UTF-8,
//! so a workspace or file name that is not is written with U+FFFD in its place; its exact
//! bytes are in the environment and the NUL file (below).
//!
//! # Names
//!
//! The variables, in order of precedence (an earlier one wins a name):
//!
//! 1. the built-ins `event session workspace timestamp trigger iteration stage files`;
//! 2. the extra variables the caller sets ([`Payload::text_var`] and friends: `decision`,
//!    `tool_name`, `hook_response`…), which cannot take a built-in name or `data`;
//! 3. `data`, the whole data object (so `${data.event}` reads data even where a built-in has
//!    the name);
//! 4. every key of `data`, in sorted order.
//!
//! Names are case-insensitive: level by level, a name matches exactly first, else ignoring
//! ASCII case.
//! `${a.b}` reads JSON: each further segment is an object key (matched the same way) or an
//! array index. [`Payload::lookup`] (for `when:`, also as [`Lookup`]) and
//! [`Payload::template_value`] (for `argv:`) resolve names so.
//!
//! # The environment
//!
//! [`Payload::environment`] writes its files into a per-run directory the caller made;
//! [`Payload::environment_prefixed`] into a directory several runs share, every name prefixed
//! by one unique to the run, and removes them when its [`RunFiles`] is dropped. Either opens
//! the directory once, not through a symbolic link (`O_DIRECTORY|O_NOFOLLOW`), and refuses it
//! unless it is owned by the file-system uid we act as (the caller acts as the run user); acting
//! as root, it takes only a directory owned by root that neither its group nor others can
//! write. Each file is created relative to that descriptor (`openat`), new (`O_EXCL`), never
//! through a symbolic link (`O_NOFOLLOW`), mode 0600, named after its variable:
//!
//! 1. `HOOKVISOR_PAYLOAD`: the path of `payload.json` (after the prefix), the event JSON.
//! 2. A scalar is `HOOKVISOR_<NAME>` ([`env_name`]: upper case, dots and other bytes → `_`,
//!    so `a.b` → `HOOKVISOR_A_B`). Text is itself, with its exact bytes; a JSON string its
//!    text; a number or boolean its JSON text; `null` empty; an object its compact JSON.
//! 3. A list (`files`, a JSON array) is a file `HOOKVISOR_<NAME>_NUL` ([`nul_env_name`]) with
//!    every item followed by a NUL byte (`xargs -0` reads it), plus `HOOKVISOR_<NAME>`, the
//!    items joined by single spaces. An item is rendered like a scalar.
//! 4. JSON objects are flattened by dotted path: `data = {"agent": {"tool_input":
//!    {"command": "ls"}}}` gives `HOOKVISOR_AGENT` (the object's JSON) and
//!    `HOOKVISOR_AGENT_TOOL_INPUT_COMMAND=ls`, down to names of [`MAX_FLATTEN_SEGMENTS`]
//!    segments; deeper values are only in their parent's JSON (and in the lookups). Arrays are
//!    not flattened into their items' objects.
//! 5. A value over [`MAX_INLINE_BYTES`] (64 KiB), one with a NUL byte (no environment can hold
//!    it), or one past the environment's budget of [`ENV_BUDGET_BYTES`] goes by file only:
//!    `HOOKVISOR_<NAME>_FILE` is the path of a file holding its exact bytes, and
//!    `HOOKVISOR_<NAME>` is unset. The limit is on the value's bytes: 65,536 is inline,
//!    65,537 a file.
//! 6. Each variable name is set once: when two names map to one variable (`a.b` and `a_b`, or
//!    a data key `files_nul`), the first in precedence order keeps it and the other is left
//!    out of the environment (the lookups still find it). A name whose variable would be bare
//!    `HOOKVISOR_` (an empty key) is left out.
//! 7. At most [`MAX_VARIABLES`] variables are set, and a file's path counts against the
//!    budget too: a variable past either is left out, and is only in `payload.json` and the
//!    lookups. Together they keep `execve` clear of `E2BIG`.
//! 8. A name ending in `_FILE` or `_NUL` is never set from a value: those names are the paths
//!    of the files of rules 3 and 5, and a data key `content_file` must not pass for the file
//!    of `content` (a hook would read the path it names). Such a variable is left out with a
//!    warning; its value stays in `payload.json` and the lookups.
//! 9. A variable whose name, with `_FILE`, is over [`MAX_NAME_BYTES`] is left out with a
//!    warning (and its flattened children with it), so that a long data key cannot make a file
//!    name the file system refuses and keep the hook from starting.
//!
//! A variable left out because another took its name (rule 6), or whose `_FILE` name another
//! took, is warned about too when its value was too large to be inline: it is then in no
//! variable at all.
//!
//! # Known limit: the files can change under the hook
//!
//! The directory belongs to the run user, who is also the agent's user: between our write and
//! the hook's read, the agent can replace `payload.json` or a `_FILE`/`_NUL` file. Closing that
//! needs the files passed to the hook as sealed descriptors through the executor's descriptor
//! closing, which is not done yet. The event JSON on stdin is a sealed memory file the agent
//! cannot change (the executor's rule 1): **it is the source of truth, and a gate must read its
//! event from stdin**; `HOOKVISOR_PAYLOAD`, the files and the environment are conveniences.
//!
//! [`ENV_BUDGET_BYTES`]: crate::payload::ENV_BUDGET_BYTES
//! [`MAX_FLATTEN_SEGMENTS`]: crate::payload::MAX_FLATTEN_SEGMENTS
//! [`MAX_INLINE_BYTES`]: crate::payload::MAX_INLINE_BYTES
//! [`MAX_NAME_BYTES`]: crate::payload::MAX_NAME_BYTES
//! [`MAX_VARIABLES`]: crate::payload::MAX_VARIABLES
//! [`Payload::environment`]: crate::payload::Payload::environment
//! [`Payload::environment_prefixed`]: crate::payload::Payload::environment_prefixed
//! [`RunFiles`]: crate::payload::RunFiles
//! [`Payload::lookup`]: crate::payload::Payload::lookup
//! [`Payload::stdin_json`]: crate::payload::Payload::stdin_json
//! [`Payload::template_value`]: crate::payload::Payload::template_value
//! [`Payload::text_var`]: crate::payload::Payload::text_var
//! [`Lookup`]: crate::when::Lookup
//! [`env_name`]: crate::template::env_name
//! [`nul_env_name`]: crate::template::nul_env_name

#![forbid(unsafe_code)]

use std::collections::HashSet;
use std::ffi::{OsStr, OsString};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::SystemTime;

use nix::fcntl::{OFlag, openat};
use nix::sys::stat::Mode;

use serde::Serialize;
use serde_json::{Map, Value as Json};

use crate::template::{self, env_name, nul_env_name};
use crate::timestamp::rfc3339_millis;
use crate::when::{self, Lookup};

/// The largest value passed inline in the environment (§4.1: "> 64 KiB by file only").
pub const MAX_INLINE_BYTES: usize = 64 << 10;

/// The most bytes of values set inline in all; later values go by file (rule 5). Linux allows
/// arguments and environment 2 MiB together; a quarter leaves room for the rest.
pub const ENV_BUDGET_BYTES: usize = 512 << 10;

/// The most variables [`Payload::environment`] sets (rule 7).
pub const MAX_VARIABLES: usize = 1024;

/// The most segments of a flattened name (rule 4): `a.b.c.d.e.f.g.h`.
pub const MAX_FLATTEN_SEGMENTS: usize = 8;

/// The longest variable name with its `_FILE` suffix (rule 9): the file takes that name, and
/// file systems refuse one over 255 bytes.
pub const MAX_NAME_BYTES: usize = 200;

/// The suffixes of the file variables (rules 3 and 5), which no value may take (rule 8).
const FILE_SUFFIXES: [&str; 2] = ["_FILE", "_NUL"];

/// The built-in names and `data`, which extra variables cannot take (levels 1 and 3 of
/// "Names").
const RESERVED: [&str; 9] = [
    "event",
    "session",
    "workspace",
    "timestamp",
    "trigger",
    "iteration",
    "stage",
    "files",
    "data",
];

/// Every variable name hookvisor itself sets for some event (docs/EVENTS.md §4.1 and §5 rules 14,
/// 16); any other name must come in the event's `data`. `check` warns on a `${name}` whose
/// first segment is none of these (§4.1 rule 5).
const KNOWN_NAMES: [&str; 31] = [
    "session",
    "event",
    "workspace",
    "timestamp",
    "trigger",
    "iteration",
    "max_iterations",
    "stage",
    "next_stage",
    "last_hook_status",
    "decision",
    "files",
    "file",
    "tool_name",
    "tool_input",
    "tool",
    "task_id",
    "task_content",
    "error",
    "prompt",
    "agent",
    "data",
    "hook_response",
    "spawn_output",
    "callback_url",
    "progress",
    "status",
    "ctx",
    "stage_outputs",
    "reason",
    "commit",
];

/// Whether hookvisor sets `name` (its first segment, case-insensitively) for some event: the
/// names of docs/EVENTS.md §4.1 and the agent-pipelines ones of §5 rule 14.
pub fn is_known_name(name: &str) -> bool {
    let first = name.split('.').next().unwrap_or(name).to_ascii_lowercase();
    KNOWN_NAMES.contains(&first.as_str())
}

/// The events of a `hookvisor loop` (docs/EVENTS.md §3.2), which alone set its variables.
const LOOP_EVENTS: [&str; 7] = [
    "session.start",
    "turn.start",
    "turn.end",
    "session.stop",
    "error",
    "stage.complete",
    "session.end",
];

/// Names some events only set (docs/EVENTS.md §4.1 "per event", §5 rule 14): the name and those
/// events. A name not here is set for every event (or none: [`is_known_name`]).
const PER_EVENT: [(&str, &[&str]); 10] = [
    // `file.edited` carries its `tool.after`'s data.
    (
        "tool_name",
        &["tool.before", "tool.after", "tool.failed", "file.edited"],
    ),
    (
        "tool_input",
        &["tool.before", "tool.after", "tool.failed", "file.edited"],
    ),
    ("task_id", &["task.start", "task.complete"]),
    ("task_content", &["task.start", "task.complete"]),
    ("prompt", &["turn.start"]),
    ("max_iterations", &LOOP_EVENTS),
    ("next_stage", &LOOP_EVENTS),
    ("progress", &LOOP_EVENTS),
    ("status", &LOOP_EVENTS),
    ("ctx", &LOOP_EVENTS),
];

/// Whether hookvisor sets `name` (its first segment, case-insensitively) for `event` (its
/// canonical name) on some front: a known name ([`is_known_name`]) that is not one only other
/// events set (`PER_EVENT`). An agent's raw event (`claude.PreCompact`) may carry any. The
/// one rule of `check`'s warning about a `${name}` a hook's runs would fail on (docs/EVENTS.md §4.1
/// rule 5).
pub fn provides(event: &str, name: &str) -> bool {
    let first = name.split('.').next().unwrap_or(name).to_ascii_lowercase();
    if !KNOWN_NAMES.contains(&first.as_str()) {
        return false;
    }
    let raw = event.contains(|c: char| c.is_ascii_uppercase());
    raw || (PER_EVENT.iter())
        .find(|(n, _)| *n == first)
        .is_none_or(|(_, events)| events.contains(&event))
}

/// Which JSON a hook reads on stdin (docs/EVENTS.md §4.1 "Transport": "canonical or source
/// dialect"): scripts written for another tool read that tool's shape.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StdinDialect {
    /// The event JSON of "The event JSON". The default.
    #[default]
    Canonical,
    /// AutoAgent's hook input ([`Payload::stdin_json_for`]), for an AutoAgent import.
    AutoAgent {
        /// AutoAgent's name of the event (`PreExecutionEnd`), its `eventName`.
        event_name: String,
    },
}

/// Which names a hook's environment has besides hookvisor's own (docs/EVENTS.md §2.2: an
/// agent-pipelines import's "names exported"): scripts written for another tool read its names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EnvDialect {
    /// hookvisor's variables only ("The environment"). The default.
    #[default]
    Canonical,
    /// Also agent-pipelines' names ([`PIPELINES_NAMES`]), for an agent-pipelines import
    /// ([`dialect_environment`]).
    Pipelines,
}

/// agent-pipelines' variables and the template names they are (its "Environment Variables"
/// table; docs/EVENTS.md §5 rule 14): `${CHANGED_FILES}` of its files is `${files}` here.
pub const PIPELINES_NAMES: [(&str, &str); 17] = [
    ("SESSION", "session"),
    ("STAGE", "stage"),
    ("NEXT_STAGE", "next_stage"),
    ("ITERATION", "iteration"),
    ("MAX_ITERATIONS", "max_iterations"),
    ("PROGRESS", "progress"),
    ("STATUS", "status"),
    ("CTX", "ctx"),
    ("LAST_DECISION", "decision"),
    ("LAST_HOOK_STATUS", "last_hook_status"),
    ("CHANGED_FILES", "files"),
    ("STAGE_OUTPUTS", "stage_outputs"),
    ("ERROR", "error"),
    ("TIMESTAMP", "timestamp"),
    ("CALLBACK_URL", "callback_url"),
    ("HOOK_RESPONSE", "hook_response"),
    ("SPAWN_OUTPUT", "spawn_output"),
];

/// `env`, a hook's environment from [`Payload::environment`], with the names of `dialect`
/// added: for [`EnvDialect::Pipelines`] each of [`PIPELINES_NAMES`] set to the value of its
/// `HOOKVISOR_<NAME>` (a list space-joined, as there), or empty when the event has none or it
/// went by file only (rule 5), as agent-pipelines sets every name: an inherited `STATUS` or
/// `ERROR` of hookvisor's own environment must not pass for the event's.
pub fn dialect_environment(
    dialect: EnvDialect,
    mut env: Vec<(OsString, OsString)>,
) -> Vec<(OsString, OsString)> {
    if dialect == EnvDialect::Pipelines {
        for (theirs, ours) in PIPELINES_NAMES {
            let var = env_name(ours);
            let value = env
                .iter()
                .find(|(name, _)| name.as_os_str() == var.as_str())
                .map(|(_, value)| value.clone())
                .unwrap_or_default();
            env.push((OsString::from(theirs), value));
        }
    }
    env
}

/// Milliseconds since the epoch; 0 for a time before it.
fn epoch_millis(at: SystemTime) -> u64 {
    at.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// The event a hook receives; built with [`Payload::new`] and its setters. See the [module
/// documentation](self) for the JSON, the names and the environment.
#[derive(Debug, Clone)]
pub struct Payload {
    // The run history reads these five (`status::history::RunInfo::of`).
    pub(crate) event: String,
    pub(crate) session: String,
    workspace: PathBuf,
    timestamp: String,
    /// `timestamp` in milliseconds since the epoch, for the AutoAgent dialect.
    millis: u64,
    pub(crate) trigger: String,
    iteration: Option<u64>,
    stage: Option<String>,
    pub(crate) files: Option<Vec<OsString>>,
    pub(crate) data: Map<String, Json>,
    /// Extra variables, by lower-cased name, in the order set.
    vars: Vec<(String, Var)>,
}

/// A variable's value before it is rendered for one consumer.
#[derive(Debug, Clone)]
enum Var {
    /// Any bytes (a file name, the workspace).
    Text(OsString),
    /// A list of any bytes (`files`).
    List(Vec<OsString>),
    /// A JSON value (data and what is read inside it).
    Json(Json),
    /// A text kept exactly, read inside when it is one JSON object ([`Payload::document_var`]);
    /// shared, since every lookup clones the variables and an output may be megabytes.
    Document(Arc<Document>),
}

/// The value of [`Var::Document`].
#[derive(Debug)]
struct Document {
    /// The text, exactly.
    text: String,
    /// The text parsed, when it is one JSON object.
    object: Option<Json>,
}

impl Payload {
    /// The payload of `event` in `session` at `workspace`, fired by `trigger` (`user`, `hook`,
    /// `loop`), stamped now, with empty `data` and no iteration, stage or files.
    pub fn new(
        event: impl Into<String>,
        session: impl Into<String>,
        workspace: impl Into<PathBuf>,
        trigger: impl Into<String>,
    ) -> Payload {
        let now = SystemTime::now();
        Payload {
            event: event.into(),
            session: session.into(),
            workspace: workspace.into(),
            timestamp: rfc3339_millis(now),
            millis: epoch_millis(now),
            trigger: trigger.into(),
            iteration: None,
            stage: None,
            files: None,
            data: Map::new(),
            vars: Vec::new(),
        }
    }

    /// Stamps the event at `at` instead of now.
    pub fn at(mut self, at: SystemTime) -> Payload {
        self.timestamp = rfc3339_millis(at);
        self.millis = epoch_millis(at);
        self
    }

    /// Sets `iteration` (a loop's turn number). Unset by default.
    pub fn iteration(mut self, iteration: u64) -> Payload {
        self.iteration = Some(iteration);
        self
    }

    /// Sets `stage`. Unset by default.
    pub fn stage(mut self, stage: impl Into<String>) -> Payload {
        self.stage = Some(stage.into());
        self
    }

    /// Sets `files`, the paths the event concerns, with their exact bytes. Unset by default.
    pub fn files<I, F>(mut self, files: I) -> Payload
    where
        I: IntoIterator<Item = F>,
        F: Into<OsString>,
    {
        self.files = Some(files.into_iter().map(Into::into).collect());
        self
    }

    /// Sets `data`, the event's data object. Empty by default.
    pub fn data(mut self, data: Map<String, Json>) -> Payload {
        self.data = data;
        self
    }

    /// Adds a text variable `name` (exact bytes), below the built-ins, above `data` (level 2
    /// of "Names"). Not in the event JSON. A second setting of a name replaces the first; a
    /// built-in name or `data` is ignored (they are the event's).
    pub fn text_var(self, name: &str, value: impl Into<OsString>) -> Payload {
        self.var(name, Var::Text(value.into()))
    }

    /// Adds a list variable `name`, like [`Payload::text_var`].
    pub fn list_var<I, F>(self, name: &str, items: I) -> Payload
    where
        I: IntoIterator<Item = F>,
        F: Into<OsString>,
    {
        self.var(name, Var::List(items.into_iter().map(Into::into).collect()))
    }

    /// Adds a JSON variable `name` (`${name.key}` reads inside it), like [`Payload::text_var`].
    pub fn json_var(self, name: &str, value: Json) -> Payload {
        self.var(name, Var::Json(value))
    }

    /// Adds a variable `name` whose value is `text` exactly and which reads as JSON when the
    /// text is one JSON object (a spawn's `output.json`, a webhook's response): `${name}` is
    /// the text ([`Payload::lookup`] gives the object), `${name.key}` reads inside it, and the
    /// environment flattens its keys (rule 4) beside `HOOKVISOR_<NAME>`. Otherwise like
    /// [`Payload::text_var`].
    pub fn document_var(self, name: &str, text: impl Into<String>) -> Payload {
        let text = text.into();
        let object = serde_json::from_str::<Json>(&text)
            .ok()
            .filter(Json::is_object);
        self.var(name, Var::Document(Arc::new(Document { text, object })))
    }

    fn var(mut self, name: &str, value: Var) -> Payload {
        let name = name.to_ascii_lowercase();
        if RESERVED.contains(&name.as_str()) {
            return self;
        }
        self.vars.retain(|(n, _)| *n != name);
        self.vars.push((name, value));
        self
    }

    /// The event JSON, for stdin and `HOOKVISOR_PAYLOAD` (see "The event JSON").
    pub fn stdin_json(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct Wire<'a> {
            event: &'a str,
            session: &'a str,
            workspace: String,
            timestamp: &'a str,
            trigger: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            iteration: Option<u64>,
            #[serde(skip_serializing_if = "Option::is_none")]
            stage: Option<&'a str>,
            #[serde(skip_serializing_if = "Option::is_none")]
            files: Option<Vec<String>>,
            data: &'a Map<String, Json>,
        }
        let wire = Wire {
            event: &self.event,
            session: &self.session,
            workspace: self.workspace.to_string_lossy().into_owned(),
            timestamp: &self.timestamp,
            trigger: &self.trigger,
            iteration: self.iteration,
            stage: self.stage.as_deref(),
            files: self.files.as_ref().map(|files| {
                files
                    .iter()
                    .map(|f| f.to_string_lossy().into_owned())
                    .collect()
            }),
            data: &self.data,
        };
        // Strings, integers and a map with string keys: serializing cannot fail, and an empty
        // object is no worse than a panic if it ever did.
        serde_json::to_vec(&wire).unwrap_or_else(|_| b"{}".to_vec())
    }

    /// The JSON a hook of `dialect` reads on stdin: the event JSON, or its source tool's own.
    ///
    /// AutoAgent's ([`StdinDialect::AutoAgent`], its design's `HookManager.executeHooks`) is
    /// `{eventName, sessionId, workspace, timestamp, ...data}`: `timestamp` in milliseconds
    /// since the epoch, `data`'s keys spread beside the others, which win a name,
    /// `filesModified` from `files` when the data has none, and Stop's `reason` `completed`
    /// when the data has none (`session.stop` fires only for a done agent). `HOOKVISOR_PAYLOAD`
    /// stays the event JSON: it is hookvisor's, and the dialect is for the scripts written for
    /// AutoAgent.
    pub fn stdin_json_for(&self, dialect: &StdinDialect) -> Vec<u8> {
        let StdinDialect::AutoAgent { event_name } = dialect else {
            return self.stdin_json();
        };
        let mut wire = Map::new();
        wire.insert("eventName".into(), Json::from(event_name.as_str()));
        wire.insert("sessionId".into(), Json::from(self.session.as_str()));
        wire.insert(
            "workspace".into(),
            Json::from(self.workspace.to_string_lossy().into_owned()),
        );
        wire.insert("timestamp".into(), Json::from(self.millis));
        for (key, value) in &self.data {
            if !wire.contains_key(key) {
                wire.insert(key.clone(), value.clone());
            }
        }
        // AutoAgent's Stop says why the session ends; hookvisor fires `session.stop` only when
        // the agent is done (never on an interrupt or an error), which is its `completed`.
        if event_name == "Stop" && !wire.contains_key("reason") {
            wire.insert("reason".into(), Json::from("completed"));
        }
        if let Some(files) = &self.files
            && !wire.contains_key("filesModified")
        {
            let files = files
                .iter()
                .map(|f| Json::from(f.to_string_lossy().into_owned()));
            wire.insert("filesModified".into(), files.collect());
        }
        serde_json::to_vec(&Json::Object(wire)).unwrap_or_else(|_| b"{}".to_vec())
    }

    /// Writes the payload's files into `dir` and returns the environment of a hook (see "The
    /// environment"): `HOOKVISOR_PAYLOAD` first, then the variables in precedence order.
    /// Fails when `dir` is a symbolic link, not a directory, or not owned as "The environment"
    /// requires, and when a file cannot be created, including when one already exists: give
    /// each run a fresh directory.
    pub fn environment(&self, dir: &Path) -> io::Result<Vec<(OsString, OsString)>> {
        let env = self.build_environment(dir, "")?;
        env.warn_skipped();
        Ok(env.out)
    }

    /// [`Payload::environment`] with every file name starting with `prefix`, in a directory
    /// several runs share; the files are removed when the returned [`RunFiles`] is dropped.
    ///
    /// One run's files without a directory of their own: on ext4 a `mkdir` and `rmdir` cost
    /// more than the hook `true` (BENCHMARKS.md, case 7). `prefix` must be unique among the
    /// runs using `dir` (a file that exists already fails the call) and contain no `/`.
    pub fn environment_prefixed(&self, dir: &Path, prefix: &str) -> io::Result<RunFiles> {
        if prefix.contains('/') {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "a file name prefix holds no /",
            ));
        }
        let mut env = self.build_environment(dir, prefix)?;
        env.warn_skipped();
        Ok(RunFiles {
            env: std::mem::take(&mut env.out),
            names: std::mem::take(&mut env.created),
            dir_fd: env.dir_fd,
        })
    }

    /// [`Payload::environment`], keeping what was left out for the warning and the tests.
    fn build_environment<'a>(&self, dir: &'a Path, prefix: &'a str) -> io::Result<Env<'a>> {
        let mut env = Env {
            dir,
            prefix,
            created: Vec::new(),
            dir_fd: open_run_dir(dir)?,
            out: Vec::new(),
            used: HashSet::new(),
            budget: ENV_BUDGET_BYTES,
            skipped: Vec::new(),
        };
        env.file_var(
            "HOOKVISOR_PAYLOAD".to_owned(),
            "payload.json",
            &self.stdin_json(),
        )?;
        for (name, var) in self.variables() {
            env.emit(&name, &var, 1)?;
        }
        Ok(env)
    }

    /// The value of `${path[0].path[1]…}` for `when:` (see "Names"): text as
    /// [`when::Value::Text`], lists and JSON as [`when::Value::Json`].
    pub fn lookup(&self, path: &[&str]) -> Option<when::Value> {
        Some(match self.resolve(path)? {
            Var::Text(text) => when::Value::Text(text.to_string_lossy().into_owned()),
            Var::List(items) => when::Value::Json(Json::Array(
                items
                    .iter()
                    .map(|i| Json::String(i.to_string_lossy().into_owned()))
                    .collect(),
            )),
            Var::Json(value) => when::Value::Json(value),
            Var::Document(doc) => match &doc.object {
                Some(object) => when::Value::Json(object.clone()),
                None => when::Value::Text(doc.text.clone()),
            },
        })
    }

    /// The value of the dotted `name` for `argv:` ([`template::expand_argv`]): a scalar or a
    /// list, each item rendered as the environment renders it (rule 2 of "The environment").
    pub fn template_value(&self, name: &str) -> Option<template::Value> {
        let path: Vec<&str> = name.split('.').collect();
        Some(match self.resolve(&path)? {
            Var::Text(text) => template::Value::Scalar(text),
            Var::List(items) => template::Value::List(items),
            Var::Json(Json::Array(items)) => {
                template::Value::List(items.iter().map(|i| OsString::from(scalar(i))).collect())
            }
            Var::Json(value) => template::Value::Scalar(OsString::from(scalar(&value))),
            Var::Document(doc) => template::Value::Scalar(OsString::from(&doc.text)),
        })
    }

    /// The built-ins that are set, then the extra variables: the first two levels of "Names",
    /// small, so cheap to build per lookup.
    fn named(&self) -> Vec<(String, Var)> {
        let text = |s: &str| Var::Text(OsString::from(s));
        let mut named: Vec<(String, Var)> = vec![
            ("event".into(), text(&self.event)),
            ("session".into(), text(&self.session)),
            (
                "workspace".into(),
                Var::Text(self.workspace.clone().into_os_string()),
            ),
            ("timestamp".into(), text(&self.timestamp)),
            ("trigger".into(), text(&self.trigger)),
        ];
        if let Some(n) = self.iteration {
            named.push(("iteration".into(), text(&n.to_string())));
        }
        if let Some(stage) = &self.stage {
            named.push(("stage".into(), text(stage)));
        }
        if let Some(files) = &self.files {
            named.push(("files".into(), Var::List(files.clone())));
        }
        named.extend(self.vars.iter().cloned());
        named
    }

    /// Every variable in precedence order, each name once (the first wins): what the
    /// environment sets.
    fn variables(&self) -> Vec<(String, Var)> {
        let mut all = self.named();
        all.push(("data".into(), Var::Json(Json::Object(self.data.clone()))));
        for key in sorted_keys(&self.data) {
            if let Some(value) = self.data.get(key) {
                all.push((key.clone(), Var::Json(value.clone())));
            }
        }
        let mut seen = HashSet::new();
        all.retain(|(name, _)| seen.insert(name.to_ascii_lowercase()));
        all
    }

    /// Resolves a dotted path (see "Names"): level by level in precedence order, within a
    /// level an exact match before one ignoring case.
    fn resolve(&self, path: &[&str]) -> Option<Var> {
        let (first, rest) = path.split_first()?;
        let named = self.named();
        let found = named
            .iter()
            .find(|(n, _)| n == first)
            .or_else(|| named.iter().find(|(n, _)| n.eq_ignore_ascii_case(first)));
        if let Some((_, var)) = found {
            if rest.is_empty() {
                return Some(var.clone());
            }
            let root = match var {
                Var::Json(root) => root,
                Var::Document(doc) => doc.object.as_ref()?,
                _ => return None,
            };
            return walk(root, rest).cloned().map(Var::Json);
        }
        let value = if first.eq_ignore_ascii_case("data") {
            let Some((key, rest)) = rest.split_first() else {
                return Some(Var::Json(Json::Object(self.data.clone())));
            };
            walk(get_key(&self.data, key)?, rest)?
        } else {
            walk(get_key(&self.data, first)?, rest)?
        };
        Some(Var::Json(value.clone()))
    }
}

/// The value at `path` inside `value`: object keys as [`get_key`] matches them, array indexes
/// in decimal.
fn walk<'a>(mut value: &'a Json, path: &[&str]) -> Option<&'a Json> {
    for segment in path {
        value = match value {
            Json::Object(map) => get_key(map, segment)?,
            Json::Array(items) => items.get(segment.parse::<usize>().ok()?)?,
            _ => return None,
        };
    }
    Some(value)
}

impl Lookup for Payload {
    fn lookup(&self, path: &[&str]) -> Option<when::Value> {
        Payload::lookup(self, path)
    }
}

/// `map[key]`, matched exactly first, else ignoring ASCII case (in sorted key order, so the
/// answer does not depend on how the map keeps its keys).
fn get_key<'a>(map: &'a Map<String, Json>, key: &str) -> Option<&'a Json> {
    map.get(key).or_else(|| {
        sorted_keys(map)
            .into_iter()
            .find(|k| k.eq_ignore_ascii_case(key))
            .and_then(|k| map.get(k))
    })
}

/// The keys of `map` in sorted order, whatever order the map keeps (serde_json's
/// `preserve_order` is on in some builds of the workspace and off in others).
fn sorted_keys(map: &Map<String, Json>) -> Vec<&String> {
    let mut keys: Vec<&String> = map.keys().collect();
    keys.sort();
    keys
}

/// A JSON value as one text (rule 2 of "The environment").
fn scalar(value: &Json) -> String {
    match value {
        Json::String(s) => s.clone(),
        Json::Null => String::new(),
        other => other.to_string(),
    }
}

/// Opens the run directory `dir` once for every file (see "The environment"): not through a
/// symbolic link, and only when it is ours to use.
fn open_run_dir(dir: &Path) -> io::Result<OwnedFd> {
    let refuse = |why: String| {
        io::Error::new(
            io::ErrorKind::PermissionDenied,
            format!("{}: {why}", dir.display()),
        )
    };
    let file = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(dir)
        .map_err(|e| {
            // O_NOFOLLOW with O_DIRECTORY reports a symlink as ELOOP or ENOTDIR; the kernel's
            // words would mislead, so look (for the message only: the open already refused).
            let link = fs::symlink_metadata(dir).is_ok_and(|m| m.file_type().is_symlink());
            if link {
                refuse("the run directory is a symbolic link".into())
            } else {
                io::Error::new(e.kind(), format!("{}: {e}", dir.display()))
            }
        })?;
    let meta = file.metadata()?;
    // `setfsuid` with an id no user has changes nothing and reports the current one: the uid
    // the kernel checks file access with, which may differ from the effective uid when the
    // caller acts as the run user.
    let fsuid = nix::unistd::setfsuid(nix::unistd::Uid::from_raw(u32::MAX)).as_raw();
    if meta.uid() != fsuid {
        return Err(refuse(format!(
            "the run directory is owned by uid {}, not by uid {fsuid} we act as; make a fresh \
             directory as that user",
            meta.uid()
        )));
    }
    if fsuid == 0 && meta.mode() & 0o022 != 0 {
        return Err(refuse(format!(
            "acting as root, the run directory must not be writable by its group or others \
             (mode {:o}); make it 0700",
            meta.mode() & 0o7777
        )));
    }
    Ok(OwnedFd::from(file))
}

/// The environment being built.
/// The environment of one run and its files, which are removed when this is dropped (see
/// [`Payload::environment_prefixed`]).
#[derive(Debug)]
pub struct RunFiles {
    /// The hook's variables, as [`Payload::environment`] returns them.
    pub env: Vec<(OsString, OsString)>,
    /// The files made, relative to `dir_fd`.
    names: Vec<String>,
    /// The directory they are in, opened once when they were made.
    dir_fd: OwnedFd,
}

impl Drop for RunFiles {
    fn drop(&mut self) {
        for name in &self.names {
            // Through the descriptor opened before the writes: the same directory even if its
            // path was replaced since. A file already gone is nothing to report.
            let _ = nix::unistd::unlinkat(
                &self.dir_fd,
                name.as_str(),
                nix::unistd::UnlinkatFlags::NoRemoveDir,
            );
        }
    }
}

struct Env<'a> {
    /// The run directory's path, for the variables that name its files.
    dir: &'a Path,
    /// Put before every file name ([`Payload::environment_prefixed`]); empty in a run's own
    /// directory.
    prefix: &'a str,
    /// The names of the files made, for [`RunFiles`] to remove.
    created: Vec<String>,
    /// The run directory itself, where the files are made (see "The environment").
    dir_fd: OwnedFd,
    out: Vec<(OsString, OsString)>,
    /// Variable names set so far (rule 6).
    used: HashSet<String>,
    /// Inline bytes left (rule 5).
    budget: usize,
    /// Variables left out with a warning (rules 8 and 9, and values in no variable), and why.
    skipped: Vec<(String, &'static str)>,
}

impl Env<'_> {
    /// Sets the variables of `name` (at `depth` segments) and of its flattened children.
    fn emit(&mut self, name: &str, var: &Var, depth: usize) -> io::Result<()> {
        let var_name = env_name(name);
        if var_name.len() == "HOOKVISOR_".len() {
            return Ok(());
        }
        // Rule 9; a child's name is longer still, so none of them is set either.
        if var_name.len() + "_FILE".len() > MAX_NAME_BYTES {
            self.skip(var_name, "its name is too long for a file name");
            return Ok(());
        }
        // Rule 8: the value is left out, its children (`x_file.a`) are not. A bare `file` or
        // `nul` is no file's name: that would need an empty key, which is never set.
        let key = var_name.get("HOOKVISOR_".len()..).unwrap_or_default();
        if FILE_SUFFIXES.iter().any(|s| key.ends_with(s)) {
            // `data.file` (every file tool's call) is also `file`, set or warned about under
            // that name: no value is lost, so no warning.
            let also_top_level = name
                .split_once('.')
                .is_some_and(|(first, rest)| first == "data" && !rest.contains('.'));
            if !also_top_level {
                self.skip(
                    var_name,
                    "names ending in _FILE or _NUL are kept for the paths of files",
                );
            }
        } else {
            self.value(name, var_name, var)?;
        }
        let object = match var {
            Var::Json(object) => Some(object),
            Var::Document(doc) => doc.object.as_ref(),
            _ => None,
        };
        if let Some(Json::Object(map)) = object
            && depth < MAX_FLATTEN_SEGMENTS
        {
            for key in sorted_keys(map) {
                if let Some(child) = map.get(key) {
                    // Cloned per child; bounded by the depth and the data's size.
                    self.emit(
                        &format!("{name}.{key}"),
                        &Var::Json(child.clone()),
                        depth + 1,
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Notes a variable left out, for [`Env::warn_skipped`].
    fn skip(&mut self, var_name: String, why: &'static str) {
        self.skipped.push((var_name, why));
    }

    /// One warning for every variable left out, naming a few: hostile data could have
    /// thousands, and one line per name would flood the log.
    fn warn_skipped(&self) {
        const SHOWN: usize = 5;
        if self.skipped.is_empty() {
            return;
        }
        let shown: Vec<String> = self
            .skipped
            .iter()
            .take(SHOWN)
            .map(|(name, why)| format!("{name} ({why})"))
            .collect();
        let more = self.skipped.len().saturating_sub(SHOWN);
        let more = if more > 0 {
            format!(" and {more} more")
        } else {
            String::new()
        };
        tracing::warn!(
            "hook environment: left out {}{more}; a `${{name}}` in the hook still reads them \
             (event values are also in the event JSON on stdin; `hook_response` and \
             `spawn_output` are not)",
            shown.join(", ")
        );
    }

    /// Sets the variable of one value, inline or by file (rules 2, 3 and 5).
    fn value(&mut self, name: &str, var_name: String, var: &Var) -> io::Result<()> {
        match var {
            Var::Text(text) => self.scalar(var_name, text.as_bytes())?,
            Var::List(items) => self.list(name, var_name, items.iter().map(|i| i.as_bytes()))?,
            Var::Json(Json::Array(items)) => {
                let texts: Vec<String> = items.iter().map(scalar).collect();
                self.list(name, var_name, texts.iter().map(|t| t.as_bytes()))?;
            }
            Var::Json(value) => self.scalar(var_name, scalar(value).as_bytes())?,
            Var::Document(doc) => self.scalar(var_name, doc.text.as_bytes())?,
        }
        Ok(())
    }

    /// A list: its NUL file and its space-joined scalar (rule 3).
    fn list<'b>(
        &mut self,
        name: &str,
        var_name: String,
        items: impl Iterator<Item = &'b [u8]>,
    ) -> io::Result<()> {
        let nul_name = nul_env_name(name);
        if !self.free(&nul_name) || !self.free(&var_name) {
            return Ok(());
        }
        let mut nul = Vec::new();
        let mut joined = Vec::new();
        for (i, item) in items.enumerate() {
            nul.extend_from_slice(item);
            nul.push(0);
            if i > 0 {
                joined.push(b' ');
            }
            joined.extend_from_slice(item);
        }
        self.file_var(nul_name.clone(), &nul_name, &nul)?;
        self.scalar(var_name, &joined)
    }

    /// A scalar: inline, or by file (rule 5).
    fn scalar(&mut self, var_name: String, bytes: &[u8]) -> io::Result<()> {
        let inline = bytes.len() <= MAX_INLINE_BYTES && !bytes.contains(&0);
        if !self.free(&var_name) {
            if !inline && self.out.len() < MAX_VARIABLES {
                self.skip(
                    var_name,
                    "another value took its name, and it is too large inline",
                );
            }
            return Ok(());
        }
        let cost = var_name.len() + bytes.len() + 2;
        if inline && cost <= self.budget {
            self.budget -= cost;
            self.used.insert(var_name.clone());
            self.out.push((
                OsString::from(var_name),
                OsStr::from_bytes(bytes).to_owned(),
            ));
            return Ok(());
        }
        let file_name = format!("{var_name}_FILE");
        if !self.free(&file_name) {
            // Rule 8 keeps data from taking a `_FILE` name, but two names can still map to one
            // file (`a.b` and `a_b`): the value is then in no variable, which must not go
            // unsaid.
            if self.out.len() < MAX_VARIABLES {
                self.skip(file_name, "another value took its file's name");
            }
            return Ok(());
        }
        // The bare name is taken too, so no later value sets it beside its file.
        self.used.insert(var_name);
        self.file_var(file_name.clone(), &file_name, bytes)
    }

    /// Whether `var_name` may still be set (rules 6 and 7).
    fn free(&self, var_name: &str) -> bool {
        !self.used.contains(var_name) && self.out.len() < MAX_VARIABLES
    }

    /// Sets `var_name` to the path of a new file `dir/file_name` holding `bytes`, when the
    /// budget still has room for the path (rules 5 and 7); else sets nothing and writes
    /// nothing.
    fn file_var(&mut self, var_name: String, file_name: &str, bytes: &[u8]) -> io::Result<()> {
        let file_name = format!("{}{file_name}", self.prefix);
        let path = self.dir.join(&file_name);
        let cost = var_name.len() + path.as_os_str().len() + 2;
        if !self.free(&var_name) || cost > self.budget {
            return Ok(());
        }
        write_new(&self.dir_fd, &file_name, bytes)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        self.created.push(file_name);
        self.budget -= cost;
        self.used.insert(var_name.clone());
        self.out
            .push((OsString::from(var_name), path.into_os_string()));
        Ok(())
    }
}

/// Creates `name` in the directory `dir` (new, not through a link, 0600) holding `bytes`.
fn write_new(dir: &OwnedFd, name: &str, bytes: &[u8]) -> io::Result<()> {
    // Variable names are `[A-Z0-9_]` (`env_name`); a `/` would leave the directory.
    if name.contains('/') || name.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a plain file name",
        ));
    }
    let fd = openat(
        dir,
        name,
        OFlag::O_WRONLY | OFlag::O_CREAT | OFlag::O_EXCL | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC,
        Mode::from_bits_truncate(0o600),
    )
    .map_err(io::Error::from)?;
    File::from(fd).write_all(bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::fs;
    use std::os::unix::ffi::OsStringExt;
    use std::os::unix::fs::PermissionsExt;
    use std::process::{Command, Stdio};

    use serde_json::json;

    #[test]
    fn a_name_is_provided_by_the_events_that_set_it() {
        assert!(provides("turn.end", "max_iterations"));
        assert!(provides("stage.complete", "ctx"));
        assert!(!provides("tool.before", "max_iterations"));
        assert!(provides("tool.before", "TOOL_INPUT.command"));
        assert!(!provides("turn.end", "tool_name"));
        assert!(!provides("turn.end", "task_id"));
        assert!(provides("turn.end", "last_hook_status"));
        assert!(provides("claude.PreCompact", "tool_name"));
        assert!(!provides("turn.end", "no_such_name"));
    }

    const HOSTILE: &str = "it's \"quoted\" $HOME ; & | \\ `id` $(touch S)\nline two\r\n\ttab";

    fn non_utf8() -> OsString {
        OsString::from_vec(b"caf\xe9 $(touch S).txt".to_vec())
    }

    fn payload() -> Payload {
        let Json::Object(data) = json!({
            "msg": HOSTILE,
            "event": "fake-event",
            "payload": "/etc/passwd",
            "Tags": ["a", "b c", 3],
            "agent": {"tool_input": {"command": "ls -l", "Limit": 5}},
            "n": 3,
            "none": null,
        }) else {
            unreachable!()
        };
        Payload::new("turn.end", "s-1", "/ws", "user")
            .at(SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_234))
            .iteration(2)
            .stage("plan")
            .files([OsString::from("a.txt"), non_utf8()])
            .text_var("file", non_utf8())
            .data(data)
    }

    fn env_map(env: &[(OsString, OsString)]) -> HashMap<String, Vec<u8>> {
        let mut map = HashMap::new();
        for (k, v) in env {
            let k = k.to_str().unwrap().to_owned();
            assert!(!map.contains_key(&k), "{k} set twice");
            map.insert(k, v.as_bytes().to_vec());
        }
        map
    }

    #[test]
    fn prefixed_files_share_a_directory_and_go_when_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let p = payload();
        let count = || fs::read_dir(dir.path()).unwrap().count();
        let first = p.environment_prefixed(dir.path(), "1-5-0.").unwrap();
        let per_run = count();
        assert!(per_run >= 2, "payload.json and the files list at least");
        let second = p.environment_prefixed(dir.path(), "1-5-1.").unwrap();
        let map = env_map(&first.env);
        assert_eq!(
            map["HOOKVISOR_PAYLOAD"],
            dir.path().join("1-5-0.payload.json").as_os_str().as_bytes()
        );
        assert_eq!(
            fs::read(OsStr::from_bytes(&map["HOOKVISOR_PAYLOAD"])).unwrap(),
            p.stdin_json()
        );
        assert_eq!(
            map["HOOKVISOR_FILES_NUL"],
            dir.path()
                .join("1-5-0.HOOKVISOR_FILES_NUL")
                .as_os_str()
                .as_bytes()
        );
        assert_eq!(count(), 2 * per_run, "two runs side by side");
        // The same prefix again is refused: its files exist.
        let taken = p.environment_prefixed(dir.path(), "1-5-1.").unwrap_err();
        assert_eq!(taken.kind(), io::ErrorKind::AlreadyExists);
        drop(first);
        assert_eq!(
            count(),
            per_run,
            "the first run's files are gone, the second's stay"
        );
        drop(second);
        assert_eq!(count(), 0);
        let slash = p.environment_prefixed(dir.path(), "../x.").unwrap_err();
        assert_eq!(slash.kind(), io::ErrorKind::InvalidInput);
    }

    /// A document variable is its text exactly (spacing kept), reads inside as JSON, flattens
    /// its keys, goes by file over 64 KiB, and stays out of the event JSON.
    #[test]
    fn a_document_is_its_text_and_reads_as_json() {
        let text = "{ \"verdict\": \"ok\",\n  \"n\": 3 }";
        let p = Payload::new("task.complete", "s", "/w", "user").document_var("spawn_output", text);
        let dir = tempfile::tempdir().unwrap();
        let env = env_map(&p.environment(dir.path()).unwrap());
        assert_eq!(env["HOOKVISOR_SPAWN_OUTPUT"], text.as_bytes());
        assert_eq!(env["HOOKVISOR_SPAWN_OUTPUT_VERDICT"], b"ok");
        assert_eq!(env["HOOKVISOR_SPAWN_OUTPUT_N"], b"3");
        assert_eq!(
            p.template_value("spawn_output"),
            Some(template::Value::Scalar(text.into()))
        );
        assert_eq!(
            p.template_value("SPAWN_OUTPUT.verdict"),
            Some(template::Value::Scalar("ok".into()))
        );
        assert_eq!(
            p.lookup(&["spawn_output", "n"]),
            Some(when::Value::Json(json!(3)))
        );
        assert!(
            !String::from_utf8(p.stdin_json())
                .unwrap()
                .contains("verdict")
        );

        // Not an object: text only, nothing inside.
        let p = Payload::new("e", "s", "/w", "user").document_var("hook_response", "[1]");
        assert_eq!(
            p.lookup(&["hook_response"]),
            Some(when::Value::Text("[1]".into()))
        );
        assert_eq!(p.lookup(&["hook_response", "0"]), None);

        // Over 64 KiB: by file only (rule 5), its keys still inline.
        let big = format!("{{\"verdict\":\"ok\",\"pad\":\"{}\"}}", "x".repeat(70_000));
        let p = Payload::new("e", "s", "/w", "user").document_var("spawn_output", big.clone());
        let dir = tempfile::tempdir().unwrap();
        let env = env_map(&p.environment(dir.path()).unwrap());
        assert!(!env.contains_key("HOOKVISOR_SPAWN_OUTPUT"));
        let file = OsStr::from_bytes(&env["HOOKVISOR_SPAWN_OUTPUT_FILE"]);
        assert_eq!(fs::read_to_string(file).unwrap(), big);
        assert_eq!(env["HOOKVISOR_SPAWN_OUTPUT_VERDICT"], b"ok");
    }

    #[test]
    fn stdin_json_has_the_documented_shape_and_order() {
        let text = String::from_utf8(payload().stdin_json()).unwrap();
        assert!(
            text.starts_with(
                r#"{"event":"turn.end","session":"s-1","workspace":"/ws","timestamp":"1970-01-01T00:00:01.234Z","trigger":"user","iteration":2,"stage":"plan","files":["a.txt","caf� $(touch S).txt"],"data":{"#
            ),
            "{text}"
        );
        let value: Json = serde_json::from_str(&text).unwrap();
        assert_eq!(value["data"]["event"], "fake-event");
        assert_eq!(value["data"]["msg"], HOSTILE);
        assert!(value.get("file").is_none(), "extra variables stay out");

        let bare = Payload::new("session.start", "s", "/w", "user").stdin_json();
        let value: Json = serde_json::from_slice(&bare).unwrap();
        let mut keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "data",
                "event",
                "session",
                "timestamp",
                "trigger",
                "workspace"
            ]
        );
    }

    /// AutoAgent's dialect: its names, milliseconds, data spread beside them (never over them),
    /// `filesModified` from the files unless the data has its own.
    #[test]
    fn the_autoagent_dialect_spreads_data_under_its_own_names() {
        let dialect = StdinDialect::AutoAgent {
            event_name: "PreExecutionEnd".into(),
        };
        let Json::Object(data) = json!({"eventName": "forged", "issueNumber": 1, "success": true})
        else {
            unreachable!()
        };
        let payload = Payload::new("task.complete", "s-1", "/ws", "user")
            .at(SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_234))
            .files(["src/a.ts"])
            .data(data);
        let value: Json = serde_json::from_slice(&payload.stdin_json_for(&dialect)).unwrap();
        assert_eq!(
            value,
            json!({
                "eventName": "PreExecutionEnd",
                "sessionId": "s-1",
                "workspace": "/ws",
                "timestamp": 1234,
                "issueNumber": 1,
                "success": true,
                "filesModified": ["src/a.ts"],
            })
        );
        assert_eq!(
            payload.stdin_json_for(&StdinDialect::Canonical),
            payload.stdin_json()
        );

        // Stop's `reason` (completed|interrupted|error): hookvisor's session.stop is a done
        // agent's, unless the data says otherwise.
        let stop = StdinDialect::AutoAgent {
            event_name: "Stop".into(),
        };
        let Json::Object(data) = json!({"iterations": 2}) else {
            unreachable!()
        };
        let payload = Payload::new("session.stop", "s-1", "/ws", "loop").data(data);
        let value: Json = serde_json::from_slice(&payload.stdin_json_for(&stop)).unwrap();
        assert_eq!(value["reason"], "completed", "{value}");
        assert_eq!(value["iterations"], 2, "{value}");
        let Json::Object(data) = json!({"reason": "error"}) else {
            unreachable!()
        };
        let payload = Payload::new("session.stop", "s-1", "/ws", "user").data(data);
        let value: Json = serde_json::from_slice(&payload.stdin_json_for(&stop)).unwrap();
        assert_eq!(value["reason"], "error", "{value}");
    }

    /// agent-pipelines' dialect: its names beside hookvisor's, each with the value of its
    /// template name, and empty where the event has none.
    #[test]
    fn the_pipelines_dialect_exports_its_names_beside_ours() {
        let p = payload().text_var("decision", "stop");
        let dir = tempfile::tempdir().unwrap();
        let env = p.environment(dir.path()).unwrap();
        assert_eq!(dialect_environment(EnvDialect::Canonical, env.clone()), env);
        let map = env_map(&dialect_environment(EnvDialect::Pipelines, env));
        assert_eq!(map["SESSION"], b"s-1");
        assert_eq!(map["ITERATION"], b"2");
        assert_eq!(map["STAGE"], b"plan");
        assert_eq!(map["LAST_DECISION"], b"stop");
        assert_eq!(map["CHANGED_FILES"], map["HOOKVISOR_FILES"]);
        assert_eq!(map["TIMESTAMP"], b"1970-01-01T00:00:01.234Z");
        assert_eq!(map["ERROR"], b"");
        assert_eq!(map["STATUS"], b"");
    }

    #[test]
    fn built_ins_win_over_data_and_data_stays_readable() {
        let p = payload();
        let dir = tempfile::tempdir().unwrap();
        let env = env_map(&p.environment(dir.path()).unwrap());
        assert_eq!(env["HOOKVISOR_EVENT"], b"turn.end");
        assert_eq!(env["HOOKVISOR_DATA_EVENT"], b"fake-event");
        assert_eq!(
            env["HOOKVISOR_PAYLOAD"],
            dir.path().join("payload.json").as_os_str().as_bytes()
        );
        assert_eq!(
            p.lookup(&["event"]),
            Some(when::Value::Text("turn.end".into()))
        );
        assert_eq!(
            p.lookup(&["data", "event"]),
            Some(when::Value::Json(json!("fake-event")))
        );
        assert_eq!(
            p.template_value("payload"),
            Some(template::Value::Scalar("/etc/passwd".into())),
            "a data key that is no built-in name still resolves"
        );
        // An extra variable cannot shadow a built-in either.
        let q = Payload::new("e", "s", "/w", "user").text_var("EVENT", "no");
        assert_eq!(q.lookup(&["event"]), Some(when::Value::Text("e".into())));
    }

    #[test]
    fn names_are_case_insensitive_and_dotted_paths_read_json() {
        let p = payload();
        assert_eq!(
            p.lookup(&["AGENT", "Tool_Input", "command"]),
            Some(when::Value::Json(json!("ls -l")))
        );
        assert_eq!(
            p.lookup(&["agent", "tool_input", "limit"]),
            Some(when::Value::Json(json!(5)))
        );
        assert_eq!(
            p.lookup(&["tags", "1"]),
            Some(when::Value::Json(json!("b c")))
        );
        assert_eq!(p.lookup(&["tags", "9"]), None);
        assert_eq!(p.lookup(&["event", "x"]), None, "text has no fields");
        assert_eq!(p.lookup(&["nope"]), None);
        assert_eq!(p.lookup(&[]), None);
        assert_eq!(
            p.template_value("tags"),
            Some(template::Value::List(vec![
                "a".into(),
                "b c".into(),
                "3".into()
            ]))
        );
        assert_eq!(
            p.template_value("files"),
            Some(template::Value::List(vec!["a.txt".into(), non_utf8()]))
        );
        assert_eq!(
            p.template_value("none"),
            Some(template::Value::Scalar("".into()))
        );

        // The consumers: a `when:` condition and an `argv:` list.
        let cond = when::Condition::parse(
            "${event} == 'turn.end' && ${n} > 2 && ${iteration} == 2 && ${agent.tool_input.limit} % 5 == 0",
        )
        .unwrap();
        assert!(cond.eval(&p).unwrap());
        let argv = template::expand_argv(
            &[
                "--msg=${msg}".to_owned(),
                "${files}".to_owned(),
                "${Stage}".to_owned(),
            ],
            |name| p.template_value(name),
        )
        .unwrap();
        assert_eq!(
            argv,
            [
                OsString::from(format!("--msg={HOSTILE}")),
                "a.txt".into(),
                non_utf8(),
                "plan".into()
            ]
        );
    }

    #[test]
    fn objects_flatten_lists_get_nul_files_and_collisions_keep_the_first() {
        let p = payload();
        let dir = tempfile::tempdir().unwrap();
        let env = env_map(&p.environment(dir.path()).unwrap());
        assert_eq!(env["HOOKVISOR_AGENT_TOOL_INPUT_COMMAND"], b"ls -l");
        assert_eq!(env["HOOKVISOR_AGENT_TOOL_INPUT_LIMIT"], b"5");
        assert_eq!(
            serde_json::from_slice::<Json>(&env["HOOKVISOR_AGENT"]).unwrap(),
            json!({"tool_input": {"command": "ls -l", "Limit": 5}})
        );
        assert_eq!(env["HOOKVISOR_TAGS"], b"a b c 3");
        assert_eq!(
            fs::read(OsStr::from_bytes(&env["HOOKVISOR_TAGS_NUL"])).unwrap(),
            b"a\0b c\x003\0"
        );
        assert_eq!(env["HOOKVISOR_ITERATION"], b"2");
        assert_eq!(env["HOOKVISOR_NONE"], b"");
        assert_eq!(env["HOOKVISOR_N"], b"3");
        for name in env.keys() {
            let path = dir.path().join(name);
            if let Ok(meta) = fs::symlink_metadata(&path) {
                assert_eq!(meta.permissions().mode() & 0o777, 0o600, "{name}");
            }
        }

        // `a.b` and `a_b` both map to HOOKVISOR_A_B: the first in order wins, nothing is set
        // twice (env_map checks), and a data key cannot take a built-in's NUL file.
        let Json::Object(data) = json!({"a": {"b": "nested"}, "a_b": "flat", "files_nul": "/x",
            "": "empty key", "deep": {"1": {"2": {"3": {"4": {"5": {"6": {"7": {"8": "too deep"}}}}}}}}})
        else {
            unreachable!()
        };
        let p = Payload::new("e", "s", "/w", "user").files(["f"]).data(data);
        let dir = tempfile::tempdir().unwrap();
        let env = env_map(&p.environment(dir.path()).unwrap());
        assert_eq!(env["HOOKVISOR_A_B"], b"nested");
        assert_eq!(
            env["HOOKVISOR_FILES_NUL"],
            dir.path()
                .join("HOOKVISOR_FILES_NUL")
                .as_os_str()
                .as_bytes()
        );
        assert!(!env.contains_key("HOOKVISOR_"));
        assert!(env.contains_key("HOOKVISOR_DEEP_1_2_3_4_5_6_7"));
        assert!(!env.contains_key("HOOKVISOR_DEEP_1_2_3_4_5_6_7_8"));
        assert_eq!(
            p.lookup(&["deep", "1", "2", "3", "4", "5", "6", "7", "8"]),
            Some(when::Value::Json(json!("too deep"))),
            "the lookup has no depth limit"
        );
    }

    #[test]
    fn the_64_kib_boundary_and_nul_bytes_go_by_file() {
        let at_limit = "x".repeat(MAX_INLINE_BYTES);
        let over = "y".repeat(MAX_INLINE_BYTES + 1);
        let Json::Object(data) = json!({"big": at_limit, "bigger": over, "nul": "a\u{0}b",
            "list": [over]})
        else {
            unreachable!()
        };
        let p = Payload::new("e", "s", "/w", "user").data(data);
        let dir = tempfile::tempdir().unwrap();
        let env = p.environment(dir.path()).unwrap();
        let map = env_map(&env);
        assert_eq!(map["HOOKVISOR_BIG"].len(), MAX_INLINE_BYTES);
        assert!(!map.contains_key("HOOKVISOR_BIG_FILE"));
        assert!(!map.contains_key("HOOKVISOR_BIGGER"));
        assert!(!map.contains_key("HOOKVISOR_NUL"));
        assert!(!map.contains_key("HOOKVISOR_LIST"));
        assert_eq!(
            fs::read(OsStr::from_bytes(&map["HOOKVISOR_NUL_FILE"])).unwrap(),
            b"a\0b"
        );
        // Through a real shell: the inline value arrives whole, the file holds the other.
        let out = Command::new("/bin/sh")
            .args([
                "-c",
                r#"printf %s "$HOOKVISOR_BIG" | wc -c; wc -c < "$HOOKVISOR_BIGGER_FILE"; wc -c < "$HOOKVISOR_LIST_FILE"; echo "${HOOKVISOR_BIGGER-unset}""#,
            ])
            .env_clear()
            .envs(env)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        let counts: Vec<String> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(|l| l.trim().to_owned())
            .collect();
        assert_eq!(counts, ["65536", "65537", "65537", "unset"]);
    }

    #[test]
    fn the_budget_and_the_variable_cap_keep_the_environment_bounded() {
        let mut data = Map::new();
        for i in 0..2000 {
            data.insert(format!("k{i}"), Json::String("v".repeat(1000)));
        }
        let p = Payload::new("e", "s", "/w", "user").data(data);
        let dir = tempfile::tempdir().unwrap();
        let env = p.environment(dir.path()).unwrap();
        assert!(env.len() <= MAX_VARIABLES);
        let inline: usize = env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
        assert!(inline <= ENV_BUDGET_BYTES, "{inline}");
        // A real exec with it works (no E2BIG).
        let status = Command::new("/bin/true")
            .env_clear()
            .envs(env)
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Review finding 6: a sibling key must not pass for the file of a large value, or a hook
    /// reading `$HOOKVISOR_..._CONTENT_FILE` reads the file the agent named.
    #[test]
    fn data_never_sets_a_file_or_nul_name() {
        let big = "c".repeat(70 << 10);
        let Json::Object(data) = json!({
            "agent": {"tool_input": {"CONTENT_FILE": "/etc/passwd", "content": big}},
            "note_file": "small",
            "X_NUL": "/etc/shadow",
            "Tags_File": ["/etc/passwd"],
            "obj_file": {"inner": "kept"},
        }) else {
            unreachable!()
        };
        let p = Payload::new("e", "s", "/w", "user").data(data);
        let dir = tempfile::tempdir().unwrap();
        let env = p.build_environment(dir.path(), "").unwrap();
        let map = env_map(&env.out);
        let content = &map["HOOKVISOR_AGENT_TOOL_INPUT_CONTENT_FILE"];
        assert_eq!(
            content.as_slice(),
            dir.path()
                .join("HOOKVISOR_AGENT_TOOL_INPUT_CONTENT_FILE")
                .as_os_str()
                .as_bytes()
        );
        assert_eq!(
            fs::read(OsStr::from_bytes(content)).unwrap(),
            big.as_bytes()
        );
        for name in [
            "HOOKVISOR_NOTE_FILE",
            "HOOKVISOR_X_NUL",
            "HOOKVISOR_TAGS_FILE",
            "HOOKVISOR_TAGS_FILE_NUL",
            "HOOKVISOR_OBJ_FILE",
        ] {
            assert!(!map.contains_key(name), "{name} was set from data");
        }
        assert_eq!(map["HOOKVISOR_OBJ_FILE_INNER"], b"kept");
        let skipped: Vec<&str> = env.skipped.iter().map(|(n, _)| n.as_str()).collect();
        for name in [
            "HOOKVISOR_NOTE_FILE",
            "HOOKVISOR_X_NUL",
            "HOOKVISOR_TAGS_FILE",
        ] {
            assert!(
                skipped.contains(&name),
                "{name} not warned about: {skipped:?}"
            );
        }
        // The values stay readable where a hook should read them.
        assert_eq!(
            p.lookup(&["note_file"]),
            Some(when::Value::Json(json!("small")))
        );

        // Two names of one large value's file: the second is in no variable, and says so.
        let Json::Object(data) = json!({"a": {"b": big}, "a_b": big}) else {
            unreachable!()
        };
        let p = Payload::new("e", "s", "/w", "user").data(data);
        let dir = tempfile::tempdir().unwrap();
        let env = p.build_environment(dir.path(), "").unwrap();
        assert!(env_map(&env.out).contains_key("HOOKVISOR_A_B_FILE"));
        assert!(
            env.skipped.iter().any(|(n, _)| n == "HOOKVISOR_A_B"),
            "{:?}",
            env.skipped
        );
    }

    /// Review finding 8: a long key made a file name the file system refused, and the hook
    /// did not start.
    #[test]
    fn a_name_too_long_for_a_file_is_left_out_not_fatal() {
        // "HOOKVISOR_" + key + "_FILE": 185 bytes of key is exactly MAX_NAME_BYTES.
        let fits = "f".repeat(MAX_NAME_BYTES - "HOOKVISOR_".len() - "_FILE".len());
        let over = format!("{fits}g");
        let mut data = Map::new();
        data.insert("k".repeat(250), json!([]));
        data.insert("j".repeat(250), json!({"a": 1}));
        data.insert("big".repeat(100), json!("x".repeat(70 << 10)));
        data.insert(fits.clone(), json!("x".repeat(70 << 10)));
        data.insert(over.clone(), json!("y"));
        let p = Payload::new("e", "s", "/w", "user").data(data);
        let dir = tempfile::tempdir().unwrap();
        let env = p.build_environment(dir.path(), "").unwrap();
        let map = env_map(&env.out);
        let fits_file = format!("{}_FILE", env_name(&fits));
        assert_eq!(fits_file.len(), MAX_NAME_BYTES);
        assert!(map.contains_key(&fits_file));
        assert!(!map.contains_key(&env_name(&over)));
        assert!(
            map.keys().all(|k| k.len() <= MAX_NAME_BYTES),
            "{:?}",
            map.keys()
        );
        // Each long key twice, itself and `data.<key>`, and `data.<fits>`, over by `DATA_`.
        let skipped: Vec<&str> = env.skipped.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(skipped.len(), 9, "{skipped:?}");
        assert!(
            skipped
                .iter()
                .all(|n| n.len() + "_FILE".len() > MAX_NAME_BYTES)
        );
        assert!(skipped.contains(&env_name(&over).as_str()));
        assert!(skipped.contains(&env_name(&"k".repeat(250)).as_str()));
        // And a real shell starts with it.
        let status = Command::new("/bin/true")
            .env_clear()
            .envs(env.out)
            .status()
            .unwrap();
        assert!(status.success());
    }

    /// Review finding 2: the run directory is opened once, not through a link, and only when
    /// it is ours; acting as root, only when nobody else can write it.
    #[test]
    fn the_run_directory_must_be_ours_and_no_link() {
        let p = payload();
        let work = tempfile::tempdir().unwrap();
        let real = work.path().join("real");
        fs::create_dir(&real).unwrap();
        fs::set_permissions(&real, fs::Permissions::from_mode(0o700)).unwrap();
        let link = work.path().join("link");
        std::os::unix::fs::symlink(&real, &link).unwrap();
        let err = p.environment(&link).unwrap_err();
        assert!(err.to_string().contains("symbolic link"), "{err}");
        assert_eq!(fs::read_dir(&real).unwrap().count(), 0, "nothing written");
        let err = p.environment(&real.join("missing")).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::NotFound, "{err}");

        if !nix::unistd::Uid::effective().is_root() {
            // Someone else's directory: `/` is root's.
            let err = p.environment(Path::new("/")).unwrap_err();
            assert!(err.to_string().contains("owned by uid 0"), "{err}");
            return;
        }
        // Root: a directory another user owns, or one others may write, is refused.
        let theirs = work.path().join("theirs");
        fs::create_dir(&theirs).unwrap();
        nix::unistd::chown(&theirs, Some(nix::unistd::Uid::from_raw(4242)), None).unwrap();
        let err = p.environment(&theirs).unwrap_err();
        assert!(err.to_string().contains("owned by uid 4242"), "{err}");
        for mode in [0o777, 0o720, 0o1733] {
            fs::set_permissions(&real, fs::Permissions::from_mode(mode)).unwrap();
            let err = p.environment(&real).unwrap_err();
            assert!(
                err.to_string().contains("must not be writable"),
                "{mode:o}: {err}"
            );
        }
        assert_eq!(fs::read_dir(&real).unwrap().count(), 0, "nothing written");
        fs::set_permissions(&real, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(p.environment(&real).is_ok());
    }

    #[test]
    fn an_existing_file_is_never_overwritten_nor_followed() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("target");
        fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, dir.path().join("payload.json")).unwrap();
        let err = payload().environment(dir.path()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::AlreadyExists, "{err}");
        assert_eq!(fs::read_to_string(&target).unwrap(), "keep");
    }

    #[test]
    fn a_run_script_reads_the_values_through_its_rewritten_placeholders() {
        // The wiring's path for `run:`: the template names variables, this environment holds
        // them, sh expands each once.
        let p = payload();
        let script = template::ShellTemplate::parse(
            "printf '%s' ${msg} > a.out; printf '%s' \"${data.msg}\" > b.out; \
             printf '%s' 'f='${file} > c.out; printf '%s|' ${files} > d.out",
        )
        .unwrap();
        for name in script.references() {
            assert!(p.template_value(name).is_some(), "{name} unknown");
        }
        let work = tempfile::tempdir().unwrap();
        let run_dir = work.path().join("run");
        fs::create_dir(&run_dir).unwrap();
        let status = Command::new("/bin/sh")
            .args(["-c", script.script()])
            .current_dir(work.path())
            .env_clear()
            .envs(p.environment(&run_dir).unwrap())
            .status()
            .unwrap();
        assert!(status.success());
        let read = |name: &str| fs::read(work.path().join(name)).unwrap();
        assert_eq!(read("a.out"), HOSTILE.as_bytes());
        assert_eq!(read("b.out"), HOSTILE.as_bytes());
        let mut c = b"f=".to_vec();
        c.extend_from_slice(non_utf8().as_bytes());
        assert_eq!(read("c.out"), c);
        // A list placeholder in sh is its space-joined form, one word.
        let mut d = b"a.txt ".to_vec();
        d.extend_from_slice(non_utf8().as_bytes());
        d.push(b'|');
        assert_eq!(read("d.out"), d);
        assert!(!work.path().join("S").exists(), "a value was run as code");
    }

    #[test]
    fn hostile_values_reach_a_real_shell_byte_exact() {
        let p = payload();
        let work = tempfile::tempdir().unwrap();
        let run_dir = work.path().join("run");
        fs::create_dir(&run_dir).unwrap();
        let env = p.environment(&run_dir).unwrap();
        let script = r#"
            printf '%s' "$HOOKVISOR_MSG" > msg.out
            printf '%s' "$HOOKVISOR_DATA_MSG" > data_msg.out
            printf '%s' "$HOOKVISOR_FILE" > file.out
            printf '%s' "$HOOKVISOR_FILES" > files.out
            cat "$HOOKVISOR_FILES_NUL" > files_nul.out
            cat "$HOOKVISOR_PAYLOAD" > payload.out
            cat > stdin.out
        "#;
        let mut child = Command::new("/bin/sh")
            .args(["-c", script])
            .current_dir(work.path())
            .env_clear()
            .envs(env)
            .stdin(Stdio::piped())
            .spawn()
            .unwrap();
        child
            .stdin
            .take()
            .unwrap()
            .write_all(&p.stdin_json())
            .unwrap();
        assert!(child.wait().unwrap().success());
        let read = |name: &str| fs::read(work.path().join(name)).unwrap();
        assert_eq!(read("msg.out"), HOSTILE.as_bytes());
        assert_eq!(read("data_msg.out"), HOSTILE.as_bytes());
        assert_eq!(read("file.out"), non_utf8().as_bytes());
        let mut files = b"a.txt ".to_vec();
        files.extend_from_slice(non_utf8().as_bytes());
        assert_eq!(read("files.out"), files);
        let mut nul = b"a.txt\0".to_vec();
        nul.extend_from_slice(non_utf8().as_bytes());
        nul.push(0);
        assert_eq!(read("files_nul.out"), nul);
        assert_eq!(read("payload.out"), p.stdin_json());
        assert_eq!(read("stdin.out"), p.stdin_json());
        let value: Json = serde_json::from_slice(&read("payload.out")).unwrap();
        assert_eq!(value["data"]["msg"], HOSTILE);
        assert!(
            !work.path().join("S").exists() && !run_dir.join("S").exists(),
            "a value was run as code"
        );
    }
}

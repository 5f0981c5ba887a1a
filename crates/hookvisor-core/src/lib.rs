//! hookvisor-core holds the whole policy of hookvisor, the hook runtime for sandboxed AI coding
//! agents: finding the hooks of a workspace, reading their front matter, running them, telling
//! what changed, evaluating file hooks at the end of a turn, and recording every run in
//! `status.json`. It has no HTTP and no command-line parsing; the binaries are thin shells over it.

#![deny(missing_docs)]

mod context;
mod discover;
mod frontmatter;
mod hook;
mod message;
mod pattern;

pub use context::{Context, ContextError, ContextOverrides};
pub use discover::{Discovery, discover, hook_id};
pub use frontmatter::{FrontMatterError, parse as parse_front_matter};
pub use hook::{Hook, HookKind, Problem, RunAs};
pub use message::{Failure, sanitize};
pub use pattern::{Pattern, PatternError};

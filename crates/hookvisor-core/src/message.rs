//! The re-prompt: the text the model reads when a file hook fails.
//!
//! The seed format (docs/DESIGN.md), kept by discobot-compatible dashboards and agents:
//!
//! ```text
//! [Discobot Hook Failed] "Go format check" (pattern: *.go)
//!
//! Files: internal/server/handler.go, internal/server/service.go
//! Exit code: 1
//!
//! Output:
//! internal/server/handler.go: formatting differs from gofmt
//!
//! Please fix the issues and ensure the hook passes. (Attempt 1/3)
//! ```
//!
//! The output is inlined when, trimmed, it has at most `INLINE_MAX_LINES` lines and
//! `INLINE_MAX_BYTES` bytes; otherwise the message gives the log path and the last
//! `TAIL_LINES` lines. At most `MAX_FILES` files are named, then "and N more". Escape
//! sequences and control characters are removed, so no output can disturb the text around it.

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use crate::hook::Problem;

/// Most lines of output inlined in a message.
pub(crate) const INLINE_MAX_LINES: usize = 200;
/// Most bytes of output inlined in a message.
pub(crate) const INLINE_MAX_BYTES: usize = 5 * 1024;
/// Lines of output shown with the log path when the output is too large to inline.
pub(crate) const TAIL_LINES: usize = 15;
/// Files named before "and N more".
pub(crate) const MAX_FILES: usize = 20;
/// Characters of a hook file's problem quoted in a re-prompt; a reason is one line, and this
/// bounds one that quotes an odd value at length.
const MAX_REASON_CHARS: usize = 500;

/// Everything a re-prompt says about one failed run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Failure {
    /// The hook's display name.
    pub hook_name: String,
    /// The hook's pattern as written, if it has one.
    pub pattern: Option<String>,
    /// The files the hook ran on, workspace-relative (shown lossily when not UTF-8).
    pub files: Vec<PathBuf>,
    /// The exit status (124 on timeout).
    pub exit_code: i32,
    /// The timeout, when the run was killed for exceeding it.
    pub timed_out_after: Option<Duration>,
    /// The end of the output (the executor keeps a bounded tail).
    pub output_tail: String,
    /// Whether the output was longer than `output_tail`.
    pub output_cut: bool,
    /// Where the whole output is.
    pub log_path: PathBuf,
    /// This re-prompt's number, from 1.
    pub attempt: u32,
    /// Re-prompts allowed per user turn.
    pub max_attempts: u32,
}

impl Failure {
    /// The message in the seed format.
    pub fn message(&self) -> String {
        self.message_within(usize::MAX)
    }

    /// The message, shortened to at most `limit` characters by showing fewer output lines (and
    /// then shorter ones); the log path always stays.
    pub fn message_within(&self, limit: usize) -> String {
        let output = sanitize(self.output_tail.trim_matches(['\n', ' ', '\t']));
        let lines: Vec<&str> = output.lines().collect();
        let inline =
            !self.output_cut && lines.len() <= INLINE_MAX_LINES && output.len() <= INLINE_MAX_BYTES;
        let full = if inline {
            self.render(&Shown::Inline(&output))
        } else {
            self.render(&Shown::Tail(&lines, TAIL_LINES, usize::MAX))
        };
        if full.chars().count() <= limit {
            return full;
        }
        for count in (0..TAIL_LINES.min(lines.len())).rev() {
            let text = self.render(&Shown::Tail(&lines, count, 200));
            if text.chars().count() <= limit {
                return text;
            }
        }
        let text = self.render(&Shown::Tail(&lines, 0, 0));
        text.chars().take(limit).collect()
    }

    fn render(&self, shown: &Shown<'_>) -> String {
        let mut text = format!("[Discobot Hook Failed] \"{}\"", sanitize(&self.hook_name));
        if let Some(pattern) = &self.pattern {
            let _ = write!(text, " (pattern: {})", sanitize(pattern));
        }
        text.push_str("\n\n");
        if !self.files.is_empty() {
            let named: Vec<String> = self
                .files
                .iter()
                .take(MAX_FILES)
                .map(|f| sanitize(&f.to_string_lossy()))
                .collect();
            let _ = write!(text, "Files: {}", named.join(", "));
            if self.files.len() > MAX_FILES {
                let _ = write!(text, " and {} more", self.files.len() - MAX_FILES);
            }
            text.push('\n');
        }
        let _ = write!(text, "Exit code: {}", self.exit_code);
        if let Some(after) = self.timed_out_after {
            let _ = write!(text, " (timed out after {}s)", after.as_secs());
        }
        text.push_str("\n\n");
        match shown {
            Shown::Inline("") => {
                text.push_str("Output: (none)\n\n");
            }
            Shown::Inline(output) => {
                let _ = write!(text, "Output:\n{output}\n\n");
            }
            Shown::Tail(lines, count, width) => {
                let count = (*count).min(lines.len());
                let _ = writeln!(
                    text,
                    "Output (last {count} lines; full log: {}):",
                    self.log_path.display()
                );
                for line in &lines[lines.len() - count..] {
                    if line.len() > *width {
                        let cut: String = line.chars().take(*width).collect();
                        let _ = writeln!(text, "{cut}…");
                    } else {
                        let _ = writeln!(text, "{line}");
                    }
                }
                text.push('\n');
            }
        }
        let _ = write!(
            text,
            "Please fix the issues and ensure the hook passes. (Attempt {}/{})",
            self.attempt, self.max_attempts
        );
        text
    }
}

/// The re-prompt for hook files the model broke this turn, in the seed format's conventions:
///
/// ```text
/// [Discobot Hook Failed] hook file .discobot/hooks/x.sh does not load
///
/// Reason: invalid run_as 'admin'; use root or user
///
/// Please fix the hook file. (Attempt 1/3)
/// ```
///
/// One header and reason per file, at most [`MAX_FILES`] then "and N more", and one closing
/// line. `broken` holds workspace-relative paths; paths and reasons are sanitised like output.
pub(crate) fn broken_hooks_message(broken: &[Problem], attempt: u32, max_attempts: u32) -> String {
    let mut text = String::new();
    for problem in broken.iter().take(MAX_FILES) {
        let reason: String = problem
            .kind
            .to_string()
            .chars()
            .take(MAX_REASON_CHARS)
            .collect();
        let _ = write!(
            text,
            "[Discobot Hook Failed] hook file {} does not load\n\nReason: {}\n\n",
            sanitize(&problem.path.to_string_lossy()),
            sanitize(&reason).replace('\n', " ")
        );
    }
    if broken.len() > MAX_FILES {
        let _ = write!(
            text,
            "And {} more hook files do not load; `hookvisor check` lists them.\n\n",
            broken.len() - MAX_FILES
        );
    }
    let _ = write!(
        text,
        "Please fix the hook {}. (Attempt {attempt}/{max_attempts})",
        if broken.len() == 1 { "file" } else { "files" }
    );
    text
}

enum Shown<'a> {
    Inline(&'a str),
    /// Lines, how many of the last to show, and the widest line kept.
    Tail(&'a [&'a str], usize, usize),
}

/// Removes terminal escape sequences and control characters other than newline and tab, and
/// turns CR into nothing, so hook output cannot rewrite or hide the text around it.
pub fn sanitize(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => match chars.peek() {
                // CSI: ESC [ params final-byte(0x40..=0x7e)
                Some('[') => {
                    chars.next();
                    for c in chars.by_ref() {
                        if ('\u{40}'..='\u{7e}').contains(&c) {
                            break;
                        }
                    }
                }
                // OSC: ESC ] ... (BEL | ESC \)
                Some(']') => {
                    chars.next();
                    while let Some(c) = chars.next() {
                        if c == '\u{7}' {
                            break;
                        }
                        if c == '\u{1b}' && chars.peek() == Some(&'\\') {
                            chars.next();
                            break;
                        }
                    }
                }
                Some(_) => {
                    chars.next();
                }
                None => {}
            },
            '\n' | '\t' => out.push(c),
            c if c.is_control() => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(output: &str) -> Failure {
        Failure {
            hook_name: "Go format check".into(),
            pattern: Some("*.go".into()),
            files: vec![
                "internal/server/handler.go".into(),
                "internal/server/service.go".into(),
            ],
            exit_code: 1,
            timed_out_after: None,
            output_tail: output.into(),
            output_cut: false,
            log_path: PathBuf::from("/state/output/go-fmt.log"),
            attempt: 1,
            max_attempts: 3,
        }
    }

    #[test]
    fn the_seed_format_exactly() {
        let text = failure("internal/server/handler.go: formatting differs from gofmt\n").message();
        assert_eq!(
            text,
            "[Discobot Hook Failed] \"Go format check\" (pattern: *.go)\n\n\
             Files: internal/server/handler.go, internal/server/service.go\n\
             Exit code: 1\n\n\
             Output:\n\
             internal/server/handler.go: formatting differs from gofmt\n\n\
             Please fix the issues and ensure the hook passes. (Attempt 1/3)"
        );
    }

    #[test]
    fn inline_limits_and_the_tail_form() {
        let at_limit: String = (0..200).map(|i| format!("l{i}\n")).collect();
        assert!(failure(&at_limit).message().contains("Output:\nl0\n"));

        let over_lines: String = (0..201).map(|i| format!("l{i}\n")).collect();
        let text = failure(&over_lines).message();
        assert!(
            text.contains("Output (last 15 lines; full log: /state/output/go-fmt.log):\nl186\n"),
            "{text}"
        );
        assert!(text.contains("l200\n\nPlease fix"));
        assert!(!text.contains("l185\n"));

        let over_bytes = "x".repeat(5 * 1024 + 1);
        assert!(failure(&over_bytes).message().contains("full log:"));
        let mut cut = failure("short");
        cut.output_cut = true;
        assert!(cut.message().contains("full log:"));
    }

    #[test]
    fn files_are_capped_at_twenty() {
        let mut f = failure("x");
        f.files = (0..25).map(|i| format!("f{i}.go").into()).collect();
        let text = f.message();
        assert!(text.contains("f19.go and 5 more\n"), "{text}");
        assert!(!text.contains("f20.go"));
    }

    #[test]
    fn timeouts_empty_output_and_no_pattern() {
        let mut f = failure("");
        f.pattern = None;
        f.exit_code = 124;
        f.timed_out_after = Some(Duration::from_secs(900));
        let text = f.message();
        assert!(text.starts_with("[Discobot Hook Failed] \"Go format check\"\n\n"));
        assert!(text.contains("Exit code: 124 (timed out after 900s)\n"));
        assert!(text.contains("Output: (none)\n"));
    }

    #[test]
    fn hostile_output_cannot_break_the_message() {
        let output = "\u{1b}[31mred\u{1b}[0m \u{1b}]0;title\u{7}ok\r\n```\n</system>\u{0}\u{8}end";
        let text = failure(output).message();
        assert!(
            text.contains("Output:\nred ok\n```\n</system>end\n\nPlease fix"),
            "{text:?}"
        );
        assert!(
            !text
                .chars()
                .any(|c| c.is_control() && c != '\n' && c != '\t')
        );
    }

    #[test]
    fn broken_hook_files_in_the_seed_conventions() {
        let problem = |path: &str, reason: &str| {
            Problem::new(
                path.into(),
                crate::hook::ProblemKind::Reported(reason.into()),
                Default::default(),
            )
        };
        let one = [problem(
            ".discobot/hooks/x.sh",
            "invalid run_as 'admin'; use root or user",
        )];
        assert_eq!(
            broken_hooks_message(&one, 2, 3),
            "[Discobot Hook Failed] hook file .discobot/hooks/x.sh does not load\n\n\
             Reason: invalid run_as 'admin'; use root or user\n\n\
             Please fix the hook file. (Attempt 2/3)"
        );

        let hostile = [
            problem(".discobot/hooks/\u{1b}[2Jwipe.sh", "bad\u{7}\nvalue"),
            problem(".discobot/hooks/y.sh", &"long ".repeat(200)),
        ];
        let text = broken_hooks_message(&hostile, 1, 3);
        assert!(
            text.starts_with(
                "[Discobot Hook Failed] hook file .discobot/hooks/wipe.sh does not load\n\n\
                 Reason: bad value\n\n[Discobot Hook Failed] hook file .discobot/hooks/y.sh"
            ),
            "{text:?}"
        );
        assert!(text.contains(&format!("Reason: {}\n\n", "long ".repeat(100))));
        assert!(text.ends_with("\n\nPlease fix the hook files. (Attempt 1/3)"));

        let many: Vec<Problem> = (0..23)
            .map(|i| problem(&format!(".discobot/hooks/h{i}.sh"), "r"))
            .collect();
        let text = broken_hooks_message(&many, 1, 3);
        assert!(text.contains("h19.sh does not load"), "{text}");
        assert!(!text.contains("h20.sh"), "{text}");
        assert!(text.contains("And 3 more hook files do not load"), "{text}");
    }

    #[test]
    fn shortening_keeps_the_log_path_and_the_limit() {
        let huge: String = (0..1000)
            .map(|i| format!("{i}{}\n", "y".repeat(300)))
            .collect();
        let mut f = failure(&huge);
        f.output_cut = true;
        for limit in [10_000, 2_000, 600] {
            let text = f.message_within(limit);
            assert!(text.chars().count() <= limit, "{limit}: {}", text.len());
            assert!(text.contains("/state/output/go-fmt.log"), "{limit}");
            assert!(text.ends_with("(Attempt 1/3)"));
        }
    }
}

//! The prompt of one iteration, and how it reaches the agent (docs/EVENTS.md §3.2, rule 5 of the
//! [loop's rules](super)).

use std::ffi::{OsStr, OsString};

/// An argument of the agent command that is exactly this is replaced with the prompt; without
/// one the prompt is the agent's stdin (rule 5 of the [loop's rules](super)).
pub const PROMPT_PLACEHOLDER: &str = "{prompt}";

/// The prompt of one iteration: the drained context (oldest first), then the last block reason,
/// then the task (or recovery) prompt; empty parts are left out, the others are separated by
/// one blank line.
pub(crate) fn assemble(context: &[String], block_reason: Option<&str>, task: &str) -> String {
    let parts = context
        .iter()
        .map(String::as_str)
        .chain(block_reason)
        .chain(Some(task))
        .map(|part| part.trim_end_matches('\n'))
        .filter(|part| !part.is_empty());
    let mut prompt = String::new();
    for part in parts {
        if !prompt.is_empty() {
            prompt.push_str("\n\n");
        }
        prompt.push_str(part);
    }
    if !prompt.is_empty() {
        prompt.push('\n');
    }
    prompt
}

/// The agent's arguments after `argv[0]` and its stdin: every argument that is exactly
/// [`PROMPT_PLACEHOLDER`] becomes the prompt, as one argument, never split or parsed by a
/// shell; when there is none, the prompt is the agent's stdin instead.
pub(crate) fn deliver(args: &[OsString], prompt: &str) -> (Vec<OsString>, Option<Vec<u8>>) {
    let placeholder = OsStr::new(PROMPT_PLACEHOLDER);
    if !args.iter().any(|a| a == placeholder) {
        return (args.to_vec(), Some(prompt.as_bytes().to_vec()));
    }
    let args = args
        .iter()
        .map(|a| match a == placeholder {
            true => OsString::from(prompt.trim_end_matches('\n')),
            false => a.clone(),
        })
        .collect();
    (args, None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_in_order_and_empty_ones_left_out() {
        let context = ["lint: 2 warnings\n".to_owned(), "notes\n".to_owned()];
        assert_eq!(
            assemble(&context, Some("tests fail"), "Fix it."),
            "lint: 2 warnings\n\nnotes\n\ntests fail\n\nFix it.\n"
        );
        assert_eq!(assemble(&[], None, "Fix it."), "Fix it.\n");
        assert_eq!(assemble(&[], Some("r"), ""), "r\n");
        assert_eq!(assemble(&[String::new()], None, ""), "");
    }

    #[test]
    fn a_placeholder_argument_takes_the_prompt_whole_else_stdin_does() {
        let args: Vec<OsString> = ["-p", "{prompt}", "x{prompt}"]
            .iter()
            .map(OsString::from)
            .collect();
        let (out, stdin) = deliver(&args, "a b; $(rm -rf ~)\n");
        assert_eq!(out, ["-p", "a b; $(rm -rf ~)", "x{prompt}"]);
        assert_eq!(stdin, None);
        let (out, stdin) = deliver(&args[2..], "p\n");
        assert_eq!(out, ["x{prompt}"]);
        assert_eq!(stdin.as_deref(), Some(&b"p\n"[..]));
    }
}

//! A source's command text made a `run:` script (the module's rule 3): its placeholders become
//! template references, and the shell's own `${VAR}` stops looking like one.
//!
//! In `run:`, `${name}` is always hookvisor's (docs/EVENTS.md §5 rule 20), but in the other tools'
//! commands it is the shell's (`echo ${HOME}`). So, outside single quotes, a shell `${VAR}` of a
//! plain name becomes `$VAR` (followed by `""` when a name character comes next, so that the
//! name does not grow: `${VAR}x` → `$VAR""x`, one word as before); inside single quotes, where
//! it is literal text, `${` becomes `$''{`, the same text. Any other `${…}` (`${VAR:-x}`) is
//! left for the `run:` parser, which refuses it with its column: it has no equivalent without
//! braces, and guessing one would change what the command does.
//!
//! A placeholder inside single quotes is written as docs/EVENTS.md §4.1 rule 1 says, `'…'${x}'…'`
//! (the quotes closed around the reference, which the `run:` parser then quotes), so that the
//! value is one literal piece of that quoted text, as the source's substitution made it. The
//! names so placed are reported apart: if that quoted text is a script another program parses
//! (`sh -c '…'`, awk), the value is parsed there, as it was in the source tool, and the reader
//! warns.
//!
//! The quoting is followed as sh reads it at the top level (single quotes, double quotes,
//! backslashes); a quote inside `$(…)` within double quotes is not followed, so a `${` there
//! may be judged in the wrong context, which can only make the parser refuse the command.

/// Which placeholders a source writes, and the names they take.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Placeholders {
    /// `{{name}}` for these names only (iteratr's five; others stay text, as in iteratr).
    Named(&'static [&'static str]),
    /// `{{name}}` for any name of word characters (AutoAgent's `\{\{(\w+)\}\}`).
    AnyNamed,
    /// `{name}` for these names only (nyzhi's `{file}`).
    Single(&'static [&'static str]),
    /// `${NAME}` for these names only, each the tool's name and the template name it becomes
    /// (agent-pipelines' `${CHANGED_FILES}` → `${files}`); any other `${VAR}` is the shell's.
    Braced(&'static [(&'static str, &'static str)]),
}

/// A source's text made hookvisor's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Translated {
    /// The text, placeholders as `${name}`.
    pub(crate) text: String,
    /// The names referenced, in order.
    pub(crate) names: Vec<String>,
    /// The names of the placeholders that were inside single quotes.
    pub(crate) single_quoted: Vec<String>,
}

/// `text` with its placeholders as `${name}` references and the shell's `${VAR}` rewritten
/// (see the module documentation).
pub(crate) fn to_run(text: &str, placeholders: Placeholders) -> Translated {
    translate(text, placeholders, true)
}

/// `text` with its placeholders as `${name}` references and nothing else changed: a value
/// that is no shell text (a commit message).
pub(crate) fn to_template(text: &str, placeholders: Placeholders) -> Translated {
    translate(text, placeholders, false)
}

fn translate(text: &str, placeholders: Placeholders, shell: bool) -> Translated {
    #[derive(PartialEq)]
    enum Quote {
        None,
        Single,
        Double,
    }
    let mut out = String::with_capacity(text.len() + 16);
    let mut names = Vec::new();
    let mut single_quoted = Vec::new();
    let mut quote = Quote::None;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if let Some((name, len)) = placeholder(rest, placeholders) {
            let single = shell && quote == Quote::Single;
            if single {
                out.push('\'');
                single_quoted.push(name.to_owned());
            }
            out.push_str("${");
            out.push_str(name);
            out.push('}');
            if single {
                out.push('\'');
            }
            names.push(name.to_owned());
            rest = &rest[len..];
            continue;
        }
        if !shell {
            out.push(c);
            rest = &rest[c.len_utf8()..];
            continue;
        }
        if rest.starts_with("${") {
            if quote == Quote::Single {
                out.push_str("$''{");
                rest = &rest[2..];
                continue;
            }
            if let Some((var, len)) = shell_brace_name(rest) {
                out.push('$');
                out.push_str(var);
                rest = &rest[len..];
                if rest
                    .chars()
                    .next()
                    .is_some_and(|n| n.is_ascii_alphanumeric() || n == '_')
                {
                    out.push_str("\"\"");
                }
                continue;
            }
        }
        match (c, &quote) {
            ('\\', Quote::None | Quote::Double) => {
                // The escaped character is copied with its backslash, whatever it is.
                let escaped: String = rest.chars().take(2).collect();
                out.push_str(&escaped);
                rest = &rest[escaped.len()..];
                continue;
            }
            ('\'', Quote::None) => quote = Quote::Single,
            ('\'', Quote::Single) => quote = Quote::None,
            ('"', Quote::None) => quote = Quote::Double,
            ('"', Quote::Double) => quote = Quote::None,
            _ => {}
        }
        out.push(c);
        rest = &rest[c.len_utf8()..];
    }
    Translated {
        text: out,
        names,
        single_quoted,
    }
}

/// The placeholder `text` starts with, as its name and length.
fn placeholder(text: &str, placeholders: Placeholders) -> Option<(&str, usize)> {
    if let Placeholders::Braced(names) = placeholders {
        let (name, len) = shell_brace_name(text)?;
        let (_, ours) = names.iter().find(|(theirs, _)| *theirs == name)?;
        return Some((ours, len));
    }
    let (open, close, names): (&str, &str, Option<&[&str]>) = match placeholders {
        Placeholders::Named(names) => ("{{", "}}", Some(names)),
        Placeholders::AnyNamed => ("{{", "}}", None),
        Placeholders::Single(names) => ("{", "}", Some(names)),
        Placeholders::Braced(_) => return None,
    };
    let inner = text.strip_prefix(open)?;
    let end = inner.find(close)?;
    let name = &inner[..end];
    let word = !name.is_empty() && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let taken = names.is_none_or(|names| names.contains(&name));
    (word && taken).then_some((name, open.len() + end + close.len()))
}

/// The shell variable of a `${VAR}` of a plain name at the start of `text`, and its length.
fn shell_brace_name(text: &str) -> Option<(&str, usize)> {
    let inner = text.strip_prefix("${")?;
    let end = inner.find('}')?;
    let name = &inner[..end];
    let mut bytes = name.bytes();
    let first = bytes.next()?;
    let plain = (first.is_ascii_alphabetic() || first == b'_')
        && bytes.all(|b| b.is_ascii_alphanumeric() || b == b'_');
    plain.then_some((name, end + 3))
}

/// Commands whose arguments no program parses as code: a value inside their single quotes is
/// text and stays text.
const TEXT_COMMANDS: [&str; 4] = ["echo", "printf", "logger", "notify-send"];

/// Whether every simple command of `run` (a translated command) that uses one of `names`
/// (the placeholders that sat inside single quotes) is a [`TEXT_COMMANDS`] command, its
/// output redirected at most: the only places where a single-quoted placeholder is kept (see
/// `refuse_single_quoted` in the module above). The commands are split at `;`, `&&`, `||`
/// and newlines outside quotes; a pipe, a group, an input redirection or any command
/// substitution may hand the text to an interpreter (`echo '…' | sh`), so they refuse.
pub(crate) fn quotes_are_text(run: &str, names: &[String]) -> bool {
    if run.contains('`') || run.contains("$(") {
        return false;
    }
    let mut commands = Vec::new();
    let mut quote = None;
    let mut start = 0;
    let bytes = run.as_bytes();
    for (i, c) in run.char_indices() {
        match (quote, c) {
            (None, '\'' | '"') => quote = Some(c),
            (Some(q), c) if c == q => quote = None,
            (None, ';' | '\n') => {
                commands.push(&run[start..i]);
                start = i + 1;
            }
            (None, '&' | '|') if bytes.get(i + 1) == Some(&(c as u8)) => {
                commands.push(&run[start..i]);
                start = i + 2;
            }
            (None, '|' | '&' | '(' | ')' | '<') if i >= start => return false,
            _ => {}
        }
    }
    commands.push(&run[start.min(run.len())..]);
    commands
        .iter()
        .filter(|command| {
            names
                .iter()
                .any(|name| command.contains(&format!("${{{name}}}")))
        })
        .all(|command| {
            let first = command.split_whitespace().next().unwrap_or("");
            TEXT_COMMANDS.contains(&first)
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::template::ShellTemplate;

    #[test]
    fn single_quoted_placeholders_are_text_only_in_a_plain_echo_like_command() {
        let names = ["x".to_owned()];
        let text = |run: &str| quotes_are_text(run, &names);
        assert!(text("echo 'a '${x}'' >> log"));
        assert!(text("cat > in.json; echo 'Issue '${x}'' > out"));
        assert!(text("make && printf 'done '${x}''"));
        assert!(!text("sh -c 'echo '${x}''"));
        assert!(!text(r#"echo '"${x}"' | sh"#));
        assert!(!text("awk 'BEGIN{print '${x}'}'"));
        assert!(!text(r#"echo "$(cat)" ''${x}''"#));
        assert!(!text("(echo ''${x}'')"));
        assert!(!text("ssh host 'ls '${x}''"));
        assert!(!text("A=1 echo ''${x}''"));
    }

    const ITERATR: Placeholders = Placeholders::Named(&["session", "task_id"]);
    const PIPELINES: Placeholders =
        Placeholders::Braced(&[("PROGRESS", "progress"), ("CHANGED_FILES", "files")]);

    #[test]
    fn placeholders_become_references_and_shell_braces_stay_the_shells() {
        // (source text, placeholders, run: text)
        let table: &[(&str, Placeholders, &str)] = &[
            (
                "./scripts/validate.sh {{task_id}}",
                ITERATR,
                "./scripts/validate.sh ${task_id}",
            ),
            (
                "echo {{other}} {{session}}",
                ITERATR,
                "echo {{other}} ${session}",
            ),
            (
                "echo 'Issue {{issueNumber}}: {{issueTitle}}'",
                Placeholders::AnyNamed,
                "echo 'Issue '${issueNumber}': '${issueTitle}''",
            ),
            (
                "cargo fmt -- {file}",
                Placeholders::Single(&["file"]),
                "cargo fmt -- ${file}",
            ),
            (
                "awk '{print}' {file} {x}",
                Placeholders::Single(&["file"]),
                "awk '{print}' ${file} {x}",
            ),
            ("echo ${HOME}/x", ITERATR, "echo $HOME/x"),
            ("echo \"${HOME}x\"", ITERATR, "echo \"$HOME\"\"x\""),
            ("echo '${HOME}'", ITERATR, "echo '$''{HOME}'"),
            ("echo \\${HOME}", ITERATR, "echo \\${HOME}"),
            ("echo ${HOME:-/}", ITERATR, "echo ${HOME:-/}"),
            ("echo \"it's\" ${A}", ITERATR, "echo \"it's\" $A"),
            (
                "./b.sh ${PROGRESS} \"${CHANGED_FILES}x\" '${PROGRESS}' ${HOME}",
                PIPELINES,
                "./b.sh ${progress} \"${files}x\" ''${progress}'' $HOME",
            ),
        ];
        for (text, placeholders, want) in table {
            assert_eq!(to_run(text, *placeholders).text, *want, "{text}");
        }
        let message = to_template("Issue #{{n}}: ${HOME} '{{t}}'", Placeholders::AnyNamed);
        assert_eq!(message.text, "Issue #${n}: ${HOME} '${t}'");
        assert_eq!(
            (message.names, message.single_quoted),
            (vec!["n".to_owned(), "t".to_owned()], vec![])
        );
    }

    /// What sh prints for the rewritten text is what it printed for the source text.
    #[test]
    fn the_rewritten_shell_braces_mean_the_same_to_sh() {
        for text in [
            "printf '%s|' ${A} \"${A}x\" '${A}' \"a'${A}'b\" ${A}_y",
            "printf '%s|' \"$(echo ${A})\"",
        ] {
            let run = to_run(text, ITERATR).text;
            assert!(ShellTemplate::parse(&run).is_ok(), "{run}");
            let sh = |script: &str| {
                std::process::Command::new("/bin/sh")
                    .args(["-c", script])
                    .env("A", "v w")
                    .output()
                    .unwrap()
                    .stdout
            };
            assert_eq!(sh(&run), sh(text), "{text} → {run}");
        }
    }
}

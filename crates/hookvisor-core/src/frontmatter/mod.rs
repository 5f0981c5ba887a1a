//! Front matter: finding it in a script and reading its fields.
//!
//! The rules, written once here:
//!
//! 1. The opening delimiter is line 1, or line 2 when line 1 is a `#!` line. It is `---`, `#---`
//!    or `//---` (trailing white space allowed), and the block ends at the next line with the
//!    same delimiter.
//! 2. Inside a `#---` or `//---` block the comment prefix (`#` or `//`) is stripped from each line,
//!    then the indentation common to all non-blank lines. Only spaces and tabs count as white
//!    space here and below.
//! 3. The body is read as YAML, without merge keys (`<<`), anchors, aliases or unknown tags.
//!    When it is not valid YAML, it is read the way discobot's flat parser reads it: one
//!    `key: value` per line, split at the first `:`, one pair of matching quotes removed (nothing
//!    but a comment may follow the closing quote), and an unquoted ` #` starting a comment. So
//!    `pattern: *.go` works unquoted. A key is letters, digits, `_` and `-`.
//! 4. A key given twice is an error, whichever reader reads the body: no value silently wins.
//! 5. Scalars become strings, a key without a value the empty string; a YAML list becomes a
//!    comma-separated string (for `pattern`), its items also kept apart (`FrontMatter::lists`,
//!    for `argv` and `on_failure`). A `pattern` line holding a comma-separated list of
//!    quoted globs (`pattern: '*.go', '*.ts'`) is read as that list, `*.go, *.ts`.
//! 6. The fields that say how a hook runs (`type`, `run_as`, `blocking`, `notify_llm`,
//!    `timeout`, `retries`, and of the event model `event`, `action`, `tool`, `phase`, `await`,
//!    `block_on`, `pipe_output`, `reason_from`, `retry_delay`, and git-commit's `add` and
//!    `no_verify`) are read word for word from their own line, `key: value` at the
//!    block's left margin, with the flat reading of rule 3: what the line shows is what runs. A
//!    list, a value that YAML takes from elsewhere (a flow mapping, an explicit `?` key, an escape
//!    sequence, a block scalar) or such a line that YAML reads as part of another value is an
//!    error, so `run_as: "\x72oot"` or `run_as: >-` never mean `root`.
//! 7. The text fields discobot read flat (`name`, `description`, `pattern`) are the text
//!    written on their own line too, where YAML would retype it or read only part of it:
//!    `name: 1.10` is `1.10`, not `1.1`; `True` stays `True`, `null` stays `null`. What only
//!    YAML can say stays YAML's: a block scalar (`|`, `>`), a list, a value continued on the
//!    next lines, a value the flat reading refuses (`'it''s'`). Every line where hookvisor's
//!    reading and YAML's (or discobot's, rule 5) differ is noted (`FrontMatter::notes`), for
//!    `hookvisor check` to warn about.
//! 8. CRLF line endings are an error that says how to fix them.
//!
//! This file holds the rules, the block's delimiters (rules 1, 2, 8) and the order of the
//! readings; `yaml` reads the body as YAML, `flat` as discobot's `key: value` lines (rules 3
//! and 5), and `own_line` reads the fields that take the text of their own line (rules 6 and 7).

mod flat;
mod own_line;
mod yaml;

use std::collections::BTreeMap;

use self::flat::parse_flat;
use self::own_line::{read_text_fields, read_word_fields};
use self::yaml::parse_yaml;
pub(crate) use self::yaml::strict_options;

/// The raw fields of a front matter block, in the order of their keys.
pub(crate) type Fields = BTreeMap<String, String>;

/// The fields read word for word from their line (rule 6).
pub(crate) const WORD_FIELDS: [&str; 17] = [
    "type",
    "run_as",
    "blocking",
    "notify_llm",
    "timeout",
    "retries",
    "event",
    "action",
    "tool",
    "phase",
    "await",
    "block_on",
    "pipe_output",
    "reason_from",
    "retry_delay",
    // git-commit's, which decide what is committed and whether the gates run.
    "add",
    "no_verify",
];

/// The text fields that keep the text written on their line (rule 7).
const TEXT_FIELDS: [&str; 3] = ["name", "description", "pattern"];

/// A front matter block as read: its fields, and the lines read otherwise than YAML or
/// discobot would (rule 7).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct FrontMatter {
    /// The fields.
    pub fields: Fields,
    /// The fields whose value differs from another reader's, in line order.
    pub notes: Vec<Note>,
    /// The items of the fields YAML read as lists (`argv: [a, b]`), which [`Self::fields`]
    /// holds joined by commas (rule 5).
    pub lists: BTreeMap<String, Vec<String>>,
    /// The 1-based line of each key written at the block's left margin.
    pub lines: BTreeMap<String, usize>,
    /// The 1-based line of the closing delimiter.
    pub end_line: usize,
}

/// A field whose value hookvisor reads otherwise than another reader of the same line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Note {
    /// The field.
    pub key: &'static str,
    /// 1-based line in the file.
    pub line: usize,
    /// The value hookvisor uses.
    pub used: String,
    /// What the other reader makes of the line.
    pub other: Other,
}

/// The reader a [`Note`] compares with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Other {
    /// YAML's value; `None` when YAML reads no value (`null`, `~`) or none on this line.
    Yaml(Option<String>),
    /// discobot's flat parser's, where hookvisor reads a list of quoted globs (rule 5).
    Discobot(String),
}

/// Why a script has no usable front matter.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrontMatterError {
    /// No delimiter on line 1 (or line 2 after `#!`).
    #[error(
        "no front matter; start line 1 (or line 2 after #!) with ---, #--- or //--- and close \
         the block with the same line"
    )]
    Missing,
    /// The opening delimiter has no matching closing line.
    #[error(
        "front matter opened with '{delimiter}' on line {line} is never closed; add a \
         '{delimiter}' line after the last field"
    )]
    Unclosed {
        /// The delimiter that opened the block.
        delimiter: &'static str,
        /// 1-based line of the opening delimiter.
        line: usize,
    },
    /// The file uses CRLF line endings.
    #[error("CRLF line endings")]
    Crlf,
    /// The body is neither YAML nor `key: value` lines, or repeats a key.
    #[error("front matter line {line}: {message}")]
    Syntax {
        /// 1-based line in the file.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A field read word for word (`type`, `run_as`, `blocking`, `notify_llm`, `timeout`) is
    /// not written on a line of its own (rule 6).
    #[error(
        "write '{key}' as '{key}: VALUE' on a line of its own at the left margin (not in a \
         {{...}} mapping, after '?' or through a merge key)"
    )]
    NotOnItsLine {
        /// The field.
        key: &'static str,
    },
}

const DELIMITERS: [(&str, &str); 3] = [("---", ""), ("#---", "#"), ("//---", "//")];

/// White space, for every rule of this module: spaces and tabs only, never the other characters
/// Unicode calls white space, so that `root` followed by U+3000 is not `root`.
const BLANK: [char; 2] = [' ', '\t'];

/// Extracts and parses the front matter of a script's text.
pub fn parse(text: &str) -> Result<Fields, FrontMatterError> {
    read(text).map(|front| front.fields)
}

/// [`parse`], with the notes of rule 7.
pub(crate) fn read(text: &str) -> Result<FrontMatter, FrontMatterError> {
    let mut lines = text.split('\n');
    let first = lines.next().unwrap_or("");
    if first.ends_with('\r') {
        return Err(FrontMatterError::Crlf);
    }
    let (open_line, opener) = if first.starts_with("#!") {
        (2, lines.next().unwrap_or(""))
    } else {
        (1, first)
    };
    if opener.ends_with('\r') {
        return Err(FrontMatterError::Crlf);
    }
    let (delimiter, prefix) = DELIMITERS
        .iter()
        .copied()
        .find(|(d, _)| opener.trim_end_matches(BLANK) == *d)
        .ok_or(FrontMatterError::Missing)?;

    let mut body = Vec::new();
    let mut closed = false;
    for line in lines {
        if line.ends_with('\r') {
            return Err(FrontMatterError::Crlf);
        }
        if line.trim_end_matches(BLANK) == delimiter {
            closed = true;
            break;
        }
        let uncommented = match prefix {
            "" => None,
            prefix => line.trim_start_matches(BLANK).strip_prefix(prefix),
        };
        body.push(uncommented.unwrap_or(line));
    }
    if !closed {
        return Err(FrontMatterError::Unclosed {
            delimiter,
            line: open_line,
        });
    }
    let body = dedent(&body);
    let first_body_line = open_line + 1;
    let mut notes = Vec::new();
    let (fields, lists) = match parse_yaml(&body, first_body_line)? {
        Some(yaml) => {
            let mut fields = yaml.fields.clone();
            read_word_fields(&body, first_body_line, &mut fields, Some(&yaml), &mut notes)?;
            read_text_fields(&body, first_body_line, &mut fields, &yaml, &mut notes)?;
            (fields, yaml.items)
        }
        None => {
            let mut fields = parse_flat(&body, first_body_line, &mut notes)?;
            read_word_fields(&body, first_body_line, &mut fields, None, &mut notes)?;
            (fields, BTreeMap::new())
        }
    };
    notes.sort_by_key(|note| note.line);
    Ok(FrontMatter {
        fields,
        notes,
        lists,
        lines: key_lines(&body, first_body_line),
        end_line: first_body_line + body.len(),
    })
}

/// The line of each key written at the block's left margin, the first when repeated (rule 4
/// refuses repeats anyway), so that a problem with a value can name its line.
fn key_lines(body: &[String], first_line: usize) -> BTreeMap<String, usize> {
    let mut lines = BTreeMap::new();
    for (offset, line) in body.iter().enumerate() {
        if line.starts_with(BLANK) {
            continue;
        }
        if let Some((key, _)) = line.split_once(':') {
            let key = key.trim_end_matches(BLANK);
            if !key.is_empty() && !key.starts_with('#') {
                lines.entry(key.to_owned()).or_insert(first_line + offset);
            }
        }
    }
    lines
}

/// Removes the indentation common to every non-blank line.
fn dedent(lines: &[&str]) -> Vec<String> {
    let indent = lines
        .iter()
        .filter(|l| !l.trim_matches(BLANK).is_empty())
        .map(|l| l.len() - l.trim_start_matches(BLANK).len())
        .min()
        .unwrap_or(0);
    lines
        .iter()
        .map(|l| {
            l.get(indent..)
                .unwrap_or("")
                .trim_end_matches(BLANK)
                .to_owned()
        })
        .collect()
}

const MERGE_KEY: &str =
    "'<<' is a YAML merge key, which front matter does not take; write each field out";

fn repeated(key: &str) -> String {
    format!("'{key}' is given twice; keep one")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Fields from `(key, value)` pairs, to compare with what `parse` returns.
    pub(super) fn fields(pairs: &[(&str, &str)]) -> Fields {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn the_three_delimiters_on_line_one_or_after_the_shebang() {
        let table = [
            "---\ntype: file\npattern: '*.go'\n---\necho hi\n",
            "#!/bin/sh\n---\ntype: file\npattern: '*.go'\n---\n",
            "#---\n# type: file\n# pattern: '*.go'\n#---\n",
            "#!/bin/bash\n#---\n#type: file\n#pattern: \"*.go\"\n#---\nexit 0\n",
            "//---\n// type: file\n// pattern: '*.go'\n//---\n",
            "#!/usr/bin/env node\n//---\n//   type: file\n//   pattern: '*.go'\n//---\n",
            "#!/bin/sh\n#---   \n# type: file\n# pattern: '*.go'\n#---\t\n",
        ];
        for text in table {
            assert_eq!(
                parse(text),
                Ok(fields(&[("pattern", "*.go"), ("type", "file")])),
                "{text:?}"
            );
        }
    }

    #[test]
    fn errors() {
        assert_eq!(parse(""), Err(FrontMatterError::Missing));
        assert_eq!(parse("#!/bin/sh\necho\n"), Err(FrontMatterError::Missing));
        assert_eq!(
            parse("#!/bin/sh\n\n---\ntype: file\n---\n"),
            Err(FrontMatterError::Missing),
            "front matter must start on line 2 after a shebang"
        );
        assert_eq!(
            parse("#!/bin/sh\n#---\n# type: file\n"),
            Err(FrontMatterError::Unclosed {
                delimiter: "#---",
                line: 2
            })
        );
        assert_eq!(
            parse("---\ntype: file\n#---\n"),
            Err(FrontMatterError::Unclosed {
                delimiter: "---",
                line: 1
            }),
            "the closing delimiter must match the opening one"
        );
        assert_eq!(
            parse("#!/bin/sh\r\n#---\r\n# type: file\r\n#---\r\n"),
            Err(FrontMatterError::Crlf)
        );
        assert_eq!(
            parse("---\r\ntype: file\r\n---\r\n"),
            Err(FrontMatterError::Crlf)
        );
        assert!(matches!(
            parse("---\ntype file *\n---\n"),
            Err(FrontMatterError::Syntax { line: 2, .. })
        ));
    }

    /// Any key given twice, and YAML merge keys, are errors, whichever reader reads the body:
    /// today's readers let the last value (or the merged one) win, which hides a `run_as: root`.
    #[test]
    fn duplicate_and_merge_keys_are_errors() {
        // (front matter, line of the error, a fragment of its message)
        let table: &[(&str, usize, &str)] = &[
            (
                "---\nrun_as: user\nrun_as: root\n---\n",
                3,
                "'run_as' is given twice",
            ),
            (
                "---\nrun_as: root\nrun_as: root\n---\n",
                3,
                "'run_as' is given twice",
            ),
            (
                "---\nname: a\ntype: file\nname: b\n---\n",
                4,
                "'name' is given twice",
            ),
            (
                "#---\n# type: file\n# pattern: *.go\n# type: session\n#---\n",
                4,
                "'type' is given twice",
            ),
            (
                "#!/bin/sh\n#---\n# notify_llm: false\n# pattern: *.go\n# notify_llm: true\n#---\n",
                5,
                "'notify_llm' is given twice",
            ),
            (
                "---\ntype: session\n<<: {run_as: root}\n---\n",
                3,
                "merge key",
            ),
            (
                "---\nbase: &b {run_as: root}\ntype: session\n<<: *b\n---\n",
                4,
                "merge key",
            ),
            (
                "---\n<<: {run_as: root}\npattern: *.go\n---\n",
                2,
                "merge key",
            ),
        ];
        for &(text, line, fragment) in table {
            match parse(text) {
                Err(FrontMatterError::Syntax { line: got, message }) => {
                    assert_eq!(got, line, "{text:?}: {message}");
                    assert!(
                        message.contains(fragment),
                        "{text:?}: {message:?} lacks {fragment:?}"
                    );
                }
                other => panic!("{text:?}: expected an error on line {line}, got {other:?}"),
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn never_panics(text in "\\PC{0,400}") {
            let _ = parse(&text);
        }

        #[test]
        fn never_panics_inside_a_block(body in "[ -~\\t\\n#:'\"\\[\\]{}*,|>&!%@`-]{0,300}") {
            let _ = parse(&format!("#!/bin/sh\n#---\n{body}\n#---\n"));
            let _ = parse(&format!("---\n{body}\n---\n"));
        }
    }
}

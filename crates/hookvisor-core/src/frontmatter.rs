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
//!    comma-separated string (for `pattern`).
//! 6. The fields that say how a hook runs (`type`, `run_as`, `blocking`, `notify_llm`,
//!    `timeout`) are read word for word from their own line, `key: value` at the block's left
//!    margin, with the flat reading of rule 3: what the line shows is what runs. A list, a value
//!    that YAML takes from elsewhere (a flow mapping, an explicit `?` key, an escape sequence, a
//!    block scalar) or such a line that YAML reads as part of another value is an error, so
//!    `run_as: "\x72oot"` or `run_as: >-` never mean `root`.
//! 7. CRLF line endings are an error that says how to fix them.

use std::collections::BTreeMap;
use std::fmt;

/// The raw fields of a front matter block, in the order of their keys.
pub type Fields = BTreeMap<String, String>;

/// The fields read word for word from their line (rule 6).
const WORD_FIELDS: [&str; 5] = ["type", "run_as", "blocking", "notify_llm", "timeout"];

/// Why a script has no usable front matter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FrontMatterError {
    /// No delimiter on line 1 (or line 2 after `#!`).
    Missing,
    /// The opening delimiter has no matching closing line.
    Unclosed {
        /// The delimiter that opened the block.
        delimiter: &'static str,
        /// 1-based line of the opening delimiter.
        line: usize,
    },
    /// The file uses CRLF line endings.
    Crlf,
    /// The body is neither YAML nor `key: value` lines, or repeats a key.
    Syntax {
        /// 1-based line in the file.
        line: usize,
        /// What is wrong.
        message: String,
    },
    /// A field read word for word (`type`, `run_as`, `blocking`, `notify_llm`, `timeout`) is
    /// not written on a line of its own (rule 6).
    NotOnItsLine {
        /// The field.
        key: &'static str,
    },
}

impl fmt::Display for FrontMatterError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FrontMatterError::Missing => f.write_str(
                "no front matter; start line 1 (or line 2 after #!) with ---, #--- or //--- \
                 and close the block with the same line",
            ),
            FrontMatterError::Unclosed { delimiter, line } => write!(
                f,
                "front matter opened with '{delimiter}' on line {line} is never closed; \
                 add a '{delimiter}' line after the last field"
            ),
            FrontMatterError::Crlf => f.write_str("CRLF line endings"),
            FrontMatterError::Syntax { line, message } => {
                write!(f, "front matter line {line}: {message}")
            }
            FrontMatterError::NotOnItsLine { key } => write!(
                f,
                "write '{key}' as '{key}: VALUE' on a line of its own at the left margin \
                 (not in a {{...}} mapping, after '?' or through a merge key)"
            ),
        }
    }
}

impl std::error::Error for FrontMatterError {}

const DELIMITERS: [(&str, &str); 3] = [("---", ""), ("#---", "#"), ("//---", "//")];

/// White space, for every rule of this module: spaces and tabs only, never the other characters
/// Unicode calls white space, so that `root` followed by U+3000 is not `root`.
const BLANK: [char; 2] = [' ', '\t'];

/// Extracts and parses the front matter of a script's text.
pub fn parse(text: &str) -> Result<Fields, FrontMatterError> {
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
    let (mut fields, lists) = match parse_yaml(&body, first_body_line)? {
        Some(read) => read,
        None => (parse_flat(&body, first_body_line)?, Vec::new()),
    };
    read_word_fields(&body, first_body_line, &mut fields, &lists)?;
    Ok(fields)
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

/// A YAML value as far as front matter needs it.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum YamlValue {
    Scalar(YamlScalar),
    List(Vec<YamlScalar>),
}

#[derive(serde::Deserialize)]
#[serde(untagged)]
enum YamlScalar {
    Bool(bool),
    Int(i64),
    Float(f64),
    String(String),
}

impl YamlScalar {
    fn into_string(self) -> String {
        match self {
            YamlScalar::Bool(b) => b.to_string(),
            YamlScalar::Int(i) => i.to_string(),
            YamlScalar::Float(x) => x.to_string(),
            YamlScalar::String(s) => s,
        }
    }
}

/// The fields YAML read, and the keys whose value was a list.
type YamlFields = (Fields, Vec<String>);

/// Reads the body as a YAML mapping of scalars (or lists of scalars), with the keys whose value
/// is a list; `None` when it is not one. Repeated keys and merge keys are errors (rules 3, 4).
fn parse_yaml(body: &[String], first_line: usize) -> Result<Option<YamlFields>, FrontMatterError> {
    use serde_saphyr::{DuplicateKeyPolicy, Error, MergeKeyPolicy};
    if body.iter().all(|line| line.is_empty()) {
        return Ok(Some((Fields::new(), Vec::new())));
    }
    let options = serde_saphyr::options! {
        budget: serde_saphyr::budget! { max_anchors: 0, max_aliases: 0 },
        duplicate_keys: DuplicateKeyPolicy::Error,
        merge_keys: MergeKeyPolicy::Error,
        reject_unsupported_tags: true,
        with_snippet: false,
    };
    let line_of = |yaml_line: u64| first_line + usize::try_from(yaml_line).unwrap_or(1).max(1) - 1;
    let text = body.join("\n");
    let map: BTreeMap<String, Option<YamlValue>> =
        match serde_saphyr::from_str_with_options(&text, options) {
            Ok(map) => map,
            Err(Error::DuplicateMappingKey { key, location }) => {
                return Err(FrontMatterError::Syntax {
                    line: line_of(location.line()),
                    message: repeated(key.as_deref().unwrap_or("a key")),
                });
            }
            Err(Error::MergeKeyNotAllowed { location }) => {
                return Err(FrontMatterError::Syntax {
                    line: line_of(location.line()),
                    message: MERGE_KEY.to_owned(),
                });
            }
            // Not YAML (`pattern: *.go`): the flat reader's turn.
            Err(_) => return Ok(None),
        };
    let mut lists = Vec::new();
    let fields = map
        .into_iter()
        .map(|(key, value)| {
            let value = match value {
                None => String::new(),
                Some(YamlValue::Scalar(s)) => s.into_string(),
                Some(YamlValue::List(items)) => {
                    lists.push(key.clone());
                    items
                        .into_iter()
                        .map(YamlScalar::into_string)
                        .collect::<Vec<_>>()
                        .join(",")
                }
            };
            (key, value)
        })
        .collect();
    Ok(Some((fields, lists)))
}

const MERGE_KEY: &str =
    "'<<' is a YAML merge key, which front matter does not take; write each field out";

fn repeated(key: &str) -> String {
    format!("'{key}' is given twice; keep one")
}

/// discobot's flat `key: value` reading, for bodies that are not valid YAML.
fn parse_flat(body: &[String], first_line: usize) -> Result<Fields, FrontMatterError> {
    let mut fields = Fields::new();
    for (offset, line) in body.iter().enumerate() {
        let line_number = first_line + offset;
        let syntax = |message: String| FrontMatterError::Syntax {
            line: line_number,
            message,
        };
        let trimmed = line.trim_matches(BLANK);
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some((key, value)) = trimmed.split_once(':') else {
            return Err(syntax(format!("expected 'key: value', found '{trimmed}'")));
        };
        let key = key.trim_matches(BLANK);
        if key == "<<" {
            return Err(syntax(MERGE_KEY.to_owned()));
        }
        if !is_key(key) {
            return Err(syntax(format!(
                "'{key}' is not a field name; write plain names such as 'run_as'"
            )));
        }
        if fields.contains_key(key) {
            return Err(syntax(repeated(key)));
        }
        let value = flat_value(value.trim_matches(BLANK)).map_err(syntax)?;
        fields.insert(key.to_owned(), value);
    }
    Ok(fields)
}

fn is_key(key: &str) -> bool {
    !key.is_empty()
        && key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-'))
}

/// One pair of matching quotes is removed, and only a comment may follow them; outside
/// quotes, ` #` starts a comment.
fn flat_value(value: &str) -> Result<String, String> {
    for quote in ['"', '\''] {
        if let Some(rest) = value.strip_prefix(quote)
            && let Some(end) = rest.find(quote)
        {
            let after = rest[end + 1..].trim_start_matches(BLANK);
            if !after.is_empty() && !after.starts_with('#') {
                return Err(format!(
                    "text after the closing quote ('{after}'); put the whole value inside the \
                     quotes"
                ));
            }
            return Ok(rest[..end].to_owned());
        }
    }
    let without_comment = match value.find(" #").or_else(|| value.find("\t#")) {
        Some(i) => &value[..i],
        None if value.starts_with('#') => "",
        None => value,
    };
    Ok(without_comment.trim_matches(BLANK).to_owned())
}

/// Rule 6: each field of [`WORD_FIELDS`] takes the flat reading of its own line.
fn read_word_fields(
    body: &[String],
    first_line: usize,
    fields: &mut Fields,
    lists: &[String],
) -> Result<(), FrontMatterError> {
    for key in WORD_FIELDS {
        let mut on_lines = body.iter().enumerate().filter_map(|(offset, line)| {
            let (name, value) = line.split_once(':')?;
            (name.trim_end_matches(BLANK) == key).then_some((first_line + offset, value))
        });
        let line = on_lines.next();
        if let Some((again, _)) = on_lines.next() {
            return Err(FrontMatterError::Syntax {
                line: again,
                message: repeated(key),
            });
        }
        match (line, fields.contains_key(key)) {
            (None, false) => {}
            (None, true) => return Err(FrontMatterError::NotOnItsLine { key }),
            (Some((line, _)), false) => {
                return Err(FrontMatterError::Syntax {
                    line,
                    message: format!(
                        "this line looks like the field '{key}', but YAML reads it as part of \
                         the value before it; close that value first"
                    ),
                });
            }
            (Some((line, _)), true) if lists.iter().any(|l| l == key) => {
                return Err(FrontMatterError::Syntax {
                    line,
                    message: format!("'{key}' is a list; give one value, as in '{key}: VALUE'"),
                });
            }
            (Some((line, value)), true) => {
                let value = flat_value(value.trim_matches(BLANK))
                    .map_err(|message| FrontMatterError::Syntax { line, message })?;
                fields.insert(key.to_owned(), value);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&str, &str)]) -> Fields {
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
    fn flat_compat_spellings() {
        let table: &[(&str, &[(&str, &str)])] = &[
            (
                "#---\n# type: file\n# pattern: *.go\n#---\n",
                &[("type", "file"), ("pattern", "*.go")],
            ),
            (
                "#---\n# pattern: *.go # go files\n# type: file\n#---\n",
                &[("type", "file"), ("pattern", "*.go")],
            ),
            (
                "#---\n# name: \"Go # fmt\"\n# pattern: *.go\n#---\n",
                &[("name", "Go # fmt"), ("pattern", "*.go")],
            ),
            (
                "#---\n# name: 'it'\n# pattern: [ab].go\n#---\n",
                &[("name", "it"), ("pattern", "[ab].go")],
            ),
            (
                "---\nnotify_llm: NO\ntype: file\npattern: *.ts\n---\n",
                &[("notify_llm", "NO"), ("type", "file"), ("pattern", "*.ts")],
            ),
            (
                "---\ntype: session # setup\nblocking: true\n---\n",
                &[("type", "session"), ("blocking", "true")],
            ),
        ];
        for (text, expected) in table {
            assert_eq!(parse(text), Ok(fields(expected)), "{text:?}");
        }
    }

    #[test]
    fn yaml_features() {
        let text = "---\ntype: file\npattern:\n  - '*.go'\n  - 'go.mod'\ntimeout: 30\n\
                    notify_llm: false\ndescription: |\n  two\n  lines\n---\n";
        assert_eq!(
            parse(text),
            Ok(fields(&[
                ("description", "two\nlines\n"),
                ("notify_llm", "false"),
                ("pattern", "*.go,go.mod"),
                ("timeout", "30"),
                ("type", "file"),
            ]))
        );
        assert_eq!(parse("---\n---\n"), Ok(Fields::new()));
        assert_eq!(
            parse("---\ntype:\nname: ~\n---\n"),
            Ok(fields(&[("name", ""), ("type", "")])),
            "a key without a value is kept, empty: discovery says whether that is a problem"
        );
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

    /// Rule 6: the word fields are what their line shows, whatever YAML would make of it.
    #[test]
    fn word_fields_are_read_from_their_line() {
        let table: &[(&str, Result<&str, &str>)] = &[
            ("notify_llm: False", Ok("False")),
            ("timeout: 030", Ok("030")),
            ("run_as: 'root' # comment", Ok("root")),
            ("run_as: \"\\x72oot\"", Ok("\\x72oot")),
            ("run_as: >-\n  root", Ok(">-")),
            ("run_as: \"root\"x", Err("text after the closing quote")),
            ("run_as: [root]", Err("'run_as' is a list")),
            ("? run_as\n: root", Err("on a line of its own")),
            ("{type: session}", Err("on a line of its own")),
        ];
        for (body, expected) in table {
            let key = if body.contains("run_as") {
                "run_as"
            } else if body.contains("timeout") {
                "timeout"
            } else if body.contains("notify_llm") {
                "notify_llm"
            } else {
                "type"
            };
            let got = parse(&format!("---\n{body}\n---\n"))
                .map(|f| f.get(key).cloned().unwrap_or_default())
                .map_err(|e| e.to_string());
            match (&got, expected) {
                (Ok(value), Ok(want)) => assert_eq!(value, want, "{body:?}"),
                (Err(e), Err(fragment)) => assert!(e.contains(fragment), "{body:?}: {e}"),
                _ => panic!("{body:?}: got {got:?}, want {expected:?}"),
            }
        }
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

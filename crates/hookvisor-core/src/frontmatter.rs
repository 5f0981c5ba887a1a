//! Front matter: finding it in a script and reading its fields.
//!
//! The rules, written once here:
//!
//! 1. The opening delimiter is line 1, or line 2 when line 1 is a `#!` line. It is `---`, `#---`
//!    or `//---` (trailing white space allowed), and the block ends at the next line with the
//!    same delimiter.
//! 2. Inside a `#---` or `//---` block the comment prefix (`#` or `//`) is stripped from each line,
//!    then the indentation common to all non-blank lines.
//! 3. The body is read as YAML. When it is not valid YAML, it is read the way discobot's flat
//!    parser reads it: one `key: value` per line, split at the first `:`, one pair of matching
//!    quotes removed, and an unquoted ` #` starting a comment. So `pattern: *.go` works unquoted.
//! 4. Scalars become strings; a YAML list becomes a comma-separated string (for `pattern`).
//! 5. CRLF line endings are an error that says how to fix them.

use std::collections::BTreeMap;
use std::fmt;

/// The raw fields of a front matter block, in the order of their keys.
pub type Fields = BTreeMap<String, String>;

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
    /// The body is neither YAML nor `key: value` lines.
    Syntax {
        /// 1-based line in the file.
        line: usize,
        /// What is wrong.
        message: String,
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
        }
    }
}

impl std::error::Error for FrontMatterError {}

const DELIMITERS: [(&str, &str); 3] = [("---", ""), ("#---", "#"), ("//---", "//")];

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
        .find(|(d, _)| opener.trim_end() == *d)
        .ok_or(FrontMatterError::Missing)?;

    let mut body = Vec::new();
    let mut closed = false;
    for line in lines {
        if line.ends_with('\r') {
            return Err(FrontMatterError::Crlf);
        }
        if line.trim_end() == delimiter {
            closed = true;
            break;
        }
        let uncommented = match prefix {
            "" => None,
            prefix => line.trim_start().strip_prefix(prefix),
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
    match parse_yaml(&body) {
        Some(fields) => Ok(fields),
        None => parse_flat(&body, first_body_line),
    }
}

/// Removes the indentation common to every non-blank line.
fn dedent(lines: &[&str]) -> Vec<String> {
    let indent = lines
        .iter()
        .filter(|l| !l.trim().is_empty())
        .map(|l| l.len() - l.trim_start_matches([' ', '\t']).len())
        .min()
        .unwrap_or(0);
    lines
        .iter()
        .map(|l| l.get(indent..).unwrap_or("").trim_end().to_owned())
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

/// Reads the body as a YAML mapping of scalars (or lists of scalars); `None` when it is not one.
fn parse_yaml(body: &[String]) -> Option<Fields> {
    let text = body.join("\n");
    if text.trim().is_empty() {
        return Some(Fields::new());
    }
    let map: BTreeMap<String, Option<YamlValue>> = serde_saphyr::from_str(&text).ok()?;
    Some(
        map.into_iter()
            .filter_map(|(key, value)| {
                let value = match value? {
                    YamlValue::Scalar(s) => s.into_string(),
                    YamlValue::List(items) => items
                        .into_iter()
                        .map(YamlScalar::into_string)
                        .collect::<Vec<_>>()
                        .join(","),
                };
                Some((key, value))
            })
            .collect(),
    )
}

/// discobot's flat `key: value` reading, for bodies that are not valid YAML.
fn parse_flat(body: &[String], first_line: usize) -> Result<Fields, FrontMatterError> {
    let mut fields = Fields::new();
    for (offset, line) in body.iter().enumerate() {
        let trimmed = line.trim();
        if trimmed.is_empty() || trimmed.starts_with('#') {
            continue;
        }
        let Some((key, value)) = trimmed.split_once(':') else {
            return Err(FrontMatterError::Syntax {
                line: first_line + offset,
                message: format!("expected 'key: value', found '{trimmed}'"),
            });
        };
        fields.insert(key.trim().to_owned(), flat_value(value.trim()));
    }
    Ok(fields)
}

/// One pair of matching quotes is removed; outside quotes, ` #` starts a comment.
fn flat_value(value: &str) -> String {
    for quote in ['"', '\''] {
        if let Some(rest) = value.strip_prefix(quote)
            && let Some(end) = rest.find(quote)
        {
            return rest[..end].to_owned();
        }
    }
    let without_comment = match value.find(" #").or_else(|| value.find("\t#")) {
        Some(i) => &value[..i],
        None if value.starts_with('#') => "",
        None => value,
    };
    without_comment.trim().to_owned()
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
            parse("---\ntype:\n---\n"),
            Ok(Fields::new()),
            "an empty value is absent"
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

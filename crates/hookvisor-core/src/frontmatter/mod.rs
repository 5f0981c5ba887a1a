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
//!    comma-separated string (for `pattern`). A `pattern` line holding a comma-separated list of
//!    quoted globs (`pattern: '*.go', '*.ts'`) is read as that list, `*.go, *.ts`.
//! 6. The fields that say how a hook runs (`type`, `run_as`, `blocking`, `notify_llm`,
//!    `timeout`, `retries`) are read word for word from their own line, `key: value` at the
//!    block's left margin, with the flat reading of rule 3: what the line shows is what runs. A
//!    list, a value that YAML takes from elsewhere (a flow mapping, an explicit `?` key, an escape
//!    sequence, a block scalar) or such a line that YAML reads as part of another value is an
//!    error, so `run_as: "\x72oot"` or `run_as: >-` never mean `root`.
//! 7. The text fields discobot read flat (`name`, `description`, `pattern`) are the text
//!    written on their own line too, where YAML would retype it or read only part of it:
//!    `name: 1.10` is `1.10`, not `1.1`; `True` stays `True`, `null` stays `null`. What only
//!    YAML can say stays YAML's: a block scalar (`|`, `>`), a list, a value continued on the
//!    next lines, a value the flat reading refuses (`'it''s'`). Every line where hookvisor's
//!    reading and YAML's (or discobot's, rule 5) differ is noted ([`FrontMatter::notes`]), for
//!    `hookvisor check` to warn about.
//! 8. CRLF line endings are an error that says how to fix them.

use std::collections::BTreeMap;

/// The raw fields of a front matter block, in the order of their keys.
pub(crate) type Fields = BTreeMap<String, String>;

/// The fields read word for word from their line (rule 6).
pub(crate) const WORD_FIELDS: [&str; 6] = [
    "type",
    "run_as",
    "blocking",
    "notify_llm",
    "timeout",
    "retries",
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
    let fields = match parse_yaml(&body, first_body_line)? {
        Some(yaml) => {
            let mut fields = yaml.fields.clone();
            read_word_fields(&body, first_body_line, &mut fields, Some(&yaml), &mut notes)?;
            read_text_fields(&body, first_body_line, &mut fields, &yaml, &mut notes)?;
            fields
        }
        None => {
            let mut fields = parse_flat(&body, first_body_line, &mut notes)?;
            read_word_fields(&body, first_body_line, &mut fields, None, &mut notes)?;
            fields
        }
    };
    notes.sort_by_key(|note| note.line);
    Ok(FrontMatter { fields, notes })
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

/// The fields YAML read, with the keys whose value was a list and those whose value was null.
#[derive(Default)]
struct YamlFields {
    fields: Fields,
    lists: Vec<String>,
    nulls: Vec<String>,
}

impl YamlFields {
    /// YAML's value of `key`: `None` when it has none (null, or not given).
    fn value(&self, key: &str) -> Option<&str> {
        if self.nulls.iter().any(|k| k == key) {
            return None;
        }
        self.fields.get(key).map(String::as_str)
    }

    fn is_list(&self, key: &str) -> bool {
        self.lists.iter().any(|k| k == key)
    }
}

/// Reads the body as a YAML mapping of scalars (or lists of scalars); `None` when it is not
/// one. Repeated keys and merge keys are errors (rules 3, 4).
fn parse_yaml(body: &[String], first_line: usize) -> Result<Option<YamlFields>, FrontMatterError> {
    use serde_saphyr::{DuplicateKeyPolicy, Error, MergeKeyPolicy};
    if body.iter().all(|line| line.is_empty()) {
        return Ok(Some(YamlFields::default()));
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
    let mut nulls = Vec::new();
    let fields = map
        .into_iter()
        .map(|(key, value)| {
            let value = match value {
                None => {
                    nulls.push(key.clone());
                    String::new()
                }
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
    Ok(Some(YamlFields {
        fields,
        lists,
        nulls,
    }))
}

const MERGE_KEY: &str =
    "'<<' is a YAML merge key, which front matter does not take; write each field out";

fn repeated(key: &str) -> String {
    format!("'{key}' is given twice; keep one")
}

/// discobot's flat `key: value` reading, for bodies that are not valid YAML.
fn parse_flat(
    body: &[String],
    first_line: usize,
    notes: &mut Vec<Note>,
) -> Result<Fields, FrontMatterError> {
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
        let (value, discobot) = text_value(key, value.trim_matches(BLANK)).map_err(syntax)?;
        if let (Some(discobot), Some(key)) = (discobot, TEXT_FIELDS.iter().find(|k| **k == key)) {
            notes.push(Note {
                key,
                line: line_number,
                used: value.clone(),
                other: Other::Discobot(discobot),
            });
        }
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

/// The flat reading of a value (rule 3), and for `pattern`, a list of quoted globs (rule 5)
/// with discobot's reading of it.
fn text_value(key: &str, value: &str) -> Result<(String, Option<String>), String> {
    match flat_value(value) {
        Ok(text) => Ok((text, None)),
        Err(e) if key == "pattern" => match glob_list(value) {
            Some(globs) => Ok((globs, Some(discobot_value(value)))),
            None => Err(e),
        },
        Err(e) => Err(e),
    }
}

/// Two or more globs, each quoted or bare, separated by commas, then maybe a comment:
/// `'*.go', "*.ts"` → `*.go, *.ts`. `None` for anything else.
fn glob_list(value: &str) -> Option<String> {
    let mut globs = Vec::new();
    let mut rest = value;
    loop {
        rest = rest.trim_start_matches(BLANK);
        let quote = rest.chars().next().filter(|c| matches!(c, '"' | '\''));
        let (glob, after) = match quote {
            Some(quote) => {
                let end = rest[1..].find(quote)? + 1;
                (&rest[1..end], &rest[end + 1..])
            }
            None => {
                let end = bare_glob_end(rest);
                (rest[..end].trim_end_matches(BLANK), &rest[end..])
            }
        };
        if glob.is_empty() || (quote.is_none() && glob.contains(['"', '\''])) {
            return None;
        }
        globs.push(glob);
        let after = after.trim_start_matches(BLANK);
        if after.is_empty() || after.starts_with('#') {
            break;
        }
        rest = after.strip_prefix(',')?;
    }
    (globs.len() > 1).then(|| globs.join(", "))
}

/// Where an unquoted glob of a list ends: at a comma outside braces, a ` #` comment or the end.
fn bare_glob_end(text: &str) -> usize {
    let mut depth = 0usize;
    let mut previous = ' ';
    for (i, c) in text.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => return i,
            '#' if BLANK.contains(&previous) => return i,
            _ => {}
        }
        previous = c;
    }
    text.len()
}

/// discobot's reading of a value: one pair of quotes removed when they open and close it.
fn discobot_value(value: &str) -> String {
    let bytes = value.as_bytes();
    match (bytes.first(), bytes.last()) {
        (Some(&open), Some(&close))
            if bytes.len() >= 2 && open == close && matches!(open, b'"' | b'\'') =>
        {
            value[1..value.len() - 1].to_owned()
        }
        _ => value.to_owned(),
    }
}

/// The lines where `key` is written at the left margin, `key: value`, with their line numbers;
/// an error when there are two.
fn key_line<'a>(
    body: &'a [String],
    first_line: usize,
    key: &str,
) -> Result<Option<(usize, &'a str)>, FrontMatterError> {
    let mut on_lines = body.iter().enumerate().filter_map(|(offset, line)| {
        let (name, value) = line.split_once(':')?;
        (name.trim_end_matches(BLANK) == key).then_some((offset, value))
    });
    let found = on_lines.next();
    if let Some((again, _)) = on_lines.next() {
        return Err(FrontMatterError::Syntax {
            line: first_line + again,
            message: repeated(key),
        });
    }
    Ok(found)
}

/// Rule 6: each field of [`WORD_FIELDS`] takes the flat reading of its own line; where `yaml`
/// read another value, a note says so.
fn read_word_fields(
    body: &[String],
    first_line: usize,
    fields: &mut Fields,
    yaml: Option<&YamlFields>,
    notes: &mut Vec<Note>,
) -> Result<(), FrontMatterError> {
    for key in WORD_FIELDS {
        let line =
            key_line(body, first_line, key)?.map(|(offset, value)| (first_line + offset, value));
        let is_list = yaml.is_some_and(|yaml| yaml.is_list(key));
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
            (Some((line, _)), true) if is_list => {
                return Err(FrontMatterError::Syntax {
                    line,
                    message: format!("'{key}' is a list; give one value, as in '{key}: VALUE'"),
                });
            }
            (Some((line, value)), true) => {
                let value = flat_value(value.trim_matches(BLANK))
                    .map_err(|message| FrontMatterError::Syntax { line, message })?;
                if let Some(yaml) = yaml
                    && yaml.value(key) != Some(value.as_str())
                {
                    notes.push(Note {
                        key,
                        line,
                        used: value.clone(),
                        other: Other::Yaml(yaml.value(key).map(str::to_owned)),
                    });
                }
                fields.insert(key.to_owned(), value);
            }
        }
    }
    Ok(())
}

/// Rule 7: each field of [`TEXT_FIELDS`] written on one line of its own takes the flat reading
/// of that line, with a note where YAML read another value.
fn read_text_fields(
    body: &[String],
    first_line: usize,
    fields: &mut Fields,
    yaml: &YamlFields,
    notes: &mut Vec<Note>,
) -> Result<(), FrontMatterError> {
    for key in TEXT_FIELDS {
        let Some((offset, value)) = key_line(body, first_line, key)? else {
            continue;
        };
        let value = value.trim_matches(BLANK);
        let yaml_only = yaml.is_list(key)
            || value.is_empty()
            || value.starts_with(['|', '>'])
            || continues(body, offset);
        if yaml_only {
            continue;
        }
        // A value the flat reading refuses (`'it''s'`) is YAML's to read.
        let Ok((text, discobot)) = text_value(key, value) else {
            continue;
        };
        let other = match discobot {
            Some(discobot) => Some(Other::Discobot(discobot)),
            None if yaml.value(key).unwrap_or_default() != text => {
                Some(Other::Yaml(yaml.value(key).map(str::to_owned)))
            }
            None => None,
        };
        if let Some(other) = other {
            notes.push(Note {
                key,
                line: first_line + offset,
                used: text.clone(),
                other,
            });
        }
        fields.insert(key.to_owned(), text);
    }
    Ok(())
}

/// True when the value on line `offset` goes on to the next lines: the next line that is
/// neither blank nor a comment is indented.
fn continues(body: &[String], offset: usize) -> bool {
    body[offset + 1..]
        .iter()
        .find(|line| {
            let trimmed = line.trim_start_matches(BLANK);
            !trimmed.is_empty() && !trimmed.starts_with('#')
        })
        .is_some_and(|line| line.starts_with(BLANK))
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
            parse("---\ntype:\nname:\n---\n"),
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

    /// Rule 7: `name`, `description` and `pattern` are the text written on their line, as
    /// discobot's flat parser read them, where YAML would retype it (`1.10` → `1.1`, `True` →
    /// `true`, `null` → nothing) or take only part of it. What only YAML can say (block scalars,
    /// lists, values continued on the next lines, `''` escapes) stays YAML's.
    #[test]
    fn text_fields_keep_the_text_written() {
        // (front matter lines after `type: file`, the key, its value)
        let table: &[(&str, &str, &str)] = &[
            ("name: 1.10", "name", "1.10"),
            ("name: True", "name", "True"),
            ("name: null", "name", "null"),
            ("name: ~", "name", "~"),
            ("name: 0x1F", "name", "0x1F"),
            ("name: 1e3", "name", "1e3"),
            ("name: 010 # octal?", "name", "010"),
            ("name: !!str 1.10", "name", "!!str 1.10"),
            ("description: yes", "description", "yes"),
            ("description: \"a\\tb\"", "description", "a\\tb"),
            ("pattern: 1.10", "pattern", "1.10"),
            ("pattern: !*.md", "pattern", "!*.md"),
            ("pattern: '*.go', '*.ts'", "pattern", "*.go, *.ts"),
            ("pattern: \"*.go\", '*.ts' # both", "pattern", "*.go, *.ts"),
            (
                "pattern: '{a,b}.go', \"*.ts\"\nname: 1.0",
                "pattern",
                "{a,b}.go, *.ts",
            ),
            ("name: Go fmt", "name", "Go fmt"),
            ("name: \"1.10\"", "name", "1.10"),
            ("name: 'it''s'", "name", "it's"),
            (
                "description: |\n  two\n  lines",
                "description",
                "two\nlines\n",
            ),
            (
                "description: first\n  second",
                "description",
                "first second",
            ),
            ("pattern:\n  - '*.go'\n  - go.mod", "pattern", "*.go,go.mod"),
            ("pattern: ['*.go', go.mod]", "pattern", "*.go,go.mod"),
            ("name: [a, b]", "name", "a,b"),
        ];
        let mut wrong = Vec::new();
        for &(lines, key, want) in table {
            for (open, prefix) in [("---", ""), ("#---", "# ")] {
                let body: String = format!("type: file\n{lines}")
                    .lines()
                    .map(|l| format!("{prefix}{l}\n"))
                    .collect();
                let text = format!("#!/bin/sh\n{open}\n{body}{open}\n");
                let got = parse(&text).map(|f| f.get(key).cloned());
                if got != Ok(Some(want.to_owned())) {
                    wrong.push(format!("{open} {lines:?}: got {got:?}, want {want:?}"));
                }
            }
        }
        assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
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

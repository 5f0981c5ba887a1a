//! The fields that take the text written on their own line, whatever YAML makes of it: the
//! word fields (rule 6) and the text fields discobot read flat (rule 7).

use super::flat::{flat_value, text_value};
use super::yaml::YamlFields;
use super::{BLANK, Fields, FrontMatterError, Note, Other, TEXT_FIELDS, WORD_FIELDS, repeated};

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
pub(super) fn read_word_fields(
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
pub(super) fn read_text_fields(
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
    use crate::frontmatter::parse;

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
}

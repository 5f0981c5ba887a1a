//! discobot's flat reading of a front matter body: one `key: value` per line, quotes and
//! comments as its parser took them, and lists of quoted globs for `pattern` (rules 3 and 5).

use super::{BLANK, Fields, FrontMatterError, MERGE_KEY, Note, Other, TEXT_FIELDS, repeated};

/// discobot's flat `key: value` reading, for bodies that are not valid YAML.
pub(super) fn parse_flat(
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
pub(super) fn flat_value(value: &str) -> Result<String, String> {
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
pub(super) fn text_value(key: &str, value: &str) -> Result<(String, Option<String>), String> {
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

#[cfg(test)]
mod tests {
    use crate::frontmatter::parse;
    use crate::frontmatter::tests::fields;

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
}

//! Cutting converted entries out of another tool's file (`hookvisor import --write`, docs/EVENTS.md
//! §5 rule 11), everything else kept as written. The rules, one per format (the file's
//! extension says which):
//!
//! 1. **YAML** (`.yml`, `.yaml`): an entry's lines go, from its `-` line (with the comment
//!    lines right above it at its indentation, which describe it) to the last line indented
//!    deeper than the dash; blank lines after it stay. A key whose entries all went goes too,
//!    and so up the tree. An entry in flow style (`[{…}]`) has no lines of its own: the file
//!    is refused, never rewritten. Every other byte stays.
//! 2. **JSON** (`.json`): an entry's text goes with the comma and blanks between it and its
//!    neighbour; an array or object left empty goes as its member, up to a `keep` path
//!    (AutoAgent's `hooks`, whose presence hides the user's hooks), which is left `{}`. Every
//!    other byte stays.
//! 3. **TOML** (`.toml`): `toml_edit` removes the `[[…]]` table (with the comment lines above
//!    its header, which toml_edit counts as its own) or the inline array item; a table left
//!    empty goes too. Everything else keeps its formatting and comments.
//!
//! A file is [`Edited::Empty`] when nothing but comments, blank lines and, in YAML, a
//! `version` key (the hook file format's own) is left: then the caller may delete it.

#![forbid(unsafe_code)]

use std::collections::BTreeSet;
use std::path::Path;

use serde_json::Value as Json;

use super::json_lines::{Span, Step, value_spans};

/// The formats of the tools' hook files.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Format {
    /// iteratr's, agent-pipelines'.
    Yaml,
    /// AutoAgent's.
    Json,
    /// nyzhi's.
    Toml,
}

impl Format {
    /// The format a file's extension names, if any.
    pub(crate) fn of(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "yml" | "yaml" => Some(Format::Yaml),
            "json" => Some(Format::Json),
            "toml" => Some(Format::Toml),
            _ => None,
        }
    }
}

/// One entry to remove: its path in the file and the line of its first line.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry<'a> {
    /// Keys and list indexes down to the entry.
    pub(crate) path: &'a [Step],
    /// 1-based line of the entry's first line.
    pub(crate) line: usize,
}

/// What is left of the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Edited {
    /// The file's new text.
    Text(String),
    /// Nothing is left but comments and blanks (the module's last rule).
    Empty,
}

/// Why the entries cannot be cut out of the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub(crate) struct EditError {
    /// 1-based line of the entry at fault.
    pub(crate) line: usize,
    /// What is wrong and the fix.
    pub(crate) message: String,
}

/// `text` without `entries` (the module's rules); `keep` is a container path left in place,
/// emptied, when its last entry goes.
pub(crate) fn remove(
    format: Format,
    text: &str,
    entries: &[Entry<'_>],
    keep: Option<&[Step]>,
) -> Result<Edited, EditError> {
    match format {
        Format::Yaml => remove_yaml(text, entries),
        Format::Json => remove_json(text, entries, keep),
        Format::Toml => remove_toml(text, entries),
    }
}

/// One line of a YAML text, as the block structure sees it.
struct Line<'a> {
    text: &'a str,
    indent: usize,
    /// Neither blank nor only a comment.
    content: bool,
    comment: bool,
}

impl<'a> Line<'a> {
    fn new(text: &'a str) -> Line<'a> {
        let body = text.trim_start_matches(' ');
        let trimmed = body.trim();
        Line {
            text,
            indent: text.len() - body.len(),
            content: !trimmed.is_empty() && !trimmed.starts_with('#'),
            comment: trimmed.starts_with('#'),
        }
    }

    /// The text after the indentation.
    fn body(&self) -> &'a str {
        self.text[self.indent..].trim_end()
    }

    fn is_item(&self) -> bool {
        self.content && (self.body() == "-" || self.body().starts_with("- "))
    }

    /// Whether the line is `key:` alone (a comment may follow): a key whose value is the
    /// block below it.
    fn is_block_key(&self) -> bool {
        if !self.content || self.is_item() {
            return false;
        }
        let body = self.body();
        let value = match body.split_once(": ") {
            Some((_, value)) => value.trim(),
            None => match body.strip_suffix(':') {
                Some(_) => "",
                None => return false,
            },
        };
        value.is_empty() || value.starts_with('#')
    }
}

/// YAML's rule 1.
fn remove_yaml(text: &str, entries: &[Entry<'_>]) -> Result<Edited, EditError> {
    let lines: Vec<Line<'_>> = text.split_inclusive('\n').map(Line::new).collect();
    let mut gone = vec![false; lines.len()];
    let mut keys = Vec::new();
    for entry in entries {
        let refuse = |message: &str| EditError {
            line: entry.line,
            message: message.to_owned(),
        };
        let dash = dash_line(&lines, entry.line.saturating_sub(1)).ok_or_else(|| {
            refuse(
                "the entry is not a block list item ('- key: value' on lines of its own); \
                 write the list one item per line, then run again",
            )
        })?;
        let col = lines[dash].indent;
        let mut first = dash;
        while first > 0 && lines[first - 1].comment && lines[first - 1].indent == col {
            first -= 1;
        }
        let end = item_end(&lines, dash);
        gone[first..end].iter_mut().for_each(|g| *g = true);
        keys.extend(parent_key(&lines, &gone, dash));
    }
    // Keys whose entries all went: gone too, and then maybe their parents.
    while let Some(key) = keys.pop() {
        if gone[key] {
            continue;
        }
        let end = key_end(&lines, key);
        if (key + 1..end).any(|l| lines[l].content && !gone[l]) {
            continue;
        }
        // Its comments go with it; blank lines stay, as around removed entries.
        for l in key..end {
            if lines[l].comment && lines[l].indent > lines[key].indent {
                gone[l] = true;
            }
        }
        gone[key] = true;
        keys.extend(parent_key(&lines, &gone, key));
    }
    let left: String = lines
        .iter()
        .zip(&gone)
        .filter(|(_, gone)| !**gone)
        .map(|(line, _)| line.text)
        .collect();
    let empty = match serde_saphyr::from_str::<Json>(&left) {
        Ok(Json::Null) => true,
        Ok(Json::Object(map)) => map.keys().all(|k| k == "version"),
        _ => false,
    };
    Ok(if empty {
        Edited::Empty
    } else {
        Edited::Text(left)
    })
}

/// The index of the `-` line of the entry whose first line is `index`: that line, or a lone
/// `-` above it (an item whose mapping starts on the next line).
fn dash_line(lines: &[Line<'_>], index: usize) -> Option<usize> {
    let line = lines.get(index)?;
    if line.is_item() {
        return Some(index);
    }
    let above = (0..index).rev().find(|l| lines[*l].content)?;
    (lines[above].body() == "-" && lines[above].indent < line.indent).then_some(above)
}

/// The index just after the item starting at `dash`: its lines are those indented deeper,
/// blank lines between them included, trailing ones not.
fn item_end(lines: &[Line<'_>], dash: usize) -> usize {
    let col = lines[dash].indent;
    let mut end = dash + 1;
    for (l, line) in lines.iter().enumerate().skip(dash + 1) {
        let blank = !line.content && !line.comment;
        if blank {
            continue;
        }
        if line.indent <= col {
            break;
        }
        end = l + 1;
    }
    end
}

/// The index just after the block of the key at `key`: lines indented deeper, and list items
/// at its own indentation (YAML's compact sequences).
fn key_end(lines: &[Line<'_>], key: usize) -> usize {
    let col = lines[key].indent;
    let mut end = key + 1;
    for (l, line) in lines.iter().enumerate().skip(key + 1) {
        if line.content && (line.indent < col || line.indent == col && !line.is_item()) {
            break;
        }
        end = l + 1;
    }
    end
}

/// The `key:` line whose block holds the line at `index`, when it is one.
fn parent_key(lines: &[Line<'_>], gone: &[bool], index: usize) -> Option<usize> {
    let col = lines[index].indent;
    let item = lines[index].is_item();
    let parent = (0..index).rev().find(|l| {
        let line = &lines[*l];
        !gone[*l]
            && line.content
            && (line.indent < col || item && line.indent == col && !line.is_item())
    })?;
    lines[parent].is_block_key().then_some(parent)
}

/// JSON's rule 2.
fn remove_json(
    text: &str,
    entries: &[Entry<'_>],
    keep: Option<&[Step]>,
) -> Result<Edited, EditError> {
    let mut paths: Vec<(&[Step], usize)> = entries.iter().map(|e| (e.path, e.line)).collect();
    // The last index of an array first, so that the others keep theirs.
    paths.sort_by(|a, b| b.0.cmp(a.0));
    let mut text = text.to_owned();
    for (path, line) in paths {
        text = remove_json_value(&text, path, keep).ok_or_else(|| EditError {
            line,
            message: "the entry is not where it was read; run again".to_owned(),
        })?;
    }
    Ok(match serde_json::from_str::<Json>(&text) {
        Ok(Json::Object(map)) if map.is_empty() => Edited::Empty,
        _ => Edited::Text(text),
    })
}

/// `text` without the value at `path` and its member or item punctuation.
fn remove_json_value(text: &str, path: &[Step], keep: Option<&[Step]>) -> Option<String> {
    let spans = value_spans(text);
    let me = *spans.get(path)?;
    let (_, parent) = path.split_last()?;
    let mut siblings: Vec<Span> = spans
        .iter()
        .filter(|(p, _)| p.len() == path.len() && p.starts_with(parent))
        .map(|(_, s)| *s)
        .collect();
    siblings.sort_by_key(|s| s.item_start);
    let at = siblings.iter().position(|s| *s == me)?;
    let cut = match (siblings.len(), siblings.get(at + 1)) {
        (1, _) if !parent.is_empty() && Some(parent) != keep => {
            return remove_json_value(text, parent, keep);
        }
        // The container's last one: it stays, empty.
        (1, _) => {
            let container = spans.get(parent)?;
            container.start + 1..container.end - 1
        }
        (_, Some(next)) => me.item_start..next.item_start,
        (_, None) => siblings.get(at.checked_sub(1)?)?.end..me.end,
    };
    let mut text = text.to_owned();
    text.replace_range(cut, "");
    Some(text)
}

/// TOML's rule 3.
fn remove_toml(text: &str, entries: &[Entry<'_>]) -> Result<Edited, EditError> {
    use toml_edit::{DocumentMut, Item, Value};
    let mut doc: DocumentMut = text.parse().map_err(|e: toml_edit::TomlError| EditError {
        line: 1,
        message: format!("not TOML as toml_edit reads it: {}", e.message()),
    })?;
    let mut sorted: Vec<&Entry<'_>> = entries.iter().collect();
    sorted.sort_by(|a, b| b.path.cmp(a.path));
    let mut parents = BTreeSet::new();
    for entry in sorted {
        let missing = || EditError {
            line: entry.line,
            message: "the entry is not where it was read; run again".to_owned(),
        };
        let (Some(Step::Index(index)), parent) = (entry.path.last(), entry.path.split_last())
        else {
            return Err(missing());
        };
        let parent = parent.map_or(&[][..], |(_, p)| p);
        let mut item = doc.as_item_mut();
        for step in parent {
            let Step::Key(key) = step else {
                return Err(missing());
            };
            item = item.get_mut(key.as_str()).ok_or_else(missing)?;
        }
        match item {
            Item::ArrayOfTables(tables) if *index < tables.len() => {
                tables.remove(*index);
            }
            Item::Value(Value::Array(array)) if *index < array.len() => {
                // The next item takes the removed one's place, and its leading blanks.
                let prefix = array.remove(*index).decor().prefix().cloned();
                if let (Some(next), Some(prefix)) = (array.get_mut(*index), prefix) {
                    next.decor_mut().set_prefix(prefix);
                }
            }
            _ => return Err(missing()),
        }
        parents.insert(parent.to_vec());
    }
    // Containers left empty go, deepest first, then their tables if nothing else is in them.
    for parent in parents.into_iter().rev() {
        for depth in (1..=parent.len()).rev() {
            let keys: Vec<&str> = parent[..depth]
                .iter()
                .filter_map(|s| match s {
                    Step::Key(k) => Some(k.as_str()),
                    Step::Index(_) => None,
                })
                .collect();
            if keys.len() != depth {
                break;
            }
            let (last, above) = keys.split_last().unwrap_or((&"", &[]));
            let Some(table) = table_at(doc.as_table_mut(), above) else {
                break;
            };
            let empty = match table.get(last) {
                Some(Item::ArrayOfTables(t)) => t.is_empty(),
                Some(Item::Value(Value::Array(a))) => a.is_empty(),
                Some(Item::Table(t)) => t.is_empty(),
                _ => false,
            };
            if !empty {
                break;
            }
            table.remove(last);
        }
    }
    Ok(if doc.as_table().is_empty() {
        Edited::Empty
    } else {
        Edited::Text(doc.to_string())
    })
}

/// The table at `keys` under `table`, when each is a table.
fn table_at<'a>(
    mut table: &'a mut toml_edit::Table,
    keys: &[&str],
) -> Option<&'a mut toml_edit::Table> {
    for key in keys {
        table = table.get_mut(key)?.as_table_mut()?;
    }
    Some(table)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(k: &str) -> Step {
        Step::Key(k.to_owned())
    }

    fn cut(format: Format, text: &str, entries: &[(Vec<Step>, usize)]) -> Edited {
        let entries: Vec<Entry<'_>> = entries
            .iter()
            .map(|(path, line)| Entry { path, line: *line })
            .collect();
        remove(format, text, &entries, None).unwrap()
    }

    const ITERATR: &str = "version: 1\n\n# Our hooks.\nhooks:\n  session_start:\n    - command: \"go build ./...\"\n      timeout: 60\n\n  post_iteration:\n    # The tests.\n    - command: \"go test\"\n      # pipe_output ignored\n\n    - command: \"make\"\n      timeout: soon\nother: [1, 2]  # kept\n";

    #[test]
    fn yaml_entries_go_with_their_lines_and_emptied_keys() {
        let path = |t: &str, i| vec![key("hooks"), key(t), Step::Index(i)];
        let edited = cut(
            Format::Yaml,
            ITERATR,
            &[
                (path("session_start", 0), 6),
                (path("post_iteration", 0), 11),
            ],
        );
        assert_eq!(
            edited,
            Edited::Text(
                "version: 1\n\n# Our hooks.\nhooks:\n\n  post_iteration:\n\n    - command: \"make\"\n      timeout: soon\nother: [1, 2]  # kept\n"
                    .to_owned()
            )
        );
        let all = cut(
            Format::Yaml,
            ITERATR,
            &[
                (path("session_start", 0), 6),
                (path("post_iteration", 0), 11),
                (path("post_iteration", 1), 14),
            ],
        );
        assert_eq!(
            all,
            Edited::Text("version: 1\n\n# Our hooks.\n\n\nother: [1, 2]  # kept\n".to_owned())
        );
        // Compact lists, an item whose mapping starts below its dash; `version` alone is empty.
        let text = "version: 1\nhooks:\n  on_error:\n  -\n    command: x\n";
        assert_eq!(
            cut(Format::Yaml, text, &[(path("on_error", 0), 5)]),
            Edited::Empty
        );
    }

    #[test]
    fn a_yaml_flow_list_is_refused() {
        let text = "hooks:\n  on_error: [{command: x}]\n";
        let entries = [Entry { path: &[], line: 2 }];
        let err = remove(Format::Yaml, text, &entries, None).unwrap_err();
        assert_eq!(err.line, 2);
        assert!(err.message.contains("not a block list item"), "{err}");
    }

    const AUTOAGENT: &str = "{\n  \"logLevel\": \"info\",\n  \"hooks\": {\n    \"Stop\": [\n      {\"command\": \"a\"}, {\"command\": \"b\"},\n      {\"command\": \"c\"}\n    ],\n    \"PostGitCommit\": [{\"command\": \"d\"}]\n  },\n  \"maxTokens\": 100000\n}\n";

    #[test]
    fn json_entries_go_with_their_punctuation() {
        let path = |p: &str, i| vec![key("hooks"), key(p), Step::Index(i)];
        let some = cut(
            Format::Json,
            AUTOAGENT,
            &[(path("Stop", 0), 5), (path("Stop", 2), 6)],
        );
        assert_eq!(
            some,
            Edited::Text(AUTOAGENT.replace(
                "{\"command\": \"a\"}, {\"command\": \"b\"},\n      {\"command\": \"c\"}",
                "{\"command\": \"b\"}"
            ))
        );
        let all = [
            (path("Stop", 0), 5),
            (path("Stop", 1), 5),
            (path("Stop", 2), 6),
            (path("PostGitCommit", 0), 8),
        ];
        assert_eq!(
            cut(Format::Json, AUTOAGENT, &all),
            Edited::Text("{\n  \"logLevel\": \"info\",\n  \"maxTokens\": 100000\n}\n".to_owned())
        );
        let entries: Vec<Entry<'_>> = all
            .iter()
            .map(|(path, line)| Entry { path, line: *line })
            .collect();
        let kept = remove(Format::Json, AUTOAGENT, &entries, Some(&[key("hooks")])).unwrap();
        assert_eq!(
            kept,
            Edited::Text(
                "{\n  \"logLevel\": \"info\",\n  \"hooks\": {},\n  \"maxTokens\": 100000\n}\n"
                    .to_owned()
            )
        );
        let only = "{\"hooks\": {\"Stop\": [{\"command\": \"a\"}]}}";
        assert_eq!(
            cut(Format::Json, only, &[(path("Stop", 0), 1)]),
            Edited::Empty
        );
    }

    const NYZHI: &str = "# nyzhi settings\n[agent]\nmodel = \"x\"  # the model\n\n# Format on save.\n[[agent.hooks]]\nevent = \"after_edit\"\ncommand = \"fmt\"\n\n[[agent.hooks]]\nevent = \"bad\"\ncommand = \"x\"\n\n[tui]\ntheme = \"dark\"\n";

    #[test]
    fn toml_tables_go_and_the_rest_keeps_its_comments() {
        let path = |i| vec![key("agent"), key("hooks"), Step::Index(i)];
        assert_eq!(
            cut(Format::Toml, NYZHI, &[(path(0), 6)]),
            Edited::Text(NYZHI.replace(
                "\n# Format on save.\n[[agent.hooks]]\nevent = \"after_edit\"\ncommand = \"fmt\"\n",
                ""
            ))
        );
        assert_eq!(
            cut(Format::Toml, NYZHI, &[(path(0), 6), (path(1), 10)]),
            Edited::Text(
                "# nyzhi settings\n[agent]\nmodel = \"x\"  # the model\n\n[tui]\ntheme = \"dark\"\n"
                    .to_owned()
            )
        );
        let only = "[[agent.hooks]]\nevent = \"after_turn\"\ncommand = \"x\"\n";
        assert_eq!(cut(Format::Toml, only, &[(path(0), 1)]), Edited::Empty);
        let inline = "[agent]\nhooks = [{event = \"a\", command = \"x\"}, {event = \"b\", command = \"y\"}]\nmodel = \"m\"\n";
        assert_eq!(
            cut(Format::Toml, inline, &[(path(0), 2)]),
            Edited::Text(
                "[agent]\nhooks = [{event = \"b\", command = \"y\"}]\nmodel = \"m\"\n".to_owned()
            )
        );
    }
}

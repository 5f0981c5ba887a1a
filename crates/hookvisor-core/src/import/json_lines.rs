//! Where each value of a JSON text is, by its path: serde_json keeps no positions, a problem in
//! AutoAgent's `config.json` must name the line of the offending value, and `import --write`
//! cuts converted entries out of the text ([`super::edit`]).
//!
//! The text must be JSON that serde_json accepted: the scan trusts its structure and only
//! follows strings (with their escapes), containers and scalars. Values deeper than
//! [`MAX_DEPTH`] are walked but not recorded.

#![forbid(unsafe_code)]

use std::collections::HashMap;

/// The deepest path recorded: `hooks`, the event, the entry, its field.
const MAX_DEPTH: usize = 4;

/// One step of a path: an object key or an array index.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Step {
    /// A key of an object, decoded.
    Key(String),
    /// An index of an array.
    Index(usize),
}

/// Where one value is in the text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    /// The 1-based line it starts on.
    pub(crate) line: usize,
    /// The byte offset of its first byte.
    pub(crate) start: usize,
    /// The byte offset just after its last byte.
    pub(crate) end: usize,
    /// The byte offset of its member's key, for a value of an object; else `start`.
    pub(crate) item_start: usize,
}

/// The 1-based line where each value of `text` (up to [`MAX_DEPTH`]) starts, by its path; the
/// whole document is the empty path.
pub(crate) fn value_lines(text: &str) -> HashMap<Vec<Step>, usize> {
    value_spans(text)
        .into_iter()
        .map(|(path, span)| (path, span.line))
        .collect()
}

/// Where each value of `text` (up to [`MAX_DEPTH`]) is, by its path.
pub(crate) fn value_spans(text: &str) -> HashMap<Vec<Step>, Span> {
    let mut scan = Scan {
        bytes: text.as_bytes(),
        text,
        pos: 0,
        line: 1,
        path: Vec::new(),
        item_start: None,
        spans: HashMap::new(),
    };
    scan.value();
    scan.spans
}

struct Scan<'a> {
    bytes: &'a [u8],
    text: &'a str,
    pos: usize,
    line: usize,
    path: Vec<Step>,
    /// Where the key of the member whose value comes next starts.
    item_start: Option<usize>,
    spans: HashMap<Vec<Step>, Span>,
}

impl Scan<'_> {
    fn blank(&mut self) {
        while let Some(&b) = self.bytes.get(self.pos) {
            match b {
                b'\n' => self.line += 1,
                b' ' | b'\t' | b'\r' => {}
                _ => return,
            }
            self.pos += 1;
        }
    }

    fn value(&mut self) {
        self.blank();
        let (line, start) = (self.line, self.pos);
        let item_start = self.item_start.take().unwrap_or(start);
        self.scalar_or_container();
        if self.path.len() <= MAX_DEPTH {
            let end = self.pos.min(self.bytes.len());
            let span = Span {
                line,
                start,
                end,
                item_start,
            };
            self.spans.insert(self.path.clone(), span);
        }
    }

    fn scalar_or_container(&mut self) {
        match self.bytes.get(self.pos) {
            Some(b'{') => self.object(),
            Some(b'[') => self.array(),
            Some(b'"') => {
                self.string();
            }
            Some(_) => {
                // A number, true, false or null: up to the next delimiter.
                while self.bytes.get(self.pos).is_some_and(|b| {
                    !matches!(b, b',' | b'}' | b']' | b' ' | b'\t' | b'\r' | b'\n')
                }) {
                    self.pos += 1;
                }
            }
            None => {}
        }
    }

    /// A string from its opening quote; returns its raw text with the quotes.
    fn string(&mut self) -> &str {
        let start = self.pos;
        self.pos += 1;
        while let Some(&b) = self.bytes.get(self.pos) {
            self.pos += 1;
            match b {
                b'\\' => self.pos += 1,
                b'"' => break,
                _ => {}
            }
        }
        self.text.get(start..self.pos).unwrap_or_default()
    }

    fn object(&mut self) {
        self.pos += 1;
        loop {
            self.blank();
            match self.bytes.get(self.pos) {
                Some(b'"') => {}
                Some(b'}') | None => {
                    self.pos += 1;
                    return;
                }
                Some(_) => {
                    // A comma between members.
                    self.pos += 1;
                    continue;
                }
            }
            let key_start = self.pos;
            let raw = self.string().to_owned();
            let key: String = serde_json::from_str(&raw).unwrap_or_default();
            self.blank();
            self.pos += 1; // the colon
            self.item_start = Some(key_start);
            self.path.push(Step::Key(key));
            self.value();
            self.path.pop();
        }
    }

    fn array(&mut self) {
        self.pos += 1;
        let mut index = 0;
        loop {
            self.blank();
            match self.bytes.get(self.pos) {
                Some(b']') | None => {
                    self.pos += 1;
                    return;
                }
                Some(b',') => {
                    self.pos += 1;
                    continue;
                }
                Some(_) => {}
            }
            self.item_start = None;
            self.path.push(Step::Index(index));
            self.value();
            self.path.pop();
            index += 1;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_gets_the_line_it_starts_on() {
        let text = "{\n  \"a\": 1,\n  \"b\\\"c\": [\n    {\"x\": \"}\\\\\"},\n\n    [true, null]\n  ],\n  \"d\":\n    \"e\"\n}";
        let lines = value_lines(text);
        let key = |k: &str| Step::Key(k.to_owned());
        let table: [(Vec<Step>, usize); 7] = [
            (vec![], 1),
            (vec![key("a")], 2),
            (vec![key("b\"c")], 3),
            (vec![key("b\"c"), Step::Index(0)], 4),
            (vec![key("b\"c"), Step::Index(0), key("x")], 4),
            (vec![key("b\"c"), Step::Index(1), Step::Index(1)], 6),
            (vec![key("d")], 9),
        ];
        for (path, line) in table {
            assert_eq!(lines.get(&path), Some(&line), "{path:?}");
        }
    }
}

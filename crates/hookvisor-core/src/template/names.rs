//! Template names: the `${name}` reference parser and the environment variable of a name
//! (docs/EVENTS.md §4.1, §5 rule 19).

/// The environment variable that carries a name's value: `HOOKVISOR_` + the name upper-cased
/// with dots → `_` (`a.b` → `HOOKVISOR_A_B`, docs/EVENTS.md §5 rule 19).
///
/// `name` is a reference name as [`references`] returns it; any byte outside `[A-Za-z0-9_]`
/// (only `.` in a valid name) becomes `_` so the result is always a valid variable name.
pub fn env_name(name: &str) -> String {
    let mut out = String::with_capacity("HOOKVISOR_".len() + name.len());
    out.push_str("HOOKVISOR_");
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_uppercase());
        } else {
            out.push('_');
        }
    }
    out
}

/// The environment variable naming the NUL-separated file of a list value:
/// [`env_name`] + `_NUL` (docs/EVENTS.md §4.1 "Transport").
pub fn nul_env_name(name: &str) -> String {
    let mut out = env_name(name);
    out.push_str("_NUL");
    out
}

/// Every template name referenced in `text`, lower-cased, each once, in order of first use.
///
/// This is the plain reference parser with no shell lexing, for `argv:` elements and other
/// texts without a shell; a `run:` script's names come from
/// [`ShellTemplate::references`](super::ShellTemplate::references), which knows comments and
/// escapes.
pub fn references(text: &str) -> Vec<String> {
    let mut names = Vec::new();
    for piece in Pieces::new(text) {
        if let Piece::Reference(name) = piece {
            push_unique(&mut names, name);
        }
    }
    names
}

/// The names referenced in every string of a JSON value (a webhook's body, a spawn's
/// inputs), keys left out: they are literal.
pub(crate) fn json_references<'a>(
    values: impl IntoIterator<Item = &'a serde_json::Value>,
) -> Vec<String> {
    let mut names = Vec::new();
    let mut stack: Vec<&serde_json::Value> = values.into_iter().collect();
    while let Some(value) = stack.pop() {
        match value {
            serde_json::Value::String(text) => names.extend(references(text)),
            serde_json::Value::Array(items) => stack.extend(items),
            serde_json::Value::Object(map) => stack.extend(map.values()),
            _ => {}
        }
    }
    names
}

/// Adds `name` to `names` unless it is already there (order of first use is kept for
/// `check`'s messages).
pub(crate) fn push_unique(names: &mut Vec<String>, name: String) {
    if !names.contains(&name) {
        names.push(name);
    }
}

/// Parses a reference at the start of `text`, which must begin with `${`.
///
/// Returns the lower-cased name and the byte length of the whole `${…}`, or `None` when the
/// text is no valid reference. The grammar (§4.1, written once here):
/// `"${" segment {"." segment} "}"` where a segment is one or more `[A-Za-z0-9_]` and the
/// first character of the name is a letter or `_`; no blanks. Names are case-insensitive, so
/// they are lower-cased here once.
pub(crate) fn parse_reference(text: &str) -> Option<(String, usize)> {
    let body = text.strip_prefix("${")?;
    let end = body.find('}')?;
    let name = body.get(..end)?;
    if !is_valid_name(name) {
        return None;
    }
    Some((name.to_ascii_lowercase(), end + 3))
}

/// Whether `name` follows the grammar of [`parse_reference`].
pub(crate) fn is_valid_name(name: &str) -> bool {
    let first_ok = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_');
    first_ok
        && name.split('.').all(|segment| {
            !segment.is_empty()
                && segment
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '_')
        })
}

/// A piece of a plain template text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece<'a> {
    /// Text kept as it is (including any `${` that starts no valid reference).
    Literal(&'a str),
    /// A reference, by its lower-cased name.
    Reference(String),
}

/// Splits a plain text into literal runs and references.
pub struct Pieces<'a> {
    text: &'a str,
    pos: usize,
}

impl<'a> Pieces<'a> {
    /// Starts at the beginning of `text`.
    pub fn new(text: &'a str) -> Self {
        Pieces { text, pos: 0 }
    }
}

impl<'a> Iterator for Pieces<'a> {
    type Item = Piece<'a>;

    fn next(&mut self) -> Option<Piece<'a>> {
        let rest = self.text.get(self.pos..)?;
        if rest.is_empty() {
            return None;
        }
        if let Some((name, len)) = parse_reference(rest) {
            self.pos += len;
            return Some(Piece::Reference(name));
        }
        // The literal runs to the next `${` that is a reference; a `${` that is none stays
        // literal, so search past it.
        // Past the first character, which is no reference (a `${` there was tried above).
        let mut search = rest.chars().next().map_or(1, char::len_utf8);
        let literal_end = loop {
            match rest.get(search..).and_then(|r| r.find("${")) {
                Some(offset) => {
                    let at = search + offset;
                    if rest.get(at..).and_then(parse_reference).is_some() {
                        break at;
                    }
                    search = at + 2;
                }
                None => break rest.len(),
            }
        };
        let literal = rest.get(..literal_end)?;
        self.pos += literal_end;
        Some(Piece::Literal(literal))
    }
}

/// The byte range of each reference in `text`, for callers that rewrite in place.
#[cfg(test)]
fn reference_ranges(text: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut pos = 0;
    for piece in Pieces::new(text) {
        let len = match &piece {
            Piece::Literal(s) => s.len(),
            Piece::Reference(_) => {
                let len = text
                    .get(pos..)
                    .and_then(parse_reference)
                    .map_or(0, |(_, l)| l);
                out.push(pos..pos + len);
                len
            }
        };
        pos += len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_upper_case_and_replace_dots() {
        assert_eq!(env_name("file"), "HOOKVISOR_FILE");
        assert_eq!(env_name("a.b"), "HOOKVISOR_A_B");
        assert_eq!(env_name("Data.Key_2"), "HOOKVISOR_DATA_KEY_2");
        assert_eq!(nul_env_name("files"), "HOOKVISOR_FILES_NUL");
    }

    #[test]
    fn reference_grammar() {
        let table: &[(&str, Option<(&str, usize)>)] = &[
            ("${file}", Some(("file", 7))),
            ("${File}x", Some(("file", 7))),
            ("${a.b}", Some(("a.b", 6))),
            ("${data.items.0}", Some(("data.items.0", 15))),
            ("${_x}", Some(("_x", 5))),
            ("${}", None),
            ("${1}", None),
            ("${a..b}", None),
            ("${a.}", None),
            ("${.a}", None),
            ("${ a }", None),
            ("${a-b}", None),
            ("${x:-y}", None),
            ("${#x}", None),
            ("${x", None),
            ("$x", None),
            ("${é}", None),
        ];
        for (text, want) in table {
            let got = parse_reference(text);
            let want = want.map(|(n, l)| (n.to_owned(), l));
            assert_eq!(got, want, "{text}");
        }
    }

    #[test]
    fn references_are_lowercased_unique_and_ordered() {
        assert_eq!(
            references("--a=${B} ${a} ${b} ${x:-y} ${ ${a}"),
            vec!["b".to_owned(), "a".to_owned()]
        );
        assert_eq!(reference_ranges("x${a}y${b.c}"), vec![1..5, 6..12]);
        // A reference right after a character of several bytes.
        assert_eq!(references("é${a}"), vec!["a".to_owned()]);
        assert_eq!(reference_ranges("é${a}→${b}"), vec![2..6, 9..13]);
    }

    proptest::proptest! {
        /// Splitting and joining again gives the text back (names lower-cased), for any text.
        #[test]
        fn pieces_round_trip(text in "(\\$\\{[a-zA-Z0-9_.é]{0,4}\\}?|[a-zé→$\\{\\} ]){0,12}") {
            let rebuilt: String = Pieces::new(&text)
                .map(|p| match p {
                    Piece::Literal(s) => s.to_owned(),
                    Piece::Reference(n) => format!("${{{n}}}"),
                })
                .collect();
            proptest::prop_assert_eq!(rebuilt.to_lowercase(), text.to_lowercase());
            for name in references(&text) {
                proptest::prop_assert!(is_valid_name(&name));
            }
        }
    }

    #[test]
    fn pieces_keep_every_byte() {
        for text in ["", "plain", "${a}", "a${b}c${", "${x:-${a}}", "é${a}é$"] {
            let rebuilt: String = Pieces::new(text)
                .map(|p| match p {
                    Piece::Literal(s) => s.to_owned(),
                    Piece::Reference(n) => format!("${{{n}}}"),
                })
                .collect();
            assert_eq!(rebuilt.to_lowercase(), text.to_lowercase(), "{text}");
        }
    }
}

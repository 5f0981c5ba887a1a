//! The glob language of a hook's `pattern` field.
//!
//! The rules, written once here:
//!
//! 1. Paths are relative to the workspace root and use `/`.
//! 2. `*`, `?` and `[...]` never cross `/`; `**` crosses any number of directories.
//! 3. A glob without `/` matches the file name at any depth, as in `.gitignore`: `*.go`
//!    matches `main.go` and `cmd/x/main.go`.
//! 4. A glob with `/` is anchored at the workspace root (a leading `/` is allowed and ignored):
//!    `src/**/*.ts` matches `src/a/b.ts` but not `lib/a.ts`.
//! 5. `{a,b}` alternates; a comma outside braces separates globs, and the pattern is their
//!    union: `a.md, b.md` matches either file.
//! 6. Paths are matched as bytes: a name that is not UTF-8 is matched like any other (`*.txt`
//!    matches `caf\xe9.txt`).

use std::ffi::OsStr;
use std::fmt;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use globset::{GlobBuilder, GlobSet, GlobSetBuilder};

/// A compiled hook pattern: one [`GlobSet`] for the whole comma-separated list.
#[derive(Clone)]
pub struct Pattern {
    source: String,
    set: GlobSet,
}

/// Why a pattern could not be compiled.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid pattern '{glob}': {reason}")]
pub struct PatternError {
    /// The glob at fault (one element of the comma list), or the whole pattern when empty.
    pub glob: String,
    /// What globset said, or why the pattern is empty.
    pub reason: String,
}

impl Pattern {
    /// Compiles a pattern following the rules of this module.
    pub fn new(source: &str) -> Result<Pattern, PatternError> {
        let mut builder = GlobSetBuilder::new();
        let mut count = 0;
        for glob in split_top_level_commas(source) {
            let glob = glob.trim();
            if glob.is_empty() {
                continue;
            }
            let anchored = match glob.strip_prefix('/') {
                Some(rest) => rest.to_owned(),
                None if glob.contains('/') => glob.to_owned(),
                None => format!("**/{glob}"),
            };
            let compiled = GlobBuilder::new(&anchored)
                .literal_separator(true)
                .backslash_escape(true)
                .build()
                .map_err(|e| PatternError {
                    glob: glob.to_owned(),
                    reason: e.kind().to_string(),
                })?;
            builder.add(compiled);
            count += 1;
        }
        if count == 0 {
            return Err(PatternError {
                glob: source.to_owned(),
                reason: "it names no glob; write one such as '*.go' or 'src/**/*.ts'".into(),
            });
        }
        let set = builder.build().map_err(|e| PatternError {
            glob: source.to_owned(),
            reason: e.kind().to_string(),
        })?;
        Ok(Pattern {
            source: source.to_owned(),
            set,
        })
    }

    /// The pattern as written in the front matter.
    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// True when the workspace-relative path matches any glob of the list.
    pub fn is_match(&self, relative_path: impl AsRef<Path>) -> bool {
        let mut bytes = relative_path.as_ref().as_os_str().as_bytes();
        while let Some(rest) = bytes.strip_prefix(b"./") {
            bytes = rest;
        }
        self.set.is_match(Path::new(OsStr::from_bytes(bytes)))
    }
}

impl fmt::Debug for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Pattern").field(&self.source).finish()
    }
}

impl PartialEq for Pattern {
    fn eq(&self, other: &Self) -> bool {
        self.source == other.source
    }
}

/// Splits on commas that are not inside `{...}` or `[...]`, so `*.{ts,tsx}` stays whole.
fn split_top_level_commas(source: &str) -> Vec<&str> {
    let mut parts = Vec::new();
    let mut depth_brace = 0usize;
    let mut in_class = false;
    let mut escaped = false;
    let mut start = 0;
    for (i, c) in source.char_indices() {
        if escaped {
            escaped = false;
            continue;
        }
        match c {
            '\\' => escaped = true,
            '[' if !in_class => in_class = true,
            ']' if in_class => in_class = false,
            '{' if !in_class => depth_brace += 1,
            '}' if !in_class => depth_brace = depth_brace.saturating_sub(1),
            ',' if !in_class && depth_brace == 0 => {
                parts.push(&source[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    parts.push(&source[start..]);
    parts
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pattern_table() {
        // (pattern, path, expected)
        let table: &[(&str, &str, bool)] = &[
            ("*.go", "main.go", true),
            ("*.go", "cmd/x/main.go", true),
            ("*.go", "main.go.bak", false),
            ("*.go", "cmd/main.rs", false),
            ("src/**/*.ts", "src/a.ts", true),
            ("src/**/*.ts", "src/a/b/c.ts", true),
            ("src/**/*.ts", "lib/a.ts", false),
            ("src/**/*.ts", "lib/src/a.ts", false),
            ("src/*.ts", "src/a/b.ts", false),
            ("/Makefile", "Makefile", true),
            ("/Makefile", "sub/Makefile", false),
            ("Makefile", "sub/Makefile", true),
            ("*.{ts,tsx}", "web/app.tsx", true),
            ("*.{ts,tsx}", "web/app.ts", true),
            ("*.{ts,tsx}", "web/app.js", false),
            ("a.md,b.md", "b.md", true),
            ("a.md, b.md", "docs/a.md", true),
            ("a.md,b.md", "c.md", false),
            ("[ab].txt", "a.txt", true),
            ("[ab].txt", "c.txt", false),
            ("[a,b].txt", ",.txt", true),
            ("**/*.py", "x.py", true),
            ("**", "any/thing/at/all", true),
            ("*", "deep/file", true),
            ("docs/*", "docs/a/b", false),
            ("file with space.txt", "d/file with space.txt", true),
            ("*.go", "./main.go", true),
        ];
        for &(pattern, path, expected) in table {
            let compiled = Pattern::new(pattern).unwrap();
            assert_eq!(
                compiled.is_match(path),
                expected,
                "pattern {pattern:?} against {path:?}"
            );
        }
    }

    /// Rule 6: globset matches bytes, so a name that is not UTF-8 is no exception.
    #[test]
    fn names_that_are_not_utf8_match_on_their_bytes() {
        let table: &[(&str, &[u8], bool)] = &[
            ("*.txt", b"\xff.txt", true),
            ("*.txt", b"sub/caf\xe9.txt", true),
            ("*.txt", b"./d/\xff\xfe.txt", true),
            ("sub/*", b"sub/\xff", true),
            ("sub/*", b"sub/\xff/x", false),
            ("*.go", b"\xff.txt", false),
            ("?.txt", b"\xff.txt", true),
            ("**", b"\x80/\x81", true),
            // The name is not "\u{FFFD}.txt", which lossy matching would have said.
            ("\u{FFFD}.txt", b"\xff.txt", false),
        ];
        for &(pattern, path, expected) in table {
            let compiled = Pattern::new(pattern).unwrap();
            assert_eq!(
                compiled.is_match(Path::new(OsStr::from_bytes(path))),
                expected,
                "pattern {pattern:?} against {:?}",
                path.escape_ascii().to_string()
            );
        }
    }

    #[test]
    fn empty_and_invalid_patterns_are_errors() {
        assert!(Pattern::new("").is_err());
        assert!(Pattern::new(" , ").is_err());
        let err = Pattern::new("src/[a.go").unwrap_err();
        assert_eq!(err.glob, "src/[a.go");
        assert!(err.to_string().contains("invalid pattern"));
    }

    #[test]
    fn commas_inside_braces_and_classes_do_not_split() {
        assert_eq!(split_top_level_commas("*.{a,b},c"), vec!["*.{a,b}", "c"]);
        assert_eq!(split_top_level_commas("[,]x,y"), vec!["[,]x", "y"]);
        assert_eq!(split_top_level_commas(r"a\,b,c"), vec![r"a\,b", "c"]);
    }
}

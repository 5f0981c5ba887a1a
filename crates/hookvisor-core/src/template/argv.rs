//! `argv:` expansion (docs/EVENTS.md §4.1 rule 2, §5 rule 20): no shell, so a value can only ever
//! be (part of) one argument.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use super::TemplateError;
use super::names::{Piece, Pieces};

/// The value of a template name, as the caller's lookup supplies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A single value (`session`, `file`, `data.key`, …); any bytes.
    Scalar(OsString),
    /// A list (`files`, a JSON array); each item any bytes.
    List(Vec<OsString>),
}

/// Expands the placeholders of an `argv:` list into the arguments of one run.
///
/// Rules (docs/EVENTS.md §4.1 rule 2, §5 rule 20):
///
/// 1. A placeholder expands within its element and never splits it: `--msg=${x}` stays one
///    argument whatever `x` holds (blanks, quotes, `$(…)`, newlines, any bytes).
/// 2. An element that is exactly one placeholder of a [`Value::List`] becomes one argument per
///    item (none for an empty list); a list inside a longer element is joined with single
///    spaces, the same form as its `HOOKVISOR_<NAME>` variable.
/// 3. `lookup` receives the lower-cased name; `None` (an unknown name) is an error naming it,
///    never an empty argument.
/// 4. A `${` that starts no valid name (`${x:-y}`) is kept literally: there is no shell here.
pub fn expand_argv<F>(argv: &[String], mut lookup: F) -> Result<Vec<OsString>, TemplateError>
where
    F: FnMut(&str) -> Option<Value>,
{
    let mut out = Vec::with_capacity(argv.len());
    for (index, element) in argv.iter().enumerate() {
        let pieces: Vec<Piece<'_>> = Pieces::new(element).collect();
        if let [Piece::Reference(name)] = pieces.as_slice() {
            // A lone placeholder: a list becomes one argument per item (rule 2).
            match lookup(name) {
                None => return Err(unknown(name, index)),
                Some(Value::Scalar(value)) => out.push(value),
                Some(Value::List(items)) => out.extend(items),
            }
            continue;
        }
        let mut arg: Vec<u8> = Vec::with_capacity(element.len());
        for piece in pieces {
            match piece {
                Piece::Literal(text) => arg.extend_from_slice(text.as_bytes()),
                Piece::Reference(name) => match lookup(&name) {
                    None => return Err(unknown(&name, index)),
                    Some(Value::Scalar(value)) => arg.extend_from_slice(value.as_bytes()),
                    Some(Value::List(items)) => {
                        for (i, item) in items.iter().enumerate() {
                            if i > 0 {
                                arg.push(b' ');
                            }
                            arg.extend_from_slice(item.as_bytes());
                        }
                    }
                },
            }
        }
        out.push(OsString::from_vec(arg));
    }
    Ok(out)
}

/// Refuses an `argv:` list with a placeholder in an argument its program parses again as
/// code (`[sh, -c, "echo ${x}"]`): the table of [`ShellTemplate`](super::ShellTemplate)'s
/// rule 7, the same as for `run:`. Checked at load.
pub fn check_argv(argv: &[String]) -> Result<(), TemplateError> {
    let mut before: Vec<Option<&str>> = Vec::with_capacity(argv.len());
    for (index, element) in argv.iter().enumerate() {
        let mut literal = String::new();
        let mut column = 1;
        for piece in Pieces::new(element) {
            match piece {
                Piece::Literal(text) => {
                    literal.push_str(text);
                    column += text.chars().count();
                }
                Piece::Reference(name) => {
                    if let Some(program) = super::interpreter::reparsed(&before, &literal) {
                        return Err(TemplateError::ArgvInterpreter {
                            index,
                            column,
                            name,
                            program,
                        });
                    }
                    break;
                }
            }
        }
        let plain = super::references(element).is_empty();
        before.push(plain.then_some(element.as_str()));
    }
    Ok(())
}

/// The run-time error for a name the lookup does not know.
fn unknown(name: &str, index: usize) -> TemplateError {
    TemplateError::Unknown {
        name: name.to_owned(),
        index,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::process::Command;

    fn os(bytes: &[u8]) -> OsString {
        OsStr::from_bytes(bytes).to_owned()
    }

    fn lookup(name: &str) -> Option<Value> {
        match name {
            "x" => Some(Value::Scalar(os(b"a b"))),
            "files" => Some(Value::List(vec![os(b"one"), os(b"two words")])),
            "none" => Some(Value::List(vec![])),
            "empty" => Some(Value::Scalar(os(b""))),
            _ => None,
        }
    }

    fn expand(argv: &[&str]) -> Result<Vec<OsString>, TemplateError> {
        let argv: Vec<String> = argv.iter().map(|s| (*s).to_owned()).collect();
        expand_argv(&argv, lookup)
    }

    #[test]
    fn expansion_table() {
        let table: &[(&[&str], &[&[u8]])] = &[
            (&["echo", "${x}"], &[b"echo", b"a b"]),
            (&["--m=${X}!"], &[b"--m=a b!"]),
            (&["${files}"], &[b"one", b"two words"]),
            (&["a", "${none}", "b"], &[b"a", b"b"]),
            (&["-f${files}"], &[b"-fone two words"]),
            (&["${x}${x}"], &[b"a ba b"]),
            (&["é${x}"], &["éa b".as_bytes()]),
            (&["${empty}"], &[b""]),
            (&[""], &[b""]),
            (&["${x:-y}", "$x", "${"], &[b"${x:-y}", b"$x", b"${"]),
        ];
        for (argv, want) in table {
            let want: Vec<OsString> = want.iter().map(|b| os(b)).collect();
            assert_eq!(expand(argv).unwrap(), want, "{argv:?}");
        }
    }

    /// `argv:` is judged by the table of `run:` (rule 7 of `ShellTemplate`): the element and
    /// column of the refused placeholder; values after the script are safe.
    #[test]
    fn interpreters_refuse_values_in_their_code() {
        let refused: &[(&[&str], usize, usize)] = &[
            (&["sh", "-c", "echo ${x}"], 2, 6),
            (&["/bin/bash", "-lc", "${x}"], 2, 1),
            (&["env", "A=1", "sh", "-c", "x${x}"], 4, 2),
            (&["ssh", "host", "ls", "${x}"], 3, 1),
            (&["xargs", "-0", "echo", "${x}"], 3, 1),
            (&["python3", "-c", "print('${x}')"], 2, 8),
            (&["awk", "BEGIN { print \"${x}\" }"], 1, 16),
            (&["find", ".", "-exec", "sh", "-c", "${x}", ";"], 5, 1),
            (&["env", "EDITOR=${x}", "git", "commit"], 1, 8),
        ];
        for (argv, index, column) in refused {
            let argv: Vec<String> = argv.iter().map(|s| (*s).to_owned()).collect();
            match check_argv(&argv) {
                Err(TemplateError::ArgvInterpreter {
                    index: i,
                    column: c,
                    ..
                }) => assert_eq!((i, c), (*index, *column), "{argv:?}"),
                other => panic!("{argv:?}: {other:?}"),
            }
        }
        let accepted: &[&[&str]] = &[
            &["sh", "-c", "printf %s \"$1\"", "sh", "${x}"],
            &["python3", "-c", "import sys", "${x}"],
            &["prettier", "--write", "${file}"],
            &["env", "A=${x}", "sh", "-c", "echo \"$A\""],
            &["find", ".", "-name", "${x}", "-exec", "rm", "{}", ";"],
        ];
        for argv in accepted {
            let argv: Vec<String> = argv.iter().map(|s| (*s).to_owned()).collect();
            assert_eq!(check_argv(&argv), Ok(()), "{argv:?}");
        }
    }

    #[test]
    fn unknown_name_is_an_error_never_empty() {
        assert_eq!(
            expand(&["ok", "pre-${Nope}"]),
            Err(TemplateError::Unknown {
                name: "nope".into(),
                index: 1
            })
        );
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]

        /// Arbitrary bytes (no NUL: an argument cannot hold one) reach a real program as one
        /// argument, alone or inside a longer element.
        #[test]
        fn arbitrary_bytes_reach_a_real_program(
            value in proptest::collection::vec(1u8..=255, 0..40),
            embedded in proptest::bool::ANY,
        ) {
            let dir = tempfile::tempdir().unwrap();
            let element = if embedded { "<${v}>" } else { "${v}" };
            let argv: Vec<String> = ["/bin/sh", "-c", "printf %s \"$1\" > out", "sh", element]
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
            let args = expand_argv(&argv, |_| Some(Value::Scalar(os(&value)))).unwrap();
            proptest::prop_assert_eq!(args.len(), 5);
            let status = Command::new(&args[0])
                .args(&args[1..])
                .current_dir(dir.path())
                .status()
                .unwrap();
            proptest::prop_assert!(status.success());
            let got = std::fs::read(dir.path().join("out")).unwrap();
            let want = if embedded {
                [b"<".as_slice(), &value, b">"].concat()
            } else {
                value.clone()
            };
            proptest::prop_assert_eq!(got, want);
        }
    }

    /// The issue 16 must-show for `argv:`: hostile values reach a real program byte-exact and
    /// nothing in them runs.
    #[test]
    fn hostile_values_reach_a_real_program_byte_exact() {
        let dir = tempfile::tempdir().unwrap();
        for value in super::super::tests::hostile_values() {
            let argv: Vec<String> = ["/bin/sh", "-c", "printf %s \"$1\" > out", "sh", "${v}"]
                .iter()
                .map(|s| (*s).to_owned())
                .collect();
            let args = expand_argv(&argv, |name| {
                (name == "v").then(|| Value::Scalar(os(&value)))
            })
            .unwrap();
            let status = Command::new(&args[0])
                .args(&args[1..])
                .current_dir(dir.path())
                .status()
                .unwrap();
            assert!(status.success());
            let got = std::fs::read(dir.path().join("out")).unwrap();
            assert_eq!(got, value, "{:?}", String::from_utf8_lossy(&value));
            assert!(!dir.path().join("SENTINEL").exists());
        }
    }
}

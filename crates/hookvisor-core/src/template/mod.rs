//! Template variables (docs/EVENTS.md §4.1 rules 1, 2 and 5; §5 rules 19 and 20): `${name}`
//! references in `run:` scripts and `argv:` lists, made safe so that no value ever becomes
//! shell text.
//!
//! The rules, written once here and pointed to by the items below:
//!
//! 1. **Names.** A reference is `${name}` or `${a.b}`: segments of `[A-Za-z0-9_]` joined by
//!    single dots, the first character a letter or `_`, no blanks (§4.1). Names are
//!    case-insensitive and reported lower-cased. `$NAME` without braces is always the shell's,
//!    never a reference (§5 rule 20).
//! 2. **Transport.** A name's value travels in the environment variable [`env_name`] gives,
//!    `HOOKVISOR_<NAME>` upper-cased with dots → `_` (`${a.b}` → `HOOKVISOR_A_B`, §5 rule 19);
//!    a list also as a NUL-separated file named by [`nul_env_name`]'s variable (§4.1). Because
//!    dots become `_`, `${a.b}` and `${a_b}` share a variable: the caller that sets the
//!    environment decides which value wins.
//! 3. **`run:`** ([`ShellTemplate`], §4.1 rule 1): a POSIX-sh lexer rewrites each placeholder
//!    by its quoting context into a quoted expansion of its variable, which sh expands once and
//!    never re-parses, so a file named `$(rm -rf ~)` stays text. Because `${name}` is always
//!    ours, the shell's brace expansions (`${VAR:-x}`) are not available in `run:`. Contexts
//!    the lexer cannot classify are load errors with line and column; the full list is in
//!    [`ShellTemplate`]'s doc. Unlike §4.1 rule 1, a placeholder inside `'…'` is refused,
//!    not rewritten: that text is usually another program's (`sh -c '…'`, awk), which would
//!    parse the value again. So is a placeholder in any argument a known program parses again
//!    as code (`sh -c "echo ${x}"`, `python3 -c`, awk's program, `ssh`, `xargs`; the table is
//!    [`ShellTemplate`]'s rule 7).
//! 4. **`argv:`** ([`expand_argv`], §4.1 rule 2): a placeholder expands within its element,
//!    never splitting it; an element that is exactly one list placeholder becomes one element
//!    per item. [`check_argv`] refuses a placeholder by the same table as `run:` (`[sh, -c,
//!    "echo ${x}"]`), at load.
//! 5. **Unknown names** (§4.1 rule 5, §5 rule 20): the names a template uses are listed
//!    ([`ShellTemplate::references`], [`references`]) so `check` can warn at load; at run time
//!    an unknown name is an error ([`TemplateError::Unknown`]), never an empty value. For
//!    `run:` the caller enforces this before starting sh, since the script only names
//!    variables.
//!
//! ```
//! use hookvisor_core::template::{ShellTemplate, env_name};
//!
//! let t = ShellTemplate::parse("grep -n ${pattern} \"dir/${file}\" 'x'${file}").unwrap();
//! assert_eq!(
//!     t.script(),
//!     "grep -n \"$HOOKVISOR_PATTERN\" \"dir/${HOOKVISOR_FILE}\" 'x'\"$HOOKVISOR_FILE\""
//! );
//! assert_eq!(t.references(), ["pattern", "file"]);
//! // Inside '…' a placeholder is refused: that text is usually another program's.
//! assert!(ShellTemplate::parse("sh -c 'echo ${file}'").is_err());
//! assert_eq!(env_name("data.key"), "HOOKVISOR_DATA_KEY");
//! ```
//!
//! [`env_name`]: crate::template::env_name
//! [`nul_env_name`]: crate::template::nul_env_name
//! [`ShellTemplate`]: crate::template::ShellTemplate
//! [`ShellTemplate::references`]: crate::template::ShellTemplate::references
//! [`expand_argv`]: crate::template::expand_argv
//! [`check_argv`]: crate::template::check_argv
//! [`references`]: crate::template::references
//! [`TemplateError::Unknown`]: crate::template::TemplateError::Unknown

#![forbid(unsafe_code)]

use std::fmt;

mod argv;
mod interpreter;
pub mod names;
mod shell;

pub use argv::{Value, check_argv, expand_argv};
pub use interpreter::Interpreter;
pub(crate) use names::json_references;
pub use names::{env_name, nul_env_name, references};
pub use shell::ShellTemplate;

/// Why a template cannot be loaded or expanded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `run:` placeholder sits where the lexer cannot tell how sh would quote it.
    #[error(
        "line {line}, column {column}: ${{{name}}} is {context}; {fix}",
        fix = fix_for(.context, .name)
    )]
    Unclassifiable {
        /// 1-based line of the placeholder's `$`.
        line: usize,
        /// 1-based column (in characters) of the placeholder's `$`.
        column: usize,
        /// The lower-cased name.
        name: String,
        /// Where it sits.
        context: RefusedContext,
    },
    /// A `run:` `${` that starts no valid name (a shell brace expansion such as `${VAR:-x}`).
    #[error(
        "line {line}, column {column}: '${{' starts no template name; in run: ${{name}} is \
         always a template variable (letters, digits, _ and dots), so shell expansions with \
         braces are not available: write $VAR, or \\${{ for a literal"
    )]
    NotAReference {
        /// 1-based line of the `$`.
        line: usize,
        /// 1-based column (in characters) of the `$`.
        column: usize,
    },
    /// A `run:` quote, `$(`, backtick or `$((` never closes in a script with placeholders.
    #[error(
        "line {line}, column {column}: this {what} is never closed, so the quoting of the \
         placeholders after it cannot be known; close it"
    )]
    Unterminated {
        /// 1-based line where the construct opens.
        line: usize,
        /// 1-based column (in characters) where the construct opens.
        column: usize,
        /// The construct: `single quote`, `double quote`, `$(`, `backtick`, `$((`, `$'`.
        what: &'static str,
    },
    /// A `run:` script nests more `"…"` and `$(…)` than the limit at once.
    #[error(
        "line {line}, column {column}: more than {limit} quotes and $(…) are open here; \
         split the script into shell functions or variables"
    )]
    TooDeep {
        /// 1-based line of the construct past the limit.
        line: usize,
        /// 1-based column (in characters) of the construct past the limit.
        column: usize,
        /// The limit.
        limit: usize,
    },
    /// An `argv:` placeholder in an argument the program parses again as code (the table of
    /// [`ShellTemplate`]'s rule 7).
    #[error(
        "element {index}, column {column}: ${{{name}}} is {program}; {fix}",
        fix = program.fix(.name, &env_name(.name))
    )]
    ArgvInterpreter {
        /// 0-based index of the `argv:` element.
        index: usize,
        /// 1-based column (in characters) of the placeholder's `$` in the element.
        column: usize,
        /// The lower-cased name.
        name: String,
        /// The program that would parse it.
        program: Interpreter,
    },
    /// An `argv:` name the lookup does not know, at run time (§5 rule 20).
    #[error(
        "argv element {index}: ${{{name}}} is no template variable of this event; fix the \
         name or drop it (hookvisor check warns about unknown names)"
    )]
    Unknown {
        /// The lower-cased name.
        name: String,
        /// 0-based index of the `argv:` element.
        index: usize,
    },
}

/// A context where a `run:` placeholder is refused (rules in [`ShellTemplate`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RefusedContext {
    /// The body or delimiter of a here-document (`<<`).
    Heredoc,
    /// Backticks, whose text sh lexes a second time.
    Backticks,
    /// A `$(…)` whose text contains quotes.
    QuotedSubstitution,
    /// Arithmetic: `$((…))`, and bash's `((…))`, `$[…]`, `let` and array subscripts in
    /// assignments (`a[${x}]=1`), which evaluate text as an expression (in bash, a value
    /// `a[$(cmd)]` there runs cmd).
    Arithmetic,
    /// bash's `[[ … ]]`, whose arithmetic comparisons evaluate their operands as expressions.
    DoubleBracket,
    /// A command whose first word is `eval`, `trap`, `alias` or `mapfile`/`readarray`
    /// (`-C`), which run their arguments as shell text.
    Eval,
    /// An assignment to a variable whose value a shell runs (`PS4`, `BASH_ENV`, …).
    CodeVariable,
    /// A `$'…'` string.
    AnsiC,
    /// Single quotes, whose text is usually another program's (`sh -c '…'`, awk), which
    /// would parse the value again.
    SingleQuoted,
    /// A script that uses `$'…'` anywhere: dash reads it as `$` and a single-quoted string,
    /// bash as one string, so the two split the rest of the script differently.
    DollarQuoteScript,
    /// A script that defines an alias, which can turn any command into an `eval`.
    AliasScript,
    /// A variable name: the operand of `-v` (`[ -v …]`, `test`, `printf`), `unset`, `read`,
    /// `declare -n`, whose subscript bash evaluates as arithmetic.
    VariableName,
    /// An argument a program parses again as code (`sh -c`, `python3 -c`, awk's program,
    /// `ssh`, `xargs`, …; the table is in [`ShellTemplate`]'s rule 7).
    Interpreter(Interpreter),
}

impl fmt::Display for RefusedContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            RefusedContext::Heredoc => "in a here-document, where it cannot be quoted",
            RefusedContext::Backticks => "inside backticks, which sh parses twice",
            RefusedContext::QuotedSubstitution => "inside a $(…) that contains quotes",
            RefusedContext::Arithmetic => {
                "in arithmetic, which evaluates its text as an expression"
            }
            RefusedContext::DoubleBracket => {
                "in a [[ … ]] test, which bash may evaluate as arithmetic"
            }
            RefusedContext::Eval => {
                "in an eval, trap, alias or mapfile command, which runs its arguments as shell \
                 text"
            }
            RefusedContext::CodeVariable => {
                "assigned to a variable whose value a shell or a program runs as code"
            }
            RefusedContext::AnsiC => "inside a $'…' string",
            RefusedContext::SingleQuoted => {
                "inside single quotes, whose text another program usually parses again"
            }
            RefusedContext::DollarQuoteScript => {
                "in a script that uses $'…', which dash and bash split differently"
            }
            RefusedContext::AliasScript => {
                "in a script that defines an alias, which can make any command an eval"
            }
            RefusedContext::VariableName => {
                "used as a variable name, whose subscript bash evaluates as arithmetic"
            }
            RefusedContext::Interpreter(program) => return program.fmt(f),
        })
    }
}

/// The fix for a refused placeholder: put the value into a shell variable where the quoting is
/// known, and let the construct use that variable (sh expands it once, never re-parses it).
fn fix_for(context: &RefusedContext, name: &str) -> String {
    match context {
        RefusedContext::Heredoc => format!(
            "set v=${{{name}}} before it and write $v in the body (with an unquoted delimiter)"
        ),
        RefusedContext::Backticks => format!("use $(…), or set v=${{{name}}} first and use \"$v\""),
        RefusedContext::QuotedSubstitution => {
            format!("set v=${{{name}}} before the $(…) and use \"$v\" inside it")
        }
        RefusedContext::Arithmetic => format!(
            "set v=${{{name}}} first, check it is a number (case $v in ''|*[!0-9]*) exit 1;; esac) \
             and write $((v + 1))"
        ),
        RefusedContext::DoubleBracket => format!("use [ \"${{{name}}}\" … ] instead of [[ … ]]"),
        RefusedContext::Eval => format!(
            "pass the value as data instead: set v=${{{name}}} first and let the stored \
             command read \"$v\""
        ),
        RefusedContext::CodeVariable => format!("do not put ${{{name}}} into that variable"),
        RefusedContext::AnsiC => format!("close the $'…' and write ${{{name}}} outside it"),
        RefusedContext::SingleQuoted => {
            let var = env_name(name);
            format!(
                "close the quotes and pass it as an argument (sh -c '… \"$1\"' _ ${{{name}}}), \
                 or read the environment inside (\"${var}\", in awk ENVIRON[\"{var}\"])"
            )
        }
        RefusedContext::DollarQuoteScript => format!(
            "write that text without $'…' (printf '\\n' for a newline) so that ${{{name}}} \
             can be quoted"
        ),
        RefusedContext::AliasScript => {
            format!("use a shell function instead of the alias, then ${{{name}}} can be quoted")
        }
        RefusedContext::VariableName => format!(
            "set v=${{{name}}} first and check it is a plain name (case $v in ''|*[!A-Za-z0-9_]*) \
             exit 1;; esac) before using \"$v\" as one"
        ),
        RefusedContext::Interpreter(program) => program.fix(name, &env_name(name)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::process::Command;

    /// The values of issue 16's must-show: every shell metacharacter, a command substitution
    /// that would create `SENTINEL`, backticks, newlines and bytes that are no UTF-8.
    pub(super) fn hostile_values() -> Vec<Vec<u8>> {
        vec![
            b"plain".to_vec(),
            b"".to_vec(),
            b"' \" $ ; & | \\".to_vec(),
            b"$(touch SENTINEL)".to_vec(),
            b"`touch SENTINEL`".to_vec(),
            b"'$(touch SENTINEL)'\"$(touch SENTINEL)\"".to_vec(),
            b"a\nb\n\n".to_vec(),
            b"\xff\xfe caf\xe9 \x80".to_vec(),
            b"${HOOKVISOR_V} $HOME $1 %s %b \\n".to_vec(),
            b"-n".to_vec(),
            b"  leading and trailing  ".to_vec(),
            b"*".to_vec(),
            b"x'\"'\"'y; touch SENTINEL #".to_vec(),
            b"\t\r\x01\x7f".to_vec(),
        ]
    }

    /// `/bin/sh`, and `/bin/bash` where it is installed (it is `sh` on some systems).
    fn shells() -> Vec<&'static str> {
        let mut shells = vec!["/bin/sh"];
        if Path::new("/bin/bash").exists() {
            shells.push("/bin/bash");
        }
        shells
    }

    /// Runs `script` with `sh -c` in `dir` with `HOOKVISOR_V` set to `value`; the bytes the
    /// script wrote to `out`.
    fn run_sh(dir: &Path, script: &str, value: &[u8]) -> Vec<u8> {
        run_shell("/bin/sh", dir, script, value)
    }

    /// [`run_sh`] with another shell: bash is `sh` on some systems.
    fn run_shell(shell: &str, dir: &Path, script: &str, value: &[u8]) -> Vec<u8> {
        let out = dir.join("out");
        let _ = std::fs::remove_file(&out);
        let status = Command::new(shell)
            .arg("-c")
            .arg(script)
            .env("HOOKVISOR_V", OsStr::from_bytes(value))
            .current_dir(dir)
            .status()
            .unwrap();
        assert!(status.success(), "{script}");
        std::fs::read(out).unwrap()
    }

    /// The issue 16 must-show for `run:`: each hostile value arrives byte-exact through a real
    /// `/bin/sh -c` in all three quote contexts (and inside a `$(…)` without quotes), and the
    /// sentinel file never appears.
    #[test]
    fn hostile_values_arrive_byte_exact_in_every_quote_context() {
        let dir = tempfile::tempdir().unwrap();
        // (template, prefix, suffix): the script prints `prefix value suffix` into `out`.
        let cases: &[(&str, &[u8], &[u8])] = &[
            ("printf '%s' ${v} > out", b"", b""),
            ("printf '%s' x${V}y > out", b"x", b"y"),
            ("printf '%s' \"${v}\" > out", b"", b""),
            ("printf '%s' \"<${v}>\" > out", b"<", b">"),
            ("printf '%s' 'a b '${v}' c' > out", b"a b ", b" c"),
            // The fix the single-quote refusal gives: pass the value as an argument.
            ("sh -c 'printf %s \"$1\" > out' _ ${v}", b"", b""),
            ("printf '%s' \\${v}${v} > out", b"${v}", b""),
            ("x=${v}; printf '%s' \"$x\" > out", b"", b""),
            ("printf %s \"$(printf %s ${v})\" > out", b"", b""),
            (
                "case ${v} in *) printf '%s' \"${v}\" > out;; esac # ${v} `x`",
                b"",
                b"",
            ),
        ];
        for (template, prefix, suffix) in cases {
            let parsed = ShellTemplate::parse(template).unwrap();
            assert_eq!(parsed.references(), ["v"], "{template}");
            for value in hostile_values() {
                // `$(…)` strips trailing newlines; that is sh, not the template.
                let mut want = prefix.to_vec();
                want.extend_from_slice(&value);
                want.extend_from_slice(suffix);
                if template.contains("$(printf") {
                    while want.last() == Some(&b'\n') {
                        want.pop();
                    }
                }
                for shell in shells() {
                    let got = run_shell(shell, dir.path(), parsed.script(), &value);
                    assert_eq!(
                        got,
                        want,
                        "{shell}: {template} → {} with {:?}",
                        parsed.script(),
                        String::from_utf8_lossy(&value)
                    );
                    assert!(!dir.path().join("SENTINEL").exists(), "{shell}: {template}");
                }
            }
        }
    }

    /// Tokens of the constructs the lexer knows, for the fragment property test.
    const FRAGMENTS: &[&str] = &[
        "${x}", "${A.b}", "${", "}", "'", "\"", "$(", "(", ")", "`", "<<", "<<-", "<<<", "EOF",
        "'EOF'", "\n", "eval ", "case ", " in ", "esac", ";;", "#", "\\", "\\\n", "$((", "))",
        "$'", " ", ";", "\t", "x", "é", "$", "$$", "$x", "=", "2>", "|", "&",
    ];

    /// Command heads for the injection property: safe to run in a temporary directory, none
    /// creates `SENTINEL` unless a value is run as code.
    const HEADS: &[&str] = &[
        "printf %s",
        "echo",
        "v=${x}",
        "v=\"${x}\"",
        "eval",
        "let",
        "[[",
        "((",
        "a[${x}]=1",
        "test",
        "case ${x} in *) echo",
        "x=$(echo",
        "if true; then echo",
        "{ echo",
        "( echo",
        "command eval",
        "2>/dev/null eval",
        ": #",
        "cat <<EOF",
        "cat <<-'EOF'",
        "cat <<<",
        "printf %s \"$v\"",
        "printf %s $v",
        "a[\"${x}\"]=1",
        "declare -i n; n=${x}; echo",
        "local -i n=${x}",
        "a[$(echo ${x})]=1",
        "declare -i n; n=$(echo ${x}); echo",
        "trap",
        "alias a=",
        "BASH_ENV=${x} bash -c :",
        "PS4=${x}; set -x; :",
    ];

    /// Words for the injection property: a placeholder in every context the lexer knows.
    const WORDS: &[&str] = &[
        "${x}",
        "${A.b}",
        "\"${x}\"",
        "'${x}'",
        "a${x}b",
        "\"a ${x} b\"",
        "'a ${x}'\"${x}\"",
        "$(echo ${x})",
        "\"$(echo ${x})\"",
        "$(echo \"${x}\")",
        "`echo ${x}`",
        "$((${x}))",
        "$[${x}]",
        "$'${x}'",
        "\\${x}",
        "# ${x}",
        "-eq 1",
        "]]",
        "))",
        ")",
        ";;",
        "esac",
        "fi",
        "}",
        "\nEOF\n",
        "\n${x}\nEOF\n",
        "$(echo 'a' $(echo ${x}))",
        "\\\n${x}",
    ];

    /// What ends each generated command.
    const SEPARATORS: &[&str] = &["\n", "; ", " | ", " && ", " & ", ")\n", ";;\n"];

    /// Values that create `SENTINEL` in the working directory if they are ever run as code.
    const INJECTIONS: &[&str] = &[
        "$(touch SENTINEL)",
        "`touch SENTINEL`",
        ";touch SENTINEL",
        "';touch SENTINEL;'",
        "\";touch SENTINEL;\"",
        "a[$(touch SENTINEL)]",
        "x\ntouch SENTINEL\n",
    ];

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(128))]

        /// No shell-looking input makes the lexer panic, and a script without references is
        /// passed on unchanged.
        #[test]
        fn parse_never_panics(text in "[ -~\\n\\t\\\\'\"`$(){}#<>;|&é]{0,80}") {
            if let Ok(t) = ShellTemplate::parse(&text)
                && t.references().is_empty()
            {
                proptest::prop_assert_eq!(t.script(), text.as_str());
            }
        }

        /// Scripts stitched from the lexer's own tokens, so that placeholders meet every
        /// construct: no panic, and an error always points inside the text.
        #[test]
        fn parse_never_panics_on_shell_fragments(
            fragments in proptest::collection::vec(proptest::sample::select(FRAGMENTS), 0..40)
        ) {
            let text = fragments.concat();
            match ShellTemplate::parse(&text) {
                Ok(t) if t.references().is_empty() => {
                    proptest::prop_assert_eq!(t.script(), text.as_str());
                }
                Ok(_) => {}
                Err(
                    TemplateError::Unclassifiable { line, column, .. }
                    | TemplateError::NotAReference { line, column }
                    | TemplateError::Unterminated { line, column, .. }
                    | TemplateError::TooDeep { line, column, .. },
                ) => {
                    let lines: Vec<&str> = text.split('\n').collect();
                    proptest::prop_assert!(line >= 1 && line <= lines.len());
                    let width = lines.get(line - 1).map_or(0, |l| l.chars().count());
                    proptest::prop_assert!(column >= 1 && column <= width + 1);
                }
                Err(e @ (TemplateError::Unknown { .. } | TemplateError::ArgvInterpreter { .. })) => {
                    proptest::prop_assert!(false, "{e}");
                }
            }
        }

        /// Arbitrary strings, not only shell-looking ones.
        #[test]
        fn parse_never_panics_on_any_string(text in ".{0,120}") {
            let _ = ShellTemplate::parse(&text);
        }

        /// Whatever script the lexer accepts, a value never runs: generated scripts (commands
        /// whose words put placeholders in every context, accepted or refused) run under every
        /// shell with values that would create `SENTINEL` if they became shell text.
        #[test]
        fn accepted_scripts_never_run_a_value(
            commands in proptest::collection::vec(
                (
                    proptest::sample::select(HEADS),
                    proptest::collection::vec(proptest::sample::select(WORDS), 0..4),
                    proptest::sample::select(SEPARATORS),
                ),
                1..4,
            ),
            value in proptest::sample::select(INJECTIONS),
        ) {
            let mut text = String::new();
            for (head, words, separator) in &commands {
                text.push_str(head);
                for word in words {
                    text.push(' ');
                    text.push_str(word);
                }
                text.push_str(separator);
            }
            if let Ok(t) = ShellTemplate::parse(&text)
                && !t.references().is_empty()
            {
                let dir = tempfile::tempdir().unwrap();
                for shell in shells() {
                    let _ = Command::new(shell)
                        .arg("-c")
                        .arg(t.script())
                        .env("HOOKVISOR_X", value)
                        .env("HOOKVISOR_A_B", value)
                        .current_dir(dir.path())
                        .stdin(std::process::Stdio::null())
                        .stdout(std::process::Stdio::null())
                        .stderr(std::process::Stdio::null())
                        .status()
                        .unwrap();
                    proptest::prop_assert!(
                        !dir.path().join("SENTINEL").exists(),
                        "{shell}: {text:?} → {:?} with {value:?}",
                        t.script()
                    );
                }
            }
        }

        /// `printf '%s' <placeholder in a random quote context>` prints the value byte-exact
        /// for arbitrary bytes (no NUL: environment values cannot hold one).
        #[test]
        fn placeholder_in_any_quote_context_prints_the_value(
            value in proptest::collection::vec(1u8..=255, 0..40),
            context in 0usize..5,
        ) {
            let template = [
                "printf '%s' ${v} > out",
                "printf '%s' \"${v}\" > out",
                "printf '%s' ''${v}'' > out",
                "printf '%s' a${v}\"${v}\"${v} > out",
                "printf '%s' \"$(printf '%s' \"$HOOKVISOR_V\")\"${v} > out",
            ][context];
            let parsed = ShellTemplate::parse(template).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let got = run_sh(dir.path(), parsed.script(), &value);
            let want = match context {
                3 => [b"a".as_slice(), &value, &value, &value].concat(),
                4 => {
                    let mut inner = value.clone();
                    while inner.last() == Some(&b'\n') {
                        inner.pop();
                    }
                    [inner.as_slice(), &value].concat()
                }
                _ => value.clone(),
            };
            proptest::prop_assert_eq!(got, want);
            proptest::prop_assert!(!dir.path().join("SENTINEL").exists());
        }
    }
}

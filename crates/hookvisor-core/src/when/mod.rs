//! The `when:` condition language of a hook (docs/EVENTS.md §4.2, §5 rule 21).
//!
//! A condition is parsed **once**, from the literal text of the hook file, into a syntax tree;
//! variables then supply typed values to that tree and are never spliced into the text. (Systems
//! that substitute first let a value containing `|| true` rewrite the condition.)
//!
//! # Grammar (§4.2, as written)
//!
//! ```text
//! expr = or ;  or = and {"||" and} ;  and = not {"&&" not} ;  not = "!" not | cmp ;
//! cmp  = mod [("=="|"!="|"<"|"<="|">"|">=") mod] ;  mod = atom {"%" atom} ;
//! atom = int | string | "true" | "false" | "${" name {"." name} "}" | "(" expr ")" ;
//! int  = ["-"] digit {digit} (i64) ;  string = '…' | "…" (escapes \\ \' \")
//! ```
//!
//! Where the grammar leaves a choice:
//!
//! 1. Whitespace (any Unicode white space) may stand between tokens, never inside one: `- 1`,
//!    `= =` and `${ a }` are errors.
//! 2. A `name` is one or more of `A-Z a-z 0-9 _ -`. `${a.b}` is the path `["a", "b"]`: the
//!    [`Lookup`] reads `b` inside the JSON of `a`, and folds case if it wants to (§4.1 names are
//!    case-insensitive; the condition passes them as written).
//! 3. An `int` literal is any `-`? digit run within i64 (`007` is 7); one outside i64 is a parse
//!    error. A `-` belongs to the literal only when a digit follows it at once.
//! 4. `!` binds looser than a comparison, since `not = "!" not | cmp`: `!${a} == ${b}` is
//!    `!(${a} == ${b})`. A comparison does not chain: `1 < 2 < 3` is a parse error.
//! 5. `%` is left-associative and its result takes the sign of the dividend, as in C, Rust and
//!    `sh`'s `$(( ))`: `-7 % 3` is `-1`.
//!
//! # Values and types (§4.2)
//!
//! There are three types: integer (i64), boolean and string. Nothing is truthy.
//!
//! 1. A quoted literal is a string (`'5'` is a string); `true`/`false` are booleans.
//! 2. A plain-text variable ([`Value::Text`]) is an integer when its text is **canonical** i64:
//!    an optional `-`, then `0` or a digit run not starting with `0`, within i64. So `+5`, `05`,
//!    `-0`, ` 5` and `99999999999999999999` are strings: a text that would print differently
//!    from the number it parses to is not that number. Exactly `true` or `false` is a boolean
//!    (`True` is a string). Anything else is a string.
//! 3. A JSON variable ([`Value::Json`], as `${a.b}` reads): a number that fits i64 is an
//!    integer, a bool a boolean, a string of canonical i64 text (as in rule 2) an integer, any
//!    other string a string (`"true"` included): agents send numbers as strings, and the
//!    contract settles that `${n} > 9` holds for `"n": "10"` (docs/EVENTS.md §4.2). Floats (`1.0`
//!    included), numbers beyond i64, `null`, arrays and objects are type errors (§5 rule 21).
//! 4. `==` and `!=` compare numerically when both sides are integers, else they compare the text
//!    forms (`5`, `true`, the string itself): `${n} == '5'` holds when `n` is `5`.
//! 5. `<`, `<=`, `>`, `>=` and `%` need integers; `%` by zero and `i64::MIN % -1` are errors.
//! 6. `!`, `&&` and `||` need booleans and short-circuit left to right: `false && ${missing}` is
//!    false and `true || 1` is true without reading the right side.
//! 7. The whole condition must give a boolean.
//!
//! # Errors
//!
//! [`Condition::parse`] fails with a load error whose column is 1-based within the expression,
//! counted in characters; it displays as `when: expected ')' at column 17`, to which the caller
//! prefixes `file:line: `. [`Condition::eval`] fails on an unknown variable, a type mismatch,
//! `%` by zero, an overflow or a non-boolean result: the caller fails the hook with that message,
//! never treating the condition as silently true or false (§4.2: a skipped gate lets bad work
//! through and a webhook cannot be unsent); on a gate that failure blocks (`fire`, step 5).
//!
//! # Limits (§4.2)
//!
//! A text longer than 1 KiB (1024 bytes) is an error. Nesting deeper than 32 levels is an error;
//! a level is one enclosing `(` or one enclosing `!`. Chains of one operator (`a || b || c`,
//! `x % y % z`) are kept flat in the tree, so they add no depth: every recursion of the parser,
//! the evaluator and the tree's drop is bounded by 32 levels times the grammar's six rules, and no
//! input can overflow the stack.
//!
//! [`Condition::parse`]: crate::when::Condition::parse
//! [`Condition::eval`]: crate::when::Condition::eval
//! [`Lookup`]: crate::when::Lookup
//! [`Value::Text`]: crate::when::Value::Text
//! [`Value::Json`]: crate::when::Value::Json

use std::fmt;

mod eval;
mod parse;

use parse::Expr;

/// The most bytes a condition's text may have (§4.2: 1 KiB).
const MAX_LEN: usize = 1024;

/// The deepest nesting of `(` and `!` a condition may have (§4.2: 32 levels).
const MAX_DEPTH: usize = 32;

/// A parsed `when:` condition; see the [module documentation](self) for its language.
#[derive(Debug, Clone)]
pub struct Condition {
    /// The literal text, printed back by `Display`.
    text: String,
    /// The syntax tree, built once by [`Condition::parse`].
    root: Expr,
    /// The variable paths the text names, each once, in order of first appearance.
    variables: Vec<Vec<String>>,
}

/// The value of a variable, as a [`Lookup`] supplies it; typed by the module's value rules.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// Plain text (a template variable, an environment value): typed by its text.
    Text(String),
    /// A JSON value (what `${a.b}` reads in a JSON variable): typed by its JSON type.
    Json(serde_json::Value),
}

/// Supplies the values of the variables a condition names.
///
/// Any `Fn(&[&str]) -> Option<Value>` is a `Lookup`; write the closure's argument type
/// (`|path: &[&str]| …`) so that it accepts every lifetime.
pub trait Lookup {
    /// The value of `${path[0].path[1]…}`, or `None` when there is no such variable.
    fn lookup(&self, path: &[&str]) -> Option<Value>;
}

impl<F> Lookup for F
where
    F: Fn(&[&str]) -> Option<Value>,
{
    fn lookup(&self, path: &[&str]) -> Option<Value> {
        self(path)
    }
}

/// Why a condition did not parse (a load error) or did not evaluate (a hook failure).
///
/// Columns are 1-based characters within the condition's text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WhenError {
    /// The text is longer than the 1 KiB limit.
    #[error("when: the condition is {len} bytes long; the limit is {max}")]
    TooLong {
        /// The text's length in bytes.
        len: usize,
        /// The limit in bytes.
        max: usize,
    },
    /// `(` and `!` nest deeper than the 32-level limit.
    #[error("when: nesting deeper than {max} levels at column {column}")]
    TooDeep {
        /// Where the level past the limit opens.
        column: usize,
        /// The limit in levels.
        max: usize,
    },
    /// The parser needed something else here.
    #[error("when: expected {expected} at column {column}")]
    Expected {
        /// What would have been valid, such as `')'` or `a value`.
        expected: &'static str,
        /// Where it was needed.
        column: usize,
    },
    /// A bare word that is neither `true` nor `false`.
    #[error(
        "when: unexpected '{word}' at column {column}; quote a string ('{word}') or write a variable as ${{{word}}}"
    )]
    BareWord {
        /// The word as written.
        word: String,
        /// Where it starts.
        column: usize,
    },
    /// A character that starts no token.
    #[error("when: unexpected '{}' at column {column}", .found.escape_debug())]
    Unexpected {
        /// The character.
        found: char,
        /// Where it is.
        column: usize,
    },
    /// A string literal without its closing quote.
    #[error("when: the string at column {column} has no closing {quote}")]
    Unterminated {
        /// Where the string opens.
        column: usize,
        /// The quote that would close it.
        quote: char,
    },
    /// A backslash escape other than `\\`, `\'` and `\"`.
    #[error(
        "when: unknown escape '\\{}' at column {column}; only \\\\, \\' and \\\" are escapes",
        .found.escape_debug()
    )]
    BadEscape {
        /// The character after the backslash.
        found: char,
        /// Where the backslash is.
        column: usize,
    },
    /// An integer literal outside i64.
    #[error("when: the integer at column {column} is outside the 64-bit range")]
    IntOutOfRange {
        /// Where the literal starts.
        column: usize,
    },
    /// A variable the lookup does not know.
    #[error("when: unknown variable ${{{name}}} at column {column}")]
    UnknownVariable {
        /// The dotted name as written.
        name: String,
        /// Where the reference starts.
        column: usize,
    },
    /// A JSON variable whose value has no condition type (a float, `null`, an array, ...).
    #[error(
        "when: ${{{name}}} at column {column} is {found}; a condition uses only integers, booleans and strings"
    )]
    UnsupportedJson {
        /// The dotted name as written.
        name: String,
        /// What the JSON value is, such as `a JSON float`.
        found: &'static str,
        /// Where the reference starts.
        column: usize,
    },
    /// An operator given a value of the wrong type.
    #[error("when: '{operator}' at column {column} needs {expected}, got {found}")]
    Type {
        /// The operator as written.
        operator: &'static str,
        /// What it needs, such as `integers`.
        expected: &'static str,
        /// What it got, such as `a string`.
        found: &'static str,
        /// Where the operator is.
        column: usize,
    },
    /// `%` with a zero divisor.
    #[error("when: '%' at column {column} divides by zero")]
    RemainderByZero {
        /// Where the `%` is.
        column: usize,
    },
    /// `%` whose result does not fit i64 (`i64::MIN % -1`).
    #[error("when: '%' at column {column} overflows the 64-bit range")]
    Overflow {
        /// Where the `%` is.
        column: usize,
    },
    /// The whole condition gave something other than a boolean.
    #[error("when: the condition gives {found}, not a boolean; compare it, as in ${{x}} == 'yes'")]
    NotBoolean {
        /// What it gave, such as `an integer`.
        found: &'static str,
    },
}

impl Condition {
    /// Parses a condition from the literal text of a `when:` field (a load error if it fails).
    pub fn parse(text: &str) -> Result<Condition, WhenError> {
        if text.len() > MAX_LEN {
            return Err(WhenError::TooLong {
                len: text.len(),
                max: MAX_LEN,
            });
        }
        let (root, variables) = parse::parse(text)?;
        Ok(Condition {
            text: text.to_owned(),
            root,
            variables,
        })
    }

    /// Evaluates the condition with variables from `lookup` (an error fails the hook).
    pub fn eval<L: Lookup + ?Sized>(&self, lookup: &L) -> Result<bool, WhenError> {
        eval::eval(&self.root, lookup)
    }

    /// The variable paths the condition names (`${a.b}` is `["a", "b"]`), each once, in order.
    ///
    /// This includes references a short circuit may skip, so that `check` can warn about every
    /// unknown name.
    pub fn variables(&self) -> impl ExactSizeIterator<Item = &[String]> + '_ {
        self.variables.iter().map(Vec::as_slice)
    }
}

/// Prints the original text, as written in the hook file.
impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl From<&str> for Value {
    fn from(text: &str) -> Value {
        Value::Text(text.to_owned())
    }
}

impl From<String> for Value {
    fn from(text: String) -> Value {
        Value::Text(text)
    }
}

impl From<serde_json::Value> for Value {
    fn from(json: serde_json::Value) -> Value {
        Value::Json(json)
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn nothing(_: &[&str]) -> Option<Value> {
        None
    }

    #[test]
    fn display_prints_the_original_text() {
        for text in ["${a}  ==  'x'", " !( true ) ", "1 %  2 == 1 || ${b.c}"] {
            let condition = Condition::parse(text).unwrap();
            assert_eq!(condition.to_string(), text);
        }
    }

    #[test]
    fn variables_lists_every_name_once() {
        let condition =
            Condition::parse("false && ${a} == ${tool_input.command} || ${a} == ${b}").unwrap();
        let names: Vec<&[String]> = condition.variables().collect();
        assert_eq!(
            names,
            [
                &["a".to_owned()][..],
                &["tool_input".to_owned(), "command".to_owned()],
                &["b".to_owned()]
            ]
        );
        assert_eq!(Condition::parse("true").unwrap().variables().len(), 0);
    }

    /// A lookup can be a closure or a type; `Value` comes from text or JSON.
    #[test]
    fn lookups_and_values() {
        struct Stage(&'static str);
        impl Lookup for Stage {
            fn lookup(&self, path: &[&str]) -> Option<Value> {
                (path == ["stage"]).then(|| Value::from(self.0))
            }
        }
        let condition = Condition::parse("${stage} == 'plan'").unwrap();
        assert_eq!(condition.eval(&Stage("plan")), Ok(true));
        assert_eq!(condition.eval(&Stage("build")), Ok(false));
        // A trait object works too.
        let dynamic: &dyn Lookup = &Stage("plan");
        assert_eq!(condition.eval(dynamic), Ok(true));

        let data = json!({"count": 3, "ok": true});
        let by_json = |path: &[&str]| match path {
            ["data", key] => data.get(*key).cloned().map(Value::from),
            ["iteration"] => Some(Value::from(String::from("2"))),
            _ => None,
        };
        let condition = Condition::parse("${data.ok} && ${data.count} > ${iteration}").unwrap();
        assert_eq!(condition.eval(&by_json), Ok(true));
        assert_eq!(Value::from("x"), Value::Text("x".into()));
        assert_eq!(Value::from(json!(1)), Value::Json(json!(1)));
    }

    #[test]
    fn length_limit() {
        // Exactly 1 KiB parses, one byte more does not.
        let at_limit = format!("'{}'  == ''", "a".repeat(MAX_LEN - 9));
        assert_eq!(at_limit.len(), MAX_LEN);
        assert_eq!(
            Condition::parse(&at_limit).unwrap().eval(&nothing),
            Ok(false)
        );
        let over = format!("{at_limit} ");
        assert_eq!(
            Condition::parse(&over).unwrap_err().to_string(),
            "when: the condition is 1025 bytes long; the limit is 1024"
        );
        // The limit counts bytes: 600 two-byte characters are over it.
        let wide = format!("'{}' == ''", "ü".repeat(600));
        assert!(matches!(
            Condition::parse(&wide),
            Err(WhenError::TooLong { max: 1024, .. })
        ));
    }

    #[test]
    fn depth_limit() {
        let parens = |n: usize| format!("{}true{}", "(".repeat(n), ")".repeat(n));
        let nots = |n: usize| format!("{}true", "!".repeat(n));
        assert_eq!(
            Condition::parse(&parens(32)).unwrap().eval(&nothing),
            Ok(true)
        );
        assert_eq!(
            Condition::parse(&parens(33)).unwrap_err().to_string(),
            "when: nesting deeper than 32 levels at column 33"
        );
        assert_eq!(
            Condition::parse(&nots(32)).unwrap().eval(&nothing),
            Ok(true)
        );
        assert_eq!(
            Condition::parse(&nots(33)).unwrap_err().to_string(),
            "when: nesting deeper than 32 levels at column 33"
        );
        // `(` and `!` count together: 16 of each is the limit.
        let mixed = |n: usize| format!("{}true{}", "!(".repeat(n), ")".repeat(n));
        assert_eq!(
            Condition::parse(&mixed(16)).unwrap().eval(&nothing),
            Ok(true)
        );
        assert_eq!(
            Condition::parse(&mixed(17)).unwrap_err(),
            WhenError::TooDeep {
                column: 33,
                max: 32
            }
        );
        // Levels are nesting, not count: siblings do not add up.
        let siblings = vec![parens(30); 4].join(" && ");
        assert_eq!(
            Condition::parse(&siblings).unwrap().eval(&nothing),
            Ok(true)
        );
        // Unclosed parentheses hit the depth limit before the missing `)`.
        assert_eq!(
            Condition::parse(&"(".repeat(33)).unwrap_err(),
            WhenError::TooDeep {
                column: 33,
                max: 32
            }
        );
    }

    /// The deterministic cases of the brief: 33 nested parentheses and 10 000 `!`s.
    #[test]
    fn hostile_nesting_is_an_error_not_a_crash() {
        let parens = format!("{}1{}", "(".repeat(33), ")".repeat(33));
        assert_eq!(
            Condition::parse(&parens).unwrap_err(),
            WhenError::TooDeep {
                column: 33,
                max: 32
            }
        );
        let nots = format!("{}true", "!".repeat(10_000));
        assert_eq!(
            Condition::parse(&nots).unwrap_err(),
            WhenError::TooLong {
                len: 10_004,
                max: 1024
            }
        );
        // Within the length limit, the `!` chain stops at the depth limit.
        let nots = format!("{}true", "!".repeat(1_000));
        assert_eq!(
            Condition::parse(&nots).unwrap_err(),
            WhenError::TooDeep {
                column: 33,
                max: 32
            }
        );
        let parens = "(".repeat(1_024);
        assert_eq!(
            Condition::parse(&parens).unwrap_err(),
            WhenError::TooDeep {
                column: 33,
                max: 32
            }
        );
    }

    /// Long operator chains are flat: the longest that fits in 1 KiB parses and evaluates.
    #[test]
    fn long_chains_add_no_depth() {
        for (unit, joiner, tail, expected) in [
            ("true", "||", "", Ok(true)),
            ("true", "&&", "", Ok(true)),
            ("7", "%", " == 0", Ok(true)),
            ("${a}", "%", " == 0", Ok(true)),
        ] {
            let count = (MAX_LEN - tail.len() + joiner.len()) / (unit.len() + joiner.len());
            let text = format!("{}{tail}", vec![unit; count].join(joiner));
            assert!(text.len() <= MAX_LEN);
            let condition = Condition::parse(&text).unwrap();
            let one = |_: &[&str]| Some(Value::from("1"));
            assert_eq!(condition.eval(&one), expected, "{text}");
        }
    }

    /// The deepest tree the limits allow parses, evaluates and drops within a quarter of the
    /// 2 MiB a spawned thread gets by default, even in a debug build (the largest frames; it
    /// needs about 384 KiB there), so no input can exhaust the stack of a normal thread.
    #[test]
    fn the_deepest_condition_fits_a_small_stack() {
        let worst = [
            format!("{}${{a}} % 1 == 0{}", "!(".repeat(16), ")".repeat(16)),
            format!("{}1 == 1{}", "(".repeat(32), ")".repeat(32)),
            format!("{}true", "!".repeat(32)),
            format!(
                "{}(${{a}} || false) && true{}",
                "(".repeat(31),
                ")".repeat(31)
            ),
        ];
        let handle = std::thread::Builder::new()
            .stack_size(512 * 1024)
            .spawn(move || {
                let one = |_: &[&str]| Some(Value::from("1"));
                worst
                    .iter()
                    .map(|text| Condition::parse(text).map(|c| c.eval(&one)))
                    .collect::<Vec<_>>()
            })
            .unwrap();
        let results = handle.join().unwrap();
        assert!(matches!(results[0], Ok(Ok(_))), "{:?}", results[0]);
        assert_eq!(results[1], Ok(Ok(true)));
        assert_eq!(results[2], Ok(Ok(true)));
        assert!(
            matches!(results[3], Ok(Err(WhenError::Type { .. }))),
            "{:?}",
            results[3]
        );
    }

    /// The tokens of the grammar, some broken ones, and characters that stress the lexer.
    const TOKENS: &[&str] = &[
        "(",
        ")",
        "!",
        "&&",
        "||",
        "==",
        "!=",
        "<",
        "<=",
        ">",
        ">=",
        "%",
        "0",
        "1",
        "-1",
        "7",
        "007",
        "-0",
        "9223372036854775807",
        "-9223372036854775808",
        "9223372036854775808",
        "'5'",
        "\"x\"",
        "'a\\'b'",
        "''",
        "true",
        "false",
        "${a}",
        "${b.c}",
        "${n}",
        "${j.x}",
        "${j}",
        "$",
        "${",
        "}",
        "{",
        ".",
        "'",
        "\"",
        "\\",
        "-",
        "=",
        "&",
        "|",
        "ü",
        " ",
        "\t",
        "\n",
        "x",
        "1.5",
    ];

    /// Variable values that exercise every typing rule, and `None` for unknown names.
    fn any_value() -> impl Strategy<Value = Option<Value>> {
        prop_oneof![
            Just(None),
            any::<i64>().prop_map(|n| Some(Value::from(n.to_string()))),
            "[-+0-9a-z ]{0,6}".prop_map(|t| Some(Value::from(t))),
            prop::sample::select(vec!["true", "false", "-0", "0", "", "9223372036854775808"])
                .prop_map(|t| Some(Value::from(t))),
            any::<i64>().prop_map(|n| Some(Value::from(json!(n)))),
            any::<u64>().prop_map(|n| Some(Value::from(json!(n)))),
            any::<f64>().prop_map(|n| Some(Value::from(json!(n)))),
            any::<bool>().prop_map(|b| Some(Value::from(json!(b)))),
            ".{0,6}".prop_map(|s| Some(Value::from(json!(s)))),
            Just(Some(Value::from(json!(null)))),
            Just(Some(Value::from(json!([1, "a"])))),
            Just(Some(Value::from(json!({"x": 1})))),
        ]
    }

    /// Parses and evaluates `text` with `values` picked by the path's bytes; a successful parse
    /// prints back its text and evaluates the same way twice.
    fn exercise(text: &str, values: &[Option<Value>]) {
        let Ok(condition) = Condition::parse(text) else {
            return;
        };
        assert_eq!(condition.to_string(), text);
        let lookup = |path: &[&str]| {
            let key: usize = path.iter().flat_map(|p| p.bytes()).map(usize::from).sum();
            values.get(key % values.len().max(1)).cloned().flatten()
        };
        let first = condition.eval(&lookup);
        assert_eq!(first, condition.eval(&lookup));
        for path in condition.variables() {
            assert!(!path.is_empty());
        }
    }

    proptest! {
        #[test]
        fn arbitrary_text_never_panics(
            text in any::<String>(),
            values in prop::collection::vec(any_value(), 0..6),
        ) {
            exercise(&text, &values);
        }

        #[test]
        fn grammar_soup_never_panics(
            tokens in prop::collection::vec(prop::sample::select(TOKENS), 0..80),
            spaced in any::<bool>(),
            values in prop::collection::vec(any_value(), 1..6),
        ) {
            let text = tokens.join(if spaced { " " } else { "" });
            exercise(&text, &values);
        }

        #[test]
        fn long_soup_never_panics(
            tokens in prop::collection::vec(prop::sample::select(TOKENS), 200..700),
            values in prop::collection::vec(any_value(), 1..4),
        ) {
            exercise(&tokens.concat(), &values);
        }
    }
}

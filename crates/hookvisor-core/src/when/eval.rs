//! Evaluation of a parsed condition over typed values (the parent module's value rules).
//!
//! The recursion follows the tree, whose depth the parser bounded; chains are walked in loops.

use std::borrow::Cow;

use super::parse::{CmpOp, Expr};
use super::{Lookup, Value, WhenError};

/// A value during evaluation: the three types of the language.
#[derive(Debug, Clone, PartialEq)]
enum Typed<'a> {
    Int(i64),
    Bool(bool),
    /// Borrowed from a literal of the tree, or owned from a variable.
    Str(Cow<'a, str>),
}

impl Typed<'_> {
    /// The type's name as error messages say it.
    fn kind(&self) -> &'static str {
        match self {
            Typed::Int(_) => "an integer",
            Typed::Bool(_) => "a boolean",
            Typed::Str(_) => "a string",
        }
    }

    /// The text form `==` and `!=` compare when the sides are not both integers.
    fn text(&self) -> Cow<'_, str> {
        match self {
            Typed::Int(n) => Cow::Owned(n.to_string()),
            Typed::Bool(true) => Cow::Borrowed("true"),
            Typed::Bool(false) => Cow::Borrowed("false"),
            Typed::Str(s) => Cow::Borrowed(s),
        }
    }
}

/// Evaluates the whole condition, which must give a boolean.
pub(super) fn eval<L: Lookup + ?Sized>(root: &Expr, lookup: &L) -> Result<bool, WhenError> {
    match value(root, lookup)? {
        Typed::Bool(b) => Ok(b),
        other => Err(WhenError::NotBoolean {
            found: other.kind(),
        }),
    }
}

fn value<'a, L: Lookup + ?Sized>(expr: &'a Expr, lookup: &L) -> Result<Typed<'a>, WhenError> {
    Ok(match expr {
        Expr::Int(n) => Typed::Int(*n),
        Expr::Str(s) => Typed::Str(Cow::Borrowed(s)),
        Expr::Bool(b) => Typed::Bool(*b),
        Expr::Var { path, column } => variable(path, *column, lookup)?,
        Expr::Not { operand, column } => Typed::Bool(!boolean(operand, "!", *column, lookup)?),
        // Short circuit: operands are read left to right and only until the result is known,
        // so `false && ${missing}` is false and `true || 1` is true.
        Expr::Or { first, rest } => Typed::Bool(chain(first, rest, "||", true, lookup)?),
        Expr::And { first, rest } => Typed::Bool(chain(first, rest, "&&", false, lookup)?),
        Expr::Cmp {
            op,
            column,
            left,
            right,
        } => {
            let left = value(left, lookup)?;
            let right = value(right, lookup)?;
            Typed::Bool(compare(*op, *column, &left, &right)?)
        }
        Expr::Rem { first, rest } => {
            // The first operand is judged against the first `%`, the others against their own.
            let first_column = rest.first().map_or(0, |(column, _)| *column);
            let mut acc = integer(value(first, lookup)?, "%", first_column)?;
            for (column, operand) in rest {
                let column = *column;
                let divisor = integer(value(operand, lookup)?, "%", column)?;
                if divisor == 0 {
                    return Err(WhenError::RemainderByZero { column });
                }
                // With a non-zero divisor, only `i64::MIN % -1` fails.
                acc = acc
                    .checked_rem(divisor)
                    .ok_or(WhenError::Overflow { column })?;
            }
            Typed::Int(acc)
        }
    })
}

/// A `||` (`stop_at` true) or `&&` (`stop_at` false) chain: the first operand equal to
/// `stop_at` decides; each operand must be a boolean when it is read.
fn chain<L: Lookup + ?Sized>(
    first: &Expr,
    rest: &[(usize, Expr)],
    operator: &'static str,
    stop_at: bool,
    lookup: &L,
) -> Result<bool, WhenError> {
    let first_column = rest.first().map_or(0, |(column, _)| *column);
    if boolean(first, operator, first_column, lookup)? == stop_at {
        return Ok(stop_at);
    }
    for (column, operand) in rest {
        if boolean(operand, operator, *column, lookup)? == stop_at {
            return Ok(stop_at);
        }
    }
    Ok(!stop_at)
}

fn compare(op: CmpOp, column: usize, left: &Typed, right: &Typed) -> Result<bool, WhenError> {
    if let CmpOp::Eq | CmpOp::Ne = op {
        let equal = match (left, right) {
            (Typed::Int(a), Typed::Int(b)) => a == b,
            _ => left.text() == right.text(),
        };
        return Ok(equal == (op == CmpOp::Eq));
    }
    let a = integer(left.clone(), op.as_str(), column)?;
    let b = integer(right.clone(), op.as_str(), column)?;
    Ok(match op {
        CmpOp::Lt => a < b,
        CmpOp::Le => a <= b,
        CmpOp::Gt => a > b,
        CmpOp::Ge => a >= b,
        CmpOp::Eq => a == b,
        CmpOp::Ne => a != b,
    })
}

/// Evaluates `expr`, which `operator` at `column` needs to be a boolean.
fn boolean<L: Lookup + ?Sized>(
    expr: &Expr,
    operator: &'static str,
    column: usize,
    lookup: &L,
) -> Result<bool, WhenError> {
    match value(expr, lookup)? {
        Typed::Bool(b) => Ok(b),
        other => Err(WhenError::Type {
            operator,
            expected: if operator == "!" {
                "a boolean"
            } else {
                "booleans"
            },
            found: other.kind(),
            column,
        }),
    }
}

/// `value`, which `operator` at `column` needs to be an integer.
fn integer(value: Typed, operator: &'static str, column: usize) -> Result<i64, WhenError> {
    match value {
        Typed::Int(n) => Ok(n),
        other => Err(WhenError::Type {
            operator,
            expected: "integers",
            found: other.kind(),
            column,
        }),
    }
}

/// Reads `${path}` from the lookup and types it.
fn variable<L: Lookup + ?Sized>(
    path: &[String],
    column: usize,
    lookup: &L,
) -> Result<Typed<'static>, WhenError> {
    let parts: Vec<&str> = path.iter().map(String::as_str).collect();
    match lookup.lookup(&parts) {
        None => Err(WhenError::UnknownVariable {
            name: path.join("."),
            column,
        }),
        Some(Value::Text(text)) => Ok(typed_text(text)),
        Some(Value::Json(json)) => typed_json(json).map_err(|found| WhenError::UnsupportedJson {
            name: path.join("."),
            found,
            column,
        }),
    }
}

/// Types plain text: canonical i64 → integer, exactly `true`/`false` → boolean, else string.
fn typed_text(text: String) -> Typed<'static> {
    match (canonical_int(&text), text.as_str()) {
        (Some(n), _) => Typed::Int(n),
        (None, "true") => Typed::Bool(true),
        (None, "false") => Typed::Bool(false),
        (None, _) => Typed::Str(Cow::Owned(text)),
    }
}

/// The integer whose canonical text `text` is: an optional `-`, then `0` or digits not
/// starting with `0`, within i64; `-0` is not canonical (it prints as `0`).
fn canonical_int(text: &str) -> Option<i64> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let canonical = match digits.as_bytes() {
        [] => false,
        [b'0'] => digits.len() == text.len(),
        [first, ..] => (b'1'..=b'9').contains(first) && digits.bytes().all(|b| b.is_ascii_digit()),
    };
    // Out of range fails here, and the text stays a string.
    canonical.then(|| text.parse().ok()).flatten()
}

/// Types a JSON value: an i64 number, a bool or a string; anything else names what it is.
fn typed_json(json: serde_json::Value) -> Result<Typed<'static>, &'static str> {
    match json {
        serde_json::Value::Bool(b) => Ok(Typed::Bool(b)),
        // Canonical integer text is the integer, as in a plain-text variable: agents and
        // adapters send numbers as strings (docs/EVENTS.md §4.2, settled). `"true"` stays a string.
        serde_json::Value::String(s) => Ok(match canonical_int(&s) {
            Some(n) => Typed::Int(n),
            None => Typed::Str(Cow::Owned(s)),
        }),
        serde_json::Value::Number(n) => match n.as_i64() {
            Some(n) => Ok(Typed::Int(n)),
            None if n.is_f64() => Err("a JSON float"),
            None => Err("a JSON number outside the 64-bit range"),
        },
        serde_json::Value::Null => Err("a JSON null"),
        serde_json::Value::Array(_) => Err("a JSON array"),
        serde_json::Value::Object(_) => Err("a JSON object"),
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use serde_json::json;

    use super::super::{Condition, Value};
    use super::*;

    /// The variables of the tables: plain text under their name, JSON under `j`.
    fn lookup(path: &[&str]) -> Option<Value> {
        let text = |t: &str| Some(Value::Text(t.to_owned()));
        match path {
            ["n"] => text("5"),
            ["neg"] => text("-12"),
            ["zero"] => text("0"),
            ["negzero"] => text("-0"),
            ["plus"] => text("+5"),
            ["lead"] => text("05"),
            ["space"] => text(" 5"),
            ["big"] => text("99999999999999999999"),
            ["max"] => text("9223372036854775807"),
            ["min"] => text("-9223372036854775808"),
            ["t"] => text("true"),
            ["f"] => text("false"),
            ["cap"] => text("True"),
            ["s"] => text("hello"),
            ["empty"] => text(""),
            ["inj"] => text("1 || true"),
            ["quote"] => text("it's \"x\""),
            ["j", rest @ ..] => {
                let mut value = json!({
                    "n": 5, "neg": -3, "s": "5", "zero5": "05", "t": "true", "word": "hello", "b": true, "no": false,
                    "f": 1.5, "one": 1.0, "null": null, "arr": [1], "obj": {},
                    "big": 18446744073709551615u64, "nested": {"x": "deep"}
                });
                for key in rest {
                    value = value.get(*key)?.clone();
                }
                Some(Value::Json(value))
            }
            _ => None,
        }
    }

    fn run(text: &str) -> Result<bool, String> {
        let condition = match Condition::parse(text) {
            Ok(c) => c,
            Err(e) => panic!("{text:?} did not parse: {e}"),
        };
        condition
            .eval(&|path: &[&str]| lookup(path))
            .map_err(|e| e.to_string())
    }

    fn table(rows: &[(&str, bool)]) {
        for (text, expected) in rows {
            assert_eq!(run(text), Ok(*expected), "{text:?}");
        }
    }

    fn errors(rows: &[(&str, &str)]) {
        for (text, message) in rows {
            assert_eq!(run(text), Err((*message).to_owned()), "{text:?}");
        }
    }

    #[test]
    fn equality_is_numeric_for_two_integers_else_text() {
        table(&[
            ("5 == 5", true),
            ("5 == 6", false),
            ("5 != 6", true),
            ("5 != 5", false),
            ("5 == 005", true),
            ("-0 == 0", true),
            ("'a' == 'a'", true),
            ("'a' == \"a\"", true),
            ("'a' != 'A'", true),
            ("'' == ''", true),
            // Mixed types compare text forms.
            ("'5' == 5", true),
            ("5 == '05'", false),
            ("true == 'true'", true),
            ("true == true", true),
            ("true != false", true),
            ("1 == true", false),
            ("'-0' == -0", false),
            ("${n} == 5", true),
            ("${n} == '5'", true),
            ("${n} == '05'", false),
            ("${n} == 005", true),
            ("${neg} == -12", true),
            ("${zero} == 0", true),
            ("${max} == 9223372036854775807", true),
            ("${min} == -9223372036854775808", true),
            ("${s} == 'hello'", true),
            ("${s} != \"hello\"", false),
            ("${empty} == ''", true),
            ("${quote} == 'it\\'s \"x\"'", true),
            ("${quote} == \"it's \\\"x\\\"\"", true),
            // A value is data, never condition text.
            ("${inj} == '1 || true'", true),
            ("${inj} == 1", false),
            ("${n} == ${j.n}", true),
            ("${j.s} == ${j.n}", true),
            ("${j.nested.x} == 'deep'", true),
        ]);
    }

    #[test]
    fn plain_text_is_typed_canonically() {
        table(&[
            // Canonical integers are integers: ordering works.
            ("${n} > 4", true),
            ("${neg} < -11", true),
            ("${zero} <= 0", true),
            ("${min} < ${max}", true),
            ("${n} % 2 == 1", true),
            // `true`/`false` are booleans.
            ("${t}", true),
            ("!${f}", true),
            ("${t} && !${f}", true),
            // Non-canonical numbers are strings, compared as text.
            ("${plus} == 5", false),
            ("${plus} == '+5'", true),
            ("${lead} == 5", false),
            ("${lead} == '05'", true),
            ("${negzero} == 0", false),
            ("${negzero} == '-0'", true),
            ("${space} == 5", false),
            ("${big} == '99999999999999999999'", true),
            ("${cap} == true", false),
            ("${cap} == 'True'", true),
        ]);
        errors(&[
            (
                "${plus} > 1",
                "when: '>' at column 9 needs integers, got a string",
            ),
            (
                "${lead} > 1",
                "when: '>' at column 9 needs integers, got a string",
            ),
            (
                "${negzero} < 1",
                "when: '<' at column 12 needs integers, got a string",
            ),
            (
                "${space} > 1",
                "when: '>' at column 10 needs integers, got a string",
            ),
            (
                "${big} > 1",
                "when: '>' at column 8 needs integers, got a string",
            ),
            (
                "${cap} && true",
                "when: '&&' at column 8 needs booleans, got a string",
            ),
            (
                "${s}",
                "when: the condition gives a string, not a boolean; compare it, as in ${x} == 'yes'",
            ),
        ]);
    }

    #[test]
    fn canonical_int_rule() {
        for (text, expected) in [
            ("0", Some(0)),
            ("7", Some(7)),
            ("-7", Some(-7)),
            ("10", Some(10)),
            ("9223372036854775807", Some(i64::MAX)),
            ("-9223372036854775808", Some(i64::MIN)),
            ("9223372036854775808", None),
            ("-9223372036854775809", None),
            ("-0", None),
            ("00", None),
            ("01", None),
            ("-01", None),
            ("+1", None),
            ("-", None),
            ("", None),
            ("--1", None),
            (" 1", None),
            ("1 ", None),
            ("1_000", None),
            ("1e3", None),
            ("٣", None),
        ] {
            assert_eq!(canonical_int(text), expected, "{text:?}");
        }
    }

    #[test]
    fn json_values_are_typed_by_json() {
        table(&[
            ("${j.n} == 5", true),
            ("${j.n} > 4", true),
            ("${j.neg} % 2 == -1", true),
            ("${j.b}", true),
            ("!${j.no}", true),
            ("${j.b} == 'true'", true),
            // A JSON string of canonical integer text is that integer; any other stays a
            // string, even when it reads as a boolean.
            ("${j.s} == 5", true),
            ("${j.s} == '5'", true),
            ("${j.s} < 6", true),
            ("${j.s} % 2 == 1", true),
            ("${j.zero5} == '05'", true),
            ("${j.t} == 'true'", true),
            ("${j.word} == 'hello'", true),
        ]);
        errors(&[
            (
                "${j.zero5} < 6",
                "when: '<' at column 12 needs integers, got a string",
            ),
            (
                "${j.t} && true",
                "when: '&&' at column 8 needs booleans, got a string",
            ),
            (
                "${j.f} == 1",
                "when: ${j.f} at column 1 is a JSON float; a condition uses only integers, booleans and strings",
            ),
            (
                "${j.one} == 1",
                "when: ${j.one} at column 1 is a JSON float; a condition uses only integers, booleans and strings",
            ),
            (
                "1 == ${j.big}",
                "when: ${j.big} at column 6 is a JSON number outside the 64-bit range; a condition uses only integers, booleans and strings",
            ),
            (
                "${j.null} == ''",
                "when: ${j.null} at column 1 is a JSON null; a condition uses only integers, booleans and strings",
            ),
            (
                "${j.arr} != 1",
                "when: ${j.arr} at column 1 is a JSON array; a condition uses only integers, booleans and strings",
            ),
            (
                "${j.obj} != 1",
                "when: ${j.obj} at column 1 is a JSON object; a condition uses only integers, booleans and strings",
            ),
            (
                "${j}",
                "when: ${j} at column 1 is a JSON object; a condition uses only integers, booleans and strings",
            ),
            (
                "${j.nope} == 1",
                "when: unknown variable ${j.nope} at column 1",
            ),
        ]);
    }

    #[test]
    fn ordering_operators() {
        table(&[
            ("1 < 2", true),
            ("2 < 2", false),
            ("2 <= 2", true),
            ("3 <= 2", false),
            ("3 > 2", true),
            ("2 > 2", false),
            ("2 >= 2", true),
            ("1 >= 2", false),
            ("-3 < -2", true),
            ("-9223372036854775808 < 9223372036854775807", true),
        ]);
        errors(&[
            (
                "'a' < 'b'",
                "when: '<' at column 5 needs integers, got a string",
            ),
            (
                "1 <= true",
                "when: '<=' at column 3 needs integers, got a boolean",
            ),
            (
                "true > 1",
                "when: '>' at column 6 needs integers, got a boolean",
            ),
            (
                "1 >= '1'",
                "when: '>=' at column 3 needs integers, got a string",
            ),
        ]);
    }

    #[test]
    fn remainder() {
        table(&[
            ("7 % 3 == 1", true),
            ("-7 % 3 == -1", true),
            ("7 % -3 == 1", true),
            ("100 % 7 % 3 == 2", true),
            ("100 % (7 % 3) == 0", true),
            ("-9223372036854775808 % 1 == 0", true),
            ("9223372036854775807 % -1 == 0", true),
            ("${min} % 2 == 0", true),
        ]);
        errors(&[
            ("1 % 0 == 0", "when: '%' at column 3 divides by zero"),
            ("1 % ${zero} == 0", "when: '%' at column 3 divides by zero"),
            ("9 % 2 % 0 == 0", "when: '%' at column 7 divides by zero"),
            (
                "-9223372036854775808 % -1 == 0",
                "when: '%' at column 22 overflows the 64-bit range",
            ),
            (
                "${min} % -1 == 0",
                "when: '%' at column 8 overflows the 64-bit range",
            ),
            (
                "'7' % 2 == 1",
                "when: '%' at column 5 needs integers, got a string",
            ),
            (
                "7 % true == 1",
                "when: '%' at column 3 needs integers, got a boolean",
            ),
            (
                "7 % 2",
                "when: the condition gives an integer, not a boolean; compare it, as in ${x} == 'yes'",
            ),
        ]);
    }

    #[test]
    fn boolean_operators() {
        table(&[
            ("true", true),
            ("false", false),
            ("!true", false),
            ("!false", true),
            ("!!true", true),
            ("true && true", true),
            ("true && false", false),
            ("false && true", false),
            ("false && false", false),
            ("true || true", true),
            ("true || false", true),
            ("false || true", true),
            ("false || false", false),
            ("true && true && false", false),
            ("false || false || true", true),
            // `&&` binds tighter than `||`.
            ("true || true && false", true),
            ("(true || true) && false", false),
            ("false && true || true", true),
            ("false && (true || true)", false),
            // `!` binds looser than a comparison: `!${n} == 5` is `!(${n} == 5)`.
            ("!${n} == 5", false),
            ("!${n} == 6", true),
            ("!1 == 2", true),
            ("!'a' == 'a'", false),
            ("!(1 < 2) || 3 % 2 == 1", true),
            // Parentheses around the operand alone change nothing: `!((${n}) == 5)`.
            ("!(${n}) == 5", false),
        ]);
        errors(&[
            (
                "!1",
                "when: '!' at column 1 needs a boolean, got an integer",
            ),
            (
                "!!'x'",
                "when: '!' at column 2 needs a boolean, got a string",
            ),
            // Only parentheses around the `!` make it apply to the integer alone.
            (
                "(!${n}) == 5",
                "when: '!' at column 2 needs a boolean, got an integer",
            ),
            (
                "1 && true",
                "when: '&&' at column 3 needs booleans, got an integer",
            ),
            (
                "true && 'x'",
                "when: '&&' at column 6 needs booleans, got a string",
            ),
            (
                "true && true && 0",
                "when: '&&' at column 14 needs booleans, got an integer",
            ),
            (
                "'' || true",
                "when: '||' at column 4 needs booleans, got a string",
            ),
            (
                "false || 0",
                "when: '||' at column 7 needs booleans, got an integer",
            ),
            (
                "${t} && ${n}",
                "when: '&&' at column 6 needs booleans, got an integer",
            ),
        ]);
    }

    #[test]
    fn short_circuit_reads_only_what_decides() {
        table(&[
            ("false && ${missing}", false),
            ("true || ${missing}", true),
            ("false && 1", false),
            ("true || 'x'", true),
            ("false && ${j.null}", false),
            ("true || ${j.f}", true),
            ("false && 1 % 0 == 0", false),
            ("true || ${min} % -1 == 0", true),
            ("!true && ${missing}", false),
            ("false || false || true || ${missing}", true),
            ("(false && ${missing}) || true", true),
        ]);
        errors(&[
            (
                "false || ${missing}",
                "when: unknown variable ${missing} at column 10",
            ),
            (
                "true && ${missing}",
                "when: unknown variable ${missing} at column 9",
            ),
            (
                "true && ${j.null}",
                "when: ${j.null} at column 9 is a JSON null; a condition uses only integers, booleans and strings",
            ),
        ]);
        // The lookup sees exactly the reads, in order.
        let seen = RefCell::new(Vec::new());
        let recording = |path: &[&str]| {
            seen.borrow_mut().push(path.join("."));
            lookup(path)
        };
        let c = Condition::parse("${f} && ${a} || ${t} || ${b} || ${c.d}").unwrap();
        assert_eq!(c.eval(&recording), Ok(true));
        assert_eq!(*seen.borrow(), ["f", "t"]);
        // Comparison reads both sides, left first.
        seen.borrow_mut().clear();
        let c = Condition::parse("${n} == ${neg}").unwrap();
        assert_eq!(c.eval(&recording), Ok(false));
        assert_eq!(*seen.borrow(), ["n", "neg"]);
    }

    #[test]
    fn unknown_variables_fail() {
        errors(&[
            ("${nope} == 1", "when: unknown variable ${nope} at column 1"),
            (
                "1 == ${a.b.c}",
                "when: unknown variable ${a.b.c} at column 6",
            ),
            ("!${x}", "when: unknown variable ${x} at column 2"),
        ]);
    }

    #[test]
    fn the_result_must_be_boolean() {
        let message = |found: &str| {
            format!(
                "when: the condition gives {found}, not a boolean; compare it, as in ${{x}} == 'yes'"
            )
        };
        assert_eq!(run("1"), Err(message("an integer")));
        assert_eq!(run("${n}"), Err(message("an integer")));
        assert_eq!(run("'true'"), Err(message("a string")));
        assert_eq!(run("${j.word}"), Err(message("a string")));
        assert_eq!(run("(${n} % 2)"), Err(message("an integer")));
    }
}

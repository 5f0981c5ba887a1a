//! Lexer and recursive-descent parser of the `when:` grammar (see the parent module's rules).
//!
//! The lexer hands out one token at a time, so errors come in text order: the first problem
//! from the left is the one reported. Columns are 1-based character positions.

use super::{MAX_DEPTH, WhenError};

/// A node of the syntax tree. Operator chains are flat (`first` then `(column, operand)` pairs,
/// the column being the operator's), so a long chain adds no depth to the tree.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Expr {
    /// An integer literal.
    Int(i64),
    /// A quoted string literal, escapes resolved.
    Str(String),
    /// `true` or `false`.
    Bool(bool),
    /// `${a.b}`: the path and the column of its `$`.
    Var { path: Vec<String>, column: usize },
    /// `!operand`, with the column of the `!`.
    Not { operand: Box<Expr>, column: usize },
    /// `first || rest…`.
    Or {
        first: Box<Expr>,
        rest: Vec<(usize, Expr)>,
    },
    /// `first && rest…`.
    And {
        first: Box<Expr>,
        rest: Vec<(usize, Expr)>,
    },
    /// `left op right`, with the column of the operator.
    Cmp {
        op: CmpOp,
        column: usize,
        left: Box<Expr>,
        right: Box<Expr>,
    },
    /// `first % rest…`, left-associative.
    Rem {
        first: Box<Expr>,
        rest: Vec<(usize, Expr)>,
    },
}

/// A comparison operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum CmpOp {
    Eq,
    Ne,
    Lt,
    Le,
    Gt,
    Ge,
}

impl CmpOp {
    /// The operator as written, for error messages.
    pub(super) fn as_str(self) -> &'static str {
        match self {
            CmpOp::Eq => "==",
            CmpOp::Ne => "!=",
            CmpOp::Lt => "<",
            CmpOp::Le => "<=",
            CmpOp::Gt => ">",
            CmpOp::Ge => ">=",
        }
    }
}

/// A token of the lexer.
#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Int(i64),
    Str(String),
    Bool(bool),
    Var(Vec<String>),
    LParen,
    RParen,
    Not,
    And,
    Or,
    Cmp(CmpOp),
    Percent,
    End,
}

/// Parses `text` (already checked against the length limit) into a tree and the variable paths
/// it names.
pub(super) fn parse(text: &str) -> Result<(Expr, Vec<Vec<String>>), WhenError> {
    let mut parser = Parser {
        lexer: Lexer {
            chars: text.chars().collect(),
            pos: 0,
        },
        tok: Tok::End,
        column: 1,
        depth: 0,
        variables: Vec::new(),
    };
    parser.advance()?;
    let root = parser.parse_or()?;
    if parser.tok != Tok::End {
        return Err(WhenError::Expected {
            expected: "an operator or the end",
            column: parser.column,
        });
    }
    Ok((root, parser.variables))
}

/// Characters and the position of the next one (its column is `pos + 1`).
struct Lexer {
    chars: Vec<char>,
    pos: usize,
}

impl Lexer {
    fn peek(&self) -> Option<char> {
        self.chars.get(self.pos).copied()
    }

    fn peek_second(&self) -> Option<char> {
        self.chars.get(self.pos + 1).copied()
    }

    /// Skips white space, then returns the next token and the column where it starts.
    fn next_token(&mut self) -> Result<(Tok, usize), WhenError> {
        while self.peek().is_some_and(char::is_whitespace) {
            self.pos += 1;
        }
        let column = self.pos + 1;
        let Some(c) = self.peek() else {
            return Ok((Tok::End, column));
        };
        let second = self.peek_second();
        // Two-character operators first; a lone `=`, `&` or `|` is a typo of the doubled one.
        let (tok, len) = match (c, second) {
            ('(', _) => (Tok::LParen, 1),
            (')', _) => (Tok::RParen, 1),
            ('%', _) => (Tok::Percent, 1),
            ('!', Some('=')) => (Tok::Cmp(CmpOp::Ne), 2),
            ('!', _) => (Tok::Not, 1),
            ('=', Some('=')) => (Tok::Cmp(CmpOp::Eq), 2),
            ('<', Some('=')) => (Tok::Cmp(CmpOp::Le), 2),
            ('<', _) => (Tok::Cmp(CmpOp::Lt), 1),
            ('>', Some('=')) => (Tok::Cmp(CmpOp::Ge), 2),
            ('>', _) => (Tok::Cmp(CmpOp::Gt), 1),
            ('&', Some('&')) => (Tok::And, 2),
            ('|', Some('|')) => (Tok::Or, 2),
            ('=', _) => return Err(expected("'=='", column)),
            ('&', _) => return Err(expected("'&&'", column)),
            ('|', _) => return Err(expected("'||'", column)),
            ('\'' | '"', _) => return self.string(c, column),
            ('$', _) => return self.variable(column),
            ('-', _) | ('0'..='9', _) => return self.int(column),
            (c, _) if c.is_ascii_alphabetic() || c == '_' => return self.word(column),
            (found, _) => return Err(WhenError::Unexpected { found, column }),
        };
        self.pos += len;
        Ok((tok, column))
    }

    /// `["-"] digit {digit}`, within i64.
    fn int(&mut self, column: usize) -> Result<(Tok, usize), WhenError> {
        let mut literal = String::new();
        if self.peek() == Some('-') {
            literal.push('-');
            self.pos += 1;
        }
        if !self.peek().is_some_and(|c| c.is_ascii_digit()) {
            return Err(expected("a digit", self.pos + 1));
        }
        while let Some(d) = self.peek().filter(char::is_ascii_digit) {
            literal.push(d);
            self.pos += 1;
        }
        // The sign is parsed with the digits, so `-9223372036854775808` fits.
        let value = literal
            .parse::<i64>()
            .map_err(|_| WhenError::IntOutOfRange { column })?;
        Ok((Tok::Int(value), column))
    }

    /// `'…'` or `"…"`; inside either, `\\`, `\'` and `\"` are the only escapes.
    fn string(&mut self, quote: char, column: usize) -> Result<(Tok, usize), WhenError> {
        self.pos += 1;
        let mut value = String::new();
        loop {
            match self.peek() {
                None => return Err(WhenError::Unterminated { column, quote }),
                Some(c) if c == quote => {
                    self.pos += 1;
                    return Ok((Tok::Str(value), column));
                }
                Some('\\') => {
                    let escape_column = self.pos + 1;
                    match self.peek_second() {
                        Some(e @ ('\\' | '\'' | '"')) => value.push(e),
                        Some(found) => {
                            return Err(WhenError::BadEscape {
                                found,
                                column: escape_column,
                            });
                        }
                        None => return Err(WhenError::Unterminated { column, quote }),
                    }
                    self.pos += 2;
                }
                Some(c) => {
                    value.push(c);
                    self.pos += 1;
                }
            }
        }
    }

    /// `"${" name {"." name} "}"`, no white space inside.
    fn variable(&mut self, column: usize) -> Result<(Tok, usize), WhenError> {
        self.pos += 1;
        if self.peek() != Some('{') {
            return Err(expected("'{' after '$'", self.pos + 1));
        }
        self.pos += 1;
        let mut path = Vec::new();
        loop {
            let mut name = String::new();
            while let Some(c) = self.peek().filter(|&c| is_name_char(c)) {
                name.push(c);
                self.pos += 1;
            }
            if name.is_empty() {
                return Err(expected("a variable name", self.pos + 1));
            }
            path.push(name);
            match self.peek() {
                Some('.') => self.pos += 1,
                Some('}') => {
                    self.pos += 1;
                    return Ok((Tok::Var(path), column));
                }
                _ => return Err(expected("'}'", self.pos + 1)),
            }
        }
    }

    /// A bare word: `true`, `false`, or an error that says how to write a string or variable.
    fn word(&mut self, column: usize) -> Result<(Tok, usize), WhenError> {
        let mut word = String::new();
        while let Some(c) = self
            .peek()
            .filter(|&c| c.is_ascii_alphanumeric() || c == '_')
        {
            word.push(c);
            self.pos += 1;
        }
        match word.as_str() {
            "true" => Ok((Tok::Bool(true), column)),
            "false" => Ok((Tok::Bool(false), column)),
            _ => Err(WhenError::BareWord { word, column }),
        }
    }
}

/// A character of a variable name (the parent module's rule 2).
fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '-'
}

fn expected(expected: &'static str, column: usize) -> WhenError {
    WhenError::Expected { expected, column }
}

/// The parser: one token of lookahead (`tok` at `column`) and the current nesting depth.
struct Parser {
    lexer: Lexer,
    tok: Tok,
    column: usize,
    depth: usize,
    variables: Vec<Vec<String>>,
}

impl Parser {
    /// Moves to the next token, returning the one that was current.
    fn advance(&mut self) -> Result<Tok, WhenError> {
        let (tok, column) = self.lexer.next_token()?;
        self.column = column;
        Ok(std::mem::replace(&mut self.tok, tok))
    }

    /// Opens a nesting level at `column`; every recursion of the parser passes through here or
    /// through a fixed number of grammar rules, which is what bounds the stack.
    fn enter(&mut self, column: usize) -> Result<(), WhenError> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(WhenError::TooDeep {
                column,
                max: MAX_DEPTH,
            });
        }
        Ok(())
    }

    fn leave(&mut self) {
        self.depth -= 1;
    }

    /// `or = and {"||" and}`
    fn parse_or(&mut self) -> Result<Expr, WhenError> {
        let first = self.parse_and()?;
        let mut rest = Vec::new();
        while self.tok == Tok::Or {
            let column = self.column;
            self.advance()?;
            rest.push((column, self.parse_and()?));
        }
        Ok(if rest.is_empty() {
            first
        } else {
            Expr::Or {
                first: Box::new(first),
                rest,
            }
        })
    }

    /// `and = not {"&&" not}`
    fn parse_and(&mut self) -> Result<Expr, WhenError> {
        let first = self.parse_not()?;
        let mut rest = Vec::new();
        while self.tok == Tok::And {
            let column = self.column;
            self.advance()?;
            rest.push((column, self.parse_not()?));
        }
        Ok(if rest.is_empty() {
            first
        } else {
            Expr::And {
                first: Box::new(first),
                rest,
            }
        })
    }

    /// `not = "!" not | cmp`
    fn parse_not(&mut self) -> Result<Expr, WhenError> {
        if self.tok != Tok::Not {
            return self.parse_cmp();
        }
        let column = self.column;
        self.enter(column)?;
        self.advance()?;
        let operand = self.parse_not()?;
        self.leave();
        Ok(Expr::Not {
            operand: Box::new(operand),
            column,
        })
    }

    /// `cmp = mod [("=="|"!="|"<"|"<="|">"|">=") mod]`
    fn parse_cmp(&mut self) -> Result<Expr, WhenError> {
        let left = self.parse_rem()?;
        let Tok::Cmp(op) = self.tok else {
            return Ok(left);
        };
        let column = self.column;
        self.advance()?;
        let right = self.parse_rem()?;
        Ok(Expr::Cmp {
            op,
            column,
            left: Box::new(left),
            right: Box::new(right),
        })
    }

    /// `mod = atom {"%" atom}`
    fn parse_rem(&mut self) -> Result<Expr, WhenError> {
        let first = self.parse_atom()?;
        let mut rest = Vec::new();
        while self.tok == Tok::Percent {
            let column = self.column;
            self.advance()?;
            rest.push((column, self.parse_atom()?));
        }
        Ok(if rest.is_empty() {
            first
        } else {
            Expr::Rem {
                first: Box::new(first),
                rest,
            }
        })
    }

    /// `atom = int | string | "true" | "false" | "${" name {"." name} "}" | "(" expr ")"`
    fn parse_atom(&mut self) -> Result<Expr, WhenError> {
        let column = self.column;
        match self.tok {
            Tok::Int(_) | Tok::Str(_) | Tok::Bool(_) | Tok::Var(_) => {}
            Tok::LParen => {
                self.enter(column)?;
                self.advance()?;
                let inner = self.parse_or()?;
                if self.tok != Tok::RParen {
                    return Err(expected("')'", self.column));
                }
                self.advance()?;
                self.leave();
                return Ok(inner);
            }
            _ => return Err(expected("a value", column)),
        }
        Ok(match self.advance()? {
            Tok::Int(n) => Expr::Int(n),
            Tok::Str(s) => Expr::Str(s),
            Tok::Bool(b) => Expr::Bool(b),
            Tok::Var(path) => {
                if !self.variables.contains(&path) {
                    self.variables.push(path.clone());
                }
                Expr::Var { path, column }
            }
            // The match above let only leaves through.
            _ => return Err(expected("a value", column)),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(text: &str) -> Expr {
        match parse(text) {
            Ok((expr, _)) => expr,
            Err(e) => panic!("{text:?} did not parse: {e}"),
        }
    }

    fn error(text: &str) -> String {
        match super::super::Condition::parse(text) {
            Ok(c) => panic!("{text:?} parsed as {:?}", c.root),
            Err(e) => e.to_string(),
        }
    }

    fn var(name: &str, column: usize) -> Expr {
        Expr::Var {
            path: name.split('.').map(str::to_owned).collect(),
            column,
        }
    }

    #[test]
    fn literals() {
        assert_eq!(tree("42"), Expr::Int(42));
        assert_eq!(tree("-42"), Expr::Int(-42));
        assert_eq!(tree("007"), Expr::Int(7));
        assert_eq!(tree("-0"), Expr::Int(0));
        assert_eq!(tree("9223372036854775807"), Expr::Int(i64::MAX));
        assert_eq!(tree("-9223372036854775808"), Expr::Int(i64::MIN));
        assert_eq!(tree("true"), Expr::Bool(true));
        assert_eq!(tree("  false\t\n"), Expr::Bool(false));
        assert_eq!(tree("'5'"), Expr::Str("5".into()));
        assert_eq!(tree("\"a b\""), Expr::Str("a b".into()));
        assert_eq!(tree("''"), Expr::Str(String::new()));
        assert_eq!(
            tree(r#"'it\'s \"x\" \\ y'"#),
            Expr::Str(r#"it's "x" \ y"#.into())
        );
        assert_eq!(tree(r#""\'\"\\""#), Expr::Str(r#"'"\"#.into()));
        // The other quote needs no escape; non-ASCII text is kept.
        assert_eq!(tree(r#"'say "hi" ü'"#), Expr::Str(r#"say "hi" ü"#.into()));
        assert_eq!(tree("${a}"), var("a", 1));
        assert_eq!(tree(" ${data.the_key-2.0}"), var("data.the_key-2.0", 2));
    }

    #[test]
    fn precedence_follows_the_grammar() {
        // `!` is looser than a comparison: `!${a} == ${b}` is `!(${a} == ${b})`.
        assert_eq!(
            tree("!${a} == ${b}"),
            Expr::Not {
                operand: Box::new(Expr::Cmp {
                    op: CmpOp::Eq,
                    column: 7,
                    left: Box::new(var("a", 2)),
                    right: Box::new(var("b", 10)),
                }),
                column: 1,
            }
        );
        // `%` is tighter than a comparison, `&&` tighter than `||`.
        assert_eq!(
            tree("1 % 2 == 1 || true && false"),
            Expr::Or {
                first: Box::new(Expr::Cmp {
                    op: CmpOp::Eq,
                    column: 7,
                    left: Box::new(Expr::Rem {
                        first: Box::new(Expr::Int(1)),
                        rest: vec![(3, Expr::Int(2))],
                    }),
                    right: Box::new(Expr::Int(1)),
                }),
                rest: vec![(
                    12,
                    Expr::And {
                        first: Box::new(Expr::Bool(true)),
                        rest: vec![(20, Expr::Bool(false))],
                    }
                )],
            }
        );
        // Parentheses regroup and leave no node behind.
        assert_eq!(
            tree("(true || false) && true"),
            Expr::And {
                first: Box::new(Expr::Or {
                    first: Box::new(Expr::Bool(true)),
                    rest: vec![(7, Expr::Bool(false))],
                }),
                rest: vec![(17, Expr::Bool(true))],
            }
        );
        // Chains stay flat.
        assert_eq!(
            tree("1%2%3"),
            Expr::Rem {
                first: Box::new(Expr::Int(1)),
                rest: vec![(2, Expr::Int(2)), (4, Expr::Int(3))],
            }
        );
    }

    #[test]
    fn every_operator_token() {
        for (text, op) in [
            ("1==2", CmpOp::Eq),
            ("1!=2", CmpOp::Ne),
            ("1<2", CmpOp::Lt),
            ("1<=2", CmpOp::Le),
            ("1>2", CmpOp::Gt),
            ("1>=2", CmpOp::Ge),
        ] {
            let Expr::Cmp {
                op: got, column, ..
            } = tree(text)
            else {
                panic!("{text} is no comparison");
            };
            assert_eq!((got, column), (op, 2), "{text}");
        }
        // A `-` right after an operator belongs to the literal.
        assert_eq!(
            tree("1%-2"),
            Expr::Rem {
                first: Box::new(Expr::Int(1)),
                rest: vec![(2, Expr::Int(-2))],
            }
        );
    }

    #[test]
    fn variables_are_collected_once_in_order() {
        let (_, vars) = parse("${b} == ${a.x} || ${b} == 1 && ${A.x} != ${a}").unwrap();
        let names: Vec<String> = vars.iter().map(|p| p.join(".")).collect();
        assert_eq!(names, ["b", "a.x", "A.x", "a"]);
    }

    /// Every parse error, with its exact message and column.
    #[test]
    fn parse_errors() {
        let table: &[(&str, &str)] = &[
            ("", "when: expected a value at column 1"),
            ("   ", "when: expected a value at column 4"),
            ("(1 == 1", "when: expected ')' at column 8"),
            (
                "${a} == (${b} || ${c} ${d}",
                "when: expected ')' at column 23",
            ),
            ("(", "when: expected a value at column 2"),
            (")", "when: expected a value at column 1"),
            (
                "1 == 1)",
                "when: expected an operator or the end at column 7",
            ),
            (
                "1 < 2 < 3",
                "when: expected an operator or the end at column 7",
            ),
            (
                "${a} ${b}",
                "when: expected an operator or the end at column 6",
            ),
            ("1 -1", "when: expected an operator or the end at column 3"),
            ("1 ==", "when: expected a value at column 5"),
            ("&& true", "when: expected a value at column 1"),
            ("true &&", "when: expected a value at column 8"),
            ("true ||| false", "when: expected '||' at column 8"),
            ("!", "when: expected a value at column 2"),
            ("1 % % 2", "when: expected a value at column 5"),
            ("1 = 1", "when: expected '==' at column 3"),
            ("true & false", "when: expected '&&' at column 6"),
            ("true | false", "when: expected '||' at column 6"),
            ("- 1", "when: expected a digit at column 2"),
            ("-", "when: expected a digit at column 2"),
            ("-x", "when: expected a digit at column 2"),
            (
                "9223372036854775808",
                "when: the integer at column 1 is outside the 64-bit range",
            ),
            (
                "1 == -9223372036854775809",
                "when: the integer at column 6 is outside the 64-bit range",
            ),
            ("'abc", "when: the string at column 1 has no closing '"),
            (
                "1 == \"abc'",
                "when: the string at column 6 has no closing \"",
            ),
            ("'abc\\", "when: the string at column 1 has no closing '"),
            (
                "'a\\nb'",
                "when: unknown escape '\\n' at column 3; only \\\\, \\' and \\\" are escapes",
            ),
            ("$a", "when: expected '{' after '$' at column 2"),
            ("${}", "when: expected a variable name at column 3"),
            ("${ a }", "when: expected a variable name at column 3"),
            ("${a.}", "when: expected a variable name at column 5"),
            ("${a b}", "when: expected '}' at column 4"),
            ("${a", "when: expected '}' at column 4"),
            ("${a/b}", "when: expected '}' at column 4"),
            (
                "yes == ${x}",
                "when: unexpected 'yes' at column 1; quote a string ('yes') or write a variable as ${yes}",
            ),
            (
                "${x} == True",
                "when: unexpected 'True' at column 9; quote a string ('True') or write a variable as ${True}",
            ),
            ("1 == @", "when: unexpected '@' at column 6"),
            ("1.5 == ${x}", "when: unexpected '.' at column 2"),
            ("1 == \u{0}", "when: unexpected '\\0' at column 6"),
            // Columns count characters, not bytes.
            ("'ü' == 'é' @", "when: unexpected '@' at column 12"),
            ("ü", "when: unexpected 'ü' at column 1"),
        ];
        for (text, message) in table {
            assert_eq!(&error(text), message, "{text:?}");
        }
    }

    /// The first problem from the left is reported, even when it is a lexing problem.
    #[test]
    fn errors_come_in_text_order() {
        assert_eq!(error("(1 == @"), "when: unexpected '@' at column 7");
        assert_eq!(
            error("1 == 1) @"),
            "when: expected an operator or the end at column 7"
        );
    }
}

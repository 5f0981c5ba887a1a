//! The `run:` lexer: rewrites each `${name}` of a `sh -c` script by its quoting context, or
//! refuses the script (docs/EVENTS.md §4.1 rule 1, §5 rule 20), also where a program the script
//! runs would parse the value again as code. The rules are in the doc of [`ShellTemplate`].

use super::interpreter::{self, CODE_VARIABLES, Interpreter};
use super::names::{is_valid_name, push_unique};
use super::{RefusedContext, TemplateError};

/// A `run:` script whose placeholders were rewritten into references to environment variables.
///
/// Rules (docs/EVENTS.md §4.1 rule 1, §5 rules 19 and 20), written once here:
///
/// 1. `${name}` (grammar in the [module doc](super)) is always a template reference,
///    `$NAME` always the shell's. A `${` that starts no valid name (`${VAR:-x}`, `${#x}`,
///    `${1}`) is a load error outside single quotes: brace expansions of the shell are not
///    available in `run:`; write `$VAR`. Inside `'…'` such text is literal, as sh reads it.
/// 2. Each placeholder becomes a variable [`env_name`](super::env_name) names, quoted so the
///    shell expands it exactly once into exactly one word: unquoted → `"$HOOKVISOR_X"`, inside
///    `"…"` → `${HOOKVISOR_X}`. Inside an unquoted `$(…)` that contains no quotes it is
///    rewritten as unquoted. **Deviation from docs/EVENTS.md §4.1 rule 1**, which rewrites a
///    placeholder inside `'…'` to `'"$HOOKVISOR_X"'`: here that is a load error, because
///    single-quoted text is usually another program's (`sh -c 'echo ${x}'`, `xargs sh -c`,
///    `awk 'BEGIN{print "${x}"}'`), which would parse the spliced value again and run it.
///    The message gives the fix: pass the value as an argument (`sh -c '… "$1"' _ ${x}`) or
///    read the environment (`"$HOOKVISOR_X"`, awk `ENVIRON["HOOKVISOR_X"]`).
/// 3. `\${x}` (unquoted or inside `"…"`) is the literal text `${x}`, as in sh: the escape
///    for a literal. Likewise `$${x}` is sh's `$$` (its process id) followed by `{x}`.
/// 4. A placeholder in a comment (`#` at the start of a word, to the end of the line) is left
///    as it is and is no reference: sh never reads it.
/// 5. A placeholder where the lexer cannot tell how sh would quote it, or where sh would run
///    its value as code, is a load error with its
///    1-based line and column (columns count characters): in a heredoc body or delimiter
///    (`<<`; in an unquoted one `\` newline joins lines before the delimiter is matched, as
///    sh does), inside backticks, inside a `$(…)` whose text contains a quote (`'`, `"` or
///    `$'`), inside arithmetic `$((…))`, inside `$'…'`, or anywhere in a command whose first
///    word is `eval`, `trap` or `alias` (after prefix assignments, `command`/`builtin`/`exec`/
///    `time` and their options such as `-p` and `--`), or in an assignment to a variable whose
///    value a shell or a program runs (`PS1`–`PS4`, `PROMPT_COMMAND`, `ENV`, `BASH_ENV`,
///    `GIT_SSH_COMMAND`, `EDITOR`, `PAGER`, `NODE_OPTIONS`, `LD_PRELOAD`, `PATH`, …; the list
///    is `CODE_VARIABLES` of `interpreter.rs`, also for `argv:` after `env`), also after
///    `export` or `env`). Two refusals are judged on the whole script, since the lexer cannot
///    follow them: any placeholder in a script with an unquoted `$'` (bash reads `$'…'` as
///    one string, dash — `/bin/sh` on Debian — as `$` and a single-quoted string, so the
///    two split what follows differently), and any placeholder in a script that runs
///    `alias` (an alias can make any later word an `eval`). Each message says the fix, most
///    often: assign the value to a shell variable first (`v=${x}`) and use `"$v"`.
///    Because `sh` is bash on some systems, bash's arithmetic contexts are refused as well,
///    since in bash a value such as `a[$(cmd)]` there runs cmd: `((…))` at the start of a
///    command, `$[…]`, commands starting with `let`, a `[[` up to its `]]` (its `&&`, `||`,
///    `(` and newlines do not end it), the subscript of an array assignment (`a[${x}]=1`,
///    quoted or not, also as an argument of `export`/`readonly`/`declare`/`local`), anything
///    inside a compound array assignment `a=(…)` or `a+=(…)`, a `declare`/`typeset`/`local`
///    with an `-i` option, and assigning (`n=`, `n+=`, as an argument of those commands, or
///    as the variable of `for n in`) to a variable such a command made an integer earlier in
///    the script. A value used as a variable *name* is refused too, since bash evaluates
///    its subscript: the operand of `-v` of `[`/`test`/`printf` and of `-p` of `wait`, any
///    word of `unset`, `read` and `getopts`, and a `declare`/`local` with `-n`; and any word
///    of `mapfile`/`readarray`, whose `-C` callback runs as shell text. Where a rule is simpler than bash and still
///    sound, it refuses more than bash would run. What the lexer cannot see stays the
///    script's choice, as `sh -c "$v"` is: an integer variable declared elsewhere or in a
///    function defined after its use.
/// 6. Scripts the lexer finds unterminated (a quote, `$(`, backticks, `$((`) are refused
///    only when they have a placeholder; without one the text is passed on unchanged and sh
///    reports its own syntax errors.
/// 7. A placeholder in an argument that the program a command runs parses again as code is
///    a load error, in any quoting (`sh -c "echo ${x}"` would have the inner shell parse
///    `$(…)` in the value), and also inside a `$(…)` within such an argument. The same table
///    judges `argv:` ([`check_argv`](super::check_argv)); it lives in `interpreter.rs`. The
///    command's words are judged as sh splits them; a word with an expansion is unknown,
///    and where the table cannot tell, it refuses:
///    - shells (`sh`, `bash`, `zsh`, `dash`, `ksh`, `mksh`, `ash`, `yash`, `fish`, `csh`,
///      `tcsh`, `.`, `source`; by base name, so `/bin/sh` too; a command name with an
///      expansion given a `-c`, as `$SHELL -c`): the options (`-c`, `-ec`, `-lc`; `-o NAME`,
///      `--rcfile FILE` take one word) and the script (with `-c`) or script file, the first
///      other word. The words after it are positional parameters and safe: `sh -c '…
///      "$1"' _ ${x}` is the fix the message gives.
///    - prefixes, whose own options, operands (`timeout DURATION`, `chroot DIR`) and
///      `NAME=VALUE` words (`env`, `sudo`) are skipped to judge the command after them:
///      `env`, `sudo`, `doas`, `timeout`, `nice`, `ionice`, `stdbuf`, `time`, `exec`,
///      `chroot`, `command`, `builtin`, `nohup`, `setsid`, `busybox`, `unbuffer`, `coproc`. A value in
///      the options of `env`, `sudo` or `doas` is refused (`env -S…`, `sudo -s` run a
///      command line), and so is every argument after `env -S`, `sudo -s`/`-i`, `doas -s`.
///    - programs that run their arguments as a command line: every argument of `ssh`, `scp`,
///      `rsync`, `xargs`, `watch`, `su`, `runuser`, `sg`, `flock`, `script`, `parallel`,
///      `make`, `tmux`, `screen`.
///    - `find`: the words of `-exec`/`-execdir`/`-ok`/`-okdir` up to `;` or `+` are a command
///      judged by this table; a value as its program is refused.
///    - `git`: its global options (`-c core.sshCommand=…`, a value that can be `-c…`), the
///      argument of `--exec`, `rebase -x`, `--upload-pack`, `--receive-pack`, `--extcmd`, and
///      every word after `submodule foreach`, `bisect run` and of `filter-branch`.
///    - the command name itself (`${x} --version`, `nice ./bin/${x}`, `$(${x})`, after any
///      prefix, `find -exec ${x} ;`): a value must not choose the program (`command -v ${x}`
///      runs nothing and is accepted). The fix: `case ${x} in lint) ./lint.sh;; esac`.
///    - a shell or language name followed by an option anywhere in the command, and the name
///      of awk, sed, jq or a program below that runs a command line anywhere in it, is judged
///      from there too, for wrappers the prefixes do not list (`docker exec c sh -c …`,
///      `kubectl exec p -- python3 -c …`, `taskset 1 awk "…"`, `unshare -r flock L -c …`).
///    - languages (`python*`, `pypy`, `perl`, `ruby`, `node`, `bun`, `deno`, `php`, `lua*`,
///      `Rscript`, `osascript`, `expect`, `tclsh`): the options, the code of `-c`/`-e`/`-E`/
///      `-p`/`-r`/`--eval` and the script file; after the code, an argument a value starts is
///      refused before `--` (perl and node read it as an option; python's `-c` and `-m` end the
///      options). With perl's `-n`/`-p`/`-i` every argument is refused: its `<>` opens a file
///      named `|cmd` by running cmd.
///    - awk (`awk`, `gawk`, `mawk`, `nawk`): the options (`-v var=…`, whose escapes awk
///      processes; `-f`/`-E` name the program) and the program; operands after it are safe.
///    - `sed` (its `e` command runs shell commands) and `jq`: the script or filter (the first
///      operand unless `-e`/`-f` give it), option arguments (but `jq --arg NAME VALUE`), and,
///      since both read options anywhere, any word that a value starts before `--`.
///
///    A here-string (`bash <<< "…"`) is judged as the command's next word; other
///    redirection targets are file names.
///
///    Beyond the table it stays the script's choice, as `sh -c "$v"` is: a program that
///    evaluates an argument it does not know, a value piped into an interpreter, and a value
///    starting with `-` that a program reads as one of its options.
///
/// The lexer follows POSIX sh: quotes, backslash escapes and line continuations, `$(…)`
/// nesting with `case` patterns, comments, here-documents (several per line, `<<-`), `$$`
/// and the other special parameters. `<<<` is read as bash's here-string (a plain word).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellTemplate {
    script: String,
    references: Vec<String>,
}

impl ShellTemplate {
    /// Lexes a `run:` text and rewrites its placeholders by the rules of [`ShellTemplate`].
    pub fn parse(text: &str) -> Result<ShellTemplate, TemplateError> {
        let mut lexer = Lexer::new(text);
        lexer.run()?;
        Ok(ShellTemplate {
            script: lexer.out,
            references: lexer.refs,
        })
    }

    /// The rewritten script, to run as `sh -c SCRIPT` with each reference's variable set.
    pub fn script(&self) -> &str {
        &self.script
    }

    /// The lower-cased names the script references, each once, in order of first use.
    pub fn references(&self) -> &[String] {
        &self.references
    }

    /// The words of a script that sh would run as one plain command with its words as they
    /// are, so it can be executed without a shell, as GNU make does for such recipe lines:
    /// only letters, digits and `_ - . / , : + @ % =`, words split by blanks, and a first word
    /// that is no assignment and no shell builtin or keyword but `true`/`false`; `None` for
    /// anything else.
    pub fn plain_command(&self) -> Option<Vec<&str>> {
        if !self.references.is_empty() {
            return None;
        }
        plain_command(&self.script)
    }
}

/// Shell builtins and reserved words that can start a plain-looking command: such a script
/// always goes to sh, since a program of the same name (`/bin/echo`, `/usr/bin/cd`) may
/// behave otherwise. `true` and `false` are not here: their programs do exactly what the
/// builtins do, and `run: "true"` is the cheapest hook there is (BENCHMARKS.md, case 7).
const SHELL_WORDS: &[&str] = &[
    "!", ".", ":", "[", "[[", "{", "}", "alias", "bg", "break", "builtin", "case", "cd", "chdir",
    "command", "continue", "declare", "do", "done", "echo", "elif", "else", "esac", "eval", "exec",
    "exit", "export", "fc", "fg", "fi", "for", "function", "getopts", "hash", "if", "in", "jobs",
    "kill", "let", "local", "printf", "pwd", "read", "readonly", "return", "select", "set",
    "shift", "source", "test", "then", "time", "times", "trap", "type", "typeset", "ulimit",
    "umask", "unalias", "unset", "until", "wait", "while",
];

/// The words of `script` when sh would read it as one simple command of plain words: only
/// letters, digits and `_ - . / , : + @ % =` (no quote, expansion, glob, tilde, comment,
/// redirection or operator), words split by spaces or tabs, trailing newlines allowed, and a
/// first word that is no assignment (`A=1 cmd`), no builtin or reserved word
/// ([`SHELL_WORDS`]). Such a command runs the same with or without `sh -c`.
fn plain_command(script: &str) -> Option<Vec<&str>> {
    let line = script.trim_end_matches('\n');
    let plain = |c: char| c.is_ascii_alphanumeric() || "_-./,:+@%=".contains(c);
    if !line.chars().all(|c| plain(c) || c == ' ' || c == '\t') {
        return None;
    }
    let words: Vec<&str> = line.split([' ', '\t']).filter(|w| !w.is_empty()).collect();
    let first = *words.first()?;
    if first.contains('=') || SHELL_WORDS.contains(&first) {
        return None;
    }
    Some(words)
}

/// The quoting context of a placeholder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Quoting {
    Unquoted,
    Double,
}

/// How many `"…"` and `$(…)` may be open at once.
const MAX_NESTING: usize = 64;

/// Reserved words that keep the lexer in command position (the next word is a command name).
const KEYWORDS: &[&str] = &[
    "if", "then", "else", "elif", "fi", "do", "done", "while", "until", "for", "in", "case",
    "esac", "{", "}", "!", "time",
];

/// Prefixes after which the next word is still the command run (`command eval …`).
const PREFIX_COMMANDS: &[&str] = &["command", "builtin", "exec"];

/// The word being read in an unquoted frame, for `eval`, keywords and comments.
#[derive(Debug, Default)]
struct Word {
    /// Whether any character of the word was read (`''` is a word).
    started: bool,
    /// Its characters after quote removal, expansions left out.
    text: String,
    /// Length of `text` when the first quote, escape or expansion appeared.
    special_at: Option<usize>,
    /// Whether it contains an expansion (`$x`, `$(…)`, a placeholder, backticks).
    expansion: bool,
}

impl Word {
    /// Marks a quote or escape: the word is no longer a plain keyword or assignment.
    fn quoted(&mut self) {
        self.started = true;
        if self.special_at.is_none() {
            self.special_at = Some(self.text.len());
        }
    }

    /// Marks an expansion: the word's text is not known at load.
    fn expanded(&mut self) {
        self.quoted();
        self.expansion = true;
    }

    /// `NAME=…` (or bash's `NAME+=…`) before any quote or expansion: a prefix assignment,
    /// not the command name.
    fn is_assignment(&self) -> bool {
        match self.text.find('=') {
            Some(eq) if eq > 0 => {
                self.special_at.is_none_or(|at| at > eq)
                    && self
                        .text
                        .get(..eq)
                        .map(|name| name.strip_suffix('+').unwrap_or(name))
                        .is_some_and(is_shell_name)
            }
            _ => false,
        }
    }
}

/// Whether `name` is a shell variable name: `[A-Za-z_][A-Za-z0-9_]*`.
fn is_shell_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with(|c: char| c.is_ascii_digit())
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// The simple command being read in an unquoted frame.
#[derive(Debug, Default)]
struct Command {
    /// Words counted so far (assignments, keywords and prefixes excluded).
    words: u32,
    /// Set when its first word makes every placeholder in it unclassifiable (`eval`, …).
    refuse: Option<RefusedContext>,
    /// Whether the next word is the target of a redirection.
    redirect: bool,
    /// Whether that redirection is bash's here-string `<<<`, whose word is the command's
    /// standard input: judged as the command's next word (`bash <<< "…"` runs it).
    here_string: bool,
    /// Whether it is bash's `declare`, `typeset` or `local`, whose `-i` makes variables
    /// integers: assignments to them are evaluated as arithmetic.
    declares: bool,
    /// Whether such a command had an option with `i`: its names are integers.
    integer: bool,
    /// Whether it is `export`, `readonly`, `declare`, `typeset` or `local`, whose `NAME=…`
    /// arguments are assignments (arithmetic for an integer `NAME`, or with a subscript).
    assigns: bool,
    /// Whether a prefix (`command`, `builtin`, `exec`, `time`) was read: its options
    /// (`-p`, `--`) are skipped before the command name.
    after_prefix: bool,
    /// Whether it is `[[` and its `]]` was not read yet: `;`, `&`, `|`, `(` inside it do not
    /// end the command, so its refusal lasts to the `]]`.
    in_double_bracket: bool,
    /// The option that takes a variable name: `-v` of `[`, `test` and `printf`, `-p` of
    /// `wait`.
    name_option: Option<&'static str>,
    /// Whether the previous word was such a `-v`: the word being read names a variable,
    /// whose subscript bash evaluates as arithmetic.
    operand_v: bool,
    /// Whether the previous word was `for`: the word being read is the loop variable.
    for_name: bool,
    /// Its words from the command name on (keywords and leading assignments left out), each
    /// `None` when it has an expansion: what [`interpreter::reparsed`] judges.
    args: Vec<Option<String>>,
}

/// An unquoted context: the script itself or a `$(…)`.
#[derive(Debug, Default)]
struct Unquoted {
    /// Index of the `$` of the `$(` that opened it; `None` for the script.
    subst: Option<usize>,
    /// `(` opened inside it and not yet closed.
    depth: u32,
    /// `case` opened inside it and not yet closed by `esac` (whose patterns end with `)`).
    case_depth: u32,
    /// The `depth` outside bash's compound array assignment `NAME=(…)` being read: its
    /// `[…]=` subscripts are arithmetic, so every placeholder inside is refused.
    array: Option<u32>,
    command: Command,
    word: Word,
}

#[derive(Debug)]
enum Frame {
    Unquoted(Unquoted),
    /// Inside `"…"` opened at this index.
    Double(usize),
}

/// A here-document whose body starts at the next unquoted newline.
#[derive(Debug)]
struct Heredoc {
    delimiter: String,
    strip_tabs: bool,
    quoted: bool,
}

/// One pass over a script: input as characters (columns count characters), output as built.
struct Lexer {
    chars: Vec<char>,
    /// Index of the next character to read.
    i: usize,
    /// The rewritten script so far.
    out: String,
    /// Names referenced, lower-cased, in order of first use.
    refs: Vec<String>,
    /// Open contexts; the script's own unquoted frame is at the bottom and never popped.
    stack: Vec<Frame>,
    /// Here-documents whose bodies start after the next unquoted newline.
    heredocs: Vec<Heredoc>,
    /// Placeholders rewritten so far.
    placeholders: usize,
    /// Whether the outermost open `$(…)` contains a quote so far.
    subst_quoted: bool,
    /// The first placeholder inside the outermost open `$(…)`: (index, name).
    subst_placeholder: Option<(usize, String)>,
    /// Variables a `declare -i` (or `typeset`, `local`) made integers, in bash.
    integers: Vec<String>,
    /// The first construct found unterminated: (what, index where it starts).
    unterminated: Option<(&'static str, usize)>,
    /// The first placeholder rewritten: (index, name), for the whole-script refusals.
    first_placeholder: Option<(usize, String)>,
    /// Whether an unquoted `$'` was read: dash and bash read the rest differently.
    dollar_quote: bool,
    /// Whether a command named `alias` was read: an alias can make any word an `eval`.
    alias: bool,
}

impl Lexer {
    fn new(text: &str) -> Self {
        Lexer {
            chars: text.chars().collect(),
            i: 0,
            out: String::with_capacity(text.len() + 32),
            refs: Vec::new(),
            stack: vec![Frame::Unquoted(Unquoted::default())],
            heredocs: Vec::new(),
            placeholders: 0,
            subst_quoted: false,
            subst_placeholder: None,
            integers: Vec::new(),
            unterminated: None,
            first_placeholder: None,
            dollar_quote: false,
            alias: false,
        }
    }

    /// Reads the whole script, then refuses unterminated constructs if it has placeholders.
    fn run(&mut self) -> Result<(), TemplateError> {
        while let Some(&c) = self.chars.get(self.i) {
            if matches!(self.stack.last(), Some(Frame::Double(_))) {
                self.double_char(c)?;
            } else {
                self.unquoted_char(c)?;
            }
        }
        if let Some(frame) = self.stack.last() {
            match frame {
                Frame::Double(at) => {
                    let at = *at;
                    self.note_unterminated("double quote", at);
                }
                Frame::Unquoted(Unquoted {
                    subst: Some(at), ..
                }) => {
                    let at = *at;
                    self.note_unterminated("$(", at);
                }
                Frame::Unquoted(_) => {}
            }
        }
        if let Some((at, name)) = &self.first_placeholder {
            // Judged on the whole script: the `$'` or `alias` may come after the placeholder.
            if self.dollar_quote {
                return Err(self.unclassifiable(*at, name, RefusedContext::DollarQuoteScript));
            }
            if self.alias {
                return Err(self.unclassifiable(*at, name, RefusedContext::AliasScript));
            }
        }
        match self.unterminated {
            Some((what, at)) if self.placeholders > 0 => {
                let (line, column) = self.line_col(at);
                Err(TemplateError::Unterminated { line, column, what })
            }
            _ => Ok(()),
        }
    }

    /// The character at `i`, if any.
    fn at(&self, i: usize) -> Option<char> {
        self.chars.get(i).copied()
    }

    /// Skips line continuations (`\` newline) from `i`: sh removes them before reading
    /// operators and expansions, so `$\<newline>{x}` is `${x}` to it.
    fn skip_continuations(&self, mut i: usize) -> usize {
        while self.at(i) == Some('\\') && self.at(i + 1) == Some('\n') {
            i += 2;
        }
        i
    }

    /// Copies `chars[from..to]` to the output.
    fn copy(&mut self, from: usize, to: usize) {
        let end = to.min(self.chars.len());
        if let Some(slice) = self.chars.get(from..end) {
            self.out.extend(slice.iter());
        }
    }

    /// 1-based line and column (in characters) of index `i`.
    fn line_col(&self, i: usize) -> (usize, usize) {
        let mut line = 1;
        let mut column = 1;
        for &c in self.chars.iter().take(i) {
            if c == '\n' {
                line += 1;
                column = 1;
            } else {
                column += 1;
            }
        }
        (line, column)
    }

    /// Remembers the first unterminated construct; it matters only with placeholders.
    fn note_unterminated(&mut self, what: &'static str, at: usize) {
        if self.unterminated.is_none() {
            self.unterminated = Some((what, at));
        }
    }

    /// The error for placeholder `name` at `at` in `context`.
    fn unclassifiable(&self, at: usize, name: &str, context: RefusedContext) -> TemplateError {
        let (line, column) = self.line_col(at);
        TemplateError::Unclassifiable {
            line,
            column,
            name: name.to_owned(),
            context,
        }
    }

    /// The error for a `${` at `at` that starts no name.
    fn not_a_reference(&self, at: usize) -> TemplateError {
        let (line, column) = self.line_col(at);
        TemplateError::NotAReference { line, column }
    }

    /// Opens a `"…"` or `$(…)` frame that starts at `at`, within the nesting limit: every
    /// placeholder looks at all open frames, so their number is bounded.
    fn push(&mut self, frame: Frame, at: usize) -> Result<(), TemplateError> {
        if self.stack.len() > MAX_NESTING {
            let (line, column) = self.line_col(at);
            return Err(TemplateError::TooDeep {
                line,
                column,
                limit: MAX_NESTING,
            });
        }
        self.stack.push(frame);
        Ok(())
    }

    /// The innermost unquoted frame (the script's frame is never popped).
    fn frame(&mut self) -> Option<&mut Unquoted> {
        self.stack.iter_mut().rev().find_map(|f| match f {
            Frame::Unquoted(u) => Some(u),
            Frame::Double(_) => None,
        })
    }

    /// The word being read in the innermost unquoted frame.
    fn word(&mut self) -> Option<&mut Word> {
        self.frame().map(|f| &mut f.word)
    }

    /// Whether a `$(…)` is open.
    fn in_subst(&self) -> bool {
        self.stack
            .iter()
            .any(|f| matches!(f, Frame::Unquoted(Unquoted { subst: Some(_), .. })))
    }

    /// Records a quote opened at `i`: inside `$(…)` it makes every placeholder there
    /// unclassifiable (§5 rule 20).
    fn quote_seen(&mut self) -> Result<(), TemplateError> {
        if self.in_subst() {
            self.subst_quoted = true;
            if let Some((at, name)) = &self.subst_placeholder {
                return Err(self.unclassifiable(*at, name, RefusedContext::QuotedSubstitution));
            }
        }
        Ok(())
    }

    /// Parses `${name}` whose `{` is at `brace`: the lower-cased name and the index after `}`.
    fn reference_at(&self, brace: usize) -> Option<(String, usize)> {
        let mut name = String::new();
        let mut i = brace + 1;
        loop {
            match self.at(i)? {
                '}' => break,
                c if c.is_ascii_alphanumeric() || c == '_' || c == '.' => name.push(c),
                _ => return None,
            }
            i += 1;
        }
        is_valid_name(&name).then(|| (name.to_ascii_lowercase(), i + 1))
    }

    /// Rewrites the placeholder `name` at `at` for its quoting context.
    fn placeholder(
        &mut self,
        at: usize,
        name: String,
        quoting: Quoting,
    ) -> Result<(), TemplateError> {
        let refused = self.stack.iter().rev().find_map(|f| match f {
            Frame::Unquoted(u) => u.command.refuse,
            Frame::Double(_) => None,
        });
        if let Some(context) = refused {
            return Err(self.unclassifiable(at, &name, context));
        }
        if self.in_arithmetic_word() {
            return Err(self.unclassifiable(at, &name, RefusedContext::Arithmetic));
        }
        if self.in_variable_name() {
            return Err(self.unclassifiable(at, &name, RefusedContext::VariableName));
        }
        if self.in_code_variable() {
            return Err(self.unclassifiable(at, &name, RefusedContext::CodeVariable));
        }
        if let Some(program) = self.reparsed() {
            return Err(self.unclassifiable(at, &name, RefusedContext::Interpreter(program)));
        }
        if self.in_subst() {
            if self.subst_quoted {
                return Err(self.unclassifiable(at, &name, RefusedContext::QuotedSubstitution));
            }
            if self.subst_placeholder.is_none() {
                self.subst_placeholder = Some((at, name.clone()));
            }
        }
        let var = super::env_name(&name);
        match quoting {
            Quoting::Unquoted => {
                self.out.push_str("\"$");
                self.out.push_str(&var);
                self.out.push('"');
            }
            Quoting::Double => {
                self.out.push_str("${");
                self.out.push_str(&var);
                self.out.push('}');
            }
        }
        if let Some(word) = self.word() {
            word.expanded();
        }
        self.placeholders += 1;
        if self.first_placeholder.is_none() {
            self.first_placeholder = Some((at, name.clone()));
        }
        push_unique(&mut self.refs, name);
        Ok(())
    }

    /// Ends the current word of the innermost unquoted frame and classifies it.
    fn finish_word(&mut self) {
        let Some(frame) = self.frame() else { return };
        let word = std::mem::take(&mut frame.word);
        if !word.started {
            return;
        }
        let integer_word = !word.expansion && self.integers.contains(&word.text);
        let mut saw_alias = false;
        let Some(frame) = self.frame() else { return };
        let command = &mut frame.command;
        if command.redirect {
            command.redirect = false;
            command.here_string = false;
            return;
        }
        // `time` is judged as a prefix, and the word after `case` or `for` is no command.
        let keyword = command.words == 0
            && word.special_at.is_none()
            && !matches!(word.text.as_str(), "time" | "case" | "for")
            && KEYWORDS.contains(&word.text.as_str());
        let assignment = command.args.is_empty() && word.is_assignment();
        if !keyword && !assignment {
            let text = (!word.expansion).then(|| word.text.clone());
            command.args.push(text);
        }
        // Only the one word right after `-v` is its operand.
        command.operand_v = false;
        if command.in_double_bracket && word.special_at.is_none() && word.text == "]]" {
            command.in_double_bracket = false;
        }
        if !word.expansion && command.name_option == Some(word.text.as_str()) {
            command.operand_v = true;
        }
        let for_name = std::mem::take(&mut command.for_name);
        if command.declares && !word.expansion {
            if word.text.starts_with('-') {
                if word.text.contains('n') {
                    // `declare -n r=…`: the value names a variable, subscript included.
                    command.refuse = Some(RefusedContext::VariableName);
                }
                if word.text.contains('i') {
                    command.integer = true;
                    command.refuse = Some(RefusedContext::Arithmetic);
                }
            } else if command.integer {
                let name = word.text.split(['=', '+']).next().unwrap_or_default();
                let name = name.to_owned();
                push_unique(&mut self.integers, name);
                return;
            }
        }
        if command.words == 0 {
            if word.is_assignment() {
                return;
            }
            // Options of a prefix (`command -p`, `time -p`, `command --`) come before the
            // command it runs.
            if command.after_prefix && !word.expansion && word.text.starts_with('-') {
                return;
            }
            if word.special_at.is_none() {
                let text = word.text.as_str();
                if KEYWORDS.contains(&text) {
                    match text {
                        "case" => frame.case_depth += 1,
                        "esac" => frame.case_depth = frame.case_depth.saturating_sub(1),
                        "for" => command.for_name = true,
                        "time" => command.after_prefix = true,
                        _ => {}
                    }
                    return;
                }
            }
            if !word.expansion {
                let text = word.text.as_str();
                // Quotes do not stop a builtin (`\command`, `"eval"`), only keywords.
                if PREFIX_COMMANDS.contains(&text) {
                    command.after_prefix = true;
                    return;
                }
                command.refuse = match text {
                    // `trap` and `alias` keep their argument as shell text to run later.
                    "eval" | "trap" => Some(RefusedContext::Eval),
                    "alias" => {
                        saw_alias = true;
                        Some(RefusedContext::Eval)
                    }
                    // bash evaluates `let` arguments and `[[ … -eq … ]]` operands as
                    // arithmetic, where `a[$(cmd)]` in a value runs cmd.
                    "let" => Some(RefusedContext::Arithmetic),
                    "[[" => {
                        command.in_double_bracket = true;
                        Some(RefusedContext::DoubleBracket)
                    }
                    // Their arguments name variables, whose subscripts bash evaluates.
                    "unset" | "read" | "getopts" => Some(RefusedContext::VariableName),
                    // `-C` names a callback they run as shell text.
                    "mapfile" | "readarray" => Some(RefusedContext::Eval),
                    _ => None,
                };
                command.declares = matches!(text, "declare" | "typeset" | "local");
                command.assigns = command.declares || matches!(text, "export" | "readonly");
                command.name_option = match text {
                    "[" | "test" | "printf" => Some("-v"),
                    "wait" => Some("-p"),
                    _ => None,
                };
            }
        }
        if for_name && integer_word {
            // `for n in …` assigns each item to `n`: arithmetic when `n` is an integer.
            command.refuse = Some(RefusedContext::Arithmetic);
        }
        command.words += 1;
        if saw_alias {
            self.alias = true;
        }
    }

    /// Whether a word being read at the start of a command, in this frame or one around it,
    /// is one bash evaluates as arithmetic: the subscript of an array assignment (`a[…`, also
    /// `a[$(… ${x} …)]`), or the value assigned to a variable an earlier `declare -i` made an
    /// integer (`n=…`).
    fn in_arithmetic_word(&self) -> bool {
        self.stack.iter().any(|f| match f {
            Frame::Unquoted(frame) => {
                frame.array.is_some()
                    || ((frame.command.words == 0 || frame.command.assigns)
                        && self.is_arithmetic_word(&frame.word))
            }
            Frame::Double(_) => false,
        })
    }

    /// The program that would parse the word being read, in this frame or one around it
    /// (`sh -c "$(echo ${x})"`), again as code (rule 7).
    fn reparsed(&self) -> Option<Interpreter> {
        self.stack.iter().find_map(|f| match f {
            // A redirection's target is a file name, not a word of the command.
            Frame::Unquoted(frame) if frame.command.redirect && !frame.command.here_string => None,
            Frame::Unquoted(frame) => {
                let before: Vec<Option<&str>> =
                    frame.command.args.iter().map(Option::as_deref).collect();
                interpreter::reparsed(&before, &frame.word.text)
            }
            Frame::Double(_) => None,
        })
    }

    /// Whether a word being read, in this frame or one around it, is the operand of a `-v`
    /// of `[`, `test` or `printf`: a variable name, whose subscript bash evaluates.
    fn in_variable_name(&self) -> bool {
        self.stack
            .iter()
            .any(|f| matches!(f, Frame::Unquoted(u) if u.command.operand_v))
    }

    /// [`Lexer::in_arithmetic_word`] for one word.
    fn is_arithmetic_word(&self, word: &Word) -> bool {
        // The name part, before any quote or expansion, ends at `[` or `=`.
        let Some(end) = word.text.find(['[', '=']) else {
            return false;
        };
        let name = word.text.get(..end).unwrap_or_default();
        let rest = word.text.get(end..).unwrap_or_default();
        // `n+=…` appends, evaluated as arithmetic like `n=…` for an integer `n`.
        let name = match rest.starts_with('=') {
            true => name.strip_suffix('+').unwrap_or(name),
            false => name,
        };
        let name_ok = !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && word.special_at.is_none_or(|at| at > end);
        let subscript = rest.starts_with('[') && !rest.contains('=');
        let integer = rest.starts_with('=') && self.integers.iter().any(|n| n == name);
        name_ok && (subscript || integer)
    }

    /// Whether a word being read, in this frame or one around it, assigns a variable whose
    /// value a shell runs as code (`BASH_ENV=…`, `PS4=…`; any word, so `export` and `env`
    /// prefixes count too).
    fn in_code_variable(&self) -> bool {
        self.stack.iter().any(|f| match f {
            Frame::Unquoted(frame) => {
                let word = &frame.word;
                word.text.find('=').is_some_and(|eq| {
                    word.special_at.is_none_or(|at| at > eq)
                        && word
                            .text
                            .get(..eq)
                            .is_some_and(|name| CODE_VARIABLES.contains(&name))
                })
            }
            Frame::Double(_) => false,
        })
    }

    /// Whether no word of the current command was read yet.
    fn at_command_start(&mut self) -> bool {
        self.frame()
            .is_some_and(|f| f.command.words == 0 && !f.word.started)
    }

    /// Ends the current simple command (at `;`, `&`, `|`, newline, `(`, `)`).
    fn end_command(&mut self) {
        self.finish_word();
        if let Some(frame) = self.frame()
            && !frame.command.in_double_bracket
        {
            frame.command = Command::default();
        }
    }

    /// One step in an unquoted frame, at character `c`.
    fn unquoted_char(&mut self, c: char) -> Result<(), TemplateError> {
        let i = self.i;
        match c {
            '\\' => match self.at(i + 1) {
                // A line continuation joins two lines: the word goes on.
                Some('\n') => {
                    self.copy(i, i + 2);
                    self.i += 2;
                }
                Some(next) => {
                    self.copy(i, i + 2);
                    if let Some(word) = self.word() {
                        word.quoted();
                        word.text.push(next);
                    }
                    self.i += 2;
                }
                None => {
                    self.out.push('\\');
                    self.i += 1;
                }
            },
            '\'' => {
                self.quote_seen()?;
                if let Some(word) = self.word() {
                    word.quoted();
                }
                self.single_quoted()?;
            }
            '"' => {
                self.quote_seen()?;
                if let Some(word) = self.word() {
                    word.quoted();
                }
                self.out.push('"');
                self.push(Frame::Double(i), i)?;
                self.i += 1;
            }
            '`' => self.backticks()?,
            '$' => self.dollar(Quoting::Unquoted)?,
            '#' if !self.word().is_some_and(|w| w.started) => {
                // A comment: copied as it is up to the newline, which ends it.
                let end = (i..self.chars.len())
                    .find(|&j| self.at(j) == Some('\n'))
                    .unwrap_or(self.chars.len());
                self.copy(i, end);
                self.i = end;
            }
            ' ' | '\t' => {
                self.finish_word();
                self.out.push(c);
                self.i += 1;
            }
            '\n' => {
                self.end_command();
                self.out.push('\n');
                self.i += 1;
                self.heredoc_bodies()?;
            }
            ';' | '&' | '|' => {
                self.end_command();
                self.out.push(c);
                self.i += 1;
            }
            '(' if self.at_command_start()
                && self.at(self.skip_continuations(i + 1)) == Some('(') =>
            {
                // bash's arithmetic command `((…))` (two nested subshells to POSIX sh, which
                // asks for a blank between them): read like `$((…))`.
                let body = self.skip_continuations(i + 1) + 1;
                self.arithmetic(body)?;
            }
            '(' => {
                // bash's `NAME=(…)` / `NAME+=(…)`: a compound array assignment.
                let array = self.word().is_some_and(|w| {
                    w.special_at.is_none()
                        && w.text
                            .strip_suffix('=')
                            .map(|n| n.strip_suffix('+').unwrap_or(n))
                            .is_some_and(is_shell_name)
                });
                self.end_command();
                if let Some(frame) = self.frame() {
                    if array && frame.array.is_none() {
                        frame.array = Some(frame.depth);
                    }
                    frame.depth += 1;
                }
                self.out.push('(');
                self.i += 1;
            }
            ')' => {
                self.end_command();
                self.out.push(')');
                self.i += 1;
                self.close_paren();
            }
            '<' | '>' => self.redirection(c)?,
            _ => {
                if let Some(word) = self.word() {
                    word.started = true;
                    word.text.push(c);
                }
                self.out.push(c);
                self.i += 1;
            }
        }
        Ok(())
    }

    /// A `)` in an unquoted frame: closes a `(`, ends a `case` pattern, or closes the `$(`.
    fn close_paren(&mut self) {
        let close = match self.stack.last_mut() {
            Some(Frame::Unquoted(frame)) => {
                if frame.depth > 0 {
                    frame.depth -= 1;
                    if frame.array == Some(frame.depth) {
                        frame.array = None;
                    }
                    false
                } else {
                    frame.case_depth == 0 && frame.subst.is_some()
                }
            }
            _ => false,
        };
        if close {
            self.stack.pop();
            if !self.in_subst() {
                // The outermost `$(…)` is over: the next one is judged on its own.
                self.subst_quoted = false;
                self.subst_placeholder = None;
            }
        }
    }

    /// One step inside `"…"`, at character `c`.
    fn double_char(&mut self, c: char) -> Result<(), TemplateError> {
        let i = self.i;
        match c {
            '\\' => {
                let len = if self.at(i + 1).is_some() { 2 } else { 1 };
                self.copy(i, i + len);
                self.i += len;
            }
            '"' => {
                self.out.push('"');
                self.stack.pop();
                self.i += 1;
            }
            '`' => self.backticks()?,
            '$' => self.dollar(Quoting::Double)?,
            _ => {
                if let Some(word) = self.word() {
                    word.text.push(c);
                }
                self.out.push(c);
                self.i += 1;
            }
        }
        Ok(())
    }

    /// `'…'` from the opening quote at `self.i`: literal to sh, so only placeholders change.
    fn single_quoted(&mut self) -> Result<(), TemplateError> {
        let start = self.i;
        self.out.push('\'');
        let mut i = start + 1;
        loop {
            match self.at(i) {
                None => {
                    self.note_unterminated("single quote", start);
                    break;
                }
                Some('\'') => {
                    self.out.push('\'');
                    i += 1;
                    break;
                }
                Some('$') if self.at(i + 1) == Some('{') => {
                    // The text in '…' is usually another program's (`sh -c '…'`, awk):
                    // a value spliced there would be parsed again, so it is refused.
                    if let Some((name, _)) = self.reference_at(i + 1) {
                        return Err(self.unclassifiable(i, &name, RefusedContext::SingleQuoted));
                    }
                    self.out.push('$');
                    i += 1;
                }
                Some(c) => {
                    if let Some(word) = self.word() {
                        word.text.push(c);
                    }
                    self.out.push(c);
                    i += 1;
                }
            }
        }
        self.i = i;
        Ok(())
    }

    /// A `$` at `self.i` in an unquoted or double-quoted context.
    fn dollar(&mut self, quoting: Quoting) -> Result<(), TemplateError> {
        let i = self.i;
        let j = self.skip_continuations(i + 1);
        match self.at(j) {
            Some('{') => match self.reference_at(j) {
                Some((name, end)) => {
                    self.placeholder(i, name, quoting)?;
                    self.i = end;
                }
                None => return Err(self.not_a_reference(i)),
            },
            Some('(') => {
                let k = self.skip_continuations(j + 1);
                if self.at(k) == Some('(') {
                    self.arithmetic(k + 1)?;
                } else {
                    if let Some(word) = self.word() {
                        word.expanded();
                    }
                    if !self.in_subst() {
                        self.subst_quoted = false;
                        self.subst_placeholder = None;
                    }
                    self.copy(i, j + 1);
                    self.i = j + 1;
                    self.push(
                        Frame::Unquoted(Unquoted {
                            subst: Some(i),
                            ..Unquoted::default()
                        }),
                        i,
                    )?;
                }
            }
            Some('\'') if quoting == Quoting::Unquoted => self.dollar_single()?,
            Some('[') => self.dollar_bracket(j + 1)?,
            Some(c) if "@*#?-$!".contains(c) || c.is_ascii_digit() => {
                if let Some(word) = self.word() {
                    word.expanded();
                }
                self.copy(i, j + 1);
                self.i = j + 1;
            }
            Some(c) if c.is_ascii_alphabetic() || c == '_' => {
                if let Some(word) = self.word() {
                    word.expanded();
                }
                let mut end = j;
                while self
                    .at(end)
                    .is_some_and(|c| c.is_ascii_alphanumeric() || c == '_')
                {
                    end += 1;
                }
                self.copy(i, end);
                self.i = end;
            }
            _ => {
                // A lone `$` is literal to sh.
                if let Some(word) = self.word() {
                    word.started = true;
                    word.text.push('$');
                }
                self.out.push('$');
                self.i += 1;
            }
        }
        Ok(())
    }

    /// Checks a `${` at `i` inside a context that cannot take placeholders.
    fn refuse_brace(
        &self,
        i: usize,
        context: RefusedContext,
        literal: bool,
    ) -> Result<(), TemplateError> {
        self.refuse_brace_at(i, i + 1, context, literal)
    }

    /// [`Lexer::refuse_brace`] for a `$` at `i` whose `{` is at `brace` (after line
    /// continuations).
    fn refuse_brace_at(
        &self,
        i: usize,
        brace: usize,
        context: RefusedContext,
        literal: bool,
    ) -> Result<(), TemplateError> {
        match self.reference_at(brace) {
            Some((name, _)) => Err(self.unclassifiable(i, &name, context)),
            None if literal => Ok(()),
            None => Err(self.not_a_reference(i)),
        }
    }

    /// Backticks from `self.i`: copied to the first unescaped backtick; no placeholder inside.
    fn backticks(&mut self) -> Result<(), TemplateError> {
        let start = self.i;
        if let Some(word) = self.word() {
            word.expanded();
        }
        let mut i = start + 1;
        let mut quoted = false;
        loop {
            match self.at(i) {
                None => {
                    self.note_unterminated("backtick", start);
                    break;
                }
                Some('`') => {
                    i += 1;
                    break;
                }
                Some('\\') => i += 2,
                Some('$') if self.at(i + 1) == Some('{') => {
                    self.refuse_brace(i, RefusedContext::Backticks, false)?;
                    i += 1;
                }
                Some(c) => {
                    quoted |= c == '\'' || c == '"';
                    i += 1;
                }
            }
        }
        if quoted {
            self.quote_seen()?;
        }
        self.copy(start, i);
        self.i = i.min(self.chars.len());
        Ok(())
    }

    /// `$((…))`: `body` is the index after `$((`; copied to the matching `))`.
    fn arithmetic(&mut self, body: usize) -> Result<(), TemplateError> {
        let start = self.i;
        if let Some(word) = self.word() {
            word.expanded();
        }
        let mut i = body;
        let mut depth = 0u32;
        let mut quoted = false;
        loop {
            match self.at(i) {
                None => {
                    self.note_unterminated("$((", start);
                    break;
                }
                Some('(') => {
                    depth += 1;
                    i += 1;
                }
                Some(')') if depth > 0 => {
                    depth -= 1;
                    i += 1;
                }
                Some(')') => {
                    let next = self.skip_continuations(i + 1);
                    if self.at(next) == Some(')') {
                        i = next + 1;
                        break;
                    }
                    i += 1;
                }
                Some('\\') => i += 2,
                Some('$') if self.at(i + 1) == Some('{') => {
                    self.refuse_brace(i, RefusedContext::Arithmetic, false)?;
                    i += 1;
                }
                Some(c) => {
                    quoted |= c == '\'' || c == '"';
                    i += 1;
                }
            }
        }
        if quoted {
            self.quote_seen()?;
        }
        self.copy(start, i);
        self.i = i.min(self.chars.len());
        Ok(())
    }

    /// bash's old arithmetic `$[…]` (`body` is the index after `$[`), copied to the matching
    /// `]`; no placeholder inside. To POSIX sh `$[` is literal, so this refuses only text that
    /// bash would evaluate.
    fn dollar_bracket(&mut self, body: usize) -> Result<(), TemplateError> {
        let start = self.i;
        if let Some(word) = self.word() {
            word.expanded();
        }
        let mut i = body;
        let mut depth = 0u32;
        loop {
            match self.at(i) {
                None => {
                    self.note_unterminated("$[", start);
                    break;
                }
                Some('[') => {
                    depth += 1;
                    i += 1;
                }
                Some(']') if depth > 0 => {
                    depth -= 1;
                    i += 1;
                }
                Some(']') => {
                    i += 1;
                    break;
                }
                Some('$') if self.at(i + 1) == Some('{') => {
                    self.refuse_brace(i, RefusedContext::Arithmetic, false)?;
                    i += 1;
                }
                Some(_) => i += 1,
            }
        }
        self.copy(start, i);
        self.i = i.min(self.chars.len());
        Ok(())
    }

    /// `$'…'` from the `$` at `self.i`: copied to the closing quote; no placeholder inside.
    fn dollar_single(&mut self) -> Result<(), TemplateError> {
        self.quote_seen()?;
        // dash reads `$'` as `$` and a single quote, bash as one string: from here on the
        // two shells may split the script differently.
        self.dollar_quote = true;
        let start = self.i;
        if let Some(word) = self.word() {
            word.expanded();
        }
        let mut i = start + 2;
        loop {
            match self.at(i) {
                None => {
                    self.note_unterminated("$'", start);
                    break;
                }
                Some('\'') => {
                    i += 1;
                    break;
                }
                Some('\\') => i += 2,
                Some('$') if self.at(i + 1) == Some('{') => {
                    // Literal text to the shell, but a template name there cannot be quoted.
                    self.refuse_brace(i, RefusedContext::AnsiC, true)?;
                    i += 1;
                }
                Some(_) => i += 1,
            }
        }
        self.copy(start, i);
        self.i = i.min(self.chars.len());
        Ok(())
    }

    /// A redirection operator at `self.i`; `<<` and `<<-` start a here-document.
    fn redirection(&mut self, c: char) -> Result<(), TemplateError> {
        let i = self.i;
        // A word of digits right before the operator is its file descriptor, not a word.
        let io_number = self.word().is_some_and(|w| {
            w.started
                && w.special_at.is_none()
                && !w.text.is_empty()
                && w.text.chars().all(|d| d.is_ascii_digit())
        });
        if io_number {
            if let Some(word) = self.word() {
                *word = Word::default();
            }
        } else {
            self.finish_word();
        }
        let j = self.skip_continuations(i + 1);
        if c == '<' && self.at(j) == Some('<') {
            let k = self.skip_continuations(j + 1);
            match self.at(k) {
                Some('<') => {
                    // bash's here-string: the next word is an ordinary word.
                    self.copy(i, k + 1);
                    self.i = k + 1;
                    if let Some(frame) = self.frame() {
                        frame.command.here_string = true;
                    }
                }
                Some('-') => {
                    self.copy(i, k + 1);
                    self.i = k + 1;
                    self.heredoc_delimiter(true)?;
                    return Ok(());
                }
                _ => {
                    self.copy(i, k);
                    self.i = k;
                    self.heredoc_delimiter(false)?;
                    return Ok(());
                }
            }
        } else {
            // `>>`, `>|`, `>&`, `<&`, `<>` are one operator.
            let mut end = i + 1;
            while let Some(next) = self.at(self.skip_continuations(end)) {
                if "<>&|".contains(next) && end - i < 4 {
                    end = self.skip_continuations(end) + 1;
                } else {
                    break;
                }
            }
            self.copy(i, end);
            self.i = end;
        }
        if let Some(frame) = self.frame() {
            frame.command.redirect = true;
        }
        Ok(())
    }

    /// Reads the delimiter word after `<<` and queues the here-document.
    fn heredoc_delimiter(&mut self, strip_tabs: bool) -> Result<(), TemplateError> {
        let mut i = self.i;
        while matches!(self.at(i), Some(' ' | '\t')) {
            i += 1;
        }
        let mut delimiter = String::new();
        let mut quoted = false;
        while let Some(c) = self.at(i) {
            match c {
                ' ' | '\t' | '\n' | ';' | '&' | '|' | '<' | '>' | '(' | ')' => break,
                '\'' => {
                    quoted = true;
                    i += 1;
                    while let Some(q) = self.at(i) {
                        i += 1;
                        if q == '\'' {
                            break;
                        }
                        delimiter.push(q);
                    }
                }
                '"' => {
                    quoted = true;
                    i += 1;
                    while let Some(q) = self.at(i) {
                        i += 1;
                        match q {
                            '"' => break,
                            '\\' if self
                                .at(i)
                                .is_some_and(|n| matches!(n, '$' | '`' | '"' | '\\')) =>
                            {
                                delimiter.extend(self.at(i));
                                i += 1;
                            }
                            '$' if self.at(i) == Some('{') => {
                                self.refuse_brace(i - 1, RefusedContext::Heredoc, false)?;
                                delimiter.push(q);
                            }
                            _ => delimiter.push(q),
                        }
                    }
                }
                '\\' => {
                    quoted = true;
                    match self.at(i + 1) {
                        Some('\n') => {}
                        Some(n) => delimiter.push(n),
                        None => {}
                    }
                    i += 2;
                }
                '$' if self.at(i + 1) == Some('{') => {
                    self.refuse_brace(i, RefusedContext::Heredoc, false)?;
                    delimiter.push(c);
                    i += 1;
                }
                '$' if self.at(i + 1) == Some('\'') => {
                    // bash and dash may read a `$'…'` delimiter differently.
                    self.dollar_quote = true;
                    delimiter.push(c);
                    i += 1;
                }
                _ => {
                    delimiter.push(c);
                    i += 1;
                }
            }
        }
        let end = i.min(self.chars.len());
        self.copy(self.i, end);
        self.i = end;
        if quoted || !delimiter.is_empty() {
            self.heredocs.push(Heredoc {
                delimiter,
                strip_tabs,
                quoted,
            });
        }
        Ok(())
    }

    /// After an unquoted newline: the bodies of the queued here-documents, copied unchanged;
    /// a placeholder there is refused (rule 5).
    fn heredoc_bodies(&mut self) -> Result<(), TemplateError> {
        for doc in std::mem::take(&mut self.heredocs) {
            while self.i < self.chars.len() {
                let start = self.i;
                let end = (start..self.chars.len())
                    .find(|&j| self.at(j) == Some('\n'))
                    .unwrap_or(self.chars.len());
                // In an unquoted here-document sh joins `\` newline before it compares a
                // line with the delimiter, so the line goes on to the next newline that is
                // no continuation.
                let mut end = end;
                if !doc.quoted {
                    let mut j = start;
                    while j < self.chars.len() {
                        match self.at(j) {
                            Some('\\') if self.at(j + 1) == Some('\n') => j += 2,
                            Some('\\') => j += 2,
                            Some('\n') | None => break,
                            Some(_) => j += 1,
                        }
                    }
                    end = j.min(self.chars.len());
                }
                let line: String = self.chars.get(start..end).unwrap_or(&[]).iter().collect();
                let line = if doc.quoted {
                    line
                } else {
                    line.replace("\\\n", "")
                };
                let candidate = if doc.strip_tabs {
                    line.trim_start_matches('\t')
                } else {
                    line.as_str()
                };
                let last = candidate == doc.delimiter;
                if !last {
                    for j in start..end {
                        let brace = self.skip_continuations(j + 1);
                        if self.at(j) == Some('$') && self.at(brace) == Some('{') {
                            self.refuse_brace_at(j, brace, RefusedContext::Heredoc, doc.quoted)?;
                        }
                    }
                }
                let next = (end + 1).min(self.chars.len());
                self.copy(start, next);
                self.i = next;
                if last {
                    break;
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn plain_commands_are_words_only_and_never_a_builtin() {
        let words = |text: &str| {
            let script = ShellTemplate::parse(text).unwrap();
            script.plain_command().map(|words| words.join("|"))
        };
        assert_eq!(words("true").as_deref(), Some("true"));
        assert_eq!(words("false\n").as_deref(), Some("false"));
        assert_eq!(
            words("cargo fmt\t--check  --x=1").as_deref(),
            Some("cargo|fmt|--check|--x=1")
        );
        assert_eq!(words("./lint.sh a/b").as_deref(), Some("./lint.sh|a/b"));
        for text in [
            "",
            " ",
            "echo hi",
            "cd x",
            "exit 3",
            "A=1 true",
            "true; false",
            "true && x",
            "true | x",
            "true > f",
            "true < f",
            "true 'a'",
            "true \"a\"",
            "true \\a",
            "true $HOME",
            "true ~",
            "true *",
            "true a?",
            "true [a]",
            "true #c",
            "true\nfalse",
            "true &",
            "true `x`",
            "true (x)",
            "{ true; }",
            "if",
            "true ${x}",
            "test -f x",
            "[ -f x ]",
            "true\u{a0}x",
        ] {
            assert_eq!(words(text), None, "{text:?}");
        }
    }

    use super::*;

    fn script(text: &str) -> String {
        match ShellTemplate::parse(text) {
            Ok(t) => t.script().to_owned(),
            Err(e) => panic!("{text:?}: {e}"),
        }
    }

    #[test]
    fn rewrites_by_quoting_context() {
        let table: &[(&str, &str)] = &[
            ("echo ${x}", "echo \"$HOOKVISOR_X\""),
            ("echo a${X}b", "echo a\"$HOOKVISOR_X\"b"),
            ("echo \"a ${x} b\"", "echo \"a ${HOOKVISOR_X} b\""),
            // Next to single quotes, not inside them.
            ("echo 'a '${x}' b'", "echo 'a '\"$HOOKVISOR_X\"' b'"),
            (
                "sh -c 'echo \"$1\"' _ ${x}",
                "sh -c 'echo \"$1\"' _ \"$HOOKVISOR_X\"",
            ),
            ("echo ${data.key}", "echo \"$HOOKVISOR_DATA_KEY\""),
            ("v=${x} eval_it", "v=\"$HOOKVISOR_X\" eval_it"),
            ("echo $(basename ${x})", "echo $(basename \"$HOOKVISOR_X\")"),
            (
                "echo \"$(basename ${x})\"",
                "echo \"$(basename \"$HOOKVISOR_X\")\"",
            ),
            ("echo $(a $(b ${x}))", "echo $(a $(b \"$HOOKVISOR_X\"))"),
            // The shell's own: `$NAME`, specials, escapes, single-quoted braces, `$$`.
            (
                "echo $x $HOME $1 $# $? $$ $@",
                "echo $x $HOME $1 $# $? $$ $@",
            ),
            ("echo \\${x} \"\\${x}\"", "echo \\${x} \"\\${x}\""),
            (
                "awk '{print ${1}}' '${x:-y}'",
                "awk '{print ${1}}' '${x:-y}'",
            ),
            ("echo $${x}", "echo $${x}"),
            // Comments are left alone, wherever a word starts.
            ("echo a # ${x} 'b", "echo a # ${x} 'b"),
            ("echo a#${x}", "echo a#\"$HOOKVISOR_X\""),
            ("# ${x}\necho ${y}", "# ${x}\necho \"$HOOKVISOR_Y\""),
            // `case` patterns inside `$(…)` do not close it.
            (
                "echo \"$(case a in a) echo ${x};; esac)\" ${y}",
                "echo \"$(case a in a) echo \"$HOOKVISOR_X\";; esac)\" \"$HOOKVISOR_Y\"",
            ),
            // A finished `$(…)`, eval command or here-document does not taint what follows.
            (
                "x=$(echo 'q'); echo ${x}",
                "x=$(echo 'q'); echo \"$HOOKVISOR_X\"",
            ),
            ("eval true; echo ${x}", "eval true; echo \"$HOOKVISOR_X\""),
            (
                "cat <<EOF\n$a\nEOF\necho ${x}",
                "cat <<EOF\n$a\nEOF\necho \"$HOOKVISOR_X\"",
            ),
            (
                "cat <<-'E' <<F; echo ${x}\n\t${not_a_ref:-q}\n\tE\nF\necho ${y}",
                "cat <<-'E' <<F; echo \"$HOOKVISOR_X\"\n\t${not_a_ref:-q}\n\tE\nF\necho \"$HOOKVISOR_Y\"",
            ),
            (
                "echo `date` $((1 + 2)) ${x}",
                "echo `date` $((1 + 2)) \"$HOOKVISOR_X\"",
            ),
            // A `$'` inside quotes is the same text to dash and bash.
            ("echo '$' \"$'\" ${x}", "echo '$' \"$'\" \"$HOOKVISOR_X\""),
            // An unquoted here-document's `\\` newline ends no line; `\\\\` is a backslash.
            (
                "cat <<EOF\na\\\\\nEOF\necho ${x}",
                "cat <<EOF\na\\\\\nEOF\necho \"$HOOKVISOR_X\"",
            ),
            // What only looks like the new refusals.
            ("grep -v ${x} f", "grep -v \"$HOOKVISOR_X\" f"),
            (
                "for n in ${x}; do :; done",
                "for n in \"$HOOKVISOR_X\"; do :; done",
            ),
            ("[[ a ]] && echo ${x}", "[[ a ]] && echo \"$HOOKVISOR_X\""),
            ("a=(1); echo ${x}", "a=(1); echo \"$HOOKVISOR_X\""),
            ("command -v ${x}", "command -v \"$HOOKVISOR_X\""),
            ("echo alias ${x}", "echo alias \"$HOOKVISOR_X\""),
            ("cat <<< ${x}", "cat <<< \"$HOOKVISOR_X\""),
            // Subshells, quoted or argument brackets are no arithmetic.
            ("( (echo ${x}) )", "( (echo \"$HOOKVISOR_X\") )"),
            (
                "echo a[${x}] \"a[${x}]=\"",
                "echo a[\"$HOOKVISOR_X\"] \"a[${HOOKVISOR_X}]=\"",
            ),
            ("[ ${x} = 1 ]", "[ \"$HOOKVISOR_X\" = 1 ]"),
            (
                "MY_ENV=${x} echo \"PS4=${x}\"",
                "MY_ENV=\"$HOOKVISOR_X\" echo \"PS4=${HOOKVISOR_X}\"",
            ),
            ("declare -r n=${x}", "declare -r n=\"$HOOKVISOR_X\""),
            ("declare -i n; m=${x}", "declare -i n; m=\"$HOOKVISOR_X\""),
            // Words that only look like eval.
            ("echo eval ${x}", "echo eval \"$HOOKVISOR_X\""),
            ("evaluate ${x}", "evaluate \"$HOOKVISOR_X\""),
        ];
        for (text, want) in table {
            assert_eq!(script(text), *want, "{text:?}");
        }
    }

    #[test]
    fn scripts_without_placeholders_pass_unchanged() {
        for text in [
            "",
            "echo 'unterminated",
            "x=$(echo \"a\")",
            "cat <<EOF\n$HOME\nEOF",
            "echo `",
            "f() { echo $1; }; f a",
        ] {
            let t = ShellTemplate::parse(text).unwrap();
            assert_eq!(t.script(), text);
            assert!(t.references().is_empty());
        }
    }

    #[test]
    fn references_are_lowercased_once_in_order_and_skip_comments() {
        let t = ShellTemplate::parse("echo ${B} \"${a}\" ${b} '${c:-q}' # ${c}").unwrap();
        assert_eq!(t.references(), ["b", "a"]);
    }

    #[test]
    fn refused_contexts_name_line_and_column() {
        use RefusedContext::*;
        let table: &[(&str, RefusedContext, usize, usize)] = &[
            ("cat <<EOF\nhi ${x}\nEOF", Heredoc, 2, 4),
            ("cat <<'EOF'\n${x}\nEOF", Heredoc, 2, 1),
            ("cat <<-EOF; echo\n\t\t${x}\n\tEOF", Heredoc, 2, 3),
            ("cat <<${x}", Heredoc, 1, 7),
            ("cat <<\"a${x}\"", Heredoc, 1, 9),
            ("echo `echo ${x}`", Backticks, 1, 12),
            ("echo \"`echo ${x}`\"", Backticks, 1, 13),
            ("echo $(echo \"${x}\")", QuotedSubstitution, 1, 14),
            ("echo $(echo ${x} 'q')", QuotedSubstitution, 1, 13),
            ("echo $(echo 'q' ${x})", QuotedSubstitution, 1, 17),
            (
                "a\necho \"$(b $(c ${x}) \"d\")\"",
                QuotedSubstitution,
                2,
                15,
            ),
            ("echo $(printf $'q' ${x})", QuotedSubstitution, 1, 20),
            ("echo $((${x} + 1))", Arithmetic, 1, 9),
            ("eval ${x}", Eval, 1, 6),
            ("eval \"echo ${x}\"", Eval, 1, 12),
            ("true\n  eval 'echo '${x}", Eval, 2, 15),
            ("X=1 command eval \"$(echo ${x})\"", Eval, 1, 26),
            ("if eval a ${x}; then :; fi", Eval, 1, 11),
            ("echo x | \"eval\" ${x}", Eval, 1, 17),
            ("2>/dev/null eval ${x}", Eval, 1, 18),
            ("echo $'a ${x}'", AnsiC, 1, 10),
            ("trap \"echo ${x}\" EXIT", Eval, 1, 12),
            ("alias a='echo '${x}", Eval, 1, 16),
            ("BASH_ENV=${x} bash -c :", CodeVariable, 1, 10),
            ("GIT_SSH_COMMAND=\"${x}\" git fetch", CodeVariable, 1, 18),
            ("env EDITOR=${x} git commit", CodeVariable, 1, 12),
            ("export PS4=\"+ ${x}\"", CodeVariable, 1, 15),
            ("env ENV=$(echo ${x}) sh", CodeVariable, 1, 16),
            // bash's arithmetic contexts, where `a[$(cmd)]` in a value would run cmd.
            ("let n=${x}+1", Arithmetic, 1, 7),
            ("(( ${x} > 1 ))", Arithmetic, 1, 4),
            ("if ((${x})); then :; fi", Arithmetic, 1, 6),
            ("echo $[${x}+1]", Arithmetic, 1, 8),
            ("a[${x}]=1", Arithmetic, 1, 3),
            ("a[\"${x}\"]=1", Arithmetic, 1, 4),
            ("a['${x}']=1", SingleQuoted, 1, 4),
            ("a[$(echo ${x})]=1", Arithmetic, 1, 10),
            ("declare -i n=${x}", Arithmetic, 1, 14),
            ("f() { local -ri n=\"${x}\"; }", Arithmetic, 1, 20),
            ("declare -i n m\nn=1 m=\"${x}\"", Arithmetic, 2, 8),
            ("[[ ${x} -eq 1 ]]", DoubleBracket, 1, 4),
            // Review finding 3: single-quoted text is usually another program's.
            ("sh -c 'echo ${x}'", SingleQuoted, 1, 13),
            ("echo 'a ${x} b'", SingleQuoted, 1, 9),
            ("xargs sh -c 'echo ${x}'", SingleQuoted, 1, 19),
            ("awk 'BEGIN{print \"${x}\"}'", SingleQuoted, 1, 19),
            // Finding 4a: sh joins `\` newline before it looks for the delimiter.
            ("sh <<EOF\nx\\\nEOF\necho ${x}\nEOF", Heredoc, 4, 6),
            ("cat <<EOF\n$\\\n{x}\nEOF", Heredoc, 2, 1),
            // Finding 4b: dash reads `$'` as `$` and a quote, so the rest splits differently.
            ("echo $'\\'' \" ' ; eval ${x} #\"", DollarQuoteScript, 1, 23),
            ("echo ${x} $'\\n'", DollarQuoteScript, 1, 6),
            // Finding 4c: options of prefixes, and aliases.
            ("command -p eval ${x}", Eval, 1, 17),
            ("command -- eval ${x}", Eval, 1, 17),
            ("command -p trap ${x} EXIT", Eval, 1, 17),
            ("\\command -p eval ${x}", Eval, 1, 18),
            ("time -p eval ${x}", Eval, 1, 14),
            ("alias e=eval\ne ${x}", AliasScript, 2, 3),
            ("echo ${x}; alias e=eval", AliasScript, 1, 6),
            // Finding 5: bash arithmetic past the checks.
            ("[[ 1 == 1 && ${x} -eq 2 ]]", DoubleBracket, 1, 14),
            ("[[ ( ${x} -eq 2 ) ]]", DoubleBracket, 1, 6),
            ("[[ 1 == 1 ||\n${x} -eq 2 ]]", DoubleBracket, 2, 1),
            ("a=([${x}]=1)", Arithmetic, 1, 5),
            ("a+=([${x}]=1)", Arithmetic, 1, 6),
            ("f() { local a=([${x}]=1); }", Arithmetic, 1, 17),
            ("a=( $(echo ${x}) )", Arithmetic, 1, 12),
            ("declare -i n; n+=${x}", Arithmetic, 1, 18),
            ("declare -i n; export n=${x}", Arithmetic, 1, 24),
            ("declare -i n; readonly n=${x}", Arithmetic, 1, 26),
            ("declare -i n; for n in ${x}; do :; done", Arithmetic, 1, 24),
            ("export a[${x}]=1", Arithmetic, 1, 10),
            ("[ -v ${x} ]", VariableName, 1, 6),
            ("test -v \"a[${x}]\"", VariableName, 1, 12),
            ("printf -v ${x} %s 1", VariableName, 1, 11),
            ("declare -n r=${x}", VariableName, 1, 14),
            ("f() { local -n r=${x}; }", VariableName, 1, 18),
            ("unset ${x}", VariableName, 1, 7),
            ("read -r ${x}", VariableName, 1, 9),
            ("getopts a ${x}", VariableName, 1, 11),
            ("wait -n -p ${x}", VariableName, 1, 12),
            ("mapfile -C ${x} -c 1 a", Eval, 1, 12),
        ];
        for (text, context, line, column) in table {
            let err = ShellTemplate::parse(text).unwrap_err();
            assert_eq!(
                err,
                TemplateError::Unclassifiable {
                    line: *line,
                    column: *column,
                    name: "x".into(),
                    context: *context,
                },
                "{text:?}: {err}"
            );
        }
    }

    #[test]
    fn brace_expansions_of_the_shell_are_refused() {
        let table: &[(&str, usize, usize)] = &[
            ("echo ${HOME:-/}", 1, 6),
            ("echo \"${#x}\"", 1, 7),
            ("a\n  echo ${1}", 2, 8),
            ("echo ${ x }", 1, 6),
            ("echo `echo ${q:-x}`", 1, 12),
            ("cat <<E\n${q:-x}\nE", 2, 1),
        ];
        for (text, line, column) in table {
            assert_eq!(
                ShellTemplate::parse(text),
                Err(TemplateError::NotAReference {
                    line: *line,
                    column: *column
                }),
                "{text:?}"
            );
        }
    }

    #[test]
    fn unterminated_constructs_are_refused_only_with_placeholders() {
        let table: &[(&str, &str, usize, usize)] = &[
            ("echo ${x} 'a", "single quote", 1, 11),
            ("echo \"${x}", "double quote", 1, 6),
            ("echo ${x}\necho $(a", "$(", 2, 6),
            ("echo ${x} `a", "backtick", 1, 11),
            ("echo ${x} $((1", "$((", 1, 11),
        ];
        for (text, what, line, column) in table {
            assert_eq!(
                ShellTemplate::parse(text),
                Err(TemplateError::Unterminated {
                    line: *line,
                    column: *column,
                    what
                }),
                "{text:?}"
            );
        }
    }

    #[test]
    fn nesting_is_limited() {
        let ok = format!(
            "{}echo ${{x}}{}",
            "echo $(".repeat(MAX_NESTING),
            ")".repeat(MAX_NESTING)
        );
        assert!(ShellTemplate::parse(&ok).is_ok());
        let deep = format!("\n{}", "\"$(".repeat(MAX_NESTING));
        assert_eq!(
            ShellTemplate::parse(&deep),
            Err(TemplateError::TooDeep {
                line: 2,
                // Each `"$(` opens two; the quote after the 64th open one is refused.
                column: 3 * (MAX_NESTING / 2) + 1,
                limit: MAX_NESTING
            })
        );
        // Deep but flat scripts are fine: only what is open at once counts.
        let long = "echo \"$(echo ${x})\"\n".repeat(10_000);
        assert_eq!(ShellTemplate::parse(&long).unwrap().references(), ["x"]);
    }

    #[test]
    fn line_continuations_are_read_as_sh_reads_them() {
        // `$\<newline>{x}` is `${x}` to sh, so it is a placeholder here too.
        assert_eq!(script("echo $\\\n{x}"), "echo \"$HOOKVISOR_X\"");
        // `<\<newline><` is a here-document operator.
        assert!(matches!(
            ShellTemplate::parse("cat <\\\n<EOF\n${x}\nEOF"),
            Err(TemplateError::Unclassifiable {
                context: RefusedContext::Heredoc,
                line: 3,
                column: 1,
                ..
            })
        ));
        // `ev\<newline>al` is eval.
        assert!(matches!(
            ShellTemplate::parse("ev\\\nal ${x}"),
            Err(TemplateError::Unclassifiable {
                context: RefusedContext::Eval,
                ..
            })
        ));
    }

    /// Rule 7: a placeholder where a program parses it again as code is refused with its
    /// column (the first table); the safe forms, values after the script or code, as data of
    /// an option, or in a prefix's assignment, are accepted (the second).
    #[test]
    fn interpreters_refuse_values_in_their_code() {
        // Each has one placeholder, the one refused.
        let refused = [
            "sh -c \"echo checking ${tool_input.command}\"",
            "bash -lc \"wc -l ${file}\"",
            "bash -ec \"$(echo ${x})\"",
            "/bin/sh -c \"echo ${x}\"",
            "env FOO=1 sh -c \"echo ${x}\"",
            "env -u HOME -- /usr/bin/bash -c \"echo ${x}\"",
            "command sudo -u bob nice -n 5 timeout -s KILL 10 zsh -c \"${x}\"",
            "nohup setsid stdbuf -oL dash -c \"${x}\" &",
            "busybox sh -c \"${x}\"",
            "bash -o pipefail -c \"${x}\"",
            "sh ${x}",
            "sh -c ${x}",
            "sh -- ${x} a",
            "$SHELL -c \"echo ${x}\"",
            "ssh host \"ls ${dir}\"",
            "ssh host ls -- ${dir}",
            "xargs sh -c \"echo ${x}\"",
            "echo a | xargs -0 echo ${x}",
            "find . -name '*.rs' -exec sh -c \"rustfmt ${x}\" \\;",
            "find . -exec ${x} {} +",
            "watch \"ls ${x}\"",
            "su bob -c \"id ${x}\"",
            "runuser -u bob -- sh -c \"${x}\"",
            "sudo -s echo ${x}",
            "env -S\"sh -c\" ${x}",
            "env ${x} sh -c 'echo hi'",
            "make test FILE=${x}",
            "python3 -c \"print('${x}')\"",
            "python3 ${x}",
            "python3 -W ignore -c \"${x}\"",
            "perl -e \"print ${x}\"",
            "perl -e 'print @ARGV' ${x}",
            "perl -ne 'print' -- ${x}",
            "ruby -e \"${x}\"",
            "node -e \"${x}\"",
            "node --eval=\"${x}\"",
            "php -r \"${x}\"",
            "lua -e 'print(1)' -- ${x}",
            "awk \"BEGIN { print \\\"${x}\\\" }\"",
            "awk -v v=${x} '{ print v }'",
            "gawk -F: -f prog.awk ${x}",
            "sed \"s/a/${x}/\"",
            "sed -e 's/a/b/' ${x}",
            "jq \".${x}\"",
            "jq -L ${x} .",
            "timeout 5 sh -c \"${x}\"",
            "exec bash -c \"${x}\"",
            "time sh -c \"${x}\"",
            "if sh -c \"${x}\"; then :; fi",
            "echo \"$(sh -c \"${x}\")\"",
            "bash <<< \"echo ${x}\"",
            "coproc sh -c \"${x}\"",
            "docker exec box sh -c \"ls ${x}\"",
            "kubectl exec pod -- python3 -c \"${x}\"",
            "taskset 1 awk \"BEGIN { print \\\"${x}\\\" }\"",
            "unshare -r flock /tmp/l -c \"echo ${x}\"",
            "docker exec box ssh host \"ls ${x}\"",
            "taskset 1 sed \"s/a/${x}/e\"",
            "unshare -r /usr/bin/flock /tmp/l -c \"echo ${x}\"",
            "${x} --version",
            "nice ./bin/${x}",
            "FOO=1 \"${x}\"",
            "echo $(${x})",
            "git -c core.sshCommand=${x} fetch",
            "git rebase -x \"make ${x}\" main",
            "git fetch --upload-pack=${x}",
            "git submodule foreach \"echo ${x}\"",
        ];
        for text in refused {
            let column = text[..text.find("${").unwrap()].chars().count() + 1;
            match ShellTemplate::parse(text) {
                Err(TemplateError::Unclassifiable {
                    line: 1,
                    column: got,
                    context: RefusedContext::Interpreter(_),
                    ..
                }) => assert_eq!(got, column, "{text}"),
                other => panic!("{text}: {other:?}"),
            }
        }
        let accepted = [
            "sh -c 'echo \"$1\"' _ ${x}",
            "bash -lc 'wc -l \"$1\"' bash ${file}",
            "/bin/sh -c 'printf %s \"$1\"' sh ${x} ${y}",
            "env FOO=${x} sh -c 'echo \"$FOO\"'",
            "sudo -u ${x} id",
            "sh script.sh ${x}",
            ". ./lib.sh ${x}",
            "python3 -c 'import sys; print(sys.argv[1])' ${x}",
            "python3 -m json.tool ${file}",
            "python3 check.py ${file}",
            "node tools/script ${file}",
            "perl -e 'print @ARGV' -- ${x}",
            "node -e 'console.log(process.argv[1])' -- ${x}",
            "awk '{ print ENVIRON[\"HOOKVISOR_X\"] }' ${file}",
            "awk -f prog.awk -- ${file}",
            "sed -e 's/a/b/' -- ${file}",
            "sed -n 's/a/b/p' ./${file}",
            "jq -n --arg v ${x} '$v'",
            "jq . -- ${file}",
            "find . -name ${x} -exec rm {} \\;",
            "find . -exec grep -l pattern {} + -name ${x}",
            "echo ${x} | grep sh",
            "printf '%s' ${x} sh -c",
            "git commit -m \"checking ${x}\"",
            "grep -e ${x} -- file",
            "echo lint with bash ${file}",
            "case ${x} in lint) ./lint.sh;; esac",
            "for f in ${files}; do echo \"$f\"; done",
            "> ${file} echo hi",
            "FOO=${x} ./run.sh",
            "command -v ${x}",
            "cat <<< ${x}",
            "timeout ${x} ./slow.sh",
            "git commit -q -m ${x}",
            "git log --format=%H -- ${file}",
            "git cherry-pick -x ${x}",
        ];
        for text in accepted {
            assert!(ShellTemplate::parse(text).is_ok(), "{text}");
        }
    }

    /// The safe positional form passes the value verbatim through the inner shell, and the
    /// refusal names it.
    #[test]
    fn the_interpreter_fix_passes_values_as_arguments() {
        let err = ShellTemplate::parse("sh -c \"echo ${x}\"").unwrap_err();
        assert!(
            err.to_string().contains("sh -c '… \"$1\"' _ ${x}")
                && err.to_string().contains("\"$HOOKVISOR_X\""),
            "{err}"
        );
        let t = ShellTemplate::parse("bash -lc 'printf %s \"$1\" > out' bash ${x}").unwrap();
        let value = "$(touch PWN)`touch PWN`\";touch PWN;#";
        let dir = tempfile::tempdir().unwrap();
        let status = std::process::Command::new("/bin/sh")
            .arg("-c")
            .arg(t.script())
            .env("HOOKVISOR_X", value)
            .current_dir(dir.path())
            .status();
        // bash may be missing on some systems.
        if status.is_ok_and(|s| s.success()) {
            let out = std::fs::read_to_string(dir.path().join("out")).unwrap();
            assert_eq!(out, value);
        }
        assert!(!dir.path().join("PWN").exists());
    }

    /// Review finding 3's fix, as its message gives it, with real shells: the value reaches
    /// the inner `sh -c` as an argument, and its own text never runs.
    #[test]
    fn the_single_quote_fix_passes_values_as_arguments() {
        let err = ShellTemplate::parse("sh -c 'echo ${y}'").unwrap_err();
        assert!(
            err.to_string().contains("sh -c '… \"$1\"' _ ${y}")
                && err.to_string().contains("ENVIRON[\"HOOKVISOR_Y\"]"),
            "{err}"
        );
        let t = ShellTemplate::parse("sh -c 'printf %s \"$1\" > out' _ ${y}").unwrap();
        let value = "$(touch PWN)`touch PWN`';touch PWN'";
        for shell in ["/bin/sh", "dash", "bash"] {
            let dir = tempfile::tempdir().unwrap();
            let status = std::process::Command::new(shell)
                .arg("-c")
                .arg(t.script())
                .env("HOOKVISOR_Y", value)
                .current_dir(dir.path())
                .status();
            // dash or bash may be missing on some systems; /bin/sh never is.
            let Ok(status) = status else { continue };
            assert!(status.success(), "{shell}");
            let out = std::fs::read_to_string(dir.path().join("out")).unwrap();
            assert_eq!(out, value, "{shell}");
            assert!(!dir.path().join("PWN").exists(), "{shell}");
        }
    }

    #[test]
    fn error_messages_say_where_and_what_to_do() {
        let err = ShellTemplate::parse("cat <<EOF\n${file}\nEOF").unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 2, column 1: ${file} is in a here-document, where it cannot be quoted; set \
             v=${file} before it and write $v in the body (with an unquoted delimiter)"
        );
        let err = ShellTemplate::parse("echo ${x:-y}").unwrap_err();
        assert!(
            err.to_string()
                .starts_with("line 1, column 6: '${' starts no template name")
        );
        let err = ShellTemplate::parse("x=1\necho \"$(echo 'a' ${f})\"").unwrap_err();
        assert_eq!(
            err.to_string(),
            "line 2, column 18: ${f} is inside a $(…) that contains quotes; set v=${f} before \
             the $(…) and use \"$v\" inside it"
        );
    }
}

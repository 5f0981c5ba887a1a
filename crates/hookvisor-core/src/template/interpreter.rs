//! Programs that parse an argument again as code: the table both `run:` ([`ShellTemplate`]
//! rule 7) and `argv:` ([`check_argv`]) refuse placeholders by. The rules are in the doc of
//! [`ShellTemplate`]; this module is their one implementation.
//!
//! [`ShellTemplate`]: super::ShellTemplate
//! [`check_argv`]: super::check_argv

use std::fmt;
use std::path::Path;

/// A program that would parse a placeholder's value as code, and how.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Interpreter {
    /// A shell's script (`sh -c SCRIPT`), script file or options: the arguments after the
    /// script are positional and safe.
    Shell(&'static str),
    /// A language's code option (`python3 -c`, `perl -e`, `node -e`, …), script file or
    /// options.
    Language(&'static str),
    /// awk's program text or options (`-v var=…` processes escapes).
    Awk(&'static str),
    /// sed's script (its `e` command and `s///e` run shell commands), or an argument GNU sed
    /// may read as an option.
    Sed,
    /// jq's filter, or an argument jq may read as an option.
    Jq,
    /// A program that joins or reads its arguments as a command line (`ssh`, `xargs`,
    /// `watch`, `su`, `make`, …): no argument of it is safe.
    CommandLine(&'static str),
    /// An assignment to a variable whose value a shell or program runs (`env EDITOR=…`).
    Variable(&'static str),
    /// The program a command runs (`${x} …`, `nice ${x}`, `find -exec ${x} ;`): the value
    /// would choose what runs.
    Program,
    /// A prefix's options or command name (`env`, `sudo`, `timeout`, `find -exec`, …): a value
    /// there can be an option that changes what runs (`env -S`).
    Prefix(&'static str),
}

impl fmt::Display for Interpreter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Interpreter::Shell(name) => write!(
                f,
                "in the script, script file or options of `{name}`, which parses it again as \
                 shell code"
            ),
            Interpreter::Language(name) => write!(
                f,
                "in the code, script file or options of `{name}`, which runs it as code"
            ),
            Interpreter::Awk(name) => write!(
                f,
                "in the program or options of `{name}`, which parses it as awk code"
            ),
            Interpreter::Sed => f.write_str(
                "in the script or options of `sed`, whose script can run commands (and GNU sed \
                 reads an argument starting with - as an option anywhere)",
            ),
            Interpreter::Jq => f.write_str(
                "in the filter or options of `jq`, which parses it as jq code (and reads an \
                 argument starting with - as an option anywhere)",
            ),
            Interpreter::CommandLine(name) => write!(
                f,
                "in an argument of `{name}`, which runs its arguments as a command line"
            ),
            Interpreter::Program => f.write_str(
                "in the name of the program a command runs, which a value must not choose",
            ),
            Interpreter::Variable(name) => write!(
                f,
                "assigned to {name}, whose value a shell or a program runs as code"
            ),
            Interpreter::Prefix(name) => write!(
                f,
                "in the options of `{name}`, where a value can change what runs"
            ),
        }
    }
}

impl Interpreter {
    /// The safe form for the value of `name`, whose variable is `var`.
    pub(super) fn fix(&self, name: &str, var: &str) -> String {
        match self {
            Interpreter::Shell(sh) => format!(
                "pass the value as an argument after the script, `{sh} -c '… \"$1\"' _ \
                 ${{{name}}}`, or read \"${var}\" inside single quotes"
            ),
            Interpreter::Language(lang) => format!(
                "pass the value as an argument after the code and `--` (`{lang} -e '…' -- \
                 ${{{name}}}`; python: `-c '…' ${{{name}}}`), or read the environment \
                 variable {var} in the code"
            ),
            Interpreter::Awk(_) => format!(
                "read it in the program as ENVIRON[\"{var}\"], or pass it as a file operand \
                 after the program"
            ),
            Interpreter::Sed => format!(
                "sed cannot take a value as data: use awk with ENVIRON[\"{var}\"], or pass a \
                 file name after `--` (`sed -e '…' -- ${{{name}}}`)"
            ),
            Interpreter::Jq => format!(
                "pass it with `--arg v ${{{name}}}` and write $v in the filter (or read \
                 $ENV.{var}); a file name goes after `--`"
            ),
            Interpreter::CommandLine(program) => format!(
                "give `{program}` a fixed command and pass the value on its standard input or \
                 in the environment (\"${var}\" in a script it runs)"
            ),
            Interpreter::Program => format!(
                "run a fixed program and pass the value as an argument; to pick a program by \
                 the value, match it (case ${{{name}}} in lint) ./lint.sh;; esac)"
            ),
            Interpreter::Variable(_) => format!("do not put ${{{name}}} into that variable"),
            Interpreter::Prefix(program) => format!(
                "keep the value out of the options of `{program}`: put it after the command it \
                 runs, as an argument, or in a NAME=${{{name}}} assignment"
            ),
        }
    }
}

/// Variables whose value sh or bash expands and runs (prompts under `set -x` or
/// interactively, startup files named after expansion), or a program the script starts does.
pub(super) const CODE_VARIABLES: &[&str] = &[
    "PS1",
    "PS2",
    "PS3",
    "PS4",
    "PROMPT_COMMAND",
    "ENV",
    "BASH_ENV",
    // Run by the programs a script starts: git's commands, pagers and editors as shell
    // text, options that load code, and the paths programs and libraries are found in.
    "GIT_SSH_COMMAND",
    "GIT_SSH",
    "GIT_PAGER",
    "GIT_EDITOR",
    "GIT_SEQUENCE_EDITOR",
    "GIT_EXTERNAL_DIFF",
    "GIT_ASKPASS",
    "SSH_ASKPASS",
    "PAGER",
    "MANPAGER",
    "EDITOR",
    "VISUAL",
    "PERL5OPT",
    "RUBYOPT",
    "NODE_OPTIONS",
    "PYTHONSTARTUP",
    "PYTHONPATH",
    "PATH",
    "LD_PRELOAD",
    "LD_LIBRARY_PATH",
];

/// How deep prefixes may nest (`env nice timeout 5 …`) before the command is refused anyway.
const MAX_PREFIXES: usize = 16;

/// Whether a placeholder in the word after `before` would be parsed as code by the program
/// the command runs. `before` holds the words of one simple command read so far, the
/// command name first, each `None` when it has an expansion (its value unknown at load);
/// `current` is the literal text of the placeholder's word before it.
pub(crate) fn reparsed(before: &[Option<&str>], current: &str) -> Option<Interpreter> {
    command(before, current, 0).or_else(|| wrapped(before, current))
}

/// A shell or language given an option further on in the command, or awk, sed, jq or a
/// program that runs a command line (which need no option to read an operand as code), behind
/// a wrapper the prefix table does not know (`docker exec c sh -c …`, `kubectl exec p --
/// python3 -c …`, `unshare -r flock L -c …`, `taskset 1 awk "…"`): judged from there too. It
/// may refuse text that only looks like such a call (`echo sh -c ${x}`), never accept more.
fn wrapped(before: &[Option<&str>], current: &str) -> Option<Interpreter> {
    (1..before.len()).find_map(|at| {
        let name = before.get(at).copied().flatten()?;
        let base = name.rsplit('/').next().unwrap_or(name);
        let known = (SHELLS.contains(&base) && !matches!(base, "." | "source"))
            || LANGUAGES.iter().any(|l| l.names.contains(&base));
        let option = before
            .get(at + 1)
            .copied()
            .flatten()
            .is_some_and(|w| w.starts_with('-'));
        // `eval` is a builtin: no program runs it. A name in a path is judged only in a `bin`
        // directory, so that `node tools/script ${x}` still passes.
        let program = name == base
            || Path::new(name)
                .parent()
                .is_some_and(|dir| dir.ends_with("bin"));
        let operand_is_code = program
            && (AWKS.contains(&base)
                || (COMMAND_LINES.contains(&base) && base != "eval")
                || matches!(base, "sed" | "gsed" | "jq" | "gojq" | "jaq"));
        ((known && option) || operand_is_code)
            .then(|| command(before.get(at..).unwrap_or_default(), current, 1))
            .flatten()
    })
}

/// [`reparsed`] for the command starting at `words[0]`, `depth` prefixes deep.
fn command(words: &[Option<&str>], current: &str, depth: usize) -> Option<Interpreter> {
    let Some((first, rest)) = words.split_first() else {
        // The placeholder is in the command name: the value would choose the program. A
        // `NAME=` before it makes the word an assignment (`FOO=${x} cmd`), which is data.
        return (!is_assignment(current)).then_some(Interpreter::Program);
    };
    let Some(name) = first else {
        // `$SHELL -c "…"`: an unknown program given a `-c` is judged as a shell.
        let c_option = rest
            .iter()
            .flatten()
            .any(|w| w.starts_with('-') && !w.starts_with("--") && w.contains('c'));
        return c_option.then(|| shell("$SHELL", rest)).flatten();
    };
    let base = name.rsplit('/').next().unwrap_or(name);
    if let Some(p) = PREFIXES.iter().find(|p| p.names.contains(&base)) {
        if depth >= MAX_PREFIXES {
            return Some(Interpreter::Prefix(p.names[0]));
        }
        return prefix(p, rest, current, depth);
    }
    if let Some(sh) = SHELLS.iter().find(|s| **s == base) {
        return shell(sh, rest);
    }
    if let Some(program) = COMMAND_LINES.iter().find(|s| **s == base) {
        return Some(Interpreter::CommandLine(program));
    }
    if let Some(lang) = LANGUAGES.iter().find(|l| l.names.contains(&base)) {
        return language(lang, rest, current);
    }
    if let Some(awk) = AWKS.iter().copied().find(|a| *a == base) {
        return self::awk(awk, rest, current);
    }
    match base {
        "sed" | "gsed" => sed(rest, current),
        "jq" | "gojq" | "jaq" => jq(rest, current),
        "find" | "gfind" => find(rest, current, depth),
        "git" => git(rest, current),
        // `python3.12`, `python2.7`.
        _ if base
            .strip_prefix("python")
            .is_some_and(|v| v.chars().all(|c| c.is_ascii_digit() || c == '.')) =>
        {
            language(&LANGUAGES[0], rest, current)
        }
        _ => None,
    }
}

/// awk's names.
const AWKS: &[&str] = &["awk", "gawk", "mawk", "nawk", "busybox-awk"];

/// Shells that run `-c SCRIPT`, a script file or standard input.
const SHELLS: &[&str] = &[
    "sh", "bash", "zsh", "dash", "ksh", "ksh93", "mksh", "ash", "yash", "posh", "fish", "csh",
    "tcsh", "rbash", ".", "source",
];

/// Programs that run their arguments as a command line or by a shell.
const COMMAND_LINES: &[&str] = &[
    "ssh", "scp", "rsync", "xargs", "watch", "su", "runuser", "sg", "flock", "script", "parallel",
    "make", "gmake", "tmux", "screen", "eval",
];

/// A command that runs the command after its own options and operands.
struct Prefix {
    names: &'static [&'static str],
    /// Short options that take an argument (`-u USER`, or attached `-uUSER`).
    argument: &'static str,
    /// Long options that take an argument when written without `=`.
    long: &'static [&'static str],
    /// Short options after which the rest runs as a shell command line (`sudo -s`, `env -S`).
    line: &'static str,
    /// Operands before the command (`timeout DURATION`, `chroot DIR`).
    operands: usize,
    /// Short options with which it runs nothing (`command -v NAME` prints a path).
    query: &'static str,
    /// Whether `NAME=VALUE` words before the command are assignments (`env`, `sudo`).
    assignments: bool,
}

const PREFIXES: &[Prefix] = &[
    Prefix {
        names: &["env"],
        argument: "uCS",
        long: &["--unset", "--chdir", "--split-string"],
        line: "S",
        operands: 0,
        query: "",
        assignments: true,
    },
    Prefix {
        names: &["sudo"],
        argument: "ugCDhprtUTR",
        long: &[
            "--user",
            "--group",
            "--close-from",
            "--chdir",
            "--host",
            "--prompt",
            "--role",
            "--type",
            "--other-user",
            "--command-timeout",
            "--chroot",
        ],
        line: "si",
        operands: 0,
        query: "",
        assignments: true,
    },
    Prefix {
        names: &["doas"],
        argument: "uC",
        long: &[],
        line: "s",
        operands: 0,
        query: "",
        assignments: false,
    },
    Prefix {
        names: &["timeout"],
        argument: "sk",
        long: &["--signal", "--kill-after"],
        line: "",
        operands: 1,
        query: "",
        assignments: false,
    },
    Prefix {
        names: &["nice"],
        argument: "n",
        long: &["--adjustment"],
        line: "",
        operands: 0,
        query: "",
        assignments: false,
    },
    Prefix {
        names: &["ionice"],
        argument: "cnp",
        long: &["--class", "--classdata", "--pid"],
        line: "",
        operands: 0,
        query: "",
        assignments: false,
    },
    Prefix {
        names: &["stdbuf"],
        argument: "ioe",
        long: &["--input", "--output", "--error"],
        line: "",
        operands: 0,
        query: "",
        assignments: false,
    },
    Prefix {
        names: &["time"],
        argument: "fo",
        long: &["--format", "--output"],
        line: "",
        operands: 0,
        query: "",
        assignments: false,
    },
    Prefix {
        names: &["exec"],
        argument: "a",
        long: &[],
        line: "",
        operands: 0,
        query: "",
        assignments: false,
    },
    Prefix {
        names: &["chroot"],
        argument: "",
        long: &["--userspec", "--groups"],
        line: "",
        operands: 1,
        query: "",
        assignments: false,
    },
    Prefix {
        names: &[
            "builtin",
            "nohup",
            "setsid",
            "busybox",
            "unbuffer",
            "catchsegv",
            "coproc",
        ],
        argument: "",
        long: &[],
        line: "",
        operands: 0,
        query: "",
        assignments: false,
    },
    Prefix {
        names: &["command"],
        argument: "",
        long: &[],
        line: "",
        operands: 0,
        query: "vV",
        assignments: false,
    },
];

/// A prefix's options, operands and assignments, then the command it runs.
fn prefix(p: &Prefix, rest: &[Option<&str>], current: &str, depth: usize) -> Option<Interpreter> {
    let refuse = Some(Interpreter::Prefix(p.names[0]));
    let mut operands = p.operands;
    let mut argument = false;
    let mut options = true;
    for (i, word) in rest.iter().enumerate() {
        // An unknown word among the options may be one of them: what follows is unknown.
        let word = (*word)?;
        if std::mem::take(&mut argument) {
            continue;
        }
        if options && word == "--" {
            options = false;
            continue;
        }
        if options && word.len() > 1 && word.starts_with('-') {
            if let Some(long) = word.strip_prefix("--") {
                if long.starts_with("split-string") {
                    return Some(Interpreter::CommandLine(p.names[0]));
                }
                argument = !word.contains('=') && p.long.contains(&word);
                continue;
            }
            for (at, letter) in word.char_indices().skip(1) {
                if p.query.contains(letter) {
                    return None;
                }
                if p.line.contains(letter) {
                    return Some(Interpreter::CommandLine(p.names[0]));
                }
                if p.argument.contains(letter) {
                    argument = word.len() == at + letter.len_utf8();
                    break;
                }
            }
            continue;
        }
        if p.assignments && is_assignment(word) {
            continue;
        }
        if operands > 0 {
            operands -= 1;
            continue;
        }
        let inner = rest.get(i..).unwrap_or_default();
        return command(inner, current, depth + 1);
    }
    // The placeholder is among the prefix's own words: data (an option's argument, an
    // operand, a `NAME=` value), or an option or the command name.
    if p.assignments && is_assignment(current) {
        let name = current.split('=').next().unwrap_or_default();
        if let Some(var) = CODE_VARIABLES.iter().find(|v| **v == name) {
            return Some(Interpreter::Variable(var));
        }
    }
    let data = argument || operands > 0 || (p.assignments && is_assignment(current));
    match (data, p.line.is_empty()) {
        (true, _) => None,
        // A value read as an option there can make the prefix run a command line.
        (false, false) => refuse,
        // The command name.
        (false, true) => Some(Interpreter::Program),
    }
}

/// `NAME=…` with a shell variable name.
fn is_assignment(word: &str) -> bool {
    word.split_once('=').is_some_and(|(name, _)| {
        !name.is_empty()
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
    })
}

/// A shell: options (`-c` among them, `-o NAME` taking one), then the script (with `-c`) or
/// script file; the words after it are positional parameters.
fn shell(name: &'static str, rest: &[Option<&str>]) -> Option<Interpreter> {
    let mut arguments = 0usize;
    let mut options = true;
    for word in rest {
        let Some(word) = *word else {
            // An unknown word where options or the script are read: the script is unknown.
            return Some(Interpreter::Shell(name));
        };
        if arguments > 0 {
            arguments -= 1;
            continue;
        }
        if options && (word == "--" || word == "-") {
            options = false;
            continue;
        }
        if options && word.len() > 1 && (word.starts_with('-') || word.starts_with('+')) {
            if matches!(word, "--rcfile" | "--init-file") {
                arguments = 1;
            } else if !word.starts_with("--") {
                arguments = word.chars().filter(|c| matches!(c, 'o' | 'O')).count();
            }
            continue;
        }
        // The script or script file: every word after it is a positional parameter.
        return None;
    }
    Some(Interpreter::Shell(name))
}

/// A language whose options can hold code.
struct Language {
    names: &'static [&'static str],
    /// Short options whose argument is code (`-c`, `-e`).
    code: &'static str,
    /// Long options whose argument is code.
    code_long: &'static [&'static str],
    /// Short options that take another argument.
    argument: &'static str,
    /// Long options that take an argument when written without `=`.
    long: &'static [&'static str],
    /// Whether the code option ends the options (python's `-c` and `-m`).
    code_ends_options: bool,
    /// Whether code given by option leaves no script file operand (all but lua).
    code_is_program: bool,
    /// Options that make the operands files opened by perl's magic `open` (`|cmd` runs).
    magic: &'static str,
}

const LANGUAGES: &[Language] = &[
    Language {
        names: &["python", "python2", "python3", "pypy", "pypy3"],
        code: "cm",
        code_long: &[],
        argument: "WXQ",
        long: &["--check-hash-based-pycs"],
        code_ends_options: true,
        code_is_program: true,
        magic: "",
    },
    Language {
        names: &["perl", "perl5"],
        code: "eE",
        code_long: &[],
        argument: "",
        long: &[],
        code_ends_options: false,
        code_is_program: true,
        magic: "npi",
    },
    Language {
        names: &["ruby", "irb"],
        code: "e",
        code_long: &[],
        argument: "IrCE",
        long: &["--encoding"],
        code_ends_options: false,
        code_is_program: true,
        magic: "",
    },
    Language {
        names: &["node", "nodejs", "bun", "deno"],
        code: "ep",
        code_long: &["--eval", "--print"],
        argument: "rC",
        long: &[
            "--require",
            "--import",
            "--loader",
            "--experimental-loader",
            "--input-type",
            "--conditions",
            "--title",
            "--env-file",
        ],
        code_ends_options: false,
        code_is_program: true,
        magic: "",
    },
    Language {
        names: &["php"],
        code: "rBRE",
        code_long: &[],
        argument: "fFcdz",
        long: &[],
        code_ends_options: false,
        code_is_program: true,
        magic: "",
    },
    Language {
        names: &["lua", "luajit", "lua5.1", "lua5.2", "lua5.3", "lua5.4"],
        code: "e",
        code_long: &[],
        argument: "l",
        long: &[],
        code_ends_options: false,
        code_is_program: false,
        magic: "",
    },
    Language {
        names: &["Rscript", "osascript", "expect", "tclsh", "wish"],
        code: "ec",
        code_long: &[],
        argument: "",
        long: &[],
        code_ends_options: false,
        code_is_program: true,
        magic: "",
    },
];

/// A language: options (code options among them), then the script file unless code was given;
/// the words after are its arguments.
fn language(lang: &Language, rest: &[Option<&str>], current: &str) -> Option<Interpreter> {
    let refuse = Some(Interpreter::Language(lang.names[0]));
    let mut argument = false;
    let mut code = false;
    let mut magic = false;
    let mut options = true;
    // Past the options and the script: arguments, safe unless perl opens them as files.
    let arguments = |magic: bool| if magic { refuse } else { None };
    for word in rest {
        let Some(word) = *word else {
            return refuse;
        };
        if std::mem::take(&mut argument) {
            if code && lang.code_ends_options {
                return arguments(magic);
            }
            continue;
        }
        if options && word == "--" {
            options = false;
            continue;
        }
        if options && word.len() > 1 && word.starts_with('-') {
            if word.starts_with("--") {
                let key = word.split('=').next().unwrap_or(word);
                let is_code = lang.code_long.contains(&key);
                code |= is_code;
                argument = !word.contains('=') && (is_code || lang.long.contains(&key));
                continue;
            }
            for (at, letter) in word.char_indices().skip(1) {
                magic |= lang.magic.contains(letter);
                let is_code = lang.code.contains(letter);
                if is_code || lang.argument.contains(letter) {
                    code |= is_code;
                    let attached = word.len() > at + letter.len_utf8();
                    if attached && is_code && lang.code_ends_options {
                        return arguments(magic);
                    }
                    argument = !attached;
                    break;
                }
            }
            continue;
        }
        // The script file, or with the code given the first argument.
        return arguments(magic);
    }
    if argument || !(code && lang.code_is_program) || (options && option_like(current)) {
        return refuse;
    }
    arguments(magic)
}

/// awk: options (`-f`/`-E` name a program file, gawk's `-e` is program text), then the
/// program unless one was named; the operands after it are files or `var=value` assignments.
fn awk(name: &'static str, rest: &[Option<&str>], current: &str) -> Option<Interpreter> {
    const AWK: ProgramOptions = ProgramOptions {
        long_program: &["--file", "--exec", "--source"],
        long_with_value: &[
            "--file",
            "--exec",
            "--source",
            "--assign",
            "--field-separator",
            "--include",
            "--load",
        ],
        short_with_value: "FvfeEilW",
        short_program: "feE",
        short_ending_options: Some('E'),
        first_operand_ends: true,
    };
    AWK.judge(Interpreter::Awk(name), rest, current)
}

/// sed: `-e SCRIPT`, `-f FILE` or the first operand is the script; GNU sed reads an option
/// anywhere, so a word a value starts can be `-e…` unless `--` came before.
fn sed(rest: &[Option<&str>], current: &str) -> Option<Interpreter> {
    const SED: ProgramOptions = ProgramOptions {
        long_program: &["--expression", "--file"],
        long_with_value: &["--expression", "--file", "--line-length"],
        short_with_value: "efl",
        short_program: "ef",
        short_ending_options: None,
        first_operand_ends: false,
    };
    SED.judge(Interpreter::Sed, rest, current)
}

/// How a program whose code comes in its arguments (awk, sed) reads its options: one scanner
/// for both, which differ only in this table.
struct ProgramOptions {
    /// Long options whose value is (or names) the program.
    long_program: &'static [&'static str],
    /// Long options that take a value (`--file F` or `--file=F`).
    long_with_value: &'static [&'static str],
    /// Short option letters that take a value (attached or the next word).
    short_with_value: &'static str,
    /// Those of them whose value is (or names) the program.
    short_program: &'static str,
    /// A short letter after which no option is read (awk's `-E`).
    short_ending_options: Option<char>,
    /// Whether the first operand ends the options (awk: the program, or with one named the
    /// first file); else each operand is a script and options go on (sed).
    first_operand_ends: bool,
}

impl ProgramOptions {
    /// `refuse` when the word `current` (after the words `rest`) can be the program or an
    /// option, or when a word before it is unknown; `None` when it is an operand after the
    /// program.
    fn judge(
        &self,
        refuse: Interpreter,
        rest: &[Option<&str>],
        current: &str,
    ) -> Option<Interpreter> {
        let mut argument = false;
        let mut program = false;
        let mut options = true;
        for word in rest {
            let Some(word) = *word else {
                return Some(refuse);
            };
            if std::mem::take(&mut argument) {
                continue;
            }
            if options && word == "--" {
                options = false;
                continue;
            }
            if options && word.len() > 1 && word.starts_with('-') {
                if word.starts_with("--") {
                    let key = word.split('=').next().unwrap_or(word);
                    program |= self.long_program.contains(&key);
                    argument = !word.contains('=') && self.long_with_value.contains(&key);
                    continue;
                }
                for (at, letter) in word.char_indices().skip(1) {
                    if self.short_with_value.contains(letter) {
                        program |= self.short_program.contains(letter);
                        argument = word.len() == at + letter.len_utf8();
                        options &= self.short_ending_options != Some(letter);
                        break;
                    }
                }
                continue;
            }
            if self.first_operand_ends {
                return None;
            }
            program = true;
        }
        if argument || !program || (options && option_like(current)) {
            return Some(refuse);
        }
        None
    }
}

/// Whether the word a value starts (or that starts with `-`) can be read as an option.
fn option_like(current: &str) -> bool {
    current.is_empty() || current.starts_with('-')
}

/// jq: the first operand is the filter (or, with `-f`, its file); options are read anywhere,
/// so a word a value starts can be one unless `--` came before. `--arg NAME VALUE` is the
/// safe way in.
fn jq(rest: &[Option<&str>], current: &str) -> Option<Interpreter> {
    let refuse = Some(Interpreter::Jq);
    // Arguments still owed to the last option, and whether they are data.
    let mut owed = 0usize;
    let mut data = false;
    let mut filter = false;
    let mut options = true;
    for word in rest {
        let Some(word) = *word else {
            return refuse;
        };
        if owed > 0 {
            owed -= 1;
            continue;
        }
        if options && word == "--" {
            options = false;
            continue;
        }
        if options && word.len() > 1 && word.starts_with('-') {
            (owed, data) = match word {
                "--arg" | "--argjson" | "--slurpfile" | "--rawfile" => (2, true),
                "--indent" => (1, true),
                "-L" | "--library-path" => (1, false),
                _ => (0, false),
            };
            continue;
        }
        filter = true;
    }
    if owed > 0 {
        return (!data).then_some(()).and(refuse);
    }
    if (options && option_like(current)) || !filter {
        return refuse;
    }
    None
}

/// find: the words of `-exec`/`-execdir`/`-ok`/`-okdir` up to `;` or `+` are a command,
/// judged by the same table; a value as that command's name is refused.
fn find(rest: &[Option<&str>], current: &str, depth: usize) -> Option<Interpreter> {
    let mut exec: Option<usize> = None;
    for (i, word) in rest.iter().enumerate() {
        match (exec, *word) {
            (Some(_), Some(";" | "+")) => exec = None,
            (None, Some("-exec" | "-execdir" | "-ok" | "-okdir")) => exec = Some(i + 1),
            _ => {}
        }
    }
    let start = exec?;
    if depth >= MAX_PREFIXES {
        return Some(Interpreter::Prefix("find -exec"));
    }
    command(rest.get(start..).unwrap_or_default(), current, depth + 1)
}

/// git: a value in `-c NAME=VALUE` before the subcommand (`core.sshCommand`, `alias.*` run
/// shell text), as the argument of an option that runs a command (`--exec`, `rebase -x`,
/// `--upload-pack`, `--receive-pack`, `--extcmd`), or anywhere after `submodule foreach`,
/// `bisect run` or in `filter-branch`, which run their arguments as shell text.
fn git(rest: &[Option<&str>], current: &str) -> Option<Interpreter> {
    const RUNS: &[&str] = &["--exec", "--upload-pack", "--receive-pack", "--extcmd"];
    let refuse = Some(Interpreter::Prefix("git"));
    let mut subcommand: Option<&str> = None;
    // Whether the next word is a global option's argument (`-c NAME=VALUE`, `-C DIR`).
    let mut argument = false;
    let mut previous = None;
    for word in rest {
        previous = *word;
        let Some(word) = *word else { continue };
        if subcommand.is_none() {
            if std::mem::take(&mut argument) {
                continue;
            }
            argument = matches!(
                word,
                "-c" | "--config-env" | "-C" | "--git-dir" | "--work-tree"
            );
            if !word.starts_with('-') {
                subcommand = Some(word);
            }
            continue;
        }
        if matches!(
            (subcommand, word),
            (Some("submodule"), "foreach") | (Some("bisect"), "run")
        ) {
            return refuse;
        }
    }
    let Some(subcommand) = subcommand else {
        // Among the global options: `-c`'s word, or a value that can be `-c…` itself.
        return (argument || option_like(current)).then_some(()).and(refuse);
    };
    let runs = |w: &str| RUNS.contains(&w) || (subcommand == "rebase" && w == "-x");
    let attached = RUNS.iter().any(|r| current.starts_with(&format!("{r}=")));
    let after_option = previous.is_some_and(runs);
    (subcommand == "filter-branch" || attached || after_option)
        .then_some(())
        .and(refuse)
}

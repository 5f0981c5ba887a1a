//! The table of docs/EVENTS.md §1.5, judged from made-up results and from real `/bin/sh` runs, and
//! the combination and reply of §1.4 and §5 rule 4.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use proptest::prelude::*;

use super::*;
use crate::exec::{Invocation, RunOptions, run_command};
use crate::policy::*;

/// The timeout of the timeout rows, made and real.
const TIMEOUT: Duration = Duration::from_millis(300);

#[test]
fn every_word_round_trips_and_others_are_refused() {
    for phase in [Phase::Pre, Phase::Post] {
        assert_eq!(phase.as_str().parse::<Phase>(), Ok(phase));
    }
    for block_on in [BlockOn::Failure, BlockOn::Exit2, BlockOn::Never] {
        assert_eq!(block_on.as_str().parse::<BlockOn>(), Ok(block_on));
    }
    for on_failure in ON_FAILURE {
        assert_eq!(on_failure.as_str().parse::<OnFailure>(), Ok(on_failure));
    }
    for from in [ReasonFrom::Stderr, ReasonFrom::Stdout] {
        assert_eq!(from.as_str().parse::<ReasonFrom>(), Ok(from));
    }
    let err = "Exit2".parse::<BlockOn>().unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid block_on 'Exit2'; use 'failure', 'exit2' or 'never'"
    );
    assert!("".parse::<Phase>().is_err());
}

/// Where a hook stands: the three columns of §1.5 (a notice, and `post` on a gate).
#[derive(Debug, Clone, Copy)]
enum Place {
    GatePre,
    Notice,
    Post,
}

impl Place {
    fn judge(self, block_on: BlockOn, on_failure: OnFailure) -> Judge {
        let (gate, phase) = match self {
            Place::GatePre => (true, Phase::Pre),
            Place::Notice => (false, Phase::Pre),
            Place::Post => (true, Phase::Post),
        };
        Judge::new(gate, phase, block_on, on_failure)
    }
}

const BLOCK_ON: [BlockOn; 3] = [BlockOn::Failure, BlockOn::Exit2, BlockOn::Never];
const ON_FAILURE: [OnFailure; 4] = [
    OnFailure::Continue,
    OnFailure::Abort,
    OnFailure::Retry,
    OnFailure::RetryThenAbort,
];

/// An expected verdict, written short.
#[derive(Debug, Clone, Copy)]
enum V {
    Allow,
    Success,
    Block(&'static str),
    Abort(&'static str),
    Failure(&'static str),
}

impl V {
    /// The verdict under `on_failure`; the table rows are written for `continue`, and rule 1
    /// turns a recorded failure into an abort under `abort` and `[retry, abort]`.
    fn under(self, on_failure: OnFailure) -> Verdict {
        let reason = |r: &str| r.to_owned();
        match self {
            V::Allow => Verdict::Allow,
            V::Success => Verdict::Success,
            V::Block(r) => Verdict::Block { reason: reason(r) },
            V::Abort(r) => Verdict::Abort { reason: reason(r) },
            V::Failure(r) => match on_failure {
                OnFailure::Continue | OnFailure::Retry => Verdict::Failure { reason: reason(r) },
                OnFailure::Abort | OnFailure::RetryThenAbort => {
                    Verdict::Abort { reason: reason(r) }
                }
            },
        }
    }
}

/// One row of §1.5: a hook result and its verdicts in every column.
struct Row {
    name: &'static str,
    /// The exit status; not read when `timeout`.
    exit: i32,
    timeout: bool,
    stdout: &'static str,
    stderr: &'static str,
    /// A gate's `pre` hook under `block_on` failure, exit2, never (`on_failure: continue`).
    gate: [V; 3],
    /// A notice's or `post` hook, under any `block_on`.
    other: V,
    /// The gate's context (the others have none).
    context: &'static [&'static str],
    gate_warnings: usize,
    other_warnings: usize,
}

const fn row(name: &'static str, exit: i32, stdout: &'static str, stderr: &'static str) -> Row {
    Row {
        name,
        exit,
        timeout: false,
        stdout,
        stderr,
        gate: [V::Allow; 3],
        other: V::Success,
        context: &[],
        gate_warnings: 0,
        other_warnings: 0,
    }
}

fn table() -> Vec<Row> {
    let r = |name, exit, stdout, stderr| row(name, exit, stdout, stderr);
    vec![
        r("exit 0 plain", 0, "all good\n", "a warning on stderr\n"),
        Row {
            gate: [V::Block("tests fail\n\nrun make test"); 3],
            other_warnings: 1,
            ..r(
                "exit 0 decision block",
                0,
                r#"{"decision":"block","reason":"tests fail","feedback":"run make test"}"#,
                "",
            )
        },
        Row {
            gate: [V::Block("not on main"); 3],
            other_warnings: 1,
            ..r(
                "exit 0 decision deny, white space around",
                0,
                " \n\t{\"decision\": \"deny\", \"reason\": \"not on main\"}\n\n",
                "",
            )
        },
        Row {
            gate: [V::Block("decision 'deny' without a reason"); 3],
            other_warnings: 1,
            ..r(
                "exit 0 deny without reason",
                0,
                r#"{"decision":"deny"}"#,
                "",
            )
        },
        Row {
            other_warnings: 1,
            ..r(
                "exit 0 decision approve",
                0,
                r#"{"decision":"approve"}"#,
                "",
            )
        },
        Row {
            other_warnings: 1,
            ..r(
                "exit 0 decision allow",
                0,
                r#"{"decision":"allow","reason":"fine"}"#,
                "",
            )
        },
        Row {
            gate: [V::Abort("budget spent"); 3],
            other_warnings: 1,
            ..r(
                "exit 0 continue false",
                0,
                r#"{"continue":false,"stopReason":"budget spent","decision":"block","reason":"x"}"#,
                "",
            )
        },
        Row {
            context: &["remember the tests"],
            other_warnings: 1,
            ..r(
                "exit 0 additionalContext top-level",
                0,
                r#"{"additionalContext":"remember the tests"}"#,
                "",
            )
        },
        Row {
            context: &["branch is dirty"],
            other_warnings: 1,
            ..r(
                "exit 0 additionalContext in hookSpecificOutput",
                0,
                r#"{"hookSpecificOutput":{"hookEventName":"UserPromptSubmit","additionalContext":"branch is dirty"}}"#,
                "",
            )
        },
        Row {
            gate: [V::Block("no"); 3],
            context: &["top", "nested"],
            other_warnings: 1,
            ..r(
                "exit 0 both contexts and a block",
                0,
                r#"{"additionalContext":"top","hookSpecificOutput":{"additionalContext":"nested"},"decision":"block","reason":"no"}"#,
                "",
            )
        },
        Row {
            gate_warnings: 1,
            ..r(
                "exit 0 JSON with trailing garbage",
                0,
                r#"{"decision":"block","reason":"no"} trailing"#,
                "",
            )
        },
        Row {
            gate_warnings: 1,
            ..r(
                "exit 0 two JSON objects",
                0,
                "{\"decision\":\"block\"}\n{\"decision\":\"allow\"}\n",
                "",
            )
        },
        r("exit 0 JSON that is no object", 0, "[\"block\"]\n", ""),
        Row {
            gate: [
                V::Block("rm -rf is not allowed"),
                V::Block("rm -rf is not allowed"),
                V::Failure("rm -rf is not allowed"),
            ],
            other: V::Failure("rm -rf is not allowed"),
            ..r(
                "exit 2 with stderr",
                2,
                "some output\n",
                "rm -rf is not allowed\n",
            )
        },
        Row {
            gate: [
                V::Block("use the staging db"),
                V::Block("use the staging db"),
                V::Failure("use the staging db"),
            ],
            other: V::Failure("use the staging db"),
            ..r("exit 2 with only stdout", 2, "use the staging db\n", " \n")
        },
        Row {
            gate: [
                V::Block("exited 2"),
                V::Block("exited 2"),
                V::Failure("exited 2"),
            ],
            other: V::Failure("exited 2"),
            ..r("exit 2 with neither", 2, "", "")
        },
        Row {
            gate: [
                V::Block(r#"{"decision":"allow"}"#),
                V::Block(r#"{"decision":"allow"}"#),
                V::Failure(r#"{"decision":"allow"}"#),
            ],
            other: V::Failure(r#"{"decision":"allow"}"#),
            gate_warnings: 1,
            other_warnings: 1,
            ..r(
                "exit 2 with JSON (no decision)",
                2,
                r#"{"decision":"allow"}"#,
                "",
            )
        },
        Row {
            gate: [
                V::Block("lint: 3 errors"),
                V::Failure("lint: 3 errors"),
                V::Failure("lint: 3 errors"),
            ],
            other: V::Failure("lint: 3 errors"),
            ..r("exit 1 with stderr", 1, "checking\n", "lint: 3 errors\n")
        },
        Row {
            gate: [
                V::Block("exited 42"),
                V::Failure("exited 42"),
                V::Failure("exited 42"),
            ],
            other: V::Failure("exited 42"),
            ..r("exit 42 silent", 42, "", "")
        },
        Row {
            timeout: true,
            gate: [
                V::Block("still compiling"),
                V::Failure("still compiling"),
                V::Failure("still compiling"),
            ],
            other: V::Failure("still compiling"),
            ..r("timeout with stderr", 124, "", "still compiling\n")
        },
        Row {
            timeout: true,
            gate: [
                V::Block("timed out after 0.3s"),
                V::Failure("timed out after 0.3s"),
                V::Failure("timed out after 0.3s"),
            ],
            other: V::Failure("timed out after 0.3s"),
            ..r("timeout silent", 124, "", "")
        },
    ]
}

/// Asserts every column of `row` for this result: three places × `block_on` × `on_failure`.
fn check(row: &Row, run: &FinishedRun) {
    let failed = row.timeout || row.exit != 0;
    for place in [Place::GatePre, Place::Notice, Place::Post] {
        for (i, block_on) in BLOCK_ON.into_iter().enumerate() {
            for on_failure in ON_FAILURE {
                let what = format!(
                    "{} / {place:?} / block_on {block_on} / on_failure {on_failure}",
                    row.name
                );
                let judgment = place.judge(block_on, on_failure).judge(run);
                let (expected, context, warnings) = match place {
                    Place::GatePre => (row.gate[i], row.context, row.gate_warnings),
                    Place::Notice | Place::Post => (row.other, &[][..], row.other_warnings),
                };
                assert_eq!(judgment.verdict, expected.under(on_failure), "{what}");
                assert_eq!(judgment.context, context, "{what}");
                assert_eq!(judgment.warnings.len(), warnings, "{what}: {judgment:?}");
                let retry = matches!(on_failure, OnFailure::Retry | OnFailure::RetryThenAbort);
                assert_eq!(judgment.wants_retry(), failed && retry, "{what}");
            }
        }
    }
}

#[test]
fn the_table_from_made_up_results() {
    for row in table() {
        let run = FinishedRun {
            exit_code: row.exit,
            timed_out: row.timeout.then_some(TIMEOUT),
            stdout: row.stdout.as_bytes().to_vec(),
            stderr: row.stderr.as_bytes().to_vec(),
            log_path: None,
        };
        check(&row, &run);
    }
}

/// Runs `body` as a `/bin/sh` script through exec, its stderr redirected to a file: exec puts
/// stdout and stderr on one pipe, so stdout is exec's tail (less its timeout note) and stderr is
/// read back from the file.
fn run_script(dir: &Path, name: &str, body: &str, timeout: Duration) -> FinishedRun {
    let script = dir.join(format!("{name}.sh"));
    let err = dir.join(format!("{name}.err"));
    fs::write(&script, format!("#!/bin/sh\nexec 2>\"$1\"\n{body}\n")).unwrap();
    fs::set_permissions(&script, fs::Permissions::from_mode(0o755)).unwrap();
    let log_path = dir.join(format!("{name}.log"));
    let invocation = Invocation {
        program: script,
        found: None,
        args: vec![err.clone().into()],
        env: Vec::new(),
        env_remove: Vec::new(),
        cwd: dir.to_owned(),
        log_path: log_path.clone(),
        timeout,
    };
    let options = RunOptions {
        kill_grace: Duration::from_millis(200),
        ..RunOptions::default()
    };
    let out = run_command(&invocation, &options).unwrap();
    let mut stdout = out.tail.clone();
    if out.timed_out {
        let note = format!("[hook timed out after {}s]\n", TIMEOUT.as_secs_f64());
        stdout = stdout.strip_suffix(&note).expect(&out.tail).to_owned();
    }
    FinishedRun {
        exit_code: out.exit_code,
        timed_out: out.timed_out.then_some(timeout),
        stdout: stdout.into_bytes(),
        stderr: fs::read(&err).unwrap_or_default(),
        log_path: Some(log_path),
    }
}

#[test]
fn the_table_from_real_processes() {
    let dir = tempfile::tempdir().unwrap();
    for (i, row) in table().iter().enumerate() {
        // The texts go through files, so no row's text is shell syntax.
        let out = dir.path().join(format!("{i}.stdout"));
        let err = dir.path().join(format!("{i}.stderr"));
        fs::write(&out, row.stdout).unwrap();
        fs::write(&err, row.stderr).unwrap();
        let end = if row.timeout {
            "sleep 10".to_owned()
        } else {
            format!("exit {}", row.exit)
        };
        let body = format!(
            "cat '{}'\ncat '{}' >&2\n{end}",
            out.display(),
            err.display()
        );
        let run = run_script(dir.path(), &i.to_string(), &body, TIMEOUT);
        assert_eq!(
            run.timed_out.is_some(),
            row.timeout,
            "{}: {run:?}",
            row.name
        );
        if !row.timeout {
            assert_eq!(run.exit_code, row.exit, "{}", row.name);
        }
        assert_eq!(run.stdout, row.stdout.as_bytes(), "{}", row.name);
        assert_eq!(run.stderr, row.stderr.as_bytes(), "{}", row.name);
        check(row, &run);
    }
}

/// The caller's loop of §5 rule 1: re-run while the judgment wants it and re-runs are left.
fn run_with_retries(judge: &Judge, retries: u32, mut run: impl FnMut() -> FinishedRun) -> Judgment {
    let mut reruns = 0;
    loop {
        let judgment = judge.judge(&run());
        if !judgment.wants_retry() || reruns == retries {
            return judgment;
        }
        reruns += 1;
    }
}

#[test]
fn retries_rerun_a_failing_hook_then_judge_the_last_run() {
    let dir = tempfile::tempdir().unwrap();
    let count = dir.path().join("count");
    // Fails twice (exit 2, a block under exit2), then passes: retry re-runs before judging.
    let flaky = format!(
        "n=$(cat '{c}' 2>/dev/null || echo 0); n=$((n + 1)); echo $n > '{c}'\n\
         [ $n -ge 3 ] && exit 0; echo \"attempt $n\" >&2; exit 2",
        c = count.display()
    );
    let judge = Place::GatePre.judge(BlockOn::Exit2, OnFailure::Retry);
    let judgment = run_with_retries(&judge, 3, || {
        run_script(dir.path(), "flaky", &flaky, Duration::from_secs(10))
    });
    assert_eq!(judgment.verdict, Verdict::Allow);
    assert_eq!(fs::read_to_string(&count).unwrap(), "3\n");

    // Always fails: 1 + retries runs, then the last result is judged.
    fs::remove_file(&count).unwrap();
    let always = format!(
        "n=$(cat '{c}' 2>/dev/null || echo 0); n=$((n + 1)); echo $n > '{c}'\n\
         echo \"attempt $n\" >&2; exit 1",
        c = count.display()
    );
    let judge = Place::Notice.judge(BlockOn::Exit2, OnFailure::RetryThenAbort);
    let judgment = run_with_retries(&judge, 2, || {
        run_script(dir.path(), "always", &always, Duration::from_secs(10))
    });
    assert_eq!(
        judgment.verdict,
        Verdict::Abort {
            reason: "attempt 3".into()
        }
    );
    assert_eq!(fs::read_to_string(&count).unwrap(), "3\n");

    // The same under a gate's exit2 with plain retry: the last exit 2 blocks.
    fs::remove_file(&count).unwrap();
    let judge = Place::GatePre.judge(BlockOn::Failure, OnFailure::Retry);
    let judgment = run_with_retries(&judge, 1, || {
        run_script(dir.path(), "always", &always, Duration::from_secs(10))
    });
    assert_eq!(
        judgment.verdict,
        Verdict::Block {
            reason: "attempt 2".into()
        }
    );
}

/// A `when` that cannot be evaluated blocks wherever the hook can block, whatever `block_on`,
/// or aborts there when `on_failure` says so (unless `block_on: failure` blocks first, as for
/// any failure); elsewhere it is judged by `on_failure`; never re-run.
#[test]
fn a_when_error_blocks_where_the_hook_can_block() {
    let run = FinishedRun {
        exit_code: 1,
        stderr: b"h.yml:1: when: ${n} > 1: ...".to_vec(),
        ..FinishedRun::default()
    };
    let reason = "h.yml:1: when: ${n} > 1: ...".to_owned();
    for place in [Place::GatePre, Place::Notice, Place::Post] {
        for block_on in BLOCK_ON {
            for on_failure in ON_FAILURE {
                let judgment = place.judge(block_on, on_failure).judge_refused(&run);
                let reason = reason.clone();
                let aborts = matches!(on_failure, OnFailure::Abort | OnFailure::RetryThenAbort);
                let want = match (place, on_failure) {
                    (Place::GatePre, _) if aborts && block_on != BlockOn::Failure => {
                        Verdict::Abort { reason }
                    }
                    (Place::GatePre, _) => Verdict::Block { reason },
                    (_, OnFailure::Abort | OnFailure::RetryThenAbort) => Verdict::Abort { reason },
                    _ => Verdict::Failure { reason },
                };
                assert_eq!(judgment.verdict, want, "{place:?} {block_on} {on_failure}");
                assert!(!judgment.wants_retry(), "{place:?} {block_on} {on_failure}");
            }
        }
    }
}

#[test]
fn reason_from_stdout_reads_stdout_first() {
    let mut judge = Place::GatePre.judge(BlockOn::Exit2, OnFailure::Continue);
    judge.reason_from = ReasonFrom::Stdout;
    let both = FinishedRun {
        exit_code: 2,
        stdout: b"from stdout".to_vec(),
        stderr: b"from stderr".to_vec(),
        ..FinishedRun::default()
    };
    assert_eq!(
        judge.judge(&both).verdict,
        Verdict::Block {
            reason: "from stdout".into()
        }
    );
    let only_stderr = FinishedRun {
        stdout: Vec::new(),
        ..both
    };
    assert_eq!(
        judge.judge(&only_stderr).verdict,
        Verdict::Block {
            reason: "from stderr".into()
        }
    );
}

fn blocked_reason(judge: &Judge, run: &FinishedRun) -> String {
    match judge.judge(run).verdict {
        Verdict::Block { reason } => reason,
        other => panic!("not a block: {other:?}"),
    }
}

#[test]
fn long_reasons_shrink_to_the_log_and_tail_within_the_cap() {
    let stderr: String = (1..=300).map(|i| format!("error {i}\n")).collect();
    let run = FinishedRun {
        exit_code: 2,
        stderr: stderr.into_bytes(),
        log_path: Some("/state/logs/guard.log".into()),
        ..FinishedRun::default()
    };
    let mut judge = Place::GatePre.judge(BlockOn::Exit2, OnFailure::Continue);
    let reason = blocked_reason(&judge, &run);
    let tail: String = (286..=300).map(|i| format!("\nerror {i}")).collect();
    assert_eq!(
        reason,
        format!("(last 15 of 300 lines; full log: /state/logs/guard.log){tail}")
    );

    // A tighter cap shows fewer lines; the log path stays while it fits at all.
    judge.max_reason = 80;
    let reason = blocked_reason(&judge, &run);
    assert!(reason.chars().count() <= 80, "{reason}");
    assert!(reason.starts_with("(last 2 of 300 lines; full log: /state/logs/guard.log)"));
    assert!(reason.ends_with("error 299\nerror 300"), "{reason}");
    judge.max_reason = 10;
    assert_eq!(blocked_reason(&judge, &run), "(last 0 of");

    // When not even one line fits, the note alone is cut (on a character boundary).
    let wide = FinishedRun {
        exit_code: 2,
        stderr: "é".repeat(50).into_bytes(),
        ..FinishedRun::default()
    };
    judge.max_reason = 7;
    assert_eq!(blocked_reason(&judge, &wide), "(last 0");
    judge.max_reason = 0;
    assert_eq!(blocked_reason(&judge, &wide), "");
}

#[test]
fn reasons_and_context_lose_escape_sequences_and_bad_bytes() {
    let judge = Place::GatePre.judge(BlockOn::Exit2, OnFailure::Continue);
    let run = FinishedRun {
        exit_code: 2,
        stderr: b"\x1b[31mred\x1b[0m \xff\xfe end\r\n".to_vec(),
        ..FinishedRun::default()
    };
    assert_eq!(blocked_reason(&judge, &run), "red \u{fffd}\u{fffd} end");
    // Escape sequences alone are no reason: stdout is used.
    let run = FinishedRun {
        exit_code: 2,
        stderr: b"\x1b[0m".to_vec(),
        stdout: b"plain".to_vec(),
        ..FinishedRun::default()
    };
    assert_eq!(blocked_reason(&judge, &run), "plain");
    let run = FinishedRun {
        stdout: br#"{"additionalContext":"a\u001b[2Jb","decision":"block","reason":"x\u0007y"}"#
            .to_vec(),
        ..FinishedRun::default()
    };
    let judgment = judge.judge(&run);
    assert_eq!(judgment.context, ["ab"]);
    assert_eq!(
        judgment.verdict,
        Verdict::Block {
            reason: "xy".into()
        }
    );
}

#[test]
fn odd_json_fields_are_warned_and_ignored() {
    let judge = Place::GatePre.judge(BlockOn::Exit2, OnFailure::Continue);
    let cases: &[(&str, Verdict, usize)] = &[
        (r#"{"decision":"maybe"}"#, Verdict::Allow, 1),
        (r#"{"decision":true}"#, Verdict::Allow, 1),
        (r#"{"additionalContext":5}"#, Verdict::Allow, 1),
        (r#"{"hookSpecificOutput":"x"}"#, Verdict::Allow, 0),
        (r#"{"continue":true}"#, Verdict::Allow, 0),
        (
            r#"{"continue":false,"stopReason":7}"#,
            Verdict::Abort {
                reason: "stopped by the hook (continue: false)".into(),
            },
            1,
        ),
        (
            r#"{"decision":"block","reason":["a"],"feedback":"only feedback"}"#,
            Verdict::Block {
                reason: "only feedback".into(),
            },
            1,
        ),
        // A deeply nested object is refused by serde_json's depth limit, not the stack.
        (
            &*format!("{}{}", "[".repeat(100_000), "]".repeat(100_000)),
            Verdict::Allow,
            0,
        ),
    ];
    for (stdout, verdict, warnings) in cases {
        let judgment = judge.judge(&FinishedRun {
            stdout: stdout.as_bytes().to_vec(),
            ..FinishedRun::default()
        });
        assert_eq!(&judgment.verdict, verdict, "{stdout:.60}");
        assert_eq!(
            judgment.warnings.len(),
            *warnings,
            "{stdout:.60}: {judgment:?}"
        );
    }
}

fn judged(verdict: Verdict, context: &[&str]) -> Judgment {
    let mut judgment = Judgment::from(verdict);
    judgment.context = context.iter().map(|c| (*c).to_owned()).collect();
    judgment
}

#[test]
fn verdicts_combine_abort_over_block_over_allow() {
    let block = |r: &str| Verdict::Block { reason: r.into() };
    let abort = |r: &str| Verdict::Abort { reason: r.into() };
    let failure = Verdict::Failure {
        reason: "lint".into(),
    };
    let cases: Vec<(Vec<Verdict>, Decision, Option<&str>)> = vec![
        (vec![], Decision::Allow, None),
        (
            vec![Verdict::Allow, Verdict::Success, failure.clone()],
            Decision::Allow,
            None,
        ),
        (
            vec![Verdict::Allow, block("first"), block("second")],
            Decision::Block,
            Some("first"),
        ),
        (
            vec![block("first"), abort("stop"), block("third")],
            Decision::Abort,
            Some("stop"),
        ),
        (
            vec![abort("one"), abort("two"), block("b")],
            Decision::Abort,
            Some("one"),
        ),
        (vec![failure, Verdict::Allow], Decision::Allow, None),
    ];
    for (verdicts, decision, reason) in cases {
        let outcome = Outcome::combine(verdicts.iter().cloned().map(Judgment::from));
        assert_eq!(outcome.decision(), decision, "{verdicts:?}");
        assert_eq!(outcome.reason(), reason, "{verdicts:?}");
        assert_eq!(outcome.ends_pre_pass(), decision != Decision::Allow);
    }
}

#[test]
fn the_first_block_ends_the_pre_pass_and_context_keeps_its_order() {
    let hooks = [
        judged(Verdict::Allow, &["one"]),
        judged(Verdict::Success, &["two"]),
        judged(
            Verdict::Block {
                reason: "no".into(),
            },
            &["three"],
        ),
        judged(Verdict::Allow, &["never seen"]),
    ];
    // The engine's loop: push each judgment, stop when the outcome says so.
    let mut outcome = Outcome::new();
    let mut ran = 0;
    for judgment in hooks {
        ran += 1;
        outcome.push(judgment);
        if outcome.ends_pre_pass() {
            break;
        }
    }
    assert_eq!(ran, 3);
    assert_eq!(outcome.decision(), Decision::Block);
    assert_eq!(outcome.context(), ["one", "two", "three"]);
}

#[test]
fn the_reply_serialises_as_rule_4_says() {
    let allow = Outcome::combine([judged(Verdict::Allow, &["ctx"])]);
    // The result's keys in sorted order: the same text whether or not serde_json keeps
    // insertion order (its `preserve_order` feature is on when the whole workspace is built).
    let reply = allow.into_reply(
        "tool.before",
        vec![serde_json::json!({"blocked": false, "hookId": "guard"})],
        None,
    );
    assert_eq!(
        serde_json::to_string(&reply).unwrap(),
        r#"{"event":"tool.before","decision":"allow","reason":null,"context":["ctx"],"results":[{"blocked":false,"hookId":"guard"}],"attempt":null,"maxAttempts":null}"#
    );

    let block = Outcome::combine([judged(
        Verdict::Block {
            reason: "fix it".into(),
        },
        &[],
    )]);
    let reply = block.into_reply("turn.end", Vec::new(), Some((1, 3)));
    let text = serde_json::to_string(&reply).unwrap();
    assert_eq!(
        text,
        r#"{"event":"turn.end","decision":"block","reason":"fix it","context":[],"results":[],"attempt":1,"maxAttempts":3}"#
    );
    assert_eq!(serde_json::from_str::<Reply>(&text).unwrap(), reply);

    let abort = Outcome::combine([Judgment::from(Verdict::Abort {
        reason: "budget spent".into(),
    })]);
    let reply = abort.into_reply("session.stop", Vec::new(), Some((2, 3)));
    assert_eq!(reply.decision.as_str(), "abort");
    assert_eq!(reply.reason.as_deref(), Some("budget spent"));
}

proptest! {
    #[test]
    fn any_result_is_judged_without_panic_and_within_the_cap(
        stdout in proptest::collection::vec(any::<u8>(), 0..400),
        stderr in proptest::collection::vec(any::<u8>(), 0..400),
        exit_code in -1i32..300,
        timed_out in any::<bool>(),
        max_reason in 0usize..120,
        place in 0usize..3,
        block_on in 0usize..3,
        on_failure in 0usize..4,
    ) {
        let places = [Place::GatePre, Place::Notice, Place::Post];
        let mut judge = places[place].judge(BLOCK_ON[block_on], ON_FAILURE[on_failure]);
        judge.max_reason = max_reason;
        let run = FinishedRun {
            exit_code,
            timed_out: timed_out.then_some(TIMEOUT),
            stdout,
            stderr,
            log_path: Some("/state/logs/x.log".into()),
        };
        let judgment = judge.judge(&run);
        match &judgment.verdict {
            Verdict::Block { reason } | Verdict::Abort { reason } | Verdict::Failure { reason } => {
                prop_assert!(reason.chars().count() <= max_reason);
            }
            Verdict::Allow | Verdict::Success => {}
        }
        let can_block = matches!(places[place], Place::GatePre);
        if !can_block {
            let decided = matches!(judgment.verdict, Verdict::Block { .. } | Verdict::Allow);
            prop_assert!(!decided, "a hook that cannot block decided: {:?}", judgment);
        }
    }
}

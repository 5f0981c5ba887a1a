//! The retries of session hooks, through the run step (crate::fire's `SessionStep`).

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use std::fs;
    use std::time::Duration;

    use crate::exec::CancelToken;
    use crate::session::Backoff;
    use crate::session::tests::Fixture;
    use crate::session::{STOPPED_NOTE, SessionOptions, run_session};
    use crate::status::RunResult;

    /// Written from discobot's `TestRunSessionHookWithRetry` ("retries until success", "marks
    /// failure after ten attempts") and `TestRunSessionHookPersistsAggregateStatusAfterRetries`:
    /// a failing session hook is run again, in one run that records one result, with the output
    /// of every attempt under its header in the one log.
    #[test]
    fn a_failing_hook_is_retried_in_one_run_that_records_one_result() {
        let f = Fixture::new();
        // Each attempt counts itself in `<hook>.count` and exits with the code `exits` gives it.
        let counting = |exits: &str| {
            format!(
                "n=$(($(cat \"$0.count\" 2>/dev/null || echo 0) + 1)); echo $n > \"$0.count\"\n\
                 code=$({exits}); echo \"attempt $n: exit $code\"; exit $code"
            )
        };
        // (file, extra front matter, exit codes by attempt, attempts, exit code, log)
        type Row<'a> = (&'a str, &'a str, &'a str, u32, i32, &'a str);
        let table: &[Row] = &[
            (
                "10-third-time.sh",
                "",
                "[ $n -lt 3 ] && echo 1 || echo 0",
                3,
                0,
                "=== Attempt 1/10 ===\nattempt 1: exit 1\n\n=== Attempt 2/10 ===\nattempt 2: exit 1\n\n\
                 === Attempt 3/10 ===\nattempt 3: exit 0\n",
            ),
            (
                "20-never.sh",
                "# retries: 2\n",
                "echo $((10 + n))",
                3,
                13,
                "=== Attempt 1/3 ===\nattempt 1: exit 11\n\n=== Attempt 2/3 ===\nattempt 2: exit 12\n\n\
                 === Attempt 3/3 ===\nattempt 3: exit 13\n",
            ),
            (
                "30-off.sh",
                "# retries: 0\n",
                "echo 7",
                1,
                7,
                "attempt 1: exit 7\n",
            ),
            ("40-fine.sh", "", "echo 0", 1, 0, "attempt 1: exit 0\n"),
        ];
        for (file, front, exits, ..) in table {
            f.hook(file, front, &counting(exits));
        }
        let plan = f.plan();
        let runs = run_session(&f.ctx, &plan.background, &SessionOptions::default(), |_| {});
        let status = f.status();
        let mut wrong = Vec::new();
        for (run, &(file, _, _, attempts, code, log)) in runs.iter().zip(table) {
            let id = &run.hook_id;
            let count = fs::read_to_string(f.ctx.hooks_dir().join(format!("{file}.count")));
            let entry = &status.hooks[id];
            let got = (
                count.map(|c| c.trim().to_owned()).unwrap_or_default(),
                run.exit_code,
                run.success,
                entry.last_exit_code,
                entry.last_result,
                (
                    entry.run_count,
                    entry.fail_count,
                    entry.consecutive_failures,
                ),
                fs::read_to_string(&run.log_path).unwrap_or_default(),
            );
            let failed = u64::from(code != 0);
            let want = (
                attempts.to_string(),
                Some(code),
                code == 0,
                Some(code),
                if code == 0 {
                    RunResult::Success
                } else {
                    RunResult::Failure
                },
                (1, failed, failed),
                log.to_owned(),
            );
            if got != want {
                wrong.push(format!("{id}: got {got:?}\n  want {want:?}"));
            }
        }
        assert_eq!(runs.len(), table.len(), "{runs:?}");
        assert!(wrong.is_empty(), "\n{}", wrong.join("\n"));
    }

    /// Written from discobot's `TestRunSessionHookWithRetry` ("marks failure after ten
    /// attempts"): without `retries`, a hook that always fails runs ten times, records the last
    /// exit code, and `after_attempt` hears of every attempt.
    #[test]
    fn ten_attempts_by_default_and_the_last_exit_code() {
        use std::sync::Mutex;
        /// (number, of, exit code, wait before the next) of each attempt.
        type Seen = (u32, u32, i32, Option<Duration>);
        static SEEN: Mutex<Vec<Seen>> = Mutex::new(Vec::new());
        let f = Fixture::new();
        f.hook("10-always.sh", "", "echo still failing; exit 17");
        let plan = f.plan();
        let backoff = Backoff {
            first: Duration::from_millis(1),
            max: Duration::from_millis(4),
        };
        let options = SessionOptions {
            backoff,
            after_attempt: Some(|a| {
                let seen = (a.number, a.of, a.exit_code, a.retry_in);
                SEEN.lock().unwrap().push(seen);
            }),
            ..SessionOptions::default()
        };
        let runs = run_session(&f.ctx, &plan.background, &options, |_| {});
        assert_eq!(
            (runs[0].exit_code, runs[0].success, runs[0].attempts),
            (Some(17), false, 10)
        );
        let waits = [1, 2, 4, 4, 4, 4, 4, 4, 4].map(Duration::from_millis);
        let expected: Vec<_> = (1..=10)
            .map(|n| (n, 10, 17, waits.get(n as usize - 1).copied()))
            .collect();
        assert_eq!(*SEEN.lock().unwrap(), expected);
        let entry = &f.status().hooks["10-always"];
        assert_eq!(
            (entry.run_count, entry.fail_count, entry.last_exit_code),
            (1, 1, Some(17))
        );
        let log = fs::read_to_string(f.ctx.log_path("10-always")).unwrap();
        let headers: Vec<_> = log.lines().filter(|l| l.starts_with("===")).collect();
        assert_eq!(headers.len(), 10, "{log}");
        assert!(
            log.ends_with("\n=== Attempt 10/10 ===\nstill failing\n"),
            "{log}"
        );
    }

    /// A cancel ends the wait for the next attempt at once: the run is recorded as stopped with
    /// its last attempt's exit code, and no other attempt starts.
    #[test]
    fn a_cancel_ends_the_wait_between_attempts_at_once() {
        use std::sync::atomic::{AtomicBool, Ordering};
        /// Set as the first attempt ends with a retry to come, just before the wait.
        static WAITING: AtomicBool = AtomicBool::new(false);
        let f = Fixture::new();
        f.hook("10-down.sh", "", "echo down; exit 4");
        let plan = f.plan();
        let log = f.ctx.log_path("10-down");
        let cancel = CancelToken::new();
        let canceller = {
            let cancel = cancel.clone();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(30);
                while !WAITING.load(Ordering::SeqCst) && Instant::now() < deadline {
                    std::thread::sleep(Duration::from_millis(5));
                }
                cancel.cancel();
                Instant::now()
            })
        };
        let options = SessionOptions {
            cancel: Some(cancel),
            backoff: Backoff {
                first: Duration::from_secs(600),
                max: Duration::from_secs(600),
            },
            after_attempt: Some(|a| {
                if a.retry_in.is_some() {
                    WAITING.store(true, Ordering::SeqCst);
                }
            }),
            ..SessionOptions::default()
        };
        let runs = run_session(&f.ctx, &plan.background, &options, |_| {});
        let cancelled_at = canceller.join().unwrap();
        assert!(cancelled_at.elapsed() < Duration::from_secs(5));
        assert_eq!(runs[0].exit_code, Some(4));
        assert_eq!(runs[0].attempts, 1);
        assert_eq!(runs[0].note.as_deref(), Some(STOPPED_NOTE));
        let entry = &f.status().hooks["10-down"];
        assert_eq!(entry.last_result, RunResult::Failure);
        assert_eq!(entry.note.as_deref(), Some(STOPPED_NOTE));
        assert_eq!(
            fs::read_to_string(&log).unwrap(),
            format!("down\n[{STOPPED_NOTE}, before attempt 2/10]\n")
        );
    }

    #[test]
    fn backoff_doubles_up_to_its_most() {
        let backoff = Backoff::default();
        let waits: Vec<f64> = (2..=11).map(|n| backoff.before(n).as_secs_f64()).collect();
        assert_eq!(waits, [0.5, 1.0, 2.0, 4.0, 5.0, 5.0, 5.0, 5.0, 5.0, 5.0]);
        assert_eq!(backoff.before(u32::MAX), Duration::from_secs(5));
    }
}

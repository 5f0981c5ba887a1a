//! `/metrics` in the Prometheus text format (version 0.0.4).
//!
//! Run and failure counts come from `status.json` itself (they survive restarts and count runs
//! made by anyone); durations are the runs this server saw finish; re-prompts, gave-ups and
//! evaluations are what this server decided.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;

use hookvisor_core::watch::ScanKind;
use hookvisor_core::{Action, Discovery, EvalReport, RunResult, Status};

/// Upper bounds of the duration buckets, in seconds: hooks take from milliseconds (a formatter)
/// to their 15-minute default timeout (a test suite).
const BUCKETS: [f64; 11] = [
    0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0, 900.0,
];

/// The content type Prometheus expects for the text format.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

#[derive(Debug, Default, Clone)]
struct Histogram {
    /// Cumulative counts, one per bucket of [`BUCKETS`].
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        for (bound, n) in BUCKETS.iter().zip(self.buckets.iter_mut()) {
            if seconds <= *bound {
                *n += 1;
            }
        }
        self.count += 1;
        self.sum += seconds;
    }
}

#[derive(Debug, Default)]
struct Inner {
    durations: BTreeMap<String, Histogram>,
    reprompts: BTreeMap<String, u64>,
    gave_ups: BTreeMap<String, u64>,
    evaluations: BTreeMap<&'static str, u64>,
    scans: BTreeMap<&'static str, u64>,
    /// git fsmonitor answers: from the journal, and "everything".
    fsmonitor: [u64; 2],
    /// Directories the change watcher watches; 0 while it starts or without inotify.
    watched_dirs: usize,
}

/// What the server counted since it started.
#[derive(Debug, Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    /// Records a run that finished, seen in `status.json`.
    pub fn observe_run(&self, hook_id: &str, duration_ms: u64) {
        let mut inner = self.inner.lock().expect("metrics lock");
        inner
            .durations
            .entry(hook_id.to_owned())
            .or_default()
            .observe(duration_ms as f64 / 1000.0);
    }

    /// Records how many directories the change watcher watches.
    pub fn set_watched_dirs(&self, n: usize) {
        self.inner.lock().expect("metrics lock").watched_dirs = n;
    }

    /// Records how an evaluation's scan was answered (in full, from the touched paths, unchanged).
    pub fn record_scan(&self, kind: ScanKind) {
        let mut inner = self.inner.lock().expect("metrics lock");
        *inner.scans.entry(scan_name(kind)).or_default() += 1;
    }

    /// Records a git fsmonitor answer: `everything` (`/`), or the paths from the journal.
    pub fn record_fsmonitor(&self, everything: bool) {
        self.inner.lock().expect("metrics lock").fsmonitor[usize::from(everything)] += 1;
    }

    /// Records the outcome of an evaluation: its action, and the hook that re-prompted or gave up.
    pub fn record_evaluation(&self, report: &EvalReport) {
        let mut inner = self.inner.lock().expect("metrics lock");
        *inner
            .evaluations
            .entry(action_name(report.action))
            .or_default() += 1;
        let failed = report.results.iter().rfind(|r| !r.success);
        if let Some(failed) = failed {
            let counter = match report.action {
                Action::Reprompt => Some(&mut inner.reprompts),
                Action::GaveUp => Some(&mut inner.gave_ups),
                _ => None,
            };
            if let Some(counter) = counter {
                *counter.entry(failed.hook_id.clone()).or_default() += 1;
            }
        }
    }

    /// The whole exposition, from `status` and the hooks discovered now.
    pub fn render(&self, status: &Status, discovery: &Discovery) -> String {
        let inner = self.inner.lock().expect("metrics lock");
        // Every hook known by either the files or the record gets every per-hook series, so
        // a dashboard sees a zero rather than a gap.
        let mut ids: Vec<&str> = (discovery.hooks.iter())
            .filter(|h| h.phase1)
            .map(|h| h.id.as_str())
            .collect();
        ids.extend(status.hooks.keys().map(String::as_str));
        ids.sort_unstable();
        ids.dedup();

        let mut out = String::new();
        let per_hook =
            |out: &mut String, name: &str, kind: &str, help: &str, value: &dyn Fn(&str) -> u64| {
                header(out, name, kind, help);
                for id in &ids {
                    let _ = writeln!(out, "{name}{{hook=\"{}\"}} {}", escape(id), value(id));
                }
            };
        let entry = |id: &str| status.hooks.get(id);
        per_hook(
            &mut out,
            "hookvisor_hook_runs_total",
            "counter",
            "Finished runs of a hook, as recorded in status.json.",
            &|id| entry(id).map_or(0, |e| e.run_count),
        );
        per_hook(
            &mut out,
            "hookvisor_hook_failures_total",
            "counter",
            "Failed runs of a hook, as recorded in status.json.",
            &|id| entry(id).map_or(0, |e| e.fail_count),
        );
        per_hook(
            &mut out,
            "hookvisor_hook_pending",
            "gauge",
            "1 while a file hook waits to run at the end of a turn.",
            &|id| u64::from(status.pending_hooks.iter().any(|p| p == id)),
        );
        per_hook(
            &mut out,
            "hookvisor_hook_running",
            "gauge",
            "1 while a hook runs.",
            &|id| u64::from(entry(id).is_some_and(|e| e.last_result == RunResult::Running)),
        );
        per_hook(
            &mut out,
            "hookvisor_hook_reprompts_total",
            "counter",
            "Re-prompts sent to the model because this hook failed.",
            &|id| inner.reprompts.get(id).copied().unwrap_or(0),
        );
        per_hook(
            &mut out,
            "hookvisor_hook_gave_ups_total",
            "counter",
            "Evaluations that stopped re-prompting for this hook (loop guard).",
            &|id| inner.gave_ups.get(id).copied().unwrap_or(0),
        );

        header(
            &mut out,
            "hookvisor_hook_duration_seconds",
            "histogram",
            "Duration of the hook runs this server saw finish.",
        );
        for (id, h) in &inner.durations {
            let id = escape(id);
            for (bound, n) in BUCKETS.iter().zip(h.buckets) {
                let _ = writeln!(
                    out,
                    "hookvisor_hook_duration_seconds_bucket{{hook=\"{id}\",le=\"{bound}\"}} {n}"
                );
            }
            let _ = writeln!(
                out,
                "hookvisor_hook_duration_seconds_bucket{{hook=\"{id}\",le=\"+Inf\"}} {}",
                h.count
            );
            let _ = writeln!(
                out,
                "hookvisor_hook_duration_seconds_sum{{hook=\"{id}\"}} {}",
                h.sum
            );
            let _ = writeln!(
                out,
                "hookvisor_hook_duration_seconds_count{{hook=\"{id}\"}} {}",
                h.count
            );
        }

        header(
            &mut out,
            "hookvisor_pending_hooks",
            "gauge",
            "File hooks waiting to run at the end of a turn.",
        );
        let _ = writeln!(
            out,
            "hookvisor_pending_hooks {}",
            status.pending_hooks.len()
        );
        header(
            &mut out,
            "hookvisor_hook_problems",
            "gauge",
            "Files in the hooks directory that will not run (see hookvisor check).",
        );
        let _ = writeln!(out, "hookvisor_hook_problems {}", discovery.problems.len());
        header(
            &mut out,
            "hookvisor_evaluations_total",
            "counter",
            "End-of-turn evaluations run by this server, by action.",
        );
        for action in [
            Action::Pass,
            Action::Reprompt,
            Action::Failed,
            Action::GaveUp,
        ] {
            let name = action_name(action);
            let n = inner.evaluations.get(name).copied().unwrap_or(0);
            let _ = writeln!(out, "hookvisor_evaluations_total{{action=\"{name}\"}} {n}");
        }
        header(
            &mut out,
            "hookvisor_scans_total",
            "counter",
            "End-of-turn change scans by how they were answered: a full git status, git status of \
             the paths the file watcher saw change, or nothing changed.",
        );
        for kind in [ScanKind::Full, ScanKind::Touched, ScanKind::Unchanged] {
            let name = scan_name(kind);
            let n = inner.scans.get(name).copied().unwrap_or(0);
            let _ = writeln!(out, "hookvisor_scans_total{{kind=\"{name}\"}} {n}");
        }
        header(
            &mut out,
            "hookvisor_fsmonitor_answers_total",
            "counter",
            "git fsmonitor hook answers (POST /v1/fsmonitor): the paths changed since the token, \
             from the file watcher's journal, or everything (git checks every file).",
        );
        for (i, kind) in ["paths", "everything"].iter().enumerate() {
            let n = inner.fsmonitor[i];
            let _ = writeln!(
                out,
                "hookvisor_fsmonitor_answers_total{{kind=\"{kind}\"}} {n}"
            );
        }
        header(
            &mut out,
            "hookvisor_watched_dirs",
            "gauge",
            "Workspace directories watched for changes (0: every turn scans in full).",
        );
        let _ = writeln!(out, "hookvisor_watched_dirs {}", inner.watched_dirs);
        out
    }
}

fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

fn scan_name(kind: ScanKind) -> &'static str {
    match kind {
        ScanKind::Full => "full",
        ScanKind::Touched => "touched",
        ScanKind::Unchanged => "unchanged",
    }
}

fn action_name(action: Action) -> &'static str {
    match action {
        Action::Pass => "pass",
        Action::Reprompt => "reprompt",
        Action::Failed => "failed",
        Action::GaveUp => "gave_up",
        #[allow(unreachable_patterns)]
        _ => "other",
    }
}

/// Escapes a label value as the text format requires: backslash, double quote and newline.
fn escape(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for c in value.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_values_are_escaped() {
        let cases = [
            ("lint", "lint"),
            ("a\"b", "a\\\"b"),
            ("a\\b", "a\\\\b"),
            ("a\nb", "a\\nb"),
        ];
        for (raw, want) in cases {
            assert_eq!(escape(raw), want, "{raw:?}");
        }
    }

    #[test]
    fn buckets_are_cumulative() {
        let cases: [(&[f64], [u64; 3]); 3] = [
            (&[], [0, 0, 0]),
            (&[0.01], [1, 1, 1]),
            (&[0.07, 0.2, 1000.0], [0, 1, 2]),
        ];
        for (samples, want) in cases {
            let mut h = Histogram::default();
            for s in samples {
                h.observe(*s);
            }
            assert_eq!(&h.buckets[..3], &want, "{samples:?}");
            assert_eq!(h.count, samples.len() as u64);
            assert!(h.buckets.windows(2).all(|w| w[0] <= w[1]));
        }
    }

    #[test]
    fn every_known_hook_gets_every_series() {
        let metrics = Metrics::default();
        metrics.observe_run("lint", 1200);
        let mut status = Status::default();
        status.pending_hooks = vec!["fmt".into()];
        let text = metrics.render(&status, &Discovery::default());
        for line in [
            "hookvisor_hook_duration_seconds_bucket{hook=\"lint\",le=\"2.5\"} 1",
            "hookvisor_hook_duration_seconds_bucket{hook=\"lint\",le=\"1\"} 0",
            "hookvisor_hook_duration_seconds_count{hook=\"lint\"} 1",
            "hookvisor_pending_hooks 1",
            "hookvisor_evaluations_total{action=\"gave_up\"} 0",
        ] {
            assert!(
                text.lines().any(|l| l == line),
                "{line} missing from\n{text}"
            );
        }
    }
}

//! Records and what the run knew of each level turned into the report and the exit
//! code: the one report path of `bench`, `plan` and `report`, kept apart so the core's
//! pure `assemble` can take its place.

use crate::exit::Exit;
use cadence_bench::{Load, RunPlan, RunSummary, StopReason};
use cadence_core::metrics::{summarize_level, LevelOptions, LevelSummary};
use cadence_core::report::{level_report, Report, RunInfo};
use cadence_core::runlog::{LevelMeta, RunChecks};
use cadence_core::slo::error_ceiling;
use cadence_core::{
    chart_data, convention_views, goodput, pacing, time_series, Convention, Outcome, RequestRecord,
    Slo,
};
use std::time::Duration;

/// What each level is judged against.
#[derive(Debug, Clone)]
pub struct Checks {
    pub stall_threshold: Duration,
    pub slos: Vec<Slo>,
    /// Share of late sends (open loop) above which a level is invalid.
    pub max_late: f64,
    pub time_bucket: Duration,
    /// The convention the summary tables lead with (`--convention`).
    pub convention: Option<Convention>,
    /// Share of failed requests above which a level fails (`--max-error-rate`).
    pub max_error_rate: f64,
}

impl Checks {
    /// As the records file's run line holds them.
    pub fn to_meta(&self) -> RunChecks {
        RunChecks {
            stall_threshold_ms: self.stall_threshold.as_secs_f64() * 1e3,
            slos: self.slos.iter().map(|s| s.to_string()).collect(),
            max_late: self.max_late,
            time_bucket_ms: self.time_bucket.as_secs_f64() * 1e3,
            convention: self.convention.map(|c| c.name().to_string()),
            max_error_rate: Some(self.max_error_rate),
        }
    }
}

/// What the run knew about a level beyond its records: its identity, the load it was
/// meant to carry, and the warnings only the run could see (event-loop lag, CPU use,
/// the watchdog, streams aborted after the grace period).
pub fn level_meta(plan: &RunPlan, summary: &RunSummary) -> LevelMeta {
    let mut warnings = Vec::new();
    if summary.watchdog_fired {
        warnings.push("the watchdog ended requests that did not stop when cancelled".into());
    }
    let (lag_p99, lag_max) = summary.loop_lag;
    if lag_p99 > Duration::from_millis(5) {
        warnings.push(format!(
            "the client's event loop lagged (p99 {:.1} ms, max {:.1} ms): timestamps may be late by up to that much",
            lag_p99.as_secs_f64() * 1e3,
            lag_max.as_secs_f64() * 1e3
        ));
    }
    if let Some(cpu) = summary.cpu {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
        let share = cpu.as_secs_f64() / summary.wall.as_secs_f64().max(1e-9) / cores;
        if share > 0.85 {
            warnings.push(format!(
                "this process used {:.0} % of the machine's {cores} cores during the level: the client (and the built-in simulator, if used) may have been CPU-bound, delaying timestamps",
                share * 100.0
            ));
        }
    }
    if summary.aborted_in_flight > 0 {
        warnings.push(format!(
            "{} requests were still streaming after the grace period and were aborted (their tokens are kept in the records)",
            summary.aborted_in_flight
        ));
    }
    let (concurrency, rate) = match plan.load {
        Load::Closed { concurrency } => (Some(concurrency), None),
        Load::Open { rate, .. } => (None, Some(rate)),
        Load::Trace { .. } => (None, None),
    };
    LevelMeta {
        level: plan.level,
        name: plan.load.label(),
        concurrency,
        rate,
        intended: Some(summary.intended),
        stopped_early: summary.stopped_early.clone(),
        warnings,
        invalid: summary.watchdog_fired,
        interrupted: summary.stop == StopReason::Interrupted,
    }
}

/// Issue 20's checks of a level's answers, each a warning: short answers, and an error
/// rate above the ceiling (the level breaches: the result is whether it did).
fn answer_checks(level: &mut LevelSummary, max_error_rate: f64) -> bool {
    let short = level
        .counters
        .short_answer_warning(level.requests.succeeded);
    level.warnings.extend(short);
    let ceiling = error_ceiling(&level.requests, max_error_rate);
    let breached = ceiling.is_some();
    level.warnings.extend(ceiling);
    breached
}

/// Turns records and what the run knew of each level into the report, with the
/// warnings a reader needs, and decides the exit code. `cadence report` calls it on a
/// saved records file, so a rebuilt report is the bench's own.
pub fn build_report(
    info: RunInfo,
    levels: &[LevelMeta],
    records: &[RequestRecord],
    checks: &Checks,
) -> (Report, Exit) {
    let stall_threshold = checks.stall_threshold;
    let mut slo_breached = false;
    let mut warnings = Vec::new();
    let mut exit = Exit::Ok;
    let mut level_reports = Vec::new();
    let mut any_success = false;
    for meta in levels {
        let recs: Vec<RequestRecord> = records
            .iter()
            .filter(|r| r.level == meta.level)
            .cloned()
            .collect();
        let warmup_seen = recs.iter().filter(|r| r.warmup).count() as u64;
        let opts = LevelOptions {
            stall_threshold_ns: stall_threshold.as_nanos() as u64,
            window: None,
            intended: meta.intended.map(|n| n.saturating_sub(warmup_seen)),
            // Dropped arrivals have records of their own (no send time).
            dropped: 0,
        };
        let mut level = summarize_level(&recs, &opts);
        if let Err(e) = level.requests.check() {
            level
                .warnings
                .push(format!("accounting does not add up: {e}"));
            exit = Exit::Invalid;
        }
        any_success |= level.requests.succeeded > 0;
        if let Some(w) = cadence_core::outcome::client_limit_warning(&level.requests.failed) {
            level.warnings.push(w);
            exit = Exit::Invalid;
        }
        if meta.invalid {
            exit = Exit::Invalid;
        }
        level.warnings.extend(meta.warnings.iter().cloned());
        let chunks: u64 = recs.iter().map(|r| r.chunks.len() as u64).sum();
        let coalesced: u64 = recs.iter().map(|r| r.counters.coalesced as u64).sum();
        if chunks > 0 && coalesced * 100 > chunks {
            level.warnings.push(format!(
                "{coalesced} of {chunks} chunks arrived in the same read as an earlier one: gaps between them read as 0 (the server batched them, or the client fell behind)"
            ));
        }
        level.warnings.extend(record_warnings(&recs));
        slo_breached |= answer_checks(&mut level, checks.max_error_rate);
        let window_s = level.throughput.window_s;
        let mut lr = level_report(meta.name.clone(), level);
        lr.pacing = pacing(&recs, 0, checks.max_late);
        if lr.pacing.as_ref().is_some_and(|p| p.invalid) {
            exit = Exit::Invalid;
        }
        if !checks.slos.is_empty() {
            lr.slos = checks
                .slos
                .iter()
                .map(|s| s.evaluate(&lr.summary))
                .collect();
            lr.goodput = Some(goodput(&recs, &checks.slos, window_s));
            slo_breached |= lr.slos.iter().any(|r| !r.pass);
        }
        // Buckets run on the run clock; a later sweep level starts where it starts.
        lr.time_series = time_series(&recs, checks.time_bucket.as_nanos().max(1) as u64)
            .into_iter()
            .skip_while(|b| b.completed == 0 && b.failed == 0 && b.output_tokens == 0)
            .collect();
        lr.stopped_early = meta.stopped_early.clone();
        lr.concurrency = meta.concurrency;
        lr.rate = meta.rate;
        if lr.summary.requests.succeeded > 0 {
            lr.conventions = convention_views(&recs);
        }
        lr.charts = chart_data(&recs);
        level_reports.push(lr);
    }
    if !any_success && records.iter().any(|r| r.was_sent()) {
        warnings.push("no request succeeded: the latency figures are empty".into());
        exit = Exit::Invalid;
    }
    let mut report = Report::new(info, level_reports, warnings);
    report.convention = checks.convention.map(|c| c.name().to_string());
    if slo_breached && exit == Exit::Ok {
        exit = Exit::SloBreached;
    }
    // The user who pressed Ctrl-C knows the run is partial; say interrupted, not invalid.
    if levels.iter().any(|m| m.interrupted) {
        exit = Exit::Interrupted;
    }
    (report, exit)
}

/// What the records say that the figures alone do not: why requests failed (the
/// commonest message per class), requests resent on a stale connection, and chunks
/// that carried several tokens without saying how many.
fn record_warnings(recs: &[RequestRecord]) -> Vec<String> {
    use std::collections::BTreeMap;
    let mut out = Vec::new();
    let mut by_class: BTreeMap<&'static str, BTreeMap<String, u64>> = BTreeMap::new();
    for r in recs.iter().filter(|r| r.outcome.is_failure() && !r.warmup) {
        let msg: String = r
            .error
            .as_deref()
            .unwrap_or("no detail")
            .chars()
            .take(200)
            .collect();
        *by_class
            .entry(r.outcome.name())
            .or_default()
            .entry(msg)
            .or_default() += 1;
    }
    for (class, msgs) in by_class {
        let total: u64 = msgs.values().sum();
        let (msg, n) = msgs.iter().max_by_key(|(_, n)| **n).expect("non-empty");
        let others = if msgs.len() > 1 {
            format!(" ({} other messages; see the records)", msgs.len() - 1)
        } else {
            String::new()
        };
        out.push(format!("{total} × {class}: {msg} [{n}×]{others}"));
    }
    let resent = recs
        .iter()
        .filter(|r| r.counters.stale_connection_retries > 0)
        .count();
    if resent > 0 {
        out.push(format!(
            "{resent} requests were sent again because the server had closed the pooled keep-alive connection before answering (the server closes connections after streams); send time is the resend"
        ));
    }
    let ok: Vec<&RequestRecord> = recs
        .iter()
        .filter(|r| r.outcome == Outcome::Succeeded && !r.warmup)
        .collect();
    let unknown_multi = ok
        .iter()
        .filter(|r| {
            r.output_tokens
                .is_some_and(|t| t.count > r.chunks.len() as u64)
                && r.chunks.iter().all(|c| c.tokens().is_none())
        })
        .count();
    if unknown_multi > 0 {
        let tokens: u64 = ok
            .iter()
            .filter_map(|r| r.output_tokens.map(|t| t.count))
            .fold(0, u64::saturating_add);
        let chunks: usize = ok.iter().map(|r| r.chunks.len()).sum();
        out.push(format!(
            "in {unknown_multi} of {} requests the server reported more tokens than chunks ({tokens} tokens in {chunks} chunks overall): some chunks carry several tokens but do not say which, so ITL per token equals ITL per chunk there",
            ok.len()
        ));
    }
    out
}

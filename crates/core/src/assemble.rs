//! Report assembly as a pure function: from what the run knew (its info, each level's
//! metadata, the checks) and the level aggregators, the [`Report`] and a [`Verdict`].
//! `bench`, `plan` and `report` all end here, so a rebuilt report is the bench's own.

use crate::level::{LevelAggregator, LevelAggregators, LevelConfig};
use crate::metrics::{LevelOptions, LevelSummary};
use crate::report::{level_report, LevelReport, Report, RunInfo};
use crate::runlog::{LevelMeta, RunChecks};
use crate::{Convention, Slo};
use std::time::Duration;

/// What each level is judged against.
#[derive(Debug, Clone)]
pub struct Checks {
    /// ITL gaps longer than this are stalls (`--stall-threshold`).
    pub stall_threshold: Duration,
    /// The SLOs each level is held to (`--slo`).
    pub slos: Vec<Slo>,
    /// Share of late sends (open loop) above which a level is invalid.
    pub max_late: f64,
    /// The width of the time series' buckets (`--time-bucket`).
    pub time_bucket: Duration,
    /// The convention the summary tables lead with (`--convention`).
    pub convention: Option<Convention>,
    /// Values a level keeps exactly before its distributions are bucketed
    /// (`--exact-samples`, default [`crate::level::DEFAULT_EXACT_SAMPLES`]).
    pub exact_samples: u64,
    /// Share of failed requests above which a level fails (`--max-error-rate`; 1.0
    /// turns the ceiling off).
    pub max_error_rate: f64,
    /// Sessions re-priced at other TTFT/ITL (`--what-if`).
    pub what_if: Vec<crate::sessions::WhatIf>,
    /// The share of a closed-loop level's concurrency in flight that makes its plateau
    /// (`--plateau`, default [`crate::plateau::DEFAULT_SHARE`]; 0 turns it off).
    pub plateau: f64,
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
            exact_samples: (self.exact_samples != crate::level::DEFAULT_EXACT_SAMPLES)
                .then_some(self.exact_samples),
            what_if: self.what_if.iter().map(|w| w.to_string()).collect(),
            plateau: (self.plateau != crate::plateau::DEFAULT_SHARE).then_some(self.plateau),
        }
    }

    /// How each level's records are aggregated under these checks.
    pub fn level_config(&self) -> LevelConfig {
        LevelConfig {
            stall_threshold_ns: self.stall_threshold.as_nanos() as u64,
            time_bucket_ns: self.time_bucket.as_nanos().max(1) as u64,
            slos: self.slos.clone(),
            max_late: self.max_late,
            exact_samples: self.exact_samples,
            what_if: self.what_if.clone(),
            ..LevelConfig::default()
        }
    }

    /// Empty aggregators for these checks, ready to take a run's records.
    pub fn aggregators(&self) -> LevelAggregators {
        LevelAggregators::new(self.level_config())
    }
}

/// What the run amounts to, in the order a caller maps it to an exit status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to flag: every level valid, every SLO met, not interrupted.
    Ok,
    /// Some level missed an SLO.
    SloBreached,
    /// The figures cannot be trusted: accounting broken, the watchdog fired, the
    /// client fell behind its schedule, or nothing succeeded.
    Invalid,
    /// Ctrl-C cut the run short (it wins over the others: the user knows).
    Interrupted,
}

/// What the run knew about a level beyond its records, as plain values (the bench reads
/// the clocks and CPU time; this turns them into the level's metadata and warnings).
#[derive(Debug, Clone, PartialEq)]
pub struct LevelFacts {
    /// The records' `level` field.
    pub level: u32,
    /// The level's name as printed (`concurrency=8`, `rate=5/s`).
    pub name: String,
    /// Closed loop: the clients kept in flight; `None` when paced by rate.
    pub concurrency: Option<u32>,
    /// Open loop: the arrival rate, requests/s; `None` for a closed loop.
    pub rate: Option<f64>,
    /// Requests the load intended, warm-up included.
    pub intended: u64,
    /// Why the level ended before its plan, in words; `None` when it ran its course.
    pub stopped_early: Option<String>,
    /// The watchdog had to end requests that did not stop when cancelled.
    pub watchdog_fired: bool,
    /// Event-loop lag p99 and max.
    pub loop_lag: (Duration, Duration),
    /// CPU time the process used during the level, when known.
    pub cpu: Option<Duration>,
    /// Wall time of the level.
    pub wall: Duration,
    /// Cores of the machine.
    pub cores: usize,
    /// Requests still streaming after the grace period, aborted.
    pub aborted_in_flight: u64,
    /// Ctrl-C cut the level short.
    pub interrupted: bool,
    /// The machine's timer floor while the level sent on a schedule.
    pub floor: Option<crate::pacing::TimerFloor>,
}

/// Event-loop lag (p99) above which a level's timestamps are called into doubt.
pub const LOOP_LAG_WARN: Duration = Duration::from_millis(5);

/// Share of the machine's cores above which the client may have been CPU-bound.
pub const CPU_SHARE_WARN: f64 = 0.85;

impl LevelFacts {
    /// The share of the machine's cores the process kept busy during the level (CPU
    /// time / wall time / cores), when its CPU time is known.
    pub fn cpu_share(&self) -> Option<f64> {
        self.cpu.map(|cpu| {
            cpu.as_secs_f64() / self.wall.as_secs_f64().max(1e-9) / self.cores.max(1) as f64
        })
    }
}

/// The level's metadata, with the warnings only the run could see (event-loop lag, CPU
/// use, the watchdog, streams aborted after the grace period).
pub fn level_meta(f: &LevelFacts) -> LevelMeta {
    let mut warnings = Vec::new();
    if f.watchdog_fired {
        warnings.push("the watchdog ended requests that did not stop when cancelled".into());
    }
    let (lag_p99, lag_max) = f.loop_lag;
    if lag_p99 > LOOP_LAG_WARN {
        warnings.push(format!(
            "the client's event loop lagged (p99 {:.1} ms, max {:.1} ms): timestamps may be late by up to that much",
            lag_p99.as_secs_f64() * 1e3,
            lag_max.as_secs_f64() * 1e3
        ));
    }
    if let Some(share) = f.cpu_share() {
        let cores = f.cores.max(1);
        if share > CPU_SHARE_WARN {
            warnings.push(format!(
                "this process used {:.0} % of the machine's {cores} cores during the level: the client (and the built-in simulator, if used) may have been CPU-bound, delaying timestamps",
                share * 100.0
            ));
        }
    }
    if f.aborted_in_flight > 0 {
        warnings.push(format!(
            "{} requests were still streaming after the grace period and were aborted (their tokens are kept in the records)",
            f.aborted_in_flight
        ));
    }
    LevelMeta {
        concurrency: f.concurrency,
        rate: f.rate,
        intended: Some(f.intended),
        stopped_early: f.stopped_early.clone(),
        warnings,
        invalid: f.watchdog_fired,
        interrupted: f.interrupted,
        floor: f.floor,
        ..LevelMeta::new(f.level, f.name.clone())
    }
}

/// Builds the report from each level's metadata and aggregator, with the warnings a
/// reader needs, and judges the run. `aggs` should have been made by
/// [`Checks::aggregators`] of the same `checks`; a level without records reports an
/// empty summary. `report.search` is left for the caller.
pub fn assemble(
    info: RunInfo,
    levels: &[LevelMeta],
    aggs: &LevelAggregators,
    checks: &Checks,
) -> (Report, Verdict) {
    let mut verdict = Verdict::Ok;
    let mut slo_breached = false;
    let mut any_success = false;
    let empty = LevelAggregator::new(checks.level_config());
    let mut level_reports = Vec::new();
    for meta in levels {
        let agg = aggs.get(meta.level).unwrap_or(&empty);
        let (lr, level_verdict) = assemble_level(meta, agg, checks);
        any_success |= lr.summary.requests.succeeded > 0;
        slo_breached |= lr.slos.iter().any(|r| !r.pass);
        match level_verdict {
            Verdict::Invalid => verdict = Verdict::Invalid,
            Verdict::SloBreached => slo_breached = true,
            _ => {}
        }
        level_reports.push(lr);
    }
    let mut warnings = Vec::new();
    if !any_success && aggs.any_sent() {
        warnings.push("no request succeeded: the latency figures are empty".into());
        verdict = Verdict::Invalid;
    }
    let mut report = Report::new(info, level_reports, warnings);
    report.convention = checks.convention.map(|c| c.name().to_string());
    if slo_breached && verdict == Verdict::Ok {
        verdict = Verdict::SloBreached;
    }
    // The user who pressed Ctrl-C knows the run is partial; say interrupted, not invalid.
    if levels.iter().any(|m| m.interrupted) {
        verdict = Verdict::Interrupted;
    }
    (report, verdict)
}

/// One level of the report, and `Invalid` when its figures cannot be trusted, or
/// `SloBreached` when its error rate is over the ceiling.
fn assemble_level(
    meta: &LevelMeta,
    agg: &LevelAggregator,
    checks: &Checks,
) -> (LevelReport, Verdict) {
    let mut verdict = Verdict::Ok;
    let warmup_seen = agg.summary_warmup();
    let opts = LevelOptions {
        stall_threshold_ns: checks.stall_threshold.as_nanos() as u64,
        window: None,
        intended: meta.intended.map(|n| n.saturating_sub(warmup_seen)),
        // Dropped arrivals have records of their own (no send time).
        dropped: 0,
    };
    let figures = agg.finish(&opts);
    let mut level = figures.summary;
    if let Err(e) = level.requests.check() {
        level
            .warnings
            .push(format!("accounting does not add up: {e}"));
        verdict = Verdict::Invalid;
    }
    if let Some(w) = crate::outcome::client_limit_warning(&level.requests.failed) {
        level.warnings.push(w);
        verdict = Verdict::Invalid;
    }
    if meta.invalid {
        verdict = Verdict::Invalid;
    }
    // FAULTS 111: a level that sent nothing measured nothing, whatever else it says.
    if level.requests.sent == 0 && !meta.interrupted {
        level.warnings.push(
            "nothing was sent at this level (its start was past its end, or every arrival was dropped): the run is invalid".into(),
        );
        verdict = Verdict::Invalid;
    }
    level.warnings.extend(meta.warnings.iter().cloned());
    if let Some(scrape) = &meta.server {
        level
            .warnings
            .extend(crate::attribution::scrape_warning(scrape));
    }
    level.warnings.extend(figures.record_warnings);
    level.warnings.extend(cut_tool_calls_warning(&level));
    if answer_checks(&mut level, checks.max_error_rate) && verdict == Verdict::Ok {
        verdict = Verdict::SloBreached;
    }
    let ttft_p50_ms = level.ttft.map(|d| d.p50);
    let mut lr = level_report(meta.name.clone(), level);
    lr.pacing = figures.pacing.map(|mut p| {
        p.judge(meta.floor, ttft_p50_ms);
        p
    });
    if lr.pacing.as_ref().is_some_and(|p| p.invalid) {
        verdict = Verdict::Invalid;
    }
    if !checks.slos.is_empty() {
        lr.slos = checks
            .slos
            .iter()
            .map(|s| s.evaluate(&lr.summary))
            .collect();
        lr.goodput = Some(figures.goodput);
    }
    // Buckets run on the run clock; a later sweep level starts where it starts.
    lr.time_series = figures
        .time_series
        .into_iter()
        .skip_while(|b| b.completed == 0 && b.failed == 0 && b.output_tokens == 0)
        .collect();
    lr.stopped_early = meta.stopped_early.clone();
    lr.concurrency = meta.concurrency;
    lr.rate = meta.rate;
    if lr.summary.requests.succeeded > 0 {
        lr.conventions = figures.conventions;
    }
    lr.charts = figures.charts;
    lr.server_timing = figures.time_split;
    lr.plateau = meta
        .concurrency
        .and_then(|c| agg.plateau(c, checks.plateau));
    lr.server = meta.server.as_ref().map(|scrape| {
        let gaps = agg.gaps();
        Box::new(crate::attribution::attribute(
            scrape,
            gaps.gaps(),
            gaps.over(),
            &lr.summary,
        ))
    });
    let spec = lr.server.as_ref().and_then(|s| s.speculation.as_ref());
    lr.bursts = crate::bursts::with_metrics(figures.bursts, spec);
    (lr, verdict)
}

/// The warning on sessions ended because a reply's tool calls outgrew what the client
/// keeps of them.
fn cut_tool_calls_warning(level: &LevelSummary) -> Option<String> {
    let n = level.sessions.as_ref().map(|s| s.cut_tool_calls)?;
    (n > 0).then(|| {
        format!(
            "{n} replies' tool calls passed the 16 MiB the client keeps of them: not sent back \
             cut, their sessions ended there (records' tool_calls_cut)"
        )
    })
}

/// The checks of a level's answers, each a warning: short answers, and an error rate
/// above the ceiling (the level then breaches: the result says whether it did).
fn answer_checks(level: &mut LevelSummary, max_error_rate: f64) -> bool {
    let short = level
        .counters
        .short_answer_warning(level.requests.succeeded);
    level.warnings.extend(short);
    let ceiling = crate::slo::error_ceiling(&level.requests, max_error_rate);
    let breached = ceiling.is_some();
    level.warnings.extend(ceiling);
    breached
}

//! `cadence bench`: validate the flags into a run, start the built-in simulator when no
//! URL is given, drive the load, then print and write the report. Ctrl-C (or SIGTERM)
//! stops sending, drains, and still reports.

use crate::builtin_sim::BuiltinSim;
use crate::cli::{ArrivalsArg, BenchArgs, SearchAxis};
use crate::exit::{usage, Exit};
use anyhow::Context;
use bytes::Bytes;
use cadence_bench::body::{parse_extra_body, BodySpec};
use cadence_bench::progress::Progress;
use cadence_bench::search::Search;
use cadence_bench::sink::RecordSink;
use cadence_bench::target::{redact_url, Target};
use cadence_bench::workload::{RequestFactory, DEFAULT_PROMPT};
use cadence_bench::{ArrivalProcess, Load, RunContext, RunPlan, RunSummary, StopReason, Timeouts};
use cadence_core::metrics::{summarize_level, LevelOptions};
use cadence_core::report::{level_report, Report, RunInfo, SearchProbe, SearchReport};
use cadence_core::runlog::{self, LevelMeta, RunChecks, RunMeta};
use cadence_core::secret::{redact_patterns, Redactor};
use cadence_core::slo::{error_ceiling, probe_passes};
use cadence_core::{
    chart_data, convention_views, goodput, pacing, time_series, Convention, Outcome, RequestRecord,
    Slo,
};
use cadence_transport::client::{self, ClientConfig, HyperClient};
use cadence_transport::{Clock, Unreachable};
use http_body_util::{BodyExt, Full};
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Default measured requests when neither --requests nor --duration is given.
const DEFAULT_REQUESTS: u64 = 64;
/// Default closed-loop concurrency.
const DEFAULT_CONCURRENCY: u32 = 8;

pub async fn run(args: BenchArgs) -> anyhow::Result<Exit> {
    // Validate everything before a single request goes out.
    let extra = args
        .extra_body
        .as_deref()
        .map(parse_extra_body)
        .transpose()
        .map_err(usage)?;
    let extra_headers = args
        .headers
        .iter()
        .map(|h| client::parse_header(h))
        .collect::<Result<Vec<_>, _>>()
        .map_err(usage)?;
    if args.requests == Some(0) {
        return Err(usage("--requests must be at least 1"));
    }
    if args.find_max.is_some() && args.slos.is_empty() {
        return Err(usage("--find-max searches for the highest level meeting every --slo: give at least one --slo"));
    }
    if args.find_max.is_some() && args.trace.is_some() {
        return Err(usage("--find-max cannot be combined with --trace"));
    }
    if args.max_concurrency.is_some()
        && args.rate.is_none()
        && args.trace.is_none()
        && args.find_max != Some(SearchAxis::Rate)
    {
        return Err(usage(
            "--max-concurrency caps an open loop: use it with --rate or --trace",
        ));
    }
    let trace = match &args.trace {
        Some(path) => {
            if !(args.trace_speed.is_finite() && args.trace_speed > 0.0) {
                return Err(usage("--trace-speed must be a positive number"));
            }
            let text = std::fs::read_to_string(path)
                .map_err(|e| usage(format!("cannot read the trace {}: {e}", path.display())))?;
            let mut entries = cadence_bench::trace::parse_trace(&text)
                .map_err(|e| usage(format!("{}: {e}", path.display())))?;
            cadence_bench::trace::scale(&mut entries, args.trace_speed);
            Some(entries)
        }
        None => None,
    };
    // Every output path is checked before anything is sent (or the file truncated).
    let outputs =
        crate::outputs::named(args.json.as_deref(), args.records.as_deref(), &args.outputs);
    crate::outputs::preflight(args.trace.as_slice(), &outputs)?;
    // The client's own open-file limit: raised, then checked against the largest level
    // (an open loop without a cap or a search has no known bound: raised only).
    let in_flight = args
        .concurrency
        .as_ref()
        .and_then(|c| c.0.iter().max().copied())
        .or(args.max_concurrency)
        .or(
            (args.rate.is_none() && args.trace.is_none() && args.find_max.is_none())
                .then_some(DEFAULT_CONCURRENCY),
        );
    match in_flight {
        Some(n) => {
            let need = cadence_bench::fdlimit::needed(n.into(), args.url.is_none());
            cadence_bench::fdlimit::ensure(need).map_err(usage)?;
        }
        None => drop(cadence_bench::fdlimit::raise()),
    }
    let requests = match (args.requests, args.duration, &trace) {
        (n, _, Some(entries)) => {
            Some(n.map_or(entries.len() as u64, |n| n.min(entries.len() as u64)))
        }
        (None, None, None) => Some(DEFAULT_REQUESTS),
        (n, _, None) => n,
    };
    if let (Some(ramp), Some(rates)) = (args.ramp_up, &args.rate) {
        let planned = requests.map(|n| n.saturating_add(args.warmup));
        for &rate in &rates.0 {
            if let Some(why) =
                cadence_bench::arrivals::ramp_shortfall(rate, ramp, planned, args.duration)
            {
                return Err(usage(why));
            }
        }
    }

    let mut workload = crate::workload_cmd::prepare(
        &args.workload,
        args.max_tokens,
        args.prompt.as_deref(),
        trace.as_deref(),
        requests,
        args.seed,
    )?;
    if !args.quiet {
        for note in &workload.notes {
            eprintln!("Note: {note}.");
        }
    }

    let builtin_config = match &args.url {
        Some(_) => {
            if args.engine.resolve(args.seed)?.is_some() {
                return Err(usage(
                    "--preset/--engine choose the built-in simulator's engine: give them without a URL",
                ));
            }
            None
        }
        None => Some(crate::builtin_sim::config(args.seed, &args.engine)?),
    };
    let builtin = match &builtin_config {
        Some(c) => Some(BuiltinSim::start(c.clone())?),
        None => None,
    };
    let url = match (&args.url, &builtin) {
        (Some(u), _) => u.clone(),
        (None, Some(sim)) => format!("http://{}/v1", sim.addr),
        (None, None) => unreachable!("a built-in sim is started when no URL is given"),
    };
    let target =
        Target::resolve(&url, args.api.map(Into::into)).map_err(|e| usage(e.to_string()))?;
    if builtin.is_some() && !args.quiet {
        eprintln!(
            "No URL given: benchmarking the built-in simulator at {url} (engine {}).",
            builtin_config.as_ref().map_or("", |c| c.model.as_str())
        );
    }

    let api_key = if builtin.is_some() {
        None
    } else {
        std::env::var(&args.api_key_env)
            .ok()
            .filter(|k| !k.is_empty())
    };
    let mut secrets: Vec<String> = api_key.iter().cloned().collect();
    secrets.extend(
        extra_headers
            .iter()
            .filter_map(|(_, v)| v.to_str().ok().map(str::to_string)),
    );
    let redactor = Redactor::new(secrets);
    let headers = client::base_headers(api_key.as_deref(), &extra_headers).map_err(usage)?;

    let http = client::build(&ClientConfig {
        pool_size: args
            .concurrency
            .as_ref()
            .and_then(|c| c.0.iter().max().copied())
            .or(args.max_concurrency)
            .unwrap_or(DEFAULT_CONCURRENCY) as usize,
        connect_timeout: args.connect_timeout,
        http2: args.http2,
    });
    let model = match (&args.model, &builtin) {
        (Some(m), _) => m.clone(),
        (None, Some(_)) => builtin_config
            .as_ref()
            .map_or_else(String::new, |c| c.model.clone()),
        (None, None) => first_model(
            &http,
            &target,
            &headers,
            args.connect_timeout + args.header_timeout,
        )
        .await
        .map_err(|e| match e.downcast_ref::<Unreachable>() {
            // Not a usage error: the command is right, the server is not there (exit 1).
            Some(u) => anyhow::anyhow!("{}", redactor.redact(&u.to_string())),
            None => usage(format!(
                "{}; pass --model NAME",
                redactor.redact(&format!("{e:#}"))
            )),
        })?,
    };

    if let Some(extra) = &extra {
        let overridden: Vec<&str> = [
            "model",
            "max_tokens",
            "stream",
            "stream_options",
            "messages",
            "prompt",
        ]
        .into_iter()
        .filter(|k| extra.contains_key(*k))
        .collect();
        if !overridden.is_empty() && !args.quiet {
            eprintln!(
                "Note: --extra-body sets {} and overrides the flags for them.",
                overridden.join(", ")
            );
        }
    }
    let mut factory = RequestFactory::new(
        target.endpoint.clone(),
        headers,
        BodySpec {
            api: target.api,
            model: model.clone(),
            max_tokens: Some(
                args.max_tokens
                    .and_then(|d| d.fixed())
                    .unwrap_or(crate::workload_cmd::DEFAULT_MAX_TOKENS),
            ),
            extra,
        },
        vec![args
            .prompt
            .clone()
            .unwrap_or_else(|| DEFAULT_PROMPT.to_string())],
    );
    if let Some(entries) = &trace {
        factory.prompts = std::mem::take(&mut workload.trace_prompts);
        factory.max_tokens = entries.iter().map(|e| e.output_tokens).collect();
    }
    workload.apply(&mut factory);
    let loads = match &trace {
        Some(entries) => vec![Load::Trace {
            offsets: Arc::new(entries.iter().map(|e| e.at).collect()),
            max_concurrency: args.max_concurrency,
        }],
        None => loads(&args),
    };
    let visible = !args.quiet && std::io::stderr().is_terminal();
    // Sessions send one request per turn; the bar counts requests.
    let progress = Progress::new(
        requests.map(|n| factory.total_turns(n + args.warmup) * loads.len() as u64),
        visible,
    );
    let (sender, sink) = RecordSink::start(args.records.as_deref(), progress.clone())?;
    let cx = Arc::new(RunContext {
        client: http,
        factory,
        timeouts: Timeouts {
            connect: args.connect_timeout,
            header: args.header_timeout,
            first_token: args.ttft_timeout,
            idle: args.idle_timeout,
            total: args.total_timeout,
        },
        api: target.api,
        strict: args.strict,
        redactor,
        progress: progress.clone(),
        tokenizer: workload.tokenizer.clone(),
    });

    // One Ctrl-C or SIGTERM ends the current level (drained, reported) and skips the rest.
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        crate::proxy_cmd::stop_signal().await;
        let _ = stop_tx.send(true);
    });

    let started_at_unix_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    let clock = Clock::start();
    let mut levels = Vec::new();
    let mut search = args.find_max.map(|axis| {
        let start = match axis {
            SearchAxis::Rate => args.rate.as_ref().map_or(1.0, |r| r.0[0]),
            SearchAxis::Concurrency => args.concurrency.as_ref().map_or(1.0, |c| c.0[0] as f64),
        };
        (
            axis,
            Search::new(
                start,
                axis == SearchAxis::Concurrency,
                args.max_probes as usize,
            ),
        )
    });
    let mut planned = loads.clone().into_iter();
    for i in 0u32.. {
        // The next level: the next of the list, or the search's next probe.
        let load = match &search {
            None => planned.next(),
            Some((axis, s)) => s.next().map(|v| match axis {
                SearchAxis::Concurrency => Load::Closed {
                    concurrency: v as u32,
                },
                SearchAxis::Rate => Load::Open {
                    rate: v,
                    process: arrival_process(&args),
                    max_concurrency: args.max_concurrency,
                    ramp_up: args.ramp_up.unwrap_or_default(),
                },
            }),
        };
        let Some(load) = load else { break };
        let probe_level = match &load {
            Load::Closed { concurrency } => *concurrency as f64,
            Load::Open { rate, .. } => *rate,
            Load::Trace { .. } => 0.0,
        };
        let plan = RunPlan {
            load,
            requests,
            duration: args.duration,
            warmup: args.warmup,
            grace: args.grace,
            level: i,
            stop_when_saturated: loads.len() > 1 || search.is_some(),
        };
        let mut rx = stop_rx.clone();
        let stop = async move {
            let _ = rx.wait_for(|s| *s).await;
        };
        let summary = cadence_bench::run(cx.clone(), &plan, clock, sender.clone(), stop).await;
        let interrupted = summary.stop == StopReason::Interrupted;
        if let Some((_, s)) = &mut search {
            if !interrupted {
                let recs = sender.level_records(i).await;
                let level = summarize_level(&recs, &LevelOptions::default());
                // An invalid level (watchdog, late sends) never passes, whatever it measured.
                let invalid = summary.watchdog_fired
                    || pacing(&recs, 0, args.max_late).is_some_and(|p| p.invalid);
                let pass = !invalid && probe_passes(&level, &args.slos, args.max_error_rate);
                s.record(probe_level, pass);
            }
        }
        let meta = level_meta(&plan, &summary);
        sender.write_line(runlog::level_line(&meta));
        levels.push(meta);
        if interrupted {
            break;
        }
    }

    let info = RunInfo {
        target: target.display(),
        api: format!("{:?}", target.api).to_lowercase(),
        model,
        mode: match (&args.rate, args.arrivals) {
            _ if args.trace.is_some() => "trace_replay".into(),
            (None, ArrivalsArg::Constant) if args.find_max == Some(SearchAxis::Rate) => {
                "open_loop_constant".into()
            }
            (None, ArrivalsArg::Poisson) if args.find_max == Some(SearchAxis::Rate) => {
                "open_loop_poisson".into()
            }
            (None, _) => "closed_loop".into(),
            (Some(_), ArrivalsArg::Constant) => "open_loop_constant".into(),
            (Some(_), ArrivalsArg::Poisson) => "open_loop_poisson".into(),
        },
        started_at_unix_ms,
        duration_s: clock.origin().elapsed().as_secs_f64(),
        command: redacted_command(std::env::args()),
        builtin_sim: args.url.is_none(),
        interrupted: levels.iter().any(|m| m.interrupted),
        machine: Some(machine()),
    };
    let checks = Checks {
        stall_threshold: args.stall_threshold,
        slos: args.slos.clone(),
        max_late: args.max_late,
        time_bucket: args.time_bucket,
        convention: args.outputs.convention,
        max_error_rate: args.max_error_rate,
    };
    let search_report = search.as_ref().map(|(axis, s)| SearchReport {
        axis: match axis {
            SearchAxis::Rate => "rate".into(),
            SearchAxis::Concurrency => "concurrency".into(),
        },
        best: s.best(),
        first_fail: s.first_fail(),
        probes: s
            .probes()
            .iter()
            .map(|p| SearchProbe {
                level: p.level,
                pass: p.pass,
            })
            .collect(),
    });
    // The run line makes the records file a complete replay source (`cadence report`).
    sender.write_line(runlog::run_line(&RunMeta {
        run: info.clone(),
        checks: checks.to_meta(),
        search: search_report.clone(),
    }));
    drop(sender);
    drop(cx);
    progress.finish();
    // A failed records file keeps the records: the report is still made and written.
    let (records, records_error) = sink.finish_all()?;
    let mut failures: Vec<String> = records_error
        .into_iter()
        .map(|e| {
            let path = args.records.as_deref().unwrap_or(std::path::Path::new("-"));
            format!("cannot write the records to {}: {e}", path.display())
        })
        .collect();
    drop(builtin);

    let (mut report, mut exit) = build_report(info, &levels, &records, &checks);
    report.search = search_report;
    if let Some((_, s)) = &search {
        // Probes above the frontier breach by design: the search itself succeeded.
        if exit == Exit::SloBreached {
            exit = if s.best().is_some() {
                Exit::Ok
            } else {
                Exit::SloBreached
            };
        }
    }
    let console = cadence_report::console::render(&report, std::io::stdout().is_terminal());
    failures.extend(crate::outputs::console(&console, &args.outputs).err());
    failures.extend(crate::report_cmd::write_outputs(
        &report,
        Some(&records),
        args.json.as_deref(),
        &args.outputs,
    ));
    crate::outputs::conclude(exit, failures)
}

fn arrival_process(args: &BenchArgs) -> ArrivalProcess {
    match args.arrivals {
        ArrivalsArg::Constant => ArrivalProcess::Constant,
        ArrivalsArg::Poisson => ArrivalProcess::Poisson { seed: args.seed },
    }
}

/// The levels to run, in order.
fn loads(args: &BenchArgs) -> Vec<Load> {
    match &args.rate {
        Some(rates) => rates
            .0
            .iter()
            .map(|&rate| Load::Open {
                rate,
                process: arrival_process(args),
                max_concurrency: args.max_concurrency,
                ramp_up: args.ramp_up.unwrap_or_default(),
            })
            .collect(),
        None => args
            .concurrency
            .clone()
            .map_or_else(|| vec![DEFAULT_CONCURRENCY], |c| c.0)
            .into_iter()
            .map(|concurrency| Load::Closed { concurrency })
            .collect(),
    }
}

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

/// The client machine in one line: OS, architecture, cores and CPU model.
pub fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let cpu = std::fs::read_to_string("/proc/cpuinfo").ok().and_then(|t| {
        t.lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    });
    let mut s = format!(
        "{} {}, {cores} cores",
        std::env::consts::OS,
        std::env::consts::ARCH
    );
    if let Some(cpu) = cpu {
        s.push_str(", ");
        s.push_str(&cpu);
    }
    s
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
        let short = level
            .counters
            .short_answer_warning(level.requests.succeeded);
        level.warnings.extend(short);
        if let Some(w) = error_ceiling(&level.requests, checks.max_error_rate) {
            level.warnings.push(w);
            slo_breached = true;
        }
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

/// The command line as it may be stored: header values, URL credentials and query
/// values, and anything key-shaped are removed.
pub fn redacted_command(args: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut out = Vec::new();
    let mut header_next = false;
    for a in args {
        if header_next {
            out.push(format!("{}: [REDACTED]", client::header_name_only(&a)));
            header_next = false;
        } else if a == "-H" || a == "--header" {
            out.push(a);
            header_next = true;
        } else if let Some(v) = a.strip_prefix("--header=") {
            out.push(format!(
                "--header={}: [REDACTED]",
                client::header_name_only(v)
            ));
        } else if a.contains("://") {
            out.push(redact_url(&a));
        } else {
            out.push(redact_patterns(&a));
        }
    }
    out
}

/// Asks the server which models it serves and takes the first. A server that cannot
/// be connected to at all is an [`Unreachable`] error.
async fn first_model(
    http: &HyperClient,
    target: &Target,
    headers: &http::HeaderMap,
    timeout: Duration,
) -> anyhow::Result<String> {
    let mut req = http::Request::get(target.models.clone()).body(Full::new(Bytes::new()))?;
    for (k, v) in headers {
        if k != http::header::CONTENT_TYPE {
            req.headers_mut().insert(k.clone(), v.clone());
        }
    }
    let fetch = async {
        let resp = http.request(req).await.map_err(|e| {
            match cadence_transport::unreachable(&e, &target.models) {
                Some(u) => anyhow::Error::new(u),
                None => anyhow::anyhow!("{}", cadence_transport::error_chain(&e)),
            }
        })?;
        let status = resp.status();
        let body = resp.into_body().collect().await?.to_bytes();
        anyhow::ensure!(status.is_success(), "HTTP {status}");
        let v: serde_json::Value =
            serde_json::from_slice(&body).context("the model list is not JSON")?;
        v["data"][0]["id"]
            .as_str()
            .map(str::to_string)
            .ok_or_else(|| anyhow::anyhow!("the model list is empty"))
    };
    tokio::time::timeout(timeout, fetch)
        .await
        .map_err(|_| anyhow::anyhow!("no answer within {timeout:?}"))?
        .with_context(|| {
            format!(
                "could not list models at {}",
                redact_url(&target.models.to_string())
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn command_line_loses_secrets() {
        let argv = [
            "cadence",
            "bench",
            "https://u:pw@h/v1?key=abc",
            "-H",
            "x-api-key: s3cr3t",
            "--header=Authorization: Bearer t0k",
            "--extra-body",
            r#"{"api_key=zzz": 1}"#,
        ]
        .map(String::from);
        let out = redacted_command(argv).join(" ");
        for secret in ["pw", "abc", "s3cr3t", "t0k", "zzz"] {
            assert!(!out.contains(secret), "{secret} leaked: {out}");
        }
        assert!(out.contains("x-api-key: [REDACTED]"), "{out}");
    }
}

//! `cadence bench`: validate the flags into a run, start the built-in simulator when no
//! URL is given, drive the load, then print and write the report. Ctrl-C (or SIGTERM)
//! stops sending, drains, and still reports.

mod endpoint;
mod levels;
mod setup;
mod validate;

use crate::cli::{ArrivalsArg, BenchArgs, SearchAxis};
use crate::exit::{usage, Exit};
use crate::workload::Workload;
use cadence_bench::progress::Progress;
use cadence_bench::search::Search;
use cadence_bench::sink::BenchSinks;
use cadence_bench::target::Target;
use cadence_bench::trace::TraceEntry;
use cadence_bench::workload::RequestFactory;
use cadence_bench::{ArrivalProcess, Load};
use cadence_core::report::RunInfo;
use cadence_core::runlog::{self, LevelMeta, RunMeta};
use cadence_core::secret::Redactor;
use cadence_core::{assemble, Checks, LevelAggregators};
use cadence_transport::Clock;
use cadence_tui::dashboard::{Dashboard, LiveState};
use endpoint::Endpoint;
use levels::Levels;
use setup::Setup;
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use crate::cli::DEFAULT_CONCURRENCY;

pub async fn run(mut args: BenchArgs) -> anyhow::Result<Exit> {
    no_tui_on_a_dumb_terminal(&mut args);
    if let (Some(seed), false) = (args.resolve_seed(), args.quiet) {
        eprintln!(
            "Seed {seed} (drawn for this run: new prompts and draws; --seed {seed} repeats them)."
        );
    }
    // A shard of a fleet runs its share of the load: the flags become the share.
    let fleet = crate::shard::take(&mut args)?;
    // The dashboard's live state, when one may show: a sink of the run from the start.
    let delay = dashboard_delay(&args);
    let live = delay.map(|_| LiveState::new(args.stall_threshold, args.max_late));
    let Setup {
        endpoint,
        model,
        cx,
        loads,
        requests,
        progress,
        sender,
        sink,
        records_path,
        _spill,
        scrape,
        _coalesce,
        otlp,
    } = Setup::new(&args, live.clone()).await?;
    let (stop_tx, stop_rx) = stop_on_ctrl_c();
    let started_at_unix_ms = crate::run_meta::now_unix_ms();
    if let (Some(note), false) = (fleet.note(), args.quiet) {
        eprintln!("{note}");
    }
    let clock = Clock::start();
    otlp.iter()
        .for_each(cadence_otlp::signals::Exports::set_origin_now);
    for line in fleet.header_lines(started_at_unix_ms) {
        sender.with(move |s| s.write_line(&line));
    }
    let dashboard = delay.zip(live.clone()).map(|(delay, live)| {
        let title = format!("cadence bench · {} · {model}", endpoint.target.display());
        start_dashboard(&progress, live, clock, stop_tx, title, delay)
    });
    let levels = Levels {
        args: &args,
        fleet: &fleet,
        cx: cx.clone(),
        sender: sender.clone(),
        planned: loads,
        requests,
        clock,
        scrape,
        live,
    };
    let (metas, search) = levels.run(stop_rx).await;
    // The terminal is given back before anything else prints.
    if let Some(d) = dashboard {
        d.finish();
    }

    let info = run_info(
        &args,
        &endpoint.target,
        model,
        started_at_unix_ms,
        clock,
        &metas,
    );
    let checks = checks(&args);
    let search_report = search.as_ref().map(|(_, s)| s.report());
    // The run line makes the records file a complete replay source (`cadence report`).
    let line = runlog::run_line(&RunMeta {
        run: info.clone(),
        checks: checks.to_meta(),
        search: search_report.clone(),
    });
    sender.with(move |s| s.write_line(&line));
    drop(sender);
    drop(cx);
    progress.finish();
    // A failed records file keeps the report: it is still made and written.
    let (aggs, written) = sink.finish()?.finish();
    let failures = records_failures(written, records_path.as_deref());
    drop(endpoint);

    let (mut report, verdict) = assemble(info, &metas, &aggs, &checks);
    report.search = search_report;
    let said = otlp.map_or_else(Vec::new, |e| e.finish_into(&mut report, args.quiet));
    said.iter().for_each(|l| eprintln!("{l}"));
    let exit = search_exit(Exit::from(verdict), search.as_ref().map(|(_, s)| s));
    let source = records_path.map(|p| cadence_run::RecordsSource::written(p, &metas));
    crate::output::deliver(
        &report,
        source.as_ref(),
        args.json.as_deref(),
        &args.outputs,
        exit,
        failures,
    )
}

/// FAULTS 122: a terminal that cannot draw (`TERM=dumb`) gets the plain progress line
/// instead of the dashboard's escape sequences.
fn no_tui_on_a_dumb_terminal(args: &mut BenchArgs) {
    if args.tui && std::env::var("TERM").is_ok_and(|t| t == "dumb") {
        eprintln!("cadence: TERM=dumb, so --tui cannot draw: the progress line and the report print as usual");
        args.tui = false;
    }
}

/// The dashboard over the run, drawn after `delay`; it stops the run through `stop`.
fn start_dashboard(
    progress: &Progress,
    live: LiveState,
    clock: Clock,
    stop: Arc<tokio::sync::watch::Sender<bool>>,
    title: String,
    delay: Duration,
) -> Dashboard {
    Dashboard::start(cadence_tui::dashboard::Setup {
        progress: progress.clone(),
        live,
        clock,
        stop,
        title,
        delay,
        headless: false,
    })
}

/// A records file that failed, in words (the report is still made and written).
fn records_failures<T, E: std::fmt::Display>(
    written: Result<T, E>,
    path: Option<&std::path::Path>,
) -> Vec<String> {
    written
        .err()
        .into_iter()
        .map(|e| {
            let path = path.unwrap_or(std::path::Path::new("-"));
            format!("cannot write the records to {}: {e}", path.display())
        })
        .collect()
}

/// Where each finished record goes: the records file, the progress view, the dashboard's
/// live state and the level aggregators, on the record thread; nothing keeps them all.
type Sinks = BenchSinks<LevelAggregators>;

/// The levels' loads: a trace's or an agent trace's arrivals (the sessions' replay put
/// in `factory`), else the flags' levels.
fn planned_loads(
    args: &BenchArgs,
    endpoint: &Endpoint,
    trace: &Option<Vec<TraceEntry>>,
    agent_trace: Option<Vec<cadence_bench::agent_trace::TraceSession>>,
    workload: &Workload,
    factory: &mut RequestFactory,
) -> anyhow::Result<Vec<Load>> {
    Ok(match (trace, agent_trace) {
        (Some(entries), _) => vec![Load::Trace {
            offsets: Arc::new(entries.iter().map(|e| e.at).collect()),
            max_concurrency: args.max_concurrency,
        }],
        (None, Some(sessions)) => {
            if !cadence_bench::agent::supports(endpoint.target.api) {
                return Err(usage(format!(
                    "--agent-trace needs an API whose requests carry tools: chat, \
                     responses or anthropic (this run uses {})",
                    endpoint.target.api.name()
                )));
            }
            if !args.quiet {
                let note = crate::agent_replay::note(&sessions, workload.tokenizer.as_ref());
                eprintln!("Note: {note}.");
            }
            let offsets = sessions.iter().map(|s| s.at).collect();
            let replay = crate::agent_replay::replay(args, sessions, workload.tokenizer.clone())?;
            factory.session = cadence_bench::session::SessionKind::Replay(replay);
            vec![Load::Trace {
                offsets: Arc::new(offsets),
                max_concurrency: args.max_concurrency,
            }]
        }
        (None, None) => loads(args),
    })
}

/// With `--find-max`, probes above the frontier breach by design: the search itself
/// succeeded when it found a level that met every SLO.
fn search_exit(exit: Exit, search: Option<&Search>) -> Exit {
    match search {
        Some(s) if exit == Exit::SloBreached && s.best().is_some() => Exit::Ok,
        _ => exit,
    }
}

/// The redactor that knows every secret given (API key, header values) and the
/// headers every request carries. The built-in simulator gets no API key.
fn credentials(
    args: &BenchArgs,
    api: cadence_wire::Api,
    builtin: bool,
    extra_headers: &[(http::HeaderName, http::HeaderValue)],
) -> anyhow::Result<(Redactor, http::HeaderMap)> {
    let api_key = if builtin {
        None
    } else {
        std::env::var(&args.api_key_env)
            .ok()
            .filter(|k| !k.is_empty())
    };
    let c = cadence_bench::target::Credentials::new(api, api_key.as_deref(), extra_headers)
        .map_err(usage)?;
    Ok((c.redactor, c.headers))
}

/// Says which flags `--extra-body` overrides, unless `quiet`.
fn note_overridden(extra: &serde_json::Map<String, serde_json::Value>, quiet: bool) {
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
    if !overridden.is_empty() && !quiet {
        eprintln!(
            "Note: --extra-body sets {} and overrides the flags for them.",
            overridden.join(", ")
        );
    }
}

/// Resolves on the first Ctrl-C or SIGTERM (or the dashboard's `q`, through the sender
/// returned): it ends the current level (drained, reported) and skips the rest.
fn stop_on_ctrl_c() -> (
    Arc<tokio::sync::watch::Sender<bool>>,
    tokio::sync::watch::Receiver<bool>,
) {
    let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
    let stop_tx = Arc::new(stop_tx);
    let tx = stop_tx.clone();
    tokio::spawn(async move {
        crate::signal::stop_signal().await;
        let _ = tx.send(true);
    });
    (stop_tx, stop_rx)
}

/// When the dashboard takes the terminal: at once with `--tui`; by default, when stdout
/// and stderr are terminals, once the run has gone on for a few seconds; never with
/// `--no-tui`, `--quiet` or a pipe.
fn dashboard_delay(args: &BenchArgs) -> Option<Duration> {
    if args.tui {
        return Some(Duration::ZERO);
    }
    let terminals = std::io::stdout().is_terminal() && std::io::stderr().is_terminal();
    (terminals && !args.quiet && !args.no_tui).then_some(cadence_tui::dashboard::AUTO_DELAY)
}

/// The run's description in the report.
fn run_info(
    args: &BenchArgs,
    target: &Target,
    model: String,
    started_at_unix_ms: u64,
    clock: Clock,
    levels: &[LevelMeta],
) -> RunInfo {
    let mode = if args.trace.is_some() || args.agent_trace.is_some() {
        "trace_replay"
    } else {
        let open = args.rate.is_some() || args.find_max == Some(SearchAxis::Rate);
        crate::run_meta::mode(open, args.arrivals)
    };
    let api = target.api.name().to_string();
    let mut info = RunInfo::new(target.display(), api, model, mode, started_at_unix_ms);
    info.duration_s = clock.origin().elapsed().as_secs_f64();
    info.command = crate::run_meta::redacted_command(std::env::args());
    info.builtin_sim = args.url.is_none();
    info.interrupted = levels.iter().any(|m| m.interrupted);
    info.machine = Some(crate::run_meta::machine());
    info.seed = args.seed_given;
    info
}

/// What each level is judged against, from the flags.
fn checks(args: &BenchArgs) -> Checks {
    Checks {
        stall_threshold: args.stall_threshold,
        slos: args.slos.clone(),
        max_late: args.max_late,
        time_bucket: args.time_bucket,
        convention: args.outputs.convention,
        exact_samples: args.outputs.exact_samples(),
        max_error_rate: args.max_error_rate,
        what_if: args.outputs.what_if.clone(),
        plateau: args.outputs.plateau(),
    }
}

fn arrival_process(args: &BenchArgs) -> ArrivalProcess {
    match args.arrivals {
        ArrivalsArg::Constant => ArrivalProcess::Constant,
        ArrivalsArg::Poisson => ArrivalProcess::Poisson { seed: args.seed },
    }
}

/// An open-loop level at `rate` with the flags' arrivals, cap and ramp.
fn open_load(args: &BenchArgs, rate: f64) -> Load {
    Load::Open {
        rate,
        process: arrival_process(args),
        max_concurrency: args.max_concurrency,
        ramp_up: args.ramp_up.unwrap_or_default(),
    }
}

/// The levels to run, in order.
pub fn loads(args: &BenchArgs) -> Vec<Load> {
    match &args.rate {
        Some(rates) => rates.0.iter().map(|&rate| open_load(args, rate)).collect(),
        None => args
            .concurrency
            .clone()
            .map_or_else(|| vec![DEFAULT_CONCURRENCY], |c| c.0)
            .into_iter()
            .map(|concurrency| Load::Closed { concurrency })
            .collect(),
    }
}

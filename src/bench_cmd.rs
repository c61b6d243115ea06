//! `cadence bench`: validate the flags into a run, start the built-in simulator when no
//! URL is given, drive the load, then print and write the report. Ctrl-C (or SIGTERM)
//! stops sending, drains, and still reports.

use crate::builtin_sim::BuiltinSim;
use crate::cli::{ArrivalsArg, BenchArgs, SearchAxis};
use crate::dashboard::{Dashboard, LiveState};
use crate::exit::{usage, Exit};
use crate::workload::Workload;
use anyhow::Context;
use cadence_bench::body::{parse_extra_body, BodySpec};
use cadence_bench::progress::Progress;
use cadence_bench::search::Search;
use cadence_bench::sink::BenchSinks;
use cadence_bench::target::{redact_url, Target};
use cadence_bench::trace::TraceEntry;
use cadence_bench::workload::{RequestFactory, DEFAULT_PROMPT};
use cadence_bench::{ArrivalProcess, Load, RunContext, RunPlan, RunSummary, StopReason, Timeouts};
use cadence_core::metrics::LevelOptions;
use cadence_core::report::{RunInfo, SearchProbe, SearchReport};
use cadence_core::runlog::{self, LevelMeta, RunMeta};
use cadence_core::secret::Redactor;
use cadence_core::slo::probe_passes;
use cadence_core::{assemble, level_meta, Checks, LevelAggregators, LevelFacts};
use cadence_records::RecordsConfig;
use cadence_records::{RecordSender, RecordThread};
use cadence_transport::client::{self, ClientConfig, HyperClient};
use cadence_transport::get::GetError;
use cadence_transport::{Clock, Unreachable};
use std::io::IsTerminal;
use std::sync::Arc;
use std::time::Duration;

use crate::cli::{DEFAULT_CONCURRENCY, DEFAULT_REQUESTS};

pub async fn run(mut args: BenchArgs) -> anyhow::Result<Exit> {
    no_tui_on_a_dumb_terminal(&mut args);
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
    } = Setup::new(&args, live.clone()).await?;
    let (stop_tx, stop_rx) = stop_on_ctrl_c();
    let started_at_unix_ms = crate::run_meta::now_unix_ms();
    if let (Some(note), false) = (fleet.note(), args.quiet) {
        eprintln!("{note}");
    }
    let clock = Clock::start();
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
    let search_report = search.as_ref().map(|(axis, s)| search_report(*axis, s));
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
    Dashboard::start(crate::dashboard::Setup {
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

/// Everything a run needs before its first level: the endpoint (the built-in
/// simulator started), the request context, the levels, the progress line and the
/// records sink.
struct Setup {
    endpoint: Endpoint,
    model: String,
    cx: Arc<RunContext>,
    loads: Vec<Load>,
    requests: Option<u64>,
    progress: Progress,
    sender: RecordSender<Sinks>,
    sink: RecordThread<Sinks>,
    records_path: Option<std::path::PathBuf>,
    /// The temporary records file behind the per-request CSV, removed when dropped.
    _spill: Option<tempfile::TempPath>,
    /// `--server-metrics`: where each level scrapes the server's own metrics.
    scrape: Option<cadence_bench::scrape::ScrapeConfig>,
    /// Wake-up coalescing for the run: kernel stamps time each chunk, so the runtime's
    /// workers may let reads gather (`cadence_bench::coalesce`).
    _coalesce: Option<cadence_bench::coalesce::Enabled>,
}

impl Setup {
    /// `live`: the dashboard's state, fed as one of the sinks.
    async fn new(args: &BenchArgs, live: Option<LiveState>) -> anyhow::Result<Setup> {
        // Validate everything before a single request goes out.
        let Validated {
            extra,
            extra_headers,
            trace,
            agent_trace,
            requests,
        } = validate(args)?;
        let mut workload = crate::workload::prepare(
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
        let endpoint = Endpoint::start(args)?;
        if args.workload.agent.agent && !cadence_bench::agent::supports(endpoint.target.api) {
            return Err(crate::exit::usage(format!(
                "--agent needs an API whose requests carry tools: chat, responses or \
                 anthropic (this run uses {})",
                endpoint.target.api.name()
            )));
        }
        let scrape = scrape_config(args, &endpoint)?;
        let (redactor, headers) = credentials(
            args,
            endpoint.target.api,
            endpoint.builtin.is_some(),
            &extra_headers,
        )?;
        let http = http_client(args)?;
        let model = model_name(args, &endpoint, &http, &headers, &redactor).await?;
        if let Some(extra) = &extra {
            note_overridden(extra, args.quiet);
        }
        let body = body_spec(args, &endpoint.target, &model, extra);
        let mut factory = request_factory(args, &endpoint, headers, body, &trace, &mut workload);
        let loads = planned_loads(
            args,
            &endpoint,
            &trace,
            agent_trace,
            &workload,
            &mut factory,
        )?;
        let visible = !args.quiet && !args.tui && std::io::stderr().is_terminal();
        // Sessions send one request per turn; the bar counts requests.
        let progress = Progress::new(
            requests.map(|n| factory.total_turns(n + args.warmup) * loads.len() as u64),
            visible,
        );
        let (records_path, _spill) =
            crate::output::records_path(args.records.as_deref(), &args.outputs)?;
        let (sender, sink) = record_thread(args, records_path.clone(), &progress, live)?;
        let cx = Arc::new(RunContext {
            client: http,
            factory,
            timeouts: timeouts(args),
            api: endpoint.target.api,
            strict: args.strict,
            redactor,
            progress: progress.clone(),
            tokenizer: workload.tokenizer.clone(),
        });
        Ok(Setup {
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
            _coalesce: (!args.coalesce_wakes.is_zero())
                .then(|| cadence_bench::coalesce::enable(args.coalesce_wakes)),
        })
    }
}

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
            factory.replay = Some(replay);
            vec![Load::Trace {
                offsets: Arc::new(offsets),
                max_concurrency: args.max_concurrency,
            }]
        }
        (None, None) => loads(args),
    })
}

/// The record thread and its sinks: the records file (when one is written), the
/// progress view, the dashboard's live state and the level aggregators.
fn record_thread(
    args: &BenchArgs,
    records_path: Option<std::path::PathBuf>,
    progress: &Progress,
    live: Option<LiveState>,
) -> anyhow::Result<(RecordSender<Sinks>, RecordThread<Sinks>)> {
    let mut sinks = BenchSinks::new(
        records_path.map(RecordsConfig::new),
        progress.clone(),
        checks(args).aggregators(),
    )?;
    if let Some(live) = live {
        sinks = sinks.with_live(live);
    }
    if let Some(status) = sinks.status() {
        // A full disk is named the moment it happens; the run goes on.
        tokio::spawn(async move { eprintln!("cadence: {}", status.failed().await) });
    }
    Ok(RecordThread::start(sinks)?)
}

/// Whether `--coalesce-wakes` may be on: a waiting worker holds whatever is handed to it
/// (a pacer's ticket, a timer that ends a think time or starts a level), so only a closed
/// loop whose next send follows a finished stream directly may coalesce.
fn coalescing_allowed(args: &BenchArgs) -> Result<(), String> {
    let why = if args.rate.is_some() || args.find_max == Some(SearchAxis::Rate) {
        "an open-loop --rate"
    } else if args.trace.is_some() {
        "--trace"
    } else if args.agent_trace.is_some() {
        "--agent-trace"
    } else if !args.workload.think_time.is_zero() {
        "--think-time"
    } else if args.workload.agent.agent {
        "--agent (a session's next step follows its tool time)"
    } else if args.start_at.is_some() || args.start_in.is_some() {
        "a scheduled start (--start-at, --start-in)"
    } else if args.timestamps != crate::cli::TimestampsArg::Kernel {
        "--timestamps user (each chunk is timed when it is read)"
    } else {
        return Ok(());
    };
    Err(format!(
        "--coalesce-wakes cannot be used with {why}: a waiting worker would hold sends \
         that must go out on time; it is for closed-loop runs (--concurrency) only"
    ))
}

/// `--server-metrics`: what to scrape, when asked.
fn scrape_config(
    args: &BenchArgs,
    endpoint: &Endpoint,
) -> anyhow::Result<Option<cadence_bench::scrape::ScrapeConfig>> {
    let Some(m) = args.server_metrics.as_deref() else {
        return Ok(None);
    };
    let mut config = cadence_bench::scrape::ScrapeConfig::new(
        m,
        &endpoint.target.endpoint,
        args.scrape_interval,
        args.scrape_timeout,
    )
    .map_err(usage)?;
    config.ca_file = args.ca_file.clone();
    Ok(Some(config))
}

/// The pooled client, one connection per stream of the highest level; a `--ca-file`
/// that is no CA is a usage error.
fn http_client(args: &BenchArgs) -> anyhow::Result<HyperClient> {
    let config = ClientConfig {
        pool_size: args
            .concurrency
            .as_ref()
            .and_then(|c| c.0.iter().max().copied())
            .or(args.max_concurrency)
            .unwrap_or(DEFAULT_CONCURRENCY) as usize,
        connect_timeout: args.connect_timeout,
        http2: args.http2,
    };
    client::build_with_ca(&config, args.timestamps.into(), args.ca_file.as_deref())
        .map_err(|e| usage(format!("--ca-file: {e}")))
}

/// With `--find-max`, probes above the frontier breach by design: the search itself
/// succeeded when it found a level that met every SLO.
fn search_exit(exit: Exit, search: Option<&Search>) -> Exit {
    match search {
        Some(s) if exit == Exit::SloBreached && s.best().is_some() => Exit::Ok,
        _ => exit,
    }
}

/// Every request's body: the API, model, `--max-tokens` (when fixed) and `--extra-body`.
fn body_spec(
    args: &BenchArgs,
    target: &Target,
    model: &str,
    extra: Option<serde_json::Map<String, serde_json::Value>>,
) -> BodySpec {
    BodySpec {
        api: target.api,
        path: target.endpoint.path().to_string(),
        model: model.to_string(),
        max_tokens: Some(
            args.max_tokens
                .and_then(|d| d.fixed())
                .unwrap_or(crate::workload::DEFAULT_MAX_TOKENS),
        ),
        extra,
    }
}

/// The request factory: the prompt (or the trace's prompts and lengths) and the
/// workload's items, prefixes and think time.
fn request_factory(
    args: &BenchArgs,
    endpoint: &Endpoint,
    headers: http::HeaderMap,
    body: BodySpec,
    trace: &Option<Vec<TraceEntry>>,
    workload: &mut Workload,
) -> RequestFactory {
    let prompt = args
        .prompt
        .clone()
        .unwrap_or_else(|| DEFAULT_PROMPT.to_string());
    let mut factory = RequestFactory::new(
        endpoint.target.endpoint.clone(),
        headers,
        body,
        vec![prompt],
    );
    if let Some(entries) = trace {
        factory.prompts = std::mem::take(&mut workload.trace_prompts);
        factory.max_tokens = entries.iter().map(|e| e.output_tokens).collect();
    }
    workload.apply(&mut factory);
    factory
}

/// The per-request timeouts of the flags.
fn timeouts(args: &BenchArgs) -> Timeouts {
    Timeouts {
        connect: args.connect_timeout,
        header: args.header_timeout,
        first_token: args.ttft_timeout,
        idle: args.idle_timeout,
        total: args.total_timeout,
        max_response_bytes: args.max_response_bytes,
        max_chunks: args.max_chunks,
    }
}

/// The flags checked and read before a single request goes out.
struct Validated {
    extra: Option<serde_json::Map<String, serde_json::Value>>,
    extra_headers: Vec<(http::HeaderName, http::HeaderValue)>,
    trace: Option<Vec<TraceEntry>>,
    /// `--agent-trace`: the recorded sessions, retimed.
    agent_trace: Option<Vec<cadence_bench::agent_trace::TraceSession>>,
    /// Measured requests per level (`None`: until --duration ends the level).
    requests: Option<u64>,
}

/// Checks the flags that depend on each other and reads the inputs they name: any
/// problem is a usage error before the run starts.
fn validate(args: &BenchArgs) -> anyhow::Result<Validated> {
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
    if args.tui && !std::io::stdout().is_terminal() {
        return Err(usage(
            "--tui draws the dashboard on the terminal and stdout is not one: drop --tui (the progress line and the report print as usual)",
        ));
    }
    if args.workload.agent.tools.is_some()
        && !args.workload.agent.agent
        && args.agent_trace.is_none()
    {
        return Err(usage(
            "--tools declares the tools of --agent or --agent-trace sessions: give one of them",
        ));
    }
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
        && args.agent_trace.is_none()
        && args.find_max != Some(SearchAxis::Rate)
    {
        return Err(usage(
            "--max-concurrency caps an open loop: use it with --rate or --trace",
        ));
    }
    if !args.coalesce_wakes.is_zero() {
        coalescing_allowed(args).map_err(usage)?;
    }
    let trace = read_trace(args)?;
    let agent_trace = crate::agent_replay::read(args)?;
    // Every output path is checked before anything is sent (or the file truncated).
    let outputs =
        crate::output::named(args.json.as_deref(), args.records.as_deref(), &args.outputs);
    let inputs: Vec<std::path::PathBuf> = args
        .trace
        .iter()
        .chain(&args.agent_trace)
        .cloned()
        .collect();
    crate::output::preflight(&inputs, &outputs)?;
    check_fd_limit(args)?;
    let recorded = trace
        .as_ref()
        .map(Vec::len)
        .or(agent_trace.as_ref().map(Vec::len));
    let requests = match (args.requests, args.duration, recorded) {
        (n, _, Some(len)) => Some(n.map_or(len as u64, |n| n.min(len as u64))),
        (None, None, None) => Some(DEFAULT_REQUESTS),
        (n, _, None) => n,
    };
    if let (Some(ramp), Some(rates)) = (args.ramp_up, &args.rate) {
        let planned = requests.map(|n| n.saturating_add(args.warmup));
        for &rate in &rates.0 {
            if let Some(why) =
                cadence_core::arrivals::ramp_shortfall(rate, ramp, planned, args.duration)
            {
                return Err(usage(why));
            }
        }
    }
    Ok(Validated {
        extra,
        extra_headers,
        trace,
        agent_trace,
        requests,
    })
}

/// The client's own open-file limit: raised, then checked against the largest level
/// (an open loop without a cap or a search has no known bound: raised only).
fn check_fd_limit(args: &BenchArgs) -> anyhow::Result<()> {
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
    Ok(())
}

/// The `--trace` entries, sped up by `--trace-speed`.
fn read_trace(args: &BenchArgs) -> anyhow::Result<Option<Vec<TraceEntry>>> {
    let Some(path) = &args.trace else {
        return Ok(None);
    };
    if !(args.trace_speed.is_finite() && args.trace_speed > 0.0) {
        return Err(usage("--trace-speed must be a positive number"));
    }
    let text = std::fs::read_to_string(path)
        .map_err(|e| usage(format!("cannot read the trace {}: {e}", path.display())))?;
    let mut entries = cadence_bench::trace::parse_trace(&text)
        .map_err(|e| usage(format!("{}: {e}", path.display())))?;
    cadence_bench::trace::scale(&mut entries, args.trace_speed);
    Ok(Some(entries))
}

/// What the run talks to: the URL given, or the built-in simulator started for it
/// (stopped when this is dropped).
struct Endpoint {
    target: Target,
    builtin: Option<BuiltinSim>,
    /// The built-in simulator's engine model name.
    builtin_model: Option<String>,
}

impl Endpoint {
    fn start(args: &BenchArgs) -> anyhow::Result<Endpoint> {
        let builtin_config = match &args.url {
            Some(_) => {
                if crate::engine_opts::resolve(&args.engine, args.seed)?.is_some()
                    || !args.engine.inject.is_empty()
                {
                    return Err(usage(
                        "--preset/--engine/--inject drive the built-in simulator's engine: give them without a URL",
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
        let asked = args.api.and_then(|a| a.0);
        let target = Target::resolve(&url, asked).map_err(|e| usage(e.to_string()))?;
        if args.api == Some(crate::cli::ApiFlag(None)) && !args.quiet {
            eprintln!(
                "API auto: {} (from the path {}; the stream's framing follows its content type).",
                target.api.name(),
                target.endpoint.path()
            );
        }
        let builtin_model = builtin_config.map(|c| c.model);
        if builtin.is_some() && !args.quiet {
            eprintln!(
                "No URL given: benchmarking the built-in simulator at {url} (engine {}).",
                builtin_model.as_deref().unwrap_or("")
            );
        }
        Ok(Endpoint {
            target,
            builtin,
            builtin_model,
        })
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
    let mut secrets: Vec<String> = api_key.iter().cloned().collect();
    secrets.extend(
        extra_headers
            .iter()
            .filter_map(|(_, v)| v.to_str().ok().map(str::to_string)),
    );
    let mut headers = client::base_headers(api_key.as_deref(), extra_headers).map_err(usage)?;
    if api == cadence_wire::Api::Anthropic {
        client::anthropic_headers(&mut headers, api_key.as_deref(), extra_headers);
    }
    Ok((Redactor::new(secrets), headers))
}

/// `--model`, else the built-in simulator's engine, else the first model the server lists.
async fn model_name(
    args: &BenchArgs,
    endpoint: &Endpoint,
    http: &HyperClient,
    headers: &http::HeaderMap,
    redactor: &Redactor,
) -> anyhow::Result<String> {
    if let Some(m) = &args.model {
        return Ok(m.clone());
    }
    if endpoint.builtin.is_some() {
        return Ok(endpoint.builtin_model.clone().unwrap_or_default());
    }
    let timeout = args.connect_timeout + args.header_timeout;
    first_model(http, &endpoint.target, headers, timeout)
        .await
        .map_err(|e| match e.downcast_ref::<Unreachable>() {
            // Not a usage error: the command is right, the server is not there (exit 1).
            Some(u) => anyhow::anyhow!("{}", redactor.redact(&u.to_string())),
            None => usage(format!(
                "{}; pass --model NAME",
                redactor.redact(&format!("{e:#}"))
            )),
        })
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
    (terminals && !args.quiet && !args.no_tui).then_some(crate::dashboard::AUTO_DELAY)
}

/// The levels of a run: the planned list in order, or the `--find-max` search's probes.
struct Levels<'a> {
    args: &'a BenchArgs,
    fleet: &'a cadence_bench::shard::Fleet,
    cx: Arc<RunContext>,
    sender: RecordSender<Sinks>,
    planned: Vec<Load>,
    requests: Option<u64>,
    clock: Clock,
    scrape: Option<cadence_bench::scrape::ScrapeConfig>,
    /// The dashboard's state, told when each level begins and ends.
    live: Option<LiveState>,
}

impl Levels<'_> {
    /// Runs every level until the list or the search ends or Ctrl-C stops the run; each
    /// level's metadata goes to the records file as it ends.
    async fn run(
        self,
        stop_rx: tokio::sync::watch::Receiver<bool>,
    ) -> (Vec<LevelMeta>, Option<(SearchAxis, Search)>) {
        let args = self.args;
        let mut search = args.find_max.map(|axis| (axis, new_search(args, axis)));
        let sweep = self.planned.len() > 1 || search.is_some();
        let mut planned = self.planned.clone().into_iter();
        let mut metas = Vec::new();
        for i in 0u32.. {
            let load = match &search {
                None => planned.next(),
                Some((axis, s)) => s.next().map(|v| probe_load(args, *axis, v)),
            };
            let Some(load) = load else { break };
            let probe_level = match &load {
                Load::Closed { concurrency } => *concurrency as f64,
                Load::Open { rate, .. } => *rate,
                Load::Trace { .. } => 0.0,
            };
            let plan = RunPlan {
                load,
                requests: self.requests,
                duration: args.duration,
                warmup: args.warmup,
                grace: args.grace,
                level: i,
                stop_when_saturated: sweep,
            };
            self.live_begin(&plan);
            let mut rx = stop_rx.clone();
            let stop = async move {
                let _ = rx.wait_for(|s| *s).await;
            };
            let scraper = self.start_scraper().await;
            let summary = cadence_bench::run_placed(
                self.cx.clone(),
                &plan,
                self.clock,
                self.sender.clone(),
                stop,
                self.fleet.placement(i),
            )
            .await;
            let server = match scraper {
                Some(s) => s.finish().await.map(Box::new),
                None => None,
            };
            let interrupted = summary.stop == StopReason::Interrupted;
            if let (Some((_, s)), false) = (&mut search, interrupted) {
                s.record(probe_level, self.probe_passed(i, &summary).await);
            }
            let facts = level_facts(&plan, &summary);
            let mut meta = level_meta(&facts);
            meta.server = server;
            self.live_end(&meta);
            let line = runlog::level_line(&meta);
            self.sender.with(move |s| s.write_line(&line));
            if let Some(line) = self.fleet.level_line(&plan, &summary, &facts) {
                self.sender.with(move |s| s.write_line(&line));
            }
            metas.push(meta);
            if interrupted {
                break;
            }
        }
        (metas, search)
    }

    /// The level's `--server-metrics` scraper, started now (a thread that cannot be
    /// started is a note, and the level runs without it).
    async fn start_scraper(&self) -> Option<cadence_bench::scrape::Scraper> {
        let config = self.scrape.clone()?;
        cadence_bench::scrape::Scraper::start(config, self.clock)
            .await
            .map_err(|e| eprintln!("cadence: cannot start the metrics scraper: {e}"))
            .ok()
    }

    /// Tells the dashboard (when there is one) which level starts.
    fn live_begin(&self, plan: &RunPlan) {
        let Some(live) = &self.live else {
            return;
        };
        let args = self.args;
        let of = (args.find_max.is_none()).then_some(self.planned.len() as u32);
        let planned = self
            .requests
            .map(|n| self.cx.factory.total_turns(n + args.warmup));
        live.lock().begin_level(
            plan.level,
            of,
            plan.load.label(),
            planned,
            args.duration,
            self.clock.now_ns(),
        );
    }

    /// Tells the dashboard the level ended, and why early if it did.
    fn live_end(&self, meta: &LevelMeta) {
        if let Some(live) = &self.live {
            let note = match (&meta.stopped_early, meta.interrupted) {
                (Some(why), _) => Some(why.clone()),
                (None, true) => Some("interrupted".into()),
                (None, false) => None,
            };
            live.lock().end_level(meta.level, note);
        }
    }

    /// Whether level `i` was valid, within the error-rate ceiling and met every `--slo`.
    async fn probe_passed(&self, i: u32, summary: &RunSummary) -> bool {
        let args = self.args;
        let level = self
            .sender
            .query(move |s| {
                s.levels.get(i).map(|a| {
                    let f = a.finish(&LevelOptions::default());
                    let late = f.pacing.is_some_and(|p| p.invalid);
                    (f.summary, late)
                })
            })
            .await
            .flatten();
        // An invalid level (watchdog, late sends) never passes, whatever it measured.
        level.is_some_and(|(level, late)| {
            !summary.watchdog_fired
                && !late
                && probe_passes(&level, &args.slos, args.max_error_rate)
        })
    }
}

/// What the run knew about a level beyond its records, read off the runner's summary
/// and this machine ([`cadence_core::level_meta`] turns it into the level's metadata).
fn level_facts(plan: &RunPlan, summary: &RunSummary) -> LevelFacts {
    let (concurrency, rate) = match plan.load {
        Load::Closed { concurrency } => (Some(concurrency), None),
        Load::Open { rate, .. } => (None, Some(rate)),
        Load::Trace { .. } => (None, None),
    };
    LevelFacts {
        level: plan.level,
        name: plan.load.label(),
        concurrency,
        rate,
        intended: summary.intended,
        stopped_early: summary.stopped_early.clone(),
        watchdog_fired: summary.watchdog_fired,
        loop_lag: summary.loop_lag,
        cpu: summary.cpu,
        wall: summary.wall,
        cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
        aborted_in_flight: summary.aborted_in_flight,
        interrupted: summary.stop == StopReason::Interrupted,
        floor: summary.floor,
    }
}

/// The `--find-max` search, from the first --rate / --concurrency value (default 1).
fn new_search(args: &BenchArgs, axis: SearchAxis) -> Search {
    let start = match axis {
        SearchAxis::Rate => args.rate.as_ref().map_or(1.0, |r| r.0[0]),
        SearchAxis::Concurrency => args.concurrency.as_ref().map_or(1.0, |c| c.0[0] as f64),
    };
    Search::new(
        start,
        axis == SearchAxis::Concurrency,
        args.max_probes as usize,
    )
}

/// The load of a search probe at level `v` of `axis`.
fn probe_load(args: &BenchArgs, axis: SearchAxis, v: f64) -> Load {
    match axis {
        SearchAxis::Concurrency => Load::Closed {
            concurrency: v as u32,
        },
        SearchAxis::Rate => open_load(args, v),
    }
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
    }
}

/// The search's answer as the report holds it.
fn search_report(axis: SearchAxis, s: &Search) -> SearchReport {
    SearchReport {
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

/// Asks the server which models it serves and takes the first. A server that cannot
/// be connected to at all is an [`Unreachable`] error.
async fn first_model(
    http: &HyperClient,
    target: &Target,
    headers: &http::HeaderMap,
    timeout: Duration,
) -> anyhow::Result<String> {
    let mut headers = headers.clone();
    headers.remove(http::header::CONTENT_TYPE);
    let fetch = async {
        let max = cadence_transport::get::MAX_BODY;
        let body = cadence_transport::get::get(http, &target.models, &headers, timeout, max)
            .await
            .map_err(|e| match e {
                GetError::Unreachable(u) => anyhow::Error::new(u),
                e => anyhow::Error::new(e),
            })?;
        let v: serde_json::Value =
            serde_json::from_slice(&body).context("the model list is not JSON")?;
        // OpenAI and Anthropic `data[0].id`, Ollama `models[0].name`, TGI `model_id`,
        // KServe `name`.
        let names = [
            &v["data"][0]["id"],
            &v["models"][0]["name"],
            &v["model_id"],
            &v["name"],
        ];
        let name = names
            .into_iter()
            .find_map(|m| m.as_str())
            .map(str::to_string);
        name.ok_or_else(|| anyhow::anyhow!("the model list is empty"))
    };
    fetch.await.with_context(|| {
        format!(
            "could not list models at {}",
            redact_url(&target.models.to_string())
        )
    })
}

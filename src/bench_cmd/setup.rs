//! Everything a `bench` run needs before its first level, from the flags: the workload,
//! the endpoint, the client, the request factory, the levels' loads, the progress line
//! and the record thread with its sinks.

use super::endpoint::{model_name, Endpoint};
use super::validate::{validate, Validated};
use super::{checks, credentials, note_overridden, planned_loads, Sinks};
use crate::cli::{BenchArgs, DEFAULT_CONCURRENCY};
use crate::exit::usage;
use crate::workload::Workload;
use cadence_bench::body::BodySpec;
use cadence_bench::progress::Progress;
use cadence_bench::sink::BenchSinks;
use cadence_bench::target::Target;
use cadence_bench::trace::TraceEntry;
use cadence_bench::workload::{RequestFactory, DEFAULT_PROMPT};
use cadence_bench::{Load, RunContext, Timeouts};
use cadence_otlp::run::propagation;
use cadence_records::{RecordSender, RecordThread, RecordsConfig};
use cadence_transport::client::{self, ClientConfig, HyperClient};
use cadence_tui::dashboard::LiveState;
use std::io::IsTerminal;
use std::sync::Arc;

/// Everything a run needs before its first level: the endpoint (the built-in
/// simulator started), the request context, the levels, the progress line and the
/// records sink.
pub(super) struct Setup {
    pub(super) endpoint: Endpoint,
    pub(super) model: String,
    pub(super) cx: Arc<RunContext>,
    pub(super) loads: Vec<Load>,
    pub(super) requests: Option<u64>,
    pub(super) progress: Progress,
    pub(super) sender: RecordSender<Sinks>,
    pub(super) sink: RecordThread<Sinks>,
    pub(super) records_path: Option<std::path::PathBuf>,
    /// The temporary records file behind the per-request CSV, removed when dropped.
    pub(super) _spill: Option<tempfile::TempPath>,
    /// `--server-metrics`: where each level scrapes the server's own metrics.
    pub(super) scrape: Option<cadence_bench::scrape::ScrapeConfig>,
    /// Wake-up coalescing for the run: kernel stamps time each chunk, so the runtime's
    /// workers may let reads gather (`cadence_bench::coalesce`).
    pub(super) _coalesce: Option<cadence_bench::coalesce::Enabled>,
    /// `--otlp`: the span and metrics exporters, their sink on the record thread.
    pub(super) otlp: Option<cadence_otlp::signals::Exports>,
}

impl Setup {
    /// `live`: the dashboard's state, fed as one of the sinks.
    pub(super) async fn new(args: &BenchArgs, live: Option<LiveState>) -> anyhow::Result<Setup> {
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
        let (otlp, exporter) = start_otlp(args, &endpoint.target, &model)?.unzip();
        let (sender, sink) = record_thread(args, records_path.clone(), &progress, live, exporter)?;
        let cx = Arc::new(RunContext {
            client: http,
            factory,
            timeouts: timeouts(args),
            api: endpoint.target.api,
            strict: args.strict,
            redactor,
            progress: progress.clone(),
            tokenizer: workload.tokenizer.clone(),
            propagation: otlp
                .as_ref()
                .filter(|o| o.traces())
                .map(|_| propagation(args.otlp.otlp_sample)),
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
            otlp,
        })
    }
}

/// The exporters and their sink for bench's requests to `target` (client spans, the
/// run's metrics) when `--otlp` or an `OTEL_EXPORTER_OTLP_*` endpoint asks for them.
fn start_otlp(
    args: &BenchArgs,
    target: &Target,
    model: &str,
) -> anyhow::Result<Option<(cadence_otlp::signals::Exports, cadence_otlp::signals::Sinks)>> {
    let t = cadence_otlp::run::Target {
        endpoint: &target.endpoint,
        operation: cadence_otlp::run::operation(target.api, target.endpoint.path()),
        model,
        stall_threshold: args.stall_threshold,
        chunk_events: args.otlp.otlp_chunk_events,
        kind: cadence_otlp::proto::SpanKind::Client,
    };
    let (flag, protocol) = (args.otlp.otlp.as_deref(), args.otlp.otlp_protocol);
    let signals = args.otlp.otlp_signals;
    Ok(cadence_otlp::signals::start_if_asked(
        flag, protocol, signals, t,
    )?)
}

/// The record thread and its sinks: the records file (when one is written), the
/// progress view, the dashboard's live state and the level aggregators.
fn record_thread(
    args: &BenchArgs,
    records_path: Option<std::path::PathBuf>,
    progress: &Progress,
    live: Option<LiveState>,
    exporter: Option<cadence_otlp::signals::Sinks>,
) -> anyhow::Result<(RecordSender<Sinks>, RecordThread<Sinks>)> {
    let mut sinks = BenchSinks::new(
        records_path.map(RecordsConfig::new),
        progress.clone(),
        checks(args).aggregators(),
    )?;
    if let Some(live) = live {
        sinks = sinks.with_live(live);
    }
    if let Some(exporter) = exporter {
        sinks = sinks.with_exporter(exporter);
    }
    if let Some(status) = sinks.status() {
        // A full disk is named the moment it happens; the run goes on.
        tokio::spawn(async move { eprintln!("cadence: {}", status.failed().await) });
    }
    Ok(RecordThread::start(sinks)?)
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

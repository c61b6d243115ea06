//! The command line: every subcommand's argument types and the value parsers they use,
//! clap definitions only, in one module the subcommands depend on (never the reverse).
//! Parsing turns flags into typed values (durations, enums); each subcommand validates
//! them into its domain config.

use cadence_bench::agent::DurationDist;
use cadence_bench::prompts::LengthDist;
use cadence_engine::Speculation;
use clap::{Args, Parser, Subcommand, ValueEnum};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Parser)]
#[command(
    name = "cadence",
    version,
    about = "Measure how a streaming LLM endpoint feels: TTFT, ITL, TPOT, E2E and throughput under load",
    propagate_version = true
)]
pub struct Cli {
    /// Runtime worker threads. Default: one per core, or one fewer when `cadence bench`
    /// runs its built-in simulator in the same process.
    #[arg(long, global = true, env = "CADENCE_THREADS", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: Option<u16>,

    #[command(subcommand)]
    pub command: Command,
}

impl Cli {
    /// The worker threads to run with on a machine of `cores` cores.
    pub fn worker_threads(&self, cores: usize) -> usize {
        if let Some(t) = self.threads {
            return t as usize;
        }
        let shares_with_sim = match &self.command {
            Command::Bench(b) => b.url.is_none(),
            // Its simulator is a process of its own, scheduled beside the client by the
            // OS. On one thread fewer the client could not drain 1,000 streams' reads
            // within a 10 ms gap on two cores, and the kernel merged the events that
            // waited (BENCHMARKS, "Kernel vs user clock on a saturated machine").
            Command::Fidelity(_) => false,
            Command::Sim(_)
            | Command::Plan(_)
            | Command::Proxy(_)
            | Command::Report(_)
            | Command::Compare(_)
            | Command::Top(_)
            | Command::Watch(_)
            | Command::Twin(_) => false,
        };
        if shares_with_sim {
            cores.saturating_sub(1).max(1)
        } else {
            cores.max(1)
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Benchmark a streaming endpoint (or, with no URL, the built-in simulator).
    Bench(Box<BenchArgs>),
    /// Serve the simulated OpenAI-compatible streaming LLM.
    Sim(Box<SimArgs>),
    /// Check the client's timing fidelity against the simulator's own send log.
    Fidelity(FidelityArgs),
    /// Sit in front of a streaming endpoint: forward traffic unchanged, measure every
    /// stream (TTFT, ITL, TPOT), export Prometheus metrics, serve /stats, evaluate alerts.
    Proxy(Box<ProxyArgs>),
    /// Predict a run from the engine model in virtual time (no server, no HTTP).
    Plan(Box<PlanArgs>),
    /// Rebuild a report (console, JSON, CSV, HTML, Markdown) from saved records or a
    /// saved JSON report.
    Report(ReportArgs),
    /// Compare two runs (JSON reports or records files) per level and metric.
    Compare(CompareArgs),
    /// The live dashboard of a running `cadence proxy`, from its /stats (rolling 1- and
    /// 5-minute windows, alerts, the proxy's own loop lag).
    Top(TopArgs),
    /// Watch endpoints on a schedule: small probes through the bench runner, kept in
    /// SQLite, served as a page with charts, Prometheus metrics and incident webhooks.
    /// With no CONFIG, watches the built-in simulator.
    Watch(Box<WatchArgs>),
    /// The endpoint's twin: an empirical model learned from records (shared decode
    /// and prefill steps, queueing for slots), asked by `cadence plan --twin`.
    Twin(TwinArgs),
}

/// Flags of `cadence twin`.
#[derive(Debug, Args)]
pub struct TwinArgs {
    #[command(subcommand)]
    pub command: TwinCommand,
}

#[derive(Debug, Subcommand)]
pub enum TwinCommand {
    /// Learn a twin from runs (records files, the proxy's records, other tools'
    /// saved runs holding chunk times) and write it as one TOML file.
    Fit(TwinFitArgs),
    /// Judge a twin the held-out way: fit on one run, predict other runs' loads, print
    /// per quantile the error, the rerun noise, and the engine model's error beside.
    Check(Box<TwinCheckArgs>),
}

/// Flags of `cadence twin check`.
#[derive(Debug, Args)]
pub struct TwinCheckArgs {
    /// The run the twin is fitted on (and the engine calibrated on, with --preset or
    /// --engine).
    #[arg(value_name = "FIT")]
    pub fit: PathBuf,

    /// Runs whose loads are predicted; two runs of the same load give its rerun noise.
    #[arg(required = true, value_name = "HELDOUT")]
    pub heldout: Vec<PathBuf>,

    /// Calibrate this engine on FIT as `plan --calibrate` does and judge it beside the
    /// twin (engine flags as `cadence plan` takes them).
    #[command(flatten)]
    pub engine: EngineOpts,

    /// Seeds the twin's draws (and Poisson arrivals of a run that kept no seed).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// Flags of `cadence twin fit`.
#[derive(Debug, Args)]
pub struct TwinFitArgs {
    /// The runs to learn from, each on its own timeline.
    #[arg(required = true, value_name = "RUN")]
    pub runs: Vec<PathBuf>,

    /// Where the twin is written (TOML, format 1).
    #[arg(short, long, value_name = "FILE")]
    pub output: PathBuf,
}

/// Flags of `cadence watch`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct WatchArgs {
    #[command(subcommand)]
    pub command: Option<WatchCommand>,

    /// The config file (TOML: targets, probe shapes, SLOs; every key is shown in
    /// examples/watch.toml). None: watch the built-in simulator.
    pub config: Option<PathBuf>,

    /// The SQLite database the probes are kept in (created when missing; one watcher
    /// per file).
    #[arg(long, default_value = "cadence-watch.db")]
    pub db: PathBuf,

    /// Where the page, /api/targets and /metrics are served (port 0: any free port,
    /// printed at start).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,

    /// Probes older than this are deleted (at start, then every hour or every quarter
    /// of this when shorter).
    #[arg(long, default_value = "30d", value_parser = parse_positive_duration)]
    pub retain: Duration,

    /// POST a JSON event here when a target's incident starts and ends (over the
    /// config's `webhook`).
    #[arg(long)]
    pub webhook: Option<String>,

    /// Print only the page's address and errors, not every probe.
    #[arg(long, short)]
    pub quiet: bool,

    /// Probe every target once, now, one after another, keep the probes as usual and
    /// exit: 0 when every probe met its SLOs, 3 when one breached (a check after a
    /// deploy, or from cron, with the watch's own config). A target outside its
    /// `hours` is skipped.
    #[arg(long)]
    pub once: bool,

    /// This watcher's name among several feeding one shared store (over the config's
    /// `vantage`; default: the host's name).
    #[arg(long)]
    pub vantage: Option<String>,

    #[command(flatten)]
    pub shared: SharedStoreArgs,

    // Tracing: each probe one trace (its span, each request's a child) and its requests
    // in the target's OTLP metric series (docs/src/tracing.md).
    #[command(flatten, next_help_heading = TRACING)]
    pub otlp: OtlpArgs,
}

/// Where the shared store (PostgreSQL) is.
#[derive(Debug, Args, Clone, Default)]
pub struct SharedStoreArgs {
    /// The shared store several watchers feed: a PostgreSQL `postgres://user@host/db`
    /// URL or libpq `key=value` string (over the config's `[shared] url`). Each probe
    /// is kept in --db first and shipped after, so an unreachable store only delays it.
    #[arg(long, value_name = "URL")]
    pub shared: Option<String>,

    /// The environment variable holding the shared store's password (its NAME; over the
    /// config's `[shared] password_env`).
    #[arg(long, value_name = "VAR")]
    pub shared_password_env: Option<String>,

    /// A PEM file of CA certificates to trust for the shared store's TLS beside the
    /// public roots (a self-hosted server's private CA; over `[shared] ca_file`). Add
    /// `sslmode=require` to the address to refuse a server without TLS.
    #[arg(long, value_name = "FILE")]
    pub shared_ca: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub enum WatchCommand {
    /// Report the targets' standing and incidents over a window, from the database
    /// (offline: no watcher needed), or every vantage's from the shared store.
    Report(WatchReportArgs),
    /// Serve the page of a shared store alone: every vantage's probes compared, no
    /// probing of its own.
    Serve(WatchServeArgs),
}

/// Flags of `cadence watch serve`.
#[derive(Debug, Args)]
pub struct WatchServeArgs {
    #[command(flatten)]
    pub shared: SharedStoreArgs,

    /// Where the page is served (port 0: any free port, printed at start).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,

    /// Delete every vantage's probes older than this from the shared store (at start,
    /// then hourly), and forget vantages silent since; each watcher already deletes its
    /// own by its --retain, so this clears what retired watchers left.
    #[arg(long, value_parser = parse_positive_duration)]
    pub retain: Option<Duration>,
}

/// Flags of `cadence watch report`.
#[derive(Debug, Args)]
pub struct WatchReportArgs {
    /// The watcher's database (not with --shared, which reads every vantage's probes
    /// from the store instead).
    #[arg(long, default_value = "cadence-watch.db", conflicts_with = "shared")]
    pub db: PathBuf,

    /// The window: probes that started within this before now.
    #[arg(long, default_value = "24h", value_parser = parse_positive_duration)]
    pub since: Duration,

    /// Also write the report as Markdown to this file ('-': stdout, instead of the
    /// console text).
    #[arg(long)]
    pub markdown: Option<PathBuf>,

    /// Also write the report as HTML (with the charts) to this file ('-': stdout).
    #[arg(long)]
    pub html: Option<PathBuf>,

    /// Also write the report as JSON (the same figures as data, `schema_version` 1) to
    /// this file ('-': stdout).
    #[arg(long)]
    pub json: Option<PathBuf>,

    /// Read every vantage's probes from this shared store instead of --db, and compare
    /// the vantages.
    #[command(flatten)]
    pub shared: SharedStoreArgs,
}

#[derive(Debug, Args)]
pub struct TopArgs {
    /// The proxy's metrics address (its --metrics-listen), e.g. http://127.0.0.1:9464;
    /// /stats is read from it.
    pub url: String,

    /// How often to read /stats.
    #[arg(long, default_value = "1s", value_parser = parse_positive_duration)]
    pub interval: Duration,

    /// Print one frame as text and exit (also what a pipe gets).
    #[arg(long)]
    pub once: bool,

    /// Columns and rows of the --once frame.
    #[arg(long, default_value_t = 110, value_parser = clap::value_parser!(u16).range(20..=1000))]
    pub width: u16,
    #[arg(long, default_value_t = 34, value_parser = clap::value_parser!(u16).range(10..=1000))]
    pub height: u16,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SearchAxis {
    Rate,
    Concurrency,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TimestampsArg {
    Kernel,
    User,
}

impl From<TimestampsArg> for cadence_transport::Timestamps {
    fn from(t: TimestampsArg) -> Self {
        match t {
            TimestampsArg::Kernel => cadence_transport::Timestamps::Kernel,
            TimestampsArg::User => cadence_transport::Timestamps::User,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ArrivalsArg {
    Constant,
    Poisson,
}

/// Parses a level list: `8`, `1,2,4`, `1..128:x2`, `4..16:+4` (ranges include the end
/// when a step lands on it).
pub fn parse_levels(s: &str) -> Result<Vec<f64>, String> {
    const MAX_LEVELS: usize = 1000;
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        if part.is_empty() {
            return Err(format!("'{s}' has an empty level"));
        }
        if let Some((range, step)) = part.split_once(':') {
            let (a, b) = range
                .split_once("..")
                .ok_or_else(|| format!("'{part}': a range looks like 1..128:x2 or 4..16:+4"))?;
            let (a, b) = (number(a)?, number(b)?);
            if a > b {
                return Err(format!("'{part}': the range goes down"));
            }
            let (mul, add) = if let Some(k) = step.strip_prefix('x') {
                (number(k)?, 0.0)
            } else if let Some(k) = step.strip_prefix('+') {
                (1.0, number(k)?)
            } else {
                return Err(format!("'{part}': the step is xK (multiply) or +K (add)"));
            };
            if mul <= 1.0 && add <= 0.0 {
                return Err(format!("'{part}': the step must grow the level"));
            }
            let mut v = a;
            while v <= b * (1.0 + 1e-12) {
                out.push(v);
                if out.len() > MAX_LEVELS {
                    return Err(format!("'{s}' makes more than {MAX_LEVELS} levels"));
                }
                v = v * mul + add;
            }
        } else {
            out.push(number(part)?);
        }
    }
    Ok(out)
}

fn number(s: &str) -> Result<f64, String> {
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))?;
    if !v.is_finite() || v <= 0.0 {
        return Err(format!("'{s}': levels must be positive"));
    }
    Ok(v)
}

/// Closed-loop levels (a newtype so clap takes the list as one value).
#[derive(Debug, Clone, PartialEq)]
pub struct Counts(pub Vec<u32>);

/// Open-loop levels in requests/s.
#[derive(Debug, Clone, PartialEq)]
pub struct Rates(pub Vec<f64>);

pub(crate) fn parse_counts(s: &str) -> Result<Counts, String> {
    parse_levels(s)?
        .into_iter()
        .map(|v| {
            if v.fract() != 0.0 || v > 100_000.0 {
                Err(format!(
                    "concurrency {v} must be a whole number from 1 to 100000"
                ))
            } else {
                Ok(v as u32)
            }
        })
        .collect::<Result<_, _>>()
        .map(Counts)
}

pub(crate) fn parse_rates(s: &str) -> Result<Rates, String> {
    let rates = parse_levels(s)?;
    if let Some(r) = rates.iter().find(|&&r| r > MAX_RATE) {
        return Err(format!("rate {r} is above {MAX_RATE} requests/s"));
    }
    Ok(Rates(rates))
}

pub(crate) fn parse_slo(s: &str) -> Result<cadence_core::Slo, String> {
    s.parse()
        .map_err(|e: cadence_core::SloParseError| e.to_string())
}

/// `0.1%` or `0.001`.
pub fn parse_share(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let v = match t.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|v| v / 100.0),
        None => t.parse::<f64>(),
    }
    .map_err(|_| format!("'{s}' is not a share; write 0.1% or 0.001"))?;
    if !(0.0..=1.0).contains(&v) {
        return Err(format!("'{s}' must be between 0 and 100%"));
    }
    Ok(v)
}

/// `--api`'s value: a dialect, or `None` for `auto` (from the URL's path). Read by
/// [`cadence_wire::Api::parse_or_auto`], the one table of names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ApiFlag(pub Option<cadence_wire::Api>);

/// `--api`'s parser: the names `auto` and every dialect's (listed in the help and in
/// the error for another name).
fn api_flag() -> impl clap::builder::TypedValueParser<Value = ApiFlag> {
    use clap::builder::TypedValueParser;
    let names = std::iter::once("auto").chain(cadence_wire::Api::ALL.map(|a| a.name()));
    clap::builder::PossibleValuesParser::new(names)
        .try_map(|s: String| cadence_wire::Api::parse_or_auto(&s).map(ApiFlag))
}

pub use cadence_core::duration::MAX_DURATION;

/// Most requests (`-n`) or warm-up requests a level may send.
pub const MAX_REQUESTS: u64 = 1_000_000_000;

/// A token count's ceiling on a flag (`--max-tokens`, `--burst`, `--chunk-tokens`,
/// `--tool-result-tokens`): a length's, [`cadence_bench::prompts::MAX_LENGTH`] (2^24).
const MAX_TOKENS: i64 = cadence_bench::prompts::MAX_LENGTH as i64;

/// Highest open-loop rate, requests/s.
pub const MAX_RATE: f64 = 1_000_000.0;

/// A duration flag, read by the workspace's one parser ([`cadence_core::parse_duration`]),
/// at most [`MAX_DURATION`].
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = cadence_core::parse_duration(s)
        .map_err(|e| format!("'{s}' is not a duration ({e}); try 500ms, 10s or 2m"))?;
    if d > MAX_DURATION {
        return Err(format!("'{s}' is longer than a year"));
    }
    Ok(d)
}

pub use cadence_bench::shard::MAX_SHARDS;

/// `bench`'s measured requests per level when neither -n nor -d is given.
pub const DEFAULT_REQUESTS: u64 = 64;

/// `bench`'s closed-loop concurrency when neither -c nor -r is given.
pub const DEFAULT_CONCURRENCY: u32 = 8;

/// `--start-at`: an RFC 3339 time ([`cadence_core::wallclock`]), at most a year ahead.
pub fn parse_start_at(s: &str) -> Result<std::time::SystemTime, String> {
    let at = cadence_core::wallclock::parse_rfc3339(s)?;
    if at > std::time::SystemTime::now() + MAX_DURATION {
        return Err(format!("'{s}' is more than a year ahead"));
    }
    Ok(at)
}

/// A byte size: a number with an optional unit (`B`, `KB`, `MB`, `GB`, `KiB`, `MiB`,
/// `GiB`), at least 1 byte.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{s}' is not a size; try 256MiB, 10MB or 4096"))?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "kb" => 1_000,
        "mb" => 1_000_000,
        "gb" => 1_000_000_000,
        "kib" => 1 << 10,
        "mib" => 1 << 20,
        "gib" => 1 << 30,
        _ => return Err(format!("'{s}': unknown unit; try 256MiB, 10MB or 4096")),
    };
    match n.checked_mul(mult) {
        Some(0) => Err(format!("'{s}' must be at least 1 byte")),
        Some(v) => Ok(v),
        None => Err(format!("'{s}' is too large")),
    }
}

/// `--max-chunks`: 1 to 2^32 (a chunk index is a `u32` in records).
fn parse_max_chunks(s: &str) -> Result<usize, String> {
    let n: u64 = s
        .parse()
        .map_err(|_| format!("'{s}' is not a whole number"))?;
    if n == 0 || n > u64::from(u32::MAX) {
        return Err(format!("'{s}' must be between 1 and {}", u32::MAX));
    }
    Ok(n as usize)
}

/// A duration that must be longer than 0 (a timeout, a threshold).
pub fn parse_positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("'{s}' must be longer than 0"));
    }
    Ok(d)
}

/// The time-series bucket: at least 1 ms (finer buckets only multiply memory).
pub fn parse_time_bucket(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d < Duration::from_millis(1) {
        return Err(format!("'{s}': a time bucket is at least 1ms"));
    }
    Ok(d)
}

// The headings of `cadence bench --help`, in the order they are shown: the common
// ones first. A heading appears where its first option does, so the fields of
// `BenchArgs` are ordered by heading.
const TARGET: &str = "Target";
const LOAD: &str = "Load";
const WORKLOAD: &str = "Workload";
const OUTPUT: &str = "Output";
const AGENT: &str = "Agent sessions";
const GATES: &str = "Gates (exit 3 and 4)";
const MEASUREMENT: &str = "Measurement";
const TIMEOUTS: &str = "Timeouts";
const FLEET: &str = "Fleet";
const SIMULATOR: &str = "Built-in simulator (no URL)";
const TRACING: &str = "Tracing (OpenTelemetry)";

/// OpenTelemetry export: each measured request one OTLP span, sent off the measuring
/// path (docs/src/tracing.md).
#[derive(Debug, Clone, Default, Args)]
pub struct OtlpArgs {
    /// Send each request as an OTLP span to this collector: a base URL
    /// (http://127.0.0.1:4318, Phoenix's http://127.0.0.1:6006; /v1/traces is added)
    /// or the traces endpoint itself; over grpc the base URL (http://127.0.0.1:4317;
    /// port 4317 when an http:// URL names none). Default:
    /// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT or OTEL_EXPORTER_OTLP_ENDPOINT when set;
    /// headers from OTEL_EXPORTER_OTLP_HEADERS.
    #[arg(long, value_name = "URL")]
    pub otlp: Option<String>,

    /// http/protobuf (the default), http/json or grpc (unary calls over HTTP/2: h2c on
    /// http://, TLS on https://). Default: OTEL_EXPORTER_OTLP_PROTOCOL.
    #[arg(long, value_name = "PROTOCOL", value_parser = cadence_otlp::Protocol::parse)]
    pub otlp_protocol: Option<cadence_otlp::Protocol>,

    /// An event on each span for each of its first N chunks (0: none; at most 1000).
    #[arg(long, value_name = "N", default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub otlp_chunk_events: u32,

    /// The share of requests traced (0.1 or 10%): each request carries a W3C traceparent,
    /// sampled when its trace id falls within the share, and only sampled ones are
    /// exported (a session's steps are sampled together).
    #[arg(long, value_name = "SHARE", default_value = "1", value_parser = parse_share)]
    pub otlp_sample: f64,

    /// Which signals --otlp sends: traces (a span per request), metrics (the TTFT,
    /// ITL, TPOT, E2E and token histograms, by model, to /v1/metrics, every
    /// OTEL_METRIC_EXPORT_INTERVAL ms, default 10000, and at the end) or both. The
    /// simulator sends spans only.
    #[arg(long, value_name = "LIST", default_value = "traces,metrics", value_parser = cadence_otlp::Signals::parse)]
    pub otlp_signals: cadence_otlp::Signals,
}

impl OtlpArgs {
    /// The flags as the crates take them.
    pub fn flags(&self) -> cadence_otlp::signals::Flags<'_> {
        cadence_otlp::signals::Flags {
            otlp: self.otlp.as_deref(),
            protocol: self.otlp_protocol,
            signals: self.otlp_signals,
            sample: self.otlp_sample,
            chunk_events: self.otlp_chunk_events,
        }
    }
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Base URL of an OpenAI-compatible API (e.g. http://127.0.0.1:8000/v1) or a full
    /// endpoint. Without it, Cadence starts its built-in simulator and benchmarks that.
    pub url: Option<String>,

    /// API dialect. Without it (or with `auto`), inferred from a URL naming an endpoint
    /// (/chat/completions, /responses, /messages, /api/chat, /generate_stream, ...), else chat.
    #[arg(long, value_parser = api_flag(), help_heading = TARGET)]
    pub api: Option<ApiFlag>,

    /// Model name sent in each request. Default: the first model the server lists.
    #[arg(long, help_heading = TARGET)]
    pub model: Option<String>,

    /// Extra request header, 'Name: value' (repeatable). Values are never printed.
    #[arg(short = 'H', long = "header", value_name = "HEADER", help_heading = TARGET)]
    pub headers: Vec<String>,

    /// Environment variable holding the API key, sent as a bearer token.
    #[arg(long, default_value = "OPENAI_API_KEY", value_name = "VAR", help_heading = TARGET)]
    pub api_key_env: String,

    /// Speak HTTP/2 (prior knowledge on http://, ALPN on https://).
    #[arg(long, help_heading = TARGET)]
    pub http2: bool,

    /// A PEM file of CA certificates to trust on https:// beside the public roots: an
    /// endpoint behind a private CA (a staging cluster's). Checks stay on.
    #[arg(long, value_name = "FILE", help_heading = TARGET)]
    pub ca_file: Option<PathBuf>,

    /// Requests in flight at once (closed loop). A list or range sweeps levels:
    /// `1,2,4,8` or `1..128:x2` (×2 steps) or `4..16:+4`. Default 8.
    #[arg(short = 'c', long, value_parser = parse_counts, conflicts_with = "rate", help_heading = LOAD)]
    pub concurrency: Option<Counts>,

    /// Open loop: requests per second, sent on schedule whatever the server does.
    /// A list or range sweeps levels: `1,2,5,10` or `1..64:x2`.
    #[arg(short = 'r', long, value_parser = parse_rates, help_heading = LOAD)]
    pub rate: Option<Rates>,

    /// Measured requests to send. Default 64 when --duration is not given.
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u64).range(1..=MAX_REQUESTS), help_heading = LOAD)]
    pub requests: Option<u64>,

    /// Send requests for this long (e.g. 30s, 5m), then drain within --grace.
    #[arg(short = 'd', long, value_parser = parse_duration, help_heading = LOAD)]
    pub duration: Option<Duration>,

    /// Requests sent first and left out of every statistic.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=MAX_REQUESTS), help_heading = LOAD)]
    pub warmup: u64,

    /// Open-loop inter-arrival times: evenly spaced, or Poisson (seeded by --seed).
    #[arg(long, value_enum, default_value = "constant", requires = "rate", help_heading = LOAD)]
    pub arrivals: ArrivalsArg,

    /// Open loop: at most this many requests in flight; arrivals beyond it are dropped
    /// (and counted).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000), help_heading = LOAD)]
    pub max_concurrency: Option<u32>,

    /// Open loop: grow the rate linearly from 0 over this long (rate × ramp / 2
    /// requests); -n and -d must outlast it, or the level never reaches its rate.
    #[arg(long, requires = "rate", value_parser = parse_duration, help_heading = LOAD)]
    pub ramp_up: Option<Duration>,

    /// Replay a trace: JSON Lines with an arrival time (`timestamp` ms as in Mooncake
    /// traces, `timestamp_ms`, `arrival_s`, `time_s` or `offset_ms`) and a `prompt`
    /// or `input_length`, optionally `output_length`/`max_tokens`. Open loop.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["rate", "concurrency"], help_heading = LOAD)]
    pub trace: Option<PathBuf>,

    /// Replay the trace this many times faster (2 = arrivals twice as dense).
    #[arg(long, default_value_t = 1.0, requires = "trace", help_heading = LOAD)]
    pub trace_speed: f64,

    /// Replay recorded agent sessions: Cadence session JSON Lines, a Mooncake-style
    /// hash-id trace or an OTLP JSON span export (OpenTelemetry GenAI or OpenInference
    /// token counts), told apart by content. Each call sends its recorded input tokens
    /// exactly (the reused context with the live replies, then new text) and asks for
    /// its output tokens; sessions arrive on the trace's schedule (open loop) and each
    /// call waits its recorded tool wait. Chat, Responses and Anthropic Messages APIs.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["trace", "rate", "concurrency", "prompt", "find_max", "agent", "dataset", "input_tokens", "turns"], help_heading = LOAD)]
    pub agent_trace: Option<PathBuf>,

    /// The --agent-trace file's layout, when its content does not tell.
    #[arg(long, value_enum, value_name = "FORMAT", default_value = "auto", requires = "agent_trace", help_heading = LOAD)]
    pub agent_trace_format: AgentTraceFormat,

    /// Replay the agent trace's clock this many times faster: session arrivals, tool
    /// waits and recorded call offsets are divided by it.
    #[arg(long, default_value_t = 1.0, requires = "agent_trace", help_heading = LOAD)]
    pub agent_trace_speed: f64,

    /// Idle gaps of the agent trace longer than this are cut to it: between session
    /// arrivals, a tool wait, or between a session's recorded call arrivals.
    #[arg(long, value_name = "DURATION", default_value = "60s", value_parser = parse_duration, requires = "agent_trace", help_heading = LOAD)]
    pub agent_trace_max_gap: Duration,

    /// Tokens per hash_ids block of a Mooncake-style --agent-trace.
    #[arg(long, value_name = "N", default_value_t = cadence_bench::agent_trace::DEFAULT_BLOCK_SIZE, value_parser = clap::value_parser!(u32).range(1..=1_000_000), requires = "agent_trace", help_heading = LOAD)]
    pub agent_trace_block_size: u32,

    /// Search for the highest rate or concurrency that meets every --slo: grow ×2 from
    /// the first --rate / --concurrency value (default 1), then bisect.
    #[arg(long, value_enum, value_name = "AXIS", help_heading = LOAD)]
    pub find_max: Option<SearchAxis>,

    /// Most levels the --find-max search may probe.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64), help_heading = LOAD)]
    pub max_probes: u32,

    /// max_tokens of each request: N, fixed:N, normal:MEAN,SD or uniform:LO..HI,
    /// drawn per request by --seed (default 64; a dataset's recorded reply lengths).
    #[arg(long, value_name = "DIST", value_parser = parse_length, help_heading = WORKLOAD)]
    pub max_tokens: Option<cadence_bench::prompts::LengthDist>,

    /// The prompt of every request (default: a built-in story prompt).
    #[arg(long, help_heading = WORKLOAD)]
    pub prompt: Option<String>,

    /// A JSON object merged into every request body (e.g. '{"ignore_eos": true}').
    #[arg(long, value_name = "JSON", help_heading = WORKLOAD)]
    pub extra_body: Option<String>,

    /// Seed of every draw: prompts and their lengths, dataset order, Poisson arrivals,
    /// the built-in simulator. Default: a new one each run, printed and recorded, so a
    /// rerun sends prompts the server's prompt cache has not seen; give it to repeat a
    /// run exactly.
    #[arg(long = "seed", value_name = "N", help_heading = WORKLOAD)]
    pub seed_given: Option<u64>,

    /// The seed the run uses: `--seed`, else one drawn when the run starts
    /// ([`BenchArgs::resolve_seed`]).
    #[arg(skip)]
    pub seed: u64,

    #[command(flatten, next_help_heading = WORKLOAD)]
    pub workload: WorkloadArgs,

    /// Write the JSON report here.
    #[arg(long, value_name = "FILE", help_heading = OUTPUT)]
    pub json: Option<PathBuf>,

    /// Write one JSON line per request here, as requests finish (a name ending in
    /// .zst is zstd-compressed; `cadence report` reads it back either way).
    #[arg(long, value_name = "FILE", help_heading = OUTPUT)]
    pub records: Option<PathBuf>,

    #[command(flatten, next_help_heading = OUTPUT)]
    pub outputs: OutputArgs,

    #[command(flatten, next_help_heading = TRACING)]
    pub otlp: OtlpArgs,

    /// Width of the time-series buckets in the JSON report (ITL/TTFT and throughput
    /// over the run).
    #[arg(long, default_value = "1s", value_parser = parse_time_bucket, help_heading = OUTPUT)]
    pub time_bucket: Duration,

    /// No progress line.
    #[arg(short, long, help_heading = OUTPUT)]
    pub quiet: bool,

    /// The live dashboard in the terminal (q stops, s skips to the next level, ?
    /// shows the formulas). The default when stdout and stderr are terminals, after
    /// the run's first few seconds.
    #[arg(long, conflicts_with_all = ["no_tui", "quiet"], help_heading = OUTPUT)]
    pub tui: bool,

    /// No dashboard: the progress line and the console report, as a pipe gets.
    #[arg(long, help_heading = OUTPUT)]
    pub no_tui: bool,

    /// A service-level objective checked per level, e.g. 'itl.p99<=50ms',
    /// 'ttft.p90<=2s', 'output_speed.p50>=20', 'errors.rate<=1%' (repeatable). A
    /// breach exits with 3.
    #[arg(long = "slo", value_name = "EXPR", value_parser = parse_slo, help_heading = GATES)]
    pub slos: Vec<cadence_core::Slo>,

    /// A level where more than this share of the sent requests failed fails the run
    /// (exit 3) and never passes a --find-max probe: `5%` or `0.05`; `100%` turns the
    /// ceiling off. Finer gates: --slo 'errors.rate<=1%', 'errors.http_5xx.rate<=0.5%'.
    #[arg(long, default_value = "5%", value_parser = parse_share, help_heading = GATES)]
    pub max_error_rate: f64,

    /// Open loop: the share of sends more than 1 ms behind schedule (or dropped) above
    /// which the run is invalid (exit 4): `0.1%` or `0.001`.
    #[arg(long, default_value = "0.1%", value_parser = parse_share, help_heading = GATES)]
    pub max_late: f64,

    /// Which clock stamps each chunk: `kernel`, the kernel's receive time of the socket
    /// read that carried it (SO_TIMESTAMPNS; right even when this machine is busy; the
    /// user clock where the platform gives none), or `user`, the client's clock when the
    /// read reaches it.
    #[arg(long, value_enum, default_value_t = TimestampsArg::Kernel, help_heading = MEASUREMENT)]
    pub timestamps: TimestampsArg,

    /// Off by default. With kernel stamps, a runtime worker that woke less than this long
    /// ago waits out the rest before sleeping again, so one wake-up serves many streams
    /// (at most a quarter of the 10th-percentile gap between a stream's chunks, and none
    /// once one chunk in ten shares a read). No chunk's time moves (the kernel stamped
    /// it), but work handed to a waiting worker waits too: closed loop without
    /// --think-time only, where it saves CPU per chunk when the client is CPU-bound.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration, help_heading = MEASUREMENT)]
    pub coalesce_wakes: Duration,

    /// An ITL gap longer than this counts as a stall.
    #[arg(long, default_value = "500ms", value_parser = parse_positive_duration, help_heading = MEASUREMENT)]
    pub stall_threshold: Duration,

    /// Fail a request on its first malformed event instead of counting and continuing.
    #[arg(long, help_heading = MEASUREMENT)]
    pub strict: bool,

    /// Scrape the server's Prometheus metrics during each level and line them up with
    /// the client's gaps: a URL, or `auto` (the target's /metrics). A failed scrape is
    /// reported, never fatal.
    #[arg(long, value_name = "URL|auto", help_heading = MEASUREMENT)]
    pub server_metrics: Option<String>,

    /// How often --server-metrics scrapes.
    #[arg(long, default_value = "1s", value_parser = parse_time_bucket, help_heading = MEASUREMENT)]
    pub scrape_interval: Duration,

    /// Longest one scrape may take.
    #[arg(long, default_value = "2s", value_parser = parse_positive_duration, help_heading = MEASUREMENT)]
    pub scrape_timeout: Duration,

    /// TCP/TLS connect timeout.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration, help_heading = TIMEOUTS)]
    pub connect_timeout: Duration,

    /// From send to the response headers.
    #[arg(long, default_value = "60s", value_parser = parse_positive_duration, help_heading = TIMEOUTS)]
    pub header_timeout: Duration,

    /// From send to the first output token.
    #[arg(long, default_value = "120s", value_parser = parse_positive_duration, help_heading = TIMEOUTS)]
    pub ttft_timeout: Duration,

    /// Longest silence allowed once output has started.
    #[arg(long, default_value = "60s", value_parser = parse_positive_duration, help_heading = TIMEOUTS)]
    pub idle_timeout: Duration,

    /// Longest a single request may take.
    #[arg(long = "timeout", default_value = "600s", value_parser = parse_positive_duration, help_heading = TIMEOUTS)]
    pub total_timeout: Duration,

    /// Most body bytes one response may send (a size: 256MiB, 10MB, 4096); past it the
    /// request ends `response_too_large`, so a stream that never ends cannot grow the
    /// client's memory.
    #[arg(long, value_name = "SIZE", default_value = "256MiB", value_parser = parse_size, help_heading = TIMEOUTS)]
    pub max_response_bytes: u64,

    /// Most content-bearing chunks one response may deliver; past it the request ends
    /// `response_too_large`, its record keeping the chunks up to the ceiling.
    #[arg(long, value_name = "N", default_value_t = cadence_bench::exec::DEFAULT_MAX_CHUNKS, value_parser = parse_max_chunks, help_heading = TIMEOUTS)]
    pub max_chunks: usize,

    /// After the run stops issuing (duration or Ctrl-C), how long in-flight requests may finish.
    #[arg(long, default_value = "5s", value_parser = parse_duration, help_heading = TIMEOUTS)]
    pub grace: Duration,

    /// Run as one shard of a fleet of load generators: `--shard I/N` runs shard I (from
    /// 0) of N with 1/N of the load (concurrency, --max-concurrency, -n and --warmup split
    /// so the totals are exact, the rate divided; ids and seeds of its own). `--shard I`
    /// takes N from --shards. `cadence report` merges the shards' records.
    #[arg(long, value_name = "I/N", help_heading = FLEET)]
    pub shard: Option<String>,

    /// Shards in the fleet; this shard's index comes from --shard, else from
    /// JOB_COMPLETION_INDEX (what a Kubernetes Indexed Job sets in each pod).
    #[arg(long, env = "CADENCE_SHARDS", value_name = "N", value_parser = clap::value_parser!(u32).range(1..=MAX_SHARDS as i64), help_heading = FLEET)]
    pub shards: Option<u32>,

    /// Start the first level at this wall-clock time (RFC 3339: 2026-11-23T14:00:00Z),
    /// so every shard of a fleet starts together. With --duration, level k starts at
    /// START + k × (duration + grace + 1s) and sends until its start + duration, on
    /// every shard; a shard that is late starts at once and says by how much.
    #[arg(long, env = "CADENCE_START_AT", value_name = "RFC3339", value_parser = parse_start_at, conflicts_with = "start_in", help_heading = FLEET)]
    pub start_at: Option<std::time::SystemTime>,

    /// Start the first level this long from now (as --start-at, on this machine's clock).
    #[arg(long, value_name = "DURATION", value_parser = parse_duration, help_heading = FLEET)]
    pub start_in: Option<Duration>,

    /// The built-in simulator's engine (no URL only): `--preset`, `--engine` and the
    /// engine flags of `cadence plan`. Default: the tiny@cpu preset.
    #[command(flatten, next_help_heading = SIMULATOR)]
    pub engine: EngineOpts,
}

impl BenchArgs {
    /// Fixes the run's seed: `--seed` when given, else a fresh draw (returned, so the
    /// run can say it, and kept in `seed_given`). Before anything draws, and before a
    /// shard derives its own.
    pub fn resolve_seed(&mut self) -> Option<u64> {
        match self.seed_given {
            Some(s) => {
                self.seed = s;
                None
            }
            None => {
                // The clock and the process id, mixed: a new seed each run, short enough
                // (32 bits) to read back and retype.
                let nanos = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64);
                let mut mix = cadence_core::rng::SplitMix64::new(
                    nanos ^ (u64::from(std::process::id()) << 32),
                );
                self.seed = mix.next_u64() >> 32;
                // Kept as if given: a shard derives its own seed from `seed`, the run
                // records this one (what `--seed` must be given to repeat it).
                self.seed_given = Some(self.seed);
                Some(self.seed)
            }
        }
    }
}

#[derive(Debug, Args)]
pub struct SimArgs {
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub addr: std::net::SocketAddr,

    /// Serve an endpoint's twin (a file of `cadence twin fit`) in real time: its
    /// slots, prefill and gaps time every stream, as the engine model's would.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["preset", "engine"])]
    pub twin: Option<PathBuf>,

    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Time to first token: 20ms, fixed:20ms, uniform:10ms..30ms, normal:20ms,5ms.
    #[arg(long)]
    pub ttft: Option<String>,

    /// Inter-token latency, same forms as --ttft.
    #[arg(long)]
    pub itl: Option<String>,

    /// Tokens per chunk, at most 16,777,216 (2^24, a length's ceiling).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_TOKENS))]
    pub burst: Option<u32>,

    /// Chance per chunk of an extra stall.
    #[arg(long)]
    pub stall_probability: Option<f64>,

    /// Stall duration, same forms as --ttft.
    #[arg(long)]
    pub stall: Option<String>,

    /// Tokens per response when a request gives no max_tokens, at most 16,777,216
    /// (2^24, a length's ceiling).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=MAX_TOKENS))]
    pub max_tokens: Option<u32>,

    /// Model name listed at /v1/models.
    #[arg(long)]
    pub model: Option<String>,

    /// Freeze the whole server this long after it starts (FAULTS 34), for --freeze-for.
    #[arg(long, value_parser = parse_duration, requires = "freeze_for")]
    pub freeze_at: Option<Duration>,

    /// How long the freeze lasts.
    #[arg(long, value_parser = parse_duration, requires = "freeze_at")]
    pub freeze_for: Option<Duration>,

    /// Write one JSON line per streamed request with the time each chunk was written
    /// (ns since the simulator started): the truth a fidelity check compares against.
    #[arg(long, value_name = "FILE")]
    pub send_log: Option<PathBuf>,

    /// When a request declares tools and leaves the choice to the model
    /// (tool_choice auto), the chance its reply is tool calls (drawn per request
    /// from --seed). tool_choice required/any/a named tool always calls, none never.
    #[arg(long, value_name = "P", default_value_t = cadence_sim::tools::DEFAULT_TOOL_CALL_PROBABILITY)]
    pub tool_call_prob: f64,

    /// Tool calls per tool-calling reply (parallel calls, index 0, 1, ...), unless
    /// the request turns parallel calls off. At most 100,000.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub parallel_tool_calls: u32,

    /// Time tokens with an engine model instead of the flat --ttft/--itl cadence.
    #[command(flatten)]
    pub engine: EngineOpts,

    // Tracing: each request on the flat schedule exported as the server's span
    // (vLLM's llm_request), a child of its traceparent (docs/src/tracing.md).
    #[command(flatten, next_help_heading = TRACING)]
    pub otlp: OtlpArgs,
}

#[derive(Debug, Args)]
pub struct FidelityArgs {
    /// Concurrency levels to check.
    #[arg(long, value_delimiter = ',', default_value = "1,100,1000")]
    pub concurrency: Vec<u32>,

    /// Requests per stream slot at each level.
    #[arg(long, default_value_t = 3)]
    pub rounds: u64,

    /// Tokens per request.
    #[arg(long, default_value_t = 64)]
    pub tokens: u32,

    /// The simulator's fixed inter-token latency.
    #[arg(long, default_value = "10ms", value_parser = parse_duration)]
    pub itl: Duration,

    /// Scrape the simulator's /metrics at this interval during each level, as
    /// `bench --server-metrics` does, to check that scraping costs no fidelity.
    #[arg(long, value_parser = parse_time_bucket)]
    pub scrape_interval: Option<Duration>,

    /// Run the bench dashboard during the measurement, drawing into memory instead of
    /// a terminal (its live state, loop-lag probe and frames at its frame rate): what
    /// the dashboard costs the figures.
    #[arg(long)]
    pub dashboard: bool,

    /// The client's wake-up coalescing, as `bench --coalesce-wakes` (0: off).
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub coalesce_wakes: Duration,

    /// Write the results as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

/// Which engine to model, and changes to it (shared by `plan` and `sim`).
#[derive(Debug, Clone, Default, Args)]
pub struct EngineOpts {
    /// A built-in engine, `model@hardware` (see `cadence plan --list-presets`).
    #[arg(long, value_name = "NAME")]
    pub preset: Option<String>,

    /// A custom engine from a TOML file: the preset fields, as in the example of
    /// docs/src/engine-model.md.
    #[arg(long, value_name = "FILE.toml", conflicts_with = "preset")]
    pub engine: Option<PathBuf>,

    /// Disaggregate: prompts run on this many prefill workers, off the decode loop
    /// (at most 1,024).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1024))]
    pub prefill_workers: Option<u32>,

    /// Disaggregated: fixed KV-transfer delay per request (plus KV bytes / 50 GB/s).
    #[arg(long, value_parser = parse_duration, requires = "prefill_workers")]
    pub kv_transfer: Option<Duration>,

    /// Co-located chunked prefill: tokens per step (vLLM max_num_batched_tokens), at
    /// most 16,777,216 (2^24).
    #[arg(long, value_name = "N", conflicts_with = "prefill_workers", value_parser = clap::value_parser!(u32).range(1..=MAX_TOKENS))]
    pub chunk_tokens: Option<u32>,

    /// Speculative decoding: draft length and acceptance rate, e.g. `4:0.8` (the
    /// draft model costs 0.154 of the target per pass, a 1B draft for an 8B target).
    #[arg(long, value_name = "K:ALPHA", value_parser = parse_speculation)]
    pub speculate: Option<Speculation>,

    /// Speculative decoding as a mean acceptance length: tokens per decode step (1 to
    /// 16, the bonus token included), drafting ceil(L) − 1. The flat sim sends that many
    /// a chunk on the usual gap (vLLM's per-request speculative_decoding counts ride the
    /// usage chunk; it overrides --burst); an engine speculates with the acceptance rate
    /// that gives it (as --speculate K:ALPHA).
    #[arg(long, value_name = "TOKENS", value_parser = parse_spec_accept_len, conflicts_with = "speculate")]
    pub spec_accept_len: Option<f64>,

    /// Prefill/decode disaggregation: a KV transfer between each request's prefill and
    /// its first token, DURATION[+PER_TOKEN] (40ms, or 40ms+10us: plus 10 µs a prompt
    /// token; each part at most 60s). The flat sim's /metrics counts it in vLLM's NIXL
    /// and SGLang's kv_transfer names; an engine disaggregates onto its prefill workers
    /// (--prefill-workers, else 1) with this transfer.
    #[arg(long, value_name = "DURATION[+PER_TOKEN]", value_parser = parse_pd_transfer, conflicts_with = "kv_transfer")]
    pub pd_transfer: Option<cadence_engine::PdTransfer>,

    /// Batch slots (vLLM max_num_seqs), at most 65,536.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub max_batch: Option<u32>,

    /// KV-cache capacity in tokens (default: from GPU memory after the weights).
    #[arg(long, value_name = "TOKENS")]
    pub kv_tokens: Option<u64>,

    /// When the KV cache is full: pre-empt and recompute, or reserve prompt +
    /// max_tokens at admission and queue.
    #[arg(long, value_enum)]
    pub kv_policy: Option<KvPolicyArg>,

    /// Per-step time noise, a share (0 = exact roofline steps).
    #[arg(long, value_name = "SHARE")]
    pub jitter: Option<f64>,

    /// Simulator only: drive the engine into a known cause of slow streams at TIME
    /// after its first request, with requests no client sees: `batch` (3/4 of the
    /// slots fill), `long-prompt` (two prompts of 8 prefill chunks), `kv` (two
    /// requests take half the KV cache and grow), `queue` (a full batch arrives
    /// ahead of the clients). Repeatable, e.g. `--inject kv@2s`.
    #[arg(long, value_name = "CAUSE@TIME")]
    pub inject: Vec<cadence_engine::Injection>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KvPolicyArg {
    Preempt,
    Reserve,
}

fn parse_spec_accept_len(s: &str) -> Result<f64, String> {
    let l: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("'{s}' is not a number"))?;
    if !(1.0..=cadence_sim::config::MAX_SPEC_ACCEPT_LEN).contains(&l) {
        return Err(format!(
            "--spec-accept-len must be from 1 to 16 tokens a step (got {l})"
        ));
    }
    Ok(l)
}

fn parse_pd_transfer(s: &str) -> Result<cadence_engine::PdTransfer, String> {
    s.parse()
        .map_err(|e: cadence_engine::pd::PdTransferError| e.to_string())
}

fn parse_speculation(s: &str) -> Result<Speculation, String> {
    let (k, a) = s
        .split_once(':')
        .ok_or_else(|| format!("'{s}' is not K:ALPHA (e.g. 4:0.8)"))?;
    let k: u32 = k
        .trim()
        .parse()
        .map_err(|_| format!("draft length '{k}' is not a whole number"))?;
    let alpha: f64 = a
        .trim()
        .parse()
        .map_err(|_| format!("acceptance rate '{a}' is not a number"))?;
    if k == 0 || !(0.0..=1.0).contains(&alpha) {
        return Err("speculation needs K ≥ 1 and 0 ≤ ALPHA ≤ 1".into());
    }
    Ok(Speculation {
        k,
        alpha,
        draft_us: 0.0,
        draft_fraction: cadence_engine::spec::DEFAULT_DRAFT_FRACTION,
    })
}

#[derive(Debug, Args)]
pub struct PlanArgs {
    /// Ask an endpoint's twin (a file of `cadence twin fit`) instead of the engine
    /// model: every load shape, in virtual time; a level whose requests went past what
    /// the twin was fitted on is marked as extrapolation.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["calibrate", "preset", "engine"])]
    pub twin: Option<PathBuf>,

    #[command(flatten)]
    pub engine: EngineOpts,

    /// Print the presets with their key parameters and exit.
    #[arg(long)]
    pub list_presets: bool,

    /// Fit the engine's free parameters (bandwidth and compute efficiency, step,
    /// per-sequence and request overheads, step jitter) to a measured sweep of at least 3 levels:
    /// a records file or directory, or the JSON report, of `cadence bench` against a
    /// real endpoint. Starts from --preset/--engine (the model's shape and the
    /// hardware); prints the fitted engine as TOML, each parameter, the fit's error per
    /// level, and predictions at -c/--rate (default: the run's own loads).
    #[arg(long, value_name = "RUN")]
    pub calibrate: Option<PathBuf>,

    /// With --calibrate: fit without this level (its name, e.g. concurrency=8, or its
    /// concurrency or rate) and report the error on it.
    #[arg(long, value_name = "LEVEL", requires = "calibrate")]
    pub holdout: Option<String>,

    /// With --calibrate: write the fitted engine (TOML) to this file as well.
    #[arg(long, value_name = "FILE", requires = "calibrate")]
    pub save_engine: Option<PathBuf>,

    /// Closed-loop levels: `1,8,64` or `1..256:x2`. Default 8.
    #[arg(short = 'c', long, value_parser = parse_counts, conflicts_with = "rate")]
    pub concurrency: Option<Counts>,

    /// Open-loop levels in requests/s: `1,5,10`.
    #[arg(short = 'r', long, value_parser = parse_rates)]
    pub rate: Option<Rates>,

    /// Open-loop inter-arrival times: evenly spaced, or Poisson (seeded by --seed).
    #[arg(long, value_enum, default_value = "poisson", requires = "rate")]
    pub arrivals: ArrivalsArg,

    /// Replay a trace in virtual time, as `cadence bench --trace` sends it: one level,
    /// each entry sent at its time with its prompt and output lengths (a prompt
    /// counted by --tokenizer or as words; missing lengths from --input-tokens and
    /// --max-tokens). Every entry is sent: -n and --warmup do not apply.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["rate", "concurrency", "dataset", "turns", "agent", "calibrate"])]
    pub trace: Option<PathBuf>,

    /// Replay the trace this many times faster (2 = arrivals twice as dense).
    #[arg(long, default_value_t = 1.0, requires = "trace")]
    pub trace_speed: f64,

    /// Measured requests per level, at most 1,000,000.
    #[arg(short = 'n', long, default_value_t = 1000, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub requests: u64,

    /// Requests per level sent first and left out of every statistic, at most
    /// 1,000,000.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=1_000_000))]
    pub warmup: u64,

    /// Prompt tokens per request: N, fixed:N, normal:MEAN,SD or uniform:LO..HI (as
    /// `cadence bench --input-tokens`; drawn by --seed, the same draws every level).
    #[arg(long, value_name = "DIST", default_value = "512", value_parser = parse_length)]
    pub input_tokens: LengthDist,

    /// Output tokens per request, same forms (default 128; with --dataset, overrides
    /// the recorded reply lengths).
    #[arg(long, value_name = "DIST", value_parser = parse_length)]
    pub max_tokens: Option<LengthDist>,

    /// Prompt and output lengths from a dataset, as `cadence bench --dataset` reads it
    /// (ShareGPT: the recorded reply's length; JSON Lines: `max_tokens`, else
    /// --max-tokens), shuffled by --seed. Each entry's first turn only (history and
    /// system prompt counted in); the engine needs only token counts.
    #[arg(long, value_name = "FILE", conflicts_with = "input_tokens")]
    pub dataset: Option<PathBuf>,

    #[arg(long, value_enum, default_value = "auto", requires = "dataset")]
    pub dataset_format: DatasetFormat,

    /// Keep dataset entries whose first prompt has at least this many tokens.
    #[arg(long, value_name = "N", requires = "dataset")]
    pub min_prompt_tokens: Option<usize>,

    /// Keep dataset entries whose first prompt has at most this many tokens.
    #[arg(long, value_name = "N", requires = "dataset")]
    pub max_prompt_tokens: Option<usize>,

    /// Count dataset prompts with this tokenizer (a tokenizer.json or a folder holding
    /// one); without it, whitespace-separated words.
    #[arg(long, value_name = "PATH", requires = "dataset")]
    pub tokenizer: Option<String>,

    /// Closed loop: mean time from a response's end to the client's next request
    /// reaching the engine (uniform in ½–1½ × this, seeded). Real clients never
    /// come back in the same nanosecond.
    #[arg(long, default_value = "500us", value_parser = parse_duration)]
    pub client_turnaround: Duration,

    /// Every prompt starts with one of --prefix-groups shared prefixes of this many
    /// tokens, as `cadence bench --prefix-tokens` sends them; the engine's prefix cache
    /// (`serving.prefix_cache`) computes each group's prefix once.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub prefix_tokens: Option<u32>,

    /// How many distinct shared prefixes; request k uses prefix k mod G.
    #[arg(long, value_name = "G", default_value_t = 1, requires = "prefix_tokens", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub prefix_groups: u32,

    /// Multi-turn sessions of this many turns, as `cadence bench --turns` sends them:
    /// each turn's prompt is the session's history (earlier prompts and replies) plus
    /// its own --input-tokens, the history kept by the engine's prefix cache. -n and
    /// --warmup then count sessions.
    #[arg(long, value_name = "N", conflicts_with = "prefix_tokens", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub turns: Option<u32>,

    /// With --turns: from a reply's end to the session's next turn (the client
    /// turnaround comes on top).
    #[arg(long, value_name = "DURATION", default_value = "0s", requires = "turns", value_parser = parse_duration)]
    pub think_time: Duration,

    /// Agent sessions, as `cadence bench --agent` sends them: --turns steps (default
    /// 8), each after the first sending the tool results after --tool-time; the report
    /// splits each session's wall time into TTFT, decode, tool time and the rest.
    #[arg(long, conflicts_with_all = ["prefix_tokens", "think_time"])]
    pub agent: bool,

    /// With --agent: the tool time before each step after the first.
    #[arg(long, value_name = "DURATION", default_value = "100ms", requires = "agent", value_parser = parse_duration)]
    pub tool_time: Duration,

    /// With --agent: tokens of each tool result, at most 16,777,216 (2^24).
    #[arg(long, value_name = "N", default_value_t = 100, requires = "agent", value_parser = clap::value_parser!(u32).range(0..=MAX_TOKENS))]
    pub tool_result_tokens: u32,

    /// With --agent: tool calls per step (their results all go into the next step).
    #[arg(long, value_name = "N", default_value_t = 1, requires = "agent", value_parser = clap::value_parser!(u32).range(1..=64))]
    pub tool_calls: u32,

    /// Seeds the engine's jitter and acceptance draws and Poisson arrivals.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// An ITL gap longer than this counts as a stall.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub stall_threshold: Duration,

    /// A service-level objective checked per level (as in `cadence bench`).
    #[arg(long = "slo", value_name = "EXPR", value_parser = parse_slo)]
    pub slos: Vec<cadence_core::Slo>,

    /// Write the JSON report here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// HTML, CSV, Markdown and `--convention`, as for `cadence bench`.
    #[command(flatten)]
    pub outputs: OutputArgs,
}

fn parse_convention(s: &str) -> Result<cadence_core::Convention, String> {
    s.parse()
}

/// Output flags shared by `bench`, `plan` and `report`.
#[derive(Debug, Clone, Default, Args)]
pub struct OutputArgs {
    /// Write a self-contained HTML report with SVG charts here (no network needed to view).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,

    /// Write CSV: one row per level and one per request. A directory (existing, or a
    /// path ending in /) gets levels.csv and requests.csv; FILE.csv gets the levels and
    /// FILE.requests.csv the requests.
    #[arg(long, value_name = "DIR-or-FILE")]
    pub csv: Option<PathBuf>,

    /// Write a Markdown summary (for a PR comment) here; '-' prints it to stdout.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,

    /// Lead the summary tables with ITL and TPOT as this tool defines them: cadence,
    /// vllm (= sglang), aiperf (= genai-perf), guidellm, llmperf. The compatibility
    /// table always shows all of them.
    #[arg(long, value_name = "NAME", value_parser = parse_convention)]
    pub convention: Option<cadence_core::Convention>,

    /// The console in full: every level's percentiles, facts, warnings, server figures
    /// and other tools' conventions. Without it a sweep prints one summary table, each
    /// warning once with the levels it concerns (a single level prints in full anyway).
    #[arg(long)]
    pub detail: bool,

    /// Values each level keeps exactly (over all its distributions) before they
    /// continue in log-bucketed histograms whose percentiles are within 0.4 %; the
    /// report marks each bucketed distribution. Default 4000000.
    #[arg(long, value_name = "N")]
    pub exact_samples: Option<u64>,

    /// Re-price the run's sessions (agent loops, multi-turn chats) at another TTFT
    /// and/or ITL, from the measured per-step sums: `itl=15ms`, `ttft=200ms,itl=x0.5`
    /// (x: a factor of the measured). Repeat for several; each gets a report line.
    #[arg(long, value_name = "SPEC", value_parser = parse_what_if)]
    pub what_if: Vec<cadence_core::sessions::WhatIf>,

    /// A closed-loop level's steady state: the span in which requests in flight stay at
    /// or above this share of the concurrency asked, whose requests' figures the report
    /// gives beside the level's (ramp-up and drain left out): `90%` or `0.9`; `0` turns
    /// it off. Default 90 %; `report` recomputes it from the records, default the run's.
    #[arg(long, value_name = "SHARE", value_parser = parse_share)]
    pub plateau: Option<f64>,
}

pub fn parse_what_if(s: &str) -> Result<cadence_core::sessions::WhatIf, String> {
    s.parse()
}

impl OutputArgs {
    /// `--exact-samples`, or the default budget.
    pub fn exact_samples(&self) -> u64 {
        self.exact_samples
            .unwrap_or(cadence_core::DEFAULT_EXACT_SAMPLES)
    }

    /// `--plateau`, or the default share.
    pub fn plateau(&self) -> f64 {
        self.plateau.unwrap_or(cadence_core::plateau::DEFAULT_SHARE)
    }
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A saved JSON report (`bench --json`) or records files (`bench --records`);
    /// several records files (e.g. from several client machines) are merged by level.
    /// A directory stands for its records files (or its subdirectories'): a fleet's
    /// shards (`bench --shard`) merge into one run on one timeline.
    #[arg(required = true, value_name = "FILE")]
    pub files: Vec<PathBuf>,

    /// Write the JSON report here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    #[command(flatten)]
    pub outputs: OutputArgs,

    /// Judge the run against these SLOs instead of the ones it was run with
    /// (repeatable). From a JSON report, goodput cannot be recomputed.
    #[arg(long = "slo", value_name = "EXPR", value_parser = parse_slo)]
    pub slos: Vec<cadence_core::Slo>,

    /// Judge the error-rate ceiling at this share instead of the run's own
    /// `--max-error-rate` (default 5 %): `5%` or `0.05`.
    #[arg(long, value_parser = parse_share)]
    pub max_error_rate: Option<f64>,

    /// A fleet's shard to leave out of the merge (repeatable), e.g. one whose client
    /// was overloaded (the shard table says which): the figures then cover the rest.
    #[arg(long = "exclude-shard", value_name = "I")]
    pub exclude_shards: Vec<u32>,

    /// Read FILE as this tool's saved output instead of detecting it from its content:
    /// vllm (`vllm bench serve --save-result --save-detailed`), aiperf
    /// (`profile_export.jsonl`), guidellm (its benchmarks JSON), llmperf
    /// (`*_individual_responses.json`), inference-perf
    /// (`per_request_lifecycle_metrics.json`) or genai-bench (a run's metrics JSON).
    /// See docs/src/import.md.
    #[arg(long, value_name = "TOOL")]
    pub from: Option<cadence_import::Tool>,

    /// Also write the run in the llm-d benchmark report format (v0.2.1) here.
    #[arg(long = "llmd-benchmark", value_name = "FILE")]
    pub llmd_benchmark: Option<PathBuf>,

    /// The most an input that is a stream (a pipe, `/dev/stdin`, a FIFO, a device) is
    /// copied to a temporary file in `$TMPDIR` before it is read; more is refused.
    #[arg(long, value_name = "SIZE", default_value = "4GiB", value_parser = parse_size)]
    pub max_spool: u64,
}

fn parse_fail_on(s: &str) -> Result<cadence_core::compare::FailOn, String> {
    s.parse()
}

#[derive(Debug, Args)]
pub struct CompareArgs {
    /// The baseline: a JSON report or a records file.
    #[arg(value_name = "A")]
    pub a: PathBuf,

    /// The candidate, compared with A.
    #[arg(value_name = "B")]
    pub b: PathBuf,

    /// Exit 5 when B moved past this change from A, beyond noise: 'itl.p99:+10%'
    /// (more than 10 % higher) or 'output_speed.p50:-5%' (more than 5 % lower).
    /// Repeatable. Metrics: ttft, itl, tpot, e2e, output_speed; stats: mean, p50,
    /// p90, p99.
    #[arg(long = "fail-on", value_name = "RULE", value_parser = parse_fail_on)]
    pub fail_on: Vec<cadence_core::compare::FailOn>,

    /// Judge `--fail-on` even when A and B differ in workload (lengths, sampling,
    /// cache, load): without it such a comparison is shown and then refused (exit 2).
    #[arg(long)]
    pub allow_different_workloads: bool,

    /// Write the comparison as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Write the comparison as Markdown here ('-' for stdout).
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,

    /// Read A and B (those that are not Cadence's own files) as this tool's saved
    /// output instead of detecting it: vllm, aiperf, guidellm, llmperf, inference-perf or
    /// genai-bench.
    #[arg(long, value_name = "TOOL")]
    pub from: Option<cadence_import::Tool>,

    /// Seed of the bootstrap (the verdicts are deterministic for a seed).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Smallest change called better or worse, even when beyond noise: run-to-run
    /// differences of one machine that resampling one run cannot see ('5%' or 0.05).
    #[arg(long, default_value = "5%", value_parser = parse_share)]
    pub min_change: f64,

    /// Explain the method (the bootstrap behind each verdict) in full under the tables.
    #[arg(long)]
    pub detail: bool,

    /// The most an input that is a stream (a pipe, `/dev/stdin`, a FIFO, a device) is
    /// copied to a temporary file in `$TMPDIR` before it is read; more is refused.
    #[arg(long, value_name = "SIZE", default_value = "4GiB", value_parser = parse_size)]
    pub max_spool: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DatasetFormat {
    /// ShareGPT when the file holds `conversations`, else JSON Lines.
    Auto,
    Sharegpt,
    Jsonl,
}

#[derive(Debug, Clone, Args)]
pub struct WorkloadArgs {
    /// Tokenizer for exact prompt lengths and output-token counts: a tokenizer.json or
    /// a model folder holding one (no downloads). Tokenizing runs after each stream.
    #[arg(long, value_name = "PATH")]
    pub tokenizer: Option<String>,

    /// Synthetic prompts of exactly this many tokens: N, fixed:N, normal:MEAN,SD or
    /// uniform:LO..HI (counted by --tokenizer, else as whitespace-separated words, the
    /// built-in simulator's tokens), at most 16777216; chat template and BOS come on top.
    #[arg(long, value_name = "DIST", value_parser = parse_length, conflicts_with_all = ["prompt", "trace", "dataset"])]
    pub input_tokens: Option<LengthDist>,

    /// Text the synthetic prompts are cut from (default: a public-domain text shipped
    /// with Cadence).
    #[arg(long, value_name = "FILE")]
    pub corpus: Option<PathBuf>,

    /// Prompts from a dataset: ShareGPT JSON, or JSON Lines with `prompt`, chat
    /// `messages` or session `turns`, optional `max_tokens`. Shuffled by --seed.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["prompt", "trace"])]
    pub dataset: Option<PathBuf>,

    /// The most of a --dataset, --trace, --agent-trace or --corpus file that is read
    /// (each is read whole); a larger file, or an endless stream such as /dev/zero, is
    /// refused naming it.
    #[arg(long, value_name = "SIZE", default_value = "1GiB", value_parser = parse_size)]
    pub max_input: u64,

    #[arg(long, value_enum, default_value = "auto", requires = "dataset")]
    pub dataset_format: DatasetFormat,

    /// Keep dataset entries whose first prompt has at least this many tokens.
    #[arg(long, value_name = "N", requires = "dataset")]
    pub min_prompt_tokens: Option<usize>,

    /// Keep dataset entries whose first prompt has at most this many tokens.
    #[arg(long, value_name = "N", requires = "dataset")]
    pub max_prompt_tokens: Option<usize>,

    /// Dataset conversations become multi-turn sessions: every user message is a
    /// turn, sent with the history so far (including the server's live replies).
    #[arg(long, requires = "dataset")]
    pub multi_turn: bool,

    /// Synthetic sessions of this many turns (each turn --input-tokens long); with
    /// --agent, the most steps a session takes.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub turns: Option<u32>,

    /// Pause between a reply and the session's next turn.
    #[arg(long, value_name = "DURATION", default_value = "0s", value_parser = parse_duration)]
    pub think_time: Duration,

    /// Every prompt starts with one of --prefix-groups shared prefixes of exactly this
    /// many tokens (prefix-cache studies); the prompt's own length comes on top.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub prefix_tokens: Option<u32>,

    /// How many distinct shared prefixes; request k uses prefix k mod G.
    #[arg(long, value_name = "G", default_value_t = 1, requires = "prefix_tokens", value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub prefix_groups: u32,

    #[command(flatten, next_help_heading = AGENT)]
    pub agent: AgentArgs,
}

/// Flags of agent sessions (`bench --agent`).
#[derive(Debug, Clone, Default, Args)]
pub struct AgentArgs {
    /// Agent sessions: every step declares tools; a reply with tool calls gets one
    /// result per call after --tool-time, and the next step is sent with the whole
    /// history; a reply without one ends the session (--turns caps the steps,
    /// default 8). Chat, Responses and Anthropic Messages APIs.
    #[arg(long)]
    pub agent: bool,

    /// The tools each step declares, a JSON array in the OpenAI format (default: a
    /// built-in coding agent's read_file, search_code, run_tests, apply_patch); with
    /// --agent or --agent-trace.
    #[arg(long, value_name = "FILE")]
    pub tools: Option<PathBuf>,

    /// How long the client runs the tools of one reply, from its last byte to the
    /// next step's send: 200ms, uniform:50ms..2s, normal:1s,200ms or exp:500ms
    /// (default 100ms).
    #[arg(long, value_name = "DIST", requires = "agent", value_parser = parse_duration_dist)]
    pub tool_time: Option<DurationDist>,

    /// Tokens of each tool result, exact as for prompts: N, normal:MEAN,SD or
    /// uniform:LO..HI, at most 16777216 (default 100).
    #[arg(long, value_name = "DIST", requires = "agent", value_parser = parse_length)]
    pub tool_result_tokens: Option<LengthDist>,

    /// For models that never call tools: `required` sends tool_choice required (any
    /// on Anthropic); `mock` injects a call into a reply that made none, and the
    /// report says so. Either keeps every step a tool step up to --turns.
    #[arg(
        long,
        value_enum,
        value_name = "MODE",
        default_value = "off",
        requires = "agent"
    )]
    pub agent_force: AgentForce,
}

/// `--agent-trace-format`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum AgentTraceFormat {
    /// Told by the content.
    #[default]
    Auto,
    /// Cadence's session JSON Lines.
    Cadence,
    /// Mooncake-style JSON Lines with hash_ids.
    Mooncake,
    /// OTLP JSON span exports.
    Otel,
}

impl AgentTraceFormat {
    pub fn format(self) -> Option<cadence_bench::agent_trace::Format> {
        use cadence_bench::agent_trace::Format;
        match self {
            AgentTraceFormat::Auto => None,
            AgentTraceFormat::Cadence => Some(Format::Cadence),
            AgentTraceFormat::Mooncake => Some(Format::Mooncake),
            AgentTraceFormat::Otel => Some(Format::Otel),
        }
    }
}

/// `--agent-force`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum AgentForce {
    #[default]
    Off,
    Required,
    Mock,
}

impl From<AgentForce> for cadence_bench::agent::Force {
    fn from(f: AgentForce) -> Self {
        match f {
            AgentForce::Off => cadence_bench::agent::Force::Off,
            AgentForce::Required => cadence_bench::agent::Force::Required,
            AgentForce::Mock => cadence_bench::agent::Force::Mock,
        }
    }
}

pub fn parse_duration_dist(s: &str) -> Result<DurationDist, String> {
    s.parse()
}

pub fn parse_length(s: &str) -> Result<LengthDist, String> {
    s.parse()
}

/// Flags of `cadence proxy`.
#[derive(Debug, Clone, Args)]
pub struct ProxyArgs {
    /// Where clients connect (HTTP/1.1).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The server to forward to: http://host:port or https://host[/prefix]. Request
    /// paths are appended to the prefix.
    #[arg(long)]
    pub upstream: String,
    /// A PEM file of CA certificates to trust for an https:// upstream beside the public
    /// roots (an upstream behind a private CA). Checks stay on.
    #[arg(long, value_name = "FILE")]
    pub upstream_ca_file: Option<PathBuf>,
    /// Serve /metrics (Prometheus), /stats (rolling-window JSON) and /health here.
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// Append one JSON record per request to FILE (rotated by size; a name ending in
    /// .zst is zstd-compressed). Each run starts with its wall-clock anchor, so runs
    /// appended across restarts report on one timeline.
    #[arg(long, value_name = "FILE")]
    pub records: Option<PathBuf>,
    /// Rotate the records file when it would pass this many MiB.
    #[arg(long, default_value_t = 100, value_parser = clap::value_parser!(u64).range(1..))]
    pub records_max_mib: u64,
    /// Rotated records files kept (FILE.1 … FILE.N).
    #[arg(long, default_value_t = 5)]
    pub records_keep: u32,
    /// An alert rule, repeatable: 'METRIC.STAT OP BOUND [for DUR] [over WINDOW]', e.g.
    /// 'itl.p50>50ms for 1m' or 'ttft.p99>2s over 5m' (window default 1m, at most 5m).
    #[arg(long = "alert", value_name = "RULE")]
    pub alerts: Vec<String>,
    /// POST each alert's firing/resolved transition here as JSON.
    #[arg(long, value_name = "URL")]
    pub alert_webhook: Option<String>,
    /// A model name allowed as a metric label, repeatable; other names become `other`.
    #[arg(long = "model", value_name = "NAME")]
    pub models: Vec<String>,
    /// Longest silence from the upstream once its headers arrived (the stream is then
    /// ended with an error).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub idle_timeout: Duration,
    /// Longest wait for the upstream's response headers (then 504).
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub upstream_header_timeout: Duration,
    /// A client must send its whole request head within this (slowloris guard), on the
    /// proxied port and the metrics port alike.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// Largest request head in bytes (431 beyond).
    #[arg(long, default_value_t = 65536, value_parser = clap::value_parser!(u64).range(1024..=16_777_216))]
    pub max_header_bytes: u64,
    /// The whole request body must arrive within this of its head, plus a second per
    /// 8 KiB received (408 beyond): a client dripping its body cannot hold a connection
    /// open, a steady upload is never cut.
    #[arg(long, default_value = "20s", value_parser = parse_duration)]
    pub body_read_timeout: Duration,
    /// Most client connections at once, lowered at start to what `ulimit -n` allows
    /// (each may need an upstream connection too). When all are taken, the connection
    /// that has waited longest on an unfinished request, or idled between requests, is
    /// closed for the new one; if every one is forwarding, the new one gets 503.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub max_connections: u64,
    /// A route to measure, as a path suffix, repeatable; replaces the default list
    /// (/chat/completions, /completions, /responses, /messages, /api/chat,
    /// /api/generate, /generate, /generate_stream). Other requests are forwarded only.
    #[arg(long = "measure-route", value_name = "SUFFIX")]
    pub measure_routes: Vec<String>,
    /// On shutdown, how long in-flight streams may finish.
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub drain_timeout: Duration,
    /// Which clock stamps the upstream's chunks: `kernel`, the kernel's receive time of
    /// the proxy's upstream socket read that carried them (the user clock where the
    /// platform gives none), or `user`, the proxy's clock when the read reaches it.
    #[arg(long, value_enum, default_value_t = TimestampsArg::Kernel)]
    pub timestamps: TimestampsArg,
    /// Most content-bearing chunks one stream's record keeps; past it the stream is
    /// still relayed whole, and its record counts the later chunks instead of timing
    /// them, so a stream that never ends costs bounded memory.
    #[arg(long, value_name = "N", default_value_t = cadence_proxy::DEFAULT_MAX_CHUNKS, value_parser = parse_max_chunks)]
    pub max_chunks: usize,
    // Tracing: each measured request continues its caller's W3C traceparent (or starts
    // a trace, sampled by --otlp-sample), goes upstream with the proxy's span as the
    // server's parent, and is exported as a server span (docs/src/tracing.md).
    #[command(flatten, next_help_heading = TRACING)]
    pub otlp: OtlpArgs,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_threads_leave_a_core_to_an_in_process_simulator() {
        let cli = |args: &[&str]| Cli::try_parse_from(args).unwrap();
        // Bench with no URL starts the simulator in-process: one core is left to it.
        assert_eq!(cli(&["cadence", "bench"]).worker_threads(2), 1);
        assert_eq!(cli(&["cadence", "bench"]).worker_threads(1), 1);
        // Against a separate server (fidelity's simulator is a process of its own), or
        // serving, every core is used.
        assert_eq!(cli(&["cadence", "fidelity"]).worker_threads(8), 8);
        let url = ["cadence", "bench", "http://127.0.0.1:1"];
        assert_eq!(cli(&url).worker_threads(2), 2);
        assert_eq!(cli(&["cadence", "sim"]).worker_threads(4), 4);
        // --threads wins.
        assert_eq!(
            cli(&["cadence", "--threads", "3", "bench"]).worker_threads(2),
            3
        );
    }

    #[test]
    fn level_lists_and_ranges() {
        assert_eq!(parse_levels("8").unwrap(), vec![8.0]);
        assert_eq!(parse_levels("1, 2,5").unwrap(), vec![1.0, 2.0, 5.0]);
        assert_eq!(
            parse_levels("1..128:x2").unwrap(),
            vec![1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0]
        );
        assert_eq!(
            parse_levels("4..16:+4").unwrap(),
            vec![4.0, 8.0, 12.0, 16.0]
        );
        assert_eq!(
            parse_levels("1..10:x3").unwrap(),
            vec![1.0, 3.0, 9.0],
            "the end is included only when hit"
        );
        assert_eq!(parse_levels("0.5..2:x2").unwrap(), vec![0.5, 1.0, 2.0]);
        assert_eq!(
            parse_counts("1..4:+1,8").unwrap(),
            Counts(vec![1, 2, 3, 4, 8])
        );
    }

    #[test]
    fn bad_levels_say_why() {
        assert!(parse_levels("1..8:x1").unwrap_err().contains("grow"));
        assert!(parse_levels("8..1:x2").unwrap_err().contains("down"));
        assert!(parse_levels("0").unwrap_err().contains("positive"));
        assert!(parse_levels("1..8").is_err());
        assert!(parse_levels("1,,2").unwrap_err().contains("empty"));
        assert!(parse_levels("1..1e9:+1").unwrap_err().contains("more than"));
        assert!(parse_counts("1.5").unwrap_err().contains("whole"));
    }

    #[test]
    fn clap_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn bench_flags_parse_into_levels() {
        use clap::Parser;
        let cli = Cli::try_parse_from(["cadence", "bench", "-c", "1..8:x2"]).unwrap();
        let Command::Bench(b) = cli.command else {
            panic!("bench")
        };
        assert_eq!(b.concurrency, Some(Counts(vec![1, 2, 4, 8])));
        let cli = Cli::try_parse_from([
            "cadence",
            "bench",
            "--rate",
            "5,10",
            "--arrivals",
            "poisson",
        ])
        .unwrap();
        let Command::Bench(b) = cli.command else {
            panic!("bench")
        };
        assert_eq!(b.rate, Some(Rates(vec![5.0, 10.0])));
        assert!(
            Cli::try_parse_from(["cadence", "bench", "-c", "4", "--rate", "5"]).is_err(),
            "closed and open loop conflict"
        );
        assert!(
            Cli::try_parse_from(["cadence", "bench", "--trace", "t", "--rate", "5"]).is_err(),
            "a trace has its own arrivals"
        );
    }

    #[test]
    fn hostile_numbers_are_refused() {
        assert!(parse_time_bucket("0s").is_err());
        assert!(parse_time_bucket("999us").is_err());
        assert_eq!(parse_time_bucket("1ms"), Ok(Duration::from_millis(1)));
        assert!(parse_positive_duration("0s")
            .unwrap_err()
            .contains("longer than 0"));
        assert!(parse_duration("1000000000s").unwrap_err().contains("year"));
        assert_eq!(parse_duration("30d"), Ok(Duration::from_secs(30 * 86_400)));
        assert!(parse_rates("1e300").unwrap_err().contains("above"));
        assert!(parse_rates("1000000").is_ok());
        let n = |v: &str| Cli::try_parse_from(["cadence", "bench", "-n", v]).is_ok();
        assert!(n("1000000000") && !n("1000000001") && !n("0"));
    }

    #[test]
    fn bench_max_late_defaults_to_the_one_default() {
        let cli = Cli::try_parse_from(["cadence", "bench"]).unwrap();
        let Command::Bench(b) = cli.command else {
            panic!("bench")
        };
        assert_eq!(b.max_late, cadence_core::runlog::DEFAULT_MAX_LATE);
    }

    #[test]
    fn durations_take_the_one_parsers_forms() {
        assert_eq!(parse_duration("1.5s").unwrap(), Duration::from_millis(1500));
        assert_eq!(parse_duration("1h 30m").unwrap(), Duration::from_secs(5400));
        let e = parse_duration("soon").unwrap_err();
        assert!(e.contains("not a duration") && e.contains("500ms"), "{e}");
    }

    #[test]
    fn start_at_is_rfc3339_within_a_year() {
        assert!(parse_start_at("2026-11-23T14:00:00Z").is_ok());
        assert!(parse_start_at("2999-01-01T00:00:00Z")
            .unwrap_err()
            .contains("year"));
        assert!(parse_start_at("in a minute")
            .unwrap_err()
            .contains("RFC 3339"));
    }

    #[test]
    fn shares() {
        assert_eq!(parse_share("0.1%").unwrap(), 0.001);
        assert_eq!(parse_share("0.02").unwrap(), 0.02);
        assert!(parse_share("150%").is_err());
        assert!(parse_share("abc").is_err());
    }

    // FAULTS 148.
    #[test]
    fn numeric_flags_of_sim_and_plan_are_refused_past_their_ceilings() {
        let refused = |args: &[&str], ceiling: &str| {
            let e = Cli::try_parse_from(args).unwrap_err().to_string();
            let value = args.last().unwrap();
            assert!(
                e.contains(&format!("'{value}'")) && e.contains(ceiling),
                "{args:?}: {e}"
            );
        };
        let big = "4000000000";
        refused(
            &["cadence", "sim", "--parallel-tool-calls", big],
            "1..=100000",
        );
        refused(&["cadence", "sim", "--max-tokens", big], "1..=16777216");
        refused(&["cadence", "sim", "--burst", big], "1..=16777216");
        refused(&["cadence", "plan", "-n", big], "1..=1000000");
        refused(&["cadence", "plan", "--warmup", big], "0..=1000000");
        let agent = ["cadence", "plan", "--agent", "--tool-result-tokens", big];
        refused(&agent, "0..=16777216");
        for cmd in ["sim", "plan"] {
            refused(&["cadence", cmd, "--prefill-workers", big], "1..=1024");
            refused(&["cadence", cmd, "--max-batch", big], "1..=65536");
            refused(&["cadence", cmd, "--chunk-tokens", big], "1..=16777216");
        }
        // At the ceiling each is taken.
        for args in [
            &["cadence", "sim", "--parallel-tool-calls", "100000"][..],
            &[
                "cadence",
                "sim",
                "--max-tokens",
                "16777216",
                "--burst",
                "16777216",
            ],
            &["cadence", "plan", "-n", "1000000", "--warmup", "1000000"],
            &[
                "cadence",
                "plan",
                "--agent",
                "--tool-result-tokens",
                "16777216",
            ],
            &[
                "cadence",
                "plan",
                "--prefill-workers",
                "1024",
                "--max-batch",
                "65536",
            ],
            &["cadence", "sim", "--chunk-tokens", "16777216"],
        ] {
            assert!(Cli::try_parse_from(args).is_ok(), "{args:?}");
        }
    }
}

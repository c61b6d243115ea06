//! The command line: clap definitions only. Parsing turns flags into typed values
//! (durations, enums); `bench`/`sim` validate them into their domain configs.

use clap::{Args, Parser, Subcommand, ValueEnum};
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
    /// Runtime worker threads. Default: one per core, or one fewer when a simulator
    /// Cadence started shares this machine (so client and server do not preempt each other).
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
            Command::Fidelity(_) => true,
            Command::Sim(_)
            | Command::Plan(_)
            | Command::Proxy(_)
            | Command::Report(_)
            | Command::Compare(_) => false,
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
    Proxy(Box<crate::proxy_cmd::ProxyArgs>),
    /// Predict a run from the engine model in virtual time (no server, no HTTP).
    Plan(Box<crate::plan_cmd::PlanArgs>),
    /// Rebuild a report (console, JSON, CSV, HTML, Markdown) from saved records or a
    /// saved JSON report.
    Report(crate::report_cmd::ReportArgs),
    /// Compare two runs (JSON reports or records files) per level and metric.
    Compare(crate::compare_cmd::CompareArgs),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SearchAxis {
    Rate,
    Concurrency,
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

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ApiArg {
    /// OpenAI chat completions (`/v1/chat/completions`).
    Chat,
    /// OpenAI completions (`/v1/completions`).
    Completions,
}

impl From<ApiArg> for cadence_wire::Api {
    fn from(a: ApiArg) -> Self {
        match a {
            ApiArg::Chat => cadence_wire::Api::Chat,
            ApiArg::Completions => cadence_wire::Api::Completions,
        }
    }
}

/// The longest duration any flag takes: a soak test runs for days, a year is a typo
/// (and `Instant + 10⁹ s` would overflow).
pub const MAX_DURATION: Duration = Duration::from_secs(366 * 86_400);

/// Most requests (`-n`) or warm-up requests a level may send.
pub const MAX_REQUESTS: u64 = 1_000_000_000;

/// Highest open-loop rate, requests/s.
pub const MAX_RATE: f64 = 1_000_000.0;

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s.trim())
        .map_err(|e| format!("'{s}' is not a duration ({e}); try 500ms, 10s or 2m"))?;
    if d > MAX_DURATION {
        return Err(format!("'{s}' is longer than a year"));
    }
    Ok(d)
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

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Base URL of an OpenAI-compatible API (e.g. http://127.0.0.1:8000/v1) or a full
    /// endpoint. Without it, Cadence starts its built-in simulator and benchmarks that.
    pub url: Option<String>,

    /// API dialect. Inferred from a URL ending in /chat/completions or /completions.
    #[arg(long, value_enum)]
    pub api: Option<ApiArg>,

    /// Model name sent in each request. Default: the first model the server lists.
    #[arg(long)]
    pub model: Option<String>,

    /// Requests in flight at once (closed loop). A list or range sweeps levels:
    /// `1,2,4,8` or `1..128:x2` (×2 steps) or `4..16:+4`. Default 8.
    #[arg(short = 'c', long, value_parser = parse_counts, conflicts_with = "rate")]
    pub concurrency: Option<Counts>,

    /// Open loop: requests per second, sent on schedule whatever the server does.
    /// A list or range sweeps levels: `1,2,5,10` or `1..64:x2`.
    #[arg(short = 'r', long, value_parser = parse_rates)]
    pub rate: Option<Rates>,

    /// Replay a trace: JSON Lines with an arrival time (`timestamp` ms as in Mooncake
    /// traces, `timestamp_ms`, `arrival_s`, `time_s` or `offset_ms`) and a `prompt`
    /// or `input_length`, optionally `output_length`/`max_tokens`. Open loop.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["rate", "concurrency"])]
    pub trace: Option<PathBuf>,

    /// Replay the trace this many times faster (2 = arrivals twice as dense).
    #[arg(long, default_value_t = 1.0, requires = "trace")]
    pub trace_speed: f64,

    /// Open-loop inter-arrival times: evenly spaced, or Poisson (seeded by --seed).
    #[arg(long, value_enum, default_value = "constant", requires = "rate")]
    pub arrivals: ArrivalsArg,

    /// Open loop: at most this many requests in flight; arrivals beyond it are dropped
    /// (and counted).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_concurrency: Option<u32>,

    /// Open loop: grow the rate linearly from 0 over this long (rate × ramp / 2
    /// requests); -n and -d must outlast it, or the level never reaches its rate.
    #[arg(long, requires = "rate", value_parser = parse_duration)]
    pub ramp_up: Option<Duration>,

    /// Open loop: the share of sends more than 1 ms behind schedule (or dropped) above
    /// which the run is invalid (exit 4): `0.1%` or `0.001`.
    #[arg(long, default_value = "0.1%", value_parser = parse_share)]
    pub max_late: f64,

    /// Measured requests to send. Default 64 when --duration is not given.
    #[arg(short = 'n', long, value_parser = clap::value_parser!(u64).range(1..=MAX_REQUESTS))]
    pub requests: Option<u64>,

    /// Send requests for this long (e.g. 30s, 5m), then drain within --grace.
    #[arg(short = 'd', long, value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Requests sent first and left out of every statistic.
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u64).range(0..=MAX_REQUESTS))]
    pub warmup: u64,

    /// max_tokens of each request: N, fixed:N, normal:MEAN,SD or uniform:LO..HI,
    /// drawn per request by --seed (default 64; a dataset's recorded reply lengths).
    #[arg(long, value_name = "DIST", value_parser = crate::workload_cmd::parse_length)]
    pub max_tokens: Option<cadence_bench::prompts::LengthDist>,

    #[command(flatten)]
    pub workload: crate::workload_cmd::WorkloadArgs,

    /// The prompt of every request (default: a built-in story prompt).
    #[arg(long)]
    pub prompt: Option<String>,

    /// A JSON object merged into every request body (e.g. '{"ignore_eos": true}').
    #[arg(long, value_name = "JSON")]
    pub extra_body: Option<String>,

    /// Extra request header, 'Name: value' (repeatable). Values are never printed.
    #[arg(short = 'H', long = "header", value_name = "HEADER")]
    pub headers: Vec<String>,

    /// Environment variable holding the API key, sent as a bearer token.
    #[arg(long, default_value = "OPENAI_API_KEY", value_name = "VAR")]
    pub api_key_env: String,

    /// Speak HTTP/2 (prior knowledge on http://, ALPN on https://).
    #[arg(long)]
    pub http2: bool,

    /// TCP/TLS connect timeout.
    #[arg(long, default_value = "10s", value_parser = parse_positive_duration)]
    pub connect_timeout: Duration,

    /// From send to the response headers.
    #[arg(long, default_value = "60s", value_parser = parse_positive_duration)]
    pub header_timeout: Duration,

    /// From send to the first output token.
    #[arg(long, default_value = "120s", value_parser = parse_positive_duration)]
    pub ttft_timeout: Duration,

    /// Longest silence allowed once output has started.
    #[arg(long, default_value = "60s", value_parser = parse_positive_duration)]
    pub idle_timeout: Duration,

    /// Longest a single request may take.
    #[arg(long = "timeout", default_value = "600s", value_parser = parse_positive_duration)]
    pub total_timeout: Duration,

    /// After the run stops issuing (duration or Ctrl-C), how long in-flight requests may finish.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub grace: Duration,

    /// An ITL gap longer than this counts as a stall.
    #[arg(long, default_value = "500ms", value_parser = parse_positive_duration)]
    pub stall_threshold: Duration,

    /// Fail a request on its first malformed event instead of counting and continuing.
    #[arg(long)]
    pub strict: bool,

    /// A service-level objective checked per level, e.g. 'itl.p99<=50ms',
    /// 'ttft.p90<=2s', 'output_speed.p50>=20', 'errors.rate<=1%' (repeatable). A
    /// breach exits with 3.
    #[arg(long = "slo", value_name = "EXPR", value_parser = parse_slo)]
    pub slos: Vec<cadence_core::Slo>,

    /// A level where more than this share of the sent requests failed fails the run
    /// (exit 3) and never passes a --find-max probe: `5%` or `0.05`; `100%` turns the
    /// ceiling off. Finer gates: --slo 'errors.rate<=1%', 'errors.http_5xx.rate<=0.5%'.
    #[arg(long, default_value = "5%", value_parser = parse_share)]
    pub max_error_rate: f64,

    /// Search for the highest rate or concurrency that meets every --slo: grow ×2 from
    /// the first --rate / --concurrency value (default 1), then bisect.
    #[arg(long, value_enum, value_name = "AXIS")]
    pub find_max: Option<SearchAxis>,

    /// Most levels the --find-max search may probe.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub max_probes: u32,

    /// Width of the time-series buckets in the JSON report (ITL/TTFT and throughput
    /// over the run).
    #[arg(long, default_value = "1s", value_parser = parse_time_bucket)]
    pub time_bucket: Duration,

    /// Write the JSON report here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Write one JSON line per request here, as requests finish.
    #[arg(long, value_name = "FILE")]
    pub records: Option<PathBuf>,

    #[command(flatten)]
    pub outputs: crate::report_cmd::OutputArgs,

    /// No progress line.
    #[arg(short, long)]
    pub quiet: bool,

    /// Seed for the built-in simulator (and later workloads).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// The built-in simulator's engine (no URL only): `--preset`, `--engine` and the
    /// engine flags of `cadence plan`. Default: the tiny@cpu preset.
    #[command(flatten)]
    pub engine: crate::plan_cmd::EngineOpts,
}

#[derive(Debug, Args)]
pub struct SimArgs {
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub addr: std::net::SocketAddr,

    #[arg(long, default_value_t = 0)]
    pub seed: u64,

    /// Time to first token: 20ms, fixed:20ms, uniform:10ms..30ms, normal:20ms,5ms.
    #[arg(long)]
    pub ttft: Option<String>,

    /// Inter-token latency, same forms as --ttft.
    #[arg(long)]
    pub itl: Option<String>,

    /// Tokens per chunk.
    #[arg(long)]
    pub burst: Option<u32>,

    /// Chance per chunk of an extra stall.
    #[arg(long)]
    pub stall_probability: Option<f64>,

    /// Stall duration, same forms as --ttft.
    #[arg(long)]
    pub stall: Option<String>,

    /// Tokens per response when a request gives no max_tokens.
    #[arg(long)]
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

    /// Time tokens with an engine model instead of the flat --ttft/--itl cadence.
    #[command(flatten)]
    pub engine: crate::plan_cmd::EngineOpts,
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

    /// Write the results as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_threads_leave_a_core_to_a_simulator_cadence_started() {
        let cli = |args: &[&str]| Cli::try_parse_from(args).unwrap();
        // Bench with no URL starts the simulator in-process: one core is left to it.
        assert_eq!(cli(&["cadence", "bench"]).worker_threads(2), 1);
        assert_eq!(cli(&["cadence", "bench"]).worker_threads(1), 1);
        assert_eq!(cli(&["cadence", "fidelity"]).worker_threads(8), 7);
        // Against a separate server, or serving, every core is used.
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
    fn shares() {
        assert_eq!(parse_share("0.1%").unwrap(), 0.001);
        assert_eq!(parse_share("0.02").unwrap(), 0.02);
        assert!(parse_share("150%").is_err());
        assert!(parse_share("abc").is_err());
    }
}

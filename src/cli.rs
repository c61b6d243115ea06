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
            Command::Sim(_) => false,
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
    Sim(SimArgs),
    /// Check the client's timing fidelity against the simulator's own send log.
    Fidelity(FidelityArgs),
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

pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s.trim())
        .map_err(|e| format!("'{s}' is not a duration ({e}); try 500ms, 10s or 2m"))
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

    /// Requests in flight at once (closed loop).
    #[arg(short = 'c', long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub concurrency: u32,

    /// Measured requests to send. Default 64 when --duration is not given.
    #[arg(short = 'n', long)]
    pub requests: Option<u64>,

    /// Send requests for this long (e.g. 30s, 5m), then drain within --grace.
    #[arg(short = 'd', long, value_parser = parse_duration)]
    pub duration: Option<Duration>,

    /// Requests sent first and left out of every statistic.
    #[arg(long, default_value_t = 0)]
    pub warmup: u64,

    /// max_tokens of each request.
    #[arg(long, default_value_t = 64)]
    pub max_tokens: u32,

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
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub connect_timeout: Duration,

    /// From send to the response headers.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub header_timeout: Duration,

    /// From send to the first output token.
    #[arg(long, default_value = "120s", value_parser = parse_duration)]
    pub ttft_timeout: Duration,

    /// Longest silence allowed once output has started.
    #[arg(long, default_value = "60s", value_parser = parse_duration)]
    pub idle_timeout: Duration,

    /// Longest a single request may take.
    #[arg(long = "timeout", default_value = "600s", value_parser = parse_duration)]
    pub total_timeout: Duration,

    /// After the run stops issuing (duration or Ctrl-C), how long in-flight requests may finish.
    #[arg(long, default_value = "5s", value_parser = parse_duration)]
    pub grace: Duration,

    /// An ITL gap longer than this counts as a stall.
    #[arg(long, default_value = "500ms", value_parser = parse_duration)]
    pub stall_threshold: Duration,

    /// Fail a request on its first malformed event instead of counting and continuing.
    #[arg(long)]
    pub strict: bool,

    /// Write the JSON report here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Write one JSON line per request here, as requests finish.
    #[arg(long, value_name = "FILE")]
    pub records: Option<PathBuf>,

    /// No progress line.
    #[arg(short, long)]
    pub quiet: bool,

    /// Seed for the built-in simulator (and later workloads).
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
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

    /// Write one JSON line per streamed request with the time each chunk was written
    /// (ns since the simulator started): the truth a fidelity check compares against.
    #[arg(long, value_name = "FILE")]
    pub send_log: Option<PathBuf>,
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

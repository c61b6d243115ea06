//! `cadence proxy`: a transparent streaming proxy that measures every stream of live
//! traffic with the same parser and record as the load generator, exports Prometheus
//! metrics, serves rolling-window percentiles on `/stats` and evaluates alert rules.
//!
//! Bytes pass through unchanged and each frame is forwarded the moment it arrives;
//! the tap only reads a copy. See docs/src/proxy.md.

#![warn(missing_docs)]

pub mod alert;
mod body;
mod forward;
pub mod framing_guard;
pub mod live;
pub mod metrics;
mod metrics_server;
pub mod records;
mod server;
mod shared;
mod slots;
mod trace;
pub mod ws_frames;

pub use alert::{AlertRule, Alerts, Transition};
pub use records::{RecordWriter, RecordsConfig, RecordsError, WriterStatus};
pub use server::{spawn, Proxy, Stopped};

use cadence_core::secret::redact_url;
use cadence_otlp::run::StartError;
use std::net::SocketAddr;
use std::time::Duration;

/// Limits and timeouts: streaming-friendly (idle, never total), each with a default a
/// serving engineer would pick.
#[derive(Debug, Clone)]
pub struct Limits {
    /// Largest request head (request line and headers) in bytes → 431 beyond.
    pub max_header_bytes: usize,
    /// Most request header lines → 431 beyond.
    pub max_headers: usize,
    /// A client must send its complete request head within this (slowloris).
    pub header_read_timeout: Duration,
    /// Largest request body in bytes → 413 beyond.
    pub max_request_body: usize,
    /// The whole request body must arrive within this of its head, extended by a second
    /// per 8 KiB received (a steady upload is never cut) → 408 beyond.
    pub body_read_timeout: Duration,
    /// Most client connections held at once, lowered at start to what the descriptor
    /// limit allows.
    pub max_connections: usize,
    /// From sending upstream to the upstream's response headers → 504 beyond.
    pub upstream_header_timeout: Duration,
    /// Longest silence from the upstream once its headers arrived.
    pub idle_timeout: Duration,
    /// On shutdown, how long in-flight streams may finish before they are cut.
    pub drain_timeout: Duration,
    /// Most content-bearing chunks one stream's record keeps (`--max-chunks`): past
    /// it the stream is still relayed whole, and its record counts the later chunks
    /// instead of timing them (`counters.chunks_not_kept`), so a stream that never
    /// ends costs bounded memory (FAULTS 124).
    pub max_chunks: usize,
}

/// Default [`Limits::max_chunks`]: 262,144, as bench's `--max-chunks` (twice the
/// longest output a model offers today); a record that long is about 4 MiB in memory.
pub const DEFAULT_MAX_CHUNKS: usize = 1 << 18;

impl Limits {
    /// An HTTP/1.1 server builder holding these limits on request heads: the header
    /// timeout (on its timer), the header count and size. The proxied port and the
    /// metrics port both serve with it.
    pub(crate) fn http1(&self) -> hyper::server::conn::http1::Builder {
        let mut builder = hyper::server::conn::http1::Builder::new();
        builder
            .timer(hyper_util::rt::TokioTimer::new())
            .header_read_timeout(self.header_read_timeout)
            .max_headers(self.max_headers)
            .max_header_size(self.max_header_bytes)
            .max_buf_size(self.max_header_bytes.max(8192) + 8192)
            .keep_alive(true);
        builder
    }
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_header_bytes: 64 * 1024,
            max_headers: 100,
            header_read_timeout: Duration::from_secs(10),
            max_request_body: 64 << 20,
            body_read_timeout: Duration::from_secs(20),
            max_connections: 4096,
            upstream_header_timeout: Duration::from_secs(300),
            idle_timeout: Duration::from_secs(300),
            drain_timeout: Duration::from_secs(10),
            max_chunks: DEFAULT_MAX_CHUNKS,
        }
    }
}

/// Everything `spawn` needs.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// Where clients connect (port 0: any free port; [`Proxy`] says which).
    pub listen: SocketAddr,
    /// `http[s]://host[:port][/prefix]`; request paths are appended to the prefix.
    pub upstream: http::Uri,
    /// Where `/metrics`, `/stats` and `/health` are served (none: not served).
    pub metrics_listen: Option<SocketAddr>,
    /// The records file and its rotation; `None`: no records are written.
    pub records: Option<RecordsConfig>,
    /// Alert rules evaluated on the rolling windows (`--alert`); empty: no alert loop.
    pub alerts: Vec<AlertRule>,
    /// Where each alert transition is POSTed as JSON; `None`: transitions are only logged.
    pub alert_webhook: Option<http::Uri>,
    /// How often alert rules are evaluated.
    pub alert_interval: Duration,
    /// Model names allowed as a metric label; others become `other`.
    pub models: Vec<String>,
    /// Values the rolling windows keep exactly, per second and per merged window
    /// (the memory and CPU bound of `/stats` and the alert rules).
    pub stats_budget: live::WindowBudget,
    /// Sizes and timeouts for clients and the upstream.
    pub limits: Limits,
    /// Path suffixes of the inference routes that are measured (records, `/stats`,
    /// latency metrics); every other request (`/health`, `/v1/models`, …) is forwarded
    /// unmeasured. Default: [`DEFAULT_MEASURED_ROUTES`].
    pub measured_routes: Vec<String>,
    /// Which clock stamps the upstream's chunks: the kernel's receive time of the
    /// proxy's upstream socket reads (default; the user clock where the platform gives
    /// none), or the proxy's clock when its read returned (`--timestamps user`).
    pub timestamps: cadence_transport::Timestamps,
    /// What the records file's run line says of the run that only the caller knows.
    pub run: RunFacts,
    /// TLS to an https:// upstream behind a private CA (`--upstream-ca-file`); `None`:
    /// the public roots.
    pub upstream_tls: Option<cadence_transport::tls::TlsConfig>,
    /// Tracing (`--otlp`): each measured request continues its caller's trace (or
    /// starts one), is forwarded with its own `traceparent`, and is exported as a
    /// server span; `None`: trace headers pass through untouched and nothing is sent.
    pub tracing: Option<Tracing>,
    /// OTLP metrics (`--otlp-signals` with `metrics`): the measured requests' TTFT,
    /// ITL, TPOT, E2E and token histograms, by model, exported every interval and at
    /// shutdown; `None`: not sent.
    pub otlp_metrics: Option<cadence_otlp::signals::MetricsConfig>,
}

/// What the proxy's tracing needs: where spans go and which traces it starts itself.
#[derive(Debug, Clone)]
pub struct Tracing {
    /// The exporter's checked configuration (`cadence_otlp::run::config`).
    pub otlp: cadence_otlp::Config,
    /// The share of the traces the proxy starts (a request that came with no
    /// `traceparent`) that are exported (`--otlp-sample`); a continued trace is
    /// sampled as its caller said.
    pub sample: f64,
    /// An event on each span for each of its first N chunks (`--otlp-chunk-events`).
    pub chunk_events: u32,
}

impl Tracing {
    /// The proxy's OTLP exports from its `--otlp*` flags and this process's
    /// `OTEL_EXPORTER_OTLP_*` variables: spans (with the trace context they need) and
    /// metrics, each `None` when not asked for.
    pub fn from_flags(
        f: &cadence_otlp::signals::Flags<'_>,
    ) -> Result<
        (
            Option<Tracing>,
            Option<cadence_otlp::signals::MetricsConfig>,
        ),
        StartError,
    > {
        let (spans, metrics) = f.configs()?;
        let tracing = spans.map(|otlp| Tracing {
            otlp,
            sample: f.sample,
            chunk_events: f.chunk_events,
        });
        Ok((tracing, metrics))
    }
}

/// The records file's run line as the caller gives it: the target and the command line,
/// secrets already removed (the binary removes them as it does from bench's run line).
/// The proxy adds its start, duration and model allow-list; it reads no process
/// arguments itself, so a library user's run line says only what it was given.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunFacts {
    /// The upstream as shown, secrets masked.
    pub target: String,
    /// The command line that started the proxy, secrets masked; empty for a library user.
    pub command: Vec<String>,
}

impl RunFacts {
    /// The upstream as every Cadence output shows a URL ([`redact_url`]: userinfo and
    /// query values masked), and no command line.
    pub fn of_upstream(upstream: &http::Uri) -> RunFacts {
        RunFacts {
            target: redact_url(&upstream.to_string()),
            command: Vec::new(),
        }
    }
}

/// The inference routes measured by default, as path suffixes (so a prefix such as
/// `/openai/v1` still matches): OpenAI chat, completions and responses, Anthropic
/// messages, Ollama, TGI / SGLang, KServe (`…/generate_stream`), llama.cpp and the
/// Realtime WebSocket (`…/realtime`).
pub const DEFAULT_MEASURED_ROUTES: &[&str] = &[
    "/chat/completions",
    "/completions",
    "/responses",
    "/messages",
    "/api/chat",
    "/api/generate",
    "/generate",
    "/generate_stream",
    "/completion",
    "/realtime",
];

impl ProxyConfig {
    /// The defaults for a proxy on `listen` in front of `upstream`: no metrics listener, no
    /// records, no alerts, the default limits and measured routes.
    pub fn new(listen: SocketAddr, upstream: http::Uri) -> Self {
        ProxyConfig {
            listen,
            metrics_listen: None,
            records: None,
            alerts: Vec::new(),
            alert_webhook: None,
            alert_interval: Duration::from_secs(1),
            models: Vec::new(),
            stats_budget: live::WindowBudget::default(),
            limits: Limits::default(),
            measured_routes: DEFAULT_MEASURED_ROUTES
                .iter()
                .map(|r| r.to_string())
                .collect(),
            timestamps: cadence_transport::Timestamps::default(),
            run: RunFacts::of_upstream(&upstream),
            upstream_tls: None,
            tracing: None,
            otlp_metrics: None,
            upstream,
        }
    }

    /// Whether requests to `path` are measured: it ends with one of
    /// `measured_routes` at a segment boundary (a trailing `/` ignored).
    pub fn measures(&self, path: &str) -> bool {
        let p = path.trim_end_matches('/');
        self.measured_routes.iter().any(|r| {
            let r = r.trim_end_matches('/');
            let r = r.strip_prefix('/').unwrap_or(r);
            p.strip_suffix(r).is_some_and(|head| head.ends_with('/'))
        })
    }
}

/// Why the proxy could not start or stop cleanly.
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A listener (the client's or the metrics') could not bind.
    #[error("cannot listen on {addr}: {error}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The I/O error binding gave.
        error: std::io::Error,
    },
    /// An upstream or webhook URL is not `http[s]://host…` (or an upstream has a query); the
    /// URL as given, secrets masked.
    #[error("invalid upstream URL {0:?}: use http://host:port or https://host[/prefix]")]
    Upstream(String),
    /// The records file could not be opened.
    #[error(transparent)]
    Records(#[from] RecordsError),
    /// An OTLP export thread (spans', metrics') could not start (`--otlp`).
    #[error("cannot start the OTLP export thread: {error}")]
    Otlp {
        /// Why the thread could not be spawned.
        error: std::io::Error,
    },
    #[error(
        "the upstream {upstream} is this proxy itself (listening on {listen}): every \
         request would loop until file descriptors run out; point --upstream at the server"
    )]
    /// The upstream resolves to the proxy's own listener.
    Loop {
        /// The upstream URL, secrets masked.
        upstream: String,
        /// The address the proxy listens on.
        listen: SocketAddr,
    },
}

/// Validates an upstream URL: scheme http or https, a host, no query.
pub fn parse_upstream(s: &str) -> Result<http::Uri, ProxyError> {
    let uri = parse_http_url(s)?;
    if uri.query().is_some() {
        return Err(ProxyError::Upstream(redact_url(s)));
    }
    Ok(uri)
}

/// Validates an alert webhook URL: scheme http or https and a host; a query is kept
/// (a hook's token often rides in it) and redacted wherever the URL is shown
/// (FAULTS 107).
pub fn parse_webhook(s: &str) -> Result<http::Uri, ProxyError> {
    parse_http_url(s)
}

fn parse_http_url(s: &str) -> Result<http::Uri, ProxyError> {
    let bad = || ProxyError::Upstream(redact_url(s));
    let uri: http::Uri = s.parse().map_err(|_| bad())?;
    match uri.scheme_str() {
        Some("http") | Some("https") => {}
        _ => return Err(bad()),
    }
    if uri.host().is_none() {
        return Err(bad());
    }
    Ok(uri)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f101_urls_are_shown_without_credentials() {
        for (url, secret) in [
            ("user:PASS1234@127.0.0.1:9", "PASS1234"),
            ("http://user:PA/SS@h:9/v1", "PA/SS"),
            ("https://h/x?token=TOK5678&a=1", "TOK5678"),
            ("http://u:P@W@h/x?client_secret=CS99", "CS99"),
        ] {
            let shown = redact_url(url);
            assert!(!shown.contains(secret), "{shown}");
        }
        assert_eq!(redact_url("http://u:p@h:9/v1"), "http://[REDACTED]@h:9/v1");
        assert_eq!(
            redact_url("http://h:9/v1?a=1"),
            "http://h:9/v1?a=[REDACTED]"
        );
        let e = parse_upstream("user:PASS1234@127.0.0.1:9").unwrap_err();
        assert!(!e.to_string().contains("PASS1234"), "{e}");
        let e = parse_upstream("http://u:PASS1234@h/v1?x=1").unwrap_err();
        assert!(!e.to_string().contains("PASS1234"), "{e}");
    }

    #[test]
    fn f107_a_webhook_url_may_have_a_query() {
        let u = parse_webhook("https://hooks.example/x?token=T0K&a=1").unwrap();
        assert_eq!(u.query(), Some("token=T0K&a=1"));
        assert!(parse_upstream("https://hooks.example/x?token=T0K").is_err());
        assert!(parse_webhook("ftp://hooks.example/x").is_err());
    }
}

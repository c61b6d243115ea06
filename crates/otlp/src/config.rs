//! Where spans go and how: `--otlp URL` or the standard `OTEL_EXPORTER_OTLP_*`
//! variables (endpoint, headers, protocol, timeout), read once into a checked
//! configuration. Header values are secrets: they are sent, never shown.

use http::{HeaderMap, HeaderName, HeaderValue, Uri};
use std::time::Duration;

/// How spans are encoded on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Protocol {
    /// OTLP/HTTP with a protobuf body (`http/protobuf`): what every receiver takes.
    #[default]
    HttpProtobuf,
    /// OTLP/HTTP with a JSON body (`http/json`).
    HttpJson,
    /// OTLP/gRPC (`grpc`): unary calls over HTTP/2 (a collector's port 4317).
    Grpc,
}

impl Protocol {
    /// Reads a protocol as `OTEL_EXPORTER_OTLP_PROTOCOL` spells it.
    pub fn parse(s: &str) -> Result<Protocol, String> {
        match s.trim() {
            "http/protobuf" => Ok(Protocol::HttpProtobuf),
            "http/json" => Ok(Protocol::HttpJson),
            "grpc" => Ok(Protocol::Grpc),
            other => Err(format!(
                "'{other}' is no OTLP protocol: use http/protobuf (a collector's port 4318), \
                 http/json or grpc (port 4317)"
            )),
        }
    }

    /// The name as `OTEL_EXPORTER_OTLP_PROTOCOL` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::HttpProtobuf => "http/protobuf",
            Protocol::HttpJson => "http/json",
            Protocol::Grpc => "grpc",
        }
    }

    /// The body's content type.
    pub fn content_type(self) -> &'static str {
        match self {
            Protocol::HttpProtobuf => "application/x-protobuf",
            Protocol::HttpJson => "application/json",
            Protocol::Grpc => "application/grpc",
        }
    }
}

/// What is exported: spans (`/v1/traces`) or metrics (`/v1/metrics`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// One span per measured request.
    Traces,
    /// The run's histograms (TTFT, ITL, TPOT, E2E, tokens).
    Metrics,
}

impl Signal {
    /// Both signals, in the order `--otlp-signals` names them.
    pub const ALL: [Signal; 2] = [Signal::Traces, Signal::Metrics];

    /// The signal's path under a collector's base URL.
    pub fn path(self) -> &'static str {
        match self {
            Signal::Traces => "/v1/traces",
            Signal::Metrics => "/v1/metrics",
        }
    }

    /// The signal's gRPC method: the path an OTLP/gRPC export calls.
    pub fn grpc_method(self) -> &'static str {
        match self {
            Signal::Traces => "/opentelemetry.proto.collector.trace.v1.TraceService/Export",
            Signal::Metrics => "/opentelemetry.proto.collector.metrics.v1.MetricsService/Export",
        }
    }

    /// The name as `--otlp-signals` spells it.
    pub fn name(self) -> &'static str {
        match self {
            Signal::Traces => "traces",
            Signal::Metrics => "metrics",
        }
    }

    fn upper(self) -> &'static str {
        match self {
            Signal::Traces => "TRACES",
            Signal::Metrics => "METRICS",
        }
    }
}

/// The signals a command exports (`--otlp-signals traces,metrics`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Signals {
    /// Spans are exported.
    pub traces: bool,
    /// Metrics are exported.
    pub metrics: bool,
}

impl Default for Signals {
    fn default() -> Self {
        Signals {
            traces: true,
            metrics: true,
        }
    }
}

impl Signals {
    /// Reads a comma-separated list of `traces` and `metrics` (at least one).
    pub fn parse(s: &str) -> Result<Signals, String> {
        let mut out = Signals {
            traces: false,
            metrics: false,
        };
        for name in s.split(',').map(str::trim) {
            match name {
                "traces" => out.traces = true,
                "metrics" => out.metrics = true,
                other => {
                    return Err(format!(
                        "'{other}' is no OTLP signal: name traces, metrics or both (traces,metrics)"
                    ))
                }
            }
        }
        Ok(out)
    }

    /// Whether `signal` is among them.
    pub fn has(self, signal: Signal) -> bool {
        match signal {
            Signal::Traces => self.traces,
            Signal::Metrics => self.metrics,
        }
    }
}

/// A checked export configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// The endpoint the signal is POSTed to (no userinfo).
    pub endpoint: Uri,
    /// Headers sent with each POST (`OTEL_EXPORTER_OTLP_HEADERS`): never printed.
    pub headers: HeaderMap,
    /// The body's encoding.
    pub protocol: Protocol,
    /// How long one POST may take, and how long the end of a run waits for the spans
    /// still queued (`OTEL_EXPORTER_OTLP_TIMEOUT`, default 10 s).
    pub timeout: Duration,
    /// Spans the queue holds before new ones are dropped.
    pub queue: usize,
    /// Spans one POST carries at most.
    pub batch: usize,
    /// `service.name` of the resource (`OTEL_SERVICE_NAME`, default `cadence`).
    pub service: String,
}

/// The default queue: 2,048 spans, as the OpenTelemetry SDKs' batch processor.
pub const DEFAULT_QUEUE: usize = 2_048;
/// The default batch: 512 spans, as the SDKs'.
pub const DEFAULT_BATCH: usize = 512;
/// The default timeout of one POST, as the OTLP exporter specification's.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

impl Config {
    /// The traces configuration from `--otlp` (`flag`, a base URL or the traces
    /// endpoint itself), `--otlp-protocol` and the environment (`env` looks a variable
    /// up); `None` when neither the flag nor an endpoint variable asks for export.
    pub fn resolve(
        flag: Option<&str>,
        protocol: Option<Protocol>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Config>, String> {
        Config::resolve_for(Signal::Traces, flag, protocol, env)
    }

    /// The configuration of `signal`: `--otlp` is a base URL (the signal's path is
    /// added) or that signal's endpoint; the signal's own variables
    /// (`OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`, `..._HEADERS`, `..._PROTOCOL`,
    /// `..._TIMEOUT`) come before the shared ones.
    pub fn resolve_for(
        signal: Signal,
        flag: Option<&str>,
        protocol: Option<Protocol>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Option<Config>, String> {
        let var = |name: &str| env(name).filter(|v| !v.trim().is_empty());
        let own = |what: &str| format!("OTEL_EXPORTER_OTLP_{}_{what}", signal.upper());
        let protocol = match protocol {
            Some(p) => p,
            None => var(&own("PROTOCOL"))
                .or_else(|| var("OTEL_EXPORTER_OTLP_PROTOCOL"))
                .map(|p| Protocol::parse(&p))
                .transpose()?
                .unwrap_or_default(),
        };
        let (url, what) = match (flag, var(&own("ENDPOINT"))) {
            (Some(url), _) => (url.to_owned(), "--otlp".to_owned()),
            (None, Some(url)) => (url, own("ENDPOINT")),
            (None, None) => match var("OTEL_EXPORTER_OTLP_ENDPOINT") {
                Some(url) => (url, "OTEL_EXPORTER_OTLP_ENDPOINT".to_owned()),
                None => return Ok(None),
            },
        };
        let endpoint = match protocol {
            Protocol::Grpc => grpc_endpoint(&checked(&url, &what)?, signal.grpc_method(), &what)?,
            // The signal's own variable is the endpoint as written.
            _ if flag.is_none() && what == own("ENDPOINT") => checked(&url, &what)?,
            _ => signal_endpoint(signal, &url, &what)?,
        };
        let mut headers = HeaderMap::new();
        for name in ["OTEL_EXPORTER_OTLP_HEADERS".to_owned(), own("HEADERS")] {
            if let Some(list) = var(&name) {
                parse_headers(&list, &name, &mut headers)?;
            }
        }
        let timeout = match var(&own("TIMEOUT")).or_else(|| var("OTEL_EXPORTER_OTLP_TIMEOUT")) {
            Some(ms) => match ms.trim().parse::<u64>() {
                Ok(ms) if (1..=600_000).contains(&ms) => Duration::from_millis(ms),
                _ => {
                    return Err(format!(
                        "OTEL_EXPORTER_OTLP_TIMEOUT must be milliseconds from 1 to 600000, \
                         got '{ms}'"
                    ))
                }
            },
            None => DEFAULT_TIMEOUT,
        };
        Ok(Some(Config {
            endpoint,
            headers,
            protocol,
            timeout,
            queue: DEFAULT_QUEUE,
            batch: DEFAULT_BATCH,
            service: var("OTEL_SERVICE_NAME").unwrap_or_else(|| "cadence".into()),
        }))
    }

    /// The endpoint as messages show it.
    pub fn display(&self) -> String {
        self.endpoint.to_string()
    }
}

/// The port an http:// gRPC endpoint without one is called on: OTLP/gRPC's (a
/// collector's default; an https:// endpoint keeps 443, where hosted backends take it).
pub const GRPC_PORT: u16 = 4317;

/// `url` (checked) as the gRPC endpoint of the service method `method`: its path must
/// be empty, `/` or `method` itself, since gRPC calls the method's own path; an
/// http:// URL without a port gets [`GRPC_PORT`]. `what` names the flag or variable.
fn grpc_endpoint(url: &Uri, method: &str, what: &str) -> Result<Uri, String> {
    let path = url.path();
    if !matches!(path, "" | "/") && path != method {
        return Err(format!(
            "{what}: over gRPC the collector is called on its service's own path ({method}); \
             give its base URL (e.g. http://127.0.0.1:{GRPC_PORT}), not the path '{path}'"
        ));
    }
    let scheme = url.scheme_str().unwrap_or("http");
    let host = url.host().unwrap_or_default();
    let port = url.port_u16().unwrap_or(match scheme {
        "https" => 443,
        _ => GRPC_PORT,
    });
    format!("{scheme}://{host}:{port}{method}")
        .parse()
        .map_err(|e| format!("{what}: '{host}:{port}' makes no URL ({e})"))
}

/// `url` with the signal's path (`/v1/traces`, `/v1/metrics`) appended to its path,
/// unless it already ends so.
fn signal_endpoint(signal: Signal, url: &str, what: &str) -> Result<Uri, String> {
    let uri = checked(url, what)?;
    let path = signal.path();
    if uri.path().ends_with(path) {
        return Ok(uri);
    }
    // `--otlp` given the other signal's endpoint: the same base serves both.
    let base = url.trim().trim_end_matches('/');
    let base = Signal::ALL
        .iter()
        .find_map(|s| base.strip_suffix(s.path()))
        .unwrap_or(base);
    checked(&format!("{base}{path}"), what)
}

/// An http:// or https:// URL with a host and no credentials in it.
fn checked(url: &str, what: &str) -> Result<Uri, String> {
    let shown = cadence_core::secret::redact_url(url.trim());
    let uri: Uri = url
        .trim()
        .parse()
        .map_err(|e| format!("{what}: '{shown}' is not a URL ({e})"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) || uri.host().is_none() {
        return Err(format!(
            "{what}: '{shown}' is not an http:// or https:// URL with a host"
        ));
    }
    if uri.authority().is_some_and(|a| a.as_str().contains('@')) {
        return Err(format!(
            "{what}: '{shown}' holds credentials; give them as a header in \
             OTEL_EXPORTER_OTLP_HEADERS (e.g. authorization=Basic ...) so no URL carries them"
        ));
    }
    if uri.query().is_some() {
        return Err(format!(
            "{what}: '{shown}' has a query; OTLP endpoints take none"
        ));
    }
    Ok(uri)
}

/// `key=value,key2=value2` as the OTLP exporter specification writes headers (values
/// percent-decoded), added to `into`. An error names the entry's key, never its value.
fn parse_headers(list: &str, var: &str, into: &mut HeaderMap) -> Result<(), String> {
    for (i, entry) in list.split(',').enumerate() {
        if entry.trim().is_empty() {
            continue;
        }
        let Some((k, v)) = entry.split_once('=') else {
            return Err(format!(
                "{var}: entry {} is not key=value (its value is not shown)",
                i + 1
            ));
        };
        let key = k.trim();
        let name = HeaderName::from_bytes(key.as_bytes())
            .map_err(|_| format!("{var}: '{key}' is not a header name"))?;
        let value = HeaderValue::from_bytes(&percent_decode(v.trim().as_bytes()))
            .map_err(|_| format!("{var}: the value of '{key}' is not a header value"))?;
        into.insert(name, value);
    }
    Ok(())
}

/// `%XX` escapes decoded; anything else kept as written.
pub(crate) fn percent_decode(b: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%' && i + 2 < b.len() {
            if let (Some(h), Some(l)) = (hex(b[i + 1]), hex(b[i + 2])) {
                out.push((h * 16 + l) as u8);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(vars: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |k| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_flag_and_the_base_variable_get_v1_traces_the_signal_variable_is_as_written() {
        let none = env(&[]);
        assert!(Config::resolve(None, None, &none).unwrap().is_none());
        let c = Config::resolve(Some("http://127.0.0.1:6006"), None, &none)
            .unwrap()
            .unwrap();
        assert_eq!(c.endpoint, "http://127.0.0.1:6006/v1/traces");
        assert_eq!(c.protocol, Protocol::HttpProtobuf);
        assert_eq!(c.timeout, DEFAULT_TIMEOUT);
        let c = Config::resolve(Some("http://h:4318/v1/traces"), None, &none)
            .unwrap()
            .unwrap();
        assert_eq!(c.endpoint, "http://h:4318/v1/traces");
        let base = env(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318/otlp/")]);
        let c = Config::resolve(None, None, &base).unwrap().unwrap();
        assert_eq!(c.endpoint, "http://h:4318/otlp/v1/traces");
        let own = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://t:9/custom"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "250"),
            ("OTEL_SERVICE_NAME", "ci-bench"),
        ]);
        let c = Config::resolve(None, None, &own).unwrap().unwrap();
        assert_eq!(c.endpoint, "http://t:9/custom");
        assert_eq!(c.protocol, Protocol::HttpJson);
        assert_eq!(c.timeout, Duration::from_millis(250));
        assert_eq!(c.service, "ci-bench");
        // The flag's protocol wins over the variable's.
        let c = Config::resolve(None, Some(Protocol::HttpProtobuf), &own)
            .unwrap()
            .unwrap();
        assert_eq!(c.protocol, Protocol::HttpProtobuf);
    }

    #[test]
    fn headers_are_decoded_and_errors_never_show_a_value() {
        let vars = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318"),
            (
                "OTEL_EXPORTER_OTLP_HEADERS",
                "api_key=s3cr%3Dt,authorization=Basic%20YWJj",
            ),
        ]);
        let c = Config::resolve(None, None, &vars).unwrap().unwrap();
        assert_eq!(c.headers["api_key"], "s3cr=t");
        assert_eq!(c.headers["authorization"], "Basic YWJj");
        let bad = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api_key=ok,sk-hidden-value"),
        ]);
        let e = Config::resolve(None, None, &bad).unwrap_err();
        assert!(e.contains("entry 2") && !e.contains("sk-hidden"), "{e}");
    }

    #[test]
    fn credentials_bad_protocols_and_bad_urls_are_refused_naming_what_to_do() {
        let none = env(&[]);
        let e = Config::resolve(Some("http://user:hunter2@h:4318"), None, &none).unwrap_err();
        assert!(e.contains("OTEL_EXPORTER_OTLP_HEADERS"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
        let e = Config::resolve(Some("ftp://h"), None, &none).unwrap_err();
        assert!(e.contains("http://"), "{e}");
        let e = Protocol::parse("http/grpc").unwrap_err();
        assert!(
            e.contains("'http/grpc'") && e.contains("grpc (port 4317)"),
            "{e}"
        );
        let slow = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318"),
            ("OTEL_EXPORTER_OTLP_TIMEOUT", "0"),
        ]);
        let e = Config::resolve(None, None, &slow).unwrap_err();
        assert!(e.contains("from 1 to 600000"), "{e}");
    }

    #[test]
    fn metrics_go_to_v1_metrics_and_their_own_variables_come_first() {
        let none = env(&[]);
        for flag in ["http://h:4318", "http://h:4318/", "http://h:4318/v1/traces"] {
            let c = Config::resolve_for(Signal::Metrics, Some(flag), None, &none)
                .unwrap()
                .unwrap();
            assert_eq!(c.endpoint, "http://h:4318/v1/metrics", "{flag}");
        }
        let vars = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h:4318"),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://m:9/in"),
            ("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL", "http/json"),
            ("OTEL_EXPORTER_OTLP_METRICS_HEADERS", "x-key=m"),
            ("OTEL_EXPORTER_OTLP_METRICS_TIMEOUT", "300"),
        ]);
        let m = Config::resolve_for(Signal::Metrics, None, None, &vars)
            .unwrap()
            .unwrap();
        assert_eq!(m.endpoint, "http://m:9/in");
        assert_eq!(m.protocol, Protocol::HttpJson);
        assert_eq!(m.headers["x-key"], "m");
        assert_eq!(m.timeout, Duration::from_millis(300));
        // The traces keep the shared settings.
        let t = Config::resolve(None, None, &vars).unwrap().unwrap();
        assert_eq!(t.endpoint, "http://h:4318/v1/traces");
        assert_eq!(t.protocol, Protocol::HttpProtobuf);
        assert!(t.headers.get("x-key").is_none());
    }

    #[test]
    fn signals_parse_a_list_and_refuse_other_names() {
        let both = Signals::parse("traces,metrics").unwrap();
        assert!(both.traces && both.metrics);
        let m = Signals::parse(" metrics ").unwrap();
        assert!(!m.has(Signal::Traces) && m.has(Signal::Metrics));
        let e = Signals::parse("traces,logs").unwrap_err();
        assert!(e.contains("'logs'") && e.contains("traces, metrics"), "{e}");
        assert!(Signals::parse("").is_err());
    }

    #[test]
    fn grpc_calls_the_base_url_on_the_signal_method_port_4317_by_default() {
        let (t, m) = (Signal::Traces.grpc_method(), Signal::Metrics.grpc_method());
        let grpc = env(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://h"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]);
        let c = Config::resolve(None, None, &grpc).unwrap().unwrap();
        assert_eq!(
            (c.protocol, c.endpoint.to_string()),
            (Protocol::Grpc, format!("http://h:4317{t}"))
        );
        let c = Config::resolve_for(Signal::Metrics, None, None, &grpc)
            .unwrap()
            .unwrap();
        assert_eq!(c.endpoint.to_string(), format!("http://h:4317{m}"));
        let none = env(&[]);
        let ok = |url: &str| {
            let c = Config::resolve(Some(url), Some(Protocol::Grpc), &none);
            c.unwrap().unwrap().endpoint.to_string()
        };
        assert_eq!(ok("http://h:9/"), format!("http://h:9{t}"));
        assert_eq!(ok("https://h"), format!("https://h:443{t}"));
        assert_eq!(ok("http://[::1]:7"), format!("http://[::1]:7{t}"));
        assert_eq!(ok(&format!("http://h:9{t}")), format!("http://h:9{t}"));
        let e = Config::resolve(Some("http://h:4318/v1/traces"), Some(Protocol::Grpc), &none)
            .unwrap_err();
        assert!(
            e.starts_with("--otlp: ") && e.contains("'/v1/traces'"),
            "{e}"
        );
        assert!(e.contains("http://127.0.0.1:4317"), "{e}");
        // The signal's own variable is checked the same way.
        let own = env(&[
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://h:1/x"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "grpc"),
        ]);
        let e = Config::resolve(None, None, &own).unwrap_err();
        assert!(e.starts_with("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: "), "{e}");
    }
}

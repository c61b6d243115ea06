//! `cadence proxy`: flags to a `ProxyConfig`, then serve until Ctrl-C or SIGTERM,
//! draining in-flight streams and flushing the records file before exiting.

use crate::exit::{usage, Exit};
use cadence_proxy::{AlertRule, Limits, ProxyConfig, RecordsConfig};
use clap::Args;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    /// Serve /metrics (Prometheus), /stats (rolling-window JSON) and /health here.
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// Append one JSON record per request to FILE (rotated by size).
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
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub idle_timeout: Duration,
    /// Longest wait for the upstream's response headers (then 504).
    #[arg(long, default_value = "5m", value_parser = humantime::parse_duration)]
    pub upstream_header_timeout: Duration,
    /// A client must send its whole request head within this (slowloris guard).
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub header_read_timeout: Duration,
    /// Largest request head in bytes (431 beyond).
    #[arg(long, default_value_t = 65536, value_parser = clap::value_parser!(u64).range(1024..=16_777_216))]
    pub max_header_bytes: u64,
    /// A route to measure, as a path suffix, repeatable; replaces the default list
    /// (/chat/completions, /completions, /responses, /messages, /api/chat,
    /// /api/generate, /generate, /generate_stream). Other requests are forwarded only.
    #[arg(long = "measure-route", value_name = "SUFFIX")]
    pub measure_routes: Vec<String>,
    /// On shutdown, how long in-flight streams may finish.
    #[arg(long, default_value = "10s", value_parser = humantime::parse_duration)]
    pub drain_timeout: Duration,
}

fn config(args: &ProxyArgs) -> anyhow::Result<ProxyConfig> {
    let upstream =
        cadence_proxy::parse_upstream(&args.upstream).map_err(|e| usage(e.to_string()))?;
    let mut c = ProxyConfig::new(args.listen, upstream);
    c.metrics_listen = args.metrics_listen;
    c.records = args.records.clone().map(|path| RecordsConfig {
        path,
        max_bytes: args.records_max_mib << 20,
        keep: args.records_keep,
    });
    c.alerts = args
        .alerts
        .iter()
        .map(|a| a.parse::<AlertRule>())
        .collect::<Result<_, _>>()
        .map_err(|e| usage(e.to_string()))?;
    c.alert_webhook = match &args.alert_webhook {
        Some(u) => {
            if c.alerts.is_empty() {
                return Err(usage("--alert-webhook needs at least one --alert rule"));
            }
            let uri = cadence_proxy::parse_upstream(u)
                .map_err(|_| usage("--alert-webhook must be an http:// or https:// URL"))?;
            Some(uri)
        }
        None => None,
    };
    c.models = args.models.clone();
    if !args.measure_routes.is_empty() {
        c.measured_routes = args.measure_routes.clone();
    }
    c.limits = Limits {
        idle_timeout: args.idle_timeout,
        upstream_header_timeout: args.upstream_header_timeout,
        header_read_timeout: args.header_read_timeout,
        max_header_bytes: args.max_header_bytes as usize,
        drain_timeout: args.drain_timeout,
        ..Limits::default()
    };
    Ok(c)
}

/// Resolves on Ctrl-C or SIGTERM (`bench` stops on it too: what CI and Kubernetes send).
pub(crate) async fn stop_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

pub async fn run(args: ProxyArgs) -> anyhow::Result<Exit> {
    let config = config(&args)?;
    let upstream = cadence_core::secret::redact_patterns(&config.upstream.to_string());
    let proxy = cadence_proxy::spawn(config).await?;
    // The first line on stdout is the address, for scripts that started us on port 0.
    println!("listening on {}", proxy.url());
    eprintln!("cadence proxy: forwarding to {upstream}");
    if let Some(m) = proxy.metrics_addr {
        eprintln!(
            "cadence proxy: metrics on http://{m}/metrics, rolling stats on http://{m}/stats"
        );
    }
    stop_signal().await;
    eprintln!("cadence proxy: stopping; draining in-flight streams");
    let written = proxy.shutdown().await?;
    if args.records.is_some() {
        eprintln!("cadence proxy: {written} records written");
    }
    Ok(Exit::Ok)
}

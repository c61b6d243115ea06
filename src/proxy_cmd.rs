//! `cadence proxy`: flags to a `ProxyConfig`, then serve until Ctrl-C or SIGTERM,
//! draining in-flight streams and flushing the records file before exiting.

use crate::cli::ProxyArgs;
use crate::exit::{usage, Exit};
use cadence_proxy::{AlertRule, Limits, ProxyConfig, RecordsConfig, RunFacts};

/// The proxy's configuration from its flags, and its run line's facts from `argv`.
fn config(args: &ProxyArgs, argv: impl IntoIterator<Item = String>) -> anyhow::Result<ProxyConfig> {
    let upstream =
        cadence_proxy::parse_upstream(&args.upstream).map_err(|e| usage(e.to_string()))?;
    let mut c = ProxyConfig::new(args.listen, upstream);
    c.run = run_facts(&c.upstream, argv);
    c.metrics_listen = args.metrics_listen;
    c.records = args.records.clone().map(|path| RecordsConfig {
        max_bytes: args.records_max_mib << 20,
        keep: args.records_keep,
        ..RecordsConfig::new(path)
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
            let uri = cadence_proxy::parse_webhook(u)
                .map_err(|_| usage("--alert-webhook must be an http:// or https:// URL"))?;
            Some(uri)
        }
        None => None,
    };
    c.models = args.models.clone();
    c.upstream_tls = match &args.upstream_ca_file {
        Some(path) => Some(
            cadence_transport::tls::client_config(Some(path))
                .map_err(|e| usage(format!("--upstream-ca-file: {e}")))?,
        ),
        None => None,
    };
    c.timestamps = args.timestamps.into();
    if !args.measure_routes.is_empty() {
        c.measured_routes = args.measure_routes.clone();
    }
    (c.tracing, c.otlp_metrics) = cadence_proxy::Tracing::from_flags(&args.otlp.flags())?;
    c.limits = Limits {
        idle_timeout: args.idle_timeout,
        upstream_header_timeout: args.upstream_header_timeout,
        header_read_timeout: args.header_read_timeout,
        max_header_bytes: args.max_header_bytes as usize,
        body_read_timeout: args.body_read_timeout,
        max_connections: args.max_connections as usize,
        drain_timeout: args.drain_timeout,
        max_chunks: args.max_chunks,
        ..Limits::default()
    };
    Ok(c)
}

/// The records' run line as bench's is made: the upstream with its credentials and
/// query values masked (the proxy's own default), and the command line with the
/// secrets `run_meta` removes (header values, URL credentials and query values,
/// anything key-shaped).
fn run_facts(upstream: &http::Uri, argv: impl IntoIterator<Item = String>) -> RunFacts {
    RunFacts {
        command: crate::run_meta::redacted_command(argv),
        ..RunFacts::of_upstream(upstream)
    }
}

pub async fn run(args: ProxyArgs) -> anyhow::Result<Exit> {
    let config = config(&args, std::env::args())?;
    let upstream = config.run.target.clone();
    let proxy = cadence_proxy::spawn(config).await?;
    // The first line on stdout is the address, for scripts that started us on port 0.
    println!("listening on {}", proxy.url());
    eprintln!("cadence proxy: forwarding to {upstream}");
    if let Some(w) = &args.alert_webhook {
        eprintln!(
            "cadence proxy: alerts posted to {}",
            cadence_core::secret::redact_url(w)
        );
    }
    if let Some(m) = proxy.metrics_addr {
        eprintln!(
            "cadence proxy: metrics on http://{m}/metrics, rolling stats on http://{m}/stats"
        );
    }
    crate::signal::stop_signal().await;
    eprintln!("cadence proxy: stopping; draining in-flight streams");
    let stopped = proxy.stop().await;
    stopped.said().iter().for_each(|l| eprintln!("{l}"));
    let written = stopped.records?;
    if args.records.is_some() {
        eprintln!("cadence proxy: {written} records written");
    }
    Ok(Exit::Ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn parsed(extra: &[&str]) -> ProxyConfig {
        let mut argv = vec!["cadence", "proxy", "--upstream", "http://127.0.0.1:9"];
        argv.extend_from_slice(extra);
        parsed_argv(&argv)
    }

    fn parsed_argv(argv: &[&str]) -> ProxyConfig {
        let cli = crate::cli::Cli::try_parse_from(argv).unwrap();
        let crate::cli::Command::Proxy(args) = cli.command else {
            panic!("not the proxy command");
        };
        config(&args, argv.iter().map(|a| a.to_string())).unwrap()
    }

    #[test]
    fn the_run_line_carries_no_secret_of_the_arguments() {
        let argv = [
            "cadence",
            "proxy",
            "--upstream",
            "http://user:PASS1234@10.0.0.1:8000/v1",
            "--alert",
            "itl.p99>50ms for 1m",
            "--alert-webhook=https://bot:TOK5678@hooks.example/x",
            "--model",
            "sk-proj-ABCDEFGHIJKLMNOP",
        ];
        let run = parsed_argv(&argv).run;
        // The one URL redaction (cadence_base::secret::redact_url): userinfo masked.
        assert_eq!(run.target, "http://[REDACTED]@10.0.0.1:8000/v1");
        let line = run.command.join(" ");
        for secret in ["PASS1234", "TOK5678", "ABCDEFGHIJKLMNOP"] {
            assert!(!line.contains(secret), "{secret} leaked: {line}");
            assert!(
                !run.target.contains(secret),
                "{secret} leaked: {}",
                run.target
            );
        }
        assert_eq!(
            &run.command[..4],
            [
                "cadence",
                "proxy",
                "--upstream",
                "http://[REDACTED]@10.0.0.1:8000/v1"
            ],
            "{line}"
        );
        assert!(line.contains("--model"), "the rest is kept: {line}");
        // The same redaction as bench's run line.
        assert_eq!(
            run.command,
            crate::run_meta::redacted_command(argv.map(String::from))
        );
    }

    #[test]
    fn upstream_reads_are_kernel_stamped_unless_told_otherwise() {
        use cadence_transport::Timestamps;
        assert_eq!(parsed(&[]).timestamps, Timestamps::Kernel);
        assert_eq!(
            parsed(&["--timestamps", "user"]).timestamps,
            Timestamps::User
        );
    }

    #[test]
    fn max_chunks_is_benchs_ceiling_unless_told_otherwise() {
        assert_eq!(parsed(&[]).limits.max_chunks, 262_144);
        assert_eq!(
            cadence_proxy::DEFAULT_MAX_CHUNKS,
            cadence_bench::exec::DEFAULT_MAX_CHUNKS
        );
        assert_eq!(parsed(&["--max-chunks", "1000"]).limits.max_chunks, 1000);
        let cli = |n: &str| {
            crate::cli::Cli::try_parse_from([
                "cadence",
                "proxy",
                "--upstream",
                "http://127.0.0.1:9",
                "--max-chunks",
                n,
            ])
        };
        assert!(cli("0").is_err());
        assert!(cli("-1").is_err());
        assert!(cli("4294967296").is_err());
    }
}

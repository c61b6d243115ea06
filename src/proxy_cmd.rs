//! `cadence proxy`: flags to a `ProxyConfig`, then serve until Ctrl-C or SIGTERM,
//! draining in-flight streams and flushing the records file before exiting.

use crate::cli::ProxyArgs;
use crate::exit::{usage, Exit};
use cadence_proxy::{AlertRule, Limits, ProxyConfig, RecordsConfig};

fn config(args: &ProxyArgs) -> anyhow::Result<ProxyConfig> {
    let upstream =
        cadence_proxy::parse_upstream(&args.upstream).map_err(|e| usage(e.to_string()))?;
    let mut c = ProxyConfig::new(args.listen, upstream);
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
            let uri = cadence_proxy::parse_upstream(u)
                .map_err(|_| usage("--alert-webhook must be an http:// or https:// URL"))?;
            Some(uri)
        }
        None => None,
    };
    c.models = args.models.clone();
    c.timestamps = args.timestamps.into();
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
    crate::signal::stop_signal().await;
    eprintln!("cadence proxy: stopping; draining in-flight streams");
    let written = proxy.shutdown().await?;
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
        let cli = crate::cli::Cli::try_parse_from(argv).unwrap();
        let crate::cli::Command::Proxy(args) = cli.command else {
            panic!("not the proxy command");
        };
        config(&args).unwrap()
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
}

//! `--server-metrics`: scrapes the server's Prometheus endpoint every
//! `--scrape-interval` during a level, on a thread and runtime of its own so the
//! measuring threads never wait on it. Each answer is parsed and mapped to the common
//! figures by [`cadence_core::server::prometheus`]; a failed scrape is counted and
//! named, never fatal.

use cadence_core::server::{prometheus, ServerScrape};
use cadence_transport::client::{self, ClientConfig, HyperClient};
use cadence_transport::Clock;
use http::Uri;
use std::time::Duration;
use tokio::sync::{oneshot, watch};

/// Where and how often to scrape.
#[derive(Debug, Clone)]
pub struct ScrapeConfig {
    /// The metrics page.
    pub url: Uri,
    /// The URL as reports show it (secrets removed).
    pub display: String,
    /// How often to scrape (`--scrape-interval`).
    pub interval: Duration,
    /// How long one scrape may take.
    pub timeout: Duration,
    /// A private CA to trust on an https:// URL beside the public roots (`--ca-file`).
    pub ca_file: Option<std::path::PathBuf>,
}

impl ScrapeConfig {
    /// `--server-metrics URL|auto` against the run's endpoint: `auto` is the
    /// server's `/metrics` (scheme, host and port of `endpoint`).
    pub fn new(
        arg: &str,
        endpoint: &Uri,
        interval: Duration,
        timeout: Duration,
    ) -> Result<ScrapeConfig, String> {
        let url: Uri = if arg == "auto" {
            let scheme = endpoint.scheme_str().unwrap_or("http");
            let auth = endpoint.authority().map_or("", |a| a.as_str());
            let host = auth.rsplit_once('@').map_or(auth, |(_, h)| h);
            format!("{scheme}://{host}/metrics")
                .parse()
                .map_err(|e| format!("cannot make a metrics URL from the target: {e}"))?
        } else {
            arg.parse()
                .map_err(|e| format!("--server-metrics '{arg}' is not a URL: {e}"))?
        };
        if !matches!(url.scheme_str(), Some("http" | "https")) {
            return Err(format!(
                "--server-metrics '{}' needs an http:// or https:// URL, or auto",
                crate::target::redact_url(arg)
            ));
        }
        Ok(ScrapeConfig {
            display: crate::target::redact_url(&url.to_string()),
            url,
            interval,
            timeout,
            ca_file: None,
        })
    }
}

/// A level's scraper, running until [`Scraper::finish`].
pub struct Scraper {
    stop: watch::Sender<bool>,
    result: oneshot::Receiver<ServerScrape>,
}

impl Scraper {
    /// Starts scraping on its own thread, times on the run's `clock`, and returns once
    /// the first scrape is done (or has failed), so the level starts after it.
    pub async fn start(config: ScrapeConfig, clock: Clock) -> std::io::Result<Scraper> {
        let (stop, stop_rx) = watch::channel(false);
        let (tx, result) = oneshot::channel();
        let (ready_tx, ready) = oneshot::channel();
        std::thread::Builder::new()
            .name("cadence-scrape".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build();
                let scrape = match rt {
                    Ok(rt) => rt.block_on(scrape_loop(&config, clock, stop_rx, ready_tx)),
                    Err(e) => failed(&config, format!("cannot start the scraper: {e}")),
                };
                let _ = tx.send(scrape);
            })?;
        let _ = ready.await;
        Ok(Scraper { stop, result })
    }

    /// Takes one last sample (the level's end) and returns what the level gave.
    pub async fn finish(self) -> Option<ServerScrape> {
        let _ = self.stop.send(true);
        self.result.await.ok()
    }
}

fn failed(config: &ScrapeConfig, why: String) -> ServerScrape {
    let mut s = empty(config);
    s.attempts = 1;
    s.failures = 1;
    s.failure = Some(why);
    s
}

fn empty(config: &ScrapeConfig) -> ServerScrape {
    ServerScrape {
        url: config.display.clone(),
        engine: "unknown".into(),
        interval_ms: config.interval.as_secs_f64() * 1e3,
        attempts: 0,
        failures: 0,
        failure: None,
        samples: Vec::new(),
    }
}

/// Scrapes at once, then every interval (missed ticks are skipped, not bunched), and
/// once more when told to stop.
async fn scrape_loop(
    config: &ScrapeConfig,
    clock: Clock,
    mut stop: watch::Receiver<bool>,
    ready: oneshot::Sender<()>,
) -> ServerScrape {
    let http = client::build_with_ca(
        &ClientConfig {
            pool_size: 1,
            connect_timeout: config.timeout,
            http2: false,
        },
        Default::default(),
        config.ca_file.as_deref(),
    );
    let http = match http {
        Ok(http) => http,
        Err(e) => {
            let _ = ready.send(());
            return failed(config, e.to_string());
        }
    };
    let mut out = empty(config);
    let mut tick = tokio::time::interval(config.interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    tick.tick().await;
    once(&http, config, clock, &mut out).await;
    let _ = ready.send(());
    loop {
        let last = tokio::select! {
            _ = tick.tick() => false,
            _ = stop.wait_for(|s| *s) => true,
        };
        once(&http, config, clock, &mut out).await;
        if last {
            return out;
        }
    }
}

/// One scrape into `out`: a sample, or a counted failure.
async fn once(http: &HyperClient, config: &ScrapeConfig, clock: Clock, out: &mut ServerScrape) {
    out.attempts += 1;
    match fetch(http, config).await {
        Ok(text) => match prometheus::parse_text(&text) {
            Ok(series) => {
                if out.samples.is_empty() {
                    out.engine = prometheus::engine_family(&series).to_string();
                }
                out.samples
                    .push(prometheus::to_sample(&series, clock.now_ns()));
            }
            Err(e) => fail(out, format!("the answer is not Prometheus text ({e})")),
        },
        Err(e) => fail(out, e),
    }
}

fn fail(out: &mut ServerScrape, why: String) {
    out.failures += 1;
    out.failure.get_or_insert(why);
}

/// The metrics page as text, within the scrape timeout.
async fn fetch(http: &HyperClient, config: &ScrapeConfig) -> Result<String, String> {
    let mut accept = http::HeaderMap::new();
    accept.insert(
        http::header::ACCEPT,
        http::HeaderValue::from_static(
            "text/plain; version=0.0.4, application/openmetrics-text;q=0.5",
        ),
    );
    let body = cadence_transport::get::get(
        http,
        &config.url,
        &accept,
        config.timeout,
        cadence_transport::get::MAX_BODY,
    )
    .await
    .map_err(|e| e.to_string())?;
    String::from_utf8(Vec::from(body)).map_err(|_| "the answer is not UTF-8 text".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn auto_is_the_servers_metrics_path() {
        let endpoint: Uri = "http://user:pw@127.0.0.1:8000/v1/chat/completions"
            .parse()
            .unwrap();
        let c = ScrapeConfig::new(
            "auto",
            &endpoint,
            Duration::from_secs(1),
            Duration::from_secs(1),
        )
        .unwrap();
        assert_eq!(c.url.to_string(), "http://127.0.0.1:8000/metrics");
        let c = ScrapeConfig::new(
            "http://h:9/m?token=abc",
            &endpoint,
            Duration::from_secs(1),
            Duration::from_secs(1),
        )
        .unwrap();
        assert!(!c.display.contains("abc"), "{}", c.display);
        assert!(ScrapeConfig::new(
            "ftp://h/m",
            &endpoint,
            Duration::from_secs(1),
            Duration::from_secs(1)
        )
        .is_err());
    }
}

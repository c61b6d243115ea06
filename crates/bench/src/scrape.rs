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

/// One scrape into `out`: a sample, or a counted failure. The sample is stamped when
/// its page was asked for: the server renders it between the ask and the answer, so
/// what a sample counts happened no later than the answer, and anything that happened
/// before its stamp is in it. Stamped at the answer instead, a page rendered just
/// before a request's first token left (and its KV transfer was counted) and read just
/// after the client got that token looked like a reading taken after the token, and
/// the stall attribution missed the transfer.
async fn once(http: &HyperClient, config: &ScrapeConfig, clock: Clock, out: &mut ServerScrape) {
    out.attempts += 1;
    let asked = clock.now_ns();
    match fetch(http, config).await {
        Ok(text) => match prometheus::parse_text(&text) {
            Ok(series) => {
                if out.samples.is_empty() {
                    out.engine = prometheus::engine_family(&series).to_string();
                }
                out.samples.push(prometheus::to_sample(&series, asked));
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

    /// A metrics page on 127.0.0.1 that answers each request `delay` after it came.
    async fn slow_page(delay: Duration) -> String {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/metrics", listener.local_addr().unwrap());
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let mut buf = [0u8; 4096];
                    let mut seen = Vec::new();
                    while let Ok(n @ 1..) = conn.read(&mut buf).await {
                        seen.extend_from_slice(&buf[..n]);
                        if seen.windows(4).any(|w| w == b"\r\n\r\n") {
                            tokio::time::sleep(delay).await;
                            let body = "vllm:num_requests_running 1\n";
                            let head = format!(
                                "HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: {}\r\n\r\n",
                                body.len()
                            );
                            let _ = conn.write_all(head.as_bytes()).await;
                            let _ = conn.write_all(body.as_bytes()).await;
                            seen.clear();
                        }
                    }
                });
            }
        });
        url
    }

    /// A sample is stamped when its page was asked for, not when it arrived: against a
    /// page that answers 1 s after each ask, the first sample's stamp is well before
    /// the answer (a tolerant bound: the ask comes as the scraper starts).
    #[tokio::test]
    async fn a_sample_is_stamped_when_its_page_was_asked_for() {
        let delay = Duration::from_secs(1);
        let url = slow_page(delay).await;
        let endpoint: Uri = "http://127.0.0.1:1/v1".parse().unwrap();
        let config = ScrapeConfig::new(
            &url,
            &endpoint,
            Duration::from_secs(60),
            Duration::from_secs(10),
        )
        .unwrap();
        let clock = Clock::start();
        let scraper = Scraper::start(config, clock).await.unwrap();
        let first_arrived = clock.now_ns();
        let scrape = scraper.finish().await.unwrap();
        assert_eq!(scrape.samples.len(), 2, "{scrape:?}");
        let first = scrape.samples[0].t_ns;
        assert!(first_arrived >= delay.as_nanos() as u64, "{first_arrived}");
        assert!(
            first + 800_000_000 < first_arrived,
            "stamped at {first} ns, the answer came by {first_arrived} ns"
        );
        // The last sample, asked for as the scraper was told to stop.
        assert!(scrape.samples[1].t_ns < first_arrived + 800_000_000);
    }

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

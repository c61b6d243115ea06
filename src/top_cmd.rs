//! `cadence top URL`: the dashboard of a running `cadence proxy`, read from its `/stats`
//! every `--interval`. On a terminal it draws until `q`; with `--once` or a pipe it
//! prints one frame as text.

use crate::cli::TopArgs;
use crate::exit::{usage, Exit};
use anyhow::Context;
use cadence_transport::client::{self, ClientConfig, HyperClient};
use cadence_transport::get::get;
use cadence_tui::term::{self, Feed};
use cadence_tui::top::History;
use cadence_tui::View;
use std::io::IsTerminal;
use std::time::{Duration, Instant};

/// The largest `/stats` document read: a proxy's is a few KiB (FAULTS 120).
const MAX_STATS_BYTES: usize = 1 << 20;

/// How long one read of `/stats` may take.
const FETCH_TIMEOUT: Duration = Duration::from_secs(5);

pub async fn run(args: TopArgs) -> anyhow::Result<Exit> {
    let url = stats_url(&args.url).map_err(usage)?;
    let http = client::build(&ClientConfig {
        pool_size: 1,
        connect_timeout: Duration::from_secs(2),
        http2: false,
    });
    let mut history = History::default();
    if args.once || !std::io::stdout().is_terminal() {
        let doc = fetch(&http, &url).await?;
        let view = cadence_tui::top::view(&doc, &args.url, &mut history)
            .map_err(|e| anyhow::anyhow!("{url}: {e}"))?;
        crate::output::print_stdout(&cadence_tui::frame_text(&view, args.width, args.height))?;
        return Ok(Exit::Ok);
    }
    let mut feed = TopFeed {
        http,
        url,
        name: args.url.clone(),
        interval: args.interval,
        runtime: tokio::runtime::Handle::current(),
        history,
        last: None,
        view: View::default(),
        quit: false,
    };
    tokio::task::spawn_blocking(move || term::run(&mut feed))
        .await
        .context("the dashboard thread")??;
    Ok(Exit::Ok)
}

/// `/stats` under the address given (a URL already ending in `/stats` is kept).
pub fn stats_url(base: &str) -> Result<http::Uri, String> {
    let trimmed = base.trim_end_matches('/');
    let full = if trimmed.ends_with("/stats") {
        trimmed.to_string()
    } else {
        format!("{trimmed}/stats")
    };
    let uri: http::Uri = full
        .parse()
        .map_err(|e| format!("'{base}' is not a URL: {e}"))?;
    match uri.scheme_str() {
        Some("http") | Some("https") => Ok(uri),
        _ => Err(format!(
            "'{base}' is not an http(s) URL: give the proxy's --metrics-listen address, e.g. http://127.0.0.1:9464"
        )),
    }
}

async fn fetch(http: &HyperClient, url: &http::Uri) -> anyhow::Result<serde_json::Value> {
    let read = async {
        let body = get(
            http,
            url,
            &http::HeaderMap::new(),
            FETCH_TIMEOUT,
            MAX_STATS_BYTES,
        )
        .await
        // The error's words already hold its cause: as a message, not a chain that
        // would print the cause again after it.
        .map_err(|e| anyhow::anyhow!("{e}"))?;
        serde_json::from_slice(&body).context("the answer is not JSON")
    };
    read.await.with_context(|| format!("cannot read {url}"))
}

struct TopFeed {
    http: HyperClient,
    url: http::Uri,
    name: String,
    interval: Duration,
    runtime: tokio::runtime::Handle,
    history: History,
    last: Option<Instant>,
    view: View,
    quit: bool,
}

impl Feed for TopFeed {
    /// A new read every interval; in between, the last view. A failed read keeps the
    /// last figures and says why.
    fn view(&mut self) -> View {
        if self.last.is_some_and(|t| t.elapsed() < self.interval) {
            return self.view.clone();
        }
        self.last = Some(Instant::now());
        let read = self
            .runtime
            .block_on(fetch(&self.http, &self.url))
            .map_err(|e| format!("{e:#}"))
            .and_then(|doc| cadence_tui::top::view(&doc, &self.name, &mut self.history));
        match read {
            Ok(v) => self.view = v,
            Err(e) => {
                if self.view.title.is_empty() {
                    self.view.mode = cadence_tui::Mode::Top;
                    self.view.title = format!("cadence top · {}", self.name);
                }
                self.view.notice = Some(e);
            }
        }
        self.view.clone()
    }

    fn done(&self) -> bool {
        self.quit
    }

    fn quit(&mut self) {
        self.quit = true;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_stats_path_is_added_once() {
        for base in [
            "http://127.0.0.1:9464",
            "http://127.0.0.1:9464/",
            "http://127.0.0.1:9464/stats",
        ] {
            assert_eq!(
                stats_url(base).unwrap().to_string(),
                "http://127.0.0.1:9464/stats"
            );
        }
        assert!(stats_url("127.0.0.1:9464").is_err());
        assert!(stats_url("not a url").is_err());
    }
}

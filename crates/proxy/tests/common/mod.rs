//! Shared test helpers: a sim upstream, a proxy in front of it, and a client that keeps
//! every byte it received even when the body ends in an error.
#![allow(dead_code)]

use bytes::Bytes;
use cadence_proxy::{Proxy, ProxyConfig, RecordsConfig};
use cadence_sim::{Dist, SimConfig, SimServer};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::TokioExecutor;
use std::time::Duration;

pub const LOCAL: &str = "127.0.0.1:0";

/// A fast, seeded sim: 2 ms TTFT, 1 ms ITL.
pub fn fast_sim_config() -> SimConfig {
    SimConfig {
        seed: 7,
        ttft: Dist::Fixed(Duration::from_millis(2)),
        itl: Dist::Fixed(Duration::from_millis(1)),
        ..SimConfig::default()
    }
}

pub async fn sim(config: SimConfig) -> SimServer {
    cadence_sim::spawn(config, LOCAL.parse().unwrap())
        .await
        .unwrap()
}

pub async fn proxy(upstream: &str, tweak: impl FnOnce(&mut ProxyConfig)) -> Proxy {
    let mut c = ProxyConfig::new(
        LOCAL.parse().unwrap(),
        cadence_proxy::parse_upstream(upstream).unwrap(),
    );
    c.metrics_listen = Some(LOCAL.parse().unwrap());
    tweak(&mut c);
    cadence_proxy::spawn(c).await.unwrap()
}

/// What a client got.
#[derive(Debug, Clone)]
pub struct Fetched {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
    /// The body ended with an error (after `body` bytes).
    pub error: Option<String>,
}

impl Fetched {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub type TestClient = Client<HttpConnector, Full<Bytes>>;

pub fn client() -> TestClient {
    Client::builder(TokioExecutor::new()).build(HttpConnector::new())
}

/// A client that opens a connection per request, for proxies with a short header
/// timeout (which also closes idle keep-alive connections).
pub fn client_without_pool() -> TestClient {
    Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build(HttpConnector::new())
}

pub async fn fetch(
    client: &TestClient,
    method: &str,
    url: &str,
    headers: &[(&str, &str)],
    body: &str,
) -> Fetched {
    let mut b = http::Request::builder().method(method).uri(url);
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    let req = b.body(Full::new(Bytes::from(body.to_string()))).unwrap();
    let resp = client.request(req).await.expect("response headers");
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let mut body = resp.into_body();
    let mut bytes = Vec::new();
    let mut error = None;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                if let Some(d) = f.data_ref() {
                    bytes.extend_from_slice(d);
                }
            }
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    Fetched {
        status,
        headers,
        body: bytes,
        error,
    }
}

pub fn chat_body(max_tokens: u32, stream: bool) -> String {
    format!(
        r#"{{"model":"cadence-sim","messages":[{{"role":"user","content":"hello there"}}],"max_tokens":{max_tokens},"stream":{stream},"stream_options":{{"include_usage":true}}}}"#
    )
}

pub fn completions_body(max_tokens: u32) -> String {
    format!(
        r#"{{"model":"cadence-sim","prompt":"hello there","max_tokens":{max_tokens},"stream":true}}"#
    )
}

pub async fn get_text(url: &str) -> String {
    let f = fetch(&client(), "GET", url, &[], "").await;
    assert_eq!(f.status, 200, "{url}: {}", f.text());
    f.text()
}

/// Polls until `f` is true or `timeout` passes.
pub async fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let end = tokio::time::Instant::now() + timeout;
    loop {
        if f() {
            return true;
        }
        if tokio::time::Instant::now() >= end {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// A records file `dir/name` large enough never to rotate in a test, keeping `keep`
/// rotated files.
pub fn records_in(dir: &std::path::Path, name: &str, keep: u32) -> RecordsConfig {
    RecordsConfig {
        max_bytes: 64 << 20,
        keep,
        ..RecordsConfig::new(dir.join(name))
    }
}

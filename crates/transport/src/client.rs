//! The HTTP client: for plain `http://` HTTP/1.1, the lean client read in the request's
//! own task ([`crate::h1`], keep-alive, idle connections kept up to the concurrency);
//! otherwise hyper 1.x over HTTP/1.1 keep-alive (a pool sized to the concurrency) or
//! HTTP/2, TLS through rustls with the webpki roots (and a private CA's, [`crate::tls`]).

use crate::reuse::{mark_answered, Tagging};
use crate::rxstamp::{Stamping, Timestamps};
use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::{connect::HttpConnector, Client, Error};
use hyper_util::rt::{TokioExecutor, TokioTimer};
use std::sync::Arc;
use std::time::Duration;

type Pool = Client<Tagging<HttpsConnector<Stamping<HttpConnector>>>, Full<Bytes>>;

/// The shared client: a keep-alive pool, and beside it one that keeps no idle
/// connection, for the single resend after a stale pooled connection. That resend must
/// not draw from the same pool: a server that closes every connection after its
/// response (llama.cpp's does) leaves the pool full of dead ones.
#[derive(Clone, Debug)]
pub struct HyperClient {
    pooled: Pool,
    fresh: Pool,
    /// The lean HTTP/1.1 client for `http://` (none when speaking HTTP/2 only).
    h1: Option<crate::h1::Pool>,
    http2: bool,
    /// The clock its connections stamp reads with, for sockets opened beside it
    /// (the WebSocket path).
    timestamps: Timestamps,
    /// Its TLS configuration (the roots it trusts; no ALPN), for sockets opened beside
    /// it (`wss://`).
    tls: Arc<crate::tls::TlsConfig>,
}

impl HyperClient {
    /// Sends on a pooled keep-alive connection (or a new one when none is idle). A
    /// connection that answers counts as used, so a later failure on it is known to be
    /// on a reused connection (see [`crate::resend`]).
    pub async fn request(
        &self,
        req: http::Request<Full<Bytes>>,
    ) -> Result<http::Response<Incoming>, Error> {
        let response = self.pooled.request(req).await?;
        mark_answered(&response);
        Ok(response)
    }

    /// The lean HTTP/1.1 client, when `uri` is plain `http://` and HTTP/2 is not asked
    /// for; `None` means hyper's pooled client ([`HyperClient::request`]).
    pub fn h1_for(&self, uri: &http::Uri) -> Option<&crate::h1::Pool> {
        self.h1
            .as_ref()
            .filter(|_| uri.scheme() == Some(&http::uri::Scheme::HTTP))
    }

    /// Whether it speaks HTTP/2 only (`--http2`).
    pub fn is_http2(&self) -> bool {
        self.http2
    }

    /// The clock its reads are stamped with (`--timestamps`).
    pub fn timestamps(&self) -> Timestamps {
        self.timestamps
    }

    /// The TLS configuration its `https://` connections use (no ALPN set), for a
    /// socket opened beside it (`wss://`).
    pub fn tls(&self) -> Arc<crate::tls::TlsConfig> {
        self.tls.clone()
    }

    /// Sends on a connection opened for this request alone.
    pub async fn request_fresh(
        &self,
        req: http::Request<Full<Bytes>>,
    ) -> Result<http::Response<Incoming>, Error> {
        self.fresh.request(req).await
    }
}

/// How to connect.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// Idle connections kept per host; the run's concurrency.
    pub pool_size: usize,
    /// How long establishing a TCP connection may take before it fails.
    pub connect_timeout: Duration,
    /// Speak HTTP/2 only (h2c prior knowledge on http://, ALPN on https://).
    pub http2: bool,
}

/// Builds the shared client; its reads carry kernel receive stamps where the platform
/// gives them ([`build_with`] to choose).
pub fn build(config: &ClientConfig) -> HyperClient {
    build_with(config, Timestamps::default())
}

/// Builds the shared client, its connections stamping reads as `timestamps` says
/// (every response carries its connection's [`crate::RxStamps`] in its extensions).
pub fn build_with(config: &ClientConfig, timestamps: Timestamps) -> HyperClient {
    let tls = crate::tls::client_config(None).expect("no CA file to read");
    build_with_tls(config, timestamps, tls)
}

/// [`build_with`], trusting the certificates of `ca_file` (PEM) beside the public
/// roots on `https://`: an endpoint behind a private CA.
pub fn build_with_ca(
    config: &ClientConfig,
    timestamps: Timestamps,
    ca_file: Option<&std::path::Path>,
) -> Result<HyperClient, crate::tls::CaError> {
    Ok(build_with_tls(
        config,
        timestamps,
        crate::tls::client_config(ca_file)?,
    ))
}

/// [`build_with`] on a TLS configuration made before ([`crate::tls::client_config`]).
pub fn build_with_tls(
    config: &ClientConfig,
    timestamps: Timestamps,
    tls: crate::tls::TlsConfig,
) -> HyperClient {
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(config.connect_timeout));
    http.set_nodelay(true);
    http.enforce_http(false);
    let shared = Arc::new(tls.clone());
    let builder = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http();
    let https = Tagging(if config.http2 {
        builder
            .enable_http2()
            .wrap_connector(Stamping::new(http, timestamps))
    } else {
        builder
            .enable_http1()
            .enable_http2()
            .wrap_connector(Stamping::new(http, timestamps))
    });
    let client = |idle: usize| {
        Client::builder(TokioExecutor::new())
            .pool_max_idle_per_host(idle)
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_timer(TokioTimer::new())
            .timer(TokioTimer::new())
            .http2_only(config.http2)
            .build(https.clone())
    };
    HyperClient {
        pooled: client(config.pool_size),
        fresh: client(0),
        h1: (!config.http2).then(|| {
            crate::h1::Pool::with_timestamps(config.pool_size, config.connect_timeout, timestamps)
        }),
        http2: config.http2,
        timestamps,
        tls: shared,
    }
}

/// Parses `--header 'Name: value'`.
pub fn parse_header(s: &str) -> Result<(HeaderName, HeaderValue), String> {
    let (name, value) = s.split_once(':').ok_or_else(|| {
        format!(
            "--header must look like 'Name: value', got '{}'",
            header_name_only(s)
        )
    })?;
    let name = HeaderName::from_bytes(name.trim().as_bytes())
        .map_err(|_| format!("'{}' is not a valid header name", name.trim()))?;
    let mut value = HeaderValue::from_str(value.trim()).map_err(|_| {
        format!("the value of header '{name}' has characters a header cannot carry")
    })?;
    value.set_sensitive(true);
    Ok((name, value))
}

/// The name part of a header argument, for messages and recorded command lines
/// (the value may be a secret).
pub fn header_name_only(s: &str) -> String {
    s.split_once(':')
        .map_or("<unnamed>", |(n, _)| n.trim())
        .to_string()
}

/// The Messages API takes its key in `x-api-key`, not `Authorization`, and wants an
/// `anthropic-version`: [`base_headers`] adjusted for it (either header can still be
/// set among `extra`, the user's own).
pub fn anthropic_headers(
    headers: &mut HeaderMap,
    api_key: Option<&str>,
    extra: &[(HeaderName, HeaderValue)],
) {
    let given = |name: &str| extra.iter().any(|(n, _)| n == name);
    if let Some(key) = api_key.filter(|_| !given("authorization")) {
        headers.remove(http::header::AUTHORIZATION);
        if let Ok(mut v) = HeaderValue::from_str(key) {
            v.set_sensitive(true);
            headers.insert("x-api-key", v);
        }
    }
    if !given("anthropic-version") {
        headers.insert("anthropic-version", HeaderValue::from_static("2023-06-01"));
    }
}

/// Headers every request carries: JSON content type, the bearer token when given, and
/// the user's own headers (which win).
pub fn base_headers(
    api_key: Option<&str>,
    extra: &[(HeaderName, HeaderValue)],
) -> Result<HeaderMap, String> {
    let mut h = HeaderMap::new();
    h.insert(
        http::header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(
        http::header::ACCEPT,
        HeaderValue::from_static("text/event-stream, application/x-ndjson, application/json"),
    );
    h.insert(
        http::header::USER_AGENT,
        HeaderValue::from_static(concat!("cadence/", env!("CARGO_PKG_VERSION"))),
    );
    if let Some(key) = api_key {
        let mut v = HeaderValue::from_str(&format!("Bearer {key}"))
            .map_err(|_| "the API key has characters a header cannot carry".to_string())?;
        v.set_sensitive(true);
        h.insert(http::header::AUTHORIZATION, v);
    }
    for (n, v) in extra {
        h.insert(n.clone(), v.clone());
    }
    Ok(h)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_parsing() {
        let (n, v) = parse_header("X-Test:  abc ").unwrap();
        assert_eq!(n.as_str(), "x-test");
        assert_eq!(v.to_str().unwrap(), "abc");
        assert!(v.is_sensitive());
        let err = parse_header("novalue-secret").unwrap_err();
        assert!(
            !err.contains("secret") || err.contains("<unnamed>"),
            "{err}"
        );
        assert!(parse_header("bad name: x").is_err());
    }

    #[test]
    fn bearer_is_sensitive_and_user_headers_win() {
        let extra = vec![parse_header("content-type: application/foo").unwrap()];
        let h = base_headers(Some("k-123"), &extra).unwrap();
        assert!(h[http::header::AUTHORIZATION].is_sensitive());
        assert_eq!(h[http::header::CONTENT_TYPE], "application/foo");
    }
}

//! One HTTP exchange for the side requests of a run (a GET of the server's model list,
//! its metrics page or a proxy's `/stats`; a JSON POST to an alert webhook): one
//! deadline over the whole exchange, a cap on the body and any status but 2xx an
//! error, so no side request can hang a command or fill its memory, whoever answers.

use crate::classify::{error_chain, unreachable, Unreachable};
use crate::client::HyperClient;
use bytes::Bytes;
use http::{HeaderMap, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use std::time::Duration;

/// The largest body the binary's side requests read: 16 MiB, far above a metrics page
/// (~100 KB for vLLM), a model list or a proxy's `/stats`.
pub const MAX_BODY: usize = 16 << 20;

/// How long an alert webhook may take to take a POST (the proxy's and the watcher's).
pub const WEBHOOK_TIMEOUT: Duration = Duration::from_secs(10);

/// Why a GET gave no body.
#[derive(Debug)]
pub enum GetError {
    /// Nothing could be connected to at the URL's address.
    Unreachable(Unreachable),
    /// The request failed otherwise (TLS, a reset, a malformed answer): the error chain.
    Failed(String),
    /// No whole answer (head and body) within the timeout.
    Timeout(Duration),
    /// The status was not 2xx; the body is not read.
    Status(StatusCode),
    /// The body is larger than the cap (in bytes); reading stopped there.
    TooLarge(usize),
    /// The body broke off before its end.
    Body(String),
}

impl std::fmt::Display for GetError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            GetError::Unreachable(u) => u.fmt(f),
            GetError::Failed(chain) => f.write_str(chain),
            GetError::Timeout(d) => write!(f, "no answer within {d:?}"),
            GetError::Status(s) => write!(f, "HTTP {s}"),
            GetError::TooLarge(cap) => write!(f, "the answer is larger than {cap} bytes"),
            GetError::Body(chain) => write!(f, "reading the answer: {chain}"),
        }
    }
}

/// No source: each variant's text already says its cause (an unreachable target's
/// address and why), so a chain (anyhow's `{:#}`) would say it twice.
impl std::error::Error for GetError {}

/// GETs `url` with `headers` on `http`'s pooled client and returns the body: within
/// `timeout` from the call to the body's last byte, at most `max_body` bytes, and only
/// for a 2xx status.
pub async fn get(
    http: &HyperClient,
    url: &Uri,
    headers: &HeaderMap,
    timeout: Duration,
    max_body: usize,
) -> Result<Bytes, GetError> {
    let mut req = http::Request::get(url.clone())
        .body(Full::new(Bytes::new()))
        .map_err(|e| GetError::Failed(e.to_string()))?;
    req.headers_mut()
        .extend(headers.iter().map(|(k, v)| (k.clone(), v.clone())));
    exchange(http, req, url, timeout, max_body).await
}

/// POSTs `body` as JSON to `url` (an alert webhook), under the same rules as [`get`];
/// the answer's body (at most 64 KiB) is read and dropped.
pub async fn post_json(
    http: &HyperClient,
    url: &Uri,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(), GetError> {
    post_json_with(http, url, &HeaderMap::new(), body, timeout).await
}

/// [`post_json`] with `headers` besides (a webhook's `Authorization`).
pub async fn post_json_with(
    http: &HyperClient,
    url: &Uri,
    headers: &HeaderMap,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<(), GetError> {
    post_with(http, url, headers, "application/json", body, timeout)
        .await
        .map(drop)
}

/// POSTs `body` of `content_type` to `url` with `headers` (an OTLP export), under the
/// same rules as [`get`]; the answer's body (at most 64 KiB) is returned.
pub async fn post_with(
    http: &HyperClient,
    url: &Uri,
    headers: &HeaderMap,
    content_type: &'static str,
    body: Vec<u8>,
    timeout: Duration,
) -> Result<Bytes, GetError> {
    let mut req = http::Request::post(url.clone())
        .header(http::header::CONTENT_TYPE, content_type)
        .body(Full::new(Bytes::from(body)))
        .map_err(|e| GetError::Failed(e.to_string()))?;
    req.headers_mut()
        .extend(headers.iter().map(|(k, v)| (k.clone(), v.clone())));
    exchange(http, req, url, timeout, 64 << 10).await
}

/// [`post_json`] in the background with [`WEBHOOK_TIMEOUT`] (an alert or incident
/// webhook: the caller never waits on it); a failure reaches `on_error` in words with
/// any secret in them redacted.
pub fn post_json_in_background(
    http: &HyperClient,
    url: &Uri,
    body: Vec<u8>,
    on_error: impl FnOnce(String) + Send + 'static,
) {
    let (http, url) = (http.clone(), url.clone());
    tokio::spawn(async move {
        if let Err(e) = post_json(&http, &url, body, WEBHOOK_TIMEOUT).await {
            on_error(cadence_base::secret::redact_patterns(&e.to_string()));
        }
    });
}

/// Sends `req` and reads its answer's body within `timeout`, at most `max_body` bytes,
/// only for a 2xx status.
async fn exchange(
    http: &HyperClient,
    req: http::Request<Full<Bytes>>,
    url: &Uri,
    timeout: Duration,
    max_body: usize,
) -> Result<Bytes, GetError> {
    let work = async {
        let resp = http
            .request(req)
            .await
            .map_err(|e| match unreachable(&e, url) {
                Some(u) => GetError::Unreachable(u),
                None => GetError::Failed(error_chain(&e)),
            })?;
        if !resp.status().is_success() {
            return Err(GetError::Status(resp.status()));
        }
        let declared = resp
            .headers()
            .get(http::header::CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
        if declared.is_some_and(|n| n > max_body as u64) {
            return Err(GetError::TooLarge(max_body));
        }
        let mut body = resp.into_body();
        let mut out = Vec::new();
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| GetError::Body(error_chain(&e)))?;
            if let Ok(data) = frame.into_data() {
                if out.len() + data.len() > max_body {
                    return Err(GetError::TooLarge(max_body));
                }
                out.extend_from_slice(&data);
            }
        }
        Ok(Bytes::from(out))
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| GetError::Timeout(timeout))?
}

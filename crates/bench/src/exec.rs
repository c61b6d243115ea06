//! Runs one streaming request and fills its record: the timestamp of each body read is
//! taken the moment hyper hands over the bytes, before any parsing; every way a request
//! can end (timeouts per phase, HTTP errors, resets, the run's deadline) has its outcome.

use crate::clock::Clock;
use crate::secret::Redactor;
use bytes::Bytes;
use cadence_core::{Outcome, RequestRecord};
use cadence_wire::{Api, Flow, Framing, StreamText, StreamTracker, TrackerConfig};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use std::time::Duration;
use tokio::sync::watch;
use tokio::time::{sleep_until, Instant};

use crate::client::HyperClient;

/// One timeout per phase, each its own outcome (FAULTS 27–30).
#[derive(Debug, Clone, Copy)]
pub struct Timeouts {
    /// TCP (and TLS) connect; enforced by the connector.
    pub connect: Duration,
    /// From send to the response headers.
    pub header: Duration,
    /// From send to the first output chunk.
    pub first_token: Duration,
    /// Longest silence between body reads once output has started.
    pub idle: Duration,
    /// The whole request.
    pub total: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(10),
            header: Duration::from_secs(60),
            first_token: Duration::from_secs(120),
            idle: Duration::from_secs(60),
            total: Duration::from_secs(600),
        }
    }
}

/// A run-wide "stop now" signal: in-flight requests end as `aborted_at_deadline`,
/// keeping what they received.
#[derive(Debug, Clone)]
pub struct Cancel(watch::Receiver<bool>);

impl Cancel {
    pub fn new() -> (watch::Sender<bool>, Cancel) {
        let (tx, rx) = watch::channel(false);
        (tx, Cancel(rx))
    }

    pub fn is_cancelled(&self) -> bool {
        *self.0.borrow()
    }

    pub async fn cancelled(&mut self) {
        // An error means the sender is gone, which also means stop.
        let _ = self.0.wait_for(|c| *c).await;
    }
}

/// What the executor needs besides the request.
pub struct ExecContext<'a> {
    pub client: &'a HyperClient,
    pub clock: &'a Clock,
    pub timeouts: &'a Timeouts,
    pub api: Api,
    pub strict: bool,
    pub redactor: &'a Redactor,
}

/// The first bytes of a non-stream body kept for the report (FAULTS 26).
const DETAIL_BYTES: usize = 1024;

/// Sends `req` and streams its response into `rec`. `rec` arrives with identity fields
/// (index, level, worker, warm-up, scheduled) set; this sets the times, chunks, tokens,
/// status and outcome. Always returns with `rec.outcome` and `rec.end_ns` decided, and
/// gives back the output text so a tokenizer can count it after the stream.
pub async fn execute(
    cx: &ExecContext<'_>,
    req: http::Request<Full<Bytes>>,
    cancel: &mut Cancel,
    rec: &mut RequestRecord,
) -> StreamText {
    let sent_at = Instant::now();
    rec.sent_ns = Some(cx.clock.ns_at(sent_at));
    let total_deadline = sent_at + cx.timeouts.total;
    let header_deadline = (sent_at + cx.timeouts.header).min(total_deadline);
    let header_outcome = if header_deadline == total_deadline {
        Outcome::TotalTimeout
    } else {
        Outcome::HeaderTimeout
    };

    let send = send_resending_if_stale(cx.client, req);
    let (response, resent) = tokio::select! {
        biased;
        _ = cancel.cancelled() => return end(cx, rec, Outcome::AbortedAtDeadline, Some("run ended before the response headers".into())),
        _ = sleep_until(header_deadline) => {
            let msg = format!("no response headers within {:?}", header_deadline - sent_at);
            return end(cx, rec, header_outcome, Some(msg));
        }
        r = send => r,
    };
    if let Some(t) = resent {
        rec.sent_ns = Some(cx.clock.ns_at(t));
        rec.counters.stale_connection_retries += 1;
    }
    let response = match response {
        Ok(r) => r,
        Err(e) => {
            let (outcome, mut msg) = classify_client_error(&e);
            if cx.client.is_http2() && outcome == Outcome::TransportError {
                msg = format!("{H2_HINT} ({msg})");
            }
            return end(cx, rec, outcome, Some(msg));
        }
    };
    rec.headers_ns = Some(cx.clock.now_ns());
    let status = response.status();
    rec.http_status = Some(status.as_u16());

    if !status.is_success() {
        let retry_after = response
            .headers()
            .get(http::header::RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let body = read_prefix(
            response.into_body(),
            DETAIL_BYTES,
            header_deadline.max(Instant::now() + Duration::from_secs(2)),
        )
        .await;
        let mut msg = format!("HTTP {status}");
        if let Some(ra) = retry_after {
            msg.push_str(&format!(" (Retry-After: {ra})"));
        }
        if !body.is_empty() {
            msg.push_str(": ");
            msg.push_str(&body);
        }
        return end(cx, rec, Outcome::from_status(status.as_u16()), Some(msg));
    }

    let content_type = response
        .headers()
        .get(http::header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_ascii_lowercase();
    let Some(framing) = framing_for(&content_type) else {
        let body = read_prefix(
            response.into_body(),
            DETAIL_BYTES,
            Instant::now() + Duration::from_secs(2),
        )
        .await;
        let msg = format!(
            "HTTP 200 with content type '{content_type}', not a stream; body begins: {body}"
        );
        return end(cx, rec, Outcome::ProtocolMismatch, Some(msg));
    };
    if let Some(msg) = compressed(response.headers()) {
        return end(cx, rec, Outcome::ProtocolMismatch, Some(msg));
    }

    let mut tracker = StreamTracker::new(TrackerConfig {
        api: cx.api,
        framing,
        strict: cx.strict,
    });
    let mut body = response.into_body();
    let first_token_deadline = (sent_at + cx.timeouts.first_token).min(total_deadline);
    let mut last_read = Instant::now();
    let timer = tokio::time::sleep_until(first_token_deadline);
    tokio::pin!(timer);

    loop {
        // The next deadline: first token, then the idle gap, never past the total.
        let (deadline, outcome) = if tracker.has_output() {
            (
                (last_read + cx.timeouts.idle).min(total_deadline),
                Outcome::IdleTimeout,
            )
        } else {
            (first_token_deadline, Outcome::TtftTimeout)
        };
        let outcome = if deadline == total_deadline {
            Outcome::TotalTimeout
        } else {
            outcome
        };
        // The idle deadline moves with every read; re-arming the timer per chunk would
        // put a timer-wheel update on the hot path. It is moved earlier here when the
        // phase changes, and later only when it fires too soon (below).
        if deadline < timer.deadline() {
            timer.as_mut().reset(deadline);
        }
        tokio::select! {
            biased;
            frame = body.frame() => {
                // Timestamp first: nothing may sit between the read and the clock.
                let now = Instant::now();
                let t = cx.clock.ns_at(now);
                match frame {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            if data.is_empty() {
                                continue;
                            }
                            last_read = now;
                            if tracker.feed(t, &data, rec) == Flow::Stop {
                                rec.end_ns = Some(t);
                                break;
                            }
                        }
                    }
                    Some(Err(e)) => {
                        tracker.finish(t, rec);
                        if rec.outcome == Outcome::Truncated {
                            rec.error = Some(format!("the connection ended mid-stream: {}", error_chain(&e)));
                        }
                        break;
                    }
                    None => {
                        tracker.finish(t, rec);
                        if rec.outcome == Outcome::Truncated && rec.error.is_none() {
                            rec.error = Some("the stream ended without [DONE] or a finish reason".into());
                        }
                        break;
                    }
                }
            }
            _ = cancel.cancelled() => {
                let t = cx.clock.now_ns();
                if tracker.is_done() {
                    tracker.finish(t, rec);
                } else {
                    rec.outcome = Outcome::AbortedAtDeadline;
                    rec.end_ns = Some(t);
                    rec.error = Some("run ended while the stream was in flight".into());
                }
                break;
            }
            _ = &mut timer => {
                if Instant::now() < deadline {
                    // Bytes arrived since the timer was armed: not idle yet.
                    timer.as_mut().reset(deadline);
                    continue;
                }
                let t = cx.clock.now_ns();
                if tracker.is_done() {
                    // The stream said [DONE] but the connection stayed open: done is done.
                    tracker.finish(t, rec);
                } else {
                    rec.outcome = outcome;
                    rec.end_ns = Some(t);
                    rec.error = Some(match outcome {
                        Outcome::TtftTimeout => format!("no output token within {:?} of sending", cx.timeouts.first_token),
                        Outcome::IdleTimeout => format!("no bytes for {:?} after output started", cx.timeouts.idle),
                        _ => format!("request exceeded the total timeout of {:?}", cx.timeouts.total),
                    });
                }
                break;
            }
        }
    }
    if let Some(e) = rec.error.take() {
        rec.error = Some(cx.redactor.redact(&e));
    }
    tracker.take_text()
}

fn end(
    cx: &ExecContext<'_>,
    rec: &mut RequestRecord,
    outcome: Outcome,
    error: Option<String>,
) -> StreamText {
    rec.outcome = outcome;
    rec.end_ns = Some(cx.clock.now_ns());
    rec.error = error.map(|e| cx.redactor.redact(&e));
    StreamText::default()
}

/// The framing a content type implies, or `None` when it is not a stream we speak.
pub fn framing_for(content_type: &str) -> Option<Framing> {
    let mime = content_type.split(';').next().unwrap_or("").trim();
    match mime {
        "text/event-stream" | "" => Some(Framing::Sse),
        "application/x-ndjson"
        | "application/jsonl"
        | "application/json"
        | "application/jsonlines" => Some(Framing::Ndjson),
        _ => None,
    }
}

/// Reads at most `limit` bytes of a body (lossy UTF-8), giving up at `deadline`.
async fn read_prefix(mut body: Incoming, limit: usize, deadline: Instant) -> String {
    let mut buf = Vec::new();
    let read = async {
        while buf.len() < limit {
            match body.frame().await {
                Some(Ok(f)) => {
                    if let Ok(d) = f.into_data() {
                        buf.extend_from_slice(&d);
                    }
                }
                _ => break,
            }
        }
    };
    let _ = tokio::time::timeout_at(deadline, read).await;
    buf.truncate(limit);
    String::from_utf8_lossy(&buf).trim().to_string()
}

/// Sends `req`. A pooled keep-alive connection the server already closed fails before
/// any response byte (servers such as llama.cpp's close after every stream without
/// saying so): the request never reached the server, so it is sent once more on a
/// connection opened for it (never another pooled one, which may be just as dead),
/// and the second value says when. Nothing else is ever retried.
pub async fn send_resending_if_stale(
    client: &crate::client::HyperClient,
    req: http::Request<Full<Bytes>>,
) -> (
    Result<http::Response<Incoming>, hyper_util::client::legacy::Error>,
    Option<Instant>,
) {
    let spare = copy_request(&req);
    match client.request(req).await {
        Err(e) if is_stale_connection(&e) => {
            let resent = Instant::now();
            (client.request_fresh(spare).await, Some(resent))
        }
        r => (r, None),
    }
}

/// A request with the same method, URI, version, headers and body.
fn copy_request(req: &http::Request<Full<Bytes>>) -> http::Request<Full<Bytes>> {
    let mut copy = http::Request::new(req.body().clone());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    copy
}

/// The connection closed before any response byte (a stale pooled connection), as
/// opposed to a failure to connect or an error after the server answered.
fn is_stale_connection(e: &hyper_util::client::legacy::Error) -> bool {
    if e.is_connect() {
        return false;
    }
    let mut cur: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(err) = cur {
        if let Some(h) = err.downcast_ref::<hyper::Error>() {
            return h.is_incomplete_message() || h.is_canceled();
        }
        cur = err.source();
    }
    false
}

/// Why a compressed stream cannot be read, when the response is one: Cadence asks for
/// none, times the bytes as they arrive, and would read compressed bytes as no events.
fn compressed(headers: &http::HeaderMap) -> Option<String> {
    let enc = headers.get(http::header::CONTENT_ENCODING)?.to_str().ok()?;
    let enc = enc.trim().to_ascii_lowercase();
    (!enc.is_empty() && enc != "identity").then(|| {
        format!(
            "the server compressed the stream (content-encoding: {enc}) though none was asked for: chunk times would be those of compressed blocks; turn compression off for event streams on the server or the proxy in front of it"
        )
    })
}

/// What an error chain most likely means when its own words say nothing useful: TLS
/// spoken to a plain-HTTP port (rustls sees an HTTP answer where a record should be).
fn hint(chain: &str) -> Option<&'static str> {
    let c = chain.to_ascii_lowercase();
    let plain = [
        "invalidcontenttype",
        "corrupt message",
        "wrong version number",
    ];
    plain
        .iter()
        .any(|p| c.contains(p))
        .then_some("the server answered the TLS handshake in plain HTTP: use http:// for this port")
}

/// Said of a request `--http2` sent that failed after connecting: HTTP/2 with prior
/// knowledge to an HTTP/1.1 server fails with words about streams and pipes.
const H2_HINT: &str = "the server does not speak HTTP/2 with prior knowledge on this port (an HTTP/1.1-only server?): drop --http2";

/// Classifies an error from the pooled client into an outcome with plain words.
pub fn classify_client_error(e: &hyper_util::client::legacy::Error) -> (Outcome, String) {
    let chain = match hint(&error_chain(e)) {
        Some(h) => format!("{h} ({})", error_chain(e)),
        None => error_chain(e),
    };
    if crate::fdlimit::is_own_limit(e) {
        let msg = format!("the client ran out of open files ({chain}): raise `ulimit -n`");
        (Outcome::ClientLimit, msg)
    } else if is_tls_error(e) {
        (Outcome::TlsError, format!("TLS failed: {chain}"))
    } else if e.is_connect() {
        (Outcome::ConnectError, format!("could not connect: {chain}"))
    } else {
        (Outcome::TransportError, format!("request failed: {chain}"))
    }
}

/// Whether a rustls error stands anywhere in the chain. `io::Error` hides its inner
/// error from `source()` (and hyper-rustls wraps rustls' io::Error in another), so
/// each io::Error is opened as well.
fn is_tls_error(e: &(dyn std::error::Error + 'static)) -> bool {
    if e.is::<rustls::Error>() {
        return true;
    }
    if let Some(inner) = e
        .downcast_ref::<std::io::Error>()
        .and_then(|io| io.get_ref())
    {
        let inner: &(dyn std::error::Error + 'static) = inner;
        if is_tls_error(inner) {
            return true;
        }
    }
    e.source().is_some_and(is_tls_error)
}

/// An error and its sources, joined with `: `.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut parts = vec![e.to_string()];
    let mut cur = e.source();
    while let Some(s) = cur {
        let text = s.to_string();
        if parts.last() != Some(&text) {
            parts.push(text);
        }
        cur = s.source();
    }
    parts.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mismatches_are_named() {
        let mut h = http::HeaderMap::new();
        assert_eq!(compressed(&h), None);
        h.insert(http::header::CONTENT_ENCODING, "identity".parse().unwrap());
        assert_eq!(compressed(&h), None);
        h.insert(http::header::CONTENT_ENCODING, "GZIP".parse().unwrap());
        assert!(compressed(&h).unwrap().contains("content-encoding: gzip"));
        let tls = "client error (Connect): received corrupt message of type InvalidContentType";
        assert!(hint(tls).unwrap().contains("use http://"));
        assert_eq!(hint("client error (Connect): Connection refused"), None);
    }

    #[test]
    fn content_types() {
        assert_eq!(
            framing_for("text/event-stream; charset=utf-8"),
            Some(Framing::Sse)
        );
        assert_eq!(framing_for("application/x-ndjson"), Some(Framing::Ndjson));
        assert_eq!(framing_for("text/html"), None);
    }
}

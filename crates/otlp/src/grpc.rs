//! OTLP over gRPC (`--otlp-protocol grpc`) without a gRPC stack: a unary call is one
//! HTTP/2 POST of a length-prefixed message whose outcome comes in the `grpc-status`
//! trailer, which hyper's HTTP/2 client speaks (h2c on http://, TLS with ALPN h2 on
//! https://). Here are the framing, the status and its class, and the call itself.

use bytes::Bytes;
use cadence_transport::classify::{error_chain, unreachable, Unreachable};
use cadence_transport::client::HyperClient;
use http::{HeaderMap, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use std::time::Duration;

/// The largest answer read: a collector's answer is a few bytes (a partial success).
const MAX_ANSWER: usize = 64 << 10;

/// A message as gRPC frames it: a byte saying it is not compressed, its length (32-bit
/// big-endian), the message.
pub fn frame(message: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + message.len());
    out.push(0);
    out.extend_from_slice(&(message.len() as u32).to_be_bytes());
    out.extend_from_slice(message);
    out
}

/// The message of a framed answer (empty when the answer carried none).
pub fn unframe(body: &[u8]) -> Result<&[u8], String> {
    if body.is_empty() {
        return Ok(body);
    }
    let Some((head, rest)) = body.split_first_chunk::<5>() else {
        return Err(format!(
            "a gRPC answer of {} bytes, short of its 5-byte prefix",
            body.len()
        ));
    };
    if head[0] != 0 {
        return Err("a compressed gRPC answer, though none was asked for".into());
    }
    let len = u32::from_be_bytes([head[1], head[2], head[3], head[4]]) as usize;
    rest.get(..len).ok_or_else(|| {
        format!(
            "a gRPC answer announcing {len} bytes carried {}",
            rest.len()
        )
    })
}

/// `google.rpc.Status`, as `grpc-status-details-bin` carries it.
#[derive(Clone, PartialEq, prost::Message)]
struct RpcStatus {
    #[prost(int32, tag = "1")]
    code: i32,
    #[prost(string, tag = "2")]
    message: String,
    #[prost(message, repeated, tag = "3")]
    details: Vec<Any>,
}

/// `google.protobuf.Any`.
#[derive(Clone, PartialEq, prost::Message)]
struct Any {
    #[prost(string, tag = "1")]
    type_url: String,
    #[prost(bytes = "vec", tag = "2")]
    value: Vec<u8>,
}

/// `google.rpc.RetryInfo`.
#[derive(Clone, PartialEq, prost::Message)]
struct RetryInfo {
    #[prost(message, optional, tag = "1")]
    retry_delay: Option<ProtoDuration>,
}

/// `google.protobuf.Duration`.
#[derive(Clone, PartialEq, prost::Message)]
struct ProtoDuration {
    #[prost(int64, tag = "1")]
    seconds: i64,
    #[prost(int32, tag = "2")]
    nanos: i32,
}

/// A call's outcome as the server said it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The gRPC status code (0 is OK).
    pub code: u32,
    /// `grpc-message`, percent-decoded (empty when none).
    pub message: String,
    /// The delay a `google.rpc.RetryInfo` in `grpc-status-details-bin` asked for
    /// (zero when it named none); `None` without one.
    pub retry_delay: Option<Duration>,
}

impl Status {
    /// The status a header map (the trailers, or a trailers-only answer's headers)
    /// carries; `None` without `grpc-status`.
    pub fn from_headers(h: &HeaderMap) -> Option<Status> {
        let code = h.get("grpc-status")?.to_str().ok()?.trim().parse().ok()?;
        let message = h
            .get("grpc-message")
            .map(|m| {
                String::from_utf8_lossy(&crate::config::percent_decode(m.as_bytes())).into_owned()
            })
            .unwrap_or_default();
        let retry_delay = h
            .get("grpc-status-details-bin")
            .and_then(|d| base64_decode(d.as_bytes()))
            .and_then(|b| retry_delay(&b));
        Some(Status {
            code,
            message,
            retry_delay,
        })
    }

    /// The status gRPC reads from an HTTP status when no `grpc-status` came (gRPC's
    /// HTTP-to-gRPC mapping): 429, 502, 503 and 504 are UNAVAILABLE.
    pub fn from_http(status: StatusCode) -> Status {
        let code = match status.as_u16() {
            400 => 13,
            401 => 16,
            403 => 7,
            404 => 12,
            429 | 502..=504 => 14,
            _ => 2,
        };
        Status {
            code,
            message: format!("HTTP {status} without a grpc-status"),
            retry_delay: None,
        }
    }

    /// Whether the OTLP specification calls it retryable: CANCELLED, DEADLINE_EXCEEDED,
    /// ABORTED, OUT_OF_RANGE, UNAVAILABLE, DATA_LOSS, and RESOURCE_EXHAUSTED when the
    /// server said when to retry (RetryInfo).
    pub fn retryable(&self) -> bool {
        match self.code {
            1 | 4 | 10 | 11 | 14 | 15 => true,
            8 => self.retry_delay.is_some(),
            _ => false,
        }
    }

    /// The code's name (`UNAVAILABLE`).
    pub fn name(&self) -> &'static str {
        const NAMES: [&str; 17] = [
            "OK",
            "CANCELLED",
            "UNKNOWN",
            "INVALID_ARGUMENT",
            "DEADLINE_EXCEEDED",
            "NOT_FOUND",
            "ALREADY_EXISTS",
            "PERMISSION_DENIED",
            "RESOURCE_EXHAUSTED",
            "FAILED_PRECONDITION",
            "ABORTED",
            "OUT_OF_RANGE",
            "UNIMPLEMENTED",
            "INTERNAL",
            "UNAVAILABLE",
            "DATA_LOSS",
            "UNAUTHENTICATED",
        ];
        NAMES
            .get(self.code as usize)
            .copied()
            .unwrap_or("an unknown code")
    }
}

impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "gRPC status {} ({})", self.name(), self.code)?;
        if !self.message.is_empty() {
            write!(f, ": {}", self.message)?;
        }
        match (self.retryable(), self.retry_delay) {
            (true, Some(d)) => write!(f, "; retryable after {d:?}, not retried"),
            (true, None) => f.write_str("; retryable, not retried"),
            (false, _) => f.write_str("; permanent"),
        }
    }
}

/// The delay of the first `google.rpc.RetryInfo` among a `google.rpc.Status`'s details.
fn retry_delay(status: &[u8]) -> Option<Duration> {
    let s = <RpcStatus as prost::Message>::decode(status).ok()?;
    let info = s
        .details
        .iter()
        .find(|a| a.type_url.ends_with("/google.rpc.RetryInfo"))?;
    let info = <RetryInfo as prost::Message>::decode(info.value.as_slice()).ok()?;
    let d = info.retry_delay.unwrap_or(ProtoDuration {
        seconds: 0,
        nanos: 0,
    });
    let secs = u64::try_from(d.seconds).unwrap_or(0);
    Some(Duration::new(
        secs,
        u32::try_from(d.nanos).unwrap_or(0).min(999_999_999),
    ))
}

/// Base64 as gRPC's `-bin` headers carry it (standard alphabet, padding optional);
/// `None` when it is not base64.
fn base64_decode(s: &[u8]) -> Option<Vec<u8>> {
    let value = |c: u8| match c {
        b'A'..=b'Z' => Some(c - b'A'),
        b'a'..=b'z' => Some(c - b'a' + 26),
        b'0'..=b'9' => Some(c - b'0' + 52),
        b'+' | b'-' => Some(62),
        b'/' | b'_' => Some(63),
        _ => None,
    };
    let s = s
        .strip_suffix(b"==")
        .or_else(|| s.strip_suffix(b"="))
        .unwrap_or(s);
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in s {
        acc = (acc << 6) | u32::from(value(c)?);
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

/// Why a call did not succeed.
#[derive(Debug)]
pub enum CallError {
    /// Nothing could be connected to at the endpoint.
    Unreachable(Unreachable),
    /// The exchange failed (TLS, a reset, no HTTP/2): the error chain.
    Failed(String),
    /// No whole answer within the timeout.
    Timeout(Duration),
    /// The server answered a status other than OK.
    Status(Status),
    /// The answer was not a gRPC answer (no `grpc-status`, a bad frame, too large).
    Malformed(String),
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CallError::Unreachable(u) => u.fmt(f),
            CallError::Failed(chain) => f.write_str(chain),
            CallError::Timeout(d) => write!(f, "no answer within {d:?}"),
            CallError::Status(s) => s.fmt(f),
            CallError::Malformed(why) => f.write_str(why),
        }
    }
}

impl std::error::Error for CallError {}

/// One unary call of `message` (a protobuf message, framed here) to `uri` with
/// `headers` as metadata, on `http` (an HTTP/2 client), within `timeout` from the call
/// to the trailers: the answer's message, unframed.
pub async fn call(
    http: &HyperClient,
    uri: &Uri,
    headers: &HeaderMap,
    message: &[u8],
    timeout: Duration,
) -> Result<Vec<u8>, CallError> {
    let mut req = http::Request::post(uri.clone())
        .header(http::header::CONTENT_TYPE, "application/grpc")
        .header(http::header::TE, "trailers")
        .header(
            "grpc-timeout",
            format!("{}m", timeout.as_millis().min(99_999_999)),
        )
        .header(
            http::header::USER_AGENT,
            concat!("cadence/", env!("CARGO_PKG_VERSION")),
        )
        .body(Full::new(Bytes::from(frame(message))))
        .map_err(|e| CallError::Failed(e.to_string()))?;
    req.headers_mut()
        .extend(headers.iter().map(|(k, v)| (k.clone(), v.clone())));
    let work = async {
        let resp = http
            .request(req)
            .await
            .map_err(|e| match unreachable(&e, uri) {
                Some(u) => CallError::Unreachable(u),
                None => CallError::Failed(error_chain(&e)),
            })?;
        let (parts, mut body) = resp.into_parts();
        // A trailers-only answer (most failures) has its status in the headers.
        if let Some(s) = Status::from_headers(&parts.headers) {
            return finished(s, &[]);
        }
        if parts.status != StatusCode::OK {
            return Err(CallError::Status(Status::from_http(parts.status)));
        }
        let (mut data, mut status) = (Vec::new(), None);
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| CallError::Failed(error_chain(&e)))?;
            match frame.into_data() {
                Ok(d) if data.len() + d.len() > MAX_ANSWER => {
                    return Err(CallError::Malformed(format!(
                        "a gRPC answer larger than {MAX_ANSWER} bytes"
                    )))
                }
                Ok(d) => data.extend_from_slice(&d),
                Err(f) => {
                    status = f
                        .into_trailers()
                        .ok()
                        .and_then(|t| Status::from_headers(&t))
                }
            }
        }
        let s = status.ok_or_else(|| {
            CallError::Malformed("the answer ended without a grpc-status trailer".into())
        })?;
        finished(s, &data)
    };
    tokio::time::timeout(timeout, work)
        .await
        .map_err(|_| CallError::Timeout(timeout))?
}

/// The answer's message when `status` is OK, else the status as the error.
fn finished(status: Status, data: &[u8]) -> Result<Vec<u8>, CallError> {
    if status.code != 0 {
        return Err(CallError::Status(status));
    }
    unframe(data)
        .map(<[u8]>::to_vec)
        .map_err(CallError::Malformed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_is_framed_and_unframed() {
        assert_eq!(frame(b"abc"), [0, 0, 0, 0, 3, b'a', b'b', b'c']);
        assert_eq!(unframe(&frame(b"abc")).unwrap(), b"abc");
        assert_eq!(unframe(&[]).unwrap(), b"");
        assert!(unframe(&[0, 0, 0]).unwrap_err().contains("5-byte prefix"));
        assert!(unframe(&[0, 0, 0, 0, 9, 1])
            .unwrap_err()
            .contains("announcing 9 bytes"));
        assert!(unframe(&[1, 0, 0, 0, 0])
            .unwrap_err()
            .contains("compressed"));
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().unwrap());
        }
        h
    }

    /// `grpc-status-details-bin` of a RESOURCE_EXHAUSTED naming a retry delay.
    fn details(delay: Option<(i64, i32)>) -> String {
        let info = RetryInfo {
            retry_delay: delay.map(|(seconds, nanos)| ProtoDuration { seconds, nanos }),
        };
        let status = RpcStatus {
            code: 8,
            message: "slow down".into(),
            details: vec![Any {
                type_url: "type.googleapis.com/google.rpc.RetryInfo".into(),
                value: prost::Message::encode_to_vec(&info),
            }],
        };
        let bytes = prost::Message::encode_to_vec(&status);
        // Standard base64, unpadded, as gRPC sends it.
        const A: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for c in bytes.chunks(3) {
            let n = c.iter().fold(0u32, |a, &b| a << 8 | u32::from(b)) << (8 * (3 - c.len()));
            for i in 0..=c.len() {
                out.push(A[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
        }
        out
    }

    #[test]
    fn statuses_are_read_and_classed_as_the_otlp_specification_says() {
        assert_eq!(Status::from_headers(&headers(&[])), None);
        let ok = Status::from_headers(&headers(&[("grpc-status", "0")])).unwrap();
        assert_eq!((ok.code, ok.name()), (0, "OK"));
        let down = Status::from_headers(&headers(&[
            ("grpc-status", "14"),
            ("grpc-message", "collector%20is%20down"),
        ]))
        .unwrap();
        assert!(down.retryable());
        assert_eq!(
            down.to_string(),
            "gRPC status UNAVAILABLE (14): collector is down; retryable, not retried"
        );
        // RESOURCE_EXHAUSTED is retryable only when the server said when.
        let full = Status::from_headers(&headers(&[("grpc-status", "8")])).unwrap();
        assert!(!full.retryable());
        assert!(full.to_string().ends_with("; permanent"), "{full}");
        let later = headers(&[
            ("grpc-status", "8"),
            ("grpc-status-details-bin", &details(Some((2, 500_000_000)))),
        ]);
        let later = Status::from_headers(&later).unwrap();
        assert_eq!(later.retry_delay, Some(Duration::from_millis(2_500)));
        assert!(later.retryable());
        let unnamed = headers(&[
            ("grpc-status", "8"),
            ("grpc-status-details-bin", &details(None)),
        ]);
        assert_eq!(
            Status::from_headers(&unnamed).unwrap().retry_delay,
            Some(Duration::ZERO)
        );
        for (code, retryable) in [(3, false), (7, false), (13, false), (16, false), (4, true)] {
            let s = Status::from_headers(&headers(&[("grpc-status", &code.to_string())]));
            assert_eq!(s.unwrap().retryable(), retryable, "{code}");
        }
    }

    #[test]
    fn an_http_status_without_grpc_status_maps_as_grpc_says() {
        for (http, code) in [
            (400, 13),
            (401, 16),
            (404, 12),
            (429, 14),
            (503, 14),
            (500, 2),
        ] {
            let s = Status::from_http(StatusCode::from_u16(http).unwrap());
            assert_eq!(s.code, code, "{http}");
        }
    }
}

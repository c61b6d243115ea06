//! The one retry Cadence ever makes: a request that met a stale keep-alive connection
//! (closed by the server before any response byte) is sent once more on a connection
//! opened for it. Shared by `bench` and the proxy so both follow the same rule.

use crate::client::HyperClient;
use crate::reuse::on_answered_connection;
use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use tokio::time::Instant;

/// Sends `req`. A reused pooled keep-alive connection the server already closed fails
/// before any response byte (servers such as llama.cpp's close after every stream
/// without saying so): the request never reached the server, so it is sent once more
/// on a connection opened for it (never another pooled one, which may be just as
/// dead), and the second value says when. A fresh connection that closes the same way
/// ends the request: the server may have taken it, and it is never sent twice
/// unasked. Nothing else is ever retried.
pub async fn send_resending_if_stale(
    client: &HyperClient,
    req: http::Request<Full<Bytes>>,
) -> (
    Result<http::Response<Incoming>, hyper_util::client::legacy::Error>,
    Option<Instant>,
) {
    let spare = copy_request(&req);
    match client.request(req).await {
        Err(e) if is_stale_connection(&e) && on_answered_connection(&e) => {
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

/// The connection closed before any response byte, as opposed to a failure to connect
/// or an error after the server answered.
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

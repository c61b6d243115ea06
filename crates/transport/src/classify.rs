//! Client errors in outcome classes and plain words: TLS, connect, or any other
//! transport failure, with the error's whole chain of causes.

use cadence_core::Outcome;

/// Classifies an error from the pooled client into an outcome with plain words.
pub fn classify_client_error(e: &hyper_util::client::legacy::Error) -> (Outcome, String) {
    let chain = error_chain(e);
    if is_tls_error(e) {
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

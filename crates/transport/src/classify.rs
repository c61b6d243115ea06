//! Client errors in outcome classes and plain words: TLS, connect, or any other
//! transport failure, with the error's whole chain of causes; and a target that cannot
//! be connected to at all, named as unreachable with the cause a user can act on.

use cadence_base::Outcome;

/// Classifies an error from the pooled client into an outcome with plain words.
pub fn classify_client_error(e: &hyper_util::client::legacy::Error) -> (Outcome, String) {
    classify(e, e.is_connect())
}

/// Classifies an error from the lean HTTP/1.1 client ([`crate::h1`]) the same way.
pub fn classify_h1_error(e: &crate::h1::H1Error) -> (Outcome, String) {
    classify(e, e.is_connect())
}

/// The outcome and words for an error whose chain is `e`; `connect` when it happened
/// while opening the connection.
fn classify(e: &(dyn std::error::Error + 'static), connect: bool) -> (Outcome, String) {
    let chain = match hint(&error_chain(e)) {
        Some(h) => format!("{h} ({})", error_chain(e)),
        None => error_chain(e),
    };
    if is_own_limit(e) {
        let msg = format!("the client ran out of open files ({chain}): raise `ulimit -n`");
        (Outcome::ClientLimit, msg)
    } else if is_tls_error(e) {
        (Outcome::TlsError, format!("TLS failed: {chain}"))
    } else if connect {
        (Outcome::ConnectError, format!("could not connect: {chain}"))
    } else {
        (Outcome::TransportError, format!("request failed: {chain}"))
    }
}

/// What an error chain most likely means when its own words say nothing useful: TLS
/// spoken to a plain-HTTP port (rustls sees an HTTP answer where a record should be).
pub fn hint(chain: &str) -> Option<&'static str> {
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

/// EMFILE and ENFILE (the same numbers on Linux and macOS).
const FD_EXHAUSTED: [i32; 2] = [24, 23];

/// Whether `e` or anything in its chain is the process or the system running out of
/// file descriptors (EMFILE, ENFILE): the client's own limit, not the server.
pub fn is_own_limit(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            if cfg!(unix) && io.raw_os_error().is_some_and(|c| FD_EXHAUSTED.contains(&c)) {
                return true;
            }
            if let Some(inner) = io.get_ref() {
                if is_own_limit(inner) {
                    return true;
                }
            }
        }
        cur = err.source();
    }
    false
}

/// A target that could not be connected to at all: where, and why in plain words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unreachable {
    /// `host:port` as the client dialled it.
    pub address: String,
    /// Why the connection failed, in words a user can act on (refused, timed out, no
    /// such host, no route), else the error chain.
    pub cause: String,
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "cannot reach the target at {}: {}",
            self.address, self.cause
        )
    }
}

impl std::error::Error for Unreachable {}

/// The target of `uri` as unreachable, when `e` is a failure to connect (not TLS, not
/// an error after connecting).
pub fn unreachable(e: &hyper_util::client::legacy::Error, uri: &http::Uri) -> Option<Unreachable> {
    if !e.is_connect() || is_tls_error(e) {
        return None;
    }
    let port = uri.port_u16().unwrap_or(match uri.scheme_str() {
        Some("https") => 443,
        _ => 80,
    });
    Some(Unreachable {
        address: format!("{}:{port}", uri.host().unwrap_or("?")),
        cause: connect_cause(e),
    })
}

/// Why a connection failed, in words a user can act on, else the error chain.
fn connect_cause(e: &(dyn std::error::Error + 'static)) -> String {
    use std::io::ErrorKind;
    let chain = error_chain(e);
    if chain.contains("dns error") {
        return format!("the host name does not resolve ({chain})");
    }
    let mut cur = Some(e);
    while let Some(err) = cur {
        if let Some(io) = err.downcast_ref::<std::io::Error>() {
            match io.kind() {
                ErrorKind::ConnectionRefused => {
                    return "connection refused: nothing is listening on that port (is the \
                            server running, and is the port right?)"
                        .into()
                }
                ErrorKind::TimedOut => {
                    return "the connection attempt timed out: nothing answered at that \
                            address (host down, wrong address, or a firewall dropping \
                            packets)"
                        .into()
                }
                ErrorKind::HostUnreachable | ErrorKind::NetworkUnreachable => {
                    return format!("no route to that host ({io})")
                }
                _ => {}
            }
        }
        cur = err.source();
    }
    chain
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

/// The process's soft descriptor limit, where the platform tells it (Linux's
/// `/proc/self/limits`; read, so no `unsafe` and no new dependency). The proxy caps its
/// connections by it, the watch its page's.
pub fn fd_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    soft_nofile(&limits)
}

/// The soft limit on the `Max open files` line of a `/proc/<pid>/limits` text.
fn soft_nofile(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max open files"))?;
    line["Max open files".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_limit_is_read_from_proc() {
        let text = "Limit                     Soft Limit           Hard Limit           Units     \n\
                    Max processes             63704                63704                processes \n\
                    Max open files            256                  4096                 files     \n";
        assert_eq!(soft_nofile(text), Some(256));
        let unlimited =
            "Max open files            unlimited            unlimited            files\n";
        assert_eq!(soft_nofile(unlimited), None);
        #[cfg(target_os = "linux")]
        assert!(fd_limit().is_some());
    }
}

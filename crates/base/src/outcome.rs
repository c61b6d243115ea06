//! How a request ended: success, exactly one failure class (docs/src/FAULTS.md), an abort,
//! or a drop. Every intended request ends in exactly one of these, which is what the
//! accounting checks.

use serde::{Deserialize, Serialize};

/// The one classified ending of a request.
///
/// The serialized names (`snake_case`) of the failure classes are the keys of
/// `requests.failed` in reports; the others are counted in `succeeded`, `aborted` and
/// `dropped`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Outcome {
    /// The stream finished (`[DONE]`, or a finish reason at EOF).
    Succeeded,
    /// TCP connect refused, unknown host, connect timeout (FAULTS 27).
    ConnectError,
    /// TLS handshake or certificate failure (FAULTS 27).
    TlsError,
    /// The status line never arrived within the header timeout (FAULTS 28).
    HeaderTimeout,
    /// Headers arrived but no output token within the first-token timeout (FAULTS 29).
    TtftTimeout,
    /// A gap between chunks exceeded the idle timeout (FAULTS 30).
    IdleTimeout,
    /// The whole request exceeded the total timeout.
    TotalTimeout,
    /// EOF, reset or FIN before `[DONE]` or a finish reason (FAULTS 10, 32).
    Truncated,
    /// The server sent an error object, before or after tokens (FAULTS 8, 9).
    StreamError,
    /// HTTP 429 Too Many Requests (FAULTS 33).
    #[serde(rename = "http_429")]
    Http429,
    /// Any other 4xx status.
    #[serde(rename = "http_4xx")]
    Http4xx,
    /// Any 5xx status (FAULTS 33).
    #[serde(rename = "http_5xx")]
    Http5xx,
    /// A status outside 2xx/4xx/5xx that is not a success (1xx leftovers, 3xx).
    HttpOther,
    /// A 200 whose content type is not a stream the API dialect speaks (FAULTS 26).
    ProtocolMismatch,
    /// One event exceeded the 1 MiB cap (FAULTS 23).
    EventTooLarge,
    /// A malformed event in `--strict` mode (FAULTS 7, 24).
    MalformedEvent,
    /// The response passed bench's per-request ceiling (`--max-chunks`,
    /// `--max-response-bytes`): a stream that never ends is cut there, its record
    /// bounded (FAULTS 110).
    ResponseTooLarge,
    /// Any other transport error (the detail says which).
    TransportError,
    /// The client itself ran out of open files (EMFILE, ENFILE): the request never
    /// reached the server, the run is invalid, and the server is not to blame.
    ClientLimit,
    /// The run's deadline or Ctrl-C ended the request while it was in flight (FAULTS 36).
    AbortedAtDeadline,
    /// The proxy's client hung up before the response was complete (FAULTS 40); the
    /// upstream request was cancelled. Counted as aborted, not as a server failure.
    ClientDisconnected,
    /// An open-loop arrival that was never sent: the client was at
    /// `--max-concurrency` (FAULTS 35). Counted as dropped, never as sent. Records
    /// written before this outcome existed say `aborted_at_deadline` with no send time.
    Dropped,
}

impl Outcome {
    /// Every variant, in report order.
    pub const ALL: [Outcome; 22] = [
        Outcome::Succeeded,
        Outcome::ConnectError,
        Outcome::TlsError,
        Outcome::HeaderTimeout,
        Outcome::TtftTimeout,
        Outcome::IdleTimeout,
        Outcome::TotalTimeout,
        Outcome::Truncated,
        Outcome::StreamError,
        Outcome::Http429,
        Outcome::Http4xx,
        Outcome::Http5xx,
        Outcome::HttpOther,
        Outcome::ProtocolMismatch,
        Outcome::EventTooLarge,
        Outcome::MalformedEvent,
        Outcome::ResponseTooLarge,
        Outcome::TransportError,
        Outcome::ClientLimit,
        Outcome::AbortedAtDeadline,
        Outcome::ClientDisconnected,
        Outcome::Dropped,
    ];

    /// The stable `snake_case` name used in reports and records.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::ConnectError => "connect_error",
            Outcome::TlsError => "tls_error",
            Outcome::HeaderTimeout => "header_timeout",
            Outcome::TtftTimeout => "ttft_timeout",
            Outcome::IdleTimeout => "idle_timeout",
            Outcome::TotalTimeout => "total_timeout",
            Outcome::Truncated => "truncated",
            Outcome::StreamError => "stream_error",
            Outcome::Http429 => "http_429",
            Outcome::Http4xx => "http_4xx",
            Outcome::Http5xx => "http_5xx",
            Outcome::HttpOther => "http_other",
            Outcome::ProtocolMismatch => "protocol_mismatch",
            Outcome::EventTooLarge => "event_too_large",
            Outcome::MalformedEvent => "malformed_event",
            Outcome::ResponseTooLarge => "response_too_large",
            Outcome::TransportError => "transport_error",
            Outcome::ClientLimit => "client_limit",
            Outcome::AbortedAtDeadline => "aborted_at_deadline",
            Outcome::ClientDisconnected => "client_disconnected",
            Outcome::Dropped => "dropped",
        }
    }

    /// A failure is every outcome but success, the aborts and the drop; the accounting
    /// keeps aborted and dropped requests in buckets of their own.
    pub fn is_failure(self) -> bool {
        !matches!(self, Outcome::Succeeded | Outcome::Dropped) && !self.is_abort()
    }

    /// Ended by the client's side (the run's end, or the proxy's client hanging up)
    /// rather than by the server: `aborted` in the accounting.
    pub fn is_abort(self) -> bool {
        matches!(
            self,
            Outcome::AbortedAtDeadline | Outcome::ClientDisconnected
        )
    }

    /// The outcome class of a non-success HTTP status.
    pub fn from_status(status: u16) -> Outcome {
        match status {
            429 => Outcome::Http429,
            400..=499 => Outcome::Http4xx,
            500..=599 => Outcome::Http5xx,
            _ => Outcome::HttpOther,
        }
    }
}

/// The warning for a level whose requests hit the client's own limits (`failed` as the
/// report's `requests.failed` holds it): such a level is invalid (exit 4).
pub fn client_limit_warning(failed: &std::collections::BTreeMap<String, u64>) -> Option<String> {
    let n = failed
        .get(Outcome::ClientLimit.name())
        .copied()
        .unwrap_or(0);
    (n > 0).then(|| {
        format!(
            "{n} requests failed on the client's own open-file limit (client_limit), not the server's: the run is invalid; raise `ulimit -n` or lower the concurrency"
        )
    })
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_match_serde_names() {
        for o in Outcome::ALL {
            let json = serde_json::to_string(&o).unwrap();
            assert_eq!(json, format!("\"{}\"", o.name()));
        }
    }

    #[test]
    fn status_classes() {
        assert_eq!(Outcome::from_status(429), Outcome::Http429);
        assert_eq!(Outcome::from_status(404), Outcome::Http4xx);
        assert_eq!(Outcome::from_status(503), Outcome::Http5xx);
        assert_eq!(Outcome::from_status(302), Outcome::HttpOther);
        assert!(!Outcome::Succeeded.is_failure());
        assert!(!Outcome::AbortedAtDeadline.is_failure());
        assert!(Outcome::Truncated.is_failure());
        assert!(Outcome::ClientLimit.is_failure());
    }

    #[test]
    fn the_clients_own_limit_is_named_and_counted() {
        let mut failed = std::collections::BTreeMap::new();
        failed.insert("connect_error".to_string(), 3);
        assert_eq!(client_limit_warning(&failed), None);
        failed.insert("client_limit".to_string(), 755);
        let w = client_limit_warning(&failed).unwrap();
        assert!(
            w.starts_with("755 requests failed on the client's own open-file limit"),
            "{w}"
        );
    }

    #[test]
    fn aborts_and_drops_are_not_failures() {
        for o in Outcome::ALL {
            let kinds = [
                o == Outcome::Succeeded,
                o.is_failure(),
                o.is_abort(),
                o == Outcome::Dropped,
            ];
            assert_eq!(kinds.iter().filter(|k| **k).count(), 1, "{o}");
        }
        assert!(Outcome::ClientDisconnected.is_abort());
        assert!(!Outcome::Dropped.is_abort());
    }
}

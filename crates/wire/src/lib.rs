//! Cadence's wire layer: incremental SSE / NDJSON framing and the OpenAI-style API
//! dialects, turned into timestamped chunks on a `RequestRecord`. Pure: no I/O, no
//! clocks, no async runtime, so the client, the proxy and replay share one parser.

#![warn(missing_docs)]

pub mod content_type;
pub mod dialect;
pub mod models;
pub mod ndjson;
pub mod sse;
pub mod tgi_headers;
pub mod tool_calls;
pub mod tracker;

pub use content_type::stream_framing;
pub use dialect::{Api, UnknownApi};
pub use tool_calls::ToolCall;
pub use tracker::{
    Flow, Framing, StreamText, StreamTracker, TrackerConfig, AFTER_DONE_GRACE, MAX_TOOL_EVENT_BYTES,
};

/// The largest single event (SSE) or line (NDJSON) a decoder buffers: 1 MiB (FAULTS 23).
/// Anything larger is reported as "too large" and discarded, so memory stays bounded.
pub const MAX_EVENT_BYTES: usize = 1 << 20;

/// Decode `bytes` as UTF-8, borrowing when valid; invalid sequences are replaced by
/// U+FFFD into `scratch` and the flag says so.
pub(crate) fn utf8<'a>(bytes: &'a [u8], scratch: &'a mut String) -> (&'a str, bool) {
    match std::str::from_utf8(bytes) {
        Ok(s) => (s, false),
        Err(_) => {
            scratch.clear();
            scratch.push_str(&String::from_utf8_lossy(bytes));
            (scratch.as_str(), true)
        }
    }
}

/// The UTF-8 byte order mark, stripped once at stream start by both decoders.
pub(crate) const BOM: &[u8; 3] = b"\xEF\xBB\xBF";

/// Strips a UTF-8 BOM at stream start even when it is split across feeds.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct BomStripper {
    /// Bytes of the BOM matched so far.
    matched: u8,
    /// Stream start is behind us.
    done: bool,
}

/// What to do with one feed's bytes after BOM handling.
pub(crate) enum BomStep<'a> {
    /// Still possibly inside a BOM: everything was held back.
    Hold,
    /// Process `replay` (held bytes that turned out not to be a BOM) then `rest`.
    Go {
        replay: &'static [u8],
        rest: &'a [u8],
    },
}

impl BomStripper {
    pub(crate) fn step<'a>(&mut self, bytes: &'a [u8]) -> BomStep<'a> {
        if self.done {
            return BomStep::Go {
                replay: &[],
                rest: bytes,
            };
        }
        let matched = self.matched as usize;
        let need = &BOM[matched..];
        let n = need.len().min(bytes.len());
        if bytes[..n] == need[..n] {
            if n == need.len() {
                self.done = true;
                BomStep::Go {
                    replay: &[],
                    rest: &bytes[n..],
                }
            } else {
                self.matched += n as u8;
                BomStep::Hold
            }
        } else {
            self.done = true;
            BomStep::Go {
                replay: &BOM[..matched],
                rest: bytes,
            }
        }
    }

    /// Stream start is behind us: every later byte is passed through as it is.
    #[inline]
    pub(crate) fn is_done(&self) -> bool {
        self.done
    }

    /// Bytes held back at EOF (a BOM prefix that never completed).
    pub(crate) fn held(&self) -> &'static [u8] {
        if self.done {
            &[]
        } else {
            &BOM[..self.matched as usize]
        }
    }

    pub(crate) fn reset(&mut self) {
        *self = BomStripper::default();
    }
}

/// `s` cut to at most `max` bytes on a character boundary.
pub fn truncate_str(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

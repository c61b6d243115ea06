//! The faults the sim can inject, by the names tests and headers use.
//! Each maps to a row of FAULTS.md, so the client's handling of every row can
//! be driven through a real socket.

use std::fmt;
use std::str::FromStr;

/// One selectable misbehaviour. Chosen per request with the
/// `x-cadence-fault: NAME` header or the model name `fault/NAME`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Fault {
    /// FAULTS 1: every event written one byte per body frame.
    SplitBytes,
    /// FAULTS 2: three events per body frame.
    Coalesce,
    /// FAULTS 3: CRLF line endings.
    Crlf,
    /// FAULTS 3: bare CR line endings.
    Cr,
    /// FAULTS 4: `data:{...}`.
    DataNoSpace,
    /// FAULTS 4: `data:  {...}` (JSON events only; `[DONE]` keeps one space).
    DataTwoSpaces,
    /// FAULTS 5: each JSON object pretty-printed over several `data:` lines.
    MultilineData,
    /// FAULTS 6: `: ping` comments and `event: ping` events between chunks.
    Keepalive,
    /// FAULTS 7: `data: : keepalive` events between chunks.
    GarbageData,
    /// FAULTS 8: some tokens, then `data: {"error":...}`, then the body ends.
    ErrorAfterTokens,
    /// FAULTS 9: HTTP 200 whose only event is an error object.
    ErrorOnly,
    /// FAULTS 10: some tokens, no finish reason, no `[DONE]`, clean end.
    EofNoDone,
    /// FAULTS 11: a complete stream with a finish reason but no `[DONE]`.
    FinishNoDone,
    /// FAULTS 12: more events and junk after `[DONE]`.
    BytesAfterDone,
    /// FAULTS 13: the `choices: []` usage chunk, even if not asked for.
    UsageOnlyChunk,
    /// FAULTS 14: usage on every chunk (running totals) plus the final one.
    UsageEveryChunk,
    /// FAULTS 15: a role-only first chunk; this is the normal behaviour.
    RoleFirst,
    /// FAULTS 16: `""` and `null` content chunks between the real ones.
    EmptyContent,
    /// FAULTS 17: `reasoning_content` deltas before the content.
    ReasoningFirst,
    /// FAULTS 18: only `tool_calls` deltas.
    ToolCalls,
    /// FAULTS 19: several tokens per chunk, with `token_ids` on each choice.
    MultiToken,
    /// FAULTS 20: never any usage, even when asked.
    NoUsage,
    /// FAULTS 21: multi-byte text, every event's frames split inside a character.
    SplitUtf8,
    /// FAULTS 22: the text itself contains `data: ` and `data: [DONE]`.
    DataPrefixText,
    /// FAULTS 23: one event larger than 1 MiB.
    HugeEvent,
    /// FAULTS 24: an event whose data is truncated JSON.
    InvalidJson,
    /// FAULTS 25: the same chunks as newline-delimited JSON.
    Ndjson,
    /// FAULTS 26: HTTP 200 with a `text/html` error page.
    Html200,
    /// FAULTS 33: HTTP 429 with `Retry-After: 1`.
    Status429,
    /// FAULTS 33: HTTP 503 with `Retry-After: 1`.
    Status503,
    /// FAULTS 28: headers only after the stall duration (default 10 s).
    HeaderDelay,
    /// FAULTS 29: headers and role chunk, then silence (default 1 h), then end.
    NoTokens,
    /// FAULTS 30/31: one stall (default 2 s) after chunk K (default 1).
    Stall,
    /// FAULTS 32: some tokens, then the connection is cut mid-body.
    Reset,
}

impl Fault {
    /// Every fault with its name, in FAULTS.md order.
    pub const ALL: &'static [(Fault, &'static str)] = &[
        (Fault::SplitBytes, "split_bytes"),
        (Fault::Coalesce, "coalesce"),
        (Fault::Crlf, "crlf"),
        (Fault::Cr, "cr"),
        (Fault::DataNoSpace, "data_no_space"),
        (Fault::DataTwoSpaces, "data_two_spaces"),
        (Fault::MultilineData, "multiline_data"),
        (Fault::Keepalive, "keepalive"),
        (Fault::GarbageData, "garbage_data"),
        (Fault::ErrorAfterTokens, "error_after_tokens"),
        (Fault::ErrorOnly, "error_only"),
        (Fault::EofNoDone, "eof_no_done"),
        (Fault::FinishNoDone, "finish_no_done"),
        (Fault::BytesAfterDone, "bytes_after_done"),
        (Fault::UsageOnlyChunk, "usage_only_chunk"),
        (Fault::UsageEveryChunk, "usage_every_chunk"),
        (Fault::RoleFirst, "role_first"),
        (Fault::EmptyContent, "empty_content"),
        (Fault::ReasoningFirst, "reasoning_first"),
        (Fault::ToolCalls, "tool_calls"),
        (Fault::MultiToken, "multi_token"),
        (Fault::NoUsage, "no_usage"),
        (Fault::SplitUtf8, "split_utf8"),
        (Fault::DataPrefixText, "data_prefix_text"),
        (Fault::HugeEvent, "huge_event"),
        (Fault::InvalidJson, "invalid_json"),
        (Fault::Ndjson, "ndjson"),
        (Fault::Html200, "html_200"),
        (Fault::Status429, "status_429"),
        (Fault::Status503, "status_503"),
        (Fault::HeaderDelay, "header_delay"),
        (Fault::NoTokens, "no_tokens"),
        (Fault::Stall, "stall"),
        (Fault::Reset, "reset"),
    ];

    /// The name used in headers, model names and the send log.
    pub fn name(self) -> &'static str {
        Fault::ALL
            .iter()
            .find(|(f, _)| *f == self)
            .map(|(_, n)| *n)
            .unwrap_or("unknown")
    }

    /// All names, comma-separated (for error messages and `--help`).
    pub fn names() -> String {
        Fault::ALL
            .iter()
            .map(|(_, n)| *n)
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// Faults that only make sense in the chat dialect.
    pub fn chat_only(self) -> bool {
        matches!(self, Fault::ReasoningFirst | Fault::ToolCalls)
    }

    /// Faults about OpenAI's own usage chunks, role chunk and `[DONE]`: the other
    /// dialects have no such thing to get wrong.
    pub fn openai_only(self) -> bool {
        matches!(
            self,
            Fault::UsageOnlyChunk
                | Fault::UsageEveryChunk
                | Fault::RoleFirst
                | Fault::NoUsage
                | Fault::FinishNoDone
        )
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A fault name that is not in [`Fault::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown fault `{name}`; valid faults: {}", Fault::names())]
pub struct UnknownFault {
    /// The name as given.
    pub name: String,
}

impl FromStr for Fault {
    type Err = UnknownFault;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        Fault::ALL
            .iter()
            .find(|(_, n)| n.eq_ignore_ascii_case(s))
            .map(|(f, _)| *f)
            .ok_or_else(|| UnknownFault { name: s.to_owned() })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for (fault, name) in Fault::ALL {
            assert!(seen.insert(*name), "duplicate {name}");
            assert_eq!(name.parse::<Fault>().unwrap(), *fault);
            assert_eq!(fault.to_string(), *name);
        }
        assert_eq!(Fault::ALL.len(), 34);
    }

    #[test]
    fn unknown_fault_lists_the_valid_names() {
        let err = "nope".parse::<Fault>().unwrap_err().to_string();
        assert!(err.contains("`nope`") && err.contains("split_bytes") && err.contains("reset"));
    }
}

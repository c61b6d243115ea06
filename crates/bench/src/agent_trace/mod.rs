//! Agent trace replay (`--agent-trace FILE`): recorded agent sessions read from a
//! Cadence session file, a Mooncake-style hash-id trace or an OpenTelemetry span
//! export, and replayed call by call. Each call's prompt is the session's transcript
//! so far (the earlier prompt and the reply the server actually gave) cut to the
//! recorded reuse, plus new text of exactly the tokens the recording adds, sent as a
//! tool result when the last reply called tools and as a user message otherwise.
//! Here the shared model (sessions, calls, reuse), the format's detection and the
//! retiming; each layout read in its own module, the replay's context in `replay`.

mod cadence;
mod mooncake;
mod otel;
mod replay;

pub use cadence::parse_cadence;
pub use mooncake::parse_mooncake;
pub use otel::parse_otel;
pub use replay::{reply_tokens, Replay, ReplayState};

use cadence_core::json::{kind, Field, JsonError};
use serde_json::Value;
use std::str::FromStr;
use std::time::Duration;

/// Tokens per `hash_ids` block in Mooncake traces.
pub const DEFAULT_BLOCK_SIZE: u32 = 512;

/// The most tokens a call's input or output may have: far past any context window,
/// and small enough that making its text cannot exhaust the client's memory.
pub const MAX_TOKENS: u64 = crate::prompts::MAX_LENGTH as u64;

/// The most tokens a whole trace may ask its replay to hold: each session's longest
/// call (prompt and reply) summed over the sessions, 2^28 (268,435,456). Each value
/// within [`MAX_TOKENS`] is not enough: sixty sessions of 2^24 tokens arriving together
/// took 4 GB before a request was sent.
pub const MAX_TRACE_TOKENS: u64 = 1 << 28;

/// Idle gaps (between session arrivals, and before a call) longer than this are cut
/// to it unless `--agent-trace-max-gap` says otherwise.
pub const DEFAULT_MAX_GAP: Duration = Duration::from_secs(60);

/// Which earlier context a call sends again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reuse {
    /// The whole context so far: the previous call's prompt and its reply.
    Previous,
    /// The first N tokens of the session's context (0: a fresh context).
    Tokens(u64),
}

/// One recorded LLM call of a session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceCall {
    /// The prompt's recorded length: the replayed prompt has exactly these tokens.
    pub input_tokens: u32,
    /// The reply's recorded length, asked for as the call's output limit.
    pub output_tokens: u32,
    /// How much of the session's context the prompt sends again.
    pub reuse: Reuse,
    /// The client's time between the previous call's last byte and this send.
    pub tool_wait: Duration,
    /// Not sent before this offset from the session's arrival (traces that record
    /// when each call arrived but not when the one before it ended: Mooncake).
    pub at: Option<Duration>,
}

/// One recorded session: when it arrived and its calls in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceSession {
    /// The session's name in the trace (or `line-N`), written as each call's prompt id.
    pub id: String,
    /// Arrival offset from the trace's first session.
    pub at: Duration,
    /// The recorded calls, in the order they are replayed.
    pub calls: Vec<TraceCall>,
}

/// The layouts `--agent-trace` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Cadence's session JSON Lines: one session per line.
    Cadence,
    /// Mooncake-style JSON Lines: one call per line with `hash_ids`.
    Mooncake,
    /// OTLP JSON span exports (OpenTelemetry GenAI or OpenInference attributes).
    Otel,
}

impl FromStr for Format {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "cadence" => Ok(Format::Cadence),
            "mooncake" => Ok(Format::Mooncake),
            "otel" | "otlp" | "opentelemetry" | "openinference" => Ok(Format::Otel),
            _ => Err(format!(
                "'{s}' is not an agent trace format: cadence, mooncake or otel"
            )),
        }
    }
}

/// Why an agent trace could not be read: where (a line, a span) and what.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentTraceError(pub String);

impl std::fmt::Display for AgentTraceError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for AgentTraceError {}

impl From<JsonError> for AgentTraceError {
    fn from(e: JsonError) -> AgentTraceError {
        AgentTraceError(e.to_string())
    }
}

fn at_line(line: usize, what: impl std::fmt::Display) -> AgentTraceError {
    AgentTraceError(format!("line {line}: {what}"))
}

/// The non-blank lines not starting with `#`, numbered from 1.
fn lines(text: &str) -> impl Iterator<Item = (usize, &str)> {
    text.lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
}

/// Which layout `text` is in, from its content: an OTLP export names
/// `resourceSpans`; a Cadence session line has `calls`; a Mooncake line has
/// `hash_ids` or `input_length`.
pub fn detect(text: &str) -> Result<Format, AgentTraceError> {
    let Some((line, first)) = lines(text).next() else {
        return Err(AgentTraceError(
            "the agent trace is empty (every line is blank or a # comment)".into(),
        ));
    };
    if text.contains("\"resourceSpans\"") {
        return Ok(Format::Otel);
    }
    let v: Value = serde_json::from_str(first).map_err(|e| {
        at_line(
            line,
            format!("not valid JSON ({e}); an OTLP export must name resourceSpans"),
        )
    })?;
    match &v {
        Value::Object(o) if o.contains_key("calls") => Ok(Format::Cadence),
        Value::Object(o) if o.contains_key("hash_ids") || o.contains_key("input_length") => {
            Ok(Format::Mooncake)
        }
        _ => Err(at_line(
            line,
            "cannot tell the format: expected a Cadence session (with calls), a Mooncake \
             call (with hash_ids or input_length) or an OTLP export (resourceSpans); \
             --agent-trace-format names it",
        )),
    }
}

/// Reads an agent trace in `format` (detected from the content when `None`).
/// Sessions come back in arrival order, the first at zero.
pub fn parse(
    text: &str,
    format: Option<Format>,
    block_size: u32,
) -> Result<Vec<TraceSession>, AgentTraceError> {
    let format = match format {
        Some(f) => f,
        None => detect(text)?,
    };
    let mut sessions = match format {
        Format::Cadence => parse_cadence(text)?,
        Format::Mooncake => parse_mooncake(text, block_size)?,
        Format::Otel => parse_otel(text)?,
    };
    if sessions.is_empty() {
        return Err(AgentTraceError(
            "the agent trace has no sessions (every line is blank or a # comment)".into(),
        ));
    }
    within_budget(&sessions)?;
    sessions.sort_by_key(|s| s.at); // stable: equal arrivals keep file order
    let first = sessions[0].at;
    for s in &mut sessions {
        s.at -= first;
    }
    Ok(sessions)
}

/// Refuses a trace whose sessions hold more than [`MAX_TRACE_TOKENS`] at their longest.
fn within_budget(sessions: &[TraceSession]) -> Result<(), AgentTraceError> {
    let longest = |s: &TraceSession| {
        s.calls
            .iter()
            .map(|c| u64::from(c.input_tokens) + u64::from(c.output_tokens))
            .max()
            .unwrap_or(0)
    };
    let total: u64 = sessions.iter().map(longest).sum();
    if total > MAX_TRACE_TOKENS {
        return Err(AgentTraceError(format!(
            "the agent trace's {} sessions hold {total} tokens at their longest (each \
             session's longest call, prompt and reply, summed): more than the \
             {MAX_TRACE_TOKENS} a replay makes text for; replay fewer sessions or shorter \
             calls",
            sessions.len()
        )));
    }
    Ok(())
}

/// Speeds the trace's clock up by `speed` (arrivals and waits divided by it), then
/// cuts every idle gap to `max_gap`: between consecutive session arrivals, each
/// call's tool wait, and between consecutive recorded call arrivals in a session.
pub fn retime(sessions: &mut [TraceSession], speed: f64, max_gap: Duration) {
    assert!(
        speed.is_finite() && speed > 0.0,
        "trace speed must be a positive number, got {speed}"
    );
    let scaled = |d: Duration| Duration::from_secs_f64((d.as_secs_f64() / speed).min(1e12));
    let mut prev_raw = Duration::ZERO;
    let mut prev_new = Duration::ZERO;
    for s in sessions.iter_mut() {
        let gap = scaled(s.at.saturating_sub(prev_raw)).min(max_gap);
        prev_raw = s.at;
        s.at = prev_new + gap;
        prev_new = s.at;
        let mut prev_at_raw = Duration::ZERO;
        let mut prev_at_new = Duration::ZERO;
        for c in &mut s.calls {
            c.tool_wait = scaled(c.tool_wait).min(max_gap);
            if let Some(at) = c.at {
                let gap = scaled(at.saturating_sub(prev_at_raw)).min(max_gap);
                prev_at_raw = at;
                prev_at_new += gap;
                c.at = Some(prev_at_new);
            }
        }
    }
}

/// Milliseconds, finite and at least zero, as a duration (absolute Unix times fit).
fn millis(f: Field) -> Result<Duration, JsonError> {
    let ms = f.nonneg()?;
    if ms > 1e13 {
        return Err(f.error(format!("{} is too large", f.value)));
    }
    Ok(Duration::from_nanos((ms * 1e6).round() as u64))
}

/// A session's name: a non-empty string or a number.
fn id_of(f: Field) -> Result<String, JsonError> {
    match f.value {
        Value::String(s) if !s.is_empty() => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        other => Err(f.error(format!(
            "expected a non-empty string or a number, got {}",
            kind(other)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const MS: Duration = Duration::from_millis(1);

    pub(crate) fn call(input: u32, output: u32, reuse: Reuse, wait_ms: u32) -> TraceCall {
        TraceCall {
            input_tokens: input,
            output_tokens: output,
            reuse,
            tool_wait: MS * wait_ms,
            at: None,
        }
    }

    #[track_caller]
    pub(crate) fn fails(text: &str, format: Format, contains: &str) {
        match parse(text, Some(format), DEFAULT_BLOCK_SIZE) {
            Err(e) => assert!(e.0.contains(contains), "{:?} lacks {contains:?}", e.0),
            Ok(s) => panic!("expected an error containing {contains:?}, got {s:?}"),
        }
    }

    #[test]
    fn hostile_input_is_an_error_never_a_panic() {
        let pieces = [
            r#"{"session": "a", "at_ms": 0, "calls": [{"input_tokens": 5, "output_tokens": 1}]}"#,
            r#"{"timestamp": 0, "input_length": 600, "output_length": 1, "hash_ids": [1, 2]}"#,
            r#"{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "t", "startTimeUnixNano": "1", "endTimeUnixNano": "2", "attributes": [{"key": "llm.token_count.prompt", "value": {"intValue": "3"}}, {"key": "llm.token_count.completion", "value": {"intValue": "1"}}]}]}]}]}"#,
        ];
        for p in pieces {
            assert!(parse(p, None, 512).is_ok(), "{p}");
            for cut in 0..p.len() {
                for format in [
                    None,
                    Some(Format::Cadence),
                    Some(Format::Mooncake),
                    Some(Format::Otel),
                ] {
                    let _ = parse(&p[..cut], format, 512);
                }
            }
        }
        let _ = parse("\u{feff}{\"calls\": [null]}", None, 512);
        let _ = parse(
            r#"{"timestamp": 0, "input_length": 5, "output_length": 1}"#,
            None,
            0,
        );
    }

    #[test]
    fn a_trace_over_the_total_token_budget_is_refused_naming_total_and_limit() {
        let line = |i: u32, n: u64| {
            format!(
                r#"{{"session": "s{i}", "at_ms": 0, "calls": [{{"input_tokens": {n}, "output_tokens": 1}}]}}"#
            )
        };
        // Sixty sessions of 2^24 prompt tokens and a reply each: every value within
        // MAX_TOKENS, 60 * (2^24 + 1) in all.
        let text: Vec<String> = (0..60).map(|i| line(i, MAX_TOKENS)).collect();
        fails(
            &text.join("\n"),
            Format::Cadence,
            "the agent trace's 60 sessions hold 1006633020 tokens at their longest",
        );
        fails(&text.join("\n"), Format::Cadence, "more than the 268435456");
        // Exactly the budget is read: 16 sessions of 2^24 - 1 tokens and a reply each.
        let text: Vec<String> = (0..16).map(|i| line(i, MAX_TOKENS - 1)).collect();
        assert_eq!(
            parse(&text.join("\n"), Some(Format::Cadence), 512)
                .unwrap()
                .len(),
            16
        );
    }

    #[test]
    fn retime_scales_then_caps_every_gap() {
        let mut s = vec![
            TraceSession {
                id: "a".into(),
                at: Duration::ZERO,
                calls: vec![
                    call(5, 1, Reuse::Tokens(0), 0),
                    call(9, 1, Reuse::Previous, 400),
                ],
            },
            TraceSession {
                id: "b".into(),
                at: Duration::from_secs(3600),
                calls: vec![
                    call(5, 1, Reuse::Tokens(0), 0),
                    TraceCall {
                        at: Some(MS * 200),
                        ..call(9, 1, Reuse::Previous, 0)
                    },
                    TraceCall {
                        at: Some(MS * 9200),
                        ..call(20, 1, Reuse::Previous, 0)
                    },
                ],
            },
            TraceSession {
                id: "c".into(),
                at: Duration::from_secs(3601),
                calls: vec![call(5, 1, Reuse::Tokens(0), 0)],
            },
        ];
        retime(&mut s, 2.0, Duration::from_secs(1));
        assert_eq!(s[0].calls[1].tool_wait, MS * 200);
        assert_eq!(s[1].at, Duration::from_secs(1), "an hour's gap cut to 1 s");
        assert_eq!(s[2].at, MS * 1500, "the next second, halved");
        assert_eq!(s[1].calls[1].at, Some(MS * 100));
        assert_eq!(
            s[1].calls[2].at,
            Some(MS * 1100),
            "a 9 s gap, halved and cut to 1 s"
        );
    }
}

//! Cadence's own agent trace layout: one session per JSON line, its calls with their
//! token counts, reuse and tool waits.

use super::{
    at_line, id_of, lines, millis, AgentTraceError, Reuse, TraceCall, TraceSession, MAX_TOKENS,
};
use cadence_core::json::{JsonError, Obj};
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;

const SESSION_KEYS: [&str; 3] = ["session", "at_ms", "calls"];
const CALL_KEYS: [&str; 5] = [
    "input_tokens",
    "output_tokens",
    "reuse",
    "tool_wait_ms",
    "at_ms",
];

/// Cadence's session JSON Lines: one session per line,
/// `{"session": "s1", "at_ms": 0, "calls": [{"input_tokens": 900, "output_tokens": 40},
/// {"input_tokens": 1300, "output_tokens": 25, "reuse": "previous", "tool_wait_ms": 350}]}`.
/// `reuse` is `"previous"` (the default after the first call), a number of tokens of
/// the context so far, or 0 (a fresh context; the first call's only value).
pub fn parse_cadence(text: &str) -> Result<Vec<TraceSession>, AgentTraceError> {
    let mut out = Vec::new();
    let mut seen: HashMap<String, usize> = HashMap::new();
    for (line, t) in lines(text) {
        let v: Value =
            serde_json::from_str(t).map_err(|e| at_line(line, format!("not valid JSON ({e})")))?;
        let s = cadence_session(&Obj::new(format!("line {line}"), &v)?, line)?;
        if let Some(first) = seen.insert(s.id.clone(), line) {
            return Err(at_line(
                line,
                format!("session '{}' was already given on line {first}", s.id),
            ));
        }
        out.push(s);
    }
    Ok(out)
}

fn cadence_session(obj: &Obj, line: usize) -> Result<TraceSession, JsonError> {
    obj.only(&SESSION_KEYS)?;
    let id = obj
        .opt("session", id_of)?
        .unwrap_or_else(|| format!("line-{line}"));
    let at = obj.req("at_ms", millis)?;
    let calls = obj.req("calls", |f| f.arr())?;
    if calls.is_empty() {
        return Err(obj.error("calls", "empty: a session makes at least one call"));
    }
    let calls = calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let c = Obj::at(obj.place.clone(), obj.path(&format!("calls[{i}]")), c)?;
            cadence_call(&c, i)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(TraceSession { id, at, calls })
}

fn cadence_call(obj: &Obj, i: usize) -> Result<TraceCall, JsonError> {
    obj.only(&CALL_KEYS)?;
    let tokens = |k: &str| obj.req(k, |f| f.int(1..=MAX_TOKENS)).map(|n| n as u32);
    let input_tokens = tokens("input_tokens")?;
    let output_tokens = tokens("output_tokens")?;
    let reuse = match obj.get("reuse") {
        None if i == 0 => Reuse::Tokens(0),
        None => Reuse::Previous,
        Some(Value::String(s)) if s == "previous" => Reuse::Previous,
        Some(Value::Number(_)) => Reuse::Tokens(obj.req("reuse", |f| f.int(0..=MAX_TOKENS))?),
        Some(other) => {
            return Err(obj.error(
                "reuse",
                format!("expected \"previous\" or a number of tokens, got {other}"),
            ))
        }
    };
    if i == 0 && reuse != Reuse::Tokens(0) {
        return Err(obj.error(
            "reuse",
            "the first call has no earlier context to reuse (0 or none)",
        ));
    }
    if let Reuse::Tokens(n) = reuse {
        if n >= u64::from(input_tokens) {
            return Err(obj.error(
                "reuse",
                format!("{n} leaves no new tokens of the call's {input_tokens}"),
            ));
        }
    }
    Ok(TraceCall {
        input_tokens,
        output_tokens,
        reuse,
        tool_wait: obj.opt("tool_wait_ms", millis)?.unwrap_or(Duration::ZERO),
        at: obj.opt("at_ms", millis)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent_trace::tests::{call, fails, MS};
    use crate::agent_trace::*;

    #[test]
    fn cadence_sessions_parse_with_their_defaults() {
        let text = r#"# two sessions, the second first
{"session": "b", "at_ms": 1500, "calls": [{"input_tokens": 10, "output_tokens": 2}]}
{"session": 7, "at_ms": 1000.5, "calls": [{"input_tokens": 100, "output_tokens": 20},
   {"input_tokens": 150, "output_tokens": 5, "tool_wait_ms": 250}, {"input_tokens": 90, "output_tokens": 5, "reuse": 40}, {"input_tokens": 30, "output_tokens": 1, "reuse": 0}, {"input_tokens": 200, "output_tokens": 3, "reuse": "previous", "at_ms": 900}]}
"#;
        // The second session spans two lines: not JSON Lines.
        fails(text, Format::Cadence, "line 3: not valid JSON");
        let text = text.replace(",\n   {", ", {");
        let s = parse(&text, None, DEFAULT_BLOCK_SIZE).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].id.as_str(), s[0].at), ("7", Duration::ZERO));
        assert_eq!(
            (s[1].id.as_str(), s[1].at),
            ("b", Duration::from_micros(499_500))
        );
        assert_eq!(
            s[0].calls[..4],
            [
                call(100, 20, Reuse::Tokens(0), 0),
                call(150, 5, Reuse::Previous, 250),
                call(90, 5, Reuse::Tokens(40), 0),
                call(30, 1, Reuse::Tokens(0), 0),
            ]
        );
        assert_eq!(s[0].calls[4].at, Some(MS * 900));
    }

    #[test]
    fn cadence_errors_name_the_line_the_call_and_the_field() {
        let ok =
            r#"{"session": "a", "at_ms": 0, "calls": [{"input_tokens": 5, "output_tokens": 1}]}"#;
        let cases = [
            (r#"{"at_ms": 0}"#, "field `calls`: missing"),
            (r#"{"session": "x", "calls": []}"#, "field `at_ms`: missing"),
            (
                r#"{"session": "x", "at_ms": 0, "calls": []}"#,
                "field `calls`: empty: a session makes at least one call",
            ),
            (
                r#"{"session": "x", "at_ms": -1, "calls": [{}]}"#,
                "field `at_ms`: expected a number >= 0, got -1",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"output_tokens": 1}]}"#,
                "field `calls[0].input_tokens`: missing",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 0, "output_tokens": 1}]}"#,
                "field `calls[0].input_tokens`: expected at least 1, got 0",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 2.5, "output_tokens": 1}]}"#,
                "field `calls[0].input_tokens`: expected a whole number >= 1, got 2.5",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 9999999999, "output_tokens": 1}]}"#,
                "field `calls[0].input_tokens`: 9999999999 is too large (at most 16777216)",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 5, "output_tokens": 1, "reuse": "previous"}]}"#,
                "field `calls[0].reuse`: the first call has no earlier context",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 5, "output_tokens": 1}, {"input_tokens": 5, "output_tokens": 1, "reuse": 5}]}"#,
                "field `calls[1].reuse`: 5 leaves no new tokens",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 5, "output_tokens": 1}, {"input_tokens": 5, "output_tokens": 1, "reuse": "all"}]}"#,
                "field `calls[1].reuse`: expected \"previous\" or a number",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 5, "output_token": 1}]}"#,
                "field `calls[0].output_token`: unknown (expected input_tokens",
            ),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 5, "output_tokens": 1, "tool_wait_ms": "1s"}]}"#,
                "field `calls[0].tool_wait_ms`: expected a number, got a string",
            ),
            (
                r#"{"session": "a", "at_ms": 0, "calls": [{"input_tokens": 5, "output_tokens": 1}]}"#,
                "session 'a' was already given on line 1",
            ),
            (r#"[1]"#, "expected an object, got an array"),
            (
                r#"{"session": "x", "at_ms": 0, "calls": [{"input_tokens": 5, "output_tokens": 1}"#,
                "not valid JSON",
            ),
        ];
        for (bad, what) in cases {
            fails(
                &format!("{ok}\n\n{bad}\n"),
                Format::Cadence,
                &format!("line 3: {what}"),
            );
        }
        fails("", Format::Cadence, "no sessions");
        assert!(detect("# nothing\n").unwrap_err().0.contains("empty"));
        assert!(detect("{\"x\": 1}")
            .unwrap_err()
            .0
            .contains("cannot tell the format"));
    }
}

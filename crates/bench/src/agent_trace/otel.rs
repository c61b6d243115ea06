//! OpenTelemetry span exports (OTLP JSON): LLM spans with token counts (GenAI or
//! OpenInference attributes), a trace a session, its innermost counted spans its calls.

use super::{at_line, lines, AgentTraceError, Reuse, TraceCall, TraceSession, MAX_TOKENS};
use cadence_core::json::{Field, JsonError, Obj};
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;

const INPUT_ATTRS: [&str; 3] = [
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.prompt_tokens",
    "llm.token_count.prompt",
];
const OUTPUT_ATTRS: [&str; 3] = [
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.completion_tokens",
    "llm.token_count.completion",
];

/// One LLM span.
struct Span {
    trace: String,
    id: String,
    parent: String,
    start: u64,
    end: u64,
    input: Option<u32>,
    output: Option<u32>,
    /// Where it is, for errors: the document or line, and the span's path in it.
    place: String,
    path: String,
}

/// OTLP JSON span exports (a `{"resourceSpans": [...]}` document, a JSON array of
/// them, or one per line as the collector's file exporter writes). An LLM call is a
/// span with an input token count — `gen_ai.usage.input_tokens` (OpenTelemetry GenAI;
/// `gen_ai.usage.prompt_tokens` of older versions) or `llm.token_count.prompt`
/// (OpenInference) — and an output count (`gen_ai.usage.output_tokens`,
/// `gen_ai.usage.completion_tokens` or `llm.token_count.completion`); a counted span
/// that encloses another counted span (a framework's span around the client's) is
/// left out. Each trace is a session arriving at its first call's start; its calls in
/// start order; the tool wait before a call is the gap since the previous call's span
/// ended (zero when they overlap). A call reuses the previous context when its input
/// holds at least the previous prompt and reply, the previous prompt when it holds
/// only that, and starts afresh otherwise.
pub fn parse_otel(text: &str) -> Result<Vec<TraceSession>, AgentTraceError> {
    let mut spans = Vec::new();
    match serde_json::from_str::<Value>(text) {
        Ok(Value::Array(docs)) => {
            for (i, d) in docs.iter().enumerate() {
                otel_doc(d, &format!("document {}", i + 1), &mut spans)?;
            }
        }
        Ok(doc) => otel_doc(&doc, "the export", &mut spans)?,
        Err(_) => {
            for (line, t) in lines(text) {
                let v: Value = serde_json::from_str(t)
                    .map_err(|e| at_line(line, format!("not valid JSON ({e})")))?;
                otel_doc(&v, &format!("line {line}"), &mut spans)?;
            }
        }
    }
    // A counted span with a counted descendant is a wrapper: the inner span is the call.
    let parents: HashMap<(&str, &str), &str> = spans
        .iter()
        .map(|s| ((s.trace.as_str(), s.id.as_str()), s.parent.as_str()))
        .collect();
    let mut wrappers: std::collections::HashSet<(&str, &str)> = Default::default();
    for s in spans.iter().filter(|s| s.input.is_some()) {
        let mut p = s.parent.as_str();
        let mut hops = 0;
        while !p.is_empty() && hops < 256 {
            wrappers.insert((s.trace.as_str(), p));
            p = parents.get(&(s.trace.as_str(), p)).copied().unwrap_or("");
            hops += 1;
        }
    }
    let mut by_trace: HashMap<&str, Vec<&Span>> = HashMap::new();
    let mut order: Vec<&str> = Vec::new();
    for s in &spans {
        if s.input.is_none() || wrappers.contains(&(s.trace.as_str(), s.id.as_str())) {
            continue;
        }
        if s.output.is_none() {
            return Err(JsonError::new(
                &s.place,
                &s.path,
                format!(
                    "an input token count but no output count ({})",
                    OUTPUT_ATTRS.join(", ")
                ),
            )
            .into());
        }
        by_trace
            .entry(s.trace.as_str())
            .or_insert_with(|| {
                order.push(s.trace.as_str());
                Vec::new()
            })
            .push(s);
    }
    if order.is_empty() {
        return Err(AgentTraceError(format!(
            "no LLM spans with token counts ({} or {})",
            INPUT_ATTRS.join(", "),
            OUTPUT_ATTRS.join(", ")
        )));
    }
    let first = spans
        .iter()
        .filter(|s| s.input.is_some())
        .map(|s| s.start)
        .min()
        .unwrap_or(0);
    Ok(order
        .into_iter()
        .map(|t| {
            let mut calls = by_trace.remove(t).unwrap_or_default();
            calls.sort_by_key(|s| (s.start, s.end));
            otel_session(t, &calls, first)
        })
        .collect())
}

fn otel_session(trace: &str, spans: &[&Span], first: u64) -> TraceSession {
    let mut calls = Vec::with_capacity(spans.len());
    for (i, s) in spans.iter().enumerate() {
        let (input, output) = (s.input.unwrap_or(1), s.output.unwrap_or(1));
        let (reuse, tool_wait) = match i.checked_sub(1).map(|j| spans[j]) {
            None => (Reuse::Tokens(0), Duration::ZERO),
            Some(p) => {
                let (pi, po) = (
                    u64::from(p.input.unwrap_or(1)),
                    u64::from(p.output.unwrap_or(1)),
                );
                let reuse = if u64::from(input) > pi + po {
                    Reuse::Previous
                } else if u64::from(input) > pi {
                    Reuse::Tokens(pi)
                } else {
                    Reuse::Tokens(0)
                };
                (reuse, Duration::from_nanos(s.start.saturating_sub(p.end)))
            }
        };
        calls.push(TraceCall {
            input_tokens: input,
            output_tokens: output,
            reuse,
            tool_wait,
            at: None,
        });
    }
    TraceSession {
        id: trace.to_owned(),
        at: Duration::from_nanos(spans[0].start.saturating_sub(first)),
        calls,
    }
}

/// The array under `key` of `obj`, or none.
fn array<'a>(obj: &Obj<'a>, key: &str) -> Result<&'a [Value], JsonError> {
    Ok(obj.arr(key)?.unwrap_or(&[]))
}

fn otel_doc(doc: &Value, place: &str, out: &mut Vec<Span>) -> Result<(), JsonError> {
    let doc = Obj::new(place, doc)?;
    for (r, rs) in array(&doc, "resourceSpans")?.iter().enumerate() {
        let rs = Obj::at(place, format!("resourceSpans[{r}]"), rs)?;
        let mut scopes = array(&rs, "scopeSpans")?;
        if scopes.is_empty() {
            scopes = array(&rs, "instrumentationLibrarySpans")?;
        }
        for (s, ss) in scopes.iter().enumerate() {
            let ss = Obj::at(place, rs.path(&format!("scopeSpans[{s}]")), ss)?;
            for (k, span) in array(&ss, "spans")?.iter().enumerate() {
                out.push(otel_span(&Obj::at(
                    place,
                    ss.path(&format!("spans[{k}]")),
                    span,
                )?)?);
            }
        }
    }
    Ok(())
}

/// An OTLP `AnyValue` as a whole number (`intValue` is a string in OTLP JSON).
fn any_int(f: Field, key: &str) -> Result<u64, JsonError> {
    let v = f.value;
    let inner = v
        .get("intValue")
        .or_else(|| v.get("doubleValue"))
        .or_else(|| v.get("stringValue"))
        .unwrap_or(v);
    match inner {
        Value::String(s) => s
            .trim()
            .parse::<u64>()
            .map_err(|_| f.error(format!("{key}: expected a whole number, got \"{s}\""))),
        other => Field { value: other, ..f }
            .int(0..=u64::MAX)
            .map_err(|e| f.error(format!("{key}: {}", e.what))),
    }
}

/// A time in nanoseconds, a whole number or a string of one (OTLP JSON's int64).
fn nanos(f: Field) -> Result<u64, JsonError> {
    match f.value {
        Value::String(s) => s.trim().parse::<u64>().map_err(|_| {
            f.error(format!(
                "expected a whole number of nanoseconds, got \"{s}\""
            ))
        }),
        _ => f.int(0..=u64::MAX),
    }
}

/// A span's token count attribute, kept when it is the first of its kind.
fn count(slot: &mut Option<u32>, f: Field, key: &str) -> Result<(), JsonError> {
    let n = any_int(f, key)?;
    if n > MAX_TOKENS {
        return Err(f.error(format!("{key}: {n} is too large (at most {MAX_TOKENS})")));
    }
    if slot.is_none() {
        *slot = Some(n as u32);
    }
    Ok(())
}

fn otel_span(span: &Obj) -> Result<Span, JsonError> {
    let mut input = None;
    let mut output = None;
    for (i, a) in array(span, "attributes")?.iter().enumerate() {
        let Some(key) = a.get("key").and_then(Value::as_str) else {
            continue;
        };
        let path = span.path(&format!("attributes[{i}].value"));
        let f = Field {
            place: &span.place,
            path: &path,
            value: a.get("value").unwrap_or(&Value::Null),
        };
        if INPUT_ATTRS.contains(&key) {
            count(&mut input, f, key)?;
        } else if OUTPUT_ATTRS.contains(&key) {
            count(&mut output, f, key)?;
        }
    }
    if input == Some(0) {
        return Err(span.error_here("an LLM span with 0 input tokens"));
    }
    if output == Some(0) {
        // A call that produced nothing still asks for one token.
        output = Some(1);
    }
    let trace = span.str("traceId")?.unwrap_or("").to_owned();
    if input.is_some() && trace.is_empty() {
        return Err(span.error_here("an LLM span without a traceId"));
    }
    let (start, end) = if input.is_some() {
        let start = span.req("startTimeUnixNano", nanos)?;
        let end = span.req("endTimeUnixNano", nanos)?;
        if end < start {
            return Err(span.error(
                "endTimeUnixNano",
                format!("{end} is before startTimeUnixNano {start}"),
            ));
        }
        (start, end)
    } else {
        (0, 0)
    };
    Ok(Span {
        trace,
        id: span.str("spanId")?.unwrap_or("").to_owned(),
        parent: span.str("parentSpanId")?.unwrap_or("").to_owned(),
        start,
        end,
        input,
        output,
        place: span.place.clone(),
        path: span.path.clone(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent_trace::tests::{call, fails, MS};
    use crate::agent_trace::*;

    fn span(
        trace: &str,
        id: &str,
        parent: &str,
        start_ms: u64,
        end_ms: u64,
        counts: Option<(&str, u32, &str, u32)>,
    ) -> Value {
        let mut attrs = vec![
            serde_json::json!({"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}}),
        ];
        if let Some((ik, i, ok, o)) = counts {
            attrs.push(serde_json::json!({"key": ik, "value": {"intValue": i.to_string()}}));
            attrs.push(serde_json::json!({"key": ok, "value": {"intValue": o}}));
        }
        serde_json::json!({
            "traceId": trace, "spanId": id, "parentSpanId": parent, "name": "chat",
            "startTimeUnixNano": (1_700_000_000_000u64 + start_ms) * 1_000_000,
            "endTimeUnixNano": ((1_700_000_000_000u64 + end_ms) * 1_000_000).to_string(),
            "attributes": attrs,
        })
    }

    #[test]
    fn otel_traces_are_sessions_of_their_innermost_llm_spans() {
        let g = |i, o| {
            Some((
                "gen_ai.usage.input_tokens",
                i,
                "gen_ai.usage.output_tokens",
                o,
            ))
        };
        let oi = |i, o| Some(("llm.token_count.prompt", i, "llm.token_count.completion", o));
        let spans = [
            span("t1", "root", "", 0, 900, None),
            span("t1", "s1", "root", 10, 110, g(100, 20)),
            // A framework span around the client's: only the inner one is a call.
            span("t1", "wrap", "root", 150, 300, g(130, 10)),
            span("t1", "s2", "wrap", 160, 290, g(130, 10)),
            span("t1", "s3", "root", 400, 500, g(60, 5)),
            span("t2", "x1", "", 50, 80, oi(40, 4)),
            span("t2", "x2", "", 70, 120, oi(42, 4)),
        ];
        let doc = serde_json::json!({"resourceSpans": [{"resource": {}, "scopeSpans": [
            {"scope": {"name": "a"}, "spans": spans[..4]},
            {"scope": {"name": "b"}, "spans": spans[4..]},
        ]}]});
        let text = doc.to_string();
        let s = parse(&text, None, DEFAULT_BLOCK_SIZE).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!((s[0].id.as_str(), s[0].at), ("t1", Duration::ZERO));
        assert_eq!(
            s[0].calls,
            [
                call(100, 20, Reuse::Tokens(0), 0),
                call(130, 10, Reuse::Previous, 50),
                call(60, 5, Reuse::Tokens(0), 110),
            ]
        );
        assert_eq!((s[1].id.as_str(), s[1].at), ("t2", MS * 40));
        // Overlapping calls wait nothing; 42 holds the 40-token prompt, not its reply.
        assert_eq!(s[1].calls[1], call(42, 4, Reuse::Tokens(40), 0));
        // One document per line, as the collector's file exporter writes.
        let lines = format!("{}\n{}\n", doc, serde_json::json!({"resourceSpans": []}));
        assert_eq!(parse(&lines, None, DEFAULT_BLOCK_SIZE).unwrap(), s);
    }

    #[test]
    fn otel_errors_say_which_span() {
        let g = Some(("gen_ai.usage.input_tokens", 5, "other", 1));
        let doc = serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": [span("t", "a", "", 0, 1, g)]}]}]});
        fails(
            &doc.to_string(),
            Format::Otel,
            "the export: field `resourceSpans[0].scopeSpans[0].spans[0]`: an input token count but no output count",
        );
        let mut sp = span(
            "t",
            "a",
            "",
            5,
            1,
            Some(("llm.token_count.prompt", 5, "llm.token_count.completion", 1)),
        );
        let doc = serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": [sp.clone()]}]}]});
        fails(
            &doc.to_string(),
            Format::Otel,
            "field `resourceSpans[0].scopeSpans[0].spans[0].endTimeUnixNano`: 1700000000001000000 is before",
        );
        sp["startTimeUnixNano"] = "soon".into();
        let doc = serde_json::json!({"resourceSpans": [{"scopeSpans": [{"spans": [sp]}]}]});
        fails(
            &doc.to_string(),
            Format::Otel,
            "spans[0].startTimeUnixNano`: expected a whole number of nanoseconds, got \"soon\"",
        );
        fails(
            r#"{"resourceSpans": [{"scopeSpans": 3}]}"#,
            Format::Otel,
            "the export: field `resourceSpans[0].scopeSpans`: expected an array, got a number",
        );
        fails(
            r#"{"resourceSpans": []}"#,
            Format::Otel,
            "no LLM spans with token counts",
        );
        fails(
            "{\"resourceSpans\": []}\n{\"resourceSpans\": [\n",
            Format::Otel,
            "line 2: not valid JSON",
        );
    }
}

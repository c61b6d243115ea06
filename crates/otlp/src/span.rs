//! One finished record as one OTLP span, a pure function: the GenAI conventions' names
//! and attributes, Cadence's stream figures as `cadence.*` attributes (by the same
//! per-request formulas as the report), the first chunk and each stall as events, and
//! times from the record's own clock moved to wall time by one offset, so a span and
//! its record agree to the nanosecond.

use crate::proto::{self, KeyValue, SpanKind, StatusCode, Value};
use cadence_core::per_request::{self, itl_gaps};
use cadence_core::stats::quantile_sorted;
use cadence_core::{Outcome, RequestRecord};
use cadence_wire::Api;

/// The most chunk events a span may carry (`--otlp-chunk-events`).
pub const MAX_CHUNK_EVENTS: u32 = 1_000;

/// The most stall events a span carries; more are counted in its
/// `dropped_events_count`.
pub const MAX_STALL_EVENTS: usize = 128;

/// What every span of a run shares: where its times start on the wall clock, what was
/// asked of whom, and which events to add.
#[derive(Debug, Clone)]
pub struct Shape {
    /// The wall-clock time of the run clock's origin, ns since the Unix epoch: a
    /// record's `t_ns` is at `origin_unix_ns + t_ns`.
    pub origin_unix_ns: u64,
    /// `gen_ai.operation.name`: `chat`, or `text_completion` for a completions API.
    pub operation: &'static str,
    /// `gen_ai.request.model`.
    pub model: String,
    /// `server.address` and `server.port` (no userinfo, no path).
    pub server: Option<(String, u16)>,
    /// Gaps strictly longer than this are stalls (the run's `--stall-threshold`).
    pub stall_threshold_ns: u64,
    /// An event for each of the first N chunks (0: none).
    pub chunk_events: u32,
    /// The span's kind: a client's request (bench, watch) or a server's (proxy, sim).
    pub kind: SpanKind,
    /// `cadence.target`: the watch target's name (its spans and series).
    pub target: Option<String>,
}

/// Which trace a span belongs to and where in it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanIds {
    /// The W3C trace id.
    pub trace_id: [u8; 16],
    /// This span's id.
    pub span_id: [u8; 8],
    /// The parent span's id, when it has one.
    pub parent: Option<[u8; 8]>,
}

/// The figures of one record the span carries, each by the report's formula.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Figures {
    /// First content-bearing chunk − sent, ms.
    pub ttft_ms: Option<f64>,
    /// End − sent, ms.
    pub e2e_ms: Option<f64>,
    /// The request's own ITL gaps: p50, p99 and max, ms.
    pub itl_ms: Option<[f64; 3]>,
    /// Time per output token after the first, ms.
    pub tpot_ms: Option<f64>,
    /// ITL gaps over the stall threshold: (index of the chunk ending it, gap in ns).
    pub stalls: Vec<(usize, u64)>,
}

/// The figures of `r` with stalls over `stall_threshold_ns`.
pub fn figures(r: &RequestRecord, stall_threshold_ns: u64) -> Figures {
    let mut bad = 0;
    let mut gaps: Vec<f64> = Vec::new();
    let mut stalls = Vec::new();
    for (g, c) in itl_gaps(r, &mut bad) {
        gaps.push(per_request::ms(g));
        if g > stall_threshold_ns {
            // The chunk's index in the record (itl_gaps hands out references into it);
            // looked up for stalls only, which are few.
            if let Some(i) = r.chunks.iter().position(|x| std::ptr::eq(x, c)) {
                stalls.push((i, g));
            }
        }
    }
    gaps.sort_by(f64::total_cmp);
    let itl_ms = (|| {
        Some([
            quantile_sorted(&gaps, 0.5)?,
            quantile_sorted(&gaps, 0.99)?,
            *gaps.last()?,
        ])
    })();
    Figures {
        ttft_ms: per_request::ttft_ms(r, &mut bad),
        e2e_ms: per_request::e2e_ms(r, &mut bad),
        itl_ms,
        tpot_ms: per_request::tpot_and_speed(r, &mut bad).map(|(t, _)| t),
        stalls,
    }
}

/// The model a record's span and metrics series name: the one a proxied request's body
/// asked for, else the run's (`gen_ai.request.model`).
pub fn model_of<'a>(r: &'a RequestRecord, shape: &'a Shape) -> &'a str {
    let asked = r.proxy.as_ref().and_then(|p| p.model.as_deref());
    asked.unwrap_or(&shape.model)
}

/// `gen_ai.operation.name` of a request in `api`'s dialect to `path`, as the GenAI
/// conventions name it: `chat` for a conversation of messages (chat completions,
/// Anthropic Messages, Responses, Realtime, Ollama's `/api/chat`), `text_completion`
/// for a prompt continued (completions, TGI's and SGLang's generate, KServe, llama.cpp's
/// `/completion`, Ollama's `/api/generate`). Their `generate_content` is Gemini's API,
/// which Cadence does not speak.
pub fn operation(api: Api, path: &str) -> &'static str {
    match api {
        Api::Chat | Api::Anthropic | Api::Responses | Api::Websocket => "chat",
        Api::Ollama if path.trim_end_matches('/').ends_with("/api/chat") => "chat",
        Api::Completions | Api::Ollama | Api::Generate | Api::Kserve | Api::Llamacpp => {
            "text_completion"
        }
    }
}

/// The operation a proxied request's path names (`None`: not proxied, or a path of no
/// dialect): a proxy's spans and series follow each request, not the run.
pub fn record_operation(r: &RequestRecord) -> Option<&'static str> {
    let path = &r.proxy.as_ref()?.path;
    Api::from_path(path).map(|api| operation(api, path))
}

/// A record's operation: its own ([`record_operation`]), else the run's.
fn operation_of(r: &RequestRecord, shape: &Shape) -> &'static str {
    record_operation(r).unwrap_or(shape.operation)
}

/// The span of a finished record; `None` for a request dropped before it was sent
/// (it never left the client) and for one with no time at all.
pub fn request_span(r: &RequestRecord, shape: &Shape, ids: SpanIds) -> Option<proto::Span> {
    if r.outcome == Outcome::Dropped {
        return None;
    }
    let start = r.sent_ns.or(r.scheduled_ns).or(r.end_ns)?;
    let end = r.end_ns.unwrap_or(start).max(start);
    let at = |t: u64| shape.origin_unix_ns.saturating_add(t);
    let f = figures(r, shape.stall_threshold_ns);
    let (events, dropped_events) = events(r, shape, &f, &at);
    Some(proto::Span {
        trace_id: ids.trace_id.to_vec(),
        span_id: ids.span_id.to_vec(),
        trace_state: String::new(),
        parent_span_id: ids.parent.map(|p| p.to_vec()).unwrap_or_default(),
        flags: 0x100 | 1,
        name: format!("{} {}", operation_of(r, shape), model_of(r, shape)),
        kind: shape.kind as i32,
        start_time_unix_nano: at(start),
        end_time_unix_nano: at(end),
        attributes: attributes(r, shape, &f),
        dropped_attributes_count: 0,
        events,
        dropped_events_count: dropped_events,
        status: Some(status(r)),
    })
}

fn status(r: &RequestRecord) -> proto::Status {
    if r.outcome == Outcome::Succeeded {
        return proto::Status {
            message: String::new(),
            code: StatusCode::Unset as i32,
        };
    }
    // The record's error is already redacted; a status line is a line, not a dump.
    let message: String = r
        .error
        .as_deref()
        .unwrap_or(r.outcome.name())
        .chars()
        .take(256)
        .collect();
    proto::Status {
        message,
        code: StatusCode::Error as i32,
    }
}

pub(crate) fn int(key: &str, v: u64) -> KeyValue {
    KeyValue::new(key, Value::Int(i64::try_from(v).unwrap_or(i64::MAX)))
}

fn double(key: &str, v: f64) -> KeyValue {
    KeyValue::new(key, Value::Double(v))
}

pub(crate) fn string(key: &str, v: &str) -> KeyValue {
    KeyValue::new(key, Value::String(v.to_owned()))
}

fn attributes(r: &RequestRecord, shape: &Shape, f: &Figures) -> Vec<KeyValue> {
    let mut a = vec![
        string("gen_ai.operation.name", operation_of(r, shape)),
        string("gen_ai.request.model", model_of(r, shape)),
    ];
    if let Some((host, port)) = &shape.server {
        a.push(string("server.address", host));
        a.push(int("server.port", u64::from(*port)));
    }
    if let Some(n) = r.input_tokens {
        a.push(int("gen_ai.usage.input_tokens", n));
    }
    let out = r.output_token_count();
    if r.outcome == Outcome::Succeeded || out.count > 0 {
        a.push(int("gen_ai.usage.output_tokens", out.count));
    }
    if let Some(reason) = &r.finish_reason {
        let one = proto::AnyValue {
            value: Some(Value::String(reason.clone())),
        };
        a.push(KeyValue::new(
            "gen_ai.response.finish_reasons",
            Value::Array(proto::ArrayValue { values: vec![one] }),
        ));
    }
    if r.outcome != Outcome::Succeeded {
        a.push(string("error.type", r.outcome.name()));
    }
    if let Some(s) = r.http_status {
        a.push(int("http.response.status_code", u64::from(s)));
    }
    if let Some(t) = &shape.target {
        a.push(string("cadence.target", t));
    }
    a.extend(cadence_attributes(r, f, out.source.name()));
    a
}

fn cadence_attributes(r: &RequestRecord, f: &Figures, token_source: &str) -> Vec<KeyValue> {
    let mut a = vec![
        int("cadence.request.index", r.index),
        int("cadence.level", u64::from(r.level)),
        string("cadence.outcome", r.outcome.name()),
        int("cadence.chunks", r.chunk_count()),
        string("cadence.token_source", token_source),
        int("cadence.stalls", f.stalls.len() as u64),
    ];
    let optional = [
        ("cadence.ttft_ms", f.ttft_ms),
        ("cadence.e2e_ms", f.e2e_ms),
        ("cadence.itl_p50_ms", f.itl_ms.map(|x| x[0])),
        ("cadence.itl_p99_ms", f.itl_ms.map(|x| x[1])),
        ("cadence.itl_max_ms", f.itl_ms.map(|x| x[2])),
        ("cadence.tpot_ms", f.tpot_ms),
    ];
    a.extend(optional.iter().filter_map(|(k, v)| v.map(|v| double(k, v))));
    if let Some(c) = r.clock {
        a.push(string("cadence.clock", c.name()));
    }
    if r.warmup {
        a.push(KeyValue::new("cadence.warmup", Value::Bool(true)));
    }
    if let Some(s) = r.session {
        a.push(int("cadence.session", s));
    }
    if let Some(t) = r.turn {
        a.push(int("cadence.turn", u64::from(t)));
    }
    if let Some(p) = &r.proxy {
        a.push(string("cadence.request_id", &p.request_id));
    }
    a
}

/// The first chunk's event, one per stall (at the chunk that ended it) and, when asked
/// for, one per chunk up to the ceiling; with the number left out.
fn events(
    r: &RequestRecord,
    shape: &Shape,
    f: &Figures,
    at: &dyn Fn(u64) -> u64,
) -> (Vec<proto::Event>, u32) {
    let mut out = Vec::new();
    let event = |name: &str, t: u64, attributes: Vec<KeyValue>| proto::Event {
        time_unix_nano: at(t),
        name: name.to_owned(),
        attributes,
        dropped_attributes_count: 0,
    };
    if let Some(c) = r.chunks.first() {
        let mut attrs = Vec::new();
        if let Some(t) = f.ttft_ms {
            attrs.push(double("cadence.ttft_ms", t));
        }
        out.push(event("cadence.first_chunk", c.t_ns(), attrs));
    }
    for &(i, gap) in f.stalls.iter().take(MAX_STALL_EVENTS) {
        let attrs = vec![
            double("cadence.gap_ms", per_request::ms(gap)),
            int("cadence.chunk_index", i as u64),
        ];
        out.push(event("cadence.stall", r.chunks[i].t_ns(), attrs));
    }
    let wanted = shape.chunk_events.min(MAX_CHUNK_EVENTS) as usize;
    for (i, c) in r.chunks.iter().take(wanted).enumerate() {
        let mut attrs = vec![int("cadence.chunk_index", i as u64)];
        if let Some(k) = c.tokens() {
            attrs.push(int("cadence.tokens", u64::from(k)));
        }
        out.push(event("cadence.chunk", c.t_ns(), attrs));
    }
    let left_out = f.stalls.len().saturating_sub(MAX_STALL_EVENTS)
        + if wanted > 0 {
            r.chunks.len().saturating_sub(wanted)
        } else {
            0
        };
    (out, u32::try_from(left_out).unwrap_or(u32::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_core::{Chunk, StampClock, TokenCount, TokenSource};

    const MS: u64 = 1_000_000;

    fn shape() -> Shape {
        Shape {
            origin_unix_ns: 1_700_000_000_000_000_000,
            operation: "chat",
            model: "m1".into(),
            server: Some(("127.0.0.1".into(), 8000)),
            stall_threshold_ns: 500 * MS,
            chunk_events: 0,
            kind: SpanKind::Client,
            target: None,
        }
    }

    fn ids() -> SpanIds {
        SpanIds {
            trace_id: [7; 16],
            span_id: [9; 8],
            parent: None,
        }
    }

    /// Sent at 10 ms; chunks at 40, 50, 650 (a 600 ms stall), 660 ms; ended at 661 ms.
    fn record() -> RequestRecord {
        let mut r = RequestRecord::new(3, Outcome::Succeeded);
        r.level = 1;
        r.sent_ns = Some(10 * MS);
        r.chunks = [40, 50, 650, 660]
            .map(|t| Chunk(t * MS + 123, Some(1)))
            .to_vec();
        r.end_ns = Some(661 * MS + 7);
        r.input_tokens = Some(12);
        r.output_tokens = Some(TokenCount {
            count: 4,
            source: TokenSource::Usage,
        });
        r.finish_reason = Some("stop".into());
        r.http_status = Some(200);
        r.clock = Some(StampClock::Kernel);
        r
    }

    fn attr<'a>(s: &'a proto::Span, key: &str) -> Option<&'a Value> {
        s.attributes.iter().find(|a| a.key == key)?.value()
    }

    fn num(s: &proto::Span, key: &str) -> f64 {
        match attr(s, key) {
            Some(Value::Double(d)) => *d,
            Some(Value::Int(i)) => *i as f64,
            other => panic!("{key}: {other:?}"),
        }
    }

    #[test]
    fn a_record_becomes_a_genai_span_with_its_figures_and_its_own_times() {
        let s = request_span(&record(), &shape(), ids()).unwrap();
        let o = shape().origin_unix_ns;
        assert_eq!(s.name, "chat m1");
        assert_eq!(s.kind, SpanKind::Client as i32);
        assert_eq!(s.start_time_unix_nano, o + 10 * MS);
        assert_eq!(s.end_time_unix_nano, o + 661 * MS + 7);
        for (key, want) in [
            ("gen_ai.operation.name", "chat"),
            ("gen_ai.request.model", "m1"),
            ("cadence.token_source", "usage"),
            ("cadence.outcome", "succeeded"),
        ] {
            assert_eq!(attr(&s, key), Some(&Value::String(want.into())), "{key}");
        }
        assert_eq!(num(&s, "gen_ai.usage.input_tokens"), 12.0);
        assert_eq!(num(&s, "gen_ai.usage.output_tokens"), 4.0);
        match attr(&s, "gen_ai.response.finish_reasons") {
            Some(Value::Array(a)) => {
                assert_eq!(a.values[0].value, Some(Value::String("stop".into())))
            }
            other => panic!("{other:?}"),
        }
        assert!(attr(&s, "error.type").is_none());
        assert_eq!(num(&s, "server.port"), 8000.0);
        // TTFT 30.000123 ms; gaps 10, 600, 10 ms: p50 10, p99 = 10 + 0.98·(600 − 10), max 600.
        assert_eq!(num(&s, "cadence.ttft_ms"), 30.000123);
        assert_eq!(num(&s, "cadence.itl_p50_ms"), 10.0);
        assert!((num(&s, "cadence.itl_p99_ms") - 588.2).abs() < 1e-9);
        assert_eq!(num(&s, "cadence.itl_max_ms"), 600.0);
        assert_eq!(num(&s, "cadence.tpot_ms"), 620.0 / 3.0);
        assert_eq!(num(&s, "cadence.chunks"), 4.0);
        assert_eq!(num(&s, "cadence.stalls"), 1.0);
        // The first chunk and the stall, at their chunks' own times.
        let ev: Vec<(&str, u64)> = s
            .events
            .iter()
            .map(|e| (e.name.as_str(), e.time_unix_nano))
            .collect();
        assert_eq!(
            ev,
            vec![
                ("cadence.first_chunk", o + 40 * MS + 123),
                ("cadence.stall", o + 650 * MS + 123)
            ]
        );
        assert_eq!(s.status.unwrap().code, StatusCode::Unset as i32);
    }

    #[test]
    fn a_proxied_request_names_the_model_its_body_asked_for() {
        let mut r = record();
        let s = request_span(&r, &shape(), ids()).unwrap();
        assert_eq!(
            s.name, "chat m1",
            "the run's model when the record names none"
        );
        r.proxy = Some(Box::new(cadence_core::ProxyInfo {
            model: Some("llama-3-8b".into()),
            ..Default::default()
        }));
        let s = request_span(&r, &shape(), ids()).unwrap();
        assert_eq!(s.name, "chat llama-3-8b");
        assert_eq!(
            attr(&s, "gen_ai.request.model"),
            Some(&Value::String("llama-3-8b".into()))
        );
    }

    #[test]
    fn a_proxied_requests_operation_follows_its_path() {
        let mut r = record();
        for (path, op) in [
            ("/v1/chat/completions", "chat"),
            ("/v1/messages", "chat"),
            ("/v1/completions", "text_completion"),
            ("/generate_stream", "text_completion"),
            ("/api/generate", "text_completion"),
            ("/api/chat", "chat"),
            ("/some/route", "chat"),
        ] {
            r.proxy = Some(Box::new(cadence_core::ProxyInfo {
                path: path.into(),
                model: Some("m".into()),
                ..Default::default()
            }));
            let s = request_span(&r, &shape(), ids()).unwrap();
            assert_eq!(s.name, format!("{op} m"), "{path}");
            let want = Value::String(op.into());
            assert_eq!(attr(&s, "gen_ai.operation.name"), Some(&want), "{path}");
        }
    }

    #[test]
    fn chunk_events_are_bounded_and_what_is_left_out_is_counted() {
        let mut sh = shape();
        for (asked, kept, left_out) in [(2, 2, 2), (u32::MAX, 4, 0)] {
            sh.chunk_events = asked;
            let s = request_span(&record(), &sh, ids()).unwrap();
            let chunks = s.events.iter().filter(|e| e.name == "cadence.chunk");
            assert_eq!((chunks.count(), s.dropped_events_count), (kept, left_out));
        }
    }

    #[test]
    fn a_failure_carries_its_class_and_a_dropped_request_makes_no_span() {
        let mut r = RequestRecord::new(0, Outcome::Http5xx);
        r.sent_ns = Some(5);
        r.end_ns = Some(9);
        r.http_status = Some(503);
        r.error = Some("HTTP 503: overloaded".into());
        let s = request_span(&r, &shape(), ids()).unwrap();
        assert_eq!(
            attr(&s, "error.type"),
            Some(&Value::String("http_5xx".into()))
        );
        assert_eq!(num(&s, "http.response.status_code"), 503.0);
        assert!(attr(&s, "gen_ai.usage.output_tokens").is_none());
        let st = s.status.unwrap();
        assert_eq!(
            (st.code, st.message.as_str()),
            (StatusCode::Error as i32, "HTTP 503: overloaded")
        );
        assert!(request_span(&RequestRecord::new(1, Outcome::Dropped), &shape(), ids()).is_none());
    }

    #[test]
    fn protobuf_and_json_carry_the_same_span() {
        let s = request_span(&record(), &shape(), ids()).unwrap();
        let req = crate::export::export_request("svc", vec![s.clone()]);
        let bytes = prost::Message::encode_to_vec(&req);
        let back =
            <proto::ExportTraceServiceRequest as prost::Message>::decode(&bytes[..]).unwrap();
        assert_eq!(back, req);
        let j = crate::json::request(&req);
        let js = &j["resourceSpans"][0]["scopeSpans"][0]["spans"][0];
        assert_eq!(js["traceId"], "07".repeat(16));
        assert_eq!(js["spanId"], "09".repeat(8));
        assert_eq!(js["startTimeUnixNano"], s.start_time_unix_nano.to_string());
        assert_eq!(js["kind"], 3);
        let ttft = js["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["key"] == "cadence.ttft_ms")
            .unwrap();
        assert_eq!(ttft["value"]["doubleValue"], 30.000123);
        assert_eq!(
            j["resourceSpans"][0]["resource"]["attributes"][0]["value"]["stringValue"],
            "svc"
        );
    }
}

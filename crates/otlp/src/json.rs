//! OTLP/JSON (`--otlp-protocol http/json`): the same messages as the protobuf body, in
//! the protocol's JSON mapping (lowerCamelCase names, trace and span ids as hex, 64-bit
//! integers as decimal strings, enums as numbers).

use crate::proto::{self, AnyValue, KeyValue, Value};
use serde_json::{json, Map, Value as Json};

/// The request as OTLP/JSON.
pub fn request(r: &proto::ExportTraceServiceRequest) -> Json {
    json!({"resourceSpans": r.resource_spans.iter().map(resource_spans).collect::<Vec<_>>()})
}

fn resource_spans(rs: &proto::ResourceSpans) -> Json {
    let resource = rs
        .resource
        .as_ref()
        .map(|r| json!({"attributes": attrs(&r.attributes)}));
    let scopes: Vec<Json> = rs
        .scope_spans
        .iter()
        .map(|ss| {
            let scope = ss
                .scope
                .as_ref()
                .map(|s| json!({"name": s.name, "version": s.version}));
            json!({"scope": scope, "spans": ss.spans.iter().map(span).collect::<Vec<_>>()})
        })
        .collect();
    json!({"resource": resource, "scopeSpans": scopes})
}

/// Lower-case hex, as OTLP/JSON writes ids.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn span(s: &proto::Span) -> Json {
    let mut o = Map::new();
    o.insert("traceId".into(), hex(&s.trace_id).into());
    o.insert("spanId".into(), hex(&s.span_id).into());
    if !s.trace_state.is_empty() {
        o.insert("traceState".into(), s.trace_state.clone().into());
    }
    if !s.parent_span_id.is_empty() {
        o.insert("parentSpanId".into(), hex(&s.parent_span_id).into());
    }
    o.insert("flags".into(), s.flags.into());
    o.insert("name".into(), s.name.clone().into());
    o.insert("kind".into(), s.kind.into());
    o.insert(
        "startTimeUnixNano".into(),
        s.start_time_unix_nano.to_string().into(),
    );
    o.insert(
        "endTimeUnixNano".into(),
        s.end_time_unix_nano.to_string().into(),
    );
    o.insert("attributes".into(), attrs(&s.attributes));
    let events: Vec<Json> = s
        .events
        .iter()
        .map(|e| {
            json!({"timeUnixNano": e.time_unix_nano.to_string(), "name": e.name,
                   "attributes": attrs(&e.attributes)})
        })
        .collect();
    o.insert("events".into(), events.into());
    if s.dropped_events_count > 0 {
        o.insert("droppedEventsCount".into(), s.dropped_events_count.into());
    }
    if let Some(st) = &s.status {
        o.insert(
            "status".into(),
            json!({"code": st.code, "message": st.message}),
        );
    }
    Json::Object(o)
}

/// Attributes as OTLP/JSON writes them.
pub(crate) fn attrs(a: &[KeyValue]) -> Json {
    a.iter()
        .map(|kv| json!({"key": kv.key, "value": any(kv.value.as_ref())}))
        .collect()
}

fn any(v: Option<&AnyValue>) -> Json {
    match v.and_then(|v| v.value.as_ref()) {
        None => json!({}),
        Some(Value::String(s)) => json!({"stringValue": s}),
        Some(Value::Bool(b)) => json!({"boolValue": b}),
        Some(Value::Int(i)) => json!({"intValue": i.to_string()}),
        Some(Value::Double(d)) => json!({"doubleValue": d}),
        Some(Value::Array(a)) => {
            json!({"arrayValue": {"values": a.values.iter().map(|v| any(Some(v))).collect::<Vec<_>>()}})
        }
    }
}

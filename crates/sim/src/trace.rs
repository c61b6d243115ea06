//! `cadence sim --otlp`: the server's own span of each request, as vLLM's tracing
//! makes one (`llm_request`, a child of the caller's `traceparent`, its queue, prefill
//! and decode times under vLLM's attribute names), from the sim's known schedule, so
//! a client → proxy → server trace can be seen locally with no GPU.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use cadence_base::trace::Propagation;
use cadence_otlp::proto::{self, KeyValue, SpanKind, StatusCode, Value};
use cadence_otlp::SpanQueue;

use crate::dialects::Timing;

/// Where the sim's spans go and which traces it starts.
#[derive(Debug, Clone)]
pub struct Tracer {
    queue: SpanQueue,
    propagation: Propagation,
}

/// What the span of one request says: who asked for what, and the schedule it got.
#[derive(Debug, Clone)]
pub struct Served<'a> {
    /// The request's index (its `x-cadence-request`, else the arrival counter).
    pub request: u64,
    /// `gen_ai.request.id`: the response's id.
    pub id: &'a str,
    /// `chat` or `text_completion`.
    pub operation: &'static str,
    /// The model answering.
    pub model: &'a str,
    /// The request's `max_tokens`.
    pub max_tokens: u32,
    /// Prompt and completion tokens.
    pub tokens: (u32, u32),
    /// When the request came, ns since the Unix epoch.
    pub received_unix_ns: u64,
    /// From its arrival to the start of its schedule (a `header_delay` fault's wait).
    pub queued: Duration,
    /// Its prefill (up to the first token) and decode (first token to last).
    pub timing: Timing,
}

impl Tracer {
    /// Spans offered to `queue`; traces the sim starts (a request with no
    /// `traceparent`) sampled by `propagation`'s share.
    pub fn new(queue: SpanQueue, propagation: Propagation) -> Tracer {
        Tracer { queue, propagation }
    }

    /// Offers the span of `served`, a child of the `incoming` `traceparent`'s span,
    /// when its trace is sampled.
    pub fn served(&self, incoming: Option<&str>, served: &Served<'_>) {
        let ids = self.propagation.continued(served.request, incoming);
        if ids.sampled {
            self.queue.offer(span(served, ids));
        }
    }
}

/// Now on the wall clock, less `ago`: when something that happened `ago` ago did.
pub fn unix_ns_ago(ago: Duration) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    now.saturating_sub(ago.as_nanos() as u64)
}

/// The span vLLM's `--otlp-traces-endpoint` would send for `s`, with `ids`.
pub fn span(s: &Served<'_>, ids: cadence_base::trace::TraceIds) -> proto::Span {
    let secs = |d: Duration| Value::Double(d.as_secs_f64());
    let t = s.timing;
    let ttft = s.queued + t.prompt;
    let e2e = ttft + t.decode;
    let int = |v: u32| Value::Int(i64::from(v));
    let text = |v: &str| Value::String(v.to_owned());
    let attributes = vec![
        KeyValue::new("gen_ai.operation.name", text(s.operation)),
        KeyValue::new("gen_ai.request.id", text(s.id)),
        KeyValue::new("gen_ai.request.model", text(s.model)),
        KeyValue::new("gen_ai.response.model", text(s.model)),
        KeyValue::new("gen_ai.request.max_tokens", int(s.max_tokens)),
        KeyValue::new("gen_ai.usage.prompt_tokens", int(s.tokens.0)),
        KeyValue::new("gen_ai.usage.completion_tokens", int(s.tokens.1)),
        KeyValue::new("gen_ai.latency.time_in_queue", secs(s.queued)),
        KeyValue::new("gen_ai.latency.time_to_first_token", secs(ttft)),
        KeyValue::new("gen_ai.latency.e2e", secs(e2e)),
        KeyValue::new("gen_ai.latency.time_in_model_prefill", secs(t.prompt)),
        KeyValue::new("gen_ai.latency.time_in_model_decode", secs(t.decode)),
        KeyValue::new(
            "gen_ai.latency.time_in_model_inference",
            secs(t.prompt + t.decode),
        ),
        KeyValue::new("cadence.request.index", Value::Int(s.request as i64)),
    ];
    proto::Span {
        trace_id: ids.trace_id.to_vec(),
        span_id: ids.span_id.to_vec(),
        trace_state: String::new(),
        parent_span_id: ids.parent.map(|p| p.to_vec()).unwrap_or_default(),
        flags: 0x100 | 1,
        name: "llm_request".into(),
        kind: SpanKind::Server as i32,
        start_time_unix_nano: s.received_unix_ns,
        end_time_unix_nano: s.received_unix_ns + e2e.as_nanos() as u64,
        attributes,
        dropped_attributes_count: 0,
        events: Vec::new(),
        dropped_events_count: 0,
        status: Some(proto::Status {
            message: String::new(),
            code: StatusCode::Unset as i32,
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_base::trace::TraceIds;

    #[test]
    fn the_span_holds_the_schedule_under_vllms_names_as_a_child_of_the_caller() {
        let served = Served {
            request: 3,
            id: "chatcmpl-3",
            operation: "chat",
            model: "m",
            max_tokens: 8,
            tokens: (5, 8),
            received_unix_ns: 1_000_000_000,
            queued: Duration::from_millis(2),
            timing: Timing {
                queue: Duration::ZERO,
                prompt: Duration::from_millis(10),
                decode: Duration::from_millis(35),
                spec: None,
            },
        };
        let ids = TraceIds {
            trace_id: [1; 16],
            span_id: [2; 8],
            parent: Some([3; 8]),
            sampled: true,
        };
        let s = span(&served, ids);
        assert_eq!(
            (s.name.as_str(), s.kind),
            ("llm_request", SpanKind::Server as i32)
        );
        assert_eq!((s.trace_id, s.parent_span_id), (vec![1; 16], vec![3; 8]));
        assert_eq!(s.start_time_unix_nano, 1_000_000_000);
        assert_eq!(s.end_time_unix_nano, 1_047_000_000);
        let get = |k: &str| {
            let kv = s.attributes.iter().find(|a| a.key == k).unwrap();
            kv.value.clone().and_then(|v| v.value).unwrap()
        };
        assert_eq!(get("gen_ai.latency.time_in_queue"), Value::Double(0.002));
        assert_eq!(
            get("gen_ai.latency.time_to_first_token"),
            Value::Double(0.012)
        );
        assert_eq!(get("gen_ai.latency.e2e"), Value::Double(0.047));
        assert_eq!(
            get("gen_ai.latency.time_in_model_prefill"),
            Value::Double(0.01)
        );
        assert_eq!(
            get("gen_ai.latency.time_in_model_decode"),
            Value::Double(0.035)
        );
        assert_eq!(get("gen_ai.usage.completion_tokens"), Value::Int(8));
    }
}

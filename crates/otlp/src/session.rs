//! A session's waterfall: a parent span per multi-turn session or agent loop (its
//! steps' spans are its children, by the ids their `traceparent` carried) and a span
//! for each tool wait between steps, so a tracing UI draws the session as it ran.

use crate::proto::{self, KeyValue, SpanKind, Value};
use crate::span::Shape;
use cadence_core::RequestRecord;
use std::collections::HashMap;

/// Sessions held open at once at most; a session past it gets no parent span (its
/// steps are still exported).
pub const MAX_OPEN_SESSIONS: usize = 100_000;

/// One open session: what its parent span will say.
#[derive(Debug, Clone)]
struct Open {
    trace_id: [u8; 16],
    span_id: [u8; 8],
    start_ns: u64,
    end_ns: u64,
    steps: u64,
    agent: bool,
}

/// The open sessions, keyed by session number.
#[derive(Debug, Default)]
pub struct Sessions {
    open: HashMap<u64, Open>,
}

pub(crate) fn span(
    ids: ([u8; 16], [u8; 8], Option<[u8; 8]>),
    name: String,
    (start, end): (u64, u64),
    attributes: Vec<KeyValue>,
    kind: SpanKind,
) -> proto::Span {
    proto::Span {
        trace_id: ids.0.to_vec(),
        span_id: ids.1.to_vec(),
        parent_span_id: ids.2.map(|p| p.to_vec()).unwrap_or_default(),
        flags: 0x100 | 1,
        name,
        kind: kind as i32,
        start_time_unix_nano: start,
        end_time_unix_nano: end.max(start),
        attributes,
        ..Default::default()
    }
}

impl Sessions {
    /// Takes step `r` of a session (its trace ids set, a parent among them): the tool
    /// wait before it as a span (`execute_tool`), and the session's parent span when
    /// this step ends it (an agent step whose reply made no call).
    pub fn step(&mut self, r: &RequestRecord, shape: &Shape, out: &mut Vec<proto::Span>) {
        let (Some(session), Some(ids)) = (r.session, r.trace) else {
            return;
        };
        let Some(parent) = ids.parent else {
            return;
        };
        let at = |t: u64| shape.origin_unix_ns.saturating_add(t);
        let (start, end) = match (r.sent_ns, r.end_ns) {
            (Some(s), Some(e)) => (s, e),
            _ => return,
        };
        if let Some(wait) = r.tool_wait_ns.filter(|&w| w > 0) {
            let mut id = ids.span_id;
            id[0] ^= 0x70;
            let attrs = vec![
                KeyValue::new(
                    "gen_ai.operation.name",
                    Value::String("execute_tool".into()),
                ),
                KeyValue::new("cadence.session", Value::Int(session as i64)),
            ];
            let when = (at(start.saturating_sub(wait)), at(start));
            let name = "execute_tool".to_owned();
            out.push(span(
                (ids.trace_id, id, Some(parent)),
                name,
                when,
                attrs,
                SpanKind::Internal,
            ));
        }
        if !self.open.contains_key(&session) && self.open.len() >= MAX_OPEN_SESSIONS {
            return;
        }
        let o = self.open.entry(session).or_insert(Open {
            trace_id: ids.trace_id,
            span_id: parent,
            start_ns: start.saturating_sub(r.tool_wait_ns.unwrap_or(0)),
            end_ns: end,
            steps: 0,
            agent: false,
        });
        o.start_ns = o.start_ns.min(start);
        o.end_ns = o.end_ns.max(end);
        o.steps += 1;
        o.agent |= r.tool_calls.is_some();
        if r.tool_calls == Some(0) || r.tool_calls_cut {
            if let Some(o) = self.open.remove(&session) {
                out.push(session_span(session, &o, shape));
            }
        }
    }

    /// The parent spans of every session still open (at the end of the run).
    pub fn close_all(&mut self, shape: &Shape) -> Vec<proto::Span> {
        let mut left: Vec<(u64, Open)> = self.open.drain().collect();
        left.sort_by_key(|(s, _)| *s);
        left.iter()
            .map(|(s, o)| session_span(*s, o, shape))
            .collect()
    }
}

fn session_span(session: u64, o: &Open, shape: &Shape) -> proto::Span {
    let at = |t: u64| shape.origin_unix_ns.saturating_add(t);
    let op = if o.agent { "invoke_agent" } else { "chat" };
    let attrs = vec![
        KeyValue::new("gen_ai.operation.name", Value::String(op.into())),
        KeyValue::new("gen_ai.conversation.id", Value::String(session.to_string())),
        KeyValue::new("cadence.session", Value::Int(session as i64)),
        KeyValue::new("cadence.steps", Value::Int(o.steps as i64)),
    ];
    let name = format!("{op} session {session}");
    let when = (at(o.start_ns), at(o.end_ns));
    span(
        (o.trace_id, o.span_id, None),
        name,
        when,
        attrs,
        SpanKind::Internal,
    )
}

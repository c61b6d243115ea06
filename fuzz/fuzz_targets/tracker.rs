//! The stream tracker, every dialect in both framings, strict or not: the same record,
//! text, reasoning, tool-call events and assembled tool calls however the body is cut
//! into reads (only the read counters may differ). One whole event per read takes a
//! path that skips the SSE decoder; cut reads take the decoder: the two agree.
#![no_main]

use cadence_base::{Outcome, RequestRecord};
use cadence_fuzz::{header, same_however_cut};
use cadence_wire::tool_calls::{assemble, ToolCall};
use cadence_wire::{Api, Framing, StreamText, StreamTracker, TrackerConfig};
use libfuzzer_sys::fuzz_target;

/// The body's record (read counters zeroed), its text and its tool calls.
type Outcomes = (RequestRecord, StreamText, Vec<ToolCall>);

fn track(config: TrackerConfig, keep: Option<usize>, feeds: &[&[u8]]) -> Outcomes {
    let mut tr = StreamTracker::new(config);
    tr.keep_tool_events();
    if let Some(max) = keep {
        tr.keep_chunks(max);
    }
    let mut rec = RequestRecord::new(0, Outcome::TransportError);
    for f in feeds {
        if tr.feed(1, f, &mut rec) == cadence_wire::Flow::Stop {
            break;
        }
    }
    tr.finish(2, &mut rec);
    rec.counters.reads = 0;
    rec.counters.coalesced = 0;
    let text = tr.take_text();
    let calls = assemble(config.api, &text.tool_events);
    (rec, text, calls)
}

fuzz_target!(|data: &[u8]| {
    let Some((sel, seed, body)) = header(data) else {
        return;
    };
    let api = Api::ALL[usize::from(sel) % Api::ALL.len()];
    let sel = sel / Api::ALL.len() as u8;
    let config = TrackerConfig {
        api,
        framing: if sel & 1 == 0 {
            Framing::Sse
        } else {
            Framing::Ndjson
        },
        strict: sel & 2 != 0,
    };
    let keep = (sel & 4 != 0).then_some(2);
    same_however_cut(body, seed, |feeds| track(config, keep, feeds));
});

//! The client's stream parser against the sim's tool-call replies: in chat,
//! Anthropic Messages and Responses a reply of tool calls is output (TTFT at the
//! first call's first chunk, every argument fragment a chunk, the reply's tokens
//! counted), so agent steps are timed like text steps.

use std::time::Duration;

use cadence_core::Outcome;
use cadence_sim::openai::Dialect;
use cadence_sim::script::{self, StreamSpec};
use cadence_sim::tools::{plan_calls, ToolPolicy, Tools};
use cadence_sim::{plan, Dist, Overrides, SimConfig};
use cadence_wire::{Api, Framing, StreamTracker, TrackerConfig};
use serde_json::json;

const TOKENS: u32 = 6;

fn record(dialect: Dialect, api: Api, parallel: u32) -> cadence_core::RequestRecord {
    let config = SimConfig {
        ttft: Dist::Fixed(Duration::from_millis(50)),
        itl: Dist::Fixed(Duration::from_millis(10)),
        ..SimConfig::default()
    };
    let plan = plan(&config, 0, TOKENS, &Overrides::default());
    let declared = json!([{"type": "function", "name": "grep",
        "parameters": {"type": "object", "properties": {"pattern": {}, "path": {}}}}]);
    let tools = Tools::parse(Some(&declared), Some(&json!("required")), true)
        .unwrap()
        .unwrap();
    let policy = ToolPolicy {
        probability: 0.7,
        parallel,
    };
    let calls = plan_calls(&tools, policy, 0, 0, dialect, TOKENS).unwrap();
    let script = script::build(&StreamSpec {
        dialect,
        fault: None,
        plan: &plan,
        id: "x",
        created: 0,
        model: "m",
        prompt_tokens: 3,
        include_usage: true,
        continuous_usage: false,
        token_ids: false,
        fault_after: None,
        silence: Duration::from_secs(1),
        calls: Some(&calls),
    });
    let mut tracker = StreamTracker::new(TrackerConfig {
        api,
        framing: Framing::Sse,
        strict: true,
    });
    let mut rec = cadence_core::RequestRecord::new(0, Outcome::TransportError);
    let mut end = 0;
    for f in &script.frames {
        end = f.at.as_nanos() as u64;
        tracker.feed(end, &f.bytes, &mut rec);
    }
    tracker.finish(end + 1, &mut rec);
    rec
}

#[test]
fn tool_call_replies_are_output_in_every_dialect() {
    for (dialect, api, finish) in [
        (Dialect::Chat, Api::Chat, "tool_calls"),
        (Dialect::Anthropic, Api::Anthropic, "tool_use"),
        (Dialect::Responses, Api::Responses, "completed"),
    ] {
        for parallel in [1, 2] {
            let rec = record(dialect, api, parallel);
            assert_eq!(rec.outcome, Outcome::Succeeded, "{dialect:?}: {rec:?}");
            let first = rec.chunks.first().expect("output chunks").t_ns();
            assert_eq!(
                first, 50_000_000,
                "{dialect:?}: TTFT at the first call chunk"
            );
            let last = rec.chunks.last().unwrap().t_ns();
            assert_eq!(last, 100_000_000, "{dialect:?}: the last fragment");
            let times: std::collections::BTreeSet<u64> =
                rec.chunks.iter().map(|c| c.t_ns()).collect();
            assert_eq!(times.len(), TOKENS as usize, "{dialect:?}: one per token");
            assert_eq!(
                rec.output_tokens.map(|t| t.count),
                Some(TOKENS as u64),
                "{dialect:?}"
            );
            assert_eq!(rec.finish_reason.as_deref(), Some(finish), "{dialect:?}");
            assert_eq!(rec.first_content_ns, None, "{dialect:?}: no visible text");
        }
    }
}

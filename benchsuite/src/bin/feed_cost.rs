//! A fixed amount of tracker work for counting instructions per chunk under callgrind:
//! `REQUESTS` chat streams shaped as the built-in simulator writes them (a role chunk,
//! `CHUNKS` content chunks, the last with a finish reason, a usage chunk, `[DONE]`),
//! each event in a read of its own, each stream with a fresh tracker and record as a
//! client makes them.
//!
//! ```sh
//! cargo build --release -p cadence-benchsuite --bin feed_cost
//! valgrind --tool=callgrind --callgrind-out-file=cg.out target/release/feed_cost 200 64
//! callgrind_annotate --inclusive=yes cg.out | grep 'StreamTracker::feed '
//! ```
//! and divide `feed`'s inclusive count by the chunks it prints. A third argument,
//! `hint`, calls `expect_chunks` with the chunk count first, as `cadence bench` does
//! with a request's `max_tokens`.

use cadence_core::{Outcome, RequestRecord};
use cadence_wire::{Api, Flow, Framing, StreamTracker, TrackerConfig};
use std::hint::black_box;

const WORDS: [&str; 8] = [
    " hello", " world", ",", " the", " quick", " brown", " fox", " jumps",
];

fn reads(chunks: usize) -> Vec<Vec<u8>> {
    let head = r#"data: {"id":"chatcmpl-cadence-0","object":"chat.completion.chunk","created":1795625586,"model":"m","choices":[{"index":0,"delta":"#;
    let mut reads = vec![format!(
        "{head}{{\"role\":\"assistant\",\"content\":\"\"}},\"logprobs\":null,\"finish_reason\":null}}]}}\n\n"
    )];
    for i in 0..chunks {
        let finish = if i + 1 == chunks {
            "\"length\""
        } else {
            "null"
        };
        reads.push(format!(
            "{head}{{\"content\":\"{}\"}},\"logprobs\":null,\"finish_reason\":{finish}}}]}}\n\n",
            WORDS[i % WORDS.len()]
        ));
    }
    reads.push(format!(
        "data: {{\"id\":\"chatcmpl-cadence-0\",\"object\":\"chat.completion.chunk\",\"created\":1795625586,\"model\":\"m\",\"choices\":[],\"usage\":{{\"prompt_tokens\":12,\"completion_tokens\":{chunks},\"total_tokens\":{}}}}}\n\n",
        chunks + 12
    ));
    reads.push("data: [DONE]\n\n".to_owned());
    reads.into_iter().map(String::into_bytes).collect()
}

fn main() {
    let mut args = std::env::args().skip(1);
    let requests: usize = args.next().map_or(200, |a| a.parse().expect("requests"));
    let chunks: usize = args.next().map_or(64, |a| a.parse().expect("chunks"));
    let hint = args.next().as_deref() == Some("hint");
    let reads = reads(chunks);
    let mut total = 0usize;
    for _ in 0..requests {
        let mut tracker = StreamTracker::new(TrackerConfig {
            api: Api::Chat,
            framing: Framing::Sse,
            strict: false,
        });
        if hint {
            tracker.expect_chunks(chunks as u32);
        }
        let mut rec = RequestRecord::new(0, Outcome::Truncated);
        for (i, r) in reads.iter().enumerate() {
            let flow = tracker.feed(i as u64 * 1000, black_box(r), &mut rec);
            assert_eq!(flow, Flow::Continue);
        }
        tracker.end_stream(reads.len() as u64 * 1000, &mut rec);
        assert_eq!(rec.outcome, Outcome::Succeeded);
        total += rec.chunks.len();
        black_box((rec, tracker.take_text()));
    }
    println!("chunks {total}");
}

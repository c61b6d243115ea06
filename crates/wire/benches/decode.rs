//! Parse cost per content chunk through the whole `StreamTracker` (SSE framing, JSON
//! dialect, record updates), fed one event per read as a live stream arrives.

use cadence_core::{Outcome, RequestRecord};
use cadence_wire::{Api, Flow, Framing, StreamTracker, TrackerConfig};
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;

const CHUNKS: usize = 256;

const WORDS: [&str; 8] = [
    " hello", " world", ",", " the", " quick", " brown", " fox", " jumps",
];

/// A realistic chat stream, one SSE event per read.
fn chat_reads() -> Vec<Vec<u8>> {
    let mut reads = Vec::with_capacity(CHUNKS + 3);
    reads.push(
        br#"data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}

"#
        .to_vec(),
    );
    for i in 0..CHUNKS {
        let finish = if i + 1 == CHUNKS { "\"stop\"" } else { "null" };
        reads.push(
            format!(
                "data: {{\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\",\"created\":1,\"model\":\"m\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}},\"finish_reason\":{finish}}}]}}\n\n",
                WORDS[i % WORDS.len()]
            )
            .into_bytes(),
        );
    }
    reads.push(
        br#"data: {"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":256,"total_tokens":268}}

"#
        .to_vec(),
    );
    reads.push(b"data: [DONE]\n\n".to_vec());
    reads
}

fn run(api: Api, framing: Framing, reads: &[Vec<u8>]) -> RequestRecord {
    let mut tracker = StreamTracker::new(TrackerConfig {
        api,
        framing,
        strict: false,
    });
    let mut rec = RequestRecord::new(0, Outcome::Truncated);
    rec.chunks.reserve(CHUNKS);
    for (i, r) in reads.iter().enumerate() {
        let flow = tracker.feed(i as u64 * 1000, black_box(r), &mut rec);
        debug_assert_eq!(flow, Flow::Continue);
    }
    tracker.finish(reads.len() as u64 * 1000, &mut rec);
    rec
}

fn bench(c: &mut Criterion) {
    let reads = chat_reads();
    let rec = run(Api::Chat, Framing::Sse, &reads);
    assert_eq!(rec.chunks.len(), CHUNKS);
    assert_eq!(rec.outcome, Outcome::Succeeded);

    let mut group = c.benchmark_group("tracker");
    group.throughput(Throughput::Elements(CHUNKS as u64));
    group.bench_function("chat_sse_one_event_per_read", |b| {
        b.iter(|| run(Api::Chat, Framing::Sse, black_box(&reads)))
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

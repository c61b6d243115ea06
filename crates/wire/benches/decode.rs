//! Parse cost per content chunk through the whole `StreamTracker` (SSE framing, JSON
//! dialect, record updates), fed one event per read as a live stream arrives.

use cadence_base::{Outcome, RequestRecord};
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

    // The parts, to see where the time goes.
    let mut parts = c.benchmark_group("parts");
    parts.throughput(Throughput::Elements(CHUNKS as u64));
    parts.bench_function("sse_framing_only", |b| {
        b.iter(|| {
            let mut dec = cadence_wire::sse::SseDecoder::new();
            let mut n = 0usize;
            for r in &reads {
                dec.feed(black_box(r), &mut |item| {
                    if let cadence_wire::sse::SseItem::Event(e) = item {
                        n += e.data.len();
                    }
                });
            }
            n
        })
    });
    let datas: Vec<String> = reads
        .iter()
        .map(|r| String::from_utf8(r[6..r.len() - 2].to_vec()).unwrap())
        .collect();
    parts.bench_function("parse_data_only", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for d in &datas {
                if let cadence_wire::dialect::StreamEvent::Chunk(c) =
                    cadence_wire::dialect::parse_data(Api::Chat, black_box(d))
                {
                    n += c.content.map_or(0, |t| t.len());
                }
            }
            n
        })
    });
    // Reference points for this machine: what serde_json costs just to walk the JSON,
    // and a plain UTF-8 check of the same bytes.
    parts.bench_function("baseline_serde_ignored_any", |b| {
        b.iter(|| {
            for d in datas.iter().filter(|d| d.starts_with('{')) {
                let _: serde::de::IgnoredAny = serde_json::from_str(black_box(d)).unwrap();
            }
        })
    });
    parts.bench_function("baseline_from_utf8", |b| {
        b.iter(|| {
            let mut n = 0usize;
            for r in &reads {
                n += std::str::from_utf8(black_box(r)).unwrap().len();
            }
            n
        })
    });
    parts.finish();
}

/// One content event of each dialect beyond chat and completions, as its server writes
/// it (the sim's shapes, which follow each dialect's documentation), with `WORD` where
/// the text goes.
const DIALECT_EVENTS: [(Api, &str); 7] = [
    (
        Api::Responses,
        r#"{"type":"response.output_text.delta","item_id":"msg_resp_1","output_index":0,"content_index":0,"delta":"WORD"}"#,
    ),
    (
        Api::Anthropic,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"WORD"}}"#,
    ),
    (
        Api::Ollama,
        r#"{"model":"m","created_at":"2026-11-23T14:00:00Z","message":{"role":"assistant","content":"WORD"},"done":false}"#,
    ),
    (
        Api::Generate,
        r#"{"index":1,"token":{"id":123,"text":"WORD","logprob":-0.5,"special":false},"generated_text":null,"details":null}"#,
    ),
    (
        Api::Kserve,
        r#"{"model_name":"m","model_version":"1","text_output":"WORD"}"#,
    ),
    (
        Api::Llamacpp,
        r#"{"index":0,"content":"WORD","tokens":[123],"stop":false,"id_slot":0}"#,
    ),
    (
        Api::Websocket,
        r#"{"type":"response.text.delta","event_id":"ev_2","response_id":"resp_1","item_id":"it_1","output_index":0,"content_index":0,"delta":"WORD"}"#,
    ),
];

/// `parse_data` per content event of each dialect (the decode cost the dialect adds to
/// a chunk; framing is the same as chat's).
fn dialects(c: &mut Criterion) {
    let mut group = c.benchmark_group("dialect_parse_data");
    group.throughput(Throughput::Elements(CHUNKS as u64));
    for (api, template) in DIALECT_EVENTS {
        let events: Vec<String> = (0..CHUNKS)
            .map(|i| template.replace("WORD", WORDS[i % WORDS.len()]))
            .collect();
        for e in &events {
            match cadence_wire::dialect::parse_data(api, e) {
                cadence_wire::dialect::StreamEvent::Chunk(c) => assert!(c.has_output(), "{e}"),
                other => panic!("{e}: {other:?}"),
            }
        }
        group.bench_function(api.name(), |b| {
            b.iter(|| {
                let mut n = 0usize;
                for e in &events {
                    if let cadence_wire::dialect::StreamEvent::Chunk(c) =
                        cadence_wire::dialect::parse_data(api, black_box(e))
                    {
                        n += c.content.map_or(0, |t| t.len());
                    }
                }
                n
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench, dialects);
criterion_main!(benches);

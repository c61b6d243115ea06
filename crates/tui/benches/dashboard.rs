//! What the dashboard costs: the record thread's work per finished request (64 chunks)
//! and the dashboard thread's work per frame (a view of the live state after 189,000
//! gaps, drawn at 120 × 40). `cargo bench -p cadence-tui`; figures in BENCHMARKS.md.

use cadence_core::{Chunk, Outcome, RequestRecord};
use cadence_tui::live::{Client, Live};
use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use std::time::Duration;

const MS: u64 = 1_000_000;

fn record(i: u64) -> RequestRecord {
    let at = i * 3 * MS;
    let mut r = RequestRecord::new(i, Outcome::Succeeded);
    r.sent_ns = Some(at);
    r.chunks = (0..64)
        .map(|k| {
            Chunk(
                at + 20 * MS + k * (10 * MS + (i * 7 + k) % 900_000),
                Some(1),
            )
        })
        .collect();
    r.end_ns = r.chunks.last().map(|c| c.0);
    r
}

fn live_after(n: u64) -> Live {
    let mut live = Live::new(Duration::from_millis(500), 0.001);
    live.begin_level(0, Some(1), "concurrency=1000".into(), Some(n), None, 0);
    for i in 0..n {
        live.add(&record(i));
    }
    live
}

fn bench(c: &mut Criterion) {
    let mut live = live_after(3_000);
    let mut i = 3_000;
    c.bench_function("record thread: Live::add, 64-chunk request", |b| {
        b.iter(|| {
            i += 1;
            live.add(black_box(&record(i)));
        })
    });
    let mut live = live_after(3_000);
    let now = 3_000 * 3 * MS + 700 * MS;
    let client = Client {
        in_flight: 1000,
        cpu_share: Some(0.4),
        cores: 2,
    };
    c.bench_function("dashboard thread: view + frame 120x40", |b| {
        b.iter(|| black_box(cadence_tui::frame(&live.view(now, client), 120, 40)))
    });
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(20);
    targets = bench
}
criterion_main!(benches);

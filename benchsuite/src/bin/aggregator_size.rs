//! The level aggregator's heap as records grow past `--exact-samples`: feeds N
//! synthetic succeeded streams (100 chunks, 10 ms apart, one every 10 ms of run clock)
//! into one level and prints `approx_bytes` and the time per record at checkpoints.
//!
//! `cargo run --release -p cadence-benchsuite --bin aggregator_size -- 200000 4000000`

use cadence_core::{Chunk, LevelAggregator, LevelConfig, Outcome, RequestRecord};
use std::time::Instant;

fn record(i: u64) -> RequestRecord {
    let mut r = RequestRecord::new(i, Outcome::Succeeded);
    let sent = i * 10_000_000;
    r.sent_ns = Some(sent);
    // A little jitter so the values spread over many histogram buckets.
    let mut t = sent + 50_000_000 + (i * 7919 % 20_000_000);
    r.chunks = (0..100u64)
        .map(|k| {
            t += 10_000_000 + ((i + k) * 104_729 % 3_000_000);
            Chunk(t, Some(1))
        })
        .collect();
    r.first_content_ns = Some(r.chunks[0].0);
    r.end_ns = Some(t + 1_000_000);
    r
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map_or(200_000, |s| s.parse().expect("N records"));
    let budget: u64 = args
        .next()
        .map_or(cadence_core::DEFAULT_EXACT_SAMPLES, |s| {
            s.parse().expect("budget")
        });
    let mut agg = LevelAggregator::new(LevelConfig {
        exact_samples: budget,
        ..LevelConfig::default()
    });
    println!("records  gaps  approx_bytes  exact_values  bucketed  ns_per_record");
    let mut next = 1_000;
    let start = Instant::now();
    for i in 0..n {
        agg.push(&record(i));
        if i + 1 == next || i + 1 == n {
            let per = start.elapsed().as_nanos() as f64 / (i + 1) as f64;
            println!(
                "{:>8} {:>9} {:>12} {:>12} {:>8} {:>10.0}",
                i + 1,
                (i + 1) * 99,
                agg.approx_bytes(),
                agg.stored(),
                agg.is_bucketed(),
                per
            );
            next *= 4;
        }
    }
    let t = Instant::now();
    let f = agg.finish(&Default::default());
    println!(
        "finish: {:.0} ms; itl count {} p99 {:.3} ms bucketed {}",
        t.elapsed().as_secs_f64() * 1e3,
        f.summary.itl.map_or(0, |d| d.count),
        f.summary.itl.map_or(0.0, |d| d.p99),
        f.summary.itl.is_some_and(|d| d.bucketed.is_some())
    );
}

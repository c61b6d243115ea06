//! Writes a synthetic records file of N requests (default 5 M) through Cadence's own
//! records writer, for measuring `cadence report` at scale:
//!
//!     cargo run --release -p cadence-benchsuite --bin gen_records -- OUT.jsonl.zst [N] [CHUNKS]
//!
//! A closed-loop level at concurrency 256: each request has a TTFT of 40–80 ms and
//! CHUNKS (default 16) chunks 8–14 ms apart, drawn from a fixed seed; ~1 in 200 fails.
//! A `.zst` name compresses as it writes (a 5 M file is ~2 GB as plain JSON).

use cadence_core::runlog::{level_line, LevelMeta};
use cadence_core::{Chunk, Outcome, RequestRecord};
use cadence_records::{RecordsConfig, RecordsWriter};
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

const CONCURRENCY: u64 = 256;

fn main() {
    let mut args = std::env::args().skip(1);
    let out = args.next().expect("usage: gen_records OUT [N] [CHUNKS]");
    let n: u64 = args.next().map_or(5_000_000, |s| s.parse().expect("N"));
    let chunks: u64 = args.next().map_or(16, |s| s.parse().expect("CHUNKS"));
    let mut w = RecordsWriter::open(RecordsConfig::new(&out)).expect("open the output");
    let mut rng = SmallRng::seed_from_u64(12);
    // When each of the 256 slots is next free.
    let mut free_at = vec![0u64; CONCURRENCY as usize];
    for index in 0..n {
        let slot = (index % CONCURRENCY) as usize;
        let sent = free_at[slot];
        let mut r = RequestRecord::new(index, Outcome::Succeeded);
        r.worker = slot as u32;
        r.sent_ns = Some(sent);
        let mut t = sent + rng.random_range(40_000_000..80_000_000);
        r.headers_ns = Some(t - 1_000_000);
        r.first_content_ns = Some(t);
        r.chunks = (0..chunks)
            .map(|_| {
                let c = Chunk(t, Some(1));
                t += rng.random_range(8_000_000..14_000_000);
                c
            })
            .collect();
        r.end_ns = Some(t);
        r.input_tokens = Some(512);
        r.http_status = Some(200);
        r.finish_reason = Some("length".into());
        if rng.random_range(0..200) == 0 {
            r.outcome = Outcome::Http5xx;
            r.http_status = Some(503);
            r.chunks.clear();
            r.first_content_ns = None;
            r.finish_reason = None;
            r.error = Some("HTTP 503".into());
        }
        free_at[slot] = t + 200_000;
        w.write_record(&r);
        if index % 100_000 == 99_999 {
            w.flush();
        }
    }
    w.write_line(&level_line(&LevelMeta {
        concurrency: Some(CONCURRENCY as u32),
        intended: Some(n),
        ..LevelMeta::new(0, format!("concurrency={CONCURRENCY}"))
    }));
    let written = w.finish().expect("write the records");
    eprintln!("{written} records written to {out}");
}

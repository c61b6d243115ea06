//! The level aggregator against the per-`Vec` functions it replaces, its memory bound
//! by construction (size accounting as records grow past the budget), and merging.

use cadence_core::{
    chart_data, convention_views, goodput, pacing, summarize_level, time_series, Chunk,
    Distribution, LevelAggregator, LevelAggregators, LevelConfig, LevelOptions, Outcome,
    RecordSink, RequestRecord, Slo, TokenCount, TokenSource,
};

const MS: u64 = 1_000_000;

/// A deterministic mix of records: succeeded streams of 1..40 chunks with varied gaps
/// and token counts, failures, warm-up, open-loop schedules, a few turns.
fn records(n: u64, seed: u64) -> Vec<RequestRecord> {
    let mut s = seed;
    let mut next = move |m: u64| {
        s = s
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (s >> 33) % m
    };
    (0..n)
        .map(|i| {
            let outcome = match next(20) {
                0 => Outcome::Http5xx,
                1 => Outcome::AbortedAtDeadline,
                _ => Outcome::Succeeded,
            };
            let mut r = RequestRecord::new(i, outcome);
            r.warmup = next(50) == 0;
            let sent = i * 7 * MS + next(3 * MS);
            r.scheduled_ns = (i % 2 == 0).then(|| sent.saturating_sub(next(2 * MS)));
            r.sent_ns = Some(sent);
            let mut t = sent + 20 * MS + next(200 * MS);
            let chunks = 1 + next(40);
            r.chunks = (0..chunks)
                .map(|_| {
                    t += next(30 * MS);
                    let tokens = (next(3) > 0).then(|| 1 + next(3) as u32);
                    Chunk(t, tokens)
                })
                .collect();
            r.first_content_ns = r.chunks.first().map(|c| c.0);
            r.end_ns = Some(t + next(5 * MS));
            r.output_tokens = Some(TokenCount {
                count: chunks + next(5),
                source: TokenSource::Usage,
            });
            r.turn = (i % 5 == 0).then_some((i % 3) as u32);
            if outcome == Outcome::Http5xx {
                r.error = Some(format!("HTTP 503 from replica {}", next(3)));
            }
            r
        })
        .collect()
}

fn config(budget: u64) -> LevelConfig {
    LevelConfig {
        slos: vec![
            "ttft.p99<=150ms".parse::<Slo>().unwrap(),
            "itl.p99<=25ms".parse().unwrap(),
        ],
        time_bucket_ns: 500 * MS,
        exact_samples: budget,
        ..LevelConfig::default()
    }
}

fn fed(budget: u64, recs: &[RequestRecord]) -> LevelAggregator {
    let mut a = LevelAggregator::new(config(budget));
    for r in recs {
        a.push(r);
    }
    a
}

#[test]
fn the_aggregator_reproduces_every_per_vec_function_exactly_under_the_budget() {
    let recs = records(400, 1);
    let agg = fed(u64::MAX, &recs);
    assert!(!agg.is_bucketed());
    let opts = LevelOptions {
        intended: Some(500),
        dropped: 3,
        ..LevelOptions::default()
    };
    let f = agg.finish(&opts);
    assert_eq!(f.summary, summarize_level(&recs, &opts));
    assert_eq!(f.pacing, pacing(&recs, 3, 0.001));
    let window = f.summary.throughput.window_s;
    assert_eq!(f.goodput, goodput(&recs, &config(0).slos, window));
    assert_eq!(f.time_series, time_series(&recs, 500 * MS));
    assert_eq!(f.conventions, convention_views(&recs));
    assert_eq!(f.charts, chart_data(&recs));
    // And bit for bit the plain summaries of hand-collected samples.
    let mut ttft: Vec<f64> = recs
        .iter()
        .filter(|r| r.outcome == Outcome::Succeeded && !r.warmup)
        .map(|r| (r.chunks[0].0 - r.sent_ns.unwrap()) as f64 / 1e6)
        .collect();
    assert_eq!(f.summary.ttft, Distribution::from_samples(&mut ttft));
    assert!(f.summary.by_turn.len() == 3 && f.summary.ttft.unwrap().bucketed.is_none());
    let failures = f.record_warnings.iter().find(|w| w.contains("× http_5xx"));
    assert!(failures.is_some(), "{:?}", f.record_warnings);
}

fn within(b: f64, e: f64) -> bool {
    (b - e).abs() <= e.abs() / 256.0 + 0.0005 + 1e-9
}

#[test]
fn past_the_budget_figures_are_bucketed_within_the_bound_and_counts_stay_exact() {
    let recs = records(600, 2);
    let exact = fed(u64::MAX, &recs).finish(&LevelOptions::default());
    let agg = fed(1_000, &recs);
    assert!(agg.is_bucketed());
    assert!(agg.stored() <= 1_000);
    let b = agg.finish(&LevelOptions::default());
    let (se, sb) = (&exact.summary, &b.summary);
    assert_eq!(se.requests, sb.requests);
    assert_eq!(se.stalls, sb.stalls);
    assert_eq!(se.output_tokens, sb.output_tokens);
    for (e, x) in [
        (se.ttft, sb.ttft),
        (se.itl, sb.itl),
        (se.itl_per_token, sb.itl_per_token),
        (se.tpot, sb.tpot),
        (se.e2e, sb.e2e),
        (se.output_speed_tok_s, sb.output_speed_tok_s),
    ] {
        let (e, x) = (e.unwrap(), x.unwrap());
        assert!(x.bucketed.is_some() && e.bucketed.is_none());
        assert_eq!((x.count, x.min, x.max), (e.count, e.min, e.max));
        assert!((x.mean - e.mean).abs() <= 1e-9 * e.mean);
        for (p, q) in [(x.p50, e.p50), (x.p99, e.p99), (x.p999, e.p999)] {
            assert!(within(p, q), "bucketed {p} vs exact {q}");
        }
    }
    assert_eq!(exact.goodput, b.goodput, "goodput is a count");
    assert!(b
        .record_warnings
        .iter()
        .any(|w| w.contains("--exact-samples")));
    let (ce, cb) = (exact.charts.unwrap(), b.charts.unwrap());
    assert_eq!(ce.itl_cdf.len(), cb.itl_cdf.len());
    for (e, x) in ce.itl_cdf.iter().zip(&cb.itl_cdf) {
        assert!(within(x.ms, e.ms), "cdf {} {} vs {}", e.percent, x.ms, e.ms);
    }
    let total = |h: &[cadence_core::charts::HistogramBin]| h.iter().map(|b| b.count).sum::<u64>();
    assert_eq!(total(&ce.itl_histogram), total(&cb.itl_histogram));
    assert_eq!(exact.time_series.len(), b.time_series.len());
    for (e, x) in exact.time_series.iter().zip(&b.time_series) {
        assert_eq!(
            (e.completed, e.failed, e.output_tokens),
            (x.completed, x.failed, x.output_tokens)
        );
    }
}

#[test]
fn memory_stays_flat_as_records_grow_10x_and_100x_past_the_budget() {
    // A budget of 2,000 values is spent within the first ~50 records. Five batches of
    // 100 records (each on the same stretch of run clock) are fed over and over: once
    // every batch has been seen, more records add counts, never memory.
    let budget = 2_000;
    let batches: Vec<Vec<RequestRecord>> = (0..5).map(|k| records(100, 10 + k)).collect();
    let mut agg = LevelAggregator::new(config(budget));
    let mut sizes = Vec::new();
    let mut fed_n = 0u64;
    for target in [500u64, 5_000, 50_000] {
        while fed_n < target {
            for r in &batches[(fed_n / 100 % 5) as usize] {
                agg.push(r);
            }
            fed_n += 100;
        }
        assert!(agg.stored() <= budget);
        sizes.push(agg.approx_bytes());
    }
    assert!(agg.is_bucketed());
    eprintln!("approx_bytes after 500, 5,000, 50,000 records: {sizes:?}");
    assert_eq!(sizes[0], sizes[1], "10x the records, the same memory");
    assert_eq!(sizes[1], sizes[2], "100x the records, the same memory");
    // Exact samples of 50,000 such records would take 100 times those of 500.
    let exact_500 = fed(u64::MAX, &batches.concat()).approx_bytes();
    assert!(
        sizes[2] * 10 < exact_500 * 100,
        "{} vs {exact_500} per 500",
        sizes[2]
    );
    let itl = agg.finish(&LevelOptions::default()).summary.itl.unwrap();
    assert!(itl.count > 500_000 && itl.bucketed.is_some());
}

/// `r` moved `by` ns later on the run clock.
fn shifted(r: &RequestRecord, by: u64) -> RequestRecord {
    let mut r = r.clone();
    r.sent_ns = r.sent_ns.map(|t| t + by);
    r.scheduled_ns = r.scheduled_ns.map(|t| t + by);
    r.first_content_ns = r.first_content_ns.map(|t| t + by);
    r.end_ns = r.end_ns.map(|t| t + by);
    r.chunks.iter_mut().for_each(|c| c.0 += by);
    r
}

#[test]
fn memory_stays_bounded_as_the_run_grows_10x_and_100x_longer() {
    // A long run at a noisy load: every 500 ms bucket of the time series gets gaps
    // spread over 0–30 ms, so each bucket's histogram holds hundreds of distinct
    // buckets. 300, 3,000 and 30,000 records laid end to end along the run clock
    // (2 s, 20 s, 200 s): the series widens to stay under its histogram bytes (256 KiB
    // here), so memory stops growing with the run's length, and pooled ITL still holds
    // every gap.
    let batch = records(100, 21);
    let span = batch.iter().filter_map(|r| r.end_ns).max().unwrap() + MS;
    let cap = 256 << 10;
    let mut agg = LevelAggregator::new(LevelConfig {
        series_bytes: cap,
        ..config(2_000)
    });
    let mut sizes = Vec::new();
    let mut fed_n = 0u64;
    let mut gaps = 0u64;
    for target in [300u64, 3_000, 30_000] {
        while fed_n < target {
            for r in &batch {
                let r = shifted(r, fed_n / 100 * span);
                if r.outcome == Outcome::Succeeded && !r.warmup {
                    gaps += r.chunks.len().saturating_sub(1) as u64;
                }
                agg.push(&r);
            }
            fed_n += 100;
        }
        sizes.push(agg.approx_bytes());
    }
    eprintln!("approx_bytes after 300, 3,000, 30,000 records along the clock: {sizes:?}");
    let bound = cap + sizes[0];
    assert!(sizes[1] <= bound && sizes[2] <= bound, "{sizes:?}");
    assert!(
        sizes[2] < sizes[1] * 3 / 2,
        "10x longer again, not more memory: {sizes:?}"
    );
    let f = agg.finish(&LevelOptions::default());
    assert_eq!(f.summary.itl.unwrap().count, gaps, "widening loses no gap");
    assert!(
        f.record_warnings
            .iter()
            .any(|w| w.contains("256 KiB of histograms")),
        "{:?}",
        f.record_warnings
    );
    let series_gaps: u64 = f.time_series.iter().map(|b| b.completed).sum();
    assert_eq!(series_gaps, f.summary.requests.succeeded);
}

#[test]
fn a_far_future_timestamp_or_a_zero_bucket_does_not_allocate_buckets_per_nanosecond() {
    let mut r = records(1, 3).remove(0);
    r.outcome = Outcome::Succeeded;
    r.warmup = false;
    r.end_ns = Some(1_000_000_000_000_000_000);
    let mut cfg = config(u64::MAX);
    cfg.time_bucket_ns = 0;
    let mut agg = LevelAggregator::new(cfg);
    agg.push(&r);
    assert!(agg.approx_bytes() < 4096 * 256, "{}", agg.approx_bytes());
    let f = agg.finish(&LevelOptions::default());
    assert!(f.time_series.len() <= cadence_core::timeseries::MAX_BUCKETS as usize);
    assert_eq!(f.time_series.iter().map(|b| b.completed).sum::<u64>(), 1);
    assert!(f.record_warnings.iter().any(|w| w.contains("buckets")));
}

#[test]
fn merging_two_halves_gives_the_whole_exact_and_bucketed() {
    let recs = records(500, 4);
    let (l, r) = recs.split_at(217);
    let opts = LevelOptions::default();
    // Exact: equal to the last bit.
    let mut a = fed(u64::MAX, l);
    a.merge(&fed(u64::MAX, r));
    assert!(!a.is_bucketed());
    assert_eq!(a.finish(&opts), fed(u64::MAX, &recs).finish(&opts));
    // Exact halves whose union outgrows the budget: bucketed.
    let budget = (fed(u64::MAX, l).stored() + fed(u64::MAX, r).stored()) - 1;
    let mut m = fed(budget, l);
    m.merge(&fed(budget, r));
    assert!(m.is_bucketed());
    // Bucketed: the same histograms, so the same percentiles; moments agree closely.
    let mut m = fed(500, l);
    m.merge(&fed(500, r));
    let (x, w) = (m.finish(&opts), fed(500, &recs).finish(&opts));
    assert_eq!(x.summary.requests, w.summary.requests);
    assert_eq!(x.time_series, w.time_series);
    for (a, b) in [
        (x.summary.itl, w.summary.itl),
        (x.summary.ttft, w.summary.ttft),
    ] {
        let (a, b) = (a.unwrap(), b.unwrap());
        assert_eq!(
            (a.count, a.min, a.p50, a.p99, a.p999, a.max),
            (b.count, b.min, b.p50, b.p99, b.p999, b.max)
        );
        assert!((a.mean - b.mean).abs() <= 1e-9 * b.mean);
    }
    assert_eq!(x.charts, w.charts);
    assert_eq!(x.goodput, w.goodput);
}

#[test]
fn the_sink_keys_records_by_level_and_merges_sources() {
    let mut recs = records(300, 5);
    for (i, r) in recs.iter_mut().enumerate() {
        r.level = (i % 3) as u32;
    }
    let whole = LevelAggregators::from_records(config(u64::MAX), &recs);
    let mut a = LevelAggregators::new(config(u64::MAX));
    let mut b = LevelAggregators::new(config(u64::MAX));
    for (i, r) in recs.iter().enumerate() {
        let sink: &mut dyn RecordSink = if i % 4 == 0 { &mut a } else { &mut b };
        sink.accept(r);
    }
    a.merge(&b);
    assert_eq!(whole.levels().count(), 3);
    let opts = LevelOptions::default();
    for level in 0..3 {
        let only: Vec<RequestRecord> = recs.iter().filter(|r| r.level == level).cloned().collect();
        let w = whole.get(level).unwrap().finish(&opts);
        assert_eq!(w.summary, summarize_level(&only, &opts));
        // Records arrive in a different order per level part, so compare what order
        // cannot change: counts, and distributions' exact figures.
        let m = a.get(level).unwrap().finish(&opts);
        assert_eq!(m.summary.requests, w.summary.requests);
        assert_eq!(
            m.summary.itl.map(|d| (d.count, d.p50, d.p99, d.max)),
            w.summary.itl.map(|d| (d.count, d.p50, d.p99, d.max))
        );
    }
    assert!(whole.any_sent() && a.any_sent());
}

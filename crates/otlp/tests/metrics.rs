//! The run's metrics from hand-built records: each histogram's buckets, count, sum, min
//! and max are the records' own figures to the nanosecond, failures fall under their
//! `error.type`, warm-up and unsent requests add nothing, and the protobuf and JSON
//! bodies carry the same points.

use cadence_core::{Chunk, Outcome, RequestRecord, TokenCount, TokenSource};
use cadence_otlp::metrics::{self, Instruments, TIME_BOUNDS_US};
use cadence_otlp::metrics_export;
use cadence_otlp::metrics_proto::{self as mp, ExportMetricsServiceRequest};
use cadence_otlp::proto::{SpanKind, Value};
use cadence_otlp::Shape;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const START: u64 = 1_800_000_000_000_000_000;
const NOW: u64 = START + 60 * 1_000 * MS;

fn shape() -> Shape {
    Shape {
        origin_unix_ns: 0,
        operation: "chat",
        model: "m1".into(),
        server: Some(("10.0.0.7".into(), 8000)),
        stall_threshold_ns: 500 * MS,
        chunk_events: 0,
        kind: SpanKind::Client,
        target: None,
    }
}

/// Sent at 1 ms; chunks at `chunks_us` (µs); ended 10 µs after the last; `tokens` out.
fn record(i: u64, chunks_us: &[u64], tokens: u64) -> RequestRecord {
    let mut r = RequestRecord::new(i, Outcome::Succeeded);
    r.sent_ns = Some(MS);
    r.chunks = chunks_us.iter().map(|&t| Chunk(t * US, Some(1))).collect();
    r.end_ns = Some(chunks_us.last().unwrap() * US + 10 * US);
    r.input_tokens = Some(100);
    r.output_tokens = Some(TokenCount {
        count: tokens,
        source: TokenSource::Usage,
    });
    r
}

fn point<'a>(
    ms: &'a [mp::Metric],
    name: &str,
    tag: Option<(&str, &str)>,
) -> &'a mp::HistogramDataPoint {
    let m = ms
        .iter()
        .find(|m| m.name == name)
        .unwrap_or_else(|| panic!("{name}"));
    let Some(mp::Data::Histogram(h)) = &m.data else {
        panic!("{name} is a histogram")
    };
    h.data_points
        .iter()
        .find(|p| match tag {
            None => !p
                .attributes
                .iter()
                .any(|a| a.key == "error.type" || a.key == "gen_ai.token.type"),
            Some((k, v)) => p
                .attributes
                .iter()
                .any(|a| a.key == k && a.value() == Some(&Value::String(v.into()))),
        })
        .unwrap_or_else(|| panic!("{name} {tag:?}"))
}

/// The bucket each value falls in, counted by hand: `(bounds[i-1], bounds[i]]`.
fn by_hand(values_ns: &[u64]) -> Vec<u64> {
    let mut counts = vec![0; TIME_BOUNDS_US.len() + 1];
    for &v in values_ns {
        let i = TIME_BOUNDS_US
            .iter()
            .position(|&b| v <= b * US)
            .unwrap_or(TIME_BOUNDS_US.len());
        counts[i] += 1;
    }
    counts
}

#[test]
fn each_histogram_holds_the_records_figures_exactly() {
    let mut ins = Instruments::new(500 * MS);
    // Gaps of 40 µs, 50 µs (on a bound: in its bucket), 60 µs, 1.2 ms, 600 ms (a stall).
    let a = record(0, &[21_000, 21_040, 21_090, 21_150, 22_350, 622_350], 6);
    // TTFT 3 ms, one gap of 4.5 ms.
    let b = record(1, &[4_000, 8_500], 2);
    ins.push(&a);
    ins.push(&b);
    let got = ins.snapshot(&shape(), START, NOW);

    let ttft = point(&got, metrics::TIME_TO_FIRST_CHUNK, None);
    assert_eq!(ttft.count, 2);
    assert_eq!(ttft.bucket_counts, by_hand(&[20 * MS, 3 * MS]));
    assert_eq!(ttft.sum, Some(0.023));
    assert_eq!((ttft.min, ttft.max), (Some(0.003), Some(0.02)));

    let gaps = [40 * US, 50 * US, 60 * US, 1_200 * US, 600 * MS, 4_500 * US];
    let itl = point(&got, metrics::TIME_PER_OUTPUT_CHUNK, None);
    assert_eq!(itl.count, 6);
    assert_eq!(itl.bucket_counts, by_hand(&gaps));
    // The first three gaps apart: under 50 µs, at it, over it.
    assert_eq!(&itl.bucket_counts[..3], &[2, 1, 0]);
    assert_eq!(itl.sum, Some(gaps.iter().sum::<u64>() as f64 / 1e9));
    assert_eq!(itl.max, Some(0.6));
    assert_eq!(itl.explicit_bounds[0], 0.00005);
    assert_eq!(itl.explicit_bounds.len() + 1, itl.bucket_counts.len());

    let e2e = point(&got, metrics::DURATION, None);
    assert_eq!(e2e.count, 2);
    assert_eq!(e2e.sum, Some((621_360 + 7_510) as f64 * 1e3 / 1e9));

    // TPOT: (last − first) / (tokens − 1): 601.35 ms / 5 and 4.5 ms / 1.
    let tpot = point(&got, metrics::TIME_PER_OUTPUT_TOKEN, None);
    assert_eq!(tpot.count, 2);
    assert_eq!(tpot.sum, Some((120_270 + 4_500) as f64 * 1e3 / 1e9));

    let out = point(
        &got,
        metrics::TOKEN_USAGE,
        Some(("gen_ai.token.type", "output")),
    );
    assert_eq!((out.count, out.sum), (2, Some(8.0)));
    // Bounds 1, 4, 16: 2 tokens in (1, 4], 6 in (4, 16].
    assert_eq!(&out.bucket_counts[..4], &[0, 1, 1, 0]);
    let input = point(
        &got,
        metrics::TOKEN_USAGE,
        Some(("gen_ai.token.type", "input")),
    );
    assert_eq!((input.count, input.sum), (2, Some(200.0)));

    let stalls = got.iter().find(|m| m.name == metrics::STALLS).unwrap();
    let Some(mp::Data::Sum(s)) = &stalls.data else {
        panic!("a sum")
    };
    assert!(s.is_monotonic);
    let n: Vec<i64> = s.data_points.iter().map(|p| p.as_int).collect();
    assert_eq!(n, vec![0, 1], "first_token, gap");
    for p in &ttft.attributes {
        assert!(!p.key.contains("url"), "{p:?}");
    }
    assert_eq!(
        (ttft.start_time_unix_nano, ttft.time_unix_nano),
        (START, NOW)
    );
}

#[test]
fn failures_fall_under_their_error_type_and_warmup_and_unsent_add_nothing() {
    let mut ins = Instruments::new(500 * MS);
    let mut failed = RequestRecord::new(0, Outcome::Http5xx);
    failed.sent_ns = Some(MS);
    failed.end_ns = Some(3 * MS);
    ins.push(&failed);
    let mut warm = record(1, &[2_000, 3_000], 2);
    warm.warmup = true;
    ins.push(&warm);
    ins.push(&RequestRecord::new(2, Outcome::Dropped));
    ins.push(&record(3, &[2_000, 3_000], 2));
    let got = ins.snapshot(&shape(), START, NOW);
    let bad = point(&got, metrics::DURATION, Some(("error.type", "http_5xx")));
    assert_eq!((bad.count, bad.sum), (1, Some(0.002)));
    let ok = point(&got, metrics::DURATION, None);
    assert_eq!(
        ok.count, 1,
        "the warm-up and the dropped request add nothing"
    );
    assert_eq!(point(&got, metrics::TIME_TO_FIRST_CHUNK, None).count, 1);
    // Each series carries the run's attributes and its level.
    let keys: Vec<&str> = bad.attributes.iter().map(|a| a.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "gen_ai.operation.name",
            "gen_ai.request.model",
            "server.address",
            "server.port",
            "cadence.level",
            "error.type"
        ]
    );
}

#[test]
fn protobuf_and_json_carry_the_same_points() {
    let mut ins = Instruments::new(500 * MS);
    ins.push(&record(0, &[2_000, 3_000, 3_100], 3));
    let req = metrics_export::export_request("svc", ins.snapshot(&shape(), START, NOW));
    let bytes = prost::Message::encode_to_vec(&req);
    let back = <ExportMetricsServiceRequest as prost::Message>::decode(&bytes[..]).unwrap();
    assert_eq!(back, req);
    let j = metrics_export::json(&req);
    let ms = &j["resourceMetrics"][0]["scopeMetrics"][0]["metrics"];
    let itl = ms
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == metrics::TIME_PER_OUTPUT_CHUNK)
        .unwrap();
    assert_eq!(itl["unit"], "s");
    let p = &itl["histogram"]["dataPoints"][0];
    assert_eq!(itl["histogram"]["aggregationTemporality"], 2);
    assert_eq!(p["count"], "2");
    assert_eq!(p["startTimeUnixNano"], START.to_string());
    assert_eq!(p["explicitBounds"][0], 0.00005);
    let counts: u64 = p["bucketCounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(counts, 2);
    assert_eq!(
        j["resourceMetrics"][0]["resource"]["attributes"][0]["value"]["stringValue"],
        "svc"
    );
}

#[test]
fn time_bounds_start_at_50_us_and_grow_by_at_most_half_up_to_a_second() {
    assert_eq!(TIME_BOUNDS_US[0], 50);
    assert_eq!(*TIME_BOUNDS_US.last().unwrap(), 1_200_000_000, "20 minutes");
    for w in TIME_BOUNDS_US.windows(2) {
        assert!(w[0] < w[1], "{w:?}");
        if w[1] <= 1_000_000 {
            assert!(w[1] * 2 <= w[0] * 3, "{w:?}");
        }
    }
}

/// The model a series names (`gen_ai.request.model`).
fn model_of(p: &mp::HistogramDataPoint) -> String {
    let a = p
        .attributes
        .iter()
        .find(|a| a.key == "gen_ai.request.model");
    match a.and_then(|a| a.value()) {
        Some(Value::String(s)) => s.clone(),
        other => panic!("{other:?}"),
    }
}

fn ttft_counts(ins: &Instruments, shape: &Shape) -> Vec<(String, u64)> {
    let got = ins.snapshot(shape, START, NOW);
    let m = got.iter().find(|m| m.name == metrics::TIME_TO_FIRST_CHUNK);
    let Some(mp::Data::Histogram(h)) = &m.unwrap().data else {
        panic!("a histogram")
    };
    let mut v: Vec<_> = h
        .data_points
        .iter()
        .map(|p| (model_of(p), p.count))
        .collect();
    v.sort();
    v
}

#[test]
fn a_proxied_request_counts_under_the_model_it_named_and_models_are_bounded() {
    let proxied = |i: u64, model: &str| {
        let mut r = record(i, &[2_000, 3_000], 2);
        r.proxy = Some(Box::new(cadence_core::ProxyInfo {
            model: Some(model.into()),
            ..Default::default()
        }));
        r
    };
    let mut ins = Instruments::new(500 * MS);
    ins.push(&record(0, &[2_000, 3_000], 2));
    ins.push(&proxied(1, "a"));
    ins.push(&proxied(2, "a"));
    ins.push(&proxied(3, "b"));
    let want = [("a", 2), ("b", 1), ("m1", 1)].map(|(m, n)| (m.to_string(), n));
    assert_eq!(ttft_counts(&ins, &shape()), want);
    // Past MAX_SERIES models, new ones count as `other`.
    for i in 0..metrics::MAX_SERIES as u64 + 10 {
        ins.push(&proxied(10 + i, &format!("x{i}")));
    }
    let counts = ttft_counts(&ins, &shape());
    assert_eq!(counts.len(), metrics::MAX_SERIES + 1);
    let other = counts.iter().find(|(m, _)| m == "other").unwrap();
    assert_eq!(other.1, 3 + 10, "the series past the ceiling");
    assert_eq!(counts.iter().map(|c| c.1).sum::<u64>(), 4 + 74);
}

#[test]
fn a_proxied_requests_series_names_the_operation_its_path_asks_for() {
    let mut ins = Instruments::new(500 * MS);
    for (i, path) in ["/v1/chat/completions", "/v1/completions", "/v1/completions"]
        .iter()
        .enumerate()
    {
        let mut r = record(i as u64, &[2_000, 3_000], 2);
        r.proxy = Some(Box::new(cadence_core::ProxyInfo {
            path: (*path).into(),
            model: Some("a".into()),
            ..Default::default()
        }));
        ins.push(&r);
    }
    let got = ins.snapshot(&shape(), START, NOW);
    let m = got.iter().find(|m| m.name == metrics::TIME_TO_FIRST_CHUNK);
    let Some(mp::Data::Histogram(h)) = &m.unwrap().data else {
        panic!("a histogram")
    };
    let mut by_op: Vec<(String, u64)> = h
        .data_points
        .iter()
        .map(|p| {
            let a = p
                .attributes
                .iter()
                .find(|a| a.key == "gen_ai.operation.name");
            match a.and_then(|a| a.value()) {
                Some(Value::String(s)) => (s.clone(), p.count),
                other => panic!("{other:?}"),
            }
        })
        .collect();
    by_op.sort();
    assert_eq!(
        by_op,
        [("chat".to_string(), 1), ("text_completion".to_string(), 2)]
    );
}

#[test]
fn a_watch_targets_series_names_its_model_server_and_name() {
    let mut ins = Instruments::new(500 * MS);
    let target = Shape {
        model: "t-model".into(),
        server: Some(("10.0.0.9".into(), 9000)),
        target: Some("east-api".into()),
        ..shape()
    };
    ins.push_as(&record(0, &[2_000, 3_000], 2), &target);
    ins.push(&record(1, &[2_000, 3_000], 2));
    let got = ins.snapshot(&shape(), START, NOW);
    let m = got.iter().find(|m| m.name == metrics::TIME_TO_FIRST_CHUNK);
    let Some(mp::Data::Histogram(h)) = &m.unwrap().data else {
        panic!("a histogram")
    };
    let attrs: Vec<Vec<(String, String)>> = h
        .data_points
        .iter()
        .map(|p| {
            p.attributes
                .iter()
                .map(|a| (a.key.clone(), format!("{:?}", a.value().unwrap())))
                .collect()
        })
        .collect();
    assert_eq!(attrs.len(), 2, "{attrs:?}");
    let of = |i: usize, k: &str| attrs[i].iter().find(|a| a.0 == k).map(|a| a.1.clone());
    let t = (0..2).find(|&i| of(i, "cadence.target").is_some()).unwrap();
    assert_eq!(
        of(t, "gen_ai.request.model").unwrap(),
        "String(\"t-model\")"
    );
    assert_eq!(of(t, "server.port").unwrap(), "Int(9000)");
    assert_eq!(of(1 - t, "gen_ai.request.model").unwrap(), "String(\"m1\")");
}

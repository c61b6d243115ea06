//! SLO expressions: what parses (and how it is normalized), what is rejected and how the
//! message says so, evaluation on a level, per-request values and goodput, all on
//! hand-built records whose expected values are worked out in the comments.

mod common;

use cadence_core::{
    goodput, summarize_level, Chunk, LevelOptions, Outcome, RequestRecord, Slo, SloMetric, SloOp,
    SloResult, SloStat, TokenCount, TokenSource,
};
use common::{close, rec, MS};
use serde_json::json;

fn slo(s: &str) -> Slo {
    s.parse()
        .unwrap_or_else(|e| panic!("{s:?} should parse: {e}"))
}

/// Scheduled at 0, sent at 5 ms, chunks at 105, 115, 135 ms carrying 1, 2, 1 tokens,
/// visible content from 115 ms, end 140 ms, usage 4 tokens.
/// TTFT 100, TTFT content 110, TTFT response 105, E2E 135, gaps 10 and 20 ms,
/// TPOT 30 / 3 = 10 ms, output speed 3 / 0.030 s = 100 tok/s,
/// per-token gaps: 10/2 twice and 20/1 once = [5, 5, 20].
fn reference() -> RequestRecord {
    let mut r = rec(
        Outcome::Succeeded,
        5,
        &[(105, Some(1)), (115, Some(2)), (135, Some(1))],
        140,
    );
    r.scheduled_ns = Some(0);
    r.first_content_ns = Some(115 * MS);
    r.output_tokens = Some(TokenCount {
        count: 4,
        source: TokenSource::Usage,
    });
    r
}

/// The documentation's examples: (input, metric, statistic, operator, bound in the
/// metric's unit, normalized text).
const DOCUMENTED: [(&str, SloMetric, SloStat, SloOp, f64, &str); 14] = [
    (
        "itl.p99<=50ms",
        SloMetric::Itl,
        SloStat::P99,
        SloOp::Le,
        50.0,
        "itl.p99<=50ms",
    ),
    (
        "ttft.p90<=2s",
        SloMetric::Ttft,
        SloStat::P90,
        SloOp::Le,
        2000.0,
        "ttft.p90<=2s",
    ),
    (
        "tpot.mean<30ms",
        SloMetric::Tpot,
        SloStat::Mean,
        SloOp::Lt,
        30.0,
        "tpot.mean<30ms",
    ),
    (
        "e2e.max<=10s",
        SloMetric::E2e,
        SloStat::Max,
        SloOp::Le,
        10_000.0,
        "e2e.max<=10s",
    ),
    (
        "output_speed.p50>=20",
        SloMetric::OutputSpeed,
        SloStat::P50,
        SloOp::Ge,
        20.0,
        "output_speed.p50>=20",
    ),
    (
        "ttft_response.p99<=1s",
        SloMetric::TtftResponse,
        SloStat::P99,
        SloOp::Le,
        1000.0,
        "ttft_response.p99<=1s",
    ),
    (
        " itl.p99.9 <= 500 us ",
        SloMetric::Itl,
        SloStat::P999,
        SloOp::Le,
        0.5,
        "itl.p999<=500us",
    ),
    (
        "itl.p95<=250µs",
        SloMetric::Itl,
        SloStat::P95,
        SloOp::Le,
        0.25,
        "itl.p95<=250us",
    ),
    (
        "itl.p95<=250μs",
        SloMetric::Itl,
        SloStat::P95,
        SloOp::Le,
        0.25,
        "itl.p95<=250us",
    ),
    (
        "e2e.min>1500000ns",
        SloMetric::E2e,
        SloStat::Min,
        SloOp::Gt,
        1.5,
        "e2e.min>1500000ns",
    ),
    (
        "ttft_content.p999<0.5s",
        SloMetric::TtftContent,
        SloStat::P999,
        SloOp::Lt,
        500.0,
        "ttft_content.p999<0.5s",
    ),
    (
        "ITL_per_token.P50<=2.50ms",
        SloMetric::ItlPerToken,
        SloStat::P50,
        SloOp::Le,
        2.5,
        "itl_per_token.p50<=2.5ms",
    ),
    (
        "output_speed_tok_s.min>12.5tok/s",
        SloMetric::OutputSpeed,
        SloStat::Min,
        SloOp::Gt,
        12.5,
        "output_speed.min>12.5",
    ),
    (
        "tpot.p50<=0ms",
        SloMetric::Tpot,
        SloStat::P50,
        SloOp::Le,
        0.0,
        "tpot.p50<=0ms",
    ),
];

#[test]
fn the_documented_examples_parse_and_normalize() {
    for (input, metric, stat, op, bound, text) in DOCUMENTED {
        let s = slo(input);
        assert_eq!((s.metric, s.stat, s.op), (metric, stat, op), "{input}");
        assert_eq!(s.bound, bound, "{input}");
        assert_eq!(s.text, text, "{input}");
        assert_eq!(s.to_string(), text);
        // The normalized text parses back to the same SLO.
        assert_eq!(slo(text), s, "{text}");
    }
}

#[test]
fn time_bounds_take_the_duration_parsers_units() {
    // (input, bound in ms, normalized text): the units and spellings of every flag,
    // `m` meaning minutes as it does there.
    let cases: [(&str, f64, &str); 13] = [
        ("itl.p99<=500ns", 0.0005, "itl.p99<=500ns"),
        ("itl.p99<=50us", 0.05, "itl.p99<=50us"),
        ("itl.p99<=50µs", 0.05, "itl.p99<=50us"),
        ("itl.p99<=50μs", 0.05, "itl.p99<=50us"),
        ("itl.p99<=50usec", 0.05, "itl.p99<=50us"),
        ("itl.p99<=50 msec", 50.0, "itl.p99<=50ms"),
        ("ttft.p90<=2 seconds", 2000.0, "ttft.p90<=2s"),
        ("e2e.p99<=2m", 120_000.0, "e2e.p99<=2m"),
        ("e2e.p99<=2min", 120_000.0, "e2e.p99<=2m"),
        ("e2e.max<=1h", 3_600_000.0, "e2e.max<=1h"),
        ("e2e.p99<=1m30s", 90_000.0, "e2e.p99<=1m30s"),
        ("ttft.p99<=1s 500ms", 1500.0, "ttft.p99<=1s500ms"),
        ("tpot.p50<=0", 0.0, "tpot.p50<=0"),
    ];
    for (input, bound, text) in cases {
        let s = slo(input);
        assert_eq!((s.bound, s.text.as_str()), (bound, text), "{input}");
        assert_eq!(slo(text), s, "{text}");
    }
    // The same units the flags take, the same durations.
    for d in ["250us", "250μs", "2m", "1m30s", "1.5s"] {
        let ms = cadence_core::parse_duration(d).unwrap().as_nanos() as f64 / 1e6;
        assert_eq!(slo(&format!("itl.p99<={d}")).bound, ms, "{d}");
    }
}

#[test]
fn bad_expressions_say_what_is_wrong_and_show_an_example() {
    let cases = [
        ("itl.p99<=50", "needs a unit (ns, us, ms or s): say 50ms"),
        ("ttft.p90<=2", "say 2ms"),
        ("output_speed.p50>=20ms", "tokens/s, not a time"),
        ("output_speed.p50>=20 s", "tokens/s, not a time"),
        ("output_speed.p50>=20rps", "unknown unit \"rps\""),
        ("itl.p98<=50ms", "unknown statistic \"p98\""),
        ("latency.p99<=50ms", "unknown metric \"latency\""),
        ("itl.p99", "no comparison"),
        ("itl.p99<=", "no bound"),
        ("itl.p99=50ms", "unknown comparison"),
        ("itl.p99==50ms", "unknown comparison"),
        ("itl.p99<==50ms", "unknown comparison \"<==\""),
        ("itl.p99<=-5ms", "finite number >= 0"),
        ("itl.p99<=1e400ms", "has an exponent: write the number out"),
        ("itl.p99<=50mn", "unknown time unit \"mn\""),
        ("itl.p99<=1s5", "is not a duration: missing unit after 5"),
        ("itl.p99<=1.2.3ms", "is not a duration"),
        ("itl.p99<=ms", "does not start with a number"),
        ("itlp99<=50ms", "is not metric.stat"),
        ("   ", "it is empty"),
    ];
    for (input, reason) in cases {
        let e = input
            .parse::<Slo>()
            .expect_err(&format!("{input:?} should be rejected"));
        let msg = e.to_string();
        assert!(msg.contains(reason), "{input:?}: {msg}");
        assert!(
            msg.contains(&format!("{input:?}")),
            "names the input: {msg}"
        );
        assert!(msg.contains("'itl.p99<=50ms'"), "shows an example: {msg}");
    }
}

#[test]
fn evaluate_compares_the_level_figure_with_the_bound() {
    // Level of the reference request alone: ITL gaps [10, 20] → p50 15, max 20.
    let level = summarize_level(&[reference()], &LevelOptions::default());
    let r = slo("itl.p50<=15ms").evaluate(&level);
    assert_eq!(
        r,
        SloResult {
            slo: "itl.p50<=15ms".into(),
            observed: Some(15.0),
            bound: 15.0,
            unit: "ms".into(),
            pass: true,
        }
    );
    assert!(!slo("itl.p50<15ms").evaluate(&level).pass, "15 < 15 fails");
    assert!(slo("itl.max>=20ms").evaluate(&level).pass);
    assert!(!slo("itl.max>20ms").evaluate(&level).pass);
    assert!(
        !slo("ttft.p99<=0.099s").evaluate(&level).pass,
        "TTFT is 100 ms"
    );
    assert!(slo("ttft.p99<=0.1s").evaluate(&level).pass);
    let speed = slo("output_speed.p50>=100").evaluate(&level);
    assert_eq!(
        (speed.observed, speed.unit.as_str()),
        (Some(100.0), "tok/s")
    );
    assert!(speed.pass);
    assert!(!slo("output_speed.p50>100").evaluate(&level).pass);

    // A closed-loop level has no response-time TTFT: absent fails.
    let mut closed = reference();
    closed.scheduled_ns = None;
    let level = summarize_level(&[closed], &LevelOptions::default());
    let r = slo("ttft_response.p99<=1s").evaluate(&level);
    assert_eq!((r.observed, r.pass, r.bound), (None, false, 1000.0));
}

#[test]
fn slo_result_serializes_as_the_report_holds_it() {
    let level = summarize_level(&[reference()], &LevelOptions::default());
    let v = serde_json::to_value(slo("itl.p99<=50ms").evaluate(&level)).unwrap();
    // p99 of [10, 20]: 10 + 0.99·10 = 19.9
    let observed = v["observed"].as_f64().unwrap();
    close(observed, 19.9);
    assert_eq!(
        v,
        json!({"slo": "itl.p99<=50ms", "observed": observed, "bound": 50.0, "unit": "ms", "pass": true})
    );
    let absent = SloResult {
        slo: "ttft_response.p99<=1s".into(),
        observed: None,
        bound: 1000.0,
        unit: "ms".into(),
        pass: false,
    };
    let v = serde_json::to_value(&absent).unwrap();
    assert!(v["observed"].is_null());
    assert_eq!(serde_json::from_value::<SloResult>(v).unwrap(), absent);
}

#[test]
fn request_value_is_that_requests_own_figure() {
    let r = reference();
    let v = |s: &str| slo(s).request_value(&r);
    assert_eq!(v("ttft.p99<=1s"), Some(100.0));
    assert_eq!(
        v("ttft.mean<=1s"),
        Some(100.0),
        "one value whatever the stat"
    );
    assert_eq!(v("ttft_content.p99<=1s"), Some(110.0));
    assert_eq!(v("ttft_response.p99<=1s"), Some(105.0));
    assert_eq!(v("e2e.p99<=1s"), Some(135.0));
    assert_eq!(v("tpot.p50<=1s"), Some(10.0));
    close(v("output_speed.p50>=1").unwrap(), 100.0);
    // Its own gaps [10, 20] at the stat.
    assert_eq!(v("itl.p50<=1s"), Some(15.0));
    assert_eq!(v("itl.max<=1s"), Some(20.0));
    assert_eq!(v("itl.min<=1s"), Some(10.0));
    close(v("itl.p90<=1s").unwrap(), 19.0);
    // Per-token gaps [5, 5, 20]: p50 5, mean 10.
    assert_eq!(v("itl_per_token.p50<=1s"), Some(5.0));
    assert_eq!(v("itl_per_token.mean<=1s"), Some(10.0));

    // A request without a schedule or a chunk has no such value.
    let mut bare = rec(Outcome::Succeeded, 0, &[], 10);
    bare.scheduled_ns = None;
    assert_eq!(slo("ttft.p99<=1s").request_value(&bare), None);
    assert_eq!(slo("ttft_response.p99<=1s").request_value(&bare), None);
    assert_eq!(slo("itl.p99<=1s").request_value(&bare), None);
}

#[test]
fn a_one_request_level_and_that_request_agree() {
    let r = reference();
    let level = summarize_level(std::slice::from_ref(&r), &LevelOptions::default());
    for e in [
        "ttft.p99<=1s",
        "ttft_content.p50<=1s",
        "ttft_response.mean<=1s",
        "e2e.max<=1s",
        "tpot.p90<=1s",
        "output_speed.min>=1",
        "itl.p50<=1s",
        "itl.p99<=1s",
        "itl.mean<=1s",
        "itl_per_token.p90<=1s",
        "itl_per_token.p999<=1s",
    ] {
        let s = slo(e);
        let per_request = s.request_value(&r).unwrap();
        let observed = s.evaluate(&level).observed.unwrap();
        close(per_request, observed);
    }
}

#[test]
fn request_meets_needs_success_and_treats_short_answers_as_nothing_to_violate() {
    let itl = slo("itl.p99<=25ms");
    let tpot = slo("tpot.p50<=15ms");
    let ttft = slo("ttft.p99<=150ms");
    assert!(itl.request_meets(&reference()));
    assert!(tpot.request_meets(&reference()));
    assert!(ttft.request_meets(&reference()));
    assert!(
        !slo("itl.max<20ms").request_meets(&reference()),
        "its max gap is 20"
    );

    // Fast but failed: not good.
    let mut failed = reference();
    failed.outcome = Outcome::StreamError;
    assert!(!itl.request_meets(&failed));

    // One chunk carrying one token: no gap, no TPOT, no speed to violate.
    let one = rec(Outcome::Succeeded, 0, &[(40, Some(1))], 41);
    assert_eq!(itl.request_value(&one), None);
    assert!(itl.request_meets(&one));
    assert!(tpot.request_meets(&one));
    assert!(slo("output_speed.p50>=1000").request_meets(&one));
    assert!(ttft.request_meets(&one));
    assert!(!slo("ttft.p99<=39ms").request_meets(&one));

    // Reasoning only (chunks, no visible content): nothing for ttft_content to violate.
    assert!(slo("ttft_content.p99<=1ms").request_meets(&one));

    // Missing times fail: no chunk for TTFT, no schedule for response time.
    let empty = rec(Outcome::Succeeded, 0, &[], 10);
    assert!(!ttft.request_meets(&empty));
    assert!(!slo("ttft_content.p99<=1s").request_meets(&empty));
    assert!(!slo("ttft_response.p99<=10s").request_meets(&one));
    // Out-of-order chunks: the TPOT span is negative, which is not a pass.
    let backwards = rec(Outcome::Succeeded, 0, &[(50, None), (40, None)], 60);
    assert!(!tpot.request_meets(&backwards));
    assert!(!itl.request_meets(&backwards));
}

#[test]
fn goodput_counts_sent_requests_that_succeeded_and_met_every_slo() {
    let slos = [slo("itl.p99<=25ms"), slo("ttft.p90<=150ms")];
    let good = reference(); // gaps 10, 20; TTFT 100
    let mut slow_itl = reference(); // a 40 ms gap: p99 of [10, 40] = 39.7
    slow_itl.chunks[2] = Chunk(155 * MS, Some(1));
    let slow_ttft = rec(Outcome::Succeeded, 0, &[(200, None), (210, None)], 215);
    let mut failed = reference();
    failed.outcome = Outcome::Truncated;
    let mut warm = reference();
    warm.warmup = true;
    // Never left the client: not sent, not in the denominator.
    let dropped = RequestRecord::new(9, Outcome::AbortedAtDeadline);
    let records = [
        good.clone(),
        good.clone(),
        good,
        slow_itl,
        slow_ttft,
        failed,
        warm,
        dropped,
    ];

    let g = goodput(&records, &slos, Some(2.0));
    assert_eq!(g.good_requests, 3);
    assert_eq!(g.share, Some(0.5), "3 of 6 sent");
    assert_eq!(g.requests_per_s, Some(1.5));

    // Each SLO alone.
    assert_eq!(goodput(&records, &slos[..1], None).good_requests, 4);
    assert_eq!(goodput(&records, &slos[1..], None).good_requests, 4);
    // No SLOs: every succeeded request is good.
    let all = goodput(&records, &[], Some(0.0));
    assert_eq!(all.good_requests, 5);
    assert_eq!(all.requests_per_s, None, "a zero-length window has no rate");
    // Nothing sent: no share.
    let none = goodput(&records[6..], &slos, Some(1.0));
    assert_eq!((none.good_requests, none.share), (0, None));
    assert_eq!(
        serde_json::to_value(g).unwrap(),
        json!({"good_requests": 3, "share": 0.5, "requests_per_s": 1.5})
    );
}

/// 8 requests, 1 succeeded, 5 × HTTP 503, 2 × HTTP 429 (and one
/// warm-up failure, left out): error rate 7/8 = 87.5 %, 5xx 62.5 %, 429 25 %.
fn mostly_failing() -> Vec<RequestRecord> {
    let mut recs = vec![reference()];
    for (i, o) in [Outcome::Http5xx; 5]
        .into_iter()
        .chain([Outcome::Http429; 2])
        .enumerate()
    {
        let mut r = rec(o, 1, &[], 2);
        r.index = i as u64 + 1;
        recs.push(r);
    }
    let mut warm = rec(Outcome::Http5xx, 1, &[], 2);
    warm.warmup = true;
    recs.push(warm);
    recs
}

#[test]
fn error_rates_are_slos_overall_and_per_class() {
    assert_eq!(slo("errors.rate<=5%").text, "errors.rate<=5%");
    assert_eq!(slo("errors.rate <= 0.05").bound, 5.0);
    assert_eq!(slo("errors.rate<=0.05").text, "errors.rate<=0.05");
    let per_class = slo("errors.http_5xx.rate<1%");
    assert_eq!(
        per_class.metric,
        SloMetric::ErrorRate(Some(Outcome::Http5xx))
    );
    assert_eq!(per_class.text, "errors.http_5xx.rate<1%");
    for bad in [
        "errors.rate<=5ms",
        "errors.rate<=150%",
        "errors.rate<=2",
        "errors.succeeded.rate<=1%",
        "errors.nope.rate<=1%",
        "errors.p99<=1%",
        "errors<=1%",
    ] {
        assert!(bad.parse::<Slo>().is_err(), "{bad} should be rejected");
    }

    let level = summarize_level(&mostly_failing(), &LevelOptions::default());
    let r = slo("errors.rate<=10%").evaluate(&level);
    assert_eq!(
        r,
        SloResult {
            slo: "errors.rate<=10%".into(),
            observed: Some(87.5),
            bound: 10.0,
            unit: "%".into(),
            pass: false,
        }
    );
    assert_eq!(
        slo("errors.http_5xx.rate<=0.625").evaluate(&level).observed,
        Some(62.5)
    );
    assert!(slo("errors.http_5xx.rate<=0.625").evaluate(&level).pass);
    assert_eq!(
        slo("errors.http_429.rate<=25%").evaluate(&level).observed,
        Some(25.0)
    );
    assert_eq!(
        slo("errors.truncated.rate<=0%").evaluate(&level).observed,
        Some(0.0)
    );
    // Nothing sent: no rate, which fails like any SLO without samples.
    let empty = summarize_level(&[], &LevelOptions::default());
    assert_eq!(slo("errors.rate<=100%").evaluate(&empty).observed, None);
    // Per request, an error rate has nothing to say: goodput is the one success.
    let g = goodput(&mostly_failing(), &[slo("errors.rate<=1%")], None);
    assert_eq!(g.good_requests, 1);
}

#[test]
fn the_error_ceiling_and_find_max_probes() {
    use cadence_core::slo::{error_ceiling, probe_passes, DEFAULT_MAX_ERROR_RATE};
    let level = summarize_level(&mostly_failing(), &LevelOptions::default());
    let w = error_ceiling(&level.requests, DEFAULT_MAX_ERROR_RATE).expect("87.5 % > 5 %");
    assert!(
        w.contains("error rate 87.5 % (7 of 8 sent requests failed)"),
        "{w}"
    );
    assert_eq!(
        error_ceiling(&level.requests, 0.875),
        None,
        "at the ceiling passes"
    );
    assert!(error_ceiling(&level.requests, 0.874).is_some());
    let latency = [slo("itl.p99<=1s")];
    assert!(
        !probe_passes(&level, &latency, DEFAULT_MAX_ERROR_RATE),
        "mostly failing"
    );
    assert!(probe_passes(&level, &latency, 1.0), "ceiling raised");
    let ok = summarize_level(&[reference()], &LevelOptions::default());
    assert!(probe_passes(&ok, &latency, DEFAULT_MAX_ERROR_RATE));
    assert!(!probe_passes(&ok, &[slo("itl.p99<=1ms")], 1.0));
    let none = summarize_level(
        &[rec(Outcome::Http5xx, 1, &[], 2)],
        &LevelOptions::default(),
    );
    assert!(!probe_passes(&none, &[], 1.0), "no success never passes");
}

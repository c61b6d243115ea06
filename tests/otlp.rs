//! `cadence bench --otlp`: each request a span at the collector, its times the record's
//! own; a collector that fails costs spans, counted in the report, never the run's
//! figures or exit code.

mod common;

use common::cadence;
use common::collector::{collector, spans_of};
use predicates::prelude::PredicateBooleanExt;
use serde_json::Value;

fn bench(url: &str, dir: &std::path::Path) -> (Option<i32>, Value, Vec<Value>) {
    bench_with(url, dir, &["-n", "6", "-c", "2"])
}

fn bench_with(url: &str, dir: &std::path::Path, load: &[&str]) -> (Option<i32>, Value, Vec<Value>) {
    let otlp = ["--otlp", url, "--otlp-protocol", "http/json"];
    let env = [("OTEL_EXPORTER_OTLP_TIMEOUT", "2000")];
    common::bench_report(&[load, &otlp[..]].concat(), &env, dir)
}

fn attr<'a>(span: &'a Value, key: &str) -> &'a Value {
    let a = span["attributes"].as_array().unwrap();
    let kv = a.iter().find(|kv| kv["key"] == key);
    &kv.unwrap_or_else(|| panic!("{key} in {span}"))["value"]
}

fn ns(v: &Value) -> u64 {
    v.as_str().unwrap().parse().unwrap()
}

#[test]
fn every_request_is_a_span_whose_times_are_its_records() {
    let (url, bodies) = collector(200);
    let dir = tempfile::tempdir().unwrap();
    let (code, report, records) = bench(&url, dir.path());
    assert_eq!(code, Some(0));
    assert_eq!(report["otlp"]["spans"], 6, "{}", report["otlp"]);
    assert_eq!(report["otlp"]["exported"], 6);
    assert_eq!(report["otlp"]["dropped"], 0);
    let spans = spans_of(&bodies);
    assert_eq!(spans.len(), records.len());
    for r in &records {
        let i = r["index"].as_u64().unwrap();
        let s = spans
            .iter()
            .find(|s| ns(&attr(s, "cadence.request.index")["intValue"]) == i)
            .unwrap();
        assert_eq!(s["kind"], 3, "client");
        // The span is the one the request's traceparent named.
        assert_eq!(s["traceId"], r["trace"]["trace_id"]);
        assert_eq!(s["spanId"], r["trace"]["span_id"]);
        assert_eq!(r["trace"]["sampled"], true);
        assert_eq!(attr(s, "gen_ai.operation.name")["stringValue"], "chat");
        let (sent, end) = (
            r["sent_ns"].as_u64().unwrap(),
            r["end_ns"].as_u64().unwrap(),
        );
        let first = r["chunks"][0][0].as_u64().unwrap();
        let start = ns(&s["startTimeUnixNano"]);
        // One offset moves the record's clock to the wall clock: every time agrees.
        assert_eq!(ns(&s["endTimeUnixNano"]) - start, end - sent);
        let ev = &s["events"][0];
        assert_eq!(ev["name"], "cadence.first_chunk");
        assert_eq!(ns(&ev["timeUnixNano"]) - start, first - sent);
        let ttft = attr(s, "cadence.ttft_ms")["doubleValue"].as_f64().unwrap();
        assert_eq!(ttft, (first - sent) as f64 / 1e6);
        let out = attr(s, "gen_ai.usage.output_tokens")["intValue"].clone();
        assert_eq!(out, r["output_tokens"]["count"].to_string().as_str());
    }
}

#[test]
fn a_collector_answering_500_costs_spans_not_the_run() {
    let (url, _) = collector(500);
    let dir = tempfile::tempdir().unwrap();
    let (code, report, records) = bench(&url, dir.path());
    assert_eq!(code, Some(0), "the run's own exit code");
    assert_eq!(records.len(), 6);
    assert_eq!(report["levels"][0]["requests"]["succeeded"], 6);
    assert_eq!(report["otlp"]["dropped"], 6);
    assert_eq!(report["otlp"]["dropped_failed"], 6);
    let warnings = report["warnings"].to_string();
    assert!(warnings.contains("6 of 6 spans dropped"), "{warnings}");
}

#[test]
fn credentials_in_the_otlp_url_are_refused_unshown() {
    common::usage_error(
        &["bench", "-n", "1", "--otlp", "http://u:hunter2@127.0.0.1:9"],
        "OTEL_EXPORTER_OTLP_HEADERS",
    );
    cadence()
        .args(["bench", "-n", "1", "--otlp", "http://u:hunter2@127.0.0.1:9"])
        .assert()
        .stderr(predicates::str::contains("hunter2").not());
}

#[test]
fn a_sessions_steps_are_children_of_its_span_in_one_trace() {
    let (url, bodies) = collector(200);
    let dir = tempfile::tempdir().unwrap();
    let (code, _, records) = bench_with(
        &url,
        dir.path(),
        &["-n", "2", "-c", "2", "--turns", "3", "--input-tokens", "8"],
    );
    assert_eq!(code, Some(0));
    assert_eq!(records.len(), 6);
    let spans = spans_of(&bodies);
    for session in [0, 1] {
        let steps: Vec<&Value> = records.iter().filter(|r| r["session"] == session).collect();
        assert_eq!(steps.len(), 3, "session {session}");
        let trace = &steps[0]["trace"];
        let parent = &trace["parent_span_id"];
        assert!(steps
            .iter()
            .all(|r| r["trace"]["trace_id"] == trace["trace_id"]));
        assert!(steps
            .iter()
            .all(|r| &r["trace"]["parent_span_id"] == parent));
        let root = spans
            .iter()
            .find(|s| &s["spanId"] == parent)
            .expect("the session's span");
        assert_eq!(root["traceId"], trace["trace_id"]);
        assert_eq!(attr(root, "cadence.steps")["intValue"], "3");
        let children = spans
            .iter()
            .filter(|s| &s["parentSpanId"] == parent)
            .count();
        assert_eq!(children, 3, "one child per step");
        // The session spans its steps.
        let first_step = spans
            .iter()
            .find(|s| s["spanId"] == steps[0]["trace"]["span_id"])
            .unwrap();
        assert_eq!(root["startTimeUnixNano"], first_step["startTimeUnixNano"]);
    }
}

#[test]
fn unsampled_requests_carry_their_ids_but_are_not_exported() {
    let (url, bodies) = collector(200);
    let dir = tempfile::tempdir().unwrap();
    let (code, report, records) = bench_with(
        &url,
        dir.path(),
        &["-n", "6", "-c", "2", "--otlp-sample", "0"],
    );
    assert_eq!(code, Some(0));
    assert!(records
        .iter()
        .all(|r| r["trace"]["trace_id"].is_string() && r["trace"].get("sampled").is_none()));
    assert_eq!(report["otlp"]["spans"], 0);
    assert!(spans_of(&bodies).is_empty());
}

#[test]
fn a_bad_otlp_setting_is_a_usage_error_for_bench_and_proxy_showing_no_secret() {
    for cmd in [
        &["bench", "-n", "1"][..],
        &[
            "proxy",
            "--listen",
            "127.0.0.1:0",
            "--upstream",
            "http://127.0.0.1:9",
        ][..],
    ] {
        let out = cadence()
            .args(cmd)
            .args(["--otlp", "http://user:hunter2@127.0.0.1:4318"])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{cmd:?}: {err}");
        assert!(err.contains("OTEL_EXPORTER_OTLP_HEADERS"), "{err}");
        assert!(!err.contains("hunter2"), "{err}");
        let out = cadence()
            .args(cmd)
            .env("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
            .env("OTEL_EXPORTER_OTLP_PROTOCOL", "thrift")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{cmd:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("'thrift' is no OTLP protocol"), "{err}");
    }
}

/// bench → proxy → sim, each with `--otlp`: one trace through all three, the proxy's
/// span a child of bench's and the simulator's a child of the proxy's.
#[test]
fn bench_proxy_and_sim_are_one_trace() {
    let (url, bodies) = collector(200);
    let otlp = ["--otlp", &url, "--otlp-protocol", "http/json"];
    let (_sim, proxy, proxy_url) = common::traced_sim_and_proxy(&otlp, &[]);
    let dir = tempfile::tempdir().unwrap();
    let target = format!("{proxy_url}/v1");
    let (code, _, records) = bench_with(&url, dir.path(), &[&target, "-n", "4", "-c", "2"]);
    assert_eq!(code, Some(0));
    // The proxy and the sim export within their 200 ms flush.
    let wanted = 3 * records.len();
    for _ in 0..100 {
        if spans_of(&bodies).len() >= wanted {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    drop(proxy);
    let spans = spans_of(&bodies);
    assert_eq!(spans.len(), wanted);
    let child_of = |parent: &Value| {
        let s = spans.iter().find(|s| &s["parentSpanId"] == parent);
        s.unwrap_or_else(|| panic!("a span under {parent}")).clone()
    };
    for r in &records {
        let (trace, span) = (&r["trace"]["trace_id"], &r["trace"]["span_id"]);
        let hop = child_of(span);
        assert_eq!((&hop["traceId"], &hop["kind"]), (trace, &Value::from(2)));
        // The proxy saw the stream bench saw.
        let chunks = r["chunks"].as_array().unwrap().len().to_string();
        assert_eq!(attr(&hop, "cadence.chunks")["intValue"], chunks);
        let server = child_of(&hop["spanId"]);
        assert_eq!(&server["traceId"], trace);
        assert_eq!(server["name"], "llm_request");
        let ttft = &attr(&server, "gen_ai.latency.time_to_first_token")["doubleValue"];
        assert_eq!(ttft.as_f64(), Some(0.005), "the sim's schedule");
    }
}

//! `cadence bench --otlp`: the run's histograms at the collector's `/v1/metrics`, their
//! counts and sums the records' own figures; `--otlp-signals` sends either signal alone,
//! `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT` is honoured, and a collector that fails costs
//! the export, counted, never the run's figures or exit code.

mod common;

use common::collector::{collector, sent_to, Bodies};
use common::{cadence, read_records};
use serde_json::Value;

fn bench(
    env: &[(&str, &str)],
    args: &[&str],
    dir: &std::path::Path,
) -> (Option<i32>, Value, Vec<Value>) {
    let shape = ["-n", "6", "-c", "2", "--otlp-protocol", "http/json"];
    let env = [&[("OTEL_EXPORTER_OTLP_TIMEOUT", "2000")], env].concat();
    common::bench_report(&[&shape[..], args].concat(), &env, dir)
}

/// The last metrics export's histogram point named `name` (the series without
/// `error.type`, or of `gen_ai.token.type` `token`).
fn point(bodies: &Bodies, name: &str, token: Option<&str>) -> Value {
    let last = sent_to(bodies, "/v1/metrics")
        .pop()
        .expect("a metrics export");
    let doc: Value = serde_json::from_slice(&last).unwrap();
    let metrics = doc["resourceMetrics"][0]["scopeMetrics"][0]["metrics"]
        .as_array()
        .unwrap()
        .clone();
    let m = metrics.iter().find(|m| m["name"] == name).unwrap();
    let points = m["histogram"]["dataPoints"].as_array().unwrap();
    let attr = |p: &Value, k: &str| {
        p["attributes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|a| a["key"] == k)
            .map(|a| a["value"]["stringValue"].clone())
    };
    points
        .iter()
        .find(|p| match token {
            Some(t) => attr(p, "gen_ai.token.type") == Some(Value::from(t)),
            None => attr(p, "error.type").is_none(),
        })
        .unwrap()
        .clone()
}

fn count(p: &Value) -> u64 {
    p["count"].as_str().unwrap().parse().unwrap()
}

/// A sum of seconds as whole nanoseconds.
fn sum_ns(p: &Value) -> u64 {
    (p["sum"].as_f64().unwrap() * 1e9).round() as u64
}

#[test]
fn the_histograms_counts_and_sums_are_the_records_figures() {
    let (url, bodies) = collector(200);
    let dir = tempfile::tempdir().unwrap();
    let (code, report, records) = bench(&[], &["--otlp", &url], dir.path());
    assert_eq!(code, Some(0));
    let m = &report["otlp_metrics"];
    assert_eq!(m["last_exported"], true, "{m}");
    assert_eq!(m["failed"], 0);
    assert!(m["endpoint"].as_str().unwrap().ends_with("/v1/metrics"));
    let ok: Vec<&Value> = records
        .iter()
        .filter(|r| r["outcome"] == "succeeded")
        .collect();
    assert_eq!(ok.len(), 6);
    let ns = |r: &Value, k: &str| r[k].as_u64().unwrap();
    let chunk = |r: &Value, i: usize| r["chunks"][i][0].as_u64().unwrap();
    let ttft: u64 = ok.iter().map(|r| chunk(r, 0) - ns(r, "sent_ns")).sum();
    let e2e: u64 = ok.iter().map(|r| ns(r, "end_ns") - ns(r, "sent_ns")).sum();
    let mut gaps = (0u64, 0u64);
    for r in &ok {
        let n = r["chunks"].as_array().unwrap().len();
        for i in 1..n {
            gaps.0 += 1;
            gaps.1 += chunk(r, i) - chunk(r, i - 1);
        }
    }
    let out: u64 = ok
        .iter()
        .map(|r| r["output_tokens"]["count"].as_u64().unwrap())
        .sum();

    let p = point(&bodies, "gen_ai.client.operation.time_to_first_chunk", None);
    assert_eq!((count(&p), sum_ns(&p)), (6, ttft));
    let p = point(&bodies, "gen_ai.client.operation.duration", None);
    assert_eq!((count(&p), sum_ns(&p)), (6, e2e));
    let p = point(
        &bodies,
        "gen_ai.client.operation.time_per_output_chunk",
        None,
    );
    assert_eq!((count(&p), sum_ns(&p)), gaps);
    let buckets: u64 = p["bucketCounts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap().parse::<u64>().unwrap())
        .sum();
    assert_eq!(buckets, gaps.0, "every gap in a bucket");
    let p = point(&bodies, "gen_ai.client.token.usage", Some("output"));
    assert_eq!((count(&p), p["sum"].as_f64().unwrap() as u64), (6, out));
    // The spans went too, to their own path.
    assert_eq!(report["otlp"]["exported"], 6);
}

#[test]
fn otlp_signals_sends_either_alone_and_the_metrics_endpoint_variable_is_honoured() {
    let (url, bodies) = collector(200);
    let dir = tempfile::tempdir().unwrap();
    let (code, report, records) = bench(
        &[],
        &["--otlp", &url, "--otlp-signals", "metrics"],
        dir.path(),
    );
    assert_eq!(code, Some(0));
    assert!(sent_to(&bodies, "/v1/traces").is_empty());
    assert!(report.get("otlp").is_none());
    assert!(
        records.iter().all(|r| r.get("trace").is_none()),
        "no traceparent without traces"
    );
    assert!(!sent_to(&bodies, "/v1/metrics").is_empty());

    let (url, bodies) = collector(200);
    let (_, report, _) = bench(
        &[],
        &["--otlp", &url, "--otlp-signals", "traces"],
        dir.path(),
    );
    assert!(sent_to(&bodies, "/v1/metrics").is_empty());
    assert!(report.get("otlp_metrics").is_none());
    assert_eq!(report["otlp"]["exported"], 6);

    // The metrics' own variable, as written; no traces endpoint, so no spans.
    let (url, bodies) = collector(200);
    let own = format!("{url}/custom/metrics");
    let env = [("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", own.as_str())];
    let (code, report, _) = bench(&env, &[], dir.path());
    assert_eq!(code, Some(0));
    assert_eq!(
        sent_to(&bodies, "/custom/metrics").len() as u64,
        report["otlp_metrics"]["exports"].as_u64().unwrap()
    );
    assert!(report.get("otlp").is_none());
}

#[test]
fn a_collector_answering_500_costs_the_export_not_the_run() {
    let (url, _) = collector(500);
    let dir = tempfile::tempdir().unwrap();
    let (code, report, records) = bench(
        &[],
        &["--otlp", &url, "--otlp-signals", "metrics"],
        dir.path(),
    );
    assert_eq!(code, Some(0), "the run's own exit code");
    assert_eq!(records.len(), 6);
    assert_eq!(report["levels"][0]["requests"]["succeeded"], 6);
    let m = &report["otlp_metrics"];
    assert_eq!(m["last_exported"], false, "{m}");
    assert!(m["failed"].as_u64().unwrap() >= 1);
    let warnings = report["warnings"].to_string();
    assert!(
        warnings.contains("OTLP metrics: the last export"),
        "{warnings}"
    );
    assert!(warnings.contains("--otlp-signals traces"), "{warnings}");
}

#[test]
fn a_bad_signal_or_interval_is_a_usage_error_naming_it() {
    common::usage_error(
        &[
            "bench",
            "-n",
            "1",
            "--otlp",
            "http://127.0.0.1:9",
            "--otlp-signals",
            "logs",
        ],
        "'logs' is no OTLP signal",
    );
    cadence()
        .args(["bench", "-n", "1", "--otlp", "http://127.0.0.1:9"])
        .env("OTEL_METRIC_EXPORT_INTERVAL", "5")
        .assert()
        .code(2)
        .stderr(predicates::str::contains("OTEL_METRIC_EXPORT_INTERVAL"));
}

/// Sends SIGTERM to `child` and waits (up to 20 s) for it to end.
fn terminate(child: &mut std::process::Child) -> std::process::ExitStatus {
    let pid = child.id().to_string();
    std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    for _ in 0..400 {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    panic!("the proxy did not end on SIGTERM");
}

/// The last metrics export's histogram point named `name` of `model`'s series.
fn model_point(bodies: &Bodies, name: &str, model: &str) -> Value {
    let last = sent_to(bodies, "/v1/metrics").pop().expect("an export");
    let doc: Value = serde_json::from_slice(&last).unwrap();
    let metrics = &doc["resourceMetrics"][0]["scopeMetrics"][0]["metrics"];
    let m = metrics
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["name"] == name);
    let points = m.unwrap()["histogram"]["dataPoints"].as_array().unwrap();
    let of = |p: &&Value| {
        let a = p["attributes"].as_array().unwrap();
        a.iter()
            .any(|a| a["key"] == "gen_ai.request.model" && a["value"]["stringValue"] == model)
    };
    points.iter().find(of).unwrap().clone()
}

/// `cadence proxy --otlp`: each measured request's span names the model its body asked
/// for, and the proxy's live traffic is exported as the same histograms as bench's, by
/// model, at shutdown: their counts and sums are the proxy's records' own.
#[test]
fn the_proxys_spans_name_the_model_and_its_metrics_are_its_records() {
    let (url, bodies) = collector(200);
    let (_sim, sim_url) = common::fast_sim();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("proxy.jsonl");
    let up = ["proxy", "--listen", "127.0.0.1:0", "--upstream", &sim_url];
    let otlp = ["--otlp", &url, "--otlp-protocol", "http/json", "--records"];
    let (mut proxy, proxy_url) =
        common::spawn_listening(&[&up[..], &otlp, &[file.to_str().unwrap()]].concat());
    let target = format!("{proxy_url}/v1");
    for (model, n) in [("alpha", "3"), ("beta", "2")] {
        cadence()
            .args(["bench", &target, "--quiet", "-c", "1", "-n", n])
            .args(["--model", model, "--max-tokens", "8"])
            .assert()
            .success();
    }
    assert!(terminate(&mut proxy.0).success());
    let records = read_records(&file);
    assert_eq!(records.len(), 5);
    let spans = common::collector::spans_of(&bodies);
    assert_eq!(spans.len(), 5);
    for model in ["alpha", "beta"] {
        let mine: Vec<&Value> = records
            .iter()
            .filter(|r| r["proxy"]["model"] == model)
            .collect();
        let named = spans
            .iter()
            .filter(|s| s["name"] == format!("chat {model}"));
        assert_eq!(named.count(), mine.len(), "{model}");
        let ns = |r: &Value, k: &str| r[k].as_u64().unwrap();
        let chunk = |r: &Value, i: usize| r["chunks"][i][0].as_u64().unwrap();
        let ttft: u64 = mine.iter().map(|r| chunk(r, 0) - ns(r, "sent_ns")).sum();
        let e2e: u64 = mine
            .iter()
            .map(|r| ns(r, "end_ns") - ns(r, "sent_ns"))
            .sum();
        let mut gaps = (0u64, 0u64);
        for r in &mine {
            for i in 1..r["chunks"].as_array().unwrap().len() {
                gaps = (gaps.0 + 1, gaps.1 + chunk(r, i) - chunk(r, i - 1));
            }
        }
        let p = model_point(
            &bodies,
            "gen_ai.client.operation.time_to_first_chunk",
            model,
        );
        assert_eq!(
            (count(&p), sum_ns(&p)),
            (mine.len() as u64, ttft),
            "{model}"
        );
        let p = model_point(&bodies, "gen_ai.client.operation.duration", model);
        assert_eq!((count(&p), sum_ns(&p)), (mine.len() as u64, e2e), "{model}");
        let p = model_point(
            &bodies,
            "gen_ai.client.operation.time_per_output_chunk",
            model,
        );
        assert_eq!((count(&p), sum_ns(&p)), gaps, "{model}");
    }
}

//! Cadence runs written in the llm-d benchmark report format (v0.2.1, the common report
//! llm-d-benchmark's harnesses, inference-perf among them, are converted to), so a
//! Cadence run sits in the same dashboards and analyses as theirs. One report per load
//! level: the run's identity and times, the request counts, and the latency and
//! throughput aggregates, each named by the definition Cadence used (its ITL is the
//! pooled gaps between chunks). Checked against the published schema
//! (`schema/llmd-benchmark-report-v0.2.1.schema.json`) in the tests.

use cadence_core::{Distribution, LevelReport, Report};
use serde_json::{json, Map, Value};

/// The schema version written.
pub const VERSION: &str = "0.2.1";

/// One report per level of `report`: (level name, JSON text).
pub fn render(report: &Report) -> Vec<(String, String)> {
    report
        .levels
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let v = level(report, i, l);
            (
                l.name.clone(),
                serde_json::to_string_pretty(&v).expect("plain data serializes") + "\n",
            )
        })
        .collect()
}

/// A distribution as the report's `Statistics` in `units`.
fn stats(d: &Distribution, units: &str) -> Value {
    let mut m = Map::new();
    m.insert("units".into(), json!(units));
    m.insert("mean".into(), json!(d.mean));
    if let Some(s) = d.stddev {
        m.insert("stddev".into(), json!(s));
    }
    for (k, v) in [
        ("min", d.min),
        ("p50", d.p50),
        ("p90", d.p90),
        ("p95", d.p95),
        ("p99", d.p99),
        ("p99p9", d.p999),
        ("max", d.max),
    ] {
        m.insert(k.into(), json!(v));
    }
    Value::Object(m)
}

/// A single figure (a rate over the run's window) as `Statistics`.
fn scalar(v: f64, units: &str) -> Value {
    json!({ "units": units, "mean": v })
}

fn level(report: &Report, i: usize, l: &LevelReport) -> Value {
    let r = &report.run;
    let s = &l.summary;
    let start_ms = r.started_at_unix_ms;
    let eid = format!("cadence-{start_ms}");
    let mut time = Map::new();
    if start_ms > 0 {
        time.insert("start".into(), json!(iso(start_ms)));
        let end_ms = start_ms + (r.duration_s.max(0.0) * 1e3).round() as u64;
        time.insert("end".into(), json!(iso(end_ms)));
    }
    if r.duration_s > 0.0 {
        time.insert("duration".into(), json!(format!("PT{:.3}S", r.duration_s)));
    }
    let mut latency = Map::new();
    let mut put = |k: &str, d: &Option<Distribution>| {
        if let Some(d) = d {
            latency.insert(k.into(), stats(d, "ms"));
        }
    };
    put("time_to_first_token", &s.ttft);
    put("time_per_output_token", &s.tpot);
    put("inter_token_latency", &s.itl);
    put("request_latency", &s.e2e);
    // Typical time per output token including the first: LLMPerf's per-request
    // (last chunk - send) / tokens, which Cadence's conventions table holds.
    let ntpot = l
        .conventions
        .iter()
        .find(|c| c.convention == "llmperf")
        .and_then(|c| c.itl);
    put("normalized_time_per_output_token", &ntpot);
    let mut throughput = Map::new();
    if let Some(v) = s.throughput.output_tokens_per_s {
        throughput.insert("output_token_rate".into(), scalar(v, "tokens/s"));
    }
    if let Some(v) = s.throughput.requests_per_s {
        throughput.insert("request_rate".into(), scalar(v, "queries/s"));
    }
    let q = &s.requests;
    let mut requests = Map::new();
    requests.insert("total".into(), json!(q.sent));
    requests.insert("failures".into(), json!(q.failed_total()));
    requests.insert("incomplete".into(), json!(q.aborted + q.dropped));
    let mut description = format!(
        "Cadence {} run ({}) of {} against {}, level {}: ITL = gaps between consecutive chunks pooled over requests, TPOT = (last chunk - first chunk) / (tokens - 1) per request, NTPOT = (last chunk - send) / tokens per request; output tokens by source {}",
        report.cadence_version,
        r.mode,
        r.model,
        r.target,
        l.name,
        s.output_tokens.source.map_or("unknown", |src| src.name()),
    );
    if let Some(imp) = &report.imported {
        description.push_str(&format!(
            "; imported from {} ({}), not rebuilt: {}",
            imp.tool,
            imp.files.join(", "),
            if imp.not_rebuilt.is_empty() {
                "nothing".to_string()
            } else {
                imp.not_rebuilt.join("; ")
            }
        ));
    }
    json!({
        "version": VERSION,
        "run": {
            "uid": format!("{eid}-{i}"),
            "eid": eid,
            "time": Value::Object(time),
            "description": description,
            "keywords": ["cadence", l.name, r.api],
        },
        "results": {
            "request_performance": {
                "aggregate": {
                    "requests": Value::Object(requests),
                    "latency": Value::Object(latency),
                    "throughput": Value::Object(throughput),
                }
            }
        }
    })
}

/// `ms` since the Unix epoch as an ISO-8601 UTC time with milliseconds.
pub fn iso(ms: u64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms);
    cadence_core::wallclock::format_rfc3339(t)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iso_times_are_utc() {
        assert_eq!(iso(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(iso(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(iso(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }
}

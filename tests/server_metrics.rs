//! `--server-metrics` end to end against the built-in simulator: each cause injected
//! into its engine model (`--inject`) is named back by the stall table for most
//! stalled gaps, a clean run names none, samples survive `cadence report`, and a
//! server without metrics still gets its run measured, with a warning that says so.

mod common;

use common::{cadence, validate_report};
use serde_json::Value;
use std::sync::Mutex;

/// One timed run at a time: parallel runs on a small machine would stall each other.
static SERIAL: Mutex<()> = Mutex::new(());

/// Runs the built-in simulator at concurrency 8 for 100 requests with `args`,
/// scraping its metrics every 200 ms; returns the JSON report.
fn run(dir: &std::path::Path, args: &[&str]) -> Value {
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let json = dir.join("r.json");
    cadence()
        .args(["bench", "-c", "8", "-n", "100", "--quiet"])
        .args(["--server-metrics", "auto", "--scrape-interval", "200ms"])
        .args(args)
        .arg("--json")
        .arg(&json)
        .assert()
        .success();
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    validate_report(&report);
    report
}

/// (cause, stalls it explains) of the level, most first, and all stalls.
fn causes(report: &Value) -> (Vec<(String, u64)>, u64) {
    let s = &report["levels"][0]["server"];
    let causes = s["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["cause"].as_str().unwrap().to_string(),
                c["gaps"].as_u64().unwrap(),
            )
        })
        .collect();
    (causes, s["stalls_total"].as_u64().unwrap())
}

/// The injected cause explains more than half the stalls (and there are some).
fn assert_named(report: &Value, cause: &str) {
    let (causes, total) = causes(report);
    let named = causes.iter().find(|c| c.0 == cause).map_or(0, |c| c.1);
    assert!(total >= 5, "too few stalls to judge: {causes:?}");
    assert!(
        named * 2 > total,
        "{cause} explains {named} of {total} stalls: {causes:?}"
    );
}

#[test]
fn batch_growth_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let r = run(
        dir.path(),
        &["--stall-threshold", "15ms", "--inject", "batch@1s"],
    );
    assert_named(&r, "batch_growth");
}

#[test]
fn long_prompt_interference_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let r = run(
        dir.path(),
        &[
            "--stall-threshold",
            "40ms",
            "--inject",
            "long-prompt@1s",
            "--inject",
            "long-prompt@2500ms",
        ],
    );
    assert_named(&r, "prefill_interference");
}

#[test]
fn kv_exhaustion_with_preemption_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let r = run(
        dir.path(),
        &[
            "--preset",
            "tiny@cpu",
            "--kv-tokens",
            "2048",
            "--stall-threshold",
            "50ms",
            "--inject",
            "kv@1s",
        ],
    );
    assert_named(&r, "kv_preemption");
}

#[test]
fn queueing_is_named_and_fills_the_ttft_split() {
    let dir = tempfile::tempdir().unwrap();
    let r = run(
        dir.path(),
        &[
            "--preset",
            "tiny@cpu",
            "--max-batch",
            "8",
            "--stall-threshold",
            "300ms",
            "--inject",
            "queue@1s",
            "--inject",
            "queue@2500ms",
        ],
    );
    assert_named(&r, "queueing");
    let split = &r["levels"][0]["server"]["ttft_split"];
    let (client, queue) = (
        split["client_ms"].as_f64().unwrap(),
        split["server_queue_ms"].as_f64().unwrap(),
    );
    assert!(
        queue > client / 2.0,
        "the queue holds most of TTFT: {split}"
    );
}

#[test]
fn a_clean_run_names_no_cause_and_agrees_on_tokens() {
    let dir = tempfile::tempdir().unwrap();
    let r = run(dir.path(), &["--stall-threshold", "50ms"]);
    let (causes, _) = causes(&r);
    // On a loaded machine a client-side stall may fall where a scrape came late
    // (`no_server_data`); what must not happen is a server cause.
    assert!(
        causes
            .iter()
            .all(|(c, _)| c == "none" || c == "no_server_data"),
        "a clean run has no server cause: {causes:?}"
    );
    let s = &r["levels"][0]["server"];
    assert_eq!(s["scrape"]["engine"], "cadence-sim");
    assert_eq!(s["scrape"]["failures"], 0);
    let d = &s["decode"];
    assert_eq!(
        d["server_generated_tokens"].as_f64().unwrap(),
        d["client_output_tokens"].as_f64().unwrap(),
        "the first sample precedes the level and the last follows it: {d}"
    );
}

#[test]
fn samples_are_saved_with_the_run_and_the_report_rebuilds_them() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("run.jsonl");
    let r = run(
        dir.path(),
        &[
            "--stall-threshold",
            "40ms",
            "--inject",
            "long-prompt@1s",
            "--records",
            records.to_str().unwrap(),
        ],
    );
    let rebuilt = dir.path().join("again.json");
    cadence()
        .arg("report")
        .arg(&records)
        .arg("--json")
        .arg(&rebuilt)
        .assert()
        .success()
        .stdout(predicates::str::contains("Stall causes"));
    let again: Value = serde_json::from_str(&std::fs::read_to_string(&rebuilt).unwrap()).unwrap();
    assert_eq!(again["levels"][0]["server"], r["levels"][0]["server"]);
    assert!(r["levels"][0]["server"]["scrape"]["samples"]
        .as_array()
        .is_some_and(|s| s.len() >= 10));
}

#[test]
fn a_server_without_metrics_still_completes_and_says_so() {
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/metrics");
    let _one = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = cadence()
        .args(["bench", "-c", "4", "-n", "16", "--quiet"])
        .args(["--server-metrics", &url, "--scrape-interval", "100ms"])
        .arg("--json")
        .arg(&json)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let stdout = String::from_utf8(out).unwrap();
    assert!(
        stdout.contains("scrapes of http://127.0.0.1") && stdout.contains("failed"),
        "{stdout}"
    );
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    validate_report(&r);
    assert_eq!(r["levels"][0]["requests"]["succeeded"], 16);
    let s = &r["levels"][0]["server"]["scrape"];
    assert_eq!(s["samples"].as_array().unwrap().len(), 0);
    assert_eq!(s["failures"], s["attempts"]);
}

#[test]
fn bad_server_metrics_flags_are_usage_errors() {
    common::usage_error(
        &["bench", "--server-metrics", "ftp://x/metrics", "-n", "1"],
        "http:// or https://",
    );
    common::usage_error(&["bench", "--inject", "heat@1s", "-n", "1"], "not a cause");
    common::usage_error(
        &[
            "bench",
            "http://127.0.0.1:9/v1",
            "--inject",
            "kv@1s",
            "-n",
            "1",
        ],
        "without a URL",
    );
}

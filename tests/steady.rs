//! Steady state end to end: a closed-loop bench against `cadence sim` reports each
//! level's plateau (the span at the concurrency asked, ramp-up and drain left out) in
//! its JSON and console, `cadence report` finds the same plateau in the records file,
//! and `--plateau 0` turns it off.

mod common;
use common::{spawn_listening, validate_report};

use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// `cadence bench` at concurrency 4 of 24 requests with `extra` flags: its report and
/// console; the records go to `records`.
fn bench(base: &str, records: &Path, json: &Path, extra: &[&str]) -> (Value, String) {
    let out = common::cadence()
        .args(["bench", base, "--model", "m", "-c", "4", "-n", "24"])
        .args(["--max-tokens", "6"])
        .args(extra)
        .arg("--records")
        .arg(records)
        .arg("--json")
        .arg(json)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
    validate_report(&report);
    (report, String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn a_closed_loop_level_reports_its_plateau_and_report_finds_it_again() {
    let (_sim, base) = spawn_listening(&[
        "sim",
        "--addr",
        "127.0.0.1:0",
        "--ttft",
        "20ms",
        "--itl",
        "5ms",
    ]);
    let dir = tempfile::tempdir().unwrap();
    let (records, json) = (dir.path().join("r.jsonl"), dir.path().join("r.json"));
    let (report, console) = bench(&format!("{base}/v1"), &records, &json, &[]);
    let level = &report["levels"][0];
    let p = &level["plateau"];
    assert_eq!(p["share"], 0.9, "{p}");
    assert_eq!(p["min_in_flight"], 4, "{p}");
    let w = &p["window"];
    let (start, end) = (w["start_s"].as_f64().unwrap(), w["end_s"].as_f64().unwrap());
    assert!(start < end, "{w}");
    // The drain's last requests (sent while others finished) lie outside it.
    let inside = w["requests"].as_u64().unwrap();
    assert!((1..24).contains(&inside), "{w}");
    assert!(w["ttft"]["p50_ms"].as_f64().unwrap() >= 20.0, "{w}");
    assert!(w["itl"]["count"].as_u64().unwrap() >= inside * 5, "{w}");
    assert!(
        console.contains("Plateau (≥ 4 of 4 in flight,"),
        "{console}"
    );

    // The records file gives the same window.
    let again = common::cadence()
        .arg("report")
        .arg(&records)
        .arg("--json")
        .arg(dir.path().join("again.json"))
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(0), "{again:?}");
    let text = String::from_utf8_lossy(&again.stdout);
    assert!(text.contains("Plateau (≥ 4 of 4 in flight,"), "{text}");
    let rebuilt: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("again.json")).unwrap())
            .unwrap();
    assert_eq!(rebuilt["levels"][0]["plateau"], *p);

    // Off: no plateau at all.
    let (off, console) = bench(
        &format!("{base}/v1"),
        &dir.path().join("off.jsonl"),
        &dir.path().join("off.json"),
        &["--plateau", "0"],
    );
    assert!(
        off["levels"][0].get("plateau").is_none(),
        "{}",
        off["levels"][0]
    );
    assert!(!console.contains("Plateau"), "{console}");
}

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

    // Another share, recomputed from the same records; 0 turns it off.
    let report_at = |share: &str| {
        let json = dir.path().join(format!("at-{share}.json"));
        let out = common::cadence()
            .arg("report")
            .arg(&records)
            .args(["--plateau", share, "--json"])
            .arg(&json)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{out:?}");
        let v: Value = serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap();
        (v, String::from_utf8_lossy(&out.stdout).into_owned())
    };
    let (half, text) = report_at("50%");
    assert_eq!(half["levels"][0]["plateau"]["share"], 0.5);
    assert_eq!(half["levels"][0]["plateau"]["min_in_flight"], 2);
    assert!(text.contains("Plateau (≥ 2 of 4 in flight,"), "{text}");
    let (none, text) = report_at("0");
    assert!(none["levels"][0].get("plateau").is_none(), "{none}");
    assert!(!text.contains("Plateau"), "{text}");
    // A saved JSON report holds no records to recompute it from.
    common::usage_error(
        &["report", json.to_str().unwrap(), "--plateau", "50%"],
        "--plateau 0.5 recomputes each level's steady state from its records",
    );

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

/// A sweep against the engine-mode simulator with 4 batch slots: up to 4 in flight
/// every request is admitted at once; at 8, half wait for a slot, a whole answer long,
/// so TTFT p90 bends at c=4. The knee is printed, in the JSON and marked on the chart.
/// A sweep of 1, 2, 4 and 8 clients of 16 requests each against the engine-mode
/// simulator with `max_batch` slots: the JSON report, HTML page and records at `dir/k.*`.
fn sweep(max_batch: &str, dir: &Path) -> std::process::Output {
    let (_sim, base) = common::tiny_engine_sim(&["--max-batch", max_batch]);
    common::cadence()
        .args([
            "bench",
            &format!("{base}/v1"),
            "--model",
            "m",
            "-c",
            "1,2,4,8",
        ])
        .args(["-n", "16", "--max-tokens", "32", "--plateau", "0"])
        .arg("--json")
        .arg(dir.join("k.json"))
        .arg("--html")
        .arg(dir.join("k.html"))
        .arg("--records")
        .arg(dir.join("k.jsonl"))
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap()
}

#[test]
fn a_sweep_finds_its_ttft_knee_where_the_sims_batch_slots_fill() {
    let dir = tempfile::tempdir().unwrap();
    let (json, html) = (dir.path().join("k.json"), dir.path().join("k.html"));
    let out = sweep("4", dir.path());
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    validate_report(&report);
    let knees = report["knees"].as_array().unwrap();
    let ttft = knees.iter().find(|k| k["figure"] == "TTFT p90").unwrap();
    assert_eq!(ttft["axis"], "concurrency", "{ttft}");
    assert_eq!(ttft["at"]["load"], 4.0, "{ttft}");
    assert_eq!(ttft["past"]["load"], 8.0, "{ttft}");
    // ITL p99 answers either way (the batch's step time barely moves): a knee or why not.
    let itl = knees.iter().find(|k| k["figure"] == "ITL p99").unwrap();
    assert!(
        itl.get("at").is_some() || itl.get("absent").is_some(),
        "{itl}"
    );
    let console = String::from_utf8_lossy(&out.stdout);
    assert!(
        console.contains("Knee: TTFT p90 bends at c=4: "),
        "{console}"
    );
    assert!(console.contains(" at c=8\n"), "{console}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains(r#"<g class="knee">"#), "no knee marker");
    assert!(page.contains(">TTFT p90 knee</text>"));
}

/// `cadence compare` of two sweeps' records files: with 4 batch slots TTFT p90 bends
/// at c=4 (at 2 on a loaded machine), with 1 at c=1 (at c=2 every other request waits
/// a whole answer for the slot), so B's knee came earlier: worse, in the console, the
/// Markdown and the JSON.
#[test]
fn compare_says_where_each_sweeps_knee_is_and_that_it_moved() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    for (max_batch, dir) in [("4", &a), ("1", &b)] {
        let out = sweep(max_batch, dir.path());
        assert_eq!(out.status.code(), Some(0), "{out:?}");
    }
    let (json, md) = (a.path().join("cmp.json"), a.path().join("cmp.md"));
    let out = common::cadence()
        .arg("compare")
        .arg(a.path().join("k.jsonl"))
        .arg(b.path().join("k.jsonl"))
        .arg("--json")
        .arg(&json)
        .arg("--markdown")
        .arg(&md)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let c: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let ttft = c["knees"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["figure"] == "TTFT p90")
        .unwrap()
        .clone();
    assert_eq!(ttft["shift"], "earlier", "{ttft}");
    assert_eq!(ttft["b"]["load"], 1.0, "{ttft}");
    let from = ttft["a"]["load"].as_f64().unwrap();
    let line = format!("TTFT p90 knee moved from c={from} to c=1: earlier, WORSE");
    assert_eq!(ttft["line"], line.as_str());
    let console = String::from_utf8_lossy(&out.stdout);
    assert!(
        console.contains("Knees (where ITL p99 and TTFT p90 bend against load)\n"),
        "{console}"
    );
    assert!(console.contains(&format!("  {line}\n")), "{console}");
    let markdown = std::fs::read_to_string(&md).unwrap();
    assert!(markdown.contains(&format!("- {line}\n")), "{markdown}");
}

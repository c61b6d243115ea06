//! `cadence report` and `cadence compare` end to end against the built-in simulator:
//! a report rebuilt from records or JSON is the bench's own, every output format is
//! written, the SLO gate works on saved runs, and compare flags a planted ITL
//! regression but not a rerun of the same configuration.

mod common;

use assert_cmd::Command;
use common::{record_lines, usage_error, validate_report};
use predicates::prelude::*;
use std::path::Path;
use std::time::Duration;

/// The shared command with a longer watchdog: these tests run a sweep, then rebuild it.
fn cadence() -> Command {
    let mut c = common::cadence();
    c.timeout(Duration::from_secs(180));
    c
}

fn read_json(p: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// A small two-level sweep with records and a JSON report in `dir`.
fn sweep(dir: &Path, extra: &[&str]) -> (serde_json::Value, std::process::Output) {
    let json = dir.join("bench.json");
    let out = cadence()
        .args([
            "bench",
            "-c",
            "1,2",
            "-n",
            "6",
            "--max-tokens",
            "8",
            "--quiet",
        ])
        .args(extra)
        .arg("--records")
        .arg(dir.join("records.jsonl"))
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    assert!(json.exists(), "{out:?}");
    (read_json(&json), out)
}

#[test]
fn report_from_records_or_json_is_the_bench_report_in_every_format() {
    let dir = tempfile::tempdir().unwrap();
    let (bench, out) = sweep(dir.path(), &["--slo", "ttft.p99<=30s"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    validate_report(&bench);
    let level = &bench["levels"][0];
    assert_eq!(level["conventions"].as_array().unwrap().len(), 5);
    assert_eq!(level["charts"]["itl_cdf"].as_array().unwrap().len(), 103);
    assert!(bench["run"]["machine"].is_string());

    // From the records file: the same report, every output written.
    let rebuilt = dir.path().join("rebuilt.json");
    let csv_dir = dir.path().join("csv/");
    let out = cadence()
        .arg("report")
        .arg(dir.path().join("records.jsonl"))
        .arg("--json")
        .arg(&rebuilt)
        .arg("--html")
        .arg(dir.path().join("r.html"))
        .arg("--markdown")
        .arg(dir.path().join("r.md"))
        .arg("--csv")
        .arg(&csv_dir)
        .arg("--detail")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert_eq!(read_json(&rebuilt), bench, "rebuilt from records");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("Summary by level") && stdout.contains("llmperf"));
    let html = std::fs::read_to_string(dir.path().join("r.html")).unwrap();
    assert_eq!(html.matches(r#"<figure class="chart""#).count(), 8);
    let md = std::fs::read_to_string(dir.path().join("r.md")).unwrap();
    assert!(md.contains("| concurrency=2 | 6/6 |"), "{md}");
    let levels = std::fs::read_to_string(csv_dir.join("levels.csv")).unwrap();
    assert_eq!(levels.lines().count(), 3, "header + 2 levels");
    let requests = std::fs::read_to_string(csv_dir.join("requests.csv")).unwrap();
    assert_eq!(requests.lines().count(), 13, "header + 12 requests");
    assert!(requests.lines().nth(1).unwrap().contains(",succeeded,"));

    // From the JSON report: the same again.
    let again = dir.path().join("again.json");
    cadence()
        .arg("report")
        .arg(dir.path().join("bench.json"))
        .arg("--json")
        .arg(&again)
        .arg("--csv")
        .arg(dir.path().join("only.csv"))
        .assert()
        .code(0)
        .stderr(predicate::str::contains(
            "per-request CSV needs the records",
        ));
    assert_eq!(read_json(&again), bench, "rebuilt from JSON");
    assert!(dir.path().join("only.csv").exists());
}

#[test]
fn saved_runs_pass_through_the_slo_gate() {
    let dir = tempfile::tempdir().unwrap();
    sweep(dir.path(), &[]);
    let records = dir.path().join("records.jsonl");
    cadence()
        .arg("report")
        .arg(&records)
        .args(["--slo", "ttft.p50<=1us"])
        .assert()
        .code(3)
        .stdout(predicate::str::contains("FAIL"));
    cadence()
        .arg("report")
        .arg(&records)
        .args([
            "--slo",
            "itl.p50<=10s",
            "--convention",
            "guidellm",
            "--detail",
        ])
        .assert()
        .code(0)
        .stdout(
            predicate::str::contains("guidellm *")
                .and(predicate::str::contains("ITL (guidellm)"))
                .and(predicate::str::contains("TPOT (guidellm)")),
        );
    cadence()
        .arg("report")
        .arg(dir.path().join("bench.json"))
        .args(["--slo", "ttft.p50<=1us"])
        .assert()
        .code(3)
        .stdout(predicate::str::contains("goodput needs the records"));
}

#[test]
fn a_records_file_without_metadata_still_rebuilds_and_says_what_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    sweep(dir.path(), &[]);
    let text = std::fs::read_to_string(dir.path().join("records.jsonl")).unwrap();
    let old: String = record_lines(&text).map(|l| format!("{l}\n")).collect();
    let old_path = dir.path().join("old.jsonl");
    std::fs::write(&old_path, old).unwrap();
    let json = dir.path().join("old.json");
    cadence()
        .arg("report")
        .arg(&old_path)
        .arg("--json")
        .arg(&json)
        .assert()
        .code(0)
        .stdout(predicate::str::contains("no run line"));
    let v = read_json(&json);
    validate_report(&v);
    assert_eq!(v["levels"].as_array().unwrap().len(), 2);
    assert_eq!(v["levels"][1]["name"], "level 1");
    assert_eq!(v["levels"][1]["requests"]["succeeded"], 6);
}

#[test]
fn bad_report_input_is_a_usage_error_naming_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("bad.jsonl");
    std::fs::write(&p, "{\"index\":0,\"outcome\":\"succeeded\"}\nnot json\n").unwrap();
    cadence()
        .arg("report")
        .arg(&p)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("line 2"));
    usage_error(&["report", "/nonexistent/x.jsonl"], "cannot read");
    usage_error(&["compare", "a", "b", "--fail-on", "itl.p99:10%"], "sign");
}

/// A closed-loop run of the simulator with a fixed ITL, recorded to `path`.
fn recorded_run(path: &Path, itl_ms: u32) {
    bench_records(path, "24", &["-H", &format!("x-cadence-itl-ms: {itl_ms}")]);
}

/// A 4-client run of 24 requests at `max_tokens` against the built-in simulator, its
/// records at `path`.
fn bench_records(path: &Path, max_tokens: &str, extra: &[&str]) {
    cadence()
        .args([
            "bench",
            "-c",
            "4",
            "-n",
            "24",
            "--max-tokens",
            max_tokens,
            "--quiet",
        ])
        .args(extra)
        .arg("--records")
        .arg(path)
        .assert()
        .code(0);
}

fn compare_json(a: &Path, b: &Path, extra: &[&str]) -> (Option<i32>, serde_json::Value) {
    let out_json = a.with_extension("compare.json");
    let out = cadence()
        .arg("compare")
        .arg(a)
        .arg(b)
        .args(extra)
        .arg("--json")
        .arg(&out_json)
        .output()
        .unwrap();
    (out.status.code(), read_json(&out_json))
}

fn row<'a>(c: &'a serde_json::Value, metric: &str) -> &'a serde_json::Value {
    c["levels"][0]["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["metric"] == metric)
        .unwrap()
}

fn verdict<'a>(c: &'a serde_json::Value, metric: &str) -> &'a str {
    row(c, metric)["verdict"].as_str().unwrap()
}

#[test]
fn compare_flags_a_planted_itl_regression_and_not_a_rerun() {
    let dir = tempfile::tempdir().unwrap();
    let (a, a2, b) = (
        dir.path().join("a.jsonl"),
        dir.path().join("a2.jsonl"),
        dir.path().join("b.jsonl"),
    );
    recorded_run(&a, 10);
    recorded_run(&a2, 10);
    recorded_run(&b, 12);

    let rule = ["--fail-on", "itl.p50:+10%", "--fail-on", "tpot.mean:+10%"];
    let (code, c) = compare_json(&a, &b, &rule);
    assert_eq!(code, Some(5), "a 20 % slower ITL fails the rule: {c:#}");
    assert_eq!(c["samples"], true);
    for m in ["itl.p50", "itl.mean", "tpot.p50", "tpot.mean"] {
        assert_eq!(verdict(&c, m), "worse", "{m}: {c:#}");
    }
    assert_eq!(verdict(&c, "output_speed.p50"), "worse");
    assert_eq!(c["failed_rules"].as_array().unwrap().len(), 2);

    let (code, c) = compare_json(&a, &a2, &rule);
    assert_eq!(code, Some(0), "the same configuration passes: {c:#}");
    let kinds: Vec<&str> = c["differences"].as_array().map_or(vec![], |d| {
        d.iter().map(|x| x["kind"].as_str().unwrap()).collect()
    });
    assert_eq!(kinds, ["draws"], "another seed only: {c:#}");
    for m in ["itl.mean", "tpot.p50", "tpot.mean"] {
        assert_eq!(verdict(&c, m), "unchanged", "{m}: {c:#}");
    }
    // The median gap of a 10 ms sim stream sits inside the timer's wake-up jitter, so
    // on a loaded machine two reruns can differ by just over the 5 % floor (seen in CI:
    // 9.78 against 10.29 ms); what must hold is that the rule does not fire.
    let p50 = row(&c, "itl.p50")["change"].as_f64().unwrap();
    assert!(p50.abs() < 0.10, "itl.p50 of a rerun moved {p50}: {c:#}");

    // JSON reports alone: the change is shown, noise cannot be judged.
    let (ja, jb) = (dir.path().join("a.json"), dir.path().join("b.json"));
    for (rec, json) in [(&a, &ja), (&b, &jb)] {
        cadence()
            .arg("report")
            .arg(rec)
            .arg("--json")
            .arg(json)
            .assert()
            .code(0);
    }
    cadence()
        .arg("compare")
        .arg(&ja)
        .arg(&jb)
        .assert()
        .code(0)
        .stdout(predicate::str::contains(
            "significance needs per-request samples",
        ));
    e2e_p50_reads_the_same_in_report_and_compare(&ja, &jb);
}

/// One cell formatter: the E2E p50 that `report` prints for A is, character for
/// character, the A figure `compare` prints (compare once wrote "241.23 ms" where the
/// report wrote "241.2 ms").
fn e2e_p50_reads_the_same_in_report_and_compare(a: &Path, b: &Path) {
    let stdout = |args: &[&std::ffi::OsStr]| {
        let out = cadence().args(args).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let report = stdout(&["report".as_ref(), a.as_os_str()]);
    let compare = stdout(&["compare".as_ref(), a.as_os_str(), b.as_os_str()]);
    let words = |text: &str, first: &str| -> Vec<String> {
        let line = text
            .lines()
            .find(|l| l.split_whitespace().next() == Some(first))
            .unwrap_or_else(|| panic!("no {first} line in {text}"));
        line.split_whitespace().map(String::from).collect()
    };
    // E2E  count  mean (value unit)  p50 (value unit) ...
    let r = words(&report, "E2E");
    // e2e.p50  A (value unit)  B (value unit) ...
    let c = words(&compare, "e2e.p50");
    assert_eq!(
        format!("{} {}", r[4], r[5]),
        format!("{} {}", c[1], c[2]),
        "{report}\n{compare}"
    );
}

#[test]
fn records_files_from_several_clients_merge_by_level() {
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    sweep(d1.path(), &[]);
    sweep(d2.path(), &[]);
    let json = d1.path().join("merged.json");
    let md = d1.path().join("merged.md");
    cadence()
        .arg("report")
        .arg(d1.path().join("records.jsonl"))
        .arg(d2.path().join("records.jsonl"))
        .arg("--json")
        .arg(&json)
        .arg("--markdown")
        .arg(&md)
        .assert()
        .code(0)
        .stdout(predicate::str::contains("merged 2 records files"));
    let v = read_json(&json);
    validate_report(&v);
    for level in v["levels"].as_array().unwrap() {
        let req = &level["requests"];
        assert_eq!(req["intended"], 12, "intended adds up across files: {req}");
        assert_eq!(req["succeeded"], 12);
    }
    // Compare's Markdown for a PR comment, from the same files.
    cadence()
        .arg("compare")
        .arg(d1.path().join("records.jsonl"))
        .arg(d2.path().join("records.jsonl"))
        .args(["--markdown", "-"])
        .assert()
        .code(0)
        .stdout(
            predicate::str::contains("| itl.p99 |")
                .and(predicate::str::contains("**concurrency=2**")),
        );
}

#[test]
fn a_tiny_exact_samples_budget_buckets_the_distributions_the_json_says_so_and_report_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let (bench, out) = sweep(dir.path(), &["--exact-samples", "1"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    validate_report(&bench);
    let level = &bench["levels"][0];
    for k in ["ttft", "itl", "e2e"] {
        let b = &level[k]["bucketed"];
        assert_eq!(b["relative_error"], 1.0 / 256.0, "{k}: {level}");
        assert_eq!(b["resolution"], 0.001, "{k}");
    }
    assert_eq!(level["itl"]["count"], 6 * 7, "counts stay exact");
    assert!(
        level["warnings"].to_string().contains("--exact-samples"),
        "{}",
        level["warnings"]
    );

    // Rebuilt from the records, the run's own budget holds (its run line keeps it).
    let rebuilt = dir.path().join("rebuilt.json");
    cadence()
        .arg("report")
        .arg(dir.path().join("records.jsonl"))
        .arg("--json")
        .arg(&rebuilt)
        .assert()
        .code(0);
    let rebuilt = read_json(&rebuilt);
    assert_eq!(rebuilt["levels"][0]["itl"], level["itl"]);

    // The same records with the default budget given: exact, no `bucketed` key at all.
    let exact = dir.path().join("exact.json");
    cadence()
        .arg("report")
        .arg(dir.path().join("records.jsonl"))
        .args(["--exact-samples", "4000000"])
        .arg("--json")
        .arg(&exact)
        .assert()
        .code(0);
    let exact = read_json(&exact);
    assert!(!exact.to_string().contains("bucketed"));
    let (e, b) = (&exact["levels"][0]["itl"], &level["itl"]);
    assert_eq!(
        (e["count"].clone(), e["min_ms"].clone(), e["max_ms"].clone()),
        (b["count"].clone(), b["min_ms"].clone(), b["max_ms"].clone())
    );
    let (pe, pb) = (e["p99_ms"].as_f64().unwrap(), b["p99_ms"].as_f64().unwrap());
    assert!(
        (pe - pb).abs() <= pe / 256.0 + 0.0005,
        "exact {pe} bucketed {pb}"
    );
}

#[test]
fn compare_names_each_workload_difference_and_refuses_a_verdict_across_them() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, max_tokens: &str| {
        let path = dir.path().join(name);
        bench_records(&path, max_tokens, &[]);
        path
    };
    let (a, b) = (run("a.jsonl", "24"), run("b.jsonl", "48"));
    let out = cadence()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .args(["--fail-on", "e2e.p50:+10%"])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(2), "{stdout}{stderr}");
    let block = stdout
        .find("Differences: A and B ran different workloads")
        .unwrap();
    assert!(block < stdout.find("e2e.p50").unwrap(), "{stdout}");
    assert!(!stdout.contains("REGRESSION"), "no verdict: {stdout}");
    assert!(
        stdout.contains("Note: --fail-on not judged: A and B ran different workloads (it would have failed e2e.p50:+10% at concurrency=4"),
        "{stdout}"
    );
    for said in [
        "--max-tokens: A 24, B 48",
        "output tokens per request at concurrency=4: A 24, B 48",
        "--allow-different-workloads",
    ] {
        assert!(stderr.contains(said), "{said}: {stderr}");
    }
    let (code, c) = compare_json(
        &a,
        &b,
        &["--fail-on", "e2e.p50:+10%", "--allow-different-workloads"],
    );
    assert_eq!(
        code,
        Some(5),
        "allowed, the verdict is given: E2E doubled: {c:#}"
    );
    let workload: Vec<&str> = c["differences"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"] == "workload")
        .map(|d| d["what"].as_str().unwrap())
        .collect();
    assert_eq!(
        workload,
        ["--max-tokens", "output tokens per request at concurrency=4"],
        "{c:#}"
    );
}

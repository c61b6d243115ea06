//! A fleet on one machine: four `cadence bench` shard processes started with the
//! environment a Kubernetes Indexed Job gives its pods (JOB_COMPLETION_INDEX,
//! CADENCE_SHARDS, CADENCE_START_AT) against one `cadence sim`, merged by `cadence
//! report`. The simulator's own request log is the truth about the arrivals.

mod common;

use common::{cadence, spawn_listening, validate, Killed};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, SystemTime};

const SHARDS: u32 = 4;
/// The fleet's total rate (req/s) and how long each level sends.
const RATE: f64 = 40.0;
const SECONDS: f64 = 2.0;

/// `cadence sim` on port 0 with a flat 10 ms ITL and a send log; its URL (`…/v1`).
fn sim(log: &Path) -> (Killed, String) {
    let log = log.to_str().unwrap();
    let (sim, base) = spawn_listening(&[
        "sim",
        "--addr",
        "127.0.0.1:0",
        "--ttft",
        "fixed:20ms",
        "--itl",
        "fixed:10ms",
        "--send-log",
        log,
    ]);
    (sim, format!("{base}/v1"))
}

/// The load every run of this file sends, as arguments after the URL.
fn load_args(rate: f64) -> Vec<String> {
    [
        "--model",
        "m",
        "--rate",
        &rate.to_string(),
        "-d",
        "2s",
        "--max-tokens",
        "8",
        "--grace",
        "2s",
        "--quiet",
        // The shared 2-core machine may make a shard late: that is measured, not judged here.
        "--max-late",
        "100%",
    ]
    .map(String::from)
    .to_vec()
}

/// Starts the fleet's shards with the Job's environment, all writing into `dir`, and
/// waits for them; their exit codes.
fn run_fleet(url: &str, dir: &Path) -> Vec<Option<i32>> {
    let start = SystemTime::now() + Duration::from_millis(2500);
    let start_at = cadence_core::wallclock::format_rfc3339(start);
    let children: Vec<Child> = (0..SHARDS)
        .map(|i| {
            Command::new(assert_cmd::cargo::cargo_bin("cadence"))
                .env_remove("OPENAI_API_KEY")
                .env("JOB_COMPLETION_INDEX", i.to_string())
                .env("CADENCE_SHARDS", SHARDS.to_string())
                .env("CADENCE_START_AT", &start_at)
                .arg("bench")
                .arg(url)
                .args(load_args(RATE))
                .arg("--records")
                .arg(dir.join(format!("shard-{i}.jsonl")))
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    children
        .into_iter()
        .map(|c| {
            let out = c.wait_with_output().unwrap();
            assert!(
                matches!(out.status.code(), Some(0 | 4)),
                "a shard failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            out.status.code()
        })
        .collect()
}

/// `cadence report ARGS --json OUT`: its exit code and the report.
fn report(args: &[&std::ffi::OsStr], out: &Path) -> (Option<i32>, Value) {
    let run = cadence()
        .arg("report")
        .args(args)
        .arg("--json")
        .arg(out)
        .output()
        .unwrap();
    let text = std::fs::read_to_string(out).unwrap_or_else(|_| {
        panic!(
            "no report written: {}",
            String::from_utf8_lossy(&run.stderr)
        )
    });
    validate(&text);
    (run.status.code(), serde_json::from_str(&text).unwrap())
}

/// The request records of a records file.
fn records(path: &Path) -> Vec<Value> {
    common::read_records(path)
}

/// When the simulator received each streamed request, sorted (s on its clock).
fn arrivals(log: &Path) -> Vec<f64> {
    let mut at: Vec<f64> = std::fs::read_to_string(log)
        .unwrap()
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["received_ns"]
                .as_f64()
                .unwrap()
                / 1e9
        })
        .collect();
    at.sort_by(f64::total_cmp);
    at
}

fn p(report: &Value, metric: &str, stat: &str) -> f64 {
    report["levels"][0][metric][stat].as_f64().unwrap()
}

#[test]
fn four_shards_with_the_jobs_env_merge_into_one_run_at_the_fleets_rate() {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("sim-send.jsonl");
    let (_sim, url) = sim(&log);
    let shards = dir.path().join("results");
    std::fs::create_dir(&shards).unwrap();
    run_fleet(&url, &shards);

    // The simulator saw the fleet's rate: every arrival of the level, and in its
    // first second (from the first arrival) RATE within 25 %, with no burst at the
    // start: constant arrivals of 4 shards interleave 25 ms apart instead of 4 at once.
    let at = arrivals(&log);
    let expected = RATE * SECONDS;
    assert!(
        (at.len() as f64 - expected).abs() <= 2.0,
        "{} arrivals, {expected} expected",
        at.len()
    );
    let first_second = at.iter().filter(|&&t| t < at[0] + 1.0).count() as f64;
    assert!(
        (first_second - RATE).abs() <= 0.25 * RATE,
        "{first_second} arrivals in the first second, {RATE} configured"
    );
    assert!(
        at[3] - at[0] >= 0.040,
        "the first four arrivals came within {:.1} ms of each other (ideal 75 ms): a start-of-level burst",
        (at[3] - at[0]) * 1e3
    );
    let span = at[at.len() - 1] - at[0];
    let rate = (at.len() - 1) as f64 / span;
    assert!((rate - RATE).abs() <= 0.1 * RATE, "arrivals at {rate:.1}/s");

    // The merged accounting is the sum of the shards'.
    let (code, merged) = report(&[shards.as_os_str()], &dir.path().join("merged.json"));
    assert_eq!(code, Some(0), "{merged:#}");
    let level = &merged["levels"][0];
    assert_eq!(level["name"], "rate=40/s");
    let sent: usize = (0..SHARDS)
        .map(|i| records(&shards.join(format!("shard-{i}.jsonl"))).len())
        .sum();
    let req = &level["requests"];
    assert_eq!(req["sent"].as_u64().unwrap() as usize, sent);
    assert_eq!(
        req["intended"].as_u64().unwrap(),
        req["sent"].as_u64().unwrap() + req["dropped"].as_u64().unwrap()
    );
    assert_eq!(at.len(), sent, "the sim saw every request the shards sent");
    let fleet = &merged["fleet"];
    assert_eq!(fleet["complete"], true);
    assert_eq!(fleet["merged"], serde_json::json!([0, 1, 2, 3]));
    assert_eq!(fleet["checks"].as_array().unwrap().len(), SHARDS as usize);
    // Record ids are distinct across the fleet.
    let mut ids: Vec<u64> = (0..SHARDS)
        .flat_map(|i| records(&shards.join(format!("shard-{i}.jsonl"))))
        .map(|r| r["index"].as_u64().unwrap())
        .collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), sent);

    // One process with the same total load, against the same simulator: the merged
    // ITL agrees within the bound below.
    let single = dir.path().join("single.jsonl");
    cadence()
        .arg("bench")
        .arg(&url)
        .args(load_args(RATE))
        .arg("--records")
        .arg(&single)
        .assert()
        .code(0);
    let (_, one) = report(&[single.as_os_str()], &dir.path().join("single.json"));
    // The simulator spaces chunks exactly 10 ms apart, so both runs measure the same
    // gaps plus the client's own delays. Measured on the shared 2-core machine (debug
    // build, this load, 4 single runs and 3 fleets): single-run ITL p50 9.87–9.91 ms
    // and fleet p50 9.91–10.03 ms (0.16 ms apart at most); p90 moved from 10.99 to
    // 13.54 ms between single runs alone (2.6 ms) and was 11.13–12.28 ms merged. So
    // the bound is p50 within 1 ms (6× what was seen) and p90 within 4 ms (1.5× the
    // single-run spread). p99 is this machine's scheduling noise (17–31 ms in single
    // runs), not the merge, and is not compared.
    for (stat, bound) in [("p50_ms", 1.0), ("p90_ms", 4.0)] {
        let (m, s) = (p(&merged, "itl", stat), p(&one, "itl", stat));
        assert!(
            (m - s).abs() <= bound,
            "ITL {stat}: merged {m:.3} ms vs one process {s:.3} ms (bound {bound} ms)"
        );
    }
    gates_and_compare_work_on_the_merged_run(&shards, &single, dir.path());
    missing_failed_and_excluded_shards_are_named(&shards, dir.path());
}

/// SLO gates judge the merged run; `compare` takes the shard directory as a run.
fn gates_and_compare_work_on_the_merged_run(shards: &Path, single: &Path, dir: &Path) {
    let out = dir.join("gated.json");
    let (code, r) = report(
        &[
            shards.as_os_str(),
            "--slo".as_ref(),
            "ttft.p50<=1us".as_ref(),
        ],
        &out,
    );
    assert_eq!(code, Some(3), "a breached SLO on the merged run exits 3");
    assert_eq!(r["levels"][0]["slos"][0]["pass"], false);
    let (code, _) = report(
        &[shards.as_os_str(), "--slo".as_ref(), "itl.p50<=1s".as_ref()],
        &out,
    );
    assert_eq!(code, Some(0));
    cadence()
        .arg("compare")
        .arg(single)
        .arg(shards)
        .assert()
        .code(0)
        .stdout(predicates::str::contains("rate=40/s"));
}

/// A shard that never wrote, one that died before its run line, and one left out on
/// purpose: named by index; the first two make the merged run incomplete (exit 6).
fn missing_failed_and_excluded_shards_are_named(shards: &Path, dir: &Path) {
    let partial = dir.join("partial");
    std::fs::create_dir(&partial).unwrap();
    let copy = |i: u32| -> PathBuf {
        let to = partial.join(format!("shard-{i}.jsonl"));
        std::fs::copy(shards.join(format!("shard-{i}.jsonl")), &to).unwrap();
        to
    };
    copy(0);
    copy(1);
    // Shard 2 died mid-run: its records end before the level and run lines.
    let died = copy(2);
    let text = std::fs::read_to_string(&died).unwrap();
    let cut: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with("{\"cadence_run\""))
        .collect();
    std::fs::write(&died, cut.join("\n") + "\n").unwrap();
    // Shard 3 never started: nothing.
    let (code, r) = report(&[partial.as_os_str()], &dir.join("partial.json"));
    assert_eq!(code, Some(6), "an incomplete fleet exits 6");
    let fleet = &r["fleet"];
    assert_eq!(fleet["complete"], false);
    assert_eq!(fleet["merged"], serde_json::json!([0, 1]));
    let missing: Vec<u64> = fleet["missing"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["index"].as_u64().unwrap())
        .collect();
    assert_eq!(missing, [2, 3]);
    assert!(fleet["missing"][0]["why"]
        .as_str()
        .unwrap()
        .contains("failed"));
    assert!(fleet["missing"][1]["why"]
        .as_str()
        .unwrap()
        .contains("never started"));
    let text = cadence().arg("report").arg(&partial).output().unwrap();
    let console = String::from_utf8_lossy(&text.stdout);
    assert!(
        console.contains("INCOMPLETE: shard(s) 2, 3 missing"),
        "{console}"
    );

    // Excluding shard 1 of the complete fleet: merged from the other three, complete.
    let (code, r) = report(
        &[shards.as_os_str(), "--exclude-shard".as_ref(), "1".as_ref()],
        &dir.join("excluded.json"),
    );
    assert_eq!(code, Some(0));
    assert_eq!(r["fleet"]["excluded"], serde_json::json!([1]));
    assert_eq!(r["fleet"]["merged"], serde_json::json!([0, 2, 3]));
    assert_eq!(
        r["levels"][0]["name"], "rate=30/s",
        "the load of the shards merged"
    );
}

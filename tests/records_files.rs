//! `cadence report` over records files as they come from long runs: several files
//! merged, `.zst` files, proxy runs appended across restarts (one timeline by their
//! wall-clock anchors), and a line torn by a crash.

mod common;

use cadence_core::runlog::{anchor_line, level_line, Anchor, LevelMeta};
use cadence_core::{Chunk, Outcome, RequestRecord};
use cadence_records::{RecordsConfig, RecordsWriter};
use common::cadence;
use std::path::{Path, PathBuf};

const S: u64 = 1_000_000_000;

/// Request `i` of a level: sent at `i` s + `at_ns`, ten chunks 20 ms + `i` ms apart.
fn rec(index: u64, level: u32, at_ns: u64) -> RequestRecord {
    let mut r = RequestRecord::new(index, Outcome::Succeeded);
    r.level = level;
    let sent = at_ns + index * S;
    r.sent_ns = Some(sent);
    let gap = 20_000_000 + index * 1_000_000;
    r.chunks = (0..10)
        .map(|k| Chunk(sent + 100_000_000 + k * gap, Some(1)))
        .collect();
    r.end_ns = Some(sent + 100_000_000 + 10 * gap);
    r
}

fn meta(level: u32, intended: u64) -> LevelMeta {
    LevelMeta {
        concurrency: Some(level + 1),
        intended: Some(intended),
        ..LevelMeta::new(level, format!("concurrency={}", level + 1))
    }
}

/// Writes `recs` then the level lines through the records writer.
fn write(path: &Path, anchor: Option<u64>, recs: &[RequestRecord], levels: &[LevelMeta]) {
    let mut w = RecordsWriter::open(RecordsConfig {
        append: true,
        ..RecordsConfig::new(path)
    })
    .unwrap();
    if let Some(unix_ms) = anchor {
        w.write_header(&anchor_line(Anchor { unix_ms }));
    }
    for r in recs {
        w.write_record(r);
    }
    for l in levels {
        w.write_line(&level_line(l));
    }
    w.finish().unwrap();
}

/// `cadence report FILES… --json`: the report, and the console output.
fn report(files: &[PathBuf]) -> (serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = cadence()
        .arg("report")
        .args(files)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(out.status.code(), Some(0), "{stdout}{out:?}");
    let v = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    (v, stdout)
}

#[test]
fn two_proxy_runs_in_one_file_are_one_timeline_not_twice_the_throughput() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("proxy.jsonl");
    // Two runs of 10 requests over ~10.5 s each; the second started 20 s after the
    // first (a restart), each counting its own clock from 0.
    let run: Vec<RequestRecord> = (0..10).map(|i| rec(i, 0, 0)).collect();
    write(&path, Some(1_700_000_000_000), &run, &[meta(0, 10)]);
    write(&path, Some(1_700_000_020_000), &run, &[meta(0, 10)]);
    let (v, stdout) = report(std::slice::from_ref(&path));
    let level = &v["levels"][0];
    assert_eq!(level["requests"]["succeeded"], 20);
    // From the first send (0 s) to the last end (20 s + 9 s + 0.1 s + 10 × 29 ms).
    let window = 20.0 + 9.0 + 0.1 + 0.29;
    let rps = level["summary"]["throughput"]["requests_per_s"]
        .as_f64()
        .or_else(|| level["throughput"]["requests_per_s"].as_f64())
        .unwrap_or_else(|| panic!("no throughput in {level}"));
    assert!(
        (rps - 20.0 / window).abs() < 1e-9,
        "{rps} req/s, expected {}",
        20.0 / window
    );
    assert!(
        stdout.contains("2 proxy runs were put on one timeline"),
        "{stdout}"
    );
}

#[test]
fn several_files_report_as_their_concatenation_zst_or_not() {
    let dir = tempfile::tempdir().unwrap();
    let a = dir.path().join("a.jsonl");
    let b = dir.path().join("b.jsonl.zst");
    let a_recs: Vec<RequestRecord> = (0..12).map(|i| rec(i, i as u32 % 2, 0)).collect();
    let b_recs: Vec<RequestRecord> = (0..9).map(|i| rec(i, i as u32 % 2, S / 3)).collect();
    write(&a, None, &a_recs, &[meta(0, 6), meta(1, 6)]);
    write(&b, None, &b_recs, &[meta(0, 5), meta(1, 4)]);
    let (merged, stdout) = report(&[a.clone(), b.clone()]);
    assert!(stdout.contains("merged 2 records files"), "{stdout}");
    let cat = dir.path().join("cat.jsonl");
    let b_plain = dir.path().join("b.jsonl");
    write(&b_plain, None, &b_recs, &[meta(0, 5), meta(1, 4)]);
    let text = std::fs::read_to_string(&a).unwrap() + &std::fs::read_to_string(&b_plain).unwrap();
    std::fs::write(&cat, text).unwrap();
    let (whole, _) = report(&[cat]);
    assert_eq!(merged["levels"], whole["levels"]);
    assert_eq!(merged["levels"][0]["requests"]["intended"], 11);
    assert_eq!(merged["levels"][1]["requests"]["succeeded"], 10);
}

#[test]
fn a_line_torn_by_a_crash_costs_that_line_only() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("crashed.jsonl");
    let recs: Vec<RequestRecord> = (0..6).map(|i| rec(i, 0, 0)).collect();
    let line = |r: &RequestRecord| serde_json::to_string(r).unwrap();
    // Record 2 was cut mid-write; the restarted writer glued record 3 onto it.
    let text = format!(
        "{}\n{}\n{}{}\n{}\n{}\n{}\n",
        line(&recs[0]),
        line(&recs[1]),
        &line(&recs[2])[..40],
        line(&recs[3]),
        line(&recs[4]),
        line(&recs[5]),
        level_line(&LevelMeta {
            intended: None,
            ..meta(0, 6)
        }),
    );
    std::fs::write(&path, text).unwrap();
    let (v, stdout) = report(std::slice::from_ref(&path));
    assert_eq!(v["levels"][0]["requests"]["succeeded"], 5);
    assert!(
        stdout.contains("1 damaged line(s) left out") && stdout.contains("crashed.jsonl line 3"),
        "{stdout}"
    );
}

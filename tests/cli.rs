//! The real `cadence` binary: exit codes, usage errors, the JSON report against the
//! checked-in schema, secrets never leaking, and Ctrl-C still reporting.

mod common;

use common::{cadence, read_records, record_lines, usage_error, validate};
use predicates::prelude::*;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::time::Duration;

#[test]
fn bench_without_url_runs_the_builtin_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("report.json");
    let records = dir.path().join("records.jsonl");
    cadence()
        .args([
            "bench",
            "-n",
            "6",
            "-c",
            "3",
            "--max-tokens",
            "5",
            "--warmup",
            "2",
            "--quiet",
            "--json",
        ])
        .arg(&json)
        .arg("--records")
        .arg(&records)
        .assert()
        .code(0)
        .stdout(
            predicate::str::contains("TTFT")
                .and(predicate::str::contains("ITL"))
                .and(predicate::str::contains("built-in simulator")),
        );
    let text = std::fs::read_to_string(&json).unwrap();
    validate(&text);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let level = &v["levels"][0];
    assert_eq!(level["requests"]["succeeded"], 6);
    assert_eq!(level["warmup"], 2);
    assert_eq!(level["itl"]["count"], 6 * 4, "4 gaps per 5-token stream");
    assert_eq!(level["output_tokens"]["source"], "usage");
    assert_eq!(v["run"]["builtin_sim"], true);
    let lines = std::fs::read_to_string(&records).unwrap();
    assert_eq!(
        record_lines(&lines).count(),
        8,
        "warm-up requests are recorded too"
    );
}

#[test]
fn bench_help_states_the_formulas_and_exit_codes() {
    cadence()
        .args(["bench", "--help"])
        .assert()
        .success()
        .stdout(
            predicate::str::contains("ITL")
                .and(predicate::str::contains("Exit codes"))
                .and(predicate::str::contains("type 7")),
        );
}

#[test]
fn bench_help_groups_its_options_under_headings_the_common_ones_first() {
    let out = cadence().args(["bench", "-h"]).output().unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let headings = [
        "Target",
        "Load",
        "Workload",
        "Output",
        "Gates (exit 3 and 4)",
        "Measurement",
        "Timeouts",
        "Fleet",
        "Built-in simulator (no URL)",
    ];
    let at: Vec<usize> = headings
        .iter()
        .map(|h| {
            text.find(&format!("\n{h}:\n"))
                .unwrap_or_else(|| panic!("no heading {h:?} in:\n{text}"))
        })
        .collect();
    assert!(at.windows(2).all(|w| w[0] < w[1]), "out of order:\n{text}");
    // Each option's heading: the last one above its line (an option's line starts with
    // `-x, --name` or `--name`; its description is indented deeper).
    let mut heading = None;
    let mut under = std::collections::HashMap::new();
    for line in text.lines() {
        if let Some(h) = line.strip_suffix(':').filter(|h| headings.contains(h)) {
            heading = Some(h);
        } else if line.starts_with("  -") || line.starts_with("      --") {
            let long = line.split([' ', ',']).find(|w| w.starts_with("--"));
            under.insert(long.unwrap_or_default().to_string(), heading);
        }
    }
    for (option, heading) in [
        ("--model", "Target"),
        ("--concurrency", "Load"),
        ("--duration", "Load"),
        ("--max-tokens", "Workload"),
        ("--tokenizer", "Workload"),
        ("--json", "Output"),
        ("--html", "Output"),
        ("--slo", "Gates (exit 3 and 4)"),
        ("--max-late", "Gates (exit 3 and 4)"),
        ("--timestamps", "Measurement"),
        ("--ttft-timeout", "Timeouts"),
        ("--shard", "Fleet"),
        ("--preset", "Built-in simulator (no URL)"),
        ("--inject", "Built-in simulator (no URL)"),
    ] {
        assert_eq!(under.get(option), Some(&Some(heading)), "{option}");
    }
    // The groups are bench's: the options other subcommands share keep clap's one list.
    for sub in ["sim", "plan", "report"] {
        let out = cadence().args([sub, "-h"]).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            headings
                .iter()
                .all(|h| !text.contains(&format!("\n{h}:\n"))),
            "{sub} -h:\n{text}"
        );
    }
}

#[test]
fn bad_extra_body_is_a_usage_error() {
    usage_error(
        &["bench", "--extra-body", "[1,2]", "-n", "1"],
        "JSON object",
    );
}

#[test]
fn bad_header_is_a_usage_error_without_its_value() {
    cadence()
        .args(["bench", "-H", "no-colon-secretvalue", "-n", "1"])
        .assert()
        .code(2)
        .stderr(
            predicate::str::contains("Name: value")
                .and(predicate::str::contains("secretvalue").not()),
        );
}

#[test]
fn bad_duration_is_a_usage_error() {
    usage_error(&["bench", "--duration", "soon"], "duration");
}

#[test]
fn unreachable_server_is_an_invalid_run_with_classified_failures() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    cadence()
        .args([
            "bench",
            &format!("http://{addr}/v1"),
            "--model",
            "m",
            "-n",
            "3",
            "-c",
            "1",
            "--quiet",
            "--json",
        ])
        .arg(&json)
        .assert()
        .code(4)
        .stdout(predicate::str::contains("connect_error"));
    let text = std::fs::read_to_string(&json).unwrap();
    validate(&text);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["levels"][0]["requests"]["failed"]["connect_error"], 3);
    assert!(
        v["levels"][0]["ttft"].is_null(),
        "no success: TTFT absent, not 0"
    );
}

#[test]
fn model_is_discovered_when_not_given() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    // The simulator as a separate process, its address read from its first line.
    let mut sim = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadence"))
        .args([
            "sim",
            "--addr",
            "127.0.0.1:0",
            "--model",
            "served-model",
            "--itl",
            "1ms",
            "--ttft",
            "1ms",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = sim.stdout.take().unwrap();
    let mut first = Vec::new();
    let mut byte = [0u8; 1];
    while out.read(&mut byte).unwrap() == 1 && byte[0] != b'\n' {
        first.push(byte[0]);
    }
    let line = String::from_utf8(first).unwrap();
    let url = line
        .strip_prefix("listening on ")
        .expect("sim prints its address")
        .to_string();
    let result = cadence()
        .args([
            "bench",
            &url,
            "-n",
            "2",
            "--max-tokens",
            "3",
            "--quiet",
            "--json",
        ])
        .arg(&json)
        .assert();
    let _ = sim.kill();
    let _ = sim.wait();
    result.code(0);
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["run"]["model"], "served-model");
}

/// A hostile server that echoes every request header back in a 401 body.
fn echo_server() -> (std::net::SocketAddr, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let handle = std::thread::spawn(move || {
        listener.set_nonblocking(false).unwrap();
        for _ in 0..3 {
            let Ok((mut s, _)) = listener.accept() else {
                return;
            };
            s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut buf = vec![0u8; 16 * 1024];
            let mut n = 0;
            while !buf[..n].windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf[n..]) {
                    Ok(0) | Err(_) => break,
                    Ok(k) => n += k,
                }
            }
            let echoed = String::from_utf8_lossy(&buf[..n]).to_string();
            let body = format!(
                "{{\"error\":{{\"message\":\"bad key, you sent: {}\"}}}}",
                echoed.replace(['\r', '\n', '"'], " ")
            );
            let resp = format!(
                "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
                body.len()
            );
            let _ = s.write_all(resp.as_bytes());
        }
    });
    (addr, handle)
}

#[test]
fn secret_canary_never_reaches_output_records_or_report() {
    const KEY: &str = "canary-KEY-7f3a9b2c";
    const HDR: &str = "canary-HDR-51e0d4aa";
    let (addr, server) = echo_server();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let records = dir.path().join("r.jsonl");
    let out = cadence()
        .env("MY_KEY", KEY)
        .args([
            "bench",
            &format!("http://{addr}/v1"),
            "--model",
            "m",
            "-n",
            "3",
            "-c",
            "1",
            "--api-key-env",
            "MY_KEY",
        ])
        .args(["-H", &format!("x-api-key: {HDR}"), "--json"])
        .arg(&json)
        .arg("--records")
        .arg(&records)
        .arg("--html")
        .arg(dir.path().join("r.html"))
        .arg("--markdown")
        .arg(dir.path().join("r.md"))
        .arg("--csv")
        .arg(dir.path().join("csv/"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "every request failed with 401: {out:?}"
    );
    server.join().unwrap();
    let rec_text = std::fs::read_to_string(&records).unwrap();
    assert!(
        rec_text.contains("http_4xx"),
        "the echo server answered: {rec_text}"
    );
    let everything = [
        String::from_utf8_lossy(&out.stdout).to_string(),
        String::from_utf8_lossy(&out.stderr).to_string(),
        std::fs::read_to_string(&json).unwrap(),
        rec_text,
        std::fs::read_to_string(dir.path().join("r.html")).unwrap(),
        std::fs::read_to_string(dir.path().join("r.md")).unwrap(),
        std::fs::read_to_string(dir.path().join("csv/levels.csv")).unwrap(),
        std::fs::read_to_string(dir.path().join("csv/requests.csv")).unwrap(),
    ];
    for (i, text) in everything.iter().enumerate() {
        assert!(!text.contains(KEY), "API key leaked in output #{i}: {text}");
        assert!(
            !text.contains(HDR),
            "header secret leaked in output #{i}: {text}"
        );
    }
}

#[cfg(unix)]
#[test]
fn ctrl_c_stops_drains_and_still_reports() {
    let (_, dir) = common::bench_stopped_by("-INT", "100000");
    let (json, records) = (dir.path().join("r.json"), dir.path().join("r.jsonl"));
    let text = std::fs::read_to_string(&json).unwrap();
    validate(&text);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["run"]["interrupted"], true);
    let req = &v["levels"][0]["requests"];
    assert!(req["aborted"].as_u64().unwrap() >= 1, "{req}");
    let lines = record_lines(&std::fs::read_to_string(&records).unwrap()).count() as u64;
    assert_eq!(
        lines,
        req["sent"].as_u64().unwrap(),
        "every sent request has a record"
    );
}

#[test]
fn threads_must_be_positive() {
    cadence().args(["--threads", "0", "bench"]).assert().code(2);
}

#[test]
fn fidelity_compares_client_gaps_with_the_send_log() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("f.json");
    let out = cadence()
        .args([
            "fidelity",
            "--concurrency",
            "2",
            "--rounds",
            "2",
            "--tokens",
            "6",
            "--itl",
            "5ms",
            "--json",
        ])
        .arg(&json)
        .output()
        .unwrap();
    // Timing verdicts belong to the benchmark, not to a debug-build test: only the
    // mechanics are asserted here (sim child, send log, pairing of gaps).
    assert!(matches!(out.status.code(), Some(0) | Some(4)), "{out:?}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let level = &v[0];
    assert_eq!(level["concurrency"], 2);
    assert_eq!(level["succeeded"], 4);
    assert_eq!(level["gaps"], 4 * 5, "5 gaps per 6-token stream");
    let truth = level["true_p50_ms"].as_f64().unwrap();
    // The sim's own gaps are ~5 ms; on a loaded machine its sends bunch up, so only the
    // unit is checked (ns or s would be off by 10^6 or 10^3).
    assert!(
        (0.5..50.0).contains(&truth),
        "the sim's own gaps are ~5 ms: {truth}"
    );
}

fn run_json(args: &[&str]) -> (Option<i32>, serde_json::Value, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = cadence()
        .args(args)
        .arg("--quiet")
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&json).unwrap_or_else(|_| panic!("no report: {out:?}"));
    validate(&text);
    (
        out.status.code(),
        serde_json::from_str(&text).unwrap(),
        String::from_utf8_lossy(&out.stdout).into(),
    )
}

#[test]
fn open_loop_reports_pacing_and_response_time() {
    // Pacing precision is a benchmark; this checks the mechanics (--max-late 100%).
    let (code, v, _) = run_json(&[
        "bench",
        "--rate",
        "40",
        "-n",
        "20",
        "--max-tokens",
        "3",
        "--max-late",
        "100%",
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(v["run"]["mode"], "open_loop_constant");
    let level = &v["levels"][0];
    assert_eq!(level["rate"], 40.0);
    assert_eq!(level["pacing"]["sent"], 20);
    assert_eq!(level["pacing"]["dropped"], 0);
    assert_eq!(
        level["ttft_response"]["count"], 20,
        "response time is measured from the schedule"
    );
    assert!(level["ttft_response"]["p50_ms"].as_f64() >= level["ttft"]["p50_ms"].as_f64());
}

#[test]
fn open_loop_cap_drops_arrivals_and_accounts_for_them() {
    let (code, v, _) = run_json(&[
        "bench",
        "--rate",
        "100",
        "-n",
        "20",
        "--max-concurrency",
        "1",
        "--max-tokens",
        "20",
        "--max-late",
        "100%",
    ]);
    assert_eq!(code, Some(0));
    let req = &v["levels"][0]["requests"];
    let (intended, sent, dropped) = (
        req["intended"].as_u64().unwrap(),
        req["sent"].as_u64().unwrap(),
        req["dropped"].as_u64().unwrap(),
    );
    assert_eq!(intended, 20);
    assert!(
        dropped > 0,
        "one slot cannot take 100 req/s of 200 ms streams: {req}"
    );
    assert_eq!(intended, sent + dropped);
}

#[test]
fn sweep_runs_each_level_with_its_own_row() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("r.jsonl");
    let (code, v, stdout) = run_json(&[
        "bench",
        "-c",
        "1..2:+1",
        "-n",
        "3",
        "--max-tokens",
        "3",
        "--records",
        records.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0));
    let names: Vec<&str> = v["levels"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["concurrency=1", "concurrency=2"]);
    assert!(v["levels"]
        .as_array()
        .unwrap()
        .iter()
        .all(|l| l["requests"]["succeeded"] == 3));
    assert!(stdout.contains("Summary by level"), "{stdout}");
    let text = std::fs::read_to_string(&records).unwrap();
    let levels: Vec<u64> = record_lines(&text)
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["level"]
                .as_u64()
                .unwrap()
        })
        .collect();
    assert_eq!(levels.iter().filter(|&&l| l == 0).count(), 3);
    assert_eq!(levels.iter().filter(|&&l| l == 1).count(), 3);
}

#[test]
fn a_four_level_sweep_prints_a_short_summary_and_its_detail_on_request() {
    let args = ["bench", "-c", "1,2,3,4", "-n", "4", "--max-tokens", "4"];
    let (code, v, short) = run_json(&args);
    assert_eq!(code, Some(0));
    assert_eq!(v["levels"].as_array().unwrap().len(), 4);
    // One table of four rows, each warning once, the formulas once: ~22 lines a level
    // before (99 for four). The bound leaves room for a few more warnings.
    let lines = short.lines().count();
    assert!(lines <= 45, "{lines} lines:\n{short}");
    assert!(short.contains("Summary by level"), "{short}");
    assert!(!short.contains("── concurrency="), "{short}");
    assert!(!short.contains("Convention"), "{short}");
    assert_eq!(short.matches("Formulas: ").count(), 1, "{short}");
    let (code, _, full) = run_json(&[&args[..], &["--detail"]].concat());
    assert_eq!(code, Some(0));
    for level in 1..=4 {
        assert!(
            full.contains(&format!("── concurrency={level} ──")),
            "{full}"
        );
    }
    assert!(full.contains("Convention") && full.contains("Summary by level"));
    assert!(full.lines().count() > lines + 4 * 8, "{full}");
}

#[test]
fn slo_gate_exits_3_on_breach_and_0_on_pass() {
    let (code, v, stdout) = run_json(&[
        "bench",
        "-n",
        "4",
        "--max-tokens",
        "4",
        "--slo",
        "ttft.p50<=1us",
    ]);
    assert_eq!(code, Some(3), "{stdout}");
    assert_eq!(v["levels"][0]["slos"][0]["pass"], false);
    assert!(stdout.contains("FAIL"), "{stdout}");
    let (code, v, _) = run_json(&[
        "bench",
        "-n",
        "4",
        "--max-tokens",
        "4",
        "--slo",
        "itl.p50<=10s",
        "--slo",
        "ttft.p99<=30s",
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(v["levels"][0]["goodput"]["good_requests"], 4);
}

#[test]
fn bad_slo_is_a_usage_error() {
    usage_error(&["bench", "--slo", "itl.p99<=50"], "unit");
}

#[test]
fn trace_replay_sends_at_recorded_offsets_with_recorded_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("trace.jsonl");
    // Mooncake layout: timestamp in ms, input and output lengths.
    std::fs::write(
        &trace,
        "{\"timestamp\": 1000, \"input_length\": 12, \"output_length\": 2, \"hash_ids\": [1]}\n\
         # a comment\n\
         {\"timestamp\": 1400, \"input_length\": 30, \"output_length\": 4, \"hash_ids\": [1, 2]}\n\
         {\"timestamp\": 1200, \"prompt\": \"hello there\", \"output_length\": 3}\n",
    )
    .unwrap();
    let records = dir.path().join("r.jsonl");
    let (code, v, _) = run_json(&[
        "bench",
        "--trace",
        trace.to_str().unwrap(),
        "--trace-speed",
        "2",
        "--max-late",
        "100%",
        "--records",
        records.to_str().unwrap(),
    ]);
    assert_eq!(code, Some(0));
    assert_eq!(v["run"]["mode"], "trace_replay");
    assert_eq!(v["levels"][0]["requests"]["succeeded"], 3);
    let mut recs = read_records(&records);
    recs.sort_by_key(|r| r["index"].as_u64());
    let tokens: Vec<u64> = recs
        .iter()
        .map(|r| r["output_tokens"]["count"].as_u64().unwrap())
        .collect();
    assert_eq!(
        tokens,
        [2, 3, 4],
        "sorted by arrival, each with its own output length"
    );
    let inputs: Vec<u64> = recs
        .iter()
        .map(|r| r["input_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(
        inputs,
        [12, 2, 30],
        "length-only entries get prompts of exactly their length (the sim counts words)"
    );
    let sched: Vec<f64> = recs
        .iter()
        .map(|r| r["scheduled_ns"].as_u64().unwrap() as f64 / 1e6)
        .collect();
    // Offsets 0, 200, 400 ms compressed 2× → 0, 100, 200 ms after the first.
    assert!(((sched[1] - sched[0]) - 100.0).abs() < 1.0, "{sched:?}");
    assert!(((sched[2] - sched[0]) - 200.0).abs() < 1.0, "{sched:?}");
}

#[test]
fn bad_trace_names_the_line() {
    let dir = tempfile::tempdir().unwrap();
    let trace = dir.path().join("t.jsonl");
    std::fs::write(
        &trace,
        "{\"timestamp\": 1, \"input_length\": 3}\n{\"input_length\": 3}\n",
    )
    .unwrap();
    usage_error(&["bench", "--trace", trace.to_str().unwrap()], "line 2");
}

#[test]
fn a_cap_without_an_open_loop_is_a_usage_error() {
    usage_error(&["bench", "--max-concurrency", "4"], "open loop");
}

#[test]
fn find_max_grows_while_slos_hold_and_reports_probes() {
    let (code, v, stdout) = run_json(&[
        "bench",
        "--find-max",
        "concurrency",
        "--max-probes",
        "3",
        "-n",
        "4",
        "--max-tokens",
        "3",
        "--slo",
        "itl.p50<=10s",
    ]);
    assert_eq!(code, Some(0), "{stdout}");
    let s = &v["search"];
    assert_eq!(s["axis"], "concurrency");
    let probes: Vec<f64> = s["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["level"].as_f64().unwrap())
        .collect();
    assert_eq!(
        probes,
        [1.0, 2.0, 4.0],
        "doubling from 1, bounded by --max-probes"
    );
    assert_eq!(s["best"], 4.0);
    assert!(s["first_fail"].is_null());
    assert_eq!(
        v["levels"].as_array().unwrap().len(),
        3,
        "each probe is a level"
    );
    assert!(stdout.contains("at least 4"), "{stdout}");
}

#[test]
fn find_max_with_an_impossible_slo_finds_nothing_and_exits_3() {
    let (code, v, _) = run_json(&[
        "bench",
        "--find-max",
        "concurrency",
        "-c",
        "4",
        "-n",
        "2",
        "--max-tokens",
        "3",
        "--slo",
        "ttft.p50<=1us",
    ]);
    assert_eq!(code, Some(3));
    let probes: Vec<f64> = v["search"]["probes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["level"].as_f64().unwrap())
        .collect();
    assert_eq!(probes, [4.0, 2.0, 1.0], "searches down from the start to 1");
    assert!(v["search"]["best"].is_null());
}

#[test]
fn find_max_needs_an_slo() {
    usage_error(&["bench", "--find-max", "rate"], "--slo");
}

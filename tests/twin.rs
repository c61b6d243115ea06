//! `cadence twin` through the real binary: a twin fitted on a sweep of the built-in
//! simulator (engine mode), asked by `cadence plan --twin` at loads inside and past
//! the fit, the past ones marked as extrapolation; bad inputs refused by name.

mod common;

use common::{cadence, usage_error, validate};
use std::path::{Path, PathBuf};

/// The prompts and replies every run here asks for (a trace's entries say their own).
const LENGTHS: [&str; 4] = ["--max-tokens", "16", "--input-tokens", "128"];

/// A run of the built-in simulator in engine mode with `args`, its records in
/// `dir/name`.
fn bench(dir: &Path, name: &str, args: &[&str]) -> PathBuf {
    let records = dir.join(name);
    cadence()
        .args(["bench", "--preset", "llama-3.1-8b@h100-fp8", "--quiet"])
        .args(args)
        .arg("--records")
        .arg(&records)
        .assert()
        // 4: sends late on a loaded machine make the run invalid; its records stand.
        .code(predicates::prelude::predicate::in_iter([0, 4]));
    records
}

/// A closed-loop sweep, as records (and its report in `dir/sweep.json`).
fn sweep(dir: &Path, levels: &str, requests: &str) -> PathBuf {
    let json = dir.join("sweep.json");
    let load = [
        "-c",
        levels,
        "-n",
        requests,
        "--json",
        json.to_str().unwrap(),
    ];
    bench(dir, "sweep.jsonl", &[&load[..], &LENGTHS].concat())
}

#[test]
fn a_twin_fitted_on_a_sweep_plans_every_load_and_marks_what_lies_past_it() {
    let dir = tempfile::tempdir().unwrap();
    let records = sweep(dir.path(), "1,2,4", "30");
    let twin = dir.path().join("twin.toml");
    cadence()
        .args(["twin", "fit"])
        .arg(&records)
        .arg("-o")
        .arg(&twin)
        .assert()
        .code(0)
        .stdout(predicates::str::contains("90 requests"))
        .stdout(predicates::str::contains("on its own 3 loads: within"));
    let text = std::fs::read_to_string(&twin).unwrap();
    assert!(text.starts_with("format = 2\n"), "{text}");
    assert!(text.contains("[in_sample]\nloads = 3\n"), "{text}");
    let json = dir.path().join("plan.json");
    cadence()
        .args(["plan", "--twin"])
        .arg(&twin)
        .args([
            "-c",
            "2,32",
            "-n",
            "60",
            "--max-tokens",
            "16",
            "--input-tokens",
            "128",
        ])
        .arg("--json")
        .arg(&json)
        .assert()
        .code(0);
    let text = std::fs::read_to_string(&json).unwrap();
    validate(&text);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    let levels = v["levels"].as_array().unwrap();
    assert_eq!(levels[0]["name"], "concurrency=2", "within the fit");
    assert_eq!(levels[1]["name"], "concurrency=32 (extrapolated)");
    let warnings = levels[1]["warnings"].to_string();
    assert!(
        warnings.contains("32 running (the fit saw up to"),
        "{warnings}"
    );
    for l in levels {
        assert_eq!(l["requests"]["succeeded"], 60);
    }
    // How far to trust it, beside the answer: its fit's error and its draws' spread.
    let trust = v["warnings"].to_string();
    assert!(
        trust.contains("on the 3 loads it was fitted on, the twin came within")
            && trust.contains("its own draws move this plan's figures by up to"),
        "{trust}"
    );
    // The rate shapes too, in virtual time.
    cadence()
        .args(["plan", "--twin"])
        .arg(&twin)
        .args(["--rate", "5", "-n", "20", "--max-tokens", "16"])
        .assert()
        .code(0)
        .stdout(predicates::str::contains("rate=5/s"));
    served_in_real_time(&twin, dir.path());
    // Refusals: a twin with an engine, a JSON report to fit, another format.
    let t = twin.to_str().unwrap();
    usage_error(
        &["plan", "--twin", t, "--preset", "tiny@cpu"],
        "cannot be used with",
    );
    let report = dir.path().join("sweep.json");
    let out = dir.path().join("x.toml");
    usage_error(
        &[
            "twin",
            "fit",
            report.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ],
        "holds no chunk times",
    );
    let other = dir.path().join("other.toml");
    std::fs::write(
        &other,
        text_with_format(&std::fs::read_to_string(&twin).unwrap()),
    )
    .unwrap();
    usage_error(
        &["plan", "--twin", other.to_str().unwrap()],
        "twin format 3; this cadence reads format 2",
    );
}

/// `cadence sim --twin` serves the twin over HTTP: a bench against it sees the twin's
/// timing (ITL p50 about 5.4 ms, TTFT p50 about 12 ms at 2 streams), not the flat
/// simulator's (ITL 10 ms, TTFT 20-60 ms).
fn served_in_real_time(twin: &Path, dir: &Path) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadence"))
        .args(["sim", "--addr", "127.0.0.1:0", "--twin"])
        .arg(twin)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    let json = dir.join("served.json");
    let run = cadence()
        .args([
            "bench",
            &url,
            "-c",
            "2",
            "-n",
            "40",
            "--max-tokens",
            "16",
            "--quiet",
            "--json",
        ])
        .arg(&json)
        .assert();
    let within = twin_counts(&url);
    // 16 streams where the fit saw at most 4: the sim counts and says it.
    let past = cadence()
        .args([
            "bench",
            &url,
            "-c",
            "16",
            "-n",
            "32",
            "--max-tokens",
            "16",
            "--quiet",
        ])
        .assert();
    let beyond = twin_counts(&url);
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let log = String::from_utf8_lossy(&out.stderr);
    run.code(0);
    past.code(0);
    assert_eq!(within, (40, 0), "within the fit nothing is extrapolated");
    assert_eq!(beyond.0, 72, "every request counted: {beyond:?}");
    assert!(beyond.1 > 0, "past the fit: {beyond:?}");
    assert_eq!(
        log.matches("went past what the twin was fitted on").count(),
        1,
        "{log}"
    );
    // Said when the first went past: with more running than the fit saw, at most 16.
    assert!(log.contains(" running (the fit saw up to 4)"), "{log}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let level = &v["levels"][0];
    assert_eq!(level["requests"]["succeeded"], 40);
    assert_eq!(level["output_tokens"]["total"], 40 * 16);
    let itl = level["itl"]["p50_ms"].as_f64().unwrap();
    let ttft = level["ttft"]["p50_ms"].as_f64().unwrap();
    assert!(
        (3.0..8.5).contains(&itl),
        "ITL p50 {itl} ms: the twin's is ~5.4"
    );
    // The twin's TTFT is its step (~5.4 ms) and the overhead it measured between send
    // and engine on the fit (several ms on a loaded machine), on top of this sim's own.
    assert!(ttft < 45.0, "TTFT p50 {ttft} ms: the twin's is ~12-25");
}

/// The served twin's (requests, extrapolated requests) from its `/metrics`.
fn twin_counts(url: &str) -> (u64, u64) {
    let rest = url.trim_start_matches("http://");
    let addr = rest.split('/').next().unwrap();
    let (status, body) = common::watcher::get(addr, "/metrics");
    assert_eq!(status, 200, "{body}");
    let count = |name: &str| -> u64 {
        body.lines()
            .find(|l| l.starts_with(name))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name}: {body}"))
    };
    (
        count("cadence_twin_requests_total"),
        count("cadence_twin_extrapolated_requests_total"),
    )
}

fn text_with_format(text: &str) -> String {
    text.replacen("format = 2", "format = 3", 1)
}

/// An open-loop Poisson load at 30 req/s of `requests`, with `args`, as records.
fn at_30(dir: &Path, name: &str, requests: &str, args: &[&str]) -> PathBuf {
    let load = ["--rate", "30", "--arrivals", "poisson", "--seed", "5"];
    bench(
        dir,
        name,
        &[&load[..], &["-n", requests], &LENGTHS, args].concat(),
    )
}

/// A Poisson run at 30 req/s, as records.
fn poisson(dir: &Path, name: &str) -> PathBuf {
    at_30(dir, name, "150", &[])
}

/// Multi-turn sessions started at the Poisson load's rate (3 turns, 5 ms apart), as
/// records: a level of the same name, another workload.
fn sessions(dir: &Path, name: &str) -> PathBuf {
    at_30(dir, name, "20", &["--turns", "3", "--think-time", "5ms"])
}

/// The simulator as a truth the twin is given none of: fitted on a closed-loop sweep,
/// it predicts a held-out Poisson load measured twice. Tolerances from the sim's own
/// rerun noise on this loaded 2-core machine (BENCHMARKS.md, "The twin, held out"):
/// two runs of the same Poisson load differed by up to 7 % on the medians, 22 % on the
/// p90s and 31 to 54 % on the p99s, and the twin's own p99s move as much with its
/// seed; the twin, sharing steps across streams, came within 5 % on every median.
/// Asserted: medians within 20 %, p90s within 40 % (TTFT p90 60 %: the twin's fitted
/// overhead, send to engine, is the machine's at the fit, and it moved TTFT p90 by up
/// to 64 % against a rerun noise of 40 % in one run), p99s within 60 %, or 1.5 times
/// the load's rerun noise of that figure when the machine made it larger (the issue's
/// rule: within the rerun noise or a fixed bound, whichever is larger; a busy CI
/// machine measured 183 % between two runs on TTFT p99), so a machine hiccup does not
/// fail the suite while a twin that lost the load (a queue, a slot count, a stall
/// band) does. The twin's accuracy without a machine in the way is held to 3 % in
/// virtual time (crates/engine/tests/twin_held_out.rs).
#[test]
fn twin_check_predicts_a_held_out_poisson_load_of_the_simulator() {
    let dir = tempfile::tempdir().unwrap();
    let fit = sweep(dir.path(), "1,2,4,8", "80");
    // Sessions at the same rate between the load's two runs: the same level name, not
    // its rerun.
    let (a, s, b) = (
        poisson(dir.path(), "a.jsonl"),
        sessions(dir.path(), "s.jsonl"),
        poisson(dir.path(), "b.jsonl"),
    );
    let out = cadence()
        .args(["twin", "check"])
        .args([&fit, &a, &s, &b])
        .assert()
        .code(0)
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    eprintln!("{text}");
    assert!(text.contains("\nrate=30/s\n"), "{text}");
    assert!(text.contains("worst rerun noise"), "{text}");
    let own = format!("\nrate=30/s ({})\n", s.display());
    assert!(
        text.contains(&own),
        "the sessions a load of their own: {text}"
    );
    let note = format!(
        "{}'s rate=30/s is not a rerun of {}'s",
        s.display(),
        a.display()
    );
    assert!(
        text.contains(&note) && text.contains("--turns: not given against 3"),
        "{text}"
    );
    for (figure, limit) in [
        ("TTFT p50", 20.0),
        ("TTFT p90", 60.0),
        ("TTFT p99", 60.0),
        ("ITL p50", 20.0),
        ("ITL p90", 40.0),
        ("ITL p99", 60.0),
        ("E2E p50", 20.0),
        ("E2E p90", 40.0),
        ("E2E p99", 60.0),
    ] {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(figure))
            .unwrap_or_else(|| panic!("no {figure} row: {text}"));
        let cell = |k: usize| -> f64 {
            let c = line.split_whitespace().nth(k).unwrap();
            c.trim_end_matches('%').parse().unwrap()
        };
        let (err, noise) = (cell(6), cell(7));
        // The load's own rerun noise, when the machine made it larger, is the bound.
        let bound = f64::max(limit, 1.5 * noise.abs());
        assert!(
            err.abs() <= bound,
            "{figure} off by {err} % (at most {bound}):\n{text}"
        );
    }
}

/// A trace of 60 arrivals over about 2 s, in bursts of five, each asking for 128
/// prompt tokens and 16 out (the sweep's: inside the fit, so nothing is extrapolated).
fn trace_file(dir: &Path) -> PathBuf {
    let path = dir.join("trace.jsonl");
    let lines: Vec<String> = (0..60u64)
        .map(|i| {
            let at = (i / 5) * 170 + (i % 5) * 3;
            format!(r#"{{"timestamp": {at}, "input_length": 128, "output_length": 16}}"#)
        })
        .collect();
    std::fs::write(&path, lines.join("\n")).unwrap();
    path
}

/// The trace replayed, as records.
fn replayed(dir: &Path, trace: &Path, name: &str) -> PathBuf {
    bench(dir, name, &["--trace", trace.to_str().unwrap()])
}

/// A replayed trace is a load like any other: `plan --twin --trace` sends each entry
/// at its time with its lengths (in virtual time, so exactly), and `twin check` takes
/// a held-out run of the trace, sent as its records say, beside its rerun.
#[test]
fn a_replayed_trace_is_planned_and_checked_as_it_was_sent() {
    let dir = tempfile::tempdir().unwrap();
    let fit = sweep(dir.path(), "1,2,4,8", "40");
    let twin = dir.path().join("twin.toml");
    cadence()
        .args(["twin", "fit"])
        .arg(&fit)
        .arg("-o")
        .arg(&twin)
        .assert()
        .code(0);
    let trace = trace_file(dir.path());
    let csv = dir.path().join("planned/");
    cadence()
        .args(["plan", "--twin"])
        .arg(&twin)
        .arg("--trace")
        .arg(&trace)
        .args(["--trace-speed", "2", "--csv"])
        .arg(&csv)
        .assert()
        .code(0)
        .stdout(predicates::str::contains("trace (60 arrivals"));
    let rows = std::fs::read_to_string(csv.join("requests.csv")).unwrap();
    let mut lines = rows.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let col = |name: &str| head.iter().position(|h| *h == name).unwrap();
    let (sent, out) = (col("sent_at_ms"), col("output_tokens"));
    let rows: Vec<Vec<&str>> = lines.map(|l| l.split(',').collect()).collect();
    assert_eq!(rows.len(), 60, "every entry, -n notwithstanding");
    let first: f64 = rows[0][sent].parse().unwrap();
    for (i, r) in rows.iter().enumerate() {
        let i = i as u64;
        let at_ms = ((i / 5) * 170 + (i % 5) * 3) as f64 / 2.0;
        let at = r[sent].parse::<f64>().unwrap() - first;
        assert!(
            (at - at_ms).abs() < 1e-3,
            "request {i} sent at {at} ms, not {at_ms}"
        );
        assert_eq!(r[out], "16", "request {i}");
    }
    let (a, b) = (
        replayed(dir.path(), &trace, "a.jsonl"),
        replayed(dir.path(), &trace, "b.jsonl"),
    );
    let out = cadence()
        .args(["twin", "check"])
        .args([&fit, &a, &b])
        .assert()
        .code(0)
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    eprintln!("{text}");
    assert!(text.contains("trace"), "{text}");
    assert!(text.contains("worst rerun noise"), "{text}");
    // Every figure judged; the medians of the gaps and of whole requests held (TTFT
    // is left to the Poisson test above: a burst of five prompts prefilled together
    // can pass the fit's largest prefill, and is then said to be extrapolated).
    for figure in cadence_engine::twin::check::FIGURES {
        assert!(
            text.lines().any(|l| l.trim_start().starts_with(figure)),
            "{figure}: {text}"
        );
    }
    for figure in ["ITL p50", "E2E p50"] {
        let line = text
            .lines()
            .find(|l| l.trim_start().starts_with(figure))
            .unwrap_or_else(|| panic!("no {figure} row: {text}"));
        let cell = |k: usize| -> f64 {
            let c = line.split_whitespace().nth(k).unwrap();
            c.trim_end_matches('%').parse().unwrap()
        };
        let (err, noise) = (cell(6), cell(7));
        let bound = f64::max(25.0, 1.5 * noise.abs());
        assert!(
            err.abs() <= bound,
            "{figure} off by {err} % (at most {bound}):\n{text}"
        );
    }
}

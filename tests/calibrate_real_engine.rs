//! `cadence plan --calibrate` against a real engine: llama.cpp's `llama-server` (CPU,
//! continuous batching, 4 slots; built by `scripts/real-engine.sh` into
//! `CADENCE_REAL_ENGINE`) is measured at concurrency 2, 4, 8 and 16, the engine is
//! fitted on three of the loads from `tests/engines/tiny-llama-cpu.toml`, and must
//! predict the held-out concurrency 8 (a queue for the 4 slots) within 15 % on ITL
//! p50 and 25 % on TTFT p50. Concurrency 1 is left out: llama.cpp decodes a batch of
//! one on a faster path (about half the step time of a batch of two), a drop the
//! model's one cost curve cannot follow (BENCHMARKS.md shows that sweep too).
//! Ignored unless asked for (scripts/test.sh does, with `CADENCE_REAL_ENGINE`).

mod common;

use cadence_engine::EngineSpec;
use std::path::Path;

/// The sweep: every load twice, interleaved (a burst of load from elsewhere on a
/// shared machine then lands on every load rather than on one), 16 requests per level
/// (32 per load) of short prompts and 64 tokens, so decoding dominates.
const LEVELS: &str = "2,4,8,16,2,4,8,16";

fn sweep(port: u16, records: &Path) {
    let out = common::cadence()
        .args(["bench", &format!("http://127.0.0.1:{port}/v1")])
        .args([
            "--model",
            "tiny-llama",
            "-c",
            LEVELS,
            "-n",
            "16",
            "--warmup",
            "1",
        ])
        .args(["--max-tokens", "64", "--input-tokens", "16", "--quiet"])
        // Every prompt processed in full: llama-server would otherwise reuse a slot's
        // cached prompt when the second round sends the same prompts again.
        .args([
            "--extra-body",
            r#"{"ignore_eos": true, "cache_prompt": false}"#,
        ])
        .arg("--records")
        .arg(records)
        .timeout(std::time::Duration::from_secs(300))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{err}");
}

/// Fits with concurrency 8 held out; returns the printed output and the held-out
/// level's errors in % (TTFT p50, TTFT p90, ITL p50, ITL p90, output tok/s, E2E p50).
fn calibrate(records: &Path, fitted: &Path) -> (String, Vec<f64>) {
    let engine = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/engines/tiny-llama-cpu.toml");
    let out = common::cadence()
        .args(["plan", "--engine"])
        .arg(engine)
        .arg("--calibrate")
        .arg(records)
        .args(["--holdout", "8", "--save-engine"])
        .arg(fitted)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("concurrency=8 (held out)"))
        .unwrap_or_else(|| panic!("no held-out row:\n{text}"));
    let errors = row
        .split_whitespace()
        .filter_map(|w| w.strip_suffix('%')?.parse::<f64>().ok())
        .collect::<Vec<_>>();
    assert_eq!(errors.len(), 6, "{row}");
    (text, errors)
}

#[test]
#[ignore = "needs llama-server (CADENCE_REAL_ENGINE); scripts/test.sh builds it and runs this"]
fn a_fit_on_three_loads_of_llama_server_predicts_the_held_out_one() {
    let tmp = tempfile::tempdir().unwrap();
    let (_server, port) = common::four_slot_llama_server(tmp.path());
    // A shared machine can slow the server for seconds at a time; a sweep that met
    // such a burst gets another try (up to three), and every try is printed.
    let mut tries = Vec::new();
    for attempt in 0..3 {
        let records = tmp.path().join(format!("run-{attempt}.jsonl"));
        let fitted = tmp.path().join(format!("fitted-{attempt}.toml"));
        sweep(port, &records);
        let (text, e) = calibrate(&records, &fitted);
        eprintln!("attempt {attempt}:\n{text}");
        // The fitted engine is a valid engine file.
        EngineSpec::from_toml(&std::fs::read_to_string(&fitted).unwrap()).unwrap();
        tries.push(e.clone());
        if e[2].abs() < 15.0 && e[0].abs() < 25.0 {
            break;
        }
    }
    let e = tries.last().unwrap();
    assert!(
        e[2].abs() < 15.0 && e[0].abs() < 25.0,
        "held-out concurrency=8: ITL p50 and TTFT p50 off by {:+.1} % and {:+.1} % (every try, %: {tries:?})",
        e[2],
        e[0]
    );
}

//! `cadence twin check` against a real engine: llama.cpp's `llama-server` (CPU,
//! continuous batching, 4 slots; built by `scripts/real-engine.sh` into
//! `CADENCE_REAL_ENGINE`) swept closed-loop at 1, 2, 4 and 8 clients to fit the twin
//! on, then open-loop Poisson loads at 3 and 6 req/s it never saw, each run twice
//! (the second run is the rerun noise). The check's table is printed; what is asserted
//! is that it judges both loads on every figure with their rerun noise. The issue's
//! bound (every quantile within the rerun noise or 10 %) is not met yet: on the
//! shared 2-core VM, over two runs of this test, the twin's worst quantile was 39-84 %
//! off where two runs of a load differed by up to 32-75 %, ITL p50 within 1.1 % in the
//! better run (BENCHMARKS.md, "The twin on a real engine"). About 2 minutes. Ignored
//! unless asked for (scripts/test.sh does, with `CADENCE_REAL_ENGINE`).

mod common;

use std::path::{Path, PathBuf};

/// Short prompts, 32 tokens each, every prompt processed in full (llama-server would
/// otherwise reuse a slot's cached prompt for a repeated one).
fn bench(port: u16, load: &[&str], records: &Path) {
    let out = common::cadence()
        .args(["bench", &format!("http://127.0.0.1:{port}/v1")])
        .args(["--model", "tiny-llama", "--quiet"])
        .args(load)
        .args(["--max-tokens", "32", "--input-tokens", "16"])
        .args([
            "--extra-body",
            r#"{"ignore_eos": true, "cache_prompt": false}"#,
        ])
        .arg("--records")
        .arg(records)
        .timeout(std::time::Duration::from_secs(120))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    // 4: sends late on a loaded machine make a run invalid; its records stand.
    assert!(matches!(out.status.code(), Some(0 | 4)), "{err}");
}

/// Each figure's row of the check for `load`: (figure, twin error %, rerun %).
fn rows(text: &str, load: &str) -> Vec<(String, f64, f64)> {
    let block = text
        .split("\n\n")
        .find(|b| b.trim_start().starts_with(load))
        .unwrap_or_else(|| panic!("no {load}: {text}"));
    block
        .lines()
        .filter(|l| l.starts_with("  TTFT") || l.starts_with("  ITL") || l.starts_with("  E2E"))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let pct = |s: &str| s.trim_end_matches('%').parse::<f64>().unwrap();
            (format!("{} {}", w[0], w[1]), pct(w[6]), pct(w[7]))
        })
        .collect()
}

#[test]
#[ignore = "needs llama-server (CADENCE_REAL_ENGINE); scripts/test.sh builds it and runs this"]
fn a_twin_fitted_on_a_sweep_of_llama_server_predicts_held_out_poisson_loads() {
    let dir = common::real_engine();
    let tmp = tempfile::tempdir().unwrap();
    let (_server, port) = common::llama_server(
        &dir,
        &["-t", "1", "-np", "4", "-c", "4096", "-cb", "--no-webui"],
        &tmp.path().join("llama-server.log"),
    );
    let at = |name: &str| -> PathBuf { tmp.path().join(name) };
    bench(
        port,
        &["-c", "1,2,4,8", "-n", "24", "--warmup", "1"],
        &at("sweep.jsonl"),
    );
    let mut held = Vec::new();
    for rate in ["3", "6"] {
        for run in ["a", "b"] {
            let records = at(&format!("rate{rate}-{run}.jsonl"));
            bench(
                port,
                &[
                    "--rate",
                    rate,
                    "--arrivals",
                    "poisson",
                    "--seed",
                    "5",
                    "-n",
                    "30",
                ],
                &records,
            );
            held.push(records);
        }
    }
    let out = common::cadence()
        .args(["twin", "check"])
        .arg(at("sweep.jsonl"))
        .args(&held)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    eprintln!("{text}");
    assert_eq!(out.status.code(), Some(0), "{text}");
    for load in ["rate=3/s", "rate=6/s"] {
        let rows = rows(&text, load);
        assert_eq!(rows.len(), 9, "{text}");
        for (figure, err, noise) in rows {
            assert!(
                err.is_finite() && noise.is_finite(),
                "{load} {figure}: {text}"
            );
        }
    }
}

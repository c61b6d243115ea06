//! `--server-metrics` against a real engine: llama.cpp's `llama-server --metrics`
//! (from `scripts/real-engine.sh`, found through `CADENCE_REAL_ENGINE=DIR`; ignored
//! unless asked for, as scripts/test.sh does). Its `llamacpp:` families are mapped, the tokens it
//! generated match the client's output tokens within 1 %, and its decode time per
//! token matches the client's TPOT within 10 %. The load is small: 2 streams, 8
//! requests of 32 tokens.

mod common;

use common::{cadence, validate_report};
use serde_json::Value;

/// The running engine (stopped by its own pid when dropped) and its port.
fn start(dir: &std::path::Path, log: &std::path::Path) -> (common::LlamaServer, u16) {
    let args = [
        "-t",
        "2",
        "-np",
        "2",
        "-c",
        "2048",
        "-cb",
        "--metrics",
        "--no-webui",
    ];
    common::llama_server(dir, &args, log)
}

#[test]
#[ignore = "needs llama-server (CADENCE_REAL_ENGINE); scripts/test.sh builds it and runs this"]
fn llama_server_metrics_agree_with_the_client() {
    let dir = common::real_engine();
    let tmp = tempfile::tempdir().unwrap();
    let (_server, port) = start(&dir, &tmp.path().join("llama-server.log"));
    let json = tmp.path().join("r.json");
    let stdout = cadence()
        .arg("bench")
        .arg(format!("http://127.0.0.1:{}/v1", port))
        .args(["-c", "2", "-n", "8", "--max-tokens", "32", "--quiet"])
        .args([
            "--extra-body",
            r#"{"ignore_eos": true, "cache_prompt": false}"#,
        ])
        .args(["--server-metrics", "auto", "--scrape-interval", "250ms"])
        .arg("--json")
        .arg(&json)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let stdout = String::from_utf8(stdout).unwrap();
    assert!(stdout.contains("Server          llamacpp at"), "{stdout}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    validate_report(&r);
    let s = &r["levels"][0]["server"];
    assert_eq!(s["scrape"]["engine"], "llamacpp");
    let d = &s["decode"];
    let server_tokens = d["server_generated_tokens"].as_f64().unwrap();
    let client_tokens = d["client_output_tokens"].as_f64().unwrap();
    assert_eq!(client_tokens, 8.0 * 32.0, "{d}");
    assert!(
        (server_tokens - client_tokens).abs() <= 0.01 * client_tokens,
        "server {server_tokens} vs client {client_tokens} tokens"
    );
    let per_token = d["server_decode_per_token_ms"].as_f64().unwrap();
    let tpot = d["client_tpot_ms"].as_f64().unwrap();
    assert!(
        (per_token - tpot).abs() <= 0.10 * tpot,
        "server decode {per_token} ms/token vs client TPOT {tpot} ms"
    );
}

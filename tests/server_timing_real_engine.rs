//! Against a real engine: llama-server's own `timings` (on its last chat chunk) joined
//! with the client's chunks. Per request, the server's decode time per token (its
//! `predicted_ms` over the gaps after the first token) is within 1 % of the client's
//! TPOT: the delivery (client decode − server decode) is under 1 % of the decode (a
//! request whose chunks carried two tokens at once is said, not judged). Without `CADENCE_REAL_ENGINE` set by scripts/test.sh,
//! which runs it: ignored otherwise.

mod common;

use std::time::Duration;

const TOKENS: u64 = 32;

#[test]
#[ignore = "needs llama-server (CADENCE_REAL_ENGINE); scripts/test.sh builds it and runs this"]
fn llama_servers_decode_time_per_token_is_the_clients_tpot_within_one_percent() {
    let dir = common::real_engine();
    let tmp = tempfile::tempdir().unwrap();
    let args = ["-t", "1", "-np", "1", "-c", "1024", "--no-webui"];
    let (_server, port) = common::llama_server(&dir, &args, &tmp.path().join("server.log"));
    let records = tmp.path().join("records.jsonl");
    let out = common::cadence()
        .args([
            "bench",
            &format!("http://127.0.0.1:{port}/v1"),
            "--api",
            "chat",
        ])
        .args(["--model", "tiny-llama", "-n", "8", "-c", "1"])
        .args(["--max-tokens", &TOKENS.to_string()])
        .args(["--extra-body", r#"{"ignore_eos": true}"#, "--records"])
        .arg(&records)
        .timeout(Duration::from_secs(600))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let console = String::from_utf8_lossy(&out.stdout);
    assert!(console.contains("Where the time went"), "{console}");
    let mut judged = 0;
    for r in common::read_records(&records) {
        let t = &r["counters"]["server_timing"];
        let server_decode = t["decode_ns"].as_f64().expect("llama.cpp's timings");
        assert!(t["prompt_ns"].as_u64().is_some(), "{t}");
        let chunks = r["chunks"].as_array().unwrap();
        let at = |i: usize| chunks[i][0].as_f64().unwrap();
        let client_decode = at(chunks.len() - 1) - at(0);
        let n = r["output_tokens"]["count"].as_f64().unwrap();
        if chunks.len() as f64 != n {
            // Two tokens left in one chunk (about one request in three here: 30 or 31
            // chunks for 32 tokens, as when a token ends inside a UTF-8 character and
            // is held for the next): when that is the first chunk, the client's span
            // misses a step the server's covers. Said, not judged; eight requests make
            // a run with none judged a chance under 1 in 5,000.
            eprintln!(
                "request {}: {} chunks for {n} tokens, not judged",
                r["index"],
                chunks.len()
            );
            continue;
        }
        judged += 1;
        let delivery = client_decode - server_decode;
        let server_per_token = server_decode / (n - 1.0);
        let client_tpot = client_decode / (n - 1.0);
        let off = (server_per_token - client_tpot).abs() / client_tpot;
        eprintln!(
            "request {}: server {:.4} ms/token, client TPOT {:.4} ms, delivery {:.1} µs ({:+.3} % of the decode)",
            r["index"],
            server_per_token / 1e6,
            client_tpot / 1e6,
            delivery / 1e3,
            delivery / client_decode * 100.0
        );
        assert!(off < 0.01, "{r}");
        assert!(
            (delivery / client_decode).abs() < 0.01,
            "delivery {delivery} ns of {client_decode}"
        );
    }
    assert!(judged >= 1, "no request had one token per chunk");
}

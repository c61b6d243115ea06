//! Against a real engine: llama.cpp's `llama-server` (built by `scripts/real-engine.sh`,
//! which `scripts/test.sh` runs and exports as `CADENCE_REAL_ENGINE`) serves chat,
//! completions, Responses, Messages and its native `/completion` on one port.
//! `cadence bench --api NAME` must count the same output tokens as the server's own
//! counter, measure a TPOT within 10 % of the server's own time per token (both
//! from its `/metrics`, read before and after each dialect's run), and record what of
//! each prompt the server took from its cache. Without
//! `CADENCE_REAL_ENGINE` set by scripts/test.sh, which runs it: ignored otherwise.

mod common;

use cadence_core::RequestRecord;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// Tokens per request: enough that one decode step's share of the span is small.
const TOKENS: u64 = 32;
/// Requests per dialect, one at a time (the machine is shared; keep the load small).
const REQUESTS: &str = "2";

/// A GET's status and body, or `None` when nothing answers.
fn get(port: u16, path: &str) -> Option<(u16, String)> {
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
    write!(s, "GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    let status = text.split(' ').nth(1)?.parse().ok()?;
    let body = text.split_once("\r\n\r\n").map(|(_, b)| b.to_string())?;
    Some((status, body))
}

fn start(dir: &Path, log: &Path) -> (common::LlamaServer, u16) {
    let args = [
        "-t",
        "1",
        "-np",
        "1",
        "-c",
        "1024",
        "-cb",
        "--metrics",
        "--no-webui",
    ];
    common::llama_server(dir, &args, log)
}

/// The server's own totals: tokens generated and seconds spent generating them.
fn predicted(port: u16) -> (f64, f64) {
    let (_, body) = get(port, "/metrics").expect("/metrics answers");
    let value = |name: &str| {
        body.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
            .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{body}"))
    };
    (
        value("llamacpp:tokens_predicted_total "),
        value("llamacpp:tokens_predicted_seconds_total "),
    )
}

fn bench(url: &str, api: &str, records: &Path) -> Vec<RequestRecord> {
    let out = common::cadence()
        .args(["bench", url, "--api", api, "--model", "tiny-llama"])
        .args([
            "-n",
            REQUESTS,
            "-c",
            "1",
            "--max-tokens",
            &TOKENS.to_string(),
        ])
        .args(["--extra-body", r#"{"ignore_eos": true}"#, "--quiet"])
        .arg("--records")
        .arg(records)
        .timeout(Duration::from_secs(600))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{api}: {err}");
    let text = std::fs::read_to_string(records).unwrap();
    cadence_core::runlog::parse_records_file(&text)
        .unwrap()
        .0
        .records
}

#[test]
#[ignore = "needs llama-server (CADENCE_REAL_ENGINE); scripts/test.sh builds it and runs this"]
fn five_dialects_against_llama_server_match_its_own_token_count_and_time_per_token() {
    let dir = common::real_engine();
    let tmp = tempfile::tempdir().unwrap();
    let (_server, port) = start(&dir, &tmp.path().join("llama-server.log"));
    let base = format!("http://127.0.0.1:{port}");
    for (api, url) in [
        ("chat", format!("{base}/v1")),
        ("completions", format!("{base}/v1")),
        ("responses", format!("{base}/v1")),
        ("anthropic", format!("{base}/v1")),
        ("llamacpp", base.clone()),
    ] {
        // The token count must match every time; the timing comparison gets up to
        // three runs, because a shared machine can stall either side for a moment
        // (a stall, not a systematic error, is what a second run clears).
        let mut offs = Vec::new();
        for attempt in 0..3 {
            let records = tmp.path().join(format!("{api}-{attempt}.jsonl"));
            let off = compare(port, &url, api, &records);
            offs.push(off);
            if off.abs() < 0.10 {
                break;
            }
        }
        let last = *offs.last().unwrap();
        assert!(
            last.abs() < 0.10,
            "{api}: TPOT off the server's by {offs:?}"
        );
    }
}

/// Every dialect says what of the prompt llama-server took from its slot's cache, and
/// counts the whole prompt either way (Anthropic's `input_tokens` leaves cached tokens
/// out: they are added back). The run sends the same prompt twice on one slot, so the
/// second is all but its last token a cache hit.
fn prompt_cache_said(api: &str, recs: &[RequestRecord]) {
    let said: Vec<_> = recs
        .iter()
        .map(|r| (r.input_tokens, r.cached_input_tokens))
        .collect();
    let (Some(prompt), Some(cached)) = said[1] else {
        panic!("{api}: no prompt or cache figure: {said:?}");
    };
    assert_eq!(said[0].0, Some(prompt), "{api}: {said:?}");
    assert!(
        cached < prompt && cached + 2 >= prompt,
        "{api}: the repeated prompt should be a cache hit: {said:?}"
    );
}

/// One run of `api`: checks the token count against the server's and returns how far
/// (as a fraction) TPOT is from the server's time per token.
fn compare(port: u16, url: &str, api: &str, records: &Path) -> f64 {
    let (tokens_before, secs_before) = predicted(port);
    let recs = bench(url, api, records);
    let (tokens_after, secs_after) = predicted(port);
    let server_tokens = (tokens_after - tokens_before).round() as u64;
    let server_ms_per_token = (secs_after - secs_before) * 1e3 / server_tokens as f64;

    let mut ours = 0;
    let (mut span_ms, mut tokens) = (0.0, 0);
    for r in &recs {
        assert_eq!(r.outcome, cadence_core::Outcome::Succeeded, "{api}: {r:?}");
        let n = r.output_tokens.expect("the server reports usage").count;
        ours += n;
        let mut bad = 0;
        let (tpot, _) = cadence_core::per_request::tpot_and_speed(r, &mut bad)
            .unwrap_or_else(|| panic!("{api}: no TPOT: {r:?}"));
        span_ms += tpot * (n - 1) as f64;
        tokens += n;
    }
    assert_eq!(recs.len(), 2, "{api}");
    assert_eq!(ours, server_tokens, "{api}: our count vs the server's");
    prompt_cache_said(api, &recs);
    let tpot = span_ms / (tokens - recs.len() as u64) as f64;
    let off = tpot / server_ms_per_token - 1.0;
    // TPOT spreads the first-to-last-token span over n - 1 gaps, llama-server its
    // generation time (about the same span) over n tokens: TPOT sits n/(n-1) above
    // (+3.2 % at 32 tokens). The span per token shows the two clocks agree.
    let per_token = span_ms / tokens as f64;
    eprintln!(
        "{api}: {ours} tokens (server {server_tokens}); TPOT {tpot:.2} ms vs the server's \
         {server_ms_per_token:.2} ms per token ({:+.1} %; span per token {per_token:.2} ms, \
         {:+.1} %)",
        off * 100.0,
        (per_token / server_ms_per_token - 1.0) * 100.0
    );
    off
}

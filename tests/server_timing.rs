//! The server's own timing per request, end to end: `cadence sim` reports vLLM's
//! `metrics` object from its own schedule (no queue, the prefill up to the first token,
//! the decode from the first token to the last) or, in engine mode, from its engine's
//! (the queue for a batch slot too), `cadence bench` keeps it in each
//! record and splits every request's TTFT into queue + prefill + the residual (front
//! end and network) to the nanosecond; a dialect that reports nothing is named.

mod common;
use common::{interrupt_and_wait, read_records, spawn_listening, validate_report};

use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// The sim's fixed cadence: the prefill and the decode it reports are these exactly.
const TTFT_MS: u64 = 40;
const ITL_MS: u64 = 5;
const TOKENS: u64 = 8;

/// `cadence bench` of `n` requests of `tokens` tokens: its records, report (checked
/// against the schema) and console.
fn bench(url: &str, api: &str, (n, tokens): (u64, u64), dir: &Path) -> (Vec<Value>, Value, String) {
    bench_with(url, api, (n, tokens), dir, &["-c", "1"])
}

/// [`bench`] with `extra` flags (the concurrency among them).
fn bench_with(
    url: &str,
    api: &str,
    (n, tokens): (u64, u64),
    dir: &Path,
    extra: &[&str],
) -> (Vec<Value>, Value, String) {
    let records = dir.join(format!("{api}.jsonl"));
    let json = dir.join(format!("{api}.json"));
    let out = common::cadence()
        .args(["bench", url, "--api", api, "--model", "m"])
        .args(["-n", &n.to_string(), "--max-tokens", &tokens.to_string()])
        .args(extra)
        .arg("--records")
        .arg(&records)
        .arg("--json")
        .arg(&json)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    validate_report(&report);
    let console = String::from_utf8_lossy(&out.stdout).into_owned();
    (read_records(&records), report, console)
}

/// `cadence sim` on the fixed cadence above: its process and base URL.
fn fixed_sim() -> (common::Killed, String) {
    spawn_listening(&[
        "sim",
        "--addr",
        "127.0.0.1:0",
        "--ttft",
        &format!("{TTFT_MS}ms"),
        "--itl",
        &format!("{ITL_MS}ms"),
    ])
}

fn ns(v: &Value) -> i64 {
    v.as_i64()
        .unwrap_or_else(|| panic!("{v} is not an integer"))
}

/// A record's TTFT less the server's queue and prefill: the residual (front end and
/// network), in ns.
fn front_ns(r: &Value) -> i64 {
    let t = &r["counters"]["server_timing"];
    let ttft = ns(&r["chunks"][0][0]) - ns(&r["sent_ns"]);
    ttft - ns(&t["queue_ns"]) - ns(&t["prompt_ns"])
}

#[test]
fn the_sims_metrics_split_each_ttft_into_queue_prefill_and_the_residual() {
    let (_sim, base) = fixed_sim();
    let dir = tempfile::tempdir().unwrap();
    for api in ["chat", "completions", "responses"] {
        let (records, report, console) = bench(&format!("{base}/v1"), api, (4, TOKENS), dir.path());
        assert_eq!(records.len(), 4, "{api}");
        for r in &records {
            let t = &r["counters"]["server_timing"];
            // What the sim planned, to the nanosecond.
            assert_eq!(ns(&t["queue_ns"]), 0, "{api}: {t}");
            assert_eq!(
                ns(&t["prompt_ns"]),
                (TTFT_MS * 1_000_000) as i64,
                "{api}: {t}"
            );
            assert_eq!(
                ns(&t["decode_ns"]),
                ((TOKENS - 1) * ITL_MS * 1_000_000) as i64,
                "{api}: {t}"
            );
            let front = front_ns(r);
            // The residual is the loopback and the sim's timer (it ticks each ms):
            // never negative, and far under the prefill on an idle or a loaded machine.
            assert!(
                (0..(TTFT_MS * 1_000_000) as i64).contains(&front),
                "{api}: residual {front} ns"
            );
        }
        let split = &report["levels"][0]["server_timing"];
        assert_eq!(split["timed"], 4, "{api}: {split}");
        assert_eq!(split["queue_reported"], 4, "{api}");
        assert_eq!(split["prefill_ms"].as_f64(), Some(TTFT_MS as f64), "{api}");
        let parts = ["queue_ms", "prefill_ms", "front_ms"]
            .iter()
            .map(|k| split[k].as_f64().unwrap())
            .sum::<f64>();
        let ttft = split["ttft_ms"].as_f64().unwrap();
        assert!((ttft - parts).abs() < 1e-6, "{api}: {ttft} vs {parts}");
        let decode = ["server_decode_ms", "delivery_ms"]
            .iter()
            .map(|k| split[k].as_f64().unwrap())
            .sum::<f64>();
        assert!((split["decode_ms"].as_f64().unwrap() - decode).abs() < 1e-6);
        assert!(!split["slowest"].as_array().unwrap().is_empty());
        assert!(console.contains("Where the time went"), "{api}: {console}");
        assert!(
            console.contains("front end & network (residual)"),
            "{console}"
        );
    }
    // KServe's stream carries no timing: the level says which server said nothing.
    let (records, report, console) = bench(
        &format!("{base}/v2/models/m/generate_stream"),
        "kserve",
        (4, TOKENS),
        dir.path(),
    );
    assert!(records
        .iter()
        .all(|r| r["counters"]["server_timing"].is_null()));
    assert_eq!(report["levels"][0]["server_timing"]["timed"], 0);
    assert!(
        console
            .contains("(--api kserve) reported no timing of its own in its 4 succeeded requests"),
        "{console}"
    );
}

/// The engine-mode sim reports vLLM's `metrics` from its engine's schedule: with two
/// batch slots and six clients, requests queue for a slot, and each request's TTFT is
/// its queue + its prefill + a residual (the loopback and the HTTP front end).
#[test]
fn the_engine_mode_sims_metrics_carry_its_queue_and_prefill() {
    let (_sim, base) = spawn_listening(&[
        "sim",
        "--addr",
        "127.0.0.1:0",
        "--preset",
        "tiny@cpu",
        "--max-batch",
        "2",
    ]);
    let dir = tempfile::tempdir().unwrap();
    for api in ["chat", "completions"] {
        let (records, report, _) = bench_with(
            &format!("{base}/v1"),
            api,
            (6, 16),
            dir.path(),
            &["-c", "6", "--input-tokens", "64"],
        );
        assert_eq!(records.len(), 6, "{api}");
        let queued = records
            .iter()
            .filter(|r| ns(&r["counters"]["server_timing"]["queue_ns"]) > 0)
            .count();
        assert!(queued >= 2, "{api}: {queued} of 6 queued on 2 slots");
        for r in &records {
            let t = &r["counters"]["server_timing"];
            assert!(ns(&t["prompt_ns"]) > 0, "{api}: {t}");
            assert!(ns(&t["decode_ns"]) > 0, "{api}: {t}");
            let ttft = ns(&r["chunks"][0][0]) - ns(&r["sent_ns"]);
            let front = front_ns(r);
            // The engine stamps a request when its task takes it and a token at its
            // step's end, before the client can have either: the server's part never
            // runs past the client's TTFT (a clock tick aside), and the residual is
            // the loopback, the HTTP front end and the machine's scheduling.
            assert!(
                (-1_000_000..ttft).contains(&front),
                "{api}: residual {front} ns of a {ttft} ns TTFT: {t}"
            );
        }
        let split = &report["levels"][0]["server_timing"];
        assert_eq!(split["timed"], 6, "{api}: {split}");
        assert!(split["queue_ms"].as_f64().unwrap() > 0.0, "{api}: {split}");
    }
}

/// `cadence sim` on a 10 ms TTFT and a 5 ms gap with `flag` set to `value`: the child
/// and its base URL.
fn sim_with(flag: &str, value: &str) -> (common::Killed, String) {
    spawn_listening(&[
        "sim",
        "--addr",
        "127.0.0.1:0",
        "--ttft",
        "10ms",
        "--itl",
        "5ms",
        flag,
        value,
    ])
}

/// `cadence sim --spec-accept-len 2.5` on a 10 ms TTFT and a 5 ms gap.
fn speculating_sim() -> (common::Killed, String) {
    sim_with("--spec-accept-len", "2.5")
}

/// Speculation: `cadence sim --spec-accept-len 2.5` sends 1, 2, 3, 2, 3 tokens a chunk
/// on the usual gap and reports vLLM's per-request `speculative_decoding` counts; the
/// acceptance length the client derives (tokens per chunk after the first) equals the
/// configured one and the server's, and the gap before a chunk is never divided by
/// its tokens.
#[test]
fn the_acceptance_length_the_client_sees_is_the_configured_and_the_servers() {
    let (_sim, base) = speculating_sim();
    let dir = tempfile::tempdir().unwrap();
    let (records, report, console) = bench(&format!("{base}/v1"), "chat", (3, 11), dir.path());
    for r in &records {
        assert_eq!(r["chunks"].as_array().unwrap().len(), 5, "{r}");
        let t = &r["counters"]["server_timing"];
        assert_eq!(
            (ns(&t["spec_steps"]), ns(&t["spec_accepted"])),
            (4, 6),
            "{t}"
        );
        assert_eq!(ns(&t["spec_drafted"]), 8, "{t}");
    }
    let b = &report["levels"][0]["bursts"];
    assert_eq!(b["client_acceptance_length"].as_f64(), Some(2.5), "{b}");
    assert_eq!(b["server_acceptance_length"].as_f64(), Some(2.5), "{b}");
    assert_eq!(b["draft_acceptance_rate"].as_f64(), Some(0.75), "{b}");
    assert!(
        console.contains("client 2.50 over 3 requests, server 2.50"),
        "{console}"
    );
    // Without --server-metrics the level has no /metrics figure.
    assert!(b.get("metrics_acceptance_length").is_none(), "{b}");
    // A flag outside its range is refused naming it.
    let bad = common::cadence()
        .args(["sim", "--addr", "127.0.0.1:0", "--spec-accept-len", "17"])
        .timeout(Duration::from_secs(10))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--spec-accept-len must be from 1 to 16"));
}

/// Speculation's counters: the sim's `/metrics` under `--spec-accept-len 2.5` counts
/// vLLM's drafts, draft and accepted tokens (and by draft position) and SGLang's
/// gauges as each step's chunk leaves; scraped over the level they give the acceptance
/// length the client saw and the per-request metrics said, exactly (the scraper reads
/// once before the level's first request and once after its last answer).
#[test]
fn the_servers_counters_give_the_acceptance_length_the_client_sees() {
    let (_sim, base) = speculating_sim();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let out = common::cadence()
        .args([
            "bench",
            &format!("{base}/v1"),
            "--api",
            "chat",
            "--model",
            "m",
        ])
        .args(["-c", "2", "-n", "6", "--max-tokens", "11"])
        .args(["--server-metrics", &format!("{base}/metrics")])
        .args(["--scrape-interval", "50ms", "--json"])
        .arg(&json)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    validate_report(&report);
    let level = &report["levels"][0];
    let done = level["requests"]["succeeded"].as_f64().unwrap();
    assert_eq!(done, 6.0, "{level}");
    // Each request: steps of 2, 3, 2, 3 tokens, 2 drafts a step.
    let sp = &level["server"]["speculation"];
    assert_eq!(sp["drafts"].as_f64(), Some(4.0 * done), "{sp}");
    assert_eq!(sp["draft_tokens"].as_f64(), Some(8.0 * done), "{sp}");
    assert_eq!(sp["accepted"].as_f64(), Some(6.0 * done), "{sp}");
    assert_eq!(
        sp["accepted_by_position"],
        serde_json::json!([4.0 * done, 2.0 * done])
    );
    let b = &level["bursts"];
    for k in [
        "client_acceptance_length",
        "server_acceptance_length",
        "metrics_acceptance_length",
    ] {
        assert_eq!(b[k].as_f64(), Some(2.5), "{k}: {b}");
    }
    assert_eq!(
        b["metrics_draft_acceptance_rate"].as_f64(),
        Some(0.75),
        "{b}"
    );
    let console = String::from_utf8_lossy(&out.stdout);
    assert!(
        console.contains("client 2.50 over 6 requests, server 2.50 (75 % of drafts accepted), the server's /metrics 2.50 (75 % of drafts accepted)"),
        "{console}"
    );
    assert!(
        console.contains("24 steps drafted 48 tokens, 36 accepted; acceptance length 2.50"),
        "{console}"
    );
}

/// Prefill/decode disaggregation: `cadence sim --pd-transfer 40ms` holds each first
/// token back by a KV transfer and counts it on `/metrics` in vLLM's NIXL and SGLang's
/// names; `--server-metrics` names that transfer in the level's TTFT split, each
/// request's TTFT still splits exactly, and the first-token stalls it causes are
/// attributed to `kv_transfer`.
#[test]
fn a_kv_transfer_is_named_in_the_ttft_split_and_the_stalls() {
    let (_sim, base) = sim_with("--pd-transfer", "40ms");
    let dir = tempfile::tempdir().unwrap();
    let (records, report, console) =
        scraped_bench(&base, (8, 6), dir.path(), &["--stall-threshold", "30ms"]);
    let level = &report["levels"][0];
    // Every transfer took 40 ms and the scraper reads once before the level's first
    // request and once after its last answer, so the mean over the level is 40 ms up
    // to the f64 sums' rounding (the sim's histogram sums and the scrape's deltas).
    let split = &level["server"]["ttft_split"];
    let transfer = split["server_kv_transfer_ms"].as_f64().unwrap();
    assert!((transfer - 40.0).abs() < 1e-6, "{split}");
    let client = split["client_ms"].as_f64().unwrap();
    let rest = split["rest_ms"].as_f64().unwrap();
    assert!((client - transfer - rest).abs() < 1e-6, "{split}");
    assert!(console.contains("KV transfer"), "{console}");
    // The sim names each transfer in vLLM's and SGLang's families; the scrape counts
    // it once: 8 transfers over the level, not 16.
    assert_eq!(transfers_scraped(level), 8.0, "{split}");
    // Per request: vLLM's metrics object has no transfer of its own, so the server's
    // time to its first token holds it (10 ms of prefill + 40 ms); the client's TTFT is
    // queue + that + the residual (front end and network), to the nanosecond.
    assert_eq!(records.len(), 8);
    for r in &records {
        let t = &r["counters"]["server_timing"];
        assert_eq!(ns(&t["queue_ns"]), 0, "{t}");
        assert_eq!(ns(&t["prompt_ns"]), 50_000_000, "{t}");
        let front = front_ns(r);
        assert!((0..50_000_000).contains(&front), "residual {front} ns");
    }
    let timing = &level["server_timing"];
    let parts: f64 = ["queue_ms", "prefill_ms", "front_ms"]
        .iter()
        .map(|k| timing[k].as_f64().unwrap())
        .sum();
    assert!(
        (timing["ttft_ms"].as_f64().unwrap() - parts).abs() < 1e-6,
        "{timing}"
    );
    // Each first token waited 50 ms or more, over the 30 ms threshold: a stall whose
    // window's mean transfer (40 ms) is at least half of it when the wait is under
    // 80 ms. The sim counts a transfer as its first token leaves, and a sample is
    // stamped when its page was asked for, so the first sample stamped after the
    // client got the token holds the transfer: every such stall is named (a stall
    // of 80 ms or more on a loaded machine reads `none`), none with another cause.
    let server = &level["server"];
    let stalls: Vec<(f64, &str)> = server["stalls"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "first_token")
        .map(|s| (s["gap_ms"].as_f64().unwrap(), s["cause"].as_str().unwrap()))
        .collect();
    assert!(!stalls.is_empty(), "{server}");
    for (gap_ms, cause) in &stalls {
        let expected: &[&str] = if *gap_ms < 80.0 {
            &["kv_transfer"]
        } else {
            &["kv_transfer", "none"]
        };
        assert!(expected.contains(cause), "{gap_ms} ms: {cause}: {server}");
    }
}

/// [`bench_with`] of chat at 2 clients against the sim at `base`, scraping its
/// `/metrics` every 200 ms, with `extra` flags.
fn scraped_bench(
    base: &str,
    (n, tokens): (u64, u64),
    dir: &Path,
    extra: &[&str],
) -> (Vec<Value>, Value, String) {
    let metrics = format!("{base}/metrics");
    let scrape = [
        "-c",
        "2",
        "--server-metrics",
        &metrics,
        "--scrape-interval",
        "200ms",
    ];
    bench_with(
        &format!("{base}/v1"),
        "chat",
        (n, tokens),
        dir,
        &[&scrape[..], extra].concat(),
    )
}

/// The KV transfers a level's scrape counted: the last sample's count less the first's.
fn transfers_scraped(level: &Value) -> f64 {
    let samples = level["server"]["scrape"]["samples"].as_array().unwrap();
    let count = |s: &Value| s["kv_transfer"]["count"].as_f64().unwrap_or(0.0);
    count(samples.last().unwrap()) - count(&samples[0])
}

/// A malformed `--pd-transfer` is refused naming the flag and the form.
#[test]
fn a_bad_pd_transfer_is_a_usage_error() {
    for bad in ["40", "40ms+", "2m"] {
        let out = common::cadence()
            .args(["sim", "--addr", "127.0.0.1:0", "--pd-transfer", bad])
            .timeout(Duration::from_secs(20))
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{bad}: {out:?}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("--pd-transfer") && err.contains("DURATION[+PER_TOKEN]"),
            "{bad}: {err}"
        );
    }
}

/// A stand-in for TGI answering whole, as its `/generate` does: the body's text and
/// details, the timing in its headers (ms), 60 ms after the request arrived. Its base URL.
fn whole_tgi() -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            // The head, then the body its content-length names.
            while let Ok(n @ 1..) = conn.read(&mut buf) {
                seen.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&seen).to_lowercase();
                if let Some(end) = text.find("\r\n\r\n") {
                    let length = text
                        .lines()
                        .find_map(|l| l.strip_prefix("content-length:"))
                        .and_then(|v| v.trim().parse::<usize>().ok())
                        .unwrap_or(0);
                    if seen.len() >= end + 4 + length {
                        break;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(60));
            let body = r#"{"generated_text":"one two three four","details":{"finish_reason":"length","generated_tokens":4,"seed":null}}"#;
            let head = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
                 x-compute-type: cpu\r\nx-compute-time: 0.052\r\nx-compute-characters: 5\r\n\
                 x-total-time: 52\r\nx-validation-time: 1\r\nx-queue-time: 7\r\n\
                 x-inference-time: 44\r\nx-time-per-token: 11\r\nx-prompt-tokens: 2\r\n\
                 x-generated-tokens: 4\r\nconnection: close\r\n\r\n",
                body.len()
            );
            let _ = conn.write_all(head.as_bytes());
            let _ = conn.write_all(body.as_bytes());
        }
    });
    base
}

/// TGI's whole answer: `x-queue-time` is the queue and `x-inference-time` (prefill and
/// decode together, the one chunk arriving after both) the time to it, and the split
/// of each request's TTFT uses them.
#[test]
fn tgis_timing_headers_split_a_whole_answers_ttft() {
    let base = whole_tgi();
    let dir = tempfile::tempdir().unwrap();
    let (records, report, console) = bench(
        &format!("{base}/generate_stream"),
        "generate",
        (3, 4),
        dir.path(),
    );
    assert_eq!(records.len(), 3);
    for r in &records {
        let t = &r["counters"]["server_timing"];
        assert_eq!(ns(&t["queue_ns"]), 7_000_000, "{t}");
        assert_eq!(ns(&t["prompt_ns"]), 44_000_000, "{t}");
        assert!(t.get("decode_ns").is_none(), "{t}");
    }
    let split = &report["levels"][0]["server_timing"];
    assert_eq!(split["timed"], 3, "{split}");
    assert_eq!(split["queue_ms"].as_f64(), Some(7.0), "{split}");
    assert_eq!(split["prefill_ms"].as_f64(), Some(44.0), "{split}");
    let ttft = split["ttft_ms"].as_f64().unwrap();
    let front = split["front_ms"].as_f64().unwrap();
    assert!((ttft - (7.0 + 44.0 + front)).abs() < 1e-6, "{split}");
    // The stand-in waits 60 ms: what the headers do not cover is the residual's.
    assert!(front >= 60.0 - 51.0, "{split}");
    assert!(console.contains("Where the time went"), "{console}");
}

/// The sim's TGI endpoint answering whole (`"stream": false`): its timing headers say
/// the sim's own queue (none) and inference time (the 40 ms prefill and 7 gaps of
/// 5 ms), read by bench straight from the sim and by the proxy in front of it, each
/// request's TTFT the queue, the inference and a residual, summing to the client's.
#[test]
fn the_sims_tgi_headers_split_a_whole_answer_for_bench_and_the_proxy() {
    let (_sim, sim_url) = fixed_sim();
    let dir = tempfile::tempdir().unwrap();
    let proxy_records = dir.path().join("proxy.jsonl");
    let (mut proxy, proxy_url) = common::recording_proxy(&sim_url, &proxy_records);
    let inference_ns = ((TTFT_MS + (TOKENS - 1) * ITL_MS) * 1_000_000) as i64;
    let whole = ["-c", "1", "--extra-body", r#"{"stream": false}"#];
    for (base, sub) in [(&sim_url, "direct"), (&proxy_url, "proxied")] {
        let sub_dir = dir.path().join(sub);
        std::fs::create_dir(&sub_dir).unwrap();
        let url = format!("{base}/generate_stream");
        let (records, report, console) =
            bench_with(&url, "generate", (3, TOKENS), &sub_dir, &whole);
        assert_eq!(records.len(), 3, "{sub}");
        for r in &records {
            assert_eq!(
                r["chunks"].as_array().unwrap().len(),
                1,
                "{sub}: one chunk: {r}"
            );
            let t = &r["counters"]["server_timing"];
            assert_eq!(ns(&t["queue_ns"]), 0, "{sub}: {t}");
            assert_eq!(ns(&t["prompt_ns"]), inference_ns, "{sub}: {t}");
            assert!(front_ns(r) >= 0, "{sub}: {r}");
        }
        let split = &report["levels"][0]["server_timing"];
        assert_eq!(split["timed"], 3, "{sub}: {split}");
        assert_eq!(split["queue_ms"].as_f64(), Some(0.0), "{sub}: {split}");
        assert_eq!(
            split["prefill_ms"].as_f64(),
            Some(inference_ns as f64 / 1e6),
            "{sub}: {split}"
        );
        let ttft = split["ttft_ms"].as_f64().unwrap();
        let front = split["front_ms"].as_f64().unwrap();
        assert!(
            (ttft - (inference_ns as f64 / 1e6 + front)).abs() < 1e-6,
            "{sub}: {split}"
        );
        assert!(console.contains("Where the time went"), "{sub}: {console}");
    }
    // The proxy's own records of the three proxied requests say the same.
    interrupt_and_wait(&mut proxy.0);
    let proxied = read_records(&proxy_records);
    assert_eq!(proxied.len(), 3, "{proxied:?}");
    for r in &proxied {
        let t = &r["counters"]["server_timing"];
        assert_eq!(ns(&t["queue_ns"]), 0, "proxy: {t}");
        assert_eq!(ns(&t["prompt_ns"]), inference_ns, "proxy: {t}");
    }
}

/// The sim in engine mode (`--preset tiny@cpu`, continuous batching) with a 40 ms KV
/// transfer and an acceptance length of 2.5 counts its own transfers and speculation
/// steps on `/metrics`, as the flat sim does: scraped over the level, each transfer
/// 40 ms (the link is free), and the steps, drafted and accepted tokens are those the
/// client's chunks and tokens show (each chunk after the first a step, its tokens
/// less the bonus one accepted, two drafts a step), and each request's own `metrics`
/// object reports its share.
#[test]
fn an_engine_mode_sim_counts_its_transfers_and_speculation_steps() {
    let (_sim, base) =
        common::tiny_engine_sim(&["--pd-transfer", "40ms", "--spec-accept-len", "2.5"]);
    let dir = tempfile::tempdir().unwrap();
    let (records, report, _console) = scraped_bench(&base, (6, 16), dir.path(), &[]);
    assert_eq!(records.len(), 6);
    // The first chunk is the prefill's one token; each after it a step.
    let (mut steps, mut accepted) = (0.0, 0.0);
    for r in &records {
        let chunks = r["chunks"].as_array().unwrap().len() as f64;
        let tokens = r["output_tokens"]["count"].as_f64().unwrap();
        steps += chunks - 1.0;
        accepted += tokens - 1.0 - (chunks - 1.0);
        // Each request's own counts, as vLLM's per-request object gives them.
        let t = &r["counters"]["server_timing"];
        assert_eq!(t["spec_steps"].as_f64(), Some(chunks - 1.0), "{t}");
        assert_eq!(t["spec_accepted"].as_f64(), Some(tokens - chunks), "{t}");
        assert_eq!(
            t["spec_drafted"].as_f64(),
            Some(2.0 * (chunks - 1.0)),
            "{t}"
        );
    }
    let level = &report["levels"][0];
    let sp = &level["server"]["speculation"];
    assert_eq!(sp["drafts"].as_f64(), Some(steps), "{sp}");
    assert_eq!(sp["draft_tokens"].as_f64(), Some(2.0 * steps), "{sp}");
    assert_eq!(sp["accepted"].as_f64(), Some(accepted), "{sp}");
    let b = &level["bursts"];
    let client = b["client_acceptance_length"].as_f64().unwrap();
    let scraped = b["metrics_acceptance_length"].as_f64().unwrap();
    assert!((client - scraped).abs() < 1e-9, "{b}");
    let split = &level["server"]["ttft_split"];
    let transfer = split["server_kv_transfer_ms"].as_f64().unwrap();
    assert!((transfer - 40.0).abs() < 1e-6, "{split}");
    assert_eq!(transfers_scraped(level), 6.0, "{split}");
    // The server's prefill holds no transfer (tiny@cpu prefills a prompt in ms):
    // client TTFT = queue + prefill + the transfer + a rest that is the network's and
    // the client's, never negative.
    let prefill = split["server_prefill_ms"].as_f64().unwrap();
    assert!((0.0..40.0).contains(&prefill), "{split}");
    assert!(split["rest_ms"].as_f64().unwrap() >= 0.0, "{split}");
}

//! Every dialect end to end, offline: `cadence sim` serves it (the same plan and the
//! same faults for each), `cadence bench --api NAME` measures it into the same
//! records, and `cadence proxy` forwards it byte for byte while recording its ITL.

mod common;
use common::{fast_sim, interrupt_and_wait};

use assert_cmd::Command;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::Path;
use std::time::Duration;

/// Each dialect's `--api` name and the path its endpoint is given by (or the base).
const DIALECTS: [(&str, &str); 12] = [
    ("chat", "/v1"),
    ("completions", "/v1"),
    ("responses", "/v1"),
    ("anthropic", "/v1"),
    ("ollama", ""),
    ("ollama", "/api/generate"),
    ("generate", ""),
    ("generate", "/generate"),
    ("kserve", "/v2/models/m/generate_stream"),
    ("llamacpp", ""),
    ("websocket", "/v1/realtime"),
    ("auto", "/v1/messages"),
];

/// The URL of a dialect's endpoint on the sim at `base` (WebSocket: `ws://`).
fn url(base: &str, api: &str, path: &str) -> String {
    match api {
        "websocket" => format!("{}{path}", base.replacen("http://", "ws://", 1)),
        _ => format!("{base}{path}"),
    }
}

const TOKENS: usize = 6;

/// `cadence bench` against `url`: its exit code, records and stderr.
fn bench(url: &str, api: &str, extra: &[&str], dir: &Path) -> (Option<i32>, Vec<Value>, String) {
    let records = dir.join(format!("{api}-{}.jsonl", url.len()));
    let out = Command::cargo_bin("cadence")
        .unwrap()
        .args(["bench", url, "--api", api, "--model", "m", "-c", "1"])
        .args(["--max-tokens", &TOKENS.to_string()])
        .arg("--records")
        .arg(&records)
        .args(extra)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let text = std::fs::read_to_string(&records).unwrap_or_default();
    let recs = text
        .lines()
        .filter_map(|l| serde_json::from_str::<Value>(l).ok())
        .filter(|v| v.get("outcome").is_some())
        .collect();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), recs, err)
}

#[test]
fn bench_measures_every_dialect_the_sim_serves_into_the_same_records() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, base) = fast_sim();
    for (api, path) in DIALECTS {
        let url = url(&base, api, path);
        let (code, recs, err) = bench(&url, api, &["-n", "3"], dir.path());
        assert_eq!(code, Some(0), "{api} {path}: {err}");
        assert_eq!(recs.len(), 3, "{api} {path}: {err}");
        for r in &recs {
            assert_eq!(r["outcome"], "succeeded", "{api} {path}: {r}");
            let chunks = r["chunks"].as_array().unwrap();
            assert_eq!(chunks.len(), TOKENS, "{api} {path}: {r}");
            let t: Vec<u64> = chunks.iter().map(|c| c[0].as_u64().unwrap()).collect();
            assert!(t.windows(2).all(|w| w[0] <= w[1]), "{api} {path}: {r}");
            if api != "kserve" {
                // KServe streams carry no count of their own.
                assert_eq!(
                    r["output_tokens"]["count"].as_u64(),
                    Some(TOKENS as u64),
                    "{api} {path}: {r}"
                );
            }
            assert!(r["counters"]["no_done_marker"].is_null(), "{api}: {r}");
        }
        if api == "auto" {
            assert!(err.contains("API auto: anthropic"), "{err}");
        }
    }
}

#[test]
fn the_sims_faults_reach_every_dialect_and_bench_classifies_them() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, base) = fast_sim();
    let faults = [
        ("split_bytes", "succeeded"),
        ("crlf", "succeeded"),
        ("coalesce", "succeeded"),
        ("split_utf8", "succeeded"),
        ("error_after_tokens", "stream_error"),
        ("eof_no_done", "truncated"),
        ("huge_event", "event_too_large"),
    ];
    for (api, path) in DIALECTS.iter().filter(|(a, _)| *a != "auto") {
        let url = url(&base, api, path);
        for (fault, want) in faults {
            let header = format!("x-cadence-fault: {fault}");
            let (_, recs, err) = bench(&url, api, &["-n", "1", "-H", &header], dir.path());
            assert_eq!(recs.len(), 1, "{api} {path} {fault}: {err}");
            let want = match (*api, fault) {
                // A KServe stream has no end marker: a clean early EOF looks complete.
                ("kserve", "eof_no_done") => "succeeded",
                _ => want,
            };
            assert_eq!(
                recs[0]["outcome"], want,
                "{api} {path} {fault}: {}",
                recs[0]
            );
        }
    }
}

#[test]
fn bench_measures_a_non_streamed_answer_in_every_dialect_as_one_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let (_sim, base) = fast_sim();
    let off = r#"{"stream":false}"#;
    // KServe's `/generate` never streams; Realtime always does (not here).
    let cases = [
        ("chat", "/v1", off),
        ("completions", "/v1", off),
        ("responses", "/v1", off),
        ("anthropic", "/v1", off),
        ("ollama", "", off),
        ("ollama", "/api/generate", off),
        ("generate", "/generate", off),
        ("kserve", "/v2/models/m/generate", "{}"),
        ("llamacpp", "", off),
    ];
    for (api, path, body) in cases {
        let url = format!("{base}{path}");
        let extra = ["-n", "2", "--extra-body", body];
        let (code, recs, err) = bench(&url, api, &extra, dir.path());
        assert_eq!(code, Some(0), "{api} {path}: {err}");
        assert_eq!(recs.len(), 2, "{api} {path}: {err}");
        for r in &recs {
            assert_eq!(r["outcome"], "succeeded", "{api} {path}: {r}");
            assert_eq!(
                r["chunks"].as_array().unwrap().len(),
                1,
                "{api} {path}: {r}"
            );
            // The whole answer is the first and the last byte: TTFT is E2E (KServe's
            // answer ends at EOF, a moment after its one event).
            let (first, end) = (r["first_content_ns"].as_u64(), r["end_ns"].as_u64());
            if api != "kserve" {
                assert_eq!(first, end, "{api} {path}: {r}");
            }
            assert!(first.unwrap() <= end.unwrap(), "{api} {path}: {r}");
            if api != "kserve" {
                assert_eq!(
                    r["output_tokens"]["count"].as_u64(),
                    Some(TOKENS as u64),
                    "{api} {path}: {r}"
                );
            }
            // A whole answer has no `[DONE]` to miss.
            assert!(
                r["counters"]["no_done_marker"].is_null(),
                "{api} {path}: {r}"
            );
        }
    }
}

/// The body of a raw HTTP/1.0 POST (the answer is close-delimited, so the bytes are
/// exactly the body's).
fn post(addr: &str, path: &str, body: &str, headers: &str) -> Vec<u8> {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "POST {path} HTTP/1.0\r\nHost: x\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut got = Vec::new();
    s.read_to_end(&mut got).unwrap();
    let at = got.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    assert!(
        got.starts_with(b"HTTP/1."),
        "{}",
        String::from_utf8_lossy(&got)
    );
    got.split_off(at)
}

/// The body with the wall-clock `created` values (seconds, which may tick between two
/// requests) blanked.
fn without_clock(body: &[u8]) -> String {
    let text = String::from_utf8(body.to_vec()).unwrap();
    let mut out = String::new();
    let mut rest = text.as_str();
    while let Some(i) = rest.find("\"created") {
        let (head, tail) = rest.split_at(i);
        out.push_str(head);
        let colon = tail.find(':').unwrap() + 1;
        out.push_str(&tail[..colon]);
        let tail = tail[colon..].trim_start_matches('"');
        let digits = tail
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(tail.len());
        out.push('0');
        rest = &tail[digits..];
    }
    out.push_str(rest);
    out
}

/// One streamed request body per dialect endpoint of the simulator, 6 tokens each.
fn one_stream_per_dialect() -> [(&'static str, String); 10] {
    let prompt = r#""say something""#;
    [
        (
            "/v1/chat/completions",
            format!(
                r#"{{"model":"m","messages":[{{"role":"user","content":{prompt}}}],"max_tokens":6,"stream":true}}"#
            ),
        ),
        (
            "/v1/completions",
            format!(r#"{{"model":"m","prompt":{prompt},"max_tokens":6,"stream":true}}"#),
        ),
        (
            "/v1/responses",
            format!(r#"{{"model":"m","input":{prompt},"max_output_tokens":6,"stream":true}}"#),
        ),
        (
            "/v1/messages",
            format!(
                r#"{{"model":"m","messages":[{{"role":"user","content":{prompt}}}],"max_tokens":6,"stream":true}}"#
            ),
        ),
        (
            "/api/chat",
            format!(
                r#"{{"model":"m","messages":[{{"role":"user","content":{prompt}}}],"options":{{"num_predict":6}}}}"#
            ),
        ),
        (
            "/api/generate",
            format!(r#"{{"model":"m","prompt":{prompt},"options":{{"num_predict":6}}}}"#),
        ),
        (
            "/generate_stream",
            format!(r#"{{"inputs":{prompt},"parameters":{{"max_new_tokens":6}}}}"#),
        ),
        (
            "/generate",
            format!(
                r#"{{"text":{prompt},"sampling_params":{{"max_new_tokens":6}},"stream":true}}"#
            ),
        ),
        (
            "/v2/models/m/generate_stream",
            format!(r#"{{"text_input":{prompt},"parameters":{{"max_tokens":6}}}}"#),
        ),
        (
            "/completion",
            format!(r#"{{"prompt":{prompt},"n_predict":6,"stream":true}}"#),
        ),
    ]
}

#[test]
fn the_proxy_forwards_every_dialect_byte_for_byte_and_records_its_itl() {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("live.jsonl");
    let (_sim, sim_url) = fast_sim();
    let (mut proxy, proxy_url) = common::recording_proxy(&sim_url, &records);
    let bodies = one_stream_per_dialect();
    let direct = sim_url.strip_prefix("http://").unwrap();
    let proxied = proxy_url.strip_prefix("http://").unwrap();
    for (i, (path, body)) in bodies.iter().enumerate() {
        let headers = format!("x-cadence-request: {i}\r\n");
        let want = post(direct, path, body, &headers);
        let got = post(proxied, path, body, &headers);
        assert!(!want.is_empty(), "{path}");
        assert_eq!(without_clock(&got), without_clock(&want), "{path}");
    }
    // The Realtime WebSocket through the proxy, by bench's own WebSocket client: one
    // connection per request, one proxy record per response.
    let ws = format!("{}/v1/realtime", proxy_url.replacen("http://", "ws://", 1));
    let (code, bench_recs, err) = bench(&ws, "websocket", &["-n", "2"], dir.path());
    assert_eq!(code, Some(0), "{err}");
    assert!(
        bench_recs.iter().all(|r| r["outcome"] == "succeeded"),
        "{bench_recs:?}"
    );
    interrupt_and_wait(&mut proxy.0);
    let text = std::fs::read_to_string(&records).unwrap();
    let recs = cadence_core::runlog::parse_records_file(&text)
        .unwrap()
        .0
        .records;
    assert_eq!(recs.len(), bodies.len() + 2, "{text}");
    let realtime = recs
        .iter()
        .filter(|r| r.proxy.as_ref().unwrap().path == "/v1/realtime")
        .count();
    assert_eq!(realtime, 2, "{text}");
    for r in &recs {
        let path = &r.proxy.as_ref().unwrap().path;
        assert_eq!(r.outcome, cadence_core::Outcome::Succeeded, "{path}: {r:?}");
        assert_eq!(r.chunks.len(), 6, "{path}: {r:?}");
        let mut bad = 0;
        let gaps = cadence_core::per_request::itl_gaps(r, &mut bad).count();
        // A gap the proxy spent waiting on this test's client (a loaded machine) is
        // the client's, and core leaves it out: together they are the stream's five.
        let waits = (1..6)
            .filter(|&i| cadence_core::per_request::client_wait_before(r, i))
            .count();
        assert_eq!((gaps + waits, bad), (5, 0), "{path}");
    }
}

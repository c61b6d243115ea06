//! Agent sessions against a real engine: llama.cpp's `llama-server` (built by
//! `scripts/real-engine.sh`, exported by `scripts/test.sh` as `CADENCE_REAL_ENGINE`)
//! with its tiny model, which never calls tools, so `--agent-force mock` keeps every
//! step a tool step. Sessions of four steps complete, each prompt holds the last one
//! plus the reply and the tool result, and the prefix cache shows: a late step's TTFT
//! is below that of a cold prompt at least as long. Needs the engine: ignored unless asked for (scripts/test.sh does).

mod common;

use serde_json::Value;
use std::time::Duration;

const STEPS: u64 = 4;
/// Words of each tool result (the engine counts about twice as many tokens).
const RESULT: u64 = 50;
const REPLY: u64 = 8;

fn ttft_ms(r: &Value) -> f64 {
    (r["chunks"][0][0].as_u64().unwrap() - r["sent_ns"].as_u64().unwrap()) as f64 / 1e6
}

/// Each session's steps: every prompt is the last one, its reply and the tool result
/// (the engine's own count, template tokens on top). Returns the last steps' TTFTs
/// and the longest prompt.
fn check_grown_prompts(records: &std::path::Path) -> (Vec<f64>, u64) {
    let recs = common::read_records(records);
    assert_eq!(recs.len() as u64, 2 * STEPS);
    let mut late_ttft = Vec::new();
    let mut longest = 0;
    for s in 0..2u64 {
        let mut steps: Vec<&Value> = recs.iter().filter(|r| r["session"] == s).collect();
        steps.sort_by_key(|r| r["turn"].as_u64());
        assert_eq!(steps.len() as u64, STEPS);
        for pair in steps.windows(2) {
            let (a, b) = (pair[0], pair[1]);
            assert_eq!(b["outcome"], "succeeded");
            // The next prompt is this one, the reply and the result (the engine's
            // own count, template tokens on top).
            let grown = b["input_tokens"].as_u64().unwrap() - a["input_tokens"].as_u64().unwrap();
            let reply = a["output_tokens"]["count"].as_u64().unwrap();
            assert_eq!(reply, REPLY);
            assert!(
                grown > reply + RESULT / 2 && grown < reply + 3 * RESULT,
                "prompt grew by {grown} tokens for a {reply}-token reply and a {RESULT}-word result"
            );
        }
        let last = steps.last().unwrap();
        late_ttft.push(ttft_ms(last));
        longest = longest.max(last["input_tokens"].as_u64().unwrap());
    }
    (late_ttft, longest)
}

/// A cold prompt about as long as `longest` tokens, prefilled whole: its TTFT (ms) and
/// its tokens. Each run draws fresh words (a new seed), so no prefix is cached and the
/// engine's tokens per word vary from draw to draw: the words are scaled by the last
/// draw's ratio until one lands in `longest..=1.25 × longest`.
fn cold_prompt(url: &str, tmp: &std::path::Path, longest: u64) -> (f64, u64) {
    let cold = |words: u64, name: &str| {
        let path = tmp.join(name);
        common::cadence()
            .args(["bench", url, "--api", "chat", "--model", "tiny-llama"])
            .args([
                "--input-tokens",
                &words.to_string(),
                "-n",
                "1",
                "--max-tokens",
                "4",
            ])
            .args(["--quiet", "--records"])
            .arg(&path)
            .timeout(Duration::from_secs(600))
            .assert()
            .code(0);
        common::read_records(&path).remove(0)
    };
    let (mut words, mut tokens_seen) = (200u64, Vec::new());
    for attempt in 0..6 {
        let c = cold(words, &format!("cold-{attempt}.jsonl"));
        let tokens = c["input_tokens"].as_u64().unwrap();
        tokens_seen.push(tokens);
        if tokens >= longest && tokens <= longest + longest / 4 {
            return (ttft_ms(&c), tokens);
        }
        let per_word = tokens as f64 / words as f64;
        words = (longest as f64 * 1.1 / per_word).ceil() as u64;
    }
    panic!("no cold prompt landed within 25 % above {longest} tokens: {tokens_seen:?}");
}

#[test]
#[ignore = "needs llama-server (CADENCE_REAL_ENGINE); scripts/test.sh builds it and runs this"]
fn forced_agent_sessions_grow_their_prompt_and_hit_the_prefix_cache() {
    let dir = common::real_engine();
    let tmp = tempfile::tempdir().unwrap();
    // --jinja: the chat template takes tools, tool calls and tool messages.
    let args = [
        "-t",
        "1",
        "-np",
        "1",
        "-c",
        "4096",
        "-cb",
        "--no-webui",
        "--jinja",
    ];
    let (_server, port) = common::llama_server(&dir, &args, &tmp.path().join("server.log"));
    let url = format!("http://127.0.0.1:{port}/v1");
    let records = tmp.path().join("agent.jsonl");
    let out = common::cadence()
        .args([
            "bench",
            &url,
            "--api",
            "chat",
            "--model",
            "tiny-llama",
            "--agent",
        ])
        .args([
            "--agent-force",
            "mock",
            "--turns",
            &STEPS.to_string(),
            "--tool-time",
            "5ms",
        ])
        .args([
            "--tool-result-tokens",
            &RESULT.to_string(),
            "--max-tokens",
            &REPLY.to_string(),
        ])
        .args([
            "--input-tokens",
            "400",
            "-n",
            "2",
            "-c",
            "1",
            "--extra-body",
            r#"{"ignore_eos": true}"#,
            "--records",
        ])
        .arg(&records)
        .timeout(Duration::from_secs(600))
        .output()
        .unwrap();
    let console = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        console.contains("Sessions        2 of 2 complete"),
        "{console}"
    );
    let (late_ttft, longest) = check_grown_prompts(&records);
    let (cold_ttft, cold_tokens) = cold_prompt(&url, tmp.path(), longest);
    eprintln!(
        "last steps' TTFT {late_ttft:?} ms at up to {longest} tokens; a cold {cold_tokens} tokens: {cold_ttft} ms"
    );
    for t in late_ttft {
        assert!(
            t < cold_ttft,
            "a late step's TTFT {t} ms is not below a cold prompt's {cold_ttft} ms"
        );
    }
}

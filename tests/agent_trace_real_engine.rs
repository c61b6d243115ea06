//! `bench --agent-trace` against a real engine: llama.cpp's `llama-server` (built by
//! `scripts/real-engine.sh`, exported by `scripts/test.sh` as `CADENCE_REAL_ENGINE`)
//! with its tiny model and the model's own `tokenizer.json`. Every reply has the
//! recorded output tokens (`ignore_eos`), and every prompt the server counts is the
//! recorded input plus the chat template's tokens alone: the same for every prompt of
//! as many turns, and growing by the same amount per turn. Needs the engine:
//! ignored unless asked for (scripts/test.sh does).

mod common;

use cadence_bench::agent_trace::{self, Reuse, DEFAULT_BLOCK_SIZE};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

#[test]
#[ignore = "needs llama-server (CADENCE_REAL_ENGINE); scripts/test.sh builds it and runs this"]
fn replayed_prompts_are_the_recorded_tokens_plus_the_template() {
    let dir = common::real_engine();
    let fixture =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agent-trace/sessions.jsonl");
    let trace = agent_trace::parse(
        &std::fs::read_to_string(&fixture).unwrap(),
        None,
        DEFAULT_BLOCK_SIZE,
    )
    .unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let args = [
        "-t",
        "1",
        "-np",
        "4",
        "-c",
        "16384",
        "-cb",
        "--no-webui",
        "--jinja",
    ];
    let (_server, port) = common::llama_server(&dir, &args, &tmp.path().join("server.log"));
    let records = tmp.path().join("r.jsonl");
    common::cadence()
        .args([
            "bench",
            &format!("http://127.0.0.1:{port}/v1"),
            "--api",
            "chat",
            "--model",
            "tiny-llama",
            "--agent-trace",
        ])
        .arg(&fixture)
        .arg("--tokenizer")
        .arg(dir.join("model/hf/tokenizer.json"))
        .args(["--extra-body", r#"{"ignore_eos": true}"#])
        .args(["--max-late", "100%", "--quiet", "--records"])
        .arg(&records)
        .assert()
        .code(0);
    let recs: BTreeMap<(u64, u64), Value> = common::read_records(&records)
        .into_iter()
        .map(|r| {
            (
                (r["session"].as_u64().unwrap(), r["turn"].as_u64().unwrap()),
                r,
            )
        })
        .collect();
    // The template's tokens by the earlier turns a prompt keeps (the tiny model never
    // calls tools, so every turn is a reply and a user message).
    let mut template: BTreeMap<u64, Vec<i64>> = BTreeMap::new();
    for (k, s) in trace.iter().enumerate() {
        let mut turns = 0;
        for (i, c) in s.calls.iter().enumerate() {
            let r = &recs[&(k as u64, i as u64)];
            assert_eq!(r["outcome"], "succeeded", "{r}");
            assert_eq!(r["output_tokens"]["count"], c.output_tokens, "{r}");
            turns = match c.reuse {
                _ if i == 0 => 0,
                Reuse::Previous => turns + 1,
                // The fixture's partial reuses cut inside the first message.
                Reuse::Tokens(_) => 0,
            };
            let extra = r["input_tokens"].as_i64().unwrap() - i64::from(c.input_tokens);
            template.entry(turns).or_default().push(extra);
        }
    }
    let one = |t: u64| {
        let v = &template[&t];
        assert!(v.iter().all(|x| *x == v[0]), "turns {t}: {v:?}");
        v[0]
    };
    let (first, per_turn) = (one(0), one(1) - one(0));
    assert!(first > 0 && per_turn > 0, "{template:?}");
    for &t in template.keys() {
        assert_eq!(one(t), first + per_turn * t as i64, "{template:?}");
    }
}

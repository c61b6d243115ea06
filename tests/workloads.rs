//! Workloads end to end against the built-in simulator: synthetic prompts of exact
//! lengths, ShareGPT and JSON Lines datasets, multi-turn sessions, shared prefixes,
//! the tokenizer, and per-token ITL from every per-chunk token source.

mod common;

use common::{cadence, read_records, sharegpt_fixture, usage_error, validate};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

/// Fast simulated cadence for every request.
const FAST: [&str; 4] = ["-H", "x-cadence-ttft-ms: 5", "-H", "x-cadence-itl-ms: 3"];

/// Runs `cadence bench` on the built-in sim; returns (exit code, report, records, stderr).
fn bench(args: &[&str]) -> (Option<i32>, Value, Vec<Value>, String) {
    run_bench(args, true)
}

/// [`bench`], `--quiet` or not.
fn run_bench(args: &[&str], quiet: bool) -> (Option<i32>, Value, Vec<Value>, String) {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let recs = dir.path().join("r.jsonl");
    let out = cadence()
        .arg("bench")
        .args(FAST)
        .args(args)
        .args(quiet.then_some("--quiet"))
        .arg("--json")
        .arg(&json)
        .arg("--records")
        .arg(&recs)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    let text = std::fs::read_to_string(&json).unwrap_or_else(|_| panic!("no report: {stderr}"));
    validate(&text);
    let records = read_records(&recs);
    (
        out.status.code(),
        serde_json::from_str(&text).unwrap(),
        records,
        stderr,
    )
}

fn succeeded(recs: &[Value]) -> usize {
    recs.iter().filter(|r| r["outcome"] == "succeeded").count()
}

/// The fixture tokenizer: a byte-level BPE trained here on the shipped corpus and the
/// simulator's words (so each simulated token is one fixture token), saved as a
/// model folder.
fn fixture_tokenizer(dir: &Path) -> String {
    let mut text = cadence_bench::prompts::CORPUS.to_owned();
    for _ in 0..50 {
        text.push('\n');
        for w in cadence_sim::text::VOCAB {
            text.push(' ');
            text.push_str(w);
        }
    }
    let tk = cadence_bench::tokenizer::train_bpe(&text, 1200).unwrap();
    for w in cadence_sim::text::VOCAB {
        assert_eq!(tk.count(&format!(" {w}")), 1, "'{w}' is one token");
    }
    std::fs::write(dir.join("tokenizer.json"), tk.to_json()).unwrap();
    dir.to_str().unwrap().to_owned()
}

#[test]
fn synthetic_prompts_have_the_exact_length_the_server_counts() {
    // Without a tokenizer a length is whitespace words: what the sim counts.
    let (code, report, recs, stderr) = bench(&[
        "-n",
        "12",
        "-c",
        "4",
        "--input-tokens",
        "37",
        "--max-tokens",
        "3",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(succeeded(&recs), 12);
    for r in &recs {
        assert_eq!(r["input_tokens"], 37, "{r}");
        assert_eq!(r["output_tokens"]["count"], 3);
    }
    assert_eq!(report["levels"][0]["output_tokens"]["source"], "usage");
}

/// Six requests of drawn prompt lengths.
const SEEDED_LENGTHS: [&str; 6] = ["-n", "6", "-c", "1", "--input-tokens", "uniform:5..50"];

/// (the seed a run without `--seed` said it drew, the seed its report recorded, its
/// drawn prompt lengths in request order).
fn unseeded_run() -> (u64, u64, Vec<u64>) {
    let (_, report, recs, stderr) = run_bench(&SEEDED_LENGTHS, false);
    let said = stderr
        .lines()
        .find_map(|l| l.strip_prefix("Seed ")?.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no seed said: {stderr}"));
    (
        said,
        report["run"]["seed"].as_u64().unwrap(),
        lengths(&recs),
    )
}

/// Prompt lengths by request index.
fn lengths(recs: &[Value]) -> Vec<u64> {
    let mut v: Vec<(u64, u64)> = recs
        .iter()
        .map(|r| {
            (
                r["index"].as_u64().unwrap(),
                r["input_tokens"].as_u64().unwrap(),
            )
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, n)| n).collect()
}

#[test]
fn without_a_seed_each_run_draws_new_prompts_and_says_how_to_repeat_them() {
    let (said_a, kept_a, a) = unseeded_run();
    let (said_b, kept_b, b) = unseeded_run();
    assert_eq!(
        (said_a, said_b),
        (kept_a, kept_b),
        "said and recorded agree"
    );
    assert_ne!(said_a, said_b);
    // Six lengths drawn from 46 values: the same six by chance is ~1e-10.
    assert_ne!(a, b, "a rerun sends new prompts");
    // The seed said repeats the run's draws, and is what that run records.
    let seed = said_a.to_string();
    let (_, report, recs, _) = bench(&[&SEEDED_LENGTHS[..], &["--seed", &seed]].concat());
    assert_eq!(lengths(&recs), a);
    assert_eq!(report["run"]["seed"].as_u64(), Some(said_a));
}

#[test]
fn varying_lengths_follow_the_seed() {
    let run = |seed: &str| {
        let (_, _, recs, _) = bench(&[
            "-n",
            "10",
            "-c",
            "1",
            "--seed",
            seed,
            "--input-tokens",
            "uniform:5..50",
            "--max-tokens",
            "uniform:1..9",
        ]);
        let mut v: Vec<(u64, u64, u64)> = recs
            .iter()
            .map(|r| {
                (
                    r["index"].as_u64().unwrap(),
                    r["input_tokens"].as_u64().unwrap(),
                    r["output_tokens"]["count"].as_u64().unwrap(),
                )
            })
            .collect();
        v.sort();
        v
    };
    let a = run("3");
    assert!(a
        .iter()
        .all(|&(_, i, o)| (5..=50).contains(&i) && (1..=9).contains(&o)));
    assert_eq!(a, run("3"));
    assert_ne!(a, run("4"));
}

#[test]
fn sharegpt_dataset_runs_with_recorded_reply_lengths() {
    let dir = tempfile::tempdir().unwrap();
    let path = sharegpt_fixture(dir.path());
    let (code, _, recs, stderr) = bench(&[
        "-n",
        "6",
        "-c",
        "2",
        "--dataset",
        path.to_str().unwrap(),
        "--max-prompt-tokens",
        "5",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(succeeded(&recs), 6);
    let mut seen = BTreeMap::new();
    for r in &recs {
        let id = r["prompt_id"].as_str().unwrap().to_owned();
        // x: 4 prompt words, a 4-word reply; y: 1 and 1. z is filtered out (10 words).
        let expect = match id.as_str() {
            "x" => (4, 4),
            "y" => (1, 1),
            other => panic!("unexpected prompt {other}"),
        };
        assert_eq!(
            (
                r["input_tokens"].as_u64().unwrap(),
                r["output_tokens"]["count"].as_u64().unwrap()
            ),
            expect
        );
        *seen.entry(id).or_insert(0) += 1;
    }
    assert_eq!(seen.len(), 2);
}

#[test]
fn jsonl_dataset_sends_prompts_and_messages() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("d.jsonl");
    std::fs::write(
        &path,
        concat!(
            r#"{"id": "p", "prompt": "one two three", "max_tokens": 2}"#,
            "\n",
            r#"{"id": "m", "messages": [{"role": "system", "content": "be terse"}, {"role": "user", "content": "four five"}], "max_tokens": 5}"#,
            "\n"
        ),
    )
    .unwrap();
    let (code, _, recs, stderr) =
        bench(&["-n", "4", "-c", "1", "--dataset", path.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(succeeded(&recs), 4);
    for r in &recs {
        let (i, o) = match r["prompt_id"].as_str().unwrap() {
            "p" => (3, 2),
            "m" => (4, 5),
            other => panic!("{other}"),
        };
        assert_eq!(r["input_tokens"], i, "{r}");
        assert_eq!(r["output_tokens"]["count"], o, "{r}");
    }
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(&bad, "{\"prompt\": \"ok\"}\n{\"nope\": 1}\n").unwrap();
    usage_error(
        &["bench", "-n", "1", "--dataset", bad.to_str().unwrap()],
        "line 2: expected 'prompt', 'messages' or 'turns'",
    );
}

#[test]
fn multi_turn_sessions_carry_the_live_history_and_report_by_turn() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.json");
    std::fs::write(
        &path,
        r#"[{"id": "s", "conversations": [
              {"from": "human", "value": "first question here"},
              {"from": "gpt", "value": "a b c d e"},
              {"from": "human", "value": "and then"},
              {"from": "gpt", "value": "x y"},
              {"from": "human", "value": "last"},
              {"from": "gpt", "value": "z"}]}]"#,
    )
    .unwrap();
    let (code, report, recs, stderr) = bench(&[
        "-n",
        "3",
        "-c",
        "3",
        "--dataset",
        path.to_str().unwrap(),
        "--multi-turn",
        "--think-time",
        "20ms",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(recs.len(), 9, "3 sessions of 3 turns");
    assert_eq!(succeeded(&recs), 9);
    let level = &report["levels"][0];
    assert_eq!(level["requests"]["intended"], 9);
    let mut by_session: BTreeMap<u64, Vec<&Value>> = BTreeMap::new();
    for r in &recs {
        by_session
            .entry(r["session"].as_u64().unwrap())
            .or_default()
            .push(r);
    }
    assert_eq!(by_session.len(), 3);
    for turns in by_session.values_mut() {
        turns.sort_by_key(|r| r["turn"].as_u64());
        // The sim counts the words of every message: the history holds the user turns
        // and the sim's own replies (5, then 2 words, the recorded reply lengths).
        let inputs: Vec<u64> = turns
            .iter()
            .map(|r| r["input_tokens"].as_u64().unwrap())
            .collect();
        assert_eq!(inputs, vec![3, 3 + 5 + 2, 3 + 5 + 2 + 2 + 1]);
        let outputs: Vec<u64> = turns
            .iter()
            .map(|r| r["output_tokens"]["count"].as_u64().unwrap())
            .collect();
        assert_eq!(outputs, vec![5, 2, 1]);
        // Think time: a turn is sent at least 20 ms after the previous one ended.
        for w in turns.windows(2) {
            let gap = w[1]["sent_ns"].as_u64().unwrap() - w[0]["end_ns"].as_u64().unwrap();
            assert!(gap >= 20_000_000, "think time kept: {gap} ns");
        }
    }
    let by_turn = level["by_turn"].as_array().unwrap();
    assert_eq!(by_turn.len(), 3);
    assert!(by_turn
        .iter()
        .all(|t| t["requests"] == 3 && t["ttft"]["count"] == 3));
}

#[test]
fn shared_prefix_groups_are_recorded_and_counted() {
    let (code, _, recs, stderr) = bench(&[
        "-n",
        "9",
        "-c",
        "3",
        "--input-tokens",
        "10",
        "--prefix-tokens",
        "20",
        "--prefix-groups",
        "3",
        "--max-tokens",
        "2",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    let mut groups = BTreeMap::new();
    for r in &recs {
        assert_eq!(r["input_tokens"], 30, "prefix + prompt: {r}");
        *groups
            .entry(r["prefix_group"].as_u64().unwrap())
            .or_insert(0) += 1;
    }
    assert_eq!(groups, BTreeMap::from([(0, 3), (1, 3), (2, 3)]));
}

/// Per-token ITL is the chunk ITL split over the chunk's tokens. (`<=`: chunks that
/// came in one socket read share its kernel stamp, so on a busy machine the p50 gap can
/// be exactly 0, and half of 0 is 0.)
fn assert_half(level: &Value) {
    let itl = level["itl"]["mean_ms"].as_f64().unwrap();
    let per_token = level["itl_per_token"]["mean_ms"].as_f64().unwrap();
    assert!(
        (per_token * 2.0 - itl).abs() <= 1e-9 * itl,
        "{per_token} vs {itl}"
    );
    let p50 = level["itl"]["p50_ms"].as_f64().unwrap();
    let p50_tok = level["itl_per_token"]["p50_ms"].as_f64().unwrap();
    assert!(
        (p50_tok * 2.0 - p50).abs() <= 1e-9 * p50,
        "{p50_tok} vs {p50}"
    );
    assert_eq!(level["tokens_per_chunk"]["mean"], 2.0);
}

#[test]
fn two_tokens_per_chunk_halve_per_token_itl_from_usage_token_ids_and_tokenizer() {
    let burst = [
        "-H",
        "x-cadence-burst: 2",
        "-n",
        "4",
        "-c",
        "2",
        "--max-tokens",
        "16",
    ];
    // Per-chunk usage (continuous_usage_stats).
    let usage = r#"{"stream_options":{"include_usage":true,"continuous_usage_stats":true}}"#;
    let (_, report, recs, _) = bench(&[&burst[..], &["--extra-body", usage]].concat());
    assert_half(&report["levels"][0]);
    assert!(recs.iter().all(|r| r["chunk_tokens_source"] == "usage"));
    // Token ids in each chunk (return_token_ids).
    let ids = r#"{"return_token_ids":true}"#;
    let (_, report, recs, _) = bench(&[&burst[..], &["--extra-body", ids]].concat());
    assert_half(&report["levels"][0]);
    assert!(recs
        .iter()
        .all(|r| r["chunk_tokens_source"] == "token_ids" && r["token_sources"]["token_ids"] == 16));
    // Neither: the tokenizer attributes the text's tokens to the chunks.
    let dir = tempfile::tempdir().unwrap();
    let tk = fixture_tokenizer(dir.path());
    let (_, report, recs, _) = bench(&[&burst[..], &["--tokenizer", &tk]].concat());
    assert_half(&report["levels"][0]);
    assert!(recs.iter().all(|r| r["chunk_tokens_source"] == "tokenizer"));
}

#[test]
fn the_report_names_its_token_source_and_compares_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let tk = fixture_tokenizer(dir.path());
    // Usage present: usage is used; the tokenizer and the chunk count are compared.
    let (_, report, recs, _) = bench(&["-n", "4", "--max-tokens", "12", "--tokenizer", &tk]);
    let level = &report["levels"][0];
    assert_eq!(level["output_tokens"]["source"], "usage");
    let agree = level["token_agreement"].as_array().unwrap();
    let tok = agree.iter().find(|a| a["source"] == "tokenizer").unwrap();
    assert_eq!(
        (tok["requests"].as_u64(), tok["diff_pct"].as_f64()),
        (Some(4), Some(0.0))
    );
    assert!(recs.iter().all(|r| r["token_sources"]["tokenizer"] == 12));
    // No usage: the tokenizer's count is used, and the report says so.
    let no_usage = r#"{"stream_options":null}"#;
    let (_, report, recs, _) = bench(&[
        "-n",
        "4",
        "--max-tokens",
        "12",
        "--tokenizer",
        &tk,
        "--extra-body",
        no_usage,
    ]);
    assert_eq!(report["levels"][0]["output_tokens"]["source"], "tokenizer");
    assert!(recs
        .iter()
        .all(|r| r["output_tokens"] == serde_json::json!({"count": 12, "source": "tokenizer"})));
    // Nothing but chunks: named as such.
    let (_, report, _, _) = bench(&["-n", "2", "--max-tokens", "5", "--extra-body", no_usage]);
    assert_eq!(report["levels"][0]["output_tokens"]["source"], "chunks");
}

#[test]
fn exact_lengths_with_a_tokenizer_match_its_count() {
    let dir = tempfile::tempdir().unwrap();
    let tk_dir = fixture_tokenizer(dir.path());
    let tk = cadence_bench::tokenizer::Tokenizer::load(&tk_dir).unwrap();
    // The sim counts words, not this tokenizer's tokens: the generator the CLI uses
    // is checked directly, then a run with the tokenizer goes through.
    let g = cadence_bench::prompts::PromptGen::builtin(cadence_bench::prompts::Counter::Tokenizer(
        tk.clone(),
    ))
    .unwrap();
    let mut rng = <rand::rngs::SmallRng as rand::SeedableRng>::seed_from_u64(1);
    for n in [1, 64, 777] {
        assert_eq!(tk.count(&g.prompt(n, &mut rng, false)), n);
    }
    let (code, _, recs, stderr) = bench(&[
        "-n",
        "3",
        "--input-tokens",
        "64",
        "--tokenizer",
        &tk_dir,
        "--max-tokens",
        "2",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(succeeded(&recs), 3);
}

#[test]
fn a_hub_id_without_network_is_a_clear_usage_error() {
    usage_error(
        &["bench", "-n", "1", "--tokenizer", "meta-llama/Llama-3.1-8B"],
        "does not download tokenizers",
    );
    usage_error(
        &[
            "bench",
            "-n",
            "1",
            "--input-tokens",
            "5",
            "--corpus",
            "/no/such/corpus.txt",
        ],
        "cannot read the corpus",
    );
    usage_error(
        &["bench", "-n", "1", "--input-tokens", "normal:5"],
        "normal:MEAN,STDDEV",
    );
}

#[test]
fn input_tokens_come_from_the_workload_when_the_server_sends_no_usage() {
    let no_usage = ["-H", "x-cadence-fault: no_usage"];
    let base = ["-n", "4", "--input-tokens", "37", "--max-tokens", "3"];
    // The server's usage: named usage.
    let (code, _, recs, stderr) = bench(&base);
    assert_eq!(code, Some(0), "{stderr}");
    for r in &recs {
        assert_eq!(
            (&r["input_tokens"], &r["input_tokens_source"]),
            (&serde_json::json!(37), &serde_json::json!("usage")),
            "{r}"
        );
    }
    // No usage, no tokenizer: the prompt's whitespace words.
    let args: Vec<&str> = base.iter().chain(&no_usage).copied().collect();
    let (code, report, recs, stderr) = bench(&args);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(succeeded(&recs), 4);
    assert_eq!(
        report["levels"][0]["output_tokens"]["source"], "chunks",
        "usage was off"
    );
    for r in &recs {
        assert!(r["token_sources"]["usage"].is_null(), "usage was off: {r}");
        assert_eq!(
            (&r["input_tokens"], &r["input_tokens_source"]),
            (&serde_json::json!(37), &serde_json::json!("words")),
            "{r}"
        );
    }
    // No usage, a tokenizer: its exact count of the prompt sent.
    let dir = tempfile::tempdir().unwrap();
    let tk = fixture_tokenizer(dir.path());
    let args: Vec<&str> = [
        "-n",
        "3",
        "--input-tokens",
        "50",
        "--max-tokens",
        "3",
        "--tokenizer",
        &tk,
    ]
    .iter()
    .chain(&no_usage)
    .copied()
    .collect();
    let (code, _, recs, stderr) = bench(&args);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(succeeded(&recs), 3);
    for r in &recs {
        assert_eq!(
            r["output_tokens"]["source"], "tokenizer",
            "usage was off: {r}"
        );
        assert_eq!(
            (&r["input_tokens"], &r["input_tokens_source"]),
            (&serde_json::json!(50), &serde_json::json!("tokenizer")),
            "{r}"
        );
    }
}

#[test]
fn trace_lengths_become_exact_prompts_by_the_tokenizer() {
    // A Mooncake-style trace gives only lengths; with --tokenizer each prompt must have
    // exactly that many of its tokens (checked via the count of the prompt sent, which
    // the record carries when the server sends no usage).
    let dir = tempfile::tempdir().unwrap();
    let tk = fixture_tokenizer(dir.path());
    let trace = dir.path().join("trace.jsonl");
    std::fs::write(
        &trace,
        "{\"timestamp\": 0, \"input_length\": 40, \"output_length\": 2}\n\
         {\"timestamp\": 10, \"input_length\": 123, \"output_length\": 2}\n\
         {\"timestamp\": 20, \"input_length\": 7, \"output_length\": 2}\n",
    )
    .unwrap();
    let (code, _, mut recs, stderr) = bench(&[
        "--trace",
        trace.to_str().unwrap(),
        "--tokenizer",
        &tk,
        "--max-late",
        "100%",
        "-H",
        "x-cadence-fault: no_usage",
    ]);
    assert_eq!(code, Some(0), "{stderr}");
    recs.sort_by_key(|r| r["index"].as_u64());
    let got: Vec<(u64, &str)> = recs
        .iter()
        .map(|r| {
            (
                r["input_tokens"].as_u64().unwrap(),
                r["input_tokens_source"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        got,
        [(40, "tokenizer"), (123, "tokenizer"), (7, "tokenizer")]
    );
}

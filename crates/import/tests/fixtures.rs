//! Each tool's own headline figures, rebuilt by Cadence from the per-request values of
//! the tool's saved output (tests/fixtures/import/), match what the tool saved: the
//! real tools' files (AIPerf, GuideLLM) and the hand-written ones (vLLM, LLMPerf).

use cadence_import::{import, Lack, Tool};
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/import")
        .join(name)
}

/// Every figure has a rebuild within `tol` (relative, or absolute below 1e-9) of the
/// printed value, except those named in `unrebuilt`; returns how many were checked.
fn check(name: &str, tool: Tool, tol: f64, unrebuilt: &[&str]) -> usize {
    let imp = import(&fixture(name), None).unwrap();
    assert_eq!(imp.tool, tool, "{name} detected as {}", imp.tool);
    assert!(!imp.figures.is_empty(), "{name}: no figures read");
    let mut bad = Vec::new();
    for f in &imp.figures {
        match (f.printed, f.rebuilt) {
            (Some(p), Some(r)) => {
                let ok = (r - p).abs() <= tol * p.abs().max(1e-9) || (r - p).abs() < 1e-9;
                if !ok {
                    bad.push(format!("{}: printed {p}, rebuilt {r}", f.name));
                }
            }
            (Some(_), None) if unrebuilt.contains(&f.name.as_str()) => {}
            _ => bad.push(format!("{}: {:?} / {:?}", f.name, f.printed, f.rebuilt)),
        }
    }
    assert!(bad.is_empty(), "{name}:\n{}", bad.join("\n"));
    imp.figures.len()
}

#[test]
fn aiperf_figures_rebuild_from_its_records() {
    let n = check("aiperf/profile_export.jsonl", Tool::Aiperf, 1e-6, &[]);
    assert!(n >= 25, "{n} figures");
}

#[test]
fn guidellm_figures_rebuild_from_its_requests() {
    let n = check("guidellm-benchmarks.json", Tool::Guidellm, 1e-6, &[]);
    assert!(n >= 20, "{n} figures");
}

#[test]
fn vllm_figures_rebuild_from_its_per_request_lists() {
    let n = check("vllm-detailed.json", Tool::Vllm, 1e-9, &[]);
    assert!(n >= 20, "{n} figures");
    let imp = import(&fixture("vllm-detailed.json"), None).unwrap();
    assert!(
        imp.lacks.iter().all(|l| *l == Lack::TokenSourceUnsaid),
        "{:?}",
        imp.lacks
    );
}

#[test]
fn llmperf_figures_rebuild_except_what_needs_send_times() {
    let n = check(
        "llmperf/tiny_32_24_individual_responses.json",
        Tool::Llmperf,
        1e-9,
        &["results_mean_output_throughput_token_per_s"],
    );
    assert!(n >= 20, "{n} figures");
}

#[test]
fn imports_keep_the_model_and_the_url_their_files_name() {
    let said = |name: &str| {
        let imp = import(&fixture(name), None).unwrap();
        (imp.model, imp.target)
    };
    let s = |v: &str| Some(v.to_string());
    // AIPerf's summary beside its records: input_config's model and URL.
    assert_eq!(
        said("aiperf/profile_export.jsonl"),
        (s("tiny"), s("http://127.0.0.1:18778"))
    );
    // GuideLLM's backend: the target with its request path.
    let model = s("/root/.cache/cadence-real-engine/model/hf");
    assert_eq!(
        said("guidellm-benchmarks.json"),
        (model, s("http://127.0.0.1:18778/v1/chat/completions"))
    );
    // LLMPerf's summary names the model; vLLM's file the model and its backend, neither
    // the URL.
    assert_eq!(
        said("llmperf/tiny_32_24_individual_responses.json"),
        (s("tiny"), None)
    );
    let backend = s("vllm bench serve --backend openai-chat");
    assert_eq!(said("vllm-detailed.json"), (s("tiny"), backend));
}

#[test]
fn imports_name_the_api_their_files_name_in_cadences_words() {
    let api = |name: &str| import(&fixture(name), None).unwrap().api;
    let chat = Some("chat".to_string());
    // AIPerf's endpoint type, GuideLLM's request path, vLLM's backend (openai-chat).
    assert_eq!(api("aiperf/profile_export.jsonl"), chat);
    assert_eq!(api("guidellm-benchmarks.json"), chat);
    assert_eq!(api("vllm-detailed.json"), chat);
    // LLMPerf's file does not say.
    assert_eq!(api("llmperf/tiny_32_24_individual_responses.json"), None);
    for (kind, want) in [
        ("/v1/completions", Some("completions")),
        ("openai", Some("completions")),
        ("responses", Some("responses")),
        ("embeddings", None),
    ] {
        assert_eq!(cadence_import::api_named(kind).as_deref(), want, "{kind}");
    }
}

#[test]
fn a_file_without_chunk_times_names_what_it_cannot_give() {
    let imp = import(
        &fixture("llmperf/tiny_32_24_individual_responses.json"),
        None,
    )
    .unwrap();
    assert!(imp.lacks(Lack::ChunkTimes) && imp.lacks(Lack::SendTimes));
    let s = imp.section();
    for what in [
        "ITL (gaps between chunks",
        "stalls",
        "throughput over Cadence's window",
    ] {
        assert!(
            s.not_rebuilt.iter().any(|n| n.starts_with(what)),
            "{what} in {:?}",
            s.not_rebuilt
        );
    }
    // No record carries a chunk between the first and the last: nothing is made up.
    assert!(imp.records.iter().all(|r| r.chunks.len() <= 2));
    // The failed response keeps no token count (LLMPerf saved 0 for it).
    let failed: Vec<_> = imp.records.iter().filter(|r| r.error.is_some()).collect();
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0].output_tokens, None);
}

/// Cuts and corrupts of every fixture: each is refused with the file named, or read
/// without panicking; never a panic.
#[test]
fn truncated_and_hostile_files_give_clear_errors() {
    let dir = std::env::temp_dir().join(format!("cadence-import-hostile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, tool) in [
        ("vllm-detailed.json", Tool::Vllm),
        ("aiperf/profile_export.jsonl", Tool::Aiperf),
        ("guidellm-benchmarks.json", Tool::Guidellm),
        (
            "llmperf/tiny_32_24_individual_responses.json",
            Tool::Llmperf,
        ),
    ] {
        let text = std::fs::read(fixture(name)).unwrap();
        let p = dir.join("cut");
        for cut in [1, 7, text.len() / 3, text.len() / 2, text.len() - 2] {
            std::fs::write(&p, &text[..cut]).unwrap();
            match import(&p, Some(tool)) {
                Err(e) => assert!(e.to_string().contains("cut"), "{name} at {cut}: {e}"),
                // A JSON Lines file cut at a line's end is a shorter file.
                Ok(imp) => assert!(tool == Tool::Aiperf && !imp.records.is_empty()),
            }
        }
        for junk in [
            &b"\xff\xfe\x00garbage"[..],
            b"",
            b"null",
            b"[1, 2, 3]",
            b"{\"ttfts\": [1e400], \"itls\": [[]]}",
            b"{\"benchmarks\": [{\"requests\": {\"successful\": [{\"info\": {\"timings\": {\"request_start\": \"x\"}}}]}}]}",
            b"[{\"ttft_s\": -1}]",
            b"{\"metadata\": {\"request_start_ns\": 18446744073709551615}, \"metrics\": {\"inter_chunk_latency\": {\"value\": [1e308, 1e308]}}, \"error\": null}",
        ] {
            std::fs::write(&p, junk).unwrap();
            if let Err(e) = import(&p, Some(tool)) {
                assert!(e.to_string().starts_with(&p.display().to_string()), "{e}");
            }
        }
        // Times beyond any request (a gap of 1e308 s) are refused, not bucketed, and
        // the value is written short.
        if tool == Tool::Aiperf {
            std::fs::write(&p, b"{\"metadata\": {\"request_start_ns\": 5}, \"metrics\": {\"time_to_first_token\": {\"value\": 1, \"unit\": \"ms\"}, \"inter_chunk_latency\": {\"value\": [1e308, 1e308], \"unit\": \"ms\"}}, \"error\": null}").unwrap();
            let e = import(&p, Some(tool)).unwrap_err();
            assert!(
                e.msg
                    .contains("e305 s: a time within a request is from 0 to 86400 s")
                    && !e.msg.contains("0000000000"),
                "{e}"
            );
        }
    }
    std::fs::remove_dir_all(&dir).ok();
}

/// inference-perf's file written from `cadence-run.jsonl`: the import gives back the
/// run's own chunk times (within the rounding of seconds on a monotonic clock).
#[test]
fn inference_perf_chunk_times_come_back_as_they_were_measured() {
    let imp = import(&fixture("inference-perf-per-request.json"), None).unwrap();
    assert_eq!(imp.tool, Tool::InferencePerf);
    assert!(!imp.lacks(Lack::ChunkTimes), "{:?}", imp.lacks);
    let text = std::fs::read_to_string(fixture("cadence-run.jsonl")).unwrap();
    let mut run: Vec<serde_json::Value> = text
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v.get("index").is_some())
        .collect();
    run.sort_by_key(|v| v["sent_ns"].as_u64().unwrap());
    let ok: Vec<_> = imp.records.iter().filter(|r| r.error.is_none()).collect();
    assert_eq!(ok.len(), run.len());
    let origin = run[0]["sent_ns"].as_u64().unwrap();
    for (r, v) in ok.iter().zip(&run) {
        let chunks = v["chunks"].as_array().unwrap();
        assert_eq!(r.chunks.len(), chunks.len());
        for (c, w) in r.chunks.iter().zip(chunks) {
            let want = w[0].as_u64().unwrap() - origin;
            assert!(c.t_ns().abs_diff(want) <= 1_000, "{} vs {want}", c.t_ns());
        }
    }
    let failed: Vec<_> = imp.records.iter().filter(|r| r.error.is_some()).collect();
    assert_eq!(failed.len(), 1);
    assert!(failed[0].chunks.is_empty() && failed[0].output_tokens.is_none());
}

#[test]
fn genai_bench_figures_rebuild_from_its_request_metrics() {
    let n = check("genai-bench-run.json", Tool::GenaiBench, 1e-9, &[]);
    assert!(n >= 20, "{n} figures");
}

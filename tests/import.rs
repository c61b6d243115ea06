//! Other tools' saved outputs through `cadence report` and `cadence compare`: every
//! format of the report, the figures an import cannot give left blank and named, the
//! llm-d benchmark report export checked against its published schema, and one row
//! per tool in a comparison with the definitions named. The files are
//! tests/fixtures/import/ (see its README for which came from the real tools).

mod common;

use common::{cadence, usage_error, validate_report};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> String {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/import")
        .join(name)
        .display()
        .to_string()
}

fn read_json(p: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

/// `cadence report FILE` in every format; returns the console text and the JSON.
fn report_all_formats(file: &str, dir: &Path) -> (String, Value) {
    let json = dir.join("r.json");
    let md = dir.join("r.md");
    let html = dir.join("r.html");
    let csv = format!("{}/csv/", dir.display());
    let out = cadence()
        .args(["report", file, "--json"])
        .arg(&json)
        .arg("--markdown")
        .arg(&md)
        .arg("--html")
        .arg(&html)
        .arg("--csv")
        .arg(&csv)
        .output()
        .unwrap();
    // 3: the run breached Cadence's default error-rate ceiling (LLMPerf's fixture
    // holds one failure in 13), which a report of any run judges.
    assert!(matches!(out.status.code(), Some(0 | 3)), "{out:?}");
    let out = out.stdout;
    let v = read_json(&json);
    validate_report(&v);
    let md = std::fs::read_to_string(&md).unwrap();
    let html = std::fs::read_to_string(&html).unwrap();
    assert!(md.contains("**Imported from"), "{md}");
    assert!(html.contains("<h2>Imported from"));
    assert!(std::fs::read_dir(&csv).unwrap().count() > 0);
    (String::from_utf8(out).unwrap(), v)
}

#[test]
fn every_import_gets_every_format_with_the_tools_figures_beside_the_rebuild() {
    let dir = tempfile::tempdir().unwrap();
    for (file, tool) in [
        ("vllm-detailed.json", "vllm"),
        ("aiperf/profile_export.jsonl", "aiperf"),
        ("guidellm-benchmarks.json", "guidellm"),
        ("llmperf/tiny_32_24_individual_responses.json", "llmperf"),
        ("inference-perf-per-request.json", "inference-perf"),
        ("genai-bench-run.json", "genai-bench"),
    ] {
        let (console, v) = report_all_formats(&fixture(file), dir.path());
        let imp = &v["imported"];
        assert_eq!(imp["tool"], tool, "{file}");
        assert!(console.contains("Imported from"), "{console}");
        // Each saved figure has its rebuild within rounding (the throughput LLMPerf
        // measured over a window its file does not hold is the one left out).
        for f in imp["figures"].as_array().unwrap() {
            let (p, r) = (f["printed"].as_f64(), f["rebuilt"].as_f64());
            match (p, r) {
                (Some(p), Some(r)) => {
                    assert!((r - p).abs() <= 1e-6 * p.abs().max(1e-9), "{file}: {f}")
                }
                _ => assert_eq!(
                    f["name"], "results_mean_output_throughput_token_per_s",
                    "{f}"
                ),
            }
        }
        // The level's conventions table holds the tool's own definition (Cadence does
        // not re-express inference-perf's or genai-bench's).
        let level = &v["levels"][0];
        assert!(
            tool == "inference-perf"
                || tool == "genai-bench"
                || level["conventions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|c| c["convention"] == tool)
        );
    }
}

#[test]
fn a_file_without_chunk_times_names_the_figures_it_cannot_give_and_prints_no_number() {
    let dir = tempfile::tempdir().unwrap();
    let (console, v) = report_all_formats(
        &fixture("llmperf/tiny_32_24_individual_responses.json"),
        dir.path(),
    );
    let level = &v["levels"][0];
    for blank in ["itl", "itl_per_token", "tokens_per_chunk"] {
        assert!(level[blank].is_null(), "{blank}: {}", level[blank]);
    }
    // No send times either: no throughput over a window the file does not hold.
    assert!(level["throughput"]["output_tokens_per_s"].is_null());
    assert!(level["throughput"]["window_s"].is_null());
    let cadence_view = level["conventions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["convention"] == "cadence")
        .unwrap();
    assert!(cadence_view["itl"].is_null());
    let not_rebuilt: Vec<&str> = v["imported"]["not_rebuilt"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        not_rebuilt.iter().any(|n| n.starts_with("ITL (gaps")),
        "{not_rebuilt:?}"
    );
    assert!(not_rebuilt.iter().any(|n| n.starts_with("stalls")));
    // The console prints a dash, not a number, where the figure would be.
    let itl = console
        .lines()
        .find(|l| l.starts_with("ITL   "))
        .expect("an ITL row");
    assert!(!itl.chars().any(|c| c.is_ascii_digit()), "{itl}");
    let stalls = console.lines().find(|l| l.starts_with("Stalls")).unwrap();
    assert!(
        stalls.contains('–') && !stalls.contains("no wait over"),
        "{stalls}"
    );
    assert!(
        console.contains("not rebuilt  ITL (gaps between chunks"),
        "{console}"
    );
}

#[test]
fn the_llmd_benchmark_export_matches_the_published_schema() {
    let schema: Value = serde_json::from_str(include_str!(
        "../schema/llmd-benchmark-report-v0.2.1.schema.json"
    ))
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let dir = tempfile::tempdir().unwrap();
    for file in [
        "cadence-run.jsonl",
        "llmperf/tiny_32_24_individual_responses.json",
        "guidellm-benchmarks.json",
    ] {
        let out: PathBuf = dir.path().join("llmd.json");
        let json = dir.path().join("r.json");
        let status = cadence()
            .args(["report", &fixture(file), "--llmd-benchmark"])
            .arg(&out)
            .arg("--json")
            .arg(&json)
            .output()
            .unwrap()
            .status;
        assert!(matches!(status.code(), Some(0 | 3)), "{file}: {status}");
        let v = read_json(&out);
        let errors: Vec<String> = validator
            .iter_errors(&v)
            .map(|e| format!("{e} at {}", e.instance_path))
            .collect();
        assert!(errors.is_empty(), "{file}: {errors:#?}\n{v:#}");
        assert_eq!(v["version"], "0.2.1");
        let report = read_json(&json);
        let level = &report["levels"][0];
        let agg = &v["results"]["request_performance"]["aggregate"];
        assert_eq!(agg["requests"]["total"], level["requests"]["sent"]);
        assert_eq!(
            agg["latency"]["time_to_first_token"]["mean"],
            level["ttft"]["mean_ms"]
        );
        // A figure the run cannot give is absent, not zero.
        match level["itl"]["mean_ms"].as_f64() {
            Some(m) => assert_eq!(agg["latency"]["inter_token_latency"]["mean"], m),
            None => assert!(
                agg["latency"].get("inter_token_latency").is_none(),
                "{file}"
            ),
        }
    }
}

#[test]
fn compare_puts_each_tool_in_a_row_and_names_where_definitions_differ() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("c.json");
    let out = cadence()
        .args([
            "compare",
            &fixture("cadence-run.jsonl"),
            &fixture("aiperf/profile_export.jsonl"),
            "--json",
        ])
        .arg(&json)
        .assert()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("Across tools"), "{text}");
    let c = read_json(&json);
    let tools = c["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 2);
    assert_eq!(tools[0]["tool"], "cadence");
    assert!(tools[1]["tool"].as_str().unwrap().starts_with("aiperf"));
    // AIPerf's own ITL (per request, over its tokenizer's count) is what it saved.
    assert!(tools[1]["saved_itl_p50"].as_f64().unwrap() > 0.0);
    let notes: Vec<&str> = c["notes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n.as_str().unwrap())
        .collect();
    assert!(
        notes.iter().any(|n| n.contains("defines ITL as")),
        "{notes:?}"
    );
    // The same workload against the same simulator: the pooled ITL Cadence rebuilds
    // from AIPerf's chunk times agrees with Cadence's own run within run-to-run noise.
    let (a, b) = (
        tools[0]["itl_p50"].as_f64().unwrap(),
        tools[1]["itl_p50"].as_f64().unwrap(),
    );
    assert!((b / a - 1.0).abs() < 0.05, "pooled ITL p50 {a} vs {b}");
    // AIPerf's summary names its model and URL: the model is the same; the URL is the
    // simulator's other port (the fixtures ran against two), and the tool differs.
    let diffs: Vec<(&str, &str, &str)> = c["differences"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"] == "target")
        .map(|d| {
            let s = |k: &str| d[k].as_str().unwrap();
            (s("what"), s("a"), s("b"))
        })
        .collect();
    assert_eq!(
        diffs,
        [
            (
                "URL",
                "http://127.0.0.1:18777/v1/chat/completions",
                "http://127.0.0.1:18778"
            ),
            (
                "tool",
                concat!("cadence ", env!("CARGO_PKG_VERSION")),
                "aiperf 0.13.0"
            ),
        ]
    );
}

#[test]
fn compare_of_a_cadence_run_and_an_aiperf_run_of_one_endpoint_claims_one_target() {
    // The Cadence fixture moved to the port AIPerf measured: its URL is under AIPerf's
    // base URL, and the model is the one AIPerf's summary names.
    let dir = tempfile::tempdir().unwrap();
    let cadence_run = dir.path().join("cadence-run.jsonl");
    let text = std::fs::read_to_string(fixture("cadence-run.jsonl")).unwrap();
    std::fs::write(&cadence_run, text.replace(":18777/", ":18778/")).unwrap();
    let json = dir.path().join("c.json");
    cadence()
        .arg("compare")
        .arg(&cadence_run)
        .arg(fixture("aiperf/profile_export.jsonl"))
        .arg("--json")
        .arg(&json)
        .assert()
        .code(0);
    let c = read_json(&json);
    let target: Vec<&str> = c["differences"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| d["kind"] == "target")
        .map(|d| d["what"].as_str().unwrap())
        .collect();
    assert_eq!(target, ["tool"], "{c:#}");
}

#[test]
fn from_overrides_detection_and_bad_files_are_usage_errors() {
    usage_error(
        &[
            "report",
            &fixture("vllm-detailed.json"),
            "--from",
            "llmperf",
        ],
        "expected a list of responses",
    );
    usage_error(
        &["report", &fixture("vllm-detailed.json"), "--from", "nope"],
        "unknown tool",
    );
    let dir = tempfile::tempdir().unwrap();
    let cut = dir.path().join("cut.json");
    let text = std::fs::read(fixture("vllm-detailed.json")).unwrap();
    std::fs::write(&cut, &text[..text.len() / 2]).unwrap();
    usage_error(
        &["report", cut.to_str().unwrap(), "--from", "vllm"],
        "cut short",
    );
}

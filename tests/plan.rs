//! `cadence plan` and `cadence sim --preset` through the real binary: the planned
//! report is the same report (schema-valid, one level per load), presets and TOML
//! engines load or fail clearly, and an engine sim streams multi-token chunks.

mod common;

use common::{cadence, sharegpt_fixture, usage_error, validate};
use predicates::prelude::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::time::Duration;

fn plan_json(args: &[&str]) -> serde_json::Value {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("plan.json");
    cadence()
        .arg("plan")
        .args(args)
        .arg("--json")
        .arg(&json)
        .assert()
        .code(0)
        .stdout(predicate::str::contains("Summary by level").or(predicate::str::contains("TTFT")));
    let text = std::fs::read_to_string(&json).unwrap();
    validate(&text);
    serde_json::from_str(&text).unwrap()
}

fn p50(level: &serde_json::Value, metric: &str) -> f64 {
    level[metric]["p50_ms"].as_f64().unwrap()
}

#[test]
fn plan_reports_each_concurrency_level_like_a_run() {
    let v = plan_json(&[
        "--preset",
        "llama-3.1-8b@h100-fp8",
        "-c",
        "1,64",
        "-n",
        "200",
        "--input-tokens",
        "1000",
        "--max-tokens",
        "100",
    ]);
    assert_eq!(v["run"]["mode"], "closed_loop");
    assert_eq!(v["run"]["model"], "llama-3.1-8b@h100-fp8");
    let levels = v["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 2);
    assert_eq!(levels[1]["concurrency"], 64);
    for l in levels {
        assert_eq!(l["requests"]["succeeded"], 200);
        assert_eq!(l["output_tokens"]["total"], 200 * 100);
    }
    assert!(p50(&levels[1], "itl") > p50(&levels[0], "itl"));
    assert!(p50(&levels[1], "ttft") > p50(&levels[0], "ttft"));
}

/// A planned closed-loop level has a plateau as a run's (the model's clients ramp up
/// and drain too); `--plateau` sets its share, `0` turns it off.
#[test]
fn plan_reports_each_closed_loop_levels_plateau_at_the_share_asked() {
    let args = [
        "--preset",
        "llama-3.1-8b@h100-fp8",
        "-c",
        "8",
        "-n",
        "64",
        "--input-tokens",
        "200",
        "--max-tokens",
        "50",
    ];
    let with = |extra: &[&str]| plan_json(&[&args[..], extra].concat());
    let v = with(&[]);
    let p = &v["levels"][0]["plateau"];
    assert_eq!(
        (&p["share"], &p["min_in_flight"]),
        (&0.9.into(), &8.into()),
        "{p}"
    );
    let inside = p["window"]["requests"].as_u64().unwrap();
    // The drain's last requests, sent while others ended, lie outside it.
    assert!((1..64).contains(&inside), "{p}");
    let half = with(&["--plateau", "50%"]);
    assert_eq!(half["levels"][0]["plateau"]["min_in_flight"], 4);
    let off = with(&["--plateau", "0"]);
    assert!(
        off["levels"][0].get("plateau").is_none(),
        "{}",
        off["levels"][0]
    );
}

#[test]
fn plan_open_loop_and_what_ifs() {
    let base = vec![
        "--preset",
        "llama-3.1-70b@4xh100-bf16",
        "--rate",
        "2",
        "-n",
        "100",
        "--input-tokens",
        "6000",
        "--max-tokens",
        "200",
    ];
    let mut args = base.clone();
    args.extend(["--chunk-tokens", "1024"]);
    let colocated = plan_json(&args);
    assert_eq!(colocated["run"]["mode"], "open_loop_poisson");
    assert_eq!(colocated["levels"][0]["rate"], 2.0);
    let mut args = base.clone();
    args.extend(["--prefill-workers", "2"]);
    let disaggregated = plan_json(&args);
    let p99 = |v: &serde_json::Value| v["levels"][0]["itl"]["p99_ms"].as_f64().unwrap();
    assert!(
        p99(&colocated) > 2.0 * p99(&disaggregated),
        "co-located {} ms vs disaggregated {} ms",
        p99(&colocated),
        p99(&disaggregated)
    );
    let mut args = base.clone();
    args.extend(["--speculate", "4:0.8"]);
    let spec = plan_json(&args);
    assert!(
        spec["levels"][0]["tokens_per_chunk"]["mean"]
            .as_f64()
            .unwrap()
            > 2.5
    );
}

#[test]
fn list_presets_names_them_with_their_figures() {
    cadence()
        .args(["plan", "--list-presets"])
        .assert()
        .code(0)
        .stdout(
            predicate::str::contains("llama-3.1-70b@h100-fp8")
                .and(predicate::str::contains("mixtral-8x7b@h100-fp8"))
                .and(predicate::str::contains("tiny@cpu"))
                .and(predicate::str::contains("KV capacity")),
        );
}

#[test]
fn bad_engines_are_usage_errors() {
    let unknown = cadence()
        .args(["plan", "--preset", "gpt-9@abacus"])
        .assert()
        .code(2);
    let err = String::from_utf8_lossy(&unknown.get_output().stderr).to_string();
    assert!(
        err.contains("no preset 'gpt-9@abacus'") && err.contains("llama-3.1-8b@h100-fp8"),
        "{err}"
    );
    usage_error(&["plan", "-c", "4"], "--preset");
    usage_error(
        &["sim", "--addr", "127.0.0.1:0", "--speculate", "4:0.8"],
        "--preset",
    );
    usage_error(
        &["plan", "--preset", "tiny@cpu", "--speculate", "4:1.5"],
        "ALPHA",
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("e.toml");
    std::fs::write(&file, "name = \"x@y\"\n[model]\nparams_b = 1\n").unwrap();
    cadence()
        .args(["plan", "--engine"])
        .arg(&file)
        .assert()
        .code(2)
        .stderr(predicate::str::contains("e.toml").and(predicate::str::contains("layers")));
}

#[test]
fn a_toml_engine_plans() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("gpu.toml");
    std::fs::write(
        &file,
        r#"
name = "llama-3.1-8b@l40s-fp8"
[model]
params_b = 8.03
layers = 32
hidden = 4096
kv_heads = 8
head_dim = 128
bytes_per_param = 1
[hardware]
memory_gb = 48
bandwidth_gbs = 864
peak_tflops = 733
[serving]
max_batch = 64
"#,
    )
    .unwrap();
    let v = plan_json(&["--engine", file.to_str().unwrap(), "-c", "1", "-n", "20"]);
    assert_eq!(v["run"]["model"], "llama-3.1-8b@l40s-fp8");
    // 8.03 GB / (864 GB/s · 0.8) + 2 ms default overhead ≈ 13.6 ms.
    let itl = p50(&v["levels"][0], "itl");
    assert!((13.0..15.0).contains(&itl), "{itl}");
}

/// `cadence sim --preset … --speculate 4:0.8` on port 0: one raw HTTP/1.1 request,
/// read to the end, chunk sizes counted from the words of each content delta.
#[test]
fn sim_with_a_preset_streams_multi_token_chunks() {
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadence"))
        .args([
            "sim",
            "--addr",
            "127.0.0.1:0",
            "--preset",
            "llama-3.1-8b@h100-fp8",
            "--speculate",
            "4:0.8",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .and_then(|s| s.strip_suffix("/v1"))
        .unwrap_or_else(|| panic!("{line}"))
        .to_owned();
    let body = r#"{"model":"m","stream":true,"max_tokens":120,"messages":[{"role":"user","content":"hello"}]}"#;
    let mut tcp = std::net::TcpStream::connect(&addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        tcp,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut response = String::new();
    tcp.read_to_string(&mut response).unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(response.starts_with("HTTP/1.1 200"), "{response}");
    let sizes: Vec<usize> = response
        .split("data: ")
        .filter_map(|d| serde_json::from_str::<serde_json::Value>(d.split("\n\n").next()?).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .filter(|c| !c.is_empty())
        .map(|c| c.split_whitespace().count())
        .collect();
    assert_eq!(sizes.iter().sum::<usize>(), 120, "{sizes:?}");
    assert!(sizes.iter().any(|&n| n > 1), "{sizes:?}");
    assert!(
        sizes.len() < 80,
        "speculation needs fewer chunks than tokens: {sizes:?}"
    );
    assert!(response.contains("data: [DONE]"));
}

#[test]
fn bench_without_a_url_runs_the_engine_it_is_given() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    cadence()
        .args([
            "bench",
            "--preset",
            "llama-3.1-8b@h100-fp8",
            "--speculate",
            "4:0.8",
            "-n",
            "4",
            "-c",
            "2",
            "--max-tokens",
            "40",
            "--quiet",
            "--json",
        ])
        .arg(&json)
        .assert()
        .code(0);
    let text = std::fs::read_to_string(&json).unwrap();
    validate(&text);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["run"]["model"], "llama-3.1-8b@h100-fp8");
    assert_eq!(v["levels"][0]["output_tokens"]["total"], 4 * 40);
    // Speculation: fewer chunks (gaps) than tokens.
    let gaps = v["levels"][0]["itl"]["count"].as_u64().unwrap();
    assert!(gaps < 4 * 39 * 2 / 3, "{gaps} gaps for 4 × 40 tokens");
    usage_error(
        &["bench", "http://127.0.0.1:9/v1", "--preset", "tiny@cpu"],
        "without a URL",
    );
}

#[test]
fn plan_draws_lengths_from_the_workload_distributions() {
    let args = [
        "--preset",
        "llama-3.1-8b@h100-fp8",
        "-c",
        "8",
        "-n",
        "100",
        "--input-tokens",
        "uniform:100..4000",
        "--max-tokens",
        "normal:100,30",
    ];
    let a = plan_json(&args);
    let level = &a["levels"][0];
    assert_eq!(level["requests"]["succeeded"], 100);
    let total = level["output_tokens"]["total"].as_u64().unwrap();
    assert!(
        total != 100 * 100 && (7_000..13_000).contains(&total),
        "{total}"
    );
    // Prompts from 100 to 4000 tokens: prefill time, hence TTFT, varies a lot.
    let ttft = &level["ttft"];
    assert!(ttft["max_ms"].as_f64().unwrap() > 3.0 * ttft["min_ms"].as_f64().unwrap());
    // Same seed, same draws.
    let b = plan_json(&args);
    assert_eq!(b["levels"][0]["output_tokens"], level["output_tokens"]);
}

#[test]
fn flat_timing_flags_with_an_engine_are_usage_errors_naming_both() {
    for (flag, value) in [
        ("--itl", "5ms"),
        ("--ttft", "20ms"),
        ("--burst", "2"),
        ("--stall", "100ms"),
        ("--stall-probability", "0.1"),
    ] {
        let out = cadence()
            .args([
                "sim",
                "--addr",
                "127.0.0.1:0",
                "--preset",
                "tiny@cpu",
                flag,
                value,
            ])
            .assert()
            .code(2);
        let err = String::from_utf8_lossy(&out.get_output().stderr).to_string();
        assert!(
            err.contains(&format!("{flag} cannot be combined with --preset")),
            "{flag}: {err}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("e.toml");
    std::fs::write(
        &file,
        "name = \"small@gpu\"\n[model]\nparams_b = 1\nlayers = 16\nhidden = 2048\nkv_heads = 8\nhead_dim = 64\nbytes_per_param = 2\n[hardware]\nmemory_gb = 24\nbandwidth_gbs = 900\npeak_tflops = 100\n",
    )
    .unwrap();
    cadence()
        .args(["sim", "--addr", "127.0.0.1:0", "--itl", "5ms", "--engine"])
        .arg(&file)
        .assert()
        .code(2)
        .stderr(predicate::str::contains(
            "--itl cannot be combined with --engine",
        ));
}

/// `cadence plan` goes through the bench's report path: per-level conventions and
/// chart data in the JSON (schema-valid), and the same HTML, CSV and Markdown outputs.
#[test]
fn plan_writes_the_bench_reports_with_conventions_and_charts() {
    let dir = tempfile::tempdir().unwrap();
    let (json, html, md, csv) = (
        dir.path().join("plan.json"),
        dir.path().join("plan.html"),
        dir.path().join("plan.md"),
        dir.path().join("csv/"),
    );
    cadence()
        .args([
            "plan",
            "--preset",
            "llama-3.1-8b@h100-fp8",
            "-c",
            "1,16",
            "-n",
            "100",
            "--input-tokens",
            "500",
            "--max-tokens",
            "64",
            "--speculate",
            "3:0.7",
            "--convention",
            "vllm",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .arg("--markdown")
        .arg(&md)
        .arg("--csv")
        .arg(&csv)
        .assert()
        .code(0)
        .stdout(predicate::str::contains("vllm"));
    let text = std::fs::read_to_string(&json).unwrap();
    validate(&text);
    let v: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["convention"], "vllm");
    assert!(v["run"]["machine"].is_null(), "planned: no client machine");
    let levels = v["levels"].as_array().unwrap();
    assert_eq!(levels.len(), 2);
    for l in levels {
        let charts = &l["charts"];
        for series in [
            "itl_cdf",
            "itl_histogram",
            "itl_by_position",
            "tokens_per_chunk",
        ] {
            let n = charts[series].as_array().map_or(0, Vec::len);
            assert!(n > 0, "{} has no {series}: {charts}", l["name"]);
        }
        // Speculation sends several tokens per chunk, and the engine says how many.
        assert_eq!(charts["tokens_per_chunk_basis"], "chunk_counts");
        let conventions = l["conventions"].as_array().unwrap();
        for name in ["cadence", "vllm", "aiperf", "guidellm", "llmperf"] {
            let c = conventions
                .iter()
                .find(|c| c["convention"] == name)
                .unwrap_or_else(|| panic!("no {name} convention in {}", l["name"]));
            assert!(c["itl"]["p50_ms"].as_f64().unwrap() > 0.0, "{c}");
        }
    }
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.contains("llama-3.1-8b@h100-fp8"));
    assert!(page.contains("vllm (headline)"));
    let figures: Vec<&str> = page.split(r#"<figure class="chart""#).skip(1).collect();
    assert_eq!(figures.len(), 8);
    for fig in figures {
        let fig = &fig[..fig.find("</figure>").unwrap()];
        let marks = &fig[fig.find(r#"<g class="marks">"#).expect("a marks group")..];
        assert!(
            marks.contains("<path") || marks.contains("<circle") || marks.contains("<rect"),
            "empty chart: {fig}"
        );
    }
    assert!(std::fs::read_to_string(&md)
        .unwrap()
        .contains("**vllm** convention"));
    let rows = |f: &str| {
        std::fs::read_to_string(csv.join(f))
            .unwrap()
            .lines()
            .count()
    };
    assert_eq!(rows("levels.csv"), 1 + 2);
    assert_eq!(rows("requests.csv"), 1 + 200);
}

/// `cadence plan --dataset`: the bench's dataset reader gives each request its prompt
/// length (words, or --tokenizer tokens) and its recorded reply length.
#[test]
fn plan_takes_prompt_and_output_lengths_from_a_dataset() {
    let dir = tempfile::tempdir().unwrap();
    // One JSONL entry of 300 words asking for 20 tokens plans exactly like
    // --input-tokens 300 --max-tokens 20 (same engine, same seed).
    let jsonl = dir.path().join("one.jsonl");
    let words: Vec<String> = (0..300).map(|i| format!("w{i}")).collect();
    std::fs::write(
        &jsonl,
        format!(
            "{}\n",
            serde_json::json!({"prompt": words.join(" "), "max_tokens": 20})
        ),
    )
    .unwrap();
    let base = ["--preset", "llama-3.1-8b@h100-fp8", "-c", "4", "-n", "40"];
    let from_data = plan_json(&[&base[..], &["--dataset", jsonl.to_str().unwrap()]].concat());
    let synthetic =
        plan_json(&[&base[..], &["--input-tokens", "300", "--max-tokens", "20"]].concat());
    let (a, b) = (&from_data["levels"][0], &synthetic["levels"][0]);
    assert_eq!(a["output_tokens"]["total"], 40 * 20);
    for metric in ["ttft", "itl", "e2e"] {
        assert_eq!(a[metric], b[metric], "{metric}");
    }
    // A longer prompt takes longer to prefill.
    let short = dir.path().join("short.jsonl");
    std::fs::write(&short, "{\"prompt\": \"hi there\", \"max_tokens\": 20}\n").unwrap();
    let short = plan_json(&[&base[..], &["--dataset", short.to_str().unwrap()]].concat());
    assert!(p50(&short["levels"][0], "ttft") < p50(a, "ttft"));

    // ShareGPT: reply lengths become max_tokens; the prompt filter applies;
    // --max-tokens overrides the recorded lengths.
    let sg = sharegpt_fixture(dir.path());
    let sg = sg.to_str().unwrap();
    let args = [
        "--preset",
        "tiny@cpu",
        "-c",
        "2",
        "-n",
        "6",
        "--dataset",
        sg,
    ];
    let v = plan_json(&[&args[..], &["--max-prompt-tokens", "5"]].concat());
    // x (4-word reply) and y (1) in turn, three times each; z (10 words) filtered out.
    assert_eq!(v["levels"][0]["output_tokens"]["total"], 3 * 4 + 3);
    let v = plan_json(&[&args[..], &["--max-tokens", "9"]].concat());
    assert_eq!(v["levels"][0]["output_tokens"]["total"], 6 * 9);

    // Bad combinations and empty datasets are usage errors.
    usage_error(
        &[
            "plan",
            "--preset",
            "tiny@cpu",
            "--dataset",
            sg,
            "--input-tokens",
            "10",
        ],
        "--input-tokens",
    );
    cadence()
        .args([
            "plan",
            "--preset",
            "tiny@cpu",
            "--dataset",
            sg,
            "--min-prompt-tokens",
            "100",
        ])
        .assert()
        .code(2);
}

/// `cadence bench` against the built-in simulator (the tiny@cpu engine): `levels`,
/// 6 requests each of `tokens` output tokens, into a records file in `dir`.
fn sim_run(dir: &std::path::Path, levels: &str, tokens: &str) -> std::path::PathBuf {
    let records = dir.join(format!("run-{levels}-{tokens}.jsonl"));
    cadence()
        .args(["bench", "-c", levels, "-n", "6", "--max-tokens", tokens])
        .args(["--input-tokens", "64", "--quiet", "--records"])
        .arg(&records)
        .assert()
        .success();
    records
}

/// A sweep of the built-in simulator calibrated from the same preset: the fit prints
/// every parameter, the error per level with the held-out one marked, an engine file
/// that loads, and predictions at the loads asked for.
#[test]
fn calibrate_fits_a_sweep_of_the_sim_and_predicts_other_loads() {
    let dir = tempfile::tempdir().unwrap();
    let run = sim_run(dir.path(), "1,2,4,8", "16");
    let fitted = dir.path().join("fitted.toml");
    let out = cadence()
        .args(["plan", "--preset", "tiny@cpu", "--calibrate"])
        .arg(&run)
        .args(["--holdout", "concurrency=4", "-c", "3,16", "--save-engine"])
        .arg(&fitted)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let text = String::from_utf8(out).unwrap();
    assert!(
        text.contains("4 levels, fitted on 3, concurrency=4 held out"),
        "{text}"
    );
    for p in cadence_engine::fit::PARAMS {
        assert!(text.contains(p.name), "{}: {text}", p.name);
    }
    assert!(text.contains("concurrency=4 (held out)"), "{text}");
    // Beside the fitted TTFT and ITL: throughput and E2E p50, model / run and the error.
    let head = text
        .lines()
        .find(|l| l.starts_with("level (model / run)"))
        .unwrap();
    assert!(
        head.contains("tok/s") && head.ends_with("E2E p50"),
        "{head}"
    );
    let row = text
        .lines()
        .find(|l| l.starts_with("concurrency=2 "))
        .unwrap();
    assert_eq!(row.matches(" / ").count(), 6, "{row}");
    assert!(
        !row.contains('–'),
        "every figure measured and modelled: {row}"
    );
    assert!(
        text.contains("\nconcurrency=3 ") && text.contains("\nconcurrency=16 "),
        "{text}"
    );
    let toml = std::fs::read_to_string(&fitted).unwrap();
    assert!(text.contains(&toml), "the printed engine is the saved one");
    let spec = cadence_engine::EngineSpec::from_toml(&toml).unwrap();
    assert_eq!(spec.name, "tiny@cpu (calibrated)");
    // The fitted engine runs in `cadence plan --engine`.
    cadence()
        .args(["plan", "--engine"])
        .arg(&fitted)
        .args(["-c", "2", "-n", "4"])
        .assert()
        .success();
}

/// Bad calibration input is a usage error (exit 2) naming what is wrong.
#[test]
fn calibrate_refuses_short_sweeps_missing_streams_and_unknown_levels() {
    let dir = tempfile::tempdir().unwrap();
    let two = sim_run(dir.path(), "1,2", "8");
    let two = two.to_str().unwrap();
    usage_error(
        &["plan", "--preset", "tiny@cpu", "--calibrate", two],
        "2 level(s); calibration needs a sweep of at least 3",
    );
    let three = sim_run(dir.path(), "1,2,4", "8");
    let three = three.to_str().unwrap();
    let args = ["plan", "--preset", "tiny@cpu", "--calibrate", three];
    usage_error(
        &[&args[..], &["--holdout", "2"]].concat(),
        "--holdout leaves 2 levels to fit; a fit needs at least 3",
    );
    usage_error(
        &[&args[..], &["--holdout", "concurrency=5"]].concat(),
        "no such level; the run's levels are concurrency=1, concurrency=2, concurrency=4",
    );
    // One token per request: one chunk each, no inter-token latency to fit.
    let single = sim_run(dir.path(), "1,2,4", "1");
    usage_error(
        &[
            "plan",
            "--preset",
            "tiny@cpu",
            "--calibrate",
            single.to_str().unwrap(),
        ],
        "level concurrency=1 has no streamed responses",
    );
    let missing = dir.path().join("missing.jsonl");
    usage_error(
        &[
            "plan",
            "--preset",
            "tiny@cpu",
            "--calibrate",
            missing.to_str().unwrap(),
        ],
        "missing.jsonl",
    );
    usage_error(
        &["plan", "--calibrate", three],
        "cadence plan needs an engine",
    );
    // Report outputs would be dropped without a word: refused by name instead.
    for flag in [
        &["--json", "x.json"][..],
        &["--html", "x.html"],
        &["--slo", "itl.p50<1s"],
    ] {
        usage_error(
            &[&args[..], flag].concat(),
            &format!("{} does not apply to --calibrate", flag[0]),
        );
    }
}

#[test]
fn a_shared_prefix_is_prefilled_once_per_group_so_ttft_falls_as_groups_shrink() {
    // The same 2,064-token prompts, with and without a 2,000-token shared prefix.
    let base = [
        "--preset",
        "llama-3.1-8b@h100-bf16",
        "-c",
        "16",
        "-n",
        "96",
        "--max-tokens",
        "32",
    ];
    let plain = plan_json(&[&base[..], &["--input-tokens", "2064"]].concat());
    let shared = |groups: &str| {
        plan_json(
            &[
                &base[..],
                &["--input-tokens", "64", "--prefix-tokens", "2000"],
                &["--prefix-groups", groups],
            ]
            .concat(),
        )
    };
    let one = shared("1");
    let many = shared("96");
    let ttft = |v: &serde_json::Value| p50(&v["levels"][0], "ttft");
    // A group per request: nothing is shared, nothing is saved. The prefix is part of
    // every prompt, so this is the plain run's TTFT, not a 64-token prompt's.
    assert!(
        (ttft(&many) - ttft(&plain)).abs() <= 0.01 * ttft(&plain),
        "{} vs {}",
        ttft(&many),
        ttft(&plain)
    );
    // One group: every request after the first skips 2,000 of its 2,064 prompt tokens.
    assert!(
        ttft(&one) < 0.5 * ttft(&plain),
        "{} vs {}",
        ttft(&one),
        ttft(&plain)
    );
}

#[test]
fn plan_sessions_report_by_turn_and_refuse_a_shared_prefix_beside_them() {
    let v = plan_json(&[
        "--preset",
        "llama-3.1-8b@h100-bf16",
        "-c",
        "4",
        "-n",
        "8",
        "--turns",
        "3",
        "--think-time",
        "1s",
        "--input-tokens",
        "1000",
        "--max-tokens",
        "64",
    ]);
    let level = &v["levels"][0];
    // -n counts sessions: 8 sessions of three turns.
    assert_eq!(level["requests"]["succeeded"], 24, "{level}");
    let turns = level["by_turn"].as_array().unwrap();
    assert_eq!(turns.len(), 3);
    for (k, t) in turns.iter().enumerate() {
        assert_eq!(t["turn"], k);
        assert_eq!(t["requests"], 8);
    }
    // Later turns carry thousands more prompt tokens, yet their first token comes no
    // later than the first turn's: the history is in the prefix cache.
    let ttft = |t: &serde_json::Value| t["ttft"]["p50_ms"].as_f64().unwrap();
    assert!(ttft(&turns[2]) < 1.3 * ttft(&turns[0]), "{turns:?}");
    usage_error(
        &[
            "plan",
            "--preset",
            "llama-3.1-8b@h100-bf16",
            "--turns",
            "2",
            "--prefix-tokens",
            "100",
        ],
        "--prefix-tokens",
    );
    usage_error(
        &[
            "plan",
            "--preset",
            "llama-3.1-8b@h100-bf16",
            "--think-time",
            "1s",
        ],
        "--turns",
    );
}

#[test]
fn plan_agent_predicts_session_wall_time_and_its_split() {
    let r = plan_json(&[
        "--preset",
        "llama-3.1-8b@h100-fp8",
        "--agent",
        "--turns",
        "4",
        "--tool-time",
        "300ms",
        "--tool-result-tokens",
        "500",
        "--input-tokens",
        "3000",
        "--max-tokens",
        "100",
        "-c",
        "4",
        "-n",
        "8",
        "--what-if",
        "itl=x0.5",
        "--slo",
        "session.p99<=60s",
    ]);
    let level = &r["levels"][0];
    let s = &level["sessions"];
    assert_eq!(s["complete"], 8);
    assert_eq!(s["steps"]["p50"], 4.0);
    // Three tool waits per session, exactly the tool time each.
    assert_eq!(s["tool"]["p50_ms"], 900.0);
    assert_eq!(s["tool_calls"], 24);
    let split = &s["split"];
    let total: f64 = ["ttft_pct", "decode_pct", "tool_pct", "rest_pct"]
        .iter()
        .map(|k| split[k].as_f64().unwrap())
        .sum();
    assert!((total - 100.0).abs() < 1e-6);
    // The prefix cache keeps the history: a later step's prompt is longer, its TTFT
    // shorter than the first step's cold one.
    let rows = s["by_context"].as_array().unwrap();
    let first = rows
        .iter()
        .find_map(|r| r["first_steps"]["p50"].as_f64())
        .unwrap();
    let later = rows
        .iter()
        .filter_map(|r| r["later_steps"]["p50"].as_f64())
        .fold(f64::MAX, f64::min);
    assert!(later < first, "later steps {later} ms, first {first} ms");
    // Halving the ITL shortens every session.
    let w = &s["what_if"][0];
    assert!(w["wall"]["p50_ms"].as_f64().unwrap() < s["wall"]["p50_ms"].as_f64().unwrap());
    assert_eq!(level["slos"][0]["slo"], "session.p99<=60s");
}

/// The level of `cadence plan` and of `cadence bench` on its built-in simulator (the
/// same engine in real time) with `args`.
fn planned_and_served(args: &[&str]) -> (serde_json::Value, serde_json::Value) {
    let planned = plan_json(args);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    cadence()
        .arg("bench")
        .args(args)
        .args(["--quiet", "--json"])
        .arg(&json)
        .assert()
        .code(0);
    let text = std::fs::read_to_string(&json).unwrap();
    validate(&text);
    let served: serde_json::Value = serde_json::from_str(&text).unwrap();
    (planned["levels"][0].clone(), served["levels"][0].clone())
}

/// The engine model takes the flat sim's speculation and transfer (`--spec-accept-len`,
/// `--pd-transfer`): `plan` predicts a TTFT that holds the 40 ms transfer and bursts of
/// 2.5 tokens a step, and the built-in simulator (the same engine in real time) agrees
/// within its noise on a small run: the same TPOT, and the same TTFT once each side's
/// TTFT without the two is taken out (the sim's own overhead, several ms on a loaded
/// machine, is in both of its runs).
#[test]
fn plan_and_the_engine_sim_take_the_transfer_and_the_acceptance_length() {
    let load = ["--preset", "tiny@cpu", "-c", "2", "-n", "24"];
    let load = [&load[..], &["--max-tokens", "32", "--input-tokens", "64"]].concat();
    let knobs = [
        &load[..],
        &["--pd-transfer", "40ms", "--spec-accept-len", "2.5"],
    ]
    .concat();
    let (p0, s0) = planned_and_served(&load);
    let (p, s) = planned_and_served(&knobs);
    let (plan_ttft, sim_ttft) = (
        p50(&p, "ttft") - p50(&p0, "ttft"),
        p50(&s, "ttft") - p50(&s0, "ttft"),
    );
    eprintln!(
        "TTFT p50 added: plan {plan_ttft:.2} sim {sim_ttft:.2}; TPOT p50 plan {:.3} sim {:.3}",
        p50(&p, "tpot"),
        p50(&s, "tpot")
    );
    assert!(
        plan_ttft >= 30.0,
        "the transfer is in TTFT: {plan_ttft} ms more"
    );
    assert!(
        (plan_ttft - sim_ttft).abs() <= 10.0,
        "TTFT added: plan {plan_ttft} ms, sim {sim_ttft} ms"
    );
    let (a, b) = (p50(&p, "tpot"), p50(&s, "tpot"));
    assert!(
        (a - b).abs() <= 1.0_f64.max(0.25 * a),
        "TPOT p50: plan {a} ms, sim {b} ms"
    );
    for level in [&p, &s] {
        let l = level["bursts"]["client_acceptance_length"]
            .as_f64()
            .unwrap();
        assert!((l - 2.5).abs() < 0.25, "acceptance length {l}");
    }
    usage_error(
        &["plan", "--preset", "tiny@cpu", "--spec-accept-len", "17"],
        "--spec-accept-len must be from 1 to 16",
    );
}

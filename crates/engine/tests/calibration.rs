//! The calibration table: every published row of `calibration/published.toml`
//! recomputed with the engine model, held to the error targets, and compared with
//! the generated table in docs/src/CALIBRATION.md (after a change that moves a
//! prediction on purpose: `CADENCE_BLESS=1 cargo test -p cadence-engine --test
//! calibration` rewrites it, and the diff shows what moved).

use std::path::PathBuf;

use cadence_core::metrics::{summarize_level, LevelOptions};
use cadence_engine::{plan_level, preset, Arrivals, EngineSpec, KvPolicy, Prefill, Workload};
use serde::Deserialize;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Published {
    source: Vec<Source>,
    row: Vec<Row>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Source {
    id: String,
    name: String,
    url: String,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Row {
    id: String,
    source: String,
    engine: String,
    hardware: String,
    model: String,
    precision: String,
    preset: String,
    input: u32,
    output: u32,
    concurrency: Option<u32>,
    burst: Option<u32>,
    max_batch: Option<u32>,
    chunk_tokens: Option<u32>,
    memory_utilization: Option<f64>,
    kv_policy: Option<KvPolicy>,
    /// TensorRT-LLM's KV sizing: this share of the memory left after the weights.
    kv_free_fraction: Option<f64>,
    published: Figures,
}

/// The figures a source reports (and the model predicts), by statistic.
#[derive(Debug, Default, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
struct Figures {
    ttft_mean_ms: Option<f64>,
    itl_mean_ms: Option<f64>,
    itl_p50_ms: Option<f64>,
    e2e_mean_ms: Option<f64>,
    throughput: Option<f64>,
}

/// A metric class and its target: the share of rows within `tolerance`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Itl,
    Ttft,
    E2e,
    Throughput,
}

impl Class {
    fn name(self) -> &'static str {
        match self {
            Class::Itl => "ITL",
            Class::Ttft => "TTFT",
            Class::E2e => "E2E",
            Class::Throughput => "throughput",
        }
    }
    fn tolerance(self) -> f64 {
        match self {
            Class::Ttft => 0.25,
            _ => 0.15,
        }
    }
}

/// Share of a class's rows that must be within its tolerance.
const TARGET_SHARE: f64 = 0.8;

/// (label, class, published, predicted) for each figure the source reports.
fn pairs(published: &Figures, predicted: &Figures) -> Vec<(&'static str, Class, f64, f64)> {
    let all = [
        (
            "TTFT mean ms",
            Class::Ttft,
            published.ttft_mean_ms,
            predicted.ttft_mean_ms,
        ),
        (
            "ITL mean ms",
            Class::Itl,
            published.itl_mean_ms,
            predicted.itl_mean_ms,
        ),
        (
            "ITL p50 ms",
            Class::Itl,
            published.itl_p50_ms,
            predicted.itl_p50_ms,
        ),
        (
            "E2E mean ms",
            Class::E2e,
            published.e2e_mean_ms,
            predicted.e2e_mean_ms,
        ),
        (
            "output tok/s",
            Class::Throughput,
            published.throughput,
            predicted.throughput,
        ),
    ];
    all.into_iter()
        .filter_map(|(l, c, p, m)| Some((l, c, p?, m.expect("every figure is predicted"))))
        .collect()
}

fn engine_for(row: &Row) -> EngineSpec {
    let mut spec =
        preset(&row.preset).unwrap_or_else(|| panic!("{}: no preset {}", row.id, row.preset));
    if let Some(b) = row.max_batch {
        spec.serving.max_batch = b;
    }
    if let Some(c) = row.chunk_tokens {
        spec.serving.prefill = Prefill::Chunked { chunk_tokens: c };
    }
    if let Some(m) = row.memory_utilization {
        spec.serving.memory_utilization = m;
    }
    if let Some(p) = row.kv_policy {
        spec.serving.kv_policy = p;
    }
    if let Some(f) = row.kv_free_fraction {
        let h = &spec.hardware;
        let free = h.gpus as f64 * h.memory_gb * 1e9 - spec.weight_bytes();
        spec.serving.kv_capacity_tokens = Some((free * f / spec.kv_bytes_per_token()) as u64);
    }
    spec.validate()
        .unwrap_or_else(|e| panic!("{}: {e}", row.id));
    spec
}

/// The model's figures for a row: the load the source describes, on a fresh engine.
fn predict(row: &Row) -> Figures {
    let spec = engine_for(row);
    let (arrivals, requests, warmup) = match (row.concurrency, row.burst) {
        (Some(c), None) => (Arrivals::Closed { concurrency: c }, (4 * c).max(8), c),
        (None, Some(n)) => (Arrivals::Constant { rate: 1e12 }, n, 0),
        _ => panic!("{}: give concurrency or burst", row.id),
    };
    let w = Workload {
        requests: requests as u64,
        warmup: warmup as u64,
        input_tokens: row.input,
        max_tokens: row.output,
        // cadence plan's default client turnaround; 0 for a burst, which has none.
        turnaround_ns: 500_000,
        lengths: Vec::new(),
        prefix_tokens: 0,
        prefix_groups: 1,
        sessions: None,
        send_at_ns: Vec::new(),
    };
    let level = plan_level(&spec, arrivals, &w, 0, 0, 0);
    let s = summarize_level(&level.records, &LevelOptions::default());
    assert_eq!(s.requests.succeeded, requests as u64, "{}", row.id);
    let itl = s.itl.expect("tokens after the first");
    Figures {
        ttft_mean_ms: s.ttft.map(|d| d.mean),
        itl_mean_ms: Some(itl.mean),
        itl_p50_ms: Some(itl.p50),
        e2e_mean_ms: s.e2e.map(|d| d.mean),
        throughput: s.throughput.output_tokens_per_s,
    }
}

fn load_of(row: &Row) -> String {
    match (row.concurrency, row.burst) {
        (Some(c), _) => format!("{c} clients"),
        (_, Some(n)) => format!("{n} at once"),
        _ => unreachable!(),
    }
}

fn fmt(v: f64) -> String {
    if v >= 100.0 {
        format!("{v:.0}")
    } else {
        format!("{v:.2}")
    }
}

/// Per class: (rows, within tolerance, median |error|, worst |error|, worst row).
fn summary(
    errors: &[(Class, String, f64)],
    class: Class,
) -> Option<(usize, usize, f64, f64, String)> {
    let mut e: Vec<(f64, &String)> = errors
        .iter()
        .filter(|(c, ..)| *c == class)
        .map(|(_, id, e)| (e.abs(), id))
        .collect();
    if e.is_empty() {
        return None;
    }
    e.sort_by(|a, b| a.0.total_cmp(&b.0));
    let n = e.len();
    let within = e.iter().filter(|(x, _)| *x <= class.tolerance()).count();
    let median = if n % 2 == 1 {
        e[n / 2].0
    } else {
        (e[n / 2 - 1].0 + e[n / 2].0) / 2.0
    };
    let (worst, id) = e[n - 1];
    Some((n, within, median, worst, id.clone()))
}

/// The generated part of docs/src/CALIBRATION.md, and each figure's class and error.
fn render(data: &Published) -> (String, Vec<(Class, String, f64)>) {
    let mut errors = Vec::new();
    let mut t = String::from(
        "| row | engine | hardware | model, precision | in / out | load | figure | published | predicted | ratio |\n\
         |---|---|---|---|---|---|---|---:|---:|---:|\n",
    );
    for row in &data.row {
        assert!(
            data.source.iter().any(|s| s.id == row.source),
            "{}: unknown source",
            row.id
        );
        let predicted = predict(row);
        for (label, class, published, model) in pairs(&row.published, &predicted) {
            errors.push((class, row.id.clone(), model / published - 1.0));
            t.push_str(&format!(
                "| {} [{}] | {} | {} | {}, {} | {} / {} | {} | {} | {} | {} | {:.2} |\n",
                row.id,
                row.source,
                row.engine,
                row.hardware,
                row.model,
                row.precision,
                row.input,
                row.output,
                load_of(row),
                label,
                fmt(published),
                fmt(model),
                model / published
            ));
        }
    }
    t.push_str("\n| figure | rows | within target | median error | worst error (row) |\n|---|---:|---:|---:|---|\n");
    for class in [Class::Itl, Class::Ttft, Class::E2e, Class::Throughput] {
        if let Some((n, within, median, worst, id)) = summary(&errors, class) {
            t.push_str(&format!(
                "| {} (±{:.0} %) | {n} | {within} | {:.1} % | {:.1} % ({id}) |\n",
                class.name(),
                class.tolerance() * 100.0,
                median * 100.0,
                worst * 100.0
            ));
        }
    }
    t.push_str("\nSources:\n\n");
    for s in &data.source {
        t.push_str(&format!("- `{}`: {}, <{}>\n", s.id, s.name, s.url));
    }
    (t, errors)
}

const BEGIN: &str = "<!-- BEGIN GENERATED: crates/engine/tests/calibration.rs -->\n";
const END: &str = "<!-- END GENERATED -->";

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

#[test]
fn the_engine_model_matches_published_measurements_and_the_table_is_current() {
    let text = std::fs::read_to_string(root().join("calibration/published.toml")).unwrap();
    let data: Published = toml::from_str(&text).unwrap();
    assert!(data.row.len() >= 12, "{} rows", data.row.len());
    let (table, errors) = render(&data);
    let doc_path = root().join("../../docs/src/CALIBRATION.md");
    let doc = std::fs::read_to_string(&doc_path).unwrap_or_default();
    let (head, rest) = doc.split_once(BEGIN).unwrap_or((doc.as_str(), END));
    let tail = rest.split_once(END).map_or("\n", |(_, t)| t);
    let fresh = format!("{head}{BEGIN}{table}{END}{tail}");
    if std::env::var_os("CADENCE_BLESS").is_some() {
        std::fs::write(&doc_path, &fresh).unwrap();
    } else {
        assert!(
            doc == fresh,
            "docs/src/CALIBRATION.md is out of date with calibration/published.toml or the model; \
             rerun with CADENCE_BLESS=1 and review the diff:\n{table}"
        );
    }
    for class in [Class::Itl, Class::Ttft, Class::E2e, Class::Throughput] {
        if let Some((n, within, ..)) = summary(&errors, class) {
            assert!(
                within as f64 >= TARGET_SHARE * n as f64,
                "{}: {within} of {n} rows within ±{:.0} %\n{table}",
                class.name(),
                class.tolerance() * 100.0
            );
        }
    }
}

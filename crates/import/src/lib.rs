//! Other benchmark tools' saved outputs read into Cadence request records, so a run of
//! `vllm bench serve`, AIPerf, GuideLLM or LLMPerf gets Cadence's report and lands in
//! one table with Cadence's own runs. Each importer keeps what its file holds, says what
//! the file lacks (no chunk times, no send times, client-counted tokens) and which
//! figures therefore cannot be rebuilt, and never makes a number up: a missing value
//! stays absent. The tool's own headline figures are read too, beside Cadence's rebuild
//! of them under the tool's definition. The crate also writes Cadence runs in the
//! llm-d benchmark report format ([`llmd`]).

#![warn(missing_docs)]

pub mod aiperf;
mod build;
pub mod genai_bench;
pub mod guidellm;
pub mod inference_perf;
mod json;
pub mod llmd;
pub mod llmperf;
pub mod numpy;
pub mod vllm;

pub use build::{Lack, Req};

use cadence_core::{ImportedFigure, ImportedRun, Report, RequestRecord};
use std::path::Path;

/// A tool whose saved output Cadence reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tool {
    /// `vllm bench serve --save-result --save-detailed` (and SGLang's `bench_serving`
    /// output of the same layout).
    Vllm,
    /// AIPerf's `profile_export.jsonl`, with `profile_export_aiperf.json` beside it.
    Aiperf,
    /// GuideLLM's benchmarks report (`benchmarks.json`).
    Guidellm,
    /// LLMPerf's `*_individual_responses.json`, with `*_summary.json` beside it.
    Llmperf,
    /// inference-perf's `per_request_lifecycle_metrics.json`.
    InferencePerf,
    /// genai-bench's per-run metrics file (`individual_request_metrics`).
    GenaiBench,
}

impl Tool {
    /// Every tool Cadence reads.
    pub const ALL: [Tool; 6] = [
        Tool::Vllm,
        Tool::Aiperf,
        Tool::Guidellm,
        Tool::Llmperf,
        Tool::InferencePerf,
        Tool::GenaiBench,
    ];

    /// The tool's name as `FromStr` accepts it and the report shows it.
    pub fn name(self) -> &'static str {
        match self {
            Tool::Vllm => "vllm",
            Tool::Aiperf => "aiperf",
            Tool::Guidellm => "guidellm",
            Tool::Llmperf => "llmperf",
            Tool::InferencePerf => "inference-perf",
            Tool::GenaiBench => "genai-bench",
        }
    }
}

impl std::fmt::Display for Tool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Tool {
    type Err = String;
    fn from_str(s: &str) -> Result<Tool, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "vllm" | "sglang" => Ok(Tool::Vllm),
            "aiperf" | "genai-perf" => Ok(Tool::Aiperf),
            "guidellm" => Ok(Tool::Guidellm),
            "llmperf" => Ok(Tool::Llmperf),
            "inference-perf" | "inference_perf" => Ok(Tool::InferencePerf),
            "genai-bench" | "genai_bench" => Ok(Tool::GenaiBench),
            other => Err(format!(
                "unknown tool '{other}': use vllm, aiperf, guidellm, llmperf, inference-perf or genai-bench"
            )),
        }
    }
}

/// A file that cannot be imported, and why, naming the file.
#[derive(Debug, Clone, PartialEq)]
pub struct ImportError {
    /// The file's path as given.
    pub file: String,
    /// What is wrong with it, in plain words.
    pub msg: String,
}

impl ImportError {
    /// An error about `file` saying `msg`.
    pub fn new(file: impl Into<String>, msg: impl Into<String>) -> ImportError {
        ImportError {
            file: file.into(),
            msg: msg.into(),
        }
    }
}

impl std::fmt::Display for ImportError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.file, self.msg)
    }
}

impl std::error::Error for ImportError {}

/// Another tool's run as read: Cadence records and what the file said about itself.
#[derive(Debug, Clone)]
pub struct Imported {
    /// The tool that wrote the file.
    pub tool: Tool,
    /// The tool's version, when the file says (`None`: it does not).
    pub version: Option<String>,
    /// The files read (the main one first).
    pub files: Vec<String>,
    /// The model benchmarked, when the file names it.
    pub model: Option<String>,
    /// What was benchmarked (a server URL, or the tool's backend), when the file says.
    pub target: Option<String>,
    /// The API the run spoke, as `--api` names it (`chat`, `completions`,
    /// `responses`), when the file says which: `compare` then sets it against
    /// another run's.
    pub api: Option<String>,
    /// The load levels (one per benchmark of the file; most files hold one), in the
    /// order of the records' `level`.
    pub levels: Vec<Level>,
    /// The run's duration in seconds as the tool measured it (`None`: not saved).
    pub duration_s: Option<f64>,
    /// Wall-clock start, ms since the Unix epoch, when the file holds one.
    pub started_at_unix_ms: Option<u64>,
    /// One per request, times on one timeline from the run's first send.
    pub records: Vec<RequestRecord>,
    /// What the file does not hold, which blanks the figures that need it.
    pub lacks: Vec<Lack>,
    /// The tool's headline figures: what it saved and Cadence's rebuild.
    pub figures: Vec<ImportedFigure>,
    /// Other things worth saying, in plain words.
    pub notes: Vec<String>,
    /// What the report warns of, in plain words (requests read twice, counted once).
    pub warnings: Vec<String>,
}

/// One load level of an imported run.
#[derive(Debug, Clone, PartialEq)]
pub struct Level {
    /// The level's label in the report (`concurrency=4`, `rate=2/s`, or `<tool> run`).
    pub name: String,
    /// The tool's cap on requests in flight (`None`: not capped, or not saved).
    pub concurrency: Option<u32>,
    /// The request rate the tool aimed at, requests per second (`None`: as fast as it
    /// could, or not saved).
    pub rate: Option<f64>,
}

impl Level {
    /// A level named after its load as the tool applied it.
    pub fn new(tool: Tool, concurrency: Option<u32>, rate: Option<f64>) -> Level {
        let name = match (concurrency, rate) {
            (Some(c), _) => format!("concurrency={c}"),
            (None, Some(r)) => format!("rate={r}/s"),
            _ => format!("{tool} run"),
        };
        Level {
            name,
            concurrency,
            rate,
        }
    }
}

/// The Cadence API (`--api` name) an endpoint's path or a tool's endpoint kind names:
/// `chat` for chat completions, `completions`, `responses`; `None` for anything else.
pub fn api_named(kind: &str) -> Option<String> {
    let k = kind.trim_end_matches('/');
    let api = if k == "chat" || k == "openai-chat" || k.ends_with("/chat/completions") {
        "chat"
    } else if k == "completions" || k == "openai" || k == "vllm" || k.ends_with("/completions") {
        "completions"
    } else if k == "responses" || k.ends_with("/responses") {
        "responses"
    } else {
        return None;
    };
    Some(api.to_string())
}

impl Imported {
    /// Whether the file lacks `l`.
    pub fn lacks(&self, l: Lack) -> bool {
        self.lacks.contains(&l)
    }

    /// The report's section about the import.
    pub fn section(&self) -> ImportedRun {
        let mut lacks: Vec<String> = self.lacks.iter().map(|l| l.words(self.tool)).collect();
        lacks.extend(self.notes.iter().cloned());
        let mut not_rebuilt: Vec<String> = Vec::new();
        for n in self.lacks.iter().flat_map(|l| l.not_rebuilt().iter()) {
            if !not_rebuilt.iter().any(|m| m == n) {
                not_rebuilt.push(n.to_string());
            }
        }
        ImportedRun {
            tool: self.tool.name().to_string(),
            version: self.version.clone(),
            files: self.files.clone(),
            lacks,
            not_rebuilt,
            figures: self.figures.clone(),
        }
    }
}

/// How many bytes of a file detection reads.
const SNIFF_BYTES: usize = 1 << 16;

/// Which tool wrote `path`, judged by its content; `None` when it looks like none of
/// them (a Cadence records file or report, say).
pub fn detect(path: &Path) -> Result<Option<Tool>, ImportError> {
    let file = path.display().to_string();
    if path.is_dir() {
        return Ok(None);
    }
    let mut f = std::fs::File::open(path)
        .map_err(|e| ImportError::new(&file, format!("cannot read: {e}")))?;
    let mut head = vec![0u8; SNIFF_BYTES];
    let n = read_up_to(&mut f, &mut head).map_err(|e| ImportError::new(&file, e.to_string()))?;
    head.truncate(n);
    match detect_all(&String::from_utf8_lossy(&head))[..] {
        [a, b, ..] => Err(ImportError::new(
            &file,
            format!(
                "looks like both {a} and {b} output (it holds both layouts' keys): give \
                 --from {a} or --from {b} to say which"
            ),
        )),
        [one] => Ok(Some(one)),
        [] => Ok(None),
    }
}

fn read_up_to(f: &mut impl std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match f.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// [`detect`] on the start of a file: the keys each tool's layout is known by (the
/// first, when a file holds more than one layout's; [`detect_all`] names them all).
pub fn detect_text(head: &str) -> Option<Tool> {
    detect_all(head).first().copied()
}

/// Every tool whose per-request layout the start of a file matches (more than one: the
/// file is ambiguous, and [`detect`] refuses it), else the one whose summary it is.
pub fn detect_all(head: &str) -> Vec<Tool> {
    let t = head.trim_start();
    let has = |k: &str| t.contains(&format!("\"{k}\""));
    // Cadence's own files first: a records line or a report.
    if has("schema_version") && has("cadence_version") {
        return Vec::new();
    }
    let layouts = [
        (
            Tool::Aiperf,
            t.starts_with('{') && has("metadata") && has("metrics") && has("request_start_ns"),
        ),
        (
            Tool::Guidellm,
            has("benchmarks") && (has("requests") || has("metrics")),
        ),
        (Tool::Vllm, has("ttfts") && has("itls")),
        (
            Tool::GenaiBench,
            has("individual_request_metrics") || has("aggregated_metrics"),
        ),
    ];
    let all: Vec<Tool> = layouts
        .iter()
        .filter(|(_, m)| *m)
        .map(|(t, _)| *t)
        .collect();
    if !all.is_empty() {
        return all;
    }
    summary_of(t).into_iter().collect()
}

/// The tool whose summary (or list-shaped file) `t` is, by its keys.
fn summary_of(t: &str) -> Option<Tool> {
    let has = |k: &str| t.contains(&format!("\"{k}\""));
    // The summaries alone: recognised, so the importer can say what to give instead.
    if has("aiperf_version") {
        return Some(Tool::Aiperf);
    }
    if has("mean_ttft_ms") && has("request_throughput") {
        return Some(Tool::Vllm);
    }
    if t.starts_with('[') && (has("ttft_s") || has("end_to_end_latency_s")) {
        return Some(Tool::Llmperf);
    }
    if t.starts_with('[') && has("start_time") && has("end_time") && has("info") {
        return Some(Tool::InferencePerf);
    }
    None
}

/// Reads `path` as `from` (or as detected) into an [`Imported`] run.
pub fn import(path: &Path, from: Option<Tool>) -> Result<Imported, ImportError> {
    let file = path.display().to_string();
    let tool = match from {
        Some(t) => t,
        None => detect(path)?.ok_or_else(|| {
            ImportError::new(
                &file,
                "not a file Cadence can import: it looks like no vllm bench serve, AIPerf, GuideLLM or LLMPerf output (give --from TOOL if it is one)",
            )
        })?,
    };
    let text = read(path)?;
    let mut imp = match tool {
        Tool::Vllm => vllm::import(&file, &text)?,
        Tool::Aiperf => {
            let summary = aiperf::summary_beside(path)
                .map(|p| read(&p).map(|t| (p.display().to_string(), t)))
                .transpose()?;
            aiperf::import(
                &file,
                &text,
                summary.as_ref().map(|(f, t)| (f.as_str(), t.as_str())),
            )?
        }
        Tool::Guidellm => guidellm::import(&file, &text)?,
        Tool::InferencePerf => inference_perf::import(&file, &text)?,
        Tool::GenaiBench => genai_bench::import(&file, &text)?,
        Tool::Llmperf => {
            let summary = llmperf::summary_beside(path)
                .map(|p| read(&p).map(|t| (p.display().to_string(), t)))
                .transpose()?;
            llmperf::import(
                &file,
                &text,
                summary.as_ref().map(|(f, t)| (f.as_str(), t.as_str())),
            )?
        }
    };
    if imp.records.is_empty() {
        return Err(ImportError::new(&file, "holds no requests"));
    }
    // Times are counted from the run's first send; a run longer than this is not one
    // (a corrupt or hostile file), and its time buckets would not fit in memory.
    const MAX_SPAN_NS: u64 = 30 * 86_400 * 1_000_000_000;
    let beyond = |t: Option<u64>| t.is_some_and(|t| t > MAX_SPAN_NS);
    if let Some(r) = imp.records.iter().find(|r| {
        beyond(r.sent_ns) || beyond(r.end_ns) || r.chunks.iter().any(|c| c.t_ns() > MAX_SPAN_NS)
    }) {
        return Err(ImportError::new(
            &file,
            format!(
                "request {} ends more than 30 days after the run's first send: not a benchmark run's times",
                r.index
            ),
        ));
    }
    imp.lacks.sort();
    imp.lacks.dedup();
    Ok(imp)
}

/// A whole file as text, refused above [`json::MAX_BYTES`].
fn read(path: &Path) -> Result<String, ImportError> {
    let ceiling = cadence_core::input::Ceiling {
        what: "import",
        max: json::MAX_BYTES,
        flag: None,
    };
    cadence_core::input::read_text(path, ceiling)
        .map_err(|e| ImportError::new(path.display().to_string(), e.reason()))
}

/// Leaves blank, in a report rebuilt from `imp`'s records, every figure the file cannot
/// give (a gap between chunks the file never held, a throughput over a window whose
/// start it never said), and attaches the import's section. What is blank is named in
/// the section's `not_rebuilt`.
pub fn mark(report: &mut Report, imp: &Imported) {
    report.warnings.extend(imp.warnings.iter().cloned());
    for l in &mut report.levels {
        let s = &mut l.summary;
        if imp.lacks(Lack::ChunkTimes) {
            s.itl = None;
            s.itl_per_token = None;
            s.tokens_per_chunk = None;
            for v in &mut l.conventions {
                if v.convention == "cadence" || v.convention == "vllm" {
                    v.itl = None;
                }
            }
            for t in &mut s.by_turn {
                t.itl = None;
            }
            l.charts = None;
            l.time_series.clear();
            // The records' chunks are only the first and the last: a chunk count
            // compared with the tokens would be made up.
            s.token_agreement
                .retain(|a| a.source != cadence_core::TokenSource::Chunks);
            s.warnings
                .retain(|w| !w.contains("more tokens than chunks"));
        }
        if imp.lacks(Lack::SendTimes) {
            s.throughput.output_tokens_per_s = None;
            s.throughput.requests_per_s = None;
            s.throughput.window_s = None;
            s.ttft_response = None;
            l.time_series.clear();
            l.pacing = None;
        }
    }
    report.imported = Some(imp.section());
    report.definitions.insert(
        "imported".into(),
        cadence_core::imported::FORMULA.to_string(),
    );
}

/// The figure rows of a tool: its saved value under `name` beside the rebuild.
pub(crate) fn figure(
    name: &str,
    unit: &str,
    printed: Option<f64>,
    rebuilt: Option<f64>,
    definition: &str,
) -> ImportedFigure {
    ImportedFigure {
        name: name.to_string(),
        unit: unit.to_string(),
        printed,
        rebuilt,
        definition: definition.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tools_parse_and_detection_reads_the_keys() {
        for t in Tool::ALL {
            assert_eq!(t.name().parse::<Tool>().unwrap(), t);
        }
        assert!("x".parse::<Tool>().is_err());
        assert_eq!(
            detect_text(r#"{"duration": 1, "ttfts": [0.1], "itls": [[]]}"#),
            Some(Tool::Vllm)
        );
        assert_eq!(
            detect_text(r#"{"metadata": {"request_start_ns": 1}, "metrics": {}}"#),
            Some(Tool::Aiperf)
        );
        assert_eq!(
            detect_text(r#"[{"ttft_s": 0.1, "end_to_end_latency_s": 1}]"#),
            Some(Tool::Llmperf)
        );
        assert_eq!(
            detect_text(r#"{"benchmarks": [{"requests": {}}]}"#),
            Some(Tool::Guidellm)
        );
        assert_eq!(detect_text(r#"{"index":0,"outcome":"succeeded"}"#), None);
        // Both vLLM's lists and GuideLLM's benchmarks: both named.
        let both = r#"{"benchmarks": [{"requests": {}}], "ttfts": [0.1], "itls": [[]]}"#;
        assert_eq!(detect_all(both), vec![Tool::Guidellm, Tool::Vllm]);
        let path = std::env::temp_dir().join(format!("cadence-both-{}.json", std::process::id()));
        std::fs::write(&path, both).unwrap();
        let e = detect(&path).unwrap_err();
        std::fs::remove_file(&path).unwrap();
        assert!(
            e.msg.contains("looks like both guidellm and vllm output")
                && e.msg.contains("--from guidellm or --from vllm"),
            "{e}"
        );
        assert_eq!(
            detect_text("{\n  \"schema_version\": \"1.4\",\n  \"aiperf_version\": \"0.13.0\""),
            Some(Tool::Aiperf)
        );
        assert_eq!(
            detect_text("{\n  \"schema_version\": 1,\n  \"cadence_version\": \"0.1.0\""),
            None
        );
    }
}

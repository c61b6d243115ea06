//! The Prometheus/OpenMetrics text parser and the mapping of each engine's metric
//! families (vLLM, SGLang, TGI, llama.cpp, TensorRT-LLM, Cadence's simulator) to the
//! common figures of [`crate::server`]: pure text in, figures out, beside the model it
//! fills, so each engine's names are tested with hand-written pages. The scraper
//! (`cadence_bench::scrape`) owns the socket and the clock.

use super::{ServerFigures, ServerSample, SumCount, MAX_RAW_SERIES, MAX_SPEC_POSITIONS};
use std::collections::BTreeMap;

/// One parsed series line: name, labels and value (a timestamp, if any, is dropped).
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The metric name (a histogram's `_sum`/`_count`/`_bucket` suffix kept).
    pub name: String,
    /// The labels, in the order written.
    pub labels: Vec<(String, String)>,
    /// The sample's value.
    pub value: f64,
}

/// A line that is neither a comment, blank, nor `name{labels} value [timestamp]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParseError {
    /// The line, from 1.
    pub line: usize,
    /// What is wrong with it.
    pub why: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.why)
    }
}

impl std::error::Error for ParseError {}

/// Parses the Prometheus text exposition format (0.0.4) and OpenMetrics 1.0 text:
/// `# HELP`/`# TYPE`/`# EOF` and other comments are skipped, label values may hold
/// escaped quotes, `NaN`/`+Inf`/`-Inf` are values. Exemplars (` # {...}`) are dropped.
pub fn parse_text(text: &str) -> Result<Vec<Series>, ParseError> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let err = |why: &str| ParseError {
            line: i + 1,
            why: why.to_string(),
        };
        let name_end = line
            .find(|c: char| c == '{' || c.is_whitespace())
            .ok_or_else(|| err("a series has a name and a value"))?;
        let name = &line[..name_end];
        if !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ':')
        {
            return Err(err(
                "the metric name has characters Prometheus does not allow",
            ));
        }
        let (labels, rest) = if line[name_end..].starts_with('{') {
            parse_labels(&line[name_end + 1..]).map_err(|w| err(&w))?
        } else {
            (Vec::new(), &line[name_end..])
        };
        let rest = rest.split(" # ").next().unwrap_or("");
        let value = rest
            .split_whitespace()
            .next()
            .ok_or_else(|| err("the series has no value"))?;
        let value = parse_value(value).ok_or_else(|| err("the value is not a number"))?;
        out.push(Series {
            name: name.to_string(),
            labels,
            value,
        });
    }
    Ok(out)
}

fn parse_value(s: &str) -> Option<f64> {
    match s {
        "+Inf" | "Inf" => Some(f64::INFINITY),
        "-Inf" => Some(f64::NEG_INFINITY),
        "NaN" => Some(f64::NAN),
        _ => s.parse().ok(),
    }
}

type Labels<'a> = (Vec<(String, String)>, &'a str);

/// Labels after the `{`, up to and including the `}`; returns what follows.
fn parse_labels(mut s: &str) -> Result<Labels<'_>, String> {
    let mut labels = Vec::new();
    loop {
        s = s.trim_start_matches([' ', ',']);
        if let Some(rest) = s.strip_prefix('}') {
            return Ok((labels, rest));
        }
        let eq = s.find('=').ok_or("a label has no '='")?;
        let key = s[..eq].trim().to_string();
        let after = s[eq + 1..].trim_start();
        let body = after
            .strip_prefix('"')
            .ok_or("a label value is not quoted")?;
        let mut value = String::new();
        let mut chars = body.char_indices();
        let end = loop {
            match chars.next() {
                Some((_, '\\')) => match chars.next() {
                    Some((_, 'n')) => value.push('\n'),
                    Some((_, c)) => value.push(c),
                    None => return Err("a label value ends in a backslash".into()),
                },
                Some((j, '"')) => break j,
                Some((_, c)) => value.push(c),
                None => return Err("a label value is not closed".into()),
            }
        };
        labels.push((key, value));
        s = &body[end + 1..];
    }
}

/// A field of [`ServerFigures`] a known series maps to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Field {
    Running,
    Waiting,
    KvUsage,
    /// A percentage (0–100) of the KV cache.
    KvPercent,
    Preemptions,
    PrefixHits,
    Prompt,
    Generation,
    Queue,
    Prefill,
    Decode,
    Ttft,
    Itl,
    Tpot,
    E2e,
    SpecDrafts,
    SpecDraftTokens,
    SpecAccepted,
    /// A counter per draft position (the `position` label).
    SpecAcceptedAt,
    SpecAcceptLength,
    SpecAcceptRate,
    KvTransfer,
    /// A KV-transfer histogram in milliseconds (SGLang).
    KvTransferMs,
    KvTransferBytes,
    KvTransferFailures,
}

/// Known families: the name (a histogram's base name) and its common field. Where a
/// page carries two names for one field (vLLM's `inter_token_latency_seconds` beside
/// its older `time_per_output_token_seconds`; a simulator speaking vLLM's and SGLang's
/// KV-transfer names; Dynamo's frontend beside its workers' vLLM series), the first
/// listed here is read and the others are kept raw, so nothing is counted twice.
const FAMILIES: &[(&str, Field)] = &[
    // NVIDIA Dynamo's frontend (its HTTP entry, before the prefill and decode workers:
    // its TTFT holds the queue, the prefill and the KV transfer between them). First,
    // so the frontend's view wins over a worker's on a page that has both. Its
    // per-worker gauges are read by [`super::dynamo`].
    ("dynamo_frontend_time_to_first_token_seconds", Field::Ttft),
    ("dynamo_frontend_inter_token_latency_seconds", Field::Itl),
    ("dynamo_frontend_request_duration_seconds", Field::E2e),
    ("dynamo_frontend_inflight_requests", Field::Running),
    // vLLM (and Cadence's simulator, which names its metrics as vLLM does).
    ("vllm:num_requests_running", Field::Running),
    ("vllm:num_requests_waiting", Field::Waiting),
    ("vllm:kv_cache_usage_perc", Field::KvUsage),
    ("vllm:gpu_cache_usage_perc", Field::KvUsage),
    ("vllm:num_preemptions_total", Field::Preemptions),
    ("vllm:prefix_cache_hits_total", Field::PrefixHits),
    ("vllm:prompt_tokens_total", Field::Prompt),
    ("vllm:generation_tokens_total", Field::Generation),
    ("vllm:request_queue_time_seconds", Field::Queue),
    ("vllm:request_prefill_time_seconds", Field::Prefill),
    ("vllm:request_decode_time_seconds", Field::Decode),
    ("vllm:time_to_first_token_seconds", Field::Ttft),
    ("vllm:inter_token_latency_seconds", Field::Itl),
    ("vllm:time_per_output_token_seconds", Field::Itl),
    ("vllm:request_time_per_output_token_seconds", Field::Tpot),
    ("vllm:e2e_request_latency_seconds", Field::E2e),
    ("vllm:nixl_xfer_time_seconds", Field::KvTransfer),
    ("vllm:nixl_bytes_transferred", Field::KvTransferBytes),
    (
        "vllm:nixl_num_failed_transfers_total",
        Field::KvTransferFailures,
    ),
    ("vllm:spec_decode_num_drafts_total", Field::SpecDrafts),
    (
        "vllm:spec_decode_num_draft_tokens_total",
        Field::SpecDraftTokens,
    ),
    (
        "vllm:spec_decode_num_accepted_tokens_total",
        Field::SpecAccepted,
    ),
    (
        "vllm:spec_decode_num_accepted_tokens_per_pos_total",
        Field::SpecAcceptedAt,
    ),
    // SGLang.
    ("sglang:num_running_reqs", Field::Running),
    ("sglang:num_queue_reqs", Field::Waiting),
    ("sglang:token_usage", Field::KvUsage),
    ("sglang:prompt_tokens_total", Field::Prompt),
    ("sglang:generation_tokens_total", Field::Generation),
    ("sglang:queue_time_seconds", Field::Queue),
    ("sglang:time_to_first_token_seconds", Field::Ttft),
    ("sglang:inter_token_latency_seconds", Field::Itl),
    ("sglang:time_per_output_token_seconds", Field::Itl),
    ("sglang:e2e_request_latency_seconds", Field::E2e),
    ("sglang:kv_transfer_latency_ms", Field::KvTransferMs),
    (
        "sglang:num_transfer_failed_reqs_total",
        Field::KvTransferFailures,
    ),
    ("sglang:spec_accept_length", Field::SpecAcceptLength),
    ("sglang:spec_accept_rate", Field::SpecAcceptRate),
    // Text Generation Inference.
    ("tgi_batch_current_size", Field::Running),
    ("tgi_queue_size", Field::Waiting),
    ("tgi_request_input_length", Field::Prompt),
    ("tgi_request_generated_tokens", Field::Generation),
    ("tgi_request_queue_duration", Field::Queue),
    ("tgi_request_mean_time_per_token_duration", Field::Tpot),
    ("tgi_request_duration", Field::E2e),
    // llama.cpp's llama-server --metrics.
    ("llamacpp:requests_processing", Field::Running),
    ("llamacpp:requests_deferred", Field::Waiting),
    ("llamacpp:kv_cache_usage_ratio", Field::KvUsage),
    ("llamacpp:prompt_tokens_total", Field::Prompt),
    ("llamacpp:tokens_predicted_total", Field::Generation),
    // TensorRT-LLM's Triton backend reports KV blocks as a percentage.
    ("nv_trt_llm_kv_cache_block_metrics_fraction", Field::KvUsage),
    ("trtllm_kv_cache_utilization", Field::KvPercent),
];

/// The engine family the series' names belong to.
pub fn engine_family(series: &[Series]) -> &'static str {
    let has = |p: &str| series.iter().any(|s| s.name.starts_with(p));
    if has("cadence_sim_") && has("vllm:") {
        "cadence-sim"
    } else if has("dynamo_") {
        "dynamo"
    } else if has("vllm:") {
        "vllm"
    } else if has("sglang:") {
        "sglang"
    } else if has("tgi_") {
        "tgi"
    } else if has("llamacpp:") {
        "llamacpp"
    } else if has("trtllm") || has("nv_trt_llm") {
        "tensorrt-llm"
    } else {
        "unknown"
    }
}

/// Maps parsed series to one sample at `t_ns`: series of one name are summed over
/// their labels (KV usage takes the highest), histograms give `_sum` and `_count`,
/// and what no family knows is kept raw (buckets and `_created` left out).
pub fn to_sample(series: &[Series], t_ns: u64) -> ServerSample {
    let mut f = ServerFigures::default();
    let mut raw: BTreeMap<String, f64> = BTreeMap::new();
    let mut decode_seconds = None;
    let read = names_read(series);
    for s in series.iter().filter(|s| s.value.is_finite()) {
        let (base, part) = split_histogram(&s.name);
        let known = FAMILIES
            .iter()
            .find(|(n, _)| *n == s.name || (part.is_some() && *n == base))
            .filter(|(n, _)| read.contains(n));
        match known {
            Some((_, Field::SpecAcceptedAt)) => add_at_position(&mut f, s),
            Some((_, field)) => apply(&mut f, *field, part, s.value),
            None if s.name == "llamacpp:tokens_predicted_seconds_total" => {
                *decode_seconds.get_or_insert(0.0) += s.value;
            }
            None if super::dynamo::is_worker_gauge(&s.name) => {}
            None => {
                let skip = s.name.ends_with("_bucket") || s.name.ends_with("_created");
                if !skip && (raw.len() < MAX_RAW_SERIES || raw.contains_key(&s.name)) {
                    *raw.entry(s.name.clone()).or_default() += s.value;
                }
            }
        }
    }
    derive_decode(&mut f, decode_seconds);
    f.workers = super::dynamo::worker_gauges(
        series
            .iter()
            .map(|s| (s.name.as_str(), s.labels.as_slice(), s.value)),
    );
    if f.waiting.is_none() {
        f.waiting = super::dynamo::waiting(&f.workers);
    }
    ServerSample {
        t_ns,
        figures: f,
        raw,
    }
}

/// The field a known name fills: a field in another unit fills the same one.
fn slot(field: Field) -> Field {
    match field {
        Field::KvTransferMs => Field::KvTransfer,
        Field::KvPercent => Field::KvUsage,
        other => other,
    }
}

/// The known names the page's series are read from: per field, the first of
/// [`FAMILIES`] the page carries.
fn names_read(series: &[Series]) -> Vec<&'static str> {
    let on_page = |name: &str| {
        series.iter().any(|s| {
            let (base, part) = split_histogram(&s.name);
            s.name == name || (part.is_some() && base == name)
        })
    };
    let mut read: Vec<(Field, &'static str)> = Vec::new();
    for &(name, field) in FAMILIES {
        if !read.iter().any(|(f, _)| *f == slot(field)) && on_page(name) {
            read.push((slot(field), name));
        }
    }
    read.into_iter().map(|(_, n)| n).collect()
}

/// One draft position's accepted tokens, by its `position` label (from 0); a
/// series without one, or past [`MAX_SPEC_POSITIONS`], is left out.
fn add_at_position(f: &mut ServerFigures, s: &Series) {
    let position = s
        .labels
        .iter()
        .find(|(k, _)| k == "position")
        .and_then(|(_, v)| v.parse::<usize>().ok())
        .filter(|&p| p < MAX_SPEC_POSITIONS);
    if let Some(p) = position {
        let v = &mut f.spec_accepted_by_position;
        if v.len() <= p {
            v.resize(p + 1, 0.0);
        }
        v[p] += s.value;
    }
}

/// A per-token decode figure: llama.cpp's decode seconds over its predicted tokens;
/// vLLM's per-request decode time over the tokens after each request's first.
fn derive_decode(f: &mut ServerFigures, llamacpp_seconds: Option<f64>) {
    if let (Some(sum), Some(tokens)) = (llamacpp_seconds, f.generation_tokens) {
        f.decode = Some(SumCount { sum, count: tokens });
    } else if let (Some(d), Some(tokens)) = (f.decode, f.generation_tokens) {
        f.decode = Some(SumCount {
            sum: d.sum,
            count: (tokens - d.count).max(0.0),
        });
    } else {
        f.decode = None;
    }
}

/// `x_sum` → (`x`, Some(Sum)), `x_count` → (`x`, Some(Count)), else (name, None).
fn split_histogram(name: &str) -> (&str, Option<Part>) {
    if let Some(b) = name.strip_suffix("_sum") {
        (b, Some(Part::Sum))
    } else if let Some(b) = name.strip_suffix("_count") {
        (b, Some(Part::Count))
    } else {
        (name, None)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Part {
    Sum,
    Count,
}

fn apply(f: &mut ServerFigures, field: Field, part: Option<Part>, v: f64) {
    let add = |slot: &mut Option<f64>| *slot = Some(slot.unwrap_or(0.0) + v);
    let hist = |slot: &mut Option<SumCount>| {
        let h = slot.get_or_insert_with(SumCount::default);
        match part {
            Some(Part::Sum) => h.sum += v,
            Some(Part::Count) => h.count += v,
            None => {}
        }
    };
    // A histogram of token counts (TGI) gives its sum as the counter.
    let tokens = |slot: &mut Option<f64>| match part {
        Some(Part::Count) => {}
        _ => add(slot),
    };
    match field {
        Field::Running => add(&mut f.running),
        Field::Waiting => add(&mut f.waiting),
        Field::KvUsage => f.kv_usage = Some(f.kv_usage.unwrap_or(0.0).max(v)),
        Field::KvPercent => f.kv_usage = Some(f.kv_usage.unwrap_or(0.0).max(v / 100.0)),
        Field::Preemptions => add(&mut f.preemptions),
        Field::PrefixHits => add(&mut f.prefix_cache_hits),
        Field::Prompt => tokens(&mut f.prompt_tokens),
        Field::Generation => tokens(&mut f.generation_tokens),
        Field::Queue => hist(&mut f.queue),
        Field::Prefill => hist(&mut f.prefill),
        Field::Decode => hist(&mut f.decode),
        Field::Ttft => hist(&mut f.ttft),
        Field::Itl => hist(&mut f.itl),
        Field::Tpot => hist(&mut f.tpot),
        Field::E2e => hist(&mut f.e2e),
        Field::SpecDrafts => add(&mut f.spec_drafts),
        Field::SpecDraftTokens => add(&mut f.spec_draft_tokens),
        Field::SpecAccepted => add(&mut f.spec_accepted),
        // Read by name and label in to_sample.
        Field::SpecAcceptedAt => {}
        // A mean over the engine's ranks: each reads alike, so the last one read.
        Field::SpecAcceptLength => f.spec_accept_length = Some(v),
        Field::SpecAcceptRate => f.spec_accept_rate = Some(v),
        Field::KvTransfer => hist(&mut f.kv_transfer),
        Field::KvTransferMs => {
            let seconds = if part == Some(Part::Sum) { v / 1e3 } else { v };
            let h = f.kv_transfer.get_or_insert_with(SumCount::default);
            match part {
                Some(Part::Sum) => h.sum += seconds,
                Some(Part::Count) => h.count += seconds,
                // An older SGLang's gauge of the last transfer: no sum to take.
                None => {}
            }
        }
        Field::KvTransferBytes => hist(&mut f.kv_transfer_bytes),
        Field::KvTransferFailures => add(&mut f.kv_transfer_failures),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const VLLM: &str = r#"# HELP vllm:num_requests_running Requests holding a batch slot
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{model_name="m",engine="0"} 3
vllm:num_requests_running{model_name="m",engine="1"} 2
vllm:num_requests_waiting{model_name="m"} 1
vllm:kv_cache_usage_perc{model_name="m",engine="0"} 0.25
vllm:kv_cache_usage_perc{model_name="m",engine="1"} 0.5
vllm:num_preemptions_total{model_name="m"} 7
vllm:prompt_tokens_total{model_name="m"} 1000
vllm:generation_tokens_total{model_name="m"} 640
vllm:request_decode_time_seconds_bucket{le="+Inf",model_name="m"} 10
vllm:request_decode_time_seconds_sum{model_name="m"} 6.3
vllm:request_decode_time_seconds_count{model_name="m"} 10
vllm:request_queue_time_seconds_sum{model_name="m"} 0.5
vllm:request_queue_time_seconds_count{model_name="m"} 10
vllm:request_queue_time_seconds_created{model_name="m"} 1.7e9
process_open_fds 12
# EOF
"#;

    #[test]
    fn parses_labels_escapes_special_values_and_exemplars() {
        let text = "a{x=\"q\\\"uo,te}\",y=\"\"} 1.5 1700000000\nb NaN\nc{} +Inf\nd_total 3 # {trace_id=\"abc\"} 1\n";
        let s = parse_text(text).unwrap();
        assert_eq!(s.len(), 4);
        assert_eq!(s[0].name, "a");
        assert_eq!(
            s[0].labels,
            vec![("x".into(), "q\"uo,te}".into()), ("y".into(), "".into())]
        );
        assert_eq!(s[0].value, 1.5);
        assert!(s[1].value.is_nan());
        assert_eq!(s[2].value, f64::INFINITY);
        assert_eq!(s[3].value, 3.0);
    }

    #[test]
    fn a_broken_line_is_named() {
        let e = parse_text("ok 1\nbroken{x=\"1\" 2\n").unwrap_err();
        assert_eq!(e.line, 2);
        let e = parse_text("no_value\n").unwrap_err();
        assert_eq!(e.line, 1);
        let e = parse_text("<html> 1\n").unwrap_err();
        assert!(e.why.contains("name"), "{e}");
    }

    #[test]
    fn vllm_families_map_to_the_common_set() {
        let series = parse_text(VLLM).unwrap();
        assert_eq!(engine_family(&series), "vllm");
        let s = to_sample(&series, 42);
        let f = &s.figures;
        assert_eq!(s.t_ns, 42);
        assert_eq!(f.running, Some(5.0), "summed over engines");
        assert_eq!(f.waiting, Some(1.0));
        assert_eq!(f.kv_usage, Some(0.5), "the fullest engine");
        assert_eq!(f.preemptions, Some(7.0));
        assert_eq!(f.prompt_tokens, Some(1000.0));
        assert_eq!(f.generation_tokens, Some(640.0));
        assert_eq!(
            f.queue,
            Some(SumCount {
                sum: 0.5,
                count: 10.0
            })
        );
        // 10 requests decoded 640 − 10 tokens after their first in 6.3 s.
        assert_eq!(
            f.decode,
            Some(SumCount {
                sum: 6.3,
                count: 630.0
            })
        );
        assert_eq!(s.raw.get("process_open_fds"), Some(&12.0));
        assert_eq!(
            s.raw.len(),
            1,
            "buckets and _created are not kept: {:?}",
            s.raw
        );
    }

    #[test]
    fn llamacpp_families_map_to_the_common_set() {
        let text = "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 120\nllamacpp:prompt_seconds_total 0.4\nllamacpp:tokens_predicted_total 300\nllamacpp:tokens_predicted_seconds_total 1.5\nllamacpp:requests_processing 2\nllamacpp:requests_deferred 0\n";
        let series = parse_text(text).unwrap();
        assert_eq!(engine_family(&series), "llamacpp");
        let f = to_sample(&series, 0).figures;
        assert_eq!(f.prompt_tokens, Some(120.0));
        assert_eq!(f.generation_tokens, Some(300.0));
        assert_eq!(f.running, Some(2.0));
        assert_eq!(f.waiting, Some(0.0));
        assert_eq!(
            f.decode,
            Some(SumCount {
                sum: 1.5,
                count: 300.0
            })
        );
    }

    #[test]
    fn sglang_and_tgi_families_map_too() {
        let s = parse_text("sglang:num_running_reqs 4\nsglang:num_queue_reqs 2\nsglang:token_usage 0.7\nsglang:generation_tokens_total 50\n").unwrap();
        assert_eq!(engine_family(&s), "sglang");
        let f = to_sample(&s, 0).figures;
        assert_eq!(
            (f.running, f.waiting, f.kv_usage),
            (Some(4.0), Some(2.0), Some(0.7))
        );
        assert_eq!(f.generation_tokens, Some(50.0));
        let t = parse_text("tgi_batch_current_size 3\ntgi_queue_size 1\ntgi_request_generated_tokens_sum 90\ntgi_request_generated_tokens_count 3\ntgi_request_queue_duration_sum 0.3\ntgi_request_queue_duration_count 3\n").unwrap();
        assert_eq!(engine_family(&t), "tgi");
        let f = to_sample(&t, 0).figures;
        assert_eq!(f.running, Some(3.0));
        assert_eq!(f.generation_tokens, Some(90.0), "the token histogram's sum");
        assert_eq!(
            f.queue,
            Some(SumCount {
                sum: 0.3,
                count: 3.0
            })
        );
    }

    #[test]
    fn speculation_counters_map_by_name_and_position() {
        let text = "vllm:spec_decode_num_drafts_total{model_name=\"m\",engine=\"0\"} 40\n\
vllm:spec_decode_num_drafts_total{model_name=\"m\",engine=\"1\"} 10\n\
vllm:spec_decode_num_draft_tokens_total{model_name=\"m\"} 100\n\
vllm:spec_decode_num_accepted_tokens_total{model_name=\"m\"} 75\n\
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"1\"} 25\n\
vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"m\",position=\"0\"} 50\n\
vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"99\"} 1\n\
vllm:spec_decode_num_accepted_tokens_per_pos_total{position=\"x\"} 1\n";
        let f = to_sample(&parse_text(text).unwrap(), 0).figures;
        assert_eq!(f.spec_drafts, Some(50.0), "summed over engines");
        assert_eq!(f.spec_draft_tokens, Some(100.0));
        assert_eq!(f.spec_accepted, Some(75.0));
        assert_eq!(
            f.spec_accepted_by_position,
            [50.0, 25.0],
            "by label, a position past the bound or not a number left out"
        );
        let s = parse_text("sglang:spec_accept_length{model_name=\"m\"} 2.5\nsglang:spec_accept_rate{model_name=\"m\"} 0.75\n").unwrap();
        let f = to_sample(&s, 0).figures;
        assert_eq!(
            (f.spec_accept_length, f.spec_accept_rate),
            (Some(2.5), Some(0.75))
        );
    }

    #[test]
    fn disaggregations_kv_transfer_maps_from_vllm_and_sglang() {
        let text = "vllm:nixl_xfer_time_seconds_sum{engine=\"0\"} 0.25\n\
vllm:nixl_xfer_time_seconds_count{engine=\"0\"} 3\n\
vllm:nixl_xfer_time_seconds_bucket{engine=\"0\",le=\"+Inf\"} 3\n\
vllm:nixl_bytes_transferred_sum{engine=\"0\"} 3000000\n\
vllm:nixl_bytes_transferred_count{engine=\"0\"} 3\n\
vllm:nixl_num_failed_transfers_total{engine=\"0\"} 1\n";
        let s = to_sample(&parse_text(text).unwrap(), 0);
        let f = &s.figures;
        assert_eq!(
            f.kv_transfer,
            Some(SumCount {
                sum: 0.25,
                count: 3.0
            })
        );
        assert_eq!(
            f.kv_transfer_bytes,
            Some(SumCount {
                sum: 3e6,
                count: 3.0
            })
        );
        assert_eq!(f.kv_transfer_failures, Some(1.0));
        assert!(s.raw.is_empty(), "{:?}", s.raw);
        // SGLang's latency histogram is in milliseconds: read as seconds.
        let text = "sglang:kv_transfer_latency_ms_sum 500\nsglang:kv_transfer_latency_ms_count 4\nsglang:num_transfer_failed_reqs_total 2\n";
        let f = to_sample(&parse_text(text).unwrap(), 0).figures;
        assert_eq!(
            f.kv_transfer,
            Some(SumCount {
                sum: 0.5,
                count: 4.0
            })
        );
        assert_eq!(f.kv_transfer_failures, Some(2.0));
    }

    #[test]
    fn dynamos_frontend_maps_its_latencies_summed_over_worker_types() {
        let text = "dynamo_frontend_time_to_first_token_seconds_sum{model=\"m\",worker_type=\"prefill\"} 0.6\n\
dynamo_frontend_time_to_first_token_seconds_count{model=\"m\",worker_type=\"prefill\"} 2\n\
dynamo_frontend_time_to_first_token_seconds_sum{model=\"m\",worker_type=\"decode\"} 0.3\n\
dynamo_frontend_time_to_first_token_seconds_count{model=\"m\",worker_type=\"decode\"} 1\n\
dynamo_frontend_inter_token_latency_seconds_sum{model=\"m\"} 0.5\n\
dynamo_frontend_inter_token_latency_seconds_count{model=\"m\"} 100\n\
dynamo_frontend_request_duration_seconds_sum{model=\"m\"} 3\n\
dynamo_frontend_request_duration_seconds_count{model=\"m\"} 3\n\
vllm:num_requests_running{engine=\"0\"} 2\n";
        let series = parse_text(text).unwrap();
        assert_eq!(
            engine_family(&series),
            "dynamo",
            "its workers' vLLM series beside it"
        );
        let f = to_sample(&series, 0).figures;
        let sc = |sum, count| Some(SumCount { sum, count });
        assert_eq!(f.ttft, sc(0.8999999999999999, 3.0));
        assert_eq!(f.itl, sc(0.5, 100.0));
        assert_eq!(f.e2e, sc(3.0, 3.0));
        assert_eq!(f.running, Some(2.0));
    }

    #[test]
    fn dynamos_worker_gauges_are_read_not_kept_raw() {
        let text = "dynamo_frontend_worker_active_prefill_tokens{worker_id=\"1\",dp_rank=\"0\",worker_type=\"prefill\"} 300\n\
dynamo_frontend_worker_waiting_requests{worker_id=\"1\",dp_rank=\"0\",worker_type=\"prefill\"} 2\n\
dynamo_frontend_router_queue_pending_requests{worker_type=\"decode\"} 3\n\
dynamo_frontend_inflight_requests{model=\"m\"} 9\n";
        let s = to_sample(&parse_text(text).unwrap(), 0);
        assert_eq!(
            s.figures.workers["prefill"].active_prefill_tokens,
            Some(300.0)
        );
        assert_eq!(
            s.figures.running,
            Some(9.0),
            "the frontend's in-flight gauge"
        );
        assert_eq!(
            s.figures.waiting,
            Some(5.0),
            "the workers' and the router's queue"
        );
        assert!(s.raw.is_empty(), "{:?}", s.raw);
    }

    #[test]
    fn two_names_for_one_field_are_read_once() {
        // vLLM during its rename exports the gap histogram under both names.
        let text = "vllm:inter_token_latency_seconds_sum 2\nvllm:inter_token_latency_seconds_count 100\n\
vllm:time_per_output_token_seconds_sum 2\nvllm:time_per_output_token_seconds_count 100\n\
vllm:nixl_xfer_time_seconds_sum 0.4\nvllm:nixl_xfer_time_seconds_count 10\n\
sglang:kv_transfer_latency_ms_sum 400\nsglang:kv_transfer_latency_ms_count 10\n\
vllm:time_to_first_token_seconds_sum 1\nvllm:time_to_first_token_seconds_count 10\n\
dynamo_frontend_time_to_first_token_seconds_sum 3\ndynamo_frontend_time_to_first_token_seconds_count 10\n";
        let s = to_sample(&parse_text(text).unwrap(), 0);
        let sc = |sum, count| Some(SumCount { sum, count });
        assert_eq!(s.figures.itl, sc(2.0, 100.0), "not 200 gaps");
        assert_eq!(s.figures.kv_transfer, sc(0.4, 10.0), "vLLM's, not both");
        assert_eq!(
            s.figures.ttft,
            sc(3.0, 10.0),
            "the frontend's, not its worker's"
        );
        assert_eq!(
            s.raw.get("vllm:time_per_output_token_seconds_count"),
            Some(&100.0)
        );
        assert_eq!(s.raw.get("sglang:kv_transfer_latency_ms_sum"), Some(&400.0));
        assert_eq!(
            s.raw.get("vllm:time_to_first_token_seconds_sum"),
            Some(&1.0)
        );
    }

    #[test]
    fn an_unknown_engine_is_kept_raw_and_bounded() {
        let mut text = String::new();
        for i in 0..(MAX_RAW_SERIES + 10) {
            text.push_str(&format!("x_{i} {i}\n"));
        }
        let series = parse_text(&text).unwrap();
        assert_eq!(engine_family(&series), "unknown");
        let s = to_sample(&series, 0);
        assert_eq!(s.raw.len(), MAX_RAW_SERIES);
        assert_eq!(s.figures, ServerFigures::default());
    }

    #[test]
    fn a_sample_round_trips_as_json() {
        let s = to_sample(&parse_text(VLLM).unwrap(), 9);
        let j = serde_json::to_string(&s).unwrap();
        assert!(j.contains(r#""running":5.0"#), "{j}");
        assert_eq!(serde_json::from_str::<ServerSample>(&j).unwrap(), s);
    }
}

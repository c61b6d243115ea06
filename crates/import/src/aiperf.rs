//! AIPerf's `profile_export.jsonl`: one JSON line per request with its wall-clock send
//! and end (`metadata.request_start_ns`, `request_end_ns`), its metrics (TTFT, request
//! latency, every gap between chunks as `inter_chunk_latency`, the output length its
//! tokenizer counted, and the server's `usage_completion_tokens` when sent) and its
//! error. The `profile_export_aiperf.json` beside it holds AIPerf's summary, rebuilt
//! here under AIPerf's definitions (its ITL divides by its own token count).

use crate::build::{self, Lack, Req};
use crate::json::{numbers, parse, Obj};
use crate::numpy;
use crate::{figure, ImportError, Imported, Tool};
use cadence_core::{ImportedFigure, InputTokenSource, Outcome, RequestRecord, TokenSource};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// `profile_export_aiperf.json` in the same directory, when it exists.
pub fn summary_beside(path: &Path) -> Option<PathBuf> {
    let p = path.with_file_name("profile_export_aiperf.json");
    (p != path && p.is_file()).then_some(p)
}

/// A metric's value in `unit`, converted to milliseconds.
fn to_ms(x: f64, unit: Option<&str>) -> f64 {
    match unit {
        Some("ns") => x / 1e6,
        Some("us") => x / 1e3,
        Some("s") | Some("sec") => x * 1e3,
        _ => x,
    }
}

/// One `profile_export.jsonl` line, read.
struct Line {
    req: Req,
    start_ns: Option<u64>,
    warmup: bool,
    /// AIPerf's own output-token count (its tokenizer's), for its ITL; `None` unless
    /// the request succeeded.
    osl: Option<u64>,
    /// The server sent its own count (`usage_completion_tokens`).
    server_count: bool,
    /// A succeeded request without its chunk gaps.
    lacks_gaps: bool,
    /// What tells this request from every other: AIPerf's `x_request_id`, else its
    /// send and end times.
    key: Option<String>,
}

/// Reads AIPerf's per-request file and, when given, the summary beside it.
pub fn import(
    file: &str,
    text: &str,
    summary: Option<(&str, &str)>,
) -> Result<Imported, ImportError> {
    if text.trim_start().starts_with('{')
        && text.contains("\"aiperf_version\"")
        && !text.contains("\"request_start_ns\"")
    {
        return Err(ImportError::new(
            file,
            "AIPerf's summary holds no per-request values: give the profile_export.jsonl beside it (the summary is read from there too)",
        ));
    }
    let mut lines = Vec::new();
    let mut seen = std::collections::HashMap::new();
    let mut repeats = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if !line.trim().is_empty() {
            let l = read_line(file, &format!("line {}", i + 1), line)?;
            if let Some(key) = &l.key {
                let first = *seen.entry(key.clone()).or_insert(i + 1);
                if first != i + 1 {
                    // A concatenated export: the request is counted once.
                    repeats.push(format!(
                        "line {} repeats line {first} (the same request, {key})",
                        i + 1
                    ));
                    continue;
                }
            }
            lines.push(l);
        }
    }
    if lines.is_empty() {
        return Err(ImportError::new(file, "holds no AIPerf records"));
    }
    let mut lacks = Vec::new();
    if lines.iter().any(|l| l.lacks_gaps) {
        lacks.push(Lack::ChunkTimes);
    }
    let first_start_ns = lines.iter().filter_map(|l| l.start_ns).min();
    let reqs: Vec<Req> = lines
        .iter()
        .map(|l| Req {
            // From the earliest start, in whole nanoseconds (epoch times lose them in
            // an f64).
            sent_s: l
                .start_ns
                .map(|ns| (ns - first_start_ns.unwrap_or(0)) as f64 / 1e9),
            ..l.req.clone()
        })
        .collect();
    if reqs.iter().all(|r| r.sent_s.is_none()) {
        lacks.push(Lack::SendTimes);
    }
    if !lines.iter().any(|l| l.server_count) {
        lacks.push(Lack::ServerTokens);
    }
    let mut records = build::records(Tool::Aiperf, file, &reqs)?;
    let osl: Vec<Option<u64>> = lines.iter().map(|l| l.osl).collect();
    for (r, l) in records.iter_mut().zip(&lines) {
        r.warmup = l.warmup;
        // Keep AIPerf's own count beside the server's, as a token source.
        if let Some(n) = l.osl {
            r.token_sources.tokenizer = Some(n);
        }
    }
    let mut imported = Imported {
        tool: Tool::Aiperf,
        version: None,
        files: vec![file.to_string()],
        model: None,
        target: None,
        api: None,
        levels: vec![crate::Level::new(Tool::Aiperf, None, None)],
        duration_s: None,
        started_at_unix_ms: first_start_ns.map(|ns| ns / 1_000_000),
        records,
        lacks,
        figures: Vec::new(),
        notes: Vec::new(),
        warnings: repeated(&repeats).into_iter().collect(),
    };
    read_summary(&mut imported, summary, &osl)?;
    Ok(imported)
}

/// The warning for requests read more than once (each counted once): how many, the
/// first five named by line, the rest counted.
fn repeated(repeats: &[String]) -> Option<String> {
    const NAMED: usize = 5;
    let (n, shown) = (repeats.len(), repeats.len().min(NAMED));
    let more = match n - shown {
        0 => String::new(),
        m => format!(", and {m} more"),
    };
    (n > 0).then(|| {
        format!(
            "{n} repeated request{} counted once: {}{more}",
            if n == 1 { "" } else { "s" },
            repeats[..shown].join("; ")
        )
    })
}

/// AIPerf's summary (`profile_export_aiperf.json`): its version, concurrency and
/// figures rebuilt from `imported`'s records; a note when there is none.
fn read_summary(
    imported: &mut Imported,
    summary: Option<(&str, &str)>,
    osl: &[Option<u64>],
) -> Result<(), ImportError> {
    let Some((sf, st)) = summary else {
        imported.notes.push(
            "no profile_export_aiperf.json beside the file: AIPerf's own figures are not shown"
                .into(),
        );
        return Ok(());
    };
    imported.files.push(sf.to_string());
    let sv = parse(sf, st)?;
    let top = Obj::new(sf, &sv)?;
    imported.version = top.str("aiperf_version")?.map(str::to_string);
    // The run's settings: the model and the server's base URL.
    if let Some(config) = top.obj("input_config")? {
        let models = config.obj("models")?;
        if let Some(items) = models.map(|m| m.arr("items")).transpose()?.flatten() {
            let name = items.first().and_then(|m| m.get("name"));
            imported.model = name.and_then(Value::as_str).map(str::to_string);
        }
        let endpoint = config.obj("endpoint")?;
        if let Some(urls) = endpoint
            .as_ref()
            .map(|e| e.arr("urls"))
            .transpose()?
            .flatten()
        {
            imported.target = urls.first().and_then(Value::as_str).map(str::to_string);
        }
        // Its endpoint type (`chat`, `completions`, …), or a custom path under it.
        if let Some(e) = endpoint {
            imported.api = (e.str("custom_endpoint")?.and_then(crate::api_named))
                .or(e.str("type")?.and_then(crate::api_named));
        }
    }
    let concurrency = top
        .obj("effective_concurrency")?
        .and_then(|c| c.num("max").ok().flatten())
        .filter(|c| *c >= 1.0 && c.fract() == 0.0)
        .map(|c| c as u32);
    imported.levels = vec![crate::Level::new(Tool::Aiperf, concurrency, None)];
    imported.figures = figures(&top, &imported.records, osl)?;
    Ok(())
}

/// A metric's `value` in milliseconds (`unit` converted), a count, or the chunk gaps
/// in seconds, from a record's `metrics`.
struct Metrics<'a>(Option<Obj<'a>>);

impl Metrics<'_> {
    fn ms(&self, k: &str) -> Result<Option<f64>, ImportError> {
        let Some(ms) = &self.0 else { return Ok(None) };
        let Some(x) = ms.obj(k)? else { return Ok(None) };
        let unit = x.str("unit")?;
        Ok(x.nonneg("value")?.map(|v| to_ms(v, unit)))
    }

    fn count(&self, k: &str) -> Result<Option<u64>, ImportError> {
        let Some(ms) = &self.0 else { return Ok(None) };
        let Some(x) = ms.obj(k)? else { return Ok(None) };
        Ok(x.count("value")?)
    }

    fn gaps_s(&self, file: &str) -> Result<Option<Vec<f64>>, ImportError> {
        let Some(ms) = &self.0 else { return Ok(None) };
        let Some(x) = ms.obj("inter_chunk_latency")? else {
            return Ok(None);
        };
        let Some(a) = x.arr("value")? else {
            return Ok(None);
        };
        let unit = x.str("unit")?;
        Ok(Some(
            numbers(file, &x.path("value"), a)?
                .into_iter()
                .map(|g| to_ms(g, unit) / 1e3)
                .collect(),
        ))
    }
}

/// One line of the per-request file: its request, send time, phase and counts.
fn read_line(file: &str, at: &str, line: &str) -> Result<Line, ImportError> {
    let in_line = |e: ImportError| ImportError::new(file, format!("{at}: {}", e.msg));
    let v = parse(file, line).map_err(in_line)?;
    record(file, &v).map_err(in_line)
}

/// One record of the per-request file, its fields read.
fn record(file: &str, v: &Value) -> Result<Line, ImportError> {
    let o = Obj::new(file, v)?;
    let Some(meta) = o.obj("metadata")? else {
        return Err(ImportError::new(file, "no metadata: not an AIPerf record"));
    };
    let start_ns = meta.count("request_start_ns")?;
    let end_ns = meta.count("request_end_ns")?;
    let m = Metrics(o.obj("metrics")?);
    let gaps = m.gaps_s(file)?;
    let error_obj = o.obj("error")?;
    let error = match &error_obj {
        Some(e) => Some(format!(
            "{} {}",
            e.str("type")?.unwrap_or("error"),
            e.str("message")?.unwrap_or("")
        )),
        None => None,
    };
    let http_status = match &error_obj {
        Some(e) => e
            .count("code")?
            .filter(|c| (100..600).contains(c))
            .map(|c| c as u16),
        None => None,
    };
    let cancelled = meta.get("was_cancelled").and_then(|v| v.as_bool()) == Some(true);
    let ok = error.is_none() && !cancelled;
    let tokenizer_count = m
        .count("output_sequence_length")?
        .or(m.count("output_token_count")?);
    let usage = m.count("usage_completion_tokens")?;
    let (output_tokens, token_source) = match (usage, tokenizer_count) {
        (Some(u), _) => (Some(u), Some(TokenSource::Usage)),
        (None, Some(t)) => (Some(t), Some(TokenSource::Tokenizer)),
        (None, None) => (None, None),
    };
    let e2e_ms = match (start_ns, end_ns) {
        (Some(s), Some(e)) if e >= s => Some((e - s) as f64 / 1e6),
        _ => m.ms("request_latency")?,
    };
    let key = match (meta.str("x_request_id")?, start_ns, end_ns) {
        (Some(id), _, _) => Some(format!("x_request_id {id}")),
        (None, Some(s), Some(e)) => Some(format!("sent at {s} ns, ended at {e} ns")),
        _ => None,
    };
    Ok(Line {
        key,
        start_ns,
        warmup: meta.str("benchmark_phase")? == Some("warmup"),
        osl: if ok { tokenizer_count } else { None },
        server_count: usage.is_some(),
        lacks_gaps: ok && gaps.is_none(),
        req: Req {
            sent_s: None,
            ttft_s: if ok {
                m.ms("time_to_first_token")?.map(|x| x / 1e3)
            } else {
                None
            },
            gaps_s: if ok { gaps } else { None },
            e2e_s: e2e_ms.map(|x| x / 1e3),
            output_tokens: if ok { output_tokens } else { None },
            token_source,
            input_tokens: m.count("input_sequence_length")?,
            input_source: Some(InputTokenSource::Tokenizer),
            error,
            http_status,
            cancelled,
            ..Req::default()
        },
    })
}

/// AIPerf's per-request values (ms, tokens) of the succeeded, non-warm-up `records`,
/// with `osl` its own token count per record.
pub fn values(records: &[RequestRecord], osl: &[Option<u64>]) -> Vec<(&'static str, Vec<f64>)> {
    let ms = |ns: u64| ns as f64 / 1e6;
    let (mut ttft, mut ttst, mut itl, mut lat, mut icl, mut out) =
        (vec![], vec![], vec![], vec![], vec![], vec![]);
    for (r, n) in records.iter().zip(osl) {
        if r.outcome != Outcome::Succeeded || r.warmup {
            continue;
        }
        let (Some(sent), Some(first), Some(end)) = (r.sent_ns, r.first_chunk_ns(), r.end_ns) else {
            continue;
        };
        let t = ms(first - sent);
        let l = ms(end - sent);
        ttft.push(t);
        lat.push(l);
        if let Some(second) = r.chunks.get(1) {
            ttst.push(ms(second.t_ns() - first));
        }
        icl.extend(r.chunks.windows(2).map(|w| ms(w[1].t_ns() - w[0].t_ns())));
        if let Some(n) = n {
            out.push(*n as f64);
            if *n > 1 {
                itl.push((l - t) / (*n - 1) as f64);
            }
        }
    }
    vec![
        ("time_to_first_token", ttft),
        ("time_to_second_token", ttst),
        ("inter_token_latency", itl),
        ("request_latency", lat),
        ("inter_chunk_latency", icl),
        ("output_sequence_length", out),
    ]
}

fn def(metric: &str) -> &'static str {
    match metric {
        "time_to_first_token" => "first chunk - send, per request",
        "time_to_second_token" => "second chunk - first chunk, per request",
        "inter_token_latency" => "per request (request latency - TTFT) / (AIPerf's output tokens - 1); percentiles over requests",
        "request_latency" => "end of the response - send, per request",
        "inter_chunk_latency" => "every gap between consecutive chunks, pooled",
        _ => "output tokens per request, as AIPerf's tokenizer counted them",
    }
}

/// Seconds since the Unix epoch of an ISO time `YYYY-MM-DDTHH:MM:SS[.ffffff]` (no
/// zone: AIPerf's `start_time` and `end_time`, which are only ever subtracted).
fn iso_seconds(s: &str) -> Option<f64> {
    let (date, time) = s.split_once('T')?;
    let mut d = date.split('-').map(|x| x.parse::<i64>().ok());
    let (y, mo, da) = (d.next()??, d.next()??, d.next()??);
    let time = time.trim_end_matches('Z');
    let mut t = time.split(':');
    let (h, mi, sec) = (
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
        t.next()?.parse::<f64>().ok()?,
    );
    // Days from the civil date (Howard Hinnant's algorithm).
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (mo + if mo > 2 { -3 } else { 9 }) + 2) / 5 + da - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146097 + doe - 719468;
    Some(days as f64 * 86400.0 + h * 3600.0 + mi * 60.0 + sec)
}

fn figures(
    top: &Obj,
    records: &[RequestRecord],
    osl: &[Option<u64>],
) -> Result<Vec<ImportedFigure>, ImportError> {
    let mut out = Vec::new();
    for (metric, xs) in values(records, osl) {
        let Some(m) = top.obj(metric)? else { continue };
        for stat in ["avg", "p50", "p90", "p99", "std"] {
            if let Some(printed) = m.num(stat)? {
                let unit = m.str("unit")?.unwrap_or("").to_string();
                out.push(figure(
                    &format!("{metric} {stat}"),
                    &unit,
                    Some(printed),
                    numpy::stat(&xs, stat, 0),
                    def(metric),
                ));
            }
        }
    }
    let ok: Vec<&RequestRecord> = records
        .iter()
        .filter(|r| r.outcome == Outcome::Succeeded && !r.warmup)
        .collect();
    let span = {
        let s = records.iter().filter_map(|r| r.sent_ns).min();
        let e = records.iter().filter_map(|r| r.end_ns).max();
        s.zip(e).map(|(s, e)| (e - s) as f64 / 1e9)
    };
    let window = match (top.str("start_time")?, top.str("end_time")?) {
        (Some(a), Some(b)) => iso_seconds(a).zip(iso_seconds(b)).map(|(a, b)| b - a),
        _ => None,
    }
    .filter(|w| *w > 0.0);
    let tokens: f64 = osl
        .iter()
        .zip(records)
        .filter(|(_, r)| r.outcome == Outcome::Succeeded && !r.warmup)
        .filter_map(|(n, _)| *n)
        .sum::<u64>() as f64;
    let scalars: [(&str, Option<f64>, &str); 5] = [
        ("request_count", Some(ok.len() as f64), "succeeded requests"),
        ("total_output_tokens", Some(tokens), "AIPerf's output tokens of the succeeded requests"),
        ("benchmark_duration", span, "last request end - first request start"),
        ("request_throughput", window.map(|w| ok.len() as f64 / w), "succeeded requests / the profiling phase's wall time (start_time to end_time, as saved)"),
        ("output_token_throughput", window.map(|w| tokens / w), "AIPerf's output tokens / the profiling phase's wall time (start_time to end_time, as saved)"),
    ];
    for (metric, rebuilt, d) in scalars {
        let Some(m) = top.obj(metric)? else { continue };
        if let Some(printed) = m.num("avg")? {
            out.push(figure(
                metric,
                m.str("unit")?.unwrap_or(""),
                Some(printed),
                rebuilt,
                d,
            ));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(
        start: u64,
        ttft: f64,
        gaps: &[f64],
        latency_ms: f64,
        osl: u64,
        usage: Option<u64>,
    ) -> String {
        let usage = usage.map_or(String::new(), |u| {
            format!(r#","usage_completion_tokens":{{"value":{u},"unit":"tokens"}}"#)
        });
        format!(
            r#"{{"metadata":{{"request_start_ns":{start},"request_end_ns":{},"benchmark_phase":"profiling","was_cancelled":false}},"metrics":{{"time_to_first_token":{{"value":{ttft},"unit":"ms"}},"inter_chunk_latency":{{"value":{gaps:?},"unit":"ms"}},"request_latency":{{"value":{latency_ms},"unit":"ms"}},"output_sequence_length":{{"value":{osl},"unit":"tokens"}}{usage}}},"error":null}}"#,
            start + (latency_ms * 1e6) as u64
        )
    }

    #[test]
    fn records_keep_both_token_counts_and_aiperf_itl_uses_its_own() {
        let base = 1_700_000_000_000_000_000u64;
        let text = [
            line(base, 20.0, &[10.0, 10.0], 45.0, 5, Some(3)),
            line(base + 5_000_000, 30.0, &[5.0], 40.0, 3, Some(2)),
            r#"{"metadata":{"request_start_ns":1700000000010000000,"request_end_ns":1700000000011000000,"was_cancelled":false},"metrics":{},"error":{"code":503,"type":"HTTPError","message":"busy"}}"#.to_string(),
        ]
        .join("\n");
        let summary = r#"{"aiperf_version":"0.13.0",
            "time_to_first_token":{"unit":"ms","avg":25.0,"p50":25.0,"std":5.0},
            "inter_token_latency":{"unit":"ms","avg":6.875},
            "request_count":{"unit":"requests","avg":2.0},
            "start_time":"2026-01-01T00:00:00.000000","end_time":"2026-01-01T00:00:02.000000",
            "request_throughput":{"unit":"requests/sec","avg":1.0}}"#;
        let imp = import("profile_export.jsonl", &text, Some(("s.json", summary))).unwrap();
        assert_eq!(imp.records.len(), 3);
        assert_eq!(imp.records[2].outcome, Outcome::Http5xx);
        let r = &imp.records[0];
        assert_eq!(r.output_tokens.unwrap().count, 3);
        assert_eq!(r.output_tokens.unwrap().source, TokenSource::Usage);
        assert_eq!(r.token_sources.tokenizer, Some(5));
        assert_eq!(r.chunks.len(), 3);
        assert_eq!(imp.records[1].sent_ns, Some(5_000_000));
        assert!(imp.lacks.is_empty(), "{:?}", imp.lacks);
        assert_eq!(imp.version.as_deref(), Some("0.13.0"));
        let f = |k: &str| imp.figures.iter().find(|f| f.name == k).unwrap().clone();
        // ITL: A (45 - 20)/(5 - 1) = 6.25, B (40 - 30)/(3 - 1) = 5 -> 5.625
        assert!((f("inter_token_latency avg").rebuilt.unwrap() - 5.625).abs() < 1e-9);
        assert!((f("time_to_first_token std").rebuilt.unwrap() - 5.0).abs() < 1e-9);
        assert!((f("request_throughput").rebuilt.unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(f("request_count").rebuilt, Some(2.0));
    }

    #[test]
    fn hostile_lines_are_named_and_gaps_may_be_missing() {
        let e = import("p.jsonl", "{\"metadata\": 3}", None).unwrap_err();
        assert!(e.msg.contains("line 1"), "{e}");
        let e = import(
            "p.jsonl",
            "{\"metadata\": {\"request_start_ns\": 1}, \"metri",
            None,
        )
        .unwrap_err();
        assert!(
            e.msg.contains("line 1") && e.msg.contains("cut short"),
            "{e}"
        );
        let no_gaps = r#"{"metadata":{"request_start_ns":1000,"request_end_ns":50001000},"metrics":{"time_to_first_token":{"value":10,"unit":"ms"},"output_sequence_length":{"value":4,"unit":"tokens"}},"error":null}"#;
        let imp = import("p.jsonl", no_gaps, None).unwrap();
        assert!(imp.lacks(Lack::ChunkTimes));
        assert!(imp.lacks(Lack::ServerTokens));
        assert_eq!(imp.records[0].chunks.len(), 2);
    }

    // FAULTS 151.
    #[test]
    fn a_repeated_request_is_counted_once_and_named() {
        let base = 1_700_000_000_000_000_000u64;
        let (a, b) = (
            line(base, 20.0, &[10.0], 45.0, 2, None),
            line(base + 5_000_000, 30.0, &[5.0], 40.0, 2, None),
        );
        // A concatenated export: the same lines twice.
        let text = [a.clone(), b.clone(), String::new(), a.clone(), b.clone()].join("\n");
        let imp = import("p.jsonl", &text, None).unwrap();
        assert_eq!(imp.records.len(), 2);
        let [w] = &imp.warnings[..] else {
            panic!("{:?}", imp.warnings)
        };
        assert!(
            w.starts_with(
                "2 repeated requests counted once: line 4 repeats line 1 (the same request, sent at 1700000000000000000 ns"
            ) && w.contains("line 5 repeats line 2"),
            "{w}"
        );
        // Known by AIPerf's request id first: two lines of one id, other times.
        let id = |l: &str, id: &str| {
            l.replacen(
                "{\"request_start_ns\"",
                &format!("{{\"x_request_id\":\"{id}\",\"request_start_ns\""),
                1,
            )
        };
        let text = [id(&a, "r-1"), id(&b, "r-1")].join("\n");
        let imp = import("p.jsonl", &text, None).unwrap();
        assert_eq!(imp.records.len(), 1);
        assert_eq!(
            imp.warnings,
            ["1 repeated request counted once: line 2 repeats line 1 (the same request, x_request_id r-1)"]
        );
        let text = [id(&a, "r-1"), id(&b, "r-2")].join("\n");
        let imp = import("p.jsonl", &text, None).unwrap();
        assert_eq!(imp.records.len(), 2);
        assert!(imp.warnings.is_empty());
        // Many repeats: the first few are named, the rest counted.
        let text = vec![a.clone(); 12].join("\n");
        let imp = import("p.jsonl", &text, None).unwrap();
        assert_eq!(imp.records.len(), 1);
        assert!(
            imp.warnings[0].starts_with("11 repeated requests counted once: line 2 repeats line 1")
                && imp.warnings[0].ends_with("line 6 repeats line 1 (the same request, sent at 1700000000000000000 ns, ended at 1700000000045000000 ns), and 6 more"),
            "{:?}",
            imp.warnings
        );
    }

    #[test]
    fn the_summary_alone_says_which_file_to_give() {
        let e = import("s.json", "{\n \"aiperf_version\": \"0.13.0\"\n}", None).unwrap_err();
        assert!(e.msg.contains("profile_export.jsonl"), "{e}");
    }

    #[test]
    fn iso_times_subtract() {
        let a = iso_seconds("2026-11-27T07:15:41.049840").unwrap();
        let b = iso_seconds("2026-11-28T00:00:00").unwrap();
        assert!((b - a - (86400.0 - (7.0 * 3600.0 + 15.0 * 60.0 + 41.04984))).abs() < 1e-6);
        assert_eq!(iso_seconds("nope"), None);
    }
}

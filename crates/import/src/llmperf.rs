//! LLMPerf's `*_individual_responses.json`: one object per request with its TTFT, its
//! end-to-end latency, a per-request "inter-token latency" (the time to every chunk,
//! TTFT included, summed and divided by the re-tokenized output length) and client-
//! counted tokens; no send times and no chunk times. The `*_summary.json` beside it
//! holds LLMPerf's figures (pandas: linear quantiles, `std` with n - 1).

use crate::build::{self, Lack, Req};
use crate::json::{parse, Obj};
use crate::numpy;
use crate::{figure, ImportError, Imported, Tool};
use cadence_core::{ImportedFigure, InputTokenSource, Outcome, RequestRecord, TokenSource};
use std::path::{Path, PathBuf};

/// `X_summary.json` beside `X_individual_responses.json`, when it exists.
pub fn summary_beside(path: &Path) -> Option<PathBuf> {
    let name = path.file_name()?.to_str()?;
    let stem = name.strip_suffix("_individual_responses.json")?;
    let p = path.with_file_name(format!("{stem}_summary.json"));
    p.is_file().then_some(p)
}

/// Reads LLMPerf's per-request file and, when given as (path, text), the summary beside
/// it (`None`: the tool's own figures are not shown); an error when either is not JSON
/// or the responses are not a list.
pub fn import(
    file: &str,
    text: &str,
    summary: Option<(&str, &str)>,
) -> Result<Imported, ImportError> {
    let v = parse(file, text)?;
    let Some(items) = v.as_array() else {
        return Err(ImportError::new(file, "expected a list of responses"));
    };
    let mut reqs = Vec::with_capacity(items.len());
    let mut itl_s = Vec::new();
    for (i, item) in items.iter().enumerate() {
        let o = Obj::at(file, format!("[{i}]"), item)?;
        // LLMPerf marks a failure by an error code; a success leaves it null.
        let code = o.num("error_code")?;
        let msg = o.str("error_msg")?.unwrap_or("");
        let error = code.map(|c| format!("error {c}: {msg}"));
        let ok = error.is_none();
        let out = o.count("number_output_tokens")?;
        if ok {
            itl_s.push(o.nonneg("inter_token_latency_s")?);
        }
        reqs.push(Req {
            sent_s: None,
            ttft_s: if ok { o.nonneg("ttft_s")? } else { None },
            e2e_s: o.nonneg("end_to_end_latency_s")?,
            output_tokens: if ok { out } else { None },
            token_source: Some(TokenSource::Tokenizer),
            input_tokens: o.count("number_input_tokens")?,
            input_source: Some(InputTokenSource::Tokenizer),
            http_status: code
                .filter(|c| (100.0..600.0).contains(c))
                .map(|c| c as u16),
            error,
            ..Req::default()
        });
    }
    let records = build::records(Tool::Llmperf, file, &reqs)?;
    let mut files = vec![file.to_string()];
    let mut notes = Vec::new();
    let mut model = None;
    let figures = match summary {
        Some((sf, st)) => {
            files.push(sf.to_string());
            let sv = parse(sf, st)?;
            let top = Obj::new(sf, &sv)?;
            model = top.str("model")?.map(str::to_string);
            figures(&top, &records, &itl_s)?
        }
        None => {
            notes.push(
                "no *_summary.json beside the file: LLMPerf's own figures are not shown".into(),
            );
            Vec::new()
        }
    };
    Ok(Imported {
        tool: Tool::Llmperf,
        version: None,
        files,
        model,
        target: None,
        api: None,
        levels: vec![crate::Level::new(Tool::Llmperf, None, None)],
        duration_s: None,
        started_at_unix_ms: None,
        records,
        lacks: vec![Lack::ChunkTimes, Lack::SendTimes, Lack::ServerTokens],
        figures,
        notes,
        warnings: Vec::new(),
    })
}

/// LLMPerf's per-request values of the succeeded `records`, in seconds, and the
/// per-request ITL the file saved (its own, kept as saved: the file has no chunk times
/// to recompute it from).
pub fn values(records: &[RequestRecord]) -> [(&'static str, Vec<f64>); 4] {
    let s = |ns: u64| ns as f64 / 1e9;
    let mut ttft = Vec::new();
    let mut e2e = Vec::new();
    let mut out = Vec::new();
    let mut inp = Vec::new();
    for r in records.iter().filter(|r| r.outcome == Outcome::Succeeded) {
        if let (Some(sent), Some(first)) = (r.sent_ns, r.first_chunk_ns()) {
            ttft.push(s(first - sent));
        }
        if let (Some(sent), Some(end)) = (r.sent_ns, r.end_ns) {
            e2e.push(s(end - sent));
        }
        if let Some(t) = r.output_tokens {
            out.push(t.count as f64);
        }
        if let Some(t) = r.input_tokens {
            inp.push(t as f64);
        }
    }
    [
        ("ttft_s", ttft),
        ("end_to_end_latency_s", e2e),
        ("number_output_tokens", out),
        ("number_input_tokens", inp),
    ]
}

/// The summary's value of `metric`'s `stat`: flattened (`results_ttft_s_mean`,
/// `results_ttft_s_quantiles_p50`) or nested (`results.ttft_s.quantiles.p50`).
fn summary_value(top: &Obj, metric: &str, stat: &str) -> Result<Option<f64>, ImportError> {
    let flat = match stat {
        "mean" | "min" | "max" | "stddev" => format!("results_{metric}_{stat}"),
        p => format!("results_{metric}_quantiles_{p}"),
    };
    if let Some(x) = top.num(&flat)? {
        return Ok(Some(x));
    }
    let Some(results) = top.obj("results")? else {
        return Ok(None);
    };
    let Some(m) = results.obj(metric)? else {
        return Ok(None);
    };
    Ok(match stat {
        "mean" | "min" | "max" | "stddev" => m.num(stat)?,
        p => match m.obj("quantiles")? {
            Some(q) => q.num(p)?,
            None => None,
        },
    })
}

fn figures(
    top: &Obj,
    records: &[RequestRecord],
    itl_s: &[Option<f64>],
) -> Result<Vec<ImportedFigure>, ImportError> {
    let itl: Vec<f64> = itl_s.iter().flatten().copied().collect();
    let mut per = values(records).to_vec();
    per.insert(1, ("inter_token_latency_s", itl));
    let def = |m: &str| {
        match m {
        "ttft_s" => "first chunk - send, per succeeded request (s)",
        "inter_token_latency_s" => "per request (TTFT + every chunk gap) / output tokens, as LLMPerf saved it per request (no chunk times to recompute it)",
        "end_to_end_latency_s" => "end of the response - send (s)",
        "number_output_tokens" => "output tokens per request, LLMPerf's tokenizer over the text",
        _ => "prompt tokens per request",
    }
    };
    let mut out = Vec::new();
    for (metric, xs) in &per {
        for stat in ["mean", "p50", "p90", "p99", "stddev"] {
            if let Some(printed) = summary_value(top, metric, stat)? {
                let name = format!("{metric} {stat}");
                out.push(figure(
                    &name,
                    "",
                    Some(printed),
                    numpy::stat(xs, stat, 1),
                    def(metric),
                ));
            }
        }
    }
    if let Some(p) = top.num("results_mean_output_throughput_token_per_s")? {
        out.push(figure(
            "results_mean_output_throughput_token_per_s",
            "tok/s",
            Some(p),
            None,
            "output tokens / the run's wall time: the file holds no send times, so it cannot be rebuilt",
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    const RESPONSES: &str = r#"[
      {"error_code": null, "error_msg": "", "inter_token_latency_s": 0.02,
       "ttft_s": 0.1, "end_to_end_latency_s": 0.5, "request_output_throughput_token_per_s": 40,
       "number_total_tokens": 30, "number_output_tokens": 20, "number_input_tokens": 10},
      {"error_code": null, "error_msg": "", "inter_token_latency_s": 0.03,
       "ttft_s": 0.3, "end_to_end_latency_s": 0.9, "request_output_throughput_token_per_s": 33,
       "number_total_tokens": 40, "number_output_tokens": 30, "number_input_tokens": 10},
      {"error_code": 500, "error_msg": "boom", "inter_token_latency_s": 0,
       "ttft_s": 0, "end_to_end_latency_s": 0.01, "number_output_tokens": 0, "number_input_tokens": 10}
    ]"#;

    #[test]
    fn responses_become_records_lacking_chunk_and_send_times() {
        let summary = r#"{"results_ttft_s_mean": 0.2, "results_ttft_s_quantiles_p50": 0.2,
            "results_inter_token_latency_s_mean": 0.025, "results_ttft_s_stddev": 0.1414,
            "results_mean_output_throughput_token_per_s": 55.0}"#;
        let imp = import(
            "x_individual_responses.json",
            RESPONSES,
            Some(("x_summary.json", summary)),
        )
        .unwrap();
        assert_eq!(imp.records.len(), 3);
        assert_eq!(imp.records[2].outcome, cadence_core::Outcome::Http5xx);
        assert!(imp.lacks(Lack::ChunkTimes) && imp.lacks(Lack::SendTimes));
        // First and last chunk only; tokens from LLMPerf's tokenizer.
        assert_eq!(imp.records[0].chunks.len(), 2);
        assert_eq!(
            imp.records[0].output_tokens.unwrap().source,
            TokenSource::Tokenizer
        );
        let f = |k: &str| imp.figures.iter().find(|f| f.name == k).unwrap().clone();
        assert!((f("ttft_s mean").rebuilt.unwrap() - 0.2).abs() < 1e-9);
        assert!((f("inter_token_latency_s mean").rebuilt.unwrap() - 0.025).abs() < 1e-12);
        // pandas' std (n - 1): |0.1 - 0.3| / sqrt(2)
        assert!((f("ttft_s stddev").rebuilt.unwrap() - 0.2 / 2f64.sqrt()).abs() < 1e-9);
        assert_eq!(
            f("results_mean_output_throughput_token_per_s").rebuilt,
            None
        );
    }

    #[test]
    fn hostile_entries_are_named() {
        let e = import("f", r#"[{"ttft_s": "soon"}]"#, None).unwrap_err();
        assert!(e.msg.contains("[0].ttft_s"), "{e}");
        let e = import("f", r#"{"ttft_s": 1}"#, None).unwrap_err();
        assert!(e.msg.contains("list"), "{e}");
        let e = import("f", r#"[{"number_output_tokens": 1.5}]"#, None).unwrap_err();
        assert!(e.msg.contains("whole"), "{e}");
    }
}

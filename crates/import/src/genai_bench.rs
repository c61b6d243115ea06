//! genai-bench's per-run metrics file (one per scenario and concurrency, e.g.
//! `D(100,100)_text-to-text_num_concurrency_4_time_60s.json`): its
//! `individual_request_metrics` (TTFT, TPOT, end-to-end and output latency, token
//! counts, error code per request, times in `_time_unit`) and its
//! `aggregated_metrics` (numpy statistics: linear percentiles, population deviation,
//! failed requests left out, and a TPOT left out of them when the output latency is
//! under 10 ms or the speed over 1000 tokens/s). No send times, no chunk times.

use crate::build::{self, Lack, Req};
use crate::json::{parse, Obj};
use crate::numpy;
use crate::{figure, ImportError, Imported, Level, Tool};
use cadence_core::{ImportedFigure, InputTokenSource, Outcome, RequestRecord, TokenSource};

/// Reads a genai-bench per-run metrics file; an error when it is not JSON, holds no
/// `individual_request_metrics`, or its `_time_unit` is neither s nor ms.
pub fn import(file: &str, text: &str) -> Result<Imported, ImportError> {
    let v = parse(file, text)?;
    let top = Obj::new(file, &v)?;
    let Some(items) = top.arr("individual_request_metrics")? else {
        return Err(ImportError::new(
            file,
            "no individual_request_metrics: not a genai-bench run file",
        ));
    };
    // Seconds per unit of the file's times.
    let scale = match top.str("_time_unit")?.unwrap_or("s") {
        "ms" => 1e-3,
        "s" => 1.0,
        other => {
            return Err(ImportError::new(
                file,
                format!("_time_unit '{other}': expected s or ms"),
            ))
        }
    };
    let mut reqs = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let o = Obj::at(file, format!("individual_request_metrics[{i}]"), item)?;
        let code = o.num("error_code")?.filter(|c| *c != 0.0);
        let message = o.str("error_message")?.unwrap_or("");
        let error = code.map(|c| format!("error {c}: {message}"));
        let ok = error.is_none();
        let s =
            |k: &str| -> Result<Option<f64>, ImportError> { Ok(o.nonneg(k)?.map(|x| x * scale)) };
        reqs.push(Req {
            sent_s: None,
            ttft_s: if ok { s("ttft")? } else { None },
            e2e_s: s("e2e_latency")?,
            output_tokens: if ok {
                o.count("num_output_tokens")?
            } else {
                None
            },
            token_source: Some(TokenSource::Usage),
            input_tokens: o.count("num_input_tokens")?,
            input_source: Some(InputTokenSource::Usage),
            http_status: code
                .filter(|c| (100.0..600.0).contains(c))
                .map(|c| c as u16),
            error,
            ..Req::default()
        });
    }
    let records = build::records(Tool::GenaiBench, file, &reqs)?;
    let agg = top.obj("aggregated_metrics")?;
    let (concurrency, figures) = match &agg {
        Some(a) => (
            a.count("num_concurrency")?
                .map(|c| c.min(u32::MAX as u64) as u32),
            figures(a, &records, scale)?,
        ),
        None => (None, Vec::new()),
    };
    Ok(Imported {
        tool: Tool::GenaiBench,
        version: None,
        files: vec![file.to_string()],
        model: None,
        target: None,
        api: None,
        levels: vec![Level::new(Tool::GenaiBench, concurrency, None)],
        duration_s: None,
        started_at_unix_ms: None,
        records,
        lacks: vec![Lack::ChunkTimes, Lack::SendTimes, Lack::TokenSourceUnsaid],
        figures,
        notes: Vec::new(),
        warnings: Vec::new(),
    })
}

/// genai-bench's per-request values (seconds, tokens) of the succeeded `records`.
pub fn values(records: &[RequestRecord]) -> Vec<(&'static str, Vec<f64>)> {
    let s = |ns: u64| ns as f64 / 1e9;
    let (mut ttft, mut tpot, mut e2e, mut out_lat, mut out) =
        (vec![], vec![], vec![], vec![], vec![]);
    for r in records.iter().filter(|r| r.outcome == Outcome::Succeeded) {
        let (Some(sent), Some(first), Some(end)) = (r.sent_ns, r.first_chunk_ns(), r.end_ns) else {
            continue;
        };
        let (t, e) = (s(first - sent), s(end - sent));
        ttft.push(t);
        e2e.push(e);
        out_lat.push(e - t);
        let n = r.output_tokens.map_or(0, |c| c.count);
        out.push(n as f64);
        if n > 1 {
            let per = (e - t) / (n - 1) as f64;
            // genai-bench leaves out a TPOT of an output under 10 ms or over 1000 tok/s.
            if e - t >= 0.01 && 1.0 / per <= 1000.0 {
                tpot.push(per);
            }
        }
    }
    vec![
        ("ttft", ttft),
        ("tpot", tpot),
        ("e2e_latency", e2e),
        ("output_latency", out_lat),
        ("num_output_tokens", out),
    ]
}

fn figures(
    a: &Obj,
    records: &[RequestRecord],
    scale: f64,
) -> Result<Vec<ImportedFigure>, ImportError> {
    let mut out = Vec::new();
    let stats = a.obj("stats")?;
    for (metric, xs) in values(records) {
        let Some(m) = stats.as_ref().map(|s| s.obj(metric)).transpose()?.flatten() else {
            continue;
        };
        let (unit, per) = if metric == "num_output_tokens" {
            ("tokens", 1.0)
        } else if scale == 1.0 {
            ("s", 1.0)
        } else {
            ("ms", 1e3)
        };
        let def = match metric {
            "ttft" => "first chunk - send, per request",
            "tpot" => "per request (E2E - TTFT) / (output tokens - 1), left out under 10 ms of output or over 1000 tok/s",
            "e2e_latency" => "end of the response - send, per request",
            "output_latency" => "E2E - TTFT, per request",
            _ => "output tokens per request",
        };
        for stat in ["mean", "p50", "p90", "p99", "stddev"] {
            if let Some(printed) = m.num(stat)? {
                out.push(figure(
                    &format!("{metric} {stat}"),
                    unit,
                    Some(printed),
                    numpy::stat(&xs, stat, 0).map(|x| x * per),
                    def,
                ));
            }
        }
    }
    let ok = records.iter().filter(|r| r.outcome == Outcome::Succeeded);
    let completed = ok.clone().count() as f64;
    let tokens: u64 = ok.filter_map(|r| r.output_tokens.map(|t| t.count)).sum();
    let duration = a.nonneg("run_duration")?.filter(|d| *d > 0.0);
    for (key, unit, rebuilt, def) in [
        (
            "requests_per_second",
            "req/s",
            duration.map(|d| completed / d),
            "succeeded requests / the run's duration (genai-bench's, as saved)",
        ),
        (
            "mean_output_throughput_tokens_per_s",
            "tok/s",
            duration.map(|d| tokens as f64 / d),
            "output tokens of every request / the run's duration (genai-bench's, as saved)",
        ),
    ] {
        if let Some(p) = a.num(key)? {
            out.push(figure(key, unit, Some(p), rebuilt, def));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_and_numpy_figures_in_the_files_time_unit() {
        let text = r#"{"_time_unit": "ms",
          "aggregated_metrics": {"num_concurrency": 2, "run_duration": 1.0,
            "requests_per_second": 2.0,
            "stats": {"ttft": {"mean": 150.0, "p50": 150.0, "stddev": 50.0},
                      "tpot": {"mean": 25.0}}},
          "individual_request_metrics": [
            {"ttft": 100.0, "e2e_latency": 300.0, "num_output_tokens": 9, "num_input_tokens": 5, "error_code": null},
            {"ttft": 200.0, "e2e_latency": 500.0, "num_output_tokens": 11, "num_input_tokens": 5, "error_code": null},
            {"ttft": null, "e2e_latency": 2.0, "num_output_tokens": 0, "error_code": 503, "error_message": "busy"}
          ]}"#;
        let imp = import("run.json", text).unwrap();
        assert_eq!(imp.levels[0].name, "concurrency=2");
        assert_eq!(imp.records[2].outcome, Outcome::Http5xx);
        assert_eq!(imp.records[0].chunks.len(), 2);
        let f = |k: &str| imp.figures.iter().find(|f| f.name == k).unwrap().clone();
        assert!((f("ttft mean").rebuilt.unwrap() - 150.0).abs() < 1e-9);
        // numpy's population deviation of 100 and 200 ms
        assert!((f("ttft stddev").rebuilt.unwrap() - 50.0).abs() < 1e-9);
        // TPOT: 200/8 = 25, 300/10 = 30 -> 27.5
        assert!((f("tpot mean").rebuilt.unwrap() - 27.5).abs() < 1e-9);
        assert_eq!(f("requests_per_second").rebuilt, Some(2.0));
    }

    #[test]
    fn hostile_files_are_refused() {
        assert!(import("f", r#"{"x": 1}"#)
            .unwrap_err()
            .msg
            .contains("individual_request_metrics"));
        assert!(import(
            "f",
            r#"{"_time_unit": "h", "individual_request_metrics": []}"#
        )
        .is_err());
        let e = import("f", r#"{"individual_request_metrics": [{"ttft": -1}]}"#).unwrap_err();
        assert!(e.msg.contains("[0].ttft"), "{e}");
    }
}

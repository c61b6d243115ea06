//! GuideLLM's benchmarks report (`--output kind=json`, `benchmarks.json`): one entry
//! per benchmark (a load level), each with its requests (successful, errored,
//! incomplete) and their send, first-token, last-token and end times and token counts,
//! and GuideLLM's metrics. There are no chunk times in between: GuideLLM's ITL is per
//! request, (last token - first token) / (tokens - 1), weighted by tokens - 1 in its
//! summary, whose percentiles are the first value the weighted CDF reaches.

use crate::build::{self, Lack, Req};
use crate::json::{parse, Obj};
use crate::numpy::Pdf;
use crate::{figure, ImportError, Imported, Level, Tool};
use cadence_core::{ImportedFigure, InputTokenSource, Outcome, RequestRecord, TokenSource};

/// Reads a GuideLLM benchmarks report; an error when it is not JSON, holds no
/// benchmarks, or a benchmark saved no requests.
pub fn import(file: &str, text: &str) -> Result<Imported, ImportError> {
    let v = parse(file, text)?;
    let top = Obj::new(file, &v)?;
    let Some(benchmarks) = top.arr("benchmarks")? else {
        return Err(ImportError::new(
            file,
            "no benchmarks list: not a GuideLLM report",
        ));
    };
    if benchmarks.is_empty() {
        return Err(ImportError::new(file, "the report holds no benchmarks"));
    }
    let version = match top.obj("metadata")? {
        Some(m) => m.str("guidellm_version")?.map(str::to_string),
        None => None,
    };
    let mut reqs = Vec::new();
    let mut level_of = Vec::new();
    let mut levels = Vec::new();
    let mut model = None;
    let mut target = None;
    let mut api = None;
    for (i, b) in benchmarks.iter().enumerate() {
        let b = Obj::at(file, format!("benchmarks[{i}]"), b)?;
        levels.push(level(&b)?);
        if let Some(backend) = b
            .obj("config")?
            .map(|c| c.obj("backend"))
            .transpose()?
            .flatten()
        {
            model = model.or(backend.str("model")?.map(str::to_string));
            let path = backend
                .str("request_format")?
                .filter(|p| p.starts_with('/'));
            let url = backend
                .str("target")?
                .map(|t| format!("{}{}", t.trim_end_matches('/'), path.unwrap_or("")));
            target = target.or(url);
            api = api.or(path.and_then(crate::api_named));
        }
        let Some(requests) = b.obj("requests")? else {
            return Err(ImportError::new(file, format!("benchmarks[{i}]: no requests (GuideLLM saves them unless sampling is set to 0)")));
        };
        for (kind, status) in [("successful", 0), ("errored", 1), ("incomplete", 2)] {
            let Some(list) = requests.arr(kind)? else {
                continue;
            };
            for (j, r) in list.iter().enumerate() {
                let r = Obj::at(file, format!("{}[{j}]", requests.path(kind)), r)?;
                reqs.push(request(&r, status)?);
                level_of.push(i as u32);
            }
        }
    }
    let mut records = build::records(Tool::Guidellm, file, &reqs)?;
    for (r, lv) in records.iter_mut().zip(&level_of) {
        r.level = *lv;
    }
    let mut figures = Vec::new();
    for (i, b) in benchmarks.iter().enumerate() {
        let b = Obj::at(file, format!("benchmarks[{i}]"), b)?;
        let Some(metrics) = b.obj("metrics")? else {
            continue;
        };
        let prefix = if benchmarks.len() > 1 {
            format!("{}: ", levels[i].name)
        } else {
            String::new()
        };
        let mine: Vec<RequestRecord> = records
            .iter()
            .filter(|r| r.level == i as u32)
            .cloned()
            .collect();
        figures.extend(level_figures(&metrics, &mine, &prefix)?);
    }
    Ok(Imported {
        tool: Tool::Guidellm,
        version,
        files: vec![file.to_string()],
        model,
        target,
        api,
        levels,
        duration_s: None,
        started_at_unix_ms: None,
        records,
        lacks: vec![Lack::ChunkTimes, Lack::TokenSourceUnsaid],
        figures,
        notes: Vec::new(),
        warnings: Vec::new(),
    })
}

/// The benchmark's load, from its strategy.
fn level(b: &Obj) -> Result<Level, ImportError> {
    let strategy = match b.obj("config")? {
        Some(c) => c.obj("strategy")?,
        None => None,
    };
    let Some(s) = strategy else {
        return Ok(Level::new(Tool::Guidellm, None, None));
    };
    let kind = s.str("type_")?.unwrap_or("benchmark").to_string();
    let streams = s.count("streams")?.map(|c| c.min(u32::MAX as u64) as u32);
    let rate = s.num("rate")?.filter(|r| *r > 0.0);
    Ok(match (kind.as_str(), streams, rate) {
        ("synchronous", _, _) => Level::new(Tool::Guidellm, Some(1), None),
        (_, Some(c), _) => Level::new(Tool::Guidellm, Some(c), None),
        (_, None, Some(r)) => Level::new(Tool::Guidellm, None, Some(r)),
        _ => Level {
            name: kind,
            concurrency: None,
            rate: None,
        },
    })
}

/// One request's stats; `status` 0 successful, 1 errored, 2 incomplete.
fn request(r: &Obj, status: u8) -> Result<Req, ImportError> {
    let info = r.obj("info")?;
    let timings = match &info {
        Some(i) => i.obj("timings")?,
        None => None,
    };
    let t = |k: &str| -> Result<Option<f64>, ImportError> {
        match &timings {
            Some(t) => Ok(t.nonneg(k)?),
            None => Ok(None),
        }
    };
    let start = t("request_start")?.or(r.nonneg("request_start_time")?);
    let end = t("request_end")?.or(r.nonneg("request_end_time")?);
    let first = t("first_token_iteration")?;
    let last = t("last_token_iteration")?;
    let rel = |x: Option<f64>| -> Option<f64> {
        match (x, start) {
            (Some(x), Some(s)) if x >= s => Some(x - s),
            _ => None,
        }
    };
    let said = match &info {
        Some(i) => i.str("error")?,
        None => None,
    };
    let error = match status {
        0 => None,
        _ => Some(
            said.unwrap_or(if status == 1 { "errored" } else { "incomplete" })
                .to_string(),
        ),
    };
    let ok = status == 0;
    Ok(Req {
        sent_s: start,
        ttft_s: if ok { rel(first) } else { None },
        gaps_s: None,
        last_s: if ok { rel(last) } else { None },
        e2e_s: rel(end),
        output_tokens: if ok { r.count("output_tokens")? } else { None },
        token_source: Some(TokenSource::Usage),
        input_tokens: r.count("prompt_tokens")?,
        input_source: Some(InputTokenSource::Usage),
        error,
        http_status: None,
        cancelled: status == 2,
    })
}

/// GuideLLM's per-request values of the succeeded `records`, each with its weight in
/// GuideLLM's summary.
pub fn values(records: &[RequestRecord]) -> Vec<(&'static str, Vec<(f64, f64)>)> {
    let ms = |ns: u64| ns as f64 / 1e6;
    let (mut lat, mut ttft, mut itl, mut tpot, mut out) = (vec![], vec![], vec![], vec![], vec![]);
    for r in records.iter().filter(|r| r.outcome == Outcome::Succeeded) {
        let (Some(sent), Some(first), Some(last)) =
            (r.sent_ns, r.first_chunk_ns(), r.last_chunk_ns())
        else {
            continue;
        };
        if let Some(end) = r.end_ns {
            lat.push((ms(end - sent) / 1e3, 1.0));
        }
        ttft.push((ms(first - sent), 1.0));
        let n = r.output_tokens.map_or(0, |t| t.count);
        out.push((n as f64, 1.0));
        if n > 1 {
            itl.push((ms(last - first) / (n - 1) as f64, (n - 1) as f64));
        }
        if n > 0 {
            tpot.push((ms(last - sent) / n as f64, n as f64));
        }
    }
    vec![
        ("request_latency", lat),
        ("time_to_first_token_ms", ttft),
        ("inter_token_latency_ms", itl),
        ("time_per_output_token_ms", tpot),
        ("output_token_count", out),
    ]
}

fn def(metric: &str) -> &'static str {
    match metric {
        "request_latency" => "request end - send, per request (s)",
        "time_to_first_token_ms" => "first token - send, per request",
        "inter_token_latency_ms" => {
            "per request (last token - first token) / (tokens - 1), weighted by tokens - 1"
        }
        "time_per_output_token_ms" => {
            "per request (last token - send) / tokens (TTFT included), weighted by tokens"
        }
        _ => "output tokens per request",
    }
}

fn level_figures(
    metrics: &Obj,
    records: &[RequestRecord],
    prefix: &str,
) -> Result<Vec<ImportedFigure>, ImportError> {
    let mut out = Vec::new();
    for (metric, pairs) in values(records) {
        let Some(m) = metrics.obj(metric)? else {
            continue;
        };
        let Some(ok) = m.obj("successful")? else {
            continue;
        };
        let pdf = Pdf::new(&pairs);
        let unit = if metric == "request_latency" {
            "s"
        } else if metric.ends_with("_ms") {
            "ms"
        } else {
            "tokens"
        };
        for stat in ["mean", "p50", "p90", "p95", "p99", "std_dev"] {
            let printed = match stat {
                "mean" | "std_dev" => ok.num(stat)?,
                p => match ok.obj("percentiles")? {
                    Some(ps) => ps.num(p)?,
                    None => None,
                },
            };
            if let Some(printed) = printed {
                out.push(figure(
                    &format!("{prefix}{metric} {stat}"),
                    unit,
                    Some(printed),
                    pdf.as_ref().and_then(|p| p.stat(stat)),
                    def(metric),
                ));
            }
        }
    }
    if let Some(printed) = metrics
        .obj("request_totals")?
        .map(|t| t.num("successful"))
        .transpose()?
        .flatten()
    {
        let n = records
            .iter()
            .filter(|r| r.outcome == Outcome::Succeeded)
            .count();
        out.push(figure(
            &format!("{prefix}request_totals successful"),
            "requests",
            Some(printed),
            Some(n as f64),
            "succeeded requests",
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(start: f64, first: f64, last: f64, end: f64, tokens: u64) -> String {
        format!(
            r#"{{"info": {{"timings": {{"request_start": {start}, "first_token_iteration": {first},
               "last_token_iteration": {last}, "request_end": {end}}}}},
               "output_tokens": {tokens}, "prompt_tokens": 10}}"#
        )
    }

    #[test]
    fn requests_become_records_and_weighted_figures_are_rebuilt() {
        let text = format!(
            r#"{{"metadata": {{"guidellm_version": "0.8.1"}},
              "benchmarks": [{{"config": {{"strategy": {{"type_": "concurrent", "streams": 2}}}},
                "metrics": {{"inter_token_latency_ms": {{"successful": {{"mean": 14.0, "percentiles": {{"p50": 13.333}}}}}},
                             "time_per_output_token_ms": {{"successful": {{"mean": 52.857}}}},
                             "request_totals": {{"successful": 2}}}},
                "requests": {{"successful": [{}, {}],
                  "errored": [{{"info": {{"error": "boom", "timings": {{"request_start": 1000.5}}}}}}]}}}}]}}"#,
            req(1000.0, 1000.1, 1000.13, 1000.14, 3),
            req(1000.0, 1000.2, 1000.24, 1000.25, 4)
        );
        let imp = import("benchmarks.json", &text).unwrap();
        assert_eq!(imp.levels[0].name, "concurrency=2");
        assert_eq!(imp.records.len(), 3);
        assert_eq!(imp.records[2].outcome, Outcome::StreamError);
        assert!(imp.lacks(Lack::ChunkTimes));
        assert_eq!(imp.records[0].chunks.len(), 2);
        let f = |k: &str| imp.figures.iter().find(|f| f.name == k).unwrap().clone();
        // ITL: A 30/2 = 15 (weight 2), B 40/3 (weight 3): mean 70/5 = 14
        assert!((f("inter_token_latency_ms mean").rebuilt.unwrap() - 14.0).abs() < 1e-6);
        // CDF: B 0.6 reaches 0.5 first
        assert!((f("inter_token_latency_ms p50").rebuilt.unwrap() - 40.0 / 3.0).abs() < 1e-6);
        // TPOT: A 130/3 (weight 3), B 240/4 (weight 4): mean 370/7
        assert!((f("time_per_output_token_ms mean").rebuilt.unwrap() - 370.0 / 7.0).abs() < 1e-6);
        assert_eq!(f("request_totals successful").rebuilt, Some(2.0));
    }

    #[test]
    fn hostile_reports_are_refused_clearly() {
        assert!(import("b.json", r#"{"benchmarks": []}"#)
            .unwrap_err()
            .msg
            .contains("no benchmarks"));
        assert!(import("b.json", r#"{"benchmarks": 3}"#).is_err());
        let e = import(
            "b.json",
            r#"{"benchmarks": [{"requests": {"successful": [{"output_tokens": -2}]}}]}"#,
        )
        .unwrap_err();
        assert!(e.msg.contains("output_tokens"), "{e}");
    }
}

//! inference-perf's `per_request_lifecycle_metrics.json` (written with
//! `report.request_lifecycle.per_request: true`): one object per request with its send
//! and end on the client's monotonic clock, its token counts and the times of its
//! streamed events, and its error. Recent versions keep the content chunks' times
//! (`info.response_metrics.chunk_times`); older ones only the time of every SSE line
//! (`output_token_times`, blank lines and `[DONE]` included), which are not chunk
//! times: then only the first is used, and the file is said to lack chunk times.

use crate::build::{self, Lack, Req};
use crate::json::{numbers, parse, Obj};
use crate::{ImportError, Imported, Level, Tool};
use cadence_core::{InputTokenSource, TokenSource};

/// Reads inference-perf's per-request lifecycle metrics.
pub fn import(file: &str, text: &str) -> Result<Imported, ImportError> {
    let v = parse(file, text)?;
    let Some(items) = v.as_array() else {
        return Err(ImportError::new(
            file,
            "expected a list of per-request metrics",
        ));
    };
    let mut reqs = Vec::with_capacity(items.len());
    let mut lacks = vec![Lack::TokenSourceUnsaid];
    for (i, item) in items.iter().enumerate() {
        let (req, lacks_chunks) = request(file, i, item)?;
        if lacks_chunks {
            lacks.push(Lack::ChunkTimes);
        }
        reqs.push(req);
    }
    if reqs.iter().all(|r| r.sent_s.is_none()) {
        lacks.push(Lack::SendTimes);
    }
    let records = build::records(Tool::InferencePerf, file, &reqs)?;
    Ok(Imported {
        tool: Tool::InferencePerf,
        version: None,
        files: vec![file.to_string()],
        model: None,
        target: None,
        api: None,
        levels: vec![Level::new(Tool::InferencePerf, None, None)],
        duration_s: None,
        started_at_unix_ms: None,
        records,
        lacks,
        figures: Vec::new(),
        notes: vec![
            "inference-perf's stage summaries are not read: no saved figures to set beside the rebuild".into(),
        ],
        warnings: Vec::new(),
    })
}

/// Request `i` of the list, and whether it succeeded without its chunk times.
fn request(file: &str, i: usize, item: &serde_json::Value) -> Result<(Req, bool), ImportError> {
    let o = Obj::at(file, format!("[{i}]"), item)?;
    let start = o.nonneg("start_time")?;
    let end = o.nonneg("end_time")?;
    let info = o.obj("info")?;
    let resp = match &info {
        Some(info) => info.obj("response_metrics")?,
        None => None,
    };
    let times = |o: &Option<Obj>, k: &str| -> Result<Option<Vec<f64>>, ImportError> {
        match o {
            Some(o) => match o.arr(k)? {
                Some(a) => numbers(file, &o.path(k), a).map(Some),
                None => Ok(None),
            },
            None => Ok(None),
        }
    };
    // Content chunk times when kept; else SSE line times (only the first is used).
    let chunk_times = times(&resp, "chunk_times")?.filter(|t| !t.is_empty());
    let line_times = match times(&resp, "output_token_times")? {
        Some(t) => Some(t),
        None => times(&info, "output_token_times")?,
    };
    let output_tokens = match &resp {
        Some(r) => r.count("output_tokens")?,
        None => None,
    }
    .or(match &info {
        Some(i) => i.count("output_tokens")?,
        None => None,
    });
    let input_tokens = match &info {
        Some(i) => i.count("input_tokens")?,
        None => None,
    };
    let error = match o.obj("error")? {
        Some(e) => Some(format!(
            "{} {}",
            e.str("error_type")?.unwrap_or("error"),
            e.str("error_msg")?.unwrap_or("")
        )),
        None => None,
    };
    let rel = |t: f64| start.filter(|s| t >= *s).map(|s| t - s);
    let ok = error.is_none();
    let (ttft, gaps, last) = match (&chunk_times, &line_times) {
        (Some(c), _) => (
            rel(c[0]),
            Some(c.windows(2).map(|w| (w[1] - w[0]).max(0.0)).collect()),
            None,
        ),
        (None, Some(l)) if !l.is_empty() => (rel(l[0]), None, None),
        _ => (None, None, None),
    };
    let req = Req {
        sent_s: start,
        ttft_s: if ok { ttft } else { None },
        gaps_s: if ok { gaps } else { None },
        last_s: last,
        e2e_s: end.and_then(rel),
        output_tokens: if ok { output_tokens } else { None },
        token_source: Some(TokenSource::Usage),
        input_tokens,
        input_source: Some(InputTokenSource::Tokenizer),
        error,
        ..Req::default()
    };
    // Line times are no chunk times: a succeeded request lacks them.
    Ok((req, ok && chunk_times.is_none()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_core::Outcome;

    #[test]
    fn chunk_times_make_chunks_and_line_times_only_a_first_chunk() {
        let text = r#"[
          {"start_time": 10.0, "end_time": 10.5, "request": "{}", "response": "",
           "info": {"input_tokens": 8, "response_metrics": {"output_tokens": 3,
             "chunk_times": [10.1, 10.2, 10.4], "output_token_times": [10.1, 10.1, 10.2, 10.2, 10.4, 10.45]}},
           "error": null},
          {"start_time": 11.0, "end_time": 11.3, "request": "{}", "response": "",
           "info": {"input_tokens": 8, "output_tokens": 4, "output_token_times": [11.05, 11.06, 11.1, 11.11, 11.3]},
           "error": null},
          {"start_time": 12.0, "end_time": 12.01, "request": "{}", "response": "",
           "info": {"input_tokens": 8, "output_tokens": 0, "output_token_times": []},
           "error": {"error_type": "TimeoutError", "error_msg": ""}}
        ]"#;
        let imp = import("per_request_lifecycle_metrics.json", text).unwrap();
        assert_eq!(imp.records.len(), 3);
        let a = &imp.records[0];
        assert_eq!(a.chunks.len(), 3);
        assert_eq!(a.chunks[0].t_ns(), 100_000_000);
        assert_eq!(a.end_ns, Some(500_000_000));
        // Line times are no chunk times: the first only, then the end as the last.
        let b = &imp.records[1];
        assert_eq!(b.chunks.len(), 2);
        assert_eq!(b.chunks[0].t_ns(), 1_050_000_000);
        assert!(imp.lacks(Lack::ChunkTimes));
        assert_eq!(imp.records[2].outcome, Outcome::StreamError);
        assert!(imp.records[2]
            .error
            .as_deref()
            .unwrap()
            .contains("TimeoutError"));
    }

    #[test]
    fn hostile_items_are_named() {
        let e = import("f", r#"[{"start_time": "x", "end_time": 1, "info": {}}]"#).unwrap_err();
        assert!(e.msg.contains("[0].start_time"), "{e}");
        let e = import(
            "f",
            r#"[{"start_time": 1, "end_time": 2, "info": {"response_metrics": {"chunk_times": [1, null]}}}]"#,
        )
        .unwrap_err();
        assert!(e.msg.contains("chunk_times[1]"), "{e}");
    }
}

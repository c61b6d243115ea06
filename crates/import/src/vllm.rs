//! `vllm bench serve --save-result --save-detailed` JSON (SGLang's `bench_serving`
//! writes the same per-request lists): per request the TTFT, every gap between chunks
//! (`itls`), the prompt and output lengths and the error, and in recent versions each
//! request's start time; and vLLM's summary figures (`mean_ttft_ms`, `p99_itl_ms`,
//! `request_throughput`, ...), which the import rebuilds under vLLM's definitions.

use crate::build::{self, Lack, Req};
use crate::json::{numbers, parse, Obj};
use crate::numpy;
use crate::{figure, ImportError, Imported, Tool};
use cadence_core::{ImportedFigure, InputTokenSource, Outcome, RequestRecord, TokenSource};
use serde_json::Value;

/// vLLM's definitions, per metric of its summary.
const DEFS: [(&str, &str); 4] = [
    ("ttft", "first chunk - send, per succeeded request"),
    (
        "tpot",
        "(latency - TTFT) / (output tokens - 1) per request with more than one output token; latency runs to the last chunk",
    ),
    ("itl", "every gap between consecutive chunks, pooled over requests"),
    ("e2el", "last chunk - send, per succeeded request"),
];

/// The per-request lists of a detailed result, checked to pair up with `ttfts`.
struct Lists<'a> {
    file: &'a str,
    ttfts: &'a [Value],
    itls: &'a [Value],
    errors: Option<&'a [Value]>,
    output_lens: Option<&'a [Value]>,
    input_lens: Option<&'a [Value]>,
    start_times: Option<&'a [Value]>,
}

impl<'a> Lists<'a> {
    fn new(file: &'a str, top: &Obj<'a>) -> Result<Lists<'a>, ImportError> {
        let (Some(ttfts), Some(itls)) = (top.arr("ttfts")?, top.arr("itls")?) else {
            return Err(ImportError::new(
                file,
                "no per-request lists (ttfts, itls): save the run with --save-result --save-detailed",
            ));
        };
        let lists = Lists {
            file,
            ttfts,
            itls,
            errors: top.arr("errors")?,
            output_lens: top.arr("output_lens")?,
            input_lens: top.arr("input_lens")?,
            start_times: top.arr("start_times")?,
        };
        let n = ttfts.len();
        for (k, l) in [
            ("itls", Some(itls)),
            ("errors", lists.errors),
            ("output_lens", lists.output_lens),
            ("input_lens", lists.input_lens),
            ("start_times", lists.start_times),
        ] {
            if let Some(l) = l.filter(|l| l.len() != n) {
                return Err(ImportError::new(
                    file,
                    format!(
                        "{k} has {} entries but ttfts has {n}: the lists must pair up",
                        l.len()
                    ),
                ));
            }
        }
        Ok(lists)
    }

    /// Entry `i` of list `l` (named `k`): absent, `null` or a number >= 0.
    fn num_at(&self, l: Option<&[Value]>, k: &str, i: usize) -> Result<Option<f64>, ImportError> {
        match l.and_then(|l| l.get(i)) {
            None | Some(Value::Null) => Ok(None),
            Some(x) => x
                .as_f64()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .map(Some)
                .ok_or_else(|| {
                    ImportError::new(
                        self.file,
                        format!("{k}[{i}]: expected a number >= 0, got {x}"),
                    )
                }),
        }
    }

    /// Entry `i` of a token list `l` (named `k`): absent, `null` or a count up to
    /// [`build::MAX_TOKENS`].
    fn tokens_at(
        &self,
        l: Option<&[Value]>,
        k: &str,
        i: usize,
    ) -> Result<Option<u64>, ImportError> {
        match self.num_at(l, k, i)? {
            Some(x) if x > build::MAX_TOKENS as f64 => Err(ImportError::new(
                self.file,
                format!(
                    "{k}[{i}]: {x} tokens: more than the {} a request can have",
                    build::MAX_TOKENS
                ),
            )),
            x => Ok(x.map(|x| x as u64)),
        }
    }

    /// Request `i`, from its entry in each list.
    fn request(&self, i: usize, itl: &Value) -> Result<Req, ImportError> {
        let error = match self.errors.and_then(|e| e.get(i)) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) if s.is_empty() => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
        };
        let gaps = match itl {
            Value::Array(a) => numbers(self.file, &format!("itls[{i}]"), a)?,
            Value::Null => Vec::new(),
            x => {
                return Err(ImportError::new(
                    self.file,
                    format!("itls[{i}]: expected a list of gaps, got {x}"),
                ))
            }
        };
        let out = self.tokens_at(self.output_lens, "output_lens", i)?;
        let ok = error.is_none();
        Ok(Req {
            sent_s: self.num_at(self.start_times, "start_times", i)?,
            ttft_s: if ok {
                self.num_at(Some(self.ttfts), "ttfts", i)?
            } else {
                None
            },
            gaps_s: ok.then_some(gaps),
            output_tokens: if ok { out } else { None },
            token_source: Some(TokenSource::Usage),
            input_tokens: self.tokens_at(self.input_lens, "input_lens", i)?,
            input_source: Some(InputTokenSource::Tokenizer),
            error,
            ..Req::default()
        })
    }
}

/// Reads a `vllm bench serve --save-result --save-detailed` file.
pub fn import(file: &str, text: &str) -> Result<Imported, ImportError> {
    let v = parse(file, text)?;
    let top = Obj::new(file, &v)?;
    let lists = Lists::new(file, &top)?;
    let reqs = lists
        .itls
        .iter()
        .enumerate()
        .map(|(i, itl)| lists.request(i, itl))
        .collect::<Result<Vec<Req>, ImportError>>()?;
    let records = build::records(Tool::Vllm, file, &reqs)?;
    let mut lacks = vec![Lack::TokenSourceUnsaid];
    if lists.start_times.is_none() {
        lacks.push(Lack::SendTimes);
    }
    let duration_s = top.nonneg("duration")?;
    let figures = figures(&top, &records, duration_s)?;
    let rate = match top.get("request_rate") {
        Some(Value::Number(x)) => x.as_f64().filter(|r| r.is_finite() && *r > 0.0),
        _ => None,
    };
    Ok(Imported {
        tool: Tool::Vllm,
        version: None,
        files: vec![file.to_string()],
        model: top.str("model_id")?.map(str::to_string),
        target: top
            .str("backend")?
            .map(|b| format!("vllm bench serve --backend {b}")),
        // `openai-chat` speaks chat completions; `openai` and `vllm`, completions.
        api: top.str("backend")?.and_then(crate::api_named),
        levels: vec![crate::Level::new(
            Tool::Vllm,
            top.count("max_concurrency")?
                .map(|c| c.min(u32::MAX as u64) as u32),
            rate,
        )],
        duration_s,
        started_at_unix_ms: None,
        records,
        lacks,
        figures,
        notes: Vec::new(),
        warnings: Vec::new(),
    })
}

/// The per-request values vLLM summarizes, from the imported records.
pub struct Values {
    /// Time to first token per request, ms.
    pub ttft: Vec<f64>,
    /// Time per output token after the first, per request with two or more tokens, ms.
    pub tpot: Vec<f64>,
    /// Every gap between consecutive chunks, all requests together, ms.
    pub itl: Vec<f64>,
    /// Send to the last chunk per request, ms.
    pub e2el: Vec<f64>,
    /// How many requests succeeded.
    pub completed: u64,
    /// Output tokens summed over the succeeded requests.
    pub output_tokens: u64,
    /// Prompt tokens summed over the succeeded requests.
    pub input_tokens: u64,
}

/// vLLM's per-request values (ms) of the succeeded `records`.
pub fn values(records: &[RequestRecord]) -> Values {
    let ms = |ns: u64| ns as f64 / 1e6;
    let mut v = Values {
        ttft: Vec::new(),
        tpot: Vec::new(),
        itl: Vec::new(),
        e2el: Vec::new(),
        completed: 0,
        output_tokens: 0,
        input_tokens: 0,
    };
    for r in records.iter().filter(|r| r.outcome == Outcome::Succeeded) {
        v.completed += 1;
        let n = r.output_tokens.map_or(0, |t| t.count);
        v.output_tokens += n;
        v.input_tokens += r.input_tokens.unwrap_or(0);
        let (Some(sent), Some(first), Some(last)) =
            (r.sent_ns, r.first_chunk_ns(), r.last_chunk_ns())
        else {
            continue;
        };
        let ttft = ms(first - sent);
        let latency = ms(last - sent);
        v.ttft.push(ttft);
        v.e2el.push(latency);
        if n > 1 {
            v.tpot.push((latency - ttft) / (n - 1) as f64);
        }
        v.itl
            .extend(r.chunks.windows(2).map(|w| ms(w[1].t_ns() - w[0].t_ns())));
    }
    v
}

/// Every summary figure the file holds, each beside its rebuild.
fn figures(
    top: &Obj,
    records: &[RequestRecord],
    duration_s: Option<f64>,
) -> Result<Vec<ImportedFigure>, ImportError> {
    let v = values(records);
    let mut out = Vec::new();
    for (metric, def) in DEFS {
        let xs = match metric {
            "ttft" => &v.ttft,
            "tpot" => &v.tpot,
            "itl" => &v.itl,
            _ => &v.e2el,
        };
        // mean, median, std, then the percentiles in the file's order.
        let mut stats: Vec<String> = ["mean", "median", "std"].map(String::from).to_vec();
        for k in top.map.keys() {
            if let Some(p) = k
                .strip_suffix(&format!("_{metric}_ms"))
                .filter(|p| p.starts_with('p') && p[1..].parse::<f64>().is_ok())
            {
                stats.push(p.to_string());
            }
        }
        for stat in stats {
            let key = format!("{stat}_{metric}_ms");
            let Some(printed) = top.num(&key)? else {
                continue;
            };
            out.push(figure(
                &key,
                "ms",
                Some(printed),
                numpy::stat(xs, &stat, 0),
                def,
            ));
        }
    }
    let per_s = |x: f64| duration_s.filter(|d| *d > 0.0).map(|d| x / d);
    let rows: [(&str, &str, Option<f64>, &str); 6] = [
        (
            "completed",
            "requests",
            Some(v.completed as f64),
            "succeeded requests",
        ),
        (
            "total_input_tokens",
            "tokens",
            Some(v.input_tokens as f64),
            "prompt tokens of the succeeded requests",
        ),
        (
            "total_output_tokens",
            "tokens",
            Some(v.output_tokens as f64),
            "output tokens of the succeeded requests",
        ),
        (
            "request_throughput",
            "req/s",
            per_s(v.completed as f64),
            "succeeded requests / the run's duration (vLLM's, as saved)",
        ),
        (
            "output_throughput",
            "tok/s",
            per_s(v.output_tokens as f64),
            "output tokens / the run's duration (vLLM's, as saved)",
        ),
        (
            "total_token_throughput",
            "tok/s",
            per_s((v.input_tokens + v.output_tokens) as f64),
            "(prompt + output tokens) / the run's duration (vLLM's, as saved)",
        ),
    ];
    for (key, unit, rebuilt, def) in rows {
        if let Some(printed) = top.num(key)? {
            out.push(figure(key, unit, Some(printed), rebuilt, def));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Two succeeded requests and one failure, with vLLM's figures computed by hand.
    const RUN: &str = r#"{
      "duration": 2.0, "completed": 2, "request_throughput": 1.0,
      "output_throughput": 3.5, "total_input_tokens": 20,
      "mean_ttft_ms": 15.0, "median_ttft_ms": 15.0, "p99_ttft_ms": 19.9,
      "mean_itl_ms": 20.0, "p99_itl_ms": 39.6,
      "mean_tpot_ms": 17.5, "std_e2el_ms": 2.5,
      "model_id": "m", "max_concurrency": 2, "request_rate": "inf",
      "input_lens": [10, 10, 10], "output_lens": [3, 4, 0],
      "ttfts": [0.010, 0.020, 0.0], "itls": [[0.010, 0.020], [0.010, 0.010, 0.040], []],
      "start_times": [5.0, 5.5, 6.0],
      "errors": ["", "", "HTTP 500"]
    }"#;

    #[test]
    fn lists_become_records_and_vllm_figures_are_rebuilt() {
        let imp = import("run.json", RUN).unwrap();
        assert_eq!(imp.records.len(), 3);
        assert_eq!(imp.records[2].outcome, Outcome::StreamError);
        assert_eq!(imp.records[1].sent_ns, Some(500_000_000));
        assert_eq!(imp.levels[0].name, "concurrency=2");
        assert!(!imp.lacks(Lack::SendTimes));
        assert!(!imp.lacks(Lack::ChunkTimes));
        let f = |k: &str| imp.figures.iter().find(|f| f.name == k).unwrap().clone();
        // TTFT 10, 20 ms: mean 15, p99 = 10 + 0.99 * 10
        assert!((f("p99_ttft_ms").rebuilt.unwrap() - 19.9).abs() < 1e-6);
        // gaps 10, 20, 10, 10, 40: mean 18, p99 = 20 + 0.96 * 20 = 39.2
        assert!((f("mean_itl_ms").rebuilt.unwrap() - 18.0).abs() < 1e-6);
        assert!((f("p99_itl_ms").rebuilt.unwrap() - 39.2).abs() < 1e-6);
        // TPOT: A 30/2 = 15, B 60/3 = 20 -> 17.5
        assert!((f("mean_tpot_ms").rebuilt.unwrap() - 17.5).abs() < 1e-6);
        // E2E 40, 80 ms: population std 20
        assert!((f("std_e2el_ms").rebuilt.unwrap() - 20.0).abs() < 1e-6);
        assert!((f("request_throughput").rebuilt.unwrap() - 1.0).abs() < 1e-12);
        assert!((f("output_throughput").rebuilt.unwrap() - 3.5).abs() < 1e-12);
        assert_eq!(f("total_input_tokens").rebuilt, Some(20.0));
    }

    #[test]
    fn without_start_times_send_times_are_named_missing() {
        let text = RUN.replace("\"start_times\": [5.0, 5.5, 6.0],", "");
        let imp = import("run.json", &text).unwrap();
        assert!(imp.lacks(Lack::SendTimes));
        assert!(imp.records.iter().all(|r| r.sent_ns == Some(0)));
    }

    #[test]
    fn impossible_token_counts_and_times_are_refused_naming_the_entry() {
        let e = import("run.json", &RUN.replace("[3, 4, 0]", "[3, 1e30, 0]")).unwrap_err();
        assert_eq!(e.file, "run.json");
        assert!(
            e.msg.contains(
                "output_lens[1]: 1000000000000000000000000000000 tokens: more than the 1000000000"
            ),
            "{e}"
        );
        let e = import("run.json", &RUN.replace("[10, 10, 10]", "[10, 10, 1e12]")).unwrap_err();
        assert!(e.msg.contains("input_lens[2]"), "{e}");
        let e = import(
            "run.json",
            &RUN.replace("[0.010, 0.020, 0.0]", "[0.010, 1e30, 0.0]"),
        )
        .unwrap_err();
        assert!(e.msg.contains("request 2: TTFT at 1e30 s"), "{e}");
    }

    #[test]
    fn a_summary_only_file_and_mismatched_lists_are_refused() {
        let e = import("s.json", r#"{"duration": 1, "mean_ttft_ms": 3}"#).unwrap_err();
        assert!(e.msg.contains("--save-detailed"), "{e}");
        let e = import("s.json", r#"{"ttfts": [0.1, 0.2], "itls": [[]]}"#).unwrap_err();
        assert!(e.msg.contains("pair up"), "{e}");
        let e = import("s.json", r#"{"ttfts": [-0.1], "itls": [[]]}"#).unwrap_err();
        assert!(e.msg.contains("ttfts[0]"), "{e}");
        let e = import("s.json", r#"{"ttfts": [0.1], "itls": [[0.1, "x"]]}"#).unwrap_err();
        assert!(e.msg.contains("itls[0][1]"), "{e}");
        let e = import("s.json", r#"{"ttfts": [0.1], "itls": 5}"#).unwrap_err();
        assert!(e.msg.contains("itls"), "{e}");
    }
}

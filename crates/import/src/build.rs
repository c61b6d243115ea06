//! One request as another tool saved it, turned into a Cadence record on one timeline,
//! and the words for what a file lacks. Shared by every importer so a missing value is
//! treated the same way everywhere: left absent, never filled in.

use crate::{ImportError, Tool};
use cadence_core::{
    Chunk, InputTokenSource, Outcome, RecordSource, RequestRecord, TokenCount, TokenSource,
};

/// The most tokens a request's prompt or output may have in an import: a billion, far
/// past any context window (the same ceiling the wire puts on a server's usage).
pub const MAX_TOKENS: u64 = 1_000_000_000;

/// The longest a request may take in an import, send to end, in seconds: a day.
pub const MAX_REQUEST_S: f64 = 86_400.0;

/// The longest span of sends an import may hold, in seconds: a year.
pub const MAX_SPAN_S: f64 = 365.0 * 86_400.0;

/// Something an imported file does not hold, which blanks the figures that need it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Lack {
    /// No time of each chunk (only TTFT and the request's end, or a mean ITL).
    ChunkTimes,
    /// No send time per request: requests cannot be placed on the run's timeline.
    SendTimes,
    /// Output tokens counted by the tool's tokenizer over the text, not the server's.
    ServerTokens,
    /// Output tokens from the server's usage when it sent one, else the tool's
    /// tokenizer: the file does not say which.
    TokenSourceUnsaid,
}

impl Lack {
    /// What the file lacks, in words.
    pub fn words(self, tool: Tool) -> String {
        match (self, tool) {
            (Lack::ChunkTimes, Tool::Llmperf) => "no chunk times: only a per-request ITL (TTFT included, divided by the tokens) and the end-to-end latency; the last chunk is placed at the end of the response".into(),
            (Lack::ChunkTimes, Tool::Guidellm) => "no chunk times: only each request's first and last token times".into(),
            (Lack::ChunkTimes, Tool::GenaiBench) => "no chunk times: only TTFT, the end-to-end latency and a per-request TPOT; the last chunk is placed at the end of the response".into(),
            (Lack::ChunkTimes, Tool::InferencePerf) => "no chunk times: only the time of every SSE line (blank lines and [DONE] included), of which the first is taken as the first chunk and the end as the last".into(),
            (Lack::ChunkTimes, _) => "no chunk times: only TTFT, the request latency and a per-request mean ITL; the last chunk is placed at the end of the response".into(),
            (Lack::SendTimes, _) => "no send time per request: the requests cannot be placed on the run's timeline (each is counted from its own send)".into(),
            (Lack::ServerTokens, t) => format!("client-counted tokens: output tokens are {t}'s tokenizer over the text, not the server's usage"),
            (Lack::TokenSourceUnsaid, t) => format!("output tokens are the server's usage when it sent one, else {t}'s tokenizer: the file does not say which"),
        }
    }

    /// The report's figures this leaves blank.
    pub fn not_rebuilt(self) -> &'static [&'static str] {
        match self {
            Lack::ChunkTimes => &[
                "ITL (gaps between chunks, pooled; the cadence and vllm conventions' ITL)",
                "ITL/token",
                "tokens per chunk",
                "stalls",
                "ITL charts",
                "the time series",
            ],
            Lack::SendTimes => &[
                "throughput over Cadence's window (first send to last end)",
                "TTFT (response)",
                "the time series",
            ],
            Lack::ServerTokens | Lack::TokenSourceUnsaid => &[],
        }
    }
}

/// One request as a tool saved it. Times in seconds; `sent_s` on the tool's own clock
/// (any origin), the others from the request's send.
#[derive(Debug, Clone, Default)]
pub struct Req {
    /// When the request was sent (`None`: the file holds no send times).
    pub sent_s: Option<f64>,
    /// Send to the first chunk (`None`: not saved).
    pub ttft_s: Option<f64>,
    /// Every gap between consecutive chunks, when the file holds them.
    pub gaps_s: Option<Vec<f64>>,
    /// Send to the last chunk, when the file holds it apart from the end.
    pub last_s: Option<f64>,
    /// Send to the end of the response.
    pub e2e_s: Option<f64>,
    /// Output tokens the file counts (`None`: no count saved).
    pub output_tokens: Option<u64>,
    /// Who counted `output_tokens`; a count without a source is left out of the record.
    pub token_source: Option<TokenSource>,
    /// Prompt tokens the file counts (`None`: no count saved).
    pub input_tokens: Option<u64>,
    /// Who counted `input_tokens` (`None`: the file does not say).
    pub input_source: Option<InputTokenSource>,
    /// The failure, in the tool's words (`None`: succeeded).
    pub error: Option<String>,
    /// The response's HTTP status, when the file holds it; a failure with a non-2xx
    /// status is recorded under that status, else as a stream error.
    pub http_status: Option<u16>,
    /// The tool cancelled the request on purpose.
    pub cancelled: bool,
}

fn ns(s: f64) -> u64 {
    (s * 1e9).round().max(0.0) as u64
}

/// The records of `reqs`, in order, on one timeline whose 0 is the earliest send (all
/// sent at 0 when the file holds no send times). A value no request can have (a
/// negative or non-finite time, a time or count past its ceiling) is an error naming
/// `file`, the request (1-based, in file order) and the value.
pub fn records(tool: Tool, file: &str, reqs: &[Req]) -> Result<Vec<RequestRecord>, ImportError> {
    let origin = reqs
        .iter()
        .filter_map(|r| r.sent_s)
        .reduce(f64::min)
        .unwrap_or(0.0);
    for (i, q) in reqs.iter().enumerate() {
        possible(q, origin)
            .map_err(|e| ImportError::new(file, format!("request {}: {e}", i + 1)))?;
    }
    Ok(reqs
        .iter()
        .enumerate()
        .map(|(i, q)| record(tool, i as u64, q, origin))
        .collect())
}

/// Whether `q`'s values are ones a request can have; the first that is not, named.
fn possible(q: &Req, origin: f64) -> Result<(), String> {
    for (what, n) in [
        ("output tokens", q.output_tokens),
        ("prompt tokens", q.input_tokens),
    ] {
        if let Some(n) = n.filter(|&n| n > MAX_TOKENS) {
            return Err(format!(
                "{n} {what}: more than the {MAX_TOKENS} a request can have"
            ));
        }
    }
    let span = q.sent_s.map(|s| s - origin);
    let gaps = q
        .gaps_s
        .iter()
        .flatten()
        .map(|&g| ("a gap between chunks", Some(g)));
    let times = [
        ("TTFT", q.ttft_s),
        ("the last chunk", q.last_s),
        ("the end", q.e2e_s),
    ];
    for (what, t) in times.into_iter().chain(gaps) {
        match t {
            Some(t) if !(0.0..=MAX_REQUEST_S).contains(&t) => {
                // 1e308 written out is 309 digits: past a billion, the exponent form.
                let t = if t.abs() < 1e9 {
                    t.to_string()
                } else {
                    format!("{t:e}")
                };
                return Err(format!(
                    "{what} at {t} s: a time within a request is from 0 to {MAX_REQUEST_S} s"
                ));
            }
            _ => {}
        }
    }
    let whole: f64 = q.gaps_s.iter().flatten().sum::<f64>() + q.ttft_s.unwrap_or(0.0);
    if whole > MAX_REQUEST_S {
        return Err(format!(
            "its chunks end {whole} s after its send: past the {MAX_REQUEST_S} s a request may take"
        ));
    }
    match (q.sent_s, span) {
        (Some(s), _) if !s.is_finite() => Err(format!("sent at {s}: not a time")),
        (_, Some(d)) if d > MAX_SPAN_S => Err(format!(
            "sent {d} s after the first request: past the {MAX_SPAN_S} s an import may span"
        )),
        _ => Ok(()),
    }
}

fn record(tool: Tool, index: u64, q: &Req, origin: f64) -> RequestRecord {
    let outcome = match (&q.error, q.cancelled, q.http_status) {
        (None, false, _) => Outcome::Succeeded,
        (_, true, _) => Outcome::AbortedAtDeadline,
        (Some(_), _, Some(s)) if !(200..300).contains(&s) => Outcome::from_status(s),
        (Some(_), _, _) => Outcome::StreamError,
    };
    let mut r = RequestRecord::new(index, outcome);
    r.source = RecordSource::Bench;
    let sent = q.sent_s.map_or(0.0, |s| s - origin);
    r.sent_ns = Some(ns(sent));
    r.http_status = q.http_status;
    r.error = q.error.as_ref().map(|e| format!("{tool}: {e}"));
    if let Some(n) = q.input_tokens {
        r.input_tokens = Some(n);
        r.input_tokens_source = q.input_source;
    }
    if let (Some(n), Some(src)) = (q.output_tokens, q.token_source) {
        r.output_tokens = Some(TokenCount {
            count: n,
            source: src,
        });
        match src {
            TokenSource::Usage => r.token_sources.usage = Some(n),
            TokenSource::TokenIds => r.token_sources.token_ids = Some(n),
            TokenSource::Tokenizer => r.token_sources.tokenizer = Some(n),
            TokenSource::Chunks => {}
        }
    }
    if outcome == Outcome::Succeeded {
        if let Some(ttft) = q.ttft_s {
            let first = sent + ttft;
            r.chunks.push(Chunk(ns(first), None));
            match &q.gaps_s {
                Some(gaps) => {
                    let mut t = first;
                    for g in gaps {
                        t += g;
                        r.chunks.push(Chunk(ns(t), None));
                    }
                }
                None => {
                    // Only the last chunk is known (or taken at the end of the response).
                    let last = q.last_s.or(q.e2e_s).filter(|&l| l > ttft);
                    if let (Some(l), true) = (last, q.output_tokens.unwrap_or(0) >= 2) {
                        r.chunks.push(Chunk(ns(sent + l), None));
                    }
                }
            }
            r.first_content_ns = r.first_chunk_ns();
        }
    }
    r.end_ns = match q.e2e_s {
        Some(e) => Some(ns(sent + e).max(r.last_chunk_ns().unwrap_or(0))),
        None => r.last_chunk_ns().or(r.sent_ns),
    };
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn gaps_make_chunks_from_the_first_token_on_and_sends_share_one_origin() {
        let a = Req {
            sent_s: Some(100.0),
            ttft_s: Some(0.010),
            gaps_s: Some(vec![0.005, 0.020]),
            output_tokens: Some(3),
            token_source: Some(TokenSource::Usage),
            ..Req::default()
        };
        let b = Req {
            sent_s: Some(100.5),
            ttft_s: Some(0.002),
            gaps_s: Some(vec![]),
            output_tokens: Some(1),
            token_source: Some(TokenSource::Usage),
            ..Req::default()
        };
        let r = records(Tool::Vllm, "f", &[a, b]).unwrap();
        let t: Vec<u64> = r[0].chunks.iter().map(|c| c.t_ns()).collect();
        assert_eq!(t, vec![10 * MS, 15 * MS, 35 * MS]);
        assert_eq!(r[0].sent_ns, Some(0));
        assert_eq!(r[0].end_ns, Some(35 * MS));
        assert_eq!(r[1].sent_ns, Some(500 * MS));
        assert_eq!(r[1].chunks.len(), 1);
        assert_eq!(r[0].token_sources.usage, Some(3));
    }

    #[test]
    fn impossible_values_are_refused_naming_file_request_and_value() {
        let ok = Req {
            sent_s: Some(10.0),
            ttft_s: Some(0.1),
            gaps_s: Some(vec![0.01]),
            e2e_s: Some(0.5),
            output_tokens: Some(2),
            token_source: Some(TokenSource::Usage),
            ..Req::default()
        };
        let refused = |bad: Req, needle: &str| {
            let e = records(Tool::Vllm, "run.json", &[ok.clone(), bad]).unwrap_err();
            assert_eq!(e.file, "run.json");
            assert!(e.msg.starts_with("request 2: "), "{e}");
            assert!(e.msg.contains(needle), "{needle}: {e}");
        };
        refused(
            Req {
                output_tokens: Some(u64::MAX),
                ..ok.clone()
            },
            "18446744073709551615 output tokens: more than the 1000000000",
        );
        refused(
            Req {
                input_tokens: Some(MAX_TOKENS + 1),
                ..ok.clone()
            },
            "1000000001 prompt tokens",
        );
        refused(
            Req {
                ttft_s: Some(-0.5),
                ..ok.clone()
            },
            "TTFT at -0.5 s",
        );
        refused(
            Req {
                e2e_s: Some(f64::NAN),
                ..ok.clone()
            },
            "the end at NaN s",
        );
        refused(
            Req {
                gaps_s: Some(vec![1e30]),
                ..ok.clone()
            },
            "a gap between chunks at 1e30 s",
        );
        refused(
            Req {
                gaps_s: Some(vec![50_000.0, 50_000.0]),
                ..ok.clone()
            },
            "its chunks end 100000.1 s after its send",
        );
        refused(
            Req {
                sent_s: Some(10.0 + 4e7),
                ..ok.clone()
            },
            "sent 40000000 s after the first request",
        );
        // At the ceilings, read.
        let edge = Req {
            output_tokens: Some(MAX_TOKENS),
            e2e_s: Some(MAX_REQUEST_S),
            ..ok.clone()
        };
        assert_eq!(records(Tool::Vllm, "f", &[ok, edge]).unwrap().len(), 2);
    }

    #[test]
    fn without_gaps_only_the_first_and_last_chunks_are_placed() {
        let q = Req {
            ttft_s: Some(0.1),
            e2e_s: Some(0.5),
            output_tokens: Some(10),
            token_source: Some(TokenSource::Tokenizer),
            ..Req::default()
        };
        let r = records(Tool::Llmperf, "f", std::slice::from_ref(&q)).unwrap();
        let t: Vec<u64> = r[0].chunks.iter().map(|c| c.t_ns()).collect();
        assert_eq!(t, vec![100 * MS, 500 * MS]);
        // One token: no second chunk is made up.
        let one = Req {
            output_tokens: Some(1),
            ..q
        };
        assert_eq!(
            records(Tool::Llmperf, "f", &[one]).unwrap()[0].chunks.len(),
            1
        );
    }

    #[test]
    fn failures_keep_their_class_and_words_and_no_chunks() {
        let q = Req {
            sent_s: Some(1.0),
            ttft_s: Some(0.1),
            error: Some("boom".into()),
            http_status: Some(503),
            ..Req::default()
        };
        let r = &records(Tool::Aiperf, "f", std::slice::from_ref(&q)).unwrap()[0];
        assert_eq!(r.outcome, Outcome::Http5xx);
        assert_eq!(r.error.as_deref(), Some("aiperf: boom"));
        assert!(r.chunks.is_empty());
        let q = Req {
            http_status: None,
            ..q
        };
        assert_eq!(
            records(Tool::Aiperf, "f", &[q]).unwrap()[0].outcome,
            Outcome::StreamError
        );
        // No output-token count is invented.
        assert_eq!(r.output_tokens, None);
    }
}

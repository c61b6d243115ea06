//! The same run re-expressed the way other benchmark tools define ITL and TPOT, so a
//! number from `vllm bench serve`, AIPerf, GuideLLM or LLMPerf can be compared with a
//! Cadence run. Pure functions of records; each formula says where it came from.

use crate::dist::DistAcc;
use crate::metrics::ms;
use crate::stats::{self, Distribution};
use crate::{Outcome, RequestRecord};
use serde::{Deserialize, Serialize};

/// The compatibility view in words, for the report's definitions.
pub const FORMULA: &str = "ITL and TPOT re-expressed as other tools define them, from the \
same records (succeeded, non-warm-up requests; tokens = the record's output-token count): \
vllm (vLLM bench serve, SGLang bench_serving): ITL = chunk gaps pooled, TPOT = (last chunk - \
first chunk)/(tokens - 1) per request with tokens > 1; aiperf (AIPerf, GenAI-Perf): ITL = \
(end of response - first chunk)/(tokens - 1) per request; guidellm: ITL = (last - first \
chunk)/(tokens - 1) weighted by tokens - 1, TPOT = (last chunk - sent)/tokens weighted by \
tokens; llmperf: ITL = (last chunk - sent)/tokens per request";

/// A tool whose ITL/TPOT definition Cadence can reproduce.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Convention {
    /// Cadence's own definitions (see `crate::metrics::formula`).
    Cadence,
    /// `vllm bench serve` (benchmarks/serve.py) and SGLang's `bench_serving`.
    Vllm,
    /// NVIDIA AIPerf and its predecessor GenAI-Perf.
    Aiperf,
    /// GuideLLM.
    Guidellm,
    /// Anyscale LLMPerf (`token_benchmark_ray.py`).
    Llmperf,
}

impl Convention {
    /// Every convention, Cadence's own first.
    pub const ALL: [Convention; 5] = [
        Convention::Cadence,
        Convention::Vllm,
        Convention::Aiperf,
        Convention::Guidellm,
        Convention::Llmperf,
    ];

    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            Convention::Cadence => "cadence",
            Convention::Vllm => "vllm",
            Convention::Aiperf => "aiperf",
            Convention::Guidellm => "guidellm",
            Convention::Llmperf => "llmperf",
        }
    }

    /// The tools that share the convention, for people.
    pub fn tools(self) -> &'static str {
        match self {
            Convention::Cadence => "Cadence",
            Convention::Vllm => "vLLM bench serve / SGLang bench_serving",
            Convention::Aiperf => "AIPerf / GenAI-Perf",
            Convention::Guidellm => "GuideLLM",
            Convention::Llmperf => "LLMPerf",
        }
    }

    /// ITL as the tool defines it, in words.
    pub fn itl_formula(self) -> &'static str {
        match self {
            Convention::Cadence | Convention::Vllm => {
                "gaps between consecutive chunks, pooled over requests"
            }
            Convention::Aiperf => {
                "per request (E2E - TTFT) / (tokens - 1), E2E to the end of the response; percentiles over requests"
            }
            Convention::Guidellm => {
                "per request (last chunk - first chunk) / (tokens - 1), weighted by tokens - 1"
            }
            Convention::Llmperf => {
                "per request (TTFT + every chunk gap) / tokens = (last chunk - sent) / tokens; percentiles over requests"
            }
        }
    }

    /// TPOT as the tool defines it, in words (`None`: the tool reports no TPOT).
    pub fn tpot_formula(self) -> Option<&'static str> {
        match self {
            Convention::Cadence => {
                Some("per request (last chunk - first chunk) / (tokens - 1), at least 2 chunks")
            }
            Convention::Vllm => Some(
                "per request (E2E - TTFT) / (tokens - 1) with E2E to the last chunk, requests with tokens > 1",
            ),
            Convention::Guidellm => {
                Some("per request (last chunk - sent) / tokens (TTFT included), weighted by tokens")
            }
            Convention::Aiperf | Convention::Llmperf => None,
        }
    }
}

impl std::fmt::Display for Convention {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for Convention {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().to_ascii_lowercase().as_str() {
            "cadence" => Ok(Convention::Cadence),
            "vllm" | "sglang" => Ok(Convention::Vllm),
            "aiperf" | "genai-perf" | "genai_perf" | "genaiperf" => Ok(Convention::Aiperf),
            "guidellm" => Ok(Convention::Guidellm),
            "llmperf" => Ok(Convention::Llmperf),
            other => Err(format!(
                "unknown convention '{other}': use cadence, vllm (or sglang), aiperf (or genai-perf), guidellm or llmperf"
            )),
        }
    }
}

/// One convention's figures for a level. Times are milliseconds in the JSON.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConventionView {
    /// [`Convention::name`].
    pub convention: String,
    /// The tools that use it.
    pub tools: String,
    /// ITL as this convention defines it, ms; `None` when no request gave a sample.
    #[serde(with = "stats::as_ms")]
    pub itl: Option<Distribution>,
    /// TPOT as this convention defines it, ms; `None` when the tool reports none or no
    /// request gave a sample.
    #[serde(with = "stats::as_ms")]
    pub tpot: Option<Distribution>,
    /// How the convention computes ITL, in words.
    pub itl_formula: String,
    /// `null` when the tool reports no TPOT.
    pub tpot_formula: Option<String>,
}

/// The output tokens a request counts under every convention: the record's count
/// (usage, token ids or tokenizer), else one per chunk. AIPerf and LLMPerf re-tokenize
/// the text; Cadence uses the best count it has, which the report names.
fn tokens(r: &RequestRecord) -> u64 {
    r.output_token_count().count
}

/// Each convention's ITL and TPOT over the succeeded, non-warm-up `records`.
pub fn convention_views(records: &[RequestRecord]) -> Vec<ConventionView> {
    fold(records).views()
}

/// ITL and TPOT (ms) of `records` under convention `c`.
pub fn figures(
    c: Convention,
    records: &[RequestRecord],
) -> (Option<Distribution>, Option<Distribution>) {
    fold(records).figures(c)
}

fn fold(records: &[RequestRecord]) -> ConventionsAcc {
    let mut acc = ConventionsAcc::default();
    for r in records {
        acc.push(r);
    }
    acc
}

/// What every convention's figures need, one record at a time. Cadence and vLLM pool
/// the same chunk gaps, kept once.
#[derive(Debug, Clone, Default)]
pub struct ConventionsAcc {
    pooled_itl: DistAcc,
    cadence_tpot: DistAcc,
    vllm_tpot: DistAcc,
    aiperf_itl: DistAcc,
    guidellm_itl: DistAcc,
    guidellm_tpot: DistAcc,
    llmperf_itl: DistAcc,
}

impl ConventionsAcc {
    /// Takes one record; returns the values it kept exactly (for the level's budget).
    pub fn push(&mut self, r: &RequestRecord) -> u64 {
        if r.outcome != Outcome::Succeeded || r.warmup {
            return 0;
        }
        let n = tokens(r);
        let (Some(sent), Some(first), Some(last)) =
            (r.sent_ns, r.first_chunk_ns(), r.last_chunk_ns())
        else {
            return 0;
        };
        let (Some(decode), Some(to_last)) = (last.checked_sub(first), last.checked_sub(sent))
        else {
            return 0;
        };
        let mut kept = 0;
        for w in r.chunks.windows(2) {
            if let Some(g) = w[1].t_ns().checked_sub(w[0].t_ns()) {
                kept += self.pooled_itl.push(ms(g));
            }
        }
        if n >= 2 {
            let per_step = ms(decode) / (n - 1) as f64;
            if r.chunks.len() >= 2 {
                kept += self.cadence_tpot.push(per_step);
            }
            kept += self.vllm_tpot.push(per_step);
            // E2E runs to the end of the response (the last message received).
            if let Some(d) = r.end_ns.unwrap_or(last).checked_sub(first) {
                kept += self.aiperf_itl.push(ms(d) / (n - 1) as f64);
            }
            kept += self.guidellm_itl.push_weighted(per_step, n - 1);
        }
        if n >= 1 {
            let per_token = ms(to_last) / n as f64;
            kept += self.guidellm_tpot.push_weighted(per_token, n);
            kept += self.llmperf_itl.push(per_token);
        }
        kept
    }

    /// Adds another part of the same level.
    pub fn merge(&mut self, o: &ConventionsAcc) {
        for (a, b) in self.dists_mut().zip(o.dists()) {
            a.merge(b);
        }
    }

    fn dists(&self) -> [&DistAcc; 7] {
        [
            &self.pooled_itl,
            &self.cadence_tpot,
            &self.vllm_tpot,
            &self.aiperf_itl,
            &self.guidellm_itl,
            &self.guidellm_tpot,
            &self.llmperf_itl,
        ]
    }

    /// Every distribution, for the level's budget.
    pub fn dists_mut(&mut self) -> impl Iterator<Item = &mut DistAcc> {
        [
            &mut self.pooled_itl,
            &mut self.cadence_tpot,
            &mut self.vllm_tpot,
            &mut self.aiperf_itl,
            &mut self.guidellm_itl,
            &mut self.guidellm_tpot,
            &mut self.llmperf_itl,
        ]
        .into_iter()
    }

    /// Heap bytes held by the distributions.
    pub fn approx_bytes(&self) -> usize {
        self.dists().iter().map(|d| d.approx_bytes()).sum()
    }

    /// ITL and TPOT (ms) under convention `c`.
    pub fn figures(&self, c: Convention) -> (Option<Distribution>, Option<Distribution>) {
        match c {
            Convention::Cadence => (self.pooled_itl.summary(), self.cadence_tpot.summary()),
            Convention::Vllm => (self.pooled_itl.summary(), self.vllm_tpot.summary()),
            Convention::Aiperf => (self.aiperf_itl.summary(), None),
            Convention::Guidellm => (self.guidellm_itl.summary(), self.guidellm_tpot.summary()),
            Convention::Llmperf => (self.llmperf_itl.summary(), None),
        }
    }

    /// The chunk gaps Cadence and vLLM pool.
    pub(crate) fn pooled_itl(&self) -> &DistAcc {
        &self.pooled_itl
    }

    /// Every convention's view, each distribution summarized once (Cadence and vLLM
    /// share the pooled gaps).
    pub fn views(&self) -> Vec<ConventionView> {
        self.views_with_pooled(self.pooled_itl.summary())
    }

    /// [`Self::views`] with the summary of [`Self::pooled_itl`] already made (by an
    /// owner that summarized the same samples elsewhere).
    pub(crate) fn views_with_pooled(&self, pooled: Option<Distribution>) -> Vec<ConventionView> {
        Convention::ALL
            .iter()
            .map(|&c| {
                let (itl, tpot) = match c {
                    Convention::Cadence => (pooled, self.cadence_tpot.summary()),
                    Convention::Vllm => (pooled, self.vllm_tpot.summary()),
                    c => self.figures(c),
                };
                ConventionView {
                    convention: c.name().to_string(),
                    tools: c.tools().to_string(),
                    itl,
                    tpot,
                    itl_formula: c.itl_formula().to_string(),
                    tpot_formula: c.tpot_formula().map(str::to_string),
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Chunk, TokenCount, TokenSource};

    const MS: u64 = 1_000_000;

    /// Sent at 0, chunks at the given ms, ended at `end` ms, `usage` tokens.
    fn rec(chunks_ms: &[u64], end: u64, usage: u64) -> RequestRecord {
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.sent_ns = Some(0);
        r.chunks = chunks_ms.iter().map(|&t| Chunk(t * MS, None)).collect();
        r.end_ns = Some(end * MS);
        r.output_tokens = Some(TokenCount {
            count: usage,
            source: TokenSource::Usage,
        });
        r
    }

    /// Two requests: A = chunks at 100, 110, 130 ms, end 140, 3 tokens;
    /// B = chunks at 200, 240 ms (the second carries 3 tokens unannounced), end 250, 4 tokens.
    fn records() -> Vec<RequestRecord> {
        vec![rec(&[100, 110, 130], 140, 3), rec(&[200, 240], 250, 4)]
    }

    fn close(a: f64, b: f64) {
        assert!((a - b).abs() < 1e-9, "{a} != {b}");
    }

    #[test]
    fn vllm_pools_chunk_gaps_and_divides_decode_time_by_usage_tokens() {
        let (itl, tpot) = figures(Convention::Vllm, &records());
        let itl = itl.unwrap();
        // gaps: A 10, 20; B 40 -> pooled [10, 20, 40]
        assert_eq!(itl.count, 3);
        close(itl.mean, 70.0 / 3.0);
        close(itl.p50, 20.0);
        let tpot = tpot.unwrap();
        // A (130-100)/(3-1) = 15; B (240-200)/(4-1) = 13.333
        assert_eq!(tpot.count, 2);
        close(tpot.mean, (15.0 + 40.0 / 3.0) / 2.0);
    }

    #[test]
    fn vllm_counts_a_single_chunk_request_with_several_tokens_as_tpot_zero_cadence_skips_it() {
        let recs = vec![rec(&[100], 110, 5)];
        assert_eq!(figures(Convention::Vllm, &recs).1.unwrap().max, 0.0);
        assert!(figures(Convention::Cadence, &recs).1.is_none());
    }

    #[test]
    fn aiperf_runs_e2e_to_the_end_of_the_response_per_request() {
        let (itl, tpot) = figures(Convention::Aiperf, &records());
        let itl = itl.unwrap();
        // A (140-100)/2 = 20; B (250-200)/3 = 16.667; percentiles over 2 requests
        assert_eq!(itl.count, 2);
        close(itl.min, 50.0 / 3.0);
        close(itl.max, 20.0);
        close(itl.p50, (20.0 + 50.0 / 3.0) / 2.0);
        assert!(tpot.is_none(), "AIPerf has no separate TPOT");
    }

    #[test]
    fn guidellm_weights_itl_by_tokens_minus_one_and_includes_ttft_in_tpot() {
        let (itl, tpot) = figures(Convention::Guidellm, &records());
        let itl = itl.unwrap();
        // A 15 ms weighted 2; B 13.333 ms weighted 3 -> mean (30 + 40)/5 = 14
        assert_eq!(itl.count, 5);
        close(itl.mean, 14.0);
        // expanded ranks 0..4: B, B, B, A, A -> p50 at rank 2
        close(itl.p50, 40.0 / 3.0);
        let tpot = tpot.unwrap();
        // A 130/3 = 43.333 weighted 3; B 240/4 = 60 weighted 4 -> mean (130 + 240)/7
        assert_eq!(tpot.count, 7);
        close(tpot.mean, 370.0 / 7.0);
    }

    #[test]
    fn llmperf_divides_time_to_last_chunk_by_tokens() {
        let (itl, tpot) = figures(Convention::Llmperf, &records());
        let itl = itl.unwrap();
        // A (100 + 10 + 20)/3 = 43.333; B (200 + 40)/4 = 60
        assert_eq!(itl.count, 2);
        close(itl.min, 130.0 / 3.0);
        close(itl.max, 60.0);
        assert!(tpot.is_none());
    }

    #[test]
    fn failed_and_warmup_requests_are_left_out() {
        let mut recs = records();
        let mut bad = rec(&[1, 1000], 1000, 2);
        bad.outcome = Outcome::Http5xx;
        let mut warm = rec(&[1, 2000], 2000, 2);
        warm.warmup = true;
        recs.push(bad);
        recs.push(warm);
        for c in Convention::ALL {
            assert_eq!(figures(c, &recs), figures(c, &records()), "{c}");
        }
    }

    #[test]
    fn views_summarize_each_distribution_as_figures_does() {
        // The views share the pooled gaps between Cadence and vLLM: still each
        // convention's own figures, bit for bit.
        let mut recs = records();
        recs.extend((0..40).map(|i| {
            let t: Vec<u64> = (0..1 + i % 7).map(|k| 50 + k * (3 + i % 5)).collect();
            rec(&t, 400, 2 + i % 9)
        }));
        let views = convention_views(&recs);
        for (v, c) in views.iter().zip(Convention::ALL) {
            assert_eq!(v.convention, c.name());
            let (itl, tpot) = figures(c, &recs);
            assert_eq!(
                format!("{:?}", (v.itl, v.tpot)),
                format!("{:?}", (itl, tpot))
            );
        }
    }

    #[test]
    fn every_convention_has_a_view_and_names_parse() {
        let v = convention_views(&records());
        assert_eq!(v.len(), 5);
        assert_eq!(v[0].convention, "cadence");
        assert_eq!(v[0].itl, figures(Convention::Cadence, &records()).0);
        for c in Convention::ALL {
            assert_eq!(c.name().parse::<Convention>().unwrap(), c);
        }
        assert_eq!("SGLang".parse::<Convention>().unwrap(), Convention::Vllm);
        assert_eq!(
            "genai-perf".parse::<Convention>().unwrap(),
            Convention::Aiperf
        );
        assert!("foo".parse::<Convention>().unwrap_err().contains("unknown"));
        let json = serde_json::to_value(&v[3]).unwrap();
        assert_eq!(json["convention"], "guidellm");
        assert!(json["itl"]["p50_ms"].is_number());
        assert_eq!(
            serde_json::from_value::<ConventionView>(json).unwrap(),
            v[3]
        );
    }
}

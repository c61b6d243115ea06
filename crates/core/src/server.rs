//! The server's own metrics as a run saves them: the common figures every engine's
//! metric families map to, and the samples of a level's scraping. Pure data, and the
//! Prometheus text parser that maps each engine's names to them ([`prometheus`]); the
//! scraper (`cadence_bench::scrape`, which owns the socket and the clock) fills them in.

pub mod dynamo;
pub mod prometheus;
pub mod speculation;

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Unknown series kept raw per sample, at most (a real engine exports hundreds).
pub const MAX_RAW_SERIES: usize = 256;

/// A histogram's (or summary's) cumulative sum and count.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct SumCount {
    /// The cumulative sum of the observations (seconds, for the time histograms here).
    pub sum: f64,
    /// The cumulative number of observations (tokens, for [`ServerFigures::decode`]).
    pub count: f64,
}

/// The common figures every engine is mapped to. Gauges are as read; counters and
/// histogram sums/counts are cumulative (deltas between samples are what happened).
/// A figure the engine does not export is absent.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerFigures {
    /// Requests holding a batch slot (the batch size).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub running: Option<f64>,
    /// Requests waiting for a slot or KV room.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<f64>,
    /// KV-cache usage, 1 = full.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_usage: Option<f64>,
    /// Requests pre-empted (evicted for KV room), cumulative.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemptions: Option<f64>,
    /// Prefix-cache hits as the engine counts them (vLLM: tokens), cumulative.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefix_cache_hits: Option<f64>,
    /// Prompt tokens processed (prefilled).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<f64>,
    /// Output tokens generated, cumulative.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generation_tokens: Option<f64>,
    /// Arrival to first scheduling, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue: Option<SumCount>,
    /// First scheduling to first token, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill: Option<SumCount>,
    /// Decode time, seconds, and the tokens it produced (`count` is tokens, not
    /// requests): the server's own time per output token is Δsum / Δcount.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode: Option<SumCount>,
    /// The server's time to first token, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft: Option<SumCount>,
    /// The server's inter-token latency, seconds, one observation per token gap.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub itl: Option<SumCount>,
    /// The server's time per output token, seconds, one observation per request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tpot: Option<SumCount>,
    /// The server's end-to-end request latency, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub e2e: Option<SumCount>,
    /// Speculative decoding's verification steps (vLLM's drafts), cumulative.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_drafts: Option<f64>,
    /// Draft tokens proposed (vLLM), cumulative.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_draft_tokens: Option<f64>,
    /// Draft tokens accepted (vLLM), cumulative.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_accepted: Option<f64>,
    /// Draft tokens accepted at each draft position, from the first (vLLM's
    /// `position` label), cumulative; at most [`MAX_SPEC_POSITIONS`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub spec_accepted_by_position: Vec<f64>,
    /// The mean acceptance length, the bonus token included, as the server reads it
    /// (SGLang's gauge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_accept_length: Option<f64>,
    /// Draft tokens accepted ÷ proposed, as the server reads it (SGLang's gauge).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec_accept_rate: Option<f64>,
    /// Prefill/decode disaggregation: the KV cache's transfers from the prefill worker,
    /// seconds (vLLM's NIXL `nixl_xfer_time_seconds`, SGLang's `kv_transfer_latency_ms`
    /// histogram).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer: Option<SumCount>,
    /// Bytes per KV transfer (vLLM's `nixl_bytes_transferred` histogram).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_bytes: Option<SumCount>,
    /// KV transfers (or requests) that failed, cumulative (vLLM's
    /// `nixl_num_failed_transfers`, SGLang's `num_transfer_failed_reqs`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kv_transfer_failures: Option<f64>,
    /// NVIDIA Dynamo's per-worker gauges by `worker_type` (prefill, decode, …), as its
    /// frontend reports them; empty for other engines.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub workers: BTreeMap<String, dynamo::WorkerGauges>,
}

/// Draft positions kept per sample, at most (vLLM drafts a handful a step).
pub const MAX_SPEC_POSITIONS: usize = 32;

/// One scrape: when its answer arrived on the run clock, the common figures, and the
/// series no mapping knew (histogram buckets left out, at most [`MAX_RAW_SERIES`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerSample {
    /// ns since the run's start.
    pub t_ns: u64,
    /// The common figures this scrape read.
    #[serde(flatten)]
    pub figures: ServerFigures,
    /// Series no mapping knew, by name, summed over their labels.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub raw: BTreeMap<String, f64>,
}

/// What one level's scraping gave: where from, how it went, and the samples.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerScrape {
    /// The metrics URL (secrets removed).
    pub url: String,
    /// The engine family the names belong to: `vllm`, `sglang`, `dynamo`, `tgi`, `llamacpp`,
    /// `tensorrt-llm`, `cadence-sim` or `unknown`.
    pub engine: String,
    /// The time between scrapes, ms.
    pub interval_ms: f64,
    /// Scrapes tried.
    pub attempts: u64,
    /// Scrapes that gave no sample.
    pub failures: u64,
    /// The first failure in plain words (the rest are counted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// The samples, in the order they arrived.
    pub samples: Vec<ServerSample>,
}

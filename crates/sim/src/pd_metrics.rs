//! Prefill/decode disaggregation's KV transfers on the sim's `/metrics`
//! (`--pd-transfer`), named as vLLM's NIXL connector (`vllm:nixl_xfer_time_seconds`,
//! `vllm:nixl_bytes_transferred`, `vllm:nixl_num_failed_transfers`) and SGLang
//! (`sglang:kv_transfer_latency_ms`, `sglang:num_transfer_failed_reqs`) name theirs,
//! each transfer observed as its request's first token leaves, when it has ended.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::Registry;
use std::time::Duration;

/// KV bytes a prompt token holds in the flat sim, which has no model: Llama 3.1 8B in
/// bf16 (2 (K and V) × 32 layers × 8 KV heads × 128 dims × 2 bytes).
pub const KV_BYTES_PER_TOKEN: u64 = 131_072;

/// The transfer families, shared by every stream (clones share the counts).
#[derive(Clone)]
pub struct PdMetrics {
    xfer_seconds: Histogram,
    bytes: Histogram,
    failed: Counter,
    latency_ms: Histogram,
    failed_reqs: Counter,
}

impl std::fmt::Debug for PdMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PdMetrics").finish_non_exhaustive()
    }
}

impl PdMetrics {
    /// The families in `registry`.
    pub fn register(registry: &mut Registry) -> PdMetrics {
        let m = PdMetrics {
            // vLLM's own bounds for the NIXL transfer time, 5 ms to 5 s.
            xfer_seconds: Histogram::new([
                0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 5.0,
            ]),
            // 1 MiB to 32 GiB.
            bytes: Histogram::new(exponential_buckets(1_048_576.0, 2.0, 16)),
            failed: Counter::default(),
            // 1 ms to ~16 s.
            latency_ms: Histogram::new(exponential_buckets(1.0, 2.0, 15)),
            failed_reqs: Counter::default(),
        };
        let r = registry;
        r.register(
            "vllm:nixl_xfer_time_seconds",
            "Histogram of transfer duration for NIXL KV Cache transfers",
            m.xfer_seconds.clone(),
        );
        r.register(
            "vllm:nixl_bytes_transferred",
            "Histogram of bytes transferred per NIXL KV Cache transfer",
            m.bytes.clone(),
        );
        r.register(
            "vllm:nixl_num_failed_transfers",
            "Failed NIXL KV Cache transfers",
            m.failed.clone(),
        );
        r.register(
            "sglang:kv_transfer_latency_ms",
            "KV cache transfer latency, ms",
            m.latency_ms.clone(),
        );
        r.register(
            "sglang:num_transfer_failed_reqs",
            "Requests whose KV transfer failed",
            m.failed_reqs.clone(),
        );
        m
    }

    /// One transfer of `took` for a prompt of `prompt_tokens` tokens.
    pub fn transferred(&self, took: Duration, prompt_tokens: u32) {
        self.moved(took, (u64::from(prompt_tokens) * KV_BYTES_PER_TOKEN) as f64);
    }

    /// One transfer of `took` that moved `bytes` (an engine's KV bytes of its prompt).
    pub fn moved(&self, took: Duration, bytes: f64) {
        self.xfer_seconds.observe(took.as_secs_f64());
        self.bytes.observe(bytes);
        self.latency_ms.observe(took.as_secs_f64() * 1e3);
    }
}

/// One stream's transfer, observed once, as its first chunk leaves.
#[derive(Debug)]
pub(crate) struct Pending {
    metrics: PdMetrics,
    took: Duration,
    prompt_tokens: u32,
}

impl Pending {
    pub(crate) fn new(metrics: PdMetrics, took: Duration, prompt_tokens: u32) -> Pending {
        Pending {
            metrics,
            took,
            prompt_tokens,
        }
    }

    /// The transfer has ended: observed.
    pub(crate) fn done(self) {
        self.metrics.transferred(self.took, self.prompt_tokens);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_counts_in_vllms_and_sglangs_names() {
        let mut r = Registry::default();
        let m = PdMetrics::register(&mut r);
        Pending::new(m.clone(), Duration::from_millis(40), 100).done();
        m.transferred(Duration::from_millis(60), 0);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        for line in [
            "# TYPE vllm:nixl_xfer_time_seconds histogram",
            "vllm:nixl_xfer_time_seconds_sum 0.1",
            "vllm:nixl_xfer_time_seconds_count 2",
            "vllm:nixl_bytes_transferred_sum 13107200.0",
            "vllm:nixl_num_failed_transfers_total 0",
            "# TYPE sglang:kv_transfer_latency_ms histogram",
            "sglang:kv_transfer_latency_ms_sum 100.0",
            "sglang:kv_transfer_latency_ms_count 2",
            "sglang:num_transfer_failed_reqs_total 0",
        ] {
            assert!(text.contains(line), "{line} in\n{text}");
        }
    }
}

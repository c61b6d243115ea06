//! The parameters of a serving engine (model, hardware, serving policy) and the
//! figures derived from them (weight bytes, KV bytes per token, KV capacity).
//! Plain data, loadable from TOML, validated once.

use serde::{Deserialize, Serialize};

/// One engine: a model served on some hardware with a serving policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EngineSpec {
    /// `model@hardware`, e.g. `llama-3.1-8b@h100-bf16`.
    pub name: String,
    /// The model's shape and precision.
    pub model: ModelSpec,
    /// The GPUs it is served on.
    pub hardware: HardwareSpec,
    /// How the engine schedules and batches (defaults: vLLM-like).
    #[serde(default)]
    pub serving: ServingSpec,
}

/// The model's shape (from its `config.json`) and the precision it is served in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelSpec {
    /// Total parameters in billions (every expert of an MoE): what must sit in memory.
    pub params_b: f64,
    /// Parameters used per token in billions (MoE: shared + the routed experts);
    /// default: `params_b` (dense).
    #[serde(default)]
    pub active_params_b: Option<f64>,
    /// MoE: experts per layer (0 = dense).
    #[serde(default)]
    pub experts: u32,
    /// MoE: experts each token is routed to.
    #[serde(default)]
    pub experts_per_token: u32,
    /// `num_hidden_layers`.
    pub layers: u32,
    /// `hidden_size` (attention FLOPs per attended position: 4 · layers · hidden).
    pub hidden: u32,
    /// `num_key_value_heads` (grouped-query attention).
    pub kv_heads: u32,
    /// `head_dim` (or `hidden_size / num_attention_heads`).
    pub head_dim: u32,
    /// Bytes per weight: 2 (bf16), 1 (fp8), 0.5 (int4).
    pub bytes_per_param: f64,
    /// Bytes per KV-cache element: 2 (bf16/fp16), 1 (fp8 or int8 KV cache: vLLM
    /// `--kv-cache-dtype fp8`, TensorRT-LLM's FP8/INT8 KV quantization; per-block
    /// scales are ignored), 0.5 (int4 KV, LMDeploy). It sets both the KV capacity
    /// and the bytes every decode step reads per token of context.
    #[serde(default = "two")]
    pub kv_bytes_per_elem: f64,
}

fn two() -> f64 {
    2.0
}

/// The accelerators one engine instance (one tensor-parallel group) runs on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HardwareSpec {
    /// GPUs in the tensor-parallel group: bandwidth, FLOP/s and memory add up.
    #[serde(default = "one")]
    pub gpus: u32,
    /// Memory per GPU, GB (10⁹ bytes).
    pub memory_gb: f64,
    /// Memory bandwidth per GPU, GB/s (datasheet).
    pub bandwidth_gbs: f64,
    /// Dense peak per GPU at the weights' precision, TFLOP/s (datasheet, no sparsity).
    pub peak_tflops: f64,
    /// Share of peak bandwidth a decode step achieves (model bandwidth utilisation).
    #[serde(default = "default_mbu")]
    pub bandwidth_efficiency: f64,
    /// Share of peak FLOP/s a compute-bound step achieves (model FLOPs utilisation).
    #[serde(default = "default_mfu")]
    pub compute_efficiency: f64,
    /// Tensor parallel: GPU-to-GPU bandwidth per GPU and direction, GB/s. Default 450:
    /// NVLink 4 on H100 SXM, 900 GB/s bidirectional per GPU (NVIDIA H100 datasheet);
    /// A100 SXM's NVLink 3 is 600 GB/s bidirectional, 300 a direction.
    #[serde(default = "default_link_gbs")]
    pub link_gbs: f64,
    /// Tensor parallel: latency of one step of a ring all-reduce (a hop), µs. A ring
    /// over `n` GPUs takes 2·(n−1) hops (reduce-scatter then all-gather: NCCL's ring
    /// algorithm), so small-message all-reduces cost more as GPUs are added.
    #[serde(default = "default_hop_us")]
    pub allreduce_hop_us: f64,
}

fn one() -> u32 {
    1
}
fn default_link_gbs() -> f64 {
    450.0
}
/// Ring all-reduce latency per hop. NCCL's small-message all-reduce on one NVLink
/// node runs in the low tens of µs for 8 GPUs (14 hops); 2 µs a hop (launch, flag
/// polling, one NVLink transfer) puts TP2 at 4 µs and TP8 at 28 µs per all-reduce.
pub const DEFAULT_HOP_US: f64 = 2.0;
fn default_hop_us() -> f64 {
    DEFAULT_HOP_US
}
fn default_mbu() -> f64 {
    0.8
}
fn default_mfu() -> f64 {
    0.5
}

/// How the engine schedules: batch slots, KV cache, prefill placement, speculation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServingSpec {
    /// Sequences decoded together at most (vLLM `max_num_seqs`).
    pub max_batch: u32,
    /// KV-cache capacity in tokens; default: what fits in `memory_utilization` of
    /// the GPUs' memory after the weights.
    pub kv_capacity_tokens: Option<u64>,
    /// Share of GPU memory the engine may use (vLLM `gpu_memory_utilization`).
    pub memory_utilization: f64,
    /// Fixed cost per step (scheduling, sampling, kernel launches, TP all-reduce), µs.
    pub step_overhead_us: f64,
    /// Fixed cost per model layer in every step, µs: a decoder layer runs ~15 kernels
    /// (norms, QKV, rotary, attention, output projection, gate/up/down, activation,
    /// residual adds), each with a floor of a few µs (the gap between kernels of a
    /// CUDA graph, and the tail of a kernel too small to fill the GPU) that neither
    /// bandwidth nor tensor parallelism removes. Why a 70B model's light-load ITL is
    /// longer than its weights' read time on any number of GPUs.
    pub layer_overhead_us: f64,
    /// Host cost per sequence in a step (scheduling, sampling, detokenizing), µs: a
    /// step over `b` sequences costs `b · seq_overhead_us` more. Why older engines
    /// slow down with load faster than their GPU work does.
    pub seq_overhead_us: f64,
    /// Fixed cost between a request's arrival and its entry into the engine's queue
    /// (HTTP, tokenization, the API server's hand-off), ms: adds to every TTFT.
    pub request_overhead_ms: f64,
    /// Where prompts are processed: chunked in the decode loop, or on prefill workers.
    pub prefill: Prefill,
    /// What happens when the KV cache is full.
    pub kv_policy: KvPolicy,
    /// Speculative decoding; `None`: one token per sequence per step.
    pub speculation: Option<Speculation>,
    /// Automatic prefix caching (vLLM's default since V1, SGLang's radix cache): a
    /// request that names a prefix (a shared system prompt, or a session's history)
    /// skips the prefill of the part already computed for that prefix. The cached
    /// prefixes hold at most the KV capacity in positions, the least recently used
    /// evicted first; each sequence still counts its whole context against the KV
    /// cache (the sharing of blocks is left out).
    pub prefix_cache: bool,
    /// Each step's time is multiplied by `1 + jitter · u`, `u` uniform in [-1, 1).
    pub jitter: f64,
    /// Seeds the step jitter and speculation's acceptances (and `plan`'s client
    /// turnarounds): the same seed, the same timings.
    pub seed: u64,
}

impl Default for ServingSpec {
    fn default() -> Self {
        ServingSpec {
            max_batch: 256,
            kv_capacity_tokens: None,
            memory_utilization: 0.9,
            step_overhead_us: 2000.0,
            layer_overhead_us: 0.0,
            seq_overhead_us: 0.0,
            request_overhead_ms: 0.0,
            prefill: Prefill::default(),
            kv_policy: KvPolicy::Preempt,
            speculation: None,
            prefix_cache: true,
            jitter: 0.0,
            seed: 0,
        }
    }
}

/// Where prompts are processed.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(tag = "mode", rename_all = "snake_case", deny_unknown_fields)]
pub enum Prefill {
    /// Prompts are cut into chunks that ride along in decode steps (vLLM chunked
    /// prefill): each step carries at most `chunk_tokens` tokens, decodes first.
    Chunked {
        /// The step's token budget: decode tokens first, prompt chunks in the rest.
        chunk_tokens: u32,
    },
    /// Prompts run on `workers` separate prefill instances (same hardware), one
    /// prompt at a time each; the first token comes from there, and the sequence
    /// joins the decode loop `transfer_ms` + KV bytes / `link_gbs` later.
    Disaggregated {
        /// Prefill instances, each processing one prompt at a time.
        workers: u32,
        /// Fixed delay of the KV transfer to the decode loop, ms.
        transfer_ms: f64,
        /// The KV transfer link's bandwidth, GB/s (default 50: a 400 Gb/s RDMA NIC).
        #[serde(default = "default_link")]
        link_gbs: f64,
    },
}

fn default_link() -> f64 {
    // 400 Gb/s RDMA NIC.
    50.0
}

impl Default for Prefill {
    fn default() -> Self {
        Prefill::Chunked { chunk_tokens: 2048 }
    }
}

/// What happens when the KV cache is full.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KvPolicy {
    /// Admit on the prompt's KV; when growing sequences run out of room, the latest
    /// admitted is pre-empted and later recomputed (vLLM's default).
    Preempt,
    /// Admit only when prompt + max_tokens fit; the rest wait in the queue.
    Reserve,
}

/// Speculative decoding: `k` draft tokens per step, each accepted with chance
/// `alpha` until the first rejection; a step emits accepted + 1 tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Speculation {
    /// Draft tokens proposed per step, at least 1.
    pub k: u32,
    /// Chance each draft token is accepted, in [0, 1].
    pub alpha: f64,
    /// A fixed cost per step of the draft model (launches, its sampling), µs.
    #[serde(default)]
    pub draft_us: f64,
    /// The draft model's size as a share of the target's: each of the k draft passes
    /// of a step costs this share of a one-token pass of the target over the same
    /// batch (weight reads, or FLOPs when compute-bound). Default 0.154: Llama 3.2 1B
    /// (1.24 B parameters) drafting for Llama 3.1 8B (8.03 B), both model cards; an
    /// EAGLE-style draft head of one decoder layer is about 1/layers. 0: a free draft.
    #[serde(default = "default_draft_fraction")]
    pub draft_fraction: f64,
}

/// Llama 3.2 1B over Llama 3.1 8B: 1.24 / 8.03.
pub const DEFAULT_DRAFT_FRACTION: f64 = 0.154;
fn default_draft_fraction() -> f64 {
    DEFAULT_DRAFT_FRACTION
}

impl Speculation {
    /// Expected tokens per step: (1 − α^(k+1)) / (1 − α) (k + 1 when α = 1).
    pub fn expected_tokens(&self) -> f64 {
        if self.alpha >= 1.0 {
            (self.k + 1) as f64
        } else {
            (1.0 - self.alpha.powi(self.k as i32 + 1)) / (1.0 - self.alpha)
        }
    }
}

/// An engine spec that cannot be simulated.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SpecError {
    /// A parameter (named by its TOML key) is not a positive number (or, for an
    /// overhead, is negative or not finite).
    #[error("{0} must be a positive number")]
    NotPositive(&'static str),
    /// A parameter (named by its TOML key) is outside its range within [0, 1].
    #[error("{0} must be between 0 and 1")]
    NotAShare(&'static str),
    /// The weights fill the usable GPU memory: no room for a KV cache.
    #[error("the weights ({weights_gb:.1} GB) leave no room for a KV cache in {usable_gb:.1} GB of usable GPU memory; add GPUs or give serving.kv_capacity_tokens")]
    NoKvRoom {
        /// The weights' size, GB.
        weights_gb: f64,
        /// The GPU memory the engine may use (`memory_utilization` of it), GB.
        usable_gb: f64,
    },
    /// An MoE's expert counts or active parameters are inconsistent.
    #[error("MoE needs 0 < experts_per_token < experts and active_params_b < params_b")]
    Moe,
    /// A step's prefill chunk leaves no room beyond the decoding sequences' tokens.
    #[error("chunk_tokens ({chunk}) must exceed max_batch × tokens verified per step ({need}), or prompts could starve")]
    ChunkBudget {
        /// The step's token budget (`chunk_tokens`; disaggregated, the recompute chunk).
        chunk: u32,
        /// What a full batch verifies per step: `max_batch` × (k + 1 with speculation,
        /// else 1).
        need: u64,
    },
    /// The TOML is malformed or its fields wrong (the parser's message).
    #[error("cannot read the engine file: {0}")]
    Toml(String),
}

fn non_negative(v: f64) -> bool {
    v.is_finite() && v >= 0.0
}

fn check_speculation(sp: &Speculation) -> Result<(), SpecError> {
    if sp.k == 0 {
        return Err(SpecError::NotPositive("serving.speculation.k"));
    }
    if !(0.0..=1.0).contains(&sp.alpha) {
        return Err(SpecError::NotAShare("serving.speculation.alpha"));
    }
    if !non_negative(sp.draft_us) {
        return Err(SpecError::NotPositive("serving.speculation.draft_us"));
    }
    if !(0.0..=1.0).contains(&sp.draft_fraction) {
        return Err(SpecError::NotAShare("serving.speculation.draft_fraction"));
    }
    Ok(())
}

impl EngineSpec {
    /// Parses a TOML engine file (the same layout as [`EngineSpec`]'s fields).
    pub fn from_toml(text: &str) -> Result<EngineSpec, SpecError> {
        let spec: EngineSpec = toml::from_str(text).map_err(|e| SpecError::Toml(e.to_string()))?;
        spec.validate()?;
        Ok(spec)
    }

    /// Checks the spec can be simulated: sizes positive, shares in [0, 1], a chunk
    /// budget that cannot starve prompts, room for a KV cache.
    pub fn validate(&self) -> Result<(), SpecError> {
        self.check_sizes()?;
        self.check_shares()?;
        if let Some(sp) = self.serving.speculation {
            check_speculation(&sp)?;
        }
        let chunk = self.prefill_chunk()?;
        let s = &self.serving;
        let need = s.max_batch as u64 * self.verified_per_step() as u64;
        if (chunk as u64) <= need {
            return Err(SpecError::ChunkBudget { chunk, need });
        }
        if s.kv_capacity_tokens == Some(0) {
            return Err(SpecError::NotPositive("serving.kv_capacity_tokens"));
        }
        if s.kv_capacity_tokens.is_none() && self.derived_kv_capacity() == 0 {
            return Err(SpecError::NoKvRoom {
                weights_gb: self.weight_bytes() / 1e9,
                usable_gb: self.usable_memory_bytes() / 1e9,
            });
        }
        Ok(())
    }

    /// The model's and hardware's sizes are positive, and an MoE's expert counts fit.
    fn check_sizes(&self) -> Result<(), SpecError> {
        let m = &self.model;
        let h = &self.hardware;
        let positive = [
            ("model.params_b", m.params_b),
            ("model.bytes_per_param", m.bytes_per_param),
            ("model.kv_bytes_per_elem", m.kv_bytes_per_elem),
            ("model.layers", m.layers as f64),
            ("model.hidden", m.hidden as f64),
            ("model.kv_heads", m.kv_heads as f64),
            ("model.head_dim", m.head_dim as f64),
            ("hardware.gpus", h.gpus as f64),
            ("hardware.memory_gb", h.memory_gb),
            ("hardware.bandwidth_gbs", h.bandwidth_gbs),
            ("hardware.peak_tflops", h.peak_tflops),
            ("hardware.link_gbs", h.link_gbs),
            ("serving.max_batch", self.serving.max_batch as f64),
        ];
        for (name, v) in positive {
            if !(v.is_finite() && v > 0.0) {
                return Err(SpecError::NotPositive(name));
            }
        }
        if let Some(a) = m.active_params_b {
            if !(a.is_finite() && a > 0.0 && a <= m.params_b) {
                return Err(SpecError::NotPositive("model.active_params_b (≤ params_b)"));
            }
        }
        if m.experts > 0
            && (m.experts_per_token == 0
                || m.experts_per_token >= m.experts
                || self.active_params() >= m.params_b * 1e9)
        {
            return Err(SpecError::Moe);
        }
        Ok(())
    }

    /// Efficiencies and utilization are shares in (0, 1]; jitter in [0, 1); the step
    /// overhead is not negative.
    fn check_shares(&self) -> Result<(), SpecError> {
        let h = &self.hardware;
        let s = &self.serving;
        let shares = [
            ("hardware.bandwidth_efficiency", h.bandwidth_efficiency),
            ("hardware.compute_efficiency", h.compute_efficiency),
            ("serving.memory_utilization", s.memory_utilization),
        ];
        for (name, v) in shares {
            if !(v > 0.0 && v <= 1.0) {
                return Err(SpecError::NotAShare(name));
            }
        }
        if !(0.0..1.0).contains(&s.jitter) {
            return Err(SpecError::NotAShare("serving.jitter"));
        }
        let overheads = [
            ("serving.step_overhead_us", s.step_overhead_us),
            ("serving.layer_overhead_us", s.layer_overhead_us),
            ("serving.seq_overhead_us", s.seq_overhead_us),
            ("serving.request_overhead_ms", s.request_overhead_ms),
            ("hardware.allreduce_hop_us", self.hardware.allreduce_hop_us),
        ];
        for (name, v) in overheads {
            if !non_negative(v) {
                return Err(SpecError::NotPositive(name));
            }
        }
        Ok(())
    }

    /// The token budget of one step's prefill: the chunk size, or (disaggregated, after
    /// checking the workers and link) the recompute chunk.
    fn prefill_chunk(&self) -> Result<u32, SpecError> {
        match self.serving.prefill {
            Prefill::Chunked { chunk_tokens } => Ok(chunk_tokens),
            Prefill::Disaggregated {
                workers,
                transfer_ms,
                link_gbs,
            } => {
                if workers == 0 {
                    return Err(SpecError::NotPositive("serving.prefill.workers"));
                }
                if !non_negative(transfer_ms) {
                    return Err(SpecError::NotPositive("serving.prefill.transfer_ms"));
                }
                if !(link_gbs.is_finite() && link_gbs > 0.0) {
                    return Err(SpecError::NotPositive("serving.prefill.link_gbs"));
                }
                Ok(RECOMPUTE_CHUNK)
            }
        }
    }

    /// Bytes of all weights (every expert).
    pub fn weight_bytes(&self) -> f64 {
        self.model.params_b * 1e9 * self.model.bytes_per_param
    }

    /// Parameters used per token.
    pub fn active_params(&self) -> f64 {
        self.model.active_params_b.unwrap_or(self.model.params_b) * 1e9
    }

    /// Weight bytes a step touching `tokens` tokens reads. Dense: all of them. MoE:
    /// the shared part plus the experts any of the tokens is routed to, expected
    /// share `1 − (1 − k/E)^tokens` under uniform routing.
    pub fn weight_bytes_read(&self, tokens: u64) -> f64 {
        let m = &self.model;
        if m.experts == 0 {
            return self.weight_bytes();
        }
        let total = m.params_b * 1e9;
        let routed = m.experts_per_token as f64 / m.experts as f64;
        let expert_params = (total - self.active_params()) / (1.0 - routed);
        let shared = total - expert_params;
        let touched = 1.0 - (1.0 - routed).powf(tokens.max(1) as f64);
        (shared + expert_params * touched) * m.bytes_per_param
    }

    /// KV-cache bytes per token: 2 (K and V) · layers · kv_heads · head_dim · bytes.
    pub fn kv_bytes_per_token(&self) -> f64 {
        let m = &self.model;
        2.0 * m.layers as f64 * m.kv_heads as f64 * m.head_dim as f64 * m.kv_bytes_per_elem
    }

    fn usable_memory_bytes(&self) -> f64 {
        self.hardware.gpus as f64 * self.hardware.memory_gb * 1e9 * self.serving.memory_utilization
    }

    fn derived_kv_capacity(&self) -> u64 {
        let room = self.usable_memory_bytes() - self.weight_bytes();
        if room <= 0.0 {
            0
        } else {
            (room / self.kv_bytes_per_token()) as u64
        }
    }

    /// KV-cache capacity in tokens: given, or derived from memory.
    pub fn kv_capacity(&self) -> u64 {
        self.serving
            .kv_capacity_tokens
            .unwrap_or_else(|| self.derived_kv_capacity())
    }

    /// Effective bytes per second a step reads at.
    pub fn bandwidth(&self) -> f64 {
        let h = &self.hardware;
        h.gpus as f64 * h.bandwidth_gbs * 1e9 * h.bandwidth_efficiency
    }

    /// Effective FLOP/s a compute-bound step achieves.
    pub fn compute(&self) -> f64 {
        let h = &self.hardware;
        h.gpus as f64 * h.peak_tflops * 1e12 * h.compute_efficiency
    }

    /// Positions each decoding sequence feeds through the model per step (k + 1).
    pub fn verified_per_step(&self) -> u32 {
        self.serving.speculation.map_or(1, |s| s.k + 1)
    }

    /// The decode step time of a batch of `batch` sequences each at `context`
    /// tokens, in seconds, without jitter (for tables and calibration).
    pub fn decode_step_s(&self, batch: u64, context: u64) -> f64 {
        let verified = self.verified_per_step() as u64;
        self.step_s(&StepWork {
            tokens: batch * verified,
            kv_positions: batch * context,
            attended: batch * verified * context,
            seqs: batch,
            decoding: batch,
        })
    }

    /// How long a step doing `work` lasts, in seconds, without jitter: the roofline
    /// of its weight and KV reads against its FLOPs, plus the tensor-parallel
    /// all-reduces, the fixed, per-layer and per-sequence costs, and (with speculation and
    /// sequences decoding) the draft model's passes.
    pub fn step_s(&self, work: &StepWork) -> f64 {
        let bytes = self.weight_bytes_read(work.tokens)
            + self.kv_bytes_per_token() * work.kv_positions as f64;
        let flops = 2.0 * self.active_params() * work.tokens as f64
            + self.attention_flops_per_position() * work.attended as f64;
        let s = &self.serving;
        (bytes / self.bandwidth()).max(flops / self.compute())
            + self.tp_allreduce_s(work.tokens)
            + s.step_overhead_us * 1e-6
            + s.layer_overhead_us * 1e-6 * self.model.layers as f64
            + s.seq_overhead_us * 1e-6 * work.seqs as f64
            + self.draft_s(work.decoding)
    }

    /// Tensor-parallel all-reduces of a step feeding `tokens` positions through the
    /// model: two per layer (after attention and after the MLP, Megatron-style), each a
    /// ring over the GPUs of `tokens · hidden` activations of 2 bytes:
    /// 2·(n−1) hops of latency plus 2·(n−1)/n of the message over each GPU's link.
    pub fn tp_allreduce_s(&self, tokens: u64) -> f64 {
        let h = &self.hardware;
        let n = h.gpus as f64;
        if h.gpus <= 1 {
            return 0.0;
        }
        let message = tokens.max(1) as f64 * self.model.hidden as f64 * ACTIVATION_BYTES;
        let one = 2.0 * (n - 1.0) * h.allreduce_hop_us * 1e-6
            + 2.0 * (n - 1.0) / n * message / (h.link_gbs * 1e9);
        2.0 * self.model.layers as f64 * one
    }

    /// The draft model's share of a step with `decoding` sequences decoding: k passes,
    /// each `draft_fraction` of the target's one-token pass over the batch, plus the
    /// fixed `draft_us`. 0 without speculation or when nothing decodes.
    pub fn draft_s(&self, decoding: u64) -> f64 {
        let Some(sp) = self.serving.speculation else {
            return 0.0;
        };
        if decoding == 0 {
            return 0.0;
        }
        let reads = self.weight_bytes_read(decoding) / self.bandwidth();
        let flops = 2.0 * self.active_params() * decoding as f64 / self.compute();
        sp.k as f64 * sp.draft_fraction * reads.max(flops) + sp.draft_us * 1e-6
    }

    /// FLOPs per (query token, attended position) pair: QKᵀ and AV, 2 each, per layer.
    pub fn attention_flops_per_position(&self) -> f64 {
        4.0 * self.model.layers as f64 * self.model.hidden as f64
    }
}

/// Token budget per step for recomputing pre-empted sequences in disaggregated mode.
pub const RECOMPUTE_CHUNK: u32 = 8192;

/// Bytes per activation element crossing the tensor-parallel all-reduce (bf16, also
/// with fp8 weights: engines reduce in 16 bits).
pub const ACTIVATION_BYTES: f64 = 2.0;

/// What one step feeds through the model, for [`EngineSpec::step_s`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepWork {
    /// Positions fed through the model (decode tokens, verified drafts, prompt chunks).
    pub tokens: u64,
    /// KV-cache positions read (the context of every sequence in the step).
    pub kv_positions: u64,
    /// (query token, attended position) pairs.
    pub attended: u64,
    /// Sequences in the step (for the per-sequence host cost).
    pub seqs: u64,
    /// Sequences decoding (the draft model runs for these).
    pub decoding: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn speculation_expectation_matches_the_closed_form() {
        let sp = Speculation {
            k: 4,
            alpha: 0.8,
            draft_us: 0.0,
            draft_fraction: 0.0,
        };
        assert!((sp.expected_tokens() - 3.3616).abs() < 1e-9);
        let all = Speculation { alpha: 1.0, ..sp };
        assert_eq!(all.expected_tokens(), 5.0);
    }

    #[test]
    fn toml_round_trip_and_errors_name_the_field() {
        let text = r#"
            name = "toy@toy"
            [model]
            params_b = 1.0
            layers = 16
            hidden = 2048
            kv_heads = 8
            head_dim = 64
            bytes_per_param = 2
            [hardware]
            memory_gb = 24
            bandwidth_gbs = 1000
            peak_tflops = 100
            [serving]
            max_batch = 8
            prefill = { mode = "disaggregated", workers = 2, transfer_ms = 5 }
            speculation = { k = 3, alpha = 0.7 }
        "#;
        let s = EngineSpec::from_toml(text).unwrap();
        assert_eq!(s.hardware.gpus, 1);
        assert_eq!(
            s.serving.prefill,
            Prefill::Disaggregated {
                workers: 2,
                transfer_ms: 5.0,
                link_gbs: 50.0
            }
        );
        assert_eq!(s.serving.speculation.unwrap().k, 3);
        let bad = text.replace("peak_tflops = 100", "peak_tflops = 0");
        let e = EngineSpec::from_toml(&bad).unwrap_err().to_string();
        assert!(e.contains("hardware.peak_tflops"), "{e}");
        let typo = text.replace("layers = 16", "layer = 16");
        assert!(EngineSpec::from_toml(&typo).is_err());
    }
}

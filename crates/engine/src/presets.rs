//! Engines named `model@hardware`, each figure with its public source: model shapes
//! from the models' Hugging Face `config.json`, bandwidth and FLOP/s from NVIDIA's
//! datasheets. The efficiencies and step overheads are calibration choices,
//! checked against the published figures in the README's calibration table.

use crate::spec::{EngineSpec, HardwareSpec, KvPolicy, ModelSpec, Prefill, ServingSpec};

/// Every preset name, in the order `cadence plan --list-presets` prints them.
pub const PRESETS: &[&str] = &[
    "tiny@cpu",
    "llama-3.1-8b@a100-bf16",
    "llama-3.1-8b@h100-bf16",
    "llama-3.1-8b@h100-fp8",
    "llama-3.1-8b@h200-fp8",
    "llama-3.1-70b@h100-fp8",
    "llama-3.1-70b@h200-fp8",
    "llama-3.1-70b@4xa100-bf16",
    "llama-3.1-70b@4xh100-bf16",
    "mixtral-8x7b@h100-fp8",
    "mixtral-8x7b@2xh100-bf16",
];

/// Llama 3.1 8B: meta-llama/Llama-3.1-8B config.json (num_hidden_layers 32,
/// hidden_size 4096, num_key_value_heads 8, 32 heads → head_dim 128); 8.03 B
/// parameters (model card).
fn llama_8b(bytes_per_param: f64) -> ModelSpec {
    ModelSpec {
        params_b: 8.03,
        active_params_b: None,
        experts: 0,
        experts_per_token: 0,
        layers: 32,
        hidden: 4096,
        kv_heads: 8,
        head_dim: 128,
        bytes_per_param,
        kv_bytes_per_elem: 2.0,
    }
}

/// Llama 3.1 70B: meta-llama/Llama-3.1-70B config.json (num_hidden_layers 80,
/// hidden_size 8192, num_key_value_heads 8, 64 heads → head_dim 128); 70.6 B
/// parameters (model card).
fn llama_70b(bytes_per_param: f64) -> ModelSpec {
    ModelSpec {
        params_b: 70.6,
        active_params_b: None,
        experts: 0,
        experts_per_token: 0,
        layers: 80,
        hidden: 8192,
        kv_heads: 8,
        head_dim: 128,
        bytes_per_param,
        kv_bytes_per_elem: 2.0,
    }
}

/// Mixtral 8x7B: mistralai/Mixtral-8x7B-v0.1 config.json (num_hidden_layers 32,
/// hidden_size 4096, num_key_value_heads 8, head_dim 128, num_local_experts 8,
/// num_experts_per_tok 2); 46.7 B total, 12.9 B active parameters (Mistral's
/// announcement "Mixtral of experts", Dec 2023).
fn mixtral(bytes_per_param: f64) -> ModelSpec {
    ModelSpec {
        params_b: 46.7,
        active_params_b: Some(12.9),
        experts: 8,
        experts_per_token: 2,
        layers: 32,
        hidden: 4096,
        kv_heads: 8,
        head_dim: 128,
        bytes_per_param,
        kv_bytes_per_elem: 2.0,
    }
}

/// NVIDIA A100 80GB SXM datasheet: 2,039 GB/s HBM2e, 312 TFLOP/s dense BF16
/// (no FP8 tensor cores).
fn a100(gpus: u32) -> HardwareSpec {
    HardwareSpec {
        gpus,
        memory_gb: 80.0,
        bandwidth_gbs: 2039.0,
        peak_tflops: 312.0,
        bandwidth_efficiency: 0.85,
        compute_efficiency: 0.5,
    }
}

/// NVIDIA H100 SXM5 datasheet: 80 GB HBM3 at 3.35 TB/s; dense 989 TFLOP/s BF16,
/// 1,979 TFLOP/s FP8 (the datasheet's figures halved: they are quoted with sparsity).
fn h100(gpus: u32, fp8: bool) -> HardwareSpec {
    HardwareSpec {
        gpus,
        memory_gb: 80.0,
        bandwidth_gbs: 3350.0,
        peak_tflops: if fp8 { 1979.0 } else { 989.0 },
        bandwidth_efficiency: 0.85,
        compute_efficiency: 0.5,
    }
}

/// NVIDIA H200 SXM datasheet: 141 GB HBM3e at 4.8 TB/s; the H100's tensor cores.
fn h200(fp8: bool) -> HardwareSpec {
    HardwareSpec {
        memory_gb: 141.0,
        bandwidth_gbs: 4800.0,
        ..h100(1, fp8)
    }
}

fn serving(step_overhead_us: f64) -> ServingSpec {
    ServingSpec {
        step_overhead_us,
        // Per-step noise seen in real engines' ITL (kernel and scheduler variance).
        jitter: 0.03,
        ..ServingSpec::default()
    }
}

/// Step overhead on one GPU: scheduling, sampling and launch costs of a CUDA-graph
/// decode step in vLLM-class engines (~0.7 ms); calibrated with the 8B figures.
const OVERHEAD_1GPU_US: f64 = 700.0;
/// Tensor parallel: two all-reduces per layer at ~10 µs each (NCCL on NVLink,
/// small messages) on top of the single-GPU overhead.
fn overhead_tp_us(layers: u32) -> f64 {
    OVERHEAD_1GPU_US + 2.0 * layers as f64 * 10.0
}

/// The preset called `name`, if there is one.
pub fn preset(name: &str) -> Option<EngineSpec> {
    let (model, hardware, serving) = match name {
        // A toy for the built-in bench on a laptop: a 75 M-parameter model whose
        // KV cache is large next to its weights, on a slow device, so a short run
        // shows ITL climbing with concurrency (weights 3 ms, +0.2 ms per sequence
        // of 100 tokens, 1 ms overhead).
        "tiny@cpu" => (
            ModelSpec {
                params_b: 0.075,
                active_params_b: None,
                experts: 0,
                experts_per_token: 0,
                layers: 12,
                hidden: 768,
                kv_heads: 16,
                head_dim: 256,
                bytes_per_param: 2.0,
                kv_bytes_per_elem: 2.0,
            },
            HardwareSpec {
                gpus: 1,
                memory_gb: 8.0,
                bandwidth_gbs: 50.0,
                peak_tflops: 2.0,
                bandwidth_efficiency: 1.0,
                compute_efficiency: 1.0,
            },
            ServingSpec {
                max_batch: 64,
                kv_capacity_tokens: Some(32_768),
                step_overhead_us: 1000.0,
                prefill: Prefill::Chunked { chunk_tokens: 512 },
                ..ServingSpec::default()
            },
        ),
        "llama-3.1-8b@a100-bf16" => (llama_8b(2.0), a100(1), serving(OVERHEAD_1GPU_US)),
        "llama-3.1-8b@h100-bf16" => (llama_8b(2.0), h100(1, false), serving(OVERHEAD_1GPU_US)),
        "llama-3.1-8b@h100-fp8" => (llama_8b(1.0), h100(1, true), serving(OVERHEAD_1GPU_US)),
        "llama-3.1-8b@h200-fp8" => (llama_8b(1.0), h200(true), serving(OVERHEAD_1GPU_US)),
        // fp8 weights and fp8 KV cache (vLLM --kv-cache-dtype fp8): 70.6 GB of
        // weights leave ~1.4 GB of the 72 GB usable, ~8.8 k tokens of fp8 KV.
        "llama-3.1-70b@h100-fp8" => (
            ModelSpec {
                kv_bytes_per_elem: 1.0,
                ..llama_70b(1.0)
            },
            h100(1, true),
            serving(OVERHEAD_1GPU_US),
        ),
        "llama-3.1-70b@h200-fp8" => (llama_70b(1.0), h200(true), serving(OVERHEAD_1GPU_US)),
        "llama-3.1-70b@4xa100-bf16" => (llama_70b(2.0), a100(4), serving(overhead_tp_us(80))),
        "llama-3.1-70b@4xh100-bf16" => {
            (llama_70b(2.0), h100(4, false), serving(overhead_tp_us(80)))
        }
        "mixtral-8x7b@h100-fp8" => (mixtral(1.0), h100(1, true), serving(OVERHEAD_1GPU_US)),
        "mixtral-8x7b@2xh100-bf16" => (mixtral(2.0), h100(2, false), serving(overhead_tp_us(32))),
        _ => return None,
    };
    Some(EngineSpec {
        name: name.to_owned(),
        model,
        hardware,
        serving: ServingSpec {
            kv_policy: KvPolicy::Preempt,
            ..serving
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_preset_exists_and_is_valid() {
        for name in PRESETS {
            let s = preset(name).unwrap_or_else(|| panic!("{name} missing"));
            s.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
            assert_eq!(s.name, *name);
            assert!(s.kv_capacity() > 4096, "{name}: {}", s.kv_capacity());
        }
        assert!(preset("gpt-5@abacus").is_none());
    }

    #[test]
    fn fp8_halves_the_weights_and_shortens_the_step() {
        let bf16 = preset("llama-3.1-8b@h100-bf16").unwrap();
        let fp8 = preset("llama-3.1-8b@h100-fp8").unwrap();
        assert_eq!(bf16.weight_bytes(), 2.0 * fp8.weight_bytes());
        assert!(fp8.decode_step_s(1, 512) < 0.6 * bf16.decode_step_s(1, 512));
    }
}

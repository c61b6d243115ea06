//! Engines named `model@hardware`, each figure with its public source: model shapes
//! from the models' Hugging Face `config.json`, bandwidth and FLOP/s from NVIDIA's
//! datasheets. The efficiencies and step overheads are calibration choices,
//! checked against published measurements in docs/src/CALIBRATION.md.

use crate::spec::{
    EngineSpec, HardwareSpec, KvPolicy, ModelSpec, Prefill, ServingSpec, DEFAULT_HOP_US,
};

/// Every preset name, in the order `cadence plan --list-presets` prints them.
pub const PRESETS: &[&str] = &[
    "tiny@cpu",
    "llama-3.1-8b@a100-bf16",
    "llama-3.1-8b@h100-bf16",
    "llama-3.1-8b@h100-fp8",
    "llama-3.1-8b@h200-fp8",
    "llama-3.1-70b@h100-fp8",
    "llama-3.1-70b@2xh100-fp8",
    "llama-3.1-70b@h200-fp8",
    "llama-3.1-70b@4xa100-bf16",
    "llama-3.1-70b@4xh100-bf16",
    "mixtral-8x7b@h100-fp8",
    "mixtral-8x7b@2xh100-bf16",
    "kimi-k2@8xh200-int4",
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
        // NVLink 3: 600 GB/s bidirectional per GPU (A100 datasheet).
        link_gbs: 300.0,
        allreduce_hop_us: DEFAULT_HOP_US,
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
        // NVLink 4: 900 GB/s bidirectional per GPU (H100 datasheet).
        link_gbs: 450.0,
        allreduce_hop_us: DEFAULT_HOP_US,
    }
}

/// NVIDIA H200 SXM datasheet: 141 GB HBM3e at 4.8 TB/s; the H100's tensor cores
/// and NVLink 4.
fn h200(gpus: u32, fp8: bool) -> HardwareSpec {
    HardwareSpec {
        memory_gb: 141.0,
        bandwidth_gbs: 4800.0,
        ..h100(gpus, fp8)
    }
}

fn serving(step_overhead_us: f64) -> ServingSpec {
    ServingSpec {
        step_overhead_us,
        layer_overhead_us: LAYER_OVERHEAD_US,
        // Per-step noise seen in real engines' ITL (kernel and scheduler variance).
        jitter: 0.03,
        ..ServingSpec::default()
    }
}

/// Fixed host cost of a decode step in a CUDA-graph engine (scheduling, sampling,
/// launches), ~0.7 ms; the tensor-parallel all-reduces are modelled on their own
/// ([`EngineSpec::tp_allreduce_s`]), so TP presets no longer add a flat guess.
const OVERHEAD_US: f64 = 700.0;

/// Qwen3-32B: Qwen/Qwen3-32B config.json (num_hidden_layers 64, hidden_size 5120,
/// num_key_value_heads 8, head_dim 128); 32.8 B parameters (model card).
fn qwen3_32b(bytes_per_param: f64) -> ModelSpec {
    ModelSpec {
        params_b: 32.8,
        layers: 64,
        hidden: 5120,
        ..llama_8b(bytes_per_param)
    }
}

/// Kimi K2: moonshotai/Kimi-K2-Instruct config.json (num_hidden_layers 61,
/// hidden_size 7168, n_routed_experts 384, num_experts_per_tok 8, one shared expert,
/// MLA with kv_lora_rank 512 + qk_rope_head_dim 64 = 576 cached values a layer, told
/// here as one KV "head" of 288 times K and V); 1.04 T total and 32.6 B active
/// parameters (model card: "1T total, 32B activated"). Served with int4 weights
/// (Kimi-K2-Thinking's released INT4 QAT checkpoint, ~0.5 byte a parameter: the
/// fp8 release, 1.04 TB, does not fit in 8 × 141 GB) and an fp8 KV cache.
fn kimi_k2() -> ModelSpec {
    ModelSpec {
        params_b: 1040.0,
        active_params_b: Some(32.6),
        experts: 384,
        experts_per_token: 8,
        layers: 61,
        hidden: 7168,
        kv_heads: 1,
        head_dim: 288,
        bytes_per_param: 0.5,
        kv_bytes_per_elem: 1.0,
    }
}

/// Per-layer floor of a step on H100/H200-class GPUs, µs. One constant for every
/// preset, taken from the published light-load rows of docs/src/CALIBRATION.md: the
/// time a step takes beyond its roofline, tensor-parallel all-reduces and fixed
/// overhead, divided by the layers, comes out at 57 µs (Llama 3.1 8B, vLLM, one
/// H200), 58 µs (Llama 3.3 70B fp8, TensorRT-LLM/NIM, two H100) and 60 µs (Llama 3
/// 70B, vLLM, four H200); the other rows of the table test it.
pub const LAYER_OVERHEAD_US: f64 = 60.0;

/// A model by name, in the given weight bytes per parameter.
fn model(name: &str, bytes_per_param: f64) -> Option<ModelSpec> {
    Some(match name {
        "llama-3.1-8b" => llama_8b(bytes_per_param),
        "llama-3.1-70b" => llama_70b(bytes_per_param),
        "mixtral-8x7b" => mixtral(bytes_per_param),
        "qwen3-32b" => qwen3_32b(bytes_per_param),
        "kimi-k2" => ModelSpec {
            bytes_per_param,
            ..kimi_k2()
        },
        _ => return None,
    })
}

/// `MODEL@[Nx]GPU-PRECISION` from the models and GPUs above: `bf16` (2-byte weights
/// and KV), `fp8` (1-byte weights and KV, fp8 tensor cores; not on A100) or `int4`
/// (half-byte weights on bf16 tensor cores, fp8 KV). E.g. `llama-3.1-70b@4xh200-bf16`.
fn compose(name: &str) -> Option<(ModelSpec, HardwareSpec, ServingSpec)> {
    let (m, hw) = name.split_once('@')?;
    let (hw, precision) = hw.rsplit_once('-')?;
    let (gpus, gpu) = match hw.split_once('x') {
        Some((n, g)) => (n.parse::<u32>().ok().filter(|&n| n > 1)?, g),
        None => (1, hw),
    };
    let (weights, kv, fp8_cores) = match precision {
        "bf16" => (2.0, 2.0, false),
        "fp8" => (1.0, 1.0, true),
        "int4" => (0.5, 1.0, false),
        _ => return None,
    };
    let hardware = match gpu {
        "a100" if !fp8_cores => a100(gpus),
        "h100" => h100(gpus, fp8_cores),
        "h200" => h200(gpus, fp8_cores),
        _ => return None,
    };
    let model = ModelSpec {
        kv_bytes_per_elem: kv,
        ..model(m, weights)?
    };
    Some((model, hardware, serving(OVERHEAD_US)))
}

/// The preset called `name`, if there is one: a listed name, or any
/// `MODEL@[Nx]GPU-PRECISION` of the models and GPUs here.
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
                link_gbs: 450.0,
                allreduce_hop_us: DEFAULT_HOP_US,
            },
            ServingSpec {
                max_batch: 64,
                kv_capacity_tokens: Some(32_768),
                step_overhead_us: 1000.0,
                prefill: Prefill::Chunked { chunk_tokens: 512 },
                ..ServingSpec::default()
            },
        ),
        _ => compose(name)?,
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

/// One line per preset: its name and the figures that decide its speed.
pub fn table() -> String {
    let mut s = format!(
        "{:<28} {:>5} {:>8} {:>9} {:>10} {:>9} {:>12} {:>11}\n",
        "preset", "gpus", "weights", "KV/token", "bandwidth", "TFLOP/s", "KV capacity", "ITL@1"
    );
    for name in PRESETS {
        let p = preset(name).expect("listed presets exist");
        s.push_str(&format!(
            "{:<28} {:>5} {:>6.1}GB {:>7.0}KB {:>7.1}TB/s {:>9.0} {:>5}k tokens {:>8.1} ms\n",
            name,
            p.hardware.gpus,
            p.weight_bytes() / 1e9,
            p.kv_bytes_per_token() / 1e3,
            p.hardware.gpus as f64 * p.hardware.bandwidth_gbs / 1e3,
            p.hardware.gpus as f64 * p.hardware.peak_tflops,
            p.kv_capacity() / 1000,
            p.decode_step_s(1, 1024) * 1e3,
        ));
    }
    s.push_str("ITL@1: decode step of one sequence at 1024 tokens of context, no jitter.\n");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::Speculation;

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

    /// FAULTS 85: a preset name composes only known models, GPUs and precisions.
    #[test]
    fn f85_composed_names_resolve_and_unknown_parts_do_not() {
        let s = preset("llama-3.1-70b@4xh200-bf16").unwrap();
        assert_eq!((s.hardware.gpus, s.hardware.bandwidth_gbs), (4, 4800.0));
        assert_eq!(
            (s.model.bytes_per_param, s.model.kv_bytes_per_elem),
            (2.0, 2.0)
        );
        let q = preset("qwen3-32b@h100-fp8").unwrap();
        assert_eq!((q.model.layers, q.model.kv_bytes_per_elem), (64, 1.0));
        for bad in [
            "llama-3.1-8b@a100-fp8",
            "llama-3.1-8b@1xh100-bf16",
            "llama-3.1-8b@h100",
            "llama-3.1-8b@b200-fp8",
            "gpt-9@h100-bf16",
            "llama-3.1-8b@h100-fp4",
        ] {
            assert!(preset(bad).is_none(), "{bad}");
        }
    }

    #[test]
    fn fp8_halves_the_weights_and_shortens_the_step() {
        let bf16 = preset("llama-3.1-8b@h100-bf16").unwrap();
        let fp8 = preset("llama-3.1-8b@h100-fp8").unwrap();
        assert_eq!(bf16.weight_bytes(), 2.0 * fp8.weight_bytes());
        assert_eq!(bf16.kv_bytes_per_token(), 2.0 * fp8.kv_bytes_per_token());
        // fp8 halves the bytes read (weights and KV), not the fixed costs of a step.
        let halved = (fp8.weight_bytes() + fp8.kv_bytes_per_token() * 512.0) / bf16.bandwidth();
        let saved = bf16.decode_step_s(1, 512) - fp8.decode_step_s(1, 512);
        assert!((saved - halved).abs() < 1e-12, "{saved} vs {halved}");
        assert!(fp8.decode_step_s(1, 512) < 0.7 * bf16.decode_step_s(1, 512));
    }

    // The spec's figures on real engines: here, where the presets are, since the spec
    // knows no preset.
    #[test]
    fn llama_70b_kv_bytes_and_weights_follow_the_config() {
        let s = preset("llama-3.1-70b@4xh100-bf16").unwrap();
        // 80 layers × 8 KV heads × 128 dims × 2 (K, V) × 2 bytes.
        assert_eq!(s.kv_bytes_per_token(), 327_680.0);
        assert_eq!(s.weight_bytes(), 141.2e9);
        // fp8 weights and fp8 KV halve both.
        let s = preset("llama-3.1-70b@h100-fp8").unwrap();
        assert_eq!(s.kv_bytes_per_token(), 163_840.0);
        assert_eq!(s.weight_bytes(), 70.6e9);
    }

    #[test]
    fn moe_reads_more_experts_as_the_batch_grows() {
        let s = preset("mixtral-8x7b@h100-fp8").unwrap();
        let one = s.weight_bytes_read(1);
        let many = s.weight_bytes_read(256);
        assert!(one < 0.4 * s.weight_bytes(), "{one}");
        assert!((many - s.weight_bytes()).abs() < 1e-6 * s.weight_bytes());
    }

    /// FAULTS 85: the engine's newer parameters are refused by name when out of range.
    #[test]
    fn f85_link_hop_layer_and_draft_figures_are_checked_by_name() {
        let base = preset("llama-3.1-70b@4xh100-bf16").unwrap();
        type Spoil = fn(&mut EngineSpec);
        let cases: [(&str, Spoil); 4] = [
            ("hardware.link_gbs", |s| s.hardware.link_gbs = 0.0),
            ("hardware.allreduce_hop_us", |s| {
                s.hardware.allreduce_hop_us = -1.0
            }),
            ("serving.layer_overhead_us", |s| {
                s.serving.layer_overhead_us = f64::NAN
            }),
            ("serving.speculation.draft_fraction", |s| {
                s.serving.speculation = Some(Speculation {
                    k: 2,
                    alpha: 0.5,
                    draft_us: 0.0,
                    draft_fraction: 1.5,
                })
            }),
        ];
        for (field, spoil) in cases {
            let mut s = base.clone();
            spoil(&mut s);
            let e = s.validate().unwrap_err().to_string();
            assert!(e.contains(field), "{field}: {e}");
        }
    }

    #[test]
    fn weights_that_do_not_fit_are_refused() {
        let mut s = preset("llama-3.1-70b@h100-fp8").unwrap();
        s.model.bytes_per_param = 2.0;
        let e = s.validate().unwrap_err().to_string();
        assert!(e.contains("no room for a KV cache"), "{e}");
    }
}

//! The engine flags (`--preset`, `--engine` and their changes) resolved into an
//! engine model: shared by `plan`, `sim` and the built-in simulator of `bench`.

use crate::cli::{EngineOpts, KvPolicyArg};
use crate::exit::usage;
use cadence_engine::twin::Twin;
use cadence_engine::{preset, EngineSpec, KvPolicy, Prefill, PRESETS};

/// The twin in `path` (`--twin`).
pub fn twin(path: &std::path::Path) -> anyhow::Result<std::sync::Arc<Twin>> {
    let text = crate::inputs::read(path, cadence_core::input::CONFIG.named("twin file"))?;
    let twin = Twin::from_toml(&text).map_err(|e| usage(format!("{}: {e}", path.display())))?;
    Ok(std::sync::Arc::new(twin))
}
/// The engine these flags describe, or `None` when neither `--preset` nor
/// `--engine` was given (and no other engine flag either).
pub fn resolve(opts: &EngineOpts, seed: u64) -> anyhow::Result<Option<EngineSpec>> {
    let mut spec = match (&opts.preset, &opts.engine) {
        (Some(name), _) => preset(name).ok_or_else(|| {
            usage(format!(
                "no preset '{name}'; the presets are: {}",
                PRESETS.join(", ")
            ))
        })?,
        (None, Some(path)) => {
            let text = crate::inputs::read(path, cadence_core::input::CONFIG.named("engine file"))?;
            EngineSpec::from_toml(&text).map_err(|e| usage(format!("{}: {e}", path.display())))?
        }
        (None, None) => {
            if opts.prefill_workers.is_some()
                || opts.chunk_tokens.is_some()
                || opts.speculate.is_some()
                || opts.max_batch.is_some()
                || opts.kv_tokens.is_some()
                || opts.kv_policy.is_some()
                || opts.jitter.is_some()
            {
                return Err(usage(
                    "engine flags change an engine: give --preset NAME or --engine FILE.toml",
                ));
            }
            return Ok(None);
        }
    };
    let s = &mut spec.serving;
    s.seed = seed;
    if let Some(workers) = opts.prefill_workers {
        s.prefill = Prefill::Disaggregated {
            workers,
            transfer_ms: opts.kv_transfer.map_or(5.0, |d| d.as_secs_f64() * 1e3),
            link_gbs: match s.prefill {
                Prefill::Disaggregated { link_gbs, .. } => link_gbs,
                Prefill::Chunked { .. } => 50.0,
            },
        };
    }
    if let Some(chunk_tokens) = opts.chunk_tokens {
        s.prefill = Prefill::Chunked { chunk_tokens };
    }
    spec.set_sim_knobs(opts.pd_transfer, opts.spec_accept_len);
    let s = &mut spec.serving;
    if let Some(sp) = opts.speculate {
        s.speculation = Some(sp);
    }
    if let Some(n) = opts.max_batch {
        s.max_batch = n;
    }
    if let Some(n) = opts.kv_tokens {
        s.kv_capacity_tokens = Some(n);
    }
    if let Some(p) = opts.kv_policy {
        s.kv_policy = match p {
            KvPolicyArg::Preempt => KvPolicy::Preempt,
            KvPolicyArg::Reserve => KvPolicy::Reserve,
        };
    }
    if let Some(j) = opts.jitter {
        s.jitter = j;
    }
    spec.validate()
        .map_err(|e| usage(format!("engine {}: {e}", spec.name)))?;
    Ok(Some(spec))
}

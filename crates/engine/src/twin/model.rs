//! What answers `cadence plan`: the engine model from its spec, or an endpoint's twin;
//! one call runs a level on either, so plan's drivers and reports serve both.

use std::sync::Arc;

use super::{Reach, Twin, TwinServer};
use crate::drive::{plan_level_on, Arrivals, PlanLevel, Start, Workload};
use crate::spec::EngineSpec;

/// The engine model or a twin, as `plan` runs it.
#[derive(Debug, Clone)]
pub enum Model {
    /// The engine model.
    Engine(Box<EngineSpec>),
    /// A twin, its draws seeded by `seed`.
    Twin {
        /// The fitted twin.
        twin: Arc<Twin>,
        /// Seeds its draws.
        seed: u64,
    },
}

impl Model {
    /// How reports name it.
    pub fn name(&self) -> String {
        match self {
            Model::Engine(spec) => spec.name.clone(),
            Model::Twin { twin, .. } => format!("twin of {}", twin.source),
        }
    }

    /// Runs one level (see [`crate::plan_level`]); a twin also says how far the level
    /// went past its fit.
    pub fn plan_level(
        &self,
        arrivals: Arrivals,
        workload: &Workload,
        level: u32,
        start_ns: u64,
        first_index: u64,
    ) -> (PlanLevel, Option<Reach>) {
        match self {
            Model::Engine(spec) => (
                crate::plan_level(
                    spec.as_ref(),
                    arrivals,
                    workload,
                    level,
                    start_ns,
                    first_index,
                ),
                None,
            ),
            Model::Twin { twin, seed } => {
                let at = Start {
                    seed: *seed,
                    level,
                    start_ns,
                    first_index,
                };
                let server = TwinServer::new(twin.clone(), seed ^ u64::from(level) << 32);
                let (planned, server) = plan_level_on(server, arrivals, workload, at);
                (planned, Some(server.reach()))
            }
        }
    }

    /// A level's extrapolation warning: for a twin whose level went past its fit
    /// ([`extrapolation`]); never for the engine model.
    pub fn extrapolation(&self, reach: Option<Reach>) -> Option<String> {
        match (self, reach) {
            (Model::Twin { twin, .. }, Some(r)) => extrapolation(&r, twin),
            _ => None,
        }
    }
}

/// A level's warning when its requests went past the fit: every figure of it is an
/// extrapolation. `None` within the fit.
pub fn extrapolation(reach: &Reach, twin: &Twin) -> Option<String> {
    if reach.beyond == 0 {
        return None;
    }
    let mut past = Vec::new();
    if reach.max_running > twin.max_running {
        past.push(format!(
            "{} running (the fit saw up to {})",
            reach.max_running, twin.max_running
        ));
    }
    if reach.max_context > twin.max_context {
        past.push(format!(
            "{} tokens of context (up to {})",
            reach.max_context, twin.max_context
        ));
    }
    if reach.max_prompt > twin.max_prompt {
        past.push(format!(
            "{} uncached prompt tokens (up to {})",
            reach.max_prompt, twin.max_prompt
        ));
    }
    Some(format!(
        "extrapolation: {} of {} requests went past what the twin was fitted on ({}); every figure of this level is extrapolated",
        reach.beyond,
        reach.requests,
        past.join(", ")
    ))
}

/// The engine spec a sim serving `twin` carries: a preset's, named after the twin and
/// seeded, its prefix cache on (the twin counts a prompt's cached part); the twin times
/// every stream (`None` only if the presets were empty).
pub fn sim_spec(twin: &Twin, seed: u64) -> Option<EngineSpec> {
    let mut spec = crate::preset(crate::PRESETS[0])?;
    spec.name = format!("twin of {}", twin.source);
    spec.serving.seed = seed;
    spec.serving.prefix_cache = true;
    Some(spec)
}

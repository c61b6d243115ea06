//! What `bench` talks to: the URL given or the built-in simulator started for it, its
//! API, and the model the requests name (`--model`, the simulator's engine, or the first
//! one the server lists).

use crate::builtin_sim::BuiltinSim;
use crate::cli::BenchArgs;
use crate::exit::usage;
use anyhow::Context;
use cadence_bench::target::{redact_url, Target};
use cadence_core::secret::Redactor;
use cadence_transport::client::HyperClient;
use cadence_transport::get::GetError;
use cadence_transport::Unreachable;
use std::time::Duration;

/// What the run talks to: the URL given, or the built-in simulator started for it
/// (stopped when this is dropped).
pub(super) struct Endpoint {
    pub(super) target: Target,
    pub(super) builtin: Option<BuiltinSim>,
    /// The built-in simulator's engine model name.
    pub(super) builtin_model: Option<String>,
}

impl Endpoint {
    pub(super) fn start(args: &BenchArgs) -> anyhow::Result<Endpoint> {
        let builtin_config = match &args.url {
            Some(_) => {
                if crate::engine_opts::resolve(&args.engine, args.seed)?.is_some()
                    || !args.engine.inject.is_empty()
                {
                    return Err(usage(
                        "--preset/--engine/--inject drive the built-in simulator's engine: give them without a URL",
                    ));
                }
                None
            }
            None => Some(crate::builtin_sim::config(args.seed, &args.engine)?),
        };
        let builtin = match &builtin_config {
            Some(c) => Some(BuiltinSim::start(c.clone())?),
            None => None,
        };
        let url = match (&args.url, &builtin) {
            (Some(u), _) => u.clone(),
            (None, Some(sim)) => format!("http://{}/v1", sim.addr),
            (None, None) => unreachable!("a built-in sim is started when no URL is given"),
        };
        let asked = args.api.and_then(|a| a.0);
        let target = Target::resolve(&url, asked).map_err(|e| usage(e.to_string()))?;
        if args.api == Some(crate::cli::ApiFlag(None)) && !args.quiet {
            eprintln!(
                "API auto: {} (from the path {}; the stream's framing follows its content type).",
                target.api.name(),
                target.endpoint.path()
            );
        }
        let builtin_model = builtin_config.map(|c| c.model);
        if builtin.is_some() && !args.quiet {
            eprintln!(
                "No URL given: benchmarking the built-in simulator at {url} (engine {}).",
                builtin_model.as_deref().unwrap_or("")
            );
        }
        Ok(Endpoint {
            target,
            builtin,
            builtin_model,
        })
    }
}

/// `--model`, else the built-in simulator's engine, else the first model the server lists.
pub(super) async fn model_name(
    args: &BenchArgs,
    endpoint: &Endpoint,
    http: &HyperClient,
    headers: &http::HeaderMap,
    redactor: &Redactor,
) -> anyhow::Result<String> {
    if let Some(m) = &args.model {
        return Ok(m.clone());
    }
    if endpoint.builtin.is_some() {
        return Ok(endpoint.builtin_model.clone().unwrap_or_default());
    }
    let timeout = args.connect_timeout + args.header_timeout;
    first_model(http, &endpoint.target, headers, timeout)
        .await
        .map_err(|e| match e.downcast_ref::<Unreachable>() {
            // Not a usage error: the command is right, the server is not there (exit 1).
            Some(u) => anyhow::anyhow!("{}", redactor.redact(&u.to_string())),
            None => usage(format!(
                "{}; pass --model NAME",
                redactor.redact(&format!("{e:#}"))
            )),
        })
}

/// Asks the server which models it serves and takes the first. A server that cannot
/// be connected to at all is an [`Unreachable`] error.
async fn first_model(
    http: &HyperClient,
    target: &Target,
    headers: &http::HeaderMap,
    timeout: Duration,
) -> anyhow::Result<String> {
    let mut headers = headers.clone();
    headers.remove(http::header::CONTENT_TYPE);
    let fetch = async {
        let max = cadence_transport::get::MAX_BODY;
        let body = cadence_transport::get::get(http, &target.models, &headers, timeout, max)
            .await
            .map_err(|e| match e {
                GetError::Unreachable(u) => anyhow::Error::new(u),
                e => anyhow::Error::new(e),
            })?;
        Ok::<_, anyhow::Error>(cadence_wire::models::first_model(&body)?)
    };
    fetch.await.with_context(|| {
        format!(
            "could not list models at {}",
            redact_url(&target.models.to_string())
        )
    })
}

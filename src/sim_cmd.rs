//! `cadence sim`: the simulator as a standalone OpenAI-compatible server, until Ctrl-C.

use crate::cli::SimArgs;
use crate::exit::{usage, Exit};
use cadence_sim::{Dist, SendLog, SimConfig, SimState};

/// Validates the flags into a simulator configuration.
pub fn config(args: &SimArgs) -> anyhow::Result<SimConfig> {
    let mut c = SimConfig {
        seed: args.seed,
        ..SimConfig::default()
    };
    let dist = |flag: &str, v: &str| -> anyhow::Result<Dist> {
        v.parse::<Dist>()
            .map_err(|e| usage(format!("--{flag}: {e}")))
    };
    if let Some(v) = &args.ttft {
        c.ttft = dist("ttft", v)?;
    }
    if let Some(v) = &args.itl {
        c.itl = dist("itl", v)?;
    }
    if let Some(v) = &args.stall {
        c.stall = dist("stall", v)?;
    }
    if let Some(b) = args.burst {
        if b == 0 {
            return Err(usage("--burst must be at least 1"));
        }
        c.burst = b;
    }
    (c.spec_accept_len, c.pd_transfer) = (args.engine.spec_accept_len, args.engine.pd_transfer);
    if let Some(p) = args.stall_probability {
        if !(0.0..=1.0).contains(&p) {
            return Err(usage("--stall-probability must be between 0 and 1"));
        }
        c.stall_probability = p;
    }
    if !(0.0..=1.0).contains(&args.tool_call_prob) {
        return Err(usage("--tool-call-prob must be between 0 and 1"));
    }
    c.tool_call_probability = args.tool_call_prob;
    if args.parallel_tool_calls == 0 {
        return Err(usage("--parallel-tool-calls must be at least 1"));
    }
    c.parallel_tool_calls = args.parallel_tool_calls;
    c.default_max_tokens = args.max_tokens.unwrap_or(c.default_max_tokens);
    c.model = args.model.clone().unwrap_or_else(|| c.model.clone());
    if let (Some(at), Some(duration)) = (args.freeze_at, args.freeze_for) {
        c.freeze = Some(cadence_sim::Freeze { at, duration });
    }
    c.engine = crate::engine_opts::resolve(&args.engine, args.seed)?;
    if let Some(path) = &args.twin {
        let twin = crate::engine_opts::twin(path)?;
        c.engine = cadence_engine::twin::sim_spec(&twin, args.seed);
        c.twin = Some(twin);
    }
    if c.engine.is_some() {
        flat_timing_conflict(args)?;
    } else if !args.engine.inject.is_empty() {
        return Err(usage(
            "--inject drives the engine model: give --preset or --engine with it",
        ));
    }
    c.inject = args.engine.inject.clone();
    if let (Some(e), None) = (&c.engine, &args.model) {
        c.model = e.name.clone();
    }
    Ok(c)
}

/// The flat timing flags describe the other timing model: with an engine they would
/// reach only the requests the engine does not time (faults, per-request timing
/// headers), which nobody means. Refused, naming both flags; per-request headers still
/// set flat timing for single requests.
fn flat_timing_conflict(args: &SimArgs) -> anyhow::Result<()> {
    let flat = [
        ("--ttft", args.ttft.is_some()),
        ("--itl", args.itl.is_some()),
        ("--burst", args.burst.is_some()),
        ("--stall", args.stall.is_some()),
        ("--stall-probability", args.stall_probability.is_some()),
    ];
    let Some((flag, _)) = flat.iter().find(|(_, given)| *given) else {
        return Ok(());
    };
    let engine = if args.engine.preset.is_some() {
        "--preset"
    } else {
        "--engine"
    };
    Err(usage(format!(
        "{flag} cannot be combined with {engine}: {flag} sets the flat simulator's timing, and with {engine} the engine model times every request (a flat flag would reach only faulted requests); drop {flag}, or drop {engine} for flat timing (the x-cadence-ttft-ms / x-cadence-itl-ms headers still time single requests flat)"
    )))
}

pub async fn run(args: SimArgs) -> anyhow::Result<Exit> {
    let config = config(&args)?;
    config.validate().map_err(|e| usage(e.to_string()))?;
    let state = match &args.send_log {
        Some(path) => {
            let log = SendLog::with_capacity(0).with_file(path).map_err(|e| {
                anyhow::anyhow!("cannot create the send log {}: {e}", path.display())
            })?;
            SimState::with_send_log(config, log)
        }
        // Nothing reads the in-memory log of a standalone sim: it keeps none, or
        // every request served would leave its record behind (up to 100,000).
        None => SimState::with_send_log(config, SendLog::with_capacity(0)),
    };
    let o = &args.otlp;
    let config = cadence_otlp::run::config(o.otlp.as_deref(), o.otlp_protocol)?;
    let otlp = config.map(cadence_otlp::Exporter::start).transpose()?;
    if let Some(e) = &otlp {
        let p = cadence_otlp::run::propagation(o.otlp_sample);
        state.trace_with(cadence_sim::trace::Tracer::new(e.queue(), p));
    }
    let server = cadence_sim::spawn_with_state(state, args.addr)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {}: {e}", args.addr))?;
    // The first line on stdout is the address, for scripts that started us on port 0.
    println!("listening on http://{}/v1", server.addr);
    if let Some(e) = &server.state().config().engine {
        eprintln!(
            "timing tokens with the engine model {} (metrics at http://{}/metrics)",
            e.name, server.addr
        );
    }
    let _ = tokio::signal::ctrl_c().await;
    server.shutdown().await;
    let said = otlp.map(|e| cadence_otlp::run::said(&e.finish(), false).0);
    said.flatten().iter().for_each(|l| eprintln!("{l}"));
    Ok(Exit::Ok)
}

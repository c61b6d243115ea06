//! `bench`'s flags checked before a single request goes out: the ones that depend on
//! each other, the inputs they name (a trace, an agent trace), the output paths and the
//! client's open-file limit; any problem is a usage error.

use crate::cli::{BenchArgs, SearchAxis, DEFAULT_CONCURRENCY, DEFAULT_REQUESTS};
use crate::exit::usage;
use cadence_bench::body::parse_extra_body;
use cadence_bench::trace::TraceEntry;
use cadence_transport::client;
use std::io::IsTerminal;

/// The flags checked and read before a single request goes out.
pub(super) struct Validated {
    pub(super) extra: Option<serde_json::Map<String, serde_json::Value>>,
    pub(super) extra_headers: Vec<(http::HeaderName, http::HeaderValue)>,
    pub(super) trace: Option<Vec<TraceEntry>>,
    /// `--agent-trace`: the recorded sessions, retimed.
    pub(super) agent_trace: Option<Vec<cadence_bench::agent_trace::TraceSession>>,
    /// Measured requests per level (`None`: until --duration ends the level).
    pub(super) requests: Option<u64>,
}

/// Checks the flags that depend on each other and reads the inputs they name: any
/// problem is a usage error before the run starts.
pub(super) fn validate(args: &BenchArgs) -> anyhow::Result<Validated> {
    let extra = args
        .extra_body
        .as_deref()
        .map(parse_extra_body)
        .transpose()
        .map_err(usage)?;
    let extra_headers = args
        .headers
        .iter()
        .map(|h| client::parse_header(h))
        .collect::<Result<Vec<_>, _>>()
        .map_err(usage)?;
    if args.tui && !std::io::stdout().is_terminal() {
        return Err(usage(
            "--tui draws the dashboard on the terminal and stdout is not one: drop --tui (the progress line and the report print as usual)",
        ));
    }
    if args.workload.agent.tools.is_some()
        && !args.workload.agent.agent
        && args.agent_trace.is_none()
    {
        return Err(usage(
            "--tools declares the tools of --agent or --agent-trace sessions: give one of them",
        ));
    }
    if args.requests == Some(0) {
        return Err(usage("--requests must be at least 1"));
    }
    if args.find_max.is_some() && args.slos.is_empty() {
        return Err(usage("--find-max searches for the highest level meeting every --slo: give at least one --slo"));
    }
    if args.find_max.is_some() && args.trace.is_some() {
        return Err(usage("--find-max cannot be combined with --trace"));
    }
    if args.max_concurrency.is_some()
        && args.rate.is_none()
        && args.trace.is_none()
        && args.agent_trace.is_none()
        && args.find_max != Some(SearchAxis::Rate)
    {
        return Err(usage(
            "--max-concurrency caps an open loop: use it with --rate or --trace",
        ));
    }
    if !args.coalesce_wakes.is_zero() {
        coalescing_allowed(args).map_err(usage)?;
    }
    let trace = read_trace(args)?;
    let agent_trace = crate::agent_replay::read(args)?;
    // Every output path is checked before anything is sent (or the file truncated).
    let outputs =
        crate::output::named(args.json.as_deref(), args.records.as_deref(), &args.outputs);
    let inputs: Vec<std::path::PathBuf> = args
        .trace
        .iter()
        .chain(&args.agent_trace)
        .cloned()
        .collect();
    crate::output::preflight(&inputs, &outputs)?;
    check_fd_limit(args)?;
    let recorded = trace
        .as_ref()
        .map(Vec::len)
        .or(agent_trace.as_ref().map(Vec::len));
    let requests = match (args.requests, args.duration, recorded) {
        (n, _, Some(len)) => Some(n.map_or(len as u64, |n| n.min(len as u64))),
        (None, None, None) => Some(DEFAULT_REQUESTS),
        (n, _, None) => n,
    };
    if let (Some(ramp), Some(rates)) = (args.ramp_up, &args.rate) {
        let planned = requests.map(|n| n.saturating_add(args.warmup));
        for &rate in &rates.0 {
            if let Some(why) =
                cadence_core::arrivals::ramp_shortfall(rate, ramp, planned, args.duration)
            {
                return Err(usage(why));
            }
        }
    }
    Ok(Validated {
        extra,
        extra_headers,
        trace,
        agent_trace,
        requests,
    })
}

/// Whether `--coalesce-wakes` may be on: a waiting worker holds whatever is handed to it
/// (a pacer's ticket, a timer that ends a think time or starts a level), so only a closed
/// loop whose next send follows a finished stream directly may coalesce.
fn coalescing_allowed(args: &BenchArgs) -> Result<(), String> {
    let why = if args.rate.is_some() || args.find_max == Some(SearchAxis::Rate) {
        "an open-loop --rate"
    } else if args.trace.is_some() {
        "--trace"
    } else if args.agent_trace.is_some() {
        "--agent-trace"
    } else if !args.workload.think_time.is_zero() {
        "--think-time"
    } else if args.workload.agent.agent {
        "--agent (a session's next step follows its tool time)"
    } else if args.start_at.is_some() || args.start_in.is_some() {
        "a scheduled start (--start-at, --start-in)"
    } else if args.timestamps != crate::cli::TimestampsArg::Kernel {
        "--timestamps user (each chunk is timed when it is read)"
    } else {
        return Ok(());
    };
    Err(format!(
        "--coalesce-wakes cannot be used with {why}: a waiting worker would hold sends \
         that must go out on time; it is for closed-loop runs (--concurrency) only"
    ))
}

/// The client's own open-file limit: raised, then checked against the largest level
/// (an open loop without a cap or a search has no known bound: raised only).
fn check_fd_limit(args: &BenchArgs) -> anyhow::Result<()> {
    let in_flight = args
        .concurrency
        .as_ref()
        .and_then(|c| c.0.iter().max().copied())
        .or(args.max_concurrency)
        .or(
            (args.rate.is_none() && args.trace.is_none() && args.find_max.is_none())
                .then_some(DEFAULT_CONCURRENCY),
        );
    match in_flight {
        Some(n) => {
            let need = cadence_bench::fdlimit::needed(n.into(), args.url.is_none());
            cadence_bench::fdlimit::ensure(need).map_err(usage)?;
        }
        None => drop(cadence_bench::fdlimit::raise()),
    }
    Ok(())
}

/// The `--trace` entries, sped up by `--trace-speed`.
fn read_trace(args: &BenchArgs) -> anyhow::Result<Option<Vec<TraceEntry>>> {
    let Some(path) = &args.trace else {
        return Ok(None);
    };
    if !(args.trace_speed.is_finite() && args.trace_speed > 0.0) {
        return Err(usage("--trace-speed must be a positive number"));
    }
    let text = crate::inputs::read(path, crate::inputs::large(&args.workload, "trace"))?;
    let mut entries = cadence_bench::trace::parse_trace(&text)
        .map_err(|e| usage(format!("{}: {e}", path.display())))?;
    cadence_bench::trace::scale(&mut entries, args.trace_speed);
    Ok(Some(entries))
}

//! `bench --agent-trace` (a part of bench, not a subcommand): reads and retimes the
//! recorded sessions before the run, and makes the replay the request factory drives
//! (the tools every call declares, the generator of exact-length new text).

use crate::cli::BenchArgs;
use crate::exit::usage;
use cadence_bench::agent::{self as agent, AgentSpec, DurationDist, Force};
use cadence_bench::agent_trace::{self, Replay, TraceSession};
use cadence_bench::prompts::{Counter, LengthDist, PromptGen};
use cadence_bench::tokenizer::Tokenizer;
use std::sync::Arc;
use std::time::Duration;

/// The `--agent-trace` sessions, sped up by `--agent-trace-speed` and with idle gaps
/// cut to `--agent-trace-max-gap`; `None` without the flag.
pub fn read(args: &BenchArgs) -> anyhow::Result<Option<Vec<TraceSession>>> {
    let Some(path) = &args.agent_trace else {
        return Ok(None);
    };
    if !(args.agent_trace_speed.is_finite() && args.agent_trace_speed > 0.0) {
        return Err(usage("--agent-trace-speed must be a positive number"));
    }
    let text = crate::inputs::read(path, crate::inputs::large(&args.workload, "agent trace"))?;
    let mut sessions = agent_trace::parse(
        &text,
        args.agent_trace_format.format(),
        args.agent_trace_block_size,
    )
    .map_err(|e| usage(format!("{}: {e}", path.display())))?;
    agent_trace::retime(
        &mut sessions,
        args.agent_trace_speed,
        args.agent_trace_max_gap,
    );
    Ok(Some(sessions))
}

/// The replay of `sessions`: the tools of `--tools` (else the built-in set) declared
/// on every call (the model decides whether to call them), new text cut from `--corpus` (or the shipped
/// corpus) to lengths counted by `tokenizer`, else as whitespace words.
pub fn replay(
    args: &BenchArgs,
    sessions: Vec<TraceSession>,
    tokenizer: Option<Tokenizer>,
) -> anyhow::Result<Arc<Replay>> {
    let counter = tokenizer.map_or(Counter::Words, Counter::Tokenizer);
    let corpus = match &args.workload.corpus {
        Some(p) => crate::inputs::read(p, crate::inputs::large(&args.workload, "corpus"))?,
        None => cadence_bench::prompts::CORPUS.to_owned(),
    };
    let gen = PromptGen::new(&corpus, counter).map_err(|e| usage(e.to_string()))?;
    let tools = match &args.workload.agent.tools {
        Some(path) => {
            let text = crate::inputs::read(path, cadence_core::input::TOOLS)?;
            agent::parse_tools(&text)
                .map_err(|e| usage(format!("--tools {}: {e}", path.display())))?
        }
        None => agent::builtin_tools(),
    };
    let max_steps = sessions
        .iter()
        .map(|s| s.calls.len())
        .max()
        .unwrap_or(1)
        .min(u32::MAX as usize) as u32;
    Ok(Arc::new(Replay {
        sessions,
        agent: AgentSpec {
            tools,
            force: Force::Off,
            tool_time: DurationDist::Fixed(Duration::ZERO),
            result_tokens: LengthDist::Fixed(1),
            results: Arc::new(gen),
            max_steps,
            seed: args.seed ^ 0x7EAC_E5E5_5100_0000,
        },
    }))
}

/// What the replay will send, for the user.
pub fn note(sessions: &[TraceSession], counted_by: Option<&Tokenizer>) -> String {
    let calls: usize = sessions.iter().map(|s| s.calls.len()).sum();
    let span = sessions.last().map_or(Duration::ZERO, |s| s.at);
    format!(
        "agent trace: {} sessions, {calls} calls, arrivals over {:.1} s; prompt lengths \
         counted {}",
        sessions.len(),
        span.as_secs_f64(),
        match counted_by {
            Some(t) => format!("with {} (message text only: no chat template)", t.name()),
            None => "as whitespace-separated words (the built-in simulator's tokens)".into(),
        }
    )
}

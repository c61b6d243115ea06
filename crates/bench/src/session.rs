//! What a dispatch is (a plain request or multi-turn session, an agent session, a
//! recorded session replayed) as one type, and the steps of the two kinds that call
//! tools: when each step is due, what it sends and what its reply adds to the next.
//! The runner drives both through one loop.

use crate::agent::{AgentSpec, Force, Transcript};
use crate::agent_trace::{reply_tokens, Replay, ReplayState, TraceSession};
pub use crate::workload::SessionKind;
use crate::workload::{BuiltTurn, RequestFactory};
use cadence_core::{RequestRecord, ToolChoice};
use cadence_wire::ToolCall;
use rand::rngs::SmallRng;

/// One agent session's or replayed session's steps, as they go.
pub(crate) enum Steps<'a> {
    /// An agent session: the transcript grows by each reply and its tools' results.
    Agent {
        spec: &'a AgentSpec,
        transcript: Transcript,
        max_tokens: Option<u32>,
    },
    /// A recorded session: each call's prompt is made from the recording.
    Replay {
        replay: &'a Replay,
        session: &'a TraceSession,
        state: ReplayState,
        /// When the session arrived on the run clock (its calls' offsets count from it).
        arrived_ns: u64,
    },
}

impl<'a> Steps<'a> {
    /// The steps of dispatch `k` of `factory` whose session is `kind` (a replayed
    /// session arriving at `arrived_ns()`); `None` for a plain dispatch or a replay
    /// without sessions.
    pub(crate) fn new(
        kind: &'a SessionKind,
        factory: &RequestFactory,
        k: u64,
        arrived_ns: impl FnOnce() -> u64,
    ) -> Option<Steps<'a>> {
        match kind {
            SessionKind::Plain => None,
            SessionKind::Agent(spec) => {
                let (transcript, max_tokens) = factory.agent_transcript(k);
                Some(Steps::Agent {
                    spec,
                    transcript,
                    max_tokens,
                })
            }
            SessionKind::Replay(replay) => Some(Steps::Replay {
                replay,
                session: replay.session(k)?,
                state: ReplayState::new(factory.body.api),
                arrived_ns: arrived_ns(),
            }),
        }
    }

    /// The agent's tools, seed and result text.
    pub(crate) fn spec(&self) -> &'a AgentSpec {
        match self {
            Steps::Agent { spec, .. } => spec,
            Steps::Replay { replay, .. } => &replay.agent,
        }
    }

    /// The most steps: the agent's step cap, or the recorded calls.
    pub(crate) fn len(&self) -> usize {
        match self {
            Steps::Agent { spec, .. } => spec.max_steps.max(1) as usize,
            Steps::Replay { session, .. } => session.calls.len(),
        }
    }

    /// When step `step` (after the first) is due on the run clock, the previous one
    /// having ended at `prev_end_ns`, and the tool wait its record says: the agent's
    /// tool time; or the recorded tool wait, and not before the call's recorded offset.
    pub(crate) fn due(&self, step: usize, prev_end_ns: u64, rng: &mut SmallRng) -> (u64, u64) {
        match self {
            Steps::Agent { spec, .. } => {
                let tool_time = spec.tool_time.sample(rng).as_nanos() as u64;
                (prev_end_ns.saturating_add(tool_time), tool_time)
            }
            Steps::Replay {
                session,
                arrived_ns,
                ..
            } => {
                let call = &session.calls[step];
                let after_tools = prev_end_ns.saturating_add(call.tool_wait.as_nanos() as u64);
                let not_before = call
                    .at
                    .map_or(0, |a| arrived_ns.saturating_add(a.as_nanos() as u64));
                let due = after_tools.max(not_before);
                (due, due.saturating_sub(prev_end_ns))
            }
        }
    }

    /// The request of step `step` of dispatch `k`; its prompt id, prefix group and (an
    /// agent's) tool choice go into `rec`.
    pub(crate) fn build(
        &mut self,
        factory: &RequestFactory,
        k: u64,
        step: usize,
        rng: &mut SmallRng,
        rec: &mut RequestRecord,
    ) -> BuiltTurn {
        match self {
            Steps::Agent {
                spec,
                transcript,
                max_tokens,
            } => {
                let mut built = factory.build_agent_step(k, spec, transcript, *max_tokens);
                rec.prompt_id = Some(std::mem::take(&mut built.prompt_id));
                rec.prefix_group = built.prefix_group;
                rec.tool_choice = Some(match spec.force {
                    Force::Required => ToolChoice::Required,
                    Force::Off | Force::Mock => ToolChoice::Auto,
                });
                built
            }
            Steps::Replay {
                replay,
                session,
                state,
                ..
            } => {
                let call = &session.calls[step];
                state.prepare(call, &replay.agent.results, rng);
                let max_tokens = Some(call.output_tokens);
                let built =
                    factory.build_agent_step(k, &replay.agent, state.transcript(), max_tokens);
                rec.prompt_id = Some(session.id.clone());
                rec.prefix_group = None;
                built
            }
        }
    }

    /// An agent told to mock a tool call when a reply (`ok`, not the `last` step)
    /// makes none gets one in `calls`, marked on `rec`.
    pub(crate) fn mock(
        &self,
        ok: bool,
        last: bool,
        (k, step): (u64, usize),
        calls: &mut Vec<ToolCall>,
        rec: &mut RequestRecord,
    ) {
        if let Steps::Agent { spec, .. } = self {
            if ok && calls.is_empty() && spec.force == Force::Mock && !last {
                calls.push(spec.mock_call(k, step as u32));
                rec.tool_call_mocked = true;
            }
        }
    }

    /// Whether a reply that made `calls` leads to another step: an agent stops at a
    /// reply without tool calls; a replay goes on to its next recorded call.
    pub(crate) fn goes_on(&self, calls: &[ToolCall]) -> bool {
        match self {
            Steps::Agent { .. } => !calls.is_empty(),
            Steps::Replay { .. } => true,
        }
    }

    /// The reply (its text and tool calls) added to the context: the agent's tools'
    /// results after it; a replay counts its tokens as the server did
    /// (`server_tokens`, when the server's count is the one to trust) or as the
    /// result text's counter does.
    pub(crate) fn push_reply(
        &mut self,
        reply: &str,
        calls: &[ToolCall],
        server_tokens: Option<u64>,
        rng: &mut SmallRng,
    ) {
        match self {
            Steps::Agent {
                spec, transcript, ..
            } => {
                let results: Vec<String> = calls.iter().map(|_| spec.result_text(rng)).collect();
                transcript.push_reply(reply, calls);
                transcript.push_results(calls, &results);
            }
            Steps::Replay { replay, state, .. } => {
                let tokens = server_tokens
                    .unwrap_or_else(|| reply_tokens(&replay.agent.results, reply, calls));
                state.push_reply(reply, calls, tokens);
            }
        }
    }
}

//! Whether an agent run's sessions were agent loops at all. A model that never calls a
//! tool, or a server that ignores `tool_choice` required, ends every session at its
//! first reply, and the session figures then describe single requests: counted per
//! level here and said in one warning that names the mistake and what to try.

use crate::{Outcome, RequestRecord, ToolChoice};
use serde::{Deserialize, Serialize};

/// The share of answered agent sessions, as a fraction `(part, whole)`, below which
/// those that made a tool call are too few for the sessions to be agent loops: 1 in 10.
pub const MIN_CALLING_SHARE: (u64, u64) = (1, 10);

/// What to try when replies carry no tool calls, in words.
const WHAT_TO_TRY: &str = "try a model that supports tool calls, the server's tool-call \
parser (llama-server --jinja; vLLM --enable-auto-tool-choice --tool-call-parser NAME), \
`--agent-force required`, or `--agent-force mock` to inject calls";

/// One session's tool use, as its steps arrive.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SessionTools {
    /// A step of it was an agent step (it carried a tool choice).
    agent: bool,
    /// A step of it was answered (succeeded).
    answered: bool,
    /// A reply called a tool, or the client injected a call.
    called: bool,
    /// Answered steps that sent `tool_choice` required.
    required: u64,
    /// Of those, replies without a tool call.
    ignored: u64,
}

impl SessionTools {
    /// Takes one step of the session.
    pub(crate) fn push(&mut self, r: &RequestRecord) {
        let Some(choice) = r.tool_choice else {
            return;
        };
        self.agent = true;
        self.called |= r.tool_calls.unwrap_or(0) > 0 || r.tool_call_mocked;
        if r.outcome != Outcome::Succeeded {
            return;
        }
        self.answered = true;
        if choice == ToolChoice::Required {
            self.required += 1;
            self.ignored += u64::from(r.tool_calls == Some(0));
        }
    }

    /// Adds the same session's steps seen elsewhere (another shard).
    pub(crate) fn merge(&mut self, o: &SessionTools) {
        self.agent |= o.agent;
        self.answered |= o.answered;
        self.called |= o.called;
        self.required += o.required;
        self.ignored += o.ignored;
    }
}

/// A level's agent sessions: how many called a tool, and whether the server honoured
/// `tool_choice` required. All zero for multi-turn chats and replays.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolUse {
    /// Agent sessions (`--agent`) with at least one answered step.
    pub agent_sessions: u64,
    /// Of those, sessions in which no reply called a tool and the client injected none:
    /// each ended at its first reply.
    pub without_tool_calls: u64,
    /// Answered steps that sent `tool_choice` required (`--agent-force required`).
    pub required_steps: u64,
    /// Of those, replies without a tool call: the server ignored `tool_choice`.
    pub required_ignored: u64,
}

impl ToolUse {
    /// Adds one session.
    pub(crate) fn add(&mut self, s: &SessionTools) {
        if !(s.agent && s.answered) {
            return;
        }
        self.agent_sessions += 1;
        self.without_tool_calls += u64::from(!s.called);
        self.required_steps += s.required;
        self.required_ignored += s.ignored;
    }

    /// No agent session was answered (a multi-turn chat, a replay): nothing to say.
    pub fn is_empty(&self) -> bool {
        *self == ToolUse::default()
    }

    /// Too few sessions made a tool call (none, or under [`MIN_CALLING_SHARE`]) for the
    /// level's sessions to be agent loops: their figures are of single requests.
    pub fn not_agent_loops(&self) -> bool {
        let calling = self.agent_sessions - self.without_tool_calls.min(self.agent_sessions);
        let (part, whole) = MIN_CALLING_SHARE;
        self.agent_sessions > 0 && calling * whole < self.agent_sessions * part
    }

    /// The level's warning, when its sessions called no tool or the server ignored
    /// `tool_choice` required: one line naming the mistake and what to try.
    pub fn warning(&self) -> Option<String> {
        let sessions = format!(
            "{} of {} agent sessions ({:.0} %) made no tool call, so each ended at its \
             first reply: the session figures are of single requests, not agent loops",
            self.without_tool_calls,
            self.agent_sessions,
            self.without_tool_calls as f64 / self.agent_sessions.max(1) as f64 * 100.0
        );
        if self.required_ignored > 0 {
            let also = if self.not_agent_loops() {
                format!("; {sessions}")
            } else {
                String::new()
            };
            return Some(format!(
                "the server ignored tool_choice required: {} of {} steps sent with \
                 `--agent-force required` were answered without a tool call{also}. The \
                 server does not honour tool_choice or its tool-call parser is off: {}",
                self.required_ignored,
                self.required_steps,
                WHAT_TO_TRY.replace(", `--agent-force required`", "")
            ));
        }
        self.not_agent_loops().then(|| {
            format!("agent sessions without tool calls: {sessions}. The model did not call the declared tools: {WHAT_TO_TRY}")
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A step of an agent session: answered (or failed), with `calls` tool calls.
    fn step(choice: ToolChoice, ok: bool, calls: u32) -> RequestRecord {
        let outcome = if ok {
            Outcome::Succeeded
        } else {
            Outcome::Http5xx
        };
        let mut r = RequestRecord::new(0, outcome);
        r.tool_choice = Some(choice);
        r.tool_calls = Some(calls);
        r
    }

    fn level(sessions: &[&[RequestRecord]]) -> ToolUse {
        let mut t = ToolUse::default();
        for steps in sessions {
            let mut s = SessionTools::default();
            steps.iter().for_each(|r| s.push(r));
            t.add(&s);
        }
        t
    }

    #[test]
    fn sessions_that_never_called_a_tool_are_not_agent_loops_and_say_what_to_try() {
        let one = [step(ToolChoice::Auto, true, 0)];
        let t = level(&[&one, &one, &one]);
        assert_eq!(
            t,
            ToolUse {
                agent_sessions: 3,
                without_tool_calls: 3,
                required_steps: 0,
                required_ignored: 0
            }
        );
        assert!(t.not_agent_loops());
        let w = t.warning().unwrap();
        assert!(w.starts_with("agent sessions without tool calls: 3 of 3 agent sessions (100 %) made no tool call"), "{w}");
        for hint in [
            "--jinja",
            "--agent-force required",
            "--agent-force mock",
            "supports tool calls",
        ] {
            assert!(w.contains(hint), "{hint}: {w}");
        }
    }

    #[test]
    fn one_calling_session_in_ten_is_enough_and_fewer_is_not() {
        let none = [step(ToolChoice::Auto, true, 0)];
        let called = [
            step(ToolChoice::Auto, true, 2),
            step(ToolChoice::Auto, true, 0),
        ];
        let mut nine: Vec<&[RequestRecord]> = vec![&none; 9];
        nine.push(&called);
        let t = level(&nine);
        assert_eq!((t.agent_sessions, t.without_tool_calls), (10, 9));
        assert!(!t.not_agent_loops(), "1 in 10 called");
        assert_eq!(t.warning(), None);
        let mut ten: Vec<&[RequestRecord]> = vec![&none; 10];
        ten.push(&called);
        let t = level(&ten);
        assert!(t.not_agent_loops(), "1 in 11 called");
        assert!(t
            .warning()
            .unwrap()
            .contains("10 of 11 agent sessions (91 %)"));
    }

    #[test]
    fn required_answered_without_a_call_names_the_server_ignoring_tool_choice() {
        let ignored = [step(ToolChoice::Required, true, 0)];
        let t = level(&[&ignored, &ignored]);
        assert_eq!((t.required_steps, t.required_ignored), (2, 2));
        let w = t.warning().unwrap();
        assert!(w.starts_with("the server ignored tool_choice required: 2 of 2 steps sent with `--agent-force required` were answered without a tool call; 2 of 2 agent sessions (100 %) made no tool call"), "{w}");
        assert!(
            w.contains("--jinja") && !w.contains("`--agent-force required`, or"),
            "{w}"
        );
        // Once in a session that otherwise called tools: still said, and counted.
        let once = [
            step(ToolChoice::Required, true, 1),
            step(ToolChoice::Required, true, 0),
        ];
        let t = level(&[&once]);
        assert_eq!(
            (t.required_steps, t.required_ignored, t.without_tool_calls),
            (2, 1, 0)
        );
        assert!(t.warning().unwrap().contains("1 of 2 steps sent with"));
        assert!(!t.warning().unwrap().contains("agent sessions"));
    }

    #[test]
    fn mocked_calls_failed_steps_and_other_sessions_are_not_counted_as_toolless() {
        let mut mocked = step(ToolChoice::Auto, true, 0);
        mocked.tool_call_mocked = true;
        let failed = [step(ToolChoice::Required, false, 0)];
        let mut chat = RequestRecord::new(0, Outcome::Succeeded);
        chat.tool_calls = None;
        let t = level(&[&[mocked], &failed, &[chat]]);
        assert_eq!(
            t,
            ToolUse {
                agent_sessions: 1,
                without_tool_calls: 0,
                required_steps: 0,
                required_ignored: 0
            }
        );
        assert_eq!(t.warning(), None);
        assert!(level(&[]).is_empty() && !level(&[]).not_agent_loops());
    }

    #[test]
    fn a_session_split_over_shards_merges_to_the_same_counts() {
        let steps = [
            step(ToolChoice::Required, true, 0),
            step(ToolChoice::Required, true, 3),
        ];
        let mut whole = SessionTools::default();
        steps.iter().for_each(|r| whole.push(r));
        let (mut a, mut b) = (SessionTools::default(), SessionTools::default());
        a.push(&steps[0]);
        b.push(&steps[1]);
        a.merge(&b);
        assert_eq!(a, whole);
    }
}

//! What each request asks: the prompt (cycled from a list, or a work item from a
//! dataset or the synthetic generator, possibly a multi-turn session with a shared
//! prefix) and the body built around it.

use crate::agent::{AgentSpec, Transcript};
use crate::agent_trace::Replay;
use crate::body::{BodySpec, Message};
use bytes::Bytes;
use http::{HeaderMap, Request, Uri};
use http_body_util::Full;
use std::collections::HashMap;
use std::sync::Arc;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

/// What every dispatch of a run is.
#[derive(Debug, Clone, Default)]
pub enum SessionKind {
    /// One request, or the turns of a multi-turn work item.
    #[default]
    Plain,
    /// An agent session (`--agent`): tool-calling steps until a reply calls none.
    Agent(Arc<AgentSpec>),
    /// A recorded agent session replayed call by call (`--agent-trace`).
    Replay(Arc<Replay>),
}

/// The built-in prompt when the user gives none.
pub const DEFAULT_PROMPT: &str =
    "Write a short story about a lighthouse keeper who discovers that the light has been signalling to ships that do not exist.";

/// Makes the HTTP request for request number `index`.
#[derive(Debug, Clone)]
pub struct RequestFactory {
    /// The URL every request goes to.
    pub endpoint: Uri,
    /// The headers every request carries (credentials, `-H`).
    pub headers: HeaderMap,
    /// What every body carries: dialect, model, output limit, extra fields.
    pub body: BodySpec,
    /// Prompts, used in turn.
    pub prompts: Vec<String>,
    /// Per-prompt output length overriding `body.max_tokens` (a trace's lengths);
    /// empty, or as long as `prompts`.
    pub max_tokens: Vec<Option<u32>>,
    /// Work items (datasets, synthetic prompts, sessions); when non-empty they are
    /// used, in turn, instead of `prompts`.
    pub items: Vec<WorkItem>,
    /// Shared prefixes: dispatch `k` starts its first prompt with `prefixes[k % G]`.
    pub prefixes: Vec<String>,
    /// Pause between a session's reply and its next turn.
    pub think_time: Duration,
    /// Bodies of listed prompts already built (see [`BodyCache`]).
    pub bodies: BodyCache,
    /// What every dispatch is: a plain request or session, an agent session of
    /// tool-calling steps, or recorded session `k` replayed.
    pub session: SessionKind,
}

/// The most bytes of prompts and bodies [`BodyCache`] keeps.
const BODY_CACHE_BYTES: usize = 16 << 20;

/// Request bodies of listed prompts, each built once: a listed prompt (with its prefix
/// group and output length) sends the same bytes every time, and building its JSON was
/// most of the work of making a request (~13,000 instructions, a few hundred a chunk).
/// A hit is checked against the prompt's text and length, so a factory whose prompts
/// change still sends what they say; the body's other fields ([`BodySpec`]) are fixed
/// for a factory's life. Past [`BODY_CACHE_BYTES`] further bodies are built per request.
#[derive(Debug, Default)]
pub struct BodyCache(Mutex<BodyCacheInner>);

/// A listed prompt's index and its prefix group.
type BodyKey = (usize, Option<u32>);

#[derive(Debug, Default)]
struct BodyCacheInner {
    /// By (prompt index, prefix group): the text and output length the body was built
    /// for, and the body.
    map: HashMap<BodyKey, (String, Option<u32>, Bytes)>,
    bytes: usize,
}

impl Clone for BodyCache {
    /// A copy starts empty: it builds its own bodies.
    fn clone(&self) -> Self {
        BodyCache::default()
    }
}

impl BodyCache {
    /// The body for `text` at `key`, built by `build` unless kept from before.
    fn get_or_build(
        &self,
        key: BodyKey,
        text: &str,
        max_tokens: Option<u32>,
        build: impl FnOnce() -> Bytes,
    ) -> Bytes {
        let lock = || self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((t, n, body)) = lock().map.get(&key) {
            if t == text && *n == max_tokens {
                return body.clone();
            }
        }
        let body = build();
        let mut cache = lock();
        let size = text.len() + body.len();
        if cache.bytes + size <= BODY_CACHE_BYTES {
            cache.bytes += size;
            if let Some((t, _, old)) = cache
                .map
                .insert(key, (text.to_owned(), max_tokens, body.clone()))
            {
                cache.bytes -= t.len() + old.len();
            }
        }
        body
    }
}

/// One user turn and its output length (`None`: the run's `max_tokens`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnSpec {
    /// The user message the turn sends.
    pub user: String,
    /// The turn's output length, when the item gives one.
    pub max_tokens: Option<u32>,
}

/// What one dispatch sends: messages that come first (a system prompt), then one
/// request per turn, each carrying the turns and live replies before it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkItem {
    /// The item's name, written as each of its requests' prompt id.
    pub id: String,
    /// The messages sent before the first turn (a system prompt, an earlier exchange).
    pub history: Vec<Message>,
    /// The turns, one request each, in order.
    pub turns: Vec<TurnSpec>,
}

/// A request ready to send, with what the record should say about it.
#[derive(Debug)]
pub struct BuiltTurn {
    /// The HTTP request: the endpoint, the headers and the body.
    pub request: Request<Full<Bytes>>,
    /// Which prompt or work item it sends, for the record.
    pub prompt_id: String,
    /// The shared prefix group its prompt starts with, if any.
    pub prefix_group: Option<u32>,
    /// The prompt text sent: one entry per message (history, turns and replies), or
    /// the one prompt. Empty when `--extra-body` replaces the prompt or messages, so
    /// the workload does not know what was sent.
    pub prompt_parts: Vec<String>,
    /// The output length the body demands in full (`BodySpec::expected_output`).
    pub expected_output_tokens: Option<u64>,
    /// The `max_tokens` the body sends (`BodySpec::max_tokens_sent`): how many chunks
    /// the stream may carry, a hint for making room for them.
    pub max_tokens: Option<u64>,
}

impl RequestFactory {
    /// A factory that cycles over `prompts` with the body's `max_tokens`.
    pub fn new(endpoint: Uri, headers: HeaderMap, body: BodySpec, prompts: Vec<String>) -> Self {
        RequestFactory {
            endpoint,
            headers,
            body,
            prompts,
            max_tokens: Vec::new(),
            items: Vec::new(),
            prefixes: Vec::new(),
            think_time: Duration::ZERO,
            bodies: BodyCache::default(),
            session: SessionKind::Plain,
        }
    }

    /// Turns that dispatch number `k` sends (1 unless the workload has sessions); an
    /// agent session's step cap.
    pub fn turns(&self, k: u64) -> usize {
        match &self.session {
            SessionKind::Replay(r) => r.calls(k),
            SessionKind::Agent(a) => a.max_steps.max(1) as usize,
            SessionKind::Plain => self.item(k).map_or(1, |it| it.turns.len().max(1)),
        }
    }

    /// Requests (turns) that dispatches `0..dispatches` send in all: what a progress
    /// bar counts to. Sessions cycle over the items, so whole cycles are multiplied.
    pub fn total_turns(&self, dispatches: u64) -> u64 {
        match &self.session {
            SessionKind::Replay(r) => {
                let len = r.sessions.len().max(1) as u64;
                let calls = |n: u64| (0..n).map(|k| r.calls(k) as u64).sum::<u64>();
                return (dispatches / len).saturating_mul(calls(len)) + calls(dispatches % len);
            }
            SessionKind::Agent(a) => {
                return dispatches.saturating_mul(u64::from(a.max_steps.max(1)));
            }
            SessionKind::Plain => {}
        }
        if self.items.is_empty() {
            return dispatches;
        }
        let len = self.items.len() as u64;
        let per = |it: &WorkItem| it.turns.len().max(1) as u64;
        let cycle: u64 = self.items.iter().map(per).sum();
        let rest: u64 = self.items[..(dispatches % len) as usize]
            .iter()
            .map(per)
            .sum();
        (dispatches / len) * cycle + rest
    }

    fn item(&self, k: u64) -> Option<&WorkItem> {
        (!self.items.is_empty()).then(|| &self.items[(k % self.items.len() as u64) as usize])
    }

    fn prefix(&self, k: u64) -> Option<(u32, &str)> {
        (!self.prefixes.is_empty()).then(|| {
            let g = (k % self.prefixes.len() as u64) as usize;
            (g as u32, self.prefixes[g].as_str())
        })
    }

    /// Turn `turn` of dispatch `k`, after the server's `replies` to the turns before it.
    pub fn build_turn(&self, k: u64, turn: usize, replies: &[String]) -> BuiltTurn {
        let prefix = self.prefix(k);
        let join = |user: &str| match prefix {
            // Synthetic bodies after a prefix start with their own space.
            Some((_, p)) if user.starts_with(char::is_whitespace) => format!("{p}{user}"),
            Some((_, p)) => format!("{p} {user}"),
            None => user.to_owned(),
        };
        let known = |parts: Vec<String>| {
            let replaced = self
                .body
                .extra
                .as_ref()
                .is_some_and(|e| e.contains_key("prompt") || e.contains_key("messages"));
            if replaced {
                Vec::new()
            } else {
                parts
            }
        };
        let Some(item) = self.item(k) else {
            let (pid, prompt, max_tokens) = self.listed(k);
            let text = join(prompt);
            let body =
                self.bodies
                    .get_or_build((pid, prefix.map(|(g, _)| g)), &text, max_tokens, || {
                        self.body.body_with(&text, max_tokens)
                    });
            return BuiltTurn {
                request: self.request(body),
                prompt_id: pid.to_string(),
                prefix_group: prefix.map(|(g, _)| g),
                prompt_parts: known(vec![text]),
                expected_output_tokens: self.body.expected_output(max_tokens),
                max_tokens: self.body.max_tokens_sent(max_tokens),
            };
        };
        let turn = turn.min(item.turns.len().saturating_sub(1));
        let mut messages = item.history.clone();
        for (i, t) in item.turns.iter().enumerate().take(turn + 1) {
            let user = if i == 0 {
                join(&t.user)
            } else {
                t.user.clone()
            };
            messages.push(Message {
                role: "user".into(),
                content: user,
            });
            if i < turn {
                messages.push(Message {
                    role: "assistant".into(),
                    content: replies.get(i).cloned().unwrap_or_default(),
                });
            }
        }
        let max_tokens = item.turns[turn].max_tokens.or(self.body.max_tokens);
        BuiltTurn {
            request: self.request(self.body.body_messages(&messages, max_tokens)),
            prompt_id: item.id.clone(),
            prefix_group: prefix.map(|(g, _)| g),
            prompt_parts: known(messages.into_iter().map(|m| m.content).collect()),
            expected_output_tokens: self.body.expected_output(max_tokens),
            max_tokens: self.body.max_tokens_sent(max_tokens),
        }
    }

    /// The start of agent session `k`: the work item's history and first prompt (or the
    /// listed prompt), after its shared prefix, and that prompt's output length.
    pub fn agent_transcript(&self, k: u64) -> (Transcript, Option<u32>) {
        let prefix = self.prefix(k).map(|(_, p)| p);
        let join = |user: &str| match prefix {
            Some(p) if user.starts_with(char::is_whitespace) => format!("{p}{user}"),
            Some(p) => format!("{p} {user}"),
            None => user.to_owned(),
        };
        match self.item(k).filter(|it| !it.turns.is_empty()) {
            Some(item) => {
                let first = &item.turns[0];
                let t = Transcript::new(self.body.api, &item.history, join(&first.user));
                (t, first.max_tokens.or(self.body.max_tokens))
            }
            None => {
                let (_, prompt, max_tokens) = self.listed(k);
                (
                    Transcript::new(self.body.api, &[], join(prompt)),
                    max_tokens,
                )
            }
        }
    }

    /// One step of agent session `k`: the transcript so far, the tools, and (when
    /// every step must call one) the tool choice.
    pub fn build_agent_step(
        &self,
        k: u64,
        agent: &AgentSpec,
        t: &Transcript,
        max_tokens: Option<u32>,
    ) -> BuiltTurn {
        let api = self.body.api;
        let body = self.body.body_agent(
            t.system.as_deref(),
            &t.items,
            agent.tools_json(api),
            agent.tool_choice(api),
            max_tokens,
        );
        BuiltTurn {
            request: self.request(body),
            prompt_id: self
                .item(k)
                .map_or_else(|| self.listed(k).0.to_string(), |it| it.id.clone()),
            prefix_group: self.prefix(k).map(|(g, _)| g),
            prompt_parts: t.parts.clone(),
            expected_output_tokens: self.body.expected_output(max_tokens),
            max_tokens: self.body.max_tokens_sent(max_tokens),
        }
    }

    /// The request and the id of the prompt it used.
    pub fn build(&self, index: u64) -> (Request<Full<Bytes>>, usize) {
        let (pid, prompt, max_tokens) = self.listed(index);
        (self.request(self.body.body_with(prompt, max_tokens)), pid)
    }

    /// The listed prompt request `index` uses (the built-in one when there are none):
    /// its id, its text and its output length (its own, else the run's).
    fn listed(&self, index: u64) -> (usize, &str, Option<u32>) {
        let pid = (index % self.prompts.len().max(1) as u64) as usize;
        let prompt = self.prompts.get(pid).map_or(DEFAULT_PROMPT, String::as_str);
        let max_tokens = self
            .max_tokens
            .get(pid)
            .copied()
            .flatten()
            .or(self.body.max_tokens);
        (pid, prompt, max_tokens)
    }

    /// A POST of `body` to the endpoint with the run's headers.
    fn request(&self, body: Bytes) -> Request<Full<Bytes>> {
        let mut req = Request::post(self.endpoint.clone())
            .body(Full::new(body))
            .expect("method, URI and body are valid");
        *req.headers_mut() = self.headers.clone();
        req
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_wire::Api;

    fn factory(max_tokens: Vec<Option<u32>>) -> RequestFactory {
        RequestFactory {
            endpoint: "http://127.0.0.1:1/v1/completions".parse().unwrap(),
            headers: HeaderMap::new(),
            body: BodySpec {
                api: Api::Completions,
                model: "m".into(),
                max_tokens: Some(16),
                extra: None,
                path: String::new(),
            },
            prompts: vec!["a".into(), "b".into()],
            max_tokens,
            items: Vec::new(),
            prefixes: Vec::new(),
            think_time: Duration::ZERO,
            bodies: BodyCache::default(),
            session: SessionKind::Plain,
        }
    }

    fn body(req: Request<Full<Bytes>>) -> serde_json::Value {
        use http_body_util::BodyExt;
        let bytes = futures_util::FutureExt::now_or_never(req.into_body().collect())
            .expect("a full body is ready")
            .unwrap()
            .to_bytes();
        serde_json::from_slice(&bytes).unwrap()
    }

    #[test]
    fn prompts_cycle_and_per_prompt_lengths_override() {
        let f = factory(vec![Some(3), None]);
        let (r0, p0) = f.build(0);
        let (r1, p1) = f.build(1);
        let (_, p2) = f.build(2);
        assert_eq!((p0, p1, p2), (0, 1, 0));
        let (b0, b1) = (body(r0), body(r1));
        assert_eq!(
            (b0["prompt"].as_str(), b0["max_tokens"].as_u64()),
            (Some("a"), Some(3))
        );
        assert_eq!(
            (b1["prompt"].as_str(), b1["max_tokens"].as_u64()),
            (Some("b"), Some(16))
        );
        // A built turn says what it sent, for the tracker to make room for.
        let t0 = f.build_turn(0, 0, &[]);
        let t1 = f.build_turn(1, 0, &[]);
        assert_eq!(
            (t0.max_tokens, body(t0.request)["max_tokens"].as_u64()),
            (Some(3), Some(3))
        );
        assert_eq!(
            (t1.max_tokens, body(t1.request)["max_tokens"].as_u64()),
            (Some(16), Some(16))
        );
    }

    fn body_bytes(req: Request<Full<Bytes>>) -> Bytes {
        use http_body_util::BodyExt;
        futures_util::FutureExt::now_or_never(req.into_body().collect())
            .expect("a full body is ready")
            .unwrap()
            .to_bytes()
    }

    #[test]
    fn a_listed_prompt_is_built_once_and_built_again_when_it_changes() {
        let mut f = factory(vec![Some(3), None]);
        f.prefixes = vec!["p0".into(), "p1".into(), "p2".into()];
        // Dispatches 0..12 cover each (prompt, prefix group) pair twice.
        for k in 0..12 {
            let built = f.build_turn(k, 0, &[]);
            let (pid, prompt, max_tokens) = f.listed(k);
            let text = format!("p{} {prompt}", k % 3);
            assert_eq!(
                body_bytes(built.request),
                f.body.body_with(&text, max_tokens),
                "dispatch {k} (prompt {pid})"
            );
        }
        let kept = |f: &RequestFactory| f.bodies.0.lock().unwrap().map.len();
        assert_eq!(kept(&f), 6, "one body per prompt and prefix group");
        // A prompt that changes is sent as it now reads, and replaces its old body.
        f.prompts[0] = "changed".into();
        f.max_tokens[0] = Some(9);
        let built = f.build_turn(0, 0, &[]);
        assert_eq!(
            body_bytes(built.request),
            f.body.body_with("p0 changed", Some(9))
        );
        assert_eq!(kept(&f), 6);
        // A copy of the factory starts with no bodies.
        assert_eq!(kept(&f.clone()), 0);
    }

    #[test]
    fn the_body_cache_stops_keeping_at_its_bound() {
        let cache = BodyCache::default();
        let big = Bytes::from(vec![b'x'; BODY_CACHE_BYTES / 2]);
        let mut built = 0;
        for pid in 0..4 {
            let body = cache.get_or_build((pid, None), "t", None, || {
                built += 1;
                big.clone()
            });
            assert_eq!(body.len(), big.len());
        }
        // Only the first fits (each is half the bound plus its text); the rest are
        // built every time.
        assert_eq!(cache.0.lock().unwrap().map.len(), 1);
        assert!(cache.0.lock().unwrap().bytes <= BODY_CACHE_BYTES);
        cache.get_or_build((0, None), "t", None, || unreachable!("kept"));
        cache.get_or_build((3, None), "t", None, || {
            built += 1;
            big.clone()
        });
        assert_eq!(built, 5);
    }

    fn item(turns: usize) -> WorkItem {
        WorkItem {
            id: format!("s{turns}"),
            history: Vec::new(),
            turns: (0..turns)
                .map(|t| TurnSpec {
                    user: format!("turn {t}"),
                    max_tokens: None,
                })
                .collect(),
        }
    }

    #[test]
    fn total_turns_counts_every_turn_of_every_session() {
        let mut f = factory(Vec::new());
        assert_eq!(f.total_turns(7), 7, "no sessions: one request per dispatch");
        // --turns 3 (synthetic): every item has 3 turns.
        f.items = (0..4).map(|_| item(3)).collect();
        assert_eq!(f.total_turns(10), 30);
        assert_eq!(f.total_turns(0), 0);
        // A dataset's sessions of 1, 4 and 2 turns, cycled: 10 dispatches are three
        // whole cycles (3 × 7) and the first item again (1).
        f.items = vec![item(1), item(4), item(2)];
        assert_eq!(f.total_turns(10), 22);
        assert_eq!(f.total_turns(2), 5);
        assert_eq!(
            f.total_turns(5),
            (0..5).map(|k| f.turns(k) as u64).sum::<u64>(),
            "the dispatch loop's own count"
        );
        // An item without turns still sends one request.
        f.items = vec![item(0), item(2)];
        assert_eq!(f.total_turns(3), 4);
    }
}

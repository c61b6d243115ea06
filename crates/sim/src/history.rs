//! What the engine's prefix cache sees of a request: its messages as a chain of
//! hashes, one per message boundary, with the prompt tokens up to each. A later
//! step of a session (chat turns, agent steps) repeats the earlier prompt and the
//! sim's reply before its new turn, so its chain starts with the earlier one's and
//! the engine skips the prefill of the part already computed, as vLLM's automatic
//! prefix caching does.
//!
//! Messages hash by what they say, not how they are spelled: the role (tool
//! results as `tool`, Responses `function_call` items as `assistant`), the words
//! of their text, and per tool call its name and the words of its arguments'
//! string values. Ids, JSON layout and `content: null` against `""` do not count,
//! so a reply sent back by a client hashes as the sim's own record of it.

use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Mutex;

use serde_json::{json, Value};

use crate::openai::Dialect;
use crate::tools::{content_words, tool_words, CallPlan};

/// One message boundary: the hash of the messages so far and their prompt tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Boundary {
    /// The running hash of the messages up to the boundary.
    pub hash: u64,
    /// Their prompt tokens.
    pub tokens: u32,
}

/// Two running hashes of one message: its text words, and its tool calls (each a
/// name and its arguments' words), fed word by word without copying.
#[derive(Default)]
struct Acc {
    text: DefaultHasher,
    calls: DefaultHasher,
}

fn words(h: &mut DefaultHasher, s: &str) {
    for w in s.split_whitespace() {
        h.write(w.as_bytes());
        h.write_u8(0xff);
    }
}

/// The words of a JSON value's strings (a call's arguments or input).
fn value_words(h: &mut DefaultHasher, v: &Value) {
    match v {
        Value::String(s) => words(h, s),
        Value::Array(a) => a.iter().for_each(|x| value_words(h, x)),
        Value::Object(o) => o.values().for_each(|x| value_words(h, x)),
        _ => {}
    }
}

impl Acc {
    fn call(&mut self, name: &str, args: impl FnOnce(&mut DefaultHasher)) {
        self.calls.write_u8(0xfe);
        self.calls.write(name.as_bytes());
        self.calls.write_u8(0xfe);
        args(&mut self.calls);
    }

    /// An `arguments` string: its values' words (or the raw text's).
    fn arguments(&mut self, name: &str, arguments: &str) {
        self.call(name, |h| match serde_json::from_str::<Value>(arguments) {
            Ok(v) => value_words(h, &v),
            Err(_) => words(h, arguments),
        });
    }

    /// A content value: strings and parts' `text`, Anthropic `tool_result`
    /// content; `tool_use` blocks are calls, not text.
    fn content(&mut self, v: &Value) {
        match v {
            Value::String(s) => words(&mut self.text, s),
            Value::Array(parts) => {
                for p in parts {
                    match p.get("type").and_then(Value::as_str) {
                        Some("tool_use") => self.call(str_at(p, "name"), |h| {
                            if let Some(input) = p.get("input") {
                                value_words(h, input);
                            }
                        }),
                        Some("tool_result") => {
                            if let Some(c) = p.get("content") {
                                self.content(c);
                            }
                        }
                        _ if p.is_string() => self.content(p),
                        _ => {
                            if let Some(t) = p.get("text") {
                                self.content(t);
                            }
                        }
                    }
                }
            }
            _ => {}
        }
    }
}

fn str_at<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

/// Extends `prev` by one message (or Responses input item).
pub fn extend(prev: u64, m: &Value) -> u64 {
    let mut acc = Acc::default();
    let kind = str_at(m, "type");
    let role = match kind {
        "function_call" => "assistant",
        "function_call_output" => "tool",
        _ => m.get("role").and_then(Value::as_str).unwrap_or("user"),
    };
    if let Some(c) = m.get("content") {
        acc.content(c);
    }
    match kind {
        "function_call_output" => {
            if let Some(o) = m.get("output") {
                acc.content(o);
            }
        }
        "function_call" => acc.arguments(str_at(m, "name"), str_at(m, "arguments")),
        _ => {}
    }
    for c in m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let name = c.pointer("/function/name").and_then(Value::as_str);
        let args = c.pointer("/function/arguments").and_then(Value::as_str);
        acc.arguments(name.unwrap_or(""), args.unwrap_or(""));
    }
    let mut h = DefaultHasher::new();
    prev.hash(&mut h);
    role.hash(&mut h);
    acc.text.finish().hash(&mut h);
    acc.calls.finish().hash(&mut h);
    h.finish()
}

/// The boundaries of a request's messages, in order (the chain starts from the
/// dialect, so dialects never share entries).
pub fn boundaries(dialect: Dialect, messages: &[Value]) -> Vec<Boundary> {
    let mut hash = dialect as u64;
    let mut tokens = 0u32;
    messages
        .iter()
        .map(|m| {
            hash = extend(hash, m);
            tokens = tokens.saturating_add(crate::request::message_tokens(m));
            Boundary { hash, tokens }
        })
        .collect()
}

/// The reply as the client sends it back in the next step's history, in the
/// dialect's shape: one assistant message (chat, Anthropic), or one item per call
/// (Responses).
pub fn reply_messages(
    dialect: Dialect,
    text: &str,
    calls: Option<(&CallPlan, &[String])>,
) -> Vec<Value> {
    match (dialect, calls) {
        (Dialect::Responses, Some((plan, args))) => plan
            .calls
            .iter()
            .zip(args)
            .map(|(c, a)| {
                json!({"type": "function_call", "call_id": c.id, "name": c.name,
                "arguments": a})
            })
            .collect(),
        (Dialect::Responses, None) => vec![json!({"type": "message", "role": "assistant",
            "content": [{"type": "output_text", "text": text}]})],
        (Dialect::Anthropic, Some((plan, args))) => vec![json!({"role": "assistant",
            "content": plan.calls.iter().zip(args).map(|(c, a)| json!({"type": "tool_use",
                "id": c.id, "name": c.name,
                "input": serde_json::from_str::<Value>(a).unwrap_or_default()}))
            .collect::<Vec<_>>()})],
        (_, Some((plan, args))) => vec![json!({"role": "assistant", "content": null,
            "tool_calls": plan.calls.iter().zip(args).map(|(c, a)| json!({"id": c.id,
                "type": "function", "function": {"name": c.name, "arguments": a}}))
            .collect::<Vec<_>>()})],
        _ => vec![json!({"role": "assistant", "content": text})],
    }
}

/// Word count of the reply messages (what the next step's prompt counts for them).
pub fn reply_tokens(messages: &[Value]) -> u32 {
    messages
        .iter()
        .map(|m| {
            m.get("content")
                .map_or(0, content_words)
                .saturating_add(tool_words(m))
        })
        .sum()
}

/// Chains the sim has seen (prompts and the replies it gave), so a request finds
/// how much of its history an earlier request already had. Bounded like the
/// engine's prefix cache, whose KV capacity could not hold more: at most
/// `capacity` boundaries (each marks at least one more cached position) in two
/// generations; when the newer holds half, the older is forgotten, so what was
/// used least recently goes first (a boundary found in the older moves up).
#[derive(Debug)]
pub struct SeenChains {
    /// Boundaries per generation: half the capacity.
    half: usize,
    seen: Mutex<Generations>,
}

#[derive(Debug, Default)]
struct Generations {
    newer: HashSet<u64>,
    older: HashSet<u64>,
}

impl Generations {
    fn contains(&self, hash: u64) -> bool {
        self.newer.contains(&hash) || self.older.contains(&hash)
    }

    fn insert(&mut self, hash: u64, half: usize) {
        if self.newer.len() >= half && !self.newer.contains(&hash) {
            std::mem::swap(&mut self.newer, &mut self.older);
            self.newer.clear();
        }
        self.newer.insert(hash);
    }
}

/// The most boundaries remembered, whatever the engine's KV capacity.
pub const SEEN_CAPACITY: usize = 1 << 20;
/// The fewest, so a tiny KV cache still finds a session's last steps.
const SEEN_MIN: usize = 1 << 10;

impl Default for SeenChains {
    fn default() -> Self {
        SeenChains::with_capacity(SEEN_CAPACITY as u64)
    }
}

impl SeenChains {
    /// Remembers about `boundaries` boundaries (the engine's KV capacity in
    /// tokens), within 1,024 and [`SEEN_CAPACITY`].
    pub fn with_capacity(boundaries: u64) -> SeenChains {
        let capacity = boundaries.clamp(SEEN_MIN as u64, SEEN_CAPACITY as u64) as usize;
        SeenChains {
            half: capacity / 2,
            seen: Mutex::default(),
        }
    }

    /// Boundaries remembered now: at most the capacity.
    pub fn len(&self) -> usize {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.newer.len() + seen.older.len()
    }

    /// Whether no boundary is remembered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The cached prefix of a request with these boundaries: the key of its chain
    /// (its first message) and the tokens up to the last boundary seen before; then
    /// remembers its boundaries and those of its reply (`reply`: messages in the
    /// dialect's shape, see [`reply_messages`]). `None` for a request without
    /// messages.
    pub fn prefix(
        &self,
        dialect: Dialect,
        request: &[Boundary],
        reply: &[Value],
    ) -> Option<cadence_engine::Prefix> {
        let first = request.first()?;
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let tokens = request
            .iter()
            .rev()
            .find(|b| seen.contains(b.hash))
            .map_or(0, |b| b.tokens);
        for b in request {
            seen.insert(b.hash, self.half);
        }
        let mut hash = request.last().map_or(dialect as u64, |b| b.hash);
        for m in reply {
            hash = extend(hash, m);
            seen.insert(hash, self.half);
        }
        Some(cadence_engine::Prefix {
            key: first.hash,
            tokens,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reply_sent_back_hashes_as_the_sims_record_of_it() {
        let user = json!({"role": "user", "content": "fix the bug"});
        let sent = json!({"role": "assistant", "content": "", "tool_calls": [{"id": "c1",
            "type": "function", "function": {"name": "grep",
            "arguments": "{\"pattern\":\" the fox\"}"}}]});
        let plan = CallPlan {
            calls: vec![crate::tools::Call {
                id: "c1".into(),
                item_id: "fc_1".into(),
                name: "grep".into(),
                fields: vec!["pattern".into()],
                tokens: 2,
            }],
        };
        let args = vec!["{\"pattern\": \" the fox\"}".to_owned()];
        let own = reply_messages(Dialect::Chat, "", Some((&plan, &args)));
        let h = extend(0, &user);
        assert_eq!(extend(h, &sent), extend(h, &own[0]));
        assert_eq!(reply_tokens(&own), 2);
        let other = json!({"role": "assistant", "content": "the fox"});
        assert_ne!(extend(h, &other), extend(h, &own[0]));
    }

    #[test]
    fn a_later_step_finds_the_earlier_prompt_and_reply() {
        let seen = SeenChains::default();
        let step1 = vec![json!({"role": "user", "content": "one two three"})];
        let b1 = boundaries(Dialect::Chat, &step1);
        let reply = reply_messages(Dialect::Chat, " four five", None);
        assert_eq!(seen.prefix(Dialect::Chat, &b1, &reply).unwrap().tokens, 0);
        let mut step2 = step1.clone();
        step2.push(json!({"role": "assistant", "content": "four  five"}));
        step2.push(json!({"role": "user", "content": "six"}));
        let b2 = boundaries(Dialect::Chat, &step2);
        let p = seen.prefix(Dialect::Chat, &b2, &[]).unwrap();
        assert_eq!(p.tokens, 5, "the first prompt and its reply");
        assert_eq!(p.key, b1[0].hash);
        // Another session's first message is another chain.
        let cold = boundaries(Dialect::Chat, &[json!({"role": "user", "content": "x y"})]);
        assert_eq!(seen.prefix(Dialect::Chat, &cold, &[]).unwrap().tokens, 0);
    }

    #[test]
    fn fresh_prompts_leave_at_most_the_capacity_behind_and_recent_sessions_hit() {
        let seen = SeenChains::with_capacity(4_096);
        let step = |i: u64| vec![json!({"role": "user", "content": format!("task {i}")})];
        let reply = reply_messages(Dialect::Chat, "done", None);
        for i in 0..50_000u64 {
            let b = boundaries(Dialect::Chat, &step(i));
            assert_eq!(seen.prefix(Dialect::Chat, &b, &reply).unwrap().tokens, 0);
            assert!(
                seen.len() <= 4_096,
                "request {i}: {} boundaries",
                seen.len()
            );
        }
        // The last session's next step finds its first prompt and the reply.
        let mut next = step(49_999);
        next.push(json!({"role": "assistant", "content": "done"}));
        next.push(json!({"role": "user", "content": "more"}));
        let b = boundaries(Dialect::Chat, &next);
        assert_eq!(
            seen.prefix(Dialect::Chat, &b, &[]).unwrap().tokens,
            b[1].tokens
        );
        // One seen long ago, and not since, is forgotten.
        let mut old = step(0);
        old.push(json!({"role": "assistant", "content": "done"}));
        let b = boundaries(Dialect::Chat, &old);
        assert_eq!(seen.prefix(Dialect::Chat, &b, &[]).unwrap().tokens, 0);
    }

    #[test]
    fn a_boundary_used_again_survives_the_older_generation() {
        let seen = SeenChains::with_capacity(1_024);
        let one = |s: &str| boundaries(Dialect::Chat, &[json!({"role": "user", "content": s})]);
        let kept = one("kept across generations");
        seen.prefix(Dialect::Chat, &kept, &[]);
        for i in 0..2_000 {
            seen.prefix(Dialect::Chat, &one(&format!("filler {i}")), &[]);
            if i % 256 == 0 {
                let p = seen.prefix(Dialect::Chat, &kept, &[]).unwrap();
                assert_eq!(p.tokens, kept[0].tokens, "filler {i}");
            }
        }
    }
}

//! The replay of a recorded session: each call's prompt is the context the recording
//! reuses (with the live replies) and new text of exactly the tokens it adds.

use super::{Reuse, TraceCall, TraceSession};
use crate::agent::{AgentSpec, Transcript};
use crate::prompts::PromptGen;
use cadence_wire::{Api, ToolCall};
use rand::Rng;
use serde_json::Value;

/// What a replay run shares: the sessions, the tools every call declares and the
/// text the new parts are cut from.
#[derive(Debug)]
pub struct Replay {
    /// The recorded sessions, in arrival order; dispatch `k` replays `k` modulo their count.
    pub sessions: Vec<TraceSession>,
    /// The tools (declared on every call; `tool_choice` left to the model) and the
    /// generator of exact-length text (`results`).
    pub agent: AgentSpec,
}

impl Replay {
    /// The session dispatch `k` replays.
    pub fn session(&self, k: u64) -> Option<&TraceSession> {
        (!self.sessions.is_empty())
            .then(|| &self.sessions[(k % self.sessions.len() as u64) as usize])
    }

    /// Calls in session `k`.
    pub fn calls(&self, k: u64) -> usize {
        self.session(k).map_or(1, |s| s.calls.len().max(1))
    }
}

/// What a stretch of the transcript is.
#[derive(Debug, Clone, PartialEq)]
enum Part {
    /// A user message the replay wrote (its text is in `items[item]["content"]`).
    User { item: usize },
    /// The server's reply, with its tool calls.
    Reply { calls: Vec<ToolCall> },
    /// The results answering a reply's calls.
    Results,
}

/// A stretch of the transcript and where it ends.
#[derive(Debug, Clone)]
struct Seg {
    part: Part,
    items: usize,
    parts: usize,
    /// Context tokens up to the end of this stretch.
    tokens: u64,
}

/// One replayed session's context: the transcript sent, cut and grown call by call,
/// with the token count of each stretch.
#[derive(Debug)]
pub struct ReplayState {
    api: Api,
    transcript: Option<Transcript>,
    segs: Vec<Seg>,
}

impl ReplayState {
    /// An empty context for a session replayed over `api` (the dialect shapes its
    /// messages).
    pub fn new(api: Api) -> ReplayState {
        ReplayState {
            api,
            transcript: None,
            segs: Vec::new(),
        }
    }

    /// The context's tokens so far.
    pub fn tokens(&self) -> u64 {
        self.segs.last().map_or(0, |s| s.tokens)
    }

    /// The transcript the next call sends (after [`ReplayState::prepare`]).
    pub fn transcript(&self) -> &Transcript {
        self.transcript
            .as_ref()
            .expect("prepare() makes the transcript")
    }

    /// Makes `call`'s prompt: the context cut to the call's reuse, then new text of
    /// the tokens left (at least one). Returns the tokens reused.
    pub fn prepare(&mut self, call: &TraceCall, gen: &PromptGen, rng: &mut impl Rng) -> u64 {
        let input = u64::from(call.input_tokens);
        let mut cut_user = None;
        let kept = match call.reuse {
            _ if self.transcript.is_none() => 0,
            Reuse::Tokens(0) => 0,
            Reuse::Previous => self.tokens(),
            Reuse::Tokens(n) if n >= self.tokens() => self.tokens(),
            Reuse::Tokens(n) => {
                let (kept, cut) = self.cut(n, gen);
                cut_user = cut;
                kept
            }
        };
        if kept == 0 && cut_user.is_none() {
            self.transcript = None;
            self.segs.clear();
        }
        let new = input.saturating_sub(kept).max(1);
        let last_calls = match self.segs.last() {
            Some(Seg {
                part: Part::Reply { calls },
                ..
            }) if !calls.is_empty() && cut_user.is_none() => Some(calls.clone()),
            _ => None,
        };
        match (&mut self.transcript, last_calls, cut_user) {
            (None, _, _) => {
                let text = make_text(gen, new as usize, rng, false);
                self.transcript = Some(Transcript::new(self.api, &[], text));
                self.push_seg(Part::User { item: 0 }, new);
            }
            (Some(t), _, Some(item)) => {
                // The cut message goes on with the new text, as one message.
                let more = make_text(gen, new as usize, rng, true);
                if let Some(Value::String(s)) = t.items[item].get_mut("content") {
                    s.push_str(&more);
                    if let Some(p) = t.parts.last_mut() {
                        p.push_str(&more);
                    }
                }
                let seg = self.segs.last_mut().expect("the cut message's stretch");
                seg.tokens += new;
            }
            (Some(t), Some(calls), None) => {
                let k = calls.len() as u64;
                let results: Vec<String> = (0..k)
                    .map(|i| {
                        let n = new / k + u64::from(i < new % k);
                        make_text(gen, n as usize, rng, false)
                    })
                    .collect();
                t.push_results(&calls, &results);
                self.push_seg(Part::Results, new);
            }
            (Some(t), None, None) => {
                let item = t.items.len();
                t.push_user(&make_text(gen, new as usize, rng, false));
                self.push_seg(Part::User { item }, new);
            }
        }
        kept
    }

    /// The reply the server gave (`tokens` long, as it counted them), appended.
    pub fn push_reply(&mut self, text: &str, calls: &[ToolCall], tokens: u64) {
        if let Some(t) = &mut self.transcript {
            t.push_reply(text, calls);
            self.push_seg(
                Part::Reply {
                    calls: calls.to_vec(),
                },
                tokens,
            );
        }
    }

    fn push_seg(&mut self, part: Part, tokens: u64) {
        let t = self.transcript.as_ref().expect("a transcript to record");
        let seg = Seg {
            part,
            items: t.items.len(),
            parts: t.parts.len(),
            tokens: self.tokens() + tokens,
        };
        self.segs.push(seg);
    }

    /// Cuts the context to at most `n` tokens: whole stretches that fit, and when the
    /// next one is a user message, its first words up to `n` (the new text then goes
    /// on in that message). Returns the tokens kept and the cut message's item.
    fn cut(&mut self, n: u64, gen: &PromptGen) -> (u64, Option<usize>) {
        let whole = self.segs.iter().take_while(|s| s.tokens <= n).count();
        let before = if whole == 0 {
            0
        } else {
            self.segs[whole - 1].tokens
        };
        let next = self.segs.get(whole).cloned();
        let t = self.transcript.as_mut().expect("a context to cut");
        let (items, parts) = match whole {
            0 => (0, 0),
            w => (self.segs[w - 1].items, self.segs[w - 1].parts),
        };
        let mut cut = None;
        let mut kept = before;
        if let Some(Seg {
            part: Part::User { item },
            ..
        }) = next
        {
            let left = n - before;
            if left > 0 && item == items {
                if let Some(text) = t.items[item].get("content").and_then(Value::as_str) {
                    let head = head_within(text, left, gen);
                    let counted = gen.counter().count(&head) as u64;
                    if counted > 0 {
                        t.items.truncate(item + 1);
                        t.items[item]["content"] = Value::String(head.clone());
                        t.parts.truncate(parts + 1);
                        if let Some(p) = t.parts.last_mut() {
                            *p = head;
                        }
                        self.segs.truncate(whole);
                        self.segs.push(Seg {
                            part: Part::User { item },
                            items: item + 1,
                            parts: parts + 1,
                            tokens: before + counted,
                        });
                        kept += counted;
                        cut = Some(item);
                    }
                }
            }
        }
        if cut.is_none() {
            t.items.truncate(items);
            t.parts.truncate(parts);
            self.segs.truncate(whole);
        }
        (kept, cut)
    }
}

/// The most leading words of `text` that `gen`'s counter counts as at most `n` tokens
/// (found by bisection: a word is one token or more).
fn head_within(text: &str, n: u64, gen: &PromptGen) -> String {
    let fits = |m: usize| gen.counter().count(&first_words(text, m)) as u64 <= n;
    let (mut lo, mut hi) = (0usize, n as usize);
    if fits(hi) {
        return first_words(text, hi);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    first_words(text, lo)
}

/// The text up to the end of its `n`th whitespace-separated word.
fn first_words(text: &str, n: usize) -> String {
    if n == 0 {
        return String::new();
    }
    let mut seen = 0;
    let mut in_word = false;
    for (i, ch) in text.char_indices() {
        if ch.is_whitespace() {
            if in_word {
                seen += 1;
                if seen == n {
                    return text[..i].to_owned();
                }
            }
            in_word = false;
        } else {
            in_word = true;
        }
    }
    text.to_owned()
}

fn make_text(gen: &PromptGen, n: usize, rng: &mut impl Rng, continuation: bool) -> String {
    if n == 0 {
        return String::new();
    }
    gen.prompt(n, rng, continuation)
}

/// The tokens of a reply when the server did not count them: its text and its calls'
/// arguments, as `gen`'s counter counts them.
pub fn reply_tokens(gen: &PromptGen, text: &str, calls: &[ToolCall]) -> u64 {
    let c = gen.counter();
    (c.count(text) + calls.iter().map(|k| c.count(&k.arguments)).sum::<usize>()) as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent_trace::tests::call;
    use crate::prompts::Counter;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn replay_session(
        api: Api,
        calls: &[TraceCall],
        replies: &[(u64, usize)],
    ) -> Vec<(u64, Transcript)> {
        let gen = PromptGen::builtin(Counter::Words).unwrap();
        let mut rng = SmallRng::seed_from_u64(1);
        let mut st = ReplayState::new(api);
        let mut out = Vec::new();
        for (i, c) in calls.iter().enumerate() {
            let kept = st.prepare(c, &gen, &mut rng);
            let t = st.transcript().clone();
            assert_eq!(
                st.tokens(),
                u64::from(c.input_tokens),
                "call {i} sends its input"
            );
            let words: usize = t.parts.iter().map(|p| p.split_whitespace().count()).sum();
            assert_eq!(words as u64, u64::from(c.input_tokens), "call {i}'s text");
            out.push((kept, t));
            let (tokens, ncalls) = replies[i];
            let calls: Vec<ToolCall> = (0..ncalls)
                .map(|k| ToolCall {
                    id: format!("c{i}_{k}"),
                    name: "read_file".into(),
                    arguments: String::new(),
                })
                .collect();
            let text = vec!["w"; tokens as usize].join(" ");
            st.push_reply(&text, &calls, tokens);
        }
        out
    }

    #[test]
    fn prompts_are_the_reused_context_and_exactly_the_new_tokens() {
        let calls = [
            call(50, 5, Reuse::Tokens(0), 0),
            call(80, 5, Reuse::Previous, 0), // 50 + 5 reply + 25 results (2 calls)
            call(100, 5, Reuse::Previous, 0), // 80 + 5 + 15 user
            call(70, 5, Reuse::Tokens(30), 0), // the first message cut to 30 words + 40
            call(20, 5, Reuse::Tokens(0), 0),
        ];
        for api in [Api::Chat, Api::Responses, Api::Anthropic] {
            let out = replay_session(api, &calls, &[(5, 2), (5, 0), (5, 1), (5, 0), (5, 0)]);
            let kept: Vec<u64> = out.iter().map(|(k, _)| *k).collect();
            assert_eq!(kept, [0, 55, 85, 30, 0], "{api:?}");
            let t1 = &out[1].1;
            let results: Vec<&str> = t1.parts[4..].iter().map(String::as_str).collect();
            let lens: Vec<usize> = results
                .iter()
                .map(|r| r.split_whitespace().count())
                .collect();
            assert_eq!(lens, [13, 12], "{api:?}: 25 new tokens over two results");
            // The cut call starts with the first call's first 30 words, in one message.
            let first = &out[0].1.parts[0];
            let cut = &out[3].1.parts[0];
            let head: Vec<&str> = first.split_whitespace().take(30).collect();
            assert_eq!(cut.split_whitespace().take(30).collect::<Vec<_>>(), head);
            assert_eq!(out[3].1.items.len(), 1, "{api:?}");
            assert_eq!(out[4].1.items.len(), 1);
        }
        // Chat: the results answer the reply's call ids; the next turn is a user message.
        let out = replay_session(Api::Chat, &calls[..3], &[(5, 2), (5, 0), (5, 0)]);
        let items = &out[2].1.items;
        assert_eq!(items[2]["tool_call_id"], "c0_0");
        assert_eq!(items[3]["tool_call_id"], "c0_1");
        assert_eq!(items[4]["role"], "assistant");
        assert_eq!(items[5]["role"], "user");
    }

    #[test]
    fn with_a_tokenizer_every_prompt_has_exactly_the_recorded_tokens() {
        let tk = crate::tokenizer::train_bpe(crate::prompts::CORPUS, 600).unwrap();
        let gen = PromptGen::builtin(Counter::Tokenizer(tk.clone())).unwrap();
        assert!(gen.splits_at_spaces());
        let calls = [
            call(120, 9, Reuse::Tokens(0), 0),
            call(200, 9, Reuse::Previous, 0),
            call(260, 9, Reuse::Previous, 0),
            call(150, 9, Reuse::Tokens(77), 0),
            call(90, 9, Reuse::Tokens(0), 0),
            call(400, 9, Reuse::Tokens(300), 0),
        ];
        let mut rng = SmallRng::seed_from_u64(7);
        let mut st = ReplayState::new(Api::Chat);
        for (i, c) in calls.iter().enumerate() {
            let context = st.tokens();
            let kept = st.prepare(c, &gen, &mut rng);
            let sent: usize = st.transcript().parts.iter().map(|p| tk.count(p)).sum();
            assert_eq!(sent, c.input_tokens as usize, "call {i}");
            if let Reuse::Tokens(n) = c.reuse {
                // A cut keeps whole words: at most the reuse, and nearly all of it.
                let n = n.min(context);
                assert!(
                    kept <= n && kept * 10 >= n * 9,
                    "call {i}: kept {kept} of {n}"
                );
            }
            // The live reply, as long as the tokenizer counts it; every other one calls
            // a tool (its arguments are counted too).
            let reply = gen.prompt(9, &mut rng, false);
            let calls: Vec<ToolCall> = (0..i % 2)
                .map(|k| ToolCall {
                    id: format!("c{i}_{k}"),
                    name: "f".into(),
                    arguments: r#"{"path": "src/lib.rs"}"#.into(),
                })
                .collect();
            st.push_reply(&reply, &calls, reply_tokens(&gen, &reply, &calls));
        }
    }

    #[test]
    fn a_longer_live_reply_than_recorded_still_sends_new_text() {
        let calls = [
            call(10, 5, Reuse::Tokens(0), 0),
            call(20, 5, Reuse::Previous, 0),
        ];
        let gen = PromptGen::builtin(Counter::Words).unwrap();
        let mut rng = SmallRng::seed_from_u64(1);
        let mut st = ReplayState::new(Api::Chat);
        st.prepare(&calls[0], &gen, &mut rng);
        st.push_reply(&vec!["w"; 30].join(" "), &[], 30);
        assert_eq!(st.prepare(&calls[1], &gen, &mut rng), 40);
        assert_eq!(st.tokens(), 41, "the context, and one new token");
    }
}

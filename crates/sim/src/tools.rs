//! Tool calls, so agent clients have something to loop against: when a request
//! declares tools the sim decides (from `tool_choice` and a seeded probability)
//! whether this step calls some, streams each call's arguments one token per
//! fragment as vLLM does (chat `tool_calls` deltas, Anthropic `tool_use` blocks,
//! Responses `function_call` items), and refuses a history whose tool results
//! answer no tool call made earlier in it.

use std::collections::HashSet;

use rand::{Rng, RngCore};
use serde_json::{json, Value};

use crate::openai::{Dialect, Piece, Usage, Writer};
use crate::rng::SimRng;
use crate::text::{count_words, Vocabulary};

/// The generator stream of the tool decision (apart from timing and text).
const TOOL_STREAM: u64 = 0x7001;

pub use crate::config::DEFAULT_TOOL_CALL_PROBABILITY;

/// The argument field of a tool whose schema names no properties.
pub const DEFAULT_FIELD: &str = "query";

/// One declared tool: its name and the argument fields the sim fills.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tool {
    /// The function's name as declared.
    pub name: String,
    /// `parameters.properties` (`input_schema.properties`) names, else `query`.
    pub fields: Vec<String>,
}

/// What the request's `tool_choice` asks for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum ToolChoice {
    /// The model decides: the sim calls with the configured probability.
    #[default]
    Auto,
    /// `required` / `any`: always call.
    Required,
    /// Never call.
    None,
    /// Always call this tool.
    Named(String),
}

/// The tools a request declares and how it wants them used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Tools {
    /// The declared tools, in order.
    pub tools: Vec<Tool>,
    /// What `tool_choice` asks for (auto when absent).
    pub choice: ToolChoice,
    /// `parallel_tool_calls: false` (OpenAI) or `disable_parallel_tool_use`
    /// (Anthropic) caps a step at one call.
    pub parallel: bool,
}

fn fields(schema: Option<&Value>) -> Vec<String> {
    let names: Vec<String> = schema
        .and_then(|s| s.get("properties"))
        .and_then(Value::as_object)
        .map(|p| p.keys().cloned().collect())
        .unwrap_or_default();
    if names.is_empty() {
        vec![DEFAULT_FIELD.to_owned()]
    } else {
        names
    }
}

impl Tools {
    /// The tools of a request body (any of the three shapes) and its `tool_choice`;
    /// `None` when it declares none and does not ask for a call.
    pub fn parse(
        tools: Option<&Value>,
        choice: Option<&Value>,
        parallel: bool,
    ) -> Result<Option<Tools>, String> {
        let mut out = Vec::new();
        for t in tools.and_then(Value::as_array).into_iter().flatten() {
            let kind = t.get("type").and_then(Value::as_str);
            if !matches!(kind, None | Some("function" | "custom")) {
                // Built-in tools (web search and the like) are not the sim's to call.
                continue;
            }
            let f = t.get("function");
            let name = f
                .and_then(|f| f.get("name"))
                .or_else(|| t.get("name"))
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or("every declared tool needs a name")?;
            let schema = f
                .and_then(|f| f.get("parameters"))
                .or_else(|| t.get("parameters"))
                .or_else(|| t.get("input_schema"));
            out.push(Tool {
                name: name.to_owned(),
                fields: fields(schema),
            });
        }
        let choice = match choice {
            None | Some(Value::Null) => ToolChoice::Auto,
            Some(Value::String(s)) => match s.as_str() {
                "auto" => ToolChoice::Auto,
                "required" | "any" => ToolChoice::Required,
                "none" => ToolChoice::None,
                other => return Err(format!("unknown tool_choice `{other}`")),
            },
            Some(v) => {
                let kind = v.get("type").and_then(Value::as_str).unwrap_or("");
                let name = v
                    .pointer("/function/name")
                    .or_else(|| v.get("name"))
                    .and_then(Value::as_str);
                match (kind, name) {
                    ("auto", _) => ToolChoice::Auto,
                    ("any" | "required", _) => ToolChoice::Required,
                    ("none", _) => ToolChoice::None,
                    ("function" | "tool", Some(n)) => ToolChoice::Named(n.to_owned()),
                    _ => return Err(format!("tool_choice {v} names no tool")),
                }
            }
        };
        if let ToolChoice::Named(n) = &choice {
            if !out.iter().any(|t| &t.name == n) {
                return Err(format!(
                    "tool_choice names `{n}`, which is not among the tools"
                ));
            }
        }
        if out.is_empty() {
            return match choice {
                ToolChoice::Required | ToolChoice::Named(_) => {
                    Err("tool_choice asks for a tool call but the request declares no tools".into())
                }
                _ => Ok(None),
            };
        }
        Ok(Some(Tools {
            tools: out,
            choice,
            parallel,
        }))
    }
}

fn str_at<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

/// The ids of the tool calls a message (chat, Anthropic) or input item (Responses)
/// makes, and of the calls it answers.
fn calls_and_results(m: &Value) -> (Vec<&str>, Vec<Result<&str, &'static str>>) {
    let mut calls = Vec::new();
    let mut results = Vec::new();
    for c in m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        calls.extend(str_at(c, "id"));
    }
    match str_at(m, "type") {
        Some("function_call") => calls.extend(str_at(m, "call_id")),
        Some("function_call_output") => {
            results.push(str_at(m, "call_id").ok_or("a function_call_output needs a call_id"))
        }
        _ => {}
    }
    if str_at(m, "role") == Some("tool") {
        results.push(str_at(m, "tool_call_id").ok_or("a `tool` message needs a tool_call_id"));
    }
    for b in m
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        match str_at(b, "type") {
            Some("tool_use") => calls.extend(str_at(b, "id")),
            Some("tool_result") => {
                results.push(str_at(b, "tool_use_id").ok_or("a tool_result needs a tool_use_id"))
            }
            _ => {}
        }
    }
    (calls, results)
}

/// Checks the tool traffic of a history: every tool result answers a call made
/// earlier in the same request; in chat and Anthropic Messages the results come
/// in the turn right after the one that made the calls, one for each call.
/// `loose`: only the first rule (Responses, whose items may come in any order).
pub fn check_history(messages: &[Value], loose: bool) -> Result<(), String> {
    let mut made: HashSet<&str> = HashSet::new();
    // The calls of the latest assistant turn still waiting for their results.
    let mut open: Vec<&str> = Vec::new();
    for m in messages {
        let (calls, results) = calls_and_results(m);
        let is_tool = str_at(m, "role") == Some("tool");
        if !loose && !is_tool && results.is_empty() && !open.is_empty() {
            return Err(unanswered(&open));
        }
        for r in results {
            let id = r.map_err(str::to_owned)?;
            if !made.contains(id) {
                return Err(format!(
                    "the tool result for `{id}` matches no tool call made earlier in this request"
                ));
            }
            if !loose {
                let Some(i) = open.iter().position(|o| *o == id) else {
                    return Err(format!(
                        "the tool result for `{id}` must come right after the assistant turn \
                         that made the call"
                    ));
                };
                open.remove(i);
            }
        }
        if !loose && !is_tool && !open.is_empty() {
            return Err(unanswered(&open));
        }
        made.extend(calls.iter().copied());
        if !calls.is_empty() {
            open = calls;
        }
    }
    if !loose && !open.is_empty() {
        return Err(unanswered(&open));
    }
    Ok(())
}

fn unanswered(open: &[&str]) -> String {
    format!(
        "tool calls without a result after the turn that made them: {}",
        open.join(", ")
    )
}

/// Words in the string values of a JSON value (a tool call's arguments): the
/// tokens the sim generated for them, whatever the keys and punctuation.
pub fn value_words(v: &Value) -> u32 {
    match v {
        Value::String(s) => count_words(s),
        Value::Array(a) => a.iter().map(value_words).fold(0, u32::saturating_add),
        Value::Object(o) => o.values().map(value_words).fold(0, u32::saturating_add),
        _ => 0,
    }
}

/// The words of an `arguments` string: its JSON's string values, or the raw text.
pub fn argument_words(arguments: &str) -> u32 {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v) => value_words(&v),
        Err(_) => count_words(arguments),
    }
}

/// The tool-call words of a message or item: chat `tool_calls` arguments,
/// Anthropic `tool_use` input, Responses `function_call` arguments and
/// `function_call_output` output (text content is counted with the rest).
pub fn tool_words(m: &Value) -> u32 {
    let mut n = 0u32;
    for c in m
        .get("tool_calls")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        if let Some(a) = c.pointer("/function/arguments").and_then(Value::as_str) {
            n = n.saturating_add(argument_words(a));
        }
    }
    match str_at(m, "type") {
        Some("function_call") => {
            n = n.saturating_add(str_at(m, "arguments").map_or(0, argument_words))
        }
        Some("function_call_output") => {
            n = n.saturating_add(m.get("output").map_or(0, content_words))
        }
        _ => {}
    }
    n
}

/// Words of a content value: a string, or parts with `text`, or Anthropic
/// `tool_use` (its input) and `tool_result` (its content) blocks.
pub fn content_words(v: &Value) -> u32 {
    match v {
        Value::String(s) => count_words(s),
        Value::Array(parts) => parts
            .iter()
            .map(|p| match p {
                Value::Number(_) => 1,
                Value::Object(o) => match o.get("type").and_then(Value::as_str) {
                    Some("tool_use") => o.get("input").map_or(0, value_words),
                    Some("tool_result") => o.get("content").map_or(0, content_words),
                    _ => o.get("text").map_or(0, content_words),
                },
                other => content_words(other),
            })
            .fold(0u32, u32::saturating_add),
        _ => 0,
    }
}

/// One call the sim will make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Call {
    /// `call_…` (chat, Responses `call_id`) or `toolu_…` (Anthropic).
    pub id: String,
    /// The Responses item id, `fc_…`.
    pub item_id: String,
    /// The function called.
    pub name: String,
    /// The fields its arguments fill (at most one per token).
    pub fields: Vec<String>,
    /// Argument tokens.
    pub tokens: u32,
}

/// The calls of one reply; their tokens add up to the reply's length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CallPlan {
    /// The calls in the reply's order.
    pub calls: Vec<Call>,
}

/// How the sim uses tools (from its config).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ToolPolicy {
    /// Under `tool_choice` auto: the chance a step calls tools.
    pub probability: f64,
    /// Calls per tool step (when the request allows parallel calls).
    pub parallel: u32,
}

impl ToolPolicy {
    /// The sim config's tool-call probability and calls per tool step.
    pub fn of(config: &crate::config::SimConfig) -> ToolPolicy {
        ToolPolicy {
            probability: config.tool_call_probability,
            parallel: config.parallel_tool_calls,
        }
    }
}

/// Whether request `request` calls tools, and which: a pure function of the
/// seed, the request index and the request, so runs are reproducible. `tokens`:
/// the reply's length, shared out over the calls (each gets at least one).
pub fn plan_calls(
    tools: &Tools,
    policy: ToolPolicy,
    seed: u64,
    request: u64,
    dialect: Dialect,
    tokens: u32,
) -> Option<CallPlan> {
    let mut rng = SimRng::for_request(seed, request, TOOL_STREAM);
    let draw: f64 = rng.random();
    let call = match tools.choice {
        ToolChoice::None => false,
        ToolChoice::Required | ToolChoice::Named(_) => true,
        ToolChoice::Auto => draw < policy.probability,
    };
    if !call || tools.tools.is_empty() || tokens == 0 {
        return None;
    }
    let wanted = if tools.parallel {
        policy.parallel.max(1)
    } else {
        1
    };
    let n = wanted.min(tokens);
    let calls = (0..n)
        .map(|c| {
            let tool = match &tools.choice {
                ToolChoice::Named(name) => tools.tools.iter().find(|t| &t.name == name),
                _ => None,
            }
            .unwrap_or_else(|| &tools.tools[rng.random_range(0..tools.tools.len())]);
            let unique = format!("{request:x}{c:x}{:016x}", rng.next_u64());
            let id = match dialect {
                Dialect::Anthropic => format!("toolu_{unique}"),
                _ => format!("call_{unique}"),
            };
            Call {
                id,
                item_id: format!("fc_{unique}"),
                name: tool.name.clone(),
                fields: tool.fields.clone(),
                tokens: tokens / n + u32::from(c < tokens % n),
            }
        })
        .collect();
    Some(CallPlan { calls })
}

/// Streams a [`CallPlan`]: turns the reply's tokens, chunk by chunk, into each
/// dialect's tool-call events, and writes the events that close the calls.
#[derive(Debug, Clone)]
pub struct ToolStream {
    plan: CallPlan,
    vocab: Vocabulary,
    /// Tokens written so far.
    pos: u32,
    /// Each call's arguments so far.
    args: Vec<String>,
}

/// JSON-escapes `s` without the surrounding quotes.
fn escaped(s: &str) -> String {
    let quoted = Value::String(s.to_owned()).to_string();
    quoted[1..quoted.len() - 1].to_owned()
}

impl ToolStream {
    /// A stream at the reply's start, writing argument words from `vocab`.
    pub fn new(plan: CallPlan, vocab: Vocabulary) -> ToolStream {
        let args = vec![String::new(); plan.calls.len()];
        ToolStream {
            plan,
            vocab,
            pos: 0,
            args,
        }
    }

    /// The calls it streams.
    pub fn plan(&self) -> &CallPlan {
        &self.plan
    }

    /// Each call's arguments so far.
    pub fn arguments(&self) -> &[String] {
        &self.args
    }

    /// The call token `pos` belongs to, and its place in that call.
    fn locate(&self, pos: u32) -> (usize, u32) {
        let mut start = 0;
        for (c, call) in self.plan.calls.iter().enumerate() {
            if pos < start + call.tokens {
                return (c, pos - start);
            }
            start += call.tokens;
        }
        let last = self.plan.calls.len().saturating_sub(1);
        (last, pos - start + self.plan.calls[last].tokens)
    }

    /// The argument text token `j` of call `c` adds: the word, with the JSON
    /// around it that opens the object, a field, or closes them.
    fn fragment(&self, c: usize, j: u32, id: u32) -> String {
        let call = &self.plan.calls[c];
        let t = call.tokens.max(1);
        let k = (call.fields.len() as u32).clamp(1, t);
        let mut s = String::new();
        if j == 0 {
            s.push('{');
        }
        // Field f starts at token f*t/k (rounded down), so each holds one or more.
        if let Some(f) = (0..k).find(|f| f * t / k == j) {
            if f > 0 {
                s.push_str("\", ");
            }
            s.push_str(&Value::String(call.fields[f as usize].clone()).to_string());
            s.push_str(": \"");
        }
        let mut word = String::new();
        self.vocab.push_text(&[id], &mut word);
        s.push_str(&escaped(&word));
        if j + 1 == t {
            s.push_str("\"}");
        }
        s
    }

    /// The events one chunk of tokens becomes, each with the tokens it carries:
    /// per call it touches, its opening (the id and name) if this chunk starts it,
    /// then one argument delta. `last`: the chunk ends the reply (chat puts the
    /// finish reason on its final delta); `usage(n)`: the running usage after `n`
    /// tokens, for chat chunks.
    pub fn chunk(
        &mut self,
        w: &Writer<'_>,
        ids: &[u32],
        last: bool,
        usage: impl Fn(u32) -> Option<Usage>,
    ) -> Vec<(String, u32)> {
        // Runs of tokens per call, with their fragment text.
        let mut runs: Vec<(usize, bool, String, u32)> = Vec::new();
        for &id in ids {
            let (c, j) = self.locate(self.pos);
            let text = self.fragment(c, j, id);
            self.pos += 1;
            match runs.last_mut() {
                Some(r) if r.0 == c => {
                    r.2.push_str(&text);
                    r.3 += 1;
                }
                _ => runs.push((c, j == 0, text, 1)),
            }
        }
        let mut out = Vec::new();
        let n_runs = runs.len();
        let mut produced = self.pos - ids.len() as u32;
        for (r, (c, starts, text, n)) in runs.into_iter().enumerate() {
            produced += n;
            let finish = (last && r + 1 == n_runs).then_some("tool_calls");
            let call = &self.plan.calls[c];
            if starts {
                if c > 0 {
                    out.extend(self.stop_events(w, c - 1).into_iter().map(|e| (e, 0)));
                }
                out.extend(self.start_event(w, c).map(|e| (e, 0)));
            }
            let delta = match w.dialect {
                Dialect::Anthropic => json!({"type": "content_block_delta", "index": c,
                    "delta": {"type": "input_json_delta", "partial_json": text}})
                .to_string(),
                Dialect::Responses => json!({"type": "response.function_call_arguments.delta",
                    "item_id": call.item_id, "output_index": c, "delta": text})
                .to_string(),
                _ => w.chunk(
                    Piece::Tool {
                        index: c as u32,
                        head: None,
                        arguments: &text,
                    },
                    finish,
                    None,
                    usage(produced),
                ),
            };
            self.args[c].push_str(&text);
            out.push((delta, n));
        }
        out
    }

    /// The event that opens call `c`: it names the call, so clients count it as
    /// output, and it goes with the call's first token.
    fn start_event(&self, w: &Writer<'_>, c: usize) -> Option<String> {
        let call = &self.plan.calls[c];
        Some(match w.dialect {
            Dialect::Anthropic => json!({"type": "content_block_start", "index": c,
                "content_block": {"type": "tool_use", "id": call.id, "name": call.name,
                "input": {}}})
            .to_string(),
            Dialect::Responses => json!({"type": "response.output_item.added",
                "output_index": c, "item": self.item(c, "", "in_progress")})
            .to_string(),
            Dialect::Chat => w.chunk(
                Piece::Tool {
                    index: c as u32,
                    head: Some((&call.id, &call.name)),
                    arguments: "",
                },
                None,
                None,
                None,
            ),
            _ => return None,
        })
    }

    fn item(&self, c: usize, arguments: &str, status: &str) -> Value {
        let call = &self.plan.calls[c];
        json!({"type": "function_call", "id": call.item_id, "call_id": call.id,
            "name": call.name, "arguments": arguments, "status": status})
    }

    /// The events that close call `c` (Anthropic's block stop, Responses' done events).
    fn stop_events(&self, w: &Writer<'_>, c: usize) -> Vec<String> {
        let args = &self.args[c];
        match w.dialect {
            Dialect::Anthropic => {
                vec![json!({"type": "content_block_stop", "index": c}).to_string()]
            }
            Dialect::Responses => vec![
                json!({"type": "response.function_call_arguments.done",
                    "item_id": self.plan.calls[c].item_id, "output_index": c,
                    "arguments": args})
                .to_string(),
                json!({"type": "response.output_item.done", "output_index": c,
                    "item": self.item(c, args, "completed")})
                .to_string(),
            ],
            _ => Vec::new(),
        }
    }

    /// The events after the last token: the last call's close and the dialect's
    /// end (Anthropic `message_delta` with `stop_reason: tool_use` and
    /// `message_stop`; Responses `response.completed` with every call in
    /// `output`). Chat has none of its own (usage and `[DONE]` follow as usual).
    pub fn closing(&self, w: &Writer<'_>, usage: Usage) -> Vec<String> {
        let last = self.plan.calls.len() - 1;
        let mut out = self.stop_events(w, last);
        let n = usage.completion_tokens;
        match w.dialect {
            Dialect::Anthropic => {
                out.push(
                    json!({"type": "message_delta", "delta": {"stop_reason": "tool_use",
                    "stop_sequence": null}, "usage": {"output_tokens": n}})
                    .to_string(),
                );
                out.push(json!({"type": "message_stop"}).to_string());
            }
            Dialect::Responses => out.push(
                json!({"type": "response.completed", "response": {"id": w.id,
                "object": "response", "status": "completed", "model": w.model,
                "output": self.items(), "usage": {"input_tokens": usage.prompt_tokens,
                "output_tokens": n, "total_tokens": usage.total_tokens}}})
                .to_string(),
            ),
            _ => {}
        }
        out
    }

    fn items(&self) -> Vec<Value> {
        (0..self.plan.calls.len())
            .map(|c| self.item(c, &self.args[c], "completed"))
            .collect()
    }

    /// A non-streamed answer carrying the calls (after every token went through
    /// [`ToolStream::chunk`]).
    pub fn whole(&self, w: &Writer<'_>, usage: Usage) -> String {
        let calls = self.plan.calls.iter().zip(&self.args);
        match w.dialect {
            Dialect::Anthropic => json!({"id": w.id, "type": "message", "role": "assistant",
                "model": w.model, "content": calls.map(|(c, a)| json!({"type": "tool_use",
                    "id": c.id, "name": c.name,
                    "input": serde_json::from_str::<Value>(a).unwrap_or_default()}))
                .collect::<Vec<_>>(),
                "stop_reason": "tool_use", "stop_sequence": null,
                "usage": {"input_tokens": usage.prompt_tokens,
                    "output_tokens": usage.completion_tokens}}),
            Dialect::Responses => json!({"id": w.id, "object": "response",
                "status": "completed", "model": w.model, "output": self.items(),
                "usage": {"input_tokens": usage.prompt_tokens,
                    "output_tokens": usage.completion_tokens,
                    "total_tokens": usage.total_tokens}}),
            _ => json!({"id": w.id, "object": "chat.completion", "created": w.created,
                "model": w.model, "choices": [{"index": 0, "message": {"role": "assistant",
                    "content": null, "tool_calls": calls.map(|(c, a)| json!({"id": c.id,
                        "type": "function", "function": {"name": c.name, "arguments": a}}))
                    .collect::<Vec<_>>()},
                "logprobs": null, "finish_reason": "tool_calls"}],
                "usage": usage}),
        }
        .to_string()
    }
}

/// The dialects the sim answers with tool calls.
pub fn supports(dialect: Dialect) -> bool {
    matches!(
        dialect,
        Dialect::Chat | Dialect::Anthropic | Dialect::Responses
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tools(choice: &str) -> Tools {
        let t = json!([{"type": "function", "function": {"name": "grep",
            "parameters": {"type": "object", "properties": {"path": {}, "pattern": {}}}}}]);
        Tools::parse(Some(&t), Some(&json!(choice)), true)
            .unwrap()
            .unwrap()
    }

    fn policy(probability: f64, parallel: u32) -> ToolPolicy {
        ToolPolicy {
            probability,
            parallel,
        }
    }

    #[test]
    fn arguments_join_to_json_with_the_schemas_fields() {
        for tokens in 1..12 {
            let plan = plan_calls(
                &tools("required"),
                policy(0.0, 2),
                1,
                3,
                Dialect::Chat,
                tokens,
            )
            .unwrap();
            assert_eq!(plan.calls.iter().map(|c| c.tokens).sum::<u32>(), tokens);
            let mut s = ToolStream::new(plan, Vocabulary::Plain);
            let w = Writer {
                dialect: Dialect::Chat,
                id: "x",
                created: 0,
                model: "m",
                pretty: false,
            };
            let ids: Vec<u32> = (0..tokens).collect();
            let events = s.chunk(&w, &ids, true, |_| None);
            assert_eq!(events.iter().map(|e| e.1).sum::<u32>(), tokens);
            for a in &s.args {
                let v: Value = serde_json::from_str(a).unwrap_or_else(|e| panic!("{a}: {e}"));
                assert!(v.get("path").is_some(), "{a}");
                assert_eq!(value_words(&v), argument_words(a));
            }
            let words: u32 = s.args.iter().map(|a| argument_words(a)).sum();
            assert_eq!(words, tokens, "each token is one word of the arguments");
        }
    }

    #[test]
    fn tool_choice_decides() {
        let auto = tools("auto");
        let n = |p: f64| {
            (0..200)
                .filter(|&i| plan_calls(&auto, policy(p, 1), 9, i, Dialect::Chat, 5).is_some())
                .count()
        };
        assert_eq!(n(0.0), 0);
        assert_eq!(n(1.0), 200);
        assert!((100..180).contains(&n(0.7)), "{}", n(0.7));
        assert!(plan_calls(&tools("none"), policy(1.0, 1), 9, 0, Dialect::Chat, 5).is_none());
        assert!(plan_calls(&tools("any"), policy(0.0, 1), 9, 0, Dialect::Chat, 5).is_some());
        let bad = Tools::parse(None, Some(&json!("required")), true);
        assert!(bad.unwrap_err().contains("declares no tools"));
    }

    #[test]
    fn history_pairs_results_with_calls() {
        let call = json!({"role": "assistant", "content": null,
            "tool_calls": [{"id": "call_1", "type": "function",
                "function": {"name": "f", "arguments": "{}"}}]});
        let user = json!({"role": "user", "content": "hi"});
        let result = |id: &str| json!({"role": "tool", "tool_call_id": id, "content": "ok"});
        check_history(&[user.clone(), call.clone(), result("call_1")], false).unwrap();
        let e = check_history(&[user.clone(), call.clone(), result("call_2")], false);
        assert!(e.unwrap_err().contains("matches no tool call"));
        let e = check_history(&[call.clone(), user.clone(), result("call_1")], false);
        assert!(e.is_err());
        let e = check_history(&[user.clone(), call.clone()], false);
        assert!(e.unwrap_err().contains("without a result"));
    }
}

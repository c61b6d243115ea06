//! Agent sessions: a loop of generate → run tools → generate again, where inter-token
//! latency compounds. Every step declares tools; a reply with tool calls is appended
//! as the server sent it, followed by one result per call (naming the call's id) after
//! the tool time, and the next step is sent. This module holds the dialect-specific
//! shapes (tool declarations, `tool_choice`, the assistant's calls and the results)
//! and the draws (tool times, result texts); the runner drives the loop.

use crate::body::Message;
use crate::prompts::{LengthDist, PromptGen};
use cadence_core::duration::parse_duration;
use cadence_wire::{Api, ToolCall};
use rand::Rng;
use rand_distr::{Distribution as _, Exp, Normal};
use serde_json::{json, Value};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

/// Steps of a session when `--agent` is given without `--turns`.
pub const DEFAULT_MAX_STEPS: u32 = 8;

/// One tool the steps declare: its name, what it does, and its arguments' JSON Schema.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolDef {
    /// The name the model calls it by.
    pub name: String,
    /// What the tool does, in words the model reads.
    pub description: String,
    /// The JSON Schema of its arguments.
    pub parameters: Value,
}

impl ToolDef {
    fn new(name: &str, description: &str, arg: &str, arg_doc: &str) -> ToolDef {
        ToolDef {
            name: name.into(),
            description: description.into(),
            parameters: json!({
                "type": "object",
                "properties": {arg: {"type": "string", "description": arg_doc}},
                "required": [arg],
            }),
        }
    }
}

/// The built-in tools: a small coding agent's set.
pub fn builtin_tools() -> Vec<ToolDef> {
    vec![
        ToolDef::new(
            "read_file",
            "Read a file of the repository.",
            "path",
            "the file's path",
        ),
        ToolDef::new(
            "search_code",
            "Search the repository's code.",
            "query",
            "what to look for",
        ),
        ToolDef::new(
            "run_tests",
            "Run the test suite, or part of it.",
            "target",
            "which tests",
        ),
        ToolDef::new(
            "apply_patch",
            "Apply a unified diff to the repository.",
            "diff",
            "the diff",
        ),
    ]
}

/// Reads `--tools FILE`: a JSON array of tools in the OpenAI format
/// (`{"type":"function","function":{"name","description","parameters"}}`), or that
/// array under a `tools` key. Anthropic's shape (`name`, `input_schema`) and the
/// Responses API's flat one (`name`, `parameters`) are read too.
pub fn parse_tools(text: &str) -> Result<Vec<ToolDef>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("not JSON: {e}"))?;
    let list = match &v {
        Value::Array(a) => a,
        Value::Object(o) => o
            .get("tools")
            .and_then(Value::as_array)
            .ok_or("expected a JSON array of tools, or an object with a 'tools' array")?,
        _ => return Err("expected a JSON array of tools".into()),
    };
    if list.is_empty() {
        return Err("the file declares no tools".into());
    }
    list.iter()
        .enumerate()
        .map(|(i, t)| {
            let f = t.get("function").unwrap_or(t);
            let name = f
                .get("name")
                .and_then(Value::as_str)
                .filter(|n| !n.is_empty())
                .ok_or_else(|| format!("tool {}: no 'name'", i + 1))?;
            let parameters = f
                .get("parameters")
                .or_else(|| f.get("input_schema"))
                .cloned()
                .unwrap_or_else(|| json!({"type": "object", "properties": {}}));
            if !parameters.is_object() {
                return Err(format!(
                    "tool '{name}': its parameters must be a JSON Schema object"
                ));
            }
            Ok(ToolDef {
                name: name.to_owned(),
                description: f
                    .get("description")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_owned(),
                parameters,
            })
        })
        .collect()
}

/// How a session keeps calling tools when the model would not.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Force {
    /// The model decides (`tool_choice` auto): a reply without a call ends the session.
    #[default]
    Off,
    /// Every step demands a call (`tool_choice` required; Anthropic's `any`).
    Required,
    /// The client injects a call when a reply has none (for models that cannot call
    /// tools at all): the record says so, and the report.
    Mock,
}

impl FromStr for Force {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" => Ok(Force::Off),
            "required" => Ok(Force::Required),
            "mock" => Ok(Force::Mock),
            _ => Err(format!("'{s}' is not a force mode: off, required or mock")),
        }
    }
}

/// A duration drawn per tool run: `200ms`, `fixed:200ms`, `uniform:50ms..2s`,
/// `normal:1s,200ms` (at least zero) or `exp:500ms` (exponential with that mean).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum DurationDist {
    /// Always this long (`200ms`, `fixed:200ms`).
    Fixed(Duration),
    /// Uniform between the two bounds, inclusive (`uniform:50ms..2s`).
    Uniform(Duration, Duration),
    /// Normal, cut at zero (`normal:1s,200ms`).
    Normal {
        /// The distribution's mean.
        mean: Duration,
        /// Its standard deviation.
        stddev: Duration,
    },
    /// Exponential (`exp:500ms`).
    Exp {
        /// The distribution's mean.
        mean: Duration,
    },
}

impl DurationDist {
    /// One draw from `rng`, at least zero and at most a day.
    pub fn sample(&self, rng: &mut impl Rng) -> Duration {
        let secs = |d: Duration| d.as_secs_f64();
        let x = match *self {
            DurationDist::Fixed(d) => return d,
            DurationDist::Uniform(lo, hi) => rng.random_range(secs(lo)..=secs(hi)),
            DurationDist::Normal { mean, stddev } => {
                Normal::new(secs(mean), secs(stddev)).map_or(secs(mean), |d| d.sample(rng))
            }
            DurationDist::Exp { mean } if mean.is_zero() => 0.0,
            DurationDist::Exp { mean } => {
                Exp::new(1.0 / secs(mean)).map_or(secs(mean), |d| d.sample(rng))
            }
        };
        Duration::from_secs_f64(x.clamp(0.0, 86_400.0))
    }

    /// The mean of the draws.
    pub fn mean(&self) -> Duration {
        match *self {
            DurationDist::Fixed(d) | DurationDist::Exp { mean: d } => d,
            DurationDist::Uniform(lo, hi) => (lo + hi) / 2,
            DurationDist::Normal { mean, .. } => mean,
        }
    }
}

impl FromStr for DurationDist {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        let s = s.trim();
        let bad = |why: &str| {
            format!("'{s}' is not a duration distribution ({why}); try 200ms, uniform:50ms..2s, normal:1s,200ms or exp:500ms")
        };
        let d = |v: &str| parse_duration(v.trim()).map_err(|e| bad(&e.to_string()));
        let (kind, rest) = s.split_once(':').unwrap_or(("fixed", s));
        match kind {
            "fixed" => Ok(DurationDist::Fixed(d(rest)?)),
            "uniform" => {
                let (lo, hi) = rest.split_once("..").ok_or_else(|| bad("uniform:LO..HI"))?;
                let (lo, hi) = (d(lo)?, d(hi)?);
                if lo > hi {
                    return Err(bad("LO must not exceed HI"));
                }
                Ok(DurationDist::Uniform(lo, hi))
            }
            "normal" => {
                let (m, sd) = rest
                    .split_once(',')
                    .ok_or_else(|| bad("normal:MEAN,STDDEV"))?;
                Ok(DurationDist::Normal {
                    mean: d(m)?,
                    stddev: d(sd)?,
                })
            }
            "exp" => Ok(DurationDist::Exp { mean: d(rest)? }),
            _ => Err(bad("unknown kind")),
        }
    }
}

/// What an agent run's sessions do, besides the first prompt (the workload's).
#[derive(Debug, Clone)]
pub struct AgentSpec {
    /// The tools every step declares.
    pub tools: Vec<ToolDef>,
    /// Whether a step must call a tool, and how a reply that calls none is handled.
    pub force: Force,
    /// How long the client runs the tools of one reply.
    pub tool_time: DurationDist,
    /// Tokens of each tool result, exact as prompts are.
    pub result_tokens: LengthDist,
    /// Makes result texts of exact lengths.
    pub results: Arc<PromptGen>,
    /// Steps at most (`--turns`): a session that is still calling tools ends here.
    pub max_steps: u32,
    /// Seeds the draws (tool times, result texts); each session mixes in its number.
    pub seed: u64,
}

impl AgentSpec {
    /// The `tools` member of a request in `api`'s shape.
    pub fn tools_json(&self, api: Api) -> Value {
        let one = |t: &ToolDef| match api {
            Api::Anthropic => json!({
                "name": t.name, "description": t.description, "input_schema": t.parameters,
            }),
            Api::Responses => json!({
                "type": "function", "name": t.name, "description": t.description,
                "parameters": t.parameters,
            }),
            _ => json!({
                "type": "function",
                "function": {"name": t.name, "description": t.description, "parameters": t.parameters},
            }),
        };
        Value::Array(self.tools.iter().map(one).collect())
    }

    /// The `tool_choice` a request sends: only when every step must call a tool.
    pub fn tool_choice(&self, api: Api) -> Option<Value> {
        (self.force == Force::Required).then(|| match api {
            Api::Anthropic => json!({"type": "any"}),
            _ => json!("required"),
        })
    }

    /// The call the client injects into a reply that made none (`Force::Mock`): the
    /// first tool, empty arguments, an id naming the session and step.
    pub fn mock_call(&self, session: u64, step: u32) -> ToolCall {
        ToolCall {
            id: format!("call_cadence_{session}_{step}"),
            name: self
                .tools
                .first()
                .map(|t| t.name.clone())
                .unwrap_or_default(),
            arguments: "{}".into(),
        }
    }

    /// One tool result of exactly a drawn number of tokens.
    pub fn result_text(&self, rng: &mut impl Rng) -> String {
        let n = self.result_tokens.sample(rng) as usize;
        self.results.prompt(n, rng, false)
    }
}

/// A session's conversation so far, in its dialect's own message shapes (chat
/// messages, Anthropic content blocks, Responses input items), so each step sends back
/// exactly what the server said and the results that answer it.
#[derive(Debug, Clone)]
pub struct Transcript {
    api: Api,
    /// The system prompt when the dialect sends it apart from the messages (Anthropic).
    pub system: Option<String>,
    /// The messages so far (or the Responses API's input items), as the dialect sends them.
    pub items: Vec<Value>,
    /// The text of every message and call, for counting the prompt's tokens when the
    /// server gives no usage.
    pub parts: Vec<String>,
}

impl Transcript {
    /// A session that starts with `history` (system messages first) and the user's
    /// first prompt.
    pub fn new(api: Api, history: &[Message], first: String) -> Transcript {
        let mut t = Transcript {
            api,
            system: None,
            items: Vec::new(),
            parts: Vec::new(),
        };
        for m in history {
            if m.role == "system" && api == Api::Anthropic {
                t.system = Some(match t.system.take() {
                    Some(s) => format!("{s}\n\n{}", m.content),
                    None => m.content.clone(),
                });
                t.parts.push(m.content.clone());
            } else {
                t.push_text(&m.role, &m.content);
            }
        }
        t.push_text("user", &first);
        t
    }

    fn push_text(&mut self, role: &str, text: &str) {
        self.items.push(json!({"role": role, "content": text}));
        self.parts.push(text.to_owned());
    }

    /// A user message after the conversation so far (a replayed session's next turn).
    pub fn push_user(&mut self, text: &str) {
        self.push_text("user", text);
    }

    /// The assistant's reply as the server sent it: its text and its tool calls.
    pub fn push_reply(&mut self, text: &str, calls: &[ToolCall]) {
        self.parts.push(text.to_owned());
        self.parts.extend(calls.iter().map(|c| c.arguments.clone()));
        match self.api {
            Api::Anthropic => {
                let mut blocks = Vec::new();
                if !text.is_empty() {
                    blocks.push(json!({"type": "text", "text": text}));
                }
                for c in calls {
                    blocks.push(json!({
                        "type": "tool_use", "id": c.id, "name": c.name,
                        "input": arguments_object(&c.arguments),
                    }));
                }
                self.items
                    .push(json!({"role": "assistant", "content": blocks}));
            }
            Api::Responses => {
                if !text.is_empty() {
                    self.items
                        .push(json!({"role": "assistant", "content": text}));
                }
                for c in calls {
                    self.items.push(json!({
                        "type": "function_call", "call_id": c.id, "name": c.name,
                        "arguments": c.arguments,
                    }));
                }
            }
            _ => {
                let mut m = json!({"role": "assistant", "content": text});
                if !calls.is_empty() {
                    m["tool_calls"] = calls
                        .iter()
                        .map(|c| {
                            json!({
                                "id": c.id, "type": "function",
                                "function": {"name": c.name, "arguments": c.arguments},
                            })
                        })
                        .collect();
                }
                self.items.push(m);
            }
        }
    }

    /// One result per call, each naming its call's id, in the calls' order.
    pub fn push_results(&mut self, calls: &[ToolCall], results: &[String]) {
        self.parts.extend(results.iter().cloned());
        let pairs = calls.iter().zip(results);
        match self.api {
            Api::Anthropic => {
                let blocks: Vec<Value> = pairs
                    .map(|(c, r)| json!({"type": "tool_result", "tool_use_id": c.id, "content": r}))
                    .collect();
                self.items.push(json!({"role": "user", "content": blocks}));
            }
            Api::Responses => {
                for (c, r) in pairs {
                    self.items.push(
                        json!({"type": "function_call_output", "call_id": c.id, "output": r}),
                    );
                }
            }
            _ => {
                for (c, r) in pairs {
                    self.items
                        .push(json!({"role": "tool", "tool_call_id": c.id, "content": r}));
                }
            }
        }
    }
}

/// A call's arguments as the object Anthropic's `tool_use.input` must be: the parsed
/// JSON when it is an object, else the text kept under `_raw` (never dropped).
fn arguments_object(args: &str) -> Value {
    match serde_json::from_str::<Value>(args) {
        Ok(v @ Value::Object(_)) => v,
        _ if args.trim().is_empty() => json!({}),
        _ => json!({"_raw": args}),
    }
}

/// The APIs whose requests can declare tools and carry tool results.
pub fn supports(api: Api) -> bool {
    matches!(api, Api::Chat | Api::Responses | Api::Anthropic)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::prompts::Counter;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    fn spec(force: Force) -> AgentSpec {
        AgentSpec {
            tools: builtin_tools(),
            force,
            tool_time: DurationDist::Fixed(Duration::from_millis(5)),
            result_tokens: LengthDist::Fixed(7),
            results: Arc::new(PromptGen::builtin(Counter::Words).unwrap()),
            max_steps: 4,
            seed: 1,
        }
    }

    fn call(id: &str, args: &str) -> ToolCall {
        ToolCall {
            id: id.into(),
            name: "read_file".into(),
            arguments: args.into(),
        }
    }

    #[test]
    fn chat_steps_carry_the_calls_and_one_tool_message_per_id() {
        let mut t = Transcript::new(
            Api::Chat,
            &[Message::new("system", "be brief")],
            "fix it".into(),
        );
        let calls = [call("call_1", r#"{"path":"a"}"#), call("call_2", "{}")];
        t.push_reply("", &calls);
        t.push_results(&calls, &["one".into(), "two".into()]);
        assert_eq!(t.items.len(), 5);
        assert_eq!(t.items[0], json!({"role": "system", "content": "be brief"}));
        assert_eq!(t.items[2]["tool_calls"][1]["id"], "call_2");
        assert_eq!(
            t.items[2]["tool_calls"][0]["function"]["arguments"],
            r#"{"path":"a"}"#
        );
        assert_eq!(
            t.items[3],
            json!({"role": "tool", "tool_call_id": "call_1", "content": "one"})
        );
        assert_eq!(t.items[4]["tool_call_id"], "call_2");
    }

    #[test]
    fn anthropic_steps_use_tool_use_and_tool_result_blocks() {
        let mut t = Transcript::new(Api::Anthropic, &[Message::new("system", "s")], "go".into());
        let calls = [
            call("toolu_1", r#"{"path":"a"}"#),
            call("toolu_2", "not json"),
        ];
        t.push_reply("Looking.", &calls);
        t.push_results(&calls, &["r1".into(), "r2".into()]);
        assert_eq!(t.system.as_deref(), Some("s"));
        assert_eq!(t.items.len(), 3, "user, assistant, user(results)");
        let blocks = &t.items[1]["content"];
        assert_eq!(blocks[0], json!({"type": "text", "text": "Looking."}));
        assert_eq!(blocks[1]["input"], json!({"path": "a"}));
        assert_eq!(blocks[2]["input"], json!({"_raw": "not json"}));
        assert_eq!(t.items[2]["role"], "user");
        assert_eq!(t.items[2]["content"][1]["tool_use_id"], "toolu_2");
    }

    #[test]
    fn responses_steps_use_function_call_items_and_outputs() {
        let mut t = Transcript::new(Api::Responses, &[], "go".into());
        let calls = [call("call_9", "{}")];
        t.push_reply("", &calls);
        t.push_results(&calls, &["out".into()]);
        assert_eq!(t.items[1]["type"], "function_call");
        assert_eq!(t.items[1]["call_id"], "call_9");
        assert_eq!(
            t.items[2],
            json!({"type": "function_call_output", "call_id": "call_9", "output": "out"})
        );
    }

    #[test]
    fn tool_declarations_and_choice_follow_the_dialect() {
        let s = spec(Force::Required);
        assert_eq!(s.tools_json(Api::Chat)[0]["function"]["name"], "read_file");
        assert_eq!(s.tools_json(Api::Responses)[0]["name"], "read_file");
        assert!(s.tools_json(Api::Anthropic)[0]["input_schema"].is_object());
        assert_eq!(s.tool_choice(Api::Chat), Some(json!("required")));
        assert_eq!(s.tool_choice(Api::Anthropic), Some(json!({"type": "any"})));
        assert_eq!(spec(Force::Off).tool_choice(Api::Chat), None);
        assert_eq!(spec(Force::Mock).tool_choice(Api::Chat), None);
    }

    #[test]
    fn results_have_exactly_the_drawn_length() {
        let s = spec(Force::Off);
        let mut rng = SmallRng::seed_from_u64(1);
        for _ in 0..20 {
            assert_eq!(s.result_text(&mut rng).split_whitespace().count(), 7);
        }
    }

    #[test]
    fn tools_files_in_three_shapes_and_bad_ones() {
        let openai = r#"[{"type":"function","function":{"name":"f","description":"d","parameters":{"type":"object"}}}]"#;
        let t = parse_tools(openai).unwrap();
        assert_eq!((t[0].name.as_str(), t[0].description.as_str()), ("f", "d"));
        let anthropic = r#"{"tools":[{"name":"g","input_schema":{"type":"object"}}]}"#;
        assert_eq!(parse_tools(anthropic).unwrap()[0].name, "g");
        assert!(parse_tools("[]").unwrap_err().contains("no tools"));
        assert!(parse_tools(r#"[{"function":{}}]"#)
            .unwrap_err()
            .contains("no 'name'"));
        assert!(parse_tools(r#"[{"name":"h","parameters":3}]"#).is_err());
        assert!(parse_tools("{").unwrap_err().contains("not JSON"));
    }

    #[test]
    fn duration_distributions_parse_and_stay_in_range() {
        let mut rng = SmallRng::seed_from_u64(3);
        let u: DurationDist = "uniform:10ms..20ms".parse().unwrap();
        for _ in 0..100 {
            let d = u.sample(&mut rng);
            assert!(d >= Duration::from_millis(10) && d <= Duration::from_millis(20));
        }
        assert_eq!(
            "250ms".parse::<DurationDist>().unwrap(),
            DurationDist::Fixed(Duration::from_millis(250))
        );
        let n: DurationDist = "normal:1ms,50ms".parse().unwrap();
        assert!((0..100).all(|_| n.sample(&mut rng) >= Duration::ZERO));
        let e: DurationDist = "exp:100ms".parse().unwrap();
        let mean = (0..4000)
            .map(|_| e.sample(&mut rng).as_secs_f64())
            .sum::<f64>()
            / 4000.0;
        assert!((mean - 0.1).abs() < 0.01, "exp mean {mean}");
        assert!("uniform:2s..1s".parse::<DurationDist>().is_err());
        assert!("weird:1s".parse::<DurationDist>().is_err());
    }
}

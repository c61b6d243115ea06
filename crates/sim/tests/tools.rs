//! Tool calls through the router, in paused time: each dialect's stream of calls
//! folds into whole calls with JSON arguments, `tool_choice` decides, histories with
//! unpaired tool results are refused, and (engine mode) a later agent step reuses
//! the cached history.

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use cadence_sim::{SimConfig, SimState};
use common::*;
use serde_json::{json, Value};

fn chat_tools() -> Value {
    json!([
        {"type": "function", "function": {"name": "read_file", "description": "Read a file",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}},
        {"type": "function", "function": {"name": "grep", "description": "Search",
            "parameters": {"type": "object", "properties": {
                "pattern": {"type": "string"}, "path": {"type": "string"}}}}}
    ])
}

fn chat_body(max_tokens: u32, choice: Value) -> Value {
    let mut b = with_usage(max_tokens);
    b["tools"] = chat_tools();
    b["tool_choice"] = choice;
    b
}

fn config(probability: f64, parallel: u32) -> SimConfig {
    SimConfig {
        tool_call_probability: probability,
        parallel_tool_calls: parallel,
        ..fixed_config()
    }
}

/// A chat call folded from its deltas: (id, name, arguments).
type Folded = BTreeMap<u64, (String, String, String)>;

/// Folds chat `tool_calls` deltas by index, as a client does.
fn fold_chat(r: &Reply) -> Folded {
    let mut calls = Folded::new();
    for c in r.chunks() {
        let Some(deltas) = c
            .pointer("/choices/0/delta/tool_calls")
            .and_then(Value::as_array)
        else {
            continue;
        };
        for d in deltas {
            let e = calls.entry(d["index"].as_u64().unwrap()).or_default();
            if let Some(id) = d["id"].as_str() {
                e.0 = id.to_owned();
            }
            if let Some(n) = d.pointer("/function/name").and_then(Value::as_str) {
                e.1 = n.to_owned();
            }
            e.2 += d.pointer("/function/arguments").unwrap().as_str().unwrap();
        }
    }
    calls
}

fn finish_reason(r: &Reply) -> Option<String> {
    r.chunks()
        .iter()
        .filter_map(|c| {
            c.pointer("/choices/0/finish_reason")?
                .as_str()
                .map(str::to_owned)
        })
        .next()
}

#[tokio::test(start_paused = true)]
async fn chat_streams_tool_calls_as_vllm_does() {
    let state = SimState::new(config(0.7, 1));
    let r = post_chat(&state, &[], chat_body(8, json!("required"))).await;
    assert_eq!(r.status, 200, "{}", r.text());
    assert!(r.contents().is_empty(), "no text content: {}", r.text());
    let calls = fold_chat(&r);
    assert_eq!(calls.len(), 1);
    let (id, name, args) = &calls[&0];
    assert!(id.starts_with("call_") && id.len() > 8, "{id}");
    assert!(name == "read_file" || name == "grep", "{name}");
    let v: Value = serde_json::from_str(args).expect("arguments join to JSON");
    let want = if name == "grep" { 2 } else { 1 };
    assert_eq!(v.as_object().unwrap().len(), want, "{v}");
    assert_eq!(finish_reason(&r).as_deref(), Some("tool_calls"));
    let usage = r.chunks().last().unwrap()["usage"].clone();
    assert_eq!(usage["completion_tokens"], 8, "{usage}");
    // The header chunk names the call with empty arguments, then one fragment per
    // token on the ITL schedule (TTFT 50 ms, ITL 10 ms).
    let deltas: Vec<(Duration, Value)> = r
        .frames
        .iter()
        .flat_map(|(t, b)| {
            String::from_utf8_lossy(b)
                .split("\n\n")
                .filter_map(|e| serde_json::from_str::<Value>(e.strip_prefix("data: ")?).ok())
                .filter_map(|v| v.pointer("/choices/0/delta/tool_calls/0").cloned())
                .map(|d| (*t, d))
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(deltas.len(), 9, "a header and 8 fragments");
    assert_eq!(deltas[0].1["function"]["arguments"], "");
    assert_eq!(deltas[0].1["type"], "function");
    assert!(deltas[1].1.get("id").is_none());
    assert_eq!(deltas[0].0, ms(50));
    assert_eq!(deltas[1].0, ms(50));
    assert_eq!(deltas[8].0, ms(120));
    // The send log counts the fragments' tokens.
    assert_eq!(state.send_log().snapshot()[0].tokens.iter().sum::<u32>(), 8);
}

#[tokio::test(start_paused = true)]
async fn chat_parallel_calls_and_named_choice() {
    let state = SimState::new(config(0.7, 3));
    let choice = json!({"type": "function", "function": {"name": "grep"}});
    let r = post_chat(&state, &[], chat_body(10, choice)).await;
    let calls = fold_chat(&r);
    assert_eq!(calls.len(), 3, "{}", r.text());
    let ids: std::collections::HashSet<&String> = calls.values().map(|c| &c.0).collect();
    assert_eq!(ids.len(), 3, "unique ids");
    let mut words = 0;
    for (_, name, args) in calls.values() {
        assert_eq!(name, "grep");
        let v: Value = serde_json::from_str(args).unwrap_or_else(|e| panic!("{args}: {e}"));
        words += v
            .as_object()
            .unwrap()
            .values()
            .map(|s| s.as_str().unwrap().split_whitespace().count())
            .sum::<usize>();
    }
    assert_eq!(
        words, 10,
        "the reply's tokens are shared out over the calls"
    );
    // parallel_tool_calls: false caps it at one.
    let mut body = chat_body(10, json!("required"));
    body["parallel_tool_calls"] = json!(false);
    assert_eq!(fold_chat(&post_chat(&state, &[], body).await).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn tool_choice_decides_whether_a_step_calls() {
    let state = SimState::new(config(0.5, 1));
    let mut called = 0;
    for _ in 0..40 {
        let r = post_chat(&state, &[], chat_body(4, json!("auto"))).await;
        let calls = fold_chat(&r);
        if calls.is_empty() {
            assert_eq!(r.contents().len(), 4);
            assert_eq!(finish_reason(&r).as_deref(), Some("length"));
        } else {
            called += 1;
        }
    }
    assert!((8..=32).contains(&called), "{called} of 40 at p = 0.5");
    for _ in 0..5 {
        let r = post_chat(&state, &[], chat_body(4, json!("none"))).await;
        assert!(fold_chat(&r).is_empty());
    }
    // Reproducible: the same seed and request index decide the same way.
    let again = SimState::new(config(0.5, 1));
    let first = SimState::new(config(0.5, 1));
    for _ in 0..10 {
        let a = fold_chat(&post_chat(&first, &[], chat_body(4, json!("auto"))).await);
        let b = fold_chat(&post_chat(&again, &[], chat_body(4, json!("auto"))).await);
        assert_eq!(a, b);
    }
    // Probability 0 never calls, unless the request requires it.
    let never = SimState::new(config(0.0, 1));
    let r = post_chat(&never, &[], chat_body(4, json!("auto"))).await;
    assert!(fold_chat(&r).is_empty());
    let r = post_chat(&never, &[], chat_body(4, json!("required"))).await;
    assert_eq!(fold_chat(&r).len(), 1);
}

#[tokio::test(start_paused = true)]
async fn chat_history_with_tool_traffic_is_accepted_and_counted() {
    let state = SimState::new(config(0.7, 1));
    let first = post_chat(&state, &[], chat_body(6, json!("required"))).await;
    let (id, name, args) = fold_chat(&first)[&0].clone();
    let mut body = chat_body(3, json!("none"));
    body["messages"] = json!([
        {"role": "user", "content": "say something nice"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
            "function": {"name": name, "arguments": args}}]},
        {"role": "tool", "tool_call_id": id, "content": "one two three four"},
    ]);
    let r = post_chat(&state, &[], body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let usage = r.chunks().last().unwrap()["usage"].clone();
    assert_eq!(
        usage["prompt_tokens"],
        3 + 6 + 4,
        "the user's words, the call's argument words and the result's"
    );
    // A result whose id matches no call is refused.
    body["messages"][2]["tool_call_id"] = json!("call_nope");
    let r = post_chat(&state, &[], body.clone()).await;
    assert_eq!(r.status, 400);
    assert!(
        r.error_message().contains("call_nope"),
        "{}",
        r.error_message()
    );
    // A tool message must follow the assistant message that made the call.
    body["messages"][2]["tool_call_id"] = json!(id);
    let msgs = body["messages"].as_array_mut().unwrap();
    msgs.insert(2, json!({"role": "user", "content": "and?"}));
    let r = post_chat(&state, &[], body).await;
    assert_eq!(r.status, 400);
    assert!(r.error_message().contains("tool"), "{}", r.error_message());
}

#[tokio::test(start_paused = true)]
async fn chat_whole_reply_carries_the_calls() {
    let state = SimState::new(config(0.7, 2));
    let mut body = chat_body(6, json!("required"));
    body["stream"] = json!(false);
    let r = post_chat(&state, &[], body).await;
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "tool_calls");
    let calls = v["choices"][0]["message"]["tool_calls"].as_array().unwrap();
    assert_eq!(calls.len(), 2);
    for c in calls {
        let args = c["function"]["arguments"].as_str().unwrap();
        serde_json::from_str::<Value>(args).unwrap();
    }
}

/// The events of a named-event stream (Anthropic, Responses) as JSON.
fn events(r: &Reply) -> Vec<Value> {
    r.chunks()
}

#[tokio::test(start_paused = true)]
async fn anthropic_streams_tool_use_blocks() {
    let state = SimState::new(config(0.7, 2));
    let body = json!({"model": "m", "stream": true, "max_tokens": 7,
        "messages": [{"role": "user", "content": "find the bug"}],
        "tools": [{"name": "grep", "description": "Search",
            "input_schema": {"type": "object", "properties": {"pattern": {}, "path": {}}}}],
        "tool_choice": {"type": "any"}});
    let r = send(&state, "/v1/messages", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let ev = events(&r);
    let kinds: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(kinds[0], "message_start");
    assert!(!kinds.contains(&"ping") && !r.text().contains("text_delta"));
    // Per block: start (tool_use), input_json_delta fragments, stop.
    let mut calls: BTreeMap<u64, (String, String)> = BTreeMap::new();
    let mut open = None;
    for e in &ev {
        match e["type"].as_str().unwrap() {
            "content_block_start" => {
                assert_eq!(open, None, "blocks do not overlap");
                let b = &e["content_block"];
                assert_eq!(b["type"], "tool_use");
                assert!(b["id"].as_str().unwrap().starts_with("toolu_"));
                assert_eq!(b["input"], json!({}));
                let i = e["index"].as_u64().unwrap();
                calls.insert(i, (b["name"].as_str().unwrap().to_owned(), String::new()));
                open = Some(i);
            }
            "content_block_delta" => {
                assert_eq!(e["delta"]["type"], "input_json_delta");
                let i = e["index"].as_u64().unwrap();
                assert_eq!(open, Some(i));
                calls.get_mut(&i).unwrap().1 += e["delta"]["partial_json"].as_str().unwrap();
            }
            "content_block_stop" => {
                assert_eq!(open, e["index"].as_u64());
                open = None;
            }
            _ => {}
        }
    }
    assert_eq!(calls.len(), 2);
    for (name, args) in calls.values() {
        assert_eq!(name, "grep");
        let v: Value = serde_json::from_str(args).unwrap_or_else(|e| panic!("{args}: {e}"));
        assert!(v.is_object());
    }
    let delta = ev.iter().find(|e| e["type"] == "message_delta").unwrap();
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
    assert_eq!(delta["usage"]["output_tokens"], 7);
    assert_eq!(kinds.last(), Some(&"message_stop"));
}

#[tokio::test(start_paused = true)]
async fn anthropic_history_pairs_tool_results() {
    let state = SimState::new(config(0.7, 1));
    let mut body = json!({"model": "m", "stream": true, "max_tokens": 3,
        "tools": [{"name": "grep", "input_schema": {"type": "object"}}],
        "tool_choice": {"type": "none"},
        "messages": [
            {"role": "user", "content": "find the bug"},
            {"role": "assistant", "content": [{"type": "text", "text": "looking"},
                {"type": "tool_use", "id": "toolu_1", "name": "grep",
                 "input": {"query": "alpha beta"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1",
                "content": "found it here"}]}]});
    let r = send(&state, "/v1/messages", &[], body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let start = &events(&r)[0];
    assert_eq!(
        start["message"]["usage"]["input_tokens"],
        3 + 1 + 2 + 3,
        "text, tool_use input and tool_result words"
    );
    assert!(r.text().contains("text_delta"), "tool_choice none: text");
    body["messages"][2]["content"][0]["tool_use_id"] = json!("toolu_2");
    let r = send(&state, "/v1/messages", &[], body).await;
    assert_eq!(r.status, 400);
    assert!(
        r.error_message().contains("toolu_2"),
        "{}",
        r.error_message()
    );
}

#[tokio::test(start_paused = true)]
async fn responses_stream_function_call_items() {
    let state = SimState::new(config(0.7, 2));
    let body = json!({"model": "m", "stream": true, "max_output_tokens": 6,
        "input": [{"role": "user", "content": "find the bug"}],
        "tools": [{"type": "function", "name": "read_file", "description": "Read",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}}}],
        "tool_choice": "required"});
    let r = send(&state, "/v1/responses", &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let ev = events(&r);
    assert_eq!(ev[0]["type"], "response.created");
    let mut args: BTreeMap<u64, String> = BTreeMap::new();
    let mut done: BTreeMap<u64, Value> = BTreeMap::new();
    for e in &ev {
        let i = e["output_index"].as_u64();
        match e["type"].as_str().unwrap() {
            "response.output_item.added" => {
                let item = &e["item"];
                assert_eq!(item["type"], "function_call");
                assert!(item["id"].as_str().unwrap().starts_with("fc_"));
                assert!(item["call_id"].as_str().unwrap().starts_with("call_"));
                assert_eq!(item["name"], "read_file");
                assert_eq!(item["arguments"], "");
                args.insert(i.unwrap(), String::new());
            }
            "response.function_call_arguments.delta" => {
                assert!(e["item_id"].as_str().unwrap().starts_with("fc_"));
                *args.get_mut(&i.unwrap()).unwrap() += e["delta"].as_str().unwrap();
            }
            "response.function_call_arguments.done" => {
                assert_eq!(
                    e["arguments"].as_str(),
                    args.get(&i.unwrap()).map(|s| &s[..])
                );
            }
            "response.output_item.done" => {
                done.insert(i.unwrap(), e["item"].clone());
            }
            _ => {}
        }
    }
    assert_eq!(args.len(), 2);
    for (i, a) in &args {
        let v: Value = serde_json::from_str(a).unwrap_or_else(|e| panic!("{a}: {e}"));
        assert!(v["path"].is_string());
        assert_eq!(done[i]["arguments"].as_str(), Some(&a[..]));
        assert_eq!(done[i]["status"], "completed");
    }
    let last = ev.last().unwrap();
    assert_eq!(last["type"], "response.completed");
    assert_eq!(last["response"]["output"].as_array().unwrap().len(), 2);
    assert_eq!(last["response"]["usage"]["output_tokens"], 6);
}

#[tokio::test(start_paused = true)]
async fn responses_history_pairs_outputs_with_calls() {
    let state = SimState::new(config(0.7, 1));
    let mut body = json!({"model": "m", "stream": true, "max_output_tokens": 2,
        "input": [
            {"role": "user", "content": "find the bug"},
            {"type": "function_call", "call_id": "call_1", "name": "read_file",
             "arguments": "{\"path\": \"a b\"}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "x y z w"}]});
    let r = send(&state, "/v1/responses", &[], body.clone()).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let last = events(&r).last().unwrap().clone();
    assert_eq!(last["response"]["usage"]["input_tokens"], 3 + 2 + 4);
    body["input"][2]["call_id"] = json!("call_9");
    let r = send(&state, "/v1/responses", &[], body.clone()).await;
    assert_eq!(r.status, 400);
    assert!(r.error_message().contains("call_9"));
    // With previous_response_id the calls live on the server: not checked.
    body["previous_response_id"] = json!("resp_1");
    assert_eq!(send(&state, "/v1/responses", &[], body).await.status, 200);
}

fn engine_state(probability: f64) -> SimState {
    let mut spec = cadence_engine::preset("llama-3.1-8b@h100-bf16").unwrap();
    spec.serving.jitter = 0.0;
    SimState::new(SimConfig {
        engine: Some(spec),
        tool_call_probability: probability,
        ..SimConfig::default()
    })
}

#[tokio::test(start_paused = true)]
async fn engine_mode_streams_tool_calls_in_every_dialect() {
    let state = engine_state(1.0);
    let r = post_chat(&state, &[], chat_body(9, json!("auto"))).await;
    let calls = fold_chat(&r);
    assert_eq!(calls.len(), 1, "{}", r.text());
    serde_json::from_str::<Value>(&calls[&0].2).unwrap();
    assert_eq!(finish_reason(&r).as_deref(), Some("tool_calls"));
    assert_eq!(r.chunks().last().unwrap()["usage"]["completion_tokens"], 9);
    let body = json!({"model": "m", "stream": true, "max_tokens": 5,
        "messages": [{"role": "user", "content": "go"}],
        "tools": [{"name": "grep", "input_schema": {"type": "object"}}]});
    let r = send(&state, "/v1/messages", &[], body).await;
    let partial: String = events(&r)
        .iter()
        .filter(|e| e["delta"]["type"] == "input_json_delta")
        .map(|e| e["delta"]["partial_json"].as_str().unwrap().to_owned())
        .collect();
    assert!(serde_json::from_str::<Value>(&partial).unwrap()["query"].is_string());
    assert!(
        r.text().contains(r#""stop_reason":"tool_use""#),
        "{}",
        r.text()
    );
    let body = json!({"model": "m", "stream": true, "max_output_tokens": 5, "input": "go",
        "tools": [{"type": "function", "name": "grep"}]});
    let r = send(&state, "/v1/responses", &[], body).await;
    let last = events(&r).last().unwrap().clone();
    assert_eq!(
        last["response"]["output"][0]["type"], "function_call",
        "{last}"
    );
}

fn words(n: usize, word: &str) -> String {
    vec![word; n].join(" ")
}

/// TTFT (the first content chunk) and prompt tokens of a chat request.
async fn ttft_of(state: &SimState, messages: Value) -> (Duration, u64) {
    let mut body = with_usage(4);
    body["messages"] = messages;
    let r = post_chat(state, &[], body).await;
    assert_eq!(r.status, 200, "{}", r.text());
    let prompt = r.chunks().last().unwrap()["usage"]["prompt_tokens"]
        .as_u64()
        .unwrap();
    (r.content_times()[0].0, prompt)
}

#[tokio::test(start_paused = true)]
async fn engine_mode_a_later_agent_step_reuses_the_cached_history() {
    let state = engine_state(1.0);
    let task = json!({"role": "user", "content": words(3000, "context")});
    let mut step1 = chat_body(20, json!("required"));
    step1["messages"] = json!([task.clone()]);
    let r = post_chat(&state, &[], step1).await;
    let (id, name, args) = fold_chat(&r)[&0].clone();
    let step2 = json!([task,
        {"role": "assistant", "content": null, "tool_calls": [{"id": id, "type": "function",
            "function": {"name": name, "arguments": args}}]},
        {"role": "tool", "tool_call_id": id, "content": words(100, "result")}]);
    let (warm, warm_prompt) = ttft_of(&state, step2).await;
    let cold = json!([{"role": "user", "content": words(3120, "fresh")}]);
    let (cold, cold_prompt) = ttft_of(&state, cold).await;
    assert_eq!(warm_prompt, cold_prompt, "prompts of equal length");
    assert_eq!(warm_prompt, 3120);
    // The cold prompt prefills 3,120 tokens; the later step only its 100 new ones.
    assert!(warm * 3 < cold, "warm {warm:?}, cold {cold:?}");
    // Without the prefix cache the same step is as slow as a cold prompt.
    let mut spec = cadence_engine::preset("llama-3.1-8b@h100-bf16").unwrap();
    spec.serving.jitter = 0.0;
    spec.serving.prefix_cache = false;
    let plain = SimState::new(SimConfig {
        engine: Some(spec),
        ..SimConfig::default()
    });
    let (first, _) = ttft_of(
        &plain,
        json!([{"role": "user", "content": words(3000, "a")}]),
    )
    .await;
    let again = json!([{"role": "user", "content": words(3000, "a")},
        {"role": "assistant", "content": "b c"}, {"role": "user", "content": "d"}]);
    let (second, _) = ttft_of(&plain, again).await;
    assert!(second >= first, "no cache: {first:?} then {second:?}");
    eprintln!("warm step {warm:?}, cold prompt {cold:?}");
}

/// When the first text delta of a named-event stream arrived.
fn first_text_at(r: &Reply) -> Duration {
    r.frames
        .iter()
        .find(|(_, b)| {
            let t = String::from_utf8_lossy(b);
            t.contains("\"text_delta\"") || t.contains("response.output_text.delta")
        })
        .unwrap_or_else(|| panic!("no text: {}", r.text()))
        .0
}

#[tokio::test(start_paused = true)]
async fn engine_mode_caches_anthropic_and_responses_histories_too() {
    let state = engine_state(1.0);
    let task = words(3000, "context");
    // Anthropic: the tool_use block and the tool_result resent.
    let tools = json!([{"name": "grep", "input_schema": {"type": "object",
        "properties": {"pattern": {}}}}]);
    let body = json!({"model": "m", "stream": true, "max_tokens": 10, "tools": tools,
        "tool_choice": {"type": "any"}, "messages": [{"role": "user", "content": task}]});
    let r = send(&state, "/v1/messages", &[], body).await;
    let ev = events(&r);
    let start = ev
        .iter()
        .find(|e| e["type"] == "content_block_start")
        .unwrap();
    let (id, name) = (
        start["content_block"]["id"].clone(),
        start["content_block"]["name"].clone(),
    );
    let partial: String = ev
        .iter()
        .filter_map(|e| e["delta"]["partial_json"].as_str())
        .collect();
    let input: Value = serde_json::from_str(&partial).unwrap();
    let step2 = |history: bool| {
        let first = if history {
            task.clone()
        } else {
            words(3000, "other")
        };
        json!({"model": "m", "stream": true, "max_tokens": 2, "tools": tools,
            "tool_choice": {"type": "none"}, "messages": [
                {"role": "user", "content": first},
                {"role": "assistant", "content": [{"type": "tool_use", "id": id,
                    "name": name, "input": input}]},
                {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id,
                    "content": words(50, "result")}]}]})
    };
    let warm = first_text_at(&send(&state, "/v1/messages", &[], step2(true)).await);
    let cold = first_text_at(&send(&state, "/v1/messages", &[], step2(false)).await);
    assert!(warm * 3 < cold, "anthropic: warm {warm:?}, cold {cold:?}");

    // Responses: one function_call item per call, then the outputs.
    let tools = json!([{"type": "function", "name": "read_file"}]);
    let body = json!({"model": "m", "stream": true, "max_output_tokens": 10,
        "tools": tools, "tool_choice": "required", "input": [{"role": "user", "content": task}]});
    let r = send(&state, "/v1/responses", &[], body).await;
    let done = events(&r).last().unwrap()["response"]["output"][0].clone();
    let step2 = |history: bool| {
        let first = if history {
            task.clone()
        } else {
            words(3000, "another")
        };
        json!({"model": "m", "stream": true, "max_output_tokens": 2, "input": [
            {"role": "user", "content": first},
            {"type": "function_call", "call_id": done["call_id"], "name": done["name"],
             "arguments": done["arguments"]},
            {"type": "function_call_output", "call_id": done["call_id"],
             "output": words(50, "result")}]})
    };
    let warm = first_text_at(&send(&state, "/v1/responses", &[], step2(true)).await);
    let cold = first_text_at(&send(&state, "/v1/responses", &[], step2(false)).await);
    assert!(warm * 3 < cold, "responses: warm {warm:?}, cold {cold:?}");
}

#[tokio::test(start_paused = true)]
async fn whole_replies_carry_calls_in_anthropic_and_responses() {
    let state = SimState::new(config(0.7, 2));
    let body = json!({"model": "m", "max_tokens": 6, "messages": [{"role": "user",
        "content": "go"}], "tools": [{"name": "grep"}], "tool_choice": {"type": "any"}});
    let v = send(&state, "/v1/messages", &[], body).await.json();
    assert_eq!(v["stop_reason"], "tool_use");
    let blocks = v["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 2);
    assert!(blocks
        .iter()
        .all(|b| b["type"] == "tool_use" && b["input"].is_object()));
    let body = json!({"model": "m", "max_output_tokens": 6, "input": "go",
        "tools": [{"type": "function", "name": "grep"}], "tool_choice": "required"});
    let v = send(&state, "/v1/responses", &[], body).await.json();
    let items = v["output"].as_array().unwrap();
    assert_eq!(items.len(), 2);
    for i in items {
        assert_eq!(i["type"], "function_call");
        serde_json::from_str::<Value>(i["arguments"].as_str().unwrap()).unwrap();
    }
    assert_eq!(v["usage"]["output_tokens"], 6);
}

#[tokio::test(start_paused = true)]
async fn only_the_tool_calling_dialects_check_tools() {
    let state = SimState::new(config(0.7, 1));
    // Ollama's tool messages name the tool, not a call id: not the sim's to check.
    let body = json!({"model": "m", "stream": false, "messages": [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [{"function": {"name": "grep",
            "arguments": {"pattern": "x"}}}]},
        {"role": "tool", "tool_name": "grep", "content": "found"}],
        "tools": [{"type": "function", "function": {"name": "grep"}}],
        "tool_choice": "bogus"});
    assert_eq!(
        send(&state, "/api/chat", &[], body.clone()).await.status,
        200
    );
    let r = post_chat(&state, &[], body).await;
    assert_eq!(r.status, 400);
    assert!(r.error_message().contains("bogus"), "{}", r.error_message());
}

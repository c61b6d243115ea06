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

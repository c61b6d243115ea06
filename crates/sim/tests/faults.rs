//! One test per fault, named after its FAULTS.md row, checking the bytes the
//! sim really writes (through the router, in paused time).

mod common;

use std::time::Duration;

use cadence_sim::SimState;
use common::*;
use serde_json::{json, Value};

async fn with_fault(name: &str, extra: &[(&str, &str)], body: Value) -> (Reply, SimState) {
    let state = SimState::new(fixed_config());
    let mut headers = vec![("x-cadence-fault", name)];
    headers.extend_from_slice(extra);
    let r = post_chat(&state, &headers, body).await;
    (r, state)
}

async fn fault(name: &str) -> Reply {
    with_fault(name, &[], chat(6)).await.0
}

fn normal_shape(r: &Reply) {
    assert_eq!(r.status, 200);
    assert_eq!(r.contents().len(), 6);
    assert_eq!(r.events().last().unwrap(), "[DONE]");
}

fn finish_reasons(r: &Reply) -> Vec<Value> {
    r.chunks()
        .iter()
        .filter_map(|c| c.pointer("/choices/0/finish_reason").cloned())
        .filter(|f| !f.is_null())
        .collect()
}

#[tokio::test(start_paused = true)]
async fn f01_split_bytes_writes_one_byte_per_frame() {
    let r = fault("split_bytes").await;
    assert!(r.frames.len() > 100);
    assert!(r.frames.iter().all(|(_, b)| b.len() == 1));
    normal_shape(&r);
}

#[tokio::test(start_paused = true)]
async fn f02_coalesce_puts_several_events_in_one_frame() {
    let (r, state) = with_fault("coalesce", &[], chat(6)).await;
    normal_shape(&r);
    assert!(r
        .frames
        .iter()
        .any(|(_, b)| String::from_utf8_lossy(b).matches("data: ").count() >= 3));
    // Chunks that share a frame share a send time.
    let s = &state.send_log().snapshot()[0];
    assert_eq!(s.chunks_ns.len(), 6);
    assert!(gaps(&s.chunks_ns).contains(&0));
}

#[tokio::test(start_paused = true)]
async fn f03_crlf_uses_crlf_line_endings() {
    let r = fault("crlf").await;
    let text = r.text();
    assert!(text.contains("\r\n\r\n"));
    assert_eq!(text.matches('\n').count(), text.matches("\r\n").count());
    let lf = Reply {
        frames: vec![(Duration::ZERO, text.replace("\r\n", "\n").into())],
        ..r
    };
    normal_shape(&lf);
}

#[tokio::test(start_paused = true)]
async fn f03_cr_uses_bare_cr_line_endings() {
    let r = fault("cr").await;
    let text = r.text();
    assert!(!text.contains('\n'));
    assert!(text.contains("\r\r"));
    let lf = Reply {
        frames: vec![(Duration::ZERO, text.replace('\r', "\n").into())],
        ..r
    };
    normal_shape(&lf);
}

#[tokio::test(start_paused = true)]
async fn f04_data_without_a_space() {
    let r = fault("data_no_space").await;
    let text = r.text();
    assert!(text.contains("data:{"));
    assert!(text.contains("data:[DONE]"));
    assert!(!text.contains("data: "));
    normal_shape(&r);
}

#[tokio::test(start_paused = true)]
async fn f04_data_with_two_spaces() {
    let r = fault("data_two_spaces").await;
    assert!(r.text().contains("data:  {"));
    // After stripping exactly one space the data is still JSON.
    normal_shape(&r);
}

#[tokio::test(start_paused = true)]
async fn f05_multiline_data_splits_one_event_over_several_lines() {
    let r = fault("multiline_data").await;
    let text = r.text();
    let first_event = text.split("\n\n").next().unwrap();
    assert!(first_event.lines().count() > 3, "{first_event}");
    assert!(first_event.lines().all(|l| l.starts_with("data: ")));
    // Joined with '\n' the lines are one JSON object.
    normal_shape(&r);
}

#[tokio::test(start_paused = true)]
async fn f06_keepalive_comments_and_ping_events_are_interleaved() {
    let r = fault("keepalive").await;
    let text = r.text();
    assert!(text.contains("\n\n: ping\n\n"));
    assert!(text.contains("event: ping\ndata: {\"type\":\"ping\"}\n\n"));
    let contents: Vec<String> = r
        .chunks()
        .iter()
        .filter(|c| c.get("type").is_none())
        .filter_map(content_of)
        .collect();
    assert_eq!(contents.len(), 6);
    assert_eq!(r.events().last().unwrap(), "[DONE]");
}

#[tokio::test(start_paused = true)]
async fn f07_garbage_data_events_are_interleaved() {
    let r = fault("garbage_data").await;
    assert_eq!(r.text().matches("data: : keepalive\n\n").count(), 6);
    normal_shape(&r);
}

#[tokio::test(start_paused = true)]
async fn f08_error_after_tokens_ends_without_done() {
    let (r, state) = with_fault(
        "error_after_tokens",
        &[("x-cadence-fault-after", "2")],
        chat(6),
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.contents().len(), 2);
    let last = r.chunks().pop().unwrap();
    assert_eq!(last["error"]["type"], "server_error");
    assert!(!r.text().contains("[DONE]"));
    assert!(finish_reasons(&r).is_empty());
    assert!(r.error.is_none(), "the body itself ends cleanly");
    assert_eq!(state.send_log().snapshot()[0].tokens, [1, 1]);
}

#[tokio::test(start_paused = true)]
async fn f09_error_only_is_a_200_whose_only_event_is_an_error() {
    let r = fault("error_only").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = r.events();
    assert_eq!(events.len(), 1);
    let v: Value = serde_json::from_str(&events[0]).unwrap();
    assert!(v["error"]["message"].is_string());
}

#[tokio::test(start_paused = true)]
async fn f10_eof_without_done_or_finish_reason() {
    let r = fault("eof_no_done").await;
    assert_eq!(r.contents().len(), 3, "half of the six chunks");
    assert!(finish_reasons(&r).is_empty());
    assert!(!r.text().contains("[DONE]"));
    assert!(r.error.is_none());
}

#[tokio::test(start_paused = true)]
async fn f11_finish_reason_but_no_done() {
    let r = fault("finish_no_done").await;
    assert_eq!(r.contents().len(), 6);
    assert_eq!(finish_reasons(&r), [json!("length")]);
    assert!(!r.text().contains("[DONE]"));
}

#[tokio::test(start_paused = true)]
async fn f12_bytes_after_done() {
    let r = fault("bytes_after_done").await;
    let text = r.text();
    let (_, after) = text.split_once("data: [DONE]\n\n").unwrap();
    assert!(after.contains("after-done"));
    assert!(after.contains("trailing garbage"));
}

#[tokio::test(start_paused = true)]
async fn f13_usage_only_chunk_even_when_not_asked() {
    let r = fault("usage_only_chunk").await;
    normal_shape(&r);
    let chunks = r.chunks();
    let usage = chunks.last().unwrap();
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 6);
}

#[tokio::test(start_paused = true)]
async fn f14_usage_on_every_chunk_with_running_totals() {
    let r = fault("usage_every_chunk").await;
    let running: Vec<u64> = r
        .chunks()
        .iter()
        .map(|c| c["usage"]["completion_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(running, [0, 1, 2, 3, 4, 5, 6, 6]);
}

#[tokio::test(start_paused = true)]
async fn f15_role_first_is_the_normal_stream() {
    let r = fault("role_first").await;
    normal_shape(&r);
    let first = &r.chunks()[0];
    assert_eq!(
        first["choices"][0]["delta"],
        json!({"role": "assistant", "content": ""})
    );
}

#[tokio::test(start_paused = true)]
async fn f16_empty_and_null_content_mid_stream() {
    let (r, state) = with_fault("empty_content", &[], chat(6)).await;
    normal_shape(&r);
    let deltas: Vec<Value> = r
        .chunks()
        .iter()
        .map(|c| c["choices"][0]["delta"].clone())
        .collect();
    assert!(deltas[1..].contains(&json!({"content": ""})));
    assert!(deltas[1..].contains(&json!({"content": null})));
    assert_eq!(
        state.send_log().snapshot()[0].tokens.len(),
        6,
        "empty chunks are not logged"
    );
}

#[tokio::test(start_paused = true)]
async fn f17_reasoning_content_before_content() {
    let (r, state) = with_fault("reasoning_first", &[], chat(6)).await;
    let chunks = r.chunks();
    let reasoning: Vec<usize> = chunks
        .iter()
        .enumerate()
        .filter(|(_, c)| c.pointer("/choices/0/delta/reasoning_content").is_some())
        .map(|(i, _)| i)
        .collect();
    assert_eq!(reasoning, [1, 2, 3]);
    assert_eq!(r.contents().len(), 3);
    assert_eq!(
        state.send_log().snapshot()[0].tokens.len(),
        6,
        "reasoning counts as output"
    );
}

#[tokio::test(start_paused = true)]
async fn f18_tool_calls_only() {
    let r = fault("tool_calls").await;
    assert!(r.contents().is_empty());
    let calls: Vec<Value> = r
        .chunks()
        .iter()
        .filter_map(|c| c.pointer("/choices/0/delta/tool_calls/0").cloned())
        .collect();
    assert_eq!(calls.len(), 6);
    assert_eq!(calls[0]["function"]["name"], "lookup");
    let args: String = calls
        .iter()
        .map(|c| c["function"]["arguments"].as_str().unwrap())
        .collect();
    let parsed: Value = serde_json::from_str(&args).expect("arguments join to JSON");
    assert!(parsed["query"].is_string());
    assert_eq!(finish_reasons(&r), [json!("tool_calls")]);
}

#[tokio::test(start_paused = true)]
async fn f19_multi_token_chunks_carry_token_ids() {
    let (r, state) = with_fault("multi_token", &[], chat(10)).await;
    let chunks = r.chunks();
    let ids: Vec<usize> = chunks[1..]
        .iter()
        .map(|c| c["choices"][0]["token_ids"].as_array().unwrap().len())
        .collect();
    assert_eq!(ids, [4, 4, 2]);
    let words: Vec<usize> = r
        .contents()
        .iter()
        .map(|c| c.split_whitespace().count())
        .collect();
    assert_eq!(words, ids);
    assert_eq!(state.send_log().snapshot()[0].tokens, [4, 4, 2]);
}

#[tokio::test(start_paused = true)]
async fn f20_no_usage_even_when_asked() {
    let (r, _) = with_fault("no_usage", &[], with_usage(6)).await;
    normal_shape(&r);
    assert!(!r.text().contains("usage"));
}

#[tokio::test(start_paused = true)]
async fn f21_split_utf8_cuts_frames_inside_a_character() {
    let r = fault("split_utf8").await;
    assert!(r
        .frames
        .iter()
        .any(|(_, b)| std::str::from_utf8(b).is_err()));
    let text = r.text(); // the whole body is valid UTF-8
    assert!(!text.contains('\u{FFFD}'));
    normal_shape(&r);
    assert!(r.contents().iter().all(|c| !c.is_ascii()));
}

#[tokio::test(start_paused = true)]
async fn f22_model_text_contains_data_prefix() {
    let r = fault("data_prefix_text").await;
    normal_shape(&r);
    let text: String = r.contents().concat();
    assert!(text.contains("data: "), "{text}");
}

#[tokio::test(start_paused = true)]
async fn f23_huge_event_is_over_one_mebibyte() {
    let r = fault("huge_event").await;
    let biggest = r.text().split("\n\n").map(str::len).max().unwrap();
    assert!(biggest > 1 << 20, "{biggest}");
    normal_shape(&r);
}

#[tokio::test(start_paused = true)]
async fn f24_invalid_json_event() {
    let r = fault("invalid_json").await;
    let events = r.events();
    let invalid: Vec<&String> = events
        .iter()
        .filter(|e| *e != "[DONE]" && serde_json::from_str::<Value>(e).is_err())
        .collect();
    assert_eq!(invalid.len(), 1);
    normal_shape(&r);
}

#[tokio::test(start_paused = true)]
async fn f25_ndjson_stream() {
    let (r, _) = with_fault("ndjson", &[], with_usage(6)).await;
    assert_eq!(r.header("content-type"), Some("application/x-ndjson"));
    let text = r.text();
    assert!(!text.contains("data:"));
    let lines: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 1 + 6 + 1);
    assert_eq!(lines.iter().filter_map(content_of).count(), 6);
    assert_eq!(lines.last().unwrap()["usage"]["completion_tokens"], 6);
}

#[tokio::test(start_paused = true)]
async fn f26_html_200() {
    let r = fault("html_200").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/html; charset=utf-8"));
    assert!(r.text().starts_with("<!DOCTYPE html>"));
}

#[tokio::test(start_paused = true)]
async fn f28_header_delay_holds_the_headers() {
    let (r, _) = with_fault("header_delay", &[("x-cadence-stall-ms", "3000")], chat(2)).await;
    assert_eq!(r.head_after, ms(3000));
    assert_eq!(r.contents().len(), 2);
    // The token cadence starts after the headers: TTFT 50 ms later.
    assert_eq!(r.frames[1].0, ms(3050));
    let (r, _) = with_fault("header_delay", &[], chat(1)).await;
    assert_eq!(r.head_after, Duration::from_secs(10), "default delay");
}

#[tokio::test(start_paused = true)]
async fn f29_no_tokens_after_the_headers() {
    let (r, state) = with_fault("no_tokens", &[("x-cadence-stall-ms", "60000")], chat(6)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.chunks().len(), 1, "only the role chunk");
    assert!(r.contents().is_empty());
    assert!(r.error.is_none());
    let ended = state.send_log().snapshot()[0].clone();
    assert!(ended.chunks_ns.is_empty());
    assert!(ended.finished);
    let (r, _) = with_fault("no_tokens", &[], chat(6)).await;
    assert!(
        r.contents().is_empty(),
        "default silence of an hour, in paused time"
    );
}

#[tokio::test(start_paused = true)]
async fn f30_stall_after_chunk_k() {
    let headers = [
        ("x-cadence-stall-ms", "4000"),
        ("x-cadence-stall-after", "3"),
    ];
    let (r, state) = with_fault("stall", &headers, chat(6)).await;
    normal_shape(&r);
    let s = &state.send_log().snapshot()[0];
    assert_eq!(
        gaps(&s.chunks_ns),
        [
            10_000_000,
            10_000_000,
            4_010_000_000,
            10_000_000,
            10_000_000
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn f31_stall_headers_work_without_the_fault_and_the_fault_has_defaults() {
    let headers = [
        ("x-cadence-stall-ms", "500"),
        ("x-cadence-stall-after", "0"),
    ];
    let state = SimState::new(fixed_config());
    post_chat(&state, &headers, chat(2)).await;
    let s = &state.send_log().snapshot()[0];
    assert_eq!(
        s.chunks_ns[0] - s.received_ns,
        550_000_000,
        "stall before the first chunk"
    );

    let (_, state) = with_fault("stall", &[], chat(3)).await;
    let s = &state.send_log().snapshot()[0];
    assert_eq!(
        gaps(&s.chunks_ns),
        [2_010_000_000, 10_000_000],
        "2 s after chunk 1"
    );
}

#[tokio::test(start_paused = true)]
async fn f32_reset_ends_the_body_with_an_error() {
    let (r, state) = with_fault("reset", &[], chat(6)).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.contents().len(), 3);
    assert!(
        r.error.as_deref().unwrap().contains("reset"),
        "{:?}",
        r.error
    );
    assert!(!r.text().contains("[DONE]"));
    let s = &state.send_log().snapshot()[0];
    assert_eq!(s.tokens.len(), 3);
    assert_eq!(s.fault.as_deref(), Some("reset"));
}

#[tokio::test(start_paused = true)]
async fn f33_status_429_and_503_with_retry_after() {
    for (name, status) in [("status_429", 429), ("status_503", 503)] {
        let r = fault(name).await;
        assert_eq!(r.status, status);
        assert_eq!(r.header("retry-after"), Some("1"));
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert_eq!(r.json()["error"]["code"], status);
    }
}

#[tokio::test(start_paused = true)]
async fn faults_apply_to_completions_too() {
    let state = SimState::new(fixed_config());
    let body = json!({"prompt": "p", "stream": true, "max_tokens": 4});
    let r = send(
        &state,
        "/v1/completions",
        &[("x-cadence-fault", "crlf")],
        body.clone(),
    )
    .await;
    assert!(r.text().contains("\"object\":\"text_completion\""));
    assert!(r.text().contains("\r\n\r\n"));
    let r = send(
        &state,
        "/v1/completions",
        &[("x-cadence-fault", "reset")],
        body,
    )
    .await;
    assert!(r.error.is_some());
}

#[tokio::test(start_paused = true)]
async fn every_fault_name_is_accepted() {
    for (_, name) in cadence_sim::Fault::ALL {
        let r = with_fault(name, &[("x-cadence-stall-ms", "100")], chat(4))
            .await
            .0;
        assert_ne!(r.status, 400, "{name}");
    }
}

/// FAULTS 34's slower sibling: from 200 ms after the sim's start, for 200 ms, the server
/// runs twice as slow. TTFT 50 ms and ITL 10 ms: the gaps of the chunks sent inside the
/// window take 20 ms, the others 10 ms, and the stream ends 100 ms late.
#[tokio::test(start_paused = true)]
async fn a_slow_down_doubles_the_gaps_inside_its_window_only() {
    let state = SimState::new(cadence_sim::SimConfig {
        slow: Some(cadence_sim::Slow {
            at: ms(200),
            duration: ms(200),
            factor: 2.0,
        }),
        ..fixed_config()
    });
    let r = post_chat(&state, &[], chat(40)).await;
    let at: Vec<u64> = r
        .content_times()
        .iter()
        .map(|(t, _)| t.as_millis() as u64)
        .collect();
    assert_eq!(at.len(), 40);
    assert_eq!(at[0], 50, "the first chunk is before the window: {at:?}");
    for (i, gap) in gaps(&at).into_iter().enumerate() {
        let sent = at[i + 1];
        let expected = if sent > 200 && sent <= 400 { 20 } else { 10 };
        assert!(
            gap.abs_diff(expected) <= 1,
            "chunk {} at {sent} ms came {gap} ms after the last: {at:?}",
            i + 1
        );
    }
    // 440 ms of plan, 100 ms of it stretched to 200.
    assert!(at[39].abs_diff(540) <= 1, "{at:?}");

    // A request after the window is untouched.
    tokio::time::sleep_until(tokio::time::Instant::now() + ms(500)).await;
    let r = post_chat(&state, &[], chat(5)).await;
    let at: Vec<u64> = r
        .content_times()
        .iter()
        .map(|(t, _)| t.as_millis() as u64)
        .collect();
    assert_eq!(at, vec![50, 60, 70, 80, 90]);
}

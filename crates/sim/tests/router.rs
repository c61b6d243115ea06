//! The sim's normal behaviour through its router (`oneshot`, paused time):
//! endpoints, the shape of chat and completions streams, usage options,
//! `max_tokens`, determinism and the send log.

mod common;

use std::time::Duration;

use cadence_sim::{plan, planned_delays, Dist, Overrides, SimConfig, SimState};
use common::*;
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn health_is_ok() {
    let r = get(&SimState::new(SimConfig::default()), "/health").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["status"], "ok");
}

#[tokio::test(start_paused = true)]
async fn models_lists_the_configured_model() {
    let state = SimState::new(SimConfig {
        model: "tiny-sim".into(),
        ..SimConfig::default()
    });
    let r = get(&state, "/v1/models").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["object"], "list");
    assert_eq!(r.json()["data"][0]["id"], "tiny-sim");
}

#[tokio::test(start_paused = true)]
async fn unknown_route_is_a_json_404() {
    let r = get(&SimState::new(SimConfig::default()), "/v2/nothing").await;
    assert_eq!(r.status, 404);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("/v1/chat/completions"));
}

#[tokio::test(start_paused = true)]
async fn chat_stream_has_role_content_finish_usage_and_done() {
    let state = SimState::new(fixed_config());
    let mut body = chat(5);
    body["stream_options"] = json!({"include_usage": true});
    let r = send(
        &state,
        "/v1/chat/completions",
        &[("x-cadence-burst", "2")],
        body,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.header("cache-control"), Some("no-cache"));
    assert_eq!(r.header("x-cadence-request"), Some("0"));
    assert!(r.error.is_none());

    let events = r.events();
    assert_eq!(events.last().unwrap(), "[DONE]");
    let chunks = r.chunks();
    assert_eq!(chunks.len(), 1 + 3 + 1, "role, 3 content chunks, usage");
    let role = &chunks[0];
    assert_eq!(role["object"], "chat.completion.chunk");
    assert_eq!(role["model"], "any-model");
    assert_eq!(role["choices"][0]["delta"]["role"], "assistant");
    assert_eq!(role["choices"][0]["delta"]["content"], "");
    assert!(role["id"].as_str().unwrap().starts_with("chatcmpl-"));
    assert!(role["created"].as_u64().unwrap() > 1_600_000_000);

    let contents = r.contents();
    let words: Vec<usize> = contents
        .iter()
        .map(|c| c.split_whitespace().count())
        .collect();
    assert_eq!(words, [2, 2, 1]);
    assert!(contents.iter().all(|c| c.starts_with(' ')));
    let finishes: Vec<&serde_json::Value> = chunks[1..4]
        .iter()
        .map(|c| &c["choices"][0]["finish_reason"])
        .collect();
    assert_eq!(finishes, [&json!(null), &json!(null), &json!("length")]);

    let usage = &chunks[4];
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(usage["usage"]["completion_tokens"], 5);
    assert_eq!(
        usage["usage"]["prompt_tokens"], 3,
        "three words in the prompt"
    );
    assert_eq!(usage["usage"]["total_tokens"], 8);
}

#[tokio::test(start_paused = true)]
async fn no_usage_unless_asked() {
    let r = send(
        &SimState::new(fixed_config()),
        "/v1/chat/completions",
        &[],
        chat(3),
    )
    .await;
    assert!(r.chunks().iter().all(|c| c.get("usage").is_none()));
    assert_eq!(r.contents().len(), 3);
    assert_eq!(r.events().last().unwrap(), "[DONE]");
}

#[tokio::test(start_paused = true)]
async fn continuous_usage_stats_put_running_usage_on_every_chunk() {
    let mut body = chat(3);
    body["stream_options"] = json!({"include_usage": true, "continuous_usage_stats": true});
    let r = send(
        &SimState::new(fixed_config()),
        "/v1/chat/completions",
        &[],
        body,
    )
    .await;
    let running: Vec<u64> = r
        .chunks()
        .iter()
        .map(|c| c["usage"]["completion_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(
        running,
        [0, 1, 2, 3, 3],
        "role, three tokens, final usage chunk"
    );
}

#[tokio::test(start_paused = true)]
async fn completions_stream_uses_text_and_no_role_chunk() {
    let body = json!({"model": "m", "prompt": "once upon a time", "stream": true, "max_tokens": 4,
                      "stream_options": {"include_usage": true}});
    let r = send(&SimState::new(fixed_config()), "/v1/completions", &[], body).await;
    assert_eq!(r.status, 200);
    let chunks = r.chunks();
    assert_eq!(chunks.len(), 5);
    assert!(chunks.iter().all(|c| c["object"] == "text_completion"));
    assert!(chunks[0]["choices"][0].get("delta").is_none());
    assert_eq!(r.contents().len(), 4);
    assert_eq!(chunks[3]["choices"][0]["finish_reason"], "length");
    assert_eq!(chunks[4]["usage"]["prompt_tokens"], 4);
    assert_eq!(r.events().last().unwrap(), "[DONE]");
}

#[tokio::test(start_paused = true)]
async fn max_tokens_is_honoured_and_defaults_to_config() {
    let state = SimState::new(SimConfig {
        default_max_tokens: 7,
        ..fixed_config()
    });
    let count = |r: &Reply| {
        r.contents()
            .iter()
            .map(|c| c.split_whitespace().count())
            .sum::<usize>()
    };
    let r = send(&state, "/v1/chat/completions", &[], chat(11)).await;
    assert_eq!(count(&r), 11);
    let mut body = chat(11);
    body["max_completion_tokens"] = json!(2);
    assert_eq!(
        count(&send(&state, "/v1/chat/completions", &[], body).await),
        2
    );
    let body = json!({"stream": true, "messages": []});
    assert_eq!(
        count(&send(&state, "/v1/chat/completions", &[], body).await),
        7
    );
}

#[tokio::test(start_paused = true)]
async fn non_stream_returns_one_completion_after_the_planned_delay() {
    let body =
        json!({"model": "m", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]});
    let r = send(
        &SimState::new(fixed_config()),
        "/v1/chat/completions",
        &[],
        body,
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.head_after, ms(50 + 3 * 10));
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(
        v["choices"][0]["message"]["content"]
            .as_str()
            .unwrap()
            .split_whitespace()
            .count(),
        4
    );
    assert_eq!(v["usage"]["completion_tokens"], 4);
}

#[tokio::test(start_paused = true)]
async fn fixed_itl_gives_exact_send_log_gaps() {
    let state = SimState::new(fixed_config());
    let r = send(&state, "/v1/chat/completions", &[], chat(6)).await;
    let log = state.send_log().snapshot();
    assert_eq!(log.len(), 1);
    let s = &log[0];
    assert!(s.finished);
    assert_eq!(s.request, 0);
    assert_eq!(s.fault, None);
    assert_eq!(s.tokens, [1; 6]);
    assert_eq!(s.chunks_ns[0] - s.received_ns, 50_000_000);
    assert_eq!(gaps(&s.chunks_ns), [10_000_000; 5]);
    // In paused time the client reads each frame at the instant it was sent.
    let content_frames: Vec<Duration> = r
        .frames
        .iter()
        .filter(|(_, b)| String::from_utf8_lossy(b).contains("\"content\":\" "))
        .map(|(t, _)| *t)
        .collect();
    let expected: Vec<Duration> = (0..6).map(|i| ms(50 + 10 * i)).collect();
    assert_eq!(content_frames, expected);
}

#[tokio::test(start_paused = true)]
async fn the_random_schedule_is_followed_exactly() {
    let config = SimConfig {
        seed: 99,
        ttft: Dist::Uniform(ms(20), ms(60)),
        itl: Dist::LogNormal {
            mean: ms(10),
            stddev: ms(4),
        },
        stall_probability: 0.2,
        stall: Dist::Fixed(ms(300)),
        ..SimConfig::default()
    };
    let state = SimState::new(config.clone());
    for _ in 0..3 {
        send(&state, "/v1/chat/completions", &[], chat(20)).await;
    }
    // Deadlines are absolute and tokio's timer ticks every millisecond, so
    // each chunk leaves within 1 ms after its planned offset, never drifting.
    for s in state.send_log().snapshot() {
        let mut planned = Duration::ZERO;
        let delays = planned_delays(&config, s.request, 20);
        assert_eq!(delays.len(), s.chunks_ns.len());
        for (delay, sent_ns) in delays.iter().zip(&s.chunks_ns) {
            planned += *delay;
            let sent = Duration::from_nanos(sent_ns - s.received_ns);
            assert!(
                sent >= planned && sent - planned < ms(1),
                "request {}: sent at {sent:?}, planned {planned:?}",
                s.request
            );
        }
    }
}

#[tokio::test(start_paused = true)]
async fn same_seed_same_text_and_timings() {
    let config = SimConfig {
        seed: 7,
        ..SimConfig::default()
    };
    let run = || async {
        let state = SimState::new(config.clone());
        let mut texts = Vec::new();
        for _ in 0..3 {
            texts.push(
                send(&state, "/v1/chat/completions", &[], chat(16))
                    .await
                    .contents(),
            );
        }
        let timings: Vec<Vec<u64>> = state
            .send_log()
            .snapshot()
            .iter()
            .map(|s| s.chunks_ns.iter().map(|t| t - s.received_ns).collect())
            .collect();
        (texts, timings)
    };
    let (a_text, a_time) = run().await;
    let (b_text, b_time) = run().await;
    assert_eq!(a_text, b_text);
    assert_eq!(a_time, b_time);
    assert_ne!(a_text[0], a_text[1], "requests differ from each other");

    let other = SimState::new(SimConfig {
        seed: 8,
        ..config.clone()
    });
    let c = send(&other, "/v1/chat/completions", &[], chat(16))
        .await
        .contents();
    assert_ne!(c, a_text[0]);
}

#[tokio::test(start_paused = true)]
async fn request_header_pins_the_plan_and_is_echoed() {
    let config = fixed_config();
    let state = SimState::new(config.clone());
    let r = send(
        &state,
        "/v1/chat/completions",
        &[("x-cadence-request", "41")],
        chat(4),
    )
    .await;
    assert_eq!(r.header("x-cadence-request"), Some("41"));
    let expected = plan(&config, 41, 4, &Overrides::default());
    let words: Vec<String> = expected
        .chunks
        .iter()
        .map(|c| {
            let mut s = String::new();
            cadence_sim::text::Vocabulary::Plain.push_text(&c.tokens, &mut s);
            s
        })
        .collect();
    assert_eq!(r.contents(), words);
    assert_eq!(state.send_log().snapshot()[0].request, 41);
}

#[tokio::test(start_paused = true)]
async fn header_overrides_set_the_cadence() {
    let state = SimState::new(SimConfig::default());
    let headers = [
        ("x-cadence-ttft-ms", "5"),
        ("x-cadence-itl-ms", "3"),
        ("x-cadence-burst", "2"),
    ];
    send(&state, "/v1/chat/completions", &headers, chat(6)).await;
    let s = &state.send_log().snapshot()[0];
    assert_eq!(s.tokens, [2, 2, 2]);
    assert_eq!(s.chunks_ns[0] - s.received_ns, 5_000_000);
    assert_eq!(gaps(&s.chunks_ns), [3_000_000, 3_000_000]);
}

#[tokio::test(start_paused = true)]
async fn bad_requests_are_400_with_a_reason() {
    let state = SimState::new(SimConfig::default());
    let r = send(
        &state,
        "/v1/chat/completions",
        &[("x-cadence-itl-ms", "fast")],
        chat(2),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("x-cadence-itl-ms"));
    let r = send(
        &state,
        "/v1/chat/completions",
        &[("x-cadence-burst", "0")],
        chat(2),
    )
    .await;
    assert_eq!(r.status, 400);
    let r = send(
        &state,
        "/v1/chat/completions",
        &[],
        json!({"max_tokens": -1}),
    )
    .await;
    assert_eq!(r.status, 400);
    let r = send(
        &state,
        "/v1/chat/completions",
        &[],
        json!({"max_tokens": 0}),
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("max_tokens"));
}

#[tokio::test(start_paused = true)]
async fn unknown_fault_is_400_listing_valid_names() {
    let state = SimState::new(SimConfig::default());
    let r = send(
        &state,
        "/v1/chat/completions",
        &[("x-cadence-fault", "gremlins")],
        chat(2),
    )
    .await;
    assert_eq!(r.status, 400);
    let err = &r.json()["error"];
    assert!(err["message"].as_str().unwrap().contains("gremlins"));
    let valid = err["valid_faults"].as_array().unwrap();
    assert_eq!(valid.len(), cadence_sim::Fault::ALL.len());
    assert!(valid.contains(&json!("split_bytes")));

    let mut body = chat(2);
    body["model"] = json!("fault/gremlins");
    let r = send(&state, "/v1/chat/completions", &[], body).await;
    assert_eq!(r.status, 400);
}

#[tokio::test(start_paused = true)]
async fn fault_can_be_chosen_by_model_name() {
    let state = SimState::new(fixed_config());
    let mut body = chat(3);
    body["model"] = json!("fault/crlf");
    let r = send(&state, "/v1/chat/completions", &[], body).await;
    assert!(r.text().contains("\r\n\r\n"));
    assert_eq!(
        state.send_log().snapshot()[0].fault.as_deref(),
        Some("crlf")
    );
}

#[tokio::test(start_paused = true)]
async fn chat_only_faults_are_refused_on_completions() {
    let state = SimState::new(SimConfig::default());
    let body = json!({"prompt": "x", "stream": true});
    let r = send(
        &state,
        "/v1/completions",
        &[("x-cadence-fault", "tool_calls")],
        body,
    )
    .await;
    assert_eq!(r.status, 400);
    assert!(r.json()["error"]["message"]
        .as_str()
        .unwrap()
        .contains("chat"));
}

#[tokio::test(start_paused = true)]
async fn an_abandoned_stream_is_logged_unfinished() {
    let state = SimState::new(fixed_config());
    // Role chunk and the first two content chunks, then hang up.
    hang_up_after(&state, chat(10), 3).await;
    let log = state.send_log().snapshot();
    assert_eq!(log.len(), 1);
    assert!(!log[0].finished);
    assert_eq!(log[0].tokens, [1, 1]);
}

#[tokio::test(start_paused = true)]
async fn send_log_capacity_zero_keeps_nothing_in_memory() {
    let state = SimState::with_send_log(fixed_config(), cadence_sim::SendLog::with_capacity(0));
    send(&state, "/v1/chat/completions", &[], chat(2)).await;
    assert!(state.send_log().is_empty());
}

//! The sim timed by the engine model, under tokio's paused clock: chunks leave when
//! the model's steps end (within the timer's 1 ms), batching stretches the gaps,
//! speculation sends multi-token chunks, faults still apply, `/metrics` tells the
//! server's side.

mod common;

use std::time::Duration;

use cadence_engine::{preset, EngineSpec, Speculation};
use cadence_sim::{Freeze, SimConfig, SimState, Slow};
use common::{chat, get, post_chat, with_usage};

fn quiet(name: &str) -> EngineSpec {
    let mut s = preset(name).unwrap();
    s.serving.jitter = 0.0;
    s
}

fn engine_config(spec: EngineSpec) -> SimConfig {
    SimConfig {
        engine: Some(spec),
        ..SimConfig::default()
    }
}

fn near(a: Duration, b_ns: u64) -> bool {
    let a = a.as_nanos() as i128;
    // The tokio timer fires on whole milliseconds.
    (a - b_ns as i128).abs() <= 1_000_000
}

#[tokio::test(start_paused = true)]
async fn chunks_leave_when_the_models_steps_end() {
    let spec = quiet("llama-3.1-70b@h100-fp8");
    let state = SimState::new(engine_config(spec.clone()));
    let r = post_chat(&state, &[], chat(4)).await;
    assert_eq!(r.status, 200);
    let got = r.content_times();
    assert_eq!(got.iter().map(|c| c.1).collect::<Vec<_>>(), [1, 1, 1, 1]);
    // "say something nice" is 3 prompt tokens: a prefill step, then decode steps
    // at contexts 4, 5, 6.
    let prefill = (spec.weight_bytes() + spec.kv_bytes_per_token() * 3.0) / spec.bandwidth()
        + (spec.serving.step_overhead_us + 80.0 * spec.serving.layer_overhead_us) * 1e-6;
    let mut t = (prefill * 1e9).round() as u64;
    assert!(near(got[0].0, t), "{got:?} vs {t}");
    for (i, ctx) in [4u64, 5, 6].iter().enumerate() {
        t += (spec.decode_step_s(1, *ctx) * 1e9).round() as u64;
        assert!(near(got[i + 1].0, t), "{got:?}");
    }
    // ~30 ms per token: a 70B model in fp8 on one H100 (25 ms of weights, 80 layers'
    // 60 µs floor, 0.7 ms a step).
    let gap = got[2].0 - got[1].0;
    assert!((29..=32).contains(&gap.as_millis()), "{gap:?}");
}

/// Median gap between chunks of `concurrency` streams with 1000-token prompts.
async fn median_gap_ms(concurrency: usize) -> f64 {
    let state = SimState::new(engine_config(quiet("llama-3.1-8b@h100-bf16")));
    let mut body = chat(32);
    body["messages"][0]["content"] = "word ".repeat(1000).into();
    let replies = futures_util::future::join_all(
        (0..concurrency).map(|_| post_chat(&state, &[], body.clone())),
    )
    .await;
    let mut gaps = Vec::new();
    for r in &replies {
        let t = r.content_times();
        assert_eq!(t.iter().map(|c| c.1).sum::<u32>(), 32);
        gaps.extend(t.windows(2).map(|w| (w[1].0 - w[0].0).as_secs_f64() * 1e3));
    }
    gaps.sort_by(f64::total_cmp);
    gaps[gaps.len() / 2]
}

#[tokio::test(start_paused = true)]
async fn concurrent_streams_share_steps_and_each_gap_grows() {
    let one = median_gap_ms(1).await;
    let many = median_gap_ms(64).await;
    // 16 GB of weights at 2.85 TB/s, 0.7 ms a step and 32 layers' 60 µs floor.
    assert!(one > 7.5 && one < 9.5, "{one}");
    // 64 sequences at ~1000 tokens read 8.4 GB of KV per step beside 16 GB of weights.
    assert!(many > one * 1.3, "1: {one} ms, 64: {many} ms");
}

#[tokio::test(start_paused = true)]
async fn speculation_sends_chunks_of_several_tokens() {
    let mut spec = quiet("llama-3.1-8b@h100-fp8");
    spec.serving.speculation = Some(Speculation {
        k: 4,
        alpha: 0.8,
        draft_us: 0.0,
        draft_fraction: 0.0,
    });
    let state = SimState::new(engine_config(spec));
    let r = post_chat(&state, &[], with_usage(300)).await;
    let sizes: Vec<u32> = r.content_times().iter().map(|c| c.1).collect();
    assert_eq!(sizes.iter().sum::<u32>(), 300);
    assert!(sizes.iter().all(|&n| (1..=5).contains(&n)), "{sizes:?}");
    assert!(sizes.iter().filter(|&&n| n > 1).count() > sizes.len() / 2);
    // The prefill's token, then ~300 / 3.36 verification steps.
    let mean = (300 - 1) as f64 / (sizes.len() - 1) as f64;
    assert!((2.8..4.0).contains(&mean), "{mean}");
    let usage = r.chunks().last().unwrap()["usage"].clone();
    assert_eq!(usage["completion_tokens"], 300);
    assert!(r.text().ends_with("data: [DONE]\n\n"));
}

#[tokio::test(start_paused = true)]
async fn faults_still_apply_on_an_engine_sim() {
    let state = SimState::new(engine_config(quiet("tiny@cpu")));
    let r = post_chat(
        &state,
        &[("x-cadence-fault", "error_after_tokens")],
        chat(8),
    )
    .await;
    assert!(
        r.text().contains("generation failed mid-stream"),
        "{}",
        r.text()
    );
    assert!(!r.text().contains("[DONE]"));
    let r = post_chat(&state, &[("x-cadence-fault", "status_429")], chat(8)).await;
    assert_eq!(r.status, 429);
}

#[tokio::test(start_paused = true)]
async fn a_freeze_stops_the_engine_for_its_duration() {
    let config = SimConfig {
        freeze: Some(Freeze {
            at: Duration::ZERO,
            duration: Duration::from_secs(2),
        }),
        ..engine_config(quiet("tiny@cpu"))
    };
    let state = SimState::new(config);
    let r = post_chat(&state, &[], chat(3)).await;
    let t = r.content_times();
    assert_eq!(t.len(), 3);
    assert!(t[0].0 >= Duration::from_secs(2), "{t:?}");
    assert!(t[2].0 < Duration::from_millis(2100), "{t:?}");
}

#[tokio::test(start_paused = true)]
async fn a_slow_down_stretches_the_engines_steps_by_its_factor() {
    let gaps = |r: &common::Reply| -> Vec<f64> {
        let t = r.content_times();
        t.windows(2)
            .map(|w| (w[1].0 - w[0].0).as_secs_f64() * 1e3)
            .collect()
    };
    let normal = post_chat(
        &SimState::new(engine_config(quiet("tiny@cpu"))),
        &[],
        chat(20),
    )
    .await;
    let config = SimConfig {
        slow: Some(Slow {
            at: Duration::ZERO,
            duration: Duration::from_secs(60),
            factor: 3.0,
        }),
        ..engine_config(quiet("tiny@cpu"))
    };
    let slow = post_chat(&SimState::new(config), &[], chat(20)).await;
    let (normal, slow) = (gaps(&normal), gaps(&slow));
    assert_eq!(normal.len(), 19);
    assert_eq!(slow.len(), 19);
    for (n, s) in normal.iter().zip(&slow) {
        // Within the timer's 1 ms either way.
        assert!((s - 3.0 * n).abs() <= 2.0, "{n} ms then {s} ms: {slow:?}");
    }
}

#[tokio::test(start_paused = true)]
async fn unstreamed_and_oversized_requests() {
    let mut spec = quiet("tiny@cpu");
    spec.serving.kv_capacity_tokens = Some(64);
    let state = SimState::new(engine_config(spec));
    let mut body = chat(10);
    body["stream"] = false.into();
    let r = post_chat(&state, &[], body).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.json()["usage"]["completion_tokens"], 10);
    let r = post_chat(&state, &[], chat(100)).await;
    assert_eq!(r.status, 400);
    assert!(
        r.text().contains("KV cache holds 64 tokens"),
        "{}",
        r.text()
    );
}

#[tokio::test(start_paused = true)]
async fn metrics_tell_the_servers_side() {
    let state = SimState::new(engine_config(quiet("tiny@cpu")));
    futures_util::future::join_all((0..4).map(|_| post_chat(&state, &[], chat(5)))).await;
    let r = get(&state, "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(r.header("content-type").unwrap().contains("openmetrics"));
    let text = r.text();
    let value = |name: &str| -> f64 {
        let line = text
            .lines()
            .find(|l| l.starts_with(name) && l[name.len()..].starts_with('{'))
            .unwrap_or_else(|| panic!("{name} missing in\n{text}"));
        line.rsplit(' ').next().unwrap().parse().unwrap()
    };
    assert_eq!(value("vllm:generation_tokens_total"), 20.0);
    assert_eq!(value("vllm:prompt_tokens_total"), 12.0);
    assert_eq!(value("vllm:request_success_total"), 4.0);
    assert_eq!(value("vllm:num_requests_running"), 0.0);
    assert_eq!(value("vllm:num_requests_waiting"), 0.0);
    assert_eq!(value("vllm:request_queue_time_seconds_count"), 4.0);
    assert_eq!(value("vllm:request_prefill_time_seconds_count"), 4.0);
    // All four arrive together: one prefill step, then four decode steps of batch 4.
    assert_eq!(value("cadence_sim_step_batch_size_count"), 5.0);
    assert_eq!(value("cadence_sim_step_batch_size_sum"), 16.0);
    assert!(text.contains(r#"model_name="cadence-sim""#));
    assert!(text.ends_with("# EOF\n"));
}

#[tokio::test]
async fn flat_sims_serve_metrics_too() {
    let state = SimState::new(SimConfig::default());
    let r = get(&state, "/metrics").await;
    assert_eq!(r.status, 200);
    assert!(r.text().contains("cadence_sim_requests_received_total"));
    assert!(!r.text().contains("vllm:"));
}

#[tokio::test(start_paused = true)]
async fn a_client_that_goes_away_is_aborted_and_frees_its_slot() {
    let state = SimState::new(engine_config(quiet("tiny@cpu")));
    common::hang_up_after(&state, chat(1000), 3).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let text = get(&state, "/metrics").await.text();
    let has = |line: &str| text.lines().any(|l| l.starts_with(line));
    assert!(
        has("cadence_sim_requests_aborted_total{model_name=\"cadence-sim\"} 1"),
        "{text}"
    );
    assert!(
        has("vllm:num_requests_running{model_name=\"cadence-sim\"} 0"),
        "{text}"
    );
    assert!(
        has("vllm:request_success_total{model_name=\"cadence-sim\"} 0"),
        "{text}"
    );
}

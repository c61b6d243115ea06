//! Shared helpers for the sim's integration tests: drive the router with
//! `oneshot`, keep every body frame with its (tokio) arrival time, and parse
//! SSE naively so the tests do not depend on the client's parser.
#![allow(dead_code)]

use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, Request, StatusCode};
use bytes::Bytes;
use cadence_sim::{app, Dist, SimConfig, SimState};
use http_body_util::BodyExt;
use serde_json::Value;
use tokio::time::Instant;
use tower::ServiceExt;

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// A config with a fixed, easy cadence: TTFT 50 ms, ITL 10 ms.
pub fn fixed_config() -> SimConfig {
    SimConfig {
        ttft: Dist::Fixed(ms(50)),
        itl: Dist::Fixed(ms(10)),
        ..SimConfig::default()
    }
}

#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    /// Time from sending the request until the response head was returned.
    pub head_after: Duration,
    /// Each body frame with the time (since the request) it was read.
    pub frames: Vec<(Duration, Bytes)>,
    /// The body error, if the body ended with one.
    pub error: Option<String>,
}

pub async fn send(state: &SimState, path: &str, headers: &[(&str, &str)], body: Value) -> Reply {
    let mut req = Request::post(path).header("content-type", "application/json");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    let req = req.body(Body::from(body.to_string())).unwrap();
    let t0 = Instant::now();
    let resp = app(state.clone()).oneshot(req).await.unwrap();
    let head_after = t0.elapsed();
    let (parts, mut body) = resp.into_parts();
    let mut frames = Vec::new();
    let mut error = None;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => {
                if let Ok(data) = f.into_data() {
                    frames.push((t0.elapsed(), data));
                }
            }
            Err(e) => {
                error = Some(e.to_string());
                break;
            }
        }
    }
    Reply {
        status: parts.status,
        headers: parts.headers,
        head_after,
        frames,
        error,
    }
}

pub async fn get(state: &SimState, path: &str) -> Reply {
    let req = Request::get(path).body(Body::empty()).unwrap();
    let resp = app(state.clone()).oneshot(req).await.unwrap();
    let (parts, body) = resp.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    Reply {
        status: parts.status,
        headers: parts.headers,
        head_after: Duration::ZERO,
        frames: vec![(Duration::ZERO, bytes)],
        error: None,
    }
}

/// Sends a chat stream request, reads `frames` body frames, then hangs up (drops
/// the body) as a client that goes away does.
pub async fn hang_up_after(state: &SimState, body: Value, frames: usize) {
    let req = Request::post("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let resp = app(state.clone()).oneshot(req).await.unwrap();
    let mut body = resp.into_body();
    for _ in 0..frames {
        body.frame().await.unwrap().unwrap();
    }
}

/// A chat stream request body.
pub fn chat(max_tokens: u32) -> Value {
    serde_json::json!({
        "model": "any-model",
        "stream": true,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "say something nice"}],
    })
}

impl Reply {
    pub fn bytes(&self) -> Vec<u8> {
        self.frames
            .iter()
            .flat_map(|(_, b)| b.iter().copied())
            .collect()
    }

    pub fn text(&self) -> String {
        String::from_utf8(self.bytes()).expect("body is UTF-8")
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.bytes()).expect("body is JSON")
    }

    /// Naive SSE: events split on a blank line, LF only; the data lines of
    /// each event joined with `\n`, one leading space stripped.
    pub fn events(&self) -> Vec<String> {
        self.text()
            .split("\n\n")
            .filter(|e| !e.trim().is_empty())
            .filter_map(|e| {
                let data: Vec<&str> = e
                    .lines()
                    .filter_map(|l| l.strip_prefix("data:"))
                    .map(|d| d.strip_prefix(' ').unwrap_or(d))
                    .collect();
                (!data.is_empty()).then(|| data.join("\n"))
            })
            .collect()
    }

    /// The events whose data is JSON.
    pub fn chunks(&self) -> Vec<Value> {
        self.events()
            .iter()
            .filter_map(|d| serde_json::from_str(d).ok())
            .collect()
    }

    /// Content chunks: chat `delta.content` or completions `text`, non-empty.
    pub fn contents(&self) -> Vec<String> {
        self.chunks().iter().filter_map(content_of).collect()
    }
}

pub fn content_of(chunk: &Value) -> Option<String> {
    let choice = chunk.get("choices")?.get(0)?;
    let text = choice
        .pointer("/delta/content")
        .or_else(|| choice.get("text"))?
        .as_str()?;
    (!text.is_empty()).then(|| text.to_owned())
}

/// Gaps between consecutive entries.
pub fn gaps(times: &[u64]) -> Vec<u64> {
    times.windows(2).map(|w| w[1] - w[0]).collect()
}

//! `GET /v1/realtime`: the sim over WebSocket. The client sends OpenAI Realtime events
//! (`conversation.item.create`, then `response.create`); the sim answers with the same
//! planned stream (and the same faults) as its HTTP endpoints, one text message per
//! event, each at its planned time. A session answers one `response.create` after
//! another until the client leaves; a faulty response ends it.

use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use tokio::time::Instant;

use crate::fault::Fault;
use crate::openai::Dialect;
use crate::request::{bad_request, prompt_tokens, Controls, DEFAULT_SILENCE};
use crate::script::{self, StreamSpec};
use crate::state::SimState;

/// The upgrade: the fault and controls come from the handshake's headers.
pub(crate) async fn handler(
    State(state): State<SimState>,
    headers: HeaderMap,
    ws: WebSocketUpgrade,
) -> Response {
    let controls = match Controls::from_headers(&headers) {
        Ok(c) => c,
        Err(e) => return bad_request(&e),
    };
    ws.on_upgrade(move |socket| session(state, controls, socket))
        .into_response()
}

/// What the client asked for before `response.create`.
#[derive(Default)]
struct Ask {
    prompt_tokens: u32,
    max_tokens: Option<u32>,
}

/// Reads client events until `response.create`; `None` when the client left first.
async fn ask(socket: &mut WebSocket) -> Option<Ask> {
    let mut ask = Ask::default();
    while let Some(Ok(msg)) = socket.recv().await {
        let Message::Text(text) = msg else { continue };
        let Ok(event) = serde_json::from_str::<Value>(text.as_str()) else {
            continue;
        };
        match event.get("type").and_then(Value::as_str) {
            Some("conversation.item.create") => {
                let parts = event.pointer("/item/content").cloned();
                let texts: Vec<Value> = parts
                    .and_then(|p| p.as_array().cloned())
                    .unwrap_or_default()
                    .into_iter()
                    .filter_map(|p| p.get("text").cloned())
                    .collect();
                ask.prompt_tokens += prompt_tokens(None, Some(&Value::Array(texts)));
            }
            Some("response.create") => {
                ask.max_tokens = event
                    .pointer("/response/max_output_tokens")
                    .and_then(Value::as_u64)
                    .and_then(|n| u32::try_from(n).ok())
                    .filter(|&n| n > 0);
                return Some(ask);
            }
            _ => {}
        }
    }
    None
}

/// Answers each `response.create` in turn, until the client leaves; a response with a
/// fault ends the session as the fault says (a close frame, or a cut).
async fn session(state: SimState, controls: Controls, mut socket: WebSocket) {
    while let Some(ask) = ask(&mut socket).await {
        match respond(&state, &controls, ask, &mut socket).await {
            Next::Ask => {}
            Next::Close => {
                let _ = socket.send(Message::Close(None)).await;
                return;
            }
            Next::Cut => return,
        }
    }
}

/// What the session does after a response.
enum Next {
    Ask,
    Close,
    Cut,
}

async fn respond(state: &SimState, controls: &Controls, ask: Ask, socket: &mut WebSocket) -> Next {
    let received = Instant::now();
    let request = state.next_request(controls.request);
    let config = state.config();
    let max_tokens = ask.max_tokens.unwrap_or(config.default_max_tokens).max(1);
    let fault = controls
        .fault
        .filter(|f| !f.openai_only() && !f.chat_only());
    let plan = crate::plan::plan(config, request, max_tokens, &controls.overrides(fault));
    let id = format!("resp_cadence_{request}");
    let script = script::build(&StreamSpec {
        dialect: Dialect::Realtime,
        fault,
        plan: &plan,
        id: &id,
        created: 0,
        model: &config.model,
        prompt_tokens: ask.prompt_tokens,
        include_usage: true,
        continuous_usage: false,
        token_ids: false,
        fault_after: controls.fault_after,
        silence: controls.stall.unwrap_or(DEFAULT_SILENCE),
        calls: None,
    });
    let mut kill = state.kill();
    let clock = state.clock();
    let mut line = Vec::new();
    for frame in script.frames {
        if !kill.sleep_until(clock.due(received, frame.at)).await {
            return Next::Cut;
        }
        // A frame may end inside an event (split faults): a message is a whole line.
        for &b in frame.bytes.iter() {
            if b != b'\n' {
                line.push(b);
                continue;
            }
            let text = String::from_utf8_lossy(&line).into_owned();
            line.clear();
            if socket.send(Message::text(text)).await.is_err() {
                return Next::Cut;
            }
        }
    }
    if let Some(at) = script.end_at {
        if !kill.sleep_until(clock.due(received, at)).await {
            return Next::Cut;
        }
    }
    match fault {
        // Cut without a close frame.
        _ if script.reset => Next::Cut,
        Some(Fault::Reset) => Next::Cut,
        Some(_) => Next::Close,
        None => Next::Ask,
    }
}

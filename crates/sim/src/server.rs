//! The HTTP face of the sim: routes, per-request fault selection, and a
//! server handle with graceful shutdown that cuts streams still running when
//! the drain timeout passes (a `no_tokens` stream would otherwise hold it 1 h).

use std::future::{Future, IntoFuture};
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use rand::Rng;

use crate::config::SimConfig;
use crate::dialects::{self, Timing};
use crate::engine_mode::{self, Emit, EngineHandle, EngineStream};
use crate::fault::Fault;
use crate::history;
use crate::openai::{error_body, Dialect, Usage, Writer};
use crate::plan::{plan, TEXT as TEXT_STREAM};
use crate::request::{
    bad_request, headers, ApiRequest, Controls, RequestError, DEFAULT_HEADER_DELAY, DEFAULT_SILENCE,
};
use crate::rng::SimRng;
use crate::script::{self, StreamSpec};
use crate::send_log::{Recorder, SendLog};
use crate::state::SimState;
use crate::stream;
use crate::text::Vocabulary;
use crate::tools::{self, CallPlan, ToolPolicy, ToolStream};

/// Largest accepted request body (long-context prompts are big).
pub const MAX_REQUEST_BYTES: usize = 64 << 20;

/// The sim's routes: `POST /v1/chat/completions`, `POST /v1/completions`,
/// `GET /v1/models`, `GET /health`.
pub fn app(state: SimState) -> Router {
    Router::new()
        .route("/health", get(health))
        .route("/v1/models", get(models))
        .route("/metrics", get(metrics))
        .route("/v1/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route(
            "/v1/responses",
            post(dialect_route(Dialect::Responses, None)),
        )
        .route(
            "/v1/messages",
            post(dialect_route(Dialect::Anthropic, None)),
        )
        .route("/api/chat", post(dialect_route(Dialect::OllamaChat, None)))
        .route(
            "/api/generate",
            post(dialect_route(Dialect::OllamaGenerate, None)),
        )
        .route("/api/tags", get(ollama_tags))
        .route("/generate_stream", post(dialect_route(Dialect::Tgi, None)))
        .route("/generate", post(dialect_route(Dialect::Sglang, None)))
        .route("/info", get(tgi_info))
        .route(
            "/v2/models/{model}/generate_stream",
            post(dialect_route(Dialect::Kserve, None)),
        )
        .route(
            "/v2/models/{model}/generate",
            post(dialect_route(Dialect::Kserve, Some(false))),
        )
        .route("/completion", post(dialect_route(Dialect::Llamacpp, None)))
        .route("/v1/realtime", get(crate::realtime::handler))
        .fallback(not_found)
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
        .with_state(state)
}

async fn health() -> Response {
    json_response(StatusCode::OK, r#"{"status":"ok"}"#.to_owned())
}

async fn models(State(state): State<SimState>) -> Response {
    let body = serde_json::json!({
        "object": "list",
        "data": [{
            "id": state.config().model,
            "object": "model",
            "created": 0,
            "owned_by": "cadence-sim",
        }],
    });
    json_response(StatusCode::OK, body.to_string())
}

async fn metrics(State(state): State<SimState>) -> Response {
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics().render(),
    )
        .into_response()
}

async fn not_found() -> Response {
    json_response(
        StatusCode::NOT_FOUND,
        error_body(
            "no such route; cadence-sim serves POST /v1/chat/completions, POST /v1/completions, \
             GET /v1/models and GET /health",
            "invalid_request_error",
            404,
        ),
    )
}

/// The handler of a dialect's endpoint. `stream`: `Some(false)` for an endpoint that
/// answers whole, never streamed (KServe's `/v2/models/{m}/generate`); `None` lets the
/// body and the dialect's default decide.
fn dialect_route(
    dialect: Dialect,
    stream: Option<bool>,
) -> impl Fn(
    State<SimState>,
    HeaderMap,
    Bytes,
) -> std::pin::Pin<Box<dyn std::future::Future<Output = Response> + Send>>
       + Clone
       + Send
       + 'static {
    move |State(state), headers, body| Box::pin(handle_as(state, dialect, headers, body, stream))
}

/// Ollama's model list.
async fn ollama_tags(State(state): State<SimState>) -> Response {
    let body = serde_json::json!({"models": [{"name": state.config().model, "model": state.config().model}]});
    json_response(StatusCode::OK, body.to_string())
}

/// TGI's server info.
async fn tgi_info(State(state): State<SimState>) -> Response {
    let body = serde_json::json!({"model_id": state.config().model});
    json_response(StatusCode::OK, body.to_string())
}

async fn chat(State(state): State<SimState>, headers: HeaderMap, body: Bytes) -> Response {
    handle(state, Dialect::Chat, headers, body).await
}

async fn completions(State(state): State<SimState>, headers: HeaderMap, body: Bytes) -> Response {
    handle(state, Dialect::Completion, headers, body).await
}

fn json_response(status: StatusCode, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, "application/json")], body).into_response()
}

fn with_request_header(mut response: Response, request: u64) -> Response {
    response
        .headers_mut()
        .insert(headers::REQUEST, HeaderValue::from(request));
    response
}

fn unix_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

const HTML_ERROR_PAGE: &str = "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\n\
<body><h1>502 Bad Gateway</h1><p>cadence-sim: a simulated proxy error page served with status 200.</p></body></html>\n";

async fn handle(state: SimState, dialect: Dialect, headers: HeaderMap, body: Bytes) -> Response {
    handle_as(state, dialect, headers, body, None).await
}

/// `stream`: the endpoint decides (`Some`), else the body and the dialect's default.
async fn handle_as(
    state: SimState,
    dialect: Dialect,
    headers: HeaderMap,
    body: Bytes,
    stream: Option<bool>,
) -> Response {
    let received = Instant::now();
    state.metrics().requests.inc();
    let controls = match Controls::from_headers(&headers) {
        Ok(c) => c,
        Err(e) => return bad_request(&e),
    };
    let mut api = match ApiRequest::parse(&body) {
        Ok(r) => r,
        Err(e) => return bad_request(&e),
    };
    if let Err(e) = api.check_tools(dialect) {
        return bad_request(&e);
    }
    match (stream, dialect) {
        (Some(s), _) => api.stream = s,
        // These stream unless told not to, or always (their endpoint says so).
        (None, Dialect::OllamaChat | Dialect::OllamaGenerate) if !api.stream_given => {
            api.stream = true
        }
        // TGI's `/generate_stream` always streams; a body that says `"stream": false`
        // gets the whole answer its `/generate` gives (the sim's `/generate` is SGLang's).
        (None, Dialect::Tgi) => api.stream = api.stream || !api.stream_given,
        (None, Dialect::Kserve) => api.stream = true,
        _ => {}
    }
    let fault = match controls.fault {
        Some(f) => Some(f),
        None => match api.model_fault() {
            Ok(f) => f,
            Err(e) => return bad_request(&RequestError::UnknownFault(e)),
        },
    };
    if let Some(f) = fault.filter(|f| f.chat_only() && dialect != Dialect::Chat) {
        if !matches!(dialect, Dialect::Responses | Dialect::Anthropic) {
            return bad_request(&RequestError::ChatOnlyFault(f));
        }
    }
    if let Some(f) = fault.filter(|f| f.openai_only() && !dialect.is_openai()) {
        return bad_request(&RequestError::OpenAiOnlyFault(f));
    }
    let request = state.number(controls.request);
    let response = respond(&state, dialect, &controls, &api, fault, request, received).await;
    with_request_header(response, request)
}

async fn respond(
    state: &SimState,
    dialect: Dialect,
    controls: &Controls,
    api: &ApiRequest,
    fault: Option<Fault>,
    request: u64,
    received: Instant,
) -> Response {
    if let Some(r) = fault.and_then(status_fault_response) {
        return r;
    }
    let config = state.config();
    let max_tokens = api.max_tokens.unwrap_or(config.default_max_tokens).max(1);
    let flat_timing = controls.ttft.is_some()
        || controls.itl.is_some()
        || controls.burst.is_some()
        || controls.stall.is_some();
    if fault.is_none() && !flat_timing {
        if let Some(engine) = state.engine() {
            return engine_response(state, engine, dialect, api, request, received, max_tokens)
                .await;
        }
    }
    let plan = flat_plan(config, (controls, fault), api, (request, max_tokens));
    let calls = reply_calls(state, dialect, api, fault, request, plan.token_count());
    let mut kill = state.kill();
    // Planned offsets fall due on the sim's clock: arriving while the server is
    // frozen, nothing happens until it thaws.
    let clock = state.clock().clone();
    let mut start = received;
    if fault == Some(Fault::HeaderDelay) {
        let delay = controls.stall.unwrap_or(DEFAULT_HEADER_DELAY);
        if !kill.sleep_until(received + delay).await {
            return shutting_down();
        }
        // The stream's own cadence starts once the headers are out.
        start = Instant::now();
    }
    let id = response_id(dialect, request);
    let model = api.model.as_deref().unwrap_or(&config.model);
    let created = unix_seconds();
    let served = (request, id.as_str(), model, max_tokens);
    trace(
        state,
        (controls, api, dialect),
        &plan,
        served,
        (received, start),
    );

    if !api.stream {
        if !kill.sleep_until(clock.due(start, plan.last_at())).await {
            return shutting_down();
        }
        let usage = Usage::new(api.prompt_tokens, plan.token_count());
        if let Some(calls) = calls {
            let ids: Vec<u32> = plan.chunks.iter().flat_map(|c| c.tokens.clone()).collect();
            return whole_calls(dialect, &id, model, created, calls, &ids, usage);
        }
        let mut text = String::new();
        for c in &plan.chunks {
            Vocabulary::Plain.push_text(&c.tokens, &mut text);
        }
        let timing = Timing::of_plan(&plan);
        count_whole(state, &plan, api.prompt_tokens);
        return whole_response(dialect, &id, model, created, &text, usage, timing);
    }

    let script = script::build(&StreamSpec {
        dialect,
        fault,
        plan: &plan,
        id: &id,
        created,
        model,
        prompt_tokens: api.prompt_tokens,
        include_usage: api.include_usage,
        continuous_usage: api.continuous_usage,
        token_ids: api.token_ids,
        fault_after: controls.fault_after,
        silence: controls.stall.unwrap_or(DEFAULT_SILENCE),
        calls: calls.as_ref(),
    });
    let content_type = script.content_type;
    let recorder = Recorder::new(
        state.send_log().clone(),
        request,
        fault.map(Fault::name),
        received,
    )
    .speculating(spec_tally(state, &plan))
    .transferring(pd_pending(state, &plan, api.prompt_tokens));
    let body: Body = stream::body(script, start, clock, kill, recorder);
    stream_response(content_type, body)
}

/// The flat schedule of request `request` of `max_tokens` (the timing `controls` and
/// `fault` set), its first token after the KV transfer when the sim disaggregates.
fn flat_plan(
    config: &crate::config::SimConfig,
    (controls, fault): (&Controls, Option<Fault>),
    api: &ApiRequest,
    (request, max_tokens): (u64, u32),
) -> crate::plan::StreamPlan {
    let p = plan(config, request, max_tokens, &controls.overrides(fault));
    match config.pd_transfer {
        Some(t) => p.transferred(t.of(api.prompt_tokens)),
        None => p,
    }
}

/// A non-streamed answer's steps and KV transfer, counted as it is sent.
fn count_whole(state: &SimState, plan: &crate::plan::StreamPlan, prompt_tokens: u32) {
    if let (Some(m), Some(k)) = (state.metrics().speculation(), plan.spec_tokens) {
        m.stream(plan.chunks.iter().map(|c| c.tokens.len() as u32), k);
    }
    if let Some(p) = pd_pending(state, plan, prompt_tokens) {
        p.done();
    }
}

/// The KV transfer of a stream that has one, to observe as its first token leaves.
fn pd_pending(
    state: &SimState,
    plan: &crate::plan::StreamPlan,
    prompt_tokens: u32,
) -> Option<crate::pd_metrics::Pending> {
    let m = state.metrics().pd_transfer()?;
    Some(crate::pd_metrics::Pending::new(
        m.clone(),
        plan.kv_transfer?,
        prompt_tokens,
    ))
}

/// Speculation's counting for a stream that speculates.
fn spec_tally(
    state: &SimState,
    plan: &crate::plan::StreamPlan,
) -> Option<crate::spec_metrics::Tally> {
    let m = state.metrics().speculation()?;
    Some(crate::spec_metrics::Tally::new(
        m.clone(),
        plan.spec_tokens?,
    ))
}

/// `--otlp`: the server's span of the request `plan` serves (`served`: its index, id,
/// model and `max_tokens`), received and started `at` (see [`crate::trace`]).
fn trace(
    state: &SimState,
    (controls, api, dialect): (&Controls, &ApiRequest, Dialect),
    plan: &crate::plan::StreamPlan,
    (request, id, model, max_tokens): (u64, &str, &str, u32),
    (received, start): (Instant, Instant),
) {
    let Some(t) = state.tracer() else { return };
    let served = crate::trace::Served {
        request,
        id,
        operation: if dialect == Dialect::Completion {
            "text_completion"
        } else {
            "chat"
        },
        model,
        max_tokens,
        tokens: (api.prompt_tokens, plan.token_count()),
        received_unix_ns: crate::trace::unix_ns_ago(received.elapsed()),
        queued: start - received,
        timing: Timing::of_plan(plan),
    };
    t.served(controls.traceparent.as_deref(), &served);
}

/// The tool calls this reply is, if the request declared tools and this step
/// calls them (see [`tools::plan_calls`]). The other faults apply to a reply of
/// calls as to text; the `tool_calls` fault's own fixed call replaces them.
fn reply_calls(
    state: &SimState,
    dialect: Dialect,
    api: &ApiRequest,
    fault: Option<Fault>,
    request: u64,
    tokens: u32,
) -> Option<CallPlan> {
    let declared = api.tools.as_ref().filter(|_| tools::supports(dialect))?;
    if fault == Some(Fault::ToolCalls) {
        return None;
    }
    let config = state.config();
    let policy = ToolPolicy::of(config);
    tools::plan_calls(declared, policy, config.seed, request, dialect, tokens)
}

/// A non-streamed reply of tool calls, its arguments made of the tokens `ids`.
fn whole_calls(
    dialect: Dialect,
    id: &str,
    model: &str,
    created: u64,
    calls: CallPlan,
    ids: &[u32],
    usage: Usage,
) -> Response {
    let w = Writer {
        dialect,
        id,
        created,
        model,
        pretty: false,
    };
    let mut stream = ToolStream::new(calls, Vocabulary::Plain);
    stream.chunk(&w, ids, true, |_| None);
    json_response(StatusCode::OK, stream.whole(&w, usage))
}

/// The faults answered with a status or a page instead of a stream.
fn status_fault_response(fault: Fault) -> Option<Response> {
    let retry = |status: StatusCode, message: &str, kind: &str| {
        let mut r = json_response(status, error_body(message, kind, status.as_u16()));
        r.headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
        r
    };
    Some(match fault {
        Fault::Status429 => retry(
            StatusCode::TOO_MANY_REQUESTS,
            "simulated rate limit: retry after 1 s",
            "rate_limit_exceeded",
        ),
        Fault::Status503 => retry(
            StatusCode::SERVICE_UNAVAILABLE,
            "simulated overload: retry after 1 s",
            "service_unavailable",
        ),
        Fault::Html200 => (
            StatusCode::OK,
            [(header::CONTENT_TYPE, "text/html; charset=utf-8")],
            HTML_ERROR_PAGE,
        )
            .into_response(),
        _ => return None,
    })
}

/// The response id, as OpenAI shapes it per endpoint.
fn response_id(dialect: Dialect, request: u64) -> String {
    match dialect {
        Dialect::Chat => format!("chatcmpl-cadence-{request}"),
        Dialect::Responses => format!("resp_cadence_{request}"),
        Dialect::Anthropic => format!("msg_cadence_{request}"),
        _ => format!("cmpl-cadence-{request}"),
    }
}

/// A non-streamed answer: the whole text in one completion object.
fn whole_response(
    dialect: Dialect,
    id: &str,
    model: &str,
    created: u64,
    text: &str,
    usage: Usage,
    timing: Timing,
) -> Response {
    let w = Writer {
        dialect,
        id,
        created,
        model,
        pretty: false,
    };
    let mut r = json_response(StatusCode::OK, dialects::whole(&w, text, usage, timing));
    if dialect == Dialect::Tgi {
        for (name, value) in dialects::tgi_headers(timing, usage) {
            if let Ok(v) = HeaderValue::from_str(&value) {
                r.headers_mut().insert(name, v);
            }
        }
    }
    r
}

/// A 200 whose body streams as it is produced.
fn stream_response(content_type: &'static str, body: Body) -> Response {
    (
        StatusCode::OK,
        [
            (header::CONTENT_TYPE, content_type),
            (header::CACHE_CONTROL, "no-cache"),
            (header::HeaderName::from_static("x-accel-buffering"), "no"),
        ],
        body,
    )
        .into_response()
}

/// A request timed by the engine model: submitted to the engine task, streamed as
/// its tokens come out (or answered whole when not streamed).
async fn engine_response(
    state: &SimState,
    engine: &EngineHandle,
    dialect: Dialect,
    api: &ApiRequest,
    request: u64,
    received: Instant,
    max_tokens: u32,
) -> Response {
    let capacity = engine.spec().kv_capacity();
    if api.prompt_tokens as u64 + max_tokens as u64 > capacity {
        let msg = format!(
            "this engine's KV cache holds {capacity} tokens; the request needs {} prompt + {max_tokens} output tokens",
            api.prompt_tokens
        );
        return engine_refusal(&msg);
    }
    let config = state.config();
    let calls = reply_calls(state, dialect, api, None, request, max_tokens);
    let text_rng = SimRng::for_request(config.seed, request, TEXT_STREAM);
    let prefix = history_prefix(engine, dialect, api, calls.as_ref(), &text_rng, max_tokens);
    let rx = engine.submit(api.prompt_tokens, max_tokens, prefix);
    let id = response_id(dialect, request);
    let model = api.model.clone().unwrap_or_else(|| config.model.clone());
    if !api.stream {
        let reply = EngineReply {
            dialect,
            id: &id,
            model: &model,
            prompt_tokens: api.prompt_tokens,
            calls,
        };
        return engine_whole(state, rx, text_rng, reply).await;
    }
    let recorder = Recorder::new(state.send_log().clone(), request, None, received);
    let body = engine_mode::body(EngineStream {
        rx,
        dialect,
        id,
        created: unix_seconds(),
        model,
        prompt_tokens: api.prompt_tokens,
        max_tokens,
        include_usage: api.include_usage,
        continuous_usage: api.continuous_usage || dialect.counts_every_chunk(),
        text_rng,
        kill: state.kill(),
        recorder,
        calls: calls.map(|c| ToolStream::new(c, Vocabulary::Plain)),
    });
    stream_response(dialect.content_type(), body)
}

/// A non-streamed engine request: waits for the engine to finish it, then answers
/// with the whole text.
/// The part of the request's prompt the prefix cache may hold: its messages up
/// to the last boundary an earlier request (or an earlier reply) reached. The
/// reply this request will get is remembered too, so the next step of a session,
/// which sends it back, finds it. `None` without messages or a prefix cache.
fn history_prefix(
    engine: &EngineHandle,
    dialect: Dialect,
    api: &ApiRequest,
    calls: Option<&CallPlan>,
    text_rng: &SimRng,
    max_tokens: u32,
) -> Option<cadence_engine::Prefix> {
    if api.messages.is_empty() || !engine.spec().serving.prefix_cache {
        return None;
    }
    let boundaries = history::boundaries(dialect, &api.messages);
    // The reply's tokens, drawn as the stream will draw them.
    let mut rng = text_rng.clone();
    let ids: Vec<u32> = (0..max_tokens)
        .map(|_| rng.random_range(0..crate::text::VOCAB.len() as u32))
        .collect();
    let reply = match calls {
        Some(plan) => {
            let w = Writer {
                dialect,
                id: "",
                created: 0,
                model: "",
                pretty: false,
            };
            let mut stream = ToolStream::new(plan.clone(), Vocabulary::Plain);
            stream.chunk(&w, &ids, true, |_| None);
            history::reply_messages(dialect, "", Some((plan, stream.arguments())))
        }
        None => {
            let mut text = String::new();
            Vocabulary::Plain.push_text(&ids, &mut text);
            history::reply_messages(dialect, &text, None)
        }
    };
    engine.seen().prefix(dialect, &boundaries, &reply)
}

/// What a non-streamed engine reply says besides its tokens.
struct EngineReply<'a> {
    dialect: Dialect,
    id: &'a str,
    model: &'a str,
    prompt_tokens: u32,
    calls: Option<CallPlan>,
}

async fn engine_whole(
    state: &SimState,
    mut rx: tokio::sync::mpsc::UnboundedReceiver<Emit>,
    mut text_rng: SimRng,
    reply: EngineReply<'_>,
) -> Response {
    let EngineReply {
        dialect,
        id,
        model,
        prompt_tokens,
        calls,
    } = reply;
    let mut kill = state.kill();
    let mut produced = 0u32;
    let started = Instant::now();
    let mut first: Option<Instant> = None;
    let mut engine_timing = None;
    loop {
        let msg = tokio::select! {
            biased;
            () = kill.wait() => return shutting_down(),
            m = rx.recv() => m,
        };
        match msg {
            Some(Emit::Tokens(n)) => {
                first.get_or_insert_with(Instant::now);
                produced += n
            }
            Some(Emit::Finished(t)) => {
                engine_timing = Some(t);
                break;
            }
            None => break,
            Some(Emit::Rejected(reason)) => return engine_refusal(&reason),
        }
    }
    let ids: Vec<u32> = (0..produced)
        .map(|_| text_rng.random_range(0..crate::text::VOCAB.len() as u32))
        .collect();
    let usage = Usage::new(prompt_tokens, produced);
    if let Some(calls) = calls {
        return whole_calls(dialect, id, model, unix_seconds(), calls, &ids, usage);
    }
    let mut text = String::new();
    Vocabulary::Plain.push_text(&ids, &mut text);
    let first = first.unwrap_or(started);
    let timing = engine_timing.unwrap_or(Timing {
        queue: Duration::ZERO,
        prompt: first - started,
        decode: first.elapsed(),
        spec: None,
    });
    whole_response(dialect, id, model, unix_seconds(), &text, usage, timing)
}

/// A 400 for a request the engine cannot serve.
fn engine_refusal(message: &str) -> Response {
    json_response(
        StatusCode::BAD_REQUEST,
        error_body(message, "invalid_request_error", 400),
    )
}

fn shutting_down() -> Response {
    json_response(
        StatusCode::SERVICE_UNAVAILABLE,
        error_body("cadence-sim is shutting down", "service_unavailable", 503),
    )
}

/// Serves `state` on `listener` until `shutdown` resolves, then stops
/// accepting, lets live streams finish for `config.drain_timeout`, cuts the
/// ones still running, and returns. Sets `TCP_NODELAY` on every connection so
/// each chunk leaves at once.
pub async fn serve(
    listener: TcpListener,
    state: SimState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> io::Result<()> {
    let (signalled_tx, signalled_rx) = oneshot::channel::<()>();
    let signal = async move {
        shutdown.await;
        let _ = signalled_tx.send(());
    };
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("could not set TCP_NODELAY: {e}");
        }
    });
    let server = axum::serve(listener, app(state.clone()))
        .with_graceful_shutdown(signal)
        .into_future();
    tokio::pin!(server);
    tokio::select! {
        result = &mut server => return result,
        _ = signalled_rx => {}
    }
    let drain = state.config().drain_timeout;
    if let Ok(result) = tokio::time::timeout(drain, &mut server).await {
        return result;
    }
    tracing::info!("drain timeout ({drain:?}) passed; cutting the streams still running");
    state.abort_streams();
    match tokio::time::timeout(Duration::from_secs(1), &mut server).await {
        Ok(result) => result,
        Err(_) => {
            tracing::warn!("connections still open after cutting streams; leaving them");
            Ok(())
        }
    }
}

/// A sim running in a background task.
#[derive(Debug)]
pub struct SimServer {
    /// Where it listens (the real port when bound to port 0).
    pub addr: SocketAddr,
    /// Its send log.
    pub send_log: SendLog,
    state: SimState,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<io::Result<()>>>,
}

impl SimServer {
    /// `http://ADDR` (no trailing slash).
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The running sim's shared state: its config, send log and request count.
    pub fn state(&self) -> &SimState {
        &self.state
    }

    /// Stops accepting, drains live streams for up to the configured drain
    /// timeout, cuts the rest, and waits for the server task.
    pub async fn shutdown(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            match task.await {
                Ok(Ok(())) => {}
                Ok(Err(e)) => tracing::warn!("cadence-sim server ended with an error: {e}"),
                Err(e) => tracing::warn!("cadence-sim server task failed: {e}"),
            }
        }
        let _ = self.send_log.flush();
    }
}

impl Drop for SimServer {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            self.state.abort_streams();
            task.abort();
        }
    }
}

/// Binds `addr` (use port 0 for a free port) and serves `config` in a
/// background task.
pub async fn spawn(config: SimConfig, addr: SocketAddr) -> io::Result<SimServer> {
    config
        .validate()
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    spawn_with_state(SimState::new(config), addr).await
}

/// Like [`spawn`], with a state built by the caller (e.g. a file send log).
pub async fn spawn_with_state(state: SimState, addr: SocketAddr) -> io::Result<SimServer> {
    let listener = TcpListener::bind(addr).await?;
    let addr = listener.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let task = tokio::spawn(serve(listener, state.clone(), async move {
        let _ = stopped.await;
    }));
    Ok(SimServer {
        addr,
        send_log: state.send_log().clone(),
        state,
        stop: Some(stop),
        task: Some(task),
    })
}

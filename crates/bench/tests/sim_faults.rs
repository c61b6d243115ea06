//! FAULTS.md rows driven through `cadence sim` over a real socket on 127.0.0.1, through
//! the real client: each fault must end in its classified outcome, keeping its tokens.

use bytes::Bytes;
use cadence_bench::body::BodySpec;
use cadence_bench::exec::{execute, Cancel, ExecContext, Timeouts};
use cadence_bench::workload::RequestFactory;
use cadence_core::secret::Redactor;
use cadence_core::{Outcome, RequestRecord, TokenSource};
use cadence_sim::{SimConfig, SimServer};
use cadence_transport::client::{self, ClientConfig, HyperClient};
use cadence_transport::Clock;
use cadence_wire::Api;
use http::{HeaderName, HeaderValue};
use http_body_util::Full;
use std::net::SocketAddr;
use std::time::Duration;

struct Harness {
    sim: SimServer,
    client: HyperClient,
}

async fn harness() -> Harness {
    let config = SimConfig {
        ttft: "fixed:5ms".parse().unwrap(),
        itl: "fixed:2ms".parse().unwrap(),
        ..SimConfig::default()
    };
    let sim = cadence_sim::spawn(config, SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .expect("sim listens");
    let client = client::build(&ClientConfig {
        pool_size: 4,
        connect_timeout: Duration::from_secs(2),
        http2: false,
    });
    Harness { sim, client }
}

fn factory(
    addr: SocketAddr,
    api: Api,
    headers: &[(&str, &str)],
    max_tokens: u32,
    extra: Option<&str>,
) -> RequestFactory {
    let extra_headers: Vec<(HeaderName, HeaderValue)> = headers
        .iter()
        .map(|(k, v)| {
            (
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            )
        })
        .collect();
    let path = match api {
        Api::Chat => "chat/completions",
        Api::Completions => "completions",
        other => unreachable!("these tests speak chat and completions, not {other:?}"),
    };
    RequestFactory::new(
        format!("http://{addr}/v1/{path}").parse().unwrap(),
        client::base_headers(None, &extra_headers).unwrap(),
        BodySpec {
            api,
            model: "m".into(),
            max_tokens: Some(max_tokens),
            extra: extra.map(|e| cadence_bench::body::parse_extra_body(e).unwrap()),
            path: String::new(),
        },
        vec!["hello there".into()],
    )
}

async fn request_with(
    h: &Harness,
    req: http::Request<Full<Bytes>>,
    api: Api,
    timeouts: Timeouts,
    strict: bool,
) -> RequestRecord {
    request_hinted(h, req, api, timeouts, strict, None).await
}

/// [`request_with`], the tracker told the request's `max_tokens`.
async fn request_hinted(
    h: &Harness,
    req: http::Request<Full<Bytes>>,
    api: Api,
    timeouts: Timeouts,
    strict: bool,
    max_tokens: Option<u64>,
) -> RequestRecord {
    let clock = Clock::start();
    let redactor = Redactor::default();
    let cx = ExecContext {
        client: &h.client,
        clock: &clock,
        timeouts: &timeouts,
        api,
        strict,
        redactor: &redactor,
        max_tokens,
        keep_text: true,
        keep_tool_calls: false,
    };
    let (_tx, mut cancel) = Cancel::new();
    let mut rec = RequestRecord::new(0, Outcome::AbortedAtDeadline);
    execute(&cx, req, &mut cancel, &mut rec).await;
    assert!(rec.end_ns.is_some(), "every request ends with an end time");
    assert!(rec.sent_ns.is_some());
    rec
}

async fn fault(
    h: &Harness,
    name: &str,
    extra_headers: &[(&str, &str)],
    timeouts: Timeouts,
) -> RequestRecord {
    let mut headers = vec![("x-cadence-fault", name)];
    headers.extend_from_slice(extra_headers);
    let (req, _) = factory(h.sim.addr, Api::Chat, &headers, 8, None).build(0);
    request_with(h, req, Api::Chat, timeouts, false).await
}

fn quick() -> Timeouts {
    Timeouts {
        connect: Duration::from_secs(2),
        header: Duration::from_secs(5),
        first_token: Duration::from_secs(5),
        idle: Duration::from_secs(5),
        total: Duration::from_secs(20),
        ..Timeouts::default()
    }
}

fn assert_monotonic(rec: &RequestRecord) {
    for w in rec.chunks.windows(2) {
        assert!(
            w[0].t_ns() <= w[1].t_ns(),
            "chunk times go forward: {:?}",
            rec.chunks
        );
    }
    if let (Some(s), Some(f)) = (rec.sent_ns, rec.first_chunk_ns()) {
        assert!(s <= f);
    }
}

#[tokio::test]
async fn normal_chat_stream_succeeds_with_usage() {
    let h = harness().await;
    let (req, _) = factory(h.sim.addr, Api::Chat, &[], 8, None).build(0);
    let rec = request_with(&h, req, Api::Chat, quick(), false).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert_eq!(rec.http_status, Some(200));
    assert_eq!(rec.chunks.len(), 8, "role chunk is not a token (FAULTS 15)");
    assert_eq!(
        rec.output_tokens.map(|t| (t.count, t.source)),
        Some((8, TokenSource::Usage))
    );
    assert!(rec.input_tokens.is_some());
    assert_eq!(rec.first_content_ns, rec.first_chunk_ns());
    assert_monotonic(&rec);
}

#[tokio::test]
async fn completions_stream_succeeds() {
    let h = harness().await;
    let (req, _) = factory(h.sim.addr, Api::Completions, &[], 5, None).build(0);
    let rec = request_with(&h, req, Api::Completions, quick(), false).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert_eq!(rec.chunks.len(), 5);
}

/// Room made for a request's `max_tokens` at its first chunk changes no result, and
/// is given back: however the stream ends (done, an error, malformed in strict mode,
/// EOF, an idle timeout), the record keeps no more room than its chunks and a slack.
#[tokio::test]
async fn the_chunk_room_hint_changes_nothing_and_is_given_back() {
    let h = harness().await;
    let stall = [
        ("x-cadence-stall-ms", "2000"),
        ("x-cadence-stall-after", "3"),
    ];
    // (fault, extra request headers, strict parsing)
    type Case<'a> = (&'a str, &'a [(&'a str, &'a str)], bool);
    let faults: [Case; 11] = [
        ("none", &[], false),
        ("split_bytes", &[], false),
        ("coalesce", &[], false),
        ("crlf", &[], false),
        ("keepalive", &[], false),
        ("garbage_data", &[], true),
        ("error_after_tokens", &[], false),
        ("eof_no_done", &[], false),
        ("usage_every_chunk", &[], false),
        ("split_utf8", &[], false),
        ("stall", &stall, false),
    ];
    let t = Timeouts {
        idle: Duration::from_millis(200),
        ..quick()
    };
    for (name, extra, strict) in faults {
        let mut headers = vec![("x-cadence-fault", name)];
        if name == "none" {
            headers.clear(); // a plain stream
        }
        headers.extend_from_slice(extra);
        let run = |hint| {
            let (req, _) = factory(h.sim.addr, Api::Chat, &headers, 8, None).build(0);
            request_hinted(&h, req, Api::Chat, t, strict, hint)
        };
        let plain = run(None).await;
        let hinted = run(Some(4096)).await;
        if name == "none" {
            assert_eq!(hinted.outcome, Outcome::Succeeded, "{hinted:?}");
            assert_eq!(hinted.chunks.len(), 8);
        }
        assert!(
            hinted.chunks.capacity() <= hinted.chunks.len() + cadence_core::CHUNK_SLACK,
            "{name}: {} chunks, room for {}",
            hinted.chunks.len(),
            hinted.chunks.capacity()
        );
        assert!(
            hinted.read_delays_us.capacity()
                <= hinted.read_delays_us.len() + cadence_core::CHUNK_SLACK,
            "{name}"
        );
        // Two requests over a socket: everything but the times and how the bytes
        // came in reads.
        let same = |r: &RequestRecord| {
            (
                r.outcome,
                r.chunks.len(),
                r.chunks.iter().map(|c| c.1).collect::<Vec<_>>(),
                r.output_tokens,
                r.input_tokens,
                r.finish_reason.clone(),
                r.error.clone(),
                (r.counters.malformed, r.counters.keepalives),
                r.counters.bytes_after_done,
                r.counters.no_done_marker,
            )
        };
        assert_eq!(same(&hinted), same(&plain), "{name}");
    }
}

#[tokio::test]
async fn f01_split_bytes_over_socket() {
    let h = harness().await;
    let rec = fault(&h, "split_bytes", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert_eq!(rec.chunks.len(), 8);
    assert_eq!(rec.counters.malformed, 0);
}

#[tokio::test]
async fn f02_coalesced_events_over_socket() {
    let h = harness().await;
    let rec = fault(&h, "coalesce", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert_eq!(rec.chunks.len(), 8);
    assert!(rec.counters.coalesced > 0, "{:?}", rec.counters);
}

#[tokio::test]
async fn f03_line_endings_over_socket() {
    let h = harness().await;
    for name in ["crlf", "cr"] {
        let rec = fault(&h, name, &[], quick()).await;
        assert_eq!(rec.outcome, Outcome::Succeeded, "{name}: {rec:?}");
        assert_eq!(rec.chunks.len(), 8, "{name}");
    }
}

#[tokio::test]
async fn f04_data_prefix_spacing_over_socket() {
    let h = harness().await;
    for name in ["data_no_space", "data_two_spaces"] {
        let rec = fault(&h, name, &[], quick()).await;
        assert_eq!(rec.outcome, Outcome::Succeeded, "{name}: {rec:?}");
        assert_eq!(rec.chunks.len(), 8, "{name}");
        assert_eq!(rec.counters.malformed, 0, "{name}");
    }
}

#[tokio::test]
async fn f05_multiline_data_over_socket() {
    let h = harness().await;
    let rec = fault(&h, "multiline_data", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert_eq!(rec.chunks.len(), 8);
}

#[tokio::test]
async fn f06_keepalives_are_not_tokens_over_socket() {
    let h = harness().await;
    let rec = fault(&h, "keepalive", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert_eq!(rec.chunks.len(), 8);
    assert!(rec.counters.keepalives > 0);
}

#[tokio::test]
async fn f07_garbage_data_counted_or_fails_in_strict() {
    let h = harness().await;
    let rec = fault(&h, "garbage_data", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert!(rec.counters.malformed > 0);
    let (req, _) = factory(
        h.sim.addr,
        Api::Chat,
        &[("x-cadence-fault", "garbage_data")],
        8,
        None,
    )
    .build(0);
    let strict = request_with(&h, req, Api::Chat, quick(), true).await;
    assert_eq!(strict.outcome, Outcome::MalformedEvent);
}

#[tokio::test]
async fn f08_error_after_tokens_keeps_tokens() {
    let h = harness().await;
    let rec = fault(&h, "error_after_tokens", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::StreamError, "{rec:?}");
    assert!(!rec.chunks.is_empty(), "partial tokens are kept");
    assert!(rec.error.is_some());
}

#[tokio::test]
async fn f09_error_only_body_is_a_failure() {
    let h = harness().await;
    let rec = fault(&h, "error_only", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::StreamError, "{rec:?}");
    assert!(rec.chunks.is_empty());
}

#[tokio::test]
async fn f10_eof_without_done_is_truncated() {
    let h = harness().await;
    let rec = fault(&h, "eof_no_done", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Truncated, "{rec:?}");
    assert!(!rec.chunks.is_empty());
}

#[tokio::test]
async fn f11_finish_without_done_succeeds() {
    let h = harness().await;
    let rec = fault(&h, "finish_no_done", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert!(rec.counters.no_done_marker);
}

#[tokio::test]
async fn f12_bytes_after_done_counted() {
    let h = harness().await;
    let rec = fault(&h, "bytes_after_done", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert!(rec.counters.bytes_after_done > 0);
    assert_eq!(rec.chunks.len(), 8);
}

#[tokio::test]
async fn f14_usage_every_chunk_last_wins() {
    let h = harness().await;
    let rec = fault(&h, "usage_every_chunk", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert_eq!(rec.output_tokens.map(|t| t.count), Some(8));
}

#[tokio::test]
async fn f16_empty_content_is_not_a_token() {
    let h = harness().await;
    let rec = fault(&h, "empty_content", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert_eq!(rec.chunks.len(), 8);
}

#[tokio::test]
async fn f17_reasoning_counts_for_ttft_but_not_content() {
    let h = harness().await;
    let rec = fault(&h, "reasoning_first", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    let first = rec.first_chunk_ns().unwrap();
    let content = rec.first_content_ns.expect("content follows reasoning");
    // Content is sent after the reasoning chunks; on a loaded machine both can arrive
    // in one read and share its stamp, so "after" is not strict.
    assert!(
        content >= first,
        "time to first content comes no earlier than the first reasoning token"
    );
    assert!(
        rec.chunks.iter().any(|c| c.t_ns() == content),
        "first content is a chunk's arrival: {rec:?}"
    );
}

#[tokio::test]
async fn f18_tool_calls_count_as_output() {
    let h = harness().await;
    let rec = fault(&h, "tool_calls", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert!(!rec.chunks.is_empty());
    assert_eq!(
        rec.first_content_ns, None,
        "tool calls are output but not visible content"
    );
}

#[tokio::test]
async fn f19_multi_token_chunks_carry_token_counts() {
    let h = harness().await;
    let rec = fault(&h, "multi_token", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    let per_chunk: u32 = rec
        .chunks
        .iter()
        .map(|c| c.tokens().expect("token ids give counts"))
        .sum();
    assert_eq!(per_chunk as u64, rec.output_token_count().count);
    assert!(rec.chunks.iter().any(|c| c.tokens().unwrap() > 1));
}

#[tokio::test]
async fn f20_no_usage_falls_back_and_says_so() {
    let h = harness().await;
    let rec = fault(&h, "no_usage", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert_eq!(rec.output_tokens, None);
    assert_eq!(rec.output_token_count().source, TokenSource::Chunks);
}

#[tokio::test]
async fn f21_split_utf8_over_socket() {
    let h = harness().await;
    let rec = fault(&h, "split_utf8", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert_eq!(rec.counters.malformed, 0);
}

#[tokio::test]
async fn f22_text_containing_data_prefix() {
    let h = harness().await;
    let rec = fault(&h, "data_prefix_text", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert_eq!(rec.counters.malformed, 0);
}

#[tokio::test]
async fn f23_huge_event_is_capped() {
    let h = harness().await;
    let rec = fault(&h, "huge_event", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::EventTooLarge, "{rec:?}");
}

#[tokio::test]
async fn f24_invalid_json_counted() {
    let h = harness().await;
    let rec = fault(&h, "invalid_json", &[], quick()).await;
    assert!(rec.counters.malformed > 0, "{rec:?}");
}

#[tokio::test]
async fn f25_ndjson_stream() {
    let h = harness().await;
    let rec = fault(&h, "ndjson", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert_eq!(rec.chunks.len(), 8);
}

#[tokio::test]
async fn f26_html_200_is_protocol_mismatch() {
    let h = harness().await;
    let rec = fault(&h, "html_200", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::ProtocolMismatch, "{rec:?}");
    let err = rec.error.unwrap();
    assert!(err.contains("text/html"), "{err}");
    assert!(err.len() <= 1024 + 200, "only the first KiB is kept");
}

#[tokio::test]
async fn f27_refused_connection_names_the_address() {
    let h = harness().await;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let (req, _) = factory(addr, Api::Chat, &[], 8, None).build(0);
    let rec = request_with(&h, req, Api::Chat, quick(), false).await;
    assert_eq!(rec.outcome, Outcome::ConnectError, "{rec:?}");
    let err = rec.error.unwrap().to_lowercase();
    assert!(err.contains("refused"), "{err}");
}

#[tokio::test]
async fn f28_headers_never_arrive() {
    let h = harness().await;
    let t = Timeouts {
        header: Duration::from_millis(200),
        ..quick()
    };
    let rec = fault(&h, "header_delay", &[("x-cadence-stall-ms", "3000")], t).await;
    assert_eq!(rec.outcome, Outcome::HeaderTimeout, "{rec:?}");
}

#[tokio::test]
async fn f29_no_token_ever() {
    let h = harness().await;
    let t = Timeouts {
        first_token: Duration::from_millis(200),
        ..quick()
    };
    let rec = fault(&h, "no_tokens", &[("x-cadence-stall-ms", "3000")], t).await;
    assert_eq!(rec.outcome, Outcome::TtftTimeout, "{rec:?}");
    assert!(rec.headers_ns.is_some());
}

#[tokio::test]
async fn f30_stall_past_idle_timeout_keeps_tokens() {
    let h = harness().await;
    let t = Timeouts {
        idle: Duration::from_millis(200),
        ..quick()
    };
    let rec = fault(
        &h,
        "stall",
        &[
            ("x-cadence-stall-ms", "2000"),
            ("x-cadence-stall-after", "3"),
        ],
        t,
    )
    .await;
    assert_eq!(rec.outcome, Outcome::IdleTimeout, "{rec:?}");
    assert!(
        rec.chunks.len() >= 3,
        "tokens before the stall are kept: {:?}",
        rec.chunks
    );
}

#[tokio::test]
async fn f31_short_stall_is_one_large_gap() {
    let h = harness().await;
    let t = Timeouts {
        idle: Duration::from_secs(2),
        ..quick()
    };
    let rec = fault(
        &h,
        "stall",
        &[
            ("x-cadence-stall-ms", "300"),
            ("x-cadence-stall-after", "3"),
        ],
        t,
    )
    .await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    let max_gap = rec
        .chunks
        .windows(2)
        .map(|w| w[1].t_ns() - w[0].t_ns())
        .max()
        .unwrap();
    assert!(
        max_gap >= 290_000_000,
        "the stall is one gap, not clipped: {max_gap} ns"
    );
    assert_eq!(rec.chunks.len(), 8);
}

#[tokio::test]
async fn f32_reset_mid_stream_is_truncated() {
    let h = harness().await;
    // A reset discards what the client has not read yet: tokens 30 ms apart give it
    // time to take each one before the cut, even on a loaded machine.
    let rec = fault(&h, "reset", &[("x-cadence-itl-ms", "30")], quick()).await;
    assert_eq!(rec.outcome, Outcome::Truncated, "{rec:?}");
    assert!(!rec.chunks.is_empty(), "tokens before the reset are kept");
}

#[tokio::test]
async fn f33_status_codes_classified_not_retried() {
    let h = harness().await;
    let rec = fault(&h, "status_429", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Http429, "{rec:?}");
    assert_eq!(rec.http_status, Some(429));
    assert!(
        rec.error.as_deref().unwrap_or("").contains("Retry-After"),
        "{rec:?}"
    );
    let rec = fault(&h, "status_503", &[], quick()).await;
    assert_eq!(rec.outcome, Outcome::Http5xx, "{rec:?}");
}

#[tokio::test]
async fn total_timeout_is_its_own_outcome() {
    let h = harness().await;
    let t = Timeouts {
        total: Duration::from_millis(300),
        ..quick()
    };
    let rec = fault(
        &h,
        "stall",
        &[
            ("x-cadence-stall-ms", "2000"),
            ("x-cadence-stall-after", "2"),
        ],
        t,
    )
    .await;
    assert_eq!(rec.outcome, Outcome::TotalTimeout, "{rec:?}");
}

#[tokio::test]
async fn http2_prior_knowledge_streams() {
    let h = harness().await;
    let h2 = Harness {
        client: client::build(&ClientConfig {
            pool_size: 2,
            connect_timeout: Duration::from_secs(2),
            http2: true,
        }),
        sim: h.sim,
    };
    let (req, _) = factory(h2.sim.addr, Api::Chat, &[], 6, None).build(0);
    let rec = request_with(&h2, req, Api::Chat, quick(), false).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    assert_eq!(rec.chunks.len(), 6);
}

#[tokio::test]
async fn f27_tls_to_a_plain_http_server_is_a_tls_error() {
    let h = harness().await;
    let mut f = factory(h.sim.addr, Api::Chat, &[], 4, None);
    f.endpoint = format!("https://{}/v1/chat/completions", h.sim.addr)
        .parse()
        .unwrap();
    let (req, _) = f.build(0);
    let rec = request_with(&h, req, Api::Chat, quick(), false).await;
    assert_eq!(rec.outcome, Outcome::TlsError, "{rec:?}");
}

#[tokio::test]
async fn stale_pooled_connection_is_resent_once_and_recorded() {
    let addr = cadence_sim::closing::closing_server(true, 64);
    let h = harness().await;
    let f = factory(addr, Api::Chat, &[], 4, None);
    for i in 0..6 {
        let (req, _) = f.build(i);
        let rec = request_with(&h, req, Api::Chat, quick(), false).await;
        assert_eq!(rec.outcome, Outcome::Succeeded, "request {i}: {rec:?}");
        // A new connection goes to the pool and is dead when the next request draws
        // it; the resend's own connection is never pooled. So: new, resent, new, ...
        let expected = (i % 2) as u32;
        assert_eq!(
            rec.counters.stale_connection_retries, expected,
            "request {i}: {rec:?}"
        );
    }
}

/// A fresh connection that closes before answering may have delivered
/// the request, so it is not resent (it used to be, once).
#[tokio::test]
async fn a_fresh_connection_that_never_answers_is_not_resent() {
    let addr = cadence_sim::closing::closing_server(false, 8);
    let h = harness().await;
    let (req, _) = factory(addr, Api::Chat, &[], 4, None).build(0);
    let rec = request_with(&h, req, Api::Chat, quick(), false).await;
    assert_eq!(rec.outcome, Outcome::TransportError, "{rec:?}");
    assert_eq!(rec.counters.stale_connection_retries, 0);
    assert!(rec.error.unwrap().contains("closed"));
}

#[tokio::test]
async fn a_stream_longer_than_the_idle_timeout_that_never_idles_succeeds() {
    // 8 chunks 50 ms apart last ~350 ms, well past a 150 ms idle timeout, but no gap
    // reaches it: the idle deadline must follow the reads.
    let h = harness().await;
    let t = Timeouts {
        idle: Duration::from_millis(150),
        ..quick()
    };
    let (req, _) = factory(
        h.sim.addr,
        Api::Chat,
        &[("x-cadence-itl-ms", "50")],
        8,
        None,
    )
    .build(0);
    let rec = request_with(&h, req, Api::Chat, t, false).await;
    assert_eq!(rec.outcome, Outcome::Succeeded, "{rec:?}");
    // The sim keeps an absolute schedule (a late chunk makes the next gap shorter), so
    // the stream's whole life is the robust measure, not first-to-last chunk.
    let life = rec.end_ns.unwrap() - rec.sent_ns.unwrap();
    assert!(
        life > 300_000_000,
        "the stream outlived the idle timeout twice over: {life} ns"
    );
}

//! FAULTS.md rows 1–26 (stream parsing), one test per row, each driving a
//! `StreamTracker` with hand-built byte streams and asserting on the `RequestRecord`.
//!
//! Row 26 (unexpected content type) is classified by the HTTP client from the header,
//! not here: its test only checks that the decoders digest an HTML page without
//! producing chunks or a success.

use cadence_base::{Chunk, Outcome, RequestRecord, TokenCount, TokenSource};
use cadence_wire::sse::{SseDecoder, SseItem};
use cadence_wire::{Api, Flow, Framing, StreamTracker, TrackerConfig, MAX_EVENT_BYTES};
use serde_json::json;

/// The outcome the caller put in the record before streaming; the tracker must replace it.
const UNSET: Outcome = Outcome::TransportError;

fn cfg(api: Api, framing: Framing, strict: bool) -> TrackerConfig {
    TrackerConfig {
        api,
        framing,
        strict,
    }
}

fn chat() -> TrackerConfig {
    cfg(Api::Chat, Framing::Sse, false)
}

fn new_rec() -> RequestRecord {
    RequestRecord::new(0, UNSET)
}

/// Feed `(t_ns, bytes)` reads, then finish at `end`.
fn run_with(config: TrackerConfig, reads: &[(u64, &[u8])], end: u64) -> RequestRecord {
    let mut tr = StreamTracker::new(config);
    let mut rec = new_rec();
    for (t, b) in reads {
        tr.feed(*t, b, &mut rec);
    }
    tr.finish(end, &mut rec);
    rec
}

/// `bytes` in two reads split at `k` (t=1 and t=2), finished at t=3; the tracker is
/// returned too for its text.
fn split_at(config: TrackerConfig, bytes: &[u8], k: usize) -> (StreamTracker, RequestRecord) {
    let mut tr = StreamTracker::new(config);
    let mut rec = new_rec();
    tr.feed(1, &bytes[..k], &mut rec);
    tr.feed(2, &bytes[k..], &mut rec);
    tr.finish(3, &mut rec);
    (tr, rec)
}

/// One read per stream, all at t=10, finish at t=99.
fn run1(config: TrackerConfig, bytes: &[u8]) -> RequestRecord {
    run_with(config, &[(10, bytes)], 99)
}

fn sse(value: serde_json::Value) -> String {
    format!("data: {value}\n\n")
}

fn content(text: &str) -> String {
    sse(
        json!({"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",
        "choices":[{"index":0,"delta":{"content":text},"finish_reason":null}]}),
    )
}

fn role() -> String {
    sse(
        json!({"choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}),
    )
}

fn finish(reason: &str) -> String {
    sse(json!({"choices":[{"index":0,"delta":{},"finish_reason":reason}]}))
}

fn usage(prompt: u64, completion: u64) -> String {
    sse(
        json!({"choices":[],"usage":{"prompt_tokens":prompt,"completion_tokens":completion,
        "total_tokens":prompt+completion}}),
    )
}

const DONE: &str = "data: [DONE]\n\n";

fn times(rec: &RequestRecord) -> Vec<u64> {
    rec.chunks.iter().map(Chunk::t_ns).collect()
}

/// A typical full stream and the byte offsets where each content event ends.
fn typical_stream() -> (String, Vec<usize>) {
    let mut s = role();
    let mut ends = Vec::new();
    for t in ["Hel", "lo, w\u{f6}rld", " \u{1F600}", "!"] {
        s.push_str(&content(t));
        ends.push(s.len());
    }
    s.push_str(&finish("stop"));
    s.push_str(&usage(7, 4));
    s.push_str(DONE);
    (s, ends)
}

#[test]
fn f01_event_split_at_every_byte_offset() {
    let (s, ends) = typical_stream();
    let b = s.as_bytes();
    let whole = run1(chat(), b);
    assert_eq!(whole.outcome, Outcome::Succeeded);
    assert_eq!(whole.chunks.len(), 4);
    for k in 0..=b.len() {
        let (tr, rec) = split_at(chat(), b, k);
        // A chunk is stamped with the read that completed its event.
        let want: Vec<u64> = ends.iter().map(|&e| if e <= k { 1 } else { 2 }).collect();
        assert_eq!(times(&rec), want, "split at {k}");
        assert_eq!(tr.text(), "Hello, w\u{f6}rld \u{1F600}!", "split at {k}");
        assert_eq!(rec.outcome, Outcome::Succeeded, "split at {k}");
        assert_eq!(rec.output_tokens, whole.output_tokens, "split at {k}");
        assert_eq!(rec.input_tokens, Some(7));
        assert_eq!(rec.finish_reason.as_deref(), Some("stop"));
        assert_eq!(rec.counters.malformed, 0);
        assert_eq!(rec.counters.bytes_after_done, 0, "split at {k}");
    }
    // And one byte per read.
    let mut tr = StreamTracker::new(chat());
    let mut rec = new_rec();
    for (i, byte) in b.iter().enumerate() {
        tr.feed(i as u64, std::slice::from_ref(byte), &mut rec);
    }
    tr.finish(b.len() as u64, &mut rec);
    let want: Vec<u64> = ends.iter().map(|&e| e as u64 - 1).collect();
    assert_eq!(times(&rec), want);
    assert_eq!(rec.counters.reads as usize, b.len());
    assert_eq!(rec.counters.coalesced, 0);
    assert_eq!(rec.outcome, Outcome::Succeeded);
}

#[test]
fn f02_many_events_in_one_read() {
    let mut first = role();
    for t in ["a", "b", "c", "d", "e"] {
        first.push_str(&content(t));
    }
    let second = format!("{}{}{}{}", content("f"), content("g"), finish("stop"), DONE);
    let rec = run_with(
        chat(),
        &[(100, first.as_bytes()), (200, second.as_bytes())],
        300,
    );
    assert_eq!(times(&rec), vec![100, 100, 100, 100, 100, 200, 200]);
    // 5 content events in read 1 (4 beyond the first), 2 in read 2 (1 beyond).
    assert_eq!(rec.counters.coalesced, 5);
    assert_eq!(rec.counters.reads, 2);
    assert_eq!(rec.first_content_ns, Some(100));
    assert_eq!(rec.end_ns, Some(300));
    assert_eq!(rec.outcome, Outcome::Succeeded);
}

#[test]
fn f03_crlf_bare_cr_and_mixed_line_endings() {
    let (lf, _) = typical_stream();
    let want = run1(chat(), lf.as_bytes());
    let crlf = lf.replace('\n', "\r\n");
    let cr = lf.replace('\n', "\r");
    // Mixed: cycle the three kinds line by line (in an order where a bare CR is never
    // followed by an LF, which would make the two one CRLF).
    let mut mixed = String::new();
    for (i, line) in lf.split_inclusive('\n').enumerate() {
        let body = line.trim_end_matches('\n');
        mixed.push_str(body);
        mixed.push_str(["\n", "\r", "\r\n"][i % 3]);
    }
    assert!(mixed.contains("\r\r\n") && mixed.contains("\n\r"));
    for variant in [&crlf, &cr, &mixed] {
        let got = run1(chat(), variant.as_bytes());
        assert_eq!(got, want, "{variant:?}");
    }
    // CRLF split between reads (CR ends read 1, LF starts read 2) at every CR.
    for (i, _) in crlf.match_indices('\r') {
        let got = run_with(
            chat(),
            &[
                (10, &crlf.as_bytes()[..=i]),
                (10, &crlf.as_bytes()[i + 1..]),
            ],
            99,
        );
        assert_eq!(got.chunks, want.chunks, "split after CR at {i}");
        assert_eq!(got.outcome, Outcome::Succeeded);
        assert_eq!(got.counters.bytes_after_done, 0, "split after CR at {i}");
    }
}

#[test]
fn f04_data_with_no_space_or_two_spaces() {
    let body = json!({"choices":[{"delta":{"content":"x"}}]}).to_string();
    let s = format!("data:{body}\n\ndata:  {body}\n\ndata:[DONE]\n\n");
    let rec = run1(chat(), s.as_bytes());
    assert_eq!(rec.chunks.len(), 2);
    assert_eq!(rec.outcome, Outcome::Succeeded);
    assert_eq!(rec.counters.malformed, 0);
    // Exactly one space is stripped: the second event keeps one.
    let mut data = Vec::new();
    SseDecoder::new().feed(s.as_bytes(), &mut |i| {
        if let SseItem::Event(e) = i {
            data.push(e.data.to_owned());
        }
    });
    assert_eq!(
        data,
        vec![body.clone(), format!(" {body}"), "[DONE]".into()]
    );
}

#[test]
fn f05_multiline_data_joined_with_newline() {
    let s = "data: {\"choices\":[{\"delta\":\ndata: {\"content\":\"hi\"}}]}\n\n\
             data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}],\ndata:\"usage\":null}\n\n"
        .to_owned()
        + DONE;
    let mut tr = StreamTracker::new(chat());
    let mut rec = new_rec();
    tr.feed(5, s.as_bytes(), &mut rec);
    tr.finish(6, &mut rec);
    assert_eq!(tr.text(), "hia");
    assert_eq!(rec.chunks.len(), 2);
    assert_eq!(rec.counters.malformed, 0);
    let mut data = Vec::new();
    SseDecoder::new().feed(b"data: a\ndata: b\ndata\n\n", &mut |i| {
        if let SseItem::Event(e) = i {
            data.push(e.data.to_owned());
        }
    });
    assert_eq!(data, vec!["a\nb\n"]);
}

#[test]
fn f06_keepalive_comment_is_not_a_token() {
    let reads: Vec<(u64, String)> = vec![
        (10, ": ping\n\n".into()),
        (20, "event: ping\ndata: {\"type\":\"ping\"}\n\n".into()),
        (30, "event: ping\n\n:\n\n".into()),
        (40, content("hi")),
        (50, ": keep-alive\n\n".into()),
        (60, finish("stop") + DONE),
    ];
    let reads: Vec<(u64, &[u8])> = reads.iter().map(|(t, s)| (*t, s.as_bytes())).collect();
    let rec = run_with(chat(), &reads, 70);
    assert_eq!(rec.counters.keepalives, 5);
    assert_eq!(times(&rec), vec![40]);
    assert_eq!(rec.first_chunk_ns(), Some(40));
    assert_eq!(rec.counters.malformed, 0);
    assert_eq!(rec.outcome, Outcome::Succeeded);
}

#[test]
fn f07_keepalive_garbage_data_is_malformed_and_strict_fails() {
    let s = content("a") + "data: : keepalive\n\n" + &content("b") + &finish("stop") + DONE;
    let rec = run1(chat(), s.as_bytes());
    assert_eq!(rec.counters.malformed, 1);
    assert_eq!(rec.chunks.len(), 2, "the stream continues");
    assert_eq!(rec.outcome, Outcome::Succeeded);

    let mut tr = StreamTracker::new(cfg(Api::Chat, Framing::Sse, true));
    let mut rec = new_rec();
    assert_eq!(tr.feed(1, s.as_bytes(), &mut rec), Flow::Stop);
    assert_eq!(rec.outcome, Outcome::MalformedEvent);
    // Later reads are ignored (but counted as reads).
    assert_eq!(tr.feed(2, content("c").as_bytes(), &mut rec), Flow::Stop);
    tr.finish(3, &mut rec);
    assert_eq!(rec.outcome, Outcome::MalformedEvent);
    assert_eq!(rec.chunks.len(), 1, "only the chunk before the bad event");
    assert_eq!(rec.counters.malformed, 1);
    assert_eq!(rec.counters.reads, 2);
    assert!(rec.error.is_some());
}

#[test]
fn f08_error_object_after_tokens_is_stream_error() {
    let err = sse(
        json!({"error":{"message":"CUDA out of memory","type":"InternalServerError","code":500}}),
    );
    let s = content("a") + &content("b") + &content("c") + &err;
    let rec = run_with(chat(), &[(10, s.as_bytes())], 20);
    assert_eq!(rec.outcome, Outcome::StreamError);
    assert_eq!(rec.error.as_deref(), Some("CUDA out of memory"));
    assert_eq!(rec.chunks.len(), 3, "partial tokens kept");
    assert_eq!(rec.end_ns, Some(20));
    // A [DONE] after the error does not turn it into a success.
    let s2 = s + DONE;
    let rec = run1(chat(), s2.as_bytes());
    assert_eq!(rec.outcome, Outcome::StreamError);
    // A very long message is cut to 1 KiB on a character boundary.
    let long = "\u{e9}".repeat(2000);
    let rec = run1(chat(), sse(json!({"error": long})).as_bytes());
    let e = rec.error.unwrap();
    assert!(e.len() <= 1024 && e.len() >= 1022, "{}", e.len());
}

#[test]
fn f09_http_200_with_only_an_error_object_is_a_failure() {
    let bodies: Vec<String> = vec![
        sse(json!({"error":{"message":"model not found","type":"invalid_request_error"}})),
        sse(json!({"error":"rate limited"})),
        sse(
            json!({"object":"error","message":"max_tokens too large","type":"BadRequestError","code":400}),
        ),
        "event: error\ndata: {\"message\":\"overloaded\"}\n\n".into(),
        // Not SSE at all: a bare JSON error body, one line or pretty-printed.
        json!({"error":{"message":"bare json"}}).to_string(),
        "{\n  \"error\": {\n    \"message\": \"pretty\"\n  }\n}\n".into(),
    ];
    for body in &bodies {
        let rec = run1(chat(), body.as_bytes());
        assert_eq!(rec.outcome, Outcome::StreamError, "{body}");
        assert!(rec.error.as_deref().is_some_and(|e| !e.is_empty()));
        assert!(rec.chunks.is_empty());
        assert_ne!(rec.outcome, Outcome::Succeeded);
    }
    let rec = run1(chat(), bodies[2].as_bytes());
    assert_eq!(rec.error.as_deref(), Some("max_tokens too large"));
    let rec = run1(chat(), bodies[5].as_bytes());
    assert_eq!(rec.error.as_deref(), Some("pretty"));
    // NDJSON framing too.
    let rec = run1(cfg(Api::Chat, Framing::Ndjson, false), bodies[4].as_bytes());
    assert_eq!(rec.outcome, Outcome::StreamError);
}

#[test]
fn f10_eof_without_done_or_finish_reason_is_truncated() {
    let s = role() + &content("a") + &content("b");
    let rec = run_with(chat(), &[(10, s.as_bytes())], 50);
    assert_eq!(rec.outcome, Outcome::Truncated);
    assert_eq!(rec.chunks.len(), 2);
    assert_eq!(rec.end_ns, Some(50));
    assert!(!rec.counters.no_done_marker);
    // EOF in the middle of an event: the partial event is discarded and counted.
    let s = content("a") + "data: {\"choices\":[{\"delta\":{\"content\":\"b\"}}]}\n";
    let rec = run1(chat(), s.as_bytes());
    assert_eq!(rec.outcome, Outcome::Truncated);
    assert_eq!(rec.chunks.len(), 1);
    assert_eq!(rec.counters.malformed, 1);
    // An empty body.
    let rec = run_with(chat(), &[], 5);
    assert_eq!(rec.outcome, Outcome::Truncated);
    assert_eq!(rec.counters.reads, 0);
}

#[test]
fn f11_finish_reason_without_done_is_success_with_no_done_marker() {
    let s = content("a") + &finish("stop");
    let rec = run1(chat(), s.as_bytes());
    assert_eq!(rec.outcome, Outcome::Succeeded);
    assert!(rec.counters.no_done_marker);
    assert_eq!(rec.finish_reason.as_deref(), Some("stop"));
    let with_done = run1(chat(), (s + DONE).as_bytes());
    assert!(!with_done.counters.no_done_marker);
}

#[test]
fn f12_bytes_after_done_are_ignored_and_counted() {
    let tail1 = content("late") + ": x\n\n";
    let read1 = content("a") + DONE + &tail1;
    let read2 = content("later");
    let mut tr = StreamTracker::new(chat());
    let mut rec = new_rec();
    tr.feed(1, read1.as_bytes(), &mut rec);
    assert!(tr.is_done());
    tr.feed(2, read2.as_bytes(), &mut rec);
    tr.finish(3, &mut rec);
    assert_eq!(
        rec.counters.bytes_after_done,
        (tail1.len() + read2.len()) as u64
    );
    assert_eq!(rec.chunks.len(), 1);
    assert_eq!(rec.counters.keepalives, 0);
    assert_eq!(tr.text(), "a");
    assert_eq!(rec.outcome, Outcome::Succeeded);
    assert_eq!(rec.counters.reads, 2);
    // A CR-terminated [DONE] whose LF opens the next read: that LF is not "after".
    let mut tr = StreamTracker::new(chat());
    let mut rec = new_rec();
    tr.feed(1, b"data: [DONE]\r\r", &mut rec);
    tr.feed(2, b"\nxyz", &mut rec);
    tr.finish(3, &mut rec);
    assert_eq!(rec.counters.bytes_after_done, 3);
}

/// A stream ends when it says so. `end_stream` (what the client and
/// the proxy call when they stop reading) puts `end_ns` at the `[DONE]` read, or without
/// `[DONE]` at the last event from the finish reason on; bytes after are counted only.
#[test]
fn done_ends_the_stream_at_its_own_time() {
    let mut tr = StreamTracker::new(chat());
    let mut rec = new_rec();
    tr.feed(100, content("a").as_bytes(), &mut rec);
    tr.feed(200, (content("b") + DONE).as_bytes(), &mut rec);
    tr.feed(900, b": late\n\n", &mut rec);
    tr.end_stream(60_000, &mut rec);
    assert_eq!(rec.outcome, Outcome::Succeeded);
    assert_eq!(rec.end_ns, Some(200));
    assert_eq!(rec.counters.bytes_after_done, 8);
    // No [DONE]: the finish event, or the usage chunk after it, is the end.
    let mut tr = StreamTracker::new(chat());
    let mut rec = new_rec();
    tr.feed(100, content("a").as_bytes(), &mut rec);
    tr.feed(150, finish("stop").as_bytes(), &mut rec);
    tr.feed(160, usage(3, 1).as_bytes(), &mut rec);
    tr.feed(170, b": keep-alive\n\n", &mut rec);
    tr.end_stream(400, &mut rec);
    assert_eq!(rec.outcome, Outcome::Succeeded);
    assert!(rec.counters.no_done_marker);
    assert_eq!(rec.end_ns, Some(160));
    // A truncated stream ends when the connection did.
    let mut tr = StreamTracker::new(chat());
    let mut rec = new_rec();
    tr.feed(100, content("a").as_bytes(), &mut rec);
    tr.end_stream(400, &mut rec);
    assert_eq!(rec.outcome, Outcome::Truncated);
    assert_eq!(rec.end_ns, Some(400));
}

#[test]
fn f13_usage_only_chunk_with_empty_choices() {
    let s = content("a") + &content("b") + &finish("stop") + &usage(11, 2) + DONE;
    let rec = run1(chat(), s.as_bytes());
    assert_eq!(
        rec.chunks.len(),
        2,
        "the usage chunk is not a token arrival"
    );
    assert_eq!(
        rec.output_tokens,
        Some(TokenCount {
            count: 2,
            source: TokenSource::Usage
        })
    );
    assert_eq!(rec.input_tokens, Some(11));
    assert_eq!(rec.outcome, Outcome::Succeeded);
    // `choices` missing altogether, or usage before any content.
    let s = sse(json!({"usage":{"prompt_tokens":1,"completion_tokens":0}})) + DONE;
    let rec = run1(chat(), s.as_bytes());
    assert!(rec.chunks.is_empty());
    assert_eq!(rec.counters.malformed, 0);
}

#[test]
fn f14_usage_on_every_chunk_last_value_wins() {
    // vLLM continuous_usage_stats: cumulative usage on every chunk.
    let mut s = sse(
        json!({"choices":[{"delta":{"role":"assistant","content":""}}],
        "usage":{"prompt_tokens":9,"completion_tokens":0}}),
    );
    for (i, t) in ["a", "bc", "d"].iter().enumerate() {
        let ct = [1, 3, 4][i];
        s += &sse(json!({"choices":[{"delta":{"content":t}}],
            "usage":{"prompt_tokens":9,"completion_tokens":ct}}));
    }
    s += &sse(json!({"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4}}));
    s += DONE;
    let rec = run1(chat(), s.as_bytes());
    assert_eq!(
        rec.output_tokens,
        Some(TokenCount {
            count: 4,
            source: TokenSource::Usage
        }),
        "never summed"
    );
    assert_eq!(rec.input_tokens, Some(9));
    let per_chunk: Vec<Option<u32>> = rec.chunks.iter().map(Chunk::tokens).collect();
    assert_eq!(per_chunk, vec![Some(1), Some(2), Some(1)]);
}

#[test]
fn f15_role_only_first_chunk_is_not_the_first_token() {
    let rec = run_with(
        chat(),
        &[
            (10, role().as_bytes()),
            (20, content("").as_bytes()),
            (30, content("hi").as_bytes()),
            (40, DONE.as_bytes()),
        ],
        50,
    );
    assert_eq!(times(&rec), vec![30]);
    assert_eq!(rec.first_content_ns, Some(30));
    assert_eq!(rec.first_chunk_ns(), Some(30));
}

#[test]
fn f16_empty_or_null_content_mid_stream_is_not_a_token() {
    let null = sse(json!({"choices":[{"delta":{"content":null}}]}));
    let empty_delta = sse(json!({"choices":[{"delta":{}}]}));
    let s = content("a") + &content("") + &null + &empty_delta + &content("b") + DONE;
    let mut tr = StreamTracker::new(chat());
    let mut rec = new_rec();
    tr.feed(1, s.as_bytes(), &mut rec);
    tr.finish(2, &mut rec);
    assert_eq!(rec.chunks.len(), 2);
    assert_eq!(rec.counters.coalesced, 1);
    assert_eq!(tr.text(), "ab");
    assert_eq!(rec.counters.malformed, 0);
}

#[test]
fn f17_reasoning_deltas_count_for_ttft_and_first_content_is_separate() {
    let r1 = sse(json!({"choices":[{"delta":{"reasoning_content":"Let me"}}]}));
    let r2 = sse(json!({"choices":[{"delta":{"reasoning":" think"}}]}));
    // vLLM sends the same text under both names: one chunk, text once.
    let both = sse(json!({"choices":[{"delta":{"reasoning_content":".","reasoning":"."}}]}));
    // Reasoning and content in one event: one chunk.
    let mixed = sse(json!({"choices":[{"delta":{"reasoning_content":"!","content":"Hi"}}]}));
    let mut tr = StreamTracker::new(chat());
    let mut rec = new_rec();
    tr.feed(10, r1.as_bytes(), &mut rec);
    tr.feed(20, r2.as_bytes(), &mut rec);
    tr.feed(25, both.as_bytes(), &mut rec);
    tr.feed(30, mixed.as_bytes(), &mut rec);
    tr.feed(40, (content(" there") + DONE).as_bytes(), &mut rec);
    tr.finish(50, &mut rec);
    assert_eq!(times(&rec), vec![10, 20, 25, 30, 40]);
    assert_eq!(rec.first_chunk_ns(), Some(10), "reasoning counts for TTFT");
    assert_eq!(rec.first_content_ns, Some(30), "first visible content");
    assert_eq!(tr.text(), "Hi there");
    assert_eq!(tr.reasoning_text(), "Let me think.!");
    assert!(tr.has_output());
}

#[test]
fn f18_tool_calls_only_stream_counts_as_output() {
    let s = role()
        + &sse(
            json!({"choices":[{"delta":{"tool_calls":[{"index":0,"id":"call_1","type":"function",
            "function":{"name":"get_weather","arguments":""}}]}}]}),
        )
        + &sse(
            json!({"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"city\":"}}]}}]}),
        )
        + &sse(
            json!({"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"Paris\"}"}}]}}]}),
        )
        + &sse(
            json!({"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":""}}]}}]}),
        )
        + &finish("tool_calls")
        + DONE;
    let mut tr = StreamTracker::new(chat());
    let mut rec = new_rec();
    tr.feed(7, s.as_bytes(), &mut rec);
    tr.finish(8, &mut rec);
    assert!(tr.has_output());
    assert_eq!(
        rec.chunks.len(),
        3,
        "an empty argument fragment is no output"
    );
    assert_eq!(rec.first_chunk_ns(), Some(7));
    assert_eq!(rec.first_content_ns, None);
    assert_eq!(tr.text(), "");
    assert_eq!(rec.finish_reason.as_deref(), Some("tool_calls"));
    assert_eq!(rec.outcome, Outcome::Succeeded);
}

#[test]
fn f19_several_tokens_in_one_chunk() {
    // vLLM token ids on chat choices.
    let s = sse(json!({"choices":[{"delta":{"content":"Hello there"},"token_ids":[9906,1070]}]}))
        + &sse(json!({"choices":[{"delta":{"content":" you"},"token_ids":[499]}]}))
        + DONE;
    let rec = run1(chat(), s.as_bytes());
    let per_chunk: Vec<Option<u32>> = rec.chunks.iter().map(Chunk::tokens).collect();
    assert_eq!(per_chunk, vec![Some(2), Some(1)]);
    assert_eq!(
        rec.output_tokens,
        Some(TokenCount {
            count: 3,
            source: TokenSource::TokenIds
        })
    );
    // Usage, once seen, wins over token ids.
    let s2 = s.replace(DONE, "") + &usage(5, 4) + DONE;
    let rec = run1(chat(), s2.as_bytes());
    assert_eq!(
        rec.output_tokens,
        Some(TokenCount {
            count: 4,
            source: TokenSource::Usage
        })
    );
    // llama.cpp `tokens` on completions choices.
    let s = sse(json!({"choices":[{"index":0,"text":"abc","tokens":[1,2,3]}]}))
        + &sse(json!({"choices":[{"index":0,"text":"","tokens":[],"finish_reason":"length"}]}));
    let rec = run1(cfg(Api::Completions, Framing::Sse, false), s.as_bytes());
    assert_eq!(rec.chunks, vec![Chunk(10, Some(3))]);
    assert_eq!(rec.output_tokens.map(|t| t.count), Some(3));
    assert_eq!(rec.outcome, Outcome::Succeeded);
    assert!(rec.counters.no_done_marker);
}

#[test]
fn f20_no_usage_anywhere_keeps_text_for_the_tokenizer() {
    let s = content("The") + &content(" quick") + &content(" fox") + &finish("length") + DONE;
    let mut tr = StreamTracker::new(chat());
    let mut rec = new_rec();
    tr.feed(1, s.as_bytes(), &mut rec);
    tr.finish(2, &mut rec);
    assert_eq!(rec.output_tokens, None, "never assume max_tokens");
    assert!(rec.chunks.iter().all(|c| c.tokens().is_none()));
    assert_eq!(tr.text(), "The quick fox");
    assert_eq!(rec.output_token_count().source, TokenSource::Chunks);
    // Completions dialect.
    let s = sse(json!({"choices":[{"text":"one"}]}))
        + &sse(json!({"choices":[{"text":" two"}]}))
        + DONE;
    let mut tr = StreamTracker::new(cfg(Api::Completions, Framing::Sse, false));
    let mut rec = new_rec();
    tr.feed(1, s.as_bytes(), &mut rec);
    tr.finish(2, &mut rec);
    assert_eq!(tr.text(), "one two");
    assert_eq!(rec.output_tokens, None);
}

#[test]
fn f21_utf8_character_split_across_reads() {
    let text = "h\u{e9}llo \u{1F600} \u{4e16}\u{754c}";
    let s = content(text) + DONE;
    let b = s.as_bytes();
    for k in 0..=b.len() {
        let (tr, rec) = split_at(chat(), b, k);
        assert_eq!(tr.text(), text, "split at {k}");
        assert!(!tr.text().contains('\u{FFFD}'));
        assert_eq!(rec.counters.malformed, 0);
    }
    // Three-way splits inside the 4-byte emoji.
    let at = s.find('\u{1F600}').unwrap();
    let mut tr = StreamTracker::new(chat());
    let mut rec = new_rec();
    for part in [
        &b[..at + 1],
        &b[at + 1..at + 2],
        &b[at + 2..at + 3],
        &b[at + 3..],
    ] {
        tr.feed(1, part, &mut rec);
    }
    tr.finish(2, &mut rec);
    assert_eq!(tr.text(), text);
}

#[test]
fn f22_model_text_containing_data_prefix() {
    let text = "data: hello\ndata: [DONE]\n\nevent: error\n: ping";
    let s = content(text) + &content("data: ") + DONE;
    let mut tr = StreamTracker::new(chat());
    let mut rec = new_rec();
    tr.feed(1, s.as_bytes(), &mut rec);
    tr.finish(2, &mut rec);
    assert_eq!(tr.text(), format!("{text}data: "));
    assert_eq!(rec.chunks.len(), 2);
    assert_eq!(rec.outcome, Outcome::Succeeded);
    assert_eq!(rec.counters.keepalives, 0);
    // Completions text starting with the prefix, and a bare data: data line.
    let s = "data: data: {\"choices\":[]}\n\n".to_owned()
        + &sse(json!({"choices":[{"text":"data: x"}]}));
    let mut tr = StreamTracker::new(cfg(Api::Completions, Framing::Sse, false));
    let mut rec = new_rec();
    tr.feed(1, s.as_bytes(), &mut rec);
    tr.finish(2, &mut rec);
    assert_eq!(tr.text(), "data: x");
    assert_eq!(rec.counters.malformed, 1, "`data: data: {{…}}` is not JSON");
}

#[test]
fn f23_oversized_event_is_capped() {
    // A 10 MB event fed in 64 KiB reads: stops right after the cap, never buffers it all.
    let mut big = String::from("data: {\"choices\":[{\"delta\":{\"content\":\"");
    big.push_str(&"x".repeat(10_000_000));
    big.push_str("\"}}]}\n\n");
    for framing in [Framing::Sse, Framing::Ndjson] {
        let body = match framing {
            Framing::Sse => big.clone(),
            Framing::Ndjson => big["data: ".len()..].to_owned(),
        };
        let first = match framing {
            Framing::Sse => content("a"),
            Framing::Ndjson => content("a")["data: ".len()..].to_owned(),
        };
        let mut tr = StreamTracker::new(cfg(Api::Chat, framing, false));
        let mut rec = new_rec();
        assert_eq!(tr.feed(1, first.as_bytes(), &mut rec), Flow::Continue);
        assert_eq!(rec.chunks.len(), 1, "{framing:?}");
        let mut fed = 0;
        let mut flow = Flow::Continue;
        for part in body.as_bytes().chunks(64 * 1024) {
            flow = tr.feed(2, part, &mut rec);
            fed += part.len();
            if flow == Flow::Stop {
                break;
            }
        }
        assert_eq!(flow, Flow::Stop, "{framing:?}");
        assert!(fed <= MAX_EVENT_BYTES + 64 * 1024, "{framing:?}: {fed}");
        tr.finish(3, &mut rec);
        assert_eq!(rec.outcome, Outcome::EventTooLarge, "{framing:?}");
        assert!(rec.error.is_some());
    }
    // No newline ever.
    let mut tr = StreamTracker::new(chat());
    let mut rec = new_rec();
    let junk = vec![b'a'; 4096];
    let mut n = 0;
    while tr.feed(1, &junk, &mut rec) == Flow::Continue {
        n += 1;
        assert!(n < 1000, "never stopped");
    }
    assert!(n * 4096 <= MAX_EVENT_BYTES);
    tr.finish(2, &mut rec);
    assert_eq!(rec.outcome, Outcome::EventTooLarge);
    // Just under the cap is fine.
    let ok =
        sse(json!({"choices":[{"delta":{"content":"y".repeat(MAX_EVENT_BYTES - 100)}}]})) + DONE;
    let rec = run1(chat(), ok.as_bytes());
    assert_eq!(rec.outcome, Outcome::Succeeded);
    assert_eq!(rec.chunks.len(), 1);
}

#[test]
fn f24_invalid_json_in_data_is_malformed() {
    let bad = [
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\"}}]\n\n",
        "data: {bad json}\n\n",
        "data: {\"choices\":[{\"delta\":{\"content\":\"a\u{1}\"}}]}\n\n",
        "data: 42\n\n",
        "data: {\"id\":\"only an id\"}\n\n",
    ];
    let s = bad.concat() + &content("ok") + DONE;
    let rec = run1(chat(), s.as_bytes());
    assert_eq!(rec.counters.malformed, bad.len() as u32);
    assert_eq!(rec.chunks.len(), 1);
    assert_eq!(rec.outcome, Outcome::Succeeded);
    // Invalid UTF-8 in data is malformed too (decoded lossily, still used).
    let mut raw = b"data: {\"choices\":[{\"delta\":{\"content\":\"a\xFF\"}}]}\n\n".to_vec();
    raw.extend_from_slice(DONE.as_bytes());
    let rec = run1(chat(), &raw);
    assert_eq!(rec.counters.malformed, 1);
    assert_eq!(rec.chunks.len(), 1);
    let rec = run1(cfg(Api::Chat, Framing::Sse, true), bad[0].as_bytes());
    assert_eq!(rec.outcome, Outcome::MalformedEvent);
}

#[test]
fn f25_ndjson_split_lines_many_per_read_no_final_newline_and_error() {
    let line = |t: &str| json!({"choices":[{"delta":{"content":t}}]}).to_string();
    let body = format!(
        "{}\n{}\r\n\n{}\n{}",
        line("a"),
        line("b"),
        line("c"),
        json!({"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"completion_tokens":3}})
    );
    let b = body.as_bytes();
    let nd = cfg(Api::Chat, Framing::Ndjson, false);
    // Split at every offset: same chunks and tokens, tail flushed at EOF.
    for k in 0..=b.len() {
        let (tr, rec) = split_at(nd, b, k);
        assert_eq!(tr.text(), "abc", "split at {k}");
        assert_eq!(rec.outcome, Outcome::Succeeded, "split at {k}");
        // NDJSON has no `[DONE]` to miss: the finish reason is its end.
        assert!(!rec.counters.no_done_marker);
        assert_eq!(rec.output_tokens.map(|t| t.count), Some(3), "split at {k}");
        assert_eq!(rec.counters.malformed, 0);
    }
    // Many objects per read: coalesced, all stamped with that read.
    let rec = run_with(nd, &[(5, b)], 9);
    assert_eq!(times(&rec), vec![5, 5, 5]);
    assert_eq!(rec.counters.coalesced, 2);
    // The unterminated tail is stamped with the read that brought it, not EOF.
    let tail = line("z");
    let rec = run_with(nd, &[(5, tail.as_bytes())], 9);
    assert_eq!(times(&rec), vec![5]);
    assert_eq!(rec.outcome, Outcome::Truncated);
    // An error line is classified.
    let err = format!("{}\n{}\n", line("a"), json!({"error":{"message":"boom"}}));
    let rec = run1(nd, err.as_bytes());
    assert_eq!(rec.outcome, Outcome::StreamError);
    assert_eq!(rec.error.as_deref(), Some("boom"));
    assert_eq!(rec.chunks.len(), 1);
    // [DONE] works in NDJSON too, with bytes after it counted.
    let done = format!("{}\n[DONE]\n{}\n", line("a"), line("b"));
    let rec = run1(nd, done.as_bytes());
    assert_eq!(rec.outcome, Outcome::Succeeded);
    assert_eq!(rec.counters.bytes_after_done, line("b").len() as u64 + 1);
}

#[test]
fn f26_html_error_page_does_not_choke_the_decoders() {
    // The content-type check (protocol_mismatch) belongs to the HTTP client; here the
    // decoders must simply digest an HTML body without chunks, panics or a success.
    let html = "<!DOCTYPE html>\n<html><head><title>502 Bad Gateway</title></head>\r\n\
                <body>\n<h1>Bad Gateway</h1>\n<p>data: upstream: http://backend:8000</p>\n\
                <script>var x = {\"a\": 1};</script>\n\n</body></html>";
    for framing in [Framing::Sse, Framing::Ndjson] {
        for strict in [false, true] {
            let mut tr = StreamTracker::new(cfg(Api::Chat, framing, strict));
            let mut rec = new_rec();
            for part in html.as_bytes().chunks(7) {
                if tr.feed(1, part, &mut rec) == Flow::Stop {
                    break;
                }
            }
            tr.finish(2, &mut rec);
            assert!(rec.chunks.is_empty(), "{framing:?}");
            assert!(!tr.has_output());
            assert_ne!(
                rec.outcome,
                Outcome::Succeeded,
                "{framing:?} strict={strict}"
            );
            assert!(rec.outcome.is_failure());
        }
    }
}

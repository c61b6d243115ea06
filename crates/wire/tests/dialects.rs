//! Every dialect, from a fixture written after its public documentation
//! (`tests/fixtures/`), decodes to the same normalized record: the same text, one chunk
//! per content-bearing event, the server's token count and finish reason, and the same
//! record however the body is cut into reads (every two-way split and one byte per
//! read).

use cadence_base::{Outcome, RequestRecord, ServerTiming, TokenSource};
use cadence_wire::{Api, Framing, StreamTracker, TrackerConfig};

/// The body of a fixture: what follows its `---` line.
fn fixture(name: &str) -> Vec<u8> {
    let path = format!("{}/tests/fixtures/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let (head, body) = text
        .split_once("\n---\n")
        .expect("a --- line after the sources");
    assert!(head.lines().all(|l| l.starts_with('#')), "{name}: header");
    assert!(head.contains("https://"), "{name}: cites its source");
    body.as_bytes().to_vec()
}

/// Decodes `reads` (each stamped with its index as the time) into a record.
fn decode(api: Api, framing: Framing, reads: &[&[u8]]) -> (RequestRecord, String, String) {
    let cfg = TrackerConfig {
        api,
        framing,
        strict: false,
    };
    let mut tr = StreamTracker::new(cfg);
    let mut rec = RequestRecord::new(0, Outcome::Succeeded);
    for (i, r) in reads.iter().enumerate() {
        tr.feed(i as u64 + 1, r, &mut rec);
    }
    tr.end_stream(reads.len() as u64 + 1, &mut rec);
    (rec, tr.text().to_owned(), tr.reasoning_text().to_owned())
}

/// The parts of a record that must not depend on how the body was cut.
fn normal(rec: &RequestRecord) -> String {
    format!(
        "{:?} chunks={} tokens={:?} input={:?} finish={:?} err={:?} malformed={} no_done={} \
         timing={:?} per_chunk={:?}",
        rec.outcome,
        rec.chunks.len(),
        rec.output_tokens,
        rec.input_tokens,
        rec.finish_reason,
        rec.error,
        rec.counters.malformed,
        rec.counters.no_done_marker,
        rec.counters.server_timing,
        rec.chunks.iter().map(|c| c.1).collect::<Vec<_>>(),
    )
}

struct Case {
    file: &'static str,
    api: Api,
    framing: Framing,
    chunks: usize,
    reasoning: &'static str,
    tokens: Option<(u64, TokenSource)>,
    input: Option<u64>,
    finish: Option<&'static str>,
    timing: Option<ServerTiming>,
}

/// A case of three chunks with no reasoning text and no server timing.
fn case(
    file: &'static str,
    (api, framing): (Api, Framing),
    tokens: Option<(u64, TokenSource)>,
    input: Option<u64>,
    finish: Option<&'static str>,
) -> Case {
    Case {
        file,
        api,
        framing,
        chunks: 3,
        reasoning: "",
        tokens,
        input,
        finish,
        timing: None,
    }
}

fn cases() -> Vec<Case> {
    let usage = |n| Some((n, TokenSource::Usage));
    let sse = |api| (api, Framing::Sse);
    let timing = |prompt_ns, decode_ns| {
        Some(ServerTiming {
            prompt_ns: Some(prompt_ns),
            decode_ns: Some(decode_ns),
            decode_tokens: Some(3),
            ..ServerTiming::default()
        })
    };
    vec![
        Case {
            reasoning: "Thinking.",
            ..case(
                "responses.sse",
                sse(Api::Responses),
                usage(5),
                Some(12),
                Some("completed"),
            )
        },
        Case {
            reasoning: "Hmm.",
            ..case(
                "anthropic.sse",
                sse(Api::Anthropic),
                usage(5),
                Some(21),
                Some("max_tokens"),
            )
        },
        Case {
            timing: timing(40_000_000, 300_000_000),
            ..case(
                "ollama.ndjson",
                (Api::Ollama, Framing::Ndjson),
                usage(3),
                Some(12),
                Some("length"),
            )
        },
        case(
            "tgi.sse",
            sse(Api::Generate),
            usage(4),
            None,
            Some("eos_token"),
        ),
        case(
            "sglang.sse",
            sse(Api::Generate),
            usage(3),
            Some(12),
            Some("length"),
        ),
        case("kserve.sse", sse(Api::Kserve), None, None, None),
        Case {
            timing: timing(4_500_000, 7_500_000),
            ..case(
                "llamacpp.sse",
                sse(Api::Llamacpp),
                usage(3),
                Some(12),
                Some("limit"),
            )
        },
        Case {
            chunks: 2,
            ..case(
                "realtime.jsonl",
                (Api::Websocket, Framing::Ndjson),
                usage(5),
                Some(12),
                Some("completed"),
            )
        },
    ]
}

#[test]
fn every_dialect_decodes_to_the_same_text_and_the_servers_counts() {
    for c in cases() {
        let body = fixture(c.file);
        let (rec, text, reasoning) = decode(c.api, c.framing, &[&body]);
        let who = c.file;
        assert_eq!(rec.outcome, Outcome::Succeeded, "{who}: {:?}", rec.error);
        assert_eq!(text, "Café au lait", "{who}");
        assert_eq!(reasoning, c.reasoning, "{who}");
        assert_eq!(rec.chunks.len(), c.chunks, "{who}");
        assert_eq!(
            rec.output_tokens.map(|t| (t.count, t.source)),
            c.tokens,
            "{who}"
        );
        assert_eq!(rec.input_tokens, c.input, "{who}");
        assert_eq!(rec.finish_reason.as_deref(), c.finish, "{who}");
        assert_eq!(rec.counters.server_timing, c.timing, "{who}");
        assert_eq!(rec.counters.malformed, 0, "{who}");
        assert!(!rec.counters.no_done_marker, "{who}: its own end marker");
        assert_eq!(rec.counters.bytes_after_done, 0, "{who}");
    }
}

#[test]
fn every_dialect_decodes_the_same_at_every_byte_split() {
    for c in cases() {
        let body = fixture(c.file);
        let (whole, text, _) = decode(c.api, c.framing, &[&body]);
        let want = normal(&whole);
        for cut in 1..body.len() {
            let (rec, t, _) = decode(c.api, c.framing, &[&body[..cut], &body[cut..]]);
            assert_eq!(normal(&rec), want, "{} cut at {cut}", c.file);
            assert_eq!(t, text, "{} cut at {cut}", c.file);
        }
        let bytes: Vec<&[u8]> = body.chunks(1).collect();
        let (rec, t, _) = decode(c.api, c.framing, &bytes);
        assert_eq!(normal(&rec), want, "{} one byte per read", c.file);
        assert_eq!(t, text, "{}", c.file);
    }
}

/// One event per read, as servers usually write them (a read that is one whole `data`
/// event skips the SSE decoder), gives the record of the whole body in one read.
#[test]
fn every_dialect_decodes_the_same_one_event_per_read() {
    for c in cases() {
        let body = fixture(c.file);
        let (whole, text, reasoning) = decode(c.api, c.framing, &[&body]);
        let end: &[u8] = match c.framing {
            Framing::Sse => b"\n\n",
            Framing::Ndjson => b"\n",
        };
        let mut reads = Vec::new();
        let mut rest = &body[..];
        while let Some(i) = rest.windows(end.len()).position(|w| w == end) {
            reads.push(&rest[..i + end.len()]);
            rest = &rest[i + end.len()..];
        }
        if !rest.is_empty() {
            reads.push(rest);
        }
        assert!(reads.len() >= c.chunks, "{}: {} reads", c.file, reads.len());
        let (rec, t, r) = decode(c.api, c.framing, &reads);
        assert_eq!(normal(&rec), normal(&whole), "{}", c.file);
        assert_eq!((t, r), (text.clone(), reasoning.clone()), "{}", c.file);
    }
}

#[test]
fn the_server_per_token_timing_is_its_decode_time_over_its_tokens() {
    let t = ServerTiming {
        decode_ns: Some(7_500_000),
        decode_tokens: Some(3),
        ..ServerTiming::default()
    };
    assert_eq!(t.per_token_ns(), Some(2_500_000.0));
    assert_eq!(ServerTiming::default().per_token_ns(), None);
}

/// One dialect's stream with its last event replaced: how each reports errors.
#[test]
fn errors_mid_stream_fail_the_request_with_the_servers_message() {
    let cases: [(Api, Framing, &str, &str); 7] = [
        (
            Api::Responses,
            Framing::Sse,
            "event: response.failed\ndata: {\"type\":\"response.failed\",\"response\":{\"status\":\"failed\",\"error\":{\"code\":\"server_error\",\"message\":\"boom\"}}}\n\n",
            "boom",
        ),
        (
            Api::Responses,
            Framing::Sse,
            "event: error\ndata: {\"type\":\"error\",\"code\":\"x\",\"message\":\"bad\",\"param\":null}\n\n",
            "bad",
        ),
        (
            Api::Anthropic,
            Framing::Sse,
            "event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
            "Overloaded",
        ),
        (Api::Ollama, Framing::Ndjson, "{\"error\":\"model gone\"}\n", "model gone"),
        (Api::Generate, Framing::Sse, "data:{\"error\":\"Request failed during generation\",\"error_type\":\"generation\"}\n\n", "Request failed during generation"),
        (Api::Kserve, Framing::Sse, "data: {\"error\":\"inference failed\"}\n\n", "inference failed"),
        (Api::Llamacpp, Framing::Sse, "data: {\"error\":{\"code\":500,\"message\":\"slot died\",\"type\":\"server_error\"}}\n\n", "slot died"),
    ];
    for (api, framing, tail, msg) in cases {
        let (rec, ..) = decode(api, framing, &[tail.as_bytes()]);
        assert_eq!(rec.outcome, Outcome::StreamError, "{api:?}");
        assert_eq!(rec.error.as_deref(), Some(msg), "{api:?}");
    }
}

#[test]
fn a_stream_cut_before_its_end_marker_is_truncated() {
    for c in cases() {
        if c.api.ends_at_eof() {
            continue;
        }
        let body = fixture(c.file);
        // Keep everything up to the second content-bearing event.
        let text = String::from_utf8(body).unwrap();
        let cut = text.find("au").expect("the fixtures all say 'au'");
        let line_end = cut + text[cut..].find('\n').unwrap() + 1;
        let (rec, ..) = decode(c.api, c.framing, &[&text.as_bytes()[..line_end]]);
        assert_eq!(rec.outcome, Outcome::Truncated, "{}", c.file);
    }
}

#[test]
fn auto_picks_the_dialect_from_the_path() {
    let cases = [
        ("/v1/chat/completions", Some(Api::Chat)),
        ("/v1/completions", Some(Api::Completions)),
        ("/v1/responses", Some(Api::Responses)),
        ("/v1/messages", Some(Api::Anthropic)),
        ("/api/chat", Some(Api::Ollama)),
        ("/api/generate", Some(Api::Ollama)),
        ("/generate_stream", Some(Api::Generate)),
        ("/generate", Some(Api::Generate)),
        ("/v2/models/ensemble/generate_stream", Some(Api::Kserve)),
        ("/completion", Some(Api::Llamacpp)),
        ("/v1/realtime", Some(Api::Websocket)),
        ("/v1", None),
    ];
    for (path, want) in cases {
        assert_eq!(Api::from_path(path), want, "{path}");
    }
    for api in Api::ALL {
        let json = serde_json::to_string(&api).unwrap();
        assert_eq!(json, format!("\"{}\"", api.name()));
    }
}

/// One whole stream's record, read in one piece.
fn one(api: Api, framing: Framing, body: &str) -> RequestRecord {
    decode(api, framing, &[body.as_bytes()]).0
}

/// vLLM's per-request `metrics` (with `--enable-per-request-metrics`, on the usage chunk
/// or the completed response), llama.cpp's `timings` on its last chat chunk and
/// SGLang's queue time are kept as the server's timing, in ns; a null or absurd field is
/// left out, not read as 0.
#[test]
fn every_dialect_that_reports_the_servers_timing_has_it_in_the_record() {
    let vllm = ServerTiming {
        queue_ns: Some(12_300_000),
        prompt_ns: Some(85_200_000),
        decode_ns: Some(1_240_500_000),
        decode_tokens: Some(128),
        ..ServerTiming::default()
    };
    let metrics = r#""metrics":{"time_to_first_token_ms":85.2,"generation_time_ms":1240.5,"queue_time_ms":12.3,"mean_itl_ms":9.1,"tokens_per_second":103.2}"#;
    let usage = r#""usage":{"prompt_tokens":42,"completion_tokens":128,"total_tokens":170}"#;
    for (api, choice) in [
        (
            Api::Chat,
            r#"{"index":0,"delta":{"content":"hi"},"finish_reason":null}"#,
        ),
        (
            Api::Completions,
            r#"{"index":0,"text":"hi","finish_reason":null}"#,
        ),
    ] {
        let body = format!(
            "data: {{\"id\":\"c\",\"choices\":[{choice}]}}\n\n\
             data: {{\"id\":\"c\",\"choices\":[],{usage},{metrics}}}\n\ndata: [DONE]\n\n"
        );
        let rec = one(api, Framing::Sse, &body);
        assert_eq!(rec.counters.server_timing, Some(vllm), "{api:?}");
        assert_eq!(rec.chunks.len(), 1, "{api:?}");
    }
    let responses = format!(
        "data: {{\"type\":\"response.output_text.delta\",\"delta\":\"hi\"}}\n\n\
         data: {{\"type\":\"response.completed\",\"response\":{{\"status\":\"completed\",\
         \"usage\":{{\"input_tokens\":42,\"output_tokens\":128}},{metrics}}}}}\n\n"
    );
    let rec = one(Api::Responses, Framing::Sse, &responses);
    assert_eq!(rec.counters.server_timing, Some(vllm));
    // Null fields (a one-token answer's, or n > 1) are absent; a day or more is no
    // timing of one request.
    let partial = r#"data: {"choices":[{"delta":{"content":"hi"}}]}

data: {"choices":[],"usage":{"completion_tokens":1},"metrics":{"time_to_first_token_ms":5.0,"generation_time_ms":null,"queue_time_ms":1e300,"mean_itl_ms":null}}

data: [DONE]

"#;
    let rec = one(Api::Chat, Framing::Sse, partial);
    let only_prefill = ServerTiming {
        prompt_ns: Some(5_000_000),
        ..ServerTiming::default()
    };
    assert_eq!(rec.counters.server_timing, Some(only_prefill));
    let none = r#"data: {"choices":[{"delta":{"content":"hi"}}],"metrics":null}

data: [DONE]

"#;
    assert_eq!(
        one(Api::Chat, Framing::Sse, none).counters.server_timing,
        None
    );
    // llama-server's OpenAI chat: `timings` on the last chunk.
    let llama = r#"data: {"choices":[{"delta":{"content":"hi"}}]}

data: {"choices":[{"finish_reason":"length","delta":{}}],"timings":{"cache_n":0,"prompt_n":12,"prompt_ms":4.5,"predicted_n":3,"predicted_ms":7.5}}

data: [DONE]

"#;
    let rec = one(Api::Chat, Framing::Sse, llama);
    let t = rec.counters.server_timing.expect("llama.cpp timings");
    assert_eq!(
        (t.prompt_ns, t.decode_ns, t.decode_tokens),
        (Some(4_500_000), Some(7_500_000), Some(3))
    );
    // SGLang's `/generate`: the queue time (s) in `meta_info`.
    let sglang = r#"data: {"text":"hi","meta_info":{"prompt_tokens":3,"completion_tokens":1,"queue_time":0.0125,"finish_reason":{"type":"length"}}}

data: [DONE]

"#;
    let rec = one(Api::Generate, Framing::Sse, sglang);
    let queued = ServerTiming {
        queue_ns: Some(12_500_000),
        ..ServerTiming::default()
    };
    assert_eq!(rec.counters.server_timing, Some(queued));
}

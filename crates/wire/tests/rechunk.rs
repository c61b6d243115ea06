//! Property: how a stream is cut into reads never changes what is decoded. Random SSE
//! streams (multi-byte UTF-8, multi-line data, comments, ids, unknown fields, mixed line
//! endings, an optional BOM and an optional unterminated tail) and random NDJSON streams
//! are decoded in one feed and in randomly split feeds; both must equal the events the
//! stream was generated from. The same holds for the whole `StreamTracker` record.

use cadence_base::{Outcome, RequestRecord};
use cadence_wire::ndjson::{NdjsonDecoder, NdjsonItem};
use cadence_wire::sse::{SseDecoder, SseItem};
use cadence_wire::{Api, Framing, StreamTracker, TrackerConfig};
use proptest::prelude::*;

#[derive(Debug, Clone, PartialEq, Eq)]
enum Item {
    Event {
        event: String,
        data: String,
        id: Option<String>,
    },
    Comment(String),
    Dataless(String),
    TooLarge,
    Incomplete,
}

fn own(i: SseItem<'_>) -> Item {
    match i {
        SseItem::Event(e) => {
            assert!(!e.lossy, "generated streams are valid UTF-8");
            Item::Event {
                event: e.event.to_owned(),
                data: e.data.to_owned(),
                id: e.id.map(str::to_owned),
            }
        }
        SseItem::Comment(c) => Item::Comment(c.to_owned()),
        SseItem::Dataless { event } => Item::Dataless(event.to_owned()),
        SseItem::TooLarge => Item::TooLarge,
        SseItem::Incomplete { .. } => Item::Incomplete,
    }
}

/// Text without line breaks: ASCII, spaces, colons, multi-byte characters.
fn text() -> impl Strategy<Value = String> {
    prop::collection::vec(
        prop::sample::select(vec![
            "a",
            "Z",
            "0",
            " ",
            ":",
            "{",
            "\"",
            "\u{e9}",
            "\u{4e16}",
            "\u{1F600}",
            "\u{FEFF}",
            "\t",
            "data",
            "\0",
        ]),
        0..12,
    )
    .prop_map(|v| v.concat())
}

#[derive(Debug, Clone)]
enum Block {
    Event {
        event: Option<String>,
        id: Option<String>,
        data: Vec<String>,
        unknown: bool,
    },
    Comment(String),
}

fn block() -> impl Strategy<Value = Block> {
    prop_oneof![
        4 => (
            prop::option::of(text()),
            prop::option::of(text().prop_map(|t| t.replace('\0', ""))),
            prop::collection::vec(text(), 0..4),
            any::<bool>(),
        )
            .prop_map(|(event, id, data, unknown)| Block::Event { event, id, data, unknown }),
        1 => text().prop_map(Block::Comment),
    ]
}

/// Line endings, one per line; `None` picks at random.
fn ending(choice: u8, prev_cr: bool, line_empty: bool) -> &'static str {
    // A bare CR followed by an empty line ended by LF would read as one CRLF.
    match (choice % 3, prev_cr && line_empty) {
        (0, false) => "\n",
        (0, true) | (1, _) => "\r\n",
        _ => "\r",
    }
}

struct Built {
    bytes: Vec<u8>,
    want: Vec<Item>,
}

fn build(blocks: &[Block], endings: &[u8], bom: bool, tail: Option<&str>) -> Built {
    let mut bytes = Vec::new();
    if bom {
        bytes.extend_from_slice(b"\xEF\xBB\xBF");
    }
    let mut want = Vec::new();
    let mut last_id = String::new();
    let mut prev_cr = false;
    let mut n = 0usize;
    let mut line = |bytes: &mut Vec<u8>, l: &str| {
        bytes.extend_from_slice(l.as_bytes());
        let e = ending(endings[n % endings.len()], prev_cr, l.is_empty());
        n += 1;
        prev_cr = e == "\r";
        bytes.extend_from_slice(e.as_bytes());
    };
    for b in blocks {
        match b {
            Block::Comment(c) => {
                line(&mut bytes, &format!(": {c}"));
                want.push(Item::Comment(c.clone()));
            }
            Block::Event {
                event,
                id,
                data,
                unknown,
            } => {
                if let Some(e) = event {
                    line(&mut bytes, &format!("event: {e}"));
                }
                if let Some(i) = id {
                    line(&mut bytes, &format!("id: {i}"));
                    last_id.clone_from(i);
                }
                for (k, d) in data.iter().enumerate() {
                    if k == 1 && *unknown {
                        line(&mut bytes, "x-unknown: field");
                    }
                    // Without the space only when the value does not start with one.
                    if k % 2 == 1 && !d.starts_with(' ') {
                        line(&mut bytes, &format!("data:{d}"));
                    } else {
                        line(&mut bytes, &format!("data: {d}"));
                    }
                }
                line(&mut bytes, "");
                let event = event.clone().unwrap_or_default();
                if !data.is_empty() {
                    want.push(Item::Event {
                        event: if event.is_empty() {
                            "message".into()
                        } else {
                            event
                        },
                        data: data.join("\n"),
                        id: (!last_id.is_empty()).then(|| last_id.clone()),
                    });
                } else if !event.is_empty() {
                    want.push(Item::Dataless(event));
                }
            }
        }
    }
    if let Some(t) = tail {
        bytes.extend_from_slice(format!("data: {t}").as_bytes());
        want.push(Item::Incomplete);
    }
    Built { bytes, want }
}

/// Cut points from random indices.
fn cuts(len: usize, idx: &[prop::sample::Index]) -> Vec<usize> {
    let mut c: Vec<usize> = idx.iter().map(|i| i.index(len + 1)).collect();
    c.sort_unstable();
    c
}

fn pieces<'a>(bytes: &'a [u8], cuts: &[usize]) -> Vec<&'a [u8]> {
    let mut out = Vec::new();
    let mut prev = 0;
    for &c in cuts {
        out.push(&bytes[prev..c]);
        prev = c;
    }
    out.push(&bytes[prev..]);
    out
}

fn decode_sse(feeds: &[&[u8]]) -> Vec<Item> {
    let mut dec = SseDecoder::new();
    let mut items = Vec::new();
    for f in feeds {
        dec.feed(f, &mut |i| items.push(own(i)));
    }
    dec.finish(&mut |i| items.push(own(i)));
    items
}

fn track(config: TrackerConfig, feeds: &[&[u8]]) -> (RequestRecord, String) {
    let mut tr = StreamTracker::new(config);
    let mut rec = RequestRecord::new(0, Outcome::TransportError);
    for f in feeds {
        tr.feed(1, f, &mut rec);
    }
    tr.finish(2, &mut rec);
    (rec, tr.text().to_owned())
}

fn ndjson_line() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => text().prop_map(|t| serde_json::json!({"choices":[{"delta":{"content":t}}]}).to_string()),
        1 => text(),
        1 => Just(String::new()),
        1 => Just("  \t ".to_owned()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn sse_split_anywhere_decodes_the_same(
        blocks in prop::collection::vec(block(), 0..12),
        endings in prop::collection::vec(any::<u8>(), 1..16),
        bom in any::<bool>(),
        tail in prop::option::of(text()),
        idx in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
    ) {
        let built = build(&blocks, &endings, bom, tail.as_deref());
        let one_shot = decode_sse(&[&built.bytes]);
        prop_assert_eq!(&one_shot, &built.want);
        let c = cuts(built.bytes.len(), &idx);
        let split = decode_sse(&pieces(&built.bytes, &c));
        prop_assert_eq!(&split, &built.want);
        // Byte by byte, the hardest split.
        let bytes: Vec<&[u8]> = built.bytes.chunks(1).collect();
        prop_assert_eq!(&decode_sse(&bytes), &built.want);
    }

    #[test]
    fn sse_tracker_record_does_not_depend_on_splits(
        texts in prop::collection::vec(text(), 0..10),
        endings in prop::collection::vec(any::<u8>(), 1..8),
        done in any::<bool>(),
        idx in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
    ) {
        let mut blocks: Vec<Block> = texts
            .iter()
            .map(|t| Block::Event {
                event: None,
                id: None,
                data: vec![serde_json::json!({"choices":[{"delta":{"content":t}}]}).to_string()],
                unknown: false,
            })
            .collect();
        blocks.insert(blocks.len() / 2, Block::Comment("ping".into()));
        if done {
            blocks.push(Block::Event { event: None, id: None, data: vec!["[DONE]".into()], unknown: false });
        }
        let built = build(&blocks, &endings, false, None);
        let config = TrackerConfig { api: Api::Chat, framing: Framing::Sse, strict: false };
        let (mut whole, text_whole) = track(config, &[&built.bytes]);
        let c = cuts(built.bytes.len(), &idx);
        let (mut split, text_split) = track(config, &pieces(&built.bytes, &c));
        prop_assert_eq!(&text_whole, &texts.concat());
        prop_assert_eq!(text_split, text_whole);
        // Only the read counters may differ.
        whole.counters.reads = 0;
        whole.counters.coalesced = 0;
        split.counters.reads = 0;
        split.counters.coalesced = 0;
        prop_assert_eq!(split, whole);
    }

    /// One event per read, the shape a read may skip the SSE decoder in (chunks that
    /// share their JSON around the text reuse the parsed template), gives the record
    /// of the same bytes cut anywhere, which always take the decoder.
    #[test]
    fn sse_one_event_per_read_matches_any_split(
        texts in prop::collection::vec(text(), 1..12),
        crlf in prop::collection::vec(any::<bool>(), 1..8),
        usage_at in prop::option::of(any::<prop::sample::Index>()),
        done in any::<bool>(),
        idx in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
    ) {
        let usage = usage_at.map(|i| i.index(texts.len()));
        let mut events: Vec<String> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| {
                let mut v = serde_json::json!({"id":"c-1","object":"chat.completion.chunk","created":1,
                    "model":"m","choices":[{"index":0,"delta":{"content":t},"finish_reason":null}]});
                if usage == Some(i) {
                    v["usage"] = serde_json::json!({"prompt_tokens":3,"completion_tokens":i});
                }
                format!("data: {v}\n\n")
            })
            .collect();
        events.insert(events.len() / 2, ": ping\n\n".to_owned());
        if done {
            events.push("data: [DONE]\n\n".to_owned());
        }
        for (i, e) in events.iter_mut().enumerate() {
            if crlf[i % crlf.len()] {
                *e = e.replace('\n', "\r\n");
            }
        }
        let config = TrackerConfig { api: Api::Chat, framing: Framing::Sse, strict: false };
        let per_event: Vec<&[u8]> = events.iter().map(|e| e.as_bytes()).collect();
        let (mut whole, text_whole) = track(config, &per_event);
        prop_assert_eq!(&text_whole, &texts.concat());
        let bytes = events.concat().into_bytes();
        let one_by_one: Vec<&[u8]> = bytes.chunks(1).collect();
        let c = cuts(bytes.len(), &idx);
        whole.counters.reads = 0;
        for feeds in [one_by_one, pieces(&bytes, &c)] {
            let (mut split, text_split) = track(config, &feeds);
            prop_assert_eq!(&text_split, &text_whole);
            split.counters.reads = 0;
            split.counters.coalesced = 0;
            prop_assert_eq!(&split, &whole);
        }
    }

    #[test]
    fn ndjson_split_anywhere_decodes_the_same(
        lines in prop::collection::vec(ndjson_line(), 0..12),
        crlf in prop::collection::vec(any::<bool>(), 1..8),
        final_newline in any::<bool>(),
        bom in any::<bool>(),
        idx in prop::collection::vec(any::<prop::sample::Index>(), 0..10),
    ) {
        let mut bytes = Vec::new();
        if bom {
            bytes.extend_from_slice(b"\xEF\xBB\xBF");
        }
        let mut want = Vec::new();
        for (i, l) in lines.iter().enumerate() {
            // A U+FEFF opening the stream would be its BOM.
            let l = if i == 0 { l.trim_start_matches('\u{FEFF}') } else { l.as_str() };
            bytes.extend_from_slice(l.as_bytes());
            if i + 1 < lines.len() || final_newline {
                bytes.extend_from_slice(if crlf[i % crlf.len()] { b"\r\n" } else { b"\n" });
            }
            let t = l.trim_matches(|c: char| c.is_ascii_whitespace());
            if !t.is_empty() {
                want.push(t.to_owned());
            }
        }
        let decode = |feeds: &[&[u8]]| {
            let mut dec = NdjsonDecoder::new();
            let mut got = Vec::new();
            let mut push = |i: NdjsonItem<'_>| match i {
                NdjsonItem::Line { text, lossy } => {
                    assert!(!lossy);
                    got.push(text.to_owned());
                }
                NdjsonItem::TooLarge => got.push("<too large>".to_owned()),
            };
            for f in feeds {
                dec.feed(f, &mut push);
            }
            dec.finish(&mut push);
            got
        };
        prop_assert_eq!(&decode(&[&bytes]), &want);
        let c = cuts(bytes.len(), &idx);
        prop_assert_eq!(&decode(&pieces(&bytes, &c)), &want);
        let one_by_one: Vec<&[u8]> = bytes.chunks(1).collect();
        prop_assert_eq!(&decode(&one_by_one), &want);
    }
}

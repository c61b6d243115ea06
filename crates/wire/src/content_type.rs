//! The one rule from a response's content type to the framing its body is read with,
//! so the load generator and the proxy measure the same answers as the same streams.

use crate::tracker::Framing;

/// The framing of a successful response's body, or `None` when it is not a stream to
/// be measured as one.
///
/// `content_type` is the header's value (`None` when absent or not readable);
/// `asked_stream` says the answer is awaited as a stream: the request asked for one,
/// or the caller measures every answer as one (the load generator, which reads a plain
/// JSON answer as a one-chunk stream). The media type (before any `;` parameters) is
/// compared without regard to ASCII case:
///
/// - `text/event-stream` is SSE.
/// - `application/x-ndjson`, `application/ndjson`, `application/jsonl`,
///   `application/jsonlines` and `application/x-jsonlines` are NDJSON.
/// - `application/json` is NDJSON when a stream was asked for: servers that stream
///   JSON lines under the plain JSON type (Ollama's native API among them) are read
///   line by line, and a single JSON answer to a streamed request is one chunk.
///   Unasked, it is a plain answer.
/// - A missing or empty content type is SSE when a stream was asked for: the framing
///   every OpenAI-compatible server streams in, and what a server that leaves the
///   header out is most likely sending. Unasked, nothing says it is a stream.
/// - Anything else (an HTML error page, `text/plain`) is not a stream.
pub fn stream_framing(content_type: Option<&str>, asked_stream: bool) -> Option<Framing> {
    let mime = content_type
        .and_then(|c| c.split(';').next())
        .unwrap_or("")
        .trim();
    let is = |name: &str| mime.eq_ignore_ascii_case(name);
    if is("text/event-stream") {
        Some(Framing::Sse)
    } else if NDJSON_TYPES.iter().any(|t| is(t)) {
        Some(Framing::Ndjson)
    } else if is("application/json") {
        asked_stream.then_some(Framing::Ndjson)
    } else if mime.is_empty() {
        asked_stream.then_some(Framing::Sse)
    } else {
        None
    }
}

/// The media types of newline-delimited JSON in use.
const NDJSON_TYPES: [&str; 5] = [
    "application/x-ndjson",
    "application/ndjson",
    "application/jsonl",
    "application/jsonlines",
    "application/x-jsonlines",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_stream_with_parameters_and_any_case_is_sse() {
        for ct in [
            "text/event-stream",
            "text/event-stream; charset=utf-8",
            "text/event-stream;charset=UTF-8",
            " Text/Event-Stream ; charset=utf-8",
            "TEXT/EVENT-STREAM",
        ] {
            for asked in [true, false] {
                assert_eq!(stream_framing(Some(ct), asked), Some(Framing::Sse), "{ct}");
            }
        }
    }

    #[test]
    fn ndjson_types_are_ndjson_asked_or_not() {
        for ct in [
            "application/x-ndjson",
            "application/x-ndjson; charset=utf-8",
            "Application/X-NDJSON",
            "application/ndjson",
            "application/jsonl",
            "application/jsonlines",
            "application/x-jsonlines",
        ] {
            for asked in [true, false] {
                assert_eq!(
                    stream_framing(Some(ct), asked),
                    Some(Framing::Ndjson),
                    "{ct}"
                );
            }
        }
    }

    #[test]
    fn plain_json_is_a_stream_only_when_one_was_asked_for() {
        for ct in [
            "application/json",
            "application/json; charset=utf-8",
            "APPLICATION/JSON",
        ] {
            assert_eq!(
                stream_framing(Some(ct), true),
                Some(Framing::Ndjson),
                "{ct}"
            );
            assert_eq!(stream_framing(Some(ct), false), None, "{ct}");
        }
    }

    #[test]
    fn a_missing_content_type_is_sse_only_when_a_stream_was_asked_for() {
        for ct in [None, Some(""), Some("  "), Some("; charset=utf-8")] {
            assert_eq!(stream_framing(ct, true), Some(Framing::Sse), "{ct:?}");
            assert_eq!(stream_framing(ct, false), None, "{ct:?}");
        }
    }

    #[test]
    fn other_types_are_not_streams() {
        for ct in [
            "text/html",
            "text/html; charset=utf-8",
            "text/plain",
            "application/octet-stream",
            "application/jsonx",
            "application/json-seq",
            "text/event-streams",
            "multipart/mixed",
        ] {
            for asked in [true, false] {
                assert_eq!(stream_framing(Some(ct), asked), None, "{ct}");
            }
        }
    }
}

//! TGI's timing headers. Its non-streamed `/generate` answers carry the server's own
//! account of the request in response headers, where its `/generate_stream` carries
//! none; read here into the record's server timing, as the body dialects read theirs.

use crate::{stream_framing, Api, Framing};
use cadence_base::ServerTiming;

/// Time in TGI's queue, ms (whole milliseconds as TGI writes them).
pub const QUEUE: &str = "x-queue-time";
/// From the batch's start to the answer (prefill and decode together), ms.
pub const INFERENCE: &str = "x-inference-time";

/// A server's time past a day is no timing of one request: left out.
const MAX_MS: f64 = 86_400_000.0;

/// The server timing in TGI's headers, `header` giving a header's value by its name;
/// `None` when neither time is there and readable. Its inference time covers prefill
/// and decode together: a whole answer's one chunk arrives when both are done, so the
/// server's time to that chunk is all of it (`prompt_ns`), and there is no decode of
/// the client's to split. Its validation time stays in the front end's residual.
pub fn server_timing<'a>(header: impl Fn(&str) -> Option<&'a str>) -> Option<ServerTiming> {
    let ms = |name: &str| {
        header(name)
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|ms| ms.is_finite() && (0.0..=MAX_MS).contains(ms))
            .map(|ms| (ms * 1e6).round() as u64)
    };
    let t = ServerTiming {
        queue_ns: ms(QUEUE),
        prompt_ns: ms(INFERENCE),
        ..ServerTiming::default()
    };
    (t.queue_ns.is_some() || t.prompt_ns.is_some()).then_some(t)
}

/// The server timing a response's headers give, for the reader of any answer (bench's
/// client, the proxy): TGI's headers read on a whole answer of the `generate` dialect
/// (a JSON body, not an SSE stream, whose `content_type` this is); `None` for any other
/// answer or when the headers say nothing readable. A body's own timing, where it has
/// one, comes first: this is for an answer whose body said nothing.
pub fn of_answer<'a>(
    api: Api,
    content_type: Option<&str>,
    header: impl Fn(&str) -> Option<&'a str>,
) -> Option<ServerTiming> {
    let whole = stream_framing(content_type, true) == Some(Framing::Ndjson);
    (api == Api::Generate && whole)
        .then(|| server_timing(header))
        .flatten()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(pairs: &[(&'static str, &'static str)]) -> Option<ServerTiming> {
        server_timing(|name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v))
    }

    #[test]
    fn queue_and_inference_ms_become_the_queue_and_the_time_to_the_answer() {
        let t = read(&[
            ("x-compute-time", "0.052"),
            ("x-total-time", "52"),
            ("x-validation-time", "1"),
            (QUEUE, "7"),
            (INFERENCE, "44"),
            ("x-time-per-token", "2"),
            ("x-generated-tokens", "20"),
        ])
        .unwrap();
        assert_eq!(t.queue_ns, Some(7_000_000));
        assert_eq!(t.prompt_ns, Some(44_000_000));
        assert_eq!((t.decode_ns, t.decode_tokens), (None, None));
        assert_eq!(
            read(&[(INFERENCE, " 0.5 ")]).unwrap().prompt_ns,
            Some(500_000)
        );
    }

    #[test]
    fn only_a_whole_generate_answer_is_read() {
        let pairs = [(QUEUE, "7"), (INFERENCE, "44")];
        let header = |name: &str| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| *v);
        let whole = of_answer(Api::Generate, Some("application/json"), header).unwrap();
        assert_eq!(
            (whole.queue_ns, whole.prompt_ns),
            (Some(7_000_000), Some(44_000_000))
        );
        assert_eq!(
            of_answer(Api::Generate, Some("text/event-stream"), header),
            None
        );
        assert_eq!(of_answer(Api::Chat, Some("application/json"), header), None);
    }

    #[test]
    fn absent_unreadable_or_impossible_times_are_left_out() {
        assert_eq!(read(&[]), None);
        assert_eq!(read(&[("x-compute-characters", "12")]), None);
        for bad in ["-1", "NaN", "inf", "1e30", "86400001", "7ms", ""] {
            assert_eq!(read(&[(QUEUE, bad), (INFERENCE, bad)]), None, "{bad}");
        }
        let only_queue = read(&[(QUEUE, "3"), (INFERENCE, "x")]).unwrap();
        assert_eq!(
            (only_queue.queue_ns, only_queue.prompt_ns),
            (Some(3_000_000), None)
        );
    }
}

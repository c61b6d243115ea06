//! Trace replay input (`--trace FILE`): JSON Lines of recorded arrivals, each with a
//! prompt or token counts (the Mooncake layout included), turned into offsets the
//! open-loop runner can schedule against.

use cadence_core::json::{JsonError, Obj};
use serde_json::Value;
use std::time::Duration;

/// One recorded arrival.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEntry {
    /// Arrival offset from the trace's first (earliest) entry.
    pub at: Duration,
    /// The prompt text, when the trace carries it.
    pub prompt: Option<String>,
    /// Prompt length in tokens, when the trace gives it (`input_tokens` or
    /// `input_length`).
    pub input_tokens: Option<u32>,
    /// Output length in tokens to ask for (`output_tokens`, `output_length` or
    /// `max_tokens`).
    pub output_tokens: Option<u32>,
}

/// Why a trace could not be read; line numbers count every line from 1, blank and
/// comment lines included.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TraceError {
    /// A line that cannot be read.
    #[error("line {line}: {what}")]
    Line {
        /// The line's number, from 1.
        line: usize,
        /// What is wrong with it (the field and what was found).
        what: String,
    },
    /// No line holds an entry.
    #[error("the trace has no entries (every line is blank or a # comment)")]
    Empty,
}

/// Arrival-time keys and their unit, as nanoseconds per unit.
const TIME_KEYS: [(&str, f64); 5] = [
    ("timestamp", 1e6), // milliseconds: the Mooncake layout
    ("timestamp_ms", 1e6),
    ("offset_ms", 1e6),
    ("arrival_s", 1e9),
    ("time_s", 1e9),
];
const TIME_KEY_LIST: &str = "timestamp, timestamp_ms, arrival_s, time_s or offset_ms";
const INPUT_KEYS: [&str; 2] = ["input_tokens", "input_length"];
const OUTPUT_KEYS: [&str; 3] = ["output_tokens", "output_length", "max_tokens"];

/// Parses a JSON Lines trace. Each non-blank line not starting with `#` is an object
/// with exactly one arrival time — `timestamp` (ms, as in Mooncake traces:
/// `{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [...]}`),
/// `timestamp_ms`, `offset_ms` (ms), `arrival_s` or `time_s` (seconds) — and a
/// `prompt` string and/or an input length (`input_tokens` or `input_length`), with an
/// optional output length (`output_tokens`, `output_length` or `max_tokens`). Other
/// keys are ignored. Times must be finite and non-negative; lengths whole numbers of
/// at least 1.
///
/// Entries come back sorted by arrival (stably: equal times keep file order), with
/// `at` relative to the earliest.
pub fn parse_trace(text: &str) -> Result<Vec<TraceEntry>, TraceError> {
    // (absolute arrival in ns, entry with `at` unset)
    let mut raw: Vec<(u64, TraceEntry)> = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let err = |what: String| TraceError::Line {
            line: line_no,
            what,
        };
        let v: Value = serde_json::from_str(t).map_err(|e| err(format!("not valid JSON ({e})")))?;
        let read = Obj::new("", &v).and_then(|obj| entry(&obj));
        raw.push(read.map_err(|e| err(e.detail()))?);
    }
    let first = raw.iter().map(|(t, _)| *t).min().ok_or(TraceError::Empty)?;
    raw.sort_by_key(|(t, _)| *t); // stable
    Ok(raw
        .into_iter()
        .map(|(t, mut e)| {
            e.at = Duration::from_nanos(t - first);
            e
        })
        .collect())
}

/// Compresses (speed > 1) or stretches (speed < 1) arrival times: `--trace-speed 2`
/// replays the trace twice as fast, so every `at` is halved.
///
/// # Panics
/// When `speed` is not a positive finite number (the CLI rejects such values).
pub fn scale(entries: &mut [TraceEntry], speed: f64) {
    assert!(
        speed.is_finite() && speed > 0.0,
        "trace speed must be a positive number, got {speed}"
    );
    for e in entries {
        let ns = (e.at.as_nanos() as f64 / speed).round();
        e.at = Duration::from_nanos(if ns >= u64::MAX as f64 {
            u64::MAX
        } else {
            ns as u64
        });
    }
}

fn entry(obj: &Obj) -> Result<(u64, TraceEntry), JsonError> {
    let times: Vec<(&str, f64)> = TIME_KEYS
        .iter()
        .filter(|(k, _)| obj.has(k))
        .copied()
        .collect();
    let (key, ns_per_unit) = match times.as_slice() {
        [] => return Err(obj.error_here(format!("no arrival time ({TIME_KEY_LIST})"))),
        [one] => *one,
        many => {
            let names: Vec<&str> = many.iter().map(|(k, _)| *k).collect();
            return Err(obj.error_here(format!(
                "more than one arrival time ({}); keep one",
                names.join(", ")
            )));
        }
    };
    let t = obj.req(key, |f| f.nonneg())?;
    let ns = (t * ns_per_unit).round();
    if ns >= u64::MAX as f64 {
        let given = obj.get(key).unwrap_or(&Value::Null);
        return Err(obj.error(key, format!("{given} is too far in the future")));
    }
    let prompt = obj.str("prompt")?.map(str::to_owned);
    let input_tokens = length(obj, &INPUT_KEYS)?;
    let output_tokens = length(obj, &OUTPUT_KEYS)?;
    if prompt.is_none() && input_tokens.is_none() {
        return Err(
            obj.error_here("no prompt and no input length (prompt, input_tokens or input_length)")
        );
    }
    Ok((
        ns as u64,
        TraceEntry {
            at: Duration::ZERO,
            prompt,
            input_tokens,
            output_tokens,
        },
    ))
}

/// The one length given under any of `keys`, a whole number in `1..=u32::MAX`.
fn length(obj: &Obj, keys: &[&str]) -> Result<Option<u32>, JsonError> {
    let given: Vec<&str> = keys.iter().copied().filter(|k| obj.has(k)).collect();
    let key = match given.as_slice() {
        [] => return Ok(None),
        [one] => *one,
        many => return Err(obj.error_here(format!("both {} given; keep one", many.join(" and ")))),
    };
    Ok(obj.int(key, 1..=u64::from(u32::MAX))?.map(|n| n as u32))
}

/// A trace as a load in virtual time (`cadence plan --trace`): per entry, in order, its
/// (prompt tokens, output tokens) and its send time in ns from the first. The prompt
/// length is the entry's own, else its prompt counted by `count`, else `input`; the
/// output length its own, else `output`. Each is at least 1.
pub fn virtual_load(
    entries: &[TraceEntry],
    count: &dyn Fn(&str) -> usize,
    input: u32,
    output: u32,
) -> (Vec<(u32, u32)>, Vec<u64>) {
    let lengths = entries
        .iter()
        .map(|e| {
            let prompt = e.input_tokens.unwrap_or_else(|| {
                e.prompt
                    .as_deref()
                    .map_or(input, |p| u32::try_from(count(p)).unwrap_or(u32::MAX))
            });
            (prompt.max(1), e.output_tokens.unwrap_or(output).max(1))
        })
        .collect();
    let sends = entries
        .iter()
        .map(|e| u64::try_from(e.at.as_nanos()).unwrap_or(u64::MAX))
        .collect();
    (lengths, sends)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn at_ms(entries: &[TraceEntry]) -> Vec<f64> {
        entries
            .iter()
            .map(|e| e.at.as_nanos() as f64 / MS as f64)
            .collect()
    }

    #[track_caller]
    fn line_error(text: &str, line: usize, contains: &str) {
        match parse_trace(text) {
            Err(TraceError::Line { line: l, what }) => {
                assert_eq!(l, line, "wrong line for {what:?}");
                assert!(what.contains(contains), "{what:?} lacks {contains:?}");
            }
            other => panic!("expected a line {line} error, got {other:?}"),
        }
    }

    #[test]
    fn mooncake_lines_parse_relative_to_the_first() {
        let text = r#"{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48]}
{"timestamp": 30535, "input_length": 6472, "output_length": 26, "hash_ids": [46, 47, 49]}
{"timestamp": 30535, "input_length": 8, "output_length": 1, "hash_ids": []}
"#;
        let t = parse_trace(text).unwrap();
        assert_eq!(
            t[0],
            TraceEntry {
                at: Duration::ZERO,
                prompt: None,
                input_tokens: Some(6955),
                output_tokens: Some(52),
            }
        );
        assert_eq!(t[1].at, Duration::from_millis(30535 - 27482));
        assert_eq!(
            (t[1].input_tokens, t[1].output_tokens),
            (Some(6472), Some(26))
        );
        assert_eq!(t[2].at, t[1].at);
        assert_eq!(t[2].input_tokens, Some(8));
    }

    #[test]
    fn every_time_key_and_its_unit() {
        let text = r#"{"timestamp_ms": 1000, "prompt": "a"}
{"offset_ms": 1250.5, "prompt": "b"}
{"arrival_s": 2, "prompt": "c"}
{"time_s": 0.1, "prompt": "d"}
{"timestamp": 3000, "prompt": "e"}
"#;
        let t = parse_trace(text).unwrap();
        let order: Vec<&str> = t.iter().map(|e| e.prompt.as_deref().unwrap()).collect();
        assert_eq!(order, ["d", "a", "b", "c", "e"]);
        // Relative to d at 100 ms: 0, 900, 1150.5, 1900, 2900 ms, to the nanosecond.
        assert_eq!(
            t.iter().map(|e| e.at).collect::<Vec<_>>(),
            [
                Duration::ZERO,
                Duration::from_millis(900),
                Duration::from_micros(1_150_500),
                Duration::from_millis(1900),
                Duration::from_millis(2900),
            ]
        );
    }

    #[test]
    fn sorting_is_stable_and_offsets_start_at_zero() {
        let text = r#"{"offset_ms": 50, "prompt": "late"}
{"offset_ms": 20, "prompt": "first tie"}
{"offset_ms": 20, "prompt": "second tie"}
{"offset_ms": 30, "prompt": "middle"}
"#;
        let t = parse_trace(text).unwrap();
        let order: Vec<&str> = t.iter().map(|e| e.prompt.as_deref().unwrap()).collect();
        assert_eq!(order, ["first tie", "second tie", "middle", "late"]);
        assert_eq!(at_ms(&t), [0.0, 0.0, 10.0, 30.0]);
    }

    #[test]
    fn prompt_and_length_spellings() {
        let text = r#"{"time_s": 0, "prompt": "Hello", "max_tokens": 64}
{"time_s": 1, "input_tokens": 128, "output_tokens": 32}
{"time_s": 2, "prompt": "Hi", "input_tokens": 2}
{"time_s": 3, "input_length": 10, "output_length": 5.0}
{"time_s": 4, "input_tokens": 7, "output_tokens": null}
"#;
        let t = parse_trace(text).unwrap();
        let got: Vec<(Option<&str>, Option<u32>, Option<u32>)> = t
            .iter()
            .map(|e| (e.prompt.as_deref(), e.input_tokens, e.output_tokens))
            .collect();
        assert_eq!(
            got,
            [
                (Some("Hello"), None, Some(64)),
                (None, Some(128), Some(32)),
                (Some("Hi"), Some(2), None),
                (None, Some(10), Some(5)),
                (None, Some(7), None),
            ]
        );
    }

    #[test]
    fn blank_and_comment_lines_are_skipped_but_counted() {
        let text = "# a trace\n\n   \n{\"time_s\": 1, \"prompt\": \"x\"}\n  # indented comment\n{\"time_s\": 1}\n";
        line_error(text, 6, "no prompt and no input length");
        let ok = "# a trace\n\n{\"time_s\": 1, \"prompt\": \"x\"}\r\n# end\n";
        assert_eq!(parse_trace(ok).unwrap().len(), 1);
    }

    #[test]
    fn errors_name_the_line_and_what_is_wrong() {
        let good = r#"{"time_s": 0, "prompt": "ok"}"#;
        let cases: [(&str, &str); 17] = [
            (
                r#"{"prompt": "x"}"#,
                "no arrival time (timestamp, timestamp_ms, arrival_s, time_s or offset_ms)",
            ),
            (
                r#"{"time_s": -1, "prompt": "x"}"#,
                "field `time_s`: expected a number >= 0, got -1",
            ),
            (
                r#"{"offset_ms": "5", "prompt": "x"}"#,
                "field `offset_ms`: expected a number, got a string",
            ),
            (r#"{"time_s": 1e400, "prompt": "x"}"#, "not valid JSON"),
            (
                r#"{"arrival_s": 1e300, "prompt": "x"}"#,
                "field `arrival_s`: 1e+300 is too far in the future",
            ),
            (
                r#"{"time_s": 1, "timestamp": 5, "prompt": "x"}"#,
                "more than one arrival time (timestamp, time_s)",
            ),
            (r#"{"time_s": 1}"#, "no prompt and no input length"),
            (
                r#"{"time_s": 1, "prompt": 5}"#,
                "field `prompt`: expected a string, got a number",
            ),
            (
                r#"{"time_s": 1, "input_tokens": 0}"#,
                "field `input_tokens`: expected at least 1, got 0",
            ),
            (
                r#"{"time_s": 1, "input_tokens": -3}"#,
                "field `input_tokens`: expected a whole number >= 1, got -3",
            ),
            (
                r#"{"time_s": 1, "input_tokens": 2.5}"#,
                "field `input_tokens`: expected a whole number >= 1, got 2.5",
            ),
            (
                r#"{"time_s": 1, "input_tokens": 5000000000}"#,
                "field `input_tokens`: 5000000000 is too large (at most 4294967295)",
            ),
            (
                r#"{"time_s": 1, "input_tokens": 3, "input_length": 3}"#,
                "both input_tokens and input_length given",
            ),
            (
                r#"{"time_s": 1, "prompt": "x", "output_length": 4, "max_tokens": 4}"#,
                "both output_length and max_tokens",
            ),
            (r#"[1, 2]"#, "expected an object, got an array"),
            (r#"{"time_s": 1, "prompt": "x""#, "not valid JSON"),
            (
                r#"{"time_s": 1, "prompt": "x", "output_tokens": "many"}"#,
                "field `output_tokens`: expected a whole number >= 1, got a string",
            ),
        ];
        for (bad, what) in cases {
            // The bad line is line 3, after a good line and a comment.
            let text = format!("{good}\n# comment\n{bad}\n{good}\n");
            line_error(&text, 3, what);
        }
    }

    #[test]
    fn error_messages_read_as_sentences() {
        let e =
            parse_trace("{\"time_s\": 0, \"prompt\": \"a\"}\n\n{\"prompt\": \"b\"}").unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 3: no arrival time (timestamp, timestamp_ms, arrival_s, time_s or offset_ms)"
        );
    }

    #[test]
    fn an_empty_trace_is_an_error() {
        assert_eq!(parse_trace(""), Err(TraceError::Empty));
        assert_eq!(parse_trace("# only a comment\n\n"), Err(TraceError::Empty));
        assert!(TraceError::Empty.to_string().contains("no entries"));
    }

    #[test]
    fn scale_divides_arrival_offsets_by_the_speed() {
        let text = "{\"offset_ms\": 0, \"prompt\": \"a\"}\n{\"offset_ms\": 1000, \"prompt\": \"b\"}\n{\"offset_ms\": 3001, \"prompt\": \"c\"}\n";
        let mut t = parse_trace(text).unwrap();
        scale(&mut t, 2.0);
        assert_eq!(at_ms(&t), [0.0, 500.0, 1500.5]);
        scale(&mut t, 0.5);
        assert_eq!(at_ms(&t), [0.0, 1000.0, 3001.0], "0.5 stretches back");
        scale(&mut t, 3.0);
        // 1 s / 3 rounds to the nearest nanosecond.
        assert_eq!(t[1].at, Duration::from_nanos(333_333_333));
        assert_eq!(t[0].at, Duration::ZERO);
    }

    #[test]
    #[should_panic(expected = "trace speed must be a positive number")]
    fn scale_rejects_a_zero_speed() {
        scale(&mut [], 0.0);
    }

    #[test]
    fn a_trace_in_virtual_time_keeps_its_lengths_counts_its_prompts_and_falls_back() {
        let text = r#"{"timestamp": 1500, "input_length": 300, "output_length": 20}
{"timestamp": 1000, "prompt": "one two three"}
{"timestamp": 1250, "prompt": "x", "input_tokens": 7, "max_tokens": 2}"#;
        let mut entries = parse_trace(text).unwrap();
        scale(&mut entries, 2.0);
        let words = |p: &str| p.split_whitespace().count();
        let (lengths, sends) = virtual_load(&entries, &words, 512, 64);
        // Sorted by arrival: the prompt counted (3 words), then 7 given, then 300.
        assert_eq!(lengths, vec![(3, 64), (7, 2), (300, 20)]);
        // Twice as fast: 0, 125 ms, 250 ms.
        assert_eq!(sends, vec![0, 125_000_000, 250_000_000]);
    }
}

//! `bench --agent-trace` replays the checked-in traces (20 sessions in each format)
//! against the built-in simulator: every call's prompt has exactly the recorded input
//! tokens (the sim's usage counts words), every reply the recorded output tokens, and
//! each call is sent after its recorded tool wait (or at its recorded offset).

mod common;

use cadence_bench::agent_trace::{self, TraceSession, DEFAULT_BLOCK_SIZE};
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/agent-trace")
        .join(name)
}

fn sessions(name: &str) -> Vec<TraceSession> {
    let text = std::fs::read_to_string(fixture(name)).unwrap();
    agent_trace::parse(&text, None, DEFAULT_BLOCK_SIZE).unwrap()
}

/// Replays `name` with `args` on top; the records by (session, call).
fn replay(name: &str, args: &[&str]) -> BTreeMap<(u64, u64), Value> {
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("r.jsonl");
    common::cadence()
        .arg("bench")
        .arg("--agent-trace")
        .arg(fixture(name))
        .args(args)
        // Session arrivals on 2 shared cores run late under a parallel test run; the
        // replay's own exactness is what is checked here.
        .args(["--max-late", "100%", "--quiet", "--records"])
        .arg(&records)
        .assert()
        .code(0);
    common::read_records(&records)
        .into_iter()
        .map(|r| {
            let key = (r["session"].as_u64().unwrap(), r["turn"].as_u64().unwrap());
            (key, r)
        })
        .collect()
}

fn ns(r: &Value, key: &str) -> i64 {
    r[key].as_i64().unwrap_or_else(|| panic!("no {key} in {r}"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Every call sent with the recorded token counts; returns how late each later call
/// was sent after it was due (ms): due at the previous call's end plus its tool wait,
/// and not before its recorded offset from the session's arrival.
fn check_exact(name: &str, trace: &[TraceSession], recs: &BTreeMap<(u64, u64), Value>) -> Vec<f64> {
    let calls: usize = trace.iter().map(|s| s.calls.len()).sum();
    assert_eq!(recs.len(), calls, "{name}: one record per call");
    let mut late = Vec::new();
    for (k, s) in trace.iter().enumerate() {
        let k = k as u64;
        let arrived = ns(&recs[&(k, 0)], "scheduled_ns");
        for (i, c) in s.calls.iter().enumerate() {
            let r = &recs[&(k, i as u64)];
            let at = format!("{name}: session {} call {i}", s.id);
            assert_eq!(r["outcome"], "succeeded", "{at}: {r}");
            assert_eq!(r["prompt_id"], s.id.as_str(), "{at}");
            assert_eq!(r["input_tokens_source"], "usage", "{at}");
            assert_eq!(r["input_tokens"], c.input_tokens, "{at}: input tokens");
            assert_eq!(
                r["output_tokens"]["count"], c.output_tokens,
                "{at}: output tokens"
            );
            if i == 0 {
                continue;
            }
            let prev_end = ns(&recs[&(k, i as u64 - 1)], "end_ns");
            let wait = c.tool_wait.as_nanos() as i64;
            let not_before = c.at.map_or(0, |a| arrived + a.as_nanos() as i64);
            let due = (prev_end + wait).max(not_before);
            assert_eq!(
                ns(r, "tool_wait_ns"),
                due - prev_end,
                "{at}: the wait recorded"
            );
            let behind = (ns(r, "sent_ns") - due) as f64 / 1e6;
            // Never early; a busy machine may hold one call back (the median below
            // holds the rule).
            assert!(
                (-0.5..500.0).contains(&behind),
                "{at}: sent {behind:.3} ms after it was due"
            );
            late.push(behind);
        }
    }
    late
}

#[test]
fn cadence_sessions_replay_with_the_recorded_tokens_and_waits() {
    let trace = sessions("sessions.jsonl");
    assert_eq!(trace.len(), 20);
    let recs = replay("sessions.jsonl", &[]);
    let late = check_exact("sessions.jsonl", &trace, &recs);
    let m = median(late);
    assert!(m < 5.0, "median lateness {m:.3} ms");
    // The sim answered with tool calls somewhere, so tool results carried new text.
    assert!(recs.values().any(|r| r["tool_calls"].as_u64() > Some(0)));
}

#[test]
fn mooncake_sessions_replay_with_the_recorded_tokens_and_offsets() {
    let trace = sessions("mooncake.jsonl");
    assert_eq!(
        trace.len(),
        20,
        "20 sessions chained from 55 calls by their hash ids"
    );
    assert!(trace.iter().all(|s| s.calls[1..]
        .iter()
        .all(|c| c.reuse == agent_trace::Reuse::Previous)));
    let recs = replay("mooncake.jsonl", &[]);
    // Calls of 1,000-3,000 tokens outlast the recorded gaps, so most are due the moment
    // the previous reply ends: what is measured is the client's turnaround (a prompt of
    // thousands of words made and serialized, in a debug build, beside the simulator).
    let m = median(check_exact("mooncake.jsonl", &trace, &recs));
    assert!(m < 15.0, "median lateness {m:.3} ms");
}

#[test]
fn otel_traces_replay_with_the_recorded_tokens_and_waits() {
    let trace = sessions("otel.json");
    assert_eq!(trace.len(), 20);
    // A wrapper span around a client span is one call, not two.
    assert_eq!(trace.iter().map(|s| s.calls.len()).sum::<usize>(), 63);
    let recs = replay("otel.json", &[]);
    let m = median(check_exact("otel.json", &trace, &recs));
    assert!(m < 5.0, "median lateness {m:.3} ms");
}

#[test]
fn responses_and_anthropic_replay_exactly_too() {
    let trace = sessions("sessions.jsonl");
    for api in ["responses", "anthropic"] {
        let recs = replay("sessions.jsonl", &["--api", api]);
        check_exact(&format!("sessions.jsonl ({api})"), &trace, &recs);
    }
}

#[test]
fn the_calls_declare_the_tools_of_a_tools_file() {
    let dir = tempfile::tempdir().unwrap();
    let tools = dir.path().join("tools.json");
    std::fs::write(
        &tools,
        r#"[{"type": "function", "function": {"name": "grep", "description": "search",
            "parameters": {"type": "object", "properties": {"pattern": {"type": "string"}}}}}]"#,
    )
    .unwrap();
    let trace = sessions("otel.json");
    let recs = replay("otel.json", &["--tools", tools.to_str().unwrap()]);
    check_exact("otel.json (--tools)", &trace, &recs);
    assert!(recs.values().any(|r| r["tool_calls"].as_u64() > Some(0)));
    common::usage_error(
        &["bench", "--tools", tools.to_str().unwrap()],
        "--tools declares the tools of --agent or --agent-trace sessions",
    );
}

#[test]
fn speed_and_max_gap_retime_the_replay() {
    // Twice as fast, and no wait over 10 ms: a session's calls follow each other
    // within 10 ms / 2 of the previous reply.
    let mut trace = sessions("sessions.jsonl");
    agent_trace::retime(&mut trace, 2.0, std::time::Duration::from_millis(10));
    let recs = replay(
        "sessions.jsonl",
        &["--agent-trace-speed", "2", "--agent-trace-max-gap", "10ms"],
    );
    check_exact("sessions.jsonl (retimed)", &trace, &recs);
    assert!(recs
        .values()
        .all(|r| r["tool_wait_ns"].as_u64().is_none_or(|w| w <= 10_000_000)));
    let first = ns(&recs[&(0, 0)], "scheduled_ns");
    let last = ns(&recs[&(19, 0)], "scheduled_ns");
    assert!(
        last - first <= 19 * 10_000_000,
        "arrival gaps are cut to 10 ms"
    );
}

#[test]
fn bad_traces_and_flags_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.jsonl");
    std::fs::write(
        &bad,
        "{\"session\": \"a\", \"at_ms\": 0, \"calls\": [{\"input_tokens\": 5, \"output_tokens\": 1}]}\n{\"session\": \"b\", \"at_ms\": 0, \"calls\": [{\"input_tokens\": 5}]}\n",
    )
    .unwrap();
    let b = bad.to_str().unwrap();
    common::usage_error(
        &["bench", "--agent-trace", b],
        "line 2: field `calls[0].output_tokens`: missing",
    );
    common::usage_error(
        &[
            "bench",
            "--agent-trace",
            b,
            "--agent-trace-format",
            "mooncake",
        ],
        "line 1: field `timestamp`: missing",
    );
    let f = fixture("sessions.jsonl");
    let f = f.to_str().unwrap();
    common::usage_error(
        &["bench", "--agent-trace", f, "--api", "completions"],
        "--agent-trace needs an API whose requests carry tools",
    );
    common::usage_error(
        &["bench", "--agent-trace", f, "--agent-trace-speed", "0"],
        "--agent-trace-speed must be a positive number",
    );
    common::usage_error(&["bench", "--agent-trace", f, "--rate", "5"], "--rate");
    common::usage_error(&["bench", "--agent-trace", f, "--agent"], "--agent");
    common::usage_error(
        &[
            "bench",
            "--agent-trace",
            f,
            "http://127.0.0.1:9/v1/chat/completions",
            "--shard",
            "0/2",
        ],
        "--agent-trace cannot be sharded yet",
    );
    let huge = dir.path().join("huge.jsonl");
    std::fs::write(
        &huge,
        "{\"timestamp\": 0, \"input_length\": 4000000000, \"output_length\": 1}\n",
    )
    .unwrap();
    common::usage_error(
        &["bench", "--agent-trace", huge.to_str().unwrap()],
        "line 1: field `input_length`: 4000000000 is too large",
    );
}

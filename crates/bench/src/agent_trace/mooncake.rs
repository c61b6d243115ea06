//! Mooncake-style traces: one call per JSON line with its `hash_ids`, chained into
//! sessions by a session field or by the prompt blocks a call shares with the one
//! before it.

use super::{
    at_line, id_of, lines, millis, AgentTraceError, Reuse, TraceCall, TraceSession, MAX_TOKENS,
};
use cadence_core::json::{JsonError, Obj};
use serde_json::Value;
use std::collections::HashMap;
use std::time::Duration;

/// Fields that name a call's session in Mooncake-style traces that record one.
const SESSION_FIELDS: [&str; 4] = ["session_id", "conversation_id", "chat_id", "session"];

/// One Mooncake line.
struct MoonCall {
    line: usize,
    at: Duration,
    input: u32,
    output: u32,
    hashes: Vec<u64>,
    session: Option<String>,
}

/// Mooncake-style JSON Lines, one call per line: `timestamp` (ms), `input_length`,
/// `output_length`, `hash_ids` (one id per `block_size` tokens of the prompt; equal
/// leading ids are a shared prefix). Calls are grouped into sessions by a
/// `session_id` (or `conversation_id`, `chat_id`, `session`) field when a line has
/// one; otherwise a call continues the session whose latest call's full blocks all
/// lead its own `hash_ids` (the longest such), and starts a session when none does.
/// A call that continues its session's previous call that way reuses the whole
/// previous context; one that shares fewer leading blocks with an earlier call of its
/// session reuses that many blocks' tokens; none, a fresh context. A session arrives
/// with its first call; later calls are sent at their recorded offsets from it, or as
/// soon as the previous reply ends when that is later (no tool wait is recorded).
pub fn parse_mooncake(text: &str, block_size: u32) -> Result<Vec<TraceSession>, AgentTraceError> {
    if block_size == 0 {
        return Err(AgentTraceError("the block size must be at least 1".into()));
    }
    let mut calls = Vec::new();
    for (line, t) in lines(text) {
        let v: Value =
            serde_json::from_str(t).map_err(|e| at_line(line, format!("not valid JSON ({e})")))?;
        calls.push(moon_call(&Obj::new(format!("line {line}"), &v)?, line)?);
    }
    calls.sort_by_key(|c| c.at); // stable
    let groups = if calls.iter().any(|c| c.session.is_some()) {
        group_by_field(calls)
    } else {
        group_by_prefix(calls, block_size)
    };
    Ok(groups
        .into_iter()
        .map(|g| moon_session(g, block_size))
        .collect())
}

fn moon_call(obj: &Obj, line: usize) -> Result<MoonCall, JsonError> {
    let tokens = |k: &str| obj.req(k, |f| f.int(1..=MAX_TOKENS)).map(|n| n as u32);
    let hashes = obj.opt("hash_ids", |f| f.each(|h| h.int(0..=u64::MAX)))?;
    let session = match SESSION_FIELDS.iter().find(|k| obj.has(k)) {
        Some(k) => Some(obj.req(k, id_of)?),
        None => None,
    };
    Ok(MoonCall {
        line,
        at: obj.req("timestamp", millis)?,
        input: tokens("input_length")?,
        output: tokens("output_length")?,
        hashes: hashes.unwrap_or_default(),
        session,
    })
}

/// Lines with the same session field, in arrival order; a line without one is a
/// session of its own.
fn group_by_field(calls: Vec<MoonCall>) -> Vec<Vec<MoonCall>> {
    let mut groups: Vec<Vec<MoonCall>> = Vec::new();
    let mut by_id: HashMap<String, usize> = HashMap::new();
    for c in calls {
        let slot = match &c.session {
            Some(id) => *by_id.entry(id.clone()).or_insert_with(|| {
                groups.push(Vec::new());
                groups.len() - 1
            }),
            None => {
                groups.push(Vec::new());
                groups.len() - 1
            }
        };
        groups[slot].push(c);
    }
    groups
}

/// The full blocks of a call's prompt: the last id of a prompt that does not end on
/// a block boundary hashes a partial block, which the next call fills differently.
fn full_blocks(c: &MoonCall, block_size: u32) -> usize {
    c.hashes.len().min((c.input / block_size) as usize)
}

fn group_by_prefix(calls: Vec<MoonCall>, block_size: u32) -> Vec<Vec<MoonCall>> {
    let mut groups: Vec<Vec<MoonCall>> = Vec::new();
    // (full blocks, last full block's id) of each session's latest call → session.
    let mut open: HashMap<(usize, u64), usize> = HashMap::new();
    for c in calls {
        let found = (1..=c.hashes.len()).rev().find_map(|l| {
            let g = *open.get(&(l, c.hashes[l - 1]))?;
            let last = groups[g].last()?;
            (last.hashes[..l] == c.hashes[..l]).then_some(g)
        });
        let g = match found {
            Some(g) => {
                let last = groups[g].last().expect("an open session has calls");
                let l = full_blocks(last, block_size);
                open.remove(&(l, last.hashes[l - 1]));
                g
            }
            None => {
                groups.push(Vec::new());
                groups.len() - 1
            }
        };
        let l = full_blocks(&c, block_size);
        if l > 0 {
            open.insert((l, c.hashes[l - 1]), g);
        }
        groups[g].push(c);
    }
    groups
}

fn common_prefix(a: &[u64], b: &[u64]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

fn moon_session(calls: Vec<MoonCall>, block_size: u32) -> TraceSession {
    let start = calls[0].at;
    let id = calls[0]
        .session
        .clone()
        .unwrap_or_else(|| format!("line-{}", calls[0].line));
    let mut out = Vec::with_capacity(calls.len());
    for (i, c) in calls.iter().enumerate() {
        let reuse = if i == 0 {
            Reuse::Tokens(0)
        } else {
            let prev = &calls[i - 1];
            let full = full_blocks(prev, block_size);
            let shared_prev = common_prefix(&prev.hashes, &c.hashes);
            if full > 0 && shared_prev >= full {
                Reuse::Previous
            } else {
                // The most leading blocks shared with any earlier call (the last 64).
                let shared = calls[i.saturating_sub(64)..i]
                    .iter()
                    .map(|e| common_prefix(&e.hashes, &c.hashes))
                    .max()
                    .unwrap_or(0) as u64;
                Reuse::Tokens((shared * u64::from(block_size)).min(u64::from(c.input) - 1))
            }
        };
        out.push(TraceCall {
            input_tokens: c.input,
            output_tokens: c.output,
            reuse,
            tool_wait: Duration::ZERO,
            at: (i > 0).then(|| c.at - start),
        });
    }
    TraceSession {
        id,
        at: start,
        calls: out,
    }
}

#[cfg(test)]
mod tests {
    use crate::agent_trace::tests::{fails, MS};
    use crate::agent_trace::*;

    #[test]
    fn mooncake_calls_chain_into_sessions_by_their_full_blocks() {
        // Block size 4. Session A: 10 tokens (2 full blocks [1,2], partial [3]), then
        // a call holding those two blocks and more: a continuation. B shares only the
        // first block (a common system prompt) with A: its own session. C shares A's
        // first call's full blocks but A moved on: it continues from A's latest call
        // only if that call's full blocks lead it, which they do not.
        let text = r#"{"timestamp": 1000, "input_length": 10, "output_length": 3, "hash_ids": [1, 2, 3]}
{"timestamp": 1000, "input_length": 9, "output_length": 2, "hash_ids": [1, 9, 10]}
{"timestamp": 1400, "input_length": 17, "output_length": 4, "hash_ids": [1, 2, 4, 5, 6]}
{"timestamp": 1500, "input_length": 12, "output_length": 4, "hash_ids": [1, 9, 11]}
{"timestamp": 2000, "input_length": 30, "output_length": 5, "hash_ids": [1, 2, 4, 5, 7, 8, 12, 13]}
{"timestamp": 2100, "input_length": 6, "output_length": 1, "hash_ids": [1, 2]}
"#;
        let s = parse(text, None, 4).unwrap();
        let shape: Vec<(&str, Vec<u32>)> = s
            .iter()
            .map(|s| {
                (
                    s.id.as_str(),
                    s.calls.iter().map(|c| c.input_tokens).collect(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("line-1", vec![10, 17, 30]),
                ("line-2", vec![9, 12]),
                ("line-6", vec![6]),
            ]
        );
        let a = &s[0].calls;
        assert_eq!(a[0].reuse, Reuse::Tokens(0));
        assert_eq!((a[1].reuse, a[1].at), (Reuse::Previous, Some(MS * 400)));
        assert_eq!((a[2].reuse, a[2].at), (Reuse::Previous, Some(MS * 1000)));
        assert_eq!(
            s[1].calls[1].reuse,
            Reuse::Previous,
            "[1, 9] are 9's full blocks"
        );
        assert_eq!(s[2].at, MS * 1100);
    }

    #[test]
    fn mooncake_session_fields_group_and_partial_prefixes_reuse_blocks() {
        let text = r#"{"timestamp": 0, "input_length": 1100, "output_length": 3, "hash_ids": [1, 2, 3], "session_id": "s"}
{"timestamp": 0, "input_length": 50, "output_length": 3, "hash_ids": [40]}
{"timestamp": 30, "input_length": 700, "output_length": 3, "hash_ids": [1, 20], "session_id": "s"}
{"timestamp": 60, "input_length": 300, "output_length": 3, "hash_ids": [30], "session_id": "s"}
"#;
        let s = parse(text, Some(Format::Mooncake), 512).unwrap();
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].id, "s");
        let reuse: Vec<Reuse> = s[0].calls.iter().map(|c| c.reuse).collect();
        assert_eq!(
            reuse,
            [Reuse::Tokens(0), Reuse::Tokens(512), Reuse::Tokens(0)]
        );
        assert_eq!(s[1].id, "line-2");
        let bad = [
            (
                r#"{"input_length": 5, "output_length": 1}"#,
                "field `timestamp`: missing",
            ),
            (
                r#"{"timestamp": 0, "output_length": 1}"#,
                "field `input_length`: missing",
            ),
            (
                r#"{"timestamp": 0, "input_length": 5, "output_length": 0}"#,
                "field `output_length`: expected at least 1, got 0",
            ),
            (
                r#"{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": 3}"#,
                "field `hash_ids`: expected an array, got a number",
            ),
            (
                r#"{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1, -2]}"#,
                "field `hash_ids[1]`: expected a whole number >= 0, got -2",
            ),
            (
                r#"{"timestamp": 0, "input_length": 5, "output_length": 1, "session_id": []}"#,
                "field `session_id`: expected a non-empty string or a number, got an array",
            ),
            (
                r#"{"timestamp": 1e300, "input_length": 5, "output_length": 1}"#,
                "field `timestamp`: 1e+300 is too large",
            ),
        ];
        for (b, what) in bad {
            fails(
                &format!("{b}\n"),
                Format::Mooncake,
                &format!("line 1: {what}"),
            );
        }
    }
}

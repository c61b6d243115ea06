//! `cadence sim`'s tool-call flags reach the server: `--parallel-tool-calls` sets
//! the calls per reply, `--tool-call-prob` the chance under `tool_choice: auto`,
//! and values out of range are usage errors.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

use assert_cmd::prelude::*;
use serde_json::{json, Value};

/// A sim process, killed when dropped (a failing test leaves none behind).
struct Sim(Child);

impl Drop for Sim {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the sim on a free port; returns it and its `host:port`.
fn sim(args: &[&str]) -> (Sim, String) {
    let mut child = Command::cargo_bin("cadence")
        .unwrap()
        .args([
            "sim",
            "--addr",
            "127.0.0.1:0",
            "--ttft",
            "1ms",
            "--itl",
            "1ms",
        ])
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .and_then(|a| a.strip_suffix("/v1"))
        .unwrap_or_else(|| panic!("unexpected first line: {line}"))
        .to_owned();
    (Sim(child), addr)
}

/// POSTs a streamed chat request and returns the tool calls its deltas open.
fn calls(addr: &str, choice: &str) -> usize {
    let body = json!({"model": "m", "stream": true, "max_tokens": 6,
        "messages": [{"role": "user", "content": "go"}],
        "tools": [{"type": "function", "function": {"name": "grep"}}],
        "tool_choice": choice})
    .to_string();
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "POST /v1/chat/completions HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut text = String::new();
    s.read_to_string(&mut text).unwrap();
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    text.lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| v.pointer("/choices/0/delta/tool_calls/0").cloned())
        .filter(|d| d.get("id").is_some())
        .count()
}

#[test]
fn the_flags_set_the_calls_per_reply_and_the_chance() {
    let (_sim, addr) = sim(&["--parallel-tool-calls", "3", "--tool-call-prob", "0"]);
    assert_eq!(calls(&addr, "required"), 3);
    assert_eq!(calls(&addr, "auto"), 0, "probability 0: auto never calls");
}

#[test]
fn out_of_range_values_are_usage_errors() {
    for (flag, value) in [("--tool-call-prob", "1.5"), ("--parallel-tool-calls", "0")] {
        Command::cargo_bin("cadence")
            .unwrap()
            .args(["sim", "--addr", "127.0.0.1:0", flag, value])
            .assert()
            .code(2)
            .stderr(predicates::str::contains(flag));
    }
}

//! The second hostile sweep, on bench's and report's side (FAULTS rows from 110): an
//! endless stream, fleet verdicts, secrets in bodies, server strings with escapes,
//! pipes and FIFOs. Servers are threads on 127.0.0.1 port 0; every run is bounded.

mod common;

use common::{cadence, read_records};
use serde_json::Value;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

/// Reads one HTTP/1 request head and its `content-length` body; false when it is none.
fn read_request(s: &mut TcpStream) -> bool {
    let _ = s.set_read_timeout(Some(Duration::from_secs(10)));
    let mut buf = Vec::new();
    let mut byte = [0u8; 4096];
    let head_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        match s.read(&mut byte) {
            Ok(n) if n > 0 => buf.extend_from_slice(&byte[..n]),
            _ => return false,
        }
    };
    let head = String::from_utf8_lossy(&buf[..head_end]).to_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    let mut have = buf.len() - head_end;
    while have < len {
        match s.read(&mut byte) {
            Ok(n) if n > 0 => have += n,
            _ => return false,
        }
    }
    true
}

/// A server on 127.0.0.1:0 that answers every request with `answer` on its own thread.
fn server(answer: fn(TcpStream)) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut s) = conn else { continue };
            std::thread::spawn(move || {
                if read_request(&mut s) {
                    answer(s)
                }
            });
        }
    });
    addr
}

/// Content events forever, until the client goes away.
fn endless(mut s: TcpStream) {
    let _ = s.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
    );
    let event = b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a \"}}]}\n\n";
    let block: Vec<u8> = event.repeat(64);
    while s.write_all(&block).is_ok() {}
}

fn url(addr: SocketAddr) -> String {
    format!("http://{addr}/v1")
}

/// `cadence bench URL --model m --api chat ARGS --quiet`, with records and a JSON
/// report in `dir`: the exit code, the records, the report and stderr.
fn bench(addr: SocketAddr, args: &[&str], dir: &Path) -> (Option<i32>, Vec<Value>, Value, String) {
    let records = dir.join("r.jsonl");
    let json = dir.join("r.json");
    let u = url(addr);
    let out = cadence()
        .args(["bench", &u, "--model", "m", "--api", "chat", "--quiet"])
        .args(args)
        .arg("--records")
        .arg(&records)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let report = std::fs::read_to_string(&json)
        .ok()
        .and_then(|t| serde_json::from_str(&t).ok())
        .unwrap_or(Value::Null);
    (
        out.status.code(),
        read_records(&records),
        report,
        String::from_utf8_lossy(&out.stderr).into(),
    )
}

// ---- FAULTS 110 ----

#[test]
fn f110_an_endless_stream_is_cut_at_the_chunk_ceiling() {
    let addr = server(endless);
    let dir = tempfile::tempdir().unwrap();
    let t = Instant::now();
    let (code, recs, report, err) = bench(addr, &["-n", "1", "--max-chunks", "5000"], dir.path());
    assert!(
        t.elapsed() < Duration::from_secs(60),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(recs.len(), 1, "{err}");
    let r = &recs[0];
    assert_eq!(r["outcome"], "response_too_large", "{r:?}");
    assert_eq!(r["chunks"].as_array().unwrap().len(), 5000);
    assert!(r["error"].as_str().unwrap().contains("--max-chunks"), "{r}");
    assert_eq!(
        report["levels"][0]["requests"]["failed"]["response_too_large"],
        1
    );
    assert_eq!(code, Some(4), "nothing succeeded: invalid; {err}");
}

#[test]
fn f110_an_endless_stream_is_cut_at_the_byte_ceiling() {
    let addr = server(endless);
    let dir = tempfile::tempdir().unwrap();
    let (_, recs, _, err) = bench(
        addr,
        &["-n", "1", "--max-response-bytes", "1MB", "--timeout", "60s"],
        dir.path(),
    );
    assert_eq!(recs.len(), 1, "{err}");
    let r = &recs[0];
    assert_eq!(r["outcome"], "response_too_large", "{r:?}");
    assert!(
        r["error"]
            .as_str()
            .unwrap()
            .contains("--max-response-bytes"),
        "{r}"
    );
    // About 60 bytes an event: 1 MB is some 17,000 of them.
    let n = r["chunks"].as_array().unwrap().len();
    assert!((10_000..20_000).contains(&n), "{n}");
}

#[test]
fn f110_by_default_an_endless_stream_ends_with_a_bounded_record() {
    let addr = server(endless);
    let dir = tempfile::tempdir().unwrap();
    let (_, recs, _, err) = bench(addr, &["-n", "1", "--timeout", "100s"], dir.path());
    assert_eq!(recs.len(), 1, "{err}");
    assert_eq!(recs[0]["outcome"], "response_too_large");
    assert_eq!(recs[0]["chunks"].as_array().unwrap().len(), 262_144);
    let text = std::fs::read_to_string(dir.path().join("r.jsonl")).unwrap();
    let longest = text.lines().map(str::len).max().unwrap();
    assert!(longest < 16 << 20, "a records line of {longest} bytes");
    // And the records read back into a report.
    let out = cadence()
        .arg("report")
        .arg(dir.path().join("r.jsonl"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

// ---- fleets: hand-built shard files (FAULTS 111–116) ----

use cadence_core::report::RunInfo;
use cadence_core::runlog::{
    anchor_line, level_line, run_line, shard_line, Anchor, LevelMeta, RunChecks, RunMeta,
    ShardLevel, ShardMeta,
};
use cadence_core::{Chunk, Outcome, RequestRecord};

const MS: u64 = 1_000_000;

/// How a hand-built shard ran.
#[derive(Clone)]
struct Shard {
    index: u32,
    count: u32,
    /// The fleet's planned start (ms since the epoch).
    start_at: Option<u64>,
    /// Its clock's 0 on the wall clock (ms since the epoch).
    anchor: u64,
    /// Requests, one every 100 ms from 0 on its clock (0: none sent).
    requests: u64,
    concurrency: u32,
    command: &'static str,
    interrupted: bool,
}

impl Shard {
    fn new(index: u32, count: u32) -> Shard {
        Shard {
            index,
            count,
            start_at: Some(1_700_000_000_000),
            anchor: 1_700_000_000_000,
            requests: 8,
            concurrency: 2,
            command: "cadence bench http://t/v1 --model m -c 4",
            interrupted: false,
        }
    }

    /// The shard's records file lines, as `bench --shard` writes them.
    fn lines(&self) -> Vec<String> {
        let id = ShardMeta {
            index: self.index,
            count: self.count,
            start_at_unix_ms: self.start_at,
            level: None,
        };
        let mut lines = vec![
            anchor_line(Anchor {
                unix_ms: self.anchor,
            }),
            shard_line(&id),
        ];
        for k in 0..self.requests {
            let mut r = RequestRecord::new(
                k * u64::from(self.count) + u64::from(self.index),
                Outcome::Succeeded,
            );
            let sent = k * 100 * MS;
            r.sent_ns = Some(sent);
            r.chunks = (1..=4)
                .map(|c| Chunk(sent + c * 10 * MS, Some(1)))
                .collect();
            r.end_ns = Some(sent + 50 * MS);
            lines.push(serde_json::to_string(&r).unwrap());
        }
        lines.push(level_line(&LevelMeta {
            concurrency: Some(self.concurrency),
            intended: Some(self.requests.max(8)),
            interrupted: self.interrupted,
            ..LevelMeta::new(0, format!("concurrency={}", self.concurrency))
        }));
        lines.push(shard_line(&ShardMeta {
            level: Some(ShardLevel {
                level: 0,
                planned_start_unix_ms: self.start_at,
                start_skew_ms: 1.0,
                loop_lag_p99_ms: 0.1,
                loop_lag_max_ms: 0.2,
                cpu_share: Some(0.1),
            }),
            ..id
        }));
        let mut run = RunInfo::new("http://t/v1", "chat", "m", "closed_loop", self.anchor);
        run.duration_s = self.requests as f64 * 0.1;
        run.interrupted = self.interrupted;
        run.command = self.command.split(' ').map(String::from).collect();
        run.command.push("--records".into());
        run.command.push(format!("shard-{}.jsonl", self.index));
        lines.push(run_line(&RunMeta {
            run,
            checks: RunChecks::default(),
            search: None,
        }));
        lines
    }

    fn write(&self, dir: &Path) -> std::path::PathBuf {
        let p = dir.join(format!("shard-{}.jsonl", self.index));
        std::fs::write(&p, self.lines().join("\n") + "\n").unwrap();
        p
    }
}

/// `cadence report ARGS`: exit code and stdout + stderr.
fn report(args: &[&std::ffi::OsStr]) -> (Option<i32>, String) {
    let out = cadence().arg("report").args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr),
    )
}

#[test]
fn f111_a_start_already_past_is_refused_and_a_level_that_sent_nothing_is_invalid() {
    // A start whose run window is already over: usage error, nothing sent.
    let past = cadence_core::wallclock::format_rfc3339(
        std::time::SystemTime::now() - Duration::from_secs(60),
    );
    let out = cadence()
        .args([
            "bench",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "-d",
            "2s",
            "--start-at",
            &past,
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("in the past"), "{err}");
    // A shard that sent nothing (it started after its level's end): its own records
    // are invalid, and the fleet merged with it is incomplete.
    let dir = tempfile::tempdir().unwrap();
    let a = Shard::new(0, 2).write(dir.path());
    let b = Shard {
        requests: 0,
        ..Shard::new(1, 2)
    }
    .write(dir.path());
    let (code, text) = report(&[b.as_os_str()]);
    assert_ne!(code, Some(0), "{text}");
    // A level of a sweep that sent nothing makes the run invalid (exit 4).
    let sweep = dir.path().join("sweep.jsonl");
    let mut lines: Vec<String> = Shard::new(0, 1)
        .lines()
        .into_iter()
        .filter(|l| !l.starts_with("{\"cadence_shard\""))
        .collect();
    let level1 = lines
        .iter()
        .find(|l| l.starts_with("{\"cadence_level\""))
        .unwrap()
        .replace("\"level\":0", "\"level\":1")
        .replace("concurrency=2", "concurrency=3");
    lines.insert(lines.len() - 1, level1);
    std::fs::write(&sweep, lines.join("\n") + "\n").unwrap();
    let (code, text) = report(&[sweep.as_os_str()]);
    assert_eq!(code, Some(4), "{text}");
    assert!(text.contains("nothing was sent at this level"), "{text}");
    let (code, text) = report(&[a.as_os_str(), b.as_os_str()]);
    assert_eq!(code, Some(6), "{text}");
    assert!(text.contains("shard 1 of 2 sent nothing"), "{text}");
}

#[test]
fn f112_missing_and_interrupted_shards_are_never_a_silent_pass() {
    let dir = tempfile::tempdir().unwrap();
    let fleet = dir.path().join("fleet");
    std::fs::create_dir(&fleet).unwrap();
    for i in 0..2 {
        Shard::new(i, 3).write(&fleet);
    }
    // Shard 2 of 3 is missing: named by report --exclude-shard of another shard...
    let (code, text) = report(&[fleet.as_os_str(), "--exclude-shard".as_ref(), "1".as_ref()]);
    assert_eq!(code, Some(6), "{text}");
    assert!(text.contains("shard 2 of 3 is missing"), "{text}");
    // ...and by compare of the fleet's directory.
    let single = dir.path().join("single.jsonl");
    let lone = Shard::new(0, 1).lines();
    std::fs::write(
        &single,
        lone.iter()
            .filter(|l| {
                !l.starts_with("{\"cadence_shard\"") && !l.starts_with("{\"cadence_anchor\"")
            })
            .map(|l| {
                l.replace("concurrency=2", "concurrency=4")
                    .replace("\"concurrency\":2", "\"concurrency\":4")
            })
            .collect::<Vec<_>>()
            .join("\n")
            + "\n",
    )
    .unwrap();
    let out = cadence()
        .arg("compare")
        .arg(&single)
        .arg(&fleet)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(6),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("missing shard 2"), "{text}");
    // An interrupted shard: named with what it sent, never exit 0.
    let dir = tempfile::tempdir().unwrap();
    let a = Shard::new(0, 2).write(dir.path());
    let b = Shard {
        requests: 5,
        interrupted: true,
        ..Shard::new(1, 2)
    }
    .write(dir.path());
    let (code, text) = report(&[a.as_os_str(), b.as_os_str()]);
    assert_eq!(code, Some(6), "{text}");
    assert!(text.contains("shard 1 of 2 was interrupted"), "{text}");
    assert!(text.contains("sent 5 of its 8 intended"), "{text}");
}

#[test]
fn f113_shards_that_never_ran_together_are_not_one_stretched_run() {
    // No shared start; shard 1 began 6 s after shard 0 ended: each ran 0.75 s.
    let dir = tempfile::tempdir().unwrap();
    let a = Shard {
        start_at: None,
        ..Shard::new(0, 2)
    }
    .write(dir.path());
    let b = Shard {
        start_at: None,
        anchor: 1_700_000_006_000,
        ..Shard::new(1, 2)
    }
    .write(dir.path());
    let (code, text) = report(&[a.as_os_str(), b.as_os_str()]);
    assert_eq!(code, Some(6), "{text}");
    assert!(text.contains("the shards did not run together"), "{text}");
    assert!(text.contains("shard 1 6.000–6.750 s"), "{text}");
    // Each shard: 8 sent over 0.75 s (first send to last end); summed, 21.333 req/s.
    assert!(
        text.contains("each shard's own rate summed: 21.333 req/s"),
        "{text}"
    );
    // Shards that ran together are not flagged.
    let c = Shard {
        start_at: None,
        anchor: 1_700_000_000_004,
        ..Shard::new(1, 2)
    }
    .write(dir.path());
    let (code, text) = report(&[a.as_os_str(), c.as_os_str()]);
    assert_eq!(code, Some(0), "{text}");
}

#[test]
fn f114_shards_of_different_configurations_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let a = Shard {
        concurrency: 3,
        command: "cadence bench http://t/v1 --model m -c 6",
        ..Shard::new(0, 2)
    }
    .write(dir.path());
    let b = Shard::new(1, 2).write(dir.path());
    let (code, text) = report(&[a.as_os_str(), b.as_os_str()]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("ran different configurations"), "{text}");
    assert!(text.contains("-c 6"), "{text}");
}

#[test]
fn f115_shards_cat_together_are_read_as_the_shards_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let all = dir.path().join("all.jsonl");
    let mut lines = Shard::new(0, 2).lines();
    lines.extend(
        Shard {
            anchor: 1_700_000_000_003,
            ..Shard::new(1, 2)
        }
        .lines(),
    );
    std::fs::write(&all, lines.join("\n") + "\n").unwrap();
    let json = dir.path().join("r.json");
    let (code, text) = report(&[all.as_os_str(), "--json".as_ref(), json.as_os_str()]);
    assert_eq!(code, Some(0), "{text}");
    let r: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["fleet"]["merged"], serde_json::json!([0, 1]));
    assert_eq!(r["levels"][0]["requests"]["sent"], 16);
    assert_eq!(r["levels"][0]["name"], "concurrency=4");
}

#[test]
fn f116_shards_started_with_start_in_a_few_ms_apart_merge() {
    let dir = tempfile::tempdir().unwrap();
    let a = Shard::new(0, 2).write(dir.path());
    let b = Shard {
        start_at: Some(1_700_000_000_004),
        anchor: 1_700_000_000_004,
        ..Shard::new(1, 2)
    }
    .write(dir.path());
    let (code, text) = report(&[a.as_os_str(), b.as_os_str()]);
    assert_eq!(code, Some(0), "{text}");
    // Two runs a minute apart are still two runs.
    let c = Shard {
        start_at: Some(1_700_000_060_000),
        anchor: 1_700_000_060_000,
        ..Shard::new(1, 2)
    }
    .write(&dir.path().join("..").join(dir.path().file_name().unwrap()));
    let (code, text) = report(&[a.as_os_str(), c.as_os_str()]);
    assert_eq!(code, Some(2), "{text}");
    assert!(text.contains("another fleet run"), "{text}");
}

// ---- FAULTS 117 ----

/// Three content events, a finish and `[DONE]`.
fn short_stream(mut s: TcpStream) {
    let _ = s.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
    );
    for _ in 0..3 {
        let _ =
            s.write_all(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a \"}}]}\n\n");
    }
    let _ = s.write_all(
        b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: [DONE]\n\n",
    );
}

#[test]
fn f117_keys_in_extra_body_fields_and_url_userinfo_reach_no_output() {
    let addr = server(short_stream);
    let dir = tempfile::tempdir().unwrap();
    let u = format!("http://alice:PASSWORD-4f1e@{addr}/v1");
    let body = r#"{"api_key": "BODYKEY-9c2a77", "nested": {"auth_token": "TOKEN-51be03"}, "temperature": 0.5}"#;
    let (records, json, html) = (
        dir.path().join("r.jsonl"),
        dir.path().join("r.json"),
        dir.path().join("r.html"),
    );
    let out = cadence()
        .args([
            "bench",
            &u,
            "--model",
            "m",
            "--api",
            "chat",
            "-n",
            "2",
            "-c",
            "1",
            "--extra-body",
            body,
        ])
        .arg("--records")
        .arg(&records)
        .arg("--json")
        .arg(&json)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    let outputs = [
        ("stdout", String::from_utf8_lossy(&out.stdout).to_string()),
        ("stderr", String::from_utf8_lossy(&out.stderr).to_string()),
        ("records", std::fs::read_to_string(&records).unwrap()),
        ("json", std::fs::read_to_string(&json).unwrap()),
        ("html", std::fs::read_to_string(&html).unwrap()),
    ];
    assert_eq!(out.status.code(), Some(0), "{outputs:?}");
    for (what, text) in &outputs {
        for secret in ["BODYKEY-9c2a77", "TOKEN-51be03", "PASSWORD-4f1e"] {
            assert!(!text.contains(secret), "{secret} leaked into {what}");
        }
    }
    // What is no secret stays.
    assert!(
        outputs[3].1.contains("temperature"),
        "the command line is still there"
    );
}

// ---- FAULTS 118 ----

/// Every stream fails with an error message holding terminal escapes and tags.
fn hostile_strings(mut s: TcpStream) {
    let _ = s.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
    );
    let _ = s.write_all(
        b"data: {\"error\":{\"message\":\"boom \\u001b]0;pwned\\u0007\\u001b[2J <img src=x onerror=alert(1)> <script>alert(2)</script>\"}}\n\n",
    );
}

#[test]
fn f118_server_strings_reach_console_and_markdown_escaped() {
    let addr = server(hostile_strings);
    let dir = tempfile::tempdir().unwrap();
    let (md, html) = (dir.path().join("r.md"), dir.path().join("r.html"));
    let u = url(addr);
    let out = cadence()
        .args(["bench", &u, "--api", "chat", "-n", "2", "-c", "1"])
        .args(["--model", "m\u{1b}]0;owned\u{7}<script>alert(3)</script>"])
        .arg("--markdown")
        .arg(&md)
        .arg("--html")
        .arg(&html)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains("boom"), "the error is shown: {stdout}");
    for (what, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "a raw escape reached {what}: {text:?}"
        );
    }
    let md = std::fs::read_to_string(&md).unwrap();
    assert!(md.contains("boom"), "{md}");
    for tag in ["<script", "<img"] {
        assert!(!md.contains(tag), "{tag} in the Markdown: {md}");
    }
    assert!(!md.contains('\u{1b}'), "{md:?}");
    let html = std::fs::read_to_string(&html).unwrap();
    for tag in ["<script>alert", "<img src=x"] {
        assert!(!html.contains(tag), "{tag} in the HTML");
    }
}

// ---- FAULTS 119 ----

/// A FIFO at `path` (`mkfifo`).
fn mkfifo(path: &Path) {
    let ok = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(ok.success());
}

/// A records file of a short run, written by bench.
fn short_run_records(dir: &Path) -> std::path::PathBuf {
    let addr = server(short_stream);
    let (code, recs, _, err) = bench(addr, &["-n", "3", "-c", "1"], dir);
    assert_eq!((code, recs.len()), (Some(0), 3), "{err}");
    dir.join("r.jsonl")
}

#[test]
fn f119_report_reads_stdin_a_pipe_and_a_fifo() {
    let dir = tempfile::tempdir().unwrap();
    let records = short_run_records(dir.path());
    let bytes = std::fs::read(&records).unwrap();
    // /dev/stdin, a pipe.
    let out = cadence()
        .args(["report", "/dev/stdin"])
        .write_stdin(bytes.clone())
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("3 sent, 3 succeeded"), "{stdout}");
    // A FIFO, written once by another process.
    let fifo = dir.path().join("fifo.jsonl");
    mkfifo(&fifo);
    let (f, b) = (fifo.clone(), bytes.clone());
    let writer = std::thread::spawn(move || std::fs::write(&f, b));
    let out = cadence()
        .arg("report")
        .arg(&fifo)
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("3 sent, 3 succeeded"));
    writer.join().unwrap().unwrap();
}

#[test]
fn f119_bench_writes_its_records_into_a_fifo() {
    let addr = server(short_stream);
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("records.jsonl");
    mkfifo(&fifo);
    let f = fifo.clone();
    // A reader like `cat`: everything until the last writer closes. (The pre-check's
    // open and close it could see first is a race this test does not always win.)
    let reader = std::thread::spawn(move || std::fs::read_to_string(&f));
    let u = url(addr);
    let out = cadence()
        .args([
            "bench", &u, "--model", "m", "--api", "chat", "-n", "3", "-c", "1", "--quiet",
        ])
        .arg("--records")
        .arg(&fifo)
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = reader.join().unwrap().unwrap();
    assert_eq!(common::record_lines(&text).count(), 3, "{text}");
}

// ---- FAULTS 120 ----

/// A `/stats` answer whose `windows` is a string of `n` bytes.
fn stats_of(mut s: TcpStream, n: usize) {
    let body = format!("{{\"windows\":\"{}\"}}", "A".repeat(n));
    let _ = write!(
        s,
        "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
}

#[test]
fn f120_top_quotes_a_bad_stats_document_briefly() {
    for (addr, needle) in [
        (
            server(|s| stats_of(s, 900 << 10)),
            "unexpected /stats document",
        ),
        (server(|s| stats_of(s, 100 << 20)), "larger than"),
    ] {
        let out = cadence()
            .args(["top", &format!("http://{addr}"), "--once"])
            .timeout(Duration::from_secs(30))
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        let head = &err[..err.len().min(300)];
        assert_eq!(out.status.code(), Some(1), "{head}");
        assert!(err.contains(needle), "{head}");
        assert!(err.len() < 2048, "an error of {} bytes", err.len());
    }
}

// ---- FAULTS 121 ----

/// Three content events, then a usage chunk claiming 2^64 - 1 tokens.
fn absurd_usage(mut s: TcpStream) {
    let _ = s.write_all(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n",
    );
    for _ in 0..3 {
        let _ =
            s.write_all(b"data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"a \"}}]}\n\n");
    }
    let _ = s.write_all(
        b"data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":18446744073709551615,\"completion_tokens\":18446744073709551615}}\n\ndata: [DONE]\n\n",
    );
}

#[test]
fn f121_an_absurd_usage_count_is_malformed_not_a_throughput() {
    let addr = server(absurd_usage);
    let dir = tempfile::tempdir().unwrap();
    let (code, recs, report, err) = bench(addr, &["-n", "2", "-c", "1"], dir.path());
    assert_eq!(code, Some(0), "{err}");
    for r in &recs {
        assert_eq!(r["counters"]["malformed"], 2, "{r}");
        assert_ne!(r["output_tokens"]["source"], "usage", "{r}");
        assert!(
            r.get("input_tokens_source").is_none_or(|s| s != "usage"),
            "{r}"
        );
    }
    let tok_s = report["levels"][0]["throughput"]["output_tokens_per_s"]
        .as_f64()
        .unwrap();
    assert!(tok_s < 1e7, "{tok_s} tok/s");
}

// ---- FAULTS 122 ----

#[test]
fn f122_tui_on_a_dumb_terminal_falls_back_to_plain_output() {
    let addr = server(short_stream);
    let u = url(addr);
    let out = cadence()
        .env("TERM", "dumb")
        .args([
            "bench", &u, "--model", "m", "--api", "chat", "-n", "2", "-c", "1", "--tui",
        ])
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("--tui cannot draw"), "{stderr}");
    assert!(stdout.contains("2 sent, 2 succeeded"), "{stdout}");
    assert!(
        !stdout.contains('\u{1b}') && !stderr.contains('\u{1b}'),
        "ANSI on a dumb terminal"
    );
}

// ---- FAULTS 123 ----

#[test]
fn f123_a_records_line_over_the_cap_is_skipped_and_named() {
    let dir = tempfile::tempdir().unwrap();
    let records = short_run_records(dir.path());
    let text = std::fs::read_to_string(&records).unwrap();
    // A record of 6 million chunks (72 MB) from a file written without a ceiling,
    // first in the file.
    let mut huge = String::from(r#"{"index":99,"sent_ns":1,"outcome":"succeeded","chunks":["#);
    huge.push_str(&"[1000,null],".repeat(6_000_000));
    huge.push_str(r#"[1000,null]],"end_ns":2000}"#);
    std::fs::write(&records, huge + "\n" + &text).unwrap();
    let out = cadence()
        .arg("report")
        .arg(&records)
        .timeout(Duration::from_secs(60))
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(0), "{stderr}{stdout}");
    assert!(stdout.contains("3 sent, 3 succeeded"), "{stdout}");
    assert!(
        stdout.contains("over the 64 MiB a records line may hold"),
        "{stdout}"
    );
}

/// `cadence report ARGS… INPUT` with `TMPDIR` at `tmp`, fed `stdin` from a thread that
/// stops when the reader goes away: its exit code and stderr.
fn report_spooling(args: &[&str], tmp: &Path, stdin: Option<Vec<u8>>) -> (Option<i32>, String) {
    use std::process::Stdio;
    let started = Instant::now();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_cadence"))
        .arg("report")
        .args(args)
        .env("TMPDIR", tmp)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let writer = stdin.map(|bytes| {
        let mut pipe = child.stdin.take().unwrap();
        // A broken pipe is the point: the reader stopped at its ceiling.
        std::thread::spawn(move || while pipe.write_all(&bytes).is_ok() {})
    });
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    let status = child.wait().unwrap();
    if let Some(w) = writer {
        w.join().unwrap();
    }
    assert!(started.elapsed() < Duration::from_secs(30), "{err}");
    (status.code(), err)
}

#[test]
fn f130_a_stream_over_the_spool_ceiling_is_refused_naming_it() {
    let tmp = tempfile::tempdir().unwrap();
    // A device without end, and `yes | cadence report /dev/stdin`.
    for (input, stdin) in [
        ("/dev/zero", None),
        ("/dev/stdin", Some(b"y\n".repeat(1 << 15))),
    ] {
        let (code, err) = report_spooling(&["--max-spool", "64KiB", input], tmp.path(), stdin);
        assert_eq!(code, Some(2), "{input}: {err}");
        assert!(err.contains(input), "{err}");
        assert!(err.contains("--max-spool"), "{err}");
        assert!(err.contains("65536 bytes"), "{err}");
        // Nothing is left behind in TMPDIR.
        assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
    }
}

#[test]
fn f130_a_stream_of_exactly_the_spool_ceiling_is_read_one_byte_more_is_not() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(short_run_records(dir.path())).unwrap();
    let exact = format!("{}", bytes.len());
    let out = cadence()
        .args(["report", "--max-spool", &exact, "/dev/stdin"])
        .write_stdin(bytes.clone())
        .timeout(Duration::from_secs(30))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("3 sent, 3 succeeded"));
    let tmp = tempfile::tempdir().unwrap();
    let short = format!("{}", bytes.len() - 1);
    let (code, err) = report_spooling(
        &["--max-spool", &short, "/dev/stdin"],
        tmp.path(),
        Some(bytes),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("--max-spool"), "{err}");
}

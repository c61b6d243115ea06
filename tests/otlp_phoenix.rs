//! `cadence bench --otlp` into a real receiver: Arize Phoenix (from PyPI, installed by
//! scripts/phoenix.sh, started here on ports of its own), its spans read back through
//! its REST API and checked against the records: the same ids, TTFT and the request's
//! time within 2 µs (Phoenix keeps microseconds, through a float), one child per session step.

mod common;

use cadence_core::wallclock::parse_rfc3339;
use common::{cadence, read_records};
use serde_json::Value;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, UNIX_EPOCH};

/// Phoenix on free ports, its data in a temporary directory; killed when dropped.
struct Phoenix {
    child: Child,
    url: String,
    /// Its OTLP/gRPC receiver's base URL.
    grpc_url: String,
    _dir: tempfile::TempDir,
}

impl Drop for Phoenix {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn get(url: &str) -> Option<String> {
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "5", url])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

fn phoenix() -> Phoenix {
    let bin = std::env::var("CADENCE_PHOENIX").expect("CADENCE_PHOENIX: scripts/phoenix.sh's path");
    let dir = tempfile::tempdir().unwrap();
    let (port, grpc_port) = (free_port(), free_port());
    let child = Command::new(bin)
        .arg("serve")
        .env("PHOENIX_PORT", port.to_string())
        .env("PHOENIX_GRPC_PORT", grpc_port.to_string())
        .env("PHOENIX_HOST", "127.0.0.1")
        .env("PHOENIX_WORKING_DIR", dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let p = Phoenix {
        child,
        url: format!("http://127.0.0.1:{port}"),
        grpc_url: format!("http://127.0.0.1:{grpc_port}"),
        _dir: dir,
    };
    // Each test starts its own Phoenix, and they start at once: in a pre-stop CI run
    // one took over 180 s to answer.
    let until = Instant::now() + Duration::from_secs(300);
    while get(&format!("{}/healthz", p.url)).is_none() {
        assert!(
            Instant::now() < until,
            "Phoenix did not answer within 300 s"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    p
}

/// Every span of the default project, read back through Phoenix's API.
fn spans(p: &Phoenix, want: usize) -> Vec<Value> {
    let until = Instant::now() + Duration::from_secs(30);
    loop {
        let body =
            get(&format!("{}/v1/projects/default/spans?limit=1000", p.url)).unwrap_or_default();
        let spans = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v["data"].as_array().cloned())
            .unwrap_or_default();
        if spans.len() >= want || Instant::now() > until {
            return spans;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// A Phoenix time as µs since the Unix epoch.
/// The span Phoenix holds for record `r`: the one its trace's span id names, in the
/// trace it names.
fn span_of<'a>(spans: &'a [Value], r: &Value) -> &'a Value {
    let t = &r["trace"];
    let s = spans
        .iter()
        .find(|s| s["context"]["span_id"] == t["span_id"])
        .unwrap_or_else(|| panic!("no span for {t}"));
    assert_eq!(s["context"]["trace_id"], t["trace_id"]);
    s
}

fn us(v: &Value) -> u64 {
    let t = parse_rfc3339(v.as_str().unwrap()).unwrap();
    t.duration_since(UNIX_EPOCH).unwrap().as_micros() as u64
}

#[test]
#[ignore = "needs Arize Phoenix (scripts/phoenix.sh, run by scripts/test.sh; CADENCE_PHOENIX)"]
fn phoenix_holds_each_request_and_session_as_the_records_say() {
    let p = phoenix();
    let dir = tempfile::tempdir().unwrap();
    let records = dir.path().join("r.jsonl");
    cadence()
        .args([
            "bench",
            "-n",
            "3",
            "-c",
            "3",
            "--turns",
            "2",
            "--input-tokens",
            "8",
            "--quiet",
        ])
        .args(["--otlp", &p.url])
        .arg("--records")
        .arg(&records)
        .assert()
        .code(0);
    let records = read_records(&records);
    assert_eq!(records.len(), 6);
    // Six steps and three sessions.
    let spans = spans(&p, 9);
    assert_eq!(spans.len(), 9, "{spans:#?}");
    for r in &records {
        let (t, s) = (&r["trace"], span_of(&spans, r));
        assert_eq!(
            s["parent_id"], t["parent_span_id"],
            "a child of its session"
        );
        let a = &s["attributes"];
        let (sent, end) = (
            r["sent_ns"].as_u64().unwrap(),
            r["end_ns"].as_u64().unwrap(),
        );
        let first = r["chunks"][0][0].as_u64().unwrap();
        assert_eq!(
            a["cadence.ttft_ms"].as_f64().unwrap(),
            (first - sent) as f64 / 1e6
        );
        assert_eq!(a["gen_ai.usage.output_tokens"], r["output_tokens"]["count"]);
        // Phoenix keeps microseconds, through a float of the Unix time (about 0.25 µs
        // apart at today's 1.7e18 ns), so each end can round as well as be cut: the
        // span's length is the record's within 2 µs (a pre-stop CI run read 347,524 µs
        // for a record of 347,522,883 ns).
        let (start_us, end_us) = (us(&s["start_time"]), us(&s["end_time"]));
        let d = (end_us - start_us) as i64 - ((end - sent) / 1000) as i64;
        assert!(
            d.abs() <= 2,
            "span {} µs, record {} ns",
            end_us - start_us,
            end - sent
        );
        let ev = s["events"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "cadence.first_chunk")
            .unwrap();
        let d = (us(&ev["timestamp"]) - start_us) as i64 - ((first - sent) / 1000) as i64;
        assert!(d.abs() <= 2, "first chunk off by {d} µs");
    }
    for session in 0..3 {
        let steps: Vec<&Value> = records.iter().filter(|r| r["session"] == session).collect();
        let parent = &steps[0]["trace"]["parent_span_id"];
        let root = spans
            .iter()
            .find(|s| &s["context"]["span_id"] == parent)
            .unwrap();
        assert!(root["parent_id"].is_null());
        let children = spans.iter().filter(|s| &s["parent_id"] == parent).count();
        assert_eq!(children, 2, "one child per step of session {session}");
    }
}

/// bench → proxy → sim, each with `--otlp` to Phoenix: one trace per request through
/// all three, read back (client → proxy → server), the proxy's TTFT that of its record.
#[test]
#[ignore = "needs Arize Phoenix (scripts/phoenix.sh, run by scripts/test.sh; CADENCE_PHOENIX)"]
fn phoenix_holds_bench_proxy_and_sim_as_one_trace() {
    let p = phoenix();
    let dir = tempfile::tempdir().unwrap();
    let (bench, proxied) = (dir.path().join("b.jsonl"), dir.path().join("p.jsonl"));
    let otlp = ["--otlp", &p.url];
    let extra = ["--records", proxied.to_str().unwrap()];
    let (_sim, proxy, proxy_url) = common::traced_sim_and_proxy(&otlp, &extra);
    cadence()
        .args([
            "bench",
            &format!("{proxy_url}/v1"),
            "-n",
            "3",
            "-c",
            "1",
            "--quiet",
        ])
        .args(otlp)
        .arg("--records")
        .arg(&bench)
        .assert()
        .code(0);
    let spans = spans(&p, 9);
    drop(proxy);
    assert_eq!(spans.len(), 9, "{spans:#?}");
    let by_parent = |id: &Value| {
        let s = spans.iter().find(|s| &s["parent_id"] == id);
        s.unwrap_or_else(|| panic!("a span under {id}")).clone()
    };
    // The proxy's records file is flushed within 100 ms of each record.
    std::thread::sleep(Duration::from_millis(300));
    let hops = read_records(&proxied);
    for r in read_records(&bench) {
        let (trace, span) = (&r["trace"]["trace_id"], &r["trace"]["span_id"]);
        let hop = by_parent(span);
        assert_eq!(&hop["context"]["trace_id"], trace);
        let server = by_parent(&hop["context"]["span_id"]);
        assert_eq!(&server["context"]["trace_id"], trace);
        assert_eq!(server["name"], "llm_request");
        let mine = hops
            .iter()
            .find(|h| h["trace"]["span_id"] == hop["context"]["span_id"])
            .expect("the proxy's record of the hop");
        let (sent, first) = (
            mine["sent_ns"].as_u64().unwrap(),
            mine["chunks"][0][0].as_u64().unwrap(),
        );
        let ttft = hop["attributes"]["cadence.ttft_ms"].as_f64().unwrap();
        assert_eq!(ttft, (first - sent) as f64 / 1e6);
    }
}

/// `cadence bench --otlp-protocol grpc` into Phoenix's gRPC receiver: every record's
/// span read back through its API with the record's ids and TTFT.
#[test]
#[ignore = "needs Arize Phoenix (scripts/phoenix.sh, run by scripts/test.sh; CADENCE_PHOENIX)"]
fn phoenix_takes_a_runs_spans_over_grpc() {
    let p = phoenix();
    let dir = tempfile::tempdir().unwrap();
    let (records, json) = (dir.path().join("r.jsonl"), dir.path().join("r.json"));
    cadence()
        .args(["bench", "-n", "4", "-c", "2", "--quiet"])
        .args(["--otlp", &p.grpc_url, "--otlp-protocol", "grpc"])
        .args(["--otlp-signals", "traces"])
        .arg("--records")
        .arg(&records)
        .arg("--json")
        .arg(&json)
        .assert()
        .code(0);
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    assert_eq!(report["otlp"]["protocol"], "grpc");
    assert_eq!(report["otlp"]["exported"], 4, "{}", report["otlp"]);
    let records = read_records(&records);
    let spans = spans(&p, 4);
    assert_eq!(spans.len(), 4, "{spans:#?}");
    for r in &records {
        let s = span_of(&spans, r);
        let (sent, first) = (
            r["sent_ns"].as_u64().unwrap(),
            r["chunks"][0][0].as_u64().unwrap(),
        );
        let ttft = s["attributes"]["cadence.ttft_ms"].as_f64().unwrap();
        assert_eq!(ttft, (first - sent) as f64 / 1e6);
    }
}

//! Helpers the root end-to-end tests share (`mod common;` in each): the real `cadence`
//! command, a usage error's exit code and message, the report's check against the
//! checked-in JSON schema, and the request records of a records file.

pub mod collector;
pub mod watcher;

use assert_cmd::Command;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// The real `cadence` binary, with no API key inherited from the environment and a
/// 120 s watchdog.
pub fn cadence() -> Command {
    let mut c = Command::cargo_bin("cadence").unwrap();
    c.env_remove("OPENAI_API_KEY")
        .timeout(Duration::from_secs(120));
    c
}

/// Runs `cadence ARGS`, expecting exit 2 (usage) with `needle` in the error.
#[allow(dead_code)]
pub fn usage_error(args: &[&str], needle: &str) {
    cadence()
        .args(args)
        .assert()
        .code(2)
        .stderr(predicates::str::contains(needle));
}

/// Asserts that the report `json` (text) matches `schema/report.schema.json`.
#[allow(dead_code)]
pub fn validate(json: &str) {
    validate_report(&serde_json::from_str(json).unwrap());
}

/// Asserts that the parsed `report` matches `schema/report.schema.json`.
#[allow(dead_code)]
pub fn validate_report(report: &Value) {
    let schema: Value =
        serde_json::from_str(include_str!("../../schema/report.schema.json")).unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(report)
        .map(|e| format!("{e} at {}", e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "report does not match the schema: {errors:#?}"
    );
}

/// The request-record lines of a records file (it also holds one metadata line per
/// level and one for the run, each an object keyed `cadence_level` / `cadence_run`).
#[allow(dead_code)]
pub fn record_lines(text: &str) -> impl Iterator<Item = &str> {
    text.lines().filter(|l| !l.starts_with("{\"cadence_"))
}

/// `cadence bench --seed 7 --quiet ARGS --json --records` into `dir` with `env` set:
/// its exit code, its JSON report (checked against the schema) and its records.
#[allow(dead_code)]
pub fn bench_report(
    args: &[&str],
    env: &[(&str, &str)],
    dir: &Path,
) -> (Option<i32>, Value, Vec<Value>) {
    let (json, records) = (dir.join("r.json"), dir.join("r.jsonl"));
    let out = cadence()
        .args(["bench", "--seed", "7", "--quiet"])
        .args(args)
        .envs(env.iter().copied())
        .arg("--json")
        .arg(&json)
        .arg("--records")
        .arg(&records)
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    validate_report(&report);
    (out.status.code(), report, read_records(&records))
}

/// The request records of the records file at `path`, parsed, in file order.
#[allow(dead_code)]
pub fn read_records(path: &Path) -> Vec<Value> {
    record_lines(&std::fs::read_to_string(path).unwrap())
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[allow(dead_code)]
/// A three-conversation ShareGPT file in `dir`: prompts of 4, 1 and 10 words with
/// replies of 4, 1 and 1 words.
pub fn sharegpt_fixture(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("sg.json");
    std::fs::write(
        &path,
        r#"[{"id": "x", "conversations": [{"from": "human", "value": "tell me a story"},
                                         {"from": "gpt", "value": "once upon a time"}]},
            {"id": "y", "conversations": [{"from": "human", "value": "why"},
                                         {"from": "gpt", "value": "because"}]},
            {"id": "z", "conversations": [{"from": "human", "value": "a b c d e f g h i j"},
                                         {"from": "gpt", "value": "ok"}]}]"#,
    )
    .unwrap();
    path
}

/// Starts a long `cadence bench` on the built-in engine (4 streams of ~5 s each, so
/// some are mid-stream), sends it `signal` (`-INT`, `-TERM`) after 1.5 s, and returns
/// its output and the directory holding its `r.json` report and `r.jsonl` records.
#[cfg(unix)]
#[allow(dead_code)]
pub fn bench_stopped_by(signal: &str, requests: &str) -> (std::process::Output, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadence"))
        .args(["bench", "-n", requests, "-c", "4", "--max-tokens", "1000"])
        .args(["--grace", "100ms", "--quiet", "--json"])
        .arg(dir.path().join("r.json"))
        .arg("--records")
        .arg(dir.path().join("r.jsonl"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let status = std::process::Command::new("kill")
        .args([signal, &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(130),
        "stderr: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stdout).contains("TTFT"));
    (out, dir)
}

/// A child process, killed and reaped when dropped.
#[allow(dead_code)]
pub struct Killed(pub std::process::Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Sends SIGINT to `child` (as Ctrl-C would) and waits up to 10 s for it to exit:
/// its exit status, or `None` if it still runs.
#[allow(dead_code)]
pub fn interrupt_and_wait(child: &mut std::process::Child) -> Option<std::process::ExitStatus> {
    let pid = child.id().to_string();
    assert!(std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .unwrap()
        .success());
    for _ in 0..200 {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    None
}

/// Starts `cadence ARGS` (a server: `sim`, `proxy`) and returns it with the base URL it
/// printed first (`listening on URL`, without a trailing `/v1`).
#[allow(dead_code)]
pub fn spawn_listening(args: &[&str]) -> (Killed, String) {
    use std::io::BufRead;
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("cadence"))
        .args(args)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let url = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap()
        .trim_end_matches("/v1")
        .to_string();
    (Killed(child), url)
}

/// `cadence sim` on a free port of 127.0.0.1 with a fast, fixed cadence (TTFT 5 ms,
/// ITL 2 ms): its process and base URL.
#[allow(dead_code)]
pub fn fast_sim() -> (Killed, String) {
    spawn_listening(&FAST_SIM)
}

/// [`fast_sim`]'s command line.
const FAST_SIM: [&str; 7] = [
    "sim",
    "--addr",
    "127.0.0.1:0",
    "--ttft",
    "5ms",
    "--itl",
    "2ms",
];

/// `cadence sim` (fast, fixed cadence) and `cadence proxy` in front of it, both with the
/// flags `otlp` (`--otlp URL`, ...), the proxy with `proxy_extra` too: both processes
/// and the proxy's base URL.
#[allow(dead_code)]
pub fn traced_sim_and_proxy(otlp: &[&str], proxy_extra: &[&str]) -> (Killed, Killed, String) {
    let (sim, sim_url) = spawn_listening(&[&FAST_SIM[..], otlp].concat());
    let up = ["proxy", "--listen", "127.0.0.1:0", "--upstream", &sim_url];
    let (proxy, url) = spawn_listening(&[&up[..], otlp, proxy_extra].concat());
    (sim, proxy, url)
}

/// `cadence proxy` on a free port of 127.0.0.1 in front of `upstream`, appending its
/// records to `records`: its process and base URL.
#[allow(dead_code)]
pub fn recording_proxy(upstream: &str, records: &Path) -> (Killed, String) {
    spawn_listening(&[
        "proxy",
        "--listen",
        "127.0.0.1:0",
        "--upstream",
        upstream,
        "--records",
        records.to_str().unwrap(),
    ])
}

/// `cadence sim` on a free port of 127.0.0.1 timed by the engine model of the
/// `tiny@cpu` preset, with `extra` flags: its process and base URL.
#[allow(dead_code)]
pub fn tiny_engine_sim(extra: &[&str]) -> (Killed, String) {
    let sim = ["sim", "--addr", "127.0.0.1:0", "--preset", "tiny@cpu"];
    spawn_listening(&[&sim[..], extra].concat())
}

/// The real engine's directory (`CADENCE_REAL_ENGINE`: scripts/test.sh builds the
/// engine there with scripts/real-engine.sh and sets it). The tests that call this are
/// `#[ignore]`d, so a plain `cargo test` lists them as not run; asked for anyway
/// (`--include-ignored`) without the engine, they fail saying how to get it.
#[allow(dead_code)]
pub fn real_engine() -> std::path::PathBuf {
    let dir = std::env::var_os("CADENCE_REAL_ENGINE")
        .map(std::path::PathBuf::from)
        .expect(
            "CADENCE_REAL_ENGINE is not set: this test needs llama-server; scripts/test.sh \
             builds it with scripts/real-engine.sh and sets it",
        );
    for part in ["bin/llama-server", "model/tiny-llama.gguf"] {
        assert!(
            dir.join(part).exists(),
            "CADENCE_REAL_ENGINE={} has no {part} (scripts/real-engine.sh builds it)",
            dir.display()
        );
    }
    dir
}

/// A `llama-server` this test started, killed when dropped.
#[allow(dead_code)]
pub struct LlamaServer(std::process::Child);

impl Drop for LlamaServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The real engine as the twin and calibration tests measure it: `llama-server` from
/// `CADENCE_REAL_ENGINE` on one thread with four continuous-batching slots and a
/// 4,096-token context, its log in `tmp`; the server and its port.
#[allow(dead_code)]
pub fn four_slot_llama_server(tmp: &Path) -> (LlamaServer, u16) {
    llama_server(
        &real_engine(),
        &["-t", "1", "-np", "4", "-c", "4096", "-cb", "--no-webui"],
        &tmp.join("llama-server.log"),
    )
}

/// llama.cpp's `llama-server` from `dir` (scripts/real-engine.sh's layout) serving its
/// tiny model as `tiny-llama` on a free port of 127.0.0.1 with `args`, once its
/// `/health` answers 200, and the port; its log goes to `log`.
#[allow(dead_code)]
pub fn llama_server(dir: &Path, args: &[&str], log: &Path) -> (LlamaServer, u16) {
    use std::io::{Read, Write};
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let child = std::process::Command::new(dir.join("bin/llama-server"))
        .arg("-m")
        .arg(dir.join("model/tiny-llama.gguf"))
        .args(["-a", "tiny-llama", "--host", "127.0.0.1", "--port"])
        .arg(port.to_string())
        .args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::fs::File::create(log).unwrap())
        .spawn()
        .unwrap();
    let server = LlamaServer(child);
    let healthy = || -> Option<bool> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
        s.set_read_timeout(Some(Duration::from_secs(10))).ok()?;
        write!(s, "GET /health HTTP/1.0\r\nHost: x\r\n\r\n").ok()?;
        let mut text = String::new();
        s.read_to_string(&mut text).ok()?;
        Some(text.split(' ').nth(1) == Some("200"))
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while healthy() != Some(true) {
        assert!(
            std::time::Instant::now() < deadline,
            "llama-server did not become healthy"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    (server, port)
}

/// Chromium on `url`, headless, in a throwaway profile (`--disable-background-networking`
/// and friends: this machine's closed network refuses the browser's own calls), killed
/// after 90 s (it can hang on a broken machine). CI installs Debian's `chromium`
/// (`scripts/test.sh`); without it the test fails and says so.
#[allow(dead_code)]
pub fn chromium(url: &str, profile: &Path, args: &[&str]) -> std::process::Output {
    use std::process::{Command, Stdio};
    let bin = ["chromium", "chromium-browser", "google-chrome"]
        .iter()
        .find_map(|name| {
            std::env::split_paths(&std::env::var_os("PATH")?)
                .map(|d| d.join(name))
                .find(|p| p.is_file())
        })
        .expect(
            "this test needs a headless Chromium: install Debian's `chromium` \
             (apt-get install -y --no-install-recommends chromium); scripts/test.sh does this",
        );
    let child = Command::new(bin)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--hide-scrollbars",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("chromium starts");
    let id = child.id();
    let (tx, rx) = std::sync::mpsc::channel::<()>();
    std::thread::spawn(move || {
        if rx.recv_timeout(Duration::from_secs(90)).is_err() {
            let _ = Command::new("kill").arg(id.to_string()).status();
        }
    });
    let out = child.wait_with_output().expect("chromium runs");
    let _ = tx.send(());
    out
}

/// A listener on 127.0.0.1 port 0 handed to `serve` on a one-thread runtime of its own
/// thread (a test's server beside the binary it runs): its address. It serves until
/// the test ends.
#[allow(dead_code)]
pub fn serve_on_own_thread<F, Fut>(serve: F) -> std::net::SocketAddr
where
    F: FnOnce(tokio::net::TcpListener) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()>,
{
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    listener.set_nonblocking(true).unwrap();
    std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async move {
            serve(tokio::net::TcpListener::from_std(listener).unwrap()).await;
        });
    });
    addr
}

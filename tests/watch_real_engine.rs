//! `cadence watch` against a real engine: llama.cpp's `llama-server` (built by
//! `scripts/real-engine.sh`, which `scripts/test.sh` runs and exports as
//! `CADENCE_REAL_ENGINE`), watched through two dialects at once (chat and Anthropic
//! Messages on one port). Every output token the server says it generated for the
//! watcher's probes is in the database, the ITL the probes measured agrees with the
//! server's own time per token, and the API key never reaches the database, the page,
//! `/metrics` or the log. Ignored unless asked for (scripts/test.sh does, with `CADENCE_REAL_ENGINE`).

mod common;

use common::watcher::{get, start_watch};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What the key's variable holds: searched for in everything the watcher leaves.
const KEY: &str = "sk-watch-test-5d1e9c";

/// A series' value from `llama-server`'s `/metrics`.
fn server_metric(port: u16, name: &str) -> f64 {
    let (status, body) = get(&format!("127.0.0.1:{port}"), "/metrics");
    assert_eq!(status, 200, "{body}");
    body.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{body}"))
}

/// Each target's probe count, as the watcher's `/api/targets` has it.
fn probe_counts(addr: &str) -> Vec<(String, u64)> {
    let (status, body) = get(addr, "/api/targets");
    assert_eq!(status, 200, "{body}");
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    v.as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let n = t["hour"]["probes"].as_u64().unwrap_or(0);
            (t["name"].as_str().unwrap().to_string(), n)
        })
        .collect()
}

/// Two targets on one `llama-server`: chat, and Anthropic Messages, each with the key.
fn config(dir: &Path, port: u16) -> PathBuf {
    let path = dir.join("watch.toml");
    std::fs::write(
        &path,
        format!(
            "[probe]\nprompt_tokens = 16\nmax_tokens = 16\nrequests = 2\nconcurrency = 1\n\
             interval = \"3s\"\njitter = \"100ms\"\ndeadline = \"60s\"\n\
             [[target]]\nname = \"llama-chat\"\nurl = \"http://127.0.0.1:{port}/v1\"\n\
             api = \"chat\"\nmodel = \"tiny-llama\"\nkey_env = \"CADENCE_WATCH_TEST_KEY\"\n\
             slo = [\"itl.p99<=10s\"]\n\
             [[target]]\nname = \"llama-messages\"\nurl = \"http://127.0.0.1:{port}/v1\"\n\
             api = \"anthropic\"\nmodel = \"tiny-llama\"\nkey_env = \"CADENCE_WATCH_TEST_KEY\"\n\
             slo = [\"itl.p99<=10s\"]\n"
        ),
    )
    .unwrap();
    path
}

/// Waits for two probes of each target, then a quiet moment: no request in the server,
/// and no probe written while its counters were read, so they count exactly the probes
/// the watcher had written by then. Each target's probe count, and the server's tokens
/// and seconds of generation.
fn quiet_moment(addr: &str, port: u16) -> (Vec<(String, u64)>, f64, f64) {
    let deadline = Instant::now() + Duration::from_secs(240);
    loop {
        assert!(
            Instant::now() < deadline,
            "no quiet moment with 2 probes each"
        );
        let before = probe_counts(addr);
        let busy = server_metric(port, "llamacpp:requests_processing");
        let tokens = server_metric(port, "llamacpp:tokens_predicted_total");
        let seconds = server_metric(port, "llamacpp:tokens_predicted_seconds_total");
        std::thread::sleep(Duration::from_millis(500));
        let after = probe_counts(addr);
        if before.len() == 2
            && before.iter().all(|(_, n)| *n >= 2)
            && busy == 0.0
            && before == after
        {
            break (before, tokens, seconds);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
#[ignore = "needs llama-server (CADENCE_REAL_ENGINE); scripts/test.sh builds it and runs this"]
fn a_watch_of_llama_server_keeps_every_token_it_generated_and_no_key() {
    let dir = common::real_engine();
    let tmp = tempfile::tempdir().unwrap();
    let args = [
        "-t",
        "1",
        "-np",
        "2",
        "-c",
        "2048",
        "-cb",
        "--metrics",
        "--no-webui",
    ];
    let (_server, port) = common::llama_server(&dir, &args, &tmp.path().join("llama.log"));
    let cfg = config(tmp.path(), port);
    // The watcher inherits it (this binary has this one test).
    std::env::set_var("CADENCE_WATCH_TEST_KEY", KEY);
    let tokens_at_start = server_metric(port, "llamacpp:tokens_predicted_total");
    let seconds_at_start = server_metric(port, "llamacpp:tokens_predicted_seconds_total");
    let db = tmp.path().join("w.db");
    let w = start_watch(&cfg, &db, &[]);

    let (counts, tokens, seconds) = quiet_moment(&w.addr, port);
    let page = get(&w.addr, "/").1;
    let metrics = get(&w.addr, "/metrics").1;
    for name in ["llama-chat", "llama-messages"] {
        assert!(page.contains(&format!("/target/{name}")), "{page}");
        let ok = format!("cadence_watch_slo_ok{{target=\"{name}\"}} 1");
        assert!(metrics.contains(&ok), "{metrics}");
    }
    let (status, said) = w.stop();
    assert!(status.success(), "{status:?}: {said}");

    let store = cadence_watch::Store::open_read(&db).unwrap();
    let probes = store.probes(None, 0).unwrap();
    let (mut ours, mut itl_p50s) = (0, Vec::new());
    for (name, n) in &counts {
        let mine: Vec<_> = probes.iter().filter(|p| &p.target == name).collect();
        assert!(
            mine.len() as u64 >= *n,
            "{name}: {} probes kept",
            mine.len()
        );
        for p in &mine[..*n as usize] {
            assert_eq!((p.sent, p.succeeded), (2, 2), "{name}: {p:?}");
            itl_p50s.push(p.itl_p50_ms.expect("an ITL p50"));
            for r in store.requests(p.id).unwrap() {
                ours += r.output_tokens.expect("the server reports usage");
            }
        }
    }
    let server_tokens = (tokens - tokens_at_start).round() as u64;
    assert!(ours > 0, "no output token in the probes");
    assert_eq!(
        ours, server_tokens,
        "the probes' tokens vs the server's count"
    );

    // Decode time per token as the server measured it, against the probes' ITL p50s
    // (their median): the same clock from two sides, within a factor a shared
    // machine cannot blur.
    let server_ms = (seconds - seconds_at_start) * 1e3 / server_tokens as f64;
    let ours_ms = cadence_core::stats::median(itl_p50s).unwrap();
    eprintln!("ITL p50 {ours_ms:.2} ms, the server's {server_ms:.2} ms per token");
    assert!(
        ours_ms > server_ms / 2.0 && ours_ms < server_ms * 2.0,
        "ITL p50 {ours_ms:.2} ms against the server's {server_ms:.2} ms per token"
    );
    assert_eq!(store.integrity_check().unwrap(), "ok");
    drop(store);

    // The key went to the server and nowhere else.
    assert_no_key(
        tmp.path(),
        &[("page", &page), ("metrics", &metrics), ("log", &said)],
    );
}

/// [`KEY`] is in none of the database's files in `dir`, nor in `texts` (what, text).
fn assert_no_key(dir: &Path, texts: &[(&str, &String)]) {
    let leaked = |hay: &[u8]| hay.windows(KEY.len()).any(|w| w == KEY.as_bytes());
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("w.db")
        {
            let bytes = std::fs::read(&path).unwrap();
            assert!(!leaked(&bytes), "the key is in {}", path.display());
        }
    }
    for (what, text) in texts {
        assert!(!text.contains(KEY), "the key is in the {what}");
    }
}

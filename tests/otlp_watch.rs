//! `cadence watch --otlp`: each probe one trace at the collector (its span, each
//! request's span a child whose times are the stored request's), the targets named by
//! their names and no credential sent; a collector that is down costs spans, counted,
//! never the watch's probes or exit code.

mod common;

use common::collector::{collector, sent_to, spans_of};
use common::watcher::{start_watch_env, wait_for_probes};
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const KEY: &str = "sk-watch-0123456789abcdef";
const PASSWORD: &str = "pw-watch-secret";

/// Two targets on `sim` (the second with an API key from the environment and a
/// password in its URL), two requests a probe, a probe each `interval`.
fn config(dir: &Path, sim: &str, interval: &str) -> std::path::PathBuf {
    let with_password = sim.replacen("http://", &format!("http://u:{PASSWORD}@"), 1);
    let target = |name: &str, base: &str, extra: &str| {
        format!(
            "[[target]]\nname = \"{name}\"\nurl = \"{base}/v1/chat/completions\"\nmodel = \"m\"\n{extra}\
             slo = [\"itl.p50<=1s\"]\n[target.probe]\ninterval = \"{interval}\"\njitter = \"0s\"\nrequests = 2\nmax_tokens = 8\n"
        )
    };
    let text =
        target("east", sim, "") + &target("west", &with_password, "key_env = \"WATCH_OTLP_KEY\"\n");
    let path = dir.join("watch.toml");
    std::fs::write(&path, text).unwrap();
    path
}

fn watch_once(cfg: &Path, db: &Path, otlp: &str) -> (Option<i32>, String) {
    let out = common::cadence()
        .arg("watch")
        .arg(cfg)
        .arg("--db")
        .arg(db)
        .args(["--once", "--otlp", otlp, "--otlp-protocol", "http/json"])
        .env("WATCH_OTLP_KEY", KEY)
        .env("OTEL_EXPORTER_OTLP_TIMEOUT", "2000")
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code(), said)
}

fn attr<'a>(span: &'a Value, key: &str) -> Option<&'a Value> {
    let a = span["attributes"].as_array()?;
    a.iter().find(|kv| kv["key"] == key).map(|kv| &kv["value"])
}

fn string<'a>(span: &'a Value, key: &str) -> &'a str {
    attr(span, key)
        .and_then(|v| v["stringValue"].as_str())
        .unwrap_or_default()
}

fn ns(v: &Value) -> u64 {
    v.as_str().unwrap().parse().unwrap()
}

#[test]
fn each_probe_is_a_trace_whose_request_spans_are_its_stored_requests() {
    let (_sim, sim) = common::fast_sim();
    let (url, bodies) = collector(200);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    let (code, said) = watch_once(&config(dir.path(), &sim, "1h"), &db, &url);
    assert_eq!(code, Some(0), "{said}");
    assert!(said.contains("OTLP: 6 spans exported"), "{said}");
    let spans = spans_of(&bodies);
    assert_eq!(
        spans.len(),
        6,
        "two probes of two requests and their own spans"
    );
    let store = cadence_watch::Store::open_read(&db).unwrap();
    let mut traces = std::collections::BTreeSet::new();
    for name in ["east", "west"] {
        let probe = &store.probes(Some(name), 0).unwrap()[0];
        let own = spans
            .iter()
            .find(|s| s["name"] == format!("probe {name}"))
            .unwrap_or_else(|| panic!("probe {name} in {spans:?}"));
        assert!(
            traces.insert(own["traceId"].to_string()),
            "a trace per probe"
        );
        assert_eq!(string(own, "cadence.target"), name);
        let requests = store.requests(probe.id).unwrap();
        let children: Vec<&Value> = spans
            .iter()
            .filter(|s| s["parentSpanId"] == own["spanId"])
            .collect();
        assert_eq!(children.len(), requests.len(), "{name}");
        for s in children {
            assert_eq!(s["traceId"], own["traceId"]);
            assert_eq!(string(s, "cadence.target"), name);
            assert_eq!(string(s, "gen_ai.operation.name"), "chat");
            assert_eq!(string(s, "server.address"), "127.0.0.1");
            let i = ns(&attr(s, "cadence.request.index").unwrap()["intValue"]);
            let row = requests.iter().find(|r| r.idx == i).unwrap();
            let e2e = (ns(&s["endTimeUnixNano"]) - ns(&s["startTimeUnixNano"])) as f64 / 1e6;
            assert!((e2e - row.e2e_ms.unwrap()).abs() < 1e-3, "{e2e} {row:?}");
            let ttft = attr(s, "cadence.ttft_ms").unwrap()["doubleValue"]
                .as_f64()
                .unwrap();
            assert!((ttft - row.ttft_ms.unwrap()).abs() < 1e-3, "{ttft} {row:?}");
        }
    }
    // The metrics: each target its own series, by its name.
    let metrics = sent_to(&bodies, "/v1/metrics");
    assert!(!metrics.is_empty(), "the last export at the end");
    let last = String::from_utf8_lossy(metrics.last().unwrap()).into_owned();
    for name in ["east", "west"] {
        assert!(
            last.contains(&format!("\"stringValue\":\"{name}\"")),
            "{last}"
        );
    }
    // No credential of the second target left the watcher.
    for (_, body) in bodies.lock().unwrap().iter() {
        let text = String::from_utf8_lossy(body);
        assert!(!text.contains(KEY) && !text.contains(PASSWORD), "{text}");
    }
}

#[test]
fn a_collector_that_is_down_costs_spans_not_the_probes_or_the_exit_code() {
    let (_sim, sim) = common::fast_sim();
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}", dead.local_addr().unwrap());
    drop(dead);
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("w.db");
    let (code, said) = watch_once(&config(dir.path(), &sim, "1h"), &db, &url);
    assert_eq!(code, Some(0), "the probes' own verdict: {said}");
    assert!(
        said.contains("2 of 2 target(s) probed, 0 breached"),
        "{said}"
    );
    assert!(said.contains("6 of 6 spans dropped"), "{said}");
    let store = cadence_watch::Store::open_read(&db).unwrap();
    for name in ["east", "west"] {
        let probes = store.probes(Some(name), 0).unwrap();
        assert_eq!(probes.len(), 1, "{name}");
        assert_eq!(probes[0].succeeded, 2, "{name}");
    }
}

#[test]
fn the_watchs_metrics_count_its_exported_and_failed_exports() {
    let (_sim, sim) = common::fast_sim();
    let (url, _) = collector(500);
    let dir = tempfile::tempdir().unwrap();
    let (cfg, db) = (config(dir.path(), &sim, "2s"), dir.path().join("w.db"));
    let flags = ["--otlp", &url, "--otlp-protocol", "http/json"];
    let env = [
        ("WATCH_OTLP_KEY", KEY),
        ("OTEL_METRIC_EXPORT_INTERVAL", "200"),
    ];
    let w = start_watch_env(&cfg, &db, &flags, &env);
    wait_for_probes(&db, None, 2, Duration::from_secs(30));
    // Every probe's 3 spans and every metrics export failed, and each is counted.
    let count = |m: &str, series: &str| -> u64 {
        let line = m.lines().find(|l| l.starts_with(series));
        line.and_then(|l| l.rsplit(' ').next()?.parse().ok())
            .unwrap_or(0)
    };
    let text = w.wait_for("/metrics", Duration::from_secs(10), |m| {
        count(
            m,
            "cadence_watch_otlp_spans_total{result=\"dropped_failed\"}",
        ) >= 6
            && count(
                m,
                "cadence_watch_otlp_metric_exports_total{result=\"failed\"}",
            ) >= 1
    });
    assert!(
        text.contains("cadence_watch_otlp_spans_total{result=\"exported\"} 0"),
        "{text}"
    );
    let (status, _) = w.stop();
    assert!(status.success());
}

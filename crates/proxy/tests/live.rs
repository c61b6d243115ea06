//! Records, `/stats` and alerts on real traffic through the proxy: the records file
//! is what `cadence` reads back, `/stats` percentiles equal core's summary of those
//! records, and alert transitions reach a webhook.

mod common;

use axum::routing::post;
use cadence_core::{summarize_level, LevelOptions, Outcome, RecordSource, RequestRecord};
use common::*;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[test]
fn the_default_run_target_is_the_upstream_with_its_credentials_masked() {
    let up = cadence_proxy::parse_upstream("https://user:PASS1234@h.example:8443/v1").unwrap();
    let c = cadence_proxy::ProxyConfig::new(LOCAL.parse().unwrap(), up);
    assert_eq!(c.run.target, "https://[REDACTED]@h.example:8443/v1");
    assert!(c.run.command.is_empty(), "no process arguments are read");
}

/// 20 records, one per request and indexed 0..20: 16 succeeded with 8 chunks each,
/// keep-alives counted and their instants in order; 4 stream errors.
fn check_twenty_records(recs: &[RequestRecord]) {
    assert_eq!(recs.len(), 20);
    let ok: Vec<_> = recs
        .iter()
        .filter(|r| r.outcome == Outcome::Succeeded)
        .collect();
    assert_eq!(ok.len(), 16);
    assert_eq!(
        recs.iter()
            .filter(|r| r.outcome == Outcome::StreamError)
            .count(),
        4
    );
    for r in &ok {
        assert_eq!(r.source, RecordSource::Proxy);
        assert_eq!(r.chunks.len(), 8);
        assert_eq!(r.output_token_count().count, 8);
        assert!(r.counters.keepalives > 0);
        let (s, h, f, e) = (
            r.sent_ns.unwrap(),
            r.headers_ns.unwrap(),
            r.first_chunk_ns().unwrap(),
            r.end_ns.unwrap(),
        );
        assert!(s <= h && h <= f && f <= e, "{r:?}");
        assert_eq!(r.http_status, Some(200));
    }
    let mut idx: Vec<u64> = recs.iter().map(|r| r.index).collect();
    idx.sort();
    assert_eq!(
        idx,
        (0..20).collect::<Vec<_>>(),
        "one record per request, indexed"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_and_stats_agree_with_core_on_the_same_requests() {
    let s = sim(fast_sim_config()).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.jsonl");
    let command: Vec<String> = ["cadence", "proxy", "--upstream", "as-the-caller-says"]
        .map(String::from)
        .to_vec();
    let given = command.clone();
    let p = proxy(&s.url(), |c| {
        c.records = Some(records_in(dir.path(), "live.jsonl", 2));
        c.run.command = given;
    })
    .await;
    let c = client();
    let url = format!("{}/v1/chat/completions", p.url());
    let mut tasks = Vec::new();
    for i in 0..20 {
        let (c, url) = (c.clone(), url.clone());
        tasks.push(tokio::spawn(async move {
            let fault = if i % 5 == 4 {
                "error_after_tokens"
            } else {
                "keepalive"
            };
            fetch(
                &c,
                "POST",
                &url,
                &[("x-cadence-fault", fault)],
                &chat_body(8, true),
            )
            .await
        }));
    }
    for t in tasks {
        assert_eq!(t.await.unwrap().status, 200);
    }
    // A client can see the end of its body a moment before the proxy has finished
    // the record: wait for all 20.
    let mut stats = serde_json::Value::Null;
    for _ in 0..100 {
        let url = format!("http://{}/stats", p.metrics_addr.unwrap());
        stats = serde_json::from_str(&get_text(&url).await).unwrap();
        if stats["windows"][0]["requests"]["sent"] == 20 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    p.shutdown().await.unwrap();

    let text = std::fs::read_to_string(&path).unwrap();
    let (file, cut) = cadence_core::runlog::parse_records_file(&text).unwrap();
    assert!(!cut);
    // The level and run lines make the file a complete `cadence report` source.
    let run = file.run.expect("a run line at shutdown");
    assert_eq!(run.run.mode, "proxy");
    assert_eq!(run.run.target, s.url() + "/");
    // The command line is the caller's, not the test process's arguments.
    assert_eq!(run.run.command, command);
    assert_eq!(file.levels.len(), 1);
    let recs: Vec<RequestRecord> = file.records;
    check_twenty_records(&recs);

    // /stats' 1-minute window holds all 20 (they ended within it): exactly core's
    // summary of the same records.
    let w = &stats["windows"][0];
    assert_eq!(w["window_s"], 60.0);
    assert_eq!(w["requests"]["sent"], 20);
    assert_eq!(w["requests"]["succeeded"], 16);
    let core = summarize_level(&recs, &LevelOptions::default());
    let itl = core.itl.unwrap();
    assert_eq!(w["itl"]["count"], itl.count);
    // Equal up to JSON's decimal round trip (serde_json parses floats to within 1 ulp).
    let same = |a: &serde_json::Value, b: f64| {
        let a = a.as_f64().unwrap();
        assert!((a - b).abs() <= 1e-12 * b.abs(), "{a} vs {b}");
    };
    same(&w["itl"]["p50_ms"], itl.p50);
    same(&w["itl"]["p99_ms"], itl.p99);
    same(&w["ttft"]["p90_ms"], core.ttft.unwrap().p90);
    assert_eq!(stats["windows"][1]["window_s"], 300.0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn alert_fires_and_resolves_with_webhook_posts() {
    let got: Arc<Mutex<Vec<serde_json::Value>>> = Arc::default();
    let g = got.clone();
    let app = axum::Router::new().route(
        "/hook",
        post(move |axum::Json(v): axum::Json<serde_json::Value>| {
            let g = g.clone();
            async move {
                g.lock().unwrap().push(v);
                "ok"
            }
        }),
    );
    let l = tokio::net::TcpListener::bind(LOCAL).await.unwrap();
    let hook = format!("http://{}/hook", l.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(l, app).await });

    // ITL is 20 ms; the rule fires above 5 ms over a 1 s window.
    let s = sim(cadence_sim::SimConfig {
        itl: cadence_sim::Dist::Fixed(Duration::from_millis(20)),
        ..fast_sim_config()
    })
    .await;
    let p = proxy(&s.url(), |c| {
        c.alerts = vec![
            "itl.p50>5ms over 1s".parse().unwrap(),
            "itl.p50>500ms".parse().unwrap(),
        ];
        c.alert_webhook = Some(hook.parse().unwrap());
        c.alert_interval = Duration::from_millis(50);
    })
    .await;
    let c = client();
    let r = fetch(
        &c,
        "POST",
        &format!("{}/v1/chat/completions", p.url()),
        &[],
        &chat_body(6, true),
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(
        eventually(Duration::from_secs(3), || !got.lock().unwrap().is_empty()).await,
        "no firing post"
    );
    let stats = get_text(&format!("http://{}/stats", p.metrics_addr.unwrap())).await;
    assert!(
        stats.contains(r#""alert":"itl.p50>5ms over 1s","state":"firing""#),
        "{stats}"
    );
    assert!(
        stats.contains(r#""alert":"itl.p50>500ms","state":"inactive""#),
        "{stats}"
    );
    // With no traffic the 1 s window empties and the alert resolves.
    assert!(
        eventually(Duration::from_secs(4), || got.lock().unwrap().len() >= 2).await,
        "no resolved post"
    );
    let posts = got.lock().unwrap().clone();
    assert_eq!(posts.len(), 2, "{posts:?}");
    assert_eq!(posts[0]["alert"], "itl.p50>5ms over 1s");
    assert_eq!(posts[0]["status"], "firing");
    let v = posts[0]["value"].as_f64().unwrap();
    assert!(
        (5.0..60.0).contains(&v),
        "p50 ITL {v} ms for a 20 ms cadence"
    );
    assert_eq!(posts[0]["bound"], 5.0);
    assert_eq!(posts[0]["unit"], "ms");
    assert_eq!(posts[1]["status"], "resolved");
    assert!(posts[1]["value"].is_null());
    p.shutdown().await.unwrap();
}

/// The proxy watches its own event loop: a stall of the runtime it runs on shows in
/// `/stats` (`self_check`) and in `cadence_proxy_loop_lag_seconds`, so figures taken
/// while the proxy itself was starved can be told apart from a slow upstream.
#[tokio::test]
async fn a_stalled_proxy_runtime_shows_in_its_self_check() {
    let p = proxy("http://127.0.0.1:9", |_| {}).await;
    tokio::time::sleep(Duration::from_millis(30)).await;
    // This test's runtime has one thread, the proxy's too: block it.
    std::thread::sleep(Duration::from_millis(80));
    tokio::time::sleep(Duration::from_millis(30)).await;

    let stats = p.stats();
    let minute = &stats["self_check"]["loop_lag"][0];
    assert_eq!(minute["window_s"], 60.0);
    assert!(minute["ticks"].as_u64().unwrap() >= 3, "{minute}");
    assert!(minute["max_ms"].as_f64().unwrap() >= 60.0, "{minute}");
    assert!(minute["over_10ms"].as_u64().unwrap() >= 1, "{minute}");

    let text = get_text(&format!("http://{}/metrics", p.metrics_addr.unwrap())).await;
    let value = |prefix: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {prefix} in\n{text}"))
    };
    let count = value("cadence_proxy_loop_lag_seconds_count ");
    let under_50ms = value("cadence_proxy_loop_lag_seconds_bucket{le=\"0.05\"} ");
    assert!(count >= 3.0);
    assert!(
        under_50ms <= count - 1.0,
        "the stall is above 50 ms: {text}"
    );
    p.shutdown().await.unwrap();
}

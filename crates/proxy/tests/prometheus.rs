//! A real Prometheus server (Debian package `prometheus`; `scripts/test.sh` installs it)
//! scrapes the proxy on loopback; `histogram_quantile` over the proxy's ITL histogram,
//! asked through Prometheus' HTTP API, must agree with the exact quantiles of the
//! proxy's own records within a bucket. The Grafana dashboard's queries must run too.

mod common;

use cadence_core::{Outcome, RequestRecord};
use cadence_proxy::metrics::buckets_with;
use common::*;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

struct Prom(Child);
impl Drop for Prom {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind(LOCAL)
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn query(prom: &str, q: &str) -> serde_json::Value {
    let f = fetch(
        &client(),
        "GET",
        &format!(
            "{prom}/api/v1/query?query={}",
            percent_encoding::utf8_percent_encode(q, percent_encoding::NON_ALPHANUMERIC)
        ),
        &[],
        "",
    )
    .await;
    serde_json::from_str(&f.text()).unwrap_or_else(|_| panic!("{q}: {}", f.text()))
}

/// The single value of an instant-vector answer, if there is exactly one series.
fn scalar(v: &serde_json::Value) -> Option<f64> {
    let r = v["data"]["result"].as_array()?;
    if r.len() != 1 {
        return None;
    }
    r[0]["value"][1].as_str()?.parse().ok()
}

/// Type-7 quantile of sorted samples (core's rule).
fn exact(sorted: &[f64], p: f64) -> f64 {
    cadence_core::stats::quantile_sorted(sorted, p).unwrap()
}

/// The Prometheus binary (`PROMETHEUS`, else `prometheus` on PATH); a clear failure
/// without one.
fn prometheus_binary() -> String {
    let bin = std::env::var("PROMETHEUS").unwrap_or_else(|_| "prometheus".into());
    let found = Command::new(&bin)
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    assert!(
        found.is_ok_and(|s| s.success()),
        "the `prometheus` binary is needed for this test and was not found on PATH: install the \
         Debian package (`apt-get install -y --no-install-recommends prometheus`, as scripts/test.sh \
         does) or set PROMETHEUS=/path/to/prometheus"
    );
    bin
}

/// A Prometheus scraping `metrics_addr` every second, its data in `dir`: the process
/// (stopped when dropped) and its URL.
fn start_prometheus(
    bin: &str,
    dir: &std::path::Path,
    metrics_addr: std::net::SocketAddr,
) -> (Prom, String) {
    let port = free_port();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  - job_name: cadence\n    static_configs:\n      - targets: ['{metrics_addr}']\n"
        ),
    )
    .unwrap();
    let prom_log = std::fs::File::create(dir.join("prometheus.log")).unwrap();
    let child = Command::new(bin)
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(prom_log)
        .spawn()
        .expect("start prometheus");
    (Prom(child), format!("http://127.0.0.1:{port}"))
}

/// `histogram_quantile` over the proxy's ITL histogram, asked of Prometheus, lands in
/// the bucket of the exact quantile of the records' gaps (`sorted`, seconds), or the next.
async fn check_itl_quantiles(prom: &str, sorted: &[f64]) {
    let bounds = buckets_with(&[]);
    let bucket = |x: f64| bounds.iter().position(|b| x <= *b).unwrap_or(bounds.len());
    for q in [0.5, 0.9, 0.99] {
        let v = query(
            prom,
            &format!("histogram_quantile({q}, sum by (le) (cadence_itl_seconds_bucket))"),
        )
        .await;
        let estimate = scalar(&v).unwrap_or_else(|| panic!("no answer for q={q}: {v}"));
        let truth = exact(sorted, q);
        let (bi, bt) = (bucket(estimate), bucket(truth));
        assert!(
            bi.abs_diff(bt) <= 1 && bi.min(bt) > 0,
            "q={q}: Prometheus {estimate:.4} s (bucket {bi}) vs records {truth:.4} s (bucket {bt})"
        );
        // Within a bucket: no further apart than the wider of the two buckets.
        let width = |i: usize| bounds[i.min(bounds.len() - 1)] - bounds[i.saturating_sub(1)];
        assert!(
            (estimate - truth).abs() <= width(bi).max(width(bt)),
            "q={q}: Prometheus {estimate:.4} s vs records {truth:.4} s"
        );
    }
}

/// Every query of the Grafana dashboard runs against this Prometheus.
async fn check_dashboard_queries(prom: &str) {
    let dash: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../deploy/grafana/cadence-dashboard.json"
        ))
        .unwrap(),
    )
    .unwrap();
    let mut n = 0;
    for panel in dash["panels"].as_array().unwrap() {
        for t in panel["targets"].as_array().unwrap() {
            let expr = t["expr"]
                .as_str()
                .unwrap()
                .replace("$__rate_interval", "1m")
                .replace("$model", ".*")
                .replace("$route", ".*");
            let v = query(prom, &expr).await;
            assert_eq!(v["status"], "success", "{expr}: {v}");
            n += 1;
        }
    }
    assert!(n >= 10);
}

/// Traffic: 40 streams of 30 tokens, 10 at a time, to `url`.
async fn send_forty_streams(url: &str) {
    let c = client();
    for _ in 0..4 {
        let mut batch = Vec::new();
        for _ in 0..10 {
            let (c, url) = (c.clone(), url.to_string());
            batch.push(tokio::spawn(async move {
                fetch(&c, "POST", &url, &[], &chat_body(30, true)).await
            }));
        }
        for b in batch {
            assert_eq!(b.await.unwrap().status, 200);
        }
    }
}

/// Waits until Prometheus has scraped every one of `want` gaps (its log, in `dir`, said
/// when it never does).
async fn wait_for_scrapes(prom: &str, want: f64, dir: &std::path::Path) {
    let mut seen = None;
    for _ in 0..300 {
        if let Ok(v) = tokio::time::timeout(
            Duration::from_secs(2),
            query(prom, "sum(cadence_itl_seconds_count)"),
        )
        .await
        {
            seen = scalar(&v);
            if seen == Some(want) {
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = std::fs::read_to_string(dir.join("prometheus.log")).unwrap_or_default();
    assert_eq!(
        seen,
        Some(want),
        "Prometheus never saw all {want} gaps; its log:\n{log}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Prometheus; scripts/test.sh installs it and runs this"]
async fn real_prometheus_histogram_quantile_agrees_with_the_records() {
    let bin = prometheus_binary();

    // A spread of ITLs (2–60 ms) so the quantiles fall in different buckets.
    let s = sim(cadence_sim::SimConfig {
        seed: 11,
        ttft: cadence_sim::Dist::Uniform(Duration::from_millis(5), Duration::from_millis(80)),
        itl: cadence_sim::Dist::Uniform(Duration::from_millis(2), Duration::from_millis(60)),
        ..fast_sim_config()
    })
    .await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("live.jsonl");
    let p = proxy(&s.url(), |c| {
        c.records = Some(records_in(dir.path(), "live.jsonl", 1));
        c.models = vec!["cadence-sim".into()];
    })
    .await;
    let metrics_addr = p.metrics_addr.unwrap();

    let (_prom, prom) = start_prometheus(&bin, dir.path(), metrics_addr);

    send_forty_streams(&format!("{}/v1/chat/completions", p.url())).await;

    // The gaps the proxy measured: every one of the 40 × 29, except any the proxy spent
    // waiting on this test's client (core's `client_wait_before`: a loaded machine can
    // make the test's own reads late, and those gaps measure the client, not the server).
    let mut stats = p.stats();
    for _ in 0..100 {
        if stats["windows"][0]["requests"]["sent"] == 40 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        stats = p.stats();
    }
    let want = stats["windows"][0]["itl"]["count"].as_f64().unwrap();
    assert!(
        (40.0 * 29.0 - 40.0..=40.0 * 29.0).contains(&want),
        "the proxy measured {want} of 1,160 gaps"
    );
    wait_for_scrapes(&prom, want, dir.path()).await;

    p.shutdown().await.unwrap();
    let text = std::fs::read_to_string(&path).unwrap();
    let recs: Vec<RequestRecord> = cadence_core::runlog::parse_records_file(&text)
        .unwrap()
        .0
        .records;
    assert_eq!(recs.len(), 40);
    let mut bad = 0;
    let mut gaps: Vec<f64> = recs
        .iter()
        .filter(|r| r.outcome == Outcome::Succeeded)
        .flat_map(|r| {
            cadence_core::per_request::itl_gaps(r, &mut bad)
                .map(|(g, _)| g as f64 / 1e9)
                .collect::<Vec<_>>()
        })
        .collect();
    gaps.sort_by(f64::total_cmp);
    assert_eq!((gaps.len() as f64, bad), (want, 0));

    check_itl_quantiles(&prom, &gaps).await;
    // Labels made it through: the allow-listed model and the route.
    let v = query(
        &prom,
        r#"sum(cadence_requests_total{model="cadence-sim",route="chat",outcome="succeeded"})"#,
    )
    .await;
    assert_eq!(scalar(&v), Some(40.0));

    check_dashboard_queries(&prom).await;
}

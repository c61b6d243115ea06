//! What one page load costs in memory with a week of probes at one a second (604,800
//! rows): a measurement, run by hand, whose figures FAULTS 149 quotes.

use cadence_watch::board::TargetInfo;
use cadence_watch::conn::PageLimits;
use cadence_watch::metrics::Metrics;
use cadence_watch::probe::now_ms;
use cadence_watch::store::ProbeRow;
use cadence_watch::web::{serve, PageState};
use cadence_watch::Store;
use std::collections::BTreeMap;
use std::sync::Arc;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const WEEK_S: i64 = 7 * 86_400;

fn vm(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with(key)).unwrap();
    line.split_whitespace()
        .nth(1)
        .unwrap()
        .parse::<u64>()
        .unwrap()
        / 1024
}

/// A week of probes of target `a`, one a second, every fourth breaching, each with the
/// texts a real probe keeps (its checks in words, failures by class, its clock).
fn week_store(db: &std::path::Path, now: i64) {
    let mut s = Store::open(db).unwrap();
    let p = ProbeRow {
        id: 0,
        target: "a".into(),
        started_ms: now,
        ended_ms: now + 500,
        sent: 4,
        succeeded: 3,
        failed: 1,
        aborted: 0,
        failed_by_class: BTreeMap::from([("http_5xx".to_string(), 1)]),
        ttft_p50_ms: Some(20.0),
        ttft_p99_ms: Some(30.0),
        itl_p50_ms: Some(5.0),
        itl_p99_ms: Some(12.0),
        output_tok_s: Some(150.0),
        slo_ok: false,
        slo_detail: vec![
            "ttft.p50<=800ms: 20.000 ms ok".into(),
            "itl.p50<=30ms: 5.000 ms ok".into(),
            "itl.p99<=10ms: 12.000 ms BREACH".into(),
        ],
        clock: Some("kernel".into()),
        read_delay_p99_ms: Some(0.05),
        loop_lag_p99_ms: Some(0.2),
        merged_reads: Some(0),
    };
    s.insert_probe(&p, &[]).unwrap();
    drop(s);
    let c = rusqlite::Connection::open(db).unwrap();
    let cols: Vec<String> = c
        .prepare("SELECT name FROM pragma_table_info('probes') WHERE name NOT IN ('id', 'started_ms', 'ended_ms', 'slo_ok')")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let cols = cols.join(", ");
    c.execute(
        &format!(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < {WEEK_S} - 1) \
             INSERT INTO probes (started_ms, ended_ms, slo_ok, {cols}) \
             SELECT {now} - i * 1000, {now} - i * 1000 + 500, i % 4 != 1, {cols} FROM probes, n WHERE id = 1"
        ),
        [],
    )
    .unwrap();
}

async fn get(addr: std::net::SocketAddr, path: &str) -> usize {
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(format!("GET {path} HTTP/1.0\r\n\r\n").as_bytes())
        .await
        .unwrap();
    let mut body = Vec::new();
    s.read_to_end(&mut body).await.unwrap();
    assert!(
        body.starts_with(b"HTTP/1.0 200"),
        "{path}: {:?}",
        String::from_utf8_lossy(&body[..body.len().min(300)])
    );
    body.len()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, ~1 min: cargo test -p cadence-watch --test page_memory -- --ignored --nocapture"]
async fn memory_per_page_load_with_a_week_of_probes() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("week.db");
    let now = now_ms();
    week_store(&db, now);
    let state = Arc::new(PageState::Watcher {
        db,
        targets: vec![TargetInfo {
            name: "a".into(),
            url: "http://127.0.0.1:1/v1/chat/completions".into(),
            slos: vec!["itl.p99<=10ms".into()],
            interval_s: 1.0,
        }],
        metrics: Arc::new(Metrics::new()),
        remote: None,
    });
    // The page's idle bound aside: a load that computes for more than 10 s is closed
    // by it, and this measures what the load takes.
    let limits = PageLimits {
        idle: std::time::Duration::from_secs(600),
        ..PageLimits::default()
    };
    let page = serve("127.0.0.1:0".parse().unwrap(), state, limits)
        .await
        .unwrap();
    for path in ["/target/a", "/", "/api/targets"] {
        // Writing 5 to clear_refs resets the peak (VmHWM) to what is resident now.
        std::fs::write("/proc/self/clear_refs", "5").unwrap();
        let before = vm("VmRSS:");
        let started = std::time::Instant::now();
        let bytes = get(page.addr, path).await;
        let peak = vm("VmHWM:");
        println!(
            "{path}: {bytes} bytes in {:.2} s, peak RSS {peak} MiB, {} MiB over the {before} MiB before",
            started.elapsed().as_secs_f64(),
            peak.saturating_sub(before)
        );
    }
}

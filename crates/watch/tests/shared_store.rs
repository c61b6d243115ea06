//! The shared store against a real PostgreSQL server (scripts/postgres.sh starts one;
//! scripts/test.sh exports its address as CADENCE_TEST_POSTGRES). Each test makes its
//! own database; the tests that need the server are ignored unless asked for, as
//! scripts/test.sh does.

use cadence_watch::board::TargetInfo;
use cadence_watch::shared::ShipState;
use cadence_watch::shared::{SharedConfig, SharedError};
use cadence_watch::shipper::Shipper;
use cadence_watch::store::{ProbeRow, RequestRow};
use cadence_watch::Store;
use std::collections::BTreeMap;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

/// A fresh database on the test server (`CADENCE_TEST_POSTGRES`), as a connection
/// string. The tests that call this are `#[ignore]`d; asked for without a server, they
/// fail saying how to get one.
async fn database(name: &str) -> String {
    let admin = std::env::var("CADENCE_TEST_POSTGRES")
        .expect("CADENCE_TEST_POSTGRES is not set: scripts/test.sh starts a server and sets it");
    let (client, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
        .await
        .expect("the test server answers");
    tokio::spawn(conn);
    let db = format!("watch_{}_{name}", std::process::id());
    for sql in [
        format!("DROP DATABASE IF EXISTS {db}"),
        format!("CREATE DATABASE {db}"),
    ] {
        client.batch_execute(&sql).await.unwrap();
    }
    format!("{admin} dbname={db}")
}

fn probe(target: &str, started_ms: i64, ok: bool) -> ProbeRow {
    ProbeRow {
        id: 0,
        target: target.into(),
        started_ms,
        ended_ms: started_ms + 400,
        sent: 2,
        succeeded: if ok { 2 } else { 1 },
        failed: u64::from(!ok),
        aborted: 0,
        failed_by_class: if ok {
            BTreeMap::new()
        } else {
            BTreeMap::from([("http_5xx".to_string(), 1)])
        },
        ttft_p50_ms: Some(21.5),
        ttft_p99_ms: Some(30.0),
        itl_p50_ms: Some(if ok { 10.0 } else { 20.0 }),
        itl_p99_ms: Some(14.0),
        output_tok_s: Some(95.0),
        slo_ok: ok,
        slo_detail: vec!["itl.p50<=15ms: 10.000 ms ok".into()],
        clock: Some("kernel".into()),
        read_delay_p99_ms: Some(0.04),
        loop_lag_p99_ms: None,
        merged_reads: Some(2),
    }
}

fn req(idx: u64) -> RequestRow {
    RequestRow {
        idx,
        outcome: "succeeded".into(),
        ttft_ms: Some(21.0),
        e2e_ms: Some(180.0),
        chunks: 16,
        output_tokens: Some(16),
        itl_p50_ms: Some(10.0),
        itl_max_ms: None,
    }
}

/// Every probe in the store as (vantage, start), in time order.
async fn stored(s: &cadence_watch::shared::SharedStore) -> Vec<(String, i64)> {
    s.probes(None, 0)
        .await
        .unwrap()
        .into_iter()
        .map(|p| (p.vantage, p.probe.started_ms))
        .collect()
}

fn target(name: &str) -> TargetInfo {
    TargetInfo {
        name: name.into(),
        url: "http://127.0.0.1:1/v1/chat/completions".into(),
        slos: vec!["itl.p50<=15ms".into()],
        interval_s: 60.0,
    }
}

#[tokio::test]
#[ignore = "needs PostgreSQL (CADENCE_TEST_POSTGRES); scripts/test.sh starts one and runs this"]
async fn probes_of_two_vantages_are_kept_once_each_and_read_back() {
    let addr = database("two").await;
    let config = SharedConfig::new(&addr, None).unwrap();
    // Two watchers creating the schema at once: one creates it, the other finds it.
    let (a, b) = tokio::join!(config.connect(), config.connect());
    let (mut east, mut west) = (a.unwrap(), b.unwrap());
    east.announce("east", &[target("api")], 1_000)
        .await
        .unwrap();
    west.announce("west", &[target("api"), target("other")], 1_000)
        .await
        .unwrap();
    let batch = vec![
        (probe("api", 10_000, true), vec![req(0), req(1)]),
        (probe("api", 20_000, false), vec![req(0)]),
    ];
    assert_eq!(east.push("east", &batch).await.unwrap(), 2);
    // Shipped again (a crash between the two commits): kept once.
    assert_eq!(east.push("east", &batch).await.unwrap(), 0);
    // The same target at the same instant from another vantage is another probe.
    assert_eq!(
        west.push("west", &[(probe("api", 10_000, true), vec![req(0)])])
            .await
            .unwrap(),
        1
    );
    let all = east.probes(Some("api"), 0).await.unwrap();
    let seen: Vec<(&str, i64)> = all
        .iter()
        .map(|p| (p.vantage.as_str(), p.probe.started_ms))
        .collect();
    assert_eq!(
        seen,
        vec![("east", 10_000), ("west", 10_000), ("east", 20_000)]
    );
    let back = &all[2].probe;
    assert_eq!(
        back,
        &ProbeRow {
            id: back.id,
            ..probe("api", 20_000, false)
        }
    );
    assert_eq!(
        east.requests(all[0].probe.id).await.unwrap(),
        vec![req(0), req(1)]
    );
    assert_eq!(east.probes(None, 15_000).await.unwrap().len(), 1);

    let v = west.vantages().await.unwrap();
    let names: Vec<(&str, usize, Option<i64>)> = v
        .iter()
        .map(|v| (v.name.as_str(), v.targets.len(), v.last_probe_ms))
        .collect();
    assert_eq!(
        names,
        vec![("east", 1, Some(20_000)), ("west", 2, Some(10_000))]
    );

    // Retention is per vantage: east's cutoff leaves west's probe alone, and takes the
    // requests with the probes.
    assert_eq!(east.retain("east", 15_000).await.unwrap(), 1);
    let left = stored(&east).await;
    assert_eq!(
        left,
        vec![("west".to_string(), 10_000), ("east".to_string(), 20_000)]
    );
    assert!(east.requests(all[0].probe.id).await.unwrap().is_empty());
}

#[tokio::test]
#[ignore = "needs PostgreSQL (CADENCE_TEST_POSTGRES); scripts/test.sh starts one and runs this"]
async fn the_hubs_retention_deletes_old_probes_of_every_vantage_and_forgets_retired_ones() {
    let addr = database("hubretain").await;
    let mut s = SharedConfig::new(&addr, None)
        .unwrap()
        .connect()
        .await
        .unwrap();
    s.announce("retired", &[target("api")], 1_000)
        .await
        .unwrap();
    s.announce("live", &[target("api")], 50_000).await.unwrap();
    s.push("retired", &[(probe("api", 2_000, true), vec![req(0)])])
        .await
        .unwrap();
    s.push("live", &[(probe("api", 3_000, true), vec![])])
        .await
        .unwrap();
    s.push("live", &[(probe("api", 60_000, true), vec![])])
        .await
        .unwrap();
    assert_eq!(s.retain_all(10_000).await.unwrap(), 2);
    let left = stored(&s).await;
    assert_eq!(left, vec![("live".to_string(), 60_000)]);
    let names: Vec<String> = s
        .vantages()
        .await
        .unwrap()
        .into_iter()
        .map(|v| v.name)
        .collect();
    assert_eq!(
        names,
        vec!["live".to_string()],
        "the retired vantage is forgotten"
    );
}

/// TLS, as hosted stores require it: the test server's TCP port takes TLS only
/// (`CADENCE_TEST_POSTGRES_TLS`, `sslmode=require`), its certificate signed by a CA of
/// its own (`CADENCE_TEST_POSTGRES_CA`).
#[tokio::test]
#[ignore = "needs PostgreSQL (CADENCE_TEST_POSTGRES); scripts/test.sh starts one and runs this"]
async fn tls_to_the_store_checks_its_certificate_against_the_given_ca() {
    let tls = std::env::var("CADENCE_TEST_POSTGRES_TLS")
        .expect("CADENCE_TEST_POSTGRES_TLS is not set: scripts/test.sh sets it");
    let ca = std::env::var("CADENCE_TEST_POSTGRES_CA")
        .expect("CADENCE_TEST_POSTGRES_CA is not set: scripts/test.sh sets it");
    let ca = std::path::PathBuf::from(ca);
    let store = SharedConfig::with_ca(&tls, None, Some(&ca))
        .unwrap()
        .connect()
        .await
        .expect("TLS with the CA");
    assert!(store.vantages().await.is_ok());
    // Without the CA, the server's certificate is from no known issuer: refused.
    let e = SharedConfig::new(&tls, None)
        .unwrap()
        .connect()
        .await
        .unwrap_err();
    assert!(e.to_string().to_lowercase().contains("certificate"), "{e}");
    // A file with no certificate in it is an error that names it.
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.pem");
    std::fs::write(&empty, "not a certificate\n").unwrap();
    let e = SharedConfig::with_ca(&tls, None, Some(&empty)).unwrap_err();
    assert!(e.to_string().contains("empty.pem"), "{e}");
}

#[tokio::test]
#[ignore = "needs PostgreSQL (CADENCE_TEST_POSTGRES); scripts/test.sh starts one and runs this"]
async fn a_newer_shared_schema_is_refused_with_both_versions() {
    let addr = database("newer").await;
    let config = SharedConfig::new(&addr, None).unwrap();
    drop(config.connect().await.unwrap());
    let (client, conn) = tokio_postgres::connect(&addr, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
        .batch_execute("INSERT INTO watch_schema (version) VALUES (99)")
        .await
        .unwrap();
    let e = config.connect().await.unwrap_err();
    assert!(matches!(e, SharedError::Newer { found: 99, .. }), "{e}");
}

#[tokio::test]
async fn an_unreachable_store_is_an_error_naming_it_without_the_password() {
    let dir = tempfile::tempdir().unwrap();
    let addr = format!(
        "host={} user=cadence password=s3cret dbname=x connect_timeout=2",
        dir.path().display()
    );
    let e = SharedConfig::new(&addr, None)
        .unwrap()
        .connect()
        .await
        .unwrap_err();
    let text = e.to_string();
    assert!(text.contains(&dir.path().display().to_string()), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
}

/// The outbox: probes written while the shared store is unreachable wait in the local
/// file, and go when it answers; nothing is lost or doubled.
#[tokio::test]
#[ignore = "needs PostgreSQL (CADENCE_TEST_POSTGRES); scripts/test.sh starts one and runs this"]
async fn the_shipper_holds_probes_while_the_store_is_away_and_ships_them_after() {
    let addr = database("ship").await;
    let dir = tempfile::tempdir().unwrap();
    let mut local = Store::open(&dir.path().join("w.db")).unwrap();
    for i in 0..3 {
        local
            .insert_probe(&probe("api", 1_000 + i, true), &[req(0)])
            .unwrap();
    }
    let run = |address: &str, outbox: Store| {
        let shipper = Shipper {
            config: SharedConfig::new(address, None).unwrap(),
            vantage: "east".into(),
            targets: vec![target("api")],
            retain: Duration::from_secs(365 * 86_400),
            verbose: false,
        };
        let state = Arc::new(ShipState::default());
        let wake = Arc::new(tokio::sync::Notify::new());
        let (stop_tx, stop_rx) = tokio::sync::watch::channel(false);
        let task = tokio::spawn(shipper.run(outbox, state.clone(), wake.clone(), stop_rx));
        (state, wake, stop_tx, task)
    };
    // Away: a socket directory with no server in it.
    let away = format!("host={} user=cadence dbname=x", dir.path().display());
    let (state, _wake, stop, task) = run(&away, local.companion().unwrap());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while state.last_error().is_none() {
        assert!(tokio::time::Instant::now() < deadline, "no failure seen");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(!state.up.load(Ordering::Relaxed));
    assert_eq!(state.pending.load(Ordering::Relaxed), 3);
    stop.send(true).unwrap();
    task.await.unwrap();
    assert_eq!(local.pending().unwrap(), 3);

    // Back: everything goes, then a new probe goes when the shipper is woken.
    let (state, wake, stop, task) = run(&addr, local.companion().unwrap());
    let wait_for = |n: u64| {
        let state = state.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while state.shipped.load(Ordering::Relaxed) < n
                || state.pending.load(Ordering::Relaxed) > 0
            {
                assert!(tokio::time::Instant::now() < deadline, "not shipped");
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    };
    wait_for(3).await;
    local
        .insert_probe(&probe("api", 9_000, false), &[req(0), req(1)])
        .unwrap();
    wake.notify_one();
    wait_for(4).await;
    assert!(state.up.load(Ordering::Relaxed));
    // A probe written just before the stop, with no wake: the last round ships it.
    local
        .insert_probe(&probe("api", 9_500, true), &[req(0)])
        .unwrap();
    stop.send(true).unwrap();
    task.await.unwrap();
    assert_eq!(local.pending().unwrap(), 0);
    let shared = SharedConfig::new(&addr, None)
        .unwrap()
        .connect()
        .await
        .unwrap();
    let there = shared.probes(None, 0).await.unwrap();
    let starts: Vec<i64> = there.iter().map(|p| p.probe.started_ms).collect();
    assert_eq!(starts, vec![1_000, 1_001, 1_002, 9_000, 9_500]);
    assert!(there.iter().all(|p| p.vantage == "east"));
    assert_eq!(shared.requests(there[3].probe.id).await.unwrap().len(), 2);
    let v = shared.vantages().await.unwrap();
    assert_eq!(v[0].targets, vec![target("api")]);
}

/// The status line and body of `GET path` on `addr`.
async fn get(addr: std::net::SocketAddr, path: &str) -> std::io::Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::net::TcpStream::connect(addr).await?;
    s.write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await?;
    let mut out = String::new();
    s.read_to_string(&mut out).await?;
    Ok(out)
}

#[tokio::test]
#[ignore = "needs PostgreSQL (CADENCE_TEST_POSTGRES); scripts/test.sh starts one and runs this"]
async fn the_hub_serves_every_vantages_page_until_stopped() {
    let url = database("hub").await;
    let config = SharedConfig::new(&url, None).unwrap();
    let mut s = config.connect().await.unwrap();
    s.push("east", &[(probe("chat", 5_000, true), vec![])])
        .await
        .unwrap();
    let hub = cadence_watch::spawn_hub(cadence_watch::HubSetup {
        shared: config,
        listen: "127.0.0.1:0".parse().unwrap(),
        retain: Some(Duration::from_secs(3600)),
    })
    .await
    .unwrap();
    let addr = hub.addr;
    let page = get(addr, "/api/vantages").await.unwrap();
    assert!(page.starts_with("HTTP/1.0 200"), "{page}");
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let stopped = tokio::spawn(hub.until(async move {
        let _ = rx.await;
    }));
    assert!(get(addr, "/").await.unwrap().starts_with("HTTP/1.0 200"));
    tx.send(()).unwrap();
    stopped.await.unwrap();
    // The page is gone once until returns (its server shuts down).
    let mut gone = false;
    for _ in 0..50 {
        if get(addr, "/").await.is_err() {
            gone = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(gone, "the page still answers after until");
}

#[tokio::test]
#[ignore = "needs PostgreSQL (CADENCE_TEST_POSTGRES); scripts/test.sh starts one and runs this"]
async fn f140_hostile_rows_in_the_shared_store_are_skipped_by_name_never_a_panic() {
    let addr = database("hostile").await;
    let config = SharedConfig::new(&addr, None).unwrap();
    let mut s = config.connect().await.unwrap();
    s.announce("east", &[target("api")], 1_000).await.unwrap();
    let now = cadence_watch::probe::now_ms();
    let good = probe("api", now - 60_000, true);
    s.push("east", &[(good.clone(), vec![])]).await.unwrap();
    // A hostile vantage writes around cadence: NOT NULL dropped, then bad rows.
    let (admin, conn) = tokio_postgres::connect(&addr, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    let future = now + 365 * 86_400_000;
    admin
        .batch_execute(&format!(
            "ALTER TABLE watch_probes ALTER COLUMN sent DROP NOT NULL;
             ALTER TABLE watch_targets ALTER COLUMN url DROP NOT NULL;
             INSERT INTO watch_probes (vantage, target, started_ms, ended_ms, sent, succeeded,
                failed, aborted, failed_by_class, slo_ok, slo_detail)
             VALUES ('west', 'api', {t1}, {t1}, NULL, 1, 0, 0, '{{}}', true, '[]'),
                    ('west', 'api', {t2}, {t2}, 2, -3, 0, 0, '{{}}', true, '[]'),
                    ('west', 'api', {future}, {future}, 2, 2, 0, 0, '{{}}', true, '[]'),
                    (E'we\\x1b[2Jst', 'api', {t3}, {t3}, 2, 2, 0, 0, '{{}}', true, '[]'),
                    ('north', 'api', {t4}, {t4}, 2, 2, 0, 0, '{{}}', false,
                     '[\"<script>alert(1)</script> \\u001b[31m\"]');
             INSERT INTO watch_targets (vantage, name, url, slos, interval_s, seen_ms)
             VALUES ('west', 'api', NULL, '[]', 60, 0);",
            t1 = now - 50_000,
            t2 = now - 40_000,
            t3 = now - 30_000,
            t4 = now - 20_000,
        ))
        .await
        .unwrap();
    let read = s.probes(None, 0).await.unwrap();
    let kept: Vec<(&str, i64)> = read
        .iter()
        .map(|p| (p.vantage.as_str(), p.probe.started_ms))
        .collect();
    assert_eq!(kept, vec![("east", now - 60_000), ("north", now - 20_000)]);
    let detail = &read[1].probe.slo_detail[0];
    assert!(!detail.contains('\u{1b}'), "{detail:?}");
    // The NULL url is a skipped row; the far-future probe is not anyone's last.
    let vantages = s.vantages().await.unwrap();
    let names: Vec<&str> = vantages.iter().map(|v| v.name.as_str()).collect();
    assert_eq!(names, vec!["east"]);
    assert!(vantages[0].last_probe_ms <= Some(now));
    let md = cadence_watch::report::render_vantages(
        &read,
        &vantages,
        0,
        now,
        cadence_watch::report::Format::Markdown,
    );
    assert!(!md.contains("<script") && !md.contains('\u{1b}'), "{md}");
}

//! The runner against `cadence sim` on a real socket: every request is accounted for
//! (intended = sent + dropped; sent = succeeded + failed + aborted), warm-up is tagged,
//! a deadline drains then aborts, and records reach the file as requests finish.

use cadence_bench::body::BodySpec;
use cadence_bench::progress::Progress;
use cadence_bench::sink::{BenchSinks, KeepAll};
use cadence_bench::workload::RequestFactory;
use cadence_bench::{Load, RunContext, RunPlan, RunSummary, StopReason, Timeouts};
use cadence_core::metrics::{summarize_level, LevelOptions};
use cadence_core::secret::Redactor;
use cadence_core::{Outcome, RequestRecord};
use cadence_records::RecordThread;
use cadence_records::RecordsConfig;
use cadence_sim::SimConfig;
use cadence_transport::client::{self, ClientConfig};
use cadence_transport::Clock;
use cadence_wire::Api;
use http::{HeaderName, HeaderValue};
use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

async fn sim(itl: &str) -> cadence_sim::SimServer {
    let config = SimConfig {
        ttft: "fixed:5ms".parse().unwrap(),
        itl: itl.parse().unwrap(),
        ..SimConfig::default()
    };
    cadence_sim::spawn(config, SocketAddr::from(([127, 0, 0, 1], 0)))
        .await
        .unwrap()
}

fn context(addr: SocketAddr, max_tokens: u32, headers: &[(&str, &str)]) -> Arc<RunContext> {
    let extra: Vec<(HeaderName, HeaderValue)> = headers
        .iter()
        .map(|(k, v)| {
            (
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            )
        })
        .collect();
    Arc::new(RunContext {
        client: client::build(&ClientConfig {
            pool_size: 8,
            connect_timeout: Duration::from_secs(2),
            http2: false,
        }),
        factory: RequestFactory::new(
            format!("http://{addr}/v1/chat/completions")
                .parse()
                .unwrap(),
            client::base_headers(None, &extra).unwrap(),
            BodySpec {
                api: Api::Chat,
                model: "m".into(),
                max_tokens: Some(max_tokens),
                extra: None,
                path: String::new(),
            },
            vec!["a".into(), "b".into()],
        ),
        timeouts: Timeouts::default(),
        api: Api::Chat,
        strict: false,
        redactor: Redactor::default(),
        progress: Progress::new(None, false),
        tokenizer: None,
        propagation: None,
    })
}

fn plan(
    concurrency: u32,
    requests: Option<u64>,
    duration: Option<Duration>,
    warmup: u64,
) -> RunPlan {
    RunPlan {
        load: Load::Closed { concurrency },
        requests,
        duration,
        warmup,
        grace: Duration::from_millis(100),
        level: 0,
        stop_when_saturated: false,
    }
}

/// A 1.5 s level of `load` with a 2 s grace: what the open-loop tests run.
fn timed(load: Load) -> RunPlan {
    RunPlan {
        load,
        requests: None,
        duration: Some(Duration::from_millis(1500)),
        warmup: 0,
        grace: Duration::from_secs(2),
        level: 0,
        stop_when_saturated: false,
    }
}

/// Runs `p` with `cx` until it ends or `stop` fires, keeping the records in memory
/// (and in `file`, if given): the run's summary and its records.
async fn run_collect(
    cx: Arc<RunContext>,
    p: &RunPlan,
    file: Option<&Path>,
    stop: impl Future<Output = ()>,
) -> (RunSummary, Vec<RequestRecord>) {
    let sinks = BenchSinks::new(
        file.map(RecordsConfig::new),
        Progress::new(None, false),
        KeepAll::default(),
    )
    .unwrap();
    let (tx, sink) = RecordThread::start(sinks).unwrap();
    let s = cadence_bench::run(cx, p, Clock::start(), tx, stop).await;
    let (kept, written) = sink.finish().unwrap().finish();
    written.unwrap();
    (s, kept.0)
}

/// The invariants of FAULTS.md, checked with the same code the CLI uses.
fn assert_accounted(records: &[RequestRecord], intended: u64, dropped: u64) {
    let measured = records.iter().filter(|r| !r.warmup).count() as u64;
    let warm = records.len() as u64 - measured;
    let level = summarize_level(
        records,
        &LevelOptions {
            stall_threshold_ns: 500_000_000,
            window: None,
            intended: Some(intended - warm),
            dropped,
        },
    );
    level.requests.check().expect("accounting adds up");
    assert_eq!(level.requests.intended, measured + dropped);
    let mut indices: Vec<u64> = records.iter().map(|r| r.index).collect();
    indices.sort();
    indices.dedup();
    assert_eq!(
        indices.len(),
        records.len(),
        "one record per request, none twice"
    );
}

#[tokio::test]
async fn closed_loop_sends_exactly_the_requests_and_tags_warmup() {
    let server = sim("fixed:1ms").await;
    let p = plan(4, Some(20), None, 3);
    let (s, records) = run_collect(
        context(server.addr, 4, &[]),
        &p,
        None,
        std::future::pending(),
    )
    .await;
    assert_eq!(s.stop, StopReason::Completed);
    assert_eq!(s.intended, 23);
    assert_eq!(records.len(), 23);
    assert_eq!(records.iter().filter(|r| r.warmup).count(), 3);
    assert!(records.iter().filter(|r| r.warmup).all(|r| r.index < 3));
    assert!(
        records.iter().all(|r| r.outcome == Outcome::Succeeded),
        "{records:?}"
    );
    assert!(records.iter().all(|r| r.worker < 4));
    assert_accounted(&records, s.intended, s.dropped);
}

#[tokio::test]
async fn concurrency_is_never_exceeded() {
    let server = sim("fixed:2ms").await;
    let p = plan(3, Some(12), None, 0);
    let (_, records) = run_collect(
        context(server.addr, 5, &[]),
        &p,
        None,
        std::future::pending(),
    )
    .await;
    // At any request's send time, at most `concurrency` requests were open.
    for r in &records {
        let t = r.sent_ns.unwrap();
        let open = records
            .iter()
            .filter(|o| o.sent_ns.unwrap() <= t && o.end_ns.unwrap() > t)
            .count();
        assert!(open <= 3, "{open} in flight at {t}");
    }
}

#[tokio::test]
async fn f36_deadline_drains_then_aborts_keeping_tokens() {
    // Streams of 200 tokens at 5 ms take ~1 s; the run stops issuing after 150 ms and
    // allows 100 ms of grace, so in-flight streams are aborted with partial tokens.
    let server = sim("fixed:5ms").await;
    let p = plan(4, None, Some(Duration::from_millis(150)), 0);
    let (s, records) = run_collect(
        context(server.addr, 200, &[]),
        &p,
        None,
        std::future::pending(),
    )
    .await;
    assert_eq!(s.stop, StopReason::Deadline);
    assert_eq!(s.intended, 4);
    assert_eq!(s.aborted_in_flight, 4);
    assert!(
        records
            .iter()
            .all(|r| r.outcome == Outcome::AbortedAtDeadline),
        "{records:?}"
    );
    assert!(
        records.iter().all(|r| !r.chunks.is_empty()),
        "partial tokens are kept"
    );
    assert!(!s.watchdog_fired);
    assert_accounted(&records, s.intended, s.dropped);
}

#[tokio::test]
async fn stop_signal_ends_the_run_and_everything_is_accounted() {
    let server = sim("fixed:5ms").await;
    let p = plan(2, Some(1000), None, 0);
    let stop = tokio::time::sleep(Duration::from_millis(300));
    let (s, records) = run_collect(context(server.addr, 20, &[]), &p, None, stop).await;
    assert_eq!(s.stop, StopReason::Interrupted);
    assert!(s.intended < 1000);
    assert_eq!(records.len() as u64, s.intended);
    assert_accounted(&records, s.intended, s.dropped);
}

#[tokio::test]
async fn a_skip_ends_the_level_like_a_deadline_and_the_next_level_runs_whole() {
    let server = sim("fixed:5ms").await;
    let cx = context(server.addr, 20, &[]);
    let p = plan(2, Some(1000), None, 0);
    // A skip before the level starts is not for it.
    cx.progress.skip_level();
    let progress = cx.progress.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        progress.skip_level();
    });
    let (s, records) = run_collect(cx.clone(), &p, None, std::future::pending()).await;
    assert_eq!(s.stop, StopReason::Skipped);
    assert_eq!(s.stopped_early.as_deref(), Some(cadence_bench::SKIPPED));
    assert!(s.intended > 0 && s.intended < 1000, "{}", s.intended);
    assert_eq!(records.len() as u64, s.intended);
    assert_accounted(&records, s.intended, s.dropped);
    // The next level does not see the old skip.
    let (s, _) = run_collect(cx, &plan(2, Some(4), None, 0), None, std::future::pending()).await;
    assert_eq!(s.stop, StopReason::Completed);
    assert_eq!(s.intended, 4);
}

#[tokio::test]
async fn failures_are_accounted_by_class() {
    let server = sim("fixed:1ms").await;
    let p = plan(2, Some(6), None, 0);
    let cx = context(server.addr, 4, &[("x-cadence-fault", "status_503")]);
    let (s, records) = run_collect(cx, &p, None, std::future::pending()).await;
    assert!(records.iter().all(|r| r.outcome == Outcome::Http5xx));
    assert_accounted(&records, s.intended, s.dropped);
    let level = summarize_level(
        &records,
        &LevelOptions {
            stall_threshold_ns: 1,
            window: None,
            intended: None,
            dropped: 0,
        },
    );
    assert_eq!(level.requests.failed.get("http_5xx"), Some(&6));
    assert_eq!(level.requests.succeeded, 0);
}

#[tokio::test]
async fn records_are_written_as_requests_finish() {
    let server = sim("fixed:1ms").await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("records.jsonl");
    let p = plan(2, Some(5), None, 0);
    let (_, records) = run_collect(
        context(server.addr, 3, &[]),
        &p,
        Some(&path),
        std::future::pending(),
    )
    .await;
    let text = std::fs::read_to_string(&path).unwrap();
    let parsed: Vec<RequestRecord> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(parsed, records);
}

#[test]
fn bad_records_path_fails_before_any_request() {
    let err = BenchSinks::new(
        Some(RecordsConfig::new("/nonexistent-dir/x.jsonl")),
        Progress::new(None, false),
        KeepAll::default(),
    )
    .err()
    .expect("cannot create");
    assert!(
        err.to_string().contains("/nonexistent-dir/x.jsonl"),
        "{err}"
    );
}

/// FAULTS 34: a server freeze during a fixed-rate run shows in response-time
/// percentiles (from the scheduled send); a closed loop over the same freeze hides it
/// from everything but the maximum (coordinated omission).
#[tokio::test]
async fn f34_freeze_shows_in_open_loop_response_time_not_in_closed_loop() {
    use cadence_bench::{ArrivalProcess, Load};
    let freeze = Some(cadence_sim::Freeze {
        at: Duration::from_millis(500),
        duration: Duration::from_millis(500),
    });
    let start_sim = || async {
        let config = SimConfig {
            ttft: "fixed:5ms".parse().unwrap(),
            itl: "fixed:5ms".parse().unwrap(),
            freeze,
            ..SimConfig::default()
        };
        cadence_sim::spawn(config, SocketAddr::from(([127, 0, 0, 1], 0)))
            .await
            .unwrap()
    };
    let run_with = |load: Load, addr: SocketAddr| async move {
        let p = timed(load);
        let (_, records) =
            run_collect(context(addr, 3, &[]), &p, None, std::future::pending()).await;
        summarize_level(&records, &LevelOptions::default())
    };

    let sim = start_sim().await;
    let open = run_with(
        Load::Open {
            rate: 40.0,
            process: ArrivalProcess::Constant,
            max_concurrency: None,
            ramp_up: Duration::ZERO,
        },
        sim.addr,
    )
    .await;
    let sim = start_sim().await;
    let closed = run_with(Load::Closed { concurrency: 2 }, sim.addr).await;

    let open_p90 = open.ttft_response.expect("open loop has a schedule").p90;
    let closed_p90 = closed.ttft.expect("closed loop succeeded").p90;
    // Both slots were mid-stream when the server froze: it lands in their E2E.
    let closed_max = closed.e2e.expect("closed loop succeeded").max;
    assert!(
        open_p90 > 300.0,
        "a third of the open-loop arrivals waited out the freeze: p90 {open_p90} ms"
    );
    assert!(
        closed_p90 < 150.0,
        "the closed loop only sent 2 requests into the freeze: p90 {closed_p90} ms"
    );
    assert!(
        closed_max > 300.0,
        "the freeze is still the closed loop's maximum: {closed_max} ms"
    );
    assert!(
        closed.ttft_response.is_none(),
        "closed loop has no schedule"
    );
}

/// FAULTS 35: open-loop arrivals over `--max-concurrency` are recorded as `dropped`
/// (never sent, so never an abort), and the accounting counts them as dropped.
#[tokio::test]
async fn f35_arrivals_over_the_cap_are_recorded_as_dropped() {
    use cadence_bench::{ArrivalProcess, Load};
    // One slot, 100 arrivals/s, streams of ~100 ms: most arrivals find the slot busy.
    let server = sim("fixed:10ms").await;
    let p = RunPlan {
        load: Load::Open {
            rate: 100.0,
            process: ArrivalProcess::Constant,
            max_concurrency: Some(1),
            ramp_up: Duration::ZERO,
        },
        requests: Some(10),
        duration: None,
        warmup: 0,
        grace: Duration::from_secs(2),
        level: 0,
        stop_when_saturated: false,
    };
    let (s, records) = run_collect(
        context(server.addr, 10, &[]),
        &p,
        None,
        std::future::pending(),
    )
    .await;
    let dropped: Vec<&RequestRecord> = records
        .iter()
        .filter(|r| r.outcome == Outcome::Dropped)
        .collect();
    assert!(s.dropped > 0, "one slot cannot take these arrivals");
    assert_eq!(dropped.len() as u64, s.dropped);
    assert!(dropped
        .iter()
        .all(|r| r.sent_ns.is_none() && r.scheduled_ns.is_some()));
    assert!(records
        .iter()
        .all(|r| r.outcome != Outcome::AbortedAtDeadline));
    let level = summarize_level(&records, &LevelOptions::default());
    level.requests.check().expect("accounting adds up");
    assert_eq!(level.requests.intended, 10);
    assert_eq!(level.requests.dropped, s.dropped);
    assert_eq!(level.requests.aborted, 0);
}

/// A client starved of its own runtime (a task that holds the only worker for 30 ms at
/// a time, as a client CPU-bound on its own work would) sends late while the machine's
/// floor, a thread of its own, keeps time: the pacing verdict calls it invalid.
#[tokio::test]
async fn a_client_starved_of_its_runtime_is_invalid_against_its_floor() {
    use cadence_bench::{ArrivalProcess, Load};
    let sim = sim("fixed:2ms").await;
    let p = timed(Load::Open {
        rate: 200.0,
        process: ArrivalProcess::Constant,
        max_concurrency: None,
        ramp_up: Duration::ZERO,
    });
    let hog = tokio::spawn(async {
        loop {
            std::thread::sleep(Duration::from_millis(30));
            tokio::task::yield_now().await;
        }
    });
    let (summary, records) =
        run_collect(context(sim.addr, 2, &[]), &p, None, std::future::pending()).await;
    hog.abort();
    let floor = summary.floor.expect("an open loop measures its floor");
    let mut pacing = cadence_core::pacing(&records, summary.dropped, 0.001).unwrap();
    pacing.judge(Some(floor), None);
    assert!(pacing.invalid, "{pacing:?}");
    assert!(
        pacing.late_share().unwrap() > 0.5,
        "most sends waited for the hog: {pacing:?}"
    );
    assert!(
        floor.deadlines > 1000 && pacing.late as f64 > pacing.allowed_late,
        "{floor:?}"
    );

    // A closed loop has no schedule and measures no floor.
    let (closed, _) = run_collect(
        context(sim.addr, 2, &[]),
        &plan(2, Some(4), None, 0),
        None,
        std::future::pending(),
    )
    .await;
    assert_eq!(closed.floor, None);
}

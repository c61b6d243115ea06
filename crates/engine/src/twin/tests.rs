//! The twin on hand-built records: known distributions in, known quantiles out.

use std::sync::Arc;

use cadence_core::record::{Chunk, TokenCount, TokenSource};
use cadence_core::{Outcome, RequestRecord};

use super::*;
use crate::drive::{plan_level_on, Arrivals, Start, Workload};
use crate::fit::Figures;

const MS: u64 = 1_000_000;

/// A request sent at `sent` whose first chunk comes `first` later, then chunks after
/// each of `gaps` (ns), one token each.
fn rec(index: u64, worker: u32, sent: u64, first: u64, gaps: &[u64]) -> RequestRecord {
    let mut r = RequestRecord::new(index, Outcome::Succeeded);
    r.worker = worker;
    r.sent_ns = Some(sent);
    let mut t = sent + first;
    r.chunks.push(Chunk(t, Some(1)));
    for g in gaps {
        t += g;
        r.chunks.push(Chunk(t, Some(1)));
    }
    r.first_content_ns = Some(sent + first);
    r.end_ns = Some(t);
    r.input_tokens = Some(100);
    r.output_tokens = Some(TokenCount {
        count: gaps.len() as u64 + 1,
        source: TokenSource::Usage,
    });
    r
}

/// The gap of draw `k`: 1 in 20 a 60 ms stall, else 5 ms to 6 ms evenly.
fn gap(k: u64) -> u64 {
    if k % 20 == 19 {
        60 * MS
    } else {
        5 * MS + (k * 7919 % 1000) * 1000
    }
}

/// One client, one request after another: 200 requests of 50 gaps, 10 ms to first.
fn sequential() -> Vec<RequestRecord> {
    let mut t = 0;
    (0..200)
        .map(|i| {
            let gaps: Vec<u64> = (0..50).map(|k| gap(i * 50 + k)).collect();
            let r = rec(i, 0, t, 10 * MS, &gaps);
            t = r.end_ns.unwrap_or(0) + MS;
            r
        })
        .collect()
}

pub(super) fn workload(requests: u64, max_tokens: u32) -> Workload {
    Workload {
        requests,
        warmup: 0,
        input_tokens: 100,
        max_tokens,
        turnaround_ns: MS,
        lengths: Vec::new(),
        prefix_tokens: 0,
        prefix_groups: 1,
        sessions: None,
        send_at_ns: Vec::new(),
    }
}

fn start() -> Start {
    Start {
        seed: 7,
        level: 0,
        start_ns: 0,
        first_index: 0,
    }
}

#[test]
fn the_stall_band_is_a_component_of_its_own_and_comes_back_out() {
    let twin = fit(&[sequential()], "hand-built").expect("fits");
    assert_eq!(
        (twin.slots, twin.slots_seen, twin.max_running),
        (1, false, 1)
    );
    assert_eq!((twin.requests, twin.gaps), (200, 10_000));
    let cell = twin.itl_cell(1, 150).expect("a cell");
    assert_eq!(cell.context, Some(128), "150 tokens of context: bin 128");
    let pooled = twin
        .itl
        .iter()
        .find(|c| c.context.is_none())
        .expect("pooled");
    assert_eq!(pooled.samples, 10_000);
    assert_eq!(pooled.stall_share, 0.05, "1 gap in 20 is a 60 ms stall");
    assert_eq!(pooled.stall_us, vec![60_000; TAIL_POINTS]);
    assert_eq!(pooled.body_us[0], 5_000);
    assert_eq!(*pooled.body_us.last().expect("points"), 5_999);
    // Every request's prefill was 10 ms.
    assert!(twin
        .prefill
        .iter()
        .all(|c| c.times_us == vec![10_000; TAIL_POINTS]));
    // Served by the twin: ITL p50 within the body (5.5 ms), p90 too, p99 the stall.
    let (level, server) = plan_level_on(
        TwinServer::new(Arc::new(twin), 1),
        Arrivals::Closed { concurrency: 1 },
        &workload(200, 51),
        start(),
    );
    let f = Figures::of_records(&level.records).expect("figures");
    assert!((f.itl[0] - 5.5).abs() < 0.05, "ITL p50 {}", f.itl[0]);
    assert!((f.itl[1] - 5.9).abs() < 0.06, "ITL p90 {}", f.itl[1]);
    assert_eq!(f.ttft, [10.0, 10.0]);
    let mut gaps: Vec<u64> = level
        .records
        .iter()
        .flat_map(|r| r.chunks.windows(2).map(|w| w[1].0 - w[0].0))
        .collect();
    gaps.sort_unstable();
    let stalls = gaps.iter().filter(|&&g| g == 60 * MS).count() as f64 / gaps.len() as f64;
    assert!((stalls - 0.05).abs() < 0.01, "stall share {stalls}");
    assert_eq!(gaps[gaps.len() * 99 / 100], 60 * MS, "p99 is a stall");
    assert_eq!(server.reach().beyond, 0, "within the fit");
}

/// Two slots, four clients: two stream while two wait; each request takes 10 ms to
/// its first token once admitted (the first two free their slots at 60 ms), then 10
/// gaps of 5 ms.
fn two_slots() -> Vec<RequestRecord> {
    let mut out = Vec::new();
    for wave in 0..100u64 {
        let t = wave * 200 * MS;
        for k in 0..4u64 {
            let (sent, first) = if k < 2 { (t, 10) } else { (t, 70) };
            out.push(rec(wave * 4 + k, k as u32, sent, first * MS, &[5 * MS; 10]));
        }
    }
    out
}

#[test]
fn the_slots_are_read_off_the_runs_and_queueing_is_not_prefill() {
    let twin = fit(&[two_slots()], "hand-built").expect("fits");
    assert_eq!((twin.slots, twin.slots_seen), (2, true));
    assert!(
        twin.prefill
            .iter()
            .all(|c| c.times_us == vec![10_000; TAIL_POINTS]),
        "the 60 ms behind a full slot is queueing: {:?}",
        twin.prefill
    );
    assert_eq!(twin.max_running, 2);
    // Four clients again: half the requests wait 60 ms for a slot.
    let (level, server) = plan_level_on(
        TwinServer::new(Arc::new(twin), 1),
        Arrivals::Closed { concurrency: 4 },
        &workload(400, 11),
        Start { seed: 0, ..start() },
    );
    assert_eq!(server.reach().max_running, 2, "never more than the slots");
    let mut ttft: Vec<u64> = level
        .records
        .iter()
        .map(|r| r.chunks[0].0 - r.sent_ns.unwrap_or(0))
        .collect();
    ttft.sort_unstable();
    assert_eq!(ttft[0], 10 * MS);
    assert!(ttft[399] >= 60 * MS, "waited for a slot: {}", ttft[399]);
}

#[test]
fn load_past_the_fit_is_counted_as_extrapolation() {
    let twin = Arc::new(fit(&[sequential()], "hand-built").expect("fits"));
    let (_, server) = plan_level_on(
        TwinServer::new(twin.clone(), 1),
        Arrivals::Closed { concurrency: 4 },
        &workload(40, 20),
        start(),
    );
    let reach = server.reach();
    assert_eq!((reach.requests, reach.max_running), (40, 4));
    assert!(reach.beyond >= 36, "{reach:?}");
    // A context deeper than the fit saw (100 + 51 tokens) is beyond it too.
    let (_, server) = plan_level_on(
        TwinServer::new(twin, 1),
        Arrivals::Closed { concurrency: 1 },
        &workload(3, 400),
        start(),
    );
    assert_eq!(server.reach().beyond, 3);
}

#[test]
fn the_file_reads_back_and_refuses_another_format_or_a_broken_table() {
    let twin = fit(&[two_slots()], "hand-built").expect("fits");
    let text = twin.to_toml();
    assert!(text.starts_with("format = 2\n"), "{text}");
    assert_eq!(Twin::from_toml(&text), Ok(twin.clone()));
    let other = text.replacen("format = 2", "format = 3", 1);
    assert_eq!(Twin::from_toml(&other), Err(TwinFileError::Format(3)));
    assert_eq!(
        TwinFileError::Format(3).to_string(),
        "twin format 3; this cadence reads format 2"
    );
    // A format 1 file (streams timed apart) is refused saying how to get format 2.
    let old = "format = 1\nsource = \"x\"\n[[itl]]\nrunning = 1\njoined = true\n";
    let e = Twin::from_toml(old).expect_err("format 1");
    assert_eq!(e, TwinFileError::Format(1));
    assert!(
        e.to_string()
            .ends_with("fit it again from its runs with `cadence twin fit`"),
        "{e}"
    );
    let mut broken = twin;
    broken.itl[0].body_us.pop();
    let e = Twin::from_toml(&broken.to_toml()).expect_err("short table");
    assert!(e.to_string().contains("129 ascending"), "{e}");
    assert!(matches!(
        Twin::from_toml("format = 2\nslots = \"x\""),
        Err(TwinFileError::Parse(_))
    ));
}

#[test]
fn no_streams_no_twin() {
    let mut failed = rec(0, 0, 0, MS, &[MS]);
    failed.outcome = Outcome::TotalTimeout;
    assert_eq!(fit(&[vec![failed]], "x"), Err(FitError::NoRequests));
    assert_eq!(
        fit(&[vec![rec(0, 0, 0, MS, &[])]], "x"),
        Err(FitError::NoGaps)
    );
}

#[test]
fn bins_and_tables() {
    assert_eq!(
        [1, 8, 9, 16, 31, 32].map(running_bin),
        [1, 8, 8, 16, 16, 32]
    );
    assert_eq!(
        [0, 63, 64, 127, 128, 5000].map(size_bin),
        [0, 0, 64, 64, 128, 4096]
    );
    assert_eq!(table_at(&[0, 10, 20], 0.75), 15.0);
    assert_eq!(table_of(&[1.0, 2.0, 3.0, 4.0, 5.0], 3), vec![1, 3, 5]);
}

#[test]
fn the_check_reads_quantiles_and_judges_against_the_rerun() {
    // TTFT 1..=100 ms, one gap of 2 ms each, E2E = TTFT + 2 ms.
    let recs: Vec<RequestRecord> = (1..=100).map(|k| rec(k, 0, 0, k * MS, &[2 * MS])).collect();
    let f = check::figures(&recs).expect("figures");
    let want = [50.5, 90.1, 99.01, 2.0, 2.0, 2.0, 52.5, 92.1, 101.01];
    for (k, (got, want)) in f.iter().zip(want).enumerate() {
        assert!(
            (got - want).abs() < 1e-9,
            "{}: {got} not {want}",
            check::FIGURES[k]
        );
    }
    let mut predicted = f;
    predicted[0] *= 1.05;
    predicted[5] *= 0.8;
    assert_eq!(check::worst(&predicted, &f).map(|w| w.1), Some("ITL p99"));
    let mut rerun = f;
    rerun[0] *= 0.9;
    let judged = check::Judged {
        name: "rate=3/s".into(),
        measured: f,
        rerun: Some(rerun),
        twin: Some(predicted),
        engine: None,
        extrapolated: None,
    };
    let text = check::render(&[judged]);
    let row = |name: &str| {
        text.lines()
            .find(|l| l.trim_start().starts_with(name))
            .expect("row")
    };
    assert!(row("TTFT p50").ends_with("+5.0%   -10.0%  yes"), "{text}");
    assert!(row("ITL p99").ends_with("-20.0%    +0.0%  no"), "{text}");
    assert!(text.contains("worst twin: ITL p99 20.0 % off"), "{text}");
}

#[test]
fn streams_share_each_step_and_a_prompt_joining_delays_them_all() {
    // Fitted on one stream (gaps 5-6 ms, 1 in 20 a 60 ms stall; 10 ms to first token),
    // served to four clients: one step clock for every stream in flight.
    let twin = Arc::new(fit(&[sequential()], "hand-built").expect("fits"));
    // Replies of different lengths, so the clients fall out of step.
    let mut w = workload(100, 30);
    w.lengths = vec![(100, 30), (100, 23), (100, 17), (100, 41), (100, 12)];
    let (level, _) = plan_level_on(
        TwinServer::new(twin, 1),
        Arrivals::Closed { concurrency: 4 },
        &w,
        start(),
    );
    let times = |r: &RequestRecord| -> Vec<u64> { r.chunks.iter().map(|c| c.0).collect() };
    let (mut shared, mut joined) = (0, Vec::new());
    for r in &level.records {
        let mine = times(r);
        for q in level.records.iter().filter(|q| q.index != r.index) {
            let theirs = times(q);
            let (first, last) = (theirs[0], theirs[theirs.len() - 1]);
            for w in mine.windows(2) {
                let t = w[1];
                if first < t && t <= last {
                    // `q` was decoding: its chunk left at the same step's end.
                    assert!(theirs.contains(&t), "{t} not a step of request {}", q.index);
                    shared += 1;
                }
                let prompts = level.records.iter().filter(|x| x.chunks[0].0 == t).count();
                if t == first && prompts == 1 {
                    // `q`'s prompt alone joined this step: it took its prefill's 10 ms
                    // (several prompts' tokens are past the fit, scaled), or a stall.
                    let gap = t - w[0];
                    assert!(gap > 99 * MS / 10, "request {}: {gap}", q.index);
                    joined.push(gap);
                }
            }
        }
    }
    joined.sort_unstable();
    let median = joined[joined.len() / 2];
    assert!(median.abs_diff(10 * MS) < MS / 10, "{median}");
    assert!(
        shared > 1000 && joined.len() > 50,
        "{shared} shared, {joined:?}"
    );
}

#[test]
fn a_request_arriving_after_a_step_ended_is_never_scheduled_before_it_arrived() {
    // The real-time sim may hand over a request before it advanced the twin to the
    // step that ended first: that step finishes first, then the request is admitted.
    use crate::drive::Backend;
    use crate::engine::{Event, Request};
    let twin = Arc::new(fit(&[sequential()], "hand-built").expect("fits"));
    let mut server = TwinServer::new(twin, 1);
    let mut out = Vec::new();
    let req = |id| Request {
        id,
        prompt_tokens: 100,
        max_tokens: 5,
    };
    server.submit(0, req(0), None, &mut out);
    let end = server.next_time().expect("a step");
    assert_eq!(end, 10 * MS, "the prefill step");
    server.submit(end + MS, req(1), None, &mut out);
    server.advance(200 * MS, &mut out);
    let first = out
        .iter()
        .position(|e| matches!(e, Event::Tokens { id: 0, .. }))
        .expect("request 0's first token");
    let scheduled = out
        .iter()
        .position(|e| matches!(e, Event::Scheduled { id: 1, .. }))
        .expect("request 1 scheduled");
    assert!(first < scheduled, "{out:?}");
    assert!(
        matches!(out[scheduled], Event::Scheduled { t, .. } if t >= end + MS),
        "{out:?}"
    );
}

#[test]
fn the_servers_own_prompt_time_splits_the_overhead_from_the_prefill_step() {
    // One client, the engine idle for every request: 158 ms to the first token, of
    // which the server says 150 ms were its prompt step (8 ms of HTTP and tokenizing).
    // Without the server's word the twin cannot split them; with it, it must.
    let mut t = 0;
    let recs: Vec<RequestRecord> = (0..200)
        .map(|i| {
            let gaps: Vec<u64> = (0..50).map(|k| gap(i * 50 + k)).collect();
            let mut r = rec(i, 0, t, 158 * MS, &gaps);
            r.counters.server_timing = Some(cadence_core::record::ServerTiming {
                prompt_ns: Some(150 * MS),
                ..Default::default()
            });
            t = r.end_ns.unwrap_or(0) + MS;
            r
        })
        .collect();
    let twin = fit(&[recs], "hand-built").expect("fits");
    assert_eq!(table_at(&twin.overhead_us, 0.5), 8_000.0);
    let cell = twin
        .prefill
        .iter()
        .find(|c| c.running == 1)
        .expect("a cell");
    assert_eq!(table_at(&cell.times_us, 0.5), 150_000.0);
}

#[test]
fn clients_sending_together_enter_together_and_keep_an_engines_lock_step() {
    // The engine model at 8 clients on 4 slots, equal replies: the four waiting
    // prompts are prefilled together and no stream decodes across a prefill. The
    // twin's overhead widened to 2-20 ms, as llama-server's measured spread: drawn
    // apart, the first clients entered steps apart and the prefills fell between
    // other streams' tokens (ITL p99 +13.6 %).
    let mut spec = crate::preset("llama-3.1-8b@h100-fp8").expect("preset");
    spec.serving.max_batch = 4;
    spec.serving.request_overhead_ms = 10.0;
    spec.serving.jitter = 0.1;
    let w = workload(100, 32);
    let w = Workload {
        input_tokens: 128,
        turnaround_ns: 500_000,
        ..w
    };
    let closed = |c| Arrivals::Closed { concurrency: c };
    let runs: Vec<Vec<RequestRecord>> = [1, 2, 4, 8]
        .iter()
        .map(|&c| crate::plan_level(&spec, closed(c), &w, 0, 0, 0).records)
        .collect();
    let mut twin = fit(&runs, "engine").expect("fits");
    assert!(twin.slots_seen && twin.slots == 4, "{} slots", twin.slots);
    twin.overhead_us = (0..33u64).map(|k| 2_000 + 18_000 * k / 32).collect();
    let model = Model::Twin {
        twin: Arc::new(twin),
        seed: 1,
    };
    let measured = check::figures(&runs[3]).expect("figures");
    let twin_w = crate::measured::workload_of(&runs[3], 128, 0, &mut Vec::new());
    let predicted = model.plan_level(closed(8), &twin_w, 0, 0, 0).0;
    let predicted = check::figures(&predicted.records).expect("figures");
    for k in 3..6 {
        let e = predicted[k] / measured[k] - 1.0;
        assert!(e.abs() < 0.03, "{} {:+.1} %", check::FIGURES[k], e * 100.0);
    }
}

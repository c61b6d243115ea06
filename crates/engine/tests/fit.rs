//! Calibration on runs the engine made itself: a sweep planned with known parameters
//! is fitted from a base whose parameters are off, and the fit must find them again
//! (where the sweep decides them) and predict a level it never saw.

use cadence_engine::fit::{self, Figures, Level, PARAMS};
use cadence_engine::{preset, Arrivals, EngineSpec, Workload};

/// tiny@cpu with the parameters the fit must find.
fn truth() -> EngineSpec {
    let mut s = preset("tiny@cpu").unwrap();
    s.hardware.bandwidth_efficiency = 0.4;
    s.hardware.compute_efficiency = 0.3;
    s.serving.step_overhead_us = 800.0;
    s.serving.seq_overhead_us = 300.0;
    s.serving.request_overhead_ms = 5.0;
    s
}

fn workload() -> Workload {
    Workload {
        requests: 16,
        warmup: 0,
        input_tokens: 0,
        max_tokens: 0,
        turnaround_ns: 500_000,
        // Prompts of 200–320 tokens (compute-bound prefill), 16–32 output tokens.
        lengths: (0..16).map(|i| (200 + 8 * i, 16 + i)).collect(),
        prefix_tokens: 0,
        prefix_groups: 1,
        sessions: None,
        send_at_ns: Vec::new(),
    }
}

/// A level of the sweep as a run against the true engine measured it.
fn measured(concurrency: u32) -> Level {
    let arrivals = Arrivals::Closed { concurrency };
    let w = workload();
    Level {
        name: format!("concurrency={concurrency}"),
        measured: fit::predict(&truth(), arrivals, &w).unwrap(),
        arrivals,
        workload: w,
    }
}

fn base() -> EngineSpec {
    preset("tiny@cpu").unwrap()
}

#[test]
fn the_fit_finds_the_parameters_a_sweep_decides() {
    // Step and per-sequence overheads known; bandwidth, compute and request overhead
    // each shape a different figure (decode ITL, prefill, TTFT at light load).
    let levels: Vec<Level> = [1, 2, 4, 8].map(measured).into();
    let refs: Vec<&Level> = levels.iter().collect();
    let free = [PARAMS[0], PARAMS[1], PARAMS[4]];
    let mut start = base();
    start.serving.step_overhead_us = 800.0;
    start.serving.seq_overhead_us = 300.0;
    let f = fit::fit(&start, &refs, &free, 1500);
    let t = truth();
    for p in free {
        let (got, want) = ((p.get)(&f.spec), (p.get)(&t));
        assert!(
            (got / want - 1.0).abs() < 0.03,
            "{}: fitted {got}, true {want} (cost {})",
            p.name,
            f.cost
        );
    }
    assert!(f.cost < 1e-3, "{}", f.cost);
}

#[test]
fn every_parameter_fitted_on_three_levels_predicts_the_fourth() {
    let levels: Vec<Level> = [1, 2, 8, 4].map(measured).into();
    let fitted: Vec<&Level> = levels[..3].iter().collect();
    let f = fit::fit(&base(), &fitted, PARAMS, 1500);
    assert!(f.cost < 1e-2, "cost {}", f.cost);
    let held = &levels[3];
    let p = fit::predict(&f.spec, held.arrivals, &held.workload).unwrap();
    for (name, e) in fit::FIGURES.iter().zip(p.errors(&held.measured)) {
        assert!(e.abs() < 0.05, "{name} off by {:.1} %", e * 100.0);
    }
    // The fitted engine is an engine file `--engine` loads back, the same engine.
    let back = EngineSpec::from_toml(&fit::to_toml(&f.spec)).unwrap();
    assert_eq!(back, f.spec);
}

#[test]
fn figures_are_the_reports_percentiles_of_succeeded_measured_requests() {
    use cadence_core::{Chunk, Outcome, RequestRecord};
    const MS: u64 = 1_000_000;
    let rec = |sent: u64, chunks: &[u64], warmup: bool, outcome: Outcome| {
        let mut r = RequestRecord::new(0, outcome);
        r.warmup = warmup;
        r.sent_ns = Some(sent * MS);
        r.chunks = chunks.iter().map(|&t| Chunk(t * MS, Some(1))).collect();
        r.end_ns = chunks.last().map(|t| t * MS);
        r
    };
    let records = [
        rec(0, &[10, 12, 15], false, Outcome::Succeeded),
        rec(0, &[20, 24, 29], false, Outcome::Succeeded),
        rec(0, &[1000, 2000], true, Outcome::Succeeded),
        rec(0, &[1, 900], false, Outcome::Truncated),
    ];
    let f = Figures::of_records(&records).unwrap();
    // TTFT 10 and 20 ms; ITL gaps 2, 3, 4, 5 ms (type-7 percentiles).
    assert_eq!(f.ttft, [15.0, 19.0]);
    assert_eq!(f.itl, [3.5, 4.7]);
    assert!(Figures::of_records(&records[2..]).is_none());
}

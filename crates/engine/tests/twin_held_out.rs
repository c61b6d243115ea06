//! The twin against a truth it is given none of, in virtual time: the engine model
//! (`llama-3.1-8b@h100-fp8`, as `cadence sim --preset` runs it) swept closed-loop to fit
//! on, then asked for an open-loop Poisson load it never saw. No machine in the way:
//! the only noise is the engine's own step jitter, measured as a rerun with another
//! seed.

use std::sync::Arc;

use cadence_core::RequestRecord;
use cadence_engine::twin::{check, extrapolation, fit, Model};
use cadence_engine::{plan_level, preset, Arrivals, EngineSpec, Workload};

fn workload(requests: u64) -> Workload {
    Workload {
        requests,
        warmup: 0,
        input_tokens: 128,
        max_tokens: 16,
        turnaround_ns: 500_000,
        lengths: Vec::new(),
        prefix_tokens: 0,
        prefix_groups: 1,
        sessions: None,
        send_at_ns: Vec::new(),
    }
}

fn engine(seed: u64) -> EngineSpec {
    let mut s = preset("llama-3.1-8b@h100-fp8").expect("preset");
    s.serving.seed = seed;
    s
}

/// A closed-loop sweep, each level on its own timeline.
fn sweep(levels: &[u32], requests: u64) -> Vec<Vec<RequestRecord>> {
    levels
        .iter()
        .map(|&c| {
            let a = Arrivals::Closed { concurrency: c };
            plan_level(&engine(1), a, &workload(requests), 0, 0, 0).records
        })
        .collect()
}

fn errors(p: &[f64; 9], m: &[f64; 9]) -> [f64; 9] {
    std::array::from_fn(|k| p[k] / m[k] - 1.0)
}

fn table(name: &str, m: &[f64; 9], cols: &[(&str, [f64; 9])]) -> String {
    let mut s = format!("{name}\n");
    for k in 0..9 {
        s.push_str(&format!("  {:<9} {:>8.3} ms", check::FIGURES[k], m[k]));
        for (c, v) in cols {
            s.push_str(&format!("  {c} {:+6.1} %", v[k] * 100.0));
        }
        s.push('\n');
    }
    s
}

/// Fitted on a closed-loop sweep (1, 2, 4, 8 clients, 200 requests each), the twin
/// predicts a Poisson load of 30 req/s (400 requests) within 3 % on every median and
/// p90 and within 1.5 times the load's rerun noise (two more runs with other
/// step-jitter seeds) on the p99s, a p99 of 400 being the twin's own draw as noisy as
/// a rerun: measured within 1 % on every figure but E2E p99 (+2.3 %) and TTFT p99
/// (+11.0 %, rerun noise 6.3 and 7.9 %). Before the twin shared steps across streams,
/// TTFT was +66 to +115 % off and ITL p99 −16 %. At 60 req/s up to 14 sequences
/// share a step, past the fit's 8: the level is flagged as extrapolated, its medians
/// and p90s within 5 % (TTFT p50 −3.9 %).
#[test]
fn the_twin_predicts_a_held_out_poisson_load_of_the_engine_model() {
    let twin = Arc::new(fit(&sweep(&[1, 2, 4, 8], 200), "sweep").expect("fits"));
    let mut report = String::new();
    let mut failed = Vec::new();
    for rate in [30.0, 60.0] {
        let arrivals = Arrivals::Poisson { rate, seed: 5 };
        let w = workload(400);
        let measured = |seed| {
            check::figures(&plan_level(&engine(seed), arrivals, &w, 0, 0, 0).records)
                .expect("figures")
        };
        let m = measured(11);
        let (r1, r2) = (errors(&measured(12), &m), errors(&measured(13), &m));
        let model = Model::Twin {
            twin: twin.clone(),
            seed: 3,
        };
        let (planned, reach) = model.plan_level(arrivals, &w, 0, 0, 0);
        let past = reach.and_then(|r| extrapolation(&r, &twin));
        let e = errors(&check::figures(&planned.records).expect("figures"), &m);
        report.push_str(&table(
            &format!("rate={rate}/s {}", past.as_deref().unwrap_or("")),
            &m,
            &[("twin", e), ("rerun", r1), ("rerun", r2)],
        ));
        assert_eq!(past.is_some(), rate > 30.0, "{past:?}");
        for k in 0..9 {
            let noise = r1[k].abs().max(r2[k].abs());
            // Past the fit, a p99 is a guess: only the medians and p90s are held.
            let bound = match (past.is_some(), k % 3 == 2) {
                (true, true) => f64::INFINITY,
                (true, false) => 0.05,
                (false, true) => (1.5 * noise).max(0.03),
                (false, false) => 0.03,
            };
            if e[k].abs() > bound {
                failed.push(format!("rate={rate}/s {}", check::FIGURES[k]));
            }
        }
    }
    eprintln!("{report}");
    assert!(failed.is_empty(), "off: {failed:?}\n{report}");
}

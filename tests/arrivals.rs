//! `bench` and `plan` draw open-loop arrivals from one schedule: the same flags and
//! seed give the same arrival times, whether requests go to a server or to the engine
//! model. Both sides are built from parsed command lines by the subcommands' own code.

use cadence::cli::{Cli, Command};
use cadence_engine::{plan_level, Workload};
use clap::Parser;

const N: usize = 200;

/// The send offsets (ns from the level's start) `cadence bench ARGS` paces its first
/// level by.
fn bench_offsets(args: &[&str]) -> Vec<u64> {
    let Command::Bench(mut b) = Cli::try_parse_from(args).unwrap().command else {
        panic!("bench")
    };
    // As `bench` does first: the seed given, or one drawn (constant arrivals use none).
    b.resolve_seed();
    let loads = cadence::bench_cmd::loads(&b);
    loads[0]
        .schedule()
        .expect("an open loop has a schedule")
        .take(N)
        .map(|d| d.as_nanos() as u64)
        .collect()
}

/// The arrival times (ns from the level's start) of the first level `cadence plan ARGS`
/// feeds the engine.
fn plan_offsets(args: &[&str]) -> Vec<u64> {
    let Command::Plan(p) = Cli::try_parse_from(args).unwrap().command else {
        panic!("plan")
    };
    let levels = cadence::plan_cmd::levels(&p);
    let spec = cadence_engine::preset("tiny@cpu").unwrap();
    let workload = Workload {
        requests: N as u64,
        warmup: 0,
        input_tokens: 8,
        max_tokens: 4,
        turnaround_ns: 0,
        lengths: Vec::new(),
        prefix_tokens: 0,
        prefix_groups: 1,
        sessions: None,
        send_at_ns: Vec::new(),
    };
    let level = plan_level(&spec, levels[0].arrivals, &workload, 0, 0, 0);
    let mut at: Vec<u64> = level
        .records
        .iter()
        .map(|r| r.scheduled_ns.expect("open loop"))
        .collect();
    at.sort_unstable();
    at
}

#[test]
fn bench_and_plan_with_the_same_seed_draw_the_same_poisson_arrivals() {
    let bench = bench_offsets(&[
        "cadence",
        "bench",
        "--rate",
        "40",
        "--arrivals",
        "poisson",
        "--seed",
        "7",
    ]);
    let plan = plan_offsets(&[
        "cadence",
        "plan",
        "--preset",
        "tiny@cpu",
        "--rate",
        "40",
        "--arrivals",
        "poisson",
        "--seed",
        "7",
    ]);
    assert_eq!(bench.len(), N);
    assert_eq!(bench, plan);
    // Not a coincidence of evenly spaced times: the gaps vary, and another seed moves them.
    assert!(bench.windows(3).any(|w| w[1] - w[0] != w[2] - w[1]));
    let other = plan_offsets(&[
        "cadence",
        "plan",
        "--preset",
        "tiny@cpu",
        "--rate",
        "40",
        "--arrivals",
        "poisson",
        "--seed",
        "8",
    ]);
    assert_ne!(bench, other);
}

#[test]
fn bench_and_plan_draw_the_same_constant_arrivals() {
    let bench = bench_offsets(&["cadence", "bench", "--rate", "3"]);
    let plan = plan_offsets(&[
        "cadence",
        "plan",
        "--preset",
        "tiny@cpu",
        "--rate",
        "3",
        "--arrivals",
        "constant",
    ]);
    assert_eq!(bench, plan);
    assert_eq!(bench[3], 1_000_000_000, "three a second, no drift");
}

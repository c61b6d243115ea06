//! How long this machine keeps a ready thread off its CPU, whatever the program: one
//! thread pinned to each CPU sleeps 100 µs at a time and records how late it wakes
//! (the jHiccup idea). A stall here lands on every hop of a request's path, so it is
//! the floor under any per-chunk tail measured on the machine (see BENCHMARKS.md,
//! "Proxy overhead").
//!
//! ```text
//! cargo run --release -p cadence-benchsuite --bin hiccups -- --seconds 20
//! ```

use std::time::{Duration, Instant};

struct CpuReport {
    cpu: usize,
    wakes: u64,
    over_half_ms: u64,
    /// (seconds since start, how late in ms) of each wake more than 1 ms late.
    stalls: Vec<(f64, f64)>,
    p999_ms: f64,
    max_ms: f64,
}

/// Pins the calling thread to `cpu` with `taskset` (util-linux), found through
/// `/proc/thread-self`, so the harness needs neither unsafe code nor a crate for it.
fn pin(cpu: usize) -> bool {
    let Ok(link) = std::fs::read_link("/proc/thread-self") else {
        return false;
    };
    let Some(tid) = link
        .file_name()
        .and_then(|t| t.to_str())
        .map(str::to_string)
    else {
        return false;
    };
    std::process::Command::new("taskset")
        .args(["-p", "-c", &cpu.to_string(), &tid])
        .stdout(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn probe(cpu: usize, run_for: Duration, nap: Duration, start: Instant) -> CpuReport {
    if !pin(cpu) {
        eprintln!("could not pin a thread to CPU {cpu}; its figures are for any CPU");
    }
    let mut late_ns: Vec<u64> = Vec::with_capacity(1 << 20);
    let mut stalls = Vec::new();
    while start.elapsed() < run_for {
        let before = Instant::now();
        std::thread::sleep(nap);
        let late = before.elapsed().saturating_sub(nap);
        late_ns.push(late.as_nanos() as u64);
        if late > Duration::from_millis(1) {
            stalls.push(((before - start).as_secs_f64(), late.as_secs_f64() * 1e3));
        }
    }
    let over_half_ms = late_ns.iter().filter(|&&l| l > 500_000).count() as u64;
    late_ns.sort_unstable();
    let sorted: Vec<f64> = late_ns.iter().map(|&l| l as f64 / 1e6).collect();
    CpuReport {
        cpu,
        wakes: late_ns.len() as u64,
        over_half_ms,
        stalls,
        p999_ms: cadence_core::stats::quantile_sorted(&sorted, 0.999).unwrap_or(f64::NAN),
        max_ms: sorted.last().copied().unwrap_or(f64::NAN),
    }
}

fn main() {
    let mut seconds = 10.0f64;
    let mut nap_us = 100u64;
    let argv: Vec<String> = std::env::args().skip(1).collect();
    for pair in argv.chunks(2) {
        let v = pair.get(1).map(String::as_str).unwrap_or("");
        match pair[0].as_str() {
            "--seconds" => seconds = v.parse().expect("--seconds needs a number"),
            "--sleep-us" => nap_us = v.parse().expect("--sleep-us needs a number"),
            o => panic!("unknown flag {o} (use --seconds S, --sleep-us N)"),
        }
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let run_for = Duration::from_secs_f64(seconds);
    let nap = Duration::from_micros(nap_us);
    let start = Instant::now();
    let threads: Vec<_> = (0..cpus)
        .map(|cpu| std::thread::spawn(move || probe(cpu, run_for, nap, start)))
        .collect();
    let reports: Vec<CpuReport> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    println!("{cpus} CPUs, {seconds} s, sleeping {nap_us} us at a time; lateness of each wake:");
    println!(
        "{:>4} {:>9} {:>9} {:>8} {:>10} {:>9} {:>16}",
        "cpu", "wakes", ">0.5 ms", ">1 ms", "p99.9 ms", "max ms", "median gap s"
    );
    for r in &reports {
        // The spacing of the >1 ms stalls: a steady value is a periodic source.
        let mut gaps: Vec<f64> = r.stalls.windows(2).map(|w| w[1].0 - w[0].0).collect();
        gaps.sort_by(f64::total_cmp);
        let gap = cadence_core::stats::quantile_sorted(&gaps, 0.5).unwrap_or(f64::NAN);
        println!(
            "{:>4} {:>9} {:>9} {:>8} {:>10.3} {:>9.2} {:>16.3}",
            r.cpu,
            r.wakes,
            r.over_half_ms,
            r.stalls.len(),
            r.p999_ms,
            r.max_ms,
            gap
        );
    }
    let stalled_ms: f64 = reports
        .iter()
        .flat_map(|r| r.stalls.iter().map(|s| s.1))
        .sum();
    println!(
        "time lost to stalls over 1 ms: {:.3} % of each CPU on average",
        stalled_ms / 1e3 / seconds / cpus as f64 * 100.0
    );
}

//! Wake-up coalescing in a runtime built with its hooks (as `cadence` builds its own):
//! a worker whose streams' chunks are far apart waits out its window before it sleeps
//! again, work handed in meanwhile waits for it, [`coalesce::interrupt`] cuts the wait
//! short, and with coalescing off nothing waits. Bounds are loose (the window is
//! 800 ms, the checks 400 ms) so a loaded machine cannot flip them.

use cadence_bench::coalesce;
use std::time::{Duration, Instant};

const WINDOW: Duration = Duration::from_millis(800);
const BOUND: Duration = Duration::from_millis(400);

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .on_thread_park(coalesce::before_park)
        .on_thread_unpark(coalesce::after_unpark)
        .enable_all()
        .build()
        .expect("a runtime")
}

/// How long a task spawned from outside takes to run on a worker that has just woken
/// (after its streams showed minute-long gaps), cutting the wait short first if asked.
fn latency_after_a_wake(interrupt: bool) -> Duration {
    let rt = runtime();
    rt.block_on(rt.spawn(async {
        for _ in 0..32 {
            coalesce::note_read(Some(Duration::from_secs(60)), 1);
        }
    }))
    .expect("the gaps are noted");
    // Past the epoch, so the worker's next look at its gaps sets its window.
    std::thread::sleep(coalesce::EPOCH + Duration::from_millis(50));
    rt.block_on(rt.spawn(async {})).expect("the worker wakes");
    std::thread::sleep(Duration::from_millis(50));
    let t = Instant::now();
    let task = rt.spawn(async {});
    if interrupt {
        coalesce::interrupt();
    }
    rt.block_on(task).expect("the task runs");
    t.elapsed()
}

#[test]
fn a_woken_worker_waits_out_its_window_unless_interrupted_or_off() {
    let on = coalesce::enable(WINDOW);
    assert!(coalesce::is_enabled());
    let waited = latency_after_a_wake(false);
    assert!(waited >= BOUND, "work handed in ran after {waited:?}");
    let cut = latency_after_a_wake(true);
    assert!(cut < BOUND, "interrupted, the work still took {cut:?}");
    drop(on);
    assert!(!coalesce::is_enabled());
    let off = latency_after_a_wake(false);
    assert!(off < BOUND, "with coalescing off the work took {off:?}");
}

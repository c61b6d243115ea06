//! Wake-up coalescing (`bench --coalesce-wakes`, off by default): a runtime worker that
//! woke less than a window ago waits out the rest of it before it sleeps on the poller
//! again, so one wake-up finds many ready streams instead of one. A thread's sleep and
//! wake-up costs the client CPU, and at 1,000 streams a client that reacts to every
//! chunk pays one for every other chunk; chunks are timed by the kernel's receive
//! stamp, not by when the client got to them, so waiting changes no measured time.
//!
//! Two bounds keep it honest. The window is at most a quarter of the 10th-percentile gap
//! the worker's streams show between content reads (measured in epochs of [`EPOCH`]),
//! and chunks that shared a read count as gaps of zero: so at most a few chunks in a
//! hundred can share a read because of it, and when more than one in ten already do (a
//! bursty server, a client falling behind) the window closes. And it is only turned on
//! with kernel stamps (`--timestamps user` times each chunk when it is read, which
//! waiting would delay).
//!
//! What it cannot do is keep sends on time. A worker inside the park hook is not idle to
//! tokio: work woken from another thread (the pacer's ticket) goes to the injection
//! queue with no worker notified, and timers are not served during the wait. So `bench`
//! refuses it wherever a send comes from a ticket or a timer, and allows it only in a
//! closed loop; [`interrupt`] still cuts waits short for work handed in from outside.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::thread::Thread;
use std::time::{Duration, Instant};

/// How often a worker recomputes its window from the gaps it saw.
pub const EPOCH: Duration = Duration::from_millis(100);

/// Gaps a worker must see in an epoch before its window follows them.
const MIN_GAPS: u32 = 16;

/// The largest window asked for (ns); 0 is off. Set by [`enable`].
static MAX_NS: AtomicU64 = AtomicU64::new(0);

/// The workers that ever waited, so [`interrupt`] can wake them.
static WAITERS: Mutex<Vec<Thread>> = Mutex::new(Vec::new());

/// Gap buckets: bucket `b` holds gaps of `[2^(b-1), 2^b)` µs (bucket 0: under 1 µs).
const BUCKETS: usize = 40;

/// One worker's view: when it last woke, the window it waits, and this epoch's gaps.
struct Worker {
    woke: Cell<Option<Instant>>,
    window: Cell<Duration>,
    epoch_end: Cell<Option<Instant>>,
    gaps: [Cell<u32>; BUCKETS],
    registered: Cell<bool>,
}

thread_local! {
    static WORKER: Worker = const {
        Worker {
            woke: Cell::new(None),
            window: Cell::new(Duration::ZERO),
            epoch_end: Cell::new(None),
            gaps: [const { Cell::new(0) }; BUCKETS],
            registered: Cell::new(false),
        }
    };
}

/// Turns coalescing on with windows of at most `max` until the guard drops (zero: off).
#[must_use = "coalescing stops when the guard drops"]
pub fn enable(max: Duration) -> Enabled {
    let ns = u64::try_from(max.as_nanos()).unwrap_or(u64::MAX);
    MAX_NS.store(ns, Ordering::Relaxed);
    Enabled(())
}

/// Coalescing is on while this lives.
#[derive(Debug)]
pub struct Enabled(());

impl Drop for Enabled {
    fn drop(&mut self) {
        MAX_NS.store(0, Ordering::Relaxed);
        waiters().iter().for_each(Thread::unpark);
    }
}

/// Whether coalescing is on.
pub fn is_enabled() -> bool {
    MAX_NS.load(Ordering::Relaxed) > 0
}

/// The runtime's `on_thread_park` hook: a worker that woke less than its window ago
/// waits out the rest (or until [`interrupt`]) before it parks.
pub fn before_park() {
    let max = MAX_NS.load(Ordering::Relaxed);
    if max == 0 {
        return;
    }
    WORKER.with(|w| {
        let now = Instant::now();
        if w.epoch_end.get().is_none_or(|end| now >= end) {
            w.window.set(window_from(
                &w.gaps,
                Duration::from_nanos(max),
                w.window.get(),
            ));
            w.gaps.iter().for_each(|g| g.set(0));
            w.epoch_end.set(Some(now + EPOCH));
        }
        let Some(until) = w.woke.get().map(|t| t + w.window.get()) else {
            return;
        };
        if now >= until {
            return;
        }
        if !w.registered.replace(true) {
            waiters().push(std::thread::current());
        }
        // A spurious or early return only ends this wait early.
        std::thread::park_timeout(until - now);
    });
}

/// The runtime's `on_thread_unpark` hook: the worker's window starts now.
pub fn after_unpark() {
    if MAX_NS.load(Ordering::Relaxed) == 0 {
        return;
    }
    WORKER.with(|w| w.woke.set(Some(Instant::now())));
}

/// Notes a content read of one stream on this worker: the gap since the stream's last
/// one, and how many content chunks the read carried (all but the first shared a read:
/// gaps of zero as far as the stamps can tell).
#[inline]
pub fn note_read(gap: Option<Duration>, chunks: usize) {
    if MAX_NS.load(Ordering::Relaxed) == 0 {
        return;
    }
    WORKER.with(|w| {
        if let Some(gap) = gap {
            let b = bucket(gap);
            w.gaps[b].set(w.gaps[b].get().saturating_add(1));
        }
        let shared = u32::try_from(chunks.saturating_sub(1)).unwrap_or(u32::MAX);
        w.gaps[0].set(w.gaps[0].get().saturating_add(shared));
    });
}

/// The bucket of a gap: `[2^(b-1), 2^b)` µs.
fn bucket(gap: Duration) -> usize {
    let us = u64::try_from(gap.as_micros()).unwrap_or(u64::MAX);
    ((u64::BITS - us.leading_zeros()) as usize).min(BUCKETS - 1)
}

/// Cuts every worker's wait short: for work handed in from another thread that must
/// not wait (the pacer's sends).
pub fn interrupt() {
    if MAX_NS.load(Ordering::Relaxed) == 0 {
        return;
    }
    waiters().iter().for_each(Thread::unpark);
}

fn waiters() -> std::sync::MutexGuard<'static, Vec<Thread>> {
    WAITERS.lock().unwrap_or_else(|e| e.into_inner())
}

/// The window for the next epoch: a quarter of the lower edge of the bucket that holds
/// the 10th-percentile gap (so at most a quarter of that gap), at most `max`; `last`
/// when the epoch saw too few gaps to say.
fn window_from(gaps: &[Cell<u32>], max: Duration, last: Duration) -> Duration {
    let n: u32 = gaps.iter().map(Cell::get).sum();
    if n < MIN_GAPS {
        return last.min(max);
    }
    let mut seen = 0;
    for (b, g) in gaps.iter().enumerate() {
        seen += g.get();
        if 10 * u64::from(seen) >= u64::from(n) {
            let lower_us = if b == 0 { 0 } else { 1u64 << (b - 1) };
            return (Duration::from_micros(lower_us) / 4).min(max);
        }
    }
    Duration::ZERO
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hist(gaps_us: &[(u64, u32)]) -> [Cell<u32>; BUCKETS] {
        let h = [const { Cell::new(0) }; BUCKETS];
        for &(us, n) in gaps_us {
            let b = bucket(Duration::from_micros(us));
            h[b].set(h[b].get() + n);
        }
        h
    }

    #[test]
    fn the_window_is_a_quarter_of_the_10th_percentile_gaps_bucket_at_most_the_maximum() {
        let max = Duration::from_millis(2);
        // 50 ms gaps: bucket [32.768, 65.536) ms, a quarter of its edge is 8.2 ms.
        let h = hist(&[(50_000, 100)]);
        assert_eq!(window_from(&h, max, Duration::ZERO), max);
        // 5 ms gaps: bucket [4.096, 8.192) ms, window 1.024 ms.
        let h = hist(&[(5_000, 100)]);
        assert_eq!(
            window_from(&h, max, Duration::ZERO),
            Duration::from_micros(1024)
        );
        // A few short gaps in a hundred leave it; one in seven sets it.
        let h = hist(&[(1_000, 9), (50_000, 91)]);
        assert_eq!(window_from(&h, max, Duration::ZERO), max);
        let h = hist(&[(1_000, 15), (50_000, 85)]);
        assert_eq!(
            window_from(&h, max, Duration::ZERO),
            Duration::from_micros(128)
        );
        // Long stalls do not widen it.
        let h = hist(&[(1_000, 60), (400_000, 40)]);
        assert_eq!(
            window_from(&h, max, Duration::ZERO),
            Duration::from_micros(128)
        );
        // More than one chunk in ten sharing a read (gaps of zero): closed.
        let h = hist(&[(0, 11), (50_000, 89)]);
        assert_eq!(window_from(&h, max, max), Duration::ZERO);
    }

    #[test]
    fn too_few_gaps_keep_the_last_window_within_the_maximum() {
        let h = hist(&[(100, MIN_GAPS - 1)]);
        let last = Duration::from_micros(700);
        assert_eq!(window_from(&h, Duration::from_millis(2), last), last);
        assert_eq!(
            window_from(&h, Duration::from_micros(300), last),
            Duration::from_micros(300)
        );
    }
}

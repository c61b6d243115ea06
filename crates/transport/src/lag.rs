//! Event-loop lag: how late a periodic timer fires on the runtime that takes the
//! timestamps. Lag delays every timestamp the process takes, so the load generator and
//! the proxy both measure it and report it beside their figures.

use std::time::Duration;
use tokio::time::{sleep_until, Instant};

/// The probe's period: short enough to catch a stall of a few milliseconds, long
/// enough to cost nothing (100 wake-ups a second).
pub const PERIOD: Duration = Duration::from_millis(10);

/// Fires a timer every `period`, for ever, and hands `tick` how late each one woke.
/// The next timer is set from the wake-up, so one stall counts once, not once per
/// missed period.
pub async fn watch(period: Duration, mut tick: impl FnMut(Duration)) {
    let mut expected = Instant::now() + period;
    loop {
        sleep_until(expected).await;
        let now = Instant::now();
        tick(now.saturating_duration_since(expected));
        expected = now + period;
    }
}

/// p99 and max of lag samples (type-7 p99, as everywhere in Cadence); zero when empty.
pub fn p99_and_max(lags: &mut [Duration]) -> (Duration, Duration) {
    lags.sort_unstable();
    let ms: Vec<f64> = lags.iter().map(|l| l.as_secs_f64() * 1e3).collect();
    let p99 = cadence_base::stats::quantile_sorted(&ms, 0.99).unwrap_or(0.0);
    (
        Duration::from_secs_f64(p99 / 1e3),
        lags.last().copied().unwrap_or(Duration::ZERO),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn timers_on_time_have_no_lag() {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        let probe = tokio::spawn(watch(PERIOD, move |l| s.lock().unwrap().push(l)));
        tokio::time::sleep(Duration::from_millis(35)).await;
        // Paused time runs timers on time: three ticks, none late.
        assert_eq!(*seen.lock().unwrap(), vec![Duration::ZERO; 3]);
        probe.abort();
    }

    #[tokio::test]
    async fn a_blocked_runtime_shows_as_one_late_tick() {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let s = seen.clone();
        let probe = tokio::spawn(watch(PERIOD, move |l| s.lock().unwrap().push(l)));
        tokio::time::sleep(Duration::from_millis(25)).await;
        // Block the runtime's only thread, as a slow handler or a stalled CPU would.
        std::thread::sleep(Duration::from_millis(60));
        tokio::time::sleep(Duration::from_millis(25)).await;
        probe.abort();
        let seen = seen.lock().unwrap();
        let late: Vec<&Duration> = seen
            .iter()
            .filter(|l| **l >= Duration::from_millis(40))
            .collect();
        // The timer due inside the block fired at its end (>= 60 - 10 ms late), and the
        // stall counts once, not once per period it swallowed.
        assert_eq!(late.len(), 1, "{seen:?}");
    }

    #[test]
    fn p99_and_max_of_hand_built_lags() {
        let mut lags: Vec<Duration> = (0..100).map(Duration::from_millis).collect();
        let (p99, max) = p99_and_max(&mut lags);
        assert_eq!(max, Duration::from_millis(99));
        // Type 7 over 0..=99 ms: 0.99 * 99 = 98.01 ms.
        assert!((p99.as_secs_f64() * 1e3 - 98.01).abs() < 1e-6, "{p99:?}");
        assert_eq!(p99_and_max(&mut []), (Duration::ZERO, Duration::ZERO));
    }
}

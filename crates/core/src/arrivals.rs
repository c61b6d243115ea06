//! The open-loop arrival schedule, defined once: `bench` paces real requests by it and
//! `plan` feeds the engine model from it, so one seed draws the same arrival times in
//! both. Send times are absolute offsets from the level's start (never sums of rounded
//! gaps, which drift), drawn from the workspace's one generator ([`SplitMix64`]).

use crate::rng::SplitMix64;
use std::time::Duration;

/// Salt of the arrival stream, so a seed's arrivals are a stream of their own apart
/// from the other users of the same seed (engine jitter, bootstrap, workloads).
const SALT: u64 = 0xA221_7A15_0000_0000;

/// How inter-arrival gaps are drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArrivalProcess {
    /// Evenly spaced, 1/rate apart.
    Constant,
    /// Exponential gaps with mean 1/rate, seeded.
    Poisson {
        /// Draws the gaps (salted, so the seed's other streams stay apart).
        seed: u64,
    },
}

/// The send offsets of an open-loop level, generated lazily.
#[derive(Debug, Clone)]
pub struct Schedule {
    rate: f64,
    process: ArrivalProcess,
    ramp_up: Duration,
    rng: SplitMix64,
    index: u64,
    /// Poisson: the cumulative offset so far, in seconds of "ramped time".
    t: f64,
    /// Constant: the offset of the first arrival, in seconds of "ramped time" (a
    /// shard's place among the fleet's, [`Schedule::shard`]).
    phase: f64,
}

impl Schedule {
    /// `rate` requests/s (> 0). With `ramp_up`, the rate grows linearly from 0 to
    /// `rate` over that time, then stays.
    pub fn new(rate: f64, process: ArrivalProcess, ramp_up: Duration) -> Schedule {
        let seed = match process {
            ArrivalProcess::Poisson { seed } => seed,
            ArrivalProcess::Constant => 0,
        };
        Schedule {
            rate,
            process,
            ramp_up,
            rng: SplitMix64::new(seed ^ SALT),
            index: 0,
            t: 0.0,
            phase: 0.0,
        }
    }

    /// This schedule (at one shard's rate) as shard `index` of `count` whose arrivals
    /// together make the fleet's: constant arrivals are offset by `index / (count ·
    /// rate)`, so the fleet's interleave evenly at `count · rate`; Poisson ones start at
    /// their first gap instead of at 0 (with a seed of their own per shard, the sum is
    /// Poisson at the total rate, and the shards do not all send at the level's start).
    pub fn shard(mut self, index: u32, count: u32) -> Schedule {
        match self.process {
            ArrivalProcess::Constant => {
                self.phase = f64::from(index) / (f64::from(count.max(1)) * self.rate);
            }
            ArrivalProcess::Poisson { .. } => {
                // The arrival at 0 is skipped: the schedule resumes at its first gap.
                let _ = self.next();
            }
        }
        self
    }

    /// Maps "arrival mass" (requests expected so far at the full rate ÷ rate, in
    /// seconds) to wall offset, inverting the ramp: during a ramp of length D the
    /// cumulative arrivals are R·t²/(2D), afterwards R·D/2 + R·(t − D).
    fn wall(&self, mass_s: f64) -> f64 {
        let d = self.ramp_up.as_secs_f64();
        if d <= 0.0 {
            return mass_s;
        }
        if mass_s < d / 2.0 {
            (2.0 * d * mass_s).sqrt()
        } else {
            d + (mass_s - d / 2.0)
        }
    }
}

impl Iterator for Schedule {
    type Item = Duration;

    /// The next send offset from the level's start.
    fn next(&mut self) -> Option<Duration> {
        let mass = match self.process {
            ArrivalProcess::Constant => self.phase + self.index as f64 / self.rate,
            ArrivalProcess::Poisson { .. } => {
                let at = self.t;
                // Inverse-CDF of the exponential: -ln(U)/rate with U in (0, 1].
                let u: f64 = 1.0 - self.rng.unit();
                self.t += -u.ln() / self.rate;
                at
            }
        };
        self.index += 1;
        Some(Duration::from_secs_f64(self.wall(mass)))
    }
}

/// Why a level at `rate` with a ramp of `ramp` never reaches its rate, when it would
/// not: a ramp sends `rate · ramp / 2` requests before the full rate, so `requests`
/// (warm-up included) must be more than that, or `duration` longer than the ramp.
pub fn ramp_shortfall(
    rate: f64,
    ramp: Duration,
    requests: Option<u64>,
    duration: Option<Duration>,
) -> Option<String> {
    let during = rate * ramp.as_secs_f64() / 2.0;
    let short_by_count = requests.is_some_and(|n| (n as f64) <= during);
    let short_by_time = duration.is_some_and(|d| d <= ramp);
    // The level ends at whichever of -n and -d comes first.
    (short_by_count || short_by_time).then(|| {
        format!(
            "--ramp-up {ramp:?} at {rate} req/s sends {} requests before reaching the rate, but the level ends first: give -n above {} or -d longer than the ramp",
            during.ceil(),
            during.ceil()
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_ramp_must_end_before_the_level() {
        let ramp = Duration::from_secs(30);
        // 20 req/s ramped over 30 s: 300 requests before the full rate.
        let why = ramp_shortfall(20.0, ramp, Some(64), None).unwrap();
        assert!(why.contains("sends 300 requests"), "{why}");
        assert!(ramp_shortfall(20.0, ramp, Some(301), None).is_none());
        assert!(ramp_shortfall(20.0, ramp, Some(300), None).is_some());
        assert!(ramp_shortfall(20.0, ramp, None, Some(Duration::from_secs(30))).is_some());
        assert!(ramp_shortfall(20.0, ramp, None, Some(Duration::from_secs(120))).is_none());
        // The level ends at the earlier of -n and -d: both must outlast the ramp.
        let d = |s| Some(Duration::from_secs(s));
        assert!(ramp_shortfall(20.0, ramp, Some(10_000), d(10)).is_some());
        assert!(ramp_shortfall(20.0, ramp, Some(10_000), d(60)).is_none());
    }

    fn secs(d: Duration) -> f64 {
        d.as_secs_f64()
    }

    #[test]
    fn constant_rate_is_evenly_spaced_and_absolute() {
        let s: Vec<f64> = Schedule::new(4.0, ArrivalProcess::Constant, Duration::ZERO)
            .take(5)
            .map(secs)
            .collect();
        assert_eq!(s, vec![0.0, 0.25, 0.5, 0.75, 1.0]);
        // No drift: the 10,000th arrival is exactly where it belongs.
        let far = Schedule::new(1000.0, ArrivalProcess::Constant, Duration::ZERO)
            .nth(10_000)
            .unwrap();
        assert_eq!(far, Duration::from_secs(10));
    }

    #[test]
    fn poisson_is_seeded_and_has_the_right_mean() {
        let a: Vec<Duration> =
            Schedule::new(100.0, ArrivalProcess::Poisson { seed: 7 }, Duration::ZERO)
                .take(50)
                .collect();
        let b: Vec<Duration> =
            Schedule::new(100.0, ArrivalProcess::Poisson { seed: 7 }, Duration::ZERO)
                .take(50)
                .collect();
        assert_eq!(a, b, "same seed, same schedule");
        let c: Vec<Duration> =
            Schedule::new(100.0, ArrivalProcess::Poisson { seed: 8 }, Duration::ZERO)
                .take(50)
                .collect();
        assert_ne!(a, c);
        let n = 20_000;
        let last = Schedule::new(100.0, ArrivalProcess::Poisson { seed: 1 }, Duration::ZERO)
            .nth(n)
            .unwrap();
        let mean_gap = secs(last) / n as f64;
        assert!((mean_gap - 0.01).abs() < 0.0005, "mean gap {mean_gap}");
        assert!(a.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn shards_of_a_constant_rate_interleave_into_the_fleets_schedule() {
        // 4 shards at 2.5/s each: together exactly 10/s, 0.1 s apart, none at once.
        let mut all: Vec<f64> = (0..4)
            .flat_map(|i| {
                Schedule::new(2.5, ArrivalProcess::Constant, Duration::ZERO)
                    .shard(i, 4)
                    .take(5)
                    .map(secs)
            })
            .collect();
        all.sort_by(f64::total_cmp);
        for (k, t) in all.iter().enumerate() {
            assert!((t - k as f64 * 0.1).abs() < 1e-9, "{all:?}");
        }
        // Poisson shards do not start at 0, and each keeps its seed's later gaps.
        let plain: Vec<Duration> =
            Schedule::new(10.0, ArrivalProcess::Poisson { seed: 3 }, Duration::ZERO)
                .take(4)
                .collect();
        let shard: Vec<Duration> =
            Schedule::new(10.0, ArrivalProcess::Poisson { seed: 3 }, Duration::ZERO)
                .shard(1, 4)
                .take(3)
                .collect();
        assert_eq!(plain[0], Duration::ZERO);
        assert!(shard[0] > Duration::ZERO);
        assert_eq!(shard[1] - shard[0], plain[2] - plain[1]);
    }

    #[test]
    fn ramp_up_starts_slow_and_reaches_the_rate() {
        // 10/s ramped over 2 s: 10 arrivals in the ramp (R·D/2), then 0.1 s apart.
        let s: Vec<f64> = Schedule::new(10.0, ArrivalProcess::Constant, Duration::from_secs(2))
            .take(13)
            .map(secs)
            .collect();
        assert_eq!(s[0], 0.0);
        assert!(
            s[1] - s[0] > s[9] - s[8],
            "gaps shrink during the ramp: {s:?}"
        );
        assert!((s[10] - 2.0).abs() < 1e-9, "{s:?}");
        assert!((s[11] - s[10] - 0.1).abs() < 1e-9);
        assert!((s[12] - s[11] - 0.1).abs() < 1e-9);
    }
}

//! One run spread over a fleet of load generators (`bench --shard I/N`): which shard a
//! run is, its share of the fleet's load and its own seed, when each level starts on the
//! fleet's shared wall clock, and the lines a shard writes into its records (its anchor,
//! its share, its start skew and self-checks) so a report can merge the shards into one
//! run.

use crate::{Placement, RunPlan, RunSummary};
use cadence_core::runlog::{shard_line, ShardLevel, ShardMeta};
use cadence_core::wallclock::{format_rfc3339, unix_ms};
use cadence_core::LevelFacts;
use std::time::{Duration, SystemTime};

/// The environment variable a Kubernetes Indexed Job sets to each pod's index.
pub const JOB_INDEX_ENV: &str = "JOB_COMPLETION_INDEX";

/// Most shards a fleet may have (`bench --shards`).
pub const MAX_SHARDS: u32 = 10_000;

/// The pause between one level's grace period and the next level's start, so a shard
/// whose drain ran a little long is still on time for the next level.
const LEVEL_GAP: Duration = Duration::from_secs(1);

/// How a run sits in a fleet: which shard it is (if any), when its levels start, and
/// the fleet's load of each level (the shard runs its share).
#[derive(Debug, Clone, Default)]
pub struct Fleet {
    /// `(index, count)`.
    pub shard: Option<(u32, u32)>,
    /// The first level's start.
    pub start_at: Option<SystemTime>,
    /// Level k starts at `start_at + k · period` (with `--duration`).
    period: Option<Duration>,
    /// Planned levels.
    levels: usize,
}

/// `--shard I/N`, `--shard I` with `--shards N`, or `--shards N` with the index from
/// `JOB_COMPLETION_INDEX` (`job_index`): `(I, N)`, or `None` for a lone run.
pub fn resolve_shard(
    shard: Option<&str>,
    shards: Option<u32>,
    job_index: Option<&str>,
) -> Result<Option<(u32, u32)>, String> {
    let number = |s: &str, what: &str| -> Result<u32, String> {
        s.trim()
            .parse::<u32>()
            .map_err(|_| format!("the shard {what} '{s}' is not a whole number"))
    };
    let (index, count) = match (shard, shards) {
        (None, None) => return Ok(None),
        (Some(s), _) if s.contains('/') => {
            let (i, n) = s.split_once('/').expect("checked");
            let n = number(n, "count")?;
            if shards.is_some_and(|m| m != n) {
                return Err(format!(
                    "--shard {s} says {n} shards but --shards (or CADENCE_SHARDS) says {}",
                    shards.unwrap_or_default()
                ));
            }
            (number(i, "index")?, n)
        }
        (Some(i), Some(n)) => (number(i, "index")?, n),
        (Some(s), None) => {
            return Err(format!(
                "--shard {s} needs the fleet's size: --shard {s}/N, or --shards N"
            ))
        }
        (None, Some(n)) => match job_index {
            Some(i) => (number(i, "index")?, n),
            None => {
                return Err(format!(
                    "--shards {n} needs this shard's index: --shard I/{n}, or {JOB_INDEX_ENV} (set by a Kubernetes Indexed Job)"
                ))
            }
        },
    };
    if count == 0 || count > MAX_SHARDS {
        return Err(format!(
            "a fleet has from 1 to {MAX_SHARDS} shards, not {count}"
        ));
    }
    if index >= count {
        return Err(format!(
            "shard index {index} is not below the shard count {count} (indices run from 0)"
        ));
    }
    Ok(Some((index, count)))
}

/// Shard `i`'s share of `total` over `n` shards: the shares differ by at most one and
/// add up to `total` exactly.
pub fn share(total: u64, i: u32, n: u32) -> u64 {
    total / u64::from(n) + u64::from(total % u64::from(n) > u64::from(i))
}

/// Shard `i`'s own seed: distinct per shard (arrivals, prompts), the run's seed for a
/// lone run.
pub fn shard_seed(seed: u64, i: u32, n: u32) -> u64 {
    if n <= 1 {
        return seed;
    }
    cadence_core::rng::SplitMix64::new(cadence_core::rng::stream_seed(seed, u64::from(i) + 1))
        .next_u64()
}

impl Fleet {
    /// The fleet of a run of `levels` levels, each of `duration` (when bounded by time)
    /// and `grace`: shard `shard` (or a lone run), the first level at `start_at`, each
    /// next one a level, its grace and a second later. A start whose last level would
    /// already be over is refused, with the reason.
    pub fn new(
        shard: Option<(u32, u32)>,
        start_at: Option<SystemTime>,
        duration: Option<Duration>,
        grace: Duration,
        levels: usize,
    ) -> Result<Fleet, String> {
        let period = start_at.and(duration).map(|d| d + grace + LEVEL_GAP);
        if let (Some(at), Some(d)) = (start_at, duration) {
            // FAULTS 111: a start whose last level would already be over sends nothing.
            let last = at + period.unwrap_or_default() * (levels.max(1) as u32 - 1) + d;
            if let Ok(ago) = SystemTime::now().duration_since(last) {
                return Err(format!(
                    "--start-at {} is in the past: the run (-d {:?} a level) ended {:.1} s ago, so nothing would be sent; give a start ahead of now",
                    format_rfc3339(at),
                    d,
                    ago.as_secs_f64()
                ));
            }
        }
        Ok(Fleet {
            shard,
            start_at,
            period,
            levels,
        })
    }

    /// When level `k` starts on the wall clock: the shared start on the fleet's grid,
    /// or (without `--duration`) the first level only.
    pub fn level_start(&self, k: u32) -> Option<SystemTime> {
        let start = self.start_at?;
        match (k, self.period) {
            (0, _) => Some(start),
            (_, Some(p)) => Some(start + p * k),
            (_, None) => None,
        }
    }

    /// Where level `k` runs: its start as an instant of this process, and the shard.
    pub fn placement(&self, k: u32) -> Placement {
        Placement {
            start: self.level_start(k).map(instant_at),
            shard: self.shard,
        }
    }

    /// The lines that open a shard's records: its clock's wall-clock anchor and its
    /// identity. A lone run writes none.
    pub fn header_lines(&self, anchor_unix_ms: u64) -> Vec<String> {
        let Some((index, count)) = self.shard else {
            return Vec::new();
        };
        vec![
            cadence_core::runlog::anchor_line(cadence_core::runlog::Anchor {
                unix_ms: anchor_unix_ms,
            }),
            shard_line(&ShardMeta {
                index,
                count,
                start_at_unix_ms: self.start_at.map(unix_ms),
                level: None,
            }),
        ]
    }

    /// The line saying what this shard saw of a level, written after its level line.
    pub fn level_line(
        &self,
        plan: &RunPlan,
        summary: &RunSummary,
        facts: &LevelFacts,
    ) -> Option<String> {
        let (index, count) = self.shard?;
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        Some(shard_line(&ShardMeta {
            index,
            count,
            start_at_unix_ms: self.start_at.map(unix_ms),
            level: Some(ShardLevel {
                level: plan.level,
                planned_start_unix_ms: self.level_start(plan.level).map(unix_ms),
                start_skew_ms: ms(summary.start_skew),
                loop_lag_p99_ms: ms(summary.loop_lag.0),
                loop_lag_max_ms: ms(summary.loop_lag.1),
                cpu_share: facts.cpu_share(),
            }),
        }))
    }

    /// What to tell the user before the first level (a shard waiting for its start).
    pub fn note(&self) -> Option<String> {
        let start = self.start_at?;
        let wait = start
            .duration_since(SystemTime::now())
            .unwrap_or(Duration::ZERO);
        let who = match self.shard {
            Some((i, n)) => format!("Shard {i}/{n}: "),
            None => String::new(),
        };
        Some(format!(
            "{who}the first level starts at {} (in {:.1} s){}.",
            format_rfc3339(start),
            wait.as_secs_f64(),
            match self.period {
                Some(p) if self.levels > 1 =>
                    format!(", each next one {:.1} s later", p.as_secs_f64()),
                _ => String::new(),
            }
        ))
    }
}

/// The instant of this process's monotonic clock at wall-clock time `t`.
fn instant_at(t: SystemTime) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    match t.duration_since(SystemTime::now()) {
        Ok(ahead) => now + ahead,
        Err(behind) => now.checked_sub(behind.duration()).unwrap_or(now),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shard_comes_from_the_flag_or_the_jobs_index() {
        assert_eq!(
            resolve_shard(None, None, Some("3")),
            Ok(None),
            "no fleet, no shard"
        );
        assert_eq!(resolve_shard(Some("2/4"), None, None), Ok(Some((2, 4))));
        assert_eq!(
            resolve_shard(Some("2"), Some(4), Some("1")),
            Ok(Some((2, 4)))
        );
        assert_eq!(resolve_shard(None, Some(4), Some("3")), Ok(Some((3, 4))));
        let e = resolve_shard(None, Some(4), None).unwrap_err();
        assert!(e.contains("JOB_COMPLETION_INDEX"), "{e}");
        assert!(resolve_shard(Some("4/4"), None, None)
            .unwrap_err()
            .contains("below"));
        assert!(resolve_shard(Some("1/3"), Some(4), None)
            .unwrap_err()
            .contains("says"));
        assert!(resolve_shard(Some("2"), None, None)
            .unwrap_err()
            .contains("size"));
        assert!(resolve_shard(Some("x/4"), None, None)
            .unwrap_err()
            .contains("whole"));
        assert!(resolve_shard(Some("0/0"), None, None).is_err());
    }

    #[test]
    fn shares_add_up_to_the_total_exactly() {
        for (total, n) in [(10u64, 4u32), (7, 7), (1_000_003, 16), (5, 1)] {
            let shares: Vec<u64> = (0..n).map(|i| share(total, i, n)).collect();
            assert_eq!(shares.iter().sum::<u64>(), total);
            assert!(shares.iter().max().unwrap() - shares.iter().min().unwrap() <= 1);
        }
        assert_eq!(
            (0..4).map(|i| share(10, i, 4)).collect::<Vec<_>>(),
            [3, 3, 2, 2]
        );
        let seeds: std::collections::BTreeSet<u64> =
            (0..64).map(|i| shard_seed(7, i, 64)).collect();
        assert_eq!(seeds.len(), 64, "every shard has a seed of its own");
        assert_eq!(shard_seed(7, 0, 1), 7);
    }

    #[test]
    fn level_k_starts_k_periods_after_the_first() {
        let at = SystemTime::now() + Duration::from_secs(60);
        let d = Some(Duration::from_secs(5));
        let fleet = Fleet::new(Some((1, 4)), Some(at), d, Duration::from_secs(5), 2).unwrap();
        // Level k starts k × (duration + grace + 1 s) after the first.
        let (l0, l1) = (fleet.level_start(0).unwrap(), fleet.level_start(1).unwrap());
        assert_eq!(l0, at);
        assert_eq!(l1.duration_since(l0).unwrap(), Duration::from_secs(11));
        assert_eq!(fleet.placement(1).shard, Some((1, 4)));
        // Without --duration only the first level has a start.
        let open = Fleet::new(None, Some(at), None, Duration::from_secs(5), 2).unwrap();
        assert_eq!((open.level_start(0), open.level_start(1)), (Some(at), None));
        let past = SystemTime::now() - Duration::from_secs(60);
        let e = Fleet::new(None, Some(past), d, Duration::from_secs(5), 2).unwrap_err();
        assert!(e.contains("is in the past"), "{e}");
    }

    #[test]
    fn poisson_shards_add_up_to_poisson_at_the_fleets_rate() {
        use cadence_core::arrivals::{ArrivalProcess, Schedule};
        // 4 shards at 10/s with the seeds `--shard` gives them, merged.
        let mut all: Vec<f64> = (0..4)
            .flat_map(|i| {
                let seed = shard_seed(0, i, 4);
                Schedule::new(10.0, ArrivalProcess::Poisson { seed }, Duration::ZERO)
                    .shard(i, 4)
                    .take_while(|d| d.as_secs_f64() < 100.0)
                    .map(|d| d.as_secs_f64())
                    .collect::<Vec<_>>()
            })
            .collect();
        all.sort_by(f64::total_cmp);
        let rate = all.len() as f64 / 100.0;
        assert!((rate - 40.0).abs() < 1.2, "fleet rate {rate}");
        // No shard sends at the level's start, and the first second holds the rate.
        assert!(all[0] > 0.0);
        let first = all.iter().filter(|&&t| t < 1.0).count() as f64;
        assert!((first - 40.0).abs() <= 10.0, "{first} in the first second");
        // Exponential gaps: their coefficient of variation is 1 (constant ones: 0).
        let gaps: Vec<f64> = all.windows(2).map(|w| w[1] - w[0]).collect();
        let mean = gaps.iter().sum::<f64>() / gaps.len() as f64;
        let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / gaps.len() as f64;
        let cv = var.sqrt() / mean;
        assert!(
            (cv - 1.0).abs() < 0.05,
            "gaps' coefficient of variation {cv}"
        );
    }
}

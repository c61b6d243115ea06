//! `bench --shard I/N`'s flags: the shard read from `--shard`, `--shards` or the Job's
//! index, what cannot be sharded refused, and the bench flags turned into this shard's
//! share of the load; the fleet itself ([`Fleet`]) is cadence-bench's.

use crate::cli::{BenchArgs, Counts, Rates, DEFAULT_CONCURRENCY, DEFAULT_REQUESTS};
use crate::exit::usage;
use cadence_bench::shard::{resolve_shard, shard_seed, share, Fleet, JOB_INDEX_ENV};
use std::time::SystemTime;

/// Reads the fleet flags, and turns `args` into this shard's share of the load (the
/// rest of the bench then runs it as an ordinary run). A lone run without
/// `--start-at`/`--start-in` is left as it is.
pub fn take(args: &mut BenchArgs) -> anyhow::Result<Fleet> {
    let job_index = std::env::var(JOB_INDEX_ENV).ok();
    let shard =
        resolve_shard(args.shard.as_deref(), args.shards, job_index.as_deref()).map_err(usage)?;
    let start_at = match (args.start_at, args.start_in) {
        (Some(at), _) => Some(at),
        (None, Some(d)) => Some(SystemTime::now() + d),
        (None, None) => None,
    };
    let levels = match (&args.rate, &args.concurrency) {
        (Some(r), _) => r.0.len(),
        (None, Some(c)) => c.0.len(),
        (None, None) => 1,
    };
    if let Some((i, n)) = shard {
        check_shardable(args, levels, start_at.is_some())?;
        split(args, i, n).map_err(usage)?;
    }
    Fleet::new(shard, start_at, args.duration, args.grace, levels).map_err(usage)
}

/// What cannot be split, or needs a shared clock, refused before anything is sent.
fn check_shardable(args: &BenchArgs, levels: usize, has_start: bool) -> anyhow::Result<()> {
    if args.url.is_none() {
        return Err(usage(
            "--shard splits the load on one endpoint among machines: give the endpoint's URL",
        ));
    }
    if args.find_max.is_some() {
        return Err(usage(
            "--find-max cannot be sharded: each shard would search on its own; run the search on one machine, or sweep fixed levels",
        ));
    }
    if args.trace.is_some() {
        return Err(usage("--trace cannot be sharded yet"));
    }
    if args.agent_trace.is_some() {
        return Err(usage("--agent-trace cannot be sharded yet"));
    }
    if levels > 1 && (args.duration.is_none() || !has_start) {
        return Err(usage(
            "a sharded sweep needs --duration and --start-at (or --start-in): every shard must start each level at the same time",
        ));
    }
    Ok(())
}

/// Turns `args` into shard `i` of `n`'s share: concurrency, the cap, -n and warm-up
/// split so the totals are exact, the rate divided, and a seed of its own.
fn split(args: &mut BenchArgs, i: u32, n: u32) -> Result<(), String> {
    let part = |total: u64, what: &str, flag: &str| -> Result<u64, String> {
        match share(total, i, n) {
            0 => Err(format!(
                "{what} {total} cannot be split over {n} shards (each needs at least 1): raise {flag} or use fewer shards"
            )),
            s => Ok(s),
        }
    };
    if args.rate.is_none() {
        let levels = args
            .concurrency
            .clone()
            .map_or_else(|| vec![DEFAULT_CONCURRENCY], |c| c.0);
        let shares = levels
            .iter()
            .map(|&c| part(c.into(), "concurrency", "-c").map(|s| s as u32))
            .collect::<Result<_, _>>()?;
        args.concurrency = Some(Counts(shares));
    }
    if let Some(rates) = &args.rate {
        args.rate = Some(Rates(rates.0.iter().map(|r| r / f64::from(n)).collect()));
    }
    if let Some(cap) = args.max_concurrency {
        args.max_concurrency = Some(part(cap.into(), "--max-concurrency", "it")? as u32);
    }
    let requests = match (args.requests, args.duration) {
        (None, None) => Some(DEFAULT_REQUESTS),
        (n, _) => n,
    };
    if let Some(total) = requests {
        args.requests = Some(part(total, "--requests", "-n")?);
    }
    args.warmup = share(args.warmup, i, n);
    args.seed = shard_seed(args.seed, i, n);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Cli, Command};
    use clap::Parser;
    use std::time::Duration;

    fn bench(args: &[&str]) -> BenchArgs {
        let mut argv = vec!["cadence", "bench", "http://127.0.0.1:1/v1"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Bench(b) => *b,
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_shard_runs_its_share_of_every_level() {
        let mut b = bench(&[
            "-c",
            "10,4",
            "-n",
            "10",
            "--warmup",
            "3",
            "-d",
            "5s",
            "--start-in",
            "1s",
        ]);
        b.shard = Some("3/4".into());
        let fleet = take(&mut b).unwrap();
        // 10 = 3 + 3 + 2 + 2: the last shard runs 2 streams, then 1 of 4.
        assert_eq!(b.concurrency, Some(Counts(vec![2, 1])));
        assert_eq!((b.requests, b.warmup), (Some(2), 0));
        assert_eq!(fleet.shard, Some((3, 4)));
        let mut b = bench(&[
            "-r",
            "10,20",
            "--max-concurrency",
            "9",
            "-n",
            "6",
            "-d",
            "5s",
            "--start-in",
            "1s",
        ]);
        b.shard = Some("1/4".into());
        let fleet = take(&mut b).unwrap();
        assert_eq!(b.rate, Some(Rates(vec![2.5, 5.0])));
        assert_eq!((b.max_concurrency, b.requests), (Some(2), Some(2)));
        assert_ne!(b.seed, 0);
        // Level k starts k × (duration + grace + 1 s) after the first.
        let (l0, l1) = (fleet.level_start(0).unwrap(), fleet.level_start(1).unwrap());
        assert_eq!(l1.duration_since(l0).unwrap(), Duration::from_secs(11));
        assert_eq!(fleet.placement(1).shard, Some((1, 4)));
    }

    #[test]
    fn what_cannot_be_split_is_refused_with_the_reason() {
        let refused = |args: &[&str], needle: &str| {
            let mut b = bench(args);
            b.shard = Some("3/4".into());
            let e = take(&mut b).unwrap_err().to_string();
            assert!(e.contains(needle), "{args:?}: {e}");
        };
        refused(&["-c", "3"], "cannot be split over 4 shards");
        refused(&["-n", "2"], "--requests 2 cannot be split");
        refused(
            &["-c", "4,8", "-d", "5s"],
            "needs --duration and --start-at",
        );
        refused(&["-c", "4,8", "--start-in", "5s"], "needs --duration");
        refused(
            &["--find-max", "concurrency", "--slo", "itl.p99<=1s"],
            "--find-max cannot be sharded",
        );
    }
}

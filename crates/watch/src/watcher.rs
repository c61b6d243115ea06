//! The watch loop: one probe lane for every target. Each target has its own schedule
//! (interval ± jitter from its last probe's start, resumed from the database after a
//! restart), and the lane runs one probe at a time, so probes of different targets
//! never overlap and never share the client's sockets, event loop or the machine's
//! CPU while they time chunks; a target that comes due while another is probing waits
//! for it (the schedule staggers them). A hung target ends at its probe deadline. Each
//! finished probe is written in one transaction, then updates the metrics and, on a
//! change of SLO state, posts the webhook. Retention runs at start and every hour (more
//! often when `--retain` is short).

use crate::incident::{change, Change};
use crate::metrics::Metrics;
use crate::otlp::Otlp;
use crate::probe::{now_ms, Prepared};
use crate::store::{Blocking, Store, StoreError};
use crate::webhook::Webhook;
use rand::{Rng, SeedableRng};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

/// How the loop keeps its history.
#[derive(Debug, Clone)]
pub struct Options {
    /// Probes older than this are deleted.
    pub retain: Duration,
    /// Where incidents are posted, if anywhere.
    pub webhook: Option<Webhook>,
    /// Say each probe (an info event).
    pub verbose: bool,
    /// Woken after each probe is written (the shared store's shipper).
    pub written: Option<Arc<tokio::sync::Notify>>,
    /// Probe every target once, now, in order, then return (`--once`).
    pub once: bool,
    /// Where each probe is exported over OTLP (`--otlp`), after it ended.
    pub otlp: Option<Arc<Otlp>>,
}

/// How often retention runs after the start: every hour, or every quarter of the
/// retention when that is shorter (a short `--retain` still bounds the file).
pub fn retention_every(retain: Duration) -> Duration {
    (retain / 4).clamp(Duration::from_secs(1), Duration::from_secs(3600))
}

/// Runs until `stop` turns true, or with [`Options::once`] until every target had its
/// probe, or the database fails (a full disk, a corrupt page): probing stops loudly and
/// what was written stays. Returns each target's SLO verdict of this run's last probe
/// (`None`: not probed in this run).
pub async fn run(
    targets: Vec<Prepared>,
    store: Store,
    metrics: Arc<Metrics>,
    opts: Options,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<Vec<Option<bool>>, StoreError> {
    let now = Instant::now();
    let (due, mut last_ok) = resume(&targets, &store, &metrics, now)?;
    // Each target's next probe; `None`: none more (with --once, every target is due
    // now, in order, and retired after its probe).
    let mut next: Vec<Option<Instant>> = due
        .into_iter()
        .map(|d| Some(if opts.once { now } else { d }))
        .collect();
    let mut verdicts: Vec<Option<bool>> = vec![None; targets.len()];
    let store = Blocking::new(store);
    let mut next_retention = now;
    let mut rng = rand::rngs::StdRng::from_rng(&mut rand::rng());
    loop {
        if *stop.borrow() {
            return Ok(verdicts);
        }
        let soonest = next
            .iter()
            .enumerate()
            .filter_map(|(i, d)| d.map(|d| (i, d)))
            .min_by_key(|(_, d)| *d);
        let Some((i, due)) = soonest else {
            return Ok(verdicts);
        };
        tokio::select! {
            _ = tokio::time::sleep_until(due.min(next_retention)) => {}
            _ = stop.changed() => continue,
        }
        if Instant::now() >= next_retention {
            let cutoff = now_ms() - opts.retain.as_millis() as i64;
            let gone = store.run(move |s| s.retain(cutoff)).await?;
            if gone > 0 && opts.verbose {
                tracing::info!("cadence watch: retention deleted {gone} probes");
            }
            next_retention = Instant::now() + retention_every(opts.retain);
            continue;
        }
        let t = &targets[i];
        let closed = t.target.probe.hours.map_or(0, |h| h.wait_ms(now_ms()));
        if closed > 0 {
            // Outside its hours: due again when they open (--once: not probed).
            next[i] = if opts.once {
                tracing::info!(
                    "cadence watch: {}: outside its hours, not probed",
                    t.target.name
                );
                None
            } else {
                Some(Instant::now() + Duration::from_millis(closed as u64))
            };
            continue;
        }
        let started = Instant::now();
        let mut stop_probe = stop.clone();
        let probe = t
            .run(
                async move {
                    let _ = stop_probe.wait_for(|s| *s).await;
                },
                opts.otlp.as_deref(),
            )
            .await;
        let Some((row, reqs)) = probe else {
            return Ok(verdicts); // stopped mid-probe: that probe is not kept
        };
        keep(&store, &row, reqs).await?;
        if let Some(w) = &opts.written {
            w.notify_one();
        }
        metrics.observe(&row);
        say(&row, last_ok[i], &opts);
        if own_limit(&row).is_none() {
            last_ok[i] = Some(row.slo_ok);
        }
        verdicts[i] = Some(row.slo_ok);
        next[i] = (!opts.once).then(|| started + gap(&t.target.probe, &mut rng));
    }
}

/// Writes a finished probe and its requests in one transaction, off the async
/// workers; a failure (a full disk) is said, and stops probing.
async fn keep(
    store: &Blocking,
    row: &crate::store::ProbeRow,
    reqs: Vec<crate::store::RequestRow>,
) -> Result<(), StoreError> {
    let r = row.clone();
    let written = store.run(move |s| s.insert_probe(&r, &reqs)).await;
    written.inspect_err(|e| {
        tracing::error!(
            "cadence watch: cannot write the probe of {}: {e}; probing stopped, every probe written before stays in the database",
            row.target
        )
    })?;
    Ok(())
}

/// From one probe's start to the next one's: the interval, moved by up to the jitter
/// either way.
fn gap(p: &crate::config::Probe, rng: &mut impl Rng) -> Duration {
    let jitter = if p.jitter.is_zero() {
        0.0
    } else {
        rng.random_range(-1.0..=1.0) * p.jitter.as_secs_f64()
    };
    Duration::from_secs_f64((p.interval.as_secs_f64() + jitter).max(0.0))
}

/// Each target's first due time and last SLO state: a target with a stored probe
/// continues its schedule from that probe's start (and its gauges from it); a new one
/// starts within the first interval, the targets spread across it.
fn resume(
    targets: &[Prepared],
    store: &Store,
    metrics: &Metrics,
    now: Instant,
) -> Result<(Vec<Instant>, Vec<Option<bool>>), StoreError> {
    let wall = now_ms();
    let n = targets.len().max(1) as u32;
    let mut next = Vec::new();
    let mut last_ok = Vec::new();
    for (i, t) in targets.iter().enumerate() {
        let interval = t.target.probe.interval;
        match store.last_probe(&t.target.name)? {
            Some(p) => {
                let due_ms = p.started_ms + interval.as_millis() as i64 - wall;
                let wait =
                    Duration::from_millis(due_ms.clamp(0, interval.as_millis() as i64) as u64);
                next.push(now + wait);
                last_ok.push(Some(p.slo_ok));
                metrics.set_last(&p);
            }
            None => {
                next.push(now + interval / n * i as u32);
                last_ok.push(None);
            }
        }
    }
    Ok((next, last_ok))
}

/// Says a written probe (an info event, when verbose), and an incident's start or end
/// (a warning, always), posting it to the webhook. `last_ok`: the target's state before it.
fn say(row: &crate::store::ProbeRow, last_ok: Option<bool>, opts: &Options) {
    if opts.verbose {
        tracing::info!(
            "cadence watch: {} probe: {}/{} ok{}, ITL p50 {}, TTFT p50 {}, SLO {}",
            row.target,
            row.succeeded,
            row.sent,
            row.failures().map_or(String::new(), |f| format!(" ({f})")),
            crate::board::cell(row.itl_p50_ms, "ms"),
            crate::board::cell(row.ttft_p50_ms, "ms"),
            if row.slo_ok { "ok" } else { "BREACH" }
        );
    }
    if let Some(why) = own_limit(row) {
        tracing::error!(
            "cadence watch: {}: too many open files (EMFILE): {why}; this probe opens or closes no incident",
            row.target
        );
        return;
    }
    if let Some(c) = change(last_ok, row.slo_ok) {
        let what = match c {
            Change::Opened => "incident started",
            Change::Closed => "incident ended",
        };
        tracing::warn!(
            "cadence watch: {}: {what} ({})",
            row.target,
            row.slo_detail.join("; ")
        );
        if let Some(w) = &opts.webhook {
            w.post(c, row);
        }
    }
}

/// Why a probe measured the watcher's own descriptor limit rather than the target,
/// when some of its requests failed on it (`client_limit`): such a probe is no verdict
/// on the target, so it opens or closes no incident.
fn own_limit(row: &crate::store::ProbeRow) -> Option<String> {
    cadence_core::outcome::client_limit_warning(&row.failed_by_class)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f141_a_probe_that_ran_out_of_descriptors_is_named_and_no_incident() {
        let mut row = crate::rows::tests::probe("api", 1_000, false);
        assert_eq!(own_limit(&row), None);
        row.failed_by_class.insert("client_limit".into(), 2);
        assert!(own_limit(&row).unwrap().contains("open-file limit"));
    }

    #[test]
    fn retention_runs_hourly_or_at_a_quarter_of_a_short_retention() {
        let d = Duration::from_secs;
        assert_eq!(retention_every(d(30 * 86_400)), d(3600));
        assert_eq!(retention_every(d(120)), d(30));
        assert_eq!(retention_every(Duration::from_millis(10)), d(1));
    }
}

//! The shipper: copies each probe from the watcher's SQLite file (the outbox) to the
//! shared store, off the probe lane. A slow or unreachable server never delays a probe;
//! probes wait locally (the page and `/metrics` say how many) and go when it answers,
//! oldest first. Each batch is committed there before it is marked here, so a crash in
//! between ships it again, and the shared store keeps it once.

use crate::board::TargetInfo;
use crate::probe::now_ms;
use crate::shared::ShipState;
use crate::shared::{SharedConfig, SharedStore};
use crate::store::{Blocking, Store};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Notify;

/// Probes per transaction on the shared store.
const BATCH: u32 = 50;

/// The shipper's settings.
#[derive(Debug, Clone)]
pub struct Shipper {
    /// The shared store.
    pub config: SharedConfig,
    /// This watcher's vantage name there.
    pub vantage: String,
    /// The targets announced there.
    pub targets: Vec<TargetInfo>,
    /// This watcher's `--retain`, applied to its own rows in the shared store.
    pub retain: Duration,
    /// Say each shipped batch (an info event).
    pub verbose: bool,
}

/// The wait before reconnecting after the `n`th failure in a row: 1 s doubling to 30 s.
pub fn backoff(n: u32) -> Duration {
    Duration::from_secs(1u64 << n.min(5)).min(Duration::from_secs(30))
}

impl Shipper {
    /// Ships until `stop` turns true, then once more (for at most 3 s): send it once
    /// the probe lane has ended, so that round sees the last probe written. `wake` is
    /// notified after each probe is written.
    pub async fn run(
        self,
        outbox: Store,
        state: Arc<ShipState>,
        wake: Arc<Notify>,
        mut stop: tokio::sync::watch::Receiver<bool>,
    ) {
        let outbox = Blocking::new(outbox);
        let mut conn: Option<SharedStore> = None;
        let mut failures = 0u32;
        let mut next_retention = tokio::time::Instant::now();
        loop {
            if *stop.borrow() {
                // A last round for the probes written just before the stop, bounded:
                // a store that does not answer gets them at the next start.
                let flush = async {
                    while let Ok(true) = self
                        .step(&outbox, &mut conn, &state, &mut next_retention)
                        .await
                    {}
                };
                let _ = tokio::time::timeout(Duration::from_secs(3), flush).await;
                return;
            }
            let wait = match self
                .step(&outbox, &mut conn, &state, &mut next_retention)
                .await
            {
                Ok(true) => continue, // more to ship
                Ok(false) => {
                    failures = 0;
                    Duration::from_secs(30)
                }
                Err(e) => {
                    conn = None;
                    let first = state.up.swap(false, Ordering::Relaxed) || failures == 0;
                    if first {
                        tracing::warn!(
                            "cadence watch: cannot ship to the shared store: {e}; probes wait in the local database and go when it answers"
                        );
                    }
                    state.set_error(Some(e));
                    failures += 1;
                    backoff(failures - 1)
                }
            };
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = wake.notified() => {}
                _ = stop.changed() => {}
            }
        }
    }

    /// One round: connect when needed, ship one batch. `Ok(true)`: a full batch went
    /// (ship again at once); `Ok(false)`: nothing is left.
    async fn step(
        &self,
        outbox: &Blocking,
        conn: &mut Option<SharedStore>,
        state: &ShipState,
        next_retention: &mut tokio::time::Instant,
    ) -> Result<bool, String> {
        let pending = on_store(outbox, |s| s.pending()).await?;
        state.pending.store(pending, Ordering::Relaxed);
        let c = match conn.take() {
            Some(c) if !c.is_closed() => conn.insert(c),
            _ => conn.insert(self.connect(state).await?),
        };
        if tokio::time::Instant::now() >= *next_retention {
            let cutoff = now_ms() - self.retain.as_millis() as i64;
            c.retain(&self.vantage, cutoff)
                .await
                .map_err(|e| e.to_string())?;
            *next_retention =
                tokio::time::Instant::now() + crate::watcher::retention_every(self.retain);
        }
        let batch = on_store(outbox, |s| s.unshipped(BATCH)).await?;
        if batch.is_empty() {
            state.pending.store(0, Ordering::Relaxed);
            state.up.store(true, Ordering::Relaxed);
            state.set_error(None);
            return Ok(false);
        }
        let new = c
            .push(&self.vantage, &batch)
            .await
            .map_err(|e| e.to_string())?;
        state.up.store(true, Ordering::Relaxed);
        state.set_error(None);
        state.shipped.fetch_add(new, Ordering::Relaxed);
        let ids: Vec<i64> = batch.iter().map(|(p, _)| p.id).collect();
        let pending = on_store(outbox, move |s| {
            s.mark_shipped(&ids)?;
            s.pending()
        })
        .await?;
        state.pending.store(pending, Ordering::Relaxed);
        Ok(batch.len() as u32 == BATCH)
    }

    /// A fresh connection to the shared store, this vantage announced on it.
    async fn connect(&self, state: &ShipState) -> Result<SharedStore, String> {
        let c = self.config.connect().await.map_err(|e| e.to_string())?;
        c.announce(&self.vantage, &self.targets, now_ms())
            .await
            .map_err(|e| e.to_string())?;
        if !state.up.load(Ordering::Relaxed) && self.verbose {
            tracing::info!(
                "cadence watch: shipping probes to the shared store {} as vantage {}",
                self.config.display(),
                self.vantage
            );
        }
        Ok(c)
    }
}

/// Runs `f` on the outbox off the async workers.
async fn on_store<T: Send + 'static>(
    outbox: &Blocking,
    f: impl FnOnce(&mut Store) -> Result<T, crate::StoreError> + Send + 'static,
) -> Result<T, String> {
    outbox
        .run(f)
        .await
        .map_err(|e| format!("the local outbox: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reconnects_back_off_from_one_second_to_thirty() {
        let s: Vec<u64> = (0..8).map(|n| backoff(n).as_secs()).collect();
        assert_eq!(s, vec![1, 2, 4, 8, 16, 30, 30, 30]);
    }
}

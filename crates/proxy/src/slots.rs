//! The client connections the proxy holds at once, bounded so its descriptors last
//! (each client connection may hold an upstream one too), and made room for by closing
//! the connection that has waited longest on a request it never finished sending
//! (FAULTS 99): slow clients cannot crowd out the ones that send their requests.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};

/// Descriptors kept back from the connection cap: listeners, the records file, the
/// metrics server's connections, the alert webhook, the runtime's own.
pub(crate) const RESERVED_FDS: u64 = 64;

/// The connection cap the descriptor limit allows: each client connection may hold an
/// upstream connection, and [`RESERVED_FDS`] (or a quarter of a smaller limit) stay
/// free for everything else.
pub(crate) fn cap_for_fd_limit(wanted: usize, fd_limit: Option<u64>) -> usize {
    let Some(limit) = fd_limit else {
        return wanted.max(1);
    };
    let reserve = RESERVED_FDS.min(limit / 4);
    let fits = limit.saturating_sub(reserve) / 2;
    wanted
        .min(usize::try_from(fits).unwrap_or(usize::MAX))
        .max(1)
}

/// The process's soft descriptor limit (moved to the transport, which the watch's page
/// shares it from).
pub(crate) use cadence_transport::classify::fd_limit;

/// Every connection slot of one listener.
pub(crate) struct Slots {
    free: Arc<Semaphore>,
    held: Mutex<HashMap<u64, Arc<SlotState>>>,
    next_id: AtomicU64,
    origin: tokio::time::Instant,
}

/// What the accept loop and a connection's requests know of one connection.
pub(crate) struct SlotState {
    /// Requests being forwarded (body read, answer not yet finished): while any is,
    /// the connection is never closed to make room.
    busy: AtomicUsize,
    /// Since when (ns from the slots' origin) the connection has been waiting on its
    /// client: a request head or body, or the next request.
    waiting_since: AtomicU64,
    /// Told to close to make room.
    pub evict: Notify,
}

/// One held connection; the slot frees when the last clone goes (the connection
/// task's, or a WebSocket session's that outlives it).
pub(crate) struct Slot {
    id: u64,
    pub state: Arc<SlotState>,
    slots: Arc<Slots>,
    _permit: OwnedSemaphorePermit,
}

impl Drop for Slot {
    fn drop(&mut self) {
        if let Ok(mut h) = self.slots.held.lock() {
            h.remove(&self.id);
        }
    }
}

/// Marks its connection busy (a request being forwarded) while it lives, and keeps
/// its slot held (a WebSocket session outlives its HTTP connection).
pub(crate) struct Busy {
    slot: Arc<Slot>,
}

impl Drop for Busy {
    fn drop(&mut self) {
        let state = &self.slot.state;
        state
            .waiting_since
            .store(self.slot.slots.now_ns(), Ordering::Relaxed);
        state.busy.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Slots {
    pub fn new(cap: usize) -> Arc<Slots> {
        Arc::new(Slots {
            free: Arc::new(Semaphore::new(cap)),
            held: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            origin: tokio::time::Instant::now(),
        })
    }

    fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    fn slot(self: &Arc<Self>, permit: OwnedSemaphorePermit) -> Arc<Slot> {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let state = Arc::new(SlotState {
            busy: AtomicUsize::new(0),
            waiting_since: AtomicU64::new(self.now_ns()),
            evict: Notify::new(),
        });
        if let Ok(mut h) = self.held.lock() {
            h.insert(id, state.clone());
        }
        Arc::new(Slot {
            id,
            state,
            slots: self.clone(),
            _permit: permit,
        })
    }

    /// A slot for a new connection: a free one, else the one of the connection that
    /// has waited longest on its client, once it has closed; `None` when every
    /// connection is forwarding. A client that sends its request at once is forwarding
    /// before a slow one that came earlier is taken for it: the newest arrival is the
    /// last to be closed.
    pub async fn take(self: &Arc<Self>) -> Option<Arc<Slot>> {
        if let Ok(p) = self.free.clone().try_acquire_owned() {
            return Some(self.slot(p));
        }
        if !self.evict_one() {
            return None;
        }
        let permit =
            tokio::time::timeout(Duration::from_secs(1), self.free.clone().acquire_owned())
                .await
                .ok()?
                .ok()?;
        Some(self.slot(permit))
    }

    /// Tells the connection that has waited longest on its client to close.
    fn evict_one(&self) -> bool {
        let oldest = self.held.lock().ok().and_then(|h| {
            h.values()
                .filter(|s| s.busy.load(Ordering::Relaxed) == 0)
                .min_by_key(|s| s.waiting_since.load(Ordering::Relaxed))
                .cloned()
        });
        match oldest {
            Some(s) => {
                // Not picked twice while it closes.
                s.busy.fetch_add(1, Ordering::Relaxed);
                s.evict.notify_one();
                true
            }
            None => false,
        }
    }
}

impl Slot {
    /// The connection's request is being forwarded until the guard drops.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.state.busy.fetch_add(1, Ordering::Relaxed);
        Busy { slot: self.clone() }
    }

    /// A request head arrived: the wait on the client starts again from now (its body).
    pub fn request_started(&self) {
        self.state
            .waiting_since
            .store(self.slots.now_ns(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_fits_the_descriptor_limit() {
        assert_eq!(cap_for_fd_limit(4096, Some(256)), 96);
        assert_eq!(cap_for_fd_limit(4096, Some(1024)), 480);
        assert_eq!(cap_for_fd_limit(100, Some(1 << 20)), 100);
        assert_eq!(cap_for_fd_limit(4096, Some(16)), 6);
        assert_eq!(cap_for_fd_limit(4096, Some(0)), 1);
        assert_eq!(cap_for_fd_limit(4096, None), 4096);
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_house_closes_the_longest_waiting_idle_connection() {
        let slots = Slots::new(2);
        let a = slots.take().await.unwrap();
        tokio::time::advance(Duration::from_millis(10)).await;
        let b = slots.take().await.unwrap();
        tokio::time::advance(Duration::from_millis(10)).await;
        // Both forwarding: nothing to close.
        let (busy_a, busy_b) = (a.busy(), b.busy());
        assert!(slots.take().await.is_none());
        // Both waiting again, `b` since later: `a` is the one closed.
        drop(busy_a);
        tokio::time::advance(Duration::from_millis(10)).await;
        drop(busy_b);
        let evicted = a.state.clone();
        let taking = tokio::spawn({
            let slots = slots.clone();
            async move { slots.take().await.is_some() }
        });
        evicted.evict.notified().await;
        drop(a);
        assert!(taking.await.unwrap());
        drop(b);
    }
}

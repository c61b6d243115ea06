//! The record thread: request tasks send each finished record here, and this thread
//! hands it to a set of [`RecordSink`]s (the records writer, the level aggregators,
//! the progress view) and keeps nothing itself. Shared by the bench and the proxy. On a thread of its own so file I/O
//! and aggregation never stall the client.

use crate::writer::{RecordsError, RecordsWriter};
use cadence_core::{RecordSink, RequestRecord};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// A set of sinks the record thread owns.
pub trait Sinks: RecordSink + Send + 'static {
    /// Called when records have come in and a pause is due (at most every
    /// [`FLUSH_EVERY`]): push buffered output to disk.
    fn idle(&mut self) {}
}

/// How long written records may sit in a buffer: what a hard crash can lose.
pub const FLUSH_EVERY: Duration = Duration::from_millis(100);

/// What travels to the record thread.
enum Msg<S> {
    Record(Box<RequestRecord>),
    /// Runs on the thread with the sinks, after every record sent before it.
    With(Box<dyn FnOnce(&mut S) + Send>),
}

/// The sending side, cloned into every request task.
pub struct RecordSender<S>(mpsc::Sender<Msg<S>>);

impl<S> Clone for RecordSender<S> {
    fn clone(&self) -> Self {
        RecordSender(self.0.clone())
    }
}

impl<S: Sinks> RecordSender<S> {
    /// Hands `rec` to the record thread without waiting; dropped silently if the thread is
    /// gone.
    pub fn send(&self, rec: RequestRecord) {
        // The receiver lives until `RecordThread::finish`, after every task has ended.
        let _ = self.0.send(Msg::Record(Box::new(rec)));
    }

    /// Runs `f` on the sinks after every record sent before it (a meta line for the
    /// file, say), without waiting.
    pub fn with(&self, f: impl FnOnce(&mut S) + Send + 'static) {
        let _ = self.0.send(Msg::With(Box::new(f)));
    }

    /// What `f` reads from the sinks once every record sent before it was taken (the
    /// channel is FIFO: once a level's run has returned, all of its records were).
    pub async fn query<R: Send + 'static>(
        &self,
        f: impl FnOnce(&mut S) -> R + Send + 'static,
    ) -> Option<R> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.with(move |s| {
            let _ = tx.send(f(s));
        });
        rx.await.ok()
    }
}

/// The receiving thread; gives the sinks back when every sender is gone.
pub struct RecordThread<S> {
    handle: JoinHandle<S>,
}

/// Why the record thread could not start or finish.
#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    /// The records writer failed to open or write its file.
    #[error(transparent)]
    Records(#[from] RecordsError),
    /// The OS would not spawn the thread.
    #[error("cannot start the record thread: {0}")]
    Spawn(std::io::Error),
    /// The thread panicked; its sinks are lost.
    #[error("the record thread panicked")]
    Panicked,
}

impl<S: Sinks> RecordThread<S> {
    /// Spawns the record thread owning `sinks`: returns the sender to clone into request
    /// tasks and the handle to [`RecordThread::finish`] with.
    pub fn start(mut sinks: S) -> Result<(RecordSender<S>, RecordThread<S>), SinkError> {
        let (tx, rx) = mpsc::channel::<Msg<S>>();
        let handle = std::thread::Builder::new()
            .name("cadence-records".into())
            .spawn(move || {
                serve(&mut sinks, rx);
                sinks
            })
            .map_err(SinkError::Spawn)?;
        Ok((RecordSender(tx), RecordThread { handle }))
    }

    /// Waits for every sender to be dropped, then returns the sinks.
    pub fn finish(self) -> Result<S, SinkError> {
        self.handle.join().map_err(|_| SinkError::Panicked)
    }
}

/// While records keep coming, the thread looks at the channel once per this pause and
/// takes everything queued, rather than sleeping on the channel: a sender then finds no
/// receiver waiting and wakes nobody. Sleeping on it, every finished request woke the
/// thread (a `futex` call by the request's runtime worker, ~1,500 a second at 1,000
/// streams and 10 ms ITL). A pause that finds nothing sends the thread back to waiting
/// on the channel, so an idle run costs no wake-ups either.
pub const BATCH_PAUSE: Duration = Duration::from_millis(10);

/// Hands every record to the sinks, in the order sent, until the last sender is gone
/// and the channel is empty; pauses for `idle` at most every [`FLUSH_EVERY`] while
/// records keep coming, and soon after they stop.
fn serve<S: Sinks>(sinks: &mut S, rx: mpsc::Receiver<Msg<S>>) {
    let mut last_idle = Instant::now();
    let mut dirty = false;
    let mut batching = false;
    loop {
        let first = if batching {
            std::thread::sleep(BATCH_PAUSE);
            match rx.try_recv() {
                Ok(m) => Some(m),
                Err(mpsc::TryRecvError::Empty) => None,
                Err(mpsc::TryRecvError::Disconnected) => break,
            }
        } else if dirty {
            let wait = (last_idle + FLUSH_EVERY).saturating_duration_since(Instant::now());
            match rx.recv_timeout(wait) {
                Ok(m) => Some(m),
                Err(mpsc::RecvTimeoutError::Timeout) => None,
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
            }
        } else {
            match rx.recv() {
                Ok(m) => Some(m),
                Err(_) => break,
            }
        };
        batching = first.is_some();
        if let Some(m) = first {
            // This message and everything queued behind it, in order.
            for m in std::iter::once(m).chain(rx.try_iter()) {
                match m {
                    Msg::Record(rec) => sinks.accept(&rec),
                    Msg::With(f) => f(sinks),
                }
            }
            dirty = true;
        }
        if dirty && last_idle.elapsed() >= FLUSH_EVERY {
            sinks.idle();
            last_idle = Instant::now();
            dirty = false;
        }
    }
    sinks.idle();
}

impl Sinks for RecordsWriter {
    fn idle(&mut self) {
        self.flush();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_core::Outcome;

    /// Keeps the indexes it was handed, and counts its `idle` calls.
    #[derive(Default)]
    struct Seen {
        indexes: Vec<u64>,
        idles: usize,
    }

    impl RecordSink for Seen {
        fn accept(&mut self, record: &RequestRecord) {
            self.indexes.push(record.index);
        }
    }

    impl Sinks for Seen {
        fn idle(&mut self) {
            self.idles += 1;
        }
    }

    #[test]
    fn every_record_arrives_in_order_from_batches_and_after_the_senders_are_gone() {
        let (tx, thread) = RecordThread::start(Seen::default()).unwrap();
        let senders: Vec<_> = (0..4).map(|_| tx.clone()).collect();
        // A burst from several senders (taken as batches), then a lull long enough for
        // the thread to go back to waiting on the channel, then more.
        for i in 0..1_000u64 {
            senders[(i % 4) as usize].send(RequestRecord::new(i, Outcome::Succeeded));
        }
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        let seen = rt.block_on(tx.query(|s: &mut Seen| s.indexes.len()));
        assert_eq!(
            seen,
            Some(1_000),
            "a query sees every record sent before it"
        );
        std::thread::sleep(BATCH_PAUSE * 3);
        for i in 1_000..1_010u64 {
            tx.send(RequestRecord::new(i, Outcome::Succeeded));
        }
        // The last records go with the senders dropped at once (a run ending, Ctrl-C):
        // still handed over, none lost.
        drop(senders);
        drop(tx);
        let seen = thread.finish().unwrap();
        assert_eq!(seen.indexes, (0..1_010).collect::<Vec<_>>());
        assert!(seen.idles >= 1, "the sinks are flushed at the end");
    }
}

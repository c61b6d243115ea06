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

#[derive(Debug, thiserror::Error)]
pub enum SinkError {
    #[error(transparent)]
    Records(#[from] RecordsError),
    #[error("cannot start the record thread: {0}")]
    Spawn(std::io::Error),
    #[error("the record thread panicked")]
    Panicked,
}

impl<S: Sinks> RecordThread<S> {
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

/// Hands every record to the sinks until the last sender is gone; pauses for `idle`
/// at most every [`FLUSH_EVERY`] while records keep coming, and soon after they stop.
fn serve<S: Sinks>(sinks: &mut S, rx: mpsc::Receiver<Msg<S>>) {
    let mut last_idle = Instant::now();
    let mut dirty = false;
    loop {
        let msg = if dirty {
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
        match msg {
            Some(Msg::Record(rec)) => sinks.accept(&rec),
            Some(Msg::With(f)) => f(sinks),
            None => {}
        }
        dirty = true;
        if last_idle.elapsed() >= FLUSH_EVERY {
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

//! An OS thread with a stop flag, joined when stopped or dropped: the shape of the
//! pacing thread and the floor probe, which must run beside the async runtime (their
//! sleeps are the OS's, not the runtime's) and end with the level.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// A named thread running `body` until it returns or sees its stop flag.
pub struct Stoppable<T> {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<T>>,
}

impl<T: Send + 'static> Stoppable<T> {
    /// Starts `body` on a thread called `name`; `body` reads the flag it is given and
    /// returns once it is set.
    pub fn spawn(name: &str, body: impl FnOnce(&AtomicBool) -> T + Send + 'static) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::Builder::new()
            .name(name.into())
            .spawn(move || body(&flag))
            .expect("the OS can start a thread");
        Stoppable {
            stop,
            thread: Some(thread),
        }
    }

    /// Sets the flag and waits for the thread: what it returned (`None` if it panicked).
    pub fn stop(mut self) -> Option<T> {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.take().and_then(|t| t.join().ok())
    }
}

impl<T> Drop for Stoppable<T> {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

//! Replays a [`Script`] as an HTTP body: one frame per yield, each at its
//! absolute deadline (`sleep_until`, never accumulated relative sleeps), with
//! the send log stamped at the moment a content frame is handed over.
//! Tokio's timer ticks every millisecond, so a frame leaves within 1 ms after
//! its planned offset; the error never accumulates.

use std::io;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;
use futures_util::stream;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::script::{Frame, Script};
use crate::send_log::Recorder;
use crate::warp::SimClock;

/// Resolves when the server asks every stream to stop (drain timeout passed).
#[derive(Clone)]
pub(crate) struct Kill(pub(crate) watch::Receiver<bool>);

impl Kill {
    pub(crate) async fn wait(&mut self) {
        if self.0.wait_for(|k| *k).await.is_err() {
            // The server state is gone; nothing will ever ask us to stop.
            std::future::pending::<()>().await;
        }
    }

    /// Sleeps until `deadline`; false if killed first.
    pub(crate) async fn sleep_until(&mut self, deadline: Instant) -> bool {
        if *self.0.borrow() {
            return false;
        }
        if Instant::now() >= deadline {
            return true;
        }
        tokio::select! {
            biased;
            () = self.wait() => false,
            () = tokio::time::sleep_until(deadline) => true,
        }
    }
}

struct Replay {
    frames: std::vec::IntoIter<Frame>,
    start: Instant,
    /// The sim's clock, which the server-wide freeze stops and slow-down slows.
    clock: SimClock,
    end_at: Option<Duration>,
    reset: bool,
    kill: Kill,
    recorder: Recorder,
    done: bool,
}

fn killed() -> io::Error {
    io::Error::new(
        io::ErrorKind::ConnectionAborted,
        "cadence-sim is shutting down",
    )
}

impl Replay {
    /// When a frame planned at `at` leaves: `at` later on the sim's clock (a stream
    /// that was running when the server froze resumes one freeze later; its gaps inside
    /// a slow-down are stretched).
    fn due(&self, at: Duration) -> Instant {
        self.clock.due(self.start, at)
    }

    async fn next(mut self) -> Option<(Result<Bytes, io::Error>, Self)> {
        if self.done {
            return None;
        }
        if let Some(frame) = self.frames.next() {
            if !self.kill.sleep_until(self.due(frame.at)).await {
                self.done = true;
                self.recorder.finish(false);
                return Some((Err(killed()), self));
            }
            if frame.yield_first {
                tokio::task::yield_now().await;
            }
            self.recorder.sent(&frame.tokens);
            return Some((Ok(frame.bytes), self));
        }
        self.done = true;
        if let Some(at) = self.end_at {
            if !self.kill.sleep_until(self.due(at)).await {
                self.recorder.finish(false);
                return Some((Err(killed()), self));
            }
        }
        self.recorder.finish(true);
        if self.reset {
            // hyper drops the bytes it buffered in the poll that meets a body error:
            // one pending poll first makes it flush the chunks already sent (a late
            // wake-up would otherwise lose them with the reset).
            tokio::task::yield_now().await;
            let e = io::Error::new(
                io::ErrorKind::ConnectionReset,
                "cadence-sim: simulated reset",
            );
            return Some((Err(e), self));
        }
        None
    }
}

/// The response body that plays `script` from `start`.
pub(crate) fn body(
    script: Script,
    start: Instant,
    clock: SimClock,
    kill: Kill,
    recorder: Recorder,
) -> Body {
    let replay = Replay {
        frames: script.frames.into_iter(),
        start,
        clock,
        end_at: script.end_at,
        reset: script.reset,
        kill,
        recorder,
        done: false,
    };
    Body::from_stream(stream::unfold(replay, Replay::next))
}

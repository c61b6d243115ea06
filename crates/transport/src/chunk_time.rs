//! The time each body read's chunks get: the kernel's receive time of the socket read
//! that carried them when the connection has one ([`crate::rxstamp`]), else the
//! client's clock as the read reached it; and what the record keeps of the two (the
//! clock used, each chunk's read delay, reads that carried several chunks). Shared by
//! the load generator's executor and the proxy's tap.

use crate::{Clock, RxStamps};
use cadence_base::{RequestRecord, StampClock};
use tokio::time::Instant;

/// One request's stamping state.
#[derive(Debug, Default)]
pub struct Stamper {
    stamps: Option<RxStamps>,
    /// The socket read of the last frame that carried a chunk, and whether that read
    /// was already counted as a multi-event read.
    last_read: Option<(u64, bool)>,
    /// The record's chunk count at the last [`Stamper::after_feed`] and the time of its
    /// last chunk then: the floor of the next frame's time without a load of the
    /// chunks' tail, whose cache line is cold after a stream's quiet spell (a stall on
    /// every read). Used only while the count still matches.
    tail: (usize, u64),
}

/// One frame's time and what it tells the record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameTime {
    /// The frame's time, ns since the run's start.
    pub t_ns: u64,
    /// User read time − kernel receive time, ns, when the kernel's time was used.
    pub delay_ns: Option<u64>,
    /// The socket read that carried the frame, when known.
    pub read: Option<u64>,
}

impl Stamper {
    /// Stamps with the kernel's times when `stamps` (the response's connection) has
    /// them, and says in `rec` which clock stamps it.
    pub fn new(stamps: Option<&RxStamps>, rec: &mut RequestRecord) -> Stamper {
        let stamps = stamps.filter(|s| s.enabled()).cloned();
        rec.clock = Some(if stamps.is_some() {
            StampClock::Kernel
        } else {
            StampClock::User
        });
        Stamper {
            stamps,
            last_read: None,
            tail: (0, 0),
        }
    }

    /// The time of a frame holding `bytes`, read by the client at `user`.
    pub fn frame_time(
        &self,
        clock: &Clock,
        user: Instant,
        bytes: &[u8],
        rec: &RequestRecord,
    ) -> FrameTime {
        let stamp = self.stamps.as_ref().and_then(|s| s.stamp_for(bytes));
        self.frame_time_of(clock, user, stamp, rec)
    }

    /// The time of a frame whose socket read's stamp the caller already has (`stamp`,
    /// from [`RxStamps::stamp_for`] or a reader that knows its read), read at `user`.
    pub fn frame_time_of(
        &self,
        clock: &Clock,
        user: Instant,
        stamp: Option<crate::RxStamp>,
        rec: &RequestRecord,
    ) -> FrameTime {
        let user_ns = clock.ns_at(user);
        if self.stamps.is_none() {
            return FrameTime {
                t_ns: user_ns,
                delay_ns: None,
                read: None,
            };
        }
        let last = match self.tail {
            (0, _) if rec.chunks.is_empty() => None,
            (n, t) if n == rec.chunks.len() => Some(t),
            _ => rec.chunks.last().map(|c| c.t_ns()),
        };
        let floor = last.into_iter().chain(rec.sent_ns).max();
        let (t_ns, delay_ns) = chunk_time(
            user_ns,
            stamp.map(|s| clock.ns_at(s.arrived)),
            rec.sent_ns.unwrap_or(0),
            floor.unwrap_or(0),
        );
        FrameTime {
            t_ns,
            delay_ns,
            read: stamp.map(|s| s.read),
        }
    }

    /// After the frame's bytes went through the tracker (`chunks_before` = the chunk
    /// count before): each new chunk's read delay, and the multi-event read count.
    pub fn after_feed(&mut self, ft: FrameTime, chunks_before: usize, rec: &mut RequestRecord) {
        // The chunks just pushed are in cache: their tail is remembered for the next frame.
        if let Some(c) = rec.chunks.last() {
            self.tail = (rec.chunks.len(), c.t_ns());
        }
        let added = rec.chunks.len().saturating_sub(chunks_before);
        if added == 0 {
            return;
        }
        if self.stamps.is_some() {
            let us = ft
                .delay_ns
                .map_or(0, |d| u32::try_from(d / 1_000).unwrap_or(u32::MAX));
            // Align with the chunks even if an earlier frame's delays went missing.
            rec.read_delays_us.resize(chunks_before, 0);
            rec.read_delays_us.extend(std::iter::repeat_n(us, added));
        }
        let read = ft.read;
        let multi = match (&mut self.last_read, read) {
            // The same socket read as the last chunk-bearing frame: count it once.
            (Some((last, counted)), Some(r)) if *last == r => !std::mem::replace(counted, true),
            _ => {
                self.last_read = read.map(|r| (r, added > 1));
                added > 1
            }
        };
        if multi {
            rec.counters.multi_event_reads = rec.counters.multi_event_reads.saturating_add(1);
        }
    }
}

/// A frame's time from the user clock's read time and the kernel's receive time
/// (ns since the run's start), and the read delay when the kernel's time is used.
/// The kernel's time is used when it lies between the send and the read: one after
/// the read (the two clocks were read a few ns apart) is the read time with delay 0;
/// one before the send cannot be this response's (FAULTS: a stamp older than the
/// request) and the user clock stands in; one before an earlier chunk of the request
/// (`floor`) is raised to it, so chunk times never go backwards.
pub fn chunk_time(
    user_ns: u64,
    kernel_ns: Option<u64>,
    sent_ns: u64,
    floor_ns: u64,
) -> (u64, Option<u64>) {
    match kernel_ns {
        Some(k) if k >= sent_ns => {
            let t = k.max(floor_ns).min(user_ns);
            (t, Some(user_ns - t))
        }
        _ => (user_ns, None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_base::{Chunk, Outcome};

    /// FAULTS 91.
    #[test]
    fn kernel_time_is_used_between_the_send_and_the_read() {
        // Arrived at 1,000, read at 4,500: stamped 1,000, read delay 3,500.
        assert_eq!(
            chunk_time(4_500, Some(1_000), 500, 500),
            (1_000, Some(3_500))
        );
        // No stamp: the user clock.
        assert_eq!(chunk_time(4_500, None, 500, 500), (4_500, None));
        // A stamp before the send is not this response's: the user clock.
        assert_eq!(chunk_time(4_500, Some(400), 500, 500), (4_500, None));
        // After the read (clock-reading jitter): the read time, no delay.
        assert_eq!(chunk_time(4_500, Some(4_501), 500, 500), (4_500, Some(0)));
        // Before an earlier chunk: raised to it.
        assert_eq!(
            chunk_time(4_500, Some(1_000), 500, 2_000),
            (2_000, Some(2_500))
        );
    }

    /// The floor is the record's last chunk, remembered from the last frame or read
    /// from the record when chunks came in behind the stamper's back.
    #[test]
    fn a_stamp_before_the_last_chunk_is_raised_to_it_remembered_or_not() {
        let clock = crate::Clock::start();
        let at = |ns| clock.origin() + std::time::Duration::from_nanos(ns);
        let stamp = |ns| {
            Some(crate::RxStamp {
                read: 1,
                arrived: at(ns),
                exact: false,
            })
        };
        let mut s = Stamper {
            stamps: Some(RxStamps::default()),
            last_read: None,
            tail: (0, 0),
        };
        let mut rec = RequestRecord::new(0, Outcome::Succeeded);
        rec.sent_ns = Some(1_000);
        let ft = s.frame_time_of(&clock, at(6_000), stamp(5_000), &rec);
        assert_eq!((ft.t_ns, ft.delay_ns), (5_000, Some(1_000)));
        rec.chunks.push(Chunk(ft.t_ns, None));
        s.after_feed(ft, 0, &mut rec);
        assert_eq!(s.tail, (1, 5_000));
        let ft = s.frame_time_of(&clock, at(9_000), stamp(4_000), &rec);
        assert_eq!((ft.t_ns, ft.delay_ns), (5_000, Some(4_000)));
        // A chunk the stamper did not see still floors the next frame.
        rec.chunks.push(Chunk(7_000, None));
        let ft = s.frame_time_of(&clock, at(9_000), stamp(4_000), &rec);
        assert_eq!(ft.t_ns, 7_000);
        // And no chunks: the send time floors (a stamp before it is not this one's).
        let fresh = Stamper {
            stamps: Some(RxStamps::default()),
            last_read: None,
            tail: (3, 9_999),
        };
        let rec = {
            let mut r = RequestRecord::new(0, Outcome::Succeeded);
            r.sent_ns = Some(1_000);
            r
        };
        assert_eq!(
            fresh
                .frame_time_of(&clock, at(6_000), stamp(2_000), &rec)
                .t_ns,
            2_000
        );
    }

    #[test]
    fn delays_follow_the_chunks_and_a_read_with_two_chunks_counts_once() {
        let stamps = RxStamps::default();
        let mut rec = RequestRecord::new(0, Outcome::Succeeded);
        let mut s = Stamper {
            stamps: Some(stamps),
            last_read: None,
            tail: (0, 0),
        };
        let frame = |read, delay| FrameTime {
            t_ns: 0,
            delay_ns: Some(delay),
            read: Some(read),
        };
        // Read 1 carries one chunk in each of two frames, then read 2 two in one frame,
        // then read 3 one.
        for (read, delay, chunks) in [(1, 2_000, 1), (1, 9_000, 1), (2, 5_000, 2), (3, 0, 1)] {
            let before = rec.chunks.len();
            rec.chunks.extend((0..chunks).map(|_| Chunk(1, None)));
            s.after_feed(frame(read, delay), before, &mut rec);
        }
        assert_eq!(rec.read_delays_us, vec![2, 9, 5, 5, 0]);
        assert_eq!(rec.counters.multi_event_reads, 2);
        // A frame without chunks changes nothing.
        s.after_feed(frame(3, 7_000), rec.chunks.len(), &mut rec);
        assert_eq!(rec.read_delays_us.len(), 5);
        assert_eq!(rec.counters.multi_event_reads, 2);
    }

    /// FAULTS 89.
    #[test]
    fn a_connection_without_stamps_says_user() {
        let mut rec = RequestRecord::new(0, Outcome::Succeeded);
        let s = Stamper::new(Some(&RxStamps::default()), &mut rec);
        assert_eq!(rec.clock, Some(StampClock::User));
        assert!(s.stamps.is_none());
        let mut rec = RequestRecord::new(0, Outcome::Succeeded);
        Stamper::new(None, &mut rec);
        assert_eq!(rec.clock, Some(StampClock::User));
    }
}

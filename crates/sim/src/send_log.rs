//! The sim's own record of when it handed each content chunk to the HTTP
//! body: the ground truth a fidelity check compares the client's timestamps
//! against. Collected per stream without locks, pushed once when it ends.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, LineWriter, Write};
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use cadence_base::{Chunk, Outcome, RequestRecord};
use serde::{Deserialize, Serialize};
use tokio::time::Instant;

/// What the sim sent on one streamed request. Times are nanoseconds since the
/// log's epoch ([`SendLog::epoch`], the sim's start), on the monotonic clock.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SentStream {
    /// The request index (arrival order, or the `x-cadence-request` header).
    pub request: u64,
    /// The injected fault's name, if any.
    pub fault: Option<String>,
    /// When each content-bearing chunk was yielded to the body.
    pub chunks_ns: Vec<u64>,
    /// Tokens in each of those chunks (same length as `chunks_ns`).
    pub tokens: Vec<u32>,
    /// When the request was received.
    #[serde(default)]
    pub received_ns: u64,
    /// False if the stream was dropped before its planned end (client gone,
    /// or cut at shutdown).
    #[serde(default)]
    pub finished: bool,
}

impl SentStream {
    /// The sim's view of this stream as a record: its chunks at the times it wrote
    /// them. A stream it could not finish counts as failed, like the client's.
    pub fn record(&self) -> RequestRecord {
        let outcome = if self.finished {
            Outcome::Succeeded
        } else {
            Outcome::Truncated
        };
        let mut rec = RequestRecord::new(self.request, outcome);
        rec.sent_ns = Some(self.received_ns);
        rec.chunks = self
            .chunks_ns
            .iter()
            .zip(
                self.tokens
                    .iter()
                    .map(|&t| Some(t))
                    .chain(std::iter::repeat(None)),
            )
            .map(|(&t, tokens)| Chunk(t, tokens))
            .collect();
        rec.end_ns = rec.last_chunk_ns().or(Some(self.received_ns));
        rec
    }
}

/// Default number of streams kept in memory (the oldest are evicted first).
pub const DEFAULT_CAPACITY: usize = 100_000;

/// A cheap-to-clone handle on the send log.
#[derive(Clone)]
pub struct SendLog {
    inner: Arc<Inner>,
}

struct Inner {
    epoch: Instant,
    capacity: usize,
    memory: Mutex<Memory>,
    file: Mutex<Option<LineWriter<File>>>,
}

#[derive(Default)]
struct Memory {
    streams: VecDeque<SentStream>,
    evicted: u64,
}

impl std::fmt::Debug for SendLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SendLog")
            .field("capacity", &self.inner.capacity)
            .field("len", &self.len())
            .finish_non_exhaustive()
    }
}

impl Default for SendLog {
    fn default() -> Self {
        SendLog::new()
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl SendLog {
    /// An in-memory log keeping the latest [`DEFAULT_CAPACITY`] streams.
    pub fn new() -> Self {
        SendLog::with_capacity(DEFAULT_CAPACITY)
    }

    /// An in-memory log keeping the latest `streams` streams; 0 keeps none
    /// (useful with [`SendLog::with_file`] for very long runs).
    pub fn with_capacity(streams: usize) -> Self {
        SendLog {
            inner: Arc::new(Inner {
                epoch: Instant::now(),
                capacity: streams,
                memory: Mutex::new(Memory::default()),
                file: Mutex::new(None),
            }),
        }
    }

    /// Also appends every finished stream to `path` as one JSON line
    /// (the file is created or truncated). Call before serving.
    pub fn with_file(self, path: impl AsRef<Path>) -> io::Result<Self> {
        let file = File::create(path)?;
        *lock(&self.inner.file) = Some(LineWriter::new(file));
        Ok(self)
    }

    /// The instant all `*_ns` fields count from.
    pub fn epoch(&self) -> std::time::Instant {
        self.inner.epoch.into_std()
    }

    /// Nanoseconds from the epoch to now.
    pub fn now_ns(&self) -> u64 {
        self.ns_at(Instant::now())
    }

    pub(crate) fn ns_at(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.inner.epoch).as_nanos()).unwrap_or(u64::MAX)
    }

    /// The streams in memory, oldest first.
    pub fn snapshot(&self) -> Vec<SentStream> {
        lock(&self.inner.memory).streams.iter().cloned().collect()
    }

    /// Streams in memory.
    pub fn len(&self) -> usize {
        lock(&self.inner.memory).streams.len()
    }

    /// Whether no stream is in memory.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Streams dropped from memory because the capacity was reached.
    pub fn evicted(&self) -> u64 {
        lock(&self.inner.memory).evicted
    }

    /// Empties the in-memory log (the file, if any, is kept).
    pub fn clear(&self) {
        let mut m = lock(&self.inner.memory);
        m.streams.clear();
        m.evicted = 0;
    }

    /// Records one finished (or abandoned) stream.
    pub fn push(&self, stream: SentStream) {
        let mut file = lock(&self.inner.file);
        if let Some(w) = file.as_mut() {
            let written = serde_json::to_writer(&mut *w, &stream)
                .map_err(io::Error::from)
                .and_then(|()| w.write_all(b"\n"));
            if let Err(e) = written {
                tracing::warn!("send log file write failed, file logging stops: {e}");
                *file = None;
            }
        }
        drop(file);
        if self.inner.capacity == 0 {
            return;
        }
        let mut m = lock(&self.inner.memory);
        if m.streams.len() >= self.inner.capacity {
            m.streams.pop_front();
            m.evicted += 1;
        }
        m.streams.push_back(stream);
    }

    /// Flushes the file sink, if any.
    pub fn flush(&self) -> io::Result<()> {
        match lock(&self.inner.file).as_mut() {
            Some(w) => w.flush(),
            None => Ok(()),
        }
    }
}

/// Collects one stream's send times locally and pushes them to the log once:
/// explicitly at the planned end, or on drop if the body was abandoned.
pub(crate) struct Recorder {
    log: SendLog,
    entry: Option<SentStream>,
    /// Speculation's counters, counted as the chunks leave.
    spec: Option<crate::spec_metrics::Tally>,
    /// Disaggregation's KV transfer, observed as the first chunk leaves.
    transfer: Option<crate::pd_metrics::Pending>,
}

impl Recorder {
    pub(crate) fn new(log: SendLog, request: u64, fault: Option<&str>, received: Instant) -> Self {
        let received_ns = log.ns_at(received);
        Recorder {
            log,
            entry: Some(SentStream {
                request,
                fault: fault.map(str::to_owned),
                chunks_ns: Vec::new(),
                tokens: Vec::new(),
                received_ns,
                finished: false,
            }),
            spec: None,
            transfer: None,
        }
    }

    /// Counts each chunk after the first as a speculation step on `spec`.
    pub(crate) fn speculating(mut self, spec: Option<crate::spec_metrics::Tally>) -> Self {
        self.spec = spec;
        self
    }

    /// Observes `transfer` as the first content chunk leaves.
    pub(crate) fn transferring(mut self, transfer: Option<crate::pd_metrics::Pending>) -> Self {
        self.transfer = transfer;
        self
    }

    /// Stamps the content chunks (their token counts) of the frame being
    /// yielded right now.
    pub(crate) fn sent(&mut self, tokens: &[u32]) {
        if tokens.is_empty() {
            return;
        }
        if let Some(spec) = self.spec.as_mut() {
            tokens.iter().for_each(|&t| spec.sent(t));
        }
        if let Some(t) = self.transfer.take() {
            t.done();
        }
        let now = self.log.now_ns();
        if let Some(e) = self.entry.as_mut() {
            for &t in tokens {
                e.chunks_ns.push(now);
                e.tokens.push(t);
            }
        }
    }

    /// Pushes the entry, marking whether the stream reached its planned end.
    pub(crate) fn finish(&mut self, finished: bool) {
        if let Some(mut e) = self.entry.take() {
            e.finished = finished;
            self.log.push(e);
        }
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.finish(false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(request: u64) -> SentStream {
        SentStream {
            request,
            fault: None,
            chunks_ns: vec![1, 2],
            tokens: vec![1, 1],
            received_ns: 0,
            finished: true,
        }
    }

    #[test]
    fn a_sent_stream_reads_as_the_record_of_its_writes() {
        let mut s = entry(5);
        s.received_ns = 1;
        s.tokens = vec![3];
        let r = s.record();
        assert_eq!((r.index, r.outcome), (5, Outcome::Succeeded));
        assert_eq!(r.chunks, [Chunk(1, Some(3)), Chunk(2, None)]);
        assert_eq!((r.sent_ns, r.end_ns), (Some(1), Some(2)));
        s.finished = false;
        s.chunks_ns.clear();
        let r = s.record();
        assert_eq!((r.outcome, r.end_ns), (Outcome::Truncated, Some(1)));
    }

    #[test]
    fn capacity_evicts_the_oldest() {
        let log = SendLog::with_capacity(2);
        for r in 0..3 {
            log.push(entry(r));
        }
        let kept: Vec<u64> = log.snapshot().iter().map(|s| s.request).collect();
        assert_eq!(kept, [1, 2]);
        assert_eq!(log.evicted(), 1);
        let off = SendLog::with_capacity(0);
        off.push(entry(0));
        assert!(off.is_empty());
    }

    #[test]
    fn file_sink_writes_one_json_line_per_stream() {
        let path =
            std::env::temp_dir().join(format!("cadence-sim-sendlog-{}.jsonl", std::process::id()));
        let log = SendLog::with_capacity(0).with_file(&path).unwrap();
        log.push(entry(7));
        log.push(entry(8));
        log.flush().unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        let lines: Vec<SentStream> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(lines, [entry(7), entry(8)]);
    }

    #[test]
    fn a_dropped_recorder_still_logs_what_it_sent() {
        let log = SendLog::new();
        {
            let mut r = Recorder::new(log.clone(), 5, Some("reset"), Instant::now());
            r.sent(&[2]);
        }
        let s = &log.snapshot()[0];
        assert_eq!(
            (s.request, s.tokens.as_slice(), s.finished),
            (5, &[2][..], false)
        );
        assert_eq!(s.fault.as_deref(), Some("reset"));
    }
}

//! The bench's record sinks: the records file, the live progress view, a live view the
//! caller adds (the binary's dashboard) and the level aggregators, owned by the record
//! thread (`cadence_records::thread`).

use crate::progress::Progress;
use cadence_core::{RecordSink, RequestRecord};
use cadence_records::{RecordsConfig, RecordsError, RecordsWriter, SinkError, Sinks, WriterStatus};

/// The bench's sinks: the records file (when asked for), the live progress view, a
/// live view of the caller's (when it adds one), and the level aggregators `L` the
/// report is assembled from.
pub struct BenchSinks<L> {
    /// The records file's writer, when the run writes one.
    pub records: Option<RecordsWriter>,
    /// The progress bar and its counts.
    pub progress: Progress,
    /// What a dashboard draws from, fed here like the rest: the bench does not know how
    /// it is drawn, so the terminal's crates stay out of its build.
    pub live: Option<Box<dyn RecordSink + Send>>,
    /// An exporter of the caller's (`--otlp`: each record a span), fed here like the
    /// rest, on the record thread.
    pub exporter: Option<Box<dyn RecordSink + Send>>,
    /// The level aggregators the report is assembled from.
    pub levels: L,
}

impl<L> BenchSinks<L> {
    /// Opens the records file now, so a bad path fails before any request is sent.
    pub fn new(
        records: Option<RecordsConfig>,
        progress: Progress,
        levels: L,
    ) -> Result<BenchSinks<L>, SinkError> {
        Ok(BenchSinks {
            records: records.map(RecordsWriter::open).transpose()?,
            progress,
            live: None,
            exporter: None,
            levels,
        })
    }

    /// Every record goes to `live` too, on the record thread (never a socket reader's).
    pub fn with_live(mut self, live: impl RecordSink + Send + 'static) -> BenchSinks<L> {
        self.live = Some(Box::new(live));
        self
    }

    /// Every record goes to `exporter` too, on the record thread.
    pub fn with_exporter(mut self, exporter: impl RecordSink + Send + 'static) -> BenchSinks<L> {
        self.exporter = Some(Box::new(exporter));
        self
    }

    /// Where a write error shows up at once (none without a records file).
    pub fn status(&self) -> Option<WriterStatus> {
        self.records.as_ref().map(RecordsWriter::status)
    }

    /// Appends a meta line (a level's or the run's) to the records file.
    pub fn write_line(&mut self, line: &str) {
        if let Some(w) = self.records.as_mut() {
            w.write_line(line);
        }
    }

    /// Closes the records file: the records written, or the first write error. The
    /// aggregators are handed back either way.
    pub fn finish(self) -> (L, Result<u64, RecordsError>) {
        let written = self.records.map_or(Ok(0), RecordsWriter::finish);
        (self.levels, written)
    }
}

impl<L: RecordSink> RecordSink for BenchSinks<L> {
    fn accept(&mut self, record: &RequestRecord) {
        if let Some(w) = self.records.as_mut() {
            w.accept(record);
        }
        self.progress.record(record);
        if let Some(live) = self.live.as_mut() {
            live.accept(record);
        }
        if let Some(exporter) = self.exporter.as_mut() {
            exporter.accept(record);
        }
        self.levels.accept(record);
    }
}

impl<L: RecordSink + Send + 'static> Sinks for BenchSinks<L> {
    fn idle(&mut self) {
        if let Some(w) = self.records.as_mut() {
            w.flush();
        }
    }
}

/// Keeps every record: for callers that need them all (tests, and sources whose
/// consumers still read a `Vec`).
#[derive(Debug, Default, Clone)]
pub struct KeepAll(pub Vec<RequestRecord>);

impl RecordSink for KeepAll {
    fn accept(&mut self, record: &RequestRecord) {
        self.0.push(record.clone());
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_core::{Chunk, Outcome};
    use cadence_records::RecordThread;
    use std::path::Path;
    use std::time::{Duration, Instant};

    fn rec(index: u64) -> RequestRecord {
        let mut r = RequestRecord::new(index, Outcome::Succeeded);
        r.sent_ns = Some(index * 1_000);
        r.chunks = vec![Chunk(index * 1_000 + 10, Some(1))];
        r.end_ns = Some(index * 1_000 + 20);
        r
    }

    #[test]
    fn a_full_disk_is_reported_at_once_and_the_run_goes_on() {
        let dev_full = Path::new("/dev/full");
        if !dev_full.exists() {
            return;
        }
        let sinks = BenchSinks::new(
            Some(RecordsConfig::new(dev_full)),
            Progress::new(None, false),
            KeepAll::default(),
        )
        .unwrap();
        let status = sinks.status().unwrap();
        let (tx, thread) = RecordThread::start(sinks).unwrap();
        tx.send(rec(0));
        // The error shows within a flush period or so, with the run still going.
        let until = Instant::now() + Duration::from_secs(10);
        while status.error().is_none() && Instant::now() < until {
            std::thread::sleep(Duration::from_millis(10));
        }
        let e = status.error().expect("reported while the run goes on");
        assert!(e.contains("/dev/full"), "{e}");
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        assert_eq!(rt.block_on(status.failed()), e, "the awaitable form agrees");
        for i in 1..5 {
            tx.send(rec(i));
        }
        drop(tx);
        let (kept, written) = thread.finish().unwrap().finish();
        assert_eq!(
            kept.0.len(),
            5,
            "every record still reached the other sinks"
        );
        assert!(written.unwrap_err().to_string().contains("/dev/full"));
    }

    #[test]
    fn a_live_view_gets_every_record_with_the_progress_line_hidden() {
        let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let into = seen.clone();
        let sinks = BenchSinks::new(None, Progress::new(None, false), KeepAll::default())
            .unwrap()
            .with_live(move |r: &RequestRecord| into.lock().unwrap().push(r.index));
        let (tx, thread) = RecordThread::start(sinks).unwrap();
        for i in 0..3 {
            tx.send(rec(i));
        }
        drop(tx);
        let (kept, written) = thread.finish().unwrap().finish();
        assert_eq!(*seen.lock().unwrap(), vec![0, 1, 2]);
        assert_eq!(kept.0.len(), 3, "and so did the aggregators");
        assert_eq!(written.unwrap(), 0);
    }
}

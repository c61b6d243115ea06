//! The rows a watch store keeps, a probe's aggregates and each of its requests: the
//! model both stores (SQLite, PostgreSQL) and their one column list read and write.

use std::collections::BTreeMap;

/// One probe's aggregates, as stored.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct ProbeRow {
    /// Assigned on insert (0 before).
    pub id: i64,
    /// The target's name.
    pub target: String,
    /// When the probe started (Unix ms).
    pub started_ms: i64,
    /// When it ended (Unix ms).
    pub ended_ms: i64,
    /// Requests sent.
    pub sent: u64,
    /// Requests that succeeded.
    pub succeeded: u64,
    /// Failed requests over every class (`failed_by_class` sums to it).
    pub failed: u64,
    /// Ended by the probe's deadline.
    pub aborted: u64,
    /// Failed requests by outcome class.
    pub failed_by_class: BTreeMap<String, u64>,
    /// TTFT p50 over the probe's requests (ms).
    pub ttft_p50_ms: Option<f64>,
    /// TTFT p99 (ms).
    pub ttft_p99_ms: Option<f64>,
    /// ITL p50 over every gap of the probe (ms).
    pub itl_p50_ms: Option<f64>,
    /// ITL p99 (ms).
    pub itl_p99_ms: Option<f64>,
    /// The median of its requests' output speed (tokens/s).
    pub output_tok_s: Option<f64>,
    /// Whether the probe met every SLO and the error ceiling.
    pub slo_ok: bool,
    /// Each SLO and error check with its observed value, in words (JSON list).
    pub slo_detail: Vec<String>,
    /// The clock self-check: which clock stamped the chunks (`kernel`, `user`, or
    /// `mixed`), the p99 of the client's read delay (user read time − kernel receive
    /// time) and of its event loop's lag during the probe. `None`: not measured.
    pub clock: Option<String>,
    /// The p99 of the client's read delay (ms).
    pub read_delay_p99_ms: Option<f64>,
    /// The p99 of the client's event-loop lag during the probe (ms).
    pub loop_lag_p99_ms: Option<f64>,
    /// Socket reads that carried more than one chunk: those chunks share one
    /// timestamp, so each such read adds a gap of 0 to the ITL.
    pub merged_reads: Option<u64>,
}

impl ProbeRow {
    /// The probe's failed and aborted requests by outcome class, most first, in words
    /// (`3 connect_error`, `2 http_5xx, 1 aborted_at_deadline`); `None` when none failed
    /// or was aborted. What a dead target's line and row say.
    pub fn failures(&self) -> Option<String> {
        failures(&self.failed_by_class, self.aborted)
    }
}

/// [`ProbeRow::failures`] of a probe's failed requests by class and its aborted ones
/// (ended by the probe's deadline: `aborted_at_deadline`).
pub fn failures(by_class: &BTreeMap<String, u64>, aborted: u64) -> Option<String> {
    let abort = cadence_core::outcome::Outcome::AbortedAtDeadline.name();
    let mut all: Vec<(&str, u64)> = by_class
        .iter()
        .map(|(c, n)| (c.as_str(), *n))
        .chain(std::iter::once((abort, aborted)))
        .filter(|(_, n)| *n > 0)
        .collect();
    all.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(b.0)));
    let words: Vec<String> = all.iter().map(|(c, n)| format!("{n} {c}")).collect();
    (!words.is_empty()).then(|| words.join(", "))
}

/// One request of a probe.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestRow {
    /// The request's index in its probe.
    pub idx: u64,
    /// Its outcome class (`succeeded`, `http_5xx`, …: the proxy's and the records' names).
    pub outcome: String,
    /// Its time to first token (ms).
    pub ttft_ms: Option<f64>,
    /// Its end-to-end time (ms).
    pub e2e_ms: Option<f64>,
    /// The chunks it received.
    pub chunks: u64,
    /// Its output tokens, when the server said.
    pub output_tokens: Option<u64>,
    /// The median of its inter-token gaps (ms).
    pub itl_p50_ms: Option<f64>,
    /// Its longest inter-token gap (ms).
    pub itl_max_ms: Option<f64>,
}

/// The figures of a probe a standing, an open incident and the by-hour chart take: what
/// a week of probes is read as, a few numbers each (a whole row carries its texts: a
/// week at a probe a second read whole took ~500 MB a page load).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Point {
    /// The probe's row id.
    pub id: i64,
    /// When it started (Unix ms).
    pub started_ms: i64,
    /// Requests sent.
    pub sent: u64,
    /// Requests that succeeded.
    pub succeeded: u64,
    /// TTFT p50 (ms).
    pub ttft_p50_ms: Option<f64>,
    /// ITL p50 (ms).
    pub itl_p50_ms: Option<f64>,
    /// ITL p99 (ms).
    pub itl_p99_ms: Option<f64>,
    /// Median output speed (tokens/s).
    pub output_tok_s: Option<f64>,
    /// Whether it met every SLO.
    pub slo_ok: bool,
}

/// A probe as its [`Point`]: a whole row or the point itself.
pub trait AsPoint {
    /// The probe's figures.
    fn point(&self) -> Point;
}

impl AsPoint for Point {
    fn point(&self) -> Point {
        *self
    }
}

impl AsPoint for ProbeRow {
    fn point(&self) -> Point {
        Point {
            id: self.id,
            started_ms: self.started_ms,
            sent: self.sent,
            succeeded: self.succeeded,
            ttft_p50_ms: self.ttft_p50_ms,
            itl_p50_ms: self.itl_p50_ms,
            itl_p99_ms: self.itl_p99_ms,
            output_tok_s: self.output_tok_s,
            slo_ok: self.slo_ok,
        }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    #[test]
    fn a_probe_names_its_failures_by_class_most_first() {
        let mut p = probe("a", 0, true);
        assert_eq!(p.failures(), None);
        p.failed_by_class = BTreeMap::from([
            ("connect_error".to_string(), 1),
            ("http_5xx".to_string(), 2),
        ]);
        p.aborted = 1;
        assert_eq!(
            p.failures().as_deref(),
            Some("2 http_5xx, 1 aborted_at_deadline, 1 connect_error")
        );
    }

    /// A probe of 4 requests, all succeeded (`ok`) or one failed, for the tests.
    pub(crate) fn probe(target: &str, started_ms: i64, ok: bool) -> ProbeRow {
        ProbeRow {
            id: 0,
            target: target.into(),
            started_ms,
            ended_ms: started_ms + 500,
            sent: 4,
            succeeded: if ok { 4 } else { 3 },
            failed: if ok { 0 } else { 1 },
            aborted: 0,
            failed_by_class: if ok {
                BTreeMap::new()
            } else {
                BTreeMap::from([("http_5xx".to_string(), 1)])
            },
            ttft_p50_ms: Some(20.0),
            ttft_p99_ms: Some(30.0),
            itl_p50_ms: Some(if ok { 5.0 } else { 10.0 }),
            itl_p99_ms: Some(12.0),
            output_tok_s: Some(150.0),
            slo_ok: ok,
            slo_detail: vec!["itl.p50<=8ms: 5 ms".into()],
            clock: Some("kernel".into()),
            read_delay_p99_ms: Some(0.05),
            loop_lag_p99_ms: Some(0.2),
            merged_reads: Some(0),
        }
    }
}

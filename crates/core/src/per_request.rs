//! The per-request formulas: TTFT, E2E, ITL gaps, TPOT and output speed of one
//! record. Public so the level summary, the SLOs, the time series, the proxy's live
//! metrics and the progress line all measure a request the same way.

use crate::{Chunk, RequestRecord};

/// Nanoseconds per millisecond.
pub const NS_PER_MS: f64 = 1e6;
/// Nanoseconds per second.
pub const NS_PER_S: f64 = 1e9;

/// `to − from` in ns, or `None` (and one more inconsistency) when `to < from`.
pub fn span(from: u64, to: u64, bad: &mut u64) -> Option<u64> {
    let d = to.checked_sub(from);
    if d.is_none() {
        *bad += 1;
    }
    d
}

/// Nanoseconds as milliseconds.
pub fn ms(ns: u64) -> f64 {
    ns as f64 / NS_PER_MS
}

// Per-request measurements, shared by `summarize_level`, the SLO module, the time
// series, the proxy and the progress line so one formula lives in one place. Each returns `None` when the record lacks
// a time it needs, or when an interval ends before it starts (which also adds one to
// `bad`, the count of inconsistencies the level reports).

/// TTFT in ms: first content-bearing chunk − sent.
/// Absent when the proxy waited on a slow client before the first chunk (the time is
/// the client's, not the server's; see [`client_wait_before`]).
pub fn ttft_ms(r: &RequestRecord, bad: &mut u64) -> Option<f64> {
    if client_wait_before(r, 0) {
        return None;
    }
    span(r.sent_ns?, r.first_chunk_ns()?, bad).map(ms)
}

/// Whether the wait before chunk `i` holds the proxy waiting for its client to take
/// bytes (`proxy.downstream_gaps`): upstream reads stood still meanwhile, so that gap
/// measures the client, and no formula counts it as the server's.
pub fn client_wait_before(r: &RequestRecord, i: usize) -> bool {
    r.proxy
        .as_ref()
        .is_some_and(|p| p.downstream_gaps.iter().any(|&g| g as usize == i))
}

/// Time to first visible content in ms: first visible content − sent.
pub fn ttft_content_ms(r: &RequestRecord, bad: &mut u64) -> Option<f64> {
    span(r.sent_ns?, r.first_content_ns?, bad).map(ms)
}

/// TTFT as response time in ms: first content-bearing chunk − scheduled.
pub fn ttft_response_ms(r: &RequestRecord, bad: &mut u64) -> Option<f64> {
    span(r.scheduled_ns?, r.first_chunk_ns()?, bad).map(ms)
}

/// E2E in ms: end − sent.
pub fn e2e_ms(r: &RequestRecord, bad: &mut u64) -> Option<f64> {
    span(r.sent_ns?, r.end_ns?, bad).map(ms)
}

/// The tokens a chunk stands for in per-token ITL: its count, or 1 when unknown or 0.
pub fn per_token_weight(c: &Chunk) -> u64 {
    u64::from(c.tokens().filter(|&k| k > 0).unwrap_or(1))
}

/// The request's ITL gaps in ns, each with the later chunk (whose arrival ends it).
/// Gaps that end before they start are skipped (and counted in `bad`), and so are gaps
/// that hold a wait on a slow proxy client ([`client_wait_before`]).
pub fn itl_gaps<'a>(
    r: &'a RequestRecord,
    bad: &'a mut u64,
) -> impl Iterator<Item = (u64, &'a Chunk)> + 'a {
    r.chunks
        .windows(2)
        .enumerate()
        .filter(move |(i, _)| !client_wait_before(r, i + 1))
        .filter_map(move |(_, w)| span(w[0].t_ns(), w[1].t_ns(), bad).map(|g| (g, &w[1])))
}

/// TPOT in ms and output speed in tokens/s of one request, when it qualifies: at least
/// 2 output tokens in at least 2 chunks, all of them kept. Speed is `None` when the last
/// chunk arrived with the first (a zero-length span). A record whose chunks stop at a
/// ceiling ([`RequestRecord::chunks_truncated`]) has none: its last chunk's time is not
/// known, and its tokens span more than its kept chunks.
pub fn tpot_and_speed(r: &RequestRecord, bad: &mut u64) -> Option<(f64, Option<f64>)> {
    let tokens = r.output_token_count().count;
    if r.chunks.len() < 2 || tokens < 2 || r.chunks_truncated() {
        return None;
    }
    let d = span(r.first_chunk_ns()?, r.last_chunk_ns()?, bad)?;
    let steps = (tokens - 1) as f64;
    let speed = (d > 0).then(|| steps * NS_PER_S / d as f64);
    Some((ms(d) / steps, speed))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Outcome, TokenCount, TokenSource};

    const MS: u64 = 1_000_000;

    #[test]
    fn hand_built_record() {
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.scheduled_ns = Some(0);
        r.sent_ns = Some(10 * MS);
        r.chunks = [40, 50, 45, 80].map(|t| Chunk(t * MS, None)).to_vec();
        r.end_ns = Some(90 * MS);
        r.output_tokens = Some(TokenCount {
            count: 5,
            source: TokenSource::Usage,
        });
        let mut bad = 0;
        assert_eq!(ttft_ms(&r, &mut bad), Some(30.0));
        assert_eq!(ttft_response_ms(&r, &mut bad), Some(40.0));
        assert_eq!(e2e_ms(&r, &mut bad), Some(80.0));
        assert_eq!(bad, 0);
        // 50 -> 45 runs backwards: skipped and counted.
        let gaps: Vec<u64> = itl_gaps(&r, &mut bad).map(|(g, _)| g / MS).collect();
        assert_eq!((gaps, bad), (vec![10, 35], 1));
        // (80 - 40) ms over 4 steps; 4 tokens in 40 ms = 100 tokens/s.
        assert_eq!(tpot_and_speed(&r, &mut bad), Some((10.0, Some(100.0))));
        r.sent_ns = Some(95 * MS);
        assert_eq!(e2e_ms(&r, &mut bad), None);
        assert_eq!(bad, 2);
    }

    /// A record whose chunks stop at a ceiling: its ITL covers the chunks kept, its
    /// token count every chunk that arrived, and it has no TPOT (the last chunk's time
    /// is gone).
    #[test]
    fn a_truncated_record_times_its_kept_chunks_and_has_no_tpot() {
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.sent_ns = Some(0);
        r.chunks = [10, 20, 30].map(|t| Chunk(t * MS, None)).to_vec();
        r.end_ns = Some(500 * MS);
        let mut bad = 0;
        assert_eq!(tpot_and_speed(&r, &mut bad), Some((10.0, Some(100.0))));
        r.counters.chunks_not_kept = 7;
        assert!(r.chunks_truncated());
        let gaps: Vec<u64> = itl_gaps(&r, &mut bad).map(|(g, _)| g / MS).collect();
        assert_eq!(gaps, vec![10, 10]);
        assert_eq!(ttft_ms(&r, &mut bad), Some(10.0));
        assert_eq!(r.output_token_count().count, 10);
        assert_eq!(r.output_token_count().source, TokenSource::Chunks);
        assert_eq!(tpot_and_speed(&r, &mut bad), None);
        assert_eq!(bad, 0);
    }

    #[test]
    fn a_wait_on_a_slow_proxy_client_is_no_server_gap() {
        let mut r = RequestRecord::new(0, Outcome::Succeeded);
        r.sent_ns = Some(0);
        r.chunks = [10, 20, 900, 910].map(|t| Chunk(t * MS, None)).to_vec();
        let mut bad = 0;
        let gaps = |r: &RequestRecord, bad: &mut u64| -> Vec<u64> {
            itl_gaps(r, bad).map(|(g, _)| g / MS).collect()
        };
        assert_eq!(gaps(&r, &mut bad), vec![10, 880, 10]);
        // The proxy waited on its client before chunk 2 and before chunk 0.
        r.proxy = Some(Box::new(crate::ProxyInfo {
            request_id: "r".into(),
            method: "POST".into(),
            path: "/v1/chat/completions".into(),
            downstream_wait_ns: 870 * MS,
            downstream_gaps: vec![2],
            model: None,
        }));
        assert_eq!(gaps(&r, &mut bad), vec![10, 10]);
        assert_eq!(ttft_ms(&r, &mut bad), Some(10.0));
        r.proxy.as_mut().unwrap().downstream_gaps = vec![0, 2];
        assert_eq!(ttft_ms(&r, &mut bad), None);
        assert_eq!(bad, 0);
    }
}

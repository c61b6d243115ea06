//! Bounded charts: a window that holds more probes than a chart can show (a day at a
//! probe a second is 86,400) is drawn as time buckets, so a page's size follows the
//! chart's width, not the history's length.

use crate::store::ProbeRow;
use cadence_core::stats::median;

/// The most points a chart over time draws: about one per pixel of its plot.
pub const MAX_POINTS: usize = 600;

/// `probes` (in time order) as at most [`MAX_POINTS`] rows, and the bucket width (ms)
/// when they were merged: each bucket of equal time is one row at its first probe's
/// start, with the median of the probes' p50s, the largest of their p99s (the worst
/// stays visible), and their requests and failures summed. Fewer probes come back as
/// they are, with `None`.
pub fn thin(probes: &[ProbeRow]) -> (Vec<ProbeRow>, Option<i64>) {
    let (Some(first), Some(last)) = (probes.first(), probes.last()) else {
        return (Vec::new(), None);
    };
    if probes.len() <= MAX_POINTS {
        return (probes.to_vec(), None);
    }
    let span = (last.started_ms - first.started_ms).max(1);
    let width = (span / MAX_POINTS as i64 + 1).max(1);
    let mut out: Vec<ProbeRow> = Vec::new();
    let mut bucket: Vec<&ProbeRow> = Vec::new();
    let key = |p: &ProbeRow| (p.started_ms - first.started_ms) / width;
    for p in probes {
        if bucket.first().is_some_and(|b| key(b) != key(p)) {
            out.push(merge(&bucket));
            bucket.clear();
        }
        bucket.push(p);
    }
    out.push(merge(&bucket));
    (out, Some(width))
}

/// One bucket's probes as one row (see [`thin`]).
fn merge(b: &[&ProbeRow]) -> ProbeRow {
    let mut row = b[0].clone();
    let med = |f: fn(&ProbeRow) -> Option<f64>| median(b.iter().filter_map(|p| f(p)).collect());
    let max = |f: fn(&ProbeRow) -> Option<f64>| b.iter().filter_map(|p| f(p)).reduce(f64::max);
    row.ttft_p50_ms = med(|p| p.ttft_p50_ms);
    row.itl_p50_ms = med(|p| p.itl_p50_ms);
    row.ttft_p99_ms = max(|p| p.ttft_p99_ms);
    row.itl_p99_ms = max(|p| p.itl_p99_ms);
    row.sent = b.iter().map(|p| p.sent).sum();
    row.succeeded = b.iter().map(|p| p.succeeded).sum();
    row.failed = b.iter().map(|p| p.failed).sum();
    row.aborted = b.iter().map(|p| p.aborted).sum();
    row.failed_by_class.clear();
    for p in b {
        for (class, n) in &p.failed_by_class {
            *row.failed_by_class.entry(class.clone()).or_default() += n;
        }
    }
    row.slo_ok = b.iter().all(|p| p.slo_ok);
    row.ended_ms = b.iter().map(|p| p.ended_ms).max().unwrap_or(row.ended_ms);
    row
}

/// `spans` (in time order) with those less than `gap` apart joined, the joined ones
/// titled by how many incidents they hold: at most about one span per bucket.
pub fn join_spans(spans: Vec<(f64, f64, String)>, gap: f64) -> Vec<(f64, f64, String)> {
    let mut out: Vec<(f64, f64, String, usize)> = Vec::new();
    for (a, b, title) in spans {
        match out.last_mut() {
            Some(last) if a - last.1 < gap => {
                last.1 = last.1.max(b);
                last.3 += 1;
            }
            _ => out.push((a, b, title, 1)),
        }
    }
    out.into_iter()
        .map(|(a, b, title, n)| {
            let title = if n > 1 {
                format!("{n} incidents, the first: {title}")
            } else {
                title
            };
            (a, b, title)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::tests::probe;

    #[test]
    fn a_long_window_is_merged_into_buckets_and_a_short_one_kept() {
        let few: Vec<ProbeRow> = (0..10).map(|i| probe("a", i * 1_000, true)).collect();
        assert_eq!(thin(&few), (few.clone(), None));
        // 6,000 probes a second apart: 600 buckets of 10 s (span 5,999 s / 600 + 1 ms).
        let many: Vec<ProbeRow> = (0..6_000)
            .map(|i| {
                let mut p = probe("a", i * 1_000, i % 10 != 3);
                p.itl_p99_ms = Some(i as f64);
                p
            })
            .collect();
        let (rows, width) = thin(&many);
        assert_eq!(width, Some(9_999));
        assert!(rows.len() <= MAX_POINTS, "{}", rows.len());
        let first = &rows[0];
        // Probes 0..=9 (the 10th starts at 9,999 ms + 1): one failed of http_5xx.
        assert_eq!((first.sent, first.failed, first.slo_ok), (40, 1, false));
        assert_eq!(first.failed_by_class.get("http_5xx"), Some(&1));
        assert_eq!(first.itl_p99_ms, Some(9.0), "the bucket's worst p99");
        assert_eq!(
            first.itl_p50_ms,
            Some(5.0),
            "the median of nine 5s and a 10"
        );
        let sent: u64 = rows.iter().map(|r| r.sent).sum();
        assert_eq!(sent, 24_000, "every request is in a bucket");
    }

    #[test]
    fn spans_closer_than_the_gap_are_joined() {
        let s = |a: f64, b: f64| (a, b, format!("{a}"));
        let joined = join_spans(vec![s(0.0, 1.0), s(2.0, 3.0), s(10.0, 11.0)], 5.0);
        assert_eq!(
            joined,
            vec![
                (0.0, 3.0, "2 incidents, the first: 0".to_string()),
                (10.0, 11.0, "10".to_string())
            ]
        );
    }
}

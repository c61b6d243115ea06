//! Rows from the shared store are written by other watchers, or by anyone with access to
//! the database: each is checked before a page, a report or `/metrics` shows it. A row
//! that cannot be a probe (a name that is no label, a negative count, a start in the
//! future) is skipped and named, and text is made printable, never passed through raw.

use crate::config::valid_name;
use crate::rows::ProbeRow;

/// How far ahead of this machine's clock another vantage's clock may run: a probe
/// starting later than this is from no clock in working order.
pub const FUTURE_SKEW_MS: i64 = 5 * 60 * 1000;

/// `text` with its control characters escaped (`\u{1b}`): no terminal sequence passes.
pub fn printable(text: &str) -> String {
    if !text.chars().any(char::is_control) {
        return text.to_string();
    }
    text.chars()
        .flat_map(|c| {
            let escaped: Vec<char> = if c.is_control() {
                c.escape_default().collect()
            } else {
                vec![c]
            };
            escaped
        })
        .collect()
}

/// Why a probe of `vantage` cannot be shown as read at `now_ms`, if it cannot.
pub fn check(vantage: &str, p: &ProbeRow, now_ms: i64) -> Result<(), String> {
    if !valid_name(vantage) || !valid_name(&p.target) {
        return Err("a vantage or target name that is not a label".into());
    }
    // Counts read from signed columns: a negative one wraps to past 2^63.
    let counts = [
        p.sent,
        p.succeeded,
        p.failed,
        p.aborted,
        p.merged_reads.unwrap_or(0),
    ];
    if counts.iter().any(|&n| n > i64::MAX as u64)
        || p.failed_by_class.values().any(|&n| n > i64::MAX as u64)
    {
        return Err("a negative count".into());
    }
    if p.succeeded > p.sent || p.failed > p.sent || p.aborted > p.sent {
        return Err("more requests succeeded, failed or aborted than were sent".into());
    }
    if p.started_ms > now_ms + FUTURE_SKEW_MS {
        return Err(format!(
            "a start more than {} min in the future",
            FUTURE_SKEW_MS / 60_000
        ));
    }
    if p.started_ms < 0 || p.ended_ms < p.started_ms {
        return Err("a start before 1970 or an end before its start".into());
    }
    let figures = [
        p.ttft_p50_ms,
        p.ttft_p99_ms,
        p.itl_p50_ms,
        p.itl_p99_ms,
        p.output_tok_s,
        p.read_delay_p99_ms,
        p.loop_lag_p99_ms,
    ];
    if figures.iter().flatten().any(|x| !x.is_finite() || *x < 0.0) {
        return Err("a negative or non-finite latency or speed".into());
    }
    Ok(())
}

/// `p` with every text made [`printable`].
pub fn printable_probe(mut p: ProbeRow) -> ProbeRow {
    p.slo_detail = p.slo_detail.iter().map(|s| printable(s)).collect();
    p.clock = p.clock.as_deref().map(printable);
    p.failed_by_class = p
        .failed_by_class
        .into_iter()
        .map(|(k, n)| (printable(&k), n))
        .collect();
    p
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::tests::probe;

    #[test]
    fn f140_rows_that_cannot_be_probes_are_named() {
        let now = 1_000_000_000;
        let ok = probe("api", now - 1000, true);
        assert_eq!(check("east", &ok, now), Ok(()));
        let why = |p: &ProbeRow, v: &str| check(v, p, now).unwrap_err();
        assert!(why(&ok, "ea\u{1b}[2Jst").contains("not a label"));
        assert!(why(&ok, "<script>").contains("not a label"));
        let mut p = ok.clone();
        p.succeeded = -3i64 as u64;
        assert_eq!(why(&p, "east"), "a negative count");
        let mut p = ok.clone();
        p.succeeded = p.sent + 1;
        assert!(why(&p, "east").contains("more requests succeeded"));
        let mut p = ok.clone();
        p.started_ms = now + FUTURE_SKEW_MS + 1;
        p.ended_ms = p.started_ms + 1;
        assert!(why(&p, "east").contains("5 min in the future"));
        p.started_ms = now + FUTURE_SKEW_MS;
        assert_eq!(check("east", &p, now), Ok(()));
        let mut p = ok.clone();
        p.ttft_p50_ms = Some(f64::NAN);
        assert!(why(&p, "east").contains("non-finite"));
    }

    #[test]
    fn f140_text_from_the_store_is_made_printable() {
        assert_eq!(printable("plain <= 5 ms"), "plain <= 5 ms");
        assert_eq!(printable("a\u{1b}[31mb\n"), "a\\u{1b}[31mb\\n");
        let mut p = probe("api", 0, false);
        p.slo_detail = vec!["\u{1b}]0;x\u{7}".into()];
        p.clock = Some("k\u{1b}".into());
        let p = printable_probe(p);
        assert!(!format!("{:?}{:?}", p.slo_detail, p.clock).contains('\u{1b}'));
    }
}

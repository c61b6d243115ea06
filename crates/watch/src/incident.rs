//! Incidents: spans of consecutive probes of one target that breached its SLOs. An
//! incident opens at the first breaching probe's start and closes at the start of the
//! next passing probe (still open when the latest probe breached). Pure code over
//! probe rows, so the page, the report and the webhook agree on what an incident was.

use crate::store::ProbeRow;

/// A run of probes of one target that breached its SLOs.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Incident {
    /// The target's name.
    pub target: String,
    /// The first breaching probe's start (Unix ms).
    pub start_ms: i64,
    /// The first passing probe's start after it; `None` while it lasts.
    pub end_ms: Option<i64>,
    /// Breaching probes in it.
    pub probes: u64,
    /// What the first breaching probe said about its checks.
    pub cause: Vec<String>,
}

/// The incidents of `probes` (any targets, any order), by target then start.
pub fn incidents(probes: &[ProbeRow]) -> Vec<Incident> {
    let mut sorted: Vec<&ProbeRow> = probes.iter().collect();
    sorted.sort_by(|a, b| {
        (a.target.as_str(), a.started_ms, a.id).cmp(&(b.target.as_str(), b.started_ms, b.id))
    });
    let mut out = Vec::new();
    let mut open: Option<Incident> = None;
    for p in sorted {
        if open.as_ref().is_some_and(|i| i.target != p.target) {
            out.extend(open.take());
        }
        match (&mut open, p.slo_ok) {
            (Some(i), false) => i.probes += 1,
            (Some(i), true) => {
                i.end_ms = Some(p.started_ms);
                out.extend(open.take());
            }
            (None, false) => {
                open = Some(Incident {
                    target: p.target.clone(),
                    start_ms: p.started_ms,
                    end_ms: None,
                    probes: 1,
                    cause: p.slo_detail.clone(),
                })
            }
            (None, true) => {}
        }
    }
    out.extend(open);
    out
}

/// What a new probe does to its target's incident state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The target breached after passing: an incident opened.
    Opened,
    /// The target passed after breaching: its incident closed.
    Closed,
}

/// The change from the previous probe's verdict (`None`: no earlier probe, taken as
/// passing) to this one's.
pub fn change(previous_ok: Option<bool>, now_ok: bool) -> Option<Change> {
    match (previous_ok.unwrap_or(true), now_ok) {
        (true, false) => Some(Change::Opened),
        (false, true) => Some(Change::Closed),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::tests::probe;

    #[test]
    fn consecutive_breaches_make_one_incident_closed_by_the_next_pass() {
        let rows = vec![
            probe("a", 0, true),
            probe("a", 10, false),
            probe("a", 20, false),
            probe("a", 30, true),
            probe("a", 40, false),
            // Another target's rows interleave without touching a's.
            probe("b", 15, false),
            probe("b", 25, true),
        ];
        let inc = incidents(&rows);
        assert_eq!(inc.len(), 3, "{inc:?}");
        assert_eq!(
            (
                inc[0].target.as_str(),
                inc[0].start_ms,
                inc[0].end_ms,
                inc[0].probes
            ),
            ("a", 10, Some(30), 2)
        );
        assert_eq!(
            (inc[1].start_ms, inc[1].end_ms, inc[1].probes),
            (40, None, 1)
        );
        assert_eq!(
            (inc[2].target.as_str(), inc[2].start_ms, inc[2].end_ms),
            ("b", 15, Some(25))
        );
        assert!(!inc[0].cause.is_empty());
    }

    #[test]
    fn all_passing_or_empty_has_no_incident_and_order_does_not_matter() {
        assert!(incidents(&[]).is_empty());
        assert!(incidents(&[probe("a", 0, true), probe("a", 1, true)]).is_empty());
        let rows = vec![probe("a", 30, true), probe("a", 10, false)];
        let inc = incidents(&rows);
        assert_eq!((inc[0].start_ms, inc[0].end_ms), (10, Some(30)));
    }

    #[test]
    fn changes_open_and_close_once() {
        assert_eq!(change(None, false), Some(Change::Opened));
        assert_eq!(change(None, true), None);
        assert_eq!(change(Some(false), false), None);
        assert_eq!(change(Some(false), true), Some(Change::Closed));
        assert_eq!(change(Some(true), true), None);
    }
}

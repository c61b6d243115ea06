//! Comparing vantages: the same target as several watchers (regions, offices, clouds)
//! saw it, from the shared store. Per target and vantage, the day's standing and the
//! gap to the best vantage, and charts with one line per vantage, so "is it the
//! provider or the path to it" has an answer: a server-side slowdown moves every
//! vantage's ITL together; a network or regional one moves one vantage's TTFT alone.

use crate::board::{cell, standing, Standing, HOUR_MS};
use crate::incident::{incidents, Incident};
use crate::shared::VantageProbe;
use crate::store::ProbeRow;
use std::collections::BTreeMap;

/// One target as seen from one vantage.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct VantageRow {
    /// The target's name.
    pub target: String,
    /// The vantage's name.
    pub vantage: String,
    /// Its standing over the last hour.
    pub hour: Standing,
    /// Over the window (the last day on the page; `--since` in a report).
    pub window: Standing,
    /// The window's TTFT p50 and ITL p50 above the best vantage's for this target
    /// (0 for the best; `None` without figures).
    pub ttft_p50_over_best_ms: Option<f64>,
    /// The window's ITL p50 above the best vantage's (ms).
    pub itl_p50_over_best_ms: Option<f64>,
    /// Its latest probe's start (Unix ms), if any.
    pub last_probe_ms: Option<i64>,
    /// Its open incident, if any.
    pub open_incident: Option<Incident>,
}

/// Probes grouped by target, then vantage, each group in time order.
pub fn group(probes: &[VantageProbe]) -> BTreeMap<String, BTreeMap<String, Vec<ProbeRow>>> {
    let mut out: BTreeMap<String, BTreeMap<String, Vec<ProbeRow>>> = BTreeMap::new();
    for p in probes {
        out.entry(p.probe.target.clone())
            .or_default()
            .entry(p.vantage.clone())
            .or_default()
            .push(p.probe.clone());
    }
    for by_vantage in out.values_mut() {
        for list in by_vantage.values_mut() {
            list.sort_by_key(|p| (p.started_ms, p.id));
        }
    }
    out
}

/// The comparison rows of `probes` over the window from `since_ms`, by target then
/// vantage.
pub fn compare(probes: &[VantageProbe], since_ms: i64, now: i64) -> Vec<VantageRow> {
    let mut rows = Vec::new();
    for (target, by_vantage) in group(probes) {
        let mut mine: Vec<VantageRow> = by_vantage
            .iter()
            .map(|(vantage, list)| VantageRow {
                target: target.clone(),
                vantage: vantage.clone(),
                hour: standing(list, now - HOUR_MS),
                window: standing(list, since_ms),
                ttft_p50_over_best_ms: None,
                itl_p50_over_best_ms: None,
                last_probe_ms: list.last().map(|p| p.started_ms),
                open_incident: incidents(list).into_iter().find(|i| i.end_ms.is_none()),
            })
            .collect();
        let best = |f: fn(&Standing) -> Option<f64>, rows: &[VantageRow]| {
            rows.iter()
                .filter_map(|r| f(&r.window))
                .min_by(f64::total_cmp)
        };
        let best_ttft = best(|s| s.ttft_p50_ms, &mine);
        let best_itl = best(|s| s.itl_p50_ms, &mine);
        for r in &mut mine {
            r.ttft_p50_over_best_ms = r.window.ttft_p50_ms.zip(best_ttft).map(|(v, b)| v - b);
            r.itl_p50_over_best_ms = r.window.itl_p50_ms.zip(best_itl).map(|(v, b)| v - b);
        }
        rows.extend(mine);
    }
    rows
}

fn over(v: Option<f64>) -> String {
    match v {
        None => cadence_report::cell::ABSENT.into(),
        Some(x) if x.abs() < 0.005 => "best".into(),
        Some(x) => format!("+{}", cell(Some(x), "ms")),
    }
}

pub(crate) const HEAD: [&str; 10] = [
    "target", "vantage", "probes", "TTFT p50", "vs best", "ITL p50", "vs best", "ITL p99",
    "success", "SLO met",
];

/// The rows' cells, in [`HEAD`]'s order.
pub fn cells(rows: &[VantageRow]) -> Vec<Vec<String>> {
    rows.iter()
        .map(|r| {
            vec![
                r.target.clone(),
                r.vantage.clone(),
                r.window.probes.to_string(),
                cell(r.window.ttft_p50_ms, "ms"),
                over(r.ttft_p50_over_best_ms),
                cell(r.window.itl_p50_ms, "ms"),
                over(r.itl_p50_over_best_ms),
                cell(r.window.itl_p99_ms, "ms"),
                cell(r.window.success_rate, "%"),
                cell(r.window.slo_compliance, "%"),
            ]
        })
        .collect()
}

/// The comparison's column heads, in [`cells`]' order.
pub fn head() -> &'static [&'static str] {
    &HEAD
}

/// Each vantage's incidents of one target (the target column names the vantage).
pub fn incidents_by_vantage(probes: &[VantageProbe]) -> Vec<Incident> {
    let mut out = Vec::new();
    for (_, by_vantage) in group(probes) {
        for (vantage, list) in by_vantage {
            out.extend(incidents(&list).into_iter().map(|mut i| {
                i.target = format!("{} @ {vantage}", i.target);
                i
            }));
        }
    }
    out.sort_by_key(|i| i.start_ms);
    out
}

/// The SLOs of target `name` as every vantage announced them, each once: the bounds its
/// by-vantage charts draw.
pub fn target_slos(vantages: &[crate::shared::Vantage], name: &str) -> Vec<String> {
    let mut slos: Vec<String> = vantages
        .iter()
        .flat_map(|v| v.targets.iter().filter(|t| t.name == name))
        .flat_map(|t| t.slos.iter().cloned())
        .collect();
    slos.sort();
    slos.dedup();
    slos
}

/// Targets whose announced URL differs between vantages, with each vantage's URL:
/// targets are matched by name, so their rows would compare different endpoints. A URL
/// on a vantage's own loopback (its built-in simulator, a local proxy) names that
/// machine alone and is not compared.
pub fn url_mismatches(vantages: &[crate::shared::Vantage]) -> Vec<(String, Vec<(String, String)>)> {
    let mut by_target: BTreeMap<&str, Vec<(String, String)>> = BTreeMap::new();
    for v in vantages {
        for t in comparable(&v.targets) {
            by_target
                .entry(&t.name)
                .or_default()
                .push((v.name.clone(), t.url.clone()));
        }
    }
    by_target
        .into_iter()
        .filter(|(_, urls)| urls.iter().any(|(_, u)| *u != urls[0].1))
        .map(|(name, urls)| (name.to_string(), urls))
        .collect()
}

/// The targets whose URL is not on the announcing machine's loopback.
fn comparable(
    targets: &[crate::board::TargetInfo],
) -> impl Iterator<Item = &crate::board::TargetInfo> {
    targets.iter().filter(|t| {
        let host = t
            .url
            .parse::<http::Uri>()
            .ok()
            .and_then(|u| u.host().map(str::to_string));
        let local = host.is_some_and(|h| {
            let h = h.trim_start_matches('[').trim_end_matches(']');
            h.eq_ignore_ascii_case("localhost")
                || h.parse::<std::net::IpAddr>()
                    .is_ok_and(|ip| ip.is_loopback())
        });
        !local
    })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::board::DAY_MS;
    use crate::rows::tests::probe;

    pub(crate) fn at(
        vantage: &str,
        target: &str,
        t: i64,
        ttft: f64,
        itl: f64,
        ok: bool,
    ) -> VantageProbe {
        let mut p = probe(target, t, ok);
        p.ttft_p50_ms = Some(ttft);
        p.itl_p50_ms = Some(itl);
        VantageProbe {
            vantage: vantage.into(),
            probe: p,
        }
    }

    /// Two vantages of `api` in the hour before `now`: east's TTFT median 21 ms, west's
    /// 100 ms (its last probe breached).
    pub(crate) fn east_and_west(now: i64) -> Vec<VantageProbe> {
        vec![
            at("east", "api", now - 3_000, 20.0, 10.0, true),
            at("east", "api", now - 2_000, 22.0, 10.0, true),
            at("west", "api", now - 2_500, 95.0, 10.5, true),
            at("west", "api", now - 1_500, 105.0, 11.5, false),
        ]
    }

    #[test]
    fn each_vantage_is_measured_against_the_best_one_for_its_target() {
        let now = 10 * HOUR_MS;
        let mut probes = east_and_west(now);
        probes.extend([
            at("west", "other", now - 1_000, 40.0, 5.0, true),
            // Older than a day: not in the day's standing.
            at("east", "api", now - 2 * DAY_MS, 900.0, 90.0, false),
        ]);
        let rows = compare(&probes, now - DAY_MS, now);
        let key: Vec<(&str, &str, u64)> = rows
            .iter()
            .map(|r| (r.target.as_str(), r.vantage.as_str(), r.window.probes))
            .collect();
        assert_eq!(
            key,
            vec![("api", "east", 2), ("api", "west", 2), ("other", "west", 1)]
        );
        // east: TTFT median 21, west 100 → west is 79 ms over the best.
        assert_eq!(rows[0].ttft_p50_over_best_ms, Some(0.0));
        assert_eq!(rows[1].ttft_p50_over_best_ms, Some(79.0));
        assert_eq!(rows[1].itl_p50_over_best_ms, Some(1.0));
        assert_eq!(rows[2].ttft_p50_over_best_ms, Some(0.0), "alone: the best");
        // west's last probe breached: its incident is open; east's old one closed.
        assert!(rows[1].open_incident.is_some() && rows[0].open_incident.is_none());
        let inc = incidents_by_vantage(&probes);
        let names: Vec<&str> = inc.iter().map(|i| i.target.as_str()).collect();
        assert_eq!(names, vec!["api @ east", "api @ west"]);
    }

    #[test]
    fn a_name_that_means_two_urls_is_named() {
        use crate::board::TargetInfo;
        use crate::shared::Vantage;
        let info = |name: &str, url: &str| TargetInfo {
            name: name.into(),
            url: url.into(),
            slos: Vec::new(),
            interval_s: 60.0,
        };
        let v = |name: &str, targets: Vec<TargetInfo>| Vantage {
            name: name.into(),
            targets,
            seen_ms: 0,
            last_probe_ms: None,
        };
        let vs = vec![
            v(
                "east",
                vec![info("api", "https://a/v1"), info("db", "https://d/v1")],
            ),
            v(
                "west",
                vec![info("api", "https://b/v1"), info("db", "https://d/v1")],
            ),
            v("south", vec![info("api", "https://a/v1")]),
            // Each machine's own simulator: nothing to compare.
            v("north", vec![info("sim", "http://127.0.0.1:4000/v1")]),
            v("up", vec![info("sim", "http://[::1]:5000/v1")]),
            v("down", vec![info("sim", "http://localhost:6000/v1")]),
        ];
        let m = url_mismatches(&vs);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].0, "api");
        assert_eq!(
            m[0].1,
            vec![
                ("east".to_string(), "https://a/v1".to_string()),
                ("west".into(), "https://b/v1".into()),
                ("south".into(), "https://a/v1".into()),
            ]
        );
        assert!(url_mismatches(&vs[..1]).is_empty());
    }
}

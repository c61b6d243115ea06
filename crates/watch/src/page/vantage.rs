//! The vantages' markup: the comparison table, a target's charts with a line per
//! vantage, the hub's warning for a name that means two URLs, and the "From every
//! vantage" section a watcher's and the hub's pages carry.

use super::{figure, head, incident_spans, incidents_table, slo_lines, time_chart};
use crate::board::{utc, DAY_MS};
use crate::shared::{Remote, Vantage, VantageProbe};
use crate::store::ProbeRow;
use crate::vantage::{cells, group, url_mismatches, VantageRow, HEAD};
use cadence_report::svg::esc;
use std::collections::BTreeMap;

/// The comparison as an HTML table; `link`: target names link to their pages.
pub fn table_html(rows: &[VantageRow], link: bool) -> String {
    if rows.is_empty() {
        return "<p>No probe in the shared store yet.</p>".into();
    }
    let mut s = String::from("<table class=\"vantages\"><tr>");
    for h in HEAD {
        s.push_str(&format!("<th>{h}</th>"));
    }
    s.push_str("<th>state</th></tr>");
    for (r, c) in rows.iter().zip(cells(rows)) {
        s.push_str("<tr>");
        for (i, v) in c.iter().enumerate() {
            let v = esc(v);
            if i == 0 && link {
                s.push_str(&format!("<td><a href=\"/target/{v}\">{v}</a></td>"));
            } else {
                s.push_str(&format!("<td>{v}</td>"));
            }
        }
        let state = match (&r.open_incident, r.last_probe_ms) {
            (Some(i), _) => format!(
                "<span class=\"bad\">incident since {}</span>",
                utc(i.start_ms)
            ),
            (None, Some(t)) => format!("<span class=\"ok\">ok</span>, last {}", utc(t)),
            (None, None) => "no probe".into(),
        };
        s.push_str(&format!("<td>{state}</td></tr>"));
    }
    s.push_str("</table><p>Each vantage's figures are medians over its probes of the window; <em>vs best</em> is the gap to the vantage with the lowest median for that target. ITL that moves at every vantage together is the server; TTFT that moves at one vantage alone is the path to it.</p>");
    s
}

/// One target's charts with a line per vantage: ITL p50 and TTFT p50 per probe from
/// `since_ms` to `now`, over wall-clock time (UTC), in a grid, each with the bounds of
/// `slos` (the target's, as every vantage announced them) and every vantage's incidents
/// shaded, named by vantage. `probes`: that target's, of every vantage.
pub fn charts(probes: &[VantageProbe], slos: &[String], since_ms: i64, now: i64) -> String {
    use cadence_core::slo::SloMetric;
    use cadence_report::svg::{Overlay, Series, Style, PALETTE};
    let by_vantage: BTreeMap<String, Vec<ProbeRow>> =
        group(probes).into_values().next().unwrap_or_default();
    let windows: Vec<(&String, Vec<ProbeRow>)> = by_vantage
        .iter()
        .map(|(v, list)| {
            let window = list
                .iter()
                .filter(|p| (since_ms..=now).contains(&p.started_ms))
                .cloned()
                .collect();
            (v, window)
        })
        .collect();
    let spans = vantage_spans(&windows, now);
    let mut s = String::from("<div class=\"grid\">");
    for (id, title, y, metric, f) in [
        (
            "itl-by-vantage",
            "ITL p50 per probe, by vantage",
            "ITL p50 (ms)",
            SloMetric::Itl,
            (|p: &ProbeRow| p.itl_p50_ms) as fn(&ProbeRow) -> Option<f64>,
        ),
        (
            "ttft-by-vantage",
            "TTFT p50 per probe, by vantage",
            "TTFT p50 (ms)",
            SloMetric::Ttft,
            |p| p.ttft_p50_ms,
        ),
    ] {
        let series: Vec<Series> = windows
            .iter()
            .enumerate()
            .map(|(i, (v, window))| {
                let mut sr =
                    Series::new((*v).clone(), PALETTE[i % PALETTE.len()], Style::LinePoints);
                // More probes than the chart shows are drawn in time buckets.
                sr.points = super::bucket::thin(window)
                    .0
                    .iter()
                    .filter_map(|p| Some((p.started_ms as f64, f(p)?)))
                    .collect();
                sr
            })
            .collect();
        let over = Overlay {
            x_utc: true,
            y_lines: slo_lines(slos, metric),
            x_spans: spans.clone(),
            ..Overlay::default()
        };
        s.push_str(&figure(
            id,
            title,
            &time_chart(y, series),
            &over,
            "No probe yet.",
        ));
    }
    s.push_str("</div>");
    s
}

/// Each vantage's incidents over its `windows` of probes as shaded spans, the tooltip
/// naming the vantage; spans closer than a chart's time bucket are joined, as on a
/// watcher's own page.
fn vantage_spans(windows: &[(&String, Vec<ProbeRow>)], now: i64) -> Vec<(f64, f64, String)> {
    let mut spans = Vec::new();
    for (v, window) in windows {
        let mine: Vec<(f64, f64, String)> = incident_spans(window, now)
            .into_iter()
            .map(|(a, b, t)| (a, b, format!("{v}: {t}")))
            .collect();
        spans.extend(match super::bucket::thin(window).1 {
            Some(w) => super::bucket::join_spans(mine, w as f64),
            None => mine,
        });
    }
    spans
}

/// The hub's warning for [`url_mismatches`]; empty when every name means one URL.
pub fn mismatch_html(vantages: &[crate::shared::Vantage]) -> String {
    let mut s = String::new();
    for (target, urls) in url_mismatches(vantages) {
        let each: Vec<String> = urls
            .iter()
            .map(|(v, u)| format!("{} → <code>{}</code>", esc(v), esc(u)))
            .collect();
        s.push_str(&format!(
            "<p class=\"bad\">{} is not one endpoint: {}. Targets are matched across vantages by name, so its rows compare different URLs; give each endpoint its own name.</p>",
            esc(&target),
            each.join(", ")
        ));
    }
    s
}

/// "From every vantage": the shared store and, for a watcher that ships, its vantage
/// and shipping state; then the day's comparison (on a target's page, `target` with its
/// SLOs: its charts and incidents too) from `day`, the day's probes of every vantage, or the store's error
/// in words. `day` is `None` while the shipper fails: the comparison waits for the store.
pub fn section(
    remote: &Remote,
    day: Option<Result<&[VantageProbe], &str>>,
    target: Option<(&str, &[String])>,
    now: i64,
) -> String {
    let mut s = String::from("<h2>From every vantage</h2>");
    s.push_str(&format!(
        "<p>Shared store {}{}.</p>",
        esc(remote.config.display()),
        match &remote.ship {
            Some(ship) => {
                use std::sync::atomic::Ordering;
                let pending = ship.pending.load(Ordering::Relaxed);
                let why = ship.last_error();
                format!(
                    "; this watcher is vantage <b>{}</b>: {}",
                    esc(&remote.vantage),
                    match why {
                        Some(e) => format!(
                            "<span class=\"bad\">shipping fails ({}); {pending} probes wait here</span>",
                            esc(&e)
                        ),
                        None if pending > 0 => format!("{pending} probes to ship"),
                        None => "every probe shipped".into(),
                    }
                )
            }
            None => String::new(),
        }
    ));
    let Some(day) = day else {
        s.push_str("<p>The comparison returns when the shared store answers.</p>");
        return s;
    };
    match day {
        Ok(probes) => {
            if let Some((_, slos)) = target {
                s.push_str(&charts(probes, slos, now - DAY_MS, now));
            }
            s.push_str(&table_html(
                &crate::vantage::compare(probes, now - DAY_MS, now),
                target.is_none(),
            ));
            if target.is_some() {
                s.push_str("<h3>Incidents of the last day, by vantage</h3>");
                s.push_str(&incidents_table(&crate::vantage::incidents_by_vantage(
                    probes,
                )));
            }
        }
        Err(e) => s.push_str(&format!(
            "<p class=\"bad\">The shared store does not answer: {}</p>",
            esc(e)
        )),
    }
    s
}

/// `watch serve`'s front page: the vantages (or the store's error in words), then
/// `section`, the comparison of every target.
pub fn hub(now: i64, vantages: Result<&[Vantage], &str>, section: &str) -> String {
    let mut s = head("cadence watch · every vantage", true);
    s.push_str(&format!(
        "<h1>cadence watch · every vantage</h1><p>{} UTC · <a href=\"/api/vantages\">JSON</a></p>",
        utc(now)
    ));
    match vantages {
        Ok(vs) => {
            s.push_str("<table><tr><th>vantage</th><th>targets</th><th>last probe (UTC)</th></tr>");
            for v in vs {
                let names: Vec<String> = v.targets.iter().map(|t| esc(&t.name)).collect();
                s.push_str(&format!(
                    "<tr><td>{}</td><td>{}</td><td>{}</td></tr>",
                    esc(&v.name),
                    names.join(", "),
                    v.last_probe_ms.map_or("none yet".into(), utc)
                ));
            }
            s.push_str("</table>");
            s.push_str(&mismatch_html(vs));
        }
        Err(e) => s.push_str(&format!(
            "<p class=\"bad\">The shared store does not answer: {}</p>",
            esc(e)
        )),
    }
    s.push_str(section);
    s.push_str("</body></html>");
    s
}

/// `watch serve`'s page of one target: the comparison `section` under its name.
pub fn hub_target(name: &str, section: &str) -> String {
    let mut s = head(&format!("cadence watch · {name}"), true);
    s.push_str(&format!(
        "<p><a href=\"/\">every vantage</a></p><h1>{}</h1>",
        esc(name)
    ));
    s.push_str(section);
    s.push_str("</body></html>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::{DAY_MS, HOUR_MS};
    use crate::vantage::tests::at;

    #[test]
    fn the_table_marks_the_best_vantage_and_how_far_the_others_are() {
        let now = 10 * HOUR_MS;
        let probes = crate::vantage::tests::east_and_west(now);
        let rows = crate::vantage::compare(&probes, now - DAY_MS, now);
        let html = table_html(&rows, true);
        assert!(
            html.contains("+79.00 ms") && html.contains("best"),
            "{html}"
        );
        assert_eq!(html.matches("href=\"/target/api\"").count(), 2);
    }

    #[test]
    fn a_name_that_means_two_urls_is_shown_with_each_url() {
        use crate::board::TargetInfo;
        use crate::shared::Vantage;
        let v = |name: &str, url: &str| Vantage {
            name: name.into(),
            targets: vec![TargetInfo {
                name: "api".into(),
                url: url.into(),
                slos: Vec::new(),
                interval_s: 60.0,
            }],
            seen_ms: 0,
            last_probe_ms: None,
        };
        let html = mismatch_html(&[v("east", "https://a/v1"), v("west", "https://b/v1")]);
        assert!(
            html.contains("api is not one endpoint") && html.contains("https://b/v1"),
            "{html}"
        );
        assert!(mismatch_html(&[v("east", "https://a/v1")]).is_empty());
    }

    #[test]
    fn the_charts_draw_one_line_per_vantage() {
        let now = 10 * HOUR_MS;
        let probes = vec![
            at("east", "api", now - 3_000, 20.0, 10.0, true),
            at("east", "api", now - 2_000, 22.0, 10.0, true),
            at("west", "api", now - 2_500, 95.0, 10.5, true),
        ];
        let html = charts(&probes, &[], now - DAY_MS, now);
        assert_eq!(html.matches("<svg").count(), 2);
        // Three probes, each on both charts.
        assert_eq!(html.matches("<circle").count(), 6, "{html}");
        assert!(html.contains("east") && html.contains("west"));
    }

    #[test]
    fn the_charts_draw_the_targets_slos_and_shade_each_vantages_incidents() {
        let now = 10 * HOUR_MS;
        let probes = crate::vantage::tests::east_and_west(now);
        let slos = ["itl.p50<=8ms".to_string(), "ttft.p50<=200ms".to_string()];
        let html = charts(&probes, &slos, now - DAY_MS, now);
        // One bound on each chart, each its own metric's.
        assert_eq!(html.matches("<g class=\"slo\">").count(), 2, "{html}");
        assert!(html.contains("SLO itl.p50&lt;=8ms") && html.contains("SLO ttft.p50&lt;=200ms"));
        // West's last probe breached: its open incident is shaded on both charts, named.
        assert_eq!(html.matches("<title>west: incident").count(), 2, "{html}");
        assert!(!html.contains("east: incident"), "{html}");
        // No SLO given: no line drawn.
        let bare = charts(&probes, &[], now - DAY_MS, now);
        assert!(!bare.contains("<g class=\"slo\">"), "{bare}");
    }

    #[test]
    fn a_targets_slos_are_every_vantages_each_once() {
        use crate::board::TargetInfo;
        use crate::shared::Vantage;
        let v = |name: &str, target: &str, slos: &[&str]| Vantage {
            name: name.into(),
            targets: vec![TargetInfo {
                name: target.into(),
                url: "https://a/v1".into(),
                slos: slos.iter().map(|s| s.to_string()).collect(),
                interval_s: 60.0,
            }],
            seen_ms: 0,
            last_probe_ms: None,
        };
        let vs = [
            v("east", "api", &["itl.p50<=8ms"]),
            v("west", "api", &["itl.p50<=8ms", "ttft.p90<=1s"]),
            v("north", "other", &["e2e.p50<=2s"]),
        ];
        assert_eq!(
            crate::vantage::target_slos(&vs, "api"),
            vec!["itl.p50<=8ms".to_string(), "ttft.p90<=1s".to_string()]
        );
    }
}

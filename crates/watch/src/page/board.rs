//! A watcher's own pages: the leaderboard of its targets, a target's page with the
//! day's charts and incidents, and a probe's page with every request.

use super::{figure, head, incident_spans, incidents_table, slo_lines, time_chart};
use crate::board::{cell, utc, Row, TargetInfo, DAY_MS, HOUR_MS};
use crate::incident::incidents;
use crate::store::{AsPoint, Point, ProbeRow, RequestRow};
use cadence_report::svg::esc;

fn pct_class(v: Option<f64>) -> &'static str {
    match v {
        Some(x) if x < 1.0 => "bad",
        Some(_) => "ok",
        None => "",
    }
}

/// The leaderboard table of `rows`.
pub fn leaderboard_table(rows: &[Row], link: bool) -> String {
    let mut s = String::from(
        "<table><tr><th>target</th><th>TTFT p50</th><th>ITL p50</th><th>ITL p99</th>\
         <th>output tok/s</th><th>success</th><th>SLO hour</th><th>SLO day</th><th>SLO week</th>\
         <th>state</th></tr>",
    );
    for r in rows {
        let d = &r.day;
        let name = esc(&r.target.name);
        let name = if link {
            format!("<a href=\"/target/{name}\">{name}</a>")
        } else {
            name
        };
        let state = match (&r.open_incident, &r.last_probe) {
            (Some(i), _) => format!(
                "<span class=\"bad\">incident since {}</span>",
                utc(i.start_ms)
            ),
            (None, Some(_)) => "<span class=\"ok\">ok</span>".into(),
            (None, None) => "no probe yet".into(),
        };
        let state = match r.last_probe.as_ref().and_then(ProbeRow::failures) {
            Some(f) => format!(
                "{state} · last probe: <span class=\"bad\">{}</span>",
                esc(&f)
            ),
            None => state,
        };
        s.push_str(&format!(
            "<tr><td class=\"w\">{name}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"{}\">{}</td><td class=\"{}\">{}</td><td class=\"{}\">{}</td><td class=\"w\">{state}</td></tr>",
            cell(d.ttft_p50_ms, "ms"),
            cell(d.itl_p50_ms, "ms"),
            cell(d.itl_p99_ms, "ms"),
            cell(d.output_tok_s, ""),
            cell(d.success_rate, "%"),
            pct_class(r.hour.slo_compliance),
            cell(r.hour.slo_compliance, "%"),
            pct_class(r.day.slo_compliance),
            cell(r.day.slo_compliance, "%"),
            pct_class(r.week.slo_compliance),
            cell(r.week.slo_compliance, "%"),
        ));
    }
    s.push_str("</table><p>Figures are medians over the last day's probes of each probe's own figure; success is succeeded over sent requests; SLO is the share of probes that met every SLO.</p>");
    s
}

/// The leaderboard page of `rows` at `now` (Unix ms).
pub fn leaderboard_html(rows: &[Row], now: i64) -> String {
    let mut s = head("cadence watch", true);
    s.push_str(&format!(
        "<h1>cadence watch</h1><p>{} targets · {} UTC · <a href=\"/api/targets\">JSON</a> · <a href=\"/metrics\">metrics</a></p>",
        rows.len(),
        utc(now)
    ));
    s.push_str(&leaderboard_table(rows, true));
    s.push_str("</body></html>");
    s
}

/// The day's charts of one target's probes over wall-clock time (UTC), in a grid: ITL
/// p50 and p99, TTFT p50 and p99, each with its `slos`' bounds (as written,
/// `itl.p50<=8ms`) and the incidents shaded; failed requests by class when any failed
/// or was aborted, else a line saying none did. `now`: where an open incident ends.
///
/// More probes than a chart shows are merged into time buckets ([`super::bucket::thin`]),
/// and the incidents' spans closer than a bucket joined, so the page stays bounded.
pub fn charts(all: &[ProbeRow], slos: &[String], now: i64) -> String {
    use cadence_core::slo::SloMetric;
    use cadence_report::svg::{Overlay, Series, Style, PALETTE};
    let (thinned, width) = super::bucket::thin(all);
    let probes = &thinned[..];
    let x = |p: &ProbeRow| p.started_ms as f64;
    let series = |name: &str, color: &str, f: fn(&ProbeRow) -> Option<f64>| {
        let mut s = Series::new(name, color, Style::LinePoints);
        s.points = probes.iter().filter_map(|p| Some((x(p), f(p)?))).collect();
        s
    };
    let spans = incident_spans(all, now);
    let spans = match width {
        Some(w) => super::bucket::join_spans(spans, w as f64),
        None => spans,
    };
    let over = |metric: Option<SloMetric>| Overlay {
        x_utc: true,
        y_lines: metric.map_or_else(Vec::new, |m| slo_lines(slos, m)),
        x_spans: spans.clone(),
        ..Overlay::default()
    };
    let itl = time_chart(
        "ITL (ms)",
        vec![
            series("ITL p50", PALETTE[0], |p| p.itl_p50_ms),
            series("ITL p99", PALETTE[1], |p| p.itl_p99_ms),
        ],
    );
    let ttft = time_chart(
        "TTFT (ms)",
        vec![
            series("TTFT p50", PALETTE[2], |p| p.ttft_p50_ms),
            series("TTFT p99", PALETTE[3], |p| p.ttft_p99_ms),
        ],
    );
    let none = "No probe yet.";
    let mut s = String::new();
    if let Some(w) = width {
        s.push_str(&format!(
            "<p class=\"note\">{} probes, drawn in buckets of {}: each point is a bucket's \
             median of its probes' p50 and the largest of their p99, failures summed.</p>",
            all.len(),
            cadence_report::cell::fmt_ms(w as f64)
        ));
    }
    s.push_str("<div class=\"grid\">");
    s.push_str(&figure(
        "itl",
        "ITL per probe",
        &itl,
        &over(Some(SloMetric::Itl)),
        none,
    ));
    s.push_str(&figure(
        "ttft",
        "TTFT per probe",
        &ttft,
        &over(Some(SloMetric::Ttft)),
        none,
    ));
    let failing = probes.iter().any(|p| p.failed > 0 || p.aborted > 0);
    if failing {
        let errors = time_chart("failed requests per probe", failed_by_class(probes, x));
        s.push_str(&figure(
            "failed",
            "Failed requests per probe, by outcome class",
            &errors,
            &over(None),
            none,
        ));
    }
    s.push_str("</div>");
    if !failing && !probes.is_empty() {
        s.push_str(&format!(
            "<p class=\"note\">No request failed or was aborted in these {} probes.</p>",
            all.len()
        ));
    }
    s
}

/// Failed requests per probe as stacked bars, one series per outcome class that failed
/// a request of `probes` (their `failed_by_class`), then `aborted_at_deadline` (ended
/// by the probe's deadline), under the outcome names the records and the proxy use.
fn failed_by_class(
    probes: &[ProbeRow],
    x: impl Fn(&ProbeRow) -> f64,
) -> Vec<cadence_report::svg::Series> {
    use cadence_report::svg::{Series, Style, PALETTE};
    let classes: std::collections::BTreeSet<&str> = probes
        .iter()
        .flat_map(|p| p.failed_by_class.iter())
        .filter(|(_, &n)| n > 0)
        .map(|(class, _)| class.as_str())
        .collect();
    let mut out: Vec<Series> = classes
        .into_iter()
        .enumerate()
        .map(|(i, class)| {
            let mut s = Series::new(class, PALETTE[(4 + i) % PALETTE.len()], Style::Stacked);
            s.points = probes
                .iter()
                .map(|p| {
                    (
                        x(p),
                        p.failed_by_class.get(class).copied().unwrap_or(0) as f64,
                    )
                })
                .collect();
            s
        })
        .collect();
    let abort = cadence_core::outcome::Outcome::AbortedAtDeadline.name();
    let mut aborted = Series::new(abort, "#777", Style::Stacked);
    aborted.points = probes.iter().map(|p| (x(p), p.aborted as f64)).collect();
    out.push(aborted);
    out
}

/// ITL by hour of day (UTC) across the days of `probes`: per hour, the median of the
/// probes' ITL p50 and of their p99. A provider that batches more users at its busy
/// hours shows here as a hump at the same hours every day.
pub fn by_hour_chart<P: AsPoint>(probes: &[P]) -> cadence_report::svg::Chart {
    use cadence_report::svg::{Chart, Series, Style, PALETTE};
    let hour = |p: &Point| (p.started_ms.rem_euclid(DAY_MS) / HOUR_MS) as usize;
    let mut p50: Vec<Vec<f64>> = vec![Vec::new(); 24];
    let mut p99: Vec<Vec<f64>> = vec![Vec::new(); 24];
    for p in probes.iter().map(AsPoint::point) {
        p50[hour(&p)].extend(p.itl_p50_ms);
        p99[hour(&p)].extend(p.itl_p99_ms);
    }
    let series = |name: &str, color: &str, by: Vec<Vec<f64>>| {
        let mut s = Series::new(name, color, Style::LinePoints);
        s.points = by
            .into_iter()
            .enumerate()
            .filter_map(|(h, v)| Some((h as f64 + 0.5, cadence_core::stats::median(v)?)))
            .collect();
        s
    };
    Chart {
        x_label: "hour of day (UTC)".into(),
        y_label: "ITL (ms), median over the days".into(),
        x_log: false,
        y_log: false,
        y_zero: true,
        series: vec![
            series("ITL p50", PALETTE[0], p50),
            series("ITL p99", PALETTE[1], p99),
        ],
        x_range: Some((0.0, 24.0)),
    }
}

/// The most incidents a target's page lists (the latest).
pub const MAX_INCIDENTS: usize = 50;

/// `probes`: the target's last day (its charts and incidents); `week`: its last week's
/// figures (the by-hour chart).
pub fn target_html(t: &TargetInfo, probes: &[ProbeRow], week: &[Point], now: i64) -> String {
    let day: Vec<ProbeRow> = probes
        .iter()
        .filter(|p| p.started_ms >= now - DAY_MS)
        .cloned()
        .collect();
    let probes = &day[..];
    let mut s = head(&format!("cadence watch · {}", t.name), true);
    s.push_str(&format!(
        "<p><a href=\"/\">all targets</a></p><h1>{}</h1><p>{} · a probe every {} s · SLOs: {}</p>",
        esc(&t.name),
        esc(&t.url),
        t.interval_s,
        esc(&if t.slos.is_empty() {
            "none (a probe passes when no request fails)".to_string()
        } else {
            t.slos.join(", ")
        })
    ));
    s.push_str(
        "<h2>The last day</h2><p class=\"note\">Each point is a probe, at its start (UTC); \
         dashed red lines are the SLOs' bounds, shaded spans the incidents.</p>",
    );
    s.push_str(&charts(probes, &t.slos, now));
    s.push_str("<h2>By hour of day, over the last week</h2><div class=\"grid\">");
    let over = cadence_report::svg::Overlay {
        y_lines: slo_lines(&t.slos, cadence_core::slo::SloMetric::Itl),
        ..Default::default()
    };
    s.push_str(&figure(
        "by-hour",
        "ITL by hour of day (UTC)",
        &by_hour_chart(week),
        &over,
        "No probe yet.",
    ));
    s.push_str("</div>");
    s.push_str("<h2>Incidents of the last day</h2>");
    // The latest incidents: a target that flaps all day has thousands.
    let found = incidents(probes);
    let shown = &found[found.len().saturating_sub(MAX_INCIDENTS)..];
    s.push_str(&incidents_table(shown));
    if shown.len() < found.len() {
        s.push_str(&format!(
            "<p class=\"note\">The latest {} of {} incidents; <code>cadence watch report</code> lists every one.</p>",
            shown.len(),
            found.len()
        ));
    }
    s.push_str("<h2>Recent probes</h2><table><tr><th>start (UTC)</th><th>ok/sent</th><th>TTFT p50</th><th>ITL p50</th><th>ITL p99</th><th>tok/s</th><th>client</th><th>SLO</th></tr>");
    for p in probes.iter().rev().take(20) {
        let (client_class, client) = client_check(p);
        s.push_str(&format!(
            "<tr><td><a href=\"/target/{}/probe/{}\">{}</a></td><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"w {client_class}\">{}</td><td class=\"w {}\">{}</td></tr>",
            esc(&p.target),
            p.id,
            utc(p.started_ms),
            p.succeeded,
            p.sent,
            cell(p.ttft_p50_ms, "ms"),
            cell(p.itl_p50_ms, "ms"),
            cell(p.itl_p99_ms, "ms"),
            cell(p.output_tok_s, ""),
            esc(&client),
            if p.slo_ok { "ok" } else { "bad" },
            esc(&if p.slo_ok { "ok".to_string() } else { p.slo_detail.join("; ") })
        ));
    }
    s.push_str("</table><p><em>client</em>: the probe's clock self-check: which clock stamped the chunks, and the p99 of the watcher's event-loop lag and of its read delay. A lag above 5 ms (marked) means the watcher, not the target, may have been slow: its figures may be late by up to that much. Merged reads carried several chunks at once: their chunks share one time, a gap of 0 each.</p></body></html>");
    s
}

/// A probe's page: its figures, its verdict and every request's.
pub fn probe_html(p: &ProbeRow, reqs: &[RequestRow]) -> String {
    let mut s = head(
        &format!("cadence watch · {} · probe {}", p.target, p.id),
        false,
    );
    let (_, client) = client_check(p);
    s.push_str(&format!(
        "<p><a href=\"/target/{t}\">{t}</a></p><h1>Probe {id} of {t}</h1>\
         <p>{start} to {end} UTC · {ok}/{sent} succeeded, {aborted} aborted · TTFT p50 {ttft} · ITL p50 {p50}, p99 {p99} · client: {client}</p>\
         <p class=\"{class}\">SLO: {verdict}</p>",
        t = esc(&p.target),
        id = p.id,
        start = utc(p.started_ms),
        end = utc(p.ended_ms),
        ok = p.succeeded,
        sent = p.sent,
        aborted = p.aborted,
        ttft = cell(p.ttft_p50_ms, "ms"),
        p50 = cell(p.itl_p50_ms, "ms"),
        p99 = cell(p.itl_p99_ms, "ms"),
        client = esc(&client),
        class = if p.slo_ok { "ok" } else { "bad" },
        verdict = esc(&if p.slo_detail.is_empty() {
            if p.slo_ok { "met" } else { "breached" }.to_string()
        } else {
            p.slo_detail.join("; ")
        }),
    ));
    s.push_str("<table><tr><th>request</th><th>outcome</th><th>TTFT</th><th>ITL p50</th><th>ITL max</th><th>chunks</th><th>output tokens</th><th>E2E</th></tr>");
    for r in reqs {
        let good = r.outcome == "succeeded";
        s.push_str(&format!(
            "<tr><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            r.idx,
            if good { "ok" } else { "bad" },
            esc(&r.outcome),
            cell(r.ttft_ms, "ms"),
            cell(r.itl_p50_ms, "ms"),
            cell(r.itl_max_ms, "ms"),
            r.chunks,
            r.output_tokens
                .map_or(cadence_report::cell::ABSENT.into(), |n| n.to_string()),
            cell(r.e2e_ms, "ms"),
        ));
    }
    s.push_str("</table></body></html>");
    s
}

/// A probe's clock self-check in a few words, and whether it is a warning (`bad`): the
/// event loop lagged more than `bench` warns at.
pub fn client_check(p: &ProbeRow) -> (&'static str, String) {
    let warn = cadence_core::assemble::LOOP_LAG_WARN.as_secs_f64() * 1e3;
    let mut parts = Vec::new();
    if let Some(c) = &p.clock {
        parts.push(c.clone());
    }
    if let Some(l) = p.loop_lag_p99_ms {
        parts.push(format!("lag {l:.1} ms"));
    }
    if let Some(d) = p.read_delay_p99_ms {
        parts.push(format!("read delay {d:.2} ms"));
    }
    if let Some(n) = p.merged_reads.filter(|n| *n > 0) {
        parts.push(format!("{n} merged reads"));
    }
    let late = p.loop_lag_p99_ms.is_some_and(|l| l > warn);
    let text = if parts.is_empty() {
        cadence_report::cell::ABSENT.to_string()
    } else {
        parts.join(" · ")
    };
    (if late { "bad" } else { "" }, text)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::board::rows;
    use crate::rows::tests::probe;
    use std::collections::BTreeMap;

    fn points(probes: &[ProbeRow]) -> Vec<Point> {
        probes.iter().map(AsPoint::point).collect()
    }

    fn info() -> TargetInfo {
        TargetInfo {
            name: "a".into(),
            url: "http://127.0.0.1:1/v1/chat/completions".into(),
            slos: vec!["itl.p50<=8ms".into()],
            interval_s: 60.0,
        }
    }

    #[test]
    fn a_probe_page_shows_its_verdict_and_each_request() {
        let mut p = probe("a", 1_000, false);
        p.slo_detail = vec!["itl.p99<=50ms: 81.000 ms BREACH".into()];
        let req = |idx: u64, outcome: &str, ttft: Option<f64>| crate::store::RequestRow {
            idx,
            outcome: outcome.into(),
            ttft_ms: ttft,
            e2e_ms: ttft.map(|t| t + 100.0),
            chunks: 4,
            output_tokens: Some(4),
            itl_p50_ms: Some(20.0),
            itl_max_ms: Some(81.0),
        };
        let html = probe_html(
            &p,
            &[req(0, "succeeded", Some(30.0)), req(1, "http_5xx", None)],
        );
        assert!(
            html.contains("class=\"bad\">SLO: itl.p99&lt;=50ms: 81.000 ms BREACH"),
            "{html}"
        );
        assert!(html.contains("<td class=\"ok\">succeeded</td>"), "{html}");
        assert!(html.contains("<td class=\"bad\">http_5xx</td>"), "{html}");
        assert!(
            html.contains("<td>30.00 ms</td><td>20.00 ms</td><td>81.00 ms</td>"),
            "{html}"
        );
        assert!(
            html.contains("<td>–</td>"),
            "the failed request has no TTFT: {html}"
        );
        assert!(html.contains("href=\"/target/a\""), "{html}");
    }

    #[test]
    fn a_probe_whose_client_lagged_is_marked_on_its_row() {
        let mut p = probe("a", 1_000, true);
        assert_eq!(
            client_check(&p),
            ("", "kernel · lag 0.2 ms · read delay 0.05 ms".to_string())
        );
        p.loop_lag_p99_ms = Some(12.0);
        assert_eq!(client_check(&p).0, "bad");
        p.merged_reads = Some(3);
        assert!(client_check(&p).1.ends_with(" · 3 merged reads"));
        let html = target_html(&info(), &[p], &[], 2_000);
        assert!(
            html.contains("<td class=\"w bad\">kernel · lag 12.0 ms"),
            "{html}"
        );
    }

    #[test]
    fn the_target_page_draws_charts_and_fetches_nothing_from_elsewhere() {
        let now = 10 * HOUR_MS;
        let probes = vec![
            probe("a", now - 3 * HOUR_MS, true),
            probe("a", now - 2 * HOUR_MS, false),
            probe("a", now - HOUR_MS, true),
        ];
        let html = target_html(&info(), &probes, &points(&probes), now);
        assert!(html.matches("<svg").count() >= 4, "{html}");
        // The hour-of-day chart has one point per hour that had probes (7, 8, 9 UTC).
        let by_hour = cadence_report::svg::render(&by_hour_chart(&probes)).unwrap();
        assert!(by_hour.contains("hour of day"), "{by_hour}");
        assert_eq!(
            by_hour.matches("<circle").count(),
            6,
            "p50 and p99 at 3 hours"
        );
        assert!(!html.contains("No incident") && html.contains("<td>1</td>"));
        // The SVG namespace is a name, not a fetch.
        let html = html.replace("xmlns=\"http://www.w3.org/2000/svg\"", "");
        for external in [
            "http://",
            "https://",
            "src=",
            "<link",
            "<script src",
            "url(",
            "@import",
            "http-equiv",
        ] {
            // The target's own URL is shown as text, not fetched.
            let n = html.matches(external).count();
            let allowed = usize::from(external == "http://");
            assert!(n <= allowed, "{external} appears {n} times");
        }
        // One inline script, which fetches the page's own URL and nothing else.
        assert_eq!(html.matches("<script").count(), 1);
        assert_eq!(html.matches("fetch(").count(), 1);
        assert!(html.contains("fetch(location.href,"), "{html}");
        assert!(html.contains("watcher unreachable"));
        assert!(
            !head("report", false).contains("<script"),
            "a report is static"
        );
        let rows = rows(&[info()], &probes, now);
        assert_eq!(rows[0].day.probes, 3);
        assert!(rows[0].open_incident.is_none());
        let board = leaderboard_html(&rows, now);
        assert_eq!(board.matches("<script").count(), 1, "the board is live too");
        assert!(
            board.contains("/target/a") && board.contains("66.7 %"),
            "{board}"
        );
    }

    #[test]
    fn the_charts_are_in_utc_with_the_slo_bounds_and_the_incidents_shaded() {
        let now = 1_795_860_000_000; // 2026-11-28 10:00:00 UTC
        let min = 60_000;
        let probes = vec![
            probe("a", now - 30 * min, true),
            probe("a", now - 20 * min, false),
            probe("a", now - 10 * min, true),
        ];
        let slos = ["itl.p50<=8ms", "itl.p99<=50ms", "ttft.p50<=1s"].map(String::from);
        let html = charts(&probes, &slos, now);
        let fig = |id: &str| {
            let f = &html[html.find(&format!("id=\"{id}\"")).unwrap()..];
            f[..f.find("</figure>").unwrap()].to_string()
        };
        let itl = fig("itl");
        assert!(itl.contains("data-slos=\"2\""), "{itl}");
        assert_eq!(itl.matches("<g class=\"slo\">").count(), 2, "{itl}");
        assert!(itl.contains("SLO itl.p50&lt;=8ms") && itl.contains("SLO bound"));
        assert_eq!(fig("ttft").matches("<g class=\"slo\">").count(), 1);
        // The incident: from the breaching probe to the next passing one.
        let spans = &itl[itl.find("<g class=\"spans\">").unwrap()..];
        assert!(
            spans.contains("incident 2026-11-28 09:40:00 to 2026-11-28 09:50:00"),
            "{spans}"
        );
        // Clock times on the axis, the span's dates in its title; no "from now".
        assert!(itl.contains(">09:35<") && itl.contains(">09:45<"), "{itl}");
        assert!(
            itl.contains("probe start, UTC: 2026-11-28 09:30:00 to 2026-11-28 09:50:00"),
            "{itl}"
        );
        assert!(!html.contains("from now"));
    }

    #[test]
    fn a_day_at_a_probe_a_second_makes_a_bounded_page() {
        // 86,400 probes, every fourth breaching: 21,600 incidents.
        let now = 2 * DAY_MS;
        let day: Vec<ProbeRow> = (0..86_400)
            .map(|i| probe("a", now - DAY_MS + i * 1_000, i % 4 != 1))
            .collect();
        let html = target_html(&info(), &day, &points(&day), now);
        assert!(html.len() < 1_000_000, "{} bytes", html.len());
        let itl = &html[html.find("id=\"itl\"").unwrap()..];
        let itl = &itl[..itl.find("</figure>").unwrap()];
        assert!(
            itl.matches("<circle").count() <= 2 * super::super::bucket::MAX_POINTS,
            "{}",
            itl.matches("<circle").count()
        );
        assert!(
            html.contains("86400 probes, drawn in buckets of"),
            "{}",
            &html[..3000]
        );
        assert!(html.contains("The latest 50 of 21600 incidents"));
    }

    #[test]
    fn a_dead_target_names_its_failure_on_the_board() {
        let now = 10 * HOUR_MS;
        let mut dead = probe("a", now - 1_000, false);
        dead.succeeded = 0;
        dead.failed = 4;
        dead.failed_by_class = BTreeMap::from([("connect_error".to_string(), 4)]);
        let rows = rows(&[info()], &[dead], now);
        let board = leaderboard_html(&rows, now);
        assert!(
            board.contains("last probe: <span class=\"bad\">4 connect_error</span>"),
            "{board}"
        );
    }

    #[test]
    fn failed_requests_are_stacked_by_outcome_class_with_aborted() {
        let now = 10 * HOUR_MS;
        let mut mixed = probe("a", now - HOUR_MS, false);
        mixed.failed_by_class =
            BTreeMap::from([("http_5xx".to_string(), 1), ("idle_timeout".to_string(), 2)]);
        mixed.failed = 3;
        mixed.aborted = 1;
        let probes = vec![
            probe("a", now - 3 * HOUR_MS, true),
            probe("a", now - 2 * HOUR_MS, false),
            mixed,
        ];
        let html = charts(&probes, &[], now);
        let failed = &html[html.find("id=\"failed\"").unwrap()..];
        let failed = &failed[..failed.find("</figure>").unwrap()];
        let legend = &failed[failed.find("class=\"legend\"").unwrap()..];
        for class in ["http_5xx", "idle_timeout", "aborted_at_deadline"] {
            assert!(
                legend.contains(class),
                "{class} not in the legend: {legend}"
            );
        }
        let marks = &failed[failed.find(r#"<g class="marks">"#).unwrap()..];
        let marks = &marks[..marks.find("</g>").unwrap()];
        // http_5xx in two probes; idle_timeout and aborted in one: nothing for the
        // passing probe.
        assert_eq!(marks.matches("<rect").count(), 4, "{marks}");
        assert!(marks.contains("<title>idle_timeout: 2</title>"), "{marks}");
        assert!(
            marks.contains("<title>aborted_at_deadline: 1</title>"),
            "{marks}"
        );
        // A day without failures draws no failures chart: a line says none failed.
        let html = charts(&probes[..1], &[], now);
        assert!(!html.contains("id=\"failed\""), "{html}");
        assert!(
            html.contains("No request failed or was aborted in these 1 probes."),
            "{html}"
        );
        assert_eq!(html.matches("<svg").count(), 2);
    }
}

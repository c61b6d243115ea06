//! A watcher's own pages: the leaderboard of its targets, a target's page with the
//! day's charts and incidents, and a probe's page with every request.

use super::{head, hours_chart, incidents_table, legend};
use crate::board::{cell, utc, Row, TargetInfo, DAY_MS, HOUR_MS};
use crate::incident::incidents;
use crate::store::{ProbeRow, RequestRow};
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
        s.push_str(&format!(
            "<tr><td>{name}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td>\
             <td class=\"{}\">{}</td><td class=\"{}\">{}</td><td class=\"{}\">{}</td><td>{state}</td></tr>",
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

/// The day's charts of one target's probes: ITL p50 and p99, and TTFT p50, per probe
/// over hours from `now`.
pub fn charts(probes: &[ProbeRow], now: i64) -> String {
    use cadence_report::svg::{render, Series, Style, PALETTE};
    let x = |p: &ProbeRow| (p.started_ms - now) as f64 / HOUR_MS as f64;
    let series = |name: &str, color: &str, f: fn(&ProbeRow) -> Option<f64>| {
        let mut s = Series::new(name, color, Style::LinePoints);
        s.points = probes.iter().filter_map(|p| Some((x(p), f(p)?))).collect();
        s
    };
    let chart = hours_chart;
    let itl = chart(
        "ITL (ms)",
        vec![
            series("ITL p50", PALETTE[0], |p| p.itl_p50_ms),
            series("ITL p99", PALETTE[1], |p| p.itl_p99_ms),
        ],
    );
    let ttft = chart(
        "TTFT (ms)",
        vec![
            series("TTFT p50", PALETTE[2], |p| p.ttft_p50_ms),
            series("TTFT p99", PALETTE[3], |p| p.ttft_p99_ms),
        ],
    );
    let errors = chart("failed requests per probe", failed_by_class(probes, x));
    let mut s = String::new();
    for (title, c) in [
        ("ITL per probe", itl),
        ("TTFT per probe", ttft),
        ("Failed requests per probe, by outcome class", errors),
    ] {
        s.push_str(&format!("<h3>{title}</h3>{}", legend(&c.series)));
        match render(&c) {
            Some(svg) => s.push_str(&svg),
            None => s.push_str("<p>No probe yet.</p>"),
        }
    }
    s
}

/// Failed requests per probe as stacked bars, one series per outcome class that failed
/// a request of `probes` (their `failed_by_class`), then `aborted` (ended by the probe's
/// deadline), which is there even when nothing failed so the chart still draws.
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
    let mut aborted = Series::new("aborted", "#777", Style::Stacked);
    aborted.points = probes.iter().map(|p| (x(p), p.aborted as f64)).collect();
    out.push(aborted);
    out
}

/// ITL by hour of day (UTC) across the days of `probes`: per hour, the median of the
/// probes' ITL p50 and of their p99. A provider that batches more users at its busy
/// hours shows here as a hump at the same hours every day.
pub fn by_hour_chart(probes: &[ProbeRow]) -> Option<String> {
    use cadence_report::svg::{render, Chart, Series, Style, PALETTE};
    let hour = |p: &ProbeRow| (p.started_ms.rem_euclid(DAY_MS) / HOUR_MS) as usize;
    let mut p50: Vec<Vec<f64>> = vec![Vec::new(); 24];
    let mut p99: Vec<Vec<f64>> = vec![Vec::new(); 24];
    for p in probes {
        p50[hour(p)].extend(p.itl_p50_ms);
        p99[hour(p)].extend(p.itl_p99_ms);
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
    render(&Chart {
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
    })
}

/// `probes`: the target's last week; the charts and incidents are the last day's.
pub fn target_html(t: &TargetInfo, probes: &[ProbeRow], now: i64) -> String {
    let week = probes;
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
    s.push_str("<h2>The last day</h2>");
    s.push_str(&charts(probes, now));
    s.push_str("<h2>By hour of day, over the last week</h2>");
    s.push_str(&format!(
        "<p><span style=\"color:{}\">&#9679; ITL p50</span> &nbsp; <span style=\"color:{}\">&#9679; ITL p99</span></p>",
        cadence_report::svg::PALETTE[0],
        cadence_report::svg::PALETTE[1]
    ));
    s.push_str(&by_hour_chart(week).unwrap_or_else(|| "<p>No probe yet.</p>".into()));
    s.push_str("<h2>Incidents of the last day</h2>");
    s.push_str(&incidents_table(&incidents(probes)));
    s.push_str("<h2>Recent probes</h2><table><tr><th>start (UTC)</th><th>ok/sent</th><th>TTFT p50</th><th>ITL p50</th><th>ITL p99</th><th>tok/s</th><th>client</th><th>SLO</th></tr>");
    for p in probes.iter().rev().take(20) {
        let (client_class, client) = client_check(p);
        s.push_str(&format!(
            "<tr><td><a href=\"/target/{}/probe/{}\">{}</a></td><td>{}/{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"{client_class}\">{}</td><td class=\"{}\">{}</td></tr>",
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
        let html = target_html(&info(), &[p], 2_000);
        assert!(
            html.contains("<td class=\"bad\">kernel · lag 12.0 ms"),
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
        let html = target_html(&info(), &probes, now);
        assert!(html.matches("<svg").count() >= 4, "{html}");
        // The hour-of-day chart has one point per hour that had probes (7, 8, 9 UTC).
        let by_hour = by_hour_chart(&probes).unwrap();
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
    fn failed_requests_are_stacked_by_outcome_class_with_aborted() {
        let now = 10 * HOUR_MS;
        let mut mixed = probe("a", now - HOUR_MS, false);
        mixed.failed_by_class = BTreeMap::from([
            ("http_error".to_string(), 1),
            ("idle_timeout".to_string(), 2),
        ]);
        mixed.failed = 3;
        mixed.aborted = 1;
        let probes = vec![
            probe("a", now - 3 * HOUR_MS, true),
            probe("a", now - 2 * HOUR_MS, false),
            mixed,
        ];
        let html = charts(&probes, now);
        let failed = &html[html.find("by outcome class").unwrap()..];
        let legend = &failed[..failed.find("<svg").unwrap()];
        for class in ["http_error", "idle_timeout", "aborted"] {
            assert!(
                legend.contains(class),
                "{class} not in the legend: {legend}"
            );
        }
        let marks = &failed[failed.find(r#"<g class="marks">"#).unwrap()..];
        // http_error in two probes; idle_timeout and aborted in one: nothing for the
        // passing probe.
        assert_eq!(marks.matches("<rect").count(), 4, "{marks}");
        assert!(marks.contains("<title>idle_timeout: 2</title>"), "{marks}");
        assert!(marks.contains("<title>aborted: 1</title>"), "{marks}");
        // A day without failures still draws the chart, with aborted alone.
        let html = charts(&probes[..1], now);
        let failed = &html[html.find("by outcome class").unwrap()..];
        assert!(
            failed.contains("<svg") && failed.contains("aborted"),
            "{failed}"
        );
        assert!(!failed.contains("http_error"));
    }
}

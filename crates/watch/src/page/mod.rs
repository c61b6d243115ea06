//! The page's markup, apart from the models it shows (`board`, `vantage`) and the
//! routes that serve it (`web`): functions from figures to HTML, so each page is
//! tested with hand-built values. Self-contained: inline style, inline SVG, and a small
//! inline script that updates a page in place.

pub mod board;
pub mod bucket;
pub mod vantage;

use crate::board::utc;
use crate::incident::Incident;
use cadence_core::slo::{Slo, SloMetric};
use cadence_report::svg::{esc, render_with, Chart, Overlay, Series};

/// Every 10 s, fetches the page's own URL (the watcher, same origin) and swaps the body
/// in place, keeping the scroll position; a note in the corner says when it last did,
/// or since when the watcher has not answered (a stopped watcher shows).
const LIVE: &str = "<script>(function(){var lost=null;\
function hms(){return new Date().toISOString().slice(11,19)+' UTC';}\
function note(text,bad){var n=document.getElementById('cadence-live');\
if(!n){n=document.createElement('p');n.id='cadence-live';document.body.prepend(n);}\
n.textContent=text;n.className=bad?'live bad':'live';}\
addEventListener('DOMContentLoaded',function(){note('updated '+hms(),false);});\
setInterval(function(){fetch(location.href,{cache:'no-store'})\
.then(function(r){if(!r.ok){throw new Error(r.status);}return r.text();})\
.then(function(t){var d=new DOMParser().parseFromString(t,'text/html'),x=scrollX,y=scrollY;\
document.body.innerHTML=d.body.innerHTML;scrollTo(x,y);lost=null;note('updated '+hms(),false);})\
.catch(function(){lost=lost||hms();note('watcher unreachable since '+lost,true);});},10000);\
})();</script>";

/// The page's style: the bench HTML report's (its fonts, heading sizes, tables, and
/// charts in a grid of figures about 560 px wide, so a chart's text reads at the size
/// of the page's), and nothing wider than the window.
const CSS: &str = "body{font:14px/1.45 system-ui,-apple-system,\"Segoe UI\",Roboto,sans-serif;\
color:#222;background:#fafafa;max-width:1200px;margin:0 auto;padding:16px 24px 40px}\
h1{font-size:22px;margin:8px 0 2px}\
h2{font-size:17px;margin:28px 0 8px;border-bottom:1px solid #ddd;padding-bottom:4px}\
h3{font-size:15px;margin:18px 0 6px}p{overflow-wrap:anywhere}\
table{border-collapse:collapse;background:#fff;margin:4px 0 8px;font-variant-numeric:tabular-nums}\
th,td{border:1px solid #ddd;padding:3px 8px;text-align:right;white-space:nowrap}th{background:#f0f0f0}\
td:first-child,th:first-child{text-align:left}\
td.w{text-align:left;white-space:normal;overflow-wrap:anywhere;min-width:160px}\
.bad{color:#b00;font-weight:600}.ok{color:#070}.note{color:#666;font-size:12px}\
code{font-size:12px;word-break:break-all}\
.grid{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(540px,100%),1fr));gap:16px}\
figure.chart{background:#fff;border:1px solid #ddd;margin:0;padding:8px 10px;min-width:0}\
figure.chart figcaption{font-weight:600;margin-bottom:2px}\
figure.chart svg{width:100%;height:auto;display:block}\
.legend{font-size:12px;color:#333}.legend span{display:inline-block;margin-right:12px}\
.legend i{display:inline-block;width:14px;height:3px;vertical-align:middle;margin-right:4px}\
.legend i.slo{height:0;border-top:2px dashed #b00}.legend i.span{height:10px;background:#f4c7c3}\
.live{position:fixed;top:6px;right:12px;margin:0;font-size:12px;color:#666;background:#fafafa}\
.live.bad{color:#b00}";

/// The page's head: inline style ([`CSS`]), with `live` the script that updates the
/// page every 10 s ([`LIVE`]); nothing fetched from elsewhere.
pub fn head(title: &str, live: bool) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\"><title>{}</title>\
         <style>{CSS}</style>{}</head><body>",
        esc(title),
        if live { LIVE } else { "" },
    )
}

/// The series' names in their colours, then the overlay's: the dashed SLO line and the
/// incidents' shading, when the chart has them.
pub fn legend(series: &[Series], overlay: &Overlay) -> String {
    let mut s = String::from("<div class=\"legend\">");
    for ser in series.iter().filter(|s| !s.points.is_empty()) {
        s.push_str(&format!(
            "<span><i style=\"background-color:{}\"></i>{}</span>",
            esc(&ser.color),
            esc(&ser.name)
        ));
    }
    if !overlay.y_lines.is_empty() {
        s.push_str("<span><i class=\"slo\"></i>SLO bound</span>");
    }
    if !overlay.x_spans.is_empty() {
        s.push_str("<span><i class=\"span\"></i>incident</span>");
    }
    s.push_str("</div>");
    s
}

/// A chart over wall-clock time with `y` from zero: the series' x are Unix ms, ticked
/// at UTC clock times, the axis titled with the span's first and last probe (so a
/// saved page reads the same later).
pub fn time_chart(y: &str, series: Vec<Series>) -> Chart {
    let xs = || series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let first = xs().fold(f64::INFINITY, f64::min);
    let last = xs().fold(f64::NEG_INFINITY, f64::max);
    let x_label = if first.is_finite() {
        format!(
            "probe start, UTC: {} to {}",
            utc(first as i64),
            utc(last as i64)
        )
    } else {
        "probe start, UTC".into()
    };
    Chart {
        x_label,
        y_label: y.into(),
        x_log: false,
        y_log: false,
        y_zero: true,
        series,
        x_range: None,
    }
}

/// One chart as a figure: its caption, the chart with `overlay` (or `empty` in words
/// when nothing is drawn), its legend. `data-slos` holds the number of SLO lines drawn
/// (what the browser test checks against the `g.slo` elements).
pub fn figure(id: &str, title: &str, chart: &Chart, overlay: &Overlay, empty: &str) -> String {
    let svg = render_with(chart, overlay);
    format!(
        "<figure class=\"chart\" id=\"{}\" data-slos=\"{}\"><figcaption>{}</figcaption>{}{}</figure>",
        esc(id),
        if svg.is_some() { overlay.y_lines.len() } else { 0 },
        esc(title),
        svg.as_deref()
            .unwrap_or(&format!("<p class=\"note\">{}</p>", esc(empty))),
        if svg.is_some() {
            legend(&chart.series, overlay)
        } else {
            String::new()
        },
    )
}

/// The bounds of `slos` (as written, `itl.p50<=8ms`) on `metric`'s distribution, each
/// with its text: the lines of that metric's chart (in ms). Others are not drawn.
pub fn slo_lines(slos: &[String], metric: SloMetric) -> Vec<(f64, String)> {
    slos.iter()
        .filter_map(|t| t.parse::<Slo>().ok())
        .filter(|s| s.metric == metric)
        .map(|s| (s.bound, format!("SLO {}", s.text)))
        .collect()
}

/// The incidents of `probes` as shaded spans: from the first breaching probe's start to
/// the next passing probe's (an open one to `now`).
pub fn incident_spans(probes: &[crate::store::ProbeRow], now: i64) -> Vec<(f64, f64, String)> {
    crate::incident::incidents(probes)
        .into_iter()
        .map(|i| {
            let end = i.end_ms.unwrap_or(now);
            let title = format!(
                "incident {} to {}: {}",
                utc(i.start_ms),
                i.end_ms.map_or("now".into(), utc),
                i.cause.join("; ")
            );
            (i.start_ms as f64, end as f64, title)
        })
        .collect()
}

/// The incidents as a table.
pub fn incidents_table(list: &[Incident]) -> String {
    if list.is_empty() {
        return "<p>No incident.</p>".into();
    }
    let mut s = String::from(
        "<table><tr><th>target</th><th>start (UTC)</th><th>end (UTC)</th><th>probes</th><th>first breach</th></tr>",
    );
    for i in list {
        s.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class=\"w\">{}</td></tr>",
            esc(&i.target),
            utc(i.start_ms),
            i.end_ms.map_or("ongoing".into(), utc),
            i.probes,
            esc(&i.cause.join("; "))
        ));
    }
    s.push_str("</table>");
    s
}

/// `page` with `section` added at the end of its body.
pub fn with_section(page: &str, section: &str) -> String {
    page.replace("</body></html>", &format!("{section}</body></html>"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rows::tests::probe;

    #[test]
    fn a_time_chart_is_in_utc_between_its_first_and_last_probe() {
        use cadence_report::svg::Style;
        let t0: i64 = 1_795_860_000_000;
        let mut s = Series::new("ITL p50", "#000", Style::LinePoints);
        s.points = vec![(t0 as f64, 4.0), ((t0 + 90_000) as f64, 5.0)];
        let c = time_chart("ITL (ms)", vec![s]);
        assert_eq!(
            c.x_label,
            "probe start, UTC: 2026-11-28 10:00:00 to 2026-11-28 10:01:30"
        );
        let svg = render_with(
            &c,
            &Overlay {
                x_utc: true,
                ..Overlay::default()
            },
        )
        .unwrap();
        assert!(
            svg.contains(">10:00:00<") && !svg.contains("from now"),
            "{svg}"
        );
    }

    #[test]
    fn slo_lines_are_the_bounds_of_the_charts_metric() {
        let slos = [
            "itl.p50<=8ms",
            "itl.p99<=50ms",
            "ttft.p50<=1s",
            "e2e.p50<=2s",
        ]
        .map(String::from);
        assert_eq!(
            slo_lines(&slos, SloMetric::Itl),
            vec![
                (8.0, "SLO itl.p50<=8ms".to_string()),
                (50.0, "SLO itl.p99<=50ms".to_string())
            ]
        );
        assert_eq!(slo_lines(&slos, SloMetric::Ttft)[0].0, 1000.0);
    }

    #[test]
    fn incidents_are_shaded_from_the_first_breach_to_the_next_pass_or_now() {
        let probes = vec![
            probe("a", 1_000, true),
            probe("a", 2_000, false),
            probe("a", 3_000, true),
            probe("a", 4_000, false),
        ];
        let spans = incident_spans(&probes, 5_000);
        let at: Vec<(f64, f64)> = spans.iter().map(|s| (s.0, s.1)).collect();
        assert_eq!(at, vec![(2_000.0, 3_000.0), (4_000.0, 5_000.0)]);
        assert!(spans[1].2.contains("to now"), "{spans:?}");
    }
}

//! The page's markup, apart from the models it shows (`board`, `vantage`) and the
//! routes that serve it (`web`): functions from figures to HTML, so each page is
//! tested with hand-built values. Self-contained: inline style, inline SVG, and a small
//! inline script that updates a page in place.

pub mod board;
pub mod vantage;

use crate::board::utc;
use crate::incident::Incident;
use cadence_report::svg::esc;

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

/// The page's head: inline style, with `live` the script that updates the page every
/// 10 s ([`LIVE`]); nothing fetched from elsewhere.
pub fn head(title: &str, live: bool) -> String {
    format!(
        "<!doctype html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{}</title>\
         <style>body{{font:14px system-ui,sans-serif;margin:1.5em;color:#222}}\
         table{{border-collapse:collapse}}td,th{{padding:3px 9px;border-bottom:1px solid #ddd;text-align:right}}\
         td:first-child,th:first-child{{text-align:left}}.bad{{color:#b00;font-weight:600}}.ok{{color:#070}}\
         svg{{max-width:100%;height:auto}}.marks{{}}\
         .live{{position:fixed;top:6px;right:12px;margin:0;font-size:12px;color:#666;background:#fff}}.live.bad{{color:#b00}}</style>{}</head><body>",
        esc(title),
        if live { LIVE } else { "" },
    )
}

/// The series' names in their colours.
pub fn legend(series: &[cadence_report::svg::Series]) -> String {
    let items: Vec<String> = series
        .iter()
        .map(|s| {
            format!(
                "<span style=\"color:{}\">&#9679; {}</span>",
                cadence_report::svg::esc(&s.color),
                cadence_report::svg::esc(&s.name)
            )
        })
        .collect();
    format!("<p>{}</p>", items.join(" &nbsp; "))
}

/// A chart over time with `y` from zero; the series' x are hours from now (negative:
/// the past). Spans under two hours are drawn in minutes, so a watch that started a
/// minute ago reads "-1", not "-0.017".
pub fn hours_chart(
    y: &str,
    mut series: Vec<cadence_report::svg::Series>,
) -> cadence_report::svg::Chart {
    let span = series
        .iter()
        .flat_map(|s| s.points.iter())
        .map(|p| p.0.abs())
        .fold(0.0, f64::max);
    let x_label = if span < 2.0 {
        for s in &mut series {
            for p in &mut s.points {
                p.0 *= 60.0;
            }
        }
        "minutes from now"
    } else {
        "hours from now"
    };
    cadence_report::svg::Chart {
        x_label: x_label.into(),
        y_label: y.into(),
        x_log: false,
        y_log: false,
        y_zero: true,
        series,
        x_range: None,
    }
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
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
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

    #[test]
    fn a_short_span_is_drawn_in_minutes_and_a_long_one_in_hours() {
        use cadence_report::svg::{Series, Style};
        let series = |xs: &[f64]| {
            let mut s = Series::new("a", "#000", Style::LinePoints);
            s.points = xs.iter().map(|x| (*x, 1.0)).collect();
            vec![s]
        };
        let c = hours_chart("y", series(&[-0.5, -0.25]));
        assert_eq!(c.x_label, "minutes from now");
        assert_eq!(c.series[0].points, vec![(-30.0, 1.0), (-15.0, 1.0)]);
        let c = hours_chart("y", series(&[-5.0, -1.0]));
        assert_eq!(c.x_label, "hours from now");
        assert_eq!(c.series[0].points, vec![(-5.0, 1.0), (-1.0, 1.0)]);
    }
}

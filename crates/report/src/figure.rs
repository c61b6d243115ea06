//! One figure of the HTML report: a chart with its title, note and legend, or the
//! reason it has none, in the colours of its levels. The report's charts and its server
//! section both draw theirs this way.

use crate::svg::{self, esc, Chart, Series, PALETTE};
use std::fmt::Write;

/// The colour of level `i` in every chart.
pub(crate) fn level_color(i: usize) -> &'static str {
    PALETTE[i % PALETTE.len()]
}

/// A chart and what the page says around it.
pub(crate) struct Figure {
    pub(crate) id: &'static str,
    pub(crate) title: &'static str,
    pub(crate) note: String,
    pub(crate) chart: Chart,
    /// Why the chart is empty, when it is.
    pub(crate) empty: &'static str,
}

/// The names and colours of a chart's drawn series, each once.
fn legend(series: &[Series]) -> String {
    let mut seen: Vec<(&str, &str, bool)> = Vec::new();
    for s in series {
        if !seen.iter().any(|(n, _, _)| *n == s.name) && !s.points.is_empty() {
            seen.push((&s.name, &s.color, s.dashed));
        }
    }
    let mut out = String::from(r#"<div class="legend">"#);
    for (name, color, dashed) in seen {
        let _ = write!(
            out,
            r#"<span><i{} style="background-color:{color}"></i>{}</span>"#,
            if dashed { r#" class="d""# } else { "" },
            esc(name)
        );
    }
    out.push_str("</div>");
    out
}

/// A chart of `series` with its axes named; a linear y axis starts at zero.
pub(crate) fn chart(
    x_label: &str,
    y_label: &str,
    x_log: bool,
    y_log: bool,
    series: Vec<Series>,
) -> Chart {
    Chart {
        x_label: x_label.into(),
        y_label: y_label.into(),
        x_log,
        y_log,
        y_zero: !y_log,
        series,
        x_range: None,
    }
}

/// One figure: its chart, or the reason it has none.
pub(crate) fn figure(f: &Figure, o: &mut String) {
    figure_with(f, &svg::Overlay::default(), o);
}

/// One figure with `overlay` drawn over its chart.
pub(crate) fn figure_with(f: &Figure, overlay: &svg::Overlay, o: &mut String) {
    let _ = write!(
        o,
        r#"<figure class="chart" id="{}"><figcaption>{}</figcaption><p class="note">{}</p>"#,
        f.id,
        esc(f.title),
        esc(&f.note)
    );
    match svg::render_with(&f.chart, overlay) {
        Some(s) => {
            o.push_str(&s);
            o.push_str(&legend(&f.chart.series));
        }
        None => {
            let _ = write!(o, r#"<p class="warn">No data: {}.</p>"#, esc(f.empty));
        }
    }
    o.push_str("</figure>");
}

//! Hand-built SVG line, point, step, bar and stacked-bar charts for the HTML report: small, with
//! linear or log axes and "nice" ticks, and every drawn mark inside one `g.marks` so a
//! test (and a reader) can tell an empty chart from a drawn one.

use std::fmt::Write;

/// The chart's width in SVG user units (its `viewBox`; it scales to the page).
pub const WIDTH: f64 = 560.0;
/// The chart's height in SVG user units (its `viewBox`).
pub const HEIGHT: f64 = 300.0;
const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 12.0;
const BOTTOM: f64 = 46.0;

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A polyline through the points, in order (a lone point is drawn as a dot).
    Line,
    /// A polyline with a dot at each point.
    LinePoints,
    /// Dots only, unconnected.
    Points,
    /// Points are (lo, hi, height) triples flattened as (lo, height) and (hi, height):
    /// consecutive pairs form horizontal steps.
    Steps,
    /// Bars centred on x, `width` in x units, grouped by series.
    Bars,
    /// Bars on an ordinary x axis (many bars over time), each series' bar stacked on
    /// those of the `Stacked` series before it at the same x; a few pixels wide (less
    /// where bars are close). Zero heights draw nothing.
    Stacked,
}

/// One set of points drawn in one colour and style.
#[derive(Debug, Clone)]
pub struct Series {
    /// Shown as the tooltip (`<title>`) of its marks; escaped.
    pub name: String,
    /// A CSS colour for its stroke or fill (one of [`PALETTE`], usually).
    pub color: String,
    /// (x, y) points in data units, drawn in order; on a log axis, points at or below 0 are
    /// left out.
    pub points: Vec<(f64, f64)>,
    /// How the points are drawn.
    pub style: Style,
    /// Draw lines dashed (line styles only), to tell a series apart from a solid one.
    pub dashed: bool,
    /// Text beside each point (e.g. the level), same length as `points` or empty.
    pub labels: Vec<String>,
}

impl Series {
    /// A series with no points or labels yet, drawn solid.
    pub fn new(name: impl Into<String>, color: &str, style: Style) -> Series {
        Series {
            name: name.into(),
            color: color.to_string(),
            points: Vec::new(),
            style,
            dashed: false,
            labels: Vec::new(),
        }
    }
}

/// One chart: its axes and the series drawn on them, rendered by [`render`].
#[derive(Debug, Clone)]
pub struct Chart {
    /// The x axis' title, below it.
    pub x_label: String,
    /// The y axis' title, beside it.
    pub y_label: String,
    /// A logarithmic x axis (only positive x values are drawn).
    pub x_log: bool,
    /// A logarithmic y axis (only positive y values are drawn).
    pub y_log: bool,
    /// Start the y axis at 0 (linear axes only).
    pub y_zero: bool,
    /// The series, drawn in order (later ones on top).
    pub series: Vec<Series>,
    /// A fixed x range (charts sharing a time axis); `None`: the data's.
    pub x_range: Option<(f64, f64)>,
}

/// Colours for levels and statistics, readable on white and distinct in grey.
pub const PALETTE: [&str; 8] = [
    "#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2",
];

#[derive(Clone, Copy)]
struct Axis {
    lo: f64,
    hi: f64,
    log: bool,
    from: f64,
    to: f64,
}

impl Axis {
    fn t(&self, v: f64) -> f64 {
        let (v, lo, hi) = if self.log {
            (v.max(1e-12).log10(), self.lo.log10(), self.hi.log10())
        } else {
            (v, self.lo, self.hi)
        };
        let f = if hi > lo { (v - lo) / (hi - lo) } else { 0.5 };
        self.from + f * (self.to - self.from)
    }
}

/// The range of `vals` for an axis, padded; log axes keep positive values only.
fn range(vals: impl Iterator<Item = f64>, log: bool, zero: bool) -> Option<(f64, f64)> {
    let v: Vec<f64> = vals
        .filter(|x| x.is_finite() && (!log || *x > 0.0))
        .collect();
    let mut lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let mut hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    if !lo.is_finite() {
        return None;
    }
    if log {
        if hi / lo < 1.5 {
            lo /= 1.25;
            hi *= 1.25;
        }
        lo = 10f64.powf(lo.log10().floor().max((lo / 1.2).log10()));
        hi *= 1.1;
    } else {
        if zero {
            lo = lo.min(0.0);
        }
        if hi == lo {
            hi = lo + lo.abs().max(1.0);
            if !zero {
                lo -= (hi - lo) / 2.0;
            }
        }
        let pad = (hi - lo) * 0.05;
        hi += pad;
        if !zero || lo < 0.0 {
            lo -= pad;
        }
    }
    Some((lo, hi))
}

/// Tick values: 1-2-5 steps on linear axes, decades (and 2, 5 within few decades) on
/// log axes.
fn ticks(lo: f64, hi: f64, log: bool) -> Vec<f64> {
    if log {
        let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
        let mults: &[f64] = if b - a <= 2 { &[1.0, 2.0, 5.0] } else { &[1.0] };
        let mut t = Vec::new();
        for e in a..=b {
            for m in mults {
                let v = m * 10f64.powi(e);
                if v >= lo * 0.999 && v <= hi * 1.001 {
                    t.push(v);
                }
            }
        }
        return t;
    }
    let span = hi - lo;
    if span <= 0.0 {
        return vec![lo];
    }
    let raw = span / 5.0;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| span / s <= 6.0)
        .unwrap_or(10.0 * mag);
    let mut v = (lo / step).ceil() * step;
    let mut t = Vec::new();
    while v <= hi + step * 1e-9 {
        t.push(if v.abs() < step * 1e-9 { 0.0 } else { v });
        v += step;
    }
    t
}

/// A tick label: up to 3 significant digits, no trailing zeros.
pub fn tick_label(v: f64) -> String {
    if v == 0.0 {
        return "0".into();
    }
    let a = v.abs();
    let s = if a >= 100.0 {
        format!("{v:.0}")
    } else if a >= 10.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    };
    if s.contains('.') {
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    } else {
        s
    }
}

/// Escapes text for HTML and SVG.
pub fn esc(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&#39;"),
            c => o.push(c),
        }
    }
    o
}

/// What a chart over time draws besides its series (the watch's charts): a wall-clock
/// x axis, horizontal target lines and shaded spans. [`render`] draws none of them.
#[derive(Debug, Clone, Default)]
pub struct Overlay {
    /// The x values are Unix milliseconds: ticks at round clock times, labelled in UTC
    /// (`HH:MM`, with seconds under a minute's step, with the date over a day's span).
    pub x_utc: bool,
    /// Horizontal lines (an SLO's bound) at y, each with its label, dashed, in a
    /// `g.slo` of its own; the y axis reaches them.
    pub y_lines: Vec<(f64, String)>,
    /// Spans of x shaded behind the marks (an incident), each with its tooltip, in a
    /// `g.spans`; cut to the plot.
    pub x_spans: Vec<(f64, f64, String)>,
    /// Vertical lines (a sweep's knee) at x, each with its label, dashed, in a
    /// `g.knee` of their own; drawn when inside the plot.
    pub x_lines: Vec<(f64, String)>,
}

/// The chart as an `<svg>` element; `None` when no series has a point to draw.
pub fn render(c: &Chart) -> Option<String> {
    render_with(c, &Overlay::default())
}

/// The chart with `o` drawn over it; `None` when no series has a point to draw.
pub fn render_with(c: &Chart, o: &Overlay) -> Option<String> {
    let lines: Vec<f64> = o.y_lines.iter().map(|l| l.0).collect();
    let (x, y, bar_slots) = plot_axes(c, &lines)?;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {HEIGHT}" role="img">"#
    );
    draw_axes(&mut s, c, &x, &y, &bar_slots, o.x_utc);
    draw_spans(&mut s, &o.x_spans, &x);
    s.push_str(r#"<g class="marks">"#);
    let bar_series: Vec<usize> = c
        .series
        .iter()
        .enumerate()
        .filter(|(_, s)| s.style == Style::Bars)
        .map(|(i, _)| i)
        .collect();
    draw_stacked(&mut s, c, &x, &y);
    for (si, ser) in c.series.iter().enumerate() {
        if ser.style == Style::Stacked {
            continue;
        }
        let pts: Vec<(f64, f64)> = ser
            .points
            .iter()
            .filter(|p| {
                p.0.is_finite()
                    && p.1.is_finite()
                    && (!c.x_log || p.0 > 0.0)
                    && (!c.y_log || p.1 > 0.0)
            })
            .map(|&(a, b)| (x.t(a), y.t(b)))
            .collect();
        if pts.is_empty() {
            continue;
        }
        let bars = (
            bar_series.len().max(1),
            bar_series.iter().position(|&i| i == si),
        );
        draw_marks(&mut s, ser, &pts, &x, &y, bars);
        draw_labels(&mut s, ser, &pts);
    }
    s.push_str("</g>");
    draw_lines(&mut s, &o.y_lines, &y);
    draw_x_lines(&mut s, &o.x_lines, &x);
    s.push_str("</svg>");
    Some(s)
}

/// The shaded spans, behind the marks, cut to the plot (at least a pixel wide).
fn draw_spans(s: &mut String, spans: &[(f64, f64, String)], x: &Axis) {
    if spans.is_empty() {
        return;
    }
    s.push_str(r#"<g class="spans">"#);
    for (a, b, title) in spans {
        let (lo, hi) = (x.t(*a).max(LEFT), x.t(*b).min(WIDTH - RIGHT));
        if hi < LEFT || lo > WIDTH - RIGHT {
            continue;
        }
        let _ = write!(
            s,
            r##"<rect x="{lo:.1}" y="{TOP}" width="{:.1}" height="{:.1}" fill="#f4c7c3" fill-opacity="0.55"><title>{}</title></rect>"##,
            (hi - lo).max(1.0),
            HEIGHT - TOP - BOTTOM,
            esc(title)
        );
    }
    s.push_str("</g>");
}

/// The horizontal lines, over the marks, each labelled at the plot's right.
fn draw_lines(s: &mut String, lines: &[(f64, String)], y: &Axis) {
    for (v, label) in lines {
        let py = y.t(*v);
        let _ = write!(
            s,
            r##"<g class="slo"><line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#b00" stroke-width="1.2" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" font-size="10" fill="#b00" text-anchor="end">{}</text></g>"##,
            WIDTH - RIGHT,
            WIDTH - RIGHT - 4.0,
            py - 4.0,
            esc(label)
        );
    }
}

/// The vertical lines, over the marks, each labelled at the plot's top.
fn draw_x_lines(s: &mut String, lines: &[(f64, String)], x: &Axis) {
    for (v, label) in lines {
        let px = x.t(*v);
        if !px.is_finite() || !(LEFT..=WIDTH - RIGHT).contains(&px) {
            continue;
        }
        let _ = write!(
            s,
            r##"<g class="knee"><line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#b00" stroke-width="1.2" stroke-dasharray="6 4"/><text x="{:.1}" y="{:.1}" font-size="10" fill="#b00">{}</text></g>"##,
            HEIGHT - BOTTOM,
            px + 4.0,
            TOP + 10.0,
            esc(label)
        );
    }
}

/// Ticks at round clock times over `lo..hi` (Unix ms), at most about six, with their
/// labels in UTC: `HH:MM:SS` under a minute's step, `MM-DD HH:MM` over a day's span,
/// else `HH:MM`.
pub fn time_ticks(lo: f64, hi: f64) -> Vec<(f64, String)> {
    const S: f64 = 1_000.0;
    const M: f64 = 60.0 * S;
    const H: f64 = 60.0 * M;
    const D: f64 = 24.0 * H;
    let steps = [
        S,
        2.0 * S,
        5.0 * S,
        10.0 * S,
        15.0 * S,
        30.0 * S,
        M,
        2.0 * M,
        5.0 * M,
        10.0 * M,
        15.0 * M,
        30.0 * M,
        H,
        2.0 * H,
        3.0 * H,
        6.0 * H,
        12.0 * H,
        D,
        2.0 * D,
        7.0 * D,
    ];
    let span = hi - lo;
    if span.is_nan() || span <= 0.0 {
        return Vec::new();
    }
    let step = steps
        .iter()
        .copied()
        .find(|st| span / st <= 6.0)
        .unwrap_or_else(|| (span / 6.0 / D).ceil() * D);
    let text = |v: f64| {
        let t = cadence_core::wallclock::format_utc(v as i64);
        if step < M {
            t[11..19].to_string()
        } else if span >= D {
            t[5..16].to_string()
        } else {
            t[11..16].to_string()
        }
    };
    let mut out = Vec::new();
    let mut v = (lo / step).ceil() * step;
    while v <= hi {
        out.push((v, text(v)));
        v += step;
    }
    out
}

/// The plot's axes over every series' points, and the x positions of bars (bars need
/// half a slot of room at each end, and a tick each).
/// `lines`: y values the axis reaches besides the points' (an overlay's lines).
fn plot_axes(c: &Chart, lines: &[f64]) -> Option<(Axis, Axis, Vec<f64>)> {
    let xs = c.series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = c.series.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let ys = ys
        .chain(stack_tops(c).into_iter().map(|p| p.1))
        .chain(lines.iter().copied());
    let (x0, x1) = range(xs, c.x_log, false)?;
    let (x0, x1) = c.x_range.unwrap_or((x0, x1));
    let (y0, y1) = range(ys, c.y_log, c.y_zero && !c.y_log)?;
    let bar_slots = c
        .series
        .iter()
        .filter(|s| s.style == Style::Bars)
        .flat_map(|s| s.points.iter().map(|p| p.0))
        .collect::<Vec<_>>();
    let (x0, x1) = if bar_slots.is_empty() {
        (x0, x1)
    } else {
        let lo = bar_slots.iter().copied().fold(f64::INFINITY, f64::min);
        let hi = bar_slots.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        (lo - 0.6, hi + 0.6)
    };
    let x = Axis {
        lo: x0,
        hi: x1,
        log: c.x_log,
        from: LEFT,
        to: WIDTH - RIGHT,
    };
    let y = Axis {
        lo: y0,
        hi: y1,
        log: c.y_log,
        from: HEIGHT - BOTTOM,
        to: TOP,
    };
    Some((x, y, bar_slots))
}

/// Grid lines, tick labels, the frame and the axis titles.
/// `utc`: the x values are Unix ms, ticked at clock times ([`time_ticks`]).
fn draw_axes(s: &mut String, c: &Chart, x: &Axis, y: &Axis, bar_slots: &[f64], utc: bool) {
    s.push_str(r##"<g class="axes" font-size="11" fill="#444">"##);
    let xt: Vec<(f64, String)> = if utc {
        time_ticks(x.lo, x.hi)
    } else if bar_slots.is_empty() {
        let t = ticks(x.lo, x.hi, c.x_log);
        t.into_iter().map(|v| (v, tick_label(v))).collect()
    } else {
        let mut v: Vec<f64> = bar_slots.to_vec();
        v.sort_by(f64::total_cmp);
        v.dedup();
        v.into_iter().map(|v| (v, tick_label(v))).collect()
    };
    for (v, label) in xt {
        let px = x.t(v);
        let _ = write!(
            s,
            r##"<line x1="{px:.1}" y1="{TOP}" x2="{px:.1}" y2="{:.1}" stroke="#e6e6e6"/><text x="{px:.1}" y="{:.1}" text-anchor="middle">{label}</text>"##,
            HEIGHT - BOTTOM,
            HEIGHT - BOTTOM + 15.0,
        );
    }
    for v in ticks(y.lo, y.hi, c.y_log) {
        let py = y.t(v);
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" y1="{py:.1}" x2="{:.1}" y2="{py:.1}" stroke="#e6e6e6"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            WIDTH - RIGHT,
            LEFT - 6.0,
            py + 4.0,
            tick_label(v)
        );
    }
    let _ = write!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{:.1}" height="{:.1}" fill="none" stroke="#999"/>"##,
        WIDTH - LEFT - RIGHT,
        HEIGHT - TOP - BOTTOM
    );
    let _ = write!(
        s,
        r#"<text x="{:.1}" y="{:.1}" text-anchor="middle" font-size="12">{}</text>"#,
        (LEFT + WIDTH - RIGHT) / 2.0,
        HEIGHT - 8.0,
        esc(&c.x_label)
    );
    let _ = write!(
        s,
        r#"<text transform="translate(14 {:.1}) rotate(-90)" text-anchor="middle" font-size="12">{}</text>"#,
        (TOP + HEIGHT - BOTTOM) / 2.0,
        esc(&c.y_label)
    );
    s.push_str("</g>");
}

/// One series' marks at its plotted points `pts`; `bars` is the number of bar series
/// and this one's place among them.
fn draw_marks(
    s: &mut String,
    ser: &Series,
    pts: &[(f64, f64)],
    x: &Axis,
    y: &Axis,
    bars: (usize, Option<usize>),
) {
    let dash = if ser.dashed {
        r#" stroke-dasharray="5 3""#
    } else {
        ""
    };
    let title = format!("<title>{}</title>", esc(&ser.name));
    match ser.style {
        Style::Line | Style::LinePoints | Style::Steps => {
            let mut d = String::new();
            for (i, (px, py)) in pts.iter().enumerate() {
                let cmd = if i == 0 { 'M' } else { 'L' };
                let _ = write!(d, "{cmd}{px:.1},{py:.1}");
            }
            let _ = write!(
                s,
                r#"<path d="{d}" fill="none" stroke="{}" stroke-width="1.8"{dash}>{title}</path>"#,
                ser.color
            );
            if ser.style == Style::LinePoints || pts.len() == 1 {
                for (px, py) in pts {
                    let _ = write!(
                        s,
                        r#"<circle cx="{px:.1}" cy="{py:.1}" r="3" fill="{}">{title}</circle>"#,
                        ser.color
                    );
                }
            }
        }
        Style::Points => {
            for (px, py) in pts {
                let _ = write!(
                    s,
                    r#"<circle cx="{px:.1}" cy="{py:.1}" r="3.5" fill="{}">{title}</circle>"#,
                    ser.color
                );
            }
        }
        // Drawn together, each on the ones before it: see `draw_stacked`.
        Style::Stacked => {}
        Style::Bars => {
            let k = bars.0 as f64;
            let pos = bars.1.unwrap_or(0) as f64;
            let unit = x.t(1.0) - x.t(0.0);
            let w = unit * 0.8 / k;
            let base = y.t(y.lo.max(0.0));
            for (px, py) in pts {
                let left = px - unit * 0.4 + pos * w;
                let _ = write!(
                    s,
                    r#"<rect x="{left:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}">{title}</rect>"#,
                    py.min(base),
                    (w - 1.0).max(1.0),
                    (base - py).abs().max(0.5),
                    ser.color
                );
            }
        }
    }
}

/// Each x of the `Stacked` series with the height of its stack so far, after each
/// series in turn (the last entry per x is its total).
fn stack_tops(c: &Chart) -> Vec<(f64, f64)> {
    let mut tops: Vec<(f64, f64)> = Vec::new();
    for ser in c.series.iter().filter(|s| s.style == Style::Stacked) {
        for &(px, h) in ser.points.iter().filter(|p| p.0.is_finite() && p.1 > 0.0) {
            match tops.iter_mut().find(|t| t.0 == px) {
                Some(t) => t.1 += h,
                None => tops.push((px, h)),
            }
        }
    }
    tops
}

/// The `Stacked` series, in order, each bar on the stack below it at its x.
fn draw_stacked(s: &mut String, c: &Chart, x: &Axis, y: &Axis) {
    let mut xs: Vec<f64> = c
        .series
        .iter()
        .filter(|s| s.style == Style::Stacked)
        .flat_map(|s| s.points.iter().map(|p| x.t(p.0)))
        .filter(|v| v.is_finite())
        .collect();
    if xs.is_empty() {
        return;
    }
    xs.sort_by(f64::total_cmp);
    xs.dedup();
    let closest = xs
        .windows(2)
        .map(|w| w[1] - w[0])
        .fold(f64::INFINITY, f64::min);
    let w = (closest * 0.8).clamp(1.0, 8.0);
    let mut base: Vec<(f64, f64)> = Vec::new();
    for ser in c.series.iter().filter(|s| s.style == Style::Stacked) {
        for &(px, h) in ser.points.iter().filter(|p| p.0.is_finite() && p.1 > 0.0) {
            let below = match base.iter_mut().find(|b| b.0 == px) {
                Some(b) => {
                    let v = b.1;
                    b.1 += h;
                    v
                }
                None => {
                    base.push((px, h));
                    0.0
                }
            };
            let (top, bottom) = (y.t(below + h), y.t(below));
            let _ = write!(
                s,
                r#"<rect x="{:.1}" y="{top:.1}" width="{w:.1}" height="{:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                x.t(px) - w / 2.0,
                (bottom - top).max(0.5),
                ser.color,
                esc(&ser.name),
                tick_label(h)
            );
        }
    }
}

/// A series' point labels; those in the right third read leftwards so they stay
/// inside the plot.
fn draw_labels(s: &mut String, ser: &Series, pts: &[(f64, f64)]) {
    for (label, (px, py)) in ser.labels.iter().zip(pts) {
        let (lx, anchor) = if *px > LEFT + (WIDTH - LEFT - RIGHT) * 0.66 {
            (px - 5.0, "end")
        } else {
            (px + 5.0, "start")
        };
        let _ = write!(
            s,
            r##"<text x="{lx:.1}" y="{:.1}" font-size="10" fill="#333" text-anchor="{anchor}">{}</text>"##,
            py - 6.0,
            esc(label)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_numbers_inside_the_range() {
        assert_eq!(ticks(0.0, 10.0, false), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        assert_eq!(ticks(1.0, 1000.0, true), vec![1.0, 10.0, 100.0, 1000.0]);
        assert_eq!(ticks(3.0, 40.0, true), vec![5.0, 10.0, 20.0]);
        assert_eq!(tick_label(12.5), "12.5");
        assert_eq!(tick_label(0.25), "0.25");
        assert_eq!(tick_label(2000.0), "2000");
    }

    #[test]
    fn time_ticks_fall_on_round_utc_clock_times() {
        // 2026-11-28 10:07:30 to 11:32:30 UTC: 85 min, a 15 min step.
        let lo = 1_795_860_450_000.0;
        let t = time_ticks(lo, lo + 85.0 * 60e3);
        let labels: Vec<&str> = t.iter().map(|(_, l)| l.as_str()).collect();
        assert_eq!(
            labels,
            ["10:15", "10:30", "10:45", "11:00", "11:15", "11:30"]
        );
        assert_eq!(t[0].0 % 900_000.0, 0.0);
        // Under a minute's step, seconds; over a day's span, the date.
        let t = time_ticks(lo, lo + 20e3);
        assert_eq!(t[0].1, "10:07:30", "{t:?}");
        let t = time_ticks(lo, lo + 3.0 * 86_400e3);
        assert_eq!(t[0].1, "11-28 12:00", "{t:?}");
        assert!(time_ticks(lo, lo).is_empty());
    }

    #[test]
    fn an_overlay_draws_its_lines_over_the_marks_and_its_spans_behind_them() {
        let mut s = Series::new("ITL p50", PALETTE[0], Style::LinePoints);
        let t0 = 1_795_860_000_000.0;
        s.points = vec![(t0, 4.0), (t0 + 60e3, 5.0), (t0 + 120e3, 4.5)];
        let c = Chart {
            x_label: "time (UTC)".into(),
            y_label: "ITL (ms)".into(),
            x_log: false,
            y_log: false,
            y_zero: true,
            series: vec![s],
            x_range: None,
        };
        let o = Overlay {
            x_utc: true,
            y_lines: vec![(8.0, "SLO itl.p50<=8ms".into())],
            x_spans: vec![(t0 + 50e3, t0 + 70e3, "incident".into())],
            x_lines: vec![(t0 + 60e3, "ITL p99 knee".into())],
        };
        let svg = render_with(&c, &o).unwrap();
        // The y axis reaches the line, above every point.
        let (_, y, _) = plot_axes(&c, &[8.0]).unwrap();
        assert!(y.hi >= 8.0, "{}", y.hi);
        let (_, y, _) = plot_axes(&c, &[]).unwrap();
        assert!(y.hi < 8.0, "without the line the axis ends at the data");
        assert_eq!(svg.matches(r#"<g class="slo">"#).count(), 1, "{svg}");
        assert!(svg.contains("SLO itl.p50&lt;=8ms"), "{svg}");
        let spans = svg.find(r#"<g class="spans">"#).unwrap();
        let marks = svg.find(r#"<g class="marks">"#).unwrap();
        let slo = svg.find(r#"<g class="slo">"#).unwrap();
        assert!(spans < marks && marks < slo, "{svg}");
        // The knee: one vertical line over the marks, labelled; none outside the plot.
        assert_eq!(svg.matches(r#"<g class="knee">"#).count(), 1, "{svg}");
        assert!(svg.contains(">ITL p99 knee</text>"), "{svg}");
        assert!(svg.find(r#"<g class="knee">"#).unwrap() > marks);
        let outside = Overlay {
            x_lines: vec![(t0 + 1e9, "far".into())],
            ..Overlay::default()
        };
        assert!(!render_with(&c, &outside).unwrap().contains("knee"));
        assert!(
            svg.contains(">10:00:00<") && svg.contains(">10:01:30<"),
            "{svg}"
        );
        assert!(!svg.contains("1795860"), "no raw milliseconds: {svg}");
        // Without an overlay, nothing of it.
        let plain = render(&c).unwrap();
        assert!(!plain.contains("class=\"slo\"") && !plain.contains("class=\"spans\""));
    }

    #[test]
    fn every_mark_sits_in_the_marks_group_and_empty_charts_draw_nothing() {
        let mut s = Series::new("a <b>", PALETTE[0], Style::LinePoints);
        s.points = vec![(1.0, 2.0), (10.0, 4.0), (100.0, 3.0)];
        let c = Chart {
            x_label: "x".into(),
            y_label: "y".into(),
            x_log: true,
            y_log: false,
            y_zero: true,
            series: vec![s],
            x_range: None,
        };
        let svg = render(&c).unwrap();
        let marks = &svg[svg.find(r#"<g class="marks">"#).unwrap()..];
        assert_eq!(marks.matches("<circle").count(), 3);
        assert_eq!(marks.matches("<path").count(), 1);
        assert!(svg.contains("a &lt;b&gt;"), "names are escaped");
        let empty = Chart {
            series: vec![Series::new("e", PALETTE[1], Style::Line)],
            ..c
        };
        assert!(render(&empty).is_none());
    }

    #[test]
    fn stacked_bars_sit_on_the_ones_before_them_and_the_axis_covers_the_totals() {
        let mut a = Series::new("timeout", PALETTE[0], Style::Stacked);
        a.points = vec![(1.0, 2.0), (2.0, 0.0), (3.0, 1.0)];
        let mut b = Series::new("http_500", PALETTE[1], Style::Stacked);
        b.points = vec![(1.0, 3.0), (2.0, 0.0), (3.0, 0.0)];
        let c = Chart {
            x_label: "x".into(),
            y_label: "y".into(),
            x_log: false,
            y_log: false,
            y_zero: true,
            series: vec![a, b],
            x_range: None,
        };
        let (_, y, _) = plot_axes(&c, &[]).unwrap();
        assert!(y.hi >= 5.0, "the stack at x = 1 is 5 high: {}", y.hi);
        let svg = render(&c).unwrap();
        let marks = &svg[svg.find(r#"<g class="marks">"#).unwrap()..];
        // Zero heights draw nothing: 2 bars at x = 1, 1 at x = 3.
        assert_eq!(marks.matches("<rect").count(), 3, "{marks}");
        let attr = |rect: &str, name: &str| -> f64 {
            let at = rect.find(&format!(" {name}=\"")).unwrap() + name.len() + 3;
            rect[at..].split('"').next().unwrap().parse().unwrap()
        };
        let rects: Vec<&str> = marks.split("<rect").skip(1).collect();
        let (lower, upper) = (rects[0], rects[2]);
        assert!(lower.contains("timeout: 2") && upper.contains("http_500: 3"));
        // The second series' bar ends where the first's begins, and is 1.5 times as tall.
        let top_of_lower = attr(lower, "y");
        let bottom_of_upper = attr(upper, "y") + attr(upper, "height");
        assert!((top_of_lower - bottom_of_upper).abs() < 0.2, "{marks}");
        assert!((attr(upper, "height") / attr(lower, "height") - 1.5).abs() < 0.01);
        assert_eq!(attr(lower, "x"), attr(upper, "x"));
        // All zeros still draw the axes (an empty stack is a figure: none failed).
        let mut z = Series::new("aborted", PALETTE[2], Style::Stacked);
        z.points = vec![(1.0, 0.0), (2.0, 0.0)];
        let zero = render(&Chart {
            series: vec![z],
            ..c
        })
        .unwrap();
        let marks = &zero[zero.find(r#"<g class="marks">"#).unwrap()..];
        assert!(!marks.contains("<rect"), "{marks}");
    }
}

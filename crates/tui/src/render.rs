//! Draws a [`View`] into a frame: a pure function of the view and the frame's size, so
//! a frame is the same text in a test backend as on the terminal.

use crate::view::{Alert, Bin, Counts, Latency, LevelProgress, Mode, SelfCheck, Side, View};
use cadence_core::assemble::{CPU_SHARE_WARN, LOOP_LAG_WARN};
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Clear, Paragraph, Row, Sparkline, Table, Wrap};
use ratatui::Frame;

const RED: Style = Style::new().fg(Color::Red).add_modifier(Modifier::BOLD);
const GREEN: Style = Style::new().fg(Color::Green);
const DIM: Style = Style::new().fg(Color::DarkGray);
const HEAD: Style = Style::new().add_modifier(Modifier::BOLD);

/// Draws the whole dashboard.
pub fn render(frame: &mut Frame, view: &View) {
    let [status, middle, charts, check, table, footer] = Layout::vertical([
        Constraint::Length(4),
        Constraint::Length(7),
        Constraint::Length(5),
        Constraint::Length(3),
        Constraint::Min(3),
        Constraint::Length(1),
    ])
    .areas(frame.area());
    render_status(frame, status, view);
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(55), Constraint::Percentage(45)]).areas(middle);
    render_latency(frame, left, &view.latency, view.stalls);
    match &view.side {
        Side::Histogram(bins) => render_histogram(frame, right, bins),
        Side::Alerts(alerts) => render_alerts(frame, right, alerts),
    }
    render_charts(frame, charts, view);
    render_check(frame, check, view);
    render_table(frame, table, view);
    render_footer(frame, footer, view);
    if view.help {
        render_help(frame, frame.area());
    }
}

fn render_status(frame: &mut Frame, area: Rect, view: &View) {
    let block = Block::bordered()
        .title(format!(" {} ", view.title))
        .title(Line::from(format!(" {} ", view.clock)).right_aligned());
    let mut first = Vec::new();
    if let Some(level) = &view.level {
        first.extend(level_spans(level, area.width.saturating_sub(2)));
    } else {
        first.push(Span::raw(view.scope.clone()));
    }
    if let Some(n) = view.in_flight {
        first.push(Span::raw(format!("   in flight {n}")));
    }
    let lines = vec![Line::from(first), counts_line(&view.counts)];
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

/// `level 2 of 4  concurrency=8  ████░░░░ 120/200`.
fn level_spans(level: &LevelProgress, width: u16) -> Vec<Span<'static>> {
    let of = level.of.map_or(String::new(), |n| format!(" of {n}"));
    let head = format!("level {}{of}  {}  ", level.index + 1, level.label);
    let tail = match (level.planned, level.duration_s) {
        (Some(p), _) => format!(" {}/{p} requests", level.done),
        (None, Some(d)) => format!(" {:.0}/{d:.0} s", level.elapsed_s),
        (None, None) => format!(" {} requests", level.done),
    };
    let bar_width = (width as usize)
        .saturating_sub(head.chars().count() + tail.len() + 16)
        .clamp(0, 30);
    let filled = level
        .fraction()
        .map_or(0, |f| (f * bar_width as f64).round() as usize);
    vec![
        Span::styled(head, HEAD),
        Span::styled("█".repeat(filled), GREEN),
        Span::styled("░".repeat(bar_width - filled.min(bar_width)), DIM),
        Span::raw(tail),
    ]
}

fn counts_line(c: &Counts) -> Line<'static> {
    let mut spans = vec![Span::raw(format!(
        "sent {}  succeeded {}  ",
        c.sent, c.succeeded
    ))];
    let failed = c.failed_total();
    let classes: Vec<String> = c.failed.iter().map(|(k, n)| format!("{k} {n}")).collect();
    let text = if classes.is_empty() {
        "failed 0".to_string()
    } else {
        format!("failed {failed} ({})", classes.join(", "))
    };
    spans.push(Span::styled(
        text,
        if failed > 0 { RED } else { Style::new() },
    ));
    spans.push(Span::raw(format!(
        "  aborted {}  dropped {}",
        c.aborted, c.dropped
    )));
    Line::from(spans)
}

/// A latency figure: one decimal under a second, whole ms above.
pub fn ms(v: Option<f64>) -> String {
    match v {
        None => "–".into(),
        Some(x) if x >= 1000.0 => format!("{x:.0}"),
        Some(x) => format!("{x:.1}"),
    }
}

fn render_latency(frame: &mut Frame, area: Rect, lat: &Latency, stalls: Option<crate::Stalls>) {
    let group = |v: &Option<[f64; 3]>| {
        (0..3)
            .map(|i| format!("{:>7}", ms(v.map(|p| p[i]))))
            .collect::<String>()
    };
    let metric = |name: &str, v: &[Option<[f64; 3]>; 2]| {
        Line::from(format!("{name:<6}{}  │{}", group(&v[0]), group(&v[1])))
    };
    let pct_head = format!("{:>7}{:>7}{:>7}", "p50", "p90", "p99");
    let mut lines = vec![
        Line::styled(
            format!("{:<6}{:>21}  │{:>21}", "", lat.spans[0], lat.spans[1]),
            DIM,
        ),
        Line::styled(format!("{:<6}{pct_head}  │{pct_head}", "ms"), HEAD),
        metric("TTFT", &lat.ttft),
        metric("ITL", &lat.itl),
    ];
    if let Some(s) = stalls {
        let style = if s.gaps + s.first_token > 0 {
            RED
        } else {
            Style::new()
        };
        lines.push(Line::styled(
            format!(
                "stalls over {} ms: {} gaps, {} first tokens, {} requests",
                ms(Some(s.threshold_ms)),
                s.gaps,
                s.first_token,
                s.requests
            ),
            style,
        ));
    }
    let block = Block::bordered().title(" Latency ");
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

/// Horizontal bars, one per power of two of ms: a log axis that fits a narrow panel.
fn render_histogram(frame: &mut Frame, area: Rect, bins: &[Bin]) {
    let block = Block::bordered().title(" ITL histogram, this level (log ms) ");
    let inner = block.inner(area);
    frame.render_widget(block, area);
    let max = bins.iter().map(|b| b.count).max().unwrap_or(0);
    if max == 0 {
        frame.render_widget(Paragraph::new("no gaps yet").style(DIM), inner);
        return;
    }
    // The busiest rows, in order, as many as fit.
    let shown = visible_bins(bins, inner.height as usize);
    let label_w = 9;
    let count_w = 8;
    let bar_w = (inner.width as usize).saturating_sub(label_w + count_w + 1);
    let lines: Vec<Line> = shown
        .iter()
        .map(|b| {
            let len = ((b.count as f64 / max as f64) * bar_w as f64).ceil() as usize;
            Line::from(vec![
                Span::raw(format!("{:>7} ", bin_label(b.lo_ms))),
                Span::styled(format!("{:<bar_w$}", "█".repeat(len)), GREEN),
                Span::raw(format!(" {:>count_w$}", b.count)),
            ])
        })
        .collect();
    frame.render_widget(Paragraph::new(lines), inner);
}

/// The contiguous run of bins around the mode that fits in `rows`.
fn visible_bins(bins: &[Bin], rows: usize) -> &[Bin] {
    let first = bins.iter().position(|b| b.count > 0).unwrap_or(0);
    let last = bins.iter().rposition(|b| b.count > 0).unwrap_or(0);
    let (mut lo, mut hi) = (first, last + 1);
    while hi - lo > rows.max(1) {
        // Drop the emptier end.
        if bins[lo].count <= bins[hi - 1].count {
            lo += 1;
        } else {
            hi -= 1;
        }
    }
    &bins[lo..hi]
}

fn bin_label(lo_ms: f64) -> String {
    if lo_ms >= 1000.0 {
        format!("≥{:.0}s", lo_ms / 1000.0)
    } else if lo_ms >= 1.0 {
        format!("≥{lo_ms:.0}ms")
    } else {
        format!("≥{lo_ms}ms")
    }
}

fn render_alerts(frame: &mut Frame, area: Rect, alerts: &[Alert]) {
    let firing = alerts.iter().filter(|a| a.state == "firing").count();
    let block = Block::bordered().title(format!(" Alerts ({firing} firing) "));
    let lines: Vec<Line> = if alerts.is_empty() {
        vec![Line::styled("no alert rules (--alert)", DIM)]
    } else {
        alerts
            .iter()
            .map(|a| {
                let style = match a.state.as_str() {
                    "firing" => RED,
                    "pending" => Style::new().fg(Color::Yellow),
                    _ => Style::new(),
                };
                let value = a.value.map_or("–".into(), |v| format!("{v:.1}"));
                Line::styled(format!("{:<8} {} (now {value})", a.state, a.rule), style)
            })
            .collect()
    };
    frame.render_widget(Paragraph::new(lines).block(block), area);
}

fn render_charts(frame: &mut Frame, area: Rect, view: &View) {
    let [left, right] =
        Layout::horizontal([Constraint::Percentage(50), Constraint::Percentage(50)]).areas(area);
    let [itl, tok] = &view.chart_titles;
    sparkline(frame, left, itl, "ms", &view.itl_p99_series);
    sparkline(frame, right, tok, "", &view.tok_s_series);
}

/// A sparkline of the latest values that fit, titled with the last value and the max.
fn sparkline(frame: &mut Frame, area: Rect, name: &str, unit: &str, series: &[f64]) {
    let fit = area.width.saturating_sub(2) as usize;
    let shown = &series[series.len().saturating_sub(fit)..];
    let max = shown.iter().copied().fold(0.0, f64::max);
    let title = chart_title(name, unit, shown.last().map(|last| (*last, max)), fit);
    // Sparklines take integers: scale so the max is 1000 steps.
    let scale = if max > 0.0 { 1000.0 / max } else { 0.0 };
    let data: Vec<u64> = shown.iter().map(|v| (v * scale).round() as u64).collect();
    let widget = Sparkline::default()
        .block(Block::bordered().title(title))
        .data(&data)
        .max(1000)
        .style(GREEN);
    frame.render_widget(widget, area);
}

/// A chart's title within `room` characters: the name with the last value and the
/// max, else the name and the last value, else the figures alone, never cut mid-word.
fn chart_title(name: &str, unit: &str, figures: Option<(f64, f64)>, room: usize) -> String {
    let candidates = match figures {
        Some((last, max)) => vec![
            format!(" {name}: now {last:.1}{unit}, max {max:.1}{unit} "),
            format!(" {name}: now {last:.1}{unit} "),
            format!(" now {last:.1}{unit}, max {max:.1}{unit} "),
            format!(" {last:.1}{unit} "),
        ],
        None => vec![format!(" {name} ")],
    };
    let last = candidates.last().cloned().unwrap_or_default();
    candidates
        .into_iter()
        .find(|t| t.chars().count() <= room)
        .unwrap_or(last)
}

fn render_check(frame: &mut Frame, area: Rect, view: &View) {
    let c = &view.check;
    let mark = |bad: bool| if bad { RED } else { GREEN };
    let mut spans = Vec::new();
    let whose = match view.mode {
        Mode::Bench => "loop lag",
        Mode::Top => "the proxy's loop lag (1 min)",
    };
    match c.loop_lag_ms {
        Some((p99, max)) => spans.push(Span::styled(
            format!("{whose} p99 {p99:.1} ms, max {max:.1} ms"),
            mark(c.loop_lag_bad()),
        )),
        None => spans.push(Span::styled(format!("{whose} –"), DIM)),
    }
    if view.mode == Mode::Top {
        let block = Block::bordered().title(check_title(c));
        frame.render_widget(Paragraph::new(Line::from(spans)).block(block), area);
        return;
    }
    spans.push(Span::raw(" · "));
    match c.pacing {
        Some(p) => spans.push(Span::styled(
            format!(
                "late sends {:.1} % (bound {:.1} %), lag p99 {:.1} ms",
                p.late_share * 100.0,
                p.max_late_share * 100.0,
                p.lag_p99_ms
            ),
            mark(c.pacing_bad()),
        )),
        None => spans.push(Span::styled("pacing: closed loop", DIM)),
    }
    spans.push(Span::raw(" · "));
    match c.cpu_share {
        Some(s) => spans.push(Span::styled(
            format!("CPU {:.0} % of {} cores", s * 100.0, c.cores),
            mark(c.cpu_bad()),
        )),
        None => spans.push(Span::styled("CPU –", DIM)),
    }
    let block = Block::bordered().title(check_title(c));
    let text = Paragraph::new(Line::from(spans)).wrap(Wrap { trim: true });
    frame.render_widget(text.block(block), area);
}

fn check_title(c: &SelfCheck) -> Line<'static> {
    if c.untrustworthy() {
        Line::styled(
            " Self-check: timestamps may be late, figures are suspect ",
            RED,
        )
    } else {
        Line::from(" Self-check ")
    }
}

fn render_table(frame: &mut Frame, area: Rect, view: &View) {
    let first = match view.mode {
        Mode::Bench => "level",
        Mode::Top => "window",
    };
    let head = Row::new([
        first, "sent", "ok", "failed", "TTFT p50", "p99", "ITL p50", "p99", "tok/s", "note",
    ])
    .style(HEAD);
    // The latest rows that fit (a long sweep scrolls).
    let fit = area.height.saturating_sub(3) as usize;
    let rows = view.rows[view.rows.len().saturating_sub(fit)..]
        .iter()
        .map(|r| {
            let style = if r.failed > 0 { RED } else { Style::new() };
            Row::new(vec![
                r.label.clone(),
                r.sent.to_string(),
                r.succeeded.to_string(),
                r.failed.to_string(),
                ms(r.ttft_p50_ms),
                ms(r.ttft_p99_ms),
                ms(r.itl_p50_ms),
                ms(r.itl_p99_ms),
                r.tok_s.map_or("–".into(), |t| format!("{t:.0}")),
                r.note.clone(),
            ])
            .style(style)
        });
    let widths = [
        Constraint::Length(16),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(7),
        Constraint::Length(9),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Length(8),
        Constraint::Min(10),
    ];
    let title = format!(" {} ", view.table_title);
    let table = Table::new(rows, widths)
        .header(head)
        .block(Block::bordered().title(title));
    frame.render_widget(table, area);
}

fn render_footer(frame: &mut Frame, area: Rect, view: &View) {
    let keys = match view.mode {
        Mode::Bench => "q stop (records and report kept) · s next level · ? formulas",
        Mode::Top => "q quit · ? formulas",
    };
    let line = match &view.notice {
        Some(n) => Line::from(vec![
            Span::styled(n.clone(), Style::new().fg(Color::Yellow)),
            Span::raw("  ·  "),
            Span::styled(keys, DIM),
        ]),
        None => Line::styled(keys, DIM),
    };
    frame.render_widget(Paragraph::new(line), area);
}

/// The report's definitions of the figures on screen.
const SHOWN: [&str; 5] = ["ttft", "itl", "stalls", "throughput", "requests"];

/// The formulas every figure on screen follows (the report's own definitions), and
/// what the dashboard's spans and colours mean, over the frame.
fn render_help(frame: &mut Frame, area: Rect) {
    let popup = area.inner(ratatui::layout::Margin::new(3, 2));
    let defs = cadence_core::report::definitions();
    let mut lines: Vec<Line> = SHOWN
        .iter()
        .filter_map(|name| defs.get(*name).map(|f| (name, f)))
        .map(|(name, formula)| {
            Line::from(vec![
                Span::styled(format!("{name}: "), HEAD),
                Span::raw(formula.clone()),
            ])
        })
        .collect();
    let notes = [
        "spans: `last 10 s` = requests that ended in the last 10 seconds; `this level` = since the level began; top shows the proxy's rolling windows".to_string(),
        "live percentiles are bucketed (within 1/256 of the value, p50/p90/p99 by the report's rule); the final report is exact".to_string(),
        format!(
            "self-check turns red when the event loop lags (p99 over {} ms), sends fall behind schedule (more late than --max-late), or this process uses over {:.0} % of the cores",
            LOOP_LAG_WARN.as_millis(),
            CPU_SHARE_WARN * 100.0
        ),
    ];
    lines.extend(notes.into_iter().map(|n| Line::styled(n, DIM)));
    frame.render_widget(Clear, popup);
    let block = Block::bordered().title(" Formulas (? to close) ");
    frame.render_widget(
        Paragraph::new(lines).wrap(Wrap { trim: true }).block(block),
        popup,
    );
}

//! The HTML report's session section (agent loops, multi-turn chats): a table of
//! session figures by level, the wall time split drawn as one stacked bar per level,
//! and the slowest session as a waterfall of its steps (tool time, TTFT, decode), so
//! where an agent's time goes is seen, not computed.

use crate::cell::{cell, fmt_ms, Unit, ABSENT};
use crate::svg::esc;
use cadence_core::sessions::{SessionSummary, Waterfall};
use cadence_core::Report;
use std::fmt::Write;

/// The parts of the wall time, in the order they are drawn, with their colours.
const PARTS: [(&str, &str); 4] = [
    ("TTFT", "#1f77b4"),
    ("decode (ITL)", "#d62728"),
    ("tool", "#2ca02c"),
    ("rest", "#aaaaaa"),
];

const WIDTH: f64 = 720.0;
const LABEL_W: f64 = 150.0;
const ROW_H: f64 = 22.0;

fn ms_or_dash(v: Option<f64>) -> String {
    cell(v, Unit::Ms)
}

/// The section, when any level has sessions.
pub(crate) fn section(r: &Report, o: &mut String) {
    let all: Vec<(&str, &SessionSummary)> = r
        .levels
        .iter()
        .filter_map(|l| Some((l.name.as_str(), l.summary.sessions.as_ref()?)))
        .collect();
    // Levels whose "sessions" called no tool are single requests, not agent loops:
    // named, not drawn as sessions.
    let (toolless, levels): (Vec<_>, Vec<_>) = all
        .into_iter()
        .partition(|(_, s)| s.tool_use.not_agent_loops());
    if levels.is_empty() && toolless.is_empty() {
        return;
    }
    o.push_str("<h2>Sessions</h2>");
    for (name, s) in &toolless {
        let _ = write!(
            o,
            r#"<p class="warn" id="sessions-without-tools">{}: not agent loops: {} of {} agent sessions made no tool call and ended at their first reply, so no session figures are shown (see the warnings).</p>"#,
            esc(name),
            s.tool_use.without_tool_calls,
            s.tool_use.agent_sessions
        );
    }
    if levels.is_empty() {
        return;
    }
    o.push_str(r#"<p class="sub">Whole sessions whose every step succeeded: wall time = TTFT + decode (the sum of inter-token gaps) + tool time + the rest (client work, queueing).</p>"#);
    o.push_str(r#"<table id="sessions"><tr><th class="l">level</th><th>complete</th><th>steps p50</th><th>tool calls</th><th>wall p50</th><th>wall p90</th><th>wall p99</th><th>decode share p50</th></tr>"#);
    for (name, s) in &levels {
        let _ = write!(
            o,
            r#"<tr><td class="l">{}</td><td>{}/{}</td><td>{}</td><td>{}{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
            esc(name),
            s.complete,
            s.sessions,
            s.steps.map_or(ABSENT.into(), |d| format!("{}", d.p50)),
            s.tool_calls,
            if s.mocked_tool_calls > 0 {
                format!(" ({} injected)", s.mocked_tool_calls)
            } else {
                String::new()
            },
            ms_or_dash(s.wall.map(|d| d.p50)),
            ms_or_dash(s.wall.map(|d| d.p90)),
            ms_or_dash(s.wall.map(|d| d.p99)),
            s.decode_share_pct
                .map_or(ABSENT.into(), |d| crate::cell::pct(d.p50, 1)),
        );
    }
    o.push_str("</table>");
    split_chart(&levels, o);
    what_if_table(&levels, o);
    if let Some((name, w)) = levels
        .iter()
        .filter_map(|(n, s)| Some((*n, s.slowest.as_ref()?)))
        .max_by(|a, b| a.1.wall_ms.total_cmp(&b.1.wall_ms))
    {
        waterfall(name, w, o);
    }
}

/// One stacked bar per level: the summed wall time's split, in %.
fn split_chart(levels: &[(&str, &SessionSummary)], o: &mut String) {
    let rows: Vec<(&str, [f64; 4])> = levels
        .iter()
        .filter_map(|(n, s)| {
            let sp = s.split?;
            Some((*n, [sp.ttft_pct, sp.decode_pct, sp.tool_pct, sp.rest_pct]))
        })
        .collect();
    if rows.is_empty() {
        return;
    }
    let bar_w = WIDTH - LABEL_W - 10.0;
    let h = ROW_H * rows.len() as f64 + 30.0;
    let _ = write!(
        o,
        r#"<figure class="chart" id="session-split"><figcaption>Where session time goes, by level</figcaption><svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {h}" width="{WIDTH}" height="{h}" role="img">"#
    );
    for (i, (name, parts)) in rows.iter().enumerate() {
        let y = i as f64 * ROW_H + 4.0;
        let _ = write!(
            o,
            r#"<text x="{}" y="{}" font-size="12" text-anchor="end">{}</text>"#,
            LABEL_W - 6.0,
            y + 14.0,
            esc(name)
        );
        let mut x = LABEL_W;
        for ((part, color), pct) in PARTS.iter().zip(parts) {
            // A remainder may be slightly negative: nothing to draw.
            let w = (pct.max(0.0) / 100.0 * bar_w).min(WIDTH - x);
            let _ = write!(
                o,
                r#"<rect x="{x:.1}" y="{y:.1}" width="{w:.1}" height="{}" fill="{color}"><title>{part}: {pct:.1}%</title></rect>"#,
                ROW_H - 6.0
            );
            x += w;
        }
    }
    legend(o, h - 12.0);
    o.push_str("</svg></figure>");
}

fn legend(o: &mut String, y: f64) {
    let mut x = LABEL_W;
    for (part, color) in PARTS {
        let _ = write!(
            o,
            r#"<rect x="{x}" y="{}" width="10" height="10" fill="{color}"/><text x="{}" y="{y}" font-size="12">{part}</text>"#,
            y - 9.0,
            x + 14.0
        );
        x += 110.0;
    }
}

/// The what-ifs of each level, when asked for.
fn what_if_table(levels: &[(&str, &SessionSummary)], o: &mut String) {
    if levels.iter().all(|(_, s)| s.what_if.is_empty()) {
        return;
    }
    o.push_str(r#"<table id="what-if"><tr><th class="l">level</th><th class="l">what if</th><th>wall p50 measured</th><th>wall p50 then</th><th>wall p99 then</th><th>decode share then</th></tr>"#);
    for (name, s) in levels {
        for w in &s.what_if {
            let _ = write!(
                o,
                r#"<tr><td class="l">{}</td><td class="l">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>"#,
                esc(name),
                esc(&w.label),
                ms_or_dash(s.wall.map(|d| d.p50)),
                ms_or_dash(w.wall.map(|d| d.p50)),
                ms_or_dash(w.wall.map(|d| d.p99)),
                w.decode_share_pct
                    .map_or(ABSENT.into(), |v| crate::cell::pct(v, 1)),
            );
        }
    }
    o.push_str("</table>");
}

/// The slowest session, one row per step: its tool time before the send, then TTFT,
/// then decode, on one time axis from the session's start.
fn waterfall(level: &str, w: &Waterfall, o: &mut String) {
    if w.steps.is_empty() || w.wall_ms <= 0.0 {
        return;
    }
    let bar_w = WIDTH - LABEL_W - 10.0;
    let scale = bar_w / w.wall_ms;
    let h = ROW_H * w.steps.len() as f64 + 30.0;
    let _ = write!(
        o,
        r#"<figure class="chart" id="session-waterfall"><figcaption>The slowest session ({}, session {}): {}</figcaption><svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {WIDTH} {h}" width="{WIDTH}" height="{h}" role="img">"#,
        esc(level),
        w.session,
        fmt_ms(w.wall_ms)
    );
    for (i, s) in w.steps.iter().enumerate() {
        let y = i as f64 * ROW_H + 4.0;
        let _ = write!(
            o,
            r#"<text x="{}" y="{}" font-size="12" text-anchor="end">step {} ({} in)</text>"#,
            LABEL_W - 6.0,
            y + 14.0,
            s.step,
            s.input_tokens
        );
        let segments = [
            (2, s.sent_ms - s.tool_ms, s.tool_ms),
            (0, s.sent_ms, s.ttft_ms),
            (1, s.sent_ms + s.ttft_ms, s.decode_ms),
        ];
        for (part, start, len) in segments {
            if len <= 0.0 {
                continue;
            }
            let (name, color) = PARTS[part];
            let _ = write!(
                o,
                r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{}" fill="{color}"><title>{name}: {}</title></rect>"#,
                LABEL_W + start.max(0.0) * scale,
                (len * scale).max(0.5),
                ROW_H - 6.0,
                fmt_ms(len)
            );
        }
    }
    legend(o, h - 12.0);
    o.push_str("</svg></figure>");
}

//! "Where the time went": a level's client TTFT and decode split by the server's own
//! per-request timing ([`cadence_core::time_split`]), the mean and the slowest
//! requests in one table the console and the HTML share; or the line that says which
//! server reported no timing.

use crate::cell::{cell, plural, Unit};
use crate::table::Table;
use cadence_core::time_split::how_to_get;
use cadence_core::{Bursts, LevelReport, Report, SlowRequest, TimeSplit};
use std::fmt::Write;

/// Slowest requests the table shows beside the mean (the JSON keeps them all).
const SLOWEST_SHOWN: usize = 3;

fn ms(v: Option<f64>) -> String {
    cell(v, Unit::Ms)
}

/// The table's rows: a label and one figure of the mean and of a slow request.
type Part = (
    String,
    fn(&TimeSplit) -> Option<f64>,
    fn(&SlowRequest) -> Option<f64>,
);

fn parts(t: &TimeSplit) -> Vec<Part> {
    let queue = if t.queue_reported == t.timed {
        "  server queue".to_string()
    } else {
        format!(
            "  server queue (reported by {} of {})",
            t.queue_reported, t.timed
        )
    };
    let front = if t.queue_reported == t.timed {
        "  front end & network (residual)"
    } else {
        "  front end, network & unreported queue (residual)"
    };
    vec![
        ("client TTFT".into(), |t| t.ttft_ms, |s| Some(s.ttft_ms)),
        (queue, |t| t.queue_ms, |s| s.queue_ms),
        (
            "  server prefill".into(),
            |t| t.prefill_ms,
            |s| Some(s.prefill_ms),
        ),
        (front.into(), |t| t.front_ms, |s| Some(s.front_ms)),
        ("client decode".into(), |t| t.decode_ms, |s| s.decode_ms),
        (
            "  server decode".into(),
            |t| t.server_decode_ms,
            |s| s.server_decode_ms,
        ),
        (
            "  delivery (residual)".into(),
            |t| t.delivery_ms,
            |s| s.delivery_ms,
        ),
    ]
}

/// The level's table, when its server timed some request.
pub(crate) fn table(t: &TimeSplit) -> Option<Table> {
    if t.timed == 0 {
        return None;
    }
    let shown = &t.slowest[..t.slowest.len().min(SLOWEST_SHOWN)];
    let mean = format!("mean of {}", t.timed);
    let mut table = Table::new(2).left("", 24).right(&mean, 10);
    let heads: Vec<String> = shown.iter().map(|s| format!("#{}", s.index)).collect();
    for h in &heads {
        table = table.right(h, 9);
    }
    for (name, of_level, of_request) in parts(t) {
        let mut row = vec![name, ms(of_level(t))];
        row.extend(shown.iter().map(|s| ms(of_request(s))));
        table.row(row);
    }
    Some(table)
}

/// What a level whose server reported no timing says, naming the server.
pub(crate) fn silent(r: &Report, t: &TimeSplit) -> Option<String> {
    (t.timed == 0).then(|| {
        format!(
            "{} (--api {}) reported no timing of its own in its {}: {}",
            r.run.target,
            r.run.api,
            plural(t.requests, "succeeded request"),
            how_to_get(&r.run.api)
        )
    })
}

/// The line on a level's bursts: the acceptance length from both sides and the gap by
/// chunk size.
pub(crate) fn bursts_line(b: &Bursts) -> String {
    let num = |v: Option<f64>| v.map_or(crate::cell::ABSENT.to_string(), |v| format!("{v:.2}"));
    let mut line = format!(
        "acceptance length (tokens per chunk after the first): client {} over {}, server {}",
        num(b.client_acceptance_length),
        plural(b.requests, "request"),
        num(b.server_acceptance_length),
    );
    if let Some(rate) = b.draft_acceptance_rate {
        let _ = write!(line, " ({} of drafts accepted)", crate::cell::fmt_pct(rate));
    }
    if b.server_requests == 0 {
        line.push_str(" (no request reported its speculation)");
    }
    if let Some(len) = b.metrics_acceptance_length {
        let _ = write!(line, ", the server's /metrics {len:.2}");
        if let Some(rate) = b.metrics_draft_acceptance_rate {
            let _ = write!(line, " ({} of drafts accepted)", crate::cell::fmt_pct(rate));
        }
    }
    if !b.itl_by_chunk_tokens.is_empty() {
        let sizes: Vec<String> = b
            .itl_by_chunk_tokens
            .iter()
            .map(|c| {
                let more = if c.tokens as usize == cadence_core::bursts::SIZE_CLASSES {
                    "+"
                } else {
                    ""
                };
                format!(
                    "{}{more} tok {} ({})",
                    c.tokens,
                    ms(Some(c.mean_ms)),
                    c.gaps
                )
            })
            .collect();
        let _ = write!(
            line,
            "; gap before a chunk by its tokens: {}",
            sizes.join(", ")
        );
    }
    line
}

/// The console's lines for one level: the table (the slowest requests by index), or
/// the line naming the server that said nothing; then its bursts.
pub(crate) fn console(out: &mut String, r: &Report, l: &LevelReport) {
    if let Some(b) = &l.bursts {
        let _ = writeln!(out, "Bursts: {}", bursts_line(b));
    }
    let Some(t) = &l.server_timing else {
        return;
    };
    if let Some(table) = table(t) {
        let _ = writeln!(
            out,
            "Where the time went (the server's own timing of {} of {}; #N: the slowest requests):",
            t.timed,
            plural(t.requests, "request")
        );
        out.push_str(&table.text());
    } else if let Some(line) = silent(r, t) {
        let _ = writeln!(out, "Server timing: {line}");
    }
}

/// The HTML section: one table per level, or the line naming the silent server.
pub(crate) fn html(r: &Report, o: &mut String) {
    let levels: Vec<(&LevelReport, &TimeSplit)> = r
        .levels
        .iter()
        .filter_map(|l| Some((l, l.server_timing.as_ref()?)))
        .collect();
    for l in r.levels.iter().filter(|l| l.bursts.is_some()) {
        if let Some(b) = &l.bursts {
            let _ = write!(
                o,
                r#"<p class="sub">{} bursts: {}</p>"#,
                crate::svg::esc(&l.name),
                crate::svg::esc(&bursts_line(b))
            );
        }
    }
    if levels.is_empty() {
        return;
    }
    o.push_str("<h2>Where the time went</h2>");
    o.push_str(r#"<p class="sub">The client's TTFT = the server's queue + prefill + front end and network (the residual); the client's decode = the server's decode + delivery (the residual), from the timing the server reports per request. Means over the requests it timed; #N: the slowest requests, split alike.</p>"#);
    for (l, t) in levels {
        let _ = write!(o, "<h3>{}</h3>", crate::svg::esc(&l.name));
        match (table(t), silent(r, t)) {
            (Some(table), _) => o.push_str(&table.html()),
            (None, Some(line)) => {
                let _ = write!(o, r#"<p class="sub">{}</p>"#, crate::svg::esc(&line));
            }
            (None, None) => {}
        }
    }
}

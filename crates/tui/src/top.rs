//! `cadence top`'s view of a running proxy: its `/stats` document (rolling windows,
//! alerts, the proxy's loop lag) turned into a [`View`], with the series the dashboard
//! keeps between polls. Pure: the caller fetches the document.

use crate::view::{Alert, Counts, Latency, Mode, Pcts, SelfCheck, Side, Stalls, TableRow, View};
use cadence_core::{Distribution, LevelSummary};
use serde::Deserialize;
use std::collections::VecDeque;

/// Polls remembered for the charts.
const HISTORY: usize = 600;

#[derive(Debug, Deserialize)]
struct Stats {
    uptime_s: f64,
    windows: Vec<Window>,
    #[serde(default)]
    alerts: Vec<AlertJson>,
    #[serde(default)]
    self_check: Option<SelfCheckJson>,
}

#[derive(Debug, Deserialize)]
struct Window {
    window_s: f64,
    /// Older proxies say whether the record cap cut the window short.
    #[serde(default)]
    partial: bool,
    /// Whether the window's distributions went over to histograms.
    #[serde(default)]
    bucketed: bool,
    #[serde(flatten)]
    summary: LevelSummary,
}

#[derive(Debug, Deserialize)]
struct AlertJson {
    alert: String,
    state: String,
    value: Option<f64>,
}

#[derive(Debug, Deserialize)]
struct SelfCheckJson {
    #[serde(default)]
    loop_lag: Vec<LagJson>,
}

#[derive(Debug, Deserialize)]
struct LagJson {
    p99_ms: f64,
    max_ms: f64,
}

/// What `top` remembers between polls: the shortest window's ITL p99 and output
/// rate at each poll.
#[derive(Debug, Default)]
pub struct History {
    itl_p99: VecDeque<f64>,
    tok_s: VecDeque<f64>,
}

impl History {
    fn push(&mut self, itl_p99: Option<f64>, tok_s: Option<f64>) {
        for (q, v) in [(&mut self.itl_p99, itl_p99), (&mut self.tok_s, tok_s)] {
            if q.len() == HISTORY {
                q.pop_front();
            }
            q.push_back(v.unwrap_or(0.0));
        }
    }
}

/// `60` → `1 min`, `300` → `5 min`, `45` → `45 s`.
pub fn window_label(secs: f64) -> String {
    if secs >= 60.0 && secs % 60.0 == 0.0 {
        format!("{:.0} min", secs / 60.0)
    } else {
        format!("{secs:.0} s")
    }
}

fn pcts(d: &Option<Distribution>) -> Option<Pcts> {
    d.as_ref().map(|d| [d.p50, d.p90, d.p99])
}

/// Failure classes, largest first.
pub fn failed_classes(failed: &std::collections::BTreeMap<String, u64>) -> Vec<(String, u64)> {
    let mut v: Vec<(String, u64)> = failed.iter().map(|(k, n)| (k.clone(), *n)).collect();
    v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    v
}

fn row(w: &Window) -> TableRow {
    let s = &w.summary;
    let bucketed = w.bucketed
        || [&s.ttft, &s.itl]
            .iter()
            .any(|d| d.as_ref().is_some_and(|d| d.bucketed.is_some()));
    let note = match (w.partial, bucketed) {
        (true, _) => "partial: the record cap cut this window".to_string(),
        (false, true) => "bucketed percentiles".to_string(),
        _ => String::new(),
    };
    TableRow {
        label: window_label(w.window_s),
        sent: s.requests.sent,
        succeeded: s.requests.succeeded,
        failed: s.requests.failed_total(),
        ttft_p50_ms: s.ttft.map(|d| d.p50),
        ttft_p99_ms: s.ttft.map(|d| d.p99),
        itl_p50_ms: s.itl.map(|d| d.p50),
        itl_p99_ms: s.itl.map(|d| d.p99),
        tok_s: s.throughput.output_tokens_per_s,
        note,
    }
}

/// Longest quote of a `/stats` error: the parser's message may hold a whole string
/// value of the document (FAULTS 120).
const MAX_QUOTE: usize = 200;

/// `text` cut to [`MAX_QUOTE`] bytes (on a character boundary, the cut said), its
/// control characters written out.
fn brief(text: &str) -> String {
    let mut end = text.len().min(MAX_QUOTE);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let mut out: String = text[..end]
        .chars()
        .map(|c| if c.is_control() { '?' } else { c })
        .collect();
    if end < text.len() {
        out.push_str(&format!("… ({} bytes in all)", text.len()));
    }
    out
}

/// `h:mm:ss`.
pub fn clock(secs: f64) -> String {
    let s = secs.max(0.0) as u64;
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}

/// The view of one `/stats` document (`url` names the proxy in the title); the
/// document's shortest window feeds the charts in `history`.
pub fn view(doc: &serde_json::Value, url: &str, history: &mut History) -> Result<View, String> {
    let stats = Stats::deserialize(doc)
        .map_err(|e| format!("unexpected /stats document: {}", brief(&e.to_string())))?;
    let short = stats.windows.first();
    let long = stats.windows.get(1).or(short);
    history.push(
        short.and_then(|w| w.summary.itl.map(|d| d.p99)),
        short.and_then(|w| w.summary.throughput.output_tokens_per_s),
    );
    let span = |w: Option<&Window>| w.map_or("–".into(), |w| window_label(w.window_s));
    let counts = short.map_or_else(Counts::default, |w| {
        let r = &w.summary.requests;
        Counts {
            sent: r.sent,
            succeeded: r.succeeded,
            failed: failed_classes(&r.failed),
            aborted: r.aborted,
            dropped: r.dropped,
        }
    });
    Ok(View {
        mode: Mode::Top,
        title: format!("cadence top · {url}"),
        clock: format!("uptime {}", clock(stats.uptime_s)),
        scope: format!("last {}", span(short)),
        counts,
        latency: Latency {
            spans: [span(short), span(long)],
            ttft: [short, long].map(|w| w.and_then(|w| pcts(&w.summary.ttft))),
            itl: [short, long].map(|w| w.and_then(|w| pcts(&w.summary.itl))),
        },
        stalls: short.map(|w| Stalls {
            threshold_ms: w.summary.stalls.threshold_ms,
            gaps: w.summary.stalls.gaps,
            first_token: w.summary.stalls.first_token,
            requests: w.summary.stalls.requests,
        }),
        side: Side::Alerts(
            stats
                .alerts
                .iter()
                .map(|a| Alert {
                    rule: a.alert.clone(),
                    state: a.state.clone(),
                    value: a.value,
                })
                .collect(),
        ),
        chart_titles: [
            format!("ITL p99, last {}", span(short)),
            format!("output tok/s, last {}", span(short)),
        ],
        itl_p99_series: history.itl_p99.iter().copied().collect(),
        tok_s_series: history.tok_s.iter().copied().collect(),
        check: SelfCheck {
            loop_lag_ms: stats
                .self_check
                .and_then(|c| c.loop_lag.first().map(|l| (l.p99_ms, l.max_ms))),
            ..SelfCheck::default()
        },
        table_title: "Rolling windows".into(),
        rows: stats.windows.iter().map(row).collect(),
        ..View::default()
    })
}

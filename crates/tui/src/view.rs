//! What one frame shows: plain data, filled by `cadence bench` from its live state or
//! by `cadence top` from a proxy's `/stats`. Rendering ([`crate::render`]) is a pure
//! function of it, so frames are tested as text.

use cadence_core::assemble::{CPU_SHARE_WARN, LOOP_LAG_WARN};

/// Which command the dashboard belongs to (the keys it offers differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    #[default]
    Bench,
    Top,
}

/// Everything one frame draws.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct View {
    pub mode: Mode,
    /// `cadence bench · URL · model`.
    pub title: String,
    /// Right of the title: elapsed time, or the proxy's uptime.
    pub clock: String,
    /// The level being run (bench only).
    pub level: Option<LevelProgress>,
    /// What the counts line covers, e.g. `this level` or `last 1 min`.
    pub scope: String,
    /// Requests in flight now (unknown to `top`).
    pub in_flight: Option<u64>,
    pub counts: Counts,
    pub latency: Latency,
    pub stalls: Option<Stalls>,
    /// The right-hand panel: the ITL histogram (bench) or the alerts (top).
    pub side: Side,
    /// What the two charts plot, e.g. `ITL p99 per second` and `output tok/s`.
    pub chart_titles: [String; 2],
    /// ITL p99 over time, oldest first (ms).
    pub itl_p99_series: Vec<f64>,
    /// Output tokens per second over time, oldest first.
    pub tok_s_series: Vec<f64>,
    pub check: SelfCheck,
    /// Title of the table at the bottom: completed levels, or the rolling windows.
    pub table_title: String,
    pub rows: Vec<TableRow>,
    /// A line above the keys: stopping, skipping, a fetch error.
    pub notice: Option<String>,
    /// The formulas overlay (`?`).
    pub help: bool,
}

/// The level in progress.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LevelProgress {
    /// 0-based index of the level.
    pub index: u32,
    /// Levels planned, when known (a `--find-max` search does not know).
    pub of: Option<u32>,
    /// `concurrency=8`, `rate=5/s`.
    pub label: String,
    /// Requests finished in this level, and planned (warm-up included), when known.
    pub done: u64,
    pub planned: Option<u64>,
    /// Seconds into the level, and its `--duration`, when given.
    pub elapsed_s: f64,
    pub duration_s: Option<f64>,
}

impl LevelProgress {
    /// The share of the level done: by requests when planned, else by time.
    pub fn fraction(&self) -> Option<f64> {
        let by_requests = self
            .planned
            .filter(|&p| p > 0)
            .map(|p| self.done as f64 / p as f64);
        let by_time = self
            .duration_s
            .filter(|&d| d > 0.0)
            .map(|d| self.elapsed_s / d);
        let f = match (by_requests, by_time) {
            (Some(a), Some(b)) => a.max(b),
            (a, b) => a.or(b)?,
        };
        Some(f.clamp(0.0, 1.0))
    }
}

/// Requests by outcome (the report's accounting).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Counts {
    pub sent: u64,
    pub succeeded: u64,
    /// Failures by class name (`http_5xx`, `idle_timeout`, …), largest first.
    pub failed: Vec<(String, u64)>,
    pub aborted: u64,
    pub dropped: u64,
}

impl Counts {
    pub fn failed_total(&self) -> u64 {
        self.failed.iter().map(|(_, n)| n).sum()
    }
}

/// p50, p90, p99 in ms.
pub type Pcts = [f64; 3];

/// TTFT and ITL percentiles over two spans: recent and whole.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Latency {
    /// Column headings: `last 10 s` / `this level`, or `1 min` / `5 min`.
    pub spans: [String; 2],
    pub ttft: [Option<Pcts>; 2],
    pub itl: [Option<Pcts>; 2],
}

/// ITL gaps over the stall threshold.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stalls {
    pub threshold_ms: f64,
    pub gaps: u64,
    pub requests: u64,
}

/// One bar of the ITL histogram: gaps in `[lo_ms, hi_ms)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bin {
    pub lo_ms: f64,
    pub hi_ms: f64,
    pub count: u64,
}

/// One alert rule of a proxy.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    pub rule: String,
    /// `firing`, `pending` or `inactive`.
    pub state: String,
    pub value: Option<f64>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Side {
    Histogram(Vec<Bin>),
    Alerts(Vec<Alert>),
}

impl Default for Side {
    fn default() -> Self {
        Side::Histogram(Vec::new())
    }
}

/// The client's own health: when it is late, every timestamp is late with it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct SelfCheck {
    /// Event-loop lag over the last seconds: (p99, max) in ms.
    pub loop_lag_ms: Option<(f64, f64)>,
    /// Open loop only: sends behind schedule.
    pub pacing: Option<Pacing>,
    /// This process's CPU use over the last second, as a share of all cores.
    pub cpu_share: Option<f64>,
    pub cores: usize,
}

/// How well an open loop kept its schedule over the last seconds.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Pacing {
    /// Sends more than 1 ms late, over sends.
    pub late_share: f64,
    /// The `--max-late` bound.
    pub max_late_share: f64,
    /// p99 of sent − scheduled (ms).
    pub lag_p99_ms: f64,
}

impl SelfCheck {
    pub fn loop_lag_bad(&self) -> bool {
        self.loop_lag_ms
            .is_some_and(|(p99, _)| p99 > LOOP_LAG_WARN.as_secs_f64() * 1e3)
    }

    pub fn pacing_bad(&self) -> bool {
        self.pacing.is_some_and(|p| p.late_share > p.max_late_share)
    }

    pub fn cpu_bad(&self) -> bool {
        self.cpu_share.is_some_and(|s| s > CPU_SHARE_WARN)
    }

    /// Whether any figure says the measurements may be late.
    pub fn untrustworthy(&self) -> bool {
        self.loop_lag_bad() || self.pacing_bad() || self.cpu_bad()
    }
}

/// One row of the bottom table: a completed level, or a rolling window.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TableRow {
    pub label: String,
    pub sent: u64,
    pub succeeded: u64,
    pub failed: u64,
    pub ttft_p50_ms: Option<f64>,
    pub ttft_p99_ms: Option<f64>,
    pub itl_p50_ms: Option<f64>,
    pub itl_p99_ms: Option<f64>,
    pub tok_s: Option<f64>,
    /// Why it ended early, or what qualifies it.
    pub note: String,
}

//! What one frame shows: plain data, filled by `cadence bench` from its live state or
//! by `cadence top` from a proxy's `/stats`. Rendering ([`crate::render()`]) is a pure
//! function of it, so frames are tested as text.

use cadence_core::assemble::{CPU_SHARE_WARN, LOOP_LAG_WARN};

/// Which command the dashboard belongs to (the keys it offers differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Mode {
    /// `cadence bench`: the level's progress bar, the ITL histogram, `s` to skip a level.
    #[default]
    Bench,
    /// `cadence top`: a proxy's rolling windows and its alerts.
    Top,
}

/// Everything one frame draws.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct View {
    /// Which command draws the frame.
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
    /// Requests by outcome over the span `scope` names.
    pub counts: Counts,
    /// TTFT and ITL percentiles, recent and whole.
    pub latency: Latency,
    /// Waits over the stall threshold (gaps and first tokens); `None` when the proxy's `/stats` has no window.
    pub stalls: Option<Stalls>,
    /// The right-hand panel: the ITL histogram (bench) or the alerts (top).
    pub side: Side,
    /// What the two charts plot, e.g. `ITL p99 per second` and `output tok/s`.
    pub chart_titles: [String; 2],
    /// ITL p99 over time, oldest first (ms).
    pub itl_p99_series: Vec<f64>,
    /// Output tokens per second over time, oldest first.
    pub tok_s_series: Vec<f64>,
    /// The client's own health, whose lateness makes every timestamp late.
    pub check: SelfCheck,
    /// Title of the table at the bottom: completed levels, or the rolling windows.
    pub table_title: String,
    /// The table's rows, in order: each completed level, or each rolling window.
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
    /// Requests finished in this level (warm-up included).
    pub done: u64,
    /// Records planned for the level (warm-up included); `None` when the load does not
    /// say how many (a `--duration` level).
    pub planned: Option<u64>,
    /// Seconds into the level.
    pub elapsed_s: f64,
    /// The level's `--duration` in seconds; `None` when it ends by count.
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
    /// Requests an attempt was made for.
    pub sent: u64,
    /// Sent requests that ended with a complete response.
    pub succeeded: u64,
    /// Failures by class name (`http_5xx`, `idle_timeout`, …), largest first.
    pub failed: Vec<(String, u64)>,
    /// Sent requests ended by the client's side: the run's deadline or Ctrl-C, or the
    /// proxy's client hanging up.
    pub aborted: u64,
    /// Requests intended but never sent (an open loop behind schedule).
    pub dropped: u64,
}

impl Counts {
    /// Failures of every class together.
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
    /// Time to first token: `[recent, whole]`, each `None` before a sample.
    pub ttft: [Option<Pcts>; 2],
    /// Inter-token latency: `[recent, whole]`, each `None` before a sample.
    pub itl: [Option<Pcts>; 2],
}

/// Waits over the stall threshold: gaps between chunks and waits for the first token.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Stalls {
    /// A wait longer than this (ms) is a stall.
    pub threshold_ms: f64,
    /// Gaps between chunks over the threshold, counted over succeeded requests.
    pub gaps: u64,
    /// Waits for the first token (send to first chunk) over the threshold: a stall too,
    /// as the report counts it (`Stalls.first_token`).
    pub first_token: u64,
    /// Requests with at least one stall of either kind.
    pub requests: u64,
}

/// One bar of the ITL histogram: gaps in `[lo_ms, hi_ms)`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bin {
    /// The bin's lower bound (ms), included.
    pub lo_ms: f64,
    /// The bin's upper bound (ms), excluded.
    pub hi_ms: f64,
    /// Gaps in the bin.
    pub count: u64,
}

/// One alert rule of a proxy.
#[derive(Debug, Clone, PartialEq)]
pub struct Alert {
    /// The rule's name as the proxy's `/stats` gives it.
    pub rule: String,
    /// `firing`, `pending` or `inactive`.
    pub state: String,
    /// The rule's statistic now (in the rule's unit); `None` when its window had no
    /// samples.
    pub value: Option<f64>,
}

/// What the right-hand panel shows: the ITL histogram (bench) or the alerts (top).
#[derive(Debug, Clone, PartialEq)]
pub enum Side {
    /// The level's ITL gaps in power-of-two bins of ms, lowest first.
    Histogram(Vec<Bin>),
    /// The proxy's alert rules with their states.
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
    /// The machine's cores, which `cpu_share` is a share of (0 when unknown, as in `top`).
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
    /// Whether the event loop's lag p99 is over the warning bound
    /// ([`LOOP_LAG_WARN`]).
    pub fn loop_lag_bad(&self) -> bool {
        self.loop_lag_ms
            .is_some_and(|(p99, _)| p99 > LOOP_LAG_WARN.as_secs_f64() * 1e3)
    }

    /// Whether more sends were late than the `--max-late` bound allows.
    pub fn pacing_bad(&self) -> bool {
        self.pacing.is_some_and(|p| p.late_share > p.max_late_share)
    }

    /// Whether this process uses more of the cores than [`CPU_SHARE_WARN`].
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
    /// The level's label (`concurrency=8`) or the window's (`1 min`).
    pub label: String,
    /// Requests an attempt was made for.
    pub sent: u64,
    /// Sent requests that ended with a complete response.
    pub succeeded: u64,
    /// Sent requests that failed, every class together.
    pub failed: u64,
    /// TTFT median (ms); `None` without a sample.
    pub ttft_p50_ms: Option<f64>,
    /// TTFT p99 (ms); `None` without a sample.
    pub ttft_p99_ms: Option<f64>,
    /// ITL median (ms); `None` without a sample.
    pub itl_p50_ms: Option<f64>,
    /// ITL p99 (ms); `None` without a sample.
    pub itl_p99_ms: Option<f64>,
    /// Output tokens per second over the row's span; `None` when it has none yet.
    pub tok_s: Option<f64>,
    /// Why it ended early, or what qualifies it.
    pub note: String,
}

//! Service-level objectives such as `itl.p99<=50ms`: parsed from `--slo`, evaluated
//! against a level's distributions (the SLO gate) and against single requests (goodput),
//! with the same formulas as [`crate::metrics`].

use crate::duration::{parse_duration, parse_duration_spelled, DurationError};
use crate::metrics::{self, LevelSummary, RequestCounts};
use crate::stats::Distribution;
use crate::{Outcome, RequestRecord};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// The SLO rule in words, for the report's definitions.
pub const FORMULA: &str = "each --slo 'metric.stat<op>bound' (e.g. itl.p99<=50ms) compares \
the level's figure (e.g. the p99 of pooled ITL) with the bound, in ms for times and tokens/s \
for output_speed; an SLO whose metric has no samples fails; errors.rate (or \
errors.CLASS.rate, e.g. errors.http_5xx.rate) is the failed (of that class) share of sent \
non-warm-up requests in %, and fails when nothing was sent";

/// Goodput in words, for the report's definitions.
pub const GOODPUT_FORMULA: &str = "requests that succeeded and met every SLO on their own \
values (a request's TTFT, TPOT, E2E or output speed; for ITL the statistic over that \
request's own gaps; a metric that does not apply to a short answer, such as ITL for a \
one-chunk answer, counts as met); share = good / sent non-warm-up requests; requests_per_s = \
good / measured window";

/// What an SLO constrains: one of the level's distributions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SloMetric {
    /// Time to first token, ms (`ttft`).
    Ttft,
    /// Time to first visible content, ms (`ttft_content`).
    TtftContent,
    /// TTFT from the scheduled send time, ms (`ttft_response`).
    TtftResponse,
    /// Pooled inter-token latency, ms (`itl`); per request, the statistic over its own
    /// gaps.
    Itl,
    /// Per-token ITL, ms (`itl_per_token`).
    ItlPerToken,
    /// Time per output token, ms (`tpot`).
    Tpot,
    /// End-to-end latency, ms (`e2e`).
    E2e,
    /// Per-request output speed, tokens/s.
    OutputSpeed,
    /// A whole session's wall time (agent loops, multi-turn chats): judged on the
    /// level's sessions, not on single requests.
    Session,
    /// The share of sent requests that failed, in %: every failure class (`None`) or
    /// one (`errors.http_5xx.rate`). Not a distribution: its only statistic is the
    /// rate (the mean of a per-request 0/1 failure indicator).
    ErrorRate(Option<Outcome>),
}

impl SloMetric {
    /// Every metric with a distribution (all but the error rate), matched by name when
    /// parsing.
    pub const ALL: [SloMetric; 9] = [
        SloMetric::Ttft,
        SloMetric::TtftContent,
        SloMetric::TtftResponse,
        SloMetric::Itl,
        SloMetric::ItlPerToken,
        SloMetric::Tpot,
        SloMetric::E2e,
        SloMetric::OutputSpeed,
        SloMetric::Session,
    ];

    /// The name used in SLO expressions (`errors` for the error rates).
    pub fn name(self) -> &'static str {
        match self {
            SloMetric::ErrorRate(_) => "errors",
            SloMetric::Ttft => "ttft",
            SloMetric::TtftContent => "ttft_content",
            SloMetric::TtftResponse => "ttft_response",
            SloMetric::Itl => "itl",
            SloMetric::ItlPerToken => "itl_per_token",
            SloMetric::Tpot => "tpot",
            SloMetric::E2e => "e2e",
            SloMetric::OutputSpeed => "output_speed",
            SloMetric::Session => "session",
        }
    }

    /// Whether values are times (milliseconds); otherwise tokens/s or %.
    pub fn is_time(self) -> bool {
        !matches!(self, SloMetric::OutputSpeed | SloMetric::ErrorRate(_))
    }

    /// The unit of [`Slo::bound`] and [`SloResult::observed`]: `ms`, `tok/s` or `%`.
    pub fn unit(self) -> &'static str {
        match self {
            SloMetric::OutputSpeed => "tok/s",
            SloMetric::ErrorRate(_) => "%",
            _ => "ms",
        }
    }

    /// The level's distribution of this metric (ms, or tokens/s for output speed).
    pub fn distribution(self, level: &LevelSummary) -> Option<Distribution> {
        match self {
            SloMetric::Ttft => level.ttft,
            SloMetric::TtftContent => level.ttft_content,
            SloMetric::TtftResponse => level.ttft_response,
            SloMetric::Itl => level.itl,
            SloMetric::ItlPerToken => level.itl_per_token,
            SloMetric::Tpot => level.tpot,
            SloMetric::E2e => level.e2e,
            SloMetric::OutputSpeed => level.output_speed_tok_s,
            SloMetric::Session => level.sessions.as_ref().and_then(|s| s.wall),
            SloMetric::ErrorRate(_) => None,
        }
    }

    /// The level's figure: the statistic of its distribution, or the error rate in %.
    fn observed(self, stat: SloStat, level: &LevelSummary) -> Option<f64> {
        match self {
            SloMetric::ErrorRate(class) => error_rate(&level.requests, class).map(|r| r * 100.0),
            m => m.distribution(level).map(|d| stat.of(&d)),
        }
        .filter(|v| !v.is_nan())
    }
}

/// The share (0–1) of sent non-warm-up requests that failed, of any class (`None`) or
/// of one; `None` when nothing was sent.
pub fn error_rate(counts: &RequestCounts, class: Option<Outcome>) -> Option<f64> {
    let failed = match class {
        None => counts.failed_total(),
        Some(c) => counts.failed.get(c.name()).copied().unwrap_or(0),
    };
    (counts.sent > 0).then(|| failed as f64 / counts.sent as f64)
}

/// The default `--max-error-rate`: a level where more than this share of the sent
/// requests failed does not pass, whatever its latency SLOs say.
pub const DEFAULT_MAX_ERROR_RATE: f64 = 0.05;

/// The error-rate ceiling (`--max-error-rate`, a share): the level's warning when more
/// of its sent requests failed than `max` allows, else `None`.
pub fn error_ceiling(counts: &RequestCounts, max: f64) -> Option<String> {
    over_error_ceiling(counts, max)
        .map(|over| format!("{over} (--max-error-rate): the run fails (exit 3)"))
}

/// When more of the sent requests failed than `max` (a share) allows: the rate, the
/// counts and the ceiling, to which each command adds its setting's name and what
/// follows; else `None`.
pub fn over_error_ceiling(counts: &RequestCounts, max: f64) -> Option<String> {
    let rate = error_rate(counts, None)?;
    (rate > max).then(|| {
        format!(
            "error rate {:.1} % ({} of {} sent requests failed) is over the ceiling of {} %",
            rate * 100.0,
            counts.failed_total(),
            counts.sent,
            max * 100.0
        )
    })
}

/// Whether a level passes as a `--find-max` probe: some request succeeded, the error
/// rate is within `max_error_rate`, and every SLO holds. (Whether the level is valid at
/// all, e.g. pacing and accounting, is the caller's to add.)
pub fn probe_passes(level: &LevelSummary, slos: &[Slo], max_error_rate: f64) -> bool {
    level.requests.succeeded > 0
        && error_ceiling(&level.requests, max_error_rate).is_none()
        && slos.iter().all(|s| s.evaluate(level).pass)
}

impl FromStr for SloMetric {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            // The report's key for output speed is accepted too.
            "output_speed_tok_s" => Ok(SloMetric::OutputSpeed),
            "errors" => Ok(SloMetric::ErrorRate(None)),
            _ => SloMetric::ALL.into_iter().find(|m| m.name() == s).ok_or(()),
        }
    }
}

/// Which figure of the distribution an SLO constrains.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SloStat {
    /// The arithmetic mean.
    Mean,
    /// The smallest sample.
    Min,
    /// The largest sample.
    Max,
    /// The median (type-7).
    P50,
    /// The 90th percentile (type-7).
    P90,
    /// The 95th percentile (type-7).
    P95,
    /// The 99th percentile (type-7).
    P99,
    /// The 99.9th percentile (type-7), written `p999` or `p99.9`.
    P999,
}

impl SloStat {
    /// Every statistic, from the mean to p99.9 (matched by name when parsing).
    pub const ALL: [SloStat; 8] = [
        SloStat::Mean,
        SloStat::Min,
        SloStat::Max,
        SloStat::P50,
        SloStat::P90,
        SloStat::P95,
        SloStat::P99,
        SloStat::P999,
    ];

    /// The name used in SLO expressions (`p999` is also accepted as `p99.9`).
    pub fn name(self) -> &'static str {
        match self {
            SloStat::Mean => "mean",
            SloStat::Min => "min",
            SloStat::Max => "max",
            SloStat::P50 => "p50",
            SloStat::P90 => "p90",
            SloStat::P95 => "p95",
            SloStat::P99 => "p99",
            SloStat::P999 => "p999",
        }
    }

    /// This figure of `d`.
    pub fn of(self, d: &Distribution) -> f64 {
        match self {
            SloStat::Mean => d.mean,
            SloStat::Min => d.min,
            SloStat::Max => d.max,
            SloStat::P50 => d.p50,
            SloStat::P90 => d.p90,
            SloStat::P95 => d.p95,
            SloStat::P99 => d.p99,
            SloStat::P999 => d.p999,
        }
    }
}

impl FromStr for SloStat {
    type Err = ();
    fn from_str(s: &str) -> Result<Self, ()> {
        match s {
            "p99.9" => Ok(SloStat::P999),
            _ => SloStat::ALL.into_iter().find(|t| t.name() == s).ok_or(()),
        }
    }
}

/// The comparison an observed value must satisfy against the bound.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SloOp {
    /// `<=`: at most the bound.
    Le,
    /// `<`: below the bound.
    Lt,
    /// `>=`: at least the bound.
    Ge,
    /// `>`: above the bound.
    Gt,
}

impl SloOp {
    /// The operator as written in an SLO (`<=`, `<`, `>=`, `>`).
    pub fn symbol(self) -> &'static str {
        match self {
            SloOp::Le => "<=",
            SloOp::Lt => "<",
            SloOp::Ge => ">=",
            SloOp::Gt => ">",
        }
    }

    /// Whether `observed op bound` holds.
    pub fn holds(self, observed: f64, bound: f64) -> bool {
        match self {
            SloOp::Le => observed <= bound,
            SloOp::Lt => observed < bound,
            SloOp::Ge => observed >= bound,
            SloOp::Gt => observed > bound,
        }
    }
}

/// One SLO, e.g. `itl.p99<=50ms`: `metric.stat`, an operator, and a bound.
#[derive(Debug, Clone, PartialEq)]
pub struct Slo {
    /// The figure's distribution (or the error rate).
    pub metric: SloMetric,
    /// Which figure of that distribution.
    pub stat: SloStat,
    /// How the figure must compare with `bound`.
    pub op: SloOp,
    /// In milliseconds for times, tokens/s for output speed.
    pub bound: f64,
    /// The expression normalized: canonical names, no spaces, the bound in the unit it
    /// was written in, spelled as [`crate::parse_duration_spelled`] spells it (`µs` as
    /// `us`, `min` as `m`), e.g. `itl.p99<=50ms`, `ttft.p90<=2s`.
    pub text: String,
}

/// Why an SLO expression was rejected; the message says what is wrong and shows a
/// valid example.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid SLO {input:?}: {reason}; write it like 'itl.p99<=50ms', 'ttft.p90<=2s' or 'output_speed.p50>=20'")]
pub struct SloParseError {
    /// The expression as given.
    pub input: String,
    /// What is wrong with it, in words.
    pub reason: String,
}

const METRIC_LIST: &str =
    "ttft, ttft_content, ttft_response, itl, itl_per_token, tpot, e2e, output_speed; or errors.rate, errors.CLASS.rate";
const STAT_LIST: &str = "mean, min, max, p50, p90, p95, p99, p999 (or p99.9)";

impl FromStr for Slo {
    type Err = SloParseError;

    fn from_str(input: &str) -> Result<Slo, SloParseError> {
        let err = |reason: String| SloParseError {
            input: input.to_string(),
            reason,
        };
        let s: String = input.chars().filter(|c| !c.is_whitespace()).collect();
        if s.is_empty() {
            return Err(err("it is empty".into()));
        }
        let (lhs, op, rhs) = split_comparison(&s).map_err(err)?;
        let (metric, stat) = parse_target(&lhs.to_ascii_lowercase()).map_err(err)?;
        let (bound, written) = parse_bound(metric, rhs).map_err(err)?;
        let target = match metric {
            SloMetric::ErrorRate(None) => "errors.rate".to_string(),
            SloMetric::ErrorRate(Some(c)) => format!("errors.{}.rate", c.name()),
            m => format!("{}.{}", m.name(), stat.name()),
        };
        Ok(Slo {
            metric,
            stat,
            op,
            bound,
            text: format!("{target}{}{written}", op.symbol()),
        })
    }
}

/// `lhs`, the comparison and `rhs` of a whitespace-free expression.
fn split_comparison(s: &str) -> Result<(&str, SloOp, &str), String> {
    let at = s
        .find(['<', '>', '='])
        .ok_or_else(|| "no comparison (<=, <, >= or >)".to_string())?;
    let (lhs, rest) = s.split_at(at);
    let (op, rhs) = if let Some(r) = rest.strip_prefix("<=") {
        (SloOp::Le, r)
    } else if let Some(r) = rest.strip_prefix(">=") {
        (SloOp::Ge, r)
    } else if let Some(r) = rest.strip_prefix('<') {
        (SloOp::Lt, r)
    } else if let Some(r) = rest.strip_prefix('>') {
        (SloOp::Gt, r)
    } else {
        return Err(format!(
            "unknown comparison at {rest:?}; use <=, <, >= or >"
        ));
    };
    if rhs.is_empty() {
        return Err("no bound after the comparison".into());
    }
    if rhs.starts_with(['<', '>', '=']) {
        return Err(format!(
            "unknown comparison {:?}; use <=, <, >= or >",
            &rest[..rest.len() - rhs.len() + 1]
        ));
    }
    Ok((lhs, op, rhs))
}

/// `metric.stat`, or `errors.rate` / `errors.CLASS.rate` (whose statistic is the mean
/// of the 0/1 failure indicator).
fn parse_target(lhs: &str) -> Result<(SloMetric, SloStat), String> {
    if let Some(rest) = lhs.strip_prefix("errors.") {
        let class = rest.strip_suffix(".rate");
        let metric = match (rest, class) {
            ("rate", _) => SloMetric::ErrorRate(None),
            (_, Some(c)) => {
                let class = Outcome::ALL
                    .into_iter()
                    .find(|o| o.is_failure() && o.name() == c)
                    .ok_or_else(|| {
                        format!("unknown failure class {c:?} (the classes of the report's requests.failed, e.g. http_5xx)")
                    })?;
                SloMetric::ErrorRate(Some(class))
            }
            _ => return Err(format!("{lhs:?}: write errors.rate or errors.CLASS.rate")),
        };
        return Ok((metric, SloStat::Mean));
    }
    let (metric_s, stat_s) = lhs.split_once('.').ok_or_else(|| {
        format!("{lhs:?} is not metric.stat (metrics: {METRIC_LIST}; stats: {STAT_LIST})")
    })?;
    let metric: SloMetric = metric_s
        .parse()
        .ok()
        .filter(|m| !matches!(m, SloMetric::ErrorRate(_)))
        .ok_or_else(|| format!("unknown metric {metric_s:?} (metrics: {METRIC_LIST})"))?;
    let stat: SloStat = stat_s
        .parse()
        .map_err(|()| format!("unknown statistic {stat_s:?} (stats: {STAT_LIST})"))?;
    Ok((metric, stat))
}

/// The bound in the metric's unit (ms, tok/s or %) and the bound as the normalized
/// expression writes it (`2s`, `20`, `5%`).
fn parse_bound(metric: SloMetric, rhs: &str) -> Result<(f64, String), String> {
    if metric.is_time() {
        return time_bound(metric, rhs);
    }
    let num_end = rhs
        .find(|c: char| !(c.is_ascii_digit() || matches!(c, '.' | '+' | '-' | 'e' | 'E')))
        .unwrap_or(rhs.len());
    let (num_s, unit_s) = rhs.split_at(num_end);
    let value: f64 = num_s
        .parse()
        .map_err(|_| format!("the bound {rhs:?} does not start with a number"))?;
    if !value.is_finite() || value < 0.0 {
        return Err(format!("the bound {num_s} must be a finite number >= 0"));
    }
    let value = value + 0.0; // -0 is 0
    let number = format!("{value}");
    match (metric, unit_s) {
        (SloMetric::ErrorRate(_), "%") if value <= 100.0 => Ok((value, format!("{number}%"))),
        (SloMetric::ErrorRate(_), "") if value <= 1.0 => Ok((value * 100.0, number)),
        (SloMetric::ErrorRate(_), _) => Err(format!(
            "an error rate is a share: write 5% or 0.05, not {rhs:?}"
        )),
        (_, "" | "tok/s") => Ok((value, number)),
        (_, u) if parse_duration(rhs).is_ok() => Err(format!(
            "output_speed is in tokens/s, not a time: drop the {u:?}, e.g. \
             'output_speed.p50>=20'"
        )),
        (_, u) => Err(format!(
            "unknown unit {u:?} for output_speed (tokens/s): write no unit"
        )),
    }
}

/// A time bound in ms, read by the one duration parser (so its units and spellings are
/// those of every flag: `500us`, `50ms`, `2s`, `1m`, `1s500ms`), and its spelling.
fn time_bound(metric: SloMetric, rhs: &str) -> Result<(f64, String), String> {
    match parse_duration_spelled(rhs) {
        // ns to ms by one division, so 50us is exactly the double nearest 0.05.
        Ok((d, spelled)) => Ok((d.as_nanos() as f64 / 1e6, spelled)),
        Err(DurationError::MissingUnit(n)) if n == rhs => Err(format!(
            "{} is a time and needs a unit (ns, us, ms or s): say {n}ms",
            metric.name()
        )),
        Err(DurationError::MissingNumber(_)) if rhs.starts_with('-') => {
            Err(format!("the bound {rhs} must be a finite number >= 0"))
        }
        Err(DurationError::MissingNumber(_)) => {
            Err(format!("the bound {rhs:?} does not start with a number"))
        }
        Err(DurationError::UnknownUnit(u)) if u.starts_with(['e', 'E']) => Err(format!(
            "the bound {rhs:?} has an exponent: write the number out (e.g. 1000ms or 1s)"
        )),
        Err(DurationError::UnknownUnit(u)) => Err(format!(
            "unknown time unit {u:?}; use ns, us, ms, s, m or h"
        )),
        Err(e) => Err(format!("the bound {rhs:?} is not a duration: {e}")),
    }
}

impl fmt::Display for Slo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// An SLO evaluated on one level, as the JSON report holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SloResult {
    /// The normalized expression ([`Slo::text`]).
    pub slo: String,
    /// The level's figure, in `unit`; `None` when the level has no samples of it.
    pub observed: Option<f64>,
    /// The bound, in `unit`.
    pub bound: f64,
    /// `ms` for times, `tok/s` for output speed.
    pub unit: String,
    /// Whether the observed figure meets the bound; `false` when there is none.
    pub pass: bool,
}

/// What one request says about an SLO.
enum PerRequest {
    Value(f64),
    /// The metric does not apply to a request this short (fewer than two chunks for
    /// ITL, fewer than two tokens in two chunks for TPOT and output speed, no visible
    /// content for `ttft_content`): nothing to violate.
    NotApplicable,
    /// A time the metric needs is missing or out of order.
    Missing,
}

impl Slo {
    /// Evaluates the SLO on a level's distributions. A metric with no samples fails,
    /// with `observed: None`.
    pub fn evaluate(&self, level: &LevelSummary) -> SloResult {
        let observed = self.metric.observed(self.stat, level);
        SloResult {
            slo: self.text.clone(),
            observed,
            bound: self.bound,
            unit: self.metric.unit().to_string(),
            pass: observed.is_some_and(|v| self.op.holds(v, self.bound)),
        }
    }

    /// The SLO's metric for one request, whatever its outcome, in ms (or tokens/s):
    /// that request's TTFT, TTFT to content, TTFT from schedule, TPOT, E2E or output
    /// speed, or for `itl` / `itl_per_token` the statistic over that request's own gaps
    /// (e.g. its p99 gap). `None` when the request has no such value.
    pub fn request_value(&self, rec: &RequestRecord) -> Option<f64> {
        match self.per_request(rec) {
            PerRequest::Value(v) => Some(v),
            PerRequest::NotApplicable | PerRequest::Missing => None,
        }
    }

    /// Whether one request meets the SLO: it succeeded, and its [`Slo::request_value`]
    /// satisfies the bound, or the metric does not apply to it (a one-chunk answer has
    /// no ITL gap to be too slow, a one-token answer no TPOT, an answer that is all
    /// reasoning or tool calls no visible-content TTFT). A missing time it needs
    /// (no first chunk for TTFT, no schedule for `ttft_response`) fails.
    pub fn request_meets(&self, rec: &RequestRecord) -> bool {
        if rec.outcome != Outcome::Succeeded {
            return false;
        }
        match self.per_request(rec) {
            PerRequest::Value(v) => self.op.holds(v, self.bound),
            PerRequest::NotApplicable => true,
            PerRequest::Missing => false,
        }
    }

    fn per_request(&self, r: &RequestRecord) -> PerRequest {
        let bad = &mut 0u64;
        let single = |v: Option<f64>| v.map_or(PerRequest::Missing, PerRequest::Value);
        match self.metric {
            // A level's figure: a succeeded request has nothing to violate.
            SloMetric::ErrorRate(_) | SloMetric::Session => PerRequest::NotApplicable,
            SloMetric::Ttft => single(metrics::ttft_ms(r, bad)),
            SloMetric::TtftResponse => single(metrics::ttft_response_ms(r, bad)),
            SloMetric::E2e => single(metrics::e2e_ms(r, bad)),
            SloMetric::TtftContent => {
                // Chunks but no visible content: all reasoning or tool calls.
                if r.first_content_ns.is_none() && r.sent_ns.is_some() && !r.chunks.is_empty() {
                    PerRequest::NotApplicable
                } else {
                    single(metrics::ttft_content_ms(r, bad))
                }
            }
            SloMetric::Tpot | SloMetric::OutputSpeed => {
                match metrics::tpot_and_speed(r, bad) {
                    Some((tpot, _)) if self.metric == SloMetric::Tpot => PerRequest::Value(tpot),
                    Some((_, Some(speed))) => PerRequest::Value(speed),
                    // Every token in one instant: no span to measure a speed over.
                    Some((_, None)) => PerRequest::NotApplicable,
                    None if *bad > 0 => PerRequest::Missing,
                    None => PerRequest::NotApplicable,
                }
            }
            SloMetric::Itl | SloMetric::ItlPerToken => {
                if r.chunks.len() < 2 {
                    return PerRequest::NotApplicable;
                }
                let d = if self.metric == SloMetric::Itl {
                    let mut gaps: Vec<f64> = metrics::itl_gaps(r, bad)
                        .map(|(g, _)| metrics::ms(g))
                        .collect();
                    Distribution::from_samples(&mut gaps)
                } else {
                    let mut gaps: Vec<(f64, u64)> = metrics::itl_gaps(r, bad)
                        .map(|(g, later)| {
                            let k = metrics::per_token_weight(later);
                            (metrics::ms(g) / k as f64, k)
                        })
                        .collect();
                    Distribution::from_weighted(&mut gaps)
                };
                single(d.map(|d| self.stat.of(&d)))
            }
        }
    }
}

/// Requests that met every SLO: the goodput of a level.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Goodput {
    /// Non-warm-up sent requests that succeeded and met every SLO.
    pub good_requests: u64,
    /// `good_requests` / sent requests; `None` when nothing was sent.
    pub share: Option<f64>,
    /// `good_requests` per second of the measured window; `None` without a window of
    /// positive length.
    pub requests_per_s: Option<f64>,
}

/// Goodput over the non-warm-up *sent* requests of `records` (see
/// [`RequestRecord::was_sent`]): a request is good when it succeeded and
/// [`Slo::request_meets`] every SLO (with no SLOs, every succeeded request is good).
/// `window_s` is the level's measured window (`throughput.window_s`).
pub fn goodput(records: &[RequestRecord], slos: &[Slo], window_s: Option<f64>) -> Goodput {
    let mut acc = GoodputAcc::default();
    for r in records {
        acc.push(r, slos);
    }
    acc.finish(window_s)
}

/// [`goodput`] one record at a time: sent and good requests, mergeable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct GoodputAcc {
    sent: u64,
    good: u64,
}

impl GoodputAcc {
    /// Counts a sent, non-warm-up record, and counts it good when it succeeded and met
    /// every SLO in `slos`; others are skipped.
    pub fn push(&mut self, r: &RequestRecord, slos: &[Slo]) {
        if r.warmup || !r.was_sent() {
            return;
        }
        self.sent += 1;
        if r.outcome == Outcome::Succeeded && slos.iter().all(|s| s.request_meets(r)) {
            self.good += 1;
        }
    }

    /// Adds the counts of another part of the same level.
    pub fn merge(&mut self, o: &GoodputAcc) {
        self.sent += o.sent;
        self.good += o.good;
    }

    /// `window_s` is the level's measured window (`throughput.window_s`).
    pub fn finish(&self, window_s: Option<f64>) -> Goodput {
        let (sent, good) = (self.sent, self.good);
        Goodput {
            good_requests: good,
            share: (sent > 0).then(|| good as f64 / sent as f64),
            requests_per_s: window_s
                .filter(|&w| w > 0.0 && w.is_finite())
                .map(|w| good as f64 / w),
        }
    }
}

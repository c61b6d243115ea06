//! Live alert rules such as `itl.p50>50ms for 1m`: a condition in core's SLO syntax,
//! evaluated on the proxy's rolling window, that must hold for a while before it
//! fires and resolves as soon as it stops holding. Pure: the caller supplies the time
//! and the observed values, and gets the transitions to log and post.

use cadence_core::{LevelSummary, Slo, SloParseError};
use serde::Serialize;
use std::str::FromStr;
use std::time::Duration;

/// The rolling window a rule is evaluated over unless it says `over DUR`.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);
/// The longest window the proxy keeps records for.
pub const MAX_WINDOW: Duration = Duration::from_secs(300);

/// One rule: `METRIC.STAT OP BOUND [for DURATION] [over WINDOW]`.
#[derive(Debug, Clone, PartialEq)]
pub struct AlertRule {
    /// The condition that fires the alert while it holds (e.g. `itl.p50>50ms`).
    pub condition: Slo,
    /// How long the condition must hold before the alert fires (0: at once).
    pub hold: Duration,
    /// The rolling window the statistic is computed over.
    pub window: Duration,
    /// The rule as normalized text, e.g. `itl.p50>50ms for 1m`.
    pub text: String,
}

/// Why an `--alert` rule did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AlertParseError {
    /// The condition (before `for`/`over`) is not a valid SLO expression.
    #[error(transparent)]
    Condition(#[from] SloParseError),
    /// The words around the condition are wrong: a missing condition, a bad duration, a
    /// repeated or unknown keyword, a window out of range.
    #[error("invalid alert {input:?}: {reason}; write it like 'itl.p50>50ms for 1m' or 'ttft.p99>2s for 30s over 5m'")]
    Syntax {
        /// The rule as given.
        input: String,
        /// What is wrong with it, in words.
        reason: String,
    },
}

fn human(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s >= 60.0 && s % 60.0 == 0.0 {
        format!("{}m", s / 60.0)
    } else if s >= 1.0 || s == 0.0 {
        format!("{s}s")
    } else {
        format!("{}ms", s * 1e3)
    }
}

impl FromStr for AlertRule {
    type Err = AlertParseError;

    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let syntax = |reason: &str| AlertParseError::Syntax {
            input: input.to_string(),
            reason: reason.to_string(),
        };
        let words: Vec<&str> = input.split_whitespace().collect();
        // The condition is every word before the first `for` / `over`.
        let split = words
            .iter()
            .position(|w| *w == "for" || *w == "over")
            .unwrap_or(words.len());
        if split == 0 {
            return Err(syntax("no condition"));
        }
        let condition: Slo = words[..split].join("").parse()?;
        let mut hold = Duration::ZERO;
        let mut window = DEFAULT_WINDOW;
        let mut rest = &words[split..];
        let mut seen = (false, false);
        while let [kw, value, tail @ ..] = rest {
            let d = cadence_core::parse_duration(value).map_err(|e| {
                syntax(&format!(
                    "{value:?} is not a duration ({e}; e.g. 30s, 1m, 500ms)"
                ))
            })?;
            match *kw {
                "for" if !seen.0 => {
                    seen.0 = true;
                    hold = d;
                }
                "over" if !seen.1 => {
                    seen.1 = true;
                    if d.is_zero() || d > MAX_WINDOW {
                        return Err(syntax("the window must be above 0 and at most 5m"));
                    }
                    window = d;
                }
                _ => return Err(syntax(&format!("unexpected {kw:?}"))),
            }
            rest = tail;
        }
        if !rest.is_empty() {
            return Err(syntax(&format!("{:?} needs a duration after it", rest[0])));
        }
        let mut text = condition.text.clone();
        if !hold.is_zero() {
            text.push_str(&format!(" for {}", human(hold)));
        }
        if window != DEFAULT_WINDOW {
            text.push_str(&format!(" over {}", human(window)));
        }
        Ok(AlertRule {
            condition,
            hold,
            window,
            text,
        })
    }
}

impl AlertRule {
    /// The rule's statistic on a window's summary (ms, or tokens/s), when it has samples.
    pub fn observe(&self, summary: &LevelSummary) -> Option<f64> {
        self.condition
            .metric
            .distribution(summary)
            .map(|d| self.condition.stat.of(&d))
            .filter(|v| !v.is_nan())
    }

    /// The bound in seconds when the metric is a time (for histogram bucket bounds).
    pub fn bound_seconds(&self) -> Option<f64> {
        self.condition
            .metric
            .is_time()
            .then(|| self.condition.bound / 1e3)
    }
}

/// Where a rule stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum AlertState {
    /// The condition does not hold (or the window has no samples).
    Inactive,
    /// The condition holds since `since_ns`, not yet for long enough.
    Pending {
        /// When it began to hold (ns on the proxy's clock).
        since_ns: u64,
    },
    /// The condition has held for the rule's hold time: the alert is firing.
    Firing {
        /// When it fired (ns on the proxy's clock).
        since_ns: u64,
    },
}

/// A change worth telling someone about.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Transition {
    /// The rule as normalized text, e.g. `itl.p50>50ms for 1m`.
    pub alert: String,
    /// `firing` or `resolved`.
    pub status: &'static str,
    /// The statistic when it changed; `null` when the window had no samples.
    pub value: Option<f64>,
    /// The rule's bound, in `unit`.
    pub bound: f64,
    /// The unit of `value` and `bound`: `ms`, `tok/s` or `%`.
    pub unit: &'static str,
    /// The rolling window the statistic was computed over, in seconds.
    pub window_s: f64,
    /// When (ns since the proxy started).
    pub at_ns: u64,
}

/// A rule's state, for `/stats`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AlertStatus {
    /// The rule as normalized text.
    pub alert: String,
    /// Inactive, pending or firing, with since when.
    #[serde(flatten)]
    pub state: AlertState,
    /// The statistic at the last evaluation, in the rule's unit; `None` before the first
    /// or when the window had no samples.
    pub value: Option<f64>,
}

/// Every rule and its state.
#[derive(Debug, Clone)]
pub struct Alerts {
    rules: Vec<(AlertRule, AlertState, Option<f64>)>,
}

impl Alerts {
    /// Every rule inactive, none evaluated yet.
    pub fn new(rules: Vec<AlertRule>) -> Self {
        Alerts {
            rules: rules
                .into_iter()
                .map(|r| (r, AlertState::Inactive, None))
                .collect(),
        }
    }

    /// The rules, in the order given.
    pub fn rules(&self) -> impl Iterator<Item = &AlertRule> {
        self.rules.iter().map(|(r, _, _)| r)
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Steps every rule to `now_ns` given its observed value (`None`: no samples, which
    /// never holds, so a firing alert resolves when traffic stops).
    pub fn evaluate(
        &mut self,
        now_ns: u64,
        mut observe: impl FnMut(&AlertRule) -> Option<f64>,
    ) -> Vec<Transition> {
        let mut out = Vec::new();
        for (rule, state, last) in &mut self.rules {
            let value = observe(rule);
            *last = value;
            let holds = value.is_some_and(|v| rule.condition.op.holds(v, rule.condition.bound));
            let transition = |status| Transition {
                alert: rule.text.clone(),
                status,
                value,
                bound: rule.condition.bound,
                unit: rule.condition.metric.unit(),
                window_s: rule.window.as_secs_f64(),
                at_ns: now_ns,
            };
            let hold_ns = rule.hold.as_nanos() as u64;
            *state = match (*state, holds) {
                (AlertState::Inactive, true) if hold_ns == 0 => {
                    out.push(transition("firing"));
                    AlertState::Firing { since_ns: now_ns }
                }
                (AlertState::Inactive, true) => AlertState::Pending { since_ns: now_ns },
                (AlertState::Pending { since_ns }, true) => {
                    if now_ns.saturating_sub(since_ns) >= hold_ns {
                        out.push(transition("firing"));
                        AlertState::Firing { since_ns: now_ns }
                    } else {
                        AlertState::Pending { since_ns }
                    }
                }
                (AlertState::Firing { since_ns }, true) => AlertState::Firing { since_ns },
                (AlertState::Firing { .. }, false) => {
                    out.push(transition("resolved"));
                    AlertState::Inactive
                }
                (_, false) => AlertState::Inactive,
            };
        }
        out
    }

    /// Each rule's state and last value, in the order given (for `/stats`).
    pub fn status(&self) -> Vec<AlertStatus> {
        self.rules
            .iter()
            .map(|(r, s, v)| AlertStatus {
                alert: r.text.clone(),
                state: *s,
                value: *v,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = 1_000_000_000;

    #[test]
    fn parses_condition_hold_and_window() {
        let r: AlertRule = "itl.p50>50ms for 1m".parse().unwrap();
        assert_eq!(r.condition.bound, 50.0);
        assert_eq!(r.hold, Duration::from_secs(60));
        assert_eq!(r.window, DEFAULT_WINDOW);
        assert_eq!(r.text, "itl.p50>50ms for 1m");
        let r: AlertRule = "ttft.p99 > 2s over 5m".parse().unwrap();
        assert_eq!(r.condition.bound, 2000.0);
        assert!(r.hold.is_zero());
        assert_eq!(r.window, Duration::from_secs(300));
        assert_eq!(r.text, "ttft.p99>2s over 5m");
        assert_eq!(r.bound_seconds(), Some(2.0));
    }

    #[test]
    fn rejects_bad_rules_with_a_reason() {
        for (bad, why) in [
            ("for 1m", "no condition"),
            ("itl.p50>50ms for", "needs a duration"),
            ("itl.p50>50ms for soon", "not a duration"),
            ("itl.p50>50ms over 1h", "at most 5m"),
            ("itl.p50>50ms for 1m for 2m", "unexpected"),
            ("itl.p50>50", "needs a unit"),
        ] {
            let e = bad.parse::<AlertRule>().unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn fires_after_holding_and_resolves_when_it_stops() {
        let mut a = Alerts::new(vec!["itl.p50>50ms for 10s".parse().unwrap()]);
        assert!(a.evaluate(0, |_| Some(60.0)).is_empty(), "pending");
        assert!(a.evaluate(9 * S, |_| Some(70.0)).is_empty(), "not yet 10 s");
        let t = a.evaluate(10 * S, |_| Some(80.0));
        assert_eq!(t.len(), 1);
        assert_eq!(
            (t[0].status, t[0].value, t[0].bound),
            ("firing", Some(80.0), 50.0)
        );
        assert!(a.evaluate(11 * S, |_| Some(90.0)).is_empty(), "fires once");
        let t = a.evaluate(12 * S, |_| Some(40.0));
        assert_eq!(t[0].status, "resolved");
        assert_eq!(a.status()[0].state, AlertState::Inactive);
    }

    #[test]
    fn a_dip_restarts_the_hold_and_no_data_never_fires() {
        let mut a = Alerts::new(vec!["itl.p99>200ms for 5s".parse().unwrap()]);
        a.evaluate(0, |_| Some(300.0));
        a.evaluate(3 * S, |_| Some(100.0));
        assert!(
            a.evaluate(6 * S, |_| Some(300.0)).is_empty(),
            "hold restarted at 6 s"
        );
        assert!(a.evaluate(10 * S, |_| Some(300.0)).is_empty());
        assert_eq!(a.evaluate(11 * S, |_| Some(300.0))[0].status, "firing");
        let t = a.evaluate(12 * S, |_| None);
        assert_eq!((t[0].status, t[0].value), ("resolved", None));
        let mut b = Alerts::new(vec!["itl.p99>200ms".parse().unwrap()]);
        assert!(b.evaluate(0, |_| None).is_empty());
        assert_eq!(
            b.evaluate(1, |_| Some(201.0))[0].status,
            "firing",
            "no hold: at once"
        );
    }
}

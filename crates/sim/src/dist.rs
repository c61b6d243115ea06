//! Delay distributions for the simulated token cadence (TTFT, ITL, stalls).
//! One small enum with a text form (`"uniform:5ms..15ms"`) so the CLI and the
//! per-request headers can name a distribution without any extra parsing code.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use rand::Rng;
use rand_distr::Distribution;

/// A distribution of non-negative durations.
///
/// Text forms accepted by [`FromStr`] (and produced by [`fmt::Display`]):
/// `10ms` or `fixed:10ms`, `uniform:5ms..15ms`, `normal:10ms,2ms` (mean,
/// stddev; samples below zero are clamped to zero), `lognormal:10ms,3ms`
/// (mean, stddev of the resulting durations). Durations are read by
/// [`cadence_base::parse_duration`]: `ns`, `us` (or `µs`), `ms`, `s`, `m`, `h`;
/// decimals are allowed (`1.5ms`); a bare `0` means zero.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dist {
    /// Always the same duration.
    Fixed(Duration),
    /// Uniform between the two bounds, both inclusive (`lo <= hi`).
    Uniform(Duration, Duration),
    /// Normal with this mean and standard deviation, clamped at zero.
    Normal {
        /// The mean.
        mean: Duration,
        /// The standard deviation (0: always the mean).
        stddev: Duration,
    },
    /// Log-normal whose samples have this mean and standard deviation:
    /// a right-skewed shape like real decode latencies.
    LogNormal {
        /// The samples' mean.
        mean: Duration,
        /// The samples' standard deviation (0: always the mean).
        stddev: Duration,
    },
}

impl Dist {
    /// Draws one duration.
    pub fn sample<R: Rng + ?Sized>(&self, rng: &mut R) -> Duration {
        match *self {
            Dist::Fixed(d) => d,
            Dist::Uniform(lo, hi) => {
                let (lo, hi) = (nanos(lo), nanos(hi));
                if lo >= hi {
                    Duration::from_nanos(lo)
                } else {
                    Duration::from_nanos(rng.random_range(lo..=hi))
                }
            }
            Dist::Normal { mean, stddev } => {
                let (m, s) = (mean.as_nanos() as f64, stddev.as_nanos() as f64);
                match rand_distr::Normal::new(m, s) {
                    Ok(n) if s > 0.0 => from_f64_nanos(n.sample(rng)),
                    _ => mean,
                }
            }
            Dist::LogNormal { mean, stddev } => {
                let (m, s) = (mean.as_nanos() as f64, stddev.as_nanos() as f64);
                if m <= 0.0 || s <= 0.0 {
                    return mean;
                }
                // Moment matching: choose mu, sigma so that E[X] = m, SD[X] = s.
                let sigma2 = (1.0 + (s * s) / (m * m)).ln();
                let mu = m.ln() - sigma2 / 2.0;
                match rand_distr::LogNormal::new(mu, sigma2.sqrt()) {
                    Ok(d) => from_f64_nanos(d.sample(rng)),
                    Err(_) => mean,
                }
            }
        }
    }

    /// The expected value (for normal, ignoring the clamp at zero).
    pub fn mean(&self) -> Duration {
        match *self {
            Dist::Fixed(d) => d,
            Dist::Uniform(lo, hi) => (lo + hi) / 2,
            Dist::Normal { mean, .. } | Dist::LogNormal { mean, .. } => mean,
        }
    }
}

fn nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn from_f64_nanos(x: f64) -> Duration {
    if x.is_finite() && x > 0.0 {
        Duration::from_nanos(x.min(u64::MAX as f64) as u64)
    } else {
        Duration::ZERO
    }
}

/// Why a distribution or duration string was rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DistParseError {
    /// The text is empty or blank.
    #[error("empty distribution; {HINT}")]
    Empty,
    /// The part before `:` names no distribution (the kind given).
    #[error("unknown distribution kind `{0}`; {HINT}")]
    UnknownKind(String),
    /// A kind's parameters are not in its form (`uniform` without `..`, `normal` without `,`).
    #[error("`{input}` needs {expected}; {HINT}")]
    Shape {
        /// The distribution as given.
        input: String,
        /// The form the kind needs, in words.
        expected: &'static str,
    },
    /// A duration does not parse.
    #[error("bad duration `{input}`: {reason} (write e.g. `10ms`, `1.5s`, `250us`)")]
    Duration {
        /// The duration as given.
        input: String,
        /// Why it does not parse.
        reason: cadence_base::DurationError,
    },
    /// A `uniform` range whose lower bound is above its upper (the range as given).
    #[error("uniform range `{0}` has its lower bound above its upper bound")]
    Reversed(String),
}

const HINT: &str = "accepted forms: `10ms`, `fixed:10ms`, `uniform:5ms..15ms`, \
                    `normal:10ms,2ms` (mean,stddev), `lognormal:10ms,3ms` (mean,stddev)";

impl FromStr for Dist {
    type Err = DistParseError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() {
            return Err(DistParseError::Empty);
        }
        let Some((kind, rest)) = s.split_once(':') else {
            return parse_duration(s).map(Dist::Fixed);
        };
        let rest = rest.trim();
        match kind.trim().to_ascii_lowercase().as_str() {
            "fixed" => parse_duration(rest).map(Dist::Fixed),
            "uniform" => {
                let (lo, hi) = rest.split_once("..").ok_or_else(|| DistParseError::Shape {
                    input: s.to_owned(),
                    expected: "two bounds written `lo..hi`",
                })?;
                let (lo, hi) = (parse_duration(lo)?, parse_duration(hi)?);
                if lo > hi {
                    return Err(DistParseError::Reversed(s.to_owned()));
                }
                Ok(Dist::Uniform(lo, hi))
            }
            k @ ("normal" | "lognormal") => {
                let (mean, stddev) = rest.split_once(',').ok_or_else(|| DistParseError::Shape {
                    input: s.to_owned(),
                    expected: "a mean and a standard deviation written `mean,stddev`",
                })?;
                let (mean, stddev) = (parse_duration(mean)?, parse_duration(stddev)?);
                Ok(if k == "normal" {
                    Dist::Normal { mean, stddev }
                } else {
                    Dist::LogNormal { mean, stddev }
                })
            }
            other => Err(DistParseError::UnknownKind(other.to_owned())),
        }
    }
}

/// Parses one duration of a distribution with the workspace's one parser
/// ([`cadence_base::parse_duration`]), naming the input when it is rejected.
fn parse_duration(input: &str) -> Result<Duration, DistParseError> {
    cadence_base::parse_duration(input).map_err(|reason| DistParseError::Duration {
        input: input.trim().to_owned(),
        reason,
    })
}

/// Writes a duration in the shortest exact unit this module parses.
pub(crate) fn fmt_duration(d: Duration, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let ns = d.as_nanos();
    if ns == 0 {
        write!(f, "0ms")
    } else if ns.is_multiple_of(1_000_000) {
        write!(f, "{}ms", ns / 1_000_000)
    } else if ns.is_multiple_of(1_000) {
        write!(f, "{}us", ns / 1_000)
    } else {
        write!(f, "{ns}ns")
    }
}

struct D(Duration);

impl fmt::Display for D {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt_duration(self.0, f)
    }
}

impl fmt::Display for Dist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Dist::Fixed(d) => write!(f, "fixed:{}", D(d)),
            Dist::Uniform(lo, hi) => write!(f, "uniform:{}..{}", D(lo), D(hi)),
            Dist::Normal { mean, stddev } => write!(f, "normal:{},{}", D(mean), D(stddev)),
            Dist::LogNormal { mean, stddev } => {
                write!(f, "lognormal:{},{}", D(mean), D(stddev))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::SimRng;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn parses_every_form() {
        assert_eq!("10ms".parse::<Dist>().unwrap(), Dist::Fixed(ms(10)));
        assert_eq!("fixed:1.5s".parse::<Dist>().unwrap(), Dist::Fixed(ms(1500)));
        assert_eq!(
            "uniform:5ms..15ms".parse::<Dist>().unwrap(),
            Dist::Uniform(ms(5), ms(15))
        );
        assert_eq!(
            "normal:10ms,2ms".parse::<Dist>().unwrap(),
            Dist::Normal {
                mean: ms(10),
                stddev: ms(2)
            }
        );
        assert_eq!(
            "lognormal: 10ms, 250us".parse::<Dist>().unwrap(),
            Dist::LogNormal {
                mean: ms(10),
                stddev: Duration::from_micros(250)
            }
        );
        assert_eq!("0".parse::<Dist>().unwrap(), Dist::Fixed(Duration::ZERO));
        assert_eq!(
            "500ns".parse::<Dist>().unwrap(),
            Dist::Fixed(Duration::from_nanos(500))
        );
    }

    #[test]
    fn rejects_with_a_message_that_says_what_to_write() {
        for (input, needle) in [
            ("", "empty"),
            ("10", "missing unit"),
            ("10 parsecs", "unknown unit"),
            ("gamma:1ms", "unknown distribution kind `gamma`"),
            ("uniform:5ms", "lo..hi"),
            ("uniform:15ms..5ms", "lower bound above"),
            ("normal:10ms", "mean,stddev"),
            ("fixed:ms", "missing number"),
        ] {
            let err = input.parse::<Dist>().unwrap_err().to_string();
            assert!(err.contains(needle), "{input:?} gave {err:?}");
        }
        let err = "gamma:1ms".parse::<Dist>().unwrap_err().to_string();
        assert!(err.contains("uniform:5ms..15ms"), "{err}");
    }

    #[test]
    fn display_round_trips() {
        for d in [
            Dist::Fixed(ms(10)),
            Dist::Fixed(Duration::from_nanos(1234)),
            Dist::Uniform(ms(5), Duration::from_micros(15_500)),
            Dist::Normal {
                mean: ms(10),
                stddev: ms(1),
            },
            Dist::LogNormal {
                mean: ms(10),
                stddev: ms(3),
            },
        ] {
            assert_eq!(d.to_string().parse::<Dist>().unwrap(), d);
        }
    }

    #[test]
    fn samples_stay_in_range_and_are_non_negative() {
        let mut rng = SimRng::new(7);
        for _ in 0..2000 {
            let u = Dist::Uniform(ms(5), ms(15)).sample(&mut rng);
            assert!(u >= ms(5) && u <= ms(15));
            // A huge stddev forces many negative raw samples: all clamp to zero.
            let _ = Dist::Normal {
                mean: ms(1),
                stddev: ms(50),
            }
            .sample(&mut rng);
        }
        let n = 20_000u32;
        let total: Duration = (0..n)
            .map(|_| {
                Dist::LogNormal {
                    mean: ms(10),
                    stddev: ms(3),
                }
                .sample(&mut rng)
            })
            .sum();
        let mean = total / n;
        assert!(mean > ms(9) && mean < ms(11), "lognormal mean {mean:?}");
    }
}

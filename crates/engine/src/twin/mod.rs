//! The endpoint's twin: an empirical model learned from records (`cadence twin fit`),
//! where the engine model is a mechanism with parameters. An engine serves its streams
//! in shared steps, so the twin does too: a decode step's time as a bounded quantile
//! table per (sequences in the step, context depth), its stall band a mixture
//! component of its own; a step that prefills prompts as a table per (sequences, the
//! step's uncached prompt tokens); TTFT as a FIFO wait for a slot and the step
//! boundary, then that step; the slot count read off the runs. One TOML file,
//! `format = 2`; docs/src/twin.md says every field.

pub mod check;
pub mod confidence;
mod fit;
mod model;
mod server;
mod steps;

pub use fit::{fit, FitError};
pub use model::{extrapolation, sim_spec, Model};
pub use server::{Reach, TwinServer};

use serde::{Deserialize, Serialize};

/// The file format this build writes and reads.
pub const FORMAT: u32 = 2;
/// Points of an ITL cell's body table (quantiles 0, 1/128, …, 1).
pub const BODY_POINTS: usize = 129;
/// Points of an ITL cell's stall table and of a prefill cell's table.
pub const TAIL_POINTS: usize = 33;
/// A gap is in a cell's stall band when it exceeds this many times the cell's median.
pub const STALL_FACTOR: f64 = 4.0;
/// Samples a cell needs to be used on its own; thinner cells fall back to their
/// running level's pooled cell.
pub const MIN_CELL: u64 = 64;

/// A fitted twin: what `cadence twin fit` writes and `plan --twin` runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Twin {
    /// The file format, [`FORMAT`].
    pub format: u32,
    /// The runs it was fitted on, in words.
    pub source: String,
    /// Requests the fit used (succeeded, with a first chunk).
    pub requests: u64,
    /// ITL gaps the fit used (over decode steps).
    pub gaps: u64,
    /// Steps the fit told apart: chunks of several streams within a step's tolerance
    /// of each other left the engine at one step's end.
    pub steps: u64,
    /// Batch slots: requests served at once, the rest wait in order. Inferred as the
    /// most requests ever streaming at once, when the runs show requests waiting
    /// behind them (`slots_seen`); else the most seen, a lower bound.
    pub slots: u32,
    /// Whether the runs showed the slots full with requests waiting.
    pub slots_seen: bool,
    /// The most sequences the fit saw in one step (or requests streaming at once).
    pub max_running: u32,
    /// The deepest context (prompt + output tokens) the fit saw.
    pub max_context: u64,
    /// The most uncached prompt tokens the fit saw prefilled in one step.
    pub max_prompt: u64,
    /// Chunks holding 1, 2, … tokens, as counted (the last entry: that many or more).
    pub chunk_tokens: Vec<u64>,
    /// The requests' own overhead, from send to joining the engine (HTTP, queues before
    /// the engine): [`TAIL_POINTS`] quantiles, µs (empty: none seen).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overhead_us: Vec<u64>,
    /// Decode steps: the gaps streams saw over steps that finished no prompt.
    pub itl: Vec<ItlCell>,
    /// Prefill steps: steps that finished a prompt.
    pub prefill: Vec<PrefillCell>,
    /// Its error on the runs it was fitted on, measured by `cadence twin fit` (absent:
    /// not measured, as for records without levels).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_sample: Option<confidence::InSample>,
}

/// The gaps streams saw over decode steps (steps that finished no prompt) of `running`
/// sequences (a bin, see [`running_bin`]) at a mean context of `context` tokens (a bin,
/// see [`size_bin`]; absent: every context pooled).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ItlCell {
    /// Sequences in the step, binned.
    pub running: u32,
    /// Context bin; `None`: every context of this running bin.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context: Option<u64>,
    /// Gaps in the cell.
    pub samples: u64,
    /// Share of the gaps in the stall band (over [`STALL_FACTOR`] × the median).
    pub stall_share: f64,
    /// The gaps outside the stall band: [`BODY_POINTS`] quantiles, µs.
    pub body_us: Vec<u64>,
    /// The stall band's gaps: [`TAIL_POINTS`] quantiles, µs (empty: none seen).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stall_us: Vec<u64>,
}

/// Prefill steps (a decoding stream's gap over the step, or from the boundary before a
/// prompt's first token to it, when a step ended after the prompt was sent) of
/// `running` sequences (a bin: the streams decoding in the step and the prompts
/// joining it) that prefilled uncached prompt tokens in bin `prompt` (see
/// [`prompt_bin`]; the joining
/// prompts' sum).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PrefillCell {
    /// Sequences in the step, binned.
    pub running: u32,
    /// The step's uncached prompt tokens, binned.
    pub prompt: u64,
    /// Steps' times in the cell (one per stream or prompt in the step).
    pub samples: u64,
    /// The cell's mean uncached prompt tokens in a step (scales prompts past the fit).
    pub mean_prompt: f64,
    /// [`TAIL_POINTS`] quantiles, µs.
    pub times_us: Vec<u64>,
}

/// Why a twin file cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TwinFileError {
    /// Not TOML of the twin's shape.
    #[error("not a twin file: {0}")]
    Parse(String),
    /// Another format number.
    #[error("twin format {0}; this cadence reads format {FORMAT}{refit}", refit = refit(*.0))]
    Format(u32),
    /// A table that cannot be sampled.
    #[error("twin file: {0}")]
    Invalid(String),
}

/// What to do with a file of an older format.
fn refit(format: u32) -> &'static str {
    if format == 1 {
        " (format 1 timed each stream apart, where format 2 times the shared steps an \
         engine serves its streams in): fit it again from its runs with `cadence twin fit`"
    } else {
        ""
    }
}

/// The bin of a running count: exact up to 8, then powers of two (16 holds 16..=31).
pub fn running_bin(n: u32) -> u32 {
    if n <= 8 {
        n
    } else {
        1 << (31 - n.leading_zeros())
    }
}

/// The bin of a token count (context or prompt): 0 below 64, else the power of two
/// at or below it.
pub fn size_bin(n: u64) -> u64 {
    if n < 64 {
        0
    } else {
        1 << (63 - n.leading_zeros())
    }
}

/// The bin of a step's prompt tokens: 0 below 64, else rounded down to a quarter
/// octave (its top three bits: 64, 80, 96, 112, 128, 160, …), as a prompt's extra time
/// is read between the bins' mean prompts and prompts of a few hundred tokens are
/// where it starts to grow.
pub fn prompt_bin(n: u64) -> u64 {
    if n < 64 {
        0
    } else {
        let shift = 61 - n.leading_zeros();
        (n >> shift) << shift
    }
}

impl Twin {
    /// The twin as TOML.
    pub fn to_toml(&self) -> String {
        toml::to_string(self).unwrap_or_else(|e| format!("# cannot write the twin: {e}\n"))
    }

    /// Reads a twin file's text, checking its format and that every table can be
    /// sampled.
    pub fn from_toml(text: &str) -> Result<Twin, TwinFileError> {
        #[derive(Deserialize)]
        struct Head {
            format: u32,
        }
        let head: Head = toml::from_str::<Head>(text)
            .or_else(|_| {
                // The format line alone, before the rest is checked.
                let v: toml::Table = toml::from_str(text)?;
                Ok::<_, toml::de::Error>(Head {
                    format: v
                        .get("format")
                        .and_then(|f| f.as_integer())
                        .and_then(|f| u32::try_from(f).ok())
                        .unwrap_or(0),
                })
            })
            .map_err(|e| TwinFileError::Parse(e.to_string()))?;
        if head.format != FORMAT {
            return Err(TwinFileError::Format(head.format));
        }
        let twin: Twin = toml::from_str(text).map_err(|e| TwinFileError::Parse(e.to_string()))?;
        twin.validate()?;
        Ok(twin)
    }

    fn validate(&self) -> Result<(), TwinFileError> {
        let bad = |s: String| Err(TwinFileError::Invalid(s));
        if self.slots == 0 {
            return bad("slots must be at least 1".into());
        }
        if !self.itl.iter().any(|c| c.context.is_none()) {
            return bad("no pooled ITL cell (one without context)".into());
        }
        if self.prefill.is_empty() {
            return bad("no prefill cell".into());
        }
        let o = &self.overhead_us;
        if !(o.is_empty() || o.len() == TAIL_POINTS && o.windows(2).all(|w| w[0] <= w[1])) {
            return bad(format!(
                "overhead_us must be empty or {TAIL_POINTS} ascending values"
            ));
        }
        for c in &self.itl {
            let sorted = |v: &[u64]| v.windows(2).all(|w| w[0] <= w[1]);
            if c.body_us.len() != BODY_POINTS || !sorted(&c.body_us) {
                return bad(format!(
                    "ITL cell running={}: body_us must hold {BODY_POINTS} ascending values",
                    c.running
                ));
            }
            if !(c.stall_us.is_empty() || c.stall_us.len() == TAIL_POINTS && sorted(&c.stall_us))
                || !(0.0..=1.0).contains(&c.stall_share)
            {
                return bad(format!(
                    "ITL cell running={}: stall_us must be empty or {TAIL_POINTS} ascending values, stall_share within 0..=1",
                    c.running
                ));
            }
        }
        for c in &self.prefill {
            if c.times_us.len() != TAIL_POINTS || !c.times_us.windows(2).all(|w| w[0] <= w[1]) {
                return bad(format!(
                    "prefill cell running={}: times_us must hold {TAIL_POINTS} ascending values",
                    c.running
                ));
            }
        }
        Ok(())
    }

    /// The decode-step cell for `running` sequences at a mean context of `context`
    /// tokens: the exact cell when it holds [`MIN_CELL`] gaps, else the pooled cell of
    /// the nearest running bin that holds as many (any pooled cell when none does);
    /// `None` only for a twin that [`Twin::from_toml`] would refuse.
    pub fn itl_cell(&self, running: u32, context: u64) -> Option<&ItlCell> {
        let (r, c) = (running_bin(running), size_bin(context));
        let exact = self
            .itl
            .iter()
            .find(|x| x.running == r && x.context == Some(c) && x.samples >= MIN_CELL);
        exact.or_else(|| {
            let pooled = self.itl.iter().filter(|x| x.context.is_none());
            let full = pooled.clone().filter(|x| x.samples >= MIN_CELL);
            nearest(full, r, |x| x.running).or_else(|| nearest(pooled, r, |x| x.running))
        })
    }

    /// What the twin learned, in a line: requests, gaps, slots and its reach; then its
    /// error on its own loads, when measured.
    pub fn summary(&self) -> String {
        let fit = self.in_sample.as_ref().map_or(String::new(), |s| {
            format!(
                "on its own {} load{}: within {:.1} % on every p50, p90 and p99 (worst: {} at {})\n",
                s.loads,
                if s.loads == 1 { "" } else { "s" },
                s.worst * 100.0,
                s.figure,
                s.load
            )
        });
        format!(
            "twin of {}: {} requests, {} steps, {} gaps; {} slots{}; seen up to {} running, {} tokens of context, {} uncached prompt tokens in a step\n",
            self.source,
            self.requests,
            self.steps,
            self.gaps,
            self.slots,
            if self.slots_seen { " (seen full)" } else { " or more (never seen full)" },
            self.max_running,
            self.max_context,
            self.max_prompt,
        ) + &fit
    }

    /// Tokens of a chunk for a uniform draw `u` in [0, 1).
    pub fn chunk_tokens_at(&self, u: f64) -> u32 {
        let total: u64 = self.chunk_tokens.iter().sum();
        if total == 0 {
            return 1;
        }
        let mut at = (u * total as f64) as u64;
        for (i, &n) in self.chunk_tokens.iter().enumerate() {
            if at < n {
                return i as u32 + 1;
            }
            at -= n;
        }
        self.chunk_tokens.len() as u32
    }
}

impl ItlCell {
    /// The gap (µs) at quantile `u` of the cell's mixture: the body below 1 −
    /// `stall_share`, the stall band above it.
    pub fn at(&self, u: f64) -> f64 {
        let s = if self.stall_us.is_empty() {
            0.0
        } else {
            self.stall_share
        };
        if u < 1.0 - s {
            table_at(&self.body_us, u / (1.0 - s))
        } else {
            table_at(&self.stall_us, (u - (1.0 - s)) / s)
        }
    }
}

/// The cell whose running bin is nearest `r` (the lower one on a tie); `None` when
/// there are none.
fn nearest<'a, T>(
    cells: impl Iterator<Item = &'a T>,
    r: u32,
    key: impl Fn(&T) -> u32,
) -> Option<&'a T>
where
    T: 'a,
{
    let mut best: Option<&T> = None;
    for c in cells {
        let d = |x: &T| (key(x).abs_diff(r), key(x));
        if best.is_none_or(|b| d(c) < d(b)) {
            best = Some(c);
        }
    }
    best
}

/// The value at quantile `u` of a table of evenly spaced quantiles (0 … 1), linearly
/// interpolated.
pub fn table_at(table: &[u64], u: f64) -> f64 {
    match table.len() {
        0 => 0.0,
        1 => table[0] as f64,
        n => {
            let x = u.clamp(0.0, 1.0) * (n - 1) as f64;
            let i = (x.floor() as usize).min(n - 2);
            let f = x - i as f64;
            table[i] as f64 * (1.0 - f) + table[i + 1] as f64 * f
        }
    }
}

/// `points` evenly spaced quantiles (0 … 1) of ascending `sorted` values, rounded to
/// whole units.
pub fn table_of(sorted: &[f64], points: usize) -> Vec<u64> {
    (0..points)
        .map(|i| {
            let p = i as f64 / (points - 1) as f64;
            cadence_core::stats::quantile_sorted(sorted, p)
                .unwrap_or(0.0)
                .round()
                .max(0.0) as u64
        })
        .collect()
}

#[cfg(test)]
mod check_tests;
#[cfg(test)]
mod tests;

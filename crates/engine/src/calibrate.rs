//! A measured sweep as the fit's levels (`plan --calibrate`): a run's levels grouped by
//! load, each with its arrivals, its requests' lengths and its measured percentiles,
//! from the records when the run has them, else from a JSON report's figures; and the
//! level `--holdout` names. Pure: the binary reads the run and hands the levels here.

use crate::fit::{Figures, Level};
use crate::{Arrivals, Workload};
use cadence_core::report::LevelReport;
use cadence_core::RequestRecord;

/// What a level leaves open, filled from the flags: prompt length (`--input-tokens`),
/// the clients' turnaround (`--client-turnaround`) and the arrivals' seed (`--seed`).
#[derive(Debug, Clone, Copy)]
pub struct Fallbacks {
    /// Tokens of a prompt whose length the run does not know.
    pub input_tokens: u32,
    /// The clients' turnaround when the run does not show one, ns.
    pub turnaround_ns: u64,
    /// The seed of an open level's Poisson arrivals.
    pub seed: u64,
}

/// Why a run cannot be calibrated against.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SweepError {
    /// A level with neither a concurrency nor a rate.
    #[error("level {0} has neither a concurrency nor a rate to replay")]
    NoLoad(String),
    /// A level with no streamed response to measure.
    #[error("level {0} has no streamed responses (no TTFT or ITL): calibration needs succeeded streams of at least 2 chunks")]
    NoStreams(String),
    /// A level's records could not be read.
    #[error("{0}")]
    Records(String),
    /// `--holdout` names no level of the run.
    #[error("--holdout {name}: no such level; the run's levels are {levels}")]
    NoSuchLevel {
        /// What `--holdout` said.
        name: String,
        /// The run's levels, comma-separated.
        levels: String,
    },
}

/// Each load of the run as the fit sees it: its arrivals, its requests' lengths and
/// its measured percentiles. With records (`records(i)`: report level `i`'s records),
/// levels of the same load (a sweep run twice over, `-c 1,2,4,8,1,2,4,8`, so a burst of
/// load from elsewhere on the machine is shared by every level) are pooled into one,
/// and the percentiles are taken over their records by the report's formulas; a JSON
/// report gives each level's own percentiles, its mean output length and no prompt
/// lengths (`fallbacks.input_tokens`).
pub fn measured_levels<F>(
    report: &[LevelReport],
    mut records: Option<F>,
    fallbacks: Fallbacks,
    notes: &mut Vec<String>,
) -> Result<Vec<Level>, SweepError>
where
    F: FnMut(usize) -> Result<Vec<RequestRecord>, String>,
{
    // Report indices grouped by load, in order of first appearance.
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, l) in report.iter().enumerate() {
        let same = |g: &Vec<usize>| {
            let f = &report[g[0]];
            records.is_some() && f.concurrency == l.concurrency && f.rate == l.rate
        };
        match groups.iter_mut().find(|g| same(g)) {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    let mut levels = Vec::new();
    for g in groups {
        let l = &report[g[0]];
        // A level of neither (a replayed trace) is sent as its records were.
        let replayed = l.concurrency.is_none() && l.rate.is_none();
        let mut arrivals = match (l.concurrency, l.rate) {
            (Some(c), _) => Arrivals::Closed { concurrency: c },
            (None, Some(rate)) => Arrivals::Poisson {
                rate,
                seed: fallbacks.seed,
            },
            (None, None) if records.is_some() => Arrivals::Constant { rate: 1.0 },
            (None, None) => return Err(SweepError::NoLoad(l.name.clone())),
        };
        let no_streams = || SweepError::NoStreams(l.name.clone());
        let (measured, workload) = match records.as_mut() {
            Some(read) => {
                let mut recs = Vec::new();
                for &i in &g {
                    recs.extend(read(i).map_err(SweepError::Records)?);
                }
                if g.len() > 1 {
                    notes.push(format!("{}: {} levels of the run pooled", l.name, g.len()));
                }
                let measured = Figures::of_records(&recs).ok_or_else(no_streams)?;
                let sends = crate::measured::sends_of(&recs);
                let mut workload = crate::measured::workload_of(
                    &recs,
                    fallbacks.input_tokens,
                    fallbacks.turnaround_ns,
                    notes,
                );
                if replayed {
                    arrivals = Arrivals::Constant {
                        rate: crate::measured::mean_rate(&sends),
                    };
                    workload.send_at_ns = sends;
                }
                (measured, workload)
            }
            None => {
                let s = &l.summary;
                let (Some(ttft), Some(itl)) = (&s.ttft, &s.itl) else {
                    return Err(no_streams());
                };
                let measured = Figures {
                    ttft: [ttft.p50, ttft.p90],
                    itl: [itl.p50, itl.p90],
                };
                (measured, json_workload(l, fallbacks, notes))
            }
        };
        levels.push(Level {
            name: l.name.clone(),
            arrivals,
            workload,
            measured,
        });
    }
    Ok(levels)
}

/// A level's workload from a JSON report: its succeeded requests, each with the mean
/// output length and `fallbacks.input_tokens`.
fn json_workload(l: &LevelReport, fallbacks: Fallbacks, notes: &mut Vec<String>) -> Workload {
    let s = &l.summary;
    let ok = s.requests.succeeded.max(1);
    let out = (s.output_tokens.total as f64 / ok as f64).round().max(1.0);
    let fallback_input = fallbacks.input_tokens;
    if notes.is_empty() {
        notes.push(format!(
            "a JSON report holds no prompt lengths: every prompt taken as {fallback_input} tokens (--input-tokens); records give the real ones"
        ));
    }
    Workload {
        requests: ok,
        warmup: 0,
        input_tokens: fallback_input,
        max_tokens: out as u32,
        turnaround_ns: fallbacks.turnaround_ns,
        lengths: Vec::new(),
        prefix_tokens: 0,
        prefix_groups: 1,
        sessions: None,
        send_at_ns: Vec::new(),
    }
}

/// The level `--holdout` names: by its name, or by its concurrency or rate.
pub fn holdout_index(levels: &[Level], h: &str) -> Result<usize, SweepError> {
    let number: Option<f64> = h.trim().parse().ok();
    levels
        .iter()
        .position(|l| {
            l.name == h
                || number.is_some_and(|n| match l.arrivals {
                    Arrivals::Closed { concurrency } => concurrency as f64 == n,
                    Arrivals::Poisson { rate, .. } | Arrivals::Constant { rate } => rate == n,
                })
        })
        .ok_or_else(|| {
            let names: Vec<&str> = levels.iter().map(|l| l.name.as_str()).collect();
            SweepError::NoSuchLevel {
                name: h.to_string(),
                levels: names.join(", "),
            }
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn level(name: &str, arrivals: Arrivals) -> Level {
        Level {
            name: name.into(),
            arrivals,
            workload: Workload {
                requests: 1,
                warmup: 0,
                input_tokens: 1,
                max_tokens: 1,
                turnaround_ns: 0,
                lengths: Vec::new(),
                prefix_tokens: 0,
                prefix_groups: 1,
                sessions: None,
                send_at_ns: Vec::new(),
            },
            measured: Figures {
                ttft: [1.0, 1.0],
                itl: [1.0, 1.0],
            },
        }
    }

    #[test]
    fn the_holdout_is_named_by_name_concurrency_or_rate() {
        let levels = [
            level("c=2", Arrivals::Closed { concurrency: 2 }),
            level("r=2.5", Arrivals::Poisson { rate: 2.5, seed: 0 }),
            level("steady", Arrivals::Constant { rate: 7.0 }),
        ];
        assert_eq!(holdout_index(&levels, "c=2"), Ok(0));
        assert_eq!(holdout_index(&levels, "2"), Ok(0));
        assert_eq!(holdout_index(&levels, " 2.5"), Ok(1));
        assert_eq!(holdout_index(&levels, "7"), Ok(2));
        assert_eq!(
            holdout_index(&levels, "9").unwrap_err().to_string(),
            "--holdout 9: no such level; the run's levels are c=2, r=2.5, steady"
        );
    }
}

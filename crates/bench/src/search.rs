//! The SLO search behind `--find-max`: probe load levels to find the highest that still
//! meets every SLO, with a bounded number of probes. Grows ×2 from the start until a
//! level fails, then bisects between the last pass and the first failure. Pure: the
//! caller runs each probe.

/// One probe and its verdict.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probe {
    /// The load probed: a concurrency or a rate.
    pub level: f64,
    /// Whether the level met every SLO.
    pub pass: bool,
}

/// The search state.
#[derive(Debug, Clone)]
pub struct Search {
    start: f64,
    /// Levels are whole numbers (concurrency) rather than rates.
    integer: bool,
    probes_left: usize,
    best_pass: Option<f64>,
    first_fail: Option<f64>,
    probes: Vec<Probe>,
}

/// Rates closer than this ratio are the same answer.
const RATE_RESOLUTION: f64 = 1.05;

impl Search {
    /// A search starting at `start` (rounded to a whole level of at least 1 when
    /// `integer`), allowed `max_probes` probes.
    pub fn new(start: f64, integer: bool, max_probes: usize) -> Search {
        let start = if integer {
            start.round().max(1.0)
        } else {
            start
        };
        Search {
            start,
            integer,
            probes_left: max_probes,
            best_pass: None,
            first_fail: None,
            probes: Vec::new(),
        }
    }

    /// The next level to probe, or `None` when the answer is as close as it gets.
    pub fn next(&self) -> Option<f64> {
        if self.probes_left == 0 {
            return None;
        }
        let level = match (self.best_pass, self.first_fail) {
            (None, None) => self.start,
            (Some(lo), None) => lo * 2.0,
            (None, Some(hi)) => hi / 2.0,
            (Some(lo), Some(hi)) => {
                if self.integer && hi - lo <= 1.0 || !self.integer && hi / lo <= RATE_RESOLUTION {
                    return None;
                }
                (lo + hi) / 2.0
            }
        };
        let level = if self.integer { level.floor() } else { level };
        if level <= 0.0
            || (self.integer && level < 1.0)
            || self.probes.iter().any(|p| p.level == level)
        {
            return None;
        }
        Some(level)
    }

    /// Records a probe's verdict.
    pub fn record(&mut self, level: f64, pass: bool) {
        self.probes_left = self.probes_left.saturating_sub(1);
        self.probes.push(Probe { level, pass });
        if pass {
            self.best_pass = Some(self.best_pass.map_or(level, |b| b.max(level)));
        } else {
            self.first_fail = Some(self.first_fail.map_or(level, |f| f.min(level)));
        }
    }

    /// The highest level that met every SLO.
    pub fn best(&self) -> Option<f64> {
        self.best_pass
    }

    /// The lowest level that failed, when one did.
    pub fn first_fail(&self) -> Option<f64> {
        self.first_fail
    }

    /// Every probe so far, in the order run.
    pub fn probes(&self) -> &[Probe] {
        &self.probes
    }

    /// The search's answer as the report holds it: its axis (`concurrency` for a
    /// search of whole levels, else `rate`), the frontier and every probe.
    pub fn report(&self) -> cadence_core::report::SearchReport {
        cadence_core::report::SearchReport {
            axis: if self.integer { "concurrency" } else { "rate" }.into(),
            best: self.best(),
            first_fail: self.first_fail(),
            probes: self
                .probes()
                .iter()
                .map(|p| cadence_core::report::SearchProbe {
                    level: p.level,
                    pass: p.pass,
                })
                .collect(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(mut s: Search, capacity: f64) -> Search {
        while let Some(level) = s.next() {
            s.record(level, level <= capacity);
        }
        s
    }

    #[test]
    fn integer_search_finds_the_exact_frontier() {
        let s = run(Search::new(1.0, true, 20), 37.0);
        assert_eq!(s.best(), Some(37.0));
        assert_eq!(s.first_fail(), Some(38.0));
        let levels: Vec<f64> = s.probes().iter().map(|p| p.level).collect();
        assert_eq!(
            &levels[..7],
            &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0],
            "doubling first"
        );
        let r = s.report();
        assert_eq!(
            (r.axis.as_str(), r.best, r.first_fail),
            ("concurrency", Some(37.0), Some(38.0))
        );
        assert_eq!(r.probes.len(), s.probes().len());
        assert!(r
            .probes
            .iter()
            .zip(s.probes())
            .all(|(a, b)| a.level == b.level && a.pass == b.pass));
    }

    #[test]
    fn rate_search_stops_within_five_percent() {
        let s = run(Search::new(1.0, false, 30), 23.3);
        let (lo, hi) = (s.best().unwrap(), s.first_fail().unwrap());
        assert!(
            lo <= 23.3 && hi > 23.3 && hi / lo <= RATE_RESOLUTION,
            "{lo}..{hi}"
        );
        assert_eq!(s.report().axis, "rate");
    }

    #[test]
    fn probes_are_bounded() {
        let s = run(Search::new(1.0, false, 4), 1000.0);
        assert_eq!(s.probes().len(), 4);
        assert_eq!(s.best(), Some(8.0));
        assert_eq!(
            s.first_fail(),
            None,
            "never failed: the frontier is above the last probe"
        );
    }

    #[test]
    fn a_failing_start_searches_down() {
        let s = run(Search::new(16.0, true, 10), 3.0);
        assert_eq!(s.best(), Some(3.0));
        let s = run(Search::new(4.0, true, 10), 0.0);
        assert_eq!(s.best(), None, "nothing passes, down to 1");
        assert_eq!(s.probes().last().unwrap().level, 1.0);
    }
}

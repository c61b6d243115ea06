//! Calibration: an engine's free parameters fitted to a measured sweep. Each measured
//! level is replayed through the model in virtual time ([`plan_level`]) with its own
//! load and request lengths, and the parameters of [`PARAMS`] are chosen by least
//! squares on the relative error of TTFT and ITL percentiles (a bounded Nelder–Mead
//! with restarts, deterministic).

use cadence_core::per_request::{e2e_ms, itl_gaps, ms, ttft_ms};
use cadence_core::stats::quantile_sorted;
use cadence_core::{Outcome, RequestRecord};

use crate::drive::{plan_level, Arrivals, Workload};
use crate::spec::EngineSpec;

/// The percentiles a fit matches, as fractions: p50 and p90.
pub const QUANTILES: [f64; 2] = [0.5, 0.9];

/// TTFT and ITL in ms at each of [`QUANTILES`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    /// TTFT p50 and p90 (ms).
    pub ttft: [f64; 2],
    /// ITL p50 and p90 (ms), over the gaps of every request pooled.
    pub itl: [f64; 2],
}

/// How much each figure's relative error weighs in the fit, in [`FIGURES`] order: the
/// p90s half as much as the p50s, being the first to move when the measured machine
/// stalls for a moment (their squared errors count a quarter).
pub const WEIGHTS: [f64; 4] = [1.0, 0.5, 1.0, 0.5];

/// The figures' names, in the order of [`Figures::values`].
pub const FIGURES: [&str; 4] = ["TTFT p50", "TTFT p90", "ITL p50", "ITL p90"];

impl Figures {
    /// The figures of the succeeded, non-warm-up records, by the report's own
    /// formulas (TTFT: first chunk − sent; ITL: gaps between chunks, pooled); `None`
    /// when no request has a TTFT or no request streamed two chunks.
    pub fn of_records<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> Option<Self> {
        let [ttft, itl, _] = samples(records);
        let at = |v: &[f64], i: usize| quantile_sorted(v, QUANTILES[i]);
        Some(Figures {
            ttft: [at(&ttft, 0)?, at(&ttft, 1)?],
            itl: [at(&itl, 0)?, at(&itl, 1)?],
        })
    }

    /// TTFT p50, TTFT p90, ITL p50, ITL p90.
    pub fn values(&self) -> [f64; 4] {
        [self.ttft[0], self.ttft[1], self.itl[0], self.itl[1]]
    }

    /// Relative error of each figure against `measured`: predicted / measured − 1.
    pub fn errors(&self, measured: &Figures) -> [f64; 4] {
        let (p, m) = (self.values(), measured.values());
        std::array::from_fn(|i| p[i] / m[i] - 1.0)
    }
}

/// TTFT, ITL gaps and E2E in ms of the succeeded, non-warm-up records by the report's
/// formulas, each sorted.
pub fn samples<'a>(records: impl IntoIterator<Item = &'a RequestRecord>) -> [Vec<f64>; 3] {
    let (mut ttft, mut itl, mut e2e) = (Vec::new(), Vec::new(), Vec::new());
    let mut bad = 0;
    for r in records {
        if r.warmup || r.outcome != Outcome::Succeeded {
            continue;
        }
        ttft.extend(ttft_ms(r, &mut bad));
        itl.extend(itl_gaps(r, &mut bad).map(|(g, _)| ms(g)));
        e2e.extend(e2e_ms(r, &mut bad));
    }
    let mut out = [ttft, itl, e2e];
    for v in &mut out {
        v.sort_unstable_by(f64::total_cmp);
    }
    out
}

/// One measured level: how requests arrived, what they asked for (in order, warm-up
/// first), and the figures the run measured.
#[derive(Debug, Clone)]
pub struct Level {
    /// The level's name in the measured run (`concurrency=8`).
    pub name: String,
    /// How its requests arrived.
    pub arrivals: Arrivals,
    /// What its requests asked for, lengths in send order.
    pub workload: Workload,
    /// The figures the run measured.
    pub measured: Figures,
}

/// The model's figures for a level's load and requests on `spec`; `None` when no
/// request of it could be served (every one refused).
pub fn predict(spec: &EngineSpec, arrivals: Arrivals, workload: &Workload) -> Option<Figures> {
    let level = plan_level(spec, arrivals, workload, 0, 0, 0);
    Figures::of_records(&level.records)
}

/// The relative errors of every figure of every level of `spec` against the measured
/// ones times their [`WEIGHTS`], 4 per level in [`FIGURES`] order (a level the model
/// cannot serve: 10³ each).
pub fn residuals(spec: &EngineSpec, levels: &[&Level]) -> Vec<f64> {
    levels
        .iter()
        .flat_map(|l| match predict(spec, l.arrivals, &l.workload) {
            Some(p) => {
                let e = p.errors(&l.measured);
                std::array::from_fn::<f64, 4, _>(|i| e[i] * WEIGHTS[i])
            }
            None => [1e3; 4],
        })
        .collect()
}

/// The least-squares cost of `spec` on `levels`: the sum of the squared (weighted)
/// [`residuals`].
pub fn cost(spec: &EngineSpec, levels: &[&Level]) -> f64 {
    residuals(spec, levels).iter().map(|e| e * e).sum()
}

/// How a parameter's range maps onto the optimizer's unit interval.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scale {
    /// Evenly in the logarithm (efficiencies: 0.05 is as far from 0.1 as 0.5 from 1).
    Log,
    /// `lo + (hi − lo) · u²`: fine steps near `lo` (overheads, which may be 0).
    Square,
}

/// A free parameter of the engine: its name in the TOML file, its bounds, and how to
/// read and write it. Adding one to [`PARAMS`] is all a new parameter needs.
#[derive(Clone, Copy)]
pub struct Param {
    /// Its key in the engine TOML (`serving.jitter`, say).
    pub name: &'static str,
    /// Its lowest allowed value.
    pub lo: f64,
    /// Its highest allowed value.
    pub hi: f64,
    /// How the range maps onto the optimizer's unit interval.
    pub scale: Scale,
    /// Reads the parameter from a spec.
    pub get: fn(&EngineSpec) -> f64,
    /// Writes the parameter into a spec.
    pub set: fn(&mut EngineSpec, f64),
}

impl std::fmt::Debug for Param {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} [{}, {}]", self.name, self.lo, self.hi)
    }
}

impl Param {
    /// The value at `u` in [0, 1].
    pub fn from_unit(&self, u: f64) -> f64 {
        let u = u.clamp(0.0, 1.0);
        match self.scale {
            Scale::Log => (self.lo.ln() + u * (self.hi.ln() - self.lo.ln())).exp(),
            Scale::Square => self.lo + (self.hi - self.lo) * u * u,
        }
    }

    /// Where `v` (clamped to the bounds) sits in [0, 1].
    pub fn to_unit(&self, v: f64) -> f64 {
        let v = v.clamp(self.lo, self.hi);
        match self.scale {
            Scale::Log => (v.ln() - self.lo.ln()) / (self.hi.ln() - self.lo.ln()),
            Scale::Square => ((v - self.lo) / (self.hi - self.lo)).sqrt(),
        }
    }
}

/// The parameters `cadence plan --calibrate` fits, in the order it prints them.
pub const PARAMS: &[Param] = &[
    Param {
        name: "hardware.bandwidth_efficiency",
        lo: 0.01,
        hi: 1.0,
        scale: Scale::Log,
        get: |s| s.hardware.bandwidth_efficiency,
        set: |s, v| s.hardware.bandwidth_efficiency = v,
    },
    Param {
        name: "hardware.compute_efficiency",
        lo: 0.001,
        hi: 1.0,
        scale: Scale::Log,
        get: |s| s.hardware.compute_efficiency,
        set: |s, v| s.hardware.compute_efficiency = v,
    },
    Param {
        name: "serving.step_overhead_us",
        lo: 0.0,
        hi: 100_000.0,
        scale: Scale::Square,
        get: |s| s.serving.step_overhead_us,
        set: |s, v| s.serving.step_overhead_us = v,
    },
    Param {
        name: "serving.seq_overhead_us",
        lo: 0.0,
        hi: 50_000.0,
        scale: Scale::Square,
        get: |s| s.serving.seq_overhead_us,
        set: |s, v| s.serving.seq_overhead_us = v,
    },
    Param {
        name: "serving.request_overhead_ms",
        lo: 0.0,
        hi: 5_000.0,
        scale: Scale::Square,
        get: |s| s.serving.request_overhead_ms,
        set: |s, v| s.serving.request_overhead_ms = v,
    },
    // Not a cost but the spread of step times: what lets ITL p90 sit above p50.
    Param {
        name: "serving.jitter",
        lo: 0.0,
        hi: 0.9,
        scale: Scale::Square,
        get: |s| s.serving.jitter,
        set: |s, v| s.serving.jitter = v,
    },
];

/// A fitted engine.
#[derive(Debug, Clone)]
pub struct Fit {
    /// The engine with the fitted values set.
    pub spec: EngineSpec,
    /// The least-squares cost at the fitted values ([`cost`]).
    pub cost: f64,
    /// Model runs the search took (each replays every fitted level).
    pub evals: u32,
}

/// Fits `params` of `base` to `levels` within `max_evals` model runs: least squares
/// ([`least_squares`]) from the base's values and from the middle of every range, the
/// better polished by [`minimize`] (which steps over the small jumps a change in the
/// order of events makes). Deterministic.
pub fn fit(base: &EngineSpec, levels: &[&Level], params: &[Param], max_evals: u32) -> Fit {
    let apply = |u: &[f64]| {
        let mut s = base.clone();
        for (p, &x) in params.iter().zip(u) {
            (p.set)(&mut s, p.from_unit(x));
        }
        s
    };
    let mut r = |u: &[f64]| residuals(&apply(u), levels);
    let from_base: Vec<f64> = params.iter().map(|p| p.to_unit((p.get)(base))).collect();
    let middle = vec![0.5; params.len()];
    let mut best: Option<Minimum> = None;
    let mut evals = 0;
    for start in [from_base, middle] {
        let m = least_squares(&mut r, &start, max_evals / 3);
        evals += m.evals;
        if best.as_ref().is_none_or(|b| m.f < b.f) {
            best = Some(m);
        }
    }
    let best = best.expect("two starts ran");
    let mut f = |u: &[f64]| r(u).iter().map(|e| e * e).sum::<f64>();
    let left = max_evals
        .saturating_sub(evals)
        .min(40 * params.len() as u32);
    let polished = minimize(&mut f, &best.x, left.max(1));
    evals += polished.evals;
    let best = if polished.f < best.f { polished } else { best };
    Fit {
        spec: apply(&best.x),
        cost: best.f,
        evals,
    }
}

/// Minimises Σ rᵢ(x)² over the unit cube from `x0`: Levenberg–Marquardt on the same
/// coordinates as [`minimize`] (each kept in [0, π]), the Jacobian by one-sided differences
/// (step 10⁻³ in x), until a step no longer lowers the sum by 10⁻¹⁰ relative, the damping
/// exceeds 10⁸ or `max_evals` is spent. Deterministic.
pub fn least_squares(r: &mut dyn FnMut(&[f64]) -> Vec<f64>, x0: &[f64], max_evals: u32) -> Minimum {
    let to_x = |z: &[f64]| -> Vec<f64> { z.iter().map(|z| (1.0 - z.cos()) / 2.0).collect() };
    let sq = |v: &[f64]| v.iter().map(|e| e * e).sum::<f64>();
    let n = x0.len();
    let mut z: Vec<f64> = x0
        .iter()
        .map(|v| (1.0 - 2.0 * v.clamp(0.0, 1.0)).acos())
        .collect();
    let mut res = r(&to_x(&z));
    let mut evals = 1u32;
    let mut cost = sq(&res);
    let mut lambda = 1e-3;
    const H: f64 = 1e-3;
    'outer: while evals + (n as u32) < max_evals {
        // Jacobian columns: a one-sided difference in x (inward at a bound), times
        // dx/dz = sin(z)/2, which is 0 on a bound, so a parameter held there by the
        // data stays there while the others move.
        let x = to_x(&z);
        let cols: Vec<Vec<f64>> = (0..n)
            .map(|j| {
                let mut xj = x.clone();
                xj[j] = if x[j] + H <= 1.0 { x[j] + H } else { x[j] - H };
                let d = xj[j] - x[j];
                let chain = z[j].sin() / 2.0;
                r(&xj)
                    .iter()
                    .zip(&res)
                    .map(|(a, b)| (a - b) / d * chain)
                    .collect()
            })
            .collect();
        evals += n as u32;
        let a: Vec<Vec<f64>> = (0..n)
            .map(|i| (0..n).map(|j| dot(&cols[i], &cols[j])).collect())
            .collect();
        let g: Vec<f64> = (0..n).map(|i| dot(&cols[i], &res)).collect();
        // Marquardt's scaling, floored so a flat direction (a parameter on its
        // bound, where dx/dz = 0) is damped too instead of thrown far.
        let floor = 1e-6 * (0..n).map(|i| a[i][i]).fold(1e-300, f64::max);
        loop {
            let mut m = a.clone();
            for (i, row) in m.iter_mut().enumerate() {
                row[i] += lambda * a[i][i].max(floor);
            }
            let step = solve(m, g.iter().map(|v| -v).collect());
            // Kept in [0, π] (one turn of the map): a coordinate pushed past its bound
            // stays on it, where its flat derivative leaves it, instead of wrapping.
            let cand: Vec<f64> = z
                .iter()
                .zip(&step)
                .map(|(z, d)| (z + d).clamp(0.0, std::f64::consts::PI))
                .collect();
            let cres = r(&to_x(&cand));
            evals += 1;
            let ccost = sq(&cres);
            if ccost < cost {
                let gain = cost - ccost;
                (z, res, cost) = (cand, cres, ccost);
                lambda = (lambda / 3.0).max(1e-9);
                if gain <= 1e-10 * cost.max(1e-300) {
                    break 'outer;
                }
                break;
            }
            lambda *= 4.0;
            if lambda > 1e8 || evals >= max_evals {
                break 'outer;
            }
        }
    }
    Minimum {
        x: to_x(&z),
        f: cost,
        evals,
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Solves `m · x = b` by Gaussian elimination with partial pivoting (a singular
/// direction gets 0).
fn solve(mut m: Vec<Vec<f64>>, mut b: Vec<f64>) -> Vec<f64> {
    let n = b.len();
    for c in 0..n {
        let p = (c..n)
            .max_by(|&i, &j| m[i][c].abs().total_cmp(&m[j][c].abs()))
            .expect("rows remain");
        m.swap(c, p);
        b.swap(c, p);
        if m[c][c].abs() < 1e-300 {
            continue;
        }
        let (top, rest) = m.split_at_mut(c + 1);
        let pivot = &top[c];
        let (b_top, b_rest) = b.split_at_mut(c + 1);
        for (row, bi) in rest.iter_mut().zip(b_rest.iter_mut()) {
            let k = row[c] / pivot[c];
            for (x, p) in row.iter_mut().zip(pivot).skip(c) {
                *x -= k * p;
            }
            *bi -= k * b_top[c];
        }
    }
    let mut x = vec![0.0; n];
    for c in (0..n).rev() {
        if m[c][c].abs() < 1e-300 {
            continue;
        }
        let s: f64 = (c + 1..n).map(|j| m[c][j] * x[j]).sum();
        x[c] = (b[c] - s) / m[c][c];
    }
    x
}

/// The engine as a TOML file `--engine` (of `plan` and `sim`) loads.
pub fn to_toml(spec: &EngineSpec) -> String {
    toml::to_string(spec).expect("an engine spec serializes")
}

/// The best point a search found.
#[derive(Debug, Clone, PartialEq)]
pub struct Minimum {
    /// The point, in the unit cube.
    pub x: Vec<f64>,
    /// `f` at `x`.
    pub f: f64,
    /// Evaluations of `f` the search took.
    pub evals: u32,
}

/// Minimises `f` over the unit cube [0, 1]ⁿ from `x0`: Nelder–Mead (reflection 1,
/// expansion 2, contraction ½, shrink ½) on unbounded coordinates `z` mapped into the
/// cube by `x = (1 − cos z) / 2` (so the simplex never flattens against a face, as it
/// does when points are clamped), restarted from its best point with a fresh simplex
/// while a restart still improves (by more than 10⁻⁹ relative) and `max_evals`
/// allows. Deterministic.
pub fn minimize(f: &mut dyn FnMut(&[f64]) -> f64, x0: &[f64], max_evals: u32) -> Minimum {
    let to_x = |z: &[f64]| -> Vec<f64> { z.iter().map(|z| (1.0 - z.cos()) / 2.0).collect() };
    let mut g = |z: &[f64]| f(&to_x(z));
    let mut evals = 1u32;
    let mut z: Vec<f64> = x0
        .iter()
        .map(|v| (1.0 - 2.0 * v.clamp(0.0, 1.0)).acos())
        .collect();
    let mut gz = g(&z);
    for _restart in 0..8 {
        let (nz, ng) = nelder_mead(&mut g, &z, 0.6, max_evals, &mut evals);
        let improved = ng < gz - 1e-9 * gz.abs().max(1e-12);
        if ng <= gz {
            (z, gz) = (nz, ng);
        }
        if !improved || evals >= max_evals {
            break;
        }
    }
    Minimum {
        x: to_x(&z),
        f: gz,
        evals,
    }
}

/// One Nelder–Mead run from a simplex of `x0` and a `step` along each axis, until the
/// simplex's values agree within 10⁻¹² relative or its points within 10⁻⁸, or the
/// budget is spent.
fn nelder_mead(
    f: &mut dyn FnMut(&[f64]) -> f64,
    x0: &[f64],
    step: f64,
    max_evals: u32,
    evals: &mut u32,
) -> (Vec<f64>, f64) {
    let n = x0.len();
    let mut eval = |p: &[f64], evals: &mut u32| {
        *evals += 1;
        f(p)
    };
    let mut pts: Vec<(Vec<f64>, f64)> = Vec::with_capacity(n + 1);
    pts.push((x0.to_vec(), eval(x0, evals)));
    for i in 0..n {
        let mut p = x0.to_vec();
        p[i] += step;
        let v = eval(&p, evals);
        pts.push((p, v));
    }
    // The point c + t(c − w) on the line from the worst point w through the centroid c.
    let along = |c: &[f64], w: &[f64], t: f64| -> Vec<f64> {
        c.iter().zip(w).map(|(c, w)| c + t * (c - w)).collect()
    };
    while *evals < max_evals {
        pts.sort_by(|a, b| a.1.total_cmp(&b.1));
        let spread = pts
            .iter()
            .flat_map(|(p, _)| p.iter().zip(&pts[0].0).map(|(a, b)| (a - b).abs()))
            .fold(0.0, f64::max);
        if pts[n].1 - pts[0].1 <= 1e-12 * pts[0].1.abs().max(1e-12) || spread < 1e-8 {
            break;
        }
        let c: Vec<f64> = (0..n)
            .map(|j| pts[..n].iter().map(|(p, _)| p[j]).sum::<f64>() / n as f64)
            .collect();
        let worst = pts[n].clone();
        let r = along(&c, &worst.0, 1.0);
        let fr = eval(&r, evals);
        if fr < pts[0].1 {
            let e = along(&c, &worst.0, 2.0);
            let fe = eval(&e, evals);
            pts[n] = if fe < fr { (e, fe) } else { (r, fr) };
        } else if fr < pts[n - 1].1 {
            pts[n] = (r, fr);
        } else {
            // Contract outside (towards r) or inside (towards w).
            let (t, bar) = if fr < worst.1 {
                (0.5, fr)
            } else {
                (-0.5, worst.1)
            };
            let k = along(&c, &worst.0, t);
            let fk = eval(&k, evals);
            if fk < bar {
                pts[n] = (k, fk);
            } else {
                let best = pts[0].0.clone();
                for p in pts.iter_mut().skip(1) {
                    let s: Vec<f64> = best
                        .iter()
                        .zip(&p.0)
                        .map(|(b, x)| b + 0.5 * (x - b))
                        .collect();
                    let v = eval(&s, evals);
                    *p = (s, v);
                }
            }
        }
    }
    pts.sort_by(|a, b| a.1.total_cmp(&b.1));
    pts.swap_remove(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nelder_mead_finds_a_bounded_minimum_inside_and_on_the_face() {
        // Rosenbrock moved into the cube: minimum 0 at (0.6, 0.36).
        let mut rosen = |x: &[f64]| (0.6 - x[0]).powi(2) + 100.0 * (x[1] - x[0] * x[0]).powi(2);
        let m = minimize(&mut rosen, &[0.1, 0.9], 4000);
        assert!(
            (m.x[0] - 0.6).abs() < 1e-3 && (m.x[1] - 0.36).abs() < 1e-3,
            "{m:?}"
        );
        // A bowl centred outside the cube: the bounded minimum is on the face x₀ = 1.
        let mut bowl =
            |x: &[f64]| (x[0] - 1.5).powi(2) + (x[1] - 0.25).powi(2) + (x[2] - 0.75).powi(2);
        let m = minimize(&mut bowl, &[0.5, 0.5, 0.5], 4000);
        assert!((m.x[0] - 1.0).abs() < 1e-6, "{m:?}");
        assert!(
            (m.x[1] - 0.25).abs() < 1e-4 && (m.x[2] - 0.75).abs() < 1e-4,
            "{m:?}"
        );
        // Deterministic: the same search gives the same point, bit for bit.
        let again = minimize(&mut bowl, &[0.5, 0.5, 0.5], 4000);
        assert_eq!(m, again);
    }

    #[test]
    fn least_squares_fits_a_curve_and_stops_on_a_face() {
        // y = a · e^(b·t) sampled at 6 points, a = 0.7, b = 0.3 (both in the cube).
        let ts = [0.0, 0.5, 1.0, 1.5, 2.0, 2.5];
        let mut r = |x: &[f64]| -> Vec<f64> {
            ts.iter()
                .map(|t| x[0] * (x[1] * t).exp() - 0.7 * (0.3 * t).exp())
                .collect()
        };
        let m = least_squares(&mut r, &[0.5, 0.5], 500);
        assert!(
            (m.x[0] - 0.7).abs() < 1e-6 && (m.x[1] - 0.3).abs() < 1e-6,
            "{m:?}"
        );
        assert!(m.evals < 200, "{m:?}");
        // Residuals pulling x₀ past 1: the fit stops on the face.
        let mut out = |x: &[f64]| vec![x[0] - 1.4, x[1] - 0.2];
        let m = least_squares(&mut out, &[0.5, 0.5], 500);
        assert!(
            (m.x[0] - 1.0).abs() < 1e-4 && (m.x[1] - 0.2).abs() < 1e-6,
            "{m:?}"
        );
    }

    #[test]
    fn parameters_map_onto_the_unit_interval_and_back() {
        for p in PARAMS {
            for u in [0.0, 0.3, 1.0] {
                let v = p.from_unit(u);
                assert!(v >= p.lo && v <= p.hi * (1.0 + 1e-12), "{p:?} {u} {v}");
                assert!((p.to_unit(v) - u).abs() < 1e-9, "{p:?} {u}");
            }
            let mut s = crate::preset("tiny@cpu").unwrap();
            (p.set)(&mut s, p.from_unit(0.5));
            assert_eq!((p.get)(&s), p.from_unit(0.5), "{}", p.name);
        }
    }
}

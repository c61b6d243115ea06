//! Prefill/decode disaggregation's KV transfer as `cadence sim --pd-transfer` and
//! `cadence plan --pd-transfer` take it: a fixed time plus, optionally, a time per
//! prompt token, spent between the prefill and the first decode step.

use std::time::Duration;

/// Each part's ceiling: a minute (a transfer that long is a broken link, not a model).
pub const MAX_PD_PART: Duration = Duration::from_secs(60);

/// A KV transfer's time: `fixed + per_token × prompt tokens` (`40ms`, `40ms+10us`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PdTransfer {
    /// Paid by every request (the connection, the handshake, the first block).
    pub fixed: Duration,
    /// Paid per prompt token (the KV bytes a token holds over the link).
    pub per_token: Duration,
}

/// A `--pd-transfer` value that is not `DURATION[+PER_TOKEN]` within the limits.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "'{given}' is not DURATION[+PER_TOKEN] (e.g. 40ms or 40ms+10us), each part at most 60s: {why}"
)]
pub struct PdTransferError {
    /// What was given.
    pub given: String,
    /// What is wrong with it.
    pub why: String,
}

impl PdTransfer {
    /// The transfer of a prompt of `prompt_tokens` tokens (saturating at `Duration::MAX`).
    pub fn of(&self, prompt_tokens: u32) -> Duration {
        self.per_token
            .checked_mul(prompt_tokens)
            .and_then(|t| t.checked_add(self.fixed))
            .unwrap_or(Duration::MAX)
    }
}

impl std::str::FromStr for PdTransfer {
    type Err = PdTransferError;

    fn from_str(s: &str) -> Result<PdTransfer, PdTransferError> {
        let err = |why: String| PdTransferError {
            given: s.to_owned(),
            why,
        };
        let part = |p: &str| -> Result<Duration, PdTransferError> {
            let d = cadence_core::parse_duration(p.trim()).map_err(|e| err(e.to_string()))?;
            if d > MAX_PD_PART {
                return Err(err(format!("{} is over 60s", p.trim())));
            }
            Ok(d)
        };
        let (fixed, per_token) = match s.split_once('+') {
            Some((f, t)) => (part(f)?, part(t)?),
            None => (part(s)?, Duration::ZERO),
        };
        Ok(PdTransfer { fixed, per_token })
    }
}

/// Prefill workers a `--pd-transfer` disaggregates onto when none are given.
pub const DEFAULT_PD_WORKERS: u32 = 1;

/// The link a transfer with no per-token part runs on: so fast that a prompt's bytes
/// round to no nanosecond (the engine's link must be finite).
pub const FREE_LINK_GBS: f64 = 1e12;

impl crate::spec::EngineSpec {
    /// Disaggregates this engine with `t` as its KV transfer: the fixed part as the
    /// transfer's own time, the per-token part as the link (KV bytes a token ÷ the time
    /// a token), on its prefill workers or [`DEFAULT_PD_WORKERS`].
    pub fn set_pd_transfer(&mut self, t: PdTransfer) {
        let workers = match self.serving.prefill {
            crate::spec::Prefill::Disaggregated { workers, .. } => workers,
            crate::spec::Prefill::Chunked { .. } => DEFAULT_PD_WORKERS,
        };
        let per_token_s = t.per_token.as_secs_f64();
        let link_gbs = if per_token_s > 0.0 {
            self.kv_bytes_per_token() / per_token_s / 1e9
        } else {
            FREE_LINK_GBS
        };
        self.serving.prefill = crate::spec::Prefill::Disaggregated {
            workers,
            transfer_ms: t.fixed.as_secs_f64() * 1e3,
            link_gbs,
        };
    }

    /// The KV transfer this engine makes after a prompt of `prompt_tokens` tokens is
    /// prefilled, when its prefill is disaggregated: its time (ns, the transfer's own
    /// time and the bytes over the link) and its bytes.
    pub fn kv_transfer(&self, prompt_tokens: u32) -> Option<(u64, f64)> {
        let crate::spec::Prefill::Disaggregated {
            transfer_ms,
            link_gbs,
            ..
        } = self.serving.prefill
        else {
            return None;
        };
        let bytes = self.kv_bytes_per_token() * f64::from(prompt_tokens);
        let delay = transfer_ms * 1e-3 + bytes / (link_gbs * 1e9);
        Some(((delay * 1e9).round() as u64, bytes))
    }

    /// The sim's flat knobs on this engine: a P/D transfer ([`Self::set_pd_transfer`])
    /// and a mean acceptance length ([`crate::spec::Speculation::for_accept_len`]).
    pub fn set_sim_knobs(&mut self, transfer: Option<PdTransfer>, accept_len: Option<f64>) {
        if let Some(t) = transfer {
            self.set_pd_transfer(t);
        }
        if let Some(l) = accept_len {
            self.serving.speculation = Some(crate::spec::Speculation::for_accept_len(l));
        }
    }
}

impl crate::spec::Speculation {
    /// Speculation whose expected tokens a step are `l` (1 to 16, the bonus token
    /// included) on `ceil(l) − 1` draft tokens (at least 1), as `cadence sim
    /// --spec-accept-len` drafts: α solved from (1 − α^(k+1)) ÷ (1 − α) = l by bisection
    /// (60 halvings, far below f64's step), the draft's cost the default.
    pub fn for_accept_len(l: f64) -> crate::spec::Speculation {
        let k = (l.ceil() as u32).saturating_sub(1).max(1);
        let with = |alpha: f64| crate::spec::Speculation {
            k,
            alpha,
            draft_us: 0.0,
            draft_fraction: crate::spec::DEFAULT_DRAFT_FRACTION,
        };
        let (mut lo, mut hi) = (0.0, 1.0);
        for _ in 0..60 {
            let mid = (lo + hi) / 2.0;
            if with(mid).expected_tokens() < l {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        with((lo + hi) / 2.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_transfer_is_fixed_plus_per_prompt_token() {
        let t: PdTransfer = "40ms".parse().unwrap();
        assert_eq!(t.of(1000), Duration::from_millis(40));
        let t: PdTransfer = "40ms+10us".parse().unwrap();
        assert_eq!(t.per_token, Duration::from_micros(10));
        assert_eq!(t.of(1000), Duration::from_millis(50));
        assert_eq!(t.of(0), Duration::from_millis(40));
        for bad in ["", "40", "40ms+", "+1ms", "2m", "1ms+61s", "fast"] {
            let e = bad.parse::<PdTransfer>().unwrap_err().to_string();
            assert!(e.contains("DURATION[+PER_TOKEN]"), "{bad}: {e}");
        }
        assert!("2m"
            .parse::<PdTransfer>()
            .unwrap_err()
            .to_string()
            .contains("over 60s"));
        let huge = PdTransfer {
            fixed: Duration::MAX,
            per_token: Duration::from_secs(1),
        };
        assert_eq!(huge.of(1), Duration::MAX);
    }

    #[test]
    fn the_sims_knobs_set_the_engines_transfer_and_speculation() {
        let mut e = crate::preset("llama-3.1-8b@h100-bf16").unwrap();
        // 131,072 KV bytes a token: 10 µs a token is a link of 13.1072 GB/s.
        assert_eq!(e.kv_bytes_per_token(), 131_072.0);
        e.set_sim_knobs(Some("40ms+10us".parse().unwrap()), Some(2.5));
        let crate::spec::Prefill::Disaggregated {
            workers,
            transfer_ms,
            link_gbs,
        } = e.serving.prefill
        else {
            panic!("not disaggregated: {:?}", e.serving.prefill);
        };
        assert_eq!((workers, transfer_ms), (DEFAULT_PD_WORKERS, 40.0));
        assert!((link_gbs - 13.1072).abs() < 1e-9, "{link_gbs}");
        // 2.5 tokens a step on 2 drafts: 1 + α + α² = 2.5, α = (√7 − 1) ÷ 2.
        let sp = e.serving.speculation.unwrap();
        assert_eq!(sp.k, 2);
        assert!(
            (sp.alpha - (7f64.sqrt() - 1.0) / 2.0).abs() < 1e-12,
            "{}",
            sp.alpha
        );
        assert!((sp.expected_tokens() - 2.5).abs() < 1e-12);
        e.validate().unwrap();
        // Whole lengths: every draft accepted; 1, none.
        let three = crate::spec::Speculation::for_accept_len(3.0);
        assert_eq!(three.k, 2);
        assert!((three.expected_tokens() - 3.0).abs() < 1e-12);
        let one = crate::spec::Speculation::for_accept_len(1.0);
        assert_eq!(one.k, 1);
        assert!(one.alpha < 1e-12);
        // No per-token part: a link so fast a prompt's bytes take no nanosecond.
        e.set_pd_transfer("40ms".parse().unwrap());
        let crate::spec::Prefill::Disaggregated { link_gbs, .. } = e.serving.prefill else {
            panic!()
        };
        assert!(131_072.0 * 1e6 / (link_gbs * 1e9) < 1e-9);
    }
}

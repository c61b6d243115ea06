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
}

//! The one seeded generator every crate uses (SplitMix64), so that a seed means the
//! same bootstrap, engine jitter and simulated timings on every machine and every
//! `rand` release. Pure: 64 bits of state, no I/O.

/// SplitMix64 (Steele, Lea, Flood 2014): passes BigCrush, more than good enough for
/// bootstrap draws, simulated latencies and filler words.
#[derive(Debug, Clone)]
pub struct SplitMix64(u64);

impl SplitMix64 {
    /// A generator whose state starts at `seed` (no mixing: callers salt their seeds).
    pub fn new(seed: u64) -> Self {
        SplitMix64(seed)
    }

    /// The next 64 pseudo-random bits; advances the state.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (`n > 0`), by multiply-shift (bias below 2^-32 for our n).
    pub fn below(&mut self, n: usize) -> usize {
        (((self.next_u64() >> 32) * n as u64) >> 32) as usize
    }

    /// Uniform in [0, 1), 53 bits.
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The seed of stream `i` (a request, a session, a shard) of a run seeded `seed`: the
/// run seed XOR `i` times 2^64/φ, the constant SplitMix64 steps by, so neighbouring
/// streams start far apart. The one rule every per-stream seed is derived by.
pub fn stream_seed(seed: u64, i: u64) -> u64 {
    seed ^ i.wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stream_seeds_are_the_run_seed_for_stream_zero_and_apart_for_the_others() {
        assert_eq!(stream_seed(42, 0), 42);
        assert_eq!(stream_seed(0, 1), 0x9E37_79B9_7F4A_7C15);
        // 2 × 0x9E37_79B9_7F4A_7C15 wraps to 0x3C6E_F372_FE94_F82A.
        assert_eq!(stream_seed(1, 2), 0x3C6E_F372_FE94_F82B);
    }

    #[test]
    fn splitmix_is_the_reference_sequence() {
        // First outputs of SplitMix64 seeded with 0 (Vigna's reference implementation).
        let mut r = SplitMix64::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
        let mut r = SplitMix64::new(7);
        assert!((0..1000).all(|_| r.below(3) < 3));
    }

    #[test]
    fn unit_is_the_top_53_bits_in_0_1() {
        let mut a = SplitMix64::new(0);
        let mut b = SplitMix64::new(0);
        let u = a.unit();
        assert_eq!(
            u,
            (0xE220_A839_7B1D_CDAFu64 >> 11) as f64 / (1u64 << 53) as f64
        );
        assert_eq!(b.next_u64() >> 11, (u * (1u64 << 53) as f64) as u64);
        let mut r = SplitMix64::new(3);
        assert!((0..1000).map(|_| r.unit()).all(|u| (0.0..1.0).contains(&u)));
    }
}

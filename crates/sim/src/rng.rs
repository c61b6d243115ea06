//! The sim's seeded generator: `cadence-core`'s SplitMix64 behind `rand`'s `RngCore`,
//! so that a seed means the same token timings and text on every platform and every
//! `rand` release; `SmallRng` promises neither.

use cadence_base::rng::SplitMix64;
use rand::RngCore;

/// SplitMix64 for `rand_distr` samplers, one stream per request and purpose.
#[derive(Debug, Clone)]
pub struct SimRng(SplitMix64);

impl SimRng {
    pub fn new(seed: u64) -> Self {
        SimRng(SplitMix64::new(seed))
    }

    /// A generator for one purpose (`stream`) of one request, derived from the
    /// run seed so that requests and purposes never share a sequence.
    pub fn for_request(seed: u64, request: u64, stream: u64) -> Self {
        let a = SimRng::new(seed ^ 0x5EED_CADE_0000_0000).next_u64();
        let b = SimRng::new(cadence_base::rng::stream_seed(a, request)).next_u64();
        SimRng::new(b ^ stream.wrapping_mul(0xD1B5_4A32_D192_ED03))
    }
}

impl RngCore for SimRng {
    fn next_u32(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }

    fn next_u64(&mut self) -> u64 {
        self.0.next_u64()
    }

    fn fill_bytes(&mut self, dst: &mut [u8]) {
        for chunk in dst.chunks_mut(8) {
            let bytes = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splitmix_reference_values() {
        // First outputs for seed 0 from the reference implementation.
        let mut r = SimRng::new(0);
        assert_eq!(r.next_u64(), 0xE220_A839_7B1D_CDAF);
        assert_eq!(r.next_u64(), 0x6E78_9E6A_A1B9_65F4);
    }

    #[test]
    fn request_streams_differ() {
        let a = SimRng::for_request(1, 0, 0).next_u64();
        let b = SimRng::for_request(1, 1, 0).next_u64();
        let c = SimRng::for_request(1, 0, 1).next_u64();
        let d = SimRng::for_request(2, 0, 0).next_u64();
        assert!(a != b && a != c && a != d && b != c);
        assert_eq!(a, SimRng::for_request(1, 0, 0).next_u64());
    }
}

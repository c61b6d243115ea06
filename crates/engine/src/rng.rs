//! The engine's seeded generator: `cadence-core`'s SplitMix64 with the seed salted, so
//! a seed means the same jitter, acceptance draws and arrivals on every platform and
//! every `rand` release, and a stream of its own apart from the other users of a seed.

pub use cadence_core::rng::SplitMix64;

/// The engine's generator for `seed`.
pub fn seeded(seed: u64) -> SplitMix64 {
    SplitMix64::new(seed ^ 0xCADE_0E61_4E00_0000)
}

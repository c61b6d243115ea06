//! The engine's prefix cache: per prefix key, how many positions have been
//! computed. A real engine keeps cached blocks only while the KV cache has room
//! for them and evicts the least recently used first; this one holds at most the
//! KV capacity in cached positions the same way, so a long run of distinct
//! prompts leaves a bounded cache behind.

use std::collections::{BTreeMap, HashMap};

#[derive(Debug, Clone, Copy)]
struct Entry {
    tokens: u32,
    /// When the key was last looked up or extended (see [`PrefixCache::tick`]).
    used: u64,
}

/// Computed positions per prefix key, at most `capacity` in all, least recently
/// used evicted first.
#[derive(Debug, Clone)]
pub(crate) struct PrefixCache {
    capacity: u64,
    /// Σ tokens over `entries`.
    held: u64,
    entries: HashMap<u64, Entry>,
    /// Keys by last use, oldest first.
    order: BTreeMap<u64, u64>,
    tick: u64,
}

impl PrefixCache {
    /// An empty cache holding at most `capacity` positions (the KV capacity).
    pub(crate) fn new(capacity: u64) -> PrefixCache {
        PrefixCache {
            capacity,
            held: 0,
            entries: HashMap::new(),
            order: BTreeMap::new(),
            tick: 0,
        }
    }

    fn touch(&mut self, key: u64) -> Option<&mut Entry> {
        self.tick += 1;
        let tick = self.tick;
        let e = self.entries.get_mut(&key)?;
        self.order.remove(&e.used);
        e.used = tick;
        self.order.insert(tick, key);
        Some(e)
    }

    /// Positions computed for `key` (0 if none are cached); counts as a use.
    pub(crate) fn get(&mut self, key: u64) -> u32 {
        self.touch(key).map_or(0, |e| e.tokens)
    }

    /// `key` has computed `tokens` positions (it keeps the most it ever had while
    /// cached); evicts the least recently used other keys until the cache fits.
    pub(crate) fn note(&mut self, key: u64, tokens: u32) {
        if tokens == 0 {
            return;
        }
        match self.touch(key) {
            Some(e) if e.tokens >= tokens => return,
            Some(e) => {
                let grown = tokens - e.tokens;
                e.tokens = tokens;
                self.held += grown as u64;
            }
            None => {
                let used = self.tick;
                self.entries.insert(key, Entry { tokens, used });
                self.order.insert(used, key);
                self.held += tokens as u64;
            }
        }
        while self.held > self.capacity {
            let Some((&used, &oldest)) = self.order.iter().next() else {
                break;
            };
            if oldest == key {
                break;
            }
            self.order.remove(&used);
            let gone = self
                .entries
                .remove(&oldest)
                .expect("ordered keys are cached");
            self.held -= gone.tokens as u64;
        }
    }

    /// Keys cached.
    pub(crate) fn len(&self) -> usize {
        self.entries.len()
    }

    /// Positions cached, over all keys.
    pub(crate) fn held(&self) -> u64 {
        self.held
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn distinct_prompts_leave_at_most_the_kv_capacity_behind() {
        let mut c = PrefixCache::new(1_000);
        for key in 0..100_000u64 {
            assert_eq!(c.get(key), 0);
            c.note(key, 80);
            assert!(c.held() <= 1_000, "key {key}: {} held", c.held());
        }
        assert_eq!(c.len(), 12, "1,000 positions hold 12 prefixes of 80");
        assert_eq!(c.order.len(), c.len());
    }

    #[test]
    fn the_least_recently_used_key_goes_first() {
        let mut c = PrefixCache::new(300);
        c.note(1, 100);
        c.note(2, 100);
        c.note(3, 100);
        assert_eq!(c.get(1), 100, "1 is now the most recent");
        c.note(4, 100);
        assert_eq!(c.get(2), 0, "2 was the least recently used");
        assert_eq!((c.get(1), c.get(3), c.get(4)), (100, 100, 100));
    }

    #[test]
    fn a_key_keeps_its_furthest_computed_position() {
        let mut c = PrefixCache::new(300);
        c.note(7, 50);
        c.note(7, 120);
        c.note(7, 90);
        assert_eq!(c.get(7), 120);
        assert_eq!(c.held(), 120);
        c.note(8, 0);
        assert_eq!(c.len(), 1, "nothing computed, nothing cached");
    }
}

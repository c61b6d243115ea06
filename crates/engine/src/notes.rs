//! What only the engine knows about a planned level, in words for its report:
//! pre-emptions, and requests that waited for their first step.

use crate::drive::PlanLevel;

impl PlanLevel {
    /// What only the engine knows about a level: pre-emptions, and requests that waited
    /// for their first step (behind a long step, or for a slot or KV room).
    pub fn warnings(&self) -> Vec<String> {
        let level = self;
        let mut out = Vec::new();
        if level.preemptions > 0 {
            out.push(format!(
            "the KV cache ran out: {} pre-emptions (sequences recomputed, their streams paused)",
            level.preemptions
        ));
        }
        let mut queue = level.queue_ns.clone();
        queue.sort_unstable();
        let step50 = {
            let mut d: Vec<u64> = level.steps.iter().map(|s| s.end - s.start).collect();
            d.sort_unstable();
            d.get(d.len() / 2).copied().unwrap_or(0)
        };
        if let (Some(&q50), Some(&qmax)) = (queue.get(queue.len() / 2), queue.last()) {
            if q50 > 2 * step50 {
                out.push(format!(
                "requests waited for their first engine step: median {:.1} ms, max {:.1} ms (behind a long step, or for a batch slot or KV-cache room)",
                q50 as f64 / 1e6,
                qmax as f64 / 1e6
            ));
            }
        }
        out
    }
}

//! NVIDIA Dynamo's per-worker gauges: a disaggregated deployment's frontend reports each
//! prefill and decode worker's load (`dynamo_frontend_worker_*`, labelled `worker_type`)
//! and its router's queue, so a level can say which side of the split was loaded when
//! TTFT or ITL bent. Pure: series in, one entry per worker type out.

use super::ServerSample;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

/// Worker types kept per sample, at most (Dynamo names a handful: `prefill`,
/// `decode`, `aggregated`, `encoder`); a page's others are left out.
pub const MAX_WORKER_TYPES: usize = 8;

/// One worker type's gauges in one sample, summed over its ranks (the last observed
/// TTFT and ITL: the highest rank's).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerGauges {
    /// Worker ranks that reported (distinct `worker_id` and `dp_rank`).
    pub ranks: u32,
    /// Prompt tokens queued for prefill on these workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_prefill_tokens: Option<f64>,
    /// KV-cache blocks held by decoding requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_decode_blocks: Option<f64>,
    /// Requests waiting inside the workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting: Option<f64>,
    /// Requests pending in the router's queue for this worker type.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_pending: Option<f64>,
    /// The slowest rank's last observed time to first token, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_ttft_s: Option<f64>,
    /// The slowest rank's last observed inter-token latency, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_itl_s: Option<f64>,
}

/// The gauges read, by their name after `dynamo_frontend_`.
#[derive(Clone, Copy)]
enum Gauge {
    PrefillTokens,
    DecodeBlocks,
    Waiting,
    RouterPending,
    LastTtft,
    LastItl,
}

fn gauge(name: &str) -> Option<Gauge> {
    Some(match name.strip_prefix("dynamo_frontend_")? {
        "worker_active_prefill_tokens" => Gauge::PrefillTokens,
        "worker_active_decode_blocks" => Gauge::DecodeBlocks,
        "worker_waiting_requests" => Gauge::Waiting,
        "router_queue_pending_requests" => Gauge::RouterPending,
        "worker_last_time_to_first_token_seconds" => Gauge::LastTtft,
        "worker_last_inter_token_latency_seconds" => Gauge::LastItl,
        _ => return None,
    })
}

/// Whether a series is one of the per-worker gauges [`worker_gauges`] reads.
pub fn is_worker_gauge(name: &str) -> bool {
    gauge(name).is_some()
}

/// A page's series as name, labels and value.
pub type SeriesRef<'a> = (&'a str, &'a [(String, String)], f64);

/// The page's per-worker gauges by `worker_type` (a series without one is
/// `unlabelled`); empty when the page has none.
pub fn worker_gauges<'a>(
    series: impl IntoIterator<Item = SeriesRef<'a>>,
) -> BTreeMap<String, WorkerGauges> {
    let mut out: BTreeMap<String, WorkerGauges> = BTreeMap::new();
    let mut ranks: BTreeMap<String, BTreeSet<(String, String)>> = BTreeMap::new();
    for (name, labels, value) in series.into_iter().filter(|s| s.2.is_finite()) {
        let Some(g) = gauge(name) else { continue };
        let label = |k: &str| labels.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
        let kind = label("worker_type").unwrap_or_else(|| "unlabelled".into());
        if !out.contains_key(&kind) && out.len() >= MAX_WORKER_TYPES {
            continue;
        }
        let w = out.entry(kind.clone()).or_default();
        let add = |slot: &mut Option<f64>| *slot = Some(slot.unwrap_or(0.0) + value);
        let max = |slot: &mut Option<f64>| *slot = Some(slot.unwrap_or(0.0).max(value));
        match g {
            Gauge::PrefillTokens => add(&mut w.active_prefill_tokens),
            Gauge::DecodeBlocks => add(&mut w.active_decode_blocks),
            Gauge::Waiting => add(&mut w.waiting),
            Gauge::RouterPending => add(&mut w.router_pending),
            Gauge::LastTtft => max(&mut w.last_ttft_s),
            Gauge::LastItl => max(&mut w.last_itl_s),
        }
        if let Some(id) = label("worker_id") {
            let rank = label("dp_rank").unwrap_or_default();
            ranks.entry(kind).or_default().insert((id, rank));
        }
    }
    for (kind, set) in ranks {
        if let Some(w) = out.get_mut(&kind) {
            w.ranks = set.len() as u32;
        }
    }
    out
}

/// Requests waiting across the worker types (inside the workers and in the router's
/// queue); `None` when no worker type reads either.
pub fn waiting(workers: &BTreeMap<String, WorkerGauges>) -> Option<f64> {
    workers
        .values()
        .flat_map(|w| [w.waiting, w.router_pending])
        .flatten()
        .reduce(|a, b| a + b)
}

/// One worker type over a level: the most each gauge read in any sample.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WorkerRow {
    /// Dynamo's `worker_type` label (`prefill`, `decode`, `aggregated`, …).
    pub worker_type: String,
    /// The most ranks that reported in one sample.
    pub ranks: u32,
    /// The most prompt tokens queued for prefill.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prefill_tokens_max: Option<f64>,
    /// The most KV-cache blocks held by decoding requests.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decode_blocks_max: Option<f64>,
    /// The most requests waiting inside the workers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub waiting_max: Option<f64>,
    /// The most requests pending in the router's queue.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub router_pending_max: Option<f64>,
    /// The slowest last TTFT a rank reported, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_ttft_ms_max: Option<f64>,
    /// The slowest last ITL a rank reported, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_itl_ms_max: Option<f64>,
}

/// The level's rows, one per worker type any sample read, in name order.
pub fn worker_rows(samples: &[ServerSample]) -> Vec<WorkerRow> {
    let kinds: BTreeSet<&String> = samples
        .iter()
        .flat_map(|s| s.figures.workers.keys())
        .collect();
    kinds
        .into_iter()
        .map(|kind| {
            let of: Vec<&WorkerGauges> = samples
                .iter()
                .filter_map(|s| s.figures.workers.get(kind))
                .collect();
            let most = |f: fn(&WorkerGauges) -> Option<f64>| {
                of.iter().filter_map(|w| f(w)).reduce(f64::max)
            };
            WorkerRow {
                worker_type: kind.clone(),
                ranks: of.iter().map(|w| w.ranks).max().unwrap_or(0),
                prefill_tokens_max: most(|w| w.active_prefill_tokens),
                decode_blocks_max: most(|w| w.active_decode_blocks),
                waiting_max: most(|w| w.waiting),
                router_pending_max: most(|w| w.router_pending),
                last_ttft_ms_max: most(|w| w.last_ttft_s).map(|s| s * 1e3),
                last_itl_ms_max: most(|w| w.last_itl_s).map(|s| s * 1e3),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    type Owned = (&'static str, Vec<(String, String)>, f64);

    fn series(name: &'static str, labels: &[(&str, &str)], value: f64) -> Owned {
        let labels = labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        (name, labels, value)
    }

    /// Two prefill workers, one decode worker with two data-parallel ranks.
    fn page() -> Vec<Owned> {
        let w = |id: &'static str, rank: &'static str, kind: &'static str| {
            [("worker_id", id), ("dp_rank", rank), ("worker_type", kind)]
        };
        vec![
            series(
                "dynamo_frontend_worker_active_prefill_tokens",
                &w("1", "0", "prefill"),
                300.0,
            ),
            series(
                "dynamo_frontend_worker_active_prefill_tokens",
                &w("2", "0", "prefill"),
                100.0,
            ),
            series(
                "dynamo_frontend_worker_active_decode_blocks",
                &w("3", "0", "decode"),
                40.0,
            ),
            series(
                "dynamo_frontend_worker_active_decode_blocks",
                &w("3", "1", "decode"),
                60.0,
            ),
            series(
                "dynamo_frontend_worker_waiting_requests",
                &w("1", "0", "prefill"),
                2.0,
            ),
            series(
                "dynamo_frontend_router_queue_pending_requests",
                &[("worker_type", "prefill")],
                3.0,
            ),
            series(
                "dynamo_frontend_worker_last_time_to_first_token_seconds",
                &w("1", "0", "prefill"),
                0.25,
            ),
            series(
                "dynamo_frontend_worker_last_time_to_first_token_seconds",
                &w("2", "0", "prefill"),
                0.5,
            ),
            series(
                "dynamo_frontend_worker_last_inter_token_latency_seconds",
                &w("3", "1", "decode"),
                0.012,
            ),
            series("dynamo_frontend_inflight_requests", &[("model", "m")], 9.0),
        ]
    }

    fn read(page: &[Owned]) -> BTreeMap<String, WorkerGauges> {
        worker_gauges(page.iter().map(|(n, l, v)| (*n, l.as_slice(), *v)))
    }

    #[test]
    fn worker_gauges_are_summed_per_worker_type_over_ranks() {
        let w = read(&page());
        assert_eq!(w.len(), 2, "{w:?}");
        let p = &w["prefill"];
        assert_eq!(p.ranks, 2);
        assert_eq!(p.active_prefill_tokens, Some(400.0));
        assert_eq!((p.waiting, p.router_pending), (Some(2.0), Some(3.0)));
        assert_eq!(p.last_ttft_s, Some(0.5), "the slowest rank");
        let d = &w["decode"];
        assert_eq!(d.ranks, 2, "one worker, two data-parallel ranks");
        assert_eq!(d.active_decode_blocks, Some(100.0));
        assert_eq!(d.last_itl_s, Some(0.012));
        assert_eq!(
            waiting(&w),
            Some(5.0),
            "in the workers and the router's queue"
        );
        assert_eq!(waiting(&BTreeMap::new()), None);
    }

    #[test]
    fn worker_types_are_bounded() {
        let page: Vec<Owned> = (0..MAX_WORKER_TYPES + 5)
            .map(|i| {
                let kind = format!("t{i:02}");
                let labels = vec![("worker_type".to_string(), kind)];
                ("dynamo_frontend_worker_active_decode_blocks", labels, 1.0)
            })
            .collect();
        assert_eq!(read(&page).len(), MAX_WORKER_TYPES);
    }

    #[test]
    fn a_level_keeps_the_most_each_gauge_read() {
        let sample = |t_ns| ServerSample {
            t_ns,
            figures: crate::server::ServerFigures {
                workers: read(&page()),
                ..Default::default()
            },
            raw: BTreeMap::new(),
        };
        let (mut a, mut b) = (sample(0), sample(1));
        let prefill = b.figures.workers.get_mut("prefill").unwrap();
        prefill.active_prefill_tokens = Some(900.0);
        a.figures
            .workers
            .get_mut("decode")
            .unwrap()
            .active_decode_blocks = Some(150.0);
        let rows = worker_rows(&[a, b]);
        assert_eq!(
            rows.iter()
                .map(|r| r.worker_type.as_str())
                .collect::<Vec<_>>(),
            ["decode", "prefill"]
        );
        assert_eq!(rows[0].decode_blocks_max, Some(150.0));
        assert_eq!(rows[1].prefill_tokens_max, Some(900.0));
        assert_eq!(rows[1].last_ttft_ms_max, Some(500.0));
        assert_eq!(rows[1].router_pending_max, Some(3.0));
        assert_eq!(rows[0].prefill_tokens_max, None);
    }
}

//! `bench`'s levels in turn: the planned list or the `--find-max` search's probes, each
//! run at its place in the fleet with its scraper, judged when it is a probe, told to
//! the dashboard, and its metadata written to the records as it ends.

use super::{open_load, Sinks};
use crate::cli::{BenchArgs, SearchAxis};
use cadence_bench::search::Search;
use cadence_bench::{Load, RunContext, RunPlan, RunSummary, StopReason};
use cadence_core::level_meta;
use cadence_core::metrics::LevelOptions;
use cadence_core::runlog::{self, LevelMeta};
use cadence_core::slo::probe_passes;
use cadence_records::RecordSender;
use cadence_transport::Clock;
use cadence_tui::dashboard::LiveState;
use std::sync::Arc;

/// The levels of a run: the planned list in order, or the `--find-max` search's probes.
pub(super) struct Levels<'a> {
    pub(super) args: &'a BenchArgs,
    pub(super) fleet: &'a cadence_bench::shard::Fleet,
    pub(super) cx: Arc<RunContext>,
    pub(super) sender: RecordSender<Sinks>,
    pub(super) planned: Vec<Load>,
    pub(super) requests: Option<u64>,
    pub(super) clock: Clock,
    pub(super) scrape: Option<cadence_bench::scrape::ScrapeConfig>,
    /// The dashboard's state, told when each level begins and ends.
    pub(super) live: Option<LiveState>,
}

impl Levels<'_> {
    /// Runs every level until the list or the search ends or Ctrl-C stops the run; each
    /// level's metadata goes to the records file as it ends.
    pub(super) async fn run(
        self,
        stop_rx: tokio::sync::watch::Receiver<bool>,
    ) -> (Vec<LevelMeta>, Option<(SearchAxis, Search)>) {
        let args = self.args;
        let mut search = args.find_max.map(|axis| (axis, new_search(args, axis)));
        let sweep = self.planned.len() > 1 || search.is_some();
        let mut planned = self.planned.clone().into_iter();
        let mut metas = Vec::new();
        for i in 0u32.. {
            let load = match &search {
                None => planned.next(),
                Some((axis, s)) => s.next().map(|v| probe_load(args, *axis, v)),
            };
            let Some(load) = load else { break };
            let probe_level = match &load {
                Load::Closed { concurrency } => *concurrency as f64,
                Load::Open { rate, .. } => *rate,
                Load::Trace { .. } => 0.0,
            };
            let plan = RunPlan {
                load,
                requests: self.requests,
                duration: args.duration,
                warmup: args.warmup,
                grace: args.grace,
                level: i,
                stop_when_saturated: sweep,
            };
            self.live_begin(&plan);
            let mut rx = stop_rx.clone();
            let stop = async move {
                let _ = rx.wait_for(|s| *s).await;
            };
            let scraper = self.start_scraper().await;
            let summary = cadence_bench::run_placed(
                self.cx.clone(),
                &plan,
                self.clock,
                self.sender.clone(),
                stop,
                self.fleet.placement(i),
            )
            .await;
            let server = match scraper {
                Some(s) => s.finish().await.map(Box::new),
                None => None,
            };
            let interrupted = summary.stop == StopReason::Interrupted;
            if let (Some((_, s)), false) = (&mut search, interrupted) {
                s.record(probe_level, self.probe_passed(i, &summary).await);
            }
            let facts = summary.facts(&plan);
            let mut meta = level_meta(&facts);
            meta.server = server;
            self.live_end(&meta);
            let line = runlog::level_line(&meta);
            self.sender.with(move |s| s.write_line(&line));
            if let Some(line) = self.fleet.level_line(&plan, &summary, &facts) {
                self.sender.with(move |s| s.write_line(&line));
            }
            metas.push(meta);
            if interrupted {
                break;
            }
        }
        (metas, search)
    }

    /// The level's `--server-metrics` scraper, started now (a thread that cannot be
    /// started is a note, and the level runs without it).
    async fn start_scraper(&self) -> Option<cadence_bench::scrape::Scraper> {
        let config = self.scrape.clone()?;
        cadence_bench::scrape::Scraper::start(config, self.clock)
            .await
            .map_err(|e| eprintln!("cadence: cannot start the metrics scraper: {e}"))
            .ok()
    }

    /// Tells the dashboard (when there is one) which level starts.
    fn live_begin(&self, plan: &RunPlan) {
        let Some(live) = &self.live else {
            return;
        };
        let args = self.args;
        let of = (args.find_max.is_none()).then_some(self.planned.len() as u32);
        let planned = self
            .requests
            .map(|n| self.cx.factory.total_turns(n + args.warmup));
        live.lock().begin_level(
            plan.level,
            of,
            plan.load.label(),
            planned,
            args.duration,
            self.clock.now_ns(),
        );
    }

    /// Tells the dashboard the level ended, and why early if it did.
    fn live_end(&self, meta: &LevelMeta) {
        if let Some(live) = &self.live {
            let note = match (&meta.stopped_early, meta.interrupted) {
                (Some(why), _) => Some(why.clone()),
                (None, true) => Some("interrupted".into()),
                (None, false) => None,
            };
            live.lock().end_level(meta.level, note);
        }
    }

    /// Whether level `i` was valid, within the error-rate ceiling and met every `--slo`.
    async fn probe_passed(&self, i: u32, summary: &RunSummary) -> bool {
        let args = self.args;
        let level = self
            .sender
            .query(move |s| {
                s.levels.get(i).map(|a| {
                    let f = a.finish(&LevelOptions::default());
                    let late = f.pacing.is_some_and(|p| p.invalid);
                    (f.summary, late)
                })
            })
            .await
            .flatten();
        // An invalid level (watchdog, late sends) never passes, whatever it measured.
        level.is_some_and(|(level, late)| {
            !summary.watchdog_fired
                && !late
                && probe_passes(&level, &args.slos, args.max_error_rate)
        })
    }
}

/// The `--find-max` search, from the first --rate / --concurrency value (default 1).
fn new_search(args: &BenchArgs, axis: SearchAxis) -> Search {
    let start = match axis {
        SearchAxis::Rate => args.rate.as_ref().map_or(1.0, |r| r.0[0]),
        SearchAxis::Concurrency => args.concurrency.as_ref().map_or(1.0, |c| c.0[0] as f64),
    };
    Search::new(
        start,
        axis == SearchAxis::Concurrency,
        args.max_probes as usize,
    )
}

/// The load of a search probe at level `v` of `axis`.
fn probe_load(args: &BenchArgs, axis: SearchAxis, v: f64) -> Load {
    match axis {
        SearchAxis::Concurrency => Load::Closed {
            concurrency: v as u32,
        },
        SearchAxis::Rate => open_load(args, v),
    }
}

//! `cadence bench`'s dashboard: a thread of its own takes the terminal (at once with
//! `--tui`, after the run's first seconds by default), draws the live state the record
//! thread keeps at its own frame rate, turns `q` / Ctrl-C into the run's stop and `s`
//! into a skip, and gives the terminal back before the report prints. The live state
//! is one of the run's record sinks ([`LiveState`]): the bench crate knows nothing of
//! the terminal, the binary wires the two.

use crate::live::{Client, Live};
use crate::term::{self, Feed};
use crate::View;
use cadence_bench::progress::Progress;
use cadence_core::{RecordSink, RequestRecord};
use cadence_transport::Clock;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// By default the dashboard shows once the run has gone on this long; shorter runs
/// keep the progress line.
pub const AUTO_DELAY: Duration = Duration::from_secs(3);

/// The dashboard's live state, shared: the record thread feeds it every finished record
/// (it is a sink of the run, `BenchSinks::with_live`), the levels say when each begins
/// and ends, and the dashboard thread reads a view of it at its frame rate.
#[derive(Clone)]
pub struct LiveState(Arc<Mutex<Live>>);

impl LiveState {
    /// `max_late_share` is the `--max-late` bound of the self-check.
    pub fn new(stall_threshold: Duration, max_late_share: f64) -> LiveState {
        LiveState(Arc::new(Mutex::new(Live::new(
            stall_threshold,
            max_late_share,
        ))))
    }

    /// The state itself, for one call (the record thread waits meanwhile).
    pub fn lock(&self) -> MutexGuard<'_, Live> {
        self.0.lock().expect("live lock")
    }
}

impl RecordSink for LiveState {
    fn accept(&mut self, record: &RequestRecord) {
        self.lock().add(record);
    }
}

/// The running dashboard; [`Dashboard::finish`] gives the terminal back.
pub struct Dashboard {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    lag_probe: tokio::task::JoinHandle<()>,
}

/// What the dashboard thread needs.
pub struct Setup {
    /// The run's progress line, hidden while the dashboard shows.
    pub progress: Progress,
    /// The live state the record thread feeds.
    pub live: LiveState,
    /// The run's clock (the frames' times and the loop-lag probe's).
    pub clock: Clock,
    /// The run's stop: what Ctrl-C sends.
    pub stop: Arc<tokio::sync::watch::Sender<bool>>,
    /// The title line (the command and its target).
    pub title: String,
    /// How long the run goes on before the dashboard takes the terminal.
    pub delay: Duration,
    /// Draw into memory instead of the terminal (`cadence fidelity --dashboard`).
    pub headless: bool,
}

/// The dashboard of one level without a terminal: the same live state, loop-lag probe
/// and frames, drawn into memory at the same rate; only the terminal writes are missing.
/// The live state comes back too, for the caller to add to the run's sinks.
pub fn headless(
    progress: &Progress,
    clock: Clock,
    plan: &cadence_bench::RunPlan,
) -> (Dashboard, LiveState) {
    let live = LiveState::new(
        Duration::from_millis(500),
        cadence_core::runlog::DEFAULT_MAX_LATE,
    );
    live.lock().begin_level(
        plan.level,
        Some(1),
        plan.load.label(),
        plan.requests,
        plan.duration,
        clock.now_ns(),
    );
    let dashboard = Dashboard::start(Setup {
        progress: progress.clone(),
        live: live.clone(),
        clock,
        stop: Arc::new(tokio::sync::watch::channel(false).0),
        title: "cadence fidelity".into(),
        delay: Duration::ZERO,
        headless: true,
    });
    (dashboard, live)
}

impl Dashboard {
    /// Starts the thread, and a loop-lag probe on the runtime feeding the self-check.
    pub fn start(setup: Setup) -> Dashboard {
        let live = setup.live.clone();
        let lag_probe = tokio::spawn(cadence_transport::lag::watch(
            cadence_transport::lag::PERIOD,
            move |l| live.lock().loop_lag(l),
        ));
        let done = Arc::new(AtomicBool::new(false));
        let d = done.clone();
        let thread = std::thread::Builder::new()
            .name("cadence-dashboard".into())
            .spawn(move || show(setup, d))
            .ok();
        Dashboard {
            done,
            thread,
            lag_probe,
        }
    }

    /// The run is over: leave the terminal as it was (waits for the thread).
    pub fn finish(mut self) {
        self.done.store(true, Ordering::SeqCst);
        self.lag_probe.abort();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Dashboard {
    fn drop(&mut self) {
        self.done.store(true, Ordering::SeqCst);
        self.lag_probe.abort();
        term::restore();
    }
}

/// The thread: waits out the delay (the run may end first), then draws until done.
fn show(setup: Setup, done: Arc<AtomicBool>) {
    let until = Instant::now() + setup.delay;
    while Instant::now() < until {
        if done.load(Ordering::SeqCst) {
            return;
        }
        std::thread::sleep(Duration::from_millis(50).min(setup.delay));
    }
    setup.progress.hide_line();
    let headless = setup.headless;
    let mut feed = BenchFeed {
        setup,
        done,
        cpu: CpuMeter::default(),
        notice: None,
    };
    if headless {
        while !feed.done() {
            let started = Instant::now();
            std::hint::black_box(crate::frame(&feed.view(), 120, 40));
            std::thread::sleep(term::FRAME.saturating_sub(started.elapsed()));
        }
        return;
    }
    if let Err(e) = term::run(&mut feed) {
        eprintln!("cadence: the dashboard stopped: {e}");
    }
}

struct BenchFeed {
    setup: Setup,
    done: Arc<AtomicBool>,
    cpu: CpuMeter,
    notice: Option<String>,
}

impl Feed for BenchFeed {
    fn view(&mut self) -> View {
        let s = &self.setup;
        let client = Client {
            in_flight: s.progress.in_flight(),
            cpu_share: self.cpu.share(),
            cores: cores(),
        };
        let now = s.clock.now_ns();
        let mut v = s.live.lock().view(now, client);
        v.title = s.title.clone();
        v.clock = crate::top::clock(now as f64 / 1e9);
        v.notice = self.notice.clone();
        v
    }

    fn done(&self) -> bool {
        self.done.load(Ordering::SeqCst)
    }

    fn quit(&mut self) {
        let _ = self.setup.stop.send(true);
        self.notice =
            Some("stopping: the requests in flight finish (up to --grace), then the report".into());
    }

    fn skip(&mut self) {
        self.setup.progress.skip_level();
        self.notice = Some("skipping to the next level".into());
    }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

/// This process's CPU share of the machine over the last second or so.
#[derive(Default)]
struct CpuMeter {
    last: Option<(Instant, Duration)>,
    share: Option<f64>,
}

impl CpuMeter {
    fn share(&mut self) -> Option<f64> {
        let now = Instant::now();
        match self.last {
            Some((at, _)) if now.duration_since(at) < Duration::from_secs(1) => {}
            _ => {
                let cpu = cadence_bench::cpu::process_cpu_time();
                if let (Some((at, before)), Some(cpu)) = (self.last, cpu) {
                    let wall = now.duration_since(at).as_secs_f64();
                    let used = cpu.saturating_sub(before).as_secs_f64();
                    self.share = Some(used / wall / cores() as f64);
                }
                self.last = cpu.map(|c| (now, c));
            }
        }
        self.share
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use cadence_bench::sink::{BenchSinks, KeepAll};
    use cadence_core::Outcome;
    use cadence_records::RecordThread;

    #[test]
    fn the_live_state_as_a_sink_of_the_run_gets_every_record() {
        let live = LiveState::new(Duration::from_millis(500), 0.001);
        live.lock()
            .begin_level(0, Some(1), "c".into(), None, None, 0);
        // The progress line is hidden (as under the dashboard); the records still come.
        let sinks = BenchSinks::new(None, Progress::new(None, false), KeepAll::default())
            .unwrap()
            .with_live(live.clone());
        let (tx, thread) = RecordThread::start(sinks).unwrap();
        let mut rec = RequestRecord::new(0, Outcome::Succeeded);
        rec.sent_ns = Some(0);
        tx.send(rec.clone());
        rec.outcome = Outcome::Http5xx;
        tx.send(rec);
        drop(tx);
        thread.finish().unwrap();
        let v = live.lock().view(1_000_000_000, Client::default());
        assert_eq!((v.counts.sent, v.counts.succeeded), (2, 1));
        assert_eq!(v.counts.failed, vec![("http_5xx".to_string(), 1)]);
    }
}

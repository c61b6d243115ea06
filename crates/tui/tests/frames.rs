//! Frames of fixed dashboard states, drawn with ratatui's `TestBackend` and compared
//! as text with `tests/snapshots/*.txt` (docs/src/dashboard.md shows the same
//! captures). After a deliberate layout change, `CADENCE_BLESS=1 cargo test -p
//! cadence-tui` rewrites them.

use cadence_tui::{
    frame, frame_text, Bin, Counts, Latency, LevelProgress, Pacing, SelfCheck, Side, Stalls,
    TableRow, View,
};
use ratatui::style::Color;
use std::path::PathBuf;

const W: u16 = 110;
const H: u16 = 34;

fn check_snapshot(name: &str, text: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/snapshots")
        .join(format!("{name}.txt"));
    if std::env::var_os("CADENCE_BLESS").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, text).unwrap();
        return;
    }
    let want = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (CADENCE_BLESS=1 writes it)", path.display()));
    assert_eq!(text, want, "frame {name} changed:\n{text}");
}

fn row(label: &str, sent: u64, failed: u64, itl: (f64, f64), tok_s: f64) -> TableRow {
    TableRow {
        label: label.into(),
        sent,
        succeeded: sent - failed,
        failed,
        ttft_p50_ms: Some(40.0 + itl.0),
        ttft_p99_ms: Some(60.0 + itl.1),
        itl_p50_ms: Some(itl.0),
        itl_p99_ms: Some(itl.1),
        tok_s: Some(tok_s),
        note: String::new(),
    }
}

/// A closed-loop sweep of 1,2,4,8,16 in its fourth level, healthy.
fn sweep() -> View {
    View {
        title: "cadence bench · http://127.0.0.1:41877/v1 · tiny-sim".into(),
        clock: "01:12".into(),
        level: Some(LevelProgress {
            index: 3,
            of: Some(5),
            label: "concurrency=8".into(),
            done: 120,
            planned: Some(200),
            elapsed_s: 9.5,
            duration_s: None,
        }),
        scope: "this level".into(),
        in_flight: Some(8),
        counts: Counts {
            sent: 128,
            succeeded: 120,
            ..Counts::default()
        },
        latency: Latency {
            spans: ["last 10 s".into(), "this level".into()],
            ttft: [Some([48.2, 61.0, 70.4]), Some([47.9, 60.2, 74.1])],
            itl: [Some([12.1, 14.0, 19.8]), Some([12.0, 13.9, 21.3])],
        },
        stalls: Some(Stalls {
            threshold_ms: 500.0,
            gaps: 0,
            first_token: 0,
            requests: 0,
        }),
        side: Side::Histogram(vec![
            Bin {
                lo_ms: 4.0,
                hi_ms: 8.0,
                count: 310,
            },
            Bin {
                lo_ms: 8.0,
                hi_ms: 16.0,
                count: 11_200,
            },
            Bin {
                lo_ms: 16.0,
                hi_ms: 32.0,
                count: 2_050,
            },
            Bin {
                lo_ms: 32.0,
                hi_ms: 64.0,
                count: 12,
            },
        ]),
        chart_titles: ["ITL p99 per second".into(), "output tok/s".into()],
        itl_p99_series: (0..72).map(|i| 18.0 + (i % 7) as f64).collect(),
        tok_s_series: (0..72).map(|i| 200.0 + (i * 9 % 120) as f64).collect(),
        check: SelfCheck {
            loop_lag_ms: Some((0.4, 1.1)),
            pacing: None,
            cpu_share: Some(0.31),
            cores: 2,
        },
        table_title: "Completed levels".into(),
        rows: vec![
            row("concurrency=1", 200, 0, (10.2, 11.9), 98.0),
            row("concurrency=2", 200, 0, (10.4, 12.6), 192.0),
            row("concurrency=4", 200, 0, (11.0, 15.2), 371.0),
        ],
        ..View::default()
    }
}

/// An open-loop level where the server sheds load: failures by class, stalls.
fn failures() -> View {
    let mut v = sweep();
    v.level = Some(LevelProgress {
        index: 0,
        of: Some(1),
        label: "rate=40/s".into(),
        done: 0,
        planned: None,
        elapsed_s: 21.0,
        duration_s: Some(60.0),
    });
    v.counts = Counts {
        sent: 840,
        succeeded: 655,
        failed: vec![("http_5xx".into(), 131), ("idle_timeout".into(), 40)],
        aborted: 0,
        dropped: 14,
    };
    v.stalls = Some(Stalls {
        threshold_ms: 500.0,
        gaps: 57,
        first_token: 3,
        requests: 40,
    });
    v.check.pacing = Some(Pacing {
        late_share: 0.0,
        max_late_share: 0.001,
        lag_p99_ms: 0.2,
    });
    v.rows = Vec::new();
    v.notice = Some("the level has failures: see the classes above".into());
    v
}

/// The client itself cannot keep up: loop lag, late sends and CPU all over their bounds.
fn stalled_client() -> View {
    let mut v = failures();
    v.counts.failed = Vec::new();
    v.stalls = Some(Stalls::default());
    v.check = SelfCheck {
        loop_lag_ms: Some((38.5, 212.0)),
        pacing: Some(Pacing {
            late_share: 0.124,
            max_late_share: 0.001,
            lag_p99_ms: 95.3,
        }),
        cpu_share: Some(0.97),
        cores: 2,
    };
    v.notice = None;
    v
}

#[test]
fn a_sweep_mid_way_shows_the_level_and_the_completed_levels() {
    let text = frame_text(&sweep(), W, H);
    check_snapshot("sweep", &text);
    assert!(text.contains("level 4 of 5  concurrency=8"), "{text}");
    assert!(text.contains("120/200 requests"), "{text}");
    assert!(
        text.contains("concurrency=4"),
        "the table grew a row per level"
    );
    assert!(
        text.contains(" Self-check "),
        "healthy: no warning in the title"
    );
}

#[test]
fn a_run_with_failures_shows_them_by_class_in_red() {
    let view = failures();
    let text = frame_text(&view, W, H);
    check_snapshot("failures", &text);
    assert!(
        text.contains("failed 171 (http_5xx 131, idle_timeout 40)"),
        "{text}"
    );
    assert!(
        text.contains("stalls over 500.0 ms: 57 gaps, 3 first tokens, 40 requests"),
        "{text}"
    );
    let buf = frame(&view, W, H);
    let at = find(&text, "failed 171");
    assert_eq!(buf[at].fg, Color::Red);
}

#[test]
fn a_stalled_client_turns_the_self_check_red() {
    let view = stalled_client();
    let text = frame_text(&view, W, H);
    check_snapshot("stalled_client", &text);
    assert!(
        text.contains("timestamps may be late, figures are suspect"),
        "{text}"
    );
    let buf = frame(&view, W, H);
    for needle in ["loop lag p99 38.5", "late sends 12.4 %", "CPU 97 %"] {
        assert_eq!(buf[find(&text, needle)].fg, Color::Red, "{needle}");
    }
    // The same figures under their bounds are green.
    let healthy = sweep();
    let text = frame_text(&healthy, W, H);
    assert_eq!(
        frame(&healthy, W, H)[find(&text, "loop lag p99 0.4")].fg,
        Color::Green
    );
}

#[test]
fn the_help_overlay_lists_the_formulas() {
    let mut view = sweep();
    view.help = true;
    let text = frame_text(&view, W, H);
    check_snapshot("help", &text);
    assert!(text.contains("Formulas (? to close)"), "{text}");
    assert!(text.contains("itl: "), "{text}");
}

#[test]
fn a_tiny_terminal_does_not_panic() {
    for (w, h) in [(1, 1), (20, 5), (40, 12), (300, 80)] {
        frame_text(&failures(), w, h);
        let mut v = sweep();
        v.help = true;
        frame_text(&v, w, h);
    }
}

/// The (x, y) of the first cell of `needle` in a frame's text.
fn find(text: &str, needle: &str) -> (u16, u16) {
    for (y, line) in text.lines().enumerate() {
        if let Some(byte) = line.find(needle) {
            return (line[..byte].chars().count() as u16, y as u16);
        }
    }
    panic!("{needle:?} not in the frame:\n{text}");
}

/// A proxy's `/stats` of hand-built records: 20 streams in the last minute (two 503s),
/// 60 in five minutes, one alert firing and one pending.
fn stats_doc() -> serde_json::Value {
    use cadence_core::{summarize_level, Chunk, LevelOptions, Outcome, RequestRecord};
    let ms = 1_000_000u64;
    let now = 600_000 * ms;
    let records = |n: u64, span_s: u64| -> Vec<RequestRecord> {
        (0..n)
            .map(|i| {
                let at = now - span_s * 1000 * ms + i * (span_s * 1000 / n) * ms;
                let failed = i % 10 == 3;
                let mut r = RequestRecord::new(
                    i,
                    if failed {
                        Outcome::Http5xx
                    } else {
                        Outcome::Succeeded
                    },
                );
                r.sent_ns = Some(at);
                if !failed {
                    r.chunks = (0..8)
                        .map(|k| Chunk(at + (80 + i % 7) * ms + k * (20 + i % 5) * ms, None))
                        .collect();
                }
                r.end_ns = Some(r.chunks.last().map_or(at + 5 * ms, |c| c.0));
                r
            })
            .collect()
    };
    let window = |w: u64, recs: Vec<RequestRecord>| {
        let opts = LevelOptions {
            window: Some((now - w * 1_000_000_000, now)),
            ..LevelOptions::default()
        };
        let mut v = serde_json::to_value(summarize_level(&recs, &opts)).unwrap();
        v["window_s"] = serde_json::json!(w as f64);
        v["bucketed"] = serde_json::json!(false);
        v
    };
    serde_json::json!({
        "uptime_s": 3723.5,
        "percentile_rule": cadence_core::PERCENTILE_RULE,
        "windows": [window(60, records(20, 59)), window(300, records(60, 299))],
        "alerts": [
            {"alert": "errors.rate>5% for 30s", "state": "firing", "since_ns": 1, "value": 10.0},
            {"alert": "itl.p99>40ms for 1m", "state": "pending", "since_ns": 2, "value": 44.0},
            {"alert": "ttft.p50>2s", "state": "inactive", "value": 0.1}
        ],
        "self_check": {"loop_lag": [
            {"window_s": 60.0, "ticks": 5990, "p99_ms": 0.3, "max_ms": 1.9, "over_10ms": 0},
            {"window_s": 300.0, "ticks": 29950, "p99_ms": 0.4, "max_ms": 2.2, "over_10ms": 0}
        ]}
    })
}

#[test]
fn top_draws_a_proxys_rolling_windows_and_alerts() {
    let mut history = cadence_tui::top::History::default();
    let doc = stats_doc();
    for _ in 0..30 {
        cadence_tui::top::view(&doc, "http://127.0.0.1:9464", &mut history).unwrap();
    }
    let view = cadence_tui::top::view(&doc, "http://127.0.0.1:9464", &mut history).unwrap();
    let text = frame_text(&view, W, H);
    check_snapshot("top", &text);
    assert!(text.contains("uptime 1:02:03"), "{text}");
    assert!(
        text.contains("sent 20  succeeded 18  failed 2 (http_5xx 2)"),
        "{text}"
    );
    assert!(text.contains("Alerts (1 firing)"), "{text}");
    assert!(text.contains("Rolling windows"), "{text}");
    // Pane titles whole: each chart's name, value and max, the loop lag with its unit.
    assert!(
        text.contains("┌ ITL p99, last 1 min: now 24.0ms, max 24.0ms ─"),
        "{text}"
    );
    assert!(
        text.contains("┌ output tok/s, last 1 min: now 2.4, max 2.4 ─"),
        "{text}"
    );
    assert!(text.contains("p99 0.3 ms, max 1.9 ms"), "{text}");
    assert_eq!(
        frame(&view, W, H)[find(&text, "firing   errors")].fg,
        Color::Red
    );
    // A document of another shape is an error, not a panic.
    let err = cadence_tui::top::view(&serde_json::json!({"windows": 3}), "u", &mut history);
    assert!(err.unwrap_err().contains("unexpected /stats document"));
}

#[test]
fn the_dashboard_page_shows_the_current_frames() {
    let page = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/src/dashboard.md");
    let page = std::fs::read_to_string(page).unwrap();
    for name in ["sweep", "stalled_client", "help", "top"] {
        let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("tests/snapshots")
            .join(format!("{name}.txt"));
        let frame = std::fs::read_to_string(path).unwrap();
        assert!(
            page.contains(&format!("```text\n{frame}```")),
            "docs/src/dashboard.md does not show the current {name} frame: \
             copy tests/snapshots/{name}.txt"
        );
    }
}

//! The server's side of a level (`--server-metrics`) in the console, the HTML and the
//! JSON report, from a hand-built report: the top causes one line each, the stall
//! table and the four charts on one time axis; absent for an ordinary run.

mod common;

use cadence_core::attribution::{attribute, Gap, GapKind};
use cadence_core::server::{ServerFigures, ServerSample, ServerScrape};
use cadence_report::{console, html, json};

const S: u64 = 1_000_000_000;

fn sample(i: u64, running: f64, preemptions: f64) -> ServerSample {
    ServerSample {
        t_ns: i * S,
        figures: ServerFigures {
            running: Some(running),
            waiting: Some(0.0),
            kv_usage: Some(0.4),
            preemptions: Some(preemptions),
            prompt_tokens: Some(100.0 * i as f64),
            generation_tokens: Some(1000.0 * i as f64),
            ..ServerFigures::default()
        },
        raw: Default::default(),
    }
}

/// The full report with ten seconds of samples: batch 8, pre-emptions from 6 s; three
/// stalls in them and one in the quiet part.
fn report_with_server() -> cadence_core::Report {
    let mut r = common::full_report();
    let samples: Vec<ServerSample> = (0..=10)
        .map(|i| sample(i, 8.0, if i >= 6 { 4.0 } else { 0.0 }))
        .collect();
    let scrape = ServerScrape {
        url: "http://127.0.0.1:8000/metrics".into(),
        engine: "vllm".into(),
        interval_ms: 1000.0,
        attempts: 11,
        failures: 0,
        failure: None,
        samples,
    };
    let gap = |a: u64, b: u64| Gap {
        start_ns: a * S / 10,
        end_ns: b * S / 10,
        kind: GapKind::Chunk,
    };
    let gaps = [gap(52, 58), gap(53, 57), gap(55, 59), gap(21, 27)];
    let l = &mut r.levels[0];
    l.time_series = (0..10)
        .map(|i| cadence_core::TimeBucket {
            start_s: i as f64,
            completed: 1,
            failed: 0,
            output_tokens: 1000,
            output_tokens_per_s: 1000.0,
            ttft_p50_ms: None,
            ttft_p99_ms: None,
            itl_p50_ms: Some(10.0),
            itl_p99_ms: Some(if i == 5 { 600.0 } else { 20.0 }),
        })
        .collect();
    l.server = Some(Box::new(attribute(&scrape, &gaps, 0, &l.summary)));
    r
}

#[test]
fn the_console_names_the_top_causes_one_line_each() {
    let out = console::render(&report_with_server(), false);
    let server = out
        .lines()
        .find(|l| l.starts_with("Server "))
        .expect("a server line");
    assert!(
        server.contains("vllm at http://127.0.0.1:8000/metrics: 11 samples"),
        "{server}"
    );
    let causes: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("Stall causes"))
        .take(2)
        .collect();
    assert!(
        causes[0].contains("3 of 4 stalls (75 %) kv_preemption"),
        "{causes:?}"
    );
    assert!(
        causes[1].contains("1 of 4 stalls (25 %) none"),
        "{causes:?}"
    );
}

#[test]
fn the_html_has_the_stall_table_and_four_charts_on_one_axis() {
    let page = html::render(&report_with_server());
    for id in ["server-itl", "server-batch", "server-kv", "server-prefill"] {
        assert!(page.contains(&format!(r#"id="{id}""#)), "no {id}");
    }
    assert!(page.contains("<h2>Server</h2>"));
    assert!(
        page.contains("the 4 longest of 4 stalls"),
        "the stall table"
    );
    assert!(page.contains("kv_preemption"));
}

#[test]
fn an_ordinary_report_has_no_server_side() {
    let r = common::full_report();
    assert!(!console::render(&r, false).contains("Stall causes"));
    assert!(!html::render(&r).contains("<h2>Server</h2>"));
    assert!(!json::render(&r).contains("\"server\""));
}

#[test]
fn the_json_round_trips_the_server_side() {
    let r = report_with_server();
    let text = json::render(&r);
    let back: cadence_core::Report = serde_json::from_str(&text).unwrap();
    assert_eq!(back, r);
}

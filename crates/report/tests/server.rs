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

/// What the console prints of speculation and KV transfer, the HTML shows too: a
/// speculation table per level and the transfer in the TTFT split's row.
#[test]
fn the_html_shows_the_speculation_counters_and_the_kv_transfer() {
    let mut r = report_with_server();
    let server = r.levels[0].server.as_mut().unwrap();
    server.speculation = Some(cadence_core::server::speculation::SpecCounters {
        drafts: Some(24.0),
        draft_tokens: Some(48.0),
        accepted: Some(36.0),
        accepted_by_position: vec![24.0, 12.0],
        acceptance_length: Some(2.5),
        draft_acceptance_rate: Some(0.75),
    });
    server.ttft_split = Some(cadence_core::attribution::TtftSplit {
        client_ms: 600.0,
        server_queue_ms: Some(10.0),
        server_prefill_ms: Some(50.0),
        server_kv_transfer_ms: Some(450.0),
        rest_ms: Some(90.0),
    });
    let page = html::render(&r);
    let console = console::render(&r, false);
    assert!(
        console.contains("24 steps drafted 48 tokens, 36 accepted; acceptance length 2.50"),
        "{console}"
    );
    assert!(
        page.contains("<th>acceptance length</th>"),
        "no speculation table"
    );
    let name = &r.levels[0].name;
    assert!(
        page.contains(&format!("<tr><td>{name}</td><td>24</td><td>48</td><td>36</td><td>2.50</td><td>75 %</td><td class=\"w\">24, 12</td></tr>")),
        "{}",
        &page[page.find("<h2>Server</h2>").unwrap()..][..3000]
    );
    assert!(page.contains("<th>KV transfer</th>"));
    assert!(page.contains("<td>450.0 ms</td>"), "the KV transfer cell");
    // A level without speculation has no table.
    assert!(!html::render(&report_with_server()).contains("<th>acceptance length</th>"));
}

/// Dynamo's worker types: one console line each and one HTML row each, from the
/// samples' per-worker gauges (the most each read over the level).
#[test]
fn dynamos_worker_types_show_in_the_console_and_the_html() {
    use cadence_core::server::dynamo::WorkerGauges;
    let mut r = report_with_server();
    let l = &mut r.levels[0];
    let server = l.server.as_mut().unwrap();
    let mut samples = server.scrape.samples.clone();
    for (i, s) in samples.iter_mut().enumerate() {
        let prefill = WorkerGauges {
            ranks: 2,
            active_prefill_tokens: Some(100.0 * i as f64),
            router_pending: Some(if i == 5 { 3.0 } else { 0.0 }),
            last_ttft_s: Some(0.25),
            ..WorkerGauges::default()
        };
        let decode = WorkerGauges {
            ranks: 1,
            active_decode_blocks: Some(40.0),
            last_itl_s: Some(0.012),
            ..WorkerGauges::default()
        };
        s.figures.workers = [("prefill".into(), prefill), ("decode".into(), decode)].into();
    }
    server.scrape.samples = samples;
    let (scrape, summary) = (server.scrape.clone(), l.summary.clone());
    l.server = Some(Box::new(attribute(&scrape, &[], 0, &summary)));
    let out = console::render(&r, false);
    let lines: Vec<&str> = out
        .lines()
        .skip_while(|l| !l.starts_with("Workers"))
        .take(2)
        .collect();
    assert!(
        lines[0].contains("decode (1 rank), 40 KV blocks decoding, last ITL 12.00 ms"),
        "{lines:?}"
    );
    assert!(
        lines[1].contains("prefill (2 ranks), 1000 prompt tokens queued, 3 in the router's queue, last TTFT 250.0 ms"),
        "{lines:?}"
    );
    let page = html::render(&r);
    let name = &r.levels[0].name;
    assert!(
        page.contains(&format!(
            "<tr><td>{name}</td><td>prefill</td><td>2</td><td>1000</td><td>–</td>"
        )),
        "{}",
        &page[page.find("<h2>Server</h2>").unwrap()..][..3000]
    );
    assert!(!html::render(&report_with_server()).contains("<th>worker type</th>"));
}

//! The HTML, Markdown and CSV renderers on a hand-built report: every chart drawn,
//! secrets-free metadata shown, the headline convention used, absent values never 0.

mod common;

use cadence_report::{csv, html, markdown};

#[test]
fn html_is_self_contained_and_draws_every_chart() {
    let mut r = common::full_report();
    // A time series for the ITL-over-time chart (the fixture's closed loop has none).
    let mut rec = cadence_core::RequestRecord::new(0, cadence_core::Outcome::Succeeded);
    rec.sent_ns = Some(0);
    rec.chunks = (1..=4)
        .map(|k| cadence_core::Chunk(k * 100_000_000, None))
        .collect();
    rec.end_ns = Some(450_000_000);
    r.levels[0].time_series = cadence_core::time_series(&[rec], 100_000_000);
    let page = html::render(&r);
    assert!(page.starts_with("<!DOCTYPE html>"));
    for bad in ["http://", "https://"] {
        // The only URLs allowed are the SVG namespace and the run's own target.
        let stray = page
            .match_indices(bad)
            .filter(|(i, _)| {
                let rest = &page[*i..];
                !rest.starts_with("http://www.w3.org/2000/svg") && !rest.starts_with(&r.run.target)
            })
            .count();
        assert_eq!(stray, 0, "no external resource may be referenced");
    }
    assert!(
        !page.contains("<link") && !page.contains(" src="),
        "nothing loaded"
    );
    assert_eq!(page.matches(r#"<figure class="chart""#).count(), 8);
    // Every figure has an svg with marks.
    for fig in page.split(r#"<figure class="chart""#).skip(1) {
        let fig = &fig[..fig.find("</figure>").unwrap()];
        let marks = fig
            .find(r#"<g class="marks">"#)
            .map(|i| &fig[i..])
            .unwrap_or_else(|| panic!("no marks group in {fig}"));
        assert!(
            marks.contains("<path") || marks.contains("<circle") || marks.contains("<rect"),
            "empty chart: {fig}"
        );
    }
    assert!(page.contains("linux x86_64, 2 cores"), "machine shown");
    assert!(page.contains("vllm (headline)"));
    assert!(page.contains(r#"id="cadence-check""#));
}

#[test]
fn markdown_has_a_row_per_level_and_names_the_headline_convention() {
    let md = markdown::render(&common::full_report());
    assert!(md.contains("| concurrency=1 |"));
    assert!(md.contains("| concurrency=64 |"));
    assert!(md.contains("**vllm** convention"));
    assert!(md.contains("vLLM bench serve"));
}

#[test]
fn level_csv_leaves_absent_figures_empty() {
    let text = csv::levels(&common::sparse_report());
    let mut lines = text.lines();
    let head: Vec<&str> = lines.next().unwrap().split(',').collect();
    let row: Vec<&str> = lines.next().unwrap().split(',').collect();
    assert_eq!(head.len(), row.len());
    let i = head.iter().position(|h| *h == "itl_p99_ms").unwrap();
    assert_eq!(row[i], "", "no ITL samples: empty, not 0");
}

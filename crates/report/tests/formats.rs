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

/// The full report with a clock self-check on its second level only (kernel stamps,
/// a few user-clock requests, merged reads, the client's read delay).
fn with_clock() -> cadence_core::Report {
    let mut r = common::full_report();
    r.levels[1].summary.clock = Some(cadence_core::ClockCheck {
        kernel_requests: 998,
        user_requests: 2,
        multi_event_reads: 7,
        read_delay: common::dist(99_800, [0.4, 0.1, 0.8, 1.2, 9.4, 20.0, 31.0]),
    });
    r
}

#[test]
fn html_shows_the_clock_check_of_the_levels_that_have_one() {
    let page = html::render(&with_clock());
    let at = page.find("<h2>Clock</h2>").expect("a Clock section");
    let table = &page[at..];
    let table = &table[..table.find("</table>").unwrap()];
    assert_eq!(
        table.matches("<tr>").count(),
        2,
        "a head and one level: {table}"
    );
    assert!(
        table.contains(
            r#"<td class="l">concurrency=64</td><td class="l">kernel receive time</td><td>998</td><td>2</td><td>7</td><td>100.0 µs</td><td>9.400 ms</td><td>31.00 ms</td>"#
        ),
        "{table}"
    );
    assert!(!table.contains("concurrency=1<"), "{table}");
    // A run without the check has no section.
    assert!(!html::render(&common::full_report()).contains("<h2>Clock</h2>"));
}

#[test]
fn markdown_shows_the_clock_line_of_the_levels_that_have_one() {
    let mut r = with_clock();
    r.levels[0].summary.clock = Some(cadence_core::ClockCheck {
        kernel_requests: 0,
        user_requests: 1,
        multi_event_reads: 0,
        read_delay: None,
    });
    let md = markdown::render(&r);
    let at = md.find("\n**Clock**\n\n").expect("a Clock part");
    let lines: Vec<&str> = md[at..].lines().skip(3).take(2).collect();
    assert_eq!(
        lines,
        [
            "- concurrency=1: user clock (1 request)",
            "- concurrency=64: kernel receive time (998 of 1000 requests); client read delay p50 100.0 µs, p99 9.400 ms, max 31.00 ms; 7 multi-event reads",
        ]
    );
    // Field for field the same without it.
    let plain = markdown::render(&common::full_report());
    assert!(!plain.contains("**Clock**"));
    let mut no_clock = r.clone();
    for l in &mut no_clock.levels {
        l.summary.clock = None;
    }
    assert_eq!(markdown::render(&no_clock), plain);
}

#[test]
fn level_csv_has_clock_columns_only_when_a_level_has_a_check() {
    let plain = csv::levels(&common::full_report());
    assert!(plain.lines().next().unwrap().ends_with(",slos_failed"));
    assert!(!plain.contains("read_delay"));

    let text = csv::levels(&with_clock());
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split(',').collect()).collect();
    let head = &rows[0];
    let n = head.len();
    assert_eq!(
        head[n - 6..],
        [
            "clock_kernel_requests",
            "clock_user_requests",
            "multi_event_reads",
            "read_delay_p50_ms",
            "read_delay_p99_ms",
            "read_delay_max_ms"
        ]
    );
    // The level without a check: empty cells, never 0.
    assert_eq!(rows[1][n - 6..], ["", "", "", "", "", ""]);
    assert_eq!(rows[2][n - 6..], ["998", "2", "7", "0.1", "9.4", "31"]);
    // The columns before them are the plain table's.
    for (plain_row, row) in plain.lines().zip(text.lines()) {
        assert!(row.starts_with(plain_row), "{row}");
    }
}

#[test]
fn html_has_each_levels_distribution_table_reading_as_the_console() {
    let r = common::full_report();
    let page = html::render(&r);
    let at = page
        .find("<h2>Distributions</h2>")
        .expect("a distributions section");
    let section = &page[at..];
    let heads = "<th>count</th><th>mean</th><th>p50</th><th>p90</th><th>p95</th><th>p99</th>\
                 <th>p99.9</th><th>max</th></tr>";
    assert!(section.contains(heads), "{section}");
    let sixty_four = &section[section
        .find("<h3>concurrency=64</h3>")
        .expect("a level's name")..];
    // The console's E2E row of the same level, cell for cell.
    let console = cadence_report::console::render(&r, false);
    let block = &console[console.find("── concurrency=64 ──").unwrap()..];
    let e2e: Vec<&str> = block
        .lines()
        .find(|l| l.starts_with("E2E "))
        .unwrap()
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    let row = format!(
        "<tr><td class=\"l\">E2E</td>{}</tr>",
        e2e[1..]
            .iter()
            .map(|c| format!("<td>{c}</td>"))
            .collect::<String>()
    );
    assert_eq!(e2e.len(), 9, "{e2e:?}");
    assert!(sixty_four.contains(&row), "{row}\n{sixty_four}");
    // The headline convention (vllm) where the level has it, Cadence's where not.
    let one = &section[..section.find("<h3>concurrency=64</h3>").unwrap()];
    let has =
        |part: &str, metric: &str| part.contains(&format!("<tr><td class=\"l\">{metric}</td>"));
    for metric in ["TTFT", "ITL (vllm)", "TPOT (vllm)", "E2E"] {
        assert!(has(one, metric), "{metric}: {one}");
    }
    for metric in ["TTFT", "ITL", "TPOT"] {
        assert!(has(sixty_four, metric), "{metric}: {sixty_four}");
    }
}

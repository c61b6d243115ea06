//! The console summary, checked line by line on hand-built reports.

mod common;

use cadence_report::console::render;

fn line_starting<'a>(out: &'a str, prefix: &str) -> &'a str {
    out.lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starting with {prefix:?} in:\n{out}"))
}

/// The cells of a table row after its 16-character label.
fn cells(line: &str) -> Vec<String> {
    let rest: String = line.chars().skip(16).collect();
    let mut v = Vec::new();
    let mut cur = Vec::new();
    for w in rest.split_whitespace() {
        // "102.3 ms" is one cell: a unit word joins the number before it.
        if matches!(w, "µs" | "ms" | "s") {
            cur.push(w);
            v.push(cur.join(" "));
            cur.clear();
        } else {
            if !cur.is_empty() {
                v.push(cur.join(" "));
                cur.clear();
            }
            cur.push(w);
        }
    }
    if !cur.is_empty() {
        v.push(cur.join(" "));
    }
    v
}

#[test]
fn header_names_target_api_model_load_requests_and_duration() {
    let out = render(&common::full_report(), false);
    let mut lines = out.lines();
    let first = lines.next().unwrap();
    assert!(
        first.starts_with("Cadence 0.1.0 http://127.0.0.1:8080/v1/chat/completions"),
        "{first}"
    );
    let second = lines.next().unwrap();
    assert_eq!(
        second,
        "  api openai-chat, model llama-3-8b, closed_loop, 2 levels, 641 requests sent, 12.50 s"
    );
}

#[test]
fn single_level_header_shows_concurrency_and_flags() {
    let out = render(&common::sparse_report(), false);
    assert!(out.contains("(built-in simulator)"), "{out}");
    assert!(out.contains(", concurrency 2, 2 requests sent, "), "{out}");
    assert!(
        out.contains("interrupted: figures cover what was measured"),
        "{out}"
    );
}

#[test]
fn table_rows_use_readable_units() {
    let out = render(&common::full_report(), false);
    let block = &out[out.find("── concurrency=64 ──").unwrap()..];
    assert!(block.starts_with("── concurrency=64 ── 640 sent, 636 succeeded"));
    let head = block.lines().nth(1).unwrap();
    assert_eq!(
        head.split_whitespace().collect::<Vec<_>>(),
        ["count", "mean", "p50", "p90", "p95", "p99", "p99.9", "max"]
    );
    assert_eq!(
        cells(line_starting(block, "TTFT  ")),
        [
            "636", "102.3 ms", "98.70 ms", "150.0 ms", "180.0 ms", "240.0 ms", "700.0 ms",
            "1.234 s"
        ]
    );
    assert_eq!(cells(line_starting(block, "TTFT (content)"))[0], "600");
    assert_eq!(
        cells(line_starting(block, "ITL/token")),
        [
            "81000",
            "11.50 ms",
            "850.0 µs",
            "29.00 ms",
            "34.00 ms",
            "58.00 ms",
            "500.0 ms",
            "800.0 ms"
        ]
    );
    assert_eq!(cells(line_starting(block, "ITL  "))[1], "23.46 ms");
    assert_eq!(cells(line_starting(block, "TPOT"))[7], "41.00 ms");
    assert_eq!(cells(line_starting(block, "E2E"))[1], "3.100 s");
    assert_eq!(
        cells(line_starting(block, "Speed (tok/s)"))[1..3],
        ["45.50", "46.50"]
    );
    assert_eq!(cells(line_starting(block, "Tokens/chunk"))[1], "1.250");
    assert!(
        !block.contains("TTFT (response)"),
        "no schedule, no response-time row"
    );
}

#[test]
fn facts_lines_for_throughput_tokens_outcomes_stalls_and_stream() {
    let out = render(&common::full_report(), false);
    let block = &out[out.find("── concurrency=64 ──").unwrap()..];
    assert_eq!(
        line_starting(block, "Throughput"),
        "Throughput      6513 output tok/s, 50.88 req/s over a 12.50 s window"
    );
    assert_eq!(
        line_starting(block, "Output tokens"),
        "Output tokens   81408 from succeeded requests (source: tokenizer (requests by source: \
         tokenizer 36, usage 600)); 81500 received incl. failed"
    );
    assert_eq!(
        line_starting(block, "Requests"),
        "Requests        640 intended, 640 sent, 636 succeeded, 2 stream_error, 1 truncated, \
         1 aborted, 0 dropped"
    );
    assert_eq!(
        line_starting(block, "Warm-up"),
        "Warm-up         8 requests, excluded from every figure"
    );
    assert_eq!(
        line_starting(block, "Stalls"),
        "Stalls          14 stalls (waits over 500.0 ms) in 9 requests: 0 for the first token, 14 \
         between chunks"
    );
    assert_eq!(
        line_starting(block, "Stream"),
        "Stream          12 keep-alives, 40 coalesced events, 3 streams without [DONE] (over 79000 reads)"
    );
    assert!(line_starting(block, "Warning").contains("have no send time"));
    assert!(
        out.contains("Warning: the client's event loop lagged"),
        "{out}"
    );
}

#[test]
fn computed_level_shows_exact_values_and_response_ttft() {
    let out = render(&common::full_report(), false);
    let block =
        &out[out.find("── concurrency=1 ──").unwrap()..out.find("── concurrency=64 ──").unwrap()];
    assert_eq!(
        cells(line_starting(block, "TTFT  "))[..3],
        ["1", "100.0 ms", "100.0 ms"]
    );
    // The response TTFT is the same in every cell as TTFT (one request): left out, named.
    assert!(!block.contains("\nTTFT (response)"), "{block}");
    assert!(
        block.contains(
            "left out, the same in every cell: TTFT (content) = TTFT, TTFT (response) = TTFT, \
             ITL (vllm) = ITL, TPOT (vllm) = TPOT\n"
        ),
        "{block}"
    );
    assert_eq!(
        cells(line_starting(block, "ITL  "))[..3],
        ["2", "15.00 ms", "15.00 ms"]
    );
    assert_eq!(
        cells(line_starting(block, "ITL/token"))[..3],
        ["3", "10.00 ms", "5.000 ms"]
    );
    assert_eq!(cells(line_starting(block, "TPOT"))[1], "15.00 ms"); // 3 chunks, no usage: 30 / 2
    assert_eq!(
        cells(line_starting(block, "Speed (tok/s)"))[..2],
        ["1", "66.67"]
    );
    assert_eq!(
        line_starting(block, "Stalls"),
        "Stalls          no wait over 500.0 ms (for the first token or between chunks)"
    );
    assert!(
        !block.contains("Stream "),
        "clean streams print no counter line"
    );
    assert!(!block.contains("Warm-up"), "no warm-up, no line");
}

#[test]
fn absent_values_are_dashes_never_zero() {
    let out = render(&common::sparse_report(), false);
    for label in [
        "TTFT  ",
        "TTFT (content)",
        "ITL  ",
        "ITL/token",
        "TPOT",
        "E2E",
        "Speed (tok/s)",
    ] {
        let line = line_starting(&out, label);
        assert_eq!(cells(line), vec!["–"; 8], "{line}");
    }
    assert_eq!(
        line_starting(&out, "Throughput"),
        "Throughput      0 output tok/s, 0 req/s over a 5.000 ms window"
    );
    assert!(line_starting(&out, "Output tokens").contains("(source: –)"));
    assert_eq!(
        line_starting(&out, "Requests"),
        "Requests        2 intended, 2 sent, 0 succeeded, 1 connect_error, 1 http_5xx, 0 aborted, 0 dropped"
    );
}

#[test]
fn broken_accounting_is_printed() {
    let mut r = common::sparse_report();
    r.levels[0].summary.requests.intended = 5;
    let out = render(&r, false);
    assert!(out.contains("intended = sent + dropped fails"), "{out}");
}

#[test]
fn sweep_gets_a_summary_table() {
    let out = render(&common::full_report(), false);
    let at = out.find("Summary by level").expect("a sweep summary");
    let table: Vec<&str> = out[at..].lines().collect();
    assert!(table[1].starts_with("level"));
    assert!(table[2].starts_with("concurrency=1 "), "{}", table[2]);
    assert!(table[3].starts_with("concurrency=64 "), "{}", table[3]);
    assert!(
        table[3].contains("98.70 ms") && table[3].contains("6513"),
        "{}",
        table[3]
    );
    let single = render(&common::sparse_report(), false);
    assert!(!single.contains("Summary by level"));
}

#[test]
fn formula_line_names_the_definitions() {
    let out = render(&common::full_report(), false);
    let last = out.lines().last().unwrap();
    assert!(last.starts_with("Formulas: "), "{last}");
    for part in [
        "ITL = gaps between consecutive chunks, pooled",
        "TPOT = (last - first)/(tokens - 1) per request",
        "linear interpolation (type 7)",
    ] {
        assert!(last.contains(part), "{last}");
    }
}

#[test]
fn color_only_when_asked() {
    let plain = render(&common::full_report(), false);
    assert!(!plain.contains('\x1b'));
    let colored = render(&common::full_report(), true);
    assert!(colored.contains("\x1b[1m") && colored.contains("\x1b[31m2 stream_error\x1b[0m"));
}

/// The block of the level named `name`, up to the next level or the summary table.
fn block<'a>(out: &'a str, name: &str) -> &'a str {
    let start = out
        .find(&format!("── {name} ──"))
        .unwrap_or_else(|| panic!("no level {name} in:\n{out}"));
    let skip = start + "── ".len();
    let rest = &out[skip..];
    let end = ["\n── ", "\nSummary by level"]
        .iter()
        .filter_map(|m| rest.find(m))
        .min()
        .map_or(out.len(), |e| skip + e);
    &out[start..end]
}

#[test]
fn slo_lines_show_the_figure_and_the_verdict() {
    let out = render(&common::open_loop_report(), false);
    let calm = block(&out, "rate=2");
    let lines: Vec<&str> = calm.lines().filter(|l| l.starts_with("SLO ")).collect();
    assert_eq!(
        lines,
        [
            "SLO             itl.p99<=50ms    observed 20.00 ms  pass",
            "SLO             ttft.p90<=150ms  observed 100.0 ms  pass",
        ]
    );
    let hot = block(&out, "rate=8");
    assert_eq!(
        line_starting(hot, "SLO "),
        "SLO             itl.p99<=50ms    observed 60.00 ms  FAIL"
    );
}

#[test]
fn slo_without_samples_and_speed_slos_read_plainly() {
    let mut r = common::open_loop_report();
    r.levels[0].slos = vec![
        cadence_core::SloResult {
            slo: "ttft_response.p99<=1s".into(),
            observed: None,
            bound: 1000.0,
            unit: "ms".into(),
            pass: false,
        },
        cadence_core::SloResult {
            slo: "output_speed.p50>=20".into(),
            observed: Some(46.5),
            bound: 20.0,
            unit: "tok/s".into(),
            pass: true,
        },
    ];
    let out = render(&r, false);
    let calm = block(&out, "rate=2");
    let lines: Vec<&str> = calm.lines().filter(|l| l.starts_with("SLO ")).collect();
    assert_eq!(
        lines,
        [
            "SLO             ttft_response.p99<=1s  observed – (no samples)  FAIL",
            "SLO             output_speed.p50>=20   observed 46.50 tok/s  pass",
        ]
    );
}

#[test]
fn pacing_beside_the_machines_floor() {
    let floor = |late| cadence_core::TimerFloor {
        deadlines: 2_000,
        late,
        lag_p99_ms: 0.25,
        lag_max_ms: 6.0,
    };
    // Level rate=8 has 1 of 2 sends late: a floor with 400 of 2,000 deadlines late
    // explains it; one with none does not.
    let mut noisy = common::open_loop_report();
    let hot = &mut noisy.levels[1];
    let ttft_p50 = hot.summary.ttft.map(|d| d.p50);
    hot.pacing
        .as_mut()
        .unwrap()
        .judge(Some(floor(400)), ttft_p50);
    let out = render(&noisy, false);
    let hot = block(&out, "rate=8");
    assert!(
        hot.contains(
            "machine floor: 400 of 2000 timer deadlines woke over 1 ms late (p99 250.0 µs, \
             max 6.000 ms); 3.712 late sends allowed"
        ),
        "{hot}"
    );
    assert!(
        hot.contains("lag p99 is 2.97 % of TTFT p50 (open-loop TTFT counts from the schedule)"),
        "{hot}"
    );
    assert!(
        hot.contains(
            "50 % of sends were late, over --max-late 0.1 %, within what the machine's own \
             timer lateness explains: valid"
        ),
        "{hot}"
    );
    assert!(!hot.contains("INVALID: 50 %"), "{hot}");

    let mut quiet = common::open_loop_report();
    quiet.levels[1]
        .pacing
        .as_mut()
        .unwrap()
        .judge(Some(floor(0)), None);
    let out = render(&quiet, false);
    assert!(
        block(&out, "rate=8").contains(
            "INVALID: 50 % of sends were late, more than --max-late 0.1 % and the machine's \
             own timer lateness allow: the client fell behind"
        ),
        "{out}"
    );
}

#[test]
fn goodput_pacing_and_early_stop_lines() {
    let out = render(&common::open_loop_report(), false);
    let calm = block(&out, "rate=2");
    assert_eq!(
        line_starting(calm, "Goodput"),
        "Goodput         2 requests met every SLO (100 % of sent), 3.150 req/s"
    );
    assert_eq!(
        line_starting(calm, "Pacing"),
        "Pacing          0 late (> 1 ms behind schedule) of 2 sent, 0 dropped; lag p50 0 ms, \
         p99 0 ms, max 0 ms"
    );
    assert!(!calm.contains("INVALID"), "{calm}");
    assert!(!calm.contains("Stopped early"), "{calm}");

    let hot = block(&out, "rate=8");
    assert_eq!(
        line_starting(hot, "Goodput"),
        "Goodput         0 requests met every SLO (0 % of sent), 0 req/s"
    );
    assert_eq!(
        line_starting(hot, "Pacing"),
        "Pacing          1 late (> 1 ms behind schedule) of 2 sent, 1 dropped; lag p50 1.500 ms, \
         p99 2.970 ms, max 3.000 ms"
    );
    let invalid = hot
        .lines()
        .find(|l| l.contains("INVALID"))
        .expect("INVALID line");
    assert_eq!(
        invalid.trim_start(),
        "INVALID: 50 % of sends were late, over --max-late 0.1 %: the client fell behind its \
         schedule and the figures are unreliable"
    );
    assert_eq!(
        line_starting(hot, "Stopped early"),
        "Stopped early   more than half of the requests failed (1 of 2)"
    );
    // Closed-loop levels print none of these.
    let closed = render(&common::full_report(), false);
    for what in ["SLO ", "Goodput", "Pacing", "Stopped early"] {
        assert!(!closed.lines().any(|l| l.starts_with(what)), "{what}");
    }
}

#[test]
fn time_series_stays_out_of_the_console() {
    let r = common::open_loop_report();
    assert!(!r.levels[0].time_series.is_empty(), "the fixture has one");
    let out = render(&r, false);
    for word in ["start_s", "Time series", "bucket"] {
        assert!(!out.contains(word), "{word} in:\n{out}");
    }
}

#[test]
fn verdicts_and_invalid_pacing_are_colored() {
    let out = render(&common::open_loop_report(), true);
    assert!(out.contains("\x1b[32mpass\x1b[0m"), "{out}");
    assert!(out.contains("\x1b[31mFAIL\x1b[0m"), "{out}");
    assert!(out.contains("\x1b[31mINVALID: 50 % of sends"), "{out}");
    assert!(out.contains("\x1b[33mStopped early"), "{out}");
}

#[test]
fn rate_sweep_table_shows_rate_errors_goodput_and_slos() {
    let out = render(&common::open_loop_report(), false);
    let at = out.find("Summary by level").expect("a sweep summary");
    let table: Vec<&str> = out[at..].lines().take(4).collect();
    assert_eq!(
        table[1].split_whitespace().collect::<Vec<_>>().join(" "),
        "level rate/s sent ok errors TTFT p50 TTFT p99 ITL p50 ITL p99 TPOT p50 E2E p50 \
         E2E p99 tok/s req/s good/s SLOs notes"
    );
    // rate=2: 2 sent, 2 ok, 0 errors, TTFT 100 ms, ITL p50 15 / p99 20, TPOT 15,
    // E2E p99 135 ms, 6 tokens and 2 requests over 0.635 s.
    assert_eq!(
        table[2].split_whitespace().collect::<Vec<_>>().join(" "),
        "rate=2 2 2 2 0 100.0 ms 100.0 ms 15.00 ms 20.00 ms 15.00 ms 135.0 ms 135.0 ms 9.449 \
         3.150 3.150 pass"
    );
    // rate=8: 1 ok, 1 error, one gap of 60 ms; nothing good; one SLO of two failed.
    let hot: Vec<&str> = table[3].split_whitespace().collect();
    assert_eq!(hot[..5], ["rate=8", "8", "2", "1", "1"]);
    assert_eq!(
        line_starting(block(&out, "rate=8"), "Requests"),
        "Requests        3 intended, 2 sent, 1 succeeded, 1 http_5xx, 0 aborted, 1 dropped"
    );
    assert_eq!(hot[hot.len() - 5..], ["0", "FAIL", "1/2", "a", "b"]);
    assert!(table[3].contains("60.00 ms"), "{}", table[3]);
    assert!(out.contains(", rate ") || out.contains("2 levels"), "{out}");
}

#[test]
fn concurrency_sweep_table_has_a_conc_column_and_no_slo_columns() {
    let out = render(&common::full_report(), false);
    let at = out.find("Summary by level").unwrap();
    let table: Vec<&str> = out[at..].lines().collect();
    let head: Vec<&str> = table[1].split_whitespace().collect();
    assert_eq!(head[..5], ["level", "conc", "sent", "ok", "errors"]);
    assert!(!head.contains(&"SLOs") && !head.contains(&"good/s"));
    let many: Vec<&str> = table[3].split_whitespace().collect();
    assert_eq!(many[..5], ["concurrency=64", "64", "640", "636", "3"]);
}

#[test]
fn single_rate_level_header_reads_the_rate_as_written() {
    let mut r = common::open_loop_report();
    r.levels.truncate(1);
    let out = render(&r, false);
    assert!(
        out.contains(", open_loop, rate 2 req/s, 2 requests sent, "),
        "{out}"
    );
}

#[test]
fn search_answer_and_probes_are_printed() {
    let mut report = common::open_loop_report();
    report.search = Some(cadence_core::SearchReport {
        axis: "rate".into(),
        best: Some(12.0),
        first_fail: Some(16.0),
        probes: vec![
            cadence_core::SearchProbe {
                level: 1.0,
                pass: true,
            },
            cadence_core::SearchProbe {
                level: 16.0,
                pass: false,
            },
            cadence_core::SearchProbe {
                level: 12.0,
                pass: true,
            },
        ],
    });
    let text = cadence_report::console::render(&report, false);
    assert!(
        text.contains("highest rate meeting every SLO: 12 req/s"),
        "{text}"
    );
    assert!(text.contains("1✓ 16✗ 12✓"), "{text}");
    report.search.as_mut().unwrap().best = None;
    let text = cadence_report::console::render(&report, false);
    assert!(text.contains("none: even the lowest probe"), "{text}");
}

#[test]
fn token_sources_line_shows_how_far_the_other_sources_disagree() {
    let out = render(&common::full_report(), false);
    let line = line_starting(&out, "Token sources");
    assert!(
        line.contains("vs the count used: chunks -1.7% (max 9 on one request, 120 of 636 differ)"),
        "{line}"
    );
}

#[test]
fn turn_lines_show_ttft_and_itl_per_turn() {
    let out = render(&common::full_report(), false);
    let line = line_starting(&out, "Turn 1");
    assert!(
        line.contains("318 requests, TTFT p50 140.0 ms p99 300.0 ms, ITL p50 – p99 –"),
        "{line}"
    );
}

#[test]
fn the_clock_line_says_which_clock_and_the_client_read_delay() {
    let mut report = common::full_report();
    report.levels[1].summary.clock = Some(cadence_core::ClockCheck {
        kernel_requests: 998,
        user_requests: 2,
        multi_event_reads: 7,
        read_delay: common::dist(99_800, [0.4, 0.1, 0.8, 1.2, 9.4, 20.0, 31.0]),
    });
    report.levels[0].summary.clock = Some(cadence_core::ClockCheck {
        kernel_requests: 0,
        user_requests: 1,
        multi_event_reads: 0,
        read_delay: None,
    });
    let out = render(&report, false);
    let many = &out[out.find("── concurrency=64 ──").unwrap()..];
    assert_eq!(
        line_starting(many, "Clock"),
        "Clock           kernel receive time (998 of 1000 requests); client read delay p50 100.0 µs, p99 9.400 ms, max 31.00 ms; 7 multi-event reads"
    );
    let one =
        &out[out.find("── concurrency=1 ──").unwrap()..out.find("── concurrency=64 ──").unwrap()];
    assert_eq!(
        line_starting(one, "Clock"),
        "Clock           user clock (1 request)"
    );
    // Without a clock check (older records) there is no line.
    assert!(!render(&common::full_report(), false).contains("\nClock "));
}

#[test]
fn the_prompt_cache_line_gives_the_share_and_its_counts() {
    let mut report = common::full_report();
    report.levels[1].summary.prompt_cache = Some(cadence_core::PromptCache {
        requests: 4,
        prompt_tokens: 200,
        cached_tokens: 147,
    });
    let out = render(&report, false);
    let many = &out[out.find("── concurrency=64 ──").unwrap()..];
    assert_eq!(
        line_starting(many, "Prompt cache"),
        "Prompt cache    73.5 % of prompt tokens served from the server's cache (147 of 200 tokens, 4 requests reporting)"
    );
    // No request reported a cache figure: no line.
    assert!(!render(&common::full_report(), false).contains("\nPrompt cache"));
}

#[test]
fn a_sweep_by_default_is_its_table_and_each_note_once() {
    use cadence_report::console::{render_with, View};
    let mut r = common::full_report();
    r.levels[0].summary.warnings = vec![
        "the client's event loop lagged (p99 18.3 ms, max 77.3 ms)".into(),
        "the watchdog ended requests".into(),
    ];
    r.levels[1].summary.warnings = vec![
        "the client's event loop lagged (p99 7.1 ms, max 9.0 ms)".into(),
        "the watchdog ended requests".into(),
    ];
    let out = render_with(&r, false, View::Summary);
    assert!(!out.contains("── "), "no level blocks:\n{out}");
    assert!(!out.contains("Convention"), "{out}");
    assert!(out.contains("Summary by level"), "{out}");
    // The table's ITL and TPOT follow the run's --convention, and it says so.
    assert!(
        out.contains("\nITL and TPOT above: vllm's formulas (--convention vllm)\n"),
        "{out}"
    );
    let notes: Vec<&str> = out.lines().filter(|l| l.starts_with("  ")).collect();
    assert_eq!(
        notes[1..],
        [
            "  a  every level: the client's event loop lagged (p99 18.3 ms, max 77.3 ms) \
             (figures of concurrency=1; each level's with --detail)",
            "  b  every level: the watchdog ended requests",
            "  c  concurrency=64: 14 stalls (waits over 500.0 ms) in 9 requests: 0 for the first \
             token, 14 between chunks",
        ],
        "{out}"
    );
    assert!(
        line_starting(&out, "concurrency=1 ").ends_with("  a b"),
        "{out}"
    );
    assert!(
        line_starting(&out, "concurrency=64 ").ends_with("  a b c"),
        "{out}"
    );
    assert!(out.contains("--detail"), "{out}");
    assert!(out.lines().last().unwrap().starts_with("Formulas: "));
    // The same report in full: each level's block and its own figures.
    let full = render_with(&r, false, View::Detail);
    assert!(full.contains("── concurrency=1 ──") && full.contains("── concurrency=64 ──"));
    assert!(full.contains("lagged (p99 7.1 ms, max 9.0 ms)"), "{full}");
    assert_eq!(full, render(&r, false));
}

#[test]
fn a_single_level_prints_in_full_in_either_view() {
    use cadence_report::console::{render_with, View};
    let r = common::sparse_report();
    assert_eq!(
        render_with(&r, false, View::Summary),
        render_with(&r, false, View::Detail)
    );
}

//! Session figures in every format: a level of two hand-built agent sessions shows its
//! wall split, what-if and slowest session in the console, Markdown, CSV and HTML (a
//! stacked split and a waterfall drawn as SVG), and the JSON matches the schema.

mod common;

use cadence_core::{
    level_report, summarize_level, Chunk, LevelOptions, Outcome, Report, RequestRecord,
};
use cadence_report::{console, csv, html, json, markdown};

const MS: u64 = 1_000_000;

fn step(
    index: u64,
    session: u64,
    turn: u32,
    sent: u64,
    chunks: &[u64],
    tool: u64,
) -> RequestRecord {
    let mut r = RequestRecord::new(index, Outcome::Succeeded);
    r.session = Some(session);
    r.turn = Some(turn);
    r.sent_ns = Some(sent * MS);
    r.chunks = chunks.iter().map(|&c| Chunk(c * MS, Some(1))).collect();
    r.first_content_ns = r.first_chunk_ns();
    r.end_ns = chunks.last().map(|&c| c * MS);
    r.tool_calls = Some(u32::from(turn == 0));
    r.tool_wait_ns = (turn > 0).then_some(tool * MS);
    r.input_tokens = Some(100 + 300 * u64::from(turn));
    r
}

/// Session 0: step 0 sent at 0, TTFT 50, decode 30; 100 ms of tools; step 1 sent at 190,
/// TTFT 20, decode 40: wall 250 = 70 + 70 + 100 + 10. Session 1 is shorter.
fn report() -> Report {
    let recs = [
        step(0, 0, 0, 0, &[50, 60, 70, 80], 0),
        step(1, 0, 1, 190, &[210, 230, 250], 100),
        step(2, 1, 0, 5, &[25, 35], 0),
        step(3, 1, 1, 60, &[70, 80], 20),
    ];
    let mut acc = cadence_core::metrics::SummaryAcc::new(500 * MS);
    acc.set_what_if(vec!["itl=1ms".parse().unwrap()]);
    recs.iter().for_each(|r| {
        acc.push(r);
    });
    let mut summary = acc.finish(&LevelOptions::default());
    // The same figures as the plain summary, plus the what-if.
    let plain = summarize_level(&recs, &LevelOptions::default());
    assert_eq!(
        plain.sessions.as_ref().unwrap().wall,
        summary.sessions.as_ref().unwrap().wall
    );
    summary.warnings.clear();
    let mut l = level_report("concurrency=2", summary);
    l.concurrency = Some(2);
    Report::new(common::run_info(), vec![l], vec![])
}

#[test]
fn every_format_shows_the_sessions() {
    let r = report();
    let s = r.levels[0].summary.sessions.as_ref().unwrap();
    assert_eq!((s.sessions, s.complete), (2, 2));
    assert_eq!(s.wall.unwrap().max, 250.0);
    assert_eq!(s.slowest.as_ref().unwrap().session, 0);

    let text = console::render(&r, false);
    assert!(text.contains("Sessions        2 of 2 complete"), "{text}");
    assert!(text.contains("Wall split"), "{text}");
    assert!(text.contains("What if         itl=1ms"), "{text}");
    assert!(
        text.contains("Slowest         session 0, 250.0 ms"),
        "{text}"
    );
    assert!(text.contains("a 3000-token reply decodes in"), "{text}");

    let md = markdown::render(&r);
    assert!(md.contains("**Sessions**"), "{md}");
    assert!(
        md.contains("| concurrency=2 | 2/2 | 250.0 ms |") || md.contains("| concurrency=2 | 2/2 |"),
        "{md}"
    );
    assert!(md.contains("what if `itl=1ms`"), "{md}");

    let levels = csv::levels(&r);
    let head: Vec<&str> = levels.lines().next().unwrap().split(',').collect();
    let row: Vec<&str> = levels.lines().nth(1).unwrap().split(',').collect();
    let col = |name: &str| row[head.iter().position(|h| *h == name).unwrap()];
    assert_eq!(col("sessions_complete"), "2");
    assert!(!col("session_wall_p50_ms").is_empty());

    let page = html::render(&r);
    let figure = |id: &str| {
        let start = page
            .find(&format!(r#"id="{id}""#))
            .unwrap_or_else(|| panic!("no {id}"));
        page[start..start + page[start..].find("</figure>").unwrap()].to_string()
    };
    let split = figure("session-split");
    assert_eq!(
        split.matches("<rect").count(),
        4 + 4,
        "four parts and the legend's four"
    );
    let fall = figure("session-waterfall");
    assert!(fall.contains("step 1 (400 in)"), "{fall}");
    assert!(fall.contains("<title>tool: 100.0 ms</title>"), "{fall}");
    assert!(page.contains(r#"id="what-if""#));

    let doc = json::render(&r);
    let v: serde_json::Value = serde_json::from_str(&doc).unwrap();
    assert_eq!(v["levels"][0]["sessions"]["what_if"][0]["label"], "itl=1ms");
}

#[test]
fn requests_csv_names_each_step_only_when_there_are_sessions() {
    let recs = [
        step(0, 4, 0, 0, &[10, 20], 0),
        step(1, 4, 1, 40, &[50, 60], 15),
    ];
    let out = csv::requests(&recs, &[]);
    let head = out.lines().next().unwrap();
    assert!(head.ends_with(",session,step,tool_calls,tool_wait_ms,tool_call_mocked"));
    assert!(
        out.lines().nth(2).unwrap().ends_with(",4,1,0,15,false"),
        "{out}"
    );
    let plain = csv::requests(&[RequestRecord::new(0, Outcome::Succeeded)], &[]);
    assert!(!plain.lines().next().unwrap().contains("session"));
}

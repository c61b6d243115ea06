//! `twin check`'s choice of a rerun on the engine model's records: a second run of a
//! level name is its rerun only when it is the same workload.

use std::sync::Arc;

use cadence_core::{level_report, summarize_level, LevelOptions, RequestRecord, RunInfo};

use super::check::{differences_at, judge, loads, Run};
use super::tests::workload;
use crate::drive::Sessions;
use crate::{plan_level, preset, Arrivals, Workload};

/// The engine model's records of `arrivals` and `w`, all of level 0.
fn records(arrivals: Arrivals, w: &Workload) -> Vec<RequestRecord> {
    let spec = preset("llama-3.1-8b@h100-fp8").expect("preset");
    plan_level(&spec, arrivals, w, 0, 0, 0).records
}

/// A one-level run named `name` of `records`, made by `command`, its level `level`
/// at `rate` requests a second.
fn run(name: &str, command: &str, level: &str, records: Vec<RequestRecord>) -> Run {
    let mut l = level_report(level, summarize_level(&records, &LevelOptions::default()));
    l.rate = level
        .strip_prefix("rate=")
        .and_then(|r| r.trim_end_matches("/s").parse().ok());
    let mut info = RunInfo::new(
        "http://h:8000/v1/chat/completions",
        "openai-chat",
        "m",
        "open_loop_poisson",
        0,
    );
    info.command = command.split_whitespace().map(String::from).collect();
    Run {
        name: name.into(),
        report: cadence_core::Report::new(info, vec![l], vec![]),
        level_ids: vec![0],
        records,
        seed: 5,
        constant: false,
    }
}

const POISSON: &str = "cadence bench http://h:8000 --rate 30 --arrivals poisson \
                       --max-tokens 16 --input-tokens 100";
const TURNS: &str = "cadence bench http://h:8000 --rate 30 --arrivals poisson \
                     --max-tokens 16 --input-tokens 100 --turns 3 --think-time 5ms";

fn poisson(name: &str, seed: u64) -> Run {
    let recs = records(Arrivals::Poisson { rate: 30.0, seed }, &workload(60, 16));
    let cmd = format!("{POISSON} --seed {seed} --records {name}");
    run(name, &cmd, "rate=30/s", recs)
}

fn sessions(name: &str) -> Run {
    let s = Sessions {
        turns: 3,
        think_ns: 5_000_000,
        agent_step_input: None,
    };
    let w = Workload {
        sessions: Some(s),
        ..workload(20, 16)
    };
    let recs = records(
        Arrivals::Poisson {
            rate: 30.0,
            seed: 5,
        },
        &w,
    );
    run(name, TURNS, "rate=30/s", recs)
}

#[test]
fn another_seed_or_a_longer_list_of_rates_is_a_rerun_and_sessions_are_not() {
    let (a, b) = (poisson("a", 5), poisson("b", 6));
    assert_eq!(differences_at(&a, &b, "rate=30/s"), Vec::<String>::new());
    // rate=30/s of a run of 30 and 60 req/s is the same load.
    let mut sweep = poisson("c", 5);
    sweep.report.run.command = format!("{POISSON} --rate 60")
        .split_whitespace()
        .map(String::from)
        .collect();
    assert_eq!(
        differences_at(&a, &sweep, "rate=30/s"),
        Vec::<String>::new()
    );
    // Sessions at the same rate: another workload, said with both sides.
    let d = differences_at(&a, &sessions("s"), "rate=30/s");
    assert!(
        d.contains(&"--turns: not given against 3".to_string()),
        "{d:?}"
    );
    assert!(
        d.contains(&"--think-time: not given against 5ms".to_string()),
        "{d:?}"
    );
    assert!(
        d.iter()
            .any(|d| d.starts_with("prompt tokens per request at rate=30/s: 100 against")),
        "each turn's prompt holds its history: {d:?}"
    );
    // Another model is another target.
    let mut other = poisson("o", 5);
    other.report.run.model = "other".into();
    assert_eq!(
        differences_at(&a, &other, "rate=30/s"),
        vec!["model: m against other"]
    );
}

#[test]
fn a_second_run_of_the_name_is_a_rerun_only_of_the_same_workload() {
    let sweep: Vec<Vec<RequestRecord>> = [1, 2, 4]
        .iter()
        .map(|&c| records(Arrivals::Closed { concurrency: c }, &workload(60, 16)))
        .collect();
    let twin = Arc::new(crate::twin::fit(&sweep, "sweep").expect("fits"));
    // Sessions at the same rate sit between a Poisson run and its rerun.
    let runs = [
        poisson("a.jsonl", 5),
        sessions("s.jsonl"),
        poisson("b.jsonl", 6),
    ];
    let mut held = Vec::new();
    for (i, r) in runs.iter().enumerate() {
        let l = loads(r, &mut Vec::new()).expect("loads");
        held.extend(l.into_iter().map(|(level, m)| (i, level, m)));
    }
    let measured: Vec<[f64; 9]> = held.iter().map(|h| h.2).collect();
    let (judged, notes) = judge(twin, None, &runs, held, 1);
    let names: Vec<&str> = judged.iter().map(|j| j.name.as_str()).collect();
    assert_eq!(names, ["rate=30/s", "rate=30/s (s.jsonl)"]);
    assert_eq!(judged[0].measured, measured[0]);
    assert_eq!(
        judged[0].rerun,
        Some(measured[2]),
        "b.jsonl's, not the sessions'"
    );
    assert_eq!((judged[1].measured, judged[1].rerun), (measured[1], None));
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].starts_with(
            "s.jsonl's rate=30/s is not a rerun of a.jsonl's, so it is judged as a load of its own: "
        ) && notes[0].contains("--turns: not given against 3"),
        "{notes:?}"
    );
}

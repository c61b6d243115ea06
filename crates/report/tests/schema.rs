//! The rendered JSON report against the checked-in JSON Schema: real output must pass,
//! documents that break the contract must not, and the schema's name lists must match
//! the code's.

mod common;

use cadence_core::{Outcome, Report, SloMetric, SloStat, TokenSource};
use cadence_report::json;
use serde_json::Value;

const SCHEMA: &str = include_str!("../../../schema/report.schema.json");

fn validator() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(SCHEMA).expect("schema is JSON");
    jsonschema::draft202012::meta::validate(&schema).expect("schema is valid draft 2020-12");
    jsonschema::draft202012::new(&schema).expect("schema compiles")
}

fn rendered(report: &Report) -> Value {
    serde_json::from_str(&json::render(report)).expect("rendered report is JSON")
}

#[track_caller]
fn assert_valid(doc: &Value) {
    let v = validator();
    let errors: Vec<String> = v
        .iter_errors(doc)
        .map(|e| format!("{} at {}", e, e.instance_path))
        .collect();
    assert!(
        errors.is_empty(),
        "schema violations:\n{}",
        errors.join("\n")
    );
}

#[track_caller]
fn assert_invalid(doc: &Value, why: &str) {
    assert!(!validator().is_valid(doc), "accepted a document with {why}");
}

#[test]
fn embedded_schema_is_the_checked_in_file() {
    assert_eq!(json::SCHEMA, SCHEMA);
}

#[test]
fn full_report_validates() {
    let doc = rendered(&common::full_report());
    assert_valid(&doc);
    // Spot-check the documented shape.
    let level = &doc["levels"][1];
    assert_eq!(level["ttft"]["p50_ms"], 98.7);
    assert_eq!(level["requests"]["failed"]["stream_error"], 2);
    assert_eq!(level["output_tokens"]["source"], "tokenizer");
    assert_eq!(doc["levels"][0]["itl_per_token"]["count"], 3);
}

#[test]
fn report_with_absent_distributions_validates() {
    let doc = rendered(&common::sparse_report());
    assert_valid(&doc);
    let level = &doc["levels"][0];
    for k in [
        "ttft",
        "ttft_content",
        "ttft_response",
        "itl",
        "itl_per_token",
        "tpot",
        "e2e",
        "output_speed_tok_s",
        "tokens_per_chunk",
    ] {
        assert!(level[k].is_null(), "{k} should be null, got {}", level[k]);
    }
    assert!(level["output_tokens"]["source"].is_null());
}

#[test]
fn rendered_json_round_trips() {
    let r = common::full_report();
    assert_eq!(json::parse(&json::render(&r)).unwrap(), r);
    assert!(json::render(&r).ends_with("}\n"));
}

#[test]
fn distribution_missing_p99_is_rejected() {
    let mut doc = rendered(&common::full_report());
    doc["levels"][1]["itl"]
        .as_object_mut()
        .unwrap()
        .remove("p99_ms");
    assert_invalid(&doc, "an ITL distribution missing p99_ms");
}

#[test]
fn contract_breaks_are_rejected() {
    let base = rendered(&common::full_report());
    type Break = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Break)> = vec![
        (
            "zeros for an absent distribution",
            Box::new(|d| d["levels"][0]["tpot"] = Value::from(0)),
        ),
        (
            "an unknown failure class",
            Box::new(|d| d["levels"][1]["requests"]["failed"]["oops"] = 1.into()),
        ),
        (
            "success counted as a failure",
            Box::new(|d| d["levels"][1]["requests"]["failed"]["succeeded"] = 1.into()),
        ),
        (
            "a missing requests.dropped",
            Box::new(|d| {
                d["levels"][1]["requests"]
                    .as_object_mut()
                    .unwrap()
                    .remove("dropped");
            }),
        ),
        (
            "a distribution key without its unit",
            Box::new(|d| d["levels"][1]["e2e"]["p50"] = 1.0.into()),
        ),
        (
            "an unknown token source",
            Box::new(|d| d["levels"][1]["output_tokens"]["source"] = "guess".into()),
        ),
        (
            "another schema version",
            Box::new(|d| d["schema_version"] = 2.into()),
        ),
        (
            "an empty distribution object",
            Box::new(|d| d["levels"][1]["ttft"]["count"] = 0.into()),
        ),
        (
            "a missing ttft key",
            Box::new(|d| {
                d["levels"][0].as_object_mut().unwrap().remove("ttft");
            }),
        ),
    ];
    for (why, break_it) in cases {
        let mut doc = base.clone();
        break_it(&mut doc);
        assert_invalid(&doc, why);
    }
}

fn enum_at<'a>(schema: &'a Value, pointer: &str) -> Vec<&'a str> {
    schema
        .pointer(pointer)
        .unwrap_or_else(|| panic!("no {pointer} in schema"))
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

#[test]
fn schema_names_match_the_code() {
    let schema: Value = serde_json::from_str(SCHEMA).unwrap();
    let failures: Vec<&str> = Outcome::ALL
        .iter()
        .filter(|o| o.is_failure())
        .map(|o| o.name())
        .collect();
    assert_eq!(
        enum_at(
            &schema,
            "/$defs/requests/properties/failed/propertyNames/enum"
        ),
        failures
    );
    let sources: Vec<&str> = [
        TokenSource::Usage,
        TokenSource::TokenIds,
        TokenSource::Tokenizer,
        TokenSource::Chunks,
    ]
    .map(TokenSource::name)
    .to_vec();
    assert_eq!(
        enum_at(
            &schema,
            "/$defs/output_tokens/properties/by_source/propertyNames/enum"
        ),
        sources
    );
    assert_eq!(
        enum_at(&schema, "/$defs/output_tokens/properties/source/enum"),
        sources
    );
}

#[test]
fn report_with_every_new_level_field_validates() {
    let doc = rendered(&common::open_loop_report());
    assert_valid(&doc);
    for level in doc["levels"].as_array().unwrap() {
        for k in ["slos", "goodput", "time_series", "pacing"] {
            assert!(level.get(k).is_some(), "{k} missing from {}", level["name"]);
        }
    }
    let hot = &doc["levels"][1];
    assert_eq!(hot["slos"][0]["slo"], "itl.p99<=50ms");
    assert_eq!(hot["slos"][0]["pass"], false);
    assert_eq!(hot["pacing"]["invalid"], true);
    assert_eq!(hot["goodput"]["share"], 0.0);
    assert_eq!(
        hot["stopped_early"],
        "more than half of the requests failed (1 of 2)"
    );
    // 100 ms buckets from 0 to the last end at 635 ms: 7 buckets.
    assert_eq!(doc["levels"][0]["time_series"].as_array().unwrap().len(), 7);
    // And the closed-loop report leaves every one of them out.
    let closed = rendered(&common::full_report());
    for k in ["slos", "goodput", "time_series", "stopped_early", "pacing"] {
        assert!(closed["levels"][0].get(k).is_none(), "{k}");
    }
}

fn slo(d: &mut Value) -> &mut serde_json::Map<String, Value> {
    d["levels"][0]["slos"][0].as_object_mut().unwrap()
}

#[test]
fn broken_new_fields_are_rejected() {
    let base = rendered(&common::open_loop_report());
    type Break = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Break)> = vec![
        (
            "an SLO result without its verdict",
            Box::new(|d| {
                slo(d).remove("pass");
            }),
        ),
        (
            "an SLO result in an unknown unit",
            Box::new(|d| {
                slo(d).insert("unit".into(), "s".into());
            }),
        ),
        (
            "an SLO result with a textual observation",
            Box::new(|d| {
                slo(d).insert("observed".into(), "fast".into());
            }),
        ),
        (
            "an SLO on an unknown statistic",
            Box::new(|d| {
                slo(d).insert("slo".into(), "itl.p98<=50ms".into());
            }),
        ),
        (
            "an SLO result with an extra key",
            Box::new(|d| {
                slo(d).insert("margin".into(), 1.into());
            }),
        ),
        (
            "an SLO verdict as a string",
            Box::new(|d| {
                slo(d).insert("pass".into(), "yes".into());
            }),
        ),
        (
            "an empty slos list",
            Box::new(|d| d["levels"][0]["slos"] = Value::Array(vec![])),
        ),
        (
            "a goodput share over 1",
            Box::new(|d| d["levels"][0]["goodput"]["share"] = 1.5.into()),
        ),
        (
            "a time bucket without itl_p99_ms",
            Box::new(|d| {
                d["levels"][0]["time_series"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("itl_p99_ms");
            }),
        ),
        (
            "a negative bucket count",
            Box::new(|d| d["levels"][0]["time_series"][1]["completed"] = (-1).into()),
        ),
        (
            "pacing without its invalid flag",
            Box::new(|d| {
                d["levels"][1]["pacing"]
                    .as_object_mut()
                    .unwrap()
                    .remove("invalid");
            }),
        ),
        (
            "an empty stopped_early",
            Box::new(|d| d["levels"][1]["stopped_early"] = "".into()),
        ),
        (
            "an unknown level key",
            Box::new(|d| d["levels"][1]["slo_results"] = Value::Array(vec![])),
        ),
    ];
    for (why, break_it) in cases {
        let mut doc = base.clone();
        break_it(&mut doc);
        assert_invalid(&doc, why);
    }
}

#[test]
fn schema_accepts_every_slo_the_parser_can_normalize() {
    let base = rendered(&common::open_loop_report());
    let v = validator();
    for m in SloMetric::ALL {
        for s in SloStat::ALL {
            let unit = if m.is_time() { "ms" } else { "" };
            let text = format!("{}.{}>=1.5{unit}", m.name(), s.name());
            let parsed: cadence_core::Slo = text.parse().unwrap();
            assert_eq!(parsed.text, text);
            let mut doc = base.clone();
            doc["levels"][0]["slos"][0]["slo"] = text.clone().into();
            doc["levels"][0]["slos"][0]["unit"] = m.unit().into();
            assert!(v.is_valid(&doc), "schema rejects {text}");
        }
    }
    for text in ["errors.rate<=5%", "errors.http_5xx.rate<0.05"] {
        let parsed: cadence_core::Slo = text.parse().unwrap();
        assert_eq!(parsed.text, text);
        let mut doc = base.clone();
        doc["levels"][0]["slos"][0]["slo"] = text.into();
        doc["levels"][0]["slos"][0]["unit"] = parsed.metric.unit().into();
        assert!(v.is_valid(&doc), "schema rejects {text}");
    }
}

#[test]
fn the_clock_self_check_validates_and_is_absent_without_it() {
    let mut report = common::full_report();
    assert!(rendered(&report)["levels"][1].get("clock").is_none());
    report.levels[1].summary.clock = Some(cadence_core::ClockCheck {
        kernel_requests: 998,
        user_requests: 2,
        multi_event_reads: 7,
        read_delay: common::dist(99_800, [0.4, 0.1, 0.8, 1.2, 9.4, 20.0, 31.0]),
    });
    let doc = rendered(&report);
    assert_valid(&doc);
    let clock = &doc["levels"][1]["clock"];
    assert_eq!(clock["kernel_requests"], 998);
    assert_eq!(clock["read_delay"]["p99_ms"], 9.4);
    let mut bad = doc.clone();
    bad["levels"][1]["clock"]["skew"] = 1.into();
    assert_invalid(&bad, "an unknown field in the clock check");
}

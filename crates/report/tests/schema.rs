//! The rendered JSON report against the checked-in JSON Schema: real output must pass,
//! documents that break the contract must not, and the schema's name lists must match
//! the code's.

mod common;

use cadence_core::{Outcome, Report, TokenSource};
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

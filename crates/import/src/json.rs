//! Reading another tool's JSON defensively: Python's `json` module writes `NaN` and
//! `Infinity`, which are not JSON, and a hostile or cut file must give a clear error
//! naming the file and field, never a panic and never a made-up value.

use crate::ImportError;
pub use cadence_core::json::Obj;
use cadence_core::json::{Field, JsonError};
use serde_json::Value;

/// Files larger than this (256 MiB) are refused rather than read whole into memory:
/// a file's parse takes up to about 30 times its size (an 83 MB vLLM result took
/// 2.3 GB), so the ceiling bounds an import's memory near 8 GB.
pub const MAX_BYTES: u64 = 256 << 20;

/// `text` with Python's non-JSON number tokens (`NaN`, `Infinity`, `-Infinity`) outside
/// strings replaced by `null`: the value is unknown, and is read as absent.
pub fn python_tokens_to_null(text: &str) -> String {
    let b = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    let mut last = 0;
    let mut in_str = false;
    while i < b.len() {
        let c = b[i];
        if in_str {
            match c {
                b'\\' => i += 2,
                b'"' => {
                    in_str = false;
                    i += 1;
                }
                _ => i += 1,
            }
            continue;
        }
        if c == b'"' {
            in_str = true;
            i += 1;
            continue;
        }
        let token = ["-Infinity", "Infinity", "NaN"]
            .into_iter()
            .find(|t| b[i..].starts_with(t.as_bytes()));
        match token {
            Some(t) => {
                out.push_str(&text[last..i]);
                out.push_str("null");
                i += t.len();
                last = i;
            }
            None => i += 1,
        }
    }
    out.push_str(&text[last..]);
    out
}

/// Parses one JSON document, Python's number tokens read as `null`.
pub fn parse(file: &str, text: &str) -> Result<Value, ImportError> {
    let text = python_tokens_to_null(text);
    serde_json::from_str(&text).map_err(|e| {
        let what = if e.is_eof() {
            "the file ends in the middle of its JSON (cut short?)"
        } else {
            "not valid JSON"
        };
        ImportError::new(file, format!("{what}: {e}"))
    })
}

/// A list of non-negative finite numbers at `path` in `file` (`null` entries refused).
pub fn numbers(file: &str, path: &str, v: &[Value]) -> Result<Vec<f64>, ImportError> {
    v.iter()
        .enumerate()
        .map(|(i, value)| {
            let path = format!("{path}[{i}]");
            let f = Field {
                place: file,
                path: &path,
                value,
            };
            Ok(f.nonneg()?)
        })
        .collect()
}

impl From<JsonError> for ImportError {
    /// The reader's place is the file; the field and what is wrong are the message.
    fn from(e: JsonError) -> ImportError {
        ImportError::new(&e.place, e.detail())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn python_nan_and_infinity_become_null_outside_strings() {
        let t = r#"{"a": NaN, "b": [Infinity, -Infinity], "c": "NaN \" Infinity", "d": 1}"#;
        let v = parse("f", t).unwrap();
        assert!(v["a"].is_null());
        assert!(v["b"][0].is_null() && v["b"][1].is_null());
        assert_eq!(v["c"], "NaN \" Infinity");
        assert_eq!(v["d"], 1);
    }

    #[test]
    fn a_cut_file_says_so() {
        let e = parse("run.json", r#"{"ttfts": [0.1, 0.2"#).unwrap_err();
        assert!(e.to_string().contains("run.json"), "{e}");
        assert!(e.to_string().contains("cut short"), "{e}");
    }

    #[test]
    fn fields_are_checked_and_named() {
        let v = parse("f", r#"{"x": -1, "y": "s", "z": 2.5, "n": null}"#).unwrap();
        let o = Obj::at("f", "top", &v).unwrap();
        let e = ImportError::from(o.nonneg("x").unwrap_err());
        assert_eq!(
            e.to_string(),
            "f: field `top.x`: expected a number >= 0, got -1"
        );
        assert!(o.num("y").is_err());
        assert!(o.count("z").is_err());
        assert_eq!(o.num("n").unwrap(), None);
        assert_eq!(o.num("missing").unwrap(), None);
        assert_eq!(
            numbers("f", "l", &[1.into(), Value::Null])
                .unwrap_err()
                .to_string(),
            "f: field `l[1]`: expected a number, got null"
        );
    }
}

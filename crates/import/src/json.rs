//! Reading another tool's JSON defensively: Python's `json` module writes `NaN` and
//! `Infinity`, which are not JSON, and a hostile or cut file must give a clear error
//! naming the file and field, never a panic and never a made-up value.

use crate::ImportError;
use serde_json::{Map, Value};

/// Files larger than this are refused rather than read whole into memory.
pub const MAX_BYTES: u64 = 1 << 30;

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

/// A field of an object, for error messages.
pub struct Obj<'a> {
    pub file: &'a str,
    /// Where the object is, e.g. `line 3` or `benchmarks[0].requests.successful[2]`.
    pub at: String,
    pub map: &'a Map<String, Value>,
}

impl<'a> Obj<'a> {
    pub fn new(file: &'a str, at: impl Into<String>, v: &'a Value) -> Result<Obj<'a>, ImportError> {
        let at = at.into();
        match v.as_object() {
            Some(map) => Ok(Obj { file, at, map }),
            None => Err(ImportError::new(
                file,
                format!("{at}: expected a JSON object"),
            )),
        }
    }

    fn err(&self, key: &str, what: &str) -> ImportError {
        let at = if self.at.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.at)
        };
        ImportError::new(self.file, format!("{at}: {what}"))
    }

    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// An optional number: absent or `null` is `None`; anything else must be a finite
    /// number.
    pub fn num(&self, key: &str) -> Result<Option<f64>, ImportError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_f64()
                .filter(|x| x.is_finite())
                .map(Some)
                .ok_or_else(|| self.err(key, "expected a number")),
        }
    }

    /// An optional number that must not be negative (a time or a count).
    pub fn nonneg(&self, key: &str) -> Result<Option<f64>, ImportError> {
        match self.num(key)? {
            Some(x) if x < 0.0 => Err(self.err(key, &format!("negative value {x}"))),
            x => Ok(x),
        }
    }

    /// An optional whole count.
    pub fn count(&self, key: &str) -> Result<Option<u64>, ImportError> {
        match self.nonneg(key)? {
            Some(x) if x.fract() != 0.0 || x > 1e15 => {
                Err(self.err(key, &format!("expected a whole count, got {x}")))
            }
            x => Ok(x.map(|x| x as u64)),
        }
    }

    /// An optional whole number read exactly (epoch nanoseconds do not fit an f64).
    pub fn u64(&self, key: &str) -> Result<Option<u64>, ImportError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => match v.as_u64() {
                Some(x) => Ok(Some(x)),
                None => self.count(key),
            },
        }
    }

    pub fn str(&self, key: &str) -> Option<&'a str> {
        self.get(key).and_then(Value::as_str)
    }

    pub fn obj(&self, key: &str) -> Result<Option<Obj<'a>>, ImportError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => Obj::new(self.file, self.path(key), v).map(Some),
        }
    }

    pub fn arr(&self, key: &str) -> Result<Option<&'a Vec<Value>>, ImportError> {
        match self.get(key) {
            None => Ok(None),
            Some(v) => v
                .as_array()
                .map(Some)
                .ok_or_else(|| self.err(key, "expected a list")),
        }
    }

    pub fn path(&self, key: &str) -> String {
        if self.at.is_empty() {
            key.to_string()
        } else {
            format!("{}.{key}", self.at)
        }
    }
}

/// A list of non-negative finite numbers (`null` entries refused).
pub fn numbers(file: &str, at: &str, v: &[Value]) -> Result<Vec<f64>, ImportError> {
    v.iter()
        .enumerate()
        .map(|(i, x)| {
            x.as_f64()
                .filter(|x| x.is_finite() && *x >= 0.0)
                .ok_or_else(|| {
                    ImportError::new(file, format!("{at}[{i}]: expected a number >= 0, got {x}"))
                })
        })
        .collect()
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
        let o = Obj::new("f", "top", &v).unwrap();
        assert!(o.nonneg("x").unwrap_err().to_string().contains("top.x"));
        assert!(o.num("y").is_err());
        assert!(o.count("z").is_err());
        assert_eq!(o.num("n").unwrap(), None);
        assert_eq!(o.num("missing").unwrap(), None);
        assert!(numbers("f", "l", &[1.into(), Value::Null]).is_err());
    }
}

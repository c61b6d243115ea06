//! One reader of JSON fields for every file Cadence reads from elsewhere (other
//! tools' runs, request traces, agent traces): typed getters whose errors say where
//! the field is and what was found, so a hostile or mistyped file gives
//! `line 3: field `output_length`: expected a whole number >= 1, got a string`, never a
//! panic and never a made-up value. `null` reads as absent everywhere.

use serde_json::{Map, Value};
use std::ops::RangeInclusive;

/// A field that cannot be read: where it is and what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonError {
    /// The document or part of it the path starts in (a file, `line 3`); may be empty.
    pub place: String,
    /// The field's path inside it (`calls[1].input_tokens`); empty for the place
    /// itself.
    pub path: String,
    /// What is wrong, in plain words (`expected a number, got a string`).
    pub what: String,
}

impl JsonError {
    /// An error at `place` about the field at `path`.
    pub fn new(
        place: impl Into<String>,
        path: impl Into<String>,
        what: impl Into<String>,
    ) -> JsonError {
        JsonError {
            place: place.into(),
            path: path.into(),
            what: what.into(),
        }
    }

    /// The error without its place: the field and what is wrong (for callers that
    /// keep the place apart, a file name or a line number).
    pub fn detail(&self) -> String {
        if self.path.is_empty() {
            self.what.clone()
        } else {
            format!("field `{}`: {}", self.path, self.what)
        }
    }
}

impl std::fmt::Display for JsonError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if !self.place.is_empty() {
            write!(f, "{}: ", self.place)?;
        }
        f.write_str(&self.detail())
    }
}

impl std::error::Error for JsonError {}

/// What a value is, in words for an error (`a string`, `an array`).
pub fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// `a` and `b` joined as a path: `calls` and `[1]` make `calls[1]`, `x` and `y` make
/// `x.y`.
fn join(a: &str, b: &str) -> String {
    if a.is_empty() || b.starts_with('[') {
        format!("{a}{b}")
    } else {
        format!("{a}.{b}")
    }
}

/// A value and where it is: read it with one of the typed getters.
#[derive(Debug, Clone, Copy)]
pub struct Field<'p, 'a> {
    /// The document or part of it the path starts in.
    pub place: &'p str,
    /// The value's path inside the place.
    pub path: &'p str,
    /// The value itself (never `null` when it came from [`Obj::field`]).
    pub value: &'a Value,
}

impl<'p, 'a> Field<'p, 'a> {
    /// A value at the top of `place` (a document, a line).
    pub fn top(place: &'p str, value: &'a Value) -> Field<'p, 'a> {
        Field {
            place,
            path: "",
            value,
        }
    }

    /// An error about this value saying `what`.
    pub fn error(&self, what: impl Into<String>) -> JsonError {
        JsonError::new(self.place, self.path, what)
    }

    fn expected(&self, what: &str) -> JsonError {
        self.error(format!("expected {what}, got {}", kind(self.value)))
    }

    /// A string.
    pub fn str(&self) -> Result<&'a str, JsonError> {
        self.value.as_str().ok_or_else(|| self.expected("a string"))
    }

    /// A finite number.
    pub fn num(&self) -> Result<f64, JsonError> {
        self.value
            .as_f64()
            .filter(|x| x.is_finite())
            .ok_or_else(|| self.expected("a number"))
    }

    /// A finite number that is not negative (a time or an amount).
    pub fn nonneg(&self) -> Result<f64, JsonError> {
        match self.num()? {
            x if x < 0.0 => Err(self.error(format!("expected a number >= 0, got {x}"))),
            x => Ok(x),
        }
    }

    /// A whole number in `range`, read exactly when the JSON wrote an integer (epoch
    /// nanoseconds do not fit an f64); `52.0` counts as whole.
    pub fn int(&self, range: RangeInclusive<u64>) -> Result<u64, JsonError> {
        let (min, max) = (*range.start(), *range.end());
        let v = self.value;
        if !v.is_number() {
            return Err(self.expected(&format!("a whole number >= {min}")));
        }
        let n = v.as_u64().or_else(|| {
            v.as_f64()
                .filter(|f| f.fract() == 0.0 && *f >= 0.0 && *f < u64::MAX as f64)
                .map(|f| f as u64)
        });
        match n {
            Some(n) if n < min => Err(self.error(format!("expected at least {min}, got {n}"))),
            Some(n) if n > max => Err(self.error(format!("{n} is too large (at most {max})"))),
            Some(n) => Ok(n),
            None => Err(self.error(format!("expected a whole number >= {min}, got {v}"))),
        }
    }

    /// An object, its fields read with this value's path in front.
    pub fn obj(&self) -> Result<Obj<'a>, JsonError> {
        Obj::at(self.place, self.path, self.value)
    }

    /// An array.
    pub fn arr(&self) -> Result<&'a [Value], JsonError> {
        self.value
            .as_array()
            .map(Vec::as_slice)
            .ok_or_else(|| self.expected("an array"))
    }

    /// Each element of an array read by `read`, its path `path[i]`.
    pub fn each<T>(
        &self,
        read: impl Fn(Field<'_, 'a>) -> Result<T, JsonError>,
    ) -> Result<Vec<T>, JsonError> {
        self.arr()?
            .iter()
            .enumerate()
            .map(|(i, value)| {
                let path = format!("{}[{i}]", self.path);
                read(Field {
                    place: self.place,
                    path: &path,
                    value,
                })
            })
            .collect()
    }
}

/// An object and where it is, read field by field.
#[derive(Debug, Clone)]
pub struct Obj<'a> {
    /// The document or part of it the path starts in (a file, `line 3`).
    pub place: String,
    /// The object's path inside the place (`benchmarks[0].requests`).
    pub path: String,
    /// The object's fields.
    pub map: &'a Map<String, Value>,
}

impl<'a> Obj<'a> {
    /// The object `v` at the top of `place` (a document, a line).
    pub fn new(place: impl Into<String>, v: &'a Value) -> Result<Obj<'a>, JsonError> {
        Obj::at(place, "", v)
    }

    /// The object `v` at `path` inside `place`.
    pub fn at(
        place: impl Into<String>,
        path: impl Into<String>,
        v: &'a Value,
    ) -> Result<Obj<'a>, JsonError> {
        let (place, path) = (place.into(), path.into());
        match v.as_object() {
            Some(map) => Ok(Obj { place, path, map }),
            None => Err(JsonError::new(
                place,
                path,
                format!("expected an object, got {}", kind(v)),
            )),
        }
    }

    /// The path of `key` in this object, for errors.
    pub fn path(&self, key: &str) -> String {
        join(&self.path, key)
    }

    /// An error about `key` saying `what`.
    pub fn error(&self, key: &str, what: impl Into<String>) -> JsonError {
        JsonError::new(&self.place, self.path(key), what)
    }

    /// An error about the object itself saying `what`.
    pub fn error_here(&self, what: impl Into<String>) -> JsonError {
        JsonError::new(&self.place, &self.path, what)
    }

    /// The value under `key`; `null` is absent.
    pub fn get(&self, key: &str) -> Option<&'a Value> {
        self.map.get(key).filter(|v| !v.is_null())
    }

    /// Whether `key` holds a value (not absent, not `null`).
    pub fn has(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    /// Reads `key` with `read` when it is there: `Ok(None)` when absent or `null`.
    pub fn opt<T>(
        &self,
        key: &str,
        read: impl FnOnce(Field<'_, 'a>) -> Result<T, JsonError>,
    ) -> Result<Option<T>, JsonError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        let path = self.path(key);
        read(Field {
            place: &self.place,
            path: &path,
            value,
        })
        .map(Some)
    }

    /// Reads `key` with `read`; absent or `null` is an error (`missing`).
    pub fn req<T>(
        &self,
        key: &str,
        read: impl FnOnce(Field<'_, 'a>) -> Result<T, JsonError>,
    ) -> Result<T, JsonError> {
        self.opt(key, read)?
            .ok_or_else(|| self.error(key, "missing"))
    }

    /// An optional string.
    pub fn str(&self, key: &str) -> Result<Option<&'a str>, JsonError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        value
            .as_str()
            .map(Some)
            .ok_or_else(|| self.error(key, format!("expected a string, got {}", kind(value))))
    }

    /// An optional finite number.
    pub fn num(&self, key: &str) -> Result<Option<f64>, JsonError> {
        self.opt(key, |f| f.num())
    }

    /// An optional number that must not be negative (a time or an amount).
    pub fn nonneg(&self, key: &str) -> Result<Option<f64>, JsonError> {
        self.opt(key, |f| f.nonneg())
    }

    /// An optional whole count (any whole number from 0).
    pub fn count(&self, key: &str) -> Result<Option<u64>, JsonError> {
        self.opt(key, |f| f.int(0..=u64::MAX))
    }

    /// An optional whole number in `range`.
    pub fn int(&self, key: &str, range: RangeInclusive<u64>) -> Result<Option<u64>, JsonError> {
        self.opt(key, |f| f.int(range))
    }

    /// An optional object.
    pub fn obj(&self, key: &str) -> Result<Option<Obj<'a>>, JsonError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        Obj::at(self.place.clone(), self.path(key), value).map(Some)
    }

    /// An optional array.
    pub fn arr(&self, key: &str) -> Result<Option<&'a [Value]>, JsonError> {
        let Some(value) = self.get(key) else {
            return Ok(None);
        };
        value
            .as_array()
            .map(|a| Some(a.as_slice()))
            .ok_or_else(|| self.error(key, format!("expected an array, got {}", kind(value))))
    }

    /// The first field not in `known`, as an error listing the known ones.
    pub fn only(&self, known: &[&str]) -> Result<(), JsonError> {
        match self.map.keys().find(|k| !known.contains(&k.as_str())) {
            Some(k) => Err(self.error(k, format!("unknown (expected {})", known.join(", ")))),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn err<T: std::fmt::Debug>(r: Result<T, JsonError>) -> String {
        r.unwrap_err().to_string()
    }

    #[test]
    fn errors_say_where_the_field_is_and_what_was_found() {
        let v = json!({"a": "x", "b": -1, "c": 2.5, "d": {"e": [1, "two"]}, "n": null});
        let o = Obj::new("line 3", &v).unwrap();
        assert_eq!(
            err(o.num("a")),
            "line 3: field `a`: expected a number, got a string"
        );
        assert_eq!(
            err(o.nonneg("b")),
            "line 3: field `b`: expected a number >= 0, got -1"
        );
        assert_eq!(
            err(o.count("c")),
            "line 3: field `c`: expected a whole number >= 0, got 2.5"
        );
        assert_eq!(
            err(o.int("b", 1..=9)),
            "line 3: field `b`: expected a whole number >= 1, got -1"
        );
        assert_eq!(
            err(o.str("b")),
            "line 3: field `b`: expected a string, got a number"
        );
        assert_eq!(
            err(o.obj("a")),
            "line 3: field `a`: expected an object, got a string"
        );
        assert_eq!(
            err(o.arr("d")),
            "line 3: field `d`: expected an array, got an object"
        );
        let d = o.obj("d").unwrap().unwrap();
        let each = d.req("e", |f| f.each(|x| x.int(0..=9)));
        assert_eq!(
            err(each),
            "line 3: field `d.e[1]`: expected a whole number >= 0, got a string"
        );
        assert_eq!(err(o.req("z", |f| f.num())), "line 3: field `z`: missing");
        assert_eq!(err(o.req("n", |f| f.num())), "line 3: field `n`: missing");
        assert_eq!(
            err(Obj::new("", &json!([1]))),
            "expected an object, got an array"
        );
        assert_eq!(
            err(Obj::at("f.json", "[2]", &json!(3))),
            "f.json: field `[2]`: expected an object, got a number"
        );
        assert_eq!(
            err(o.only(&["a", "b"])),
            "line 3: field `c`: unknown (expected a, b)"
        );
    }

    #[test]
    fn absent_and_null_are_none_and_values_read_as_given() {
        let v =
            json!({"s": "x", "f": 1.5, "i": 52.0, "big": 1_700_000_000_000_000_001u64, "n": null});
        let o = Obj::new("", &v).unwrap();
        assert_eq!(o.str("s").unwrap(), Some("x"));
        assert_eq!(o.num("f").unwrap(), Some(1.5));
        assert_eq!(o.count("i").unwrap(), Some(52));
        assert_eq!(o.count("big").unwrap(), Some(1_700_000_000_000_000_001));
        assert_eq!(o.num("n").unwrap(), None);
        assert_eq!(o.str("missing").unwrap(), None);
        assert!(!o.has("n") && o.has("s"));
        assert_eq!(
            err(o.int("i", 1..=9)),
            "field `i`: 52 is too large (at most 9)"
        );
        assert_eq!(
            err(o.int("i", 60..=90)),
            "field `i`: expected at least 60, got 52"
        );
    }
}

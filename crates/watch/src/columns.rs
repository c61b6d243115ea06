//! A probe's and its requests' columns, written once for both stores: each column's
//! name and kind (every backend names its SQL type), and the one mapping of a row to
//! its values and back. SQLite (`store`) and PostgreSQL (`shared`) build their CREATE,
//! INSERT and SELECT from these lists, so a new column is one line here (and a
//! migration step in each store).

use crate::rows::{ProbeRow, RequestRow};
use std::collections::BTreeMap;

/// How a column holds its value; each backend names the SQL type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    /// Text, never NULL.
    Text,
    /// Text or NULL.
    OptText,
    /// A 64-bit integer, never NULL.
    Int,
    /// A 64-bit integer or NULL.
    OptInt,
    /// A 32-bit integer, never NULL (a request's index in the shared store).
    SmallInt,
    /// A double or NULL (a figure a probe may lack).
    Real,
    /// A boolean, never NULL.
    Flag,
}

impl Kind {
    /// The SQLite column type.
    pub(crate) fn sqlite(self) -> &'static str {
        match self {
            Kind::Text => "TEXT NOT NULL",
            Kind::OptText => "TEXT",
            Kind::Int | Kind::SmallInt | Kind::Flag => "INTEGER NOT NULL",
            Kind::OptInt => "INTEGER",
            Kind::Real => "REAL",
        }
    }

    /// The PostgreSQL column type.
    pub(crate) fn postgres(self) -> &'static str {
        match self {
            Kind::Text => "TEXT NOT NULL",
            Kind::OptText => "TEXT",
            Kind::Int => "BIGINT NOT NULL",
            Kind::OptInt => "BIGINT",
            Kind::SmallInt => "INTEGER NOT NULL",
            Kind::Real => "DOUBLE PRECISION",
            Kind::Flag => "BOOLEAN NOT NULL",
        }
    }
}

/// One column of a row type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Column {
    /// Its name in both stores.
    pub name: &'static str,
    /// What it holds.
    pub kind: Kind,
}

/// A value as a statement binds it (each backend converts it to its own).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Value {
    /// Text.
    Text(String),
    /// Text or NULL.
    OptText(Option<String>),
    /// An integer.
    Int(i64),
    /// An integer or NULL.
    OptInt(Option<i64>),
    /// A double or NULL.
    Real(Option<f64>),
    /// A boolean.
    Flag(bool),
}

/// A result row read one column after the other, in a list's order.
pub(crate) trait Cells {
    /// The backend's error.
    type Error;
    /// The next column as text.
    fn text(&mut self) -> Result<String, Self::Error>;
    /// The next column as text or NULL.
    fn opt_text(&mut self) -> Result<Option<String>, Self::Error>;
    /// The next column as an integer.
    fn int(&mut self) -> Result<i64, Self::Error>;
    /// The next column as an integer or NULL.
    fn opt_int(&mut self) -> Result<Option<i64>, Self::Error>;
    /// The next column as a double or NULL.
    fn real(&mut self) -> Result<Option<f64>, Self::Error>;
    /// The next column as a boolean.
    fn flag(&mut self) -> Result<bool, Self::Error>;
}

/// A field's type as a column: its kind, its value, and how it is read back.
pub(crate) trait Cell: Sized {
    /// The column's kind.
    const KIND: Kind;
    /// The value to bind.
    fn value(&self) -> Value;
    /// Reads the next column of `c`.
    fn read<C: Cells>(c: &mut C) -> Result<Self, C::Error>;
}

impl Cell for String {
    const KIND: Kind = Kind::Text;
    fn value(&self) -> Value {
        Value::Text(self.clone())
    }
    fn read<C: Cells>(c: &mut C) -> Result<Self, C::Error> {
        c.text()
    }
}

impl Cell for Option<String> {
    const KIND: Kind = Kind::OptText;
    fn value(&self) -> Value {
        Value::OptText(self.clone())
    }
    fn read<C: Cells>(c: &mut C) -> Result<Self, C::Error> {
        c.opt_text()
    }
}

impl Cell for i64 {
    const KIND: Kind = Kind::Int;
    fn value(&self) -> Value {
        Value::Int(*self)
    }
    fn read<C: Cells>(c: &mut C) -> Result<Self, C::Error> {
        c.int()
    }
}

/// Counts are stored as the stores' signed integers.
impl Cell for u64 {
    const KIND: Kind = Kind::Int;
    fn value(&self) -> Value {
        Value::Int(*self as i64)
    }
    fn read<C: Cells>(c: &mut C) -> Result<Self, C::Error> {
        Ok(c.int()? as u64)
    }
}

impl Cell for Option<u64> {
    const KIND: Kind = Kind::OptInt;
    fn value(&self) -> Value {
        Value::OptInt(self.map(|n| n as i64))
    }
    fn read<C: Cells>(c: &mut C) -> Result<Self, C::Error> {
        Ok(c.opt_int()?.map(|n| n as u64))
    }
}

impl Cell for Option<f64> {
    const KIND: Kind = Kind::Real;
    fn value(&self) -> Value {
        Value::Real(*self)
    }
    fn read<C: Cells>(c: &mut C) -> Result<Self, C::Error> {
        c.real()
    }
}

impl Cell for bool {
    const KIND: Kind = Kind::Flag;
    fn value(&self) -> Value {
        Value::Flag(*self)
    }
    fn read<C: Cells>(c: &mut C) -> Result<Self, C::Error> {
        c.flag()
    }
}

/// The failed requests by class, as JSON text (unreadable text reads as none).
impl Cell for BTreeMap<String, u64> {
    const KIND: Kind = Kind::Text;
    fn value(&self) -> Value {
        Value::Text(serde_json::to_string(self).unwrap_or_default())
    }
    fn read<C: Cells>(c: &mut C) -> Result<Self, C::Error> {
        Ok(serde_json::from_str(&c.text()?).unwrap_or_default())
    }
}

/// The SLO verdict's lines, as a JSON list (unreadable text reads as none).
impl Cell for Vec<String> {
    const KIND: Kind = Kind::Text;
    fn value(&self) -> Value {
        Value::Text(serde_json::to_string(self).unwrap_or_default())
    }
    fn read<C: Cells>(c: &mut C) -> Result<Self, C::Error> {
        Ok(serde_json::from_str(&c.text()?).unwrap_or_default())
    }
}

/// A row type's column list, its values in that order and its reading in that order,
/// from one list of its fields (`as KIND` where a column's kind is not its type's).
/// `key FIELD`: a store-assigned `i64` key read before the columns, never written.
macro_rules! columns {
    ($row:ident $(key $key:ident)? { $($field:ident: $ty:ty $(as $kind:ident)?),* $(,)? }) => {
        impl $row {
            /// The stored columns, in order (the store's own keys aside).
            pub(crate) const COLUMNS: &'static [Column] = &[$(Column {
                name: stringify!($field),
                kind: columns!(@kind $ty $(, $kind)?),
            }),*];

            /// The values of [`Self::COLUMNS`], in order.
            pub(crate) fn values(&self) -> Vec<Value> {
                vec![$(Cell::value(&self.$field)),*]
            }

            /// The row from its key and the values of [`Self::COLUMNS`], in order.
            pub(crate) fn read<C: Cells>($($key: i64,)? c: &mut C) -> Result<Self, C::Error> {
                Ok($row { $($key,)? $($field: <$ty as Cell>::read(c)?),* })
            }
        }
    };
    (@kind $ty:ty) => { <$ty as Cell>::KIND };
    (@kind $ty:ty, $kind:ident) => { Kind::$kind };
}

columns!(ProbeRow key id {
    target: String,
    started_ms: i64,
    ended_ms: i64,
    sent: u64,
    succeeded: u64,
    failed: u64,
    aborted: u64,
    failed_by_class: BTreeMap<String, u64>,
    ttft_p50_ms: Option<f64>,
    ttft_p99_ms: Option<f64>,
    itl_p50_ms: Option<f64>,
    itl_p99_ms: Option<f64>,
    output_tok_s: Option<f64>,
    slo_ok: bool,
    slo_detail: Vec<String>,
    clock: Option<String>,
    read_delay_p99_ms: Option<f64>,
    loop_lag_p99_ms: Option<f64>,
    merged_reads: Option<u64>,
});

columns!(RequestRow {
    idx: u64 as SmallInt,
    outcome: String,
    ttft_ms: Option<f64>,
    e2e_ms: Option<f64>,
    chunks: u64,
    output_tokens: Option<u64>,
    itl_p50_ms: Option<f64>,
    itl_max_ms: Option<f64>,
});

/// `a, b, c`: the names of `cols`, for INSERT and SELECT.
pub(crate) fn names(cols: &[Column]) -> String {
    cols.iter().map(|c| c.name).collect::<Vec<_>>().join(", ")
}

/// The definitions of `cols` in a CREATE TABLE, one a line, each with the type
/// `sql_type` names for it.
pub(crate) fn definitions(cols: &[Column], sql_type: fn(Kind) -> &'static str) -> String {
    cols.iter()
        .map(|c| format!("    {} {},\n", c.name, sql_type(c.kind)))
        .collect()
}

/// `n` placeholders from the `first`: `?2, ?3` (SQLite) or `$2, $3` (PostgreSQL).
pub(crate) fn placeholders(sigil: char, first: usize, n: usize) -> String {
    (first..first + n)
        .map(|i| format!("{sigil}{i}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads from a list of values, as a backend reads a result row.
    struct Listed(std::vec::IntoIter<Value>);

    impl Cells for Listed {
        type Error = String;
        fn text(&mut self) -> Result<String, String> {
            match self.0.next() {
                Some(Value::Text(s)) => Ok(s),
                v => Err(format!("{v:?}")),
            }
        }
        fn opt_text(&mut self) -> Result<Option<String>, String> {
            match self.0.next() {
                Some(Value::OptText(s)) => Ok(s),
                v => Err(format!("{v:?}")),
            }
        }
        fn int(&mut self) -> Result<i64, String> {
            match self.0.next() {
                Some(Value::Int(n)) => Ok(n),
                v => Err(format!("{v:?}")),
            }
        }
        fn opt_int(&mut self) -> Result<Option<i64>, String> {
            match self.0.next() {
                Some(Value::OptInt(n)) => Ok(n),
                v => Err(format!("{v:?}")),
            }
        }
        fn real(&mut self) -> Result<Option<f64>, String> {
            match self.0.next() {
                Some(Value::Real(x)) => Ok(x),
                v => Err(format!("{v:?}")),
            }
        }
        fn flag(&mut self) -> Result<bool, String> {
            match self.0.next() {
                Some(Value::Flag(b)) => Ok(b),
                v => Err(format!("{v:?}")),
            }
        }
    }

    #[test]
    fn a_row_reads_back_from_its_values_and_each_value_has_its_columns_kind() {
        let p = crate::rows::tests::probe("a", 1_000, false);
        let values = p.values();
        assert_eq!(values.len(), ProbeRow::COLUMNS.len());
        for (v, c) in values.iter().zip(ProbeRow::COLUMNS) {
            let kind = match v {
                Value::Text(_) => Kind::Text,
                Value::OptText(_) => Kind::OptText,
                Value::Int(_) => Kind::Int,
                Value::OptInt(_) => Kind::OptInt,
                Value::Real(_) => Kind::Real,
                Value::Flag(_) => Kind::Flag,
            };
            assert_eq!(kind, c.kind, "{}", c.name);
        }
        assert_eq!(values[7], Value::Text(r#"{"http_5xx":1}"#.into()));
        let back = ProbeRow::read(9, &mut Listed(values.into_iter())).unwrap();
        assert_eq!(back, ProbeRow { id: 9, ..p });
    }

    #[test]
    fn the_request_index_is_a_small_integer_and_the_rest_follows_its_type() {
        let kinds: Vec<(&str, Kind)> = RequestRow::COLUMNS
            .iter()
            .map(|c| (c.name, c.kind))
            .collect();
        assert_eq!(kinds[0], ("idx", Kind::SmallInt));
        assert_eq!(kinds[4], ("chunks", Kind::Int));
        assert_eq!(kinds[5], ("output_tokens", Kind::OptInt));
    }

    #[test]
    fn the_sql_pieces_name_every_column_in_order() {
        let cols = &RequestRow::COLUMNS[..2];
        assert_eq!(names(cols), "idx, outcome");
        assert_eq!(
            definitions(cols, Kind::postgres),
            "    idx INTEGER NOT NULL,\n    outcome TEXT NOT NULL,\n"
        );
        assert_eq!(
            definitions(cols, Kind::sqlite),
            "    idx INTEGER NOT NULL,\n    outcome TEXT NOT NULL,\n"
        );
        assert_eq!(placeholders('?', 2, 3), "?2, ?3, ?4");
        assert_eq!(placeholders('$', 1, 1), "$1");
    }
}

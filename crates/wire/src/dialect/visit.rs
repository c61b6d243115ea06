//! Visitor methods every loosely typed field shares (both the OpenAI reading and the
//! other dialects' typed structs): a scalar, a string or a container it does not want
//! becomes the field's empty value instead of an error.

/// Generates the visitor methods that turn scalars (null, booleans, numbers) into `$none`.
macro_rules! skip_scalars {
    ($none:expr) => {
        fn visit_unit<E>(self) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_none<E>(self) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_bool<E>(self, _: bool) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_i64<E>(self, _: i64) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_u64<E>(self, _: u64) -> Result<Self::Value, E> {
            Ok($none)
        }
        fn visit_f64<E>(self, _: f64) -> Result<Self::Value, E> {
            Ok($none)
        }
    };
}

/// Generates the visitor methods that drain an array or an object into `$none`.
macro_rules! skip_containers {
    ($none:expr) => {
        fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            while seq.next_element::<IgnoredAny>()?.is_some() {}
            Ok($none)
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Self::Value, A::Error> {
            while map.next_entry::<IgnoredAny, IgnoredAny>()?.is_some() {}
            Ok($none)
        }
    };
}

/// Generates the visitor method that turns a string into `$none`.
macro_rules! skip_strings {
    ($none:expr) => {
        fn visit_str<E>(self, _: &str) -> Result<Self::Value, E> {
            Ok($none)
        }
    };
}

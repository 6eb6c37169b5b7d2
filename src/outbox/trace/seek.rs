//! A walk through JSON text along a path of object keys, without building the
//! JSON: at the end of the path it reads a string or a carrier object
//! (`traceparent`, `tracestate`); everything else is skipped.

use std::fmt;

use serde::de::{DeserializeSeed, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::{TRACEPARENT, TRACESTATE};

/// What a JSON path leads to.
pub(super) enum Value {
    Nothing,
    Text(String),
    Carrier(Option<String>, Option<String>),
    Other(&'static str),
}

/// Follows `keys` through JSON without building it; at the end of the path reads a
/// string or a carrier object.
pub(super) struct Seek<'k> {
    pub(super) keys: &'k [String],
}

impl<'de> DeserializeSeed<'de> for Seek<'_> {
    type Value = Value;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl Seek<'_> {
    fn scalar(&self, what: &'static str) -> Value {
        if self.keys.is_empty() {
            Value::Other(what)
        } else {
            Value::Nothing
        }
    }
}

impl<'de> Visitor<'de> for Seek<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(match self.keys {
            [] => Value::Text(v.to_owned()),
            _ => Value::Nothing,
        })
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Nothing)
    }

    fn visit_bool<E>(self, _: bool) -> Result<Value, E> {
        Ok(self.scalar("boolean"))
    }

    fn visit_i64<E>(self, _: i64) -> Result<Value, E> {
        Ok(self.scalar("number"))
    }

    fn visit_u64<E>(self, _: u64) -> Result<Value, E> {
        Ok(self.scalar("number"))
    }

    fn visit_f64<E>(self, _: f64) -> Result<Value, E> {
        Ok(self.scalar("number"))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(self.scalar("array"))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let Some((first, rest)) = self.keys.split_first() else {
            return carrier(map);
        };
        let mut found = Value::Nothing;
        while let Some(hit) = map.next_key_seed(KeyOf(&[first.as_str()]))? {
            match hit {
                Some(_) => found = map.next_value_seed(Seek { keys: rest })?,
                None => {
                    map.next_value::<IgnoredAny>()?;
                }
            }
        }
        Ok(found)
    }
}

/// An object at the end of the path: its `traceparent` and `tracestate` strings.
fn carrier<'de, A: MapAccess<'de>>(mut map: A) -> Result<Value, A::Error> {
    let (mut parent, mut state) = (None, None);
    while let Some(hit) = map.next_key_seed(KeyOf(&[TRACEPARENT, TRACESTATE]))? {
        match hit {
            Some(0) => parent = map.next_value::<Option<String>>()?,
            Some(_) => state = map.next_value::<Option<String>>()?,
            None => {
                map.next_value::<IgnoredAny>()?;
            }
        }
    }
    Ok(Value::Carrier(parent, state))
}

/// Reads an object key and tells which of the wanted names it is, without allocating.
struct KeyOf<'a>(&'a [&'a str]);

impl<'de> DeserializeSeed<'de> for KeyOf<'_> {
    type Value = Option<usize>;

    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Option<usize>, D::Error> {
        d.deserialize_str(self)
    }
}

impl<'de> Visitor<'de> for KeyOf<'_> {
    type Value = Option<usize>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("an object key")
    }

    fn visit_str<E>(self, v: &str) -> Result<Option<usize>, E> {
        Ok(self.0.iter().position(|k| *k == v))
    }
}

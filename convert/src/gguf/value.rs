//! GGUF metadata values (the thirteen value types, arrays possibly nested) and the metadata map
//! with typed look-ups whose errors name the key.

use crate::error::{fail, Result};
use std::collections::BTreeMap;

/// One metadata value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    U8(u8),
    I8(i8),
    U16(u16),
    I16(i16),
    U32(u32),
    I32(i32),
    F32(f32),
    Bool(bool),
    Str(String),
    /// Elements all of one type (arrays of arrays are allowed, to a small depth).
    Array(Vec<Value>),
    U64(u64),
    I64(i64),
    F64(f64),
}

impl Value {
    /// A non-negative integer of any width.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(x) => Some(x.into()),
            Value::U16(x) => Some(x.into()),
            Value::U32(x) => Some(x.into()),
            Value::U64(x) => Some(x),
            Value::I8(x) => u64::try_from(x).ok(),
            Value::I16(x) => u64::try_from(x).ok(),
            Value::I32(x) => u64::try_from(x).ok(),
            Value::I64(x) => u64::try_from(x).ok(),
            _ => None,
        }
    }

    /// A number. An f32 is widened through its shortest decimal form, so the f32 that the
    /// converter wrote for `1e-5` reads back as the f64 `1e-5` its source config said.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(x) => format!("{x}").parse().ok(),
            Value::F64(x) => Some(x),
            Value::I8(x) => Some(x.into()),
            Value::I16(x) => Some(x.into()),
            Value::I32(x) => Some(x.into()),
            Value::I64(x) => Some(x as f64),
            _ => self.as_u64().map(|x| x as f64),
        }
    }

    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            Value::Bool(b) => Some(b),
            _ => None,
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    pub fn as_array(&self) -> Option<&[Value]> {
        match self {
            Value::Array(a) => Some(a),
            _ => None,
        }
    }

    /// The value as JSON (for provenance); arrays longer than `max_array` are summarised.
    pub fn to_json(&self, max_array: usize) -> serde_json::Value {
        use serde_json::json;
        match self {
            Value::Str(s) => json!(s),
            Value::Bool(b) => json!(b),
            Value::Array(a) if a.len() > max_array => json!(format!("[{} values]", a.len())),
            Value::Array(a) => serde_json::Value::Array(a.iter().map(|v| v.to_json(max_array)).collect()),
            v => match (v.as_u64(), v.as_f64()) {
                (Some(u), _) => json!(u),
                (None, Some(f)) => json!(f),
                _ => serde_json::Value::Null,
            },
        }
    }
}

/// The metadata of a GGUF file, keyed by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Metadata(pub BTreeMap<String, Value>);

impl Metadata {
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.0.get(key)
    }

    fn typed<T>(&self, key: &str, what: &str, f: impl Fn(&Value) -> Option<T>) -> Result<Option<T>> {
        match self.0.get(key) {
            None => Ok(None),
            Some(v) => f(v).map(Some).ok_or_else(|| fail(format!("GGUF key {key} must be {what}, found {v:?}"))),
        }
    }

    pub fn u64(&self, key: &str) -> Result<Option<u64>> {
        self.typed(key, "a non-negative integer", Value::as_u64)
    }

    pub fn f64(&self, key: &str) -> Result<Option<f64>> {
        self.typed(key, "a number", Value::as_f64)
    }

    pub fn bool(&self, key: &str) -> Result<Option<bool>> {
        self.typed(key, "a boolean", Value::as_bool)
    }

    pub fn str(&self, key: &str) -> Result<Option<&str>> {
        match self.0.get(key) {
            None => Ok(None),
            Some(Value::Str(s)) => Ok(Some(s)),
            Some(v) => Err(fail(format!("GGUF key {key} must be a string, found {v:?}"))),
        }
    }

    pub fn array(&self, key: &str) -> Result<Option<&[Value]>> {
        match self.0.get(key) {
            None => Ok(None),
            Some(Value::Array(a)) => Ok(Some(a)),
            Some(_) => Err(fail(format!("GGUF key {key} must be an array"))),
        }
    }

    /// A required non-negative integer.
    pub fn need_u64(&self, key: &str) -> Result<u64> {
        self.u64(key)?.ok_or_else(|| fail(format!("GGUF file lacks the key {key}")))
    }
}

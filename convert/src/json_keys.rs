//! Typed reads of config.json keys (a null counts as absent), each error naming the key: the
//! leaf under `hf_config` and the family modules it calls (`deepseek`, `fp8`).

use crate::error::{fail, Result};
use serde_json::Value;

pub fn get<'a>(v: &'a Value, key: &str) -> Option<&'a Value> {
    v.get(key).filter(|x| !x.is_null())
}

pub fn usize_key(v: &Value, key: &str) -> Result<usize> {
    opt_usize(v, key)?.ok_or_else(|| fail(format!("config.json lacks '{key}'")))
}

pub fn opt_usize(v: &Value, key: &str) -> Result<Option<usize>> {
    match get(v, key) {
        None => Ok(None),
        Some(x) => x
            .as_u64()
            .map(|n| Some(n as usize))
            .ok_or_else(|| fail(format!("config.json '{key}' must be a non-negative integer, got {x}"))),
    }
}

pub fn opt_f64(v: &Value, key: &str) -> Result<Option<f64>> {
    match get(v, key) {
        None => Ok(None),
        Some(x) => x.as_f64().map(Some).ok_or_else(|| fail(format!("config.json '{key}' must be a number, got {x}"))),
    }
}

pub fn opt_bool(v: &Value, key: &str) -> Result<Option<bool>> {
    match get(v, key) {
        None => Ok(None),
        Some(x) => {
            x.as_bool().map(Some).ok_or_else(|| fail(format!("config.json '{key}' must be true/false, got {x}")))
        }
    }
}

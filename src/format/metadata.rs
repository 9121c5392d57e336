//! The metadata section: a small directory of keyed blobs (config JSON, tokenizer JSON, chat
//! template, provenance, user bytes). Decoding checks every range and key; values stay borrowed.

use super::le::{get_u32, get_u64};
use crate::error::{Error, Result};
use std::ops::Range;

/// At most this many metadata entries.
pub const MAX_META_ENTRIES: u32 = 64;
/// Longest key, in bytes.
pub const MAX_META_KEY: u32 = 64;
const ENTRY_SIZE: u64 = 32;
const DIR_OFFSET: u64 = 8;

/// What a metadata value holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MetaKind {
    /// UTF-8 JSON text.
    Json,
    /// UTF-8 text.
    Text,
    /// Arbitrary bytes.
    Bytes,
}

impl MetaKind {
    fn from_id(id: u32) -> Option<MetaKind> {
        match id {
            1 => Some(MetaKind::Json),
            2 => Some(MetaKind::Text),
            3 => Some(MetaKind::Bytes),
            _ => None,
        }
    }

    fn id(self) -> u32 {
        match self {
            MetaKind::Json => 1,
            MetaKind::Text => 2,
            MetaKind::Bytes => 3,
        }
    }
}

/// One decoded metadata entry; `value` is a range relative to the metadata section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MetaEntry {
    pub key: String,
    pub kind: MetaKind,
    pub value: Range<usize>,
}

fn bad(key: &str, reason: impl Into<String>) -> Error {
    Error::Metadata { key: key.to_string(), reason: reason.into() }
}

/// Decode the entries of a metadata section (`section` is exactly metadata_size bytes, found at
/// file offset `section_offset`). JSON and text values are checked to be UTF-8 (and JSON to parse).
pub fn decode(section: &[u8], section_offset: u64) -> Result<Vec<MetaEntry>> {
    let count = get_u32(section, 0).ok_or_else(|| bad("<directory>", "section shorter than 8 bytes"))?;
    if count > MAX_META_ENTRIES {
        return Err(Error::TooLarge {
            what: "metadata entry count",
            value: count.into(),
            cap: MAX_META_ENTRIES.into(),
        });
    }
    if get_u32(section, 4) != Some(0) {
        return Err(Error::NonZeroPadding { what: "metadata reserved field".into(), offset: section_offset + 4 });
    }
    let len = section.len() as u64;
    let dir_end = DIR_OFFSET + u64::from(count) * ENTRY_SIZE;
    if dir_end > len {
        return Err(bad("<directory>", format!("{count} entries need {dir_end} bytes, section has {len}")));
    }
    let mut out: Vec<MetaEntry> = Vec::with_capacity(count as usize);
    for i in 0..u64::from(count) {
        let e = DIR_OFFSET + i * ENTRY_SIZE;
        // All reads below are inside [DIR_OFFSET, dir_end), checked above.
        let key_len = get_u32(section, e).unwrap_or(0);
        let kind_id = get_u32(section, e + 4).unwrap_or(0);
        let key_off = get_u64(section, e + 8).unwrap_or(0);
        let val_off = get_u64(section, e + 16).unwrap_or(0);
        let val_len = get_u64(section, e + 24).unwrap_or(0);
        let entry_name = format!("<entry {i}>");
        if key_len == 0 || key_len > MAX_META_KEY {
            return Err(bad(&entry_name, format!("key length {key_len} outside 1..={MAX_META_KEY}")));
        }
        let key_range =
            checked_range(key_off, key_len.into(), len).ok_or_else(|| bad(&entry_name, "key runs past the section"))?;
        let key = std::str::from_utf8(&section[key_range.clone()])
            .map_err(|_| bad(&entry_name, "key is not UTF-8"))?
            .to_string();
        if key.contains('\0') {
            return Err(bad(&entry_name, "key contains NUL"));
        }
        let kind = MetaKind::from_id(kind_id).ok_or_else(|| bad(&key, format!("unknown value kind {kind_id}")))?;
        let value = checked_range(val_off, val_len, len).ok_or_else(|| {
            bad(&key, format!("value at offset {val_off} with length {val_len} runs past the section ({len} bytes)"))
        })?;
        if out.iter().any(|o| o.key == key) {
            return Err(bad(&key, "duplicate key"));
        }
        let bytes = &section[value.clone()];
        match kind {
            MetaKind::Json => {
                // from_str, not from_slice: IgnoredAny skips string contents without UTF-8 checks.
                let text = std::str::from_utf8(bytes).map_err(|_| bad(&key, "JSON is not UTF-8"))?;
                serde_json::from_str::<serde::de::IgnoredAny>(text)
                    .map_err(|e| bad(&key, format!("invalid JSON: {e}")))?;
            }
            MetaKind::Text => {
                std::str::from_utf8(bytes).map_err(|_| bad(&key, "text is not UTF-8"))?;
            }
            MetaKind::Bytes => {}
        }
        out.push(MetaEntry { key, kind, value });
    }
    Ok(out)
}

fn checked_range(off: u64, len: u64, limit: u64) -> Option<Range<usize>> {
    let end = off.checked_add(len)?;
    if end > limit {
        return None;
    }
    Some(usize::try_from(off).ok()?..usize::try_from(end).ok()?)
}

/// Encode entries `(key, kind, value)` into a metadata section.
pub fn encode(entries: &[(String, MetaKind, Vec<u8>)]) -> Result<Vec<u8>> {
    if entries.len() as u64 > u64::from(MAX_META_ENTRIES) {
        return Err(Error::TooLarge {
            what: "metadata entry count",
            value: entries.len() as u64,
            cap: MAX_META_ENTRIES.into(),
        });
    }
    let mut dir = Vec::with_capacity(8 + entries.len() * ENTRY_SIZE as usize);
    dir.extend_from_slice(&(entries.len() as u32).to_le_bytes());
    dir.extend_from_slice(&0u32.to_le_bytes());
    let mut blob = Vec::new();
    let base = DIR_OFFSET + entries.len() as u64 * ENTRY_SIZE;
    for (key, kind, value) in entries {
        if key.is_empty() || key.len() as u64 > u64::from(MAX_META_KEY) {
            return Err(bad(key, "key length out of range"));
        }
        let key_off = base + blob.len() as u64;
        blob.extend_from_slice(key.as_bytes());
        while blob.len() % 8 != 0 {
            blob.push(0);
        }
        let val_off = base + blob.len() as u64;
        blob.extend_from_slice(value);
        while blob.len() % 8 != 0 {
            blob.push(0);
        }
        dir.extend_from_slice(&(key.len() as u32).to_le_bytes());
        dir.extend_from_slice(&kind.id().to_le_bytes());
        dir.extend_from_slice(&key_off.to_le_bytes());
        dir.extend_from_slice(&val_off.to_le_bytes());
        dir.extend_from_slice(&(value.len() as u64).to_le_bytes());
    }
    dir.extend_from_slice(&blob);
    if dir.len() as u64 > super::MAX_METADATA_SIZE {
        return Err(Error::TooLarge {
            what: "metadata section",
            value: dir.len() as u64,
            cap: super::MAX_METADATA_SIZE,
        });
    }
    Ok(dir)
}

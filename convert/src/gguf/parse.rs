//! The GGUF header parser: header, metadata, tensor infos, alignment and data offsets, every
//! field validated before anything is sized from it. Little-endian GGUF v2 and v3 (identical
//! layouts; v3 only added big-endian files, which are refused, as is v1 with its u32 lengths).
//!
//! Byte layout (all integers little-endian):
//!
//! ```text
//! offset  size  field
//! 0       4     magic "GGUF" (47 47 55 46)
//! 4       4     u32 version (2 or 3)
//! 8       8     u64 tensor_count
//! 16      8     u64 metadata_kv_count
//! 24      …     metadata_kv_count × { string key; u32 value_type; value }
//!         …     tensor_count × { string name; u32 n_dims (1..=4); u64 ne[n_dims] (ne[0] innermost);
//!                                u32 ggml_type; u64 offset (relative to the data section) }
//!         …     padding to a multiple of `alignment`
//! data    …     tensor data; each tensor at data + offset, offset a multiple of `alignment`
//!
//! string  = u64 byte length, then that many UTF-8 bytes (no terminator)
//! value_type: 0 u8, 1 i8, 2 u16, 3 i16, 4 u32, 5 i32, 6 f32, 7 bool (one byte, 0 or 1),
//!             8 string, 9 array = { u32 element_type; u64 count; count × element },
//!             10 u64, 11 i64, 12 f64
//! alignment = metadata `general.alignment` (u32, a power of two), default 32
//! tensor bytes = ne[0] / block × block_bytes × ne[1] × … (ggml type table, `types`)
//! ```
//!
//! Limits checked before allocating: a string or array never claims more bytes than remain in the
//! file (and at most `MAX_STRING` / `MAX_ARRAY`), arrays nest at most `MAX_DEPTH` deep, counts of
//! keys and tensors are capped, all arithmetic is checked. Tensor data must lie inside the file,
//! aligned, without overlaps, with a known type and whole blocks per row.

use super::types::GgmlType;
use super::value::{Metadata, Value};
use crate::error::{fail, Result};
use std::collections::{BTreeMap, HashSet};
use std::io::Read;

pub const MAGIC: &[u8; 4] = b"GGUF";
/// Longest string accepted (a chat template or a token; 64 MiB).
pub const MAX_STRING: u64 = 64 << 20;
/// Most elements in one metadata array.
pub const MAX_ARRAY: u64 = 1 << 24;
/// Deepest array nesting.
pub const MAX_DEPTH: u32 = 3;
pub const MAX_KV: u64 = 1 << 16;
pub const MAX_TENSORS: u64 = 1 << 20;
/// Longest tensor name.
pub const MAX_NAME: u64 = 256;
/// ggml's GGML_MAX_DIMS.
pub const MAX_DIMS: u32 = 4;
const DEFAULT_ALIGNMENT: u64 = 32;
const MAX_ALIGNMENT: u64 = 1 << 20;

/// One tensor's description, with its absolute position in its file.
#[derive(Clone, Debug, PartialEq)]
pub struct TensorInfo {
    pub name: String,
    /// Dimensions, innermost first (ggml's `ne`): a [rows, cols] matrix is ne = [cols, rows].
    pub ne: Vec<u64>,
    pub ggml: GgmlType,
    /// Absolute byte offset of the data in the file.
    pub offset: u64,
    pub bytes: u64,
}

/// A parsed GGUF header.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub version: u32,
    pub metadata: Metadata,
    pub tensors: Vec<TensorInfo>,
    pub alignment: u64,
    /// Absolute offset of the data section.
    pub data_offset: u64,
}

/// A reader that knows how many bytes remain and refuses claims beyond them.
struct Cursor<R> {
    r: R,
    pos: u64,
    len: u64,
}

impl<R: Read> Cursor<R> {
    fn remaining(&self) -> u64 {
        self.len.saturating_sub(self.pos)
    }

    fn fill(&mut self, buf: &mut [u8], what: &str) -> Result<()> {
        if buf.len() as u64 > self.remaining() {
            return Err(fail(format!("GGUF truncated: {what} at byte {} runs past the end of the file", self.pos)));
        }
        self.r.read_exact(buf).map_err(|e| fail(format!("GGUF: reading {what} at byte {}: {e}", self.pos)))?;
        self.pos += buf.len() as u64;
        Ok(())
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N]> {
        let mut b = [0u8; N];
        self.fill(&mut b, what)?;
        Ok(b)
    }

    fn u32(&mut self, what: &str) -> Result<u32> {
        self.array::<4>(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64> {
        self.array::<8>(what).map(u64::from_le_bytes)
    }

    fn string(&mut self, what: &str) -> Result<String> {
        let n = self.u64(what)?;
        if n > MAX_STRING || n > self.remaining() {
            return Err(fail(format!(
                "GGUF: {what} claims {n} bytes at byte {}, but {} remain (limit {MAX_STRING})",
                self.pos,
                self.remaining()
            )));
        }
        let mut b = vec![0u8; n as usize];
        self.fill(&mut b, what)?;
        String::from_utf8(b).map_err(|e| fail(format!("GGUF: {what} is not valid UTF-8 ({e})")))
    }

    fn value(&mut self, ty: u32, key: &str, depth: u32) -> Result<Value> {
        Ok(match ty {
            0 => Value::U8(self.array::<1>(key)?[0]),
            1 => Value::I8(self.array::<1>(key)?[0] as i8),
            2 => Value::U16(u16::from_le_bytes(self.array(key)?)),
            3 => Value::I16(i16::from_le_bytes(self.array(key)?)),
            4 => Value::U32(self.u32(key)?),
            5 => Value::I32(i32::from_le_bytes(self.array(key)?)),
            6 => Value::F32(f32::from_le_bytes(self.array(key)?)),
            7 => match self.array::<1>(key)?[0] {
                0 => Value::Bool(false),
                1 => Value::Bool(true),
                b => return Err(fail(format!("GGUF: key {key}: bool byte is {b}, not 0 or 1"))),
            },
            8 => Value::Str(self.string(&format!("string value of {key}"))?),
            9 => self.array_value(key, depth)?,
            10 => Value::U64(self.u64(key)?),
            11 => Value::I64(i64::from_le_bytes(self.array(key)?)),
            12 => Value::F64(f64::from_le_bytes(self.array(key)?)),
            t => return Err(fail(format!("GGUF: key {key} has unknown value type {t}"))),
        })
    }

    fn array_value(&mut self, key: &str, depth: u32) -> Result<Value> {
        if depth >= MAX_DEPTH {
            return Err(fail(format!("GGUF: key {key}: arrays nested deeper than {MAX_DEPTH}")));
        }
        let ty = self.u32(key)?;
        let n = self.u64(key)?;
        // The smallest encoding of one element: strings and arrays have at least a length.
        let min = match ty {
            0 | 1 | 7 => 1,
            2 | 3 => 2,
            4..=6 => 4,
            8 | 10..=12 => 8,
            9 => 12,
            t => return Err(fail(format!("GGUF: key {key} is an array of unknown type {t}"))),
        };
        if n > MAX_ARRAY || n.checked_mul(min).is_none_or(|b| b > self.remaining()) {
            return Err(fail(format!(
                "GGUF: key {key} claims an array of {n} elements, more than the file holds (or above {MAX_ARRAY})"
            )));
        }
        let mut items = Vec::with_capacity((n as usize).min(1 << 16));
        for _ in 0..n {
            items.push(self.value(ty, key, depth + 1)?);
        }
        Ok(Value::Array(items))
    }
}

/// Parse the header of a GGUF file of `len` bytes read from `r` (positioned at its start).
pub fn parse<R: Read>(r: R, len: u64) -> Result<Header> {
    let mut c = Cursor { r, pos: 0, len };
    let magic = c.array::<4>("magic")?;
    if &magic != MAGIC {
        return Err(fail(format!("not a GGUF file: magic is {:?}", String::from_utf8_lossy(&magic))));
    }
    let version = c.u32("version")?;
    match version {
        2 | 3 => {}
        1 => return Err(fail("GGUF version 1 is not supported; re-convert the model with a current llama.cpp")),
        v if (1..=3).contains(&v.swap_bytes()) => return Err(fail("big-endian GGUF files are not supported")),
        v => return Err(fail(format!("unsupported GGUF version {v} (this build reads 2 and 3)"))),
    }
    let n_tensors = c.u64("tensor count")?;
    let n_kv = c.u64("metadata count")?;
    if n_kv > MAX_KV || n_tensors > MAX_TENSORS {
        return Err(fail(format!(
            "GGUF claims {n_kv} metadata keys and {n_tensors} tensors (limits {MAX_KV}, {MAX_TENSORS})"
        )));
    }
    let metadata = read_metadata(&mut c, n_kv)?;
    let alignment = alignment(&metadata)?;
    let raw = read_tensor_infos(&mut c, n_tensors)?;
    let data_offset = c.pos.checked_next_multiple_of(alignment).ok_or_else(|| fail("GGUF: data offset overflows"))?;
    let tensors = place_tensors(raw, data_offset, alignment, len)?;
    Ok(Header { version, metadata, tensors, alignment, data_offset })
}

fn read_metadata<R: Read>(c: &mut Cursor<R>, n: u64) -> Result<Metadata> {
    let mut map = BTreeMap::new();
    for i in 0..n {
        let key = c.string(&format!("metadata key {i}"))?;
        let ty = c.u32(&key)?;
        let v = c.value(ty, &key, 0)?;
        if map.insert(key.clone(), v).is_some() {
            return Err(fail(format!("GGUF: metadata key {key} appears twice")));
        }
    }
    Ok(Metadata(map))
}

fn alignment(m: &Metadata) -> Result<u64> {
    let a = match m.get("general.alignment") {
        None => return Ok(DEFAULT_ALIGNMENT),
        Some(Value::U32(a)) => u64::from(*a),
        Some(v) => return Err(fail(format!("GGUF: general.alignment must be a u32, found {v:?}"))),
    };
    if !a.is_power_of_two() || a > MAX_ALIGNMENT {
        return Err(fail(format!("GGUF: general.alignment {a} is not a power of two up to {MAX_ALIGNMENT}")));
    }
    Ok(a)
}

/// A tensor info as read: its offset still relative to the data section.
struct RawInfo {
    name: String,
    ne: Vec<u64>,
    ty: u32,
    rel: u64,
}

fn read_tensor_infos<R: Read>(c: &mut Cursor<R>, n: u64) -> Result<Vec<RawInfo>> {
    // Each tensor info takes at least 8 + 4 + 8 + 4 + 8 bytes.
    if n.checked_mul(32).is_none_or(|b| b > c.remaining()) {
        return Err(fail(format!("GGUF claims {n} tensors, more than the file can describe")));
    }
    let mut out = Vec::with_capacity(n as usize);
    let mut names = HashSet::new();
    for i in 0..n {
        let name = c.string(&format!("name of tensor {i}"))?;
        if name.len() as u64 > MAX_NAME {
            return Err(fail(format!("GGUF: tensor {i}'s name is {} bytes (limit {MAX_NAME})", name.len())));
        }
        if !names.insert(name.clone()) {
            return Err(fail(format!("GGUF: tensor {name} appears twice")));
        }
        let n_dims = c.u32(&name)?;
        if n_dims == 0 || n_dims > MAX_DIMS {
            return Err(fail(format!("GGUF: tensor {name} has {n_dims} dimensions (1..={MAX_DIMS})")));
        }
        let ne = (0..n_dims).map(|_| c.u64(&name)).collect::<Result<Vec<_>>>()?;
        let ty = c.u32(&name)?;
        let rel = c.u64(&name)?;
        out.push(RawInfo { name, ne, ty, rel });
    }
    Ok(out)
}

fn place_tensors(raw: Vec<RawInfo>, data: u64, alignment: u64, len: u64) -> Result<Vec<TensorInfo>> {
    let mut out = Vec::with_capacity(raw.len());
    for RawInfo { name, ne, ty, rel } in raw {
        let ggml = GgmlType::from_id(ty).ok_or_else(|| fail(format!("GGUF: tensor {name} has unknown type {ty}")))?;
        if ne.iter().any(|&d| d > i64::MAX as u64) {
            return Err(fail(format!("GGUF: tensor {name} has a dimension above 2^63: {ne:?}")));
        }
        let bytes = ggml.bytes(&ne).ok_or_else(|| {
            fail(format!(
                "GGUF: tensor {name} of type {} has shape {ne:?}: rows of whole {}-element blocks, without overflow",
                ggml.name, ggml.block
            ))
        })?;
        if rel % alignment != 0 {
            return Err(fail(format!("GGUF: tensor {name} at data offset {rel} is not aligned to {alignment}")));
        }
        let offset = data.checked_add(rel).filter(|o| o.checked_add(bytes).is_some_and(|end| end <= len));
        let offset = offset.ok_or_else(|| {
            fail(format!(
                "GGUF: tensor {name} ({bytes} bytes at data offset {rel}) runs past the end of the {len}-byte file"
            ))
        })?;
        out.push(TensorInfo { name, ne, ggml, offset, bytes });
    }
    let mut by_offset: Vec<&TensorInfo> = out.iter().collect();
    by_offset.sort_by_key(|t| t.offset);
    for w in by_offset.windows(2) {
        if w[0].offset + w[0].bytes > w[1].offset {
            return Err(fail(format!("GGUF: tensors {} and {} overlap", w[0].name, w[1].name)));
        }
    }
    Ok(out)
}

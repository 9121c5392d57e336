//! Parsing a whole .colibri image: header → sections → metadata → tensor table → data layout,
//! all checked against the real file length before any tensor byte is read. `verify_data` is the
//! full scan (checksums, zero padding, NaN/Inf values and block scales) used by `validate`.

use super::finite::find_nonfinite;
use super::header::{Header, HEADER_SIZE};
use super::metadata::{self, MetaEntry};
use super::table::{TensorKind, TensorRecord, RECORD_SIZE};
use super::{align_up, EXPERT_ALIGN, MAX_METADATA_SIZE, MAX_STRINGS_SIZE, MAX_TENSORS};
use crate::error::{Error, Result};
use rayon::prelude::*;
use std::collections::HashMap;
use std::ops::Range;

/// The validated structure of a file: nothing here points outside the file.
#[derive(Clone, Debug)]
pub struct ParsedFile {
    pub header: Header,
    /// Metadata entries; their `value` ranges are relative to `metadata_range`.
    pub metadata: Vec<MetaEntry>,
    /// Absolute byte range of the metadata section.
    pub metadata_range: Range<usize>,
    /// Tensor records in table (= data) order.
    pub tensors: Vec<TensorRecord>,
    index: HashMap<String, usize>,
}

impl ParsedFile {
    /// The record of the tensor called `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorRecord> {
        self.index.get(name).map(|&i| &self.tensors[i])
    }

    /// The raw value of metadata entry `key` inside `file` (the same bytes that were parsed).
    pub fn meta<'f>(&self, file: &'f [u8], key: &str) -> Option<&'f [u8]> {
        let e = self.metadata.iter().find(|e| e.key == key)?;
        let start = self.metadata_range.start + e.value.start;
        let end = self.metadata_range.start + e.value.end;
        file.get(start..end)
    }
}

fn section(what: &str, offset: u64, len: u64, file_size: u64) -> Result<Range<usize>> {
    let end = offset.checked_add(len).filter(|&e| e <= file_size).ok_or_else(|| Error::OutOfBounds {
        what: what.to_string(),
        offset,
        len,
        file_size,
    })?;
    Ok(offset as usize..end as usize)
}

fn expect_at(what: &str, expected: Option<u64>, found: u64) -> Result<()> {
    match expected {
        Some(e) if e == found => Ok(()),
        Some(e) => Err(Error::Layout { what: what.to_string(), expected: e, found }),
        None => Err(Error::Layout { what: format!("{what} (overflow)"), expected: u64::MAX, found }),
    }
}

fn zeros(file: &[u8], range: Range<usize>, what: &str) -> Result<()> {
    let bytes = file.get(range.clone()).unwrap_or(&[]);
    match bytes.iter().position(|&b| b != 0) {
        None => Ok(()),
        Some(p) => Err(Error::NonZeroPadding { what: what.to_string(), offset: (range.start + p) as u64 }),
    }
}

/// Parse and validate the structure of `file` (the complete file contents or mapping; its length
/// is taken as the real file size). Reads the header, metadata, table and string table only.
pub fn parse(file: &[u8]) -> Result<ParsedFile> {
    let file_size = file.len() as u64;
    let h = Header::decode(file, file_size)?;

    // Sections, in their fixed order.
    if h.metadata_size > MAX_METADATA_SIZE {
        return Err(Error::TooLarge { what: "metadata section", value: h.metadata_size, cap: MAX_METADATA_SIZE });
    }
    if h.strings_size > MAX_STRINGS_SIZE {
        return Err(Error::TooLarge { what: "string table", value: h.strings_size, cap: MAX_STRINGS_SIZE });
    }
    if h.tensor_count == 0 {
        return Err(Error::BadHeader { field: "tensor_count", value: 0, reason: "a file holds at least one tensor" });
    }
    if u64::from(h.tensor_count) > MAX_TENSORS {
        return Err(Error::TooLarge { what: "tensor count", value: h.tensor_count.into(), cap: MAX_TENSORS });
    }
    expect_at("metadata section", Some(HEADER_SIZE), h.metadata_offset)?;
    let meta = section("metadata section", h.metadata_offset, h.metadata_size, file_size)?;
    expect_at("tensor table", align_up(meta.end as u64, 8), h.table_offset)?;
    expect_at("tensor table size", u64::from(h.tensor_count).checked_mul(RECORD_SIZE), h.table_size)?;
    let table = section("tensor table", h.table_offset, h.table_size, file_size)?;
    expect_at("string table", Some(table.end as u64), h.strings_offset)?;
    let strings = section("string table", h.strings_offset, h.strings_size, file_size)?;
    expect_at("data section", align_up(strings.end as u64, EXPERT_ALIGN), h.data_offset)?;
    if h.data_offset > file_size {
        return Err(Error::OutOfBounds { what: "data section".into(), offset: h.data_offset, len: 0, file_size });
    }
    zeros(file, meta.end..table.start, "padding after the metadata section")?;
    zeros(file, strings.end..h.data_offset as usize, "padding before the data section")?;

    let metadata = metadata::decode(&file[meta.clone()], meta.start as u64)?;

    // Tensor records, each on its own, then names.
    let string_bytes = &file[strings];
    let mut tensors = Vec::with_capacity(h.tensor_count as usize);
    let mut index = HashMap::with_capacity(h.tensor_count as usize);
    for i in 0..h.tensor_count as usize {
        let at = table.start + i * RECORD_SIZE as usize;
        let rec = TensorRecord::decode(i, &file[at..at + RECORD_SIZE as usize], at as u64, string_bytes)?;
        if index.insert(rec.name.clone(), i).is_some() {
            return Err(Error::DuplicateTensor { name: rec.name });
        }
        tensors.push(rec);
    }
    // Names hold no NUL (checked above): a NUL in the table means strings_size runs into padding.
    if string_bytes.contains(&0) {
        return Err(Error::BadHeader {
            field: "strings_size",
            value: h.strings_size,
            reason: "the string table holds NUL bytes (names never do): it runs into padding",
        });
    }

    check_data_layout(&h, &tensors, file_size)?;
    check_routers(&h, &tensors)?;
    Ok(ParsedFile { header: h, metadata, metadata_range: meta, tensors, index })
}

/// Tensors tile the data section in table order with only alignment padding between them.
fn check_data_layout(h: &Header, tensors: &[TensorRecord], file_size: u64) -> Result<()> {
    let mut cursor = h.data_offset;
    for (i, t) in tensors.iter().enumerate() {
        let expected = if i == 0 { Some(h.data_offset) } else { align_up(cursor, t.kind.align()) };
        if t.data_offset != expected.unwrap_or(u64::MAX) {
            let what = match expected {
                Some(e) if t.data_offset < e => format!("tensor '{}' (overlaps or is out of order)", t.name),
                _ => format!("tensor '{}' (gap before it)", t.name),
            };
            return Err(Error::Layout { what, expected: expected.unwrap_or(u64::MAX), found: t.data_offset });
        }
        let end = t.data_offset.checked_add(t.byte_length).ok_or_else(|| Error::TruncatedData {
            tensor: t.name.clone(),
            end: u64::MAX,
            file_size,
        })?;
        if end > file_size {
            return Err(Error::TruncatedData { tensor: t.name.clone(), end, file_size });
        }
        cursor = end;
    }
    if cursor != file_size {
        return Err(Error::TrailingBytes { end_of_data: cursor, file_size });
    }
    Ok(())
}

/// Routers are contiguous from routing_offset; stacks and routers agree with num_experts.
fn check_routers(h: &Header, tensors: &[TensorRecord]) -> Result<()> {
    let routers: Vec<usize> = (0..tensors.len()).filter(|&i| tensors[i].kind == TensorKind::Router).collect();
    if routers.len() as u64 != u64::from(h.num_moe_layers) {
        return Err(Error::HeaderMismatch {
            field: "num_moe_layers",
            header: h.num_moe_layers.into(),
            actual: routers.len() as u64,
        });
    }
    if let (Some(&first), Some(&last)) = (routers.first(), routers.last()) {
        if first != 0 {
            return Err(Error::Layout {
                what: format!("router tensors (must come first; '{}' is table entry {first})", tensors[first].name),
                expected: h.data_offset,
                found: tensors[first].data_offset,
            });
        }
        if last - first + 1 != routers.len() {
            return Err(Error::Layout {
                what: "router tensors (must be contiguous)".into(),
                expected: (first + routers.len() - 1) as u64,
                found: last as u64,
            });
        }
        if tensors[first].data_offset != h.routing_offset {
            return Err(Error::HeaderMismatch {
                field: "routing_offset",
                header: h.routing_offset,
                actual: tensors[first].data_offset,
            });
        }
    } else if h.routing_offset != 0 {
        return Err(Error::HeaderMismatch { field: "routing_offset", header: h.routing_offset, actual: 0 });
    }
    for t in tensors.iter().filter(|t| t.kind != TensorKind::Plain) {
        if t.shape[0] != u64::from(h.num_experts) {
            return Err(Error::HeaderMismatch {
                field: "num_experts",
                header: h.num_experts.into(),
                actual: t.shape[0],
            });
        }
    }
    Ok(())
}

/// The prefix checksum (header, metadata, tables; flag bit 0), when the file carries one. The
/// structure was checked by `parse`; this catches changes that keep it valid.
pub fn verify_prefix(file: &[u8], parsed: &ParsedFile) -> Result<()> {
    let h = &parsed.header;
    if h.flags & super::header::FLAG_PREFIX_CHECKSUM == 0 {
        return Ok(());
    }
    let found = super::header::prefix_checksum(&file[..h.data_offset as usize]);
    if found != h.prefix_checksum {
        return Err(Error::Checksum {
            tensor: "(the header, metadata and tensor table)".into(),
            expected: h.prefix_checksum,
            found,
        });
    }
    Ok(())
}

/// Full data check: per-tensor checksum, zero padding (between tensors and between experts),
/// and a NaN/Inf scan of every float element and every block scale. Reads every byte of the file.
pub fn verify_data(file: &[u8], parsed: &ParsedFile) -> Result<()> {
    verify_data_with(file, parsed, &|_, _| {})
}

/// `verify_data` that calls `prefetch(offset, len)` for a tensor and the one after it before
/// reading it (read-ahead hints for mapped files on a cold page cache).
pub fn verify_data_with(file: &[u8], parsed: &ParsedFile, prefetch: &(dyn Fn(usize, usize) + Sync)) -> Result<()> {
    let n = parsed.tensors.len();
    let check = |i: usize| -> Result<()> {
        let t = &parsed.tensors[i];
        for next in &parsed.tensors[i..(i + 2).min(n)] {
            prefetch(next.data_offset as usize, next.byte_length as usize);
        }
        let data = &file[t.data_offset as usize..t.end() as usize];
        let sum = xxhash_rust::xxh64::xxh64(data, 0);
        if sum != t.checksum {
            return Err(Error::Checksum { tensor: t.name.clone(), expected: t.checksum, found: sum });
        }
        let unit = t.unit_bytes() as usize;
        let unit_elements = t.unit_elements();
        let stride = if t.kind == TensorKind::Experts { t.expert_stride as usize } else { data.len() };
        for (u, block) in data.chunks(stride.max(1)).enumerate() {
            let (values, pad) = block.split_at(unit.min(block.len()));
            if let Some(at) = find_nonfinite(t.dtype, values, t.shape.last().copied().unwrap_or(1)) {
                return Err(at.error(&t.name, u as u64 * unit_elements, t.dtype.block() as u64));
            }
            if let Some(p) = pad.iter().position(|&b| b != 0) {
                let offset = t.data_offset + (u * stride + unit + p) as u64;
                return Err(Error::NonZeroPadding { what: format!("padding between experts of '{}'", t.name), offset });
            }
        }
        // Padding after this tensor, up to the next one.
        let next = parsed.tensors.get(i + 1).map(|t| t.data_offset as usize).unwrap_or(t.end() as usize);
        zeros(file, t.end() as usize..next, &format!("padding after tensor '{}'", t.name))
    };
    // In parallel on the pool running the caller (`Model::verify` runs it on the model's), on
    // the calling thread outside any pool.
    if crate::threads::current() > 1 {
        (0..n).into_par_iter().try_for_each(check)
    } else {
        (0..n).try_for_each(check)
    }
}

//! The fixed 256-byte header: decoding with bounds and sanity checks, and encoding.

use super::le::{u32_at, u64_at};
use crate::error::{Error, Result};

/// "COLI".
pub const MAGIC: [u8; 4] = *b"COLI";
/// The format version this build reads and writes.
pub const VERSION: u32 = 1;
/// Bytes of the fixed header.
pub const HEADER_SIZE: u64 = 256;
/// Offset of the prefix checksum (a u64; zero when `FLAG_PREFIX_CHECKSUM` is not set).
pub const PREFIX_CHECKSUM_OFFSET: usize = 0x70;
/// Offset where the zero-filled reserved bytes start.
pub const RESERVED_OFFSET: usize = 0x78;
/// Flag bit 0: `prefix_checksum` holds the xxHash64 (seed 0) of every byte before the data
/// section — header (with the checksum's own 8 bytes read as zero), metadata, tensor table,
/// string table and their padding. Files written before the flag existed have it clear and
/// still load; their prefix is protected only by its structural checks.
pub const FLAG_PREFIX_CHECKSUM: u32 = 1;
/// Every flag bit this build understands; any other set bit is refused.
pub const KNOWN_FLAGS: u32 = FLAG_PREFIX_CHECKSUM;

/// The decoded fixed header (see the module doc of `format` for the byte layout).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Header {
    pub version: u32,
    pub num_experts: u32,
    pub num_layers: u32,
    pub header_size: u32,
    pub tensor_count: u32,
    pub routing_offset: u64,
    pub data_offset: u64,
    pub metadata_offset: u64,
    pub metadata_size: u64,
    pub table_offset: u64,
    pub table_size: u64,
    pub strings_offset: u64,
    pub strings_size: u64,
    pub file_size: u64,
    pub record_size: u32,
    pub flags: u32,
    pub top_k: u32,
    pub num_moe_layers: u32,
    pub prefix_checksum: u64,
}

impl Header {
    /// Decode the first `HEADER_SIZE` bytes. `bytes` may be shorter (then the file is too small).
    /// Checks magic, version, header_size, record_size, flags and the reserved bytes; the
    /// section layout is checked by `parse` against the real file size.
    pub fn decode(bytes: &[u8], file_size: u64) -> Result<Header> {
        if file_size < HEADER_SIZE || (bytes.len() as u64) < HEADER_SIZE {
            return Err(Error::FileTooSmall { size: file_size, need: HEADER_SIZE });
        }
        let b = &bytes[..HEADER_SIZE as usize];
        let magic = [b[0], b[1], b[2], b[3]];
        if magic != MAGIC {
            return Err(Error::BadMagic { found: magic });
        }
        let h = Header {
            version: u32_at(b, 0x04),
            num_experts: u32_at(b, 0x08),
            num_layers: u32_at(b, 0x0C),
            header_size: u32_at(b, 0x10),
            tensor_count: u32_at(b, 0x14),
            routing_offset: u64_at(b, 0x18),
            data_offset: u64_at(b, 0x20),
            metadata_offset: u64_at(b, 0x28),
            metadata_size: u64_at(b, 0x30),
            table_offset: u64_at(b, 0x38),
            table_size: u64_at(b, 0x40),
            strings_offset: u64_at(b, 0x48),
            strings_size: u64_at(b, 0x50),
            file_size: u64_at(b, 0x58),
            record_size: u32_at(b, 0x60),
            flags: u32_at(b, 0x64),
            top_k: u32_at(b, 0x68),
            num_moe_layers: u32_at(b, 0x6C),
            prefix_checksum: u64_at(b, PREFIX_CHECKSUM_OFFSET),
        };
        if h.version == 0 || h.version > VERSION {
            return Err(Error::UnsupportedVersion { found: h.version, supported: VERSION });
        }
        if u64::from(h.header_size) != HEADER_SIZE {
            return Err(Error::BadHeader {
                field: "header_size",
                value: h.header_size.into(),
                reason: "version 1 headers are 256 bytes",
            });
        }
        if u64::from(h.record_size) != super::RECORD_SIZE {
            return Err(Error::BadHeader {
                field: "record_size",
                value: h.record_size.into(),
                reason: "version 1 tensor records are 96 bytes",
            });
        }
        if h.flags & !KNOWN_FLAGS != 0 {
            return Err(Error::BadHeader {
                field: "flags",
                value: h.flags.into(),
                reason: "only bit 0 (prefix checksum) is defined in version 1",
            });
        }
        if h.flags & FLAG_PREFIX_CHECKSUM == 0 && h.prefix_checksum != 0 {
            return Err(Error::BadHeader {
                field: "prefix_checksum",
                value: h.prefix_checksum,
                reason: "set while flag bit 0 is clear",
            });
        }
        if let Some(pos) = b[RESERVED_OFFSET..].iter().position(|&x| x != 0) {
            return Err(Error::NonZeroPadding {
                what: "reserved header byte".into(),
                offset: (RESERVED_OFFSET + pos) as u64,
            });
        }
        if file_size < h.file_size {
            return Err(Error::Truncated { expected: h.file_size, actual: file_size });
        }
        if file_size > h.file_size {
            return Err(Error::TrailingBytes { end_of_data: h.file_size, file_size });
        }
        Ok(h)
    }

    /// Encode into exactly `HEADER_SIZE` bytes (reserved bytes zero).
    pub fn encode(&self) -> [u8; HEADER_SIZE as usize] {
        let mut b = [0u8; HEADER_SIZE as usize];
        b[0..4].copy_from_slice(&MAGIC);
        let put32 = |b: &mut [u8], off: usize, v: u32| b[off..off + 4].copy_from_slice(&v.to_le_bytes());
        let put64 = |b: &mut [u8], off: usize, v: u64| b[off..off + 8].copy_from_slice(&v.to_le_bytes());
        put32(&mut b, 0x04, self.version);
        put32(&mut b, 0x08, self.num_experts);
        put32(&mut b, 0x0C, self.num_layers);
        put32(&mut b, 0x10, self.header_size);
        put32(&mut b, 0x14, self.tensor_count);
        put64(&mut b, 0x18, self.routing_offset);
        put64(&mut b, 0x20, self.data_offset);
        put64(&mut b, 0x28, self.metadata_offset);
        put64(&mut b, 0x30, self.metadata_size);
        put64(&mut b, 0x38, self.table_offset);
        put64(&mut b, 0x40, self.table_size);
        put64(&mut b, 0x48, self.strings_offset);
        put64(&mut b, 0x50, self.strings_size);
        put64(&mut b, 0x58, self.file_size);
        put32(&mut b, 0x60, self.record_size);
        put32(&mut b, 0x64, self.flags);
        put32(&mut b, 0x68, self.top_k);
        put32(&mut b, 0x6C, self.num_moe_layers);
        put64(&mut b, PREFIX_CHECKSUM_OFFSET, self.prefix_checksum);
        b
    }
}

/// The prefix checksum of `prefix` (the bytes before the data section), its own field read as
/// zero.
pub fn prefix_checksum(prefix: &[u8]) -> u64 {
    let mut h = xxhash_rust::xxh64::Xxh64::new(0);
    let field = PREFIX_CHECKSUM_OFFSET..PREFIX_CHECKSUM_OFFSET + 8;
    h.update(&prefix[..field.start.min(prefix.len())]);
    h.update(&[0u8; 8]);
    h.update(prefix.get(field.end..).unwrap_or(&[]));
    h.digest()
}

//! Little-endian integer fields of the on-disk structures (header, records, metadata entries).

/// The u32 at `off` of a buffer known to hold it.
pub fn u32_at(b: &[u8], off: usize) -> u32 {
    u32::from_le_bytes([b[off], b[off + 1], b[off + 2], b[off + 3]])
}

/// The u64 at `off` of a buffer known to hold it.
pub fn u64_at(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

/// The u32 at `off`, or None when it runs past the buffer.
pub fn get_u32(b: &[u8], off: u64) -> Option<u32> {
    let off = usize::try_from(off).ok()?;
    b.get(off..off.checked_add(4)?).map(|_| u32_at(b, off))
}

/// The u64 at `off`, or None when it runs past the buffer.
pub fn get_u64(b: &[u8], off: u64) -> Option<u64> {
    let off = usize::try_from(off).ok()?;
    b.get(off..off.checked_add(8)?).map(|_| u64_at(b, off))
}

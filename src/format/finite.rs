//! The NaN/Inf scans of stored values, one per dtype family (the dtype table points at them):
//! every element of a float matrix, every f16 scale of a block-quantised matrix (their quants
//! are integers: every bit pattern is a valid value).

use super::blocks::{GROUP_ROWS, QK};
use super::DType;
use crate::error::Error;

/// Where a stored matrix holds its first NaN or Inf.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NonFinite {
    /// Element index (float dtypes).
    Element(u64),
    /// Row-major block index, whose f16 scale is NaN/Inf (block-quantised dtypes).
    Scale(u64),
}

impl NonFinite {
    /// The error for tensor `tensor`, when the scanned matrix starts at element `first` of it
    /// (expert e of a stack starts at e × its element count; gaps are not counted) and its
    /// dtype has blocks of `block` elements.
    pub fn error(self, tensor: &str, first: u64, block: u64) -> Error {
        match self {
            NonFinite::Element(i) => Error::NonFinite { tensor: tensor.to_string(), index: first + i },
            NonFinite::Scale(b) => {
                Error::NonFiniteScale { tensor: tensor.to_string(), block: first / block.max(1) + b }
            }
        }
    }
}

/// First NaN/Inf of one stored matrix of `dtype` with rows of `cols` elements (see the dtype
/// table's `find_nonfinite`).
pub fn find_nonfinite(dtype: DType, bytes: &[u8], cols: u64) -> Option<NonFinite> {
    (dtype.info().find_nonfinite)(bytes, cols as usize)
}

fn f16_nonfinite(bits: u16) -> bool {
    bits & 0x7c00 == 0x7c00
}

/// First element whose `size` little-endian bytes are NaN/Inf by `bad`.
fn elements(bytes: &[u8], size: usize, bad: impl Fn(&[u8]) -> bool) -> Option<NonFinite> {
    bytes.chunks_exact(size).position(bad).map(|p| NonFinite::Element(p as u64))
}

/// Scan of f32 elements.
pub fn f32_elements(bytes: &[u8], _cols: usize) -> Option<NonFinite> {
    elements(bytes, 4, |c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]) & 0x7f80_0000 == 0x7f80_0000)
}

/// Scan of f16 elements.
pub fn f16_elements(bytes: &[u8], _cols: usize) -> Option<NonFinite> {
    elements(bytes, 2, |c| f16_nonfinite(u16::from_le_bytes([c[0], c[1]])))
}

/// Scan of bf16 elements.
pub fn bf16_elements(bytes: &[u8], _cols: usize) -> Option<NonFinite> {
    elements(bytes, 2, |c| u16::from_le_bytes([c[0], c[1]]) & 0x7f80 == 0x7f80)
}

/// Scan of the scale region of one self-contained block matrix of `BLOCK_BYTES`-byte blocks (all
/// quants, then one f16 scale per block of 32): the bad scale is reported as row-major block
/// r·cols/32 + b whatever the layout (`GROUPED`: the 8-row interleaved one).
pub fn block_scales<const BLOCK_BYTES: usize, const GROUPED: bool>(bytes: &[u8], cols: usize) -> Option<NonFinite> {
    let blocks = bytes.len() / BLOCK_BYTES;
    let tail = &bytes[bytes.len() - 2 * blocks..];
    let p = tail.chunks_exact(2).position(|c| f16_nonfinite(u16::from_le_bytes([c[0], c[1]])))? as u64;
    if !GROUPED {
        return Some(NonFinite::Scale(p));
    }
    // Stored position (g·nb + b)·8 + j is the scale of row 8g + j, block b.
    let rows_per_group = GROUP_ROWS as u64;
    let nb = (cols as u64 / QK as u64).max(1);
    let (unit, j) = (p / rows_per_group, p % rows_per_group);
    let (g, b) = (unit / nb, unit % nb);
    Some(NonFinite::Scale((g * rows_per_group + j) * nb + b))
}

/// Scan of the scales of whole `BLOCK_BYTES`-byte blocks that each start with their f16
/// scale (ggml's packing): the bad scale is reported by its block index.
pub fn block_heads<const BLOCK_BYTES: usize>(bytes: &[u8], _cols: usize) -> Option<NonFinite> {
    let p = bytes.chunks_exact(BLOCK_BYTES).position(|b| f16_nonfinite(u16::from_le_bytes([b[0], b[1]])))?;
    Some(NonFinite::Scale(p as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn block_scan_reads_scales_not_quants() {
        // Two q8 blocks: quants 0x7f/0xff everywhere (valid), then scales 1.0 and Inf.
        let mut b = vec![0xffu8; 64];
        b.extend_from_slice(&0x3c00u16.to_le_bytes());
        b.extend_from_slice(&0x7c00u16.to_le_bytes());
        assert_eq!(find_nonfinite(DType::Q8, &b, 32), Some(NonFinite::Scale(1)));
        b[66..68].copy_from_slice(&0x3c00u16.to_le_bytes());
        assert_eq!(find_nonfinite(DType::Q8, &b, 32), None);
        // One q4 block: 16 bytes of nibbles, then a NaN scale.
        let mut b = vec![0xffu8; 16];
        b.extend_from_slice(&0x7e00u16.to_le_bytes());
        assert_eq!(find_nonfinite(DType::Q4, &b, 32), Some(NonFinite::Scale(0)));
    }

    #[test]
    fn an_interleaved_bad_scale_is_named_by_its_row_major_block() {
        // q4r8, 8 rows × 64 columns (nb = 2): the stored scale at position 11 is unit 1 (block
        // column 1), row 3 — row-major block 3·2 + 1 = 7.
        let mut b = vec![0u8; 8 * 64 / 2];
        for p in 0..16u16 {
            b.extend_from_slice(&(if p == 11 { 0x7c00u16 } else { 0x3c00 }).to_le_bytes());
        }
        assert_eq!(find_nonfinite(DType::Q4R8, &b, 64), Some(NonFinite::Scale(7)));
        assert_eq!(find_nonfinite(DType::Q4, &b, 64), Some(NonFinite::Scale(11)));
    }
}

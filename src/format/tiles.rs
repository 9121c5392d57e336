//! bf16r32: bf16 matrices in the AMX tiles' order. Rows go in groups of 32 and columns in steps
//! of 32; the group's step is stored as one 2 KiB unit — its 32 rows × 64 bytes, row after row —
//! and the units of a group follow each other step by step, the groups group by group:
//!
//! ```text
//! element (r, c) at  (r / 32) · 32 · cols  +  (c / 32) · 1024  +  (r % 32) · 32  +  c % 32
//! ```
//!
//! A unit's two halves are the two A tiles (16 rows × 64 bytes, rows 64 bytes apart) a tile
//! product loads for those 32 rows at that step, so a product over a group reads one contiguous
//! stream where row-major rows read 32 streams `cols · 2` bytes apart (docs/performance.md, "AMX
//! Xeon … tile order"). The values are bf16's: the same bits, moved. Rows a multiple of 32 and
//! columns a multiple of 32.

use super::finite::{bf16_elements, NonFinite};

/// Rows per group and columns per step.
pub const TILE: usize = 32;
/// Elements of one unit (a group's step).
pub const UNIT: usize = TILE * TILE;

/// Element index in a bf16r32 matrix with rows of `cols` elements of row-major element (r, c).
#[inline]
pub fn at(r: usize, c: usize, cols: usize) -> usize {
    (r / TILE) * TILE * cols + (c / TILE) * UNIT + (r % TILE) * TILE + c % TILE
}

/// Row-major bf16 bits of whole 32-row groups (`src`, rows of `cols`) into tile order (`dst`,
/// the same length).
pub fn from_rows(src: &[u16], cols: usize, dst: &mut [u16]) {
    assert!(cols.is_multiple_of(TILE) && src.len() == dst.len() && src.len().is_multiple_of(TILE * cols.max(1)));
    for (r, row) in src.chunks_exact(cols.max(1)).enumerate() {
        for (s, piece) in row.chunks_exact(TILE).enumerate() {
            let o = at(r, s * TILE, cols);
            dst[o..o + TILE].copy_from_slice(piece);
        }
    }
}

/// Row-major elements [start, start + out.len()) as f32 (the dtype table's `dequantize`).
pub fn dequantize(bytes: &[u8], cols: usize, start: usize, out: &mut [f32]) {
    for (i, o) in out.iter_mut().enumerate() {
        let e = start + i;
        let k = 2 * at(e / cols, e % cols, cols);
        *o = f32::from_bits(u32::from(u16::from_le_bytes([bytes[k], bytes[k + 1]])) << 16);
    }
}

/// The stored bytes of f32 values [x.len() / cols, cols], rounded to bf16 (nearest even).
pub fn encode(x: &[f32], cols: usize) -> Vec<u8> {
    let rows: Vec<u16> = x.iter().map(|&v| half::bf16::from_f32(v).to_bits()).collect();
    let mut tiled = vec![0u16; rows.len()];
    from_rows(&rows, cols, &mut tiled);
    tiled.iter().flat_map(|b| b.to_le_bytes()).collect()
}

/// First NaN/Inf, as a row-major element index.
pub fn find_nonfinite(bytes: &[u8], cols: usize) -> Option<NonFinite> {
    let NonFinite::Element(stored) = bf16_elements(bytes, cols)? else { return None };
    let stored = stored as usize;
    // Invert `at`: group, step, row in group, column in step.
    let (group, rest) = (stored / (TILE * cols), stored % (TILE * cols));
    let (step, within) = (rest / UNIT, rest % UNIT);
    let (r, c) = (group * TILE + within / TILE, step * TILE + within % TILE);
    // The first stored NaN need not be the first row-major one: scan those before it.
    let first = (0..r * cols + c).find(|&e| {
        let k = 2 * at(e / cols, e % cols, cols);
        u16::from_le_bytes([bytes[k], bytes[k + 1]]) & 0x7f80 == 0x7f80
    });
    Some(NonFinite::Element(first.unwrap_or(r * cols + c) as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_unit_holds_32_rows_of_one_step_and_groups_follow_each_other() {
        let cols = 96;
        assert_eq!(at(0, 0, cols), 0);
        assert_eq!(at(0, 31, cols), 31);
        assert_eq!(at(1, 0, cols), 32);
        assert_eq!(at(16, 0, cols), 512, "the second A tile starts 1 KiB in");
        assert_eq!(at(0, 32, cols), UNIT);
        assert_eq!(at(31, 95, cols), 3 * UNIT - 1);
        assert_eq!(at(32, 0, cols), 3 * UNIT);
        // Every element lands once.
        let mut seen = vec![false; 64 * cols];
        for r in 0..64 {
            for c in 0..cols {
                assert!(!std::mem::replace(&mut seen[at(r, c, cols)], true));
            }
        }
    }

    #[test]
    fn encoding_keeps_bf16_values_and_finds_the_first_row_major_nan() {
        let (rows, cols) = (64, 64);
        let x: Vec<f32> = (0..rows * cols).map(|i| (i as f32 - 2000.0) / 512.0).collect();
        let bytes = encode(&x, cols);
        let mut y = vec![0f32; 40];
        dequantize(&bytes, cols, 100, &mut y);
        for (i, v) in y.iter().enumerate() {
            assert_eq!(*v, half::bf16::from_f32(x[100 + i]).to_f32());
        }
        assert_eq!(find_nonfinite(&bytes, cols), None);
        // Row 1's NaN is stored before row 0's column-40 Inf, which comes first row-major.
        let mut bad = x.clone();
        bad[40] = f32::INFINITY;
        bad[cols + 3] = f32::NAN;
        let b = encode(&bad, cols);
        assert!(2 * at(1, 3, cols) < 2 * at(0, 40, cols));
        assert_eq!(find_nonfinite(&b, cols), Some(NonFinite::Element(40)));
        bad[40] = 0.0;
        assert_eq!(find_nonfinite(&encode(&bad, cols), cols), Some(NonFinite::Element(cols as u64 + 3)));
    }
}

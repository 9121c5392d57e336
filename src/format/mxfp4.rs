//! MXFP4 (OCP microscaling FP4) as ggml stores it (`block_mxfp4` in ggml-common.h): the one
//! description of its bytes, its reference quantiser and dequantiser, and the repacking of the
//! HuggingFace checkpoints' layout (GPT-OSS `*_blocks` / `*_scales`) into it. A GGUF MXFP4
//! tensor is these bytes as they are.
//!
//! ```text
//! mxfp4: per block of 32: e u8 (E8M0), qs u8 [16]        (17 bytes, 4.25 bits per weight)
//!        byte j of qs: element j in the low nibble, element j+16 in the high nibble
//!        value = KVALUES[nibble] · 2^(e − 128)           (ggml: kvalues doubled, scale halved)
//! ```
//!
//! The scale is `e8m0_to_f32_half` (ggml's `GGML_E8M0_TO_FP32_HALF`: e = 0 and 1 give the
//! subnormals 2^-128 and 2^-127); e = 255 is E8M0's NaN in the OCP spec and is reported as a
//! non-finite scale by the format's scan. The HuggingFace layout (transformers
//! `integrations/mxfp4.py`) stores a block's 16 bytes with element 2i in the low nibble and
//! 2i+1 in the high nibble of byte i, and its scales in a separate tensor.
//!
//! mxfp4r8 holds the same blocks, bytes and scales in 8-row interleaved units (rows a multiple
//! of 8), as q4r8 interleaves q4 (`blocks`): for row group g (rows 8g .. 8g+8) and block column b
//! (nb = cols/32 per row) the unit at byte (g·nb + b)·136 is the 8 blocks' nibble bytes, byte i
//! of row 8g + j at ((i / 4)·8 + j)·4 + i % 4 (one 32-byte load: 4 bytes of each of the 8 rows),
//! then their 8 E8M0 bytes (row j at 128 + j). Same length as mxfp4, same values.
//!
//! ```text
//! mxfp4r8 unit: qs u8 [4][8][4] (chunk c, row j, byte 4c..4c+4), e u8 [8]       (136 bytes)
//! ```

use super::blocks::{Layout, GROUP_ROWS, QK};
use super::finite::NonFinite;

/// Bytes of one block: its E8M0 exponent, then 16 bytes of nibbles.
pub const BLOCK_BYTES: usize = 1 + QK / 2;

/// The e2m1 values doubled, indexed by nibble (ggml's `kvalues_mxfp4`).
pub const KVALUES: [i8; 16] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/// 2^(e − 128): half the E8M0 scale, which multiplies the doubled `KVALUES` (ggml's
/// `ggml_e8m0_to_fp32_half`, bit for bit).
#[inline]
pub fn e8m0_to_f32_half(e: u8) -> f32 {
    let bits = if e < 2 { 0x0020_0000u32 << e } else { u32::from(e - 1) << 23 };
    f32::from_bits(bits)
}

/// Bytes of one mxfp4r8 unit: 8 rows' blocks of one block column.
pub const UNIT_BYTES: usize = GROUP_ROWS * BLOCK_BYTES;
/// Offset of the 8 E8M0 bytes inside an mxfp4r8 unit.
pub const UNIT_SCALES: usize = GROUP_ROWS * QK / 2;

/// E8M0 byte and 16 nibble bytes of row-major block `blk` (= r·nb + b) of a matrix stored in
/// `layout` (`Rows`: mxfp4; `Interleaved`: mxfp4r8).
#[inline]
pub fn block_in(bytes: &[u8], layout: Layout, blk: usize) -> (u8, [u8; QK / 2]) {
    match layout {
        Layout::Rows => {
            let b = &bytes[blk * BLOCK_BYTES..(blk + 1) * BLOCK_BYTES];
            (b[0], std::array::from_fn(|i| b[1 + i]))
        }
        Layout::Interleaved { nb } => {
            let (r, b) = (blk / nb, blk % nb);
            let unit = &bytes[((r / GROUP_ROWS) * nb + b) * UNIT_BYTES..][..UNIT_BYTES];
            let j = r % GROUP_ROWS;
            (unit[UNIT_SCALES + j], std::array::from_fn(|i| unit[((i / 4) * GROUP_ROWS + j) * 4 + i % 4]))
        }
    }
}

/// Dequantise `out.len()` elements of an mxfp4 matrix from element `start` (both multiples of
/// 32): `dequantize_row_mxfp4` of ggml-quants.c.
pub fn dequantize(bytes: &[u8], start: usize, out: &mut [f32]) {
    dequantize_in(bytes, Layout::Rows, start, out)
}

/// `dequantize` of a matrix stored in `layout` (mxfp4 or mxfp4r8): the same values.
pub fn dequantize_in(bytes: &[u8], layout: Layout, start: usize, out: &mut [f32]) {
    for (i, ob) in out.chunks_exact_mut(QK).enumerate() {
        let (e, qs) = block_in(bytes, layout, start / QK + i);
        let d = e8m0_to_f32_half(e);
        for (j, &q) in qs.iter().enumerate() {
            ob[j] = f32::from(KVALUES[usize::from(q & 15)]) * d;
            ob[j + QK / 2] = f32::from(KVALUES[usize::from(q >> 4)]) * d;
        }
    }
}

/// The nibble whose value · d is nearest to x (the first on ties): ggml's `best_index_mxfp4`.
fn best_index(x: f32, d: f32) -> u8 {
    let mut best = (0u8, (f32::from(KVALUES[0]) * d - x).abs());
    for (i, &k) in KVALUES.iter().enumerate().skip(1) {
        let err = (f32::from(k) * d - x).abs();
        if err < best.1 {
            best = (i as u8, err);
        }
    }
    best.0
}

/// mxfp4 blocks of x (a multiple of 32 values) as ggml's reference quantiser makes them
/// (`quantize_row_mxfp4_ref`): e = floor(log2 max|x|) − 2 + 127 (0 for an all-zero block),
/// each value to its nearest representable one.
pub fn quantize(x: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(x.len() / QK * BLOCK_BYTES);
    for xb in x.chunks_exact(QK) {
        let amax = xb.iter().fold(0f32, |m, v| m.max(v.abs()));
        let e = if amax > 0.0 { (amax.log2().floor() - 2.0 + 127.0) as u8 } else { 0 };
        let d = e8m0_to_f32_half(e);
        out.push(e);
        out.extend((0..QK / 2).map(|j| best_index(xb[j], d) | (best_index(xb[j + QK / 2], d) << 4)));
    }
    out
}

/// One block in ggml's layout from a HuggingFace block: its 16 bytes (element 2i low, 2i+1 high
/// nibble of byte i) and its E8M0 scale. Only moves bits.
pub fn from_hf_block(hf: &[u8; QK / 2], scale: u8) -> [u8; BLOCK_BYTES] {
    let nib = |k: usize| (hf[k / 2] >> (4 * (k % 2))) & 15;
    let mut out = [0u8; BLOCK_BYTES];
    out[0] = scale;
    for j in 0..QK / 2 {
        out[1 + j] = nib(j) | (nib(j + QK / 2) << 4);
    }
    out
}

/// The mxfp4r8 bytes of whole row groups of mxfp4 rows (`rows`: row-major blocks of rows with
/// `nb` blocks each, a multiple of 8 rows) into `out` (the same length). Only moves bytes.
pub fn interleave(rows: &[u8], nb: usize, out: &mut [u8]) {
    assert!(nb > 0 && rows.len() == out.len() && rows.len().is_multiple_of(nb * UNIT_BYTES));
    for (u, unit) in out.chunks_exact_mut(UNIT_BYTES).enumerate() {
        let (g, b) = (u / nb, u % nb);
        for j in 0..GROUP_ROWS {
            let blk = &rows[((g * GROUP_ROWS + j) * nb + b) * BLOCK_BYTES..][..BLOCK_BYTES];
            unit[UNIT_SCALES + j] = blk[0];
            for (i, &q) in blk[1..].iter().enumerate() {
                unit[((i / 4) * GROUP_ROWS + j) * 4 + i % 4] = q;
            }
        }
    }
}

/// mxfp4r8 bytes of x ([x.len() / cols, cols], whole row groups): `quantize`, interleaved.
pub fn quantize_r8(x: &[f32], cols: usize) -> Vec<u8> {
    let rows = quantize(x);
    let mut out = vec![0u8; rows.len()];
    interleave(&rows, cols / QK, &mut out);
    out
}

/// The first block whose scale is E8M0's NaN (255).
pub fn find_nan_scale(bytes: &[u8], _cols: usize) -> Option<NonFinite> {
    bytes.chunks_exact(BLOCK_BYTES).position(|b| b[0] == 255).map(|p| NonFinite::Scale(p as u64))
}

/// `find_nan_scale` of an mxfp4r8 matrix, reporting the row-major block index.
pub fn find_nan_scale_r8(bytes: &[u8], cols: usize) -> Option<NonFinite> {
    let nb = (cols / QK).max(1);
    bytes.chunks_exact(UNIT_BYTES).enumerate().find_map(|(u, unit)| {
        let j = unit[UNIT_SCALES..].iter().position(|&e| e == 255)?;
        let (g, b) = (u / nb, u % nb);
        Some(NonFinite::Scale(((g * GROUP_ROWS + j) * nb + b) as u64))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_follow_ggml_including_the_subnormal_ones() {
        assert_eq!(e8m0_to_f32_half(0), 2f32.powi(-128));
        assert_eq!(e8m0_to_f32_half(1), 2f32.powi(-127));
        assert_eq!(e8m0_to_f32_half(2), 2f32.powi(-126));
        assert_eq!(e8m0_to_f32_half(128), 1.0);
        assert_eq!(e8m0_to_f32_half(127), 0.5);
        assert_eq!(e8m0_to_f32_half(254), 2f32.powi(126));
    }

    #[test]
    fn quantiser_keeps_representable_values_and_packs_halves() {
        // Block 0: the e2m1 grid times 2^-1 (max 3 → e = floor(log2 3) − 2 + 127 = 126, d = 2^-2).
        let grid = [0.0f32, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0];
        let x: Vec<f32> = (0..32).map(|i| grid[i % 8] * 0.5 * if i >= 16 { -1.0 } else { 1.0 }).collect();
        let b = quantize(&x);
        assert_eq!(b.len(), BLOCK_BYTES);
        assert_eq!(b[0], 126);
        assert_eq!(b[1 + 1] & 15, 1, "element 1 (0.25 = 1 · 2^-2) in the low nibble of byte 1");
        assert_eq!(b[1 + 1] >> 4, 9, "element 17 (−0.25) in the high nibble of byte 1");
        let mut y = vec![0f32; 32];
        dequantize(&b, 0, &mut y);
        assert_eq!(x, y);
    }

    #[test]
    fn interleaved_units_hold_the_same_blocks_and_values() {
        // 16 rows × 3 blocks of arbitrary bytes (every nibble and scale value occurs).
        let (rows, nb) = (16, 3);
        let plain: Vec<u8> =
            (0..rows * nb * BLOCK_BYTES).map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let mut r8 = vec![0u8; plain.len()];
        interleave(&plain, nb, &mut r8);
        let grouped = Layout::Interleaved { nb };
        for blk in 0..rows * nb {
            assert_eq!(block_in(&r8, grouped, blk), block_in(&plain, Layout::Rows, blk), "block {blk}");
        }
        // Byte 5 of row 10's block 2: unit (1, 2), chunk 1, row 2, byte 1.
        assert_eq!(r8[(nb + 2) * UNIT_BYTES + (8 + 2) * 4 + 1], plain[(10 * nb + 2) * BLOCK_BYTES + 1 + 5]);
        let (mut a, mut b) = (vec![0f32; rows * nb * QK], vec![0f32; rows * nb * QK]);
        dequantize(&plain, 0, &mut a);
        dequantize_in(&r8, grouped, 0, &mut b);
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a), bits(&b));
        let mut part = vec![0f32; 2 * QK];
        dequantize_in(&r8, grouped, 9 * nb * QK + QK, &mut part);
        assert_eq!(bits(&part), bits(&a[9 * nb * QK + QK..][..2 * QK]));
        let mut nan = plain.clone();
        nan[(13 * nb + 1) * BLOCK_BYTES] = 255;
        interleave(&nan, nb, &mut r8);
        assert_eq!(find_nan_scale_r8(&r8, nb * QK), find_nan_scale(&nan, nb * QK));
        assert_eq!(find_nan_scale_r8(&r8, nb * QK), Some(NonFinite::Scale((13 * nb + 1) as u64)));
    }

    #[test]
    fn hf_blocks_repack_to_the_same_values() {
        let hf: [u8; 16] = std::array::from_fn(|i| (i as u8).wrapping_mul(37).wrapping_add(11));
        let b = from_hf_block(&hf, 130);
        let mut y = vec![0f32; 32];
        dequantize(&b, 0, &mut y);
        // transformers: value 2i = FP4[lo(byte i)] · 2^(e − 127), value 2i+1 = FP4[hi(byte i)] · ….
        let fp4 = [0.0f32, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0];
        for (k, &v) in y.iter().enumerate() {
            let nib = (hf[k / 2] >> (4 * (k % 2))) & 15;
            assert_eq!(v, fp4[usize::from(nib)] * 8.0, "element {k}");
        }
    }
}

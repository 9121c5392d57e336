//! The 8-row interleaved layouts of GGUF's q4_k, q6_k, iq4_xs and iq4_nl (dtypes q4_kr8 / q6_kr8 /
//! iq4_xsr8 / iq4_nlr8): the same ggml blocks, only their bytes moved, so that one 32-byte load holds 4 bytes
//! of each of 8 rows (what the int8 kernels of `kernels::x86::kr8` consume: one activation
//! broadcast meets 8 rows, whose sums build up in the 8 lanes of one vector). A lossless byte
//! permutation: dequantising is de-interleaving a row's block, then ggml's dequantisation of that
//! block.
//!
//! ```text
//! A matrix of R rows (a multiple of 8) and C columns (a multiple of the block, QK = 256; 32 for
//! iq4_nl) is R/8 · C/QK units; unit (g, b) — rows 8g..8g+8, columns QK·b..QK·b+QK — at byte
//! (g·C/QK + b) · 8·BB.
//! A unit holds the 8 rows' blocks as segments: bytes [at, at + F) of every row's block take 8F
//! bytes from unit byte `to`, the rows' bytes interleaved in chunks of `chunk` bytes:
//!     byte i of row r's segment  →  to + (⌊i / chunk⌋ · 8 + r) · chunk + i mod chunk
//!
//! q4_kr8 (BB 144, unit 1152)             q6_kr8 (BB 210, unit 1680)
//!   to    at    segment  F    chunk        to    at    segment     F    chunk
//!   0     0     d        2    2            0     192   scales      16   1
//!   16    2     dmin     2    2            128   208   d           2    2
//!   32    4     scales   12   4            144   128   qh[0..32]   32   4
//!   128   16    qs       128  4            400   0     ql[0..64]   64   4
//!                                          912   160   qh[32..64]  32   4
//!                                          1168  64    ql[64..128] 64   4
//!
//! iq4_xsr8 (BB 136, unit 1088)
//!   to    at    segment   F    chunk
//!   0     0     d         2    2
//!   16    2     scales_h  2    2
//!   32    4     scales_l  4    4
//!   64    8     qs        128  4
//!
//! iq4_nlr8 (QK 32, BB 18, unit 144)
//!   0     0     d         2    2
//!   16    2     qs        16   4
//! ```
//!
//! So q4_kr8's d / dmin are 8 f16 in row order, its scales three words of 8 rows (each row's
//! u32 words 0, 1, 2 of ggml's 12 packed bytes), its quants 32 chunks of 8 rows × 4 bytes.
//! q6_kr8 puts its 16 scales (16 runs of the 8 rows' i8) and d first, then each half block
//! (128 columns) as its qh chunks and the ql chunks they complete: a decode kernel reads the
//! unit front to back, a half's ql and qh side by side (the earlier order, ql, qh, scales, d as
//! in the ggml block, jumped between the ql and qh regions and streamed at two thirds of the
//! speed; it had dtype id 25, now refused). iq4_xsr8 is q4_kr8's order: d, the 6-bit scales
//! (each row's 8 high 2-bit parts in one u16, its 8 low nibbles in one u32, sub-block ib at bits
//! 2ib / 4ib), then 32 quant chunks, chunk 4ib + c holding bytes 4c.. of sub-block ib (elements
//! 4c.. in the low nibbles, 16 + 4c.. in the high).

use super::finite::NonFinite;
use super::ggml::{self, Block, BlockIq4Nl, BlockIq4Xs, BlockQ4K, BlockQ6K};
use super::DType;

/// Rows of one interleaved group.
pub const ROWS: usize = 8;

/// One segment of a ggml block: its offset and length in the block, where the 8 rows' bytes of
/// it start in the unit, and the chunk they interleave in.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    pub at: usize,
    pub len: usize,
    pub to: usize,
    pub chunk: usize,
}

const fn f(at: usize, len: usize, to: usize, chunk: usize) -> Field {
    Field { at, len, to, chunk }
}

/// A K-quant block type with an interleaved layout (its segments in unit order, covering the
/// block and the unit once).
pub trait Interleave: Block + Copy {
    const FIELDS: &'static [Field];
    const ZERO: Self;
}

impl Interleave for BlockQ4K {
    const FIELDS: &'static [Field] = &[f(0, 2, 0, 2), f(2, 2, 16, 2), f(4, 12, 32, 4), f(16, 128, 128, 4)];
    const ZERO: Self = BlockQ4K::ZERO;
}

impl Interleave for BlockQ6K {
    const FIELDS: &'static [Field] = &[
        f(192, 16, Q6_SCALES, 1),
        f(208, 2, Q6_D, 2),
        f(128, 32, Q6_QUANTS, 4),
        f(0, 64, Q6_QUANTS + 256, 4),
        f(160, 32, Q6_QUANTS + Q6_HALF, 4),
        f(64, 64, Q6_QUANTS + Q6_HALF + 256, 4),
    ];
    const ZERO: Self = BlockQ6K::ZERO;
}

impl Interleave for BlockIq4Xs {
    const FIELDS: &'static [Field] =
        &[f(0, 2, 0, 2), f(2, 2, IQ4_SCALES_H, 2), f(4, 4, IQ4_SCALES_L, 4), f(8, 128, IQ4_QUANTS, 4)];
    const ZERO: Self = BlockIq4Xs::ZERO;
}

impl Interleave for BlockIq4Nl {
    const FIELDS: &'static [Field] = &[f(0, 2, 0, 2), f(2, 16, IQ4NL_QUANTS, 4)];
    const ZERO: Self = BlockIq4Nl::ZERO;
}

/// Where an iq4_nlr8 unit (one 32-column block of 8 rows) holds its 4 quant chunks of 8 rows × 4
/// bytes (its 8 f16 d at 0).
pub const IQ4NL_QUANTS: usize = 16;

/// Where an iq4_xsr8 unit holds its 8 u16 high scale bits, its 8 u32 low scale nibbles and its
/// 32 quant chunks of 8 rows × 4 bytes (its 8 f16 d at 0).
pub const IQ4_SCALES_H: usize = 16;
pub const IQ4_SCALES_L: usize = 32;
pub const IQ4_QUANTS: usize = 64;

/// Where a q6_kr8 unit holds its 16 × 8 i8 scales, its 8 f16 d, and its quants: half block n
/// (columns 128n..128n + 128) in the Q6_HALF bytes from Q6_QUANTS + n·Q6_HALF, 8 qh chunks of
/// 8 rows × 4 bytes, then 16 ql chunks (sub-blocks 4n and 4n + 2 in the low / high nibbles of
/// the first 8, 4n + 1 and 4n + 3 in the last 8's).
pub const Q6_SCALES: usize = 0;
pub const Q6_D: usize = 128;
pub const Q6_QUANTS: usize = 144;
pub const Q6_HALF: usize = 768;

/// Bytes of one unit (8 blocks).
pub const fn unit_bytes<B: Block>() -> usize {
    ROWS * ggml::block_bytes::<B>()
}

/// Position in a unit of byte i of row r's field `fl` (see the module table).
#[inline]
fn pos(fl: &Field, r: usize, i: usize) -> usize {
    fl.to + (i / fl.chunk * ROWS + r) * fl.chunk + i % fl.chunk
}

/// Row r's block (r < 8) of one unit, as ggml stores it.
#[inline]
pub fn block_of<B: Interleave>(unit: &[u8], r: usize) -> B {
    let mut b = B::ZERO;
    // SAFETY: every `Block` is a #[repr(C)] struct of u8 arrays (size = its bytes, alignment 1,
    // any bit pattern valid): its bytes may be written as a byte slice.
    let out = unsafe { std::slice::from_raw_parts_mut((&mut b as *mut B).cast::<u8>(), ggml::block_bytes::<B>()) };
    for fl in B::FIELDS {
        for k in 0..fl.len / fl.chunk {
            let src = pos(fl, r, k * fl.chunk);
            out[fl.at + k * fl.chunk..fl.at + (k + 1) * fl.chunk].copy_from_slice(&unit[src..src + fl.chunk]);
        }
    }
    b
}

/// The row-major blocks of `rows` (whole groups of 8 rows, `nb` blocks each) interleaved into
/// `out` (the same length).
pub fn interleave_rows<B: Interleave>(rows: &[u8], nb: usize, out: &mut [u8]) {
    let bb = ggml::block_bytes::<B>();
    for (src, dst) in rows.chunks_exact(ROWS * nb * bb).zip(out.chunks_exact_mut(ROWS * nb * bb)) {
        for (b, unit) in dst.chunks_exact_mut(ROWS * bb).enumerate() {
            for r in 0..ROWS {
                let blk = &src[(r * nb + b) * bb..(r * nb + b + 1) * bb];
                for fl in B::FIELDS {
                    for k in 0..fl.len / fl.chunk {
                        let at = pos(fl, r, k * fl.chunk);
                        unit[at..at + fl.chunk].copy_from_slice(&blk[fl.at + k * fl.chunk..fl.at + (k + 1) * fl.chunk]);
                    }
                }
            }
        }
    }
}

/// Row-major blocks of whole row groups (rows of `cols` elements) in `dtype`'s interleaved layout
/// (q4_kr8 from q4_k bytes, q6_kr8 from q6_k, iq4_xsr8 from iq4_xs, iq4_nlr8 from iq4_nl); an error names what does not
/// fit.
pub fn interleave(dtype: DType, row_major: &[u8], cols: usize) -> Result<Vec<u8>, String> {
    let bb = dtype.info().block_bytes as usize;
    let qk = dtype.block();
    let nb = cols / qk;
    if !cols.is_multiple_of(qk) || cols == 0 || !row_major.len().is_multiple_of(ROWS * nb * bb) {
        return Err(format!("{} bytes are not whole groups of 8 rows of {cols} {dtype} columns", row_major.len()));
    }
    let mut out = vec![0u8; row_major.len()];
    match dtype {
        DType::Q4KR8 => interleave_rows::<BlockQ4K>(row_major, nb, &mut out),
        DType::Q6KR8 => interleave_rows::<BlockQ6K>(row_major, nb, &mut out),
        DType::Iq4XsR8 => interleave_rows::<BlockIq4Xs>(row_major, nb, &mut out),
        DType::Iq4NlR8 => interleave_rows::<BlockIq4Nl>(row_major, nb, &mut out),
        _ => return Err(format!("{dtype} has no interleaved K-quant layout")),
    }
    Ok(out)
}

/// Row r's block b of an interleaved matrix with `nb` blocks per row.
#[inline]
pub fn row_block<B: Interleave>(bytes: &[u8], nb: usize, r: usize, b: usize) -> B {
    let ub = unit_bytes::<B>();
    let u = (r / ROWS * nb + b) * ub;
    block_of::<B>(&bytes[u..u + ub], r % ROWS)
}

/// Elements [start, start + out.len()) (whole blocks) of an interleaved matrix with rows of
/// `cols`, dequantised as ggml does (the dtype table's `dequantize`).
pub fn dequantize<B: Interleave>(bytes: &[u8], cols: usize, start: usize, out: &mut [f32]) {
    let nb = cols / B::QK;
    for (k, o) in out.chunks_exact_mut(B::QK).enumerate() {
        let e = start + k * B::QK;
        row_block::<B>(bytes, nb, e / cols, e % cols / B::QK).dequantize(o);
    }
}

/// The interleaved bytes of f32 values [x.len() / cols, cols] (ggml's reference quantiser, then
/// interleaved; the rows must be whole groups).
pub fn encode<B: Interleave>(x: &[f32], cols: usize) -> Vec<u8> {
    let rows = ggml::quantize::<B>(x);
    let mut out = vec![0u8; rows.len()];
    interleave_rows::<B>(&rows, cols / B::QK, &mut out);
    out
}

/// First block (counted row-major) of an interleaved matrix one of whose f16 scales is NaN/Inf.
pub fn find_bad_scale<B: Interleave>(bytes: &[u8], cols: usize) -> Option<NonFinite> {
    let nb = cols.max(1) / B::QK;
    let rows = if nb == 0 { 0 } else { bytes.len() / (nb * ggml::block_bytes::<B>()) };
    (0..rows * nb)
        .find(|&i| ggml::find_bad_scale::<B>(ggml::bytes_of(&row_block::<B>(bytes, nb, i / nb, i % nb))).is_some())
        .map(|i| NonFinite::Scale(i as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Interleaving then taking each row's blocks back gives the row-major blocks.
    fn round_trip<B: Interleave>() {
        let (rows, nb) = (16, 2);
        let bb = ggml::block_bytes::<B>();
        let src: Vec<u8> = (0..rows * nb * bb).map(|i| (i * 131 % 251) as u8).collect();
        let mut il = vec![0u8; src.len()];
        interleave_rows::<B>(&src, nb, &mut il);
        assert_ne!(il, src);
        for r in 0..rows {
            for b in 0..nb {
                let blk = row_block::<B>(&il, nb, r, b);
                assert_eq!(ggml::bytes_of(&blk), &src[(r * nb + b) * bb..(r * nb + b + 1) * bb], "row {r} block {b}");
            }
        }
        // The segments cover the block once and the unit once, each 8 rows' bytes in turn.
        let mut at: Vec<_> = B::FIELDS.iter().map(|f| (f.at, f.len)).collect();
        at.sort();
        assert!(at.windows(2).all(|w| w[0].0 + w[0].1 == w[1].0) && at[0].0 == 0);
        assert_eq!(B::FIELDS.iter().map(|f| f.len).sum::<usize>(), bb);
        assert!(B::FIELDS.windows(2).all(|w| w[0].to + ROWS * w[0].len == w[1].to) && B::FIELDS[0].to == 0);
    }

    #[test]
    fn interleaving_is_a_byte_permutation() {
        round_trip::<BlockQ4K>();
        round_trip::<BlockQ6K>();
        round_trip::<BlockIq4Xs>();
        round_trip::<BlockIq4Nl>();
    }

    #[test]
    fn q4_kr8_puts_four_bytes_of_each_row_in_one_chunk() {
        // Unit byte 128 + 32k + 4r + i is qs byte 4k + i of row r.
        let il = encode::<BlockQ4K>(&(0..8 * 256).map(|i| (i % 17) as f32 - 8.0).collect::<Vec<_>>(), 256);
        let rm = ggml::quantize::<BlockQ4K>(&(0..8 * 256).map(|i| (i % 17) as f32 - 8.0).collect::<Vec<_>>());
        for r in 0..8 {
            for k in 0..32 {
                assert_eq!(
                    il[128 + 32 * k + 4 * r..128 + 32 * k + 4 * r + 4],
                    rm[144 * r + 16 + 4 * k..144 * r + 20 + 4 * k]
                );
            }
        }
    }

    #[test]
    fn q6_kr8_puts_a_halfs_qh_and_ql_side_by_side_after_the_scales_and_d() {
        let x: Vec<f32> = (0..8 * 512).map(|i| ((i * 37 % 101) as f32 - 50.0) / 7.0).collect();
        let (il, rm) = (encode::<BlockQ6K>(&x, 512), ggml::quantize::<BlockQ6K>(&x));
        for (b, unit) in il.chunks_exact(1680).enumerate() {
            for r in 0..8 {
                let blk = &rm[210 * (2 * r + b)..210 * (2 * r + b + 1)];
                for s in 0..16 {
                    assert_eq!(unit[Q6_SCALES + 8 * s + r], blk[192 + s], "scale {s} of row {r}");
                }
                assert_eq!(unit[Q6_D + 2 * r..Q6_D + 2 * r + 2], blk[208..210]);
                for n in 0..2 {
                    let half = Q6_QUANTS + n * Q6_HALF;
                    for k in 0..8 {
                        let qh = half + 32 * k + 4 * r;
                        assert_eq!(unit[qh..qh + 4], blk[128 + 32 * n + 4 * k..132 + 32 * n + 4 * k]);
                    }
                    for k in 0..16 {
                        let ql = half + 256 + 32 * k + 4 * r;
                        assert_eq!(unit[ql..ql + 4], blk[64 * n + 4 * k..64 * n + 4 * k + 4]);
                    }
                }
            }
        }
    }
}

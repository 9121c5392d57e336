//! The 8-row interleaved layouts of GGUF's q4_k and q6_k (dtypes q4_kr8 / q6_kr8): the same
//! ggml blocks, only their bytes moved, so that one 32-byte load holds 4 bytes of each of 8
//! rows (what the int8 kernels of `kernels::x86::kr8` consume: one activation broadcast meets 8
//! rows, whose sums build up in the 8 lanes of one vector). A lossless byte permutation:
//! dequantising is de-interleaving a row's block, then ggml's dequantisation of that block.
//!
//! ```text
//! A matrix of R rows (a multiple of 8) and C columns (a multiple of 256) is R/8 · C/256 units;
//! unit (g, b) — rows 8g..8g+8, columns 256b..256b+256 — at byte (g·C/256 + b) · 8·BB.
//! A unit holds the 8 rows' blocks field by field, in the ggml block's field order; a field of
//! F bytes per block takes 8F bytes, the rows' bytes interleaved in chunks of `chunk` bytes:
//!     byte i of row r's field  →  field start + (⌊i / chunk⌋ · 8 + r) · chunk + i mod chunk
//!
//! q4_kr8 (BB 144, unit 1152)        q6_kr8 (BB 210, unit 1680)
//!   at    field    F    chunk         at    field    F    chunk
//!   0     d        2    2             0     ql       128  4
//!   16    dmin     2    2             1024  qh       64   4
//!   32    scales   12   4             1536  scales   16   1
//!   128   qs       128  4             1664  d        2    2
//! ```
//!
//! So q4_kr8's d / dmin are 8 f16 in row order, its scales three words of 8 rows (each row's
//! u32 words 0, 1, 2 of ggml's 12 packed bytes), its quants 32 chunks of 8 rows × 4 bytes;
//! q6_kr8's 16 scales are 16 runs of the 8 rows' i8.

use super::ggml::{self, Block, BlockQ4K, BlockQ6K, QK_K};
use super::DType;

/// Rows of one interleaved group.
pub const ROWS: usize = 8;

/// One field of a ggml block: its offset and length in the block, and the chunk its rows'
/// bytes interleave in.
#[derive(Clone, Copy, Debug)]
pub struct Field {
    pub at: usize,
    pub len: usize,
    pub chunk: usize,
}

const fn f(at: usize, len: usize, chunk: usize) -> Field {
    Field { at, len, chunk }
}

/// A K-quant block type with an interleaved layout (its fields in block order, covering it).
pub trait Interleave: Block + Copy {
    const FIELDS: &'static [Field];
    const ZERO: Self;
}

impl Interleave for BlockQ4K {
    const FIELDS: &'static [Field] = &[f(0, 2, 2), f(2, 2, 2), f(4, 12, 4), f(16, 128, 4)];
    const ZERO: Self = BlockQ4K::ZERO;
}

impl Interleave for BlockQ6K {
    const FIELDS: &'static [Field] = &[f(0, 128, 4), f(128, 64, 4), f(192, 16, 1), f(208, 2, 2)];
    const ZERO: Self = BlockQ6K::ZERO;
}

/// Bytes of one unit (8 blocks).
pub const fn unit_bytes<B: Block>() -> usize {
    ROWS * ggml::block_bytes::<B>()
}

/// Position in a unit of byte i of row r's field `fl` (see the module table).
#[inline]
fn pos(fl: &Field, r: usize, i: usize) -> usize {
    ROWS * fl.at + (i / fl.chunk * ROWS + r) * fl.chunk + i % fl.chunk
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

/// Row-major blocks of whole row groups (rows of `cols` elements) in `dtype`'s interleaved
/// layout (q4_kr8 from q4_k bytes, q6_kr8 from q6_k bytes); an error names what does not fit.
pub fn interleave(dtype: DType, row_major: &[u8], cols: usize) -> Result<Vec<u8>, String> {
    let bb = dtype.info().block_bytes as usize;
    let nb = cols / QK_K;
    if !cols.is_multiple_of(QK_K) || cols == 0 || !row_major.len().is_multiple_of(ROWS * nb * bb) {
        return Err(format!("{} bytes are not whole groups of 8 rows of {cols} {dtype} columns", row_major.len()));
    }
    let mut out = vec![0u8; row_major.len()];
    match dtype {
        DType::Q4KR8 => interleave_rows::<BlockQ4K>(row_major, nb, &mut out),
        DType::Q6KR8 => interleave_rows::<BlockQ6K>(row_major, nb, &mut out),
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
    let nb = cols / QK_K;
    for (k, o) in out.chunks_exact_mut(QK_K).enumerate() {
        let e = start + k * QK_K;
        row_block::<B>(bytes, nb, e / cols, e % cols / QK_K).dequantize(o);
    }
}

/// The interleaved bytes of f32 values [x.len() / cols, cols] (ggml's reference quantiser, then
/// interleaved; the rows must be whole groups).
pub fn encode<B: Interleave>(x: &[f32], cols: usize) -> Vec<u8> {
    let rows = ggml::quantize::<B>(x);
    let mut out = vec![0u8; rows.len()];
    interleave_rows::<B>(&rows, cols / QK_K, &mut out);
    out
}

/// First block (counted row-major) of an interleaved matrix one of whose f16 scales is NaN/Inf.
pub fn find_bad_scale<B: Interleave>(bytes: &[u8], cols: usize) -> Option<u64> {
    let nb = cols.max(1) / QK_K;
    let rows = if nb == 0 { 0 } else { bytes.len() / (nb * ggml::block_bytes::<B>()) };
    (0..rows * nb)
        .find(|&i| ggml::find_bad_scale::<B>(ggml::bytes_of(&row_block::<B>(bytes, nb, i / nb, i % nb))).is_some())
        .map(|i| i as u64)
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
        // Every field covers its block once.
        assert_eq!(B::FIELDS.iter().map(|f| f.len).sum::<usize>(), bb);
    }

    #[test]
    fn interleaving_is_a_byte_permutation() {
        round_trip::<BlockQ4K>();
        round_trip::<BlockQ6K>();
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
}

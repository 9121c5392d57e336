//! GGUF q5_0 rows re-laid as q8r8 units at run time: the operand of q5_0's int8 prefill. A q5_0
//! weight is d·(q − 16) with q ∈ [0, 31] and an f16 d per block of 32, so q − 16 is an int8
//! quant under the same scale and the copy is exact; the interleaved q8r8 kernels (several
//! activation rows per weight load, `vpdpbusd` on AVX-512 VNNI) then serve the product. The
//! file keeps q5_0's 22 bytes per 32 weights; only a task's few rows are widened, into a
//! per-thread buffer, once per product.
//!
//! This is the scalar specification of the copy, which the SIMD copies (`x86::q5r8`) are tested
//! against byte for byte.

use crate::format::blocks::{q8_bytes, Layout, GROUP_ROWS, QK};
use crate::format::ggml::{blocks, Block, BlockQ5_0, Unpacked};
use std::ops::Range;

/// Rows [rows.start, rows.end) (whole groups of 8 from a multiple of 8) of the row-major q5_0
/// matrix `src` ([.., cols]) as a q8r8 matrix [rows.len(), cols] in `dst` (its `q8_bytes`):
/// element i of block b of row r has quant q − 16 at the q8r8 position of that row and block,
/// and the block keeps its f16 scale bits.
pub fn q5_0_as_q8r8(src: &[u8], cols: usize, rows: Range<usize>, dst: &mut [u8]) {
    let (len, nb) = (rows.len(), cols / QK);
    assert!(rows.start.is_multiple_of(GROUP_ROWS) && len.is_multiple_of(GROUP_ROWS) && cols.is_multiple_of(QK));
    assert_eq!(dst.len(), q8_bytes(len * cols), "q5_0_as_q8r8: destination size");
    let layout = Layout::Interleaved { nb };
    let (qs, d) = dst.split_at_mut(len * cols);
    let mut u = Unpacked::default();
    for (i, blk) in blocks::<BlockQ5_0>(src)[rows.start * nb..rows.end * nb].iter().enumerate() {
        blk.unpack(0, &mut u);
        for (e, &q) in u.q.iter().enumerate() {
            qs[layout.byte_pos(i, e, QK)] = q as u8;
        }
        let s = layout.scale_pos(i);
        d[2 * s..2 * s + 2].copy_from_slice(&blk.d);
    }
}

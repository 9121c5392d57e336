//! Where the 32-element blocks of a row-major q8 / q4 matrix are, for the float-activation
//! kernels that serve every stored form of those blocks (`gemv::gemv_quant`,
//! `tile::widen_quant`): colibri's q8 / q4 (all blocks' quants, then all f16 scales) and GGUF's
//! q8_0 / q4_0 (each block its f16 scale, then its quants: the same values, see
//! `format::blocks::q8_0_block` and the ggml tests).
//!
//! ```text
//! block i (counted row-major over the matrix: row r's block b is i = r·cols/32 + b)
//!   quants at q + i·q_step (32 i8, or 16 bytes of nibbles)   f16 scale at d + i·d_step
//!   q8 / q4      q_step 32 / 16, d_step 2   (d: the scale region)
//!   q8_0 / q4_0  q_step = d_step = 34 / 18  (q = d + 2: the block's start)
//! ```

use super::super::mat::Mat;
use crate::format::blocks::QK;
use crate::format::DType;

/// The blocks of one bound matrix (see the module table). Valid for the matrix's blocks only.
#[derive(Clone, Copy)]
pub(super) struct BlockRows {
    q: *const u8,
    q_step: usize,
    d: *const u8,
    d_step: usize,
}

impl BlockRows {
    /// The blocks of `w`: q4 or q4_0 when `Q4`, else q8 or q8_0 (any other dtype panics).
    pub fn of<const Q4: bool>(w: Mat<'_>) -> BlockRows {
        let qb = if Q4 { QK / 2 } else { QK };
        match (w.dtype(), Q4) {
            (DType::Q8, false) => {
                let m = w.q8();
                BlockRows { q: m.qs.as_ptr().cast(), q_step: qb, d: m.d.as_ptr().cast(), d_step: 2 }
            }
            (DType::Q4, true) => {
                let m = w.q4();
                BlockRows { q: m.qs.as_ptr(), q_step: qb, d: m.d.as_ptr().cast(), d_step: 2 }
            }
            (DType::Q8_0, false) | (DType::Q4_0, true) => {
                let base = w.bytes().as_ptr();
                BlockRows { q: base.wrapping_add(2), q_step: 2 + qb, d: base, d_step: 2 + qb }
            }
            (d, _) => panic!("row-major {} blocks asked of a {d} matrix", if Q4 { "q4" } else { "q8" }),
        }
    }

    /// The quants of block i.
    #[inline(always)]
    pub fn quants(&self, i: usize) -> *const u8 {
        self.q.wrapping_add(i * self.q_step)
    }

    /// The f16 scale bits of block i.
    ///
    /// # Safety
    /// Block i is a block of the matrix these rows were taken from.
    #[inline(always)]
    pub unsafe fn scale(&self, i: usize) -> u16 {
        // SAFETY: the caller names a block of the bound matrix, whose 2 scale bytes are there
        // (any alignment).
        u16::from_le(unsafe { self.d.add(i * self.d_step).cast::<u16>().read_unaligned() })
    }
}

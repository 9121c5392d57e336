//! The transposes of the GEMMs' write-back and of attention's key panels on AVX: 8 × 8 blocks of f32 through registers (unpack, shuffle,
//! 128-bit lane permute), the edges element by element. Moves values only: the result is the
//! portable one's, bit for bit.

use core::arch::x86_64::*;

/// dst[j·rows + i] = src[i·lds + j] for i < rows, j < cols (see `table::TransposeFn`).
pub fn transpose(src: &[f32], lds: usize, rows: usize, cols: usize, dst: &mut [f32]) {
    assert!(dst.len() >= rows * cols && (rows == 0 || cols == 0 || src.len() >= (rows - 1) * lds + cols));
    let (whole_rows, whole_cols) = (rows - rows % 8, cols - cols % 8);
    for i0 in (0..whole_rows).step_by(8) {
        for j0 in (0..whole_cols).step_by(8) {
            // SAFETY: rows i0..i0 + 8 of src hold columns j0..j0 + 8 (asserted: j0 + 8 ≤ cols),
            // and dst rows j0..j0 + 8 hold columns i0..i0 + 8 (rows·cols elements); reached
            // only from the x86 tables, whose CPUs have AVX.
            unsafe { block8(src.as_ptr().add(i0 * lds + j0), lds, dst.as_mut_ptr().add(j0 * rows + i0), rows) };
        }
    }
    // The edges: the last rows % 8 rows, and the last cols % 8 columns of the whole rows.
    for i in 0..rows {
        let from = if i < whole_rows { whole_cols } else { 0 };
        for j in from..cols {
            dst[j * rows + i] = src[i * lds + j];
        }
    }
}

/// One 8 × 8 block: row j of the output (8 floats at dst + j·ldd) is column j of the 8 input rows.
#[target_feature(enable = "avx")]
unsafe fn block8(src: *const f32, lds: usize, dst: *mut f32, ldd: usize) {
    // SAFETY: the caller's bounds: 8 rows of 8 floats from src, lds apart; 8 of dst, ldd apart.
    unsafe {
        let r = |i: usize| _mm256_loadu_ps(src.add(i * lds));
        // Rows paired by element (per 128-bit half: columns 0, 1 / 4, 5 and 2, 3 / 6, 7) ...
        let (t0, t1) = (_mm256_unpacklo_ps(r(0), r(1)), _mm256_unpackhi_ps(r(0), r(1)));
        let (t2, t3) = (_mm256_unpacklo_ps(r(2), r(3)), _mm256_unpackhi_ps(r(2), r(3)));
        let (t4, t5) = (_mm256_unpacklo_ps(r(4), r(5)), _mm256_unpackhi_ps(r(4), r(5)));
        let (t6, t7) = (_mm256_unpacklo_ps(r(6), r(7)), _mm256_unpackhi_ps(r(6), r(7)));
        // ... then four rows per column: s_c holds column c (low half) and c + 4 (high half).
        let s = [
            (_mm256_shuffle_ps::<0x44>(t0, t2), _mm256_shuffle_ps::<0x44>(t4, t6)),
            (_mm256_shuffle_ps::<0xEE>(t0, t2), _mm256_shuffle_ps::<0xEE>(t4, t6)),
            (_mm256_shuffle_ps::<0x44>(t1, t3), _mm256_shuffle_ps::<0x44>(t5, t7)),
            (_mm256_shuffle_ps::<0xEE>(t1, t3), _mm256_shuffle_ps::<0xEE>(t5, t7)),
        ];
        // Rows 0-3 and 4-7 of column c, and of column c + 4.
        for (c, &(a, b)) in s.iter().enumerate() {
            _mm256_storeu_ps(dst.add(c * ldd), _mm256_permute2f128_ps::<0x20>(a, b));
            _mm256_storeu_ps(dst.add((c + 4) * ldd), _mm256_permute2f128_ps::<0x31>(a, b));
        }
    }
}

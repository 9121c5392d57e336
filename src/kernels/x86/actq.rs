//! AVX2 quantiser of activation blocks for the W8A8 / W4A8 kernels: the same bits as
//! `actq::quantize_blocks` (same division and multiplication; round-half-away-from-zero built
//! from truncation, since the vector rounding mode is half-to-even).

use crate::format::blocks::QK;
use core::arch::x86_64::*;

/// See `actq::quantize_blocks` (x.len() a multiple of 32; qs, d, sums sized for it).
pub fn quantize_blocks(x: &[f32], qs: &mut [i8], d: &mut [f32], sums: &mut [i32]) {
    let nb = x.len() / QK;
    assert!(x.len().is_multiple_of(QK) && qs.len() >= x.len() && d.len() >= nb && sums.len() >= nb);
    for b in 0..nb {
        // SAFETY: the AVX2 table is only reachable on AVX2+FMA+F16C CPUs; block b's 32 values
        // and 32 quants are inside x and qs (asserted).
        let (db, sum) = unsafe { block(x.as_ptr().add(b * QK), qs.as_mut_ptr().add(b * QK)) };
        d[b] = db;
        sums[b] = sum;
    }
}

/// One block: writes 32 quants at `q`, returns (d, Σ q).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn block(x: *const f32, q: *mut i8) -> (f32, i32) {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        let v: [__m256; 4] = std::array::from_fn(|i| _mm256_loadu_ps(x.add(8 * i)));
        let sign = _mm256_set1_ps(-0.0);
        let mut amax = _mm256_setzero_ps();
        let mut nan = _mm256_setzero_ps();
        for vi in v {
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, vi));
            nan = _mm256_or_ps(nan, _mm256_cmp_ps::<_CMP_UNORD_Q>(vi, vi));
        }
        let m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps::<1>(amax));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_cvtss_f32(_mm_max_ss(m, _mm_movehdup_ps(m)));
        let has_nan = _mm256_movemask_ps(nan) != 0;
        let d = if has_nan { f32::NAN } else { m / 127.0 };
        if !(d > 0.0 && d.is_finite() && (1.0 / d).is_finite()) {
            // d = 0, NaN, ∞ or subnormal (1/d overflows): every quant 0, as in the reference.
            std::ptr::write_bytes(q, 0, QK);
            return (d, 0);
        }
        let inv = _mm256_set1_ps(1.0 / d);
        let half = _mm256_set1_ps(0.5);
        let one = _mm256_set1_ps(1.0);
        let mut ints = [_mm256_setzero_si256(); 4];
        for (i, vi) in v.into_iter().enumerate() {
            let y = _mm256_mul_ps(vi, inv);
            // round half away from zero: trunc(y) + sign(y) where |y − trunc(y)| ≥ 0.5.
            let t = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(y);
            let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(y, t));
            let away =
                _mm256_and_ps(_mm256_cmp_ps::<_CMP_GE_OQ>(frac, half), _mm256_or_ps(one, _mm256_and_ps(sign, y)));
            ints[i] = _mm256_cvtps_epi32(_mm256_add_ps(t, away));
        }
        // Pack 4 × 8 i32 to 32 i8 in element order (the packs interleave 128-bit lanes).
        let w01 = _mm256_packs_epi32(ints[0], ints[1]);
        let w23 = _mm256_packs_epi32(ints[2], ints[3]);
        let bytes = _mm256_packs_epi16(w01, w23);
        let bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256(q.cast(), bytes);
        let s = _mm256_add_epi32(_mm256_add_epi32(ints[0], ints[1]), _mm256_add_epi32(ints[2], ints[3]));
        let s = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256::<1>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b01_00_11_10>(s));
        let s = _mm_add_epi32(s, _mm_shuffle_epi32::<0b10_11_00_01>(s));
        (d, _mm_cvtsi128_si32(s))
    }
}

//! The delta rule's decode step (`table::DeltaStepFn`) on AVX2 (8 lanes) and AVX-512 (16 lanes):
//! the state's columns in blocks of up to 8 vectors kept in registers — one pass over the
//! block's rows for Sᵀk, a second writing S' = decay·S + k ⊗ δ and accumulating S'ᵀq — so
//! S is read twice (the second time from cache) and written once. A v_dim that is not a
//! multiple of the lane count takes the reference.

use crate::kernels::delta::{check, reference_step};
use crate::kernels::table::DeltaToken;
use std::arch::x86_64::*;

/// Defines `$name`, the step over blocks of `$w`-lane vectors of type `$v`, compiled for
/// `$feat`; the block function `$block` keeps NB vectors of a column block in registers.
macro_rules! delta_step {
    ($name:ident, $block:ident, $feat:literal, $v:ty, $w:expr, $load:ident, $store:ident, $fma:ident,
     $mul:ident, $sub:ident, $set1:ident, $zero:ident) => {
        /// Columns [j0, j0 + NB·lanes) of the step; `src` and `dst` may be the same state.
        #[inline]
        #[target_feature(enable = $feat)]
        unsafe fn $block<const NB: usize>(
            src: *const f32,
            dst: *mut f32,
            t: &DeltaToken<'_>,
            j0: usize,
            out: *mut f32,
        ) {
            let dv = t.v.len();
            // SAFETY: the caller checked the lengths: rows of dv columns, j0 + NB·lanes ≤ dv.
            unsafe {
                let mut acc = [$zero(); NB];
                for (i, &ki) in t.k.iter().enumerate() {
                    let (kv, row) = ($set1(ki), src.add(i * dv + j0));
                    for (u, a) in acc.iter_mut().enumerate() {
                        *a = $fma(kv, $load(row.add(u * $w)), *a);
                    }
                }
                let (decay, beta) = ($set1(t.decay), $set1(t.beta));
                let mut delta = [$zero(); NB];
                for (u, d) in delta.iter_mut().enumerate() {
                    let v = $load(t.v.as_ptr().add(j0 + u * $w));
                    *d = $mul(beta, $sub(v, $mul(decay, acc[u])));
                }
                let mut o = [$zero(); NB];
                for (i, (&ki, &qi)) in t.k.iter().zip(t.q).enumerate() {
                    let (kv, qv) = ($set1(ki), $set1(qi));
                    for u in 0..NB {
                        let at = i * dv + j0 + u * $w;
                        let next = $fma(kv, delta[u], $mul(decay, $load(src.add(at))));
                        $store(dst.add(at), next);
                        o[u] = $fma(qv, next, o[u]);
                    }
                }
                for (u, ou) in o.iter().enumerate() {
                    $store(out.add(j0 + u * $w), *ou);
                }
            }
        }

        /// The step (`table::DeltaStepFn`) on this path.
        pub fn $name(from: Option<&[f32]>, s: &mut [f32], t: &DeltaToken<'_>, out: &mut [f32]) {
            let (_, dv) = check(from, s, t, out);
            if dv % $w != 0 {
                return reference_step(from, s, t, out);
            }
            let dst = s.as_mut_ptr();
            let src = from.map_or(dst.cast_const(), <[f32]>::as_ptr);
            let mut j0 = 0;
            // SAFETY: this table exists only on CPUs with these features; the lengths are
            // checked (state [k_dim, dv], out [dv], dv a multiple of the lanes); src is either
            // a separate slice or dst itself, only ever read at an element before it is written.
            unsafe {
                while j0 + 8 * $w <= dv {
                    $block::<8>(src, dst, t, j0, out.as_mut_ptr());
                    j0 += 8 * $w;
                }
                while j0 < dv {
                    $block::<1>(src, dst, t, j0, out.as_mut_ptr());
                    j0 += $w;
                }
            }
        }
    };
}

delta_step!(
    step_avx2,
    block_avx2,
    "avx2,fma",
    __m256,
    8,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_fmadd_ps,
    _mm256_mul_ps,
    _mm256_sub_ps,
    _mm256_set1_ps,
    _mm256_setzero_ps
);
delta_step!(
    step_avx512,
    block_avx512,
    "avx512f,avx2,fma",
    __m512,
    16,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_fmadd_ps,
    _mm512_mul_ps,
    _mm512_sub_ps,
    _mm512_set1_ps,
    _mm512_setzero_ps
);

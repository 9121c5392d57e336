//! AVX2 and AVX-512 VNNI int8-activation kernels of mxfp4r8 matrices (`format::mxfp4`: MXFP4
//! blocks in 8-row interleaved units). One 32-byte load of a unit holds 4 nibble bytes of each of
//! 8 rows (elements 4c.. in the low nibbles, 16 + 4c.. in the high), so a broadcast of 4
//! activation bytes meets 8 rows and the 8 row sums build up in the 8 lanes of one vector, with
//! no horizontal adds; each weight load is unpacked once for several activation rows.
//!
//! The nibbles become e2m1 values through one `vpshufb` of a table holding ggml's doubled values
//! plus 12 (`KVALUES` + 12 ∈ [0, 24]: unsigned, as `vpmaddubsw` / `vpdpbusd` want their first
//! operand); Σ (v + 12)·x − 12·Σx = Σ v·x, exact in integers (Σx is the activation block's sum).
//! The 8 E8M0 scales are widened to f32 as a vector (`e8m0_to_f32_half` lane by lane), and
//! every block's sum is scaled and accumulated as the reference does (d·dx, times the sum, then
//! added; no fused multiply-add): the results are the reference's bit for bit.
//!
//! * AVX2: `vpmaddubsw` per chunk half, two chunks' four products summed in i16
//!   (|Σ| ≤ 4·2·24·128 < 2¹⁵), `vpmaddwd` to i32; four activation rows per pass.
//! * AVX-512 VNNI: one `vpdpbusd` per chunk half into i32 lanes (256-bit EVEX forms, as
//!   `vnni`); eight activation rows per pass.
//!
//! Float activations and the GEMM's widening copy the rows' blocks back to mxfp4 order and run
//! the row-major kernels (`mxfp4`).

use super::super::actq::QuantizedActs;
use super::super::generic;
use super::super::mat::Mat;
use super::mxfp4;
use super::qgroup::{bcast4, by_groups, store, Acts};
use crate::format::blocks::{CHUNK, GROUP_ROWS, QK};
use crate::format::mxfp4::{block_in, BLOCK_BYTES, KVALUES, UNIT_BYTES, UNIT_SCALES};
use crate::format::DType;
use core::arch::x86_64::*;
use std::ops::Range;

/// What the value table adds to ggml's doubled e2m1 values (their largest magnitude).
const OFFSET: i32 = 12;

/// `KVALUES` + 12 as unsigned bytes, in both 128-bit lanes (`vpshufb` looks up per lane).
static TABLE: [u8; 32] = {
    let mut t = [0u8; 32];
    let mut i = 0;
    while i < 32 {
        t[i] = (KVALUES[i % 16] as i32 + OFFSET) as u8;
        i += 1;
    }
    t
};

/// Ask for the three lines `tune::stream_ahead` past the unit at u (as `qgroup`), where the
/// kernels do (`tune::mxfp4r8_prefetch`; a hint: any address is fine).
#[inline(always)]
fn ahead(u: *const u8) {
    let ahead = super::tune::stream_ahead();
    for line in [0, 64, 128] {
        super::tune::prefetch_line(u.wrapping_add(ahead.bytes + line), ahead);
    }
}

/// The 8 scales of the unit at `u` as f32 (`e8m0_to_f32_half` of each: 2^(e − 128), with e = 0
/// and 1 the subnormals 2^-128 and 2^-127).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scales(u: *const u8) -> __m256 {
    // SAFETY: the caller passes a whole unit.
    unsafe {
        let e = _mm256_cvtepu8_epi32(_mm_loadl_epi64(u.add(UNIT_SCALES).cast()));
        let normal = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
        let sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x0020_0000), e);
        let small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
        _mm256_castsi256_ps(_mm256_blendv_epi8(normal, sub, small))
    }
}

/// Chunk c of the unit at `u` as values + 12: (elements 4c.. of each row, elements 16 + 4c..).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn chunk(u: *const u8, c: usize) -> (__m256i, __m256i) {
    // SAFETY: the caller passes a whole unit and c < 4.
    unsafe {
        let (table, m) = (_mm256_loadu_si256(TABLE.as_ptr().cast()), _mm256_set1_epi8(15));
        let w = _mm256_loadu_si256(u.add(c * 32).cast());
        let lo = _mm256_shuffle_epi8(table, _mm256_and_si256(w, m));
        let hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(w, 4), m));
        (lo, hi)
    }
}

/// acc += d·dx_b · (s − 12·Σx_b) per lane, in the reference's float order.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn scale_add(acc: __m256, s: __m256i, d: __m256, x: Acts, b: usize) -> __m256 {
    // SAFETY: the caller passes activation rows of more than b blocks.
    unsafe {
        let si = _mm256_sub_epi32(s, _mm256_set1_epi32(OFFSET * *x.sums.add(b)));
        let dd = _mm256_mul_ps(d, _mm256_set1_ps(*x.d.add(b)));
        _mm256_add_ps(acc, _mm256_mul_ps(dd, _mm256_cvtepi32_ps(si)))
    }
}

/// Lane j of result t = row j of the group whose units start at `g` (nb of them) · activation
/// row t, AVX2.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_avx2<const T: usize>(g: *const u8, nb: usize, x: &[Acts; T], prefetch: bool) -> [__m256; T] {
    // SAFETY: reached only through the AVX2 table; the caller passes nb whole units at g and
    // activation rows of nb blocks.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); T];
        for b in 0..nb {
            let u = g.add(b * UNIT_BYTES);
            if prefetch {
                ahead(u);
            }
            let mut s = [_mm256_setzero_si256(); T];
            for half in [0, 2] {
                let mut s16 = [_mm256_setzero_si256(); T];
                for c in half..half + 2 {
                    let (lo, hi) = chunk(u, c);
                    for t in 0..T {
                        let xb = x[t].q.add(b * QK + c * CHUNK);
                        let pl = _mm256_maddubs_epi16(lo, bcast4(xb));
                        let ph = _mm256_maddubs_epi16(hi, bcast4(xb.add(QK / 2)));
                        s16[t] = _mm256_add_epi16(s16[t], _mm256_add_epi16(pl, ph));
                    }
                }
                for t in 0..T {
                    s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(s16[t], ones));
                }
            }
            let d = scales(u);
            for t in 0..T {
                acc[t] = scale_add(acc[t], s[t], d, x[t], b);
            }
        }
        acc
    }
}

/// `group_avx2` with `vpdpbusd` (AVX-512 VNNI, 256-bit forms).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
unsafe fn group_vnni<const T: usize>(g: *const u8, nb: usize, x: &[Acts; T], prefetch: bool) -> [__m256; T] {
    // SAFETY: reached only through the AVX-512 table; as `group_avx2`.
    unsafe {
        let mut acc = [_mm256_setzero_ps(); T];
        for b in 0..nb {
            let u = g.add(b * UNIT_BYTES);
            if prefetch {
                ahead(u);
            }
            let mut s = [_mm256_setzero_si256(); T];
            for c in 0..4 {
                let (lo, hi) = chunk(u, c);
                for t in 0..T {
                    let xb = x[t].q.add(b * QK + c * CHUNK);
                    s[t] = _mm256_dpbusd_epi32(s[t], lo, bcast4(xb));
                    s[t] = _mm256_dpbusd_epi32(s[t], hi, bcast4(xb.add(QK / 2)));
                }
            }
            let d = scales(u);
            for t in 0..T {
                acc[t] = scale_add(acc[t], s[t], d, x[t], b);
            }
        }
        acc
    }
}

/// out[t][j] = row j of the group at `g` · activation row x[t], for x.len() a power of 2 up to
/// 4 (AVX2) or 8 (VNNI).
///
/// SAFETY: the CPU has the kernel's features; nb whole units at g; activation rows of nb blocks.
unsafe fn group_rows<const VNNI: bool>(g: *const u8, nb: usize, x: &[Acts], out: &mut [[f32; GROUP_ROWS]]) {
    let a = |k: usize| x[k.min(x.len() - 1)];
    let pf = super::tune::mxfp4r8_prefetch();
    // SAFETY: the caller's contract.
    unsafe {
        match (VNNI, x.len()) {
            (true, 8) => store(group_vnni::<8>(g, nb, &std::array::from_fn(a), pf), out),
            (true, 4) => store(group_vnni::<4>(g, nb, &std::array::from_fn(a), pf), out),
            (true, 2) => store(group_vnni::<2>(g, nb, &std::array::from_fn(a), pf), out),
            (true, _) => store(group_vnni::<1>(g, nb, &std::array::from_fn(a), pf), out),
            (false, 4) => store(group_avx2::<4>(g, nb, &std::array::from_fn(a), pf), out),
            (false, 2) => store(group_avx2::<2>(g, nb, &std::array::from_fn(a), pf), out),
            (false, _) => store(group_avx2::<1>(g, nb, &std::array::from_fn(a), pf), out),
        }
    }
}

/// W4A8 product of mxfp4r8 `w` (see `table::GemvI8Fn`) with the AVX2 (`VNNI` false) or the
/// AVX-512 VNNI kernels, which must be reached only through a table whose CPU has them.
fn gemv_i8_with<const VNNI: bool>(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    let (cols, nb) = (w.cols(), w.cols() / QK);
    assert!(xa.cols == cols && xa.qs.len() >= n * cols && xa.sums.len() >= n * nb && out.len() >= n * rows.len());
    assert!(rows.end <= w.rows() && w.dtype() == DType::Mxfp4R8);
    let (len, base, max_t) = (rows.len(), w.bytes().as_ptr(), if VNNI { 8 } else { 4 });
    let acts = |t: usize| {
        let (xq, xd) = xa.row(t);
        Acts { q: xq.as_ptr(), d: xd.as_ptr(), sums: xa.row_sums(t).as_ptr() }
    };
    let ragged = |r: Range<usize>, o: &mut [f32]| generic::gemv_i8(w, r, xa, n, o);
    by_groups(rows, n, 1, out, ragged, |grp, _, at, out, tokens| {
        let mut res = [[0f32; GROUP_ROWS]; 8];
        let mut t = tokens.start;
        while t < tokens.end {
            let take = 1 << (tokens.end - t).min(max_t).ilog2();
            let x: [Acts; 8] = std::array::from_fn(|k| acts(t + k.min(take - 1)));
            // SAFETY: the table holding this kernel exists only on CPUs with its features; group
            // grp lies inside the matrix (rows.end ≤ w.rows() asserted, bound whole groups) and
            // every activation row holds nb blocks (asserted).
            unsafe { group_rows::<VNNI>(base.wrapping_add(grp * nb * UNIT_BYTES), nb, &x[..take], &mut res[..take]) };
            for (k, r) in res[..take].iter().enumerate() {
                out[(t + k) * len + at..][..GROUP_ROWS].copy_from_slice(r);
            }
            t += take;
        }
    });
}

/// W4A8 product of mxfp4r8 `w`, AVX2.
pub fn gemv_i8(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    gemv_i8_with::<false>(w, rows, xa, n, out)
}

/// W4A8 product of mxfp4r8 `w`, AVX-512 VNNI.
pub fn gemv_i8_vnni(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    gemv_i8_with::<true>(w, rows, xa, n, out)
}

/// Blocks [b0, b1) of rows `rows` of mxfp4r8 `w`, in mxfp4 order (a [rows.len(), (b1 − b0)·32]
/// mxfp4 matrix's bytes).
fn gather(w: Mat<'_>, rows: Range<usize>, blocks: Range<usize>) -> Vec<u8> {
    let (nb, layout) = (w.cols() / QK, w.layout());
    let mut out = Vec::with_capacity(rows.len() * blocks.len() * BLOCK_BYTES);
    for r in rows {
        for b in blocks.clone() {
            let (e, qs) = block_in(w.bytes(), layout, r * nb + b);
            out.push(e);
            out.extend_from_slice(&qs);
        }
    }
    out
}

/// out[t·rows.len() + i] = w[rows.start + i] · x[t] (see `table::GemvFn`): the rows copied to
/// mxfp4 order, then `mxfp4::gemv`.
pub fn gemv(w: Mat<'_>, rows: Range<usize>, x: &[f32], n: usize, out: &mut [f32]) {
    let (len, cols) = (rows.len(), w.cols());
    if len == 0 || n == 0 {
        return;
    }
    let bytes = gather(w, rows, 0..cols / QK);
    let m = Mat::new(DType::Mxfp4, len, cols, &bytes).expect("whole mxfp4 rows");
    mxfp4::gemv(m, 0..len, x, n, out)
}

/// out[i] = w[rows.start + i, k0 .. k0 + kc] as f32 (see `table::WidenFn`): the blocks copied
/// to mxfp4 order, then `mxfp4::widen`.
pub fn widen(w: Mat<'_>, rows: Range<usize>, k0: usize, out: &mut [f32]) {
    let len = rows.len();
    let kc = out.len() / len.max(1);
    assert!(k0.is_multiple_of(QK) && kc.is_multiple_of(QK) && k0 + kc <= w.cols() && rows.end <= w.rows());
    if len == 0 || kc == 0 {
        return;
    }
    let bytes = gather(w, rows, k0 / QK..(k0 + kc) / QK);
    let m = Mat::new(DType::Mxfp4, len, kc, &bytes).expect("whole mxfp4 rows");
    mxfp4::widen(m, 0..len, 0, out)
}

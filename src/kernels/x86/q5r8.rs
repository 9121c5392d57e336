//! q5_0's int8 products (GGUF's row-major blocks: Q4_K_M's rows whose width is not a multiple
//! of 256), meeting the activations as the q8r8 kernels do: a q5_0 weight is d·(q − 16), an int8
//! quant under the block's f16 scale, and every whole group of 8 rows gives each lane the q8r8
//! kernels' result on its copy bit for bit.
//!
//! * From `REPACK_MIN_ROWS` activation rows on (prefill, batched experts): the rows are copied,
//!   a run at a time, into a per-thread q8r8 buffer (`kernels::q5r8`'s bytes) and go through
//!   the interleaved q8r8 kernels of the path (`qgroup` on AVX2, `vnni` on AVX-512: several
//!   activation rows per weight load, `vpdpbusd`). The file keeps q5_0's 22 bytes per 32
//!   weights; the copy is paid once per product.
//! * One activation row (decode): each group's 8 rows read in place, their sums reduced across
//!   lanes into q8r8's row order (`group`).
//! * Rows of a range outside whole groups of 8: the row-major kernel (`legacy`).
//!
//! A row of a whole group gets q8r8's result on the copy whatever n or the thread count; a row
//! outside whole groups (a range not starting at a multiple of 8) takes the row-major kernel,
//! whose sums differ in the last bits. Every caller splits at multiples of 8 (`gemv_by`'s
//! 64-row chunks, the layer primitive's slices), so results do not depend on the thread count.

use super::super::actq::QuantizedActs;
use super::super::mat::Mat;
use super::super::par::with_buffer;
use super::super::table::GemvI8Fn;
use super::legacy::{self, fifth_bits, nibbles};
use super::qgroup::Acts;
use crate::format::blocks::{q8_bytes, GROUP_ROWS, QK};
use crate::format::ggml::{block_bytes, BlockQ5_0};
use crate::format::DType;
use core::arch::x86_64::*;
use std::cell::RefCell;
use std::ops::Range;

/// From this many activation rows on, the groups are copied for the q8r8 kernels (the same bits
/// as in place). One expert's down projection, 2048 × 1408, one thread, in cache
/// (`cargo bench --bench kernels -- gemm_expert_down`): in place 104 / 142 µs at n = 1 / 2,
/// copied 113 µs at 2 (the copy alone ≈ 75 µs).
pub const REPACK_MIN_ROWS: usize = 2;

/// q8r8 bytes per copied run of rows: the run (and a block of activation rows) stays in L2
/// while the q8r8 kernel passes over it.
const RUN_BYTES: usize = 128 << 10;

thread_local! {
    /// Per-thread q8r8 copy of a run of rows (u16: the scales' alignment) and its results.
    static RUN: RefCell<(Vec<u16>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
}

/// See `table::GemvI8Fn`: row-major q5_0, AVX2.
pub fn gemv_i8(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    drive(w, rows, xa, n, out, super::qgroup::gemv_i8)
}

/// See `table::GemvI8Fn`: row-major q5_0, AVX-512 VNNI.
pub fn gemv_i8_vnni(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    drive(w, rows, xa, n, out, super::vnni::gemv_i8)
}

/// out[t·len + i] = row rows.start + i of `w` · activation row t: whole groups of 8 in place
/// (below REPACK_MIN_ROWS activation rows) or through q8r8 copies and `q8r8`, the rest by the
/// row-major kernel.
fn drive(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32], q8r8: GemvI8Fn) {
    let row_major = legacy::gemv_i8::<{ legacy::Q5_0 }>;
    assert_eq!(w.dtype(), DType::Q5_0);
    assert!(rows.end <= w.rows() && out.len() >= n * rows.len() && xa.cols == w.cols());
    let cols = w.cols();
    let first = rows.start.next_multiple_of(GROUP_ROWS).min(rows.end);
    let last = first + (rows.end - first) / GROUP_ROWS * GROUP_ROWS;
    // Runs of whole groups, two groups (one zmm) at least.
    let run = (RUN_BYTES / cols / (2 * GROUP_ROWS)).max(1) * 2 * GROUP_ROWS;
    let mut part = |r: Range<usize>, kernel: &dyn Fn(Range<usize>, &mut [f32])| {
        if r.is_empty() {
            return;
        }
        with_buffer(&RUN, |(_, res)| {
            res.resize(n * r.len(), 0.0);
            kernel(r.clone(), res);
            scatter(res, r.clone(), rows.clone(), n, out);
        })
    };
    part(rows.start..first, &|r, res| row_major(w, r, xa, n, res));
    part(last..rows.end, &|r, res| row_major(w, r, xa, n, res));
    if n < REPACK_MIN_ROWS {
        return part(first..last, &|r, res| groups_in_place(w, r, xa, n, res));
    }
    for r0 in (first..last).step_by(run) {
        let r = r0..(r0 + run).min(last);
        with_buffer(&RUN, |(copy, res)| {
            let bytes = q8_bytes(r.len() * cols);
            copy.resize(bytes / 2, 0);
            // SAFETY: u16 has no padding; the slice covers the vector's initialised elements.
            let dst = unsafe { std::slice::from_raw_parts_mut(copy.as_mut_ptr().cast::<u8>(), bytes) };
            copy_q8r8(w, r.clone(), dst);
            let m = Mat::new(DType::Q8R8, r.len(), cols, dst).expect("a q8r8 copy binds");
            res.resize(n * r.len(), 0.0);
            q8r8(m, 0..r.len(), xa, n, res);
            scatter(res, r.clone(), rows.clone(), n, out);
        });
    }
}

/// out[t·len + i] = row rows.start + i of `w` · activation row t for whole groups `rows` (len
/// of them), read in place: one activation row per pass (decode has one).
fn groups_in_place(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    let (nb, len) = (w.cols() / QK, rows.len());
    let row_bytes = nb * block_bytes::<BlockQ5_0>();
    assert!(xa.qs.len() >= n * w.cols() && xa.sums.len() >= n * nb && out.len() >= n * len);
    for (i, r0) in rows.step_by(GROUP_ROWS).enumerate() {
        let src = w.bytes()[r0 * row_bytes..(r0 + GROUP_ROWS) * row_bytes].as_ptr();
        // The next group's bytes (or past the matrix: a prefetch is only a hint).
        let next = src.wrapping_add(GROUP_ROWS * row_bytes);
        for t in 0..n {
            let (q, d) = xa.row(t);
            let x = Acts { q: q.as_ptr(), d: d.as_ptr(), sums: xa.row_sums(t).as_ptr() };
            // SAFETY: reached only through the AVX2 / AVX-512 tables; `src` holds the group's 8
            // rows of nb blocks, the activation row nb blocks (asserted).
            let v = unsafe { group(src, next, nb, x) };
            // SAFETY: __m256 and [f32; 8] have the same size; any bits are valid f32.
            let lanes = unsafe { std::mem::transmute::<__m256, [f32; GROUP_ROWS]>(v) };
            out[t * len + i * GROUP_ROWS..t * len + (i + 1) * GROUP_ROWS].copy_from_slice(&lanes);
        }
    }
}

/// Lane j = row j of the 8 row-major rows at `src` (nb blocks each) · activation row x: q8r8's
/// integer block sums (Σ (q − 16)·qx, here Σ q·qx per row reduced across lanes, minus
/// 16·Σ qx) and its float steps (8 scales × dx, one fused multiply-add per block), so every
/// lane is the q8r8 kernels' result on the copy bit for bit. The 8 rows are one run of bytes
/// read in 8 interleaved streams, which the hardware prefetcher follows poorly (decode from
/// memory ran 30 % slower than the row-major kernel's single stream): each block asks for its
/// share of the next group's run at `next`.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group(src: *const u8, next: *const u8, nb: usize, x: Acts) -> __m256 {
    const BB: usize = block_bytes::<BlockQ5_0>();
    // SAFETY: the caller's contract (`groups_in_place`).
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_ps();
        for b in 0..nb {
            for line in (b * GROUP_ROWS * BB..(b + 1) * GROUP_ROWS * BB).step_by(64) {
                _mm_prefetch::<_MM_HINT_T0>(next.wrapping_add(line).cast());
            }
            let p = |j: usize| src.add((j * nb + b) * BB);
            let q: [__m256i; 8] =
                std::array::from_fn(|j| _mm256_or_si256(nibbles(p(j).add(6)), fifth_bits(p(j).add(2))));
            let h = |j: usize| p(j).cast::<i16>().read_unaligned();
            let d = _mm256_cvtph_ps(_mm_setr_epi16(h(0), h(1), h(2), h(3), h(4), h(5), h(6), h(7)));
            let xv = _mm256_loadu_si256(x.q.add(b * QK).cast());
            let s = lane_sums(std::array::from_fn(|j| _mm256_madd_epi16(_mm256_maddubs_epi16(q[j], xv), ones)));
            let si = _mm256_sub_epi32(s, _mm256_set1_epi32(16 * *x.sums.add(b)));
            let dx = _mm256_mul_ps(d, _mm256_set1_ps(*x.d.add(b)));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(si), dx, acc);
        }
        acc
    }
}

/// Lane j = the sum of the 8 lanes of s[j] (exact in i32).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn lane_sums(s: [__m256i; 8]) -> __m256i {
    let h: [__m256i; 4] = std::array::from_fn(|k| _mm256_hadd_epi32(s[2 * k], s[2 * k + 1]));
    // Rows 0..4 and 4..8, each 128-bit half holding half of every row's sum.
    let (k0, k1) = (_mm256_hadd_epi32(h[0], h[1]), _mm256_hadd_epi32(h[2], h[3]));
    _mm256_add_epi32(_mm256_permute2x128_si256::<0x20>(k0, k1), _mm256_permute2x128_si256::<0x31>(k0, k1))
}

/// out[t·rows.len() + (i − rows.start)] = res[t·part.len() + (i − part.start)] for i in part.
fn scatter(res: &[f32], part: Range<usize>, rows: Range<usize>, n: usize, out: &mut [f32]) {
    let (len, at) = (rows.len(), part.start - rows.start);
    for (t, rt) in res.chunks_exact(part.len()).take(n).enumerate() {
        out[t * len + at..t * len + at + part.len()].copy_from_slice(rt);
    }
}

/// Rows `rows` (whole groups from a multiple of 8) of q5_0 `w` as q8r8 into `dst` (see
/// `kernels::q5r8::q5_0_as_q8r8`), AVX2.
pub(in super::super) fn copy_q8r8(w: Mat<'_>, rows: Range<usize>, dst: &mut [u8]) {
    let (cols, len) = (w.cols(), rows.len());
    assert!(rows.start.is_multiple_of(GROUP_ROWS) && len.is_multiple_of(GROUP_ROWS) && rows.end <= w.rows());
    assert_eq!(dst.len(), q8_bytes(len * cols));
    let nb = cols / QK;
    let src = &w.bytes()[rows.start * nb * block_bytes::<BlockQ5_0>()..rows.end * nb * block_bytes::<BlockQ5_0>()];
    let (qs, d) = dst.split_at_mut(len * cols);
    // SAFETY: reached only through the AVX2 / AVX-512 tables; the source holds len·nb blocks and
    // the destination regions their quants and scales (asserted above).
    unsafe { copy_groups(src.as_ptr(), nb, len / GROUP_ROWS, qs.as_mut_ptr(), d.as_mut_ptr()) }
}

/// Per group of 8 rows and block column: each row's 32 quants unpacked in element order minus
/// 16, the 8 × 8 chunks of 4 bytes transposed so that chunk c holds bytes 4c.. of rows 0..8,
/// and the 8 scales copied.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn copy_groups(src: *const u8, nb: usize, groups: usize, qs: *mut u8, d: *mut u8) {
    const BB: usize = block_bytes::<BlockQ5_0>();
    // SAFETY: the caller's contract (`copy_q8r8`): groups·8 rows of nb blocks in and out.
    unsafe {
        let sixteen = _mm256_set1_epi8(16);
        for g in 0..groups {
            for b in 0..nb {
                let unit = g * nb + b;
                let rows: [__m256i; 8] = std::array::from_fn(|j| {
                    let p = src.add(((g * GROUP_ROWS + j) * nb + b) * BB);
                    std::ptr::copy_nonoverlapping(p, d.add(2 * (unit * GROUP_ROWS + j)), 2);
                    _mm256_sub_epi8(_mm256_or_si256(nibbles(p.add(6)), fifth_bits(p.add(2))), sixteen)
                });
                for (c, v) in transpose(rows).into_iter().enumerate() {
                    _mm256_storeu_si256(qs.add(unit * GROUP_ROWS * QK + c * 32).cast(), v);
                }
            }
        }
    }
}

/// out[c] lane j = r[j] lane c: the 8 × 8 transpose of 32-bit lanes.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
fn transpose(r: [__m256i; 8]) -> [__m256i; 8] {
    // t: pairs of rows (2k, 2k + 1) interleaved per lane pair; u: quads of rows per chunk, the
    // chunk c in the low 128 bits and c + 4 in the high ones.
    let t: [__m256i; 8] = std::array::from_fn(|i| {
        let (a, b) = (r[i / 2 * 2], r[i / 2 * 2 + 1]);
        if i % 2 == 0 {
            _mm256_unpacklo_epi32(a, b)
        } else {
            _mm256_unpackhi_epi32(a, b)
        }
    });
    // u[4h + c] (c < 4): rows 4h..4h + 4, chunks c and c + 4.
    let u: [__m256i; 8] = std::array::from_fn(|i| {
        let (h, c) = (i / 4, i % 4);
        let (a, b) = (t[4 * h + c / 2], t[4 * h + 2 + c / 2]);
        if c % 2 == 0 {
            _mm256_unpacklo_epi64(a, b)
        } else {
            _mm256_unpackhi_epi64(a, b)
        }
    });
    std::array::from_fn(|c| {
        if c < 4 {
            _mm256_permute2x128_si256::<0x20>(u[c], u[4 + c])
        } else {
            _mm256_permute2x128_si256::<0x31>(u[c - 4], u[c])
        }
    })
}

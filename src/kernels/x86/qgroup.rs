//! AVX2 kernels for block matrices in the 8-row interleaved layout (q8r8 / q4r8, see
//! `format::blocks`): one 32-byte load holds 4 bytes of each of 8 rows, so a broadcast of 4
//! activation bytes (or one activation float per column) meets 8 rows at once and the 8 row sums
//! build up in the 8 lanes of one vector, in row order. Per 32-weight block and 8 rows:
//!
//! * W4A8: 4 loads, per load two masks and a shift to split the nibbles and two `vpmaddubsw`
//!   (nibbles 0..15 × int8 activations), all eight summed in i16 (|sum| ≤ 8·2·15·127 < 2¹⁵),
//!   one `vpmaddwd` to i32, minus 8·Σqx (the offset, exact in integers), one conversion and one
//!   fused multiply-add with the 8 scales × dx. About 4 vector ops per row-block where the
//!   row-major kernel needs about 8.
//! * W8A8: 8 loads, each `vpsignb` ×2 + `vpmaddubsw` + `vpmaddwd` + add (the signed byte
//!   products cannot share i16 sums), then the same scaling.
//! * W8A16 / W4A16 and the GEMM's widening take the bytes apart per column (shift, mask,
//!   convert, one fused multiply-add per column for 8 rows).
//!
//! The integer block sums equal the reference's exactly; only the float accumulation order of
//! the blocks' scaled sums differs (fused multiply-add).

use super::super::actq::QuantizedActs;
use super::super::generic;
use super::super::mat::Mat;
use crate::format::blocks::{Layout, CHUNK, GROUP_ROWS, QK};
use crate::format::DType;
use core::arch::x86_64::*;
use std::ops::Range;

/// The parts of an interleaved block matrix the kernels need.
#[derive(Clone, Copy)]
pub(in crate::kernels) struct Grouped {
    qs: *const u8,
    d: *const u16,
    /// Blocks per row.
    pub nb: usize,
    /// Bytes of one row's block (32 for q8, 16 for q4).
    bb: usize,
    pub q4: bool,
}

impl Grouped {
    /// The parts of interleaved `w` (q8r8 or q4r8; whole 8-row groups, one scale per block, as
    /// binding guarantees).
    pub(in crate::kernels) fn of(w: Mat<'_>) -> Grouped {
        let q4 = w.dtype().encoding() == DType::Q4;
        let (qs, d, layout, bb) = if q4 {
            let q = w.q4();
            (q.qs.as_ptr(), q.d.as_ptr(), q.layout, QK / 2)
        } else {
            let q = w.q8();
            (q.qs.as_ptr().cast::<u8>(), q.d.as_ptr(), q.layout, QK)
        };
        let Layout::Interleaved { nb } = layout else { panic!("qgroup kernels take interleaved block matrices") };
        Grouped { qs, d, nb, bb, q4 }
    }

    /// First byte of the unit (row group g, block column b).
    #[inline]
    pub fn unit(&self, g: usize, b: usize) -> *const u8 {
        self.qs.wrapping_add((g * self.nb + b) * GROUP_ROWS * self.bb)
    }

    /// First of the 8 scales of unit (g, b).
    #[inline]
    pub fn scales(&self, g: usize, b: usize) -> *const u16 {
        self.d.wrapping_add((g * self.nb + b) * GROUP_ROWS)
    }
}

/// Split `rows` into (rows before the first whole group, whole groups, rows after): the
/// kernels take whole groups, the reference the ragged ends (a single-row `dot_row` call).
fn split(rows: Range<usize>) -> (Range<usize>, Range<usize>, Range<usize>) {
    let a = rows.start.next_multiple_of(GROUP_ROWS).min(rows.end);
    let b = a + (rows.end - a) / GROUP_ROWS * GROUP_ROWS;
    (rows.start..a, a..b, b..rows.end)
}

/// Activation rows per pass over a task's row groups: the task's weights (64 rows) and this
/// many int8 activation rows (64 × cols bytes) stay in L2 while every group meets them.
pub(super) const TOKEN_BLOCK: usize = 64;

/// Run `ragged(rows, out)` on the ragged ends of `rows` and `group(g, k, at, out, tokens)` for
/// each run of k ≤ `step` whole groups from g (k < step only at the end) and each block of
/// activation rows (starting at multiples of `TOKEN_BLOCK`), whose 8·k results per row t go to
/// out[t·len + at ..].
pub(in crate::kernels) fn by_groups(
    rows: Range<usize>,
    n: usize,
    step: usize,
    out: &mut [f32],
    ragged: impl Fn(Range<usize>, &mut [f32]),
    mut group: impl FnMut(usize, usize, usize, &mut [f32], Range<usize>),
) {
    let len = rows.len();
    let (head, groups, tail) = split(rows.clone());
    for part in [head, tail] {
        if part.is_empty() {
            continue;
        }
        let mut buf = vec![0f32; part.len() * n];
        ragged(part.clone(), &mut buf);
        for t in 0..n {
            for (i, r) in part.clone().enumerate() {
                out[t * len + r - rows.start] = buf[t * part.len() + i];
            }
        }
    }
    for t0 in (0..n).step_by(TOKEN_BLOCK) {
        for r in groups.clone().step_by(GROUP_ROWS * step) {
            let k = ((groups.end - r) / GROUP_ROWS).min(step);
            group(r / GROUP_ROWS, k, r - rows.start, out, t0..(t0 + TOKEN_BLOCK).min(n));
        }
    }
}

/// The int8 group kernels of one instruction set: lane j of result t = row 8·grp + j of a unit
/// stream · activation row t, for T activation rows (q4r8: W4A8; q8r8: W8A8). Every set gives
/// the same integer block sums, scaled and summed in the same float order.
pub(super) trait GroupI8 {
    /// Most activation rows one pass over a group's units takes (what the registers hold).
    const MAX_T: usize;
    /// out[t·stride + 8·i + j] = row 8·(grps.start + i) + j · activation row x[t], for every
    /// group of `grps` and t < x.len() ≤ MAX_T (a power of 2): one call runs the whole range,
    /// so that a decode step's pass over a matrix is one loop.
    ///
    /// SAFETY: the CPU has the set's features; the groups `grps` and every activation row's
    /// `nb` blocks are inside their buffers; `out` is valid for writes at every index named.
    unsafe fn run(g: Grouped, grps: Range<usize>, x: &[Acts], out: *mut f32, stride: usize);
}

/// `out[t] = kernel(x)[t]` for T activation rows (the const-generic kernels' call shape).
#[inline(always)]
pub(super) fn store<const T: usize>(v: [__m256; T], out: &mut [[f32; GROUP_ROWS]]) {
    for (o, vt) in out.iter_mut().zip(v) {
        // SAFETY: __m256 and [f32; 8] have the same size; any bits are valid f32.
        *o = unsafe { std::mem::transmute::<__m256, [f32; GROUP_ROWS]>(vt) };
    }
}

/// Store `f(grp)` ([T] lanes of 8 results) for each group of `grps` as `GroupI8::run` says: the
/// const-generic kernels' call shape.
///
/// SAFETY: `out` is valid for writes at t·stride + 8·i + j for t < T, i < grps.len(), j < 8.
#[inline(always)]
pub(super) unsafe fn each<const T: usize>(
    grps: Range<usize>,
    out: *mut f32,
    stride: usize,
    mut f: impl FnMut(usize) -> [__m256; T],
) {
    for (i, grp) in grps.enumerate() {
        for (t, v) in f(grp).into_iter().enumerate() {
            // SAFETY: __m256 and [f32; 8] have the same size (any bits are valid f32); the
            // index is one the caller vouches for.
            unsafe {
                let lanes = std::mem::transmute::<__m256, [f32; GROUP_ROWS]>(v);
                out.add(t * stride + i * GROUP_ROWS).cast::<[f32; GROUP_ROWS]>().write_unaligned(lanes);
            }
        }
    }
}

/// The AVX2 group kernels (`vpmaddubsw` + `vpmaddwd`): four activation rows per pass (16 ymm
/// registers).
pub(super) struct Avx2;

impl GroupI8 for Avx2 {
    const MAX_T: usize = 4;

    #[target_feature(enable = "avx2,fma,f16c")]
    unsafe fn run(g: Grouped, grps: Range<usize>, x: &[Acts], out: *mut f32, stride: usize) {
        // SAFETY: the caller's contract (see the trait).
        unsafe {
            match (g.q4, x.len()) {
                (true, 4) => each(grps, out, stride, |grp| group_q4_i8::<4>(g, grp, &[x[0], x[1], x[2], x[3]])),
                (true, 2) => each(grps, out, stride, |grp| group_q4_i8::<2>(g, grp, &[x[0], x[1]])),
                (true, _) => each(grps, out, stride, |grp| group_q4_i8::<1>(g, grp, &[x[0]])),
                (false, 4) => each(grps, out, stride, |grp| group_q8_i8::<4>(g, grp, &[x[0], x[1], x[2], x[3]])),
                (false, 2) => each(grps, out, stride, |grp| group_q8_i8::<2>(g, grp, &[x[0], x[1]])),
                (false, _) => each(grps, out, stride, |grp| group_q8_i8::<1>(g, grp, &[x[0]])),
            }
        }
    }
}

/// W8A8 / W4A8 product of interleaved `w` (see `table::GemvI8Fn`), AVX2.
pub fn gemv_i8(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    gemv_i8_with::<Avx2>(w, rows, xa, n, out)
}

/// W8A8 / W4A8 product of interleaved `w` with the group kernels of `K`, which must be
/// reached only through a table whose CPU has K's features.
pub(super) fn gemv_i8_with<K: GroupI8>(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    let (g, cols) = (Grouped::of(w), w.cols());
    assert!(xa.cols == cols && xa.qs.len() >= n * cols && xa.sums.len() >= n * g.nb && out.len() >= n * rows.len());
    assert!(rows.end <= w.rows());
    let len = rows.len();
    let acts = |t: usize| {
        let (xq, xd) = xa.row(t);
        Acts { q: xq.as_ptr(), d: xd.as_ptr(), sums: xa.row_sums(t).as_ptr() }
    };
    // One pass of activation rows (decode): every whole group in one kernel call. More rows:
    // group by group, each group's units meeting all passes while they are in L1.
    let step = if n <= K::MAX_T && n.is_power_of_two() { len / GROUP_ROWS + 1 } else { 1 };
    by_groups(
        rows,
        n,
        step,
        out,
        |r, o| generic::gemv_i8(w, r, xa, n, o),
        |grp, k, at, out, tokens| {
            // Activation rows in passes of K::MAX_T (then halves) share each weight load and its
            // unpacking.
            let mut t = tokens.start;
            while t < tokens.end {
                let take = (tokens.end - t).min(K::MAX_T);
                let take = 1 << take.ilog2();
                let x: [Acts; 8] = std::array::from_fn(|i| acts((t + i).min(t + take - 1)));
                assert!(out.len() >= (t + take - 1) * len + at + k * GROUP_ROWS);
                // SAFETY: K's table only on CPUs with K's features; groups grp..grp + k lie inside
                // the matrix (rows.end ≤ w.rows() asserted), every activation row holds nb blocks,
                // and the last write ends inside `out` (asserted).
                unsafe { K::run(g, grp..grp + k, &x[..take], out[t * len + at..].as_mut_ptr(), len) };
                t += take;
            }
        },
    );
}

/// Ask for the unit `tune::stream_ahead` after `u` (a hint: never faults, any address is fine).
/// The units of a matrix are one linear stream, but a task's stream is short (64 rows: 64–128
/// KiB of a small expert) and the hardware prefetcher ramps up too late for it: the weight loads
/// took half the kernel's samples without this.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn prefetch_unit(g: Grouped, u: *const u8) {
    if !super::tune::software_prefetch() {
        return;
    }
    let ahead = super::tune::stream_ahead();
    for line in (0..GROUP_ROWS * g.bb).step_by(64) {
        super::tune::prefetch_line(u.wrapping_add(ahead.bytes + line), ahead);
    }
}

/// One int8 activation row: quants, block scales, block sums.
#[derive(Clone, Copy)]
pub(super) struct Acts {
    pub q: *const i8,
    pub d: *const f32,
    pub sums: *const i32,
}

/// Four activation bytes from `p` broadcast to every i32 lane.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn bcast4(p: *const i8) -> __m256i {
    // SAFETY: the caller passes 4 readable bytes at p (read unaligned).
    unsafe { _mm256_set1_epi32(p.cast::<i32>().read_unaligned()) }
}

/// Lane j of result t = row 8·grp + j · activation row t, W4A8, for T activation rows.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_q4_i8<const T: usize>(g: Grouped, grp: usize, x: &[Acts; T]) -> [__m256; T] {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        let m = _mm256_set1_epi8(15);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); T];
        for b in 0..g.nb {
            let u = g.unit(grp, b);
            prefetch_unit(g, u);
            let mut s16 = [_mm256_setzero_si256(); T];
            for c in 0..4 {
                // Bytes 4c..4c+4 of each row: elements 4c.. in the low nibbles, 16+4c.. in the high.
                let w = _mm256_loadu_si256(u.add(c * 32).cast());
                let (lo, hi) = (_mm256_and_si256(w, m), _mm256_and_si256(_mm256_srli_epi16(w, 4), m));
                for t in 0..T {
                    let xb = x[t].q.add(b * QK);
                    let pl = _mm256_maddubs_epi16(lo, bcast4(xb.add(c * CHUNK)));
                    let ph = _mm256_maddubs_epi16(hi, bcast4(xb.add(16 + c * CHUNK)));
                    s16[t] = _mm256_add_epi16(s16[t], _mm256_add_epi16(pl, ph));
                }
            }
            let d = _mm256_cvtph_ps(_mm_loadu_si128(g.scales(grp, b).cast()));
            for t in 0..T {
                let s = _mm256_sub_epi32(_mm256_madd_epi16(s16[t], ones), _mm256_set1_epi32(8 * *x[t].sums.add(b)));
                let dx = _mm256_mul_ps(d, _mm256_set1_ps(*x[t].d.add(b)));
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), dx, acc[t]);
            }
        }
        acc
    }
}

/// Lane j of result t = row 8·grp + j · activation row t, W8A8, for T activation rows.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_q8_i8<const T: usize>(g: Grouped, grp: usize, x: &[Acts; T]) -> [__m256; T] {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); T];
        for b in 0..g.nb {
            let u = g.unit(grp, b);
            prefetch_unit(g, u);
            let mut s = [_mm256_setzero_si256(); T];
            for c in 0..8 {
                let w = _mm256_loadu_si256(u.add(c * 32).cast());
                // |w| × (x with w's sign): unsigned × signed bytes, as vpmaddubsw wants.
                let aw = _mm256_sign_epi8(w, w);
                for t in 0..T {
                    let xv = bcast4(x[t].q.add(b * QK + c * CHUNK));
                    let p = _mm256_maddubs_epi16(aw, _mm256_sign_epi8(xv, w));
                    s[t] = _mm256_add_epi32(s[t], _mm256_madd_epi16(p, ones));
                }
            }
            let d = _mm256_cvtph_ps(_mm_loadu_si128(g.scales(grp, b).cast()));
            for t in 0..T {
                let dx = _mm256_mul_ps(d, _mm256_set1_ps(*x[t].d.add(b)));
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s[t]), dx, acc[t]);
            }
        }
        acc
    }
}

/// W8A16 / W4A16 product of interleaved `w` with float activations (see `table::GemvFn`).
pub fn gemv(w: Mat<'_>, rows: Range<usize>, x: &[f32], n: usize, out: &mut [f32]) {
    let (g, cols) = (Grouped::of(w), w.cols());
    assert!(x.len() >= n * cols && out.len() >= n * rows.len() && rows.end <= w.rows());
    let len = rows.len();
    by_groups(
        rows,
        n,
        1,
        out,
        |r, o| generic::gemv(w, r, x, n, o),
        |grp, _, at, out, tokens| {
            for t in tokens {
                let xt = x[t * cols..].as_ptr();
                let mut o = [0f32; GROUP_ROWS];
                // SAFETY: as in gemv_i8; x holds n·cols values (asserted).
                unsafe {
                    let v = if g.q4 { group_q4_f32(g, grp, xt) } else { group_q8_f32(g, grp, xt) };
                    _mm256_storeu_ps(o.as_mut_ptr(), v);
                }
                out[t * len + at..t * len + at + GROUP_ROWS].copy_from_slice(&o);
            }
        },
    );
}

/// Lane j = row 8·grp + j · x, W4A16: per block Σ (q − 8)·x, the offset taken in integers
/// before the conversion (a float-side correction would cancel badly on outlier blocks).
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_q4_f32(g: Grouped, grp: usize, x: *const f32) -> __m256 {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        let m = _mm256_set1_epi32(15);
        let eight = _mm256_set1_epi32(8);
        let mut acc = _mm256_setzero_ps();
        for b in 0..g.nb {
            let u = g.unit(grp, b);
            let xb = x.add(b * QK);
            let mut s = _mm256_setzero_ps();
            for c in 0..4 {
                let w = _mm256_loadu_si256(u.add(c * 32).cast());
                for i in 0..4 {
                    let col = c * CHUNK + i;
                    let nib = |shift: i32| {
                        let q = _mm256_and_si256(_mm256_srlv_epi32(w, _mm256_set1_epi32(shift)), m);
                        _mm256_sub_epi32(q, eight)
                    };
                    let (lo, hi) = (nib(8 * i as i32), nib(8 * i as i32 + 4));
                    s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(lo), _mm256_set1_ps(*xb.add(col)), s);
                    s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hi), _mm256_set1_ps(*xb.add(col + 16)), s);
                }
            }
            let d = _mm256_cvtph_ps(_mm_loadu_si128(g.scales(grp, b).cast()));
            acc = _mm256_fmadd_ps(s, d, acc);
        }
        acc
    }
}

/// Lane j = row 8·grp + j · x, W8A16.
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn group_q8_f32(g: Grouped, grp: usize, x: *const f32) -> __m256 {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        let mut acc = _mm256_setzero_ps();
        for b in 0..g.nb {
            let u = g.unit(grp, b);
            let xb = x.add(b * QK);
            let mut s = _mm256_setzero_ps();
            for c in 0..8 {
                let w = _mm256_loadu_si256(u.add(c * 32).cast());
                for i in 0..4 {
                    // Byte i of each lane, sign-extended: shift it to the top, then back down.
                    let q = _mm256_srai_epi32(_mm256_sllv_epi32(w, _mm256_set1_epi32(24 - 8 * i as i32)), 24);
                    s = _mm256_fmadd_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(*xb.add(c * CHUNK + i)), s);
                }
            }
            let d = _mm256_cvtph_ps(_mm_loadu_si128(g.scales(grp, b).cast()));
            acc = _mm256_fmadd_ps(s, d, acc);
        }
        acc
    }
}

/// The row-major bytes of block (row, b) of an interleaved matrix: 16 for q4, 32 for q8 (two
/// halves).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn gather_block(g: Grouped, row: usize, b: usize) -> (__m128i, __m128i) {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        let u = g.unit(row / GROUP_ROWS, b).add((row % GROUP_ROWS) * CHUNK).cast::<i32>();
        // Chunk c of this row is 8 chunks (32 bytes) after chunk c − 1.
        let at = |c: usize| u.add(c * GROUP_ROWS).read_unaligned();
        let first = _mm_setr_epi32(at(0), at(1), at(2), at(3));
        let second = if g.q4 { _mm_setzero_si128() } else { _mm_setr_epi32(at(4), at(5), at(6), at(7)) };
        (first, second)
    }
}

/// Four chunks of a unit (each: 4 bytes of rows 0..8) transposed to rows: the result's
/// register k holds, in its low half, row k's 16 bytes and, in its high half, row k + 4's.
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn transpose_chunks(p: *const u8) -> [__m256i; 4] {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        let c: [__m256i; 4] = std::array::from_fn(|i| _mm256_loadu_si256(p.add(i * 32).cast()));
        let (a, b) = (_mm256_unpacklo_epi32(c[0], c[1]), _mm256_unpackhi_epi32(c[0], c[1]));
        let (e, f) = (_mm256_unpacklo_epi32(c[2], c[3]), _mm256_unpackhi_epi32(c[2], c[3]));
        [
            _mm256_unpacklo_epi64(a, e),
            _mm256_unpackhi_epi64(a, e),
            _mm256_unpacklo_epi64(b, f),
            _mm256_unpackhi_epi64(b, f),
        ]
    }
}

/// out[i] = row rows.start + i of interleaved `w`, elements [k0, k0 + kc) (multiples of 32),
/// as f32; whole row groups are taken apart a unit at a time, other rows block by block.
pub fn widen(w: Mat<'_>, rows: Range<usize>, k0: usize, out: &mut [f32]) {
    let (g, cols) = (Grouped::of(w), w.cols());
    let kc = out.len() / rows.len().max(1);
    assert!(k0.is_multiple_of(QK) && kc.is_multiple_of(QK) && k0 + kc <= cols && rows.end <= w.rows());
    assert!(out.len() == rows.len() * kc);
    let (head, groups, tail) = split(rows.clone());
    // SAFETY: AVX2 table only on AVX2+FMA+F16C CPUs; every unit and block read lies inside
    // rows < rows.end of the matrix (asserted), every write inside `out` (length asserted).
    unsafe {
        for r in head.chain(tail) {
            let o = out[(r - rows.start) * kc..].as_mut_ptr();
            for i in 0..kc / QK {
                let b = k0 / QK + i;
                let d = *g.scales(r / GROUP_ROWS, b).add(r % GROUP_ROWS);
                let (first, second) = gather_block(g, r, b);
                widen_block(g, first, second, d, o.add(i * QK));
            }
        }
        for r0 in groups.step_by(GROUP_ROWS) {
            let grp = r0 / GROUP_ROWS;
            let o = out[(r0 - rows.start) * kc..].as_mut_ptr();
            for i in 0..kc / QK {
                let b = k0 / QK + i;
                let (u, d) = (g.unit(grp, b), g.scales(grp, b));
                let lo = transpose_chunks(u);
                // q8: chunks 4..8 hold bytes 16..32 of each row.
                let hi = if g.q4 { [_mm256_setzero_si256(); 4] } else { transpose_chunks(u.add(4 * 32)) };
                for k in 0..4 {
                    for (half, j) in [(0, k), (1, k + 4)] {
                        let pick = |v: __m256i| {
                            if half == 0 {
                                _mm256_castsi256_si128(v)
                            } else {
                                _mm256_extracti128_si256::<1>(v)
                            }
                        };
                        widen_block(g, pick(lo[k]), pick(hi[k]), *d.add(j), o.add(j * kc + i * QK));
                    }
                }
            }
        }
    }
}

/// 32 f32 values of one block from its row-major bytes (q4: `first`; q8: `first`, `second`).
#[inline]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn widen_block(g: Grouped, first: __m128i, second: __m128i, d: u16, out: *mut f32) {
    // SAFETY: reached only through the AVX2 table (the CPU has AVX2, FMA and F16C); the
    // caller passes pointers valid for the ranges this function's comment names.
    unsafe {
        if g.q4 {
            super::tile::widen_q4_block(first, d, out);
        } else {
            super::tile::widen_q8_block(first, second, d, out);
        }
    }
}

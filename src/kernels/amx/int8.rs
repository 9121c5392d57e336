//! W8A8 / W4A8 products of the 8-row interleaved block matrices (q8r8 / q4r8) against int8
//! activation rows (`QuantizedActs`) on AMX-INT8 tiles (TDPBSSD: signed × signed bytes, i32
//! sums), a `table::GemvI8Fn` for the AMX path. Below `AMX_MIN_ROWS` (32) activation
//! rows (decode, small expert batches) it is the AVX-512 VNNI kernel (`x86::vnni::gemv_i8`).
//!
//! The block scales allow one tile product per 32-column block: K = 32 (one block, 8 B rows),
//! and each block's i32 C tile is stored, converted and scaled into f32 accumulators (AVX-512)
//! before the next block. Per block and pair of row groups (16 weight rows) a step is
//!
//! * tmm4 / tmm5: A, 16 activation rows × 32 bytes (their quants of block b), read in place
//!   from `QuantizedActs::qs` (row stride `cols`) — only the last, ragged tile of a product
//!   reads a zero-padded copy of its rows (`Tail`), made once per call;
//! * tmm6 / tmm7: B, 8 rows × 64 bytes: the block's two units side by side in VNNI order —
//!   B row k holds bytes 4k..4k + 4 of the 16 weight rows (4 bytes per output column), which is
//!   chunk k of unit (grp, b) then chunk k of unit (grp + 1, b) for q8, and for q4 the chunk
//!   k mod 4's low (k < 4: elements 4k..) or high nibbles (k ≥ 4: elements 16 + 4(k − 4)..)
//!   widened to q − 8. `prepare` builds them for every block of the pair once per block of
//!   activation rows (`by_groups`), with the 16 scales as f32;
//! * tmm0 … tmm3: C, 16 activation rows × 16 i32 (one 64-byte row per activation row: one zmm).
//!
//! Blocks rotate through the registers so that the tile products of the next blocks run while
//! one block is scaled (`tile16`). Each output is acc = fma(f32(Σ_block), dw·dx, acc) over the
//! blocks in ascending order from zero: the float operations of the VNNI kernels (whose integer
//! sums are the same), so the results are bit-identical to the AVX-512 path.
//!
//! Responsibility: the caller (the AMX table, `hw::int8_status()` Ok) guarantees the CPU runs
//! AMX-INT8 with the tile state granted and AVX-512 F/BW/VL/VNNI; this module bounds every tile
//! load (A: rows t0..t0 + 16 ≤ n of qs, or the padded copy; B: its own buffers) and store.

use super::{TileConfig, Tiles, TILE_COLSB, TILE_ROWS};
use crate::format::blocks::{GROUP_ROWS, QK};
use crate::kernels::actq::QuantizedActs;
use crate::kernels::generic;
use crate::kernels::mat::Mat;
use crate::kernels::x86::qgroup::{by_groups, Grouped};
use crate::kernels::x86::vnni;
use core::arch::x86_64::*;
use std::ops::Range;

/// Activation rows from which the tiles run (below: the VNNI kernel). A ragged last tile costs a
/// whole one: `cargo bench --bench kernels -- gemm_expert_ragged` (1408 × 2048, one thread)
/// measured amx / avx512 time (two alternated runs, noisy 2-core Xeon VM) 0.98–1.0 (q4r8) and
/// 1.07–1.10 (q8r8) at 16 rows, 1.02–1.04 / 1.03–1.06 at 24, 0.82 / 0.81–0.87 at 32, 0.87 / 0.91
/// at 40, 0.66–0.69 / 0.62–0.66 at 64.
pub(crate) const AMX_MIN_ROWS: usize = 32;
/// Activation rows per A tile.
const TM: usize = TILE_ROWS;
/// Weight rows per B tile: two row groups.
const TN: usize = 2 * GROUP_ROWS;
/// Bytes of one block's B tile: 8 rows of 64.
const B_BYTES: usize = QK * TN;

/// The registers: tmm0 … tmm3 C (16 × 64 bytes), tmm4, tmm5 A (16 × 32), tmm6, tmm7 B (8 × 64).
fn config() -> TileConfig {
    let (c, a, b) = ((TM, TILE_COLSB), (TM, QK), (QK / 4, TILE_COLSB));
    TileConfig::shaped(&[c, c, c, c, a, a, b, b])
}

/// One block's B tile and the 16 weight rows' scales of that block.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct BlockB {
    b: [u8; B_BYTES],
    dw: [f32; TN],
}

impl Default for BlockB {
    fn default() -> BlockB {
        BlockB { b: [0; B_BYTES], dw: [0.0; TN] }
    }
}

/// 16 activation rows: quants of block 0 of the first (rows `cols` bytes apart) and its scales
/// (rows nb apart).
#[derive(Clone, Copy)]
struct Rows16 {
    q: *const i8,
    d: *const f32,
}

/// The last n mod 16 activation rows, zero-padded to 16 (rows t0..n at 0..n − t0).
struct Tail {
    t0: usize,
    q: Vec<i8>,
    d: Vec<f32>,
}

impl Tail {
    fn of(xa: &QuantizedActs, n: usize, nb: usize) -> Tail {
        let (t0, cols) = (n / TM * TM, xa.cols);
        let (mut q, mut d) = (Vec::new(), Vec::new());
        if t0 < n {
            (q, d) = (vec![0; TM * cols], vec![0.0; TM * nb]);
            q[..(n - t0) * cols].copy_from_slice(&xa.qs[t0 * cols..n * cols]);
            d[..(n - t0) * nb].copy_from_slice(&xa.d[t0 * nb..n * nb]);
        }
        Tail { t0, q, d }
    }
}

/// W8A8 / W4A8 product of interleaved `w` (`table::GemvI8Fn`) on tiles `T`: the VNNI kernel
/// below `AMX_MIN_ROWS` activation rows, else whole row groups by pairs on the tiles (a last
/// single group with half the B tile zero) and rows outside whole groups by the reference, as
/// the other interleaved kernels (`by_groups`).
pub(crate) fn gemv_i8<T: Tiles>(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    if n < AMX_MIN_ROWS {
        return vnni::gemv_i8(w, rows, xa, n, out);
    }
    on_tiles::<T>(w, rows, xa, n, out)
}

/// `gemv_i8`'s tile path, for any n ≥ 1 (the tests run it below the threshold too).
pub(super) fn on_tiles<T: Tiles>(w: Mat<'_>, rows: Range<usize>, xa: &QuantizedActs, n: usize, out: &mut [f32]) {
    let (g, cols) = (Grouped::of(w), w.cols());
    let nb = g.nb;
    assert!(xa.cols == cols && xa.qs.len() >= n * cols && xa.d.len() >= n * nb && out.len() >= n * rows.len());
    assert!(rows.end <= w.rows());
    let len = rows.len();
    let tail = Tail::of(xa, n, nb);
    let mut bufs = vec![BlockB::default(); nb];
    let mut t: Option<T> = None;
    by_groups(
        rows,
        n,
        2,
        out,
        |r, o| generic::gemv_i8(w, r, xa, n, o),
        |grp, k, at, out, tokens| {
            let tiles = t.get_or_insert_with(|| {
                let mut t = T::default();
                t.configure(&config());
                t
            });
            // SAFETY: the table's CPU has AVX-512 (module comment); groups grp..grp + k lie
            // inside the matrix (rows.end ≤ w.rows() asserted).
            unsafe { prepare(g, grp, k == 2, &mut bufs) };
            for t0 in tokens.step_by(TM) {
                let src = match t0 + TM <= n {
                    true => Rows16 { q: xa.qs[t0 * cols..].as_ptr(), d: xa.d[t0 * nb..].as_ptr() },
                    false => Rows16 { q: tail.q.as_ptr(), d: tail.d.as_ptr() },
                };
                debug_assert!(t0 + TM <= n || t0 == tail.t0);
                let m = TM.min(n - t0);
                assert!(out.len() >= (t0 + m - 1) * len + at + k * GROUP_ROWS);
                // SAFETY: src holds 16 rows of nb blocks, `cols` bytes / nb scales apart (in
                // place: rows t0 + 16 ≤ n, lengths asserted; else the padded copy); bufs holds
                // nb blocks; the writes end inside `out` (asserted); the CPU as above.
                unsafe {
                    let acc = tile16(tiles, &bufs, src, cols, nb);
                    store(&acc[..m], k == 2, out[t0 * len + at..].as_mut_ptr(), len);
                }
            }
        },
    );
    if let Some(mut t) = t {
        t.release();
    }
}

/// The B tiles and scales of every block of groups grp and (when `two`) grp + 1 into `bufs`
/// (columns 8..16 zero without the second group).
///
/// SAFETY: the CPU has AVX-512 F/BW; the groups are inside the matrix; bufs.len() == g.nb.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn prepare(g: Grouped, grp: usize, two: bool, bufs: &mut [BlockB]) {
    // SAFETY: the caller's contract: units (grp, b) and (grp + 1, b) when `two` are readable.
    unsafe {
        let keep: __mmask16 = if two { 0xffff } else { 0x00ff };
        for (b, buf) in bufs.iter_mut().enumerate() {
            let (ua, ub) = (g.unit(grp, b), if two { g.unit(grp + 1, b) } else { g.unit(grp, b) });
            let o = buf.b.as_mut_ptr();
            if g.q4 {
                let (m, eight) = (_mm512_set1_epi8(15), _mm512_set1_epi8(8));
                for c in 0..4 {
                    let w = vnni::chunk16(ua, ub, c);
                    let lo = _mm512_sub_epi8(_mm512_and_si512(w, m), eight);
                    let hi = _mm512_sub_epi8(_mm512_and_si512(_mm512_srli_epi16::<4>(w), m), eight);
                    _mm512_store_si512(o.add(c * TILE_COLSB).cast(), _mm512_maskz_mov_epi32(keep, lo));
                    _mm512_store_si512(o.add((c + 4) * TILE_COLSB).cast(), _mm512_maskz_mov_epi32(keep, hi));
                }
            } else {
                for c in 0..8 {
                    _mm512_store_si512(
                        o.add(c * TILE_COLSB).cast(),
                        _mm512_maskz_mov_epi32(keep, vnni::chunk16(ua, ub, c)),
                    );
                }
            }
            let da = _mm256_castsi128_si256(_mm_loadu_si128(g.scales(grp, b).cast()));
            let db = if two { _mm_loadu_si128(g.scales(grp + 1, b).cast()) } else { _mm_setzero_si128() };
            _mm512_store_ps(buf.dw.as_mut_ptr(), _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(da, db)));
        }
    }
}

/// A block's tile product into register C: A from the activation rows' block b, B from bufs.
///
/// SAFETY: as `tile16`.
#[inline(always)]
unsafe fn product<T: Tiles, const C: u8, const A: u8, const B: u8>(
    t: &mut T,
    bufs: &[BlockB],
    x: Rows16,
    lda: usize,
    b: usize,
) {
    // SAFETY: the caller's contract: 16 rows of block b at x.q + 32b, lda apart; bufs[b] whole.
    unsafe {
        t.load::<A>(x.q.add(b * QK).cast(), lda);
        t.load::<B>(bufs[b].b.as_ptr(), TILE_COLSB);
    }
    t.zero::<C>();
    t.dpbssd::<C, A, B>();
}

/// A C tile's 16 rows of 16 i32 sums.
#[repr(C, align(64))]
struct CBuf([i32; TM * TN]);

/// Register C into `c`.
#[inline(always)]
fn stash<T: Tiles, const C: u8>(t: &mut T, c: &mut CBuf) {
    // SAFETY: c is 16 rows of 64 writable bytes.
    unsafe { t.store::<C>(c.0.as_mut_ptr().cast(), TILE_COLSB) };
}

/// A block's sums (16 activation rows × 16 weight rows) scaled into acc: acc[r] = fma(f32(c[r]),
/// dw·dx[r], acc[r]), the VNNI kernels' operations.
///
/// SAFETY: as `tile16` (dx: the block's scale of the first row, rows ldd apart).
#[inline(always)]
unsafe fn scale(acc: &mut [__m512; TM], c: &CBuf, blk: &BlockB, dx: *const f32, ldd: usize) {
    // SAFETY: the caller's contract; the CPU has AVX-512 F (the callers' target features).
    unsafe {
        let dw = _mm512_load_ps(blk.dw.as_ptr());
        for (r, a) in acc.iter_mut().enumerate() {
            let s = _mm512_cvtepi32_ps(_mm512_load_si512(c.0[r * TN..].as_ptr().cast()));
            let d = _mm512_mul_ps(dw, _mm512_set1_ps(*dx.add(r * ldd)));
            *a = _mm512_fmadd_ps(s, d, *a);
        }
    }
}

/// Blocks whose tile products are issued ahead of the block being stored.
const AHEAD: usize = 3;
/// Blocks between a block's store and its scaling (the vector loads of a tile store's bytes
/// wait for the store to complete; 1, 2 and 3 measured the same here, within noise).
const LAG: usize = 2;
/// Stored blocks in flight (a power of two above LAG).
const RING: usize = 4;

/// Step b of `tile16` (I = b mod 4): issue block b + AHEAD's product into tmm P (A: tmm PA, B:
/// tmm PB), store block b's sums (tmm I) and scale block b − LAG's.
///
/// SAFETY: as `tile16`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn step<T: Tiles, const I: u8, const P: u8, const PA: u8, const PB: u8>(
    t: &mut T,
    acc: &mut [__m512; TM],
    cb: &mut [CBuf; RING],
    bufs: &[BlockB],
    x: Rows16,
    lda: usize,
    ldd: usize,
    b: usize,
) {
    // SAFETY: the caller's contract.
    unsafe {
        if b + AHEAD < bufs.len() {
            product::<T, P, PA, PB>(t, bufs, x, lda, b + AHEAD);
        }
        stash::<T, I>(t, &mut cb[b % RING]);
        if b >= LAG {
            let s = b - LAG;
            scale(acc, &cb[s % RING], &bufs[s], x.d.add(s), ldd);
        }
    }
}

/// The 16 × 16 results of activation rows x against the pair of groups in bufs, over every
/// block: acc[r] lane j = weight row j · activation row r. Software-pipelined: block b's
/// product runs in C tile tmm(b mod 4) (A tmm(4 + b mod 2), B tmm(6 + b mod 2)), issued AHEAD
/// blocks before it is stored, and scaled LAG blocks after; the blocks are scaled in ascending
/// order.
///
/// SAFETY: the CPU has AVX-512 F and the tiles configured by `config`; x holds 16 rows of
/// bufs.len() ≥ 1 blocks, their quants lda bytes and scales ldd apart.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn tile16<T: Tiles>(t: &mut T, bufs: &[BlockB], x: Rows16, lda: usize, ldd: usize) -> [__m512; TM] {
    // SAFETY: the caller's contract, for every block b < bufs.len().
    unsafe {
        let mut acc = [_mm512_setzero_ps(); TM];
        let nb = bufs.len();
        // Written by each tile store before it is read.
        let mut cb: [CBuf; RING] = std::array::from_fn(|_| CBuf([0; TM * TN]));
        product::<T, 0, 4, 6>(t, bufs, x, lda, 0);
        if nb > 1 {
            product::<T, 1, 5, 7>(t, bufs, x, lda, 1);
        }
        if nb > 2 {
            product::<T, 2, 4, 6>(t, bufs, x, lda, 2);
        }
        for b in (0..nb).step_by(4) {
            step::<T, 0, 3, 5, 7>(t, &mut acc, &mut cb, bufs, x, lda, ldd, b);
            if b + 1 < nb {
                step::<T, 1, 0, 4, 6>(t, &mut acc, &mut cb, bufs, x, lda, ldd, b + 1);
            }
            if b + 2 < nb {
                step::<T, 2, 1, 5, 7>(t, &mut acc, &mut cb, bufs, x, lda, ldd, b + 2);
            }
            if b + 3 < nb {
                step::<T, 3, 2, 4, 6>(t, &mut acc, &mut cb, bufs, x, lda, ldd, b + 3);
            }
        }
        for s in nb.saturating_sub(LAG)..nb {
            scale(&mut acc, &cb[s % RING], &bufs[s], x.d.add(s), ldd);
        }
        acc
    }
}

/// out[r·stride ..] = acc[r]: 16 lanes with `two` groups, else 8.
///
/// SAFETY: the CPU has AVX-512 F; out valid for those writes.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,fma,f16c")]
unsafe fn store(acc: &[__m512], two: bool, out: *mut f32, stride: usize) {
    let keep: __mmask16 = if two { 0xffff } else { 0x00ff };
    for (r, &a) in acc.iter().enumerate() {
        // SAFETY: the caller's contract (masked-off lanes are not written).
        unsafe { _mm512_mask_storeu_ps(out.add(r * stride), keep, a) };
    }
}

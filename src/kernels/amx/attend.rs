//! Attention's two products over a block of cached positions on AMX-BF16 tiles, for a KV cache
//! held in bf16 (`forward::blocked_attention`'s tiled form on the `amx` path, `Reduced` mode):
//! the block's keys and values are the B operands, their stored bits moved into tile order (never
//! widened); the queries and the softmax weights are the A operands, rounded to bf16 as every
//! activation meeting bf16 weights is. Shapes (a u32 holds two bf16, the first in its low half):
//!
//! ```text
//! q   [mp, kwp] bf16              queries: 16 per tile, 32 dims per tile row (`round_rows`)
//! kt  [ks / 16][kwp / 2][16] u32  keys: per 16 positions, dim pairs × positions (`pack_keys`)
//! s   [mp, ks] f32              = q·kᵀ (`scores`)
//! p   [mp, ksp] bf16              weights: 32 positions per tile row (`round_rows`)
//! vt  [ksp / 2][vwp] u32          values: position pairs × dims (`pack_values`)
//! acc [mp, vwp] f32            += p·v (`values`)
//! ```
//!
//! mp, ks and vwp are multiples of 16, kwp and ksp of 32. Registers: C tmm0 … tmm3 (up to four
//! output tiles of one query tile), A tmm4, B tmm5 / tmm6 in turn. Every output element is one
//! chain of TDPBF16PS steps in ascending order whatever the other queries: a query's result does
//! not depend on which queries share its tiles.

use super::{TileConfig, Tiles, TILE_COLSB, TILE_ROWS};
use crate::kernels::bf16act::round_slice;
use crate::kernels::table::{CachedRows, TransposeFn};

/// Queries (A rows) per tile; positions per score tile; value dims per output tile.
pub const ROWS: usize = TILE_ROWS;
/// bf16 values per A tile row: dims of a score step, positions of a value step.
pub const STEP: usize = TILE_COLSB / 2;
/// Output tiles per pass over an A tile row (tmm0 … tmm3).
const WIDE: usize = 4;

/// Scratch starting on a cache line, viewed as u16, u32 or f32 values: every operand row of the
/// products is 64 bytes or a multiple, so on a line boundary each tile row is one cache line (a
/// tile load whose rows straddle two lines ran ~7× slower on the AMX Xeon: 16.6 against 2.5 ns
/// from L1).
#[derive(Default)]
pub struct Aligned(Vec<Line>);

#[derive(Clone, Copy, Default)]
#[repr(C, align(64))]
struct Line([u32; 16]);

/// The plain values an `Aligned` holds (every bit pattern valid, alignment ≤ 64).
pub trait Plain: Copy {}
impl Plain for u16 {}
impl Plain for u32 {}
impl Plain for f32 {}

impl Aligned {
    /// The first len values, growing the storage (with zeros) if needed; what it held stays.
    pub fn slice_mut<T: Plain>(&mut self, len: usize) -> &mut [T] {
        let lines = (len * size_of::<T>()).div_ceil(size_of::<Line>());
        if self.0.len() < lines {
            self.0.resize(lines, Line::default());
        }
        // SAFETY: the lines hold at least len values of T (plain data, any bits valid, aligned).
        unsafe { std::slice::from_raw_parts_mut(self.0.as_mut_ptr().cast(), len) }
    }

    /// The first len values, which must be held.
    pub fn slice<T: Plain>(&self, len: usize) -> &[T] {
        assert!(len * size_of::<T>() <= self.0.len() * size_of::<Line>(), "aligned scratch: {len} values");
        // SAFETY: as in `slice_mut`.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr().cast(), len) }
    }
}

/// The calling thread's `Aligned` buffers, reused: a decode step's many partials allocate nothing.
pub mod scratch {
    use super::Aligned;
    use std::cell::RefCell;

    thread_local! {
        static SCRATCH: RefCell<Vec<Aligned>> = const { RefCell::new(Vec::new()) };
    }

    /// A buffer of the thread's (or a new one); contents unspecified.
    pub fn take() -> Aligned {
        SCRATCH.with(|s| s.borrow_mut().pop()).unwrap_or_default()
    }

    /// Buffers back to the thread's.
    pub fn give(bufs: impl IntoIterator<Item = Aligned>) {
        SCRATCH.with(|s| s.borrow_mut().extend(bufs));
    }

    /// Touch the thread's buffers so that their destructor is registered now (see
    /// `kernels::prepare_thread`).
    pub(crate) fn prepare_thread() {
        SCRATCH.with(|_| ());
    }
}

/// dst [rows, width] bf16 = src [rows, cols] f32 rounded (`bf16act::round_bf16`), zero in the
/// columns past cols (width ≥ cols) and in the rows past src's.
pub fn round_rows(src: &[f32], cols: usize, width: usize, dst: &mut [u16]) {
    let mut rows = src.chunks_exact(cols.max(1));
    for d in dst.chunks_exact_mut(width) {
        match rows.next() {
            Some(s) if cols > 0 => {
                round_slice(s, &mut d[..cols]);
                d[cols..].fill(0);
            }
            _ => d.fill(0),
        }
    }
}

/// kt = a block's keys in tile order ([ks / 16][kwp / 2][16] u32, see the module): key row j is
/// `rows.bits[j·stride ..][..kw]` for j in `rows.live`, zero for the block's other rows and past
/// kw. Whole groups of 16 live rows are turned pair-major by the path's `transpose` in place
/// (their bits moved as f32 lanes, never computed on); the others pair by pair.
pub fn pack_keys(transpose: TransposeFn, rows: CachedRows<'_>, kw: usize, kwp: usize, ks: usize, kt: &mut [u32]) {
    let CachedRows { bits, stride, live } = rows;
    let pairs = kwp / 2;
    assert_eq!(kt.len(), ks * pairs, "amx keys: buffer");
    for (g, dst) in kt.chunks_exact_mut(pairs * ROWS).enumerate() {
        let group = g * ROWS..(g + 1) * ROWS;
        let (a, b) = (live.start.max(group.start), live.end.min(group.end));
        if (a, b) == (group.start, group.end) && kw == kwp && stride.is_multiple_of(2) {
            // SAFETY: any bits are a valid f32; align_to splits off what is not 4-byte aligned.
            let (head, src, _) = unsafe { bits[group.start * stride..].align_to::<f32>() };
            if head.is_empty() {
                // SAFETY: as above (u32 and f32 have one alignment: nothing is split off).
                let (_, out, _) = unsafe { dst.align_to_mut::<f32>() };
                transpose(src, stride / 2, ROWS, pairs, out);
                continue;
            }
        }
        // Pair by pair: zero outside the live rows and past kw.
        dst.fill(0);
        for j in a..b {
            for (q, pair) in bits[j * stride..][..kw].chunks(2).enumerate() {
                let high = pair.get(1).map_or(0, |&h| u32::from(h) << 16);
                dst[q * ROWS + j - group.start] = u32::from(pair[0]) | high;
            }
        }
    }
}

/// vt = a block's values in tile order ([ksp / 2][vwp] u32, see the module): value row j is
/// `rows.bits[j·stride ..][..vw]` for j in `rows.live`, zero for the block's other rows and past
/// vw (`table::PackValuesFn`; portable: the tile model's, the hardware's is compiled for
/// AVX-512, `hw::ATTEND`).
#[cfg(test)]
pub fn pack_values(rows: CachedRows<'_>, vw: usize, vwp: usize, ksp: usize, vt: &mut [u32]) {
    pack_values_body(rows, vw, vwp, ksp, vt)
}

/// `pack_values`, inlined into a caller compiled for wider vectors (`hw::ATTEND`).
#[inline(always)]
pub fn pack_values_body(rows: CachedRows<'_>, vw: usize, vwp: usize, ksp: usize, vt: &mut [u32]) {
    let CachedRows { bits, stride, live } = rows;
    assert_eq!(vt.len(), ksp / 2 * vwp, "amx values: buffer");
    let row = |j: usize| (live.contains(&j)).then(|| &bits[j * stride..][..vw]);
    for (r, dst) in vt.chunks_exact_mut(vwp).enumerate() {
        match (row(2 * r), row(2 * r + 1)) {
            (Some(e), Some(o)) => {
                dst.iter_mut().zip(e.iter().zip(o)).for_each(|(d, (&e, &o))| *d = u32::from(e) | u32::from(o) << 16)
            }
            (Some(e), None) => dst.iter_mut().zip(e).for_each(|(d, &e)| *d = u32::from(e)),
            (None, Some(o)) => dst.iter_mut().zip(o).for_each(|(d, &o)| *d = u32::from(o) << 16),
            (None, None) => dst[..vw].fill(0),
        }
        dst[vw..].fill(0);
    }
}

/// Every register 16 rows × 64 bytes.
fn config() -> TileConfig {
    TileConfig::full(0..8)
}

/// The C register `j` (tmm0 … tmm3) zeroed, loaded, stored; B register tmm5 / tmm6 by parity.
fn zero_c<T: Tiles>(t: &mut T, j: usize) {
    match j {
        0 => t.zero::<0>(),
        1 => t.zero::<1>(),
        2 => t.zero::<2>(),
        _ => t.zero::<3>(),
    }
}

/// # Safety
/// 16 rows of 64 bytes, `stride` apart from `p`, readable.
unsafe fn load_c<T: Tiles>(t: &mut T, j: usize, p: *const u8, stride: usize) {
    // SAFETY: the caller's.
    unsafe {
        match j {
            0 => t.load::<0>(p, stride),
            1 => t.load::<1>(p, stride),
            2 => t.load::<2>(p, stride),
            _ => t.load::<3>(p, stride),
        }
    }
}

/// # Safety
/// 16 rows of 64 bytes, `stride` apart from `p`, writable.
unsafe fn store_c<T: Tiles>(t: &mut T, j: usize, p: *mut u8, stride: usize) {
    // SAFETY: the caller's.
    unsafe {
        match j {
            0 => t.store::<0>(p, stride),
            1 => t.store::<1>(p, stride),
            2 => t.store::<2>(p, stride),
            _ => t.store::<3>(p, stride),
        }
    }
}

/// B into tmm5 or tmm6 (by j's parity), then C_j += A (tmm4) · that B.
///
/// # Safety
/// 16 rows of 64 bytes, `stride` apart from `p`, readable.
unsafe fn load_b_and_dp<T: Tiles>(t: &mut T, j: usize, p: *const u8, stride: usize) {
    // SAFETY: the caller's.
    unsafe {
        if j.is_multiple_of(2) {
            t.load::<5>(p, stride);
        } else {
            t.load::<6>(p, stride);
        }
    }
    match j {
        0 => t.dpbf16ps::<0, 4, 5>(),
        1 => t.dpbf16ps::<1, 4, 6>(),
        2 => t.dpbf16ps::<2, 4, 5>(),
        _ => t.dpbf16ps::<3, 4, 6>(),
    }
}

/// s [mp, ks] = q · keysᵀ: q [mp, kwp] bf16, kt the keys in tile order (`pack_keys`).
pub fn scores<T: Tiles>(q: &[u16], kwp: usize, kt: &[u32], ks: usize, s: &mut [f32]) {
    let mp = q.len() / kwp.max(1);
    let pairs = kwp / 2;
    assert!(mp.is_multiple_of(ROWS) && kwp.is_multiple_of(STEP) && ks.is_multiple_of(ROWS), "amx scores: shapes");
    assert!(kt.len() >= ks * pairs && s.len() >= mp * ks, "amx scores: buffers");
    let mut t = T::default();
    t.configure(&config());
    for i0 in (0..mp).step_by(ROWS) {
        for g0 in (0..ks / ROWS).step_by(WIDE) {
            let wide = WIDE.min(ks / ROWS - g0);
            (0..wide).for_each(|j| zero_c(&mut t, j));
            for c in 0..kwp / STEP {
                // SAFETY: q holds rows i0 .. i0 + 16 of kwp values, and each key tile 16 rows of
                // 16 u32 from its start (asserted above).
                unsafe {
                    t.load::<4>(q[i0 * kwp + c * STEP..].as_ptr().cast(), kwp * 2);
                    for j in 0..wide {
                        let b = &kt[((g0 + j) * pairs + c * ROWS) * ROWS..];
                        load_b_and_dp(&mut t, j, b.as_ptr().cast(), TILE_COLSB);
                    }
                }
            }
            for j in 0..wide {
                // SAFETY: s holds rows i0 .. i0 + 16 of ks values, columns (g0 + j)·16 + 16 ≤ ks.
                unsafe { store_c(&mut t, j, s[i0 * ks + (g0 + j) * ROWS..].as_mut_ptr().cast(), ks * 4) };
            }
        }
    }
    t.release();
}

/// acc [mp, vwp] += p · values: p [mp, ksp] bf16, vt the values in tile order (`pack_values`).
pub fn values<T: Tiles>(p: &[u16], ksp: usize, vt: &[u32], vwp: usize, acc: &mut [f32]) {
    let mp = p.len() / ksp.max(1);
    assert!(mp.is_multiple_of(ROWS) && ksp.is_multiple_of(STEP) && vwp.is_multiple_of(ROWS), "amx values: shapes");
    assert!(vt.len() >= ksp / 2 * vwp && acc.len() >= mp * vwp, "amx values: buffers");
    let mut t = T::default();
    t.configure(&config());
    for i0 in (0..mp).step_by(ROWS) {
        for c0 in (0..vwp / ROWS).step_by(WIDE) {
            let wide = WIDE.min(vwp / ROWS - c0);
            let at = |j: usize| i0 * vwp + (c0 + j) * ROWS;
            for j in 0..wide {
                // SAFETY: acc holds rows i0 .. i0 + 16 of vwp values, columns up to (c0 + j + 1)·16.
                unsafe { load_c(&mut t, j, acc[at(j)..].as_ptr().cast(), vwp * 4) };
            }
            for step in 0..ksp / STEP {
                // SAFETY: p holds rows i0 .. i0 + 16 of ksp values; vt rows step·16 .. + 16 of vwp.
                unsafe {
                    t.load::<4>(p[i0 * ksp + step * STEP..].as_ptr().cast(), ksp * 2);
                    for j in 0..wide {
                        let b = &vt[step * ROWS * vwp + (c0 + j) * ROWS..];
                        load_b_and_dp(&mut t, j, b.as_ptr().cast(), vwp * 4);
                    }
                }
            }
            for j in 0..wide {
                // SAFETY: as for the loads.
                unsafe { store_c(&mut t, j, acc[at(j)..].as_mut_ptr().cast(), vwp * 4) };
            }
        }
    }
    t.release();
}

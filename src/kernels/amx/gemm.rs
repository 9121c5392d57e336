//! y [n, rows] = x · wᵀ for bf16 weights w [rows, cols] against bf16 activations, on tiles:
//! the weights are the A operand, read straight from the stored rows (16 weight rows × 32
//! columns per tile, `cols · 2` bytes apart: no copy of the weights), and the activations the B
//! operand, in the column-pair panels `Bf16Acts::pack_panels` builds (16 activation rows × 16
//! pairs per tile, 64 bytes apart) — the VNNI order TDPBF16PS wants. Each step is a 2 × 2 block
//! of C tiles (32 weight rows × 32 activation rows) over 32 columns:
//!
//! * tmm0 … tmm3: C, [weight half i][panel half j] at tmm(2i + j);
//! * tmm4, tmm5: A, weight rows r0 .. r0 + 16 and r0 + 16 .. r0 + 32;
//! * tmm6, tmm7: B, activation panels p0 and p0 + 1.
//!
//! Steps whose tiles lie inside the matrix and the panels load in place; edges (weight rows
//! past `rows`, columns past `cols`, panels past the last, pairs past cols / 2) come from
//! zero-padded copies of the tile. Tasks are 128 weight rows on the calling pool; each panel pair
//! meets the task's four blocks in turn, and each block's C tiles are stored as one 32 × 32
//! block, turned token-major by the path's `transpose` and written as runs of weight rows. Each
//! output is one chain over the column steps in ascending order, so the result does not depend
//! on the thread count.

use super::{TileConfig, Tiles, TILE_COLSB, TILE_ROWS};
use crate::format::DType;
use crate::kernels::mat::Mat;
use crate::kernels::par::{for_tasks, OutPtr};
use crate::kernels::table::{TransposeFn, NR};

/// bf16 columns per A tile row (64 bytes).
pub(super) const TK: usize = TILE_COLSB / 2;
/// Column pairs per B tile (its rows).
const TQ: usize = TK / 2;
/// Weight rows (and activation rows) per 2 × 2 step.
const BLOCK: usize = 2 * TILE_ROWS;
const _: () = assert!(NR == TILE_ROWS && TQ == TILE_ROWS, "a panel is a B tile's width");

/// Weight rows per task: each panel pair meets the task's 2 × 2 blocks in turn while it is in
/// L2 (a pair is 128 KiB at 2048 columns), so the panels are read from further away once per
/// 128 rows instead of once per 32.
const TASK_ROWS: usize = 4 * BLOCK;

/// A tile's bytes: 16 rows × 64.
#[repr(C, align(64))]
pub(super) struct TileBuf([u8; TILE_ROWS * TILE_COLSB]);

impl Default for TileBuf {
    fn default() -> TileBuf {
        TileBuf([0; TILE_ROWS * TILE_COLSB])
    }
}

/// Where the A tile of weight rows r .. r + 16, columns k0 .. k0 + 32 is: (pointer, stride). In
/// the stored rows when whole; otherwise copied into `buf`, zero past the matrix.
pub(super) fn a_tile(
    w: &[u16],
    rows: usize,
    cols: usize,
    r: usize,
    k0: usize,
    buf: &mut TileBuf,
) -> (*const u8, usize) {
    if r + TILE_ROWS <= rows && k0 + TK <= cols {
        return (w[r * cols + k0..].as_ptr().cast(), cols * 2);
    }
    buf.0.fill(0);
    let kc = TK.min(cols - k0);
    for i in 0..TILE_ROWS.min(rows.saturating_sub(r)) {
        for (c, &v) in w[(r + i) * cols + k0..][..kc].iter().enumerate() {
            buf.0[i * TILE_COLSB + 2 * c..][..2].copy_from_slice(&v.to_le_bytes());
        }
    }
    (buf.0.as_ptr(), TILE_COLSB)
}

/// Where the B tile of panel p, pairs q0 .. q0 + 16 is (panels [n_panels, pairs, NR], see
/// `Bf16Acts`): (pointer, stride). In the panels when whole; otherwise copied into `buf`, zero
/// past the last panel or pair.
pub(super) fn b_tile(panels: &[u32], pairs: usize, p: usize, q0: usize, buf: &mut TileBuf) -> (*const u8, usize) {
    let n_panels = panels.len() / (pairs * NR).max(1);
    if p < n_panels && q0 + TQ <= pairs {
        return (panels[(p * pairs + q0) * NR..].as_ptr().cast(), NR * 4);
    }
    buf.0.fill(0);
    if p < n_panels {
        let q = TQ.min(pairs - q0);
        for (i, &v) in panels[(p * pairs + q0) * NR..][..q * NR].iter().enumerate() {
            buf.0[4 * i..][..4].copy_from_slice(&v.to_le_bytes());
        }
    }
    (buf.0.as_ptr(), TILE_COLSB)
}

/// y [n, rows] = x · wᵀ: w bf16 [rows, cols] (cols even), x's panels [⌈n / 16⌉, cols / 2, 16]
/// (`Bf16Acts::pack_panels`), on tiles `T`; `transpose` turns each block's results token-major.
pub(crate) fn gemm<T: Tiles>(transpose: TransposeFn, w: Mat<'_>, panels: &[u32], n: usize, y: &mut [f32]) {
    let (rows, cols) = (w.rows(), w.cols());
    assert_eq!(w.dtype(), DType::BF16, "amx gemm on a {} matrix", w.dtype());
    assert!(cols.is_multiple_of(2) && panels.len() == n.div_ceil(NR) * cols / 2 * NR, "amx gemm: panels");
    assert!(y.len() >= n * rows, "amx gemm: short output");
    let out = OutPtr(y.as_mut_ptr());
    for_tasks(rows.div_ceil(TASK_ROWS), rows * cols * n, |task| {
        let mut t = T::default();
        t.configure(&TileConfig::full(0..8));
        let mut runs = [0f32; BLOCK * BLOCK];
        let task_rows = task * TASK_ROWS..((task + 1) * TASK_ROWS).min(rows);
        for p0 in (0..n.div_ceil(NR)).step_by(2) {
            for r0 in task_rows.clone().step_by(BLOCK) {
                // c [32 weight rows][32 activation rows] → runs [k activation rows][mr weight rows].
                let c = block::<T>(&mut t, w, panels, r0, p0);
                let (mr, tok0) = (BLOCK.min(rows - r0), p0 * NR);
                let k = BLOCK.min(n - tok0);
                transpose(&c, BLOCK, mr, k, &mut runs[..k * mr]);
                for (j, run) in runs[..k * mr].chunks_exact(mr).enumerate() {
                    // SAFETY: weight rows r0 .. r0 + mr belong to this task only; y holds n·rows.
                    unsafe { out.write_run((tok0 + j) * rows + r0, run) };
                }
            }
        }
        t.release();
    });
}

/// One 2 × 2 block over every column: the four C tiles of weight rows r0 .. r0 + 32 against
/// panels p0, p0 + 1, as [32 weight rows][32 activation rows] f32. The column steps whose tiles all lie inside the
/// matrix and the panels read them in place (`steps`); the rest through `a_tile` / `b_tile`.
fn block<T: Tiles>(t: &mut T, w: Mat<'_>, panels: &[u32], r0: usize, p0: usize) -> [f32; BLOCK * BLOCK] {
    let (rows, cols, wb) = (w.rows(), w.cols(), w.as_u16());
    let pairs = cols / 2;
    let n_panels = panels.len() / (pairs * NR).max(1);
    t.zero::<0>();
    t.zero::<1>();
    t.zero::<2>();
    t.zero::<3>();
    // Whole steps: every tile of them in place.
    let inside = if r0 + BLOCK <= rows && p0 + 2 <= n_panels { cols / TK } else { 0 };
    if inside > 0 {
        let a = [&wb[r0 * cols..], &wb[(r0 + TILE_ROWS) * cols..]];
        let b = [&panels[p0 * pairs * NR..], &panels[(p0 + 1) * pairs * NR..]];
        // SAFETY: step s < cols / TK reads, of each weight half, 16 rows of 64 bytes from column
        // 32s (inside rows r0 .. r0 + 32), and of each panel 16 pairs from pair 16s (inside it).
        unsafe { steps(t, a.map(|a| a.as_ptr().cast()), cols * 2, b.map(|b| b.as_ptr().cast()), inside) };
    }
    let mut bufs: [TileBuf; 4] = Default::default();
    for k0 in (inside * TK..cols).step_by(TK) {
        let [b0, b1, b2, b3] = &mut bufs;
        let a0 = a_tile(wb, rows, cols, r0, k0, b0);
        let a1 = a_tile(wb, rows, cols, r0 + TILE_ROWS, k0, b1);
        let p0b = b_tile(panels, pairs, p0, k0 / 2, b2);
        let p1b = b_tile(panels, pairs, p0 + 1, k0 / 2, b3);
        // SAFETY: each source is 16 rows of 64 readable bytes `stride` apart (a_tile / b_tile).
        unsafe {
            t.load::<4>(a0.0, a0.1);
            t.load::<5>(a1.0, a1.1);
            t.load::<6>(p0b.0, p0b.1);
            t.load::<7>(p1b.0, p1b.1);
        }
        product(t);
    }
    // C tile 2i + j holds weight rows 16i .. 16i + 16 × activation rows 16j .. 16j + 16 of c.
    let mut c = [0f32; BLOCK * BLOCK];
    let (half, ldc) = (TILE_ROWS * BLOCK, BLOCK * 4);
    // SAFETY: each C tile is 16 rows of 64 bytes, `ldc` apart from its corner inside c.
    unsafe {
        t.store::<0>(c.as_mut_ptr().cast(), ldc);
        t.store::<1>(c[NR..].as_mut_ptr().cast(), ldc);
        t.store::<2>(c[half..].as_mut_ptr().cast(), ldc);
        t.store::<3>(c[half + NR..].as_mut_ptr().cast(), ldc);
    }
    c
}

/// Column steps 0 .. count of a block read in place: A tiles from the weight halves `a` (rows
/// `stride` bytes apart, step s at byte 64s), B tiles from the panels `b` (step s at byte 1024s).
///
/// # Safety
/// Every step's tiles must be readable: 16 rows of 64 bytes from a[h] + 64s, `stride` apart, and
/// 1 KiB from b[j] + 1024s.
#[inline(always)]
unsafe fn steps<T: Tiles>(t: &mut T, a: [*const u8; 2], stride: usize, b: [*const u8; 2], count: usize) {
    for s in 0..count {
        // SAFETY: the caller's bounds.
        unsafe {
            t.load::<4>(a[0].add(s * TILE_COLSB), stride);
            t.load::<5>(a[1].add(s * TILE_COLSB), stride);
            t.load::<6>(b[0].add(s * TILE_ROWS * TILE_COLSB), TILE_COLSB);
            t.load::<7>(b[1].add(s * TILE_ROWS * TILE_COLSB), TILE_COLSB);
        }
        product(t);
    }
}

/// The four products of a step: C(2i + j) += A(4 + i) · B(6 + j).
#[inline(always)]
fn product<T: Tiles>(t: &mut T) {
    t.dpbf16ps::<0, 4, 6>();
    t.dpbf16ps::<1, 4, 7>();
    t.dpbf16ps::<2, 5, 6>();
    t.dpbf16ps::<3, 5, 7>();
}

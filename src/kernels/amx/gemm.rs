//! y [n, rows] = x · wᵀ for bf16 weights w [rows, cols] against bf16 activations, on tiles, at
//! every activation-row count (one summation order whatever the batch): the weights are the A
//! operand, read straight from the stored rows (16 weight rows × 32 columns per tile,
//! `cols · 2` bytes apart: no copy of the weights), and the activations the B operand, in the
//! column-pair panels `Bf16Acts::pack_tiles` builds (16 pairs per tile, one row per activation
//! row of the panel: 16 lanes, or n when n < 16) — the VNNI order TDPBF16PS wants. A step is a
//! 2 × P block of C tiles (32 weight rows × P panels) over 32 columns:
//!
//! * tmm0 … tmm3: C, [weight half i][panel j] at tmm(2i + j) (tmm0 and tmm2 when P = 1);
//! * tmm4, tmm5: A, weight rows r0 .. r0 + 16 and r0 + 16 .. r0 + 32;
//! * tmm6, tmm7: B, activation panels p0 and p0 + 1 (tmm6 when P = 1).
//!
//! Panels go two at a time (P = 2); an odd last panel, and a call of one panel, alone (P = 1).
//! Under 16 activation rows the B and C tiles are configured n columns wide, so a decode step
//! reads its one activation row contiguously. Steps whose tiles lie inside the matrix and the
//! panels load in place; edges (weight rows past `rows`, columns past `cols`, pairs past
//! cols / 2) come from zero-padded copies of the tile. Tasks are 32 to 128 weight rows
//! (`task_rows`); each panel pair meets the task's blocks in turn, and each block's C tiles are stored as one 32 × 32
//! block, then written by `sink` (token-major f32 rows, or the next product's bf16 panels). Each
//! output is one chain over the column steps in ascending order whatever the number of
//! activation rows, the panel it falls in, the task or the thread count: a row's result is the
//! same bits in every batch. An odd number of panels (from three) ends in a 1 × 3 block instead
//! (`groups`, `block3`: 16 weight rows against three panels; C tmm0 … tmm2, A tmm4, B tmm5 …
//! tmm7), which reads the weights once for the last three panels.

use super::operand::{a_tile, b_tile, TileBuf, Weights, TQ};
use super::sink::{CBlock, Dest, Done, Sink, BLOCK};
use super::split::{chunk_width, task_rows};
use super::{TileConfig, Tiles, TILE_COLSB, TILE_ROWS, TK};
use crate::format::DType;
use crate::kernels::mat::Mat;
use crate::kernels::par::{for_tasks, with_buffer};
use crate::kernels::table::{Bf16Out, GatedUp, TransposeFn, NR};
use std::cell::RefCell;
use std::ops::Range;

thread_local! {
    /// The calling thread's blocks for a task (`split_blocks`), reused: a decode step's many
    /// small products allocate nothing.
    static BLOCKS: RefCell<Vec<CBlock>> = const { RefCell::new(Vec::new()) };
}

/// A task's blocks from `bufs`: `kept` for the gate's (or the only) partial sums and results,
/// as many for up's when `up`, and two scratch blocks for the write-back. Contents unspecified:
/// every block is written before it is read.
fn split_blocks(bufs: &mut Vec<CBlock>, kept: usize, up: bool) -> (&mut [CBlock], &mut [CBlock], [&mut CBlock; 2]) {
    let parts = if up { 2 * kept } else { kept };
    if bufs.len() < parts + 2 {
        bufs.resize_with(parts + 2, CBlock::default);
    }
    let (part, rest) = bufs.split_at_mut(kept);
    let (part_up, rest) = rest.split_at_mut(parts - kept);
    let [runs, runs_up, ..] = rest else { unreachable!("two scratch blocks") };
    (part, part_up, [runs, runs_up])
}

/// Touch this thread's blocks so that their destructor is registered now (see
/// `kernels::prepare_thread`).
pub(crate) fn prepare_thread() {
    BLOCKS.with(|_| ());
}

/// The B operand's lanes (activation rows per panel) for n activation rows: a whole panel's 16,
/// or n when fewer (`Bf16Acts::pack_tiles`).
pub(crate) fn lanes(n: usize) -> usize {
    NR.min(n)
}

/// The tile shapes for n activation rows: everything 16 × 64 bytes from 16 rows on; under that
/// the C and B tiles n dwords wide (tmm0, tmm2, tmm4 … tmm6 only: one panel).
fn config(n: usize) -> TileConfig {
    if n >= NR {
        return TileConfig::full(0..8);
    }
    let (narrow, a, unused) = ((TILE_ROWS, 4 * n), (TILE_ROWS, TILE_COLSB), (0, 0));
    TileConfig::shaped(&[narrow, unused, narrow, unused, a, a, narrow])
}

/// y [n, rows.len()] = x · w[rows]ᵀ: w bf16 [w.rows(), cols] (cols even), x's tile panels
/// (`Bf16Acts::pack_tiles`: [⌈n / 16⌉, cols / 2, lanes(n)]), on tiles `T`; `transpose` turns
/// each block's results token-major. With `up` (w then the gate), y = act(x · w[rows]ᵀ,
/// x · up[rows]ᵀ): each block of both, joined as its results are written (task rows as for
/// twice the width: both matrices' rows stay in L2). Tasks of `task_rows` weight rows on the calling pool when `pool`,
/// else all on the calling thread (a caller that splits the rows itself).
#[allow(clippy::too_many_arguments)]
pub(crate) fn gemm<T: Tiles>(
    transpose: TransposeFn,
    w: Mat<'_>,
    rows: Range<usize>,
    panels: &[u32],
    n: usize,
    out: Bf16Out<'_>,
    pool: bool,
    up: Option<GatedUp<'_>>,
) {
    gemm_in_chunks::<T>(transpose, w, rows, panels, n, out, pool, up, chunk_width(w.cols()))
}

/// `gemm` with chunks of `kc` columns (a multiple of 32): the same bits for any kc.
#[allow(clippy::too_many_arguments)]
pub(super) fn gemm_in_chunks<T: Tiles>(
    transpose: TransposeFn,
    w: Mat<'_>,
    rows: Range<usize>,
    panels: &[u32],
    n: usize,
    out: Bf16Out<'_>,
    pool: bool,
    up: Option<GatedUp<'_>>,
    kc: usize,
) {
    let cols = w.cols();
    if let Some(g) = &up {
        assert!(g.up.dtype() == w.dtype() && (g.up.rows(), g.up.cols()) == (w.rows(), cols), "amx gemm: up's shape");
    }
    assert!(kc > 0 && kc.is_multiple_of(TK), "amx gemm: chunks of {kc} columns");
    assert_eq!(w.dtype().encoding(), DType::BF16, "amx gemm on a {} matrix", w.dtype());
    let lanes = lanes(n);
    assert!(cols.is_multiple_of(2) && panels.len() == n.div_ceil(NR) * cols / 2 * lanes, "amx gemm: panels");
    assert!(rows.end <= w.rows(), "amx gemm: rows {rows:?} of {}", w.rows());
    let dest = Dest::of(out, w.rows(), rows.clone(), n);
    if rows.is_empty() || n == 0 {
        return;
    }
    let n_panels = n.div_ceil(NR);
    // A decode step over bf16r32 weights reads them as streams: bigger tasks, and a gate's
    // blocks before up's (`Product::phased`).
    let stream = w.dtype() == DType::Bf16R32 && n_panels == 1;
    let task_rows = match stream {
        true => STREAM_TASK_ROWS,
        false => task_rows(cols.min(kc) * if up.is_some() { 2 } else { 1 }, n, panels.len() * 4),
    };
    let product = Product { w, up, panels, lanes, n_panels, kc, phased: stream && up.is_some() };
    let sink = Sink { transpose, dest, n, up };
    let task = |task: usize| {
        let r0 = rows.start + task * task_rows;
        product.task::<T>(&sink, r0..(r0 + task_rows).min(rows.end));
    };
    let tasks = rows.len().div_ceil(task_rows);
    match pool {
        true => for_tasks(tasks, rows.len() * cols * n, task),
        false => (0..tasks).for_each(task),
    }
}

/// Weight rows per task of a decode step over bf16r32 weights (`STREAM_TASK_ROWS` rows of gate
/// and of up in turn). One thread, olmoe-4l bf16r32 tg64 (`PHASE=…` a local switch), the fused
/// gate / up products' GB/s, two rounds: 32-row tasks alternating gate and up blocks 15.0–15.3;
/// phases of 128 rows 15.1–15.5, 256 15.5–16.2, 512 15.7–16.0, 1024 15.3–15.9; tg64 20.7–21.0 →
/// 21.0–21.5 t/s with 256. Row-major weights gained nothing from it (14.0–14.2 either way).
const STREAM_TASK_ROWS: usize = 256;

/// One product's operands and how its tasks walk them (`gemm_in_chunks`).
struct Product<'a> {
    w: Mat<'a>,
    up: Option<GatedUp<'a>>,
    panels: &'a [u32],
    lanes: usize,
    n_panels: usize,
    /// Columns per chunk.
    kc: usize,
    /// Each task's gate blocks, then its up blocks, then their results (instead of gate and up
    /// block by block): a decode step over bf16r32 weights, two long streams instead of
    /// alternating 64 KiB runs of each.
    phased: bool,
}

impl Product<'_> {
    /// The weight rows `mine`: every panel group meets them chunk by chunk, then `sink` writes
    /// the results.
    fn task<T: Tiles>(&self, sink: &Sink<'_>, mine: Range<usize>) {
        let (cols, kc) = (self.w.cols(), self.kc);
        let chunks = cols.div_ceil(kc);
        let mut t = T::default();
        t.configure(&config(sink.n));
        // One block's results at a time over one chunk; over several (or phased), every (panel
        // group, block) of the task keeps its partial sums until its results are written.
        let blocks = mine.len().div_ceil(TILE_ROWS);
        let keep_all = chunks > 1 || self.phased;
        let kept = if keep_all { groups(self.n_panels).count() * blocks } else { 1 };
        with_buffer(&BLOCKS, |bufs| {
            let (part, part_up, [runs, runs_up]) = split_blocks(bufs, kept, self.up.is_some());
            for (chunk, k0) in (0..cols).step_by(kc).enumerate() {
                let k = k0..(k0 + kc).min(cols);
                for (gi, (p0, group)) in groups(self.n_panels).enumerate() {
                    // Weight rows per block, and activation rows (C's row length).
                    let (mr_block, width) = match group {
                        Group::Triple => (TILE_ROWS, 3 * NR),
                        _ => (BLOCK, BLOCK),
                    };
                    // c [mr_block weight rows][width activation rows] → runs [k activation
                    // rows][mr weight rows].
                    let at = |r0| At { r0, p0, resume: chunk > 0 };
                    let mut block_of = |w: Mat<'_>, r0, c: &mut CBlock| match group {
                        Group::Pair => block::<T, 2>(&mut t, w, self.panels, self.lanes, at(r0), k.clone(), c),
                        Group::Single => block::<T, 1>(&mut t, w, self.panels, self.lanes, at(r0), k.clone(), c),
                        Group::Triple => block3(&mut t, w, self.panels, at(r0), k.clone(), c),
                    };
                    let slot = |b: usize| if keep_all { gi * blocks + b } else { 0 };
                    let write = |r0: usize, c: [&CBlock; 2], runs: [&mut CBlock; 2]| {
                        let mr = mr_block.min(mine.end - r0);
                        sink.write(Done { c, width, mr, r0, tok0: p0 * NR }, runs)
                    };
                    let last = chunk + 1 == chunks;
                    let starts = || mine.clone().step_by(mr_block).enumerate();
                    if self.phased {
                        let up = self.up.as_ref().expect("a phased product has up");
                        starts().for_each(|(b, r0)| block_of(self.w, r0, &mut part[slot(b)]));
                        starts().for_each(|(b, r0)| block_of(up.up, r0, &mut part_up[slot(b)]));
                        if last {
                            for (b, r0) in starts() {
                                let c = [&part[slot(b)], &part_up[slot(b)]];
                                write(r0, c, [&mut *runs, &mut *runs_up]);
                            }
                        }
                        continue;
                    }
                    for (b, r0) in starts() {
                        block_of(self.w, r0, &mut part[slot(b)]);
                        if let Some(g) = &self.up {
                            block_of(g.up, r0, &mut part_up[slot(b)]);
                        }
                        if last {
                            let i = slot(b);
                            write(r0, [&part[i], part_up.get(i).unwrap_or(&part[i])], [&mut *runs, &mut *runs_up]);
                        }
                    }
                }
            }
        });
        t.release();
    }
}

/// How a run of panels meets the weights: two at a time in 2 × 2 blocks of C tiles (32 weight
/// rows, each A tile used twice, each B tile twice); one alone in a 2 × 1 block; or three in a
/// 1 × 3 block (16 weight rows, each A tile used three times).
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Group {
    Pair,
    Single,
    Triple,
}

/// The panel groups of n_panels panels, (first panel, group): pairs, and an odd count's last
/// three panels as one triple (one more pass over the weights would read all of them again for
/// the last panel alone; the triple reads them once for three). One panel alone: a single. The
/// weight tiles' loads bound these blocks, not the products: one thread, 1408 × 2048, ms, a
/// pair and a single → a triple for the last three panels (`examples/bf16gemm`, fastest of 8,
/// two rounds):
/// n = 34 0.65–0.74 → 0.52–0.54, 40 0.73 → 0.48–0.52, 48 0.51–0.55 → 0.40–0.43, 72 0.60–0.64 →
/// 0.52–0.57, 80 0.59–0.60 → 0.54–0.58; triples for every panel (even counts too) were no faster
/// than pairs (n = 96 / 192 / 512: 0.80–0.85 / 1.36–1.39 / 4.0 against 0.86–0.87 / 1.31–1.35 /
/// 3.87–3.90).
pub(super) fn groups(n_panels: usize) -> impl Iterator<Item = (usize, Group)> {
    let triple = n_panels >= 3 && n_panels % 2 == 1;
    let pairs_end = if triple { n_panels - 3 } else { n_panels };
    let pairs =
        (0..pairs_end).step_by(2).map(move |p| (p, if p + 1 < pairs_end { Group::Pair } else { Group::Single }));
    pairs.chain(triple.then_some((n_panels - 3, Group::Triple)))
}

/// Where a block lies: weight rows r0 .. r0 + 32 (16 for a triple), panels p0 .. p0 + P;
/// `resume`: its C tiles continue from the partial sums in c (an earlier chunk's columns)
/// instead of zero.
#[derive(Clone, Copy)]
struct At {
    r0: usize,
    p0: usize,
    resume: bool,
}

/// Column steps between a weight line's prefetch and its tile load (`Ahead`). One thread,
/// `examples/bf16gemm 1408 2048 40 34 48` (a Qwen2-MoE expert's rows at its tokens per expert),
/// ms, three rounds: none 0.464–0.477 / 0.471–0.480, 1 step 0.438–0.461 / 0.445–0.467, 2 steps
/// 0.436–0.439 / 0.433–0.448, 3 steps 0.452–0.463 / 0.456–0.464, 4 0.478–0.482, 8 0.475–0.490.
const AHEAD: usize = 2;

/// The weight lines of a block's column steps `s`, brought into L1 ahead of their tile loads,
/// when the block is the first to read its weights (the first panel group's: they come from
/// memory). Row-major weights: for two or three panels only, each step's 16 or 32 row lines
/// `AHEAD` steps before their loads (the hardware prefetchers start late on each of those row
/// streams); the last steps reach into the next block's rows. A single panel's block (decode,
/// under 17 activation rows) gained nothing (1408 × 2048 at n = 8, 16: 0.41–0.44 ms either way)
/// and decode lost 3–10 % with it (olmoe-4l / qwen2moe-4l bf16 tg32, two threads). bf16r32
/// weights: a block reads one contiguous stream, each step's lines `TILED_AHEAD` bytes before
/// their loads, at every panel count; the last steps reach into what follows the block's units
/// (the next group of rows).
#[derive(Clone, Copy)]
struct Ahead<'a> {
    w: Weights<'a>,
    r0: usize,
    mr: usize,
    s: (usize, usize),
}

/// Bytes between a bf16r32 weight line's prefetch and its tile load (`Ahead`).
const TILED_AHEAD: usize = 512;

impl Ahead<'_> {
    /// For a block of mr weight rows from r0 against `panels` panels over the whole steps s0 ..
    /// s1, if it is the first panel group's (and, row-major, has two or three panels).
    fn of(w: Weights<'_>, at: At, mr: usize, panels: usize, (s0, s1): (usize, usize)) -> Option<Ahead<'_>> {
        (at.p0 == 0 && (panels >= 2 || w.tiled)).then_some(Ahead { w, r0: at.r0, mr, s: (s0, s1) })
    }

    /// The lines step s + AHEAD will load (row-major), or those TILED_AHEAD bytes past step s's.
    #[inline(always)]
    fn step(&self, s: usize) {
        let (s0, s1) = self.s;
        let w = &self.w;
        if w.tiled {
            let line = w.tile(self.r0, s).wrapping_add(TILED_AHEAD);
            (0..self.mr).for_each(|i| prefetch(line.wrapping_add(i * TILE_COLSB)));
            return;
        }
        let (r, c) = if s + AHEAD < s1 { (self.r0, s + AHEAD) } else { (self.r0 + self.mr, s + AHEAD + s0 - s1) };
        if r + self.mr <= w.rows && c < s1 {
            let line = w.tile(r, c);
            (0..self.mr).for_each(|i| prefetch(line.wrapping_add(i * w.stride())));
        }
    }
}

/// Hint the cache to load the line at `p` (never faults).
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and reads nothing architecturally.
    unsafe {
        use core::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        _mm_prefetch::<_MM_HINT_T0>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// One 2 × P block over the columns `k` (k.start a multiple of 32; k.end one, or cols): the C
/// tiles of weight rows r0 .. r0 + 32 against panels p0 .. p0 + P, into c as [32 weight
/// rows][32 activation rows] f32 (columns past P panels, or past a narrow panel's lanes, not
/// written). The column steps whose tiles all lie inside the matrix and the panels read them in
/// place (`steps`); the rest through `a_tile` / `b_tile`.
#[allow(clippy::too_many_arguments)]
fn block<T: Tiles, const P: usize>(
    t: &mut T,
    w: Mat<'_>,
    panels: &[u32],
    lanes: usize,
    at: At,
    k: Range<usize>,
    c: &mut CBlock,
) {
    let (rows, cols, wt) = (w.rows(), w.cols(), Weights::of(w));
    let (r0, p0) = (at.r0, at.p0);
    let pairs = cols / 2;
    let n_panels = panels.len() / (pairs * lanes).max(1);
    let (half, ldc) = (TILE_ROWS * BLOCK, BLOCK * 4);
    if at.resume {
        let c = &c.0;
        // SAFETY: each C tile is 16 rows of at most 64 bytes, `ldc` apart from its corner inside c.
        unsafe {
            t.load::<0>(c.as_ptr().cast(), ldc);
            t.load::<2>(c[half..].as_ptr().cast(), ldc);
            if P == 2 {
                t.load::<1>(c[NR..].as_ptr().cast(), ldc);
                t.load::<3>(c[half + NR..].as_ptr().cast(), ldc);
            }
        }
    } else {
        t.zero::<0>();
        t.zero::<2>();
        if P == 2 {
            t.zero::<1>();
            t.zero::<3>();
        }
    }
    // Whole steps s0 .. s1: every tile of them in place.
    let s0 = k.start / TK;
    let in_place = wt.tile_in_place(r0) && wt.tile_in_place(r0 + TILE_ROWS);
    let s1 = if r0 + BLOCK <= rows && p0 + P <= n_panels && in_place { k.end / TK } else { s0 };
    if s1 > s0 {
        let a = [wt.tile(r0, s0), wt.tile(r0 + TILE_ROWS, s0)];
        let q0 = s0 * TQ;
        let b = [&panels[(p0 * pairs + q0) * lanes..], &panels[((p0 + P - 1) * pairs + q0) * lanes..]];
        let ahead = Ahead::of(wt, at, BLOCK, P, (s0, s1));
        // SAFETY: step s < s1 − s0 reads, of each weight half, the tile of its 16 rows at column
        // step s0 + s (inside rows r0 .. r0 + 32, s0 + s < cols / 32), and of each of the P
        // panels 16 pairs from pair 16 (s0 + s) (inside it).
        unsafe {
            steps::<T, P>(t, (a, wt.stride(), wt.advance()), b.map(|b| b.as_ptr().cast()), lanes * 4, (s0, s1), ahead)
        };
    }
    if s1 * TK < k.end {
        edge_steps::<T, P>(t, w, panels, lanes, at, s1 * TK..k.end);
    }
    // C tile 2i + j holds weight rows 16i .. 16i + 16 × activation rows 16j .. 16j + 16 of c.
    let c = &mut c.0;
    // SAFETY: each C tile is 16 rows of at most 64 bytes, `ldc` apart from its corner inside c.
    unsafe {
        t.store::<0>(c.as_mut_ptr().cast(), ldc);
        t.store::<2>(c[half..].as_mut_ptr().cast(), ldc);
        if P == 2 {
            t.store::<1>(c[NR..].as_mut_ptr().cast(), ldc);
            t.store::<3>(c[half + NR..].as_mut_ptr().cast(), ldc);
        }
    }
}

/// The column steps `k` of a 2 × P block (as `block`) whose tiles are not all inside the
/// matrix and the panels: each tile through `a_tile` / `b_tile` (the zero-padded copies are made
/// only here: a block of whole steps touches no copy).
fn edge_steps<T: Tiles, const P: usize>(t: &mut T, w: Mat<'_>, panels: &[u32], lanes: usize, at: At, k: Range<usize>) {
    let (cols, wt) = (w.cols(), Weights::of(w));
    let (r0, p0, pairs) = (at.r0, at.p0, cols / 2);
    let mut bufs: [TileBuf; 4] = Default::default();
    for k0 in k.step_by(TK) {
        let [b0, b1, b2, b3] = &mut bufs;
        let a0 = a_tile(&wt, r0, k0, b0);
        let a1 = a_tile(&wt, r0 + TILE_ROWS, k0, b1);
        let p0b = b_tile(panels, pairs, lanes, p0, k0 / 2, b2);
        // SAFETY: each source is 16 rows of 64 readable bytes `stride` apart (a_tile / b_tile).
        unsafe {
            t.load::<4>(a0.0, a0.1);
            t.load::<5>(a1.0, a1.1);
            t.load::<6>(p0b.0, p0b.1);
            if P == 2 {
                let p1b = b_tile(panels, pairs, lanes, p0 + 1, k0 / 2, b3);
                t.load::<7>(p1b.0, p1b.1);
            }
        }
        product::<T, P>(t);
    }
}

/// Column steps s0 .. s1 of a block read in place: A tiles from the weight halves `a` (rows
/// `stride` bytes apart, step s0 + s at byte `advance` · s), B tiles from the P panels `b` (rows
/// `b_stride` bytes apart, step s0 + s at byte 16 · b_stride · s); the weight lines `ahead`.
///
/// # Safety
/// Every step's tiles must be readable: 16 rows of 64 bytes from a[h] + advance · s, `stride`
/// apart, and 16 rows of `b_stride` bytes from b[j] + 16 · b_stride · s, for s < s1 − s0.
#[inline(always)]
unsafe fn steps<T: Tiles, const P: usize>(
    t: &mut T,
    (a, stride, advance): ([*const u8; 2], usize, usize),
    b: [*const u8; 2],
    b_stride: usize,
    (s0, s1): (usize, usize),
    ahead: Option<Ahead<'_>>,
) {
    for s in 0..s1 - s0 {
        if let Some(ahead) = &ahead {
            ahead.step(s0 + s);
        }
        // SAFETY: the caller's bounds.
        unsafe {
            t.load::<4>(a[0].add(s * advance), stride);
            t.load::<5>(a[1].add(s * advance), stride);
            t.load::<6>(b[0].add(s * TILE_ROWS * b_stride), b_stride);
            if P == 2 {
                t.load::<7>(b[1].add(s * TILE_ROWS * b_stride), b_stride);
            }
        }
        product::<T, P>(t);
    }
}

/// One 1 × 3 block over the columns `k` (as `block`): the C tiles of weight rows r0 .. r0 + 16
/// against panels p0 .. p0 + 3 (whole panels: a triple has at least 33 activation rows, full
/// tiles), into c as [16 weight rows][48 activation rows] f32. Registers: C tmm0 … tmm2, A
/// tmm4, B tmm5 … tmm7.
fn block3<T: Tiles>(t: &mut T, w: Mat<'_>, panels: &[u32], at: At, k: Range<usize>, c: &mut CBlock) {
    let (rows, cols, wt) = (w.rows(), w.cols(), Weights::of(w));
    let (r0, p0, pairs, ldc) = (at.r0, at.p0, cols / 2, 3 * NR * 4);
    let n_panels = panels.len() / (pairs * NR).max(1);
    if at.resume {
        let c = &c.0;
        // SAFETY: each C tile is 16 rows of 64 bytes, `ldc` apart from its corner inside c.
        unsafe {
            t.load::<0>(c.as_ptr().cast(), ldc);
            t.load::<1>(c[NR..].as_ptr().cast(), ldc);
            t.load::<2>(c[2 * NR..].as_ptr().cast(), ldc);
        }
    } else {
        t.zero::<0>();
        t.zero::<1>();
        t.zero::<2>();
    }
    let s0 = k.start / TK;
    let s1 = if r0 + TILE_ROWS <= rows && p0 + 3 <= n_panels && wt.tile_in_place(r0) { k.end / TK } else { s0 };
    let b_at = |j: usize, q0: usize| panels[((p0 + j) * pairs + q0) * NR..].as_ptr().cast::<u8>();
    let ahead = Ahead::of(wt, at, TILE_ROWS, 3, (s0, s1));
    for s in s0..s1 {
        if let Some(ahead) = &ahead {
            ahead.step(s);
        }
        let q0 = s * TQ;
        // SAFETY: s < cols / 32: the tile of weight rows r0 .. r0 + 16 at column step s (inside
        // the matrix), and of each of the 3 panels 16 pairs from pair 16s (inside it).
        unsafe {
            t.load::<4>(wt.tile(r0, s), wt.stride());
            t.load::<5>(b_at(0, q0), NR * 4);
            t.dpbf16ps::<0, 4, 5>();
            t.load::<6>(b_at(1, q0), NR * 4);
            t.dpbf16ps::<1, 4, 6>();
            t.load::<7>(b_at(2, q0), NR * 4);
            t.dpbf16ps::<2, 4, 7>();
        }
    }
    if s1 * TK < k.end {
        edge_steps3(t, w, panels, at, s1 * TK..k.end);
    }
    let c = &mut c.0;
    // SAFETY: each C tile is 16 rows of 64 bytes, `ldc` apart from its corner inside c (16 ×
    // 48 values of its 1024).
    unsafe {
        t.store::<0>(c.as_mut_ptr().cast(), ldc);
        t.store::<1>(c[NR..].as_mut_ptr().cast(), ldc);
        t.store::<2>(c[2 * NR..].as_mut_ptr().cast(), ldc);
    }
}

/// The column steps `k` of a 1 × 3 block (as `block3`) whose tiles are not all inside the matrix
/// and the panels, through `a_tile` / `b_tile` (as `edge_steps`).
fn edge_steps3<T: Tiles>(t: &mut T, w: Mat<'_>, panels: &[u32], at: At, k: Range<usize>) {
    let (cols, wt) = (w.cols(), Weights::of(w));
    let (r0, p0, pairs) = (at.r0, at.p0, cols / 2);
    let mut bufs: [TileBuf; 4] = Default::default();
    for k0 in k.step_by(TK) {
        let [ab, b0, b1, b2] = &mut bufs;
        let a = a_tile(&wt, r0, k0, ab);
        let bs = [b_tile(panels, pairs, NR, p0, k0 / 2, b0), b_tile(panels, pairs, NR, p0 + 1, k0 / 2, b1)];
        let b2 = b_tile(panels, pairs, NR, p0 + 2, k0 / 2, b2);
        // SAFETY: each source is 16 rows of 64 readable bytes `stride` apart (a_tile / b_tile).
        unsafe {
            t.load::<4>(a.0, a.1);
            t.load::<5>(bs[0].0, bs[0].1);
            t.load::<6>(bs[1].0, bs[1].1);
            t.load::<7>(b2.0, b2.1);
        }
        t.dpbf16ps::<0, 4, 5>();
        t.dpbf16ps::<1, 4, 6>();
        t.dpbf16ps::<2, 4, 7>();
    }
}

/// The products of a step: C(2i + j) += A(4 + i) · B(6 + j) for j < P.
#[inline(always)]
fn product<T: Tiles, const P: usize>(t: &mut T) {
    if P == 2 {
        t.dpbf16ps::<0, 4, 6>();
        t.dpbf16ps::<1, 4, 7>();
        t.dpbf16ps::<2, 5, 6>();
        t.dpbf16ps::<3, 5, 7>();
    } else {
        t.dpbf16ps::<0, 4, 6>();
        t.dpbf16ps::<2, 5, 6>();
    }
}

//! Where the AMX GEMM's finished blocks go (`Bf16Out`): token-major f32 rows, turned by the
//! path's `transpose` and written as runs of weight rows; or, for an MLP's gated intermediate,
//! bf16 activation panels of the next product, which a block's C tiles already are pair by pair
//! (weight rows 2q, 2q + 1 × 16 activation rows: one 64-byte panel line) — rounded where they
//! lie, no transpose. With `up`, each block is first joined with up's by the gated activation.

use super::TILE_ROWS;
use crate::kernels::bf16act::round_slice;
use crate::kernels::par::OutPtr;
use crate::kernels::table::{Bf16Out, GatedUp, TransposeFn, NR};
use std::ops::Range;

/// Weight rows (and activation rows) per 2 × 2 step of the GEMM.
pub(super) const BLOCK: usize = 2 * TILE_ROWS;

/// A block's results: [32 weight rows][32 activation rows] f32, on cache lines.
#[repr(C, align(64))]
pub(super) struct CBlock(pub(super) [f32; BLOCK * BLOCK]);

impl Default for CBlock {
    fn default() -> CBlock {
        CBlock([0.0; BLOCK * BLOCK])
    }
}

/// Where finished blocks go (`dest`), each joined first with up's by the gated activation when
/// `up`.
pub(super) struct Sink<'a> {
    pub(super) transpose: TransposeFn,
    pub(super) dest: Dest,
    pub(super) n: usize,
    pub(super) up: Option<GatedUp<'a>>,
}

/// A product's destination (`Bf16Out`) as its tasks write it: each task its own weight rows.
pub(super) enum Dest {
    /// y [n, ld], its weight rows from row0.
    Rows { out: OutPtr, ld: usize, row0: usize },
    /// Panels [⌈n / 16⌉, pairs, lanes] whose pair q is weight rows 2q, 2q + 1.
    Panels { out: PanelPtr, pairs: usize, lanes: usize },
}

/// The panels a product writes (`Dest::Panels`).
pub(super) struct PanelPtr(*mut u32);
// SAFETY: tasks write the pairs of their own weight rows only (task rows start at multiples of
// 32: no pair is split between tasks).
unsafe impl Send for PanelPtr {}
// SAFETY: as for Send.
unsafe impl Sync for PanelPtr {}

impl Dest {
    /// `out` for a product of rows `rows` of a matrix of `w_rows` rows over n activation rows.
    pub(super) fn of(out: Bf16Out<'_>, w_rows: usize, rows: Range<usize>, n: usize) -> Dest {
        match out {
            Bf16Out::Rows(y) => {
                assert!(y.len() >= n * rows.len(), "amx gemm: y holds {} of {n} × {}", y.len(), rows.len());
                Dest::Rows { out: OutPtr(y.as_mut_ptr()), ld: rows.len(), row0: rows.start }
            }
            Bf16Out::Panels(p) => {
                let (pairs, lanes) = (w_rows / 2, NR.min(n));
                assert!(rows == (0..w_rows) && w_rows.is_multiple_of(2), "amx gemm: panels of rows {rows:?}");
                assert!(p.len() >= n.div_ceil(NR) * pairs * lanes, "amx gemm: {} panel values for {n} rows", p.len());
                Dest::Panels { out: PanelPtr(p.as_mut_ptr()), pairs, lanes }
            }
        }
    }
}

/// A finished block: its results [gate or only, up] ([mr_block weight rows][width activation
/// rows]), of which weight rows r0 .. r0 + mr and activation rows from tok0 are the product's.
pub(super) struct Done<'b> {
    pub(super) c: [&'b CBlock; 2],
    pub(super) width: usize,
    pub(super) mr: usize,
    pub(super) r0: usize,
    pub(super) tok0: usize,
}

impl Sink<'_> {
    /// A finished block to the destination, through the scratch blocks `runs`.
    pub(super) fn write(&self, b: Done<'_>, runs: [&mut CBlock; 2]) {
        match &self.dest {
            Dest::Rows { out, ld, row0 } => self.rows(&b, (out, *ld, b.r0 - row0), runs),
            Dest::Panels { out, pairs, lanes } => self.panels(&b, runs, (out, *pairs, *lanes)),
        }
    }

    /// Into y as runs of mr weight rows per activation row (at column `col` of rows `ld` apart).
    fn rows(&self, b: &Done<'_>, y: (&OutPtr, usize, usize), runs: [&mut CBlock; 2]) {
        let Done { c, width, mr, tok0, .. } = *b;
        let ((out, ld, col), k) = (y, width.min(self.n - tok0));
        let [runs, runs_up] = runs;
        (self.transpose)(&c[0].0, width, mr, k, &mut runs.0[..k * mr]);
        if let Some(g) = &self.up {
            (self.transpose)(&c[1].0, width, mr, k, &mut runs_up.0[..k * mr]);
            (g.gated)(&mut runs.0[..k * mr], &runs_up.0[..k * mr], g.act);
        }
        for (j, run) in runs.0[..k * mr].chunks_exact(mr).enumerate() {
            let at = (tok0 + j) * ld + col;
            // SAFETY: weight rows r0 .. r0 + mr (inside the product's rows) belong to the
            // calling task only; y holds n · ld values. A whole block's runs, and a 1 × 3
            // block's, are copied at a fixed length (inline, not a call per run).
            unsafe {
                if let Ok(whole) = <&[f32; BLOCK]>::try_from(run) {
                    out.write_array(at, whole)
                } else if let Ok(half) = <&[f32; TILE_ROWS]>::try_from(run) {
                    out.write_array(at, half)
                } else {
                    out.write_run(at, run)
                }
            }
        }
    }

    /// Into the panels: the block (joined) rounded to bf16 where it lies, then each pair of
    /// weight rows and 16 activation rows as one 64-byte panel line (lanes past n zero). The
    /// block is already pair-major: no transpose.
    fn panels(&self, b: &Done<'_>, runs: [&mut CBlock; 2], panels: (&PanelPtr, usize, usize)) {
        let Done { c, width, mr, r0, tok0 } = *b;
        let (out, pairs, lanes) = panels;
        let [joined, _] = runs;
        let mut bits = [0u16; BLOCK * BLOCK];
        // The block's live columns, from 16 on rounded up to whole panels (the columns past n
        // are joined and rounded too, then left out of the lines: whole vectors, no scalar
        // tails); all of them in one run when that is the whole block, a decode step's one
        // column row by row.
        let k = width.min(self.n - tok0);
        let live = if k >= NR { k.next_multiple_of(NR).min(width) } else { k };
        let (count, len) = if live == width { (1, mr * width) } else { (mr, live) };
        for r in (0..count).map(|i| i * width..i * width + len) {
            let run = &mut joined.0[r.clone()];
            run.copy_from_slice(&c[0].0[r.clone()]);
            if let Some(g) = &self.up {
                (g.gated)(run, &c[1].0[r.clone()], g.act);
            }
            round_slice(run, &mut bits[r]);
        }
        for (pp, tok) in (tok0..(tok0 + width).min(self.n)).step_by(NR).enumerate() {
            let live = (self.n - tok).min(lanes);
            for i in (0..mr).step_by(2) {
                let lo = &bits[i * width + pp * NR..][..NR];
                let hi: &[u16; NR] = match i + 1 < mr {
                    true => bits[(i + 1) * width + pp * NR..][..NR].try_into().expect("16 lanes"),
                    false => &[0; NR],
                };
                let mut line = [0u32; NR];
                for ((v, &l), &h) in line.iter_mut().zip(lo).zip(hi) {
                    *v = u32::from(l) | u32::from(h) << 16;
                }
                line[live..].fill(0);
                let at = ((tok / NR) * pairs + (r0 + i) / 2) * lanes;
                // SAFETY: pair (r0 + i) / 2 belongs to the calling task's rows; the panels hold
                // ⌈n / 16⌉ · pairs · lanes values (asserted by `gemm_in_chunks`).
                unsafe { std::ptr::copy_nonoverlapping(line.as_ptr(), out.0.add(at), lanes) };
            }
        }
    }
}

//! y = x · wᵀ for bf16 weights in `Reduced` mode: the activations are rounded to bf16 once per
//! call (`bf16act`), then
//!
//! * on a path with bf16 kernels: few rows take its matrix-vector kernel (the same row split
//!   as `gemm::gemv_by`); many rows a blocked GEMM whose micro-tile reads the stored weights
//!   directly (one bf16 pair broadcast meets a panel of NR activation rows): no widened copy
//!   of the weights, and each dot instruction does two multiply-adds per lane. A path may
//!   replace both by one product at every row count (`Bf16Kernels::gemm`: AMX tiles, `amx`,
//!   whose tiles cost little more at one row than at sixteen): then a row's result is the same
//!   bits in every batch, and small expert groups run on the tiles too;
//! * otherwise (the reference, and paths without such an instruction): `gemm`'s float
//!   strategies on the rounded values (`with_rounded`) — the same products, exact in f32, in
//!   another summation order.
//!
//! As in `gemm`, every output element is one sum over k in a fixed order, never split across
//! tasks: the result does not depend on the thread count.

use super::bf16act::{round_bf16, Bf16Acts};
use super::mat::Mat;
use super::par::{for_tasks, gemv_by, with_buffer, write_back, OutPtr, MC};
use super::table::{Bf16GemmFn, Bf16Kernels, Bf16Out, Gate, GatedUp, Table, TransposeFn, BF16_MR, NR};
use super::XRows;
use crate::format::DType;
use std::cell::RefCell;
use std::ops::Range;

/// From this many activation rows on, the bf16 kernels' GEMM is used. Measured on a 16384 ×
/// 2048 matrix, one thread, Zen 4, under load 5 (`COLIBRI_CPU=avx512 cargo bench --bench kernels
/// -- matmul_16384x2048_bf16`, fastest of 10, two rounds): GEMV 3.3–3.4 / 4.5–4.7 / 5.1–5.4 ms
/// and GEMM (long blocks, `KC_BF16`) 4.0 / 4.0 / 4.0 ms at n = 4 / 8 / 12 — the GEMM would pay
/// from 8 rows, but the switch stays at 16: the two sum in different orders, so a batch whose
/// rows cross the switch where its sequences' separate calls do not gives them other bits, and
/// at 8 serve's `n` choices over a short prompt (3 × 5 rows) stopped repeating their separate
/// runs (cli/tests/serve_choices.rs). A path with a whole product (AMX) has no switch.
pub const GEMM_MIN_ROWS_BF16: usize = 16;

/// The GEMM runs over blocks of this many columns, whatever the number of panels: each tile
/// streams its BF16_MR rows in order over a long block (the hardware prefetchers follow them, and
/// the tile asks for the next tile's rows as it goes: `x86::bf16`), and a task's block (MC rows
/// × KC_BF16 columns of bf16, 384 KiB) stays in L2 for the next panels. Same products in the same
/// order as with shorter blocks (each output is one chain over k, carried through `c`). Measured
/// as above (n activation rows, fastest of 10, 256-column blocks → 2048): n = 16 6.0–6.3 →
/// 4.8–5.1 ms, n = 24 8.1–8.6 → 7.2–7.3 ms, n = 32 8.8–12.6 → 7.3–7.5 ms, n = 48 15.0–15.4 →
/// 14.4–14.8 ms. Up to three panels only, until the tile's lagged prefetch: then on Zen 5 (EPYC
/// VM), one thread, process CPU time of one product, fastest of 10, two rounds, load 5–7,
/// 256-column blocks from four panels on → 2048 always (rows × columns, n = 64 / 128 / 512):
/// 1408 × 2048 0.97–0.98 / 2.06–2.07 / 8.07–8.15 ms → 0.89 / 1.95–1.96 / 7.72–7.85 ms, 2048 ×
/// 1408 0.96–0.97 / 2.02–2.05 / 7.85–8.00 → 0.84–0.86 / 1.88 / 7.46–7.49, 2048 × 5632 4.10 /
/// 7.93–7.94 / 30.2–30.3 → 3.66 / 7.27–7.38 / 29.2–29.5 (`examples/bf16gemm`).
const KC_BF16: usize = 2048;

thread_local! {
    /// The calling thread's bf16 activations.
    static ACTS: RefCell<Bf16Acts> = RefCell::new(Bf16Acts::default());
    /// The calling thread's rounded activations as f32 (paths without bf16 kernels).
    static ROUNDED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The calling thread's MLP intermediates as the down projection's panels (`mlp_product`).
    static MIDDLE: RefCell<Vec<u32>> = const { RefCell::new(Vec::new()) };
    /// Per-task output block of the GEMM.
    static OUT: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// The bf16 kernels of this path for `w`, when it has them and they apply (they pair columns:
/// an odd row length takes the float kernels; bf16r32's tile order is read by a whole product —
/// AMX — only, elsewhere by the float kernels).
pub(super) fn kernels_for(t: &Table, w: Mat<'_>) -> Option<Bf16Kernels> {
    t.bf16.filter(|k| w.cols().is_multiple_of(2) && (w.dtype() == DType::BF16 || k.gemm.is_some()))
}

/// Run `f` on x ([n, cols]) rounded to bf16 and widened back to f32 (exact): what paths without
/// bf16 kernels multiply.
pub(super) fn with_rounded<R>(x: &[f32], n: usize, cols: usize, f: impl FnOnce(&[f32]) -> R) -> R {
    with_buffer(&ROUNDED, |xr| {
        xr.clear();
        xr.extend(x[..n * cols].iter().map(|&v| f32::from_bits(u32::from(round_bf16(v)) << 16)));
        f(xr)
    })
}

/// y [n, rows] = x [n, cols] · wᵀ for a bf16 `w` by the bf16 kernels `k`, activations rounded
/// to bf16.
pub(super) fn product(t: &Table, k: Bf16Kernels, w: Mat<'_>, x: &[f32], n: usize, y: &mut [f32]) {
    products(t, k, x, n, &mut [(w, y)]);
}

/// `product` for each (w, y) of `products` (bf16 matrices of one width, all meeting the kernels
/// `k`): x is rounded, and packed for the strategy n rows take, once for all of them — an MLP's
/// gate and up, attention's q, k and v. Each result is the bits `product` gives it alone.
pub(super) fn products(t: &Table, k: Bf16Kernels, x: &[f32], n: usize, products: &mut [(Mat<'_>, &mut [f32])]) {
    let Some(cols) = products.first().map(|(w, _)| w.cols()) else { return };
    with_buffer(&ACTS, |xa| {
        xa.round(x, n, cols);
        // The strategy n rows take, and the packing it needs, once for every product.
        let blocked = k.gemm.is_none() && n >= GEMM_MIN_ROWS_BF16;
        match k.gemm {
            Some(_) => xa.pack_tiles(t.transpose),
            None if blocked => xa.pack_panels(t.transpose),
            None => {}
        }
        for (w, y) in products.iter_mut() {
            let rows = w.rows();
            assert_eq!(w.cols(), cols, "bf16 products of different widths");
            match k.gemm {
                Some(whole) => whole(t.transpose, *w, 0..rows, xa.panels(), n, Bf16Out::Rows(y), true, None),
                None if blocked => gemm(&k, t.transpose, *w, xa, n, y),
                None => {
                    let xb = &xa.bits;
                    gemv_by(rows, cols, n, y, |r, out| (k.gemv)(*w, r, xb, n, out));
                }
            }
        }
    })
}

/// act(x · gateᵀ, x · upᵀ) into `out` (g [n, gate.rows()] in f32, or the rounded panels of a
/// product over it) by the path's whole product (`whole`, AMX) in one pass over both matrices
/// (bf16, one shape), x's rows rounded (where they are) and packed once: the bits of `products`
/// on (gate, up) followed by the path's gated activation.
#[allow(clippy::too_many_arguments)]
pub(super) fn gated_product(
    t: &Table,
    whole: Bf16GemmFn,
    x: XRows<'_>,
    n: usize,
    gate: Mat<'_>,
    up: Mat<'_>,
    act: Gate,
    out: Bf16Out<'_>,
) {
    with_buffer(&ACTS, |xa| {
        xa.round_rows(x, n, gate.cols());
        xa.pack_tiles(t.transpose);
        let up = GatedUp { up, gated: t.gated, act };
        whole(t.transpose, gate, 0..gate.rows(), xa.panels(), n, out, true, Some(up));
    })
}

/// y [n, down.rows()] = act(x · gateᵀ, x · upᵀ) · downᵀ by the path's whole product (`whole`,
/// AMX): `gated_product` into the down product's activation panels (`Bf16Out::Panels`), then
/// that product. The bits of `gated_product` into f32 followed by `product` on its result: the
/// intermediate is rounded to bf16 either way.
#[allow(clippy::too_many_arguments)]
pub(super) fn mlp_product(
    t: &Table,
    whole: Bf16GemmFn,
    x: XRows<'_>,
    n: usize,
    [gate, up, down]: [Mat<'_>; 3],
    act: Gate,
    y: &mut [f32],
) {
    with_buffer(&MIDDLE, |mid| {
        mid.resize(n.div_ceil(NR) * gate.rows() / 2 * NR.min(n), 0);
        gated_product(t, whole, x, n, gate, up, act, Bf16Out::Panels(mid));
        whole(t.transpose, down, 0..down.rows(), mid, n, Bf16Out::Rows(y), true, None);
    })
}

/// y [n, rows.len()] = x · w[rows]ᵀ, activations rounded to bf16, on the calling thread by the
/// matrix-vector kernels, or the path's whole product where it has one (see
/// `Kernels::matvec_rows`).
pub(super) fn rows(t: &Table, w: Mat<'_>, rows: Range<usize>, x: &[f32], n: usize, y: &mut [f32]) {
    let cols = w.cols();
    match kernels_for(t, w) {
        Some(k) => with_buffer(&ACTS, |xa| {
            xa.round(x, n, cols);
            match k.gemm {
                Some(whole) => {
                    xa.pack_tiles(t.transpose);
                    whole(t.transpose, w, rows, xa.panels(), n, Bf16Out::Rows(y), false, None)
                }
                None => (k.gemv)(w, rows, &xa.bits, n, y),
            }
        }),
        None => with_rounded(x, n, cols, |xr| (t.mat(w.dtype()).gemv)(w, rows, xr, n, y)),
    }
}

/// The blocked GEMM over packed panels: tasks of MC weight rows; per KC_BF16 columns, every
/// panel meets every BF16_MR-row tile of the task while those weights sit in L2.
fn gemm(k: &Bf16Kernels, transpose: TransposeFn, w: Mat<'_>, xa: &Bf16Acts, n: usize, y: &mut [f32]) {
    let (rows, cols) = (w.rows(), w.cols());
    let (panels, pairs) = (n.div_ceil(NR), cols / 2);
    // A last panel of at most NR / 2 activation rows is computed on its lower half only.
    let half = n - (panels - 1) * NR <= NR / 2;
    // An odd number of cache lines per row of `c`: its rows then fall in different L1 sets
    // (`write_back` reads a column of them; 2 KiB apart they shared two sets).
    let ldc = (panels * NR) | NR;
    let out = OutPtr(y.as_mut_ptr());
    for_tasks(rows.div_ceil(MC), rows * cols * n, |task| {
        let r0 = task * MC;
        let mr = (r0 + MC).min(rows) - r0;
        let tiles = mr.div_ceil(BF16_MR);
        with_buffer(&OUT, |c| {
            c.clear();
            c.resize(tiles * BF16_MR * ldc, 0.0);
            for k0 in (0..cols).step_by(KC_BF16) {
                let kc = KC_BF16.min(cols - k0);
                let panel = |p: usize| &xa.panels()[(p * pairs + k0 / 2) * NR..(p * pairs + (k0 + kc) / 2) * NR];
                for (p, count) in passes(panels, half) {
                    let list = [panel(p), panel((p + 1).min(panels - 1)), panel((p + 2).min(panels - 1))];
                    let last_half = half && p + count == panels;
                    for tile in 0..tiles {
                        let (ri, ct) = (r0 + tile * BF16_MR, &mut c[tile * BF16_MR * ldc + p * NR..]);
                        (k.tile)(w, ri, k0..k0 + kc, &list[..count], last_half, ct, ldc);
                    }
                }
            }
            write_back(transpose, c, ldc, n, out, rows, r0..r0 + mr);
        });
    });
}

/// The tile passes over `panels` panels: (first panel, count). Panels two at a time; a half last
/// panel joins the pass before it (three panels: 16 + 16 + 8 lanes, 27 of the 32 vector
/// registers) — alone it would run 8 chains of 8 lanes, which wait on the instruction's latency;
/// an odd whole last panel goes alone. Zen 4 (EPYC VM, family 19h model 11h), one thread,
/// 1408 × 2048 (`RAYON_NUM_THREADS=1 examples/bf16gemm 1408 2048 10 N…`, fastest of 10, two
/// rounds alternating, load 4.4–5), ms, 16-lane last panel → 8-lane: n = 20 0.85–0.90 → 0.76–0.77,
/// 24 0.86–0.91 → 0.76–0.77, 36 1.29–1.34 → 1.13–1.14, 40 1.32–1.33 → 1.15–1.17, 56 1.75 →
/// 1.60–1.61; whole panels within 2–4 % (n = 16 0.50–0.51 → 0.53, 64 1.73–1.77 → 1.79).
fn passes(panels: usize, half: bool) -> impl Iterator<Item = (usize, usize)> {
    let joined = half && panels % 2 == 1 && panels > 1;
    let pairs_end = if joined { panels - 3 } else { panels };
    (0..pairs_end).step_by(2).map(move |p| (p, 2.min(panels - p))).chain(joined.then_some((panels - 3, 3)))
}

/// Touch this thread's buffers so that their destructors are registered now (see
/// `kernels::prepare_thread`).
pub(super) fn prepare_thread() {
    MIDDLE.with(|_| ());
    ACTS.with(|_| ());
    ROUNDED.with(|_| ());
    OUT.with(|_| ());
}

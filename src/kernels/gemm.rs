//! y = x · wᵀ for a stored weight matrix: the one entry point every projection, expert and the
//! lm_head go through (`matmul`; `matmuls` for several matrices over the same rows, which it
//! rounds to int8 once), and its two strategies.
//!
//! * Few activation rows (decode, small expert groups): matrix-vector products straight from the
//!   stored weights, rows split across the thread pool in contiguous chunks; every weight is read
//!   once per call and applied to all n rows while it is in registers.
//! * Many rows (prefill, batched experts): a blocked GEMM. The activations are packed once into
//!   panels of NR rows ([K, NR], zero-padded); each task widens MC weight rows × KC columns to f32
//!   (dequantising if needed) into a buffer that stays in L2, and an MR×NR register tile sweeps
//!   every activation panel over it. Each weight element is converted once per call.
//!
//! Every output element is one sum over k in ascending order (an 8-lane or per-k chain, fixed by
//! the strategy), never split across tasks: the result does not depend on the thread count.

use super::actq::{QuantActivations, QuantizedActs};
use super::dispatch::Kernels;
use super::gemm_bf16;
use super::mat::Mat;
use super::par::{for_tasks, gemv_by, with_buffer, write_back, OutPtr, KC, MC};
use super::table::{Bf16GemmFn, Bf16Out, Gate, GemvI8Fn, MatKernels, Operand, Table, MR, NR};
use super::XRows;
use crate::format::DType;
use std::cell::RefCell;

/// From this many activation rows on, the GEMM strategy is used. The GEMM costs about the same
/// for any n within a panel of NR rows (its FMA tile always computes NR columns, and widening
/// is paid once per call); the GEMV costs ~n passes over L1-resident row groups. Measured on a
/// 16384 × 2048 matrix, 2 threads (`cargo bench --bench kernels -- matmul_16384`): GEMV is
/// faster up to n ≈ 16–28 for bf16, q8 and q4 and the two meet near 32.
pub const GEMM_MIN_ROWS: usize = 32;
thread_local! {
    /// Per-thread scratch: (weight block, output block), reused across calls.
    static SCRATCH: RefCell<(Vec<f32>, Vec<f32>)> = const { RefCell::new((Vec::new(), Vec::new())) };
    /// The calling thread's packed activation panels (GEMM).
    static PANELS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
    /// The calling thread's int8 activations for W8A8 / W4A8 products.
    static ACTS: RefCell<QuantizedActs> = RefCell::new(QuantizedActs::default());
    /// Picked activation rows gathered, for products that need them in one slice.
    static PICKED: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

impl Kernels {
    /// y[t, o] = Σ_i w[o, i] · x[t, i] for t < n, o < w.rows(): x [n, cols], y [n, rows]. In
    /// `Reduced` mode block-quantised weights meet int8-rounded activations (dx·qx; the GEMM
    /// strategy multiplies the widened weights by them, so a row's result does not change
    /// meaning with the number of rows in the call) and bf16 weights bf16-rounded ones
    /// (`gemm_bf16`).
    pub fn matmul(&self, w: Mat<'_>, x: &[f32], n: usize, y: &mut [f32]) {
        self.matmuls(x, n, &mut [(w, y)]);
    }

    /// y = x · wᵀ for each (w, y) of `products`, all over the same x ([n, cols], the matrices'
    /// common width): each product's bits are `matmul`'s, but x is rounded to int8 blocks (and
    /// widened back for the GEMM strategy) once for all the products that meet it so — an MLP's
    /// gate and up, attention's q, k and v.
    pub fn matmuls(&self, x: &[f32], n: usize, products: &mut [(Mat<'_>, &mut [f32])]) {
        let Some(cols) = products.first().map(|(w, _)| w.cols()) else { return };
        for (w, y) in products.iter() {
            assert!(w.cols() == cols, "matmuls: widths {} and {cols}", w.cols());
            check_shapes(*w, x, n, y);
        }
        if n == 0 {
            return;
        }
        if products.iter().all(|(w, _)| self.int8_kernel(*w).is_none()) {
            // bf16 weights meeting bf16 activations all: rounded (and packed) once.
            let t = self.table();
            let reduced = self.act() == QuantActivations::Reduced;
            let bf16 = |w: &Mat<'_>| is_bf16(*w) && w.rows() > 0 && gemm_bf16::kernels_for(t, *w).is_some();
            if let (true, Some(k)) =
                (reduced && products.iter().all(|(w, _)| bf16(w)), gemm_bf16::kernels_for(t, products[0].0))
            {
                return gemm_bf16::products(t, k, x, n, products);
            }
            return products.iter_mut().for_each(|(w, y)| self.unquantised(*w, x, n, y));
        }
        let t = self.table();
        with_buffer(&ACTS, |acts| {
            let mut xq = Int8Rows { x, n, cols, acts, quantised: false, widened: Vec::new() };
            for (w, y) in products.iter_mut() {
                let (w, ops) = (*w, t.mat(w.dtype()));
                match self.int8_kernel(w) {
                    _ if w.rows() == 0 => {}
                    None => self.unquantised(w, x, n, y),
                    // A dtype whose int8 kernel beats widening for the FMA GEMM takes it at every
                    // n (measured: see docs/performance.md, "Kernel paths").
                    Some(kernel) if n < GEMM_MIN_ROWS || ops.int8_at_any_n || cols == 0 => {
                        let xa = xq.acts(t);
                        gemv_by(w.rows(), cols, n, y, |r, out| kernel(w, r, xa, n, out));
                    }
                    Some(_) => gemm(t, ops, w, xq.widened(t), n, y),
                }
            }
        });
    }

    /// g [n, ffn] = act(x · gateᵀ, x · upᵀ) (an MLP's first half: gate and up [ffn, cols], x
    /// [n, cols], in place or picked by row); u [n, ffn] is scratch. The bits of `matmuls` on
    /// (gate, up) over x's rows then `gated`: on a path with a whole bf16 product (AMX) in
    /// `Reduced` mode one pass over both matrices that joins each block as it is written (no u
    /// written, no second pass over g; picked rows rounded where they are); otherwise x's rows
    /// gathered if picked, then exactly that sequence.
    #[allow(clippy::too_many_arguments)]
    pub fn gated_matmuls(
        &self,
        x: XRows<'_>,
        n: usize,
        gate: Mat<'_>,
        up: Mat<'_>,
        act: Gate,
        g: &mut [f32],
        u: &mut [f32],
    ) {
        let cols = gate.cols();
        if let XRows::Dense(x) = x {
            check_shapes(gate, x, n, g);
        }
        let t = self.table();
        match self.joined_gate_up(gate, up, n) {
            Some(whole) => {
                assert!(g.len() >= n * gate.rows(), "gated_matmuls: g holds {} of {n} × {}", g.len(), gate.rows());
                gemm_bf16::gated_product(t, whole, x, n, gate, up, act, Bf16Out::Rows(g))
            }
            None => with_buffer(&PICKED, |buf| {
                let (x, len) = (x.dense(n, cols, buf), n * gate.rows());
                self.matmuls(x, n, &mut [(gate, &mut g[..len]), (up, &mut u[..len])]);
                self.gated(&mut g[..len], &u[..len], act);
            }),
        }
    }

    /// y ([n, down.rows()]) = act(x · gateᵀ, x · upᵀ) · downᵀ (an MLP without biases) where the
    /// path joins gate and up on its whole bf16 product: the intermediate goes to the down
    /// product as its rounded activation panels, never written in f32 (`gemm_bf16::mlp_product`;
    /// the bits of `gated_matmuls` then `matmul`). False, with y untouched, where it does not:
    /// the caller takes those two.
    pub fn fused_mlp(&self, x: XRows<'_>, n: usize, [gate, up, down]: [Mat<'_>; 3], act: Gate, y: &mut [f32]) -> bool {
        let Some(whole) = self.joined_gate_up(gate, up, n) else { return false };
        let ffn = gate.rows();
        if !(is_bf16(down) && down.cols() == ffn && ffn.is_multiple_of(2) && down.rows() > 0) {
            return false;
        }
        if let XRows::Dense(x) = x {
            assert!(x.len() >= n * gate.cols(), "fused_mlp: x shorter than {n} × {}", gate.cols());
        }
        assert!(y.len() >= n * down.rows(), "fused_mlp: y holds {} of {n} × {}", y.len(), down.rows());
        gemm_bf16::mlp_product(self.table(), whole, x, n, [gate, up, down], act, y);
        true
    }

    /// The path's whole bf16 product when gate and up (bf16, one even-width shape) can be joined
    /// on it for n rows in this mode.
    fn joined_gate_up(&self, gate: Mat<'_>, up: Mat<'_>, n: usize) -> Option<Bf16GemmFn> {
        let bf16 = |w: Mat<'_>| is_bf16(w) && w.rows() > 0 && w.cols().is_multiple_of(2);
        self.table().bf16.and_then(|k| k.gemm).filter(|_| {
            self.act() == QuantActivations::Reduced
                && bf16(gate)
                && up.dtype() == gate.dtype()
                && (gate.rows(), gate.cols()) == (up.rows(), up.cols())
                && n > 0
        })
    }

    /// The int8-activation kernel of `w` in this mode, if it meets int8 activations.
    fn int8_kernel(&self, w: Mat<'_>) -> Option<GemvI8Fn> {
        let reduced = self.act() == QuantActivations::Reduced;
        self.table().mat(w.dtype()).gemv_i8.filter(|_| reduced && w.dtype() != DType::BF16)
    }

    /// y = x · wᵀ for a `w` that does not meet int8 activations: bf16 × bf16 in `Reduced` mode,
    /// else x as f32.
    fn unquantised(&self, w: Mat<'_>, x: &[f32], n: usize, y: &mut [f32]) {
        let (t, cols) = (self.table(), w.cols());
        if w.rows() == 0 {
            return;
        }
        if is_bf16(w) && self.act() == QuantActivations::Reduced {
            return match gemm_bf16::kernels_for(t, w) {
                Some(k) => gemm_bf16::product(t, k, w, x, n, y),
                None => gemm_bf16::with_rounded(x, n, cols, |xr| float_product(t, w, xr, n, y)),
            };
        }
        float_product(t, w, x, n, y)
    }

    /// y[t·rows.len() + i] = w[rows.start + i] · x[t] for a range of rows and n activation rows
    /// (x [n, w.cols()]), on the calling thread, by the matrix-vector strategy of this mode: for
    /// callers that split the work themselves (n small).
    pub fn matvec_rows(&self, w: Mat<'_>, rows: std::ops::Range<usize>, x: &[f32], n: usize, y: &mut [f32]) {
        let (t, cols) = (self.table(), w.cols());
        assert!(rows.end <= w.rows(), "matvec_rows: rows {rows:?} of {}", w.rows());
        assert!(x.len() >= n * cols && y.len() >= n * rows.len(), "matvec_rows: x or y too short");
        if rows.is_empty() || n == 0 {
            return;
        }
        let reduced = self.act() == QuantActivations::Reduced;
        let ops = t.mat(w.dtype());
        match ops.gemv_i8 {
            _ if reduced && is_bf16(w) => gemm_bf16::rows(t, w, rows, x, n, y),
            Some(kernel) if reduced => with_buffer(&ACTS, |xa| {
                xa.quantize_with(t.quantize, x, n, cols);
                kernel(w, rows, xa, n, y)
            }),
            _ => (ops.gemv)(w, rows, x, n, y),
        }
    }

    /// Row `r` of `w` · x (x of w.cols() values).
    pub fn dot_row(&self, w: Mat<'_>, r: usize, x: &[f32]) -> f32 {
        assert!(r < w.rows() && x.len() >= w.cols(), "dot_row: row {r} of {} × {}", w.rows(), w.cols());
        let mut y = [0f32];
        (self.table().mat(w.dtype()).gemv)(w, r..r + 1, x, 1, &mut y);
        y[0]
    }
}

/// y = x · wᵀ with x meeting the stored weights as f32: the GEMV strategy below GEMM_MIN_ROWS
/// activation rows, the blocked GEMM from there.
pub(super) fn float_product(t: &Table, w: Mat<'_>, x: &[f32], n: usize, y: &mut [f32]) {
    let (ops, rows, cols) = (t.mat(w.dtype()), w.rows(), w.cols());
    if n >= GEMM_MIN_ROWS && cols > 0 {
        gemm(t, ops, w, x, n, y)
    } else {
        gemv_by(rows, cols, n, y, |r, out| (ops.gemv)(w, r, x, n, out))
    }
}

/// The matrix-vector strategy of `float_product` (n < GEMM_MIN_ROWS rows of x) on the calling
/// thread: the same results (a row's sums do not depend on the chunk it comes in, `gemv_by`).
pub(super) fn float_gemv_here(t: &Table, w: Mat<'_>, x: &[f32], n: usize, y: &mut [f32]) {
    debug_assert!(n < GEMM_MIN_ROWS);
    (t.mat(w.dtype()).gemv)(w, 0..w.rows(), x, n, &mut y[..n * w.rows()])
}

/// bf16 values, row-major or in bf16r32's tile order: what meets bf16-rounded activations in
/// `Reduced` mode.
fn is_bf16(w: Mat<'_>) -> bool {
    w.dtype().encoding() == DType::BF16
}

/// Panic unless x holds n rows of w.cols() and y n·w.rows() outputs (the matrix itself was
/// checked when it was bound). The kernels rely on these bounds.
fn check_shapes(w: Mat<'_>, x: &[f32], n: usize, y: &[f32]) {
    let (rows, cols) = (w.rows(), w.cols());
    assert!(n.checked_mul(cols).is_some_and(|v| x.len() >= v), "matmul: x shorter than {n} × {cols}");
    assert!(n.checked_mul(rows).is_some_and(|v| y.len() >= v), "matmul: y shorter than {n} × {rows}");
}

/// A call's activations x ([n, cols]) in int8 blocks, made on the first product that meets them
/// and kept for the call's other products (`Kernels::matmuls`).
struct Int8Rows<'a> {
    x: &'a [f32],
    n: usize,
    cols: usize,
    acts: &'a mut QuantizedActs,
    quantised: bool,
    /// The int8 rows as the GEMM strategy meets them, dx·qx ([n, cols]): made on first use.
    widened: Vec<f32>,
}

impl Int8Rows<'_> {
    /// The int8 blocks, by the path's quantiser.
    fn acts(&mut self, t: &Table) -> &QuantizedActs {
        if !self.quantised {
            self.acts.quantize_with(t.quantize, self.x, self.n, self.cols);
            self.quantised = true;
        }
        self.acts
    }

    /// The int8 rows widened back to f32 (dx·qx).
    fn widened(&mut self, t: &Table) -> &[f32] {
        if self.widened.is_empty() {
            let len = self.n * self.cols;
            self.acts(t);
            self.widened.resize(len, 0.0);
            self.acts.dequantize(&mut self.widened);
        }
        &self.widened
    }
}

/// Pack x ([n, cols]) into panels of NR rows: xp[p][k][j] = x[p·NR + j, k] (zero past n).
fn pack_activations(x: &[f32], n: usize, cols: usize, xp: &mut Vec<f32>) {
    let panels = n.div_ceil(NR);
    xp.clear();
    xp.resize(panels * cols * NR, 0.0);
    for (p, panel) in xp.chunks_exact_mut(cols * NR).enumerate() {
        for j in 0..NR.min(n - p * NR) {
            let row = &x[(p * NR + j) * cols..(p * NR + j + 1) * cols];
            for (k, &v) in row.iter().enumerate() {
                panel[k * NR + j] = v;
            }
        }
    }
}

fn gemm(t: &Table, ops: &MatKernels, w: Mat<'_>, x: &[f32], n: usize, y: &mut [f32]) {
    with_buffer(&PANELS, |xp| {
        pack_activations(x, n, w.cols(), xp);
        gemm_packed(t, ops, w, xp, n, y);
    });
}

/// The GEMM over activations already packed by `pack_activations`.
fn gemm_packed(t: &Table, ops: &MatKernels, w: Mat<'_>, xp: &[f32], n: usize, y: &mut [f32]) {
    let (rows, cols) = (w.rows(), w.cols());
    let panels = n.div_ceil(NR);
    let ldc = panels * NR;
    let out = OutPtr(y.as_mut_ptr());
    let tasks = rows.div_ceil(MC);
    for_tasks(tasks, rows * cols * n, |task| {
        let r0 = task * MC;
        let mr = (r0 + MC).min(rows) - r0;
        let blocks = mr.div_ceil(MR);
        with_buffer(&SCRATCH, |(wb, c)| {
            wb.resize(blocks * MR * KC, 0.0);
            c.clear();
            c.resize(blocks * MR * ldc, 0.0);
            for k0 in (0..cols).step_by(KC) {
                let kc = KC.min(cols - k0);
                // Widen this task's rows [r0, r0 + mr) × [k0, k0 + kc) to f32, row-major by kc;
                // padding rows are zero.
                wb[mr * kc..blocks * MR * kc].fill(0.0);
                // Each row is a short run (kc elements) a whole row apart from the next, which
                // the hardware prefetcher follows poorly: ask for the next block's run now.
                let next = (k0 + KC).min(cols)..(k0 + 2 * KC).min(cols);
                (ops.widen)(w, r0..r0 + mr, k0, &mut wb[..mr * kc]);
                for i in 0..mr {
                    w.prefetch(r0 + i, next.start, next.end);
                }
                let panel = |p: usize| Operand::new(&xp[p * cols * NR + k0 * NR..p * cols * NR + (k0 + kc) * NR], NR);
                // A last panel with at most NR / 2 real rows takes the half-width tile; whole
                // panels go two at a time (`Table::tile2`).
                let whole = |p: usize| n - p * NR > NR / 2;
                let mut p = 0;
                while p < panels {
                    let pair = p + 1 < panels && whole(p + 1);
                    for blk in 0..blocks {
                        let (a, c) = (&wb[blk * MR * kc..(blk + 1) * MR * kc], &mut c[blk * MR * ldc + p * NR..]);
                        match pair {
                            true => t.tile2(Operand::new(a, kc), [panel(p), panel(p + 1)], kc, c, ldc),
                            false => {
                                (t.tile)(Operand::new(a, kc), panel(p), kc, c, ldc, if whole(p) { NR } else { NR / 2 })
                            }
                        }
                    }
                    p += if pair { 2 } else { 1 };
                }
            }
            write_back(t.transpose, c, ldc, n, out, rows, r0..r0 + mr);
        });
    });
}

/// Touch this thread's buffers so that their destructors are registered now (see
/// `kernels::prepare_thread`).
pub(super) fn prepare_thread() {
    SCRATCH.with(|_| ());
    PANELS.with(|_| ());
    ACTS.with(|_| ());
    PICKED.with(|_| ());
}

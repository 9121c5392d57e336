//! Per-head products with f32 activations: y[t, h] = W_h·x[t, h] for every head h of n rows, the
//! heads' inputs and outputs interleaved per row (x [n, heads, x_step] with each head's input
//! leading its x_step values, y [n, heads, y_step] likewise; every W_h [out_w, in_w]). MLA's
//! W_UK / W_UV products.
//!
//! * Few rows (below `GEMM_MIN_ROWS`): per head, its inputs gathered, the float product's
//!   matrix-vector strategy on one thread (`gemm::float_gemv_here`), its outputs scattered; the
//!   heads split over the pool's threads.
//! * Many rows: every head's weights widened once into panels of NR output columns
//!   (wp[h][p][k·NR + j] = W_h[p·NR + j, k], zero past out_w), then MR rows × NR outputs tiles
//!   that read the rows of x where they are and write y where it is; the work is split by rows.
//!   The tile sums each output over k ascending in one chain from zero, as the GEMM strategy
//!   does, so the result is that of one float product per head, and independent of the split.

use super::dispatch::Kernels;
use super::gemm::{float_gemv_here, GEMM_MIN_ROWS};
use super::mat::Mat;
use super::par::with_buffer;
use super::table::{Operand, Table, MR, NR};
use rayon::prelude::*;
use std::cell::RefCell;

thread_local! {
    /// The calling thread's widened weight panels ([heads, out_w / NR, in_w, NR]).
    static PANELS: RefCell<Vec<f32>> = const { RefCell::new(Vec::new()) };
}

/// Below this many multiply-adds a call runs on the calling thread.
const PAR_MIN_WORK: usize = 1 << 15;

impl Kernels {
    /// y[(t·heads + h)·y_step ..][..out_w] = mats[h]·x[(t·heads + h)·x_step ..][..in_w] for
    /// every head h and row t < n (every mats[h] [out_w, in_w]; x_step ≥ in_w, y_step ≥ out_w;
    /// y's other values are left as they are), the activations meeting the weights as f32
    /// whatever the mode: per head the same result as `matmul` in `Float` mode.
    pub fn matmul_heads(&self, mats: &[Mat<'_>], x: (&[f32], usize), n: usize, y: (&mut [f32], usize)) {
        product(self.table(), mats, x, n, y)
    }
}

/// y = the per-head products of `mats` over the n rows of x (see the module comment).
fn product(t: &Table, mats: &[Mat<'_>], (x, x_step): (&[f32], usize), n: usize, (y, y_step): (&mut [f32], usize)) {
    let Some(first) = mats.first() else { return };
    let (out_w, in_w, heads) = (first.rows(), first.cols(), mats.len());
    for w in mats {
        assert!((w.rows(), w.cols()) == (out_w, in_w), "per-head product: head shapes differ");
    }
    assert!(x_step >= in_w && y_step >= out_w, "per-head product: steps shorter than a head");
    assert!(x.len() >= n * heads * x_step && y.len() >= n * heads * y_step, "per-head product: x or y too short");
    if n == 0 || out_w == 0 {
        return;
    }
    let shape = Shape { heads, in_w, out_w, x_step, y_step };
    if n < GEMM_MIN_ROWS || in_w == 0 {
        return gathered(t, mats, x, n, y, shape);
    }
    let parallel = crate::threads::current() > 1 && n * heads * in_w * out_w >= PAR_MIN_WORK;
    let np = out_w.div_ceil(NR);
    with_buffer(&PANELS, |wp| {
        wp.resize(heads * np * in_w * NR, 0.0);
        let pack = |(w, dst): (&Mat<'_>, &mut [f32])| pack_head(t, *w, dst);
        if parallel {
            mats.par_iter().zip(wp.par_chunks_mut(np * in_w * NR)).for_each(pack);
        } else {
            mats.iter().zip(wp.chunks_mut(np * in_w * NR)).for_each(pack);
        }
        let wp: &[f32] = wp;
        let y = &mut y[..n * heads * y_step];
        // Rows per task: a multiple of MR, about four tasks per thread.
        let threads = crate::threads::current().max(1);
        let rows = n.div_ceil(4 * threads).div_ceil(MR).max(1) * MR;
        let run = |(i, ys): (usize, &mut [f32])| {
            let r0 = i * rows;
            Block { t, wp, x, shape }.run(r0..r0 + ys.len() / (heads * y_step), ys);
        };
        if parallel {
            y.par_chunks_mut(rows * heads * y_step).enumerate().for_each(run);
        } else {
            y.chunks_mut(rows * heads * y_step).enumerate().for_each(run);
        }
    });
}

/// wp ([out_w / NR, in_w, NR]) = the panels of one head's weights w ([out_w, in_w]).
fn pack_head(t: &Table, w: Mat<'_>, wp: &mut [f32]) {
    let (out_w, in_w) = (w.rows(), w.cols());
    let mut rows = vec![0f32; NR * in_w];
    for (p, panel) in wp.chunks_exact_mut(in_w * NR).enumerate() {
        let r = p * NR..(p * NR + NR).min(out_w);
        (t.mat(w.dtype()).widen)(w, r.clone(), 0, &mut rows[..r.len() * in_w]);
        for j in 0..NR {
            for k in 0..in_w {
                panel[k * NR + j] = if j < r.len() { rows[j * in_w + k] } else { 0.0 };
            }
        }
    }
}

/// The heads, their input and output widths, and the steps between heads in x and y.
#[derive(Clone, Copy)]
struct Shape {
    heads: usize,
    in_w: usize,
    out_w: usize,
    x_step: usize,
    y_step: usize,
}

/// The products of one task: packed weights, inputs, and the shape.
struct Block<'a> {
    t: &'a Table,
    wp: &'a [f32],
    x: &'a [f32],
    shape: Shape,
}

impl Block<'_> {
    /// ys ([rows, heads, y_step]) = the products of x's rows `rows`, MR rows at a time: whole
    /// tiles straight into ys (zeroed first), a partial one (last rows, or last outputs) through
    /// a scratch tile.
    fn run(&self, rows: std::ops::Range<usize>, ys: &mut [f32]) {
        let Block { t, wp, x, shape: Shape { heads, in_w, out_w, x_step, y_step } } = *self;
        let (ld, np) = (heads * y_step, out_w.div_ceil(NR));
        for out in ys.chunks_exact_mut(y_step) {
            out[..out_w].fill(0.0);
        }
        let mut a = vec![0f32; MR * in_w];
        let mut c = vec![0f32; MR * NR];
        for h in 0..heads {
            let panels = &wp[h * np * in_w * NR..(h + 1) * np * in_w * NR];
            for t0 in rows.clone().step_by(MR) {
                let mr = MR.min(rows.end - t0);
                for (i, dst) in a.chunks_exact_mut(in_w).enumerate() {
                    match i < mr {
                        true => dst.copy_from_slice(&x[((t0 + i) * heads + h) * x_step..][..in_w]),
                        false => dst.fill(0.0),
                    }
                }
                let at = (t0 - rows.start) * ld + h * y_step;
                for (p, panel) in panels.chunks_exact(in_w * NR).enumerate() {
                    let nr = NR.min(out_w - p * NR);
                    if mr == MR && nr == NR {
                        (t.tile)(Operand::new(&a, in_w), Operand::new(panel, NR), in_w, &mut ys[at + p * NR..], ld, NR);
                        continue;
                    }
                    c.fill(0.0);
                    (t.tile)(Operand::new(&a, in_w), Operand::new(panel, NR), in_w, &mut c, NR, NR);
                    for i in 0..mr {
                        ys[at + i * ld + p * NR..][..nr].copy_from_slice(&c[i * NR..i * NR + nr]);
                    }
                }
            }
        }
    }
}

/// Few rows: per head, its inputs gathered, the float product on one thread
/// (`gemm::float_gemv_here`), its outputs scattered (at one row read and written in place); the
/// heads split over the pool's threads when the call is big enough: one fork and join per call,
/// where a parallel product per head forked and joined per head and per 64 output rows (32 times
/// per DeepSeek-V2-Lite layer at decode, for 1.3 MB of weights).
fn gathered(t: &Table, mats: &[Mat<'_>], x: &[f32], n: usize, y: &mut [f32], shape: Shape) {
    let Shape { heads, in_w, out_w, x_step, y_step } = shape;
    let parallel = crate::threads::current() > 1 && n * heads * in_w * out_w >= PAR_MIN_WORK;
    if n == 1 {
        // One row (decode): each head's input and output lie contiguous in x and y already.
        let one = |(h, yh): (usize, &mut [f32])| float_gemv_here(t, mats[h], &x[h * x_step..][..in_w], 1, yh);
        let y = &mut y[..heads * y_step];
        match parallel {
            true => y.par_chunks_mut(y_step).enumerate().for_each(one),
            false => y.chunks_mut(y_step).enumerate().for_each(one),
        }
        return;
    }
    // Every head's outputs, [heads, n, out_w].
    let mut ys = vec![0f32; heads * n * out_w];
    let one = |(h, yh): (usize, &mut [f32])| {
        let xin: Vec<f32> = (0..n).flat_map(|tk| &x[(tk * heads + h) * x_step..][..in_w]).copied().collect();
        float_gemv_here(t, mats[h], &xin, n, yh);
    };
    match parallel {
        true => ys.par_chunks_mut(n * out_w).enumerate().for_each(one),
        false => ys.chunks_mut(n * out_w).enumerate().for_each(one),
    }
    for (h, yh) in ys.chunks_exact(n * out_w).enumerate() {
        for (tk, out) in yh.chunks_exact(out_w).enumerate() {
            y[(tk * heads + h) * y_step..][..out_w].copy_from_slice(out);
        }
    }
}

/// Touch this thread's buffer so that its destructor is registered now (see
/// `kernels::prepare_thread`).
pub(super) fn prepare_thread() {
    PANELS.with(|_| ());
}

#[cfg(test)]
mod tests {
    use super::super::actq::QuantActivations;
    use super::super::dispatch::available_paths;
    use super::super::tests::sample;
    use super::*;
    use crate::format::DType;

    /// Per head, the gathered rows through `matmul` in Float mode into y ([n, heads, y_step],
    /// the gaps 7.0): the specification.
    fn one_by_one(k: &Kernels, mats: &[Mat<'_>], (x, x_step): (&[f32], usize), n: usize, y_step: usize) -> Vec<f32> {
        let (heads, in_w, out_w) = (mats.len(), mats[0].cols(), mats[0].rows());
        let mut y = vec![7.0f32; n * heads * y_step];
        for (h, &w) in mats.iter().enumerate() {
            let xin: Vec<f32> = (0..n).flat_map(|t| x[(t * heads + h) * x_step..][..in_w].to_vec()).collect();
            let mut yout = vec![0f32; n * out_w];
            k.matmul(w, &xin, n, &mut yout);
            for t in 0..n {
                y[(t * heads + h) * y_step..][..out_w].copy_from_slice(&yout[t * out_w..(t + 1) * out_w]);
            }
        }
        y
    }

    /// Few rows of block-quantised heads (q5_0, q8_0 and q4_k, widened to f32 by blocks): 4 heads
    /// of [67, 256], enough work for the heads to split over the threads even at one row, equal
    /// one product per head bit for bit on 1, 2 and 3 threads.
    #[test]
    fn few_rows_of_quantised_heads_split_over_threads_equal_one_product_per_head() {
        let (heads, out_w, in_w, x_step, y_step) = (4, 67, 256, 259, 69);
        assert!(heads * out_w * in_w >= PAR_MIN_WORK, "one row is enough to split");
        let f = sample(heads * out_w * in_w, 3);
        let x = sample(3 * heads * x_step, 4);
        for path in available_paths() {
            let k = Kernels::on(path, QuantActivations::Reduced).expect("available");
            let float = k.with_act(QuantActivations::Float);
            for dtype in [DType::Q5_0, DType::Q8_0, DType::Q4K] {
                let per = |i: usize| (i * out_w * in_w)..((i + 1) * out_w * in_w);
                let bytes: Vec<Vec<u8>> = (0..heads).map(|i| dtype.encode(&f[per(i)], in_w)).collect();
                let mats: Vec<Mat<'_>> =
                    bytes.iter().map(|b| Mat::new(dtype, out_w, in_w, b).expect("binds")).collect();
                for n in [1, 3] {
                    let want = one_by_one(&float, &mats, (&x, x_step), n, y_step);
                    for threads in [1, 2, 3] {
                        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
                        let mut y = vec![7.0f32; n * heads * y_step];
                        pool.install(|| k.matmul_heads(&mats, (&x, x_step), n, (&mut y, y_step)));
                        assert_eq!(y, want, "{path:?} {dtype} n {n}, {threads} threads");
                    }
                }
            }
        }
    }

    #[test]
    fn per_head_products_equal_one_product_per_head_bit_for_bit() {
        // 3 heads of [37, 40] (outputs not a multiple of NR), rows on both sides of the GEMM
        // threshold and not a multiple of MR; bf16 and f32 weights; heads packed and with gaps
        // between them (left alone); 1 and 3 threads.
        let (heads, out_w, in_w) = (3, 37, 40);
        let f = sample(heads * out_w * in_w, 1);
        let bf: Vec<u16> = f.iter().map(|&v| half::bf16::from_f32(v).to_bits()).collect();
        let x = sample(101 * heads * (in_w + 3), 2);
        for path in available_paths() {
            let k = Kernels::on(path, QuantActivations::Reduced).expect("available");
            let float = k.with_act(QuantActivations::Float);
            let per = |i: usize| (i * out_w * in_w)..((i + 1) * out_w * in_w);
            let as_f32: Vec<Mat<'_>> = (0..heads).map(|i| Mat::f32s(&f[per(i)], out_w, in_w)).collect();
            let as_bf16: Vec<Mat<'_>> =
                (0..heads).map(|i| Mat::halves(DType::BF16, &bf[per(i)], out_w, in_w)).collect();
            for (name, mats) in [("f32", &as_f32), ("bf16", &as_bf16)] {
                for (n, (x_step, y_step)) in [1, 5, GEMM_MIN_ROWS, 101]
                    .into_iter()
                    .flat_map(|n| [(in_w, out_w), (in_w + 3, out_w + 2)].map(|steps| (n, steps)))
                {
                    let want = one_by_one(&float, mats, (&x, x_step), n, y_step);
                    for threads in [1, 3] {
                        let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
                        let mut y = vec![7.0f32; n * heads * y_step];
                        pool.install(|| k.matmul_heads(mats, (&x, x_step), n, (&mut y, y_step)));
                        assert_eq!(y, want, "{path:?} {name} n {n} steps {x_step} {y_step}, {threads} threads");
                    }
                }
            }
        }
    }
}

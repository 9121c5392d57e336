//! Row-wise work on activation matrices ([n, dim]): RMSNorm (with a shifted gain for
//! zero-centred norms) and LayerNorm through the scalar reference rows, and bias rows added —
//! each row on its own, a prefill's rows on the calling pool (the same result either way).

use super::{reference, Mat};

/// RMSNorm of each row of x ([n, dim], dim = w.len()) into y: y = x / sqrt(mean(x²) + eps) · w.
pub fn rmsnorm(x: &[f32], w: Mat<'_>, eps: f32, y: &mut [f32]) {
    rmsnorm_shifted(x, w, 0.0, eps, y);
}

/// The gain `shift + w` of a norm as f32 ([w.len()]).
fn norm_gain(w: Mat<'_>, shift: f32) -> Vec<f32> {
    let mut g = vec![0f32; w.len()];
    w.dequantize(0, &mut g);
    g.iter_mut().for_each(|g| *g += shift);
    g
}

/// Values from which row-wise work runs on the calling pool (a prefill's rows; a decode step's
/// stay on the calling thread).
const PAR_MIN_VALUES: usize = 1 << 16;

fn on_pool(values: usize) -> bool {
    values >= PAR_MIN_VALUES && crate::threads::current() > 1
}

/// f(row) for every `width`-wide row of x, on the pool when x is big enough.
fn each_row(x: &mut [f32], width: usize, f: impl Fn(&mut [f32]) + Sync + Send) {
    if on_pool(x.len()) {
        use rayon::prelude::*;
        x.par_chunks_exact_mut(width).for_each(f);
    } else {
        x.chunks_exact_mut(width).for_each(f);
    }
}

/// RMSNorm of each row of x ([n, w.len()]) with gain `shift + w` (zero-centred norms store
/// gain − 1: shift 1).
pub fn rmsnorm_shifted(x: &[f32], w: Mat<'_>, shift: f32, eps: f32, y: &mut [f32]) {
    let dim = w.len();
    let g = norm_gain(w, shift);
    let row = |(xr, yr): (&[f32], &mut [f32])| reference::rmsnorm_row(xr, &g, eps, yr);
    if on_pool(x.len()) {
        use rayon::prelude::*;
        x.par_chunks_exact(dim).zip(y.par_chunks_exact_mut(dim)).for_each(row);
    } else {
        x.chunks_exact(dim).zip(y.chunks_exact_mut(dim)).for_each(row);
    }
}

/// LayerNorm of each row of x ([n, dim], dim = w.len() = b.len()) into y.
pub fn layernorm(x: &[f32], w: Mat<'_>, b: Mat<'_>, eps: f32, y: &mut [f32]) {
    let dim = w.len();
    let (mut wf, mut bf) = (vec![0f32; dim], vec![0f32; dim]);
    w.dequantize(0, &mut wf);
    b.dequantize(0, &mut bf);
    let row = |(xr, yr): (&[f32], &mut [f32])| reference::layernorm_row(xr, &wf, &bf, eps, yr);
    if on_pool(x.len()) {
        use rayon::prelude::*;
        x.par_chunks_exact(dim).zip(y.par_chunks_exact_mut(dim)).for_each(row);
    } else {
        x.chunks_exact(dim).zip(y.chunks_exact_mut(dim)).for_each(row);
    }
}

/// In-place RMSNorm of each row of x ([n, dim]).
pub fn rmsnorm_inplace(x: &mut [f32], w: Mat<'_>, eps: f32) {
    rmsnorm_inplace_shifted(x, w, 0.0, eps);
}

/// In-place RMSNorm of each row of x ([n, dim]) with gain `shift + w`.
pub fn rmsnorm_inplace_shifted(x: &mut [f32], w: Mat<'_>, shift: f32, eps: f32) {
    let g = norm_gain(w, shift);
    each_row(x, g.len(), |xr| {
        let inv = reference::rms_inverse(xr, eps);
        xr.iter_mut().zip(&g).for_each(|(v, &gi)| *v = gi * (*v * inv));
    });
}

/// x[t, :] += b for every row t of x ([n, b.len()]).
pub fn add_bias(x: &mut [f32], b: Mat<'_>) {
    let mut bf = vec![0f32; b.len()];
    b.dequantize(0, &mut bf);
    each_row(x, bf.len(), |r| r.iter_mut().zip(&bf).for_each(|(v, &bi)| *v += bi));
}

/// x[t, :] += b[row, :] for every row t of x ([n, b.cols()]); b is [rows, cols].
pub fn add_bias_row(x: &mut [f32], b: Mat<'_>, row: usize) {
    let mut bf = vec![0f32; b.cols()];
    b.dequantize(row * b.cols(), &mut bf);
    each_row(x, bf.len(), |r| r.iter_mut().zip(&bf).for_each(|(v, &bi)| *v += bi));
}

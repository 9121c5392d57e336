//! The gated delta rule of one value head over a run of tokens, in its two forms: recurrent (one
//! token at a time, decode; transformers `torch_recurrent_gated_delta_rule`) and chunked (chunks
//! of `CHUNK` tokens with a triangular solve inside each, prefill; `torch_chunk_gated_delta_rule`).
//! Both read and advance the head's state S [k_dim, v_dim]; q and k come l2-normalised (q also
//! scaled by k_dim^-½), g is the log decay (≤ 0) and beta the write strength of each token.
//!
//! Per token: S ← S·exp(g);  S ← S + k ⊗ β(v − Sᵀk);  o = Sᵀq.
//!
//! The vector work runs on the kernel table: the recurrent form is `Kernels::delta_step` per
//! token, the chunked form's products over a chunk the table's f32 matrix products
//! (`Kernels::matmul`; transposed operands copied) and its triangular solve `axpy_f32`.

use crate::kernels::{DeltaToken, Kernels, Mat};

/// Tokens per chunk of the chunked form (transformers' default `chunk_size`).
pub const CHUNK: usize = 64;

/// One head's inputs over T tokens.
pub struct HeadRun<'a> {
    /// [T, k_dim]
    pub q: &'a [f32],
    /// [T, k_dim]
    pub k: &'a [f32],
    /// [T, v_dim]
    pub v: &'a [f32],
    /// [T] log decay
    pub g: &'a [f32],
    /// [T]
    pub beta: &'a [f32],
}

/// Token by token: `out` [T, v_dim] receives each token's output; `s` [k_dim, v_dim] advances,
/// read from `from` when given (the first token then writes `s` whole).
pub fn recurrent(kern: &Kernels, run: &HeadRun<'_>, mut from: Option<&[f32]>, s: &mut [f32], out: &mut [f32]) {
    let dv = out.len() / run.g.len().max(1);
    let dk = s.len() / dv.max(1);
    for t in 0..run.g.len() {
        let (q, k, v) = (&run.q[t * dk..(t + 1) * dk], &run.k[t * dk..(t + 1) * dk], &run.v[t * dv..(t + 1) * dv]);
        let tok = DeltaToken { q, k, v, decay: run.g[t].exp(), beta: run.beta[t] };
        kern.delta_step(from.take(), s, &tok, &mut out[t * dv..(t + 1) * dv]);
    }
}

/// In chunks of `CHUNK` tokens: the same outputs and final state as `recurrent`, with the
/// within-chunk updates condensed by a unit-lower-triangular solve (the UT transform).
pub fn chunked(kern: &Kernels, run: &HeadRun<'_>, s: &mut [f32], out: &mut [f32]) {
    let t_all = run.g.len();
    let dv = out.len() / t_all.max(1);
    let dk = s.len() / dv.max(1);
    let mut start = 0;
    while start < t_all {
        let end = (start + CHUNK).min(t_all);
        let sub = HeadRun {
            q: &run.q[start * dk..end * dk],
            k: &run.k[start * dk..end * dk],
            v: &run.v[start * dv..end * dv],
            g: &run.g[start..end],
            beta: &run.beta[start..end],
        };
        chunk(kern, &sub, s, &mut out[start * dv..end * dv], dk, dv);
        start = end;
    }
}

/// y [m, n] = x [m, k] · wᵀ for w [n, k], both row-major: the kernel table's f32 product.
fn mul_nt(kern: &Kernels, x: &[f32], m: usize, w: &[f32], n: usize, y: &mut [f32]) {
    let k = w.len() / n.max(1);
    kern.matmul(Mat::f32s(w, n, k), &x[..m * k], m, &mut y[..m * n]);
}

/// Magnitudes below which the chunked form's matrix operands are taken as 0. A decay over a chunk
/// can reach e^−100 and beyond (with random weights, per token e^−5): the factors between then
/// fall among the subnormal floats, and a product over subnormal operands runs at a hundredth of
/// its speed (f32 64 × 128 × 128 on the Emerald Rapids VM: 55 → 0.54 G multiply-adds/s). Terms
/// this small change no output within f32's precision of the terms beside them (a token's own
/// term has decay 1).
const FLUSH: f32 = 1e-30;

/// x, or 0 when |x| < `FLUSH`.
fn flushed(x: f32) -> f32 {
    if x.abs() < FLUSH {
        0.0
    } else {
        x
    }
}

/// Row i of x ([.., width]) times f(i), flushed.
fn scaled_rows(x: &[f32], width: usize, f: impl Fn(usize) -> f32) -> Vec<f32> {
    let mut out = Vec::with_capacity(x.len());
    for (i, row) in x.chunks_exact(width).enumerate() {
        let a = f(i);
        out.extend(row.iter().map(|v| flushed(v * a)));
    }
    out
}

/// x [r, c] transposed to [c, r], flushed.
fn transposed(x: &[f32], r: usize, c: usize) -> Vec<f32> {
    let mut t = vec![0f32; r * c];
    for (i, row) in x.chunks_exact(c).take(r).enumerate() {
        for (j, &v) in row.iter().enumerate() {
            t[j * r + i] = flushed(v);
        }
    }
    t
}

/// One chunk of L ≤ CHUNK tokens (a shorter last chunk equals transformers' zero padding), as
/// matrix products over the chunk (K, Q [L, dk], V [L, dv], S [dk, dv]; e_t = e^cum_t):
///   A = strict_lower(β_i (k_i·k_j) e^(cum_i − cum_j)),  T = (I + A)⁻¹
///   U = T (β V),  W = T (β K e),  V_new = U − W S
///   out = (Q e) S + lower(q_i·k_j e^(cum_i − cum_j)) V_new
///   S ← S e^cum_last + (K e^(cum_last − cum))ᵀ V_new
fn chunk(kern: &Kernels, run: &HeadRun<'_>, s: &mut [f32], out: &mut [f32], dk: usize, dv: usize) {
    let l = run.g.len();
    // cum[t]: log decay from the chunk's start through t.
    let mut cum = vec![0f32; l];
    let mut acc = 0f32;
    for (c, &g) in cum.iter_mut().zip(run.g) {
        acc += g;
        *c = acc;
    }
    let cum = &cum[..];
    let (k, q, v) =
        (scaled_rows(&run.k[..l * dk], dk, |_| 1.0), scaled_rows(&run.q[..l * dk], dk, |_| 1.0), &run.v[..l * dv]);
    let (k, q) = (&k[..], &q[..]);
    let decay = |i: usize, j: usize| (cum[i] - cum[j]).exp();
    // T = (I + A)⁻¹ by forward substitution (unit lower triangular): row i of T is e_i − Σ_{m<i}
    // A[i][m] T[m].
    let mut kk = vec![0f32; l * l];
    mul_nt(kern, k, l, k, l, &mut kk);
    let mut t = vec![0f32; l * l];
    for i in 0..l {
        t[i * l + i] = 1.0;
        for m in 0..i {
            let a = flushed(run.beta[i] * kk[i * l + m] * decay(i, m));
            let (done, row) = t.split_at_mut(i * l);
            kern.axpy_f32(-a, &done[m * l..m * l + i], &mut row[..i]);
        }
        t[i * l..i * l + i].iter_mut().for_each(|x| *x = flushed(*x));
    }
    // U = T (β V), W = T (β K e).
    let bv = scaled_rows(v, dv, |i| run.beta[i]);
    let bke = scaled_rows(k, dk, |i| run.beta[i] * cum[i].exp());
    let (mut u, mut w) = (vec![0f32; l * dv], vec![0f32; l * dk]);
    mul_nt(kern, &t, l, &transposed(&bv, l, dv), dv, &mut u);
    mul_nt(kern, &t, l, &transposed(&bke, l, dk), dk, &mut w);
    // V_new = U − W S: what the chunk writes beyond what the carried state predicts.
    let st = transposed(s, dk, dv);
    let mut pred = vec![0f32; l * dv];
    w.iter_mut().for_each(|x| *x = flushed(*x));
    mul_nt(kern, &w, l, &st, dv, &mut pred);
    u.iter_mut().zip(&pred).for_each(|(x, p)| *x -= p);
    // out = (Q e) S + P V_new, P[i][j] = (q_i·k_j) e^(cum_i − cum_j) for j ≤ i.
    let qe = scaled_rows(q, dk, |i| cum[i].exp());
    mul_nt(kern, &qe, l, &st, dv, out);
    let mut p = vec![0f32; l * l];
    mul_nt(kern, q, l, k, l, &mut p);
    for i in 0..l {
        for j in 0..l {
            p[i * l + j] = if j <= i { flushed(p[i * l + j] * decay(i, j)) } else { 0.0 };
        }
    }
    let vt = transposed(&u, l, dv);
    mul_nt(kern, &p, l, &vt, dv, &mut pred);
    out[..l * dv].iter_mut().zip(&pred).for_each(|(o, x)| *o += x);
    // S ← S e^cum_last + (K e^(cum_last − cum))ᵀ V_new.
    let last = cum[l - 1];
    let kf = scaled_rows(k, dk, |j| (last - cum[j]).exp());
    let mut ds = vec![0f32; dk * dv];
    mul_nt(kern, &transposed(&kf, l, dk), dk, &vt, dv, &mut ds);
    let e_last = last.exp();
    s.iter_mut().zip(&ds).for_each(|(x, d)| *x = flushed(*x * e_last + d));
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kernels::{available_paths, CpuPath, QuantActivations};
    use crate::rng::Rng;

    fn unit(rng: &mut Rng, n: usize, dim: usize) -> Vec<f32> {
        let mut v: Vec<f32> = (0..n * dim).map(|_| (rng.next_f64() as f32) * 2.0 - 1.0).collect();
        for row in v.chunks_exact_mut(dim) {
            let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
            row.iter_mut().for_each(|x| *x /= norm);
        }
        v
    }

    /// On every kernel path, the chunked form equals the recurrent one (outputs and final
    /// state), over several chunks with a partial last one, from a non-zero state, with mild and
    /// with strong decays; and both
    /// equal the scalar path's within 1e-4 (summation order differs).
    #[test]
    fn chunked_equals_recurrent_on_every_path() {
        let diff = |a: &[f32], b: &[f32]| a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        // The third: decays of up to e^−5 per token, whose products over a chunk reach the
        // subnormal floats (flushed in the chunked form, kept in the recurrent one).
        for (t, dk, dv, decay) in [(150, 8, 6, 0.2), (130, 32, 48, 0.2), (140, 16, 16, 5.0)] {
            let mut rng = Rng::new(7);
            let (q, k) = (unit(&mut rng, t, dk), unit(&mut rng, t, dk));
            let v: Vec<f32> = (0..t * dv).map(|_| (rng.next_f64() as f32) * 2.0 - 1.0).collect();
            let g: Vec<f32> = (0..t).map(|_| -decay * (rng.next_f64() as f32)).collect();
            let beta: Vec<f32> = (0..t).map(|_| rng.next_f64() as f32).collect();
            let s0: Vec<f32> = (0..dk * dv).map(|_| (rng.next_f64() as f32) - 0.5).collect();
            let run = HeadRun { q: &q, k: &k, v: &v, g: &g, beta: &beta };
            let mut scalar = None;
            for path in available_paths() {
                let kern = Kernels::on(path, QuantActivations::default()).unwrap();
                let (mut s1, mut s2) = (vec![0f32; dk * dv], s0.clone());
                let (mut o1, mut o2) = (vec![0f32; t * dv], vec![0f32; t * dv]);
                recurrent(&kern, &run, Some(&s0), &mut s1, &mut o1);
                chunked(&kern, &run, &mut s2, &mut o2);
                assert!(diff(&o1, &o2) < 1e-4, "{path:?}: outputs differ by {}", diff(&o1, &o2));
                assert!(diff(&s1, &s2) < 1e-4, "{path:?}: states differ by {}", diff(&s1, &s2));
                assert!(o1.iter().any(|&x| x.abs() > 0.1), "a test that computes nothing");
                let (ref_o, ref_s) = scalar.get_or_insert_with(|| (o1.clone(), s1.clone()));
                assert!(
                    path == CpuPath::Generic || diff(ref_o, &o2).max(diff(ref_s, &s2)) < 1e-4,
                    "{path:?} vs scalar"
                );
            }
        }
    }
}

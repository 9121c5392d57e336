//! The gated delta rule of one value head over a run of tokens, in its two forms: recurrent (one
//! token at a time, decode; transformers `torch_recurrent_gated_delta_rule`) and chunked (chunks
//! of `CHUNK` tokens with a triangular solve inside each, prefill; `torch_chunk_gated_delta_rule`).
//! Both read and advance the head's state S [k_dim, v_dim]; q and k come l2-normalised (q also
//! scaled by k_dim^-½), g is the log decay (≤ 0) and beta the write strength of each token.
//!
//! Per token: S ← S·exp(g);  S ← S + k ⊗ β(v − Sᵀk);  o = Sᵀq.
//!
//! The vector work runs on the kernel table: the recurrent form is `Kernels::delta_step` per
//! token, the chunked form's dot products and row updates `dot_f32` / `axpy_f32`.

use crate::kernels::{DeltaToken, Kernels};

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

/// out[j] += Σ_i x[i] · s[i, j] for s [x.len(), out.len()].
fn acc_xs(kern: &Kernels, x: &[f32], s: &[f32], out: &mut [f32]) {
    for (&xi, row) in x.iter().zip(s.chunks_exact(out.len())) {
        kern.axpy_f32(xi, row, out);
    }
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

/// One chunk of L ≤ CHUNK tokens (a shorter last chunk equals transformers' zero padding).
fn chunk(kern: &Kernels, run: &HeadRun<'_>, s: &mut [f32], out: &mut [f32], dk: usize, dv: usize) {
    let l = run.g.len();
    // cum[t]: log decay from the chunk's start through t.
    let mut cum = vec![0f32; l];
    let mut acc = 0f32;
    for (c, &g) in cum.iter_mut().zip(run.g) {
        acc += g;
        *c = acc;
    }
    let kt = |t: usize| &run.k[t * dk..(t + 1) * dk];
    let qt = |t: usize| &run.q[t * dk..(t + 1) * dk];
    // u = (I + A)⁻¹ (β v) and w = (I + A)⁻¹ (β k e^cum), A[i][j] = β_i (k_i·k_j) e^(cum_i − cum_j), j < i.
    let mut u = vec![0f32; l * dv];
    let mut w = vec![0f32; l * dk];
    for i in 0..l {
        let b = run.beta[i];
        let (ui, wi) = (i * dv, i * dk);
        u[ui..ui + dv].iter_mut().zip(&run.v[ui..ui + dv]).for_each(|(x, &v)| *x = v * b);
        let e = cum[i].exp();
        w[wi..wi + dk].iter_mut().zip(kt(i)).for_each(|(x, &k)| *x = k * b * e);
        for j in 0..i {
            let a = b * kern.dot_f32(kt(i), kt(j)) * (cum[i] - cum[j]).exp();
            let (done_u, row_u) = u.split_at_mut(ui);
            kern.axpy_f32(-a, &done_u[j * dv..(j + 1) * dv], &mut row_u[..dv]);
            let (done_w, row_w) = w.split_at_mut(wi);
            kern.axpy_f32(-a, &done_w[j * dk..(j + 1) * dk], &mut row_w[..dk]);
        }
    }
    // v_new = u − w·S: what the chunk writes beyond what the carried state predicts.
    let mut pred = vec![0f32; dv];
    for i in 0..l {
        pred.fill(0.0);
        acc_xs(kern, &w[i * dk..(i + 1) * dk], s, &mut pred);
        kern.axpy_f32(-1.0, &pred, &mut u[i * dv..(i + 1) * dv]);
    }
    // out_i = (q_i e^cum_i)·S + Σ_{j ≤ i} (q_i·k_j) e^(cum_i − cum_j) v_new_j
    for i in 0..l {
        let o = &mut out[i * dv..(i + 1) * dv];
        o.fill(0.0);
        let qd: Vec<f32> = qt(i).iter().map(|&x| x * cum[i].exp()).collect();
        acc_xs(kern, &qd, s, o);
        for j in 0..=i {
            let a = kern.dot_f32(qt(i), kt(j)) * (cum[i] - cum[j]).exp();
            kern.axpy_f32(a, &u[j * dv..(j + 1) * dv], o);
        }
    }
    // S ← S e^cum_last + Σ_j (k_j e^(cum_last − cum_j)) ⊗ v_new_j
    let last = cum[l - 1];
    let decay = last.exp();
    s.iter_mut().for_each(|x| *x *= decay);
    for j in 0..l {
        let f = (last - cum[j]).exp();
        for (kj, row) in kt(j).iter().zip(s.chunks_exact_mut(dv)) {
            kern.axpy_f32(kj * f, &u[j * dv..(j + 1) * dv], row);
        }
    }
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
    /// state), over several chunks with a partial last one, from a non-zero state; and both
    /// equal the scalar path's within 1e-4 (summation order differs).
    #[test]
    fn chunked_equals_recurrent_on_every_path() {
        let diff = |a: &[f32], b: &[f32]| a.iter().zip(b).fold(0f32, |m, (x, y)| m.max((x - y).abs()));
        for (t, dk, dv) in [(150, 8, 6), (130, 32, 48)] {
            let mut rng = Rng::new(7);
            let (q, k) = (unit(&mut rng, t, dk), unit(&mut rng, t, dk));
            let v: Vec<f32> = (0..t * dv).map(|_| (rng.next_f64() as f32) * 2.0 - 1.0).collect();
            let g: Vec<f32> = (0..t).map(|_| -0.2 * (rng.next_f64() as f32)).collect();
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
